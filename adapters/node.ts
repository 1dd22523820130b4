/**
 * The Node adapter: the filesystem port over `node:fs` (file handles over descriptors driven by
 * its callback calls, the callback `readFile`, which reads a small file about three times faster
 * than a promise handle, and its promise API for the rest), and native SHA-256 over `node:crypto`.
 * It runs on Node, and also on Deno and Bun through their Node compatibility. A write of up to 64
 * KiB through a file handle is one synchronous call on the main thread (a save's log append and
 * `meta.json`: 10-18% less per `ordered` save or pin on a 2-core machine); a write that blocks (a
 * page cache full of dirty pages, a stalled network filesystem) holds the event loop while it
 * lasts. Larger writes, fsyncs, reads, opens and closes are asynchronous.
 *
 * Native errors are mapped to the port's typed errors (`NotFound`, `AlreadyExists`, ...), with
 * the native error kept as `cause`.
 *
 * @example Storing and hashing a file through the port
 * ```ts
 * import assert from "node:assert/strict";
 * import { mkdtemp } from "node:fs/promises";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 * import { nodeFs, nodeSha256 } from "@loop/sessions/node";
 *
 * const dir = await mkdtemp(join(tmpdir(), "example-"));
 * const fs = nodeFs();
 * await fs.writeFile(`${dir}/hello.txt`, new TextEncoder().encode("hello"), { mode: 0o600 });
 * const bytes = await fs.readFile(`${dir}/hello.txt`);
 * assert.equal((await fs.stat(`${dir}/hello.txt`)).mode, 0o600);
 * assert.equal(
 *   nodeSha256().update(bytes).digestHex(),
 *   "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
 * );
 * await fs.remove(dir, { recursive: true });
 * ```
 *
 * @module
 */
import { constants, readFileSync, readlinkSync, type Stats } from "node:fs";
import * as fsp from "node:fs/promises";
import { hostname } from "node:os";
import process from "node:process";
import { createHash, type Hash } from "node:crypto";
import type {
  DirEntry,
  FileHandle,
  FileInfo,
  FileSystem,
  MkdirOptions,
  OpenedFile,
  OpenOptions,
  RemoveOptions,
  WriteFileOptions,
} from "../src/port/fs.ts";
import type { FsError } from "../src/port/errors.ts";
import {
  AlreadyExists,
  FsIoError,
  IsADirectory,
  NotADirectory,
  NotEmpty,
} from "../src/port/errors.ts";
import type { Sha256, Sha256Factory } from "../src/port/sha256.ts";
import type { ProcessProbe } from "../src/loop/lock.ts";
import {
  callMapped,
  checkTime,
  codeOf,
  DIR_SYNC_REFUSALS,
  mapNativeError,
  refuseDotsRemove,
  renameInOrder,
  withoutTrailingSlash,
} from "./_errors.ts";
import { openNoFollowNative, readFileNative, readFileNoFollowNative } from "./_node_read.ts";
import { environmentValue, lossyText, osHomeDir, strictText } from "./_node_env.ts";
import { denoGrants, isPermissionRefusal, lazyProbe, requireHostName } from "./_probe.ts";
import {
  closeAfter,
  closeDescriptor,
  NodeFileHandle,
  openDescriptor,
  statDescriptor,
  syncDescriptor,
  toInfo,
  truncateDescriptor,
} from "./_node_handle.ts";

/** Maps a native error of `syscall` on `path` to the port's typed error. */
function mapError(error: unknown, syscall: string, path: string): FsError {
  return mapNativeError(error, syscall, path);
}

/**
 * A path the system gave back as bytes (`realPath`, `readLink`), decoded; one that is not valid
 * UTF-8 is refused (`FsIoError`, `EIO`), as the Deno adapter refuses it: Node's own decoding would
 * put U+FFFD in its place, a string that names another file, or none.
 */
function decodedPath(bytes: Uint8Array, syscall: string, path: string): string {
  const text = strictText(bytes);
  if (text !== undefined) return text;
  throw new FsIoError(
    "EIO",
    syscall,
    path,
    `File name or path ${JSON.stringify(lossyText(bytes))} is not valid UTF-8`,
  );
}

/** Runs a native call and maps whatever it throws. */
function call<T>(syscall: string, path: string, run: () => Promise<T>): Promise<T> {
  return callMapped(mapError, syscall, path, run);
}

