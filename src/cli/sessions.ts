/**
 * `sessions …` commands: list, show, history, verify, migrate, archive, restore, delete, cleanup,
 * compact and salvage over a Loop session store on the real disk.
 *
 * @module
 */
import { FsError, FsIoError, NotADirectory, NotFound } from "../port/errors.ts";
import type { DirEntry } from "../port/fs.ts";
import { basename, dirname, isAbsolute, join, normalize } from "../port/path.ts";
import {
  InvalidArgumentError,
  SessionError,
  SessionFormatError,
  SessionNotFoundError,
  UnsupportedSessionError,
} from "../loop/errors.ts";
import { SessionStore } from "../loop/store.ts";
import type { CleanupReport } from "../loop/maintenance.ts";
import {
  comparePinnedFirst,
  findSessions,
  type ListFailure,
  type SessionInfo,
} from "../loop/discovery.ts";
import { entryKind } from "../port/durable.ts";
import { INDEX_FILE, MESSAGES_FILE, META_FILE } from "../loop/storage.ts";
import { type VerifyReport, verifySession } from "../loop/verify.ts";
import {
  LEGACY_EXTENSION,
  legacyNotARegularFile,
  legacySessionId,
  readLegacyHistory,
  readLegacySession,
} from "../loop/legacy.ts";
import {
  ARCHIVE_FILE,
  inspectDeletion,
  isDeleteStagingName,
  isPrivateStagingName,
  SessionNotArchivedError,
} from "../loop/archive.ts";
import {
  COMPACTION_PREVIOUS,
  damagedCompactionError,
  damagedCompactionOf,
  stagingSessionId,
} from "../loop/compaction.ts";
import type { StoreContext } from "../loop/lock.ts";
import { isSessionId } from "../loop/records/mod.ts";
import {
  collectionNotADirectory,
  type HistoryPage,
  pageBounds,
  sessionNotADirectory,
} from "../loop/session_manager.ts";
import type { Message } from "../loop/records/mod.ts";
import { numberOption, parseArgs, UsageError } from "./args.ts";
import {
  type CliIo,
  fieldRows,
  formatBytes,
  inlined,
  printJson,
  Progress,
  resolvePath,
  table,
} from "./output.ts";

/** Help text of every `sessions` subcommand. */
export const SESSIONS_HELP: Readonly<Record<string, string>> = {
  list:
    `Usage: loop-sessions sessions list [--cwd DIR | --dir COLLECTION | --all-workspaces] [--fast] [--json]

Lists sessions: pinned first (latest pin first), then newest activity first. --fast reads only meta.json and index.json
(the mode for pickers); without it every history is validated. Default: the sessions of the
current directory's workspace. A session, or with --all-workspaces a collection, that cannot be
read is reported on stderr (with --json, in 'failures') beside the others; exit code 1.`,
  show: `Usage: loop-sessions sessions show <id|path> [--json]

Shows a session's header, counts, generation, committed range, unread/pinned state and archive
membership. Reads only.`,
  history: `Usage: loop-sessions sessions history <id|path> [--before N] [--json]

Prints a page of history: the latest three user rounds, or the three before message index N.`,
  verify: `Usage: loop-sessions sessions verify (<id|path> | --all) [--json]

Checks checksums, every message and every metadata rule. Exit code 1 when anything is corrupt.
Never modifies anything; points at the first bad byte and message. A legacy version-2 file not
migrated yet is validated in place with the legacy reader, as its migration would validate it;
anything but a regular file at its <id>.jsonl (a link) is a finding, never read through.
--all verifies every session 'sessions list --all-workspaces' finds, where the store reads it
(also the copy an interrupted compaction or delete holds), legacy files not migrated yet included;
a link or a file at a session's name, and a file that cannot be read, are reported beside the
other sessions (exit code 1).`,
  migrate: `Usage: loop-sessions sessions migrate (<path> | --all) [--dry-run] [--json]

Migrates legacy version-2 <id>.jsonl sessions to version-3 directories. The original file is
kept unchanged as a backup. --dry-run validates each file as the migration would (and the
directory of a file migrated before, as opening it would) and lists what would migrate and what
would fail, writing nothing. --all takes the files not migrated yet; check the directories of
migrated ones with 'sessions verify --all'. A collection that is a link is never written through:
--all reports it as skipped, with the legacy files it leaves unmigrated there, or why it could
not be read (exit code 1 when there are any, or it could not be read; with --json, 'skipped', its
'error' then set), and migrates the other collections; so is a collection that cannot be read.
A file of another format or version is left alone by --all, as listings skip it ('left alone',
with --json its 'unsupported' reason; not a failure).`,
  archive: `Usage: loop-sessions sessions archive <id|path...> [--dir COLLECTION] [--json]

Marks sessions archived in their collection. Touches no session file. A session is named by its
id or by its path in a collection of the store (<data dir>/sessions/<collection>/), or of the
collection given with --dir. Paths with '..' and a --dir named with a leading '.' (the store's
private staging directories) are refused. A session of a collection that is a link is refused
(exit 1, nothing changed): the store never writes through a link.`,
  restore: `Usage: loop-sessions sessions restore <id|path...> [--dir COLLECTION] [--json]

Removes sessions from their collection's archive (sessions named as for archive).`,
  delete:
    `Usage: loop-sessions sessions delete <id|path...> [--include-unarchived] [--dir COLLECTION] [--json]

Deletes archived sessions (directory, legacy backup and companions) through a staged delete.
Only sessions the store recognizes, in a collection of the store (<data dir>/sessions/<collection>/)
or in the collection given with --dir, are deleted; anything else, or (without
--include-unarchived) a session that is not archived, is refused before anything is removed. When
a later collection still fails, what was already deleted is printed before the error (exit 1).`,
  cleanup:
    `Usage: loop-sessions sessions cleanup [--cwd DIR | --dir COLLECTION | --all-workspaces] [--json]

Settles what interrupted operations left in a collection, as the store's cleanup() does: finishes
a delete that had committed (removing what it staged), rolls back one that had not and an
interrupted compaction, and removes staging leftovers, temp files and the stale locks of sessions
no writer holds. A delete interrupted past its commit point (Ctrl-C) is finished here. Default:
the current directory's workspace. What it cannot settle is listed as kept (exit 1): look at it by
hand. A collection that is a link is skipped (exit 1): the store never writes through a link; so
is one that cannot be read or cleaned, with why, and the others are cleaned all the same. A --dir
that is no collection (the sessions root, a session directory, a private staging directory) is
refused; only what the store itself makes is ever removed.`,
  compact: `Usage: loop-sessions sessions compact <id|path> [--json]

Rewrites messages.jsonl to hold only the committed generation (staged and atomic). When it holds
nothing else already, nothing is rewritten and the committed range is verified instead: exit code
1 when it is corrupt.`,
  salvage: `Usage: loop-sessions sessions salvage <id|path> --to <collection dir> [--json]

Exports the longest valid prefix of a damaged session into a new session under the given
collection directory: a session directory, or a legacy version-2 file not migrated yet (one whose
damage makes 'sessions migrate' fail). The original is left untouched. The destination must be a
collection: the sessions root itself, a private directory of the store (a name starting with '.'
under <data dir>/sessions/, or a .staging-*/.delete-* directory anywhere) and a place inside a
session directory are refused (exit 1), as a later cleanup, compaction or delete would take them
along.`,
};

/** Shared options of the sessions commands. */
interface StoreFlags {
  readonly agentDir: string;
}

function agentDirOf(io: CliIo, explicit: string | undefined): string {
  const chosen = explicit ?? io.env("LOOP_DATA_DIR");
  const home = (): string => {
    // HOME as the shell has it, else what the adapter knows (the account's home directory); a
    // relative HOME names no home directory, as the adapters say.
    const set = io.env("HOME");
    const found = set !== undefined && set !== "" ? set : io.fs.homeDir?.();
    if (found === undefined || found === "" || !isAbsolute(found)) {
      throw new UsageError(
        found === undefined || found === ""
          ? "cannot find the home directory; pass --data-dir or set LOOP_DATA_DIR"
          : `HOME is not an absolute path (${
            JSON.stringify(found)
          }); pass --data-dir or set LOOP_DATA_DIR`,
      );
    }
    return found;
  };
  if (chosen !== undefined && chosen !== "") {
    // `~` as a shell would have expanded it (a quoted value, or `--data-dir=~/x`, keeps it).
    if (chosen === "~") return home();
    if (chosen.startsWith("~/")) return join(home(), chosen.slice(2));
    return resolvePath(io, chosen);
  }
  return join(home(), ".loop");
}

function storeFor(io: CliIo, flags: StoreFlags, sessionDir?: string): SessionStore {
  return new SessionStore({
    fs: io.fs,
    agentDir: flags.agentDir,
    sha256: io.sha256,
    now: io.now,
    ...(sessionDir === undefined ? {} : { sessionDir }),
    ...(io.process === undefined ? {} : { process: io.process }),
  });
}

