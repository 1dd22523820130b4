// Messages nested deeply, and message values JSON cannot write: one fixed nesting limit for
// messages (`MAX_MESSAGE_NESTING`) at save and at load, the same on Deno, Node and in memory, and
// never an untyped error from copying or comparing a message.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { sha256Hex } from "../src/port/sha256.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { jsonNestsDeeper } from "../src/loop/records/_validation.ts";
import { MAX_MESSAGE_NESTING } from "../mod.ts";
import { assistant, toolResult, user } from "./_fixtures.ts";
import { deepResult, deepResultLine, nested, tooDeep } from "./_deep.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

async function setup(): Promise<{ fs: MemoryFs; store: SessionStore }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  return { fs, store };
}

/** The history of the tests: a user, an assistant calling a tool, its result, an answer. */
function history(result: Message): Message[] {
  return [user("parse this"), assistant("calling", [{ id: "c1", name: "ast" }]), result];
}

test("MAX_MESSAGE_NESTING is 1,000 levels: far past any message, within every runtime's copy and JSON limits", () => {
  assert.equal(MAX_MESSAGE_NESTING, 1000);
  // What the limit protects: a message at the limit copies and writes on every runtime.
  const message = deepResult(MAX_MESSAGE_NESTING - 1);
  assert.deepEqual(structuredClone(message), message);
  assert.deepEqual(JSON.parse(JSON.stringify(message)), message);
});

test("a save holding a message nested deeper than MAX_MESSAGE_NESTING is refused with a SessionFormatError naming messages.jsonl and the path, before anything is written", async () => {
  // 1,001 levels, 3,000 (past structuredClone on Node and Deno) and 5,000 (past JSON.stringify on
  // Node, not on Deno): the same error everywhere.
  for (const levels of [MAX_MESSAGE_NESTING, 2999, 4999]) {
    const { fs, store } = await setup();
    const session = await store.create(CWD);
    await session.commit([user("parse this")]);
    const file = `${session.getSessionPath()}/messages.jsonl`;
    const before = fs.snapshotTree?.();
    const deep = history(deepResult(levels));
    await assert.rejects(session.commit(deep), tooDeep(file), `commit, ${levels}`);
    await assert.rejects(session.append(deep.slice(1)), tooDeep(file), `append, ${levels}`);
    assert.equal(session.hasPendingSave, false);
    assert.deepEqual(fs.snapshotTree?.(), before);
    // The session goes on: the same history with a shallow result saves.
    await session.commit([...deep.slice(0, 2), toolResult("c1", "ast"), assistant("done")]);
    await session.close();
    const reopened = await store.open(session.getSessionPath(), { readOnly: true });
    assert.equal(reopened.messages.length, 4);
    await reopened.close();
  }
});

test("a draft's first save refuses a message nested too deep, writing nothing", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const before = fs.snapshotTree?.();
  await assert.rejects(
    session.commit(history(deepResult(MAX_MESSAGE_NESTING))),
    tooDeep(`${session.getSessionPath()}/messages.jsonl`),
  );
  assert.deepEqual(fs.snapshotTree?.(), before);
  assert.equal(session.hasPendingSave, false);
  await session.close();
});

test("a message at MAX_MESSAGE_NESTING levels saves, stays pending through a write error, flushes and opens on every runtime", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit([user("parse this")]);
  const full = [...history(deepResult(MAX_MESSAGE_NESTING - 1)), assistant("done")];
  fs.failAt(fs.operationCount + 1, { error: "EIO", persistent: true });
  await assert.rejects(session.commit(full), FsIoError);
  fs.clearFaults();
  assert.equal(session.hasPendingSave, true);
  assert.deepEqual(session.messages, full);
  const page = await session.readHistory();
  assert.deepEqual(page.messages, full);
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  // The unchanged last message is recognized: a save of the same history writes no message.
  const bytes = session.getStorageInfo()?.bytes;
  await session.commit(session.messages);
  assert.equal(session.getStorageInfo()?.bytes, bytes);
  await session.close();
  for (const readOnly of [true, false]) {
    const reopened = await store.open(session.getSessionPath(), { readOnly });
    assert.deepEqual(reopened.messages, full);
    if (!readOnly) await reopened.commit([...reopened.messages, user("next")]);
    await reopened.close();
  }
});

