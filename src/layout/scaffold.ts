/**
 * Creation of folded sessions: the repository files (`.loopy_loop/repository.json` and the
 * `.gitignore` line for raw directories), a root session, and a child session. Every session is
 * built complete in a `.staging-<id>-<8hex>` sibling, made durable, and renamed into place, so a
 * crash leaves either no session directory or a complete one; readers ignore staging leftovers.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { AlreadyExists, FsError, NotADirectory, NotFound } from "../port/errors.ts";
import {
  atomicReplace,
  type Durability,
  ensureDirDurable,
  ensurePrivateDir,
  PRIVATE_DIR_MODE,
  PRIVATE_FILE_MODE,
  readDirIfExists,
  stagedPublish,
  syncTree,
} from "../port/durable.ts";
import { join } from "../port/path.ts";
import { readSessionFile } from "../port/regular.ts";
import { LayoutError, LayoutRecordError, UnconfirmedPublishError } from "./errors.ts";
import {
  assertSessionId,
  checkNextOrdinal,
  formatSessionId,
  highestOrdinal,
  nextOrdinal,
  ordinalReservationName,
  ROOT_ORDINAL_WIDTH,
  slugify,
} from "./ids.ts";
import {
  encodeJson,
  encodeRecord,
  encodeText,
  ensureRecordDurable,
  type JsonObject,
  readRecord,
  readRecordIfExists,
  sha256Ref,
  utcSeconds,
  writeJsonAtomic,
} from "./json_io.ts";
import {
  LOOPY_DIRNAME,
  REPO_GITIGNORE_RAW_LINE,
  repositoryPaths,
  SESSION_GITIGNORE,
  SessionPaths,
  STAGING_PREFIX,
  stagingSessionId,
} from "./paths.ts";
import {
  ACCEPTED_REQUEST_REF,
  type ChildRequest,
  type FrozenInput,
  NEUTRAL_CONTROL,
  parseChildrenLedger,
  parseControlRecord,
  parseGoalContract,
  parseHandoff,
  parseParentManifest,
  parseRepositoryRecord,
  parseSessionManifest,
  parseSessionState,
  type RepositoryRecord,
  type SessionManifest,
} from "./records.ts";
import { initialSessionState } from "./state.ts";
import { nestedIdentity } from "./_nesting.ts";
import {
  type LayoutWriteOptions,
  type ResolvedWriteOptions,
  resolveWriteOptions,
} from "./options.ts";
import { confined } from "./no_links.ts";
import { serializedOn } from "./serial.ts";
import { sessionIdsInUse } from "./_session_ids.ts";
import { pyRstrip, pySplitlines, pyStrip } from "./_py_text.ts";

// ---------------------------------------------------------------------------------------------
// Repository

/**
 * Creates `.loopy_loop/repository.json` (the checkout identity) when missing and adds the
 * line that ignores every session's raw directory (`REPO_GITIGNORE_RAW_LINE`) to the repository
 * `.gitignore` when it is not there: appended after its bytes as they are, with its mode kept
 * (0644 when new); a `.gitignore` that is not a regular file (a symlink) is left untouched.
 * Idempotent; returns the repository record.
 *
 * Concurrent calls for one repository in this process run one after another (serialized on the
 * canonical path of `repository.json`), so they all return the one identity
 * the first of them wrote, whatever spelling of the repository each was given.
 */
export async function ensureRepository(
  fs: FileSystem,
  repoRoot: string,
  options: LayoutWriteOptions = {},
): Promise<RepositoryRecord> {
  const resolved = resolveWriteOptions(options);
  const paths = repositoryPaths(repoRoot);
  await ensurePrivateDir(fs, paths.loopyDir, resolved.durability);
  return await serializedOn(fs, paths.repositoryJson, async () => {
    await ensureGitignoreLine(fs, paths.gitignore, REPO_GITIGNORE_RAW_LINE, resolved.durability);
    const existing = await readRecordIfExists(fs, paths.repositoryJson, parseRepositoryRecord);
    if (existing !== undefined) {
      // Written already, maybe by a call that failed before its directory's fsync.
      await ensureRecordDurable(fs, paths.repositoryJson, resolved.durability);
      return existing.record;
    }
    const record = parseRepositoryRecord({
      schema_version: 1,
      repository_id: resolved.uuidHex(),
      created_at: utcSeconds(resolved.now()),
    }, paths.repositoryJson);
    await writeJsonAtomic(fs, paths.repositoryJson, record, resolved.durability);
    return record;
  });
}

