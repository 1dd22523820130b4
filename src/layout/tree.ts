/**
 * The recursive session tree. Root sessions are direct children of `.loopy_loop/sessions/`;
 * a child is physically nested in its parent's `children/`, and the shape recurses. A tree is
 * validated before any of its paths is handed out: no symlinks anywhere in the topology, every
 * manifest id equal to its directory name and unique, declared parent/root/depth equal to the
 * physical nesting, `parent.json` consistent with it (where a child has one: the spec's scan
 * refuses only one that contradicts the physical parent, so a child without one loads, its place
 * under `children/` naming its parent; a root must have none). Staging directories
 * (`.staging-*`) and child directories without a `session.json` are not part of the topology.
 *
 * Only the deepest live session receives work: a parent whose `state.json` names an
 * `active_child_session_id` is suspended until that child is terminal.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { FsError } from "../port/errors.ts";
import { basename, dirname, isAbsolute, join, normalize } from "../port/path.ts";
import { entryKind, readDirIfExists } from "../port/durable.ts";
import {
  LayoutRecordError,
  SessionStateError,
  TopologyError,
  UnknownSessionError,
} from "./errors.ts";
import { isSafeId } from "./ids.ts";
import { readRecord, readRecordIfExists } from "./json_io.ts";
import {
  CHILDREN_DIRNAME,
  repositoryPaths,
  type SessionLayout,
  SessionPaths,
  STAGING_PREFIX,
} from "./paths.ts";
import {
  type AnySessionManifest,
  assertStateOwner,
  manifestLayout,
  parseParentManifest,
  parseSessionManifest,
  parseSessionStateAsRead,
  sessionPhase,
  type SessionState,
  type StateOwner,
} from "./records.ts";
import { stateOwnerAt } from "./_nesting.ts";
import { confined } from "./no_links.ts";

/** One validated session of a tree. */
export interface SessionNode {
  /** The session id (equal to the directory name). */
  readonly sessionId: string;
  /** The session directory (absolute, symlink-free). */
  readonly dir: string;
  /** The physical parent, `null` for the root. */
  readonly parentSessionId: string | null;
  /** The tree's root session. */
  readonly rootSessionId: string;
  /** 0 for the root. */
  readonly depth: number;
  /** The layout recorded in `session.json`. */
  readonly layout: SessionLayout;
  /** The validated manifest. */
  readonly manifest: AnySessionManifest;
  /** Ids of the published children, sorted by name. */
  readonly childIds: readonly string[];
}

/** A validated session tree: one root session and all its published descendants. */
export class SessionTree {
  /** The repository root. */
  readonly repoRoot: string;
  /** The root session's id. */
  readonly rootSessionId: string;
  /** Every session of the tree by id. */
  readonly nodes: ReadonlyMap<string, SessionNode>;
  /**
   * The session ids of the repository's other valid trees, as `loadSessionTree` read them. An id
   * in two trees makes both unresolvable (`loadSessionTree` refuses the duplicate), so a new
   * child id repeats none of these, nor an id of this tree.
   */
  readonly idsElsewhere: ReadonlySet<string>;

  /** Wraps validated nodes (use `loadSessionTree` to build one). */
  constructor(
    repoRoot: string,
    rootSessionId: string,
    nodes: ReadonlyMap<string, SessionNode>,
    idsElsewhere: ReadonlySet<string> = new Set(),
  ) {
    this.repoRoot = repoRoot;
    this.rootSessionId = rootSessionId;
    this.nodes = nodes;
    this.idsElsewhere = idsElsewhere;
  }

  /** The root session. */
  get root(): SessionNode {
    return this.require(this.rootSessionId);
  }

  /** The session `id`, or `undefined` when it is not in this tree. */
  get(id: string): SessionNode | undefined {
    return this.nodes.get(id);
  }

