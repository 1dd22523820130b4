import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { NotFound } from "../mod.ts";
import {
  acceptEvalReceipt,
  createAttemptArtifacts,
  type Handoff,
  type HandoffExpectation,
  type HandoffObservation,
  ImmutableArtifactError,
  LayoutRecordError,
  loadSessionTree,
  observeHandoff,
  parseHandoff,
  processNextChildRequest,
  readControl,
  readHandoff,
  readTerminalControl,
  recordChildOutcome,
  SessionPaths,
  SessionStateError,
  sha256Ref,
  TopologyError,
  updateSessionState,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import {
  commitTerminalState,
  evalReceipt,
  newRepo,
  newRoot,
  patchState,
  readJson,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";

async function setup(): Promise<{ fs: MemoryFs; paths: SessionPaths; goal: string }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  return { fs, paths: root.paths, goal: root.manifest.goal_hash };
}

function handoffAt(goal: string, revision: number, extra: Partial<Handoff> = {}): Handoff {
  return {
    schema_version: 1,
    session_id: ROOT_ID,
    goal_sha256: goal,
    revision,
    producer: { workflow_id: "outer", attempt_id: "a26" },
    summary: `Revision ${revision}`,
    accepted_outcomes: [],
    open_work: [],
    risks: [],
    decision_refs: [],
    evidence_refs: [],
    delivery_refs: [],
    eval_refs: [],
    updated_at: "2026-04-19T15:00:00Z",
    ...extra,
  };
}

const goalMet = {
  schema_version: 3,
  state: "stopped",
  stop_reason: "goal_met",
  control_id: "done-1",
  reason: "Every outcome is accepted",
  created_at: "2026-04-19T15:00:00Z",
  producer: { session_id: ROOT_ID, workflow_id: "outer", attempt_id: "a26" },
  evidence_refs: ["session:/project_state/finished.md"],
};
const current = {
  sessionId: ROOT_ID,
  workflowId: "outer",
  attemptId: "a26",
  completionRole: "outer",
};

test("the revision-zero scaffold handoff counts as missing", async () => {
  const { fs, paths, goal } = await setup();
  const seen = await observeHandoff(fs, paths, {
    sessionId: ROOT_ID,
    goalSha256: goal,
    storedRevision: 0,
    storedSha256: null,
  });
  assert.equal(seen.status, "missing");
  await fs.remove(paths.handoffJson);
  assert.equal(
    (await observeHandoff(fs, paths, {
      sessionId: ROOT_ID,
      goalSha256: goal,
      storedRevision: 0,
      storedSha256: null,
    }))
      .status,
    "missing",
  );
});

test("observeHandoff tells valid, invalid and non-monotonic handoffs apart", async () => {
  const { fs, paths, goal } = await setup();
  const expect: HandoffExpectation = {
    sessionId: ROOT_ID,
    goalSha256: goal,
    storedRevision: 2,
    storedSha256: `sha256:${"0".repeat(64)}`,
    handoffOwner: "outer",
    currentAttemptId: "a26",
    knownAttemptIds: ["a20"],
  };
  const observe = async (value: unknown, overrides: Partial<HandoffExpectation> = {}) => {
    if (typeof value === "string") await writeText(fs, paths.handoffJson, value);
    else await writeJson(fs, paths.handoffJson, value);
    return await observeHandoff(fs, paths, { ...expect, ...overrides });
  };
  const valid = await observe(handoffAt(goal, 3));
  assert.equal(valid.status, "valid");
  assert.equal(valid.revision, 3);
  assert.equal(valid.sha256, sha256Ref(await fs.readFile(paths.handoffJson)));

  assert.equal((await observe("{not json")).status, "invalid");
  assert.equal((await observe({ ...handoffAt(goal, 3), extra: 1 })).status, "invalid");
  assert.equal((await observe(handoffAt(goal, 3, { session_id: "002_other" }))).status, "invalid");
  assert.equal((await observe(handoffAt(`sha256:${"1".repeat(64)}`, 3))).status, "invalid");
  assert.equal(
    (await observe(handoffAt(goal, 3, { producer: { workflow_id: "eval", attempt_id: "a26" } })))
      .status,
    "invalid",
  );
  assert.equal(
    (await observe(handoffAt(goal, 3, { producer: { workflow_id: "outer", attempt_id: "zz" } })))
      .status,
    "invalid",
  );
  assert.equal((await observe(handoffAt(goal, 1))).status, "non_monotonic");
  assert.equal((await observe(handoffAt(goal, 2))).status, "non_monotonic");
  const same = await observe(handoffAt(goal, 2));
  assert.equal(
    (await observe(handoffAt(goal, 2), { storedSha256: same.sha256 })).status,
    "valid",
    "an unchanged handoff at the stored revision is valid",
  );
});

/** What attempt a26 expects of the root's handoff, stored at revision 4 by attempt a20. */
function restampExpectation(
  goal: string,
  stored: Handoff,
  storedSha256: string,
): HandoffExpectation {
  return {
    sessionId: ROOT_ID,
    goalSha256: goal,
    storedRevision: 4,
    storedSha256,
    storedHandoff: parseHandoff(stored, "stored"),
    currentAttemptId: "a26",
    knownAttemptIds: ["a20"],
  };
}
test("a provenance-only re-stamp by the current attempt keeps the handoff valid", async () => {
  const { fs, paths, goal } = await setup();
  const stored = handoffAt(goal, 4, { producer: { workflow_id: "outer", attempt_id: "a20" } });
  await writeJson(fs, paths.handoffJson, stored);
  const storedSha256 = sha256Ref(await fs.readFile(paths.handoffJson));
  const restamped = handoffAt(goal, 4, { updated_at: "2026-04-19T16:00:00Z" });
  await writeJson(fs, paths.handoffJson, restamped);
  const expect = restampExpectation(goal, stored, storedSha256);
  assert.equal((await observeHandoff(fs, paths, expect)).status, "valid");
  // A changed summary at the same revision is not a re-stamp.
  await writeJson(fs, paths.handoffJson, { ...restamped, summary: "rewritten" });
  assert.equal((await observeHandoff(fs, paths, expect)).status, "non_monotonic");
  // Going back in time is not a re-stamp either.
  await writeJson(fs, paths.handoffJson, { ...restamped, updated_at: "2026-04-19T14:00:00Z" });
  assert.equal((await observeHandoff(fs, paths, expect)).status, "non_monotonic");
});

test("a malformed control.json is a typed error naming the file and field", async () => {
  const { fs, paths } = await setup();
  await writeJson(fs, paths.controlJson, { ...goalMet, producer: { session_id: ROOT_ID } });
  await assert.rejects(readControl(fs, paths), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError);
    assert.equal(error.file, paths.controlJson);
    assert.equal(error.path, "producer.workflow_id");
    return true;
  });
  await writeText(fs, paths.controlJson, "{");
  await assert.rejects(readControl(fs, paths), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError);
    assert.equal(error.file, paths.controlJson);
    assert.equal(error.path, "");
    return true;
  });
});

