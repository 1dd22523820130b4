/**
 * Receipts of a folded session. Git boundary and delivery receipts share `receipts/` with
 * self-describing names (`receipts/0026_outer_git_after.json`); the compact git receipt points at
 * its verbose status and diff in the attempt's raw `git/` subarea. Eval receipts keep
 * `eval_receipts/<eval_id>.json`; accepting one checks that its raw report and git binding are
 * those of the producing attempt, seals it in `state.json` (`accepted_eval_seals`) and writes
 * the engine-owned sidecar `eval_receipts/accepted/<eval_id>.json`, its human-readable copy.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { NotFound } from "../port/errors.ts";
import { atomicReplace, type Durability, ensurePrivateDir } from "../port/durable.ts";
import { basename, join } from "../port/path.ts";
import { ImmutableArtifactError, LayoutRecordError, SessionStateError } from "./errors.ts";
import {
  decodeJson,
  ensureRecordDurable,
  firstDifference,
  jsonEqual,
  readRecord,
  readRecordIfExists,
  recordBytes,
  utcSeconds,
  writeJsonAtomic,
} from "./json_io.ts";
import {
  type LayoutWriteOptions,
  type ResolvedWriteOptions,
  resolveWriteOptions,
} from "./options.ts";
import { type GitPhase, requireFolded, type SessionPaths } from "./paths.ts";
import {
  type EvalAcceptance,
  evalSealKey,
  type GitReceipt,
  parseEvalAcceptance,
  parseEvalReceipt,
  parseGitReceipt,
  stateEvalSeal,
  stateEvalSeals,
} from "./records.ts";
import type { AttemptIdentity } from "./attempts.ts";
import { checkAttemptIdentity } from "./_attempt_identity.ts";
import { confined } from "./no_links.ts";
import { serializedOn } from "./serial.ts";
import { readSessionLayout, readSessionState, requireOwnSession } from "./tree.ts";
import { updateSessionState } from "./state.ts";

/** What a git boundary receipt records. */
export interface GitBoundary {
  /** The commit at the boundary, when known. */
  readonly head: string | null;
  /** The branch, when known. */
  readonly branch: string | null;
  /** Whether the worktree was dirty, when known. */
  readonly dirty: boolean | null;
  /** Verbose `git status` output, written to raw `git/<phase>-status.jsonl`. */
  readonly rawStatus?: Uint8Array | undefined;
  /** Verbose diff, written to raw `git/<phase>-diff.patch`. */
  readonly rawDiff?: Uint8Array | undefined;
}

/** A written git receipt. */
export interface WrittenGitReceipt {
  /** The receipt file. */
  readonly file: string;
  /** Its logical reference (`session:/receipts/…`). */
  readonly ref: string;
  /** The receipt. */
  readonly receipt: GitReceipt;
}

/**
 * Writes an attempt's git receipt `receipts/<NNNN>_<workflow>_git_<phase>.json` (and its verbose
 * raw output, when given) in a folded session. A session whose `session.json` records the mirror
 * layout is refused (`UnsupportedLayoutError`) before anything is written, whatever layout
 * `session` was built for.
 *
 * The attempt identity (an invalid iteration, workflow id or attempt id is
 * a `LayoutOptionError` naming the field, and so is a workflow id that makes the receipt's file
 * name longer than 255 bytes, or an attempt id longer than 255 bytes, the name of its folded
 * `workflow_snapshot/<attempt_id>/`) and the whole receipt are validated before
 * anything is written (neither the raw files nor the receipt), and `sessionId` must be the
 * session's own, as its `session.json` records (else a `LayoutRecordError` at `session_id`). A
 * receipt is written once: writing it again for the same attempt with the same contents (everything
 * but `created_at`) returns the existing receipt and writes nothing; a different attempt or other
 * contents is an `ImmutableArtifactError` naming the receipt and the first field that would change
 * (an eval acceptance binds the receipt by hash).
 */
