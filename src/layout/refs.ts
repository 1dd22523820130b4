/**
 * `LogicalReferenceResolver`: turns durable logical references (`repo:/…`, `session:/…`,
 * `root:/…`, `parent:/…`, `session:<id>:/…`, and `trace:<manifest_id>:/…` for mirror sessions
 * only) into confined absolute paths of one validated session tree.
 *
 * Order of checks, so that bad input reaches nothing:
 * 1. the grammar (pure: no file is touched when it fails);
 * 2. the scope against the validated topology (in memory: unknown session ids, `parent:` at a
 *    root and `trace:` in a folded session are refused without touching a file);
 * 3. the path, one component at a time with `lstat`.
 *
 * Symlinks: this library refuses a symlink at any component between the scope root and the
 * target, the target included, and along the chain of session directories above the scope root.
 * This is stricter than the engine (which allows links that stay inside the scope): no link found
 * on the way is ever followed. The check is made with `lstat` before the path is used, and the
 * port opens a path from the root: a directory on the way swapped for a link between the check
 * and the use is not seen by the check (`readFileNoFollow` refuses only a link at the last
 * component). Where the bytes of a target are frozen (a child's declared inputs), the reference
 * is resolved again once they are read, so a swap that lasts through the read is refused.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { FsError, NotADirectory, NotFound } from "../port/errors.ts";
import { join, relativeWithin } from "../port/path.ts";
import { LayoutRecordError, LogicalReferenceError, TopologyError } from "./errors.ts";
import { decodeJson, readRecord, recordBytes } from "./json_io.ts";
import { chainKind, isPruningName, RAW_ATTEMPT_NAME } from "./loopy_root.ts";
import {
  CHILDREN_DIRNAME,
  LOOPY_DIRNAME,
  mirrorAttemptTraceDir,
  repositoryPaths,
  type SessionLayout,
  SESSIONS_DIRNAME,
} from "./paths.ts";
import { manifestLayout, parseSessionManifest } from "./records.ts";
import { type LogicalScope, type ParsedReference, parseLogicalReference } from "./ref_grammar.ts";
import {
  recordedTraces,
  scanTraceManifests,
  TRACE_MANIFEST_FILENAME,
  traceManifestId,
} from "./traces.ts";
import { loadSessionTree, type SessionNode, type SessionTree } from "./tree.ts";
import { traceManifestIdField } from "./_trace_id.ts";

/**
 * Whether a resolved target is there: `present`, `absent`, or `pruned` — absent inside prunable
 * raw output (a folded session's `raw/<NNNN>_<workflow>/…`, or a mirror trace that durable
 * records name but the traces tree no longer holds). A pruned target is not an error of the
 * session: the durable tree that cites it is intact. A mirror session has no `raw/` area (its raw
 * output is the traces tree), so a target in its `raw/` is `present` or `absent`, as anywhere
 * else in its durable tree.
 */
export type ReferenceStatus = "present" | "absent" | "pruned";

/** A resolved logical reference. */
export interface ResolvedReference {
  /** The reference as given. */
  readonly reference: string;
  /**
   * The same target named from anywhere in the tree, identical for every spelling of it:
   * `session:<id>:/…` of the deepest session of the tree that physically contains the target,
   * else `repo:/…` (or `trace:<id>:/…`). It may be longer than the reference given (whose
   * length alone is limited).
   */
  readonly canonical: string;
  /** The confined absolute path. */
  readonly path: string;
  /** The root of the reference's scope (the path is this or below it). */
  readonly scopeRoot: string;
  /** False when the target, or a directory on the way to it, is absent. */
  readonly exists: boolean;
  /** The target's kind when it exists (never `symlink`: links are refused). */
  readonly kind: "file" | "directory" | "other" | undefined;
  /** `present`, `absent`, or `pruned` (absent in prunable raw output); see `ReferenceStatus`. */
  readonly status: ReferenceStatus;
}

/** The session that physically holds a reference's target (see `LogicalReferenceResolver.holder`). */
export interface ReferenceHolder {
  /** The session's id (its directory's name). */
  readonly sessionId: string;
  /** The session directory. */
  readonly dir: string;
  /** The layout its `session.json` records. */
  readonly layout: SessionLayout;
  /** The target's path relative to the session directory (`""` for the directory itself). */
  readonly relative: string;
  /** True when the session is in the resolver's validated tree. */
  readonly inTree: boolean;
}

