// Save batches and pending saves, on edges a mutation sweep of the manager's write queue found
// untested: what a refused save touches, when a rejected save's temp file is gone, and the unread
// flag a retried batch writes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem, OpenOptions } from "../src/port/fs.ts";
import { PendingSaveError, SessionError, SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { assistant, conversation, savedOn, toolResult, user } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

/** Filesystem methods that change what is on disk (besides `open` with a write option). */
const CHANGES = new Set([
  "openAppendNoFollow",
  "writeFile",
  "rename",
  "remove",
  "mkdir",
  "symlink",
  "chmod",
  "utime",
]);

/**
 * A store whose filesystem calls are recorded, whose temp files take a while to remove, and whose
 * next meta.json rename can be failed.
 */
interface Rig {
  readonly memory: MemoryFs;
  readonly store: SessionStore;
  /** Every filesystem call so far, as `method path` (`open` for writing: `open-write path`). */
  readonly calls: string[];
  /** Fails the next meta.json rename with EIO. */
  failNextPublish(): void;
}

async function rig(): Promise<Rig> {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  const calls: string[] = [];
  let fail = false;
  const fs: FileSystem = hookedFs(memory, {
    async before(method, args) {
      const options = (method === "open" ? args[1] : undefined) as OpenOptions | undefined;
      const writes = options !== undefined &&
        [options.write, options.append, options.create, options.createNew].includes(true);
      calls.push(`${writes ? "open-write" : method} ${String(args[0])}`);
      // A temp file's removal takes a while, as on a real disk: a save that settled before it
      // was done would be seen settled with the file still there.
      if (method === "remove" && String(args[0]).endsWith(".tmp")) {
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      if (method !== "rename" || !String(args[1]).endsWith("/meta.json") || !fail) return;
      fail = false;
      throw new FsIoError("EIO", "rename", String(args[1]), "injected EIO");
    },
  });
  return {
    memory,
    store: new SessionStore({ fs, agentDir: AGENT, process: null }),
    calls,
    failNextPublish() {
      fail = true;
    },
  };
}

/** The names in the session's directory, sorted. */
async function names(memory: MemoryFs, session: SessionManager): Promise<string[]> {
  return (await memory.readDir(session.getSessionPath())).map((entry) => entry.name).sort();
}

/** The calls among `calls` that change the disk. */
function changes(calls: readonly string[]): string[] {
  return calls.filter((call) => {
    const method = call.slice(0, call.indexOf(" "));
    return method === "open-write" || CHANGES.has(method);
  });
}

test("a save on a closed or read-only manager rejects with that refusal and changes no file, an invalid one too", async () => {
  for (const refusal of ["closed", "read-only"] as const) {
    const { memory, store, calls } = await rig();
    const writer = await store.create(CWD);
    const history = conversation(1);
    await writer.commit(history);
    let session = writer;
    if (refusal === "closed") await writer.close();
    else session = await store.open(writer.getSessionPath(), { readOnly: true });
    const files = await names(memory, session);
    calls.length = 0;
    // Valid saves, and one that validation would refuse: the refusal comes first, from the
    // call's turn in the queue, without a temp file begun at the call.
    const saves = [
      session.commit([...history, user("q")]),
      session.append([assistant("a")]),
      session.append([toolResult("nowhere", "read")]),
    ];
    for (const save of saves) {
      await assert.rejects(save, (error: unknown) => {
        assert.ok(error instanceof SessionError, refusal);
        assert.ok(!(error instanceof SessionFormatError), `${refusal}: ${error}`);
        assert.match(error.message, refusal === "closed" ? /closed/ : /read-only/);
        return true;
      });
    }
    // Counted from the call on: begun at once, a temp file would show up here.
    assert.deepEqual(changes(calls), [], refusal);
    assert.deepEqual(await names(memory, session), files, refusal);
    assert.deepEqual(await savedOn(store, session), history, refusal);
    if (refusal === "read-only") await session.close();
  }
});

test("while a save is pending, every save rejects with PendingSaveError, one validation would refuse too", async () => {
  const { memory, store } = await rig();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const q = user("q");
  // A write fails before the publish (the log's or the staged meta.json's): the save is pending,
  // with no publication of unknown outcome to settle first.
  memory.failAt(memory.operationCount + 1, { ops: ["write"] });
  await assert.rejects(session.append([q]), FsIoError);
  memory.clearFaults();
  assert.equal(session.hasPendingSave, true);
  // The session is idle: each save is called alone, on a session whose last state is pending.
  await assert.rejects(session.append([toolResult("nowhere", "read")]), PendingSaveError);
  await assert.rejects(session.commit([user("other"), toolResult("x", "read")]), PendingSaveError);
  await assert.rejects(session.commit([...history, q, assistant("a")]), PendingSaveError);
  await session.flush();
  assert.deepEqual(await savedOn(store, session), [...history, q]);
});

test("a save refused by validation on an idle session rejects once its meta.json temp file is gone", async () => {
  const { memory, store } = await rig();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const files = await names(memory, session);
  const orphan = toolResult("nowhere", "read");
  for (const save of [() => session.append([orphan]), () => session.commit([...history, orphan])]) {
    // The temp file is begun at the call; by the rejection it is removed.
    const error = await save().then(() => undefined, (e) => e);
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.deepEqual(await names(memory, session), files);
  }
});

test("a save whose write fails rejects once its meta.json temp file is gone", async () => {
  for (const failing of ["write", "rename", "log removed"] as const) {
    const { memory, store } = await rig();
    const created = await store.create(CWD);
    const history = conversation(1);
    await created.commit(history);
    await created.close();
    const session = await store.open(created.getSessionPath());
    const files = await names(memory, session);
    if (failing === "log removed") {
      // Behind the session's back: its first save finds the log gone before writing anything.
      await memory.remove(`${session.getSessionPath()}/messages.jsonl`);
      files.splice(files.indexOf("messages.jsonl"), 1);
    } else memory.failAt(memory.operationCount + 1, { ops: [failing] }); // the first such call
    const error = await session.append([user("q")]).then(() => undefined, (e) => e);
    assert.ok(error instanceof SessionError || error instanceof FsIoError, `${failing}: ${error}`);
    memory.clearFaults();
    assert.deepEqual(await names(memory, session), files, failing);
  }
});

test("a failed batch retried by flush() writes the unread flag its saves leave one by one", async () => {
  // The batch's first save adds output (unread); the second edits the first message and drops
  // that output: it adds none, so the flag stays as the first save left it, also when flush()
  // retries the batch.
  const outcomes = [];
  for (const together of [false, true]) {
    const { store, failNextPublish } = await rig();
    const session = await store.create(CWD);
    const history = conversation(2);
    await session.commit(history);
    assert.equal(await session.markRead(history.length), true);
    const output = assistant("more output");
    // The output is dropped again: past the saved history, the edited one holds no message.
    const edited = [user("edited"), ...history.slice(1)];
    if (together) {
      failNextPublish();
      const saves = [session.append([output]), session.commit(edited)];
      const settled = await Promise.allSettled(saves);
      assert.ok(settled.every((s) => s.status === "rejected"), "one write, failed");
      assert.equal(session.hasPendingSave, true);
      await session.flush();
    } else {
      await session.append([output]);
      await session.commit(edited);
    }
    const reopened = await store.open(session.getSessionPath(), { readOnly: true });
    assert.deepEqual(reopened.messages, edited);
    outcomes.push({ unread: session.unread, saved: reopened.unread });
    await reopened.close();
    await session.close();
  }
  assert.deepEqual(outcomes, [{ unread: true, saved: true }, { unread: true, saved: true }]);
});
