// A fast listing given an index.json another writer may leave in a non-canonical form (parsed
// whole): a lagging one is used for its prefix, one whose rounds cannot be true is not believed,
// and damage in the lines it leads to is reported. Storage faults while listing (a recorded cwd,
// a staged copy, a staging directory, a leased meta.json) are reported once, or read again.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { CorruptSessionError, SessionFormatError } from "../src/loop/errors.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionInfo } from "../src/loop/discovery.ts";
import type { Message } from "../src/loop/records/mod.ts";
import type { RoundIndex } from "../src/loop/storage.ts";
import { assistant, conversation, failingWithEio, imageOnly, recommit, user } from "./_fixtures.ts";
import { hookedFs, recording } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const OTHER = "/work/other";
const GLOBAL = "/data/chats";
const decoder = new TextDecoder();
const encoder = new TextEncoder();

function storeOn(fs: FileSystem): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT, sessionDir: GLOBAL });
}

/** A store holding one closed session, saved by `saves` one commit after another. */
async function savedSession(
  saves: readonly Message[][],
): Promise<{ fs: MemoryFs; dir: string; indexes: RoundIndex[] }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const session = await storeOn(fs).create(CWD);
  const dir = session.getSessionPath();
  const indexes: RoundIndex[] = [];
  const history: Message[] = [];
  for (const save of saves) {
    history.push(...save);
    await session.commit(history);
    indexes.push(await readIndex(fs, dir));
  }
  await session.close();
  return { fs, dir, indexes };
}

/** Two saves of one round each: the first and second questions with their answers. */
function twoRounds(): Message[][] {
  return [
    [user("first question"), assistant("first answer")],
    [user("second question"), assistant("second answer")],
  ];
}

async function readIndex(fs: FileSystem, dir: string): Promise<RoundIndex> {
  return JSON.parse(decoder.decode(await fs.readFile(`${dir}/index.json`))) as RoundIndex;
}

/** Writes `index` as index.json in a valid form that is not the canonical one: pretty-printed. */
async function writeIndex(fs: FileSystem, dir: string, index: object): Promise<void> {
  await fs.writeFile(`${dir}/index.json`, encoder.encode(JSON.stringify(index, null, 2) + "\n"));
}

/** The one session a fresh store lists (fast, or full), with no failure. */
async function listedOne(fs: FileSystem, fast: boolean): Promise<SessionInfo> {
  const { sessions, failures } = await storeOn(fs).listDetailed(undefined, GLOBAL, { fast });
  assert.deepEqual(failures, []);
  assert.equal(sessions.length, 1);
  return sessions[0] as SessionInfo;
}

/** Lists (fast, or full) through `port`, a view of `fs`, checking that no file of `fs` changed. */
async function listedUnchanged(fs: MemoryFs, port: FileSystem, fast: boolean) {
  const before = fs.snapshotTree("/");
  const listed = await storeOn(port).listDetailed(undefined, GLOBAL, { fast });
  assert.deepEqual(fs.snapshotTree("/"), before);
  return listed;
}

/** Overwrites with "x" the byte of the log at `log` that `at` picks, its length unchanged. */
async function damageLog(fs: FileSystem, log: string, at: (bytes: Uint8Array) => number) {
  const bytes = await fs.readFile(log);
  const damaged = bytes.slice();
  damaged[at(bytes)] = "x".charCodeAt(0);
  await fs.writeFile(log, damaged);
}

/** Checks that a fast listing lists no session and reports the damage of the log at `log`. */
async function reportsCorruptLog(fs: MemoryFs, log: string): Promise<void> {
  const { sessions, failures } = await listedUnchanged(fs, fs, true);
  assert.deepEqual(sessions, []);
  assert.equal(failures.length, 1);
  const error = failures[0]?.error;
  assert.ok(error instanceof CorruptSessionError, String(error));
  assert.equal(error.file, log);
}

/** What a listing says of a session's history. */
function counts(info: SessionInfo): unknown {
  return {
    messageCount: info.messageCount,
    userMessageCount: info.userMessageCount,
    title: info.title,
  };
}

/** Lists fast, checks it against a full listing and that no file changed; returns the fast one. */
async function fastMatchesFull(fs: MemoryFs): Promise<SessionInfo> {
  const before = fs.snapshotTree("/");
  const fast = await listedOne(fs, true);
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.deepEqual(counts(fast), counts(await listedOne(fs, false)));
  return fast;
}

