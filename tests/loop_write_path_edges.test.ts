// Edges of the Loop store's write path: the offsets and rounds an append continues from after a
// save refused mid-history, a log found shorter than its committed range by a writer's first save,
// a crash tail of one byte, a publish whose directory fsync failed, the index of a new generation,
// a save refused while an earlier failed write cannot be read back, and the log's mode on reopen.
import { test } from "node:test";
import assert from "node:assert/strict";
import { isDeepStrictEqual } from "node:util";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import { CorruptSessionError } from "../src/loop/errors.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { assistant, conversation, user } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const NOW = Date.parse("2026-03-01T00:00:00.000Z");

async function setup(): Promise<{ fs: MemoryFs; store: SessionStore }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  return { fs, store: new SessionStore({ fs, agentDir: AGENT, now: () => NOW }) };
}

/** Every page of `session`'s history, oldest first, read through `readHistory`. */
async function allPages(
  session: { readHistory(before?: number): Promise<{ messages: Message[]; start: number }> },
): Promise<Message[]> {
  let page = await session.readHistory();
  const pages = [page.messages];
  while (page.start > 0) {
    page = await session.readHistory(page.start);
    pages.unshift(page.messages);
  }
  return pages.flat();
}

test("an append after a save refused for an invalid message reads back its pages at the right offsets", async () => {
  const refusedTails: Message[][] = [
    [user("a long question that is serialized before the refusal"), assistant("an answer")],
    [assistant("an interjection"), user("a question after it"), assistant("its answer")],
  ];
  for (const refusedTail of refusedTails) {
    const { store } = await setup();
    const session = await store.create(CWD);
    const history = conversation(2);
    await session.commit(history);
    // Refused by validation after valid new messages were serialized on the shared arrays.
    await assert.rejects(
      session.commit([
        ...history,
        ...refusedTail,
        { role: "user", content: 42 } as unknown as Message,
      ]),
    );
    const next = [...history, ...conversation(3, "n")];
    // The latest page holds the last three user rounds (of five).
    const rounds = next.flatMap((message, i) => message.role === "user" ? [i] : []);
    const latest = rounds[rounds.length - 3];
    await session.commit(next);
    // Pages come from the offsets and rounds the writer holds, without a reopen.
    assert.deepEqual(await allPages(session), next);
    assert.equal((await session.readHistory()).start, latest);
    await session.close();
    for (const readOnly of [true, false]) {
      const reader = await store.open(session.getSessionPath(), { readOnly });
      assert.deepEqual(reader.messages, next);
      assert.deepEqual(await allPages(reader), next);
      assert.equal((await reader.readHistory()).start, latest);
      await reader.close();
    }
  }
});

test("a writer's first save refuses a log cut below the committed range after the open, and writes nothing", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const dir = session.getSessionPath();
  const logPath = `${dir}/messages.jsonl`;
  const writer = await store.open(dir); // the log is whole at the open
  const log = await fs.readFile(logPath);
  await fs.writeFile(logPath, log.subarray(0, log.length - 3));
  const before = fs.snapshotTree(dir);
  await assert.rejects(
    writer.commit([...conversation(2), user("more")]),
    (error: unknown) =>
      error instanceof CorruptSessionError && String((error as { file?: string }).file) === logPath,
  );
  // Nothing extended, truncated or published: the damage stays as it was found.
  const after = fs.snapshotTree(dir);
  for (const name of Object.keys(after)) {
    if (name.endsWith(".tmp")) delete after[name]; // a temp file the save removes itself
  }
  assert.deepEqual(after, before);
  await writer.close().catch(() => undefined);
});

test("a crash tail of one byte is cut before the next save, which reopens whole", async () => {
  for (const tail of ["{", "\n", "\0"]) {
    const { fs, store } = await setup();
    const session = await store.create(CWD);
    const history = conversation(2);
    await session.commit(history);
    await session.close();
    const dir = session.getSessionPath();
    const logPath = `${dir}/messages.jsonl`;
    const end = (await fs.stat(logPath)).size;
    const handle = await fs.open(logPath, { append: true });
    await handle.write(new TextEncoder().encode(tail));
    await handle.close();
    const writer = await store.open(dir);
    assert.deepEqual(writer.messages, history, JSON.stringify(tail));
    const next = [...history, user("after the tail"), assistant("answered")];
    await writer.commit(next);
    await writer.close();
    const reader = await store.open(dir, { readOnly: true });
    assert.deepEqual(reader.messages, next, JSON.stringify(tail));
    await reader.close();
    const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(`${dir}/meta.json`))) as {
      start: number;
      bytes: number;
    };
    assert.equal(meta.start, 0);
    assert.ok(meta.bytes > end);
    assert.equal((await fs.stat(logPath)).size, meta.start + meta.bytes, JSON.stringify(tail));
  }
});

