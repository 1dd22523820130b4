// Guards of src/loop/verify.ts that only damaged sessions reach: a committed range ending inside a
// line, an empty range past the end of the log, a recorded cwd that is a file, a session directory
// that is a link, a meta.json counting fewer lines than its range holds, and index.json files
// that describe another range or a prefix they do not fit. Each test pins the finding verify
// reports (or what salvage does) for one of them.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionFormatError } from "../src/loop/errors.ts";
import { salvageSession, type VerifyReport, verifySession } from "../src/loop/verify.ts";
import { encodeRoundIndex, parseRoundIndexText, type RoundIndex } from "../src/loop/storage.ts";
import { savedThreeRounds } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const options = { sha256: portableSha256 };
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function sha256Hex(bytes: Uint8Array): string {
  return portableSha256().update(bytes).digestHex();
}

/**
 * A closed session of 3 rounds (8 messages: users at 0, 2 and 6), its index.json published, and
 * the byte offset of each line of its log (plus the end of the last).
 */
async function saved() {
  const base = await savedThreeRounds(AGENT, CWD);
  const { fs, logPath, indexPath } = base;
  const log = await fs.readFile(logPath);
  const offsets = [0];
  log.forEach((byte, i) => {
    if (byte === 10) offsets.push(i + 1);
  });
  const index = parseRoundIndexText(decoder.decode(await fs.readFile(indexPath)));
  assert.ok(index !== undefined);
  assert.deepEqual(index.rounds.map((r) => r.messageIndex), [0, 2, 6]);
  return { ...base, log, offsets, index };
}

/** Rewrites meta.json with `fields` changed (compact JSON, as another writer might). */
async function changeMeta(fs: MemoryFs, metaPath: string, fields: Record<string, unknown>) {
  const meta = JSON.parse(decoder.decode(await fs.readFile(metaPath)));
  await fs.writeFile(metaPath, encoder.encode(JSON.stringify({ ...meta, ...fields }) + "\n"));
}

/** The findings of `report` as [severity, kind, file]. */
function kinds(report: VerifyReport): [string, string, string][] {
  return report.findings.map((f) => [f.severity, f.kind, f.file]);
}

test("verifySession reports a committed range that ends inside a line as a line finding", async () => {
  const { fs, dir, history, log, metaPath, logPath } = await saved();
  // The whole history, then the start of another message with no newline, all committed.
  const bytes = new Uint8Array([...log, ...encoder.encode('{"role":"user"')]);
  await fs.writeFile(logPath, bytes);
  await changeMeta(fs, metaPath, { bytes: bytes.length, generation: sha256Hex(bytes) });
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, false);
  assert.deepEqual(kinds(report), [["error", "line", logPath]]);
  assert.equal(report.findings[0]?.offset, log.length);
  assert.equal(report.findings[0]?.messageIndex, history.length);
  assert.match(report.findings[0]?.message ?? "", /no final newline/);
  assert.equal(report.validMessages, history.length);
});

test("verifySession reports an empty committed range starting one byte past the end of the log as short-log", async () => {
  const { fs, dir, log, metaPath, logPath } = await saved();
  await changeMeta(fs, metaPath, {
    generation: sha256Hex(new Uint8Array()),
    start: log.length + 1,
    bytes: 0,
    messageCount: 0,
  });
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, false);
  assert.deepEqual(report.findings.filter((f) => f.severity === "error").map((f) => f.kind), [
    "short-log",
  ]);
  const [short] = report.findings;
  assert.equal(short?.file, logPath);
  assert.equal(short?.offset, log.length);
  assert.match(short?.message ?? "", new RegExp(`committed range ends at ${log.length + 1}`));
});

