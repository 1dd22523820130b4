/**
 * The typed errors of the folded session layout. Each names what it is about (a file, a field, a
 * logical reference, a session directory) so a person can act on it. Port failures stay the
 * port's own `FsError` classes and are never wrapped or hidden.
 *
 * @module
 */
import { preview } from "../loop/errors.ts";

/** Options shared by layout errors. */
export interface LayoutErrorOptions {
  /** The underlying error. */
  readonly cause?: unknown;
}

/** The base class of every error the layout module raises (besides port `FsError`s). */
export class LayoutError extends Error {
  /** Creates a layout error. */
  constructor(message: string, options: LayoutErrorOptions = {}) {
    super(message, options.cause === undefined ? {} : { cause: options.cause });
    this.name = new.target.name;
  }
}

/** Options of `LayoutRecordError`. */
export interface LayoutRecordErrorOptions extends LayoutErrorOptions {
  /** The JSON path of the offending field (`producer.attempt_id`, `children[1].status`); `""` for the record. */
  readonly path?: string;
  /** The offending value, when there is one. */
  readonly value?: unknown;
}

/**
 * A record (session.json, control.json, handoff.json, children.json, ...) that is not valid JSON,
 * does not satisfy its schema, or breaks a cross-field rule.
 */
export class LayoutRecordError extends LayoutError {
  /** The absolute path of the file, or a label such as `child request` for in-memory records. */
  readonly file: string;
  /** The JSON path of the offending field, `""` when the whole record is at fault. */
  readonly path: string;
  /** The offending value (`undefined` when the field is missing). */
  readonly value: unknown;
  /** Creates a record error for `file`. */
  constructor(file: string, message: string, options: LayoutRecordErrorOptions = {}) {
    const at = options.path ? ` at ${options.path}` : "";
    super(`${message}${at} (in '${file}')`, options);
    this.file = file;
    this.path = options.path ?? "";
    this.value = options.value;
  }
}

/** Why a logical reference was refused. */
export type LogicalReferenceErrorReason =
  /**
   * The text does not follow the reference grammar (empty, NUL, backslash, `..`, absolute, too
   * long), or it names a path the filesystem finds too long (`ENAMETOOLONG`, the `cause`).
   */
  | "grammar"
  /** The scope is not one of repo, session, root, parent, session:<id>, trace:<id>. */
  | "unknown_scope"
  /** `trace:<manifest_id>:/` was used in a folded session. */
  | "mirror_only"
  /** `parent:/` was used in a root session. */
  | "no_parent"
  /** `session:<id>:/` names a session that is not in the current tree. */
  | "unknown_session"
  /** `trace:<id>:/` names no trace manifest of the current tree. */
  | "unknown_trace"
  /** A path component inside the scope is a symlink. */
  | "symlink"
  /** The target does not exist (strict resolution only). */
  | "absent";

/** A logical reference (`session:/…`, `repo:/…`, ...) that cannot be resolved safely. */
export class LogicalReferenceError extends LayoutError {
  /** The reference as given. */
  readonly reference: string;
  /** Why it was refused. */
  readonly reason: LogicalReferenceErrorReason;
  /** Creates a reference error. */
  constructor(
    reference: string,
    reason: LogicalReferenceErrorReason,
    message: string,
    options: LayoutErrorOptions = {},
  ) {
    super(`${message}: ${quote(reference)}`, options);
    this.reference = reference;
    this.reason = reason;
  }
}

/**
 * A session tree whose physical nesting contradicts its manifests, uses symlinks, repeats an id,
 * or cannot contain the session asked for.
 */
export class TopologyError extends LayoutError {
  /** The directory (or file) where the contradiction was found. */
  readonly at: string;
  /** Creates a topology error found at `at`. */
  constructor(at: string, message: string, options: LayoutErrorOptions = {}) {
    super(`${message} (at '${at}')`, options);
    this.at = at;
  }
}

/** A session id that is neither a readable `NNN_<slug>` / `NN_<slug>` id nor a legacy id. */
export class SessionIdError extends LayoutError {
  /** The id as given. */
  readonly id: string;
  /** Creates an id error. */
  constructor(id: string, message: string) {
    super(`${message}: ${quote(id)}`);
    this.id = id;
  }
}

/**
 * An immutable artifact exists with contents that contradict the value being frozen, or a
 * record that is final (a sealed or finished attempt's result, a written receipt, a bound
 * acceptance sidecar) was asked to change.
 */
export class ImmutableArtifactError extends LayoutError {
  /** The absolute path of the artifact. */
  readonly file: string;
  /** The JSON path of the first field that would change (`attempt_id`), when known; else `""`. */
  readonly path: string;
  /** Creates an immutable-artifact error for `file` (and the field `path`, when known). */
  constructor(
    file: string,
    message = "Immutable artifact contradicts its existing contents",
    path = "",
  ) {
    super(`${message}${path === "" ? "" : ` at ${path}`} (in '${file}')`);
    this.file = file;
    this.path = path;
  }
}

/** An operation this library performs only on folded sessions was asked of a mirror session. */
export class UnsupportedLayoutError extends LayoutError {
  /** The session directory. */
  readonly sessionDir: string;
  /** Creates an unsupported-layout error. */
  constructor(sessionDir: string, message: string) {
    super(`${message} (session '${sessionDir}')`);
    this.sessionDir = sessionDir;
  }
}