function openFlags(options: OpenOptions): number {
  const writes = options.write === true || options.append === true || options.create === true ||
    options.createNew === true || options.truncate === true;
  let flags = writes ? constants.O_RDWR : constants.O_RDONLY;
  if (options.append === true) flags |= constants.O_APPEND;
  if (options.create === true || options.createNew === true) flags |= constants.O_CREAT;
  if (options.createNew === true) flags |= constants.O_EXCL;
  // With append, the file is truncated right after the open (Deno's Node layer refuses both).
  if (options.truncate === true && options.append !== true) flags |= constants.O_TRUNC;
  return flags;
}

/**
 * True when a component of `path` is a dangling symlink (checked after a recursive mkdir failed,
 * never on success): its target, or a directory above the target, is missing, or, for the final
 * component only, the target lies beneath a file (beneath such a link, ENOTDIR is the answer).
 */
async function danglingOnPath(path: string): Promise<boolean> {
  const parts = path.split("/").filter((part) => part !== "");
  for (let i = 1; i <= parts.length; i++) {
    const prefix = "/" + parts.slice(0, i).join("/");
    try {
      const own = await fsp.lstat(prefix);
      if (own.isDirectory()) continue;
      if (!own.isSymbolicLink()) return false;
    } catch {
      return false;
    }
    try {
      if (!(await fsp.stat(prefix)).isDirectory()) return false;
    } catch (error) {
      const code = codeOf(error);
      return code === "ENOENT" || (code === "ENOTDIR" && i === parts.length);
    }
  }
  return false;
}

/**
 * True when something other than a directory is at the final name of `path` (trailing slashes
 * aside): a file, or a symlink that does not lead to a directory (dangling, to a file, a loop).
 * Checked after a recursive mkdir failed, never on success.
 */
async function inTheWay(path: string): Promise<boolean> {
  const entry = withoutTrailingSlash(path) ?? path;
  let own: Stats;
  try {
    own = await fsp.lstat(entry);
  } catch {
    return false;
  }
  if (own.isDirectory()) return false;
  if (!own.isSymbolicLink()) return true;
  try {
    return !(await fsp.stat(entry)).isDirectory();
  } catch {
    return true;
  }
}

const ON_DENO = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";

/**
 * `ms` (finite) as `fs.utimes` takes a time without changing it. It takes seconds and keeps whole
 * microseconds, cut toward zero: half a microsecond further from zero lands on the nearest one
 * (`1700000000.123` would come back as `…122.999` ms). It takes a negative number as "now": a
 * numeric string is taken as it is on Node, a `Date` (whole milliseconds) on Deno's Node layer,
 * which takes the string as "now" too.
 */
function nodeTime(ms: number): number | string | Date {
  const micros = Math.round(ms * 1000);
  const seconds = (micros + Math.sign(micros) * 0.5) / 1e6;
  if (seconds >= 0) return seconds;
  return ON_DENO ? new Date(ms) : String(seconds);
}

/** Linux's `PATH_MAX`, which counts the terminating NUL: a path holds 4095 bytes at most. */
const PATH_MAX = 4096;
/** The longest name of one path component, in bytes (`NAME_MAX`). */
const NAME_MAX = 255;
/** The longest directory path below which any entry can still be named by its path. */
const DEEPEST_DIR = PATH_MAX - 1 - 1 - NAME_MAX;
const utf8 = new TextEncoder();

/**
 * Removes the directory `top` and everything below it, symlinks unlinked and never followed,
 * without naming a path longer than `PATH_MAX`: a directory whose path would leave no room for
 * its entries' names is first moved to a short unused name directly under `top` (everything in
 * it is removed anyway). For the trees `fs.rm` gives up on (ENAMETOOLONG) after removing part.
 */