test("readTerminalControl accepts only a record from the exact current attempt", async () => {
  const { fs, paths } = await setup();
  assert.equal(await readTerminalControl(fs, paths, current), undefined);
  await writeJson(fs, paths.controlJson, goalMet);
  const accepted = await readTerminalControl(fs, paths, current);
  assert.equal(accepted?.record.control_id, "done-1");
  assert.equal(accepted?.sha256, sha256Ref(await fs.readFile(paths.controlJson)));
  await assert.rejects(
    readTerminalControl(fs, paths, { ...current, attemptId: "a27" }),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "producer.attempt_id",
  );
  await writeJson(fs, paths.controlJson, {
    state: "stopped",
    stop_reason: "max_turns",
    schema_version: 1,
  });
  await assert.rejects(
    readTerminalControl(fs, paths, current),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "schema_version",
  );
});

test("readTerminalControl takes the producer roles from the session's frozen contract", async () => {
  const { fs, paths } = await setup();
  // The contract (CONTRACTS) gives goal_met and unresolvable_error to "outer" only; the current
  // task is a "worker" attempt and the caller repeats no role.
  const worker = { sessionId: ROOT_ID, workflowId: "worker", attemptId: "a26" };
  const producer = { session_id: ROOT_ID, workflow_id: "worker", attempt_id: "a26" };
  const refusedRole = (error: unknown) =>
    error instanceof LayoutRecordError && error.file === paths.controlJson &&
    error.path === "producer.workflow_id" && error.value === "worker";
  await writeJson(fs, paths.controlJson, { ...goalMet, producer });
  await assert.rejects(readTerminalControl(fs, paths, worker), refusedRole);
  await writeJson(fs, paths.controlJson, { ...blocker, producer });
  await assert.rejects(readTerminalControl(fs, paths, worker), refusedRole);
  // A caller's role cannot widen the contract's.
  await assert.rejects(
    readTerminalControl(fs, paths, { ...worker, blockerReportingRoles: ["worker"] }),
    refusedRole,
  );

  // A legacy state records no contract: the projection workflow_contract.json decides.
  await patchState(fs, paths.dir, { workflow_contract: null, workflow_contract_sha256: null });
  await writeJson(fs, paths.workflowContractJson, {
    orchestration: { completion_role: "outer" },
    terminal_blocker_reporting_roles: ["outer", "worker"],
  });
  const accepted = await readTerminalControl(fs, paths, worker);
  assert.equal(accepted?.record.stop_reason, "unresolvable_error");
  await writeJson(fs, paths.controlJson, { ...goalMet, producer });
  await assert.rejects(readTerminalControl(fs, paths, worker), refusedRole);
  // A role that is not a workflow id is an error naming the contract's file and field.
  await writeJson(fs, paths.workflowContractJson, { orchestration: { completion_role: 7 } });
  await assert.rejects(
    readTerminalControl(fs, paths, worker),
    (error: unknown) =>
      error instanceof LayoutRecordError && error.file === paths.workflowContractJson &&
      error.path === "orchestration.completion_role",
  );
  // A legacy state that pins the projection: a projection that is gone is no "no contract".
  await writeJson(fs, paths.workflowContractJson, {
    orchestration: { completion_role: "outer" },
  });
  await patchState(fs, paths.dir, {
    workflow_contract_sha256: sha256Ref(await fs.readFile(paths.workflowContractJson)),
  });
  await assert.rejects(readTerminalControl(fs, paths, worker), refusedRole);
  await fs.remove(paths.workflowContractJson);
  await assert.rejects(
    readTerminalControl(fs, paths, worker),
    (error: unknown) =>
      error instanceof LayoutRecordError && error.file === paths.stateJson &&
      error.path === "workflow_contract_sha256",
  );
  // Without the engine-owned state.json there is no contract to trust, nor a task to judge by.
  const state = await fs.readFile(paths.stateJson);
  await fs.remove(paths.stateJson);
  await writeJson(fs, paths.workflowContractJson, {
    orchestration: { completion_role: "worker" },
  });
  await assert.rejects(
    readTerminalControl(fs, paths, worker),
    (error: unknown) => error instanceof NotFound && error.path === paths.stateJson,
  );
  await fs.writeFile(paths.stateJson, state);
  await patchState(fs, paths.dir, { workflow_contract_sha256: null });
  // ... and in the contract state.json records, the field under workflow_contract.
  await patchState(fs, paths.dir, {
    workflow_contract: { terminal_blocker_reporting_roles: "worker" },
  });
  await writeJson(fs, paths.controlJson, { ...blocker, producer });
  await assert.rejects(
    readTerminalControl(fs, paths, worker),
    (error: unknown) =>
      error instanceof LayoutRecordError && error.file === paths.stateJson &&
      error.path === "workflow_contract.terminal_blocker_reporting_roles",
  );
});

