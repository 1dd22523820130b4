/**
 * Session trees are partly written by agents, so a symlink can be planted at any directory or file
 * inside one (RELIABILITY.md case 13). `confined(fs, path)` is the filesystem every layout
 * operation works through: for a path inside the repository's `.loopy_loop/` it checks each
 * component from `.loopy_loop/` down with `lstat` before the call, and refuses a symlink with a
 * `TopologyError` naming it, so nothing is read, written, moved or removed through a link. The
 * last component is checked too when the call would follow it (`open`, `readFile`, `writeFile`,
 * `stat`, `readDir`, `chmod`, `utime`, `syncDir`, `realPath`) or would fail on it (`mkdir`);
 * `lstat`, `rename`, `remove`, `symlink` and `readLink` never follow it, so a planted link itself
 * can still be inspected or removed. Paths outside `.loopy_loop/` are passed through unchanged.
 *
 * The checks run just before each call: a link swapped in between a check and the call is not
 * caught (the port has no call that opens without following links). `.loopy_loop/` itself is
 * checked by `findLoopyRoot` and by the scaffold.
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
} from "../port/fs.ts";
import { FsError, NotFound } from "../port/errors.ts";
import { dirname, join, normalize, relativeWithin } from "../port/path.ts";
import { TopologyError } from "./errors.ts";
import { LOOPY_DIRNAME } from "./paths.ts";

/** The `.loopy_loop` directory `path` lies in (or is), or undefined. */
export function loopyDirOf(path: string): string | undefined {
  const full = normalize(path);
  const marker = `/${LOOPY_DIRNAME}`;
  const at = full.indexOf(`${marker}/`);
  if (at >= 0) return full.slice(0, at + marker.length);
  return full.endsWith(marker) ? full : undefined;
}

/**
 * The canonical spelling of `path` (a directory or file of the layout), the same string for
 * every spelling of it: inside a repository's `.loopy_loop/`, the repository root is resolved
 * with `realPath` (it may be reached through symlinks; nothing below `.loopy_loop/` may be a
 * link, so the rest of the path is kept as it is); elsewhere the parent directory is resolved.
 * When that directory cannot be resolved (it does not exist, or the filesystem fails), the
 * normalized path itself is returned: whatever uses it then fails on its own first access.
 * In-process serialization keys (`serializedOn`) and the session tree's paths
 * (`loadSessionTree`) are spelled this way.
 */
export async function canonicalPath(fs: FileSystem, path: string): Promise<string> {
  const full = normalize(path);
  const anchor = dirname(loopyDirOf(full) ?? full);
  const below = relativeWithin(anchor, full) ?? "";
  try {
    return join(await fs.realPath(anchor), below);
  } catch (error) {
    if (error instanceof FsError) return full;
    throw error;
  }
}

class LinkRefusingFs implements FileSystem {
  readonly inner: FileSystem;
  readonly root: string;

  /**
   * The inner port's `readFileNoFollow` after the link checks, where the inner port has it (a
   * record is then read without following a link and never waiting on a FIFO).
   */
  readonly readFileNoFollow?: (path: string) => Promise<Uint8Array>;

  /**
   * The inner port's `openNoFollow` after the link checks, where the inner port has it (a file is
   * then opened without following a link and never waiting on a FIFO).
   */
  readonly openNoFollow?: (path: string) => Promise<OpenedFile>;

  constructor(inner: FileSystem, root: string) {
    this.inner = inner;
    this.root = root;
    const noFollow = inner.readFileNoFollow?.bind(inner);
    if (noFollow !== undefined) {
      this.readFileNoFollow = async (path) => await noFollow(await this.check(path, true));
    }
    const openNoFollow = inner.openNoFollow?.bind(inner);
    if (openNoFollow !== undefined) {
      this.openNoFollow = async (path) => await openNoFollow(await this.check(path, true));
    }
  }

