import { test } from "node:test";
import assert from "node:assert/strict";
import {
  assertTerminalControlMatches,
  isTerminalControl,
  LayoutRecordError,
  NEUTRAL_CONTROL,
  parseChildOutcome,
  parseChildrenLedger,
  parseChildRequest,
  parseControlRecord,
  parseGoalContract,
  parseHandoff,
  parseParentAcceptance,
  parseSessionManifest,
  parseSessionOutcome,
  parseSessionState,
  parseTraceRef,
  sessionPhase,
  type TerminalControl,
} from "../layout.ts";

const FILE = "/s/control.json";
const HASH = `sha256:${"ab".repeat(32)}`;

/** Asserts that `run` throws a `LayoutRecordError` naming `FILE`, `path` and `value`. */
function assertRecordError(run: () => unknown, path: string, value?: unknown): void {
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, FILE);
    assert.equal(error.path, path, error.message);
    if (arguments.length > 2) assert.deepEqual(error.value, value);
    assert.ok(error.message.includes(FILE));
    return true;
  });
}

const terminal = {
  schema_version: 3,
  state: "stopped",
  stop_reason: "goal_met",
  control_id: "done-1",
  reason: "Every outcome is accepted",
  created_at: "2026-04-19T15:00:00Z",
  producer: { session_id: "001_demo", workflow_id: "outer", attempt_id: "a26" },
  evidence_refs: ["session:/project_state/finished.md"],
  eval_receipt_refs: [],
  handoff_ref: "session:/project_state/handoff.json",
};

test("the neutral control record is a running record", () => {
  const control = parseControlRecord(NEUTRAL_CONTROL, FILE);
  assert.equal(control.state, "running");
  assert.equal(isTerminalControl(control), false);
});

test("a v3 terminal control record validates and names its producer", () => {
  const control = parseControlRecord(terminal, FILE);
  assert.ok(isTerminalControl(control));
  assert.equal(control.producer.attempt_id, "a26");
});

test("malformed control records are typed errors naming the field", () => {
  assertRecordError(() => parseControlRecord([], FILE), "");
  assertRecordError(
    () => parseControlRecord({ ...NEUTRAL_CONTROL, state: "paused" }, FILE),
    "state",
    "paused",
  );
  assertRecordError(
    () => parseControlRecord({ ...NEUTRAL_CONTROL, stop_reason: "goal_met" }, FILE),
    "stop_reason",
    "goal_met",
  );
  assertRecordError(
    () => parseControlRecord({ ...terminal, stop_reason: "paused" }, FILE),
    "stop_reason",
  );
  assertRecordError(() => parseControlRecord({ ...terminal, reason: "   " }, FILE), "reason");
  // Blank as the engine's Python judges it (`str.strip()`), not as JavaScript's `trim()` does.
  for (const blank of ["\u0085", "\u001f\u001c", " \u3000\u2028"]) {
    assertRecordError(() => parseControlRecord({ ...terminal, reason: blank }, FILE), "reason");
  }
  assert.equal(parseControlRecord({ ...terminal, reason: "\ufeff" }, FILE).state, "stopped");
  assertRecordError(
    () =>
      parseControlRecord(
        { ...terminal, producer: { ...terminal.producer, attempt_id: "../x" } },
        FILE,
      ),
    "producer.attempt_id",
    "../x",
  );
  const { producer: _producer, ...withoutProducer } = terminal;
  assertRecordError(() => parseControlRecord(withoutProducer, FILE), "producer", undefined);
  assertRecordError(
    () =>
      parseControlRecord({ ...terminal, eval_receipt_ref: "session:/eval_receipts/x.json" }, FILE),
    "eval_receipt_ref",
  );
  assertRecordError(
    () => parseControlRecord({ ...terminal, handoff_ref: "session:/handoff.json" }, FILE),
    "handoff_ref",
  );
  assertRecordError(
    () => parseControlRecord({ ...terminal, evidence_refs: ["session:/../x"] }, FILE),
    "evidence_refs[0]",
  );
  assertRecordError(() => parseControlRecord({ ...terminal, surprise: 1 }, FILE), "surprise");
});

