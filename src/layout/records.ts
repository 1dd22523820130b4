/**
 * Schemas (valibot) and cross-field rules for every record of a folded session. Each `parse…`
 * function takes a decoded JSON value and the file it came from, and either returns the typed
 * record or throws a `LayoutRecordError` naming the file, the JSON path of the offending field
 * and its value.
 *
 * Records that agents author (control, handoff, child requests, eval receipts, parent acceptance)
 * are strict: unknown keys are refused. Engine-written records (session.json, state.json,
 * children.json, ...) keep unknown keys, so a newer engine's fields survive a rewrite.
 *
 * @module
 */
import * as v from "valibot";
import { LayoutRecordError } from "./errors.ts";
import { isSafeId, isSessionId } from "./ids.ts";
import { parseWithSchema, refuseDeepRecord } from "./json_io.ts";
import { checkTerminalTransition } from "./_terminal_transition.ts";
import { iterationName, type SessionLayout } from "./paths.ts";
import { isLogicalReference } from "./ref_grammar.ts";
import { pyStrip } from "./_py_text.ts";

// ---------------------------------------------------------------------------------------------
// Shared field schemas

const SafeId = v.pipe(
  v.string(),
  v.check(isSafeId, "Expected a safe id ([A-Za-z0-9][A-Za-z0-9_.-]*)"),
);
const SessionId = v.pipe(
  v.string(),
  v.check(isSessionId, "Expected a NNN_<slug>, NN_<slug> or legacy session id"),
);
const Sha256 = v.pipe(
  v.string(),
  v.regex(/^sha256:[0-9a-f]{64}$/, "Expected sha256:<64 lowercase hex>"),
);
const GoalHash = v.pipe(
  v.string(),
  v.regex(/^(?:sha256:)?[0-9a-f]{12,64}$/, "Expected a goal hash (sha256:<hex>)"),
);
const Timestamp = v.pipe(
  v.string(),
  v.regex(
    /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]00:00)$/,
    "Expected a UTC timestamp (YYYY-MM-DDTHH:MM:SSZ)",
  ),
);
const LogicalRef = v.pipe(
  v.string(),
  v.check(isLogicalReference, "Expected a logical reference (scope:/path)"),
);
// Non-blank as the engine judges it: Python's `str.strip()` leaves something (see `pyStrip`).
const NonBlank = v.pipe(
  v.string(),
  v.check((s) => pyStrip(s) !== "", "Expected a non-blank string"),
);
// A count or revision: a non-negative safe integer. Past 2^53 - 1 a JSON number no longer grows
// by one (2^53 + 1 reads as 2^53), so a revision there would silently stop increasing.
const Count = v.pipe(
  v.number(),
  v.integer(),
  v.minValue(0),
  v.maxValue(Number.MAX_SAFE_INTEGER, "Expected a safe integer (at most 2^53 - 1)"),
);
const StringList = v.array(v.string());
const AnyObject = v.record(v.string(), v.unknown());

/** A JSON object whose keys this library does not interpret. */
export type OpenObject = { readonly [key: string]: unknown };

function fail(file: string, message: string, path: string, value: unknown): never {
  throw new LayoutRecordError(file, message, { path, value });
}

function requireObject(value: unknown, file: string, label: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    fail(file, `Invalid ${label}: expected a JSON object`, "", value);
  }
  return value as Record<string, unknown>;
}

// ---------------------------------------------------------------------------------------------
// repository.json

/** `.loopy_loop/repository.json`: the identity of the checkout (not session state). */
export interface RepositoryRecord {
  /** Always 1. */
  readonly schema_version: 1;
  /** A random 32-hex identity of this checkout. */
  readonly repository_id: string;
  /** Creation time. */
  readonly created_at: string;
}

const RepositorySchema: v.GenericSchema<unknown, RepositoryRecord> = v.object({
  schema_version: v.literal(1),
  repository_id: v.pipe(v.string(), v.regex(/^[0-9a-f]{32}$/, "Expected 32 lowercase hex")),
  created_at: Timestamp,
});

/** Validates `repository.json`. */
export function parseRepositoryRecord(value: unknown, file: string): RepositoryRecord {
  return parseWithSchema(RepositorySchema, value, file, "repository.json");
}

// ---------------------------------------------------------------------------------------------
// session.json / parent.json

/** A schema-v2 `session.json`: the immutable manifest of a session. */
export interface SessionManifest {
  /** Always 2. */
  readonly schema_version: 2;
  /** The session id (also the directory name). */
  readonly session_id: string;
  /** The root session of the tree (itself for a root). */
  readonly root_session_id: string;
  /** The parent session, `null` for a root. */
  readonly parent_session_id: string | null;
  /** 0 for a root, parent depth + 1 for a child. */
  readonly depth: number;
  /** The frozen workflow set. */
  readonly workflow_set: string;
  /** The layer kind (`work`, ...). */
  readonly layer_kind: string;
  /** `sha256:` of the goal text. */
  readonly goal_hash: string;
  /** `sha256:` of `goal_contract.json`. */
  readonly goal_contract_hash: string | null;
  /** `sha256:` of `workflow_contract.json`. */
  readonly workflow_contract_hash: string | null;
  /** The layout; a v2 manifest without it is a mirror session. */
  readonly layout?: SessionLayout | undefined;
  /** 32 lowercase hex characters. */
  readonly session_uuid?: string | undefined;
  /** Origin provenance (for a child: request id, accepted request ref and hash, inputs). */
  readonly origin: OpenObject;
  /** Creation time, UTC to the second. */
  readonly created_at: string;
}

/** A schema-v1 `session.json` of an old mirror session. */
export interface LegacySessionManifest {
  /** 1 or absent. */
  readonly schema_version?: 1 | undefined;
  /** The session id. */
  readonly session_id: string;
  /** The goal hash. */
  readonly goal_hash: string;
  /** The workflow set. */
  readonly workflow_set: string;
  /** The parent session, `null` for a root. */
  readonly parent_session_id: string | null;
  /** Creation time. */
  readonly created_at: string;
}

/** Any supported `session.json`. */
export type AnySessionManifest = SessionManifest | LegacySessionManifest;

const SessionManifestSchema: v.GenericSchema<unknown, SessionManifest> = v.looseObject({
  schema_version: v.literal(2),
  session_id: SessionId,
  root_session_id: SessionId,
  parent_session_id: v.nullable(SessionId),
  depth: Count,
  workflow_set: SafeId,
  layer_kind: NonBlank,
  goal_hash: GoalHash,
  goal_contract_hash: v.nullable(Sha256),
  workflow_contract_hash: v.nullable(Sha256),
  layout: v.optional(v.picklist(["folded", "mirror"])),
  session_uuid: v.optional(v.pipe(v.string(), v.regex(/^[0-9a-f]{32}$/, "Expected 32 hex"))),
  origin: AnyObject,
  created_at: Timestamp,
});

const LegacySessionManifestSchema: v.GenericSchema<unknown, LegacySessionManifest> = v
  .looseObject({
    schema_version: v.optional(v.literal(1)),
    session_id: SessionId,
    goal_hash: v.string(),
    workflow_set: v.string(),
    parent_session_id: v.nullable(SessionId),
    created_at: v.string(),
  });

/** Validates `session.json` (schema 2, or the legacy schema 1). */
export function parseSessionManifest(value: unknown, file: string): AnySessionManifest {
  const object = requireObject(value, file, "session.json");
  const version = object.schema_version;
  if (version === undefined || version === 1) {
    return parseWithSchema(LegacySessionManifestSchema, value, file, "session.json");
  }
  if (version !== 2) fail(file, "Unsupported session.json version", "schema_version", version);
  const manifest = parseWithSchema(SessionManifestSchema, value, file, "session.json");
  if (manifest.parent_session_id === null) {
    if (manifest.root_session_id !== manifest.session_id) {
      fail(
        file,
        "A root session must be its own root",
        "root_session_id",
        manifest.root_session_id,
      );
    }
    if (manifest.depth !== 0) fail(file, "A root session has depth 0", "depth", manifest.depth);
  } else if (manifest.depth < 1) {
    fail(file, "A child session has depth of at least 1", "depth", manifest.depth);
  }
  return manifest;
}

/** The layout a manifest records: `folded` only when it says so, otherwise `mirror`. */
export function manifestLayout(manifest: AnySessionManifest): SessionLayout {
  return manifest.schema_version === 2 && manifest.layout === "folded" ? "folded" : "mirror";
}

/** `parent.json` of a child session. */
export interface ParentManifest {
  /** Always 1. */
  readonly schema_version: 1;
  /** The physical parent's id. */
  readonly parent_session_id: string;
  /** The parent directory relative to the child (`../..`). */
  readonly parent_relative_path: string;
  /** Creation time. */
  readonly created_at: string;
}

const ParentManifestSchema: v.GenericSchema<unknown, ParentManifest> = v.looseObject({
  schema_version: v.literal(1),
  parent_session_id: SessionId,
  parent_relative_path: NonBlank,
  created_at: Timestamp,
});

