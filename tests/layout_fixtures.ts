// Shared fixtures of the layout tests: a repository on the memory filesystem, a deterministic
// clock and uuid source, and small builders. Not a test file itself.
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  acceptEvalReceipt,
  type AttemptIdentity,
  type ChildRequest,
  createAttemptArtifacts,
  type CreatedSession,
  createRootSession,
  type GitBoundary,
  LayoutRecordError,
  type LayoutWriteOptions,
  LogicalReferenceResolver,
  readTerminalControl,
  type SessionOutcomeInput,
  type SessionPaths,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import { hookedFs } from "./_hooks.ts";

/** A fixed clock: every timestamp is 2026-04-19T14:30:22Z. */
export const fixedNow = (): Date => new Date("2026-04-19T14:30:22.456Z");

/**
 * A uuid source counting up from 1 in its leading hex digits (event ids and staging names take
 * a prefix), so everything derived from it is deterministic and distinct.
 */
export function countingUuid(): () => string {
  let next = 0;
  return () => (++next).toString(16).padStart(12, "0").padEnd(32, "0");
}

/** Deterministic write options for one test. */
export function deterministic(): LayoutWriteOptions {
  return { now: fixedNow, uuid: countingUuid() };
}

/** The contracts every test session uses. */
export const CONTRACTS = {
  workflowSet: "main",
  workflowContract: {
    orchestration: { completion_role: "outer" },
    terminal_blocker_reporting_roles: ["outer"],
  },
  workflowRoster: { roles: [{ id: "outer", cadence: "every" }] },
  harnessCapabilityRoster: { coordinator: "default", families: ["standard"] },
} as const;

/** A memory filesystem with an empty repository at `/repo`. */
export async function newRepo(): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir("/repo");
  return fs;
}

/** Creates a root session in `/repo` with deterministic clock and uuids. */
export async function newRoot(
  fs: MemoryFs,
  goal = "Ship the ultimate memory program",
  options: LayoutWriteOptions = deterministic(),
): Promise<CreatedSession> {
  return await createRootSession(fs, { repoRoot: "/repo", goal, ...CONTRACTS, ...options });
}

/** A valid v3 child request. */
export function childRequest(requestId: string, extra: Partial<ChildRequest> = {}): ChildRequest {
  return {
    schema_version: 3,
    request_id: requestId,
    goal: `Deliver ${requestId}`,
    origin: { parent_attempt_id: "attempt000001" },
    ...extra,
  };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Reads a JSON file. */
export async function readJson(fs: MemoryFs, path: string): Promise<Record<string, unknown>> {
  return JSON.parse(decoder.decode(await fs.readFile(path)));
}

/** Reads a text file. */
export async function readText(fs: MemoryFs, path: string): Promise<string> {
  return decoder.decode(await fs.readFile(path));
}

/** Writes a JSON file directly (as an agent or a test would), indented. */
export async function writeJson(fs: MemoryFs, path: string, value: unknown): Promise<void> {
  await fs.writeFile(path, encoder.encode(JSON.stringify(value, null, 2)));
}

/** Writes a text file directly. */
export async function writeText(fs: MemoryFs, path: string, text: string): Promise<void> {
  await fs.writeFile(path, encoder.encode(text));
}

/** Merges `patch` into a session's state.json (a test stand-in for the scheduler). */
export async function patchState(
  fs: MemoryFs,
  sessionDir: string,
  patch: Record<string, unknown>,
): Promise<void> {
  const state = await readJson(fs, `${sessionDir}/state.json`);
  await writeJson(fs, `${sessionDir}/state.json`, { ...state, ...patch });
}

/**
 * Commits a terminal transition to a session's state.json as the engine does before it writes
 * `session_outcome.json`: the status, the frozen transition revision and time, no current task.
 */
export async function commitTerminalState(
  fs: MemoryFs,
  sessionDir: string,
  status: string,
  terminalStateRevision: number,
  terminalAt: string,
): Promise<void> {
  await patchState(fs, sessionDir, {
    status,
    current_task: null,
    terminal_state_revision: terminalStateRevision,
    terminal_at: terminalAt,
  });
}

const ASYNC_FS_METHODS: ReadonlySet<string> = new Set([
  "open",
  "openNoFollow",
  "openAppendNoFollow",
  "readFile",
  "readFileNoFollow",
  "writeFile",
  "rename",
  "remove",
  "mkdir",
  "readDir",
  "stat",
  "lstat",
  "realPath",
  "chmod",
  "symlink",
  "readLink",
  "syncDir",
  "utime",
]);

/** A filesystem view that stops once, right after a chosen call, until the test releases it. */
export interface PausingFs {
  /** The view to hand to the operation under test. */
  readonly fs: FileSystem;
  /** Resolves when the chosen call has returned and the operation is paused. */
  readonly paused: Promise<void>;
  /** Lets the paused operation continue. */
  release(): void;
}

/**
 * Wraps `fs` so that the first call for which `when(method, path)` holds pauses right after it
 * returns (its result is kept) until `release()` is called: a deterministic interleaving of an
 * operation with whatever the test does meanwhile (another process, the engine).
 */
export function pauseAfter(
  fs: MemoryFs,
  when: (method: string, path: string) => boolean,
): PausingFs {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let reached!: () => void;
  const paused = new Promise<void>((resolve) => (reached = resolve));
  let done = false;
  const view = new Proxy(fs, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      if (!ASYNC_FS_METHODS.has(String(property))) return value.bind(target);
      return async (...args: unknown[]) => {
        const out = await value.apply(target, args);
        if (!done && when(String(property), String(args[0]))) {
          done = true;
          reached();
          await gate;
        }
        return out;
      };
    },
  }) as unknown as FileSystem;
  return { fs: view, paused, release };
}