async function exists(io: CliIo, path: string): Promise<boolean> {
  return (await entryKind(io.fs, path)) !== undefined;
}

/**
 * The collections under `<agentDir>/sessions`: its directories, and its links to a directory
 * (`linked`), which the store's listings read through and never writes through. A dangling link,
 * a link loop or a link to anything but a directory is no collection.
 */
async function collectionEntries(
  io: CliIo,
  agentDir: string,
): Promise<{ path: string; linked: boolean }[]> {
  const root = join(agentDir, "sessions");
  let entries: DirEntry[];
  try {
    entries = await io.fs.readDir(root);
  } catch (error) {
    if (error instanceof NotFound) return [];
    throw error;
  }
  const found: { path: string; linked: boolean }[] = [];
  for (const entry of entries) {
    if (entry.name.startsWith(".")) continue;
    const path = join(root, entry.name);
    if (entry.kind === "directory") found.push({ path, linked: false });
    else if (entry.kind === "symlink" && await linksToDirectory(io, path)) {
      found.push({ path, linked: true });
    }
  }
  return found;
}

/**
 * The paths of the collections under `<agentDir>/sessions` (`collectionEntries`), linked ones
 * included: the commands that read, and the lookup of an id, read through them.
 */
async function collections(io: CliIo, agentDir: string): Promise<string[]> {
  return (await collectionEntries(io, agentDir)).map((collection) => collection.path);
}

/** True when the link at `path` leads to a directory (false when dangling or a loop). */
async function linksToDirectory(io: CliIo, path: string): Promise<boolean> {
  try {
    return (await io.fs.stat(path)).kind === "directory";
  } catch (error) {
    const loop = error instanceof FsIoError && error.code === "ELOOP";
    if (error instanceof NotFound || error instanceof NotADirectory || loop) return false;
    throw error;
  }
}

/** A session as the store finds it in its collection. */
type Located =
  | {
    readonly kind: "directory";
    readonly collection: string;
    readonly id: string;
    /** The session's path in its collection: what `SessionStore.open` and `compact` take. */
    readonly dir: string;
    /** Where its files are: `dir`, or the copy an interrupted delete or compaction staged. */
    readonly source: string;
  }
  | {
    readonly kind: "legacy";
    readonly collection: string;
    readonly id: string;
    /** The version-2 file read in place (the collection's, or one an uncommitted delete staged). */
    readonly file: string;
  };

/** What looking a session id up in one collection found. */
interface Lookup {
  /** Where the session is; undefined when the collection holds no such session. */
  readonly located: Located | undefined;
  /** True when the store's listing lists the session. */
  readonly listed: boolean;
  /** The store listing's failure for the session, when it cannot be listed. */
  readonly failure: ListFailure | undefined;
  /**
   * When nothing is `located`: the never-migrated `<id>.jsonl` that is there but is no regular
   * file (a link, a directory), which the listing skips and nothing reads.
   */
  readonly irregular?: string | undefined;
}

/**
 * The refusal of a never-migrated legacy `<id>.jsonl` that is not a regular file (a link, whatever
 * it points to, or a directory): nothing is read through it. `sessions verify` reports it as a
 * finding, as `verify --all` does; the other commands refuse it.
 */
class LegacyFileNotRegularError extends SessionFormatError {
  /** Creates the refusal of `file`. */
  constructor(file: string) {
    super("Legacy session file is not a regular file (links are refused)", { file });
  }
}

/**
 * The copy of session `id` that an interrupted compaction (its previous directory) or an
 * uncommitted delete (its staged directory or legacy file) holds, looked for like the store's
 * listing does when `<id>/` is missing. Reads only.
 */
async function stagedCopy(
  io: CliIo,
  collection: string,
  id: string,
  privateDirectories?: readonly string[],
): Promise<{ dir?: string; file?: string }> {
  let names = privateDirectories;
  if (names === undefined) {
    try {
      names = privateDirectoriesOf(await io.fs.readDir(collection));
    } catch (error) {
      if (error instanceof NotFound) return {};
      throw error;
    }
  }
  const hasMeta = async (dir: string): Promise<boolean> =>
    (await entryKind(io.fs, dir)) === "directory" &&
    (await entryKind(io.fs, join(dir, META_FILE))) === "file";
  for (const name of names) {
    if (stagingSessionId(name) !== id) continue;
    const previous = join(collection, name, COMPACTION_PREVIOUS);
    if (await hasMeta(previous)) return { dir: previous };
  }
  let file: string | undefined;
  for (const name of names) {
    if (!isDeleteStagingName(name)) continue;
    const deletion = await inspectDeletion(io.fs, collection, name);
    const dir = deletion?.directories.get(id);
    if (dir !== undefined && await hasMeta(dir)) return { dir };
    file ??= deletion?.legacy.get(id);
  }
  return file === undefined ? {} : { file };
}

/**
 * The names of the staging and delete directories among a collection's `entries`, sorted: where
 * `stagedCopy` looks for the copies interrupted operations hold.
 */
function privateDirectoriesOf(entries: readonly DirEntry[]): string[] {
  return entries
    .filter((e) =>
      e.kind === "directory" &&
      isPrivateStagingName(e.name)
    )
    .map((e) => e.name)
    .sort();
}

/** What one listing of a whole collection found, read once for every session verified in it. */
interface CollectionListing {
  /** The ids the store's listing lists. */
  readonly listed: ReadonlySet<string>;
  /** The listing's failure of each session that cannot be listed. */
  readonly failures: ReadonlyMap<string, ListFailure>;
  /** The names of the collection's entries when it was read. */
  readonly names: ReadonlySet<string>;
  /** Its staging and delete directories then (`privateDirectoriesOf`). */
  readonly privateDirectories: readonly string[];
}

/**
 * `lookup` of session `id` answered from `listing` (one read of the collection for all its
 * sessions, instead of one each), or undefined when the listing does not explain where it is now:
 * its `<id>/` moved away since the collection was read, or it is found nowhere (gone meanwhile, or
 * a failure `lookup` throws). `lookup` then looks at the collection again.
 */
async function lookupListed(
  io: CliIo,
  listing: CollectionListing,
  collection: string,
  id: string,
): Promise<Lookup | undefined> {
  const dir = join(collection, id);
  const file = join(collection, id + LEGACY_EXTENSION);
  const listed = listing.listed.has(id);
  const failure = listing.failures.get(id);
  const located = (found: Located): Lookup => ({ located: found, listed, failure });
  if ((await entryKind(io.fs, dir)) !== undefined) {
    return located({ kind: "directory", collection, id, dir, source: dir });
  }
  if (listing.names.has(id)) return undefined;
  const staged = await stagedCopy(io, collection, id, listing.privateDirectories);
  if (staged.dir !== undefined) {
    return located({ kind: "directory", collection, id, dir, source: staged.dir });
  }
  if (failure !== undefined && failure.path !== file) return undefined;
  const kind = await entryKind(io.fs, file);
  if (kind === "file") return located({ kind: "legacy", collection, id, file });
  // Anything else at `<id>.jsonl` (a link, a directory) is what `lookup` reports, also beside a
  // copy a delete staged: a migration puts that copy back there first, and fails on it.
  if (kind !== undefined) return undefined;
  if (staged.file !== undefined) {
    return located({ kind: "legacy", collection, id, file: staged.file });
  }
  return undefined;
}

/**
 * Looks session `id` up in `collection` by the store's rules: the published directory `<id>/`
 * (whatever it is: opening or verifying it judges it, an invalid one is an error and never
 * replaced by its legacy backup), else a copy staged by an interrupted compaction or delete, else
 * the legacy file `<id>.jsonl`. The store's listing (`findSessions`) says whether the session is
 * listed or failed. Reads only.
 */
async function lookup(
  io: CliIo,
  context: StoreContext,
  collection: string,
  id: string,
): Promise<Lookup> {
  const dir = join(collection, id);
  const file = join(collection, id + LEGACY_EXTENSION);
  const found = await findSessions(context, collection, undefined, [id]);
  const listed = found.sessions.length > 0;
  const failure = found.failures[0];
  const directory = (source: string): Located => ({
    kind: "directory",
    collection,
    id,
    dir,
    source,
  });
  const legacy = (path: string): Located => ({ kind: "legacy", collection, id, file: path });
  if ((await entryKind(io.fs, dir)) !== undefined) {
    return { located: directory(dir), listed, failure };
  }
  const staged = await stagedCopy(io, collection, id);
  let located: Located | undefined;
  let irregular: string | undefined;
  if (staged.dir !== undefined) located = directory(staged.dir);
  // No copy staged any more: a compaction (or a delete that rolled back) may have put `<id>/` back
  // in place since it was looked at, as the store looks once more.
  else if ((await entryKind(io.fs, dir)) !== undefined) located = directory(dir);
  // Moved away by a compaction whose previous copy is damaged: located at its place (opening it
  // reports that; a delete removes what recovery keeps of it).
  else if (failure !== undefined && await damagedCompactionOf(io.fs, dir) !== undefined) {
    located = directory(dir);
  } else if (failure !== undefined && failure.path !== file) throw failure.error;
  else {
    const kind = await entryKind(io.fs, file);
    if (kind === "file") located = legacy(file);
    // Anything else there is reported, also beside a copy a delete staged (see `lookupListed`).
    else if (kind !== undefined) irregular = file;
    else if (staged.file !== undefined) located = legacy(staged.file);
  }
  return { located, listed, failure, irregular };
}

