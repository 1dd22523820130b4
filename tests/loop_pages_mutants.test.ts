// History pages and index.json, on edges a mutation sweep of the page-read path found untested:
// which index.json a writer adopts or rebuilds (prefixes, titles, other generations), when a save
// or close() publishes it again, what a later page reads, and how a page read recovers from a
// failed read, a failed log open, a failed index read or rebuild, and a directory replaced since
// the open.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileHandle, FileSystem, OpenedFile } from "../src/port/fs.ts";
import { InvalidArgumentError, SessionNotFoundError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { parseRoundIndexText, type RoundIndex } from "../src/loop/storage.ts";
import type { Message } from "../src/loop/records/mod.ts";
import {
  assistant,
  type CommittedRange,
  conversation,
  failingWithEio,
  imageOnly,
  rewriteIndex,
  user,
  withoutRecordedTitle,
} from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const text = new TextDecoder();

/** A store on `fs` (a directory `CWD` is made in `memory`). */
async function storeOn(memory: MemoryFs, fs: FileSystem = memory): Promise<SessionStore> {
  await memory.mkdir(CWD, { recursive: true });
  return new SessionStore({ fs, agentDir: AGENT });
}

/** The committed range meta.json of session directory `dir` names. */
async function metaOf(fs: MemoryFs, dir: string): Promise<CommittedRange> {
  return JSON.parse(text.decode(await fs.readFile(`${dir}/meta.json`)));
}

/** index.json of session directory `dir`, parsed (undefined when missing or invalid). */
async function indexOf(fs: MemoryFs, dir: string): Promise<RoundIndex | undefined> {
  let bytes: Uint8Array;
  try {
    bytes = await fs.readFile(`${dir}/index.json`);
  } catch {
    return undefined;
  }
  return parseRoundIndexText(text.decode(bytes));
}

/** Asserts that index.json of `dir` describes exactly what meta.json commits. */
async function assertIndexCurrent(fs: MemoryFs, dir: string, what: string): Promise<void> {
  const meta = await metaOf(fs, dir);
  const index = await indexOf(fs, dir);
  assert.ok(index !== undefined, `${what}: index.json is there`);
  assert.deepEqual(
    [index.generation, index.start, index.bytes, index.messageCount],
    [meta.generation, meta.start, meta.bytes, meta.messageCount],
    what,
  );
}

/**
 * Opens a writer on `dir` and reads its latest page: the page must be `history`'s, and index.json
 * must be `current` (the history's own index, as a save wrote it) before `close()`, so that other
 * readers (a fast listing) find it.
 */
async function assertFirstPageRebuilds(
  fs: MemoryFs,
  dir: string,
  history: readonly Message[],
  current: Uint8Array,
): Promise<void> {
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  const page = await session.readHistory();
  assert.deepEqual(page.messages, history.slice(page.start));
  assert.deepEqual(await fs.readFile(`${dir}/index.json`), current);
  await session.close();
}

/** The byte offset of each line of the log of `dir` (and its length at the end). */
async function lineOffsets(fs: MemoryFs, dir: string): Promise<number[]> {
  const bytes = await fs.readFile(`${dir}/messages.jsonl`);
  const offsets = [0];
  for (let i = 0; i < bytes.length; i++) if (bytes[i] === 10) offsets.push(i + 1);
  return offsets;
}

/** `message`, an assistant message, with its text replaced by `replacement` of the same length. */
function sameLengthEdit(message: Message, replacement: string): Message {
  const edited = structuredClone(message) as unknown as { content: { text: string }[] };
  assert.equal(edited.content[0]?.text.length, replacement.length);
  (edited.content[0] as { text: string }).text = replacement;
  return edited as unknown as Message;
}

/**
 * A filesystem over `memory` whose renames onto a file named `name` fail (with EIO) while
 * `failing` says so: onto index.json, an index publication that fails after the commit it follows.
 */
function failingRenamesOnto(
  memory: MemoryFs,
  name = "index.json",
): { fs: FileSystem; failing: { on: boolean } } {
  const failing = { on: false };
  const fs = hookedFs(memory, {
    before(method, args) {
      if (failing.on && method === "rename" && String(args[1]).endsWith(`/${name}`)) {
        throw new FsIoError("EIO", "rename", String(args[1]), "Input/output error");
      }
    },
  });
  return { fs, failing };
}

/** A closed session of `history` whose index.json covers all of it; its directory. */
async function indexed(fs: MemoryFs, history: Message[]): Promise<string> {
  const store = await storeOn(fs);
  const session = await store.create(CWD);
  await session.commit(history);
  await session.readHistory();
  await session.close();
  const dir = session.getSessionPath();
  await assertIndexCurrent(fs, dir, "the setup");
  return dir;
}

// ---------------------------------------------------------------------------------------------
// Which index.json a writer's page read rebuilds

/** A change of a complete index.json of `conversation(6)` (18 messages, rounds at 0, 2, 6, ...). */
interface Damage {
  readonly name: string;
  readonly change: (index: RoundIndex, offsets: readonly number[]) => RoundIndex;
}

/** Indexes of `conversation(6)` that are no prefix of its history: each is rebuilt. */
const NO_PREFIX: readonly Damage[] = [
  {
    name: "a prefix of 4 messages listing more rounds than the history has",
    change: (index, offsets) => ({
      ...index,
      messageCount: 4,
      bytes: offsets[4] as number,
      rounds: [...index.rounds, { messageIndex: 16, byteOffset: offsets[16] as number }],
    }),
  },
  {
    name: "a prefix of 6 messages listing the round that starts at message 6",
    change: (index, offsets) => ({
      ...index,
      messageCount: 6,
      bytes: offsets[6] as number,
      rounds: index.rounds.slice(0, 3),
    }),
  },
  {
    name: "a prefix of 8 messages with a round at a wrong byte offset",
    change: (index, offsets) => ({
      ...index,
      messageCount: 8,
      bytes: offsets[8] as number,
      rounds: index.rounds.slice(0, 3).map((round, k) =>
        k === 1 ? { ...round, byteOffset: round.byteOffset + 1 } : round
      ),
    }),
  },
  {
    name: "a complete index with a round at a wrong message index (its byte offset right)",
    change: (index) => ({
      ...index,
      rounds: index.rounds.map((round, k) =>
        k === 3 ? { ...round, messageIndex: round.messageIndex - 1 } : round
      ),
    }),
  },
];

for (const damage of NO_PREFIX) {
  test(`a writer's first page read rebuilds ${damage.name}`, async () => {
    const fs = new MemoryFs();
    const history = conversation(6);
    const dir = await indexed(fs, history);
    const current = await fs.readFile(`${dir}/index.json`);
    const offsets = await lineOffsets(fs, dir);
    await rewriteIndex(fs, dir, (index) => damage.change(index, offsets));
    await assertFirstPageRebuilds(fs, dir, history, current);
  });
}

test("a writer's first page read rewrites an index.json recording no title for a history without one", async () => {
  const fs = new MemoryFs();
  // No user message has text: the history has no fallback title, and index.json records null.
  const history = [imageOnly(), assistant("a picture"), imageOnly(), assistant("another")];
  const dir = await indexed(fs, history);
  const current = await fs.readFile(`${dir}/index.json`);
  assert.equal((await indexOf(fs, dir))?.fallbackTitle, null);
  // As written before the field existed: a listing cannot tell it from a titled one's.
  await withoutRecordedTitle(fs, dir);
  assert.equal((await indexOf(fs, dir))?.fallbackTitle, undefined);
  await assertFirstPageRebuilds(fs, dir, history, current);
});

test("a writer's first page read rebuilds the complete index.json of a replaced generation of as many bytes", async () => {
  const fs = new MemoryFs();
  const store = await storeOn(fs);
  const session = await store.create(CWD);
  const history = conversation(3);
  await session.commit(history);
  const dir = session.getSessionPath();
  const replaced = await fs.readFile(`${dir}/index.json`);
  // The last answer edited in place of the same length: the same count, bytes and rounds, in a
  // new generation at a new start.
  const last = history.length - 1;
  const edited = [...history.slice(0, last), sameLengthEdit(history[last] as Message, "r2 ANSWER")];
  await session.commit(edited);
  await session.close();
  // As a writer that stopped between meta.json and index.json left it.
  await fs.writeFile(`${dir}/index.json`, replaced);
  const writer = await store.open(dir);
  const page = await writer.readHistory();
  assert.deepEqual(page.messages, edited.slice(page.start));
  await assertIndexCurrent(fs, dir, "after the page read");
  await writer.close();
});

test("a writer's first page read rebuilds a prefix index.json of a replaced generation", async () => {
  const fs = new MemoryFs();
  const store = await storeOn(fs);
  const session = await store.create(CWD);
  const first = [user("first question"), assistant("first answer")];
  await session.commit(first);
  const dir = session.getSessionPath();
  const prefix = await fs.readFile(`${dir}/index.json`);
  const history = [...first, user("second question"), assistant("second answer")];
  await session.commit(history);
  // The second answer replaced: the first two messages (all the prefix covers) are unchanged.
  const edited = [...first, user("second question"), assistant("a better second answer")];
  await session.commit(edited);
  await session.close();
  await fs.writeFile(`${dir}/index.json`, prefix);
  assert.equal((await indexOf(fs, dir))?.messageCount, 2);
  const writer = await store.open(dir);
  const page = await writer.readHistory();
  assert.deepEqual(page.messages, edited.slice(page.start));
  await assertIndexCurrent(fs, dir, "after the page read");
  await writer.close();
});

// ---------------------------------------------------------------------------------------------
// A page read that cannot read or rebuild index.json

test("a writer's page read is served when reading index.json fails, and rebuilds it", async () => {
  const memory = new MemoryFs();
  const history = conversation(4);
  const dir = await indexed(memory, history);
  const current = await memory.readFile(`${dir}/index.json`);
  // Not an index (so its rebuild shows), and every read of it fails.
  await memory.writeFile(`${dir}/index.json`, new TextEncoder().encode("{}\n"));
  let failing = true;
  const fs = failingWithEio(
    memory,
    (method, path) => failing && path.endsWith("/index.json") && method.startsWith("read"),
  );
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  const page = await session.readHistory();
  assert.deepEqual(page.messages, history.slice(page.start));
  assert.deepEqual(await memory.readFile(`${dir}/index.json`), current, "rebuilt");
  failing = false;
  await session.close();
});

test("a failed index.json rebuild does not fail the page, and the next page read retries it", async () => {
  const memory = new MemoryFs();
  const history = conversation(6);
  const dir = await indexed(memory, history);
  const current = await memory.readFile(`${dir}/index.json`);
  await memory.remove(`${dir}/index.json`);
  const { fs, failing } = failingRenamesOnto(memory);
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  failing.on = true;
  const page = await session.readHistory();
  assert.deepEqual(page.messages, history.slice(page.start));
  assert.equal(await indexOf(memory, dir), undefined, "the rebuild failed");
  failing.on = false;
  const earlier = await session.readHistory(page.start, page.revision);
  assert.deepEqual(earlier.messages, history.slice(0, page.start));
  assert.deepEqual(await memory.readFile(`${dir}/index.json`), current, "rebuilt by the next page");
  await session.close();
});

// ---------------------------------------------------------------------------------------------
// Later page reads

test("a writer's later page read reads only the page's byte range of the log", async () => {
  const fs = new MemoryFs();
  const history = conversation(6);
  const dir = await indexed(fs, history);
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  const page = await session.readHistory(); // opens the log
  fs.resetCounter();
  const earlier = await session.readHistory(page.start, page.revision);
  assert.deepEqual(earlier.messages, history.slice(0, page.start));
  assert.deepEqual(
    fs.operationLog.map(({ op, path }) => `${op} ${path}`),
    [`read ${dir}/messages.jsonl`],
  );
  await session.close();
});

test("a page boundary past the last round's start and before the total is refused", async () => {
  const fs = new MemoryFs();
  const history = conversation(3); // users at 0, 2 and 6 of 8 messages
  const dir = await indexed(fs, history);
  for (const readOnly of [false, true]) {
    const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir, { readOnly });
    for (const before of [7, 5]) {
      await assert.rejects(session.readHistory(before), InvalidArgumentError, `${before}`);
    }
    assert.deepEqual((await session.readHistory(6)).messages, history.slice(0, 6));
    await session.close();
  }
});

