/**
 * Terminal records: `control.json` (neutral running record, v3 terminal record naming the exact
 * current attempt), the handoff observation rule, and `session_outcome.json`.
 *
 * The handoff is an observation, never a gate: a missing, malformed or non-monotonic
 * `project_state/handoff.json` is recorded as such in the outcome (with a fallback summary) and
 * never overrides an authentic completion decided by the control record.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { atomicReplace, readDirIfExists } from "../port/durable.ts";
import { IsADirectory, NotADirectory } from "../port/errors.ts";
import { dirname } from "../port/path.ts";
import {
  ImmutableArtifactError,
  LayoutRecordError,
  LogicalReferenceError,
  SessionStateError,
  TopologyError,
  UnknownSessionError,
} from "./errors.ts";
import {
  bytesEqual,
  decodeJson,
  encodeRecord,
  ensureRecordDurable,
  firstDifference,
  jsonEqual,
  prepareRecordDir,
  type ReadRecord,
  readRecord,
  readRecordIfExists,
  recordBytes,
  sha256Ref,
} from "./json_io.ts";
import { isSafeId } from "./ids.ts";
import { type LayoutWriteOptions, resolveWriteOptions } from "./options.ts";
import { LOOPY_DIRNAME, requireRecordedLayout, type SessionPaths } from "./paths.ts";
import {
  assertTerminalControlMatches,
  type ControlRecord,
  type EvalAcceptance,
  evalSealKey,
  type Handoff,
  HANDOFF_REF,
  type HandoffStatus,
  isTerminalControl,
  manifestLayout,
  parseControlRecord,
  parseEvalAcceptance,
  parseHandoff,
  parseSessionOutcome,
  type SessionOutcome,
  sessionPhase,
  type SessionState,
  type SessionStatus,
  stateEvalSeal,
  stateEvalSeals,
  type TerminalControl,
  type TerminalControlExpectation,
} from "./records.ts";
import { canonicalPath, confined, loopyDirOf } from "./no_links.ts";
import { LogicalReferenceResolver, type ReferenceHolder } from "./refs.ts";
import { readSessionManifest, readSessionState, requireOwnSession } from "./tree.ts";
import { parseLogicalReference } from "./ref_grammar.ts";
import { serializedOn } from "./serial.ts";
import { checkTerminalTransition } from "./_terminal_transition.ts";
import { contractTerminalRoles } from "./_contract.ts";
import { nestedIdentity } from "./_nesting.ts";

/** Reads and validates `control.json` (a typed error names the file and field when malformed). */
export async function readControl(
  fs: FileSystem,
  paths: SessionPaths,
): Promise<ReadRecord<ControlRecord>> {
  fs = confined(fs, paths.dir);
  return await readRecord(fs, paths.controlJson, parseControlRecord);
}

/**
 * Reads `control.json` and, when it is a v3 terminal record, checks that it names the exact
 * current session/workflow/attempt and a producer with the needed role; the session must also be
 * the one this directory's `session.json` records (`producer.session_id`). The roles are the
 * session's frozen workflow contract's (`orchestration.completion_role` for `goal_met`,
 * `terminal_blocker_reporting_roles` for `unresolvable_error`), and the caller's `completionRole`
 * and `blockerReportingRoles`, when given, must hold as well. Returns the terminal record with its
 * bytes and hash, or `undefined` while the session is still running.
 *
 * A `goal_met` record must also stand on what it cites (the layout rules, §3): every
 * `evidence_refs` entry must resolve to a file, and every `eval_receipt_refs` entry must name an
 * eval receipt of this session (`eval_receipts/<eval_id>.json`, in any spelling) whose
 * acceptance seal binds exactly the receipt's current bytes and names that receipt and this
 * session (a receipt that is not a regular file, a FIFO say, is refused without being waited
 * on). The seal is the one the engine-owned `state.json` records in `accepted_eval_seals`
 * (see `acceptEvalReceipt`), never the sidecar `eval_receipts/accepted/<eval_id>.json` in the
 * agent-writable tree, which is only its copy; a legacy state that records no
 * `accepted_eval_seals` is checked against the sidecar, as before. Otherwise a
 * `LayoutRecordError` names `control.json` and the entry (`evidence_refs[0]`,
 * `eval_receipt_refs[1]`). The references are resolved in the validated session tree
 * (`LogicalReferenceResolver`); a tree that cannot be loaded is its own typed error.
 */
