/**
 * Error mapping shared by the runtime adapters: a native error with a POSIX `code` becomes the
 * port's typed error, with the native error kept as `cause`. Each adapter supplies the code
 * (Node errors carry it; Deno errors carry it or are told apart by class).
 *
 * @module
 */
import process from "node:process";
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
import { isPermissionRefusal } from "./_probe.ts";

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

/**
 * Linux errno numbers of the conditions a runtime may report only in its message, as
 * `"File too large (os error 27)"` (Deno, and Deno's Node layer, leave `code` out for some).
 */
const LINUX_ERRNOS: ReadonlyMap<number, string> = new Map([
  [1, "EPERM"],
  [2, "ENOENT"],
  [5, "EIO"],
  [6, "ENXIO"],
  [9, "EBADF"],
  [11, "EAGAIN"],
  [12, "ENOMEM"],
  [13, "EACCES"],
  [16, "EBUSY"],
  [17, "EEXIST"],
  [18, "EXDEV"],
  [19, "ENODEV"],
  [20, "ENOTDIR"],
  [21, "EISDIR"],
  [22, "EINVAL"],
  [23, "ENFILE"],
  [24, "EMFILE"],
  [26, "ETXTBSY"],
  [27, "EFBIG"],
  [28, "ENOSPC"],
  [29, "ESPIPE"],
  [30, "EROFS"],
  [31, "EMLINK"],
  [36, "ENAMETOOLONG"],
  [37, "ENOLCK"],
  [38, "ENOSYS"],
  [39, "ENOTEMPTY"],
  [40, "ELOOP"],
  [75, "EOVERFLOW"],
  [95, "EOPNOTSUPP"],
  [116, "ESTALE"],
  [122, "EDQUOT"],
]);

/**
 * The POSIX code named by the `"(os error N)"` at the end of a native error's message, for the
 * common Linux errnos (`LINUX_ERRNOS`); undefined when there is none, the number is not one of
 * them, or `platform` is not Linux (other kernels number their errnos differently).
 */
export function osErrorCode(error: unknown, platform: string): string | undefined {
  if (platform !== "linux" && platform !== "android") return undefined;
  if (!(error instanceof Error)) return undefined;
  const match = /\(os error (\d+)\)/.exec(error.message);
  return match === null ? undefined : LINUX_ERRNOS.get(Number(match[1]));
}

/**
 * The POSIX code for a runtime's own code: Node's argument errors (a path holding NUL is
 * `ERR_INVALID_ARG_VALUE`) are `EINVAL`, and a file too large for one read is `EFBIG`.
 */
export function posixCode(code: string | undefined): string | undefined {
  switch (code) {
    case "ERR_INVALID_ARG_VALUE":
    case "ERR_INVALID_ARG_TYPE":
    case "ERR_OUT_OF_RANGE":
      return "EINVAL";
    case "ERR_FS_FILE_TOO_LARGE":
      return "EFBIG";
    default:
      return code;
  }
}

/** The platform the native errno numbers are read for (`node:process`' `platform`). */
const PLATFORM: string = process.platform;

/**
 * The POSIX code of an error thrown through `node:fs`: its `code`, or `EACCES` for Deno's
 * permission refusal (`NotCapable`, `PermissionDenied`), which Deno's Node layer throws as Deno's
 * own class, without a code.
 */
function nodeCode(error: unknown): string | undefined {
  return codeOf(error) ?? (isPermissionRefusal(error) ? "EACCES" : undefined);
}

/**
 * Maps a native error of `syscall` on `path`, whose POSIX code is `nativeCode` (by default
 * `nodeCode(error)`), to the port's error. A runtime code (`ERR_INVALID_ARG_VALUE`, ...) is taken
 * as the POSIX code it stands for; an error without a code gets the one its message's
 * `"(os error N)"` names, or `EIO`.
 */
export function mapNativeError(
  error: unknown,
  syscall: string,
  path: string,
  nativeCode: string | undefined = nodeCode(error),
): FsError {
  if (error instanceof FsError) return error;
  const options = { cause: error };
  const code = posixCode(nativeCode) ?? osErrorCode(error, PLATFORM);
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
        error instanceof Error ? withoutNativePath(error.message) : "I/O error",
        options,
      );
  }
}

/**
 * A native error message without the call and path the runtime appended to it (`", lstat
 * '/p'"` in Node, `": lstat '/p'"` in Deno): the port's error adds its own.
 */
function withoutNativePath(message: string): string {
  return message.replace(/[,:] [a-z_]+ '[^']*'(?: -> '[^']*')?$/, "");
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

/** The furthest time from 1970 a `Date` holds, in milliseconds either way. */
const MAX_TIME_MS = 8.64e15;

/**
 * Refuses a modification time that is not a finite number of milliseconds within what a `Date`
 * holds (`EINVAL`), as every adapter does: Node would take a non-finite one as "now", Deno as the
 * epoch, and Deno takes a `Date` past the range as the epoch too.
 */
