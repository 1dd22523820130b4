// Corruption is reported as a typed error naming the damaged file (and field), and a listing
// reports the damaged session as a failure beside the healthy ones: a session file too long to
// be decoded as one string, and a meta.json that belongs to another session.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { wrappedHandles } from "./_hooks.ts";
import { CorruptSessionError, type SessionError, SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { verifySession } from "../src/loop/verify.ts";
import type { Message } from "../src/loop/records/mod.ts";
import {
  assistant,
  conversation,
  legacySessionBytes,
  recommit,
  toolResult,
  user,
  withoutRecordedTitle,
} from "./_fixtures.ts";

const CWD = "/work/app";
const AGENT = "/home/user/.loop";
const LEGACY_ID = "0f0e0d0c-0b0a-4908-8706-050403020100";
/** Decodes of more bytes than this fail in these tests; every healthy file is far shorter. */
const LIMIT = 32 * 1024;

/**
 * Runs `body` with every `TextDecoder.decode` refusing input longer than `LIMIT` bytes, as the
 * runtime refuses a string longer than its largest (Node `ERR_STRING_TOO_LONG`, Deno
 * `TypeError: buffer exceeds maximum length`) for a file of ~600 MiB.
 */
async function withDecodeLimit<T>(error: () => Error, body: () => Promise<T>): Promise<T> {
  const proto = TextDecoder.prototype;
  const decode = proto.decode;
  proto.decode = function (this: TextDecoder, input?: AllowSharedBufferSource, options?) {
    if (input !== undefined && input.byteLength > LIMIT) throw error();
    return decode.call(this, input, options);
  };
  try {
    return await body();
  } finally {
    proto.decode = decode;
  }
}

const RUNTIME_ERRORS: [string, () => Error][] = [
  ["Deno", () => new TypeError("buffer exceeds maximum length")],
  [
    "Node",
    () =>
      Object.assign(new Error("Cannot create a string longer than 0x1fffffe8 characters"), {
        code: "ERR_STRING_TOO_LONG",
      }),
  ],
];

/** `bytes` followed by `extra` zero bytes (no newline). */
function grown(bytes: Uint8Array, extra = 2 * LIMIT): Uint8Array {
  const out = new Uint8Array(bytes.length + extra);
  out.set(bytes);
  return out;
}

async function healthyStore(): Promise<{ fs: MemoryFs; store: SessionStore; healthy: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1, "healthy"));
  await session.close();
  return { fs, store, healthy: session.id };
}

function assertFormatError(error: unknown, file: string, path?: string): true {
  assert.ok(error instanceof SessionFormatError, `expected SessionFormatError, got ${error}`);
  assert.equal(error.file, file);
  if (path !== undefined) assert.equal(error.path, path);
  return true;
}

/** Both listings report `failed` (at `file`, `path`) and still list `healthy`. */
async function assertListed(
  fs: MemoryFs,
  healthy: string,
  failed: string,
  file: string,
  path?: string,
): Promise<void> {
  for (const fast of [true, false]) {
    const store = new SessionStore({ fs, agentDir: AGENT });
    const listed = await store.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(listed.sessions.map((s) => s.id), [healthy], `fast: ${fast}`);
    const [failure, ...more] = listed.failures;
    assert.ok(failure !== undefined && more.length === 0, `fast: ${fast}`);
    assert.equal(failure.id, failed);
    assertFormatError(failure.error, file, path);
  }
}

