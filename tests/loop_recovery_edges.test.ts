// Edges of the Loop store's read, recovery and maintenance paths: verify never reads past the
// committed range (an uncommitted crash tail is no finding), a compaction never copies the rounds
// of an index.json that lists a round twice, and a migration fails when any fsync of its staged
// log fails, the background sync of its last batch included.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { verifySession } from "../src/loop/verify.ts";
import { parseRoundIndexText } from "../src/loop/storage.ts";
import { migrateLegacySession, type MigrationPacing } from "../src/loop/legacy.ts";
import { compactableSession, conversation, rewriteIndex, savedThreeRounds } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const options = { sha256: portableSha256 };
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function saved() {
  return savedThreeRounds(AGENT, CWD);
}

test("verifySession ignores an uncommitted crash tail past the committed range", async () => {
  const { fs, dir, logPath } = await saved();
  const log = await fs.readFile(logPath);
  // What a crash can leave after the committed range: a cut line of garbage.
  const tail = encoder.encode('{"role":"user","content":[{"type":"te\u0000\u0000garbage');
  await fs.writeFile(logPath, new Uint8Array([...log, ...tail]));
  const before = fs.snapshotTree();
  const report = await verifySession(fs, dir, options);
  assert.deepEqual(report.findings, [], "bytes past the committed range are never read");
  assert.equal(report.ok, true);
  assert.equal(report.validMessages, 8);
  assert.deepEqual(fs.snapshotTree(), before, "verify modified nothing");
});

test("a migration fails whichever fsync of its staged log fails, the last background one included", async () => {
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const collection = `${AGENT}/sessions/${workspaceHash(CWD)}`;
  const legacy = `${collection}/${id}.jsonl`;
  const target = `${collection}/${id}`;
  // A background sync after every batch, the last batch's included (its failure is seen only by
  // close).
  const pacing: MigrationPacing = { readChunk: 256, writeBatch: 512, syncEvery: 1 };
  const header = {
    format: "loop-session",
    version: 2,
    id,
    cwd: CWD,
    createdAt: "2025-06-01T10:00:00.000Z",
    updatedAt: "2025-06-02T11:00:00.000Z",
    unread: true,
    permissionPreset: "workspace-write",
  };
  const text = [header, ...conversation(12)].map((r) => JSON.stringify(r)).join("\n") + "\n";
  const baseline = new MemoryFs();
  await baseline.mkdir(CWD, { recursive: true });
  await baseline.mkdir(collection, { recursive: true });
  await baseline.writeFile(legacy, encoder.encode(text), { mode: 0o600 });
  baseline.syncAll();
  // The syncs of the staged log in a migration that succeeds: background ones, then the last.
  const probe = baseline.clone();
  probe.resetCounter();
  await migrateLegacySession(
    new SessionStore({ fs: probe, agentDir: AGENT }).context,
    legacy,
    pacing,
  );
  const syncs = probe.operationLog.filter((r) =>
    r.op === "sync" && r.path.includes("/.staging-") && r.path.endsWith("/messages.jsonl")
  ).map((r) => r.number);
  assert.ok(syncs.length >= 3, `syncs of the staged log: ${syncs.join(",")}`);
  for (const n of syncs) {
    const fs = baseline.clone();
    fs.resetCounter();
    fs.failAt(n, { error: "EIO", ops: ["sync"] });
    // After a failed fsync the pages it lost are never written back: the migration must fail.
    await assert.rejects(
      migrateLegacySession(new SessionStore({ fs, agentDir: AGENT }).context, legacy, pacing),
      /Input\/output error \(injected\): sync/,
      `sync at operation ${n} of ${syncs.join(",")}`,
    );
    fs.clearFaults();
    await assert.rejects(fs.lstat(target), `no directory published (sync at ${n})`);
    assert.equal(decoder.decode(await fs.readFile(legacy)), text, "the legacy file is intact");
  }
});

test("a compaction never copies the rounds of an index.json that lists a round twice", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const { dir, history } = await compactableSession(store, CWD);
  const users = history.flatMap((m, i) => (m.role === "user" ? [i] : []));
  // Same generation, start, length and count as meta.json: only the rounds are wrong, the
  // second round listed twice (the copy one byte later, so the byte offsets still increase).
  await rewriteIndex(fs, dir, (index) => {
    const [first, second, ...rest] = index.rounds;
    assert.ok(first !== undefined && second !== undefined);
    const twice = { messageIndex: second.messageIndex, byteOffset: second.byteOffset + 1 };
    return { ...index, rounds: [first, second, twice, ...rest] };
  });
  assert.equal((await store.compact(dir)).compacted, true);
  const index = parseRoundIndexText(decoder.decode(await fs.readFile(`${dir}/index.json`)));
  assert.ok(index !== undefined);
  assert.deepEqual(index.rounds.map((r) => r.messageIndex), users, "rounds rebuilt from the log");
  assert.deepEqual((await verifySession(fs, dir, options)).findings, []);
  const listed = await store.list(CWD);
  assert.equal(listed[0]?.userMessageCount, users.length);
});