/** Options of `LogicalReferenceResolver.forSession`. */
export interface ResolverOptions {
  /** The repository root. */
  readonly repoRoot: string;
  /** The current session (the meaning of `session:/`, `root:/`, `parent:/`). */
  readonly sessionId: string;
}

/**
 * Resolves logical references for one session of a validated tree.
 *
 * @example Resolve a session reference
 * ```ts
 * import { createRootSession, LogicalReferenceResolver } from "@loop/sessions/layout";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * await fs.mkdir("/repo");
 * const root = await createRootSession(fs, {
 *   repoRoot: "/repo",
 *   goal: "Write the docs",
 *   workflowSet: "main",
 *   workflowContract: {},
 *   workflowRoster: {},
 *   harnessCapabilityRoster: {},
 * });
 * const resolver = await LogicalReferenceResolver.forSession(fs, {
 *   repoRoot: "/repo",
 *   sessionId: root.sessionId,
 * });
 * const plan = await resolver.resolve("session:/project_state/plan.md");
 * if (plan.path !== `${root.dir}/project_state/plan.md`) throw new Error("unexpected path");
 * if (!plan.exists) throw new Error("unexpected result");
 * const raw = await resolver.resolve("session:/raw/0001_outer");
 * if (raw.exists) throw new Error("a raw directory that was never written is absent");
 * ```
 */
export class LogicalReferenceResolver {
  /** The filesystem. */
  readonly fs: FileSystem;
  /** The validated tree. */
  readonly tree: SessionTree;
  /** The current session. */
  readonly current: SessionNode;

  /** Creates a resolver for `sessionId` of an already validated tree. */
  constructor(fs: FileSystem, tree: SessionTree, sessionId: string) {
    this.fs = fs;
    this.tree = tree;
    this.current = tree.require(sessionId);
  }

  /** Validates the tree containing `sessionId` and returns a resolver for it. */
  static async forSession(
    fs: FileSystem,
    options: ResolverOptions,
  ): Promise<LogicalReferenceResolver> {
    const tree = await loadSessionTree(fs, options.repoRoot, options.sessionId);
    return new LogicalReferenceResolver(fs, tree, options.sessionId);
  }

  /** The canonical repository root. */
  get repoRoot(): string {
    return this.tree.repoRoot;
  }

  /** The layout of the current session. */
  get layout(): SessionLayout {
    return this.current.layout;
  }

  /**
   * Resolves a reference to a confined absolute path. An absent target is not an error: the
   * result says `exists: false`, with `status: "pruned"` when it lies in prunable raw output (a
   * folded session's `raw/<NNNN>_<workflow>/…`, as the layout its `session.json` records says,
   * a session of this tree or, through `repo:/…`, of another tree of the repository; or a mirror
   * trace that was pruned) and `"absent"` otherwise (a file not written yet, or anything in a
   * mirror session's `raw/`). Refusals are `LogicalReferenceError`s: a symlink planted on the
   * path is refused (reason `symlink`), and so is a path the filesystem finds too long
   * (`ENAMETOOLONG`, which the scope's root can make of a reference within the grammar's limit:
   * reason `grammar`, the storage error as its `cause`). On a case-insensitive filesystem a name
   * that decides where the target is (`raw`, `children`, a session id, ...) spelled in other
   * letter case is classified, and returned, as its directory lists it. A `trace:` reference to a
   * trace whose directory is still there but whose `trace_manifest.json` is missing, unreadable
   * or carries another id is a `LayoutRecordError` naming that manifest (it is not pruned).
   */
  async resolve(reference: string): Promise<ResolvedReference> {
    // The length limits apply to the text the caller passed, never to a derived spelling.
    const parsed = parseLogicalReference(reference);
    const scope = await this.#scope(parsed);
    try {
      return await this.#resolveIn(reference, parsed, scope);
    } catch (error) {
      throw referencePathError(reference, error);
    }
  }