async function removeTreeStepwise(top: string): Promise<void> {
  let next = 0;
  const moveUp = async (dir: string): Promise<string> => {
    for (;;) {
      const short = `${top}/.remove-${next++}`;
      try {
        await fsp.lstat(short);
        continue;
      } catch (error) {
        if (codeOf(error) !== "ENOENT") throw error;
      }
      try {
        await fsp.rename(dir, short);
        return short;
      } catch (error) {
        // Taken meanwhile: try the next name. (An empty directory made there meanwhile would be
        // replaced, and it is under `top`, removed anyway.)
        const code = codeOf(error);
        if (code !== "EEXIST" && code !== "ENOTEMPTY" && code !== "ENOTDIR") throw error;
      }
    }
  };
  const empty = async (dir: string): Promise<void> => {
    for (const entry of await fsp.readdir(dir, { withFileTypes: true })) {
      let child = `${dir}/${entry.name}`;
      if (!entry.isDirectory()) {
        await fsp.unlink(child);
        continue;
      }
      if (utf8.encode(child).length > DEEPEST_DIR) child = await moveUp(child);
      await empty(child);
      await fsp.rmdir(child);
    }
  };
  await empty(top);
  await fsp.rmdir(top);
}

class NodeFileSystem implements FileSystem {
  readonly #processes = lazyProbe(nodeProcessProbe);

  /**
   * See `FileSystem.processes`: `nodeProcessProbe()`, made on first use; undefined where the runtime
   * may not read the host name (Deno without `--allow-sys`).
   */
  get processes(): ProcessProbe | undefined {
    return this.#processes();
  }

  /** See `FileSystem.readFileNoFollow`; offered where the platform has `O_NOFOLLOW`. */
  readonly readFileNoFollow?: (path: string) => Promise<Uint8Array>;
  /** See `FileSystem.openNoFollow`; offered where the platform has `O_NOFOLLOW`. */
  readonly openNoFollow?: (path: string) => Promise<OpenedFile>;
  /** See `FileSystem.openAppendNoFollow`; offered where the platform has `O_NOFOLLOW`. */
  readonly openAppendNoFollow?: (path: string) => Promise<OpenedFile>;

  constructor() {
    const noFollow = readFileNoFollowNative(mapError);
    if (noFollow !== undefined) this.readFileNoFollow = noFollow;
    const open = openNoFollowNative(mapError);
    if (open !== undefined) this.openNoFollow = open;
    const append = openNoFollowNative(mapError, true);
    if (append !== undefined) this.openAppendNoFollow = append;
  }

  open(path: string, options: OpenOptions = {}): Promise<FileHandle> {
    return call("open", path, async () => {
      const flags = openFlags(options);
      const fd = await openDescriptor(path, flags, nativeMode(options.mode ?? 0o666));
      if (options.truncate === true && options.append === true) {
        await truncateDescriptor(fd, 0).catch((error) => closeAfter(fd, error));
      }
      if (flags === constants.O_RDONLY) {
        // POSIX lets a directory be opened read-only; the port refuses it.
        const stats = await statDescriptor(fd).catch((error) => closeAfter(fd, error));
        if (stats.isDirectory()) await closeAfter(fd, new IsADirectory("open", path));
      }
      const writable = flags !== constants.O_RDONLY;
      return new NodeFileHandle(fd, path, options.append === true, writable, mapError);
    });
  }

  /**
   * Reads a whole file, whatever its size: a file over 2 GiB, which `node:fs` refuses to read in
   * one call, is read in chunks. A file larger than one `Uint8Array` can hold fails with
   * `FsIoError` code `"EFBIG"`. `readFileNoFollow` does the same.
   */
  readFile(path: string): Promise<Uint8Array> {
    // The callback form: the runtime drives open, fstat, read and close itself, about three
    // times faster than `fs/promises` on small files (meta.json, index.json), in Node and Deno.
    return readFileNative(path);
  }

  writeFile(path: string, data: Uint8Array, options: WriteFileOptions = {}): Promise<void> {
    return call("writeFile", path, () =>
      fsp.writeFile(path, data, {
        mode: nativeMode(options.mode ?? 0o666),
        flag: options.createNew === true ? "wx" : "w",
      }));
  }

  /** See `FileSystem.rename`: its errors come in the port's order (`renameInOrder`). */
  rename(from: string, to: string): Promise<void> {
    return renameInOrder(from, to, {
      kind: async (path) => {
        const stats = await fsp.lstat(path);
        return stats.isDirectory() ? "directory" : stats.isSymbolicLink() ? "symlink" : "other";
      },
      rename: (from, to) => fsp.rename(from, to),
      map: mapError,
    });
  }

