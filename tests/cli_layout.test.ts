import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { runLayout, runPruneRaw, runTraces } from "../src/cli/layout.ts";
import { memoryIo } from "./_cli_io.ts";
import { createAttemptArtifacts, processNextChildRequest, publishChildRequest } from "../layout.ts";
import { childRequest, deterministic, newRepo, newRoot } from "./layout_fixtures.ts";

/** Runs `prune-raw args` in `/repo` of `fs`; returns its exit code and its last output line. */
async function pruneRaw(fs: MemoryFs, args: string[]): Promise<{ code: number; summary: string }> {
  const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
  const code = await runPruneRaw(io, args);
  return { code, summary: out().trim().split("\n").at(-1) ?? "" };
}

test("prune-raw counts an interrupted prune's leftovers as what they were, by where they lie", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  // A raw attempt directory, and an interrupted prune's leftover of one beside it.
  for (const iteration of [1, 2]) {
    const attempt = { iteration, workflowId: "outer", attemptId: `a${iteration}` };
    await createAttemptArtifacts(fs, root.paths, attempt, { prompt: "p", pathsMap: {} });
  }
  await fs.rename(`${root.dir}/raw/0002_outer`, `${root.dir}/raw/.pruning-0123abcd-0002_outer`);
  // A legacy trace tree, and an interrupted prune's leftover of another.
  const traces = "/repo/.loopy_loop/traces";
  for (const name of ["20260419_143022_71393ee22450_ab12cd34", ".pruning-0123abcd-20260420_0"]) {
    const attempt = `${traces}/${name}/sessions/x/attempts/a`;
    await fs.mkdir(attempt, { recursive: true });
    await fs.writeFile(`${attempt}/trace_manifest.json`, new TextEncoder().encode("{}"));
  }
  const dry = await pruneRaw(fs, ["--legacy-traces", "--dry-run"]);
  assert.equal(dry.code, 0);
  assert.match(
    dry.summary,
    /^would prune 2 raw attempt dir\(s\); would remove 2 legacy trace tree\(s\), /,
  );
  const run = await pruneRaw(fs, ["--legacy-traces"]);
  assert.match(run.summary, /^pruned 2 raw attempt dir\(s\); removed 2 legacy trace tree\(s\), /);
  assert.deepEqual(await fs.readDir(traces), []);
  assert.deepEqual(await fs.readDir(`${root.dir}/raw`), []);
});

test("layout tree shows every tree when a state.json on one tree's active chain is damaged", async () => {
  const fs = await newRepo();
  const first = await newRoot(fs);
  const second = await newRoot(fs, "Second goal");
  await publishChildRequest(fs, first.paths, childRequest("phase-0-foundations"));
  const accepted = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: first.sessionId,
    ...deterministic(),
  });
  assert.equal(accepted?.kind, "accepted");
  const childState = `${first.dir}/children/01_phase-0-foundations/state.json`;
  const run = async (args: string[]) => {
    const { io, out } = memoryIo(fs, "/repo", Date.now());
    return { code: await runLayout(io, ["tree", ...args]), out: out() };
  };
  const healthy = await run([]);
  assert.equal(healthy.code, 0);
  assert.match(healthy.out, /^\* +01_phase-0-foundations {2}running$/m);
  await fs.writeFile(childState, new TextEncoder().encode('{"status":'));
  const damaged = await run([]);
  assert.equal(damaged.code, 1, "a state that cannot be read is a finding");
  assert.match(damaged.out, new RegExp(`^ +${first.sessionId} `, "m"));
  assert.match(damaged.out, /01_phase-0-foundations {2}invalid state\.json/);
  assert.match(damaged.out, new RegExp(`^[* ] +${second.sessionId} `, "m"));
  assert.match(damaged.out, /working session unknown/);
  const json = JSON.parse((await run(["--json"])).out);
  assert.deepEqual(json.trees.map((t: { root: string }) => t.root), [
    first.sessionId,
    second.sessionId,
  ]);
  assert.equal(typeof json.trees[0].error, "string");
});

test("traces inspect prints a manifest nested deeper than the call stack goes, keys sorted", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/.loopy_loop/sessions", { recursive: true });
  const dir = "/repo/.loopy_loop/traces/t1";
  await fs.mkdir(dir, { recursive: true });
  // An agent-written manifest: an extra value 20,000 levels deep (the library reads it).
  const depth = 20_000;
  const text = `{"manifest_id":"trace-1","lifecycle":"sealed","identity":{"workflow_id":"w",` +
    `"session_id":"s","attempt_id":"a"},"x":${"[".repeat(depth)}${"]".repeat(depth)}}`;
  await fs.writeFile(`${dir}/trace_manifest.json`, new TextEncoder().encode(text));
  const { io, out } = memoryIo(fs, "/repo", Date.now());
  const code = await runTraces(io, ["inspect", "trace-1"]);
  assert.equal(code, 1, "a sealed manifest without a seal fails its check");
  const printed = JSON.parse(out());
  assert.equal(printed.manifest_id, "trace-1");
  assert.equal(printed.observed_integrity.status, "failed");
  assert.deepEqual(Object.keys(printed), [
    "identity",
    "lifecycle",
    "manifest_id",
    "observed_integrity",
    "x",
  ]);
  assert.deepEqual(Object.keys(printed.identity), ["attempt_id", "session_id", "workflow_id"]);
  let level = 0;
  for (let value = printed.x; Array.isArray(value) && value.length > 0; value = value[0]) level++;
  assert.equal(level, depth - 1);
  // Deep levels are written on one line, not indented 20,000 times over.
  assert(out().length < 200_000, `${out().length} characters`);
});