for (const [runtime, error] of RUNTIME_ERRORS) {
  test(`a meta.json too long to decode is a SessionFormatError naming it (${runtime})`, async () => {
    const { fs, store, healthy } = await healthyStore();
    const session = await store.create(CWD);
    await session.commit(conversation(2));
    await session.close();
    const dir = session.getSessionPath();
    const meta = `${dir}/meta.json`;
    await fs.writeFile(meta, grown(await fs.readFile(meta)));
    await withDecodeLimit(error, async () => {
      for (const readOnly of [true, false]) {
        const fresh = new SessionStore({ fs, agentDir: AGENT });
        await assert.rejects(fresh.open(dir, { readOnly }), (e) => assertFormatError(e, meta));
      }
      await assertListed(fs, healthy, session.id, meta);
      const report = await verifySession(fs, dir, { sha256: portableSha256 });
      assert.equal(report.ok, false);
      assert.ok(report.findings.some((f) => f.file === meta), JSON.stringify(report.findings));
    });
  });

  test(`a legacy line too long to decode is a SessionFormatError naming it (${runtime})`, async () => {
    const { fs, store, healthy } = await healthyStore();
    const collection = await store.collectionFor(CWD);
    const file = `${collection}/${LEGACY_ID}.jsonl`;
    const bytes = legacySessionBytes(LEGACY_ID, CWD, [user("hi"), assistant("ho")]);
    await fs.writeFile(file, grown(bytes));
    await withDecodeLimit(error, async () => {
      await assertListed(fs, healthy, LEGACY_ID, file, "messages[2]");
      for (const readOnly of [true, false]) {
        const fresh = new SessionStore({ fs, agentDir: AGENT });
        await assert.rejects(
          fresh.open(file, { readOnly }),
          (e) => assertFormatError(e, file, "messages[2]"),
        );
      }
    });
    // The header line itself too long (the file is one line).
    await fs.writeFile(file, grown(bytes.subarray(0, bytes.indexOf(10))));
    await withDecodeLimit(error, async () => {
      await assertListed(fs, healthy, LEGACY_ID, file, "header");
    });
  });
}

test("a meta.json of another session is reported as meta.json's header.id", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const big = await store.create(CWD);
  await big.commit(conversation(6, "big"));
  await big.close();
  const small = await store.create(CWD);
  await small.commit(conversation(2, "small"));
  await small.close();
  for (const [into, from] of [[small, big], [big, small]] as const) {
    const work = fs.clone();
    const dir = into.getSessionPath();
    const meta = `${dir}/meta.json`;
    await work.writeFile(meta, await work.readFile(`${from.getSessionPath()}/meta.json`));
    for (const readOnly of [true, false]) {
      const fresh = new SessionStore({ fs: work, agentDir: AGENT });
      await assert.rejects(fresh.open(dir, { readOnly }), (e) => {
        assertFormatError(e, meta, "header.id");
        const message = (e as SessionError).message;
        assert.ok(message.startsWith("Session id does not match its directory name"), message);
        return true;
      });
    }
    for (const fast of [true, false]) {
      const listed = await new SessionStore({ fs: work, agentDir: AGENT }).listDetailed(
        CWD,
        undefined,
        { fast },
      );
      assert.deepEqual(listed.sessions.map((s) => s.id), [from.id], `fast: ${fast}`);
      const [failure, ...more] = listed.failures;
      assert.ok(failure !== undefined && more.length === 0, `fast: ${fast}`);
      assert.equal(failure.id, into.id);
      assertFormatError(failure.error, meta, "header.id");
    }
  }
});

for (const [runtime, error] of RUNTIME_ERRORS) {
  test(`a committed message line too long to decode is a typed error naming it (${runtime})`, async () => {
    const { fs, store, healthy } = await healthyStore();
    const session = await store.create(CWD);
    // Message 2 is longer than the decode limit; the others are short.
    await session.commit([
      user("first"),
      assistant("ok"),
      user("y".repeat(2 * LIMIT)),
      assistant("done"),
    ]);
    await session.close();
    const dir = session.getSessionPath();
    const log = `${dir}/messages.jsonl`;
    await withDecodeLimit(error, async () => {
      for (const readOnly of [true, false]) {
        const fresh = new SessionStore({ fs, agentDir: AGENT });
        await assert.rejects(
          fresh.open(dir, { readOnly }),
          (e) => assertFormatError(e, log, "messages[2]"),
        );
      }
      // The full listing reads every committed line: the session is a failure naming the log,
      // beside the healthy one.
      const listed = await new SessionStore({ fs, agentDir: AGENT }).listDetailed(
        CWD,
        undefined,
        { fast: false },
      );
      assert.deepEqual(listed.sessions.map((s) => s.id), [healthy]);
      const [failure, ...more] = listed.failures;
      assert.ok(failure !== undefined && more.length === 0, JSON.stringify(listed.failures));
      assert.equal(failure.id, session.id);
      assertFormatError(failure.error, log, "messages[2]");
      const report = await verifySession(fs, dir, { sha256: portableSha256 });
      assert.equal(report.ok, false);
      assert.ok(report.findings.some((f) => f.file === log), JSON.stringify(report.findings));
    });
    // Nothing was modified: without the limit the session opens whole.
    const reopened = await new SessionStore({ fs, agentDir: AGENT }).open(dir, { readOnly: true });
    assert.equal(reopened.messages.length, 4);
    await reopened.close();
  });
}

