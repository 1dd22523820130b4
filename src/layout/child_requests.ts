/**
 * The child request lifecycle of a folded parent session:
 *
 * 1. A parent workflow publishes a request atomically under `child_requests/pending/`.
 * 2. The engine validates it after the parent attempt. A valid request is copied unchanged into
 *    `accepted/<request_id>.json`, indexed in the revisioned `children.json`, and frozen into a
 *    new child session (built in a staging directory and renamed into place); the parent then
 *    points at the child (`active_child_session_id`) and is suspended. An invalid request is
 *    archived in `rejected/` with its original hash and a diagnosis.
 * 3. When the child is terminal, `child_outcomes/<request_id>.json` references the child's
 *    `session_outcome.json` by logical reference and hash, and the parent resumes. The parent
 *    orchestrator records its own decision (accepted, rework, reroute) in `parent_acceptance/`.
 *    A child's `goal_met` never completes its parent: nothing here touches the parent's control
 *    or status.
 *
 * Crash safety: removing the pending file is the commit point of an acceptance, and happens only
 * after the accepted copy, the ledger entry, the published child and the parent's pointer are
 * durable. Every earlier step is idempotent, and the child id is recorded in the ledger before
 * the child is built, so a rerun after a crash resumes with the same id. A request is therefore
 * always either pending or fully accepted and indexed, never half.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { type Sha256Factory, sha256OfHandle } from "../port/sha256.ts";
import { FsError, IsADirectory, NotADirectory, NotFound } from "../port/errors.ts";
import {
  atomicReplace,
  type Durability,
  ensureDirDurable,
  entryKind,
  readDirIfExists,
} from "../port/durable.ts";
import { basename, dirname, join, utf8Length, utf8Prefix } from "../port/path.ts";
import { openIfRegularWaiting } from "../port/regular.ts";
import {
  ChildRequestError,
  LayoutRecordError,
  LogicalReferenceError,
  SessionIdError,
  SessionStateError,
  TopologyError,
  UnsupportedLayoutError,
} from "./errors.ts";
import { appendEvents, type NewEvent, scanEvents } from "./events.ts";
import { createSessionId } from "./ids.ts";
import {
  bytesEqual,
  decodeJson,
  encodeJson,
  encodeRecord,
  ensureRecordDurable,
  freezeBytes,
  prepareRecordDir,
  readRecord,
  readRecordIfExists,
  recordBytes,
  sameJsonRecord,
  sha256Ref,
  utcSeconds,
  writeJsonAtomic,
} from "./json_io.ts";
import {
  type LayoutWriteOptions,
  type ResolvedWriteOptions,
  resolveWriteOptions,
} from "./options.ts";
import {
  LOOPY_DIRNAME,
  repositoryPaths,
  requireFolded,
  type SessionPaths,
  stagingSessionId,
} from "./paths.ts";
import {
  type AnyChildrenLedger,
  type ChildOutcome,
  type ChildRecord,
  type ChildrenLedger,
  type ChildRequest,
  isRequestId,
  type LegacyChildRecord,
  LIVE_CHILD_STATUSES,
  type ParentAcceptance,
  type ParentDecision,
  parseChildOutcome,
  parseChildrenLedger,
  parseChildrenLedgerAsRead,
  parseChildRequest,
  parseParentAcceptance,
  parseRejectedRequestReceipt,
  parseSessionOutcome,
  type RejectedRequestReceipt,
  sessionPhase,
  type SessionState,
  stateContractPins,
} from "./records.ts";
import { isLogicalReference } from "./ref_grammar.ts";
import { LogicalReferenceResolver } from "./refs.ts";
import { createChildSession, type InputToFreeze, type SessionContracts } from "./scaffold.ts";
import { updateSessionState } from "./state.ts";
import {
  loadSessionTree,
  readSessionLayout,
  readSessionManifest,
  readSessionState,
  requireOwnSession,
  type SessionNode,
  type SessionTree,
} from "./tree.ts";
import { confined } from "./no_links.ts";
import { serializedOn } from "./serial.ts";
import { compareCodePoints } from "./_py_text.ts";
import { sessionIdsInUse } from "./_session_ids.ts";
import { jsonObject, requirePinnedBytes, trustedWorkflowContract } from "./_contract.ts";

// ---------------------------------------------------------------------------------------------
// Ledger

/**
 * Reads and validates `children.json`; a schema-2 ledger's `parent_session_id` must be the
 * session's own id. A legacy mirror session's v1 ledger (`{schema_version: 1, children}`, or a
 * bare list of records) is read as a `LegacyChildrenLedger` of the session (revision 0).
 *
 * A v1 ledger keeps its form when this library rewrites it (`recordChildOutcome` on a mirror
 * parent): it is written as `{schema_version: 1, children: [...]}` — a bare list too — with no
 * revision or parent id, which is how the engine itself rewrites a v1 ledger (it reads either
 * form as that object). A legacy session finishes under its frozen shape; it is never upgraded
 * to schema 2.
 */
export async function readChildrenLedger(
  fs: FileSystem,
  paths: SessionPaths,
  sessionId: string,
): Promise<AnyChildrenLedger> {
  fs = confined(fs, paths.dir);
  const { record } = await readRecord(
    fs,
    paths.childrenJson,
    (value, file) => parseChildrenLedgerAsRead(value, file, sessionId),
  );
  if (record.parent_session_id !== sessionId) {
    throw new LayoutRecordError(paths.childrenJson, "children.json belongs to another session", {
      path: "parent_session_id",
      value: record.parent_session_id,
    });
  }
  return record;
}

/**
 * The schema-2 ledger of a folded session: a folded session is created with one, so a v1 ledger
 * there is a `LayoutRecordError` naming `schema_version`.
 */
async function readFoldedLedger(
  fs: FileSystem,
  paths: SessionPaths,
  sessionId: string,
): Promise<ChildrenLedger> {
  const ledger = await readChildrenLedger(fs, paths, sessionId);
  if (ledger.schema_version !== 2) {
    throw new LayoutRecordError(
      paths.childrenJson,
      "A folded session's children.json is schema 2",
      {
        path: "schema_version",
        value: ledger.schema_version,
      },
    );
  }
  return ledger;
}

/**
 * Rewrites `children.json` with `children`, validated, atomically. A schema-2 ledger goes one
 * revision higher; a v1 ledger keeps its v1 form (see `readChildrenLedger`).
 */
async function writeChildrenLedger<L extends AnyChildrenLedger>(
  fs: FileSystem,
  paths: SessionPaths,
  ledger: L,
  children: L["children"],
  options: ResolvedWriteOptions,
): Promise<L> {
  const next = ledger.schema_version === 1
    ? { schema_version: 1, children }
    : { ...ledger, revision: ledger.revision + 1, children };
  const validated = parseChildrenLedger(next, paths.childrenJson, ledger.parent_session_id);
  await writeJsonAtomic(fs, paths.childrenJson, next, options.durability);
  return validated as L;
}

// ---------------------------------------------------------------------------------------------
// Publication

/** Options of `publishChildRequest`. */
export interface PublishChildRequestOptions {
  /** Durability of the publish; default `"full"`. */
  readonly durability?: LayoutWriteOptions["durability"];
}

/** A published request. */
export interface PublishedRequest {
  /** `child_requests/pending/<request_id>.json`. */
  readonly file: string;
  /** `sha256:` of its bytes. */
  readonly sha256: string;
  /** Its bytes. */
  readonly bytes: Uint8Array;
}

/**
 * Publishes a child request atomically at `child_requests/pending/<request_id>.json` of the
 * folded session `paths`. The request is validated first; a request id that is already pending
 * (under any file name of `pending/`: processing goes by the `request_id` a file holds) or
 * accepted is a `ChildRequestError`, except the very request of a dispatch that failed before
 * its child was published (its accepted copy holds this record, escaped or not), which is
 * published again in the accepted copy's bytes and dispatched again. Publishing a request that
 * is pending already at `pending/<request_id>.json` with this very record (a rerun of a publish
 * that failed after its rename) returns it as it is, made durable: only another request under a
 * pending id, or the id pending under another file name, is refused. A request whose bytes are
 * larger than `MAX_CHILD_REQUEST_BYTES` is refused too (`ChildRequestError`); a pending file that
 * large is not read (it holds no request id).
 *
 * A session whose `session.json` records the mirror layout is refused (`UnsupportedLayoutError`)
 * before anything is written, whatever layout `paths` was built for; a directory without a
 * readable `session.json` is refused with the error reading it.
 */
