/**
 * Locks of the Loop session store: the **writer lock** of one session directory and the
 * **collection lock** that serializes structural changes of a collection (migration, archive
 * membership, delete, compaction, cleanup).
 *
 * Inside one process both are plain in-memory registrations, keyed by filesystem and path. Across
 * processes they are files, made and taken over only by a store with a `ProcessProbe` (a runtime
 * capability the adapters provide: `nodeProcessProbe()`, `denoProcessProbe()`, and by default
 * through `FileSystem.processes` of `nodeFs()` and `denoFs()`). A store without one makes no lock
 * files and cannot tell whether a lock file's holder still runs: it treats every lock file it
 * finds as live (it neither writes under it nor removes it).
 *
 * ## The lock file
 *
 * `<session dir>/writer.lock` (or `<collection>/.collection.lock`) is created exclusively with
 * mode 0600 and holds one JSON object: `{"pid", "host", "startedAt", "token"}`, plus
 * `"processStart"` where the probe can identify process instances and `"pidNamespace"` where it
 * knows its pid namespace (Linux). A lock is *live* while its holder may still run: another host
 * or another pid namespace of this host (neither can be probed), a pid namespace where the probe
 * cannot tell its own (Deno without `-A`: the lock's pid may be another namespace's, so nothing
 * here tells whether it runs; a lock that names no namespace is judged by its pid), a pid the
 * probe reports alive (and, with `processStart`, still the same process), a token this copy of
 * the library holds, or this very process instance (another worker thread or copy of the
 * library). It is *stale* when its pid is dead on this host, names another process instance
 * than the one now running with that pid, or names this process's pid with a token it does not
 * hold and no `processStart` to tell otherwise (then assumed a leftover of an earlier process
 * that had the same pid). A lock file that cannot be parsed is given a short grace period (its
 * writer may be between create and write) and is stale after it.
 *
 * A lock file this copy of the library gave up while it could not remove it (a release, or a
 * failed acquisition, whose removal failed) carries a token it *abandoned*: no one holds it, so
 * it is stale to this copy, whose next acquirer takes it over (and whose cleanup removes it),
 * even where the probe names process instances. Another process, or another worker thread or
 * copy of the library in this one, cannot tell such a file from a live holder's (it names this
 * running process instance) and respects it as live until this copy takes it over or the process
 * ends. Only tokens this copy made are ever abandoned, so a lock another thread holds stays live.
 *
 * ## Taking over a stale lock
 *
 * Two processes may find the same stale lock at once. The takeover is claimed by creating the
 * marker `<lock>.takeover-<stale token>` exclusively: only one racer can create it. The winner
 * checks that the lock still holds the stale token, removes it, creates its own lock exclusively
 * (which can still lose to a third process that never saw the stale lock — that process then
 * holds the lock legitimately) and removes the marker. A marker whose own holder died is removed
 * by the next racer. Lock files are never fsynced: a lock only matters while its holder lives,
 * and after a power loss every holder is gone.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import type { ProcessProbe } from "../port/probe.ts";
import { AlreadyExists, NotFound } from "../port/errors.ts";
import { PRIVATE_FILE_MODE, removeIfExists } from "../port/durable.ts";
import { basename, dirname, join } from "../port/path.ts";
import { SessionBusyError, SessionFormatError, SessionLockedError } from "./errors.ts";
import type { SessionContext } from "./session_manager.ts";
import { readIfRegular } from "./storage.ts";

export type { ProcessProbe };

/** The file name of a session's writer lock. */
export const WRITER_LOCK_FILE = "writer.lock";
/** The file name of a collection's lock (hidden: discovery skips names starting with `.`). */
export const COLLECTION_LOCK_FILE = ".collection.lock";

/**
 * How long an unparsable lock file or takeover marker may be mid-write (created, its record not
 * written yet) before it counts as stale, in ms. Generous: judging a live holder stale lets two
 * writers in, while an unparsable file left by a crash only delays the next writer this long.
 */
const UNPARSABLE_GRACE_MS = 1000;
/** Poll interval while waiting for a collection lock held by another process, in ms. */
const COLLECTION_POLL_MS = 20;
/** Default wait for a collection lock held by another process, in ms. */
export const DEFAULT_COLLECTION_LOCK_WAIT_MS = 10_000;

/** The store context shared by the store's companion modules: session context plus a probe. */
export interface StoreContext extends SessionContext {
  /**
   * The process probe; undefined means this store makes no lock files (and respects those of
   * other processes as live).
   */
  readonly probe: ProcessProbe | undefined;
  /** How long to wait for a collection lock held by another process, in ms. */
  readonly collectionLockWaitMs: number;
}

/** The content of a lock file. */
export interface LockRecord {
  /** The holder's process id. */
  readonly pid: number;
  /** The holder's host name. */
  readonly host: string;
  /** When the lock was taken (ISO). */
  readonly startedAt: string;
  /** A random token naming this acquisition. */
  readonly token: string;
  /** The holder's `ProcessProbe.processStart`, when its probe knew it. */
  readonly processStart?: string;
  /** The holder's `ProcessProbe.pidNamespace`, when its probe knew it. */
  readonly pidNamespace?: string;
}