test("a malformed or stale handoff never overrides an authentic completion", async () => {
  for (const bad of ["{torn", "stale"]) {
    // A fresh session for each case: a session's outcome is written once.
    const { fs, paths, goal } = await setup();
    await writeJson(fs, paths.controlJson, goalMet);
    const control = await readTerminalControl(fs, paths, current);
    await commitTerminalState(fs, paths.dir, "goal_met", 9, "2026-04-19T15:00:01Z");
    await writeText(
      fs,
      paths.handoffJson,
      bad === "stale" ? JSON.stringify(handoffAt(goal, 1)) : bad,
    );
    const handoff = await observeHandoff(fs, paths, {
      sessionId: ROOT_ID,
      goalSha256: goal,
      storedRevision: 2,
      storedSha256: `sha256:${"0".repeat(64)}`,
    });
    assert.notEqual(handoff.status, "valid");
    const outcome = await writeSessionOutcome(fs, paths, {
      sessionId: ROOT_ID,
      rootSessionId: ROOT_ID,
      goalSha256: goal,
      terminalStatus: "goal_met",
      stopReason: "goal_met",
      terminalStateRevision: 9,
      terminalAt: "2026-04-19T15:00:01Z",
      control,
      handoff,
      evalRefs: [],
    });
    assert.equal(outcome.terminal_status, "goal_met");
    assert.equal(outcome.stop_reason, "goal_met");
    assert.deepEqual(outcome.fallback_summary, { source: "control_reason", text: goalMet.reason });
    assert.equal(outcome.handoff.status, handoff.status);
    assert.equal(outcome.handoff.revision, null);
    assert.deepEqual(outcome.control, { ref: "session:/control.json", sha256: control?.sha256 });
    assert.deepEqual(outcome.evidence_refs, ["session:/project_state/finished.md"]);
    assert.deepEqual(outcome.trace_seal_refs, []);
    assert.deepEqual(await readJson(fs, paths.sessionOutcomeJson), outcome);
  }
});

test("a valid handoff is bound into the outcome without a fallback", async () => {
  const { fs, paths, goal } = await setup();
  await writeJson(fs, paths.controlJson, goalMet);
  const control = await readTerminalControl(fs, paths, current);
  await writeJson(fs, paths.handoffJson, handoffAt(goal, 3));
  const handoff = await observeHandoff(fs, paths, {
    sessionId: ROOT_ID,
    goalSha256: goal,
    storedRevision: 2,
    storedSha256: null,
  });
  await commitTerminalState(fs, paths.dir, "goal_met", 9, "2026-04-19T15:00:01Z");
  const outcome = await writeSessionOutcome(fs, paths, {
    sessionId: ROOT_ID,
    rootSessionId: ROOT_ID,
    goalSha256: goal,
    terminalStatus: "goal_met",
    stopReason: "goal_met",
    terminalStateRevision: 9,
    terminalAt: "2026-04-19T15:00:01Z",
    control,
    handoff,
    deliveryRefs: [
      "session:/receipts/0026_outer_delivery.json",
      "session:/receipts/0026_outer_delivery.json",
    ],
  });
  assert.equal(outcome.handoff.status, "valid");
  assert.equal(outcome.handoff.revision, 3);
  assert.equal(outcome.fallback_summary, undefined);
  assert.deepEqual(outcome.delivery_refs, ["session:/receipts/0026_outer_delivery.json"]);
});

test("a completion without its accepted control is refused; an engine stop falls back to its reason", async () => {
  const { fs, paths, goal } = await setup();
  const handoff = await observeHandoff(fs, paths, {
    sessionId: ROOT_ID,
    goalSha256: goal,
    storedRevision: 0,
    storedSha256: null,
  });
  const base = {
    sessionId: ROOT_ID,
    rootSessionId: ROOT_ID,
    goalSha256: goal,
    terminalStateRevision: 4,
    terminalAt: "2026-04-19T15:00:01Z",
    handoff,
  };
  await assert.rejects(
    writeSessionOutcome(fs, paths, { ...base, terminalStatus: "goal_met", stopReason: "goal_met" }),
    SessionStateError,
  );
  await commitTerminalState(fs, paths.dir, "max_turns", 4, "2026-04-19T15:00:01Z");
  const outcome = await writeSessionOutcome(fs, paths, {
    ...base,
    terminalStatus: "max_turns",
    stopReason: "max_turns",
  });
  assert.equal(outcome.control, null);
  assert.deepEqual(outcome.fallback_summary, { source: "engine_stop_reason", text: "max_turns" });
});

test("a malformed handoff.json read directly is a typed error naming the file and field", async () => {
  const { fs, paths, goal } = await setup();
  assert.equal((await readHandoff(fs, paths)).record.revision, 0);
  await writeJson(fs, paths.handoffJson, { ...handoffAt(goal, 2), accepted_outcomes: "all" });
  await assert.rejects(readHandoff(fs, paths), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError);
    assert.equal(error.file, paths.handoffJson);
    assert.equal(error.path, "accepted_outcomes");
    return true;
  });
});