test("an index.json that lags behind is used for its prefix: only the unindexed tail is read", async () => {
  const long = user(`first question ${"x".repeat(20_000)}`);
  const { fs, dir, indexes } = await savedSession([
    [long, assistant("first answer")],
    [user("second question"), assistant("second answer")],
  ]);
  await writeIndex(fs, dir, indexes[0] as RoundIndex);
  const log = `${dir}/messages.jsonl`;
  const recorded = recording(fs);
  const { sessions, failures } = await storeOn(recorded.fs).listDetailed(undefined, GLOBAL, {
    fast: true,
  });
  assert.deepEqual(failures, []);
  const fast = sessions[0] as SessionInfo;
  assert.equal(fast.userMessageCount, 2);
  assert.equal(fast.messageCount, 4);
  assert.match(fast.title?.text ?? "", /^first question x/);
  // The long first message, which the index covers, is never read.
  const logBytes = recorded.reads.filter((r) => r.path === log).reduce((n, r) => n + r.bytes, 0);
  assert.ok(logBytes > 0 && logBytes < 20_000, `read ${logBytes} bytes of the log`);
  assert.deepEqual(counts(fast), counts(await listedOne(fs, false)));
});

test("a lagging index.json without a recorded title gives the title of its first round", async () => {
  const { fs, dir, indexes } = await savedSession(twoRounds());
  const { fallbackTitle: _recorded, ...lagging } = indexes[0] as RoundIndex;
  await writeIndex(fs, dir, lagging);
  const fast = await fastMatchesFull(fs);
  assert.equal(fast.title?.text, "first question");
  assert.equal(fast.userMessageCount, 2);
});

test("an index.json that lists no round for a history with user messages is not believed", async () => {
  const { fs, dir, indexes } = await savedSession([conversation(2)]);
  const index = indexes[0] as RoundIndex;
  await writeIndex(fs, dir, { ...index, roundCount: 0, fallbackTitle: null, rounds: [] });
  const fast = await fastMatchesFull(fs);
  assert.equal(fast.userMessageCount, 2);
  assert.equal(fast.title?.text, "r0 question ✓");
});

test("a canonical index.json whose head counts cannot be true is not believed: its rounds or the log give the count", async () => {
  const { fs: base, dir } = await savedSession([conversation(2)]);
  const path = `${dir}/index.json`;
  const text = decoder.decode(await base.readFile(path));
  const messages = Number(/"messageCount":(\d+),"roundCount":2,/.exec(text)?.[1]);
  assert.ok(messages > 2, text);
  // In the canonical form the listing reads by its head: more rounds than messages, no round for
  // a history holding user messages, and (believed within those bounds, by design) one round
  // fewer than the index lists.
  for (const [roundCount, expected] of [[messages + 1, 2], [0, 2], [1, 1]]) {
    const fs = base.clone();
    const lying = text.replace(/"roundCount":2,/, `"roundCount":${roundCount},`);
    await fs.writeFile(path, encoder.encode(lying));
    const fast = await listedOne(fs, true);
    assert.equal(fast.userMessageCount, expected, `roundCount ${roundCount}`);
    assert.equal(fast.messageCount, messages);
  }
});

test("an index.json whose rounds sit closer together than lines can be is not believed", async () => {
  const { fs, dir, indexes } = await savedSession([conversation(2)]);
  const index = indexes[0] as RoundIndex;
  // A round at every message, one byte apart: strictly increasing, inside the range, impossible.
  const rounds = Array.from({ length: index.messageCount }, (_, i) => ({
    messageIndex: i,
    byteOffset: i,
  }));
  await writeIndex(fs, dir, { ...index, roundCount: rounds.length, rounds });
  const fast = await fastMatchesFull(fs);
  assert.equal(fast.userMessageCount, 2);
});

test("a lagging index.json whose rounds are out of order or outside its range is not believed", async () => {
  const { fs, dir, indexes } = await savedSession(twoRounds());
  const lagging = indexes[0] as RoundIndex;
  const first = lagging.rounds[0] as { messageIndex: number; byteOffset: number };
  // Two rounds claimed for the one user message it covers: the first listed twice, or a round of
  // a message past the ones it covers.
  for (const extra of [first, { messageIndex: lagging.messageCount, byteOffset: 10 }]) {
    const rounds = [first, extra];
    await writeIndex(fs, dir, { ...lagging, roundCount: rounds.length, rounds });
    const fast = await fastMatchesFull(fs);
    assert.equal(fast.userMessageCount, 2);
  }
});