  /** `resolve` of `parsed` in its checked `scope` (see `resolve`). */
  async #resolveIn(
    reference: string,
    parsed: ParsedReference,
    scope: ReferenceScope,
  ): Promise<ResolvedReference> {
    const segments = scope.canonicalScope === "trace"
      ? parsed.segments
      : await this.#listedSpelling(scope.root, parsed.segments);
    // Classified by where the target physically is, so every spelling of it (repo:/…,
    // session:/children/<id>/…, session:<id>:/…, root:/…, parent:/…) gets the same answer.
    const target = join(scope.root, ...segments);
    let place = this.#place(target, scope);
    if (place.elsewhere) {
      // A session of another tree may hold it (found as `holder` finds it): a folded one's raw
      // output is prunable there too, as the layout its session.json records says.
      const holder = await this.#holderElsewhere(target);
      if (holder !== undefined) place = { ...place, ...rawPlace(holder.layout, holder.relative) };
    }
    let path = scope.root;
    let exists = !place.renamedAway && scope.exists;
    let kind: ResolvedReference["kind"] = exists ? "directory" : undefined;
    for (const [index, segment] of segments.entries()) {
      path = join(path, segment);
      if (!exists) continue;
      let found: string;
      try {
        found = (await this.fs.lstat(path)).kind;
      } catch (error) {
        if (!(error instanceof NotFound)) throw error;
        exists = false;
        kind = undefined;
        continue;
      }
      if (found === "symlink") {
        throw new LogicalReferenceError(
          reference,
          "symlink",
          `Logical reference passes through a symlink at ${path}`,
        );
      }
      const last = index === segments.length - 1;
      if (!last && found !== "directory") {
        exists = false;
        kind = undefined;
        continue;
      }
      kind = found === "file" || found === "directory" ? found : "other";
    }
    return {
      reference,
      canonical: place.canonical,
      path,
      scopeRoot: scope.root,
      exists,
      kind,
      status: exists ? "present" : place.prunable ? "pruned" : "absent",
    };
  }

  /**
   * Where the absolute `path` (at or below the scope's root) physically is: the deepest session
   * of the tree whose directory contains it, else the repository (or the trace, for `trace:`).
   * Gives the canonical reference, whether the target lies in prunable raw output (a folded
   * session's `raw/<NNNN>_<workflow>/…`, the mirror `traces/` tree or its outbox), and whether a
   * prune has renamed it away (`.pruning-*` where prune renames entries: such an entry is already
   * gone). `elsewhere` is true when no session of the tree holds it (a session of another tree
   * may: see `#holderElsewhere`). Pure.
   */
  #place(
    path: string,
    scope: Pick<ReferenceScope, "canonicalScope" | "canonicalId" | "root" | "pruned">,
  ): ReferencePlace {
    if (scope.canonicalScope === "trace") {
      return {
        canonical: canonicalReference(
          "trace",
          scope.canonicalId,
          relativeWithin(scope.root, path) ?? "",
        ),
        prunable: scope.pruned,
        renamedAway: false,
        elsewhere: false,
      };
    }
    let owner: SessionNode | undefined;
    let ownerRelative = "";
    for (const node of this.tree.nodes.values()) {
      const relative = relativeWithin(node.dir, path);
      if (relative === undefined) continue;
      if (owner === undefined || node.dir.length > owner.dir.length) {
        owner = node;
        ownerRelative = relative;
      }
    }
    if (owner !== undefined) {
      return {
        canonical: canonicalReference("session", owner.sessionId, ownerRelative),
        ...rawPlace(owner.layout, ownerRelative),
        elsewhere: false,
      };
    }
    const relative = relativeWithin(this.tree.repoRoot, path) ?? "";
    const segments = relative === "" ? [] : relative.split("/");
    // The mirror traces tree and its outbox hold only prunable output; prune renames entries
    // aside as `.pruning-*` in `traces/`, `traces/<root>/sessions/` and the outbox.
    const mirror = segments[0] === LOOPY_DIRNAME && segments.length >= 3 &&
      (segments[1] === "traces" || segments[1] === "trace_finalization_outbox");
    const renamed = (index: number): boolean => isPruningName(segments[index] ?? "");
    return {
      canonical: canonicalReference("repo", undefined, relative),
      prunable: mirror,
      renamedAway: mirror &&
        (renamed(2) || (segments[1] === "traces" && segments[3] === "sessions" && renamed(4))),
      elsewhere: true,
    };
  }

  /** Like `resolve`, but an absent target is a `LogicalReferenceError` with reason `absent`. */
  async resolveExisting(reference: string): Promise<string> {
    const resolved = await this.resolve(reference);
    if (!resolved.exists) {
      throw new LogicalReferenceError(reference, "absent", "Logical reference target is absent");
    }
    return resolved.path;
  }

  /**
   * The same reference named so it means the same target from any session of the tree, the
   * same way `resolve` names it: a target inside a session of the tree becomes
   * `session:<id>:/…` of the deepest session that physically contains it (whatever the
   * spelling: `repo:/…`, `session:/children/<id>/…`, `root:/…`, `parent:/…`), anything else
   * `repo:/…`. Touches no file, so a name is classified as spelled (where `resolve` and `holder`
   * use the spelling a case-insensitive filesystem's directory lists). The canonical form may be
   * longer than the reference given.
   */
  canonicalize(reference: string): string {
    const parsed = parseLogicalReference(reference);
    if (parsed.scope === "trace") {
      this.#requireMirror(parsed);
      return reference;
    }
    const node = this.#sessionScope(parsed);
    const root = node === undefined ? this.tree.repoRoot : node.dir;
    return this.#place(join(root, ...parsed.segments), {
      canonicalScope: node === undefined ? "repo" : "session",
      canonicalId: node?.sessionId,
      root,
      pruned: false,
    }).canonical;
  }

  /**
   * The session that physically holds the target of `reference` (a `repo:/…` spelling of a
   * session's file included), or `undefined` when no session does (a repository file, a mirror
   * trace). The deepest session of this tree whose directory contains the target, as `resolve`
   * classifies it (names spelled as a case-insensitive filesystem lists them); for a target under
   * `.loopy_loop/sessions/` outside this tree, the deepest directory on its way (a top-level
   * session, then `children/<id>/` nesting) that holds a valid `session.json`, never passing a
   * symlink. Refusals are those of `canonicalize` (`trace:` in a folded session, an unknown
   * session id, `parent:/` at a root), and a path the filesystem finds too long, as `resolve`
   * refuses it (a `LogicalReferenceError` with reason `grammar`).
   */
  async holder(reference: string): Promise<ReferenceHolder | undefined> {
    const parsed = parseLogicalReference(reference);
    if (parsed.scope === "trace") {
      this.#requireMirror(parsed);
      return undefined;
    }
    const node = this.#sessionScope(parsed);
    const base = node === undefined ? this.tree.repoRoot : node.dir;
    try {
      const path = join(base, ...await this.#listedSpelling(base, parsed.segments));
      return this.#holderInTree(path) ?? await this.#holderElsewhere(path);
    } catch (error) {
      throw referencePathError(reference, error);
    }
  }

  /** The deepest session of this tree whose directory contains `path`, if any. Pure. */
  #holderInTree(path: string): ReferenceHolder | undefined {
    let owner: SessionNode | undefined;
    for (const candidate of this.tree.nodes.values()) {
      if (relativeWithin(candidate.dir, path) === undefined) continue;
      if (owner === undefined || candidate.dir.length > owner.dir.length) owner = candidate;
    }
    if (owner === undefined) return undefined;
    return {
      sessionId: owner.sessionId,
      dir: owner.dir,
      layout: owner.layout,
      relative: relativeWithin(owner.dir, path) ?? "",
      inTree: true,
    };
  }

  /**
   * The session of another tree of the repository that holds `path` (under
   * `.loopy_loop/sessions/`, spelled as listed): the deepest directory on its way (a top-level
   * session, then `children/<id>/` nesting) that holds a valid `session.json`, never passing a
   * symlink; `undefined` when there is none.
   */
  async #holderElsewhere(path: string): Promise<ReferenceHolder | undefined> {
    // Another tree of the repository: its sessions are found the way the topology nests them.
    const relative = relativeWithin(this.tree.repoRoot, path) ?? "";
    const segments = relative === "" ? [] : relative.split("/");
    if (segments[0] !== LOOPY_DIRNAME || segments[1] !== SESSIONS_DIRNAME) return undefined;
    let found: ReferenceHolder | undefined;
    let dir = join(this.tree.repoRoot, LOOPY_DIRNAME, SESSIONS_DIRNAME);
    if ((await this.#kind(dir)) !== "directory") return undefined;
    for (let index = 2; index < segments.length;) {
      const name = segments[index] as string;
      if (name.startsWith(".")) break;
      dir = join(dir, name);
      const layout = await this.#sessionLayoutAt(dir);
      if (layout === undefined) break;
      const rest = segments.slice(index + 1);
      found = { sessionId: name, dir, layout, relative: rest.join("/"), inTree: false };
      if (rest[0] !== CHILDREN_DIRNAME || rest.length < 2) break;
      dir = join(dir, CHILDREN_DIRNAME);
      if ((await this.#kind(dir)) !== "directory") break;
      index += 2;
    }
    return found;
  }

  /**
   * `segments` below `base`, each name that decides where a target is (`raw`, `children`,
   * `.loopy_loop`, `sessions`, `traces`, `trace_finalization_outbox`, `delivery_receipts`, a
   * session id of this tree) spelled as its directory lists it when the reference spells it in
   * other letter case and the filesystem reaches the listed entry through that spelling (a
   * case-insensitive filesystem).
   * A name spelled exactly, or one that no such name folds to, costs no call; on a case-sensitive
   * filesystem the other spelling is another (absent or real) entry and is kept.
   */
  async #listedSpelling(base: string, segments: readonly string[]): Promise<readonly string[]> {
    const placement = this.#placementNames();
    let out: string[] | undefined;
    let dir = base;
    for (const [index, segment] of segments.entries()) {
      let name = segment;
      const folded = placement.get(segment.toLowerCase());
      // Only a directory reached without a link is listed (a link on the way is refused by the
      // caller's own walk, and nothing is read through one).
      if (
        folded !== undefined && !folded.has(segment) &&
        (await chainKind(this.fs, base, dir)) === "directory"
      ) {
        name = await this.#listedName(dir, segment);
        if (name !== segment) (out ??= [...segments])[index] = name;
      }
      dir = join(dir, name);
    }
    return out ?? segments;
  }

  #placement: ReadonlyMap<string, ReadonlySet<string>> | undefined;

  /** The names that decide where a target is, by their lowercase form. */
  #placementNames(): ReadonlyMap<string, ReadonlySet<string>> {
    if (this.#placement !== undefined) return this.#placement;
    const names = new Map<string, Set<string>>();
    const fixed = [
      "raw",
      CHILDREN_DIRNAME,
      LOOPY_DIRNAME,
      SESSIONS_DIRNAME,
      "traces",
      "trace_finalization_outbox",
      "delivery_receipts",
    ];
    for (const name of [...fixed, ...this.tree.nodes.keys()]) {
      const folded = name.toLowerCase();
      const spellings = names.get(folded) ?? new Set<string>();
      spellings.add(name);
      names.set(folded, spellings);
    }
    this.#placement = names;
    return names;
  }

  /**
   * The entry of `dir` that `segment` reaches: `segment` itself when `dir` lists it (or cannot be
   * listed), else the one entry that `dir` lists in other letter case when `segment` reaches an
   * entry at all (`lstat`), else `segment`.
   */
  async #listedName(dir: string, segment: string): Promise<string> {
    let entries;
    try {
      entries = await this.fs.readDir(dir);
    } catch (error) {
      if (error instanceof NotFound || error instanceof NotADirectory) return segment;
      throw error;
    }
    if (entries.some((entry) => entry.name === segment)) return segment;
    const folded = segment.toLowerCase();
    const matches = entries.filter((entry) => entry.name.toLowerCase() === folded);
    if (matches.length !== 1) return segment;
    return (await this.#kind(join(dir, segment))) === undefined
      ? segment
      : (matches[0] as { readonly name: string }).name;
  }

  /** The kind of `path` itself (`lstat`), `undefined` when absent. */
  async #kind(path: string): Promise<string | undefined> {
    try {
      return (await this.fs.lstat(path)).kind;
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      throw error;
    }
  }

  /** The layout of the session at `dir` (a real directory with a valid `session.json`), if any. */
  async #sessionLayoutAt(dir: string): Promise<SessionLayout | undefined> {
    if ((await this.#kind(dir)) !== "directory") return undefined;
    const manifest = join(dir, "session.json");
    if ((await this.#kind(manifest)) !== "file") return undefined;
    try {
      return manifestLayout((await readRecord(this.fs, manifest, parseSessionManifest)).record);
    } catch (error) {
      if (error instanceof LayoutRecordError || error instanceof NotFound) return undefined;
      throw error;
    }
  }

  #requireMirror(parsed: ParsedReference): void {
    if (this.current.layout !== "mirror") {
      throw new LogicalReferenceError(
        parsed.reference,
        "mirror_only",
        "trace: references exist only in mirror sessions; a folded session cites session:/raw/…",
      );
    }
  }

  /** The session a parsed non-trace reference is relative to (`undefined` for `repo:`). */
  #sessionScope(parsed: ParsedReference): SessionNode | undefined {
    switch (parsed.scope) {
      case "repo":
        return undefined;
      case "root":
        return this.tree.root;
      case "parent": {
        const parentId = this.current.parentSessionId;
        if (parentId === null) {
          throw new LogicalReferenceError(
            parsed.reference,
            "no_parent",
            "parent:/ is undefined for a root session",
          );
        }
        return this.tree.require(parentId);
      }
      case "session": {
        if (parsed.id === undefined) return this.current;
        const node = this.tree.get(parsed.id);
        if (node === undefined) {
          throw new LogicalReferenceError(
            parsed.reference,
            "unknown_session",
            "Logical reference names a session that is not in this tree",
          );
        }
        return node;
      }
      default:
        throw new LogicalReferenceError(parsed.reference, "unknown_scope", "Unexpected scope");
    }
  }

  async #scope(parsed: ParsedReference): Promise<ReferenceScope> {
    if (parsed.scope === "trace") {
      this.#requireMirror(parsed);
      const trace = await this.#traceRoot(parsed);
      return {
        root: trace.dir,
        canonicalScope: "trace",
        canonicalId: parsed.id,
        exists: !trace.pruned,
        pruned: trace.pruned,
      };
    }
    const node = this.#sessionScope(parsed);
    if (node === undefined) {
      return {
        root: this.tree.repoRoot,
        canonicalScope: "repo",
        canonicalId: undefined,
        exists: true,
        pruned: false,
      };
    }
    await this.#checkChain(parsed.reference, node.dir);
    return {
      root: node.dir,
      canonicalScope: "session",
      canonicalId: node.sessionId,
      exists: true,
      pruned: false,
    };
  }

  /** Refuses a symlink (or a non-directory) anywhere between the repository root and `dir`. */
  async #checkChain(reference: string, dir: string): Promise<void> {
    const relative = relativeWithin(this.tree.repoRoot, dir);
    if (relative === undefined) {
      throw new TopologyError(dir, "Session directory is outside the repository root");
    }
    let path = this.tree.repoRoot;
    for (const segment of relative === "" ? [] : relative.split("/")) {
      path = join(path, segment);
      let kind: string;
      try {
        kind = (await this.fs.lstat(path)).kind;
      } catch (error) {
        if (!(error instanceof NotFound)) throw error;
        throw new TopologyError(path, "Session directory disappeared", { cause: error });
      }
      if (kind === "symlink") {
        throw new LogicalReferenceError(
          reference,
          "symlink",
          `Session directory chain passes through a symlink at ${path}`,
        );
      }
      if (kind !== "directory") throw new TopologyError(path, "Expected a directory");
    }
  }

  /**
   * The directory of trace manifest `id` of this tree (mirror sessions only), found through the
   * manifests in the attempts' trace directories under `.loopy_loop/traces/<root>/` (a manifest
   * anywhere else is not a trace and is skipped). Unreadable manifests are skipped; a symlinked
   * manifest is refused; two manifests with the id are a `TopologyError`. When no manifest has
   * the id but a session of the tree records it (a seal receipt or an iteration's
   * `trace_ref.json`), the trace was pruned when its conventional directory is gone (that
   * directory is returned as pruned); when the directory is still there, its manifest is broken
   * and a `LayoutRecordError` names it.
   */
  async #traceRoot(parsed: ParsedReference): Promise<{ dir: string; pruned: boolean }> {
    const id = parsed.id ?? "";
    const traces = repositoryPaths(this.tree.repoRoot).tracesRoot;
    let kind: string | undefined;
    try {
      kind = (await this.fs.lstat(traces)).kind;
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
    if (kind === "symlink") {
      throw new LogicalReferenceError(
        parsed.reference,
        "symlink",
        `The traces directory is a symlink at ${traces}`,
      );
    }
    const tracesRoot = join(traces, this.tree.rootSessionId);
    const found: string[] = [];
    const scanned = await scanTraceManifests(this.fs, traces, {
      rootSessionId: this.tree.rootSessionId,
    });
    for (const location of scanned) {
      // A manifest outside an attempt's trace directory is no trace (`traces list` reports it).
      if (location.directory === undefined) continue;
      if (location.manifestKind === "symlink") {
        throw new LogicalReferenceError(
          parsed.reference,
          "symlink",
          `Trace manifest is a symlink at ${location.manifestPath}`,
        );
      }
      if (location.manifestKind !== "file") continue;
      let manifest: unknown;
      try {
        // Read only as a regular file: one swapped for a FIFO is skipped, never waited on.
        const bytes = await recordBytes(this.fs, location.manifestPath, false) as Uint8Array;
        manifest = decodeJson(bytes, location.manifestPath);
      } catch (error) {
        if (error instanceof LayoutRecordError) continue;
        throw error;
      }
      if (traceManifestId(manifest) === id) found.push(location.traceDir);
    }
    if (found.length > 1) {
      throw new TopologyError(
        found[1] ?? tracesRoot,
        `Duplicate trace manifest id ${JSON.stringify(id)}`,
      );
    }
    const dir = found[0];
    if (dir !== undefined) return { dir, pruned: false };
    for (const node of this.tree.nodes.values()) {
      if (node.layout !== "mirror") continue;
      const recorded = (await recordedTraces(this.fs, node.dir, node.sessionId)).find((trace) =>
        trace.manifestId === id
      );
      if (recorded === undefined) continue;
      const conventional = mirrorAttemptTraceDir(
        this.tree.repoRoot,
        this.tree.rootSessionId,
        recorded.sessionId,
        recorded.attemptId,
      );
      const present = await chainKind(this.fs, traces, conventional);
      if (present === "symlink") {
        throw new LogicalReferenceError(
          parsed.reference,
          "symlink",
          `The pruned trace's directory passes through a symlink at ${conventional}`,
        );
      }
      // Pruned only when the trace's directory is gone: a directory still there whose manifest
      // did not give the id is a broken trace, and its files are not to be reported as pruned.
      if (present !== undefined) {
        throw await this.#unusableTraceManifest(conventional, id);
      }
      return { dir: conventional, pruned: true };
    }
    throw new LogicalReferenceError(
      parsed.reference,
      "unknown_trace",
      "Logical reference names no trace manifest of this tree",
    );
  }

  /**
   * Why the trace directory `traceDir`, which a session records for trace `id` and which is still
   * present, gave no manifest with the id: a `LayoutRecordError` naming its `trace_manifest.json`
   * (missing, not a regular file, under a trace directory that is a file, unreadable, or carrying
   * another id at `manifest_id`).
   */
  async #unusableTraceManifest(traceDir: string, id: string): Promise<LayoutRecordError> {
    const manifestPath = join(traceDir, TRACE_MANIFEST_FILENAME);
    let kind: string | undefined;
    try {
      kind = await this.#kind(manifestPath);
    } catch (error) {
      if (!(error instanceof NotADirectory)) throw error;
      return new LayoutRecordError(
        manifestPath,
        `Trace manifest of ${JSON.stringify(id)} cannot be read: its trace directory is not a ` +
          "directory",
        { cause: error },
      );
    }
    if (kind === undefined) {
      return new LayoutRecordError(
        manifestPath,
        `Trace manifest of ${JSON.stringify(id)} is missing while its trace directory is present`,
      );
    }
    if (kind !== "file") {
      return new LayoutRecordError(
        manifestPath,
        `Trace manifest of ${JSON.stringify(id)} is not a regular file (${kind})`,
      );
    }
    let manifest: unknown;
    try {
      // Read only as a regular file: one swapped for a FIFO is refused, never waited on.
      manifest = decodeJson(
        await recordBytes(this.fs, manifestPath, false) as Uint8Array,
        manifestPath,
      );
    } catch (error) {
      if (!(error instanceof LayoutRecordError)) throw error;
      return new LayoutRecordError(
        manifestPath,
        `Trace manifest of ${JSON.stringify(id)} is corrupt while its trace directory is present`,
        { cause: error },
      );
    }
    if (typeof manifest !== "object" || manifest === null || Array.isArray(manifest)) {
      return new LayoutRecordError(
        manifestPath,
        `Trace manifest of ${JSON.stringify(id)} is not a JSON object`,
      );
    }
    // Named at the key the id was read from, as a lookup reads it.
    const found = traceManifestIdField(manifest);
    const path = found?.key ?? "manifest_id";
    if (found?.id === id) {
      return new LayoutRecordError(
        manifestPath,
        `Trace manifest of ${JSON.stringify(id)} changed while the reference was resolved`,
        { path, value: found.id },
      );
    }
    return new LayoutRecordError(
      manifestPath,
      `Trace manifest in the directory of ${JSON.stringify(id)} carries another id`,
      { path, value: found?.id },
    );
  }
}

