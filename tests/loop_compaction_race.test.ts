// Compaction, legacy backup removal and cleanup against what runs beside them: a listing, an
// open, a writer, a delete; and against paths and planted entries they must refuse.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs, type OperationRecord, SimulatedCrash } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { basename } from "../src/port/path.ts";
import { FsIoError } from "../src/port/errors.ts";
import {
  CorruptSessionError,
  InvalidArgumentError,
  SessionBusyError,
  SessionError,
  SessionFormatError,
  SessionLockedError,
  SessionNotFoundError,
} from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { Message } from "../src/loop/records/mod.ts";
import {
  assistant,
  conversation,
  legacySessionBytes,
  user,
  withoutRecordedTitle,
} from "./_fixtures.ts";
import { gate, hookedFs, linkedBeforeOpen } from "./_hooks.ts";
import { crashAtEveryOperation, failAtEveryOperation } from "./_crash.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const encoder = new TextEncoder();

function storeOn(fs: FileSystem): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT });
}

/** A session whose log holds an old generation before the committed one (start > 0). */
async function replaced(
  fs: MemoryFs,
  history: Message[] = [user("edited first"), ...conversation(3).slice(1), user("more")],
): Promise<{ dir: string; id: string; history: Message[] }> {
  const session = await storeOn(fs).create(CWD);
  await session.commit(conversation(3));
  await session.commit(history);
  await session.close();
  return { dir: session.getSessionPath(), id: session.id, history };
}

/**
 * The number of the operation of a compaction of `dir` (run on a copy of `fs` by the store
 * `storeFor` makes) that `match` picks.
 */
async function compactionOperation(
  fs: MemoryFs,
  dir: string,
  match: (record: OperationRecord) => boolean,
  storeFor: (fs: FileSystem) => SessionStore = storeOn,
): Promise<number> {
  const probe = fs.clone();
  probe.resetCounter();
  await storeFor(probe).compact(dir);
  return probe.operationLog.find(match)!.number;
}

/** A copy of `fs` recovered from a crash of `dir`'s compaction right after the operation `match` picks. */
async function crashedCompaction(
  fs: MemoryFs,
  dir: string,
  match: (record: OperationRecord) => boolean,
): Promise<MemoryFs> {
  const n = await compactionOperation(fs, dir, match);
  const crashed = fs.clone();
  crashed.resetCounter();
  crashed.crashAfter(n);
  await assert.rejects(storeOn(crashed).compact(dir), SimulatedCrash);
  return crashed.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
}

/**
 * A copy of `fs` (synced) recovered from a crash of `dir`'s compaction right after its first
 * rename: the session directory is gone and its previous copy sits in the staging directory.
 */
function crashedBetweenRenames(fs: MemoryFs, dir: string): Promise<MemoryFs> {
  return crashedCompaction(
    fs,
    dir,
    (r) => r.op === "rename" && r.to?.endsWith("/previous") === true,
  );
}

/**
 * A copy of `fs` recovered from a crash of `dir`'s compaction right after its swap, before its
 * staging directory (holding the previous copy) is removed.
 */
function crashedAfterSwap(fs: MemoryFs, dir: string): Promise<MemoryFs> {
  return crashedCompaction(fs, dir, (r) => r.op === "rename" && r.to === dir);
}

async function freshFs(): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  return fs;
}

function legacyBytes(id: string, messages: Message[]): Uint8Array {
  return legacySessionBytes(id, CWD, messages);
}

test("removeLegacyBackup keeps the backup when the directory under its id holds another session", async () => {
  const fs = await freshFs();
  const store = storeOn(fs);
  const a = await store.create(CWD);
  await a.commit(conversation(2));
  await a.close();
  const idB = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacyB = `${COLLECTION}/${idB}.jsonl`;
  await fs.writeFile(legacyB, legacyBytes(idB, [user("B's only copy")]));
  await fs.mkdir(`${COLLECTION}/${idB}`, { mode: 0o700 });
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.writeFile(
      `${COLLECTION}/${idB}/${name}`,
      await fs.readFile(`${a.getSessionPath()}/${name}`),
    );
  }
  await assert.rejects(store.removeLegacyBackup(`${COLLECTION}/${idB}`), SessionFormatError);
  assert.equal((await fs.lstat(legacyB)).kind, "file");
});