// ---------------------------------------------------------------------------------------------
// The re-stamp rule compares instants, not strings

test("a re-stamp is judged by the instant of updated_at, fractional seconds included", async () => {
  const { fs, paths, goal } = await setup();
  const observeAt = async (storedAt: string, restampedAt: string) => {
    const stored = handoffAt(goal, 4, {
      producer: { workflow_id: "outer", attempt_id: "a20" },
      updated_at: storedAt,
    });
    await writeJson(fs, paths.handoffJson, stored);
    const storedSha256 = sha256Ref(await fs.readFile(paths.handoffJson));
    await writeJson(fs, paths.handoffJson, handoffAt(goal, 4, { updated_at: restampedAt }));
    return (await observeHandoff(fs, paths, restampExpectation(goal, stored, storedSha256))).status;
  };
  // 500 ms later ("Z" sorts after "." as text, so a string comparison called it earlier).
  assert.equal(await observeAt("2026-04-19T15:00:00Z", "2026-04-19T15:00:00.500Z"), "valid");
  // 900 ms earlier (a string comparison called it later).
  assert.equal(
    await observeAt("2026-04-19T15:00:00.900Z", "2026-04-19T15:00:00Z"),
    "non_monotonic",
  );
  // The same instant spelled two ways is not going back in time.
  assert.equal(await observeAt("2026-04-19T15:00:00+00:00", "2026-04-19T15:00:00Z"), "valid");
  assert.equal(await observeAt("2026-04-19T15:00:00.5Z", "2026-04-19T15:00:00.500000Z"), "valid");
  // Microseconds count (the engine writes them): 333 µs back is going back, 1 µs on is not.
  assert.equal(
    await observeAt("2026-04-19T15:00:00.123789Z", "2026-04-19T15:00:00.123456Z"),
    "non_monotonic",
  );
  assert.equal(
    await observeAt("2026-04-19T15:00:00.123456Z", "2026-04-19T15:00:00.123457+00:00"),
    "valid",
  );
});

// ---------------------------------------------------------------------------------------------
// goal_met: its evidence must exist and its eval receipts must be accepted (rules §3)

/** Accepts eval receipt `tests-pass` produced by attempt a26 (iteration 26) of the root. */
async function acceptedEval(fs: MemoryFs, paths: SessionPaths): Promise<void> {
  await writtenEval(fs, paths);
  await acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID });
}

/** Writes eval receipt `tests-pass` of attempt a26 (iteration 26) of the root, not accepted. */
async function writtenEval(fs: MemoryFs, paths: SessionPaths): Promise<void> {
  const attempt = { iteration: 26, workflowId: "outer", attemptId: "a26" };
  await createAttemptArtifacts(fs, paths, attempt, { prompt: "p", pathsMap: {} });
  await writeJson(fs, `${paths.dir}/raw/0026_outer/eval/report.json`, { passed: 3 });
  await writeGitReceipt(fs, paths, ROOT_ID, attempt, "after", {
    head: "c0ffee",
    branch: "main",
    dirty: false,
  });
  await writeJson(fs, paths.evalReceipt("tests-pass"), evalReceipt(ROOT_ID));
}

test("an eval receipt is accepted only while its session runs; one accepted before is returned again", async () => {
  const { fs, paths } = await setup();
  await writtenEval(fs, paths);
  await commitTerminalState(fs, paths.dir, "max_turns", 9, "2026-04-19T15:00:01Z");
  const state = await fs.readFile(paths.stateJson);
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID }),
    (error: unknown) => error instanceof SessionStateError && /max_turns/.test(error.message),
  );
  assert.deepEqual(await fs.readFile(paths.stateJson), state, "a terminal state stays frozen");
  // Accepted while running, then the session ended: a rerun returns the sealed acceptance.
  const running = await setup();
  await acceptedEval(running.fs, running.paths);
  await commitTerminalState(running.fs, running.paths.dir, "max_turns", 9, "2026-04-19T15:00:01Z");
  const again = await acceptEvalReceipt(running.fs, running.paths, "tests-pass", {
    sessionId: ROOT_ID,
  });
  assert.equal(again.eval_id, "tests-pass");
});

test("a goal_met control citing missing evidence or an unaccepted eval receipt is refused", async () => {
  const EVAL = "session:/eval_receipts/tests-pass.json";
  const refused = async (
    fields: Record<string, unknown>,
    path: string,
    prepare: (fs: MemoryFs, paths: SessionPaths) => Promise<void> = async () => {},
  ) => {
    const { fs, paths } = await setup();
    await prepare(fs, paths);
    await writeJson(fs, paths.controlJson, { ...goalMet, ...fields });
    await assert.rejects(readTerminalControl(fs, paths, current), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, paths.controlJson);
      assert.equal(error.path, path, error.message);
      return true;
    }, `${JSON.stringify(fields)} was accepted`);
  };
  await refused(
    { evidence_refs: ["session:/project_state/does-not-exist.md"] },
    "evidence_refs[0]",
  );
  await refused({
    evidence_refs: ["session:/project_state/finished.md", "session:/project_state/tasks"],
  }, "evidence_refs[1]");
  await refused({ evidence_refs: ["session:99_nobody:/x.md"] }, "evidence_refs[0]");
  // Never accepted: no acceptance seal.
  await refused(
    { eval_receipt_refs: ["session:/eval_receipts/never-accepted.json"] },
    "eval_receipt_refs[0]",
  );
  await refused({ eval_receipt_refs: [EVAL] }, "eval_receipt_refs[0]", async (fs, paths) => {
    await writeJson(fs, paths.evalReceipt("tests-pass"), { schema_version: 1 });
  });
  // Accepted, then edited: the bytes no longer match the seal.
  await refused({ eval_receipt_refs: [EVAL] }, "eval_receipt_refs[0]", async (fs, paths) => {
    await acceptedEval(fs, paths);
    const receipt = await readJson(fs, paths.evalReceipt("tests-pass"));
    await writeJson(fs, paths.evalReceipt("tests-pass"), { ...receipt, verdict: "fail" });
  });
  // Not an eval receipt of this session at all.
  await refused(
    { eval_receipt_refs: ["session:/project_state/finished.md"] },
    "eval_receipt_refs[0]",
  );
  // An accepted receipt and existing evidence are accepted, whatever the spelling.
  const { fs, paths } = await setup();
  await acceptedEval(fs, paths);
  await writeJson(fs, paths.controlJson, {
    ...goalMet,
    evidence_refs: ["session:/project_state/finished.md", "repo:/.gitignore"],
    eval_receipt_refs: [EVAL, `session:${ROOT_ID}:/eval_receipts/tests-pass.json`],
  });
  const accepted = await readTerminalControl(fs, paths, current);
  assert.deepEqual(accepted?.record.eval_receipt_refs, [
    EVAL,
    `session:${ROOT_ID}:/eval_receipts/tests-pass.json`,
  ]);
});

