/**
 * Maintenance of a collection: leftovers of interrupted operations are recovered or removed.
 *
 * - `.staging-<id>-*` directories: an interrupted compaction whose session directory is missing
 *   is rolled back (its previous directory renamed into place); every other staging directory
 *   (migration, or compaction before or after its swap) is removed.
 * - `.delete-*` directories: a committed delete is finished, an uncommitted one rolled back (see
 *   `archive.ts`).
 * - `.*.tmp` files of the collection (an interrupted archive.json replace) are removed.
 *
 * `recoverLeftovers` does this for the collection level and runs, under the collection lock,
 * before every structural operation (migration, archive membership, delete, compaction, legacy
 * backup removal); a read-only open that migrates a legacy file runs it only when something of
 * that session is held aside (see `SessionStore.open`), and otherwise changes nothing else.
 * `cleanupCollection` (`SessionStore.cleanup`) also visits every session directory that no writer
 * holds, removing its `.*.tmp` files and stale lock files while it holds the session's writer lock
 * (so no save can start meanwhile).
 *
 * @module
 */
import { NotFound } from "../port/errors.ts";
import { join } from "../port/path.ts";
import { isTempName, readDirIfExists, removeIfExists } from "../port/durable.ts";
import { isSessionId } from "./records/mod.ts";
import {
  acquireWriterLock,
  inspectLock,
  isLockFileName,
  removeStaleLocks,
  type StoreContext,
  WRITER_LOCK_FILE,
} from "./lock.ts";
import {
  CorruptSessionError,
  SessionBusyError,
  SessionFormatError,
  SessionLockedError,
} from "./errors.ts";
import { isDeleteStagingName, recoverDeletion } from "./archive.ts";
import { recoverStaging, stagingSessionId } from "./compaction.ts";

/** What a recovery or cleanup did, as absolute paths. */
export interface CleanupReport {
  /** Leftovers removed: staging directories, temp files, stale locks. */
  readonly removed: string[];
  /** Sessions put back: interrupted compactions and uncommitted deletes rolled back. */
  readonly restored: string[];
  /** Committed deletes whose staged content was removed. */
  readonly finished: string[];
  /**
   * Staging directories left in place: a compaction's that holds a session's previous directory
   * while something other than a session directory is where it belongs (or whose name names no
   * session), a delete's whose journal cannot be read while it holds staged entries, a delete's
   * whose rollback found a session's legacy file, directory or compaction copy in the collection
   * again (archiving, restoring and deleting that session are refused until one of the two copies
   * is moved out of the collection), and a rolled-back delete's that still holds companion files
   * (trace files) whose names exist again in the collection (a later delete of that session takes
   * them along), or a `kept-<n>` folder that is not a directory (a link is never followed) or
   * holds something other than its trace file, or anything else a delete never stages there. The
   * first three may hold a session's only copy.
   * Look at them by hand.
   */
  readonly kept: string[];
}

/**
 * Recovers the collection-level leftovers of `collection` (see the module doc). The caller holds
 * the collection lock. A missing collection has nothing to recover.
 */
export async function recoverLeftovers(
  context: StoreContext,
  collection: string,
): Promise<CleanupReport> {
  const fs = context.fs;
  const report = {
    removed: [] as string[],
    restored: [] as string[],
    finished: [] as string[],
    kept: [] as string[],
  };
  let entries;
  try {
    entries = await fs.readDir(collection);
  } catch (error) {
    if (error instanceof NotFound) return report;
    throw error;
  }
  let removedFiles = false;
  for (const entry of entries) {
    const path = join(collection, entry.name);
    // Only the names the store makes: `.staging-<id>-<random>` (a name that names no session is
    // not the store's, and is left alone), `.delete-<uuid>`, and temp files (`isTempName`).
    if (entry.kind === "directory" && stagingSessionId(entry.name) !== undefined) {
      const outcome = await recoverStaging(context, collection, entry.name);
      report[outcome === "restored" ? "restored" : outcome === "kept" ? "kept" : "removed"].push(
        path,
      );
    } else if (entry.kind === "directory" && isDeleteStagingName(entry.name)) {
      let outcome: Awaited<ReturnType<typeof recoverDeletion>>;
      try {
        outcome = await recoverDeletion(context, collection, entry.name);
      } catch (error) {
        // A staged delete whose journal cannot be read (torn by a power loss under "ordered",
        // or damaged) is left for inspection and reported: it must not stop every other
        // operation of the collection. Listings report its sessions as failures.
        if (!(error instanceof CorruptSessionError)) throw error;
        report.kept.push(path);
        continue;
      }
      (outcome === "restored"
        ? report.restored
        : outcome === "finished"
        ? report.finished
        : outcome === "kept"
        ? report.kept
        : report.removed).push(path);
    } else if (entry.kind === "file" && isTempName(entry.name)) {
      // Gone since the listing (removed by hand, or renamed into place by another process that
      // does not take the collection lock, such as a store without a probe): nothing to remove.
      if (!(await removeIfExists(fs, path))) continue;
      report.removed.push(path);
      removedFiles = true;
    }
  }
  if (removedFiles && context.durability === "full") await fs.syncDir(collection);
  return report;
}