  /** The session `id`; throws `UnknownSessionError` when it is not in this tree. */
  require(id: string): SessionNode {
    const node = this.nodes.get(id);
    if (node === undefined) throw new UnknownSessionError(id, "Session is not in this tree");
    return node;
  }

  /** The paths of session `id`, for its recorded layout. */
  paths(id: string): SessionPaths {
    const node = this.require(id);
    return new SessionPaths(node.dir, node.layout);
  }
}

/** Reads and validates `session.json` of a session directory. */
export async function readSessionManifest(
  fs: FileSystem,
  sessionDir: string,
): Promise<AnySessionManifest> {
  return (await readRecord(fs, join(sessionDir, "session.json"), parseSessionManifest)).record;
}

/**
 * Refuses (`LayoutRecordError` naming `file` and `field`) a session id that is not the one the
 * `session.json` of `sessionDir` records: a record in a session's directory is that session's.
 */
export async function requireOwnSession(
  fs: FileSystem,
  sessionDir: string,
  sessionId: string,
  file: string,
  field: string,
): Promise<void> {
  const own = (await readSessionManifest(fs, sessionDir)).session_id;
  if (sessionId !== own) {
    throw new LayoutRecordError(
      file,
      `The record names another session than this one (${own}, as session.json records)`,
      { path: field, value: sessionId },
    );
  }
}

/**
 * The layout a session records in its `session.json` (`mirror` when a legacy manifest has no
 * layout field). A missing or malformed manifest is an error, never a guess.
 */
export async function readSessionLayout(
  fs: FileSystem,
  sessionDir: string,
): Promise<SessionLayout> {
  return manifestLayout(await readSessionManifest(fs, sessionDir));
}

/** The paths of a session directory, built for the layout its `session.json` records. */
export async function openSessionPaths(fs: FileSystem, sessionDir: string): Promise<SessionPaths> {
  return new SessionPaths(sessionDir, await readSessionLayout(fs, sessionDir));
}

/**
 * Checks that the repository's `.loopy_loop/` and `.loopy_loop/sessions/` are real directories
 * (not symlinks). Returns the canonical repository root and the sessions root, or `undefined`
 * for the sessions root when it does not exist yet.
 */
export async function sessionsRootOf(
  fs: FileSystem,
  repoRoot: string,
): Promise<{ readonly repoRoot: string; readonly sessionsRoot: string | undefined }> {
  repositoryPaths(repoRoot); // an absolute path, before anything is looked at
  const canonical = await fs.realPath(repoRoot);
  const paths = repositoryPaths(canonical);
  for (const dir of [paths.loopyDir, paths.sessionsRoot]) {
    const kind = await entryKind(fs, dir);
    if (kind === undefined) return { repoRoot: canonical, sessionsRoot: undefined };
    if (kind === "symlink") throw new TopologyError(dir, "Session topology may not use a symlink");
    if (kind !== "directory") throw new TopologyError(dir, "Expected a directory");
  }
  return { repoRoot: canonical, sessionsRoot: paths.sessionsRoot };
}