/** A control completing the root with the eval receipt `tests-pass`, and reading it. */
async function citeTestsPass(fs: MemoryFs, paths: SessionPaths) {
  await writeJson(fs, paths.controlJson, {
    ...goalMet,
    eval_receipt_refs: ["session:/eval_receipts/tests-pass.json"],
  });
  return await readTerminalControl(fs, paths, current);
}

function refusedAtEvalRef(paths: SessionPaths) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, paths.controlJson);
    assert.equal(error.path, "eval_receipt_refs[0]", error.message);
    return true;
  };
}

test("an acceptance is sealed in state.json, and only that seal lets goal_met cite the receipt", async () => {
  const { fs, paths } = await setup();
  await acceptedEval(fs, paths);
  const sidecar = await readJson(fs, paths.evalAcceptedSidecar("tests-pass"));
  const state = await readJson(fs, paths.stateJson);
  assert.deepEqual(state.accepted_eval_seals, {
    "session:/eval_receipts/tests-pass.json": sidecar,
  });
  assert.ok(await citeTestsPass(fs, paths));
  // The sidecar is only the seal's copy: gone or edited, the state still decides.
  await fs.remove(paths.evalAcceptedSidecar("tests-pass"));
  assert.ok(await citeTestsPass(fs, paths));
  await writeJson(fs, paths.evalAcceptedSidecar("tests-pass"), { ...sidecar, eval_id: "other" });
  assert.ok(await citeTestsPass(fs, paths));
  // Accepting the same bytes again writes the copy back from the seal.
  await acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID });
  assert.deepEqual(await readJson(fs, paths.evalAcceptedSidecar("tests-pass")), sidecar);
});

test("a sidecar the engine never sealed in state.json does not let goal_met cite its receipt", async () => {
  const { fs, paths } = await setup();
  // An agent writes a receipt and a sidecar binding it: no raw report, no git receipt, and no
  // acceptEvalReceipt call, so state.json seals nothing.
  await writeJson(fs, paths.evalReceipt("tests-pass"), evalReceipt(ROOT_ID));
  await fs.mkdir(paths.evalReceiptsAcceptedDir, { recursive: true });
  await writeJson(fs, paths.evalAcceptedSidecar("tests-pass"), {
    schema_version: 1,
    eval_id: "tests-pass",
    receipt_ref: "session:/eval_receipts/tests-pass.json",
    receipt_sha256: sha256Ref(await fs.readFile(paths.evalReceipt("tests-pass"))),
    producer: { session_id: ROOT_ID, workflow_id: "outer", attempt_id: "a26", iteration: 26 },
    raw_report_refs: ["session:/raw/0026_outer/eval/report.json"],
    git_receipt_ref: "session:/receipts/0026_outer_git_after.json",
    git_receipt_sha256: `sha256:${"0".repeat(64)}`,
    accepted_at: "2026-04-19T15:00:00Z",
  });
  await assert.rejects(citeTestsPass(fs, paths), refusedAtEvalRef(paths));
  // Nor does accepting it now: the raw report it cites was never written.
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: ROOT_ID }),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "raw_report_refs[0]",
  );
  assert.deepEqual((await readJson(fs, paths.stateJson)).accepted_eval_seals, {});
});

test("a state seal that is damaged, another session's or another receipt's is refused at the citation", async () => {
  const KEY = "session:/eval_receipts/tests-pass.json";
  const cases: [string, (seal: Record<string, unknown>) => unknown][] = [
    ["malformed", (seal) => ({ ...seal, receipt_sha256: "sha256:nope" })],
    ["another session's", (seal) => ({
      ...seal,
      producer: { ...(seal.producer as object), session_id: "002_other" },
    })],
    ["another receipt's", (seal) => ({ ...seal, eval_id: "other", receipt_ref: "x:/y" })],
    ["other bytes'", (seal) => ({ ...seal, receipt_sha256: `sha256:${"1".repeat(64)}` })],
  ];
  for (const [label, damage] of cases) {
    const { fs, paths } = await setup();
    await acceptedEval(fs, paths);
    const state = await readJson(fs, paths.stateJson);
    const seals = state.accepted_eval_seals as Record<string, Record<string, unknown>>;
    await writeJson(fs, paths.stateJson, {
      ...state,
      accepted_eval_seals: { [KEY]: damage(seals[KEY] ?? {}) },
    });
    await assert.rejects(citeTestsPass(fs, paths), refusedAtEvalRef(paths), label);
  }
  // A damaged seal is named by its field in state.json.
  const { fs, paths } = await setup();
  await acceptedEval(fs, paths);
  const state = await readJson(fs, paths.stateJson);
  await writeJson(fs, paths.stateJson, {
    ...state,
    accepted_eval_seals: { [KEY]: { eval_id: 1 } },
  });
  await assert.rejects(citeTestsPass(fs, paths), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    const cause = error.cause;
    assert.ok(cause instanceof LayoutRecordError, String(cause));
    assert.equal(cause.file, paths.stateJson);
    assert.equal(cause.path, `accepted_eval_seals[${JSON.stringify(KEY)}].schema_version`);
    return true;
  });
});