test("flush() after a publish whose directory fsync failed never cuts the log below the visible meta.json", async () => {
  const { fs: baseline, store } = await setup();
  const session = await store.create(CWD);
  const before = conversation(2);
  await session.commit(before);
  await session.close();
  baseline.syncAll();
  const dir = session.getSessionPath();
  const after = [...before, user("new question"), assistant("new answer")];
  let points = 0;
  for (let n = 1;; n++) {
    const fs = baseline.clone();
    fs.crashAfter(n);
    // The commit's meta.json is renamed into place, then the directory fsync after it fails once.
    let renamed = false;
    let failed = false;
    const view = hookedFs(fs, {
      before: (method, args) => {
        if (method === "rename" && String(args[1]) === `${dir}/meta.json`) renamed = true;
        else if (method === "syncDir" && renamed && !failed) {
          failed = true;
          throw new Error("injected directory fsync failure");
        }
      },
    });
    let resolved = false;
    try {
      const writer = await new SessionStore({ fs: view, agentDir: AGENT, now: () => NOW }).open(
        dir,
      );
      await assert.rejects(writer.commit(after));
      await writer.flush();
      resolved = true;
    } catch (error) {
      if (!fs.crashTriggered) throw error;
    }
    // A process crash: the kernel kept every write and every entry.
    const recovered = fs.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
    const reader = await new SessionStore({ fs: recovered, agentDir: AGENT, now: () => NOW })
      .open(dir, { readOnly: true });
    const seen = reader.messages;
    await reader.close();
    const label = `crash after operation ${n}`;
    if (resolved || failed) assert.deepEqual(seen, after, label); // meta.json was visible
    else assert.ok(isDeepStrictEqual(seen, before) || isDeepStrictEqual(seen, after), label);
    points++;
    if (!fs.crashTriggered) break;
  }
  assert.ok(points > 5);
});

test("a commit that starts a new generation republishes index.json for it before close()", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(3);
  await session.commit(history);
  // The first message rewritten: a replacement generation of as many rounds, a few bytes more.
  const rewritten = [user("a rewritten first question"), ...history.slice(1)];
  await session.commit(rewritten);
  const dir = session.getSessionPath();
  const read = async (name: string) =>
    JSON.parse(new TextDecoder().decode(await fs.readFile(`${dir}/${name}`))) as {
      generation: string;
      start: number;
      bytes: number;
    };
  const meta = await read("meta.json");
  assert.ok(meta.start > 0); // a new generation, after the old one in the log
  // A process that stops now (no close()) leaves an index of the committed generation.
  const index = await read("index.json");
  assert.deepEqual(
    { generation: index.generation, start: index.start, bytes: index.bytes },
    { generation: meta.generation, start: meta.start, bytes: meta.bytes },
  );
  await session.close();
});

test("a save refused because the state of an earlier failed write could not be read back stays pending for flush()", async () => {
  const { fs, store } = await setup();
  const created = await store.create(CWD);
  const before = conversation(2);
  await created.commit(before);
  await created.close();
  const dir = created.getSessionPath();
  const metaPath = `${dir}/meta.json`;
  let failNextDirSync = false;
  let readsFail = false;
  const view = hookedFs(fs, {
    before: (method, args) => {
      const path = String(args[0]);
      if (method === "rename" && String(args[1]) === metaPath && failNextDirSync) {
        failNextDirSync = false;
        readsFail = true; // the directory sync after this rename fails, and so does every read back
        return;
      }
      if (method === "syncDir" && readsFail && path === dir) {
        throw new Error("injected directory fsync failure");
      }
      if (readsFail && path === metaPath && method !== "rename") {
        throw new Error("injected read failure");
      }
    },
  });
  const writer = await new SessionStore({ fs: view, agentDir: AGENT, now: () => NOW }).open(dir);
  failNextDirSync = true;
  // The pin's meta.json lands, its directory fsync fails, and it cannot be read back to undo it.
  await assert.rejects(writer.setPinned(true), /injected directory fsync failure/);
  const after = [...before, user("saved after the fault"), assistant("kept")];
  // The next save cannot settle that write first: it is refused, and kept as the pending save.
  await assert.rejects(writer.commit(after), /injected read failure/);
  readsFail = false;
  await writer.flush();
  await writer.close();
  const reader = await store.open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, after);
  assert.equal(reader.getHeader().pinnedAt, undefined); // the rejected pin was undone
  await reader.close();
});

test("a log whose write failed is reopened private, even if its mode was widened since the first save", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  assert.equal((await fs.stat(logPath)).mode, 0o600);
  // Another program widens the log while the writer keeps it open.
  await fs.chmod(logPath, 0o644);
  const next = [...history, user("more"), assistant("answer")];
  fs.failAt(fs.operationCount + 1, { ops: ["write"], landed: 0 });
  await assert.rejects(session.commit(next)); // the log handle is dropped with the failure
  fs.clearFaults();
  await session.flush(); // reopens the log to retry
  assert.equal((await fs.stat(logPath)).mode, 0o600);
  await session.close();
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reader.messages, next);
  await reader.close();
});
