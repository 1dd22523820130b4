/**
 * Explicit space reclamation, never automatic: **generation compaction** rewrites a session so
 * `messages.jsonl` holds only its committed generation, and **legacy backup removal** deletes the
 * `<id>.jsonl` a migration left behind once the published directory is valid.
 *
 * ## Compaction, step by step
 *
 * 1. The committed range is copied (in chunks, hashed on the way: the checksum must equal the
 *    generation, which the compacted session keeps) into `<collection>/.staging-<id>-<r>/session/`
 *    beside a meta.json with `start` 0 and a fresh index.json; everything is made durable.
 * 2. `<id>/` is renamed to `<staging>/previous`, then `<staging>/session` to `<id>/`; the
 *    collection is fsynced.
 * 3. The staging directory (with the previous bytes) is removed.
 *
 * The existence of `<staging>/previous` is the journal: it exists only once the session directory
 * was moved there. A crash between the two renames of step 2 leaves no `<id>/` for a moment:
 * discovery lists the
 * session from `<staging>/previous` meanwhile, and recovery (the next structural operation in the
 * collection, or `SessionStore.cleanup`) renames `previous` back. A staging directory whose
 * `<id>/` exists is simply removed. So a reader always sees the old or the compacted session, with
 * the same messages and generation.
 *
 * Compaction takes the session's writer lock: a session open for writing (here or in a live
 * process) is refused. Readers holding the session open should reopen it afterwards.
 *
 * @module
 */
import type { EntryKind, FileSystem } from "../port/fs.ts";
import { NotFound } from "../port/errors.ts";
import {
  entryKind,
  forgetDurable,
  isTempName,
  PRIVATE_DIR_MODE,
  PRIVATE_FILE_MODE,
  readDirIfExists,
  writeNewFile,
} from "../port/durable.ts";
import { basename, dirname, join } from "../port/path.ts";
import { sha256OfHandle } from "../port/sha256.ts";
import { CorruptSessionError, SessionError, SessionFormatError } from "./errors.ts";
import {
  decodeLine,
  encodeRoundIndex,
  encodeStorageMeta,
  INDEX_FILE,
  INDEX_FORMAT,
  INDEX_VERSION,
  indexMatches,
  MESSAGES_FILE,
  META_FILE,
  missingMetaError,
  openMessages,
  openSessionFile,
  readRoundIndex,
  readStorageMeta,
  type RoundEntry,
  shortLog,
  shortReadError,
  type StorageMeta,
} from "./storage.ts";
import { checkMetaId, SessionManager } from "./session_manager.ts";
import { acquireWriterLock, dropMovedLocks, isLockFileName, type StoreContext } from "./lock.ts";
import {
  LEGACY_EXTENSION,
  migratedLogDigests,
  readLegacyHeader,
  STAGING_PREFIX,
  stagingName,
} from "./legacy.ts";
import {
  eligibleTitleOf,
  isSessionId,
  type Message,
  type SessionHeader,
  type SessionTitle,
} from "./records/mod.ts";
import { invalidMessageJson } from "./records/_validation.ts";

/** The staged new session directory inside a compaction's staging directory. */
export const COMPACTION_SESSION = "session";
/** Where a compaction moves the previous session directory (see discovery). */
export const COMPACTION_PREVIOUS = "previous";
const COPY_CHUNK = 4 * 1024 * 1024;

/** What a compaction (`SessionStore.compact`) did. */
export interface CompactionResult {
  /** False when messages.jsonl already held exactly the committed generation. */
  readonly compacted: boolean;
  /** The session directory. */
  readonly dir: string;
  /** The size of messages.jsonl before. */
  readonly bytesBefore: number;
  /** The size of messages.jsonl after. */
  readonly bytesAfter: number;
  /** The committed generation (unchanged by compaction). */
  readonly generation: string;
}

async function sizeOf(context: StoreContext, path: string): Promise<number> {
  try {
    return (await context.fs.lstat(path)).size;
  } catch (error) {
    if (error instanceof NotFound) return 0;
    throw error;
  }
}

