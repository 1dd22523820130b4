/**
 * Attempt artifacts of a folded session. Every attempt has a durable iteration directory
 * `iterations/<NNNN>_<workflow>/` (prompt, path map, result, trace reference, frozen workflow
 * snapshot) and a prunable raw directory `raw/<NNNN>_<workflow>/` with its subareas (protocol,
 * harness, agents, eval, git, service). The iteration's `trace_ref.json` records the raw
 * directory as a plain session-relative path plus its `session:/raw/…` reference; a folded
 * session has no `trace:` references, manifests or seals.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { NotFound } from "../port/errors.ts";
import { atomicReplace, ensurePrivateDir } from "../port/durable.ts";
import { dirname, join } from "../port/path.ts";
import { ImmutableArtifactError, LayoutError, LayoutRecordError } from "./errors.ts";
import { checkAttemptIdentity } from "./_attempt_identity.ts";
import { MAX_FILE_NAME_BYTES } from "./ids.ts";
import {
  bytesEqual,
  encodeRecord,
  encodeText,
  ensureRecordDurable,
  freezeBytes,
  type JsonObject,
  type JsonValue,
  prepareRecordDir,
  readRecord,
  readRecordIfExists,
  recordBytes,
  sameJsonRecord,
  sha256Ref,
  writeJsonAtomic,
} from "./json_io.ts";
import { type LayoutWriteOptions, resolveWriteOptions } from "./options.ts";
import {
  type AttemptPaths,
  RAW_SUBAREAS,
  requireFolded,
  requireRecordedLayout,
  type SessionPaths,
} from "./paths.ts";
import {
  type FoldedTraceRef,
  type MirrorTraceRef,
  parseAttemptPathsMap,
  parseAttemptResult,
  parseTraceRef,
} from "./records.ts";
import { confined } from "./no_links.ts";
import { readSessionLayout, readSessionStateIfExists } from "./tree.ts";
import { serializedOn } from "./serial.ts";

/** Which attempt: iteration, workflow and attempt id. */
export interface AttemptIdentity {
  /** The iteration number (`0026`). */
  readonly iteration: number;
  /** The workflow id (`outer`). */
  readonly workflowId: string;
  /** The attempt id. */
  readonly attemptId: string;
}

/** Options of `createAttemptArtifacts`. */
export interface CreateAttemptOptions extends LayoutWriteOptions {
  /** The rendered assignment (`prompt.txt`). */
  readonly prompt: string;
  /** The full machine path map, rosters and scheduler view (`paths.json`). */
  readonly pathsMap: JsonObject;
  /**
   * Files of the frozen workflow snapshot (`workflow_snapshot/<attempt_id>/<name>`), such as
   * `assignment.json` and `scheduler_view.json`. JSON values are written as canonical JSON,
   * strings as text. Frozen: rewriting a file with other contents is refused. A name must be a
   * safe name (`[A-Za-z0-9][A-Za-z0-9_.-]*`) of at most 255 bytes; another is a `LayoutError`
   * before anything is written.
   */
  readonly snapshot?: Readonly<Record<string, JsonValue>> | undefined;
}

/** What `createAttemptArtifacts` created. */
export interface AttemptArtifacts {
  /** The attempt's paths. */
  readonly paths: AttemptPaths;
  /** The trace reference written to `trace_ref.json`. */
  readonly traceRef: FoldedTraceRef;
  /** `sha256:` of each snapshot file, by name. */
  readonly snapshotHashes: Readonly<Record<string, string>>;
}

const SNAPSHOT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/**
 * Creates the durable iteration directory and the raw directory (with every subarea) of an
 * attempt in a folded session, and writes `prompt.txt`, `paths.json`, `trace_ref.json` and the
 * workflow snapshot. Mirror sessions get no new folded artifacts (`UnsupportedLayoutError`): the
 * layout is the one the session's `session.json` records, whatever `session` was built for, and
 * it is read before anything is written.
 *
 * Everything is checked before the first write: the iteration and the workflow id (the path of
 * the attempt is built from them: an invalid one is a `LayoutOptionError` naming the field, and
 * so is a workflow id that would make its git receipt's name longer than 255 bytes), the
 * attempt id (one safe path component that makes no name longer than 255 bytes, such as
 * `workflow_snapshot/<attempt_id>/`; an invalid one is a `LayoutRecordError` naming
 * `trace_ref.json` and `attempt_id`), the `trace_ref.json` record against its own reader's schema,
 * every snapshot file name, and that no snapshot file of the attempt was frozen with other
 * contents (`ImmutableArtifactError`; a snapshot file that is not a regular file, a FIFO say, is
 * a `LayoutRecordError` naming it, never waited on). Calls for one attempt run one at a time.
 */
