/**
 * Path construction for both session layouts, in one place. Every path of a session is built
 * here from the session directory and the session's recorded layout (the `layout` field of
 * `session.json`); nothing parses a directory name to decide a layout or an id.
 *
 * - Folded (every new session): raw attempt noise under `raw/<NNNN>_<workflow>/`, git and
 *   delivery receipts in `receipts/`.
 * - Mirror (legacy): raw traces in `.loopy_loop/traces/<root>/sessions/<id>/…`, receipts in
 *   `git_receipts/` and `delivery_receipts/`, seals in `trace_seals/`. A running mirror session
 *   finishes under its own layout (state, events, results, outcomes are still written), but the
 *   folded-only writers (attempt artifacts, git receipts, eval acceptance, child requests) refuse
 *   it, and nothing here rewrites its traces or seals.
 *
 * Every helper that takes an id (attempt, child session, request, eval, receipt name, subarea)
 * refuses one that is not a single safe path component, before any path is built from it.
 *
 * @module
 */
import { isAbsolute, join } from "../port/path.ts";
import { LayoutError, LayoutOptionError, UnsupportedLayoutError } from "./errors.ts";

/** One safe path component: `[A-Za-z0-9][A-Za-z0-9_.-]*` (no separator, never `.` or `..`). */
const SAFE_COMPONENT = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/**
 * `value` when it is one safe path component; anything else (a separator, `..`, an empty or
 * absolute name) is refused before it can name a path outside its directory.
 */
function component(value: string, what: string): string {
  if (typeof value !== "string" || !SAFE_COMPONENT.test(value)) {
    throw new LayoutError(`The ${what} is not a safe file name: ${JSON.stringify(value)}`);
  }
  return value;
}

/** The layout a session was created with, as recorded in its `session.json`. */
export type SessionLayout = "folded" | "mirror";

/** The repository-level directory of the engine. */
export const LOOPY_DIRNAME: string = ".loopy_loop";
/** The directory of root sessions inside `.loopy_loop/`. */
export const SESSIONS_DIRNAME: string = "sessions";
/** The directory of child sessions inside a session. */
export const CHILDREN_DIRNAME: string = "children";
/** The prefix of a session directory being built; readers ignore such entries. */
export const STAGING_PREFIX: string = ".staging-";

/**
 * The session id of a staging directory name (`.staging-<id>-<8 hex>`, as creation names it), or
 * `undefined` for any other name. The id is everything before the last `-`, so the staging
 * directory of `001_ship-it` is never taken for one of `001_ship`.
 */
export function stagingSessionId(name: string): string | undefined {
  return /^\.staging-(.+)-[0-9a-f]{8}$/.exec(name)?.[1];
}
/** The subareas of a folded attempt's raw directory. */
export const RAW_SUBAREAS: readonly string[] = [
  "protocol",
  "harness",
  "agents",
  "eval",
  "git",
  "service",
];
/** The line the repository `.gitignore` needs so raw directories are never committed. */
export const REPO_GITIGNORE_RAW_LINE: string = ".loopy_loop/sessions/**/raw/";
/** The content of a session's own `.gitignore`: it ignores `raw/`. */
export const SESSION_GITIGNORE: string =
  "# Raw attempt output is prunable mechanical noise (see prune-raw).\n" +
  "# Durable evidence lives everywhere else in this session directory.\n" +
  "raw/\n";

/** Paths of the repository-level files. */
export interface RepositoryPaths {
  /** The repository root (absolute). */
  readonly repoRoot: string;
  /** `<repo>/.loopy_loop`. */
  readonly loopyDir: string;
  /** `<repo>/.loopy_loop/repository.json`: the checkout identity, not session state. */
  readonly repositoryJson: string;
  /** `<repo>/.loopy_loop/sessions`. */
  readonly sessionsRoot: string;
  /** `<repo>/.loopy_loop/traces` (mirror layout only). */
  readonly tracesRoot: string;
  /** `<repo>/.loopy_loop/trace_finalization_outbox` (mirror layout only). */
  readonly traceFinalizationOutbox: string;
  /** `<repo>/.gitignore`. */
  readonly gitignore: string;
}

/**
 * The repository-level paths of `repoRoot`, which must be an absolute path (the port's paths
 * are): anything else is a `LayoutOptionError` naming `repoRoot`, on every adapter alike (a real
 * filesystem would otherwise resolve it against the process's current directory).
 */