/**
 * The scheduling state forbids the operation: a suspended parent asked to take work, a terminal
 * session asked to dispatch, a state with both a current task and an active child.
 */
export class SessionStateError extends LayoutError {
  /** The session the state belongs to. */
  readonly sessionId: string;
  /** Creates a state error for `sessionId`. */
  constructor(sessionId: string, message: string) {
    super(`${message} (session '${sessionId}')`);
    this.sessionId = sessionId;
  }
}

/**
 * A session was published (its directory renamed into place, complete, visible to every reader)
 * but the fsync that makes its entry durable failed, so the call that created it rejects: a
 * power loss may still take the session away, and the failed fsync is not retried (after a
 * failed fsync the kernel may have dropped what it did not write). The session exists as
 * `sessionId` at `dir`: a caller adopts it, as if the creation had resolved, instead of creating
 * another (a second call would derive the next ordinal and leave two sessions for one goal).
 * `cause` is the storage error.
 */
export class UnconfirmedPublishError extends LayoutError {
  /** The id of the published session. */
  readonly sessionId: string;
  /** Its published directory. */
  readonly dir: string;
  /** Creates the error for the session `sessionId` published at `dir`. */
  constructor(sessionId: string, dir: string, cause: unknown) {
    super(
      `Session ${quote(sessionId)} was published at '${dir}', but its durability could not be ` +
        `confirmed (${cause instanceof Error ? cause.message : String(cause)}); adopt it ` +
        "instead of creating another",
      { cause },
    );
    this.sessionId = sessionId;
    this.dir = dir;
  }
}

/** What failed while handling a child request (besides an invalid request, which is archived). */
export class ChildRequestError extends LayoutError {
  /** The request id, when known. */
  readonly requestId: string | undefined;
  /** The file the error is about. */
  readonly file: string;
  /** Creates a child-request error. */
  constructor(
    file: string,
    requestId: string | undefined,
    message: string,
    options: LayoutErrorOptions = {},
  ) {
    super(`${message} (in '${file}')`, options);
    this.file = file;
    this.requestId = requestId;
  }
}

/** A short quoted rendering of a string for messages (control characters escaped). */
export function quote(text: string): string {
  const shown = text.length > 200 ? `${text.slice(0, 200)}…` : text;
  return JSON.stringify(shown);
}

/** No valid session tree under `.loopy_loop/sessions/` contains the session asked for. */
export class UnknownSessionError extends LayoutError {
  /** The session id asked for. */
  readonly sessionId: string;
  /** Creates an unknown-session error. */
  constructor(sessionId: string, message = "Unknown session id") {
    super(`${message}: ${quote(sessionId)}`);
    this.sessionId = sessionId;
  }
}

/** A `.loopy_loop` directory that cannot be operated on: not named so, not a directory, a symlink. */
export class LoopyRootError extends LayoutError {
  /** The path given as the `.loopy_loop` directory. */
  readonly path: string;
  /** Creates a root error for `path`. */
  constructor(path: string, message: string) {
    super(`${message} (at '${path}')`);
    this.path = path;
  }
}

/** An option value outside its documented range (a negative age, a malformed session id). */
export class LayoutOptionError extends LayoutError {
  /** The option's name (`olderThanDays`). */
  readonly option: string;
  /** The value given. */
  readonly value: unknown;
  /** Creates an option error. */
  constructor(option: string, value: unknown, message: string) {
    super(`${message}: ${option}=${typeof value === "string" ? quote(value) : preview(value)}`);
    this.option = option;
    this.value = value;
  }
}

/** Why a mirror trace could not be looked up. */
export type TraceLookupReason =
  /** No manifest has the id, and no manifest is at the path. */
  | "not_found"
  /** More than one manifest has the id. */
  | "ambiguous"
  /** The path is outside `.loopy_loop/traces/`. */
  | "outside"
  /** The path names neither a trace directory nor a `trace_manifest.json`. */
  | "not_a_manifest"
  /** A component of the path, or the manifest itself, is a symlink. */
  | "symlink";

/** A mirror trace reference (manifest id, attempt id or path) that names no single trace. */
export class TraceLookupError extends LayoutError {
  /** The reference as given. */
  readonly reference: string;
  /** Why the lookup failed. */
  readonly reason: TraceLookupReason;
  /** Creates a lookup error. */
  constructor(reference: string, reason: TraceLookupReason, message: string) {
    super(`${message}: ${quote(reference)}`);
    this.reference = reference;
    this.reason = reason;
  }
}

/**
 * A sealed mirror trace whose bytes or seal do not match: a file's hash or size differs from the
 * inventory, a listed file is missing or is not a regular file, a file is not in the inventory,
 * the manifest is malformed (a `../` path), or the seal receipt contradicts the manifest.
 */
export class TraceIntegrityError extends LayoutError {
  /** The file at fault (the trace member, the manifest, or the seal receipt), absolute. */
  readonly file: string;
  /** The trace's manifest. */
  readonly manifestPath: string;
  /** Creates an integrity error about `file`. */
  constructor(file: string, manifestPath: string, message: string) {
    super(`${message} (in '${file}')`);
    this.file = file;
    this.manifestPath = manifestPath;
  }
}