/** Validates `parent.json`. */
export function parseParentManifest(value: unknown, file: string): ParentManifest {
  return parseWithSchema(ParentManifestSchema, value, file, "parent.json");
}

// ---------------------------------------------------------------------------------------------
// state.json

/** Scheduling statuses; every one but `running` is terminal. */
export type SessionStatus = "running" | "stopped" | "goal_met" | "failed" | "max_turns";
/** The statuses that end a session. */
export const TERMINAL_STATUSES: readonly SessionStatus[] = [
  "stopped",
  "goal_met",
  "failed",
  "max_turns",
];

/** The task a session is executing: the exact attempt a terminal control must name. */
export interface CurrentTask {
  /** The workflow of the attempt. */
  readonly workflow_id: string;
  /** The iteration of the attempt. */
  readonly iteration: number;
  /** The attempt id. */
  readonly attempt_id: string;
  /** Other fields the engine keeps. */
  readonly [key: string]: unknown;
}

/**
 * The task of a v1 `state.json`: as `CurrentTask`, but a task persisted before the engine gave
 * every dispatch an attempt id has `attempt_id` `null` or absent (the engine's "pre-attempt
 * persisted state"). Such a task matches no attempt-bound record.
 */
export interface LegacyCurrentTask {
  /** The workflow of the attempt. */
  readonly workflow_id: string;
  /** The iteration of the attempt. */
  readonly iteration: number;
  /** The attempt id; `null` or absent when the task predates attempt ids. */
  readonly attempt_id?: string | null | undefined;
  /** Other fields the engine keeps. */
  readonly [key: string]: unknown;
}

/** The fields of `state.json` both versions share; other fields are kept as they are. */
export interface SessionStateFields {
  /** The session id (this library writes it). */
  readonly session_id?: string | undefined;
  /** The engine's name for the session id of the state (the session it belongs to). */
  readonly active_session_id?: string | undefined;
  /** The tree's root session; the engine may leave it `null` (then it is the session itself). */
  readonly root_session_id?: string | null | undefined;
  /** The scheduling status. */
  readonly status: SessionStatus;
  /** Incremented by every engine write. */
  readonly state_revision?: number | undefined;
  /** The live child this session waits for, if any. */
  readonly active_child_session_id?: string | null | undefined;
  /** The latest accepted handoff revision. */
  readonly handoff_revision?: number | undefined;
  /** The latest accepted handoff hash. */
  readonly handoff_sha256?: string | null | undefined;
  /** `state_revision + 1` at the terminal transition. */
  readonly terminal_state_revision?: number | null | undefined;
  /** When the terminal transition happened. */
  readonly terminal_at?: string | null | undefined;
  /** Other fields the engine keeps. */
  readonly [key: string]: unknown;
}

/** A schema-2 `state.json` (what this library writes): its current task names its attempt. */
export interface SessionStateV2 extends SessionStateFields {
  /** Always 2. */
  readonly schema_version: 2;
  /** The attempt being executed, if any. */
  readonly current_task?: CurrentTask | null | undefined;
}

/**
 * A schema-1 `state.json` of a legacy mirror session. A state without `schema_version` is v1
 * (the engine: "Missing means legacy v1"); it is read as `schema_version: 1`.
 */
export interface SessionStateV1 extends SessionStateFields {
  /** 1, also when the file has no `schema_version`. */
  readonly schema_version: 1;
  /** The attempt being executed, if any; it may predate attempt ids. */
  readonly current_task?: LegacyCurrentTask | null | undefined;
}

/** The fields of `state.json` the scheduler needs, by version (`schema_version` 1 or 2). */
export type SessionState = SessionStateV1 | SessionStateV2;

const CurrentTaskSchema: v.GenericSchema<unknown, CurrentTask> = v.looseObject({
  workflow_id: SafeId,
  iteration: Count,
  attempt_id: SafeId,
});

const LegacyCurrentTaskSchema: v.GenericSchema<unknown, LegacyCurrentTask> = v.looseObject({
  workflow_id: SafeId,
  iteration: Count,
  attempt_id: v.optional(v.nullable(SafeId)),
});

const sessionStateEntries = {
  session_id: v.optional(SessionId),
  active_session_id: v.optional(SessionId),
  root_session_id: v.optional(v.nullable(SessionId)),
  status: v.picklist(["running", "stopped", "goal_met", "failed", "max_turns"]),
  state_revision: v.optional(Count),
  active_child_session_id: v.optional(v.nullable(SessionId)),
  handoff_revision: v.optional(Count),
  handoff_sha256: v.optional(v.nullable(Sha256)),
  terminal_state_revision: v.optional(v.nullable(Count)),
  terminal_at: v.optional(v.nullable(Timestamp)),
};

const SessionStateV2Schema: v.GenericSchema<unknown, SessionStateV2> = v.looseObject({
  ...sessionStateEntries,
  schema_version: v.literal(2),
  current_task: v.optional(v.nullable(CurrentTaskSchema)),
});

const SessionStateV1Schema: v.GenericSchema<unknown, SessionStateV1> = v.looseObject({
  ...sessionStateEntries,
  // Absent means 1: the record is returned with `schema_version: 1`.
  schema_version: v.optional(v.literal(1), 1),
  current_task: v.optional(v.nullable(LegacyCurrentTaskSchema)),
});

/**
 * Validates `state.json` (schema 2, or the legacy schema 1, which a state without
 * `schema_version` is). A v1 current task may predate attempt ids (`attempt_id` `null` or
 * absent); a v2 one must name its attempt. A v2 state with both a current task and an active
 * child is refused.
 */
export function parseSessionState(value: unknown, file: string): SessionState {
  const object = requireObject(value, file, "state.json");
  const version = object.schema_version;
  if (version === undefined || version === 1) {
    return parseWithSchema(SessionStateV1Schema, value, file, "state.json");
  }
  if (version !== 2) {
    fail(file, "Invalid state.json: schema_version must be 1 or 2", "schema_version", version);
  }
  const state = parseWithSchema(SessionStateV2Schema, value, file, "state.json");
  if (state.current_task != null && state.active_child_session_id != null) {
    fail(
      file,
      "A session with an active child cannot have its own current task",
      "active_child_session_id",
      state.active_child_session_id,
    );
  }
  return state;
}

/** The session a `state.json` must belong to: the one its directory's `session.json` records. */
export interface StateOwner {
  /** The session id. */
  readonly sessionId: string;
  /** The tree's root session, when known (a legacy v1 child manifest does not record it). */
  readonly rootSessionId?: string | undefined;
}

/**
 * The owner a `session.json` records: its id, and its root (a v2 manifest records it; a legacy v1
 * root is its own root; a legacy v1 child's root is left unknown).
 */
export function stateOwnerOf(manifest: AnySessionManifest): StateOwner {
  if (manifest.schema_version === 2) {
    return { sessionId: manifest.session_id, rootSessionId: manifest.root_session_id };
  }
  return manifest.parent_session_id === null
    ? { sessionId: manifest.session_id, rootSessionId: manifest.session_id }
    : { sessionId: manifest.session_id };
}

/**
 * Refuses (`LayoutRecordError` naming `file` and the field) a state that names another session
 * than `owner`: a `session_id` or `active_session_id` other than its id, or a `root_session_id`
 * other than its root (when the root is known). A field the state does not have (or a `null`
 * root) is not checked. A state copied from another session is never read as this one's.
 */
export function assertStateOwner(state: SessionState, owner: StateOwner, file: string): void {
  for (const field of ["session_id", "active_session_id"] as const) {
    const value = state[field];
    if (value !== undefined && value !== owner.sessionId) {
      fail(
        file,
        `The state belongs to another session than ${owner.sessionId} (as session.json records)`,
        field,
        value,
      );
    }
  }
  const root = state.root_session_id;
  if (root != null && owner.rootSessionId !== undefined && root !== owner.rootSessionId) {
    fail(
      file,
      `The state names another root than ${owner.rootSessionId} (as session.json records)`,
      "root_session_id",
      root,
    );
  }
}

/** Where a session is in its life, from `state.json` alone. */
export type SessionPhase = "terminal" | "executing" | "suspended" | "ready";

/**
 * The phase of a state: `terminal` (status is not running), `executing` (a current task),
 * `suspended` (an active child), else `ready`.
 */
export function sessionPhase(state: SessionState): SessionPhase {
  if (state.status !== "running") return "terminal";
  if (state.current_task != null) return "executing";
  if (state.active_child_session_id != null) return "suspended";
  return "ready";
}

/**
 * What a `state.json` pins of the session's frozen contracts: the trust root of the on-disk
 * projections `workflow_contract.json`, `workflow_roster.json` and the root's
 * `harness_capability_roster.json`. A field the state does not record (absent or `null`, as in a
 * legacy state) is `undefined`.
 */
export interface StateContractPins {
  /** `workflow_contract`: the complete parsed workflow contract. */
  readonly workflowContract: OpenObject | undefined;
  /** `workflow_contract_sha256`: `sha256:` of `workflow_contract.json`. */
  readonly workflowContractSha256: string | undefined;
  /** `workflow_roster_sha256`: `sha256:` of `workflow_roster.json`. */
  readonly workflowRosterSha256: string | undefined;
  /** `harness_capability_roster.sha256`: `sha256:` of the root's `harness_capability_roster.json`. */
  readonly harnessCapabilityRosterSha256: string | undefined;
}

