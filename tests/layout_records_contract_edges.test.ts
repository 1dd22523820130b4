// Records that contradict their own rules are refused naming the file and field (a child at depth
// 0, v1 ledgers with schema-2 fields, a request cited twice, mirror trace and seal references to
// other files); final records stay final (a sealed attempt's result, a frozen snapshot, a first
// result written twice at once); git receipt names and a legacy child's state follow the tree.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  createAttemptArtifacts,
  findWorkingSession,
  type FoldedTraceRef,
  type GitPhase,
  gitReceiptFilename,
  ImmutableArtifactError,
  LayoutError,
  type LayoutRecordError,
  loadSessionTree,
  openSessionPaths,
  parseChildrenLedger,
  parseTraceRef,
  processNextChildRequest,
  publishChildRequest,
  readChildrenLedger,
  readSessionState,
  readTraceRef,
  recordChildOutcome,
  TopologyError,
  updateSessionState,
  writeAttemptResult,
} from "../layout.ts";
import {
  awaitingV1Child,
  childRequest,
  deterministic,
  newRepo,
  newRoot,
  patchState,
  readJson,
  recordError,
  writeJson,
} from "./layout_fixtures.ts";
import { mirror, MIRROR_CHILD_ID, MIRROR_ROOT_ID, ROOT_ATTEMPTS } from "./fixtures/mirror_tree.ts";

test("a child manifest that declares depth 0 is refused at depth, and its tree with it", async () => {
  const { fs, tree } = await mirror();
  const file = `${tree.childDir}/session.json`;
  await writeJson(fs, file, { ...(await readJson(fs, file)), depth: 0 });
  const before = fs.snapshotTree("/");
  for (const id of [MIRROR_ROOT_ID, MIRROR_CHILD_ID]) {
    await assert.rejects(loadSessionTree(fs, tree.repoRoot, id), (error: unknown) => {
      assert.ok(error instanceof TopologyError, String(error));
      assert.equal(error.at, tree.rootDir);
      return recordError(file, "depth")(error.cause);
    });
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a v1 children.json carrying a schema-2 field or no list of children is refused naming it", async () => {
  const { fs, tree } = await mirror();
  const paths = await openSessionPaths(fs, tree.rootDir);
  const file = paths.childrenJson;
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ schema_version: 1, children: [], revision: 4 }, "revision", /no schema-2 fields/],
    [
      { schema_version: 1, parent_session_id: MIRROR_ROOT_ID, children: [] },
      "parent_session_id",
      /no schema-2 fields/,
    ],
    [{ schema_version: 1, children: { "0": {} } }, "children", /children must be a list/],
    [{ schema_version: 1 }, "children", /children must be a list/],
  ];
  for (const [ledger, field, says] of cases) {
    await writeJson(fs, file, ledger);
    const before = fs.snapshotTree("/");
    await assert.rejects(readChildrenLedger(fs, paths, MIRROR_ROOT_ID), (error: unknown) => {
      recordError(file, field)(error);
      assert.match((error as Error).message, says);
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, field);
  }
  // A v1 ledger does not name its session: read without one, it is refused, never guessed.
  assert.throws(
    () => parseChildrenLedger({ schema_version: 1, children: [] }, file),
    recordError(file, "schema_version"),
  );
  assert.throws(() => parseChildrenLedger([], file), recordError(file, "schema_version"));
  assert.equal(parseChildrenLedger([], file, MIRROR_ROOT_ID).parent_session_id, MIRROR_ROOT_ID);
});

test("a children.json citing one request for two children is refused at the second", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  const accepted = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: root.sessionId,
    ...deterministic(),
  });
  assert.equal(accepted?.kind, "accepted");
  const file = root.paths.childrenJson;
  const ledger = await readJson(fs, file);
  const [first] = ledger.children as Record<string, unknown>[];
  await writeJson(fs, file, {
    ...ledger,
    children: [first, { ...first, session_id: "02_phase-0-again", status: "goal_met" }],
  });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    readChildrenLedger(fs, root.paths, root.sessionId),
    (error: unknown) => {
      recordError(file, "children[1].request_id")(error);
      assert.equal((error as LayoutRecordError).value, "phase-0");
      assert.match((error as Error).message, /Duplicate child request id/);
      return true;
    },
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a mirror trace_ref.json naming another attempt's manifest is refused at that field", async () => {
  const { fs, tree } = await mirror();
  const session = await openSessionPaths(fs, tree.rootDir);
  const { iteration, workflowId, attemptId } = ROOT_ATTEMPTS.first;
  const attempt = session.attempt(iteration, workflowId);
  const file = attempt.traceRefJson;
  const own = await readJson(fs, file);
  const other = `trace-${ROOT_ATTEMPTS.second.attemptId}`;
  const cases: [Record<string, unknown>, string][] = [
    [{ ...own, manifest_id: other }, "manifest_id"],
    [{ ...own, manifest_ref: `trace:${other}:/trace_manifest.json` }, "manifest_ref"],
    [{ ...own, manifest_ref: `trace:trace-${attemptId}:/other.json` }, "manifest_ref"],
  ];
  for (const [ref, field] of cases) {
    await writeJson(fs, file, ref);
    const before = fs.snapshotTree("/");
    await assert.rejects(readTraceRef(fs, attempt), recordError(file, field));
    assert.deepEqual(fs.snapshotTree("/"), before, field);
  }
  await writeJson(fs, file, own);
  assert.equal((await readTraceRef(fs, attempt)).attempt_id, attemptId);
});

