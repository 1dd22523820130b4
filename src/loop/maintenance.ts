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
 * backup removal). `cleanupCollection` (`SessionStore.cleanup`) also visits every session
 * directory that no writer holds, removing `.*.tmp` files and stale writer locks.
 *
 * @module
 */
import { NotFound } from "../port/errors.ts";
import { join } from "../port/path.ts";
import { isSessionId } from "./records/mod.ts";
import { inspectLock, removeStaleLocks, type StoreContext, WRITER_LOCK_FILE } from "./lock.ts";
import { DELETE_PREFIX, recoverDeletion } from "./archive.ts";
import { recoverStaging } from "./compaction.ts";
import { STAGING_PREFIX } from "./legacy.ts";

/** What a recovery or cleanup did, as absolute paths. */
export interface CleanupReport {
  /** Leftovers removed: staging directories, temp files, stale locks. */
  readonly removed: string[];
  /** Sessions put back: interrupted compactions and uncommitted deletes rolled back. */
  readonly restored: string[];
  /** Committed deletes whose staged content was removed. */
  readonly finished: string[];
}

function isTempName(name: string): boolean {
  return name.startsWith(".") && name.endsWith(".tmp");
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
  const report = { removed: [] as string[], restored: [] as string[], finished: [] as string[] };
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
    if (entry.kind === "directory" && entry.name.startsWith(STAGING_PREFIX)) {
      const outcome = await recoverStaging(context, collection, entry.name);
      (outcome === "restored" ? report.restored : report.removed).push(path);
    } else if (entry.kind === "directory" && entry.name.startsWith(DELETE_PREFIX)) {
      const outcome = await recoverDeletion(context, collection, entry.name);
      (outcome === "restored"
        ? report.restored
        : outcome === "finished"
        ? report.finished
        : report.removed).push(path);
    } else if (entry.kind === "file" && isTempName(entry.name)) {
      await fs.remove(path);
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
    const dir = join(collection, entry.name);
    const state = await inspectLock(context, join(dir, WRITER_LOCK_FILE));
    if (state.kind === "held-here" || state.kind === "live") continue;
    const names = (await fs.readDir(dir)).map((e) => e.name);
    let removedFiles = false;
    for (const name of names) {
      if (!isTempName(name)) continue;
      await fs.remove(join(dir, name), { recursive: true });
      report.removed.push(join(dir, name));
      removedFiles = true;
    }
    const locks = await removeStaleLocks(context, dir, names);
    report.removed.push(...locks);
    if ((removedFiles || locks.length > 0) && context.durability === "full") {
      await fs.syncDir(dir);
    }
  }
  return report;
}
