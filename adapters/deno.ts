/**
 * The Deno adapter: the filesystem port over the `Deno.*` file APIs, and native SHA-256.
 * Native errors are mapped to the port's typed errors (`NotFound`, `AlreadyExists`, ...), with
 * the native error kept as `cause`. Needs `--allow-read` and `--allow-write` for the paths it
 * touches (and `--allow-env=HOME` for `homeDir()`, plus `--allow-sys=homedir` for the account's
 * home directory when HOME is unset).
 *
 * A file it opens with `Deno.open` (`open()`: the temp files of `meta.json` and `index.json`)
 * takes a write of up to 64 KiB as one synchronous call on the main thread, which lands in the
 * page cache in microseconds where an asynchronous write waits for a thread of the runtime's
 * blocking pool (600 bytes: 8 µs against 66 µs on Deno 2.9.6, on a 2-core VM); larger writes
 * to it are asynchronous. Files opened without following links (`openNoFollow`,
 * `openAppendNoFollow`: the log a writer appends to, the files a reader reads) go through Deno's
 * Node layer, whose writes measured as fast. A write that blocks (a page cache full of dirty
 * pages, a stalled network filesystem) holds the event loop while it lasts; an fsync never does.
 *
 * @example Storing and hashing a file through the port
 * ```ts
 * import assert from "node:assert/strict";
 * import { denoFs, denoSha256 } from "@loop/sessions/deno";
 *
 * const dir = await Deno.makeTempDir();
 * const fs = denoFs();
 * await fs.writeFile(`${dir}/hello.txt`, new TextEncoder().encode("hello"), { mode: 0o600 });
 * const bytes = await fs.readFile(`${dir}/hello.txt`);
 * assert.equal((await fs.stat(`${dir}/hello.txt`)).mode, 0o600);
 * assert.equal(
 *   denoSha256().update(bytes).digestHex(),
 *   "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
 * );
 * await fs.remove(dir, { recursive: true });
 * ```
 *
 * @module
 */
import type {
  DirEntry,
  EntryKind,
  FileHandle,
  FileInfo,
  FileSystem,
  MkdirOptions,
  OpenedFile,
  OpenOptions,
  RemoveOptions,
  WriteFileOptions,
} from "../src/port/fs.ts";
import { constants as nodeConstants } from "node:fs";
import { open as openNode } from "node:fs/promises";
import type { FsError } from "../src/port/errors.ts";
import { checkMode, IsADirectory, NotADirectory, NotEmpty } from "../src/port/errors.ts";
import type { Sha256Factory } from "../src/port/sha256.ts";
import { nodeProcessProbe, nodeSha256 } from "./node.ts";
import {
  openNoFollowNative,
  readFileNoFollowNative,
  readInChunks,
  tooLargeForOneCall,
} from "./_node_read.ts";
import { SYNC_WRITE_LIMIT } from "./_node_handle.ts";
import { osHomeDir } from "./_node_env.ts";
import { lazyProbe, requireHostName } from "./_probe.ts";
import type { ProcessProbe } from "../src/loop/lock.ts";
import {
  callMapped,
  checkCount,
  checkReadRange,
  checkTime,
  closedHandle,
  codeOf,
  DIR_SYNC_REFUSALS,
  mapNativeError,
  notWritable,
  osErrorCode,
  posixCode,
  refuseDotsRemove,
  refuseNul,
  refuseSlashedLink,
  renameInOrder,
} from "./_errors.ts";

/**
 * The POSIX code of a Deno error: its `code`, the errno its message names (`"File too large (os
 * error 27)"` carries no code), or the one its class stands for.
 */
function denoCode(error: unknown): string | undefined {
  const code = posixCode(codeOf(error)) ?? osErrorCode(error, Deno.build.os);
  if (code !== undefined) return code;
  if (error instanceof Deno.errors.NotFound) return "ENOENT";
  if (error instanceof Deno.errors.AlreadyExists) return "EEXIST";
  if (error instanceof Deno.errors.NotADirectory) return "ENOTDIR";
  if (error instanceof Deno.errors.IsADirectory) return "EISDIR";
  if (error instanceof Error && /directory not empty/i.test(error.message)) return "ENOTEMPTY";
  if (error instanceof Deno.errors.PermissionDenied || error instanceof Deno.errors.NotCapable) {
    return "EACCES";
  }
  // A closed handle; an invalid argument is not a disk fault.
  if (error instanceof Deno.errors.BadResource) return "EBADF";
  if (error instanceof TypeError || error instanceof RangeError) return "EINVAL";
  return undefined;
}