test("unresolvable_error must list the routes tried and cite no eval or handoff", () => {
  const base = { ...terminal, stop_reason: "unresolvable_error", eval_receipt_refs: undefined };
  const { handoff_ref: _h, ...blocked } = base;
  assertRecordError(() => parseControlRecord(blocked, FILE), "attempted_routes");
  assertRecordError(
    () => parseControlRecord({ ...blocked, attempted_routes: [] }, FILE),
    "attempted_routes",
  );
  const valid = { ...blocked, attempted_routes: ["retry", "alternative"] };
  assert.equal(parseControlRecord(valid, FILE).state, "stopped");
  assertRecordError(
    () =>
      parseControlRecord({ ...valid, eval_receipt_refs: ["session:/eval_receipts/e.json"] }, FILE),
    "eval_receipt_refs",
  );
  assertRecordError(
    () => parseControlRecord({ ...valid, handoff_ref: terminal.handoff_ref }, FILE),
    "handoff_ref",
  );
});

test("a terminal control must name the exact current session, workflow and attempt", () => {
  const control = parseControlRecord(terminal, FILE) as TerminalControl;
  const current = { sessionId: "001_demo", workflowId: "outer", attemptId: "a26" };
  assertTerminalControlMatches(control, current, FILE);
  assertRecordError(
    () => assertTerminalControlMatches(control, { ...current, attemptId: "a27" }, FILE),
    "producer.attempt_id",
    "a26",
  );
  assertRecordError(
    () => assertTerminalControlMatches(control, { ...current, workflowId: "planner" }, FILE),
    "producer.workflow_id",
  );
  assertRecordError(
    () => assertTerminalControlMatches(control, { ...current, sessionId: "002_other" }, FILE),
    "producer.session_id",
  );
  assertRecordError(
    () => assertTerminalControlMatches(control, { ...current, completionRole: "planner" }, FILE),
    "producer.workflow_id",
  );
});

const handoff = {
  schema_version: 1,
  session_id: "001_demo",
  goal_sha256: HASH,
  revision: 3,
  producer: { workflow_id: "outer", attempt_id: "a26" },
  summary: "Phase 0 is accepted",
  accepted_outcomes: ["O1"],
  open_work: [],
  risks: [{ id: "R1", text: "upstream drift" }],
  decision_refs: [],
  evidence_refs: [],
  delivery_refs: [],
  eval_refs: [],
  updated_at: "2026-04-19T15:00:00Z",
};

test("handoff.json is strict: unknown keys and bad revisions are refused", () => {
  assert.equal(parseHandoff(handoff, FILE).revision, 3);
  assertRecordError(() => parseHandoff({ ...handoff, extra: true }, FILE), "extra");
  assertRecordError(() => parseHandoff({ ...handoff, revision: -1 }, FILE), "revision", -1);
  assertRecordError(() => parseHandoff({ ...handoff, revision: 1.5 }, FILE), "revision", 1.5);
  assertRecordError(
    () => parseHandoff({ ...handoff, producer: { workflow_id: "outer" } }, FILE),
    "producer.attempt_id",
  );
  assertRecordError(
    () => parseHandoff({ ...handoff, updated_at: "yesterday" }, FILE),
    "updated_at",
  );
});

test("state.json keeps unknown fields and refuses a current task beside an active child", () => {
  const state = {
    schema_version: 2,
    session_id: "001_demo",
    status: "running",
    current_task: null,
    active_child_session_id: "01_child",
    extra_engine_field: { kept: true },
  };
  const parsed = parseSessionState(state, FILE);
  assert.equal(sessionPhase(parsed), "suspended");
  assert.deepEqual(parsed.extra_engine_field, { kept: true });
  assertRecordError(
    () =>
      parseSessionState({
        ...state,
        current_task: { workflow_id: "outer", iteration: 1, attempt_id: "a" },
      }, FILE),
    "active_child_session_id",
  );
  assertRecordError(
    () => parseSessionState({ ...state, status: "paused" }, FILE),
    "status",
    "paused",
  );
  assertRecordError(
    () => parseSessionState({ ...state, schema_version: 3 }, FILE),
    "schema_version",
  );
  assert.equal(sessionPhase({ ...parsed, status: "max_turns" }), "terminal");
  assert.equal(
    sessionPhase({
      ...parsed,
      active_child_session_id: null,
      current_task: { workflow_id: "o", iteration: 1, attempt_id: "a" },
    }),
    "executing",
  );
  assert.equal(sessionPhase({ ...parsed, active_child_session_id: null }), "ready");
});

