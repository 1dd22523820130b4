// The benchmark harness in its tiniest mode over the memory adapter: every case runs and
// produces numbers. No timing is asserted; `deno task bench` measures on a real disk.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256, SessionStore } from "../mod.ts";
import { portFloors, roundCountOfHead } from "../bench/floors.ts";
import { configFor, runSuite } from "../bench/suite.ts";
import { measurePair, summarize } from "../bench/harness.ts";
import { renderMarkdown, tally } from "../bench/report.ts";
import { SyntheticConversation, syntheticHistory } from "../bench/data.ts";
import { LIST_OP } from "../bench/cases_list.ts";
import { dirname } from "../src/port/path.ts";

test("summarize() reports the median, p90, min and mean of timings", () => {
  const stats = summarize([5, 1, 4, 2, 3, 10, 6, 7, 8, 9]);
  assert.equal(stats.n, 10);
  assert.equal(stats.median, 5.5);
  assert.equal(stats.min, 1);
  assert.equal(stats.mean, 5.5);
  assert.ok(Math.abs(stats.p90 - 9.1) < 1e-9);
});

test("measurePair() warms up, then alternates ours and the floor batch by batch", async () => {
  const calls: string[] = [];
  const result = await measurePair(
    { before: () => calls.push("ours:before"), run: () => calls.push("ours") },
    { run: () => calls.push("floor") },
    { warmup: 1, batches: 3, batchSize: 2 },
  );
  assert.deepEqual(calls.filter((c) => c !== "ours:before"), [
    "ours",
    "floor",
    "ours",
    "ours",
    "floor",
    "floor",
    "floor",
    "floor",
    "ours",
    "ours",
    "ours",
    "ours",
    "floor",
    "floor",
  ]);
  assert.equal(calls.filter((c) => c === "ours:before").length, 7);
  assert.equal(result.ours.n, 6);
  assert.equal(result.floor?.n, 6);
});

test("the synthetic conversation alternates ~200 B user and ~2 KB assistant messages with tool calls", () => {
  const history = syntheticHistory(40);
  assert.equal(history.length, 40);
  const size = (role: string) =>
    history.filter((m) => m.role === role).map((m) => JSON.stringify(m).length);
  const users = size("user");
  const assistants = size("assistant");
  assert.ok(users.every((n) => n > 150 && n < 260), `user sizes ${users}`);
  assert.ok(assistants.every((n) => n > 1500 && n < 2300), `assistant sizes ${assistants}`);
  assert.ok(history.some((m) => m.role === "toolResult"));
  const conversation = new SyntheticConversation(3).continueAfter("user");
  assert.equal(conversation.nextPlain().role, "assistant");
  assert.equal(conversation.nextPlain().role, "user");
});

test("the benchmark suite runs every case over the memory adapter and reports numbers", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/bench", { recursive: true });
  const config = configFor("tiny");
  const report = await runSuite({
    fs,
    sha256: portableSha256,
    floors: portFloors(fs, portableSha256),
    workDir: "/bench",
    machine: [["runtime", "memory adapter"]],
  }, config);

  const ops = new Set(report.rows.map((row) => row.op));
  for (
    const op of [
      "full open",
      "readHistory() latest page",
      "readHistory(before) deep page",
      "fast list of one session",
      "setPinned (full)",
      "setPinned (ordered)",
      "markRead (full)",
      "markRead (ordered)",
      "commit one message (full)",
      "commit one message (ordered)",
      "append one message (full)",
      "append one message (ordered)",
      "commit a replacement generation (full)",
      "fast list",
      "fast list of large sessions",
      "full list",
      "migrate a legacy v2 file (full)",
      "append one message, large meta.json (full)",
      "append one message, large meta.json (ordered)",
    ]
  ) assert.ok(ops.has(op), `no row for ${op}`);
  for (const row of report.rows) {
    assert.ok(row.ours.n > 0 && Number.isFinite(row.ours.median), `${row.op}: no timing`);
    assert.ok(row.floor === undefined || row.floor.n > 0, `${row.op}: no floor timing`);
  }
  // The fast list's target case: both title kinds, judged against its ×3 target.
  const large = report.rows.filter((row) => row.op === "fast list of large sessions");
  assert.deepEqual(large.map((row) => /stored titles/.test(row.sizeLabel)), [false, true]);
  assert.ok(large.every((row) => row.maxRatio === 3));
  // Beside it, the same listings against the floor that reads index.json's head as well.
  const twoFiles = report.rows.filter((row) => row.op === LIST_OP.fastLargeTwoFiles);
  assert.deepEqual(twoFiles.map((row) => row.sizeLabel), large.map((row) => row.sizeLabel));
  assert.ok(twoFiles.every((row) => row.floor !== undefined && row.maxRatio === undefined));
  for (const spec of report.growth) {
    const sizes = report.rows.filter((row) => row.op === spec.op).map((row) => row.size);
    assert.ok(sizes.length >= 2, `growth of ${spec.op} has ${sizes.length} sizes`);
  }
  assert.ok(report.memory.some((row) => row.what.startsWith("bytes read by a page read")));
  assert.match(report.peerStatus, /not measured/);
  const { checked } = tally(report);
  assert.ok(checked > 0);
  const markdown = renderMarkdown(report);
  assert.match(markdown, /## Operations against their floors/);
  assert.match(markdown, /## Growth/);
  assert.match(markdown, /## Durability modes/);
});

test("the two-file listing floor finds the round count a saved index.json states", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/work", { recursive: true });
  const store = new SessionStore({ fs, sha256: portableSha256, agentDir: "/agent" });
  const session = await store.create("/work");
  const history = syntheticHistory(40);
  await session.commit(history);
  await session.close();
  const index = await fs.readFile(`${dirname(session.sessionFile)}/index.json`);
  const users = history.filter((message) => message.role === "user").length;
  assert.ok(users > 1);
  assert.equal(roundCountOfHead(index), users);
  assert.throws(() => roundCountOfHead(new TextEncoder().encode("{}")), /no round count/);
});
