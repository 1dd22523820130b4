/**
 * Archive membership and staged deletion, per collection (`SessionStore.archive`).
 *
 * ## Membership
 *
 * `<collection>/archive.json` is a JSON array of session ids (36 characters of `[a-f0-9-]`),
 * written as compact JSON and a newline by atomic replace. A missing file is the empty set; any
 * other content is a `SessionFormatError` naming the file. Archiving and restoring change only
 * this file: the session's three files and any legacy backup are never touched, and history saves
 * never touch membership.
 *
 * ## Delete
 *
 * `delete(cwd, ids, { archivedOnly = true })` removes whole sessions: the session directory, any
 * legacy backup `<id>.jsonl`, any companion trace files (regular files named
 * `<id>.<anything>`; a directory or a link named so is not the session's and stays) and the
 * staging directory of an interrupted compaction that recovery kept with a previous copy of the
 * session (see `recoverStaging`). Under the collection lock:
 *
 * 1. every id must be listed in the collection (for the cwd, when given) and, by default,
 *    archived; a session open for writing is refused (`SessionBusyError` / `SessionLockedError`);
 * 2. a private staging directory `<collection>/.delete-<uuid>` (0700) is created and its journal
 *    `intent.json` (the ids, the entry names in move order, the ids that were archived, and the
 *    companions taken along, see below) is written durably;
 * 3. companions an earlier rolled-back delete kept (below), kept compaction staging directories,
 *    companions, then the legacy backup, then the session directory are renamed into it — a
 *    crash midway never leaves a backup or a previous copy listed in place of its directory;
 * 4. the membership change is written, then the `committed` marker (written and fsynced under a
 *    temp name, then renamed in): **the commit point**;
 * 5. the staging directory is fsynced, then the staged entries are removed, the journal last.
 *
 * A failure before the commit point moves everything back (the directory first) and restores
 * membership. A companion whose name exists again in the collection by then (a trace file written
 * since) is not moved over it: it stays in the staging directory, which recovery then keeps and
 * `SessionStore.cleanup` reports as kept, and whose journal no longer restores membership once the
 * rollback restored it (archiving and restoring then work as for any session); so does anything
 * else a delete never stages there (it is not the store's to remove). A later delete of
 * the session takes such kept companions along (each into a `kept-<n>` directory of its own
 * staging directory, before its own entries; its rollback puts them back last, into the
 * collection when their name is free, otherwise keeping them the same way), so none is left to be
 * moved back once the session is gone; once finished it recovers the staging directories it took
 * them from, which hold nothing of its sessions any more. A session's legacy backup, directory or
 * compaction copy whose name exists again in the collection stops the rollback instead (the staged
 * copy may be the only one of the session): recovery keeps the staging directory with its journal,
 * which still restores membership, and reports it as kept. Until the user keeps one of the two
 * copies (moving the other out of the collection) and runs cleanup, archiving, restoring and
 * deleting that session are refused with a `CorruptSessionError` naming the journal: a delete
 * would remove only the copy in place, and the next recovery would bring the staged one back; a
 * restore would be outweighed by the journal. A failure after the commit point is reported and
 * never rolled back: the sessions stay gone, and what is still staged is removed by the next
 * recovery. After a crash, the next structural operation in the collection (or
 * `SessionStore.cleanup`) reads the journal: with `committed` it finishes the removal, without it
 * it rolls back. Each session is therefore either fully present or fully gone, and after a
 * successful delete nothing of it can reappear.
 *
 * Readers never wait for that recovery and never run it: until the `committed` marker exists, a
 * delete **did not happen** for them. Discovery lists a staged session from inside the staging
 * directory, with the archive membership a rollback would restore (and one that a rollback moved
 * back since the collection was listed, in place: `StagedDeletion.movedBack`), and a read-only
 * `SessionStore.open` reads it there (`inspectDeletion`); a writable open recovers first, and so
 * does any open of a staged legacy file whose session was never migrated (migrating it writes).
 * Once the marker exists the staged sessions are gone for everyone.
 *
 * @module
 */
import * as v from "valibot";
import type { DirEntry, FileSystem } from "../port/fs.ts";
import { FsError, NotFound } from "../port/errors.ts";
import {
  atomicReplace,
  entryKind,
  forgetDurable,
  isTempName,
  PRIVATE_DIR_MODE,
  PRIVATE_FILE_MODE,
  readDirIfExists,
  removeIfExists,
  tempNameFor,
} from "../port/durable.ts";
import { join } from "../port/path.ts";
import { ensureFoundFileDurable } from "../port/regular.ts";
import {
  CorruptSessionError,
  InvalidArgumentError,
  preview,
  SessionError,
  type SessionErrorOptions,
  SessionFormatError,
  SessionNotFoundError,
} from "./errors.ts";
import { isSessionId } from "./records/mod.ts";
import { issueDetail } from "./records/_validation.ts";
import { acquireWriterLock, dropMovedLocks, type HeldLock, type StoreContext } from "./lock.ts";
import type { ListResult } from "./discovery.ts";
import { LEGACY_EXTENSION, legacySessionId } from "./legacy.ts";
import { previousSession, stagingSessionId } from "./compaction.ts";
import { issuePath, readIfRegular, readSessionFile, refuseIrregularFile } from "./storage.ts";

/** The file name of a collection's archive membership. */
export const ARCHIVE_FILE = "archive.json";
/** The name prefix of delete staging directories. */
export const DELETE_PREFIX = ".delete-";

/**
 * True for the name of a delete staging directory as a delete makes it (`.delete-<uuid>`, the
 * UUID lowercase): only such a directory is read, recovered or removed as one. Another name that
 * starts with `.delete-` is not the store's (a user's `.delete-drafts/`) and is left alone.
 */
export function isDeleteStagingName(name: string): boolean {
  return DELETE_STAGING_NAME.test(name);
}

/**
 * True for the name of a private directory of the store's own operations: a migration's,
 * compaction's or salvage's `.staging-<id>-<8 hex>`, or a delete's `.delete-<uuid>`. Another name
 * that merely starts like one (`.staging-area/`) is an ordinary directory.
 */
export function isPrivateStagingName(name: string): boolean {
  return stagingSessionId(name) !== undefined || isDeleteStagingName(name);
}

const DELETE_STAGING_NAME =
  /^\.delete-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** The journal of a delete, inside its staging directory. */
export const DELETE_INTENT_FILE = "intent.json";
/** The commit marker of a delete, inside its staging directory. */
export const DELETE_COMMITTED_FILE = "committed";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** `delete` was asked to remove a session that is not archived (with `archivedOnly`). */
export class SessionNotArchivedError extends SessionError {
  /** The session id. */
  readonly id: string;
  /** Creates the error for session `id`. */
  constructor(id: string, options: SessionErrorOptions = {}) {
    super(
      `Session is not archived: ${id}; archive it first or pass { archivedOnly: false }`,
      options,
    );
    this.id = id;
  }
}

/** Parses archive.json content. */
export function parseArchiveMembership(bytes: Uint8Array, file: string): string[] {
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(bytes));
  } catch (error) {
    throw new SessionFormatError(`Invalid session archive: ${(error as Error).message}`, {
      file,
      cause: error,
    });
  }
  if (!Array.isArray(value)) {
    throw new SessionFormatError("Invalid session archive: expected a JSON array of session ids", {
      file,
      path: "",
      value,
    });
  }
  value.forEach((id, index) => {
    if (!isSessionId(id)) {
      throw new SessionFormatError("Invalid session archive: not a session id", {
        file,
        path: `[${index}]`,
        value: id,
      });
    }
  });
  return [...new Set(value as string[])];
}