test("state.json without schema_version is v1, whose current task may predate attempt ids", () => {
  const legacy = { status: "running", active_session_id: "001_demo", current_task: null };
  assert.equal(parseSessionState(legacy, FILE).schema_version, 1);
  const task = { workflow_id: "outer", iteration: 3 };
  for (const version of [{}, { schema_version: 1 }]) {
    for (const attempt of [{ attempt_id: null }, {}, { attempt_id: "a1" }]) {
      const parsed = parseSessionState(
        { ...legacy, ...version, current_task: { ...task, ...attempt } },
        FILE,
      );
      assert.equal(parsed.schema_version, 1);
      assert.equal(sessionPhase(parsed), "executing");
    }
    assertRecordError(
      () =>
        parseSessionState(
          { ...legacy, ...version, current_task: { ...task, attempt_id: "../x" } },
          FILE,
        ),
      "current_task.attempt_id",
      "../x",
    );
  }
  // v2 keeps requiring the attempt id; a null or non-integer version is not "missing".
  for (const attempt of [{ attempt_id: null }, {}]) {
    assertRecordError(
      () =>
        parseSessionState({
          ...legacy,
          schema_version: 2,
          current_task: { ...task, ...attempt },
        }, FILE),
      "current_task.attempt_id",
    );
  }
  for (const version of [null, "1", 0]) {
    assertRecordError(
      () => parseSessionState({ ...legacy, schema_version: version }, FILE),
      "schema_version",
      version,
    );
  }
});

test("session.json checks its identity fields and its version", () => {
  const manifest = {
    schema_version: 2,
    session_id: "001_demo",
    root_session_id: "001_demo",
    parent_session_id: null,
    depth: 0,
    workflow_set: "main",
    layer_kind: "work",
    goal_hash: HASH,
    goal_contract_hash: HASH,
    workflow_contract_hash: null,
    layout: "folded",
    session_uuid: "0".repeat(32),
    origin: {},
    created_at: "2026-04-19T14:30:22Z",
  };
  assert.equal(parseSessionManifest(manifest, FILE).session_id, "001_demo");
  assertRecordError(
    () => parseSessionManifest({ ...manifest, session_id: "demo" }, FILE),
    "session_id",
    "demo",
  );
  assertRecordError(() => parseSessionManifest({ ...manifest, depth: 1 }, FILE), "depth", 1);
  assertRecordError(
    () => parseSessionManifest({ ...manifest, root_session_id: "002_x" }, FILE),
    "root_session_id",
  );
  assertRecordError(
    () => parseSessionManifest({ ...manifest, layout: "flat" }, FILE),
    "layout",
    "flat",
  );
  assertRecordError(
    () => parseSessionManifest({ ...manifest, schema_version: 9 }, FILE),
    "schema_version",
    9,
  );
  assertRecordError(
    () => parseSessionManifest({ ...manifest, session_uuid: "xyz" }, FILE),
    "session_uuid",
  );
  // The legacy id form is a valid session id.
  const legacy = "20260419_143022_71393ee22450_ab12cd34";
  assert.equal(
    parseSessionManifest({ ...manifest, session_id: legacy, root_session_id: legacy }, FILE)
      .session_id,
    legacy,
  );
});

test("a child's goal contract must bind its accepted request", () => {
  const contract = {
    schema_version: 1,
    session_id: "01_child",
    goal: "g",
    goal_hash: HASH,
    completion_criteria: [],
    stop_criteria: [],
    constraints: [],
    deliverables: [],
    required_evidence: [],
    terminal_blocker_policy_ref: "workflow:main",
    origin_request_id: "child",
    accepted_request_ref: "session:/inputs/accepted_request.json",
    accepted_request_sha256: HASH,
    inputs: [],
    created_at: "2026-04-19T14:30:22Z",
  };
  assert.equal(parseGoalContract(contract, FILE).origin_request_id, "child");
  assertRecordError(
    () => parseGoalContract({ ...contract, accepted_request_ref: null }, FILE),
    "accepted_request_ref",
  );
  assertRecordError(
    () => parseGoalContract({ ...contract, accepted_request_sha256: null }, FILE),
    "accepted_request_sha256",
  );
  assertRecordError(
    () =>
      parseGoalContract({
        ...contract,
        inputs: [{ source_ref: "repo:/a", sha256: HASH, frozen_ref: "session:/a", size: 1 }],
      }, FILE),
    "inputs[0].frozen_ref",
  );
});