  /**
   * Refuses `path` when a component below the root, up to its parent (and the path itself when
   * `last`), is a symlink. A missing component ends the check: what follows does not exist yet.
   * Returns the spelling to use: below the root, the normalized path that was checked (a system
   * would apply `..` after following a link, and follow a final link named with a trailing
   * slash); elsewhere `path` as it is.
   */
  async check(path: string, last: boolean): Promise<string> {
    const relative = relativeWithin(this.root, path);
    if (relative === undefined) return path;
    const checked = normalize(path);
    if (relative === "") return checked;
    const segments = relative.split("/");
    const end = last ? segments.length : segments.length - 1;
    let current = this.root;
    for (let i = 0; i < end; i++) {
      current = join(current, segments[i] as string);
      let kind: string;
      try {
        kind = (await this.inner.lstat(current)).kind;
      } catch (error) {
        if (error instanceof NotFound) break;
        throw error;
      }
      if (kind === "symlink") {
        throw new TopologyError(current, "A session tree may not contain a symlink");
      }
      if (kind !== "directory") break; // the call itself reports a file used as a directory
    }
    return checked;
  }

  async open(path: string, options?: OpenOptions): Promise<FileHandle> {
    path = await this.check(path, true);
    return await this.inner.open(path, options);
  }
  async readFile(path: string): Promise<Uint8Array> {
    path = await this.check(path, true);
    return await this.inner.readFile(path);
  }
  async writeFile(path: string, data: Uint8Array, options?: WriteFileOptions): Promise<void> {
    path = await this.check(path, true);
    return await this.inner.writeFile(path, data, options);
  }
  async rename(from: string, to: string): Promise<void> {
    from = await this.check(from, false);
    to = await this.check(to, false);
    return await this.inner.rename(from, to);
  }
  async remove(path: string, options?: RemoveOptions): Promise<void> {
    path = await this.check(path, false);
    return await this.inner.remove(path, options);
  }
  async mkdir(path: string, options?: MkdirOptions): Promise<void> {
    // A link where the directory should be is named as such.
    path = await this.check(path, true);
    return await this.inner.mkdir(path, options);
  }
  async readDir(path: string): Promise<DirEntry[]> {
    path = await this.check(path, true);
    return await this.inner.readDir(path);
  }
  async stat(path: string): Promise<FileInfo> {
    path = await this.check(path, true);
    return await this.inner.stat(path);
  }
  async lstat(path: string): Promise<FileInfo> {
    path = await this.check(path, false);
    return await this.inner.lstat(path);
  }
  async realPath(path: string): Promise<string> {
    path = await this.check(path, true);
    return await this.inner.realPath(path);
  }
  async chmod(path: string, mode: number): Promise<void> {
    path = await this.check(path, true);
    return await this.inner.chmod(path, mode);
  }
  async symlink(target: string, path: string): Promise<void> {
    path = await this.check(path, false);
    return await this.inner.symlink(target, path);
  }
  async readLink(path: string): Promise<string> {
    path = await this.check(path, false);
    return await this.inner.readLink(path);
  }
  async syncDir(path: string): Promise<void> {
    path = await this.check(path, true);
    return await this.inner.syncDir(path);
  }
  async utime(path: string, mtimeMs: number): Promise<void> {
    path = await this.check(path, true);
    return await this.inner.utime(path, mtimeMs);
  }
  homeDir(): string | undefined {
    return this.inner.homeDir?.();
  }
}

/**
 * The filesystem a layout operation on `path` (a session directory or a file in one) works
 * through: `fs` seen through the link checks of this module, rooted at the `.loopy_loop/`
 * directory that contains `path`. `fs` itself when `path` is not inside a `.loopy_loop/`, or when
 * `fs` is already such a view of the same root.
 */
export function confined(fs: FileSystem, path: string): FileSystem {
  const root = loopyDirOf(path);
  if (root === undefined) return fs;
  if (fs instanceof LinkRefusingFs) {
    if (fs.root === root) return fs;
    fs = fs.inner;
  }
  // One view per filesystem and root, so what the durability recipes remember of a filesystem
  // (directories already synced in this process) holds across calls through it.
  let views = viewsOf.get(fs);
  if (views === undefined) viewsOf.set(fs, views = new Map());
  let view = views.get(root);
  if (view === undefined) views.set(root, view = new LinkRefusingFs(fs, root));
  return view;
}

/** The confined views of each filesystem, by root. */
const viewsOf = new WeakMap<FileSystem, Map<string, LinkRefusingFs>>();