/**
 * `memory` whose log handles (opened for reading) fail every read once `breakHandles()` was
 * called, as handles on a disk that went away and came back do: a new open reads again.
 */
function breakableLogHandles(memory: MemoryFs): { fs: FileSystem; breakHandles: () => void } {
  const handles = new Set<FileHandle>();
  const broken = new Set<FileHandle>();
  const wrap = (handle: FileHandle, path: string): FileHandle => {
    const wrapped: FileHandle = new Proxy(handle, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (typeof value !== "function") return value;
        if (prop === "read") {
          return (...args: unknown[]) => {
            if (broken.has(wrapped)) {
              return Promise.reject(new FsIoError("EIO", "read", path, "Input/output error"));
            }
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          };
        }
        return value.bind(target);
      },
    });
    handles.add(wrapped);
    return wrapped;
  };
  const fs = new Proxy(memory, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (prop === "openNoFollow") {
        return async (path: string): Promise<OpenedFile> => {
          const opened = await target.openNoFollow(path);
          if (!path.endsWith("/messages.jsonl")) return opened;
          return { ...opened, handle: wrap(opened.handle, path) };
        };
      }
      return value.bind(target);
    },
  });
  return { fs, breakHandles: () => handles.forEach((handle) => broken.add(handle)) };
}

