/**
 * `prune-raw`: deletes prunable mechanical noise and never a durable file (see `pruneRaw` for
 * what is removed, what is kept and how a crash is survived).
 *
 * @module
 */
import type { DirEntry, FileSystem } from "../port/fs.ts";
import { FsError, NotADirectory, NotFound, PermissionDenied } from "../port/errors.ts";
import { join, NAME_MAX_BYTES, utf8Prefix } from "../port/path.ts";
import { entryKind, isTempName, readDirIfExists } from "../port/durable.ts";
import { mapLimit } from "../port/limit.ts";
import { LayoutOptionError, LayoutRecordError, TopologyError } from "./errors.ts";
import { manifestLayout } from "./records.ts";
import { isSafeId } from "./ids.ts";
import {
  chainKind,
  isPruningName,
  isRefusedHere,
  type LoopyRoot,
  openLoopyRoot,
  PRUNING_PREFIX,
  RAW_ATTEMPT_NAME,
  type SessionDirEntry,
  walkSessionDirs,
} from "./loopy_root.ts";
import { iterationName, type SessionLayout } from "./paths.ts";
import {
  loadSessionTree,
  readSessionManifest,
  readSessionState,
  type SessionTree,
} from "./tree.ts";
import { serializedOn } from "./serial.ts";

/** What a pruned entry was. */
export type PruneKind =
  /** A raw attempt directory `<session>/raw/<NNNN>_<workflow>/`. */
  | "raw_attempt"
  /** A `.pruning-*` leftover of an interrupted prune. */
  | "pruning_leftover"
  /** A mirror trace tree (`traces/<root>/` or `traces/<root>/sessions/<id>/`). */
  | "legacy_traces"
  /** An entry of `trace_finalization_outbox/`. */
  | "finalization_outbox"
  /**
   * A temp file of an atomic replace that a crash interrupted (`.<name>.<random>.tmp`, the shape
   * every layout write stages its file under), older than `TEMP_LEFTOVER_AGE_MS`.
   */
  | "temp_leftover";

/** Why an entry was kept. */
export type PruneSkipReason =
  /** The entry (or the directory holding it) is a symlink: never followed, never removed. */
  | "symlink"
  /** A raw entry named like an attempt directory is not a directory. */
  | "not_a_directory"
  /** A raw entry is not named `<NNNN>_<workflow>`. */
  | "unrecognized_name"
  /** The entry's own modification time is within the age limit. */
  | "too_recent"
  /** The session is running this attempt (or, for mirror traces, an attempt of the tree). */
  | "running_attempt"
  /** The session's `state.json` cannot be read, so what is running is unknown. */
  | "state_unreadable"
  /**
   * The session's `session.json` records the mirror layout, which has no prunable `raw/`: its
   * `raw/` directory is kept whole.
   */
  | "mirror_layout"
  /**
   * The session's `session.json` cannot be read (or names another session), so its layout is
   * unknown: its `raw/` directory is kept whole. For a directory where a session would be: it has
   * no regular `session.json` (or the filesystem refuses to show it, or its `children/`), so
   * nothing below it is pruned. For a mirror trace tree: a session of the tree cannot be
   * identified (such a directory, or one behind a symlink), so what runs is unknown and the
   * tree's traces are kept.
   */
  | "manifest_unreadable"
  /**
   * The entry's tree cannot be read to measure it (a path in it too long to reach, a directory in
   * it that cannot be listed), or the directory itself cannot be listed (a `raw/`, `traces/` or the
   * finalization outbox): it is kept, and the detail names the error.
   */
  | "unreadable"
  /**
   * The entry was moved aside to a hidden `.pruning-*` name (which counts as gone for readers)
   * but removing its tree failed, or the filesystem refused to move it aside (it is then whole
   * at its name); the detail names that path and the error, and the next prune of the same kind
   * tries again (for `traces/` and the finalization outbox, a `legacyTraces` prune).
   */
  | "remove_failed"
  /** The entry disappeared while pruning (another prune removed it). */
  | "vanished";

/** An entry that was (or, in a dry run, would be) removed. */
export interface PrunedEntry {
  /** The entry's path (absolute). */
  readonly path: string;
  /** The bytes of the regular files in it. */
  readonly bytes: number;
  /** What it was. */
  readonly kind: PruneKind;
  /** The session it belonged to, when known. */
  readonly sessionId: string | null;
}

/** An entry that was kept, and why. */
export interface PruneSkip {
  /** The entry's path (absolute). */
  readonly path: string;
  /** Why it was kept. */
  readonly reason: PruneSkipReason;
  /** The reason in words. */
  readonly detail: string;
}

/** What `pruneRaw` did (or, with `dryRun`, would do). */
export interface PruneReport {
  /** The entries removed, in the order they were planned. */
  readonly removed: readonly PrunedEntry[];
  /**
   * The entries kept, with the reason: those the plan kept, then (not in a dry run) those found
   * to keep while removing, each in the order they were planned.
   */
  readonly skipped: readonly PruneSkip[];
  /** `removed.length`. */
  readonly count: number;
  /** The total bytes removed. */
  readonly bytes: number;
  /** True when nothing was changed. */
  readonly dryRun: boolean;
}

/** Options of `pruneRaw`. */
export interface PruneRawOptions {
  /** Remove only entries whose own modification time is at least this many days old. */
  readonly olderThanDays?: number | undefined;
  /**
   * Prune only this session's raw output (and with `legacyTraces` its mirror traces), not its
   * children's, which have ids of their own; the finalization outbox is then left as it is.
   */
  readonly sessionId?: string | undefined;
  /** Also remove the mirror layout's `traces/` tree and finalization outbox. */
  readonly legacyTraces?: boolean | undefined;
  /** Plan and report without changing anything. */
  readonly dryRun?: boolean | undefined;
  /** The clock the age limit is measured from; default `() => new Date()`. */
  readonly now?: (() => Date) | undefined;
  /**
   * Called while removing: first with `(0, total)`, then after each planned entry is handled
   * (removed, or found gone). Not called by a dry run.
   */
  readonly onProgress?: ((done: number, total: number) => void) | undefined;
}