/**
 * The archived ids of `collection` in insertion order (empty when archive.json is missing).
 * archive.json is never read through a link, nor waited on as a FIFO: with `readFileNoFollow` in
 * one call, otherwise after checking its kind. One that is not a regular file is refused.
 *
 * @throws {SessionFormatError} When archive.json is not a regular file or not a valid membership.
 */
export async function readArchiveMembership(
  fs: FileSystem,
  collection: string,
): Promise<string[]> {
  const file = join(collection, ARCHIVE_FILE);
  const read = await readIfRegular(fs, file);
  if (read === undefined) return [];
  if (typeof read === "string") refuseIrregularFile(read, file);
  return parseArchiveMembership(read as Uint8Array, file);
}

/** Replaces archive.json of `collection` with `ids` (compact JSON and a newline). */
export async function writeArchiveMembership(
  context: StoreContext,
  collection: string,
  ids: readonly string[],
): Promise<void> {
  await atomicReplace(
    context.fs,
    join(collection, ARCHIVE_FILE),
    encoder.encode(JSON.stringify(ids) + "\n"),
    { durability: context.durability },
  );
}

/** What `SessionArchive` needs from its store. */
export interface ArchiveHost {
  /** The store context. */
  readonly context: StoreContext;
  /**
   * The collection for `cwd` (the configured `sessionDir`, else the workspace collection) and the
   * canonical cwd filter; with undefined cwd the configured `sessionDir` (else
   * `InvalidArgumentError`) and no filter.
   */
  resolve(cwd: string | undefined): Promise<{ collection: string; cwd: string | undefined }>;
  /**
   * Runs `task` under the collection lock, after recovering leftovers. With `create` a missing
   * collection is created first; without it, `task` runs unlocked when there is no collection.
   */
  exclusive<T>(collection: string, task: () => Promise<T>, create: boolean): Promise<T>;
  /** Reads the sessions `ids` of the collection (fast mode, failures collected). */
  find(collection: string, cwd: string | undefined, ids: readonly string[]): Promise<ListResult>;
}

/** Options of `SessionArchive.delete`. */
export interface DeleteOptions {
  /** Refuse sessions that are not archived; default true. */
  readonly archivedOnly?: boolean;
}

function checkIds(ids: readonly string[], what: string): string[] {
  if (!Array.isArray(ids)) {
    throw new InvalidArgumentError("ids", `${what}: expected an array of ids`);
  }
  for (const id of ids) {
    if (!isSessionId(id)) throw new InvalidArgumentError("ids", `${what}: ${preview(id)}`);
  }
  return [...new Set(ids)];
}

/**
 * Archive membership and deletion of sessions, per collection. An undefined `cwd` means the
 * store's configured `sessionDir` (rejected with `InvalidArgumentError` when there is none).
 */
export class SessionArchive {
  readonly #host: ArchiveHost;

  /** Creates the archive of a store; use `SessionStore.archive`. */
  constructor(host: ArchiveHost) {
    this.#host = host;
  }

  /**
   * Archives (`archived` true) or restores sessions: adds or removes the ids idempotently,
   * keeping insertion order. Only archive.json changes. Rejects an invalid id before anything,
   * and (`CorruptSessionError` naming the journal, changing nothing) a session whose legacy file,
   * directory or compaction copy a delete staging directory kept by recovery still holds (see
   * the module doc): that journal's membership would still count for it.
   */
  async set(cwd: string | undefined, ids: readonly string[], archived: boolean): Promise<void> {
    const selected = checkIds(ids, "Invalid archived session ID");
    if (typeof archived !== "boolean") {
      throw new InvalidArgumentError("archived", `Invalid archived state: ${preview(archived)}`);
    }
    const { collection } = await this.#host.resolve(cwd);
    // No ids change nothing: no collection is created and no lock is taken for them.
    if (selected.length === 0) return;
    const context = this.#host.context;
    await this.#host.exclusive(collection, async () => {
      await refuseKeptSessions(context.fs, collection, selected, archived ? "archive" : "restore");
      const current = await readArchiveMembership(context.fs, collection);
      const members = new Set(current);
      for (const id of selected) {
        if (archived) members.add(id);
        else members.delete(id);
      }
      const next = [...members];
      if (next.length === current.length && next.every((id, i) => id === current[i])) {
        // Already as asked, maybe by a call that failed after its rename (before the directory's
        // fsync) or by a process that died there: made durable before this call resolves.
        await ensureFoundFileDurable(
          context.fs,
          join(collection, ARCHIVE_FILE),
          context.durability,
        );
        return;
      }
      await writeArchiveMembership(context, collection, next);
    }, archived);
  }

  /**
   * True when `id` is archived in the collection (as listings report it: a delete that has not
   * committed did not happen, so the membership its rollback restores counts).
   */
  async isArchived(cwd: string | undefined, id: string): Promise<boolean> {
    checkIds([id], "Invalid archived session ID");
    const { collection } = await this.#host.resolve(cwd);
    return (await effectiveMembership(this.#host.context.fs, collection)).includes(id);
  }

  /**
   * The archived ids of the collection, in insertion order (then those an uncommitted delete's
   * rollback restores, as listings report them).
   */
  async list(cwd: string | undefined): Promise<string[]> {
    const { collection } = await this.#host.resolve(cwd);
    return await effectiveMembership(this.#host.context.fs, collection);
  }

  /**
   * Deletes sessions with everything that belongs to them (see the module doc). Every id must be
   * listed in the collection (`SessionNotFoundError`) and then, unless `archivedOnly` is false,
   * every id archived (`SessionNotArchivedError`): an id not found is reported before one that is
   * not archived, whatever their order. With an undefined cwd, a session that cannot be read
   * (corrupt) may be deleted too. A session whose legacy file, directory or compaction copy a
   * delete staging directory kept by recovery still holds (or that a staged delete whose journal
   * cannot be read holds) is refused with a `CorruptSessionError` naming that journal, and nothing
   * changes (see the module doc).
   */
  async delete(
    cwd: string | undefined,
    ids: readonly string[],
    options: DeleteOptions = {},
  ): Promise<void> {
    const selected = checkIds(ids, "Invalid session id");
    if (typeof options !== "object" || options === null) {
      throw new InvalidArgumentError("options", `Delete options must be an object`);
    }
    if (options.archivedOnly !== undefined && typeof options.archivedOnly !== "boolean") {
      throw new InvalidArgumentError("archivedOnly", `archivedOnly must be a boolean`);
    }
    const archivedOnly = options.archivedOnly !== false;
    const resolved = await this.#host.resolve(cwd);
    const { collection } = resolved;
    const context = this.#host.context;
    if (selected.length === 0) return;
    await this.#host.exclusive(collection, async () => {
      await refuseKeptSessions(context.fs, collection, selected, "delete");
      const members = await readArchiveMembership(context.fs, collection);
      const found = await this.#host.find(collection, resolved.cwd, selected);
      const listed = new Set(found.sessions.map((s) => s.id));
      const failed = new Map(found.failures.map((f) => [f.id, f.error]));
      for (const id of selected) {
        const failure = failed.get(id);
        // A storage fault is never mistaken for absence; an unreadable session may be deleted
        // from an explicit collection, where no cwd has to be checked.
        if (failure instanceof FsError) throw failure;
        if (!listed.has(id) && !(failure !== undefined && resolved.cwd === undefined)) {
          // One that cannot be read is not known to be the project's: said, with why.
          throw new SessionNotFoundError(
            failure === undefined
              ? `Session not found in project: ${id}`
              : `Session not found in project: ${id} cannot be read (${
                (failure as Error).message
              }); delete it by its collection`,
            { file: join(collection, id), cause: failure },
          );
        }
      }
      // Then every id must be archived, as the version-2 delete checks them: all found first.
      for (const id of archivedOnly ? selected : []) {
        if (!members.includes(id)) {
          throw new SessionNotArchivedError(id, { file: join(collection, ARCHIVE_FILE) });
        }
      }
      await deleteStaged(context, collection, selected, members, failed);
    }, false);
  }
}