/**
 * True when `target` is a path, not an id: one with a `/`, `.` or `..`, a legacy `<id>.jsonl`, or
 * the bare name of a session file (`meta.json` of the current directory; the others get the
 * error of a path that names no session).
 */
function isPathTarget(target: string): boolean {
  return target.includes("/") || target.endsWith(LEGACY_EXTENSION) || target === "." ||
    target === ".." || SESSION_FILE_NAMES.has(target);
}

/** The files of a session directory, taken for paths when given bare. */
const SESSION_FILE_NAMES: ReadonlySet<string> = new Set(["meta.json", "index.json"]);

/**
 * Resolves `<id|path>` the way the store does. A path names a session directory, its meta.json or
 * a legacy `<id>.jsonl` file, and is looked up in its collection (so the backup of a migrated
 * session resolves to its directory); an id is searched in `within` (default: every collection of
 * the data directory) and must be found in exactly one.
 */
async function locateTarget(
  io: CliIo,
  flags: StoreFlags,
  target: string,
  within?: readonly string[],
): Promise<Lookup & { readonly located: Located; readonly path: string }> {
  const context = storeFor(io, flags).context;
  if (isPathTarget(target)) {
    let path = resolvePath(io, target);
    if (basename(path) === META_FILE) path = dirname(path);
    const name = basename(path);
    const collection = dirname(path);
    const inside = basename(collection);
    if (isPrivateStagingName(inside)) {
      throw new InvalidArgumentError(
        "path",
        `Session path is inside a private staging directory: '${path}'; name the session by its id or its collection path`,
      );
    }
    if (name === MESSAGES_FILE || name === INDEX_FILE) {
      // As the store refuses it: a file of a session names no session by itself.
      throw new InvalidArgumentError(
        "path",
        `'${path}' is a file of a session: name the session directory or its ${META_FILE}`,
      );
    }
    const isFile = name.endsWith(LEGACY_EXTENSION);
    const id = isFile ? legacySessionId(name) : name;
    if (id === undefined) {
      throw new SessionFormatError("A legacy session file must be named <session id>.jsonl", {
        file: path,
      });
    }
    const kind = await entryKind(io.fs, path);
    if (!isSessionId(id)) {
      if (kind === undefined) {
        throw new SessionNotFoundError(`No session at '${path}': the path does not exist`);
      }
      // Not named like a session: opened as given, which says what is wrong with it.
      const located: Located = { kind: "directory", collection, id, dir: path, source: path };
      return { located, listed: false, failure: undefined, path };
    }
    if (
      isFile && kind !== undefined && kind !== "file" && !(await exists(io, join(collection, id)))
    ) {
      throw new LegacyFileNotRegularError(path);
    }
    const found = await lookup(io, context, collection, id);
    if (found.located === undefined) {
      if (found.irregular !== undefined) throw new LegacyFileNotRegularError(found.irregular);
      throw new SessionNotFoundError(
        `No session at '${path}'${kind === undefined ? ": the path does not exist" : ""}`,
      );
    }
    return { ...found, located: found.located, path };
  }
  if (!isSessionId(target)) {
    throw new UsageError(`'${target}' is neither a session id (a lowercase UUID) nor a path`);
  }
  const found: (Lookup & { readonly located: Located })[] = [];
  const irregular: string[] = [];
  for (const collection of within ?? await collections(io, flags.agentDir)) {
    const result = await lookup(io, context, collection, target);
    if (result.located !== undefined) found.push({ ...result, located: result.located });
    else if (result.irregular !== undefined) irregular.push(result.irregular);
  }
  const first = found[0];
  if (first === undefined) {
    // No session, but something at a never-migrated `<id>.jsonl`: said as for its path.
    if (irregular.length > 1) {
      throw new UsageError(
        `Session id ${target} names a file in several collections; pass a path: ${
          irregular.join(", ")
        }`,
      );
    }
    if (irregular[0] !== undefined) throw new LegacyFileNotRegularError(irregular[0]);
    throw new SessionNotFoundError(
      within === undefined
        ? `No session with id ${target} under '${
          join(flags.agentDir, "sessions")
        }'; pass a path or --data-dir`
        : `No session with id ${target} in '${within.join("', '")}'`,
    );
  }
  if (found.length > 1) {
    throw new UsageError(
      `Session id ${target} exists in several collections; pass a path: ${
        found.map((f) => f.located.collection).join(", ")
      }`,
    );
  }
  return {
    ...first,
    path: first.located.kind === "legacy" ? first.located.file : first.located.dir,
  };
}

/** Resolves `<id|path>` to the session the store finds there (see `locateTarget`). */
async function locate(io: CliIo, flags: StoreFlags, target: string): Promise<Located> {
  return (await locateTarget(io, flags, target)).located;
}

/** Refuses a session directory that is not a real directory (a link is never read through). */
async function realDirectory(io: CliIo, dir: string): Promise<string> {
  const kind = await entryKind(io.fs, dir);
  if (kind !== undefined && kind !== "directory") {
    throw sessionNotADirectory(dir);
  }
  return dir;
}

function infoRow(info: SessionInfo): string[] {
  return [
    info.id,
    info.updatedAt.replace("T", " ").replace(/\.\d+Z$/, "Z"),
    String(info.messageCount),
    [
      info.pinned ? "pinned" : "",
      info.unread ? "unread" : "",
      info.archived ? "archived" : "",
      info.storage === "legacy" ? "v2" : "",
    ]
      .filter((s) => s !== "").join(",") || "-",
    info.title?.text ?? "",
  ];
}

function textOf(message: Message): string {
  const content = (message as { content?: unknown }).content;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map(
    (block: { type?: string; text?: string; name?: string; thinking?: string }) => {
      if (block.type === "text") return block.text ?? "";
      if (block.type === "toolCall") return `[tool call ${block.name ?? ""}]`;
      if (block.type === "thinking") return "[thinking]";
      if (block.type === "image") return "[image]";
      return "";
    },
  ).filter((t) => t !== "").join(" ");
}

function oneLine(text: string, width = 100): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > width ? flat.slice(0, width - 1) + "…" : flat;
}

/** Runs `sessions <subcommand> …`; returns the exit code. */
export async function runSessions(
  io: CliIo,
  args: readonly string[],
  dataDir: string | undefined,
): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "help" || sub === "--help" || sub === "-h") {
    const help = `Usage: loop-sessions sessions <command> [options]\n\nCommands: ${
      Object.keys(SESSIONS_HELP).join(", ")
    }\nRun 'loop-sessions sessions <command> --help' for details.\n`;
    // A missing command is a usage error, like a missing top-level command: help on stderr, 2.
    if (sub === undefined) {
      io.err(help);
      return 2;
    }
    parseArgs(rest, {}); // an option after it is still an unknown one
    io.out(help);
    return 0;
  }
  const help = Object.hasOwn(SESSIONS_HELP, sub) ? SESSIONS_HELP[sub] : undefined;
  if (help === undefined) throw new UsageError(`unknown command 'sessions ${sub}'`);
  const flags = { agentDir: agentDirOf(io, dataDir) };
  if (!rest.includes("--help") && !rest.includes("-h") && !(await exists(io, flags.agentDir))) {
    // Not an error (a host that never saved has none), but a mistyped --data-dir would otherwise
    // pass for an empty store.
    io.err(inlined`note: the data directory '${flags.agentDir}' does not exist\n`);
  }
  switch (sub) {
    case "list":
      return await list(io, flags, rest);
    case "show":
      return await show(io, flags, rest);
    case "history":
      return await history(io, flags, rest);
    case "verify":
      return await verify(io, flags, rest);
    case "migrate":
      return await migrate(io, flags, rest);
    case "archive":
    case "restore":
    case "delete":
      return await membership(io, flags, sub, rest);
    case "cleanup":
      return await cleanup(io, flags, rest);
    case "compact":
      return await compact(io, flags, rest);
    case "salvage":
      return await salvage(io, flags, rest);
  }
  throw new UsageError(`unknown command 'sessions ${sub}'`);
}

function wantsHelp(io: CliIo, sub: string, parsed: { flags: ReadonlySet<string> }): boolean {
  if (!parsed.flags.has("help")) return false;
  io.out((SESSIONS_HELP[sub] ?? "") + "\n");
  return true;
}

/** Which collections a command of `list`'s options works on. */
type CollectionScope =
  | { readonly kind: "all" }
  | { readonly kind: "dir"; readonly dir: string }
  | { readonly kind: "cwd"; readonly cwd: string };