const DAY_MS = 86_400_000;

/**
 * How old (by its modification time) a temp file of an atomic replace must be before prune-raw
 * removes it: one hour. A layout write holds its temp file for the milliseconds between creating
 * and renaming it, so one that old was left by a process that stopped; removing a younger one
 * could make a write still in flight fail.
 */
export const TEMP_LEFTOVER_AGE_MS = 3_600_000;

/**
 * What must still not be running when a planned entry is removed: a raw attempt directory of one
 * session, or a mirror trace tree of sessions that must all be idle.
 */
type Guard =
  | { readonly kind: "raw"; readonly sessionDir: string }
  | { readonly kind: "idle"; readonly sessions: readonly SessionDirEntry[] };

interface Target {
  readonly path: string;
  readonly parent: string;
  readonly name: string;
  readonly kind: PruneKind;
  readonly sessionId: string | null;
  readonly isDirectory: boolean;
  readonly bytes: number;
  readonly guard: Guard | undefined;
}

/**
 * What a session's `state.json` says is running: the running task's raw directory name and
 * iteration (a session that is not `running`, or has no current task, runs nothing).
 */
type RunningState =
  | {
    readonly readable: true;
    readonly running: string | undefined;
    readonly iteration: number | undefined;
  }
  | { readonly readable: false; readonly detail: string };

/** What planning one entry found: a target to remove, or a skip and its reason. */
type PlanOutcome = { readonly target: Target } | { readonly skip: PruneSkip };

function skipOf(path: string, reason: PruneSkipReason, detail: string): PlanOutcome {
  return { skip: { path, reason, detail } };
}

/**
 * Entries measured (planning) or moved aside and removed (pruning) at once: the calls are
 * independent, and one at a time each waits a full round trip to the filesystem.
 */
const CONCURRENCY = 16;

class Planner {
  readonly targets: Target[] = [];
  readonly skipped: PruneSkip[] = [];
  readonly #states = new Map<string, RunningState>();

  readonly fs: FileSystem;
  readonly cutoffMs: number | undefined;

  constructor(fs: FileSystem, cutoffMs: number | undefined) {
    this.fs = fs;
    this.cutoffMs = cutoffMs;
  }

  skip(path: string, reason: PruneSkipReason, detail: string): void {
    this.skipped.push({ path, reason, detail });
  }

  /** Records what `measure` or `ageSkip` found, in the order the caller gives. */
  record(outcome: PlanOutcome): void {
    if ("target" in outcome) this.targets.push(outcome.target);
    else this.skipped.push(outcome.skip);
  }

  /** Plans an entry for removal: `measure` it, then `record` what it found. */
  async add(...entry: Parameters<Planner["measure"]>): Promise<void> {
    this.record(await this.measure(...entry));
  }

  /**
   * The target that removes the entry `name` of `parent`, with the bytes of its files; a skip
   * when it vanished meanwhile. Records nothing, so entries can be measured at once and recorded
   * in their order.
   */
  async measure(
    parent: string,
    name: string,
    kind: PruneKind,
    sessionId: string | null,
    isDirectory: boolean,
    guard?: Guard,
  ): Promise<PlanOutcome> {
    const path = join(parent, name);
    let bytes: number | undefined;
    let missing: string | undefined;
    for (let look = 1; bytes === undefined; look++) {
      try {
        bytes = await treeBytes(this.fs, path, isDirectory);
      } catch (error) {
        if (!(error instanceof FsError)) throw error;
        if (
          error instanceof NotFound &&
          (error.path === path || (await entryKind(this.fs, path)) === undefined)
        ) {
          // Not found by its own name: gone, or listed still but unreachable by that spelling.
          return await this.goneOrUnreachable(parent, name, error);
        }
        // Something in the tree missing when named: another prune removing it (step by step on
        // a real disk), or a name that stays listed but cannot be reached (one the platform
        // cannot spell back). Measured again while the entry is there: the same name missing
        // twice in a row is the latter (and so is a tree still changing after a few looks).
        if (error instanceof NotFound && error.path !== missing && look < MEASURE_LOOKS) {
          missing = error.path;
          continue;
        }
        // A directory of the tree replaced by a file since it was listed: measured again too.
        if (error instanceof NotADirectory && look < MEASURE_LOOKS) continue;
        // A tree that cannot be walked (that name, a tree still changing, a path too long, a
        // directory the filesystem refuses to list) is kept and reported; it stops nothing else.
        // An I/O error fails the call, as everywhere: nothing has changed yet, and a rerun
        // finishes the job.
        if (error instanceof NotFound || error instanceof NotADirectory || isRefusedHere(error)) {
          return skipOf(path, "unreadable", `Its tree cannot be read: ${error.message}`);
        }
        throw error;
      }
    }
    return { target: { path, parent, name, kind, sessionId, isDirectory, bytes, guard } };
  }

  /**
   * The skip of entry `name` of `parent` that was not found by its name (`error`): `vanished`
   * when `parent` no longer lists it; `unreadable` when it still does (a name the platform cannot
   * spell back), so it is never said to be gone while it stays.
   */
  async goneOrUnreachable(parent: string, name: string, error: FsError): Promise<PlanOutcome> {
    const path = join(parent, name);
    if (await isListed(this.fs, parent, name)) {
      return skipOf(path, "unreadable", `It cannot be reached by its name: ${error.message}`);
    }
    return skipOf(path, "vanished", "The entry disappeared while pruning was planned");
  }

  /** True when the entry passes the age limit; otherwise records the skip. */
  async oldEnough(path: string): Promise<boolean> {
    const skip = await this.ageSkip(path);
    if (skip !== undefined) this.record(skip);
    return skip === undefined;
  }

  /** Why the entry fails the age limit (too recent, or vanished), or undefined when it passes. */
  async ageSkip(path: string): Promise<PlanOutcome | undefined> {
    if (this.cutoffMs === undefined) return undefined;
    let mtimeMs: number;
    try {
      mtimeMs = (await this.fs.lstat(path)).mtimeMs;
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      return skipOf(path, "vanished", "The entry disappeared while pruning was planned");
    }
    if (mtimeMs > this.cutoffMs) {
      return skipOf(path, "too_recent", "Modified more recently than the age limit");
    }
    return undefined;
  }