export async function readTerminalControl(
  fs: FileSystem,
  paths: SessionPaths,
  expected: TerminalControlExpectation,
): Promise<ReadRecord<TerminalControl> | undefined> {
  fs = confined(fs, paths.dir);
  const read = await readControl(fs, paths);
  const control = read.record;
  if (control.state === "running") return undefined;
  if (!isTerminalControl(control)) {
    throw new LayoutRecordError(
      paths.controlJson,
      "A folded session's terminal control must be schema_version 3",
      { path: "schema_version", value: control.schema_version },
    );
  }
  assertTerminalControlMatches(control, expected, paths.controlJson);
  // The roles are the session's frozen contract's, whatever the caller's expectation says.
  const roles = await contractTerminalRoles(fs, paths);
  assertTerminalControlMatches(control, {
    sessionId: expected.sessionId,
    workflowId: expected.workflowId,
    attemptId: expected.attemptId,
    completionRole: roles.completionRole,
    blockerReportingRoles: roles.blockerReportingRoles,
  }, paths.controlJson);
  // The expectation is the caller's; the session is the one session.json records.
  await requireOwnSession(
    fs,
    paths.dir,
    control.producer.session_id,
    paths.controlJson,
    "producer.session_id",
  );
  if (control.stop_reason === "goal_met") {
    await checkCompletionCitations(fs, paths, expected.sessionId, control);
  }
  return { record: control, bytes: read.bytes, sha256: read.sha256 };
}

/**
 * Refuses (`LayoutRecordError` naming `control.json` and the entry) a goal_met control whose
 * evidence does not resolve to a file or whose eval receipt references have no acceptance seal
 * binding the receipt's bytes (see `readTerminalControl`).
 */
async function checkCompletionCitations(
  fs: FileSystem,
  paths: SessionPaths,
  sessionId: string,
  control: TerminalControl,
): Promise<void> {
  const file = paths.controlJson;
  const evidence = control.evidence_refs ?? [];
  const evals = control.eval_receipt_refs ?? [];
  if (evidence.length === 0 && evals.length === 0) return;
  const resolver = await treeResolver(fs, paths, sessionId);
  // The accepted eval-receipt seals of the engine-owned state (a state that cannot be read is its
  // own typed error); `undefined` for a legacy state that records none.
  const seals = evals.length === 0
    ? undefined
    : stateEvalSeals(await readSessionState(fs, paths.dir), paths.stateJson);
  const refuse = (field: string, ref: string, message: string, cause?: unknown): never => {
    throw new LayoutRecordError(file, message, {
      path: field,
      value: ref,
      ...(cause === undefined ? {} : { cause }),
    });
  };
  for (const [index, ref] of evidence.entries()) {
    const field = `evidence_refs[${index}]`;
    let found;
    try {
      found = await resolver.resolve(ref);
    } catch (error) {
      if (!(error instanceof LogicalReferenceError)) throw error;
      return refuse(
        field,
        ref,
        `A goal_met control's evidence must resolve: ${error.message}`,
        error,
      );
    }
    if (!found.exists || found.kind !== "file") {
      refuse(field, ref, "A goal_met control's evidence must resolve to an existing file");
    }
  }
  for (const [index, ref] of evals.entries()) {
    const field = `eval_receipt_refs[${index}]`;
    let holder: ReferenceHolder | undefined;
    try {
      holder = await resolver.holder(ref);
    } catch (error) {
      if (!(error instanceof LogicalReferenceError)) throw error;
      return refuse(field, ref, `An eval receipt reference must resolve: ${error.message}`, error);
    }
    const named = holder?.inTree === true && holder.sessionId === sessionId
      ? /^eval_receipts\/([^/]+)\.json$/.exec(holder.relative)?.[1]
      : undefined;
    if (named === undefined || !isSafeId(named)) {
      return refuse(
        field,
        ref,
        "An eval receipt reference must name an eval receipt of this session " +
          "(eval_receipts/<eval_id>.json)",
      );
    }
    let seal: EvalAcceptance | undefined;
    if (seals !== undefined) {
      // The seal state.json records is the acceptance; the sidecar is only its copy.
      try {
        seal = stateEvalSeal(seals, named, paths.stateJson);
      } catch (error) {
        if (!(error instanceof LayoutRecordError)) throw error;
        return refuse(field, ref, `The eval receipt's seal is invalid: ${error.message}`, error);
      }
      if (seal === undefined) {
        return refuse(
          field,
          ref,
          `The eval receipt was never accepted (state.json seals no ${evalSealKey(named)} in ` +
            "accepted_eval_seals)",
        );
      }
    } else {
      // A legacy state records no seals: its acceptances are their sidecars.
      const sealFile = paths.evalAcceptedSidecar(named);
      try {
        seal = (await readRecordIfExists(fs, sealFile, parseEvalAcceptance))?.record;
      } catch (error) {
        if (!(error instanceof LayoutRecordError)) throw error;
        return refuse(
          field,
          ref,
          `The eval receipt's acceptance seal is invalid: ${error.message}`,
          error,
        );
      }
      if (seal === undefined) {
        return refuse(field, ref, `The eval receipt was never accepted (no ${sealFile})`);
      }
    }
    let bytes: Uint8Array | undefined;
    try {
      // Read only as a regular file: a FIFO planted there is refused, never waited on.
      bytes = await recordBytes(fs, paths.evalReceipt(named), true);
    } catch (error) {
      if (!(error instanceof LayoutRecordError)) throw error;
      return refuse(field, ref, `The accepted eval receipt is unreadable: ${error.message}`, error);
    }
    if (bytes === undefined) return refuse(field, ref, "The accepted eval receipt is absent");
    if (sha256Ref(bytes) !== seal.receipt_sha256) {
      refuse(field, ref, "The eval receipt's bytes are not those its acceptance seal binds");
    }
    const identity = seal.eval_id === named && seal.receipt_ref === evalSealKey(named) &&
      seal.producer.session_id === sessionId;
    if (!identity) {
      refuse(field, ref, "The eval receipt's acceptance seal names another receipt or session");
    }
  }
}