for (const [runtime, error] of RUNTIME_ERRORS) {
  test(`a fast listing that reads the log reports a line too long to decode by name, and decodes a lagging index's tail line by line (${runtime})`, async () => {
    const { fs, store, healthy } = await healthyStore();
    // A first user message longer than the limit, with an index that records no title: the
    // fast listing reads the title from the log.
    const long = await store.create(CWD);
    await long.commit([user("y".repeat(2 * LIMIT)), assistant("ok")]);
    await long.close();
    await withoutRecordedTitle(fs, long.getSessionPath());
    // A writer still open whose index lags by one round of ~100 KiB of short lines.
    const lagging = await store.create(CWD);
    const history = conversation(2);
    await lagging.commit(history);
    const more = [...history, user("next")];
    for (let i = 0; i < 40; i++) {
      more.push(assistant(`step ${i}`, [{ id: `call-${i}`, name: "read" }]));
      more.push(toolResult(`call-${i}`, "read", "z".repeat(2500)));
    }
    more.push(assistant("done"));
    await lagging.commit(more);
    const log = `${long.getSessionPath()}/messages.jsonl`;
    await withDecodeLimit(error, async () => {
      const listed = await new SessionStore({ fs, agentDir: AGENT }).listDetailed(
        CWD,
        undefined,
        { fast: true },
      );
      assert.deepEqual(listed.sessions.map((s) => s.id).sort(), [healthy, lagging.id].sort());
      const [failure, ...rest] = listed.failures;
      assert.ok(failure !== undefined && rest.length === 0, JSON.stringify(listed.failures));
      assert.equal(failure.id, long.id);
      assertFormatError(failure.error, log, "messages[0]");
      const counted = listed.sessions.find((s) => s.id === lagging.id);
      assert.equal(counted?.userMessageCount, 3);
      assert.equal(counted?.messageCount, more.length);
    });
    await lagging.close();
  });
}

/**
 * The healthy store, and beside its session a closed one of two messages (with a stored title
 * when `storedTitle`) for a test to damage.
 */
async function beside(storedTitle = false): Promise<{
  fs: MemoryFs;
  healthy: string;
  store: SessionStore;
  session: SessionManager;
  dir: string;
}> {
  const { fs, healthy } = await healthyStore();
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit([user("first"), assistant("second")]);
  if (storedTitle) await session.setTitle({ text: "Stored", source: "user", messageIndices: [] });
  await session.close();
  return { fs, healthy, store, session, dir: session.getSessionPath() };
}

test("a committed line that is not JSON is a SessionFormatError at messages[N] for every reader and for compaction; a damaged range stays a CorruptSessionError", async () => {
  const { fs, healthy, store, session, dir } = await beside();
  const log = `${dir}/messages.jsonl`;
  const metaPath = `${dir}/meta.json`;
  // A generation after the first (so compaction has bytes to drop) with a blank line between its
  // two messages: only the line itself is wrong.
  const original = await recommit(fs, dir, [
    JSON.stringify(user("first")),
    "",
    JSON.stringify(assistant("second")),
  ]);
  const before = fs.snapshotTree?.();
  for (const readOnly of [true, false]) {
    await assert.rejects(
      new SessionStore({ fs, agentDir: AGENT }).open(dir, { readOnly }),
      (e) => assertFormatError(e, log, "messages[1]"),
    );
  }
  await assertListed(fs, healthy, session.id, log, "messages[1]");
  await assert.rejects(store.compact(dir), (e) => assertFormatError(e, log, "messages[1]"));
  assert.deepEqual(fs.snapshotTree?.(), before, "nothing was changed");
  // The same bytes under another checksum: the range is damaged, which comes first.
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(metaPath)));
  await fs.writeFile(
    metaPath,
    new TextEncoder().encode(JSON.stringify({ ...meta, generation: original.generation })),
  );
  await assert.rejects(store.compact(dir), CorruptSessionError);
});