  async state(dir: string): Promise<RunningState> {
    const cached = this.#states.get(dir);
    if (cached !== undefined) return cached;
    const state = await readRunningState(this.fs, dir);
    this.#states.set(dir, state);
    return state;
  }
}

/** The bytes of the regular files at or below `path`, never following a link. */
async function treeBytes(fs: FileSystem, path: string, isDirectory: boolean): Promise<number> {
  if (!isDirectory) return (await fs.lstat(path)).size;
  let total = 0;
  for (const entry of await fs.readDir(path)) {
    const child = join(path, entry.name);
    try {
      if (entry.kind === "directory") total += await treeBytes(fs, child, true);
      else if (entry.kind === "file") total += (await fs.lstat(child)).size;
    } catch (error) {
      // A prune's leftover in the tree (a session's traces moved aside by a prune of that
      // session) may be removed by that prune meanwhile: what is gone of it counts nothing.
      // Anything else so named (an agent's own output) is counted like the rest.
      if (!(error instanceof NotFound) || !isPruningName(entry.name)) throw error;
    }
  }
  return total;
}

/** How many times `Planner.measure` walks a tree that changes while it is walked. */
const MEASURE_LOOKS = 4;

/** True when `parent` lists an entry named `name`; false when it does not or is gone. */
async function isListed(fs: FileSystem, parent: string, name: string): Promise<boolean> {
  return (await readDirIfExists(fs, parent)).some((entry) => entry.name === name);
}

/**
 * Reads what a session is running; an unreadable state is reported, not guessed: malformed,
 * refused by the filesystem (`PermissionDenied`), or behind a link swapped in on its path since
 * the session was found (`TopologyError`, never read through), which keeps that session's raw
 * output and stops no other session's. An I/O error fails the call, as everywhere (a rerun
 * finishes the job).
 */
async function readRunningState(fs: FileSystem, dir: string): Promise<RunningState> {
  const file = join(dir, "state.json");
  let state;
  try {
    const kind = await entryKind(fs, file);
    if (kind === undefined) return { readable: true, running: undefined, iteration: undefined };
    if (kind !== "file") {
      return { readable: false, detail: `state.json is not a regular file (${kind})` };
    }
    // The session's own state: one copied from another session says nothing of what this one runs.
    state = await readSessionState(fs, dir);
  } catch (error) {
    if (error instanceof LayoutRecordError || error instanceof TopologyError) {
      return { readable: false, detail: error.message };
    }
    if (error instanceof PermissionDenied) {
      return { readable: false, detail: `state.json cannot be read: ${error.message}` };
    }
    throw error;
  }
  const task = state.status === "running" ? state.current_task : undefined;
  if (task == null) return { readable: true, running: undefined, iteration: undefined };
  return {
    readable: true,
    running: iterationName(task.iteration, task.workflow_id),
    iteration: task.iteration,
  };
}

/**
 * Why the raw attempt directory `name` must be kept under `state`, or `undefined` when it may go:
 * the state cannot be read, or the entry is the running attempt's, or its iteration is at or
 * above the running attempt's (a newer attempt, or one being set up).
 */
function keepRawEntry(
  state: RunningState,
  name: string,
): { readonly reason: PruneSkipReason; readonly detail: string } | undefined {
  if (!state.readable) return { reason: "state_unreadable", detail: state.detail };
  if (state.running === undefined || state.iteration === undefined) return undefined;
  if (state.running === name) {
    return { reason: "running_attempt", detail: "The session is running this attempt" };
  }
  const iteration = Number(name.slice(0, name.indexOf("_")));
  if (iteration >= state.iteration) {
    return {
      reason: "running_attempt",
      detail: `At or above the iteration of the running attempt ${state.running}`,
    };
  }
  return undefined;
}

/**
 * The layout the `session.json` of `session` records, or why it cannot be told: the manifest is
 * unreadable, gone, or names another session than its directory's. Read, never guessed.
 */
async function recordedLayout(
  fs: FileSystem,
  session: SessionDirEntry,
): Promise<{ readonly layout: SessionLayout } | { readonly unreadable: string }> {
  let manifest;
  try {
    manifest = await readSessionManifest(fs, session.dir);
  } catch (error) {
    if (error instanceof LayoutRecordError) return { unreadable: error.message };
    if (error instanceof NotFound) return { unreadable: "session.json disappeared" };
    // Refused by the filesystem: that session's raw/ is kept, and no other session's pruning
    // stops (an I/O error fails the call, as everywhere).
    if (error instanceof PermissionDenied) {
      return { unreadable: `session.json cannot be read: ${error.message}` };
    }
    throw error;
  }
  if (manifest.session_id !== session.sessionId) {
    return {
      unreadable: `session.json names another session (${manifest.session_id}) than its directory`,
    };
  }
  return { layout: manifestLayout(manifest) };
}