test("a save whose write fails keeps the original error and the pending save, whatever a structured clone would make of the messages", async () => {
  // A function inside opaque details: JSON leaves it out (the save writes the rest), while a
  // structured clone throws a DataCloneError.
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit([user("parse this")]);
  const result = { ...toolResult("c1", "ast"), details: { kept: 1, callback: () => 1 } } as Message;
  const full = [...history(result), assistant("done")];
  fs.failAt(fs.operationCount + 1, { error: "EIO", persistent: true });
  await assert.rejects(session.commit(full), FsIoError);
  fs.clearFaults();
  assert.equal(session.hasPendingSave, true);
  // The pending save is what was serialized: the details as JSON writes them.
  const written = JSON.parse(JSON.stringify(full)) as Message[];
  assert.deepEqual(session.messages, written);
  assert.deepEqual((await session.readHistory()).messages, written);
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.messages, written);
  await reopened.close();
});

test("a draft's history page copies its messages as JSON writes them, never with a structured clone", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const result = { ...toolResult("c1", "ast"), details: { kept: 1, callback: () => 1 } } as Message;
  // No user round: a draft, held in memory.
  const draft = [assistant("calling", [{ id: "c1", name: "ast" }]), result];
  await session.commit(draft);
  assert.equal(session.getStorageInfo(), undefined);
  const page = await session.readHistory();
  assert.deepEqual(page.messages, JSON.parse(JSON.stringify(draft)));
  await session.close();
});

/**
 * A saved session whose log holds `lines` (JSON texts) after the two first messages of
 * `history`, written by hand as Deno's JSON.stringify writes them, with a matching meta.json.
 */
async function handWritten(levels: number): Promise<{
  fs: MemoryFs;
  store: SessionStore;
  session: SessionManager;
}> {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const head = history(toolResult("c1", "ast")).slice(0, 2);
  await session.commit(head.slice(0, 1));
  await session.close();
  const dir = session.getSessionPath();
  const result = deepResultLine(levels);
  const bytes = encoder.encode(
    head.map((message) => JSON.stringify(message)).join("\n") + "\n" + result + "\n",
  );
  await fs.writeFile(`${dir}/messages.jsonl`, bytes);
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  Object.assign(meta, { start: 0, bytes: bytes.length, messageCount: 3 });
  meta.generation = sha256Hex(bytes);
  await fs.writeFile(`${dir}/meta.json`, encoder.encode(JSON.stringify(meta) + "\n"));
  return { fs, store, session };
}

test("a log line nested deeper than MAX_MESSAGE_NESTING is refused by open and reported by a full listing, the same on every runtime, reading only", async () => {
  for (const levels of [MAX_MESSAGE_NESTING, 4999, 20_000]) {
    const { fs, store, session } = await handWritten(levels);
    const dir = session.getSessionPath();
    const before = fs.snapshotTree?.();
    for (const readOnly of [true, false]) {
      await assert.rejects(store.open(dir, { readOnly }), tooDeep(`${dir}/messages.jsonl`));
    }
    const listing = await store.listDetailed(CWD);
    assert.deepEqual(listing.sessions, []);
    assert.equal(listing.failures.length, 1);
    tooDeep(`${dir}/messages.jsonl`)(listing.failures[0]?.error);
    assert.deepEqual(fs.snapshotTree?.(), before);
  }
});

test("a log line at MAX_MESSAGE_NESTING levels opens, lists and takes saves", async () => {
  const { store, session } = await handWritten(MAX_MESSAGE_NESTING - 1);
  const reopened = await store.open(session.getSessionPath());
  assert.equal(reopened.messages.length, 3);
  assert.equal((await store.listDetailed(CWD)).failures.length, 0);
  await reopened.commit([...reopened.messages, assistant("done")]);
  assert.equal(reopened.getStorageInfo()?.start, 0); // appended: the last message was unchanged
  await reopened.close();
});