async function ensureGitignoreLine(
  fs: FileSystem,
  file: string,
  line: string,
  durability: Durability,
): Promise<void> {
  // The repository's .gitignore is the user's file: one that is not a regular file (a link to a
  // shared ignore file, say) is left as it is, never replaced (every session's own .gitignore
  // ignores its raw/ anyway); a regular one keeps its bytes (whatever their encoding) and mode,
  // and gets the line appended.
  let info;
  try {
    info = await fs.lstat(file);
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
  }
  if (info !== undefined && info.kind !== "file") return;
  let existing: Uint8Array | undefined;
  if (info !== undefined) {
    // Read only as a regular file (one swapped for a FIFO is never waited on): what else is
    // there now is left as it is.
    const found = await readSessionFile(fs, file, true);
    if (typeof found === "string") return;
    existing = found;
  }
  const text = existing === undefined ? "" : new TextDecoder().decode(existing);
  if (text.split(/\r?\n/).some((l) => l.trim() === line)) {
    return await ensureRecordDurable(fs, file, durability);
  }
  const before = existing ?? new Uint8Array(0);
  const separator = before.length === 0 || before[before.length - 1] === 0x0a ? "" : "\n";
  const added = encodeText(`${separator}${line}\n`);
  const bytes = new Uint8Array(before.length + added.length);
  bytes.set(before);
  bytes.set(added, before.length);
  // A new file gets 0644 (as the umask allows); an existing one exactly the mode it had.
  const mode = info === undefined ? 0o644 : info.mode;
  await atomicReplace(fs, file, bytes, { mode, durability, exactMode: info !== undefined });
}

// ---------------------------------------------------------------------------------------------
// Session contents

/** The goal criteria frozen into `goal_contract.json`. */
export interface GoalCriteria {
  /** When the goal is met. */
  readonly completionCriteria?: readonly string[] | undefined;
  /** When to stop. */
  readonly stopCriteria?: readonly string[] | undefined;
  /** Constraints. */
  readonly constraints?: readonly string[] | undefined;
  /** Deliverables. */
  readonly deliverables?: readonly string[] | undefined;
  /** Evidence that must exist. */
  readonly requiredEvidence?: readonly string[] | undefined;
}

/** The frozen role contracts of a session (opaque JSON to this library). */
export interface SessionContracts {
  /** The workflow set. */
  readonly workflowSet: string;
  /** `workflow_contract.json`: roles and authorities. */
  readonly workflowContract: JsonObject;
  /** `workflow_roster.json`: every scheduled role. */
  readonly workflowRoster: JsonObject;
}

/** A session that was created. */
export interface CreatedSession {
  /** The id, derived once at creation. */
  readonly sessionId: string;
  /** The published directory. */
  readonly dir: string;
  /** Its paths (folded). */
  readonly paths: SessionPaths;
  /** Its manifest. */
  readonly manifest: SessionManifest;
}

/** Directories every folded session has, relative to the session directory. */
export const SCAFFOLD_DIRECTORIES: readonly string[] = [
  "project_state",
  "project_state/tasks",
  "project_state/decisions",
  "inputs",
  "inputs/artifacts",
  "iterations",
  "raw",
  "receipts",
  "eval_checks",
  "eval_receipts",
  "child_requests",
  "child_requests/pending",
  "child_requests/accepted",
  "child_requests/rejected",
  "child_outcomes",
  "parent_acceptance",
  "control_rejected",
  "protocol_failures",
  "children",
];

/** Files every folded session has, relative to the session directory. */
export const SCAFFOLD_FILES: readonly string[] = [
  ".gitignore",
  "session.json",
  "state.json",
  "events.jsonl",
  "goal_contract.json",
  "workflow_contract.json",
  "workflow_roster.json",
  "control.json",
  "children.json",
  "project_state/plan.md",
  "project_state/current_state.md",
  "project_state/finished.md",
  "project_state/eval_state.md",
  "project_state/handoff.json",
  "inputs/user_updates.jsonl",
];

/** Files only a root session has. */
export const ROOT_ONLY_FILES: readonly string[] = ["harness_capability_roster.json"];
/** Files only a child session has. */
export const CHILD_ONLY_FILES: readonly string[] = ["parent.json", "inputs/accepted_request.json"];

/**
 * The scaffold entries missing from a session directory (relative paths; empty when complete).
 * `kind` selects the root-only or child-only files.
 */
