// Readers of the folded layout over records of the wrong kind: a record path that is a directory,
// or that sits under a regular file, is reported as the typed error or status each reader
// documents, never as the port's raw IsADirectory / NotADirectory.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  loadSessionTree,
  LogicalReferenceResolver,
  observeHandoff,
  pruneRaw,
  readHandoff,
  TopologyError,
} from "../layout.ts";
import { runLayout } from "../src/cli/layout.ts";
import { memoryIo } from "./_cli_io.ts";
import { newRepo, newRoot, writeText } from "./layout_fixtures.ts";
import { firstDifference, jsonEqual } from "../src/layout/json_io.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";

test("a session.json that is a directory confines the damage to its own tree", async () => {
  const fs = await newRepo();
  const damaged = await newRoot(fs, "First goal");
  const healthy = await newRoot(fs, "Second goal");
  const manifest = `${damaged.dir}/session.json`;
  await fs.remove(manifest);
  await fs.mkdir(manifest);
  const tree = await loadSessionTree(fs, "/repo", healthy.sessionId);
  assert.equal(tree.rootSessionId, healthy.sessionId);
  await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: healthy.sessionId,
  });
  await pruneRaw(fs, "/repo/.loopy_loop", { dryRun: true, sessionId: healthy.sessionId });
  const { io } = memoryIo(fs, "/repo", 0);
  assert.equal(await runLayout(io, ["show", healthy.sessionId]), 0);
  await assert.rejects(
    loadSessionTree(fs, "/repo", damaged.sessionId),
    (error: unknown) =>
      error instanceof TopologyError && error.message.includes("not a regular file") &&
      error.message.includes(manifest),
  );
});

test("a child's session.json or parent.json that is a directory is a TopologyError", async () => {
  for (const name of ["session.json", "parent.json"]) {
    const fs = await newRepo();
    const tree = await buildFoldedTree(fs);
    const file = `${tree.child.dir}/${name}`;
    await fs.remove(file);
    await fs.mkdir(file);
    await assert.rejects(
      loadSessionTree(fs, "/repo", tree.childId),
      (error: unknown) =>
        error instanceof TopologyError && error.message.includes(file) &&
        error.message.includes("not a regular file"),
      name,
    );
  }
});

/** A handoff's JSON text whose accepted outcome is `outcome`, by attempt `attemptId`. */
function handoffText(sessionId: string, goal: string, attemptId: string, outcome: string): string {
  return JSON.stringify({
    schema_version: 1,
    session_id: sessionId,
    goal_sha256: goal,
    revision: 1,
    producer: { workflow_id: "outer", attempt_id: attemptId },
    summary: "s",
    accepted_outcomes: ["OUTCOME"],
    open_work: [],
    risks: [],
    decision_refs: [],
    evidence_refs: [],
    delivery_refs: [],
    eval_refs: [],
    updated_at: "2026-04-19T14:30:23Z",
  }).replace('"OUTCOME"', outcome);
}

test("a deeply nested handoff re-stamped by the current attempt is observed, not a RangeError", async () => {
  const statuses: string[] = [];
  for (const depth of [1, 20_000]) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    const goal = root.manifest.goal_hash;
    const outcome = "[".repeat(depth) + "]".repeat(depth);
    await writeText(fs, root.paths.handoffJson, handoffText(root.sessionId, goal, "att1", outcome));
    const stored = await readHandoff(fs, root.paths);
    await writeText(fs, root.paths.handoffJson, handoffText(root.sessionId, goal, "att2", outcome));
    const observed = await observeHandoff(fs, root.paths, {
      sessionId: root.sessionId,
      goalSha256: goal,
      storedRevision: 1,
      storedSha256: stored.sha256,
      storedHandoff: stored.record,
      currentAttemptId: "att2",
    });
    statuses.push(observed.status);
  }
  assert.equal(statuses[1], statuses[0]);
});

test("jsonEqual and firstDifference compare values nested deeper than the call stack", () => {
  const nest = (depth: number, leaf: unknown): unknown => {
    let value = leaf;
    for (let i = 0; i < depth; i++) value = i % 2 === 0 ? [value] : { k: value };
    return value;
  };
  assert.equal(jsonEqual(nest(100_000, 1), nest(100_000, 1)), true);
  assert.equal(jsonEqual(nest(100_000, 1), nest(100_000, 2)), false);
  assert.equal(jsonEqual({ a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 }), true);
  assert.equal(jsonEqual({ a: 1 }, { a: 1, b: undefined }), false);
  assert.equal(jsonEqual([1, 2], { 0: 1, 1: 2 }), false);
  assert.equal(jsonEqual([1, [2]], [1, [3]]), false);
  assert.equal(
    firstDifference({ a: nest(100_000, 1), b: 1 }, { a: nest(100_000, 1), b: 2 }, []),
    "b",
  );
  assert.equal(firstDifference({ a: nest(100_000, 1) }, { a: nest(100_000, 3) }, []), "a");
});
