/**
 * Durability recipes, implemented once over the port: atomic replace (in one call, or begun and
 * staged while the writes it must follow are still running), durable append, private directories
 * and staged directory publish. Every recipe takes a `Durability` mode:
 *
 * - `"full"` (default): every step that a later step depends on is fsynced (file data before the
 *   rename that publishes it, directory entries after creates and renames). A resolved call
 *   survives power loss.
 * - `"ordered"`: the same steps in the same order, without fsyncs. A resolved call survives a
 *   crash of the process (the kernel keeps the data), and a power loss leaves either the old or a
 *   new state of each atomically replaced file only as far as the filesystem orders its writes.
 *
 * @module
 */
import type { EntryKind, FileHandle, FileSystem } from "./fs.ts";
import { AlreadyExists, NotFound, PermissionDenied } from "./errors.ts";
import { basename, dirname, join, NAME_MAX_BYTES, normalize, utf8Prefix } from "./path.ts";

/**
 * How hard a write works to survive power loss. `"full"` (default): every step a later step
 * depends on is fsynced (file data before the rename that publishes it, directory entries after
 * creates and renames); a resolved call survives power loss. `"ordered"`: the same steps in the
 * same order, without fsyncs; a resolved call survives a crash of the process (the kernel keeps
 * the data), and a power loss leaves either the old or a new state of each atomically replaced
 * file only as far as the filesystem orders its writes.
 */
export type Durability = "full" | "ordered";

/** Permission bits of private files (owner read/write). */
export const PRIVATE_FILE_MODE = 0o600;
/** Permission bits of private directories (owner only). */
export const PRIVATE_DIR_MODE = 0o700;

/** Options of `atomicReplace`. */
export interface AtomicReplaceOptions {
  /**
   * Mode of the published file; default `0o600`. Given at the temp file's exclusive create (a
   * umask can only clear bits), so the published file never has wider bits than this, whatever
   * the replaced file had.
   */
  readonly mode?: number;
  /** Durability of the replace; default `"full"`. */
  readonly durability?: Durability;
  /** Skip the final directory fsync (the caller syncs the directory itself). */
  readonly skipDirSync?: boolean;
  /**
   * Give the published file exactly `mode`, bits the process's umask clears at the create
   * included (a chmod of the temp file before it is synced and renamed): for a user's file
   * replaced with the mode it had, such as a group-writable one. Default false: the create's
   * mode, never wider than `mode`.
   */
  readonly exactMode?: boolean;
}

let tempCounter = 0;

/**
 * A fresh, unpredictable temporary name beside `path` (`.<name>.<random>.tmp`). The name part is
 * cut, on whole characters, so the temp name fits in `NAME_MAX` (255 UTF-8 bytes) whenever the
 * target's own name does: a legal target is never refused for its temp file's name.
 */
export function tempNameFor(path: string): string {
  tempCounter = (tempCounter + 1) % 0x7fffffff;
  const random = globalThis.crypto.randomUUID().slice(0, 8);
  const suffix = `.${random}${tempCounter.toString(36)}.tmp`;
  return join(
    dirname(path),
    `.${utf8Prefix(basename(path), NAME_MAX_BYTES - 1 - suffix.length)}${suffix}`,
  );
}

/**
 * True for a name `tempNameFor` makes (`.<name>.<random>.tmp`, the random part 8 hex digits and a
 * base-36 counter): a temp file, never data. Another name ending in `.tmp` (a file of the user's)
 * is not one, so maintenance never removes it.
 */
export function isTempName(name: string): boolean {
  return TEMP_NAME.test(name);
}

const TEMP_NAME = /^\..*\.[0-9a-f]{8}[0-9a-z]{1,6}\.tmp$/s;

/**
 * Replaces `path` with `data` atomically: an exclusive temp file in the same directory (created
 * with `mode`, so the published file never has wider bits, whatever the old one had), written,
 * fsynced, renamed over the target, then the directory fsynced. A reader sees the old bytes or
 * the new ones, never a mix. On failure the temp file is removed and the error rethrown. A
 * symlink planted at the temp name makes the exclusive create fail; nothing is written through it.
 */
