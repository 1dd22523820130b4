import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256, sha256Hex } from "../src/port/sha256.ts";
import { verifySession } from "../src/loop/verify.ts";
import {
  CorruptSessionError,
  SessionBusyError,
  SessionFormatError,
  SessionNotFoundError,
} from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { crashAtEveryOperation, failAtEveryOperation } from "./_crash.ts";
import {
  assistant,
  conversation,
  legacySessionBytes,
  stoppedBetweenRenames,
  user,
} from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function storeOn(fs: MemoryFs): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT });
}

async function json(fs: MemoryFs, path: string): Promise<Record<string, unknown>> {
  return JSON.parse(decoder.decode(await fs.readFile(path)));
}

/** A session whose log holds an old generation before the committed one. */
async function replaced(): Promise<{
  fs: MemoryFs;
  store: SessionStore;
  session: SessionManager;
  history: Message[];
}> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = storeOn(fs);
  const session = await store.create(CWD);
  const first = conversation(3);
  await session.commit(first);
  const history = [user("edited first question"), ...first.slice(1), user("more"), assistant("ok")];
  await session.commit(history);
  await session.close();
  return { fs, store, session, history };
}

test("compaction leaves only the committed generation, with the same checksum", async () => {
  const { fs, store, session, history } = await replaced();
  const dir = session.getSessionPath();
  const metaBefore = await json(fs, `${dir}/meta.json`);
  assert.ok((metaBefore.start as number) > 0);
  const logBefore = await fs.readFile(`${dir}/messages.jsonl`);
  const committed = logBefore.subarray(
    metaBefore.start as number,
    (metaBefore.start as number) + (metaBefore.bytes as number),
  );
  const result = await store.compact(session.getSessionFile());
  assert.deepEqual(result, {
    compacted: true,
    dir,
    bytesBefore: logBefore.length,
    bytesAfter: committed.length,
    generation: metaBefore.generation,
  });
  assert.deepEqual(await fs.readFile(`${dir}/messages.jsonl`), committed);
  const meta = await json(fs, `${dir}/meta.json`);
  assert.deepEqual(meta, { ...metaBefore, start: 0 });
  assert.equal(metaBefore.generation, sha256Hex(committed));
  const index = await json(fs, `${dir}/index.json`);
  assert.equal(index.start, 0);
  assert.equal(index.generation, metaBefore.generation);
  assert.deepEqual((await fs.readDir(COLLECTION)).map((e) => e.name), [session.id]);
  assert.equal((await fs.stat(dir)).mode, 0o700);
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    assert.equal((await fs.stat(`${dir}/${name}`)).mode, 0o600, name);
  }
  const reopened = await store.open(dir);
  assert.deepEqual(reopened.messages, history);
  const page = await reopened.readHistory();
  assert.equal(page.revision, metaBefore.generation);
  const more = [...history, user("after compaction"), assistant("fine")];
  await reopened.commit(more);
  await reopened.close();
  assert.deepEqual((await store.open(dir, { readOnly: true })).messages, more);
});

test("a read-only manager opened before a compaction pages the history it verified", async () => {
  const { store, session, history } = await replaced();
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  const result = await store.compact(session.getSessionFile());
  assert.equal(result.compacted, true);
  // Every page, from the latest back to the first, is the verified history (no reopen needed).
  const pages: Message[][] = [];
  let page = await reader.readHistory();
  pages.unshift(page.messages);
  while (page.start > 0) {
    page = await reader.readHistory(page.start, page.revision);
    pages.unshift(page.messages);
  }
  assert.deepEqual(pages.flat(), history);
  await reader.close();
});

test("a read-only manager keeps its verified log after a failed page read, also across a compaction", async () => {
  const { fs, store, session, history } = await replaced();
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  const first = await reader.readHistory();
  // One transient read error, then a compaction publishes a new log at the same path.
  fs.failAt(fs.operationCount + 1, { ops: ["read"] });
  await assert.rejects(reader.readHistory(first.start, first.revision));
  fs.clearFaults();
  assert.equal((await store.compact(session.getSessionFile())).compacted, true);
  const earlier = await reader.readHistory(first.start, first.revision);
  assert.deepEqual([...earlier.messages, ...first.messages], history.slice(earlier.start));
  assert.deepEqual(earlier.messages, history.slice(earlier.start, earlier.end));
  await reader.close();
});

