/**
 * `MemoryFs`: an in-memory `FileSystem` with POSIX semantics that is also a crash simulator and
 * a fault injector. Every recipe and store of this library is crash-tested over it.
 *
 * ## The crash model
 *
 * - Every file keeps its live bytes and its durable bytes. `FileHandle.sync()` makes the live
 *   bytes durable, and the file's mode. Closing syncs nothing.
 * - Every change of a directory entry (create, mkdir, symlink, remove, rename) and every chmod is
 *   appended to one ordered metadata journal. `syncDir(dir)` commits the operations that touched
 *   `dir` (a rename touches both parents; a chmod of a directory touches that directory) and,
 *   transitively, the earlier operations that touched a directory one of those touched, as POSIX
 *   promises of fsync on a directory: nothing about other directories, so a new directory's own
 *   entry needs its parent synced. Nothing else commits metadata: a file's `sync()` does not make
 *   its directory entry durable.
 * - `crash(seed)` builds a new filesystem from the durable state: the committed journal, plus a
 *   further prefix of the uncommitted operations chosen by the seed (the journal may commit more
 *   on its own). Each surviving file gets its durable bytes; when its live bytes extend them, the
 *   unsynced tail comes back by a seeded `TailMode` (`none`, `whole`, `short`, `zeros`,
 *   `garbage`); when the file was rewritten below its synced length, a seeded `RewriteMode`
 *   brings back the old bytes, the new ones, the new ones cut short, or zeros of the new length
 *   (the prefix untouched since the last sync always stays). A `sync()` that failed (`failAt`)
 *   loses the writeback of the bytes pending then: a later successful sync does not make them
 *   durable unless they are written again (a crash that forces the `whole` tail or the `live`
 *   rewrite keeps them: the page cache still serves them).
 *   `crash({ tailMode: "whole", extraJournal: "all" })` is a process crash (the kernel kept
 *   everything); `crash({ tailMode: "none", extraJournal: "none" })` is strictly the durable state.
 *
 * ## Faults and the operation counter
 *
 * Every port call and every `FileHandle` call counts as one operation, numbered from 1, counted
 * before it runs. `failAt(n)` makes operation `n` fail (without effect, except that a failed
 * `write` lands a prefix of its bytes and a failed `sync` loses the writeback of the bytes pending
 * then, as on Linux); `crashAfter(n)` makes
 * every operation after `n` throw `SimulatedCrash`, after which the test calls `crash(seed)`.
 *
 * Permission bits are recorded, reported and journaled, never enforced: use `failAt` with
 * `"EACCES"` to simulate a refused call. `openHandles` lists the handles not yet closed, so a test
 * can check that an operation, failed or not, leaves none open behind it.
 *
 * @example A synced file survives a crash; an unsynced directory entry does not
 * ```ts
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * const handle = await fs.open("/a.txt", { createNew: true, write: true });
 * await handle.write(new TextEncoder().encode("hello"));
 * await handle.sync();
 * await handle.close();
 *
 * // The entry of /a.txt was never committed by syncDir("/").
 * const lost = fs.crash({ seed: 1, extraJournal: "none" });
 * if ((await lost.readDir("/")).length !== 0) throw new TypeError("unexpected survivor");
 *
 * await fs.syncDir("/");
 * const kept = fs.crash(1);
 * if (new TextDecoder().decode(await kept.readFile("/a.txt")) !== "hello") {
 *   throw new TypeError("synced data lost");
 * }
 * ```
 *
 * @module
 */
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
import {
  AlreadyExists,
  checkMode,
  FsIoError,
  IsADirectory,
  NotADirectory,
  NotEmpty,
  NotFound,
  PermissionDenied,
} from "../src/port/errors.ts";
import {
  bytesEqual,
  COMMITTED,
  DirNode,
  FileNode,
  type JournalOp,
  LinkNode,
  type MemoryNode,
  mulberry32,
  NodeCopier,
  NoRoom,
  OverlayView,
  replay,
  touchedBy,
} from "./_memory_nodes.ts";

/** Options of `MemoryFs`. */
export interface MemoryFsOptions {
  /** The clock for modification times, in Unix milliseconds; default `Date.now`. */
  readonly now?: () => number;
  /** Bits cleared from the mode of every created file and directory; default `0o022`. */
  readonly umask?: number;
  /** What `homeDir()` returns; default `"/home/user"`. The directory is not created. */
  readonly home?: string;
  /**
   * The most bytes one file may hold, as on a nearly full disk: a write or truncate that would
   * grow a file past it fails with `FsIoError` code `"ENOSPC"` and changes nothing. Default: what
   * the process can allocate (a size it cannot allocate fails the same way).
   */
  readonly maxFileSize?: number;
}

/**
 * The name of a counted operation: a `FileSystem` method, or one of the `FileHandle` calls
 * `read`, `write`, `truncate`, `sync`, `fstat` (the handle's `stat`) and `close`.
 */
export type MemoryOperation =
  | "open"
  | "readFile"
  | "readFileNoFollow"
  | "openNoFollow"
  | "openAppendNoFollow"
  | "writeFile"
  | "rename"
  | "remove"
  | "mkdir"
  | "readDir"
  | "stat"
  | "lstat"
  | "realPath"
  | "chmod"
  | "symlink"
  | "readLink"
  | "syncDir"
  | "utime"
  | "read"
  | "write"
  | "truncate"
  | "sync"
  | "fstat"
  | "close";

/** One counted operation, as kept in `MemoryFs.operationLog`. */
export interface OperationRecord {
  /** The operation number (the first operation after construction or `resetCounter` is 1). */
  readonly number: number;
  /** The operation. */
  readonly op: MemoryOperation;
  /** The path the call was about (for handle calls: the path the handle was opened with). */
  readonly path: string;
  /** The second path of `rename`. */
  readonly to?: string;
}

/** The error an injected fault raises: `FsIoError` with EIO or ENOSPC, or `PermissionDenied`. */
export type FaultError = "EIO" | "ENOSPC" | "EACCES";

/** Options of `MemoryFs.failAt`. */
export interface FaultOptions {
  /** The error to raise; default `"EIO"`. */
  readonly error?: FaultError;
  /** Fail every later matching operation too, not only the first; default false. */
  readonly persistent?: boolean;
  /** Only these operations fail (and count as the first match); default: every operation. */
  readonly ops?: readonly MemoryOperation[];
  /**
   * How many bytes of a handle `write` failing with EIO or ENOSPC land before the error, as on a
   * real filesystem (clamped to the write's length; the write position moves past them); default:
   * half of them, rounded down. `0` lands nothing.
   */
  readonly landed?: number;
}

/**
 * How the unsynced tail of a file (live bytes past its durable bytes) comes back after a crash:
 * not at all, whole, cut short, as zero bytes of the same length, or as random bytes of the same
 * length (size made durable before the data).
 */
export type TailMode = "none" | "whole" | "short" | "zeros" | "garbage";