export async function createAttemptArtifacts(
  fs: FileSystem,
  session: SessionPaths,
  attempt: AttemptIdentity,
  options: CreateAttemptOptions,
): Promise<AttemptArtifacts> {
  fs = confined(fs, session.dir);
  requireFolded(session);
  // The layout session.json records decides, not the one the caller built the paths for.
  requireFolded(session, await readSessionLayout(fs, session.dir));
  const resolved = resolveWriteOptions(options);
  const durability = resolved.durability;
  // The attempt's path does not hold its id: an invalid one is refused at trace_ref.json's field.
  checkAttemptIdentity(attempt, (reason) =>
    new LayoutRecordError(
      session.attempt(attempt.iteration, attempt.workflowId).traceRefJson,
      reason,
      { path: "attempt_id", value: attempt.attemptId },
    ));
  const paths = session.attempt(attempt.iteration, attempt.workflowId);
  const traceRef = parseTraceRef(
    {
      schema_version: 1,
      raw_dir: paths.rawRelative,
      raw_dir_ref: paths.rawRef,
      attempt_id: attempt.attemptId,
      iteration: attempt.iteration,
      workflow_id: attempt.workflowId,
    },
    paths.traceRefJson,
    "folded",
  ) as FoldedTraceRef;
  parseAttemptPathsMap(options.pathsMap, paths.pathsJson);
  const snapshot = options.snapshot ?? {};
  const snapshotDir = paths.snapshotDir(attempt.attemptId);
  const snapshotFiles: {
    readonly name: string;
    readonly bytes: Uint8Array;
    readonly json: boolean;
  }[] = [];
  for (const [name, value] of Object.entries(snapshot)) {
    if (!SNAPSHOT_NAME.test(name)) {
      throw new LayoutError(`Snapshot file name is not a safe name: ${JSON.stringify(name)}`);
    }
    // A safe name is ASCII: one byte a character. A longer one cannot be created at all.
    if (name.length > MAX_FILE_NAME_BYTES) {
      throw new LayoutError(
        `Snapshot file name is longer than ${MAX_FILE_NAME_BYTES} bytes: ${name.length} bytes`,
      );
    }
    snapshotFiles.push(
      typeof value === "string"
        ? { name, bytes: encodeText(value), json: false }
        : { name, bytes: encodeRecord(value, join(snapshotDir, name)), json: true },
    );
  }

  // One creation of an attempt at a time: a snapshot frozen with other contents refuses the call
  // before it writes anything (the prompt and paths of the attempt that froze it stay).
  return await serializedOn(fs, snapshotDir, async () => {
    // What is frozen already stays as it is: a JSON file holding the same record in other bytes
    // (written before JSON was ASCII-escaped) is the same file, and its own bytes are hashed.
    const frozen = new Map<string, Uint8Array>();
    for (const { name, bytes, json } of snapshotFiles) {
      // Read only as a regular file: a FIFO planted there is refused by name, never waited on.
      const existing = await recordBytes(fs, join(snapshotDir, name), true);
      if (existing === undefined) continue;
      if (!(json ? sameJsonRecord(existing, bytes) : bytesEqual(existing, bytes))) {
        throw new ImmutableArtifactError(join(snapshotDir, name));
      }
      frozen.set(name, existing);
    }
    // The session's iterations/ and raw/ take new entries: private too, however they were found.
    await prepareRecordDir(fs, paths.session.iterationsDir, durability);
    await prepareRecordDir(fs, paths.session.rawDir, durability);
    await ensurePrivateDir(fs, paths.iterationDir, durability);
    await ensurePrivateDir(fs, paths.rawDir, durability);
    for (const subarea of RAW_SUBAREAS) {
      await ensurePrivateDir(fs, paths.rawSubarea(subarea), durability);
    }
    await atomicReplace(fs, paths.promptTxt, encodeText(options.prompt), { durability });
    await writeJsonAtomic(fs, paths.pathsJson, options.pathsMap, durability);
    await writeJsonAtomic(fs, paths.traceRefJson, traceRef, durability);
    const snapshotHashes: Record<string, string> = {};
    if (snapshotFiles.length > 0) {
      await ensurePrivateDir(fs, snapshotDir, durability);
      for (const { name, bytes } of snapshotFiles) {
        const kept = frozen.get(name);
        if (kept === undefined) await freezeBytes(fs, join(snapshotDir, name), bytes, durability);
        else await ensureRecordDurable(fs, join(snapshotDir, name), durability);
        snapshotHashes[name] = sha256Ref(kept ?? bytes, resolved.sha256);
      }
    }
    return { paths, traceRef, snapshotHashes };
  });
}

