import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs, SimulatedCrash } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import {
  CorruptSessionError,
  InvalidArgumentError,
  SessionBusyError,
  SessionFormatError,
  SessionLockedError,
  SessionNotFoundError,
} from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { SessionNotArchivedError } from "../src/loop/archive.ts";
import type { SessionInfo } from "../src/loop/discovery.ts";
import type { ProcessProbe } from "../src/loop/lock.ts";
import type { Message } from "../src/loop/records/mod.ts";
import {
  crashAtEveryOperation,
  failAtEveryOperation,
  repeatsEarlierCrashState,
  SEEDS,
} from "./_crash.ts";
import { assistant, conversation, legacySessionBytes, probe, user } from "./_fixtures.ts";
import { hookedFs, withoutNoFollow } from "./_hooks.ts";
import { seedsAfter } from "./_soak.ts";

const CWD = "/work/project";
const OTHER = "/work/other";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const GLOBAL = "/data/chats";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function storeOn(fs: MemoryFs, extra: { sessionDir?: string; process?: ProcessProbe } = {}) {
  return new SessionStore({ fs, agentDir: AGENT, ...extra });
}

async function setup(): Promise<{ fs: MemoryFs; store: SessionStore }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(OTHER, { recursive: true });
  return { fs, store: storeOn(fs) };
}

async function saved(store: SessionStore, history: Message[], cwd = CWD): Promise<SessionManager> {
  const session = await store.create(cwd);
  await session.commit(history);
  await session.close();
  return session;
}

/** Writes the version-2 session `id` of `messages` into the collection; returns its path. */
async function writeLegacy(
  fs: MemoryFs,
  id: string,
  messages: readonly Message[],
): Promise<string> {
  const path = `${COLLECTION}/${id}.jsonl`;
  await fs.mkdir(COLLECTION, { recursive: true });
  await fs.writeFile(path, legacySessionBytes(id, CWD, messages));
  return path;
}

async function archiveJson(fs: MemoryFs, collection = COLLECTION): Promise<string> {
  return decoder.decode(await fs.readFile(`${collection}/archive.json`));
}

/**
 * The same filesystem seen by another process: a distinct object, so this process's in-memory
 * lock registrations (keyed by filesystem) do not apply to it; only lock files do.
 */
