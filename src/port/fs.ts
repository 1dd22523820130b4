/**
 * The filesystem port: the small set of promise-returning calls the library needs from a
 * storage. Adapters map these calls onto a runtime (Node, Deno) or an in-memory tree, and
 * map native errors to the typed errors of `errors.ts`. Atomicity, recovery and staging
 * live in the core (`durable.ts`), never in an adapter; the core builds them on three promises
 * every adapter keeps, as POSIX filesystems do: `rename` replaces its destination atomically, an
 * exclusive create (`createNew`, `mkdir`) has one winner among calls issued at once, and an
 * append handle writes at the file's end as it is then. Every call returns a promise; a failure
 * is a rejection, never a throw.
 *
 * Paths are absolute POSIX paths (`/a/b/c`). Adapters never follow symlinks unless a call
 * says so (`stat`, `realPath`, `open`, `readFile`, `writeFile` follow them like POSIX does;
 * `lstat`, `remove` and `rename` do not; `readDir` follows the path itself but never the entries it
 * lists).
 *
 * @module
 */

import type { ProcessProbe } from "./probe.ts";

/** The kind of a directory entry or an inspected path. */
export type EntryKind = "file" | "directory" | "symlink" | "other";

/** What `stat`, `lstat` and `FileHandle.stat` report about a path. */
export interface FileInfo {
  /** The entry kind; `lstat` reports `"symlink"` for a link, `stat` reports its target's kind. */
  readonly kind: EntryKind;
  /** Size in bytes (for a symlink under `lstat`: the length of its target string). */
  readonly size: number;
  /** Permission bits only (`0o777` mask). */
  readonly mode: number;
  /** Last modification time in Unix milliseconds. */
  readonly mtimeMs: number;
}

/** One entry of a directory listing. */
export interface DirEntry {
  /** The entry's name within its directory (never `.` or `..`). */
  readonly name: string;
  /** The entry's own kind; a symlink is reported as `"symlink"`, never followed. */
  readonly kind: EntryKind;
}

/** How `FileSystem.open` opens a file. The default is read-only on an existing file. */
export interface OpenOptions {
  /** Allow writes through the handle. */
  readonly write?: boolean;
  /**
   * Every write goes to the current end of the file, after whatever another handle or process
   * appended since (implies `write`).
   */
  readonly append?: boolean;
  /** Create the file when it does not exist (implies `write`). */
  readonly create?: boolean;
  /**
   * Create the file and fail with `AlreadyExists` when anything (even a dangling symlink) is at
   * the path, or when the path ends in `.` or `..` (with or without a trailing `/`: it names a
   * directory). A trailing `/` after a name fails with `IsADirectory`, as with `create`, whatever
   * is at the name (a file too).
   * Exclusive also against calls issued at once, by this process or another: exactly one of them
   * creates the file (locks and reserved names rely on it).
   */
  readonly createNew?: boolean;
  /** Truncate an existing file to zero bytes on open (implies `write`). */
  readonly truncate?: boolean;
  /** Permission bits for a newly created file (before the process umask on real systems). */
  readonly mode?: number;
}

/** A file opened by `FileSystem.openNoFollow`, with what its handle's `stat` said at the open. */
export interface OpenedFile {
  /** The handle (read-only, or for appending from `openAppendNoFollow`); the caller closes it. */
  readonly handle: FileHandle;
  /** The opened file's kind, size, mode and modification time. */
  readonly info: FileInfo;
}

/** Options of `FileSystem.writeFile`. */
export interface WriteFileOptions {
  /** Permission bits for a newly created file. */
  readonly mode?: number;
  /** Fail with `AlreadyExists` when anything is at the path (as `OpenOptions.createNew`). */
  readonly createNew?: boolean;
}

/** Options of `FileSystem.mkdir`. */
export interface MkdirOptions {
  /** Permission bits for each directory created. */
  readonly mode?: number;
  /** Create missing parents and succeed when the directory already exists. */
  readonly recursive?: boolean;
}

/** Options of `FileSystem.remove`. */
export interface RemoveOptions {
  /**
   * Remove a non-empty directory with everything below it, even a tree deeper than any one path
   * can name (`PATH_MAX`). Symlinks are removed, never followed.
   */
  readonly recursive?: boolean;
}

