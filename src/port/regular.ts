/**
 * Reads and opens of a file only when it is a regular file: never through a link in the last
 * component and never waiting on a FIFO (with the port's no-follow calls where it has them),
 * shared by both storage designs. Runtime-free.
 *
 * @module
 */
import type { EntryKind, FileHandle, FileSystem } from "./fs.ts";
import { FsError, NotFound } from "./errors.ts";
import { type Durability, entryKind } from "./durable.ts";
import { dirname } from "./path.ts";

/**
 * True for the failure of a no-follow read of a regular file that is busy (`EAGAIN`: a lease
 * held by another process makes the non-blocking open fail at once instead of waiting).
 */
export function isBusy(error: unknown): boolean {
  return error instanceof FsError && (error.code === "EAGAIN" || error.code === "EWOULDBLOCK");
}

/**
 * Reads the file at `path` only if it is a regular file, never through a link and never waiting
 * on a FIFO: with `readFileNoFollow` in one call (a failure, or an empty read, is then judged by
 * `lstat`), otherwise after an `lstat`. Returns the bytes, the kind of what is there instead, or
 * undefined when nothing is. A failure to read a regular file is thrown.
 */
export async function readIfRegular(
  fs: FileSystem,
  path: string,
  options: FailureOptions = {},
): Promise<Found<Uint8Array>> {
  const read = fs.readFileNoFollow?.bind(fs);
  const noFollow = read === undefined ? undefined : async (): Promise<Found<Uint8Array>> => {
    const bytes = await read(path);
    if (bytes.length > 0) return bytes;
    // A FIFO without a writer reads as empty, as does an empty file (or one between its create
    // and its write).
    const kind = await otherKind(fs, path);
    return kind === null ? bytes : kind;
  };
  return await ifRegular(fs, path, noFollow, () => fs.readFile(path), options);
}

/** How `ifRegular` (and the reads over it) judge an access that failed. */
export interface FailureOptions {
  /**
   * A no-follow access that failed with a storage error, where an `lstat` then finds nothing, is
   * that error (thrown), not a missing file: a reader of records that must not pass a storage
   * fault for an absent record. Default: taken for missing (the file went meanwhile).
   */
  readonly failureIsNotMissing?: boolean;
}

/** What is at `path` when it is not a regular file (its `lstat` kind); null for a regular file. */
export async function otherKind(
  fs: FileSystem,
  path: string,
): Promise<Exclude<EntryKind, "file"> | null | undefined> {
  const kind = await entryKind(fs, path);
  return kind === "file" ? null : kind;
}

/** What an access to a path found: its result, the kind of what is there instead, or nothing. */
export type Found<T> = T | Exclude<EntryKind, "file"> | undefined;

/**
 * Runs an access to `path` only if it is a regular file: `noFollow`, one call that refuses a link
 * and never waits on a FIFO, where the port has one (a failure is then judged by `lstat`), and
 * otherwise `follow` after an `lstat`. Returns what the access returns, the kind of what is there
 * instead, or undefined when nothing is; a failure to access a regular file is thrown.
 */
export async function ifRegular<T>(
  fs: FileSystem,
  path: string,
  noFollow: (() => Promise<Found<T>>) | undefined,
  follow: () => Promise<T>,
  options: FailureOptions = {},
): Promise<Found<T>> {
  const access = noFollow ?? (async (): Promise<Found<T>> => {
    const kind = await otherKind(fs, path);
    return kind === null ? await follow() : kind;
  });
  try {
    return await access();
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    // Busy (a lease) is left to the caller, which looks again its own way; an error that is not
    // the port's (a view of the port refusing the path itself) is the caller's to report.
    if (noFollow === undefined || isBusy(error) || !(error instanceof FsError)) throw error;
    // A link, a directory or a FIFO refused the access: say what it is. A regular file failed.
    const kind = await otherKind(fs, path);
    if (kind === undefined && options.failureIsNotMissing === true) throw error;
    if (kind !== null) return kind;
    throw error;
  }
}

/**
 * `readIfRegular` for a file a call must read: a regular file that is busy (a lease another
 * process holds makes the no-follow read fail at once) is then read as a plain read reads it,
 * waiting for the lease, as a store without no-follow reads always does, once an `lstat` has seen
 * a regular file there (a FIFO another process holds open is busy too, and is never read). With `kindChecked` (the
 * caller has just seen a regular file at `path`, by `lstat` or a directory listing), a port
 * without `readFileNoFollow` reads at once: another `lstat` would leave the same window open.
 */
