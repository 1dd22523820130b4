/**
 * Mirror-layout traces, read and verified, never rewritten. Sessions created before the folded
 * layout keep their raw attempt output in a parallel tree,
 * `.loopy_loop/traces/<root>/sessions/<session>/attempts/<attempt_id>/`, each attempt with a
 * `trace_manifest.json`. Sealing froze the attempt's bytes into the manifest's hashed inventory
 * and anchored the manifest in the session as `trace_seals/<attempt_id>.json`.
 *
 * This module lists those traces with their integrity (`not_finalized`, `verified`, `failed`),
 * inspects one (the manifest plus the observed integrity, file by file), verifies one (a
 * mismatch is a `TraceIntegrityError` naming the file), and checks a session's seal receipts.
 * Nothing here writes. Walks never follow a symlink; an inventory path that is absolute or uses
 * `..` is reported as a manifest error and never read.
 *
 * The inventory root hash is the engine's: SHA-256 over the inventory as compact JSON with
 * sorted keys and every non-ASCII character escaped (`json.dumps(sort_keys=True,
 * separators=(",", ":"))`), which is exact for inventories of strings and integers.
 *
 * @module
 */
import * as v from "valibot";
import type { FileSystem } from "../port/fs.ts";
import { FsError, NotADirectory, NotFound } from "../port/errors.ts";
import { basename, dirname, isAbsolute, join, normalize, relativeWithin } from "../port/path.ts";
import { portableSha256, type Sha256Factory, sha256Hex, sha256OfHandle } from "../port/sha256.ts";
import { entryKind } from "../port/durable.ts";
import { openIfRegularWaiting } from "../port/regular.ts";
import {
  LayoutRecordError,
  LoopyRootError,
  TopologyError,
  TraceIntegrityError,
  TraceLookupError,
} from "./errors.ts";
import { isSafeFileId, isSafeId, isSessionId } from "./ids.ts";
import { decodeJson, parseWithSchema, recordBytes } from "./json_io.ts";
import {
  chainKind,
  isPruningName,
  openLoopyRoot,
  PRUNING_PREFIX,
  throwRefusal,
  walkSessionDirs,
} from "./loopy_root.ts";
import type { JsonObject } from "./json_io.ts";
import { canonicalPath, confined, loopyDirOf } from "./no_links.ts";
import { mirrorAttemptTraceDir, SessionPaths } from "./paths.ts";
import { preview } from "../loop/errors.ts";
import { loadSessionTree } from "./tree.ts";
import { traceManifestIdField } from "./_trace_id.ts";
import { compareCodePoints } from "./_py_text.ts";
import { engineJson } from "./_engine_json.ts";

/** The name of a mirror attempt's manifest. */
export const TRACE_MANIFEST_FILENAME: string = "trace_manifest.json";

/** The integrity of a trace: not sealed yet, sealed and intact, or sealed and broken. */
export type TraceIntegrityStatus = "not_finalized" | "verified" | "failed";

/** The lifecycles of a finalized (sealed) trace. */
const FINALIZED = new Set(["sealed", "incomplete"]);

const SHA256 = /^sha256:[0-9a-f]{64}$/;

// ---------------------------------------------------------------------------------------------
// Records

/** A trace seal receipt `trace_seals/<attempt_id>.json` of a mirror session. */
export interface TraceSealReceipt {
  /** Always 1. */
  readonly schema_version: 1;
  /** The sealed manifest's id (`trace-<attempt_id>`). */
  readonly manifest_id: string;
  /** The session the attempt belongs to. */
  readonly session_id: string;
  /** The attempt. */
  readonly attempt_id: string;
  /** `sha256:` of the manifest file's bytes. */
  readonly manifest_sha256: string;
  /** `sha256:` of the inventory (see `traceInventoryRootSha256`). */
  readonly inventory_root_sha256: string;
  /** The manifest's lifecycle when sealed (`sealed` or `incomplete`). */
  readonly lifecycle: string;
  /** When it was sealed. */
  readonly sealed_at: string | null;
}

const TraceSealSchema: v.GenericSchema<unknown, TraceSealReceipt> = v.looseObject({
  schema_version: v.literal(1),
  manifest_id: v.pipe(v.string(), v.check(isSafeId, "Expected a safe id")),
  session_id: v.pipe(v.string(), v.check(isSessionId, "Expected a session id")),
  attempt_id: v.pipe(v.string(), v.check(isSafeId, "Expected a safe id")),
  manifest_sha256: v.pipe(v.string(), v.regex(SHA256, "Expected sha256:<64 lowercase hex>")),
  inventory_root_sha256: v.pipe(v.string(), v.regex(SHA256, "Expected sha256:<64 lowercase hex>")),
  lifecycle: v.string(),
  sealed_at: v.nullable(v.string()),
});

/** Validates a trace seal receipt. */
export function parseTraceSealReceipt(value: unknown, file: string): TraceSealReceipt {
  return parseWithSchema(TraceSealSchema, value, file, "trace seal receipt");
}

/**
 * The id of a mirror trace manifest, read the way the engine reads it: the first string among
 * `trace_manifest_id`, `manifest_id`, `trace_id`, `attempt_id`; `undefined` when there is none.
 */
export function traceManifestId(value: unknown): string | undefined {
  return traceManifestIdField(value)?.id;
}

/**
 * `sha256:` of a manifest's inventory as the seal receipt binds it: the inventory serialized as
 * compact JSON with sorted keys and every non-ASCII character escaped as `\uXXXX`.
 */
export function traceInventoryRootSha256(
  inventory: unknown,
  factory: Sha256Factory = portableSha256,
): string {
  return `sha256:${sha256Hex(new TextEncoder().encode(engineJson(inventory)), factory)}`;
}

// ---------------------------------------------------------------------------------------------
// Locating traces

/** Where a trace manifest was found. */
export interface TraceLocation {
  /** The trace directory (the attempt's directory in the mirror tree). */
  readonly traceDir: string;
  /** Its `trace_manifest.json`. */
  readonly manifestPath: string;
  /** The manifest entry's own kind (`symlink` manifests are never read). */
  readonly manifestKind: "file" | "directory" | "symlink" | "other";
  /**
   * The names of the attempt's trace directory the manifest sits in,
   * `traces/<root>/sessions/<session>/attempts/<attempt_id>/` (a finalized manifest's `identity`
   * must name the same session and attempt); `undefined` for a manifest anywhere else, which is
   * misplaced: listed and inspected as `failed`, never the target of a `trace:` reference.
   */
  readonly directory?: TraceDirectoryNames | undefined;
}

/** The names along a trace's conventional directory `traces/<root>/sessions/<session>/attempts/<attempt_id>/`. */
export interface TraceDirectoryNames {
  /** The `<root>` directory's name: the root session of the tree. */
  readonly rootSessionId: string;
  /** The `<session>` directory's name: the session the attempt belongs to. */
  readonly sessionId: string;
  /** The `<attempt_id>` directory's name: the attempt. */
  readonly attemptId: string;
}