const DAMAGED_FIRST: [string, (m: Message) => unknown, string][] = [
  ["content that is not text", (m) => ({ ...m, content: 5 }), "messages[0].content"],
  ["no timestamp", (m) => ({ ...m, timestamp: undefined }), "messages[0].timestamp"],
];

for (const storedTitle of [false, true]) {
  for (const [damage, change, path] of DAMAGED_FIRST) {
    test(
      `every listing reports a first user message with ${damage} before a later line that is not JSON (${
        storedTitle ? "a stored title" : "a fallback title"
      })`,
      async () => {
        const { fs, healthy, session, dir } = await beside(storedTitle);
        const log = `${dir}/messages.jsonl`;
        await recommit(fs, dir, [
          JSON.stringify(change(user("first"))),
          JSON.stringify(assistant("second")),
          JSON.stringify(user("third")),
          "{not json",
        ]);
        for (const readOnly of [true, false]) {
          await assert.rejects(
            new SessionStore({ fs, agentDir: AGENT }).open(dir, { readOnly }),
            (e) => assertFormatError(e, log, path),
          );
        }
        await assertListed(fs, healthy, session.id, log, path);
      },
    );
  }
}

/** `fs` whose handles answer every read with at most `most` bytes, wherever the file ends. */
function shortReads(fs: MemoryFs, most: number): FileSystem {
  return wrappedHandles(fs, (handle) =>
    new Proxy(handle, {
      get(target, prop) {
        if (prop === "read") {
          return async (position: number, length: number) =>
            (await target.read(position, length)).slice(0, Math.min(length, most));
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    }));
}

test("a read answered short before the end of the log is reported as such, where it stopped", async () => {
  // A filesystem that breaks its contract (reads short before the end of a file): the error says
  // what happened, not that the log is shorter than its committed range.
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const writer = new SessionStore({ fs, agentDir: AGENT });
  const session = await writer.create(CWD);
  await session.commit(conversation(3));
  await session.close();
  const log = `${session.getSessionPath()}/messages.jsonl`;
  const size = (await fs.stat(log)).size;
  const reader = new SessionStore({ fs: shortReads(fs, 100), agentDir: AGENT });
  await assert.rejects(reader.open(session.getSessionPath(), { readOnly: true }), (error) => {
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.file, log);
    assert.equal(error.offset, 100);
    assert.match(error.message, new RegExp(`stopped at byte 100, .* holds ${size} bytes`));
    return true;
  });
  // Compaction reads the committed range of a log holding two generations the same way.
  const edited = await writer.open(session.getSessionPath());
  const history = conversation(3);
  await edited.commit([{ ...history[0] as Message }, ...history.slice(1)]);
  await edited.close();
  const meta = JSON.parse(new TextDecoder().decode(
    await fs.readFile(`${session.getSessionPath()}/meta.json`),
  )) as { start: number };
  assert.ok(meta.start > 0, "a second generation");
  await assert.rejects(reader.compact(session.getSessionPath()), (error) => {
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.offset, meta.start + 100);
    assert.match(error.message, /stopped at byte/);
    return true;
  });
});

test("a log cut short after the open is reported by a page read as the open reports it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(6));
  await session.close();
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  try {
    const log = `${session.getSessionPath()}/messages.jsonl`;
    const handle = await fs.open(log, { write: true });
    await handle.truncate(20);
    await handle.close();
    await assert.rejects(reader.readHistory(), (error) => {
      assert.ok(error instanceof CorruptSessionError, String(error));
      assert.equal(error.file, log);
      assert.equal(error.offset, 20);
      assert.match(error.message, /shorter than its committed range \(20 bytes/);
      return true;
    });
  } finally {
    await reader.close();
  }
});