export async function missingScaffoldEntries(
  fs: FileSystem,
  sessionDir: string,
  kind: "root" | "child",
): Promise<string[]> {
  fs = confined(fs, sessionDir);
  const missing: string[] = [];
  const files = [...SCAFFOLD_FILES, ...(kind === "root" ? ROOT_ONLY_FILES : CHILD_ONLY_FILES)];
  for (
    const [relative, expected] of [
      ...SCAFFOLD_DIRECTORIES.map((d) => [d, "directory"] as const),
      ...files.map((f) => [f, "file"] as const),
    ]
  ) {
    try {
      if ((await fs.lstat(join(sessionDir, relative))).kind !== expected) missing.push(relative);
    } catch (error) {
      // Under a file (a scaffold directory replaced by one), the entry is missing too.
      if (!(error instanceof NotFound || error instanceof NotADirectory)) throw error;
      missing.push(relative);
    }
  }
  return missing;
}

/** The `project_state/plan.md` scaffold. */
export function planScaffold(layerGoal: string): string {
  return [
    "# Layer Plan",
    "",
    "- Revision: 0",
    `- Layer goal: ${layerGoal}`,
    "- Current milestone: none",
    "",
    "## Outcomes",
    "",
    "| ID | Outcome | Status | Dependencies | Evidence |",
    "| --- | --- | --- | --- | --- |",
    "",
    "## Active selection",
    "",
    "No leaf or child outcome is selected yet.",
    "",
    "## Risks, assumptions, and replanning triggers",
    "",
    "None recorded yet.",
    "",
  ].join("\n");
}

const CURRENT_STATE_SCAFFOLD = [
  "# Current State",
  "",
  "- Current outcome: none selected",
  "- Active leaf or child: none",
  "- Blockers: none recorded",
  "- Risks: none recorded",
  "- Next decision: initialize the layer plan",
  "",
].join("\n");
const EVAL_STATE_SCAFFOLD =
  "# Evaluation State\n\nNo evaluation has been created or run for this layer.\n";
const FINISHED_SCAFFOLD = "# Finished Work\n";
const HANDOFF_SCAFFOLD_SUMMARY = "No orchestrator handoff has been published yet.";

/** A declared parent input to freeze into a child: its tree-wide reference and exact bytes. */
export interface InputToFreeze {
  /** `repo:/…` or `session:<id>:/…`. */
  readonly sourceRef: string;
  /** The exact bytes. */
  readonly bytes: Uint8Array;
}

interface ScaffoldSpec {
  readonly sessionId: string;
  readonly rootSessionId: string;
  readonly parentSessionId: string | null;
  readonly depth: number;
  readonly goal: string;
  readonly layerKind: string;
  readonly criteria: GoalCriteria;
  readonly contracts: SessionContracts;
  readonly harnessCapabilityRoster: JsonObject | undefined;
  readonly harnessCapabilityRosterSha256: string | undefined;
  readonly origin: JsonObject;
  readonly child:
    | {
      readonly request: ChildRequest;
      readonly requestBytes: Uint8Array;
      readonly inputs: readonly InputToFreeze[];
    }
    | undefined;
}

async function writeNew(fs: FileSystem, path: string, bytes: Uint8Array): Promise<void> {
  await fs.writeFile(path, bytes, { mode: PRIVATE_FILE_MODE, createNew: true });
}

/**
 * Writes the complete scaffold of a session into `dir` (a fresh staging directory). A record that
 * cannot be written is refused naming its file in `finalDir`, where the session is published:
 * the staging directory is removed before the error reaches the caller.
 */
