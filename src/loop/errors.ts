/**
 * The typed errors of the Loop session store. Each names the file it is about (when known), the
 * JSON path of the offending field for invalid records, and says what a person can do.
 *
 * @module
 */

/** Options shared by session errors. */
export interface SessionErrorOptions {
  /** The file the error is about, when known. */
  readonly file?: string | undefined;
  /** The underlying error. */
  readonly cause?: unknown;
}

/** The base class of every error the Loop session store raises (besides port `FsError`s). */
export class SessionError extends Error {
  /** The file the error is about, when known. */
  readonly file: string | undefined;
  /** Creates a session error. */
  constructor(message: string, options: SessionErrorOptions = {}) {
    super(
      options.file === undefined ? message : `${message} (in '${options.file}')`,
      options.cause === undefined ? {} : { cause: options.cause },
    );
    this.name = new.target.name;
    this.file = options.file;
  }
}

/**
 * A session file or header of a format or version this library does not support. Discovery
 * skips such files without modifying them; opening one rejects with this error.
 */
export class UnsupportedSessionError extends SessionError {
  /** The format found, when there was one. */
  readonly format: unknown;
  /** The version found, when there was one. */
  readonly version: unknown;
  /** Creates an unsupported-format error for `format`/`version`. */
  constructor(
    message: string,
    details: { readonly format?: unknown; readonly version?: unknown } & SessionErrorOptions,
  ) {
    super(message, details);
    this.format = details.format;
    this.version = details.version;
  }
}

/** Options of `SessionFormatError`. */
export interface SessionFormatErrorOptions extends SessionErrorOptions {
  /** The JSON path of the offending field (`header.title.messageIndices[1]`), `""` for the record. */
  readonly path?: string;
  /** The offending value, when it helps (kept short in the message). */
  readonly value?: unknown;
}

/** A record that does not satisfy its schema or a cross-field rule. */
export class SessionFormatError extends SessionError {
  /** The JSON path of the offending field, `""` when the whole record is at fault. */
  readonly path: string;
  /** The offending value. */
  readonly value: unknown;
  /** Creates a format error; `path` names the field. */
  constructor(message: string, options: SessionFormatErrorOptions = {}) {
    const at = options.path ? ` at ${options.path}` : "";
    const shown = "value" in options ? `: ${preview(options.value)}` : "";
    super(`${message}${at}${shown}`, options);
    this.path = options.path ?? "";
    this.value = options.value;
  }
}

/** Tool calls and tool results that do not pair up (duplicates, unmatched, unfinished). */
export class ToolPairingError extends SessionFormatError {
  /** The index of the message where pairing failed. */
  readonly messageIndex: number;
  /** Creates a pairing error at `messageIndex`. */
  constructor(message: string, messageIndex: number, options: SessionFormatErrorOptions = {}) {
    super(message, { ...options, path: options.path ?? `messages[${messageIndex}]` });
    this.messageIndex = messageIndex;
  }
}

/** Options of `CorruptSessionError`. */
export interface CorruptSessionErrorOptions extends SessionErrorOptions {
  /** The first byte offset known to be bad, when known. */
  readonly offset?: number | undefined;
  /** The first message index known to be bad, when known. */
  readonly messageIndex?: number | undefined;
}

/**
 * Stored bytes that contradict their committed metadata: a messages file shorter than its
 * committed range, a checksum mismatch, an unparsable committed line. Nothing is repaired.
 */
export class CorruptSessionError extends SessionError {
  /** The first byte offset known to be bad, when known. */
  readonly offset: number | undefined;
  /** The first message index known to be bad, when known. */
  readonly messageIndex: number | undefined;
  /** Creates a corruption error. */
  constructor(message: string, options: CorruptSessionErrorOptions = {}) {
    super(message, options);
    this.offset = options.offset;
    this.messageIndex = options.messageIndex;
  }
}