/**
 * The collections `--cwd DIR`, `--dir COLLECTION` or `--all-workspaces` name (at most one of them;
 * none: the current directory's workspace), for `sessions command`, which takes no positional
 * argument. A `--dir` that does not exist is an error, as a `--cwd` that does not is.
 */
async function collectionScope(
  io: CliIo,
  command: string,
  parsed: {
    positionals: readonly string[];
    values: ReadonlyMap<string, string>;
    flags: ReadonlySet<string>;
  },
): Promise<CollectionScope> {
  if (parsed.positionals.length > 0) {
    throw new UsageError(`sessions ${command} takes no positional arguments`);
  }
  const modes = ["cwd", "dir"].filter((n) => parsed.values.has(n)).length +
    (parsed.flags.has("all-workspaces") ? 1 : 0);
  if (modes > 1) throw new UsageError("pass only one of --cwd, --dir and --all-workspaces");
  if (parsed.flags.has("all-workspaces")) return { kind: "all" };
  const given = parsed.values.get("dir");
  if (given === undefined) {
    return { kind: "cwd", cwd: resolvePath(io, parsed.values.get("cwd") ?? ".") };
  }
  const dir = resolvePath(io, given);
  if (!(await exists(io, dir))) {
    throw new SessionNotFoundError(`Collection directory does not exist: '${dir}'`, { file: dir });
  }
  return { kind: "dir", dir };
}

async function list(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, {
    cwd: "value",
    dir: "value",
    "all-workspaces": "boolean",
    fast: "boolean",
    json: "boolean",
  });
  if (wantsHelp(io, "list", parsed)) return 0;
  const scope = await collectionScope(io, "list", parsed);
  if (scope.kind === "dir" && await exists(io, join(scope.dir, META_FILE))) {
    // A session directory lists no session (its entries are its files): said, as cleanup says
    // it, rather than "No sessions found" for a session that is there.
    const collection = dirname(scope.dir);
    throw new InvalidArgumentError(
      "dir",
      `'${scope.dir}' is a session directory (it holds ${META_FILE}), not a collection; ` +
        `list its collection with --dir '${collection}' or show it with 'sessions show'`,
    );
  }
  const json = parsed.flags.has("json");
  const options = { fast: parsed.flags.has("fast"), pinnedFirst: true };
  const store = storeFor(io, flags);
  const sessions: SessionInfo[] = [];
  const failures: { path: string; error: string }[] = [];
  const add = (result: { sessions: SessionInfo[]; failures: { path: string; error: Error }[] }) => {
    // One push per item: a collection may hold more sessions than a call takes arguments.
    for (const session of result.sessions) sessions.push(session);
    for (const f of result.failures) failures.push({ path: f.path, error: f.error.message });
  };
  if (scope.kind === "all") {
    for (const collection of await collections(io, flags.agentDir)) {
      // Listed under sessions/, yet not there by that name (one the runtime cannot spell back,
      // not valid UTF-8): its sessions are unknown, said as `verify --all` says it, never hidden.
      if (!(await exists(io, collection))) {
        failures.push({
          path: collection,
          error:
            `Collection directory cannot be read by the name it is listed under: '${collection}'`,
        });
        continue;
      }
      // One that cannot be read is said so, and the others are listed all the same.
      try {
        add(await store.listDetailed(undefined, collection, options));
      } catch (error) {
        if (!isReportable(error)) throw error;
        failures.push({ path: collection, error: (error as Error).message });
      }
    }
  } else if (scope.kind === "dir") add(await store.listDetailed(undefined, scope.dir, options));
  else add(await store.listDetailed(scope.cwd, undefined, options));
  // The library's order, also across collections: pinned first (latest pin first), then newest
  // activity first, then id.
  sessions.sort(comparePinnedFirst);
  if (json) printJson(io, { sessions, failures });
  else {
    if (sessions.length === 0) io.out("No sessions found.\n");
    else io.out(table(["ID", "UPDATED", "MESSAGES", "STATE", "TITLE"], sessions.map(infoRow)));
    for (const failure of failures) io.err(inlined`error: ${failure.error}\n`);
  }
  return failures.length > 0 ? 1 : 0;
}

async function cleanup(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, {
    cwd: "value",
    dir: "value",
    "all-workspaces": "boolean",
    json: "boolean",
  });
  if (wantsHelp(io, "cleanup", parsed)) return 0;
  const scope = await collectionScope(io, "cleanup", parsed);
  const store = storeFor(io, flags);
  const reports: ({ collection: string } & CleanupReport)[] = [];
  const skipped: { collection: string; reason: string }[] = [];
  if (scope.kind === "all") {
    // Each collection on its own: one that cannot be cleaned is reported as skipped (exit 1), with
    // why, and the others are cleaned all the same.
    for (const { path, linked } of await collectionEntries(io, flags.agentDir)) {
      if (linked) {
        skipped.push({ collection: path, reason: linkedCollectionReason("cleanup") });
        continue;
      }
      if (!(await exists(io, path))) {
        // Listed, yet not there by that name (not valid UTF-8): see `list --all-workspaces`.
        skipped.push({
          collection: path,
          reason: "it cannot be read by the name it is listed under",
        });
        continue;
      }
      try {
        reports.push({ collection: path, ...await store.cleanup(undefined, path) });
      } catch (error) {
        if (!(error instanceof SessionError || error instanceof FsError)) throw error;
        skipped.push({ collection: path, reason: error.message });
      }
    }
  } else if (scope.kind === "dir") {
    reports.push({ collection: scope.dir, ...await store.cleanup(undefined, scope.dir) });
  } else {
    const report = await store.cleanup(scope.cwd);
    reports.push({ collection: await store.collectionFor(scope.cwd), ...report });
  }
  const unsettled = skipped.length + reports.reduce((n, report) => n + report.kept.length, 0);
  if (parsed.flags.has("json")) printJson(io, { collections: reports, skipped });
  else {
    for (const report of reports) {
      const done = [
        ...report.finished.map((path) => `finished delete  ${path}`),
        ...report.restored.map((path) => `rolled back      ${path}`),
        ...report.removed.map((path) => `removed          ${path}`),
        ...report.kept.map((path) => `kept             ${path}`),
      ];
      io.out(inlined`${report.collection}:${done.length === 0 ? " nothing to do" : ""}\n`);
      for (const line of done) io.out(inlined`  ${line}\n`);
    }
    for (const { collection, reason } of skipped) {
      io.out(inlined`${collection}: skipped: ${reason}\n`);
    }
  }
  return unsettled > 0 ? 1 : 0;
}

async function show(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { json: "boolean" });
  if (wantsHelp(io, "show", parsed)) return 0;
  const [target] = parsed.positionals;
  if (target === undefined || parsed.positionals.length > 1) {
    throw new UsageError("sessions show takes one <id|path>");
  }
  const located = await locate(io, flags, target);
  const { collection, id } = located;
  const store = storeFor(io, flags, collection);
  let result;
  if (located.kind === "legacy") {
    // A legacy version-2 file (no <id>/ is published): read it in place (opening it would
    // migrate it).
    const path = located.file;
    const legacy = await readLegacySession(io.fs, path);
    const header = legacy.fallbackTitle !== undefined && !legacy.header.title
      ? { ...legacy.header, title: legacy.fallbackTitle }
      : legacy.header;
    result = {
      id,
      path,
      header,
      messageCount: legacy.messageCount,
      userMessageCount: legacy.userMessageCount,
      storage: null,
      legacy: true,
      unread: header.unread ?? false,
      pinnedAt: header.pinnedAt ?? null,
      archived: false,
    };
  } else {
    const session = await store.open(located.dir, { readOnly: true });
    try {
      const header = session.getHeader();
      const messages = session.messages;
      result = {
        id,
        path: session.getSessionPath(),
        header,
        messageCount: messages.length,
        userMessageCount: messages.filter((m) => m.role === "user").length,
        storage: session.getStorageInfo() ?? null,
        legacy: false,
        unread: session.unread,
        pinnedAt: header.pinnedAt ?? null,
        archived: false,
      };
    } finally {
      await session.close();
    }
  }
  // Membership is read once the target is known to be a session (its id is then valid).
  result.archived = await store.archive.isArchived(undefined, id);
  const archived = result.archived;
  const { header, storage } = result;
  if (parsed.flags.has("json")) {
    printJson(io, result);
    return 0;
  }
  const rows: [string, string][] = [
    ["id", id],
    ["path", result.path],
    ["cwd", header.cwd],
    [
      "title",
      `${header.title?.text ?? ""}${header.title?.source === "fallback" ? " (fallback)" : ""}`,
    ],
    ["created", header.createdAt],
    ["updated", header.updatedAt],
    [
      "model",
      header.model === undefined
        ? "-"
        : `${header.model.provider}/${header.model.id}${
          header.model.effort ? ` (${header.model.effort})` : ""
        }`,
    ],
    ["permission", header.permissionPreset],
    ["messages", `${result.messageCount} (${result.userMessageCount} from the user)`],
    [
      "generation",
      storage?.generation ?? (result.legacy ? "legacy version-2 file (migrates on open)" : "-"),
    ],
    [
      "committed",
      storage === null
        ? "-"
        : `bytes ${storage.start}..${storage.start + storage.bytes} (${
          formatBytes(storage.bytes)
        })`,
    ],
    ["unread", String(result.unread)],
    ["pinned", header.pinnedAt ?? "no"],
    ["archived", String(archived)],
  ];
  io.out(fieldRows(rows));
  return 0;
}