/**
 * A resolver for `sessionId` of its validated tree, which must be the session at `paths.dir`;
 * anything else is a typed error (`TopologyError`, `UnknownSessionError`, ...).
 */
async function treeResolver(
  fs: FileSystem,
  paths: SessionPaths,
  sessionId: string,
): Promise<LogicalReferenceResolver> {
  const loopyDir = loopyDirOf(paths.dir);
  if (loopyDir === undefined) {
    throw new TopologyError(paths.dir, "The session is not inside a .loopy_loop directory");
  }
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: dirname(loopyDir),
    sessionId,
  });
  if (resolver.current.dir !== (await canonicalPath(fs, paths.dir))) {
    throw new TopologyError(paths.dir, `Session ${sessionId} of the tree is not this directory`);
  }
  return resolver;
}

/**
 * Reads and validates `project_state/handoff.json` (strict); a malformed file is a
 * `LayoutRecordError` naming the file and field. Use `observeHandoff` at decision points, where
 * a bad handoff is an observation rather than a failure.
 */
export async function readHandoff(
  fs: FileSystem,
  paths: SessionPaths,
): Promise<ReadRecord<Handoff>> {
  fs = confined(fs, paths.dir);
  return await readRecord(fs, paths.handoffJson, parseHandoff);
}

/** What the engine knows about the handoff before looking at the file. */
export interface HandoffExpectation {
  /** The session. */
  readonly sessionId: string;
  /** Its goal hash. */
  readonly goalSha256: string;
  /** The last accepted revision (0 at first). */
  readonly storedRevision: number;
  /** The last accepted hash (`null` at first). */
  readonly storedSha256: string | null;
  /** The last accepted handoff, to recognize a provenance-only re-stamp. */
  readonly storedHandoff?: Handoff | undefined;
  /** The workflow that owns the handoff; any producer workflow when undefined. */
  readonly handoffOwner?: string | undefined;
  /** The current attempt. */
  readonly currentAttemptId?: string | undefined;
  /** Earlier attempts of this session; with `currentAttemptId`, a producer must be one of them. */
  readonly knownAttemptIds?: readonly string[] | undefined;
}

/** The handoff as observed at a decision point. */
export interface HandoffObservation {
  /** valid, missing, invalid or non_monotonic. */
  readonly status: HandoffStatus;
  /** The handoff, when it parsed. */
  readonly handoff: Handoff | undefined;
  /** `sha256:` of the file, when it exists. */
  readonly sha256: string | null;
  /** Its revision, when it parsed. */
  readonly revision: number | null;
  /** Why it is not valid. */
  readonly diagnosis: string | undefined;
}

/**
 * Observes `project_state/handoff.json`: `missing` when absent or unproduced (revision-0
 * scaffold), `invalid` on bad JSON/schema, a path that is not a regular file (a link, a directory,
 * under a file), a session or goal mismatch, a producer that is not the
 * owner or not an attempt of this session, `non_monotonic` when the revision drops or repeats
 * with different contents (except a provenance-only re-stamp by the current attempt), else
 * `valid`.
 */