/** When `stoppedOutcome`'s sessions stopped. */
export const STOPPED_AT = "2026-04-20T00:00:00Z";

/** An outcome of a session stopped at `revision` (`max_turns`, at `STOPPED_AT`) with no handoff. */
export function stoppedOutcome(
  sessionId: string,
  goalSha256: string,
  revision: number,
  extra: Partial<SessionOutcomeInput> = {},
): SessionOutcomeInput {
  return {
    sessionId,
    rootSessionId: sessionId,
    goalSha256,
    terminalStatus: "max_turns",
    stopReason: "max_turns",
    terminalStateRevision: revision,
    terminalAt: STOPPED_AT,
    handoff: { status: "missing", sha256: null, diagnosis: "no handoff" },
    ...extra,
  } as SessionOutcomeInput;
}

/**
 * A terminal `session_outcome.json` as the engine writes it when it stopped with `status`: no
 * handoff, no refs unless `fields` give them. `fields` name the session (ids, goal hash, revision,
 * time); keys keep the engine's order. A `goal_met` stop is decided by a control record, so its
 * outcome binds a control snapshot (an arbitrary hash) and the control's reason is the fallback
 * summary; any other stop binds none, and its stop reason is the fallback summary.
 */
export function engineOutcome(
  status: string,
  fields: {
    readonly session_id: string;
    readonly root_session_id: string;
    readonly goal_sha256: string;
    readonly terminal_state_revision: number;
    readonly created_at: string;
    readonly evidence_refs?: readonly string[];
    readonly delivery_refs?: readonly string[];
    readonly trace_seal_refs?: readonly string[];
  },
): Record<string, unknown> {
  return {
    schema_version: 1,
    session_id: fields.session_id,
    root_session_id: fields.root_session_id,
    goal_sha256: fields.goal_sha256,
    lifecycle: "terminal",
    terminal_status: status,
    stop_reason: status,
    terminal_state_revision: fields.terminal_state_revision,
    control: status === "goal_met"
      ? { ref: "session:/control.json", sha256: `sha256:${"c".repeat(64)}` }
      : null,
    handoff: {
      status: "missing",
      ref: "session:/project_state/handoff.json",
      sha256: null,
      revision: null,
    },
    fallback_summary: status === "goal_met"
      ? { source: "control_reason", text: "Every outcome is accepted" }
      : { source: "engine_stop_reason", text: status },
    evidence_refs: fields.evidence_refs ?? [],
    delivery_refs: fields.delivery_refs ?? [],
    eval_refs: [],
    trace_seal_refs: fields.trace_seal_refs ?? [],
    created_at: fields.created_at,
  };
}

/**
 * Finishes the child session at `child` (of the root `rootId`) as blocked: its control record
 * (`unresolvable_error`, produced by attempt `c9` of workflow `outer`), the terminal state
 * committed to its state.json (`failed`, revision 2), then its `session_outcome.json`.
 */
export async function finishChildBlocked(
  fs: MemoryFs,
  child: SessionPaths,
  childId: string,
  rootId: string,
): Promise<void> {
  await writeJson(fs, child.controlJson, {
    schema_version: 3,
    state: "stopped",
    stop_reason: "unresolvable_error",
    control_id: "blocked-1",
    reason: "The upstream API is gone",
    created_at: "2026-04-19T15:00:00Z",
    producer: { session_id: childId, workflow_id: "outer", attempt_id: "c9" },
    attempted_routes: ["retry with backoff", "alternative endpoint"],
  });
  const control = await readTerminalControl(fs, child, {
    sessionId: childId,
    workflowId: "outer",
    attemptId: "c9",
  });
  await commitTerminalState(fs, child.dir, "failed", 2, "2026-04-19T15:00:01Z");
  await writeSessionOutcome(fs, child, {
    sessionId: childId,
    rootSessionId: rootId,
    goalSha256: String((await readJson(fs, child.sessionJson)).goal_hash),
    terminalStatus: "failed",
    stopReason: "unresolvable_error",
    terminalStateRevision: 2,
    terminalAt: "2026-04-19T15:00:01Z",
    control,
    handoff: {
      status: "missing",
      handoff: undefined,
      sha256: null,
      revision: null,
      diagnosis: "-",
    },
  });
}