export async function atomicReplace(
  fs: FileSystem,
  path: string,
  data: Uint8Array,
  options: AtomicReplaceOptions = {},
): Promise<void> {
  const staged = await stageReplace(fs, path, data, options);
  await staged.publish();
}

/**
 * An atomic replace whose new content is complete (written, and fsynced under `"full"`
 * durability) but not yet visible: `publish()` renames it over the target, `discard()` removes it.
 */
export interface StagedReplace {
  /**
   * Renames the staged file over the target (the commit point), then, under `"full"` durability,
   * fsyncs the directory. If the rename fails the staged file is removed and the error rethrown;
   * if only the directory fsync fails, the new content is already visible. Once published or
   * discarded, a staged replacement rejects another publish with `NotFound`.
   */
  publish(): Promise<void>;
  /** Removes the staged file; the target is untouched. Never rejects. */
  discard(): Promise<void>;
}

/**
 * The first half of `atomicReplace`: writes `data` to an exclusive temp file beside `path` and,
 * under `"full"` durability, fsyncs it, without publishing it. Lets a caller prepare the new
 * content while other writes that must precede the publication are still in flight. On failure
 * the temp file is removed and the error rethrown.
 */
export function stageReplace(
  fs: FileSystem,
  path: string,
  data: Uint8Array,
  options: AtomicReplaceOptions = {},
): Promise<StagedReplace> {
  return beginReplace(fs, path, options).stage(data);
}

/**
 * An atomic replace whose temp file is being created before its content is known, so the create
 * overlaps the work that computes the content. Exactly one of `stage` or `discard` settles it.
 */
export interface PendingReplace {
  /**
   * Writes `data` to the temp file, fsyncs it under `"full"` durability and closes it; the
   * result publishes it. On failure (including a failed create) the temp file is removed and the
   * error rethrown. A second call rejects with `NotFound`.
   */
  stage(data: Uint8Array): Promise<StagedReplace>;
  /**
   * Before `stage`: closes and removes the temp file; the target is untouched. Once `stage` was
   * called, the temp file belongs to the `StagedReplace` it returns (discard that one) and this
   * does nothing. Safe to call at any time and more than once; never rejects.
   */
  discard(): Promise<void>;
}

/**
 * Starts an atomic replace of `path` before its content is known: the exclusive create of the
 * temp file beside `path` begins at once (its failure surfaces from `stage`). The caller must
 * settle the result with `stage` (then publish or discard the staged file) or `discard`.
 */
export function beginReplace(
  fs: FileSystem,
  path: string,
  options: AtomicReplaceOptions = {},
): PendingReplace {
  const durability = options.durability ?? "full";
  const mode = options.mode ?? PRIVATE_FILE_MODE;
  const temp = tempNameFor(path);
  // Called from an async function, so an adapter that throws instead of rejecting still rejects.
  const opening = (async () => await fs.open(temp, { createNew: true, write: true, mode }))();
  // Observed here, so a create that fails before `stage` or `discard` is not an unhandled rejection.
  opening.catch(() => undefined);
  /** True once the temp file was published, discarded, or handed to a stage. */
  let claimed = false;
  /** True once nothing of the temp file can remain: published or removed. */
  let settled = false;
  /** The closing of the handle, once started. */
  let closing: Promise<void> | undefined;
  const close = (handle: FileHandle): Promise<void> => (closing ??= handle.close());
  const remove = async (): Promise<void> => {
    if (settled) return;
    settled = true;
    await removeQuietly(fs, temp);
  };
  return {
    async stage(data: Uint8Array): Promise<StagedReplace> {
      // A second stage, or one after discard, finds no temp file to write, as a write would.
      if (claimed) throw new NotFound("open", temp);
      claimed = true;
      const handle = await opening; // a failed create left no file
      try {
        await closingAfter(handle, async () => {
          await handle.write(data);
          if (options.exactMode === true) await fs.chmod(temp, mode);
          if (durability === "full") await handle.sync();
        }, close);
      } catch (error) {
        await remove();
        throw error;
      }
      // No other chmod: the temp file was created exclusively by this call with `mode`, and a
      // umask can only clear bits, never widen them.
      let done = false;
      return {
        async publish(): Promise<void> {
          // A second publish, or one after discard, finds no staged file, as the rename would.
          if (done || settled) throw new NotFound("rename", temp);
          done = true;
          // The entry is another file's once renamed: durable only once the directory is synced.
          durableEntries.get(fs)?.delete(path);
          try {
            await fs.rename(temp, path);
            settled = true;
          } catch (error) {
            await remove();
            throw error;
          }
          if (durability === "full" && options.skipDirSync !== true) {
            await fs.syncDir(dirname(path));
            knownDurable(durableEntries, fs).add(path);
          }
        },
        async discard(): Promise<void> {
          if (done) return;
          done = true;
          await remove();
        },
      };
    },
    async discard(): Promise<void> {
      if (claimed) return;
      claimed = true;
      let handle: FileHandle;
      try {
        handle = await opening;
      } catch {
        settled = true; // the create failed: there is no temp file
        return;
      }
      await close(handle).catch(() => undefined);
      await remove();
    },
  };
}