test("compact and removeLegacyBackup refuse private directories and names that are no session id", async () => {
  const fs = await freshFs();
  const { dir, id } = await replaced(fs);
  await fs.mkdir(`${COLLECTION}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f`, { mode: 0o700 });
  await fs.rename(dir, `${COLLECTION}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f/${id}`);
  await fs.mkdir(`${COLLECTION}/my-copy`);
  const before = fs.snapshotTree("/");
  const store = storeOn(fs);
  for (
    const path of [
      `${COLLECTION}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f/${id}`,
      `${COLLECTION}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f/${id}/meta.json`,
      `${COLLECTION}/.staging-${id}-ab/session`,
      `${COLLECTION}/my-copy`,
    ]
  ) {
    await assert.rejects(store.compact(path), InvalidArgumentError, path);
    await assert.rejects(store.removeLegacyBackup(path), InvalidArgumentError, path);
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("compaction never reads meta.json through a link planted there", async () => {
  const fs = await freshFs();
  const { dir } = await replaced(fs);
  await fs.mkdir("/outside", { recursive: true });
  await fs.rename(`${dir}/meta.json`, "/outside/meta.json");
  await fs.symlink("/outside/meta.json", `${dir}/meta.json`);
  fs.resetCounter();
  await assert.rejects(storeOn(fs).compact(dir), SessionFormatError);
  const reads = fs.operationLog.filter((r) => r.op === "readFile" || r.op === "open");
  assert.ok(!reads.some((r) => r.path === `${dir}/meta.json`), "meta.json read through the link");
});

test("compaction never copies a log swapped for a link after it listed the directory", async () => {
  const fs = await freshFs();
  const { dir, history } = await replaced(fs);
  const log = `${dir}/messages.jsonl`;
  // The planted copy would pass every check of the committed range.
  const racing = linkedBeforeOpen(fs, log, "/planted.jsonl", "/kept.jsonl");
  await assert.rejects(storeOn(racing.fs).compact(dir), SessionFormatError);
  assert.ok(racing.swapped());
  // Put back, the session is whole: nothing was compacted from the link.
  await fs.remove(log);
  await fs.rename("/kept.jsonl", log);
  const reopened = await storeOn(fs).open(dir, { readOnly: true });
  assert.deepEqual(reopened.messages, history);
  await reopened.close();
});

/**
 * Runs `reader` against a compaction of `dir` held between its two renames (the session directory
 * moved aside, the compacted one not yet in place) until `reader` has looked at the collection
 * (`seen` resolves), then lets the compaction finish, staging directory removed, before `reader`
 * goes on. Returns what `reader` returned.
 */
async function acrossFinishedSwap<T>(
  fs: MemoryFs,
  dir: string,
  reader: (fs: FileSystem, seen: () => Promise<void>) => Promise<T>,
): Promise<T> {
  const swapping = gate();
  const finish = gate();
  const compacting = storeOn(hookedFs(fs, {
    before: async (method, args) => {
      if (method === "rename" && args[1] === dir) {
        swapping.open();
        await finish.wait;
      }
    },
  })).compact(dir);
  await swapping.wait;
  const seen = gate();
  const reading = reader(fs, async () => {
    seen.open();
    await compacting; // the compaction finishes meanwhile
  });
  await seen.wait;
  finish.open();
  assert.equal((await compacting).compacted, true);
  // Its staging directory is gone.
  const names = (await fs.readDir(COLLECTION)).map((entry) => entry.name);
  assert.ok(!names.some((name) => name.startsWith(".")), names.join(", "));
  return await reading;
}

test("a listing that saw a compaction between its renames lists the session once it finished", async () => {
  for (const backup of [false, true]) {
    for (const fast of [true, false]) {
      const fs = await freshFs();
      const { dir, id, history } = await replaced(fs);
      if (backup) {
        await fs.writeFile(`${COLLECTION}/${id}.jsonl`, legacyBytes(id, [user("stale backup")]));
      }
      const result = await acrossFinishedSwap(fs, dir, (racing, seen) =>
        storeOn(hookedFs(racing, {
          after: async (method, args) => {
            if (method === "readDir" && args[0] === COLLECTION) await seen();
          },
        })).listDetailed(CWD, undefined, { fast }));
      const what = `backup: ${backup}, fast: ${fast}`;
      assert.deepEqual(result.failures, [], what);
      assert.deepEqual(
        result.sessions.map((s) => [s.id, s.storage, s.messageCount]),
        [[id, "directory", history.length]],
        what,
      );
    }
  }
});

test("a listing whose second look found a compaction's previous copy, removed before it was read, lists the session", async () => {
  for (const fast of [true, false]) {
    const fs = await freshFs();
    const { dir, id, history } = await replaced(fs);
    const listedOnce = gate();
    const betweenRenames = gate();
    const finish = gate();
    let compacting: Promise<unknown> = Promise.resolve(); // the compaction, once started
    let readDirs = 0;
    const compactFs = hookedFs(fs, {
      before: async (method, args) => {
        if (method === "rename" && args[1] === dir) { // the second rename: session -> <id>
          betweenRenames.open();
          await finish.wait;
        }
      },
    });
    const listFs = hookedFs(fs, {
      after: async (method, args) => {
        if (method === "readDir" && args[0] === COLLECTION && ++readDirs === 1) {
          // The collection is read before the compaction; the session is read between its renames.
          listedOnce.open();
          await betweenRenames.wait;
        }
        if (
          method === "lstat" && String(args[0]).endsWith("/previous/meta.json") && readDirs === 2
        ) {
          // The second look found the previous copy: the compaction finishes before it is read.
          finish.open();
          await compacting;
        }
      },
    });
    const listing = storeOn(listFs).listDetailed(CWD, undefined, { fast });
    await listedOnce.wait;
    compacting = storeOn(compactFs).compact(dir);
    const result = await listing;
    assert.equal(((await compacting) as { compacted: boolean }).compacted, true);
    assert.deepEqual(result.failures, [], `fast: ${fast}`);
    assert.deepEqual(
      result.sessions.map((s) => [s.id, s.storage, s.messageCount]),
      [[id, "directory", history.length]],
      `fast: ${fast}`,
    );
    assert.ok(readDirs >= 3, `fast: ${fast}, looks: ${readDirs}`);
    // Nothing racing, a listing reads the collection once.
    let quietReads = 0;
    const quiet = await storeOn(hookedFs(fs, {
      after: (method, args) => {
        if (method === "readDir" && args[0] === COLLECTION) quietReads++;
      },
    })).listDetailed(CWD, undefined, { fast });
    assert.equal(quiet.sessions.length, 1);
    assert.equal(quietReads, 1, `fast: ${fast}`);
  }
});

test("a read-only open whose retry found a compaction's previous copy, removed before it was read, opens the session", async () => {
  const fs = await freshFs();
  const { dir, history } = await replaced(fs);
  const reading = gate();
  const betweenRenames = gate();
  const finish = gate();
  let compacting: Promise<unknown> = Promise.resolve(); // the compaction, once started
  let armed = true;
  const compactFs = hookedFs(fs, {
    before: async (method, args) => {
      if (method === "rename" && args[1] === dir) { // the second rename: session -> <id>
        betweenRenames.open();
        await finish.wait;
      }
    },
  });
  let previousLooks = 0;
  const openFs = hookedFs(fs, {
    before: async (method, args) => {
      if (armed && /^readFile/.test(method) && args[0] === `${dir}/meta.json`) {
        // The open's read of meta.json comes after the first rename: the file is gone.
        armed = false;
        reading.open();
        await betweenRenames.wait;
      }
    },
    after: async (method, args) => {
      if (!armed && method === "lstat" && String(args[0]).endsWith("/previous/meta.json")) {
        // Its retry found the previous copy: the compaction finishes before it is read.
        previousLooks++;
        finish.open();
        await compacting;
      }
    },
  });
  const opening = storeOn(openFs).open(dir, { readOnly: true });
  await reading.wait;
  compacting = storeOn(compactFs).compact(dir);
  const opened = await opening;
  assert.equal(((await compacting) as { compacted: boolean }).compacted, true);
  assert.equal(previousLooks, 1);
  assert.deepEqual(opened.messages, history);
  assert.equal(opened.getSessionPath(), dir);
  await opened.close();
});

test("salvage into its own collection of a session caught between a compaction's renames reads it where recovery put it, and refuses the staged path", async () => {
  const fs = await freshFs();
  const { dir, id, history } = await replaced(fs);
  for (const to of [COLLECTION, "/rescue"]) {
    const crashed = await crashedBetweenRenames(fs, dir);
    const staging = (await crashed.readDir(COLLECTION)).map((entry) => entry.name)
      .find((name) => name.startsWith(".staging-"));
    assert.ok(staging !== undefined);
    const previous = `${COLLECTION}/${staging}/previous`;
    const store = storeOn(crashed);
    await assert.rejects(store.salvage(previous, to), InvalidArgumentError, previous);
    const result = await store.salvage(dir, to);
    assert.equal(result.kept, history.length, to);
    assert.notEqual(basename(result.dir), id);
    const copy = await store.open(result.dir, { readOnly: true });
    assert.deepEqual(copy.messages, history, to);
    await copy.close();
    // The session itself is whole, back in place once its collection is recovered.
    await store.cleanup(CWD);
    const session = await store.open(dir, { readOnly: true });
    assert.deepEqual(session.messages, history, to);
    assert.equal(session.getSessionPath(), dir);
    await session.close();
  }
});

test("a read-only open that saw a compaction between its renames opens the session once it finished", async () => {
  const fs = await freshFs();
  const { dir, history } = await replaced(fs);
  const opened = await acrossFinishedSwap(fs, dir, (racing, seen) =>
    storeOn(hookedFs(racing, {
      after: async (method, args) => {
        // The open's look at the collection for an interrupted operation's leftovers.
        if (method === "readDir" && args[0] === COLLECTION) await seen();
      },
    })).open(dir, { readOnly: true }));
  assert.deepEqual(opened.messages, history);
  assert.equal(opened.getSessionPath(), dir);
  await opened.close();
});

test("a delete whose recovery cannot read the compacted session leaves nothing of it behind", async () => {
  const fs = await freshFs();
  const { dir, id } = await replaced(fs);
  await storeOn(fs).archive.set(CWD, [id], true);
  // A crash after the swap, before the staging directory (holding the previous copy) is removed.
  const crashed = await crashedAfterSwap(fs, dir);
  let failed = false;
  const flaky = hookedFs(crashed, {
    before: (method, args) => {
      // One transient read error of the compacted session's meta.json, during the recovery.
      if (/^readFile/.test(method) && args[0] === `${dir}/meta.json` && !failed) {
        failed = true;
        throw new FsIoError("EIO", "read", String(args[0]), "injected");
      }
    },
  });
  // The recovery keeps the previous copy (it cannot tell what is in place), and the delete
  // takes it with the session: nothing of the session can come back.
  await storeOn(flaky).archive.delete(CWD, [id]);
  assert.ok(failed);
  const store = storeOn(crashed);
  await store.cleanup(CWD);
  assert.deepEqual(await store.list(CWD), []);
  assert.deepEqual((await crashed.readDir(COLLECTION)).map((entry) => entry.name), [
    "archive.json",
  ]);
});

/**
 * A collection whose session's compaction crashed after its swap and whose session in place was
 * then damaged (meta.json not JSON): recovery keeps the staging directory and its previous copy.
 * Synced, so a crash keeps it whole.
 */
async function keptCompaction(): Promise<{ fs: MemoryFs; dir: string; id: string }> {
  const fs = await freshFs();
  const { dir, id } = await replaced(fs);
  const crashed = await crashedAfterSwap(fs, dir);
  await crashed.writeFile(`${dir}/meta.json`, encoder.encode("{ not json"));
  const kept = await collectionStore(crashed).cleanup(undefined, COLLECTION);
  assert.equal(kept.kept.length, 1);
  crashed.syncAll();
  return { fs: crashed, dir, id };
}

function collectionStore(fs: FileSystem): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT, sessionDir: COLLECTION });
}

