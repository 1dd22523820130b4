// History pages (`readHistory`): each message of a page is decoded and parsed alone from the byte
// offsets the manager holds; a writer's page read after its session directory went away; the
// index.json a writer's close() leaves after a replacement whose index publication failed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { verifySession } from "../src/loop/verify.ts";
import {
  CorruptSessionError,
  SessionFormatError,
  SessionNotFoundError,
} from "../src/loop/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { parseRoundIndexText } from "../src/loop/storage.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { assistant, conversation, toolResult, user } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const text = new TextDecoder();

async function setup(fs: FileSystem = new MemoryFs()): Promise<SessionStore> {
  await fs.mkdir(CWD, { recursive: true });
  return new SessionStore({
    fs,
    agentDir: AGENT,
    now: () => Date.parse("2026-01-02T03:04:05.000Z"),
  });
}

/** A saved session of `history`, closed; returns its directory. */
async function saved(store: SessionStore, history: Message[]): Promise<string> {
  const session = await store.create(CWD);
  await session.commit(history);
  await session.close();
  return session.getSessionPath();
}

/** Every page of `session`, latest first, joined oldest first. */
async function allPages(session: SessionManager): Promise<Message[]> {
  let page = await session.readHistory();
  const pages = [page.messages];
  while (page.start > 0) {
    page = await session.readHistory(page.start, page.revision);
    pages.unshift(page.messages);
  }
  return pages.flat();
}

/** The byte offset of each line of `bytes` (and the length at the end). */
function lineOffsets(bytes: Uint8Array): number[] {
  const offsets = [0];
  for (let i = 0; i < bytes.length; i++) if (bytes[i] === 10) offsets.push(i + 1);
  return offsets;
}

/**
 * Runs `body` with every `TextDecoder.decode` refusing input longer than `limit` bytes, as the
 * runtime refuses a string longer than its largest (Node `ERR_STRING_TOO_LONG`, Deno
 * `TypeError`): a page read that decodes each message alone never meets the limit of one line.
 */
async function withDecodeLimit<T>(limit: number, body: () => Promise<T>): Promise<T> {
  const proto = TextDecoder.prototype;
  const decode = proto.decode;
  proto.decode = function (this: TextDecoder, input?: AllowSharedBufferSource, options?) {
    if (input !== undefined && input.byteLength > limit) {
      throw Object.assign(new RangeError("Cannot create a string longer than the limit"), {
        code: "ERR_STRING_TOO_LONG",
      });
    }
    return decode.call(this, input, options);
  };
  try {
    return await body();
  } finally {
    proto.decode = decode;
  }
}

/** A history of 3 rounds, each of `per` tool calls whose results are ~1 KB lines. */
function longRounds(per: number): Message[] {
  const history: Message[] = [];
  for (let r = 0; r < 3; r++) {
    history.push(user(`round ${r}`));
    for (let i = 0; i < per; i++) {
      history.push(assistant(`call ${r}.${i}`, [{ id: `c${r}_${i}`, name: "read" }]));
      history.push(toolResult(`c${r}_${i}`, "read", `${r}.${i} ` + "x".repeat(900)));
    }
    history.push(assistant(`done ${r}`));
  }
  return history;
}

for (const mode of ["read-only", "writer"] as const) {
  test(`a ${mode} page read decodes each message alone: a page longer than the largest string is served`, async () => {
    const store = await setup();
    const history = longRounds(20); // a page of ~123 lines, ~130 KB
    const dir = await saved(store, history);
    const session = await store.open(dir, { readOnly: mode === "read-only" });
    if (mode === "writer") await session.readHistory(); // index.json checked outside the limit
    // No line is longer than 2 KB; the page is 60 times that.
    const page = await withDecodeLimit(2048, () => session.readHistory());
    assert.equal(page.start, 0);
    assert.deepEqual(page.messages, history);
    await session.close();
  });
}