export async function writeGitReceipt(
  fs: FileSystem,
  session: SessionPaths,
  sessionId: string,
  attempt: AttemptIdentity,
  phase: GitPhase,
  boundary: GitBoundary,
  options: LayoutWriteOptions = {},
): Promise<WrittenGitReceipt> {
  fs = confined(fs, session.dir);
  requireFolded(session);
  // The layout session.json records decides, not the one the caller built the paths for.
  requireFolded(session, await readSessionLayout(fs, session.dir));
  const resolved = resolveWriteOptions(options);
  const durability = resolved.durability;
  checkAttemptIdentity(attempt);
  const paths = session.attempt(attempt.iteration, attempt.workflowId);
  const file = paths.gitReceipt(phase, attempt.attemptId);
  await requireOwnSession(fs, session.dir, sessionId, file, "session_id");
  const ref = paths.gitReceiptRef(phase, attempt.attemptId);
  const statusName = `${phase}-status.jsonl`;
  const diffName = `${phase}-diff.patch`;
  const receipt = parseGitReceipt({
    schema_version: 1,
    kind: "git_receipt",
    phase,
    session_id: sessionId,
    workflow_id: attempt.workflowId,
    iteration: attempt.iteration,
    attempt_id: attempt.attemptId,
    head: boundary.head,
    branch: boundary.branch,
    dirty: boundary.dirty,
    status_path: null,
    diff_path: null,
    raw_status_ref: boundary.rawStatus === undefined ? null : `${paths.rawRef}/git/${statusName}`,
    raw_diff_ref: boundary.rawDiff === undefined ? null : `${paths.rawRef}/git/${diffName}`,
    created_at: utcSeconds(resolved.now()),
  }, file);
  return await serializedOn(fs, file, async () => {
    const existing = await readRecordIfExists(fs, file, parseGitReceipt);
    if (existing !== undefined) {
      const changed = firstDifference(existing.record, receipt, ["created_at"]);
      if (changed === undefined) {
        // Written already, maybe by a call that failed before its directory's fsync.
        await ensureRecordDurable(fs, file, durability);
        return { file, ref, receipt: existing.record };
      }
      throw new ImmutableArtifactError(
        file,
        "A git receipt is written once; it cannot be rewritten for another attempt or with " +
          "other contents",
        changed,
      );
    }
    const gitDir = paths.rawSubarea("git");
    if (boundary.rawStatus !== undefined || boundary.rawDiff !== undefined) {
      await ensurePrivateDir(fs, gitDir, durability);
    }
    if (boundary.rawStatus !== undefined) {
      await atomicReplace(fs, join(gitDir, statusName), boundary.rawStatus, { durability });
    }
    if (boundary.rawDiff !== undefined) {
      await atomicReplace(fs, join(gitDir, diffName), boundary.rawDiff, { durability });
    }
    await ensurePrivateDir(fs, session.gitReceiptsDir, durability);
    await writeJsonAtomic(fs, file, receipt, durability);
    return { file, ref, receipt };
  });
}

/**
 * The logical reference of a delivery receipt (`session:/receipts/<name>` when folded). A `name`
 * that is not one safe path component (a separator, `..`, an empty name) is refused as
 * `SessionPaths.deliveryReceipt` refuses it (a `LayoutError`), so the reference names the
 * receipt's own file and nothing beside or below it.
 */
export function deliveryReceiptRef(session: SessionPaths, name: string): string {
  session.deliveryReceipt(name); // the receipt's path: checks the name
  return session.layout === "folded"
    ? `session:/receipts/${name}`
    : `session:/delivery_receipts/${name}`;
}

/** Options of `acceptEvalReceipt`. */
export interface AcceptEvalReceiptOptions extends LayoutWriteOptions {
  /** The session the receipt belongs to. */
  readonly sessionId: string;
  /**
   * The session's current attempt (the one the engine is finishing). When given, a receipt
   * produced by any other attempt is refused before a sidecar is written; the engine passes it
   * (the seed: only a receipt from the current attempt is sealed).
   */
  readonly currentAttempt?: AttemptIdentity | undefined;
}

