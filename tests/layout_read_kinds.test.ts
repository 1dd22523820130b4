// Readers of the folded layout over records of the wrong kind: a record path that is a directory,
// or that sits under a regular file, is reported as the typed error or status each reader
// documents, never as the port's raw IsADirectory / NotADirectory.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  inspectTrace,
  LayoutRecordError,
  listTraces,
  loadSessionTree,
  LogicalReferenceResolver,
  missingScaffoldEntries,
  observeHandoff,
  pruneRaw,
  readChildrenLedger,
  readControl,
  readHandoff,
  readSessionState,
  readSessionStateIfExists,
  TopologyError,
  TraceIntegrityError,
  verifyTrace,
} from "../layout.ts";
import { runLayout, runTraces } from "../src/cli/layout.ts";
import { memoryIo } from "./_cli_io.ts";
import { newRepo, newRoot, writeText } from "./layout_fixtures.ts";
import { firstDifference, jsonEqual } from "../src/layout/json_io.ts";
import type { MemoryFs } from "../adapters/memory.ts";
import { buildFoldedTree, type FoldedTree } from "./fixtures/folded_tree.ts";
import {
  buildMirrorTree,
  CHILD_ATTEMPT,
  MIRROR_ROOT_ID,
  ROOT_ATTEMPTS,
} from "./fixtures/mirror_tree.ts";

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

test("a root's or a child's session.json planted as a symlink is a TopologyError of the tree holding it, naming the manifest", async () => {
  for (const which of ["root", "child"] as const) {
    const fs = await newRepo();
    const tree = await buildFoldedTree(fs);
    const [dir, id] = which === "root"
      ? [tree.root.dir, tree.rootId]
      : [tree.child.dir, tree.childId];
    const manifest = `${dir}/session.json`;
    await fs.writeFile("/repo/copy.json", await fs.readFile(manifest));
    await fs.remove(manifest);
    await fs.symlink("/repo/copy.json", manifest);
    for (
      const call of [
        () => loadSessionTree(fs, "/repo", id),
        () => pruneRaw(fs, "/repo/.loopy_loop", { dryRun: true, sessionId: id }),
      ]
    ) {
      await assert.rejects(call(), (error: unknown) => {
        assert.ok(error instanceof TopologyError, `${which}: ${String(error)}`);
        assert.match(error.message, /belongs to an invalid topology/);
        assert.match(error.message, /may not be a symlink/);
        assert.ok(error.message.includes(`'${manifest}'`), error.message);
        return true;
      });
    }
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

test("a mirror session's trace_seals that is a regular file fails its traces' seals only", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  await fs.remove(`${tree.rootDir}/trace_seals`, { recursive: true });
  await writeText(fs, `${tree.rootDir}/trace_seals`, "x");
  const before = JSON.stringify(fs.snapshotTree("/"));
  const listed = await listTraces(fs, tree.loopyRoot);
  assert.equal(listed.length, 4);
  const byAttempt = new Map(listed.map((entry) => [entry.attemptId, entry]));
  for (const attempt of [ROOT_ATTEMPTS.first, ROOT_ATTEMPTS.second]) {
    const entry = byAttempt.get(attempt.attemptId);
    assert.equal(entry?.integrity, "failed", attempt.attemptId);
    assert.deepEqual(entry?.problems, ["trace_seals is not a directory"], attempt.attemptId);
  }
  assert.equal(byAttempt.get(CHILD_ATTEMPT.attemptId)?.integrity, "verified");
  assert.equal(byAttempt.get(ROOT_ATTEMPTS.active.attemptId)?.integrity, "not_finalized");
  const first = ROOT_ATTEMPTS.first.attemptId;
  const inspected = await inspectTrace(fs, tree.loopyRoot, `trace-${first}`);
  assert.equal(inspected.observedIntegrity.seal.status, "mismatch");
  assert.deepEqual(inspected.observedIntegrity.seal.errors, ["trace_seals is not a directory"]);
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, `trace-${first}`),
    (error: unknown) =>
      error instanceof TraceIntegrityError &&
      error.message.includes("trace_seals is not a directory"),
  );
  for (const args of [["list"], ["inspect", `trace-${first}`]]) {
    const { io } = memoryIo(fs, "/repo", 0);
    assert.equal(typeof (await runTraces(io, args)), "number", args.join(" "));
  }
  assert.equal(JSON.stringify(fs.snapshotTree("/")), before);
});