export async function publishChildRequest(
  fs: FileSystem,
  paths: SessionPaths,
  request: ChildRequest,
  options: PublishChildRequestOptions = {},
): Promise<PublishedRequest> {
  fs = confined(fs, paths.dir);
  if (paths.layout !== "folded") {
    throw new UnsupportedLayoutError(paths.dir, "Child requests are published in folded sessions");
  }
  // The request first: its id is reported as a record field before it names any path. An error
  // names the file the request would be published at, or, without a valid id to name it by, the
  // in-memory record.
  const id: unknown = typeof request === "object" && request !== null && !Array.isArray(request)
    ? (request as { request_id?: unknown }).request_id
    : undefined;
  const target = isRequestId(id) ? paths.pendingRequest(id) : "child request";
  parseChildRequest(request, target);
  // The layout session.json records decides, not the one the caller built the paths for.
  requireFolded(paths, await readSessionLayout(fs, paths.dir));
  const file = paths.pendingRequest(request.request_id);
  let bytes = encodeRecord(request, file);
  if (bytes.length > MAX_CHILD_REQUEST_BYTES) {
    throw new ChildRequestError(
      file,
      request.request_id,
      `Child request is larger than ${MAX_CHILD_REQUEST_BYTES} bytes (${bytes.length} bytes)`,
    );
  }
  // The check and the publication run before another operation on this parent's requests.
  const durability = options.durability ?? "full";
  await serializedOn(fs, childLifecycleKey(paths), async () => {
    const inUse = (taken: string) =>
      new ChildRequestError(taken, request.request_id, "Child request id is already in use");
    // Records are read only as regular files: a FIFO planted at one is refused by name (a
    // `LayoutRecordError`), never waited on.
    const pending = await cappedRecordBytes(fs, file, true);
    if (pending !== undefined) {
      if (pending === TOO_LARGE || !sameJsonRecord(pending, bytes)) throw inUse(file);
      await ensureRecordDurable(fs, file, durability);
      bytes = pending;
      return;
    }
    // An agent may have published the id under another file name: processing goes by the id
    // the file holds, so that request is pending too.
    for (const other of await listPendingChildRequests(fs, paths)) {
      const otherFile = join(paths.childRequestsPendingDir, other);
      if (otherFile === file) continue;
      let otherBytes: Uint8Array | typeof TOO_LARGE | undefined;
      try {
        otherBytes = await cappedRecordBytes(fs, otherFile, true);
      } catch (error) {
        // Not a regular file (any more): it holds no request id.
        if (error instanceof LayoutRecordError) continue;
        throw error;
      }
      // A file too large to read is rejected unread: it holds no request id either.
      if (otherBytes === TOO_LARGE) continue;
      if (otherBytes !== undefined && requestIdOf(otherBytes, otherFile) === request.request_id) {
        throw inUse(otherFile);
      }
    }
    const acceptedFile = paths.acceptedRequest(request.request_id);
    const accepted = await recordBytes(fs, acceptedFile, true);
    if (accepted !== undefined) {
      const record = await ledgerRecord(fs, paths, request.request_id);
      refuseDamagedAcceptedCopy(accepted, paths, request.request_id, record);
      // Only the very request of a dispatch that failed before its child was published, in the
      // bytes it was accepted in (whoever encoded them), so its acceptance matches them again.
      if (!sameJsonRecord(accepted, bytes) || !(await canRetry(fs, paths, record))) {
        throw inUse(acceptedFile);
      }
      bytes = accepted;
    }
    await prepareRecordDir(fs, dirname(file), durability);
    await atomicReplace(fs, file, bytes, { durability });
  });
  return { file, sha256: sha256Ref(bytes), bytes };
}

/**
 * True when `record`, a request's record in the children ledger of the folded session `paths`,
 * failed to dispatch before its child was published (`failed_dispatch`, and its child directory
 * does not exist): the same request may then be published and dispatched again, under the same
 * child id. A child directory that exists (even without state.json, which a child published whole
 * always has) makes the failure final: nothing of it is adopted or removed.
 */
async function canRetry(
  fs: FileSystem,
  paths: SessionPaths,
  record: LegacyChildRecord | undefined,
): Promise<boolean> {
  return record?.status === "failed_dispatch" &&
    (await entryKind(fs, paths.childDir(record.session_id))) === undefined;
}

/** The children ledger's record of the request `requestId` of the session `paths`, if any. */
async function ledgerRecord(
  fs: FileSystem,
  paths: SessionPaths,
  requestId: string,
): Promise<LegacyChildRecord | undefined> {
  const ledger = await readChildrenLedger(fs, paths, basename(paths.dir));
  const children: readonly LegacyChildRecord[] = ledger.children;
  return children.find((c) => c.request_id === requestId);
}

/**
 * The names of pending request files, in the order they are considered: sorted by code point, as
 * the engine's `sorted()` orders them.
 */
export async function listPendingChildRequests(
  fs: FileSystem,
  paths: SessionPaths,
): Promise<string[]> {
  fs = confined(fs, paths.dir);
  return (await readDirIfExists(fs, paths.childRequestsPendingDir))
    .filter((e) => e.kind === "file" && e.name.endsWith(".json") && !e.name.startsWith("."))
    .map((e) => e.name)
    .sort(compareCodePoints);
}

/**
 * The largest child request file read, in bytes (16 MiB), and the largest declared input frozen
 * into a child. Sizes are checked before a file is read: a pending request file larger than this
 * is rejected unparsed (its receipt's `original_sha256` its hash read in chunks, or null past
 * `MAX_HASHED_REQUEST_BYTES`), a request declaring a larger input
 * is rejected at `input_refs[<i>]`, and `publishChildRequest` refuses a larger request. So no
 * request can exhaust memory when read, or make the records of its child too large to encode
 * after its acceptance was recorded.
 */
export const MAX_CHILD_REQUEST_BYTES = 16 * 1024 * 1024;

/**
 * The largest request file whose hash a rejection records (read in chunks, never whole): 1 GiB.
 * A larger one (a sparse file of a terabyte, say) is archived with no hash (`original_sha256`
 * null): reading it could take hours.
 */
export const MAX_HASHED_REQUEST_BYTES = 1024 * 1024 * 1024;

/**
 * `sha256:` of the regular file at `file`, read in chunks through a handle (never whole), or null
 * when it is larger than `MAX_HASHED_REQUEST_BYTES` or is no longer a regular file. Opened
 * without following a link where the port can; a storage error is thrown.
 */
