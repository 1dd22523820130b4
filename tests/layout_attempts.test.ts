import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  acceptEvalReceipt,
  type AttemptIdentity,
  createAttemptArtifacts,
  deliveryReceiptRef,
  gitReceiptFilename,
  ImmutableArtifactError,
  iterationName,
  LayoutError,
  LayoutOptionError,
  LayoutRecordError,
  LogicalReferenceResolver,
  RAW_SUBAREAS,
  readTraceRef,
  SessionPaths,
  sha256Ref,
  UnsupportedLayoutError,
  writeAttemptResult,
  writeGitReceipt,
} from "../layout.ts";
import {
  deterministic,
  evalReceipt,
  newRepo,
  newRoot,
  patchState,
  readJson,
  readText,
  writeJson,
} from "./layout_fixtures.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";
const ATTEMPT: AttemptIdentity = { iteration: 26, workflowId: "outer", attemptId: "97521a5ed6b7" };

async function setup(): Promise<{ fs: MemoryFs; paths: SessionPaths }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  return { fs, paths: root.paths };
}

test("iteration names pad to four digits and grow past 9999", () => {
  assert.equal(iterationName(26, "outer"), "0026_outer");
  assert.equal(iterationName(12345, "planner"), "12345_planner");
  assert.throws(() => iterationName(-1, "outer"), LayoutError);
  assert.throws(() => iterationName(1, "../x"), LayoutError);
});

test("git receipt names are self-describing when folded and hash-keyed when mirror", () => {
  assert.equal(gitReceiptFilename("folded", "after", ATTEMPT), "0026_outer_git_after.json");
  assert.equal(gitReceiptFilename("mirror", "after", ATTEMPT), "git-after-97521a5ed6b7.json");
  const folded = new SessionPaths("/s", "folded");
  const mirror = new SessionPaths("/s", "mirror");
  assert.equal(folded.gitReceiptsDir, "/s/receipts");
  assert.equal(folded.deliveryReceiptsDir, "/s/receipts");
  assert.equal(mirror.gitReceiptsDir, "/s/git_receipts");
  assert.equal(mirror.deliveryReceiptsDir, "/s/delivery_receipts");
  assert.equal(deliveryReceiptRef(folded, "d.json"), "session:/receipts/d.json");
  assert.equal(deliveryReceiptRef(mirror, "d.json"), "session:/delivery_receipts/d.json");
});

test("an attempt gets a durable iteration directory and a raw directory with every subarea", async () => {
  const { fs, paths } = await setup();
  const artifacts = await createAttemptArtifacts(fs, paths, ATTEMPT, {
    prompt: "Do the work.\n",
    pathsMap: { session_dir: paths.dir, raw_dir: `${paths.dir}/raw/0026_outer` },
    snapshot: {
      "assignment.json": { actor: "outer", attempt_id: ATTEMPT.attemptId },
      "scheduler_view.json": { ready: true },
      "prompt.txt": "Do the work.\n",
    },
    ...deterministic(),
  });
  const dir = `${paths.dir}/iterations/0026_outer`;
  assert.equal(artifacts.paths.iterationDir, dir);
  assert.equal(await readText(fs, `${dir}/prompt.txt`), "Do the work.\n");
  assert.deepEqual(await readJson(fs, `${dir}/paths.json`), {
    session_dir: paths.dir,
    raw_dir: `${paths.dir}/raw/0026_outer`,
  });
  assert.deepEqual(await readJson(fs, `${dir}/trace_ref.json`), {
    schema_version: 1,
    raw_dir: "raw/0026_outer",
    raw_dir_ref: "session:/raw/0026_outer",
    attempt_id: ATTEMPT.attemptId,
    iteration: 26,
    workflow_id: "outer",
  });
  assert.deepEqual(await readTraceRef(fs, artifacts.paths), artifacts.traceRef);
  for (const subarea of RAW_SUBAREAS) {
    assert.equal((await fs.lstat(`${paths.dir}/raw/0026_outer/${subarea}`)).kind, "directory");
  }
  const snapshotDir = `${dir}/workflow_snapshot/${ATTEMPT.attemptId}`;
  assert.equal(
    artifacts.snapshotHashes["assignment.json"],
    sha256Ref(await fs.readFile(`${snapshotDir}/assignment.json`)),
  );
  assert.equal(await readText(fs, `${snapshotDir}/prompt.txt`), "Do the work.\n");

  // The raw directory is reachable by its logical reference; no trace: reference exists.
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: ROOT_ID,
  });
  assert.equal(
    await resolver.resolveExisting(artifacts.traceRef.raw_dir_ref),
    `${paths.dir}/raw/0026_outer`,
  );

  await writeAttemptResult(fs, artifacts.paths, { status: "completed", exit_code: 0 });
  assert.deepEqual(await readJson(fs, `${dir}/result.json`), { status: "completed", exit_code: 0 });
});

