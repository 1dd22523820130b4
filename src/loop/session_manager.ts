/**
 * `SessionManager`: one writable (or read-only) Loop session. It owns the commit protocol of the
 * version-3 directory:
 *
 * 1. bytes past the committed range (a crash tail) are truncated;
 * 2. new message lines are appended and fsynced (never rewriting earlier bytes); a replacement or
 *    truncation of history appends a complete new generation instead;
 * 3. meta.json is published by atomic replace, and only then does the commit resolve;
 * 4. index.json is published after that, best effort: a failure never rolls back the commit.
 *
 * Steps 2 and 3 overlap where nothing depends on the order: the new meta.json's temp file is
 * created while the history is checked, and written and fsynced while the log write and its
 * fsync run. Its rename, the commit point, waits for both. A crash before the rename leaves an
 * uncommitted log tail and an unreachable temp file, as the sequential order would.
 *
 * Every history and metadata write goes through one serial queue.
 *
 * @module
 */
import type { FileHandle, FileInfo, FileSystem } from "../port/fs.ts";
import { joinBytes } from "../port/bytes.ts";
import { AlreadyExists, NotADirectory, NotFound } from "../port/errors.ts";
import type { Sha256, Sha256Factory } from "../port/sha256.ts";
import {
  atomicReplace,
  beginReplace,
  type Durability,
  ensurePrivateDir,
  forgetDurable,
  type PendingReplace,
  PRIVATE_FILE_MODE,
  type StagedReplace,
  stageReplace,
} from "../port/durable.ts";
import { join } from "../port/path.ts";
import { promiseOf } from "../port/limit.ts";
import {
  CorruptSessionError,
  InvalidArgumentError,
  PendingSaveError,
  preview,
  SessionBusyError,
  SessionError,
  SessionFormatError,
  SessionNotFoundError,
  StaleRevisionError,
  UnsupportedSessionError,
} from "./errors.ts";
import {
  type CompactionCheckpoint,
  eligibleTitleOf,
  fallbackTitle,
  isPermissionPreset,
  type Message,
  type MessageRole,
  MessageValidator,
  type ModelRef,
  parseModelRef,
  parseSessionHeader,
  parseSessionTitle,
  type PermissionPreset,
  type PromptTiming,
  type RuntimeContextSnapshot,
  type SessionHeader,
  type SessionTitle,
  type SystemPromptCheckpoint,
  validateCompactions,
  validatePromptTimings,
  validateRuntimeContexts,
  validateSessionMetadata,
  validateSystemPromptCheckpoints,
} from "./records/mod.ts";
import {
  checkJsonData,
  checkNesting,
  INVALID_MESSAGE,
  invalidMessageJson,
  jsonNestsDeeper,
  MAX_HEADER_NESTING,
  MAX_MESSAGE_NESTING,
  refuseDeepMessage,
} from "./records/_validation.ts";
import {
  checkSessionCwd,
  closeWhenOpened,
  decodeLine,
  type EncodedArrays,
  encodeRoundIndex,
  encodeStorageMetaReusing,
  forEachCommittedLine,
  INDEX_FILE,
  INDEX_FORMAT,
  INDEX_VERSION,
  indexMatches,
  MESSAGES_FILE,
  META_FILE,
  openSessionFile,
  readSizedRoundIndex,
  readStorageMeta,
  recordsTitle,
  refuseIrregularFile,
  type RoundEntry,
  type RoundIndex,
  sameCommittedRange,
  shortReadError,
  type SizedRoundIndex,
  STORAGE_FORMAT,
  STORAGE_VERSION,
  type StorageMeta,
} from "./storage.ts";
import { SerialQueue } from "./serial_queue.ts";
import { LineWriter } from "./line_writer.ts";
import { messageJson } from "./records/_json_text.ts";

/** The number of user rounds in the default history page. */
export const DEFAULT_PAGE_ROUNDS = 3;
/** A commit republishes index.json once this many rounds are not covered by it... */
const INDEX_LAG_ROUNDS = 8;
/** ...or once this many committed bytes are not covered by it (bounds a reader's tail scan). */
const INDEX_LAG_BYTES = 1024 * 1024;
/**
 * The bytes first reserved for the lines a save serializes: about an assistant message's size
 * per message, so a few appended messages are encoded without a copy, and at most 4 MiB, past
 * which the buffer doubles as needed (a long generation is not reserved at 2 KB a message).
 */
function lineCapacity(messages: number): number {
  return Math.min(messages * 2048, 4 * 1024 * 1024);
}

/** Optional complete metadata arrays a commit may replace. */
export interface CommitContext {
  /** Replaces the stored compaction checkpoints when given. */
  readonly compactions?: readonly CompactionCheckpoint[];
  /** Replaces the stored system prompt checkpoints when given. */
  readonly systemPromptCheckpoints?: readonly SystemPromptCheckpoint[];
}

/** A page of history returned by `readHistory`. */
export interface HistoryPage {
  /** The messages of the page, in order. */
  readonly messages: Message[];
  /** The global index of the first message of the page. */
  readonly start: number;
  /** The global index one past the last message of the page. */
  readonly end: number;
  /** The number of messages in the whole history. */
  readonly total: number;
  /** The committed generation the page was read from (`""` for unsaved in-memory history). */
  readonly revision: string;
}

/** Everything a manager needs from its store. */
export interface SessionContext {
  /** The filesystem. */
  readonly fs: FileSystem;
  /** The SHA-256 factory. */
  readonly sha256: Sha256Factory;
  /** The clock, in Unix milliseconds. */
  readonly now: () => number;
  /** The durability of writes. */
  readonly durability: Durability;
}

/**
 * The refusal of a session collection path that is not a directory: a symlink (nothing is
 * written through it, whatever it points to) or anything else. `cause` is the error that found it.
 */
export function collectionNotADirectory(collection: string, cause?: unknown): SessionFormatError {
  return new SessionFormatError(
    "Session collection path is not a directory (symlinks are refused)",
    cause === undefined ? { file: collection } : { file: collection, cause },
  );
}

/**
 * The refusal of a session directory path that is not a directory (a symlink is never read or
 * written through). `cause` is the error that found it.
 */
export function sessionNotADirectory(dir: string, cause?: unknown): SessionFormatError {
  return new SessionFormatError(
    "Session path is not a directory (symlinks are refused)",
    cause === undefined ? { file: dir } : { file: dir, cause },
  );
}

/**
 * `ensurePrivateDir`, with a link (or a file) at `dir` itself refused by `refusal` instead of the
 * bare `AlreadyExists` of the mkdir it stands in for. An ancestor that is no directory keeps its
 * own error (a linked agent directory or `sessions/` is followed, as a directory).
 */
async function ensureOwnDir(
  fs: FileSystem,
  dir: string,
  durability: Durability,
  refusal: (dir: string, cause: unknown) => SessionFormatError,
): Promise<boolean> {
  try {
    return await ensurePrivateDir(fs, dir, durability);
  } catch (error) {
    if (error instanceof AlreadyExists && error.path === dir) throw refusal(dir, error);
    throw error;
  }
}

/** `ensureOwnDir` for a session collection, refused with `collectionNotADirectory`. */
export function ensureCollectionDir(
  fs: FileSystem,
  collection: string,
  durability: Durability,
): Promise<boolean> {
  return ensureOwnDir(fs, collection, durability, collectionNotADirectory);
}

/**
 * Checks a session directory and its files before they are read: the directory, meta.json and
 * messages.jsonl in one round trip (lstat opens nothing, so asking about the files before the
 * directory is known not to be a link reads nothing through one), judged in that order. A
 * directory that is not one (a symlink) is a `SessionFormatError`, so is a meta.json or
 * messages.jsonl that is not a regular file (see `isRegularFile`); a missing directory or
 * meta.json rejects with the `NotFound` of meta.json. A missing messages.jsonl is left to the
 * reader (it is fine while meta.json commits no bytes). A messages.jsonl refused beside a
 * meta.json of an unsupported format or version is not judged: that meta.json's
 * `UnsupportedSessionError` is thrown instead, as when the log is a regular file.
 */
export async function checkSessionFiles(fs: FileSystem, dir: string): Promise<void> {
  const metaFile = join(dir, META_FILE);
  const messagesFile = join(dir, MESSAGES_FILE);
  const [dirInfo, metaInfo, logInfo] = await Promise.allSettled([
    promiseOf(() => fs.lstat(dir)),
    promiseOf(() => fs.lstat(metaFile)),
    promiseOf(() => fs.lstat(messagesFile)),
  ]);
  if (dirInfo.status === "fulfilled" && dirInfo.value.kind !== "directory") {
    throw sessionNotADirectory(dir);
  }
  // A missing directory shows as a missing meta.json below.
  if (dirInfo.status === "rejected" && !(dirInfo.reason instanceof NotFound)) {
    throw dirInfo.reason;
  }
  if (metaInfo.status === "rejected") throw metaInfo.reason;
  refuseIrregularFile(metaInfo.value.kind, metaFile);
  try {
    isRegularFileInfo(logInfo, messagesFile);
  } catch (error) {
    // A session of an unsupported format or version is that whatever its log is: discovery
    // skips it, and an open refuses it as unsupported, without looking at its log.
    await refuseUnsupported(fs, dir);
    throw error;
  }
}

/**
 * Throws the `UnsupportedSessionError` of `dir`'s meta.json (a regular file, just checked) when
 * it is of an unsupported format or version; returns otherwise, also when it cannot be read or
 * is invalid (the caller reports what it found first).
 */
async function refuseUnsupported(fs: FileSystem, dir: string): Promise<void> {
  try {
    await readStorageMeta(fs, dir, true);
  } catch (error) {
    if (error instanceof UnsupportedSessionError) throw error;
  }
}

/**
 * `SessionManager.open` of a directory `checkSessionFiles` has just checked (the store checks
 * before it takes the writer lock, and does not check twice), or, with `checking`, is checking
 * while it is read (see `SessionManager.open`).
 */
export function openCheckedSession(
  init: SessionManagerInit,
  checking?: Promise<void>,
): Promise<SessionManager> {
  return openChecked(init, checking);
}

/**
 * Refuses meta.json `file` of a session directory named `id` when its header holds another id
 * (a copy of another session's meta.json): a `SessionFormatError` naming `header.id`.
 */
export function checkMetaId(meta: StorageMeta, id: string, file: string): void {
  if (meta.header.id !== id) {
    throw new SessionFormatError("Session id does not match its directory name", {
      file,
      path: "header.id",
      value: meta.header.id,
    });
  }
}

let openChecked: (init: SessionManagerInit, checking?: Promise<void>) => Promise<SessionManager>;

/**
 * The per-message arrays of a history. They are append-only and shared by successive committed
 * states: a state sees only its first `count` entries (and `roundCount` rounds). A failed
 * attempt may leave entries past a state's counts; the next attempt cuts them off first.
 */
interface HistoryArrays {
  /** The messages. */
  readonly messages: Message[];
  /** The role of each message. */
  readonly roles: MessageRole[];
  /** Byte offset of each message relative to the range start; entry `count` is the range length. */
  readonly offsets: number[];
  /** The user rounds. */
  readonly rounds: RoundEntry[];
}

/** What the manager knows about the committed state. */
interface Committed {
  /** The published meta.json, or undefined while the session is an unsaved draft. */
  readonly meta: StorageMeta | undefined;
  /** The header (also present for drafts). */
  readonly header: SessionHeader;
  /** The history arrays (see `HistoryArrays`). */
  readonly arrays: HistoryArrays;
  /** The number of messages of this state. */
  readonly count: number;
  /** The number of user rounds of this state. */
  readonly roundCount: number;
  /** The SHA-256 state over the committed bytes. */
  readonly hash: Sha256;
  /** Pairing state after the committed messages. */
  readonly validator: MessageValidator;
  /** The serialized line (without newline) of the last message, to compare it by value. */
  readonly lastLine: string | undefined;
  /**
   * The fallback title of the saved messages (null: none is eligible), derived from what was
   * read or written, never from the caller's objects later: index.json records it.
   */
  readonly title: SessionTitle | null;
}

/** A save that failed and waits for `flush()`. */
interface PendingCommit {
  /**
   * The history the save leads to: the saved messages it kept, then copies of the ones it
   * serialized (parsed back from their lines). The getters hand these objects out.
   */
  readonly messages: readonly Message[];
  /**
   * The lines the save serialized, of the messages from `first` on: `flush()` parses them again,
   * so a copy changed in place through `messages` or a page is not what it writes.
   */
  readonly lines: Uint8Array;
  /** The index of the first message of `lines`. */
  readonly first: number;
  /**
   * For a save that appends to the saved history (or changes only metadata), the number of saved
   * messages it appends to: `flush()` appends the rest again, without looking at the saved ones
   * (the last of which the host may have finished in place since). Undefined for a save that
   * writes a whole history, whose messages are all copies.
   */
  readonly appendFrom: number | undefined;
  readonly runtimeContexts: readonly RuntimeContextSnapshot[] | undefined;
  readonly promptTimings: readonly PromptTiming[] | undefined;
  readonly context: CommitContext | undefined;
  readonly updatedAt: string;
  readonly unread: boolean;
}