/**
 * Runs `body`, then closes `handle` (with `close`, by default its own `close`): the failure of
 * `body` is the one thrown, a close failing after it being dropped (the write's ENOSPC is what
 * the caller must see); a close failing after `body` succeeded is thrown.
 */
async function closingAfter<T>(
  handle: FileHandle,
  body: () => Promise<T>,
  close: (handle: FileHandle) => Promise<void> = (opened) => opened.close(),
): Promise<T> {
  let result: T;
  try {
    result = await body();
  } catch (error) {
    await close(handle).catch(() => undefined);
    throw error;
  }
  await close(handle);
  return result;
}

/** Removes `path` if present; a failure to remove a leftover is not the caller's error. */
async function removeQuietly(fs: FileSystem, path: string): Promise<void> {
  try {
    await fs.remove(path, { recursive: true });
  } catch {
    // The temp file is unreachable garbage readers ignore: the Loop store's cleanup() and
    // prune-raw (in a folded session's tree, once an hour old) remove it.
  }
}

/**
 * Creates `path` as a private directory (0700) if missing, with missing parents, and enforces the
 * mode even when the directory already existed with wider bits. Returns true when it created the
 * final directory. With `"full"` durability the new entry is made durable in its parent.
 * Refuses (with `AlreadyExists`) when a non-directory, or a symlink, is at `path`.
 */
export async function ensurePrivateDir(
  fs: FileSystem,
  path: string,
  durability: Durability = "full",
): Promise<boolean> {
  let created = false;
  let widened = false;
  try {
    const info = await fs.lstat(path);
    if (info.kind !== "directory") throw new AlreadyExists("mkdir", path);
    widened = info.mode !== PRIVATE_DIR_MODE;
    await syncIfUndurable(fs, path, durability);
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
    const parent = dirname(path);
    if (parent !== path) await ensureDirExists(fs, parent, durability);
    try {
      await fs.mkdir(path, { mode: PRIVATE_DIR_MODE });
      created = true;
    } catch (mkdirError) {
      if (!(mkdirError instanceof AlreadyExists)) throw mkdirError;
      const info = await fs.lstat(path);
      if (info.kind !== "directory") throw mkdirError;
    }
    if (created) await syncNewDir(fs, path, durability);
    else await syncIfUndurable(fs, path, durability);
  }
  await restrictDir(fs, path, widened, durability);
  return created;
}

/**
 * Directories this process set to the private mode whose new mode a failed sync left out, per
 * filesystem: their mode reads private already, so whoever restricts them next syncs them again.
 */
const undurableModes = new WeakMap<FileSystem, PathSet>();

/**
 * Sets the directory `path` to 0700; when it was `widened` (or a sync of its new mode failed
 * before), also makes the new mode durable (the directory itself synced under `"full"`), only when
 * the mode did change (an adapter without modes reports the same one before and after).
 */
async function restrictDir(
  fs: FileSystem,
  path: string,
  widened: boolean,
  durability: Durability,
): Promise<void> {
  await fs.chmod(path, PRIVATE_DIR_MODE);
  if (
    (widened || modeUndurable(fs, path)) && durability === "full" &&
    (await fs.lstat(path)).mode === PRIVATE_DIR_MODE
  ) {
    knownDurable(undurableModes, fs).add(path);
    await fs.syncDir(path);
    undurableModes.get(fs)?.delete(path);
  }
}