/**
 * The names along `traceDir` when it is an attempt's trace directory
 * `<tracesDir>/<root>/sessions/<session>/attempts/<attempt_id>` (each name a safe id), else
 * `undefined`. Pure.
 */
export function traceDirectoryNames(
  tracesDir: string,
  traceDir: string,
): TraceDirectoryNames | undefined {
  const relative = relativeWithin(tracesDir, traceDir);
  const parts = relative === undefined || relative === "" ? [] : relative.split("/");
  if (parts.length !== 5 || parts[1] !== "sessions" || parts[3] !== "attempts") return undefined;
  const [rootSessionId, , sessionId, , attemptId] = parts as [
    string,
    string,
    string,
    string,
    string,
  ];
  if (![rootSessionId, sessionId, attemptId].every(isSafeId)) return undefined;
  return { rootSessionId, sessionId, attemptId };
}

/** Options of `scanTraceManifests`. */
export interface TraceScanOptions {
  /** Only the part of one tree, `<tracesDir>/<rootSessionId>/`. */
  readonly rootSessionId?: string | undefined;
}

/**
 * Finds every `trace_manifest.json` below `tracesDir` (the repository's `.loopy_loop/traces/`),
 * in path order as the engine sorts its paths (`sorted()` of `Path` values: part by part, each
 * compared by code point, a path before the longer ones it begins). The engine writes a manifest
 * only in an attempt's trace directory `<root>/sessions/<session>/attempts/<attempt_id>/`; such a
 * directory is a trace (its `directory` names are set) and the walk does not look inside it,
 * since everything below it is the trace's own content, checked against its inventory. A manifest
 * anywhere else is returned too, with no `directory` (misplaced), and the walk goes on below it,
 * so that it hides no trace. Symlinked directories are not entered and entries a prune renamed
 * away (`.pruning-*`) are gone. A start that is not a directory (missing, a file, below a file)
 * holds no trace.
 */
export async function scanTraceManifests(
  fs: FileSystem,
  tracesDir: string,
  options: TraceScanOptions = {},
): Promise<TraceLocation[]> {
  const found: TraceLocation[] = [];
  const visit = async (current: string): Promise<void> => {
    let entries;
    try {
      entries = await fs.readDir(current);
    } catch (error) {
      if (error instanceof NotFound) return;
      throw error;
    }
    const manifest = entries.find((entry) => entry.name === TRACE_MANIFEST_FILENAME);
    if (manifest !== undefined) {
      const directory = traceDirectoryNames(tracesDir, current);
      found.push({
        traceDir: current,
        manifestPath: join(current, TRACE_MANIFEST_FILENAME),
        manifestKind: manifest.kind,
        directory,
      });
      if (directory !== undefined) return;
    }
    for (const entry of entries) {
      if (entry.kind !== "directory" || entry.name.startsWith(PRUNING_PREFIX)) continue;
      await visit(join(current, entry.name));
    }
  };
  const start = options.rootSessionId === undefined
    ? tracesDir
    : join(tracesDir, options.rootSessionId);
  try {
    if ((await fs.lstat(start)).kind !== "directory") return found;
  } catch (error) {
    // Below a regular file (the traces directory itself a file) there is no trace either.
    if (error instanceof NotFound || error instanceof NotADirectory) return found;
    throw error;
  }
  await visit(start);
  const parts = new Map(found.map((location) => [location, location.manifestPath.split("/")]));
  return found.sort((a, b) => compareParts(parts.get(a) ?? [], parts.get(b) ?? []));
}

/** Compares two paths split into parts as Python compares `Path` values: part by part. */
function compareParts(a: readonly string[], b: readonly string[]): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const order = compareCodePoints(a[i] as string, b[i] as string);
    if (order !== 0) return order;
  }
  return a.length - b.length;
}

// ---------------------------------------------------------------------------------------------
// Integrity

/** A listed file whose bytes do not match the inventory. */
export interface TraceFileMismatch {
  /** The trace-relative path. */
  readonly path: string;
  /** The hash the inventory lists. */
  readonly expected_sha256: string;
  /** The size the inventory lists. */
  readonly expected_size: number;
  /** The observed hash, when the file could be read. */
  readonly actual_sha256?: string;
  /** The observed size, when the file could be read. */
  readonly actual_size?: number;
  /** Why the file could not be compared (a symlink, not a regular file). */
  readonly error?: string;
}

/** The verdict on one file the inventory lists. */
export interface TraceFileCheck {
  /** The trace-relative path. */
  readonly path: string;
  /** `ok`, `modified` (other bytes), `missing`, or `not_a_file` (a symlink or a directory). */
  readonly status: "ok" | "modified" | "missing" | "not_a_file";
  /** The hash the inventory lists. */
  readonly expected_sha256: string;
  /** The observed hash (`null` when missing or not a file). */
  readonly actual_sha256: string | null;
}

/**
 * What a trace's seal receipt says: `verified` (the receipt matches the manifest), `mismatch`,
 * `missing` (the session exists but has no receipt), or `not_required` (an active trace, or a
 * trace with no session to anchor in).
 */
export type TraceSealStatus = "verified" | "mismatch" | "missing" | "not_required";

/** What the seal receipt of a finalized trace says about its manifest. */
export interface TraceSealObservation {
  /** The seal status; see `TraceSealStatus`. */
  readonly status: TraceSealStatus;
  /** The receipt's path, when the session could be located. */
  readonly receipt_path: string | null;
  /** What does not match. */
  readonly errors: readonly string[];
}

/**
 * The observed integrity of a trace, in the engine's JSON shape (`observed_integrity`), plus the
 * per-file verdicts and the seal observation.
 */
export interface TraceIntegrityReport {
  /** The overall status. */
  readonly status: TraceIntegrityStatus;
  /** Files the inventory lists. */
  readonly expected_file_count: number;
  /** Files found in the trace directory (the manifest excluded). */
  readonly actual_file_count: number;
  /** Files present but not listed. */
  readonly added: readonly string[];
  /** Files listed but absent. */
  readonly removed: readonly string[];
  /** Listed files whose bytes, size or kind differ. */
  readonly modified: readonly TraceFileMismatch[];
  /** Problems of the manifest itself, seal problems included. */
  readonly manifest_errors: readonly string[];
  /** Every listed file's verdict, in inventory order. */
  readonly files: readonly TraceFileCheck[];
  /** The seal receipt observation. */
  readonly seal: TraceSealObservation;
}

/** Options of the trace readers. */
export interface TraceReadOptions {
  /** SHA-256 implementation; default the portable one. */
  readonly sha256?: Sha256Factory | undefined;
}

/** Session directories by id, for locating seal receipts (`undefined` entry: ambiguous id). */
type SessionDirIndex = ReadonlyMap<string, string | undefined>;