  /**
   * See `FileSystem.remove`. A recursive remove of a tree deeper than `PATH_MAX` (4096 bytes),
   * which `fs.rm` cannot name, goes on entry by entry: a directory whose path grows too long is
   * first moved to a short name directly under the directory being removed. That needs room
   * below that directory: one whose own path is longer than about 3,800 bytes may still fail
   * with `FsIoError` code `"ENAMETOOLONG"`, part of its tree removed.
   */
  remove(path: string, options: RemoveOptions = {}): Promise<void> {
    return call("remove", path, async () => {
      // `link/.` or `dir/sub/..` names the directory it resolves to: a recursive remove would
      // empty it through the link. Refused before anything is looked at.
      refuseDotsRemove(path);
      // A trailing slash would make lstat and rm follow a final symlink: inspect the entry itself,
      // and refuse anything but a directory spelled so (ENOTDIR, as Linux's unlink and rmdir).
      const bare = withoutTrailingSlash(path);
      const entry = bare ?? path;
      const stats = await fsp.lstat(entry);
      if (bare !== undefined && !stats.isDirectory()) throw new NotADirectory("remove", path);
      if (!stats.isDirectory()) return await fsp.unlink(entry);
      if (options.recursive === true) {
        try {
          return await fsp.rm(entry, { recursive: true });
        } catch (error) {
          // `fs.rm` names every entry by its whole path: past PATH_MAX it gives up part way.
          if (codeOf(error) !== "ENAMETOOLONG") throw error;
          return await removeTreeStepwise(entry);
        }
      }
      try {
        await fsp.rmdir(entry);
      } catch (error) {
        // Some platforms report a non-empty directory as EEXIST.
        const code = codeOf(error);
        if (code === "EEXIST" || code === "ENOTEMPTY") {
          throw new NotEmpty("remove", path, { cause: error });
        }
        throw error;
      }
    });
  }

  mkdir(path: string, options: MkdirOptions = {}): Promise<void> {
    return call("mkdir", path, async () => {
      const recursive = options.recursive === true;
      try {
        await fsp.mkdir(path, { mode: nativeMode(options.mode ?? 0o777), recursive });
      } catch (error) {
        // Node's recursive mkdir reports a file at the final name spelled with a trailing slash,
        // or a link there to a file, as ENOTDIR, a link loop there as ELOOP, and a dangling
        // symlink on the path as ENOENT or ENOTDIR; something is in the way, as the other
        // adapters say (EEXIST).
        const code = codeOf(error);
        if (recursive && await inTheWay(path)) {
          throw new AlreadyExists("mkdir", path, { cause: error });
        }
        if (recursive && (code === "ENOENT" || code === "ENOTDIR") && await danglingOnPath(path)) {
          throw new AlreadyExists("mkdir", path, { cause: error });
        }
        throw error;
      }
    });
  }

  readDir(path: string): Promise<DirEntry[]> {
    return call("readDir", path, async () => {
      const entries = await fsp.readdir(path, { withFileTypes: true });
      const out: DirEntry[] = entries.map((entry) => ({
        name: entry.name,
        kind: entry.isFile()
          ? "file"
          : entry.isDirectory()
          ? "directory"
          : entry.isSymbolicLink()
          ? "symlink"
          : "other",
      }));
      return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    });
  }

  stat(path: string): Promise<FileInfo> {
    return call("stat", path, async () => toInfo(await fsp.stat(path)));
  }

  lstat(path: string): Promise<FileInfo> {
    return call("lstat", path, async () => toInfo(await fsp.lstat(path)));
  }

  realPath(path: string): Promise<string> {
    return call(
      "realPath",
      path,
      async () => decodedPath(await fsp.realpath(path, { encoding: "buffer" }), "realPath", path),
    );
  }

  chmod(path: string, mode: number): Promise<void> {
    return call("chmod", path, () => fsp.chmod(path, nativeMode(mode)));
  }

  symlink(target: string, path: string): Promise<void> {
    return call("symlink", path, () => fsp.symlink(target, path));
  }

  readLink(path: string): Promise<string> {
    return call(
      "readLink",
      path,
      async () => decodedPath(await fsp.readlink(path, { encoding: "buffer" }), "readLink", path),
    );
  }