test("a trace: reference whose trace directory is a regular file names its manifest", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const first = ROOT_ATTEMPTS.first.attemptId;
  const dir = tree.traceDir(first);
  await fs.remove(dir, { recursive: true });
  await writeText(fs, dir, "{}");
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: MIRROR_ROOT_ID,
  });
  await assert.rejects(
    resolver.resolve(`trace:trace-${first}:/trace_manifest.json`),
    (error: unknown) =>
      error instanceof LayoutRecordError && error.file === `${dir}/trace_manifest.json`,
  );
});

test("a handoff.json that is a directory, or a project_state/ that is a file, is an invalid handoff", async () => {
  for (const damage of ["handoff.json is a directory", "project_state is a file"]) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    const file = root.paths.handoffJson;
    if (damage === "handoff.json is a directory") {
      await fs.remove(file);
      await fs.mkdir(file);
    } else {
      await fs.remove(`${root.dir}/project_state`, { recursive: true });
      await writeText(fs, `${root.dir}/project_state`, "");
    }
    const before = JSON.stringify(fs.snapshotTree("/"));
    const observed = await observeHandoff(fs, root.paths, {
      sessionId: root.sessionId,
      goalSha256: root.manifest.goal_hash,
      storedRevision: 0,
      storedSha256: null,
    });
    assert.equal(observed.status, "invalid", damage);
    assert.equal(observed.sha256, null, damage);
    assert.match(observed.diagnosis ?? "", /handoff\.json/, damage);
    assert.equal(JSON.stringify(fs.snapshotTree("/")), before, damage);
  }
});

test("missingScaffoldEntries lists what lies under a scaffold directory that is a file", async () => {
  for (const name of ["child_requests", "inputs", "project_state"]) {
    const fs = await newRepo();
    const tree = await buildFoldedTree(fs);
    const dir = tree.child.dir;
    const healthy = await missingScaffoldEntries(fs, dir, "child");
    assert.deepEqual(healthy, [], name);
    await fs.remove(`${dir}/${name}`, { recursive: true });
    await writeText(fs, `${dir}/${name}`, "");
    const missing = await missingScaffoldEntries(fs, dir, "child");
    assert.ok(missing.length > 0, name);
    assert.ok(missing.includes(name), `${name}: ${missing.join(", ")}`);
    for (const entry of missing) {
      assert.ok(entry === name || entry.startsWith(`${name}/`), `${name}: ${entry}`);
    }
  }
});

test("a single record that is a directory, or under a file, is a LayoutRecordError naming it", async () => {
  const readers: [string, (fs: MemoryFs, tree: FoldedTree) => Promise<unknown>][] = [
    ["state.json", (fs, tree) => readSessionState(fs, tree.child.dir)],
    ["state.json", (fs, tree) => readSessionStateIfExists(fs, tree.child.dir)],
    ["control.json", (fs, tree) => readControl(fs, tree.child)],
    ["project_state/handoff.json", (fs, tree) => readHandoff(fs, tree.child)],
    ["children.json", (fs, tree) => readChildrenLedger(fs, tree.child, tree.childId)],
  ];
  for (const [relative, read] of readers) {
    for (const damage of ["directory", "under a file"]) {
      const fs = await newRepo();
      const tree = await buildFoldedTree(fs);
      const file = `${tree.child.dir}/${relative}`;
      if (damage === "directory") {
        await fs.remove(file);
        await fs.mkdir(file);
      } else {
        // The directory holding the record replaced by a file.
        if (!relative.includes("/")) continue; // a top-level record: its directory is the session
        const dir = `${tree.child.dir}/${relative.slice(0, relative.lastIndexOf("/"))}`;
        await fs.remove(dir, { recursive: true });
        await writeText(fs, dir, "");
      }
      const label = `${relative} (${damage})`;
      const before = JSON.stringify(fs.snapshotTree("/"));
      await assert.rejects(
        read(fs, tree),
        (error: unknown) =>
          error instanceof LayoutRecordError && error.file === file &&
          error.message.includes("not a regular file"),
        label,
      );
      assert.equal(JSON.stringify(fs.snapshotTree("/")), before, label);
    }
  }
});