test("a delete of a session with a kept compaction copy, crashed or failed anywhere, never brings the copy back", async () => {
  const { fs: baseline, id } = await keptCompaction();
  const run = (fs: MemoryFs) =>
    collectionStore(fs).archive.delete(undefined, [id], { archivedOnly: false });
  const check = async (fs: MemoryFs, resolved: boolean, what: string): Promise<void> => {
    const store = collectionStore(fs);
    // Before any recovery, readers never see the previous copy as the session either.
    const before = await store.listDetailed(undefined, COLLECTION);
    assert.deepEqual(before.sessions, [], `${what}, before recovery`);
    await store.cleanup(undefined, COLLECTION);
    await store.cleanup(undefined, COLLECTION);
    const listed = await store.listDetailed(undefined, COLLECTION);
    const names = (await fs.readDir(COLLECTION)).map((entry) => entry.name);
    // Never the previous copy listed as the session: either the delete is undone (the damaged
    // session and its kept copy, as before) or it is done (nothing).
    assert.deepEqual(listed.sessions, [], what);
    if (resolved || names.length === 0) {
      assert.deepEqual([names, listed.failures], [[], []], what);
    } else {
      assert.deepEqual(listed.failures.map((f) => f.id), [id], what);
      assert.ok(names.includes(id) && names.some((name) => name.startsWith(".")), what);
    }
  };
  const crashes = await crashAtEveryOperation({
    baseline,
    run,
    check: (fs, info) => check(fs, info.resolved, `crash after ${info.n}, seed ${info.seed}`),
  });
  assert.ok(crashes > 10);
  await failAtEveryOperation({
    baseline,
    error: "EIO",
    persistent: false,
    run,
    check: (fs, info) => check(fs, info.resolved, `EIO at ${info.n}`),
  });
});