/**
 * An open file. Reads are positioned; writes are sequential from the current position, or at
 * the end of the file for a handle opened with `append`. Calls on one handle take effect in call
 * order, even when issued without waiting. Every call on a closed handle (a second `close()`
 * included) fails with `FsIoError` code `"EBADF"`, and so does a `write` (even of no bytes) or a
 * `truncate` on a handle not opened for writing.
 */
export interface FileHandle {
  /**
   * Reads up to `length` bytes at `offset`. Returns fewer bytes only at the end of the file.
   * Does not move the write position.
   */
  read(offset: number, length: number): Promise<Uint8Array>;
  /** Writes all of `data` (at the end for append handles, otherwise at the write position). */
  write(data: Uint8Array): Promise<void>;
  /**
   * Sets the file length; the write position of a non-append handle moves to `length` if beyond it.
   * A negative or fractional `length` fails with `FsIoError` code `"EINVAL"`, as a negative or
   * fractional offset or length of `read` does.
   */
  truncate(length: number): Promise<void>;
  /** Makes the file's bytes durable (fsync). Directory entries are not covered: see `syncDir`. */
  sync(): Promise<void>;
  /** Information about the open file. */
  stat(): Promise<FileInfo>;
  /** Closes the handle. Closing syncs nothing. */
  close(): Promise<void>;
}

/**
 * The filesystem port. Every call returns a promise and fails only with the typed errors of
 * `errors.ts` (`NotFound`, `AlreadyExists`, `NotADirectory`, `IsADirectory`, `NotEmpty`,
 * `PermissionDenied`, `FsIoError`).
 */