export function repositoryPaths(repoRoot: string): RepositoryPaths {
  if (typeof repoRoot !== "string" || !isAbsolute(repoRoot)) {
    throw new LayoutOptionError(
      "repoRoot",
      repoRoot,
      "The repository root must be an absolute path",
    );
  }
  const loopyDir = join(repoRoot, LOOPY_DIRNAME);
  return {
    repoRoot,
    loopyDir,
    repositoryJson: join(loopyDir, "repository.json"),
    sessionsRoot: join(loopyDir, SESSIONS_DIRNAME),
    tracesRoot: join(loopyDir, "traces"),
    traceFinalizationOutbox: join(loopyDir, "trace_finalization_outbox"),
    gitignore: join(repoRoot, ".gitignore"),
  };
}

/** The git receipt phases. */
export type GitPhase = "before" | "after";

/**
 * Every path of one session directory, for its recorded layout. Construct it with the layout
 * read from `session.json` (see `readSessionLayout`), never from the directory's name.
 */
export class SessionPaths {
  /** The session directory (absolute). */
  readonly dir: string;
  /** The layout the paths are built for. */
  readonly layout: SessionLayout;
  /** `.gitignore` (ignores `raw/`). */
  readonly gitignore: string;
  /** `session.json`: the immutable manifest. */
  readonly sessionJson: string;
  /** `parent.json` (children only). */
  readonly parentJson: string;
  /** `state.json`: the engine's scheduling source of truth. */
  readonly stateJson: string;
  /** `events.jsonl`: the best-effort observability stream. */
  readonly eventsJsonl: string;
  /** `goal.md`. */
  readonly goalMd: string;
  /** `goal_contract.json`. */
  readonly goalContractJson: string;
  /** `workflow_contract.json`. */
  readonly workflowContractJson: string;
  /** `workflow_roster.json`. */
  readonly workflowRosterJson: string;
  /** `harness_capability_roster.json` (present at the root only). */
  readonly harnessCapabilityRosterJson: string;
  /** `control.json`. */
  readonly controlJson: string;
  /** `session_outcome.json` (after a terminal transition). */
  readonly sessionOutcomeJson: string;
  /** `project_state/`. */
  readonly projectStateDir: string;
  /** `project_state/plan.md`. */
  readonly planMd: string;
  /** `project_state/tasks/`. */
  readonly tasksDir: string;
  /** `project_state/current_state.md`. */
  readonly currentStateMd: string;
  /** `project_state/decisions/`. */
  readonly decisionsDir: string;
  /** `project_state/finished.md`. */
  readonly finishedMd: string;
  /** `project_state/eval_state.md`. */
  readonly evalStateMd: string;
  /** `project_state/handoff.json`. */
  readonly handoffJson: string;
  /** `inputs/`. */
  readonly inputsDir: string;
  /** `inputs/user_updates.jsonl`. */
  readonly userUpdatesJsonl: string;
  /**
   * `updates_from_user.md`: created empty, as the engine creates it in every layout (its
   * semantics belong to the frozen version-1 and version-2 protocols).
   */
  readonly updatesFromUserMd: string;
  /** `inputs/accepted_request.json` (children only). */
  readonly acceptedRequestJson: string;
  /** `inputs/artifacts/`. */
  readonly inputArtifactsDir: string;
  /** `iterations/`. */
  readonly iterationsDir: string;
  /** `raw/` (folded only). */
  readonly rawDir: string;
  /** The directory of git receipts: `receipts/` (folded) or `git_receipts/` (mirror). */
  readonly gitReceiptsDir: string;
  /** The directory of delivery receipts: `receipts/` (folded) or `delivery_receipts/` (mirror). */
  readonly deliveryReceiptsDir: string;
  /** `eval_checks/`. */
  readonly evalChecksDir: string;
  /** `eval_receipts/`. */
  readonly evalReceiptsDir: string;
  /** `eval_receipts/accepted/`. */
  readonly evalReceiptsAcceptedDir: string;
  /** `child_requests/`. */
  readonly childRequestsDir: string;
  /** `child_requests/pending/`. */
  readonly childRequestsPendingDir: string;
  /** `child_requests/accepted/`. */
  readonly childRequestsAcceptedDir: string;
  /** `child_requests/rejected/`. */
  readonly childRequestsRejectedDir: string;
  /** `children.json`. */
  readonly childrenJson: string;
  /** `child_outcomes/`. */
  readonly childOutcomesDir: string;
  /** `parent_acceptance/`. */
  readonly parentAcceptanceDir: string;
  /** `control_rejected/`. */
  readonly controlRejectedDir: string;
  /** `protocol_failures/`. */
  readonly protocolFailuresDir: string;
  /** `children/`. */
  readonly childrenDir: string;
  /** `trace_seals/` (mirror only). */
  readonly traceSealsDir: string;
  /** `harness_outputs/` (mirror only). */
  readonly harnessOutputsDir: string;
  /** `eval_readiness/` (mirror sessions below protocol 3 only). */
  readonly evalReadinessDir: string;

