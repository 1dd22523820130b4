// Random sequences of what an orchestration host does to a folded tree (create the root, start
// attempts and create their artifacts, write results and git receipts, finish attempts, append
// events, publish child requests and accept or reject them, accept an attempt's eval receipt (and
// the same receipt again later), stop a child, write its outcome, record it in the parent with
// the parent's decision, prune raw output), crashed at random points or failed once with an I/O
// error: the tree reads back through the library's own readers as the state after the last
// resolved operation or the one in flight, or as the in-flight operation's documented leftover
// that rerunning it finishes, never anything else and never an error; and the host goes on.
// layout_crash.test.ts and layout_prune_crash.test.ts crash each operation at every step; these
// crash them in combination.
import { test } from "node:test";
import assert from "node:assert/strict";
import { isDeepStrictEqual } from "node:util";
import {
  type CrashOptions,
  type MemoryFs,
  type MemoryOperation,
  SimulatedCrash,
} from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { atomicReplace, isTempName, readDirIfExists } from "../src/port/durable.ts";
import {
  acceptEvalReceipt,
  appendEvents,
  type AttemptIdentity,
  type ChildRequest,
  createAttemptArtifacts,
  createRootSession,
  type EvalAcceptance,
  evalSealKey,
  findWorkingSession,
  type JsonObject,
  LayoutRecordError,
  type LayoutWriteOptions,
  listPendingChildRequests,
  listRootSessionIds,
  loadSessionTree,
  LogicalReferenceResolver,
  missingScaffoldEntries,
  type NewEvent,
  parseAttemptPathsMap,
  parseAttemptResult,
  parseChildRequest,
  parseEvalAcceptance,
  parseEvalReceipt,
  parseGitReceipt,
  parseParentAcceptance,
  parseRejectedRequestReceipt,
  parseSessionOutcome,
  processNextChildRequest,
  pruneRaw,
  PRUNING_PREFIX,
  publishChildRequest,
  readChildOutcome,
  readChildrenLedger,
  readRecordIfExists,
  readSessionManifest,
  readSessionState,
  readTerminalControl,
  readTraceRef,
  recordChildOutcome,
  recordParentAcceptance,
  scanEvents,
  type SessionNode,
  SessionPaths,
  type SessionTree,
  sha256Ref,
  stateEvalSeal,
  stateEvalSeals,
  updateSessionState,
  writeAttemptResult,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import { CONTRACTS, fixedNow, goalMetControl, newRepo, writeJson } from "./layout_fixtures.ts";
import { mulberry32 } from "../adapters/_memory_nodes.ts";
import { isAddedSeed, seedsOf } from "./_soak.ts";

const REPO = "/repo";
const LOOPY = "/repo/.loopy_loop";
const SESSIONS = "/repo/.loopy_loop/sessions";
const GOAL = "Ship the ultimate memory program";
const ROOT_ID = "001_ship-the-ultimate-memory-program";
/** `fixedNow` at the second precision the layout records. */
const AT = "2026-04-19T14:30:22Z";
const HEAD = "0123456789abcdef0123456789abcdef01234567";
/** The raw subareas of a folded attempt (the seed's list). */
const SUBAREAS = ["protocol", "harness", "agents", "eval", "git", "service"];

const encoder = new TextEncoder();
const decoder = new TextDecoder();

let uuids = 0;
/**
 * Write options with the fixed clock and a uuid source unique across this file: its leading hex
 * digits count up, so event ids (12 digits) and staging names (8) never repeat, also between an
 * operation and its rerun after a crash.
 */
function options(): LayoutWriteOptions {
  return {
    now: fixedNow,
    uuid: () => (++uuids).toString(16).padStart(8, "0").padEnd(32, "0"),
  };
}

/**
 * What the host observes of the repository, as a flat map: `roots`, and per session
 * `<id>:<what>` (its node, state, events, ledger, requests, outcomes, each attempt file, each
 * git receipt, each raw entry). The model predicts the same map.
 */
type View = Readonly<Record<string, unknown>>;

interface Task {
  readonly workflow_id: string;
  readonly iteration: number;
  readonly attempt_id: string;
}

interface StateView {
  readonly status: string;
  readonly state_revision: number;
  readonly iteration: number;
  readonly current_task: Task | null;
  readonly active_child_session_id: string | null;
  readonly history: readonly Task[];
  readonly terminal_state_revision: number | null;
}

interface LedgerView {
  readonly revision: number;
  readonly children: readonly {
    readonly session_id: string;
    readonly request_id: string;
    readonly status: string;
    readonly outcome_ref: string | null;
    readonly accepted_request_sha256: string;
  }[];
}

type Op =
  | { readonly kind: "createRoot" }
  | { readonly kind: "dispatch"; readonly session: string; readonly task: Task }
  | { readonly kind: "createAttempt"; readonly session: string; readonly task: Task }
  | {
    readonly kind: "gitReceipt";
    readonly session: string;
    readonly task: Task;
    readonly phase: "before" | "after";
  }
  | {
    readonly kind: "writeResult";
    readonly session: string;
    readonly task: Task;
    readonly result: JsonObject;
  }
  | { readonly kind: "finish"; readonly session: string; readonly task: Task }
  | { readonly kind: "appendEvents"; readonly session: string; readonly events: NewEvent[] }
  | {
    readonly kind: "acceptEval";
    readonly session: string;
    readonly task: Task;
    readonly evalId: string;
    readonly verdict: "pass" | "fail";
  }
  | { readonly kind: "acceptEvalAgain"; readonly session: string; readonly evalId: string }
  | { readonly kind: "publish"; readonly session: string; readonly request: ChildRequest }
  | { readonly kind: "process"; readonly session: string }
  | { readonly kind: "stop"; readonly session: string }
  | { readonly kind: "writeOutcome"; readonly session: string }
  | { readonly kind: "recordOutcome"; readonly session: string }
  | {
    readonly kind: "parentAcceptance";
    readonly session: string;
    readonly requestId: string;
    readonly decision: "accepted" | "rework";
  }
  | { readonly kind: "prune" };

/** The repository before the first operation: no session yet. */
const EMPTY: View = { roots: [] };

// ---------------------------------------------------------------------------------------------
// The model

function stateOf(view: View, id: string): StateView {
  return view[`${id}:state`] as StateView;
}

function nodeOf(view: View, id: string): { parent: string | null; depth: number } {
  return view[`${id}:node`] as { parent: string | null; depth: number };
}

function rootOf(view: View): string {
  return (view.roots as readonly string[])[0] as string;
}

function dirOf(view: View, id: string): string {
  const parent = nodeOf(view, id).parent;
  return parent === null ? `${SESSIONS}/${id}` : `${dirOf(view, parent)}/children/${id}`;
}

function pathsOf(view: View, id: string): SessionPaths {
  return new SessionPaths(dirOf(view, id), "folded");
}

function sessionIds(view: View): string[] {
  return Object.keys(view).filter((key) => key.endsWith(":node")).map((key) => key.slice(0, -5));
}

function pendingOf(view: View, id: string): Record<string, ChildRequest> {
  return view[`${id}:pending`] as Record<string, ChildRequest>;
}

function iterationName(task: Task): string {
  return `${String(task.iteration).padStart(4, "0")}_${task.workflow_id}`;
}

function identity(task: Task): AttemptIdentity {
  return { iteration: task.iteration, workflowId: task.workflow_id, attemptId: task.attempt_id };
}

function requestSha(request: ChildRequest): string {
  return sha256Ref(encoder.encode(JSON.stringify(request, null, 2)));
}

type AcceptEvalOp = Extract<Op, { readonly kind: "acceptEval" }>;

/**
 * An eval acceptance as the host compares it with the model: all of it but the hash of its git
 * receipt, which the host checks against that receipt's bytes instead.
 */
type SealView = Omit<EvalAcceptance, "git_receipt_sha256">;

function sealView(acceptance: EvalAcceptance): SealView {
  const { producer } = acceptance;
  return {
    schema_version: acceptance.schema_version,
    eval_id: acceptance.eval_id,
    receipt_ref: acceptance.receipt_ref,
    receipt_sha256: acceptance.receipt_sha256,
    producer: {
      session_id: producer.session_id,
      workflow_id: producer.workflow_id,
      attempt_id: producer.attempt_id,
      iteration: producer.iteration,
    },
    raw_report_refs: [...acceptance.raw_report_refs],
    git_receipt_ref: acceptance.git_receipt_ref,
    accepted_at: acceptance.accepted_at,
  };
}

/** The eval acceptances `state.json` of session `id` seals, in the order it records them. */
function sealsOf(view: View, id: string): readonly SealView[] {
  return view[`${id}:seals`] as readonly SealView[];
}

/** The key of the raw eval report of attempt `task` of session `id`. */
const reportKey = (id: string, task: Task): string =>
  `${id}:raw/${iterationName(task)}/eval/report.json`;

const reportText = (op: AcceptEvalOp): string =>
  `{"eval_id":"${op.evalId}","verdict":"${op.verdict}"}\n`;

/** What an eval receipt and its acceptance say of the attempt and what it cites. */
function cited(
  op: AcceptEvalOp,
): Pick<SealView, "producer" | "raw_report_refs" | "git_receipt_ref"> {
  const name = iterationName(op.task);
  return {
    producer: {
      session_id: op.session,
      workflow_id: op.task.workflow_id,
      attempt_id: op.task.attempt_id,
      iteration: op.task.iteration,
    },
    raw_report_refs: [`session:/raw/${name}/eval/report.json`],
    git_receipt_ref: `session:/receipts/${name}_git_after.json`,
  };
}

/** The eval receipt an attempt's eval role writes, citing its raw report and git-after receipt. */
function evalReceiptOf(op: AcceptEvalOp): JsonObject {
  const { producer, raw_report_refs, git_receipt_ref } = cited(op);
  return {
    schema_version: 1,
    eval_id: op.evalId,
    verdict: op.verdict,
    producer: { ...producer },
    raw_report_refs: [...raw_report_refs],
    git_receipt_ref,
    created_at: AT,
  };
}

const receiptBytes = (op: AcceptEvalOp): Uint8Array =>
  encoder.encode(JSON.stringify(evalReceiptOf(op), null, 2));

/** The acceptance `acceptEvalReceipt` seals for `op`'s receipt. */
function acceptanceOf(op: AcceptEvalOp): SealView {
  return {
    schema_version: 1,
    eval_id: op.evalId,
    receipt_ref: evalSealKey(op.evalId),
    receipt_sha256: sha256Ref(receiptBytes(op)),
    ...cited(op),
    accepted_at: AT,
  };
}

const statusText = (task: Task, phase: string): string =>
  `{"path":"src/${task.attempt_id}.ts","phase":"${phase}"}\n`;
const diffText = (task: Task, phase: string): string =>
  `--- a/${task.attempt_id}\n+++ b/${task.attempt_id} (${phase})\n`;

/** A new session as the scaffold writes it. */
function newSession(view: Record<string, unknown>, id: string, parent: string | null): void {
  view[`${id}:node`] = { parent, depth: parent === null ? 0 : nodeOf(view, parent).depth + 1 };
  view[`${id}:state`] = {
    status: "running",
    state_revision: 0,
    iteration: 0,
    current_task: null,
    active_child_session_id: null,
    history: [],
    terminal_state_revision: null,
  } satisfies StateView;
  view[`${id}:events`] = [];
  view[`${id}:ledger`] = { revision: 0, children: [] } satisfies LedgerView;
  view[`${id}:pending`] = {};
  view[`${id}:accepted`] = {};
  view[`${id}:seals`] = [];
}

/** The view after `op`, as the module docs describe it. */
function apply(before: View, op: Op): View {
  const view = structuredClone(before) as Record<string, unknown>;
  const setState = (id: string, change: (state: StateView) => Partial<StateView>): void => {
    const state = stateOf(view, id);
    view[`${id}:state`] = {
      ...state,
      ...change(state),
      state_revision: state.state_revision + 1,
    };
  };
  const events = (id: string): unknown[] => view[`${id}:events`] as unknown[];
  switch (op.kind) {
    case "createRoot":
      view.roots = [ROOT_ID];
      newSession(view, ROOT_ID, null);
      break;
    case "dispatch":
      setState(op.session, () => ({ current_task: op.task, iteration: op.task.iteration }));
      break;
    case "createAttempt": {
      const name = iterationName(op.task);
      const at = `${op.session}:iterations/${name}`;
      view[`${at}/prompt.txt`] = `Attempt ${op.task.attempt_id}\n`;
      view[`${at}/paths.json`] = { session_dir: dirOf(view, op.session) };
      view[`${at}/trace_ref.json`] = {
        schema_version: 1,
        raw_dir: `raw/${name}`,
        raw_dir_ref: `session:/raw/${name}`,
        attempt_id: op.task.attempt_id,
        iteration: op.task.iteration,
        workflow_id: op.task.workflow_id,
      };
      view[`${at}/raw`] = "present";
      view[`${at}/workflow_snapshot/${op.task.attempt_id}/assignment.json`] = { ...op.task };
      view[`${op.session}:raw/${name}`] = "dir";
      for (const subarea of SUBAREAS) view[`${op.session}:raw/${name}/${subarea}`] = "dir";
      break;
    }
    case "gitReceipt": {
      const name = iterationName(op.task);
      view[`${op.session}:raw/${name}/git/${op.phase}-status.jsonl`] = statusText(
        op.task,
        op.phase,
      );
      view[`${op.session}:raw/${name}/git/${op.phase}-diff.patch`] = diffText(op.task, op.phase);
      view[`${op.session}:receipts/${name}_git_${op.phase}.json`] = {
        attempt_id: op.task.attempt_id,
        phase: op.phase,
        iteration: op.task.iteration,
        workflow_id: op.task.workflow_id,
        head: HEAD,
        dirty: op.phase === "after",
        raw_status: "present",
        raw_diff: "present",
      };
      break;
    }
    case "writeResult":
      view[`${op.session}:iterations/${iterationName(op.task)}/result.json`] = op.result;
      break;
    case "acceptEval": {
      view[reportKey(op.session, op.task)] = reportText(op);
      view[`${op.session}:evalReceipt/${op.evalId}`] = evalReceiptOf(op);
      // The seal in state.json (a new revision), and its copy, the sidecar.
      const seal = acceptanceOf(op);
      setState(op.session, () => ({}));
      view[`${op.session}:seals`] = [...sealsOf(view, op.session), seal];
      view[`${op.session}:sidecar/${op.evalId}`] = seal;
      break;
    }
    case "acceptEvalAgain":
      // The sealed acceptance is returned; nothing is written.
      break;
    case "finish":
      setState(op.session, (state) => ({
        current_task: null,
        history: [...state.history, op.task],
      }));
      break;
    case "appendEvents":
      events(op.session).push(
        ...op.events.map((event) => ({ type: event.type, payload: event.payload ?? {} })),
      );
      break;
    case "publish":
      pendingOf(view, op.session)[`${op.request.request_id}.json`] = op.request;
      break;
    case "process": {
      const pending = pendingOf(view, op.session);
      const name = Object.keys(pending).sort()[0] as string;
      const request = pending[name] as ChildRequest;
      delete pending[name];
      if (request.workflow_set === "elsewhere") {
        // An unknown workflow set: archived with its receipt.
        view[`${op.session}:rejected/${name}`] = request;
        view[`${op.session}:rejected/${name}.receipt.json`] = {
          request_file: name,
          archived_file: name,
          request_id: request.request_id,
          original_sha256: requestSha(request),
          field: "workflow_set",
        };
        break;
      }
      const ledger = view[`${op.session}:ledger`] as LedgerView;
      const childId = `${
        String(ledger.children.length + 1).padStart(2, "0")
      }_${request.request_id}`;
      (view[`${op.session}:accepted`] as Record<string, unknown>)[request.request_id] = request;
      view[`${op.session}:ledger`] = {
        // One revision records the child id before the child is built, one marks it running.
        revision: ledger.revision + 2,
        children: [...ledger.children, {
          session_id: childId,
          request_id: request.request_id,
          status: "running",
          outcome_ref: null,
          accepted_request_sha256: requestSha(request),
        }],
      } satisfies LedgerView;
      setState(op.session, () => ({ active_child_session_id: childId }));
      events(op.session).push({
        type: "child_started",
        payload: { request_id: request.request_id, child_session_id: childId },
      });
      newSession(view, childId, op.session);
      break;
    }
    case "stop":
      setState(op.session, (state) => ({
        status: "max_turns",
        terminal_state_revision: state.state_revision + 1,
      }));
      break;
    case "writeOutcome":
      view[`${op.session}:outcome`] = {
        lifecycle: "terminal",
        terminal_status: "max_turns",
        stop_reason: "max_turns",
        terminal_state_revision: stateOf(view, op.session).terminal_state_revision,
        // The key of every seal the state records, in its order (the host cites no control and
        // no other eval reference).
        eval_refs: sealsOf(view, op.session).map((seal) => evalSealKey(seal.eval_id)),
      };
      break;
    case "recordOutcome": {
      const childId = stateOf(view, op.session).active_child_session_id as string;
      const ledger = view[`${op.session}:ledger`] as LedgerView;
      const record = ledger.children.find((c) => c.session_id === childId);
      const requestId = record?.request_id as string;
      view[`${op.session}:childOutcome/${requestId}`] = {
        child_session_id: childId,
        session_outcome_ref: `session:${childId}:/session_outcome.json`,
      };
      view[`${op.session}:ledger`] = {
        revision: ledger.revision + 1,
        children: ledger.children.map((c) =>
          c.session_id === childId
            ? {
              ...c,
              status: "max_turns",
              outcome_ref: `session:/child_outcomes/${requestId}.json`,
            }
            : c
        ),
      } satisfies LedgerView;
      setState(op.session, () => ({ active_child_session_id: null }));
      events(op.session).push({
        type: "child_finished",
        payload: { request_id: requestId, child_session_id: childId, status: "max_turns" },
      });
      break;
    }
    case "parentAcceptance":
      view[`${op.session}:acceptance/${op.requestId}`] = {
        decision: op.decision,
        child_session_id: (view[`${op.session}:childOutcome/${op.requestId}`] as {
          child_session_id: string;
        }).child_session_id,
        child_outcome_ref: `session:/child_outcomes/${op.requestId}.json`,
      };
      break;
    case "prune":
      for (const id of sessionIds(view)) {
        const state = stateOf(view, id);
        const running = state.status === "running" ? state.current_task : null;
        for (const key of Object.keys(view)) {
          // Each raw attempt directory `<id>:raw/<NNNN>_<workflow>`.
          const raw = key.startsWith(`${id}:raw/`) ? key.slice(`${id}:raw/`.length) : "/";
          if (raw.includes("/")) continue;
          // The running attempt's raw output, and any at or above its iteration, is kept.
          if (running !== null && Number(raw.slice(0, 4)) >= running.iteration) continue;
          for (const inner of Object.keys(view)) {
            if (inner === key || inner.startsWith(`${key}/`)) delete view[inner];
          }
          if (view[`${id}:iterations/${raw}/raw`] !== undefined) {
            view[`${id}:iterations/${raw}/raw`] = "pruned";
          }
          for (const phase of ["before", "after"]) {
            const receipt = view[`${id}:receipts/${raw}_git_${phase}.json`];
            if (receipt !== undefined) {
              view[`${id}:receipts/${raw}_git_${phase}.json`] = {
                ...(receipt as object),
                raw_status: "pruned",
                raw_diff: "pruned",
              };
            }
          }
        }
      }
      break;
  }
  return view;
}

/** The session that receives work (the deepest live one), and its finished child, if any. */
function working(view: View): { id: string; terminalChild: string | undefined } {
  let id = rootOf(view);
  for (;;) {
    const child = stateOf(view, id).active_child_session_id;
    if (child === null) return { id, terminalChild: undefined };
    if (stateOf(view, child).status !== "running") return { id, terminalChild: child };
    id = child;
  }
}

/**
 * How many times more likely a focused sequence (`choose`) takes each step that brings a child to
 * an outcome citing an accepted eval receipt: the root publishes a request and finishes its
 * attempt, the request is processed, the child runs an attempt up to its git-after receipt,
 * accepts its eval receipt, finishes the attempt and stops, and its outcome is written and
 * recorded in the parent.
 */
const FOCUS = 8;

/**
 * A host operation valid in `view`, chosen by `next`; `tag` makes its names unique. `focused`
 * favours the steps that take a child to an accepted eval receipt and its outcome (`FOCUS`); a
 * focused child publishes no request of its own, so nothing keeps it from stopping.
 */
function choose(view: View, next: () => number, tag: string, focused = false): Op {
  if ((view.roots as readonly string[]).length === 0) return { kind: "createRoot" };
  const candidates: [number, Op][] = [];
  const w = working(view);
  const toward = (weight: number, on: boolean): number => focused && on ? weight * FOCUS : weight;
  candidates.push([1, {
    kind: "appendEvents",
    session: w.id,
    events: Array.from({ length: 1 + Math.floor(next() * 3) }, (_, k) => ({
      type: "note",
      payload: { tag: `${tag}.${k}` },
    })),
  }]);
  candidates.push([1, { kind: "prune" }]);
  for (const key of Object.keys(view)) {
    const outcome = /^(.+):childOutcome\/(.+)$/.exec(key);
    if (outcome === null || view[`${outcome[1]}:acceptance/${outcome[2]}`] !== undefined) continue;
    candidates.push([4, {
      kind: "parentAcceptance",
      session: outcome[1] as string,
      requestId: outcome[2] as string,
      decision: next() < 0.5 ? "accepted" : "rework",
    }]);
  }
  // The same eval receipt accepted again, in any session, whatever happened since: more often
  // once prune-raw removed the raw report it cites, or its session stopped.
  const sealed = sessionIds(view).flatMap((id) => sealsOf(view, id).map((seal) => [id, seal]));
  if (sealed.length > 0) {
    const [session, seal] = sealed[Math.floor(next() * sealed.length)] as [string, SealView];
    const late = view[reportKey(session, seal.producer)] === undefined ||
      stateOf(view, session).status !== "running";
    candidates.push([late ? 4 : 1, { kind: "acceptEvalAgain", session, evalId: seal.eval_id }]);
  }
  const state = stateOf(view, w.id);
  const depth = nodeOf(view, w.id).depth;
  const evaled = sealsOf(view, w.id).length > 0;
  const pending = Object.keys(pendingOf(view, w.id)).length;
  if (w.terminalChild !== undefined) {
    const child = w.terminalChild;
    const weight = toward(6, sealsOf(view, child).length > 0);
    candidates.push(
      view[`${child}:outcome`] === undefined
        ? [weight, { kind: "writeOutcome", session: child }]
        : [weight, { kind: "recordOutcome", session: w.id }],
    );
  } else if (state.current_task !== null) {
    const task = state.current_task;
    const name = iterationName(task);
    if (view[`${w.id}:iterations/${name}/trace_ref.json`] === undefined) {
      candidates.push([6, { kind: "createAttempt", session: w.id, task }]);
    } else {
      for (const phase of ["before", "after"] as const) {
        if (view[`${w.id}:receipts/${name}_git_${phase}.json`] === undefined) {
          const weight = toward(2, depth > 0 && phase === "after");
          candidates.push([weight, { kind: "gitReceipt", session: w.id, task, phase }]);
        }
      }
      candidates.push([2, {
        kind: "writeResult",
        session: w.id,
        task,
        result: { status: next() < 0.5 ? "running" : "succeeded", note: tag },
      }]);
      // The root's attempt finishes once it published, a child's once it accepted its eval.
      const done = depth === 0 ? pending > 0 : evaled;
      candidates.push([toward(3, done), { kind: "finish", session: w.id, task }]);
      // An eval receipt is accepted once its attempt has a git-after receipt and raw output.
      if (
        view[`${w.id}:receipts/${name}_git_after.json`] !== undefined &&
        view[`${w.id}:raw/${name}/eval`] === "dir" &&
        !sealsOf(view, w.id).some((seal) => seal.producer.attempt_id === task.attempt_id)
      ) {
        candidates.push([toward(4, depth > 0), {
          kind: "acceptEval",
          session: w.id,
          task,
          evalId: `e${tag}`,
          verdict: next() < 0.5 ? "pass" : "fail",
        }]);
      }
      if (depth < (focused ? 1 : 2) && pending < 2) {
        const variant = Math.floor(next() * 3);
        const request: ChildRequest = {
          schema_version: 3,
          request_id: `r${tag}`,
          goal: `Deliver r${tag}`,
          origin: { parent_attempt_id: task.attempt_id },
          // An unknown workflow set is rejected; a declared input is frozen into the child.
          ...(variant === 1 ? { workflow_set: "elsewhere" } : {}),
          ...(variant === 2 ? { input_refs: ["session:/project_state/plan.md"] } : {}),
        };
        const weight = depth === 0 ? toward(5, pending === 0) : 2;
        candidates.push([weight, { kind: "publish", session: w.id, request }]);
      }
    }
  } else {
    candidates.push([toward(3, depth > 0 && !evaled), {
      kind: "dispatch",
      session: w.id,
      task: {
        workflow_id: depth === 0 ? "outer" : "leaf",
        iteration: state.iteration + 1,
        attempt_id: `a${tag}`,
      },
    }]);
    if (pending > 0) candidates.push([toward(6, true), { kind: "process", session: w.id }]);
    // A child tends to stop soon, so its outcome is recorded in the parent.
    else if (depth > 0) candidates.push([toward(5, evaled), { kind: "stop", session: w.id }]);
  }
  const total = candidates.reduce((sum, [weight]) => sum + weight, 0);
  let roll = next() * total;
  for (const [weight, op] of candidates) {
    roll -= weight;
    if (roll < 0) return op;
  }
  return (candidates.at(-1) as [number, Op])[1];
}

/** Whether sequence `seed` is focused (`choose`): every third one. */
const isFocused = (seed: number): boolean => seed % 3 === 0;

/** A sequence of `length` operations and the view after each. */
function sequence(seed: number, length: number): { ops: Op[]; views: View[] } {
  const next = mulberry32(seed);
  const ops: Op[] = [];
  const views: View[] = [];
  let view = EMPTY;
  for (let i = 0; i < length; i++) {
    const op = choose(view, next, `${seed}-${String(i).padStart(2, "0")}`, isFocused(seed));
    view = apply(view, op);
    ops.push(op);
    views.push(view);
  }
  return { ops, views };
}

/** The kind of `op`, telling an acceptance from a rejection. */
function kindOf(op: Op, before: View): string {
  if (op.kind !== "process") return op.kind;
  const pending = pendingOf(before, op.session);
  const first = pending[Object.keys(pending).sort()[0] as string];
  return first?.workflow_set === "elsewhere" ? "process:reject" : "process:accept";
}

// ---------------------------------------------------------------------------------------------
// The host

/** Runs `op` on `fs` as the host does, in the tree `before` describes. */
async function perform(fs: MemoryFs, op: Op, before: View): Promise<void> {
  if (op.kind === "createRoot") {
    await createRootSession(fs, { repoRoot: REPO, goal: GOAL, ...CONTRACTS, ...options() });
    return;
  }
  if (op.kind === "prune") {
    await pruneRaw(fs, LOOPY);
    return;
  }
  const paths = pathsOf(before, op.session);
  switch (op.kind) {
    case "dispatch":
      await updateSessionState(fs, paths.dir, (state) => {
        state.current_task = { ...op.task };
        state.iteration = op.task.iteration;
      }, { updatedAt: AT });
      return;
    case "createAttempt":
      await createAttemptArtifacts(fs, paths, identity(op.task), {
        prompt: `Attempt ${op.task.attempt_id}\n`,
        pathsMap: { session_dir: paths.dir },
        snapshot: { "assignment.json": { ...op.task } },
        ...options(),
      });
      return;
    case "gitReceipt":
      await writeGitReceipt(fs, paths, op.session, identity(op.task), op.phase, {
        head: HEAD,
        branch: "main",
        dirty: op.phase === "after",
        rawStatus: encoder.encode(statusText(op.task, op.phase)),
        rawDiff: encoder.encode(diffText(op.task, op.phase)),
      }, options());
      return;
    case "writeResult":
      await writeAttemptResult(
        fs,
        paths.attempt(op.task.iteration, op.task.workflow_id),
        op.result,
        options(),
      );
      return;
    case "finish":
      await updateSessionState(fs, paths.dir, (state) => {
        state.current_task = null;
        state.history = [...(state.history as Task[]), { ...op.task }];
      }, { updatedAt: AT });
      return;
    case "appendEvents":
      await appendEvents(fs, paths.eventsJsonl, op.session, op.events, options());
      return;
    case "acceptEval": {
      // The attempt's eval role writes its raw report and its receipt, each atomically.
      const attempt = paths.attempt(op.task.iteration, op.task.workflow_id);
      const report = `${attempt.rawSubarea("eval")}/report.json`;
      await atomicReplace(fs, report, encoder.encode(reportText(op)));
      await atomicReplace(fs, paths.evalReceipt(op.evalId), receiptBytes(op));
      const accepted = await acceptEvalReceipt(fs, paths, op.evalId, {
        sessionId: op.session,
        currentAttempt: identity(op.task),
        ...options(),
      });
      assert.deepEqual(sealView(accepted), acceptanceOf(op), "the acceptance returned");
      return;
    }
    case "acceptEvalAgain": {
      const seal = sealsOf(before, op.session).find((s) => s.eval_id === op.evalId) as SealView;
      // The engine names the current attempt when it is still the producing one.
      const task = stateOf(before, op.session).current_task;
      const producing = task !== null && task.attempt_id === seal.producer.attempt_id &&
        task.iteration === seal.producer.iteration;
      const accepted = await acceptEvalReceipt(fs, paths, op.evalId, {
        sessionId: op.session,
        ...(producing ? { currentAttempt: identity(task) } : {}),
        ...options(),
      });
      assert.deepEqual(sealView(accepted), seal, "accepting it again returns its seal");
      return;
    }
    case "publish":
      await publishChildRequest(fs, paths, op.request);
      return;
    case "process": {
      const result = await processNextChildRequest(fs, {
        repoRoot: REPO,
        parentSessionId: op.session,
        ...options(),
      });
      assert.ok(result !== undefined, "a pending request was processed");
      return;
    }
    case "stop":
      await updateSessionState(fs, paths.dir, (state, current) => {
        state.status = "max_turns";
        state.terminal_state_revision = (current.state_revision ?? 0) + 1;
        state.terminal_at = AT;
      }, { updatedAt: AT });
      return;
    case "writeOutcome": {
      const manifest = await readSessionManifest(fs, paths.dir);
      const state = await readSessionState(fs, paths.dir);
      await writeSessionOutcome(fs, paths, {
        sessionId: op.session,
        rootSessionId: rootOf(before),
        goalSha256: manifest.goal_hash,
        terminalStatus: "max_turns",
        stopReason: "max_turns",
        terminalStateRevision: state.terminal_state_revision ?? 0,
        terminalAt: AT,
        handoff: {
          status: "missing",
          handoff: undefined,
          sha256: null,
          revision: null,
          diagnosis: "-",
        },
        ...options(),
      });
      return;
    }
    case "recordOutcome":
      await recordChildOutcome(fs, { repoRoot: REPO, parentSessionId: op.session, ...options() });
      return;
    case "parentAcceptance":
      await recordParentAcceptance(fs, {
        paths,
        parentSessionId: op.session,
        requestId: op.requestId,
        decision: op.decision,
        reason: `The parent decided ${op.decision}`,
        producer: { workflowId: "outer", attemptId: "decider" },
        ...options(),
      });
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// What the host reads back

async function names(fs: MemoryFs, dir: string): Promise<string[]> {
  return (await fs.readDir(dir)).filter((entry) => !entry.name.startsWith(".")).map((e) => e.name);
}

async function text(fs: MemoryFs, path: string): Promise<string> {
  return decoder.decode(await fs.readFile(path));
}

/** A record read with the library's parser (which `readRecord` uses too, with a hash we skip). */
async function parsed<T>(
  fs: MemoryFs,
  file: string,
  parser: (value: unknown, file: string) => T,
): Promise<T> {
  return parser(JSON.parse(await text(fs, file)), file);
}

/** Every entry below `dir` (hidden ones excepted): `"dir"` or a file's text. */
async function walk(
  fs: MemoryFs,
  dir: string,
  key: string,
  view: Record<string, unknown>,
): Promise<void> {
  for (const entry of await fs.readDir(dir)) {
    if (entry.name.startsWith(".")) continue;
    const path = `${dir}/${entry.name}`;
    if (entry.kind === "directory") {
      view[`${key}/${entry.name}`] = "dir";
      await walk(fs, path, `${key}/${entry.name}`, view);
    } else {
      view[`${key}/${entry.name}`] = await text(fs, path);
    }
  }
}

/** Reads one session through the library's readers, checking what binds by reference and hash. */
async function observeSession(
  fs: MemoryFs,
  tree: SessionTree,
  node: SessionNode,
  view: Record<string, unknown>,
  thorough: boolean,
): Promise<void> {
  const id = node.sessionId;
  const paths = tree.paths(id);
  const resolver = new LogicalReferenceResolver(fs, tree, id);
  const bound = async (ref: string, sha256: string | undefined, what: string): Promise<void> => {
    const file = await resolver.resolveExisting(ref);
    assert.equal(sha256Ref(await fs.readFile(file)), sha256, `${id}: ${what} is not bound`);
  };
  // A request as its bytes have it (the host hashes them), once the library's parser accepts it.
  const request = async (file: string): Promise<unknown> => {
    const value = JSON.parse(await text(fs, file));
    parseChildRequest(value, file);
    return value;
  };
  const kind = node.parentSessionId === null ? "root" : "child";
  if (thorough) {
    assert.deepEqual(await missingScaffoldEntries(fs, node.dir, kind), [], `${id} is incomplete`);
  }
  view[`${id}:node`] = { parent: node.parentSessionId, depth: node.depth };

  const sessionState = await readSessionState(fs, node.dir);
  const state = sessionState as unknown as Record<string, unknown>;
  view[`${id}:state`] = {
    status: state.status,
    state_revision: state.state_revision,
    iteration: state.iteration,
    current_task: state.current_task,
    active_child_session_id: state.active_child_session_id,
    history: state.history,
    terminal_state_revision: state.terminal_state_revision,
  };

  const scan = await scanEvents(fs, paths.eventsJsonl);
  assert.equal(scan.duplicates, 0, `${id}: an event was written twice`);
  for (const event of scan.events) assert.equal(event.session_id, id);
  view[`${id}:events`] = scan.events.map((event) => ({
    type: event.type,
    payload: event.payload,
  }));

  const ledger = await readChildrenLedger(fs, paths, id);
  assert.ok(ledger.schema_version === 2, `${id}: a folded session's ledger is schema 2`);
  for (const child of ledger.children) {
    await bound(child.accepted_request_ref, child.accepted_request_sha256, child.request_id);
  }
  view[`${id}:ledger`] = {
    revision: ledger.revision,
    children: ledger.children.map((child) => ({
      session_id: child.session_id,
      request_id: child.request_id,
      status: child.status,
      outcome_ref: child.outcome_ref ?? null,
      accepted_request_sha256: child.accepted_request_sha256,
    })),
  };

  const pending: Record<string, unknown> = {};
  for (const name of await listPendingChildRequests(fs, paths)) {
    const file = `${paths.childRequestsPendingDir}/${name}`;
    pending[name] = await request(file);
  }
  view[`${id}:pending`] = pending;
  const accepted: Record<string, unknown> = {};
  for (const name of await names(fs, paths.childRequestsAcceptedDir)) {
    const file = `${paths.childRequestsAcceptedDir}/${name}`;
    accepted[name.replace(/\.json$/, "")] = await request(file);
  }
  view[`${id}:accepted`] = accepted;
  for (const name of await names(fs, paths.childRequestsRejectedDir)) {
    const file = `${paths.childRequestsRejectedDir}/${name}`;
    if (name.endsWith(".receipt.json")) {
      const receipt = await parsed(fs, file, parseRejectedRequestReceipt);
      assert.ok(receipt.reason.length > 0);
      view[`${id}:rejected/${name}`] = {
        request_file: receipt.request_file,
        archived_file: receipt.archived_file,
        request_id: receipt.request_id,
        original_sha256: receipt.original_sha256,
        field: receipt.field,
      };
    } else {
      view[`${id}:rejected/${name}`] = await request(file);
    }
  }

  const outcome = await readRecordIfExists(
    fs,
    paths.sessionOutcomeJson,
    (value, file) => parseSessionOutcome(value, file, "folded"),
  );
  if (outcome !== undefined) {
    view[`${id}:outcome`] = {
      lifecycle: outcome.record.lifecycle,
      terminal_status: outcome.record.terminal_status,
      stop_reason: outcome.record.stop_reason,
      terminal_state_revision: outcome.record.terminal_state_revision,
      eval_refs: outcome.record.eval_refs,
    };
  }
  for (const name of await names(fs, paths.childOutcomesDir)) {
    const requestId = name.replace(/\.json$/, "");
    const record = await readChildOutcome(fs, paths, requestId);
    assert.ok(record !== undefined);
    await bound(record.session_outcome_ref, record.session_outcome_sha256, name);
    view[`${id}:childOutcome/${requestId}`] = {
      child_session_id: record.child_session_id,
      session_outcome_ref: record.session_outcome_ref,
    };
  }
  for (const name of await names(fs, paths.parentAcceptanceDir)) {
    const file = `${paths.parentAcceptanceDir}/${name}`;
    const record = await parsed(fs, file, parseParentAcceptance);
    await bound(record.child_outcome_ref, record.child_outcome_sha256, name);
    view[`${id}:acceptance/${record.request_id}`] = {
      decision: record.decision,
      child_session_id: record.child_session_id,
      child_outcome_ref: record.child_outcome_ref,
    };
  }

  for (const name of await names(fs, paths.iterationsDir)) {
    const match = /^(\d{4})_(.+)$/.exec(name);
    assert.ok(match !== null, `${id}: iteration ${name}`);
    const attempt = paths.attempt(Number(match[1]), match[2] as string);
    const at = `${id}:iterations/${name}`;
    const files = await names(fs, attempt.iterationDir);
    if (files.includes("prompt.txt")) view[`${at}/prompt.txt`] = await text(fs, attempt.promptTxt);
    if (files.includes("paths.json")) {
      view[`${at}/paths.json`] = await parsed(fs, attempt.pathsJson, parseAttemptPathsMap);
    }
    if (files.includes("trace_ref.json")) {
      const ref = await readTraceRef(fs, attempt);
      view[`${at}/trace_ref.json`] = ref;
      assert.ok("raw_dir_ref" in ref, `${id}: ${name} has a folded trace reference`);
      view[`${at}/raw`] = (await resolver.resolve(ref.raw_dir_ref)).status;
    }
    if (files.includes("result.json")) {
      view[`${at}/result.json`] = await parsed(fs, attempt.resultJson, parseAttemptResult);
    }
    if (files.includes("workflow_snapshot")) {
      for (const attemptId of await names(fs, attempt.workflowSnapshotDir)) {
        const dir = `${attempt.workflowSnapshotDir}/${attemptId}`;
        for (const file of await names(fs, dir)) {
          view[`${at}/workflow_snapshot/${attemptId}/${file}`] = JSON.parse(
            await text(fs, `${dir}/${file}`),
          );
        }
      }
    }
  }
  for (const name of await names(fs, paths.gitReceiptsDir)) {
    const receipt = await parsed(fs, `${paths.gitReceiptsDir}/${name}`, parseGitReceipt);
    const rawStatus = async (ref: string | null): Promise<string | null> =>
      ref === null ? null : (await resolver.resolve(ref)).status;
    view[`${id}:receipts/${name}`] = {
      attempt_id: receipt.attempt_id,
      phase: receipt.phase,
      iteration: receipt.iteration,
      workflow_id: receipt.workflow_id,
      head: receipt.head,
      dirty: receipt.dirty,
      raw_status: await rawStatus(receipt.raw_status_ref),
      raw_diff: await rawStatus(receipt.raw_diff_ref),
    };
  }
  // Eval acceptances: the seals state.json records (the trust root), each binding its receipt's
  // bytes and its git-after receipt's, and their copies, the sidecars.
  const seals = stateEvalSeals(sessionState, paths.stateJson) ?? {};
  const sealed: SealView[] = [];
  for (const key of Object.keys(seals)) {
    const evalId = /^session:\/eval_receipts\/(.+)\.json$/.exec(key)?.[1] ?? "";
    assert.equal(key, evalSealKey(evalId), `${id}: a seal under ${key}`);
    const seal = stateEvalSeal(seals, evalId, paths.stateJson) as EvalAcceptance;
    assert.equal(seal.eval_id, evalId, `${id}: the seal under ${key}`);
    await bound(seal.receipt_ref, seal.receipt_sha256, `the receipt sealed as ${evalId}`);
    await bound(seal.git_receipt_ref, seal.git_receipt_sha256, `the git receipt of ${evalId}`);
    sealed.push(sealView(seal));
  }
  view[`${id}:seals`] = sealed;
  for (const entry of await readDirIfExists(fs, paths.evalReceiptsAcceptedDir)) {
    if (entry.name.startsWith(".")) continue;
    const file = `${paths.evalReceiptsAcceptedDir}/${entry.name}`;
    const sidecar = (await readRecordIfExists(fs, file, parseEvalAcceptance))?.record;
    assert.equal(`${sidecar?.eval_id}.json`, entry.name, `${id}: the sidecar ${entry.name}`);
    const acceptance = sidecar as EvalAcceptance;
    await bound(acceptance.git_receipt_ref, acceptance.git_receipt_sha256, entry.name);
    view[`${id}:sidecar/${acceptance.eval_id}`] = sealView(acceptance);
  }
  for (const entry of await fs.readDir(paths.evalReceiptsDir)) {
    if (entry.name.startsWith(".") || entry.kind !== "file") continue;
    const receipt = await parsed(fs, `${paths.evalReceiptsDir}/${entry.name}`, parseEvalReceipt);
    assert.equal(`${receipt.eval_id}.json`, entry.name, `${id}: the eval receipt ${entry.name}`);
    view[`${id}:evalReceipt/${receipt.eval_id}`] = receipt;
  }
  await walk(fs, paths.rawDir, `${id}:raw`, view);
}

/**
 * The repository as the host reads it; any reader's error fails the test. `thorough` also checks
 * that every published session is complete and that the scheduler's walk down the tree works
 * (an active child is a published child): what a crash could break, skipped between resolved
 * operations to keep the test fast.
 */
async function observe(fs: MemoryFs, thorough = true): Promise<View> {
  const roots = await listRootSessionIds(fs, REPO);
  const view: Record<string, unknown> = { roots };
  for (const rootId of roots) {
    const tree = await loadSessionTree(fs, REPO, rootId);
    if (thorough) await findWorkingSession(fs, tree);
    for (const node of tree.nodes.values()) {
      await observeSession(fs, tree, node, view, thorough);
    }
  }
  return view;
}

// ---------------------------------------------------------------------------------------------
// What a crash or a fault may leave

function equal(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(a, b);
}

const isEvents = (key: string): boolean => key.endsWith(":events");

function withoutEvents(view: View): View {
  return Object.fromEntries(Object.entries(view).filter(([key]) => !isEvents(key)));
}

function keysOf(...views: View[]): string[] {
  return [...new Set(views.flatMap((view) => Object.keys(view)))].sort();
}

/**
 * Checks that every group of keys (by `groupOf`) of `seen` is as in `before` or as in `after`;
 * events are checked apart. Returns the first violation.
 */
function wholeGroups(
  before: View,
  after: View,
  seen: View,
  groupOf: (key: string) => string,
): string | undefined {
  const groups = new Map<string, string[]>();
  for (const key of keysOf(before, after, seen)) {
    if (isEvents(key)) continue;
    const group = groupOf(key);
    groups.set(group, [...(groups.get(group) ?? []), key]);
  }
  for (const [group, keys] of groups) {
    const pick = (view: View) => keys.map((key) => view[key]);
    if (!equal(pick(seen), pick(before)) && !equal(pick(seen), pick(after))) {
      return `${group} is neither as before nor as after: ${JSON.stringify(pick(seen))}, ` +
        `before ${JSON.stringify(pick(before))}, after ${JSON.stringify(pick(after))}`;
    }
  }
  return undefined;
}

type Landing = "before" | "after" | "between";

/**
 * Where `seen` stands between the view before `op` and the view after it, or throws naming the
 * violation. Besides the two views themselves, only what the module docs allow is accepted:
 * - events are appended one record at a time, each fsynced, after the operation committed
 *   (`events.ts`, `appendEventAfterCommit`): a prefix of the new records, and none before the
 *   rest of the operation is whole;
 * - `createAttemptArtifacts` and `writeGitReceipt` write each file atomically, and rerunning
 *   them writes the same files: each file is absent or whole;
 * - an acceptance is pending (with the accepted copy, the ledger entry, the published child and
 *   the parent's pointer each possibly already there) or fully accepted; a rejection is pending
 *   or archived, its receipt possibly written first (`child_requests.ts`);
 * - `recordChildOutcome`: every step is repeatable, each record whole;
 * - an eval acceptance: the eval role's raw report and receipt are each absent or whole (written
 *   atomically, in that order, before the call), and `acceptEvalReceipt` seals the acceptance in
 *   `state.json` before it writes the sidecar: a sidecar never stands without its seal, and a
 *   seal alone is the leftover a rerun completes (`receipts.ts`);
 * - `pruneRaw`: each raw directory is whole or gone (`prune.ts`).
 */
function landing(op: Op, before: View, after: View, seen: View, kind: string): Landing {
  if (equal(seen, before)) return "before";
  if (equal(seen, after)) return "after";
  for (const key of keysOf(before, after, seen).filter(isEvents)) {
    const was = (before[key] ?? []) as unknown[];
    const will = (after[key] ?? []) as unknown[];
    const now = (seen[key] ?? []) as unknown[];
    const prefix = now.length >= was.length && now.length <= will.length &&
      equal(now, will.slice(0, now.length));
    assert.ok(prefix, `${key} is not a prefix of the new events: ${JSON.stringify(now)}`);
  }
  if (equal(withoutEvents(seen), withoutEvents(after))) return "between";
  for (const key of keysOf(before, after, seen).filter(isEvents)) {
    assert.deepEqual(seen[key] ?? [], before[key] ?? [], `${key}: an event before the commit`);
  }
  let violation: string | undefined;
  switch (kind) {
    case "createAttempt":
    case "gitReceipt":
    case "recordOutcome":
      violation = wholeGroups(before, after, seen, (key) => key);
      break;
    case "acceptEval": {
      const { session, evalId, task } = op as AcceptEvalOp;
      const stateKey = `${session}:state`;
      const sealsKey = `${session}:seals`;
      // One file holds both: a seal comes with its revision of the state.
      violation = wholeGroups(before, after, seen, (key) => key === sealsKey ? stateKey : key);
      const sealed = !equal(seen[sealsKey], before[sealsKey]);
      const written = seen[`${session}:evalReceipt/${evalId}`] !== undefined &&
        seen[reportKey(session, task)] !== undefined;
      if (seen[`${session}:sidecar/${evalId}`] !== undefined && !sealed) {
        violation ??= `the sidecar of ${evalId} was written before its seal`;
      } else if (sealed && !written) {
        violation ??= `${evalId} was sealed before its receipt and raw report were written`;
      }
      break;
    }
    case "prune":
      violation = wholeGroups(before, after, seen, (key) => {
        const raw = /^([^:]+):(?:raw\/|iterations\/|receipts\/)(\d{4}_[A-Za-z0-9.-]+)/.exec(key);
        return raw === null ? key : `${raw[1]}:${raw[2]}`;
      });
      break;
    case "process:reject": {
      const session = (op as { session: string }).session;
      const name = Object.keys(pendingOf(before, session)).sort()[0] as string;
      // The request is in exactly one place: pending or archived.
      violation = wholeGroups(
        before,
        after,
        seen,
        (key) =>
          key === `${session}:pending` || key === `${session}:rejected/${name}` ? "move" : key,
      );
      break;
    }
    case "process:accept": {
      const session = (op as { session: string }).session;
      assert.deepEqual(
        seen[`${session}:pending`],
        before[`${session}:pending`],
        "the request left pending before its acceptance was complete",
      );
      const ledgerKey = `${session}:ledger`;
      const ledger = after[ledgerKey] as LedgerView;
      const dispatching: LedgerView = {
        revision: ledger.revision - 1,
        children: ledger.children.map((c, i) =>
          i === ledger.children.length - 1 ? { ...c, status: "dispatching" } : c
        ),
      };
      assert.ok(
        [before[ledgerKey], dispatching, ledger].some((l) => equal(seen[ledgerKey], l)),
        `${ledgerKey} is ${JSON.stringify(seen[ledgerKey])}`,
      );
      const childId = ledger.children.at(-1)?.session_id as string;
      // The child is published whole (staging directory and rename).
      violation = wholeGroups(
        { ...before, [ledgerKey]: seen[ledgerKey] },
        after,
        seen,
        (key) => key.startsWith(`${childId}:`) ? childId : key,
      );
      break;
    }
    default:
      violation = "an atomic operation left a mix of before and after";
  }
  assert.equal(violation, undefined);
  return "between";
}

/** Renames session `from` to `to` everywhere in `view` (a rerun may take the next ordinal). */
function renamed(view: View, from: string, to: string): View {
  return from === to ? view : JSON.parse(JSON.stringify(view).replaceAll(from, to));
}

/** What `check` found, for the coverage assertions. */
interface Tally {
  readonly landings: Record<Landing, number>;
  readonly between: Set<string>;
  readonly reruns: Set<string>;
  /** Eval acceptances found sealed in `state.json` without their sidecar. */
  sealOnly: number;
  /** The steps of a child's way to an outcome citing its eval receipt crashed in (`evalStep`). */
  readonly evalSteps: Set<string>;
}

/** A goal_met control of session `id` citing the eval receipts `refs`, read back as accepted. */
async function cite(
  fs: MemoryFs,
  paths: SessionPaths,
  id: string,
  refs: readonly string[],
): ReturnType<typeof readTerminalControl> {
  await writeJson(fs, paths.controlJson, goalMetControl(id, "outer", { eval_receipt_refs: refs }));
  return await readTerminalControl(fs, paths, {
    sessionId: id,
    workflowId: "outer",
    attemptId: "a26",
    completionRole: "outer",
  });
}

/**
 * Where `op`, an eval acceptance, was in flight and its receipt is written: a goal_met control
 * citing the receipt (written on a copy) is refused while `state.json` seals no acceptance of it,
 * and accepted once it does, before the sidecar is written too: the seal is the trust root.
 */
async function citedInFlight(
  fs: MemoryFs,
  op: AcceptEvalOp,
  seen: View,
  tally: Tally,
): Promise<void> {
  if (seen[`${op.session}:evalReceipt/${op.evalId}`] === undefined) return;
  const sealed = sealsOf(seen, op.session).some((seal) => seal.eval_id === op.evalId);
  if (sealed && seen[`${op.session}:sidecar/${op.evalId}`] !== undefined) return;
  const ref = evalSealKey(op.evalId);
  const citing = cite(fs.clone(), pathsOf(seen, op.session), op.session, [ref]);
  if (sealed) {
    tally.sealOnly++;
    assert.deepEqual(
      (await citing)?.record.eval_receipt_refs,
      [ref],
      "a sealed receipt's citation",
    );
  } else {
    await assert.rejects(citing, (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.path, "eval_receipt_refs[0]", error.message);
      return true;
    });
  }
}

/** Every session of `view` that sealed eval receipts cites them all in a goal_met control. */
async function citeSealed(fs: MemoryFs, view: View): Promise<void> {
  for (const id of sessionIds(view)) {
    const refs = sealsOf(view, id).map((seal) => seal.receipt_ref);
    if (refs.length === 0) continue;
    const read = await cite(fs, pathsOf(view, id), id, refs);
    assert.deepEqual(read?.record.eval_receipt_refs, refs, `${id} cites its sealed receipts`);
  }
}

/**
 * Checks a recovered (or faulted) repository where `op` was in flight: it reads back as allowed
 * (`landing`); the host reruns the operation unless it is complete (events are best effort and
 * never rerun) and gets exactly the state after it; then one more operation succeeds and leaves
 * the state the model predicts, where a goal_met control may cite every sealed eval receipt (the
 * control is written last: the repository is not used after).
 */
async function check(
  fs: MemoryFs,
  op: Op,
  before: View,
  after: View,
  follow: () => number,
  tag: string,
  tally: Tally,
): Promise<void> {
  const kind = kindOf(op, before);
  const seen = await observe(fs);
  const where = landing(op, before, after, seen, kind);
  tally.landings[where]++;
  if (where === "between") tally.between.add(kind);
  if (op.kind === "acceptEval") await citedInFlight(fs, op, seen, tally);
  let current = seen;
  if (!equal(withoutEvents(seen), withoutEvents(after))) {
    tally.reruns.add(kind);
    await perform(fs, op, before);
    current = await observe(fs);
    let expected = after;
    if (op.kind === "createRoot") {
      // A crash may leave the ordinal reservation: the rerun then takes the next ordinal.
      const root = (current.roots as string[])[0] ?? "";
      assert.match(root, /^\d{3}_ship-the-ultimate-memory-program$/);
      expected = renamed(after, ROOT_ID, root);
    }
    assert.deepEqual(current, expected, "the rerun did not finish the operation");
  }
  // One more operation, chosen from what the host now reads.
  const next = choose(current, follow, tag);
  await perform(fs, next, current);
  const last = apply(current, next);
  assert.deepEqual(await observe(fs), last, `the next ${next.kind} after it`);
  await citeSealed(fs, last);
}

/** A sequence run without a crash: the state before each operation, where its operations start. */
interface Recorded {
  /** `checkpoints[i]`: a copy of the filesystem before operation i (and at the end). */
  readonly checkpoints: readonly MemoryFs[];
  /** `starts[i]`: how many filesystem operations ran before operation i (and in all). */
  readonly starts: readonly number[];
  /** The filesystem operations the sequence made, in order. */
  readonly log: readonly MemoryOperation[];
}

/**
 * Runs `ops` on a copy of `base`, keeping a copy of the filesystem before each operation, so a
 * crash or a fault in operation i replays only that operation on top of everything before it
 * (its unsynced work included); checks the view after every operation against the model.
 */
async function record(
  base: MemoryFs,
  ops: readonly Op[],
  views: readonly View[],
): Promise<Recorded> {
  const fs = base.clone();
  const checkpoints: MemoryFs[] = [];
  const starts: number[] = [];
  for (const [i, op] of ops.entries()) {
    checkpoints.push(fs.clone());
    starts.push(fs.operationCount);
    await perform(fs, op, i === 0 ? EMPTY : views[i - 1] as View);
  }
  checkpoints.push(fs.clone());
  starts.push(fs.operationCount);
  for (const [i, op] of ops.entries()) {
    // Read on the copy after the operation: its reads shift no operation number.
    const seen = await observe(checkpoints[i + 1] as MemoryFs, false);
    assert.deepEqual(seen, views[i], `${op.kind} (#${i}) resolved to another state`);
  }
  return { checkpoints, starts, log: fs.operationLog.map((entry) => entry.op) };
}

/** A sequence, the kind of each operation, and its run without a crash. */
interface SequenceRun {
  readonly ops: readonly Op[];
  readonly views: readonly View[];
  readonly kinds: readonly string[];
  readonly recorded: Recorded;
}

const runs = new Map<number, Promise<SequenceRun>>();

/**
 * Sequence `seed`, run on an empty repository. A seed the tests write is run once and kept for
 * both tests; one a soak added is run again instead, so that a soak's memory does not grow with
 * its seeds (each run keeps a filesystem per operation).
 */
function sequenceRun(seed: number): Promise<SequenceRun> {
  let run = runs.get(seed);
  if (run === undefined) {
    run = (async () => {
      const base = await newRepo();
      base.syncAll();
      const { ops, views } = sequence(seed, LENGTH);
      return { ops, views, kinds: kindsOf(ops, views), recorded: await record(base, ops, views) };
    })();
    if (!isAddedSeed(seed)) runs.set(seed, run);
  }
  return run;
}

/** The filesystem operations that change something (or make it durable). */
const CHANGES: ReadonlySet<MemoryOperation> = new Set<MemoryOperation>([
  "open",
  "openAppendNoFollow",
  "writeFile",
  "rename",
  "remove",
  "mkdir",
  "chmod",
  "symlink",
  "syncDir",
  "utime",
  "write",
  "truncate",
  "sync",
]);

/** The operations of several steps, each of which a crash may interrupt: hit twice as often. */
const MULTI_STEP: ReadonlySet<string> = new Set([
  "createRoot",
  "createAttempt",
  "gitReceipt",
  "acceptEval",
  "process:accept",
  "process:reject",
  "recordOutcome",
  "prune",
]);

/**
 * A crash or fault point: an operation of the sequence, of a kind hit least so far (`hits`,
 * halved for multi-step kinds), so every kind is crashed in about as often, and a random
 * filesystem operation (1-based) in it: with `changes`, one that changes something when there is
 * one (a crash before a read leaves what a crash before the next change leaves), in an operation
 * that changes something when that kind has one (a prune with nothing to remove only reads).
 */
function pickPoint(
  recorded: Recorded,
  kinds: readonly string[],
  hits: Map<string, number>,
  changes: boolean,
  next: () => number,
): { index: number; local: number } {
  const load = (kind: string): number => (hits.get(kind) ?? 0) / (MULTI_STEP.has(kind) ? 2 : 1);
  const fewest = Math.min(...kinds.map(load));
  const rare = kinds.flatMap((kind, i) => load(kind) === fewest ? [i] : []);
  const changingIn = (i: number): boolean =>
    recorded.log.slice(recorded.starts[i], recorded.starts[i + 1]).some((op) => CHANGES.has(op));
  const changed = changes ? rare.filter(changingIn) : [];
  const pool = changed.length > 0 ? changed : rare;
  const index = pool[Math.floor(next() * pool.length)] as number;
  const kind = kinds[index] as string;
  hits.set(kind, (hits.get(kind) ?? 0) + 1);
  const start = recorded.starts[index] as number;
  const ops = recorded.log.slice(start, recorded.starts[index + 1]);
  const changing = ops.flatMap((op, i) => CHANGES.has(op) ? [i + 1] : []);
  // A prune with nothing to remove only reads.
  const points = changes && changing.length > 0 ? changing : ops.map((_, i) => i + 1);
  return { index, local: points[Math.floor(next() * points.length)] as number };
}

/**
 * What happened to the attempt that produced the receipt `op` accepts again, by `before`:
 * `pruned` (its raw report is gone), `finished`, or `running`.
 */
function reaccepted(op: Extract<Op, { readonly kind: "acceptEvalAgain" }>, before: View): string {
  const seal = sealsOf(before, op.session).find((s) => s.eval_id === op.evalId) as SealView;
  if (before[reportKey(op.session, seal.producer)] === undefined) return "pruned";
  const task = stateOf(before, op.session).current_task;
  return task?.attempt_id === seal.producer.attempt_id ? "running" : "finished";
}

/**
 * The step `op` takes, by `before`, on a child's way to an outcome citing the eval receipt it
 * accepted: the child's acceptance, its stop, its outcome, the parent's record of that outcome,
 * or the receipt accepted again once its session stopped; undefined for any other operation.
 */
function evalStep(op: Op, before: View): string | undefined {
  switch (op.kind) {
    case "acceptEval":
      return nodeOf(before, op.session).depth > 0 ? op.kind : undefined;
    case "stop":
    case "writeOutcome":
      return sealsOf(before, op.session).length > 0 ? op.kind : undefined;
    case "recordOutcome": {
      const child = stateOf(before, op.session).active_child_session_id as string;
      return sealsOf(before, child).length > 0 ? op.kind : undefined;
    }
    case "acceptEvalAgain":
      return stateOf(before, op.session).status !== "running" ? op.kind : undefined;
    default:
      return undefined;
  }
}

/** Every step `evalStep` names. */
const EVAL_STEPS = ["acceptEval", "stop", "writeOutcome", "recordOutcome", "acceptEvalAgain"];

/** The kind of each operation of a sequence. */
function kindsOf(ops: readonly Op[], views: readonly View[]): string[] {
  return ops.map((op, i) => kindOf(op, i === 0 ? EMPTY : views[i - 1] as View));
}

function newTally(): Tally {
  return {
    landings: { before: 0, after: 0, between: 0 },
    between: new Set(),
    reruns: new Set(),
    sealOnly: 0,
    evalSteps: new Set(),
  };
}

const ALL_KINDS = [
  "createRoot",
  "dispatch",
  "createAttempt",
  "gitReceipt",
  "writeResult",
  "finish",
  "appendEvents",
  "acceptEval",
  "acceptEvalAgain",
  "publish",
  "process:accept",
  "process:reject",
  "stop",
  "writeOutcome",
  "recordOutcome",
  "parentAcceptance",
  "prune",
];

const SEQUENCES = 16;
const LENGTH = 20;
const POINTS = 5;
const FAULT_SEQUENCES = 12;

test("random host sequences on a folded tree, crashed anywhere, read back at the last resolved state or the one in flight and go on", async () => {
  // Strictly the durable state, a process crash (the kernel kept everything), and mostly a
  // seeded prefix of the unsynced work with seeded tails.
  const crashes = (seed: number, k: number): CrashOptions =>
    (seed + k) % 5 === 0
      ? { seed, tailMode: "none", extraJournal: "none" }
      : (seed + k) % 5 === 1
      ? { seed, tailMode: "whole", extraJournal: "all" }
      : { seed: seed * 100 + k };
  const ran = new Set<string>();
  const hits = new Map<string, number>();
  const tally = newTally();
  const again: string[] = [];
  const steps = new Set<string>();
  let citing = 0;
  for (const seed of seedsOf(1, SEQUENCES)) {
    const { ops, views, kinds, recorded } = await sequenceRun(seed);
    for (const kind of kinds) ran.add(kind);
    for (const [i, op] of ops.entries()) {
      const before = i === 0 ? EMPTY : views[i - 1] as View;
      if (op.kind === "acceptEvalAgain") again.push(reaccepted(op, before));
      const step = evalStep(op, before);
      if (step !== undefined) steps.add(step);
      if (op.kind === "writeOutcome") {
        // An outcome citing eval receipts (read back as the model has it: `record`).
        const outcome = (views[i] as View)[`${op.session}:outcome`] as { eval_refs: string[] };
        if (outcome.eval_refs.length > 0) citing++;
      }
    }
    const next = mulberry32(seed * 7919);
    for (let k = 0; k < POINTS; k++) {
      // Filesystem operation `local` of operation `index` is the first the crash refuses.
      const { index, local } = pickPoint(recorded, kinds, hits, true, next);
      const op = ops[index] as Op;
      const before = index === 0 ? EMPTY : views[index - 1] as View;
      const step = evalStep(op, before);
      if (step !== undefined) tally.evalSteps.add(step);
      const fs = (recorded.checkpoints[index] as MemoryFs).clone();
      fs.crashAfter(local - 1);
      try {
        await perform(fs, op, before);
      } catch (error) {
        if (!(error instanceof SimulatedCrash) && !fs.crashTriggered) throw error;
      }
      // Also when the operation resolved: the crash hit a best-effort step it tolerates.
      assert.ok(fs.crashTriggered, `crash point ${local} fell outside ${op.kind}`);
      const options = crashes(seed, k);
      const label = `sequence ${seed} [${ops.map((o) => o.kind)}], crash after ` +
        `${local - 1} operations of ${op.kind} #${index}, ${JSON.stringify(options)}`;
      try {
        const after = views[index] as View;
        await check(
          fs.crash(options),
          op,
          before,
          after,
          mulberry32(seed * 31 + k),
          `${seed}-c${k}`,
          tally,
        );
      } catch (error) {
        throw new Error(`${label}: ${(error as Error).message}`, { cause: error });
      }
    }
  }
  // Every kind of operation ran and was crashed in; recoveries landed before, after and between
  // (a documented leftover the rerun finished).
  assert.deepEqual([...ran].sort(), [...ALL_KINDS].sort());
  assert.deepEqual([...hits.keys()].sort(), [...ALL_KINDS].sort());
  assert.ok(tally.landings.before > 20, JSON.stringify(tally.landings));
  assert.ok(tally.landings.after > 2, JSON.stringify(tally.landings));
  assert.ok(tally.landings.between > 10, JSON.stringify(tally.landings));
  for (const kind of ["createAttempt", "gitReceipt", "process:accept", "acceptEval"]) {
    assert.ok(tally.between.has(kind), `no crash left ${kind} half done: ${[...tally.between]}`);
  }
  for (const kind of ["createAttempt", "process:accept", "prune", "recordOutcome", "acceptEval"]) {
    assert.ok(tally.reruns.has(kind), `no rerun of ${kind}: ${[...tally.reruns]}`);
  }
  // A crash between an eval acceptance's seal and its sidecar was completed by a rerun.
  assert.ok(tally.sealOnly > 0, "no crash left an eval acceptance sealed without its sidecar");
  // The same eval receipt was accepted again once its attempt finished, and once its raw
  // report was pruned.
  for (const when of ["finished", "pruned"]) {
    assert.ok(again.includes(when), `no receipt accepted again once ${when}: ${again}`);
  }
  // A child accepted an eval receipt, stopped, and its outcome, citing the receipt, was recorded
  // in its parent; the receipt was accepted again once the child stopped; and crashes fell in
  // each of those steps.
  assert.ok(citing > 0, "no outcome cites an accepted eval receipt");
  assert.deepEqual([...steps].sort(), [...EVAL_STEPS].sort(), "the steps that ran");
  assert.deepEqual([...tally.evalSteps].sort(), [...EVAL_STEPS].sort(), "the steps crashed in");
});

/** The I/O error behind `error` (the error itself or a cause), if any. */
function ioError(error: unknown): FsIoError | undefined {
  for (let e = error; e instanceof Error; e = e.cause) if (e instanceof FsIoError) return e;
  return undefined;
}

/**
 * Whether an operation may resolve although its filesystem call `calls[0]` failed (`calls` are
 * that call and every later one of the operation), by the module docs: the `realPath` of a
 * serialization key falls back to the path as spelled (`canonicalPath`), the removal of a root's
 * ordinal reservation may fail (`createRootSession`: the check of the directory on its way too),
 * prune-raw reports an entry whose removal failed once moved aside as `remove_failed`
 * (`pruneRaw`: a temp leftover, removed by its own name, too), and the event appended after an
 * acceptance or a child outcome committed is best effort (`appendEventAfterCommit`): the failed
 * call and everything after it then only touch the parent's `events.jsonl` (or check the
 * directories on its way).
 */
function tolerated(
  kind: string,
  events: string,
  calls: readonly { readonly op: string; readonly path: string }[],
): boolean {
  const call = calls[0];
  if (call === undefined) return false;
  if (call.op === "realPath") return true;
  if (kind === "createRoot") {
    return calls.every((c) =>
      (c.op === "remove" || c.op === "lstat") &&
      (c.path.includes("/.ordinal-") || c.path.endsWith("/.loopy_loop/sessions"))
    );
  }
  if (kind === "prune") {
    const name = call.path.slice(call.path.lastIndexOf("/") + 1);
    return call.op === "remove" && (name.startsWith(PRUNING_PREFIX) || isTempName(name));
  }
  return (kind === "process:accept" || kind === "recordOutcome") &&
    calls.every((c) => c.path === events || events.startsWith(`${c.path}/`));
}

test("random host sequences on a folded tree with an I/O error at a random step: the call fails, a rerun finishes it, the host goes on", async () => {
  const tally = newTally();
  const hits = new Map<string, number>();
  const failed = new Set<string>();
  let failures = 0;
  const seeds = seedsOf(1, FAULT_SEQUENCES);
  for (const seed of seeds) {
    const { ops, views, kinds, recorded } = await sequenceRun(seed);
    const next = mulberry32(seed * 104729);
    for (let k = 0; k < POINTS; k++) {
      const { index, local } = pickPoint(recorded, kinds, hits, false, next);
      const op = ops[index] as Op;
      const kind = kinds[index] as string;
      const before = index === 0 ? EMPTY : views[index - 1] as View;
      const step = evalStep(op, before);
      if (step !== undefined) tally.evalSteps.add(step);
      const code = k % 2 === 0 ? "EIO" : "ENOSPC";
      const fs = (recorded.checkpoints[index] as MemoryFs).clone();
      fs.failAt(local, { error: code });
      let failure: unknown;
      try {
        await perform(fs, op, before);
      } catch (error) {
        failure = error;
      }
      const call = fs.operationLog[local - 1];
      const label = `sequence ${seed} [${ops.map((o) => o.kind)}], ${code} at operation ` +
        `${local} (${call?.op} ${call?.path}) of ${op.kind} #${index}`;
      if (failure === undefined) {
        const events = "session" in op ? pathsOf(before, op.session).eventsJsonl : "";
        const rest = fs.operationLog.slice(local - 1);
        assert.ok(tolerated(kind, events, rest), `${label}: the call resolved`);
      } else {
        failures++;
        failed.add(kind);
        assert.equal(ioError(failure)?.code, code, `${label}: ${String(failure)}`);
      }
      fs.clearFaults();
      try {
        await check(
          fs,
          op,
          before,
          views[index] as View,
          mulberry32(seed * 37 + k),
          `${seed}-f${k}`,
          tally,
        );
      } catch (error) {
        throw new Error(`${label}: ${(error as Error).message}`, { cause: error });
      }
    }
  }
  // Faults fell in every kind of operation, and nearly always failed the call.
  assert.deepEqual([...hits.keys()].sort(), [...ALL_KINDS].sort());
  assert.ok(failures > seeds.length * POINTS * 0.8, `${failures} calls failed`);
  assert.ok(failed.size >= 15, `calls failed in ${[...failed]}`);
  assert.ok(tally.landings.between > 5, JSON.stringify(tally.landings));
  // Faults fell in each step of a child's way to an outcome citing its eval receipt.
  assert.deepEqual([...tally.evalSteps].sort(), [...EVAL_STEPS].sort(), "the steps faulted in");
});