export interface FileSystem {
  /**
   * Optional: the processes that may share this filesystem (this process's pid and host, and
   * whether a pid on this host is alive). A store whose options give no `process` probe uses
   * this one, so writer and collection locks hold across processes by default. `nodeFs()` and
   * `denoFs()` offer it; `MemoryFs` does not (one process).
   */
  readonly processes?: ProcessProbe | undefined;
  /** Opens a file; see `OpenOptions`. Opening a directory fails with `IsADirectory`. */
  open(path: string, options?: OpenOptions): Promise<FileHandle>;
  /** Reads a whole file. */
  readFile(path: string): Promise<Uint8Array>;
  /**
   * Optional. Reads a whole file like `readFile`, in one call that never goes through a symlink
   * in the last component of `path` and never waits on a FIFO or device (it is opened
   * non-blocking). A final symlink fails with `FsIoError` code `"ELOOP"`, a directory with
   * `IsADirectory`, a missing file with `NotFound`; a FIFO, socket or device is not read: it
   * reads as empty at once (a device such as `/dev/zero` never ends) or fails at once, and a
   * regular file that another process holds a lease on fails with `FsIoError` code `"EAGAIN"`
   * instead of waiting for it.
   * Callers that must not read through a link use it when present and otherwise check the
   * entry's kind (`lstat`, `readDir`) before reading. An adapter offers it only where the
   * platform can refuse the link in the open itself (`O_NOFOLLOW`).
   */
  readFileNoFollow?(path: string): Promise<Uint8Array>;
  /**
   * Optional. Opens an existing file read-only like `open(path)`, in one call that never goes
   * through a symlink in the last component of `path` and never waits on a FIFO or device (it
   * is opened non-blocking), and reports what `FileHandle.stat` says of the file it opened: a
   * caller checks the kind of exactly the file it reads. A final symlink fails with `FsIoError`
   * code `"ELOOP"`, a directory with `IsADirectory`, a missing file with `NotFound`; a FIFO or
   * device is opened and reported as kind `"other"` (close it without reading). Being
   * non-blocking, the open of a regular file that another process holds a lease on fails at once
   * with `FsIoError` code `"EAGAIN"` (as `readFileNoFollow` does) where `open` would wait for the
   * lease. Offered where `readFileNoFollow` is.
   */
  openNoFollow?(path: string): Promise<OpenedFile>;
  /**
   * Optional. Opens an existing file for appending like `open(path, { append: true })` (reads and
   * writes, every write at the current end of the file), with the refusals and the report of
   * `openNoFollow`: a writer never appends through a link swapped in after it checked the file.
   * Callers without it check the kind (`lstat`) before `open`. Offered where `openNoFollow` is.
   */
  openAppendNoFollow?(path: string): Promise<OpenedFile>;
  /** Creates or truncates a file and writes `data` to it. Syncs nothing. */
  writeFile(path: string, data: Uint8Array, options?: WriteFileOptions): Promise<void>;
  /**
   * Renames a file or directory. A file replaces an existing file at `to`; a directory replaces
   * only an empty directory. The replacement is atomic: at no moment, a crash included, is there
   * nothing at `to` (every atomic replace of the core relies on it). Neither side is followed when it is a symlink, even spelled with a
   * trailing `/`: moving anything but a directory (a symlink included) with a trailing `/` on
   * either side fails with `NotADirectory`.
   *
   * When several things are wrong, the first of these is reported, whatever the platform finds
   * first:
   * 1. a final `.` or `..` on either side: `FsIoError` code `"EBUSY"`, naming that path;
   * 2. the source: missing (`NotFound`), beneath a file (`NotADirectory`), through a link loop,
   *    too long or holding NUL (`FsIoError`), naming `from`;
   * 3. anything but a directory spelled with a trailing `/` on either side: `NotADirectory`,
   *    naming the side spelled so (`from` when both are);
   * 4. the destination, naming `to`: a missing directory on the way (`NotFound`), a file on the
   *    way or a directory moved over a non-directory (`NotADirectory`), a file moved over a
   *    directory (`IsADirectory`), a directory moved into itself (`FsIoError` code `"EINVAL"`),
   *    over a non-empty directory or over a directory the source lies in (`NotEmpty`), a path
   *    through a link loop, too long or holding NUL (`FsIoError`).
   *
   * A failure that may come from either side (a refused permission, a move across devices, an
   * I/O error) names `from`.
   */
  rename(from: string, to: string): Promise<void>;
  /**
   * Removes a file, a symlink (not its target) or a directory (empty unless `recursive`). A path
   * with a trailing `/` must name a directory: a symlink (even to one) fails with `NotADirectory`.
   */
  remove(path: string, options?: RemoveOptions): Promise<void>;
  /**
   * Creates a directory. Anything at the final name that is not a directory (a file, or a symlink
   * that does not lead to one: dangling, to a file, a loop) is in the way: it fails with
   * `AlreadyExists`, even spelled with a trailing `/` and with `recursive` too. Beneath a file
   * (or a link that leads through one) it fails with `NotADirectory`. Without `recursive`, an
   * existing directory fails with `AlreadyExists`: of calls issued at once on one name, exactly
   * one succeeds.
   */
  mkdir(path: string, options?: MkdirOptions): Promise<void>;
  /**
   * Lists a directory's entries (never `.` or `..`), sorted by name as JavaScript's `<` sorts
   * strings (by UTF-16 code unit).
   */
  readDir(path: string): Promise<DirEntry[]>;
  /** Information about a path, following symlinks. */
  stat(path: string): Promise<FileInfo>;
  /** Information about a path itself, never following a final symlink. */
  lstat(path: string): Promise<FileInfo>;
  /** The canonical absolute path with every symlink resolved; the path must exist. */
  realPath(path: string): Promise<string>;
  /** Sets the permission bits of a path (following symlinks). */
  chmod(path: string, mode: number): Promise<void>;
  /**
   * Creates a symlink at `path` whose target string is `target`. Anything at `path`, even spelled
   * with a trailing `/`, fails with `AlreadyExists`.
   */
  symlink(target: string, path: string): Promise<void>;
  /** The target string of the symlink at `path`. */
  readLink(path: string): Promise<string>;
  /**
   * Makes a directory's entries (files created, renamed in or out, removed) durable. A symlink is
   * followed; anything but a directory fails with `NotADirectory` (a dangling link with
   * `NotFound`). Where the platform cannot sync a directory, the adapter documents the call as a
   * no-op: creates and renames then survive power loss only as far as the platform keeps directory
   * entries durable on its own (a resolved save can otherwise be lost).
   */
  syncDir(path: string): Promise<void>;
  /**
   * Updates the modification time of a path (following symlinks), in Unix milliseconds. A time
   * before 1970 is kept, and a whole number of milliseconds reads back exactly (a finer fraction
   * may be cut to what the platform keeps); a time that is not a finite number within what a
   * `Date` holds (±8.64e15 ms) fails with `FsIoError` code `"EINVAL"`, changing nothing. (A
   * filesystem may keep a narrower range: ext4, for one, stops in 2446.)
   */
  utime(path: string, mtimeMs: number): Promise<void>;
  /** The current user's home directory, when the adapter knows one (used for `~/.loop`). */
  homeDir?(): string | undefined;
}