test("the rebuilt index equals the one SessionManager publishes for the same history", async () => {
  const { fs, store, session, history } = await replaced();
  const dir = session.getSessionPath();
  await fs.remove(`${dir}/index.json`);
  await store.compact(dir);
  const fresh = await store.create(CWD);
  await fresh.commit(history);
  await fresh.close();
  const expected = await json(fs, `${fresh.getSessionPath()}/index.json`);
  assert.deepEqual(await json(fs, `${dir}/index.json`), expected);
});

test("a crash tail past a committed range at offset 0 is dropped by compaction", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = storeOn(fs);
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const log = `${session.getSessionPath()}/messages.jsonl`;
  const handle = await fs.open(log, { append: true });
  await handle.write(encoder.encode('{"role":"user","content":"uncommit'));
  await handle.close();
  const result = await store.compact(session.getSessionPath());
  assert.equal(result.compacted, true);
  assert.equal(result.bytesAfter, (await fs.stat(log)).size);
  assert.ok(result.bytesBefore > result.bytesAfter);
});

test("an already compact session is left untouched", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = storeOn(fs);
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const before = fs.snapshotTree(AGENT);
  const result = await store.compact(session.getSessionPath());
  assert.equal(result.compacted, false);
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("compaction refuses a checksum mismatch, unknown entries and an open writer", async () => {
  const { fs, store, session } = await replaced();
  const dir = session.getSessionPath();
  const before = fs.snapshotTree(AGENT);
  const writer = await store.open(dir);
  await assert.rejects(store.compact(dir), SessionBusyError);
  await writer.close();
  assert.deepEqual(fs.snapshotTree(AGENT), before);

  await fs.writeFile(`${dir}/notes.txt`, encoder.encode("mine"));
  await assert.rejects(store.compact(dir), SessionFormatError);
  await fs.remove(`${dir}/notes.txt`);

  const log = await fs.readFile(`${dir}/messages.jsonl`);
  const text = decoder.decode(log);
  const at = text.lastIndexOf("more");
  log[at] = "M".charCodeAt(0);
  await fs.writeFile(`${dir}/messages.jsonl`, log);
  const damaged = fs.snapshotTree(AGENT);
  await assert.rejects(store.compact(dir), CorruptSessionError);
  assert.deepEqual(fs.snapshotTree(AGENT), damaged);
  await assert.rejects(
    store.compact(`${COLLECTION}/ffffffff-ffff-ffff-ffff-ffffffffffff`),
    SessionNotFoundError,
  );
});

test("compaction refuses an empty committed range past the end of a cut or missing log", async () => {
  for (const damage of ["cut", "missing"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = storeOn(fs);
    const session = await store.create(CWD);
    await session.commit(conversation(2));
    await session.commit([]); // an empty generation where the log ends
    await session.close();
    const dir = session.getSessionPath();
    const logPath = `${dir}/messages.jsonl`;
    if (damage === "cut") await fs.writeFile(logPath, encoder.encode("{}\n"));
    else await fs.remove(logPath);
    const damaged = fs.snapshotTree(AGENT);
    await assert.rejects(store.open(dir, { readOnly: true }), CorruptSessionError);
    await assert.rejects(store.compact(dir), (error: unknown) => {
      assert.ok(error instanceof CorruptSessionError, String(error));
      assert.equal(error.file, logPath);
      assert.equal(error.offset, damage === "cut" ? 3 : 0);
      return true;
    });
    assert.deepEqual(fs.snapshotTree(AGENT), damaged, damage);
  }
});

test("removeLegacyBackup() removes the backup only once the directory is valid", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacy = `${COLLECTION}/${id}.jsonl`;
  await fs.writeFile(legacy, legacySessionBytes(id, CWD, [user("q")]));
  const store = storeOn(fs);
  await (await store.open(legacy)).close();
  const dir = `${COLLECTION}/${id}`;
  const meta = await fs.readFile(`${dir}/meta.json`);
  await fs.writeFile(`${dir}/meta.json`, encoder.encode("{"));
  await assert.rejects(store.removeLegacyBackup(dir), SessionFormatError);
  assert.equal((await fs.lstat(legacy)).kind, "file");
  await fs.writeFile(`${dir}/meta.json`, meta);
  assert.equal(await store.removeLegacyBackup(dir), true);
  await assert.rejects(fs.lstat(legacy));
  assert.equal(await store.removeLegacyBackup(dir), false);
  assert.deepEqual((await store.open(dir, { readOnly: true })).messages.length, 1);
});

test("removeLegacyBackup() keeps a backup an older Loop went on writing after the migration", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacy = `${COLLECTION}/${id}.jsonl`;
  const dir = `${COLLECTION}/${id}`;
  const store = storeOn(fs);
  const original = legacySessionBytes(id, CWD, [user("q")]);
  await fs.writeFile(legacy, original);
  const session = await store.open(legacy);
  // The session goes on in the directory.
  await session.commit([user("q"), user("more")]);
  await session.close();
  // An older Loop goes on in the backup: its second message exists nowhere else.
  const diverged = legacySessionBytes(id, CWD, [user("q"), user("written by an older Loop")]);
  await fs.writeFile(legacy, diverged);
  const kept = (error: unknown) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, legacy);
    assert.equal(error.path, "messages");
    return true;
  };
  await assert.rejects(store.removeLegacyBackup(dir), kept);
  assert.deepEqual(await fs.readFile(legacy), diverged);
  // The same messages the directory went on with: nothing is lost, but the file is not what
  // was migrated either, and is kept.
  const longer = legacySessionBytes(id, CWD, [user("q"), user("more"), user("and more")]);
  await fs.writeFile(legacy, longer);
  await assert.rejects(store.removeLegacyBackup(dir), kept);
  // A backup cut mid-line cannot be compared: kept.
  await fs.writeFile(legacy, longer.subarray(0, longer.length - 5));
  await assert.rejects(store.removeLegacyBackup(dir), SessionFormatError);
  assert.equal((await fs.lstat(legacy)).kind, "file");
  // The file as it was migrated, the directory having saved more since: the backup goes.
  await fs.writeFile(legacy, original);
  assert.equal(await store.removeLegacyBackup(dir), true);
  await assert.rejects(fs.lstat(legacy));
});