/** The journal of a delete. */
interface DeleteIntent {
  readonly operation: "delete";
  readonly ids: readonly string[];
  /** Entry names of the collection, in move order. */
  readonly entries: readonly string[];
  /** The ids of the delete that were archived. */
  readonly archived: readonly string[];
  /** The whole membership before the delete (its order is restored on rollback). */
  readonly membersBefore: readonly string[];
  /**
   * The names of the companions taken along from the staging directories of earlier rolled-back
   * deletes that kept them (see `keptCompanionsOf`); the i-th is staged as
   * `<staging>/kept-<i>/<name>`. Missing in journals that took none along.
   */
  readonly kept?: readonly string[];
}

/** The prefix of the subdirectory of a delete's staging directory holding a companion taken along. */
const KEPT_PREFIX = "kept-";

/** Where the i-th companion taken along waits in a delete's staging directory (relative to it). */
function keptDir(index: number): string {
  return `${KEPT_PREFIX}${index}`;
}

/** True for the name of a directory a delete stages a companion taken along in (`kept-<n>`). */
function isKeptDirName(name: string): boolean {
  return /^kept-(0|[1-9][0-9]*)$/.test(name);
}

/**
 * `entries` (of the listing of the delete staging directory `staging`) less its empty `kept-<n>`
 * directories: such a directory stages nothing (a delete makes it before moving a companion in,
 * and its rollback empties it before removing it, then the journal), so a staging directory
 * holding only those and no journal is one that staged nothing, or whose rollback was interrupted
 * at its end: it is removed as such, never reported as a delete whose journal is missing.
 */
async function withoutEmptyKeptDirs(
  fs: FileSystem,
  staging: string,
  entries: readonly DirEntry[],
): Promise<DirEntry[]> {
  const out: DirEntry[] = [];
  for (const entry of entries) {
    if (entry.kind === "directory" && isKeptDirName(entry.name)) {
      const inside = await listStaging(fs, join(staging, entry.name));
      if (inside === undefined || inside.length === 0) continue;
    }
    out.push(entry);
  }
  return out;
}

/** The names a delete stages in its staging directory: its entries, then what it took along. */
function stagedNames(intent: DeleteIntent): string[] {
  return [...intent.entries, ...(intent.kept ?? []).map((_, i) => keptDir(i))];
}

/** A companion of a session that a rolled-back delete kept, to be taken along by a new delete. */
interface KeptCompanion {
  /** The delete staging directory that keeps it (its name in the collection). */
  readonly from: string;
  /** The directory holding it: `from`, or a subdirectory of `from` holding one taken along. */
  readonly dir: string;
  /** Its name, in that directory and in the collection. */
  readonly name: string;
}

/**
 * The companions of the sessions `ids` that the staging directories of earlier deletes of
 * `listing` (the collection's) keep: uncommitted deletes with a readable journal (under the
 * collection lock, after recovery, rolled back but for companions whose names exist again), whose
 * journal names them, staged as regular files. A new delete of those sessions takes them along,
 * so that nothing of a deleted session is left to come back: recovery moves a kept companion back
 * once its name is free, as it is once the session is deleted.
 */
async function keptCompanionsOf(
  fs: FileSystem,
  collection: string,
  listing: readonly DirEntry[],
  ids: readonly string[],
): Promise<KeptCompanion[]> {
  const out: KeptCompanion[] = [];
  const ours = (name: string) => {
    const id = sessionIdOfEntry(name);
    return id !== undefined && ids.includes(id) && isCompanion(name, "file");
  };
  const names = deleteStagingNames(listing);
  for (const from of names) {
    const staging = join(collection, from);
    const staged = await listStaging(fs, staging);
    if (staged === undefined || isCommitted(staged)) continue;
    const { intent } = await readIntent(fs, staging);
    if (intent === undefined) continue;
    for (const name of intent.entries) {
      if (!ours(name)) continue;
      if (staged.some((entry) => entry.name === name && entry.kind === "file")) {
        out.push({ from, dir: staging, name });
      }
    }
    const kept = intent.kept ?? [];
    for (let i = 0; i < kept.length; i++) {
      const name = kept[i] as string;
      if (!ours(name)) continue;
      const dir = join(staging, keptDir(i));
      // Only a directory a delete made holds a companion taken along: anything else at its name
      // (a link above all, which would lead outside the collection) is never looked through.
      if (await entryKind(fs, dir) !== "directory") continue;
      if (await entryKind(fs, join(dir, name)) === "file") out.push({ from, dir, name });
    }
  }
  return out;
}

/** The names of the delete staging directories (`.delete-*`) in a collection `listing`, sorted. */
function deleteStagingNames(listing: readonly DirEntry[]): string[] {
  return listing
    .filter((entry) => entry.kind === "directory" && isDeleteStagingName(entry.name))
    .map((entry) => entry.name)
    .sort();
}

/**
 * Refuses (`CorruptSessionError` naming the staging directory's journal) to archive, restore
 * (`verb`) or delete any of the sessions `ids` while a delete staging directory of the collection
 * that recovery kept holds one of their own entries: its legacy file, its directory or a kept
 * compaction copy of it, staged by a delete whose rollback found that name in the collection
 * again (the old copy is kept, see `rollBackDeletion`), or anything of it staged by a delete
 * whose journal cannot be read. The caller holds the collection lock and has recovered it, so
 * every uncommitted delete still there is one recovery kept. Such a session is still there for
 * every reader (listed from the staged copy, or from what took its name, with the membership the
 * journal restores), and neither change could be told apart from nothing: a delete would remove
 * only what is in place, and the next recovery, once the name is free, would bring the old staged
 * copy back; a restore would write archive.json while the journal still archives the id. The
 * user keeps one copy (moving the other out of the collection) and runs cleanup; then the session
 * is an ordinary one again. Companions (trace files) a rolled-back delete kept are not refused: a
 * delete takes them along (`keptCompanionsOf`), and their journal restores no membership.
 */