test("a trace_ref.json that records another iteration's raw directory is refused", async () => {
  const { fs, paths } = await setup();
  const first = { iteration: 1, workflowId: "outer", attemptId: "aaaaaaaaaaaa" };
  const second = { iteration: 2, workflowId: "outer", attemptId: "bbbbbbbbbbbb" };
  const options = { prompt: "p", pathsMap: {}, ...deterministic() };
  const one = await createAttemptArtifacts(fs, paths, first, options);
  const two = await createAttemptArtifacts(fs, paths, second, options);
  // Iteration 2's record replaced by iteration 1's, which is valid on its own.
  await writeJson(fs, two.paths.traceRefJson, one.traceRef);
  const error = await readTraceRef(fs, two.paths).then(
    () => assert.fail("accepted"),
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof LayoutRecordError);
  assert.equal(error.file, two.paths.traceRefJson);
  assert.equal(error.path, "iteration");
  // Another workflow's record of the same iteration number is refused as well.
  const planner = await createAttemptArtifacts(fs, paths, {
    iteration: 2,
    workflowId: "planner",
    attemptId: "cccccccccccc",
  }, options);
  await writeJson(fs, two.paths.traceRefJson, planner.traceRef);
  await assert.rejects(() => readTraceRef(fs, two.paths), (caught: unknown) => {
    assert.ok(caught instanceof LayoutRecordError);
    assert.equal(caught.path, "workflow_id");
    return true;
  });
  // Whether a result may be rewritten is decided on the attempt's own record, so that fails too.
  await writeAttemptResult(fs, two.paths, { status: "completed", exit_code: 0 });
  await assert.rejects(
    () => writeAttemptResult(fs, two.paths, { status: "failed", exit_code: 1 }),
    LayoutRecordError,
  );
  assert.deepEqual(await readTraceRef(fs, one.paths), one.traceRef);
});

test("a trace_ref.json recording only the raw directory (as the seed names it) is read", async () => {
  const { fs, paths } = await setup();
  const attempt = paths.attempt(26, "outer");
  await fs.mkdir(attempt.iterationDir, { recursive: true });
  await writeJson(fs, attempt.traceRefJson, {
    raw_dir: "raw/0026_outer",
    raw_dir_ref: "session:/raw/0026_outer",
  });
  assert.deepEqual(await readTraceRef(fs, attempt), {
    raw_dir: "raw/0026_outer",
    raw_dir_ref: "session:/raw/0026_outer",
    iteration: 26,
    workflow_id: "outer",
  });
  // The running attempt's result may be written again: it is judged by iteration and workflow.
  await patchState(fs, paths.dir, {
    iteration: 26,
    current_task: { workflow_id: "outer", iteration: 26, attempt_id: "a26" },
  });
  await writeAttemptResult(fs, attempt, { status: "partial" });
  await writeAttemptResult(fs, attempt, { status: "completed", exit_code: 0 });
  assert.deepEqual(await readJson(fs, attempt.resultJson), { status: "completed", exit_code: 0 });
  // Another iteration's raw directory is refused, as in a full record.
  await writeJson(fs, attempt.traceRefJson, {
    raw_dir: "raw/0025_outer",
    raw_dir_ref: "session:/raw/0025_outer",
  });
  await assert.rejects(() => readTraceRef(fs, attempt), (caught: unknown) => {
    assert.ok(caught instanceof LayoutRecordError, String(caught));
    assert.equal(caught.path, "raw_dir");
    return true;
  });
});