  /** Builds the paths of the session at `dir` with the recorded `layout`. */
  constructor(dir: string, layout: SessionLayout) {
    this.dir = dir;
    this.layout = layout;
    const at = (...parts: string[]): string => join(dir, ...parts);
    this.gitignore = at(".gitignore");
    this.sessionJson = at("session.json");
    this.parentJson = at("parent.json");
    this.stateJson = at("state.json");
    this.eventsJsonl = at("events.jsonl");
    this.goalMd = at("goal.md");
    this.goalContractJson = at("goal_contract.json");
    this.workflowContractJson = at("workflow_contract.json");
    this.workflowRosterJson = at("workflow_roster.json");
    this.harnessCapabilityRosterJson = at("harness_capability_roster.json");
    this.controlJson = at("control.json");
    this.sessionOutcomeJson = at("session_outcome.json");
    this.projectStateDir = at("project_state");
    this.planMd = at("project_state", "plan.md");
    this.tasksDir = at("project_state", "tasks");
    this.currentStateMd = at("project_state", "current_state.md");
    this.decisionsDir = at("project_state", "decisions");
    this.finishedMd = at("project_state", "finished.md");
    this.evalStateMd = at("project_state", "eval_state.md");
    this.handoffJson = at("project_state", "handoff.json");
    this.inputsDir = at("inputs");
    this.userUpdatesJsonl = at("inputs", "user_updates.jsonl");
    this.updatesFromUserMd = at("updates_from_user.md");
    this.acceptedRequestJson = at("inputs", "accepted_request.json");
    this.inputArtifactsDir = at("inputs", "artifacts");
    this.iterationsDir = at("iterations");
    this.rawDir = at("raw");
    this.gitReceiptsDir = layout === "folded" ? at("receipts") : at("git_receipts");
    this.deliveryReceiptsDir = layout === "folded" ? at("receipts") : at("delivery_receipts");
    this.evalChecksDir = at("eval_checks");
    this.evalReceiptsDir = at("eval_receipts");
    this.evalReceiptsAcceptedDir = at("eval_receipts", "accepted");
    this.childRequestsDir = at("child_requests");
    this.childRequestsPendingDir = at("child_requests", "pending");
    this.childRequestsAcceptedDir = at("child_requests", "accepted");
    this.childRequestsRejectedDir = at("child_requests", "rejected");
    this.childrenJson = at("children.json");
    this.childOutcomesDir = at("child_outcomes");
    this.parentAcceptanceDir = at("parent_acceptance");
    this.controlRejectedDir = at("control_rejected");
    this.protocolFailuresDir = at("protocol_failures");
    this.childrenDir = at(CHILDREN_DIRNAME);
    this.traceSealsDir = at("trace_seals");
    this.harnessOutputsDir = at("harness_outputs");
    this.evalReadinessDir = at("eval_readiness");
  }

  /** `children/<childId>`. */
  childDir(childId: string): string {
    return join(this.childrenDir, component(childId, "child session id"));
  }

  /** `child_requests/pending/<requestId>.json`. */
  pendingRequest(requestId: string): string {
    return join(this.childRequestsPendingDir, `${component(requestId, "request id")}.json`);
  }

  /** `child_requests/accepted/<requestId>.json`. */
  acceptedRequest(requestId: string): string {
    return join(this.childRequestsAcceptedDir, `${component(requestId, "request id")}.json`);
  }

  /** `child_outcomes/<requestId>.json`. */
  childOutcome(requestId: string): string {
    return join(this.childOutcomesDir, `${component(requestId, "request id")}.json`);
  }

  /** `parent_acceptance/<requestId>.json`. */
  parentAcceptance(requestId: string): string {
    return join(this.parentAcceptanceDir, `${component(requestId, "request id")}.json`);
  }

  /** `eval_receipts/<evalId>.json`. */
  evalReceipt(evalId: string): string {
    return join(this.evalReceiptsDir, `${component(evalId, "eval id")}.json`);
  }