async function sessionDirIndex(fs: FileSystem, sessionsDir: string): Promise<SessionDirIndex> {
  const index = new Map<string, string | undefined>();
  const walk = await walkSessionDirs(fs, sessionsDir);
  // A session the filesystem refuses to show would look like one without seals to check.
  throwRefusal(walk);
  for (const session of walk.sessions) {
    index.set(session.sessionId, index.has(session.sessionId) ? undefined : session.dir);
  }
  return index;
}

/**
 * Size and `sha256:` of the file at `path`, read in chunks through a handle opened only if it is
 * a regular file (never through a link, never waiting on a FIFO swapped in since the listing):
 * an error entry for anything else, undefined when nothing is there any more.
 */
async function hashFile(
  fs: FileSystem,
  path: string,
  factory: Sha256Factory,
): Promise<Observed | undefined> {
  const opened = await openIfRegularWaiting(fs, path);
  if (opened === undefined) return undefined;
  if (typeof opened === "string") {
    return {
      error: opened === "symlink" ? "path is a symbolic link" : "path is not a regular file",
    };
  }
  const handle = opened.handle;
  try {
    const { size, hex } = await sha256OfHandle(handle, factory) as { size: number; hex: string };
    return { size, sha256: `sha256:${hex}` };
  } finally {
    await handle.close();
  }
}

/** A valid trace-relative member path: relative, no empty, `.` or `..` segment, no backslash. */
function isMemberPath(path: string): boolean {
  if (path === "" || isAbsolute(path) || path.includes("\\") || path.includes("\u0000")) {
    return false;
  }
  return path.split("/").every((segment) => segment !== "" && segment !== "." && segment !== "..");
}

interface ExpectedFile {
  readonly size: number;
  readonly sha256: string;
}

function validatedInventory(
  manifest: Record<string, unknown>,
): { expected: Map<string, ExpectedFile>; errors: string[] } {
  const expected = new Map<string, ExpectedFile>();
  const errors: string[] = [];
  const inventory = manifest.inventory;
  if (!Array.isArray(inventory)) return { expected, errors: ["manifest inventory is not a list"] };
  for (const [index, item] of inventory.entries()) {
    const label = `inventory[${index}]`;
    if (typeof item !== "object" || item === null || Array.isArray(item)) {
      errors.push(`${label} is not an object`);
      continue;
    }
    const record = item as Record<string, unknown>;
    const path = record.path;
    if (typeof path !== "string" || path === "") {
      errors.push(`${label}.path is not a non-empty string`);
      continue;
    }
    if (!isMemberPath(path) || path === TRACE_MANIFEST_FILENAME) {
      errors.push(`${label}.path is not a valid trace-relative member: ${preview(path)}`);
      continue;
    }
    if (expected.has(path)) {
      errors.push(`manifest inventory repeats path ${JSON.stringify(path)}`);
      continue;
    }
    const size = record.size;
    const sha256 = record.sha256;
    if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0) {
      errors.push(`${label}.size is not a non-negative integer`);
      continue;
    }
    if (typeof sha256 !== "string" || !SHA256.test(sha256)) {
      errors.push(`${label}.sha256 is not a canonical SHA-256 digest`);
      continue;
    }
    expected.set(path, { size, sha256 });
  }
  return { expected, errors };
}

type Observed = { readonly size: number; readonly sha256: string } | { readonly error: string };

/** Every file below the trace directory (the manifest excluded), never following a link. */
async function observeTraceFiles(
  fs: FileSystem,
  traceDir: string,
  factory: Sha256Factory,
): Promise<Map<string, Observed>> {
  const observed = new Map<string, Observed>();
  const visit = async (dir: string, prefix: string): Promise<void> => {
    for (const entry of await fs.readDir(dir)) {
      const relative = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
      if (relative === TRACE_MANIFEST_FILENAME) continue;
      const path = join(dir, entry.name);
      if (entry.kind === "directory") await visit(path, relative);
      else if (entry.kind === "symlink") {
        observed.set(relative, { error: "path is a symbolic link" });
      } else if (entry.kind !== "file") {
        observed.set(relative, { error: "path is not a regular file" });
      } else {
        const seen = await hashFile(fs, path, factory);
        if (seen !== undefined) observed.set(relative, seen);
      }
    }
  };
  await visit(traceDir, "");
  return observed;
}

async function observeSeal(
  fs: FileSystem,
  manifest: Record<string, unknown>,
  manifestSha256: string,
  sessions: SessionDirIndex,
  factory: Sha256Factory,
): Promise<TraceSealObservation> {
  const identity = manifest.identity;
  if (typeof identity !== "object" || identity === null || Array.isArray(identity)) {
    return {
      status: "mismatch",
      receipt_path: null,
      errors: ["finalized trace identity is invalid"],
    };
  }
  const sessionId = (identity as Record<string, unknown>).session_id;
  const attemptId = (identity as Record<string, unknown>).attempt_id;
  // The attempt id names the receipt's file: one too long for a file name locates nothing.
  if (
    typeof sessionId !== "string" || typeof attemptId !== "string" || !isSafeId(sessionId) ||
    !isSafeFileId(attemptId, ".json")
  ) {
    return {
      status: "mismatch",
      receipt_path: null,
      errors: ["finalized trace identity cannot locate its seal receipt"],
    };
  }
  if (!sessions.has(sessionId)) {
    // A trace with no session plane (a legacy or unit-created trace) has nothing to anchor in.
    return { status: "not_required", receipt_path: null, errors: [] };
  }
  const sessionDir = sessions.get(sessionId);
  if (sessionDir === undefined) {
    return {
      status: "mismatch",
      receipt_path: null,
      errors: [`session id ${JSON.stringify(sessionId)} is ambiguous; its seal cannot be located`],
    };
  }
  const receiptPath = new SessionPaths(sessionDir, "mirror").traceSealReceipt(attemptId);
  // Every directory on the way to the receipt is checked, not only its own entry: a receipt is
  // never read through a link (`trace_seals/` planted as one included).
  fs = confined(fs, receiptPath);
  let kind: string | undefined;
  try {
    kind = await entryKind(fs, receiptPath);
  } catch (error) {
    if (error instanceof FsError && error.code === "ENAMETOOLONG") {
      // The receipt's path (its session's directory included) is too long to look up.
      return {
        status: "mismatch",
        receipt_path: receiptPath,
        errors: ["trace seal receipt path is too long to be looked up"],
      };
    }
    if (error instanceof NotADirectory) {
      // `trace_seals/` (or a directory above it) is a regular file: no receipt can be there.
      return {
        status: "mismatch",
        receipt_path: receiptPath,
        errors: ["trace_seals is not a directory"],
      };
    }
    if (!(error instanceof TopologyError)) throw error;
    return {
      status: "mismatch",
      receipt_path: receiptPath,
      errors: [`trace seal receipt is reached through a symlink: ${error.message}`],
    };
  }
  if (kind === undefined) {
    return {
      status: "missing",
      receipt_path: receiptPath,
      errors: ["finalized trace has no compact seal receipt"],
    };
  }
  if (kind !== "file") {
    return {
      status: "mismatch",
      receipt_path: receiptPath,
      errors: [`trace seal receipt is not a regular file (${kind})`],
    };
  }
  let receipt: Record<string, unknown>;
  try {
    const value = decodeJson(await recordBytes(fs, receiptPath, false) as Uint8Array, receiptPath);
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new LayoutRecordError(receiptPath, "Trace seal receipt is not a JSON object");
    }
    receipt = value as Record<string, unknown>;
  } catch (error) {
    if (!(error instanceof LayoutRecordError)) throw error;
    return {
      status: "mismatch",
      receipt_path: receiptPath,
      errors: ["trace seal receipt is unreadable"],
    };
  }
  if (receipt.schema_version !== 1) {
    return {
      status: "mismatch",
      receipt_path: receiptPath,
      errors: ["trace seal receipt schema is invalid"],
    };
  }
  const expected: Record<string, unknown> = {
    manifest_id: manifest.manifest_id,
    session_id: sessionId,
    attempt_id: attemptId,
    manifest_sha256: manifestSha256,
    inventory_root_sha256: traceInventoryRootSha256(manifest.inventory, factory),
    lifecycle: manifest.lifecycle,
    sealed_at: manifest.sealed_at,
  };
  const errors: string[] = [];
  for (const [key, value] of Object.entries(expected)) {
    if (receipt[key] !== value) errors.push(`trace seal receipt field '${key}' does not match`);
  }
  return {
    status: errors.length === 0 ? "verified" : "mismatch",
    receipt_path: receiptPath,
    errors,
  };
}