/**
 * Which bytes come back for a file rewritten below its synced length since the last sync (by
 * `writeFile`, an open with `truncate`, a `truncate`, or a write in place): the old durable
 * bytes; the new live bytes; the new bytes cut short (as short as the untouched prefix, so
 * `writeFile` over a file may leave it empty); or the new length as zeros after the untouched
 * prefix (the size made durable before the data). The prefix that was not touched since the last
 * sync always comes back as it was.
 */
export type RewriteMode = "durable" | "live" | "cut" | "zeros";

/** How many uncommitted journal operations a crash replays beyond the committed ones. */
export type ExtraJournal = "none" | "all" | "random";

/** Options of `MemoryFs.crash`. */
export interface CrashOptions {
  /** Seeds every random choice of the crash; default 0. The same seed gives the same result. */
  readonly seed?: number;
  /** Forces the tail mode of every file whose live bytes extend its durable bytes. */
  readonly tailMode?: TailMode;
  /**
   * Forces the outcome for rewritten files. Default: `"durable"` when `tailMode` is `"none"`,
   * `"live"` when it is `"whole"`, otherwise chosen by the seed per file.
   */
  readonly rewriteMode?: RewriteMode;
  /** How much of the uncommitted journal survives; default `"random"` (a seeded prefix). */
  readonly extraJournal?: ExtraJournal;
}

/**
 * How one file came back from a crash: `"synced"` when nothing was unsynced, the `TailMode`
 * applied to its unsynced tail, or the `RewriteMode` picked for a rewritten file.
 */
export type RecoveredAs = "synced" | TailMode | RewriteMode;

/** What `crash()` chose; kept on the recovered filesystem as `crashReport`. */
export interface CrashReport {
  /** The seed of the crash. */
  readonly seed: number;
  /** Uncommitted journal operations at the moment of the crash. */
  readonly journalPending: number;
  /** How many of those were replayed (a prefix). */
  readonly journalReplayed: number;
  /** How each surviving file came back, by absolute path. */
  readonly files: Readonly<Record<string, RecoveredAs>>;
}

/** Thrown by every operation after the crash point armed by `crashAfter`: the power is off. */
export class SimulatedCrash extends FsIoError {
  /** Creates the error for the refused `syscall` on `path`. */
  constructor(syscall: string, path: string) {
    super("ECRASH", syscall, path, "Simulated crash: the filesystem is gone");
  }
}

interface ResolvedOptions {
  readonly now: () => number;
  readonly umask: number;
  readonly home: string;
  readonly maxFileSize: number;
}

interface Fault {
  readonly from: number;
  readonly error: FaultError;
  readonly persistent: boolean;
  readonly ops: ReadonlySet<MemoryOperation> | undefined;
  readonly landed: number | undefined;
  fired: boolean;
}

/** The fault that raised each injected error, for the partial effects of a failed write or sync. */
const injected = new WeakMap<object, Fault>();

/** Where a path leads. `parent` is undefined when the path names a directory by `/`, `.`, `..`. */
interface Resolved {
  readonly parent: DirNode | undefined;
  readonly name: string;
  readonly node: MemoryNode | undefined;
  /** The canonical path of the entry. */
  readonly path: string;
  /** Every directory from the root to `parent`. */
  readonly ancestors: readonly DirNode[];
  /** The path ended with `/`: the entry must be a directory. */
  readonly mustBeDir: boolean;
}

const MAX_SYMLINK_HOPS = 40;
/**
 * The largest file size, as ext4's with 4 KiB blocks (16 TiB less one block): a write or truncate
 * past it fails with `FsIoError` code `"EFBIG"`. Below it, a size the process cannot allocate fails
 * with `"ENOSPC"` (the memory is the disk).
 */
const MAX_FILE_SIZE = 2 ** 44 - 4096;
/** The longest name of one path component, in UTF-8 bytes (Linux's `NAME_MAX`). */
const NAME_MAX = 255;
/**
 * Linux's `PATH_MAX`: a path, or a symlink target, of this many UTF-8 bytes or more (the kernel
 * counts the terminating NUL) fails with `FsIoError` code `"ENAMETOOLONG"`.
 */
const PATH_MAX = 4096;
const TAIL_MODES: readonly TailMode[] = ["none", "whole", "short", "zeros", "garbage"];
const REWRITE_MODES: readonly RewriteMode[] = ["durable", "live", "cut", "zeros"];
const utf8Decoder = new TextDecoder("utf-8", { ignoreBOM: true });
const utf8Encoder = new TextEncoder();

/**
 * `text` as it comes back from the disk: a real filesystem takes names and link targets as UTF-8,
 * where a lone UTF-16 surrogate becomes U+FFFD, so two names that differ only there are one.
 */
const asOnDisk: (text: string) => string = typeof "".toWellFormed === "function"
  ? (text) => text.toWellFormed()
  // Runtimes older than ES2024: the same, by a round trip through UTF-8.
  : (text) => utf8Decoder.decode(utf8Encoder.encode(text));

/**
 * An in-memory filesystem with POSIX semantics, crash simulation and fault injection; see the
 * module documentation for the model. Only the root `/` exists at first.
 */
export class MemoryFs implements FileSystem {
  readonly #options: ResolvedOptions;
  #root: DirNode;
  #journal: JournalOp[] = [];
  #seq = 0;
  #count = 0;
  #log: OperationRecord[] = [];
  #faults: Fault[] = [];
  #crashAfter: number | undefined;
  #crashTriggered = false;
  #crashReport: CrashReport | undefined;
  /** The handles opened on this filesystem and not yet closed, in the order they were opened. */
  readonly #handles = new Set<MemoryFileHandle>();