  /** `eval_receipts/accepted/<evalId>.json`: the engine-owned acceptance sidecar. */
  evalAcceptedSidecar(evalId: string): string {
    return join(this.evalReceiptsAcceptedDir, `${component(evalId, "eval id")}.json`);
  }

  /** The delivery receipt `name` (in `receipts/` when folded). */
  deliveryReceipt(name: string): string {
    return join(this.deliveryReceiptsDir, component(name, "receipt name"));
  }

  /** `trace_seals/<attemptId>.json`: a mirror attempt's seal receipt. */
  traceSealReceipt(attemptId: string): string {
    return join(this.traceSealsDir, `${component(attemptId, "attempt id")}.json`);
  }

  /** The paths of one attempt's iteration (`iterations/<NNNN>_<workflow>`). */
  attempt(iteration: number, workflowId: string): AttemptPaths {
    return new AttemptPaths(this, iteration, workflowId);
  }
}

/**
 * The durable iteration directory name of an attempt: the iteration zero-padded to at least four
 * digits, `_`, the workflow id (`0026_outer`).
 */
export function iterationName(iteration: number, workflowId: string): string {
  if (!Number.isSafeInteger(iteration) || iteration < 0) {
    throw new LayoutError(`Iteration must be a non-negative integer: ${iteration}`);
  }
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(workflowId)) {
    throw new LayoutError(`Workflow id is not a safe id: ${JSON.stringify(workflowId)}`);
  }
  return `${String(iteration).padStart(4, "0")}_${workflowId}`;
}

/**
 * The git receipt file name of an attempt (`0026_outer_git_after.json` when folded,
 * `git-after-<attempt_id>.json` when mirror). The phase, the iteration, the workflow id and the
 * attempt id are all checked (the attempt id must be one safe path component in both layouts).
 */
export function gitReceiptFilename(
  layout: SessionLayout,
  phase: GitPhase,
  attempt: { readonly iteration: number; readonly workflowId: string; readonly attemptId: string },
): string {
  if (phase !== "before" && phase !== "after") {
    throw new LayoutError(`Git receipt phase must be before or after: ${JSON.stringify(phase)}`);
  }
  const attemptId = component(attempt.attemptId, "attempt id");
  return layout === "folded"
    ? `${iterationName(attempt.iteration, attempt.workflowId)}_git_${phase}.json`
    : `git-${phase}-${attemptId}.json`;
}

/** Paths of one attempt: the durable iteration directory and, when folded, its raw directory. */
export class AttemptPaths {
  /** The session's paths. */
  readonly session: SessionPaths;
  /** The iteration number. */
  readonly iteration: number;
  /** The workflow id. */
  readonly workflowId: string;
  /** `<NNNN>_<workflow>`. */
  readonly name: string;
  /** `iterations/<NNNN>_<workflow>/`. */
  readonly iterationDir: string;
  /** `iterations/<NNNN>_<workflow>/prompt.txt`. */
  readonly promptTxt: string;
  /** `iterations/<NNNN>_<workflow>/paths.json`. */
  readonly pathsJson: string;
  /** `iterations/<NNNN>_<workflow>/result.json`. */
  readonly resultJson: string;
  /** `iterations/<NNNN>_<workflow>/result_text.txt`. */
  readonly resultTextTxt: string;
  /** `iterations/<NNNN>_<workflow>/harness_run_id.txt`. */
  readonly harnessRunIdTxt: string;
  /** `iterations/<NNNN>_<workflow>/trace_ref.json`. */
  readonly traceRefJson: string;
  /** `iterations/<NNNN>_<workflow>/goal_check.json` (optional legacy projection). */
  readonly goalCheckJson: string;
  /** `iterations/<NNNN>_<workflow>/workflow_snapshot/`. */
  readonly workflowSnapshotDir: string;
  /** `raw/<NNNN>_<workflow>/` (folded). */
  readonly rawDir: string;
  /** `raw/<NNNN>_<workflow>` relative to the session directory. */
  readonly rawRelative: string;
  /** `session:/raw/<NNNN>_<workflow>`. */
  readonly rawRef: string;