export async function observeHandoff(
  fs: FileSystem,
  paths: SessionPaths,
  expected: HandoffExpectation,
): Promise<HandoffObservation> {
  fs = confined(fs, paths.dir);
  const file = paths.handoffJson;
  let bytes: Uint8Array | undefined;
  try {
    bytes = await recordBytes(fs, file, true);
  } catch (error) {
    // A handoff planted as a link is agent output like any other: invalid, and never read; so is
    // a directory or a FIFO in its place (never waited on), or a `project_state/` that is a file.
    let diagnosis: string;
    if (error instanceof TopologyError) diagnosis = error.message;
    else if (error instanceof LayoutRecordError) diagnosis = error.message;
    else if (error instanceof IsADirectory) diagnosis = `handoff.json is a directory: '${file}'`;
    else if (error instanceof NotADirectory) {
      diagnosis = `handoff.json is under a path that is not a directory: '${file}'`;
    } else throw error;
    return { status: "invalid", handoff: undefined, sha256: null, revision: null, diagnosis };
  }
  const observe = (
    status: HandoffStatus,
    handoff: Handoff | undefined,
    diagnosis: string | undefined,
  ): HandoffObservation => ({
    status,
    handoff,
    sha256: bytes === undefined ? null : sha256Ref(bytes),
    revision: handoff?.revision ?? null,
    diagnosis,
  });
  if (bytes === undefined) return observe("missing", undefined, "handoff.json is absent");
  let handoff: Handoff;
  try {
    handoff = parseHandoff(decodeJson(bytes, file), file);
  } catch (error) {
    // A malformed handoff is an observation of the layer's state, recorded with its diagnosis.
    if (!(error instanceof LayoutRecordError)) throw error;
    return observe("invalid", undefined, error.message);
  }
  if (handoff.producer === null) return observe("missing", handoff, "No handoff was produced");
  if (handoff.session_id !== expected.sessionId) {
    return observe("invalid", handoff, "The handoff names another session");
  }
  if (handoff.goal_sha256 !== expected.goalSha256) {
    return observe("invalid", handoff, "The handoff names another goal");
  }
  const producer = handoff.producer;
  if (expected.handoffOwner !== undefined && producer.workflow_id !== expected.handoffOwner) {
    return observe("invalid", handoff, "The handoff producer is not the handoff owner");
  }
  if (
    expected.currentAttemptId !== undefined && producer.attempt_id !== expected.currentAttemptId &&
    !(expected.knownAttemptIds ?? []).includes(producer.attempt_id)
  ) {
    return observe("invalid", handoff, "The handoff producer is not an attempt of this session");
  }
  const sha256 = sha256Ref(bytes);
  if (handoff.revision < expected.storedRevision) {
    return observe("non_monotonic", handoff, "The handoff revision went backwards");
  }
  if (
    handoff.revision === expected.storedRevision && expected.storedSha256 !== null &&
    sha256 !== expected.storedSha256 && !isRestamp(handoff, expected)
  ) {
    return observe("non_monotonic", handoff, "The handoff changed without a new revision");
  }
  return observe("valid", handoff, undefined);
}

/**
 * Only `producer` and `updated_at` changed, by the current attempt, without going back in time.
 * Times are compared as instants (`compareUtc`), never as text: `…:00Z` sorts after `…:00.500Z`
 * as a string although it is earlier, and `…+00:00` and `…Z` spell one instant.
 */
function isRestamp(handoff: Handoff, expected: HandoffExpectation): boolean {
  const stored = expected.storedHandoff;
  if (stored === undefined || handoff.producer?.attempt_id !== expected.currentAttemptId) {
    return false;
  }
  const order = compareUtc(handoff.updated_at, stored.updated_at);
  if (order === undefined || order < 0) return false;
  const strip = (h: Handoff): Omit<Handoff, "producer" | "updated_at"> => {
    const { producer: _producer, updated_at: _updated, ...rest } = h;
    return rest;
  };
  return jsonEqual(strip(handoff), strip(stored));
}

/**
 * The order of two UTC timestamps of the layout's form (`YYYY-MM-DDTHH:MM:SS[.fraction]` then `Z`,
 * `+00:00` or `-00:00`): negative when `a` is earlier, 0 for one instant, positive when later;
 * undefined when either has another form. Every fractional digit counts (the engine writes
 * microseconds, which `Date.parse` would drop).
 */
function compareUtc(a: string, b: string): number | undefined {
  const form = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(?:Z|[+-]00:00)$/;
  const x = form.exec(a);
  const y = form.exec(b);
  if (x === null || y === null) return undefined;
  const [seconds, other] = [x[1] as string, y[1] as string];
  if (seconds !== other) return seconds < other ? -1 : 1;
  const width = Math.max(x[2]?.length ?? 0, y[2]?.length ?? 0);
  const [f, g] = [(x[2] ?? "").padEnd(width, "0"), (y[2] ?? "").padEnd(width, "0")];
  return f === g ? 0 : f < g ? -1 : 1;
}

