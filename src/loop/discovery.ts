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
 *   leftovers, and locks: skipped (a compaction interrupted between its two renames is listed
 *   from its staged previous directory, so the session never disappears).
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
 *
 * ## Modes
 *
 * The default mode validates complete histories, exactly like an open (checksum, every message,
 * metadata against the history, the recorded cwd). The **fast mode** (`{ fast: true }`) is the
 * one a session picker should use: per session it reads meta.json and index.json, plus the first
 * user message when a fallback title is needed, so its cost grows with the number of sessions,
 * not with their history size. A stale index that covers a prefix of the same committed range
 * costs a scan of the unindexed tail only; a missing or unusable index costs one scan of the
 * committed range. Fast mode trusts the committed range (it does not verify the checksum or the
 * messages) and does not check that the recorded cwd still exists. Legacy files have no index:
 * they are read whole in both modes (fast mode skips message validation).
 *
 * @module
 */
import type { FileHandle, FileSystem } from "../port/fs.ts";
import { FsError, NotFound } from "../port/errors.ts";
import { dirname, join } from "../port/path.ts";
import {
  CorruptSessionError,
  SessionError,
  SessionNotFoundError,
  UnsupportedSessionError,
} from "./errors.ts";
import {
  fallbackTitleOf,
  isSessionId,
  type Message,
  type SessionHeader,
  type SessionTitle,
  titleTextOf,
} from "./records/mod.ts";
import {
  forEachCommittedLine,
  indexMatches,
  MESSAGES_FILE,
  META_FILE,
  readRoundIndex,
  readStorageMeta,
  type RoundEntry,
  type RoundIndex,
  type StorageMeta,
} from "./storage.ts";
import { SessionManager } from "./session_manager.ts";
import type { StoreContext } from "./lock.ts";
import { LEGACY_EXTENSION, legacySessionId, readLegacySession } from "./legacy.ts";
import { ARCHIVE_FILE, readArchiveMembership } from "./archive.ts";
import { COMPACTION_PREVIOUS, stagingSessionId } from "./compaction.ts";

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
   * Read only meta.json and index.json (plus the first user message for a fallback title): the
   * mode for session pickers. Default false: validate complete histories.
   */
  readonly fast?: boolean;
  /** Put pinned sessions first (most recently pinned first), then the rest. Default false. */
  readonly pinnedFirst?: boolean;
  /** How many sessions are read at once; default 32 in fast mode, 4 otherwise. */
  readonly concurrency?: number;
}

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

/** Newest activity first, then by id (descending), like the version-2 list. */
export function compareSessions(a: SessionInfo, b: SessionInfo): number {
  const ta = Date.parse(a.updatedAt);
  const tb = Date.parse(b.updatedAt);
  if (ta !== tb && Number.isFinite(ta) && Number.isFinite(tb)) return tb - ta;
  return b.updatedAt.localeCompare(a.updatedAt) || b.id.localeCompare(a.id);
}