  /**
   * Opens the directory read-only and fsyncs it. Where the platform refuses to open or fsync
   * a directory (Windows, some network filesystems: EISDIR, EINVAL, EPERM, EBADF), this is a
   * no-op: such platforms give no directory durability to ask for.
   */
  syncDir(path: string): Promise<void> {
    return call("syncDir", path, async () => {
      let fd: number;
      try {
        fd = await openDescriptor(path, constants.O_RDONLY | (constants.O_DIRECTORY ?? 0));
      } catch (error) {
        const code = codeOf(error);
        if (code !== undefined && DIR_SYNC_REFUSALS.has(code)) return;
        throw error;
      }
      try {
        await syncDescriptor(fd);
      } catch (error) {
        const code = codeOf(error);
        if (code === undefined || !DIR_SYNC_REFUSALS.has(code)) throw error;
      } finally {
        await closeDescriptor(fd);
      }
    });
  }

  /**
   * See `FileSystem.utime`. The time is kept to the microsecond (Node) or the millisecond (Deno's
   * Node layer), a time before 1970 included.
   */
  utime(path: string, mtimeMs: number): Promise<void> {
    return call("utime", path, async () => {
      checkTime("utime", path, mtimeMs);
      const stats = await fsp.stat(path);
      await fsp.utimes(path, nodeTime(stats.atimeMs), nodeTime(mtimeMs));
    });
  }

  homeDir(): string | undefined {
    // A HOME that is not valid UTF-8 is unknown, as on Deno: Node's decoding of it names
    // another directory. One that is set is the answer whatever `os.homedir()` makes of it (Deno's
    // Node layer takes an empty one as unset); only an unset HOME asks for the account's.
    const home = environmentValue("HOME");
    if (home instanceof Error) return undefined;
    return osHomeDir(home === undefined ? undefined : () => home);
  }
}

/**
 * `mode` as Node's native layer takes it: its permission bits alone (the kernel keeps no others).
 * Node accepts any mode that fits 32 bits unsigned, then aborts the process (an assertion in its
 * native layer) on one from 2^31 up, which the port's range allows; a mode outside that range is
 * passed on as it is, for Node to refuse (`EINVAL`).
 */
function nativeMode(mode: number): number {
  return Number.isInteger(mode) && mode >= 0 && mode <= 0xffff_ffff ? mode & 0o7777 : mode;
}

/**
 * The filesystem port over `node:fs`.
 *
 * `open` and `readFile` follow symlinks, `lstat`, `readDir`, `rename` and `remove` never do,
 * and `readFileNoFollow` and `openNoFollow` (offered where the platform has `O_NOFOLLOW`) refuse
 * a final one;
 * `syncDir` is a no-op where the platform cannot fsync a directory; every native error is
 * mapped to the port's typed errors with the native error as `cause`.
 *
 * Every call returns the same instance: the real filesystem is one, and the in-process writer
 * slots and locks of every store are keyed by their `FileSystem`, so two stores of one process
 * given `nodeFs()` refuse a second writer of a session to each other.
 *
 * @returns A `FileSystem` backed by the real filesystem of the running process.
 */
export function nodeFs(): FileSystem {
  return shared;
}

const shared: FileSystem = new NodeFileSystem();