test("an index.json whose rounds point at assistant lines does not give the title", async () => {
  const { fs, dir, indexes } = await savedSession([conversation(2)]);
  const index = indexes[0] as RoundIndex;
  const log = decoder.decode(await fs.readFile(`${dir}/messages.jsonl`));
  // The line starts of messages 1 and 3 (assistant replies), as rounds, with no recorded title.
  const starts = [0];
  for (let at = log.indexOf("\n"); at >= 0 && at < log.length - 1; at = log.indexOf("\n", at + 1)) {
    starts.push(encoder.encode(log.slice(0, at + 1)).length);
  }
  const rounds = [1, 3].map((i) => ({ messageIndex: i, byteOffset: starts[i] as number }));
  const { fallbackTitle: _recorded, ...rest } = index;
  await writeIndex(fs, dir, { ...rest, roundCount: rounds.length, rounds });
  const fast = await fastMatchesFull(fs);
  assert.equal(fast.title?.text, "r0 question ✓");
  assert.deepEqual(fast.title?.messageIndices, [0]);
});

test("an assistant line that mentions user in the unindexed tail is not counted as a user message", async () => {
  const { fs, dir, indexes } = await savedSession([
    [user("first question"), assistant("first answer")],
    [user("second question"), assistant("user"), user("third"), assistant('"user"')],
  ]);
  await writeIndex(fs, dir, indexes[0] as RoundIndex);
  const fast = await fastMatchesFull(fs);
  assert.equal(fast.userMessageCount, 3);
});

test("damage in the unindexed tail is reported by a fast listing, naming the log", async () => {
  const { fs, dir, indexes } = await savedSession(twoRounds());
  await writeIndex(fs, dir, indexes[0] as RoundIndex);
  const log = `${dir}/messages.jsonl`;
  // One byte of the second user line's JSON damaged (its closing brace), its length unchanged.
  await damageLog(fs, log, (bytes) => {
    const text = decoder.decode(bytes);
    const line = text.indexOf('{"role":"user","content":"second question"');
    return text.indexOf("\n", line) - 1;
  });
  await reportsCorruptLog(fs, log);
});

test("a listing for a cwd reports a session whose recorded cwd fails to resolve with an I/O error", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(OTHER, { recursive: true });
  const store = storeOn(fs);
  for (const cwd of [CWD, OTHER]) {
    const session = await store.create(cwd);
    await session.commit([user(`in ${cwd}`)]);
    await session.close();
  }
  // Resolving the other session's recorded cwd fails as a failing disk does: whether it is this
  // project's cannot be told, so it is reported, never silently left out.
  const failing = failingWithEio(fs, (method, path) => method === "realPath" && path === OTHER);
  const { sessions, failures } = await storeOn(failing).listDetailed(CWD, GLOBAL, { fast: true });
  assert.deepEqual(sessions.map((s) => s.cwd), [CWD]);
  assert.equal(failures.length, 1);
  assert.ok(failures[0]?.error instanceof FsIoError, String(failures[0]?.error));
  assert.equal(failures[0]?.error.path, OTHER);
});

test("a session staged by an interrupted delete whose copy cannot be looked at is reported", async () => {
  const { fs, dir } = await savedSession([[user("staged away")]]);
  const id = dir.slice(GLOBAL.length + 1);
  // A delete that stopped after moving the session into its staging directory, before its commit.
  const staging = `${GLOBAL}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(staging);
  await fs.rename(dir, `${staging}/${id}`);
  const intent = { operation: "delete", ids: [id], entries: [id], archived: [], membersBefore: [] };
  await fs.writeFile(`${staging}/intent.json`, encoder.encode(JSON.stringify(intent)));
  assert.deepEqual((await listedOne(fs, true)).id, id);
  const meta = `${staging}/${id}/meta.json`;
  const failing = failingWithEio(fs, (method, path) => method === "lstat" && path === meta);
  const { sessions, failures } = await listedUnchanged(fs, failing, true);
  assert.deepEqual(sessions, []);
  assert.equal(failures.length, 1);
  assert.equal(failures[0]?.id, id);
  assert.ok(failures[0]?.error instanceof FsIoError, String(failures[0]?.error));
  assert.equal(failures[0]?.path, meta);
});

test("a meta.json busy under another process's lease is read again by the listing, not reported", async () => {
  const { fs, dir } = await savedSession([conversation(1)]);
  const meta = `${dir}/meta.json`;
  let busy = 0;
  // The first no-follow read finds the file leased (EAGAIN), as a non-blocking open does.
  const leased = hookedFs(fs, {
    before(method, args) {
      if (method === "readFileNoFollow" && args[0] === meta && busy++ === 0) {
        throw new FsIoError("EAGAIN", method, meta, "Resource temporarily unavailable");
      }
    },
  });
  const { sessions, failures } = await storeOn(leased).listDetailed(undefined, GLOBAL, {
    fast: true,
  });
  assert.ok(busy >= 2, "meta.json was read again");
  assert.deepEqual(failures, []);
  assert.deepEqual(sessions.map((s) => counts(s)), [counts(await listedOne(fs, false))]);
});

test("a delete staging directory that cannot be read is reported once, beside the sessions", async () => {
  const { fs, dir } = await savedSession([conversation(1)]);
  const id = dir.slice(GLOBAL.length + 1);
  // archive.json exists (membership is read) but does not hold the session: the listing looks at
  // the staged deletes twice, to learn what a rollback would restore.
  await fs.writeFile(`${GLOBAL}/archive.json`, encoder.encode("[]\n"));
  const staging = `${GLOBAL}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(staging);
  const failing = failingWithEio(fs, (_method, path) => path.startsWith(staging));
  for (const fast of [true, false]) {
    const { sessions, failures } = await listedUnchanged(fs, failing, fast);
    assert.deepEqual(sessions.map((s) => s.id), [id]);
    assert.equal(failures.length, 1, `fast: ${fast}`);
    assert.equal(failures[0]?.id, undefined);
    assert.ok(failures[0]?.error instanceof FsIoError, String(failures[0]?.error));
    assert.ok(failures[0]?.path.startsWith(staging), failures[0]?.path);
  }
});