const StateContractPinsSchema = v.looseObject({
  workflow_contract: v.optional(v.nullable(AnyObject)),
  workflow_contract_sha256: v.optional(v.nullable(Sha256)),
  workflow_roster_sha256: v.optional(v.nullable(Sha256)),
  harness_capability_roster: v.optional(
    v.nullable(v.looseObject({ sha256: v.optional(v.nullable(Sha256)) })),
  ),
});

/**
 * The contract pins of a validated state (see `StateContractPins`). They are checked here, when
 * a projection is about to be trusted, not by `parseSessionState`, so a reader that needs no
 * contract is not stopped by them: a recorded pin that is malformed (a contract that is not an
 * object, a hash that is not `sha256:<64 hex>`) is a `LayoutRecordError` naming `file` and the
 * field (`workflow_roster_sha256`, `harness_capability_roster.sha256`).
 */
export function stateContractPins(state: SessionState, file: string): StateContractPins {
  const pins = parseWithSchema(StateContractPinsSchema, state, file, "state.json");
  return {
    workflowContract: pins.workflow_contract ?? undefined,
    workflowContractSha256: pins.workflow_contract_sha256 ?? undefined,
    workflowRosterSha256: pins.workflow_roster_sha256 ?? undefined,
    harnessCapabilityRosterSha256: pins.harness_capability_roster?.sha256 ?? undefined,
  };
}

// ---------------------------------------------------------------------------------------------
// control.json

/** The neutral running record every session starts with. */
export const NEUTRAL_CONTROL: {
  readonly state: "running";
  readonly reason: string;
  readonly stop_reason: null;
  readonly schema_version: 1;
} = { state: "running", reason: "session active", stop_reason: null, schema_version: 1 };

/** The only `handoff_ref` a v3 terminal control may cite. */
export const HANDOFF_REF = "session:/project_state/handoff.json";

/** The reference of a session's own `control.json`, as an outcome's control snapshot names it. */
const CONTROL_REF = "session:/control.json";

/** A running control record (the neutral record, or an engine repair placeholder). */
export interface RunningControl {
  /** 1 or 3. */
  readonly schema_version: 1 | 3;
  /** Always `running`. */
  readonly state: "running";
  /** Why the session is running. */
  readonly reason: string;
  /** Always null or absent on a running record. */
  readonly stop_reason?: null | undefined;
  /** Other fields (`engine_repair`, ...). */
  readonly [key: string]: unknown;
}

/** The attempt that produced a record. */
export interface Producer {
  /** The producing session. */
  readonly session_id: string;
  /** The producing workflow. */
  readonly workflow_id: string;
  /** The producing attempt. */
  readonly attempt_id: string;
}

/** A v3 terminal control record: it must name the exact current session/workflow/attempt. */
export interface TerminalControl {
  /** Always 3. */
  readonly schema_version: 3;
  /** Always `stopped`. */
  readonly state: "stopped";
  /** `goal_met` (completion) or `unresolvable_error` (the last resort). */
  readonly stop_reason: "goal_met" | "unresolvable_error";
  /** A safe id naming this control decision. */
  readonly control_id: string;
  /** Why, in words. */
  readonly reason: string;
  /** When it was produced. */
  readonly created_at: string;
  /** The exact attempt that produced it. */
  readonly producer: Producer;
  /** Logical references to evidence. */
  readonly evidence_refs?: readonly string[] | undefined;
  /** Logical references to accepted eval receipts (zero or more). */
  readonly eval_receipt_refs?: readonly string[] | undefined;
  /** The canonical handoff, if cited. */
  readonly handoff_ref?: string | undefined;
  /** For `unresolvable_error`: the autonomous routes already tried. */
  readonly attempted_routes?: readonly string[] | undefined;
}

/** A stopped control record of a v1/v2 session (read-only here). */
export interface LegacyStoppedControl {
  /** 1 or 2 (or absent). */
  readonly schema_version?: 1 | 2 | undefined;
  /** Always `stopped`. */
  readonly state: "stopped";
  /** The stop reason. */
  readonly stop_reason: string;
  /** Other fields. */
  readonly [key: string]: unknown;
}

/** Any supported `control.json`. */
export type ControlRecord = RunningControl | TerminalControl | LegacyStoppedControl;

const ProducerSchema: v.GenericSchema<unknown, Producer> = v.strictObject({
  session_id: SessionId,
  workflow_id: SafeId,
  attempt_id: SafeId,
});

const RunningControlSchema: v.GenericSchema<unknown, RunningControl> = v.looseObject({
  schema_version: v.picklist([1, 3]),
  state: v.literal("running"),
  reason: v.string(),
  stop_reason: v.optional(v.null("A running control record must not set stop_reason")),
});

const TerminalControlSchema: v.GenericSchema<unknown, TerminalControl> = v.strictObject({
  schema_version: v.literal(3),
  state: v.literal("stopped"),
  stop_reason: v.picklist(["goal_met", "unresolvable_error"]),
  control_id: SafeId,
  reason: NonBlank,
  created_at: Timestamp,
  producer: ProducerSchema,
  evidence_refs: v.optional(v.array(LogicalRef)),
  eval_receipt_refs: v.optional(v.array(LogicalRef)),
  handoff_ref: v.optional(v.literal(HANDOFF_REF, `handoff_ref must be exactly ${HANDOFF_REF}`)),
  attempted_routes: v.optional(v.array(NonBlank)),
});

const LegacyStoppedControlSchema: v.GenericSchema<unknown, LegacyStoppedControl> = v.looseObject(
  {
    schema_version: v.optional(v.picklist([1, 2])),
    state: v.literal("stopped"),
    stop_reason: NonBlank,
  },
);

/** True when `control` is a v3 terminal record. */
export function isTerminalControl(control: ControlRecord): control is TerminalControl {
  return control.state === "stopped" && control.schema_version === 3;
}

/**
 * Validates `control.json`: a running record, a v3 terminal record (strict; `eval_receipt_ref`
 * is forbidden; `unresolvable_error` needs `attempted_routes` and forbids eval and handoff refs),
 * or a legacy stopped record.
 */
export function parseControlRecord(value: unknown, file: string): ControlRecord {
  const object = requireObject(value, file, "control.json");
  if (object.state === "running") {
    return parseWithSchema(RunningControlSchema, value, file, "control.json");
  }
  if (object.state !== "stopped") {
    fail(file, "Invalid control.json: state must be running or stopped", "state", object.state);
  }
  if (object.schema_version !== 3) {
    return parseWithSchema(LegacyStoppedControlSchema, value, file, "control.json");
  }
  if ("eval_receipt_ref" in object) {
    fail(
      file,
      "A v3 control record forbids eval_receipt_ref; cite eval_receipt_refs",
      "eval_receipt_ref",
      object.eval_receipt_ref,
    );
  }
  const control = parseWithSchema(TerminalControlSchema, value, file, "control.json");
  if (control.stop_reason === "unresolvable_error") {
    if (control.attempted_routes === undefined || control.attempted_routes.length === 0) {
      fail(
        file,
        "unresolvable_error must list the autonomous routes already tried",
        "attempted_routes",
        control.attempted_routes,
      );
    }
    if (control.eval_receipt_refs !== undefined && control.eval_receipt_refs.length > 0) {
      fail(
        file,
        "unresolvable_error must not cite eval receipts",
        "eval_receipt_refs",
        control.eval_receipt_refs,
      );
    }
    if (control.handoff_ref !== undefined) {
      fail(file, "unresolvable_error must not cite a handoff", "handoff_ref", control.handoff_ref);
    }
  }
  return control;
}

/** What a terminal control must match: the current attempt and the contract's roles. */
export interface TerminalControlExpectation {
  /** The current session. */
  readonly sessionId: string;
  /** The current task's workflow. */
  readonly workflowId: string;
  /** The current task's attempt. */
  readonly attemptId: string;
  /**
   * `orchestration.completion_role`: the only workflow that may declare `goal_met`
   * (`readTerminalControl` also checks the session's own frozen contract).
   */
  readonly completionRole?: string | undefined;
  /** `terminal_blocker_reporting_roles`: the workflows that may declare `unresolvable_error`. */
  readonly blockerReportingRoles?: readonly string[] | undefined;
}

/**
 * Checks that a terminal control names the exact current session, workflow and attempt, and
 * that its producer holds the role its stop reason needs. Throws `LayoutRecordError` naming the
 * offending `producer.*` field.
 */