/** Maps a native error of `syscall` on `path` to the port's typed error. */
function mapError(error: unknown, syscall: string, path: string): FsError {
  return mapNativeError(error, syscall, path, denoCode(error));
}

/** Runs a native call and maps whatever it throws. */
function call<T>(syscall: string, path: string, run: () => Promise<T>): Promise<T> {
  return callMapped(mapError, syscall, path, run);
}

/** True when `path` itself is a symlink (never followed). */
async function isSymlink(path: string): Promise<boolean> {
  return (await Deno.lstat(path)).isSymlink;
}

function kindOf(info: Deno.FileInfo | Deno.DirEntry): EntryKind {
  if (info.isFile) return "file";
  if (info.isDirectory) return "directory";
  if (info.isSymlink) return "symlink";
  return "other";
}

function toInfo(info: Deno.FileInfo): FileInfo {
  return {
    kind: kindOf(info),
    size: info.size,
    // Platforms without POSIX modes (Windows) report null.
    mode: (info.mode ?? 0) & 0o777,
    mtimeMs: info.mtime?.getTime() ?? 0,
  };
}

/** Reads longer than this are first clamped to the file's size. */
const LARGE_READ = 64 * 1024 * 1024;
/**
 * Writes the first bytes of `data` to `file` (all of them, unless the call is cut short): with one
 * synchronous call on the main thread up to `SYNC_WRITE_LIMIT` bytes, as Deno's Node layer makes
 * every file write (and the Node adapter small ones): a small write lands in the page cache in
 * microseconds, where an asynchronous one waits for a thread of the runtime's blocking pool (about
 * 60 µs on a 2-core machine: most of a `meta.json` replace without fsync). Larger writes stay
 * asynchronous.
 */
function writeSome(file: Deno.FsFile, data: Uint8Array): number | Promise<number> {
  return data.length <= SYNC_WRITE_LIMIT ? file.writeSync(data) : file.write(data);
}

class DenoFileHandle implements FileHandle {
  readonly #file: Deno.FsFile;
  readonly #path: string;
  readonly #append: boolean;
  readonly #writable: boolean;
  /** The write position of a non-append handle; tracked here so reads never move it. */
  #position = 0;
  /** Reads seek the shared file cursor, so calls on one handle run one at a time. */
  #queue: Promise<unknown> = Promise.resolve();
  /** Where the file cursor is, when known: a read or write there needs no seek first. */
  #cursor: number | undefined = 0;
  /** Set when the close runs: every later call fails with EBADF. */
  #closed = false;

  constructor(file: Deno.FsFile, path: string, append: boolean, writable: boolean) {
    this.#file = file;
    this.#path = path;
    this.#append = append;
    this.#writable = writable;
  }

  /** Moves the file cursor to `offset` unless it is known to be there. */
  async #seek(offset: number): Promise<void> {
    if (this.#cursor === offset) return;
    this.#cursor = undefined; // unknown until the seek completes
    await this.#file.seek(offset, Deno.SeekMode.Start);
    this.#cursor = offset;
  }