/** A commit after validation, ready to write. */
interface PreparedCommit {
  readonly kind: "append" | "replace" | "metadata" | "draft";
  readonly runtimeContexts: readonly RuntimeContextSnapshot[] | undefined;
  readonly promptTimings: readonly PromptTiming[] | undefined;
  readonly context: CommitContext | undefined;
  readonly updatedAt: string;
  readonly unread: boolean;
  /** The bytes to append to the log. */
  readonly bytes: Uint8Array;
  /** The history of the new state (arrays, counts, pairing state, last line). */
  readonly arrays: HistoryArrays;
  readonly count: number;
  readonly roundCount: number;
  readonly validator: MessageValidator;
  readonly lastLine: string | undefined;
  /** The fallback title of the new state's messages, derived from their serialized lines. */
  readonly title: SessionTitle | null;
  /** The index of the first message this attempt serialized (the ones before it were saved). */
  readonly first: number;
  /**
   * True for `flush()`'s retry of a pending save: its `updatedAt` is the time of the save it
   * retries, which must not move the header's back past a later write (a model set meanwhile).
   * Any other save sets `updatedAt` to its own time, as the format's rules say, even when the
   * stored one is later (a clock stepped back).
   */
  readonly retry?: boolean;
}

/**
 * The state a commit is prepared on: the committed one, or the state a save queued before it in
 * the same batch leads to (whose hash is not known until the batch is written, and not needed).
 * `written` marks a state on a session not saved yet that an earlier save of the batch writes (it
 * creates the session's files): the saves after it are prepared on it as on a saved session.
 */
type HistoryBase = Omit<Committed, "hash"> & { readonly written?: boolean };

/** True when `base` is saved, or written by an earlier save of its batch. */
function isSaved(base: HistoryBase): boolean {
  return base.meta !== undefined || base.written === true;
}

/** A `commit()` or `append()` waiting in a `SaveBatch`. */
interface QueuedSave {
  readonly operation: "commit" | "append";
  /** Validates and serializes the save on `base`, the state the saves before it lead to. */
  readonly prepare: (base: HistoryBase) => PreparedCommit;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Saves queued back to back in the write queue, with no other call between them: written
 * together, with one log write and one meta.json publish (no log write when none of them adds
 * messages; nothing at all while the session is a draft without a user round).
 */
interface SaveBatch {
  readonly saves: QueuedSave[];
  /** The meta.json replace begun when the first save was called (the queue was idle then). */
  readonly replace: PendingReplace | undefined;
}

const writers = new WeakMap<FileSystem, Map<string, SessionManager>>();

function claimWriter(fs: FileSystem, dir: string, manager: SessionManager): void {
  let open = writers.get(fs);
  if (open === undefined) {
    open = new Map();
    writers.set(fs, open);
  }
  if (open.has(dir)) {
    throw new SessionBusyError(
      `Session is already open for writing in this process; close() the other SessionManager first`,
      { file: join(dir, META_FILE) },
    );
  }
  open.set(dir, manager);
}

function releaseWriter(fs: FileSystem, dir: string, manager: SessionManager): void {
  const open = writers.get(fs);
  if (open?.get(dir) === manager) open.delete(dir);
}

function clone<T>(value: T): T {
  return value === undefined ? value : structuredClone(value);
}

/** The user rounds among `roles[from..]`, with their byte offsets. */
function roundsOf(
  roles: readonly MessageRole[],
  offsets: readonly number[],
  from: number,
): RoundEntry[] {
  const rounds: RoundEntry[] = [];
  for (let i = from; i < roles.length; i++) {
    if (roles[i] === "user") rounds.push({ messageIndex: i, byteOffset: offsets[i] ?? 0 });
  }
  return rounds;
}

/** The options `SessionManager` is created with; see `SessionStore`. */
export interface SessionManagerInit {
  /** The store context. */
  readonly context: SessionContext;
  /** The session directory `<collection>/<id>`. */
  readonly dir: string;
  /** The collection directory (what `getSessionDir()` returns). */
  readonly collectionDir: string;
  /** Open without claiming the writer slot; every write then rejects. */
  readonly readOnly?: boolean;
  /**
   * The session id the directory's name says (`dir` may be a copy under another name): a
   * meta.json whose `header.id` differs is refused as soon as it is read, with the header's
   * fields (a `SessionFormatError` naming meta.json and `header.id`), before the log is judged.
   */
  readonly id?: string;
  /** Called once by `close()` after the manager released its resources (e.g. a writer lock). */
  readonly onClose?: () => Promise<void>;
  /**
   * Called before the first write, once the session directory exists (e.g. to take a writer
   * lock inside it); a rejection fails that write, and the next write calls it again.
   */
  readonly beforeFirstWrite?: () => Promise<void>;
}

/**
 * One Loop session. Create it with `SessionStore.create(cwd)` or `SessionStore.open(path)`.
 * Writes resolve only once durable; reads of committed history never see uncommitted bytes.
 */
export class SessionManager {
  readonly #fs: FileSystem;
  readonly #context: SessionContext;
  readonly #dir: string;
  /** `meta.json` in the session directory. */
  readonly #metaFile: string;
  /** `messages.jsonl` in the session directory. */
  readonly #messagesFile: string;
  readonly #collectionDir: string;
  readonly #readOnly: boolean;
  readonly #onClose: (() => Promise<void>) | undefined;
  #beforeFirstWrite: (() => Promise<void>) | undefined;
  readonly #queue = new SerialQueue();
  /**
   * The meta.json bytes of the header's arrays, reused while the header keeps the same array (its
   * arrays are the manager's own copies, never changed; see `ownMetadata`).
   */
  readonly #encodedArrays: EncodedArrays = new WeakMap();
  /** The batch that is the last task of the write queue and has not started: saves join it. */
  #openBatch: SaveBatch | undefined;
  #committed: Committed;
  #pending: PendingCommit | undefined;
  #log: FileHandle | undefined;
  /**
   * The log opened for page reads (after checking it is a regular file), kept until `close()`:
   * later pages read the same file whatever is planted at its path meanwhile.
   */
  #reader: Promise<FileHandle> | undefined;
  /** The messages.jsonl size, when known exactly (after our own successful writes). */
  #logSize: number | undefined;
  /**
   * What index.json on disk is known to cover: a prefix (same generation start) of the committed
   * history. Undefined when unknown or unusable.
   */
  #indexed: IndexCoverage | undefined;
  #permissionsEnforced = false;
  /** True once this manager published anything (close() then brings index.json up to date). */
  #wrote = false;
  #closed = false;
  /** A state whose publication failed midway: it may or may not be on disk. */
  #attempt: Committed | undefined;
  /** True when `#attempt` changed only the header (a pin, title, model or read receipt). */
  #attemptIsMetadata = false;

  private constructor(init: SessionManagerInit, committed: Committed) {
    this.#fs = init.context.fs;
    this.#context = init.context;
    this.#dir = init.dir;
    this.#metaFile = join(init.dir, META_FILE);
    this.#messagesFile = join(init.dir, MESSAGES_FILE);
    this.#collectionDir = init.collectionDir;
    this.#readOnly = init.readOnly === true;
    this.#onClose = init.onClose;
    this.#beforeFirstWrite = init.beforeFirstWrite;
    this.#committed = committed;
    if (!this.#readOnly) claimWriter(this.#fs, this.#dir, this);
  }

  /**
   * Creates an unsaved draft session with `header`; nothing is written until the first user
   * message. The header is copied, and kept as a load parses it (without an obsolete
   * `runTimings`, a missing `unread` read as false): the caller may change its object and arrays
   * afterwards.
   */
  static createDraft(init: SessionManagerInit, header: SessionHeader): SessionManager {
    // Checked as a load checks it, so the first save never writes what an open would refuse, and
    // for a value JSON cannot write (a BigInt), which would leave that save pending forever.
    const file = join(init.dir, META_FILE);
    const copy = copyOf(header, "header", file);
    checkJsonData(copy, MAX_HEADER_NESTING, "Invalid session metadata", { file }, "header");
    return new SessionManager(init, {
      meta: undefined,
      // As parsed, as a load keeps it: an obsolete `runTimings` dropped (never written), a
      // missing `unread` read as false.
      header: parseSessionHeader(copy, { file }),
      arrays: { messages: [], roles: [], offsets: [0], rounds: [] },
      count: 0,
      roundCount: 0,
      hash: init.context.sha256(),
      validator: new MessageValidator({ file: join(init.dir, MESSAGES_FILE) }),
      lastLine: undefined,
      title: null,
    });
  }

  /**
   * Opens a version-3 session directory with full validation: meta.json, the checksum of the
   * committed range, every message and every metadata rule, and the recorded cwd. Reads only.
   * A session directory, meta.json or messages.jsonl that is a symlink (or of the wrong kind) is
   * refused with `SessionFormatError`; a missing directory or meta.json rejects with the
   * `NotFound` of meta.json. Where the port has `readFileNoFollow` and `openNoFollow`, meta.json
   * is read and the log opened while the directory and its files are checked (one round trip
   * instead of two): neither call follows a final link or waits on a FIFO (a file another process
   * holds a lease on is read as a port without them reads it, once an `lstat` saw a regular file
   * there), nothing read is used before the check passes, and the check's error is the one
   * reported when it fails.
   */
  static async open(init: SessionManagerInit): Promise<SessionManager> {
    return await SessionManager.#open(init, checkSessionFiles(init.context.fs, init.dir));
  }

  static {
    openChecked = (init, checking) => SessionManager.#open(init, checking);
  }

  /**
   * `open` once `checkSessionFiles` accepted the directory and its files, or while it checks them
   * (`checking`): then meta.json and the log are read beside the check only where the port reads
   * and opens without following a link, and nothing is judged before the check passed.
   */
  static async #open(init: SessionManagerInit, checking?: Promise<void>): Promise<SessionManager> {
    const { fs, sha256 } = init.context;
    const metaFile = join(init.dir, META_FILE);
    const messagesFile = join(init.dir, MESSAGES_FILE);
    if (
      checking !== undefined &&
      (fs.readFileNoFollow === undefined || fs.openNoFollow === undefined)
    ) {
      // Read only what was seen to be a regular file: no call here refuses a link by itself.
      await checking;
      checking = undefined;
    }
    // The log (checked to be a regular file or missing, before or while it opens) opens while
    // meta.json is read; its outcome is judged only once meta.json says bytes are committed.
    // Where the port can, the open checks the kind itself, so a link swapped in since (or while)
    // the check looked is not followed.
    const opening = fs.openNoFollow !== undefined
      ? openSessionFile(fs, messagesFile).then((log) => log.handle)
      : fs.open(messagesFile);
    opening.catch(() => undefined);
    // The version-2 order of checks (the first failure wins): the header's fields, the cwd, every
    // message line, then the metadata arrays against the history. So meta.json's header is read
    // without its arrays, which `validateSessionMetadata` checks below.
    // checkSessionFiles saw a file there, or is looking while the no-follow read reads it.
    const metaRead = readStorageMeta(fs, init.dir, true, true);
    metaRead.catch(() => undefined); // judged below, after the check
    let meta: StorageMeta;
    try {
      if (checking !== undefined) await checking;
      meta = await metaRead;
      if (init.id !== undefined) checkMetaId(meta, init.id, metaFile);
    } catch (error) {
      closeWhenOpened(opening);
      throw error;
    }
    // The cwd check runs beside the log read; its outcome is judged before the log's.
    const cwdChecked = checkSessionCwd(fs, meta.header.cwd, metaFile);
    cwdChecked.catch(() => {});
    // A writer reads index.json beside the log too (never through a link, never past the size an
    // index of the committed counts can have), to adopt it when it covers a prefix of what the
    // open reads: then neither the first save, a page read nor close() rewrites an index that is
    // current (a whole rewrite, ~1.5 MB at 100,000 messages). Unreadable is unknown, as before.
    const indexRead = init.readOnly === true || meta.messageCount === 0
      ? undefined
      : readSizedRoundIndex(fs, init.dir, false, meta).catch(() => undefined);
    const messages: Message[] = [];
    const offsets: number[] = [];
    const roles: MessageRole[] = [];
    const validator = new MessageValidator({ file: messagesFile });
    let lastLine: string | undefined;
    let firstError: { error: unknown; offset: number; index: number } | undefined;
    // A read-only manager keeps the log it verified: its pages read that file, even after a
    // compaction elsewhere publishes a new log (a writer's lock keeps compaction away instead).
    const keepOpen = init.readOnly === true;
    const scanned = forEachCommittedLine(fs, init.dir, meta, {
      sha256,
      opening,
      keepOpen,
    }, (line) => {
      if (firstError !== undefined) return;
      try {
        const text = line.text;
        let message: unknown;
        try {
          message = JSON.parse(text);
        } catch (error) {
          throw invalidMessageJson(error, messagesFile, line.index);
        }
        validator.push(message, line.index);
        // As a save refuses it: a message this deep could not be copied or written on every
        // runtime (judged without recursion; a short line cannot nest that deep).
        if (jsonNestsDeeper(message, text, MAX_MESSAGE_NESTING)) {
          refuseDeepMessage(message, messagesFile, `messages[${line.index}]`);
        }
        messages.push(message as Message);
        roles.push((message as Message).role);
        offsets.push(line.offset);
        lastLine = text;
      } catch (error) {
        firstError = { error, offset: meta.start + line.offset, index: line.index };
      }
    }).catch((error: unknown) => {
      if (
        error instanceof CorruptSessionError && firstError !== undefined &&
        error.offset === undefined
      ) {
        throw new CorruptSessionError(
          `${
            error.message.replace(/ \(in '.*'\)$/, "")
          }; the first unreadable message is #${firstError.index} at byte ${firstError.offset}`,
          {
            file: error.file,
            offset: firstError.offset,
            messageIndex: firstError.index,
            cause: error,
          },
        );
      }
      throw error;
    });
    const [scan, cwd] = await Promise.allSettled([scanned, cwdChecked]);
    if (scan.status === "rejected" || cwd.status === "rejected") {
      if (scan.status === "fulfilled") await scan.value.handle?.close().catch(() => undefined);
      throw cwd.status === "rejected" ? cwd.reason : (scan as PromiseRejectedResult).reason;
    }
    const summary = scan.value;
    try {
      if (firstError !== undefined) throw firstError.error;
      validator.finish();
      validateSessionMetadata(meta.header, roles, { file: metaFile });
    } catch (error) {
      await summary.handle?.close().catch(() => undefined);
      throw error;
    }
    offsets.push(meta.bytes);
    const rounds = roundsOf(roles, offsets, 0);
    // Compare the last message with its canonical serialization, whatever bytes a legacy writer
    // or a migration left: an unchanged message must not look edited. Every message read is
    // within `MAX_MESSAGE_NESTING`, which JSON writes on every runtime; the line read stands in
    // should that ever fail.
    if (messages.length > 0) lastLine = canonicalLine(messages[messages.length - 1], lastLine);
    const manager = new SessionManager(init, {
      meta,
      header: meta.header,
      arrays: { messages, roles, offsets, rounds },
      count: messages.length,
      roundCount: rounds.length,
      hash: summary.hash,
      validator,
      lastLine,
      // Before the caller holds the message objects: the title of what was read.
      title: fallbackTitle(messages) ?? null,
    });
    if (summary.handle !== undefined) manager.#reader = Promise.resolve(summary.handle);
    const onDisk = await indexRead;
    if (onDisk !== undefined) manager.#adoptIndex(onDisk, meta);
    return manager;
  }