async function history(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { before: "value", json: "boolean" });
  if (wantsHelp(io, "history", parsed)) return 0;
  const [target] = parsed.positionals;
  if (target === undefined || parsed.positionals.length > 1) {
    throw new UsageError("sessions history takes one <id|path>");
  }
  const before = numberOption(parsed, "before", true);
  const located = await locate(io, flags, target);
  let page: HistoryPage;
  try {
    page = located.kind === "legacy"
      ? await legacyPage(io, located.file, before)
      : await committedPage(storeFor(io, flags, located.collection), located.dir, before);
  } catch (error) {
    // A `--before` that is not a round start of this history is a bad argument, not a finding.
    if (error instanceof InvalidArgumentError) throw new UsageError(`--before: ${error.message}`);
    throw error;
  }
  {
    if (parsed.flags.has("json")) {
      printJson(io, page);
      return 0;
    }
    io.out(`messages ${page.start}..${page.end} of ${page.total}\n`);
    page.messages.forEach((message, i) => {
      io.out(`#${page.start + i} ${message.role.padEnd(10)} ${oneLine(textOf(message))}\n`);
    });
    if (page.start > 0) io.out(`earlier: --before ${page.start}\n`);
    return 0;
  }
}

async function committedPage(
  store: SessionStore,
  path: string,
  before: number | undefined,
): Promise<HistoryPage> {
  const session = await store.open(path, { readOnly: true });
  try {
    return await session.readHistory(before);
  } finally {
    await session.close();
  }
}

/**
 * A history page of a legacy version-2 file, read in place (never migrated): from the one read
 * that validated it (never through a link).
 */
async function legacyPage(
  io: CliIo,
  path: string,
  before: number | undefined,
): Promise<HistoryPage> {
  const { messages } = await readLegacyHistory(io.fs, path);
  const starts = messages.flatMap((m, i) => (m.role === "user" ? [i] : []));
  const [start, end] = pageBounds(
    (k) => starts[k] as number,
    starts.length,
    messages.length,
    before,
  );
  return { messages: messages.slice(start, end), start, end, total: messages.length, revision: "" };
}

function printReport(io: CliIo, report: VerifyReport): void {
  if (report.findings.length === 0) {
    io.out(inlined`ok       ${report.dir} (${report.validMessages} messages)\n`);
    return;
  }
  // A report whose only errors are files that could not be read says so, not that it is corrupt.
  const unread = !report.ok &&
    report.findings.every((f) => f.severity !== "error" || f.kind === "read");
  io.out(inlined`${report.ok ? "warning" : unread ? "FAILED " : "CORRUPT"}  ${report.dir}\n`);
  for (const finding of report.findings) {
    const at = [
      finding.messageIndex === undefined ? "" : `message #${finding.messageIndex}`,
      finding.offset === undefined ? "" : `byte ${finding.offset}`,
    ].filter((s) => s !== "").join(", ");
    io.out(
      inlined`  ${finding.severity}: ${finding.message}${
        at === "" ? "" : ` (${at})`
      }\n    in ${finding.file}\n`,
    );
  }
}

async function verify(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { all: "boolean", json: "boolean" });
  if (wantsHelp(io, "verify", parsed)) return 0;
  const json = parsed.flags.has("json");
  if (parsed.flags.has("all")) {
    if (parsed.positionals.length > 0) throw new UsageError("pass either <id|path> or --all");
    return printReports(io, json, await verifyEverySession(io, flags, json));
  }
  const [target] = parsed.positionals;
  if (target === undefined || parsed.positionals.length > 1) {
    throw new UsageError("sessions verify takes one <id|path> or --all");
  }
  let located: Located;
  try {
    located = await locate(io, flags, target);
  } catch (error) {
    // Anything but a regular file at a never-migrated `<id>.jsonl` (never read): a finding, as
    // 'verify --all' reports it.
    if (!(error instanceof LegacyFileNotRegularError)) throw error;
    return printReports(io, json, [failedReport(error.file ?? target, error)]);
  }
  // Verified where the store reads it; a link planted at the session folder is refused. A legacy
  // file not migrated yet is read in place, as 'verify --all' reads it.
  const source = located.kind === "legacy"
    ? { file: located.file }
    : { dir: await realDirectory(io, located.source), id: located.id };
  const progress = new Progress(io, "verifying", json);
  let report: VerifyReport;
  try {
    progress.update(0, 1);
    report = "file" in source
      ? await verifyLegacy(io, source.file, false) as VerifyReport
      : await verifySession(io.fs, source.dir, { sha256: io.sha256, id: source.id });
  } finally {
    progress.end(); // an error's line never joins the progress line
  }
  return printReports(io, json, [report]);
}

/** Prints verification reports; returns the exit code: 1 when one is not ok. */
function printReports(io: CliIo, json: boolean, reports: readonly VerifyReport[]): number {
  if (json) printJson(io, reports.map(({ meta: _meta, ...rest }) => rest));
  else {
    for (const report of reports) printReport(io, report);
    if (reports.length === 0) io.out("No sessions found.\n");
  }
  return reports.every((r) => r.ok) ? 0 : 1;
}

/**
 * The report of something `verify --all` could not verify: one error finding, of `kind`, with
 * the error's message and the file it names (an `FsError`'s path, a `SessionError`'s file, else
 * `dir`).
 */
function failedReport(dir: string, error: SessionError | FsError, kind?: string): VerifyReport {
  const file = error instanceof FsError ? error.path : error.file ?? dir;
  return {
    dir,
    ok: false,
    meta: undefined,
    validMessages: 0,
    findings: [{
      severity: "error",
      kind: kind ?? (error instanceof FsError ? "read" : "file"),
      message: error.message,
      file,
    }],
  };
}

function isReportable(error: unknown): error is SessionError | FsError {
  return error instanceof SessionError || error instanceof FsError;
}

/**
 * Verifies every session of the data directory's collections, found as `sessions list
 * --all-workspaces` finds them and read where `sessions verify <id>` reads them: a session
 * directory in place, or the copy an interrupted compaction or an uncommitted delete holds; a
 * legacy version-2 file not migrated yet, validated by the legacy reader as its migration would.
 * Anything else at a session's name (a link, a file) is a finding, and so is whatever cannot be
 * read (the file it names), each beside the other sessions. Reads only.
 */
async function verifyEverySession(
  io: CliIo,
  flags: StoreFlags,
  json: boolean,
): Promise<VerifyReport[]> {
  const store = storeFor(io, flags);
  const context = store.context;
  const reports: VerifyReport[] = [];
  const targets: { collection: string; id: string; listing: CollectionListing }[] = [];
  for (const collection of await collections(io, flags.agentDir)) {
    const ids = new Set<string>();
    let listing: CollectionListing;
    try {
      // The listing's sessions and failures (with the copies interrupted operations hold), and
      // every entry named by a session id, whatever it is (the listing skips a link there).
      const listed = await store.listDetailed(undefined, collection, { fast: true });
      const failures = new Map<string, ListFailure>();
      for (const session of listed.sessions) ids.add(session.id);
      for (const failure of listed.failures) {
        if (failure.id !== undefined) {
          ids.add(failure.id);
          if (!failures.has(failure.id)) failures.set(failure.id, failure);
        } else reports.push(failedReport(failure.path, failure.error));
      }
      const entries = await io.fs.readDir(collection);
      for (const entry of entries) {
        const id = isSessionId(entry.name) ? entry.name : legacySessionId(entry.name);
        if (id !== undefined) ids.add(id);
      }
      listing = {
        listed: new Set(listed.sessions.map((session) => session.id)),
        failures,
        names: new Set(entries.map((entry) => entry.name)),
        privateDirectories: privateDirectoriesOf(entries),
      };
    } catch (error) {
      if (!isReportable(error)) throw error;
      reports.push(failedReport(collection, error));
      continue;
    }
    for (const id of [...ids].sort()) targets.push({ collection, id, listing });
  }
  const progress = new Progress(io, "verifying", json);
  try {
    for (const [i, { collection, id, listing }] of targets.entries()) {
      progress.update(i, targets.length);
      const report = await verifyOne(io, context, collection, id, listing);
      if (report !== undefined) reports.push(report);
    }
  } finally {
    progress.end(); // an error's line never joins the progress line
  }
  return reports;
}