test("verifySession reports a recorded cwd that is now a regular file as a cwd finding", async () => {
  const { fs, dir, metaPath } = await saved();
  await fs.remove(CWD, { recursive: true });
  await fs.writeFile(CWD, encoder.encode("a file now\n"));
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, false);
  assert.deepEqual(kinds(report), [["error", "cwd", metaPath]]);
  assert.match(report.findings[0]?.message ?? "", /cwd is not a directory/);
});

test("a session directory that is a link is a file finding to verify and refused by salvage, which writes nothing", async () => {
  const { fs, dir } = await saved();
  // A copy elsewhere, linked at the session's own path (its name is the session's id).
  const copy = "/elsewhere/copy";
  await fs.mkdir(copy, { recursive: true });
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.writeFile(`${copy}/${name}`, await fs.readFile(`${dir}/${name}`));
  }
  await fs.remove(dir, { recursive: true });
  await fs.symlink(copy, dir);
  assert.equal((await verifySession(fs, copy, options)).ok, true, "the copy itself is healthy");
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, false);
  assert.deepEqual(kinds(report), [["error", "file", dir]]);
  assert.equal(report.validMessages, 0);
  await fs.mkdir("/rescue", { recursive: true });
  const before = fs.snapshotTree();
  await assert.rejects(
    salvageSession(fs, dir, { ...options, toCollection: "/rescue" }),
    (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, String(error));
      assert.equal(error.file, dir);
      return true;
    },
  );
  assert.deepEqual(await fs.readDir("/rescue"), []);
  assert.deepEqual(fs.snapshotTree(), before, "salvage wrote nothing");
});

test("salvage of a range holding more lines than meta.json counts keeps them all and drops none", async () => {
  const { fs, store, dir, history, metaPath } = await saved();
  await changeMeta(fs, metaPath, { messageCount: history.length - 2 });
  const result = await salvageSession(fs, dir, { ...options, toCollection: "/rescue" });
  assert.equal(result.kept, history.length);
  assert.equal(result.dropped, 0);
  const rescued = await store.open(result.dir, { readOnly: true });
  assert.deepEqual(rescued.messages, history);
  await rescued.close();
});

test("verifySession warns about an index of another generation with the committed counts", async () => {
  const { fs, dir, index, indexPath } = await saved();
  await fs.writeFile(indexPath, encodeRoundIndex({ ...index, generation: "ab".repeat(32) }));
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, true);
  assert.deepEqual(kinds(report), [["warning", "index", indexPath]]);
  assert.match(report.findings[0]?.message ?? "", /does not describe the committed range/);
});

test("verifySession warns about a prefix index that ends inside a line or lists a round past its messages", async () => {
  const { fs, dir, log, offsets, indexPath } = await saved();
  // The first 6 messages (users at 0 and 2): a prefix of the committed range.
  const covered = 6;
  const prefix = (bytes: number, rounds: number[]): RoundIndex => ({
    format: "loop-session-index",
    version: 1,
    generation: sha256Hex(log.subarray(0, bytes)),
    start: 0,
    bytes,
    messageCount: covered,
    rounds: rounds.map((i) => ({ messageIndex: i, byteOffset: offsets[i] as number })),
  });
  const end = offsets[covered] as number;
  // As written, such a prefix index agrees with the log.
  await fs.writeFile(indexPath, encodeRoundIndex(prefix(end, [0, 2])));
  assert.deepEqual((await verifySession(fs, dir, options)).findings, []);
  const cases: [string, RoundIndex, RegExp][] = [
    ["ends inside a line", prefix(end - 1, [0, 2]), /do not end at a line/],
    ["a round past its messages", prefix(end, [0, 2, 6]), /lists 3 rounds, not 2/],
  ];
  for (const [label, index, message] of cases) {
    await fs.writeFile(indexPath, encodeRoundIndex(index));
    const report = await verifySession(fs, dir, options);
    assert.equal(report.ok, true, label);
    assert.deepEqual(kinds(report), [["warning", "index", indexPath]], label);
    assert.match(report.findings[0]?.message ?? "", message, label);
  }
});