/**
 * How a manifest's `identity` contradicts the directory it sits in: the engine creates a trace at
 * `traces/<root>/sessions/<session_id>/attempts/<attempt_id>/` from the same identity it records,
 * so a finalized manifest naming another session or attempt is not the trace of its directory.
 */
function directoryIdentityErrors(
  manifest: Record<string, unknown>,
  directory: TraceDirectoryNames,
): string[] {
  const errors: string[] = [];
  for (
    const [field, name] of [
      ["session_id", directory.sessionId],
      ["attempt_id", directory.attemptId],
    ] as const
  ) {
    const value = identityField(manifest, field);
    if (value !== name) {
      errors.push(
        `trace manifest field 'identity.${field}' (${
          value === null ? "missing" : preview(value)
        }) does not match its directory (${JSON.stringify(name)})`,
      );
    }
  }
  return errors;
}

/**
 * How a seal receipt contradicts the manifest it seals, field by field, compared directly (not
 * through the session the manifest's identity names, which an edited manifest can point
 * anywhere): the receipt's `manifest_sha256` and `inventory_root_sha256` must be those of the
 * manifest as it is now, and its `manifest_id`, `session_id`, `attempt_id`, `lifecycle` and
 * `sealed_at` the manifest's.
 */
function receiptContradictions(
  manifest: Record<string, unknown>,
  manifestSha256: string,
  receipt: TraceSealReceipt,
  factory: Sha256Factory,
): string[] {
  const expected: Record<string, unknown> = {
    manifest_id: manifest.manifest_id,
    session_id: identityField(manifest, "session_id"),
    attempt_id: identityField(manifest, "attempt_id"),
    manifest_sha256: manifestSha256,
    inventory_root_sha256: traceInventoryRootSha256(manifest.inventory, factory),
    lifecycle: manifest.lifecycle,
    sealed_at: manifest.sealed_at,
  };
  const errors: string[] = [];
  for (const [key, value] of Object.entries(expected)) {
    const recorded = (receipt as unknown as Record<string, unknown>)[key];
    if (recorded !== value) errors.push(`trace seal receipt field '${key}' does not match`);
  }
  return errors;
}

/** The problem of a manifest outside an attempt's trace directory. */
const MISPLACED_MANIFEST = "trace manifest is not in an attempt's trace directory " +
  "(traces/<root>/sessions/<session>/attempts/<attempt_id>/), where the engine writes every one";

const NOT_FINALIZED: TraceIntegrityReport = {
  status: "not_finalized",
  expected_file_count: 0,
  actual_file_count: 0,
  added: [],
  removed: [],
  modified: [],
  manifest_errors: [],
  files: [],
  seal: { status: "not_required", receipt_path: null, errors: [] },
};

/** The problem of an unfinalized manifest whose trace was sealed. */
const SEALED_BUT_UNFINALIZED = "the sealed trace's manifest is not finalized, and its session " +
  "holds its seal receipt";

/**
 * The seal receipt that the session of the attempt's trace directory `directory` holds for it,
 * when there is an entry at its path (never looked up through a link); `undefined` when there is
 * none, or when it cannot be located (an ambiguous session id, a path too long, `trace_seals/` a
 * file or reached through a link). Sealing is final: the engine writes the receipt, naming the
 * sealed manifest's hash, only once the manifest is sealed, so a receipt beside an unfinalized
 * manifest says the manifest was edited back.
 */
async function receiptOfUnfinalized(
  fs: FileSystem,
  directory: TraceDirectoryNames,
  sessions: SessionDirIndex,
): Promise<string | undefined> {
  const sessionDir = sessions.get(directory.sessionId);
  if (sessionDir === undefined || !isSafeFileId(directory.attemptId, ".json")) return undefined;
  const receiptPath = new SessionPaths(sessionDir, "mirror").traceSealReceipt(directory.attemptId);
  try {
    const kind = await entryKind(confined(fs, receiptPath), receiptPath);
    return kind === undefined ? undefined : receiptPath;
  } catch (error) {
    if (
      (error instanceof FsError && error.code === "ENAMETOOLONG") ||
      error instanceof NotADirectory || error instanceof TopologyError
    ) return undefined;
    throw error;
  }
}

