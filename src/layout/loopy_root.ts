/**
 * The `.loopy_loop/` directory of a repository: finding it from any directory below the
 * repository (the way git finds `.git`), checking it before maintenance touches anything in it,
 * and walking the session directories it holds without following a symlink.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { basename, dirname, isAbsolute, join, relativeWithin } from "../port/path.ts";
import { entryKind } from "../port/durable.ts";
import { FsError, PermissionDenied } from "../port/errors.ts";
import { LoopyRootError } from "./errors.ts";
import { CHILDREN_DIRNAME, LOOPY_DIRNAME, repositoryPaths, STAGING_PREFIX } from "./paths.ts";

/** The prefix of an entry a prune has renamed away and not yet removed; readers treat it as gone. */
export const PRUNING_PREFIX: string = ".pruning-";

/**
 * True for the name of an entry a prune moved aside (`.pruning-*`), in any letter case: on a
 * case-insensitive filesystem a path may spell the prefix otherwise and still reach it, and no
 * entry the engine writes has a name of this form, so none is evidence in any spelling.
 */
export function isPruningName(name: string): boolean {
  return name.slice(0, PRUNING_PREFIX.length).toLowerCase() === PRUNING_PREFIX;
}

/**
 * The name of a raw attempt directory `raw/<NNNN>_<workflow>/` of a folded session: an iteration
 * of four or more digits, `_`, a workflow id. Only entries of `raw/` named so are prunable.
 */
