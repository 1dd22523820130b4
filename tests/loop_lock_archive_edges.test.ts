// Edges of the store's locks, archive calls, cleanup and delete rollback: lock files holding JSON
// but no lock record, entries named like takeover markers that are no files, storage faults and
// vanishing sessions while locking or cleaning up, archive ids that are no array, and what a
// rolled-back delete keeps (entries it never staged) or puts back (membership archived since).
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { FsIoError } from "../src/port/errors.ts";
import { InvalidArgumentError, SessionLockedError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { acquireWriterLock, COLLECTION_LOCK_FILE, WRITER_LOCK_FILE } from "../src/loop/lock.ts";
import { conversation, failingWithEio, probe } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const HOST = "test-host";
const encoder = new TextEncoder();
/** The lock record of a process that is gone (pid 999 runs on no host of the tests). */
const DEAD = { pid: 999, host: HOST, startedAt: "2020-01-01T00:00:00.000Z", token: "dead" };

/** A store of process `pid` (with a probe), or of a store without a probe when `pid` is null. */
function storeAs(fs: FileSystem, pid: number | null, alive = new Set([100, 200])): SessionStore {
  return new SessionStore({
    fs,
    agentDir: AGENT,
    collectionLockWaitMs: 30,
    ...(pid === null ? {} : { process: probe(pid, alive, HOST) }),
  });
}

async function setup(): Promise<{ fs: MemoryFs; session: SessionManager; dir: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const session = await storeAs(fs, 100).create(CWD);
  await session.commit(conversation(1));
  await session.close();
  return { fs, session, dir: session.getSessionPath() };
}

/** The error `action` fails with; the test fails, saying `unexpected`, where it succeeds. */
async function refusal(action: Promise<unknown>, unexpected: string): Promise<unknown> {
  return await action.then(() => assert.fail(unexpected), (error: unknown) => error);
}

async function names(fs: FileSystem, dir: string): Promise<string[]> {
  return (await fs.readDir(dir)).map((entry) => entry.name).sort();
}

test("a writer lock holding JSON null is no lock record: respected as another process's, naming the file", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  await fs.writeFile(lock, encoder.encode("null"), { mode: 0o600 });
  const before = fs.snapshotTree("/");
  const refused = await refusal(storeAs(fs, null).open(dir), "opened for writing under a lock");
  assert.ok(refused instanceof SessionLockedError, String(refused));
  assert.equal(refused.file, lock);
  assert.equal(refused.pid, undefined);
  assert.match(refused.message, /being written by another process/);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a collection lock holding JSON null is waited for, then refused naming another process", async () => {
  const { fs } = await setup();
  const lock = `${COLLECTION}/${COLLECTION_LOCK_FILE}`;
  await fs.writeFile(lock, encoder.encode("null"), { mode: 0o600 });
  await fs.writeFile(`${COLLECTION}/.archive.json.0badc0de1.tmp`, encoder.encode("partial"));
  const before = fs.snapshotTree("/");
  const refused = await refusal(
    storeAs(fs, null).cleanup(CWD),
    "cleaned up under another process's collection lock",
  );
  assert.ok(refused instanceof SessionLockedError, String(refused));
  assert.equal(refused.file, lock);
  assert.match(refused.message, /locked by another process;/);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("cleanup leaves entries named like takeover markers that are no files, and cleans the rest", async () => {
  const { fs, dir } = await setup();
  // A dead process's lock and temp file, beside a directory named like a takeover marker.
  await fs.writeFile(`${dir}/${WRITER_LOCK_FILE}`, encoder.encode(JSON.stringify(DEAD)));
  await fs.writeFile(`${dir}/.meta.json.0badc0de1.tmp`, encoder.encode("partial"));
  const marker = `${dir}/${WRITER_LOCK_FILE}.takeover-0badc0de`;
  await fs.mkdir(marker);
  await fs.writeFile(`${marker}/kept.txt`, encoder.encode("not the store's"));
  // And one named like a collection lock's marker, in the collection.
  const collectionMarker = `${COLLECTION}/${COLLECTION_LOCK_FILE}.takeover-0badc0de`;
  await fs.mkdir(collectionMarker);
  const report = await storeAs(fs, 200).cleanup(CWD);
  assert.deepEqual(
    report.removed.map((path) => path.slice(dir.length + 1)).sort(),
    [".meta.json.0badc0de1.tmp", WRITER_LOCK_FILE].sort(),
  );
  assert.equal((await fs.lstat(marker)).kind, "directory");
  assert.deepEqual(await names(fs, marker), ["kept.txt"]);
  assert.equal((await fs.lstat(collectionMarker)).kind, "directory");
  // Without a temp file to remove, the same entry is left alone too.
  await fs.writeFile(`${dir}/${WRITER_LOCK_FILE}`, encoder.encode(JSON.stringify(DEAD)));
  const again = await storeAs(fs, 200).cleanup(CWD);
  assert.deepEqual(again.removed, [`${dir}/${WRITER_LOCK_FILE}`]);
  assert.deepEqual(await names(fs, marker), ["kept.txt"]);
});

test("a storage fault while cleanup takes a session's lock is reported, and its temp file stays", async () => {
  const { fs, dir } = await setup();
  const temp = `${dir}/.meta.json.0badc0de1.tmp`;
  await fs.writeFile(temp, encoder.encode("partial"));
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const failing = failingWithEio(fs, (method, path) => method === "open" && path === lock);
  const refused = await refusal(storeAs(failing, 200).cleanup(CWD), "cleanup hid a storage fault");
  assert.ok(refused instanceof FsIoError, String(refused));
  assert.equal(refused.path, lock);
  assert.equal((await fs.lstat(temp)).kind, "file");
  // Once the fault clears, the temp file goes.
  assert.deepEqual((await storeAs(fs, 200).cleanup(CWD)).removed, [temp]);
});

test("a session, or a temp file of it, removed while cleanup visits it is skipped; the others are cleaned", async () => {
  const whens = [
    "before its listing",
    "before its lock",
    "once its lock is taken",
    "once its lock is released",
    "once its stale lock is removed",
    "just before its temp file is removed",
  ] as const;
  for (const when of whens) {
    const { fs, dir } = await setup();
    const other = await storeAs(fs, 100).create(CWD);
    await other.commit(conversation(1));
    await other.close();
    const otherTemp = `${other.getSessionPath()}/.meta.json.0badc0de2.tmp`;
    await fs.writeFile(otherTemp, encoder.encode("partial"));
    const temp = `${dir}/.meta.json.0badc0de1.tmp`;
    const lock = `${dir}/${WRITER_LOCK_FILE}`;
    if (when === "once its stale lock is removed") {
      // No temp file, only a dead process's lock: removed without locking the session.
      await fs.writeFile(lock, encoder.encode(JSON.stringify(DEAD)));
    } else {
      await fs.writeFile(temp, encoder.encode("partial"));
    }
    let removed = false;
    // The session is removed by hand (or by a process that does not take the store's locks), or
    // only its temp file is.
    const remove = async (at: boolean) => {
      if (at && !removed) {
        removed = true;
        await fs.remove(when === "just before its temp file is removed" ? temp : dir, {
          recursive: true,
        });
      }
    };
    const racing = hookedFs(fs, {
      async before(method, args) {
        if (when === "before its listing") await remove(method === "readDir" && args[0] === dir);
        if (when === "before its lock") await remove(method === "open" && args[0] === lock);
        if (when === "just before its temp file is removed") {
          await remove(method === "remove" && args[0] === temp);
        }
      },
      async after(method, args) {
        if (when === "once its lock is taken") await remove(method === "open" && args[0] === lock);
        if (when === "once its lock is released" || when === "once its stale lock is removed") {
          await remove(method === "remove" && args[0] === lock);
        }
      },
    });
    const report = await storeAs(racing, 200).cleanup(CWD);
    assert.ok(removed, when);
    const expected = when === "once its lock is released"
      ? [temp, otherTemp]
      : when === "once its stale lock is removed"
      ? [lock, otherTemp]
      : [otherTemp];
    assert.deepEqual(report.removed.sort(), expected.sort(), when);
    await assert.rejects(fs.lstat(when === "just before its temp file is removed" ? temp : dir));
  }
});

test("archive calls refuse ids that are no array with InvalidArgumentError, before any change", async () => {
  const { fs, session } = await setup();
  const store = storeAs(fs, 100);
  const before = fs.snapshotTree("/");
  for (const ids of [{}, { length: 1, 0: session.id }, 42]) {
    const given = ids as unknown as string[];
    for (
      const call of [
        () => store.archive.set(CWD, given, true),
        () => store.archive.delete(CWD, given, { archivedOnly: false }),
      ]
    ) {
      await assert.rejects(call(), (error: unknown) => {
        assert.ok(error instanceof InvalidArgumentError, String(error));
        assert.match(error.message, /expected an array of ids/);
        return true;
      });
    }
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.deepEqual(await store.archive.list(CWD), []);
});

test("a delete of no ids changes nothing, not even leftovers a recovery would remove", async () => {
  const { fs } = await setup();
  await fs.writeFile(`${COLLECTION}/.archive.json.0badc0de1.tmp`, encoder.encode("partial"));
  const before = fs.snapshotTree("/");
  await storeAs(fs, 100).archive.delete(CWD, []);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

const STAGING = `${COLLECTION}/.delete-00000000-0000-4000-8000-000000000000`;

/**
 * Stages archived session `id` as a delete does up to its commit point (moved into its staging
 * directory, archive.json without it), with `extra` added to its journal.
 */
async function stagedDelete(
  fs: MemoryFs,
  id: string,
  membersBefore: string[],
  extra: Record<string, unknown> = {},
): Promise<void> {
  await fs.mkdir(STAGING, { mode: 0o700 });
  await fs.rename(`${COLLECTION}/${id}`, `${STAGING}/${id}`);
  const intent = { operation: "delete", ids: [id], entries: [id], archived: [id], membersBefore };
  await fs.writeFile(
    `${STAGING}/intent.json`,
    encoder.encode(JSON.stringify({ ...intent, ...extra })),
  );
  const members = membersBefore.filter((member) => member !== id);
  await fs.writeFile(`${COLLECTION}/archive.json`, encoder.encode(JSON.stringify(members)));
}

/**
 * Runs a cleanup with `store`, checking that it rolls the staged delete back but keeps STAGING,
 * and that session `id` is listed and archived again.
 */
async function rolledBackKeepingStaging(store: SessionStore, id: string): Promise<void> {
  const report = await store.cleanup(CWD);
  assert.deepEqual(report.kept, [STAGING]);
  assert.deepEqual(report.restored, []);
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [id]);
  assert.deepEqual(await store.archive.list(CWD), [id]);
}

test("a rolled-back delete keeps a kept-<n> folder holding more than its companion", async () => {
  const { fs, session } = await setup();
  const id = session.id;
  await stagedDelete(fs, id, [id], { kept: [`${id}.trace`] });
  await fs.mkdir(`${STAGING}/kept-0`);
  await fs.writeFile(`${STAGING}/kept-0/${id}.trace`, encoder.encode("trace"));
  await fs.writeFile(`${STAGING}/kept-0/notes.txt`, encoder.encode("not the delete's"));
  const store = storeAs(fs, 100);
  // The session and its companion are back, archived; the other file stays where it was.
  await rolledBackKeepingStaging(store, id);
  assert.equal((await fs.lstat(`${COLLECTION}/${id}.trace`)).kind, "file");
  assert.deepEqual(await names(fs, `${STAGING}/kept-0`), ["notes.txt"]);
  // A later cleanup keeps it again, changing nothing.
  const before = fs.snapshotTree("/");
  assert.deepEqual((await store.cleanup(CWD)).kept, [STAGING]);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a rolled-back delete puts archive membership back in order, keeping ids archived since", async () => {
  const { fs, session } = await setup();
  const id = session.id;
  const [before, since] = [
    "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
    "1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
  ];
  await stagedDelete(fs, id, [before, id]);
  // Another id archived after the delete took this one out (by hand, or an older writer).
  await fs.writeFile(`${COLLECTION}/archive.json`, encoder.encode(JSON.stringify([before, since])));
  const store = storeAs(fs, 100);
  assert.deepEqual((await store.cleanup(CWD)).restored, [STAGING]);
  const members = JSON.parse(
    new TextDecoder().decode(await fs.readFile(`${COLLECTION}/archive.json`)),
  );
  assert.deepEqual(members, [before, id, since]);
});

test("a rolled-back delete keeps its staging directory while it holds anything the delete never staged", async () => {
  const { fs, session } = await setup();
  const id = session.id;
  await stagedDelete(fs, id, [id]);
  // Beside the staged session: a file and a folder no delete writes there, and a temp file of the
  // delete's own (its commit marker, written when the interruption came).
  await fs.writeFile(`${STAGING}/notes.txt`, encoder.encode("not the delete's"));
  await fs.mkdir(`${STAGING}/kept-7`);
  await fs.writeFile(`${STAGING}/kept-7/other.txt`, encoder.encode("nor this"));
  await fs.writeFile(`${STAGING}/.committed.0badc0de1.tmp`, encoder.encode(""));
  const store = storeAs(fs, 100);
  // The session is back in place and archived again; nothing the delete did not stage is gone.
  await rolledBackKeepingStaging(store, id);
  const kept = [".committed.0badc0de1.tmp", "intent.json", "kept-7", "notes.txt"];
  assert.deepEqual(await names(fs, STAGING), kept);
  assert.deepEqual(await names(fs, `${STAGING}/kept-7`), ["other.txt"]);
  // It holds nothing of the session: restoring, archiving and deleting it work as for any other.
  await store.archive.set(CWD, [id], false);
  await store.archive.set(CWD, [id], true);
  await store.archive.delete(CWD, [id]);
  assert.deepEqual(await store.list(CWD), []);
  assert.deepEqual(await names(fs, STAGING), kept);
  // Once the foreign entries are moved out, the next cleanup removes the staging directory (the
  // temp file with it: a temp file is never taken for something the delete did not stage).
  await fs.remove(`${STAGING}/notes.txt`);
  await fs.remove(`${STAGING}/kept-7`, { recursive: true });
  assert.deepEqual((await store.cleanup(CWD)).kept, []);
  await assert.rejects(fs.lstat(STAGING));
});

test("a writer whose session directory cannot be resolved for an I/O error is refused, leaving no lock", async () => {
  const { fs, dir } = await setup();
  let broken = true;
  const failing = failingWithEio(fs, (method, path) => {
    return broken && method === "realPath" && path === dir;
  });
  const store = storeAs(failing, 200);
  const before = fs.snapshotTree("/");
  const refused = await refusal(store.open(dir), "opened without resolving its lock's directory");
  assert.ok(refused instanceof FsIoError, String(refused));
  assert.equal(refused.path, dir);
  assert.deepEqual(fs.snapshotTree("/"), before);
  // Nothing of the failed open is held: the same store opens it once the fault clears.
  broken = false;
  await (await store.open(dir)).close();
});

test("a delete never takes along another session's companion that a rolled-back delete kept", async () => {
  const { fs, session } = await setup();
  const store = storeAs(fs, 100);
  const other = await store.create(CWD);
  await other.commit(conversation(1));
  await other.close();
  const [a, b] = [session.id, other.id];
  await store.archive.set(CWD, [a, b], true);
  // A rolled-back delete of b kept a companion of b in its kept-0 folder: b.trace exists again.
  await fs.mkdir(STAGING, { mode: 0o700 });
  await fs.mkdir(`${STAGING}/kept-0`);
  await fs.writeFile(`${STAGING}/kept-0/${b}.trace`, encoder.encode("b's older trace"));
  await fs.writeFile(`${COLLECTION}/${b}.trace`, encoder.encode("b's trace"));
  const intent = {
    operation: "delete",
    ids: [b],
    entries: [b],
    archived: [],
    membersBefore: [a, b],
    kept: [`${b}.trace`],
  };
  await fs.writeFile(`${STAGING}/intent.json`, encoder.encode(JSON.stringify(intent)));
  assert.deepEqual((await store.cleanup(CWD)).kept, [STAGING]);
  await store.archive.delete(CWD, [a]);
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [b]);
  assert.deepEqual(await names(fs, `${STAGING}/kept-0`), [`${b}.trace`]);
  assert.equal((await fs.lstat(`${COLLECTION}/${b}.trace`)).kind, "file");
});

test("a collection's temp file that goes away before recovery removes it does not fail the operation", async () => {
  const { fs, session } = await setup();
  // Another process's store replacing archive.json, neither store taking lock files (no probe):
  // its temp file is renamed into place just as recovery comes to remove it.
  const temp = `${COLLECTION}/.archive.json.0badc0de1.tmp`;
  await fs.writeFile(temp, encoder.encode(JSON.stringify([session.id]) + "\n"));
  const racing = hookedFs(fs, {
    async before(method, args) {
      if (method === "remove" && args[0] === temp) {
        await fs.rename(temp, `${COLLECTION}/archive.json`);
      }
    },
  });
  const store = storeAs(racing, null);
  const report = await store.cleanup(CWD);
  assert.deepEqual(report.removed, []);
  assert.deepEqual(await store.archive.list(CWD), [session.id]);
  // A structural operation recovers the same way: it goes on.
  await fs.writeFile(temp, encoder.encode("[]\n"));
  await store.archive.set(CWD, [session.id], false);
  assert.deepEqual(await store.archive.list(CWD), []);
});

test("a released writer lock says so, and releasing it again leaves the next holder's lock alone", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const first = await acquireWriterLock(storeAs(fs, 100).context, dir);
  assert.equal(first.released, false);
  await first.release();
  assert.equal(first.released, true);
  await assert.rejects(fs.lstat(lock));
  // Another process takes the lock; the first holder releasing again changes nothing.
  const next = await acquireWriterLock(storeAs(hookedFs(fs), 200).context, dir);
  const held = new TextDecoder().decode(await fs.readFile(lock));
  await first.release();
  assert.equal(new TextDecoder().decode(await fs.readFile(lock)), held);
  assert.equal(next.released, false);
  await next.release();
  await assert.rejects(fs.lstat(lock));
});

test("copyInto writes a writer lock's record into another directory only while its file holds it", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const held = await acquireWriterLock(storeAs(fs, 100).context, dir);
  await fs.mkdir("/copy");
  await held.copyInto("/copy");
  assert.deepEqual(await fs.readFile(`/copy/${WRITER_LOCK_FILE}`), await fs.readFile(lock));
  // Its file replaced by another process's record: nothing of that record is copied.
  const other = { pid: 200, host: HOST, startedAt: "2020-01-01T00:00:00.000Z", token: "other" };
  await fs.writeFile(lock, encoder.encode(JSON.stringify(other)));
  await fs.mkdir("/copy2");
  await held.copyInto("/copy2");
  assert.deepEqual(await names(fs, "/copy2"), []);
  await held.release();
  assert.equal(new TextDecoder().decode(await fs.readFile(lock)), JSON.stringify(other));
  // A lock without a file (a store without a probe) has nothing to copy.
  await fs.remove(lock);
  const registered = await acquireWriterLock(storeAs(fs, null).context, dir);
  await fs.mkdir("/copy3");
  await registered.copyInto("/copy3");
  assert.deepEqual(await names(fs, "/copy3"), []);
  await registered.release();
});

test("a takeover whose marker cannot be removed fails with the storage error; the marker is stale after", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  await fs.writeFile(lock, encoder.encode(JSON.stringify(DEAD)));
  const marker = `${lock}.takeover-dead`;
  let failed = false;
  const failing = failingWithEio(fs, (method, path) => {
    if (method !== "remove" || path !== marker || failed) return false;
    failed = true;
    return true;
  });
  const store = storeAs(failing, 200);
  const refused = await refusal(store.open(dir), "opened although the takeover failed");
  assert.ok(refused instanceof FsIoError, String(refused));
  assert.equal(refused.path, marker);
  // The dead holder's lock is gone; the marker left behind names this process's given-up token,
  // so the next open takes the lock, and cleanup removes the marker.
  assert.deepEqual(await names(fs, dir), [
    "index.json",
    "messages.jsonl",
    "meta.json",
    `${WRITER_LOCK_FILE}.takeover-dead`,
  ]);
  await (await store.open(dir)).close();
  assert.deepEqual((await store.cleanup(CWD)).removed, [marker]);
  assert.deepEqual(await names(fs, dir), ["index.json", "messages.jsonl", "meta.json"]);
});

