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
  for (const value of [offset, length]) {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new FsIoError("EINVAL", "read", path, `Invalid offset or length ${value}`);
    }
  }
}