async function scanNode(
  fs: FileSystem,
  dir: string,
  parent: SessionNode | null,
  nodes: Map<string, SessionNode>,
): Promise<void> {
  const kind = await entryKind(fs, dir);
  if (kind === "symlink") throw new TopologyError(dir, "Session topology may not use a symlink");
  if (kind !== "directory") throw new TopologyError(dir, "Expected a session directory");
  const manifestPath = join(dir, "session.json");
  const manifestKind = await entryKind(fs, manifestPath);
  if (manifestKind === "symlink") {
    throw new TopologyError(manifestPath, "Session manifest may not be a symlink");
  }
  if (manifestKind !== undefined && manifestKind !== "file") {
    throw new TopologyError(manifestPath, "Session manifest is not a regular file");
  }
  const manifest = (await readRecord(fs, manifestPath, parseSessionManifest)).record;
  const id = manifest.session_id;
  if (basename(dir) !== id) {
    throw new TopologyError(
      dir,
      `Session manifest id ${JSON.stringify(id)} is not the directory name`,
    );
  }
  const previous = nodes.get(id);
  if (previous !== undefined) {
    throw new TopologyError(
      dir,
      `Duplicate session id ${JSON.stringify(id)} (also ${previous.dir})`,
    );
  }
  const physicalParent = parent?.sessionId ?? null;
  if (manifest.parent_session_id !== physicalParent) {
    throw new TopologyError(
      dir,
      `Session declares parent ${JSON.stringify(manifest.parent_session_id)} but its physical ` +
        `parent is ${JSON.stringify(physicalParent)}`,
    );
  }
  const rootSessionId = parent?.rootSessionId ?? id;
  const depth = parent === null ? 0 : parent.depth + 1;
  if (manifest.schema_version === 2) {
    if (manifest.root_session_id !== rootSessionId) {
      throw new TopologyError(
        dir,
        `Session declares root ${manifest.root_session_id}, expected ${rootSessionId}`,
      );
    }
    if (manifest.depth !== depth) {
      throw new TopologyError(dir, `Session declares depth ${manifest.depth}, expected ${depth}`);
    }
  }
  await checkParentManifest(fs, dir, parent);

  const childrenDir = join(dir, CHILDREN_DIRNAME);
  const childrenKind = await entryKind(fs, childrenDir);
  const childDirs: string[] = [];
  if (childrenKind === "symlink") {
    throw new TopologyError(childrenDir, "Session children directory may not be a symlink");
  }
  if (childrenKind !== undefined && childrenKind !== "directory") {
    throw new TopologyError(childrenDir, "Session children path is not a directory");
  }
  if (childrenKind === "directory") {
    for (const entry of await fs.readDir(childrenDir)) {
      if (entry.name.startsWith(STAGING_PREFIX)) continue;
      const childDir = join(childrenDir, entry.name);
      if (entry.kind === "symlink") {
        throw new TopologyError(childDir, "Session topology may not use a symlink");
      }
      if (entry.kind !== "directory") continue;
      const childManifest = join(childDir, "session.json");
      const childManifestKind = await entryKind(fs, childManifest);
      if (childManifestKind === "symlink") {
        throw new TopologyError(childManifest, "Session manifest may not be a symlink");
      }
      if (childManifestKind === undefined) continue;
      if (childManifestKind !== "file") {
        throw new TopologyError(childManifest, "Session manifest is not a regular file");
      }
      childDirs.push(childDir);
    }
  }
  const node: SessionNode = {
    sessionId: id,
    dir,
    parentSessionId: physicalParent,
    rootSessionId,
    depth,
    layout: manifestLayout(manifest),
    manifest,
    childIds: childDirs.map((childDir) => basename(childDir)),
  };
  nodes.set(id, node);
  for (const childDir of childDirs) await scanNode(fs, childDir, node, nodes);
}

async function checkParentManifest(
  fs: FileSystem,
  dir: string,
  parent: SessionNode | null,
): Promise<void> {
  const path = join(dir, "parent.json");
  const kind = await entryKind(fs, path);
  if (parent === null) {
    if (kind !== undefined) {
      throw new TopologyError(path, "A root session must not contain parent.json");
    }
    return;
  }
  // Optional in a child (see the module doc): its nesting names its parent.
  if (kind === undefined) return;
  if (kind === "symlink") throw new TopologyError(path, "Parent manifest may not be a symlink");
  if (kind !== "file") throw new TopologyError(path, "Parent manifest is not a regular file");
  const manifest = (await readRecord(fs, path, parseParentManifest)).record;
  if (manifest.parent_session_id !== parent.sessionId) {
    throw new TopologyError(path, "Parent manifest contradicts the session topology");
  }
  const relative = manifest.parent_relative_path;
  if (isAbsolute(relative) || normalize(join(dir, relative)) !== dirname(dirname(dir))) {
    throw new TopologyError(path, "parent_relative_path does not identify the physical parent");
  }
}