async function writeScaffold(
  fs: FileSystem,
  dir: string,
  finalDir: string,
  spec: ScaffoldSpec,
  options: ResolvedWriteOptions,
): Promise<SessionManifest> {
  const paths = new SessionPaths(dir, "folded");
  const named = new SessionPaths(finalDir, "folded");
  const createdAt = utcSeconds(options.now());
  const hash = (bytes: Uint8Array): string => sha256Ref(bytes, options.sha256);
  for (const relative of SCAFFOLD_DIRECTORIES) {
    await fs.mkdir(join(dir, relative), { mode: PRIVATE_DIR_MODE });
  }
  const goalHash = hash(encodeText(spec.goal));

  const frozen: FrozenInput[] = [];
  let acceptedRequestSha256: string | null = null;
  if (spec.child !== undefined) {
    await writeNew(fs, paths.acceptedRequestJson, spec.child.requestBytes);
    acceptedRequestSha256 = hash(spec.child.requestBytes);
    let index = 0;
    for (const input of spec.child.inputs) {
      index++;
      const digest = hash(input.bytes);
      const name = `input-${String(index).padStart(4, "0")}-${digest.slice(7, 19)}.artifact`;
      await writeNew(fs, join(paths.inputArtifactsDir, name), input.bytes);
      frozen.push({
        source_ref: input.sourceRef,
        sha256: digest,
        frozen_ref: `session:/inputs/artifacts/${name}`,
        size: input.bytes.length,
      });
    }
  }
  const criteria = spec.criteria;
  const goalContract = {
    schema_version: 1,
    session_id: spec.sessionId,
    goal: spec.goal,
    goal_hash: goalHash,
    completion_criteria: criteria.completionCriteria ?? [],
    stop_criteria: criteria.stopCriteria ?? [],
    constraints: criteria.constraints ?? [],
    deliverables: criteria.deliverables ?? [],
    required_evidence: criteria.requiredEvidence ?? [],
    terminal_blocker_policy_ref: `workflow:${spec.contracts.workflowSet}`,
    origin_request_id: spec.child?.request.request_id ?? null,
    accepted_request_ref: spec.child === undefined ? null : ACCEPTED_REQUEST_REF,
    accepted_request_sha256: acceptedRequestSha256,
    inputs: frozen,
    created_at: createdAt,
  };
  const goalContractBytes = encodeRecord(
    parseGoalContract(goalContract, named.goalContractJson),
    named.goalContractJson,
  );
  await writeNew(fs, paths.goalContractJson, goalContractBytes);
  const contractBytes = encodeRecord(spec.contracts.workflowContract, named.workflowContractJson);
  await writeNew(fs, paths.workflowContractJson, contractBytes);
  const rosterBytes = encodeRecord(spec.contracts.workflowRoster, named.workflowRosterJson);
  await writeNew(fs, paths.workflowRosterJson, rosterBytes);
  let harnessSha256 = spec.harnessCapabilityRosterSha256;
  if (spec.harnessCapabilityRoster !== undefined) {
    const bytes = encodeRecord(spec.harnessCapabilityRoster, named.harnessCapabilityRosterJson);
    await writeNew(fs, paths.harnessCapabilityRosterJson, bytes);
    harnessSha256 = hash(bytes);
  }
  if (harnessSha256 === undefined) {
    throw new LayoutError("A session needs the root's harness capability roster hash");
  }

  const origin: JsonObject = spec.child === undefined ? spec.origin : {
    ...spec.origin,
    frozen_inputs: frozen.map((input) => input.frozen_ref),
  };
  const manifest: SessionManifest = {
    schema_version: 2,
    session_id: spec.sessionId,
    root_session_id: spec.rootSessionId,
    parent_session_id: spec.parentSessionId,
    depth: spec.depth,
    workflow_set: spec.contracts.workflowSet,
    layer_kind: spec.layerKind,
    goal_hash: goalHash,
    goal_contract_hash: hash(goalContractBytes),
    workflow_contract_hash: hash(contractBytes),
    layout: "folded",
    session_uuid: options.uuidHex(),
    origin,
    created_at: createdAt,
  };
  await writeNew(
    fs,
    paths.sessionJson,
    encodeJson(parseSessionManifest(manifest, named.sessionJson)),
  );
  if (spec.parentSessionId !== null) {
    const parentManifest = parseParentManifest({
      schema_version: 1,
      parent_session_id: spec.parentSessionId,
      parent_relative_path: "../..",
      created_at: createdAt,
    }, named.parentJson);
    await writeNew(fs, paths.parentJson, encodeJson(parentManifest));
  }
  const state = initialSessionState({
    sessionId: spec.sessionId,
    rootSessionId: spec.rootSessionId,
    createdAt,
    workflowContract: spec.contracts.workflowContract,
    workflowContractSha256: hash(contractBytes),
    workflowRosterSha256: hash(rosterBytes),
    harnessCapabilityRosterSha256: harnessSha256,
  });
  parseSessionState(state, named.stateJson);
  // Held to the depth its readers hold it to (it embeds the workflow contract one level down), so
  // a contract too deep for it is refused here, in staging, never published.
  await writeNew(fs, paths.stateJson, encodeRecord(state, named.stateJson));
  await writeNew(fs, paths.gitignore, encodeText(SESSION_GITIGNORE));
  await writeNew(fs, paths.eventsJsonl, new Uint8Array());
  if (spec.goal !== "") await writeNew(fs, paths.goalMd, encodeText(`${pyRstrip(spec.goal)}\n`));
  // Checked, then written in the engine's own key order (the schema's output orders them by its
  // fields).
  parseControlRecord(NEUTRAL_CONTROL, named.controlJson);
  await writeNew(fs, paths.controlJson, encodeJson(NEUTRAL_CONTROL));
  const ledger = parseChildrenLedger(
    { schema_version: 2, parent_session_id: spec.sessionId, revision: 0, children: [] },
    named.childrenJson,
  );
  await writeNew(fs, paths.childrenJson, encodeRecord(ledger, named.childrenJson));
  const layerGoal = pyStrip(spec.goal) === ""
    ? goalHash
    : pySplitlines(pyStrip(spec.goal)).join(" ");
  await writeNew(fs, paths.planMd, encodeText(planScaffold(layerGoal)));
  await writeNew(fs, paths.currentStateMd, encodeText(CURRENT_STATE_SCAFFOLD));
  await writeNew(fs, paths.finishedMd, encodeText(FINISHED_SCAFFOLD));
  await writeNew(fs, paths.evalStateMd, encodeText(EVAL_STATE_SCAFFOLD));
  await writeNew(
    fs,
    paths.handoffJson,
    encodeJson(parseHandoff({
      schema_version: 1,
      session_id: spec.sessionId,
      goal_sha256: goalHash,
      revision: 0,
      producer: null,
      summary: HANDOFF_SCAFFOLD_SUMMARY,
      accepted_outcomes: [],
      open_work: [],
      risks: [],
      decision_refs: [],
      evidence_refs: [],
      delivery_refs: [],
      eval_refs: [],
      updated_at: createdAt,
    }, named.handoffJson)),
  );
  await writeNew(fs, paths.userUpdatesJsonl, new Uint8Array());
  // Created as the engine creates it, but not one of `SCAFFOLD_FILES`: sessions this library
  // created before it did lack it, and nothing reads it (its semantics are those of the frozen
  // version-1 and version-2 protocols).
  await writeNew(fs, paths.updatesFromUserMd, new Uint8Array());
  return manifest;
}