/**
 * Writes an attempt's compact, recovery-critical `result.json` atomically, in either layout (a
 * running mirror session finishes under its own layout).
 *
 * The first write is always allowed, and writing the same record again does nothing (also when
 * the file holds it unescaped, as versions before JSON was ASCII-escaped wrote it). Rewriting it
 * with other contents is allowed only while the attempt is still running — the session's
 * `state.json` is `running` with this attempt (iteration, workflow and, when `trace_ref.json`
 * names one, attempt id) as its current task — and, in a mirror session, only while the
 * attempt's trace is not sealed (`trace_seals/<attempt_id>.json`). Otherwise the result of a
 * finished or sealed attempt is final: `ImmutableArtifactError` naming `result.json`. A
 * `result.json` that is not a regular file (a directory, FIFO, socket or device) is a
 * `LayoutRecordError` naming it, never waited on.
 *
 * The decision and the write run serialized with this process's updates of the session's
 * `state.json` (`updateSessionState`, keyed by its canonical path): a finish that commits while
 * a rewrite is being decided is either before it (the rewrite is refused) or after it (the
 * rewrite happened while the attempt ran), never between the check and the write. A rewrite of
 * a finished attempt is refused early, before waiting for that serialization, and is checked
 * again inside it. Must not be called from an `updateSessionState` change of the same session
 * (that task holds the key it would wait for).
 */
export async function writeAttemptResult(
  fs: FileSystem,
  paths: AttemptPaths,
  result: JsonObject,
  options: LayoutWriteOptions = {},
): Promise<void> {
  fs = confined(fs, paths.session.dir);
  const file = paths.resultJson;
  parseAttemptResult(result, file);
  // Where the result goes and whether a sealed trace makes it final follow the recorded layout.
  requireRecordedLayout(paths.session, await readSessionLayout(fs, paths.session.dir));
  const bytes = encodeRecord(result, file);
  const durability = resolveWriteOptions(options).durability;
  // Early refusal without queueing behind the state's writers; decided for good below. Read only
  // as a regular file: a FIFO planted there is refused by name, never waited on.
  const seen = await recordBytes(fs, file, true);
  if (seen !== undefined) {
    // Written already (maybe by a call that failed before its directory's fsync): made durable.
    if (sameJsonRecord(seen, bytes)) return await ensureRecordDurable(fs, file, durability);
    await requireRunningAttempt(fs, paths, file);
  }
  await serializedOn(fs, paths.session.stateJson, async () => {
    const existing = await recordBytes(fs, file, true);
    if (existing !== undefined) {
      if (sameJsonRecord(existing, bytes)) return await ensureRecordDurable(fs, file, durability);
      await requireRunningAttempt(fs, paths, file);
    }
    await prepareRecordDir(fs, dirname(file), durability);
    await atomicReplace(fs, file, bytes, { durability });
  });
}

/** Refuses (`ImmutableArtifactError`) unless the attempt of `paths` is running and not sealed. */
async function requireRunningAttempt(
  fs: FileSystem,
  paths: AttemptPaths,
  file: string,
): Promise<void> {
  const session = paths.session;
  const traceRef = await readRecordIfExists(
    fs,
    paths.traceRefJson,
    (value, at) => parseTraceRef(value, at, session.layout, paths),
  );
  const attemptId = traceRef?.record.attempt_id;
  if (session.layout === "mirror" && attemptId !== undefined) {
    const seal = session.traceSealReceipt(attemptId);
    if (await entryExists(fs, seal)) {
      throw new ImmutableArtifactError(
        file,
        `The attempt's trace is sealed (${seal}); its result is final`,
      );
    }
  }
  // The session's own state: one copied from another session says nothing of what this one runs.
  const state = await readSessionStateIfExists(fs, session.dir);
  const task = state?.current_task;
  const running = state?.status === "running" && task != null &&
    task.iteration === paths.iteration && task.workflow_id === paths.workflowId &&
    (attemptId === undefined || task.attempt_id === attemptId);
  if (!running) {
    throw new ImmutableArtifactError(
      file,
      "The attempt has finished (it is not the session's running task); its result is final",
    );
  }
}

/** Reads and validates an attempt's `trace_ref.json` for the session's layout. */
export async function readTraceRef(
  fs: FileSystem,
  paths: AttemptPaths,
): Promise<FoldedTraceRef | MirrorTraceRef> {
  fs = confined(fs, paths.session.dir);
  const layout = paths.session.layout;
  return (await readRecord(
    fs,
    paths.traceRefJson,
    (value, file) => parseTraceRef(value, file, layout, paths),
  ))
    .record;
}

async function entryExists(fs: FileSystem, path: string): Promise<boolean> {
  try {
    await fs.lstat(path);
    return true;
  } catch (error) {
    if (error instanceof NotFound) return false;
    throw error;
  }
}