test("a legacy state without accepted_eval_seals keeps sidecar-only acceptances", async () => {
  const { fs, paths } = await setup();
  const state = await readJson(fs, paths.stateJson);
  delete state.accepted_eval_seals;
  await writeJson(fs, paths.stateJson, state);
  await acceptedEval(fs, paths);
  assert.equal("accepted_eval_seals" in (await readJson(fs, paths.stateJson)), false);
  assert.ok(await citeTestsPass(fs, paths));
  await fs.remove(paths.evalAcceptedSidecar("tests-pass"));
  await assert.rejects(citeTestsPass(fs, paths), refusedAtEvalRef(paths));
});

test("a sidecar accepted before the state recorded seals is sealed when the receipt is accepted again", async () => {
  const { fs, paths } = await setup();
  await acceptedEval(fs, paths);
  const sidecar = await readJson(fs, paths.evalAcceptedSidecar("tests-pass"));
  // As an earlier version left it: the sidecar only.
  await patchState(fs, paths.dir, { accepted_eval_seals: {} });
  await assert.rejects(citeTestsPass(fs, paths), refusedAtEvalRef(paths));
  const later = () => new Date("2026-04-21T00:00:00Z");
  const again = await acceptEvalReceipt(fs, paths, "tests-pass", {
    sessionId: ROOT_ID,
    now: later,
  });
  assert.deepEqual(again, sidecar, "adopted with its own time");
  assert.deepEqual((await readJson(fs, paths.stateJson)).accepted_eval_seals, {
    "session:/eval_receipts/tests-pass.json": sidecar,
  });
  assert.ok(await citeTestsPass(fs, paths));
  // An unsealed sidecar that is no acceptance at all is replaced by the one sealed now.
  await patchState(fs, paths.dir, { accepted_eval_seals: {} });
  await writeText(fs, paths.evalAcceptedSidecar("tests-pass"), "{torn");
  const fresh = await acceptEvalReceipt(fs, paths, "tests-pass", {
    sessionId: ROOT_ID,
    now: later,
  });
  assert.equal(fresh.accepted_at, "2026-04-21T00:00:00Z");
  assert.deepEqual(await readJson(fs, paths.evalAcceptedSidecar("tests-pass")), fresh);
  assert.ok(await citeTestsPass(fs, paths));
});

// ---------------------------------------------------------------------------------------------
// session_outcome.json binds its basis and is written once

async function missingHandoff(fs: MemoryFs, paths: SessionPaths, goal: string) {
  return await observeHandoff(fs, paths, {
    sessionId: ROOT_ID,
    goalSha256: goal,
    storedRevision: 0,
    storedSha256: null,
  });
}

const blocker = {
  schema_version: 3,
  state: "stopped",
  stop_reason: "unresolvable_error",
  control_id: "blk-1",
  reason: "The API is gone",
  created_at: "2026-04-19T15:00:00Z",
  producer: { session_id: ROOT_ID, workflow_id: "outer", attempt_id: "a26" },
  attempted_routes: ["retry", "alternate endpoint"],
};

test("an outcome's status and stop reason must be those of the control it binds", async () => {
  const { fs, paths, goal } = await setup();
  await writeJson(fs, paths.controlJson, blocker);
  const control = await readTerminalControl(fs, paths, {
    ...current,
    blockerReportingRoles: ["outer"],
  });
  const handoff = await missingHandoff(fs, paths, goal);
  const base = {
    sessionId: ROOT_ID,
    rootSessionId: ROOT_ID,
    goalSha256: goal,
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:01Z",
    handoff,
  };
  const cases: [Record<string, unknown>, string][] = [
    // An unresolvable_error control cannot stand for a completion.
    [{ terminalStatus: "goal_met", stopReason: "goal_met", control }, "stop_reason"],
    // A control binds only the transition it decided.
    [{ terminalStatus: "max_turns", stopReason: "max_turns", control }, "control"],
    // unresolvable_error fails the session; goal_met and only goal_met completes it.
    [{ terminalStatus: "stopped", stopReason: "unresolvable_error", control }, "terminal_status"],
    [{ terminalStatus: "goal_met", stopReason: "max_turns" }, "terminal_status"],
  ];
  for (const [fields, path] of cases) {
    await assert.rejects(
      writeSessionOutcome(
        fs,
        paths,
        { ...base, ...fields } as Parameters<typeof writeSessionOutcome>[2],
      ),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.equal(error.file, paths.sessionOutcomeJson);
        assert.equal(error.path, path, error.message);
        return true;
      },
      `${fields.terminalStatus} / ${fields.stopReason}`,
    );
    await assert.rejects(fs.lstat(paths.sessionOutcomeJson), { code: "ENOENT" });
  }
  await commitTerminalState(fs, paths.dir, "failed", 3, "2026-04-19T15:00:01Z");
  const outcome = await writeSessionOutcome(fs, paths, {
    ...base,
    terminalStatus: "failed",
    stopReason: "unresolvable_error",
    control,
  });
  assert.deepEqual(outcome.control, { ref: "session:/control.json", sha256: control?.sha256 });
});