export function assertTerminalControlMatches(
  control: TerminalControl,
  expected: TerminalControlExpectation,
  file: string,
): void {
  const producer = control.producer;
  if (producer.session_id !== expected.sessionId) {
    fail(
      file,
      "Terminal control names another session",
      "producer.session_id",
      producer.session_id,
    );
  }
  if (producer.workflow_id !== expected.workflowId) {
    fail(
      file,
      "Terminal control names another workflow than the current task",
      "producer.workflow_id",
      producer.workflow_id,
    );
  }
  if (producer.attempt_id !== expected.attemptId) {
    fail(
      file,
      "Terminal control names another attempt than the current task",
      "producer.attempt_id",
      producer.attempt_id,
    );
  }
  if (
    control.stop_reason === "goal_met" && expected.completionRole !== undefined &&
    producer.workflow_id !== expected.completionRole
  ) {
    fail(
      file,
      "Only the contract's completion role may declare goal_met",
      "producer.workflow_id",
      producer.workflow_id,
    );
  }
  if (
    control.stop_reason === "unresolvable_error" && expected.blockerReportingRoles !== undefined &&
    !expected.blockerReportingRoles.includes(producer.workflow_id)
  ) {
    fail(
      file,
      "Only a terminal blocker reporting role may declare unresolvable_error",
      "producer.workflow_id",
      producer.workflow_id,
    );
  }
}

// ---------------------------------------------------------------------------------------------
// project_state/handoff.json

/** The producer of a handoff revision. */
export interface HandoffProducer {
  /** The producing workflow. */
  readonly workflow_id: string;
  /** The producing attempt. */
  readonly attempt_id: string;
  /** The producing session (optional). */
  readonly session_id?: string | undefined;
}

/** `project_state/handoff.json`: the rolling semantic summary of a layer. */
export interface Handoff {
  /** Always 1. */
  readonly schema_version: 1;
  /** The session it summarizes. */
  readonly session_id: string;
  /** The goal hash of that session. */
  readonly goal_sha256: string;
  /** Monotonically increasing revision (0 for the scaffold). */
  readonly revision: number;
  /** The producing attempt, `null` for the scaffold. */
  readonly producer: HandoffProducer | null;
  /** The summary. */
  readonly summary: string;
  /** Accepted outcomes. */
  readonly accepted_outcomes: readonly unknown[];
  /** Open work. */
  readonly open_work: readonly unknown[];
  /** Risks. */
  readonly risks: readonly unknown[];
  /** Decision references. */
  readonly decision_refs: readonly unknown[];
  /** Evidence references. */
  readonly evidence_refs: readonly unknown[];
  /** Delivery references. */
  readonly delivery_refs: readonly unknown[];
  /** Eval references. */
  readonly eval_refs: readonly unknown[];
  /** When this revision was written. */
  readonly updated_at: string;
}

const HandoffSchema: v.GenericSchema<unknown, Handoff> = v.strictObject({
  schema_version: v.literal(1),
  session_id: SessionId,
  goal_sha256: GoalHash,
  revision: Count,
  producer: v.nullable(
    v.strictObject({
      workflow_id: SafeId,
      attempt_id: SafeId,
      session_id: v.optional(SessionId),
    }),
  ),
  summary: v.string(),
  accepted_outcomes: v.array(v.unknown()),
  open_work: v.array(v.unknown()),
  risks: v.array(v.unknown()),
  decision_refs: v.array(v.unknown()),
  evidence_refs: v.array(v.unknown()),
  delivery_refs: v.array(v.unknown()),
  eval_refs: v.array(v.unknown()),
  updated_at: Timestamp,
});

/** Validates `handoff.json` (strict: unknown keys are refused). */
export function parseHandoff(value: unknown, file: string): Handoff {
  return parseWithSchema(HandoffSchema, value, file, "handoff.json");
}

// ---------------------------------------------------------------------------------------------
// goal_contract.json

/** A parent input frozen into a child: its source reference, hash and frozen copy. */
export interface FrozenInput {
  /** The declared input, as a reference valid anywhere in the tree (`repo:/…`, `session:<id>:/…`). */
  readonly source_ref: string;
  /** `sha256:` of the exact bytes. */
  readonly sha256: string;
  /** The child's copy: `session:/inputs/artifacts/input-<NNNN>-<12hex>.artifact`. */
  readonly frozen_ref: string;
  /** Size in bytes. */
  readonly size: number;
}

/** `goal_contract.json`: the goal bound to its criteria and origin. */
export interface GoalContract {
  /** Always 1. */
  readonly schema_version: 1;
  /** The session. */
  readonly session_id: string;
  /** The exact goal text. */
  readonly goal: string;
  /** `sha256:` of the goal text. */
  readonly goal_hash: string;
  /** Completion criteria. */
  readonly completion_criteria: readonly string[];
  /** Stop criteria. */
  readonly stop_criteria: readonly string[];
  /** Constraints. */
  readonly constraints: readonly string[];
  /** Deliverables. */
  readonly deliverables: readonly string[];
  /** Required evidence. */
  readonly required_evidence: readonly string[];
  /** `workflow:<workflow_set>`. */
  readonly terminal_blocker_policy_ref: string;
  /** The child request id (children only). */
  readonly origin_request_id: string | null;
  /** `session:/inputs/accepted_request.json` (children only). */
  readonly accepted_request_ref: string | null;
  /** `sha256:` of the accepted request bytes (children only). */
  readonly accepted_request_sha256: string | null;
  /** Declared parent inputs, frozen into `inputs/artifacts/`. */
  readonly inputs: readonly FrozenInput[];
  /** Creation time. */
  readonly created_at: string;
}

const FrozenInputSchema: v.GenericSchema<unknown, FrozenInput> = v.looseObject({
  source_ref: LogicalRef,
  sha256: Sha256,
  frozen_ref: v.pipe(
    v.string(),
    v.regex(
      /^session:\/inputs\/artifacts\/input-\d{4,}-[0-9a-f]{12}\.artifact$/,
      "Expected session:/inputs/artifacts/input-<NNNN>-<12hex>.artifact",
    ),
  ),
  size: Count,
});

const GoalContractSchema: v.GenericSchema<unknown, GoalContract> = v.looseObject({
  schema_version: v.literal(1),
  session_id: SessionId,
  goal: v.string(),
  goal_hash: GoalHash,
  completion_criteria: StringList,
  stop_criteria: StringList,
  constraints: StringList,
  deliverables: StringList,
  required_evidence: StringList,
  terminal_blocker_policy_ref: v.pipe(
    v.string(),
    v.regex(/^workflow:[A-Za-z0-9][A-Za-z0-9_.-]*$/, "Expected workflow:<workflow_set>"),
  ),
  origin_request_id: v.nullable(SafeId),
  accepted_request_ref: v.nullable(LogicalRef),
  accepted_request_sha256: v.nullable(Sha256),
  inputs: v.array(FrozenInputSchema),
  created_at: Timestamp,
});

/** The reference a child's goal contract uses for its own copy of the accepted request. */
export const ACCEPTED_REQUEST_REF = "session:/inputs/accepted_request.json";

/** Validates `goal_contract.json`; a child's contract must bind its accepted request. */
export function parseGoalContract(value: unknown, file: string): GoalContract {
  const contract = parseWithSchema(GoalContractSchema, value, file, "goal_contract.json");
  if (contract.origin_request_id !== null) {
    if (contract.accepted_request_ref !== ACCEPTED_REQUEST_REF) {
      fail(
        file,
        `A child's goal contract binds ${ACCEPTED_REQUEST_REF}`,
        "accepted_request_ref",
        contract.accepted_request_ref,
      );
    }
    if (contract.accepted_request_sha256 === null) {
      fail(
        file,
        "A child's goal contract binds the accepted request's hash",
        "accepted_request_sha256",
        null,
      );
    }
  }
  return contract;
}

// ---------------------------------------------------------------------------------------------
// child_requests/*

/** A v3 child request, published by a parent workflow under `child_requests/pending/`. */
export interface ChildRequest {
  /** Always 3. */
  readonly schema_version: 3;
  /** A safe id, unique within the parent. */
  readonly request_id: string;
  /** The child's goal. */
  readonly goal: string;
  /** The child's workflow set (the parent's when absent). */
  readonly workflow_set?: string | undefined;
  /** The layer kind of the child (`work` when absent). */
  readonly layer_kind?: string | undefined;
  /** Where the request came from. */
  readonly origin: {
    /** The parent attempt that published it. */
    readonly parent_attempt_id: string;
    /** The parent work item it serves. */
    readonly parent_work_item_id?: string | null | undefined;
  };
  /** Completion criteria for the child. */
  readonly completion_criteria?: readonly string[] | undefined;
  /** Stop criteria for the child. */
  readonly stop_criteria?: readonly string[] | undefined;
  /** Constraints for the child. */
  readonly constraints?: readonly string[] | undefined;
  /** Deliverables of the child. */
  readonly deliverables?: readonly string[] | undefined;
  /** Evidence the child must produce. */
  readonly required_evidence?: readonly string[] | undefined;
  /**
   * Declared parent inputs, as logical references resolved in the parent session. Their exact
   * bytes are copied into the child's `inputs/artifacts/` and bound by hash in its contract.
   */
  readonly input_refs?: readonly string[] | undefined;
}

/** The longest `request_id` a child request may have, in characters. */
const MAX_REQUEST_ID_LENGTH = 128;