test("a session whose compaction staging directory cannot be looked at is reported, never skipped", async () => {
  const { fs, dir } = await savedSession([conversation(1)]);
  const id = dir.slice(GLOBAL.length + 1);
  // A compaction stopped between its renames: the session's directory is its previous copy in
  // the staging directory, and what is in place holds no meta.json (nor index.json) yet.
  const staging = `${GLOBAL}/.staging-${id}-0badc0de`;
  await fs.mkdir(staging);
  await fs.rename(dir, `${staging}/previous`);
  await fs.mkdir(dir);
  assert.equal((await listedOne(fs, true)).id, id);
  const previous = `${staging}/previous`;
  const failing = failingWithEio(fs, (_method, path) => path.startsWith(previous));
  for (const fast of [true, false]) {
    const { sessions, failures } = await listedUnchanged(fs, failing, fast);
    assert.deepEqual(sessions, []);
    assert.equal(failures.length, 1, `fast: ${fast}`);
    assert.equal(failures[0]?.id, id);
    assert.ok(failures[0]?.error instanceof FsIoError, String(failures[0]?.error));
    // Listed at the session's own path, with the error naming what could not be looked at.
    assert.equal(failures[0]?.path, `${dir}/meta.json`);
    assert.equal(failures[0]?.error.path, previous);
  }
});

test("damage in a user line an index.json points at is reported by a fast listing, naming the log", async () => {
  const { fs, dir, indexes } = await savedSession([conversation(2)]);
  const { fallbackTitle: _recorded, ...index } = indexes[0] as RoundIndex;
  await writeIndex(fs, dir, index);
  const log = `${dir}/messages.jsonl`;
  // The first user line's closing brace damaged, its length unchanged: no title can be read there.
  await damageLog(fs, log, (bytes) => bytes.indexOf(10) - 1);
  await reportsCorruptLog(fs, log);
});

test("a user message with malformed text in the unindexed tail is reported when a title needs it", async () => {
  const { fs, dir } = await savedSession([conversation(1)]);
  // A generation another writer committed (its checksum matches): an image-only first question,
  // so the title must come from a later one, whose text block holds no string. An index.json of
  // its first two lines lags behind it, recording that they give no title.
  const lines = [
    JSON.stringify(imageOnly()),
    JSON.stringify(assistant("first answer")),
    JSON.stringify({ role: "user", content: [{ type: "text", text: 42 }], timestamp: 9 }),
  ];
  await recommit(fs, dir, lines);
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  const firstTwo = encoder.encode(lines.slice(0, 2).map((line) => `${line}\n`).join(""));
  await writeIndex(fs, dir, {
    format: "loop-session-index",
    version: 1,
    generation: "0".repeat(64),
    start: meta.start,
    bytes: firstTwo.length,
    messageCount: 2,
    fallbackTitle: null,
    rounds: [{ messageIndex: 0, byteOffset: 0 }],
  });
  const before = fs.snapshotTree("/");
  for (const fast of [true, false]) {
    const { sessions, failures } = await storeOn(fs).listDetailed(undefined, GLOBAL, { fast });
    assert.deepEqual(sessions, [], `fast: ${fast}`);
    assert.equal(failures.length, 1);
    const error = failures[0]?.error;
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, `${dir}/messages.jsonl`);
    assert.equal(error.path, "messages[2].content[0].text");
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});