/** Pinned sessions first (latest pin first), then `compareSessions`. */
export function comparePinnedFirst(a: SessionInfo, b: SessionInfo): number {
  if (a.pinned !== b.pinned) return a.pinned ? -1 : 1;
  if (a.pinned && a.pinnedAt !== b.pinnedAt) {
    return (b.pinnedAt ?? "").localeCompare(a.pinnedAt ?? "");
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
  /** Where to read it from. */
  readonly source:
    | { readonly kind: "directory"; readonly dir: string; readonly hasBackup: boolean }
    | { readonly kind: "legacy"; readonly file: string };
  /** The path a caller opens. */
  readonly path: string;
}

function isReportable(error: unknown): error is SessionError | FsError {
  return error instanceof SessionError || error instanceof FsError;
}

/** Runs `task` over `items` with at most `limit` in flight; results keep the input order. */
async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  task: (item: T) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await task(items[i] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  return results;
}

/**
 * The candidates of a collection listing, from its directory entries: one per session id, the
 * published directory before its legacy backup (see the module doc).
 */
async function candidatesOf(
  fs: FileSystem,
  collection: string,
  only: ReadonlySet<string> | undefined,
): Promise<{
  candidates: Candidate[];
  hasArchive: boolean;
}> {
  let entries;
  try {
    entries = await fs.readDir(collection);
  } catch (error) {
    if (error instanceof NotFound) return { candidates: [], hasArchive: false };
    throw error;
  }
  const dirs = new Set<string>();
  const legacy = new Set<string>();
  const staged = new Map<string, string[]>();
  let hasArchive = false;
  for (const entry of entries) {
    const name = entry.name;
    if (name === ARCHIVE_FILE && entry.kind === "file") hasArchive = true;
    else if (entry.kind === "directory" && stagingSessionId(name) !== undefined) {
      const id = stagingSessionId(name) as string;
      staged.set(id, [...(staged.get(id) ?? []), name]);
    } else if (entry.kind === "directory" && isSessionId(name)) dirs.add(name);
    else if (entry.kind === "file") {
      const id = legacySessionId(name);
      if (id !== undefined) legacy.add(id);
    }
  }
  const candidates: Candidate[] = [];
  const ids = [...new Set([...dirs, ...legacy, ...staged.keys()])].sort();
  for (const id of ids) {
    if (only !== undefined && !only.has(id)) continue;
    if (dirs.has(id)) {
      const dir = join(collection, id);
      candidates.push({
        id,
        source: { kind: "directory", dir, hasBackup: legacy.has(id) },
        path: join(dir, META_FILE),
      });
      continue;
    }
    const previous = await compactionPrevious(fs, collection, staged.get(id) ?? []);
    if (previous !== undefined) {
      candidates.push({
        id,
        source: { kind: "directory", dir: previous, hasBackup: legacy.has(id) },
        path: join(collection, id, META_FILE),
      });
    } else if (legacy.has(id)) {
      const file = join(collection, id + LEGACY_EXTENSION);
      candidates.push({ id, source: { kind: "legacy", file }, path: file });
    }
  }
  return { candidates, hasArchive };
}

/** The previous directory of an interrupted compaction (its session dir is missing), if any. */
async function compactionPrevious(
  fs: FileSystem,
  collection: string,
  stagingNames: readonly string[],
): Promise<string | undefined> {
  for (const name of stagingNames) {
    const previous = join(collection, name, COMPACTION_PREVIOUS);
    try {
      const info = await fs.lstat(join(previous, META_FILE));
      if (info.kind === "file") return previous;
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
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
  titles?: FallbackTitleCache,
): Promise<ListResult> {
  return await readCollection(context, collection, cwd, options, undefined, titles);
}

/**
 * Fallback titles derived by fast listings, keyed by session directory and committed generation.
 * The generation is the SHA-256 of the whole committed range, so an unchanged generation has an
 * unchanged first user message: a repeated listing (a picker refreshing) reads no message. Bounded;
 * the oldest entries go first. `SessionStore` keeps one per store.
 */
export class FallbackTitleCache {
  readonly #entries = new Map<string, SessionTitle | null>();
  readonly #limit: number;

  /** Creates a cache of at most `limit` entries (default 4096). */
  constructor(limit = 4096) {
    this.#limit = limit;
  }

  /** The cached title (`null`: none), or undefined when unknown. */
  get(dir: string, generation: string): SessionTitle | null | undefined {
    return this.#entries.get(`${generation}:${dir}`);
  }

  /** Remembers the fallback title (or its absence) of `dir` at `generation`. */
  set(dir: string, generation: string, title: SessionTitle | undefined): void {
    const key = `${generation}:${dir}`;
    this.#entries.delete(key);
    this.#entries.set(key, title ?? null);
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
  titles?: FallbackTitleCache,
): Promise<ListResult> {
  const fs = context.fs;
  const fast = options.fast === true;
  const { candidates, hasArchive } = await candidatesOf(fs, collection, only);
  const failures: ListFailure[] = [];
  let archived = new Set<string>();
  if (hasArchive && only === undefined) {
    try {
      archived = new Set(await readArchiveMembership(fs, collection));
    } catch (error) {
      if (!isReportable(error)) throw error;
      failures.push({ path: join(collection, ARCHIVE_FILE), id: undefined, error });
    }
  }
  const concurrency = options.concurrency ?? (fast ? 32 : 4);
  const read = await mapLimit(candidates, concurrency, async (candidate) => {
    try {
      return { candidate, summary: await summarize(context, candidate, fast, titles) };
    } catch (error) {
      if (error instanceof UnsupportedSessionError) return undefined;
      if (!isReportable(error)) throw error;
      return { candidate, error };
    }
  });
  const sessions: SessionInfo[] = [];
  for (const item of read) {
    if (item === undefined) continue;
    if ("error" in item) {
      failures.push({ path: item.candidate.path, id: item.candidate.id, error: item.error });
      continue;
    }
    const { candidate, summary } = item;
    if (summary === undefined) continue;
    if (cwd !== undefined && summary.header.cwd !== cwd) continue;
    sessions.push(infoOf(candidate, summary, archived.has(candidate.id)));
  }
  sessions.sort(options.pinnedFirst === true ? comparePinnedFirst : compareSessions);
  return { sessions, failures };
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
    storage: candidate.source.kind,
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
  titles: FallbackTitleCache | undefined,
): Promise<Summary | undefined> {
  const source = candidate.source;
  if (source.kind === "legacy") {
    return await readLegacySession(context.fs, source.file, { validate: !fast });
  }
  try {
    return fast
      ? await fastSummary(context, source.dir, titles)
      : await fullSummary(context, source.dir);
  } catch (error) {
    // Only a missing meta.json itself means "never committed"; anything else is a failure.
    if (!(error instanceof NotFound) || error.path !== join(source.dir, META_FILE)) throw error;
    if (!source.hasBackup) return undefined;
    throw new SessionNotFoundError(
      "Published session directory has no meta.json; its legacy backup is not used in its place",
      { file: join(source.dir, META_FILE), cause: error },
    );
  }
}

async function fullSummary(context: StoreContext, dir: string): Promise<Summary> {
  const manager = await SessionManager.open({
    context,
    dir,
    collectionDir: dirname(dir),
    readOnly: true,
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
const USER_ROLE = '"role":"user"';

/** The fast summary of a version-3 directory: meta.json, index.json and what they point to. */
export async function fastSummary(
  context: StoreContext,
  dir: string,
  titles?: FallbackTitleCache,
): Promise<Summary> {
  const fs = context.fs;
  // Both files are read at once; a missing or unusable index is just not used.
  const [meta, index] = await Promise.all([
    readStorageMeta(fs, dir),
    readRoundIndex(fs, dir),
  ]);
  if (meta.messageCount === 0) {
    return { header: meta.header, messageCount: 0, userMessageCount: 0, fallbackTitle: undefined };
  }
  const cached = meta.header.title ? null : titles?.get(dir, meta.generation);
  const needTitle = !meta.header.title && cached === undefined;
  const summary = await fastCounts(context, dir, meta, index, needTitle);
  if (cached !== undefined && cached !== null) return { ...summary, fallbackTitle: cached };
  if (needTitle) titles?.set(dir, meta.generation, summary.fallbackTitle);
  return summary;
}

/** Counts (and, when asked, the fallback title) from the index, its tail, or a full scan. */
async function fastCounts(
  context: StoreContext,
  dir: string,
  meta: StorageMeta,
  index: RoundIndex | undefined,
  needTitle: boolean,
): Promise<Summary> {
  const fs = context.fs;
  if (index !== undefined && indexMatches(index, meta)) {
    const title = needTitle ? await titleFromRounds(fs, dir, meta, index.rounds) : undefined;
    return {
      header: meta.header,
      messageCount: meta.messageCount,
      userMessageCount: index.rounds.length,
      fallbackTitle: title,
    };
  }
  if (index !== undefined && coversPrefix(index, meta)) {
    const tail = await scanTail(fs, dir, meta, index);
    if (tail !== undefined) {
      let title: SessionTitle | undefined;
      if (needTitle) {
        title = await titleFromRounds(fs, dir, meta, index.rounds);
        title ??= tail.title;
      }
      return {
        header: meta.header,
        messageCount: meta.messageCount,
        userMessageCount: index.rounds.length + tail.users,
        fallbackTitle: title,
      };
    }
  }
  return await scanCommitted(context, dir, meta, needTitle);
}

/** True when `index` describes an earlier, shorter state of the same committed generation chain. */
function coversPrefix(index: RoundIndex, meta: StorageMeta): boolean {
  if (
    index.start !== meta.start || index.bytes > meta.bytes ||
    index.messageCount > meta.messageCount || index.bytes === 0
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

/** Reads the unindexed tail; undefined when it does not line up with the index. */
async function scanTail(
  fs: FileSystem,
  dir: string,
  meta: StorageMeta,
  index: RoundIndex,
): Promise<{ users: number; title: SessionTitle | undefined } | undefined> {
  const handle = await fs.open(join(dir, MESSAGES_FILE));
  let bytes: Uint8Array;
  try {
    // One byte before the tail: the indexed prefix must end with a newline.
    bytes = await handle.read(meta.start + index.bytes - 1, meta.bytes - index.bytes + 1);
  } finally {
    await handle.close();
  }
  if (bytes.length !== meta.bytes - index.bytes + 1 || bytes[0] !== 10) return undefined;
  const text = decoder.decode(bytes.subarray(1));
  const lines = text.split("\n");
  if (lines.pop() !== "" || lines.length !== meta.messageCount - index.messageCount) {
    return undefined;
  }
  let users = 0;
  let title: SessionTitle | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    // Committed lines are `JSON.stringify` output: a user message contains this exact text (a
    // quote inside a string value is escaped), so other lines need no parse.
    if (!line.includes(USER_ROLE)) continue;
    let message: Message;
    try {
      message = JSON.parse(line) as Message;
    } catch {
      return undefined;
    }
    if (message?.role !== "user") continue;
    users++;
    title ??= titleOf(message, index.messageCount + i);
  }
  return { users, title };
}

function titleOf(message: Message, index: number): SessionTitle | undefined {
  const text = titleTextOf(message);
  if (text === undefined) return undefined;
  // The fallback title is empty exactly when the text normalizes to nothing (not eligible).
  const title = fallbackTitleOf({ index, text });
  return title.text === "" ? undefined : title;
}

/** Reads the rounds' user messages in order until one yields a fallback title. */
async function titleFromRounds(
  fs: FileSystem,
  dir: string,
  meta: StorageMeta,
  rounds: readonly RoundEntry[],
): Promise<SessionTitle | undefined> {
  if (rounds.length === 0) return undefined;
  const file = join(dir, MESSAGES_FILE);
  const handle = await fs.open(file);
  try {
    for (const round of rounds) {
      const line = await readLineAt(handle, meta, round.byteOffset, file);
      let message: Message;
      try {
        message = JSON.parse(line) as Message;
      } catch (error) {
        throw new CorruptSessionError("Committed user message is not valid JSON", {
          file,
          offset: meta.start + round.byteOffset,
          messageIndex: round.messageIndex,
          cause: error,
        });
      }
      if (message?.role !== "user") {
        throw new CorruptSessionError("The round index does not point at a user message", {
          file,
          offset: meta.start + round.byteOffset,
          messageIndex: round.messageIndex,
        });
      }
      const title = titleOf(message, round.messageIndex);
      if (title !== undefined) return title;
    }
    return undefined;
  } finally {
    await handle.close();
  }
}

/** Reads the committed line starting at range-relative `offset`. */
async function readLineAt(
  handle: FileHandle,
  meta: StorageMeta,
  offset: number,
  file: string,
): Promise<string> {
  const end = meta.bytes;
  let size = 1024;
  const pieces: Uint8Array[] = [];
  let position = offset;
  for (;;) {
    const length = Math.min(size, end - position);
    if (length <= 0) {
      throw new CorruptSessionError("Committed user message has no line end", {
        file,
        offset: meta.start + offset,
      });
    }
    const chunk = await handle.read(meta.start + position, length);
    if (chunk.length !== length) {
      throw new CorruptSessionError("Message log ended inside its committed range", {
        file,
        offset: meta.start + position + chunk.length,
      });
    }
    const newline = chunk.indexOf(10);
    if (newline >= 0) {
      pieces.push(chunk.subarray(0, newline));
      break;
    }
    pieces.push(chunk);
    position += chunk.length;
    size = Math.min(size * 4, 4 * 1024 * 1024);
  }
  if (pieces.length === 1) return decoder.decode(pieces[0]);
  const total = pieces.reduce((sum, piece) => sum + piece.length, 0);
  const out = new Uint8Array(total);
  let at = 0;
  for (const piece of pieces) {
    out.set(piece, at);
    at += piece.length;
  }
  return decoder.decode(out);
}

/** A full scan of the committed range (checksum verified) for counts and the fallback title. */
async function scanCommitted(
  context: StoreContext,
  dir: string,
  meta: StorageMeta,
  needTitle: boolean,
): Promise<Summary> {
  let users = 0;
  let title: SessionTitle | undefined;
  let bad: { index: number; offset: number; error: unknown } | undefined;
  const file = join(dir, MESSAGES_FILE);
  await forEachCommittedLine(context.fs, dir, meta, { sha256: context.sha256 }, (line) => {
    if (bad !== undefined) return;
    let message: Message;
    try {
      message = JSON.parse(decoder.decode(line.bytes)) as Message;
    } catch (error) {
      bad = { index: line.index, offset: line.offset, error };
      return;
    }
    if (message?.role !== "user") return;
    users++;
    if (title === undefined && needTitle) title = titleOf(message, line.index);
  });
  if (bad !== undefined) {
    const failure = bad as { index: number; offset: number; error: unknown };
    throw new CorruptSessionError("Committed message line is not valid JSON", {
      file,
      offset: meta.start + failure.offset,
      messageIndex: failure.index,
      cause: failure.error,
    });
  }
  return {
    header: meta.header,
    messageCount: meta.messageCount,
    userMessageCount: users,
    fallbackTitle: title,
  };
}
