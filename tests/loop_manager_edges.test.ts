// Edges of a session manager: the metadata arrays of a save kept pending after a fault, page reads
// of a closed manager or with a revision the history has not got, a writer's first page read after
// its directory was removed, and the modes a save under ordered durability tightens.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import {
  SessionError,
  SessionFormatError,
  SessionNotFoundError,
  StaleRevisionError,
} from "../src/loop/errors.ts";
import type {
  CompactionCheckpoint,
  Message,
  SystemPromptCheckpoint,
} from "../src/loop/records/mod.ts";
import { NotFound } from "../src/port/errors.ts";
import { conversation, memoryStoreWithSession, rewriteIndex, user } from "./_fixtures.ts";
import type { RoundIndex } from "../src/loop/storage.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

async function setup(): Promise<{ fs: MemoryFs; store: SessionStore }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  return { fs, store: new SessionStore({ fs, agentDir: AGENT }) };
}

const compaction = (history: readonly Message[]): CompactionCheckpoint => ({
  id: "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
  firstKeptMessageIndex: history.findLastIndex((message) => message.role === "user"),
  historyMessageCount: history.length,
  summary: "the story so far",
  timestamp: 5,
  provider: "synthetic",
  model: "model-1",
  usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2 },
});

test("a save kept pending after a failed fsync shows its compaction and system prompt checkpoints until flush() writes them", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const next = [...history, user("after the summary")];
  const compactions = [compaction(next)];
  const checkpoints: SystemPromptCheckpoint[] = [
    { messageCount: 1, timestamp: 3, sections: { preamble: "be brief" } },
  ];
  fs.failAt(1, { ops: ["sync"], persistent: true });
  await assert.rejects(
    session.commit(next, undefined, undefined, {
      compactions,
      systemPromptCheckpoints: checkpoints,
    }),
  );
  fs.clearFaults();
  assert.equal(session.hasPendingSave, true);
  // The pending save's arrays, not the committed state's (which has none).
  assert.deepEqual(session.getCompactions(), compactions);
  assert.deepEqual(session.getSystemPromptCheckpoints(), checkpoints);
  // Copies: changing them changes nothing the manager holds.
  session.getCompactions().pop();
  assert.deepEqual(session.getCompactions(), compactions);
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.messages, next);
  assert.deepEqual(reopened.getCompactions(), compactions);
  assert.deepEqual(reopened.getSystemPromptCheckpoints(), checkpoints);
  await reopened.close();
});

test("a closed manager refuses a page read with a SessionError naming meta.json", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  await assert.rejects(session.readHistory(), (error: unknown) => {
    assert.ok(error instanceof SessionError, String(error));
    assert.equal(error.file, session.getSessionFile());
    assert.match(error.message, /closed/);
    return true;
  });
});

test("a page read naming a revision is refused as stale while the history is not committed", async () => {
  const { fs, store } = await setup();
  // A draft: nothing saved yet, so no revision can match.
  const draft = await store.create(CWD);
  await assert.rejects(draft.readHistory(undefined, "f".repeat(64)), (error: unknown) => {
    assert.ok(error instanceof StaleRevisionError, String(error));
    assert.equal(error.expected, "f".repeat(64));
    assert.equal(error.actual, "");
    assert.equal(error.file, draft.getSessionFile());
    return true;
  });
  // The empty revision (what a page of a draft carries) still reads.
  assert.deepEqual((await draft.readHistory(undefined, "")).messages, []);
  // A save kept pending: the page shows it, and no committed revision is current.
  const history = conversation(2);
  await draft.commit(history);
  const revision = (await draft.readHistory()).revision;
  fs.failAt(1, { ops: ["sync"], persistent: true });
  await assert.rejects(draft.commit([...history, user("pending")]));
  fs.clearFaults();
  assert.equal(draft.hasPendingSave, true);
  await assert.rejects(draft.readHistory(undefined, revision), StaleRevisionError);
  await draft.flush();
  await draft.close();
});

test("a writer's first page read whose directory is moved away just before the log's open says the session is gone", async () => {
  const { fs, session: dir } = await memoryStoreWithSession(AGENT, CWD, 2);
  const log = `${dir}/messages.jsonl`;
  let armed = false;
  let moved = false;
  // After the page read found this session's meta.json in place, before it opens the log.
  const racing = hookedFs(fs, {
    async before(method, args) {
      const opening = method === "open" || method === "openNoFollow";
      if (opening && args[0] === log && armed && !moved) {
        moved = true;
        await fs.rename(dir, "/moved-away");
      }
    },
  });
  const writer = await new SessionStore({ fs: racing, agentDir: AGENT }).open(dir);
  armed = true;
  await assert.rejects(writer.readHistory(), (error: unknown) => {
    // Gone as a whole, not a log lost beside its metadata.
    assert.ok(error instanceof SessionNotFoundError, String(error));
    assert.equal(error.file, `${dir}/meta.json`);
    assert.ok(error.cause instanceof NotFound);
    return true;
  });
  assert.ok(moved);
  const before = fs.snapshotTree("/");
  await writer.close().catch(() => undefined);
  // Nothing was written where the session was, nor in the moved copy.
  assert.deepEqual(fs.snapshotTree("/"), before);
  await assert.rejects(fs.lstat(dir), NotFound);
});