/**
 * True when the directory tree under `dir` (a directory holding a `session.json` entry)
 * physically holds a session dir named `id`: `dir` itself, or, through `children/`, a directory
 * holding a `session.json` entry (of any kind: a manifest of the wrong kind, a directory or a
 * symlink, still marks the session's directory, so the tree holding it is reported as invalid
 * rather than the id as unknown), or a symlink named `id` planted in place of one (never
 * followed: the scan refuses it). Directories without one are not sessions and are not entered,
 * as the tree's own scan does not enter them.
 */
async function physicallyContains(fs: FileSystem, dir: string, id: string): Promise<boolean> {
  if (basename(dir) === id) return true;
  const childrenDir = join(dir, CHILDREN_DIRNAME);
  if ((await entryKind(fs, childrenDir)) !== "directory") return false;
  for (const entry of await fs.readDir(childrenDir)) {
    if (entry.name.startsWith(STAGING_PREFIX)) continue;
    // A link in place of the session's directory marks it too (never followed), as at the top.
    if (entry.kind === "symlink" && entry.name === id) return true;
    if (entry.kind !== "directory") continue;
    const child = join(childrenDir, entry.name);
    if ((await entryKind(fs, join(child, "session.json"))) === undefined) continue;
    if (await physicallyContains(fs, child, id)) return true;
  }
  return false;
}

/**
 * Whether the tree under `topDir`, one that could not be loaded, physically holds `id`: `"yes"`,
 * `"no"`, or `"maybe"` when a storage error stops the walk (a directory it may not read, a path
 * nested past what the filesystem takes): the id cannot be ruled out, and the tree's error is
 * the one to report when no other tree holds it.
 */
async function mayContain(
  fs: FileSystem,
  topDir: string,
  id: string,
): Promise<"yes" | "no" | "maybe"> {
  try {
    return await physicallyContains(fs, topDir, id) ? "yes" : "no";
  } catch (error) {
    if (!(error instanceof FsError)) throw error;
    return "maybe";
  }
}

async function scanTree(fs: FileSystem, topDir: string): Promise<Map<string, SessionNode>> {
  const nodes = new Map<string, SessionNode>();
  await scanNode(fs, topDir, null, nodes);
  return nodes;
}

/**
 * Loads and validates the session tree that contains `sessionId`.
 *
 * Each root session is an independent run: a corrupt, unrelated tree does not make a healthy
 * one unavailable, so trees that do not physically contain the session are validated only to
 * rule out duplicate ids; one that cannot be read (a storage error: a directory it may not
 * read, children nested past what the filesystem's paths take) is left out, and its ids with
 * it. Throws `UnknownSessionError` when no tree holds the id, `TopologyError` when the tree
 * holding it is invalid (the cause is the first violation) or when the id exists in more than
 * one tree, and the storage error of a tree holding it that cannot be read.
 */