test("child requests, child outcomes and parent acceptance have schemas too", () => {
  const request = {
    schema_version: 3,
    request_id: "r1",
    goal: "g",
    origin: { parent_attempt_id: "a1" },
  };
  assert.equal(parseChildRequest(request, FILE).request_id, "r1");
  assertRecordError(() => parseChildRequest({ ...request, inputs: [] }, FILE), "inputs");
  assertRecordError(
    () => parseChildRequest({ ...request, origin: {} }, FILE),
    "origin.parent_attempt_id",
  );
  assertRecordError(
    () => parseChildRequest({ ...request, request_id: "x".repeat(129) }, FILE),
    "request_id",
  );
  const outcome = {
    schema_version: 2,
    request_id: "r1",
    child_session_id: "01_r1",
    session_outcome_ref: "session:01_r1:/session_outcome.json",
    session_outcome_sha256: HASH,
  };
  assert.equal(parseChildOutcome(outcome, FILE).child_session_id, "01_r1");
  assertRecordError(
    () =>
      parseChildOutcome(
        { ...outcome, session_outcome_ref: "session:02_x:/session_outcome.json" },
        FILE,
      ),
    "session_outcome_ref",
  );
  const acceptance = {
    schema_version: 1,
    request_id: "r1",
    child_session_id: "01_r1",
    decision: "rework",
    reason: "Missing tests",
    child_outcome_ref: "session:/child_outcomes/r1.json",
    child_outcome_sha256: HASH,
    producer: { session_id: "001_demo", workflow_id: "outer", attempt_id: "a30" },
    created_at: "2026-04-19T16:00:00Z",
  };
  assert.equal(parseParentAcceptance(acceptance, FILE).decision, "rework");
  assertRecordError(
    () => parseParentAcceptance({ ...acceptance, decision: "complete" }, FILE),
    "decision",
  );
  assertRecordError(
    () =>
      parseParentAcceptance(
        { ...acceptance, child_outcome_ref: "session:/child_outcomes/r2.json" },
        FILE,
      ),
    "child_outcome_ref",
  );
});

test("a session outcome has a fallback summary exactly when the handoff is not valid", () => {
  const outcome = {
    schema_version: 1,
    session_id: "001_demo",
    root_session_id: "001_demo",
    goal_sha256: HASH,
    lifecycle: "terminal",
    terminal_status: "goal_met",
    stop_reason: "goal_met",
    terminal_state_revision: 7,
    control: { ref: "session:/control.json", sha256: HASH },
    handoff: {
      status: "valid",
      ref: "session:/project_state/handoff.json",
      sha256: HASH,
      revision: 3,
    },
    evidence_refs: [],
    delivery_refs: ["session:/receipts/0026_outer_delivery.json"],
    eval_refs: [],
    trace_seal_refs: [],
    created_at: "2026-04-19T15:00:01Z",
  };
  assert.equal(parseSessionOutcome(outcome, FILE).terminal_status, "goal_met");
  assertRecordError(
    () =>
      parseSessionOutcome(
        { ...outcome, fallback_summary: { source: "control_reason", text: "x" } },
        FILE,
      ),
    "fallback_summary",
  );
  assertRecordError(
    () =>
      parseSessionOutcome({ ...outcome, handoff: { ...outcome.handoff, status: "invalid" } }, FILE),
    "fallback_summary",
  );
  assertRecordError(
    () =>
      parseSessionOutcome({ ...outcome, trace_seal_refs: ["session:/trace_seals/a.json"] }, FILE),
    "trace_seal_refs",
  );
  assert.equal(
    parseSessionOutcome(
      { ...outcome, trace_seal_refs: ["session:/trace_seals/a.json"] },
      FILE,
      "mirror",
    ).session_id,
    "001_demo",
  );
  // The control snapshot is the session's own control.json, a folded handoff its own file.
  assertRecordError(
    () =>
      parseSessionOutcome(
        { ...outcome, control: { ref: "session:/notes.md", sha256: HASH } },
        FILE,
      ),
    "control.ref",
  );
  assertRecordError(
    () =>
      parseSessionOutcome({ ...outcome, handoff: { ...outcome.handoff, ref: "repo:/x" } }, FILE),
    "handoff.ref",
  );
});