/** What a lock file says: nothing there, a live holder, or a stale leftover. */
export type LockFileState =
  | { readonly kind: "free" }
  | { readonly kind: "live"; readonly record: LockRecord | undefined }
  | { readonly kind: "stale"; readonly record: LockRecord | undefined };

/** What a lock path holds: the lock file's state, or a holder in this process. */
export type LockState = LockFileState | { readonly kind: "held-here" };

/** Tokens of every file lock this process holds (process-wide: any filesystem, any store). */
const heldTokens = new Set<string>();
/**
 * Tokens of lock files and takeover markers this copy of the library gave up without removing
 * them (the removal failed): a file carrying one is stale here, whatever the probe says, and is
 * taken over. A token leaves the set when a takeover removes its file.
 */
const abandonedTokens = new Set<string>();

/**
 * Stops holding `token`; with `leftBehind`, a file carrying it may still exist (its removal
 * failed or was never tried), and is stale to this copy from now on.
 */
function dropToken(token: string, leftBehind: boolean): void {
  if (leftBehind) abandonedTokens.add(token);
  heldTokens.delete(token);
}
/**
 * False when no file at `lockPath` or among its takeover markers (`<lock>.takeover-*`, nested
 * ones included) holds `token`: an acquisition that failed before any of its exclusive creates
 * succeeded (a directory that refuses new files, say) left nothing behind, so its token need not
 * be remembered as abandoned. True when one does, or when that cannot be told.
 */
async function mayHoldToken(
  context: StoreContext,
  lockPath: string,
  token: string,
): Promise<boolean> {
  const fs = context.fs;
  const prefix = `${basename(lockPath)}.takeover-`;
  try {
    const names = (await fs.readDir(dirname(lockPath)))
      .filter((entry) => entry.name === basename(lockPath) || entry.name.startsWith(prefix))
      .map((entry) => join(dirname(lockPath), entry.name));
    for (const path of names) {
      const bytes = await readIfRegular(fs, path);
      if (bytes instanceof Uint8Array && parseLockRecord(bytes)?.token === token) return true;
    }
    return false;
  } catch {
    return true;
  }
}

/** How many tokens `abandonedTokens` holds (internal: for the tests of this module). */
export function abandonedTokenCount(): number {
  return abandonedTokens.size;
}

/** In-process registrations: filesystem → lock path → token. */
const registrations = new WeakMap<FileSystem, Map<string, string>>();
/**
 * Brief holds of writer locks (maintenance): filesystem → lock path → a promise settled when the
 * hold is released. A writer of this process waits for one instead of being refused.
 */
const briefHolds = new WeakMap<FileSystem, Map<string, Promise<void>>>();
/** What to run when a lock is released (the end of a brief hold). */
const releaseHooks = new WeakMap<HeldLock, () => void>();
/**
 * In-process wait queues of collection locks: filesystem → lock path as spelled (or NUL and its
 * real path) → tail promise.
 */
const queues = new WeakMap<FileSystem, Map<string, Promise<void>>>();

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const TOKEN_SHAPE = /^[0-9a-f-]{1,64}$/;

/**
 * What holds a writer lock of this process, by lock token, when it is not a `SessionManager`
 * (`acquireWriterLock`'s `holder`): named in the error a writer of this process gets meanwhile.
 */
const holders = new Map<string, string>();

function registry(fs: FileSystem): Map<string, string> {
  let map = registrations.get(fs);
  if (map === undefined) {
    map = new Map();
    registrations.set(fs, map);
  }
  return map;
}

/** True when this process holds the lock at `lockPath` on `fs` (writer or collection lock). */
export function isHeldInProcess(fs: FileSystem, lockPath: string): boolean {
  return registry(fs).has(lockPath);
}

/** Parses lock file bytes; undefined when they are not a lock record. */
export function parseLockRecord(bytes: Uint8Array): LockRecord | undefined {
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(bytes));
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const record = value as Record<string, unknown>;
  if (
    !Number.isSafeInteger(record.pid) || typeof record.host !== "string" ||
    typeof record.startedAt !== "string" || typeof record.token !== "string" ||
    (record.processStart !== undefined && typeof record.processStart !== "string") ||
    (record.pidNamespace !== undefined && typeof record.pidNamespace !== "string")
  ) return undefined;
  return record as unknown as LockRecord;
}

/**
 * The bytes of the lock file or marker at `path`, undefined when there is none. Never read
 * through a link nor waited on as a FIFO: with `readFileNoFollow` in one call, otherwise after
 * checking the kind.
 *
 * @throws {SessionFormatError} When the entry is not a regular file (this library never makes
 *   one): it is refused, never followed nor removed.
 */
