/**
 * Internals of `MemoryFs`: the inodes (files, directories, symlinks) with their live and
 * durable state, the ordered metadata journal and its replay, and the seeded PRNG that makes
 * crash choices reproducible.
 *
 * Durable state lives beside the live state on each inode: a file's synced bytes, a node's
 * committed mode, a directory's committed entries. Journal operations name inodes, never paths,
 * so replaying any prefix of the journal over the committed entries gives the namespace as it
 * was after that many operations.
 *
 * @module
 */

const EMPTY: Uint8Array = new Uint8Array(0);

/**
 * Thrown by a `FileNode` whose bytes cannot be held (the buffer could not be allocated): the
 * memory is the disk, and it is full. `MemoryFs` reports it as `FsIoError` code `"ENOSPC"`.
 */
export class NoRoom extends Error {
  /** The length that could not be held. */
  readonly length: number;

  /** Creates the error for a file of `length` bytes. */
  constructor(length: number, options?: { readonly cause?: unknown }) {
    super(`Cannot hold a file of ${length} bytes in memory`, options);
    this.name = "NoRoom";
    this.length = length;
  }
}

/** A regular file: live bytes in a growable buffer, and the bytes made durable by the last sync. */
export class FileNode {
  /** The node kind. */
  readonly kind = "file" as const;
  /** Live permission bits. */
  mode: number;
  /** Permission bits as of the committed journal prefix. */
  durableMode: number;
  /** The journal sequence of the operation that set `durableMode` (0: the node's creation). */
  durableModeSeq = 0;
  /** Last modification time in Unix milliseconds. */
  mtimeMs: number;
  /** Live bytes are `#buf[0, #size)`; the buffer grows by doubling. */
  #buf: Uint8Array = EMPTY;
  #size = 0;
  /**
   * Durable bytes are `#synced[0, #syncedLen)`. After a sync `#synced` is the live buffer itself
   * (no copy); it is detached (copied) before a live change below `#syncedLen`. A detached or
   * outgrown durable buffer is never written again, so copies of a node may share it.
   */
  #synced: Uint8Array = EMPTY;
  #syncedLen = 0;
  /** True when live bytes below `#syncedLen` were changed since the last sync. */
  #rewritten = false;
  /** The lowest offset changed since the last sync (`Infinity`: none). */
  #dirtyFrom = Infinity;
  /**
   * Byte ranges `[from, to)` whose writeback failed (a failed fsync) and that were not written
   * again since: Linux marks such pages clean, so no later fsync writes them. Their durable
   * content stays what it was (zeros past the durable length) until they are written again.
   */
  #lost: [number, number][] = [];

  /** Creates an empty file. */
  constructor(mode: number, mtimeMs: number) {
    this.mode = mode;
    this.durableMode = mode;
    this.mtimeMs = mtimeMs;
  }

  /** A file whose live and durable bytes are both `content` (taken over, not copied). */
  static recovered(content: Uint8Array, mode: number, mtimeMs: number): FileNode {
    const node = new FileNode(mode, mtimeMs);
    node.#buf = content;
    node.#size = content.length;
    node.#synced = content;
    node.#syncedLen = content.length;
    return node;
  }

  /** The live length. */
  get size(): number {
    return this.#size;
  }