async function refuseKeptSessions(
  fs: FileSystem,
  collection: string,
  ids: readonly string[],
  verb: "archive" | "restore" | "delete",
): Promise<void> {
  const names = deleteStagingNames(await readDirIfExists(fs, collection));
  for (const from of names) {
    const staging = join(collection, from);
    const listed = await listStaging(fs, staging);
    if (listed === undefined || isCommitted(listed)) continue;
    const staged = await withoutEmptyKeptDirs(fs, staging, stagedEntries(listed));
    const { intent, invalid } = await readIntent(fs, staging);
    if (intent === undefined) {
      // Whatever it holds of a session makes listings report that session with this error.
      const held = staged.some((entry) => {
        const id = sessionIdOfEntry(entry.name) ?? stagingSessionId(entry.name);
        return id !== undefined && ids.includes(id);
      });
      if (held) throw unreadableJournal(staging, invalid);
      continue;
    }
    // The session's own entries the journal names (not companions): what a rollback puts back.
    const own = staged
      .map((entry) => entry.name)
      .filter((name) => intent.entries.includes(name) && !isCompanion(name, "file"));
    const name = own.find((name) => {
      const id = sessionIdOfEntry(name) ?? stagingSessionId(name);
      return id !== undefined && ids.includes(id);
    });
    if (name === undefined) continue;
    const id = (sessionIdOfEntry(name) ?? stagingSessionId(name)) as string;
    // What stops its rollback: the first of its entries found in the collection again.
    let taken: string | undefined;
    for (const other of own) {
      if (await entryKind(fs, join(collection, other)) !== undefined) {
        taken = other;
        break;
      }
    }
    const why = taken === undefined
      ? "its rollback did not finish"
      : `its rollback cannot put it back: ${
        taken === name ? "that name" : `'${taken}'`
      } exists again in the collection`;
    throw new CorruptSessionError(
      `Cannot ${verb} session ${id}: an interrupted delete keeps '${name}' of it in '${staging}' ` +
        `(${why}); keep one copy (move the one in the collection, or the staged one, out of ` +
        `the collection), then run cleanup`,
      { file: join(staging, DELETE_INTENT_FILE) },
    );
  }
}

/**
 * The collection entries of session `id`, in move order: the staging directories of its
 * interrupted compactions (kept by recovery with a previous copy of the session), companions,
 * legacy backup, directory. A previous copy goes first: staged ahead of the directory, it never
 * outlives it in the collection, where it would be listed (and restored) in its place. Only
 * entries of the session's kinds are its own: a companion or a legacy backup is a regular file,
 * the session and a compaction's staging a directory. Anything else named like them (a directory
 * named `<id>.jsonl`, a link) is not the session's, and stays where it is.
 */
function entriesOf(listing: readonly DirEntry[], id: string): string[] {
  const out: string[] = [];
  for (const entry of listing) {
    if (entry.kind === "directory" && stagingSessionId(entry.name) === id) out.push(entry.name);
  }
  for (const entry of listing) {
    const name = entry.name;
    if (entry.kind === "file" && name.startsWith(id + ".") && name !== id + LEGACY_EXTENSION) {
      out.push(name);
    }
  }
  const legacy = id + LEGACY_EXTENSION;
  if (listing.some((entry) => entry.kind === "file" && entry.name === legacy)) out.push(legacy);
  if (listing.some((entry) => entry.kind === "directory" && entry.name === id)) out.push(id);
  return out;
}

/**
 * Refuses, before anything changes, a delete of a session with a companion the runtime lists by a
 * name nothing can be reached by (a name that is not valid UTF-8, which the runtime spells with
 * U+FFFD): it could not be moved, and the delete would fail and roll back each time on a path
 * that is not there. The `SessionFormatError` names it as listed and says what to do.
 */
async function refuseUnreachableEntries(
  fs: FileSystem,
  collection: string,
  listing: readonly DirEntry[],
  ids: readonly string[],
): Promise<void> {
  for (const id of ids) {
    for (const name of entriesOf(listing, id)) {
      if (!name.includes("\uFFFD")) continue;
      const path = join(collection, name);
      // Listed as one file, and a file is there by that name: its own. Listed as two files (a
      // look-alike spelled with U+FFFD beside it), or something else there by that name (the
      // look-alike is a directory or a link), the file listed cannot be reached.
      const files = listing.filter((entry) => entry.name === name && entry.kind === "file");
      if (files.length === 1 && await entryKind(fs, path) === "file") continue;
      throw new SessionFormatError(
        `Cannot delete session ${id}: the file listed beside it as '${name}' cannot be reached ` +
          "by that name (it is not valid UTF-8); rename or remove it, then delete again",
        { file: path },
      );
    }
  }
}

async function writeDurably(context: StoreContext, path: string, data: Uint8Array): Promise<void> {
  const handle = await context.fs.open(path, {
    createNew: true,
    write: true,
    mode: PRIVATE_FILE_MODE,
  });
  try {
    await handle.write(data);
    if (context.durability === "full") await handle.sync();
  } finally {
    await handle.close();
  }
}