test("an outcome's session, root and goal are those of session.json", async () => {
  const { fs, paths, goal } = await setup();
  const handoff: HandoffObservation = await missingHandoff(fs, paths, goal);
  const base = {
    sessionId: ROOT_ID,
    rootSessionId: ROOT_ID,
    goalSha256: goal,
    terminalStatus: "max_turns" as const,
    stopReason: "max_turns",
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:01Z",
    handoff,
  };
  const cases: [Record<string, unknown>, string][] = [
    [{ sessionId: "002_other" }, "session_id"],
    [{ rootSessionId: "002_other" }, "root_session_id"],
    [{ goalSha256: `sha256:${"b".repeat(64)}` }, "goal_sha256"],
  ];
  for (const [fields, path] of cases) {
    await assert.rejects(
      writeSessionOutcome(fs, paths, { ...base, ...fields }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.equal(error.file, paths.sessionOutcomeJson);
        assert.equal(error.path, path, error.message);
        return true;
      },
    );
    await assert.rejects(fs.lstat(paths.sessionOutcomeJson), { code: "ENOENT" });
  }
  await commitTerminalState(fs, paths.dir, "max_turns", 3, "2026-04-19T15:00:01Z");
  assert.equal((await writeSessionOutcome(fs, paths, base)).session_id, ROOT_ID);
});

test("session_outcome.json is written once: the same outcome again is a no-op, another is refused", async () => {
  const { fs, paths, goal } = await setup();
  const base = {
    sessionId: ROOT_ID,
    rootSessionId: ROOT_ID,
    goalSha256: goal,
    handoff: await missingHandoff(fs, paths, goal),
  };
  const first = {
    ...base,
    terminalStatus: "max_turns" as const,
    stopReason: "max_turns",
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:01Z",
  };
  await commitTerminalState(fs, paths.dir, "max_turns", 3, "2026-04-19T15:00:01Z");
  const written = await writeSessionOutcome(fs, paths, first);
  const bytes = await fs.readFile(paths.sessionOutcomeJson);
  // A restart that writes the same terminal basis again gets the same outcome back.
  assert.deepEqual(await writeSessionOutcome(fs, paths, first), written);
  for (
    const [fields, path] of [
      [{ terminalStatus: "failed", stopReason: "max_cost_usd" }, "terminal_status"],
      [{ terminalStateRevision: 9 }, "terminal_state_revision"],
      [{ terminalAt: "2026-04-20T15:00:01Z" }, "created_at"],
    ] as const
  ) {
    await assert.rejects(
      writeSessionOutcome(fs, paths, { ...first, ...fields }),
      (error: unknown) => {
        assert.ok(error instanceof ImmutableArtifactError, String(error));
        assert.equal(error.file, paths.sessionOutcomeJson);
        assert.equal(error.path, path, error.message);
        return true;
      },
    );
    assert.deepEqual(await fs.readFile(paths.sessionOutcomeJson), bytes);
  }
  // The same record in the engine's bytes (non-ASCII escaped, other spacing) is the same basis.
  const text = new TextDecoder().decode(bytes);
  const escaped = JSON.stringify(JSON.parse(text), null, 4)
    .replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  await fs.writeFile(paths.sessionOutcomeJson, new TextEncoder().encode(escaped));
  assert.deepEqual(await writeSessionOutcome(fs, paths, first), written);
  assert.equal(new TextDecoder().decode(await fs.readFile(paths.sessionOutcomeJson)), escaped);
});

test("another session's terminal control never finishes this one", async () => {
  const fs = await newRepo();
  const a = await newRoot(fs, "First goal");
  const b = await newRoot(fs, "Second goal");
  const producedByB = { ...goalMet, producer: { ...goalMet.producer, session_id: b.sessionId } };
  const expectB = { ...current, sessionId: b.sessionId };
  // A control naming B, read in A's directory with B's expectation: the directory decides.
  await writeJson(fs, a.paths.controlJson, producedByB);
  await assert.rejects(
    readTerminalControl(fs, a.paths, expectB),
    (error: unknown) =>
      error instanceof LayoutRecordError && error.path === "producer.session_id" &&
      error.file === a.paths.controlJson,
  );
  // B's own accepted control, bound to A's outcome: refused before anything is written.
  await writeJson(fs, b.paths.controlJson, producedByB);
  const control = await readTerminalControl(fs, b.paths, expectB);
  assert.equal(control?.record.producer.session_id, b.sessionId);
  const handoff = await observeHandoff(fs, a.paths, {
    sessionId: a.sessionId,
    goalSha256: a.manifest.goal_hash,
    storedRevision: 0,
    storedSha256: null,
  });
  await assert.rejects(
    writeSessionOutcome(fs, a.paths, {
      sessionId: a.sessionId,
      rootSessionId: a.sessionId,
      goalSha256: a.manifest.goal_hash,
      terminalStatus: "goal_met",
      stopReason: "goal_met",
      terminalStateRevision: 3,
      terminalAt: "2026-04-19T15:00:01Z",
      control,
      handoff,
    }),
    (error: unknown) =>
      error instanceof LayoutRecordError && error.path === "control" &&
      error.file === a.paths.sessionOutcomeJson,
  );
  await assert.rejects(fs.lstat(a.paths.sessionOutcomeJson), NotFound);
});