/** What `writeSessionOutcome` binds. */
export interface SessionOutcomeInput extends LayoutWriteOptions {
  /** The session. */
  readonly sessionId: string;
  /** Its root. */
  readonly rootSessionId: string;
  /** Its goal hash. */
  readonly goalSha256: string;
  /** The terminal status. */
  readonly terminalStatus: Exclude<SessionStatus, "running">;
  /** The stop reason (`goal_met`, `unresolvable_error`, `max_turns`, ...). */
  readonly stopReason: string;
  /** The frozen transition revision. */
  readonly terminalStateRevision: number;
  /** The transition time. */
  readonly terminalAt: string;
  /** The accepted terminal control, required for goal_met and unresolvable_error. */
  readonly control?: ReadRecord<TerminalControl> | undefined;
  /** The handoff observation. */
  readonly handoff: HandoffObservation;
  /** Evidence references. */
  readonly evidenceRefs?: readonly string[] | undefined;
  /** Delivery references (folded: `session:/receipts/…`). */
  readonly deliveryRefs?: readonly string[] | undefined;
  /**
   * Eval references the outcome cites. The outcome's `eval_refs` holds the control's
   * `eval_receipt_refs`, then these, then the key of every seal `state.json` records in
   * `accepted_eval_seals`, each once.
   */
  readonly evalRefs?: readonly string[] | undefined;
}

/**
 * Writes `session_outcome.json` after a terminal transition. The status and stop reason come
 * from the transition (the control record for goal_met and unresolvable_error); the handoff is
 * recorded as observed, and when it is not valid a fallback summary (the control's reason, else
 * the engine's stop reason) stands in for it.
 *
 * The outcome is tied to its basis before anything is written:
 *
 * - the transition is the one `state.json` records: a session whose state is not terminal is a
 *   `SessionStateError`, and the status, `terminal_state_revision` and `terminal_at` must be the
 *   state's (`LayoutRecordError` at `terminal_status`, `terminal_state_revision` or `created_at`;
 *   a field the state does not record, as in a legacy v1 state, is not compared). The engine
 *   commits the transition to `state.json` first, then writes the outcome; the state is read
 *   under the outcome's lock, also when the very outcome is already written (a rerun);
 * - goal_met and unresolvable_error need the accepted control (`SessionStateError` without it),
 *   and the control must be the one that decided this transition: its `stop_reason` is the
 *   transition's (else a `LayoutRecordError` at `stop_reason`), it was produced by this
 *   session (at `control`), and no other stop binds a control (at `control`);
 * - the status follows the stop reason as the engine's stop precedence sets them: goal_met, and
 *   only goal_met, completes (`goal_met`), and unresolvable_error fails the session (`failed`);
 *   anything else is a `LayoutRecordError` at `terminal_status`;
 * - the session, root and goal hash are those of the session's `session.json`
 *   (`LayoutRecordError` at `session_id`, `root_session_id` or `goal_sha256`; a schema-1
 *   manifest records no root for a child, whose root is then the top-level session it is nested
 *   in, as its tree's scan derives it: the root its parent's `recordChildOutcome` requires).
 *
 * Its `eval_refs` are the cited references (the control's `eval_receipt_refs`, then
 * `evalRefs`) followed by the keys of the eval seals `state.json` records
 * (`session:/eval_receipts/<eval_id>.json`), each once, as the engine writes them.
 *
 * The outcome is written once: a restart cannot rewrite the terminal basis. Writing it again
 * with the same bytes returns it as it is; other contents (another status, revision, time,
 * control, ...) are an `ImmutableArtifactError` naming the file and the first field that
 * would change, and the file is left alone. An existing `session_outcome.json` that is not a
 * regular file (a directory, FIFO, socket or device) is a `LayoutRecordError` naming it, never
 * waited on. Concurrent writes of one outcome in this process run one after another (serialized
 * on its canonical path).
 *
 * A folded outcome has no trace seals, and its evidence, delivery and eval references may not
 * use the `trace:` scope, name the mirror trace tree (`.loopy_loop/traces/`, its outbox), or
 * land in the `delivery_receipts/` of a folded session (folded delivery receipts live in
 * `receipts/`): a `LayoutRecordError` naming the field, before anything is written. Those
 * directory names are matched in any ASCII letter case (`Traces/`, `Delivery_Receipts/`: the
 * engine creates no such spelling, and a case-insensitive filesystem reaches the same
 * directory through it). Which session holds a target is decided from the session tree,
 * whatever the spelling (`LogicalReferenceResolver.holder`), so a mirror session's
 * `delivery_receipts/` (a mirror parent's, an older mirror session's) may be cited; a reference
 * whose holder is looked up and whose path the filesystem finds too long is refused too. A
 * mirror session finishes under its own layout: its outcome's `trace_seal_refs` lists every
 * seal receipt in `trace_seals/` (`session:/trace_seals/<attempt_id>.json`, sorted), as the
 * engine does.
 */