const RequestId = v.pipe(
  SafeId,
  v.maxLength(
    MAX_REQUEST_ID_LENGTH,
    `request_id is longer than ${MAX_REQUEST_ID_LENGTH} characters`,
  ),
);

/**
 * True when `value` is a `request_id` a child request may have: a safe id of at most 128
 * characters, as the child request schema checks it.
 */
export function isRequestId(value: unknown): value is string {
  return v.is(RequestId, value);
}

const ChildRequestSchema: v.GenericSchema<unknown, ChildRequest> = v.strictObject({
  schema_version: v.literal(3),
  request_id: RequestId,
  goal: NonBlank,
  workflow_set: v.optional(SafeId),
  layer_kind: v.optional(NonBlank),
  origin: v.strictObject({
    parent_attempt_id: SafeId,
    parent_work_item_id: v.optional(v.nullable(SafeId)),
  }),
  completion_criteria: v.optional(StringList),
  stop_criteria: v.optional(StringList),
  constraints: v.optional(StringList),
  deliverables: v.optional(StringList),
  required_evidence: v.optional(StringList),
  input_refs: v.optional(v.array(LogicalRef)),
});

/**
 * Validates a child request. Only schema 3 is accepted in a folded session; `assignment` and
 * `inputs` (v2 shapes) are refused with a message saying what to use instead.
 */
export function parseChildRequest(value: unknown, file: string): ChildRequest {
  const object = requireObject(value, file, "child request");
  if (object.schema_version !== 3) {
    fail(
      file,
      "Unsupported child request version (folded sessions take schema_version 3)",
      "schema_version",
      object.schema_version,
    );
  }
  if ("assignment" in object) {
    fail(
      file,
      "A v3 child request carries its goal at the top level; assignment is not allowed",
      "assignment",
      object.assignment,
    );
  }
  if ("inputs" in object) {
    fail(
      file,
      "A v3 child request declares parent inputs with input_refs; inputs is not allowed",
      "inputs",
      object.inputs,
    );
  }
  return parseWithSchema(ChildRequestSchema, value, file, "child request");
}

/** The receipt written beside a rejected request: `rejected/<archived name>.receipt.json`. */
export interface RejectedRequestReceipt {
  /** Always 1. */
  readonly schema_version: 1;
  /** Always `child_request_rejected`. */
  readonly kind: "child_request_rejected";
  /** The request's name in `pending/`. */
  readonly request_file: string;
  /** Its name in `rejected/`. */
  readonly archived_file: string;
  /** The request id, when it could be read. */
  readonly request_id: string | null;
  /**
   * `sha256:` of the original bytes (unchanged by archiving); null for a request file too large
   * to hash, larger than `MAX_HASHED_REQUEST_BYTES` (1 GiB).
   */
  readonly original_sha256: string | null;
  /** The diagnosis. */
  readonly reason: string;
  /** The JSON path of the offending field, when the request was malformed. */
  readonly field: string | null;
  /** When it was rejected. */
  readonly rejected_at: string;
}

const RejectedRequestReceiptSchema: v.GenericSchema<unknown, RejectedRequestReceipt> = v
  .looseObject({
    schema_version: v.literal(1),
    kind: v.literal("child_request_rejected"),
    request_file: NonBlank,
    archived_file: NonBlank,
    request_id: v.nullable(v.string()),
    original_sha256: v.nullable(Sha256),
    reason: NonBlank,
    field: v.nullable(v.string()),
    rejected_at: Timestamp,
  });

/** Validates a rejection receipt. */
export function parseRejectedRequestReceipt(value: unknown, file: string): RejectedRequestReceipt {
  return parseWithSchema(RejectedRequestReceiptSchema, value, file, "rejection receipt");
}

// ---------------------------------------------------------------------------------------------
// children.json

/** A child's status in the parent's ledger. */
export type ChildStatus =
  | "dispatching"
  | "running"
  | "stopped"
  | "goal_met"
  | "failed"
  | "max_turns"
  | "failed_dispatch";

/** Ledger statuses of a live child (at most one per parent). */
export const LIVE_CHILD_STATUSES: readonly ChildStatus[] = ["dispatching", "running"];

/** One child in `children.json`. */
export interface ChildRecord {
  /** The child's session id. */
  readonly session_id: string;
  /** The request that created it. */
  readonly request_id: string;
  /** Its status. */
  readonly status: ChildStatus;
  /** `session:/child_requests/accepted/<request_id>.json`. */
  readonly accepted_request_ref: string;
  /** `sha256:` of the accepted request. */
  readonly accepted_request_sha256?: string | undefined;
  /** `session:/child_outcomes/<request_id>.json` once the child is terminal. */
  readonly outcome_ref?: string | null | undefined;
  /** When it was indexed. */
  readonly created_at?: string | undefined;
  /** When its status last changed. */
  readonly updated_at?: string | undefined;
  /** Other fields. */
  readonly [key: string]: unknown;
}

/** `children.json` (schema 2): the revisioned ledger of a session's children. */
export interface ChildrenLedger {
  /** Always 2. */
  readonly schema_version: 2;
  /** The session whose children these are. */
  readonly parent_session_id: string;
  /** Incremented by every rewrite. */
  readonly revision: number;
  /** The children, in creation order. */
  readonly children: readonly ChildRecord[];
  /** Other fields. */
  readonly [key: string]: unknown;
}

/**
 * One child of a v1 `children.json` (a legacy mirror session). Only its session id and status
 * are required; an old record may have no request id (the engine's early records name the
 * request file instead) and has no accepted request. Other fields are kept as they are.
 */
export interface LegacyChildRecord {
  /** The child's session id. */
  readonly session_id: string;
  /** The request that created it, when the record names one. */
  readonly request_id?: string | null | undefined;
  /** Its status. */
  readonly status: ChildStatus;
  /** The accepted request, when the record names one. */
  readonly accepted_request_ref?: string | null | undefined;
  /** `session:/child_outcomes/<request_id>.json` once recorded here. */
  readonly outcome_ref?: string | null | undefined;
  /** Other fields (`workflow_set`, `goal_hash`, `created_at`, `completed_at`, ...). */
  readonly [key: string]: unknown;
}

/**
 * A v1 `children.json` of a legacy mirror session — `{schema_version: 1, children: [...]}` or a
 * bare list of records, which is read as the same form — mapped into the typed ledger. The v1
 * form names neither its session nor a revision: `parent_session_id` is the session whose
 * directory holds the file (given to the reader), and `revision` is always 0. A rewrite keeps
 * the v1 form (see `readChildrenLedger`).
 */
export interface LegacyChildrenLedger {
  /** Always 1 (a bare list included). */
  readonly schema_version: 1;
  /** The session whose directory holds the file (not recorded in a v1 ledger). */
  readonly parent_session_id: string;
  /** Always 0: a v1 ledger has no revision. */
  readonly revision: 0;
  /** The children, in creation order. */
  readonly children: readonly LegacyChildRecord[];
}

/** Any supported `children.json`: schema 2, or the v1 form of a legacy mirror session. */
export type AnyChildrenLedger = ChildrenLedger | LegacyChildrenLedger;

const CHILD_STATUS = v.picklist([
  "dispatching",
  "running",
  "stopped",
  "goal_met",
  "failed",
  "max_turns",
  "failed_dispatch",
]);

const ChildRecordSchema: v.GenericSchema<unknown, ChildRecord> = v.looseObject({
  session_id: SessionId,
  request_id: SafeId,
  status: CHILD_STATUS,
  accepted_request_ref: LogicalRef,
  accepted_request_sha256: v.optional(Sha256),
  outcome_ref: v.optional(v.nullable(LogicalRef)),
  created_at: v.optional(Timestamp),
  updated_at: v.optional(Timestamp),
});

const ChildrenLedgerSchema: v.GenericSchema<unknown, ChildrenLedger> = v.looseObject({
  schema_version: v.literal(2),
  parent_session_id: SessionId,
  revision: Count,
  children: v.array(ChildRecordSchema),
});

const LegacyChildRecordSchema: v.GenericSchema<unknown, LegacyChildRecord> = v.looseObject({
  session_id: SessionId,
  request_id: v.optional(v.nullable(SafeId)),
  status: CHILD_STATUS,
  accepted_request_ref: v.optional(v.nullable(LogicalRef)),
  outcome_ref: v.optional(v.nullable(LogicalRef)),
});

const LegacyChildrenSchema = v.array(LegacyChildRecordSchema);

/**
 * `parseSessionState` of a `state.json` as read from `file`: one nested deeper than
 * `MAX_RECORD_NESTING` levels is refused first (`LayoutRecordError` at the field), since an update
 * could not write it again; refused when read, before an operation writes anything.
 */
export function parseSessionStateAsRead(value: unknown, file: string): SessionState {
  refuseDeepRecord(value, file);
  return parseSessionState(value, file);
}

/**
 * `parseChildrenLedger` of a `children.json` as read from `file`, refused first when nested
 * deeper than `MAX_RECORD_NESTING` levels, as `parseSessionStateAsRead` refuses a state.
 */
export function parseChildrenLedgerAsRead(
  value: unknown,
  file: string,
  sessionId?: string,
): AnyChildrenLedger {
  refuseDeepRecord(value, file);
  return parseChildrenLedger(value, file, sessionId);
}