/** Splits byte chunks into lines, tracking each line's offset (relative to the first chunk). */
class LineSplitter {
  #carry: Uint8Array[] = [];
  #carryLength = 0;
  #offset = 0;

  /** Calls `onLine` for every line completed by `chunk`. */
  push(chunk: Uint8Array, onLine: (bytes: Uint8Array, offset: number) => void): void {
    let start = 0;
    for (;;) {
      const newline = chunk.indexOf(10, start);
      if (newline < 0) break;
      let bytes = chunk.subarray(start, newline);
      if (this.#carryLength > 0) {
        const joined = new Uint8Array(this.#carryLength + bytes.length);
        let at = 0;
        for (const piece of this.#carry) {
          joined.set(piece, at);
          at += piece.length;
        }
        joined.set(bytes, at);
        bytes = joined;
        this.#carry = [];
        this.#carryLength = 0;
      }
      onLine(bytes, this.#offset);
      this.#offset += bytes.length + 1;
      start = newline + 1;
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      this.#carry.push(rest);
      this.#carryLength += rest.length;
    }
  }

  /** True when bytes after the last newline are pending. */
  get hasPartialLine(): boolean {
    return this.#carryLength > 0;
  }
}

/**
 * Copies the committed range of `dir` to `target` (a new file), verifying the generation and the
 * line count; returns the user rounds (`knownRounds` from a matching index, or rebuilt from the
 * lines) and, when they were rebuilt, the fallback title of the messages (null: none).
 */
async function copyCommitted(
  context: StoreContext,
  dir: string,
  meta: StorageMeta,
  target: string,
  knownRounds: readonly RoundEntry[] | undefined,
): Promise<{ rounds: RoundEntry[]; title: SessionTitle | null | undefined }> {
  const fs = context.fs;
  const file = join(dir, MESSAGES_FILE);
  const hash = context.sha256();
  const rounds: RoundEntry[] = knownRounds === undefined ? [] : [...knownRounds];
  // Derived with the rounds when they are rebuilt: null until an eligible user message is seen.
  let title: SessionTitle | null | undefined = knownRounds === undefined ? null : undefined;
  const splitter = new LineSplitter();
  let lines = 0;
  let invalid: SessionFormatError | undefined;
  const onLine = (bytes: Uint8Array, offset: number): void => {
    if (knownRounds === undefined) {
      let message: { role?: unknown } | null;
      try {
        message = JSON.parse(decodeLine(bytes)) as { role?: unknown } | null;
      } catch (error) {
        // Reported once the checksum shows these are the committed bytes (a damaged range is a
        // CorruptSessionError first, as an open reports it).
        invalid ??= error instanceof SessionFormatError
          ? error
          : invalidMessageJson(error, file, lines);
        lines++;
        return;
      }
      if (message?.role === "user") {
        rounds.push({ messageIndex: lines, byteOffset: offset });
        if (title === null) {
          try {
            title = eligibleTitleOf(message as Message, lines) ?? null;
          } catch {
            // Not a message this library wrote (the checksum check below then fails): no title.
            title = undefined;
          }
        }
      }
    }
    lines++;
  };
  const source = await openMessages(fs, file);
  try {
    const out = await fs.open(target, { createNew: true, write: true, mode: PRIVATE_FILE_MODE });
    try {
      let position = 0;
      while (position < meta.bytes) {
        const length = Math.min(COPY_CHUNK, meta.bytes - position);
        const chunk = await source.read(meta.start + position, length);
        if (chunk.length !== length) {
          const at = meta.start + position + chunk.length;
          throw await shortReadError(source, file, at, meta.start + meta.bytes);
        }
        hash.update(chunk);
        splitter.push(chunk, onLine);
        await out.write(chunk);
        position += length;
      }
      if (splitter.hasPartialLine || lines !== meta.messageCount) {
        throw new CorruptSessionError(
          `Committed range holds ${lines} complete lines but its metadata claims ${meta.messageCount}; the session was not compacted`,
          { file },
        );
      }
      const actual = hash.digestHex();
      if (actual !== meta.generation) {
        throw new CorruptSessionError(
          `Checksum mismatch: committed message bytes hash to ${actual}, metadata says ${meta.generation}; the session was not compacted`,
          { file },
        );
      }
      if (invalid !== undefined) throw invalid;
      if (context.durability === "full") await out.sync();
    } finally {
      await out.close();
    }
  } finally {
    await source.close();
  }
  await fs.chmod(target, PRIVATE_FILE_MODE);
  return { rounds, title };
}

/** Entries a compaction may leave behind in a session directory: lock and temp files. */
function isDisposable(name: string, kind: EntryKind): boolean {
  return kind === "file" &&
    (isLockFileName(name) || isTempName(name));
}

const KNOWN_FILES: ReadonlySet<string> = new Set([META_FILE, MESSAGES_FILE, INDEX_FILE]);

/**
 * Compacts the session directory `dir` (see the module doc). The caller holds the collection
 * lock and has recovered leftovers; this takes the session's writer lock itself.
 *
 * @throws {SessionBusyError} When this process has the session open for writing.
 * @throws {SessionLockedError} When a live process has it open for writing.
 * @throws {CorruptSessionError} When the committed range does not match its metadata (nothing
 * changes).
 * @throws {SessionFormatError} When the directory holds entries compaction does not know, or a
 * committed line is not a JSON value (`messages[<index>]`; nothing changes) where no usable
 * index.json gives the rounds (the lines are then parsed to find them; otherwise they are copied
 * as the checksum verified them).
 */
export async function compactSession(
  context: StoreContext,
  dir: string,
): Promise<CompactionResult> {
  const fs = context.fs;
  const collection = dirname(dir);
  const id = basename(dir);
  const lock = await acquireWriterLock(context, dir, { holder: "compacted" });
  try {
    // Every entry is judged by its own kind (links not followed) before anything is read, so
    // nothing is read through a link or a FIFO.
    const entries = await fs.readDir(dir);
    for (const entry of entries) {
      if (KNOWN_FILES.has(entry.name) && entry.kind === "file") continue;
      if (isDisposable(entry.name, entry.kind)) continue;
      throw new SessionFormatError(
        "Session directory holds an entry compaction does not know; move it away first",
        { file: join(dir, entry.name) },
      );
    }
    if (!entries.some((entry) => entry.name === META_FILE)) {
      throw await missingMetaError(fs, dir);
    }
    const meta = await readStorageMeta(fs, dir, true);
    checkMetaId(meta, id, join(dir, META_FILE));
    const messagesPath = join(dir, MESSAGES_FILE);
    const bytesBefore = await sizeOf(context, messagesPath);
    if (bytesBefore < meta.start + meta.bytes) {
      // An empty range too: the log must reach where the committed range lies, as an open says.
      throw shortLog(messagesPath, bytesBefore, meta.start + meta.bytes);
    }
    if (meta.start === 0 && bytesBefore === meta.bytes) {
      return {
        compacted: false,
        dir,
        bytesBefore,
        bytesAfter: bytesBefore,
        generation: meta.generation,
      };
    }
    const index = await readRoundIndex(fs, dir, true, meta);
    const matching = index !== undefined && indexMatches(index, meta) ? index : undefined;
    const known = matching?.rounds;
    const staging = join(collection, stagingName(id));
    const session = join(staging, COMPACTION_SESSION);
    await fs.mkdir(staging, { mode: PRIVATE_DIR_MODE });
    try {
      await fs.chmod(staging, PRIVATE_DIR_MODE);
      await fs.mkdir(session, { mode: PRIVATE_DIR_MODE });
      await fs.chmod(session, PRIVATE_DIR_MODE);
      const { rounds, title } = await copyCommitted(
        context,
        dir,
        meta,
        join(session, MESSAGES_FILE),
        known,
      );
      const compacted: StorageMeta = { ...meta, start: 0 };
      await writeNewFile(context.fs, join(session, META_FILE), encodeStorageMeta(compacted), {
        durability: context.durability,
      });
      await writeNewFile(
        context.fs,
        join(session, INDEX_FILE),
        encodeRoundIndex({
          format: INDEX_FORMAT,
          version: INDEX_VERSION,
          generation: meta.generation,
          start: 0,
          bytes: meta.bytes,
          messageCount: meta.messageCount,
          // The same messages: the title the index recorded for them (none when it recorded
          // none: listings then read the first user message), or the one just derived.
          fallbackTitle: matching === undefined ? title : matching.fallbackTitle,
          rounds,
        }),
        { durability: context.durability },
      );
      // The compacted copy holds this compaction's writer lock too: once renamed into place it is
      // locked until its move is durable (below), so no writer of another process opens it and
      // resolves a save that a power loss before then would take away with it.
      await lock.copyInto(session);
      if (context.durability === "full") {
        await fs.syncDir(session);
        await fs.syncDir(staging);
        // The staging directory's own entry, before anything moves into it: an fsync of staging
        // does not promise that its creation in the collection is durable, and the previous copy
        // must never be durable in a directory that a crash can take away.
        await fs.syncDir(collection);
      }
      forgetDurable(fs, dir);
      await fs.rename(dir, join(staging, COMPACTION_PREVIOUS));
      await fs.rename(session, dir);
      if (context.durability === "full") {
        // The staging directory first, the destination of the previous directory's move: POSIX
        // does not promise that an fsync of the collection (its source) makes its arrival in
        // staging durable too, so syncing the collection first could let a crash between the two
        // leave the session in neither place (ext4, xfs and btrfs happen to order it). With
        // staging synced first, the previous copy is durable in staging before its removal from
        // the collection can be, and recovery renames it back should the compacted copy not be
        // in place yet.
        await fs.syncDir(staging);
        await fs.syncDir(collection);
      }
    } catch (error) {
      // Before the swap the session is untouched; midway, recovery renames `previous` back.
      await recoverStaging(context, collection, basename(staging)).catch(() => undefined);
      throw error;
    }
    await removeStaging(context, staging);
    if (context.durability === "full") await fs.syncDir(collection);
    return {
      compacted: true,
      dir,
      bytesBefore,
      bytesAfter: meta.bytes,
      generation: meta.generation,
    };
  } finally {
    await lock.release();
  }
}

/** Removes a staging directory, its previous session copy first and its journal last. */
async function removeStaging(context: StoreContext, staging: string): Promise<void> {
  const fs = context.fs;
  for (const name of [COMPACTION_PREVIOUS, COMPACTION_SESSION]) {
    try {
      await fs.remove(join(staging, name), { recursive: true });
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
  }
  await fs.remove(staging, { recursive: true });
}

/** The session id a staging directory name is for, or undefined. */
export function stagingSessionId(name: string): string | undefined {
  // `stagingName`'s shape exactly: `.staging-<id>-<8 hex>`; another name is not the store's.
  if (!name.startsWith(STAGING_PREFIX) || name.length !== STAGING_PREFIX.length + 36 + 9) {
    return undefined;
  }
  const id = name.slice(STAGING_PREFIX.length, STAGING_PREFIX.length + 36);
  const random = name.slice(STAGING_PREFIX.length + 37);
  return isSessionId(id) && name.charAt(STAGING_PREFIX.length + 36) === "-" &&
      /^[0-9a-f]{8}$/.test(random)
    ? id
    : undefined;
}

/**
 * The previous directory `<staging>/previous` of an interrupted compaction when it is a real
 * directory (a link planted there is never followed) holding a regular meta.json: a complete
 * copy of the session to read in place.
 */
export async function previousSession(
  fs: FileSystem,
  staging: string,
): Promise<string | undefined> {
  const previous = join(staging, COMPACTION_PREVIOUS);
  if (await entryKind(fs, previous) !== "directory") return undefined;
  return await entryKind(fs, join(previous, META_FILE)) === "file" ? previous : undefined;
}

/**
 * True when the staging directory `staging` is a compaction's that holds a directory at its
 * previous copy's name or its compacted copy: a compaction that may have moved the session
 * directory away, leaving what may be its only copy there (a migration's staging directory holds
 * the session's files themselves; a link or a file there holds no copy of a session).
 */
export async function stoppedBetweenRenames(fs: FileSystem, staging: string): Promise<boolean> {
  return await entryKind(fs, join(staging, COMPACTION_PREVIOUS)) === "directory" ||
    await entryKind(fs, join(staging, COMPACTION_SESSION)) === "directory";
}

/**
 * The first of the compaction staging directories `names` (of session directories in
 * `collection`) that stopped between its renames (`stoppedBetweenRenames`) when none of them holds
 * a previous copy to read (`previousSession`): what recovery keeps while the session is not in
 * place. Undefined when there is none.
 */
export async function damagedCompactionAmong(
  fs: FileSystem,
  collection: string,
  names: readonly string[],
): Promise<string | undefined> {
  let damaged: string | undefined;
  for (const name of names) {
    const staging = join(collection, name);
    if (await previousSession(fs, staging) !== undefined) return undefined;
    if (damaged === undefined && await stoppedBetweenRenames(fs, staging)) damaged = staging;
  }
  return damaged;
}

/** `damagedCompactionAmong` the compaction staging directories of session directory `dir`. */
export async function damagedCompactionOf(
  fs: FileSystem,
  dir: string,
): Promise<string | undefined> {
  const id = basename(dir);
  if (!isSessionId(id)) return undefined;
  const collection = dirname(dir);
  const names = (await readDirIfExists(fs, collection))
    .filter((entry) => entry.kind === "directory" && stagingSessionId(entry.name) === id)
    .map((entry) => entry.name);
  return await damagedCompactionAmong(fs, collection, names);
}

/**
 * The error of a session whose directory is missing while the compaction staging directory
 * `staging` that moved it (`stoppedBetweenRenames`) holds no previous copy to read: listings and
 * read-only opens report it, and recovery keeps the staging directory.
 */
export function damagedCompactionError(staging: string, cause?: unknown): SessionFormatError {
  return new SessionFormatError(
    "Session directory is missing and the compaction that moved it left its previous copy " +
      "damaged (not a directory holding meta.json); its staging directory is kept",
    { file: join(staging, COMPACTION_PREVIOUS), cause },
  );
}

/**
 * Recovers the staging directory `name` of `collection` (migration or compaction leftover):
 * an interrupted compaction whose session directory is missing gets its previous directory
 * renamed back; every other staging directory is removed. Returns what it did.
 *
 * A staging directory that holds a previous session (a real directory with a meta.json) is
 * removed only when the session directory it was swapped with is in place (a real directory
 * whose meta.json is a regular file naming the session): when something else is there (a link,
 * a file, a directory without a readable meta.json, another session's copy), or the staging name
 * names no session, the previous session may be the only copy, so the staging directory is left
 * as it is (`"kept"`) for a person to look at. So is a compaction's staging directory whose
 * previous copy is a directory without meta.json, or which holds its compacted copy, while the
 * session is not in place (`stoppedBetweenRenames`).
 */
export async function recoverStaging(
  context: StoreContext,
  collection: string,
  name: string,
): Promise<"removed" | "restored" | "kept"> {
  const fs = context.fs;
  const staging = join(collection, name);
  const id = stagingSessionId(name);
  const previous = join(staging, COMPACTION_PREVIOUS);
  // As readers judge it (`previousSession`): a directory holding a regular meta.json.
  const holdsPrevious = await previousSession(fs, staging) !== undefined;
  if (holdsPrevious) {
    if (id === undefined) return "kept";
    const target = join(collection, id);
    if (await entryKind(fs, target) === undefined) {
      // Put back only as a session (its meta.json valid, naming it): a damaged one is kept with
      // the compacted copy beside it, never restored over it. A failure to read it propagates
      // (the next recovery looks again).
      if (!(await isSessionCopy(context, previous, id))) return "kept";
      // The lock there is the compaction's own: it took the writer lock before moving the
      // directory, and it no longer runs, since this recovery holds the collection lock it held.
      await dropMovedLocks(context, previous);
      forgetDurable(fs, target);
      await fs.rename(previous, target);
      if (context.durability === "full") await fs.syncDir(collection);
      await removeStaging(context, staging);
      if (context.durability === "full") await fs.syncDir(collection);
      return "restored";
    }
    if (!(await holdsSession(context, target, id))) return "kept";
  } else if (id !== undefined && await stoppedBetweenRenames(fs, staging)) {
    // Its previous copy damaged (not a directory with a meta.json): unless the session is in
    // place, the compacted copy (or what is left of the previous one) may be the only copy.
    if (!(await holdsSession(context, join(collection, id), id))) return "kept";
  }
  await removeStaging(context, staging);
  if (context.durability === "full") await fs.syncDir(collection);
  return "removed";
}

/**
 * True when `dir` is a real directory whose meta.json is a regular file naming session `id`: the
 * compacted session is in place. Anything else there (a link, a file, another session's copy, a
 * meta.json that is missing, not valid or unreadable) is not: the previous copy is then kept, and
 * a failure to read does not stop the other operations of the collection. A kept copy never
 * outlives its session: a delete of the session removes it too (see `archive.ts`).
 */
async function holdsSession(context: StoreContext, dir: string, id: string): Promise<boolean> {
  try {
    if (await entryKind(context.fs, dir) !== "directory") return false;
    if (await entryKind(context.fs, join(dir, META_FILE)) !== "file") return false;
    return await isSessionCopy(context, dir, id);
  } catch {
    return false;
  }
}

/**
 * True when the previous copy `dir` (a directory holding a regular meta.json) has a valid
 * meta.json naming session `id`; false when it is missing or damaged (not valid, another
 * session's). Any other failure to read it (an I/O error) propagates.
 */
async function isSessionCopy(context: StoreContext, dir: string, id: string): Promise<boolean> {
  try {
    return (await readStorageMeta(context.fs, dir)).header.id === id;
  } catch (error) {
    if (error instanceof NotFound || error instanceof SessionError) return false;
    throw error;
  }
}

/**
 * The error of a legacy backup `removeLegacyBackup` leaves alone because reading it failed with
 * `error`: a `SessionFormatError` naming the file (and the field `error` names); any error that is
 * not a session error is returned as it is.
 */
function leftAlone(legacy: string, message: string, error: unknown): unknown {
  if (!(error instanceof SessionError)) return error;
  return new SessionFormatError(message, {
    file: legacy,
    ...(error instanceof SessionFormatError && error.path !== "" ? { path: error.path } : {}),
    cause: error,
  });
}

/**
 * The size and SHA-256 of the first `size` bytes of the log `file` (fewer when it is shorter), or
 * undefined when it is missing. Read in chunks, never through a link.
 */
async function logPrefixDigest(
  context: StoreContext,
  file: string,
  size: number,
): Promise<{ readonly size: number; readonly hex: string } | undefined> {
  let opened;
  try {
    opened = await openSessionFile(context.fs, file);
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
  const { handle } = opened;
  try {
    return await sha256OfHandle({
      read: (offset, length) =>
        offset >= size
          ? Promise.resolve(new Uint8Array(0))
          : handle.read(offset, Math.min(length, size - offset)),
    }, context.sha256);
  } finally {
    await handle.close();
  }
}

/**
 * Removes the legacy backup `<collection>/<id>.jsonl` of the session directory `dir` once the
 * directory is valid (fully validated like an open) and the file is the one it was migrated from.
 * Returns false when there is no backup. The caller holds the collection lock.
 *
 * A migration copies the file's header into the directory, and nothing changes its id, cwd or
 * createdAt afterwards: a file whose header differs from the directory's in one of them, or
 * cannot be read, was not migrated into it. Such a file (another session's, which a directory
 * published under its id hides) may be the only copy of its session, and is left alone. So is a
 * file whose history is no longer what the migration wrote at the start of messages.jsonl (its
 * first generation, which later saves, even ones that rewrite the history, leave in place): an
 * older Loop that kept writing the file after the migration left messages there that the
 * session lacks. (After a compaction the log starts with the current history: a backup of a
 * session whose history was rewritten, then compacted, is kept too; removing it is then the
 * user's call.)
 *
 * @throws Whatever opening `dir` throws: an invalid directory keeps its backup.
 * @throws {SessionFormatError} When the file is not a regular file, it cannot be read whole, its
 * id, cwd or createdAt is not the directory's (naming the file and the field), or its history is
 * not what the log starts with (naming `messages`).
 */
export async function removeLegacyBackup(context: StoreContext, dir: string): Promise<boolean> {
  const fs = context.fs;
  const collection = dirname(dir);
  const legacy = join(collection, basename(dir) + LEGACY_EXTENSION);
  try {
    const info = await fs.lstat(legacy);
    if (info.kind !== "file") {
      throw new SessionFormatError("Legacy backup is not a regular file; it was left alone", {
        file: legacy,
      });
    }
  } catch (error) {
    if (error instanceof NotFound) return false;
    throw error;
  }
  const manager = await SessionManager.open({
    context,
    dir,
    collectionDir: collection,
    readOnly: true,
  });
  await manager.close();
  // The directory must be this backup's session, as an open requires: a copy of another
  // session published under this id leaves the backup as the only copy of its own.
  if (manager.id !== basename(dir)) {
    throw new SessionFormatError(
      "Session id does not match its directory name; the legacy backup was left alone",
      { file: manager.getSessionFile(), path: "header.id", value: manager.id },
    );
  }
  let backup: SessionHeader;
  try {
    backup = await readLegacyHeader(fs, legacy);
  } catch (error) {
    throw leftAlone(
      legacy,
      "Legacy file's header cannot be read, so it is not known to be this session's backup; it was left alone",
      error,
    );
  }
  const header = manager.getHeader();
  for (const field of ["id", "cwd", "createdAt"] as const) {
    if (backup[field] !== header[field]) {
      throw new SessionFormatError(
        `Legacy file is not the one this session was migrated from (its ${field} is not the session's); it was left alone`,
        { file: legacy, path: `header.${field}`, value: backup[field] },
      );
    }
  }
  // The file must still be what was migrated, and the log must still start with what the
  // migration wrote of it: a message it holds that the log does not would exist nowhere once the
  // file is gone.
  let migrated: readonly { readonly size: number; readonly hex: string }[];
  try {
    migrated = await migratedLogDigests(fs, legacy, context.sha256);
  } catch (error) {
    throw leftAlone(
      legacy,
      "Legacy file cannot be read whole, so it may hold messages the session lacks; it was left alone",
      error,
    );
  }
  let matches = false;
  for (const expected of migrated) {
    const logged = await logPrefixDigest(context, join(dir, MESSAGES_FILE), expected.size);
    if (logged?.size === expected.size && logged.hex === expected.hex) matches = true;
    if (matches || logged === undefined) break;
  }
  if (!matches) {
    throw new SessionFormatError(
      "Legacy file's history is not what the session's log starts with (messages written to it " +
        "after the migration, or the session's history rewritten and compacted since); it was " +
        "left alone",
      { file: legacy, path: "messages" },
    );
  }
  await fs.remove(legacy);
  if (context.durability === "full") await fs.syncDir(collection);
  return true;
}