/**
 * Builds a session in `<scopeDir>/.staging-<id>-<8hex>` and publishes it at `<scopeDir>/<id>`.
 * A failure before the rename removes the staging directory; `AlreadyExists` from the rename
 * means another creator took the id first. A failure after the rename (the fsync of `scopeDir`)
 * leaves the session published: a root's is an `UnconfirmedPublishError` naming it (a rerun
 * would create another root); a child's is the storage error as it is, since a rerun of its
 * acceptance adopts the published child (`ensureChild`).
 */
async function buildAndPublish(
  fs: FileSystem,
  scopeDir: string,
  spec: ScaffoldSpec,
  options: ResolvedWriteOptions,
): Promise<CreatedSession> {
  await ensurePrivateDir(fs, scopeDir, options.durability);
  const finalDir = join(scopeDir, spec.sessionId);
  const stagingDir = join(
    scopeDir,
    `${STAGING_PREFIX}${spec.sessionId}-${options.uuidHex().slice(0, 8)}`,
  );
  await fs.mkdir(stagingDir, { mode: PRIVATE_DIR_MODE });
  let manifest: SessionManifest;
  let published = false;
  try {
    manifest = await writeScaffold(fs, stagingDir, finalDir, spec, options);
    // `stagedPublish` in steps, so a failure is known to come before or after the rename: the
    // tree synced, then renamed into place (`"ordered"`: its checks and the rename, no fsync),
    // then its entry in `scopeDir` synced.
    if (options.durability === "full") await syncTree(fs, stagingDir);
    await stagedPublish(fs, stagingDir, finalDir, { durability: "ordered" });
    published = true;
    await ensureDirDurable(fs, finalDir, options.durability);
  } catch (error) {
    if (published) {
      // Published, complete and visible; only its durability is unknown (a failed fsync is not
      // retried). Nothing is removed.
      if (spec.parentSessionId !== null) throw error;
      throw new UnconfirmedPublishError(spec.sessionId, finalDir, error);
    }
    // The staging directory is private to this call: remove it, then report the real failure.
    await removeStaging(fs, stagingDir);
    throw error;
  }
  return {
    sessionId: spec.sessionId,
    dir: finalDir,
    paths: new SessionPaths(finalDir, "folded"),
    manifest,
  };
}

async function removeStaging(fs: FileSystem, stagingDir: string): Promise<void> {
  try {
    await fs.remove(stagingDir, { recursive: true });
  } catch {
    // The original failure is what the caller must see. A leftover staging directory is
    // ignored by every reader and removed later by `removeStagingLeftovers`.
  }
}