test("while a delete that staged a kept compaction copy is uncommitted, the session is still listed from that copy", async () => {
  const fs = await freshFs();
  const { dir, id, history } = await replaced(fs);
  fs.syncAll();
  // The session directory is gone (a crash between the compaction's renames) and a regular file
  // was planted in its place: recovery keeps the staging directory, and listings read the
  // session from its previous copy.
  const crashed = await crashedBetweenRenames(fs, dir);
  await crashed.writeFile(dir, new Uint8Array(1));
  const store = collectionStore(crashed);
  assert.equal((await store.cleanup(undefined, COLLECTION)).kept.length, 1);
  const before = await store.listDetailed(undefined, COLLECTION);
  assert.deepEqual(before.sessions.map((s) => [s.id, s.messageCount]), [[id, history.length]]);
  crashed.syncAll();
  // A delete of it crashes right after staging the kept copy (its first move).
  const probe = crashed.clone();
  probe.resetCounter();
  await collectionStore(probe).archive.delete(undefined, [id], { archivedOnly: false });
  const first = probe.operationLog.find((r) => r.op === "rename" && r.path.includes("/.staging-"))!
    .number;
  const running = crashed.clone();
  running.resetCounter();
  running.crashAfter(first);
  await assert.rejects(
    collectionStore(running).archive.delete(undefined, [id], { archivedOnly: false }),
    SimulatedCrash,
  );
  const during = running.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
  // The delete did not happen for readers: the session is listed as before it, and a read-only
  // open reads it from the same copy, writing nothing.
  const listed = await collectionStore(during).listDetailed(undefined, COLLECTION);
  assert.deepEqual(listed.sessions.map((s) => [s.id, s.messageCount]), [[id, history.length]]);
  const tree = during.snapshotTree("/");
  const reader = await collectionStore(during).open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, history);
  await reader.close();
  assert.deepEqual(during.snapshotTree("/"), tree);
});

test("deleting a session whose interrupted compaction recovery kept removes the kept copy too", async () => {
  const { fs: crashed, id } = await keptCompaction();
  const store = collectionStore(crashed);
  // The user deletes the broken session (from the explicit collection, where that is allowed).
  await store.archive.delete(undefined, [id], { archivedOnly: false });
  await store.cleanup(undefined, COLLECTION);
  const listed = await store.listDetailed(undefined, COLLECTION);
  assert.deepEqual([listed.sessions, listed.failures], [[], []]);
  assert.deepEqual((await crashed.readDir(COLLECTION)).map((entry) => entry.name), []);
});

test("compaction of a session whose log is missing reports corruption, as an open does", async () => {
  const fs = await freshFs();
  const { dir } = await replaced(fs);
  await fs.remove(`${dir}/messages.jsonl`);
  const store = storeOn(fs);
  await assert.rejects(store.open(dir, { readOnly: true }), CorruptSessionError);
  await assert.rejects(store.compact(dir), CorruptSessionError);
});

for (const op of ["compact", "removeLegacyBackup"] as const) {
  test(`${op} queued behind a delete of the same session reports it not found`, async () => {
    const fs = await freshFs();
    const deleteStarted = gate();
    let dir = "";
    let armed = false;
    const shared = hookedFs(fs, {
      after: async (method, args) => {
        if (method === "mkdir" && String(args[0]).includes("/.delete-")) deleteStarted.open();
        if (armed && method === "lstat" && args[0] === `${dir}/meta.json`) {
          armed = false;
          await deleteStarted.wait; // its check passed; the delete now holds the lock
        }
      },
    });
    const store = storeOn(shared);
    const session = await store.create(CWD);
    await session.commit(conversation(1));
    await session.commit([user("x"), ...conversation(1).slice(1)]);
    await session.close();
    await store.archive.set(CWD, [session.id], true);
    dir = session.getSessionPath();
    armed = true;
    const other = store[op](dir);
    other.catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 0));
    await store.archive.delete(CWD, [session.id]);
    await assert.rejects(other, SessionNotFoundError);
  });
}

test("a fast listing racing a compaction never takes a title from the compacted log at old offsets", async () => {
  const fs = await freshFs();
  const store = storeOn(fs);
  const session = await store.create(CWD);
  await session.commit([user("q1"), assistant("r1")]);
  // The new generation's first lines have the old ones' lengths: the old offsets land on lines.
  await session.commit([
    user("q2"),
    assistant("r2"),
    user("Title B"),
    assistant("x"),
    ...conversation(6),
  ]);
  await session.close();
  const dir = session.getSessionPath();
  // An index that records no title: the listing reads the first user message from the log.
  await withoutRecordedTitle(fs, dir);
  const swapped = gate();
  let armed = true;
  const lister = storeOn(hookedFs(fs, {
    before: async (method, args) => {
      // The listing's open of the log (no-follow where the port has it, as MemoryFs does).
      if (
        armed && (method === "open" || method === "openNoFollow") &&
        args[0] === `${dir}/messages.jsonl`
      ) {
        armed = false;
        await swapped.wait;
      }
    },
  }));
  const listing = lister.listDetailed(CWD, undefined, { fast: true });
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal((await storeOn(fs).compact(dir)).compacted, true);
  swapped.open();
  const result = await listing;
  assert.equal(armed, false, "the listing's open of the log was held across the compaction");
  assert.deepEqual(result.failures, []);
  assert.equal(result.sessions[0]?.title?.text, "q2");
});