async function deleteStaged(
  context: StoreContext,
  collection: string,
  ids: readonly string[],
  members: readonly string[],
  failures: ReadonlyMap<string | undefined, unknown>,
): Promise<void> {
  const fs = context.fs;
  const full = context.durability === "full";
  const listing = await fs.readDir(collection);
  for (const id of ids) {
    if (entriesOf(listing, id).length > 0) continue;
    // Nothing of the session is in the collection: its entries wait in a staged delete whose
    // journal cannot be read (the failure its listing reported). Deleting nothing would only
    // drop its archive membership and report success.
    const failure = failures.get(id);
    throw failure instanceof Error ? failure : new SessionNotFoundError(
      `Session not found in project: ${id}`,
      { file: join(collection, id) },
    );
  }
  await refuseUnreachableEntries(fs, collection, listing, ids);
  // Companions an earlier rolled-back delete kept: taken along, so none comes back afterwards.
  const adopted = await keptCompanionsOf(fs, collection, listing, ids);
  const directories = new Set(
    listing.filter((entry) => entry.kind === "directory").map((entry) => entry.name),
  );
  const locks: HeldLock[] = [];
  try {
    for (const id of ids) {
      if (directories.has(id)) {
        locks.push(await acquireWriterLock(context, join(collection, id), { holder: "deleted" }));
      }
    }
  } catch (error) {
    await releaseAll(locks);
    throw error;
  }
  const intent: DeleteIntent = {
    operation: "delete",
    ids,
    entries: ids.flatMap((id) => entriesOf(listing, id)),
    archived: ids.filter((id) => members.includes(id)),
    membersBefore: members,
    ...(adopted.length === 0 ? {} : { kept: adopted.map((companion) => companion.name) }),
  };
  const staging = join(collection, DELETE_PREFIX + globalThis.crypto.randomUUID());
  let committed = false;
  try {
    await fs.mkdir(staging, { mode: PRIVATE_DIR_MODE });
    await fs.chmod(staging, PRIVATE_DIR_MODE);
    await writeDurably(
      context,
      join(staging, DELETE_INTENT_FILE),
      encoder.encode(JSON.stringify(intent) + "\n"),
    );
    // The directories of the kept companions taken along, made durable with the journal: a
    // companion is never moved into a directory whose own entry a crash could still lose.
    for (let i = 0; i < adopted.length; i++) {
      await fs.mkdir(join(staging, keptDir(i)), { mode: PRIVATE_DIR_MODE });
    }
    if (full) {
      await fs.syncDir(staging);
      await fs.syncDir(collection);
    }
    // Kept companions first: the rollback puts them back last, after the session's own
    // companions, so an old trace never takes the name of the one the session has now.
    for (let i = 0; i < adopted.length; i++) {
      const { dir, name } = adopted[i] as KeptCompanion;
      forgetDurable(fs, join(dir, name));
      await fs.rename(join(dir, name), join(staging, keptDir(i), name));
    }
    for (const name of intent.entries) {
      forgetDurable(fs, join(collection, name));
      await fs.rename(join(collection, name), join(staging, name));
    }
    if (full) {
      // The destination first: POSIX does not promise that an fsync of the source directory
      // makes a rename's arrival durable with its removal, so syncing the collection first could
      // let a crash between the two leave an entry in neither directory (ext4, xfs and btrfs
      // happen to order it). With staging synced first, each entry is always in one of them:
      // still in place, or staged, where recovery rolls the uncommitted delete back. The same
      // for a kept companion taken along: its new directory, then the staging directory holding
      // that, then the directory it left.
      for (let i = 0; i < adopted.length; i++) await fs.syncDir(join(staging, keptDir(i)));
      await fs.syncDir(staging);
      for (const dir of new Set(adopted.map((companion) => companion.dir))) await fs.syncDir(dir);
      await fs.syncDir(collection);
    }
    const remaining = members.filter((id) => !ids.includes(id));
    if (remaining.length !== members.length) {
      await writeArchiveMembership(context, collection, remaining);
    }
    // The marker is made durable under a temp name and renamed in: readers see it only once
    // nothing can take it back, so no reader ever sees the delete done and then undone.
    const marker = tempNameFor(join(staging, DELETE_COMMITTED_FILE));
    await writeDurably(context, marker, new Uint8Array(0));
    await fs.rename(marker, join(staging, DELETE_COMMITTED_FILE));
    // The commit point: from here on the delete is done for every reader, and is never rolled
    // back. Should the fsync below fail, the staged entries stay (removing them before the
    // marker is durable could let a power loss roll back a half-removed session) and the next
    // recovery makes the marker durable, then finishes the removal.
    committed = true;
    if (full) await fs.syncDir(staging);
  } catch (error) {
    // A marker at its name is the commit point, even when the rename that put it there reported
    // a failure: readers may have seen it, so the delete is not rolled back.
    if (committed || await markerPresent(fs, staging)) {
      committed = true;
      throw error;
    }
    // Before the commit point: everything goes back (a failing rollback leaves the journal for
    // recovery, which rolls back the same way).
    try {
      await rollBackDeletion(context, collection, staging, intent);
    } catch {
      // Recovery finishes the rollback under the collection lock.
    }
    // Each lock is released where its session directory is. One still in place (never moved,
    // or moved back) has its lock file removed; one still staged leaves its own for recovery,
    // which drops it before the directory goes back (`dropMovedLocks`), since `release` only
    // looks at the lock's own path. Rolled back or not, no lock is kept registered.
    await releaseAll(locks);
    throw error;
  } finally {
    if (committed) { for (const lock of locks) lock.forget(); }
  }
  await finishDeletion(context, collection, staging, stagedNames(intent));
  // The staging directories the kept companions were taken from keep nothing of these sessions
  // any more: recovered now (as the next recovery would), so no journal names them afterwards.
  // The delete is done: one that cannot be recovered now is left to the next recovery.
  for (const from of new Set(adopted.map((companion) => companion.from))) {
    try {
      await recoverDeletion(context, collection, from);
    } catch {
      // Recovery runs again before the next structural operation of the collection.
    }
  }
}

/**
 * Releases every lock of `locks`, each even when another's release fails: the caller reports its
 * own error. A lock file that cannot be removed is stale to this process from then on (see
 * `HeldLock.release`), and its next writer takes it over.
 */
async function releaseAll(locks: readonly HeldLock[]): Promise<void> {
  for (const lock of locks) await lock.release().catch(() => undefined);
}

/** True when the delete staging directory `staging` holds its commit marker at its name. */
async function markerPresent(fs: FileSystem, staging: string): Promise<boolean> {
  try {
    await fs.lstat(join(staging, DELETE_COMMITTED_FILE));
    return true;
  } catch {
    return false;
  }
}

/**
 * True for a companion of a session as a delete stages it: a regular file `<id>.<anything>` that
 * is not the legacy backup `<id>.jsonl` (not the session, nor a previous copy of it).
 */
function isCompanion(name: string, kind: string): boolean {
  return kind === "file" && name.length > 36 && sessionIdOfEntry(name) !== undefined &&
    legacySessionId(name) === undefined;
}

/**
 * Moves staged entries back (the directory first), restores membership, removes the staging;
 * true when everything went back. A session directory, legacy backup or compaction staging
 * directory whose name exists again in the collection stops the rollback with a
 * `CorruptSessionError` before membership is restored (the staged copy may be the session's only
 * one: recovery keeps the staging directory, and readers keep reading the session there). A
 * companion whose name exists again (a trace file written since, for the session still in place)
 * does not stop it: the staged companion stays in the staging directory (nothing is deleted that
 * was not asked to be), the rest goes back, membership is restored, and then the journal is
 * replaced by one that restores no membership (`archived` empty), since the delete is rolled back
 * for every reader from then on: membership belongs to archive.json again, and a restore the user
 * makes later is not undone by a journal still naming the ids. Such a rollback returns false and
 * leaves the staging directory for `cleanup` to report as kept; a later recovery, once the name
 * is free, moves the companion back and removes the staging directory. A `kept-<n>` directory
 * holding anything but its companion, or a `kept-<n>` that is not a directory at all (a link,
 * which could lead outside the collection), is never looked through: it stays, and the staging
 * directory is kept the same way.
 *
 * Every crash state stays correct: until the journal is replaced, it restores membership (to
 * readers, and to the next recovery, which rolls back the same way); once it is replaced,
 * archive.json already holds the restored membership (written, and fsynced under `"full"`
 * durability, before the journal's replace), and the journal is replaced atomically, so it is
 * the old one or the new one, never unreadable. Counting membership only for ids whose directory
 * or backup is still staged would not do: a rollback interrupted after moving those back but
 * before restoring membership would show the sessions restored to readers, and then archived
 * again after recovery.
 */
