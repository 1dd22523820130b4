/**
 * Session discovery: the sessions of one collection, in both layouts, each session once, newest
 * activity first. Discovery never migrates and never modifies anything.
 *
 * ## What a collection holds
 *
 * - `<id>/` — a version-3 session directory (`id` is 36 characters of `[a-f0-9-]`);
 * - `<id>.jsonl` — a legacy version-2 session, or the backup of a migrated one: a valid
 *   published directory `<id>/` takes precedence, and an **invalid published directory is
 *   reported**, never replaced by its stale backup;
 * - `archive.json` — archive membership; names starting with `.` — staging, delete and temporary
 *   leftovers, and locks: skipped, with two exceptions so that a session never disappears while
 *   an operation on it is interrupted (or still running in another process): a compaction
 *   interrupted between its two renames is listed from its staged previous directory (or, when
 *   it finished since the collection was read, from the session directory back in place), and a
 *   delete that has not committed (`.delete-<uuid>` without its `committed` marker) **did not
 *   happen**: its staged sessions are listed from inside the staging directory, with the archive
 *   membership its rollback restores (or, when it rolled back since the collection was read,
 *   from where the rollback put them back: the ids its journal or staging directory named, or,
 *   when the staging directory was already gone or emptied when looked at, those the
 *   collection read once more holds). A committed delete's sessions are gone. Recovery itself is
 *   left to the next structural operation; listing only reads. archive.json is read before the
 *   sessions; when a listed session is not archived by that read, the journals of uncommitted
 *   deletes and archive.json are read once more after them (once per listing, not per session),
 *   so a delete that takes a session out of archive.json and then rolls back while the listing
 *   runs never makes an archived session look restored.
 *
 * Everything else is skipped without being read: symlinks (even named like a session), a
 * directory named like a legacy file, a file named like a session directory, other names. Files
 * of an unsupported format or version are skipped without modification so they cannot block
 * supported sessions.
 *
 * ## Failures
 *
 * Invalid JSON, invalid current-format metadata, corrupt histories and storage read errors are
 * failures. `discoverSessions` returns them beside the sessions (`ListResult.failures`, one per
 * session, each a typed `SessionError` or `FsError`); `SessionStore.list` throws the first one
 * and `SessionStore.listDetailed` returns them, so a picker is never blocked by one bad session.
 * So is a leftover staging directory that cannot be read: a delete's is one failure without an
 * id (which sessions it stages is unknown), a compaction's fails only a session whose directory
 * has no meta.json (where the session may then be), and archive.json is one failure too.
 *
 * ## The cwd filter and the order
 *
 * With a `cwd` (canonical), a session is kept only when the real path of its recorded cwd equals
 * it (`realpath(header.cwd) === realpath(cwd)`; each distinct recorded cwd is resolved once per
 * listing). A recorded cwd that no longer exists, or is not a directory, does not match: such a
 * session is skipped, never reported, in both modes. Sessions are sorted by `updatedAt`
 * descending, then by id descending, both by plain string comparison.
 *
 * ## Modes
 *
 * The default mode validates complete histories, exactly like an open (checksum, every message,
 * metadata against the history, the recorded cwd). The **fast mode** (`{ fast: true }`) is the
 * one a session picker should use: per session it reads meta.json and index.json, plus the first
 * user message when a fallback title is needed, so its cost grows with the number of sessions,
 * not with their history size. Legacy files have no index: they are read whole in both modes
 * (fast mode skips message validation).
 *
 * What fast mode trusts, exactly (index.json is derived data, so it is checked before use):
 *
 * - **meta.json**: the header, the committed range and the message count are taken as stored;
 *   the messages and the checksum of the committed range are not verified while the index is
 *   used, and the recorded cwd is not checked to be a directory (the cwd filter resolves it).
 *   A count of 0 is taken without reading anything else only over an empty range whose
 *   generation is the SHA-256 of no bytes; any other range is scanned, which reports it.
 * - **index.json's head**: the counts at its start (generation, start, bytes, message count,
 *   round count) and its first round, only when the counts match meta.json (same generation,
 *   start, bytes and message count) **and** fit: no more rounds than messages, at least one round
 *   when there are messages, at least two bytes per line (a line is never empty), and the first
 *   round given. Then the round count is taken as the user message count without reading the
 *   log. The rounds after the first are not read by a listing (a page read checks the whole index
 *   before it uses it), so listing reads the same few bytes of index.json whatever the history's
 *   length: a small index in one call, a large one by its first 4 KiB (the committed counts bound
 *   the size of a well-formed index, `indexSizeBound`). An index.json larger than that bound is
 *   not of this library's form and counts as unusable: a large one is refused by its size (from
 *   the no-follow open's own `fstat`, otherwise an `fstat` of the handle) before any of it is
 *   read, a small one by the length of its one whole-file read, before it is decoded. An
 *   index.json that is not a regular file (a planted link, a device) is never read: it counts as
 *   unusable.
 *
 * Fast mode never reads through a link, and a FIFO planted as a session file cannot make it wait.
 * Where the port has `readFileNoFollow` and `openNoFollow` (the Node and Deno adapters on POSIX,
 * `MemoryFs`), each of meta.json and index.json is read in one call that refuses a final symlink
 * and opens without waiting: per session, a listing costs those two reads and nothing else. A
 * meta.json that is not a regular file is refused as an open refuses it (`SessionFormatError`);
 * an index.json that is not one is not used. messages.jsonl is checked to be a regular file
 * whenever it is read (a fallback title, a scan), and refused otherwise; a listing that does not
 * read it (a stored title and a usable index) does not look at it, as it does not verify its
 * checksum. The log and a large index.json are opened the same way (`openNoFollow`), and the
 * kind checked is the one the opened file's own `fstat` reports: what is checked is what is read.
 * A port without these calls makes fast mode list each session directory first (links not
 * followed) and refuse a meta.json or messages.jsonl that is not a regular file, read or not
 * (a log beside a meta.json of an unsupported format or version is not judged: that session is
 * skipped); there the kind is checked by a call of its own (the listing, or an `lstat`), and a file
 * swapped for a link or a FIFO between that check and the open, by a process that can write the
 * session directory, is not excluded. An index.json that a no-follow read or open finds busy
 * (`EAGAIN`, a lease held by another process) is not used, as if missing.
 * - **the rounds' lines**, read only for a fallback title (no stored title, none remembered for
 *   the generation): the first round's line must start a line (offset 0, or the byte before it is
 *   `"\n"`), end inside the committed range and parse as a user message; when it yields no title,
 *   the whole index is read and checked (strictly increasing message indices below the message
 *   count, strictly increasing byte offsets inside the range, the lines fitting between them) and
 *   the later rounds' lines are read in order, with the same checks, until one yields a title.
 *
 * Any inconsistency found on the way makes that session fall back to a scan of its committed
 * range (read-only, checksum verified) for its counts and title: a damaged index never causes a
 * failure or wrong counts that the checks above can see. A stale index that covers a prefix of
 * the same committed range (and passes the same checks) costs a scan of the unindexed tail only;
 * a missing or unusable index costs one scan of the committed range.
 *
 * A store remembers what its fast listings derived beyond meta.json (the user-message count and
 * the fallback title) for each session's committed state (generation, start, bytes, message
 * count). A repeated fast listing by the same store (a picker refreshing) then reads, for a
 * session whose meta.json names the same state and whose index.json is still a regular file, only
 * meta.json (and the kind of index.json, or the directory without `readFileNoFollow`). It trusts
 * what it derived as a first listing trusted the index: a later change of index.json, or of the
 * committed bytes, that leaves meta.json as it was is not seen until the committed state changes
 * (a full listing or an open verifies everything).
 *
 * @module
 */