for (const point of ["after the swap", "between the renames"] as const) {
  test(`a read-only open whose meta.json read lands ${point} of a compaction sees one session`, async () => {
    const fs = await freshFs();
    const { dir, history } = await replaced(fs);
    const paused = gate();
    const release = gate();
    let armed = true;
    const shared = hookedFs(fs, {
      before: async (method, args) => {
        if (armed && /^readFile/.test(method) && args[0] === `${dir}/meta.json`) {
          armed = false;
          paused.open();
          await release.wait;
        }
        if (
          point === "between the renames" && method === "rename" &&
          String(args[0]).endsWith("/session")
        ) {
          release.open();
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      },
    });
    const store = storeOn(shared);
    const opening = store.open(dir, { readOnly: true });
    await paused.wait;
    const compacting = store.compact(dir);
    if (point === "after the swap") {
      await compacting;
      release.open();
    }
    const reader = await opening;
    await compacting;
    assert.deepEqual(reader.messages, history);
    await reader.close();
  });
}

test("cleanup reports the collection leftovers it removed", async () => {
  const fs = await freshFs();
  const store = storeOn(fs);
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const staging = `${COLLECTION}/.staging-${session.id}-deadbeef`;
  await fs.mkdir(staging);
  await fs.writeFile(`${staging}/messages.jsonl`, new Uint8Array(3));
  await fs.writeFile(`${COLLECTION}/.archive.json.0badc0de1.tmp`, new Uint8Array(1));
  const report = await store.cleanup(CWD);
  assert.deepEqual(
    report.removed.sort(),
    [staging, `${COLLECTION}/.archive.json.0badc0de1.tmp`].sort(),
  );
  const names = (await fs.readDir(COLLECTION)).map((e) => e.name);
  assert.ok(!names.includes(`.staging-${session.id}-deadbeef`));
});

test("cleanup never removes the temp file of a save that starts while it runs", async () => {
  const fs = await freshFs();
  const first = await storeOn(fs).create(CWD);
  await first.commit(conversation(1));
  await first.close();
  const dir = first.getSessionPath();
  const tmpCreated = gate();
  const cleanupDone = gate();
  let armCleanup = true;
  let armWriter = false;
  const shared = hookedFs(fs, {
    before: async (method, args) => {
      // Cleanup has judged the session free and is about to look into it.
      if (armCleanup && method === "readDir" && args[0] === dir) {
        armCleanup = false;
        await tmpCreated.wait;
      }
      // The writer's meta.json temp file exists; it is renamed only after cleanup finished.
      if (armWriter && method === "rename" && String(args[0]).endsWith(".tmp")) {
        armWriter = false;
        await cleanupDone.wait;
      }
    },
    after: (method, args) => {
      const path = String(args[0]);
      if (method === "open" && path.startsWith(`${dir}/.`) && path.endsWith(".tmp")) {
        tmpCreated.open();
      }
    },
  });
  const store = storeOn(shared);
  const cleaning = store.cleanup(CWD).finally(() => cleanupDone.open());
  await new Promise((resolve) => setTimeout(resolve, 10));
  const writer = await store.open(dir);
  armWriter = true;
  await writer.commit([...conversation(1), user("next")]);
  await cleaning;
  await writer.close();
  assert.equal((await storeOn(fs).open(dir, { readOnly: true })).messages.length, 3);
});

/** What a test puts where a session directory belongs while its compaction's copy waits. */
type Plant =
  | "link"
  | "file"
  | "empty directory"
  | "another session's copy"
  | "a directory whose meta.json is a link"
  | "a directory whose meta.json is a directory";

/** Puts `planted` at `dir`; "another session's copy" copies the files of the session `other`. */
async function plantInPlace(fs: MemoryFs, dir: string, planted: Plant, other: string) {
  if (planted === "link") {
    await fs.mkdir("/elsewhere", { recursive: true });
    await fs.symlink("/elsewhere", dir);
  } else if (planted === "file") await fs.writeFile(dir, new Uint8Array(1));
  else {
    await fs.mkdir(dir);
    if (planted === "another session's copy") {
      for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
        await fs.writeFile(`${dir}/${name}`, await fs.readFile(`${other}/${name}`));
      }
    } else if (planted === "a directory whose meta.json is a link") {
      await fs.symlink("/nowhere", `${dir}/meta.json`);
    } else if (planted === "a directory whose meta.json is a directory") {
      await fs.mkdir(`${dir}/meta.json`);
    }
  }
}

test("recovery keeps an interrupted compaction's previous session when something else took its place", async () => {
  const fs = await freshFs();
  const { dir, history } = await replaced(fs);
  fs.syncAll();
  const other = await storeOn(fs).create(CWD);
  await other.commit(conversation(1, "other"));
  await other.close();
  const plants = [
    "link",
    "file",
    "empty directory",
    "another session's copy",
    "a directory whose meta.json is a link",
    "a directory whose meta.json is a directory",
  ] as const;
  for (const planted of plants) {
    const recovered = await crashedBetweenRenames(fs, dir);
    await plantInPlace(recovered, dir, planted, other.getSessionPath());
    const report = await storeOn(recovered).cleanup(CWD);
    const staging = (await recovered.readDir(COLLECTION)).find((e) =>
      e.name.startsWith(".staging-")
    );
    assert.ok(staging !== undefined, `${planted}: the previous session was removed`);
    assert.deepEqual(report.kept, [`${COLLECTION}/${staging.name}`], planted);
    // Once the planted entry is gone, the next recovery puts the session back.
    await recovered.remove(dir, { recursive: true });
    const again = await storeOn(recovered).cleanup(CWD);
    assert.deepEqual(again.restored, [`${COLLECTION}/${staging.name}`], planted);
    const reader = await storeOn(recovered).open(dir, { readOnly: true });
    assert.deepEqual(reader.messages, history, planted);
    await reader.close();
  }
});