  /** Creates an empty filesystem (only `/`, mode `0o755` under the default umask). */
  constructor(options: MemoryFsOptions = {}) {
    this.#options = {
      now: options.now ?? Date.now,
      umask: options.umask ?? 0o022,
      home: options.home ?? "/home/user",
      maxFileSize: options.maxFileSize ?? MAX_FILE_SIZE,
    };
    this.#root = new DirNode(0o777 & ~this.#options.umask, this.#options.now());
  }

  // ---------------------------------------------------------------------------------------
  // Test controls (not counted as operations)

  /** How many operations were counted since construction or `resetCounter()`. */
  get operationCount(): number {
    return this.#count;
  }

  /** Every counted operation, in order, since construction or `resetCounter()`. */
  get operationLog(): readonly OperationRecord[] {
    return this.#log;
  }

  /** True once an operation was refused because of `crashAfter`. */
  get crashTriggered(): boolean {
    return this.#crashTriggered;
  }

  /** What `crash()` chose when this filesystem was recovered by it; otherwise undefined. */
  get crashReport(): CrashReport | undefined {
    return this.#crashReport;
  }

  /**
   * The paths of the handles opened on this filesystem (`open`, `openNoFollow`,
   * `openAppendNoFollow`) and not yet closed, in the order they were opened, a path once per
   * handle. A handle counts as closed once its `close()` was called and counted, also when an
   * injected fault makes that call fail (Linux's close(2) frees the descriptor whatever it
   * reports); a close refused by the crash point leaves it open. Tests check with it that an
   * operation, failed or not, leaves no handle open behind it.
   */
  get openHandles(): readonly string[] {
    return [...this.#handles].map((handle) => handle.path);
  }

  /** Restarts the operation count at 0 and empties the log; armed faults keep their numbers. */
  resetCounter(): void {
    this.#count = 0;
    this.#log = [];
  }

  /**
   * Arms a fault at the absolute operation number `n`: the first operation numbered `n` or later
   * (that is one of `ops`, when given) fails. A transient fault fires once; a
   * persistent one also fails every later matching operation. Faults add up until `clearFaults`.
   *
   * Two faults have the effects they have on Linux: a handle `write` failing with EIO or ENOSPC
   * lands a prefix of its bytes first (`FaultOptions.landed`), and a handle `sync` failing with
   * EIO or ENOSPC marks the bytes pending then as written back (Linux 4.13 and later mark the
   * pages clean): no later successful sync makes them durable unless they are written again.
   */
  failAt(n: number, options: FaultOptions = {}): void {
    if (!Number.isInteger(n) || n < 1) {
      throw new RangeError(`Fault operation number must be a positive integer, got ${n}`);
    }
    this.#faults.push({
      from: n,
      error: options.error ?? "EIO",
      persistent: options.persistent === true,
      ops: options.ops === undefined ? undefined : new Set(options.ops),
      landed: options.landed,
      fired: false,
    });
  }

  /**
   * Arms the crash point: operation `n` completes, every later one throws `SimulatedCrash`
   * (`crashAfter(0)` refuses the very next operation). Call `crash(seed)` to recover.
   */
  crashAfter(n: number): void {
    if (!Number.isInteger(n) || n < 0) {
      throw new RangeError(`Crash point must be a non-negative integer, got ${n}`);
    }
    this.#crashAfter = n;
    this.#crashTriggered = false;
  }

  /** Disarms every fault and the crash point. */
  clearFaults(): void {
    this.#faults = [];
    this.#crashAfter = undefined;
    this.#crashTriggered = false;
  }

  /** Makes everything durable at once: commits the whole journal and syncs every linked file. */
  syncAll(): void {
    this.#commitOps(new Set(this.#journal));
    const visit = (dir: DirNode): void => {
      for (const child of dir.entries.values()) {
        if (child.kind === "file") child.sync();
        else if (child.kind === "directory") visit(child);
      }
    };
    visit(this.#root);
  }

  /**
   * An independent deep copy of the whole state: live and durable bytes, committed entries and
   * the uncommitted journal. The copy starts with operation count 0, an empty log and no faults;
   * handles opened on this filesystem keep acting on this one only.
   */
  clone(): MemoryFs {
    const copy = new MemoryFs(this.#options);
    const copier = new NodeCopier();
    copy.#root = copier.dir(this.#root);
    copy.#journal = this.#journal.map((op) => copier.op(op));
    copy.#seq = this.#seq;
    return copy;
  }

  /**
   * Simulates power loss and returns the recovered filesystem (same options, count 0, no
   * faults, everything in it durable). This filesystem is left as it was, so the same state can
   * be crashed again with another seed. A number is taken as the seed.
   */
  crash(options: number | CrashOptions = {}): MemoryFs {
    const opts: CrashOptions = typeof options === "number" ? { seed: options } : options;
    const seed = opts.seed ?? 0;
    const random = mulberry32(seed);
    const pending = this.#journal.length;
    const extra = opts.extraJournal ?? "random";
    const replayed = extra === "none"
      ? 0
      : extra === "all"
      ? pending
      : Math.floor(random() * (pending + 1));
    const overlay = new OverlayView();
    for (const op of this.#journal.slice(0, replayed)) replay(overlay, op);

    const files: Record<string, RecoveredAs> = {};
    const rewriteDefault: RewriteMode | undefined = opts.rewriteMode ??
      (opts.tailMode === "none" ? "durable" : opts.tailMode === "whole" ? "live" : undefined);
    const rebuild = (dir: DirNode, path: string): DirNode => {
      const fresh = new DirNode(overlay.mode(dir), dir.mtimeMs);
      const listing = [...overlay.listing(dir)].sort(([a], [b]) => compareNames(a, b));
      for (const [name, child] of listing) {
        const childPath = path === "/" ? `/${name}` : `${path}/${name}`;
        let copy: MemoryNode;
        if (child.kind === "directory") copy = rebuild(child, childPath);
        else if (child.kind === "symlink") copy = new LinkNode(child.target, child.mtimeMs);
        else {
          const { data, as } = recoverBytes(child, random, opts.tailMode, rewriteDefault);
          files[childPath] = as;
          copy = FileNode.recovered(data, overlay.mode(child), child.mtimeMs);
        }
        fresh.entries.set(name, copy);
        fresh.durableEntries.set(name, copy);
      }
      return fresh;
    };

    const recovered = new MemoryFs(this.#options);
    recovered.#root = rebuild(this.#root, "/");
    recovered.#crashReport = {
      seed,
      journalPending: pending,
      journalReplayed: replayed,
      files,
    };
    return recovered;
  }

  /**
   * The live tree below `root` (default `/`) as one string per entry, keyed by the path relative
   * to `root`, in sorted order; for comparing trees with `deepEqual`. Values:
   * `"dir 700"`, `"file 600 \"text\""` (UTF-8 content as a JSON string),
   * `"file 600 hex:00ff"` (content that is not UTF-8), `"link -> target"`. Modification times are
   * left out.
   */
  snapshotTree(root = "/"): Record<string, string> {
    const start = this.#resolve("snapshotTree", root, true);
    if (start.node === undefined) throw new NotFound("snapshotTree", root);
    if (start.node.kind !== "directory") throw new NotADirectory("snapshotTree", root);
    const out: Record<string, string> = {};
    const visit = (dir: DirNode, prefix: string): void => {
      for (const [name, child] of [...dir.entries].sort(([a], [b]) => compareNames(a, b))) {
        const key = prefix === "" ? name : `${prefix}/${name}`;
        out[key] = describeNode(child);
        if (child.kind === "directory") visit(child, key);
      }
    };
    visit(start.node, "");
    return out;
  }

  // ---------------------------------------------------------------------------------------
  // The FileSystem port

  /** Opens a file; see `OpenOptions`. Create modes are masked by the umask. */
  open(path: string, options: OpenOptions = {}): Promise<FileHandle> {
    return this.#run("open", path, () => {
      const append = options.append === true;
      const writable = append || options.write === true || options.create === true ||
        options.createNew === true || options.truncate === true;
      const node = this.#obtainFile("open", path, {
        create: options.create === true,
        createNew: options.createNew === true,
        mode: options.mode,
      });
      if (options.truncate === true && node.size > 0) {
        node.truncate(0);
        node.mtimeMs = this.#options.now();
      }
      return this.#handle(node, path, writable, append);
    });
  }

  /** Reads a whole file (following symlinks). */
  readFile(path: string): Promise<Uint8Array> {
    return this.#run("readFile", path, () => {
      const node = this.#existingFile("readFile", path);
      return node.read(0, node.size);
    });
  }

  /**
   * Reads a whole file without following a final symlink: a link fails with `FsIoError` code
   * `"ELOOP"`, a directory with `IsADirectory` (see `FileSystem.readFileNoFollow`).
   */
  readFileNoFollow(path: string): Promise<Uint8Array> {
    return this.#run("readFileNoFollow", path, () => {
      const node = this.#fileNoFollow("readFileNoFollow", path);
      return node.read(0, node.size);
    });
  }

  /**
   * Opens an existing file read-only without following a final symlink, with its info: a link
   * fails with `FsIoError` code `"ELOOP"`, a directory with `IsADirectory` (see
   * `FileSystem.openNoFollow`).
   */
  openNoFollow(path: string): Promise<OpenedFile> {
    return this.#openNoFollow("openNoFollow", path, false);
  }

  /**
   * Opens an existing file for appending without following a final symlink, with its info, as
   * `openNoFollow` does (see `FileSystem.openAppendNoFollow`).
   */
  openAppendNoFollow(path: string): Promise<OpenedFile> {
    return this.#openNoFollow("openAppendNoFollow", path, true);
  }

  #openNoFollow(op: MemoryOperation, path: string, append: boolean): Promise<OpenedFile> {
    return this.#run(op, path, () => {
      const node = this.#fileNoFollow(op, path);
      return { handle: this.#handle(node, path, append, append), info: infoOf(node) };
    });
  }

  /** Creates or truncates a file and writes `data` to it. Syncs nothing. */
  writeFile(path: string, data: Uint8Array, options: WriteFileOptions = {}): Promise<void> {
    return this.#run("writeFile", path, () => {
      const node = this.#obtainFile("writeFile", path, {
        create: true,
        createNew: options.createNew === true,
        mode: options.mode,
      });
      checkFileSize("writeFile", path, data.length);
      withRoom("writeFile", path, data.length, this.#options.maxFileSize, () => {
        node.truncate(0);
        node.write(0, data);
      });
      node.mtimeMs = this.#options.now();
    });
  }

  /**
   * Renames an entry (never following either side); one journal operation. Errors come in the
   * port's order (see `FileSystem.rename`): a final `.` or `..`, the source, a non-directory
   * spelled with a trailing slash, then the destination.
   */
  rename(from: string, to: string): Promise<void> {
    return this.#run("rename", from, () => {
      for (const path of [from, to]) if (endsInDots(path)) throw busy("rename", path);
      const source = this.#resolve("rename", from, false, false);
      if (source.node === undefined) throw new NotFound("rename", from);
      const moving = source.node;
      // Only a directory may be named with a trailing slash (Linux: ENOTDIR), a symlink included.
      const toSlashed = to.length > 1 && to.endsWith("/");
      if (moving.kind !== "directory" && (source.mustBeDir || toSlashed)) {
        throw new NotADirectory("rename", source.mustBeDir ? from : to);
      }
      if (source.parent === undefined) throw busy("rename", from);
      const target = this.#resolve("rename", to, false, false);
      if (target.parent === undefined) throw busy("rename", to);
      if (target.node === moving) return;
      if (moving.kind === "directory" && target.ancestors.includes(moving)) {
        throw new FsIoError("EINVAL", "rename", to, "Cannot move a directory into itself");
      }
      // A directory the source lies in is not empty (Linux checks this before the kinds).
      if (target.node?.kind === "directory" && source.ancestors.includes(target.node)) {
        throw new NotEmpty("rename", to);
      }
      const replaced = target.node;
      if (replaced !== undefined) {
        if (replaced.kind === "directory") {
          if (moving.kind !== "directory") throw new IsADirectory("rename", to);
          if (replaced.entries.size > 0) throw new NotEmpty("rename", to);
        } else if (moving.kind === "directory") {
          throw new NotADirectory("rename", to);
        }
      }
      source.parent.entries.delete(source.name);
      target.parent.entries.set(target.name, moving);
      const now = this.#options.now();
      source.parent.mtimeMs = now;
      target.parent.mtimeMs = now;
      this.#record({
        type: "rename",
        seq: 0,
        fromParent: source.parent,
        fromName: source.name,
        toParent: target.parent,
        toName: target.name,
      });
    }, to);
  }

  /** Removes a file, a symlink or a directory (empty unless `recursive`); never follows links. */
  remove(path: string, options: RemoveOptions = {}): Promise<void> {
    return this.#run("remove", path, () => {
      // `link/.` or `dir/sub/..` names the directory it resolves to (Linux's rmdir: EINVAL).
      checkPath("remove", path);
      if (endsInDots(path)) {
        throw new FsIoError("EINVAL", "remove", path, "Cannot remove an entry named '.' or '..'");
      }
      const found = this.#resolve("remove", path, false, false);
      if (found.node === undefined) throw new NotFound("remove", path);
      // Only a directory may be named with a trailing slash: a file is not removed, and a symlink
      // neither followed nor removed (Linux: ENOTDIR).
      if (found.mustBeDir && found.node.kind !== "directory") {
        throw new NotADirectory("remove", path);
      }
      if (found.parent === undefined) throw busy("remove", path);
      if (
        found.node.kind === "directory" && found.node.entries.size > 0 && options.recursive !== true
      ) {
        throw new NotEmpty("remove", path);
      }
      this.#unlinkTree(found.parent, found.name, found.node);
    });
  }

  /** Creates a directory (with missing parents when `recursive`); the mode is masked by the umask. */
  mkdir(path: string, options: MkdirOptions = {}): Promise<void> {
    return this.#run("mkdir", path, () => {
      if (options.mode !== undefined) checkMode(path, options.mode, "mkdir");
      const mode = this.#createMode(options.mode ?? 0o777);
      if (options.recursive !== true) {
        // Anything at the name is in the way, even named with a trailing slash; a symlink named so
        // is never followed (Linux: EEXIST).
        const found = this.#resolve("mkdir", path, false, false);
        if (found.node !== undefined || found.parent === undefined) {
          throw new AlreadyExists("mkdir", path);
        }
        this.#link(found.parent, found.name, new DirNode(mode, this.#options.now()));
        return;
      }
      // The whole path is checked first: a path too long creates none of its parents.
      checkPath("mkdir", path);
      const parts = path.split("/").filter((part) => part !== "");
      for (let i = 1; i <= parts.length; i++) {
        const prefix = "/" + parts.slice(0, i).join("/");
        const last = i === parts.length;
        let own: Resolved;
        try {
          own = this.#resolve("mkdir", prefix, false);
        } catch (error) {
          // A name too long is reported of the whole path, as the kernel's walk of it does.
          if (error instanceof FsIoError && error.code === "ENAMETOOLONG") {
            throw new FsIoError("ENAMETOOLONG", "mkdir", path, "File name too long");
          }
          throw error;
        }
        if (own.node === undefined) {
          if (own.parent === undefined) throw new AlreadyExists("mkdir", path);
          this.#link(own.parent, own.name, new DirNode(mode, this.#options.now()));
          continue;
        }
        let node: MemoryNode | undefined = own.node;
        let throughFile = false;
        if (node.kind === "symlink") {
          try {
            node = this.#resolve("mkdir", prefix, true).node;
          } catch (error) {
            const loop = error instanceof FsIoError && error.code === "ELOOP";
            const tooLong = error instanceof FsIoError && error.code === "ENAMETOOLONG";
            if (!(error instanceof NotFound || error instanceof NotADirectory || loop || tooLong)) {
              throw error;
            }
            // A link at the final name that cannot be followed (a loop, a target's name too long)
            // is in the way; beneath one, that is the error, of the whole path as the kernel's
            // walk reports it.
            if (loop && !last) {
              throw new FsIoError("ELOOP", "mkdir", path, "Too many levels of symbolic links");
            }
            if (tooLong && !last) {
              throw new FsIoError("ENAMETOOLONG", "mkdir", path, "File name too long");
            }
            node = undefined;
            throughFile = error instanceof NotADirectory;
          }
        }
        if (node?.kind === "directory") continue;
        // Something is in the way (EEXIST): an entry at the final name (a link loop included), or
        // a dangling symlink, whether its target or a directory above the target is missing.
        // Beneath a file, or a link that leads through one, no directory can be made (ENOTDIR),
        // as on Linux.
        if (last || (node === undefined && !throughFile)) throw new AlreadyExists("mkdir", path);
        throw new NotADirectory("mkdir", path);
      }
    });
  }

  /** Lists a directory (following a symlink to it), sorted by name; entries are never followed. */
  readDir(path: string): Promise<DirEntry[]> {
    return this.#run("readDir", path, () => {
      const dir = this.#existingDir("readDir", path);
      return [...dir.entries]
        .sort(([a], [b]) => compareNames(a, b))
        .map(([name, child]) => ({ name, kind: child.kind }));
    });
  }

  /** Information about a path, following symlinks. */
  stat(path: string): Promise<FileInfo> {
    return this.#run("stat", path, () => {
      return infoOf(this.#existing("stat", path, true));
    });
  }

  /** Information about a path itself, never following a final symlink. */
  lstat(path: string): Promise<FileInfo> {
    return this.#run("lstat", path, () => {
      return infoOf(this.#existing("lstat", path, false));
    });
  }

  /**
   * The canonical absolute path with every symlink resolved. As `realpath(3)`, which walks the
   * path itself, it takes a path of `PATH_MAX` bytes or more, and fails with `FsIoError` code
   * `"ENAMETOOLONG"` only when the canonical path is that long.
   */
  realPath(path: string): Promise<string> {
    return this.#run("realPath", path, () => {
      checkPathForm("realPath", path);
      const found = this.#walk("realPath", path, true);
      if (found.node === undefined) throw new NotFound("realPath", path);
      if (tooLongForPath(found.path)) {
        throw new FsIoError("ENAMETOOLONG", "realPath", path, "File name too long");
      }
      return found.path;
    });
  }

  /** Sets the permission bits exactly (following symlinks); a journal operation. */
  chmod(path: string, mode: number): Promise<void> {
    return this.#run("chmod", path, () => {
      checkMode(path, mode);
      const node = this.#existing("chmod", path, true);
      node.mode = mode & 0o777;
      this.#record({ type: "chmod", seq: 0, node, mode: node.mode });
    });
  }

  /**
   * Creates a symlink at `path` whose target string is `target`; a target of `PATH_MAX` (4096)
   * UTF-8 bytes or more fails with `FsIoError` code `"ENAMETOOLONG"`, as on Linux.
   */
  symlink(target: string, path: string): Promise<void> {
    return this.#run("symlink", path, () => {
      // The target is taken in before the link's name is looked up, as Linux's symlink does.
      if (target.includes("\0")) {
        throw new FsIoError("EINVAL", "symlink", path, "Link target contains a NUL byte");
      }
      if (tooLongForPath(target)) {
        throw new FsIoError("ENAMETOOLONG", "symlink", path, "Link target too long");
      }
      // An empty target names nothing (Linux: ENOENT).
      if (target === "") throw new NotFound("symlink", path);
      const found = this.#resolve("symlink", path, false, false);
      if (found.node !== undefined || found.parent === undefined) {
        throw new AlreadyExists("symlink", path);
      }
      // A missing name spelled as a directory is no place for a link (Linux: ENOENT).
      if (found.mustBeDir) throw new NotFound("symlink", path);
      this.#link(found.parent, found.name, new LinkNode(asOnDisk(target), this.#options.now()));
    });
  }

  /** The target string of the symlink at `path`; `EINVAL` when it is not a symlink. */
  readLink(path: string): Promise<string> {
    return this.#run("readLink", path, () => {
      const node = this.#existing("readLink", path, false);
      if (node.kind !== "symlink") {
        throw new FsIoError("EINVAL", "readLink", path, "Not a symbolic link");
      }
      return node.target;
    });
  }

  /**
   * Commits the journal operations that touched the directory (following a symlink to it), with
   * every earlier operation they depend on (see the module doc). `NotADirectory` on a file.
   */
  syncDir(path: string): Promise<void> {
    return this.#run("syncDir", path, () => {
      this.#commitDir(this.#existingDir("syncDir", path));
    });
  }

  /**
   * Sets the modification time exactly (following symlinks); a time that is not a finite number
   * within what a `Date` holds (±8.64e15 ms) fails with `FsIoError` code `"EINVAL"`. Not journaled.
   */
  utime(path: string, mtimeMs: number): Promise<void> {
    return this.#run("utime", path, () => {
      if (!Number.isFinite(mtimeMs) || Math.abs(mtimeMs) > 8.64e15) {
        throw new FsIoError("EINVAL", "utime", path, `Invalid time ${mtimeMs}`);
      }
      this.#existing("utime", path, true).mtimeMs = mtimeMs;
    });
  }

  /** The configured home directory (not counted as an operation). */
  homeDir(): string {
    return this.#options.home;
  }

  // ---------------------------------------------------------------------------------------
  // Internals

  /**
   * Runs one counted operation: the crash point and armed faults are applied first, then `body`;
   * anything thrown becomes the rejection of the returned promise.
   */
  #run<T>(op: MemoryOperation, path: string, body: () => T, to?: string): Promise<T> {
    try {
      this.#enter(op, path, to);
      return Promise.resolve(body());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** A handle on `node` opened by `path`, listed in `openHandles` until it is closed. */
  #handle(node: FileNode, path: string, writable: boolean, append: boolean): MemoryFileHandle {
    const handle = new MemoryFileHandle({
      node,
      path,
      writable,
      append,
      enter: (op) => this.#enter(op, path),
      now: this.#options.now,
      room: this.#options.maxFileSize,
      syncMode: () => this.#commitMode(node),
      released: (closed) => this.#handles.delete(closed),
    });
    this.#handles.add(handle);
    return handle;
  }

  /** Counts an operation and applies the crash point and armed faults before it runs. */
  #enter(op: MemoryOperation, path: string, to?: string): void {
    const number = ++this.#count;
    this.#log.push(to === undefined ? { number, op, path } : { number, op, path, to });
    if (this.#crashAfter !== undefined && number > this.#crashAfter) {
      this.#crashTriggered = true;
      throw new SimulatedCrash(op, path);
    }
    for (const fault of this.#faults) {
      if (number < fault.from || (fault.fired && !fault.persistent)) continue;
      if (fault.ops !== undefined && !fault.ops.has(op)) continue;
      fault.fired = true;
      const error = faultError(fault.error, op, path);
      injected.set(error, fault);
      throw error;
    }
  }

  /** Appends a journal operation. */
  #record(op: JournalOp): void {
    this.#journal.push({ ...op, seq: ++this.#seq });
  }

  /**
   * Commits, in journal order, the operations that touched `dir` and, transitively, every earlier
   * operation that touched a directory one of them touched (a directory's entries change in order:
   * a rename out of a directory never becomes durable before the create it moves).
   */
  #commitDir(dir: DirNode): void {
    const dirs = new Set<DirNode>([dir]);
    const chosen = new Set<JournalOp>();
    for (let i = this.#journal.length - 1; i >= 0; i--) {
      const op = this.#journal[i] as JournalOp;
      const touched = touchedBy(op);
      if (!touched.some((d) => dirs.has(d))) continue;
      chosen.add(op);
      for (const d of touched) dirs.add(d);
    }
    this.#commitOps(chosen);
  }

  /** Commits the chmod operations of the file `node` (a file's fsync makes its mode durable). */
  #commitMode(node: FileNode): void {
    this.#commitOps(new Set(this.#journal.filter((op) => op.type === "chmod" && op.node === node)));
  }

  /** Replays `ops` (journal operations) onto the committed namespace, in order, and drops them. */
  #commitOps(ops: ReadonlySet<JournalOp>): void {
    if (ops.size === 0) return;
    for (const op of this.#journal) if (ops.has(op)) replay(COMMITTED, op);
    this.#journal = this.#journal.filter((op) => !ops.has(op));
  }

  /** Links a new node into `parent` and journals it. */
  #link(parent: DirNode, name: string, node: MemoryNode): void {
    parent.entries.set(name, node);
    parent.mtimeMs = this.#options.now();
    this.#record({ type: "link", seq: 0, parent, name, node, mode: node.mode });
  }

  /** Unlinks an entry, children first for a directory (one journal operation per entry). */
  #unlinkTree(parent: DirNode, name: string, node: MemoryNode): void {
    if (node.kind === "directory") {
      for (const [childName, child] of [...node.entries]) this.#unlinkTree(node, childName, child);
    }
    parent.entries.delete(name);
    parent.mtimeMs = this.#options.now();
    this.#record({ type: "unlink", seq: 0, parent, name });
  }

  #createMode(mode: number): number {
    return mode & ~this.#options.umask & 0o777;
  }

  /** The file at `path` for writing: found (following symlinks) or created. */
  #obtainFile(
    syscall: MemoryOperation,
    path: string,
    how: { create: boolean; createNew: boolean; mode: number | undefined },
  ): FileNode {
    const creating = how.create || how.createNew;
    if (how.mode !== undefined) checkMode(path, how.mode, syscall);
    if (creating && path.length > 1 && path.endsWith("/") && !endsInDots(path)) {
      // Linux's open with O_CREAT refuses a trailing slash after a name (EISDIR) once the parent
      // is found, whatever is at the name. After `.` or `..` the slash changes nothing: the path
      // names an existing directory, which createNew finds in the way (EEXIST).
      let end = path.length;
      while (end > 1 && path[end - 1] === "/") end--;
      this.#resolve(syscall, path.slice(0, end), false);
      throw new IsADirectory(syscall, path);
    }
    // A create looks the final name up as Linux's open with O_CREAT does: a link whose target ends
    // with a slash names a directory, where no file is opened or made (EISDIR), whatever is there.
    const found = this.#resolve(syscall, path, !how.createNew, !creating);
    if (how.createNew && found.node !== undefined) throw new AlreadyExists(syscall, path);
    if (creating && found.mustBeDir) throw new IsADirectory(syscall, path);
    if (found.node !== undefined) {
      if (found.node.kind !== "file") throw new IsADirectory(syscall, path);
      return found.node;
    }
    if (!how.create && !how.createNew) throw new NotFound(syscall, path);
    // A missing entry always has a parent; `/`, `.` and `..` name directories.
    if (found.parent === undefined || found.mustBeDir) throw new IsADirectory(syscall, path);
    const node = new FileNode(this.#createMode(how.mode ?? 0o666), this.#options.now());
    this.#link(found.parent, found.name, node);
    return node;
  }

  /**
   * The file at `path`, its final component not followed: a symlink fails with `FsIoError` code
   * `"ELOOP"` (as `O_NOFOLLOW` does), a directory with `IsADirectory`.
   */
  #fileNoFollow(syscall: MemoryOperation, path: string): FileNode {
    const node = this.#existing(syscall, path, false);
    if (node.kind === "symlink") {
      throw new FsIoError("ELOOP", syscall, path, "The last component of the path is a symlink");
    }
    if (node.kind !== "file") throw new IsADirectory(syscall, path);
    return node;
  }

  #existingFile(syscall: MemoryOperation, path: string): FileNode {
    const node = this.#existing(syscall, path, true);
    if (node.kind !== "file") throw new IsADirectory(syscall, path);
    return node;
  }

  #existingDir(syscall: MemoryOperation, path: string): DirNode {
    const node = this.#existing(syscall, path, true);
    if (node.kind !== "directory") throw new NotADirectory(syscall, path);
    return node;
  }

  #existing(syscall: MemoryOperation, path: string, follow: boolean): MemoryNode {
    const found = this.#resolve(syscall, path, follow);
    if (found.node === undefined) throw new NotFound(syscall, path);
    return found.node;
  }

  /**
   * Walks `path` from the root, following every symlink in intermediate components and, when
   * `followFinal` (or the path ends with `/` and `slashFollows`), in the final one. `..` goes to
   * the physical parent. A missing final entry is reported with its parent; a missing or
   * non-directory intermediate component fails with `NotFound` / `NotADirectory`, a component
   * longer than `NAME_MAX` bytes, or a path of `PATH_MAX` bytes or more, with `FsIoError` code
   * `"ENAMETOOLONG"`. With `slashFollows`, a final entry named with a trailing slash must be a
   * directory (a file fails with `NotADirectory`). Without it, the final entry named so (a file,
   * a symlink) is returned as it is, unfollowed, with `mustBeDir`, as Linux's unlink, rmdir,
   * rename, mkdir and symlink look it up: the caller decides (mkdir and symlink find it in the
   * way, remove and rename refuse anything but a directory).
   */
  #resolve(syscall: string, path: string, followFinal: boolean, slashFollows = true): Resolved {
    checkPath(syscall, path);
    return this.#walk(syscall, path, followFinal, slashFollows);
  }

  /** `#resolve` without the checks of the path's form and length (`checkPath`). */
  #walk(syscall: string, path: string, followFinal: boolean, slashFollows = true): Resolved {
    let mustBeDir = path.length > 1 && path.endsWith("/");
    // Names are looked up, created and reported as the disk keeps them (a surrogate pair never
    // holds a `/`, so the whole path is made well-formed at once).
    const pending = asOnDisk(path).split("/").filter((part) => part !== "").reverse();
    const dirs: DirNode[] = [this.#root];
    const names: string[] = [];
    let current = this.#root;
    let hops = 0;
    for (;;) {
      const component = pending.pop();
      if (component === undefined) {
        return {
          parent: undefined,
          name: "",
          node: current,
          path: "/" + names.join("/"),
          ancestors: dirs.slice(0, -1),
          mustBeDir,
        };
      }
      if (component === ".") continue;
      // Three UTF-8 bytes at most per UTF-16 unit: only a long name needs its bytes counted.
      if (component.length * 3 > NAME_MAX && utf8Encoder.encode(component).length > NAME_MAX) {
        throw new FsIoError("ENAMETOOLONG", syscall, path, "File name too long");
      }
      if (component === "..") {
        if (dirs.length > 1) {
          dirs.pop();
          names.pop();
          current = dirs[dirs.length - 1] ?? this.#root;
        }
        continue;
      }
      const child = current.entries.get(component);
      const last = pending.length === 0;
      if (child?.kind === "symlink" && (!last || followFinal || (mustBeDir && slashFollows))) {
        if (++hops > MAX_SYMLINK_HOPS) {
          throw new FsIoError("ELOOP", syscall, path, "Too many levels of symbolic links");
        }
        if (child.target.startsWith("/")) {
          dirs.length = 1;
          names.length = 0;
          current = this.#root;
        }
        if (last && child.target.endsWith("/")) mustBeDir = true;
        const parts = child.target.split("/").filter((part) => part !== "");
        for (let i = parts.length - 1; i >= 0; i--) pending.push(parts[i] ?? "");
        continue;
      }
      if (last) {
        if (
          mustBeDir && slashFollows && child !== undefined && child.kind !== "directory" &&
          child.kind !== "symlink"
        ) {
          throw new NotADirectory(syscall, path);
        }
        return {
          parent: current,
          name: component,
          node: child,
          path: "/" + [...names, component].join("/"),
          ancestors: dirs,
          mustBeDir,
        };
      }
      if (child === undefined) throw new NotFound(syscall, path);
      if (child.kind !== "directory") throw new NotADirectory(syscall, path);
      dirs.push(child);
      names.push(component);
      current = child;
    }
  }
}