test("page reads split lines of multi-byte UTF-8 exactly at the offsets held", async () => {
  const store = await setup();
  const history: Message[] = [];
  const samples = ["é", "✓", "😀", "中文", "\u2028", "ß😀✓é"];
  for (let r = 0; r < 8; r++) {
    const s = samples[r % samples.length] as string;
    history.push(user(`${s}${r} question ${s}`));
    history.push(assistant(`${s}`, [{ id: `${s}${r}`, name: `${s}tool` }]));
    history.push(toolResult(`${s}${r}`, `${s}tool`, `${s.repeat(r + 1)}`));
    history.push(assistant(`${s}${s} answer ${r} ${s}`));
  }
  const dir = await saved(store, history);
  for (const readOnly of [true, false]) {
    const session = await store.open(dir, { readOnly });
    assert.deepEqual(await allPages(session), history);
    await session.close();
  }
});

test("a page of many lines equals the history, read-only and writer, page by page", async () => {
  const store = await setup();
  const history: Message[] = [...conversation(3, "a")];
  history.push(user("a long autonomous run"));
  for (let i = 0; i < 600; i++) {
    history.push(assistant(`step ${i} ✓`, [{ id: `s${i}`, name: "run" }]));
    history.push(toolResult(`s${i}`, "run", `out ${i} 😀`));
  }
  history.push(assistant("finished"));
  history.push(...conversation(4, "b"));
  const dir = await saved(store, history);
  for (const readOnly of [true, false]) {
    const session = await store.open(dir, { readOnly });
    assert.deepEqual(await allPages(session), history);
    await session.close();
  }
});

