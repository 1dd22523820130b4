// The order of the directory fsyncs around the store's cross-directory moves and the end of a
// committed delete. POSIX does not promise that an fsync of one directory makes a rename out of
// it durable together with its arrival in another: syncing the source first can leave the entry
// in neither directory after a crash (ext4, xfs and btrfs happen to order it). The destination is
// synced first, so the entry is always in one of them. A committed delete makes the removal of
// its staged entries and journal durable before it removes its commit marker, so a crash never
// leaves the marker gone with a half-removed session still staged (recovery would roll it back).
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { assistant, conversation, user } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

interface Call {
  readonly method: string;
  readonly args: readonly unknown[];
}

/** A memory filesystem, and a view of it that records every rename, remove and syncDir. */
async function recorded(
  failSync?: (path: string, calls: readonly Call[]) => boolean,
): Promise<{ fs: MemoryFs; view: FileSystem; calls: Call[] }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  fs.syncAll();
  const calls: Call[] = [];
  const view = hookedFs(fs, {
    before: (method, args) => {
      if (method !== "rename" && method !== "remove" && method !== "syncDir") return;
      if (method === "syncDir" && failSync?.(String(args[0]), calls) === true) {
        calls.push({ method: "syncDir-failed", args });
        throw new Error("injected fsync failure");
      }
      calls.push({ method, args });
    },
  });
  return { fs, view, calls };
}

/** The index of the last call matching `match`, at or before `before`. */
function lastIndex(calls: readonly Call[], match: (call: Call) => boolean, before = Infinity) {
  for (let i = Math.min(calls.length - 1, before); i >= 0; i--) {
    if (match(calls[i] as Call)) return i;
  }
  return -1;
}

/** The directories synced after `index`, up to the next call that is not a syncDir. */
function syncsAfter(calls: readonly Call[], index: number): string[] {
  const synced: string[] = [];
  for (let i = index + 1; i < calls.length; i++) {
    const call = calls[i] as Call;
    if (call.method !== "syncDir") break;
    synced.push(String(call.args[0]));
  }
  return synced;
}

async function savedSession(store: SessionStore): Promise<{ dir: string; id: string }> {
  const session = await store.create(CWD);
  const first = conversation(3);
  await session.commit(first);
  // A replacement generation, so a compaction has a superseded one to drop.
  await session.commit([user("edited"), ...first.slice(1), user("more"), assistant("ok")]);
  await session.close();
  const dir = session.getSessionPath();
  return { dir, id: dir.slice(dir.lastIndexOf("/") + 1) };
}

const dirOf = (path: string) => path.slice(0, path.lastIndexOf("/"));
const nameOf = (path: string) => path.slice(path.lastIndexOf("/") + 1);

test("a delete syncs the staging directory (the destination) before the collection (the source) after moving the session", async () => {
  const { view, calls } = await recorded();
  const store = new SessionStore({ fs: view, agentDir: AGENT });
  const { dir, id } = await savedSession(store);
  const collection = dirOf(dir);
  calls.length = 0;
  await store.archive.delete(CWD, [id], { archivedOnly: false });
  const move = lastIndex(
    calls,
    (c) => c.method === "rename" && c.args[0] === dir && nameOf(String(c.args[1])) === id,
  );
  assert.ok(move >= 0, "the session directory was moved to the staging directory");
  const staging = dirOf(String(calls[move]?.args[1]));
  assert.ok(nameOf(staging).startsWith(".delete-"), staging);
  assert.deepEqual(syncsAfter(calls, move), [staging, collection]);
});

