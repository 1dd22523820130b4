/**
 * Typed filesystem errors. Every adapter maps its native errors to these classes so the core
 * can rely on `instanceof` on every runtime, never on message text.
 *
 * @module
 */

/** Options shared by every filesystem error. */
export interface FsErrorOptions {
  /** The native error this one was mapped from. */
  readonly cause?: unknown;
}

/** The base class of every error the filesystem port raises. */
export class FsError extends Error {
  /** The POSIX-style code of the condition (`ENOENT`, `EEXIST`, ...). */
  readonly code: string;
  /** The path the failed call was about. */
  readonly path: string;
  /**
   * The port call that failed, by its name in the port, whatever system calls an adapter made
   * for it: a `FileSystem` method (`open`, `readFile`, `readDir`, `syncDir`, `openNoFollow`, ...)
   * or a `FileHandle` method (`read`, `write`, `truncate`, `sync`, `close`), with `fstat` for the
   * handle's `stat`. The conformance suite holds every adapter to it.
   */
  readonly syscall: string;

  /** Creates an error for `syscall` on `path` with a POSIX-style `code`. */
  constructor(
    code: string,
    syscall: string,
    path: string,
    message: string,
    options?: FsErrorOptions,
  ) {
    super(
      `${message}: ${syscall} '${path}'`,
      options?.cause === undefined ? {} : { cause: options.cause },
    );
    this.name = new.target.name;
    this.code = code;
    this.path = path;
    this.syscall = syscall;
  }
}

/** Nothing exists at the path (ENOENT). */
export class NotFound extends FsError {
  /** Creates a `NotFound` for `syscall` on `path`. */
  constructor(syscall: string, path: string, options?: FsErrorOptions) {
    super("ENOENT", syscall, path, "No such file or directory", options);
  }
}

/** Something already exists at the path (EEXIST). */
export class AlreadyExists extends FsError {
  /** Creates an `AlreadyExists` for `syscall` on `path`. */
  constructor(syscall: string, path: string, options?: FsErrorOptions) {
    super("EEXIST", syscall, path, "File exists", options);
  }
}

/** A path component that must be a directory is not one (ENOTDIR). */
export class NotADirectory extends FsError {
  /** Creates a `NotADirectory` for `syscall` on `path`. */
  constructor(syscall: string, path: string, options?: FsErrorOptions) {
    super("ENOTDIR", syscall, path, "Not a directory", options);
  }
}

/** The path is a directory where a file was expected (EISDIR). */
export class IsADirectory extends FsError {
  /** Creates an `IsADirectory` for `syscall` on `path`. */
  constructor(syscall: string, path: string, options?: FsErrorOptions) {
    super("EISDIR", syscall, path, "Is a directory", options);
  }
}

/** A directory that must be empty is not (ENOTEMPTY). */
export class NotEmpty extends FsError {
  /** Creates a `NotEmpty` for `syscall` on `path`. */
  constructor(syscall: string, path: string, options?: FsErrorOptions) {
    super("ENOTEMPTY", syscall, path, "Directory not empty", options);
  }
}

/** The call is not permitted on the path (EACCES, EPERM). */
export class PermissionDenied extends FsError {
  /** Creates a `PermissionDenied` for `syscall` on `path`; `code` defaults to `EACCES`. */
  constructor(
    syscall: string,
    path: string,
    options?: FsErrorOptions & { readonly code?: string },
  ) {
    super(options?.code ?? "EACCES", syscall, path, "Permission denied", options);
  }
}

/**
 * Any other failure of the storage (EIO, ENOSPC, ELOOP, ...). The native error is kept as
 * `cause`, and `code` holds its code when it had one.
 */
export class FsIoError extends FsError {
  /** Creates an `FsIoError` with the native `code` (or `EIO`). */
  constructor(
    code: string,
    syscall: string,
    path: string,
    message: string,
    options?: FsErrorOptions,
  ) {
    super(code, syscall, path, message, options);
  }
}

/** True when `error` is any filesystem port error. */
export function isFsError(error: unknown): error is FsError {
  return error instanceof FsError;
}

/**
 * Refuses a mode (of `chmod`, or of the `syscall` that creates with it: `open`, `mkdir`,
 * `writeFile`) that is not an integer from 0 to 2^32 - 1 with `FsIoError` `EINVAL`, as Node does,
 * for the adapters whose runtime would take `-1` for `0o777` or drop a fraction.
 */
export function checkMode(path: string, mode: number, syscall = "chmod"): void {
  if (!Number.isInteger(mode) || mode < 0 || mode > 0xffff_ffff) {
    throw new FsIoError("EINVAL", syscall, path, `Invalid mode ${mode}`);
  }
}