class NodeSha256 implements Sha256 {
  readonly #hash: Hash;
  constructor(hash: Hash) {
    this.#hash = hash;
  }
  update(data: Uint8Array): Sha256 {
    this.#hash.update(data);
    return this;
  }
  clone(): Sha256 {
    return new NodeSha256(this.#hash.copy());
  }
  digestHex(): string {
    return this.#hash.copy().digest("hex");
  }
}

/**
 * Native incremental SHA-256 over `node:crypto` (`createHash("sha256")`, cloned with `copy()`).
 * Much faster than the portable default on large histories; runs on Node, Deno and Bun.
 */
export const nodeSha256: Sha256Factory = (): Sha256 => new NodeSha256(createHash("sha256"));

/**
 * The process probe of the Node adapter, for cross-process session locks (`nodeFs()` offers it as
 * `processes`, so a store of `nodeFs()` uses it by default): `process.pid`,
 * `os.hostname()`, and liveness by `process.kill(pid, 0)` (EPERM means alive but not ours,
 * ESRCH means gone). Also works on Deno and Bun through their Node compatibility. On Deno each
 * call that needs a permission (reading `/proc`, signalling) is made only where a query finds it
 * granted, so Deno never prompts: without the read no pid namespace and no process start are
 * known, and without `--allow-run` every pid is taken as alive.
 *
 * @returns A probe of this process and host.
 * @throws {Deno.errors.NotCapable} On Deno without `--allow-sys=hostname` (queried first, so
 * Deno does not prompt for it): the message names the flag.
 */
export function nodeProcessProbe(): ProcessProbe {
  requireHostName("nodeProcessProbe");
  const pidNamespace = process.platform === "linux" ? linuxPidNamespace() : undefined;
  return {
    pid: process.pid,
    host: hostname(),
    isAlive: isProcessAlive,
    maySignal: mayRunSignal,
    ...(process.platform === "linux" ? { processStart: cachedProcessStart } : {}),
    ...(pidNamespace === undefined ? {} : { pidNamespace }),
  };
}

const PID_NAMESPACE = "/proc/self/ns/pid";

/**
 * The text of `/proc/<pid>/stat`, or undefined when it cannot be read (the process is gone, no
 * procfs, or Deno does not grant the read: it is queried first, so Deno never prompts for it).
 */
function readProcStat(pid: number): string | undefined {
  const path = `/proc/${pid}/stat`;
  if (!denoGrants({ name: "read", path })) return undefined;
  try {
    return readFileSync(path, "latin1");
  } catch {
    return undefined;
  }
}

/**
 * This process's pid namespace on Linux: the target of `/proc/self/ns/pid` (`pid:[<inode>]`), the
 * same for every process that sees the same pids. Undefined when it cannot be read.
 */
function linuxPidNamespace(): string | undefined {
  if (!denoGrants({ name: "read", path: PID_NAMESPACE })) return undefined;
  try {
    return readlinkSync(PID_NAMESPACE);
  } catch {
    return undefined;
  }
}

/** This process's own start, read once (it never changes); other pids are read each time. */
let ownProcessStart: string | undefined;

function cachedProcessStart(pid: number): string | undefined {
  if (pid !== process.pid) return linuxProcessStart(pid);
  ownProcessStart ??= linuxProcessStart(pid);
  return ownProcessStart;
}

/**
 * The start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`): the
 * same for every thread of the process, different for a later process that reuses the pid.
 * Undefined when it cannot be read (the process is gone, or no procfs).
 */
function linuxProcessStart(pid: number): string | undefined {
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined;
  const text = readProcStat(pid);
  if (text === undefined) return undefined;
  // The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  const start = fields[19]; // field 22; the fields after the name start at field 3
  return start !== undefined && /^\d+$/.test(start) ? start : undefined;
}

/**
 * True when `pid` is a zombie on Linux (state `Z` in `/proc/<pid>/stat`): a process that has
 * exited and whose parent has not reaped it yet. Signal 0 still reaches it, but it runs no more.
 */
function isLinuxZombie(pid: number): boolean {
  if (process.platform !== "linux") return false;
  const text = readProcStat(pid);
  if (text === undefined) return false;
  // The state (field 3) follows the command name, which is in parentheses.
  return text.charAt(text.lastIndexOf(")") + 2) === "Z";
}

/**
 * True when a process with `pid` exists on this host and still runs (signal 0 sends nothing; an
 * exited process its parent has not reaped yet, a zombie, no longer runs).
 */
function isProcessAlive(pid: number): boolean {
  // 0 and negative pids address process groups, never one process; a pid past 2^31 - 1 is none
  // a process can have (pid_t is a signed 32-bit integer), and the runtime refuses to signal it.
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid > 0x7fffffff) return false;
  // Deno without `--allow-run` may not signal (and would prompt for it in a terminal): asked by a
  // query first, such a pid is taken as alive, as a refusal below is.
  if (!mayRunSignal()) return true;
  try {
    process.kill(pid, 0);
    return !isLinuxZombie(pid);
  } catch (error) {
    const code = codeOf(error);
    if (code === "EPERM") return !isLinuxZombie(pid);
    if (code === "ESRCH") return false;
    // Deno without `--allow-run` may not signal: nothing tells the process gone, so its lock is
    // respected (a writer is refused with `SessionLockedError`, never let in).
    if (isPermissionRefusal(error)) return true;
    throw mapError(error, "kill", String(pid));
  }
}

/** True unless the runtime is Deno without `--allow-run` (queried, never requested). */
function mayRunSignal(): boolean {
  return denoGrants({ name: "run" });
}