export async function readSessionFile(
  fs: FileSystem,
  path: string,
  kindChecked = false,
  options: FailureOptions = {},
): Promise<Found<Uint8Array>> {
  if (kindChecked && fs.readFileNoFollow === undefined) return await fs.readFile(path);
  try {
    return await readIfRegular(fs, path, options);
  } catch (error) {
    if (!isBusy(error)) throw error;
    // Busy is also what a FIFO with a writer says: read only after an `lstat` saw a file.
    return await ifRegular(fs, path, undefined, () => fs.readFile(path));
  }
}

/** A regular file opened by `openIfRegular`, and its size. */
export interface RegularFile {
  /** The handle (read-only unless opened for appending); the caller closes it. */
  readonly handle: FileHandle;
  /** The file's size: known from the open itself with `openNoFollow`, otherwise an `fstat`. */
  readonly size: () => Promise<number>;
  /** The file's permission bits when the open reported them (`openNoFollow`). */
  readonly mode?: number | undefined;
}

/** `handle` as a `RegularFile` whose size is asked of the handle when needed. */
export function sizedLater(handle: FileHandle): RegularFile {
  return { handle, size: async () => (await handle.stat()).size };
}

/** How `openIfRegular` and `openSessionFile` open a file: for reading, or for appending. */
export interface RegularOpenOptions {
  /** Open an existing file for appending (a writer's log) instead of read-only. */
  readonly append?: boolean;
}

/**
 * Opens the file at `path` for reading (or with `append` for appending) only if it is a regular
 * file, never through a link and never waiting on a FIFO: with `openNoFollow` (`openAppendNoFollow`)
 * in one call whose own `fstat` says what was opened (a failure is then judged by `lstat`), otherwise after an
 * `lstat`, where a file swapped in between by a process that can write the directory is not
 * excluded. Returns the open file, the kind of what is there instead, or undefined when nothing
 * is. A failure to open a regular file is thrown.
 */
export async function openIfRegular(
  fs: FileSystem,
  path: string,
  options: RegularOpenOptions = {},
): Promise<Found<RegularFile>> {
  const append = options.append === true;
  const open = append ? fs.openAppendNoFollow?.bind(fs) : fs.openNoFollow?.bind(fs);
  const noFollow = open === undefined ? undefined : async (): Promise<Found<RegularFile>> => {
    const { handle, info } = await open(path);
    if (info.kind !== "file") {
      // A FIFO or a device, opened without waiting: closed unread.
      await handle.close();
      return info.kind;
    }
    return { handle, size: () => Promise.resolve(info.size), mode: info.mode };
  };
  return await ifRegular(fs, path, noFollow, () => openChecked(fs, path, options));
}

/**
 * `openIfRegular` for a file a call must read: a regular file that the no-follow open finds busy
 * (`EAGAIN`: a lease held by another process) is opened as a port without `openNoFollow` opens
 * it, after an `lstat`, with an open that waits for the lease to be released; a file is never
 * reported unreadable for a lease (a FIFO another process holds open is busy too, and is never
 * opened).
 */
export async function openIfRegularWaiting(
  fs: FileSystem,
  path: string,
  options: RegularOpenOptions = {},
): Promise<Found<RegularFile>> {
  try {
    return await openIfRegular(fs, path, options);
  } catch (error) {
    if (!isBusy(error)) throw error;
    return await ifRegular(fs, path, undefined, () => openChecked(fs, path, options));
  }
}

/**
 * Under `"full"` durability, makes a file a call found already written durable before the call
 * relies on it: its bytes, then its entry in its directory, every time. What this process made
 * durable of the file before says nothing of what another writer did since: a writer that never
 * fsyncs may have written its bytes, and one that died before its directory's fsync may have
 * renamed another file into place. The file is opened as a read opens it: never through a link,
 * never waiting on a FIFO, waiting out a lease another process holds. Gone, or something else
 * there now (another actor removed or replaced it since the caller read it): none of its bytes to
 * sync, and its directory is made durable all the same; when the directory is gone too (nothing
 * found at all, as a call that found the file missing in a directory never made), there is
 * nothing to make durable.
 */
export async function ensureFoundFileDurable(
  fs: FileSystem,
  path: string,
  durability: Durability = "full",
): Promise<void> {
  if (durability !== "full") return; // nothing is synced in this mode
  const opened = await openIfRegularWaiting(fs, path);
  if (opened !== undefined && typeof opened !== "string") {
    try {
      await opened.handle.sync();
    } finally {
      await opened.handle.close();
    }
    await fs.syncDir(dirname(path));
    return;
  }
  try {
    await fs.syncDir(dirname(path));
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
  }
}

/**
 * `open` (read-only, or for appending) of a file whose kind the caller checked with `lstat`.
 */
export async function openChecked(
  fs: FileSystem,
  path: string,
  options: RegularOpenOptions,
): Promise<RegularFile> {
  return sizedLater(await fs.open(path, options.append === true ? { append: true } : undefined));
}