/**
 * Accepts `eval_receipts/<evalId>.json` of a folded session: the receipt must be valid, name
 * this session (`options.sessionId`, which must be the one the session's `session.json`
 * records), cite exactly the producing attempt's raw report
 * (`session:/raw/<NNNN>_<workflow>/eval/report.json`, which must exist) and that attempt's
 * git-after receipt (which must exist and name the same session, workflow, iteration and
 * attempt), and, when `currentAttempt` is
 * given, be produced by that attempt. Seals the acceptance binding the receipt's hash in the
 * state's `accepted_eval_seals` (under `session:/eval_receipts/<evalId>.json`, see
 * `evalSealKey`), then writes its copy, the sidecar `eval_receipts/accepted/<evalId>.json`, and
 * returns it. The state is the trust root (`readTerminalControl` checks a citation against the
 * seal, not the sidecar); a crash between the two writes is completed by running the call again.
 * A legacy state that records no `accepted_eval_seals` gets no seal: its acceptances are their
 * sidecars, as before.
 *
 * An acceptance is made once: accepting the same receipt bytes again returns the sealed
 * acceptance before the raw report and the git receipt are looked at (also after the attempt
 * finished and prune-raw removed its raw output), writing its sidecar again from the seal if the
 * sidecar is missing or says otherwise; a receipt edited after its acceptance (or one now bound to
 * another git receipt) is an `ImmutableArtifactError` naming the sidecar and the first field
 * that would change. A sidecar the state does not seal is adopted (its time kept) only when it
 * says exactly what was just verified, is otherwise such an `ImmutableArtifactError` when it is a
 * valid acceptance, and is replaced when it is not. A session whose `session.json` records the
 * mirror layout is refused (`UnsupportedLayoutError`) before the receipt is read or anything is
 * written, whatever layout `session` was built for.
 */
