// A structural change that moves a session directory (a compaction's swap, a failed delete's
// rollback) and then fails before the move is made durable leaves the session's entry in its
// collection unsynced. When the fault clears, the same process opens the session and a commit
// resolves: that commit must survive a power loss, so the writer syncs the collection again
// rather than trusting what this process had made durable at that path before the move.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type FaultError, MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { assistant, conversation, user } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

async function reopen(fs: MemoryFs, dir: string): Promise<Message[]> {
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir, { readOnly: true });
  const messages = session.messages;
  await session.close();
  return messages;
}

/**
 * For n = 1, 2, ...: in one process (one MemoryFs), saves a session, runs `change` with a
 * persistent `error` from its nth operation on, clears the fault, commits again through a new
 * writer, then loses power (only durable state survives). Returns the fault points at which
 * `change` failed and the resolved commit was lost.
 */
async function lostAfterFailedChange(
  error: FaultError,
  change: (store: SessionStore, dir: string) => Promise<unknown>,
  options: { cleanupFirst?: boolean } = {},
): Promise<{ tried: number; lost: string[]; movedFirst: number; gone: number }> {
  const lost: string[] = [];
  let tried = 0;
  /** Fault points the change failed at after it had renamed the session directory away. */
  let movedFirst = 0;
  /** Fault points after which the change had committed (the session is gone: nothing to save). */
  let gone = 0;
  for (let n = 1; n < 500; n++) {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    fs.syncAll();
    const store = new SessionStore({ fs, agentDir: AGENT });
    const session = await store.create(CWD);
    const first = conversation(3);
    await session.commit(first);
    // A replacement generation, so a compaction has a superseded one to drop.
    const history = [user("edited"), ...first.slice(1), user("more"), assistant("ok")];
    await session.commit(history);
    await session.close();
    const dir = session.getSessionPath();

    const start = fs.operationCount;
    fs.failAt(start + n, { error, persistent: true });
    let failed = false;
    try {
      await change(store, dir);
    } catch {
      failed = true;
    }
    const reached = fs.operationCount >= start + n;
    const failedOp = fs.operationLog[start + n - 1];
    fs.clearFaults();
    if (!reached) break;
    if (!failed) continue;
    const renamed = fs.operationLog.slice(start, start + n - 1).some((record) =>
      record.op === "rename" && record.path === dir
    );
    if (renamed) movedFirst++;

    if (options.cleanupFirst === true) {
      // Finishes or rolls back what the failed change left staged, as the next structural
      // operation of the collection would.
      await store.cleanup(CWD);
      if (!(await exists(fs, dir))) {
        gone++;
        continue;
      }
    }
    tried++;

    const writer = await store.open(dir);
    const after = [...history, user("saved after the failed change"), assistant("kept")];
    await writer.commit(after);
    await writer.close();

    const recovered = fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
    await new SessionStore({ fs: recovered, agentDir: AGENT }).cleanup(CWD);
    const seen = await reopen(recovered, dir);
    if (seen.length !== after.length) {
      lost.push(`op ${n} (${failedOp?.op} ${failedOp?.path}): ${seen.length}/${after.length}`);
    }
  }
  return { tried, lost, movedFirst, gone };
}

async function exists(fs: MemoryFs, path: string): Promise<boolean> {
  try {
    await fs.lstat(path);
    return true;
  } catch {
    return false;
  }
}

for (const error of ["EIO", "ENOSPC"] as const) {
  test(`a commit resolved after a compaction failed (${error}, persistent, at any step) survives a power loss`, async () => {
    const { tried, lost } = await lostAfterFailedChange(error, (store, dir) => store.compact(dir));
    assert.ok(tried > 5, `only ${tried} fault points failed the compaction`);
    assert.deepEqual(lost, []);
  });

  test(`a commit resolved after a delete failed and rolled back (${error}, persistent) survives a power loss`, async () => {
    const { tried, lost, movedFirst, gone } = await lostAfterFailedChange(
      error,
      async (store, dir) => {
        const id = dir.slice(dir.lastIndexOf("/") + 1);
        // The session is not archived: archivedOnly false, or the delete refuses before moving.
        await store.archive.delete(CWD, [id], { archivedOnly: false });
      },
      { cleanupFirst: true },
    );
    assert.ok(tried > 3, `only ${tried} fault points failed the delete`);
    // The delete's move of the session directory really ran before some of the faults, so the
    // rollback had something to move back.
    assert.ok(
      movedFirst > 3,
      `the delete failed after moving the session only ${movedFirst} times`,
    );
    // A fault after the commit point leaves the delete done (cleanup finishes it).
    assert.ok(gone > 0, `no fault point failed the delete after its commit point`);
    assert.deepEqual(lost, []);
  });
}