  // ---------------------------------------------------------------------------------------------
  // Accessors

  /** The session id (a UUID). */
  get id(): string {
    return this.#committed.header.id;
  }

  /**
   * The current history, including a pending (unsaved) snapshot. A copy of the array holding the
   * manager's own message objects (no copy of them: that would make every later `commit()` of
   * this history compare each message by value). Treat them as read-only: a message changed in
   * place here is not saved, and a changed copy later passed in its place compares equal to it.
   */
  get messages(): Message[] {
    const pending = this.#pending?.messages;
    return pending !== undefined ? [...pending] : this.#committedMessages();
  }

  /** A copy of the committed messages. */
  #committedMessages(): Message[] {
    return this.#committed.arrays.messages.slice(0, this.#committed.count);
  }

  /** The unread flag, including a pending snapshot's. */
  get unread(): boolean {
    return this.#pending?.unread ?? this.#committed.header.unread ?? false;
  }

  /** True while a failed save waits for `flush()`. */
  get hasPendingSave(): boolean {
    return this.#pending !== undefined;
  }

  /**
   * The committed header (for drafts: the in-memory one), with a fallback title derived from the
   * first eligible user message when none is stored. The fallback is never written.
   */
  getHeader(): SessionHeader {
    const header = clone(this.#committed.header);
    // The fallback title of what was saved (or read): the one listings and index.json show, even
    // after the caller changed a saved message object in place.
    const title = this.#committed.title;
    if (!header.title && title !== null) return { ...header, title: clone(title) };
    return header;
  }

  /** The runtime context snapshots, including a pending snapshot's. */
  getRuntimeContexts(): RuntimeContextSnapshot[] {
    return clone([
      ...(this.#pending?.runtimeContexts ?? this.#committed.header.runtimeContexts ?? []),
    ]);
  }

  /** The compaction checkpoints, including a pending snapshot's. */
  getCompactions(): CompactionCheckpoint[] {
    return clone([
      ...(this.#pending?.context?.compactions ?? this.#committed.header.compactions ?? []),
    ]);
  }

  /** The system prompt checkpoints, including a pending snapshot's. */
  getSystemPromptCheckpoints(): SystemPromptCheckpoint[] {
    return clone([
      ...(this.#pending?.context?.systemPromptCheckpoints ??
        this.#committed.header.systemPromptCheckpoints ?? []),
    ]);
  }

  /** The prompt timings, including a pending snapshot's. */
  getPromptTimings(): PromptTiming[] {
    return clone([...(this.#pending?.promptTimings ?? this.#committed.header.promptTimings ?? [])]);
  }

  /** The path of meta.json. */
  getSessionFile(): string {
    return this.#metaFile;
  }

  /** The path of meta.json (the seed's `sessionFile`; the same as `getSessionFile()`). */
  get sessionFile(): string {
    return this.#metaFile;
  }

  /** The collection directory that holds this session's directory. */
  getSessionDir(): string {
    return this.#collectionDir;
  }

  /** The session's own directory `<collection>/<id>`. */
  getSessionPath(): string {
    return this.#dir;
  }

  /** The committed storage state: generation, range and count (undefined for an unsaved draft). */
  getStorageInfo():
    | { generation: string; start: number; bytes: number; messageCount: number }
    | undefined {
    const meta = this.#committed.meta;
    return meta === undefined ? undefined : {
      generation: meta.generation,
      start: meta.start,
      bytes: meta.bytes,
      messageCount: meta.messageCount,
    };
  }

  // ---------------------------------------------------------------------------------------------
  // History writes

  /**
   * Saves the complete history. Appends only new messages; a changed or shortened history is
   * written as a new generation (the whole history written again, a cost that grows with it: save
   * a streamed message once it is complete). Omitted optional arguments keep the stored metadata;
   * given arrays replace it (an empty array removes the field). Rejects while a save is pending.
   * Messages are plain JSON data: a message, a content block, a tool call's `arguments` or a
   * `usage` that JSON would write as something else (one with a `toJSON` method, such as a
   * `Date`; a boxed primitive such as `new Number(1)`; a class instance or any object whose
   * prototype is not `Object.prototype` or `null`) and a field the validator reads that JSON would
   * not write (a non-enumerable one) are refused with a `SessionFormatError` naming the field,
   * before anything is written; so is a message JSON writes nested deeper than
   * `MAX_MESSAGE_NESTING` (1,000) levels, on every runtime. Values the format leaves opaque (a
   * tool result's `details`, the values inside `arguments`, fields it does not define) are written
   * as `JSON.stringify` writes them, as Loop writes them: a `Date` as its ISO string, a `Map` as
   * `{}`, `NaN` as `null`.
   *
   * Saved messages are recognized by identity: pass the same objects again (or equal new ones, such
   * as the copies a resumed host rebuilt from its pages: compared by value once, then kept as the
   * saved messages, so later saves know them by identity). To change an earlier message, pass a new
   * object in its place and leave the saved one as it is; the manager keeps the objects it was
   * given and compares a new object with the saved one, so mutating a saved message in place is not
   * seen as a change (nor is a copy carrying the same change), except for the last saved message,
   * which is also compared with its saved line (hosts may finish it in place) while it is the last:
   * once a save put messages after it, it is matched by identity like the others. The identity
   * check costs a few nanoseconds per saved message; `append()` skips it. The metadata arrays given
   * are copied when the call is made, so the caller may change them at once: what is validated is
   * what is written. They must be plain data, extra fields included: a `Date`, `Map`, `Set`, boxed
   * primitive or `BigInt` in them is refused, naming the field (JSON would write it as something
   * else, or not at all). A save that fails stays pending as it was serialized (the messages it had
   * not saved are copied from their lines), and `flush()` retries exactly that: a save that added
   * messages to the saved history adds those copies again, without looking at the saved messages: a
   * last saved message the host finished in place meanwhile is not saved by it, nor by a later
   * `commit()` once the retried messages follow it (pass a new object for it, as for any earlier
   * message).
   *
   * A save called while the session is idle validates and serializes its messages at the call,
   * so the caller may change its array and its message objects at once. Saves (`commit()` and
   * `append()`) called while another call is in flight are queued: such a save copies its array
   * at the call but reads its message objects when its turn comes, so leave them as they are
   * until it settles. Those queued back to back are written together: each is validated on the
   * state the ones before it lead to, then one log write and one meta.json publish commit them
   * all, so a crash shows the state before the batch or after it. They resolve together, or
   * reject together with the write's error, the batch's last state then being the pending save; a
   * save that fails validation rejects alone and the batch is written without it. Any other call
   * (a pin, a page read, `flush()`, `close()`) ends the batch: calls take effect in the order they
   * were made.
   */
  commit(
    messages: readonly Message[],
    runtimeContexts?: readonly RuntimeContextSnapshot[],
    promptTimings?: readonly PromptTiming[],
    context?: CommitContext,
  ): Promise<void> {
    // A history that is not an array, or metadata that cannot be copied, fails the save when its
    // turn comes, as validation does (so saves settle in call order).
    const owned = this.#saveArguments(messages, runtimeContexts, promptTimings, context);
    if (owned instanceof Error) return this.#enqueueSave("commit", () => throwing(owned));
    ({ runtimeContexts, promptTimings, context } = owned);
    const at = this.#now();
    if (at instanceof Error) return this.#enqueueSave("commit", () => throwing(at));
    if (this.#canPrepareNow()) {
      // Nothing is queued: validate and serialize now, so the caller may reuse its array (and
      // its message objects) at once without the cost of copying the whole history.
      return this.#enqueuePreparedNow(
        "commit",
        (base) =>
          this.#prepare(messages, runtimeContexts, promptTimings, context, at, undefined, 0, base),
      );
    }
    // Queued behind another call: prepared when its turn comes, on a copy of the array.
    const snapshot = messages.slice();
    return this.#enqueueSave(
      "commit",
      (base) =>
        this.#prepare(snapshot, runtimeContexts, promptTimings, context, at, undefined, 0, base),
    );
  }

  /**
   * Retries a pending save with the same snapshot: what the failed save serialized, whatever the
   * caller did to its message objects since (see `commit()`). Resolves at once when nothing is
   * pending; rejects, as every call does, once the manager is closed.
   */
  flush(): Promise<void> {
    return this.#write("flush", async () => {
      const pending = this.#pending;
      if (pending === undefined) return;
      // A save that appended is appended again to the saved history: the saved messages are the
      // caller's objects, which it may have changed in place since (the last one it may finish),
      // so they are not compared again. The saved history is the one it appended to, or, when
      // its meta.json was found published after all, the one it leads to (nothing left to add).
      const committed = this.#committed;
      const messages = writtenCopies(pending.messages, pending.lines, pending.first);
      const from = pending.appendFrom !== undefined && isSaved(committed) &&
          pending.appendFrom <= committed.count && committed.count <= messages.length
        ? committed.count
        : 0;
      const prepared = this.#prepare(
        from === 0 ? messages : messages.slice(from),
        pending.runtimeContexts,
        pending.promptTimings,
        pending.context,
        Date.parse(pending.updatedAt),
        pending.unread,
        from,
      );
      // A pending save is what a write attempt failed to save, so it is written, even on a new
      // session and without a user round (a draft otherwise): a batch that created the session's
      // files and then left no round (a history emptied, say) is saved, as those saves one by one.
      await this.#apply({
        ...prepared,
        kind: prepared.kind === "draft" ? "replace" : prepared.kind,
        retry: true,
      });
    });
  }