export async function acceptEvalReceipt(
  fs: FileSystem,
  session: SessionPaths,
  evalId: string,
  options: AcceptEvalReceiptOptions,
): Promise<EvalAcceptance> {
  fs = confined(fs, session.dir);
  requireFolded(session);
  requireFolded(session, await readSessionLayout(fs, session.dir));
  const resolved = resolveWriteOptions(options);
  const file = session.evalReceipt(evalId);
  const { record: receipt, sha256 } = await readRecord(fs, file, parseEvalReceipt, resolved.sha256);
  const fail = (message: string, path: string, value: unknown): never => {
    throw new LayoutRecordError(file, message, { path, value });
  };
  if (receipt.eval_id !== evalId) {
    fail("eval_id is not the file's name", "eval_id", receipt.eval_id);
  }
  const producer = receipt.producer;
  if (producer.session_id !== options.sessionId) {
    fail("The receipt names another session", "producer.session_id", producer.session_id);
  }
  await requireOwnSession(fs, session.dir, producer.session_id, file, "producer.session_id");
  const attempt = session.attempt(producer.iteration, producer.workflow_id);
  const expectedReport = attempt.evalReportRef;
  if (receipt.raw_report_refs.length !== 1 || receipt.raw_report_refs[0] !== expectedReport) {
    fail(
      `raw_report_refs must be exactly ["${expectedReport}"] of the producing attempt`,
      "raw_report_refs",
      receipt.raw_report_refs,
    );
  }
  const expectedGit = attempt.gitReceiptRef("after", producer.attempt_id);
  if (receipt.git_receipt_ref !== expectedGit) {
    fail(
      `git_receipt_ref must be the producing attempt's ${expectedGit}`,
      "git_receipt_ref",
      receipt.git_receipt_ref,
    );
  }
  const sidecarFile = session.evalAcceptedSidecar(evalId);
  const durability = resolved.durability;
  return await serializedOn(fs, sidecarFile, async () => {
    // state.json is the trust root of acceptances: the sidecar is its copy in the agent-writable
    // tree. A legacy state that records no seals keeps its sidecar-only acceptances.
    const state = await readSessionState(fs, session.dir);
    const seals = stateEvalSeals(state, session.stateJson);
    let bound: EvalAcceptance | undefined;
    if (seals !== undefined) {
      bound = stateEvalSeal(seals, evalId, session.stateJson);
      if (bound !== undefined && bound.receipt_sha256 === sha256) {
        // Accepted once, these exact bytes (a rerun, maybe after a crash between the seal and
        // its sidecar, maybe once prune-raw removed the raw output): the sealed acceptance, its
        // sidecar written again from the seal when it is missing or says otherwise. The seal may
        // be one a call that failed before the fsync of state.json's directory wrote: it is made
        // durable first, so neither the sidecar nor the result stands on a seal a power loss
        // can take back.
        await ensureRecordDurable(fs, session.stateJson, durability);
        await copySealToSidecar(fs, session, sidecarFile, bound, durability);
        return bound;
      }
    } else {
      bound = (await readRecordIfExists(fs, sidecarFile, parseEvalAcceptance))?.record;
      if (bound !== undefined && bound.receipt_sha256 === sha256) {
        // Accepted once, these exact bytes: the sidecar is returned as it is, made durable first,
        // should the acceptance have failed before its directory's fsync.
        await ensureRecordDurable(fs, sidecarFile, durability);
        return bound;
      }
    }
    if (bound !== undefined) {
      // Accepted before with other bytes: the acceptance binds those and never changes, whatever
      // the raw report and the git receipt now say (prune-raw may have removed them since).
      throw new ImmutableArtifactError(
        sidecarFile,
        "The eval receipt was already accepted with other contents; an acceptance never changes",
        "receipt_sha256",
      );
    }
    // A new acceptance needs a session still running: a terminal state is frozen (its outcome
    // lists the seals it held when the session ended).
    refuseTerminal(state, session);
    if (!(await isFile(fs, join(attempt.rawDir, "eval", "report.json")))) {
      fail(
        "The producing attempt's raw eval report is absent",
        "raw_report_refs[0]",
        expectedReport,
      );
    }
    const gitFile = attempt.gitReceipt("after", producer.attempt_id);
    let git;
    try {
      git = await readRecord(fs, gitFile, parseGitReceipt, resolved.sha256);
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      return fail(
        "The producing attempt's git-after receipt is absent",
        "git_receipt_ref",
        expectedGit,
      );
    }
    const gitReceipt = git.record;
    if (
      gitReceipt.attempt_id !== producer.attempt_id || gitReceipt.phase !== "after" ||
      gitReceipt.session_id !== producer.session_id ||
      gitReceipt.workflow_id !== producer.workflow_id ||
      gitReceipt.iteration !== producer.iteration
    ) {
      fail("The git receipt belongs to another attempt", "git_receipt_ref", expectedGit);
    }
    const sidecar = parseEvalAcceptance({
      schema_version: 1,
      eval_id: evalId,
      receipt_ref: evalSealKey(evalId),
      receipt_sha256: sha256,
      producer,
      raw_report_refs: receipt.raw_report_refs,
      git_receipt_ref: receipt.git_receipt_ref,
      git_receipt_sha256: git.sha256,
      accepted_at: utcSeconds(resolved.now()),
    }, sidecarFile);
    let accepted = sidecar;
    let unsealed: EvalAcceptance | undefined;
    if (seals !== undefined) {
      // A sidecar the state does not seal (written before the state recorded seals, or not by
      // the engine) is adopted only when it says exactly what was just verified (its time
      // kept); any other valid one is an acceptance that never changes, as it always was. One
      // that is not even a valid acceptance is replaced.
      unsealed = await readUnsealedSidecar(fs, sidecarFile);
      if (unsealed !== undefined) {
        const changed = firstDifference(unsealed, sidecar, ["accepted_at"]);
        if (changed !== undefined) {
          throw new ImmutableArtifactError(
            sidecarFile,
            "The eval receipt was already accepted with other contents; an acceptance never " +
              "changes",
            changed,
          );
        }
        accepted = unsealed;
      }
    }
    // Only a receipt of the current attempt is sealed.
    const current = options.currentAttempt;
    if (current !== undefined) {
      if (producer.attempt_id !== current.attemptId) {
        fail(
          "Only a receipt produced by the current attempt is accepted",
          "producer.attempt_id",
          producer.attempt_id,
        );
      }
      if (producer.workflow_id !== current.workflowId) {
        fail(
          "Only a receipt produced by the current attempt is accepted",
          "producer.workflow_id",
          producer.workflow_id,
        );
      }
      if (producer.iteration !== current.iteration) {
        fail(
          "Only a receipt produced by the current attempt is accepted",
          "producer.iteration",
          producer.iteration,
        );
      }
    }
    if (seals !== undefined) {
      // The seal first, then its sidecar: a crash in between leaves an acceptance that a rerun
      // completes from the state alone (the branch at the top), whatever happened to the raw
      // output since; the other order would leave a sidecar that a rerun must verify again.
      // The seal the state holds: this one, or the same acceptance sealed meanwhile at another
      // time (kept, as a later call returns it).
      accepted = await sealInState(fs, session, evalId, accepted, resolved);
    }
    if (unsealed !== undefined && jsonEqual(unsealed, accepted)) {
      await ensureRecordDurable(fs, sidecarFile, durability);
      return accepted;
    }
    await ensurePrivateDir(fs, session.evalReceiptsAcceptedDir, durability);
    await writeJsonAtomic(fs, sidecarFile, accepted, durability);
    return accepted;
  });
}

/**
 * Refuses (`SessionStateError`) a new eval acceptance in a session whose state is terminal: its
 * state is frozen, and its outcome lists the seals the state held when the session ended.
 */