async function readLockBytes(fs: FileSystem, path: string): Promise<Uint8Array | undefined> {
  const read = await readIfRegular(fs, path);
  if (typeof read === "string") {
    throw new SessionFormatError(
      `Lock file is a ${read}, not a regular file; remove it by hand if no writer uses it`,
      { file: path },
    );
  }
  return read;
}

/**
 * True when `record` names a pid namespace this probe cannot compare with its own, since it does
 * not know its own (Deno without `-A` cannot read `/proc/self/ns/pid`): its pid may be one of
 * another namespace, which cannot be probed from here.
 */
function namespaceUnknown(record: LockRecord, probe: ProcessProbe): boolean {
  return record.host === probe.host && record.pidNamespace !== undefined &&
    probe.pidNamespace === undefined;
}

function isLive(record: LockRecord, probe: ProcessProbe): boolean {
  if (record.host !== probe.host) return true;
  // Another pid namespace on this host (a container, a sandbox) is another host to the probe: its
  // pids cannot be probed from here. So is a namespace this probe cannot compare with its own (it
  // does not know its own): live, unless the token is this copy's own (held, or given up). A
  // record that names no namespace (its writer's probe could not tell) compares by pid as before.
  if (namespaceUnknown(record, probe)) return !abandonedTokens.has(record.token);
  if (
    record.pidNamespace !== undefined && probe.pidNamespace !== undefined &&
    record.pidNamespace !== probe.pidNamespace
  ) return true;
  if (record.pid === probe.pid) {
    if (heldTokens.has(record.token)) return true;
    // A token this copy made and gave up while its file stayed: no one holds it (another thread
    // cannot hold a token this copy made), even though the file names this process instance.
    if (abandonedTokens.has(record.token)) return false;
    // Not held by this copy of the library: by another thread or copy of it in this very process
    // (live) when the lock names this process instance; otherwise a leftover of an earlier
    // process that had this pid. Without an identity to compare, the latter is assumed.
    const mine = probe.processStart?.(probe.pid);
    return mine !== undefined && record.processStart === mine;
  }
  if (!probe.isAlive(record.pid)) return false;
  // Alive, unless the pid now belongs to another process than the one that took the lock.
  if (record.processStart === undefined) return true;
  const theirs = probe.processStart?.(record.pid);
  return theirs === undefined || theirs === record.processStart;
}

/**
 * For a store without a probe: the lock file at `lockPath` another process made (live: nothing
 * tells whether its holder still runs), or free when there is none. Looked for with `lstat`, so a
 * failure to look is reported, never taken for a missing file.
 */