export async function loadSessionTree(
  fs: FileSystem,
  repoRoot: string,
  sessionId: string,
): Promise<SessionTree> {
  // An id no tree can hold (a path, a dot name, a control character) is refused before a file
  // is read.
  if (typeof sessionId !== "string" || !isSafeId(sessionId)) {
    throw new UnknownSessionError(String(sessionId));
  }
  const { repoRoot: canonical, sessionsRoot } = await sessionsRootOf(fs, repoRoot);
  if (sessionsRoot === undefined) throw new UnknownSessionError(sessionId);
  const valid: Map<string, SessionNode>[] = [];
  let selected: Map<string, SessionNode> | undefined;
  let invalid: { readonly dir: string; readonly error: unknown } | undefined;
  // A tree that could not be loaded nor ruled out (a storage error stopped its walk).
  let unknown: { readonly dir: string; readonly error: unknown } | undefined;
  for (const entry of await fs.readDir(sessionsRoot)) {
    if (entry.name.startsWith(".")) continue;
    const topDir = join(sessionsRoot, entry.name);
    if (entry.kind === "symlink") {
      if (entry.name === sessionId) {
        throw new TopologyError(topDir, "Session topology may not use a symlink");
      }
      continue;
    }
    if (entry.kind !== "directory") continue;
    let nodes: Map<string, SessionNode>;
    try {
      if ((await entryKind(fs, join(topDir, "session.json"))) === undefined) continue;
      nodes = await scanTree(fs, topDir);
    } catch (error) {
      if (
        !(error instanceof TopologyError || error instanceof LayoutRecordError ||
          error instanceof FsError)
      ) throw error;
      // An invalid or unreadable tree matters only when it is the one holding the session asked
      // for; one that may hold it, only when no other does.
      if (invalid === undefined) {
        const holds = await mayContain(fs, topDir, sessionId);
        if (holds === "yes") invalid = { dir: topDir, error };
        else if (holds === "maybe") unknown ??= { dir: topDir, error };
      }
      continue;
    }
    valid.push(nodes);
    if (nodes.has(sessionId)) {
      if (selected !== undefined) {
        throw new TopologyError(
          topDir,
          `Duplicate session id ${JSON.stringify(sessionId)} in two trees`,
        );
      }
      selected = nodes;
    }
  }
  if (selected === undefined) {
    invalid ??= unknown;
    // A storage error of the tree holding it (or that may hold it) is the caller's, as it was met.
    if (invalid?.error instanceof FsError) throw invalid.error;
    if (invalid !== undefined) {
      const detail = invalid.error instanceof Error ? invalid.error.message : String(invalid.error);
      throw new TopologyError(
        invalid.dir,
        `Session ${JSON.stringify(sessionId)} belongs to an invalid topology: ${detail}`,
        { cause: invalid.error },
      );
    }
    throw new UnknownSessionError(sessionId);
  }
  const elsewhere = new Set<string>();
  for (const other of valid) {
    if (other === selected) continue;
    for (const id of other.keys()) {
      elsewhere.add(id);
      if (selected.has(id)) {
        throw new TopologyError(
          other.get(id)?.dir ?? id,
          `Duplicate session id ${JSON.stringify(id)} in two trees`,
        );
      }
    }
  }
  const root = [...selected.values()].find((node) => node.parentSessionId === null);
  if (root === undefined) throw new TopologyError(sessionsRoot, "Session tree has no root");
  return new SessionTree(canonical, root.sessionId, selected, elsewhere);
}

/**
 * Reads and validates a session's `state.json`, which must be the session's own: a state whose
 * `session_id`, `active_session_id` or `root_session_id` names another session than the
 * directory's `session.json` records is a `LayoutRecordError` at that field (`assertStateOwner`).
 * `owner` is who `session.json` records (a `SessionNode` of a loaded tree is one); when it is not
 * given, `session.json` is read (a legacy v1 child's root, which it does not record, is then the
 * one its nesting gives, as the tree's scan derives it).
 */
export async function readSessionState(
  fs: FileSystem,
  sessionDir: string,
  owner?: StateOwner,
): Promise<SessionState> {
  fs = confined(fs, sessionDir);
  const file = join(sessionDir, "state.json");
  const state = (await readRecord(fs, file, parseSessionStateAsRead)).record;
  return await ownState(fs, sessionDir, state, owner);
}

/** `readSessionState`, or undefined when the session has no `state.json`. */
export async function readSessionStateIfExists(
  fs: FileSystem,
  sessionDir: string,
  owner?: StateOwner,
): Promise<SessionState | undefined> {
  fs = confined(fs, sessionDir);
  const file = join(sessionDir, "state.json");
  const state = (await readRecordIfExists(fs, file, parseSessionStateAsRead))?.record;
  return state === undefined ? undefined : await ownState(fs, sessionDir, state, owner);
}