/** The scope of a reference, checked: its root directory and how the target is named. */
interface ReferenceScope {
  /** The scope's root directory (a session's, the repository's, or a trace's). */
  readonly root: string;
  /** The scope of the canonical form. */
  readonly canonicalScope: "repo" | "session" | "trace";
  /** The session or trace id of the canonical form (`undefined` for `repo`). */
  readonly canonicalId: string | undefined;
  /** False when the scope's root itself is gone (a pruned trace). */
  readonly exists: boolean;
  /** True for a pruned trace. */
  readonly pruned: boolean;
}

/** Where a target physically is (see `LogicalReferenceResolver.#place`). */
interface ReferencePlace {
  /** The canonical reference. */
  readonly canonical: string;
  /** True when the target lies in prunable raw output. */
  readonly prunable: boolean;
  /** True when a prune has renamed the target (or a directory above it) away. */
  readonly renamedAway: boolean;
  /** True when no session of the resolver's tree holds the target. */
  readonly elsewhere: boolean;
}

/**
 * Whether a target at `relative` (its path relative to the directory of the session holding it)
 * lies in that session's prunable raw output, `raw/<NNNN>_<workflow>/…` (the entries prune-raw
 * removes; it keeps any other entry of `raw/`), and whether a prune has renamed its entry away
 * (`raw/.pruning-*`). Only a folded session has a raw/ area (prune-raw leaves a mirror session's
 * raw/ alone), as `layout`, the layout its session.json records, says.
 */