function otherProcessView(fs: MemoryFs): MemoryFs {
  return new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

test("set() archives and restores by membership only, in insertion order, idempotently", async () => {
  const { fs, store } = await setup();
  const a = await saved(store, [user("a")]);
  const b = await saved(store, [user("b")]);
  const sessionsBefore = fs.snapshotTree(a.getSessionPath());
  await store.archive.set(CWD, [b.id, a.id], true);
  assert.equal(await archiveJson(fs), JSON.stringify([b.id, a.id]) + "\n");
  assert.equal((await fs.stat(`${COLLECTION}/archive.json`)).mode, 0o600);
  await store.archive.set(CWD, [a.id, b.id], true);
  assert.equal(await archiveJson(fs), JSON.stringify([b.id, a.id]) + "\n");
  assert.equal(await store.archive.isArchived(CWD, a.id), true);
  await store.archive.set(CWD, [b.id], false);
  await store.archive.set(CWD, [b.id], false);
  assert.deepEqual(await store.archive.list(CWD), [a.id]);
  assert.equal(await store.archive.isArchived(CWD, b.id), false);
  assert.deepEqual(fs.snapshotTree(a.getSessionPath()), sessionsBefore);
  const listed = await store.list(CWD, undefined, { fast: true });
  assert.deepEqual(
    listed.map((s) => [s.id, s.archived]).sort(),
    [[a.id, true], [b.id, false]].sort(),
  );
});

test("set() rejects an invalid id or state before writing anything", async () => {
  const { fs, store } = await setup();
  const a = await saved(store, [user("a")]);
  const before = fs.snapshotTree(AGENT);
  await assert.rejects(store.archive.set(CWD, [a.id, "../escape"], true), InvalidArgumentError);
  await assert.rejects(store.archive.set(CWD, [a.id.toUpperCase()], true), InvalidArgumentError);
  await assert.rejects(
    store.archive.set(CWD, [a.id], "yes" as unknown as boolean),
    InvalidArgumentError,
  );
  await assert.rejects(store.archive.isArchived(CWD, "x"), InvalidArgumentError);
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("a missing archive.json is empty; an invalid one is a typed error", async () => {
  const { fs, store } = await setup();
  const a = await saved(store, [user("a")]);
  assert.deepEqual(await store.archive.list(CWD), []);
  for (const content of ["{}", '["short"]', "[1]", "not json"]) {
    await fs.writeFile(`${COLLECTION}/archive.json`, encoder.encode(content));
    await assert.rejects(store.archive.isArchived(CWD, a.id), SessionFormatError, content);
    await assert.rejects(store.archive.set(CWD, [a.id], true), SessionFormatError, content);
  }
});

test("history saves preserve archive membership", async () => {
  const { store } = await setup();
  const a = await saved(store, conversation(1));
  await store.archive.set(CWD, [a.id], true);
  const session = await store.open(a.getSessionPath());
  await session.commit([...session.messages, user("more"), assistant("ok")]);
  await session.setPinned(true);
  await session.close();
  assert.equal(await store.archive.isArchived(CWD, a.id), true);
});

test("an undefined cwd means the configured sessionDir, and is refused without one", async () => {
  const { fs, store } = await setup();
  await assert.rejects(store.archive.set(undefined, [], true), InvalidArgumentError);
  await assert.rejects(store.archive.delete(undefined, []), InvalidArgumentError);
  const global = storeOn(fs, { sessionDir: GLOBAL });
  const here = await saved(global, [user("here")], CWD);
  const there = await saved(global, [user("there")], OTHER);
  await global.archive.set(undefined, [here.id, there.id], true);
  assert.equal(await archiveJson(fs, GLOBAL), JSON.stringify([here.id, there.id]) + "\n");
  await global.archive.delete(undefined, [there.id]);
  assert.deepEqual((await global.list()).map((s) => s.id), [here.id]);
  assert.deepEqual(await global.archive.list(undefined), [here.id]);
});

test("delete() removes the directory, the legacy backup and trace companions together", async () => {
  const { fs, store } = await setup();
  const keep = await saved(store, [user("keep")]);
  const legacyId = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await writeLegacy(fs, legacyId, [user("old")]);
  await (await store.open(`${COLLECTION}/${legacyId}.jsonl`)).close();
  await fs.writeFile(`${COLLECTION}/${legacyId}.trace.jsonl`, encoder.encode("{}\n"));
  await store.archive.set(CWD, [legacyId, keep.id], true);
  const keepTree = fs.snapshotTree(keep.getSessionPath());
  await store.archive.delete(CWD, [legacyId, legacyId]);
  const names = (await fs.readDir(COLLECTION)).map((e) => e.name);
  assert.deepEqual(names.sort(), ["archive.json", keep.id].sort());
  assert.equal(await archiveJson(fs), JSON.stringify([keep.id]) + "\n");
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [keep.id]);
  assert.deepEqual(fs.snapshotTree(keep.getSessionPath()), keepTree);
});

test("archive and delete of a legacy session never migrate it; archiving leaves its file as it was", async () => {
  const { fs, store } = await setup();
  const legacyId = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacy = await writeLegacy(fs, legacyId, [user("old")]);
  await fs.writeFile(`${COLLECTION}/${legacyId}.trace.jsonl`, encoder.encode("{}\n"));
  const file = await fs.readFile(legacy);
  await store.archive.set(CWD, [legacyId], true);
  assert.equal(await store.archive.isArchived(CWD, legacyId), true);
  await store.archive.set(CWD, [legacyId], false);
  await store.archive.set(CWD, [legacyId], true);
  // Not migrated: no session directory, and the file byte for byte as it was.
  await assert.rejects(fs.lstat(`${COLLECTION}/${legacyId}`));
  assert.deepEqual(await fs.readFile(legacy), file);
  const listed = await store.list(CWD);
  assert.deepEqual(listed.map((info) => [info.id, info.storage, info.archived]), [
    [legacyId, "legacy", true],
  ]);
  await store.archive.delete(CWD, [legacyId]);
  assert.deepEqual((await fs.readDir(COLLECTION)).map((entry) => entry.name), ["archive.json"]);
  assert.equal(await archiveJson(fs), "[]\n");
  assert.deepEqual(await store.list(CWD), []);
});

test("delete() leaves entries named like the session's that are not of its kinds", async () => {
  const { fs, store } = await setup();
  const target = await saved(store, [user("target")]);
  const id = target.id;
  // A directory named like a legacy backup, one named like a companion, a link named like one.
  await fs.mkdir(`${COLLECTION}/${id}.jsonl`);
  await fs.writeFile(`${COLLECTION}/${id}.jsonl/precious`, encoder.encode("keep me"));
  await fs.mkdir(`${COLLECTION}/${id}.notes`);
  await fs.writeFile(`/outside.txt`, encoder.encode("outside"));
  await fs.symlink("/outside.txt", `${COLLECTION}/${id}.link`);
  await fs.writeFile(`${COLLECTION}/${id}.trace.jsonl`, encoder.encode("{}\n"));
  const foreign = fs.snapshotTree(`${COLLECTION}/${id}.jsonl`);
  await store.archive.delete(CWD, [id], { archivedOnly: false });
  const names = (await fs.readDir(COLLECTION)).map((e) => e.name).sort();
  // The session and its companion file are gone; the rest was never the session's.
  assert.deepEqual(names, [`${id}.jsonl`, `${id}.link`, `${id}.notes`].sort());
  assert.deepEqual(fs.snapshotTree(`${COLLECTION}/${id}.jsonl`), foreign);
  assert.equal(decoder.decode(await fs.readFile("/outside.txt")), "outside");
  assert.equal((await fs.lstat(`${COLLECTION}/${id}.link`)).kind, "symlink");
  assert.deepEqual(await store.list(CWD), []);
});

test("delete() deletes only archived sessions unless archivedOnly is false", async () => {
  const { fs, store } = await setup();
  const a = await saved(store, [user("a")]);
  const before = fs.snapshotTree(AGENT);
  await assert.rejects(store.archive.delete(CWD, [a.id]), SessionNotArchivedError);
  assert.deepEqual(fs.snapshotTree(AGENT), before);
  await store.archive.delete(CWD, [a.id], { archivedOnly: false });
  assert.deepEqual(await store.list(CWD), []);
});

test("delete() checks that every id is found before it checks that every id is archived", async () => {
  // As the version-2 delete: an id not in the project is reported whatever the order of the ids,
  // before an id that is not archived.
  const { fs, store } = await setup();
  const a = await saved(store, [user("a")]);
  const missing = "ffffffff-ffff-4fff-8fff-ffffffffffff";
  const before = fs.snapshotTree(AGENT);
  await assert.rejects(store.archive.delete(CWD, [a.id, missing]), SessionNotFoundError);
  await assert.rejects(store.archive.delete(CWD, [missing, a.id]), SessionNotFoundError);
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("delete() refuses ids not listed for the cwd", async () => {
  const { fs } = await setup();
  const shared = storeOn(fs, { sessionDir: GLOBAL });
  const there = await saved(shared, [user("there")], OTHER);
  await shared.archive.set(CWD, [there.id], true);
  await assert.rejects(shared.archive.delete(CWD, [there.id]), SessionNotFoundError);
  await assert.rejects(
    shared.archive.delete(CWD, ["ffffffff-ffff-ffff-ffff-ffffffffffff"]),
    SessionNotFoundError,
  );
  await assert.rejects(shared.archive.delete(CWD, ["../../etc"]), InvalidArgumentError);
  await shared.archive.delete(OTHER, [there.id]);
  assert.deepEqual(await shared.list(undefined), []);
});

test("delete() with an undefined cwd can remove a session that no longer reads", async () => {
  const { fs } = await setup();
  const shared = storeOn(fs, { sessionDir: GLOBAL });
  const broken = await saved(shared, [user("broken")]);
  await fs.writeFile(broken.getSessionFile(), encoder.encode("{"));
  await shared.archive.set(undefined, [broken.id], true);
  await shared.archive.delete(undefined, [broken.id]);
  assert.deepEqual((await shared.listDetailed()).failures, []);
  assert.deepEqual(await shared.archive.list(undefined), []);
});

test("delete() refuses a session open for writing, here or in a live process", async () => {
  const { fs } = await setup();
  const alive = new Set([100, 200]);
  const mine = storeOn(fs, { process: probe(100, alive) });
  const theirs = storeOn(otherProcessView(fs), { process: probe(200, alive) });
  const a = await saved(mine, [user("a")]);
  await mine.archive.set(CWD, [a.id], true);
  const writer = await mine.open(a.getSessionPath());
  await assert.rejects(mine.archive.delete(CWD, [a.id]), SessionBusyError);
  await assert.rejects(theirs.archive.delete(CWD, [a.id]), SessionLockedError);
  assert.equal((await mine.list(CWD)).length, 1);
  // The writing process dies: its lock is stale and no longer protects the session.
  alive.delete(100);
  await theirs.archive.delete(CWD, [a.id]);
  assert.deepEqual(await theirs.list(CWD), []);
  await writer.close();
});

/** The collection as a tree, without temp files. */
function collectionTree(fs: MemoryFs): Record<string, string> {
  return fs.snapshotTree(COLLECTION);
}

async function deleteBaseline(): Promise<{
  baseline: MemoryFs;
  target: string;
  keep: string;
  history: Message[];
  before: Record<string, string>;
  after: Record<string, string>;
  listedBefore: Listings;
  listedAfter: Listings;
}> {
  const { fs, store } = await setup();
  const history = conversation(2);
  const target = await saved(store, history);
  const keep = await saved(store, [user("keep")]);
  await fs.writeFile(
    `${COLLECTION}/${target.id}.jsonl`,
    legacySessionBytes(target.id, CWD, [user("stale backup")]),
    { mode: 0o600 },
  );
  await fs.writeFile(`${COLLECTION}/${target.id}.trace.jsonl`, encoder.encode("{}\n"), {
    mode: 0o600,
  });
  await store.archive.set(CWD, [target.id, keep.id], true);
  fs.syncAll();
  const before = collectionTree(fs);
  const listedBefore = await listings(fs);
  const done = fs.clone();
  await storeOn(done).archive.delete(CWD, [target.id]);
  return {
    baseline: fs,
    target: target.id,
    keep: keep.id,
    history,
    before,
    after: collectionTree(done),
    listedBefore,
    listedAfter: await listings(done),
  };
}

/** What both listing modes show. */
interface Listings {
  readonly full: SessionInfo[];
  readonly fast: SessionInfo[];
}

/** Lists the collection in both modes and checks that listing modified nothing. */
async function listings(fs: MemoryFs, label = ""): Promise<Listings> {
  const tree = fs.snapshotTree("/");
  const store = storeOn(fs);
  const result = {
    full: await store.list(CWD),
    fast: await store.list(CWD, undefined, { fast: true }),
  };
  assert.deepEqual(fs.snapshotTree("/"), tree, `${label}: listing modified the filesystem`);
  return result;
}

/** Whether entries of session `id` wait in a delete staging directory, and its commit marker. */
function stagedDeletes(fs: MemoryFs, id: string): { staged: boolean; committed: boolean } {
  const names = Object.keys(collectionTree(fs));
  return {
    staged: names.some((name) => /^\.delete-[^/]+\/([^/]+)$/.exec(name)?.[1]?.startsWith(id)),
    committed: names.some((name) => /^\.delete-[^/]+\/committed$/.test(name)),
  };
}

/**
 * The strict case-9 invariant on a state right after a crash or fault, before any recovery: both
 * listing modes show exactly the before-listing, or (only once the commit marker exists, or
 * everything is finished) exactly the after-listing; listing writes nothing; a read-only open
 * agrees with the listing and writes nothing either. Returns true when the target is present.
 */
async function checkStrict(
  fs: MemoryFs,
  expected: {
    target: string;
    history: Message[];
    listedBefore: Listings;
    listedAfter: Listings;
    label: string;
  },
): Promise<boolean> {
  const { target, history, listedBefore, listedAfter, label } = expected;
  const listed = await listings(fs, label);
  const present = listed.full.some((s) => s.id === target);
  const { staged, committed } = stagedDeletes(fs, target);
  const path = listedBefore.full.find((s) => s.id === target)?.path as string;
  const tree = fs.snapshotTree("/");
  if (present) {
    assert.equal(committed, false, `${label}: listed after the commit point`);
    assert.deepEqual(listed, listedBefore, `${label}: not listed exactly as before`);
    const reader = await storeOn(fs).open(path, { readOnly: true });
    assert.deepEqual(reader.messages, history, label);
    await reader.close();
  } else {
    assert.ok(committed || !staged, `${label}: gone while staged without the commit marker`);
    assert.deepEqual(listed, listedAfter, `${label}: not listed exactly as after`);
    await assert.rejects(storeOn(fs).open(path, { readOnly: true }), SessionNotFoundError, label);
  }
  assert.deepEqual(
    fs.snapshotTree("/"),
    tree,
    `${label}: a read-only open modified the filesystem`,
  );
  return present;
}

test("case 9: a crash at every step of delete leaves each session fully present or fully gone", async () => {
  const { baseline, target, history, before, after, listedBefore, listedAfter } =
    await deleteBaseline();
  // Once every seed shows the session gone (the marker is durable), it never comes back.
  let goneForGood: number | undefined;
  let goneHere = true;
  let point = -1;
  const points = await crashAtEveryOperation({
    baseline,
    run: async (fs) => {
      await storeOn(fs).archive.delete(CWD, [target]);
    },
    check: async (recovered, { resolved, n, seed }) => {
      const label = `crash after op ${n}, seed ${seed}`;
      if (n !== point) {
        if (goneHere && point >= 0) goneForGood ??= point;
        point = n;
        goneHere = true;
      }
      const present = await checkStrict(recovered, {
        target,
        history,
        listedBefore,
        listedAfter,
        label,
      });
      if (present) goneHere = false;
      if (resolved) assert.equal(present, false, label);
      if (goneForGood !== undefined) {
        assert.equal(present, false, `${label}: back after being gone at op ${goneForGood}`);
      }
      if (present && seed !== undefined && seed % 2 === 1) {
        // A writer opening it recovers the collection first: the delete is rolled back.
        const writer = await storeOn(recovered).open(
          listedBefore.full.find((s) => s.id === target)?.path as string,
        );
        assert.deepEqual(writer.messages, history, label);
        await writer.close();
        assert.deepEqual(await listings(recovered, label), listedBefore, label);
      }
      await storeOn(recovered).cleanup(CWD);
      // Never missing, then back: recovery keeps exactly what the listing showed.
      assert.deepEqual(collectionTree(recovered), present ? before : after, label);
      assert.deepEqual(await listings(recovered, label), present ? listedBefore : listedAfter);
      // The store stays usable: the remaining sessions can be deleted too.
      await storeOn(recovered).archive.delete(
        CWD,
        (await storeOn(recovered).list(CWD)).map((s) => s.id),
        {
          archivedOnly: false,
        },
      );
      assert.deepEqual(await storeOn(recovered).list(CWD), [], label);
    },
  });
  assert.ok(points > 15, `only ${points} crash points`);
  assert.ok(goneForGood !== undefined, "the delete never committed");
});

/**
 * The state a process crash leaves at the last crash point where the target's directory waits in
 * the delete staging directory without (`committed` false) or with the commit marker.
 */
async function interruptedDelete(committed: boolean): Promise<{
  fs: MemoryFs;
  staging: string;
  base: Awaited<ReturnType<typeof deleteBaseline>>;
}> {
  const base = await deleteBaseline();
  let found: { fs: MemoryFs; staging: string } | undefined;
  for (let n = 0;; n++) {
    const fs = base.baseline.clone();
    fs.crashAfter(n);
    try {
      await storeOn(fs).archive.delete(CWD, [base.target]);
    } catch (error) {
      if (!(error instanceof SimulatedCrash) && !fs.crashTriggered) throw error;
    }
    const crashed = fs.crash({ tailMode: "whole", extraJournal: "all" });
    const names = Object.keys(collectionTree(crashed));
    const staged = names.find((name) => name.endsWith(`/${base.target}`));
    const marked = stagedDeletes(crashed, base.target).committed;
    if (staged !== undefined && marked === committed) {
      found = { fs: crashed, staging: `${COLLECTION}/${staged.split("/")[0]}` };
    }
    if (!fs.crashTriggered) break;
  }
  assert.ok(found !== undefined, "no such crash state");
  return { ...found, base };
}

test("an uncommitted delete did not happen: listed and read in place, rolled back by a writer", async () => {
  const { fs, staging, base } = await interruptedDelete(false);
  const { target, history, listedBefore } = base;
  // The membership change is already written; only the marker is missing.
  assert.ok(!(await archiveJson(fs)).includes(target));
  const tree = fs.snapshotTree("/");
  assert.deepEqual(await listings(fs), listedBefore);
  assert.equal(listedBefore.full.find((s) => s.id === target)?.archived, true);
  const path = `${COLLECTION}/${target}/meta.json`;
  const reader = await storeOn(fs).open(path, { readOnly: true });
  assert.deepEqual(reader.messages, history);
  assert.equal(reader.getSessionPath(), `${staging}/${target}`);
  await reader.close();
  assert.deepEqual(fs.snapshotTree("/"), tree);
  const writer = await storeOn(fs).open(path);
  assert.equal(writer.getSessionPath(), `${COLLECTION}/${target}`);
  await writer.commit([...history, user("still here")]);
  await writer.close();
  assert.ok(!Object.keys(collectionTree(fs)).some((name) => name.startsWith(".delete-")));
  assert.equal(await storeOn(fs).archive.isArchived(CWD, target), true);
  assert.equal(
    (await storeOn(fs).list(CWD)).find((s) => s.id === target)?.messageCount,
    history.length + 1,
  );
});

test("a committed delete is gone for listing and open before any recovery ran", async () => {
  const { fs, base } = await interruptedDelete(true);
  const tree = fs.snapshotTree("/");
  assert.deepEqual(await listings(fs), base.listedAfter);
  const path = `${COLLECTION}/${base.target}/meta.json`;
  await assert.rejects(storeOn(fs).open(path, { readOnly: true }), SessionNotFoundError);
  await assert.rejects(storeOn(fs).open(path), SessionNotFoundError);
  assert.deepEqual(fs.snapshotTree("/"), tree);
  await storeOn(fs).cleanup(CWD);
  assert.deepEqual(collectionTree(fs), base.after);
});

test("an uncommitted delete with an unreadable journal is reported, not hidden", async () => {
  const { fs, staging, base } = await interruptedDelete(false);
  await fs.writeFile(`${staging}/intent.json`, encoder.encode("{"));
  const tree = fs.snapshotTree("/");
  for (const fast of [false, true]) {
    const result = await storeOn(fs).listDetailed(CWD, undefined, { fast });
    assert.deepEqual(result.sessions.map((s) => s.id), [base.keep]);
    assert.equal(result.failures.length, 1);
    assert.equal(result.failures[0]?.id, base.target);
    assert.equal(result.failures[0]?.path, `${staging}/intent.json`);
    assert.ok(result.failures[0]?.error instanceof CorruptSessionError);
  }
  await assert.rejects(storeOn(fs).list(CWD), CorruptSessionError);
  const path = `${COLLECTION}/${base.target}/meta.json`;
  await assert.rejects(storeOn(fs).open(path, { readOnly: true }), CorruptSessionError);
  await assert.rejects(storeOn(fs).open(path), CorruptSessionError);
  assert.deepEqual(fs.snapshotTree("/"), tree);
});

test("a commit marker that is not a regular file commits nothing, for readers and recovery alike", async () => {
  for (const plant of ["a dangling link", "a directory"] as const) {
    const { fs, staging, base } = await interruptedDelete(false);
    const marker = `${staging}/committed`;
    if (plant === "a directory") await fs.mkdir(marker);
    else await fs.symlink("/nowhere", marker);
    // Readers see the delete as not happened ...
    assert.deepEqual(await listings(fs, plant), base.listedBefore, plant);
    // ... and recovery agrees: it rolls the delete back, never finishes it.
    const report = await storeOn(fs).cleanup(CWD);
    assert.deepEqual(report.restored, [staging], plant);
    assert.deepEqual(report.finished, [], plant);
    assert.deepEqual(await listings(fs, plant), base.listedBefore, plant);
    assert.ok(!stagedDeletes(fs, base.target).staged, plant);
  }
});

test("a delete's journal is never read through a link", async () => {
  const { fs, staging, base } = await interruptedDelete(false);
  const journal = JSON.parse(decoder.decode(await fs.readFile(`${staging}/intent.json`)));
  const foreign = "0000aaaa-0000-4000-8000-00000000beef";
  // A journal elsewhere that would restore a foreign id's membership, linked in place.
  await fs.writeFile(
    "/outside.json",
    encoder.encode(JSON.stringify({
      ...journal,
      ids: [...journal.ids, foreign],
      archived: [...journal.archived, foreign],
    })),
  );
  await fs.remove(`${staging}/intent.json`);
  await fs.symlink("/outside.json", `${staging}/intent.json`);
  const store = storeOn(fs);
  assert.equal(await store.archive.isArchived(CWD, foreign), false);
  assert.ok(!(await store.archive.list(CWD)).includes(foreign));
  // An unreadable journal: its session is reported, and recovery leaves it for inspection.
  const result = await store.listDetailed(CWD);
  assert.deepEqual(result.failures.map((f) => [f.id, f.error.constructor.name]), [
    [base.target, "CorruptSessionError"],
  ]);
  assert.deepEqual((await store.cleanup(CWD)).kept, [staging]);
});

test("deleting a session whose staged delete has an unreadable journal is refused, and changes nothing", async () => {
  const { fs, staging, base } = await interruptedDelete(false);
  await fs.writeFile(`${staging}/intent.json`, encoder.encode("{"));
  const tree = fs.snapshotTree("/");
  const explicit = storeOn(fs, { sessionDir: COLLECTION });
  const listed = await explicit.listDetailed(undefined, COLLECTION);
  assert.equal(listed.failures[0]?.id, base.target);
  await assert.rejects(
    explicit.archive.delete(undefined, [base.target], { archivedOnly: false }),
    (error: unknown) =>
      error instanceof CorruptSessionError && error.file === `${staging}/intent.json`,
  );
  assert.deepEqual(fs.snapshotTree("/"), tree);
});

for (const error of ["EIO", "ENOSPC"] as const) {
  for (const persistent of [false, true]) {
    test(
      `case 6, 9: ${error} (${
        persistent ? "persistent" : "transient"
      }) at every step of delete fails cleanly or succeeds`,
      async () => {
        const { baseline, target, history, before, after, listedBefore, listedAfter } =
          await deleteBaseline();
        await failAtEveryOperation({
          baseline,
          error,
          persistent,
          run: (fs) => storeOn(fs).archive.delete(CWD, [target]),
          check: async (fs, { resolved, n }) => {
            const label = `${error} at op ${n}`;
            const reached = fs.operationCount >= n;
            if (resolved) {
              assert.equal(reached, false, `${label}: a fault fired but delete resolved`);
            }
            const present = await checkStrict(fs, {
              target,
              history,
              listedBefore,
              listedAfter,
              label,
            });
            if (resolved) assert.equal(present, false, label);
            // A transient fault before the commit point is rolled back at once.
            if (!persistent && present) assert.deepEqual(collectionTree(fs), before, label);
            await storeOn(fs).cleanup(CWD);
            assert.deepEqual(collectionTree(fs), present ? before : after, label);
          },
        });
      },
    );
  }
}

/** The probe of `pid` where the probe knows process instances (Linux): each live pid has a start. */
function instanceProbe(pid: number, alive: Set<number>): ProcessProbe {
  return {
    pid,
    host: "test-host",
    isAlive: (other) => alive.has(other),
    processStart: (other) => (alive.has(other) ? `start-of-${other}` : undefined),
  };
}

/** A store of process `pid` with `instanceProbe`, waiting briefly for a collection lock. */
function instanceStore(fs: MemoryFs, pid: number, alive: Set<number>): SessionStore {
  return new SessionStore({
    fs,
    agentDir: AGENT,
    process: instanceProbe(pid, alive),
    collectionLockWaitMs: 100,
  });
}

for (const persistent of [false, true]) {
  test(
    `EIO (${
      persistent ? "persistent" : "transient"
    }) at every step of delete, with process instances: the session stays writable here and, once this process wrote it, elsewhere`,
    async () => {
      const { baseline, target, history, before, after, listedBefore, listedAfter } =
        await deleteBaseline();
      const alive = new Set([300, 400]);
      const path = listedBefore.full.find((s) => s.id === target)?.path as string;
      await failAtEveryOperation({
        baseline,
        error: "EIO",
        persistent,
        run: (fs) => instanceStore(fs, 300, alive).archive.delete(CWD, [target]),
        check: async (fs, { n }) => {
          const label = `EIO at op ${n}`;
          const present = await checkStrict(fs, {
            target,
            history,
            listedBefore,
            listedAfter,
            label,
          });
          const mine = instanceStore(fs, 300, alive);
          if (present) {
            // The faults are over: this process writes the session again (a lock file the failed
            // delete could not remove names a token it gave up, and is taken over).
            const writer = await mine.open(path);
            assert.deepEqual(writer.messages, history, label);
            await writer.close();
            const theirs = await instanceStore(otherProcessView(fs), 400, alive).open(path);
            await theirs.close();
          }
          await mine.cleanup(CWD);
          assert.deepEqual(collectionTree(fs), present ? before : after, label);
        },
      });
    },
  );
}

test("a delete whose rollback fails removes the writer locks of the sessions still in place; a staged one's is left to recovery", async () => {
  const { fs } = await setup();
  const alive = new Set([300, 400]);
  const plain = storeOn(fs, { process: instanceProbe(300, alive) });
  const historyA = conversation(1);
  const historyB = conversation(2);
  const a = await saved(plain, historyA);
  const b = await saved(plain, historyB);
  await plain.archive.set(CWD, [a.id, b.id], true);
  const [pathA, pathB] = [a.getSessionPath(), b.getSessionPath()];
  // `a` moves into the staging, `b` does not (its rename fails), and the rollback fails before it
  // moves `a` back.
  let failRename = true;
  let failLstat = true;
  const faulty = hookedFs(fs, {
    before: (method, args) => {
      const from = String(args[0]);
      if (method === "rename" && from === pathB && failRename) {
        failRename = false;
        throw new FsIoError("EIO", "rename", from, "EIO (injected)");
      }
      if (
        method === "lstat" && from.includes("/.delete-") && from.endsWith(`/${a.id}`) &&
        !failRename && failLstat
      ) {
        failLstat = false;
        throw new FsIoError("EIO", "lstat", from, "EIO (injected)");
      }
    },
  });
  const mine = new SessionStore({
    fs: faulty,
    agentDir: AGENT,
    process: instanceProbe(300, alive),
  });
  await assert.rejects(
    mine.archive.delete(CWD, [a.id, b.id]),
    (error) => error instanceof FsIoError && error.message.includes(pathB),
  );
  assert.equal(failLstat, false);
  // `b` never moved: its writer lock is gone. `a`'s went with its directory into the staging.
  await assert.rejects(fs.lstat(`${pathB}/writer.lock`));
  await assert.rejects(fs.lstat(pathA));
  const staged = Object.keys(fs.snapshotTree(COLLECTION)).filter((p) =>
    p.includes(".delete-") && p.endsWith(`/${a.id}/writer.lock`)
  );
  assert.equal(staged.length, 1);
  // Another process writes `b` at once, and `a` once recovery moved it back (without its lock).
  const theirs = storeOn(otherProcessView(fs), { process: instanceProbe(400, alive) });
  const writerB = await theirs.open(pathB);
  assert.deepEqual(writerB.messages, historyB);
  await writerB.close();
  const writerA = await theirs.open(pathA);
  assert.deepEqual(writerA.messages, historyA);
  await writerA.close();
  // And so does this process.
  for (const path of [pathA, pathB]) await (await mine.open(path)).close();
  assert.deepEqual((await mine.list(CWD)).map((s) => s.id).sort(), [a.id, b.id].sort());
  assert.deepEqual(await mine.archive.list(CWD), [a.id, b.id]);
});

test("a crash at every step of restore keeps the old or the new membership and the files", async () => {
  const { fs: baseline, store } = await setup();
  const a = await saved(store, conversation(1));
  await store.archive.set(CWD, [a.id], true);
  baseline.syncAll();
  const files = baseline.snapshotTree(a.getSessionPath());
  await crashAtEveryOperation({
    baseline,
    run: (fs) => storeOn(fs).archive.set(CWD, [a.id], false),
    check: async (recovered, { resolved, n, seed }) => {
      const label = `crash after op ${n}, seed ${seed}`;
      const archived = await storeOn(recovered).archive.isArchived(CWD, a.id);
      if (resolved) assert.equal(archived, false, label);
      assert.deepEqual(recovered.snapshotTree(a.getSessionPath()), files, label);
      await storeOn(recovered).archive.set(CWD, [a.id], !archived);
      assert.equal(await storeOn(recovered).archive.isArchived(CWD, a.id), !archived, label);
    },
  });
});

for (const error of ["EIO", "ENOSPC"] as const) {
  for (const persistent of [false, true]) {
    test(
      `case 6: ${error} (${
        persistent ? "persistent" : "transient"
      }) at every step of restore fails cleanly or succeeds, never touching the files`,
      async () => {
        const { fs: baseline, store } = await setup();
        const a = await saved(store, conversation(1));
        await store.archive.set(CWD, [a.id], true);
        const files = baseline.snapshotTree(a.getSessionPath());
        await failAtEveryOperation({
          baseline,
          error,
          persistent,
          run: (fs) => storeOn(fs).archive.set(CWD, [a.id], false),
          check: async (fs, { resolved, n }) => {
            const label = `${error} at op ${n}`;
            if (resolved) {
              assert.equal(
                fs.operationCount >= n,
                false,
                `${label}: a fault fired but it resolved`,
              );
            }
            // The old membership or the new one (a failed directory sync after the rename leaves
            // the new one visible), never a damaged archive.json; the files as they were.
            const archived = await storeOn(fs).archive.isArchived(CWD, a.id);
            if (resolved) assert.equal(archived, false, label);
            assert.deepEqual(fs.snapshotTree(a.getSessionPath()), files, label);
            // What a fault left (a temp file) is cleanup's; the restore then goes through.
            await storeOn(fs).cleanup(CWD);
            await storeOn(fs).archive.set(CWD, [a.id], false);
            assert.equal(await storeOn(fs).archive.isArchived(CWD, a.id), false, label);
            const names = (await fs.readDir(COLLECTION)).map((entry) => entry.name).sort();
            assert.deepEqual(names, ["archive.json", a.id].sort(), label);
          },
        });
      },
    );
  }
}

test("a rollback interrupted after its moves but before membership: every reader still says archived", async () => {
  const { fs, store } = await setup();
  const kept = await saved(store, conversation(1));
  const gone = await saved(store, conversation(1));
  await store.archive.set(CWD, [kept.id, gone.id], true);
  // The state a crash leaves when a delete of `gone` was rolled back up to its membership: the
  // session is back in the collection, its journal is there, archive.json no longer lists it.
  const staging = `${COLLECTION}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f`;
  await fs.mkdir(staging);
  await fs.writeFile(
    `${staging}/intent.json`,
    encoder.encode(JSON.stringify({
      operation: "delete",
      ids: [gone.id],
      entries: [gone.id],
      archived: [gone.id],
      membersBefore: [kept.id, gone.id],
    })),
  );
  await fs.writeFile(
    `${COLLECTION}/archive.json`,
    encoder.encode(JSON.stringify([kept.id]) + "\n"),
  );
  const listed = await store.list(CWD);
  assert.deepEqual(
    listed.filter((s) => s.archived).map((s) => s.id).sort(),
    [kept.id, gone.id].sort(),
  );
  assert.equal(await store.archive.isArchived(CWD, gone.id), true);
  assert.deepEqual(await store.archive.list(CWD), [kept.id, gone.id]);
  await store.cleanup(CWD); // finishes the rollback: the membership is written back
  assert.deepEqual(await store.archive.list(CWD), [kept.id, gone.id]);
  await assert.rejects(fs.lstat(staging));
});

/**
 * Two archived sessions and a kept one, synced; `listed` lists them on any view as `id:archived`;
 * `before` is that listing now and `deleted` the one after a clean delete of the two, whose
 * operation log is `log`.
 */
async function deleteScenario() {
  const { fs, store } = await setup();
  const a = (await saved(store, conversation(2))).id;
  const b = (await saved(store, conversation(3))).id;
  const kept = (await saved(store, [user("kept")])).id;
  await store.archive.set(CWD, [a, b, kept], true);
  fs.syncAll();
  const listed = async (view: MemoryFs) =>
    (await storeOn(view).list(CWD)).map((s) => `${s.id}:${s.archived}`).sort();
  const before = await listed(fs);
  const probe = fs.clone();
  probe.resetCounter();
  await storeOn(probe).archive.delete(CWD, [a, b]);
  return { fs, ids: [a, b], listed, before, deleted: await listed(probe), log: probe.operationLog };
}

test("a delete failing at the marker's fsync rolls back, and the marker was never seen; a crash at any step of that rollback recovers to the state before", async () => {
  const { fs, ids, listed, before, log } = await deleteScenario();
  // The marker is made under a temp name: its create, then the fsync that fails.
  const marker = log.findIndex((r) => r.op === "open" && r.path.includes("/.committed."));
  assert.ok(marker > 0);
  assert.ok(!log.some((r) => r.op === "open" && r.path.endsWith("/committed")));
  const failing = log.slice(marker).find((r) => r.op === "sync");
  assert.ok(failing !== undefined);
  let crashes = 0;
  for (let extra = 0; extra < 60; extra++) {
    const run = fs.clone();
    run.resetCounter();
    run.failAt(failing.number, { error: "EIO" });
    run.crashAfter(failing.number + extra);
    const outcome = await storeOn(run).archive.delete(CWD, ids).then(
      () => "resolved",
      () => "rejected",
    );
    if (!run.crashTriggered) {
      // No crash left to place: the rollback finished and the call reported the fault.
      assert.equal(outcome, "rejected");
      run.clearFaults();
      assert.deepEqual(await listed(run), before);
      break;
    }
    crashes++;
    // A reader at this step of the rollback (the live state, as the process left it) never saw
    // the sessions gone.
    assert.deepEqual(await listed(run.clone()), before, `live, ${extra} ops after the fault`);
    const views = [
      ...[0, 1, 2].map((seed) => ({ seed })),
      { seed: 3, tailMode: "whole" as const, extraJournal: "all" as const }, // the process only
    ];
    for (const options of views) {
      // Crashed: the marker never existed under its name, so the delete is undone, and recovery
      // leaves nothing of it behind (a marker still under its temp name included).
      const label = `crash ${extra} ops after, ${JSON.stringify(options)}`;
      const after = run.crash(options);
      assert.deepEqual(await listed(after), before, label);
      await storeOn(after).cleanup(CWD);
      assert.deepEqual(await listed(after), before, label);
      const left = Object.keys(after.snapshotTree("/")).filter((p) => p.includes("/.delete-"));
      assert.deepEqual(left, [], label);
    }
  }
  assert.ok(crashes > 3, `${crashes} crash points in the rollback`);
});

test("a delete failing at the staging directory's fsync after the marker is committed: gone for readers at once, reported, finished by recovery", async () => {
  const { fs, ids, listed, before, deleted, log } = await deleteScenario();
  const marker = log.findIndex((r) => r.op === "rename" && r.to?.endsWith("/committed"));
  assert.ok(marker > 0, "the marker is renamed in");
  const failing = log.slice(marker).find((r) => r.op === "syncDir" && r.path.includes("/.delete-"));
  assert.ok(failing !== undefined);
  const run = fs.clone();
  run.resetCounter();
  run.failAt(failing.number, { error: "EIO" });
  await assert.rejects(storeOn(run).archive.delete(CWD, ids), FsIoError);
  run.clearFaults();
  // Done for every reader, before and after recovery; never rolled back.
  assert.deepEqual(await listed(run), deleted);
  const staged = Object.keys(run.snapshotTree("/")).filter((p) => p.includes("/.delete-"));
  assert.ok(staged.length > 0, "the staged entries wait for recovery");
  // Recovery makes the marker durable before it removes anything staged: with a filesystem that
  // does not keep its metadata in order, a power loss could otherwise roll back a half-removed
  // session.
  const recovery = run.clone();
  recovery.resetCounter();
  await storeOn(recovery).cleanup(CWD);
  const steps = recovery.operationLog;
  const firstRemove = steps.findIndex((r) => r.op === "remove" && r.path.includes("/.delete-"));
  const markerSync = steps.findIndex((r) => r.op === "syncDir" && r.path.includes("/.delete-"));
  assert.ok(firstRemove > 0 && markerSync >= 0 && markerSync < firstRemove, "fsync, then remove");
  for (let extra = 0; extra < 40; extra++) {
    const crashing = run.clone();
    crashing.resetCounter();
    crashing.crashAfter(extra);
    await storeOn(crashing).cleanup(CWD).catch(() => undefined);
    if (!crashing.crashTriggered) {
      crashing.clearFaults();
      assert.deepEqual(await listed(crashing), deleted);
      const left = Object.keys(crashing.snapshotTree("/")).filter((p) => p.includes("/.delete-"));
      assert.deepEqual(left, []);
      break;
    }
    for (const seed of seedsAfter([0, 1, 2])) {
      // Power lost during recovery: the marker's fsync comes first, so the delete is done, or
      // (its rename never reached the disk before recovery ran) undone whole.
      const after = crashing.crash({ seed });
      await storeOn(after).cleanup(CWD);
      const state = await listed(after);
      assert.ok(
        JSON.stringify(state) === JSON.stringify(before) ||
          JSON.stringify(state) === JSON.stringify(deleted),
        `crash ${extra} ops into recovery, seed ${seed}: ${JSON.stringify(state)}`,
      );
    }
  }
});

test("a marker rename that took effect though it reported a failure is the commit point: never rolled back", async () => {
  const { fs, ids, listed, deleted } = await deleteScenario();
  let reported = false;
  const failing = new SessionStore({
    fs: hookedFs(fs, {
      after: (method, args) => {
        if (method === "rename" && String(args[1]).endsWith("/committed") && !reported) {
          reported = true;
          throw new FsIoError("EIO", "rename", String(args[1]), "injected after the rename");
        }
      },
    }),
    agentDir: AGENT,
  });
  await assert.rejects(failing.archive.delete(CWD, ids), FsIoError);
  assert.ok(reported);
  // Readers may have seen the marker: the sessions stay gone, and recovery finishes the delete.
  assert.deepEqual(await listed(fs), deleted);
  await storeOn(fs).cleanup(CWD);
  assert.deepEqual(await listed(fs), deleted);
  assert.deepEqual(Object.keys(fs.snapshotTree("/")).filter((p) => p.includes("/.delete-")), []);
});

for (const planted of ["a link", "a directory"] as const) {
  test(`archive.json planted as ${planted} is refused by the archive and reported by listings, never read`, async () => {
    const { fs, store } = await setup();
    const a = (await saved(store, conversation(2))).id;
    const b = (await saved(store, conversation(1))).id;
    const file = `${COLLECTION}/archive.json`;
    if (planted === "a link") {
      // A membership elsewhere naming a session: following it would archive (and let delete) it.
      await fs.writeFile("/elsewhere.json", encoder.encode(JSON.stringify([a]) + "\n"));
      await fs.symlink("/elsewhere.json", file);
    } else {
      await fs.mkdir(file);
    }
    for (const port of [fs, withoutNoFollow(fs)]) {
      const view = new SessionStore({ fs: port, agentDir: AGENT });
      await assert.rejects(view.archive.isArchived(CWD, a), SessionFormatError);
      await assert.rejects(view.archive.set(CWD, [b], true), SessionFormatError);
      await assert.rejects(view.archive.delete(CWD, [a]), SessionFormatError);
      for (const fast of [false, true]) {
        const listed = await view.listDetailed(CWD, undefined, { fast });
        assert.deepEqual(
          listed.sessions.map((s) => [s.id, s.archived]).sort(),
          [
            [a, false],
            [b, false],
          ].sort(),
        );
        assert.equal(listed.failures.length, 1);
        assert.ok(listed.failures[0]?.error instanceof SessionFormatError);
        assert.equal((listed.failures[0]?.error as SessionFormatError).file, file);
      }
    }
    assert.equal((await fs.lstat(file)).kind, planted === "a link" ? "symlink" : "directory");
    assert.equal((await fs.lstat(`${COLLECTION}/${a}`)).kind, "directory");
  });
}

test("a staged delete whose journal cannot be read is kept and reported, and blocks nothing else", async () => {
  const { fs, store } = await setup();
  const victim = (await saved(store, conversation(1))).id;
  const other = (await saved(store, conversation(2))).id;
  const staging = `${COLLECTION}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(staging);
  await fs.rename(`${COLLECTION}/${victim}`, `${staging}/${victim}`);
  await fs.writeFile(`${staging}/intent.json`, encoder.encode('{"operation":"del'));
  const kept = fs.snapshotTree(staging);
  // Operations on other sessions of the collection go on.
  await store.archive.set(CWD, [other], true);
  assert.equal(await store.archive.isArchived(CWD, other), true);
  assert.equal((await store.compact(`${COLLECTION}/${other}`)).compacted, false);
  const report = await store.cleanup(CWD);
  assert.deepEqual(report.kept, [staging]);
  await store.archive.delete(CWD, [other]);
  // The staged copy is untouched, and listings report its session as a failure.
  assert.deepEqual(fs.snapshotTree(staging), kept);
  const listed = await store.listDetailed(CWD);
  assert.deepEqual(listed.sessions, []);
  assert.deepEqual(listed.failures.map((f) => f.id), [victim]);
  assert.ok(listed.failures[0]?.error instanceof CorruptSessionError);
});

test("archiving or restoring no ids changes nothing, not even a missing collection", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = storeOn(fs);
  const before = fs.snapshotTree("/");
  await store.archive.set(CWD, [], true);
  await store.archive.set(CWD, [], false);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("restoring ids in a collection never made changes nothing and resolves, in either durability", async () => {
  // A restore finds nothing to remove: "already as asked". Under "full" it makes what it found
  // durable, and a collection that does not exist has nothing to make durable.
  for (const durability of ["full", "ordered"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({
      fs,
      agentDir: AGENT,
      sessionDir: GLOBAL,
      process: null,
      durability,
    });
    const id = "11111111-2222-4333-8444-555555555555";
    const before = fs.snapshotTree("/");
    await store.archive.set(CWD, [id], false);
    await store.archive.set(undefined, [id], false);
    assert.deepEqual(fs.snapshotTree("/"), before, durability);
    assert.equal(await store.archive.isArchived(CWD, id), false);
    // Archiving there creates the collection, and a restore then empties the membership.
    await store.archive.set(undefined, [id], true);
    assert.equal(await store.archive.isArchived(undefined, id), true);
    await store.archive.set(undefined, [id], false);
    assert.equal(await store.archive.isArchived(undefined, id), false);
    assert.equal(decoder.decode(await fs.readFile(`${GLOBAL}/archive.json`)), "[]\n");
  }
});

test("structural changes refuse a collection directory replaced by a symlink, and change nothing behind it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT, process: null });
  const kept = await store.create(CWD);
  await kept.commit(conversation(2));
  await kept.close();
  const legacyId = "11111111-2222-4333-8444-555555555555";
  await fs.writeFile(
    `${COLLECTION}/${legacyId}.jsonl`,
    legacySessionBytes(legacyId, CWD, conversation(1, "l")),
    { mode: 0o600 },
  );
  await fs.mkdir("/outside", { recursive: true });
  await fs.rename(COLLECTION, "/outside/collection");
  await fs.symlink("/outside/collection", COLLECTION);
  const before = fs.snapshotTree("/outside");
  await assert.rejects(store.archive.delete(CWD, [kept.id]), SessionFormatError);
  await assert.rejects(store.open(`${COLLECTION}/${legacyId}.jsonl`), SessionFormatError);
  await assert.rejects(store.compact(kept.getSessionPath()), SessionFormatError);
  await assert.rejects(store.cleanup(CWD), SessionFormatError);
  assert.deepEqual(fs.snapshotTree("/outside"), before);
  assert.equal((await fs.lstat(COLLECTION)).kind, "symlink");
});

test("a rollback that cannot put back a trace file written since keeps it staged, restores membership, and restore works", async () => {
  const { fs, store } = await setup();
  const s = await saved(store, conversation(1));
  const keep = await saved(store, [user("keep")]);
  const trace = `${COLLECTION}/${s.id}.trace.jsonl`;
  await fs.writeFile(trace, encoder.encode('{"old":1}\n'));
  await store.archive.set(CWD, [s.id, keep.id], true);
  // The delete stages everything and takes the id out of archive.json; the host then writes a
  // new trace for the session it still sees, and the delete fails before its commit point.
  const deleter = new SessionStore({
    fs: hookedFs(fs, {
      before: async (method, args) => {
        if (method === "open" && String(args[0]).includes("/.committed.")) {
          await fs.writeFile(trace, encoder.encode('{"new":1}\n'));
          throw new FsIoError("EIO", "open", String(args[0]), "injected");
        }
      },
    }),
    agentDir: AGENT,
  });
  await assert.rejects(deleter.archive.delete(CWD, [s.id]), FsIoError);
  // Rolled back: the session and its membership are back, the new trace is untouched and the
  // old one is kept staged (nothing is deleted that was not asked to be).
  const staging = (await fs.readDir(COLLECTION)).map((e) => e.name)
    .filter((name) => name.startsWith(".delete-"));
  assert.equal(staging.length, 1);
  const kept = `${COLLECTION}/${staging[0]}`;
  assert.equal(decoder.decode(await fs.readFile(trace)), '{"new":1}\n');
  assert.equal(
    decoder.decode(await fs.readFile(`${kept}/${s.id}.trace.jsonl`)),
    '{"old":1}\n',
  );
  assert.equal(await archiveJson(fs), JSON.stringify([s.id, keep.id]) + "\n");
  const archivedOf = async () =>
    Object.fromEntries((await store.list(CWD)).map((x) => [x.id, x.archived]));
  assert.deepEqual(await archivedOf(), { [s.id]: true, [keep.id]: true });
  assert.deepEqual((await store.cleanup(CWD)).kept, [kept]);
  // Restoring works for every reader, and a delete then says why it refuses.
  await store.archive.set(CWD, [s.id], false);
  assert.equal(await store.archive.isArchived(CWD, s.id), false);
  assert.deepEqual(await store.archive.list(CWD), [keep.id]);
  assert.deepEqual(await archivedOf(), { [s.id]: false, [keep.id]: true });
  await assert.rejects(store.archive.delete(CWD, [s.id]), SessionNotArchivedError);
  // Archived again, it is deleted like any session.
  await store.archive.set(CWD, [s.id], true);
  assert.equal(await store.archive.isArchived(CWD, s.id), true);
  await store.archive.delete(CWD, [s.id]);
  assert.deepEqual(await archivedOf(), { [keep.id]: true });
  await assert.rejects(fs.lstat(trace));
});

test("a crash at any step of recovering a delete whose trace file name is taken again keeps the session archived, then restorable", async () => {
  const { fs, store } = await setup();
  const s = await saved(store, conversation(1));
  const keep = await saved(store, [user("keep")]);
  await store.archive.set(CWD, [s.id, keep.id], true);
  // The state a crash leaves after a delete staged the session and its trace and took it out
  // of archive.json, before its commit point; the host then wrote a new trace.
  const staging = `${COLLECTION}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f`;
  const traceName = `${s.id}.trace.jsonl`;
  await fs.mkdir(staging, { mode: 0o700 });
  await fs.writeFile(
    `${staging}/intent.json`,
    encoder.encode(
      JSON.stringify({
        operation: "delete",
        ids: [s.id],
        entries: [traceName, s.id],
        archived: [s.id],
        membersBefore: [s.id, keep.id],
      }) + "\n",
    ),
  );
  await fs.writeFile(`${staging}/${traceName}`, encoder.encode('{"old":1}\n'));
  await fs.rename(`${COLLECTION}/${s.id}`, `${staging}/${s.id}`);
  await fs.writeFile(
    `${COLLECTION}/archive.json`,
    encoder.encode(JSON.stringify([keep.id]) + "\n"),
  );
  await fs.writeFile(`${COLLECTION}/${traceName}`, encoder.encode('{"new":1}\n'));
  fs.syncAll();
  const archivedOf = async (view: MemoryFs) =>
    Object.fromEntries((await storeOn(view).list(CWD)).map((x) => [x.id, x.archived]));
  const both = { [s.id]: true, [keep.id]: true };
  assert.deepEqual(await archivedOf(fs), both);
  const points = await crashAtEveryOperation({
    baseline: fs,
    seeds: [0, 3],
    run: async (run) => {
      await storeOn(run).cleanup(CWD);
    },
    check: async (after, { n, seed }) => {
      const label = `crash after ${n}, seed ${seed}`;
      assert.deepEqual(await archivedOf(after), both, label);
      assert.equal(await storeOn(after).archive.isArchived(CWD, s.id), true, label);
      const report = await storeOn(after).cleanup(CWD);
      assert.deepEqual(report.kept, [staging], label);
      assert.deepEqual(await archivedOf(after), both, label);
      assert.equal(
        decoder.decode(await after.readFile(`${staging}/${traceName}`)),
        '{"old":1}\n',
        label,
      );
      assert.equal(
        decoder.decode(await after.readFile(`${COLLECTION}/${traceName}`)),
        '{"new":1}\n',
        label,
      );
      await storeOn(after).archive.set(CWD, [s.id], false);
      assert.deepEqual(await archivedOf(after), { [s.id]: false, [keep.id]: true }, label);
      assert.equal(await storeOn(after).archive.isArchived(CWD, s.id), false, label);
    },
  });
  assert.ok(points > 5, `${points} crash points`);
});

/**
 * The state a rolled-back delete of `sessions` leaves when the host wrote a new trace file of each
 * while the delete had the old one staged: the sessions back and archived, each new trace in
 * place, each old one kept in the delete's staging directory.
 */
async function keptTraces(sessions: number): Promise<{
  fs: MemoryFs;
  store: SessionStore;
  ids: string[];
  histories: Message[][];
  keep: string;
  kept: string;
}> {
  const { fs, store } = await setup();
  const ids: string[] = [];
  const histories: Message[][] = [];
  for (let i = 0; i < sessions; i++) {
    histories.push(conversation(1, `s${i}`));
    ids.push((await saved(store, histories[i] as Message[])).id);
  }
  const keep = await saved(store, [user("keep")]);
  for (const id of ids) {
    await fs.writeFile(`${COLLECTION}/${id}.trace.jsonl`, encoder.encode(`{"old":"${id}"}\n`));
  }
  await store.archive.set(CWD, [...ids, keep.id], true);
  const deleter = new SessionStore({
    fs: hookedFs(fs, {
      before: async (method, args) => {
        if (method === "open" && String(args[0]).includes("/.committed.")) {
          for (const id of ids) {
            await fs.writeFile(
              `${COLLECTION}/${id}.trace.jsonl`,
              encoder.encode(`{"new":"${id}"}\n`),
            );
          }
          throw new FsIoError("EIO", "open", String(args[0]), "injected");
        }
      },
    }),
    agentDir: AGENT,
  });
  await assert.rejects(deleter.archive.delete(CWD, ids), FsIoError);
  const kept = (await fs.readDir(COLLECTION)).map((e) => e.name)
    .filter((name) => name.startsWith(".delete-"));
  assert.equal(kept.length, 1);
  return { fs, store, ids, histories, keep: keep.id, kept: `${COLLECTION}/${kept[0]}` };
}

/** The files of session `id` anywhere in the collection (staging directories too), by content. */
function filesOf(fs: MemoryFs, id: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [path, node] of Object.entries(collectionTree(fs))) {
    const name = path.slice(path.lastIndexOf("/") + 1);
    if (!name.startsWith(`${id}.`) || !node.startsWith("file ")) continue;
    // `file <mode> <JSON text>`.
    out[path] = JSON.parse(node.slice(node.indexOf(" ", 5) + 1));
  }
  return out;
}

test("a delete takes along the old trace files a rolled-back delete kept of its sessions: nothing of them comes back", async () => {
  const { fs, store, ids, keep, kept } = await keptTraces(2);
  const [s, t] = ids as [string, string];
  assert.deepEqual(Object.values(filesOf(fs, s)).sort(), [`{"new":"${s}"}\n`, `{"old":"${s}"}\n`]);
  await store.archive.delete(CWD, [s]);
  // Gone, with every file of it: the old trace is not waiting anywhere to come back.
  assert.deepEqual(filesOf(fs, s), {});
  assert.deepEqual((await store.list(CWD)).map((x) => x.id).sort(), [t, keep].sort());
  const report = await store.cleanup(CWD);
  assert.deepEqual(filesOf(fs, s), {}, "the old trace came back");
  // The other session's old trace stays kept, its new trace in place.
  assert.deepEqual(report.kept, [kept]);
  assert.deepEqual(filesOf(fs, t), {
    [`${t}.trace.jsonl`]: `{"new":"${t}"}\n`,
    [`${kept.slice(COLLECTION.length + 1)}/${t}.trace.jsonl`]: `{"old":"${t}"}\n`,
  });
  await store.archive.delete(CWD, [t]);
  assert.deepEqual(filesOf(fs, t), {});
  await store.cleanup(CWD);
  assert.deepEqual(filesOf(fs, t), {});
  assert.deepEqual(
    (await fs.readDir(COLLECTION)).map((e) => e.name).filter((n) => n.startsWith(".delete-")),
    [],
  );
  assert.deepEqual((await store.list(CWD)).map((x) => x.id), [keep]);
});

test("a delete that took along a kept old trace file and fails keeps the old trace, never over the new one", async () => {
  const { fs, store, ids, keep } = await keptTraces(1);
  const s = ids[0] as string;
  const failing = new SessionStore({
    fs: hookedFs(fs, {
      before: (method, args) => {
        if (method === "open" && String(args[0]).includes("/.committed.")) {
          throw new FsIoError("EIO", "open", String(args[0]), "injected");
        }
      },
    }),
    agentDir: AGENT,
  });
  await assert.rejects(failing.archive.delete(CWD, [s]), FsIoError);
  const check = async (label: string) => {
    const files = filesOf(fs, s);
    assert.equal(files[`${s}.trace.jsonl`], `{"new":"${s}"}\n`, label);
    assert.deepEqual(Object.values(files).sort(), [`{"new":"${s}"}\n`, `{"old":"${s}"}\n`], label);
    assert.deepEqual(
      Object.fromEntries((await store.list(CWD)).map((x) => [x.id, x.archived])),
      { [s]: true, [keep]: true },
      label,
    );
  };
  await check("rolled back");
  assert.equal((await store.cleanup(CWD)).kept.length, 1);
  await check("recovered");
  // Once the new trace is gone, recovery puts the old one back, as for any kept trace.
  await fs.remove(`${COLLECTION}/${s}.trace.jsonl`);
  await store.cleanup(CWD);
  assert.deepEqual(filesOf(fs, s), { [`${s}.trace.jsonl`]: `{"old":"${s}"}\n` });
  await store.archive.delete(CWD, [s]);
  await store.cleanup(CWD);
  assert.deepEqual(filesOf(fs, s), {});
});

for (const sessions of [1, 2]) {
  test(`a crash at every step of a delete that takes along a kept old trace file leaves the session present with its traces, or gone with every file of it (${sessions} kept by the earlier delete)`, async () => {
    const { fs, ids, histories, keep } = await keptTraces(sessions);
    const s = ids[0] as string;
    // The other session's traces stay as they are: the new one in place, the old one kept.
    const other = ids[1];
    const otherFiles = other === undefined ? {} : filesOf(fs, other);
    fs.syncAll();
    const history = histories[0] as Message[];
    const listedBefore = await listings(fs);
    const done = fs.clone();
    await storeOn(done).archive.delete(CWD, [s]);
    const listedAfter = await listings(done);
    const traces = [`{"new":"${s}"}\n`, `{"old":"${s}"}\n`];
    /** Recovery keeps what readers saw; the store stays usable; the other session is untouched. */
    const afterwards = async (recovered: MemoryFs, present: boolean, label: string) => {
      for (let round = 0; round < 2; round++) {
        await storeOn(recovered).cleanup(CWD);
        const files = filesOf(recovered, s);
        if (present) {
          // Both traces, the new one in place; the old one kept aside.
          assert.equal(files[`${s}.trace.jsonl`], traces[0], label);
          assert.deepEqual(Object.values(files).sort(), traces, label);
        } else {
          assert.deepEqual(files, {}, `${label}: a file of the deleted session is back`);
        }
        assert.deepEqual(await listings(recovered, label), present ? listedBefore : listedAfter);
      }
      if (present) {
        await storeOn(recovered).archive.delete(CWD, [s]);
        await storeOn(recovered).cleanup(CWD);
        assert.deepEqual(filesOf(recovered, s), {}, label);
      }
      if (other !== undefined) {
        assert.deepEqual(
          Object.values(filesOf(recovered, other)).sort(),
          Object.values(otherFiles).sort(),
          label,
        );
        assert.equal(
          filesOf(recovered, other)[`${other}.trace.jsonl`],
          `{"new":"${other}"}\n`,
          label,
        );
      }
      assert.deepEqual(
        (await storeOn(recovered).list(CWD)).map((x) => x.id).sort(),
        [keep, ...(other === undefined ? [] : [other])].sort(),
        label,
      );
    };
    let goneForGood: number | undefined;
    let goneHere = true;
    let point = -1;
    const points = await crashAtEveryOperation({
      baseline: fs,
      run: async (run) => {
        await storeOn(run).archive.delete(CWD, [s]);
      },
      check: async (recovered, { resolved, n, seed }) => {
        const label = `crash after op ${n}, seed ${seed}`;
        if (n !== point) {
          if (goneHere && point >= 0) goneForGood ??= point;
          point = n;
          goneHere = true;
        }
        const present = await checkStrict(recovered, {
          target: s,
          history,
          listedBefore,
          listedAfter,
          label,
        });
        if (present) goneHere = false;
        if (resolved) assert.equal(present, false, label);
        if (goneForGood !== undefined) {
          assert.equal(present, false, `${label}: back after being gone at op ${goneForGood}`);
        }
        await afterwards(recovered, present, label);
      },
    });
    assert.ok(points > 15, `only ${points} crash points`);
    assert.ok(goneForGood !== undefined, "the delete never committed");
    // A failure at any step: rolled back (present, as before) or committed (gone, as after).
    await failAtEveryOperation({
      baseline: fs,
      error: "EIO",
      persistent: false,
      run: async (run) => {
        await storeOn(run).archive.delete(CWD, [s]);
      },
      check: async (failed, { resolved, n }) => {
        const label = `EIO at ${n}`;
        const listed = await listings(failed, label);
        const present = listed.full.some((x) => x.id === s);
        assert.deepEqual(listed, present ? listedBefore : listedAfter, label);
        if (resolved) assert.equal(present, false, label);
        await afterwards(failed, present, label);
      },
    });
  });
}

test("a delete journal naming as taken along anything but a companion of its sessions is refused, naming the field, and nothing moves", async () => {
  const { fs, store } = await setup();
  const victim = (await saved(store, conversation(1))).id;
  const other = (await saved(store, conversation(2))).id;
  for (
    const [kept, value] of [
      [[`${other}.trace.jsonl`], `${other}.trace.jsonl`],
      [[`${victim}.jsonl`], `${victim}.jsonl`],
      [[`${victim}.a/b`], `${victim}.a/b`],
      [[victim], victim],
      [["archive.json"], "archive.json"],
      [[`${victim}.trace.jsonl`, 7], 7],
    ] as const
  ) {
    const view = fs.clone();
    const staging = `${COLLECTION}/.delete-00000000-0000-4000-8000-000000000000`;
    await view.mkdir(staging);
    await view.mkdir(`${staging}/kept-0`);
    await view.writeFile(`${staging}/kept-0/x`, encoder.encode("{}\n"));
    await view.rename(`${COLLECTION}/${victim}`, `${staging}/${victim}`);
    const intent = {
      operation: "delete",
      ids: [victim],
      entries: [victim],
      archived: [],
      membersBefore: [],
      kept,
    };
    await view.writeFile(`${staging}/intent.json`, encoder.encode(JSON.stringify(intent)));
    const tree = view.snapshotTree(staging);
    const listed = await storeOn(view).listDetailed(CWD);
    assert.deepEqual(listed.sessions.map((s) => s.id), [other]);
    const error = listed.failures[0]?.error;
    assert.ok(error instanceof CorruptSessionError, String(error));
    const cause = error.cause;
    assert.ok(cause instanceof SessionFormatError, String(cause));
    assert.equal(cause.path, `kept[${kept.length - 1}]`);
    assert.equal(cause.value, value);
    assert.deepEqual((await storeOn(view).cleanup(CWD)).kept, [staging]);
    assert.deepEqual(view.snapshotTree(staging), tree);
  }
});

/** The delete staging directories of the collection that hold no journal, with what they hold. */
async function journalLess(fs: MemoryFs): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await fs.readDir(COLLECTION)) {
    if (!entry.name.startsWith(".delete-")) continue;
    const inside = (await fs.readDir(`${COLLECTION}/${entry.name}`)).map((e) => e.name);
    if (!inside.includes("intent.json")) out.push(`${entry.name}: [${inside.join(", ")}]`);
  }
  return out;
}

test("a rolled-back delete that took along a kept old trace file leaves no staging directory without its journal, even when its last removal fails", async () => {
  const { fs, store, ids, kept } = await keptTraces(1);
  const s = ids[0] as string;
  const ours = (path: string) => /\/\.delete-[^/]+$/.test(path) && path !== kept;
  let failedRemove = false;
  const failing = new SessionStore({
    fs: hookedFs(fs, {
      before: (method, args) => {
        const path = String(args[0]);
        if (method === "rename" && String(args[1]).includes("/kept-0/")) {
          throw new FsIoError("EIO", "rename", path, "injected");
        }
        if (method === "remove" && ours(path) && !failedRemove) {
          failedRemove = true;
          throw new FsIoError("EIO", "remove", path, "injected");
        }
      },
    }),
    agentDir: AGENT,
  });
  await assert.rejects(failing.archive.delete(CWD, [s]), FsIoError);
  for (let round = 0; round < 2; round++) {
    const report = await store.cleanup(CWD);
    assert.deepEqual(report.kept, [kept], `round ${round}`);
    assert.deepEqual(await journalLess(fs), [], `round ${round}`);
  }
  assert.deepEqual(Object.values(filesOf(fs, s)).sort(), [`{"new":"${s}"}\n`, `{"old":"${s}"}\n`]);
});

test("a delete staging directory holding only empty kept-<n> directories and no journal is nothing staged: listed past, removed by recovery", async () => {
  const { fs, store } = await setup();
  const id = (await saved(store, conversation(1))).id;
  const staging = `${COLLECTION}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(`${staging}/kept-0`, { recursive: true });
  await fs.mkdir(`${staging}/kept-1`);
  const tree = fs.snapshotTree("/");
  const counting = hookedFs(fs, {
    before: (method, args) => {
      if (method === "readDir" && String(args[0]) === staging) looks++;
    },
  });
  let looks = 0;
  const listed = await new SessionStore({ fs: counting, agentDir: AGENT }).listDetailed(CWD);
  assert.deepEqual(listed.sessions.map((x) => x.id), [id]);
  assert.deepEqual(listed.failures, []);
  // Looked at as a staging directory staging nothing: once per look of the listing, not three.
  assert.ok(looks <= 2, `${looks} looks`);
  assert.deepEqual(fs.snapshotTree("/"), tree);
  const report = await store.cleanup(CWD);
  assert.deepEqual(report.kept, []);
  assert.deepEqual(report.removed, [staging]);
  assert.deepEqual(await journalLess(fs), []);
  // A kept-<n> that holds something is still staged content: kept and reported.
  await fs.mkdir(`${staging}/kept-0`, { recursive: true });
  await fs.writeFile(`${staging}/kept-0/${id}.trace.jsonl`, encoder.encode("{}\n"));
  assert.deepEqual((await store.cleanup(CWD)).kept, [staging]);
});

test("a crash at every step of recovering a crashed delete that took along a kept old trace file leaves no staging directory without its journal", async () => {
  const { fs, ids, keep } = await keptTraces(1);
  const s = ids[0] as string;
  fs.syncAll();
  const listedBefore = await listings(fs);
  // The delete crashed at each step before its commit marker, with kept-0/ staged.
  const states = new Map<string, MemoryFs>();
  for (let n = 0;; n++) {
    const run = fs.clone();
    run.crashAfter(n);
    await storeOn(run).archive.delete(CWD, [s]).catch((error) => {
      if (!run.crashTriggered) throw error;
    });
    if (!run.crashTriggered) break;
    if (repeatsEarlierCrashState(run, n)) continue;
    for (const seed of SEEDS) {
      const crashed = run.crash(seed);
      const tree = crashed.snapshotTree(COLLECTION);
      if (Object.keys(tree).some((p) => p.endsWith("/committed"))) continue;
      if (!Object.keys(tree).some((p) => /\/kept-0$/.test(p))) continue;
      states.set(JSON.stringify(tree), crashed);
    }
  }
  assert.ok(states.size > 3, `only ${states.size} states`);
  for (const staged of states.values()) {
    await crashAtEveryOperation({
      baseline: staged,
      run: async (run) => {
        await storeOn(run).cleanup(CWD);
      },
      check: async (recovered, { n, seed }) => {
        const label = `recovery crashed after op ${n}, seed ${seed}`;
        assert.deepEqual(await listings(recovered, label), listedBefore, label);
        for (let round = 0; round < 2; round++) {
          const report = await storeOn(recovered).cleanup(CWD);
          assert.deepEqual(await journalLess(recovered), [], label);
          assert.equal(report.kept.length, 1, `${label}: ${report.kept}`);
          assert.deepEqual(
            (await storeOn(recovered).listDetailed(CWD)).failures,
            [],
            label,
          );
        }
        const files = filesOf(recovered, s);
        assert.equal(files[`${s}.trace.jsonl`], `{"new":"${s}"}\n`, label);
        assert.deepEqual(
          Object.values(files).sort(),
          [`{"new":"${s}"}\n`, `{"old":"${s}"}\n`],
          label,
        );
        assert.deepEqual(
          (await storeOn(recovered).list(CWD)).map((x) => x.id).sort(),
          [s, keep].sort(),
          label,
        );
      },
    });
  }
});

for (const planted of ["a link to a directory", "a file"] as const) {
  test(`a kept-<n> of a delete staging directory that is ${planted} is never looked through: nothing moves through it, and it is kept and reported`, async () => {
    const { fs, store } = await setup();
    const s = (await saved(store, conversation(1))).id;
    const name = `${s}.trace.jsonl`;
    // Outside the collection: a user's copy of the trace.
    await fs.mkdir("/home/user/backup", { recursive: true });
    await fs.writeFile(`/home/user/backup/${name}`, encoder.encode('{"backup":1}\n'));
    const staging = `${COLLECTION}/.delete-00000000-0000-4000-8000-000000000000`;
    await fs.mkdir(staging, { mode: 0o700 });
    if (planted === "a file") await fs.writeFile(`${staging}/kept-0`, encoder.encode("x\n"));
    else await fs.symlink("/home/user/backup", `${staging}/kept-0`);
    const intent = {
      operation: "delete",
      ids: [s],
      entries: [],
      archived: [s],
      membersBefore: [s],
      kept: [name],
    };
    await fs.writeFile(`${staging}/intent.json`, encoder.encode(JSON.stringify(intent)));
    const outside = () => fs.snapshotTree("/home/user/backup");
    const before = outside();
    // Recovery, with the name free in the collection: nothing comes in through the link.
    const report = await store.cleanup(CWD);
    assert.deepEqual(report.kept, [staging]);
    assert.deepEqual(filesOf(fs, s), {});
    assert.deepEqual(outside(), before);
    assert.equal(
      (await fs.lstat(`${staging}/kept-0`)).kind,
      planted === "a file" ? "file" : "symlink",
    );
    // Membership restored as for any rollback, and the journal claims it no more.
    assert.deepEqual(await store.archive.list(CWD), [s]);
    // A delete of the session takes nothing along through it, and deletes nothing outside.
    await fs.writeFile(`${COLLECTION}/${name}`, encoder.encode('{"new":1}\n'));
    await store.archive.delete(CWD, [s]);
    assert.deepEqual(filesOf(fs, s), {});
    assert.deepEqual(outside(), before);
    assert.deepEqual((await store.cleanup(CWD)).kept, [staging]);
    assert.deepEqual(outside(), before);
    assert.deepEqual(await store.list(CWD), []);
    assert.deepEqual((await store.listDetailed(CWD)).failures, []);
  });
}

test("archive.set whose membership a failed call or an ordered writer left in place makes it durable before it resolves", async () => {
  const base = new MemoryFs();
  await base.mkdir(CWD, { recursive: true });
  const created = await new SessionStore({ fs: base, agentDir: AGENT }).create(CWD);
  await created.commit(conversation(1));
  await created.close();
  const collection = await new SessionStore({ fs: base, agentDir: AGENT }).collectionFor(CWD);
  base.syncAll();
  const powerLoss = { seed: 0, tailMode: "none", extraJournal: "none" } as const;
  for (const archived of [true, false]) {
    const start = base.clone();
    if (!archived) {
      await new SessionStore({ fs: start, agentDir: AGENT }).archive.set(CWD, [created.id], true);
      start.syncAll();
    }
    // The first call fails at the collection's fsync, after archive.json was renamed into place.
    const probe = start.clone();
    await new SessionStore({ fs: probe, agentDir: AGENT }).archive.set(CWD, [created.id], archived);
    const n = probe.operationLog.findLastIndex((o) => o.op === "syncDir" && o.path === collection) +
      1;
    for (const persistent of [false, true]) {
      const fs = start.clone();
      fs.failAt(n, { error: "EIO", persistent });
      const store = new SessionStore({ fs, agentDir: AGENT });
      await assert.rejects(store.archive.set(CWD, [created.id], archived), FsIoError);
      fs.clearFaults();
      await new SessionStore({ fs, agentDir: AGENT }).archive.set(CWD, [created.id], archived);
      const after = new SessionStore({ fs: fs.crash(powerLoss), agentDir: AGENT });
      assert.equal(await after.archive.isArchived(CWD, created.id), archived);
    }
    // A store that does not fsync set it; a store that does finds it set and makes it durable.
    const fs = start.clone();
    const ordered = new SessionStore({ fs, agentDir: AGENT, durability: "ordered" });
    await ordered.archive.set(CWD, [created.id], archived);
    await new SessionStore({ fs, agentDir: AGENT }).archive.set(CWD, [created.id], archived);
    const after = new SessionStore({ fs: fs.crash(powerLoss), agentDir: AGENT });
    assert.equal(await after.archive.isArchived(CWD, created.id), archived);
  }
});

test("archive.set finding the membership another process renamed into place (and died before its directory's fsync) makes it durable, whatever this process synced before", async () => {
  for (const earlier of ["archived and restored", "restored with no archive.json"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT });
    const session = await store.create(CWD);
    await session.commit(conversation(1));
    await session.close();
    const collection = await store.collectionFor(CWD);
    // This process made archive.json (or its absence) durable before.
    if (earlier === "archived and restored") {
      await store.archive.set(CWD, [session.id], true);
    }
    await store.archive.set(CWD, [session.id], false);
    fs.syncAll();
    // Another process archives the session: a synced temp file renamed over archive.json, then
    // killed before it syncs the directory.
    const temp = `${collection}/.archive.json.other.tmp`;
    const handle = await fs.open(temp, { write: true, create: true, createNew: true });
    await handle.write(new TextEncoder().encode(JSON.stringify([session.id]) + "\n"));
    await handle.sync();
    await handle.close();
    await fs.rename(temp, `${collection}/archive.json`);
    // This process archives it too: already as asked, and made durable before it resolves.
    await store.archive.set(CWD, [session.id], true);
    const after = new SessionStore({
      fs: fs.crash({ seed: 1, tailMode: "none", extraJournal: "none" }),
      agentDir: AGENT,
    });
    assert.equal(await after.archive.isArchived(CWD, session.id), true, earlier);
  }
});