export async function writeSessionOutcome(
  fs: FileSystem,
  paths: SessionPaths,
  input: SessionOutcomeInput,
): Promise<SessionOutcome> {
  fs = confined(fs, paths.dir);
  const file = paths.sessionOutcomeJson;
  const control = input.control;
  if (
    (input.stopReason === "goal_met" || input.stopReason === "unresolvable_error") &&
    control === undefined
  ) {
    throw new SessionStateError(
      input.sessionId,
      `A ${input.stopReason} transition needs the accepted control record`,
    );
  }
  checkTransition(file, input);
  await checkIdentity(fs, paths, input);
  if (control !== undefined && control.record.producer.session_id !== input.sessionId) {
    // Another session's decision never finishes this one.
    throw new LayoutRecordError(
      file,
      "The bound control record was produced by another session",
      { path: "control", value: control.record.producer.session_id },
    );
  }
  const dedupe = (refs: readonly string[]): string[] => [...new Set(refs)];
  const handoff = input.handoff;
  const outcome = {
    schema_version: 1,
    session_id: input.sessionId,
    root_session_id: input.rootSessionId,
    goal_sha256: input.goalSha256,
    lifecycle: "terminal",
    terminal_status: input.terminalStatus,
    stop_reason: input.stopReason,
    terminal_state_revision: input.terminalStateRevision,
    control: control === undefined
      ? null
      : { ref: "session:/control.json", sha256: control.sha256 },
    handoff: {
      status: handoff.status,
      ref: HANDOFF_REF,
      sha256: handoff.sha256,
      revision: handoff.status === "valid" ? handoff.revision : null,
    },
    ...(handoff.status === "valid" ? {} : {
      fallback_summary: control === undefined
        ? { source: "engine_stop_reason", text: input.stopReason }
        : { source: "control_reason", text: control.record.reason },
    }),
    evidence_refs: dedupe([
      ...(control?.record.evidence_refs ?? []),
      ...(input.evidenceRefs ?? []),
    ]),
    delivery_refs: dedupe(input.deliveryRefs ?? []),
    eval_refs: dedupe([...(control?.record.eval_receipt_refs ?? []), ...(input.evalRefs ?? [])]),
    trace_seal_refs: paths.layout === "folded" ? [] : await traceSealRefs(fs, paths),
    created_at: input.terminalAt,
  };
  // What the caller gave is refused before anything is read under the lock.
  const checked = parseSessionOutcome(outcome, file, paths.layout);
  const durability = resolveWriteOptions(input).durability;
  return await serializedOn(fs, file, async () => {
    // The state is read under the outcome's lock: its accepted eval seals join the cited eval
    // references, and its transition is the one the outcome must record.
    const state = await readSessionState(fs, paths.dir);
    const sealed = Object.keys(stateEvalSeals(state, paths.stateJson) ?? {});
    const full = sealed.length === 0
      ? outcome
      : { ...outcome, eval_refs: dedupe([...outcome.eval_refs, ...sealed]) };
    const validated = full === outcome ? checked : parseSessionOutcome(full, file, paths.layout);
    const bytes = encodeRecord(full, file);
    // Read only as a regular file: a FIFO planted there is refused by name, never waited on.
    const existing = await recordBytes(fs, file, true);
    if (existing !== undefined) {
      const same = bytesEqual(existing, bytes) ||
        // The same record in other bytes (the engine escapes non-ASCII text) is the same basis.
        jsonEqual(decodeJson(existing, file), decodeJson(bytes, file));
      if (same) {
        // Written already, maybe by a call that failed before its directory's fsync: confirmed
        // only for the transition the state records, and made durable before it is reported.
        checkRecordedTransition(state, paths, input);
        await ensureRecordDurable(fs, file, durability);
        return validated;
      }
      const previous = decodeJson(existing, file);
      throw new ImmutableArtifactError(
        file,
        "session_outcome.json is written once; a restart cannot rewrite the terminal basis",
        (typeof previous === "object" && previous !== null
          ? firstDifference(previous, full, [])
          : undefined) ?? "",
      );
    }
    // The outcome follows the transition state.json records (read under the outcome's lock), so
    // no outcome is written for a transition the state has not committed.
    checkRecordedTransition(state, paths, input);
    if (paths.layout === "folded") {
      await checkFoldedCitations(fs, paths, input.sessionId, validated);
    }
    await prepareRecordDir(fs, dirname(file), durability);
    await atomicReplace(fs, file, bytes, { durability });
    return validated;
  });
}

/**
 * Refuses an outcome for a transition `state.json` has not recorded: a session whose state is not
 * terminal is a `SessionStateError`; a terminal status, `terminal_state_revision` or
 * `terminal_at` other than the state's is a `LayoutRecordError` naming `session_outcome.json`
 * and the field (`terminal_status`, `terminal_state_revision`, `created_at`). A field the state
 * does not record (absent or `null`, as in a legacy v1 state) is not compared.
 */