test("a session outcome's stop, status and control follow the rule its writer enforces", () => {
  const control = { ref: "session:/control.json", sha256: HASH };
  const outcome = (stop: string, status: string, bound: typeof control | null) => ({
    schema_version: 1,
    session_id: "001_demo",
    root_session_id: "001_demo",
    goal_sha256: HASH,
    lifecycle: "terminal",
    terminal_status: status,
    stop_reason: stop,
    terminal_state_revision: 3,
    control: bound,
    handoff: {
      status: "missing",
      ref: "session:/project_state/handoff.json",
      sha256: null,
      revision: null,
    },
    fallback_summary: { source: "engine_stop_reason", text: stop },
    evidence_refs: [],
    delivery_refs: [],
    eval_refs: [],
    trace_seal_refs: [],
    created_at: "2026-04-19T15:00:01Z",
  });
  // What the engine (and writeSessionOutcome) writes reads, in either layout.
  for (
    const [stop, status, bound] of [
      ["goal_met", "goal_met", control],
      ["unresolvable_error", "failed", control],
      ["max_turns", "max_turns", null],
      ["stop_requested", "stopped", null],
      ["control_protocol_broken", "failed", null],
    ] as const
  ) {
    for (const layout of ["folded", "mirror"] as const) {
      const read = parseSessionOutcome(outcome(stop, status, bound), FILE, layout);
      assert.equal(read.terminal_status, status, `${stop} (${layout})`);
    }
  }
  // Each breaks one rule: a typed error naming the file and the field, in either layout.
  for (
    const [stop, status, bound, field, value] of [
      // Only a goal_met stop completes a session.
      ["max_turns", "goal_met", null, "terminal_status", "goal_met"],
      ["stop_requested", "goal_met", null, "terminal_status", "goal_met"],
      // goal_met and unresolvable_error are decided by a control (the engine's
      // StateInvariantError without a snapshot of it).
      ["goal_met", "goal_met", null, "control", null],
      ["unresolvable_error", "failed", null, "control", null],
      // No other stop is.
      ["max_turns", "max_turns", control, "control", HASH],
      // goal_met leaves the session goal_met, unresolvable_error leaves it failed.
      ["goal_met", "stopped", control, "terminal_status", "stopped"],
      ["unresolvable_error", "goal_met", control, "terminal_status", "goal_met"],
    ] as const
  ) {
    for (const layout of ["folded", "mirror"] as const) {
      assertRecordError(
        () => parseSessionOutcome(outcome(stop, status, bound), FILE, layout),
        field,
        value,
      );
    }
  }
});

test("a folded trace_ref points at exactly its own raw directory", () => {
  const ref = {
    schema_version: 1,
    raw_dir: "raw/0026_outer",
    raw_dir_ref: "session:/raw/0026_outer",
    attempt_id: "a26",
    iteration: 26,
    workflow_id: "outer",
  };
  assert.equal(parseTraceRef(ref, FILE, "folded").attempt_id, "a26");
  assertRecordError(
    () => parseTraceRef({ ...ref, raw_dir: "raw/0027_outer" }, FILE, "folded"),
    "raw_dir",
  );
  assertRecordError(
    () => parseTraceRef({ ...ref, raw_dir_ref: "trace:trace-a26:/" }, FILE, "folded"),
    "raw_dir_ref",
  );
});

test("a mirror trace_ref names its own attempt's manifest", () => {
  const ref = {
    schema_version: 1,
    manifest_id: "trace-a26",
    manifest_ref: "trace:trace-a26:/trace_manifest.json",
    attempt_id: "a26",
  };
  assert.equal(parseTraceRef(ref, FILE, "mirror").attempt_id, "a26");
  assertRecordError(
    () => parseTraceRef({ ...ref, manifest_id: "trace-a27" }, FILE, "mirror"),
    "manifest_id",
  );
  assertRecordError(
    () => parseTraceRef({ ...ref, manifest_ref: "repo:/anything" }, FILE, "mirror"),
    "manifest_ref",
  );
});

test("counts past 2^53 - 1 are typed errors naming the field, never silently rounded", () => {
  const file = "/s/children.json";
  const ledger = { schema_version: 2, parent_session_id: "001_demo", children: [] };
  assert.equal(
    parseChildrenLedger({ ...ledger, revision: Number.MAX_SAFE_INTEGER }, file).revision,
    Number.MAX_SAFE_INTEGER,
  );
  // JSON.parse("9007199254740993") is 2^53: one more revision would not change it.
  for (const revision of [2 ** 53, JSON.parse("9007199254740993"), 1e300]) {
    assert.throws(() => parseChildrenLedger({ ...ledger, revision }, file), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, file);
      assert.equal(error.path, "revision");
      return true;
    });
  }
  const state = { schema_version: 2, status: "running", state_revision: 2 ** 53 };
  assert.throws(
    () => parseSessionState(state, "/s/state.json"),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "state_revision",
  );
});