  /** A copy of up to `length` live bytes at `offset` (fewer at the end of the file). */
  read(offset: number, length: number): Uint8Array {
    const end = Math.min(this.#size, offset + length);
    return offset >= end ? new Uint8Array(0) : this.#buf.slice(offset, end);
  }

  /** Writes `data` at `offset`, zero-filling any gap past the end; returns the end offset. */
  write(offset: number, data: Uint8Array): number {
    const end = offset + data.length;
    if (data.length === 0) return offset;
    this.#reserve(end);
    this.#beforeChange(Math.min(offset, this.#size));
    if (offset > this.#size) this.#buf.fill(0, this.#size, offset);
    this.#buf.set(data, offset);
    if (end > this.#size) this.#size = end;
    this.#clearLost(offset, end);
    return end;
  }

  /** Sets the live length; growth reads as zeros. */
  truncate(length: number): void {
    if (length === this.#size) return;
    if (length > this.#size) this.#reserve(length);
    this.#beforeChange(Math.min(length, this.#size));
    if (length > this.#size) this.#buf.fill(0, this.#size, length);
    this.#size = length;
    this.#clearLost(length, Infinity);
  }

  /**
   * Makes the live bytes durable (fsync): O(1), the buffer is shared until the next rewrite.
   * Ranges whose writeback failed before and that were not written since stay as they were.
   */
  sync(): void {
    if (this.#lost.length === 0) {
      this.#synced = this.#buf;
      this.#rewritten = false;
    } else {
      this.#synced = this.reachableBytes().slice();
      // Compared byte by byte from now on: the live bytes differ in the lost ranges.
      this.#rewritten = true;
    }
    this.#syncedLen = this.#size;
    this.#dirtyFrom = Infinity;
  }

  /**
   * A failed fsync: the bytes pending now (changed since the last sync) had their writeback fail
   * and are marked clean, so a later successful sync does not make them durable unless they are
   * written again first.
   */
  writebackFailed(): void {
    const from = Math.min(this.#dirtyFrom, this.#syncedLen);
    if (from < this.#size) this.#lost.push([from, this.#size]);
  }

  /**
   * The lowest offset changed since the last sync, capped at the durable length: the durable
   * bytes below it are untouched (live and durable agree there).
   */
  get untouchedPrefix(): number {
    return Math.min(this.#dirtyFrom, this.#syncedLen, this.#size);
  }

  /** True when a failed sync lost the writeback of some live bytes (see `reachableBytes`). */
  get lostWriteback(): boolean {
    return this.#lost.length > 0;
  }

  /**
   * The live bytes as writeback could ever make them durable: the live bytes, with every lost
   * range (see `writebackFailed`) holding its durable content (zeros past the durable length).
   * A view of the live bytes when nothing is lost (do not mutate).
   */
  reachableBytes(): Uint8Array {
    const live = this.liveBytes();
    if (this.#lost.length === 0) return live;
    const out = live.slice();
    const durable = this.durableBytes();
    for (const [from, to] of this.#lost) {
      for (let i = from; i < Math.min(to, out.length); i++) out[i] = durable[i] ?? 0;
    }
    return out;
  }

  /** A view of the live bytes (do not mutate). */
  liveBytes(): Uint8Array {
    return this.#buf.subarray(0, this.#size);
  }

  /** A view of the durable bytes (do not mutate). */
  durableBytes(): Uint8Array {
    return this.#synced.subarray(0, this.#syncedLen);
  }

  /**
   * True when the durable bytes are a prefix of the reachable bytes (only a tail is unsynced).
   */
  extendsDurable(): boolean {
    if (this.#size < this.#syncedLen) return false;
    if (!this.#rewritten && this.#lost.length === 0) return true;
    return bytesEqual(this.reachableBytes().subarray(0, this.#syncedLen), this.durableBytes());
  }

  /** An independent copy with the same live and durable bytes. */
  copy(): FileNode {
    const copy = new FileNode(this.mode, this.mtimeMs);
    copy.durableMode = this.durableMode;
    copy.durableModeSeq = this.durableModeSeq;
    copy.#buf = this.#buf.slice(0, this.#size);
    copy.#size = this.#size;
    copy.#synced = this.#synced === this.#buf ? copy.#buf : this.#synced;
    copy.#syncedLen = this.#syncedLen;
    copy.#rewritten = this.#rewritten;
    copy.#dirtyFrom = this.#dirtyFrom;
    copy.#lost = this.#lost.map(([from, to]) => [from, to]);
    return copy;
  }

  /** Called before live bytes from `offset` on change: keeps the durable bytes intact. */
  #beforeChange(offset: number): void {
    if (offset < this.#dirtyFrom) this.#dirtyFrom = offset;
    if (offset >= this.#syncedLen) return;
    this.#rewritten = true;
    if (this.#synced === this.#buf) this.#synced = this.#buf.slice(0, this.#syncedLen);
  }

  /** Drops `[from, to)` from the lost ranges: those bytes were written (or cut) again. */
  #clearLost(from: number, to: number): void {
    if (this.#lost.length === 0) return;
    const kept: [number, number][] = [];
    for (const [a, b] of this.#lost) {
      if (a < from) kept.push([a, Math.min(b, from)]);
      if (b > to) kept.push([Math.max(a, to), b]);
    }
    this.#lost = kept.filter(([a, b]) => a < b);
  }

  /**
   * Grows the buffer (by doubling, or to exactly `length` when a doubled one cannot be had) to
   * hold at least `length` bytes; `NoRoom` when even that cannot be allocated, nothing changed.
   */
  #reserve(length: number): void {
    if (length <= this.#buf.length) return;
    let grown: Uint8Array;
    try {
      grown = new Uint8Array(Math.max(length, this.#buf.length * 2));
    } catch {
      try {
        grown = new Uint8Array(length);
      } catch (error) {
        throw new NoRoom(length, { cause: error });
      }
    }
    grown.set(this.#buf.subarray(0, this.#size));
    this.#buf = grown;
  }
}

/** A directory: live entries, committed entries, and the journal sequence that last touched it. */
export class DirNode {
  /** The node kind. */
  readonly kind = "directory" as const;
  /** Live permission bits. */
  mode: number;
  /** Permission bits as of the committed journal prefix. */
  durableMode: number;
  /** The journal sequence of the operation that set `durableMode` (0: the node's creation). */
  durableModeSeq = 0;
  /** Last modification time in Unix milliseconds. */
  mtimeMs: number;
  /** Live entries by name. */
  readonly entries: Map<string, MemoryNode> = new Map();
  /** Entries as of the committed journal prefix. */
  readonly durableEntries: Map<string, MemoryNode> = new Map();

  /** Creates an empty directory. */
  constructor(mode: number, mtimeMs: number) {
    this.mode = mode;
    this.durableMode = mode;
    this.mtimeMs = mtimeMs;
  }
}

/** A symbolic link. */
export class LinkNode {
  /** The node kind. */
  readonly kind = "symlink" as const;
  /** Symlinks always report every permission bit. */
  mode = 0o777;
  /** Same as `mode`: a symlink's bits never change. */
  durableMode = 0o777;
  /** Always 0: a symlink's bits never change. */
  durableModeSeq = 0;
  /** Last modification time in Unix milliseconds. */
  mtimeMs: number;
  /** The target string. */
  readonly target: string;

  /** Creates a link to `target`. */
  constructor(target: string, mtimeMs: number) {
    this.target = target;
    this.mtimeMs = mtimeMs;
  }
}

/** Any inode. */
export type MemoryNode = FileNode | DirNode | LinkNode;

/**
 * One metadata operation of the ordered journal. `link` creates an entry for a new inode,
 * `unlink` removes an entry, `rename` moves one (replacing the target entry), `chmod` sets a mode.
 */
export type JournalOp =
  | {
    readonly type: "link";
    readonly seq: number;
    readonly parent: DirNode;
    readonly name: string;
    readonly node: MemoryNode;
    readonly mode: number;
  }
  | {
    readonly type: "unlink";
    readonly seq: number;
    readonly parent: DirNode;
    readonly name: string;
  }
  | {
    readonly type: "rename";
    readonly seq: number;
    readonly fromParent: DirNode;
    readonly fromName: string;
    readonly toParent: DirNode;
    readonly toName: string;
  }
  | {
    readonly type: "chmod";
    readonly seq: number;
    readonly node: MemoryNode;
    readonly mode: number;
  };

/** The directories a journal operation touches: `syncDir` of any of them commits it. */
export function touchedBy(op: JournalOp): DirNode[] {
  switch (op.type) {
    case "link":
    case "unlink":
      return [op.parent];
    case "rename":
      return op.fromParent === op.toParent ? [op.fromParent] : [op.fromParent, op.toParent];
    case "chmod":
      return op.node.kind === "directory" ? [op.node] : [];
  }
}

/** A namespace that journal operations are replayed onto. */
export interface NamespaceView {
  /** The mutable entries of `dir` in this namespace. */
  entries(dir: DirNode): Map<string, MemoryNode>;
  /**
   * Sets the mode of `node` in this namespace as of journal operation `seq`, unless a later
   * operation's mode is there already (a file's fsync commits its chmod before its create).
   */
  setMode(node: MemoryNode, mode: number, seq: number): void;
}

/** The committed namespace: replaying onto it commits an operation for good. */
export const COMMITTED: NamespaceView = {
  entries: (dir) => dir.durableEntries,
  setMode: (node, mode, seq) => {
    if (seq < node.durableModeSeq) return;
    node.durableMode = mode;
    node.durableModeSeq = seq;
  },
};

/**
 * A copy-on-write overlay of the committed namespace: replaying onto it leaves the filesystem
 * untouched, so a crash can replay a different prefix for every seed.
 */
export class OverlayView implements NamespaceView {
  readonly #entries = new Map<DirNode, Map<string, MemoryNode>>();
  readonly #modes = new Map<MemoryNode, number>();
  readonly #seqs = new Map<MemoryNode, number>();

  /** The overlay's mutable copy of `dir`'s committed entries. */
  entries(dir: DirNode): Map<string, MemoryNode> {
    let entries = this.#entries.get(dir);
    if (entries === undefined) {
      entries = new Map(dir.durableEntries);
      this.#entries.set(dir, entries);
    }
    return entries;
  }

  /** The entries of `dir` in the overlay (read-only use). */
  listing(dir: DirNode): ReadonlyMap<string, MemoryNode> {
    return this.#entries.get(dir) ?? dir.durableEntries;
  }

  /** Sets the mode of `node` in the overlay as of operation `seq` (see `NamespaceView`). */
  setMode(node: MemoryNode, mode: number, seq: number): void {
    if (seq < (this.#seqs.get(node) ?? node.durableModeSeq)) return;
    this.#modes.set(node, mode);
    this.#seqs.set(node, seq);
  }

  /** The mode of `node` in the overlay. */
  mode(node: MemoryNode): number {
    return this.#modes.get(node) ?? node.durableMode;
  }
}

/** Replays one journal operation onto a namespace. */
export function replay(view: NamespaceView, op: JournalOp): void {
  switch (op.type) {
    case "link":
      view.entries(op.parent).set(op.name, op.node);
      view.setMode(op.node, op.mode, op.seq);
      return;
    case "unlink":
      view.entries(op.parent).delete(op.name);
      return;
    case "rename": {
      const from = view.entries(op.fromParent);
      const node = from.get(op.fromName);
      // Replaying a prefix in order always finds the source; a missing one is left alone.
      if (node === undefined) return;
      from.delete(op.fromName);
      view.entries(op.toParent).set(op.toName, node);
      return;
    }
    case "chmod":
      view.setMode(op.node, op.mode, op.seq);
      return;
  }
}

/** Deep copies of nodes, each node copied once (identity preserved across the copy). */
export class NodeCopier {
  readonly #copies = new Map<MemoryNode, MemoryNode>();

  /** The copy of `node`. */
  node(node: MemoryNode): MemoryNode {
    return node.kind === "directory" ? this.dir(node) : this.#leaf(node);
  }

  /** The copy of `dir`, with its live and committed entries copied. */
  dir(dir: DirNode): DirNode {
    const seen = this.#copies.get(dir);
    if (seen !== undefined) return seen as DirNode;
    const copy = new DirNode(dir.mode, dir.mtimeMs);
    copy.durableMode = dir.durableMode;
    copy.durableModeSeq = dir.durableModeSeq;
    this.#copies.set(dir, copy);
    for (const [name, child] of dir.entries) copy.entries.set(name, this.node(child));
    for (const [name, child] of dir.durableEntries) copy.durableEntries.set(name, this.node(child));
    return copy;
  }

  /** The copy of a journal operation, naming the copied nodes. */
  op(op: JournalOp): JournalOp {
    switch (op.type) {
      case "link":
        return { ...op, parent: this.dir(op.parent), node: this.node(op.node) };
      case "unlink":
        return { ...op, parent: this.dir(op.parent) };
      case "rename":
        return { ...op, fromParent: this.dir(op.fromParent), toParent: this.dir(op.toParent) };
      case "chmod":
        return { ...op, node: this.node(op.node) };
    }
  }

  #leaf(node: FileNode | LinkNode): MemoryNode {
    const seen = this.#copies.get(node);
    if (seen !== undefined) return seen;
    let copy: FileNode | LinkNode;
    if (node.kind === "file") copy = node.copy();
    else copy = new LinkNode(node.target, node.mtimeMs);
    this.#copies.set(node, copy);
    return copy;
  }
}

/** True when both byte ranges hold the same bytes. */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The mulberry32 PRNG: a uniform float in [0, 1) per call, fully determined by `seed`. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