function checkRecordedTransition(
  state: SessionState,
  paths: SessionPaths,
  input: SessionOutcomeInput,
): void {
  if (sessionPhase(state) !== "terminal") {
    throw new SessionStateError(
      input.sessionId,
      "session_outcome.json is written after the terminal transition; state.json records the " +
        "session as running",
    );
  }
  const checks: readonly [string, string, unknown, unknown][] = [
    ["terminal_status", "status", input.terminalStatus, state.status],
    [
      "terminal_state_revision",
      "terminal_state_revision",
      input.terminalStateRevision,
      state.terminal_state_revision,
    ],
    ["created_at", "terminal_at", input.terminalAt, state.terminal_at],
  ];
  for (const [field, stateField, actual, recorded] of checks) {
    if (recorded != null && actual !== recorded) {
      throw new LayoutRecordError(
        paths.sessionOutcomeJson,
        `${field} must be the transition's (${recorded}, as state.json records at ${stateField})`,
        { path: field, value: actual },
      );
    }
  }
}

/**
 * Refuses (`LayoutRecordError` naming `session_outcome.json` and the field) a transition whose
 * control, stop reason and status do not belong together (see `writeSessionOutcome`); the reader
 * (`parseSessionOutcome`) applies the same rule (`checkTerminalTransition`).
 */
function checkTransition(file: string, input: SessionOutcomeInput): void {
  const control = input.control;
  checkTerminalTransition(file, {
    stopReason: input.stopReason,
    terminalStatus: input.terminalStatus,
    control: control === undefined
      ? undefined
      : { sha256: control.sha256, stopReason: control.record.stop_reason },
  });
}

/**
 * Refuses (`LayoutRecordError` naming `session_outcome.json` and the field) an outcome whose
 * session, root or goal hash is not the one `session.json` records (a legacy v1 child's root: the
 * one its nesting gives), and (`UnsupportedLayoutError`) paths built for another layout than the
 * recorded one.
 */
async function checkIdentity(
  fs: FileSystem,
  paths: SessionPaths,
  input: SessionOutcomeInput,
): Promise<void> {
  const manifest = await readSessionManifest(fs, paths.dir);
  // The outcome's citations and trace seals follow the recorded layout, never the caller's.
  requireRecordedLayout(paths, manifestLayout(manifest));
  // A legacy v1 child records no root: the one its nesting gives, as its tree's scan derives it.
  const root = manifest.schema_version === 2
    ? manifest.root_session_id
    : manifest.parent_session_id === null
    ? manifest.session_id
    : nestedIdentity(paths.dir)[0];
  const checks: readonly [string, string, string | undefined][] = [
    ["session_id", input.sessionId, manifest.session_id],
    ["root_session_id", input.rootSessionId, root],
    ["goal_sha256", input.goalSha256, manifest.goal_hash],
  ];
  for (const [field, actual, wanted] of checks) {
    if (wanted !== undefined && actual !== wanted) {
      throw new LayoutRecordError(
        paths.sessionOutcomeJson,
        `${field} must be the session's own (${wanted}, as session.json records)`,
        { path: field, value: actual },
      );
    }
  }
}

/**
 * Refuses (`LayoutRecordError` naming the field) a reference a folded session may not cite in
 * its outcome (see `foldedCitationProblem`). The session tree is loaded only when a reference
 * needs the session that holds its target; when the tree cannot be loaded, or is not the one of
 * `paths`, nothing more is decided.
 */
async function checkFoldedCitations(
  fs: FileSystem,
  paths: SessionPaths,
  sessionId: string,
  outcome: SessionOutcome,
): Promise<void> {
  let resolver: Promise<LogicalReferenceResolver | undefined> | undefined;
  const lazy = (): Promise<LogicalReferenceResolver | undefined> =>
    resolver ??= resolverOf(fs, paths, sessionId);
  for (const field of ["evidence_refs", "delivery_refs", "eval_refs"] as const) {
    for (const [index, ref] of outcome[field].entries()) {
      const problem = await foldedCitationProblem(ref, lazy);
      if (problem !== undefined) {
        throw new LayoutRecordError(paths.sessionOutcomeJson, problem, {
          path: `${field}[${index}]`,
          value: ref,
        });
      }
    }
  }
}