/** A session with a replacement generation and a legacy backup, made durable. */
async function compactionBaseline(): Promise<{
  baseline: MemoryFs;
  dir: string;
  id: string;
  history: Message[];
  generation: string;
}> {
  // A legacy session migrated (its file kept as the backup), then given a replacement generation.
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  const id = "5d2c8a91-47b3-4e0f-9a6d-2b1c3e4f5a6b";
  const first = conversation(3);
  await fs.writeFile(`${COLLECTION}/${id}.jsonl`, legacySessionBytes(id, CWD, first));
  const session = await storeOn(fs).open(`${COLLECTION}/${id}.jsonl`);
  const history = [user("edited first question"), ...first.slice(1), user("more"), assistant("ok")];
  await session.commit(history);
  await session.close();
  fs.syncAll();
  const generation = (await json(fs, session.getSessionFile())).generation as string;
  return { baseline: fs, dir: session.getSessionPath(), id, history, generation };
}

/** The session reads the same everywhere; after cleanup, no leftovers remain. */
async function checkCompactionState(
  fs: MemoryFs,
  expected: { dir: string; id: string; history: Message[]; generation: string },
  label: string,
): Promise<void> {
  for (const fast of [false, true]) {
    const listed = await storeOn(fs).list(CWD, undefined, { fast });
    assert.equal(listed.length, 1, `${label}: listed ${listed.length}`);
    assert.equal(listed[0]?.storage, "directory", `${label}: the legacy backup resurfaced`);
    assert.equal(listed[0]?.messageCount, expected.history.length, label);
  }
  // An open right after the crash recovers an interrupted swap by itself.
  const reader = await storeOn(fs).open(expected.dir, { readOnly: true });
  assert.deepEqual(reader.messages, expected.history, label);
  assert.equal(reader.getStorageInfo()?.generation, expected.generation, label);
  await storeOn(fs).cleanup(CWD);
  const names = (await fs.readDir(COLLECTION)).map((e) => e.name).sort();
  assert.deepEqual(names, [expected.id, `${expected.id}.jsonl`], `${label}: leftovers`);
  const writer = await storeOn(fs).open(expected.dir);
  await writer.commit([...expected.history, user("still writable")]);
  await writer.close();
}