  /**
   * Appends `messages` to the saved history: the same protocol and guarantees as `commit()` with
   * the complete history, at a cost that depends only on the new messages (`commit()` also
   * checks every earlier message by identity, a few nanoseconds each). Optional arguments work as
   * in `commit()`. Rejects while a save is pending. The history appended to is the one saved when
   * this call's turn in the write queue comes, or the one the saves of its batch before it lead
   * to, so saves queued before it are kept. As with `commit()`, the new messages are validated
   * and serialized at the call when the session is idle (the caller may change them at once);
   * a save queued behind another call reads them when its turn comes. Earlier messages are not
   * looked at: finish the last saved message before appending after it (`commit()` notices an
   * in-place change of the last saved message, but once `append()` put messages after it, only a
   * new object for it is seen as a change).
   */
  append(
    messages: readonly Message[],
    runtimeContexts?: readonly RuntimeContextSnapshot[],
    promptTimings?: readonly PromptTiming[],
    context?: CommitContext,
  ): Promise<void> {
    const owned = this.#saveArguments(messages, runtimeContexts, promptTimings, context);
    if (owned instanceof Error) return this.#enqueueSave("append", () => throwing(owned));
    ({ runtimeContexts, promptTimings, context } = owned);
    const at = this.#now();
    if (at instanceof Error) return this.#enqueueSave("append", () => throwing(at));
    // Prepared on the history saved by then (now, when nothing is queued, as `commit()` is; else
    // when its turn comes): an append adds to it (so saves queued before it are kept); on a
    // draft, which has no saved history to append to yet, it saves that history whole with the
    // new messages.
    const prepareOn = (base: HistoryBase, tail: readonly Message[]): PreparedCommit =>
      !isSaved(base)
        ? this.#prepare(
          [...base.arrays.messages.slice(0, base.count), ...tail],
          runtimeContexts,
          promptTimings,
          context,
          at,
          undefined,
          0,
          base,
        )
        : this.#prepare(
          tail,
          runtimeContexts,
          promptTimings,
          context,
          at,
          undefined,
          base.count,
          base,
        );
    if (this.#canPrepareNow()) {
      return this.#enqueuePreparedNow("append", (base) => prepareOn(base, messages));
    }
    // Queued behind another call: prepared when its turn comes, on a copy of the array.
    const tail = messages.slice();
    return this.#enqueueSave("append", (base) => prepareOn(base, tail));
  }

  /**
   * Queues a save prepared now, on the committed state (the queue is idle: `#canPrepareNow`),
   * which stays so until the save's batch, the next task, runs. The temp file of the next
   * meta.json is created meanwhile. A save that fails validation rejects before anything is
   * written, once that temp file is removed (in the queue, so before the session's next
   * operation runs).
   */
  #enqueuePreparedNow(
    operation: QueuedSave["operation"],
    prepare: (base: HistoryBase) => PreparedCommit,
  ): Promise<void> {
    const replace = this.#beginMetaReplace();
    let prepared: PreparedCommit;
    try {
      prepared = prepare(this.#committed);
    } catch (error) {
      if (replace === undefined) return Promise.reject(error);
      return this.#schedule(async () => {
        await replace.discard();
        throw error;
      });
    }
    return this.#enqueueSave(operation, () => prepared, replace);
  }

  /**
   * The metadata arguments of a save, as the manager keeps them (`ownMetadata`), or the error
   * that refuses the save: a history that is not an array, or metadata that cannot be copied.
   */
  #saveArguments(
    messages: unknown,
    runtimeContexts: unknown,
    promptTimings: unknown,
    context: unknown,
  ): SaveMetadata | SessionFormatError {
    if (!Array.isArray(messages)) return notAnArray(messages, this.#messagesFile);
    return this.#ownMetadata(runtimeContexts, promptTimings, context);
  }

  /** `ownMetadata` for this session, or the error that refuses the save. */
  #ownMetadata(
    runtimeContexts: unknown,
    promptTimings: unknown,
    context: unknown,
  ): SaveMetadata | SessionFormatError {
    try {
      return ownMetadata(runtimeContexts, promptTimings, context, this.#metaFile);
    } catch (error) {
      return error as SessionFormatError;
    }
  }

  /**
   * Queues a save behind the calls already in the write queue. Saves queued back to back join one
   * batch, which is prepared one save after another (each on the state the one before leads to)
   * and written with one log write and one meta.json publish: the saves resolve together, or
   * reject together with the write's error (the batch's last state is then the pending save). A
   * save that fails validation rejects alone, before anything is written, and the batch goes on
   * without it. Any other call queued meanwhile closes the batch, so calls keep their order.
   */
  #enqueueSave(
    operation: QueuedSave["operation"],
    prepare: QueuedSave["prepare"],
    replace?: PendingReplace,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const save: QueuedSave = { operation, prepare, resolve, reject };
      const open = this.#openBatch;
      if (open !== undefined) {
        // A batch is open only while the queue is busy, when no replace is begun.
        open.saves.push(save);
        return;
      }
      const batch: SaveBatch = { saves: [save], replace };
      // The saves settle once the batch's task has left the queue, so a caller continuing after
      // its save finds the queue idle (and its next commit is prepared at once, on its array).
      this.#schedule(() => this.#runBatch(batch)).then(
        (outcomes) => {
          for (const settle of outcomes) settle();
        },
        (error) => {
          // Not expected (`#runBatch` never rejects), but never leave a save unsettled.
          for (const queued of batch.saves) queued.reject(error);
        },
      );
      this.#openBatch = batch;
    });
  }

  /**
   * Runs a batch of queued saves (see `#enqueueSave`) and returns how each settles, in call
   * order. Never rejects.
   */
  async #runBatch(batch: SaveBatch): Promise<(() => void)[]> {
    if (this.#openBatch === batch) this.#openBatch = undefined; // started: no one joins now
    // Each save settles once the batch is over and its temp file is gone, so a caller that
    // sees its save settled sees the directory as the next call will; they settle in the order
    // they were called.
    const outcomes: ((() => void) | undefined)[] = batch.saves.map(() => undefined);
    const saves = batch.saves.map((save, i): QueuedSave => ({
      ...save,
      resolve: () => {
        outcomes[i] ??= save.resolve;
      },
      reject: (error) => {
        outcomes[i] ??= () => save.reject(error);
      },
    }));
    try {
      await this.#runSaves(saves, batch.replace);
    } catch (error) {
      for (const save of saves) save.reject(error); // not expected: `#runSaves` settles each
    }
    await batch.replace?.discard(); // unless a write published it; never rejects
    return outcomes.map((settle, i) =>
      settle ??
        (() =>
          batch.saves[i]?.reject(
            new SessionError("Internal error: a queued save was not settled", {
              file: this.getSessionFile(),
            }),
          ))
    );
  }

  async #runSaves(saves: readonly QueuedSave[], replace: PendingReplace | undefined) {
    for (const save of saves) {
      const refused = this.#refusal(save.operation);
      if (refused !== undefined) save.reject(refused);
    }
    if (this.#refusal("commit") !== undefined) return;
    // Behind a pending save nothing is written (`flush()` first), whatever the disk would say.
    if (this.#pending !== undefined) {
      for (const save of saves) {
        save.reject(new PendingSaveError(save.operation, { file: this.getSessionFile() }));
      }
      return;
    }
    try {
      await this.#reconcile();
    } catch (error) {
      // Nothing of these saves was written: they stay pending, as a failed write leaves them, so
      // `flush()` retries them (another writer's change is final: reopen the session).
      const together = error instanceof SessionBusyError ? undefined : this.#prepareTogether(saves);
      if (together !== undefined) this.#keepPending(together.prepared);
      for (const save of together?.members ?? saves) save.reject(error);
      return;
    }
    await this.#applyTogether(saves, replace);
  }

  /**
   * Prepares `saves` one after another, each on the state the one before leads to, and writes
   * the result once: an append of every new message, or the last replacement generation with
   * what was appended after it. Settles each save.
   */
  async #applyTogether(
    saves: readonly QueuedSave[],
    replace: PendingReplace | undefined,
  ): Promise<void> {
    const together = this.#prepareTogether(saves);
    if (together === undefined) return;
    try {
      await this.#apply(together.prepared, replace);
    } catch (error) {
      for (const save of together.members) save.reject(error);
      return;
    }
    for (const save of together.members) save.resolve();
  }

  /**
   * Prepares `saves` one after another on the committed state, each on the state the one before
   * leads to, and merges them into one write. A save that fails validation is rejected at once
   * (nothing was written) and left out. Undefined when none is left.
   */
  #prepareTogether(
    saves: readonly QueuedSave[],
  ): { prepared: PreparedCommit; members: QueuedSave[] } | undefined {
    let base: HistoryBase = this.#committed;
    const prepares: PreparedCommit[] = [];
    const members: QueuedSave[] = [];
    for (const save of saves) {
      let prepared: PreparedCommit;
      try {
        prepared = save.prepare(base);
      } catch (error) {
        save.reject(error); // nothing written; the next save is prepared on the same state
        continue;
      }
      prepares.push(prepared);
      members.push(save);
      base = {
        ...base,
        ...historyOf(prepared),
        header: this.#headerAfter(base.header, prepared),
        written: isSaved(base) || prepared.kind !== "draft",
      };
    }
    const [first, ...rest] = prepares;
    if (first === undefined) return undefined;
    return { prepared: mergePrepared([first, ...rest]), members };
  }

  /**
   * Starts creating the temp file of the next meta.json, so the create overlaps preparing the
   * commit. Only for a saved session (its directory exists) under no pending save.
   */
  #beginMetaReplace(): PendingReplace | undefined {
    if (this.#committed.meta === undefined || this.#pending !== undefined) return undefined;
    return beginReplace(this.#fs, this.#metaFile, { durability: this.#context.durability });
  }

  /**
   * The store's clock, or the error its reading is (a time no `Date` can hold): returned, so the
   * methods that return a promise reject with it instead of throwing.
   */
  #now(): number | Error {
    try {
      return this.#context.now();
    } catch (error) {
      return error instanceof Error ? error : new Error(preview(error));
    }
  }

  /** True when a commit can be prepared synchronously against the settled committed state. */
  #canPrepareNow(): boolean {
    return !this.#queue.busy && this.#pending === undefined && this.#attempt === undefined &&
      !this.#closed && !this.#readOnly;
  }

  /**
   * Validates a complete history against `committed` (the committed state, or the one the saves
   * of a batch before it lead to) and serializes what must be written. Unchanged committed
   * messages are recognized by identity (the last one also by value, since hosts may finish it in
   * place); an append touches only the new messages.
   */
  #prepare(
    messages: readonly Message[],
    runtimeContexts: readonly RuntimeContextSnapshot[] | undefined,
    promptTimings: readonly PromptTiming[] | undefined,
    context: CommitContext | undefined,
    at: number,
    retryUnread?: boolean,
    base = 0,
    committed: HistoryBase = this.#committed,
  ): PreparedCommit {
    // `messages` holds the history from global index `base` on; the first `base` messages are
    // those of `committed` (`append()` passes its count as base, and only the new messages).
    // `committed` is the state prepared on: the committed one, or where a batch's earlier saves
    // lead.
    const { arrays, count } = committed;
    const messagesFile = this.#messagesFile;
    const metaFile = this.#metaFile;
    // The metadata first (its shape; its anchors once the history is known), then the messages.
    checkMetadataShapes(runtimeContexts, promptTimings, context, metaFile);
    const total = base + messages.length;
    let common = base;
    const limit = Math.min(total, count);
    const stored = arrays.messages;
    common = identicalPrefix(messages, stored, base, limit);
    const identical = common;
    if (common < limit) {
      // Not the same objects: compare by value from there on (a value JSON cannot write is
      // refused as in a new message, naming it).
      while (
        common < limit &&
        comparedLine(messages[common - base], common, messagesFile) ===
          canonicalLine(stored[common], undefined)
      ) {
        common++;
      }
    }
    if (
      base < count && common === count && count > 0 &&
      comparedLine(messages[count - 1 - base], count - 1, messagesFile) !== committed.lastLine
    ) {
      common = count - 1;
    }
    const appendOnly = common === count && isSaved(committed);
    let next: HistoryArrays;
    let validator: MessageValidator;
    let first: number;
    if (appendOnly) {
      // Reuse the shared arrays: cut what a failed attempt left, then add the new messages.
      next = arrays;
      next.messages.length = count;
      next.roles.length = count;
      next.offsets.length = count + 1;
      next.rounds.length = committed.roundCount;
      validator = committed.validator.clone();
      first = count;
    } else {
      next = { messages: [], roles: [], offsets: [0], rounds: [] };
      validator = new MessageValidator({ file: messagesFile });
      first = 0;
    }
    // Each line is encoded once, straight into the bytes to write; its offset comes from there.
    const start = next.offsets[next.offsets.length - 1] as number;
    const writer = new LineWriter(lineCapacity(total - first));
    let lastLine: string | undefined;
    let unread = retryUnread ?? committed.header.unread ?? false;
    let title = appendOnly ? committed.title : null;
    for (let i = first; i < total; i++) {
      const message = messages[i - base] as Message;
      validator.push(message, i);
      const line = serializeMessage(message, i, messagesFile);
      const end = start + writer.push(line);
      lastLine = line;
      next.messages.push(message);
      next.roles.push(message.role);
      if (message.role === "user") {
        next.rounds.push({ messageIndex: i, byteOffset: next.offsets[i] as number });
        // From the line written, not the object: a caller may change that object later.
        title ??= eligibleTitleOf(JSON.parse(line) as Message, i) ?? null;
      } else if (retryUnread === undefined && i >= count) {
        // Newly appended output: a message past the saved history that is not a user message
        // (the seed's rule, as the version-2 writer applies it: `messages.slice(saved.length)`).
        // A saved message rewritten in place or replaced is not new output.
        unread = true;
      }
      next.offsets.push(end);
    }
    validator.clone().finish();
    const header = this.#headerWith(committed.header, runtimeContexts, promptTimings, context);
    if (appendOnly) {
      // Appending keeps every stored anchor valid; only arrays the caller passed need checking,
      // in `validateSessionMetadata`'s order. Runtime contexts need only the number of user
      // messages, which is the number of rounds (not a count over every role).
      if (runtimeContexts !== undefined) {
        validateRuntimeContexts(header.runtimeContexts, next.rounds.length, {
          file: metaFile,
          path: "header.runtimeContexts",
        });
      }
      const only = {
        ...(promptTimings !== undefined ? { promptTimings: header.promptTimings } : {}),
        ...(context?.compactions !== undefined ? { compactions: header.compactions } : {}),
        ...(context?.systemPromptCheckpoints !== undefined
          ? { systemPromptCheckpoints: header.systemPromptCheckpoints }
          : {}),
      };
      validateSessionMetadata(
        {
          ...header,
          runtimeContexts: undefined,
          promptTimings: undefined,
          compactions: undefined,
          systemPromptCheckpoints: undefined,
          ...only,
        } as SessionHeader,
        next.roles,
        { file: metaFile },
      );
    } else {
      validateSessionMetadata(header, next.roles, { file: metaFile });
    }
    if (appendOnly) {
      // Valid: saved messages matched by value (equal new objects: a resumed host passes the
      // copies its pages gave it) are kept as the objects given, as a new message is, so the next
      // save knows them by identity instead of serializing the whole history again. A save
      // refused above changes nothing of them.
      for (let i = Math.max(identical, base); i < count; i++) {
        next.messages[i] = messages[i - base] as Message;
      }
    }
    const kind: PreparedCommit["kind"] = !isSaved(committed) && next.rounds.length === 0
      ? "draft"
      : appendOnly && total === count
      ? "metadata"
      : appendOnly
      ? "append"
      : "replace";
    return {
      kind,
      runtimeContexts,
      promptTimings,
      context,
      updatedAt: new Date(at).toISOString(),
      unread,
      bytes: writer.bytes(),
      arrays: next,
      count: total,
      roundCount: next.rounds.length,
      validator,
      lastLine: lastLine !== undefined ? lastLine : total === 0 ? undefined : committed.lastLine,
      title,
      first,
    };
  }

  #headerWith(
    base: SessionHeader,
    runtimeContexts: readonly RuntimeContextSnapshot[] | undefined,
    promptTimings: readonly PromptTiming[] | undefined,
    context: CommitContext | undefined,
  ): SessionHeader {
    // The arrays are the manager's own copies (`ownMetadata`), never changed: kept as they are.
    const header: Record<string, unknown> = { ...base };
    const put = (key: string, value: readonly unknown[] | undefined): void => {
      if (value === undefined) return;
      if (value.length === 0) delete header[key];
      else header[key] = value;
    };
    put("runtimeContexts", runtimeContexts);
    put("promptTimings", promptTimings);
    put("compactions", context?.compactions);
    put("systemPromptCheckpoints", context?.systemPromptCheckpoints);
    return header as unknown as SessionHeader;
  }

  /** The header of the state `prepared` leads to from a state whose header is `header`. */
  #headerAfter(header: SessionHeader, prepared: PreparedCommit): SessionHeader {
    return {
      ...this.#headerWith(
        header,
        prepared.runtimeContexts,
        prepared.promptTimings,
        prepared.context,
      ),
      updatedAt: prepared.retry === true
        ? laterTime(prepared.updatedAt, header.updatedAt)
        : prepared.updatedAt,
      unread: prepared.unread,
    } as SessionHeader;
  }

  async #apply(prepared: PreparedCommit, replace?: PendingReplace): Promise<void> {
    const committed = this.#committed;
    const header = this.#headerAfter(committed.header, prepared);
    const history = historyOf(prepared);
    if (prepared.kind === "draft") {
      this.#committed = { ...committed, ...history, header };
      this.#pending = undefined;
      return;
    }
    try {
      const { meta, hash, staged } = await this.#appendGeneration(prepared, header, replace);
      await this.#publish({ ...history, meta, header, hash }, false, staged);
      this.#pending = undefined;
    } catch (error) {
      // A save that can never be written is refused, not kept pending (and a pending save whose
      // retry found it so is dropped: every retry would fail the same way).
      if (refusedSaves.has(error as object)) this.#pending = undefined;
      else this.#keepPending(prepared);
      throw await this.#explained(error);
    }
    await this.#publishIndexAfterCommit();
  }

  /**
   * Keeps `prepared`, a save that was not written, as the pending save `flush()` retries. The
   * snapshot is what was serialized, as it was: the caller keeps its objects (and may finish the
   * last message in place meanwhile), so the new messages are copied, parsed back from the lines
   * the save serialized (`writtenCopies`): a copy that cannot fail, so the write's error is the
   * one the save rejects with. The saved ones before them (for a save that appends) are the
   * caller's objects, which `flush()` does not look at again: it appends the copies to the saved
   * history (`appendFrom`). The metadata arrays are the manager's own copies already
   * (`ownMetadata`). Only a failed save pays for the copies.
   */
  #keepPending(prepared: PreparedCommit): void {
    const { arrays, bytes, first } = prepared;
    this.#pending = {
      messages: writtenCopies(arrays.messages.slice(0, prepared.count), bytes, first),
      lines: bytes,
      first,
      appendFrom: prepared.kind === "append" || prepared.kind === "metadata"
        ? prepared.first
        : undefined,
      runtimeContexts: prepared.runtimeContexts,
      promptTimings: prepared.promptTimings,
      context: prepared.context,
      updatedAt: prepared.updatedAt,
      unread: prepared.unread,
    };
  }

  /**
   * Writes the prepared message bytes to the log (after dropping any uncommitted tail) and, at
   * the same time, stages the meta.json that commits them; returns when both are complete
   * (fsynced under full durability). Publishes nothing: the caller renames the staged meta.json
   * in. The two writes are independent until that rename, which is the commit point, so running
   * them concurrently keeps every crash state of the sequential order: an uncommitted log tail
   * (cut by the next write) and an unreachable temp file (ignored by readers).
   */
  async #appendGeneration(
    prepared: PreparedCommit,
    header: SessionHeader,
    replace?: PendingReplace,
  ): Promise<{ meta: StorageMeta; hash: Sha256; staged: StagedReplace }> {
    const committed = this.#committed;
    await this.#ensureDirectory();
    let start = committed.meta?.start ?? 0;
    let bytes = committed.meta?.bytes ?? 0;
    let hash = committed.hash;
    let written: Promise<void> | undefined;
    if (prepared.kind !== "metadata") {
      const end = await this.#prepareLogEnd();
      written = this.#writeLog(prepared.bytes, end);
      if (prepared.kind === "append") {
        hash = committed.hash.clone().update(prepared.bytes);
        bytes += prepared.bytes.length;
      } else {
        hash = this.#context.sha256().update(prepared.bytes);
        start = end;
        bytes = prepared.bytes.length;
      }
    } else if (committed.meta !== undefined && committed.meta.start + committed.meta.bytes > 0) {
      // A save of metadata alone also cuts a crash tail (the log is opened once for it).
      await this.#prepareLogEnd();
    }
    const meta: StorageMeta = {
      format: STORAGE_FORMAT,
      version: STORAGE_VERSION,
      header,
      generation: prepared.kind === "metadata" && committed.meta !== undefined
        ? committed.meta.generation
        : hash.digestHex(),
      start,
      bytes,
      messageCount: prepared.count,
    };
    let data: Uint8Array;
    try {
      data = this.#encodeMeta(meta);
    } catch (error) {
      // A header JSON cannot write (what the checks on taking metadata keep out): refused as a
      // validation failure, not kept pending. Message bytes already written are an uncommitted
      // tail, cut by the next save.
      await written?.catch(() => undefined);
      throw refusedBeforeCommit(error);
    }
    const staging = replace !== undefined
      ? replace.stage(data)
      : stageReplace(this.#fs, this.#metaFile, data, { durability: this.#context.durability });
    const [log, stage] = await Promise.allSettled([written, staging]);
    if (log.status === "rejected") {
      if (stage.status === "fulfilled") await stage.value.discard();
      throw log.reason;
    }
    if (stage.status === "rejected") throw stage.reason;
    return { meta, hash, staged: stage.value };
  }

  /** Appends `data` to the log at the committed end `end` and, under full durability, syncs it. */
  async #writeLog(data: Uint8Array, end: number): Promise<void> {
    try {
      const log = this.#log as FileHandle;
      await log.write(data);
      if (this.#context.durability === "full") await log.sync();
      this.#logSize = end + data.length;
    } catch (error) {
      await this.#dropLog();
      throw error;
    }
  }

  /** Opens the log if needed, and truncates an uncommitted tail. Returns the committed end. */
  async #prepareLogEnd(): Promise<number> {
    const meta = this.#committed.meta;
    const end = meta === undefined ? 0 : meta.start + meta.bytes;
    const path = this.#messagesFile;
    if (this.#log === undefined) {
      let created = false;
      let mode: number | undefined;
      try {
        // Never through a link, even one swapped in since the session was opened: with
        // `openAppendNoFollow` the open itself refuses it.
        const opened = await openSessionFile(this.#fs, path, { append: true });
        this.#log = opened.handle;
        mode = opened.mode;
      } catch (error) {
        // As at open: a log missing under a committed range that ends past byte 0 (also an empty
        // range a replacement left at the old log's end) is damage, reported without creating it.
        if (!(error instanceof NotFound) || end > 0) {
          if (error instanceof NotFound) {
            throw new CorruptSessionError(
              meta !== undefined && meta.bytes > 0
                ? "Message log is missing but metadata commits messages"
                : `Message log is missing but its committed range starts at byte ${end}`,
              { file: path, cause: error },
            );
          }
          throw error;
        }
        this.#log = await this.#fs.open(path, {
          append: true,
          createNew: true,
          mode: PRIVATE_FILE_MODE,
        });
        created = true;
      }
      try {
        // By path, so only when the open did not report the file private already.
        if (mode !== PRIVATE_FILE_MODE) await this.#fs.chmod(path, PRIVATE_FILE_MODE);
        if (created && this.#context.durability === "full") await this.#fs.syncDir(this.#dir);
      } catch (error) {
        await this.#dropLog();
        throw error;
      }
      this.#logSize = undefined;
    }
    try {
      const size = this.#logSize ?? (await (this.#log as FileHandle).stat()).size;
      if (size < end) {
        throw new CorruptSessionError(
          `Message log is shorter than its committed range (${size} < ${end}); refusing to write`,
          { file: path, offset: size },
        );
      }
      if (size > end) {
        // A crash tail: bytes past the committed range were never published. Drop them.
        await (this.#log as FileHandle).truncate(end);
      }
      this.#logSize = end;
    } catch (error) {
      await this.#dropLog();
      throw error;
    }
    return end;
  }

  /**
   * The log handle of page reads: the one a read-only manager's open verified, or for a writer
   * the log opened on the first page read (never through a link).
   */
  #readHandle(): Promise<FileHandle> {
    if (this.#reader === undefined) {
      const file = this.#messagesFile;
      const opening = (async () => {
        try {
          return (await openSessionFile(this.#fs, file)).handle;
        } catch (error) {
          if (!(error instanceof NotFound)) throw error;
          // As at open: a log missing beside the metadata that commits it is corruption; a
          // session directory removed or moved away as a whole is not found, as a write says.
          if (await isRegularFile(this.#fs, this.#metaFile)) {
            throw new CorruptSessionError("Message log is missing but metadata commits messages", {
              file,
              cause: error,
            });
          }
          throw new SessionNotFoundError(
            "Session directory was removed or moved since the session was opened",
            { file: this.#metaFile, cause: error },
          );
        }
      })();
      this.#reader = opening;
      opening.catch(() => {
        if (this.#reader === opening) this.#reader = undefined;
      });
    }
    return this.#reader;
  }

  async #dropReader(): Promise<void> {
    const reader = this.#reader;
    this.#reader = undefined;
    if (reader === undefined) return;
    try {
      await (await reader).close();
    } catch {
      // Not opened, or already unusable: nothing left to release.
    }
  }

  async #dropLog(): Promise<void> {
    const log = this.#log;
    this.#log = undefined;
    this.#logSize = undefined;
    if (log !== undefined) {
      try {
        await log.close();
      } catch {
        // The handle is abandoned either way; the next write reopens the log.
      }
    }
  }

  async #ensureDirectory(): Promise<void> {
    if (this.#permissionsEnforced) return;
    const durability = this.#context.durability;
    let metaInfo: PromiseSettledResult<FileInfo> | undefined;
    if (this.#committed.meta !== undefined) {
      // A saved session lives where its meta.json was read: a directory removed or moved away
      // since then (or replaced by one without meta.json) is not written to (a save there would
      // publish metadata without its messages). The same lstat serves the mode check below.
      [metaInfo] = await Promise.allSettled([promiseOf(() => this.#fs.lstat(this.#metaFile))]);
      if (metaInfo.status === "rejected") {
        if (!(metaInfo.reason instanceof NotFound)) throw metaInfo.reason;
        throw new SessionNotFoundError(
          "Session directory was removed or moved since the session was opened",
          { file: this.#metaFile, cause: metaInfo.reason },
        );
      }
    }
    // A collection (or session directory) that became a link, or anything else, since the open
    // is refused by name: found only where the mkdir it stands in for fails, no extra look.
    await ensureCollectionDir(this.#fs, this.#collectionDir, durability);
    await ensureOwnDir(this.#fs, this.#dir, durability, sessionNotADirectory);
    if (this.#beforeFirstWrite !== undefined) {
      await this.#beforeFirstWrite();
      this.#beforeFirstWrite = undefined;
    }
    // A chmod goes by path: only for a file that is not private yet.
    for (const name of [META_FILE, MESSAGES_FILE]) {
      const path = join(this.#dir, name);
      const [info] = name === META_FILE && metaInfo !== undefined
        ? [metaInfo]
        : await Promise.allSettled([promiseOf(() => this.#fs.lstat(path))]);
      if (
        isRegularFileInfo(info, path) && info.status === "fulfilled" &&
        info.value.mode !== PRIVATE_FILE_MODE
      ) {
        await this.#fs.chmod(path, PRIVATE_FILE_MODE);
        // meta.json is replaced by this very save; the log may not be written by it.
        if (name === MESSAGES_FILE) await this.#syncMode(path);
      }
    }
    // index.json is derived and only ever replaced by rename (which replaces a planted link
    // itself): anything there but a regular file is left for that rename, never a reason to refuse
    // a save, and never followed.
    const index = join(this.#dir, INDEX_FILE);
    const [indexInfo] = await Promise.allSettled([promiseOf(() => this.#fs.lstat(index))]);
    if (
      indexInfo.status === "fulfilled" && indexInfo.value.kind === "file" &&
      indexInfo.value.mode !== PRIVATE_FILE_MODE
    ) {
      await this.#fs.chmod(index, PRIVATE_FILE_MODE);
      await this.#syncMode(index);
    } else if (indexInfo.status === "rejected" && !(indexInfo.reason instanceof NotFound)) {
      throw indexInfo.reason;
    }
    this.#permissionsEnforced = true;
  }

  /**
   * Under full durability, makes the mode just set on the file at `path` durable: an fsync of
   * the file (never through a link, never waiting on a FIFO) flushes its attributes, which a
   * chmod alone does not.
   */
  async #syncMode(path: string): Promise<void> {
    if (this.#context.durability !== "full") return;
    // Only a mode that did change (an adapter without modes reports the same one again), through
    // a handle open for writing (some platforms fsync only those).
    const { handle, mode } = await openSessionFile(this.#fs, path, { append: true });
    try {
      if ((mode ?? (await handle.stat()).mode) === PRIVATE_FILE_MODE) await handle.sync();
    } finally {
      await handle.close();
    }
  }

  async #publishMeta(meta: StorageMeta): Promise<void> {
    await atomicReplace(this.#fs, this.#metaFile, this.#encodeMeta(meta), {
      durability: this.#context.durability,
    });
  }

  /** The bytes of meta.json for `meta` (see `encodeStorageMetaReusing`). */
  #encodeMeta(meta: StorageMeta): Uint8Array {
    return encodeStorageMetaReusing(meta, this.#encodedArrays, this.#metaFile);
  }

  /**
   * Republishes index.json after a commit when it does not cover the new generation's start, or
   * lags by `INDEX_LAG_ROUNDS` rounds (at least an eighth of them) or `INDEX_LAG_BYTES` bytes.
   * Otherwise the index stays a valid prefix: readers scan the short unindexed tail. This keeps
   * the index's cost per commit constant however long the history grows.
   */
  async #publishIndexAfterCommit(): Promise<void> {
    const { meta, roundCount } = this.#committed;
    const indexed = this.#indexed;
    if (
      meta !== undefined && indexed !== undefined && indexed.start === meta.start &&
      roundCount - indexed.rounds < Math.max(INDEX_LAG_ROUNDS, Math.ceil(roundCount / 8)) &&
      meta.bytes - indexed.bytes < INDEX_LAG_BYTES
    ) return;
    try {
      await this.#publishIndex();
    } catch {
      // Index publication never rolls back a committed save: the index is rebuilt on a page read.
    }
  }

  async #publishIndex(): Promise<void> {
    const meta = this.#committed.meta;
    if (meta === undefined) return;
    const index: RoundIndex = {
      format: INDEX_FORMAT,
      version: INDEX_VERSION,
      generation: meta.generation,
      start: meta.start,
      bytes: meta.bytes,
      messageCount: meta.messageCount,
      fallbackTitle: this.#committed.title,
      rounds: this.#committed.arrays.rounds.slice(0, this.#committed.roundCount),
    };
    const bytes = encodeRoundIndex(index);
    await atomicReplace(this.#fs, join(this.#dir, INDEX_FILE), bytes, {
      durability: this.#context.durability,
    });
    this.#indexed = {
      start: meta.start,
      bytes: meta.bytes,
      count: meta.messageCount,
      rounds: index.rounds.length,
      size: bytes.length,
    };
  }

  // ---------------------------------------------------------------------------------------------
  // History pages

  /**
   * A page of history: by default the latest three user rounds. `before` is an exclusive global
   * message index on a user-round boundary (or the total); `revision` rejects with
   * `StaleRevisionError` when the committed generation changed. Reads only the page's byte range
   * of the log. A writable manager checks index.json at open, and its first page read rebuilds one
   * that was then missing, malformed or stale (a failed rebuild is retried by the next page read
   * and never fails the page); its later page reads trust the index it published or checked, and
   * `close()` publishes it again when another process removed it or changed its length meanwhile. A
   * read-only manager never reads or writes it (its pages come from the offsets read at open).
   *
   * Pages trust the committed range the open verified (or the manager's own saves wrote): a page
   * read checks the structure of the bytes it reads (a newline at each held offset, each line
   * JSON), not their checksum nor each message's fields. So bytes of the committed range that
   * another program changed in place after the open, keeping that structure, are returned as
   * they now are, without an error; the next open reports the change (`CorruptSessionError`, a
   * checksum mismatch), and so does `verifySession` (a `checksum` finding).
   *
   * @throws {InvalidArgumentError} For `before` not a safe integer on a round boundary in
   *   `[0, total]`, or a `revision` that is not a string.
   * @throws {StaleRevisionError} When `revision` is not the committed generation.
   * @throws {SessionNotFoundError} When a page read that opens the log (a writer's first) finds
   *   the session directory removed, moved away or replaced (by a link, or by a directory whose
   *   meta.json is not this committed one) since the open, naming meta.json; nothing is read or
   *   written there.
   * @throws {CorruptSessionError} When the log is missing or shorter than the committed range, or
   *   a message of the page is not the JSON line its committed offsets say (naming messages.jsonl
   *   and the message's index).
   */
  readHistory(before?: number, revision?: string): Promise<HistoryPage> {
    return this.#schedule(async () => {
      this.#assertOpen();
      if (revision !== undefined && typeof revision !== "string") {
        throw new InvalidArgumentError(
          "revision",
          `Invalid history revision: expected a string, got ${typeof revision}`,
        );
      }
      const meta = this.#committed.meta;
      if (this.#pending !== undefined || meta === undefined) {
        const messages = this.#pending?.messages ?? this.#committedMessages();
        if (revision !== undefined && revision !== "") {
          throw new StaleRevisionError(revision, "", { file: this.getSessionFile() });
        }
        const starts: number[] = [];
        messages.forEach((message, index) => {
          if (message.role === "user") starts.push(index);
        });
        const [start, end] = pageBounds(
          (k) => starts[k] as number,
          starts.length,
          messages.length,
          before,
        );
        return {
          // Copied as a page read from the log copies them: parsed from their JSON.
          messages: messages.slice(start, end).map((message, i) =>
            JSON.parse(serializeMessage(message, start + i, this.#messagesFile)) as Message
          ),
          start,
          end,
          total: messages.length,
          revision: "",
        };
      }
      if (revision !== undefined && revision !== meta.generation) {
        throw new StaleRevisionError(revision, meta.generation, { file: this.getSessionFile() });
      }
      // A writer's first page read opens the log by its path (and may publish index.json): never
      // in a directory that no longer holds this session (moved away, or replaced by another
      // session's directory or a link), which a read there would take for this session's.
      if (!this.#readOnly && this.#reader === undefined && !(await this.#holdsCommitted(meta))) {
        throw new SessionNotFoundError(
          "Session directory was removed, moved away or replaced since the session was opened",
          { file: this.#metaFile },
        );
      }
      await this.#ensureIndex(meta);
      const { arrays, roundCount } = this.#committed;
      const [start, end] = pageBounds(
        (k) => (arrays.rounds[k] as RoundEntry).messageIndex,
        roundCount,
        meta.messageCount,
        before,
      );
      const messages = await this.#readMessages(meta, start, end);
      return { messages, start, end, total: meta.messageCount, revision: meta.generation };
    });
  }

  /**
   * Makes sure index.json is usable before a page read: missing, malformed, stale or wrong
   * indexes (a wrong or missing fallback title included) are rebuilt from the committed history.
   * An index covering a committed prefix of the same generation start (what a commit leaves
   * between republications) is usable.
   */
  async #ensureIndex(meta: StorageMeta): Promise<void> {
    // Pages are served from the offsets held in memory: the index on disk matters only to other
    // readers, and a read-only manager can neither rebuild it nor needs to read it.
    if (this.#readOnly) return;
    if (this.#indexed !== undefined && this.#indexed.start === meta.start) return;
    let onDisk: SizedRoundIndex | undefined;
    try {
      // Never through a link, and never past the size an index of the committed counts can have.
      onDisk = await readSizedRoundIndex(this.#fs, this.#dir, false, meta);
    } catch {
      // Unreadable (a planted link, malformed, an I/O error): rebuilt below, and the page is
      // served either way (the rename replaces a link, never writes through it).
    }
    if (onDisk !== undefined && this.#adoptIndex(onDisk, meta)) return;
    try {
      await this.#publishIndex();
    } catch {
      // The page is served from the committed range either way; the rebuild is retried next time.
    }
  }

  /**
   * Takes `read.index` (read from disk) as the coverage of index.json when it describes a prefix of
   * the committed history (`#coversPrefix`); returns whether it did.
   */
  #adoptIndex(read: SizedRoundIndex, meta: StorageMeta): boolean {
    const { index, size } = read;
    if (!this.#coversPrefix(index, meta)) return false;
    this.#indexed = {
      start: index.start,
      bytes: index.bytes,
      count: index.messageCount,
      rounds: index.rounds.length,
      size,
    };
    return true;
  }

  /**
   * True when `index` describes exactly a prefix of the committed history (or all of it), with
   * the fallback title of the messages it covers. An index that records no title (written before
   * the field existed) is not: the page read rewrites it, so listings stop reading the log.
   */
  #coversPrefix(index: RoundIndex, meta: StorageMeta): boolean {
    const { arrays, count, roundCount, title } = this.#committed;
    const covered = title !== null && (title.messageIndices[0] as number) < index.messageCount
      ? title
      : null;
    if (!recordsTitle(index, covered)) return false;
    if (index.messageCount === count) {
      return indexMatches(index, meta) && sameRounds(index.rounds, arrays.rounds, roundCount);
    }
    if (index.start !== meta.start || index.messageCount > count) return false;
    if (arrays.offsets[index.messageCount] !== index.bytes) return false;
    const k = index.rounds.length;
    if (k > roundCount) return false;
    // Exactly the rounds that start inside the prefix: none of them missing, none past it (an
    // index listing later rounds than it covers is malformed, and is rebuilt).
    if (k < roundCount && (arrays.rounds[k] as RoundEntry).messageIndex < index.messageCount) {
      return false;
    }
    if (k > 0 && (arrays.rounds[k - 1] as RoundEntry).messageIndex >= index.messageCount) {
      return false;
    }
    return sameRounds(index.rounds, arrays.rounds, k);
  }

  async #readMessages(meta: StorageMeta, start: number, end: number): Promise<Message[]> {
    if (start >= end) return [];
    const offsets = this.#committed.arrays.offsets;
    const from = offsets[start] as number;
    const to = offsets[end] as number;
    const file = this.#messagesFile;
    const handle = await this.#readHandle();
    let bytes: Uint8Array;
    try {
      bytes = await handle.read(meta.start + from, to - from);
    } catch (error) {
      // A writer's next page opens the log again (its lock keeps compaction away, so the path
      // still names the log it verified). A read-only manager keeps its handle: the path may
      // name a compacted log by now, whose offsets are not the ones it holds.
      if (!this.#readOnly) await this.#dropReader();
      throw error;
    }
    if (bytes.length !== to - from) {
      const at = meta.start + from + bytes.length;
      throw await shortReadError(handle, file, at, meta.start + meta.bytes);
    }
    // Each message is decoded and parsed alone from the offsets held (as open read it): no string
    // of the whole page, which may be longer than the largest string of the runtime.
    const messages: Message[] = [];
    for (let index = start; index < end; index++) {
      const lineStart = (offsets[index] as number) - from;
      const lineEnd = (offsets[index + 1] as number) - from; // past its newline
      const offset = meta.start + (offsets[index] as number);
      if (bytes.indexOf(10, lineStart) !== lineEnd - 1) {
        throw new CorruptSessionError(
          "Message log line does not match its committed offsets (a newline is missing or moved)",
          { file, offset, messageIndex: index },
        );
      }
      try {
        messages.push(JSON.parse(decodeLine(bytes.subarray(lineStart, lineEnd - 1))) as Message);
      } catch (error) {
        throw new CorruptSessionError(`Committed message line is not valid JSON`, {
          file,
          offset,
          messageIndex: index,
          cause: error,
        });
      }
    }
    return messages;
  }

  // ---------------------------------------------------------------------------------------------
  // Metadata writes

  /**
   * Pins or unpins the session. Returns the saved ISO pin time, or undefined when unpinned.
   * Repeating `true` keeps the original time. Preserves messages and `updatedAt`. A draft keeps the
   * pin in memory until its first save. A failure leaves the header unchanged.
   */
  setPinned(pinned: boolean): Promise<string | undefined> {
    if (typeof pinned !== "boolean") {
      return Promise.reject(
        new InvalidArgumentError("pinned", `Invalid pinned state: ${preview(pinned)}`, {
          file: this.#metaFile,
        }),
      );
    }
    const at = this.#now();
    if (at instanceof Error) return Promise.reject(at);
    return this.#writeHeader("setPinned", true, async (replace) => {
      const header: Record<string, unknown> = { ...this.#committed.header };
      if (pinned) header.pinnedAt = this.#committed.header.pinnedAt ?? new Date(at).toISOString();
      else delete header.pinnedAt;
      await this.#publishHeader(header as unknown as SessionHeader, replace);
      return pinned ? header.pinnedAt as string : undefined;
    });
  }

  /**
   * Marks the saved history read when `messageCount` equals the saved, non-empty message count.
   * Returns true for an accepted (or repeated) receipt, false for a mismatch or an empty history.
   * Rejects an invalid count and a pending save. Preserves messages and `updatedAt`.
   */
  markRead(messageCount: number): Promise<boolean> {
    if (!Number.isSafeInteger(messageCount) || messageCount < 0) {
      return Promise.reject(
        new InvalidArgumentError(
          "messageCount",
          `Invalid read message count: ${preview(messageCount)}`,
          { file: this.#metaFile },
        ),
      );
    }
    // A receipt that will clear the flag (known at the call when the session is idle).
    const clears = this.#committed.header.unread === true && messageCount > 0 &&
      messageCount === this.#committed.meta?.messageCount;
    return this.#writeHeader("markRead", clears, async (replace) => {
      if (this.#pending !== undefined) {
        throw new PendingSaveError("markRead", { file: this.getSessionFile() });
      }
      const meta = this.#committed.meta;
      if (meta === undefined || messageCount === 0 || messageCount !== meta.messageCount) {
        return false;
      }
      if (this.#committed.header.unread !== true) return true;
      await this.#publishHeader({ ...this.#committed.header, unread: false }, replace);
      return true;
    });
  }

  /**
   * Stores a title (validated and normalized form only); `undefined` removes it. Preserves
   * `updatedAt`. Extra fields pass through, as plain data (as for the metadata arrays of a save)
   * within the header's nesting limit: a title that opening would refuse is refused here (on a
   * draft too, before its first save).
   */
  setTitle(title: SessionTitle | undefined): Promise<void> {
    let parsed: SessionTitle | undefined;
    try {
      // Copied when the call is made, then checked as a load checks it (the title sits at the
      // header's level 2): what is checked is what is written.
      if (title !== undefined) {
        const file = this.#metaFile;
        const copy = copyOf(title, "header.title", file);
        checkJsonData(
          copy,
          MAX_HEADER_NESTING,
          "Invalid session metadata",
          { file },
          "header.title",
          2,
        );
        parsed = parseSessionTitle(copy, { file, path: "header.title" });
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#writeHeader("setTitle", true, async (replace) => {
      const header: Record<string, unknown> = { ...this.#committed.header };
      if (parsed === undefined) delete header.title;
      else header.title = parsed;
      await this.#publishHeader(header as unknown as SessionHeader, replace);
    });
  }

  /** Stores the model (effort kept only when not "default"), updating `updatedAt`. */
  setModel(model: ModelRef): Promise<void> {
    let parsed: ModelRef;
    try {
      parsed = parseModelRef(model, { file: this.#metaFile, path: "header.model" });
    } catch (error) {
      return Promise.reject(error);
    }
    const at = this.#now();
    if (at instanceof Error) return Promise.reject(at);
    return this.#writeHeader("setModel", true, async (replace) => {
      await this.#publishHeader(
        { ...this.#committed.header, model: parsed, updatedAt: new Date(at).toISOString() },
        replace,
      );
    });
  }

  /**
   * Stores the permission preset (`read-only`, `workspace-write` or `danger-full-access`),
   * updating `updatedAt`. An invalid value rejects with `InvalidArgumentError`.
   */
  setPermissionPreset(preset: PermissionPreset): Promise<void> {
    if (!isPermissionPreset(preset)) {
      return Promise.reject(
        new InvalidArgumentError("preset", `Invalid permission preset: ${preview(preset)}`, {
          file: this.#metaFile,
        }),
      );
    }
    const at = this.#now();
    if (at instanceof Error) return Promise.reject(at);
    return this.#writeHeader("setPermissionPreset", true, async (replace) => {
      await this.#publishHeader(
        {
          ...this.#committed.header,
          permissionPreset: preset,
          updatedAt: new Date(at).toISOString(),
        },
        replace,
      );
    });
  }

  /**
   * Publishes `header` with the committed history (on a session not saved yet, only keeps it),
   * through `replace` when the write began its temp file at the call.
   */
  async #publishHeader(header: SessionHeader, replace?: PendingReplace): Promise<void> {
    const meta = this.#committed.meta;
    if (meta === undefined) {
      this.#committed = { ...this.#committed, header };
      return;
    }
    await this.#ensureDirectory();
    await this.#publish(
      { ...this.#committed, meta: { ...this.#committed.meta as StorageMeta, header }, header },
      true,
      replace,
    );
  }

  /**
   * Publishes `next.meta` by atomic replace and makes `next` the committed state: through
   * `staged` when given (a temp file written already, or one begun whose content is written
   * here), else through a new temp file. When the temp file cannot be written, nothing changed;
   * when the publication itself fails, whether meta.json was replaced is unknown (the rename may
   * have happened before a failed directory fsync): the attempt is kept and `#reconcile` settles
   * it before the next write.
   */
  async #publish(
    next: Committed,
    metadataOnly = false,
    staged?: StagedReplace | PendingReplace,
  ): Promise<void> {
    // Encoded before anything is attempted: a header JSON cannot write is refused, unwritten.
    const data = staged === undefined || "stage" in staged
      ? this.#encodeMeta(next.meta as StorageMeta)
      : undefined;
    // The new meta.json is written aside first: a failure there changed nothing readers can see
    // (the attempt is known to have failed, nothing to settle later).
    let ready: StagedReplace;
    try {
      ready = staged === undefined
        ? await stageReplace(this.#fs, this.#metaFile, data as Uint8Array, {
          durability: this.#context.durability,
        })
        : "stage" in staged
        ? await staged.stage(data as Uint8Array)
        : staged;
    } catch (error) {
      throw await this.#explained(error);
    }
    this.#attempt = next;
    this.#attemptIsMetadata = metadataOnly;
    try {
      await ready.publish();
    } catch (error) {
      // A metadata write the caller is told failed must not be seen by readers in the meantime:
      // it is undone now when possible (else before the next write, or at close).
      if (metadataOnly) await this.#reconcile().catch(() => undefined);
      throw await this.#explained(error);
    }
    this.#committed = next;
    this.#attempt = undefined;
    this.#wrote = true;
  }

  /**
   * The error a failed write reports: `error` itself, or, for a `NotFound` while meta.json is
   * gone (the session directory was removed or moved away since it was opened, after the first
   * write stopped looking: see `#ensureDirectory`), the `SessionNotFoundError` that says so.
   */
  async #explained(error: unknown): Promise<unknown> {
    if (!(error instanceof NotFound) || error instanceof SessionNotFoundError) return error;
    let present: boolean;
    try {
      present = await isRegularFile(this.#fs, this.#metaFile);
    } catch {
      return error;
    }
    if (present) return error;
    return new SessionNotFoundError(
      "Session directory was removed or moved since the session was opened",
      { file: this.#metaFile, cause: error },
    );
  }

  /**
   * After a failed publication, reads meta.json back: if it is the attempted state, that state
   * is adopted (it is visible to readers, so the log must never be cut below it); if it is the
   * committed state, the attempt is dropped. Anything else means another writer changed the
   * session, which is refused.
   */
  async #reconcile(): Promise<void> {
    const attempt = this.#attempt;
    if (attempt === undefined) return;
    let onDisk: StorageMeta | undefined;
    try {
      if (await isRegularFile(this.#fs, this.#metaFile)) {
        onDisk = await readStorageMeta(this.#fs, this.#dir, true);
      }
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
    const committed = this.#committed.meta;
    if (onDisk !== undefined && sameMeta(onDisk, attempt.meta as StorageMeta)) {
      if (this.#attemptIsMetadata && committed !== undefined) {
        // A failed pin, title, model or read receipt must not take effect later: restore the
        // accepted header (the caller was told the write failed and may retry it).
        await this.#publishMeta(committed);
      } else {
        // Appended history became visible: readers may see it, so it is adopted (never cut).
        this.#committed = attempt;
      }
    } else if (
      !(onDisk === undefined && committed === undefined) &&
      !(onDisk !== undefined && committed !== undefined && sameMeta(onDisk, committed))
    ) {
      throw new SessionBusyError("meta.json was changed by another writer; reopen the session", {
        file: this.getSessionFile(),
      });
    }
    this.#attempt = undefined;
  }

  // ---------------------------------------------------------------------------------------------
  // Lifecycle

  /**
   * Waits for queued writes, publishes an index that lags the history (left by this manager's
   * saves, or adopted at open from a process that stopped before closing; one missing or damaged
   * at open is rebuilt by a page read instead), or one that another process removed, replaced
   * with something other than a file or changed the length of since this manager published or
   * read it (never once the session directory was removed, moved away or replaced by one without
   * meta.json), closes the log handles (the writer's, and the one page reads keep open from their
   * first page, also in a read-only manager) and releases the writer slot. A pending save stays
   * unsaved: call `flush()` first to keep it. While a save is pending, index.json is left as it
   * is: it still describes a prefix of the committed history, whose rest a listing reads from the
   * log, and the next writer publishes it again. A metadata change that was rejected after its
   * meta.json may have landed (a pin, title, model, permission preset or read receipt whose write
   * failed) is undone here if no later write undid it; when that fails too, the session is still
   * closed and the call rejects with a `SessionError` naming meta.json, which may then hold the
   * rejected change.
   */
  close(): Promise<void> {
    return this.#schedule(async () => {
      if (this.#closed) return;
      this.#closed = true;
      let unsettled: unknown;
      try {
        if (
          !this.#readOnly && this.#committed.meta !== undefined && this.#pending === undefined
        ) {
          try {
            // Behind the committed history (fewer messages, or another generation's range: a
            // replacement of as many messages whose publication failed), whether this manager's
            // saves left the lag or it adopted one a process that stopped before close() left;
            // unusable after this manager's saves (one missing or damaged at open is rebuilt by a
            // page read, not by an open and close); or no longer the file known to be there
            // (removed or damaged by another process): published again.
            const { meta, count } = this.#committed;
            const indexed = this.#indexed;
            if (
              (indexed === undefined
                ? this.#wrote
                : indexed.count !== count || indexed.start !== meta.start ||
                  indexed.bytes !== meta.bytes || !(await this.#indexStillThere())) &&
              // Never into a directory that no longer holds the session (removed, moved away or
              // replaced since: a write there is refused with SessionNotFoundError), nor through
              // one that became a link.
              await this.#holdsCommitted(meta)
            ) await this.#publishIndex();
          } catch {
            // Derived data: rebuilt on the next page read.
          }
        }
        // A failed write whose meta.json may have landed is settled as the next write would: a
        // rejected metadata change is undone. If that fails too, the change the caller was told
        // failed may be what meta.json holds: close() says so once the session is closed.
        if (!this.#readOnly) {
          const metadata = this.#attemptIsMetadata;
          try {
            await this.#reconcile();
          } catch (error) {
            if (metadata) unsettled = error;
          }
        }
        await this.#dropLog();
        await this.#dropReader();
      } finally {
        if (!this.#readOnly) {
          releaseWriter(this.#fs, this.#dir, this);
          // What this process knows to be durable of the session is forgotten with its writer:
          // kept, it would outlive a delete by another process, one entry set per session ever
          // saved. The next writer syncs the session's directory once more at its first save.
          forgetDurable(this.#fs, this.#dir);
        }
        await this.#onClose?.();
      }
      if (unsettled !== undefined) {
        throw new SessionError(
          "Session closed, but a rejected metadata change (pin, title, model, permission preset " +
            "or read receipt) could not be undone: meta.json may hold it; reopen the session to " +
            "see which header it holds",
          { file: this.#metaFile, cause: unsettled },
        );
      }
    });
  }

  /**
   * True when the session directory is still a directory (not a link to one) whose meta.json
   * describes the committed range `meta` of this session: where a writer's first page read opens
   * the log and `close()` publishes index.json. False when the directory or its meta.json is
   * missing, the directory is something else, or meta.json is that of another session or range;
   * a meta.json that cannot be read as one (damaged, unsupported, an I/O failure) throws that.
   */
  async #holdsCommitted(meta: StorageMeta): Promise<boolean> {
    let found: StorageMeta;
    try {
      if ((await this.#fs.lstat(this.#dir)).kind !== "directory") return false;
      found = await readStorageMeta(this.#fs, this.#dir);
    } catch (error) {
      if (error instanceof NotFound || error instanceof NotADirectory) return false;
      throw error;
    }
    return found.header.id === meta.header.id && sameCommittedRange(found, meta);
  }

  /**
   * False when index.json is known to have changed since this manager published or read it: it is
   * missing, not a regular file, or of another size. True when nothing is known about it, or when
   * it cannot be looked at.
   */
  async #indexStillThere(): Promise<boolean> {
    const indexed = this.#indexed;
    if (indexed === undefined) return true;
    let info;
    try {
      info = await this.#fs.lstat(join(this.#dir, INDEX_FILE));
    } catch (error) {
      return !(error instanceof NotFound);
    }
    return info.kind === "file" && info.size === indexed.size;
  }

  #assertOpen(): void {
    if (this.#closed) {
      throw new SessionError("Session manager is closed", { file: this.getSessionFile() });
    }
  }

  /** Why a write `operation` cannot run now (closed, or read-only), or undefined. */
  #refusal(operation: string): SessionError | undefined {
    if (this.#closed) {
      return new SessionError("Session manager is closed", { file: this.getSessionFile() });
    }
    if (this.#readOnly) {
      return new SessionError(`Session was opened read-only; ${operation} is not allowed`, {
        file: this.getSessionFile(),
      });
    }
    return undefined;
  }

  /**
   * Runs `task` in the session's queue after every call queued before it. It closes the open
   * batch of saves, so a save called after this call runs after it.
   */
  #schedule<T>(task: () => Promise<T>): Promise<T> {
    this.#openBatch = undefined;
    return this.#queue.run(task);
  }

  /**
   * Runs `task` in the session's write queue, unless the session refuses `operation` (closed,
   * read-only), after settling any publication whose outcome is unknown. `replace`, a temp file
   * begun for the call (`#writeHeader`), is removed before the call settles unless it was staged.
   */
  #write<T>(
    operation: string,
    task: () => Promise<T>,
    replace?: PendingReplace,
  ): Promise<T> {
    return this.#schedule(async () => {
      try {
        const refused = this.#refusal(operation);
        if (refused !== undefined) throw refused;
        await this.#reconcile();
        return await task();
      } finally {
        await replace?.discard(); // a temp file begun for the call and not staged; never rejects
      }
    });
  }

  /**
   * `#write` for a call that replaces meta.json (a header change). When the session is idle and
   * the call `writes` (as the committed state shows at the call), the temp file of the new
   * meta.json is begun at the call, so its create overlaps the work before it is written, as a
   * save's does; `task` stages it (`#publishHeader`). Whatever happens, it is settled before the
   * call settles: a temp file the task did not use is removed.
   */
  #writeHeader<T>(
    operation: string,
    writes: boolean,
    task: (replace: PendingReplace | undefined) => Promise<T>,
  ): Promise<T> {
    const replace = writes && this.#canPrepareNow() ? this.#beginMetaReplace() : undefined;
    return this.#write(operation, () => task(replace), replace);
  }
}

/** The history part of the state `prepared` leads to. */
function historyOf(
  prepared: PreparedCommit,
): Pick<Committed, "arrays" | "count" | "roundCount" | "validator" | "lastLine" | "title"> {
  return {
    arrays: prepared.arrays,
    count: prepared.count,
    roundCount: prepared.roundCount,
    validator: prepared.validator,
    lastLine: prepared.lastLine,
    title: prepared.title,
  };
}

/**
 * One commit doing what `saves` (each prepared on the state the one before leads to) do in
 * order: the bytes of them all, joined once (from the last that writes a whole history: a new
 * generation, or a draft's history), the metadata arrays the latest one to give each gave, the
 * history and flags of the last. On a session not saved yet, the saves up to the first that writes
 * (creating its files) each hold the whole history, so the last of them decides; the ones after
 * it are prepared on it as on a saved session. A draft never follows a save that writes; were it
 * to, it is written as a new generation, never dropping the files.
 */
function mergePrepared(saves: readonly [PreparedCommit, ...PreparedCommit[]]): PreparedCommit {
  if (saves.length === 1) return saves[0]; // a save alone, as written when nothing was queued
  let merged = saves[0];
  let chunks = [merged.bytes];
  for (const second of saves.slice(1)) {
    const first = merged;
    const replaces = second.kind === "replace" || second.kind === "draft";
    const kind: PreparedCommit["kind"] = second.kind === "draft"
      ? first.kind === "draft" ? "draft" : "replace"
      : replaces
      ? "replace"
      : first.kind === "metadata"
      ? second.kind
      : first.kind;
    if (replaces) chunks = [second.bytes];
    else if (second.bytes.length > 0) chunks.push(second.bytes);
    const compactions = second.context?.compactions ?? first.context?.compactions;
    const checkpoints = second.context?.systemPromptCheckpoints ??
      first.context?.systemPromptCheckpoints;
    const context = compactions === undefined && checkpoints === undefined ? undefined : {
      ...(compactions !== undefined ? { compactions } : {}),
      ...(checkpoints !== undefined ? { systemPromptCheckpoints: checkpoints } : {}),
    };
    merged = {
      ...second,
      kind,
      first: replaces ? second.first : first.first,
      runtimeContexts: second.runtimeContexts ?? first.runtimeContexts,
      promptTimings: second.promptTimings ?? first.promptTimings,
      context,
      updatedAt: laterTime(second.updatedAt, first.updatedAt),
    };
  }
  return { ...merged, bytes: joinBytes(chunks.filter((chunk) => chunk.length > 0)) };
}

/**
 * The end of the run of `messages` (holding global indexes `base..`) that are the very objects in
 * `stored`, from `base` up to `limit`. `Object.is` rather than `===`: the two agree here (a stored
 * entry is always a message object, so NaN and -0 never arise), but V8 compiles `===` on objects
 * to a check that the operand is an object, which loads each message's header from memory (on a
 * long history, a cache miss per message: ~15 ns each at 100,000 messages), while `Object.is`
 * answers identical references from the pointers alone. Eight pairs are compared per step (the
 * first mismatch is then found one by one): about 2.5 ns per message against 5 ns one at a time,
 * which is most of what `commit()` costs beyond its floor on a long history.
 */
function identicalPrefix(
  messages: readonly Message[],
  stored: readonly Message[],
  base: number,
  limit: number,
): number {
  let i = base;
  let k = 0; // i - base: the position in `messages`
  const blocks = limit - 7;
  while (
    i < blocks &&
    Object.is(messages[k], stored[i]) && Object.is(messages[k + 1], stored[i + 1]) &&
    Object.is(messages[k + 2], stored[i + 2]) && Object.is(messages[k + 3], stored[i + 3]) &&
    Object.is(messages[k + 4], stored[i + 4]) && Object.is(messages[k + 5], stored[i + 5]) &&
    Object.is(messages[k + 6], stored[i + 6]) && Object.is(messages[k + 7], stored[i + 7])
  ) {
    i += 8;
    k += 8;
  }
  while (i < limit && Object.is(messages[k], stored[i])) {
    i++;
    k++;
  }
  return i;
}

/** The part of the committed history that index.json on disk covers. */
interface IndexCoverage {
  readonly start: number;
  readonly bytes: number;
  readonly count: number;
  readonly rounds: number;
  /** The byte length of the index.json this manager published or adopted. */
  readonly size: number;
}

function sameMeta(a: StorageMeta, b: StorageMeta): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

function sameRounds(a: readonly RoundEntry[], b: readonly RoundEntry[], count: number): boolean {
  if (a.length !== count) return false;
  for (let i = 0; i < count; i++) {
    if (a[i]?.messageIndex !== b[i]?.messageIndex || a[i]?.byteOffset !== b[i]?.byteOffset) {
      return false;
    }
  }
  return true;
}

/**
 * The [start, end) message range of a history page: the last `DEFAULT_PAGE_ROUNDS` user rounds
 * that begin before `before` (default: the total). `before` must be the total or a round start.
 * `roundStart(k)` is the message index of round k; rounds are strictly increasing.
 */
export function pageBounds(
  roundStart: (k: number) => number,
  roundCount: number,
  total: number,
  before: number | undefined,
): [number, number] {
  // Only `undefined` asks for the latest page; `-0` is the boundary 0.
  const end = before === undefined ? total : before === 0 ? 0 : before;
  if (!Number.isSafeInteger(end) || end < 0 || end > total) {
    throw new InvalidArgumentError(
      "before",
      `Invalid history boundary: ${preview(before)} (history has ${total} messages)`,
    );
  }
  // k = the number of rounds that start before `end` (binary search: rounds are increasing).
  let low = 0;
  let high = roundCount;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (roundStart(mid) < end) low = mid + 1;
    else high = mid;
  }
  const k = low;
  if (end !== total && end !== 0 && (k >= roundCount || roundStart(k) !== end)) {
    throw new InvalidArgumentError(
      "before",
      `History boundary ${end} is not at the start of a user round`,
    );
  }
  const first = k - DEFAULT_PAGE_ROUNDS;
  return [first <= 0 ? 0 : roundStart(first), end];
}

/**
 * A structured clone of `value`, a caller's argument the manager keeps; a value that cannot be
 * cloned (a function inside it, say) is a `SessionFormatError` naming `path` of `file`.
 */
function copyOf<T>(value: T, path: string, file: string): T {
  try {
    return structuredClone(value);
  } catch (error) {
    throw new SessionFormatError(`Invalid ${path}: not plain data`, { file, path, cause: error });
  }
}

/** The error for a history argument that is not an array. */
function notAnArray(messages: unknown, file: string): SessionFormatError {
  return new SessionFormatError("Invalid session messages: expected an array", {
    file,
    path: "messages",
    value: messages,
  });
}

/**
 * The later of two ISO times: a retried save never moves `updatedAt` backwards, and a batch takes
 * the time of its latest save.
 */
function laterTime(candidate: string, current: string): string {
  const existing = Date.parse(current);
  return Number.isFinite(existing) && existing > Date.parse(candidate) ? current : candidate;
}

/**
 * Serializes one message line (global index `index`); a value JSON cannot represent is a format
 * error, not a crash, and so is a message nested deeper than `MAX_MESSAGE_NESTING` levels,
 * whichever runtime writes it (see `refuseDeepMessage`).
 */
function serializeMessage(message: Message, index: number, file: string): string {
  let line: string;
  try {
    line = messageJson(message);
  } catch (error) {
    // Node's JSON.stringify overflows the stack past about 4,000 levels (Deno's writes any
    // depth): a message that deep is refused as every runtime refuses it.
    if (error instanceof RangeError) {
      checkNesting(message, MAX_MESSAGE_NESTING, INVALID_MESSAGE, { file }, `messages[${index}]`);
    }
    throw new SessionFormatError(`Message cannot be serialized: ${(error as Error).message}`, {
      file,
      path: `messages[${index}]`,
      cause: error,
    });
  }
  if (jsonNestsDeeper(message, line, MAX_MESSAGE_NESTING)) {
    refuseDeepMessage(message, file, `messages[${index}]`);
  }
  return line;
}

/**
 * The line JSON writes of `message` (global index `index` of `file`), to compare it with a saved
 * one: a value JSON cannot write (a BigInt, a circular reference) is refused as `serializeMessage`
 * refuses it in a new message. Undefined for a value JSON writes nothing of (not a message: the
 * validator refuses it). A line that differs from the saved one is serialized again when written,
 * and its nesting checked then (an equal one nests as the saved one).
 */
function comparedLine(message: unknown, index: number, file: string): string | undefined {
  try {
    return messageJson(message);
  } catch {
    return serializeMessage(message as Message, index, file); // throws the typed error
  }
}

/**
 * `JSON.stringify(message)`, or `fallback` should that fail (a saved message changed in place
 * since it was saved into one JSON cannot write: with no fallback, a new one then replaces it).
 */
function canonicalLine(message: unknown, fallback: string | undefined): string | undefined {
  try {
    return messageJson(message);
  } catch {
    return fallback;
  }
}

/**
 * `history` (what a save leads to) with its messages from `first` on (the ones it serialized)
 * replaced by copies parsed back from `bytes`, the lines it serialized: what the save writes,
 * whatever the caller does to its objects, or to earlier copies, later. Unlike a structured
 * clone, this never fails for a message the save accepted (a function JSON leaves out, a nesting
 * a runtime cannot clone): `JSON.parse` is iterative, and the lines are JSON the save wrote.
 */
function writtenCopies(
  history: readonly Message[],
  bytes: Uint8Array,
  first: number,
): Message[] {
  const messages = history.slice();
  // Line by line: a batch (or one line) longer than the runtimes decode at once is decoded in
  // pieces (`decodeLine`), never refused.
  let start = 0;
  for (let i = first; i < messages.length && start < bytes.length; i++) {
    let end = bytes.indexOf(0x0a, start);
    if (end < 0) end = bytes.length;
    messages[i] = JSON.parse(decodeLine(bytes.subarray(start, end))) as Message;
    start = end + 1;
  }
  return messages;
}

/**
 * Errors of saves refused when their meta.json was encoded (a header JSON cannot write): a
 * validation failure found late, so the save is not kept pending (see `#apply`).
 */
const refusedSaves = new WeakSet<object>();

/** Marks `error` (from encoding a save's meta.json) as refusing the save; returns it. */
function refusedBeforeCommit(error: unknown): unknown {
  if (typeof error === "object" && error !== null) refusedSaves.add(error);
  return error;
}

/** Throws `error`: the `prepare` of a save refused before it was queued. */
function throwing(error: Error): never {
  throw error;
}

/** The metadata arguments of a save, as the manager keeps them (see `ownMetadata`). */
interface SaveMetadata {
  readonly runtimeContexts: readonly RuntimeContextSnapshot[] | undefined;
  readonly promptTimings: readonly PromptTiming[] | undefined;
  readonly context: CommitContext | undefined;
}

/**
 * Copies the metadata arrays a save is given when the call is made: the caller may change its
 * arrays, or the records in them, as soon as the call returns, and what is validated when the
 * save's turn comes must be what is written. The manager never changes the copies (its getters
 * return copies of their own). A value that is not an array, or a context that is not an object,
 * is kept as given for the shape checks to reject with their usual error; an array that cannot be
 * copied (one holding a function, say), that nests deeper than a header may or that holds a value
 * JSON cannot write as it is (a BigInt, a Date, a Map, a Set, a boxed primitive) is refused with an error naming the field, which fails the save
 * when its turn comes, as a failed validation does (it is never kept pending).
 */
function ownMetadata(
  runtimeContexts: unknown,
  promptTimings: unknown,
  context: unknown,
  file: string,
): SaveMetadata {
  const own = (value: unknown, path: string): unknown => {
    if (!Array.isArray(value)) return value;
    let copy: unknown[];
    try {
      // Spread first: the array may be a Proxy, which structuredClone refuses.
      copy = structuredClone([...value]);
    } catch (error) {
      throw new SessionFormatError(
        `Invalid session metadata: it cannot be copied (${(error as Error).message})`,
        { file, path, cause: error },
      );
    }
    // As a load checks the header it is written in (the arrays sit at its level 2), and for a
    // value JSON cannot write (a BigInt): refused now, never found by the write, which would
    // leave a pending save that can never be written.
    checkJsonData(copy, MAX_HEADER_NESTING, "Invalid session metadata", { file }, path, 2);
    return copy;
  };
  let ownContext = context;
  if (typeof context === "object" && context !== null) {
    const { compactions, systemPromptCheckpoints } = context as CommitContext;
    ownContext = {
      ...(compactions !== undefined ? { compactions: own(compactions, "header.compactions") } : {}),
      ...(systemPromptCheckpoints !== undefined
        ? {
          systemPromptCheckpoints: own(systemPromptCheckpoints, "header.systemPromptCheckpoints"),
        }
        : {}),
    };
  }
  return {
    runtimeContexts: own(runtimeContexts, "header.runtimeContexts") as SaveMetadata[
      "runtimeContexts"
    ],
    promptTimings: own(promptTimings, "header.promptTimings") as SaveMetadata["promptTimings"],
    context: ownContext as CommitContext | undefined,
  };
}

/**
 * Checks the metadata arrays a commit passes before anything else (rules: "It validates the
 * metadata first"): each must be an array of records of the right shape. Their anchors in the
 * history are checked once the history is validated.
 */
function checkMetadataShapes(
  runtimeContexts: unknown,
  promptTimings: unknown,
  context: CommitContext | undefined,
  file: string,
): void {
  if (context !== undefined && (typeof context !== "object" || context === null)) {
    throw new SessionFormatError("Invalid commit context: expected an object", {
      file,
      path: "context",
      value: context,
    });
  }
  validateRuntimeContexts(runtimeContexts, undefined, { file, path: "header.runtimeContexts" });
  validatePromptTimings(promptTimings, undefined, { file, path: "header.promptTimings" });
  validateCompactions(context?.compactions, undefined, { file, path: "header.compactions" });
  validateSystemPromptCheckpoints(context?.systemPromptCheckpoints, undefined, {
    file,
    path: "header.systemPromptCheckpoints",
  });
}

/**
 * True when `path` is a regular file, false when it does not exist. Anything else (a symlink, a
 * directory) is refused with a `SessionFormatError`: session files are never read or written
 * through a link.
 */
async function isRegularFile(fs: FileSystem, path: string): Promise<boolean> {
  const [info] = await Promise.allSettled([promiseOf(() => fs.lstat(path))]);
  return isRegularFileInfo(info, path);
}

/** `isRegularFile` for an lstat already settled. */
function isRegularFileInfo(info: PromiseSettledResult<FileInfo>, path: string): boolean {
  if (info.status === "rejected") {
    if (info.reason instanceof NotFound) return false;
    throw info.reason;
  }
  refuseIrregularFile(info.value.kind, path);
  return true;
}