test("a frozen workflow snapshot cannot be rewritten with other contents", async () => {
  const { fs, paths } = await setup();
  const options = { prompt: "p", pathsMap: {}, snapshot: { "assignment.json": { a: 1 } } };
  await createAttemptArtifacts(fs, paths, ATTEMPT, options);
  // The same contents again is fine (a resumed dispatch).
  await createAttemptArtifacts(fs, paths, ATTEMPT, options);
  const iteration = `${paths.dir}/iterations/0026_outer`;
  const written = fs.snapshotTree(iteration);
  // Refused before anything is written: the prompt and paths stay those of the frozen snapshot.
  await assert.rejects(
    createAttemptArtifacts(fs, paths, ATTEMPT, {
      prompt: "another prompt",
      pathsMap: { raw_dir: "elsewhere" },
      snapshot: { "assignment.json": { a: 2 } },
    }),
    ImmutableArtifactError,
  );
  assert.deepEqual(fs.snapshotTree(iteration), written);
  await assert.rejects(
    createAttemptArtifacts(fs, paths, ATTEMPT, { ...options, snapshot: { "../escape": 1 } }),
    LayoutError,
  );
  // Two creations with other snapshots at once: one wins, and its prompt is the one kept.
  const [a, b] = await Promise.allSettled(
    ["x", "y"].map((tag) =>
      createAttemptArtifacts(fs, paths, { ...ATTEMPT, attemptId: "b0b0b0b0b0b0" }, {
        prompt: tag,
        pathsMap: {},
        snapshot: { "assignment.json": { tag } },
      })
    ),
  );
  assert.deepEqual([a?.status, b?.status].sort(), ["fulfilled", "rejected"]);
  const winner = a?.status === "fulfilled" ? "x" : "y";
  assert.equal(await readText(fs, `${iteration}/prompt.txt`), winner);
});

test("mirror sessions are read-only here", async () => {
  const { fs } = await setup();
  const mirror = new SessionPaths("/repo/mirror", "mirror");
  await assert.rejects(
    createAttemptArtifacts(fs, mirror, ATTEMPT, { prompt: "p", pathsMap: {} }),
    UnsupportedLayoutError,
  );
  await assert.rejects(
    writeGitReceipt(fs, mirror, "x", ATTEMPT, "after", { head: null, branch: null, dirty: null }),
    UnsupportedLayoutError,
  );
});

test("a git receipt lives in receipts/ with its verbose output in the attempt's raw git/", async () => {
  const { fs, paths } = await setup();
  const written = await writeGitReceipt(fs, paths, ROOT_ID, ATTEMPT, "after", {
    head: "0123abcd",
    branch: "main",
    dirty: false,
    rawStatus: new TextEncoder().encode('{"path":"a.ts"}\n'),
    rawDiff: new TextEncoder().encode("diff --git a/a.ts b/a.ts\n"),
  }, deterministic());
  assert.equal(written.file, `${paths.dir}/receipts/0026_outer_git_after.json`);
  assert.equal(written.ref, "session:/receipts/0026_outer_git_after.json");
  const receipt = await readJson(fs, written.file);
  assert.equal(receipt.status_path, null);
  assert.equal(receipt.diff_path, null);
  assert.equal(receipt.raw_status_ref, "session:/raw/0026_outer/git/after-status.jsonl");
  assert.equal(receipt.raw_diff_ref, "session:/raw/0026_outer/git/after-diff.patch");
  assert.equal(
    await readText(fs, `${paths.dir}/raw/0026_outer/git/after-diff.patch`),
    "diff --git a/a.ts b/a.ts\n",
  );
  await assert.rejects(fs.lstat(`${paths.dir}/git_receipts`), { code: "ENOENT" });
});

/** Writes a passing eval receipt for ATTEMPT with an optional override. */
async function writeEvalReceipt(
  fs: MemoryFs,
  paths: SessionPaths,
  overrides: Record<string, unknown> = {},
): Promise<void> {
  await writeJson(
    fs,
    paths.evalReceipt("tests-pass"),
    evalReceipt(ROOT_ID, ATTEMPT.attemptId, overrides),
  );
}