async function rollBackDeletion(
  context: StoreContext,
  collection: string,
  staging: string,
  intent: DeleteIntent,
): Promise<boolean> {
  const fs = context.fs;
  const full = context.durability === "full";
  // A delete is rolled back only while its marker is not at its name (a delete that renamed it in
  // stays committed, and recovery finishes a committed one). Should one be there all the same, it
  // goes first, durably: a crash during this rollback is then rolled back by recovery too, never
  // finished as a delete of the part already moved back.
  try {
    await fs.remove(join(staging, DELETE_COMMITTED_FILE));
    if (full) await fs.syncDir(staging);
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
  }
  let moved = false;
  let kept = false;
  for (const name of [...intent.entries].reverse()) {
    const from = join(staging, name);
    let kind;
    try {
      kind = (await fs.lstat(from)).kind;
    } catch (error) {
      if (error instanceof NotFound) continue;
      throw error;
    }
    // A session directory goes back without the delete's writer lock (see `dropMovedLocks`).
    if (kind === "directory" && isSessionId(name)) await dropMovedLocks(context, from);
    if (await entryKind(fs, join(collection, name)) !== undefined) {
      if (isCompanion(name, kind)) {
        kept = true;
        continue;
      }
      throw new CorruptSessionError(
        `Cannot restore a staged deletion: '${name}' exists again in the collection; the staged copy is kept in '${staging}'`,
        { file: from },
      );
    }
    forgetDurable(fs, join(collection, name));
    await fs.rename(from, join(collection, name));
    moved = true;
  }
  // Companions taken along from an earlier rolled-back delete go back last, as it would put them
  // back: in place when their name is free, otherwise kept here.
  const adopted = intent.kept ?? [];
  /** The `kept-<n>` directories emptied: removed before the journal (see below). */
  const emptied: string[] = [];
  for (let i = adopted.length - 1; i >= 0; i--) {
    const name = adopted[i] as string;
    const dir = join(staging, keptDir(i));
    const dirKind = await entryKind(fs, dir);
    if (dirKind === undefined) continue;
    if (dirKind !== "directory") {
      // Not a directory a delete made (a link, above all, which could lead outside the
      // collection): nothing is moved through it; it stays, with the staging directory (kept).
      kept = true;
      continue;
    }
    const from = join(dir, name);
    if (await entryKind(fs, from) !== undefined) {
      if (await entryKind(fs, join(collection, name)) !== undefined) {
        kept = true;
        continue;
      }
      forgetDurable(fs, join(collection, name));
      await fs.rename(from, join(collection, name));
      moved = true;
    }
    // Anything else in it is not the delete's: it stays, with the staging directory (kept).
    if ((await listStaging(fs, dir) ?? []).length > 0) {
      kept = true;
      continue;
    }
    emptied.push(dir);
  }
  // Nor is anything else in the staging directory: a delete stages there only its journal's
  // entries and kept-<n> folders, beside the journal and the marker (and their temp files). It
  // stays, with the staging directory (kept), as what a journal that cannot be read keeps does.
  const rest = await withoutEmptyKeptDirs(fs, staging, await listStaging(fs, staging) ?? []);
  if (rest.some((entry) => entry.name !== DELETE_INTENT_FILE && !isTempName(entry.name))) {
    kept = true;
  }
  if (moved && full) await fs.syncDir(collection);
  if (intent.archived.length > 0) {
    const current = await readArchiveMembership(fs, collection);
    if (intent.archived.some((id) => !current.includes(id))) {
      // Put the ids back where they were: original order, then anything added since.
      const restored = intent.membersBefore.filter((id) =>
        current.includes(id) || intent.archived.includes(id)
      );
      for (const id of current) if (!restored.includes(id)) restored.push(id);
      await writeArchiveMembership(context, collection, restored);
    }
  }
  if (kept) {
    // Membership is restored: the kept staging directory no longer claims any (see above).
    if (intent.archived.length > 0) {
      const settled: DeleteIntent = { ...intent, archived: [] };
      await atomicReplace(
        fs,
        join(staging, DELETE_INTENT_FILE),
        encoder.encode(JSON.stringify(settled) + "\n"),
        { durability: context.durability },
      );
    }
    return false;
  }
  // The emptied kept-<n> directories go before the journal (durably, under "full": nothing else
  // orders removals in one directory): a staging directory never outlives its journal holding
  // anything but what recovery and readers count as nothing staged.
  for (const dir of emptied) await removeIfExists(fs, dir);
  if (emptied.length > 0 && full) await fs.syncDir(staging);
  await removeStagingDir(context, staging, [], false);
  if (full) await fs.syncDir(collection);
  return true;
}

/** Finishes a committed delete: the staged entries and journal, then the marker and directory. */
async function finishDeletion(
  context: StoreContext,
  collection: string,
  staging: string,
  entries: readonly string[],
): Promise<void> {
  await removeStagingDir(context, staging, entries, true);
  if (context.durability === "full") await context.fs.syncDir(collection);
}

/**
 * Removes the staged `entries`, the journal, the commit marker, then `staging` itself. With
 * `committed` (the marker is there, and durable), the removal of the entries and the journal is
 * made durable (under `"full"` durability) before the marker goes: nothing orders the removals
 * of one directory on disk otherwise, and a crash keeping the marker's removal but not a staged
 * session's would leave an uncommitted delete with a half-removed session, which recovery rolls
 * back (or, without the journal, reports).
 */
async function removeStagingDir(
  context: StoreContext,
  staging: string,
  entries: readonly string[],
  committed: boolean,
): Promise<void> {
  const fs = context.fs;
  const remove = async (name: string) => {
    try {
      await fs.remove(join(staging, name), { recursive: true });
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
  };
  for (const name of [...entries, DELETE_INTENT_FILE]) await remove(name);
  if (committed && context.durability === "full") await fs.syncDir(staging);
  await remove(DELETE_COMMITTED_FILE);
  try {
    await fs.remove(staging, { recursive: true });
  } catch (error) {
    // A staging directory whose create failed was never there.
    if (!(error instanceof NotFound)) throw error;
  }
}

/**
 * True when the listing of a delete's staging directory holds the commit marker: a regular file
 * named `committed` (only renamed in once the delete can no longer be taken back). Anything else
 * of that name (a link, a directory) was not written by a delete, and commits nothing.
 */
function isCommitted(listing: readonly DirEntry[]): boolean {
  return listing.some((entry) => entry.name === DELETE_COMMITTED_FILE && entry.kind === "file");
}

/** What `readIntent` found: the journal, or none (with why, when it is there but invalid). */
interface JournalRead {
  /** The journal; undefined when it is missing, not a regular file or not a valid journal. */
  readonly intent: DeleteIntent | undefined;
  /** Why the journal is not valid (naming `intent.json` and the field), when it is not. */
  readonly invalid?: SessionFormatError | undefined;
}

/**
 * The journal of the delete staged in `staging`, read without following a link or waiting on a
 * FIFO; no `intent` when it is missing, not a regular file or not a valid journal.
 */
async function readIntent(fs: FileSystem, staging: string): Promise<JournalRead> {
  const file = join(staging, DELETE_INTENT_FILE);
  const read = await readSessionFile(fs, file);
  if (!(read instanceof Uint8Array)) return { intent: undefined };
  try {
    return { intent: parseIntent(read, file) };
  } catch (error) {
    if (!(error instanceof SessionFormatError)) throw error;
    return { intent: undefined, invalid: error };
  }
}

const JournalSessionId = v.pipe(
  v.string(),
  v.check((id: string) => isSessionId(id), "not a session id"),
);

/** The valibot schema of a delete journal (`intent.json`); unknown keys are ignored. */
const DeleteIntentSchema = v.object({
  operation: v.literal("delete"),
  ids: v.array(JournalSessionId),
  entries: v.array(v.string()),
  archived: v.array(JournalSessionId),
  membersBefore: v.array(JournalSessionId),
  kept: v.optional(v.array(v.string())),
});

/**
 * Validates a delete journal read from `file`. Anything wrong is a `SessionFormatError` naming
 * `file` and the JSON path of the first field at fault (with its value when that is not an object
 * or array: a journal holds whatever damage put there, nested however deep).
 */
function parseIntent(bytes: Uint8Array, file: string): DeleteIntent {
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(bytes));
  } catch (error) {
    throw new SessionFormatError(`Invalid delete journal: ${(error as Error).message}`, {
      file,
      cause: error,
    });
  }
  const invalid = (detail: string, path: string, input: unknown): SessionFormatError =>
    new SessionFormatError(`Invalid delete journal: ${detail}`, {
      file,
      path,
      ...(typeof input === "object" && input !== null ? {} : { value: input }),
    });
  if (Array.isArray(value)) throw invalid("expected a JSON object", "", value);
  const result = v.safeParse(DeleteIntentSchema, value, { abortEarly: true });
  if (!result.success) {
    const issue = result.issues[0];
    const last = issue.path?.[issue.path.length - 1];
    const missing = last !== undefined && issue.input === undefined &&
      typeof last.input === "object" && last.input !== null && !(String(last.key) in last.input);
    if (missing) {
      throw new SessionFormatError("Invalid delete journal: missing required field", {
        file,
        path: issuePath(issue),
      });
    }
    throw invalid(issueDetail(issue), issuePath(issue), issue.input);
  }
  const { ids, entries, archived, membersBefore, kept } = result.output;
  // Entry names come back into the collection on rollback: only names of the journal's sessions.
  const ownName = (name: string): boolean =>
    ids.some((id) => name === id || name.startsWith(id + ".") || stagingSessionId(name) === id) &&
    !name.includes("/");
  const foreign = entries.findIndex((name) => !ownName(name));
  if (foreign !== -1) {
    throw invalid(
      "not an entry of the journal's sessions",
      `entries[${foreign}]`,
      entries[foreign],
    );
  }
  // A companion taken along comes back into the collection too: only a companion of the
  // journal's sessions.
  const stray = (kept ?? []).findIndex((name) => {
    const id = sessionIdOfEntry(name);
    return id === undefined || !ids.includes(id) || !isCompanion(name, "file") ||
      name.includes("/");
  });
  if (stray !== -1) {
    throw invalid("not a companion of the journal's sessions", `kept[${stray}]`, kept?.[stray]);
  }
  return {
    operation: "delete",
    ids,
    entries,
    archived,
    membersBefore,
    ...(kept === undefined ? {} : { kept }),
  };
}