test("a compaction syncs the staging directory before the collection after its swap", async () => {
  const { view, calls } = await recorded();
  const store = new SessionStore({ fs: view, agentDir: AGENT });
  const { dir } = await savedSession(store);
  const collection = dirOf(dir);
  calls.length = 0;
  assert.equal((await store.compact(dir)).compacted, true);
  const swapIn = lastIndex(calls, (c) => c.method === "rename" && c.args[1] === dir);
  assert.ok(swapIn >= 0, "the compacted copy was moved in");
  const staging = dirOf(String(calls[swapIn]?.args[0]));
  assert.equal(nameOf(String(calls[swapIn]?.args[0])), "session");
  const swapOut = lastIndex(calls, (c) => c.method === "rename" && c.args[0] === dir, swapIn);
  assert.equal(calls[swapOut]?.args[1], `${staging}/previous`);
  // The staging directory's own entry is durable before anything moves into it.
  const before = lastIndex(calls, (c) => c.method === "syncDir", swapOut);
  assert.equal(calls[before]?.args[0], collection, "the collection is synced before the swap");
  assert.deepEqual(syncsAfter(calls, swapIn), [staging, collection]);
});

/**
 * Asserts that the staging directory was synced after the removal of the staged session and the
 * journal and before the removal of the commit marker.
 */
function assertSyncedBeforeMarkerRemoved(calls: readonly Call[], staging: string, id: string) {
  const marker = lastIndex(
    calls,
    (c) => c.method === "remove" && c.args[0] === `${staging}/committed`,
  );
  assert.ok(marker >= 0, "the commit marker was removed");
  const entry = lastIndex(
    calls,
    (c) => c.method === "remove" && c.args[0] === `${staging}/${id}`,
    marker,
  );
  const journal = lastIndex(
    calls,
    (c) => c.method === "remove" && c.args[0] === `${staging}/intent.json`,
    marker,
  );
  assert.ok(entry >= 0 && journal >= 0, "the entry and the journal were removed before");
  const synced = lastIndex(
    calls,
    (c) => c.method === "syncDir" && c.args[0] === staging,
    marker,
  );
  assert.ok(
    synced > Math.max(entry, journal),
    "the staging directory was synced between removing the entries and the journal and removing the marker",
  );
}

test("finishing a committed delete syncs the staging directory before it removes the commit marker", async () => {
  const { view, calls } = await recorded();
  const store = new SessionStore({ fs: view, agentDir: AGENT });
  const { id } = await savedSession(store);
  calls.length = 0;
  await store.archive.delete(CWD, [id], { archivedOnly: false });
  const staging = String(
    calls.find((c) => c.method === "rename" && nameOf(String(c.args[1])) === id)?.args[1],
  );
  assertSyncedBeforeMarkerRemoved(calls, dirOf(staging), id);
});

test("recovery finishing a committed delete syncs the staging directory before it removes the commit marker", async () => {
  // The staging directory's fsync right after the marker is renamed in fails: the delete is
  // committed, reported, and left for recovery to finish.
  let failed = false;
  const { view, calls } = await recorded((path, seen) => {
    const last = seen[seen.length - 1];
    if (
      !failed && last?.method === "rename" && String(last.args[1]) === `${path}/committed`
    ) {
      failed = true;
      return true;
    }
    return false;
  });
  const store = new SessionStore({ fs: view, agentDir: AGENT });
  const { id } = await savedSession(store);
  calls.length = 0;
  await assert.rejects(store.archive.delete(CWD, [id], { archivedOnly: false }));
  assert.ok(failed, "the injected failure was reached");
  const staging = dirOf(
    String(calls.find((c) => c.method === "rename" && nameOf(String(c.args[1])) === id)?.args[1]),
  );
  calls.length = 0;
  await store.cleanup(CWD);
  assertSyncedBeforeMarkerRemoved(calls, staging, id);
});

test('under "ordered" durability, a delete and a compaction sync no directory', async () => {
  const { view, calls } = await recorded();
  const store = new SessionStore({ fs: view, agentDir: AGENT, durability: "ordered" });
  const { dir, id } = await savedSession(store);
  calls.length = 0;
  assert.equal((await store.compact(dir)).compacted, true);
  await store.archive.delete(CWD, [id], { archivedOnly: false });
  assert.deepEqual(calls.filter((c) => c.method === "syncDir"), []);
});