async function planRawDir(planner: Planner, session: SessionDirEntry): Promise<void> {
  const fs = planner.fs;
  const rawDir = join(session.dir, "raw");
  const kind = await entryKind(fs, rawDir);
  if (kind === undefined) return;
  // Only a folded session has a prunable raw/, as its session.json records (the manifest is
  // immutable, so this reading holds until the entries are removed).
  const recorded = await recordedLayout(fs, session);
  if ("unreadable" in recorded) {
    planner.skip(
      rawDir,
      "manifest_unreadable",
      `The session's layout is unknown, so its raw/ is kept: ${recorded.unreadable}`,
    );
    return;
  }
  if (recorded.layout !== "folded") {
    planner.skip(
      rawDir,
      "mirror_layout",
      "The session records the mirror layout, which has no prunable raw/; it is kept",
    );
    return;
  }
  if (kind === "symlink") {
    planner.skip(rawDir, "symlink", "The raw directory is a symlink; it is not followed");
    return;
  }
  if (kind !== "directory") {
    planner.skip(rawDir, "not_a_directory", "The raw path is not a directory");
    return;
  }
  const state = await planner.state(session.dir);
  let entries;
  try {
    entries = await fs.readDir(rawDir);
  } catch (error) {
    if (!isRefusedHere(error)) throw error;
    planner.skip(rawDir, "unreadable", `The raw directory cannot be listed: ${error.message}`);
    return;
  }
  const guard: Guard = { kind: "raw", sessionDir: session.dir };
  const outcomes = await mapLimit(entries, CONCURRENCY, async (entry) => {
    const path = join(rawDir, entry.name);
    if (entry.kind === "symlink") {
      return skipOf(path, "symlink", "A symlink in raw/ is never followed or removed");
    }
    if (entry.name.startsWith(PRUNING_PREFIX)) {
      return await planner.measure(
        rawDir,
        entry.name,
        "pruning_leftover",
        session.sessionId,
        isDir(entry.kind),
      );
    }
    if (!RAW_ATTEMPT_NAME.test(entry.name)) {
      return skipOf(path, "unrecognized_name", "Not named like a raw attempt directory");
    }
    if (entry.kind !== "directory") {
      return skipOf(
        path,
        "not_a_directory",
        `Named like a raw attempt directory but a ${entry.kind}`,
      );
    }
    const kept = keepRawEntry(state, entry.name);
    if (kept !== undefined) return skipOf(path, kept.reason, kept.detail);
    return (await planner.ageSkip(path)) ??
      await planner.measure(rawDir, entry.name, "raw_attempt", session.sessionId, true, guard);
  });
  for (const outcome of outcomes) planner.record(outcome);
}

function isDir(kind: string): boolean {
  return kind === "directory";
}

/**
 * Plans the removal of the temp files of interrupted atomic replaces (`isTempName`) in `dir` and,
 * with `deep`, in the directories below it: a session's durable tree, without its `raw/` (whose
 * attempt entries are pruned whole, and which agents write) and its `children/` (each child is a
 * session of its own, planned with its own id). Files modified after `inFlightMs` (see
 * `TEMP_LEFTOVER_AGE_MS`) are left unreported, as writes that may be in flight; older ones go
 * once modified before `cutoffMs` (the age limit, when one is given), and are reported kept
 * (`too_recent`) until then, as every entry the age limit keeps is. A symlink is never followed,
 * and a directory the filesystem refuses to list is reported (`unreadable`) and stops nothing
 * else.
 */
async function planTempLeftovers(
  planner: Planner,
  dir: string,
  sessionId: string | null,
  inFlightMs: number,
  cutoffMs: number | undefined,
  deep: boolean,
): Promise<void> {
  const fs = planner.fs;
  const visit = async (at: string, top: boolean): Promise<void> => {
    let entries;
    try {
      entries = await fs.readDir(at);
    } catch (error) {
      if (error instanceof NotFound) return;
      if (!isRefusedHere(error)) throw error;
      planner.skip(at, "unreadable", `It cannot be listed for temp files: ${error.message}`);
      return;
    }
    const found: string[] = [];
    for (const entry of entries) {
      if (entry.kind === "file" && isTempName(entry.name)) found.push(entry.name);
      else if (
        deep && entry.kind === "directory" && !isPruningName(entry.name) &&
        !(top && (entry.name === "raw" || entry.name === "children"))
      ) await visit(join(at, entry.name), false);
    }
    const outcomes = await mapLimit(found, CONCURRENCY, async (name) => {
      let mtimeMs: number;
      try {
        mtimeMs = (await fs.lstat(join(at, name))).mtimeMs;
      } catch (error) {
        if (error instanceof NotFound) return undefined; // renamed in by its write meanwhile
        if (!isRefusedHere(error)) throw error;
        return skipOf(join(at, name), "unreadable", `It cannot be looked at: ${error.message}`);
      }
      if (mtimeMs > inFlightMs) return undefined;
      if (cutoffMs !== undefined && mtimeMs > cutoffMs) {
        return skipOf(join(at, name), "too_recent", "Modified more recently than the age limit");
      }
      return await planner.measure(at, name, "temp_leftover", sessionId, false);
    });
    for (const outcome of outcomes) if (outcome !== undefined) planner.record(outcome);
  };
  await visit(dir, true);
}

/** Why `sessions` keep a mirror trace tree (one runs an attempt, or cannot tell), if they do. */
async function busySession(
  sessions: readonly SessionDirEntry[],
  stateOf: (dir: string) => Promise<RunningState>,
): Promise<{ readonly reason: PruneSkipReason; readonly detail: string } | undefined> {
  for (const session of sessions) {
    const state = await stateOf(session.dir);
    if (!state.readable) {
      return { reason: "state_unreadable", detail: `${session.sessionId}: ${state.detail}` };
    }
    if (state.running !== undefined) {
      return {
        reason: "running_attempt",
        detail: `Session ${session.sessionId} is running attempt ${state.running}`,
      };
    }
  }
  return undefined;
}

/** Whether any of `sessions` runs an attempt (or cannot tell); records the skip of `path`. */
async function keptForRunning(
  planner: Planner,
  path: string,
  sessions: readonly SessionDirEntry[],
): Promise<boolean> {
  const busy = await busySession(sessions, (dir) => planner.state(dir));
  if (busy === undefined) return false;
  planner.skip(path, busy.reason, busy.detail);
  return true;
}

/** Checks a maintenance directory: absent (false), a real directory (true), else reported. */
async function usableDir(planner: Planner, base: string, dir: string): Promise<boolean> {
  const kind = await chainKind(planner.fs, base, dir);
  if (kind === undefined) return false;
  if (kind === "symlink") {
    planner.skip(dir, "symlink", "A symlink is never followed");
    return false;
  }
  if (kind !== "directory") {
    planner.skip(dir, "not_a_directory", "Expected a directory");
    return false;
  }
  return true;
}

/**
 * The entries of the maintenance directory `dir`; none when it is gone (another prune removed it
 * since it was looked at) or the filesystem refuses to list it (`isRefusedHere`), which is
 * reported (`unreadable`) and stops nothing else, as a `raw/` that cannot be listed. Any other
 * failure (an I/O error) fails the call.
 */