/** Inputs of `MemoryFileHandle`. */
interface HandleInit {
  readonly node: FileNode;
  readonly path: string;
  readonly writable: boolean;
  readonly append: boolean;
  readonly enter: (op: MemoryOperation) => void;
  readonly now: () => number;
  /** The most bytes the file may hold (`MemoryFsOptions.maxFileSize`). */
  readonly room: number;
  /** Commits the file's journaled mode changes (part of its fsync). */
  readonly syncMode: () => void;
  /** Called once, when the handle is closed (`MemoryFs.openHandles`). */
  readonly released: (handle: MemoryFileHandle) => void;
}

/** An open file of a `MemoryFs`; keeps working on its inode after the entry is removed. */
class MemoryFileHandle implements FileHandle {
  readonly #init: HandleInit;
  #position = 0;
  #closed = false;

  constructor(init: HandleInit) {
    this.#init = init;
  }

  /** The path the handle was opened with. */
  get path(): string {
    return this.#init.path;
  }

  read(offset: number, length: number): Promise<Uint8Array> {
    return this.#run("read", () => {
      checkCount("read", this.#init.path, offset);
      checkCount("read", this.#init.path, length);
      return this.#init.node.read(offset, length);
    });
  }

  write(data: Uint8Array): Promise<void> {
    return this.#run("write", () => this.#write(data), (fault) => {
      // A real write that fails part way keeps the bytes that landed before the error.
      if (!this.#init.writable || !isDiskFault(fault)) return;
      const landed = Math.min(data.length, fault.landed ?? Math.floor(data.length / 2));
      if (landed <= 0) return;
      try {
        this.#write(data.subarray(0, landed));
      } catch {
        // The prefix did not fit either: the injected error is the one to report.
      }
    });
  }

  #write(data: Uint8Array): void {
    this.#requireWritable("write");
    if (data.length === 0) return;
    const node = this.#init.node;
    const at = this.#init.append ? node.size : this.#position;
    checkFileSize("write", this.#init.path, at + data.length);
    const end = withRoom(
      "write",
      this.#init.path,
      at + data.length,
      this.#init.room,
      () => node.write(at, data),
    );
    if (!this.#init.append) this.#position = end;
    node.mtimeMs = this.#init.now();
  }

  truncate(length: number): Promise<void> {
    return this.#run("truncate", () => {
      this.#requireWritable("truncate");
      checkCount("truncate", this.#init.path, length);
      checkFileSize("truncate", this.#init.path, length);
      withRoom(
        "truncate",
        this.#init.path,
        length,
        this.#init.room,
        () => this.#init.node.truncate(length),
      );
      if (this.#position > length) this.#position = length;
      this.#init.node.mtimeMs = this.#init.now();
    });
  }

  sync(): Promise<void> {
    return this.#run("sync", () => {
      this.#init.node.sync();
      this.#init.syncMode();
    }, (fault) => {
      // Linux marks the pages whose writeback failed clean: a later fsync does not retry them.
      if (isDiskFault(fault)) this.#init.node.writebackFailed();
    });
  }

  stat(): Promise<FileInfo> {
    return this.#run("fstat", () => {
      return infoOf(this.#init.node);
    });
  }

  close(): Promise<void> {
    // The handle is released even when its close fails (an injected fault), as Linux's close(2)
    // frees the descriptor whatever it reports: later calls fail with EBADF.
    const release = (): void => {
      if (this.#closed) return;
      this.#closed = true;
      this.#init.released(this);
    };
    return this.#run("close", release, release);
  }

  /**
   * Runs one counted handle call; every call on a closed handle fails with EBADF. When an injected
   * fault refuses the call on an open handle, `onFault` applies its partial effect first.
   */
  #run<T>(op: MemoryOperation, body: () => T, onFault?: (fault: Fault) => void): Promise<T> {
    try {
      try {
        this.#init.enter(op);
      } catch (error) {
        const fault = typeof error === "object" && error !== null ? injected.get(error) : undefined;
        if (fault !== undefined && onFault !== undefined && !this.#closed) onFault(fault);
        throw error;
      }
      if (this.#closed) throw new FsIoError("EBADF", op, this.#init.path, "The handle is closed");
      return Promise.resolve(body());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #requireWritable(op: MemoryOperation): void {
    if (!this.#init.writable) {
      throw new FsIoError("EBADF", op, this.#init.path, "The handle is not open for writing");
    }
  }
}

/**
 * Port paths are absolute, free of NUL bytes and shorter than `PATH_MAX` UTF-8 bytes: a longer one
 * fails with `FsIoError` code `"ENAMETOOLONG"` before anything is looked up, as the kernel refuses
 * it.
 */
function checkPath(syscall: string, path: string): void {
  checkPathForm(syscall, path);
  if (tooLongForPath(path)) {
    throw new FsIoError("ENAMETOOLONG", syscall, path, "File name too long");
  }
}

/** Port paths are absolute and free of NUL bytes. */
function checkPathForm(syscall: string, path: string): void {
  if (!path.startsWith("/")) {
    throw new FsIoError("EINVAL", syscall, path, "Path is not absolute");
  }
  if (path.includes("\0")) {
    throw new FsIoError("EINVAL", syscall, path, "Path contains a NUL byte");
  }
}

/** True when `text` has `PATH_MAX` UTF-8 bytes or more. */
function tooLongForPath(text: string): boolean {
  // Three UTF-8 bytes at most per UTF-16 unit: only a long text needs its bytes counted.
  return text.length * 3 >= PATH_MAX && utf8Encoder.encode(text).length >= PATH_MAX;
}

function checkCount(op: MemoryOperation, path: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new FsIoError("EINVAL", op, path, `Invalid offset or length ${value}`);
  }
}

/** True for the faults of the storage itself (EIO, ENOSPC), not a refused permission. */
function isDiskFault(fault: Fault): boolean {
  return fault.error === "EIO" || fault.error === "ENOSPC";
}

/** Refuses a file size past `MAX_FILE_SIZE` with `FsIoError` code `"EFBIG"`. */
function checkFileSize(op: MemoryOperation, path: string, size: number): void {
  if (size > MAX_FILE_SIZE) {
    throw new FsIoError("EFBIG", op, path, `File too large: ${size} bytes`);
  }
}

/**
 * Runs `change` of a file's bytes, which leaves the file `size` bytes long when it grows it: past
 * `room` bytes, and where the process cannot allocate them, it fails with `ENOSPC` and changes
 * nothing.
 */
function withRoom<T>(
  op: MemoryOperation,
  path: string,
  size: number,
  room: number,
  change: () => T,
): T {
  if (size > room) {
    throw new FsIoError("ENOSPC", op, path, `No space left on device (${room} bytes per file)`);
  }
  try {
    return change();
  } catch (error) {
    if (!(error instanceof NoRoom)) throw error;
    throw new FsIoError("ENOSPC", op, path, "No space left on device (memory)", { cause: error });
  }
}

/** True when the final component of `path` (trailing slashes aside) is `.` or `..`. */
function endsInDots(path: string): boolean {
  const last = path.split("/").filter((part) => part !== "").pop();
  return last === "." || last === "..";
}

function busy(syscall: string, path: string): FsIoError {
  return new FsIoError("EBUSY", syscall, path, "Cannot change an entry named by '/', '.' or '..'");
}

function faultError(
  error: FaultError,
  op: MemoryOperation,
  path: string,
): FsIoError | PermissionDenied {
  switch (error) {
    case "EACCES":
      return new PermissionDenied(op, path);
    case "ENOSPC":
      return new FsIoError("ENOSPC", op, path, "No space left on device (injected)");
    case "EIO":
      return new FsIoError("EIO", op, path, "Input/output error (injected)");
  }
}

function infoOf(node: MemoryNode): FileInfo {
  const size = node.kind === "file"
    ? node.size
    : node.kind === "symlink"
    ? utf8Encoder.encode(node.target).length
    : 0;
  return { kind: node.kind, size, mode: node.mode, mtimeMs: node.mtimeMs };
}

function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function describeNode(node: MemoryNode): string {
  const mode = node.mode.toString(8).padStart(3, "0");
  if (node.kind === "directory") return `dir ${mode}`;
  if (node.kind === "symlink") return `link -> ${node.target}`;
  const bytes = node.liveBytes();
  const text = utf8Decoder.decode(bytes);
  // Valid UTF-8 round-trips exactly; anything else gained replacement characters.
  if (bytesEqual(utf8Encoder.encode(text), bytes)) return `file ${mode} ${JSON.stringify(text)}`;
  let hex = "";
  for (const byte of bytes) hex += byte.toString(16).padStart(2, "0");
  return `file ${mode} hex:${hex}`;
}

/** The bytes a file comes back with after a crash, and how they were chosen. */
function recoverBytes(
  node: FileNode,
  random: () => number,
  forcedTail: TailMode | undefined,
  forcedRewrite: RewriteMode | undefined,
): { data: Uint8Array; as: RecoveredAs } {
  // A crash asked to keep what the kernel holds (the whole tail or the live rewrite: a process
  // crash) sees the bytes a failed sync did not write back as written: the page cache still
  // serves them, even once a later sync made their lost state durable.
  if ((forcedTail === "whole" || forcedRewrite === "live") && node.lostWriteback) {
    return { data: node.liveBytes().slice(), as: forcedTail === "whole" ? "whole" : "live" };
  }
  const durable = node.durableBytes();
  // Lost writeback (a failed sync) never reaches the disk: those ranges keep their durable bytes.
  const live = node.reachableBytes();
  if (!node.extendsDurable()) {
    const pick = forcedRewrite ??
      REWRITE_MODES[Math.floor(random() * REWRITE_MODES.length)] ?? "durable";
    const kept = node.untouchedPrefix;
    switch (pick) {
      case "durable":
        return { data: durable.slice(), as: pick };
      case "live":
        return { data: live.slice(), as: pick };
      case "cut": {
        // From the untouched prefix alone up to one byte short of the new bytes.
        const cut = live.length <= kept ? 0 : Math.floor(random() * (live.length - kept));
        return { data: live.slice(0, Math.min(live.length, kept + cut)), as: pick };
      }
      case "zeros": {
        const data = new Uint8Array(live.length);
        data.set(live.subarray(0, kept));
        return { data, as: pick };
      }
    }
  }
  const tail = live.subarray(durable.length);
  if (tail.length === 0) return { data: durable.slice(), as: "synced" };
  const mode = forcedTail ?? TAIL_MODES[Math.floor(random() * TAIL_MODES.length)] ?? "none";
  switch (mode) {
    case "none":
      return { data: durable.slice(), as: mode };
    case "whole":
      return { data: live.slice(), as: mode };
    case "short": {
      // Strictly between none and whole whenever the tail has room for it; its edges (one byte
      // of the tail, all of it but one) as often as every length between them together, so
      // that a loop over a few seeds meets them.
      const edge = random();
      const cut = tail.length < 2
        ? 0
        : edge < 0.25
        ? 1
        : edge < 0.5
        ? tail.length - 1
        : 1 + Math.floor(random() * (tail.length - 1));
      return { data: live.slice(0, durable.length + cut), as: mode };
    }
    case "zeros": {
      const data = new Uint8Array(live.length);
      data.set(durable);
      return { data, as: mode };
    }
    case "garbage": {
      const data = new Uint8Array(live.length);
      data.set(durable);
      for (let i = durable.length; i < data.length; i++) data[i] = Math.floor(random() * 256);
      // Never the real tail's first byte, never zero: garbage cannot pass for the data or zeros.
      let first = data[durable.length] ?? 1;
      while (first === 0 || first === tail[0]) first = (first + 1) & 0xff;
      data[durable.length] = first;
      return { data, as: mode };
    }
  }
}