async function hashLargeFile(
  fs: FileSystem,
  file: string,
  factory: Sha256Factory,
): Promise<string | null> {
  const opened = await openIfRegularWaiting(fs, file);
  if (typeof opened !== "object") return null;
  const handle = opened.handle;
  try {
    if ((await opened.size()) > MAX_HASHED_REQUEST_BYTES) return null;
    const hashed = await sha256OfHandle(handle, factory, MAX_HASHED_REQUEST_BYTES);
    return hashed === undefined ? null : `sha256:${hashed.hex}`;
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** What `cappedRecordBytes` returns for a file larger than `MAX_CHILD_REQUEST_BYTES`. */
const TOO_LARGE: unique symbol = Symbol("too large");

/**
 * The bytes at `file` as `recordBytes` reads them, or `TOO_LARGE` for a regular file larger than
 * `MAX_CHILD_REQUEST_BYTES`: its size (`lstat`) is checked before it is read, and again after.
 */
async function cappedRecordBytes(
  fs: FileSystem,
  file: string,
  ifExists: boolean,
): Promise<Uint8Array | typeof TOO_LARGE | undefined> {
  try {
    const info = await fs.lstat(file);
    if (info.kind === "file" && info.size > MAX_CHILD_REQUEST_BYTES) return TOO_LARGE;
  } catch (error) {
    // What `recordBytes` reports in its own terms (nothing there, a file on the path) is left to
    // it; any other failure (a storage fault) fails the call.
    if (
      !(error instanceof NotFound || error instanceof NotADirectory ||
        error instanceof IsADirectory)
    ) throw error;
  }
  const bytes = await recordBytes(fs, file, ifExists);
  return bytes !== undefined && bytes.length > MAX_CHILD_REQUEST_BYTES ? TOO_LARGE : bytes;
}

// ---------------------------------------------------------------------------------------------
// Acceptance and rejection

/** Options of `processNextChildRequest`. */
export interface ProcessChildRequestOptions extends LayoutWriteOptions {
  /** The repository root. */
  readonly repoRoot: string;
  /** The parent session. */
  readonly parentSessionId: string;
  /**
   * The parent's latest successful attempt; a request whose `origin.parent_attempt_id` differs
   * is rejected. Unchecked when undefined.
   */
  readonly expectedParentAttemptId?: string | undefined;
  /**
   * The frozen contracts of a workflow set, or `undefined` when the set is unknown (the request
   * is then rejected). By default only the parent's own workflow set is known, and its frozen
   * contract and roster are inherited.
   */
  readonly resolveWorkflow?:
    | ((
      workflowSet: string,
    ) => Promise<SessionContracts | undefined> | SessionContracts | undefined)
    | undefined;
}

/** A request that was accepted and frozen into a child session. */
export interface AcceptedChildRequest {
  /** Always `accepted`. */
  readonly kind: "accepted";
  /** The request id. */
  readonly requestId: string;
  /** The child's id (derived once, recorded in the ledger). */
  readonly childSessionId: string;
  /** The child's directory. */
  readonly childDir: string;
  /** `sha256:` of the accepted bytes. */
  readonly sha256: string;
}

/** A request that was archived as invalid. */
export interface RejectedChildRequest {
  /** Always `rejected`. */
  readonly kind: "rejected";
  /** The receipt written beside the archived request. */
  readonly receipt: RejectedRequestReceipt;
  /** `rejected/<archived name>`. */
  readonly archivedFile: string;
  /** `rejected/<archived name>.receipt.json`. */
  readonly receiptFile: string;
}

/** What happened to the request that was processed. */
export type ChildRequestResult = AcceptedChildRequest | RejectedChildRequest;

interface Rejection {
  readonly reason: string;
  readonly field: string | null;
  /** A live ledger record of an interrupted acceptance that can no longer be completed. */
  readonly abandoned?: ChildRecord | undefined;
}

interface Admission {
  readonly request: ChildRequest;
  /**
   * The ledger record of this request, if any: an interrupted acceptance (`dispatching` or
   * `running`), or a `failed_dispatch` whose child id the new dispatch reuses.
   */
  readonly existing: ChildRecord | undefined;
  /** What the child is built from; `undefined` when the child is already published. */
  readonly build: ChildBuild | undefined;
}

/** What a new child is built from, gathered (and checked) before anything is written. */
interface ChildBuild {
  /** The frozen contracts the child gets. */
  readonly contracts: SessionContracts;
  /** The declared parent inputs with their bytes. */
  readonly inputs: readonly InputToFreeze[];
  /**
   * `sha256:` of the root's `harness_capability_roster.json`, checked against the hash the root's
   * `state.json` pins (when it pins one).
   */
  readonly harnessCapabilityRosterSha256: string;
}

/**
 * Processes the first pending child request of a folded parent (sorted by file name), if any:
 * accepts it (and creates the child) or rejects it. A request file or declared input larger than
 * `MAX_CHILD_REQUEST_BYTES` rejects the request, checked before the file is read. Rerunning after a
 * crash resumes an interrupted acceptance with the same child id. Returns `undefined` when nothing
 * is pending. What a call finds done already (a ledger record, the state's active child, a request
 * an earlier call of this process accepted or archived while the fsync of its directory failed) is
 * made durable before the call reports on it, `undefined` included. An interrupted acceptance that
 * can no longer be completed (its request was removed, rewritten with another body, or made
 * unparsable, while the parent's state names no active child) is marked `failed_dispatch` in the
 * ledger, and the parent's other requests are considered: it never keeps the parent waiting for a
 * child it does not point at. Of several pending files holding its request id, the one with the
 * accepted bytes completes it; only when none does is it given up. A child the state names is never
 * given up this way.
 *
 * Throws `SessionStateError` (and leaves the request pending) when the parent cannot dispatch
 * now: it is terminal, executing an attempt, or already waiting for another live child. The phase
 * is judged again when the parent's state is pointed at the new child: a parent that started an
 * attempt meanwhile completes the acceptance on a later call; one that became terminal keeps its
 * frozen state, and the child's record is `failed_dispatch`. A parent
 * whose frozen `workflow_contract.json` / `workflow_roster.json` (or the root's
 * `harness_capability_roster.json`) contradicts what its `state.json` (the root's) pins is the
 * parent's corruption, not the request's fault: a `LayoutRecordError` naming that `state.json`
 * and the field, and the request stays pending. The
 * `child_started` event is appended after the commit point, best effort: a failure to append it
 * (`events.jsonl` is an observability stream) leaves the event out and still returns the result.
 *
 * Concurrent calls on one parent in this process run one after another (with
 * `publishChildRequest`, `recordChildOutcome` and `recordParentAcceptance` on the same parent),
 * and each reads the pending requests, the ledger and the state afresh: a second caller sees
 * the first one's result (the request is no longer pending), so one request never yields two
 * children. Acceptances under different parents of one repository (two roots, say) choose their
 * child ids and publish their children one after another, each reading the ids the others
 * published, so no id is in two trees. Processes do not coordinate: one engine process runs a
 * repository.
 */
export async function processNextChildRequest(
  fs: FileSystem,
  options: ProcessChildRequestOptions,
): Promise<ChildRequestResult | undefined> {
  fs = confined(fs, join(options.repoRoot, LOOPY_DIRNAME));
  const resolved = resolveWriteOptions(options);
  const located = await loadSessionTree(fs, options.repoRoot, options.parentSessionId);
  // Everything below reads and writes the parent's pending requests, ledger and state: it runs
  // after every other child-lifecycle operation on this parent has settled, and reads afresh.
  return await serializedOn(
    fs,
    childLifecycleKey(located.paths(options.parentSessionId)),
    () => processNext(fs, options, resolved),
  );
}

/**
 * The directory whose canonical serialization key (see `serializedOn`) orders a parent's child
 * lifecycle (publishing, accepting or rejecting a request, recording a child's outcome,
 * recording the parent's acceptance), however the caller spelled the repository.
 */
function childLifecycleKey(paths: SessionPaths): string {
  return paths.childRequestsDir;
}

async function processNext(
  fs: FileSystem,
  options: ProcessChildRequestOptions,
  resolved: ResolvedWriteOptions,
): Promise<ChildRequestResult | undefined> {
  const tree = await loadSessionTree(fs, options.repoRoot, options.parentSessionId);
  const parent = tree.require(options.parentSessionId);
  if (parent.layout !== "folded") {
    throw new UnsupportedLayoutError(parent.dir, "Child requests are processed in folded sessions");
  }
  const paths = tree.paths(parent.sessionId);
  // A request an earlier call of this process took out of pending/ (accepted or archived) while
  // the fsync of the directories failed is gone for good only once they are synced: nothing
  // below, "nothing pending" included, is reported on a removal a power loss can take back.
  await syncUnsettledDirs(
    fs,
    [paths.childRequestsAcceptedDir, paths.childRequestsRejectedDir, paths.childRequestsPendingDir],
    resolved.durability,
  );
  const pending = await listPendingChildRequests(fs, paths);
  if (pending.length === 0) return undefined;
  const state = await readSessionState(fs, parent.dir, parent);
  const phase = sessionPhase(state);
  if (phase === "terminal") {
    // An acceptance interrupted before it pointed the state at its child (a crash, or an
    // attempt that started meanwhile) never completes now: its frozen state names no such child.
    // Its record says so; a child the state names is never given up.
    const ledger = await readFoldedLedger(fs, paths, parent.sessionId);
    const stranded = ledger.children.filter((c) =>
      LIVE_CHILD_STATUSES.includes(c.status) && c.session_id !== state.active_child_session_id
    );
    if (stranded.length > 0) {
      const at = utcSeconds(resolved.now());
      const next = ledger.children.map((c): ChildRecord =>
        stranded.includes(c) ? { ...c, status: "failed_dispatch", updated_at: at } : c
      );
      await writeChildrenLedger(fs, paths, ledger, next, resolved);
    }
    throw new SessionStateError(parent.sessionId, "A terminal session dispatches no children");
  }
  if (phase === "executing") {
    throw new SessionStateError(
      parent.sessionId,
      "Child requests are considered only after the parent attempt has finished",
    );
  }
  let ledger = await readFoldedLedger(fs, paths, parent.sessionId);
  let name: string | undefined;
  let bytes: Uint8Array | undefined;
  for (;;) {
    const live = ledger.children.find((c) => LIVE_CHILD_STATUSES.includes(c.status));
    if (live === undefined) {
      if (phase === "suspended") {
        throw new SessionStateError(
          parent.sessionId,
          `Record the outcome of child ${state.active_child_session_id} before dispatching another`,
        );
      }
      name = pending[0] ?? "";
      break;
    }
    // A live child whose request is still pending is an interrupted acceptance: finish it first.
    // Of several pending files holding its request id (an agent may reuse the id under another
    // file name), the one holding the accepted bytes is the request; only when none does is the
    // first one admitted (and the acceptance abandoned, see `admit`). The accepted bytes are
    // known by their hash where the record names one (a record of schema 2 may not), otherwise
    // as the accepted copy holds them.
    const acceptedHash = acceptedHashOf(live);
    const accepted = acceptedHash === undefined
      ? await recordBytes(fs, paths.acceptedRequest(live.request_id), true)
      : undefined;
    for (const candidate of pending) {
      // Read only as a regular file (listed as one; a FIFO swapped in is refused, never waited on).
      const candidateBytes = await cappedRecordBytes(
        fs,
        join(paths.childRequestsPendingDir, candidate),
        false,
      ) as Uint8Array | typeof TOO_LARGE;
      // A file too large to read holds no request id (it is rejected unread below).
      if (candidateBytes === TOO_LARGE) continue;
      if (requestIdOf(candidateBytes, candidate) !== live.request_id) continue;
      // (An accepted copy damaged since its record named its hash is refused by `admit`.)
      const isAccepted = acceptedHash !== undefined
        ? sha256Ref(candidateBytes) === acceptedHash
        : accepted !== undefined && bytesEqual(candidateBytes, accepted);
      if (name === undefined || isAccepted) {
        name = candidate;
        bytes = candidateBytes;
      }
      if (isAccepted) break;
    }
    if (name !== undefined) break;
    if (phase === "suspended") {
      // The state names an active child (this one, once its acceptance committed): it runs.
      throw new SessionStateError(
        parent.sessionId,
        `The session is suspended until child ${live.session_id} is terminal`,
      );
    }
    // A live record whose request is no longer pending (removed, or rewritten under another id
    // or into bytes that name none) while the state names no active child is an acceptance
    // interrupted before its commit point that can no longer be completed: it failed to
    // dispatch, and the parent goes on with its other requests.
    ledger = await writeChildrenLedger(
      fs,
      paths,
      ledger,
      replacing(ledger, {
        ...live,
        status: "failed_dispatch",
        updated_at: utcSeconds(resolved.now()),
      }),
      resolved,
    );
  }
  const file = join(paths.childRequestsPendingDir, name);
  if (bytes === undefined) {
    const read = await cappedRecordBytes(fs, file, false) as Uint8Array | typeof TOO_LARGE;
    if (read === TOO_LARGE) {
      // Rejected unparsed (nothing of it was recorded), with its original hash, read in chunks.
      const reason = `The request file is larger than ${MAX_CHILD_REQUEST_BYTES} bytes`;
      const hash = await hashLargeFile(fs, file, resolved.sha256);
      return await reject(fs, paths, name, hash, { reason, field: null }, null, resolved);
    }
    bytes = read;
  }
  const sha256 = sha256Ref(bytes, resolved.sha256);

  const verdict = await admit(
    fs,
    tree,
    parent,
    state,
    paths,
    ledger,
    file,
    bytes,
    options,
    resolved,
  );
  if ("reason" in verdict) {
    if (verdict.abandoned !== undefined) {
      // The interrupted acceptance cannot be completed (its inputs are gone): the ledger says so
      // before the request is archived, so no live child is left without a request.
      const failed: ChildRecord = {
        ...verdict.abandoned,
        status: "failed_dispatch",
        updated_at: utcSeconds(resolved.now()),
      };
      await writeChildrenLedger(
        fs,
        paths,
        ledger,
        replacing(ledger, failed),
        resolved,
      );
    }
    const requestId = requestIdOf(bytes, file);
    if (requestId !== null && !ledger.children.some((c) => c.request_id === requestId)) {
      await removeUnindexedAcceptedCopy(fs, paths, requestId, resolved.durability);
    }
    return await reject(fs, paths, name, sha256, verdict, requestId, resolved);
  }
  return await accept(fs, tree, parent, paths, ledger, file, bytes, sha256, verdict, resolved);
}

/**
 * The `accepted_request_sha256` a ledger record names, if it names one (a record of schema 2, or
 * of the legacy mirror form, may not).
 */
function acceptedHashOf(record: object): string | undefined {
  const recorded = (record as { readonly accepted_request_sha256?: unknown })
    .accepted_request_sha256;
  return typeof recorded === "string" ? recorded : undefined;
}

/**
 * Refuses (`LayoutRecordError` naming it) the accepted copy `accepted/<requestId>.json` of a
 * request when it is damaged: its hash is not the `accepted_request_sha256` of the request's
 * ledger `record` (when the record names one), or, with no record (an acceptance interrupted
 * before it indexed the request), it is not a child request at all. A damaged copy is reported,
 * never taken for an earlier body of the id (which would reject the request, or abandon the
 * child the record names) nor removed.
 */
function refuseDamagedAcceptedCopy(
  accepted: Uint8Array,
  paths: SessionPaths,
  requestId: string,
  record: object | undefined,
): void {
  const file = paths.acceptedRequest(requestId);
  if (record === undefined) {
    parseChildRequest(decodeJson(accepted, file), file);
    return;
  }
  // A record that names no hash: nothing to compare with.
  const recorded = acceptedHashOf(record);
  if (recorded === undefined) return;
  const sha256 = sha256Ref(accepted);
  if (sha256 !== recorded) {
    throw new LayoutRecordError(
      file,
      "The accepted copy of the request does not hold the bytes its ledger record accepted " +
        `(${recorded}, in ${paths.childrenJson})`,
      { path: "accepted_request_sha256", value: sha256 },
    );
  }
}

/**
 * Removes `accepted/<requestId>.json` when the ledger has no record of the request: an acceptance
 * interrupted before it indexed the request froze that copy, and the request is being rejected
 * now, so the copy would otherwise keep the id taken for good (`publishChildRequest` refuses an
 * accepted id). The removal is durable before the request is archived, so the request is always
 * either pending (with or without that copy) or rejected with the id free, never half.
 */
async function removeUnindexedAcceptedCopy(
  fs: FileSystem,
  paths: SessionPaths,
  requestId: string,
  durability: Durability,
): Promise<void> {
  const name = `${requestId}.json`;
  const entries = await readDirIfExists(fs, paths.childRequestsAcceptedDir);
  if (!entries.some((e) => e.name === name && e.kind === "file")) return;
  unsettle(fs, [paths.childRequestsAcceptedDir], durability);
  await fs.remove(join(paths.childRequestsAcceptedDir, name));
  await syncUnsettledDirs(fs, [paths.childRequestsAcceptedDir], durability);
}

/**
 * Appends an event once the operation has committed: `events.jsonl` is a best-effort stream that
 * scheduling never reads, so a failure to append (a storage fault, a link, FIFO or directory
 * planted at the file) does not fail an operation whose effects are already durable; the event is
 * simply missing.
 */
async function appendEventAfterCommit(
  fs: FileSystem,
  file: string,
  sessionId: string,
  event: NewEvent,
  options: ResolvedWriteOptions,
): Promise<void> {
  try {
    await appendEvents(fs, file, sessionId, [event], options);
  } catch (error) {
    if (!isEventFileFailure(error)) throw error;
  }
}

/**
 * True for what refuses or fails the events file of a committed operation (a storage error, a
 * link or something else planted there, a file that is no regular file): the operation stands
 * without its event, as on any other append failure.
 */
function isEventFileFailure(error: unknown): boolean {
  return error instanceof FsError || error instanceof TopologyError ||
    error instanceof LayoutRecordError;
}

/**
 * True when the session's `events.jsonl` already records `child_finished` for `requestId`'s
 * child `childId` (a rerun of `recordChildOutcome` for a parent that ended), once the file found
 * holding it is made durable (a process that appended it may have died before its fsync; one
 * that cannot be is still found, so the event is never appended twice). An events file that
 * cannot be read counts as not recording it (`isEventFileFailure`): the event is appended, or
 * left out, as any other append.
 */
async function childFinishedLogged(
  fs: FileSystem,
  paths: SessionPaths,
  requestId: string,
  childId: string,
  durability: Durability,
): Promise<boolean> {
  const file = paths.eventsJsonl;
  try {
    const logged = (await scanEvents(fs, file)).events.some((event) =>
      event.type === "child_finished" && event.payload?.request_id === requestId &&
      event.payload?.child_session_id === childId
    );
    if (!logged) return false;
    try {
      await ensureRecordDurable(fs, file, durability);
    } catch (error) {
      // Found, but not made durable: never appended a second time all the same.
      if (!isEventFileFailure(error)) throw error;
    }
    return true;
  } catch (error) {
    if (isEventFileFailure(error)) return false;
    throw error;
  }
}

function requestIdOf(bytes: Uint8Array, file: string): string | null {
  try {
    const value = decodeJson(bytes, file) as { readonly request_id?: unknown } | null;
    return typeof value?.request_id === "string" ? value.request_id : null;
  } catch (error) {
    if (error instanceof LayoutRecordError) return null;
    throw error;
  }
}

/**
 * Decides whether the request at `file` can be accepted, and gathers what its child is built
 * from. What is the request's fault is a `Rejection` (the request is archived); a parent whose
 * frozen projections contradict the trust root its `state.json` pins (or the root's, for the
 * harness capability roster) is the parent's corruption, not the request's: a
 * `LayoutRecordError` is thrown and the request stays pending (see
 * `pinnedHarnessRosterSha256`).
 */
async function admit(
  fs: FileSystem,
  tree: SessionTree,
  parent: SessionNode,
  state: SessionState,
  paths: SessionPaths,
  ledger: ChildrenLedger,
  file: string,
  bytes: Uint8Array,
  options: ProcessChildRequestOptions,
  resolved: ResolvedWriteOptions,
): Promise<Admission | Rejection> {
  let request: ChildRequest;
  try {
    request = parseChildRequest(decodeJson(bytes, file), file);
  } catch (error) {
    if (!(error instanceof LayoutRecordError)) throw error;
    return { reason: error.message, field: error.path };
  }
  const id = request.request_id;
  const existing = ledger.children.find((c) => c.request_id === id);
  // Read only as a regular file: a FIFO planted there is refused by name, never waited on.
  const accepted = await recordBytes(fs, paths.acceptedRequest(id), true);
  if (accepted !== undefined) refuseDamagedAcceptedCopy(accepted, paths, id, existing);
  if (accepted !== undefined && !bytesEqual(accepted, bytes)) {
    return {
      reason: "The request id was already accepted with a different body",
      field: "request_id",
      // An interrupted acceptance of the earlier body can no longer be completed, unless the
      // state names its child already: that child runs (the acceptance reached the state, and
      // only its request's removal from pending/ was left), and only this request is refused.
      abandoned: existing !== undefined && LIVE_CHILD_STATUSES.includes(existing.status) &&
          state.active_child_session_id !== existing.session_id
        ? existing
        : undefined,
    };
  }
  // A dispatch that failed before its child was published is dispatched again under the same
  // child id (`canRetry`); any other finished record is final.
  const retry = await canRetry(fs, paths, existing);
  if (existing !== undefined && !LIVE_CHILD_STATUSES.includes(existing.status) && !retry) {
    return {
      reason: `The request was already dispatched (${existing.status})`,
      field: "request_id",
    };
  }
  // An interrupted acceptance that cannot be completed is marked failed; a retry already is.
  const abandoned = retry ? undefined : existing;
  if (existing !== undefined && !retry) {
    // An interrupted acceptance: the request was admitted before. A published child is frozen
    // already; otherwise its contracts and inputs are gathered again to build it.
    if (await isDirectory(fs, paths.childDir(existing.session_id))) {
      return { request, existing, build: undefined };
    }
  } else if (
    options.expectedParentAttemptId !== undefined &&
    request.origin.parent_attempt_id !== options.expectedParentAttemptId
  ) {
    return {
      reason: `origin.parent_attempt_id is not the parent's latest successful attempt ` +
        `(${options.expectedParentAttemptId})`,
      field: "origin.parent_attempt_id",
    };
  }
  const workflowSet = request.workflow_set ?? parent.manifest.workflow_set;
  const contracts = options.resolveWorkflow === undefined
    ? await inheritedContracts(fs, parent, paths, state, workflowSet, resolved.sha256)
    : await options.resolveWorkflow(workflowSet);
  if (contracts === undefined || contracts.workflowSet !== workflowSet) {
    return {
      reason: `Unknown workflow set ${JSON.stringify(workflowSet)}`,
      field: "workflow_set",
      abandoned,
    };
  }
  const harnessCapabilityRosterSha256 = await pinnedHarnessRosterSha256(
    fs,
    tree,
    parent,
    state,
    resolved.sha256,
  );
  const resolver = new LogicalReferenceResolver(fs, tree, parent.sessionId);
  const inputs: InputToFreeze[] = [];
  for (const [index, ref] of (request.input_refs ?? []).entries()) {
    const field = `input_refs[${index}]`;
    try {
      const target = await resolver.resolve(ref);
      if (!target.exists || target.kind !== "file") {
        return {
          reason: `Declared input ${ref} is absent or not a file`,
          field,
          abandoned,
        };
      }
      if (!isLogicalReference(target.canonical)) {
        return {
          reason: `Declared input ${ref} has no tree-wide reference short enough to record`,
          field,
          abandoned,
        };
      }
      // Read only as a regular file: one swapped for a FIFO since it was resolved is refused
      // (a `LayoutRecordError` naming it), never waited on.
      const bytes = await cappedRecordBytes(fs, target.path, true);
      if (bytes === undefined) {
        return { reason: `Declared input ${ref} is absent or not a file`, field, abandoned };
      }
      if (bytes === TOO_LARGE) {
        return {
          reason: `Declared input ${ref} is larger than ${MAX_CHILD_REQUEST_BYTES} bytes`,
          field,
          abandoned,
        };
      }
      // The port opens a path from the root, following a directory on the way: one swapped for
      // a link after the check above would have led the read elsewhere. The whole chain is
      // checked again once the bytes are in, so a swap that lasted through the read refuses
      // the input (a link on the way is a `LogicalReferenceError`); the file must still be one
      // of that size. A swap made and undone within the read itself is not seen.
      const again = await resolver.resolve(ref);
      if (
        !again.exists || again.kind !== "file" || again.path !== target.path ||
        (await sizeOf(fs, target.path)) !== bytes.length
      ) {
        return { reason: `Declared input ${ref} changed while it was read`, field, abandoned };
      }
      inputs.push({ sourceRef: target.canonical, bytes });
    } catch (error) {
      // What the reference names is the request's fault (a refused reference, a name too long
      // for the filesystem, a file used as a directory, a link, not a regular file): the request
      // is rejected. A storage fault (EIO, ENOSPC, ...) propagates and leaves the request pending
      // for a retry.
      if (
        !(error instanceof LogicalReferenceError || error instanceof TopologyError ||
          error instanceof LayoutRecordError || isReferenceFault(error))
      ) throw error;
      return { reason: (error as Error).message, field, abandoned };
    }
  }
  return { request, existing, build: { contracts, inputs, harnessCapabilityRosterSha256 } };
}

/** The size of the entry at `path` itself (`lstat`), or undefined when nothing is there. */
async function sizeOf(fs: FileSystem, path: string): Promise<number | undefined> {
  try {
    return (await fs.lstat(path)).size;
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
}

/** A filesystem error caused by the path a reference names rather than by the storage. */
function isReferenceFault(error: unknown): boolean {
  return error instanceof NotADirectory || error instanceof IsADirectory ||
    (error instanceof FsError && REFERENCE_FAULT_CODES.has(error.code));
}

const REFERENCE_FAULT_CODES: ReadonlySet<string> = new Set(["ENAMETOOLONG", "ELOOP"]);

/** The ledger's records with the one of `record`'s request replaced by it. */
function replacing(ledger: ChildrenLedger, record: ChildRecord): ChildRecord[] {
  return ledger.children.map((c) => c.request_id === record.request_id ? record : c);
}

async function isDirectory(fs: FileSystem, path: string): Promise<boolean> {
  try {
    return (await fs.lstat(path)).kind === "directory";
  } catch (error) {
    if (error instanceof NotFound) return false;
    throw error;
  }
}

/**
 * The parent's frozen workflow contract and roster, which a child of the parent's own workflow
 * set inherits; `undefined` for another workflow set. The parent's `state.json` is their trust
 * root (the seed: "The complete parsed contract also lives in engine-owned state.json"):
 *
 * - the contract is the one the state records (`workflow_contract`), checked against
 *   `workflow_contract_sha256`: the hash of its canonical bytes, or of `workflow_contract.json`
 *   when those bytes are the pinned ones and hold this very contract (an engine may have written
 *   the projection in other bytes). A recorded contract is what the child inherits, never the
 *   on-disk projection;
 * - `workflow_roster.json` must have the bytes `workflow_roster_sha256` pins.
 *
 * A contradiction is a `LayoutRecordError` naming the parent's `state.json` and the field
 * (`workflow_contract`, `workflow_roster_sha256`; the message names the projection). A field the
 * state does not record (a legacy state) is not checked: the projection is read as it is, as
 * before this state recorded pins.
 */
async function inheritedContracts(
  fs: FileSystem,
  parent: SessionNode,
  paths: SessionPaths,
  state: SessionState,
  workflowSet: string,
  sha256: Sha256Factory,
): Promise<SessionContracts | undefined> {
  if (workflowSet !== parent.manifest.workflow_set) return undefined;
  const pins = stateContractPins(state, paths.stateJson);
  const rosterBytes = await recordBytes(fs, paths.workflowRosterJson, false) as Uint8Array;
  requirePinnedBytes(
    rosterBytes,
    paths.workflowRosterJson,
    pins.workflowRosterSha256,
    paths.stateJson,
    "workflow_roster_sha256",
    sha256,
  );
  return {
    workflowSet,
    workflowContract: await trustedWorkflowContract(fs, paths, pins, sha256),
    workflowRoster: jsonObject(
      decodeJson(rosterBytes, paths.workflowRosterJson),
      paths.workflowRosterJson,
    ),
  };
}

/**
 * `sha256:` of the root's `harness_capability_roster.json`, which every descendant references:
 * its bytes must be the ones the root's `state.json` pins (`harness_capability_roster.sha256`),
 * else a `LayoutRecordError` naming the root's `state.json` and that field. A root state that
 * pins no roster (a legacy state) is not checked.
 */
async function pinnedHarnessRosterSha256(
  fs: FileSystem,
  tree: SessionTree,
  parent: SessionNode,
  state: SessionState,
  sha256: Sha256Factory,
): Promise<string> {
  const root = tree.root;
  const rootPaths = tree.paths(root.sessionId);
  const rootState = root.sessionId === parent.sessionId
    ? state
    : await readSessionState(fs, root.dir, root);
  const pin = stateContractPins(rootState, rootPaths.stateJson).harnessCapabilityRosterSha256;
  const bytes = await recordBytes(fs, rootPaths.harnessCapabilityRosterJson, false) as Uint8Array;
  return requirePinnedBytes(
    bytes,
    rootPaths.harnessCapabilityRosterJson,
    pin,
    rootPaths.stateJson,
    "harness_capability_roster.sha256",
    sha256,
  );
}

/**
 * The id of a new child of `parent`: the next ordinal of its scope (past every id its ledger
 * records), raised further while the id would repeat one of any valid tree of the repository, or
 * one another parent's ledger records without having published it yet (a dispatch interrupted,
 * or one that failed and is dispatched again under the same id). The engine checks ids across
 * trees when it resolves a reference, so two roots that each requested a child `phase-1` would
 * otherwise both get `01_phase-1`, and neither tree could be resolved again.
 */
async function newChildId(
  fs: FileSystem,
  tree: SessionTree,
  parent: SessionNode,
  requestId: string,
  ledger: ChildrenLedger,
): Promise<string> {
  const reservedIds = ledger.children.map((c) => c.session_id);
  const { recorded } = await sessionIdsInUse(fs, tree.repoRoot, parent.dir);
  for (;;) {
    const childId = await createSessionId(fs, {
      parentSessionDir: parent.dir,
      requestId,
      reservedIds,
    });
    if (!tree.nodes.has(childId) && !tree.idsElsewhere.has(childId) && !recorded.has(childId)) {
      return childId;
    }
    if (reservedIds.includes(childId)) {
      // Its successor is not a safe integer, so it is not counted: no ordinal is left past it.
      const scope = tree.paths(parent.sessionId).childrenDir;
      throw new SessionIdError(childId, `No child ordinal is left in ${scope} past this id`);
    }
    reservedIds.push(childId); // the next ordinal past it
  }
}

async function accept(
  fs: FileSystem,
  tree: SessionTree,
  parent: SessionNode,
  paths: SessionPaths,
  initialLedger: ChildrenLedger,
  file: string,
  bytes: Uint8Array,
  sha256: string,
  admission: Admission,
  options: ResolvedWriteOptions,
): Promise<AcceptedChildRequest> {
  const request = admission.request;
  const id = request.request_id;
  const now = utcSeconds(options.now());
  await freezeBytes(fs, paths.acceptedRequest(id), bytes, options.durability);

  // The child id is chosen and the child published before an acceptance under another parent
  // of this repository (another root's, say) chooses: each reads the ids the others published.
  const dispatched = await serializedOn(
    fs,
    repositoryPaths(tree.repoRoot).sessionsRoot,
    () =>
      dispatchChild(
        fs,
        tree,
        parent,
        paths,
        initialLedger,
        file,
        bytes,
        sha256,
        admission,
        now,
        options,
      ),
  );
  let ledger = dispatched.ledger;
  const record = dispatched.record;
  const childId = record.session_id;
  const childDir = paths.childDir(childId);

  let live: ChildRecord = record;
  if (record.status === "dispatching") {
    live = { ...record, status: "running", updated_at: now };
    ledger = await writeChildrenLedger(fs, paths, ledger, replacing(ledger, live), options);
  } else {
    // Running already, maybe written by an acceptance that failed before the fsync of its
    // directory: durable before the state and the commit point build on it.
    await ensureRecordDurable(fs, paths.childrenJson, options.durability);
  }
  // The parent's phase is judged again on the state this change reads: its engine may have moved
  // it since the request was admitted (an attempt started, a terminal transition committed).
  let phase: ReturnType<typeof sessionPhase> | undefined;
  try {
    await updateSessionState(fs, parent.dir, (state, current) => {
      if (current.active_child_session_id === childId) return false;
      phase = sessionPhase(current);
      if (phase === "terminal") {
        throw new SessionStateError(parent.sessionId, "A terminal session dispatches no children");
      }
      if (phase === "executing") {
        throw new SessionStateError(
          parent.sessionId,
          "Child requests are considered only after the parent attempt has finished",
        );
      }
      state.active_child_session_id = childId;
    }, { updatedAt: now, durability: options.durability, owner: parent });
  } catch (error) {
    // A terminal parent's state is frozen: this child never runs, and its record says so. (A
    // parent that started an attempt completes the acceptance on a later call, as after a crash.)
    if (error instanceof SessionStateError && phase === "terminal") {
      const failed: ChildRecord = { ...live, status: "failed_dispatch", updated_at: now };
      await writeChildrenLedger(fs, paths, ledger, replacing(ledger, failed), options);
    }
    throw error;
  }

  // A receipt an interrupted rejection of this very request left behind (the rerun accepts it,
  // e.g. against the parent's newer attempt) names an archive that will never exist.
  const name = basename(file);
  const slot = await archiveSlot(fs, paths, name, sha256);
  if (slot.leftover !== undefined) {
    unsettle(fs, [paths.childRequestsRejectedDir], options.durability);
    await fs.remove(join(paths.childRequestsRejectedDir, receiptName(slot.archived)));
    await syncUnsettledDirs(fs, [paths.childRequestsRejectedDir], options.durability);
  }

  // The commit point: the request leaves pending only now that everything above is durable.
  unsettle(fs, [paths.childRequestsPendingDir], options.durability);
  await fs.remove(file);
  await syncUnsettledDirs(fs, [paths.childRequestsPendingDir], options.durability);
  await appendEventAfterCommit(fs, paths.eventsJsonl, parent.sessionId, {
    type: "child_started",
    payload: { request_id: id, child_session_id: childId },
  }, options);
  return { kind: "accepted", requestId: id, childSessionId: childId, childDir, sha256 };
}

/**
 * Records (or revives) the ledger entry of an accepted request and publishes its child. Runs
 * serialized on the repository's sessions root (see `accept`).
 */
async function dispatchChild(
  fs: FileSystem,
  tree: SessionTree,
  parent: SessionNode,
  paths: SessionPaths,
  initialLedger: ChildrenLedger,
  file: string,
  bytes: Uint8Array,
  sha256: string,
  admission: Admission,
  now: string,
  options: ResolvedWriteOptions,
): Promise<{ readonly ledger: ChildrenLedger; readonly record: ChildRecord }> {
  const id = admission.request.request_id;
  let ledger = initialLedger;
  let record = admission.existing;
  if (record?.status === "failed_dispatch") {
    // Dispatched again: the record is live once more before anything of the child is built, so
    // a crash from here on resumes this acceptance.
    const again: ChildRecord = {
      ...record,
      status: "dispatching",
      accepted_request_sha256: sha256,
      updated_at: now,
    };
    ledger = await writeChildrenLedger(
      fs,
      paths,
      ledger,
      replacing(ledger, again),
      options,
    );
    record = again;
  } else if (record === undefined) {
    // The other trees' ids as they are now, not as the caller's tree read them.
    const current = await loadSessionTree(fs, tree.repoRoot, parent.sessionId);
    const childId = await newChildId(fs, current, parent, id, ledger);
    record = {
      session_id: childId,
      request_id: id,
      status: "dispatching",
      accepted_request_ref: `session:/child_requests/accepted/${id}.json`,
      accepted_request_sha256: sha256,
      outcome_ref: null,
      created_at: now,
      updated_at: now,
    };
    ledger = await writeChildrenLedger(fs, paths, ledger, [...ledger.children, record], options);
  }
  await ensureChild(fs, parent, paths, record.session_id, file, bytes, admission, options);
  return { ledger, record };
}

/** Creates the child unless a complete child for this request is already published. */
async function ensureChild(
  fs: FileSystem,
  parent: SessionNode,
  paths: SessionPaths,
  childId: string,
  file: string,
  bytes: Uint8Array,
  admission: Admission,
  options: ResolvedWriteOptions,
): Promise<void> {
  const childDir = paths.childDir(childId);
  const request = admission.request;
  if (await isDirectory(fs, childDir)) {
    const copyFile = join(childDir, "inputs", "accepted_request.json");
    let copy: Uint8Array | undefined;
    let unreadable: LayoutRecordError | undefined;
    try {
      // Read only as a regular file: a FIFO planted there is refused, never waited on.
      copy = await recordBytes(fs, copyFile, true);
    } catch (error) {
      if (!(error instanceof LayoutRecordError)) throw error;
      unreadable = error;
    }
    if (copy === undefined || !bytesEqual(copy, bytes)) {
      throw new ChildRequestError(
        file,
        request.request_id,
        `Child directory ${childDir} exists but was not created from this request`,
        unreadable === undefined ? {} : { cause: unreadable },
      );
    }
    if ((await entryKind(fs, join(childDir, "state.json"))) === undefined) {
      // A child is published whole (built aside, then moved in): one without state.json is
      // damaged, and is neither adopted nor removed.
      throw new ChildRequestError(
        file,
        request.request_id,
        `Child directory ${childDir} exists but has no state.json`,
      );
    }
    // Published already, maybe by an acceptance that failed before the fsync of children/: the
    // ledger and state are about to build on it, so its entry is made durable first.
    await ensureDirDurable(fs, childDir, options.durability);
    return;
  }
  const build = admission.build;
  if (build === undefined) {
    throw new ChildRequestError(file, request.request_id, `Child directory ${childDir} vanished`);
  }
  // Leftovers of an interrupted build of this very child are private garbage.
  for (const entry of await readDirIfExists(fs, paths.childrenDir)) {
    if (stagingSessionId(entry.name) === childId) {
      await fs.remove(join(paths.childrenDir, entry.name), { recursive: true });
    }
  }
  await createChildSession(fs, {
    parentDir: parent.dir,
    parentSessionId: parent.sessionId,
    rootSessionId: parent.rootSessionId,
    parentDepth: parent.depth,
    sessionId: childId,
    request,
    requestBytes: bytes,
    inputs: build.inputs,
    harnessCapabilityRosterSha256: build.harnessCapabilityRosterSha256,
    workflowSet: build.contracts.workflowSet,
    workflowContract: build.contracts.workflowContract,
    workflowRoster: build.contracts.workflowRoster,
    now: options.now,
    uuid: options.uuidHex,
    durability: options.durability,
    sha256: options.sha256,
  });
}

async function reject(
  fs: FileSystem,
  paths: SessionPaths,
  name: string,
  sha256: string | null,
  rejection: Rejection,
  requestId: string | null,
  options: ResolvedWriteOptions,
): Promise<RejectedChildRequest> {
  const field = rejection.field === "" ? null : rejection.field;
  const slot = await archiveSlot(fs, paths, name, sha256);
  const archivedFile = join(paths.childRequestsRejectedDir, slot.archived);
  const receiptFile = join(paths.childRequestsRejectedDir, receiptName(slot.archived));
  // A leftover receipt of an interrupted rejection is reused only when it gives this reason.
  let receipt = slot.leftover?.reason === rejection.reason && slot.leftover.field === field
    ? slot.leftover
    : undefined;
  if (receipt === undefined) {
    receipt = parseRejectedRequestReceipt({
      schema_version: 1,
      kind: "child_request_rejected",
      request_file: name,
      archived_file: slot.archived,
      request_id: requestId,
      original_sha256: sha256,
      reason: rejection.reason,
      field,
      rejected_at: utcSeconds(options.now()),
    }, receiptFile);
    // The receipt is durable before the request moves, so an archived request always has one.
    // It replaces (atomically) a receipt an interrupted rejection left for another reason: the
    // archive slot is still empty, so that receipt was never final.
    await writeJsonAtomic(fs, receiptFile, receipt, options.durability);
  }
  const dirs = [paths.childRequestsRejectedDir, paths.childRequestsPendingDir];
  unsettle(fs, dirs, options.durability);
  await fs.rename(join(paths.childRequestsPendingDir, name), archivedFile);
  await syncUnsettledDirs(fs, dirs, options.durability);
  return { kind: "rejected", receipt, archivedFile, receiptFile };
}

/**
 * Directories of child requests (`pending/`, `rejected/`, `accepted/`) from which this process moved or
 * removed an entry (or into which it moved one) and has not synced since, per filesystem: the
 * change is visible, but a power loss can still take it back, so the next child-lifecycle call
 * on the parent syncs them before it reports anything (see `processNext`).
 */
const unsettledDirs = new WeakMap<FileSystem, Set<string>>();

/** Marks `dirs` unsettled before a change of their entries (under `"full"` durability). */
function unsettle(fs: FileSystem, dirs: readonly string[], durability: Durability): void {
  if (durability !== "full") return; // nothing is synced in this mode
  let set = unsettledDirs.get(fs);
  if (set === undefined) unsettledDirs.set(fs, set = new Set());
  for (const dir of dirs) set.add(dir);
}

/** Fsyncs each of `dirs` that is unsettled (in order), settling it once its fsync succeeded. */
async function syncUnsettledDirs(
  fs: FileSystem,
  dirs: readonly string[],
  durability: Durability,
): Promise<void> {
  if (durability !== "full") return;
  const set = unsettledDirs.get(fs);
  if (set === undefined) return;
  for (const dir of dirs) {
    if (!set.has(dir)) continue;
    await fs.syncDir(dir);
    set.delete(dir);
  }
}

const RECEIPT_SUFFIX = ".receipt.json";

/** The receipt name of an archived request: `<archived name>.receipt.json`. */
function receiptName(archived: string): string {
  return `${archived}${RECEIPT_SUFFIX}`;
}

/**
 * Where a rejected request is archived: the first candidate name whose archive slot is free and
 * whose receipt slot (`<name>.receipt.json`) is free too — or holds the receipt an interrupted
 * rejection of this very request (same file name, slot and hash) wrote before a crash, returned
 * as `leftover`. Its archive slot is still empty, so that receipt is not final: a rejection
 * reuses it when it gives the same reason and field and replaces it (atomically) otherwise, and
 * an acceptance removes it. Archive names
 * never end with `.receipt.json`, so an archived request can never take a receipt's name.
 * Candidates: the original name, then `<stem>.<first 8 hex of its sha256><ext>`, then
 * `-2`, `-3`, ... A name longer than `MAX_ARCHIVE_NAME_BYTES` (UTF-8) gets a shortened stem
 * instead, a prefix of its stem and `~<first 8 hex of the sha256 of the name>`, so the archive,
 * its receipt and their temp files stay within a filesystem's 255-byte names while two long
 * names stay apart. Deterministic, so a rerun after a crash finds the same slot. Nothing is
 * overwritten.
 */
async function archiveSlot(
  fs: FileSystem,
  paths: SessionPaths,
  name: string,
  sha256: string | null,
): Promise<{ readonly archived: string; readonly leftover: RejectedRequestReceipt | undefined }> {
  const dot = name.lastIndexOf(".");
  let stem = dot > 0 ? name.slice(0, dot) : name;
  let ext = dot > 0 ? name.slice(dot) : "";
  let first = name;
  if (utf8Length(name) > MAX_ARCHIVE_NAME_BYTES) {
    if (utf8Length(ext) > 16) [stem, ext] = [name, ""];
    // Room for `~<8 hex>`, `.<8 hex>` and a `-<n>` counter beside the extension.
    const room = MAX_ARCHIVE_NAME_BYTES - 9 - 9 - 8 - utf8Length(ext);
    const nameHex = sha256Ref(new TextEncoder().encode(name)).slice(7, 15);
    stem = `${utf8Prefix(stem, room)}~${nameHex}`;
    first = `${stem}${ext}`;
  }
  // A request archived with no hash (too large to hash): the hash of its name stands in.
  const hex = (sha256 ?? sha256Ref(new TextEncoder().encode(name))).slice(7, 15);
  const candidates = [first, `${stem}.${hex}${ext}`];
  for (let i = 0;; i++) {
    const candidate = candidates[i] ?? `${stem}.${hex}-${i - candidates.length + 2}${ext}`;
    if (candidate.endsWith(RECEIPT_SUFFIX)) continue;
    const dir = paths.childRequestsRejectedDir;
    if ((await entryKind(fs, join(dir, candidate))) !== undefined) continue;
    const receiptFile = join(dir, receiptName(candidate));
    const receiptKind = await entryKind(fs, receiptFile);
    if (receiptKind === undefined) return { archived: candidate, leftover: undefined };
    if (receiptKind !== "file") continue;
    const leftover = await ownLeftoverReceipt(fs, receiptFile, name, candidate, sha256);
    if (leftover !== undefined) return { archived: candidate, leftover };
  }
}

/**
 * The longest archive name (UTF-8 bytes) kept as it is: its receipt (`.receipt.json`) and the
 * temp file of that receipt (`.<name>.<random>.tmp`) must fit a 255-byte file name too.
 */
const MAX_ARCHIVE_NAME_BYTES = 200;

/**
 * The receipt at `file` when it is a valid receipt of archiving `name` (with `sha256`) there,
 * whatever reason it gives.
 */
async function ownLeftoverReceipt(
  fs: FileSystem,
  file: string,
  name: string,
  archived: string,
  sha256: string | null,
): Promise<RejectedRequestReceipt | undefined> {
  let receipt: RejectedRequestReceipt;
  try {
    const bytes = await recordBytes(fs, file, false) as Uint8Array;
    receipt = parseRejectedRequestReceipt(decodeJson(bytes, file), file);
  } catch (error) {
    if (error instanceof LayoutRecordError) return undefined;
    throw error;
  }
  return receipt.request_file === name && receipt.archived_file === archived &&
      receipt.original_sha256 === sha256
    ? receipt
    : undefined;
}

// ---------------------------------------------------------------------------------------------
// Child outcomes and parent acceptance

/** Options of `recordChildOutcome`. */
export interface RecordChildOutcomeOptions extends LayoutWriteOptions {
  /** The repository root. */
  readonly repoRoot: string;
  /** The parent session. */
  readonly parentSessionId: string;
}

/**
 * Records the outcome of the parent's active child once that child is terminal:
 * `child_outcomes/<request_id>.json` binds the child's `session_outcome.json` by reference and
 * hash, the ledger entry takes the child's terminal status, and the parent's
 * `active_child_session_id` is cleared so the parent resumes. The parent's control and status
 * are never touched: a child's `goal_met` does not complete its parent. Every step is
 * repeatable, so rerunning after an interruption completes the same record; a step found done
 * already is made durable before the next builds on it. A rerun after the state was cleared
 * finds no active child: a `SessionStateError`, thrown once that cleared state is durable (a
 * power loss then cannot bring the child back as active). A parent that ended while its child
 * ran keeps its terminal state as its transition froze it (the pointer included): the outcome
 * and the ledger still record the child, a rerun returns the same outcome, and its
 * `child_finished` event is appended once. Serialized with the
 * other child-lifecycle operations on the same parent (see `processNextChildRequest`). Works
 * for a mirror parent too: a running mirror session finishes under its own layout, and its v1
 * `children.json` is updated in its v1 form (see `readChildrenLedger`). A ledger record without
 * a request id (an early v1 record) cannot name `child_outcomes/<request_id>.json`: a
 * `LayoutRecordError` at `children[<i>].request_id`, and nothing is recorded.
 */
export async function recordChildOutcome(
  fs: FileSystem,
  options: RecordChildOutcomeOptions,
): Promise<ChildOutcome> {
  fs = confined(fs, join(options.repoRoot, LOOPY_DIRNAME));
  const resolved = resolveWriteOptions(options);
  const located = await loadSessionTree(fs, options.repoRoot, options.parentSessionId);
  return await serializedOn(
    fs,
    childLifecycleKey(located.paths(options.parentSessionId)),
    () => recordOutcome(fs, options, resolved),
  );
}

async function recordOutcome(
  fs: FileSystem,
  options: RecordChildOutcomeOptions,
  resolved: ResolvedWriteOptions,
): Promise<ChildOutcome> {
  const tree = await loadSessionTree(fs, options.repoRoot, options.parentSessionId);
  const parent = tree.require(options.parentSessionId);
  const paths = tree.paths(parent.sessionId);
  const state = await readSessionState(fs, parent.dir, parent);
  const childId = state.active_child_session_id;
  if (childId == null) {
    // Maybe cleared by a call that failed before the fsync of state.json's directory: what the
    // error reports is made durable first.
    await ensureRecordDurable(fs, paths.stateJson, resolved.durability);
    throw new SessionStateError(parent.sessionId, "The session has no active child");
  }
  const child = tree.require(childId);
  const childPaths = tree.paths(childId);
  const childState = await readSessionState(fs, child.dir, child);
  if (sessionPhase(childState) !== "terminal") {
    throw new SessionStateError(childId, "The child is not terminal yet");
  }
  const outcome = await readRecord(
    fs,
    childPaths.sessionOutcomeJson,
    (value, file) => {
      const parsed = parseSessionOutcome(value, file, child.layout);
      // It must be the child's own outcome: its identity, and the terminal status of its state.
      const expected = [
        ["session_id", parsed.session_id, childId],
        ["root_session_id", parsed.root_session_id, child.rootSessionId],
        ["terminal_status", parsed.terminal_status, childState.status],
      ] as const;
      for (const [field, actual, wanted] of expected) {
        if (actual !== wanted) {
          throw new LayoutRecordError(file, `${field} must be ${wanted} (the child's own)`, {
            path: field,
            value: actual,
          });
        }
      }
      return parsed;
    },
    resolved.sha256,
  );
  const ledger = await readChildrenLedger(fs, paths, parent.sessionId);
  const children: readonly LegacyChildRecord[] = ledger.children;
  const index = children.findIndex((c) => c.session_id === childId);
  const record = children[index];
  if (record === undefined) {
    throw new LayoutRecordError(paths.childrenJson, "The active child is not in the ledger", {
      path: "children",
      value: childId,
    });
  }
  const requestId = record.request_id;
  if (requestId == null) {
    // An early v1 record names only its request file: there is no child_outcomes/ name for it.
    throw new LayoutRecordError(
      paths.childrenJson,
      "The active child's ledger record has no request id to name its child outcome",
      { path: `children[${index}].request_id`, value: requestId },
    );
  }
  const childOutcome: ChildOutcome = {
    schema_version: 2,
    request_id: requestId,
    child_session_id: childId,
    session_outcome_ref: `session:${childId}:/session_outcome.json`,
    session_outcome_sha256: outcome.sha256,
  };
  const outcomeFile = paths.childOutcome(requestId);
  await freezeBytes(
    fs,
    outcomeFile,
    encodeJson(parseChildOutcome(childOutcome, outcomeFile)),
    resolved.durability,
  );
  const now = utcSeconds(resolved.now());
  const outcomeRef = `session:/child_outcomes/${requestId}.json`;
  const status = outcome.record.terminal_status;
  if (record.status === status && record.outcome_ref === outcomeRef) {
    // Recorded already, maybe by a call that failed before the fsync of its directory: durable
    // before the state is cleared on it.
    await ensureRecordDurable(fs, paths.childrenJson, resolved.durability);
  } else {
    const changed = { status, outcome_ref: outcomeRef, updated_at: now };
    if (ledger.schema_version === 2) {
      await writeChildrenLedger(
        fs,
        paths,
        ledger,
        ledger.children.map((c, i): ChildRecord => i === index ? { ...c, ...changed } : c),
        resolved,
      );
    } else {
      await writeChildrenLedger(
        fs,
        paths,
        ledger,
        ledger.children.map((c, i): LegacyChildRecord => i === index ? { ...c, ...changed } : c),
        resolved,
      );
    }
  }
  let ended = false;
  await updateSessionState(fs, parent.dir, (next) => {
    // A parent that ended meanwhile (stopped while its child ran) keeps its terminal state as
    // its transition froze it: the outcome and the ledger record the child, the state is left.
    if (next.status !== "running") {
      ended = true;
      return false;
    }
    next.active_child_session_id = null;
  }, { updatedAt: now, durability: resolved.durability, owner: parent });
  // A rerun for an ended parent (which still names the child) adds no second event.
  if (!ended || !(await childFinishedLogged(fs, paths, requestId, childId, resolved.durability))) {
    await appendEventAfterCommit(fs, paths.eventsJsonl, parent.sessionId, {
      type: "child_finished",
      payload: { request_id: requestId, child_session_id: childId, status },
    }, resolved);
  }
  return childOutcome;
}

/**
 * Reads and validates `child_outcomes/<requestId>.json` of a session, if present. The record must
 * be that request's: its `request_id` is `requestId` (the file's name), and its
 * `child_session_id` is the child the session's `children.json` records for that request.
 * Otherwise a `LayoutRecordError` names the file and the field.
 */
export async function readChildOutcome(
  fs: FileSystem,
  paths: SessionPaths,
  requestId: string,
): Promise<ChildOutcome | undefined> {
  fs = confined(fs, paths.dir);
  const file = paths.childOutcome(requestId);
  const outcome = (await readRecordIfExists(fs, file, parseChildOutcome))?.record;
  if (outcome === undefined) return undefined;
  requireOutcomeOfRequest(outcome, file, requestId);
  const sessionId = (await readSessionManifest(fs, paths.dir)).session_id;
  await requireLedgerChild(fs, paths, sessionId, outcome, file);
  return outcome;
}

/** Refuses a child outcome whose `request_id` is not the one its file is named after. */
function requireOutcomeOfRequest(outcome: ChildOutcome, file: string, requestId: string): void {
  if (outcome.request_id !== requestId) {
    throw new LayoutRecordError(
      file,
      `The child outcome of request ${requestId} records another request`,
      { path: "request_id", value: outcome.request_id },
    );
  }
}

/**
 * Refuses a child outcome whose child is not the one `children.json` of session `sessionId`
 * records for its request (`child_session_id`), or whose request the ledger does not know
 * (`request_id`).
 */
async function requireLedgerChild(
  fs: FileSystem,
  paths: SessionPaths,
  sessionId: string,
  outcome: ChildOutcome,
  file: string,
): Promise<void> {
  const ledger = await readChildrenLedger(fs, paths, sessionId);
  const children: readonly LegacyChildRecord[] = ledger.children;
  const records = children.filter((c) => c.request_id === outcome.request_id);
  if (records.length === 0) {
    throw new LayoutRecordError(
      file,
      `children.json records no child for request ${outcome.request_id}`,
      { path: "request_id", value: outcome.request_id },
    );
  }
  if (!records.some((c) => c.session_id === outcome.child_session_id)) {
    throw new LayoutRecordError(
      file,
      `The child of request ${outcome.request_id} is ${
        records.map((c) => c.session_id).join(", ")
      }, as children.json records`,
      { path: "child_session_id", value: outcome.child_session_id },
    );
  }
}

/** Options of `recordParentAcceptance`. */
export interface RecordParentAcceptanceOptions extends LayoutWriteOptions {
  /** The parent session's paths. */
  readonly paths: SessionPaths;
  /** The parent session. */
  readonly parentSessionId: string;
  /** The request the child served. */
  readonly requestId: string;
  /** accepted, rework or reroute. */
  readonly decision: ParentDecision;
  /** Why. */
  readonly reason: string;
  /** The deciding parent attempt. */
  readonly producer: { readonly workflowId: string; readonly attemptId: string };
}

/**
 * Records the parent orchestrator's decision about a child's outcome in
 * `parent_acceptance/<request_id>.json`, bound to the child outcome record by reference and
 * hash. The child outcome must have been recorded first, and be that request's record of the
 * ledger's child (as `readChildOutcome` checks it). `parentSessionId` must be the session the
 * directory's `session.json` records (a `LayoutRecordError` at `producer.session_id`
 * otherwise). Serialized with the other child-lifecycle operations on the same parent; works for
 * a mirror parent too.
 */
export async function recordParentAcceptance(
  fs: FileSystem,
  options: RecordParentAcceptanceOptions,
): Promise<ParentAcceptance> {
  fs = confined(fs, options.paths.dir);
  return await serializedOn(
    fs,
    childLifecycleKey(options.paths),
    () => recordAcceptance(fs, options),
  );
}

async function recordAcceptance(
  fs: FileSystem,
  options: RecordParentAcceptanceOptions,
): Promise<ParentAcceptance> {
  const resolved = resolveWriteOptions(options);
  const paths = options.paths;
  const file = paths.parentAcceptance(options.requestId);
  // The decision is this session's own: its producer is the session session.json records.
  await requireOwnSession(fs, paths.dir, options.parentSessionId, file, "producer.session_id");
  const outcomeFile = paths.childOutcome(options.requestId);
  const outcome = await readRecord(fs, outcomeFile, parseChildOutcome, resolved.sha256);
  // Only the record of this request, and of the ledger's child for it, is bound.
  requireOutcomeOfRequest(outcome.record, outcomeFile, options.requestId);
  await requireLedgerChild(fs, paths, options.parentSessionId, outcome.record, outcomeFile);
  const record = parseParentAcceptance({
    schema_version: 1,
    request_id: options.requestId,
    child_session_id: outcome.record.child_session_id,
    decision: options.decision,
    reason: options.reason,
    child_outcome_ref: `session:/child_outcomes/${options.requestId}.json`,
    child_outcome_sha256: outcome.sha256,
    producer: {
      session_id: options.parentSessionId,
      workflow_id: options.producer.workflowId,
      attempt_id: options.producer.attemptId,
    },
    created_at: utcSeconds(resolved.now()),
  }, file);
  await writeJsonAtomic(fs, file, record, resolved.durability);
  return record;
}