async function listedOrReported(planner: Planner, dir: string): Promise<readonly DirEntry[]> {
  try {
    return await planner.fs.readDir(dir);
  } catch (error) {
    if (error instanceof NotFound) return [];
    if (!isRefusedHere(error)) throw error;
    planner.skip(dir, "unreadable", `The directory cannot be listed: ${error.message}`);
    return [];
  }
}

/**
 * A place of the session tree where sessions may be that the walk could not see (a symlink, a
 * directory without a regular session.json), in the tree `rootSessionId` (`null`: every tree).
 */
interface HiddenPart {
  readonly path: string;
  readonly rootSessionId: string | null;
  /** What is wrong with it, after its path: "is a symlink", "has no session.json", ... */
  readonly detail: string;
}

async function planLegacyTraces(
  planner: Planner,
  root: LoopyRoot,
  sessions: readonly SessionDirEntry[],
  selected: ReadonlySet<string> | undefined,
  hidden: readonly HiddenPart[],
): Promise<void> {
  const fs = planner.fs;
  if (await usableDir(planner, root.loopyDir, root.tracesDir)) {
    for (const entry of await listedOrReported(planner, root.tracesDir)) {
      const path = join(root.tracesDir, entry.name);
      if (entry.kind === "symlink") {
        planner.skip(path, "symlink", "A symlink in traces/ is never followed or removed");
        continue;
      }
      if (entry.name.startsWith(PRUNING_PREFIX)) {
        await planner.add(root.tracesDir, entry.name, "pruning_leftover", null, isDir(entry.kind));
        continue;
      }
      const treeSessions = sessions.filter((session) => session.rootSessionId === entry.name);
      // A session of the tree the walk could not identify may be running: the tree is kept.
      const unknown = hidden.find((part) =>
        part.rootSessionId === entry.name || part.rootSessionId === null
      );
      if (selected === undefined && unknown !== undefined) {
        planner.skip(
          path,
          "manifest_unreadable",
          `What the tree runs is unknown, so its traces are kept: ${unknown.path} ${unknown.detail}`,
        );
      } else if (selected === undefined) {
        const kept = (await keptForRunning(planner, path, treeSessions)) ||
          !(await planner.oldEnough(path));
        if (!kept) {
          const rootId = treeSessions.length > 0 ? entry.name : null;
          await planner.add(
            root.tracesDir,
            entry.name,
            "legacy_traces",
            rootId,
            isDir(entry.kind),
            { kind: "idle", sessions: treeSessions },
          );
          continue;
        }
      }
      if (entry.kind !== "directory") continue;
      // The root's tree is kept: clean leftovers in it, and with a session, prune its part.
      const sessionsDir = join(path, "sessions");
      if ((await chainKind(fs, root.tracesDir, sessionsDir)) !== "directory") continue;
      for (const child of await listedOrReported(planner, sessionsDir)) {
        const childPath = join(sessionsDir, child.name);
        if (child.kind === "symlink") {
          if (selected?.has(child.name)) {
            planner.skip(childPath, "symlink", "A symlink in traces/ is never followed or removed");
          }
          continue;
        }
        if (child.name.startsWith(PRUNING_PREFIX)) {
          await planner.add(sessionsDir, child.name, "pruning_leftover", null, isDir(child.kind));
          continue;
        }
        if (selected === undefined || !selected.has(child.name)) continue;
        const owners = sessions.filter((session) => session.sessionId === child.name);
        if (await keptForRunning(planner, childPath, owners)) continue;
        if (await planner.oldEnough(childPath)) {
          await planner.add(
            sessionsDir,
            child.name,
            "legacy_traces",
            child.name,
            isDir(child.kind),
            { kind: "idle", sessions: owners },
          );
        }
      }
    }
  }
  if (await usableDir(planner, root.loopyDir, root.outboxDir)) {
    const entries = await listedOrReported(planner, root.outboxDir);
    const outcomes = await mapLimit(entries, CONCURRENCY, async (entry) => {
      const path = join(root.outboxDir, entry.name);
      if (entry.kind === "symlink") {
        return skipOf(path, "symlink", "A symlink in the outbox is never followed or removed");
      }
      if (entry.name.startsWith(PRUNING_PREFIX)) {
        return await planner.measure(
          root.outboxDir,
          entry.name,
          "pruning_leftover",
          null,
          isDir(entry.kind),
        );
      }
      // With a session the outbox is left as it is (only an interrupted prune's leftovers go).
      if (selected !== undefined) return undefined;
      return await planner.measure(
        root.outboxDir,
        entry.name,
        "finalization_outbox",
        null,
        isDir(entry.kind),
      );
    });
    for (const outcome of outcomes) if (outcome !== undefined) planner.record(outcome);
  }
}

function sessionEntry(tree: SessionTree, sessionId: string): SessionDirEntry {
  const node = tree.require(sessionId);
  return {
    sessionId: node.sessionId,
    dir: node.dir,
    rootSessionId: node.rootSessionId,
    parentSessionId: node.parentSessionId,
  };
}

function validateOptions(
  options: PruneRawOptions,
): { readonly cutoffMs: number | undefined; readonly nowMs: number } {
  const days = options.olderThanDays;
  if (days !== undefined && (typeof days !== "number" || !Number.isFinite(days) || days < 0)) {
    throw new LayoutOptionError(
      "olderThanDays",
      days,
      "olderThanDays must be a non-negative number",
    );
  }
  const sessionId = options.sessionId;
  if (sessionId !== undefined && (typeof sessionId !== "string" || !isSafeId(sessionId))) {
    throw new LayoutOptionError("sessionId", sessionId, "sessionId must be a safe session id");
  }
  const date: unknown = (options.now ?? (() => new Date()))();
  if (!(date instanceof Date) || Number.isNaN(date.getTime())) {
    throw new LayoutOptionError("now", date, "now must return a valid date");
  }
  const nowMs = date.getTime();
  return { cutoffMs: days === undefined ? undefined : nowMs - days * DAY_MS, nowMs };
}