test("a folded trace_ref.json recording only a raw directory not named raw/<NNNN>_<workflow> is refused", () => {
  const file = "/s/iterations/0001_outer/trace_ref.json";
  for (const rawDir of ["raw/1_outer", "raw/0001_", "raw/0001_../x", "iterations/0001_outer"]) {
    assert.throws(
      () => parseTraceRef({ raw_dir: rawDir, raw_dir_ref: `session:/${rawDir}` }, file, "folded"),
      recordError(file, "raw_dir"),
      rawDir,
    );
  }
  const read = parseTraceRef(
    { raw_dir: "raw/0007_outer", raw_dir_ref: "session:/raw/0007_outer" },
    file,
    "folded",
  ) as FoldedTraceRef;
  assert.deepEqual([read.iteration, read.workflow_id], [7, "outer"]);
});

test("a mirror child outcome citing a seal outside trace_seals/ is refused when it is recorded", async () => {
  const { fs, tree } = await mirror();
  await awaitingV1Child(fs, tree.rootDir, MIRROR_CHILD_ID);
  const file = `${tree.childDir}/session_outcome.json`;
  const outcome = await readJson(fs, file);
  const seal = (outcome.trace_seal_refs as string[])[0] as string;
  for (const bad of ["session:/receipts/d00d00000001.json", "session:/trace_seals/x/y.json"]) {
    await writeJson(fs, file, { ...outcome, trace_seal_refs: [seal, bad] });
    const before = fs.snapshotTree("/");
    await assert.rejects(
      recordChildOutcome(fs, { repoRoot: tree.repoRoot, parentSessionId: MIRROR_ROOT_ID }),
      recordError(file, "trace_seal_refs[1]"),
    );
    assert.deepEqual(fs.snapshotTree("/"), before, bad);
  }
});

test("a running mirror attempt whose trace is sealed keeps its result.json", async () => {
  const { fs, tree } = await mirror();
  const session = await openSessionPaths(fs, tree.rootDir);
  const { iteration, workflowId, attemptId } = ROOT_ATTEMPTS.active;
  const attempt = session.attempt(iteration, workflowId);
  const seal = session.traceSealReceipt(attemptId);
  // The state still runs this attempt, but its trace has been sealed: the result is final.
  assert.deepEqual((await readSessionState(fs, tree.rootDir)).current_task, {
    workflow_id: workflowId,
    iteration,
    attempt_id: attemptId,
  });
  await writeJson(fs, seal, { schema_version: 1, attempt_id: attemptId });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    writeAttemptResult(fs, attempt, { status: "succeeded" }, deterministic()),
    (error: unknown) => {
      assert.ok(error instanceof ImmutableArtifactError, String(error));
      assert.match(error.message, /trace is sealed/);
      assert.match(error.message, new RegExp(attempt.resultJson));
      return true;
    },
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  // Before the seal, the running attempt's result could still change.
  await fs.remove(seal);
  await writeAttemptResult(fs, attempt, { status: "succeeded" }, deterministic());
  assert.deepEqual(await readJson(fs, attempt.resultJson), { status: "succeeded" });
});

test("a text snapshot file frozen once keeps its bytes: other text refuses the whole call", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const attempt = { iteration: 3, workflowId: "outer", attemptId: "a00000000003" };
  const create = (prompt: string, text: string) =>
    createAttemptArtifacts(fs, root.paths, attempt, {
      prompt,
      pathsMap: {},
      snapshot: { "role.md": text, "roster.json": { roles: ["outer"] } },
      ...deterministic(),
    });
  const first = await create("First prompt", "# Outer role\n");
  const file = `${first.paths.snapshotDir(attempt.attemptId)}/role.md`;
  // The same text again is the frozen file.
  assert.deepEqual(
    (await create("First prompt", "# Outer role\n")).snapshotHashes,
    first.snapshotHashes,
  );
  const before = fs.snapshotTree("/");
  for (const text of ["# Outer role", "# Outer role\n\n", "# Other role\n"]) {
    await assert.rejects(create("Second prompt", text), (error: unknown) => {
      assert.ok(error instanceof ImmutableArtifactError, String(error));
      assert.match(error.message, new RegExp(file));
      return true;
    }, JSON.stringify(text));
    // Nothing was written: neither the snapshot nor the attempt's prompt.
    assert.deepEqual(fs.snapshotTree("/"), before, JSON.stringify(text));
  }
});