/**
 * Verifies the legacy version-2 file `file` in place with the legacy reader, as its migration
 * would validate it: ok, or one error finding naming the file (kind `legacy`; `read` when it
 * cannot be read). Undefined, with `skipUnsupported`, for a header of another format or version
 * (a file the store's listing skips). Reads only.
 */
async function verifyLegacy(
  io: CliIo,
  file: string,
  skipUnsupported: boolean,
): Promise<VerifyReport | undefined> {
  try {
    const legacy = await readLegacySession(io.fs, file);
    return {
      dir: file,
      ok: true,
      meta: undefined,
      validMessages: legacy.messageCount,
      findings: [],
    };
  } catch (error) {
    if (skipUnsupported && error instanceof UnsupportedSessionError) return undefined;
    if (!isReportable(error)) throw error;
    return failedReport(file, error, error instanceof FsError ? "read" : "legacy");
  }
}

/**
 * Verifies session `id` of `collection` where the store finds it (see `lookup`; answered from
 * `listing`, the collection's listing in hand, where it can be); undefined when there is nothing
 * to verify (gone meanwhile, or a legacy file of a format the store skips). A session found gone
 * from where it was verified (another process deleting or compacting it), or whose first
 * meta.json came into place meanwhile, is looked up again (`listing` undefined, up to
 * `VERIFY_LOOKS` looks in all): reported where it is then, or not at all once deleted.
 */
async function verifyOne(
  io: CliIo,
  context: StoreContext,
  collection: string,
  id: string,
  listing: CollectionListing | undefined,
  looks = 1,
): Promise<VerifyReport | undefined> {
  let found: Lookup;
  try {
    found = (listing === undefined ? undefined : await lookupListed(io, listing, collection, id)) ??
      await lookup(io, context, collection, id);
  } catch (error) {
    if (!isReportable(error)) throw error;
    return failedReport(join(collection, id), error);
  }
  const located = found.located;
  if (located === undefined) {
    const failure = found.failure;
    if (failure !== undefined) return failedReport(failure.path, failure.error);
    // No `<id>/` and no staged copy: anything but a regular file at `<id>.jsonl` (a link, a
    // directory) is a finding, as a link at `<id>/` is; the listing skips it, never reading it.
    const file = join(collection, id + LEGACY_EXTENSION);
    let kind;
    try {
      kind = await entryKind(io.fs, file);
    } catch (error) {
      if (!isReportable(error)) throw error;
      return failedReport(file, error);
    }
    if (kind === undefined || kind === "file") return undefined;
    return failedReport(file, new LegacyFileNotRegularError(file));
  }
  if (located.kind === "legacy") {
    // Not listed and no failure: a format the store skips (the listing does not list it).
    if (!found.listed && found.failure === undefined) return undefined;
    return await verifyLegacy(io, located.file, true);
  }
  let report: VerifyReport;
  try {
    // Where the store reads it; a link (or a file) at the session's name is refused, never read.
    report = await verifySession(io.fs, await realDirectory(io, located.source), {
      sha256: io.sha256,
      id: located.id,
    });
  } catch (error) {
    if (!isReportable(error)) throw error;
    report = failedReport(located.source, error);
  }
  if (report.ok || looks >= VERIFY_LOOKS) return report;
  let kinds: [string | undefined, string | undefined, string | undefined];
  try {
    // index.json before meta.json: a save publishes them in the other order, so an index.json
    // seen without the meta.json seen after it means meta.json was lost, not a save in between.
    const index = await entryKind(io.fs, join(located.source, INDEX_FILE));
    kinds = [
      await entryKind(io.fs, located.source),
      await entryKind(io.fs, join(located.source, META_FILE)),
      index,
    ];
  } catch (error) {
    if (!isReportable(error)) throw error;
    return report;
  }
  if (kinds[0] === "directory") {
    // A directory that has never had a meta.json (a first save in progress, or one that never
    // committed) holds no saved session, and the listing neither lists nor fails it: said, as a
    // warning. An index.json there says a save committed (it is written after one): a lost
    // meta.json is an error. With a legacy backup beside it the listing fails it, and so does this
    // report.
    if (
      kinds[1] === undefined && kinds[2] === undefined && report.meta === undefined &&
      located.source === located.dir && !found.listed && found.failure === undefined
    ) {
      return {
        dir: located.dir,
        ok: true,
        meta: undefined,
        validMessages: 0,
        findings: [{
          severity: "warning",
          kind: "meta",
          message: "No meta.json: nothing committed (a first save in progress, or one that " +
            "never committed); the listing does not list it",
          file: join(located.dir, META_FILE),
        }],
      };
    }
    // Read before its first meta.json was in place (its first save just committed): again.
    if (kinds[1] !== "file" || report.meta !== undefined) return report;
  }
  // Gone from where it was found (another process deleted it, or moved it on while deleting or
  // compacting it), or just committed: looked up again; a session deleted meanwhile is not
  // reported.
  return await verifyOne(io, context, collection, id, undefined, looks + 1);
}

/** How many times `verifyOne` looks up a session that moves meanwhile. */
const VERIFY_LOOKS = 3;

async function migrate(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { all: "boolean", "dry-run": "boolean", json: "boolean" });
  if (wantsHelp(io, "migrate", parsed)) return 0;
  const json = parsed.flags.has("json");
  const dryRun = parsed.flags.has("dry-run");
  const all = parsed.flags.has("all");
  /**
   * The files to migrate: `path` where the collection has it, `source` where its bytes are now
   * (the copy an uncommitted delete staged, which the migration restores first).
   */
  const files: { path: string; published: boolean; source?: string }[] = [];
  /**
   * The collections `--all` leaves out (linked ones, and ones it cannot read), and their legacy
   * files it leaves unmigrated.
   */
  const skipped: { collection: string; reason: string; files: string[]; error?: string }[] = [];
  if (all) {
    if (parsed.positionals.length > 0) throw new UsageError("pass either <path> or --all");
    for (const { path: collection, linked } of await collectionEntries(io, flags.agentDir)) {
      if (!linked) {
        // One that cannot be read is said so, and stops nothing: the others are migrated.
        let found: { path: string; source?: string }[];
        try {
          found = await unmigratedFiles(io, collection);
        } catch (error) {
          if (!isReportable(error)) throw error;
          skipped.push({
            collection,
            reason: "Session collection cannot be read",
            files: [],
            error: (error as Error).message,
          });
          continue;
        }
        for (const file of found) files.push({ ...file, published: false });
        continue;
      }
      // A linked collection is read through (reading only), never written through: said, with
      // what it leaves unmigrated there. One that cannot be read is said so, and stops nothing
      // (what it holds is unknown, so it counts as left unmigrated).
      const reason = linkedCollectionReason("migrate");
      try {
        const files = (await unmigratedFiles(io, collection)).map((found) => found.path);
        skipped.push({ collection, reason, files });
      } catch (error) {
        if (!isReportable(error)) throw error;
        skipped.push({ collection, reason, files: [], error: (error as Error).message });
      }
    }
  } else {
    const [target] = parsed.positionals;
    if (target === undefined || parsed.positionals.length > 1) {
      throw new UsageError("sessions migrate takes one <path> or --all");
    }
    const located = await locate(io, flags, target);
    const file = join(located.collection, located.id + LEGACY_EXTENSION);
    if (located.kind === "legacy") {
      files.push({ path: file, published: false, source: located.file });
    } else if (located.source === located.dir && (await entryKind(io.fs, file)) === "file") {
      // The backup of a migrated session: its published directory is what the store opens.
      files.push({ path: file, published: true });
    } else {
      // Moved away by a compaction whose previous copy is damaged: that is what is reported.
      const missing = located.source === located.dir &&
        await entryKind(io.fs, join(located.dir, META_FILE)) === undefined;
      const kept = missing ? await damagedCompactionOf(io.fs, located.dir) : undefined;
      if (kept !== undefined) throw damagedCompactionError(kept);
      throw new UsageError(`'${located.dir}' is not a legacy <id>.jsonl session file`);
    }
  }
  const results: {
    path: string;
    migratedTo?: string;
    alreadyMigrated: boolean;
    error?: string;
    /** Why `--all` left the file alone: a legacy file of another format or version. */
    unsupported?: string;
  }[] = [];
  /**
   * The result of a file that failed: under `--all`, one of another format or version is left
   * alone as discovery skips it (it cannot block the supported sessions), not a failure.
   */
  const failed = (file: string, published: boolean, error: unknown) =>
    all && error instanceof UnsupportedSessionError
      ? { path: file, alreadyMigrated: published, unsupported: error.message }
      : { path: file, alreadyMigrated: published, error: (error as Error).message };
  const progress = new Progress(io, "migrating", json);
  try {
    await migrateEach();
  } finally {
    progress.end(); // an error's line never joins the progress line
  }
  async function migrateEach(): Promise<void> {
    for (const [i, { path: file, published, source }] of files.entries()) {
      progress.update(i, files.length);
      if (dryRun) {
        const migratedTo = join(dirname(file), legacySessionId(basename(file)) as string);
        try {
          // Validated as the migration would (streamed, nothing written), so "would migrate" holds
          // (a link or a file at the directory's name fails it, as it fails the migration); a
          // published directory as the open would find it (an invalid one fails the real run).
          if (!published) {
            // The collection is written into: refused as a link, as the migration refuses it.
            const collection = dirname(file);
            const kind = await entryKind(io.fs, collection);
            if (kind !== undefined && kind !== "directory") {
              throw collectionNotADirectory(collection);
            }
            await realDirectory(io, migratedTo);
            // Moved away by a compaction whose previous copy is damaged: the real run refuses it.
            const kept = await damagedCompactionOf(io.fs, migratedTo);
            if (kept !== undefined) throw damagedCompactionError(kept);
            if (source !== undefined && source !== file) {
              // The staged copy is put back at `file` first: anything but a file there (a link,
              // a directory) fails the migration, as it fails on the file in place.
              const kind = await entryKind(io.fs, file);
              if (kind !== undefined && kind !== "file") throw legacyNotARegularFile(file);
            }
            await readLegacySession(io.fs, source ?? file);
          } else {
            const report = await verifySession(io.fs, await realDirectory(io, migratedTo), {
              sha256: io.sha256,
            });
            const failure = report.findings.find((finding) => finding.severity === "error");
            if (failure !== undefined) throw new Error(`${failure.message} (in '${failure.file}')`);
          }
          results.push({ path: file, migratedTo, alreadyMigrated: published });
        } catch (error) {
          results.push(failed(file, published, error));
        }
        continue;
      }
      try {
        // Opening validates a published directory (an invalid one fails) or migrates the file.
        const session = await storeFor(io, flags, dirname(file)).open(file, { readOnly: true });
        results.push({
          path: file,
          migratedTo: session.getSessionPath(),
          alreadyMigrated: published,
        });
        await session.close();
      } catch (error) {
        results.push(failed(file, published, error));
      }
    }
  }
  const left = skipped.some((s) => s.files.length > 0 || s.error !== undefined);
  if (json) printJson(io, { dryRun, results, skipped });
  else {
    if (files.length === 0 && !left) io.out("No legacy sessions to migrate.\n");
    for (const r of results) {
      if (r.error !== undefined) io.out(inlined`failed   ${r.path}: ${r.error}\n`);
      else if (r.unsupported !== undefined) {
        io.out(inlined`left alone ${r.path}: ${r.unsupported}\n`);
      } else if (r.alreadyMigrated) {
        io.out(inlined`already migrated ${r.path} -> ${r.migratedTo} (nothing to do)\n`);
      } else {
        io.out(inlined`${dryRun ? "would migrate" : "migrated"} ${r.path} -> ${r.migratedTo}\n`);
      }
    }
    for (const s of skipped) {
      io.out(inlined`${dryRun ? "would skip" : "skipped "} ${s.collection}: ${s.reason}\n`);
      for (const file of s.files) io.out(inlined`  not migrated: ${file}\n`);
      if (s.error !== undefined) io.out(inlined`  could not be read: ${s.error}\n`);
    }
  }
  // Not everything migrated: a file failed, or is left in a linked collection.
  return results.some((r) => r.error !== undefined) || left ? 1 : 0;
}