async function evalReady(): Promise<{ fs: MemoryFs; paths: SessionPaths }> {
  const { fs, paths } = await setup();
  await createAttemptArtifacts(fs, paths, ATTEMPT, { prompt: "p", pathsMap: {} });
  await writeJson(fs, `${paths.dir}/raw/0026_outer/eval/report.json`, { passed: 12 });
  await writeGitReceipt(fs, paths, ROOT_ID, ATTEMPT, "after", {
    head: "c0ffee",
    branch: "main",
    dirty: false,
  });
  return { fs, paths };
}

test("an eval receipt bound to its producing attempt is accepted with a sidecar", async () => {
  const { fs, paths } = await evalReady();
  await writeEvalReceipt(fs, paths);
  const sidecar = await acceptEvalReceipt(fs, paths, "tests-pass", {
    sessionId: ROOT_ID,
    ...deterministic(),
  });
  assert.equal(sidecar.receipt_ref, "session:/eval_receipts/tests-pass.json");
  assert.equal(
    sidecar.receipt_sha256,
    sha256Ref(await fs.readFile(paths.evalReceipt("tests-pass"))),
  );
  assert.equal(
    sidecar.git_receipt_sha256,
    sha256Ref(await fs.readFile(`${paths.dir}/receipts/0026_outer_git_after.json`)),
  );
  assert.deepEqual(
    await readJson(fs, `${paths.dir}/eval_receipts/accepted/tests-pass.json`),
    sidecar,
  );
});

test("an eval receipt that cites another attempt's evidence is refused", async () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ raw_report_refs: ["session:/raw/0025_outer/eval/report.json"] }, "raw_report_refs"],
    [{ raw_report_refs: [] }, "raw_report_refs"],
    [{ git_receipt_ref: "session:/receipts/0025_outer_git_after.json" }, "git_receipt_ref"],
    [{ git_receipt_ref: "session:/receipts/0026_outer_git_before.json" }, "git_receipt_ref"],
    [{ eval_id: "other" }, "eval_id"],
    [{ verdict: "maybe" }, "verdict"],
    [{
      producer: { session_id: "002_other", workflow_id: "outer", attempt_id: "x", iteration: 26 },
    }, "producer.session_id"],
  ];
  for (const [override, path] of cases) {
    const { fs, paths } = await evalReady();
    await writeEvalReceipt(fs, paths, override);
    await assert.rejects(
      acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.equal(error.path, path, error.message);
        return true;
      },
    );
    await assert.rejects(fs.lstat(paths.evalAcceptedSidecar("tests-pass")), { code: "ENOENT" });
  }
});

test("an eval receipt whose raw report was never written is refused", async () => {
  const { fs, paths } = await evalReady();
  await fs.remove(`${paths.dir}/raw/0026_outer/eval/report.json`);
  await writeEvalReceipt(fs, paths);
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID }),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "raw_report_refs[0]",
  );
});

test("records written before JSON was ASCII-escaped are the same records when written again", async () => {
  const { fs, paths } = await setup();
  const snapshot = { "assignment.json": { objective: "Écrire la doc ✓" } };
  const options = { prompt: "p", pathsMap: {}, snapshot };
  const first = await createAttemptArtifacts(fs, paths, ATTEMPT, options);
  const raw = (value: unknown) => new TextEncoder().encode(JSON.stringify(value, null, 2));
  // The same records as an older version wrote them: raw UTF-8, not escaped.
  const assignment = `${first.paths.snapshotDir(ATTEMPT.attemptId)}/assignment.json`;
  await fs.writeFile(assignment, raw(snapshot["assignment.json"]));
  const result = { status: "completed", summary: "Terminé ✓" };
  await fs.writeFile(first.paths.resultJson, raw(result));
  await patchState(fs, paths.dir, { status: "stopped", current_task: null });
  const again = await createAttemptArtifacts(fs, paths, ATTEMPT, options);
  assert.equal(
    again.snapshotHashes["assignment.json"],
    sha256Ref(await fs.readFile(assignment)),
    "the hash of the bytes on disk",
  );
  await writeAttemptResult(fs, first.paths, result); // the attempt is over: only the same record
  await assert.rejects(
    writeAttemptResult(fs, first.paths, { ...result, summary: "autre" }),
    ImmutableArtifactError,
  );
  assert.deepEqual(await fs.readFile(first.paths.resultJson), raw(result));
});