  #serial<T>(syscall: string, run: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(() =>
      call(syscall, this.#path, () => {
        if (this.#closed) throw closedHandle(syscall, this.#path);
        return run();
      })
    );
    this.#queue = result.then(() => undefined, () => undefined);
    return result;
  }

  read(offset: number, length: number): Promise<Uint8Array> {
    return this.#serial("read", async () => {
      checkReadRange(this.#path, offset, length);
      let want = length;
      if (want > LARGE_READ) {
        // A length taken from a file's metadata may lie: never allocate past the end of the file.
        want = Math.max(0, Math.min(want, (await this.#file.stat()).size - offset));
      }
      const buffer = new Uint8Array(want);
      if (want === 0) return buffer;
      try {
        await this.#seek(offset);
      } catch (error) {
        // lseek refuses an offset past the largest file the filesystem holds (EINVAL): there is
        // nothing to read that far, as a positioned read would say. Checked only on failure.
        if (denoCode(error) === "EINVAL" && offset >= (await this.#file.stat()).size) {
          return new Uint8Array(0);
        }
        throw error;
      }
      let filled = 0;
      while (filled < want) {
        this.#cursor = undefined; // unknown if the call fails
        const count = await this.#file.read(buffer.subarray(filled));
        if (count === null || count === 0) break;
        filled += count;
        this.#cursor = offset + filled;
      }
      return filled === want ? buffer : buffer.slice(0, filled);
    });
  }

  write(data: Uint8Array): Promise<void> {
    return this.#serial("write", async () => {
      if (!this.#writable) throw notWritable("write", this.#path);
      // An append handle writes at the end whatever the cursor (O_APPEND), leaving it there.
      if (this.#append) this.#cursor = undefined;
      else await this.#seek(this.#position);
      let written = 0;
      while (written < data.length) {
        this.#cursor = undefined; // unknown if the call fails
        const count = await writeSome(this.#file, data.subarray(written));
        written += count;
        // The bytes of each call that landed stay written (POSIX), even when a later call of this
        // write fails (ENOSPC, EFBIG): the position moves past them, as the Node adapter's does.
        if (!this.#append) {
          this.#position += count;
          this.#cursor = this.#position;
        }
      }
    });
  }

  truncate(length: number): Promise<void> {
    return this.#serial("truncate", async () => {
      if (!this.#writable) throw notWritable("truncate", this.#path);
      checkCount("truncate", this.#path, length);
      await this.#file.truncate(length);
      if (this.#position > length) this.#position = length;
    });
  }

  sync(): Promise<void> {
    return this.#serial("sync", () => this.#file.sync());
  }

  stat(): Promise<FileInfo> {
    return this.#serial("fstat", async () => toInfo(await this.#file.stat()));
  }

  close(): Promise<void> {
    return this.#serial("close", () => {
      this.#closed = true;
      this.#file.close();
      return Promise.resolve();
    });
  }
}

/** A directory opened by `openDirectory`: fsync and close. */
interface SyncableDirectory {
  sync(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Read-only, refusing anything but a directory in the open itself (`ENOTDIR`), never waiting on a
 * FIFO: for `openDirectory` where a trailing slash makes the path too long. Undefined where the
 * platform lacks the flags (Windows, which has no FIFO at a path).
 */
const DIRECTORY_READ: number | undefined =
  typeof nodeConstants.O_DIRECTORY === "number" && typeof nodeConstants.O_NONBLOCK === "number"
    ? nodeConstants.O_RDONLY | nodeConstants.O_DIRECTORY | nodeConstants.O_NONBLOCK
    : undefined;

/**
 * Opens `path` for `syncDir`, refusing anything but a directory (`NotADirectory`, or the open's
 * ENOTDIR) without ever opening a FIFO, which a read-only open would wait on for a writer (a
 * directory swapped for one after a stat included). `Deno.open` cannot pass `O_DIRECTORY`, so the
 * path is opened with a trailing slash, which makes the open itself refuse a non-directory; where
 * that is too long (a path of 4095 bytes, with Linux's PATH_MAX of 4096 counting the NUL), it is
 * opened through Deno's Node layer with `O_DIRECTORY | O_NONBLOCK`; where the platform lacks those
 * (Windows), as given after a stat finds a directory, and the handle is checked again.
 */
async function openDirectory(path: string): Promise<SyncableDirectory> {
  const denoDirectory = (file: Deno.FsFile): SyncableDirectory => ({
    sync: () => file.sync(),
    close: () => Promise.resolve(file.close()),
  });
  try {
    return denoDirectory(await Deno.open(path.endsWith("/") ? path : `${path}/`, { read: true }));
  } catch (error) {
    if (denoCode(error) !== "ENAMETOOLONG" || path.endsWith("/")) throw error;
  }
  if (DIRECTORY_READ !== undefined) {
    const handle = await openNode(path, DIRECTORY_READ);
    return { sync: () => handle.sync(), close: () => handle.close() };
  }
  if (!(await Deno.stat(path)).isDirectory) throw new NotADirectory("syncDir", path);
  const file = await Deno.open(path, { read: true });
  try {
    if (!(await file.stat()).isDirectory) throw new NotADirectory("syncDir", path);
  } catch (error) {
    file.close();
    throw error;
  }
  return denoDirectory(file);
}

/** What `readFileNoFollow` returns for a FIFO, socket or device: it is never read. */
const NOTHING = new Uint8Array(0);

/**
 * True when an `lstat` of `path` finds a FIFO, socket or device; false for anything else and
 * when the `lstat` fails (the read that follows reports its own error).
 */
function isSpecial(path: string): boolean {
  let info: Deno.FileInfo;
  try {
    info = Deno.lstatSync(path);
  } catch {
    return false;
  }
  return info.isFifo === true || info.isSocket === true || info.isCharDevice === true ||
    info.isBlockDevice === true;
}

class DenoFileSystem implements FileSystem {
  /**
   * See `FileSystem.readFileNoFollow`. `Deno.open` cannot refuse a final symlink, so this call
   * goes through Deno's Node layer (`O_NOFOLLOW`), where the platform has the flag: its one-call
   * `readFile`, after a synchronous `lstat` (a microsecond or two) that finds no FIFO, socket or
   * device there, since that `readFile` would read a device such as `/dev/zero` without end. A
   * FIFO, socket or device reads as empty, unread. A device put in its place between the two
   * calls, which takes a process allowed to make device nodes, is not excluded (a FIFO is: the
   * read never waits on one).
   */
  readonly readFileNoFollow?: (path: string) => Promise<Uint8Array>;
  /**
   * See `FileSystem.openNoFollow`: through Deno's Node layer too, for the same reason; its
   * handle is the Node adapter's, with this adapter's error mapping.
   */
  readonly openNoFollow?: (path: string) => Promise<OpenedFile>;
  /** See `FileSystem.openAppendNoFollow`: as `openNoFollow`, for appending. */
  readonly openAppendNoFollow?: (path: string) => Promise<OpenedFile>;

  readonly #processes = lazyProbe(denoProcessProbe);

  /**
   * See `FileSystem.processes`: `denoProcessProbe()`, made on first use; undefined where the runtime
   * may not read the host name (Deno without `--allow-sys`).
   */
  get processes(): ProcessProbe | undefined {
    return this.#processes();
  }

  constructor() {
    const noFollow = readFileNoFollowNative(mapError, true);
    if (noFollow !== undefined) {
      this.readFileNoFollow = (path) => isSpecial(path) ? Promise.resolve(NOTHING) : noFollow(path);
    }
    const open = openNoFollowNative(mapError);
    if (open !== undefined) this.openNoFollow = open;
    const append = openNoFollowNative(mapError, true);
    if (append !== undefined) this.openAppendNoFollow = append;
  }

  open(path: string, options: OpenOptions = {}): Promise<FileHandle> {
    return call("open", path, async () => {
      const createNew = options.createNew === true;
      const create = createNew || options.create === true;
      const append = options.append === true;
      const write = append || create || options.write === true || options.truncate === true;
      const file = await Deno.open(path, {
        read: true,
        write: write && !append,
        append,
        create,
        createNew,
        // Deno refuses `truncate` with `append`: the file is truncated right after the open.
        truncate: options.truncate === true && !append,
        ...modeOption("open", path, options.mode),
      });
      if (options.truncate === true && append) {
        try {
          await file.truncate(0);
        } catch (error) {
          file.close();
          throw error;
        }
      }
      if (!write) {
        // POSIX lets a directory be opened read-only; the port refuses it.
        let isDirectory: boolean;
        try {
          isDirectory = (await file.stat()).isDirectory;
        } catch (error) {
          file.close();
          throw error;
        }
        if (isDirectory) {
          file.close();
          throw new IsADirectory("open", path);
        }
      }
      return new DenoFileHandle(file, path, append, write);
    });
  }

  /**
   * Reads a whole file. A file larger than Deno can allocate a buffer for (`ENOMEM`) is read in
   * chunks, which fails with `FsIoError` code `"EFBIG"` when no buffer holds it, as on Node.
   */
  readFile(path: string): Promise<Uint8Array> {
    return call("readFile", path, async () => {
      try {
        return await Deno.readFile(path);
      } catch (error) {
        if (!tooLargeForOneCall(error)) throw error;
      }
      return await readInChunks(path, nodeConstants.O_RDONLY);
    });
  }

  writeFile(path: string, data: Uint8Array, options: WriteFileOptions = {}): Promise<void> {
    return call("writeFile", path, async () => {
      // Not Deno.writeFile: it applies `mode` to an existing file too, while the port (like
      // POSIX open) applies it only to a file it creates.
      const file = await Deno.open(path, {
        write: true,
        create: true,
        truncate: true,
        createNew: options.createNew === true,
        ...modeOption("writeFile", path, options.mode),
      });
      try {
        let written = 0;
        while (written < data.length) written += await writeSome(file, data.subarray(written));
      } finally {
        file.close();
      }
    });
  }

  /** See `FileSystem.rename`: its errors come in the port's order (`renameInOrder`). */
  rename(from: string, to: string): Promise<void> {
    return renameInOrder(from, to, {
      kind: async (path) => {
        const info = await Deno.lstat(path);
        return info.isDirectory ? "directory" : info.isSymlink ? "symlink" : "other";
      },
      rename: (from, to) => Deno.rename(from, to),
      map: mapError,
    });
  }

  async remove(path: string, options: RemoveOptions = {}): Promise<void> {
    // `link/.` or `dir/sub/..` names the directory it resolves to: a recursive remove would
    // empty it through the link. Refused before anything is looked at.
    refuseDotsRemove(path);
    // Deno.remove inspects the path with lstat: a symlink is unlinked, never followed, unless a
    // trailing slash makes the kernel follow it (a recursive remove would empty the target).
    if (path.endsWith("/")) await refuseSlashedLink("remove", path, isSymlink);
    try {
      await Deno.remove(path, { recursive: options.recursive === true });
    } catch (error) {
      // Some platforms report a non-empty directory as EEXIST.
      if (codeOf(error) === "EEXIST") throw new NotEmpty("remove", path, { cause: error });
      throw mapError(error, "remove", path);
    }
  }

  mkdir(path: string, options: MkdirOptions = {}): Promise<void> {
    return call("mkdir", path, () =>
      Deno.mkdir(path, {
        recursive: options.recursive === true,
        ...modeOption("mkdir", path, options.mode),
      }));
  }

  readDir(path: string): Promise<DirEntry[]> {
    return call("readDir", path, async () => {
      const out: DirEntry[] = [];
      for await (const entry of Deno.readDir(path)) {
        out.push({ name: entry.name, kind: kindOf(entry) });
      }
      return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    });
  }

  stat(path: string): Promise<FileInfo> {
    return call("stat", path, async () => toInfo(await Deno.stat(path)));
  }

  lstat(path: string): Promise<FileInfo> {
    return call("lstat", path, async () => toInfo(await Deno.lstat(path)));
  }

  realPath(path: string): Promise<string> {
    return call("realPath", path, () => Deno.realPath(path));
  }

  chmod(path: string, mode: number): Promise<void> {
    return call("chmod", path, () => {
      checkMode(path, mode);
      return Deno.chmod(path, mode);
    });
  }

  symlink(target: string, path: string): Promise<void> {
    return call("symlink", path, () => Deno.symlink(target, path));
  }

  readLink(path: string): Promise<string> {
    return call("readLink", path, () => Deno.readLink(path));
  }

  /**
   * Opens the directory read-only and fsyncs it. Where the platform refuses to open or fsync
   * a directory (Windows, some network filesystems: EISDIR, EINVAL, EPERM, EBADF), this is a
   * no-op: such platforms give no directory durability to ask for.
   */
  syncDir(path: string): Promise<void> {
    return call("syncDir", path, async () => {
      // Deno refuses a NUL byte with EINVAL, which would pass for a platform's refusal below.
      refuseNul("syncDir", path);
      let dir: SyncableDirectory;
      try {
        dir = await openDirectory(path);
      } catch (error) {
        const code = codeOf(error);
        if (code !== undefined && DIR_SYNC_REFUSALS.has(code)) return;
        throw error;
      }
      try {
        await dir.sync();
      } catch (error) {
        const code = codeOf(error);
        if (code === undefined || !DIR_SYNC_REFUSALS.has(code)) throw error;
      } finally {
        await dir.close();
      }
    });
  }

  /**
   * See `FileSystem.utime`. The time is kept to the millisecond (a `FileInfo` from Deno carries
   * no finer time), a time before 1970 included.
   */
  utime(path: string, mtimeMs: number): Promise<void> {
    return call("utime", path, async () => {
      checkTime("utime", path, mtimeMs);
      const info = await Deno.stat(path);
      // A Date, whole milliseconds, reaches the disk exactly; seconds as a number may be cut.
      const mtime = new Date(mtimeMs);
      await Deno.utime(path, info.atime ?? mtime, mtime);
    });
  }

  homeDir(): string | undefined {
    const name = Deno.build.os === "windows" ? "USERPROFILE" : "HOME";
    let home: string | undefined;
    try {
      home = Deno.env.get(name);
    } catch (error) {
      // Without --allow-env the home directory is unknown, which the port says with undefined;
      // so is a value Deno cannot decode (not valid UTF-8), which no path string here can spell.
      if (
        error instanceof Deno.errors.NotCapable || error instanceof Deno.errors.PermissionDenied ||
        error instanceof Deno.errors.InvalidData
      ) {
        return undefined;
      }
      throw error;
    }
    // Unset: the account's home directory, as Node answers on Node (unknown without --allow-sys).
    // An empty or relative HOME names no directory the port can join paths to: unknown.
    return osHomeDir(home === undefined ? undefined : () => home);
  }
}

/** `{ mode }` for a create call given one (refused by `checkMode` unless valid), else none. */
function modeOption(syscall: string, path: string, mode: number | undefined): { mode?: number } {
  if (mode === undefined) return {};
  checkMode(path, mode, syscall);
  return { mode };
}

/**
 * The filesystem port over the `Deno.*` file APIs.
 *
 * `open` and `readFile` follow symlinks, `lstat`, `readDir`, `rename` and `remove` never do,
 * and `readFileNoFollow` and `openNoFollow` (where the platform has `O_NOFOLLOW`) refuse a final
 * one;
 * `syncDir` is a no-op where the platform cannot fsync a directory; every native error is
 * mapped to the port's typed errors with the native error as `cause`.
 *
 * Every call returns the same instance: the real filesystem is one, and the in-process writer
 * slots and locks of every store are keyed by their `FileSystem`, so two stores of one process
 * given `denoFs()` refuse a second writer of a session to each other.
 *
 * @returns A `FileSystem` backed by the real filesystem, within Deno's granted permissions.
 */
export function denoFs(): FileSystem {
  return shared;
}

const shared: FileSystem = new DenoFileSystem();

/**
 * Native incremental SHA-256 for Deno. Deno implements `node:crypto` natively, so this uses
 * `createHash("sha256")` (cloned with `copy()`), which is much faster than the portable
 * pure-TypeScript default on large histories.
 */
export const denoSha256: Sha256Factory = nodeSha256;

/**
 * The process probe of the Deno adapter, for cross-process session locks (`denoFs()` offers it as
 * `processes`, so a store of `denoFs()` uses it by default): `Deno.pid`,
 * `Deno.hostname()` (needs `--allow-sys=hostname`), and liveness by signal 0 through
 * `node:process` (Deno's own `Deno.kill` has no signal 0): EPERM means alive but not ours, ESRCH
 * means gone. Signalling needs `--allow-run`; without it every pid is taken as alive (and
 * `maySignal()` is false), so a lock a dead process left is refused (`SessionLockedError`, saying
 * that this process may not signal its holder) instead of taken over. On Linux the process
 * instance (`processStart`) is read from `/proc/<pid>/stat`, which Deno allows only under `-A`;
 * without it the probe knows no instances, and a lock naming this pid that this library copy did
 * not take is taken as an earlier process's leftover, so worker threads do not refuse each other.
 * Its pid namespace (`/proc/self/ns/pid`) too is read only under `-A`: without it the probe knows
 * none, so its locks name none (a writer in another pid namespace sharing the host name and disk,
 * a container, judges them by pid, and cannot tell them from a dead process's lock when that pid
 * does not exist there), and a lock that names a namespace is respected as live, never taken over
 * nor removed by cleanup: whether its holder runs cannot be checked. Writers in containers that
 * share the host name and disk need `-A` on Deno for their locks to be respected.
 *
 * @returns A probe of this process and host.
 * @throws {Deno.errors.NotCapable} Without `--allow-sys=hostname` (queried first, so Deno does
 * not prompt for it): the message names the flag. `denoFs().processes` is undefined there instead.
 */
export function denoProcessProbe(): ProcessProbe {
  requireHostName("denoProcessProbe");
  const node = nodeProcessProbe();
  return {
    pid: Deno.pid,
    host: Deno.hostname(),
    isAlive: node.isAlive,
    ...(node.maySignal === undefined ? {} : { maySignal: node.maySignal }),
    ...(node.processStart === undefined ? {} : { processStart: node.processStart }),
    ...(node.pidNamespace === undefined ? {} : { pidNamespace: node.pidNamespace }),
  };
}