/**
 * The legacy `<id>.jsonl` files of `collection` not migrated yet: regular files whose session has
 * no directory in place and none held by an interrupted compaction (the store opens that copy,
 * never the backup, which stays). Anything else at its name (a link, a file) is no migration: the
 * file is taken, and fails as it does alone. A file an uncommitted delete staged, of a session
 * with neither `<id>/` nor a regular `<id>.jsonl` in place, is taken too, at `path` where the
 * migration puts it back first, its bytes now at `source` (the delete did not happen). Reads only.
 */
async function unmigratedFiles(
  io: CliIo,
  collection: string,
): Promise<{ path: string; source?: string }[]> {
  const found: { path: string; source?: string }[] = [];
  const entries = await io.fs.readDir(collection);
  const taken = new Set<string>();
  for (const entry of entries) {
    const id = legacySessionId(entry.name);
    if (entry.kind !== "file" || id === undefined) continue;
    taken.add(id);
    if ((await entryKind(io.fs, join(collection, id))) === "directory") continue;
    if ((await stagedCopy(io, collection, id)).dir !== undefined) continue;
    found.push({ path: join(collection, entry.name) });
  }
  for (const name of privateDirectoriesOf(entries)) {
    if (!isDeleteStagingName(name)) continue;
    const deletion = await inspectDeletion(io.fs, collection, name);
    for (const [id, source] of deletion?.legacy ?? []) {
      if (taken.has(id)) continue;
      taken.add(id);
      // A session migrated before: its directory is in place, or staged with the file (a
      // delete of the session and its backup), where the store opens it; the file is its backup.
      if ((await entryKind(io.fs, join(collection, id))) === "directory") continue;
      if ((await stagedCopy(io, collection, id)).dir !== undefined) continue;
      found.push({ path: join(collection, id + LEGACY_EXTENSION), source });
    }
  }
  return found;
}

/**
 * Where `collection` is: `in` one of the data directory's collections (a real directory directly
 * under <data dir>/sessions/, as listings find them), or the explicit one; `linked` when it would
 * be, but is a link to a directory (read through, never written through); else `out`.
 */
async function scopeOf(
  io: CliIo,
  flags: StoreFlags,
  collection: string,
  explicit: string | undefined,
): Promise<"in" | "linked" | "out"> {
  const same = async (a: string, b: string): Promise<boolean> => {
    if (normalize(a) === normalize(b)) return true;
    try {
      return (await io.fs.realPath(a)) === (await io.fs.realPath(b));
    } catch (error) {
      if (error instanceof NotFound) return false;
      throw error;
    }
  };
  const kind = await entryKind(io.fs, collection);
  if (explicit !== undefined) {
    if (!(await same(collection, explicit))) return "out";
    return kind === "symlink" ? "linked" : "in";
  }
  if (basename(collection).startsWith(".")) return "out";
  if (kind !== "directory" && !(kind === "symlink" && await linksToDirectory(io, collection))) {
    return "out";
  }
  if (!(await same(dirname(collection), join(flags.agentDir, "sessions")))) return "out";
  return kind === "directory" ? "in" : "linked";
}

/**
 * Why `sessions sub` leaves alone a collection that is a link: the store never writes through a
 * link (its listings read through it).
 */
function linkedCollectionReason(sub: string): string {
  return `Session collection path is a link, not a directory: 'sessions ${sub}' writes into the ` +
    "collection, and a link is never followed for writes (symlinks are refused)";
}

/** The refusal of `sessions sub` for a session of `collection`, a collection that is a link. */
function linkedCollectionRefused(sub: string, collection: string): SessionFormatError {
  return new SessionFormatError(`${linkedCollectionReason(sub)}; nothing was changed`, {
    file: collection,
  });
}

/**
 * True when the store recognizes the session it found: its listing lists it, or reports it as
 * damaged while it is a real session directory with a meta.json or a legacy file.
 */
async function recognized(io: CliIo, found: Lookup & { located: Located }): Promise<boolean> {
  if (found.listed) return true;
  if (found.failure === undefined) return false; // Not a session, or of an unsupported format.
  const located = found.located;
  if (located.kind === "legacy") return true;
  // Moved away by a compaction whose previous copy is damaged (recovery keeps what is left): a
  // delete of the session removes it.
  if (await damagedCompactionOf(io.fs, located.dir) !== undefined) return true;
  return (await entryKind(io.fs, located.source)) === "directory" &&
    (await entryKind(io.fs, join(located.source, META_FILE))) === "file";
}

/**
 * Refuses a `..` segment in a path that names what a command changes: the path is resolved as
 * text, while the kernel resolves `..` after following a link (`C/link/../<id>` may be a session
 * of another collection). Nothing is changed.
 */
function refuseParentSegments(sub: string, path: string): void {
  if (path.split("/").includes("..")) {
    throw new UsageError(
      `sessions ${sub} does not take a path with '..' ('${path}'); name the session by its id or a path without '..'`,
    );
  }
}

