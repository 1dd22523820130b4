// A delete whose rollback recovery cannot finish (a session's legacy file or directory exists again
// in the collection) keeps its staging directory, whose old copy of the session comes back once the
// name is free: archiving, restoring and deleting that session are refused until the user keeps one
// copy, so nothing reports success while the staged copy can still return.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { CorruptSessionError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { conversation, legacySessionBytes } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const ID = "11111111-2222-4333-8444-555555555555";
const OTHER = "22222222-3333-4444-8555-666666666666";
const LEGACY = `${COLLECTION}/${ID}.jsonl`;
const DIR = `${COLLECTION}/${ID}`;
const decoder = new TextDecoder();

function storeOn(fs: MemoryFs, sessionDir?: string): SessionStore {
  return new SessionStore({
    fs,
    agentDir: AGENT,
    ...(sessionDir === undefined ? {} : { sessionDir }),
  });
}

/** The names of the collection's entries, sorted. */
async function names(fs: MemoryFs): Promise<string[]> {
  return (await fs.readDir(COLLECTION)).map((entry) => entry.name).sort();
}

/** Copies the directory tree `from` to `to` (files only, as a writer outside the store would). */
async function copyTree(fs: MemoryFs, from: string, to: string): Promise<void> {
  await fs.mkdir(to, { mode: 0o700 });
  for (const entry of await fs.readDir(from)) {
    if (entry.kind === "directory") {
      await copyTree(fs, `${from}/${entry.name}`, `${to}/${entry.name}`);
    } else await fs.writeFile(`${to}/${entry.name}`, await fs.readFile(`${from}/${entry.name}`));
  }
}

/**
 * The kept state: session `ID` (a never-migrated legacy file, or a migrated session with its
 * directory and backup) archived beside an archived session `OTHER`; its delete crashed once its
 * last entry (`staged`: the legacy file, or the directory) was moved into the staging directory,
 * before the commit marker; then that name was written again in place (by the version-2 Loop, or
 * another writer outside the store), so recovery cannot roll the delete back and keeps it.
 */
async function keptState(staged: "legacy file" | "directory"): Promise<{
  fs: MemoryFs;
  staging: string;
  old: Message[];
  again: Message[];
}> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  const old = conversation(1, "old");
  await fs.writeFile(LEGACY, legacySessionBytes(ID, CWD, old), { mode: 0o600 });
  await fs.writeFile(`${COLLECTION}/${OTHER}.jsonl`, legacySessionBytes(OTHER, CWD, old), {
    mode: 0o600,
  });
  if (staged === "directory") await (await storeOn(fs).open(LEGACY)).close();
  await storeOn(fs).archive.set(CWD, [ID, OTHER], true);
  fs.syncAll();
  const probe = fs.clone();
  probe.resetCounter();
  await storeOn(probe).archive.delete(CWD, [ID]);
  const moved = staged === "directory" ? DIR : LEGACY;
  const n = probe.operationLog.find((r) => r.op === "rename" && r.path === moved)!.number;
  const running = fs.clone();
  running.resetCounter();
  running.crashAfter(n);
  await assert.rejects(storeOn(running).archive.delete(CWD, [ID]));
  const crashed = running.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
  const staging = `${COLLECTION}/${
    (await names(crashed)).find((name) => name.startsWith(".delete-"))
  }`;
  const again = conversation(3, "again");
  if (staged === "directory") {
    await copyTree(crashed, `${staging}/${ID}`, DIR);
  } else {
    await crashed.writeFile(LEGACY, legacySessionBytes(ID, CWD, again), { mode: 0o600 });
  }
  const report = await storeOn(crashed).cleanup(CWD);
  assert.deepEqual(report.kept, [staging]);
  assert.deepEqual(report.restored, []);
  return { fs: crashed, staging, old, again: staged === "directory" ? old : again };
}

/** Refused with a `CorruptSessionError` naming the kept staging directory's journal. */
function refusedForKept(staging: string, verb: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.file, `${staging}/intent.json`);
    assert.ok(error.message.includes(`Cannot ${verb} session ${ID}`), error.message);
    assert.ok(error.message.includes("exists again in the collection"), error.message);
    assert.ok(error.message.includes("run cleanup"), error.message);
    return true;
  };
}