test("while something else holds the place of a session whose previous copy recovery kept, listings and read-only opens agree", async () => {
  const fs = await freshFs();
  const { dir, id, history } = await replaced(fs);
  fs.syncAll();
  const other = await storeOn(fs).create(CWD);
  await other.commit(conversation(1, "other"));
  await other.close();
  // What is at the session's place, and whether the kept copy is read in its place.
  const plants = [
    ["link", true],
    ["file", true],
    ["empty directory", true],
    ["another session's copy", false],
    ["a directory whose meta.json is a link", false],
  ] as const;
  for (const [planted, readable] of plants) {
    const recovered = await crashedBetweenRenames(fs, dir);
    await plantInPlace(recovered, dir, planted, other.getSessionPath());
    const store = storeOn(recovered);
    assert.equal((await store.cleanup(CWD)).kept.length, 1, planted);
    const before = recovered.snapshotTree("/");
    const results = [];
    for (const fast of [true, false]) {
      const listed = await store.listDetailed(CWD, undefined, { fast });
      const session = listed.sessions.find((info) => info.id === id);
      const failure = listed.failures.find((entry) => entry.path.includes(id));
      results.push(session?.messageCount ?? (failure === undefined ? "absent" : "failure"));
    }
    let opened: number | string;
    try {
      const reader = await store.open(dir, { readOnly: true });
      assert.deepEqual(reader.messages, history, planted);
      opened = reader.messages.length;
      await reader.close();
    } catch (error) {
      assert.ok(error instanceof SessionError, `${planted}: ${String(error)}`);
      opened = "failure";
    }
    const expected = readable ? history.length : "failure";
    assert.deepEqual([...results, opened], [expected, expected, expected], planted);
    assert.deepEqual(recovered.snapshotTree("/"), before, `${planted}: a reader wrote`);
    // A writer is refused: recovery cannot put the session back while the place is taken.
    await assert.rejects(store.open(dir), SessionError, planted);
  }
});

test("a delete's staged directory without meta.json is no copy of the session, for listings as for read-only opens", async () => {
  const fs = await freshFs();
  const { dir, id, history } = await replaced(fs);
  fs.syncAll();
  const recovered = await crashedBetweenRenames(fs, dir);
  // An uncommitted delete of the session whose staged directory holds no meta.json.
  const staged = `${COLLECTION}/.delete-11111111-2222-4333-8444-555555555555`;
  await recovered.mkdir(`${staged}/${id}`, { recursive: true });
  const intent = { operation: "delete", ids: [id], entries: [id], archived: [], membersBefore: [] };
  await recovered.writeFile(`${staged}/intent.json`, encoder.encode(JSON.stringify(intent)));
  const store = storeOn(recovered);
  const reader = await store.open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, history);
  await reader.close();
  for (const fast of [true, false]) {
    const listed = await store.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(listed.failures, [], `fast ${fast}`);
    assert.deepEqual(listed.sessions.map((s) => [s.id, s.messageCount]), [[id, history.length]]);
  }
});

test("a delete journal that cannot be read is reported by listings and read-only opens alike, ahead of a kept compaction copy", async () => {
  const fs = await freshFs();
  const { dir, id } = await replaced(fs);
  fs.syncAll();
  for (const planted of ["nothing", "empty directory", "file"] as const) {
    const recovered = await crashedBetweenRenames(fs, dir);
    if (planted === "empty directory") await recovered.mkdir(dir);
    else if (planted === "file") await recovered.writeFile(dir, new Uint8Array(1));
    // A staged delete of the session whose journal is gone: it cannot say what it moved.
    await recovered.mkdir(`${COLLECTION}/.delete-11111111-2222-4333-8444-555555555555/${id}`, {
      recursive: true,
    });
    const store = storeOn(recovered);
    const tree = recovered.snapshotTree("/");
    for (const fast of [true, false]) {
      const listed = await store.listDetailed(CWD, undefined, { fast });
      assert.deepEqual(listed.sessions, [], `${planted}, fast ${fast}`);
      assert.equal(listed.failures.length, 1, `${planted}, fast ${fast}`);
      assert.ok(listed.failures[0]?.error instanceof CorruptSessionError, planted);
    }
    await assert.rejects(store.open(dir, { readOnly: true }), CorruptSessionError, planted);
    assert.deepEqual(recovered.snapshotTree("/"), tree, `${planted}: a reader wrote`);
  }
});

test("a read-only open of a session caught between a compaction's renames reads its previous directory and writes nothing", async () => {
  const fs = await freshFs();
  const { dir, history } = await replaced(fs);
  fs.syncAll();
  const recovered = await crashedBetweenRenames(fs, dir);
  const before = recovered.snapshotTree("/");
  const reader = await storeOn(recovered).open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, history);
  assert.deepEqual((await reader.readHistory(0)).messages, []);
  await reader.close();
  assert.deepEqual(recovered.snapshotTree("/"), before);
  // A writer puts the previous directory back first.
  const writer = await storeOn(recovered).open(dir);
  assert.deepEqual(writer.messages, history);
  assert.equal(writer.getSessionPath(), dir);
  await writer.close();
});

test("a read-only open through the legacy backup of a session caught between a compaction's renames writes nothing", async () => {
  const fs = await freshFs();
  const { dir, id, history } = await replaced(fs);
  await fs.writeFile(`${COLLECTION}/${id}.jsonl`, legacyBytes(id, [user("stale backup")]));
  await fs.writeFile(`${COLLECTION}/.archive.json.0badc0de2.tmp`, new Uint8Array(1));
  fs.syncAll();
  const recovered = await crashedBetweenRenames(fs, dir);
  const before = recovered.snapshotTree("/");
  const reader = await storeOn(recovered).open(`${COLLECTION}/${id}.jsonl`, { readOnly: true });
  // The published session (read in place), never its stale backup, and nothing recovered.
  assert.deepEqual(reader.messages, history);
  await reader.close();
  assert.deepEqual(recovered.snapshotTree("/"), before);
});