/**
 * Prunes raw attempt output under a `.loopy_loop/` directory and reports every entry removed
 * (path, bytes, kind) and every entry kept with the reason (but a temp file younger than an hour,
 * which may be a write in flight and is left alone unreported). With `dryRun` nothing changes and
 * the report is the same plan.
 *
 * What is prunable:
 * - the raw attempt directories of folded sessions, `<session>/raw/<NNNN>_<workflow>/` (every
 *   session, or one session's own, not its children's), optionally only those whose own
 *   modification time is older than a number of days. Whether a session is folded is read from
 *   the `layout` its `session.json` records, never guessed from the directories it holds: the
 *   mirror layout has no `raw/` area, so a `raw/` in a mirror session is none of prune's and is
 *   kept whole (reported once, `mirror_layout`), and so is the `raw/` of a session whose
 *   `session.json` cannot be read or names another session (`manifest_unreadable`);
 * - with `legacyTraces`, the historical mirror tree `.loopy_loop/traces/` (each root's tree, or
 *   with a session, its `traces/<root>/sessions/<id>/` alone) and, without a session, the
 *   entries of `.loopy_loop/trace_finalization_outbox/`;
 * - the temp files of atomic replaces a crash interrupted (`.<name>.<random>.tmp`, the random
 *   part 8 hex digits and a base-36 counter: named as only this library names them, and read by
 *   no reader) once an hour old (`TEMP_LEFTOVER_AGE_MS`) and older than the age limit when one is
 *   given: in each session's tree outside its `raw/` and `children/`, and (without a session) at
 *   the top of `.loopy_loop/` and of `.loopy_loop/sessions/`. Never one outside `.loopy_loop/`.
 *
 * What is kept and reported: a symlink anywhere (never followed, never removed), a raw entry that
 * is not a directory or not named `<NNNN>_<workflow>`, an entry newer than the age limit, the raw
 * directory of the attempt a session is running (status `running` with that iteration as its
 * current task) and every raw directory at or above that iteration (a newer attempt, or one
 * being set up), a mirror session's traces while it runs, a session's raw output when its
 * `state.json` cannot be read (nobody can tell what is running), an entry whose tree cannot be read
 * to measure it (`unreadable`: refused, too deep to reach, or still changing; an I/O error there
 * fails the call before anything moves), and one the filesystem refuses to move aside or whose
 * removal failed once moved aside (`remove_failed`): one such tree stops nothing else, and a rerun
 * tries again. A directory where a session would be that cannot be identified (no regular
 * `session.json`, or one the filesystem refuses to show) is reported once
 * (`manifest_unreadable`) with everything below it kept, and so is the mirror trace tree of its
 * tree (or of every tree, behind a linked `sessions/`), as what runs there is unknown. What runs
 * is read when the plan is made and read again right before each entry is moved aside (in this
 * process, serialized with `updateSessionState` of that session), so an attempt that started
 * after the plan keeps its raw output.
 *
 * Crash safety: deleting a directory tree is not atomic, so each entry is first renamed to a
 * hidden sibling `.pruning-<random>-<name>` in the same directory (the name cut on whole
 * characters so the hidden name fits in 255 UTF-8 bytes), the directory is fsynced, and only then
 * the renamed tree is removed. After a crash an entry is either present and whole or
 * gone; a `.pruning-*` leftover counts as gone for every reader and the next prune of the same
 * kind removes it (one under `traces/` or the finalization outbox, the next `legacyTraces` prune).
 * Such a leftover and a temp file are removed under their own names, with no rename first.
 *
 * Never touched: anything outside `.loopy_loop/`, any symlink or anything behind one, and every
 * durable file of every session (manifests, state, receipts, `project_state/`, `iterations/`):
 * in that tree only the temp files above go. After pruning
 * every logical reference still resolves, a reference into a pruned raw directory with
 * `status: "pruned"`. `loopyRoot` is the `.loopy_loop/` directory
 * (`findLoopyRoot`). A `sessionId` that no valid tree holds is an `UnknownSessionError`; a
 * negative age a `LayoutOptionError`. A filesystem failure propagates as the port's error; what
 * was already removed stays removed and a rerun completes the rest.
 *
 * @example Prune a session's finished attempts
 * ```ts
 * import { createAttemptArtifacts, createRootSession, pruneRaw } from "@loop/sessions/layout";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * await fs.mkdir("/repo");
 * const session = await createRootSession(fs, {
 *   repoRoot: "/repo",
 *   goal: "Write the docs",
 *   workflowSet: "main",
 *   workflowContract: {},
 *   workflowRoster: {},
 *   harnessCapabilityRoster: {},
 * });
 * await createAttemptArtifacts(fs, session.paths, {
 *   iteration: 1,
 *   workflowId: "outer",
 *   attemptId: "a1b2c3d4e5f6",
 * }, { prompt: "Write the docs", pathsMap: {} });
 *
 * const plan = await pruneRaw(fs, "/repo/.loopy_loop", { dryRun: true });
 * if (plan.count !== 1 || plan.removed[0]?.kind !== "raw_attempt") throw new Error("unexpected");
 * const done = await pruneRaw(fs, "/repo/.loopy_loop");
 * if (done.count !== 1 || (await fs.readDir(session.paths.rawDir)).length !== 0) {
 *   throw new Error("unexpected result");
 * }
 * ```
 */