/** A resolver for `sessionId` of its validated tree, when that is the session at `paths.dir`. */
async function resolverOf(
  fs: FileSystem,
  paths: SessionPaths,
  sessionId: string,
): Promise<LogicalReferenceResolver | undefined> {
  const loopyDir = loopyDirOf(paths.dir);
  if (loopyDir === undefined) return undefined;
  let resolver: LogicalReferenceResolver;
  try {
    resolver = await LogicalReferenceResolver.forSession(fs, {
      repoRoot: dirname(loopyDir),
      sessionId,
    });
  } catch (error) {
    if (
      error instanceof UnknownSessionError || error instanceof TopologyError ||
      error instanceof LayoutRecordError
    ) return undefined;
    throw error;
  }
  const same = resolver.current.dir === (await canonicalPath(fs, paths.dir));
  return same ? resolver : undefined;
}

/** `session:/trace_seals/<name>` of every seal receipt of a mirror session, sorted by name. */
async function traceSealRefs(fs: FileSystem, paths: SessionPaths): Promise<string[]> {
  return (await readDirIfExists(fs, paths.traceSealsDir))
    .filter((entry) => entry.kind === "file" && SEAL_RECEIPT_NAME.test(entry.name))
    .map((entry) => entry.name)
    .sort()
    .map((name) => `session:/trace_seals/${name}`);
}

const SEAL_RECEIPT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*\.json$/;

/**
 * Why a folded session may not cite `reference` in its `session_outcome.json`, or `undefined`
 * when it may. Only what can be decided for sure is refused (the seed: no `trace:` reference in
 * a folded session, and folded delivery receipts live in `receipts/`):
 *
 * - the `trace:` scope;
 * - a target in the mirror trace tree (`.loopy_loop/traces/`,
 *   `.loopy_loop/trace_finalization_outbox/`);
 * - a target in the `delivery_receipts/` of a session whose `session.json` records the folded
 *   layout, decided by the session that physically holds it (`LogicalReferenceResolver.holder`),
 *   whatever the spelling;
 * - a reference whose holder is looked up and whose path the filesystem finds too long
 *   (`ENAMETOOLONG`): it names nothing that can exist.
 *
 * The names `.loopy_loop`, `traces`, `trace_finalization_outbox` and `delivery_receipts` are
 * compared in any ASCII letter case: the engine creates no other spelling of them, and on a
 * case-insensitive filesystem `Traces/` or `Delivery_Receipts/` is the same directory, so an odd
 * spelling is refused rather than let through.
 *
 * A mirror session's `delivery_receipts/` may be cited (a folded child of a mirror parent, a
 * folded root citing an older mirror session). `resolver` is asked for (and may give
 * `undefined`) only when the reference has a `delivery_receipts` component; a reference whose
 * holder cannot be told (an unknown session id, `parent:/` at a root) is not refused here.
 */
async function foldedCitationProblem(
  reference: string,
  resolver: () => Promise<LogicalReferenceResolver | undefined>,
): Promise<string | undefined> {
  const parsed = parseLogicalReference(reference);
  if (parsed.scope === "trace") {
    return "A folded session has no trace: references; it cites session:/raw/<NNNN>_<workflow>/…";
  }
  const segments = parsed.segments.map(asciiLowercase);
  if (
    parsed.scope === "repo" && segments[0] === LOOPY_DIRNAME &&
    (segments[1] === "traces" || segments[1] === "trace_finalization_outbox")
  ) {
    return "A folded session does not cite the mirror trace tree";
  }
  // The target's path relative to its session is a suffix of the reference's path: without a
  // delivery_receipts component it cannot be in one.
  if (!segments.includes("delivery_receipts")) return undefined;
  // `session:/delivery_receipts/…` is in the (folded) citing session itself: no tree needed.
  if (
    parsed.scope === "session" && parsed.id === undefined && segments[0] === "delivery_receipts"
  ) {
    return DELIVERY_RECEIPTS_PROBLEM;
  }
  const found = await resolver();
  if (found === undefined) return undefined;
  let holder: ReferenceHolder | undefined;
  try {
    holder = await found.holder(reference);
  } catch (error) {
    if (!(error instanceof LogicalReferenceError)) throw error;
    // The grammar passed above: this is a path too long for the filesystem.
    if (error.reason === "grammar") return `A folded session cites no such path: ${error.message}`;
    return undefined;
  }
  const first = asciiLowercase(holder?.relative.split("/")[0] ?? "");
  if (holder?.layout === "folded" && first === "delivery_receipts") {
    return DELIVERY_RECEIPTS_PROBLEM;
  }
  return undefined;
}

/** `name` with its ASCII letters in lowercase (other characters as they are). */
function asciiLowercase(name: string): string {
  return name.replace(/[A-Z]/g, (letter) => letter.toLowerCase());
}

const DELIVERY_RECEIPTS_PROBLEM =
  "A folded session keeps delivery receipts in receipts/, not delivery_receipts/";