test("a writer's page read after a failed read of the log opens the log again", async () => {
  const memory = new MemoryFs();
  const history = conversation(6);
  const dir = await indexed(memory, history);
  const { fs, breakHandles } = breakableLogHandles(memory);
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  const page = await session.readHistory();
  breakHandles();
  await assert.rejects(session.readHistory(page.start, page.revision), FsIoError);
  const earlier = await session.readHistory(page.start, page.revision);
  assert.deepEqual(earlier.messages, history.slice(0, page.start));
  await session.close();
  assert.deepEqual(memory.openHandles, []);
});

test("a writer's page read after its first log open failed opens the log again", async () => {
  const memory = new MemoryFs();
  const history = conversation(6);
  const dir = await indexed(memory, history);
  let fail = false;
  const fs = failingWithEio(memory, (method, path) => {
    if (!fail || !method.startsWith("open") || !path.endsWith("/messages.jsonl")) return false;
    fail = false;
    return true;
  });
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  fail = true;
  await assert.rejects(session.readHistory(), FsIoError);
  assert.equal(fail, false, "the open failed");
  const page = await session.readHistory();
  assert.deepEqual(page.messages, history.slice(page.start));
  await session.close();
  assert.deepEqual(memory.openHandles, []);
});

// ---------------------------------------------------------------------------------------------
// A writer's first page read in a directory that no longer holds the session