test("a rollback that cannot drop the delete's lock from a staged session fails, keeping it staged", async () => {
  const { fs, session } = await setup();
  const id = session.id;
  await stagedDelete(fs, id, [id]);
  // The delete held the session's writer lock when it moved the directory: its file went along.
  const moved = `${STAGING}/${id}/${WRITER_LOCK_FILE}`;
  await fs.writeFile(moved, encoder.encode(JSON.stringify(DEAD)));
  let broken = true;
  const failing = failingWithEio(fs, (method, path) => {
    return broken && method === "remove" && path === moved;
  });
  const store = storeAs(failing, 100);
  await assert.rejects(store.cleanup(CWD), (error: unknown) => {
    assert.ok(error instanceof FsIoError, String(error));
    assert.equal(error.path, moved);
    return true;
  });
  // Still staged, and listed from there with the membership its rollback restores.
  assert.deepEqual(await names(fs, STAGING), [id, "intent.json"]);
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [id]);
  assert.deepEqual(await store.archive.list(CWD), [id]);
  // Once the fault clears, the rollback puts it back without the lock.
  broken = false;
  assert.deepEqual((await store.cleanup(CWD)).restored, [STAGING]);
  assert.deepEqual(await names(fs, session.getSessionPath()), [
    "index.json",
    "messages.jsonl",
    "meta.json",
  ]);
});