async function foreignLock(context: StoreContext, lockPath: string): Promise<LockFileState> {
  try {
    await context.fs.lstat(lockPath);
  } catch (error) {
    if (error instanceof NotFound) return { kind: "free" };
    throw error;
  }
  return await inspectLockFile(context, lockPath);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Reads the lock at `lockPath` and says whether it is free, held by this process, held by a live
 * process, or stale. Without a probe every lock file is live (nothing tells whether its holder
 * still runs).
 */
export async function inspectLock(
  context: StoreContext,
  lockPath: string,
): Promise<LockState> {
  if (isHeldInProcess(context.fs, await canonicalLockPath(context.fs, lockPath))) {
    return { kind: "held-here" };
  }
  return await inspectLockFile(context, lockPath);
}

/**
 * `lockPath` with the links of its directory resolved, the key of this process's registrations:
 * two spellings of one directory (a data directory reached through a link, say) are one lock. A
 * directory that is not there yet keeps the spelling given; a failure to resolve is the caller's.
 */
async function canonicalLockPath(fs: FileSystem, lockPath: string): Promise<string> {
  try {
    return join(await fs.realPath(dirname(lockPath)), basename(lockPath));
  } catch (error) {
    if (error instanceof NotFound) return lockPath;
    throw error;
  }
}

/** Like `inspectLock`, for the lock file alone (in-process registrations are not consulted). */
async function inspectLockFile(
  context: StoreContext,
  lockPath: string,
): Promise<LockFileState> {
  const bytes = await readLockBytes(context.fs, lockPath);
  if (bytes === undefined) return { kind: "free" };
  const probe = context.probe;
  // Without a probe nothing tells whether the holder still runs: the lock is respected.
  if (probe === undefined) return { kind: "live", record: parseLockRecord(bytes) };
  let record = parseLockRecord(bytes);
  if (record === undefined) {
    await sleep(UNPARSABLE_GRACE_MS);
    const again = await readLockBytes(context.fs, lockPath);
    if (again === undefined) return { kind: "free" };
    record = parseLockRecord(again);
    if (record === undefined) return { kind: "stale", record: undefined };
  }
  return isLive(record, probe) ? { kind: "live", record } : { kind: "stale", record };
}

/** A lock this process holds; `release()` gives it up (idempotent). */
export class HeldLock {
  /** The lock file path. */
  readonly path: string;
  /** The token of this acquisition. */
  readonly token: string;
  readonly #fs: FileSystem;
  readonly #file: boolean;
  #released = false;

  /** Wraps an acquisition; use `acquireWriterLock`. */
  constructor(fs: FileSystem, path: string, token: string, file: boolean) {
    this.#fs = fs;
    this.path = path;
    this.token = token;
    this.#file = file;
  }

  /** True once released. */
  get released(): boolean {
    return this.#released;
  }

  /**
   * Releases the lock: removes the lock file when it still holds this token (a lock file that
   * moved away with its directory, or was replaced, is left alone) and drops the registration.
   * Should the removal fail twice, the error is thrown and the token is abandoned: the file left
   * behind is stale to this copy of the library, whose next acquirer of the lock takes it over.
   */
  async release(): Promise<void> {
    if (this.#released) return;
    this.#released = true;
    let gone = !this.#file;
    try {
      if (this.#file) {
        try {
          await this.#removeOwnFile();
        } catch {
          // Once more, while the token is still held: a takeover in this process meanwhile sees
          // the file as live, so the retry can only remove this lock's own file.
          await this.#removeOwnFile();
        }
        gone = true;
      }
    } finally {
      dropToken(this.token, !gone);
      holders.delete(this.token);
      const map = registry(this.#fs);
      if (map.get(this.path) === this.token) map.delete(this.path);
      releaseHooks.get(this)?.();
    }
  }

  async #removeOwnFile(): Promise<void> {
    const bytes = await readLockBytes(this.#fs, this.path);
    if (bytes !== undefined && parseLockRecord(bytes)?.token === this.token) {
      await this.#fs.remove(this.path);
    }
  }

  /**
   * Writes this lock's record as the writer lock file of the directory `dir`, which is about to
   * take the locked directory's place (a compaction's copy): from its rename on, the directory in
   * place is locked by this acquisition, whose `release()` removes that file. Nothing for a lock
   * without a file (a store without a process probe registers it in this process only).
   */
  async copyInto(dir: string): Promise<void> {
    if (!this.#file) return;
    const bytes = await readLockBytes(this.#fs, this.path);
    if (bytes === undefined || parseLockRecord(bytes)?.token !== this.token) return;
    const handle = await this.#fs.open(join(dir, WRITER_LOCK_FILE), {
      createNew: true,
      write: true,
      mode: PRIVATE_FILE_MODE,
    });
    try {
      await handle.write(bytes);
    } catch (error) {
      // The write's failure is the one reported; the copy goes with the staging directory.
      await handle.close().catch(() => undefined);
      throw error;
    }
    await handle.close();
  }

  /** Drops the registration without touching any file (the file went away with its directory). */
  forget(): void {
    this.#released = true;
    heldTokens.delete(this.token);
    holders.delete(this.token);
    const map = registry(this.#fs);
    if (map.get(this.path) === this.token) map.delete(this.path);
  }
}

/**
 * Creates the lock file (or takeover marker) `path` exclusively with `record`; false when
 * something is already there, or when what is at `path` once written is not this record
 * (another process took it over while it was still empty).
 *
 * The file is empty between its create and its write. Another process judges an empty file stale
 * only after two empty reads a grace period apart, and removes it only under the takeover marker
 * `<path>.takeover-other`, reading it empty once more after making that marker. So a call that
 * got from its create to its write within half a grace period holds the file; one that stalled
 * longer (a busy thread pool, a long synchronous task) waits until no live process holds that
 * marker, then reads the file back by its path: it is this call's only if it holds this record.
 * A stalled call whose write or close failed leaves the file where it is (it may be another
 * process's by now; an empty file left only delays the next writer by the grace period).
 */
async function createLockFile(
  context: StoreContext,
  path: string,
  record: LockRecord,
): Promise<boolean> {
  const fs = context.fs;
  const began = performance.now();
  let handle;
  try {
    handle = await fs.open(path, { createNew: true, write: true, mode: PRIVATE_FILE_MODE });
  } catch (error) {
    if (error instanceof AlreadyExists) return false;
    throw error;
  }
  const stalled = (): boolean => performance.now() - began >= UNPARSABLE_GRACE_MS / 2;
  try {
    await handle.write(encoder.encode(JSON.stringify(record) + "\n"));
  } catch (error) {
    await handle.close().catch(() => undefined);
    if (!stalled()) await fs.remove(path).catch(() => undefined);
    throw error;
  }
  try {
    await handle.close();
  } catch (error) {
    if (!stalled()) await fs.remove(path).catch(() => undefined);
    throw error;
  }
  if (!stalled()) return true;
  // A takeover that read the file empty removes it under this marker: waited for, so the read
  // below comes after any such removal. (A failure to read back is thrown: the caller then
  // judges whether a file with this record was left.)
  const marker = `${path}.takeover-other`;
  while ((await inspectLockFile(context, marker)).kind === "live") await sleep(TAKEOVER_WAIT_MS);
  const back = await readLockBytes(fs, path);
  return back !== undefined && parseLockRecord(back)?.token === record.token;
}

/**
 * Another process's takeover of a stale lock, found holding its marker: the marker's path and
 * the record in it (undefined while it is not written yet).
 */
interface OtherTakeover {
  readonly marker: string;
  readonly holder: LockRecord | undefined;
}

/**
 * Removes the stale lock holding `staleToken` (or an unparsable stale lock when `staleToken` is
 * undefined) under an exclusive takeover marker. Returns undefined when the lock file is gone or
 * no longer holds the stale token (another process may have taken the lock meanwhile), or the
 * takeover of another live process that holds the marker (the lock is left to it).
 */
async function removeStaleLock(
  context: StoreContext,
  lockPath: string,
  staleToken: string | undefined,
  own: LockRecord,
  removed: string[] = [],
): Promise<OtherTakeover | undefined> {
  const fs = context.fs;
  // The token comes from a file: only a token of the shape this library writes names the marker.
  const tag = staleToken !== undefined && TOKEN_SHAPE.test(staleToken) ? staleToken : "other";
  const marker = `${lockPath}.takeover-${tag}`;
  let created = await createLockFile(context, marker, own);
  if (!created) {
    // Another process is taking over the same stale lock, or died doing it. Its marker may be
    // caught between its create and its write: it is dead only if it stays unreadable. A dead
    // marker is removed and the takeover tried once more.
    const state = await inspectLockFile(context, marker);
    if (state.kind === "free") return undefined;
    if (state.kind === "live") return { marker, holder: state.record };
    // Under the same protocol, one level down: a read-then-remove of the dead marker could
    // remove a live one that another racer created in between, letting two takeovers proceed.
    await removeStaleLock(context, marker, state.record?.token, own, removed);
    created = await createLockFile(context, marker, own);
    if (!created) return { marker, holder: undefined };
  }
  try {
    const bytes = await readLockBytes(fs, lockPath);
    if (bytes === undefined) return undefined;
    const current = parseLockRecord(bytes);
    if (current?.token !== staleToken) return undefined;
    if (staleToken === undefined) {
      // An unparsable lock may be a writer's, created and not yet written since it was judged:
      // it is removed only if it stays unparsable through the grace period again.
      const again = await inspectLockFile(context, lockPath);
      if (again.kind !== "stale" || again.record !== undefined) return undefined;
    }
    await fs.remove(lockPath);
    if (staleToken !== undefined) abandonedTokens.delete(staleToken);
    removed.push(lockPath);
    return undefined;
  } finally {
    // Only this takeover's own marker: another process may have judged it dead and replaced it.
    await removeIfHolding(fs, marker, own.token);
  }
}

/**
 * Removes the lock file or marker at `path` when it still holds `token` (or, for `undefined`,
 * is still unparsable); anything else there now belongs to someone else and is left alone.
 * True when this call removed it.
 */
async function removeIfHolding(
  fs: FileSystem,
  path: string,
  token: string | undefined,
): Promise<boolean> {
  const bytes = await readLockBytes(fs, path);
  if (bytes === undefined || parseLockRecord(bytes)?.token !== token) return false;
  try {
    await fs.remove(path);
    return true;
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
    return false;
  }
}

/** How long a writer waits for another process's takeover of a stale lock to end. */
const TAKEOVER_WAIT_TOTAL_MS = 500;
/** How often a waiting acquirer looks whether that takeover ended. */
const TAKEOVER_WAIT_MS = 10;

/**
 * A few attempts at the file lock, taking over stale locks; reports a live holder. Another live
 * process's takeover of the same stale lock (a cleanup's, another writer's) is waited for up to
 * `waitMs` (on the real clock, from when it is first found) rather than spent as an attempt, so
 * the lock is not refused while nobody holds it; one that outlasts the wait is reported as that
 * process holding the lock. Lock files a takeover removed are added to `removed`.
 */
async function tryFileLock(
  context: StoreContext,
  lockPath: string,
  own: LockRecord,
  waitMs: number,
  removed: string[] = [],
): Promise<{ taken: true } | { taken: false; holder: LockRecord | undefined }> {
  // From when another takeover is first found: judging the lock may have taken a grace period.
  let waitUntil: number | undefined;
  for (let attempt = 0; attempt < 4; attempt++) {
    if (await createLockFile(context, lockPath, own)) return { taken: true };
    const state = await inspectLockFile(context, lockPath);
    if (state.kind === "free") continue;
    if (state.kind === "live") return { taken: false, holder: state.record };
    const other = await removeStaleLock(context, lockPath, state.record?.token, own, removed);
    if (other === undefined) continue;
    // Waited for by looking at the two files only: judging the lock again would wait out an
    // unparsable one's grace period each time.
    waitUntil ??= Date.now() + waitMs;
    let busy = true;
    while (busy && Date.now() < waitUntil) {
      await sleep(TAKEOVER_WAIT_MS);
      busy = await takingOver(context, lockPath, state.record?.token, other.marker);
    }
    if (busy) return { taken: false, holder: other.holder };
    // That takeover ended (the lock is gone, or another's now): not an attempt of this call.
    if (Date.now() < waitUntil) attempt--;
  }
  const state = await inspectLockFile(context, lockPath);
  return { taken: false, holder: state.kind === "live" ? state.record : undefined };
}

/**
 * True while the stale lock at `lockPath` (holding `staleToken`, or unparsable when undefined)
 * is still there and the takeover marker `marker` still holds a takeover: it exists, and the
 * process its record names still runs (a marker not written yet counts as held: judging it dead
 * takes a grace period, which the next attempt spends).
 */
async function takingOver(
  context: StoreContext,
  lockPath: string,
  staleToken: string | undefined,
  marker: string,
): Promise<boolean> {
  const fs = context.fs;
  const bytes = await readLockBytes(fs, lockPath);
  if (bytes === undefined || parseLockRecord(bytes)?.token !== staleToken) return false;
  const markerBytes = await readLockBytes(fs, marker);
  if (markerBytes === undefined) return false;
  const holder = parseLockRecord(markerBytes);
  const probe = context.probe;
  return holder === undefined || probe === undefined || isLive(holder, probe);
}

function newRecord(context: StoreContext, probe: ProcessProbe): LockRecord {
  const processStart = probe.processStart?.(probe.pid);
  const pidNamespace = probe.pidNamespace;
  return {
    pid: probe.pid,
    host: probe.host,
    startedAt: new Date(context.now()).toISOString(),
    token: globalThis.crypto.randomUUID(),
    ...(processStart === undefined ? {} : { processStart }),
    ...(pidNamespace === undefined ? {} : { pidNamespace }),
  };
}

function lockedError(
  context: StoreContext,
  lockPath: string,
  holder: LockRecord | undefined,
): SessionLockedError {
  const who = holder === undefined
    ? "another process"
    : `process ${holder.pid} on host ${JSON.stringify(holder.host)} (since ${holder.startedAt})`;
  return new SessionLockedError(
    `Session is being written by ${who}; close it there first, or open it read-only${
      hint(context, holder)
    }`,
    { file: lockPath, pid: holder?.pid, host: holder?.host },
  );
}

function collectionLockedError(
  context: StoreContext,
  lockPath: string,
  holder: LockRecord | undefined,
): SessionLockedError {
  return new SessionLockedError(
    `Session collection is locked by ${
      holder === undefined ? "another process" : `process ${holder.pid}`
    }; try again when its operation finished${hint(context, holder)}`,
    { file: lockPath, pid: holder?.pid, host: holder?.host },
  );
}

/** What a refusal adds when this store cannot tell whether the holder still runs. */
function hint(context: StoreContext, holder: LockRecord | undefined): string {
  const probe = context.probe;
  if (probe === undefined) return PROBELESS_HINT;
  if (holder !== undefined && namespaceUnknown(holder, probe)) {
    return ` (its lock names pid namespace ${
      JSON.stringify(holder.pidNamespace)
    } and this process cannot read its own from /proc/self/ns/pid, so whether that process ` +
      "still runs cannot be checked from here: it may run in a container or sandbox sharing " +
      "this host name. Run with permission to read /proc (on Deno, -A) to check it, or, if no " +
      "process holds the lock, remove the lock file by hand)";
  }
  if (holder !== undefined && mayNotSignal(holder, probe)) {
    return ` (this process may not signal process ${holder.pid} to check whether it still runs, ` +
      "so its lock is respected as live: on Deno, grant --allow-run to take over a lock whose " +
      "holder is gone, or, if no process holds the lock, remove the lock file by hand)";
  }
  return "";
}

/**
 * True when `record` was judged by its pid on this host (same host and pid namespace, another
 * pid) with a probe that may not signal that pid, which it reports alive for want of a check.
 */
function mayNotSignal(record: LockRecord, probe: ProcessProbe): boolean {
  return record.host === probe.host && record.pid !== probe.pid &&
    (record.pidNamespace === undefined || record.pidNamespace === probe.pidNamespace) &&
    probe.maySignal?.() === false;
}

/** What a refusal adds when the store has no probe to tell a dead holder from a live one. */
const PROBELESS_HINT =
  " (this store has no process probe to tell whether that process still runs: give it one, " +
  "such as nodeProcessProbe(), or on Deno grant --allow-sys=hostname, to take over a lock its " +
  "holder left behind)";

/**
 * Takes the writer lock of the session directory `dir`: fails at once with `SessionBusyError`
 * when this process already holds it, or `SessionLockedError` when a live process does. A stale
 * lock is taken over. Without a probe no lock file is made, only the in-process registration, and
 * one another process made refuses the lock (`SessionLockedError`). A `brief` hold
 * (maintenance) is waited for by the other writers of this process rather than refused. A
 * `holder` (such as `"compacted"`) says what the session is being while the lock is held, in the
 * `SessionBusyError` another writer of this process gets meanwhile (by default, the message
 * names an open `SessionManager`).
 */
export async function acquireWriterLock(
  context: StoreContext,
  dir: string,
  options: { readonly brief?: boolean; readonly holder?: string } = {},
): Promise<HeldLock> {
  // One key however the directory is spelled, so a second spelling is refused in this process.
  const lockPath = await canonicalLockPath(context.fs, join(dir, WRITER_LOCK_FILE));
  let holds = briefHolds.get(context.fs);
  for (let hold = holds?.get(lockPath); hold !== undefined; hold = holds?.get(lockPath)) {
    await hold;
  }
  if (options.brief !== true) return await takeWriterLock(context, lockPath, options.holder);
  // The hold is announced before the lock is taken, so a writer of this process that comes
  // while it is being taken waits too; it ends when the lock is released, or at once when it
  // could not be taken.
  if (holds === undefined) {
    holds = new Map();
    briefHolds.set(context.fs, holds);
  }
  const brief = holds;
  let end!: () => void;
  const hold = new Promise<void>((resolve) => {
    end = () => {
      if (brief.get(lockPath) === hold) brief.delete(lockPath);
      resolve();
    };
  });
  brief.set(lockPath, hold);
  try {
    const held = await takeWriterLock(context, lockPath);
    releaseHooks.set(held, end);
    return held;
  } catch (error) {
    end();
    throw error;
  }
}

async function takeWriterLock(
  context: StoreContext,
  lockPath: string,
  holder?: string,
): Promise<HeldLock> {
  const map = registry(context.fs);
  const token = map.get(lockPath);
  if (token !== undefined) {
    const holder = holders.get(token);
    throw new SessionBusyError(
      holder === undefined
        ? "Session is already open for writing in this process; close() the other SessionManager first"
        : `Session is being ${holder} in this process; open it for writing once that has finished (or read-only meanwhile)`,
      { file: lockPath },
    );
  }
  const probe = context.probe;
  if (probe === undefined) {
    // Registered first (a concurrent call in this process fails fast), then a lock file another
    // process made is respected: this store makes none of its own.
    const token = globalThis.crypto.randomUUID();
    map.set(lockPath, token);
    if (holder !== undefined) holders.set(token, holder);
    try {
      const state = await foreignLock(context, lockPath);
      if (state.kind !== "free") throw lockedError(context, lockPath, state.record);
    } catch (error) {
      holders.delete(token);
      if (map.get(lockPath) === token) map.delete(lockPath);
      throw error;
    }
    return new HeldLock(context.fs, lockPath, token, false);
  }
  const own = newRecord(context, probe);
  // Registered before the file exists, so a concurrent call in this process fails fast (and is
  // told who is taking the lock).
  map.set(lockPath, own.token);
  heldTokens.add(own.token);
  if (holder !== undefined) holders.set(own.token, holder);
  try {
    const result = await tryFileLock(context, lockPath, own, TAKEOVER_WAIT_TOTAL_MS);
    if (!result.taken) throw lockedError(context, lockPath, result.holder);
  } catch (error) {
    // A failure (not a refusal) may leave a file with this token behind: a lock file whose
    // removal failed, or a takeover marker.
    dropToken(
      own.token,
      !(error instanceof SessionLockedError) && await mayHoldToken(context, lockPath, own.token),
    );
    holders.delete(own.token);
    if (map.get(lockPath) === own.token) map.delete(lockPath);
    throw error;
  }
  return new HeldLock(context.fs, lockPath, own.token, true);
}

/** What taking a collection lock did, given to the task run under it. */
export interface CollectionLockTaken {
  /** The stale lock files (and takeover markers) removed to take it. */
  readonly removedStale: readonly string[];
}

/**
 * Runs `task` holding the collection lock of `collection`: callers in this process wait their
 * turn; a live lock of another process (without a probe, any lock file), or another process's
 * takeover of a stale one, is waited for up to `context.collectionLockWaitMs` (then
 * `SessionLockedError`), and, with a probe, a stale one is taken over (the files removed are
 * given to `task`).
 * The collection directory must exist.
 */
export async function withCollectionLock<T>(
  context: StoreContext,
  collection: string,
  task: (taken: CollectionLockTaken) => Promise<T>,
): Promise<T> {
  const fs = context.fs;
  const lockPath = join(collection, COLLECTION_LOCK_FILE);
  const queue = queues.get(fs) ?? new Map<string, Promise<void>>();
  queues.set(fs, queue);
  // Queued by the spelling given first (callers keep their order), then by the directory's real
  // path, so that callers through another spelling of it (a symlink) wait for this one: without
  // a probe, nothing else keeps them apart.
  return await inTurn(queue, lockPath, async () => {
    const canonical = await canonicalLockPath(fs, lockPath);
    return await inTurn(queue, `\0${canonical}`, async () => {
      const removedStale: string[] = [];
      const held = await takeCollectionLock(context, canonical, removedStale);
      try {
        return await task({ removedStale });
      } finally {
        // The operation's outcome stands either way: a lock file that cannot be removed now is
        // stale once this process no longer holds its token, and the next writer takes it over.
        await held.release().catch(() => undefined);
      }
    });
  });
}

/** Runs `task` after the tasks queued before it under `key` in `tails` settled. */
async function inTurn<T>(
  tails: Map<string, Promise<void>>,
  key: string,
  task: () => Promise<T>,
): Promise<T> {
  const previous = tails.get(key) ?? Promise.resolve();
  let done!: () => void;
  const mine = new Promise<void>((resolve) => {
    done = resolve;
  });
  const tail = previous.then(() => mine);
  tails.set(key, tail);
  await previous;
  try {
    return await task();
  } finally {
    done();
    if (tails.get(key) === tail) tails.delete(key);
  }
}

async function takeCollectionLock(
  context: StoreContext,
  lockPath: string,
  removed: string[],
): Promise<HeldLock> {
  const map = registry(context.fs);
  const probe = context.probe;
  // Measured on the real clock: the store's `now` dates records, and a host (a test) may fix it.
  const deadline = Date.now() + context.collectionLockWaitMs;
  if (probe === undefined) {
    // No lock file of its own; one another process made is waited for, as a live lock is.
    for (;;) {
      const state = await foreignLock(context, lockPath);
      if (state.kind === "free") break;
      if (Date.now() >= deadline) throw collectionLockedError(context, lockPath, state.record);
      await sleep(COLLECTION_POLL_MS);
    }
    const token = globalThis.crypto.randomUUID();
    map.set(lockPath, token);
    return new HeldLock(context.fs, lockPath, token, false);
  }
  const own = newRecord(context, probe);
  heldTokens.add(own.token);
  try {
    for (;;) {
      const waitMs = Math.max(0, deadline - Date.now());
      const result = await tryFileLock(context, lockPath, own, waitMs, removed);
      if (result.taken) break;
      if (Date.now() >= deadline) throw collectionLockedError(context, lockPath, result.holder);
      await sleep(COLLECTION_POLL_MS);
    }
  } catch (error) {
    // As for a writer lock: a failure may leave a file with this token behind.
    dropToken(
      own.token,
      !(error instanceof SessionLockedError) && await mayHoldToken(context, lockPath, own.token),
    );
    throw error;
  }
  map.set(lockPath, own.token);
  return new HeldLock(context.fs, lockPath, own.token, true);
}

/** True when `name` is a lock file or a takeover marker (never session data). */
export function isLockFileName(name: string): boolean {
  return name === WRITER_LOCK_FILE || name.startsWith(`${WRITER_LOCK_FILE}.takeover-`) ||
    name === COLLECTION_LOCK_FILE || name.startsWith(`${COLLECTION_LOCK_FILE}.takeover-`);
}

/**
 * Removes the lock files (regular files with a lock file's name) of `dir`, a session directory
 * that an interrupted structural operation (a compaction, a delete) moved aside while it held the
 * session's writer lock, before recovery puts it back. They are that operation's own: writers
 * cannot hold the lock of a directory moved aside under it, and the operation no longer runs,
 * since recovery holds the collection lock it held. Left there, a lock naming this process (an
 * operation whose rollback failed) would keep the session locked for as long as the process
 * lives. Anything else named like a lock (a directory, a link) is left for writers to refuse.
 */
export async function dropMovedLocks(context: StoreContext, dir: string): Promise<void> {
  let removed = false;
  for (const entry of await context.fs.readDir(dir)) {
    if (entry.kind !== "file" || !isLockFileName(entry.name)) continue;
    if (await removeIfExists(context.fs, join(dir, entry.name))) removed = true;
  }
  if (removed && context.durability === "full") await context.fs.syncDir(dir);
}

/**
 * Removes the stale lock file and stale takeover markers in `dir` (a session directory or a
 * collection). Returns the removed paths. Live locks are left alone.
 */
export async function removeStaleLocks(
  context: StoreContext,
  dir: string,
  names: readonly string[],
): Promise<string[]> {
  const removed: string[] = [];
  for (const name of names) {
    if (!isLockFileName(name)) continue;
    const path = join(dir, name);
    if (name === COLLECTION_LOCK_FILE) continue; // held by the caller during cleanup
    let state;
    try {
      state = await inspectLock(context, path);
    } catch (error) {
      // Not a regular file: never made by this library, left alone (writers refuse it).
      if (error instanceof SessionFormatError) continue;
      throw error;
    }
    // Only a store with a probe finds a lock stale (without one every lock file is live).
    const probe = context.probe;
    if (state.kind !== "stale" || probe === undefined) continue;
    // Under the takeover protocol, and only while it still holds the stale token: a writer may
    // have taken the stale lock over since it was inspected, or a racer replaced a dead marker
    // with its own. The marker's token is held meanwhile, so a takeover in this process too sees
    // the marker as live.
    const own = newRecord(context, probe);
    heldTokens.add(own.token);
    let done = false;
    try {
      await removeStaleLock(context, path, state.record?.token, own, removed);
      done = true;
    } finally {
      // A failed takeover may leave its marker behind.
      dropToken(own.token, !done);
    }
  }
  return removed;
}