function refuseTerminal(state: { readonly status?: unknown }, session: SessionPaths): void {
  // As `sessionPhase` judges it: every status but running is terminal.
  if (state.status === "running") return;
  throw new SessionStateError(
    basename(session.dir),
    `An eval receipt is accepted only while its session runs; ${session.stateJson} records the ` +
      `session as ${String(state.status)}`,
  );
}

/**
 * Records `seal` in the state's `accepted_eval_seals` under `evalSealKey(evalId)` and returns the
 * seal the state then holds. A seal already there (sealed since the state was read) is left as it
 * is and returned when it is the same acceptance, made at the same or another time
 * (`accepted_at`), as a later call would return it; anything else there is an
 * `ImmutableArtifactError`.
 */
async function sealInState(
  fs: FileSystem,
  session: SessionPaths,
  evalId: string,
  seal: EvalAcceptance,
  options: ResolvedWriteOptions,
): Promise<EvalAcceptance> {
  const key = evalSealKey(evalId);
  let sealed = seal;
  await updateSessionState(fs, session.dir, (next) => {
    sealed = seal;
    const seals = (next.accepted_eval_seals ?? {}) as Record<string, unknown>;
    if (Object.hasOwn(seals, key)) {
      const found = sameAcceptance(seals[key], seal, session.stateJson);
      if (found !== undefined) {
        sealed = found;
        return false;
      }
      throw new ImmutableArtifactError(
        session.stateJson,
        "The eval receipt was already sealed with other contents; an acceptance never changes",
        "accepted_eval_seals",
      );
    }
    refuseTerminal(next, session); // again, on the state the seal is written into
    next.accepted_eval_seals = { ...seals, [key]: seal };
  }, { updatedAt: utcSeconds(options.now()), durability: options.durability });
  return sealed;
}

/**
 * `found` (a seal read from `file`) as an acceptance when it is a valid one that says what `seal`
 * says, whatever its `accepted_at`; undefined otherwise.
 */
function sameAcceptance(
  found: unknown,
  seal: EvalAcceptance,
  file: string,
): EvalAcceptance | undefined {
  try {
    parseEvalAcceptance(found, file);
  } catch (error) {
    if (error instanceof LayoutRecordError) return undefined;
    throw error;
  }
  // Compared as found (the parse drops fields it does not know): every field but the time.
  return firstDifference(found as object, seal, ["accepted_at"]) === undefined
    ? found as EvalAcceptance
    : undefined;
}

/**
 * Makes the sidecar `file` the copy of the state's `seal`: kept (made durable) when it holds the
 * same record, written atomically when it is missing, damaged or says otherwise.
 */
async function copySealToSidecar(
  fs: FileSystem,
  session: SessionPaths,
  file: string,
  seal: EvalAcceptance,
  durability: Durability,
): Promise<void> {
  // A directory (or a file on its path) there is refused by name, never replaced.
  const bytes = await recordBytes(fs, file, true);
  if (bytes !== undefined && sameRecord(bytes, file, seal)) {
    await ensureRecordDurable(fs, file, durability);
    return;
  }
  await ensurePrivateDir(fs, session.evalReceiptsAcceptedDir, durability);
  await writeJsonAtomic(fs, file, seal, durability);
}

/** The sidecar at `file` when it is a valid eval acceptance; `undefined` when absent or invalid. */
async function readUnsealedSidecar(
  fs: FileSystem,
  file: string,
): Promise<EvalAcceptance | undefined> {
  // Only a file with invalid contents is replaced; a directory in its place (or a file where one
  // of its directories should be) is not: that refusal propagates, before anything is written.
  const bytes = await recordBytes(fs, file, true);
  if (bytes === undefined) return undefined;
  try {
    return parseEvalAcceptance(decodeJson(bytes, file), file);
  } catch (error) {
    if (error instanceof LayoutRecordError) return undefined;
    throw error;
  }
}

/** True when `bytes` (read from `file`) decode to the JSON of `record`. */
function sameRecord(bytes: Uint8Array, file: string, record: unknown): boolean {
  try {
    return jsonEqual(decodeJson(bytes, file), record);
  } catch (error) {
    if (error instanceof LayoutRecordError) return false;
    throw error;
  }
}

async function isFile(fs: FileSystem, path: string): Promise<boolean> {
  try {
    return (await fs.lstat(path)).kind === "file";
  } catch (error) {
    if (error instanceof NotFound) return false;
    throw error;
  }
}