/** Compares a trace's files with its manifest's inventory and its seal receipt. */
async function verifyIntegrity(
  fs: FileSystem,
  location: TraceLocation,
  { manifest, sha256: manifestSha256 }: ManifestRead,
  sessions: SessionDirIndex,
  factory: Sha256Factory,
): Promise<TraceIntegrityReport> {
  const misplaced = location.directory === undefined ? [MISPLACED_MANIFEST] : [];
  if (typeof manifest.lifecycle !== "string" || !FINALIZED.has(manifest.lifecycle)) {
    if (location.directory === undefined) {
      return { ...NOT_FINALIZED, status: "failed", manifest_errors: misplaced };
    }
    const receipt = await receiptOfUnfinalized(fs, location.directory, sessions);
    if (receipt === undefined) return NOT_FINALIZED;
    return {
      ...NOT_FINALIZED,
      status: "failed",
      manifest_errors: [SEALED_BUT_UNFINALIZED],
      seal: { status: "mismatch", receipt_path: receipt, errors: [] },
    };
  }
  const { expected, errors } = validatedInventory(manifest);
  errors.unshift(...misplaced);
  if (typeof manifest.sealed_at !== "string" || manifest.sealed_at === "") {
    errors.push("finalized trace has no sealed_at timestamp");
  }
  if (location.directory !== undefined) {
    errors.push(...directoryIdentityErrors(manifest, location.directory));
  }
  const seal = await observeSeal(fs, manifest, manifestSha256, sessions, factory);
  errors.push(...seal.errors);
  const observed = await observeTraceFiles(fs, location.traceDir, factory);
  const added = [...observed.keys()].filter((path) => !expected.has(path)).sort(compareCodePoints);
  const removed = [...expected.keys()].filter((path) => !observed.has(path))
    .sort(compareCodePoints);
  const modified: TraceFileMismatch[] = [];
  const files: TraceFileCheck[] = [];
  for (const [path, want] of expected) {
    const seen = observed.get(path);
    if (seen === undefined) {
      files.push({ path, status: "missing", expected_sha256: want.sha256, actual_sha256: null });
      continue;
    }
    if ("error" in seen) {
      modified.push({
        path,
        expected_sha256: want.sha256,
        expected_size: want.size,
        error: seen.error,
      });
      files.push({ path, status: "not_a_file", expected_sha256: want.sha256, actual_sha256: null });
      continue;
    }
    const same = seen.size === want.size && seen.sha256 === want.sha256;
    if (!same) {
      modified.push({
        path,
        expected_sha256: want.sha256,
        actual_sha256: seen.sha256,
        expected_size: want.size,
        actual_size: seen.size,
      });
    }
    files.push({
      path,
      status: same ? "ok" : "modified",
      expected_sha256: want.sha256,
      actual_sha256: seen.sha256,
    });
  }
  modified.sort((a, b) => compareCodePoints(a.path, b.path));
  const clean = added.length === 0 && removed.length === 0 && modified.length === 0 &&
    errors.length === 0;
  return {
    status: clean ? "verified" : "failed",
    expected_file_count: expected.size,
    actual_file_count: observed.size,
    added,
    removed,
    modified,
    manifest_errors: errors,
    files,
    seal,
  };
}

/** A trace manifest as read: the JSON object, and the `sha256:` of the bytes it was parsed from. */
interface ManifestRead {
  readonly manifest: Record<string, unknown>;
  readonly sha256: string;
}

/**
 * Reads a manifest as a JSON object, with the digest of the very bytes parsed (a seal receipt
 * names that digest: hashing the file again could see other bytes, or a FIFO swapped in). A
 * symlink is refused, bad JSON is a `LayoutRecordError`.
 */
async function readManifest(
  fs: FileSystem,
  location: TraceLocation,
  factory: Sha256Factory,
): Promise<ManifestRead> {
  if (location.manifestKind !== "file") {
    throw new LayoutRecordError(
      location.manifestPath,
      `Trace manifest is not a regular file (${location.manifestKind})`,
    );
  }
  const bytes = await recordBytes(fs, location.manifestPath, false) as Uint8Array;
  const value = decodeJson(bytes, location.manifestPath);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new LayoutRecordError(location.manifestPath, "Trace manifest is not a JSON object");
  }
  const hash = factory();
  hash.update(bytes);
  return { manifest: value as Record<string, unknown>, sha256: `sha256:${hash.digestHex()}` };
}

// ---------------------------------------------------------------------------------------------
// traces list / inspect / verify

/** One trace of `listTraces`. */
export interface TraceListEntry {
  /**
   * The manifest id (`trace-<attempt_id>`), read as a lookup reads it (`traceManifestId`); `null`
   * when the manifest is unreadable or holds none.
   */
  readonly manifestId: string | null;
  /** The recorded lifecycle (`active`, `sealed`, `incomplete`), `null` when unreadable. */
  readonly lifecycle: string | null;
  /** The observed integrity; an unreadable manifest is `failed`. */
  readonly integrity: TraceIntegrityStatus;
  /** The seal receipt's status, `null` when the manifest is unreadable. */
  readonly seal: TraceSealStatus | null;
  /** The session the attempt belongs to (`identity.session_id`). */
  readonly sessionId: string | null;
  /** The attempt's workflow (`identity.workflow_id`). */
  readonly workflowId: string | null;
  /** The attempt (`identity.attempt_id`). */
  readonly attemptId: string | null;
  /** The manifest (absolute). */
  readonly manifestPath: string;
  /** The trace directory (absolute). */
  readonly traceDir: string;
  /** Why the integrity failed, in words (empty when it did not). */
  readonly problems: readonly string[];
}

function identityField(manifest: Record<string, unknown>, key: string): string | null {
  const identity = manifest.identity;
  if (typeof identity !== "object" || identity === null) return null;
  const value = (identity as Record<string, unknown>)[key];
  return typeof value === "string" ? value : null;
}

function problemsOf(report: TraceIntegrityReport): string[] {
  return [
    ...report.manifest_errors,
    ...report.modified.map((item) =>
      `modified: ${item.path}${item.error ? ` (${item.error})` : ""}`
    ),
    ...report.removed.map((path) => `removed: ${path}`),
    ...report.added.map((path) => `added: ${path}`),
  ];
}

/**
 * Lists every trace manifest under `.loopy_loop/traces/` with its lifecycle and observed
 * integrity (each listed file hashed, each seal receipt checked), in path order. An unreadable
 * manifest is listed as `failed` with the reason, and so is a manifest outside an attempt's trace
 * directory `traces/<root>/sessions/<session>/attempts/<attempt_id>/` (see
 * `scanTraceManifests`: it hides none of the traces below it); nothing is followed through a
 * symlink and nothing is written. `loopyRoot` is the `.loopy_loop/` directory (see `findLoopyRoot`).
 *
 * @example List the traces of a repository without any
 * ```ts
 * import { listTraces } from "@loop/sessions/layout";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * await fs.mkdir("/repo/.loopy_loop/sessions", { recursive: true });
 * if ((await listTraces(fs, "/repo/.loopy_loop")).length !== 0) throw new Error("unexpected");
 * ```
 */