/**
 * The error for a delete staging directory that holds entries but no readable journal: it names
 * `intent.json`, and when the journal is there but invalid, says why (the field at fault) and
 * carries that `SessionFormatError` as its `cause`.
 */
function unreadableJournal(
  staging: string,
  invalid: SessionFormatError | undefined,
): CorruptSessionError {
  const file = join(staging, DELETE_INTENT_FILE);
  const where = ` (in '${file}')`;
  const why = invalid === undefined
    ? ""
    : ` (${
      invalid.message.endsWith(where) ? invalid.message.slice(0, -where.length) : invalid.message
    })`;
  return new CorruptSessionError(
    `A staged deletion has entries but no readable journal${why}; it was left for inspection`,
    { file, cause: invalid },
  );
}

/** The session an entry of a collection belongs to: `<id>`, `<id>.jsonl` or `<id>.<anything>`. */
function sessionIdOfEntry(name: string): string | undefined {
  const id = name.slice(0, 36);
  if (!isSessionId(id)) return undefined;
  return name.length === 36 || name.charAt(36) === "." ? id : undefined;
}

/** An uncommitted delete as readers see it: what a rollback would put back (`inspectDeletion`). */
export interface StagedDeletion {
  /** The staging directory. */
  readonly dir: string;
  /**
   * The staged session directories still to be put back, by session id (for a session whose
   * only staged copy is a kept compaction's previous directory, that directory).
   */
  readonly directories: ReadonlyMap<string, string>;
  /** The staged legacy files (`<id>.jsonl`) still to be put back, by session id. */
  readonly legacy: ReadonlyMap<string, string>;
  /** The ids a rollback puts back into archive membership. */
  readonly archived: readonly string[];
  /**
   * Set when entries are staged but the journal cannot be read: recovery refuses such a staging
   * directory with this error, and readers report it for every id in `ids` (the maps are empty).
   */
  readonly error: CorruptSessionError | undefined;
  /** The ids of every staged entry. */
  readonly ids: readonly string[];
  /**
   * The ids of the delete (its journal's, or those of entries an earlier look listed staged)
   * with no session directory staged while the delete is not committed: a rollback, by another
   * process, moved it back into the collection since (it goes back first), the delete has not
   * staged it yet, or the session has only a legacy file (in `legacy` while it is staged). A
   * reader that listed the collection while they were staged looks for them in place, at
   * `<collection>/<id>` and then `<collection>/<id>.jsonl`: a delete that did not happen never
   * made them stop existing (one that finished meanwhile left nothing there).
   */
  readonly movedBack: readonly string[];
  /**
   * True when a look found entries staged and no journal: the delete finished or rolled back
   * since the staging directory was listed (or its journal is damaged, then `error` says so).
   * What a rollback put back may then include sessions no look listed staged (moved back before
   * the listing of the staging directory), which only the collection read once more shows; a
   * reader that listed the collection before reads it again, as for a staging directory gone.
   */
  readonly settled: boolean;
}

/**
 * Reads the delete staging directory `name` of `collection` without changing anything, for readers
 * that must see an uncommitted delete as not happened (see the module doc). Undefined when the
 * delete committed (the `committed` marker exists: its sessions are gone), when the directory is
 * gone, or when it stages nothing and has no journal naming a session or membership (a reader that
 * listed the collection before cannot tell which sessions such a directory held: it reads the
 * collection again). Only entries the journal names are reported, like a rollback
 * only moves those back. A journal missing while entries are listed is looked for again (the
 * delete may have finished or rolled back between the listing and the read, in another process):
 * only entries still staged without a journal, look after look, are reported as damage (`error`).
 * When a later look finds them no longer staged (the directory gone or emptied) and no
 * `committed` marker, their ids are returned as `movedBack`: a rollback may have put them back
 * (a delete that finished meanwhile left nothing there, which the reader then finds). Whenever a
 * journal was found missing, the result is `settled`: the rollback may also have put back
 * sessions that no look listed staged (moved back before the staging directory was listed), so a
 * reader that listed the collection before reads it once more, as for a directory gone.
 */
export async function inspectDeletion(
  fs: FileSystem,
  collection: string,
  name: string,
): Promise<StagedDeletion | undefined> {
  const staging = join(collection, name);
  /** The ids of entries an earlier look listed staged without a journal. */
  let seen: readonly string[] = [];
  for (let look = 1;; look++) {
    const found = await inspectDeletionOnce(fs, staging);
    if (found === "committed") return undefined;
    if (found === "unstaged") {
      // Nothing staged, or the directory gone, and no journal: a delete that rolled back (or
      // finished) since an earlier look listed entries puts them back (or left nothing).
      return seen.length === 0 ? undefined : {
        dir: staging,
        directories: new Map(),
        legacy: new Map(),
        archived: [],
        error: undefined,
        ids: [],
        movedBack: seen,
        settled: true,
      };
    }
    if (!("missingJournal" in found)) {
      if (seen.length === 0) return found;
      const unseen = seen.filter((id) =>
        !found.movedBack.includes(id) && !found.directories.has(id)
      );
      return { ...found, movedBack: [...found.movedBack, ...unseen], settled: true };
    }
    // A journal missing while entries were listed: the delete may have finished (or rolled
    // back) between the listing and the read, by another process. Both remove the journal only
    // once the entries are gone (a finished delete's marker after it), so a second look sees the
    // directory gone, committed or emptied; entries still there without a journal are damage.
    seen = [...new Set([...seen, ...found.missingJournal])];
    if (look >= JOURNAL_LOOKS) {
      return {
        dir: staging,
        directories: new Map(),
        legacy: new Map(),
        archived: [],
        error: unreadableJournal(staging, found.invalid),
        ids: found.missingJournal,
        movedBack: seen.filter((id) => !found.missingJournal.includes(id)),
        settled: true,
      };
    }
  }
}

