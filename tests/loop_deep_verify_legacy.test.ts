// The message nesting limit (`MAX_MESSAGE_NESTING`) where the open is not the reader: verification
// and salvage of a session directory, and the legacy version-2 reader (its listing, plain reads and
// migration). Each judges a line nested past the limit as an open does, the same on Deno, Node and
// in memory, and never fails with an untyped error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256, sha256Hex } from "../src/port/sha256.ts";
import { SessionStore } from "../src/loop/store.ts";
import { salvageSession, verifySession } from "../src/loop/verify.ts";
import { readLegacySession } from "../src/loop/legacy.ts";
import { runSessions } from "../src/cli/sessions.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { MAX_MESSAGE_NESTING } from "../src/loop/records/_validation.ts";
import { memoryIo } from "./_cli_io.ts";
import { assistant, legacySessionBytes, user } from "./_fixtures.ts";
import { deepResultLine, tooDeep } from "./_deep.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const LEGACY_ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Depths past the limit: 1,001 levels, 4,999 (past JSON.stringify on Node, not on Deno) and
 * 20,000.
 */
const TOO_DEEP = [MAX_MESSAGE_NESTING, 4999, 20_000];

async function setup(): Promise<{ fs: MemoryFs; store: SessionStore }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  return { fs, store };
}

/** The first two messages of the tests' history: a user, an assistant calling a tool. */
const HEAD: Message[] = [user("parse this"), assistant("calling", [{ id: "c1", name: "ast" }])];

/**
 * A saved session whose log holds HEAD and a tool result `levels` deep, written by hand (as
 * Deno's JSON.stringify writes it), with a matching meta.json; and the offset of that line.
 */
async function handWritten(levels: number): Promise<{
  fs: MemoryFs;
  store: SessionStore;
  dir: string;
  offset: number;
}> {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(HEAD.slice(0, 1));
  await session.close();
  const dir = session.getSessionPath();
  const head = HEAD.map((message) => JSON.stringify(message) + "\n").join("");
  const bytes = encoder.encode(head + deepResultLine(levels) + "\n");
  await fs.writeFile(`${dir}/messages.jsonl`, bytes);
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  Object.assign(meta, { start: 0, bytes: bytes.length, messageCount: 3 });
  meta.generation = sha256Hex(bytes);
  await fs.writeFile(`${dir}/meta.json`, encoder.encode(JSON.stringify(meta) + "\n"));
  return { fs, store, dir, offset: encoder.encode(head).length };
}

test("verifySession reports a log line nested deeper than MAX_MESSAGE_NESTING as the line finding open refuses, reading only", async () => {
  for (const levels of TOO_DEEP) {
    const { fs, store, dir, offset } = await handWritten(levels);
    const file = `${dir}/messages.jsonl`;
    const before = fs.snapshotTree();
    let refused: unknown;
    await assert.rejects(store.open(dir, { readOnly: true }), (error) => {
      refused = error;
      return tooDeep(file)(error);
    });
    const report = await verifySession(fs, dir, { sha256: portableSha256 });
    assert.equal(report.ok, false, `${levels}`);
    assert.equal(report.validMessages, 2);
    const errors = report.findings.filter((finding) => finding.severity === "error");
    assert.equal(errors.length, 1, JSON.stringify(errors).slice(0, 500));
    const [finding] = errors;
    assert.equal(finding?.kind, "line");
    assert.equal(finding?.file, file);
    assert.equal(finding?.messageIndex, 2);
    assert.equal(finding?.offset, offset);
    // The open's own words, at the message.
    assert.equal(finding?.message, `message #2 is not valid: ${(refused as Error).message}`);
    assert.deepEqual(fs.snapshotTree(), before);
  }
});

test("verifySession passes a log line at MAX_MESSAGE_NESTING levels, which open reads", async () => {
  const { fs, store, dir } = await handWritten(MAX_MESSAGE_NESTING - 1);
  const report = await verifySession(fs, dir, { sha256: portableSha256 });
  assert.deepEqual(report.findings.filter((finding) => finding.severity === "error"), []);
  assert.equal(report.ok, true);
  assert.equal(report.validMessages, 3);
  const reopened = await store.open(dir, { readOnly: true });
  assert.equal(reopened.messages.length, 3);
  await reopened.close();
});