function rawPlace(
  layout: SessionLayout,
  relative: string,
): { readonly prunable: boolean; readonly renamedAway: boolean } {
  const inside = relative === "" ? [] : relative.split("/");
  const entry = inside[1] ?? "";
  const inRaw = layout === "folded" && inside[0] === "raw" && inside.length >= 2;
  const renamedAway = inRaw && isPruningName(entry);
  return { prunable: renamedAway || (inRaw && RAW_ATTEMPT_NAME.test(entry)), renamedAway };
}

/**
 * `error`, or, when it is a filesystem's refusal of a path too long (`ENAMETOOLONG`) met on the
 * way to the target of `reference`, a `LogicalReferenceError` with reason `grammar` (the storage
 * error as its `cause`): the reference is within the grammar's limits, but the root of its scope
 * makes the path longer than the filesystem takes, so it names nothing that can exist.
 */
function referencePathError(reference: string, error: unknown): unknown {
  if (!(error instanceof FsError) || error.code !== "ENAMETOOLONG") return error;
  return new LogicalReferenceError(
    reference,
    "grammar",
    "Logical reference names a path too long for the filesystem",
    { cause: error },
  );
}

/**
 * Formats a canonical reference from parts that are already valid (a scope id and the segments
 * of a reference that passed the grammar, or of a path below a validated directory). Unlike
 * `formatLogicalReference` it does not apply the length limit: that limit is for the text a
 * caller passes, and a canonical spelling can be longer than it.
 */
function canonicalReference(
  scope: LogicalScope,
  id: string | undefined,
  relativePath: string,
): string {
  return id === undefined ? `${scope}:/${relativePath}` : `${scope}:${id}:/${relativePath}`;
}