test("a record in other bytes is the same only when it differs by escapes: not another number", async () => {
  const { fs, paths } = await setup();
  const options = { prompt: "p", pathsMap: {}, snapshot: { "assignment.json": { budget: 1 } } };
  const first = await createAttemptArtifacts(fs, paths, ATTEMPT, options);
  const encode = (text: string) => new TextEncoder().encode(text);
  // Written by a writer with exact integers: another number than any a double holds.
  const assignment = `${first.paths.snapshotDir(ATTEMPT.attemptId)}/assignment.json`;
  await fs.writeFile(assignment, encode('{\n  "budget": 9007199254740993\n}'));
  await assert.rejects(
    createAttemptArtifacts(fs, paths, ATTEMPT, {
      ...options,
      snapshot: { "assignment.json": { budget: 9007199254740992 } },
    }),
    ImmutableArtifactError,
  );
  await fs.writeFile(first.paths.resultJson, encode('{\n  "tokens": 9007199254740993\n}'));
  await patchState(fs, paths.dir, { status: "stopped", current_task: null });
  await assert.rejects(
    writeAttemptResult(fs, first.paths, { tokens: 9007199254740992 }),
    ImmutableArtifactError,
  );
});

test("a state.json copied from another session never reopens a finished attempt's result", async () => {
  const { fs, paths } = await setup();
  const first = await createAttemptArtifacts(fs, paths, ATTEMPT, { prompt: "p", pathsMap: {} });
  const result = { status: "completed", summary: "done" };
  await writeAttemptResult(fs, first.paths, result);
  await patchState(fs, paths.dir, { status: "stopped", current_task: null });
  // Another session's state, running this very iteration, put in this session's place.
  const state = await readJson(fs, `${paths.dir}/state.json`);
  await writeJson(fs, `${paths.dir}/state.json`, {
    ...state,
    session_id: "002_another-goal",
    status: "running",
    current_task: {
      iteration: ATTEMPT.iteration,
      workflow_id: ATTEMPT.workflowId,
      attempt_id: ATTEMPT.attemptId,
    },
  });
  await assert.rejects(
    writeAttemptResult(fs, first.paths, { ...result, summary: "rewritten" }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, `${paths.dir}/state.json`);
      assert.equal(error.path, "session_id");
      return true;
    },
  );
  assert.deepEqual(
    JSON.parse(new TextDecoder().decode(await fs.readFile(first.paths.resultJson))),
    result,
  );
});

test("receipts written in a session's directory are that session's own", async () => {
  const fs = await newRepo();
  const a = await newRoot(fs);
  const b = await newRoot(fs, "Second goal");
  await createAttemptArtifacts(fs, a.paths, ATTEMPT, { prompt: "p", pathsMap: {} });
  // A git receipt for B, written into A's receipts/: refused before anything is written.
  await assert.rejects(
    writeGitReceipt(fs, a.paths, b.sessionId, ATTEMPT, "after", {
      head: "c0ffee",
      branch: "main",
      dirty: false,
      rawDiff: new TextEncoder().encode("diff\n"),
    }),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "session_id",
  );
  await assert.rejects(fs.lstat(`${a.paths.dir}/receipts/0026_outer_git_after.json`), {
    code: "ENOENT",
  });
  await assert.rejects(fs.lstat(`${a.paths.dir}/raw/0026_outer/git/after-diff.patch`), {
    code: "ENOENT",
  });
  // An eval receipt in A naming B, accepted "for B": the directory decides.
  await writeJson(fs, `${a.paths.dir}/raw/0026_outer/eval/report.json`, { passed: 12 });
  await writeGitReceipt(fs, a.paths, ROOT_ID, ATTEMPT, "after", {
    head: "c0ffee",
    branch: "main",
    dirty: false,
  });
  const foreign = { session_id: b.sessionId, workflow_id: "outer", attempt_id: ATTEMPT.attemptId };
  await writeEvalReceipt(fs, a.paths, { producer: { ...foreign, iteration: 26 } });
  await assert.rejects(
    acceptEvalReceipt(fs, a.paths, "tests-pass", { sessionId: b.sessionId }),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "producer.session_id",
  );
  await assert.rejects(fs.lstat(a.paths.evalAcceptedSidecar("tests-pass")), { code: "ENOENT" });
});