export function checkTime(syscall: string, path: string, timeMs: number): void {
  if (!Number.isFinite(timeMs) || Math.abs(timeMs) > MAX_TIME_MS) {
    throw new FsIoError("EINVAL", syscall, path, `Invalid time ${timeMs}`);
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

/**
 * True when the final component of `path` (trailing slashes aside) is `.` or `..`: a name the
 * calls that change an entry refuse before touching anything, since the kernel (or a runtime's
 * recursive remove) would act on the directory it resolves to, through any symlink before it.
 */
export function endsInDots(path: string): boolean {
  const trimmed = withoutTrailingSlash(path) ?? path;
  const last = trimmed.slice(trimmed.lastIndexOf("/") + 1);
  return last === "." || last === "..";
}

/**
 * Refuses a `remove` of a path whose final component is `.` or `..` with `FsIoError` code
 * `"EINVAL"` (Linux's rmdir says so of `.`): the removal would empty the directory it resolves
 * to, through a symlink before it, which `remove` never follows.
 */
export function refuseDotsRemove(path: string): void {
  if (endsInDots(path)) {
    throw new FsIoError("EINVAL", "remove", path, "Cannot remove an entry named '.' or '..'");
  }
}

/**
 * Refuses a `rename` from or to a path whose final component is `.` or `..` with `FsIoError` code
 * `"EBUSY"`, as Linux's rename does, on every platform.
 */
export function refuseDotsRename(from: string, to: string): void {
  for (const path of [from, to]) {
    if (endsInDots(path)) {
      throw new FsIoError("EBUSY", "rename", path, "Cannot rename an entry named '.' or '..'");
    }
  }
}

/** What `renameInOrder` needs of a runtime. */
export interface NativeRename {
  /** The kind of the entry at `path`, never following it (an `lstat`); throws the native error. */
  readonly kind: (path: string) => Promise<"directory" | "symlink" | "other">;
  /** The native rename; throws the native error. */
  readonly rename: (from: string, to: string) => Promise<void>;
  /** The adapter's mapping of a native error to the port's error. */
  readonly map: (error: unknown, syscall: string, path: string) => FsError;
}

/** Codes of a failed rename that come from one side only: the source when it is not there. */
const ONE_SIDED_RENAME_CODES: ReadonlySet<string> = new Set([
  "ENOENT",
  "ENOTDIR",
  "ELOOP",
  "ENAMETOOLONG",
  "EINVAL",
]);

/**
 * Renames `from` to `to` through `native`, reporting a failure in the port's order (see
 * `FileSystem.rename`), whichever the kernel found first: a final `.` or `..` on either side
 * (EBUSY); then the source (missing, or a path through a file, a loop, too long: named `from`);
 * then anything but a directory spelled with a trailing slash on either side (NotADirectory,
 * naming the slashed path), a symlink included, which is never followed; then the destination
 * (named `to`). A failure that may come from either side (a refused permission, EXDEV, EIO) names
 * `from`. The source is looked at before the rename only when a path ends with a slash, and after
 * it only when it failed.
 */
export async function renameInOrder(from: string, to: string, native: NativeRename): Promise<void> {
  refuseDotsRename(from, to);
  const fromBare = withoutTrailingSlash(from);
  const toBare = withoutTrailingSlash(to);
  const source = async (): Promise<string> => {
    try {
      return await native.kind(fromBare ?? from);
    } catch (error) {
      throw native.map(error, "rename", from);
    }
  };
  if (fromBare !== undefined || toBare !== undefined) {
    if (await source() !== "directory") {
      throw new NotADirectory("rename", fromBare !== undefined ? from : to);
    }
    // A trailing slash makes some kernels follow a final symlink: refuse it as Linux does.
    if (toBare !== undefined) {
      await refuseSlashedLink("rename", to, async (bare) => {
        return await native.kind(bare) === "symlink";
      });
    }
  }
  try {
    await native.rename(from, to);
  } catch (error) {
    const mapped = native.map(error, "rename", to);
    // POSIX allows either code for a directory renamed over a non-empty one.
    if (mapped.code === "ENOTEMPTY" || mapped.code === "EEXIST") {
      throw new NotEmpty("rename", to, { cause: error });
    }
    if (mapped.code === "EISDIR") throw mapped;
    if (!ONE_SIDED_RENAME_CODES.has(mapped.code)) throw native.map(error, "rename", from);
    // Which side: when the source is there, the destination is at fault.
    await source();
    throw mapped;
  }
}

/** Refuses a path holding a NUL byte with `FsIoError` code `"EINVAL"`, as every call does. */
export function refuseNul(syscall: string, path: string): void {
  if (path.includes("\0")) {
    throw new FsIoError("EINVAL", syscall, path, "Path contains a NUL byte");
  }
}