for (const damage of ["invalid JSON", "no newline at its end", "a newline inside"] as const) {
  test(`damage (${damage}) in the middle line of a page names messages.jsonl and that message`, async () => {
    const fs = new MemoryFs();
    const store = await setup(fs);
    const history = conversation(6);
    const dir = await saved(store, history);
    const log = `${dir}/messages.jsonl`;
    const bytes = await fs.readFile(log);
    const offsets = lineOffsets(bytes);
    // A writer opens the log on its first page read (after the damage below).
    const writer = await store.open(dir);
    const reader = await store.open(dir, { readOnly: true });
    const { start, end } = await reader.readHistory();
    await reader.close();
    const middle = Math.floor((start + end) / 2);
    assert.ok(middle > start && middle < end - 1);
    const at = offsets[middle] as number;
    const next = offsets[middle + 1] as number;
    const damaged = bytes.slice();
    if (damage === "invalid JSON") damaged[at] = 0x5b; // "[" for "{"
    if (damage === "no newline at its end") damaged[next - 1] = 0x20;
    if (damage === "a newline inside") damaged[at + 1] = 0x0a; // "{\n"role":...
    await fs.writeFile(log, damaged);
    const error = await writer.readHistory().then(
      () => assert.fail("the damaged page was served"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.file, log);
    assert.equal(error.messageIndex, middle);
    assert.equal(error.offset, at);
    await writer.close();
  });
}

for (const gone of ["removed", "moved away", "replaced by an empty directory"] as const) {
  test(`a writer's page read after its session directory was ${gone} is SessionNotFoundError naming meta.json`, async () => {
    const fs = new MemoryFs();
    const store = await setup(fs);
    const dir = await saved(store, conversation(3));
    const writer = await store.open(dir);
    if (gone === "removed") await fs.remove(dir, { recursive: true });
    else await fs.rename(dir, "/elsewhere");
    if (gone === "replaced by an empty directory") await fs.mkdir(dir, { mode: 0o700 });
    const error = await writer.readHistory().then(
      () => assert.fail("a page was served"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof SessionNotFoundError, String(error));
    assert.equal(error.file, `${dir}/meta.json`);
    // As its writes say.
    await assert.rejects(writer.setPinned(true), SessionNotFoundError);
    await writer.close();
  });
}

/**
 * A session of four rounds whose replacement of its first prompt (the same message count, a new
 * generation) was saved while its index publication failed.
 */
async function replacedWithoutIndex(): Promise<{
  mem: MemoryFs;
  store: SessionStore;
  session: SessionManager;
  replaced: Message[];
}> {
  const mem = new MemoryFs();
  let failIndex = false;
  const fs = hookedFs(mem, {
    before: (method, args) => {
      if (failIndex && method === "rename" && String(args[1]).endsWith("/index.json")) {
        failIndex = false;
        throw new Error("injected: index publication fails");
      }
    },
  });
  const store = await setup(fs);
  const session = await store.create(CWD);
  const history = conversation(4);
  await session.commit(history);
  failIndex = true;
  const replaced = [user("edited first prompt"), ...history.slice(1)];
  await session.commit(replaced);
  assert.equal(failIndex, false, "the index publication was attempted and failed");
  return { mem, store, session, replaced };
}

test("close() republishes index.json after a same-count replacement whose index publication failed", async () => {
  const { mem, store, session, replaced } = await replacedWithoutIndex();
  const dir = session.getSessionPath();
  await session.close();
  const meta = JSON.parse(text.decode(await mem.readFile(`${dir}/meta.json`)));
  const index = parseRoundIndexText(text.decode(await mem.readFile(`${dir}/index.json`)));
  assert.ok(index !== undefined);
  assert.equal(index.generation, meta.generation);
  assert.equal(index.start, meta.start);
  assert.equal(index.bytes, meta.bytes);
  const report = await verifySession(mem, dir, { sha256: portableSha256 });
  assert.deepEqual(report.findings, []);
  // And equal to the index a page read of a fresh writer builds.
  const built = await mem.readFile(`${dir}/index.json`);
  await mem.remove(`${dir}/index.json`);
  const reopened = await store.open(dir);
  const page = await reopened.readHistory();
  assert.deepEqual(page.messages, replaced.slice(page.start));
  await reopened.close();
  assert.deepEqual(await mem.readFile(`${dir}/index.json`), built);
});

test("a save refused after taking in a user message leaves no round behind: pages and index.json stay right", async () => {
  const fs = new MemoryFs();
  const store = await setup(fs);
  const session = await store.create(CWD);
  const history = conversation(4);
  await session.commit(history);
  // Refused at its second new message (a tool result answering no call), after the first, a
  // user message, was serialized.
  await assert.rejects(
    session.commit([...history, user("refused"), toolResult("no-such-call", "read")]),
    SessionFormatError,
  );
  const next = [...history, user("kept"), assistant("kept answer")];
  await session.commit(next);
  const starts = next.flatMap((message, i) => (message.role === "user" ? [i] : []));
  const page = await session.readHistory();
  assert.equal(page.start, starts[starts.length - 3], "the latest three rounds");
  assert.deepEqual(page.messages, next.slice(page.start));
  assert.deepEqual(await allPages(session), next);
  const dir = session.getSessionPath();
  await session.close();
  const index = parseRoundIndexText(text.decode(await fs.readFile(`${dir}/index.json`)));
  assert.deepEqual(index?.rounds.map((round) => round.messageIndex), starts);
  const report = await verifySession(fs, dir, { sha256: portableSha256 });
  assert.deepEqual(report.findings, []);
});

test("a page read after a replacement whose index publication failed rebuilds index.json at once", async () => {
  const { mem, session, replaced } = await replacedWithoutIndex();
  const dir = session.getSessionPath();
  const page = await session.readHistory();
  assert.deepEqual(page.messages, replaced.slice(page.start));
  // Before close(): other readers (a fast listing) find an index of the committed generation.
  const meta = JSON.parse(text.decode(await mem.readFile(`${dir}/meta.json`)));
  const index = parseRoundIndexText(text.decode(await mem.readFile(`${dir}/index.json`)));
  assert.equal(index?.generation, meta.generation);
  assert.equal(index?.start, meta.start);
  assert.equal(index?.bytes, meta.bytes);
  await session.close();
});