for (const staged of ["legacy file", "directory"] as const) {
  test(`a delete of a session whose ${staged} a kept delete staging directory holds is refused, and nothing of it comes back`, async () => {
    const { fs, staging, again } = await keptState(staged);
    const store = storeOn(fs);
    const tree = fs.snapshotTree("/");
    for (const archivedOnly of [true, false]) {
      await assert.rejects(
        store.archive.delete(CWD, [ID], { archivedOnly }),
        refusedForKept(staging, "delete"),
      );
      await assert.rejects(
        storeOn(fs, COLLECTION).archive.delete(undefined, [ID, OTHER], { archivedOnly }),
        refusedForKept(staging, "delete"),
      );
    }
    assert.deepEqual(fs.snapshotTree("/"), tree, "a refused delete changed something");
    // Recovery keeps reporting the staging directory, and the session in place is still listed.
    assert.deepEqual((await store.cleanup(CWD)).kept, [staging]);
    const listed = (await store.list(CWD)).find((s) => s.id === ID);
    assert.equal(listed?.messageCount, again.length);
    // Other sessions are deleted as before.
    await store.archive.delete(CWD, [OTHER]);
    assert.deepEqual((await store.list(CWD)).map((s) => s.id), [ID]);
    // The user keeps the copy in place (the staged one moved out of the collection): recovery
    // removes what is left of the staging directory, and the session deletes for good.
    for (const entry of await fs.readDir(staging)) {
      if (entry.name !== "intent.json") {
        await fs.remove(`${staging}/${entry.name}`, { recursive: true });
      }
    }
    assert.deepEqual((await store.cleanup(CWD)).kept, []);
    await store.archive.delete(CWD, [ID]);
    for (let round = 0; round < 2; round++) {
      assert.deepEqual((await store.cleanup(CWD)).restored, []);
      assert.deepEqual(await store.list(CWD), []);
    }
    assert.deepEqual(await names(fs), ["archive.json"]);
  });
}

test("keeping the staged copy of such a session instead brings back its old history, and then it deletes for good", async () => {
  const { fs, staging, old } = await keptState("legacy file");
  const store = storeOn(fs);
  // The user keeps the staged copy: the one in place goes; the next recovery rolls the delete
  // back, membership included.
  await fs.remove(LEGACY);
  assert.deepEqual((await store.cleanup(CWD)).restored, [staging]);
  const listed = (await store.list(CWD)).find((s) => s.id === ID);
  assert.equal(listed?.messageCount, old.length);
  assert.equal(listed?.archived, true);
  await store.archive.delete(CWD, [ID]);
  await store.cleanup(CWD);
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [OTHER]);
  assert.deepEqual(await names(fs), [`${OTHER}.jsonl`, "archive.json"]);
});

test("restoring or archiving a session whose legacy file a kept delete staging directory holds is refused, and membership stays as reported", async () => {
  const { fs, staging } = await keptState("legacy file");
  const store = storeOn(fs);
  const membership = decoder.decode(await fs.readFile(`${COLLECTION}/archive.json`));
  // The journal still restores the id's membership: every reader says archived.
  assert.equal(await store.archive.isArchived(CWD, ID), true);
  const tree = fs.snapshotTree("/");
  await assert.rejects(store.archive.set(CWD, [ID], false), refusedForKept(staging, "restore"));
  await assert.rejects(
    store.archive.set(CWD, [OTHER, ID], true),
    refusedForKept(staging, "archive"),
  );
  assert.deepEqual(fs.snapshotTree("/"), tree, "a refused archive change changed something");
  assert.equal(decoder.decode(await fs.readFile(`${COLLECTION}/archive.json`)), membership);
  assert.equal(await store.archive.isArchived(CWD, ID), true);
  assert.equal((await store.list(CWD)).find((s) => s.id === ID)?.archived, true);
  // Other sessions are archived and restored as before.
  await store.archive.set(CWD, [OTHER], false);
  assert.equal(await store.archive.isArchived(CWD, OTHER), false);
  // Once the user keeps one copy, restoring works and says what it did.
  await fs.remove(`${staging}/${ID}.jsonl`);
  await store.archive.set(CWD, [ID], false);
  assert.equal(await store.archive.isArchived(CWD, ID), false);
  assert.equal((await store.list(CWD)).find((s) => s.id === ID)?.archived, false);
  assert.ok(!(await names(fs)).some((name) => name.startsWith(".delete-")));
});

test("a delete of a session in place that a staged delete with an unreadable journal also holds is refused, naming the journal", async () => {
  const { fs, staging } = await keptState("legacy file");
  await fs.writeFile(`${staging}/intent.json`, new TextEncoder().encode("{"));
  const tree = fs.snapshotTree("/");
  // Listings report the session with the journal's error ...
  const listed = await storeOn(fs, COLLECTION).listDetailed(undefined, COLLECTION);
  assert.deepEqual(listed.failures.map((f) => [f.id, f.path]), [[ID, `${staging}/intent.json`]]);
  // ... and a delete that would remove only the copy in place is refused with it.
  await assert.rejects(
    storeOn(fs, COLLECTION).archive.delete(undefined, [ID], { archivedOnly: false }),
    (error: unknown) =>
      error instanceof CorruptSessionError && error.file === `${staging}/intent.json`,
  );
  assert.deepEqual(fs.snapshotTree("/"), tree);
});