test("an eval receipt is bound only to a git-after receipt of the same session, workflow and iteration", async () => {
  const gitFile = (paths: SessionPaths) => `${paths.dir}/receipts/0026_outer_git_after.json`;
  for (
    const change of [
      { session_id: "002_second-goal" },
      { workflow_id: "inner" },
      { iteration: 25 },
    ]
  ) {
    const { fs, paths } = await evalReady();
    await writeJson(fs, gitFile(paths), { ...(await readJson(fs, gitFile(paths))), ...change });
    await writeEvalReceipt(fs, paths);
    await assert.rejects(
      acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.equal(error.path, "git_receipt_ref", JSON.stringify(change));
        return true;
      },
    );
    await assert.rejects(fs.lstat(paths.evalAcceptedSidecar("tests-pass")), { code: "ENOENT" });
  }
});

for (const sealed of [true, false]) {
  test(
    `a directory where ${
      sealed ? "a sealed acceptance's sidecar was" : "a first acceptance's sidecar goes"
    } is refused by name, changing nothing`,
    async () => {
      const { fs, paths } = await evalReady();
      await writeEvalReceipt(fs, paths);
      const options = { sessionId: ROOT_ID, ...deterministic() };
      const sidecar = `${paths.dir}/eval_receipts/accepted/tests-pass.json`;
      if (sealed) {
        await acceptEvalReceipt(fs, paths, "tests-pass", options);
        await fs.remove(sidecar);
      }
      await fs.mkdir(sidecar, { recursive: true });
      const before = fs.snapshotTree();
      await assert.rejects(
        acceptEvalReceipt(fs, paths, "tests-pass", options),
        (error: unknown) => {
          assert.ok(error instanceof LayoutRecordError, String(error));
          assert.equal(error.file, sidecar);
          return true;
        },
      );
      // Nothing changed: above all, state.json seals no acceptance whose sidecar cannot be written.
      assert.deepEqual(fs.snapshotTree(), before);
    },
  );
}