import type { EntryKind, FileHandle, FileSystem } from "../port/fs.ts";
import { FsError, NotFound } from "../port/errors.ts";
import { dirname, join } from "../port/path.ts";
import { entryKind, readDirIfExists } from "../port/durable.ts";
import { Budget, mapLimit } from "../port/limit.ts";
import {
  CorruptSessionError,
  SessionCwdError,
  SessionError,
  SessionFormatError,
  SessionNotFoundError,
  UnsupportedSessionError,
} from "./errors.ts";
import {
  eligibleTitleOf,
  isSessionId,
  malformedTitleText,
  type Message,
  type SessionHeader,
  type SessionTitle,
} from "./records/mod.ts";
import { invalidMessageJson } from "./records/_validation.ts";
import {
  decodeStorageMeta,
  forEachCommittedLine,
  INDEX_FILE,
  INDEX_FORMAT,
  INDEX_VERSION,
  indexMatches,
  isBusy,
  isUnreachablePath,
  type ListingIndex,
  lostMetaError,
  lostMetaJson,
  MESSAGES_FILE,
  META_FILE,
  openSessionFile,
  readIfRegular,
  readLines,
  readListingIndex,
  readStorageMeta,
  refuseIrregularFile,
  type RegularFile,
  type RoundEntry,
  type RoundIndex,
  type RoundIndexHead,
  sameCommittedRange,
  sizedLater,
  type StorageMeta,
} from "./storage.ts";
import { checkMetaId, SessionManager } from "./session_manager.ts";
import type { StoreContext } from "./lock.ts";
import {
  LEGACY_EXTENSION,
  legacyNotARegularFile,
  legacySessionId,
  readLegacySession,
} from "./legacy.ts";
import {
  addRestoredMembership,
  ARCHIVE_FILE,
  DELETE_INTENT_FILE,
  inspectDeletion,
  isDeleteStagingName,
  readArchiveMembership,
} from "./archive.ts";
import {
  damagedCompactionAmong,
  damagedCompactionError,
  previousSession,
  stagingSessionId,
} from "./compaction.ts";

/** One listed session. */
export interface SessionInfo {
  /** The session id. */
  readonly id: string;
  /** The header, with a fallback title derived from the first eligible user message. */
  readonly header: SessionHeader;
  /** The title (stored, or the fallback), when there is one. */
  readonly title: SessionTitle | undefined;
  /** The recorded working directory. */
  readonly cwd: string;
  /** Creation time (ISO). */
  readonly createdAt: string;
  /** Last activity time (ISO); the list is sorted by it, newest first. */
  readonly updatedAt: string;
  /** What to pass to `SessionStore.open`: meta.json of a directory, or the legacy file. */
  readonly path: string;
  /** The layout: a version-3 directory, or a legacy version-2 file (migrates on open). */
  readonly storage: "directory" | "legacy";
  /** The number of messages. */
  readonly messageCount: number;
  /** The number of user messages. */
  readonly userMessageCount: number;
  /** True when the session is pinned. */
  readonly pinned: boolean;
  /** The pin time (ISO), when pinned. */
  readonly pinnedAt: string | undefined;
  /** True when the session has output the user has not read. */
  readonly unread: boolean;
  /** True when the session is archived in its collection. */
  readonly archived: boolean;
}

/** Options of a listing. */
export interface ListOptions {
  /**
   * Read only meta.json and index.json (plus the first user message for a fallback title that
   * index.json does not record): the mode for session pickers. The log is not looked at
   * otherwise, so a missing or damaged log is reported by the open (or a full listing), not by a
   * fast listing. Default false: validate complete histories.
   */
  readonly fast?: boolean;
  /** Put pinned sessions first (most recently pinned first), then the rest. Default false. */
  readonly pinnedFirst?: boolean;
  /**
   * How many sessions are read at once, a positive integer (else `InvalidArgumentError`); default
   * 32 in fast mode, 4 otherwise.
   */
  readonly concurrency?: number;
  /**
   * A full listing reads whole the sessions whose committed logs total at most this many bytes at
   * once, a positive integer (else `InvalidArgumentError`); a session larger than it is read
   * alone. Default 256 MiB: a session read whole holds about 1.3 times its log in memory while it
   * is validated. A fast listing ignores it (it reads a log whole only to report a damaged
   * session).
   */
  readonly maxBytesAtOnce?: number;
}

/** How many bytes of committed logs a full listing reads at once by default. */
export const FULL_LIST_BYTES = 256 * 1024 * 1024;

/** How many sessions a fast listing reads at once by default (`ListOptions.concurrency`). */
export const FAST_LIST_CONCURRENCY = 32;

/**
 * How many sessions a full listing reads at once by default (`ListOptions.concurrency`): each is
 * read, hashed and validated whole, so fewer at once bound the memory held.
 */
export const FULL_LIST_CONCURRENCY = 4;

/** A session (or a collection file) that could not be listed. */
export interface ListFailure {
  /** The path at fault. */
  readonly path: string;
  /** The session id, when the entry names one. */
  readonly id: string | undefined;
  /** The typed error (`SessionError` or `FsError`). */
  readonly error: SessionError | FsError;
}

/** Sessions and failures of a listing. */
export interface ListResult {
  /** The listed sessions, sorted. */
  readonly sessions: SessionInfo[];
  /** What could not be listed, in collection order. */
  readonly failures: ListFailure[];
}

/** Descending plain string order (UTF-16 code units, like `<`), not a locale order. */
function descending(a: string, b: string): number {
  return a === b ? 0 : a < b ? 1 : -1;
}

/**
 * `updatedAt` descending, then id descending, both by plain string comparison, like the
 * version-2 list (`updatedAt` is not parsed: two spellings of one instant still have an order).
 */
export function compareSessions(a: SessionInfo, b: SessionInfo): number {
  return descending(a.updatedAt, b.updatedAt) || descending(a.id, b.id);
}

/** Pinned sessions first (latest pin first, by string comparison), then `compareSessions`. */
export function comparePinnedFirst(a: SessionInfo, b: SessionInfo): number {
  if (a.pinned !== b.pinned) return a.pinned ? -1 : 1;
  if (a.pinned && a.pinnedAt !== b.pinnedAt) {
    return descending(a.pinnedAt ?? "", b.pinnedAt ?? "");
  }
  return compareSessions(a, b);
}

/** What reading one session learned (before archive membership is known). */
interface Summary {
  readonly header: SessionHeader;
  readonly messageCount: number;
  readonly userMessageCount: number;
  readonly fallbackTitle: SessionTitle | undefined;
}

/** One session to read. */
interface Candidate {
  readonly id: string;
  /** Where to read it from (or why it cannot be read). */
  readonly source:
    | {
      readonly kind: "directory";
      readonly dir: string;
      readonly hasBackup: boolean;
      /**
       * The session's copy that recovery keeps while `dir` has no meta.json: an uncommitted
       * delete's staged copy or an interrupted compaction's previous directory, read in its
       * place as a read-only open does; or the error of a delete journal that cannot be read,
       * which such an open reports (or of a staging directory that cannot be looked at).
       */
      readonly copy?: string | SessionError | FsError | undefined;
      /** The names of the compaction staging directories of the session the listing saw. */
      readonly stagingNames?: readonly string[] | undefined;
    }
    | { readonly kind: "legacy"; readonly file: string }
    | { readonly kind: "failed"; readonly error: SessionError | FsError };
  /** The path a caller opens. */
  readonly path: string;
}

function isReportable(error: unknown): error is SessionError | FsError {
  return error instanceof SessionError || error instanceof FsError;
}

/**
 * The candidates of a collection listing, from its directory entries: one per session id, the
 * published directory before its legacy backup, and sessions of interrupted operations from their
 * staging directories (see the module doc). `archived` holds the ids an uncommitted delete's
 * rollback puts back into archive membership. A storage error while looking at a staging
 * directory is reported, never thrown: as the failure of the session it concerns, or in
 * `failures` for a delete staging directory that cannot be read (which sessions it stages is then
 * unknown); the other sessions are listed all the same.
 */