/** A writer of a closed session of `conversation(3)` (no page read yet) and its store's fs. */
async function openWriter(): Promise<{ fs: MemoryFs; dir: string; writer: SessionManager }> {
  const fs = new MemoryFs();
  const store = await storeOn(fs);
  const session = await store.create(CWD);
  await session.commit(conversation(3));
  await session.close();
  const dir = session.getSessionPath();
  return { fs, dir, writer: await store.open(dir) };
}

/** Asserts that `writer`'s page read is refused naming meta.json of `dir`. */
async function assertNotFound(writer: SessionManager, dir: string): Promise<void> {
  const error = await writer.readHistory().then(
    () => assert.fail("a page was served"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof SessionNotFoundError, String(error));
  assert.equal(error.file, `${dir}/meta.json`);
}

test("a writer's first page read in a directory whose meta.json names another session is refused", async () => {
  const { fs, dir, writer } = await openWriter();
  const meta = JSON.parse(text.decode(await fs.readFile(`${dir}/meta.json`)));
  meta.header.id = "0b5e1f7c-3d2a-4c8b-9e6f-1a2b3c4d5e6f";
  await fs.writeFile(`${dir}/meta.json`, new TextEncoder().encode(JSON.stringify(meta)));
  await assertNotFound(writer, dir);
  await writer.close();
});

test("a writer's first page read in a directory holding another state of the session is refused", async () => {
  const { fs, dir, writer } = await openWriter();
  const before = {
    meta: await fs.readFile(`${dir}/meta.json`),
    log: await fs.readFile(`${dir}/messages.jsonl`),
  };
  await writer.append([user("one more"), assistant("done")]);
  // The directory's files put back as they were before that save (a backup restored over it).
  await fs.writeFile(`${dir}/meta.json`, before.meta);
  await fs.writeFile(`${dir}/messages.jsonl`, before.log);
  await assertNotFound(writer, dir);
  await writer.close();
});

test("a writer's first page read after its collection became a file is refused", async () => {
  const { fs, dir, writer } = await openWriter();
  const collection = dir.slice(0, dir.lastIndexOf("/"));
  await fs.rename(collection, "/elsewhere");
  await fs.writeFile(collection, new TextEncoder().encode("not a directory"));
  await assertNotFound(writer, dir);
  await writer.close();
});

// ---------------------------------------------------------------------------------------------
// When a save publishes index.json again

test("a long history's index.json is republished once it lags by an eighth of its rounds", async () => {
  const fs = new MemoryFs();
  const store = await storeOn(fs);
  const session = await store.create(CWD);
  const history = conversation(100);
  await session.commit(history); // the first save publishes index.json
  const dir = session.getSessionPath();
  const covered: number[] = [];
  for (let j = 1; j <= 16; j++) {
    history.push(user(`more ${j}`), assistant(`ok ${j}`));
    await session.commit(history);
    covered.push((await indexOf(fs, dir))?.rounds.length ?? -1);
  }
  // 100 + j rounds, j of them not covered: republished at j = 15 = ceil(115 / 8), not before.
  assert.deepEqual(covered, Array.from({ length: 16 }, (_, i) => (i + 1 < 15 ? 100 : 115)));
  await session.close();
});

/** The bytes of a message's line: its JSON and a newline (ASCII text here). */
function lineLength(message: Message): number {
  return JSON.stringify(message).length + 1;
}

/** A user message whose line is exactly `length` bytes long. */
function userOfLine(length: number): Message {
  const message = { role: "user", content: "", timestamp: 1 } as Message;
  return { ...message, content: "x".repeat(length - lineLength(message)) } as Message;
}

const MIB = 1024 * 1024;

for (const [lag, republished] of [[MIB - 1, false], [MIB, true]] as const) {
  const outcome = republished ? "republishes it" : "leaves it as it was";
  test(`a save leaving ${lag} bytes not covered by index.json ${outcome}`, async () => {
    const fs = new MemoryFs();
    const store = await storeOn(fs);
    const session = await store.create(CWD);
    await session.commit([user("first"), assistant("answer")]); // publishes index.json
    const dir = session.getSessionPath();
    const covered = (await metaOf(fs, dir)).bytes;
    await session.append([userOfLine(lag)]);
    const meta = await metaOf(fs, dir);
    assert.equal(meta.bytes - covered, lag);
    assert.equal((await indexOf(fs, dir))?.bytes, republished ? meta.bytes : covered);
    await session.close();
  });
}

test("the byte lag of an index.json adopted at open counts from the bytes it covers", async () => {
  const fs = new MemoryFs();
  const store = await storeOn(fs);
  const session = await store.create(CWD);
  await session.commit([user("first"), assistant("answer")]);
  const dir = session.getSessionPath();
  const prefix = await fs.readFile(`${dir}/index.json`);
  await session.append([userOfLine(600 * 1024)]);
  await session.close();
  // As a writer that stopped before close() left it: 600 KiB not covered.
  await fs.writeFile(`${dir}/index.json`, prefix);
  assert.equal((await indexOf(fs, dir))?.messageCount, 2);
  const writer = await store.open(dir);
  await writer.append([assistant("y".repeat(500 * 1024))]);
  // 1.1 MiB not covered after this save: republished by it.
  await assertIndexCurrent(fs, dir, "after the save");
  await writer.close();
});

// ---------------------------------------------------------------------------------------------
// close()

test("close() publishes index.json when every publication by the writer's saves failed", async () => {
  const memory = new MemoryFs();
  const { fs, failing } = failingRenamesOnto(memory);
  const store = await storeOn(memory, fs);
  const session = await store.create(CWD);
  failing.on = true;
  await session.commit(conversation(3));
  const dir = session.getSessionPath();
  assert.equal(await indexOf(memory, dir), undefined, "not published by the save");
  failing.on = false;
  await session.close();
  await assertIndexCurrent(memory, dir, "after close()");
});

test("close() republishes index.json after a replacement of as many bytes whose publication failed", async () => {
  const memory = new MemoryFs();
  const { fs, failing } = failingRenamesOnto(memory);
  const store = await storeOn(memory, fs);
  const session = await store.create(CWD);
  const history = conversation(3);
  await session.commit(history);
  const last = history.length - 1;
  failing.on = true;
  await session.commit([
    ...history.slice(0, last),
    sameLengthEdit(history[last] as Message, "r2 ANSWER"),
  ]);
  failing.on = false;
  const dir = session.getSessionPath();
  const stale = await indexOf(memory, dir);
  const meta = await metaOf(memory, dir);
  assert.notEqual(stale?.generation, meta.generation, "the save's publication failed");
  assert.equal(stale?.bytes, meta.bytes);
  await session.close();
  await assertIndexCurrent(memory, dir, "after close()");
});

test("close() with a save pending leaves index.json a prefix, which listings complete from the log", async () => {
  const memory = new MemoryFs();
  const { fs, failing } = failingRenamesOnto(memory, "meta.json");
  const store = await storeOn(memory, fs);
  const session = await store.create(CWD);
  const history = conversation(3);
  await session.commit(history); // index.json published
  // One more round: a lag too small to publish index.json again at this save.
  const round = [user("r4 question"), assistant("r4 answer")];
  await session.append(round);
  failing.on = true;
  await assert.rejects(session.append([user("r5 question"), assistant("r5 answer")]));
  failing.on = false;
  assert.ok(session.hasPendingSave);
  await session.close();
  const dir = session.getSessionPath();
  const meta = await metaOf(memory, dir);
  const index = await indexOf(memory, dir);
  assert.equal(meta.messageCount, history.length + 2, "the pending save stayed unsaved");
  assert.equal(index?.messageCount, history.length, "index.json left as it was");
  const users = [...history, ...round].filter((message) => message.role === "user").length;
  for (const fast of [true, false]) {
    const listed = (await store.list(CWD, undefined, { fast })).find((s) => s.id === session.id);
    assert.deepEqual(
      [listed?.messageCount, listed?.userMessageCount],
      [history.length + 2, users],
      `listing (fast ${fast})`,
    );
  }
  // The next writer publishes it again at its close().
  const again = await store.open(dir);
  await again.readHistory();
  await again.close();
  await assertIndexCurrent(memory, dir, "after the next writer");
});