/**
 * Validates `children.json`. Schema 2: unique session and request ids, at most one live child
 * (dispatching or running). The v1 form of a legacy mirror session (`{schema_version: 1,
 * children}` or a bare list) is read as a `LegacyChildrenLedger`: each record needs a session id
 * and a known status, and may have a safe request id; the v2 cross-record checks are not
 * applied (the rules name them for v2). A v1 ledger does not name its session, so reading one
 * needs `sessionId` (the session whose directory holds it); without it a v1 ledger is a
 * `LayoutRecordError`. A v1 object that carries `parent_session_id` or `revision` is refused
 * too: those are schema-2 fields, and which form it is would be a guess.
 */
export function parseChildrenLedger(
  value: unknown,
  file: string,
  sessionId?: string,
): AnyChildrenLedger {
  const legacy = Array.isArray(value) ? value : undefined;
  const object = legacy === undefined ? requireObject(value, file, "children.json") : undefined;
  if (legacy !== undefined || object?.schema_version === 1) {
    if (object !== undefined) {
      for (const field of ["parent_session_id", "revision"]) {
        if (field in object) {
          fail(file, "A v1 children.json has no schema-2 fields", field, object[field]);
        }
      }
      if (!Array.isArray(object.children)) {
        fail(file, "Invalid children.json: children must be a list", "children", object.children);
      }
    }
    if (sessionId === undefined) {
      fail(
        file,
        "A v1 children.json does not name its session; read it with the session's id",
        "schema_version",
        1,
      );
    }
    // Issue paths are those of the file: `children[0].status`, or `[0].status` for a bare list.
    const children = legacy === undefined
      ? parseWithSchema(v.object({ children: LegacyChildrenSchema }), value, file, "children.json")
        .children
      : parseWithSchema(LegacyChildrenSchema, value, file, "children.json");
    return { schema_version: 1, parent_session_id: sessionId, revision: 0, children };
  }
  if (object?.schema_version !== 2) {
    fail(file, "Unsupported children.json version", "schema_version", object?.schema_version);
  }
  const ledger = parseWithSchema(ChildrenLedgerSchema, value, file, "children.json");
  const sessions = new Set<string>();
  const requests = new Set<string>();
  let live: number | undefined;
  ledger.children.forEach((child, i) => {
    if (sessions.has(child.session_id)) {
      fail(file, "Duplicate child session id", `children[${i}].session_id`, child.session_id);
    }
    if (requests.has(child.request_id)) {
      fail(file, "Duplicate child request id", `children[${i}].request_id`, child.request_id);
    }
    sessions.add(child.session_id);
    requests.add(child.request_id);
    // The request's own accepted copy and outcome file, never another file.
    const accepted = `session:/child_requests/accepted/${child.request_id}.json`;
    if (child.accepted_request_ref !== accepted) {
      fail(
        file,
        `A child record's accepted request is ${accepted}`,
        `children[${i}].accepted_request_ref`,
        child.accepted_request_ref,
      );
    }
    const outcome = `session:/child_outcomes/${child.request_id}.json`;
    if (
      child.outcome_ref !== undefined && child.outcome_ref !== null && child.outcome_ref !== outcome
    ) {
      fail(
        file,
        `A child record's outcome is ${outcome}`,
        `children[${i}].outcome_ref`,
        child.outcome_ref,
      );
    }
    if (LIVE_CHILD_STATUSES.includes(child.status)) {
      if (live !== undefined) {
        fail(file, "More than one live child", `children[${i}].status`, child.status);
      }
      live = i;
    }
  });
  return ledger;
}

// ---------------------------------------------------------------------------------------------
// child_outcomes/ and parent_acceptance/

/** `child_outcomes/<request_id>.json`: the parent's reference to a child's outcome. */
export interface ChildOutcome {
  /** Always 2. */
  readonly schema_version: 2;
  /** The request the child served. */
  readonly request_id: string;
  /** The child session. */
  readonly child_session_id: string;
  /** `session:<child>:/session_outcome.json`. */
  readonly session_outcome_ref: string;
  /** `sha256:` of the child's `session_outcome.json`. */
  readonly session_outcome_sha256: string;
}

const ChildOutcomeSchema: v.GenericSchema<unknown, ChildOutcome> = v.looseObject({
  schema_version: v.literal(2),
  request_id: SafeId,
  child_session_id: SessionId,
  session_outcome_ref: LogicalRef,
  session_outcome_sha256: Sha256,
});

/** Validates a child outcome record; its reference must name the child's own outcome file. */
export function parseChildOutcome(value: unknown, file: string): ChildOutcome {
  const outcome = parseWithSchema(ChildOutcomeSchema, value, file, "child outcome");
  const expected = `session:${outcome.child_session_id}:/session_outcome.json`;
  if (outcome.session_outcome_ref !== expected) {
    fail(
      file,
      `A child outcome references ${expected}`,
      "session_outcome_ref",
      outcome.session_outcome_ref,
    );
  }
  return outcome;
}

/** The parent orchestrator's decision about a finished child. */
export type ParentDecision = "accepted" | "rework" | "reroute";

/** `parent_acceptance/<request_id>.json`: the parent's decision about a child's outcome. */
export interface ParentAcceptance {
  /** Always 1. */
  readonly schema_version: 1;
  /** The request the child served. */
  readonly request_id: string;
  /** The child session. */
  readonly child_session_id: string;
  /** accepted, rework or reroute. */
  readonly decision: ParentDecision;
  /** Why. */
  readonly reason: string;
  /** `session:/child_outcomes/<request_id>.json`. */
  readonly child_outcome_ref: string;
  /** `sha256:` of that child outcome record. */
  readonly child_outcome_sha256: string;
  /** The parent attempt that decided. */
  readonly producer: Producer;
  /** When. */
  readonly created_at: string;
}

const ParentAcceptanceSchema: v.GenericSchema<unknown, ParentAcceptance> = v.strictObject({
  schema_version: v.literal(1),
  request_id: SafeId,
  child_session_id: SessionId,
  decision: v.picklist(["accepted", "rework", "reroute"]),
  reason: NonBlank,
  child_outcome_ref: LogicalRef,
  child_outcome_sha256: Sha256,
  producer: ProducerSchema,
  created_at: Timestamp,
});

/** Validates a parent acceptance record. */
export function parseParentAcceptance(value: unknown, file: string): ParentAcceptance {
  const record = parseWithSchema(ParentAcceptanceSchema, value, file, "parent acceptance");
  const expected = `session:/child_outcomes/${record.request_id}.json`;
  if (record.child_outcome_ref !== expected) {
    fail(
      file,
      `Parent acceptance cites ${expected}`,
      "child_outcome_ref",
      record.child_outcome_ref,
    );
  }
  return record;
}

// ---------------------------------------------------------------------------------------------
// session_outcome.json

/** How the handoff looked at the terminal transition. */
export type HandoffStatus = "valid" | "missing" | "invalid" | "non_monotonic";

/** `session_outcome.json`, written after every v3 terminal transition. */
export interface SessionOutcome {
  /** Always 1. */
  readonly schema_version: 1;
  /** The session. */
  readonly session_id: string;
  /** Its root. */
  readonly root_session_id: string;
  /** Its goal hash. */
  readonly goal_sha256: string;
  /** Always `terminal`. */
  readonly lifecycle: "terminal";
  /** The terminal status. */
  readonly terminal_status: Exclude<SessionStatus, "running">;
  /** The stop reason. */
  readonly stop_reason: string;
  /** The frozen transition revision. */
  readonly terminal_state_revision: number;
  /** The accepted control, when one decided the transition. */
  readonly control: { readonly ref: string; readonly sha256: string } | null;
  /** The handoff observation. */
  readonly handoff: {
    readonly status: HandoffStatus;
    readonly ref: string;
    readonly sha256: string | null;
    readonly revision: number | null;
  };
  /** Present only when the handoff is not valid. */
  readonly fallback_summary?:
    | { readonly source: "control_reason" | "engine_stop_reason"; readonly text: string }
    | undefined;
  /** Evidence references. */
  readonly evidence_refs: readonly string[];
  /** Delivery references. */
  readonly delivery_refs: readonly string[];
  /** Accepted eval references. */
  readonly eval_refs: readonly string[];
  /** Always `[]` in a folded session. */
  readonly trace_seal_refs: readonly string[];
  /** The terminal time. */
  readonly created_at: string;
}

const SessionOutcomeSchema: v.GenericSchema<unknown, SessionOutcome> = v.looseObject({
  schema_version: v.literal(1),
  session_id: SessionId,
  root_session_id: SessionId,
  goal_sha256: GoalHash,
  lifecycle: v.literal("terminal"),
  terminal_status: v.picklist(["stopped", "goal_met", "failed", "max_turns"]),
  stop_reason: NonBlank,
  terminal_state_revision: Count,
  control: v.nullable(v.object({ ref: LogicalRef, sha256: Sha256 })),
  handoff: v.object({
    status: v.picklist(["valid", "missing", "invalid", "non_monotonic"]),
    ref: LogicalRef,
    sha256: v.nullable(Sha256),
    revision: v.nullable(Count),
  }),
  fallback_summary: v.optional(
    v.object({
      source: v.picklist(["control_reason", "engine_stop_reason"]),
      text: NonBlank,
    }),
  ),
  evidence_refs: v.array(LogicalRef),
  delivery_refs: v.array(LogicalRef),
  eval_refs: v.array(LogicalRef),
  trace_seal_refs: v.array(LogicalRef),
  created_at: Timestamp,
});