/** True when this process set `path` to the private mode and has not made that mode durable. */
function modeUndurable(fs: FileSystem, path: string): boolean {
  return undurableModes.get(fs)?.has(path) === true;
}

/**
 * Brings an existing directory `path` to the private mode (0700) when its mode is wider, making
 * the new mode durable under `"full"` durability. Creates nothing: a missing `path`, or one that
 * is not a directory (a link included, never followed), is left for the write into it to report.
 * For writers that put a file into a directory that should exist already.
 */
export async function tightenPrivateDir(
  fs: FileSystem,
  path: string,
  durability: Durability = "full",
): Promise<void> {
  let info;
  try {
    info = await fs.lstat(path);
  } catch (error) {
    if (error instanceof NotFound) return;
    throw error;
  }
  if (info.kind !== "directory") return;
  if (info.mode === PRIVATE_DIR_MODE && !modeUndurable(fs, path)) return;
  await restrictDir(fs, path, true, durability);
}

/**
 * Directories whose entry in their parent this process has made durable (it synced the parent
 * after creating or finding the directory), per filesystem. A directory found existing is not
 * taken as durable: the process that created it may have died before syncing its parent, so the
 * first process to rely on it syncs the parent once. One that a failed sync left out is synced by
 * whoever ensures it next, so a save resolved after a retry never rests on an entry a power loss
 * can take away.
 */
const durableDirs = new WeakMap<FileSystem, PathSet>();

/**
 * Forgets what this process knows to be durable at `path` and below it (directory entries
 * `ensurePrivateDir` synced, files `durableAppend` synced): call it before a rename moves a
 * directory to or from `path`. The entry that then names `path` is another directory's, durable
 * only once its parent is synced after the rename; should that sync fail, the next writer that
 * relies on `path` syncs the parent itself instead of trusting what held before the move.
 */
export function forgetDurable(fs: FileSystem, path: string): void {
  durableDirs.get(fs)?.forgetBelow(path);
  durableEntries.get(fs)?.forgetBelow(path);
}

/**
 * How many paths this process holds as durable on `fs` (directory entries and files; internal:
 * for the tests of what is forgotten).
 */
export function knownDurableCount(fs: FileSystem): number {
  return (durableDirs.get(fs)?.size ?? 0) + (durableEntries.get(fs)?.size ?? 0);
}

/**
 * A set of absolute paths that forgets a path and everything below it in time proportional to
 * what it forgets, not to all it holds: each path is linked from its parent directory, up to the
 * first ancestor linked already (a process that saved thousands of sessions forgets one
 * session's paths at once, as each staged delete does). Paths are held normalized. Internal to
 * the port (exported for its tests).
 */
export class PathSet {
  readonly #paths = new Set<string>();
  /** Each directory's linked children: paths held, or directories on the way to them. */
  readonly #children = new Map<string, Set<string>>();

  /** How many paths are held. */
  get size(): number {
    return this.#paths.size;
  }

  /** True when `path` is held. */
  has(path: string): boolean {
    return this.#paths.has(normalize(path));
  }

  /** Holds `given`. */
  add(given: string): void {
    const path = normalize(given);
    this.#paths.add(path);
    for (let child = path, parent = dirname(path); parent !== child;) {
      let linked = this.#children.get(parent);
      if (linked === undefined) this.#children.set(parent, linked = new Set());
      if (linked.has(child)) break;
      linked.add(child);
      child = parent;
      parent = dirname(parent);
    }
  }

  /** Stops holding `path` (what is below it stays). */
  delete(path: string): void {
    this.#paths.delete(normalize(path));
  }

  /** Forgets `path` and every path below it. */
  forgetBelow(given: string): void {
    const path = normalize(given);
    const stack = [path];
    for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
      this.#paths.delete(next);
      const linked = this.#children.get(next);
      if (linked === undefined) continue;
      this.#children.delete(next);
      for (const child of linked) stack.push(child);
    }
    this.#children.get(dirname(path))?.delete(path);
  }
}