test("session_outcome.json is written only for the terminal transition state.json records", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await writeJson(fs, `${root.paths.childRequestsPendingDir}/phase-1.json`, {
    schema_version: 3,
    request_id: "phase-1",
    goal: "Phase one",
    origin: { parent_attempt_id: "a1b2c3d4e5f6" },
  });
  const accepted = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
  });
  assert.ok(accepted?.kind === "accepted");
  const childId = accepted.childSessionId;
  const childPaths = (await loadSessionTree(fs, "/repo", childId)).paths(childId);
  const goal = String((await readJson(fs, childPaths.sessionJson)).goal_hash);
  const real = {
    sessionId: childId,
    rootSessionId: ROOT_ID,
    goalSha256: goal,
    terminalStatus: "failed",
    stopReason: "max_cost_usd",
    terminalStateRevision: 1,
    terminalAt: "2026-04-19T15:00:00Z",
    handoff: await missingHandoff(fs, childPaths, goal),
  } as const;
  // Still running: no outcome, so it cannot pre-empt the real one.
  await assert.rejects(
    writeSessionOutcome(fs, childPaths, {
      ...real,
      terminalStatus: "max_turns",
      stopReason: "max_turns",
      terminalStateRevision: 999,
      terminalAt: "2030-01-01T00:00:00Z",
    }),
    (error: unknown) => error instanceof SessionStateError && error.sessionId === childId,
  );
  await assert.rejects(fs.lstat(childPaths.sessionOutcomeJson), NotFound);
  // The engine commits the transition to state.json, then writes the outcome.
  await updateSessionState(fs, childPaths.dir, (state) => {
    state.status = "failed";
    state.terminal_state_revision = 1;
    state.terminal_at = "2026-04-19T15:00:00Z";
  }, { updatedAt: "2026-04-19T15:00:00Z" });
  const cases: [Record<string, unknown>, string, unknown][] = [
    [{ terminalStatus: "max_turns", stopReason: "max_turns" }, "terminal_status", "max_turns"],
    [{ terminalStateRevision: 999 }, "terminal_state_revision", 999],
    [{ terminalAt: "2030-01-01T00:00:00Z" }, "created_at", "2030-01-01T00:00:00Z"],
  ];
  for (const [fields, path, value] of cases) {
    await assert.rejects(
      writeSessionOutcome(fs, childPaths, { ...real, ...fields }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.equal(error.file, childPaths.sessionOutcomeJson);
        assert.equal(error.path, path, error.message);
        assert.equal(error.value, value);
        return true;
      },
    );
    await assert.rejects(fs.lstat(childPaths.sessionOutcomeJson), NotFound);
  }
  const written = await writeSessionOutcome(fs, childPaths, real);
  assert.equal(written.terminal_state_revision, 1);
  // A rerun (the engine restarting after the write) gets the same outcome back.
  assert.deepEqual(await writeSessionOutcome(fs, childPaths, real), written);
  // And the parent records it.
  const recorded = await recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID });
  assert.equal(
    recorded.session_outcome_sha256,
    sha256Ref(await fs.readFile(childPaths.sessionOutcomeJson)),
  );
});

test("an outcome already on disk is not confirmed for a state that never made that transition", async () => {
  const { fs, paths, goal } = await setup();
  const input = {
    sessionId: ROOT_ID,
    rootSessionId: ROOT_ID,
    goalSha256: goal,
    terminalStatus: "max_turns",
    stopReason: "max_turns",
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:01Z",
    handoff: await missingHandoff(fs, paths, goal),
  } as const;
  await commitTerminalState(fs, paths.dir, "max_turns", 3, "2026-04-19T15:00:01Z");
  await writeSessionOutcome(fs, paths, input);
  // The same outcome asked for again of a state that records another transition (a state put
  // back by hand, a copy): refused, and the outcome stays as it is.
  const bytes = await fs.readFile(paths.sessionOutcomeJson);
  await commitTerminalState(fs, paths.dir, "max_turns", 5, "2026-04-19T15:00:01Z");
  await assert.rejects(
    writeSessionOutcome(fs, paths, input),
    (error: unknown) =>
      error instanceof LayoutRecordError && error.path === "terminal_state_revision",
  );
  await writeJson(fs, paths.stateJson, {
    ...(await readJson(fs, paths.stateJson)),
    status: "running",
  });
  await assert.rejects(writeSessionOutcome(fs, paths, input), SessionStateError);
  assert.deepEqual(await fs.readFile(paths.sessionOutcomeJson), bytes);
});

test("a goal_met control of a session directory the tree does not hold is refused, never checked in the tree's session", async () => {
  const { fs, paths } = await setup();
  await writeJson(fs, paths.controlJson, goalMet);
  assert.ok(await readTerminalControl(fs, paths, current), "the tree's own session completes");
  // A copy of the session directory elsewhere under .loopy_loop/ (an attic, a backup): its
  // session.json names the tree's session, but its citations are not that session's files.
  const copy = `/repo/.loopy_loop/attic/${ROOT_ID}`;
  const copyTree = async (from: string, to: string): Promise<void> => {
    await fs.mkdir(to, { recursive: true });
    for (const entry of await fs.readDir(from)) {
      if (entry.kind === "directory") {
        await copyTree(`${from}/${entry.name}`, `${to}/${entry.name}`);
      } else if (entry.kind === "file") {
        await fs.writeFile(`${to}/${entry.name}`, await fs.readFile(`${from}/${entry.name}`));
      }
    }
  };
  await copyTree(paths.dir, copy);
  await fs.remove(`${copy}/project_state/finished.md`);
  await assert.rejects(
    readTerminalControl(fs, new SessionPaths(copy, "folded"), current),
    (error: unknown) => {
      assert.ok(error instanceof TopologyError, String(error));
      return true;
    },
  );
});