export const RAW_ATTEMPT_NAME: RegExp = /^\d{4,}_[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/** The checked paths of a `.loopy_loop/` directory. */
export interface LoopyRoot {
  /** The canonical `.loopy_loop/` directory. */
  readonly loopyDir: string;
  /** The repository root (its parent). */
  readonly repoRoot: string;
  /** `.loopy_loop/sessions/`. */
  readonly sessionsDir: string;
  /** `.loopy_loop/traces/` (mirror layout). */
  readonly tracesDir: string;
  /** `.loopy_loop/trace_finalization_outbox/` (mirror layout). */
  readonly outboxDir: string;
}

/**
 * The kind of `path` (at or below `base`), checking every component from `base` down with
 * `lstat`: `symlink` when any component is a link, `undefined` when `path` is not below `base`
 * or a component is missing or not a directory.
 */
export async function chainKind(
  fs: FileSystem,
  base: string,
  path: string,
): Promise<string | undefined> {
  const relative = relativeWithin(base, path);
  if (relative === undefined) return undefined;
  let current = base;
  let kind = await entryKind(fs, base);
  for (const segment of relative === "" ? [] : relative.split("/")) {
    if (kind !== "directory") return kind === "symlink" ? "symlink" : undefined;
    current = join(current, segment);
    kind = await entryKind(fs, current);
  }
  return kind;
}

/**
 * Finds the `.loopy_loop/` directory of the repository containing `startDir`: `startDir` itself
 * and then each parent in turn, like git finds `.git`. Returns the canonical path of the first
 * `.loopy_loop` directory found, or `undefined` when no ancestor has one. A `.loopy_loop` that is
 * a symlink is refused (`LoopyRootError`): maintenance never works through a link.
 *
 * @example Find the repository's `.loopy_loop/` from a nested directory
 * ```ts
 * import { findLoopyRoot } from "@loop/sessions/layout";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * await fs.mkdir("/repo/.loopy_loop/sessions", { recursive: true });
 * await fs.mkdir("/repo/src/deep", { recursive: true });
 * if ((await findLoopyRoot(fs, "/repo/src/deep")) !== "/repo/.loopy_loop") {
 *   throw new Error("unexpected result");
 * }
 * ```
 */
export async function findLoopyRoot(fs: FileSystem, startDir: string): Promise<string | undefined> {
  if (!isAbsolute(startDir)) {
    throw new LoopyRootError(startDir, "The start directory must be an absolute path");
  }
  let dir = await fs.realPath(startDir);
  for (;;) {
    const candidate = join(dir, LOOPY_DIRNAME);
    const kind = await entryKind(fs, candidate);
    if (kind === "symlink") {
      throw new LoopyRootError(candidate, "The .loopy_loop directory is a symlink");
    }
    if (kind === "directory") return candidate;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

/**
 * Checks a `.loopy_loop/` directory before maintenance works in it: the path must be absolute,
 * named `.loopy_loop`, a real directory (not a symlink). Returns its canonical paths; everything
 * maintenance removes is built from these by joining names read from directory listings, so
 * nothing outside `.loopy_loop/` can be reached.
 */
export async function openLoopyRoot(fs: FileSystem, loopyDir: string): Promise<LoopyRoot> {
  if (!isAbsolute(loopyDir)) {
    throw new LoopyRootError(loopyDir, "The .loopy_loop directory must be an absolute path");
  }
  if (basename(loopyDir) !== LOOPY_DIRNAME) {
    throw new LoopyRootError(loopyDir, `The directory is not named ${LOOPY_DIRNAME}`);
  }
  const kind = await entryKind(fs, loopyDir);
  if (kind === undefined) throw new LoopyRootError(loopyDir, "The directory does not exist");
  if (kind === "symlink") throw new LoopyRootError(loopyDir, "The directory is a symlink");
  if (kind !== "directory") throw new LoopyRootError(loopyDir, "The path is not a directory");
  const repoRoot = await fs.realPath(dirname(loopyDir));
  const paths = repositoryPaths(repoRoot);
  return {
    loopyDir: paths.loopyDir,
    repoRoot,
    sessionsDir: paths.sessionsRoot,
    tracesDir: paths.tracesRoot,
    outboxDir: paths.traceFinalizationOutbox,
  };
}

/** A session directory found by `walkSessionDirs`. */
export interface SessionDirEntry {
  /** The session id (the directory's name). */
  readonly sessionId: string;
  /** The session directory. */
  readonly dir: string;
  /** The id of the top-level session of its tree. */
  readonly rootSessionId: string;
  /** The physical parent's id, `null` for a top-level session. */
  readonly parentSessionId: string | null;
}

/** A path a walk did not enter, and why. */
export interface WalkSkip {
  /** The path. */
  readonly path: string;
  /** Always `symlink`: a walk never follows a link. */
  readonly reason: "symlink";
  /**
   * The id of the tree the path belongs to (the top-level directory's name below `sessions/`),
   * or `null` for `sessions/` itself: sessions may hide behind it that the walk cannot see.
   */
  readonly rootSessionId: string | null;
}

/**
 * A directory where sessions may be that the walk could not identify: one where a session
 * directory would be (below `sessions/`, or a child's below `children/`) without a regular
 * `session.json` (a session whose manifest is missing or damaged, or a directory that is no
 * session), or whose `session.json` or `children/` the filesystem refuses to show. Nothing below
 * it is walked.
 */
export interface UnidentifiedDir {
  /** The directory (a session's `children/` when that is what cannot be listed). */
  readonly path: string;
  /** The id of the tree it belongs to (the top-level directory's name below `sessions/`). */
  readonly rootSessionId: string;
  /** What is wrong, to follow the path in a sentence: "has no session.json", ... */
  readonly detail: string;
  /**
   * The filesystem's refusal, when that is what hid it (a permission refusal, or a path too long
   * or with too many links to reach): a caller that must see
   * every session (id allocation, seal checks) throws it, as the walk did before it kept going.
   */
  readonly error?: FsError;
}

/**
 * Throws the first refusal `walk` kept going past (see `UnidentifiedDir.error`): for callers that
 * must not take a part of the tree they could not see for one without sessions.
 */
export function throwRefusal(walk: SessionDirWalk): void {
  const refused = walk.unidentified.find((dir) => dir.error !== undefined);
  if (refused?.error !== undefined) throw refused.error;
}

/**
 * True for an error that concerns the path it names, not the storage: the filesystem refuses it
 * (`PermissionDenied`), or it is too long or has too many links to reach (`ENAMETOOLONG`,
 * `ELOOP`). Maintenance keeps and reports such a path, and goes on with the others; any other
 * error (an I/O error) fails the call, and a rerun finishes the job.
 */
export function isRefusedHere(error: unknown): error is FsError {
  return error instanceof PermissionDenied ||
    (error instanceof FsError && (error.code === "ENAMETOOLONG" || error.code === "ELOOP"));
}

/** What `walkSessionDirs` found. */
export interface SessionDirWalk {
  /** Every session directory, parents before their children, in name order. */
  readonly sessions: readonly SessionDirEntry[];
  /** Symlinks met where a session directory, a manifest or `children/` would be. */
  readonly skipped: readonly WalkSkip[];
  /**
   * Directories where sessions may be that could not be identified (no regular `session.json`,
   * or a `session.json` or `children/` the filesystem refuses to show), in walk order.
   */
  readonly unidentified: readonly UnidentifiedDir[];
}

/**
 * Lists every session directory under `.loopy_loop/sessions/` (top-level sessions and, through
 * `children/`, their descendants) without parsing a manifest and without following a symlink:
 * a directory counts when it holds a regular `session.json`. Staging and other dot entries are
 * not sessions. This is the tolerant walk of maintenance; `loadSessionTree` is the validating one.
 */
export async function walkSessionDirs(
  fs: FileSystem,
  sessionsDir: string,
): Promise<SessionDirWalk> {
  const sessions: SessionDirEntry[] = [];
  const skipped: WalkSkip[] = [];
  const unidentified: UnidentifiedDir[] = [];
  const visit = async (
    dir: string,
    rootSessionId: string,
    parentSessionId: string | null,
  ): Promise<void> => {
    let manifest;
    try {
      manifest = await entryKind(fs, join(dir, "session.json"));
    } catch (error) {
      if (!isRefusedHere(error)) throw error;
      unidentified.push({
        path: dir,
        rootSessionId,
        detail: `has a session.json that cannot be looked at (${error.message})`,
        error,
      });
      return;
    }
    if (manifest === "symlink") {
      skipped.push({ path: join(dir, "session.json"), reason: "symlink", rootSessionId });
      return;
    }
    if (manifest !== "file") {
      unidentified.push({
        path: dir,
        rootSessionId,
        detail: manifest === undefined
          ? "has no session.json"
          : `has a session.json that is not a regular file (${manifest})`,
      });
      return;
    }
    const sessionId = basename(dir);
    sessions.push({ sessionId, dir, rootSessionId, parentSessionId });
    const childrenDir = join(dir, CHILDREN_DIRNAME);
    let children;
    let listed;
    try {
      children = await entryKind(fs, childrenDir);
      if (children === "directory") listed = await fs.readDir(childrenDir);
    } catch (error) {
      if (!isRefusedHere(error)) throw error;
      unidentified.push({
        path: childrenDir,
        rootSessionId,
        detail: `cannot be listed (${error.message})`,
        error,
      });
      return;
    }
    if (children === "symlink") {
      skipped.push({ path: childrenDir, reason: "symlink", rootSessionId });
      return;
    }
    if (listed === undefined) return;
    for (const entry of listed) {
      if (entry.name.startsWith(".") || entry.name.startsWith(STAGING_PREFIX)) continue;
      const childDir = join(childrenDir, entry.name);
      if (entry.kind === "symlink") {
        skipped.push({ path: childDir, reason: "symlink", rootSessionId });
      } else if (entry.kind === "directory") await visit(childDir, rootSessionId, sessionId);
    }
  };
  const top = await entryKind(fs, sessionsDir);
  if (top === "symlink") {
    skipped.push({ path: sessionsDir, reason: "symlink", rootSessionId: null });
  }
  if (top !== "directory") return { sessions, skipped, unidentified };
  for (const entry of await fs.readDir(sessionsDir)) {
    if (entry.name.startsWith(".")) continue;
    const dir = join(sessionsDir, entry.name);
    if (entry.kind === "symlink") {
      skipped.push({ path: dir, reason: "symlink", rootSessionId: entry.name });
    } else if (entry.kind === "directory") await visit(dir, entry.name, null);
  }
  return { sessions, skipped, unidentified };
}