/** `state`, read from `sessionDir`, once `assertStateOwner` accepted it for `owner`. */
async function ownState(
  fs: FileSystem,
  sessionDir: string,
  state: SessionState,
  owner: StateOwner | undefined,
): Promise<SessionState> {
  assertStateOwner(
    state,
    owner ?? stateOwnerAt(await readSessionManifest(fs, sessionDir), sessionDir),
    join(sessionDir, "state.json"),
  );
  return state;
}

/** The session that receives work in a tree, and what it is waiting on. */
export interface WorkingSession {
  /** The deepest live session. */
  readonly node: SessionNode;
  /** Its state. */
  readonly state: SessionState;
  /**
   * Set when the session's active child is terminal: record the child's outcome
   * (`recordChildOutcome`) before the session takes other work.
   */
  readonly terminalChild: SessionNode | undefined;
}

/**
 * Finds the only session of a tree that may receive work: walking down from the root along
 * `active_child_session_id` while the child is live. Returns `undefined` when the root is
 * terminal. An active child that is not a physical child of its parent is a `TopologyError`.
 */
export async function findWorkingSession(
  fs: FileSystem,
  tree: SessionTree,
): Promise<WorkingSession | undefined> {
  let node = tree.root;
  let state = await readSessionState(fs, node.dir, node);
  for (;;) {
    const phase = sessionPhase(state);
    if (phase === "terminal") return undefined;
    if (phase !== "suspended") return { node, state, terminalChild: undefined };
    const childId = state.active_child_session_id ?? "";
    const child = tree.get(childId);
    if (child === undefined || child.parentSessionId !== node.sessionId) {
      throw new TopologyError(
        join(node.dir, "state.json"),
        `Active child ${JSON.stringify(childId)} is not a published child of ${node.sessionId}`,
      );
    }
    const childState = await readSessionState(fs, child.dir, child);
    if (sessionPhase(childState) === "terminal") return { node, state, terminalChild: child };
    node = child;
    state = childState;
  }
}

/**
 * Throws `SessionStateError` unless `sessionId` is the deepest live session of its tree and is
 * not waiting for a finished child's outcome to be recorded.
 */
export async function assertReceivesWork(
  fs: FileSystem,
  tree: SessionTree,
  sessionId: string,
): Promise<void> {
  const working = await findWorkingSession(fs, tree);
  if (working === undefined) throw new SessionStateError(sessionId, "The session tree is terminal");
  if (working.node.sessionId !== sessionId) {
    throw new SessionStateError(
      sessionId,
      `Only the deepest live session receives work; that is ${working.node.sessionId}`,
    );
  }
  if (working.terminalChild !== undefined) {
    throw new SessionStateError(
      sessionId,
      `Record the outcome of finished child ${working.terminalChild.sessionId} first`,
    );
  }
}

/**
 * Lists the top-level root session ids of a repository: the published (non-staging) entries of
 * `sessions/` that are directories holding a `session.json`, and those that claim to be one but
 * `loadSessionTree` refuses (the entry or its `session.json` a symlink, a `session.json` that is
 * not a regular file), so that a caller listing trees reports such a tree instead of missing it.
 * Nothing is read through a link. `TopologyError` when `.loopy_loop/` or its `sessions/` is a
 * symlink or not a directory.
 */
export async function listRootSessionIds(fs: FileSystem, repoRoot: string): Promise<string[]> {
  const out: string[] = [];
  // Never through a link: `.loopy_loop/` and `sessions/` are checked as the tree's loader does.
  const { sessionsRoot } = await sessionsRootOf(fs, repoRoot);
  if (sessionsRoot === undefined) return out;
  for (const entry of await readDirIfExists(fs, sessionsRoot)) {
    if (entry.name.startsWith(".")) continue;
    if (entry.kind === "symlink") out.push(entry.name);
    else if (entry.kind !== "directory") continue;
    else if ((await entryKind(fs, join(sessionsRoot, entry.name, "session.json"))) !== undefined) {
      out.push(entry.name);
    }
  }
  return out;
}