async function membership(
  io: CliIo,
  flags: StoreFlags,
  sub: "archive" | "restore" | "delete",
  args: readonly string[],
): Promise<number> {
  const parsed = parseArgs(
    args,
    sub === "delete"
      ? { "include-unarchived": "boolean", dir: "value", json: "boolean" }
      : { dir: "value", json: "boolean" },
  );
  if (wantsHelp(io, sub, parsed)) return 0;
  if (parsed.positionals.length === 0) {
    throw new UsageError(`sessions ${sub} takes at least one <id|path>`);
  }
  const dir = parsed.values.get("dir");
  if (dir === "") throw new UsageError("option '--dir' needs a non-empty value");
  for (const path of [...parsed.positionals, ...(dir === undefined ? [] : [dir])]) {
    refuseParentSegments(sub, path);
  }
  const explicit = dir === undefined ? undefined : resolvePath(io, dir);
  // A collection is never named with a leading dot: such names are the store's private staging
  // directories (`.delete-*`, `.staging-*`), which only the store itself may change.
  if (
    explicit !== undefined &&
    (basename(explicit).startsWith(".") || basename(await realOrSame(io, explicit)).startsWith("."))
  ) {
    throw new UsageError(
      `'${explicit}' is not a collection: a name starting with '.' is a private staging directory of the store; nothing was changed`,
    );
  }
  // Every target is checked before anything changes: a session the store recognizes, in one of
  // its collections (or the explicit one). Nothing else is ever archived or deleted. Collections
  // are told apart by their real path (one collection named two ways is one), ids by value.
  const byCollection = new Map<string, { collection: string; ids: string[] }>();
  for (const target of parsed.positionals) {
    let found: Awaited<ReturnType<typeof locateTarget>>;
    try {
      found = await locateTarget(
        io,
        flags,
        target,
        explicit === undefined ? undefined : [explicit],
      );
    } catch (error) {
      // A rerun of a delete interrupted past its commit point finds the session gone: what it
      // staged is still on disk until a cleanup finishes it.
      if (sub !== "delete" || !(error instanceof SessionNotFoundError)) throw error;
      throw new SessionNotFoundError(
        `${error.message}; if a delete of it was interrupted, 'sessions cleanup' finishes it`,
        { cause: error, ...(error.file === undefined ? {} : { file: error.file }) },
      );
    }
    const { collection, id } = found.located;
    const scope = await scopeOf(io, flags, collection, explicit);
    if (scope === "linked") throw linkedCollectionRefused(sub, collection);
    if (scope === "out") {
      throw new UsageError(
        `'${found.path}' is not in ${
          explicit === undefined
            ? `a collection of the store ('${join(flags.agentDir, "sessions")}/<collection>/')`
            : `the collection '${explicit}'`
        }; nothing was changed (name a session by its id, or its collection with --dir)`,
      );
    }
    if (!(await recognized(io, found))) {
      const why = found.failure === undefined ? "" : `: ${found.failure.error.message}`;
      throw new SessionNotFoundError(
        `'${found.path}' is not a session the store recognizes${why}; nothing was changed`,
      );
    }
    const key = await io.fs.realPath(collection);
    const entry = byCollection.get(key) ?? { collection, ids: [] };
    if (!entry.ids.includes(id)) entry.ids.push(id);
    byCollection.set(key, entry);
  }
  const archivedOnly = sub === "delete" && !parsed.flags.has("include-unarchived");
  // Every collection's archive.json is read before the first collection is touched: one that
  // cannot be read (damaged, unreadable) fails the command with nothing changed rather than after
  // an earlier collection's part is done. For a delete without --include-unarchived, every target
  // must be archived too.
  for (const { collection, ids } of byCollection.values()) {
    const archived = new Set(await storeFor(io, flags, collection).archive.list(undefined));
    const missing = ids.find((id) => !archived.has(id));
    if (archivedOnly && missing !== undefined) {
      throw forCommandLine(
        new SessionNotArchivedError(missing, { file: join(collection, ARCHIVE_FILE) }),
      );
    }
  }
  const action = sub === "archive" ? "archived" : sub === "restore" ? "restored" : "deleted";
  const json = parsed.flags.has("json");
  const done: { id: string; collection: string }[] = [];
  const groups = [...byCollection.values()];
  for (const [i, { collection, ids }] of groups.entries()) {
    const store = storeFor(io, flags, collection);
    try {
      if (sub === "delete") await store.archive.delete(undefined, ids, { archivedOnly });
      else await store.archive.set(undefined, ids, sub === "archive");
    } catch (thrown) {
      const error = forCommandLine(thrown);
      // What the earlier collections did stays done: say so before the error.
      if (done.length > 0) {
        const pending = groups.slice(i).flatMap((group) => group.ids);
        if (json) {
          printJson(io, {
            action,
            sessions: done,
            notDone: pending,
            error: { collection, message: (error as Error).message },
          });
        } else {
          for (const { id } of done) io.out(inlined`${action} ${id}\n`);
          io.err(
            inlined`${action} ${done.length} session(s) before the failure in '${collection}'; ` +
              inlined`not ${action}: ${pending.join(", ")}\n`,
          );
        }
      }
      throw error;
    }
    for (const id of ids) done.push({ id, collection });
  }
  if (json) printJson(io, { action, sessions: done });
  else for (const { id } of done) io.out(inlined`${action} ${id}\n`);
  return 0;
}

async function compact(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { json: "boolean" });
  if (wantsHelp(io, "compact", parsed)) return 0;
  const [target] = parsed.positionals;
  if (target === undefined || parsed.positionals.length > 1) {
    throw new UsageError("sessions compact takes one <id|path>");
  }
  refuseParentSegments("compact", target);
  const located = await locate(io, flags, target);
  if (located.kind === "legacy") {
    throw new UsageError(
      `'${located.file}' is a legacy version-2 file; migrate it first, then compact its directory`,
    );
  }
  const result = await storeFor(io, flags, located.collection).compact(located.dir);
  const json = parsed.flags.has("json");
  if (result.compacted) {
    // One shape whichever way it went: `findings` is there, empty when there are none.
    if (json) printJson(io, { ...result, ok: true, findings: [] });
    else {
      io.out(
        inlined`compacted ${result.dir}: messages.jsonl ${formatBytes(result.bytesBefore)} -> ${
          formatBytes(result.bytesAfter)
        }\n`,
      );
    }
    return 0;
  }
  // Nothing was rewritten, so nothing was read: verify the committed range instead. The cwd is
  // not the compaction's business (one that rewrites never looks at it): not checked.
  const report = await verifySession(io.fs, await realDirectory(io, result.dir), {
    sha256: io.sha256,
    checkCwd: false,
  });
  const errors = report.findings.filter((f) => f.severity === "error");
  if (json) printJson(io, { ...result, ok: report.ok, findings: errors });
  else if (report.ok) {
    io.out(
      inlined`not compacted: ${result.dir} already holds only the committed generation (${
        formatBytes(result.bytesAfter)
      })\n`,
    );
  } else {
    io.out(inlined`not compacted: ${result.dir} is corrupt\n`);
    for (const finding of errors) {
      // A finding taken from an error's message may name its file already.
      const where = finding.message.includes(finding.file) ? "" : ` (in '${finding.file}')`;
      io.err(inlined`error: ${finding.message}${where}\n`);
    }
  }
  return report.ok ? 0 : 1;
}

async function salvage(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { to: "value", json: "boolean" });
  if (wantsHelp(io, "salvage", parsed)) return 0;
  const [target] = parsed.positionals;
  const to = parsed.values.get("to");
  if (target === undefined || parsed.positionals.length > 1 || to === undefined) {
    throw new UsageError("sessions salvage takes one <id|path> and --to <collection dir>");
  }
  if (to === "") throw new UsageError("option '--to' needs a non-empty value");
  const located = await locate(io, flags, target);
  // By its collection path: the store reads a copy an interrupted delete or compaction staged
  // where it is, or in place once recovery put it back. A link planted at the session folder is
  // refused; salvage refuses a session file that is not a regular file (never read through a link).
  // A legacy version-2 file not migrated yet (a damaged one cannot be) is salvaged from itself.
  const source = located.kind === "legacy" ? located.file : await realDirectory(io, located.dir);
  // Normalized as the store takes it (a trailing slash never reaches a lookup).
  const toCollection = resolvePath(io, to);
  // Under the target collection's lock: a cleanup there never meets the copy half built.
  const result = await storeFor(io, flags).salvage(source, toCollection);
  if (parsed.flags.has("json")) printJson(io, result);
  else {
    io.out(
      inlined`salvaged ${result.kept} message(s) into ${result.dir} (dropped ${result.dropped})\n`,
    );
    if (result.droppedMetadata.length > 0) {
      io.out(inlined`dropped metadata: ${result.droppedMetadata.join(", ")}\n`);
    }
  }
  return 0;
}

/**
 * `error` as the command line says it: the library's `SessionNotArchivedError` tells its caller
 * to pass `{ archivedOnly: false }`, which a user of `sessions delete` passes as
 * `--include-unarchived`. Any other error is returned as it is.
 */
function forCommandLine(error: unknown): unknown {
  if (!(error instanceof SessionNotArchivedError)) return error;
  return new SessionError(
    `Session is not archived: ${error.id}; archive it first ('sessions archive') or pass --include-unarchived`,
    { ...(error.file === undefined ? {} : { file: error.file }), cause: error },
  );
}

/** The real path of `path` (links resolved), or `path` itself when it cannot be resolved. */
async function realOrSame(io: CliIo, path: string): Promise<string> {
  try {
    return await io.fs.realPath(path);
  } catch {
    return path;
  }
}