async function candidatesOf(
  fs: FileSystem,
  collection: string,
  only: ReadonlySet<string> | undefined,
): Promise<{
  candidates: Candidate[];
  hasArchive: boolean;
  archived: string[];
  failures: ListFailure[];
}> {
  let entries;
  try {
    entries = await fs.readDir(collection);
  } catch (error) {
    if (error instanceof NotFound) {
      return { candidates: [], hasArchive: false, archived: [], failures: [] };
    }
    throw error;
  }
  const dirs = new Set<string>();
  const notDirs = new Set<string>();
  const legacy = new Set<string>();
  const staged = new Map<string, string[]>();
  const deletions: string[] = [];
  let hasArchive = false;
  for (const entry of entries) {
    const name = entry.name;
    // Any kind: one that is not a regular file is reported (never read), not ignored.
    if (name === ARCHIVE_FILE) hasArchive = true;
    else if (entry.kind === "directory" && stagingSessionId(name) !== undefined) {
      const id = stagingSessionId(name) as string;
      staged.set(id, [...(staged.get(id) ?? []), name]);
    } else if (entry.kind === "directory" && isDeleteStagingName(name)) deletions.push(name);
    else if (entry.kind === "directory" && isSessionId(name)) dirs.add(name);
    else if (isSessionId(name)) notDirs.add(name); // a link or a file where a directory belongs
    else if (entry.kind === "file") {
      const id = legacySessionId(name);
      if (id !== undefined) legacy.add(id);
    }
  }
  // Uncommitted deletes did not happen: their staged sessions are listed from where they wait.
  const deletedDirs = new Map<string, string>();
  const deletedLegacy = new Map<string, string>();
  const unreadable = new Map<string, { error: SessionError | FsError; file: string }>();
  const failures: ListFailure[] = [];
  const archived: string[] = [];
  // Sessions of deletes that may have rolled back since the collection was read (another
  // process's delete, settling meanwhile): looked for in place, where a rollback puts them back.
  const movedBack = new Set<string>();
  /** A delete seen in the collection's listing had settled, its sessions unknown, when looked at. */
  let settled = false;
  for (const name of deletions.sort()) {
    let deletion: Awaited<ReturnType<typeof inspectDeletion>>;
    try {
      deletion = await inspectDeletion(fs, collection, name);
    } catch (error) {
      if (!isReportable(error)) throw error;
      failures.push({ path: failurePath(error, join(collection, name)), id: undefined, error });
      continue;
    }
    if (deletion === undefined) {
      settled = true;
      continue;
    }
    // Its journal was found missing: it settled meanwhile, and its rollback may have moved back
    // sessions that were no longer staged when its staging directory was listed.
    if (deletion.settled) settled = true;
    for (const id of deletion.movedBack) movedBack.add(id);
    if (deletion.error !== undefined) {
      const failure = { error: deletion.error, file: join(deletion.dir, DELETE_INTENT_FILE) };
      for (const id of deletion.ids) if (!unreadable.has(id)) unreadable.set(id, failure);
      continue;
    }
    for (const [id, dir] of deletion.directories) {
      if (deletedDirs.has(id)) continue;
      // As a read-only open counts it: a staged copy holding a meta.json file, or one that lost
      // it while index.json shows a save committed (the session, damaged: read from there, it is
      // reported as an open reports it, never as the stale legacy backup). One that is gone since
      // the staging directory was listed was moved back by a rollback, or removed by a delete
      // that finished (then nothing is in place).
      const meta = join(dir, META_FILE);
      let kind: Awaited<ReturnType<typeof entryKind>>;
      let lost = false;
      try {
        kind = await entryKind(fs, meta);
        if (kind === undefined) lost = await lostMetaJson(fs, dir);
      } catch (error) {
        if (!isReportable(error)) throw error;
        if (!unreadable.has(id)) unreadable.set(id, { error, file: meta });
        continue;
      }
      if (kind !== "file" && !lost) {
        movedBack.add(id);
        continue;
      }
      deletedDirs.set(id, dir);
    }
    for (const [id, file] of deletion.legacy) {
      if (!deletedLegacy.has(id)) deletedLegacy.set(id, file);
    }
    archived.push(...deletion.archived);
  }
  if (settled) {
    // A delete staging directory of the listing was gone (or held nothing naming its sessions,
    // or its journal was gone) when looked at: its delete finished, or rolled back, since the
    // collection was read. What a rollback moved back is not in that listing: the collection is
    // read once more for it.
    for (const id of await sessionsOf(fs, collection)) {
      if (!dirs.has(id)) movedBack.add(id);
    }
  }
  const candidates: Candidate[] = [];
  const ids = [
    ...new Set([
      ...dirs,
      ...legacy,
      ...staged.keys(),
      ...deletedDirs.keys(),
      ...deletedLegacy.keys(),
      ...unreadable.keys(),
      ...movedBack,
    ]),
  ].sort();
  for (const id of ids) {
    if (only !== undefined && !only.has(id)) continue;
    try {
      await addCandidate(id);
    } catch (error) {
      // A staging directory of this session that cannot be looked at: the session's failure.
      if (!isReportable(error)) throw error;
      const path = failurePath(error, join(collection, id));
      candidates.push({ id, source: { kind: "failed", error }, path });
    }
  }
  return { candidates, hasArchive, archived, failures };

  async function addCandidate(id: string): Promise<void> {
    const hasBackup = legacy.has(id) || deletedLegacy.has(id);
    const path = join(collection, id, META_FILE);
    if (dirs.has(id)) {
      // What is read if the directory has no meta.json, in the order a read-only open looks: a
      // staging directory that cannot be looked at fails only a session whose meta.json is gone.
      const stagingNames = staged.get(id);
      let copy: string | SessionError | FsError | undefined = deletedDirs.get(id) ??
        unreadable.get(id)?.error;
      if (copy === undefined && stagingNames !== undefined) {
        try {
          copy = await compactionPrevious(fs, collection, stagingNames);
        } catch (error) {
          if (!isReportable(error)) throw error;
          copy = error;
        }
      }
      candidates.push({
        id,
        source: { kind: "directory", dir: join(collection, id), hasBackup, copy, stagingNames },
        path,
      });
      return;
    }
    const stagingNames = staged.get(id) ?? [];
    let previous = await compactionPrevious(fs, collection, stagingNames);
    if (previous === undefined && stagingNames.length > 0) {
      // A compaction seen between its renames finished (or rolled back) since the collection was
      // read: its staging directory no longer holds the previous copy. The session directory is
      // back in place, or (a recovery that put it back, then a compaction that moved it again)
      // in another staging directory: listed from there, never from a stale backup, never missed.
      const moved = await movedByCompaction(fs, collection, id);
      if (moved === "in place") {
        candidates.push({
          id,
          source: { kind: "directory", dir: join(collection, id), hasBackup },
          path,
        });
        return;
      }
      previous = moved;
    }
    const deleted = deletedDirs.get(id);
    const failed = unreadable.get(id);
    let damaged: string | undefined;
    const file = join(collection, id + LEGACY_EXTENSION);
    // In the order a read-only open looks (see `SessionStore` `#stagedCopy`): an uncommitted
    // delete's staged copy, then the error of a delete journal that cannot be read, then an
    // interrupted compaction's previous directory.
    if (deleted !== undefined) {
      candidates.push({ id, source: { kind: "directory", dir: deleted, hasBackup }, path });
    } else if (failed !== undefined) {
      candidates.push({ id, source: { kind: "failed", error: failed.error }, path: failed.file });
    } else if (previous !== undefined) {
      candidates.push({ id, source: { kind: "directory", dir: previous, hasBackup }, path });
    } else if (
      movedBack.has(id) && await entryKind(fs, join(collection, id)) === "directory"
    ) {
      // A delete that staged it rolled back since the collection was read: the session
      // directory is back in place, and listed from there, never missed.
      const backup = hasBackup || await entryKind(fs, file) === "file";
      candidates.push({
        id,
        source: { kind: "directory", dir: join(collection, id), hasBackup: backup },
        path,
      });
    } else if (notDirs.has(id) && hasBackup) {
      // As for an open: what is published is refused, and the stale backup is not listed instead.
      const dir = join(collection, id);
      const error = new SessionFormatError(
        "Published session path is not a directory (symlinks are refused)",
        { file: dir },
      );
      candidates.push({ id, source: { kind: "failed", error }, path: dir });
    } else if (
      stagingNames.length > 0 &&
      (damaged = await damagedCompactionAmong(fs, collection, stagingNames)) !== undefined
    ) {
      // A compaction stopped between its renames whose previous copy is damaged: the session is
      // missing from its place, and reported (never dropped, never read from a stale backup).
      const error = damagedCompactionError(damaged);
      candidates.push({ id, source: { kind: "failed", error }, path: join(collection, id) });
    } else if (legacy.has(id)) {
      candidates.push({ id, source: { kind: "legacy", file }, path: file });
    } else if (deletedLegacy.has(id)) {
      // The copy an uncommitted delete staged, unless something else (a link, a directory) is at
      // `<id>.jsonl`, where opening it puts it back: refused as an open refuses it.
      const kind = await entryKind(fs, file);
      const stagedFile = deletedLegacy.get(id) as string;
      candidates.push({
        id,
        source: kind !== undefined && kind !== "file"
          ? { kind: "failed", error: legacyNotARegularFile(file) }
          : { kind: "legacy", file: stagedFile },
        path: file,
      });
    } else if (movedBack.has(id) && await entryKind(fs, file) === "file") {
      // The same for a session that has only a legacy file.
      candidates.push({ id, source: { kind: "legacy", file }, path: file });
    }
  }
}

/** The path a storage error names (`fallback` for one that names none): a listing failure's path. */
function failurePath(error: SessionError | FsError, fallback: string): string {
  return error instanceof FsError ? error.path : error.file ?? fallback;
}

/**
 * The ids of the session directories and legacy files `collection` lists now (none when it is
 * gone), classified as `candidatesOf` does.
 */
async function sessionsOf(fs: FileSystem, collection: string): Promise<string[]> {
  const ids: string[] = [];
  for (const entry of await readDirIfExists(fs, collection)) {
    if (entry.kind === "directory" && isSessionId(entry.name)) ids.push(entry.name);
    else if (entry.kind === "file") {
      const id = legacySessionId(entry.name);
      if (id !== undefined) ids.push(id);
    }
  }
  return ids;
}