/**
 * Removes `.staging-*` leftovers of interrupted creations in a scope directory (the sessions
 * root or a `children/` directory). With `sessionId`, only that session's leftovers
 * (`.staging-<sessionId>-<8 hex>`: not those of another id that begins with `<sessionId>-`).
 * Returns the names removed.
 *
 * A staging directory may also be a creation still running (here or in another process): each
 * one is first renamed to a fresh staging name of the same session and removed from there, so a
 * creation that publishes it first keeps its session whole (the rename finds nothing, and the
 * name is not reported), and one that publishes later fails instead of publishing a directory
 * being emptied.
 */
export async function removeStagingLeftovers(
  fs: FileSystem,
  scopeDir: string,
  sessionId?: string,
): Promise<string[]> {
  fs = confined(fs, scopeDir);
  const removed: string[] = [];
  for (const entry of await readDirIfExists(fs, scopeDir)) {
    const ours = sessionId === undefined
      ? entry.name.startsWith(STAGING_PREFIX)
      : stagingSessionId(entry.name) === sessionId;
    if (!ours) continue;
    const random = globalThis.crypto.randomUUID().replace(/-/g, "").slice(0, 8);
    const id = stagingSessionId(entry.name) ?? "removed";
    const aside = join(scopeDir, `${STAGING_PREFIX}${id}-${random}`);
    try {
      await fs.rename(join(scopeDir, entry.name), aside);
    } catch (error) {
      if (error instanceof NotFound) continue; // published or removed meanwhile
      throw error;
    }
    await fs.remove(aside, { recursive: true });
    removed.push(entry.name);
  }
  return removed;
}

/** Options of `createRootSession`. */
export interface CreateRootSessionOptions
  extends LayoutWriteOptions, GoalCriteria, SessionContracts {
  /** The repository root. */
  readonly repoRoot: string;
  /** The exact goal of the session. */
  readonly goal: string;
  /** `harness_capability_roster.json`, frozen at the root and shared by the tree. */
  readonly harnessCapabilityRoster: JsonObject;
  /** The layer kind; default `work`. */
  readonly layerKind?: string | undefined;
  /** Origin provenance recorded in `session.json`. */
  readonly origin?: JsonObject | undefined;
}

/**
 * Creates a root session under `.loopy_loop/sessions/` with every file and directory of the
 * folded layout, after making sure the repository files exist. The id (`NNN_<slug>`) is derived
 * here, once. Its ordinal is unique across processes too: it is reserved first by creating
 * `.loopy_loop/sessions/.ordinal-<NNN>` exclusively (a creator that loses the race chooses the
 * next ordinal), and the reservation is removed once the session is published. A reservation
 * left by a crash is a hidden entry every reader ignores; it only leaves a gap in the ordinals.
 * An ordinal whose id is already a session directory of the repository (a child's ordinal grows
 * past 99, so another tree may hold a child `100_<slug>`) or an id a `children.json` ledger
 * records is skipped too, leaving a gap: two trees that share an id cannot be resolved. So a
 * session directory of the repository that cannot be read (its ids cannot be known) fails the
 * creation with that storage error, before anything is written.
 *
 * A storage error (`FsError`) means no session was published. The one exception is a failure
 * after the session was renamed into place, at the fsync that makes its entry in `sessions/`
 * durable: the session is then published and complete, but a power loss may still take it away
 * (a failed fsync is not retried), and the call rejects with an `UnconfirmedPublishError` whose
 * `sessionId` and `dir` name it (`cause` is the storage error). Adopt that session instead of
 * calling again: a second call derives the next ordinal and creates another root for the goal.
 *
 * @example Create a root session on the memory filesystem
 * ```ts
 * import { createRootSession } from "@loop/sessions/layout";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * await fs.mkdir("/repo");
 * const session = await createRootSession(fs, {
 *   repoRoot: "/repo",
 *   goal: "Ship the ultimate memory program",
 *   workflowSet: "main",
 *   workflowContract: { orchestration: { completion_role: "outer" } },
 *   workflowRoster: { roles: ["outer"] },
 *   harnessCapabilityRoster: { coordinator: "default" },
 * });
 * if (session.sessionId !== "001_ship-the-ultimate-memory-program") {
 *   throw new Error(`unexpected id ${session.sessionId}`);
 * }
 * if (session.manifest.layout !== "folded") throw new Error("unexpected result");
 * ```
 */