test("under ordered durability a save tightens wide file modes to 0600 without a single fsync", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT, durability: "ordered" });
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  await session.close();
  const dir = session.getSessionPath();
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.chmod(`${dir}/${name}`, 0o644);
  }
  const writer = await store.open(dir);
  fs.resetCounter();
  const next = [...history, user("more")];
  await writer.commit(next);
  await writer.readHistory(); // a writer's first page read republishes a stale index.json
  await writer.close();
  const synced = fs.operationLog.filter((entry) => entry.op === "sync" || entry.op === "syncDir");
  assert.deepEqual(synced, []);
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    assert.equal((await fs.stat(`${dir}/${name}`)).mode, 0o600, name);
  }
  const reader = await store.open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, next);
  await reader.close();
});

test("a save whose meta.json temp file vanishes before its rename fails as the port reports it and stays pending", async () => {
  const { fs } = await setup();
  let armed = false;
  let removed: string | undefined;
  // Another program removes the temp file between its write and the rename that publishes it.
  const racing = hookedFs(fs, {
    async before(method, args) {
      const [from, to] = args as [string, string];
      if (method === "rename" && armed && removed === undefined && to.endsWith("/meta.json")) {
        removed = from;
        await fs.remove(from);
      }
    },
  });
  const store = new SessionStore({ fs: racing, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  armed = true;
  const next = [...history, user("after the race")];
  await assert.rejects(session.commit(next), (error: unknown) => {
    // The session directory is still there: not reported as removed or moved away.
    assert.ok(error instanceof NotFound, String(error));
    assert.ok(!(error instanceof SessionNotFoundError));
    assert.equal((error as NotFound).path, removed);
    return true;
  });
  assert.equal(session.hasPendingSave, true);
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  await session.close();
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reader.messages, next);
  await reader.close();
});

/**
 * A closed session of 4 rounds whose index.json `change` rewrites, then a writer's first page read
 * of it, checked to be the history's latest rounds: the writer, and the index's path and bytes as
 * the session published them.
 */
async function pageReadOverIndex(change: (index: RoundIndex, history: Message[]) => RoundIndex) {
  const { fs, store, session: dir, history } = await memoryStoreWithSession(AGENT, CWD, 4);
  const indexPath = `${dir}/index.json`;
  const whole = await fs.readFile(indexPath);
  await rewriteIndex(fs, dir, (index) => change(index, history));
  const writer = await store.open(dir);
  const page = await writer.readHistory();
  assert.deepEqual(page.messages, history.slice(page.start));
  return { fs, writer, indexPath, whole };
}

test("a writer's page read rebuilds a lagging index.json that leaves out a round inside what it covers", async () => {
  // The index of the first two rounds only (a prefix, as a crash before its update leaves it),
  // but without its second round. The page holds the latest three rounds, read from the
  // committed offsets.
  const { fs, writer, indexPath, whole } = await pageReadOverIndex((index) => {
    const third = index.rounds[2]!;
    return {
      ...index,
      messageCount: third.messageIndex,
      bytes: third.byteOffset,
      rounds: [index.rounds[0]!],
    };
  });
  // At once an index built from scratch, which listings meanwhile read (not one that misses a
  // round).
  assert.deepEqual(await fs.readFile(indexPath), whole);
  await writer.close();
  assert.deepEqual(await fs.readFile(indexPath), whole);
});

test("metadata JSON would write as something else (a Date, a Map, a Set, a boxed number) is refused naming the field, writing nothing", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const file = session.getSessionFile();
  const saves: [string, (extra: unknown) => Promise<void>][] = [
    [
      "header.title.extra",
      (extra) =>
        session.setTitle({ text: "T", source: "user", messageIndices: [0], extra } as never),
    ],
    [
      "header.runtimeContexts[0].extra",
      (extra) =>
        session.commit(history, [{ userTurn: 0, content: "c", timestamp: 1, extra }] as never),
    ],
    [
      "header.systemPromptCheckpoints[0].extra",
      (extra) =>
        session.commit(history, undefined, undefined, {
          systemPromptCheckpoints: [{ messageCount: 1, timestamp: 1, sections: { a: "x" }, extra }],
        } as never),
    ],
  ];
  const header = session.getHeader();
  const before = fs.snapshotTree("/");
  for (const [path, save] of saves) {
    // JSON writes these as a string, `{}`, `{}` and a number: what a reopen would read differs
    // from what the manager would hold, and a Map's or a Set's entries would be lost.
    for (const value of [new Date(0), new Map([["k", 1]]), new Set([1]), Object(5)]) {
      await assert.rejects(save(value), (error: unknown) => {
        assert.ok(error instanceof SessionFormatError, `${path}: ${error}`);
        assert.equal(error.file, file);
        assert.equal(error.path, path);
        return true;
      });
      assert.equal(session.hasPendingSave, false, path);
    }
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.deepEqual(session.getHeader(), header);
  // Plain data is taken as it is written.
  const title = { text: "T", source: "user", messageIndices: [0], extra: { k: [1] } };
  await session.setTitle(title as never);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.getHeader().title, session.getHeader().title);
  await reopened.close();
});

test("a writer's page read rebuilds an index.json of the whole history that lists a round more", async () => {
  // Every count right, and one more round, at the last message (an assistant's).
  const { fs, writer, indexPath, whole } = await pageReadOverIndex((index, history) => ({
    ...index,
    rounds: [...index.rounds, { messageIndex: history.length - 1, byteOffset: index.bytes - 1 }],
  }));
  // Listings trust the index's rounds: it is replaced at once by one built from scratch.
  assert.deepEqual(await fs.readFile(indexPath), whole);
  await writer.close();
});

test("a title that is a BigInt is refused naming header.title, writing nothing", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  const before = fs.snapshotTree("/");
  await assert.rejects(session.setTitle(1n as never), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, session.getSessionFile());
    assert.equal(error.path, "header.title");
    assert.match(error.message, /BigInt cannot be written as JSON/);
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.equal(session.hasPendingSave, false);
  await session.close();
});