/**
 * Where session `id` of `collection` is now, when a compaction staging directory of it was listed
 * and no longer holds its previous copy: `"in place"` when `<id>/` is a directory, else the
 * previous directory of a compaction staging directory of it (the compaction that moved it was
 * recovered, and another moved it again, since the collection was read), else undefined (it is
 * gone). While the collection shows only a staging directory of it that holds no previous copy
 * when looked at (moved once more meanwhile), the collection is read again, up to `MAX_LOOKS`
 * times.
 */
async function movedByCompaction(
  fs: FileSystem,
  collection: string,
  id: string,
): Promise<"in place" | string | undefined> {
  if (await entryKind(fs, join(collection, id)) === "directory") return "in place";
  for (let looks = 0; looks < MAX_LOOKS; looks++) {
    const names: string[] = [];
    for (const entry of await readDirIfExists(fs, collection)) {
      if (entry.kind !== "directory") continue;
      if (entry.name === id) return "in place";
      if (stagingSessionId(entry.name) === id) names.push(entry.name);
    }
    if (names.length === 0) return undefined;
    const previous = await compactionPrevious(fs, collection, names.sort());
    if (previous !== undefined) return previous;
    if (await entryKind(fs, join(collection, id)) === "directory") return "in place";
  }
  return undefined;
}

/** The previous directory of an interrupted compaction (its session dir is missing), if any. */
async function compactionPrevious(
  fs: FileSystem,
  collection: string,
  stagingNames: readonly string[],
): Promise<string | undefined> {
  for (const name of stagingNames) {
    const previous = await previousSession(fs, join(collection, name));
    if (previous !== undefined) return previous;
  }
  return undefined;
}

/**
 * Lists the sessions of `collection` (see the module doc). With `cwd` (canonical), only sessions
 * recorded for that working directory are listed. Reads only.
 */
export async function discoverSessions(
  context: StoreContext,
  collection: string,
  cwd: string | undefined,
  options: ListOptions = {},
  cache?: ListingCache,
): Promise<ListResult> {
  return await readCollection(context, collection, cwd, options, undefined, cache);
}

/** What a fast listing derived for one committed state of a session. */
interface Derived {
  /** The number of user messages. */
  readonly userMessageCount: number;
  /** The fallback title (`null`: none); undefined when it was not derived (a stored title). */
  readonly title: SessionTitle | null | undefined;
}

/** The committed state a `Derived` belongs to: meta.json's committed range and count. */
type CommittedState = Pick<StorageMeta, "generation" | "start" | "bytes" | "messageCount">;

/**
 * What fast listings derived beyond meta.json (the user-message count from index.json, the
 * fallback title from the first user message), per session directory, for the committed state
 * it was derived from: generation, start, bytes and message count. The generation is the SHA-256
 * of the whole committed range, so the same state has the same messages: a repeated listing (a
 * picker refreshing) reads only each session's meta.json (and the kind of its index.json). One
 * entry per directory, at most `limit` of them; the least recently used goes first.
 * `SessionStore` keeps one per store.
 */
export class ListingCache {
  readonly #entries = new Map<
    string,
    { readonly state: CommittedState; readonly derived: Derived }
  >();
  readonly #limit: number;

  /** Creates a cache of at most `limit` sessions (default 16,384). */
  constructor(limit = 16_384) {
    this.#limit = limit;
  }

  /** What was derived for `dir` at the committed state `meta`, or undefined when unknown. */
  get(dir: string, meta: CommittedState): Derived | undefined {
    const entry = this.#entries.get(dir);
    if (entry === undefined) return undefined;
    const state = entry.state;
    if (
      state.generation !== meta.generation || state.start !== meta.start ||
      state.bytes !== meta.bytes || state.messageCount !== meta.messageCount
    ) {
      return undefined;
    }
    this.#entries.delete(dir);
    this.#entries.set(dir, entry);
    return entry.derived;
  }