for (const when of ["holds", "is taking"] as const) {
  test(`a writer of the same process is told a compaction ${when} the session's writer lock`, async () => {
    const fs = await freshFs();
    const { dir } = await replaced(fs);
    const paused = gate();
    const finish = gate();
    // One filesystem object for both, as in one process (in-process locks are kept per object).
    const shared = hookedFs(fs, {
      before: async (method, args) => {
        const at = when === "holds"
          ? method === "mkdir" && String(args[0]).includes("/.staging-")
          : method === "open" && args[0] === `${dir}/writer.lock`;
        if (at) {
          paused.open();
          await finish.wait;
        }
      },
    });
    const store = new SessionStore({ fs: shared, agentDir: AGENT, process: THIS_PROCESS });
    const compacting = store.compact(dir);
    await paused.wait;
    const refused = await store.open(dir).then(
      () => assert.fail("opened for writing during the compaction"),
      (error: unknown) => error,
    );
    assert.ok(refused instanceof SessionBusyError);
    assert.match(refused.message, /being compacted in this process/);
    finish.open();
    assert.equal((await compacting).compacted, true);
    const writer = await store.open(dir);
    await writer.close();
  });
}

test("a compaction whose swap and rollback both failed leaves no lock of its own behind once recovered", async () => {
  const fs = await freshFs();
  const { dir, history } = await replaced(fs);
  const storeWith = (on: FileSystem) =>
    new SessionStore({ fs: on, agentDir: AGENT, process: THIS_PROCESS });
  const swap = await compactionOperation(
    fs,
    dir,
    (r) => r.op === "rename" && r.to === dir,
    storeWith,
  );
  // The swap's second rename fails, and so does every rename after it: the rollback too.
  fs.resetCounter();
  fs.failAt(swap, { ops: ["rename"], persistent: true });
  await assert.rejects(storeWith(fs).compact(dir), FsIoError);
  fs.clearFaults();
  // The next structural operation puts the previous directory back, with the lock file the
  // compaction took in it: that lock is nobody's any more.
  const report = await storeWith(fs).cleanup(CWD);
  assert.equal(report.restored.length, 1);
  const writer = await storeWith(fs).open(dir);
  assert.deepEqual(writer.messages, history);
  await writer.close();
});

/** A probe of this process, with the start time that tells its threads from a later process. */
const THIS_PROCESS = {
  pid: 4242,
  host: "host",
  isAlive: (pid: number) => pid === 4242,
  processStart: (pid: number) => pid === 4242 ? "start-1" : undefined,
};

test("a compacted session whose meta.json cannot be read does not stop the collection's other operations", async () => {
  const fs = await freshFs();
  const other = await storeOn(fs).create(CWD);
  await other.commit(conversation(1));
  await other.close();
  const { dir } = await replaced(fs);
  fs.syncAll();
  // A crash after the swap, before the staging directory is removed.
  const crashed = await crashedAfterSwap(fs, dir);
  const unreadable = hookedFs(crashed, {
    before: (method, args) => {
      if (/^readFile/.test(method) && args[0] === `${dir}/meta.json`) {
        throw new FsIoError("EIO", "read", String(args[0]), "injected");
      }
    },
  });
  const store = storeOn(unreadable);
  await store.archive.set(CWD, [other.id], true);
  const report = await store.cleanup(CWD);
  assert.equal(report.kept.length, 1);
  assert.ok(report.kept[0]?.includes("/.staging-"));
});

test("a delete whose rollback failed leaves no lock of its own behind once recovered", async () => {
  const fs = await freshFs();
  const storeWith = (on: FileSystem) =>
    new SessionStore({ fs: on, agentDir: AGENT, process: THIS_PROCESS });
  const session = await storeWith(fs).create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const id = session.id;
  await storeWith(fs).archive.set(CWD, [id], true);
  // The delete's first rename after moving the session aside fails, and so does every rename
  // after it: the rollback too. The session directory stays staged with the delete's lock in it.
  const probe = fs.clone();
  probe.resetCounter();
  await storeWith(probe).archive.delete(CWD, [id]);
  const moved =
    probe.operationLog.find((r) => r.op === "rename" && r.path === session.getSessionPath())!
      .number;
  fs.resetCounter();
  fs.failAt(moved + 1, { ops: ["rename", "writeFile", "open"], persistent: true });
  await assert.rejects(storeWith(fs).archive.delete(CWD, [id]));
  fs.clearFaults();
  const report = await storeWith(fs).cleanup(CWD);
  assert.equal(report.restored.length, 1);
  const writer = await storeWith(fs).open(session.getSessionPath());
  assert.equal(writer.messages.length, conversation(2).length);
  await writer.close();
});

test("recovery leaves an entry named like a lock that is not a file where it is, and goes on", async () => {
  const fs = await freshFs();
  const { dir, history } = await replaced(fs);
  fs.syncAll();
  const recovered = await crashedBetweenRenames(fs, dir);
  const staging = (await recovered.readDir(COLLECTION)).find((e) => e.name.startsWith(".staging-"));
  const planted = `${COLLECTION}/${staging!.name}/previous/writer.lock`;
  await recovered.mkdir(planted);
  await recovered.writeFile(`${planted}/inside`, new Uint8Array(1));
  const report = await storeOn(recovered).cleanup(CWD);
  assert.equal(report.restored.length, 1);
  assert.equal((await recovered.lstat(`${dir}/writer.lock`)).kind, "directory");
  const reader = await storeOn(recovered).open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, history);
  await reader.close();
});

test("a read-only open through the legacy file that saw a compaction between its renames writes nothing", async () => {
  const fs = await freshFs();
  const { dir, id, history } = await replaced(fs);
  await fs.writeFile(`${COLLECTION}/${id}.jsonl`, legacyBytes(id, [user("stale backup")]));
  // A leftover that any recovery of the collection removes, planted once the compaction (which
  // recovers first) finished.
  const leftover = `${COLLECTION}/.archive.json.0badc0de2.tmp`;
  let armed = true;
  const opened = await acrossFinishedSwap(fs, dir, (racing, seen) =>
    storeOn(hookedFs(racing, {
      after: async (method, args) => {
        if (armed && method === "readDir" && args[0] === COLLECTION) {
          armed = false;
          await seen();
          await fs.writeFile(leftover, new Uint8Array(1));
        }
      },
    })).open(`${COLLECTION}/${id}.jsonl`, { readOnly: true }));
  assert.deepEqual(opened.messages, history);
  await opened.close();
  assert.equal((await fs.lstat(leftover)).kind, "file", "no recovery ran");
});