test("an invalid iteration or workflow id (and, for a git receipt, attempt id) is a LayoutOptionError naming the field, before anything is written", async () => {
  const { fs, paths } = await setup();
  const options = { prompt: "p", pathsMap: {}, ...deterministic() };
  const before = fs.snapshotTree("/");
  const bad: [Partial<AttemptIdentity>, string][] = [
    [{ iteration: -1 }, "iteration"],
    [{ iteration: 1.5 }, "iteration"],
    [{ workflowId: "../x" }, "workflowId"],
    [{ workflowId: "" }, "workflowId"],
    [{ attemptId: "../a" }, "attemptId"],
    [{ attemptId: 7 as unknown as string }, "attemptId"],
  ];
  for (const [change, field] of bad) {
    const attempt = { ...ATTEMPT, ...change };
    const named = (error: unknown): boolean => {
      assert.ok(error instanceof LayoutOptionError, `${field}: ${String(error)}`);
      assert.equal(error.option, field);
      assert.equal(error.value, change[field as keyof AttemptIdentity]);
      return true;
    };
    if (field === "attemptId") {
      // The attempt's path does not hold its id: trace_ref.json is named, at its field.
      await assert.rejects(createAttemptArtifacts(fs, paths, attempt, options), (error) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.equal(error.file, paths.attempt(ATTEMPT.iteration, "outer").traceRefJson);
        assert.equal(error.path, "attempt_id");
        return true;
      });
    } else await assert.rejects(createAttemptArtifacts(fs, paths, attempt, options), named);
    await assert.rejects(
      writeGitReceipt(fs, paths, ROOT_ID, attempt, "after", {
        head: null,
        branch: null,
        dirty: null,
      }),
      named,
    );
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a result is final once the session runs another attempt of the same iteration and workflow", async () => {
  const { fs, paths } = await setup();
  const first = await createAttemptArtifacts(fs, paths, ATTEMPT, { prompt: "p", pathsMap: {} });
  const result = { status: "completed", summary: "done" };
  await writeAttemptResult(fs, first.paths, result);
  // The session now runs a retry of iteration 26 / outer under another attempt id: the attempt
  // trace_ref.json names (ATTEMPT) has finished, so its result is final.
  await patchState(fs, paths.dir, {
    status: "running",
    current_task: {
      iteration: ATTEMPT.iteration,
      workflow_id: ATTEMPT.workflowId,
      attempt_id: "retry0000002",
    },
  });
  await assert.rejects(
    writeAttemptResult(fs, first.paths, { ...result, summary: "rewritten by another attempt" }),
    (error: unknown) => {
      assert.ok(error instanceof ImmutableArtifactError, String(error));
      assert.equal(error.file, first.paths.resultJson);
      return true;
    },
  );
  assert.deepEqual(await readJson(fs, first.paths.resultJson), result);
  // The attempt trace_ref.json names may still rewrite its result while it runs.
  await patchState(fs, paths.dir, {
    status: "running",
    current_task: {
      iteration: ATTEMPT.iteration,
      workflow_id: ATTEMPT.workflowId,
      attempt_id: ATTEMPT.attemptId,
    },
  });
  await writeAttemptResult(fs, first.paths, { ...result, summary: "rewritten while running" });
  assert.equal((await readJson(fs, first.paths.resultJson)).summary, "rewritten while running");
});

test("an eval receipt citing its attempt's raw report and anything more is refused", async () => {
  for (
    const refs of [
      ["session:/raw/0026_outer/eval/report.json", "session:/raw/0025_outer/eval/report.json"],
      ["session:/raw/0026_outer/eval/report.json", "session:/raw/0026_outer/eval/report.json"],
    ]
  ) {
    const { fs, paths } = await evalReady();
    await fs.mkdir(`${paths.dir}/raw/0025_outer/eval`, { recursive: true });
    await writeJson(fs, `${paths.dir}/raw/0025_outer/eval/report.json`, { passed: 0 });
    await writeEvalReceipt(fs, paths, { raw_report_refs: refs });
    await assert.rejects(
      acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID, ...deterministic() }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.equal(error.path, "raw_report_refs", error.message);
        return true;
      },
    );
    await assert.rejects(fs.lstat(paths.evalAcceptedSidecar("tests-pass")), { code: "ENOENT" });
  }
});

test("an eval receipt is not bound to the git-after receipt another attempt of its iteration wrote", async () => {
  // receipts/0026_outer_git_after.json was written by ATTEMPT; a retry of iteration 26 / outer
  // (another attempt id) cites the same file name but has no git-after receipt of its own.
  const { fs, paths } = await evalReady();
  await writeEvalReceipt(fs, paths, {
    producer: {
      session_id: ROOT_ID,
      workflow_id: "outer",
      attempt_id: "retry0000002",
      iteration: 26,
    },
  });
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID, ...deterministic() }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.path, "git_receipt_ref");
      return true;
    },
  );
  await assert.rejects(fs.lstat(paths.evalAcceptedSidecar("tests-pass")), { code: "ENOENT" });
  assert.deepEqual((await readJson(fs, `${paths.dir}/state.json`)).accepted_eval_seals, {});
});

test("a file where a first acceptance's sidecar directory goes is refused by name before the seal is written", async () => {
  const { fs, paths } = await evalReady();
  await writeEvalReceipt(fs, paths);
  const accepted = `${paths.dir}/eval_receipts/accepted`;
  await writeJson(fs, accepted, { planted: true });
  const before = fs.snapshotTree();
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID, ...deterministic() }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, `${accepted}/tests-pass.json`);
      return true;
    },
  );
  // Nothing changed: above all, state.json seals no acceptance whose sidecar cannot be written.
  assert.deepEqual(fs.snapshotTree(), before);
});