export async function listTraces(
  fs: FileSystem,
  loopyRoot: string,
  options: TraceReadOptions = {},
): Promise<TraceListEntry[]> {
  const root = await openLoopyRoot(fs, loopyRoot);
  await requireRealTracesDir(fs, root.tracesDir);
  const factory = options.sha256 ?? portableSha256;
  const sessions = await sessionDirIndex(fs, root.sessionsDir);
  const out: TraceListEntry[] = [];
  for (const location of await scanTraceManifests(fs, root.tracesDir)) {
    // A record error of one trace (its manifest unreadable, or found wrong while verifying it)
    // is that trace's failure: it hides none of the others.
    let manifest: Record<string, unknown> | undefined;
    try {
      const read = await readManifest(fs, location, factory);
      manifest = read.manifest;
      const report = await verifyIntegrity(fs, location, read, sessions, factory);
      out.push({
        ...listedManifest(location, manifest),
        integrity: report.status,
        seal: report.seal.status,
        problems: problemsOf(report),
      });
    } catch (error) {
      // A trace removed since the scan found it (a prune of the mirror traces) is not listed.
      if (error instanceof NotFound && (await entryKind(fs, location.manifestPath)) === undefined) {
        continue;
      }
      if (!(error instanceof LayoutRecordError)) throw error;
      out.push({
        ...listedManifest(location, manifest),
        integrity: "failed",
        seal: null,
        problems: [error.message],
      });
    }
  }
  return out;
}

/** The fields of a `listTraces` entry the manifest gives (`null` when it was not read). */
function listedManifest(
  location: TraceLocation,
  manifest: Record<string, unknown> | undefined,
): Omit<TraceListEntry, "integrity" | "seal" | "problems"> {
  const field = (value: unknown): string | null => typeof value === "string" ? value : null;
  return {
    // The id a lookup finds the trace by (`traceManifestId`), whichever key holds it.
    manifestId: traceManifestId(manifest) ?? null,
    lifecycle: field(manifest?.lifecycle),
    sessionId: manifest === undefined ? null : identityField(manifest, "session_id"),
    workflowId: manifest === undefined ? null : identityField(manifest, "workflow_id"),
    attemptId: manifest === undefined ? null : identityField(manifest, "attempt_id"),
    manifestPath: location.manifestPath,
    traceDir: location.traceDir,
  };
}

async function requireRealTracesDir(fs: FileSystem, tracesDir: string): Promise<void> {
  if ((await entryKind(fs, tracesDir)) === "symlink") {
    throw new LoopyRootError(tracesDir, "The traces directory is a symlink");
  }
}

/** One trace, inspected: the manifest as recorded plus its observed integrity. */
export interface TraceInspection {
  /** The manifest (absolute). */
  readonly manifestPath: string;
  /** The trace directory (absolute). */
  readonly traceDir: string;
  /** The manifest as recorded (its `inventory` lists every sealed file). */
  readonly manifest: JsonObject;
  /** The overall integrity (`observedIntegrity.status`). */
  readonly integrity: TraceIntegrityStatus;
  /** The observed integrity, file by file. */
  readonly observedIntegrity: TraceIntegrityReport;
}

/**
 * Finds one trace by manifest id (`trace-<attempt_id>`), attempt id, or path. A reference with a
 * `/` is a path (absolute, or relative to the repository root) naming a trace directory or its
 * `trace_manifest.json` inside `.loopy_loop/traces/`; anything else is an id. A manifest that
 * cannot be read (not a regular file, or not a record) matches no id, except that of its own
 * trace directory (`attempts/<attempt_id>/`): named by that attempt id or by
 * `trace-<attempt_id>`, and matched by no readable manifest's id, its damage is thrown as its
 * `LayoutRecordError`. An id that nothing matches is `not_found`, whose message names an
 * unreadable manifest when there is one. An entry a prune renamed away (`.pruning-*`, in any
 * letter case) is gone: a path through one is `not_found`, as the trace is by id. Throws
 * `TraceLookupError` (`not_found`, `ambiguous`, `outside`, `not_a_manifest`, `symlink`).
 */
export async function locateTrace(
  fs: FileSystem,
  loopyRoot: string,
  reference: string,
): Promise<TraceLocation> {
  const root = await openLoopyRoot(fs, loopyRoot);
  await requireRealTracesDir(fs, root.tracesDir);
  if (reference.includes("/")) {
    return await locateByPath(fs, root.repoRoot, root.tracesDir, reference);
  }
  const byId: TraceLocation[] = [];
  const byAttempt: TraceLocation[] = [];
  /** Manifests that cannot be read (not a regular file, or not a record), with their errors. */
  const unreadable: { location: TraceLocation; error: LayoutRecordError }[] = [];
  for (const location of await scanTraceManifests(fs, root.tracesDir)) {
    let manifest: Record<string, unknown>;
    try {
      ({ manifest } = await readManifest(fs, location, portableSha256));
    } catch (error) {
      if (!(error instanceof LayoutRecordError)) throw error;
      unreadable.push({ location, error });
      continue;
    }
    if (traceManifestId(manifest) === reference) byId.push(location);
    else if (identityField(manifest, "attempt_id") === reference) byAttempt.push(location);
  }
  // The trace directory of the attempt named, whose manifest cannot be read: its damage is the
  // answer (reported, not hidden behind "not found" or another manifest naming the attempt).
  const own = unreadable.find(({ location: { directory } }) =>
    directory !== undefined &&
    (directory.attemptId === reference || `trace-${directory.attemptId}` === reference)
  );
  if (byId.length === 0 && own !== undefined) throw own.error;
  const matches = byId.length > 0 ? byId : byAttempt;
  if (matches.length === 0) {
    const first = unreadable[0];
    throw new TraceLookupError(
      reference,
      "not_found",
      first === undefined
        ? "Trace manifest not found"
        : `Trace manifest not found; ${
          unreadable.length === 1 ? "one manifest" : `${unreadable.length} manifests`
        } could not be read, and may be the one sought (the first: ${
          JSON.stringify(first.location.manifestPath)
        })`,
    );
  }
  if (matches.length > 1) {
    throw new TraceLookupError(
      reference,
      "ambiguous",
      `Trace manifest id is ambiguous (${matches.map((m) => m.manifestPath).join(", ")})`,
    );
  }
  return matches[0] as TraceLocation;
}