test("a writer open of a damaged session reports the damage, not a failure of the collection it waited for", async () => {
  const fs = await freshFs();
  const { dir } = await replaced(fs);
  const log = await fs.readFile(`${dir}/messages.jsonl`);
  log[log.length - 3] = log[log.length - 3] === 0x61 ? 0x62 : 0x61;
  await fs.writeFile(`${dir}/messages.jsonl`, log);
  // A staged delete with entries but no journal: recovering the collection fails.
  const staged = `${COLLECTION}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(staged);
  await fs.writeFile(`${staged}/something`, new Uint8Array(1));
  const store = storeOn(fs);
  await assert.rejects(store.open(dir, { readOnly: true }), CorruptSessionError);
  await assert.rejects(store.open(dir), (error) => {
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.file, `${dir}/messages.jsonl`);
    return true;
  });
});

test("a writer open that meets another process's compaction swap reports a typed error", async () => {
  const fs = await freshFs();
  const alive = new Set([200, 300]);
  const probe = (pid: number) => ({ pid, host: "h", isAlive: (other: number) => alive.has(other) });
  const first = await new SessionStore({ fs, agentDir: AGENT, process: probe(200) }).create(CWD);
  await first.commit(conversation(1));
  await first.close();
  const dir = first.getSessionPath();
  let armed = true;
  const racing = hookedFs(fs, {
    before: async (method, args) => {
      if (armed && method === "open" && args[0] === `${dir}/writer.lock`) {
        armed = false;
        // Process 300, compacting under its collection lock, makes its first rename now.
        await fs.writeFile(
          `${COLLECTION}/.collection.lock`,
          encoder.encode(JSON.stringify({ pid: 300, host: "h", startedAt: "x", token: "0-300" })),
        );
        await fs.mkdir(`${COLLECTION}/.staging-${first.id}-abcd`);
        await fs.rename(dir, `${COLLECTION}/.staging-${first.id}-abcd/previous`);
      }
    },
  });
  const store = new SessionStore({
    fs: racing,
    agentDir: AGENT,
    process: probe(200),
    collectionLockWaitMs: 100,
  });
  await assert.rejects(store.open(dir), SessionLockedError);
});

test("a read-only open through the legacy backup of a migrated session writes nothing", async () => {
  const fs = await freshFs();
  const store = storeOn(fs);
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.mkdir(COLLECTION, { recursive: true });
  await fs.writeFile(`${COLLECTION}/${id}.jsonl`, legacyBytes(id, conversation(1)));
  await (await store.open(`${COLLECTION}/${id}.jsonl`)).close(); // migrated
  // Leftovers a recovery would act on: an archive temp file, another session mid-compaction.
  const other = await store.create(CWD);
  await other.commit(conversation(2, "y"));
  await other.close();
  const staging = `${COLLECTION}/.staging-${other.id}-abcd1234`;
  await fs.mkdir(staging);
  await fs.rename(other.getSessionPath(), `${staging}/previous`);
  await fs.writeFile(`${COLLECTION}/.archive.json.0badc0de2.tmp`, encoder.encode("{"));
  const before = fs.snapshotTree("/");
  const reader = await store.open(`${COLLECTION}/${id}.jsonl`, { readOnly: true });
  assert.equal(reader.getSessionPath(), `${COLLECTION}/${id}`);
  await reader.close();
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("the compacted copy is locked from its rename into place until that move is durable: another process's writer cannot resolve a save a power loss would take", async () => {
  const alive = new Set([100, 200]);
  const probe = (pid: number) => ({ pid, host: "h", isAlive: (p: number) => alive.has(p) });
  const base = new MemoryFs();
  await base.mkdir(CWD, { recursive: true });
  // The writer's process uses one filesystem object throughout, as a real process does.
  const writerFs = hookedFs(base);
  const writerStore = () =>
    new SessionStore({ fs: writerFs, agentDir: AGENT, process: probe(200) });
  const first = await writerStore().create(CWD);
  await first.commit(conversation(2));
  await first.commit([user("edited"), ...conversation(2).slice(1)]);
  await first.close();
  const dir = first.getSessionPath();
  base.syncAll();
  // The compaction (process 100) pauses right after renaming the compacted copy into place.
  const swapped = gate();
  const resume = gate();
  const compactorFs = hookedFs(base, {
    async after(method, args) {
      if (method === "rename" && args[1] === dir) {
        swapped.open();
        await resume.wait;
      }
    },
  });
  const compacting = new SessionStore({ fs: compactorFs, agentDir: AGENT, process: probe(100) })
    .compact(dir);
  await swapped.wait;
  await assert.rejects(writerStore().open(dir), (error: unknown) => {
    assert.ok(error instanceof SessionLockedError, String(error));
    assert.equal(error.pid, 100);
    return true;
  });
  resume.open();
  assert.equal((await compacting).compacted, true);
  // Then the writer opens it; its save survives a power loss.
  const writer = await writerStore().open(dir);
  const saved = user("saved after the compaction");
  await writer.commit([...writer.messages, saved]);
  await writer.close();
  const after = base.crash({ extraJournal: "none", tailMode: "none" });
  const reopened = await new SessionStore({ fs: after, agentDir: AGENT, process: probe(300) })
    .open(dir, { readOnly: true });
  assert.deepEqual(reopened.messages.at(-1), saved);
  await reopened.close();
  assert.deepEqual(
    (await base.readDir(dir)).map((entry) => entry.name).sort(),
    ["index.json", "messages.jsonl", "meta.json"],
  );
});