/**
 * A passing eval receipt `tests-pass` of the iteration-26 attempt `attemptId` (default `a26`) of
 * workflow `outer` in `sessionId`, citing `raw/0026_outer/eval/report.json` and the git receipt
 * `0026_outer_git_after.json`; `overrides` replace fields in place (the key order is the
 * engine's).
 */
export function evalReceipt(
  sessionId: string,
  attemptId = "a26",
  overrides: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    schema_version: 1,
    eval_id: "tests-pass",
    verdict: "pass",
    producer: { session_id: sessionId, workflow_id: "outer", attempt_id: attemptId, iteration: 26 },
    raw_report_refs: ["session:/raw/0026_outer/eval/report.json"],
    git_receipt_ref: "session:/receipts/0026_outer_git_after.json",
    created_at: "2026-04-19T15:00:00Z",
    ...overrides,
  };
}

/** `fs` where every call on `path` but `lstat` fails with an injected `EIO`. */
export function unreadableAt(fs: FileSystem, path: string): FileSystem {
  return hookedFs(fs, {
    before(method, args) {
      if (String(args[0]) === path && method !== "lstat") {
        throw new FsIoError("EIO", method, path, "injected");
      }
    },
  });
}

/** A goal_met control `done-1` by attempt a26 of `workflowId` in `sessionId`, plus `extra`. */
export function goalMetControl(
  sessionId: string,
  workflowId = "outer",
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    schema_version: 3,
    state: "stopped",
    stop_reason: "goal_met",
    control_id: "done-1",
    reason: "Every outcome is accepted",
    created_at: "2026-04-19T15:00:00Z",
    producer: { session_id: sessionId, workflow_id: workflowId, attempt_id: "a26" },
    ...extra,
  };
}

/** Gives `attempt` of `sessionId` its artifacts, raw eval report `report`, git-after receipt. */
export async function evalAttempt(
  fs: MemoryFs,
  paths: SessionPaths,
  sessionId: string,
  attempt: AttemptIdentity,
  report: unknown,
  boundary: GitBoundary,
): Promise<void> {
  await createAttemptArtifacts(fs, paths, attempt, { prompt: "p", pathsMap: {} });
  const raw = `raw/${String(attempt.iteration).padStart(4, "0")}_${attempt.workflowId}`;
  await writeJson(fs, `${paths.dir}/${raw}/eval/report.json`, report);
  await writeGitReceipt(fs, paths, sessionId, attempt, "after", boundary);
}

/** Writes and accepts `evalReceipt(sessionId)` as `tests-pass`, after its attempt a26's inputs. */
export async function acceptedTestsPass(
  fs: MemoryFs,
  paths: SessionPaths,
  sessionId: string,
): Promise<void> {
  const attempt = { iteration: 26, workflowId: "outer", attemptId: "a26" };
  const boundary = { head: "c0ffee", branch: "main", dirty: false };
  await evalAttempt(fs, paths, sessionId, attempt, { passed: 3 }, boundary);
  await writeJson(fs, paths.evalReceipt("tests-pass"), evalReceipt(sessionId));
  await acceptEvalReceipt(fs, paths, "tests-pass", { sessionId });
}

/** Points the mirror parent at `parentDir` at `childId`, running `legacy-phase` in a v1 ledger. */
export async function awaitingV1Child(
  fs: MemoryFs,
  parentDir: string,
  childId: string,
): Promise<void> {
  await patchState(fs, parentDir, { current_task: null, active_child_session_id: childId });
  await writeJson(fs, `${parentDir}/children.json`, {
    schema_version: 1,
    children: [{
      session_id: childId,
      workflow_set: "main",
      request_id: "legacy-phase",
      status: "running",
      created_at: "2026-04-19T15:05:01.123456Z",
    }],
  });
}

/** Asserts `error` is a `LayoutRecordError` of `file` at `path` (saying `says`, when given). */
export function recordError(
  file: string,
  path: string,
  says?: RegExp,
): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, path);
    if (says !== undefined) assert.match(error.message, says);
    return true;
  };
}

/** A reference resolver for `sessionId` in `repoRoot` (default `/repo`), reading through `fs`. */
export async function resolverFor(
  fs: FileSystem,
  sessionId: string,
  repoRoot = "/repo",
): Promise<LogicalReferenceResolver> {
  return await LogicalReferenceResolver.forSession(fs, { repoRoot, sessionId });
}

/** Asserts `fs` logged no operation (since its reset) on a path starting with any of `prefixes`. */
export function assertNothingThrough(fs: MemoryFs, ...prefixes: string[]): void {
  const through = fs.operationLog.filter((record) =>
    prefixes.some((prefix) => record.path.startsWith(prefix))
  );
  assert.deepEqual(through, [], "nothing looked up through the link");
}