/**
 * `recoverLeftovers`, then every session directory no writer holds: its `.*.tmp` files and stale
 * lock files are removed. The caller holds the collection lock.
 */
export async function cleanupCollection(
  context: StoreContext,
  collection: string,
): Promise<CleanupReport> {
  const fs = context.fs;
  const report = await recoverLeftovers(context, collection);
  let entries;
  try {
    entries = await fs.readDir(collection);
  } catch (error) {
    if (error instanceof NotFound) return report;
    throw error;
  }
  report.removed.push(...await removeStaleLocks(context, collection, entries.map((e) => e.name)));
  for (const entry of entries) {
    if (entry.kind !== "directory" || !isSessionId(entry.name)) continue;
    await cleanupSession(context, join(collection, entry.name), report.removed);
  }
  return report;
}

/**
 * Removes the `.*.tmp` files and stale lock files of the session directory `dir`; a session held
 * by a writer (here or live elsewhere) is skipped. Stale lock files are removed under the
 * takeover protocol (see `removeStaleLocks`). Temp files are removed only while cleanup holds the
 * session's writer lock (briefly: a writer opening it in this process meanwhile waits; one in
 * another process sees it held for that moment), so the temp file of a save that starts
 * meanwhile is never removed. A session with nothing to remove is not locked at all.
 */
async function cleanupSession(
  context: StoreContext,
  dir: string,
  removed: string[],
): Promise<void> {
  const fs = context.fs;
  const lockPath = join(dir, WRITER_LOCK_FILE);
  let before;
  try {
    before = await inspectLock(context, lockPath);
  } catch (error) {
    // A lock entry that is not a regular file (never made by this library) is left alone, and
    // so is its session: writers refuse it with the same error.
    if (error instanceof SessionFormatError) return;
    throw error;
  }
  if (before.kind === "held-here" || before.kind === "live") return;
  let entries;
  try {
    entries = await fs.readDir(dir);
  } catch (error) {
    if (error instanceof NotFound) return;
    throw error;
  }
  const lockFiles = entries.map((e) => e.name).filter(isLockFileName);
  if (!entries.some((entry) => entry.kind === "file" && isTempName(entry.name))) {
    const locks = await removeStaleLocks(context, dir, lockFiles);
    removed.push(...locks);
    if (locks.length > 0 && context.durability === "full") await syncDirIfThere(context, dir);
    return;
  }
  let lock;
  try {
    lock = await acquireWriterLock(context, dir, { brief: true });
  } catch (error) {
    // Taken meanwhile, or the directory went away: nothing of it to clean.
    if (
      error instanceof SessionBusyError || error instanceof SessionLockedError ||
      error instanceof NotFound
    ) return;
    throw error;
  }
  let changed = false;
  try {
    // The directory, or a temp file of it, may be gone meanwhile (removed by hand, or by another
    // process that does not take the store's locks): nothing of it is left to clean then.
    for (const entry of await readDirIfExists(fs, dir)) {
      if (entry.kind !== "file" || !isTempName(entry.name)) continue;
      if (!(await removeIfExists(fs, join(dir, entry.name)))) continue;
      removed.push(join(dir, entry.name));
      changed = true;
    }
    const others = lockFiles.filter((name) => name !== WRITER_LOCK_FILE);
    const locks = await removeStaleLocks(context, dir, others);
    removed.push(...locks);
    changed ||= locks.length > 0;
  } finally {
    // Released whatever happened (`release` tries a failed removal once more); a lock file that
    // still cannot be removed is stale once this process is gone, and the other sessions are
    // still cleaned.
    await lock.release().catch(() => undefined);
  }
  if (before.kind === "stale") {
    removed.push(lockPath);
    changed = true;
  }
  // A takeover of a stale writer lock removes its stale marker itself: reported too.
  const left = new Set(await listLockFiles(context, dir));
  for (const name of lockFiles) {
    const path = join(dir, name);
    if (name === WRITER_LOCK_FILE || left.has(name) || removed.includes(path)) continue;
    removed.push(path);
    changed = true;
  }
  if (changed && context.durability === "full") await syncDirIfThere(context, dir);
}

/** Makes the entries of `dir` durable, unless it is gone (then there is nothing of it to sync). */
async function syncDirIfThere(context: StoreContext, dir: string): Promise<void> {
  try {
    await context.fs.syncDir(dir);
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
  }
}

/** The names of the lock files (and takeover markers) in `dir`; none when it is gone. */
async function listLockFiles(context: StoreContext, dir: string): Promise<string[]> {
  try {
    return (await context.fs.readDir(dir)).map((e) => e.name).filter(isLockFileName);
  } catch (error) {
    if (error instanceof NotFound) return [];
    throw error;
  }
}