/** How many times `inspectDeletion` looks at a staging directory whose journal is missing. */
const JOURNAL_LOOKS = 3;

/** The listing of the delete staging directory `staging`, undefined when it is gone. */
async function listStaging(fs: FileSystem, staging: string): Promise<DirEntry[] | undefined> {
  try {
    return await fs.readDir(staging);
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
}

/** The staged entries of a delete staging directory's listing (not its journal, not temp files). */
function stagedEntries(listing: readonly DirEntry[]): DirEntry[] {
  return listing.filter((entry) => entry.name !== DELETE_INTENT_FILE && !isTempName(entry.name));
}

/**
 * One look of `inspectDeletion`: `committed` when the marker is there; `unstaged` when the
 * directory is gone, or stages nothing and has no journal naming anything; `missingJournal` (the
 * ids of the staged entries) when entries were listed and no journal was read (`invalid`: why,
 * when the journal is there but invalid); otherwise what is staged, and the journal's ids with
 * nothing staged (`movedBack`).
 */
async function inspectDeletionOnce(
  fs: FileSystem,
  staging: string,
): Promise<
  StagedDeletion | "committed" | "unstaged" | {
    readonly missingJournal: readonly string[];
    readonly invalid: SessionFormatError | undefined;
  }
> {
  const listing = await listStaging(fs, staging);
  if (listing === undefined) return "unstaged";
  if (isCommitted(listing)) return "committed";
  // The journal, a marker still under its temp name (never committed) and an empty kept-<n>
  // directory are not staged entries.
  const staged = await withoutEmptyKeptDirs(fs, staging, stagedEntries(listing));
  if (staged.length === 0) {
    // Nothing staged (yet, or any more: a rollback moved everything back): the membership its
    // rollback restores still counts, and its sessions are where they were, or back there.
    const pending = (await readIntent(fs, staging)).intent;
    if (pending === undefined || (pending.archived.length === 0 && pending.ids.length === 0)) {
      return "unstaged";
    }
    return {
      dir: staging,
      directories: new Map(),
      legacy: new Map(),
      archived: pending.archived,
      error: undefined,
      ids: [],
      movedBack: pending.ids,
      settled: false,
    };
  }
  const ids = [
    ...new Set(staged.flatMap((entry) => {
      const id = sessionIdOfEntry(entry.name);
      return id === undefined ? [] : [id];
    })),
  ];
  const { intent, invalid } = await readIntent(fs, staging);
  if (intent === undefined) return { missingJournal: ids, invalid };
  const directories = new Map<string, string>();
  const legacy = new Map<string, string>();
  const kept: [string, string][] = [];
  for (const entry of staged) {
    if (!intent.entries.includes(entry.name)) continue;
    if (entry.kind === "directory" && isSessionId(entry.name)) {
      directories.set(entry.name, join(staging, entry.name));
    } else if (entry.kind === "file" && legacySessionId(entry.name) !== undefined) {
      legacy.set(legacySessionId(entry.name) as string, join(staging, entry.name));
    } else if (entry.kind === "directory" && stagingSessionId(entry.name) !== undefined) {
      kept.push([stagingSessionId(entry.name) as string, join(staging, entry.name)]);
    }
  }
  // A kept compaction copy is where the session was read from before the delete when no session
  // directory was in place (see `discovery.ts`): so it is while the delete is not committed.
  for (const [id, dir] of kept) {
    if (directories.has(id)) continue;
    const previous = await previousSession(fs, dir);
    if (previous !== undefined) directories.set(id, previous);
  }
  // The journal's sessions with no directory staged: not staged yet, moved back by a rollback
  // (the directory goes back first; a kept companion may hold the staging directory on), or
  // sessions that have only a legacy file.
  const movedBack = intent.ids.filter((id) => !directories.has(id));
  return {
    dir: staging,
    directories,
    legacy,
    archived: intent.archived,
    error: undefined,
    ids,
    movedBack,
    settled: false,
  };
}

/**
 * archive.json's membership, the ids the rollback of an uncommitted delete restores, and
 * archive.json's membership once more (see `addRestoredMembership`).
 */
async function effectiveMembership(fs: FileSystem, collection: string): Promise<string[]> {
  const members = await readArchiveMembership(fs, collection);
  await addRestoredMembership(fs, collection, members);
  return members;
}

/**
 * Adds to `members` (a membership read before) the ids the rollback of an uncommitted delete
 * restores, then archive.json's membership read once more, in that order: a delete that took an
 * id out of archive.json after `members` was read either is still staged (its journal counts
 * it), or rolled back meanwhile, and a rollback restores the membership before removing its
 * staging directory, so the read after the journals sees the id. A fixed cost per collection: one
 * listing, one read of archive.json, and per delete staging directory its listing and journal.
 */
export async function addRestoredMembership(
  fs: FileSystem,
  collection: string,
  members: string[],
): Promise<void> {
  const names = deleteStagingNames(await readDirIfExists(fs, collection));
  for (const name of names) {
    const deletion = await inspectDeletion(fs, collection, name);
    for (const id of deletion?.archived ?? []) if (!members.includes(id)) members.push(id);
  }
  for (const id of await readArchiveMembership(fs, collection)) {
    if (!members.includes(id)) members.push(id);
  }
}

/**
 * Recovers the delete staging directory `name` of `collection` after a crash: finishes a committed
 * delete, rolls back an uncommitted one, removes one that never staged anything. A journal that
 * cannot be read while entries were staged is reported (`CorruptSessionError`) and left alone.
 * `"kept"`: rolled back, but companions whose names exist again in the collection stay in the
 * staging directory, which no longer claims membership (see `rollBackDeletion`).
 */
export async function recoverDeletion(
  context: StoreContext,
  collection: string,
  name: string,
): Promise<"finished" | "restored" | "removed" | "kept"> {
  const fs = context.fs;
  const staging = join(collection, name);
  const { intent, invalid } = await readIntent(fs, staging);
  const listing = await fs.readDir(staging);
  // Decided as readers decide it (`inspectDeletion`), so recovery never undoes a delete they saw
  // done, nor finishes one they saw not happen.
  const committed = isCommitted(listing);
  if (intent === undefined) {
    // An empty kept-<n> directory stages nothing (see `withoutEmptyKeptDirs`).
    const staged = await withoutEmptyKeptDirs(
      fs,
      staging,
      listing.filter((entry) =>
        entry.name !== DELETE_INTENT_FILE && entry.name !== DELETE_COMMITTED_FILE &&
        !isTempName(entry.name)
      ),
    );
    if (staged.length > 0 && !committed) throw unreadableJournal(staging, invalid);
    // The marker is made durable before anything staged is removed (see below).
    if (committed && context.durability === "full") await fs.syncDir(staging);
    await removeStagingDir(context, staging, staged.map((entry) => entry.name), committed);
    if (context.durability === "full") await fs.syncDir(collection);
    return committed ? "finished" : "removed";
  }
  if (committed) {
    // The marker may not be durable yet (the delete failed at its directory's fsync): it is made
    // durable before anything staged is removed.
    if (context.durability === "full") await fs.syncDir(staging);
    await finishDeletion(context, collection, staging, stagedNames(intent));
    return "finished";
  }
  return await rollBackDeletion(context, collection, staging, intent) ? "restored" : "kept";
}