/** Makes the directory `path` durable in its parent under `"full"` durability. */
async function syncNewDir(fs: FileSystem, path: string, durability: Durability): Promise<void> {
  if (durability !== "full") return; // nothing is synced in this mode
  const known = knownDurable(durableDirs, fs);
  known.delete(path);
  await fs.syncDir(dirname(path));
  known.add(path);
}

/** Syncs the parent of the existing directory `path` unless this process already did. */
async function syncIfUndurable(
  fs: FileSystem,
  path: string,
  durability: Durability,
): Promise<void> {
  if (durability !== "full" || durableDirs.get(fs)?.has(path) === true) return;
  await syncNewDir(fs, path, durability);
}

/** Creates `path` and its parents with default modes if missing (parents of private dirs). */
async function ensureDirExists(
  fs: FileSystem,
  path: string,
  durability: Durability,
): Promise<void> {
  try {
    const info = await fs.stat(path);
    if (info.kind !== "directory") throw new AlreadyExists("mkdir", path);
    await syncIfUndurable(fs, path, durability);
    return;
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
  }
  const parent = dirname(path);
  if (parent !== path) await ensureDirExists(fs, parent, durability);
  try {
    await fs.mkdir(path, { mode: PRIVATE_DIR_MODE });
  } catch (error) {
    if (!(error instanceof AlreadyExists)) throw error;
    // Another process created it meanwhile, and may die before syncing its parent: what is
    // created below must not rest on that entry, so it is made durable here as one found is.
    if ((await fs.stat(path)).kind !== "directory") throw error;
    await syncIfUndurable(fs, path, durability);
    return;
  }
  await syncNewDir(fs, path, durability);
}

/** Options of `writeNewFile`. */
export interface WriteNewFileOptions {
  /** Mode of the new file; default `0o600` (also set by chmod, in case of a umask). */
  readonly mode?: number;
  /** Durability; with `"full"` the file's bytes are fsynced (its directory entry is not). */
  readonly durability?: Durability;
}

/**
 * Creates `path` exclusively (failing with `AlreadyExists` when anything is there, a symlink
 * included), writes `data`, fsyncs it under `"full"` durability, closes it and sets its mode.
 * The caller makes the directory entry durable (a staged directory is synced as a whole).
 */
export async function writeNewFile(
  fs: FileSystem,
  path: string,
  data: Uint8Array,
  options: WriteNewFileOptions = {},
): Promise<void> {
  const mode = options.mode ?? PRIVATE_FILE_MODE;
  const handle = await fs.open(path, { createNew: true, write: true, mode });
  await closingAfter(handle, async () => {
    await handle.write(data);
    if ((options.durability ?? "full") === "full") await handle.sync();
  });
  await fs.chmod(path, mode);
}

/** Options of `durableAppend`. */
export interface DurableAppendOptions {
  /** Mode of the file: a new file is created with it, an existing one brought to it; default `0o600`. */
  readonly mode?: number;
  /** Durability of the append; default `"full"`. */
  readonly durability?: Durability;
  /**
   * The file holds newline-terminated lines (JSONL): when it does not end with a newline (a
   * record torn by a crash), a newline is written first, in the same write, so the torn bytes
   * stay a line of their own and the new record starts a line. So it is after an append of this
   * process to the file through the same `FileSystem` object failed its write or fsync, whatever
   * the file ends with now: after a failed fsync the bytes it did not make durable can come back
   * from a crash as zeros even though a later fsync succeeds (Linux marks their pages clean), and
   * the new record must not join them. Nothing is removed.
   */
  readonly lines?: boolean;
}

/**
 * Appends `data` to `path` (creating it with a private mode) and fsyncs it; the first append of
 * this process to a file (and one after a failed directory sync) fsyncs its directory entry too. One write per call, so a record is appended whole
 * or, after a crash, as a torn last line that tolerant readers skip (with `lines`, the next
 * append never joins that torn line).
 */