test("a salvage leaves out a log line nested deeper than MAX_MESSAGE_NESTING as it leaves out other bad lines, on every runtime, never with a raw RangeError", async () => {
  for (const levels of TOO_DEEP) {
    const { fs, store, dir } = await handWritten(levels);
    const before = fs.snapshotTree(dir);
    const collection = `${AGENT}/salvaged`;
    for (
      const salvage of [
        () => salvageSession(fs, dir, { sha256: portableSha256, toCollection: collection }),
        () => store.salvage(dir, collection),
      ]
    ) {
      const result = await salvage();
      // The user message is kept; the call the bad line answered is left out with it.
      assert.equal(result.kept, 1, `${levels}`);
      assert.equal(result.dropped, 2);
      const salvaged = await store.open(result.dir, { readOnly: true });
      assert.deepEqual(salvaged.messages, HEAD.slice(0, 1));
      await salvaged.close();
      assert.equal((await verifySession(fs, result.dir, { sha256: portableSha256 })).ok, true);
    }
    assert.deepEqual(fs.snapshotTree(dir), before);
  }
});

/** A collection holding the legacy file LEGACY_ID.jsonl: HEAD and a tool result `levels` deep. */
async function legacyWritten(levels: number): Promise<{
  fs: MemoryFs;
  store: SessionStore;
  collection: string;
  file: string;
}> {
  const { fs, store } = await setup();
  const collection = await store.collectionFor(CWD);
  await fs.mkdir(collection, { recursive: true });
  const file = `${collection}/${LEGACY_ID}.jsonl`;
  const text = decoder.decode(legacySessionBytes(LEGACY_ID, CWD, HEAD)) + deepResultLine(levels) +
    "\n";
  await fs.writeFile(file, encoder.encode(text));
  return { fs, store, collection, file };
}

test("a legacy line nested deeper than MAX_MESSAGE_NESTING is refused by open, migration and a full listing with the error naming the legacy file, before anything is written", async () => {
  for (const levels of TOO_DEEP) {
    const { fs, store, collection, file } = await legacyWritten(levels);
    const before = fs.snapshotTree();
    for (const readOnly of [true, false]) {
      await assert.rejects(store.open(file, { readOnly }), tooDeep(file), `${levels}`);
      assert.deepEqual(fs.snapshotTree(), before);
    }
    await assert.rejects(readLegacySession(fs, file), tooDeep(file));
    const listing = await store.listDetailed(CWD);
    assert.deepEqual(listing.sessions, []);
    assert.equal(listing.failures.length, 1);
    tooDeep(file)(listing.failures[0]?.error);
    // `sessions migrate`, dry and real: a failure, nothing written.
    for (const args of [["migrate", file, "--dry-run"], ["migrate", file], ["migrate", "--all"]]) {
      const { io, out } = memoryIo(fs, CWD, Date.now());
      assert.equal(await runSessions(io, args, AGENT), 1, args.join(" "));
      assert.match(out(), /nested deeper than 1000 levels/);
    }
    assert.deepEqual(fs.snapshotTree(), before);
    assert.deepEqual((await fs.readDir(collection)).map((entry) => entry.name), [
      `${LEGACY_ID}.jsonl`,
    ]);
  }
});

test("a legacy line at MAX_MESSAGE_NESTING levels lists, opens and migrates", async () => {
  const { fs, store, collection, file } = await legacyWritten(MAX_MESSAGE_NESTING - 1);
  assert.equal((await readLegacySession(fs, file)).messageCount, 3);
  assert.equal((await store.listDetailed(CWD)).failures.length, 0);
  const session = await store.open(file);
  assert.equal(session.messages.length, 3);
  await session.commit([...session.messages, assistant("done")]);
  await session.close();
  assert.equal(session.getSessionPath(), `${collection}/${LEGACY_ID}`);
  const report = await verifySession(fs, session.getSessionPath(), { sha256: portableSha256 });
  assert.equal(report.ok, true);
});