export async function pruneRaw(
  fs: FileSystem,
  loopyRoot: string,
  options: PruneRawOptions = {},
): Promise<PruneReport> {
  const { cutoffMs, nowMs } = validateOptions(options);
  const root = await openLoopyRoot(fs, loopyRoot);
  const planner = new Planner(fs, cutoffMs);
  let sessions: readonly SessionDirEntry[];
  let selected: ReadonlySet<string> | undefined;
  const hidden: HiddenPart[] = [];
  if (options.sessionId !== undefined) {
    const tree = await loadSessionTree(fs, root.repoRoot, options.sessionId);
    sessions = [sessionEntry(tree, options.sessionId)];
    selected = new Set([options.sessionId]);
  } else {
    const walk = await walkSessionDirs(fs, root.sessionsDir);
    sessions = walk.sessions;
    for (const link of walk.skipped) {
      planner.skip(link.path, "symlink", "A symlink in the session tree is never followed");
      hidden.push({ ...link, detail: "is a symlink" });
    }
    for (const dir of walk.unidentified) {
      hidden.push(dir);
      // Whatever it holds is kept (its raw/, the sessions below it), and said once.
      planner.skip(
        dir.path,
        "manifest_unreadable",
        `No session can be identified here, so what it holds is kept: it ${dir.detail}`,
      );
    }
  }
  for (const session of sessions) await planRawDir(planner, session);
  if (options.legacyTraces === true) {
    await planLegacyTraces(planner, root, sessions, selected, hidden);
  }
  // Temp files a crash left: older than an hour, and than the age limit when one is given.
  const inFlightMs = nowMs - TEMP_LEFTOVER_AGE_MS;
  if (selected === undefined) {
    for (const dir of [root.loopyDir, root.sessionsDir]) {
      // Never through a link (a linked sessions/ is reported by the walk).
      if ((await chainKind(fs, root.loopyDir, dir)) !== "directory") continue;
      await planTempLeftovers(planner, dir, null, inFlightMs, cutoffMs, false);
    }
  }
  for (const session of sessions) {
    await planTempLeftovers(planner, session.dir, session.sessionId, inFlightMs, cutoffMs, true);
  }

  if (options.dryRun === true) {
    return report(planner.targets, planner.skipped, true);
  }
  const removed = await execute(fs, root, planner, options.onProgress);
  return report(removed, planner.skipped, false);
}

function report(
  removed: readonly Target[],
  skipped: readonly PruneSkip[],
  dryRun: boolean,
): PruneReport {
  const entries = removed.map((target): PrunedEntry => ({
    path: target.path,
    bytes: target.bytes,
    kind: target.kind,
    sessionId: target.sessionId,
  }));
  return {
    removed: entries,
    skipped,
    count: entries.length,
    bytes: entries.reduce((sum, entry) => sum + entry.bytes, 0),
    dryRun,
  };
}

/**
 * A fresh hidden name for the entry `name`: `.pruning-<8 hex>-<name>`, the name cut on whole
 * characters so the hidden name fits in `NAME_MAX_BYTES` UTF-8 bytes (any entry can move aside).
 */
function hiddenName(name: string): string {
  const random = globalThis.crypto.randomUUID().replace(/-/g, "").slice(0, 8);
  const prefix = `${PRUNING_PREFIX}${random}-`;
  return `${prefix}${utf8Prefix(name, NAME_MAX_BYTES - prefix.length)}`;
}

/**
 * Removes the planned entries, one parent directory at a time: rename every entry (a file too) to
 * a hidden sibling, fsync the parent, remove the renamed trees and files, fsync the parent again.
 * Returns the entries removed, and records those kept, in the planned order.
 */