export async function durableAppend(
  fs: FileSystem,
  path: string,
  data: Uint8Array,
  options: DurableAppendOptions = {},
): Promise<void> {
  const durability = options.durability ?? "full";
  let created = false;
  let handle;
  try {
    handle = await fs.open(path, { append: true });
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
    try {
      handle = await fs.open(path, {
        append: true,
        createNew: true,
        mode: options.mode ?? PRIVATE_FILE_MODE,
      });
      created = true;
    } catch (createError) {
      // Another append created the file meanwhile: append to it, and sync its entry as well,
      // since the append that created it may not have synced it yet.
      if (!(createError instanceof AlreadyExists)) throw createError;
      handle = await fs.open(path, { append: true });
    }
  }
  const opened = handle;
  await closingAfter(opened, async () => {
    let bytes = data;
    const mode = options.mode ?? PRIVATE_FILE_MODE;
    const info = created ? undefined : await opened.stat();
    // An existing file with a wider mode is brought to the file's mode (made durable by the
    // file's fsync below).
    if (info !== undefined && info.mode !== mode) await fs.chmod(path, mode);
    let suspects = unsettledTails.get(fs);
    if (options.lines === true && info !== undefined) {
      const size = info.size;
      const suspect = suspects?.has(path) === true;
      if (size > 0 && (suspect || (await opened.read(size - 1, 1))[0] !== NEWLINE)) {
        bytes = new Uint8Array(data.length + 1);
        bytes[0] = NEWLINE;
        bytes.set(data, 1);
      }
    }
    try {
      await opened.write(bytes);
      if (durability === "full") await opened.sync();
    } catch (error) {
      if (suspects === undefined) unsettledTails.set(fs, suspects = new Set());
      suspects.add(path);
      throw error;
    }
    // Synced (or, without fsyncs, written): what follows starts after a record of this append.
    suspects?.delete(path);
  });
  if (durability !== "full") return; // nothing is synced in this mode
  // The file's entry in its directory is durable once this process synced the directory after
  // seeing the file: a file found existing may have been created by a process that died before
  // syncing it. On failure the next append to the file syncs the directory again.
  if (created) durableEntries.get(fs)?.delete(path);
  await ensureFileDurable(fs, path, durability);
}

/**
 * Files whose directory entry this process has made durable (appended to by `durableAppend`,
 * published by an atomic replace, or found by `ensureFileDurable`), per filesystem (the same
 * path on another filesystem is another file).
 */
const durableEntries = new WeakMap<FileSystem, PathSet>();

/**
 * Files whose last `durableAppend` in this process failed its write or fsync, per filesystem: the
 * tail that append left may not be durable as it reads now (see `DurableAppendOptions.lines`).
 */
const unsettledTails = new WeakMap<FileSystem, Set<string>>();

const NEWLINE = 0x0a;

/** Options of `stagedPublish`. */
export interface StagedPublishOptions {
  /** Durability of the publish; default `"full"`. */
  readonly durability?: Durability;
}

/**
 * Publishes a directory built under `stagingDir` at `finalDir` (same parent): fsyncs every file
 * and directory below the staging directory, renames it into place (failing with
 * `AlreadyExists` or `NotEmpty` when `finalDir` exists and is not empty) and fsyncs the parent.
 */
export async function stagedPublish(
  fs: FileSystem,
  stagingDir: string,
  finalDir: string,
  options: StagedPublishOptions = {},
): Promise<void> {
  const durability = options.durability ?? "full";
  if (durability === "full") await syncTree(fs, stagingDir);
  try {
    const info = await fs.lstat(finalDir);
    if (info.kind !== "directory") throw new AlreadyExists("rename", finalDir);
    // An empty directory would be replaced by rename; only an empty one is allowed to be.
    if ((await fs.readDir(finalDir)).length > 0) throw new AlreadyExists("rename", finalDir);
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
  }
  forgetDurable(fs, finalDir);
  await fs.rename(stagingDir, finalDir);
  if (durability === "full") {
    await fs.syncDir(dirname(finalDir));
    if (dirname(stagingDir) !== dirname(finalDir)) await fs.syncDir(dirname(stagingDir));
    knownDurable(durableDirs, fs).add(finalDir);
  }
}

/**
 * Makes the entry of the existing file `path` durable in its directory under `"full"`
 * durability, unless this process already did (it published the file and synced the directory,
 * or called this before): for a caller that finds the record it was about to write already
 * there, say when it reruns a call that failed after its rename but before the directory's
 * fsync, or one a process that died made. Returning the record found without this would let a
 * power loss take back what the call then reports as written.
 */