test("a crash at every step of compaction keeps the session readable with the same generation", async () => {
  const expected = await compactionBaseline();
  const points = await crashAtEveryOperation({
    baseline: expected.baseline,
    run: async (fs) => {
      await storeOn(fs).compact(expected.dir);
    },
    check: async (recovered, { resolved, n, seed }) => {
      const label = `crash after op ${n}, seed ${seed}`;
      if (resolved) {
        const meta = await json(recovered, `${expected.dir}/meta.json`);
        assert.equal(meta.start, 0, label);
      }
      await checkCompactionState(recovered, expected, label);
    },
  });
  assert.ok(points > 20, `only ${points} crash points`);
});

/**
 * Registers one test per fault (EIO and ENOSPC, transient and persistent) of `run` failing at
 * every operation, from the compaction baseline: a call that resolved must not have reached the
 * fault (`check` may say which fault it may pass over), and `check` judges each state left.
 */
function atEveryFault(
  what: string,
  run: (fs: MemoryFs, expected: Awaited<ReturnType<typeof compactionBaseline>>) => Promise<unknown>,
  check: (
    fs: MemoryFs,
    expected: Awaited<ReturnType<typeof compactionBaseline>>,
    info: { resolved: boolean; n: number; label: string },
  ) => Promise<void>,
): void {
  for (const error of ["EIO", "ENOSPC"] as const) {
    for (const persistent of [false, true]) {
      test(
        `${error} (${
          persistent ? "persistent" : "transient"
        }) at every step of ${what} fails cleanly or succeeds`,
        async () => {
          const expected = await compactionBaseline();
          await failAtEveryOperation({
            baseline: expected.baseline,
            error,
            persistent,
            run: (fs) => run(fs, expected),
            check: (fs, { resolved, n }) =>
              check(fs, expected, { resolved, n, label: `${error} at op ${n}` }),
          });
        },
      );
    }
  }
}

atEveryFault(
  "compaction",
  (fs, expected) => storeOn(fs).compact(expected.dir),
  async (fs, expected, { resolved, n, label }) => {
    if (resolved) assert.ok(fs.operationCount < n, `${label}: a fault fired but it resolved`);
    await checkCompactionState(fs, expected, label);
  },
);

test("a crash at every step of legacy backup removal keeps the session and the backup or not", async () => {
  const expected = await compactionBaseline();
  await crashAtEveryOperation({
    baseline: expected.baseline,
    run: async (fs) => {
      await storeOn(fs).removeLegacyBackup(expected.dir);
    },
    check: async (recovered, { resolved, n, seed }) => {
      const label = `crash after op ${n}, seed ${seed}`;
      const names = (await recovered.readDir(COLLECTION)).map((e) => e.name).sort();
      if (resolved) assert.deepEqual(names, [expected.id], label);
      else assert.ok(names.includes(expected.id), label);
      const reader = await storeOn(recovered).open(expected.dir, { readOnly: true });
      assert.deepEqual(reader.messages, expected.history, label);
    },
  });
});

atEveryFault(
  "legacy backup removal",
  (fs, expected) => storeOn(fs).removeLegacyBackup(expected.dir),
  async (fs, expected, { resolved, n, label }) => {
    if (resolved && fs.operationCount >= n) {
      // Only the close of the log the directory's check read may fail unreported (the check had
      // read everything, and closing a file only read changes nothing), or the read ahead of the
      // backup's header check past the header it needed.
      const faulted = fs.operationLog[n - 1];
      const unused = faulted?.op === "close"
        ? faulted.path.endsWith("/messages.jsonl")
        : faulted?.op === "read" && faulted.path === `${COLLECTION}/${expected.id}.jsonl`;
      assert.ok(unused, `${label}: a fault fired but it resolved (${JSON.stringify(faulted)})`);
    }
    // The session reads the same either way; the backup is gone only after success (or a fault
    // after its removal), and a retry once the faults are over removes it.
    const names = (await fs.readDir(COLLECTION)).map((e) => e.name).sort();
    if (resolved) assert.deepEqual(names, [expected.id], label);
    else assert.ok(names.includes(expected.id), label);
    const reader = await storeOn(fs).open(expected.dir, { readOnly: true });
    assert.deepEqual(reader.messages, expected.history, label);
    await reader.close();
    await storeOn(fs).removeLegacyBackup(expected.dir);
    const after = (await fs.readDir(COLLECTION)).map((e) => e.name).sort();
    assert.deepEqual(after, [expected.id], label);
  },
);

