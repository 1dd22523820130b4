/**
 * Error mapping shared by the runtime adapters: a native error with a POSIX `code` becomes the
 * port's typed error, with the native error kept as `cause`. Each adapter supplies the code
 * (Node errors carry it; Deno errors carry it or are told apart by class).
 *
 * @module
 */
import {
  AlreadyExists,
  FsError,
  FsIoError,
  IsADirectory,
  NotADirectory,
  NotEmpty,
  NotFound,
  PermissionDenied,
} from "../src/port/errors.ts";

/** Codes with which a platform refuses to open or fsync a directory (documented no-op). */
export const DIR_SYNC_REFUSALS: ReadonlySet<string> = new Set([
  "EISDIR",
  "EINVAL",
  "EPERM",
  "EBADF",
]);

/** The string `code` of a native error, if it has one. */
export function codeOf(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
}

/** Maps a native error of `syscall` on `path`, whose POSIX code is `code`, to the port's error. */
export function mapNativeError(
  error: unknown,
  syscall: string,
  path: string,
  code: string | undefined = codeOf(error),
): FsError {
  if (error instanceof FsError) return error;
  const options = { cause: error };
  switch (code) {
    case "ENOENT":
      return new NotFound(syscall, path, options);
    case "EEXIST":
      return new AlreadyExists(syscall, path, options);
    case "ENOTDIR":
      return new NotADirectory(syscall, path, options);
    case "EISDIR":
      return new IsADirectory(syscall, path, options);
    case "ENOTEMPTY":
      return new NotEmpty(syscall, path, options);
    case "EACCES":
    case "EPERM":
      return new PermissionDenied(syscall, path, { cause: error, code });
    default:
      return new FsIoError(
        code ?? "EIO",
        syscall,
        path,
        error instanceof Error ? error.message : "I/O error",
        options,
      );
  }
}

/** Runs a native call and maps whatever it throws with `map`. */
export async function callMapped<T>(
  map: (error: unknown, syscall: string, path: string) => FsError,
  syscall: string,
  path: string,
  run: () => Promise<T>,
): Promise<T> {
  try {
    return await run();
  } catch (error) {
    throw map(error, syscall, path);
  }
}

/**
 * Refuses an offset or a length that is not a non-negative safe integer, as every adapter does
 * (`EINVAL`): Node would take a negative position as "the current position".
 */
export function checkReadRange(path: string, offset: number, length: number): void {
  checkCount("read", path, offset);
  checkCount("read", path, length);
}

/**
 * Refuses an offset or a length of `syscall` that is not a non-negative safe integer (`EINVAL`):
 * the runtimes would take a negative or fractional `truncate` length as 0 or cut it.
 */
export function checkCount(syscall: string, path: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new FsIoError("EINVAL", syscall, path, `Invalid offset or length ${value}`);
  }
}

/** The error of any call on a closed handle, a second close included. */
export function closedHandle(syscall: string, path: string): FsIoError {
  return new FsIoError("EBADF", syscall, path, "The handle is closed");
}

/** The error of a write or truncate on a handle not opened for writing. */
export function notWritable(syscall: string, path: string): FsIoError {
  return new FsIoError("EBADF", syscall, path, "The handle is not open for writing");
}

/**
 * `path` without its trailing slashes, or undefined when it has none (or is only slashes): the
 * final component that a trailing slash would make the kernel follow when it is a symlink.
 */
export function withoutTrailingSlash(path: string): string | undefined {
  if (!path.endsWith("/")) return undefined;
  let end = path.length;
  while (end > 0 && path[end - 1] === "/") end--;
  return end === 0 ? undefined : path.slice(0, end);
}

/**
 * Refuses `path`, spelled with a trailing slash, when its final component is a symlink (asked of
 * `isSymlink`, an `lstat` of the path without the slash): a call that never follows a final link
 * (`remove`, `rename`) fails with `NotADirectory`, as Linux's unlink, rmdir and rename do, where
 * the slash would make a kernel or a runtime follow it. Whatever else the `lstat` finds (nothing,
 * a file) is left to the call itself to report.
 */
export async function refuseSlashedLink(
  syscall: string,
  path: string,
  isSymlink: (bare: string) => Promise<boolean>,
): Promise<void> {
  const bare = withoutTrailingSlash(path);
  if (bare === undefined) return;
  let link: boolean;
  try {
    link = await isSymlink(bare);
  } catch {
    return;
  }
  if (link) throw new NotADirectory(syscall, path);
}