export async function ensureFileDurable(
  fs: FileSystem,
  path: string,
  durability: Durability = "full",
): Promise<void> {
  if (durability !== "full") return; // nothing is synced in this mode
  const known = knownDurable(durableEntries, fs);
  if (known.has(path)) return;
  await fs.syncDir(dirname(path));
  known.add(path);
}

/**
 * `ensureFileDurable` for the existing directory `path` (one published by `stagedPublish`, say):
 * its entry in its parent is made durable unless this process already did.
 */
export async function ensureDirDurable(
  fs: FileSystem,
  path: string,
  durability: Durability = "full",
): Promise<void> {
  await syncIfUndurable(fs, path, durability);
}

/**
 * Under `"full"` durability, makes the entry of every existing directory from `top` down to
 * `dir` durable in its parent, unless this process already did (one sync per directory per
 * process): for a writer about to write into `dir`, a directory tree another process may have
 * created, or published by a rename, and died before syncing the parent of. What the writer then
 * reports as written never rests on an entry a power loss can take away. `top`'s own parent is
 * the one directory outside the tree this opens: a writer refused it (`PermissionDenied`: a
 * runtime allowed only the tree, a parent it may not list) goes on without it, and tries again
 * next time. Nothing is done when `dir` is not `top` or below it.
 */
export async function ensureDirChainDurable(
  fs: FileSystem,
  dir: string,
  top: string,
  durability: Durability = "full",
): Promise<void> {
  if (durability !== "full") return; // nothing is synced in this mode
  const prefix = top.endsWith("/") ? top : `${top}/`;
  if (dir !== top && !dir.startsWith(prefix)) return;
  const chain: string[] = [];
  for (let path = dir; path.startsWith(prefix); path = dirname(path)) chain.push(path);
  try {
    await syncIfUndurable(fs, top, durability);
  } catch (error) {
    if (!(error instanceof PermissionDenied)) throw error;
  }
  // From the top down: each entry is synced once what holds it is.
  for (const path of chain.reverse()) await syncIfUndurable(fs, path, durability);
}

/** The set of paths `known` holds for `fs`, created empty when there is none yet. */
function knownDurable(known: WeakMap<FileSystem, PathSet>, fs: FileSystem): PathSet {
  let paths = known.get(fs);
  if (paths === undefined) known.set(fs, paths = new PathSet());
  return paths;
}

/** Fsyncs every regular file and directory below (and including) `dir`, never following links. */
export async function syncTree(fs: FileSystem, dir: string): Promise<void> {
  for (const entry of await fs.readDir(dir)) {
    const path = join(dir, entry.name);
    if (entry.kind === "directory") await syncTree(fs, path);
    else if (entry.kind === "file") {
      const handle = await fs.open(path);
      await closingAfter(handle, () => handle.sync());
    }
  }
  await fs.syncDir(dir);
}

/**
 * The kind of the entry at `path` itself (`lstat`: a link is reported as a link, never followed),
 * or undefined when nothing is there.
 */
export async function entryKind(fs: FileSystem, path: string): Promise<EntryKind | undefined> {
  try {
    return (await fs.lstat(path)).kind;
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
}

/** Reads a file, returning `undefined` when it does not exist (other errors propagate). */
export async function readIfExists(fs: FileSystem, path: string): Promise<Uint8Array | undefined> {
  try {
    return await fs.readFile(path);
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
}

/**
 * Removes `path` (a file, or an empty directory); returns false when nothing was there to remove
 * (other errors propagate). For leftovers another process may have removed first.
 */
export async function removeIfExists(fs: FileSystem, path: string): Promise<boolean> {
  try {
    await fs.remove(path);
    return true;
  } catch (error) {
    if (error instanceof NotFound) return false;
    throw error;
  }
}

/** Lists a directory, returning `[]` when it does not exist (other errors propagate). */
export async function readDirIfExists(
  fs: FileSystem,
  path: string,
): Promise<import("./fs.ts").DirEntry[]> {
  try {
    return await fs.readDir(path);
  } catch (error) {
    if (error instanceof NotFound) return [];
    throw error;
  }
}