test("removeLegacyBackup() leaves a legacy file the directory under its id was not migrated from", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  const store = storeOn(fs);
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacy = `${COLLECTION}/${id}.jsonl`;
  const dir = `${COLLECTION}/${id}`;
  // Another session published under the legacy session's id (as a salvage with that id did):
  // the directory is valid and named by its id, but the file is not its backup.
  const other = await store.create(CWD);
  await other.commit(conversation(1));
  await other.close();
  const copy = await store.salvage(other.getSessionPath(), "/elsewhere", { id });
  await fs.writeFile(legacy, legacySessionBytes(id, CWD, [user("the legacy session's only copy")]));
  await fs.rename(copy.dir, dir);
  const bytes = await fs.readFile(legacy);
  await assert.rejects(store.removeLegacyBackup(dir), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, legacy);
    assert.equal(error.path, "header.createdAt");
    return true;
  });
  assert.deepEqual(await fs.readFile(legacy), bytes);
  // A header that cannot be read tells nothing either: the file is left alone.
  await fs.writeFile(legacy, encoder.encode("{not json\n"));
  await assert.rejects(store.removeLegacyBackup(dir), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, legacy);
    return true;
  });
  assert.equal((await fs.lstat(legacy)).kind, "file");
});

test("removeLegacyBackup() removes the backup of a migrated session written to since, whose history is no longer the file's", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacy = `${COLLECTION}/${id}.jsonl`;
  await fs.writeFile(legacy, legacySessionBytes(id, CWD, [user("q"), assistant("a")]));
  const store = storeOn(fs);
  const session = await store.open(legacy);
  await session.commit([user("a new first question"), assistant("b")]);
  await session.setTitle({ text: "Renamed", source: "user", messageIndices: [0] } as never);
  await session.close();
  assert.equal(await store.removeLegacyBackup(`${COLLECTION}/${id}`), true);
  await assert.rejects(fs.lstat(legacy));
});