async function locateByPath(
  fs: FileSystem,
  repoRoot: string,
  tracesDir: string,
  reference: string,
): Promise<TraceLocation> {
  const given = isAbsolute(reference) ? normalize(reference) : join(repoRoot, reference);
  // The trace root is canonical, so the repository part of a path inside a `.loopy_loop` is
  // too (a repository reached through a link, as a symlinked working directory spells it).
  // What lies below `.loopy_loop` is walked as it is, so a link there is still refused; a path
  // without `.loopy_loop` is taken as it is.
  const path = loopyDirOf(given) === undefined ? given : await canonicalPath(fs, given);
  const relative = relativeWithin(tracesDir, path);
  if (relative === undefined || relative === "") {
    throw new TraceLookupError(
      reference,
      "outside",
      "Trace path is outside this repository's trace root",
    );
  }
  let current = tracesDir;
  let kind: string | undefined = "directory";
  for (const segment of relative.split("/")) {
    current = join(current, segment);
    // An entry a prune renamed away (`.pruning-*`) is gone, with everything below it.
    kind = isPruningName(segment) ? undefined : await entryKind(fs, current);
    if (kind === undefined) {
      throw new TraceLookupError(reference, "not_found", "Trace manifest not found");
    }
    if (kind === "symlink") {
      throw new TraceLookupError(
        reference,
        "symlink",
        `Trace path passes through a symlink at ${current}`,
      );
    }
  }
  if (kind === "directory") {
    const manifestPath = join(path, TRACE_MANIFEST_FILENAME);
    const manifestKind = await entryKind(fs, manifestPath);
    if (manifestKind === "symlink") {
      throw new TraceLookupError(reference, "symlink", "Trace manifest is a symlink");
    }
    if (manifestKind !== "file") {
      throw new TraceLookupError(
        reference,
        "not_a_manifest",
        `Trace path must name a trace directory or ${TRACE_MANIFEST_FILENAME}`,
      );
    }
    return {
      traceDir: path,
      manifestPath,
      manifestKind: "file",
      directory: traceDirectoryNames(tracesDir, path),
    };
  }
  if (basename(path) !== TRACE_MANIFEST_FILENAME || kind !== "file") {
    throw new TraceLookupError(
      reference,
      "not_a_manifest",
      `Trace path must name a trace directory or ${TRACE_MANIFEST_FILENAME}`,
    );
  }
  return {
    traceDir: dirname(path),
    manifestPath: path,
    manifestKind: "file",
    directory: traceDirectoryNames(tracesDir, dirname(path)),
  };
}

/**
 * Inspects one trace (see `locateTrace` for the reference forms): returns the manifest as
 * recorded and its observed integrity, with every listed file hashed. Mismatches are reported,
 * not thrown; a `../` or absolute inventory path is a manifest error and is never read. A
 * manifest that is not a JSON object is a `LayoutRecordError` naming it.
 */
export async function inspectTrace(
  fs: FileSystem,
  loopyRoot: string,
  reference: string,
  options: TraceReadOptions = {},
): Promise<TraceInspection> {
  const location = await locateTrace(fs, loopyRoot, reference);
  const root = await openLoopyRoot(fs, loopyRoot);
  const factory = options.sha256 ?? portableSha256;
  const read = await readManifest(fs, location, factory);
  const manifest = read.manifest;
  const sessions = await sessionDirIndex(fs, root.sessionsDir);
  const observedIntegrity = await verifyIntegrity(fs, location, read, sessions, factory);
  return {
    manifestPath: location.manifestPath,
    traceDir: location.traceDir,
    manifest: manifest as JsonObject,
    integrity: observedIntegrity.status,
    observedIntegrity,
  };
}

/**
 * Verifies one sealed trace and its seal: returns the report when it is `verified` (or
 * `not_finalized`: an active trace has no seal yet), and throws `TraceIntegrityError` naming the
 * file at fault otherwise — the first modified, missing or unlisted member, else the manifest
 * when it is malformed (a `../` inventory path, or unfinalized while its session holds its seal
 * receipt: edited back after sealing), else the seal receipt when it contradicts the manifest.
 */
export async function verifyTrace(
  fs: FileSystem,
  loopyRoot: string,
  reference: string,
  options: TraceReadOptions = {},
): Promise<TraceIntegrityReport> {
  const inspection = await inspectTrace(fs, loopyRoot, reference, options);
  const report = inspection.observedIntegrity;
  if (report.status !== "failed") return report;
  const manifestPath = inspection.manifestPath;
  const at = (path: string): string => join(inspection.traceDir, path);
  const modified = report.modified[0];
  if (modified !== undefined) {
    const detail = modified.error ??
      `expected ${modified.expected_sha256} (${modified.expected_size} bytes), found ` +
        `${modified.actual_sha256} (${modified.actual_size} bytes)`;
    throw new TraceIntegrityError(
      at(modified.path),
      manifestPath,
      `Sealed trace file changed: ${detail}`,
    );
  }
  const removed = report.removed[0];
  if (removed !== undefined) {
    throw new TraceIntegrityError(at(removed), manifestPath, "Sealed trace file is missing");
  }
  const added = report.added[0];
  if (added !== undefined) {
    throw new TraceIntegrityError(at(added), manifestPath, "File is not in the sealed inventory");
  }
  const manifestError = report.manifest_errors.find((error) => !report.seal.errors.includes(error));
  const sealError = report.seal.errors[0];
  if (manifestError === undefined && sealError !== undefined && report.seal.receipt_path !== null) {
    throw new TraceIntegrityError(report.seal.receipt_path, manifestPath, sealError);
  }
  throw new TraceIntegrityError(
    manifestPath,
    manifestPath,
    manifestError ?? sealError ?? "Trace manifest is malformed",
  );
}

// ---------------------------------------------------------------------------------------------
// Seal receipts of a session

/** The check of one seal receipt of a mirror session. */
export interface TraceSealCheck {
  /** The receipt (`trace_seals/<attempt_id>.json`). */
  readonly sealPath: string;
  /** The manifest id it seals, when readable. */
  readonly manifestId: string | null;
  /** The attempt it seals, when readable. */
  readonly attemptId: string | null;
  /**
   * `verified` (trace intact and seal matching), `failed` (see `problems`; a trace directory
   * still there without its manifest included), `trace_absent` (the trace directory is gone:
   * pruned, or never there), or `invalid` (the receipt itself is malformed, a symlink, misnamed
   * or names another session).
   */
  readonly status: "verified" | "failed" | "trace_absent" | "invalid";
  /** Where the sealed trace is (or was). */
  readonly traceDir: string | null;
  /** What is wrong, in words. */
  readonly problems: readonly string[];
}

/** Options of `checkTraceSeals`. */
export interface CheckTraceSealsOptions extends TraceReadOptions {
  /** The session whose `trace_seals/` to check. */
  readonly sessionId: string;
}

/**
 * Checks every seal receipt in a mirror session's `trace_seals/`: each must be a valid receipt
 * named after its attempt and naming this session; its trace
 * (`.loopy_loop/traces/<root>/sessions/<session>/attempts/<attempt>/`) is verified against the
 * receipt and its inventory. The receipt is compared with the manifest directly (its
 * `manifest_sha256`, `inventory_root_sha256`, `manifest_id`, `session_id`, `attempt_id`,
 * `lifecycle` and `sealed_at`), and the manifest's `identity.session_id` / `identity.attempt_id`
 * must name this session and the attempt of its directory; each mismatch is a `failed` problem
 * naming the field. A seal whose trace is gone is reported as `trace_absent` (traces are
 * prunable), never followed elsewhere; one whose trace directory is still there without its
 * manifest, or is not a directory, is `failed` (a prune takes a trace away whole). Nothing is
 * written.
 */