async function execute(
  fs: FileSystem,
  root: LoopyRoot,
  planner: Planner,
  onProgress: ((done: number, total: number) => void) | undefined,
): Promise<Target[]> {
  const total = planner.targets.length;
  let done = 0;
  const handled = (count: number): void => {
    done += count;
    onProgress?.(done, total);
  };
  onProgress?.(0, total);
  // What happened to each entry, reported in the planned order once every group is done.
  const outcomes = new Map<Target, Kept | "removed">();
  const keep = (target: Target, kept: Kept): void => {
    outcomes.set(target, kept);
  };
  const byParent = new Map<string, Target[]>();
  for (const target of planner.targets) {
    const group = byParent.get(target.parent);
    if (group === undefined) byParent.set(target.parent, [target]);
    else group.push(target);
  }
  for (const [parent, targets] of byParent) {
    // The chain of directories down to the parent is checked again right before it is changed (no
    // link may have appeared on the way to it since the plan was made): when the group starts,
    // right before its entries move aside (after any wait for a session's state), and once they
    // moved, before anything is removed.
    const parentChange = async (): Promise<Kept | undefined> => {
      const kind = await chainKind(fs, root.loopyDir, parent);
      if (kind === "directory") return undefined;
      return { reason: kind === "symlink" ? "symlink" : "vanished", detail: PARENT_CHANGED };
    };
    const changed = await parentChange();
    if (changed !== undefined) {
      for (const target of targets) keep(target, changed);
      handled(targets.length);
      continue;
    }
    // Each entry is moved aside to a hidden sibling of a fresh name, a file too: what is removed
    // then goes by a name nothing else has, even should a link replace the parent meanwhile. What
    // happened to each entry is applied in the planned order, so the report does not depend on
    // which call finished first.
    const moveAside = async (target: Target, kept: Kept | undefined): Promise<Moved> => {
      if (kept !== undefined) return { target, kept };
      // A leftover is removed by its own name: an interrupted prune's is hidden already, and a
      // temp file is one file, which goes at once.
      if (target.kind === "pruning_leftover" || target.kind === "temp_leftover") {
        return { target, at: target.path, renamed: false };
      }
      const at = join(parent, hiddenName(target.name));
      try {
        await fs.rename(target.path, at);
      } catch (error) {
        // Refused by the filesystem (a raw/ this process may not change): kept whole at its name
        // and reported, as a tree that fails to go is; it stops nothing else.
        if (isRefusedHere(error)) {
          return {
            target,
            kept: { reason: "remove_failed", detail: `${target.path}: ${error.message}` },
          };
        }
        if (!(error instanceof NotFound)) throw error;
        // Listed still, but not found by its name: never said to be gone.
        if (await isListed(fs, parent, target.name)) {
          return {
            target,
            kept: {
              reason: "unreadable",
              detail: `It cannot be reached by its name: ${error.message}`,
            },
          };
        }
        return { target, kept: { reason: "vanished", detail: VANISHED_BEFORE_REMOVAL } };
      }
      return { target, at, renamed: true };
    };
    // What runs is read again right before entries are moved aside: an attempt may have started
    // since the plan was made, and the raw output of the running (or a newer) attempt is never
    // removed. The raw entries of one session are judged against one reading of its state, taken
    // while this process's updates of that state wait (iterations only grow, so an attempt that
    // starts meanwhile is newer than every entry that reading lets go).
    // A leftover of an interrupted prune has no guard: it goes whatever runs.
    const session = sameRawSession(targets);
    const moved = session !== undefined
      ? await serializedOn(fs, join(session, "state.json"), async () => {
        const state = await readRunningState(fs, session);
        const changedMeanwhile = await parentChange();
        return await mapLimit(targets, CONCURRENCY, (target) =>
          moveAside(
            target,
            changedMeanwhile ??
              (target.guard === undefined ? undefined : keepRawEntry(state, target.name)),
          ));
      })
      : await mapLimit(
        targets,
        CONCURRENCY,
        (target) =>
          guarded(fs, target, async () => {
            const kept = await keptNow(fs, target);
            return await moveAside(target, kept ?? await parentChange());
          }),
      );
    let staged: { readonly target: Target; readonly at: string; readonly renamed: boolean }[] = [];
    let renamedAny = false;
    for (const entry of moved) {
      if ("kept" in entry) {
        keep(entry.target, entry.kept);
        handled(1);
        continue;
      }
      if (entry.renamed) renamedAny = true;
      staged.push(entry);
    }
    // The renames are durable before any byte of the trees goes: a crash leaves each entry whole
    // at its name, or hidden.
    if (renamedAny) await fs.syncDir(parent);
    // A link that replaced the parent before a rename made it move what the link points to: each
    // entry is moved back (through the same link) and nothing of the group is removed.
    const changedAfter = staged.length > 0 ? await parentChange() : undefined;
    if (changedAfter !== undefined) {
      // Moved back through the same link. One not found there was moved before the link came
      // (it is hidden in the directory the link replaced, raw output only); any other failure
      // leaves an entry hidden where the link points, which is reported (after the others).
      let failure: unknown;
      await mapLimit(staged, CONCURRENCY, async ({ target, at, renamed }) => {
        if (renamed) {
          try {
            await fs.rename(at, target.path);
          } catch (error) {
            if (!(error instanceof NotFound)) failure ??= error;
          }
        }
        keep(target, changedAfter);
        handled(1);
      });
      if (failure !== undefined) throw failure;
      if (renamedAny) await fs.syncDir(parent);
      staged = [];
    }
    // A tree that fails to go (a directory in it that cannot be changed, a path too long to
    // reach) is reported by its hidden name and stops nothing else; the next prune tries again.
    const gone = await mapLimit(staged, CONCURRENCY, async ({ target, at }) => {
      let found: boolean | Kept = true;
      try {
        // A temp file replaced by a directory since the plan is not removed with what it holds.
        await fs.remove(at, { recursive: target.kind !== "temp_leftover" });
      } catch (error) {
        if (error instanceof FsError && !(error instanceof NotFound)) {
          found = { reason: "remove_failed", detail: `${at}: ${error.message}` };
        } else if (!(error instanceof NotFound)) throw error;
        else found = false;
      }
      handled(1);
      return found;
    });
    staged.forEach(({ target }, i) => {
      const outcome = gone[i];
      if (outcome === true) outcomes.set(target, "removed");
      else if (outcome === false || outcome === undefined) {
        keep(target, { reason: "vanished", detail: VANISHED_BEFORE_REMOVAL });
      } else keep(target, outcome);
    });
    if (staged.length > 0) await fs.syncDir(parent);
  }
  const removed: Target[] = [];
  for (const target of planner.targets) {
    const outcome = outcomes.get(target);
    if (outcome === "removed") removed.push(target);
    else if (outcome !== undefined) planner.skip(target.path, outcome.reason, outcome.detail);
  }
  return removed;
}

/** Why an entry is kept. */
interface Kept {
  readonly reason: PruneSkipReason;
  readonly detail: string;
}

/** The detail of an entry kept because the directory holding it changed while pruning. */
const PARENT_CHANGED = "The directory holding the entry changed while pruning";

/** The detail of an entry found gone when it was to be moved aside or removed. */
const VANISHED_BEFORE_REMOVAL = "The entry disappeared before it was removed";

/** What moving one planned entry aside did: it is kept (and why), or is at `at` to be removed. */
type Moved =
  | { readonly target: Target; readonly kept: Kept }
  | { readonly target: Target; readonly at: string; readonly renamed: boolean };

/**
 * The session directory when every guarded target is a raw attempt entry of that one session (the
 * others, leftovers of an interrupted prune, have no guard), and there is one.
 */
function sameRawSession(targets: readonly Target[]): string | undefined {
  let session: string | undefined;
  for (const target of targets) {
    const guard = target.guard;
    if (guard === undefined) continue;
    if (guard.kind !== "raw") return undefined;
    if (session !== undefined && session !== guard.sessionDir) return undefined;
    session = guard.sessionDir;
  }
  return session;
}

/**
 * Runs `step` for `target`, serialized with this process's updates of the `state.json` of every
 * session its guard reads (`updateSessionState`): a raw attempt directory's session, or each
 * session whose attempts a mirror trace tree holds (taken one inside the other, always in the
 * same order), so the states read inside `step` stay current until the entry is moved aside. An
 * attempt that starts meanwhile waits, then finds its trace tree gone or in place, never removed
 * after it started.
 */
async function guarded<T>(
  fs: FileSystem,
  target: Target,
  step: () => Promise<T>,
): Promise<T> {
  const guard = target.guard;
  if (guard === undefined) return await step();
  const dirs = guard.kind === "raw"
    ? [guard.sessionDir]
    : [...new Set(guard.sessions.map((session) => session.dir))].sort();
  const hold = async (i: number): Promise<T> =>
    i === dirs.length
      ? await step()
      : await serializedOn(fs, join(dirs[i] as string, "state.json"), () => hold(i + 1));
  return await hold(0);
}

/** Why `target` must be kept according to the current state of its session(s), if it must. */
async function keptNow(
  fs: FileSystem,
  target: Target,
): Promise<{ readonly reason: PruneSkipReason; readonly detail: string } | undefined> {
  const guard = target.guard;
  if (guard === undefined) return undefined;
  if (guard.kind === "raw") {
    return keepRawEntry(await readRunningState(fs, guard.sessionDir), target.name);
  }
  return await busySession(guard.sessions, (dir) => readRunningState(fs, dir));
}