for (
  const damage of [
    "a file",
    "a link",
    "a directory without meta.json",
    "a directory whose meta.json is a directory",
    "a directory whose meta.json is not JSON",
    "a directory holding another session",
    "missing",
  ] as const
) {
  for (const place of ["missing", "a file", "an empty directory"] as const) {
    test(`a compaction stopped between its renames whose previous copy is ${damage} (the session's place ${place}) is reported and kept, never removed with its compacted copy`, async () => {
      const { fs, session } = await replaced();
      const dir = session.getSessionPath();
      const staging = await stoppedBetweenRenames(fs, dir);
      const previous = `${staging}/previous`;
      if (damage === "a file") {
        await fs.remove(previous, { recursive: true });
        await fs.writeFile(previous, encoder.encode("not a directory"));
      } else if (damage === "a link") {
        await fs.remove(previous, { recursive: true });
        await fs.symlink(`${staging}/session`, previous);
      } else if (damage === "a directory without meta.json") {
        await fs.remove(`${previous}/meta.json`);
      } else if (damage === "a directory whose meta.json is a directory") {
        await fs.remove(`${previous}/meta.json`);
        await fs.mkdir(`${previous}/meta.json`);
      } else if (damage === "a directory whose meta.json is not JSON") {
        await fs.writeFile(`${previous}/meta.json`, encoder.encode("{not json"));
      } else if (damage === "a directory holding another session") {
        const meta = await json(fs, `${previous}/meta.json`);
        const header = { ...(meta.header as object), id: "6c0ad433-f846-458b-9feb-b3d12c910aee" };
        await fs.writeFile(
          `${previous}/meta.json`,
          encoder.encode(JSON.stringify({ ...meta, header })),
        );
      } else await fs.remove(previous, { recursive: true });
      if (place === "a file") await fs.writeFile(dir, encoder.encode("not the session"));
      if (place === "an empty directory") await fs.mkdir(dir);
      const compacted = fs.snapshotTree(`${staging}/session`);
      // Named at the previous copy: the copy itself, or its meta.json when that is what is wrong.
      const names = (file: string | undefined): boolean =>
        file === previous || file === `${previous}/meta.json`;
      const reported = (error: unknown): true => {
        assert.ok(error instanceof SessionFormatError, String(error));
        assert.ok(names(error.file), error.file);
        return true;
      };
      for (const fast of [true, false]) {
        const listed = await storeOn(fs).listDetailed(CWD, undefined, { fast });
        assert.deepEqual(listed.sessions, [], `fast: ${fast}`);
        assert.equal(listed.failures.length, 1, `fast: ${fast}`);
        reported(listed.failures[0]?.error);
      }
      if (place !== "a file") {
        await assert.rejects(storeOn(fs).open(dir, { readOnly: true }), reported);
        await assert.rejects(storeOn(fs).open(dir), reported);
        const verified = await verifySession(fs, dir, { sha256: portableSha256 });
        assert.equal(verified.ok, false);
        assert.ok(verified.findings.some((f) => names(f.file) && f.severity === "error"));
      } else {
        // What is in the session's place is refused by name, as without a compaction.
        for (const readOnly of [true, false]) {
          await assert.rejects(storeOn(fs).open(dir, { readOnly }), SessionFormatError);
        }
      }
      const report = await storeOn(fs).cleanup(CWD);
      assert.deepEqual(report.kept, [staging]);
      assert.deepEqual(report.removed, []);
      assert.deepEqual(
        fs.snapshotTree(`${staging}/session`),
        compacted,
        "the compacted copy stays",
      );
    });
  }
}

test("a session kept by a damaged compaction is not opened from its stale legacy backup", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  const id = "0a1b2c3d-0000-4000-8000-000000000001";
  const legacy = `${COLLECTION}/${id}.jsonl`;
  await fs.writeFile(legacy, legacySessionBytes(id, CWD, conversation(1)));
  const migrated = await storeOn(fs).open(legacy); // migrates; the backup stays
  await migrated.commit([user("replaced"), assistant("x")]);
  await migrated.commit([...conversation(1), user("after migration"), assistant("newest")]);
  await migrated.close();
  const dir = `${COLLECTION}/${id}`;
  // A compaction stopped between its renames, its previous copy damaged.
  const staging = await stoppedBetweenRenames(fs, dir);
  await fs.remove(`${staging}/previous/meta.json`);
  const before = fs.snapshotTree(COLLECTION);
  for (const readOnly of [true, false]) {
    await assert.rejects(storeOn(fs).open(legacy, { readOnly }), (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, String(error));
      assert.equal(error.file, `${staging}/previous`);
      return true;
    });
  }
  assert.deepEqual(fs.snapshotTree(COLLECTION), before, "the backup was not migrated in its place");
  assert.deepEqual((await storeOn(fs).cleanup(CWD)).kept, [staging]);
  assert.equal((await fs.lstat(`${staging}/session/meta.json`)).kind, "file");
});

test("an I/O error while recovery reads an interrupted compaction's previous copy surfaces as itself, never as no session", async () => {
  const { fs: baseline, session, history } = await replaced();
  const dir = session.getSessionPath();
  await stoppedBetweenRenames(baseline, dir);
  for (let n = 1;; n++) {
    const fs = baseline.clone();
    const start = fs.operationCount;
    fs.failAt(start + n, { error: "EIO" });
    let error: unknown;
    try {
      await (await storeOn(fs).open(dir)).close();
    } catch (caught) {
      error = caught;
    }
    assert.ok(!(error instanceof SessionNotFoundError), `EIO at op ${n}: ${error}`);
    const used = fs.operationCount - start; // fewer than n: the fault was never reached
    fs.clearFaults();
    const reopened = await storeOn(fs).open(dir);
    assert.deepEqual(reopened.messages, history, `EIO at op ${n}`);
    await reopened.close();
    if (used < n) break;
  }
});