/**
 * Validates `session_outcome.json`. The transition follows the rule its writer enforces
 * (`writeSessionOutcome`): goal_met and unresolvable_error bind a control snapshot and no other
 * stop does (else a `LayoutRecordError` at `control`; the engine raises `StateInvariantError`
 * for a missing one), goal_met and only goal_met leaves the session `goal_met`, and
 * unresolvable_error leaves it `failed` (else at `terminal_status`). A fallback summary is
 * present exactly when the handoff is not valid; with `layout: "folded"`, `trace_seal_refs` must
 * be empty; with `layout: "mirror"`, each is `session:/trace_seals/<attempt_id>.json`. The other
 * references are checked only by their grammar here: which targets a folded session may cite
 * depends on the session that holds each target, and is decided when the outcome is written
 * (`writeSessionOutcome`), never when it is read.
 */
export function parseSessionOutcome(
  value: unknown,
  file: string,
  layout: SessionLayout = "folded",
): SessionOutcome {
  const outcome = parseWithSchema(SessionOutcomeSchema, value, file, "session_outcome.json");
  // The transition rule the writer enforces: control, stop reason and status belong together.
  checkTerminalTransition(file, {
    stopReason: outcome.stop_reason,
    terminalStatus: outcome.terminal_status,
    control: outcome.control ?? undefined,
  });
  // The control snapshot is the session's own control.json; a folded session's handoff is its
  // own project_state/handoff.json.
  if (outcome.control !== null && outcome.control.ref !== CONTROL_REF) {
    fail(file, `The control of an outcome is ${CONTROL_REF}`, "control.ref", outcome.control.ref);
  }
  if (layout === "folded" && outcome.handoff.ref !== HANDOFF_REF) {
    fail(file, `The handoff of an outcome is ${HANDOFF_REF}`, "handoff.ref", outcome.handoff.ref);
  }
  if ((outcome.handoff.status === "valid") !== (outcome.fallback_summary === undefined)) {
    fail(
      file,
      "fallback_summary is present exactly when the handoff is not valid",
      "fallback_summary",
      outcome.fallback_summary,
    );
  }
  if (layout === "folded" && outcome.trace_seal_refs.length > 0) {
    fail(
      file,
      "A folded session has no trace seals",
      "trace_seal_refs",
      outcome.trace_seal_refs,
    );
  }
  if (layout === "mirror") {
    outcome.trace_seal_refs.forEach((ref, i) => {
      if (!TRACE_SEAL_REF.test(ref)) {
        fail(
          file,
          "A trace seal reference is session:/trace_seals/<attempt_id>.json",
          `trace_seal_refs[${i}]`,
          ref,
        );
      }
    });
  }
  return outcome;
}

const TRACE_SEAL_REF = /^session:\/trace_seals\/[A-Za-z0-9][A-Za-z0-9_.-]*\.json$/;

// ---------------------------------------------------------------------------------------------
// iterations/<NNNN>_<workflow>/result.json

/** An attempt's compact `result.json`: a JSON object whose fields the engine defines. */
export type AttemptResult = OpenObject;

/** Validates an attempt's `result.json`: a JSON object (its fields are the engine's). */
export function parseAttemptResult(value: unknown, file: string): AttemptResult {
  return requireObject(value, file, "result.json");
}

/** An attempt's `paths.json`: the machine path map, a JSON object whose fields the engine defines. */
export type AttemptPathsMap = OpenObject;

/** Validates an attempt's `paths.json`: a JSON object (its fields are the engine's). */
export function parseAttemptPathsMap(value: unknown, file: string): AttemptPathsMap {
  return requireObject(value, file, "paths.json");
}

// ---------------------------------------------------------------------------------------------
// iterations/<NNNN>_<workflow>/trace_ref.json

/** A folded attempt's trace reference: a plain session-relative path into `raw/`. */
export interface FoldedTraceRef {
  /** 1; absent in a reference that records only the raw directory (the engine's own fields). */
  readonly schema_version?: 1 | undefined;
  /** `raw/<NNNN>_<workflow>`. */
  readonly raw_dir: string;
  /** `session:/raw/<NNNN>_<workflow>`. */
  readonly raw_dir_ref: string;
  /** The attempt; absent in a reference that records only the raw directory. */
  readonly attempt_id?: string | undefined;
  /** The iteration (read from the raw directory's name when the file does not record it). */
  readonly iteration: number;
  /** The workflow (read from the raw directory's name when the file does not record it). */
  readonly workflow_id: string;
}

/** A mirror attempt's trace reference (read-only here). */
export interface MirrorTraceRef {
  /** Always 1. */
  readonly schema_version: 1;
  /** `trace-<attempt_id>`. */
  readonly manifest_id: string;
  /** `trace:trace-<attempt_id>:/trace_manifest.json`. */
  readonly manifest_ref: string;
  /** The attempt. */
  readonly attempt_id: string;
}

/**
 * A folded `trace_ref.json` as read: the seed names only the raw directory and its logical
 * reference, so the fields this library also writes (schema version, attempt, iteration,
 * workflow) may be absent; the iteration and workflow are then those of the raw directory's name.
 */
const FoldedTraceRefSchema: v.GenericSchema<
  unknown,
  Omit<FoldedTraceRef, "iteration" | "workflow_id"> & {
    readonly iteration?: number | undefined;
    readonly workflow_id?: string | undefined;
  }
> = v.looseObject({
  schema_version: v.optional(v.literal(1)),
  raw_dir: v.string(),
  raw_dir_ref: v.string(),
  attempt_id: v.optional(SafeId),
  iteration: v.optional(Count),
  workflow_id: v.optional(SafeId),
});

/** `raw/<NNNN>_<workflow>` taken apart, or undefined for any other text. */
function rawDirParts(
  rawDir: string,
): { readonly iteration: number; readonly workflowId: string } | undefined {
  const match = /^raw\/([0-9]{4,})_(.+)$/.exec(rawDir);
  if (match === null) return undefined;
  const iteration = Number(match[1]);
  const workflowId = match[2] as string;
  if (!Number.isSafeInteger(iteration) || !isSafeId(workflowId)) return undefined;
  return { iteration, workflowId };
}

const MirrorTraceRefSchema: v.GenericSchema<unknown, MirrorTraceRef> = v.looseObject({
  schema_version: v.literal(1),
  manifest_id: SafeId,
  manifest_ref: LogicalRef,
  attempt_id: SafeId,
});

/**
 * Validates `trace_ref.json` for the session's layout. A folded reference must point at exactly
 * `raw/<NNNN>_<workflow>` of its own iteration (no `trace:` reference); given `attempt` (the
 * iteration directory the file sits in), its iteration and workflow must be that directory's.
 */
export function parseTraceRef(
  value: unknown,
  file: string,
  layout: SessionLayout,
  attempt?: { readonly iteration: number; readonly workflowId: string },
): FoldedTraceRef | MirrorTraceRef {
  if (layout === "mirror") {
    const mirror = parseWithSchema(MirrorTraceRefSchema, value, file, "trace_ref");
    // It names its own attempt's manifest, never another's.
    const id = `trace-${mirror.attempt_id}`;
    if (mirror.manifest_id !== id) {
      fail(file, `manifest_id must be ${id}`, "manifest_id", mirror.manifest_id);
    }
    const manifestRef = `trace:${id}:/trace_manifest.json`;
    if (mirror.manifest_ref !== manifestRef) {
      fail(file, `manifest_ref must be ${manifestRef}`, "manifest_ref", mirror.manifest_ref);
    }
    return mirror;
  }
  const read = parseWithSchema(FoldedTraceRefSchema, value, file, "trace_ref");
  let ref: FoldedTraceRef;
  if (read.iteration !== undefined && read.workflow_id !== undefined) {
    ref = read as FoldedTraceRef;
  } else {
    // Only the raw directory recorded: the attempt is the one its name (or, when given, the
    // iteration directory the file sits in) says; the checks below hold it to both.
    const parts = attempt ?? rawDirParts(read.raw_dir);
    if (parts === undefined) {
      fail(file, "raw_dir must be raw/<NNNN>_<workflow>", "raw_dir", read.raw_dir);
    }
    ref = {
      ...read,
      iteration: read.iteration ?? parts.iteration,
      workflow_id: read.workflow_id ?? parts.workflowId,
    };
  }
  // It records the raw directory of its own iteration directory's attempt, never another's.
  if (attempt !== undefined) {
    if (ref.iteration !== attempt.iteration) {
      fail(file, `iteration must be ${attempt.iteration}`, "iteration", ref.iteration);
    }
    if (ref.workflow_id !== attempt.workflowId) {
      fail(file, `workflow_id must be ${attempt.workflowId}`, "workflow_id", ref.workflow_id);
    }
  }
  const expected = `raw/${iterationName(ref.iteration, ref.workflow_id)}`;
  if (ref.raw_dir !== expected) fail(file, `raw_dir must be ${expected}`, "raw_dir", ref.raw_dir);
  if (ref.raw_dir_ref !== `session:/${expected}`) {
    fail(file, `raw_dir_ref must be session:/${expected}`, "raw_dir_ref", ref.raw_dir_ref);
  }
  return ref;
}