export async function createRootSession(
  fs: FileSystem,
  options: CreateRootSessionOptions,
): Promise<CreatedSession> {
  const sessionsRoot = repositoryPaths(options.repoRoot).sessionsRoot; // repoRoot is absolute
  fs = confined(fs, join(options.repoRoot, LOOPY_DIRNAME));
  const resolved = resolveWriteOptions(options);
  await ensureRepository(fs, options.repoRoot, options);
  // The ordinal is chosen and published before another creation in this repository chooses.
  return await serializedOn(
    fs,
    sessionsRoot,
    () => createRoot(fs, options, sessionsRoot, resolved),
  );
}

async function createRoot(
  fs: FileSystem,
  options: CreateRootSessionOptions,
  sessionsRoot: string,
  resolved: ResolvedWriteOptions,
): Promise<CreatedSession> {
  await ensurePrivateDir(fs, sessionsRoot, resolved.durability);
  const slug = slugify(options.goal);
  // The ids of the repository's sessions (a child's ordinal grows past 99, so `100_phase-1` may
  // be a child's) and those ledgers record: two trees that share an id cannot be resolved.
  const used = await sessionIdsInUse(fs, options.repoRoot);
  // The last ordinal skipped for its id: the scan of sessions/ does not see it once its
  // reservation is removed, so the next choice is raised past it.
  let skipped = 0;
  for (let attempts = 0;; attempts++) {
    if (attempts >= MAX_ORDINAL_ATTEMPTS) {
      throw new LayoutError(
        `Could not reserve a root session ordinal in ${sessionsRoot} after ${attempts} attempts`,
      );
    }
    // The ordinal is reserved with an exclusive create: of several creators (in any process)
    // that chose the same ordinal, exactly one creates its reservation; the others choose again.
    const ordinal = Math.max(await nextOrdinal(fs, sessionsRoot), skipped + 1);
    checkNextOrdinal(ordinal, sessionsRoot);
    const reservation = ordinalReservationName(ordinal, ROOT_ORDINAL_WIDTH);
    const reservationPath = join(sessionsRoot, reservation);
    try {
      await fs.writeFile(reservationPath, new Uint8Array(), {
        mode: PRIVATE_FILE_MODE,
        createNew: true,
      });
    } catch (error) {
      if (error instanceof AlreadyExists) continue;
      throw error;
    }
    try {
      // A creator that reserved this ordinal, published its session and released the
      // reservation between our scan and our reservation is visible now: choose again.
      const published = await highestOrdinal(fs, sessionsRoot, { reservations: false });
      if (published >= ordinal) continue;
      const sessionId = formatSessionId(ordinal, ROOT_ORDINAL_WIDTH, slug);
      if (used.directories.has(sessionId) || used.recorded.has(sessionId)) {
        // Another session has the id (or a ledger promised it): the ordinal is skipped, a gap.
        skipped = ordinal;
        continue;
      }
      return await buildAndPublish(fs, sessionsRoot, {
        sessionId,
        rootSessionId: sessionId,
        parentSessionId: null,
        depth: 0,
        goal: options.goal,
        layerKind: options.layerKind ?? "work",
        criteria: options,
        contracts: options,
        harnessCapabilityRoster: options.harnessCapabilityRoster,
        harnessCapabilityRosterSha256: undefined,
        origin: options.origin ?? { kind: "operator" },
        child: undefined,
      }, resolved);
    } finally {
      // Once the session is published its directory holds the ordinal; before that (a failure)
      // the ordinal is simply skipped. A reservation left by a crash only leaves a gap.
      await removeReservation(fs, reservationPath);
    }
  }
}

/**
 * How many ordinals a root creation tries before giving up (each lost race, and each ordinal
 * skipped for an id in use, costs one).
 */
const MAX_ORDINAL_ATTEMPTS = 1000;

async function removeReservation(fs: FileSystem, path: string): Promise<void> {
  try {
    await fs.remove(path);
  } catch (error) {
    // A reservation that stays only makes the next creator skip its ordinal.
    if (!(error instanceof FsError)) throw error;
  }
}

/** Options of `createChildSession`. */
export interface CreateChildSessionOptions extends LayoutWriteOptions, SessionContracts {
  /** The parent session's directory. */
  readonly parentDir: string;
  /** The parent session's id. */
  readonly parentSessionId: string;
  /** The tree's root session id. */
  readonly rootSessionId: string;
  /** The parent's depth. */
  readonly parentDepth: number;
  /** The child's id, derived once by the caller (`createSessionId`) and recorded before this call. */
  readonly sessionId: string;
  /** The accepted request. */
  readonly request: ChildRequest;
  /** Its exact bytes (copied unchanged into `inputs/accepted_request.json`). */
  readonly requestBytes: Uint8Array;
  /** Declared parent inputs with their exact bytes. */
  readonly inputs: readonly InputToFreeze[];
  /** `sha256:` of the root's `harness_capability_roster.json` (children reference it). */
  readonly harnessCapabilityRosterSha256: string;
}

