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
import { atomicReplace, ensurePrivateDir } from "../port/durable.ts";
import { join } from "../port/path.ts";
import { LayoutError, UnsupportedLayoutError } from "./errors.ts";
import {
  encodeJson,
  encodeText,
  freezeBytes,
  type JsonObject,
  type JsonValue,
  readRecord,
  sha256Ref,
  writeJsonAtomic,
} from "./json_io.ts";
import { type LayoutWriteOptions, resolveWriteOptions } from "./options.ts";
import { type AttemptPaths, RAW_SUBAREAS, type SessionPaths } from "./paths.ts";
import { type FoldedTraceRef, type MirrorTraceRef, parseTraceRef } from "./records.ts";
import { confined } from "./no_links.ts";

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
   * strings as text. Frozen: rewriting a file with other contents is refused.
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
 * workflow snapshot. Mirror sessions are read-only here (`UnsupportedLayoutError`).
 */
export async function createAttemptArtifacts(
  fs: FileSystem,
  session: SessionPaths,
  attempt: AttemptIdentity,
  options: CreateAttemptOptions,
): Promise<AttemptArtifacts> {
  fs = confined(fs, session.dir);
  if (session.layout !== "folded") {
    throw new UnsupportedLayoutError(session.dir, "Mirror sessions are read-only in this library");
  }
  const resolved = resolveWriteOptions(options);
  const durability = resolved.durability;
  const paths = session.attempt(attempt.iteration, attempt.workflowId);
  await ensurePrivateDir(fs, paths.iterationDir, durability);
  await ensurePrivateDir(fs, paths.rawDir, durability);
  for (const subarea of RAW_SUBAREAS) {
    await ensurePrivateDir(fs, paths.rawSubarea(subarea), durability);
  }
  await atomicReplace(fs, paths.promptTxt, encodeText(options.prompt), { durability });
  await writeJsonAtomic(fs, paths.pathsJson, options.pathsMap, durability);
  const traceRef: FoldedTraceRef = {
    schema_version: 1,
    raw_dir: paths.rawRelative,
    raw_dir_ref: paths.rawRef,
    attempt_id: attempt.attemptId,
    iteration: attempt.iteration,
    workflow_id: attempt.workflowId,
  };
  await writeJsonAtomic(fs, paths.traceRefJson, traceRef, durability);
  const snapshotHashes: Record<string, string> = {};
  const snapshot = options.snapshot ?? {};
  if (Object.keys(snapshot).length > 0) {
    const dir = paths.snapshotDir(attempt.attemptId);
    await ensurePrivateDir(fs, dir, durability);
    for (const [name, value] of Object.entries(snapshot)) {
      if (!SNAPSHOT_NAME.test(name)) {
        throw new LayoutError(`Snapshot file name is not a safe name: ${JSON.stringify(name)}`);
      }
      const bytes = typeof value === "string" ? encodeText(value) : encodeJson(value);
      await freezeBytes(fs, join(dir, name), bytes, durability);
      snapshotHashes[name] = sha256Ref(bytes, resolved.sha256);
    }
  }
  return { paths, traceRef, snapshotHashes };
}

/** Writes an attempt's compact, recovery-critical `result.json` atomically. */
export async function writeAttemptResult(
  fs: FileSystem,
  paths: AttemptPaths,
  result: JsonObject,
  options: LayoutWriteOptions = {},
): Promise<void> {
  fs = confined(fs, paths.session.dir);
  await writeJsonAtomic(fs, paths.resultJson, result, resolveWriteOptions(options).durability);
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
    (value, file) => parseTraceRef(value, file, layout),
  ))
    .record;
}