// ---------------------------------------------------------------------------------------------
// receipts/ and eval_receipts/

/** A compact git boundary receipt (`receipts/<NNNN>_<workflow>_git_<phase>.json`). */
export interface GitReceipt {
  /** Always 1. */
  readonly schema_version: 1;
  /** Always `git_receipt`. */
  readonly kind: "git_receipt";
  /** before or after the attempt. */
  readonly phase: "before" | "after";
  /** The session. */
  readonly session_id: string;
  /** The workflow. */
  readonly workflow_id: string;
  /** The iteration. */
  readonly iteration: number;
  /** The attempt. */
  readonly attempt_id: string;
  /** The commit at the boundary, when known. */
  readonly head: string | null;
  /** The branch at the boundary, when known. */
  readonly branch: string | null;
  /** Whether the worktree was dirty, when known. */
  readonly dirty: boolean | null;
  /** Always null: the verbose status lives in raw. */
  readonly status_path: null;
  /** Always null: the verbose diff lives in raw. */
  readonly diff_path: null;
  /** `session:/raw/<NNNN>_<workflow>/git/<phase>-status.jsonl`, when captured. */
  readonly raw_status_ref: string | null;
  /** `session:/raw/<NNNN>_<workflow>/git/<phase>-diff.patch`, when captured. */
  readonly raw_diff_ref: string | null;
  /** When it was written. */
  readonly created_at: string;
}

const GitReceiptSchema: v.GenericSchema<unknown, GitReceipt> = v.looseObject({
  schema_version: v.literal(1),
  kind: v.literal("git_receipt"),
  phase: v.picklist(["before", "after"]),
  session_id: SessionId,
  workflow_id: SafeId,
  iteration: Count,
  attempt_id: SafeId,
  head: v.nullable(v.string()),
  branch: v.nullable(v.string()),
  dirty: v.nullable(v.boolean()),
  status_path: v.null(),
  diff_path: v.null(),
  raw_status_ref: v.nullable(LogicalRef),
  raw_diff_ref: v.nullable(LogicalRef),
  created_at: Timestamp,
});

/** Validates a git receipt. */
export function parseGitReceipt(value: unknown, file: string): GitReceipt {
  return parseWithSchema(GitReceiptSchema, value, file, "git receipt");
}

/** The attempt that produced an eval receipt. */
export interface EvalProducer extends Producer {
  /** The producing iteration. */
  readonly iteration: number;
}

/** An eval receipt (`eval_receipts/<eval_id>.json`), written by an eval role. */
export interface EvalReceipt {
  /** Always 1. */
  readonly schema_version: 1;
  /** The eval id (also the file name). */
  readonly eval_id: string;
  /** The verdict. */
  readonly verdict: "pass" | "fail" | "error";
  /** The producing attempt. */
  readonly producer: EvalProducer;
  /** Exactly `["session:/raw/<NNNN>_<workflow>/eval/report.json"]` of the producing attempt. */
  readonly raw_report_refs: readonly string[];
  /** The producing attempt's git-after receipt. */
  readonly git_receipt_ref: string;
  /** A short summary. */
  readonly summary?: string | undefined;
  /** When it was written. */
  readonly created_at: string;
}

const EvalReceiptSchema: v.GenericSchema<unknown, EvalReceipt> = v.strictObject({
  schema_version: v.literal(1),
  eval_id: SafeId,
  verdict: v.picklist(["pass", "fail", "error"]),
  producer: v.strictObject({
    session_id: SessionId,
    workflow_id: SafeId,
    attempt_id: SafeId,
    iteration: Count,
  }),
  raw_report_refs: v.array(LogicalRef),
  git_receipt_ref: LogicalRef,
  summary: v.optional(v.string()),
  created_at: Timestamp,
});

/** Validates an eval receipt (strict). */
export function parseEvalReceipt(value: unknown, file: string): EvalReceipt {
  return parseWithSchema(EvalReceiptSchema, value, file, "eval receipt");
}

/** The engine-owned acceptance sidecar `eval_receipts/accepted/<eval_id>.json`. */
export interface EvalAcceptance {
  /** Always 1. */
  readonly schema_version: 1;
  /** The eval id. */
  readonly eval_id: string;
  /** `session:/eval_receipts/<eval_id>.json`. */
  readonly receipt_ref: string;
  /** `sha256:` of the receipt bytes that were accepted. */
  readonly receipt_sha256: string;
  /** The producing attempt. */
  readonly producer: EvalProducer;
  /** The raw report the verdict is bound to. */
  readonly raw_report_refs: readonly string[];
  /** The producing attempt's git-after receipt. */
  readonly git_receipt_ref: string;
  /** `sha256:` of that git receipt. */
  readonly git_receipt_sha256: string;
  /** When it was accepted. */
  readonly accepted_at: string;
}

const EvalAcceptanceSchema: v.GenericSchema<unknown, EvalAcceptance> = v.looseObject({
  schema_version: v.literal(1),
  eval_id: SafeId,
  receipt_ref: LogicalRef,
  receipt_sha256: Sha256,
  producer: v.object({
    session_id: SessionId,
    workflow_id: SafeId,
    attempt_id: SafeId,
    iteration: Count,
  }),
  raw_report_refs: v.array(LogicalRef),
  git_receipt_ref: LogicalRef,
  git_receipt_sha256: Sha256,
  accepted_at: Timestamp,
});

/** Validates an eval acceptance sidecar. */
export function parseEvalAcceptance(value: unknown, file: string): EvalAcceptance {
  return parseWithSchema(EvalAcceptanceSchema, value, file, "eval acceptance");
}

/**
 * The key `state.json` seals an accepted eval receipt under (`accepted_eval_seals`): the
 * receipt's reference `session:/eval_receipts/<eval_id>.json`.
 */
export function evalSealKey(evalId: string): string {
  return `session:/eval_receipts/${evalId}.json`;
}

const StateEvalSealsSchema = v.looseObject({
  accepted_eval_seals: v.optional(v.nullable(AnyObject)),
});

/**
 * The accepted eval-receipt seals a validated state records (`accepted_eval_seals`: each seal,
 * the record its sidecar `eval_receipts/accepted/<eval_id>.json` copies, under `evalSealKey`), or
 * `undefined` when the state records none (absent or `null`: a legacy state, whose acceptances
 * are their sidecars alone). A field that is not an object is a `LayoutRecordError` naming `file`
 * and `accepted_eval_seals`; each seal is validated when it is read (`stateEvalSeal`), so one
 * damaged seal does not hide the others.
 */
export function stateEvalSeals(state: SessionState, file: string): OpenObject | undefined {
  return parseWithSchema(StateEvalSealsSchema, state, file, "state.json").accepted_eval_seals ??
    undefined;
}

/**
 * The seal `seals` (see `stateEvalSeals`) records for the eval receipt `evalId`, validated as an
 * eval acceptance; `undefined` when there is none. A malformed seal is a `LayoutRecordError`
 * naming `file` and the field (`accepted_eval_seals["session:/eval_receipts/<eval_id>.json"]
 * .receipt_sha256`).
 */
export function stateEvalSeal(
  seals: OpenObject,
  evalId: string,
  file: string,
): EvalAcceptance | undefined {
  const key = evalSealKey(evalId);
  if (!Object.hasOwn(seals, key)) return undefined;
  const at = `accepted_eval_seals[${JSON.stringify(key)}]`;
  return parseWithSchema(EvalAcceptanceSchema, seals[key], file, "eval seal", at);
}

// ---------------------------------------------------------------------------------------------
// events.jsonl

/** One record of `events.jsonl`. */
export interface EventRecord {
  /** 12 hex characters; consumers dedupe by it. */
  readonly event_id: string;
  /** Always 1. */
  readonly schema_version: 1;
  /** UTC, second precision. */
  readonly ts: string;
  /** The session. */
  readonly session_id: string;
  /** The event type (`session_started`, `child_started`, ...). */
  readonly type: string;
  /** Event data. */
  readonly payload: OpenObject;
}

const EventRecordSchema: v.GenericSchema<unknown, EventRecord> = v.looseObject({
  event_id: v.pipe(v.string(), v.minLength(1)),
  schema_version: v.literal(1),
  ts: Timestamp,
  session_id: SessionId,
  type: NonBlank,
  payload: AnyObject,
});

/** Validates one event record. */
export function parseEventRecord(value: unknown, file: string): EventRecord {
  return parseWithSchema(EventRecordSchema, value, file, "event");
}