/** `readHistory(before, revision)` was asked for a generation that is no longer committed. */
export class StaleRevisionError extends SessionError {
  /** The revision the caller expected. */
  readonly expected: string;
  /** The revision that is committed now. */
  readonly actual: string;
  /** Creates a stale-revision error. */
  constructor(expected: string, actual: string, options: SessionErrorOptions = {}) {
    super(
      `Session history changed: expected revision ${expected}, found ${actual}; reload the history`,
      options,
    );
    this.expected = expected;
    this.actual = actual;
  }
}

/** A save is pending after a failure; call `flush()` before this operation. */
export class PendingSaveError extends SessionError {
  /** Creates a pending-save error for `operation`. */
  constructor(operation: string, options: SessionErrorOptions = {}) {
    super(`Pending session save; call flush() before ${operation}`, options);
  }
}

/** Another writer in this process already owns the session. */
export class SessionBusyError extends SessionError {
  /** Creates a busy error. */
  constructor(message: string, options: SessionErrorOptions = {}) {
    super(message, options);
  }
}

/** Another process holds the session's writer lock. */
export class SessionLockedError extends SessionError {
  /** The lock holder's process id, when readable. */
  readonly pid: number | undefined;
  /** The lock holder's host name, when readable. */
  readonly host: string | undefined;
  /** Creates a locked error. */
  constructor(
    message: string,
    details:
      & { readonly pid?: number | undefined; readonly host?: string | undefined }
      & SessionErrorOptions,
  ) {
    super(message, details);
    this.pid = details.pid;
    this.host = details.host;
  }
}

/** A session id, path or collection entry that does not exist. */
export class SessionNotFoundError extends SessionError {
  /** Creates a not-found error. */
  constructor(message: string, options: SessionErrorOptions = {}) {
    super(message, options);
  }
}

/** The working directory a session records no longer exists or is not a directory. */
export class SessionCwdError extends SessionError {
  /** The recorded working directory. */
  readonly cwd: string;
  /** Creates a cwd error for `cwd`. */
  constructor(cwd: string, message: string, options: SessionErrorOptions = {}) {
    super(message, options);
    this.cwd = cwd;
  }
}

/** An argument a caller passed is invalid (a negative count, a bad id, a non-boolean pin). */
export class InvalidArgumentError extends SessionError {
  /** The name of the argument. */
  readonly argument: string;
  /** Creates an invalid-argument error for `argument` (of the file `options.file`, when any). */
  constructor(argument: string, message: string, options: SessionErrorOptions = {}) {
    super(message, options);
    this.argument = argument;
  }
}

/** A replacer that cuts strings past what `preview` shows. */
const cutLongStrings = (_key: string, value: unknown): unknown =>
  typeof value === "string" && value.length > 100 ? value.slice(0, 100) : value;

/**
 * A short, safe rendering of a value for an error message: its JSON cut to 80 characters. A number
 * JSON writes as another (`NaN`, `Infinity`, `-0`), a BigInt (`10n`) and an invalid `Date` are
 * shown as themselves; a value JSON cannot write (a cycle, arrays nested past the runtime's stack)
 * is named by its kind (`[array]`, `[object]`) or, for a primitive, by `String()`; never an
 * exception.
 */
export function preview(value: unknown): string {
  // The replacer cuts what is shown anyway, and keeps JSON.stringify off its fast path, which
  // ends a Deno process on a string of more than 256 MiB (see `records/_json_text.ts`).
  let text: string;
  try {
    text = value === undefined
      ? "undefined"
      : typeof value === "number" && (!Number.isFinite(value) || Object.is(value, -0))
      ? (Object.is(value, -0) ? "-0" : String(value))
      : typeof value === "bigint"
      ? `${value}n`
      : value instanceof Date && Number.isNaN(value.getTime())
      ? "Invalid Date"
      : JSON.stringify(value, cutLongStrings) ?? String(value);
  } catch {
    // Not String(value) for objects: an array's join recurses as deep as JSON.stringify did.
    text = typeof value !== "object" || value === null
      ? String(value)
      : Array.isArray(value)
      ? "[array]"
      : "[object]";
  }
  return text.length > 80 ? text.slice(0, 77) + "..." : text;
}