export async function checkTraceSeals(
  fs: FileSystem,
  loopyRoot: string,
  options: CheckTraceSealsOptions,
): Promise<TraceSealCheck[]> {
  const root = await openLoopyRoot(fs, loopyRoot);
  await requireRealTracesDir(fs, root.tracesDir);
  const tree = await loadSessionTree(fs, root.repoRoot, options.sessionId);
  const node = tree.require(options.sessionId);
  const factory = options.sha256 ?? portableSha256;
  const sealsDir = new SessionPaths(node.dir, node.layout).traceSealsDir;
  const kind = await entryKind(fs, sealsDir);
  if (kind === undefined) return [];
  if (kind !== "directory") {
    return [{
      sealPath: sealsDir,
      manifestId: null,
      attemptId: null,
      status: "invalid",
      traceDir: null,
      problems: [`trace_seals is not a directory (${kind})`],
    }];
  }
  const sessions = await sessionDirIndex(fs, root.sessionsDir);
  const out: TraceSealCheck[] = [];
  for (const entry of await fs.readDir(sealsDir)) {
    if (!entry.name.endsWith(".json") || entry.name.startsWith(".")) continue;
    const sealPath = join(sealsDir, entry.name);
    const invalid = (problem: string, seal?: TraceSealReceipt): TraceSealCheck => ({
      sealPath,
      manifestId: seal?.manifest_id ?? null,
      attemptId: seal?.attempt_id ?? null,
      status: "invalid",
      traceDir: null,
      problems: [problem],
    });
    if (entry.kind !== "file") {
      out.push(invalid(`seal receipt is not a regular file (${entry.kind})`));
      continue;
    }
    let seal: TraceSealReceipt;
    try {
      seal = parseTraceSealReceipt(
        decodeJson(await recordBytes(fs, sealPath, false) as Uint8Array, sealPath),
        sealPath,
      );
    } catch (error) {
      if (!(error instanceof LayoutRecordError)) throw error;
      out.push(invalid(error.message));
      continue;
    }
    if (entry.name !== `${seal.attempt_id}.json`) {
      out.push(invalid("seal receipt is not named after its attempt", seal));
      continue;
    }
    if (seal.session_id !== node.sessionId) {
      out.push(invalid("seal receipt names another session", seal));
      continue;
    }
    const traceDir = mirrorAttemptTraceDir(
      root.repoRoot,
      tree.rootSessionId,
      node.sessionId,
      seal.attempt_id,
    );
    const present = await chainKind(fs, root.tracesDir, traceDir);
    if (present === "symlink") {
      out.push({ ...invalid("the sealed trace's path passes through a symlink", seal), traceDir });
      continue;
    }
    const checked = (status: TraceSealCheck["status"], problems: string[]): TraceSealCheck => ({
      sealPath,
      manifestId: seal.manifest_id,
      attemptId: seal.attempt_id,
      status,
      traceDir,
      problems,
    });
    if (present === undefined) {
      out.push(checked("trace_absent", []));
      continue;
    }
    // Still there but not a trace: damaged, not pruned (a prune takes a trace away whole).
    if (present !== "directory") {
      out.push(checked("failed", [`the sealed trace's directory is not a directory (${present})`]));
      continue;
    }
    const manifestPath = join(traceDir, TRACE_MANIFEST_FILENAME);
    const manifestKind = await entryKind(fs, manifestPath);
    if (manifestKind === undefined) {
      out.push(
        checked("failed", [
          "the sealed trace's manifest is missing while its trace directory is present",
        ]),
      );
      continue;
    }
    const location: TraceLocation = {
      traceDir,
      manifestPath,
      manifestKind: manifestKind === "file" || manifestKind === "directory" ||
          manifestKind === "symlink"
        ? manifestKind
        : "other",
      directory: {
        rootSessionId: tree.rootSessionId,
        sessionId: node.sessionId,
        attemptId: seal.attempt_id,
      },
    };
    let problems: string[];
    try {
      const read = await readManifest(fs, location, factory);
      // The receipt in hand is compared with the manifest directly: the integrity check below
      // finds a receipt through the session the manifest's identity names, which an edited
      // manifest can point at a session that does not exist (and then no receipt is required).
      problems = receiptContradictions(read.manifest, read.sha256, seal, factory);
      const report = await verifyIntegrity(fs, location, read, sessions, factory);
      if (report.status === "not_finalized") problems.push(SEALED_BUT_UNFINALIZED);
      for (const problem of problemsOf(report)) {
        if (!problems.includes(problem)) problems.push(problem);
      }
    } catch (error) {
      // A record error of this trace is this seal's failure: it hides none of the others.
      if (!(error instanceof LayoutRecordError)) throw error;
      out.push(checked("failed", [error.message]));
      continue;
    }
    out.push(checked(problems.length === 0 ? "verified" : "failed", problems));
  }
  return out;
}

/** A trace known from a session's durable records (its seals and its iterations' trace refs). */
export interface RecordedTrace {
  /** The manifest id. */
  readonly manifestId: string;
  /** The session the attempt belongs to. */
  readonly sessionId: string;
  /** The attempt. */
  readonly attemptId: string;
}

/**
 * The traces a mirror session's durable records name: each `trace_seals/*.json` receipt and each
 * `iterations/*\/trace_ref.json` with a manifest id. Unreadable records and symlinks are skipped
 * (these are hints for telling a pruned trace from an unknown one, never a source of paths
 * outside the conventional mirror location).
 */
export async function recordedTraces(
  fs: FileSystem,
  sessionDir: string,
  sessionId: string,
): Promise<RecordedTrace[]> {
  const out: RecordedTrace[] = [];
  const readObject = async (path: string): Promise<Record<string, unknown> | undefined> => {
    if ((await entryKind(fs, path)) !== "file") return undefined;
    try {
      const value = decodeJson(await recordBytes(fs, path, false) as Uint8Array, path);
      return typeof value === "object" && value !== null && !Array.isArray(value)
        ? value as Record<string, unknown>
        : undefined;
    } catch (error) {
      if (error instanceof LayoutRecordError) return undefined;
      throw error;
    }
  };
  const add = (record: Record<string, unknown> | undefined): void => {
    const manifestId = record?.manifest_id;
    const attemptId = record?.attempt_id;
    if (
      typeof manifestId === "string" && typeof attemptId === "string" && isSafeId(manifestId) &&
      // The attempt id names the trace's directory: one too long for a file name names none.
      isSafeFileId(attemptId)
    ) {
      out.push({ manifestId, sessionId, attemptId });
    }
  };
  for (
    const [dirName, fileName] of [["trace_seals", undefined], ["iterations", "trace_ref.json"]]
  ) {
    const dir = join(sessionDir, dirName as string);
    if ((await entryKind(fs, dir)) !== "directory") continue;
    for (const entry of await fs.readDir(dir)) {
      if (fileName === undefined) {
        if (entry.kind === "file" && entry.name.endsWith(".json")) {
          add(await readObject(join(dir, entry.name)));
        }
      } else if (entry.kind === "directory") {
        add(await readObject(join(dir, entry.name, fileName)));
      }
    }
  }
  return out;
}