/**
 * Creates a child session at `<parent>/children/<id>` from an accepted request: the request's
 * exact bytes and every declared input are frozen into the child's `inputs/` and bound by hash
 * in its goal contract. Built in a staging directory and renamed into place.
 *
 * The parent is the session the `session.json` of `parentDir` records, whatever its layout (both
 * layouts nest children at `children/<id>`; the child itself is always folded). Before anything
 * is written, `parentSessionId`, `rootSessionId` and `parentDepth` are checked against it: one it
 * does not record is a `LayoutRecordError` naming the child's `session.json` and the field
 * (`parent_session_id`, `root_session_id`, `depth`) it would have contradicted its physical
 * parent in. A legacy v1 parent records no root or depth: a v1 root is its own root at depth 0,
 * and a v1 child has those its nesting gives it (the top-level session it is nested in through
 * `children/`, and how many levels deep), as the tree's scan derives them. A `parentDir` whose
 * `session.json` cannot be read is refused with the error reading it.
 */
export async function createChildSession(
  fs: FileSystem,
  options: CreateChildSessionOptions,
): Promise<CreatedSession> {
  assertSessionId(options.sessionId);
  fs = confined(fs, options.parentDir);
  const resolved = resolveWriteOptions(options);
  // Only `children/` is built from these paths, the same in both layouts.
  const parent = new SessionPaths(options.parentDir, "folded");
  await requireParentIdentity(fs, parent, options);
  const request = options.request;
  const acceptedSha256 = sha256Ref(options.requestBytes, resolved.sha256);
  return await buildAndPublish(fs, parent.childrenDir, {
    sessionId: options.sessionId,
    rootSessionId: options.rootSessionId,
    parentSessionId: options.parentSessionId,
    depth: options.parentDepth + 1,
    goal: request.goal,
    layerKind: request.layer_kind ?? "work",
    criteria: {
      completionCriteria: request.completion_criteria,
      stopCriteria: request.stop_criteria,
      constraints: request.constraints,
      deliverables: request.deliverables,
      requiredEvidence: request.required_evidence,
    },
    contracts: options,
    harnessCapabilityRoster: undefined,
    harnessCapabilityRosterSha256: options.harnessCapabilityRosterSha256,
    origin: {
      kind: "child_request",
      request_id: request.request_id,
      parent_attempt_id: request.origin.parent_attempt_id,
      parent_work_item_id: request.origin.parent_work_item_id ?? null,
      accepted_request_ref:
        `session:${options.parentSessionId}:/child_requests/accepted/${request.request_id}.json`,
      accepted_request_sha256: acceptedSha256,
      inputs: options.inputs.map((input) => input.sourceRef),
    },
    child: { request, requestBytes: options.requestBytes, inputs: options.inputs },
  }, resolved);
}

/**
 * Refuses (before anything is written) a child identity the parent's `session.json` does not
 * record (for a legacy v1 child parent, which records no root nor depth, the ones its nesting
 * gives): the child's `session.json` would contradict its physical parent, and the whole tree
 * would no longer load.
 */
async function requireParentIdentity(
  fs: FileSystem,
  parent: SessionPaths,
  options: CreateChildSessionOptions,
): Promise<void> {
  const manifest = (await readRecord(fs, parent.sessionJson, parseSessionManifest)).record;
  const childManifest = join(parent.childDir(options.sessionId), "session.json");
  const refuse = (field: string, value: unknown, recorded: string): never => {
    throw new LayoutRecordError(
      childManifest,
      `The child would contradict its parent (whose session.json records ${recorded})`,
      { path: field, value },
    );
  };
  if (options.parentSessionId !== manifest.session_id) {
    refuse("parent_session_id", options.parentSessionId, `the id ${manifest.session_id}`);
  }
  const [root, depth] = manifest.schema_version === 2
    ? [manifest.root_session_id, manifest.depth]
    : manifest.parent_session_id === null
    ? [manifest.session_id, 0]
    : nestedIdentity(options.parentDir);
  if (root !== undefined && options.rootSessionId !== root) {
    refuse("root_session_id", options.rootSessionId, `the root ${root}`);
  }
  if (depth !== undefined && options.parentDepth !== depth) {
    refuse("depth", options.parentDepth + 1, `depth ${depth}`);
  }
}