test("git receipt names follow the session's layout, and a phase other than before or after is refused", async () => {
  const { fs, tree } = await mirror();
  const mirrored = (await openSessionPaths(fs, tree.rootDir)).attempt(1, "outer");
  const id = ROOT_ATTEMPTS.first.attemptId;
  assert.equal(mirrored.gitReceiptRef("after", id), `session:/git_receipts/git-after-${id}.json`);
  assert.equal(
    mirrored.gitReceipt("before", id),
    `${tree.rootDir}/git_receipts/git-before-${id}.json`,
  );
  const folded = (await newRoot(await newRepo())).paths.attempt(26, "outer");
  assert.equal(folded.gitReceiptRef("after", "a26"), "session:/receipts/0026_outer_git_after.json");
  for (const phase of ["during", "After", ""]) {
    for (const layout of ["folded", "mirror"] as const) {
      assert.throws(
        () =>
          gitReceiptFilename(layout, phase as GitPhase, {
            iteration: 1,
            workflowId: "outer",
            attemptId: id,
          }),
        (error: unknown) => {
          assert.ok(error instanceof LayoutError, String(error));
          assert.match(error.message, /phase must be before or after/);
          return true;
        },
      );
    }
  }
});

test("a legacy v1 child's state is held to its own id and to the root its nesting gives", async () => {
  const { fs, tree } = await mirror();
  const manifest = await readJson(fs, `${tree.childDir}/session.json`);
  // A v1 manifest records no root: the child's nesting under the root says which it is.
  await writeJson(fs, `${tree.childDir}/session.json`, {
    schema_version: 1,
    session_id: MIRROR_CHILD_ID,
    goal_hash: manifest.goal_hash,
    workflow_set: "main",
    parent_session_id: MIRROR_ROOT_ID,
    created_at: manifest.created_at,
  });
  const file = `${tree.childDir}/state.json`;
  const state = await readJson(fs, file);
  for (const root of [MIRROR_ROOT_ID, null]) {
    await writeJson(fs, file, { ...state, root_session_id: root });
    assert.equal((await readSessionState(fs, tree.childDir)).root_session_id, root);
  }
  await patchState(fs, tree.rootDir, {
    current_task: null,
    active_child_session_id: MIRROR_CHILD_ID,
  });
  const loaded = await loadSessionTree(fs, tree.repoRoot, MIRROR_CHILD_ID);
  assert.equal((await findWorkingSession(fs, loaded))?.terminalChild?.sessionId, MIRROR_CHILD_ID);
  // A state naming another session or another root is refused, read alone or through the tree.
  for (
    const [field, value] of [["session_id", MIRROR_ROOT_ID], ["root_session_id", MIRROR_CHILD_ID]]
  ) {
    await writeJson(fs, file, { ...state, [field as string]: value });
    const before = fs.snapshotTree("/");
    await assert.rejects(readSessionState(fs, tree.childDir), recordError(file, field as string));
    await assert.rejects(findWorkingSession(fs, loaded), recordError(file, field as string));
    assert.deepEqual(fs.snapshotTree("/"), before, field);
  }
  // Nor is one written: the tree would refuse to read it.
  await writeJson(fs, file, { ...state, root_session_id: MIRROR_ROOT_ID });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    updateSessionState(fs, tree.childDir, (next) => {
      next.root_session_id = MIRROR_CHILD_ID;
    }, { updatedAt: "2026-04-20T00:00:00Z" }),
    recordError(file, "root_session_id"),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a finished attempt's first result written twice at once is written once; both calls succeed", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const attempt = { iteration: 4, workflowId: "outer", attemptId: "a00000000004" };
  const { paths } = await createAttemptArtifacts(fs, root.paths, attempt, {
    prompt: "p",
    pathsMap: {},
  });
  // The session runs no task: the attempt has finished, so only a first write is allowed.
  assert.equal((await readSessionState(fs, root.dir)).current_task, null);
  const result = { status: "completed", exit_code: 0 };
  await Promise.all([
    writeAttemptResult(fs, paths, result, deterministic()),
    writeAttemptResult(fs, paths, { ...result }, deterministic()),
  ]);
  assert.deepEqual(await readJson(fs, paths.resultJson), result);
  // Another result is refused now: the first write is final.
  await assert.rejects(
    writeAttemptResult(fs, paths, { status: "failed", exit_code: 1 }, deterministic()),
    ImmutableArtifactError,
  );
});