  /** Remembers what was derived for `dir` at the committed state `meta`. */
  set(dir: string, meta: CommittedState, derived: Derived): void {
    const state = {
      generation: meta.generation,
      start: meta.start,
      bytes: meta.bytes,
      messageCount: meta.messageCount,
    };
    this.#entries.delete(dir);
    this.#entries.set(dir, { state, derived });
    if (this.#entries.size > this.#limit) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
  }

  /** The number of cached entries. */
  get size(): number {
    return this.#entries.size;
  }
}

/**
 * Reads only the sessions `ids` of `collection` in fast mode (for membership checks): each is
 * listed, skipped (unsupported, or another cwd) or reported as a failure. Archive membership is
 * not read (`archived` is false).
 */
export async function findSessions(
  context: StoreContext,
  collection: string,
  cwd: string | undefined,
  ids: readonly string[],
): Promise<ListResult> {
  return await readCollection(context, collection, cwd, { fast: true }, new Set(ids));
}

async function readCollection(
  context: StoreContext,
  collection: string,
  cwd: string | undefined,
  options: ListOptions,
  only: ReadonlySet<string> | undefined,
  cache?: ListingCache,
): Promise<ListResult> {
  const fs = context.fs;
  const fast = options.fast === true;
  const { candidates, hasArchive, archived: restored, failures } = await candidatesOf(
    fs,
    collection,
    only,
  );
  let archived = new Set<string>();
  /** True when archive.json was read: a second look after the sessions are read may be due. */
  let membershipRead = false;
  if (hasArchive && only === undefined) {
    try {
      archived = new Set(await readArchiveMembership(fs, collection));
      membershipRead = true;
    } catch (error) {
      if (!isReportable(error)) throw error;
      failures.push({ path: join(collection, ARCHIVE_FILE), id: undefined, error });
    }
  }
  if (only === undefined) { for (const id of restored) archived.add(id); }
  /** Archived ids of deletes found uncommitted by a second look (whole listings only). */
  const restoredLater = only === undefined ? new Set<string>() : undefined;
  const matchesCwd = cwd === undefined ? undefined : cwdMatcher(fs, cwd);
  const concurrency = options.concurrency ??
    (fast ? FAST_LIST_CONCURRENCY : FULL_LIST_CONCURRENCY);
  // Sessions read whole hold their histories while validated: together, within a budget.
  const budget = fast ? undefined : new Budget(options.maxBytesAtOnce ?? FULL_LIST_BYTES);
  const read = await mapLimit(candidates, concurrency, async (first) => {
    let candidate = first;
    try {
      let summary: Summary | undefined;
      /** What the last read threw, when it may be a session that moved (see `mayHaveMoved`). */
      let failure: { error: unknown } | undefined;
      // A read that failed, or found no meta.json (never committed, or moved aside by a delete
      // or a compaction meanwhile), looks at the collection again and reads the session where it
      // is now: while each look finds it somewhere else (a compaction moves it from `<id>/` to
      // its previous copy and back), up to `MAX_LOOKS` times. A look that finds it where it was
      // read gets one more read (a compaction's swap between reading meta.json and the log, or a
      // legacy file a delete staged and its rollback put back), and that read ends it; so does a
      // look that finds nothing.
      for (let looks = 0, last = false;; looks++) {
        failure = undefined;
        try {
          summary = await summarize(context, candidate, fast, cache, budget);
        } catch (error) {
          if (!mayHaveMoved(candidate, error)) throw error;
          summary = undefined;
          failure = { error };
        }
        if (summary !== undefined || last || looks === MAX_LOOKS) break;
        if (failure === undefined && !mayHaveMoved(candidate, undefined)) break;
        const again = await lookAgain(fs, collection, candidate, restoredLater);
        if (again === "gone") return undefined; // deleted meanwhile: not listed, not a failure
        if (again === "same") {
          // A legacy file that was not found, and is in place again at the same path: a delete
          // that staged it rolled back meanwhile. It gets one final read, as a directory does.
          if (candidate.source.kind !== "legacy" || last) break;
          last = true;
          continue;
        }
        last = placeOf(again) === placeOf(candidate);
        candidate = again;
      }
      if (failure !== undefined) throw failure.error;
      if (summary === undefined) return undefined;
      if (matchesCwd !== undefined && !(await matchesCwd(summary.header.cwd))) return undefined;
      return { candidate, summary };
    } catch (error) {
      if (error instanceof UnsupportedSessionError) return undefined;
      // A recorded cwd that is gone or not a directory cannot match an existing cwd.
      if (error instanceof SessionCwdError && matchesCwd !== undefined) return undefined;
      if (!isReportable(error)) throw error;
      return { candidate, error };
    }
  });
  if (
    membershipRead &&
    read.some((item) =>
      item !== undefined && !("error" in item) && !archived.has(item.candidate.id) &&
      restoredLater?.has(item.candidate.id) !== true
    )
  ) {
    // A second look, once per listing: a delete that began after the collection was read may
    // have taken a session out of archive.json before it was read above, then rolled back and
    // moved the session back before it was read (in place, so `lookAgain` never ran). Its
    // journal, or archive.json once more, says what the rollback restores (`effectiveMembership`
    // looks the same way). Needed only when a listed session is not known archived already.
    const members = [...archived];
    try {
      await addRestoredMembership(fs, collection, members);
    } catch (error) {
      if (!isReportable(error)) throw error;
      // A delete staging directory that cannot be read was reported once already.
      const path = failurePath(error, collection);
      if (!failures.some((failure) => failure.id === undefined && failure.path === path)) {
        failures.push({ path, id: undefined, error });
      }
    }
    for (const id of members) archived.add(id);
  }
  const sessions: SessionInfo[] = [];
  for (const item of read) {
    if (item === undefined) continue;
    if ("error" in item) {
      failures.push({ path: item.candidate.path, id: item.candidate.id, error: item.error });
      continue;
    }
    const id = item.candidate.id;
    sessions.push(
      infoOf(item.candidate, item.summary, archived.has(id) || restoredLater?.has(id) === true),
    );
  }
  sessions.sort(options.pinnedFirst === true ? comparePinnedFirst : compareSessions);
  return { sessions, failures };
}

/**
 * True when reading a session directory failed (or found no meta.json, for `error` undefined) in a
 * way a delete or a compaction running meanwhile would cause: its directory moved aside between
 * the collection's listing and the read, or swapped between reading meta.json and the log.
 */
function mayHaveMoved(candidate: Candidate, error: unknown): boolean {
  const source = candidate.source;
  // A legacy file that vanished may have moved into a delete's staging (and may come back).
  if (source.kind === "legacy") return error instanceof NotFound && error.path === source.file;
  if (source.kind !== "directory") return false;
  return error === undefined || error instanceof NotFound || error instanceof CorruptSessionError ||
    error instanceof SessionNotFoundError;
}

/** How many times one listing looks again for a session that moved while it was read. */
const MAX_LOOKS = 4;

/** Where `candidate` is read from: two candidates in the same place read the same files. */
function placeOf(candidate: Candidate): string {
  const source = candidate.source;
  if (source.kind === "legacy") return `legacy:${source.file}`;
  if (source.kind === "failed") return "failed";
  const copy = typeof source.copy === "string" ? source.copy : source.copy?.name ?? "";
  return `directory:${source.dir}:${copy}`;
}

/**
 * `candidate`'s session as the collection holds it now: a candidate to read again (its files moved
 * into a delete's or a compaction's staging, or back; the same directory too, since one more read
 * tells a compaction's swap from a real failure), `"same"` for the same legacy file (which the
 * caller reads once more: a delete that staged it may have rolled back) or failure,
 * or `"gone"` when the session is no longer there (a delete committed meanwhile). A session is
 * never lost, or failed, by a listing racing an operation.
 */
async function lookAgain(
  fs: FileSystem,
  collection: string,
  candidate: Candidate,
  archived?: Set<string>,
): Promise<Candidate | "same" | "gone"> {
  const found = await candidatesOf(fs, collection, new Set([candidate.id]));
  // A session found in an uncommitted delete's staging is archived if that delete found it so:
  // the delete has already taken it out of archive.json, which this listing may have read since.
  if (archived !== undefined) { for (const id of found.archived) archived.add(id); }
  const unknown = found.failures[0];
  // Not found, while a delete staging directory could not be read: it may be staged there.
  const now = found.candidates[0] ?? (unknown === undefined ? undefined : {
    id: candidate.id,
    source: { kind: "failed", error: unknown.error },
    path: unknown.path,
  } satisfies Candidate);
  if (now === undefined) return "gone";
  const before = candidate.source;
  const after = now.source;
  if (after.kind === "directory") return now;
  const same =
    (after.kind === "legacy" && before.kind === "legacy" && after.file === before.file) ||
    (after.kind === "failed" && before.kind === "failed");
  return same ? "same" : now;
}

/**
 * The cwd filter of one listing: true when the real path of a recorded cwd is `canonical`. Each
 * distinct recorded cwd is resolved once; one that no longer exists (or runs through a file, or
 * cannot be a path: `isUnreachablePath`) does not match. Other storage errors are reported for
 * the session.
 */
function cwdMatcher(fs: FileSystem, canonical: string): (recorded: string) => Promise<boolean> {
  const cache = new Map<string, Promise<boolean>>();
  return (recorded) => {
    // A canonical path is its own real path.
    if (recorded === canonical) return Promise.resolve(true);
    let match = cache.get(recorded);
    if (match === undefined) {
      match = fs.realPath(recorded).then(
        (real) => real === canonical,
        (error: unknown) => {
          if (isUnreachablePath(error)) return false;
          throw error;
        },
      );
      cache.set(recorded, match);
    }
    return match;
  };
}

function infoOf(candidate: Candidate, summary: Summary, archived: boolean): SessionInfo {
  const stored = summary.header.title;
  const title = stored ? stored : summary.fallbackTitle;
  const header = !stored && title !== undefined ? { ...summary.header, title } : summary.header;
  return {
    id: candidate.id,
    header,
    title,
    cwd: header.cwd,
    createdAt: header.createdAt,
    updatedAt: header.updatedAt,
    path: candidate.path,
    storage: candidate.source.kind === "legacy" ? "legacy" : "directory",
    messageCount: summary.messageCount,
    userMessageCount: summary.userMessageCount,
    pinned: header.pinnedAt !== undefined,
    pinnedAt: header.pinnedAt,
    unread: header.unread === true,
    archived,
  };
}

/** Reads one candidate; undefined for a directory that never committed (no meta.json, no backup). */
async function summarize(
  context: StoreContext,
  candidate: Candidate,
  fast: boolean,
  cache: ListingCache | undefined,
  budget?: Budget,
): Promise<Summary | undefined> {
  const source = candidate.source;
  if (source.kind === "failed") throw source.error;
  if (source.kind === "legacy") {
    return await readLegacySession(context.fs, source.file, { validate: !fast });
  }
  try {
    // As for an open: a directory holding another session (a copy) is not that session, which
    // both summaries refuse once meta.json is read (`checkMetaId`).
    if (!fast) return await fullSummary(context, source.dir, candidate.id, budget);
    try {
      return await fastSummary(context, source.dir, cache, candidate.id);
    } catch (error) {
      // A damaged message the fast scan met: the fast scan looks at less than an open does (not
      // every field, not every line), so the open's first error is taken (the whole history is
      // checked once more, for a damaged session only), as a full listing reports it. Not for a
      // CorruptSessionError: a compaction or a save racing the read gives one, and the listing
      // then looks again (`mayHaveMoved`).
      if (
        !(error instanceof SessionFormatError) || error.file !== join(source.dir, MESSAGES_FILE)
      ) {
        throw error;
      }
      // What the open reads (a session that changed meanwhile reads whole as it is now).
      return await fullSummary(context, source.dir, candidate.id);
    }
  } catch (error) {
    // Only a missing meta.json itself means "never committed"; anything else is a failure.
    if (!(error instanceof NotFound) || error.path !== join(source.dir, META_FILE)) throw error;
    if (source.copy instanceof SessionError || source.copy instanceof FsError) throw source.copy;
    if (source.copy !== undefined) {
      // A directory without meta.json took the session's place after a crash: recovery keeps
      // the session's copy until it is gone, and readers read the session there meanwhile.
      return await summarize(
        context,
        { ...candidate, source: { kind: "directory", dir: source.copy, hasBackup: false } },
        fast,
        cache,
        budget,
      );
    }
    // A directory without meta.json in the place of a session that a compaction moved away and
    // whose previous copy is damaged (recovery keeps it): reported. Looked at only now, once the
    // directory still shows no meta.json: a compaction running meanwhile moves it, it does not
    // empty it (and is then looked for again, as for any session that moved).
    if (
      source.stagingNames !== undefined && await entryKind(context.fs, source.dir) === "directory"
    ) {
      const damaged = await damagedCompactionAmong(
        context.fs,
        dirname(source.dir),
        source.stagingNames,
      );
      if (damaged !== undefined) {
        // A healthy compaction puts the session in place before it removes its previous copy:
        // with meta.json here now, it was one (looked for again, see `mayHaveMoved`).
        if (await entryKind(context.fs, join(source.dir, META_FILE)) !== undefined) throw error;
        throw damagedCompactionError(damaged);
      }
    }
    // Never committed, unless index.json says a save committed there: a lost meta.json is a
    // failure, as an open reports it, never a session dropped from the listing.
    if (await lostMetaJson(context.fs, source.dir)) throw lostMetaError(source.dir, error);
    if (!source.hasBackup) return undefined;
    throw new SessionNotFoundError(
      "Published session directory has no meta.json; its legacy backup is not used in its place",
      { file: join(source.dir, META_FILE), cause: error },
    );
  }
}

async function fullSummary(
  context: StoreContext,
  dir: string,
  id: string,
  budget?: Budget,
): Promise<Summary> {
  // The log's size bounds what the open holds (what it cannot tell is left to the open).
  const size = budget === undefined ? 0 : await context.fs.lstat(join(dir, MESSAGES_FILE)).then(
    (info) => info.kind === "file" ? info.size : 0,
    () => 0,
  );
  const release = await budget?.take(size);
  try {
    return await openSummary(context, dir, id);
  } finally {
    release?.();
  }
}

async function openSummary(context: StoreContext, dir: string, id: string): Promise<Summary> {
  // A meta.json of another session is refused as soon as it is read, as an open refuses it.
  const manager = await SessionManager.open({
    context,
    dir,
    collectionDir: dirname(dir),
    readOnly: true,
    id,
  });
  try {
    const messages = manager.messages;
    const header = manager.getHeader();
    let users = 0;
    for (const message of messages) if (message.role === "user") users++;
    return {
      header,
      messageCount: messages.length,
      userMessageCount: users,
      fallbackTitle: header.title,
    };
  } finally {
    await manager.close();
  }
}

const decoder = new TextDecoder();
/**
 * False only for a log line that cannot be a user message, so it needs no parse: the string value
 * `"user"` shows in a line either as that text or with a `\u` escape. Any spacing or key order is
 * caught (a line from another writer), and a quote inside a string value is escaped, so
 * `user"` appears in a line only as the end of a string.
 */
function mayBeUserMessage(line: string): boolean {
  return line.includes('user"') || line.includes("\\u");
}

/** The generation of an empty committed range: the SHA-256 of no bytes. */
const EMPTY_GENERATION = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/**
 * The fast summary of a version-3 directory: meta.json, index.json and what they point to. With
 * `id` (the session's id, where `dir` may be a copy under another name), a meta.json whose
 * `header.id` differs is refused before the log is read.
 */
export async function fastSummary(
  context: StoreContext,
  dir: string,
  cache?: ListingCache,
  id?: string,
): Promise<Summary> {
  const fs = context.fs;
  const metaPath = join(dir, META_FILE);
  const logPath = join(dir, MESSAGES_FILE);
  if (fs.readFileNoFollow !== undefined) {
    // One call per file that never goes through a link: no listing of the directory. The log is
    // checked to be a regular file only when it is read.
    const meta = await readMetaNoFollow(fs, metaPath);
    // A meta.json of another session (`id`: the session's id) is reported below, after the
    // log's kind, as an open reports it.
    if (meta !== undefined && (id === undefined || meta.header.id === id)) {
      const openLog = (): Promise<RegularFile> => openSessionFile(fs, logPath);
      const reread = () => readMetaNoFollow(fs, metaPath);
      return await summarizeFrom(context, dir, meta, cache, undefined, openLog, reread);
    }
    // Not a valid meta.json read that way: the listing below says why, exactly as without it.
  }
  // The directory's entries first, as they are (links not followed): the session files must be
  // regular files, as for an open, and index.json is read only when it is one.
  let kinds: Map<string, EntryKind>;
  try {
    kinds = new Map((await fs.readDir(dir)).map((entry) => [entry.name, entry.kind]));
  } catch (error) {
    // A directory that vanished since the collection was read has no meta.json either.
    if (error instanceof NotFound) throw new NotFound("readDir", metaPath, { cause: error });
    throw error;
  }
  const metaKind = kinds.get(META_FILE);
  if (metaKind === undefined) throw new NotFound("readDir", metaPath);
  refuseIrregularFile(metaKind, metaPath);
  // meta.json is read before the log's kind is judged: a session of an unsupported format or
  // version is skipped whatever its log is (as a full listing does). Any other failure to read
  // it is reported after the log's kind, as an open reports them.
  const logKind = kinds.get(MESSAGES_FILE);
  let meta: StorageMeta;
  try {
    meta = await readStorageMeta(fs, dir, true);
  } catch (error) {
    const unsupported = error instanceof UnsupportedSessionError;
    if (!unsupported && logKind !== undefined) refuseIrregularFile(logKind, logPath);
    throw error;
  }
  if (logKind !== undefined) refuseIrregularFile(logKind, logPath);
  // As an open: a meta.json of another session, before anything else is read.
  if (id !== undefined) checkMetaId(meta, id, metaPath);
  return await summarizeFrom(
    context,
    dir,
    meta,
    cache,
    kinds.get(INDEX_FILE) === "file",
    async () => sizedLater(await fs.open(logPath)),
    () => readStorageMeta(fs, dir),
  );
}

/**
 * meta.json read without following a link (`readIfRegular`) and validated; undefined when it is
 * not a regular file, is busy (`EAGAIN`: a lease held by another process) or is not valid: the
 * caller then lists the directory, which reports each exactly as a listing without no-follow
 * reads does (and waits for a lease). A missing file and any other failure are thrown.
 */
async function readMetaNoFollow(
  fs: FileSystem,
  metaPath: string,
): Promise<StorageMeta | undefined> {
  let read;
  try {
    read = await readIfRegular(fs, metaPath);
  } catch (error) {
    if (isBusy(error)) return undefined;
    throw error;
  }
  if (read === undefined) throw new NotFound("readFile", metaPath);
  if (typeof read === "string") return undefined;
  try {
    return decodeStorageMeta(read, metaPath);
  } catch (error) {
    if (error instanceof SessionError) return undefined;
    throw error;
  }
}

/**
 * The fast summary from a read meta.json. `indexIsFile` is what a listing of the directory said
 * of index.json (undefined: not listed, its kind is checked as it is read); `openLogAt` opens
 * the log only if it is a regular file; `reread` reads meta.json again as it was read (undefined
 * when that read finds no valid one).
 */
async function summarizeFrom(
  context: StoreContext,
  dir: string,
  meta: StorageMeta,
  cache: ListingCache | undefined,
  indexIsFile: boolean | undefined,
  openLogAt: () => Promise<RegularFile>,
  reread: () => Promise<StorageMeta | undefined>,
): Promise<Summary> {
  const fs = context.fs;
  // What is read of the log (a tail, a round's line) is checked against nothing but meta.json's
  // range: whether that range was still the committed one is asked once it is read (below).
  let logRead = false;
  const openLog = (): Promise<RegularFile> => {
    logRead = true;
    return openLogAt();
  };
  if (meta.messageCount === 0) {
    // Nothing committed: an empty range whose generation is the hash of nothing. A count of 0
    // over a non-empty range, or an empty range of another hash, is no such state: the checked
    // scan reports it, as a full listing and an open do.
    if (meta.bytes !== 0 || meta.generation !== EMPTY_GENERATION) {
      return await scanCommitted(context, dir, meta, !meta.header.title, openLog);
    }
    return { header: meta.header, messageCount: 0, userMessageCount: 0, fallbackTitle: undefined };
  }
  const needTitle = !meta.header.title;
  // Only while index.json is there: without it a listing scans (and so checks) the committed
  // range, and a repeated listing must find what a first one would.
  let known = indexIsFile === false ? undefined : cache?.get(dir, meta);
  if (
    known !== undefined && indexIsFile === undefined &&
    (await entryKind(fs, join(dir, INDEX_FILE))) !== "file"
  ) {
    known = undefined;
  }
  if (known !== undefined && (!needTitle || known.title !== undefined)) {
    return {
      header: meta.header,
      messageCount: meta.messageCount,
      userMessageCount: known.userMessageCount,
      // A copy: a caller changing the title it was given does not change later listings.
      fallbackTitle: needTitle && known.title !== null && known.title !== undefined
        ? copyFallbackTitle(known.title)
        : undefined,
    };
  }
  // The committed counts bound a well-formed index's size: a small one is read whole in one
  // call, a large one by its head. A missing or unusable index (a larger one too) is just not used.
  const indexRead = indexIsFile === false
    ? undefined
    : await readListingIndex(fs, dir, meta, indexIsFile === true);
  let summary = indexRead !== undefined && "head" in indexRead
    ? await fastCountsFromHead(
      context,
      dir,
      meta,
      indexRead,
      needTitle,
      openLog,
    )
    : await fastCounts(context, dir, meta, indexRead?.index, needTitle, openLog);
  if (logRead && !sameRange(await reread(), meta)) {
    // The committed range changed while lines were read from the log by path: a save appended
    // (what was read is intact: a log never changes under a committed range) or a compaction
    // swapped the log. A checked scan of the range read tells them apart: it passes on the same
    // log, and is a `CorruptSessionError` on another (the listing then looks again).
    summary = await scanCommitted(context, dir, meta, needTitle, openLogAt);
  }
  // Only the fields a fallback title has (a title an index recorded may carry more).
  const title = summary.fallbackTitle === undefined
    ? undefined
    : copyFallbackTitle(summary.fallbackTitle);
  cache?.set(dir, meta, {
    userMessageCount: summary.userMessageCount,
    title: needTitle ? (title === undefined ? null : copyFallbackTitle(title)) : known?.title,
  });
  return { ...summary, fallbackTitle: title };
}

/**
 * Counts (and, when asked, the fallback title) from the index, its tail, or a full scan. The index
 * is used only when it matches (or covers a prefix of) the committed range and its rounds fit;
 * any inconsistency found while reading through it falls back to the full scan.
 */
async function fastCounts(
  context: StoreContext,
  dir: string,
  meta: StorageMeta,
  index: RoundIndex | undefined,
  needTitle: boolean,
  openLog: () => Promise<RegularFile>,
): Promise<Summary> {
  if (index !== undefined && indexMatches(index, meta) && roundsFit(index)) {
    const recorded = needTitle ? recordedTitle(index) : undefined;
    const title = !needTitle
      ? undefined
      : recorded !== undefined
      ? recorded ?? undefined
      : await titleFromRounds(openLog, meta, index.rounds);
    if (title !== INCONSISTENT) {
      return {
        header: meta.header,
        messageCount: meta.messageCount,
        userMessageCount: index.rounds.length,
        fallbackTitle: title,
      };
    }
  } else if (index !== undefined && coversPrefix(index, meta) && roundsFit(index)) {
    const tail = await scanTail(openLog, meta, index);
    const recorded = needTitle ? recordedTitle(index) : undefined;
    const title = tail === undefined || !needTitle
      ? undefined
      : recorded !== undefined
      ? recorded ?? undefined
      : await titleFromRounds(openLog, meta, index.rounds);
    if (tail !== undefined && title !== INCONSISTENT) {
      return {
        header: meta.header,
        messageCount: meta.messageCount,
        userMessageCount: index.rounds.length + tail.users,
        fallbackTitle: needTitle ? title ?? tail.title : undefined,
      };
    }
  }
  return await scanCommitted(context, dir, meta, needTitle, openLog);
}

/**
 * Counts from the head of an index (its counts, recorded title and first round), so a listing
 * reads the same few bytes however long the history is. The head is used only when it matches (or
 * covers a prefix of) the committed range and its counts fit. A title is taken from the head when
 * it names the first round's message; otherwise, with no title recorded, the first round's line
 * is read, and must be a user line. A recorded title of a later message is taken once the index
 * is found to list that message's round (`ListingIndex.listsRound`, a few small reads). When it
 * does not, or no title is recorded and the first user message yields none, the whole index is
 * read; any inconsistency falls back to `fastCounts` with the whole index, which itself falls
 * back to the full scan.
 */
async function fastCountsFromHead(
  context: StoreContext,
  dir: string,
  meta: StorageMeta,
  read: Extract<ListingIndex, { readonly head: RoundIndexHead }>,
  needTitle: boolean,
  openLog: () => Promise<RegularFile>,
): Promise<Summary> {
  const { head, whole: readWhole, listsRound } = read;
  const fits = head.roundCount <= head.messageCount &&
    (head.messageCount === 0 || head.roundCount > 0) &&
    head.bytes >= MIN_LINE_BYTES * head.messageCount &&
    (head.roundCount === 0 || head.firstRound !== undefined);
  const matches = head.generation === meta.generation && head.start === meta.start &&
    head.bytes === meta.bytes && head.messageCount === meta.messageCount;
  const prefix = !matches && head.start === meta.start && head.bytes > 0 &&
    head.bytes < meta.bytes && head.messageCount < meta.messageCount;
  const whole = async (): Promise<Summary> =>
    await fastCounts(context, dir, meta, await readWhole(), needTitle, openLog);
  if (!fits || !(matches || prefix)) return await whole();
  const tail = prefix
    ? await scanTail(openLog, meta, {
      format: INDEX_FORMAT,
      version: INDEX_VERSION,
      generation: head.generation,
      start: head.start,
      bytes: head.bytes,
      messageCount: head.messageCount,
      rounds: [],
    })
    : { users: 0, title: undefined };
  if (tail === undefined) return await whole();
  let title: SessionTitle | undefined;
  const recorded = head.fallbackTitle;
  if (needTitle && recorded !== undefined) {
    // Recorded for the indexed messages. A title of the first round's message is taken from the
    // head; one of a later message (the first user messages had no text, an image only) must be
    // of a round the index lists: looked up by a few small reads in a large index, else checked
    // against the whole index's rounds.
    const at = recorded?.messageIndices[0];
    if (
      at !== undefined && at !== head.firstRound?.messageIndex &&
      (listsRound === undefined || !(await listsRound(at)))
    ) {
      return await whole();
    }
    title = recorded ?? tail.title;
  } else if (needTitle && head.firstRound !== undefined) {
    const first = await titleFromRounds(openLog, meta, [head.firstRound]);
    if (first === INCONSISTENT) return await whole();
    // No eligible text in the first user message: later rounds are needed, from the whole index.
    if (first === undefined) return await whole();
    title = first;
  } else if (needTitle) {
    title = tail.title;
  }
  return {
    header: meta.header,
    messageCount: meta.messageCount,
    userMessageCount: head.roundCount + tail.users,
    fallbackTitle: title,
  };
}

/**
 * A copy of a fallback title: its text, source and message index, the only fields one has (a
 * title an index recorded with more is copied without them). Costs a fraction of
 * `structuredClone`, once per listed session.
 */
function copyFallbackTitle(title: SessionTitle): SessionTitle {
  // `+ 0`: a -0 another writer recorded is listed as 0.
  return {
    text: title.text,
    source: title.source,
    messageIndices: title.messageIndices.map((index) => index + 0),
  };
}

/**
 * The fallback title `index` recorded for its messages (null: none of them is eligible), when it
 * names the message of one of its rounds; undefined when none is recorded or it names another
 * message (the title is then read from the log, as for an index without one).
 */
function recordedTitle(index: RoundIndex): SessionTitle | null | undefined {
  const title = index.fallbackTitle;
  if (title === undefined || title === null) return title;
  const at = title.messageIndices[0] as number;
  const rounds = index.rounds;
  // The rounds are strictly increasing (`indexMatches`, `coversPrefix`): a binary search.
  let low = 0;
  let high = rounds.length - 1;
  while (low <= high) {
    const mid = (low + high) >> 1;
    const found = (rounds[mid] as RoundEntry).messageIndex;
    if (found === at) return title;
    if (found < at) low = mid + 1;
    else high = mid - 1;
  }
  return undefined;
}

/** The fewest bytes a committed line takes: one JSON character and its newline. */
const MIN_LINE_BYTES = 2;

/**
 * True when the rounds of an index (already checked to be strictly increasing inside its range)
 * fit its counts: no more rounds than messages, at least one round when there are messages (a
 * history without a user message is rare enough to be confirmed by a scan), and room for at
 * least `MIN_LINE_BYTES` per line before, between and after them.
 */
function roundsFit(index: RoundIndex): boolean {
  const rounds = index.rounds;
  if (rounds.length > index.messageCount) return false;
  if (index.messageCount > 0 && rounds.length === 0) return false;
  let messageIndex = 0;
  let byteOffset = 0;
  for (const round of rounds) {
    if (round.byteOffset - byteOffset < MIN_LINE_BYTES * (round.messageIndex - messageIndex)) {
      return false;
    }
    messageIndex = round.messageIndex;
    byteOffset = round.byteOffset;
  }
  return index.bytes - byteOffset >= MIN_LINE_BYTES * (index.messageCount - messageIndex);
}

/**
 * True when meta.json read again (`now`; undefined when that read found no valid one) commits the
 * range of `meta`. Lines read from the log by path after meta.json belong to that range only
 * while it does (a compaction may have swapped the directory since, restarting its log at 0).
 */
function sameRange(now: StorageMeta | undefined, meta: StorageMeta): boolean {
  return now !== undefined && sameCommittedRange(now, meta);
}

/**
 * True when `index` describes an earlier, strictly shorter state of the same committed generation
 * chain (an index of as many bytes is of this very state only when its generation matches).
 */
function coversPrefix(index: RoundIndex, meta: StorageMeta): boolean {
  if (
    index.start !== meta.start || index.bytes >= meta.bytes ||
    index.messageCount >= meta.messageCount || index.bytes === 0
  ) return false;
  let previous = -1;
  let previousOffset = -1;
  for (const round of index.rounds) {
    if (
      round.messageIndex >= index.messageCount || round.byteOffset >= index.bytes ||
      round.messageIndex <= previous || round.byteOffset <= previousOffset
    ) return false;
    previous = round.messageIndex;
    previousOffset = round.byteOffset;
  }
  return true;
}

/** Bytes of an unindexed tail read at a time: memory stays bounded whatever the index lags by. */
const TAIL_CHUNK = 1024 * 1024;

/**
 * Reads the unindexed tail, streamed in `TAIL_CHUNK` pieces (an index another writer left may lag
 * by any number of bytes: only the line being read is held); undefined when it does not line up
 * with the index.
 */
async function scanTail(
  openLog: () => Promise<RegularFile>,
  meta: StorageMeta,
  index: RoundIndex,
): Promise<{ users: number; title: SessionTitle | undefined } | undefined> {
  // A log gone since meta.json was read is left to the full scan, which reports it.
  const log = await openUnlessMissing(openLog);
  if (log === undefined) return undefined;
  const { handle, size } = log;
  const expected = meta.messageCount - index.messageCount;
  let lines = 0;
  let users = 0;
  let title: SessionTitle | undefined;
  /**
   * Takes one tail line; false when the tail does not line up (more lines than the counts say, a
   * line that cannot be decoded or parsed, a user message the full scan would reject): the full
   * scan then reports it by name.
   */
  const take = (bytes: Uint8Array): boolean => {
    const at = lines++;
    if (lines > expected) return false;
    const line = decodedOrUndefined(bytes);
    if (line === undefined) return false;
    if (!mayBeUserMessage(line)) return true;
    let message: Message;
    try {
      message = JSON.parse(line) as Message;
    } catch {
      return false;
    }
    if (message?.role !== "user") return true;
    if (malformedTitleText(message) !== undefined) return false;
    users++;
    title ??= eligibleTitleOf(message, index.messageCount + at);
    return true;
  };
  try {
    // A log shorter than the committed range is left to the full scan, which reports it; a
    // lying meta.json never sizes a read beyond the file.
    const end = meta.start + meta.bytes;
    if (end > (await size())) return undefined;
    // From one byte before the tail: the indexed prefix must end with a newline, so the first
    // line read is the empty one it ends.
    let first = true;
    const read = await readLines(handle, meta.start + index.bytes - 1, end, TAIL_CHUNK, {
      onLine: (bytes) => {
        if (!first) return take(bytes);
        first = false;
        return bytes.length === 0;
      },
    });
    // The committed range ends with a newline, and holds the lines the counts say.
    if (
      read.shortAt !== undefined || read.stopped || read.trailing !== undefined ||
      lines !== expected
    ) {
      return undefined;
    }
  } finally {
    await handle.close();
  }
  return { users, title };
}

/** What `titleFromRounds` returns when the index does not point at user message lines. */
const INCONSISTENT: unique symbol = Symbol("inconsistent index");

/**
 * Reads the rounds' user messages in order until one yields a fallback title. Each must start a
 * line inside the committed range and parse as a user message; `INCONSISTENT` otherwise.
 */
async function titleFromRounds(
  openLog: () => Promise<RegularFile>,
  meta: StorageMeta,
  rounds: readonly RoundEntry[],
): Promise<SessionTitle | undefined | typeof INCONSISTENT> {
  if (rounds.length === 0) return undefined;
  // A log gone since meta.json was read is left to the full scan, which reports it.
  const log = await openUnlessMissing(openLog);
  if (log === undefined) return INCONSISTENT;
  const { handle, size } = log;
  try {
    // A log shorter than the committed range is not the one meta.json describes (a compaction
    // swapped the directory since meta.json was read, or damage): its lines at these offsets
    // could be other messages, so nothing is taken from it.
    if ((await size()) < meta.start + meta.bytes) return INCONSISTENT;
    for (const round of rounds) {
      const line = await readLineAt(handle, meta, round.byteOffset);
      if (line === undefined) return INCONSISTENT;
      let message: Message;
      try {
        message = JSON.parse(line) as Message;
      } catch {
        return INCONSISTENT;
      }
      if (message?.role !== "user" || malformedTitleText(message) !== undefined) {
        return INCONSISTENT;
      }
      const title = eligibleTitleOf(message, round.messageIndex);
      if (title !== undefined) return title;
    }
    return undefined;
  } finally {
    await handle.close();
  }
}

/**
 * Reads the committed line starting at range-relative `offset`; undefined when `offset` is not at
 * a line start (offset 0, or the byte before it is a newline) or the line does not end inside the
 * committed range (a short read included: the full scan then reports what is wrong).
 */
async function readLineAt(
  handle: FileHandle,
  meta: StorageMeta,
  offset: number,
): Promise<string | undefined> {
  const end = meta.bytes;
  let size = 1024;
  const pieces: Uint8Array[] = [];
  // From the byte before the line, which must be the previous line's newline.
  let skip = offset === 0 ? 0 : 1;
  let position = offset - skip;
  for (;;) {
    const length = Math.min(size, end - position);
    if (length <= skip) return undefined;
    const chunk = await handle.read(meta.start + position, length);
    if (chunk.length !== length) return undefined;
    if (skip === 1 && chunk[0] !== 10) return undefined;
    const newline = chunk.indexOf(10, skip);
    if (newline >= 0) {
      pieces.push(chunk.subarray(skip, newline));
      break;
    }
    pieces.push(chunk.subarray(skip));
    position += chunk.length;
    skip = 0;
    size = Math.min(size * 4, 4 * 1024 * 1024);
  }
  if (pieces.length === 1) return decodedOrUndefined(pieces[0] as Uint8Array);
  const total = pieces.reduce((sum, piece) => sum + piece.length, 0);
  const out = new Uint8Array(total);
  let at = 0;
  for (const piece of pieces) {
    out.set(piece, at);
    at += piece.length;
  }
  return decodedOrUndefined(out);
}

/**
 * `bytes` decoded as one string; undefined when the runtime cannot hold them in one (the full
 * scan then reports the line by name, as an open does).
 */
function decodedOrUndefined(bytes: Uint8Array): string | undefined {
  try {
    return decoder.decode(bytes);
  } catch {
    return undefined;
  }
}

/** The log `openLog` opens; undefined when it is missing (the full scan reports that). */
async function openUnlessMissing(
  openLog: () => Promise<RegularFile>,
): Promise<RegularFile | undefined> {
  try {
    return await openLog();
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
}

/** A full scan of the committed range (checksum verified) for counts and the fallback title. */
async function scanCommitted(
  context: StoreContext,
  dir: string,
  meta: StorageMeta,
  needTitle: boolean,
  openLog: () => Promise<RegularFile>,
): Promise<Summary> {
  let users = 0;
  let title: SessionTitle | undefined;
  let bad: { index: number; offset: number; error: unknown } | undefined;
  let malformed: { path: string; value: unknown } | undefined;
  const file = join(dir, MESSAGES_FILE);
  // Nothing committed needs no log (it may be missing); otherwise the log is opened as checked.
  const options = meta.bytes === 0
    ? { sha256: context.sha256 }
    : { sha256: context.sha256, opening: openLog().then((log) => log.handle) };
  await forEachCommittedLine(context.fs, dir, meta, options, (line) => {
    // Of the damage looked for here, the first met is reported (`summarize` then takes an open's
    // first error, which may be at an earlier line in a field not looked at here).
    if (bad !== undefined || malformed !== undefined) return;
    let message: Message;
    try {
      message = JSON.parse(line.text) as Message;
    } catch (error) {
      bad = { index: line.index, offset: line.offset, error };
      return;
    }
    if (message?.role !== "user") return;
    users++;
    if (title === undefined && needTitle) {
      const where = malformedTitleText(message);
      if (where !== undefined) {
        // Reported once the range is known to be the committed one (its checksum holds).
        malformed ??= { path: `messages[${line.index}].${where.path}`, value: where.value };
        return;
      }
      title = eligibleTitleOf(message, line.index);
    }
  });
  if (bad !== undefined) {
    const failure = bad as { index: number; offset: number; error: unknown };
    // A line too long for one string, or not JSON: the typed error naming it, as an open reports
    // it (the range's checksum holds: the bytes are what a writer committed).
    if (failure.error instanceof SessionFormatError) throw failure.error;
    throw invalidMessageJson(failure.error, file, failure.index);
  }
  if (malformed !== undefined) {
    const { path, value } = malformed as { path: string; value: unknown };
    throw new SessionFormatError("Invalid user message content", { file, path, value });
  }
  return {
    header: meta.header,
    messageCount: meta.messageCount,
    userMessageCount: users,
    fallbackTitle: title,
  };
}