  /** Builds the attempt paths of `iteration` / `workflowId` in `session`. */
  constructor(session: SessionPaths, iteration: number, workflowId: string) {
    this.session = session;
    this.iteration = iteration;
    this.workflowId = workflowId;
    this.name = iterationName(iteration, workflowId);
    this.iterationDir = join(session.iterationsDir, this.name);
    this.promptTxt = join(this.iterationDir, "prompt.txt");
    this.pathsJson = join(this.iterationDir, "paths.json");
    this.resultJson = join(this.iterationDir, "result.json");
    this.resultTextTxt = join(this.iterationDir, "result_text.txt");
    this.harnessRunIdTxt = join(this.iterationDir, "harness_run_id.txt");
    this.traceRefJson = join(this.iterationDir, "trace_ref.json");
    this.goalCheckJson = join(this.iterationDir, "goal_check.json");
    this.workflowSnapshotDir = join(this.iterationDir, "workflow_snapshot");
    this.rawRelative = `raw/${this.name}`;
    this.rawDir = join(session.dir, this.rawRelative);
    this.rawRef = `session:/${this.rawRelative}`;
  }

  /** `iterations/<NNNN>_<workflow>/workflow_snapshot/<attemptId>/`. */
  snapshotDir(attemptId: string): string {
    return join(this.workflowSnapshotDir, component(attemptId, "attempt id"));
  }

  /** `raw/<NNNN>_<workflow>/<subarea>/`. */
  rawSubarea(subarea: string): string {
    return join(this.rawDir, component(subarea, "raw subarea"));
  }

  /** `session:/raw/<NNNN>_<workflow>/eval/report.json`: the raw eval report of this attempt. */
  get evalReportRef(): string {
    return `${this.rawRef}/eval/report.json`;
  }

  /** The git receipt path of this attempt (folded: `receipts/<NNNN>_<workflow>_git_<phase>.json`). */
  gitReceipt(phase: GitPhase, attemptId: string): string {
    return join(
      this.session.gitReceiptsDir,
      gitReceiptFilename(this.session.layout, phase, {
        iteration: this.iteration,
        workflowId: this.workflowId,
        attemptId,
      }),
    );
  }

  /** The logical reference of this attempt's git receipt (`session:/receipts/…`). */
  gitReceiptRef(phase: GitPhase, attemptId: string): string {
    const dir = this.session.layout === "folded" ? "receipts" : "git_receipts";
    const file = gitReceiptFilename(this.session.layout, phase, {
      iteration: this.iteration,
      workflowId: this.workflowId,
      attemptId,
    });
    return `session:/${dir}/${file}`;
  }
}

/** `<repo>/.loopy_loop/traces/<root>/sessions/<session>/attempts/<attempt>` (mirror only). */
export function mirrorAttemptTraceDir(
  repoRoot: string,
  rootSessionId: string,
  sessionId: string,
  attemptId: string,
): string {
  return join(
    repositoryPaths(repoRoot).tracesRoot,
    component(rootSessionId, "root session id"),
    "sessions",
    component(sessionId, "session id"),
    "attempts",
    component(attemptId, "attempt id"),
  );
}

/**
 * Refuses paths built for another layout than the one the session's `session.json` records
 * (`recorded`, from `readSessionLayout`): the writers that apply to both layouts (attempt
 * results, session outcomes) decide by the layout where they write and what a record may cite,
 * so a caller's guess never shapes a record that is written once.
 *
 * @throws {UnsupportedLayoutError} When the paths' layout is not the recorded one.
 */
export function requireRecordedLayout(session: SessionPaths, recorded: SessionLayout): void {
  if (session.layout !== recorded) {
    throw new UnsupportedLayoutError(
      session.dir,
      `session.json records the ${recorded} layout, but the paths were built for the ` +
        `${session.layout} layout; build them with openSessionPaths or loadSessionTree`,
    );
  }
}

/**
 * Refuses a folded-only write (attempt artifacts, git receipts, eval acceptance) to a mirror
 * session: this library never creates mirror-layout artifacts. A mirror session still finishes
 * under its own layout through the writers that apply to both layouts (state, events, results,
 * outcomes).
 *
 * `recorded` is the layout the session's `session.json` records (`readSessionLayout`): the
 * writers pass it, so a `SessionPaths` built as folded for a session that records another layout
 * is refused too. Without it only the paths' own layout is checked (no file is read).
 *
 * @throws {UnsupportedLayoutError} For a mirror session, or paths built for another layout than
 * the recorded one.
 */
export function requireFolded(session: SessionPaths, recorded?: SessionLayout): void {
  if (session.layout !== "folded") {
    throw new UnsupportedLayoutError(session.dir, "Mirror sessions are read-only in this library");
  }
  if (recorded !== undefined && recorded !== "folded") {
    throw new UnsupportedLayoutError(
      session.dir,
      `Mirror sessions are read-only in this library: session.json records the ${recorded} ` +
        "layout, whatever layout the paths were built for",
    );
  }
}