test("nesting is judged on what JSON writes: a toJSON method returning something deeper is refused, a shallow one saves", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit([user("parse this")]);
  const file = `${session.getSessionPath()}/messages.jsonl`;
  const before = fs.snapshotTree?.();
  const writesDeep = { toJSON: () => nested(MAX_MESSAGE_NESTING) };
  const deep = { ...toolResult("c1", "ast"), details: { tree: writesDeep } } as Message;
  await assert.rejects(session.commit(history(deep)), (error) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, "messages[2]");
    assert.match(error.message, /nested deeper than 1000 levels/);
    return true;
  });
  assert.deepEqual(fs.snapshotTree?.(), before);
  // An object JSON writes as a string (a Date), in a long message: saved.
  const dated = {
    ...toolResult("c1", "ast", "x".repeat(3000)),
    details: { at: new Date(0), deep: nested(MAX_MESSAGE_NESTING - 2) },
  } as Message;
  await session.commit([...history(dated), assistant("done")]);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(
    (reopened.messages[2] as unknown as { details: { at: string } }).details.at,
    new Date(0).toISOString(),
  );
  await reopened.close();
});

test("a changed copy of a saved message JSON cannot write (a BigInt, a circular reference) is refused as an appended one is: a SessionFormatError naming messages.jsonl and messages[N], nothing written, nothing pending", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const saved = [user("q"), assistant("a"), user("q2"), assistant("a2")];
  await session.commit(saved);
  const file = `${session.getSessionPath()}/messages.jsonl`;
  const before = fs.snapshotTree?.();
  const refused = (index: number) => (error: unknown): boolean => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, `messages[${index}]`);
    assert.match(error.message, /cannot be serialized/);
    return true;
  };
  const circular = (message: Message): Message => {
    const copy = { ...message } as Record<string, unknown>;
    copy.self = copy;
    return copy as unknown as Message;
  };
  const bigint = (message: Message): Message => ({ ...message, extra: 1n }) as unknown as Message;
  for (const change of [bigint, circular]) {
    // The same value in a new message, for reference.
    await assert.rejects(session.commit([...saved, change(user("q3"))]), refused(4));
    // In place of a saved message, and of the last one.
    const replaced = [saved[0]!, change(saved[1]!), saved[2]!, saved[3]!];
    await assert.rejects(session.commit(replaced), refused(1));
    await assert.rejects(session.commit([...saved.slice(0, 3), change(saved[3]!)]), refused(3));
    assert.equal(session.hasPendingSave, false);
  }
  assert.deepEqual(fs.snapshotTree?.(), before);
  // A saved message changed in place into something JSON cannot write is replaced by a copy.
  (saved[1] as unknown as Record<string, unknown>).extra = 1n;
  const fixed = { ...saved[1]!, extra: "one" } as unknown as Message;
  await session.commit([saved[0]!, fixed, saved[2]!, saved[3]!]);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal((reopened.messages[1] as unknown as { extra: string }).extra, "one");
  await reopened.close();
});

test("the nesting check counts levels, not brackets: wide values and brackets in text are not deep", () => {
  const limit = MAX_MESSAGE_NESTING;
  const judge = (value: unknown): boolean => jsonNestsDeeper(value, JSON.stringify(value), limit);
  // Many objects and arrays side by side, and brackets inside strings: shallow.
  assert.equal(
    judge({ items: Array.from({ length: 3 * limit }, (_, i) => ({ i, list: [i] })) }),
    false,
  );
  assert.equal(judge({ text: "{[".repeat(3 * limit) }), false);
  // Exactly at the limit, and one level past it (the value itself is level 1).
  assert.equal(judge(nested(limit)), false);
  assert.equal(judge(nested(limit + 1)), true);
  // A deep chain of arrays with wide siblings before it.
  let deep: unknown = [];
  for (let i = 1; i <= limit; i++) deep = [deep];
  assert.equal(judge({ wide: Array.from({ length: limit }, () => ({})), deep }), true);
});
