/**
 * Verification and salvage of Loop session directories. `verifySession` checks everything a
 * full open checks (and the round index) and reports every finding with the file, byte offset
 * and message index, without modifying anything. `salvageSession` copies the longest valid
 * prefix of a damaged session (a session directory, or a legacy version-2 file that cannot be
 * migrated) into a new session and leaves the original untouched.
 *
 * @module
 */
import type { EntryKind, FileHandle, FileSystem } from "../port/fs.ts";
import { joinBytes } from "../port/bytes.ts";
import { FsError, NotFound } from "../port/errors.ts";
import type { Sha256Factory } from "../port/sha256.ts";
import {
  atomicReplace,
  type Durability,
  ensurePrivateDir,
  entryKind,
  PRIVATE_DIR_MODE,
  readDirIfExists,
  stagedPublish,
} from "../port/durable.ts";
import { basename, dirname, join, normalize } from "../port/path.ts";
import {
  InvalidArgumentError,
  preview,
  SessionBusyError,
  SessionError,
  SessionFormatError,
  SessionNotFoundError,
  ToolPairingError,
} from "./errors.ts";
import {
  fallbackTitle,
  isSessionId,
  type Message,
  type MessageRole,
  MessageValidator,
  type SessionHeader,
  validateCompactions,
  validatePromptTimings,
  validateRuntimeContexts,
  validateSessionMetadata,
  validateSystemPromptCheckpoints,
} from "./records/mod.ts";
import {
  cwdState,
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
  openSessionFile,
  readRoundIndexWithin,
  readStorageMeta,
  recordsTitle,
  refuseIrregularFile,
  type RoundEntry,
  type RoundIndex,
  STORAGE_FORMAT,
  STORAGE_VERSION,
  type StorageMeta,
} from "./storage.ts";
import { ensureCollectionDir, sessionNotADirectory } from "./session_manager.ts";
import { LineWriter } from "./line_writer.ts";
import { LEGACY_EXTENSION, readLegacyPrefix } from "./legacy.ts";
import {
  damagedCompactionError,
  damagedCompactionOf,
  previousSession,
  stagingSessionId,
} from "./compaction.ts";
import { inspectDeletion, isDeleteStagingName } from "./archive.ts";
import { jsonNestsDeeper, MAX_MESSAGE_NESTING, refuseDeepMessage } from "./records/_validation.ts";
import { messageJson } from "./records/_json_text.ts";

/** The severity of a verification finding. */
export type FindingSeverity = "error" | "warning";

/** One thing `verifySession` found. */
export interface VerifyFinding {
  /** `"error"`: the session cannot be opened as is; `"warning"`: derived data to rebuild. */
  readonly severity: FindingSeverity;
  /**
   * A stable kind: `file`, `meta`, `short-log`, `checksum`, `line`, `count`, `metadata`, `cwd`,
   * `index`. `line` is a message problem in messages.jsonl (a line that is not a valid message,
   * or a history ending with tool calls that have no result), with its message index and offset.
   */
  readonly kind: string;
  /** What was found, in a sentence. */
  readonly message: string;
  /** The file the finding is about. */
  readonly file: string;
  /** The absolute byte offset in the file of the first bad byte, when known. */
  readonly offset?: number;
  /** The index of the first bad message, when known. */
  readonly messageIndex?: number;
}

/** The result of `verifySession`. */
export interface VerifyReport {
  /** The session directory. */
  readonly dir: string;
  /** True when no finding is an error. */
  readonly ok: boolean;
  /**
   * The committed metadata, when meta.json could be read. When a `metadata` finding reports one of
   * the header's metadata arrays (runtime contexts, prompt timings, compactions, system prompt
   * checkpoints), that array is as read: the rest of the session is verified all the same.
   */
  readonly meta: StorageMeta | undefined;
  /** Valid messages counted from the start of the committed range. */
  readonly validMessages: number;
  /** Every finding, errors first. */
  readonly findings: readonly VerifyFinding[];
}

/** Options of `verifySession` and `salvageSession`. */
export interface VerifyOptions {
  /** The SHA-256 factory (use the adapter's native one for big sessions). */
  readonly sha256: Sha256Factory;
  /** Check that the recorded cwd exists (default true). */
  readonly checkCwd?: boolean;
  /**
   * The session id the directory holds, when it is not named by it (a copy an interrupted delete
   * or compaction staged): `header.id` must be this id, as it must be the name of a directory
   * named by an id.
   */
  readonly id?: string;
}

interface ScanResult {
  readonly messages: Message[];
  readonly roles: MessageRole[];
  /** Offsets (relative to the range start) of each valid message, plus the end of the last one. */
  readonly offsets: number[];
  /** Number of messages after which no tool call was unanswered (the longest closed prefix). */
  readonly closedPrefix: number;
  readonly firstBad: { offset: number; index: number; message: string } | undefined;
  /**
   * When every line is valid but tool calls are still unanswered at the end of the history: the
   * assistant message that made the first of them (the message open names) and why.
   */
  readonly unfinished: { offset: number; index: number; message: string } | undefined;
  readonly digest: string;
  readonly lines: number;
  readonly fileSize: number;
}

/**
 * Reads `[start, start+bytes)` of the log (or less when the file is shorter), hashing all of it,
 * and validates lines until the first bad one.
 */
async function scanRange(
  fs: FileSystem,
  file: string,
  meta: StorageMeta,
  sha256: Sha256Factory,
): Promise<ScanResult> {
  const hash = sha256();
  const messages: Message[] = [];
  const roles: MessageRole[] = [];
  const offsets: number[] = [0];
  let closedPrefix = 0;
  let firstBad: ScanResult["firstBad"];
  let lines = 0;
  let fileSize = 0;
  const validator = new MessageValidator({ file });
  let opened;
  try {
    // Never through a link, even one swapped in since the directory was listed.
    opened = await openSessionFile(fs, file);
  } catch (error) {
    if (error instanceof NotFound) {
      return {
        messages,
        roles,
        offsets,
        closedPrefix,
        firstBad: meta.bytes > 0
          ? { offset: meta.start, index: 0, message: "message log is missing" }
          : undefined,
        unfinished: undefined,
        digest: hash.digestHex(),
        lines,
        fileSize,
      };
    }
    throw error;
  }
  const handle = opened.handle;
  try {
    fileSize = await opened.size();
    const end = Math.min(fileSize, meta.start + meta.bytes);
    const chunkSize = 4 * 1024 * 1024;
    // The pieces of a line begun in earlier chunks, joined once when its newline comes: a line
    // of hundreds of megabytes costs one copy, not one per chunk.
    let carried: Uint8Array[] = [];
    let carriedOffset = 0;
    for (let position = meta.start; position < end;) {
      const chunk = await handle.read(position, Math.min(chunkSize, end - position));
      if (chunk.length === 0) break;
      hash.update(chunk);
      const chunkOffset = position - meta.start;
      let lineStart = 0;
      for (;;) {
        const newline = chunk.indexOf(10, lineStart);
        if (newline < 0) break;
        const joined = carried.length > 0;
        const offset = joined ? carriedOffset : chunkOffset + lineStart;
        if (firstBad === undefined) {
          const bytes = joined
            ? joinBytes([...carried, chunk.subarray(0, newline)])
            : chunk.subarray(lineStart, newline);
          try {
            const text = decodeLine(bytes);
            let value: unknown;
            try {
              value = JSON.parse(text);
            } catch (error) {
              throw new SessionFormatError(`invalid JSON (${(error as Error).message})`, {
                path: `messages[${lines}]`,
              });
            }
            validator.push(value, lines);
            // As open refuses it (and a salvage could not write it on every runtime): a message
            // nested deeper than `MAX_MESSAGE_NESTING` levels. A short line is not looked at.
            if (jsonNestsDeeper(value, text, MAX_MESSAGE_NESTING)) {
              refuseDeepMessage(value, file, `messages[${lines}]`);
            }
            messages.push(value as Message);
            roles.push((value as Message).role);
            offsets.push(chunkOffset + newline + 1);
            if (validator.pendingToolCallIds.length === 0) closedPrefix = lines + 1;
          } catch (error) {
            firstBad = {
              offset: meta.start + offset,
              index: lines,
              message: (error as Error).message,
            };
          }
        }
        carried = [];
        lines++;
        lineStart = newline + 1;
      }
      if (lineStart < chunk.length) {
        if (carried.length === 0) carriedOffset = chunkOffset + lineStart;
        carried.push(chunk.slice(lineStart)); // a copy: the port does not promise a fresh buffer
      }
      position += chunk.length;
    }
    if (carried.length > 0 && firstBad === undefined) {
      firstBad = {
        offset: meta.start + carriedOffset,
        index: lines,
        message: "the committed range ends inside a line (no final newline)",
      };
    }
  } finally {
    await handle.close();
  }
  let unfinished: ScanResult["unfinished"];
  if (firstBad === undefined) {
    try {
      validator.finish();
    } catch (error) {
      // The end-of-history rule, checked as open checks it: the same message and message index.
      if (!(error instanceof ToolPairingError)) throw error;
      unfinished = {
        offset: meta.start + (offsets[error.messageIndex] as number),
        index: error.messageIndex,
        message: error.message,
      };
    }
  }
  return {
    messages,
    roles,
    offsets,
    closedPrefix,
    firstBad,
    unfinished,
    digest: hash.digestHex(),
    lines,
    fileSize,
  };
}

/** The files of a session directory an open reads (and must be regular files). */
const SESSION_FILES = [META_FILE, MESSAGES_FILE];

/**
 * Why the session directory `dir` or one of its files cannot be read as is: the directory is not
 * a directory itself (a symlink), or meta.json or messages.jsonl is not a regular file (a link, a
 * directory, a FIFO…); and the kind of index.json (derived data: one that is not a regular file
 * is never read, and the next page read by a writer replaces it). The directory is listed, links are never
 * followed, nothing is opened. A missing directory or file is no finding here (reading it reports
 * it).
 */
export async function irregularSessionFiles(
  fs: FileSystem,
  dir: string,
): Promise<{ readonly errors: SessionFormatError[]; readonly indexKind?: EntryKind }> {
  const kind = await entryKind(fs, dir);
  if (kind === undefined) return { errors: [] };
  if (kind !== "directory") {
    return {
      errors: [
        sessionNotADirectory(dir),
      ],
    };
  }
  const kinds = new Map((await fs.readDir(dir)).map((entry) => [entry.name, entry.kind]));
  const errors: SessionFormatError[] = [];
  const indexKind = kinds.get(INDEX_FILE);
  for (const name of SESSION_FILES) {
    const entryKind = kinds.get(name);
    if (entryKind === undefined) continue;
    try {
      refuseIrregularFile(entryKind, join(dir, name));
    } catch (error) {
      if (!(error instanceof SessionFormatError)) throw error;
      errors.push(error);
    }
  }
  return indexKind === undefined ? { errors } : { errors, indexKind };
}

/**
 * Checks a version-3 session directory: meta.json, the committed range (length, line count,
 * SHA-256, every message and the tool call pairing), the header's metadata rules, the cwd and
 * index.json. Reads only; reports every finding instead of throwing (storage errors other than
 * missing files still throw). A directory that is not one itself, or a session file that is not a
 * regular file (a symlink…), is an error finding (kind `file`) and nothing is read through it.
 * A session another process changes meanwhile is verified again, a few times at most: one that
 * published a new meta.json, and one found missing between a compaction's two renames, which is
 * verified where the store reads it then (the compaction's previous copy, or in place again).
 * The report names `dir` either way.
 */
export async function verifySession(
  fs: FileSystem,
  dir: string,
  options: VerifyOptions,
): Promise<VerifyReport> {
  // Where the session is read: `dir`, or, between a compaction's two renames (the directory
  // missing for a moment), the previous copy the compaction staged, where the store reads it then.
  let source = dir;
  for (let attempt = 1;; attempt++) {
    const report = await verifyOnce(
      fs,
      source,
      source === dir ? options : { ...options, id: options.id ?? basename(dir) },
    );
    // Findings made while another process published a new meta.json (a compaction swapped the
    // directory, or a save landed) may come from two states mixed: verified again, a few times
    // at most. A clean report describes the one state it read.
    if (report.ok || attempt >= VERIFY_TRIES) return { ...report, dir };
    if (report.meta === undefined) {
      if (!MISSING.has(report)) return { ...report, dir };
      // The session was not there: in place again, or staged by a compaction meanwhile.
      const inPlace = await entryKind(fs, dir) === "directory" &&
        await entryKind(fs, join(dir, META_FILE)) !== undefined;
      const next = inPlace ? dir : await compactionCopy(fs, dir);
      if (next === undefined) {
        // Moved away by a compaction whose previous copy is damaged: said so, as listings say it.
        const damaged = await damagedCompactionOf(fs, dir);
        // A compaction that finished meanwhile put the session back in place (before it removed
        // its previous copy): verified there again.
        if (await entryKind(fs, join(dir, META_FILE)) !== undefined) {
          source = dir;
          continue;
        }
        if (damaged === undefined) return { ...report, dir };
        const error = damagedCompactionError(damaged);
        const finding: VerifyFinding = {
          severity: "error",
          kind: "file",
          message: error.message,
          file: error.file as string,
        };
        return { ...report, dir, findings: [...report.findings, finding] };
      }
      source = next;
      continue;
    }
    if (!(await metaChanged(fs, source, report.meta))) return { ...report, dir };
    source = dir;
  }
}

/** Reports of a pass that found the session directory or its meta.json missing. */
const MISSING = new WeakSet<VerifyReport>();

/**
 * The previous copy `<staging>/previous` a compaction staged for session directory `dir` (a real
 * directory holding a regular meta.json), or undefined when none is there. Only the store's own
 * staging names (`.staging-<id>-<8 hex>`) count.
 */
async function compactionCopy(fs: FileSystem, dir: string): Promise<string | undefined> {
  const id = basename(dir);
  if (!isSessionId(id)) return undefined;
  const collection = dirname(dir);
  for (const entry of await readDirIfExists(fs, collection)) {
    if (entry.kind !== "directory" || stagingSessionId(entry.name) !== id) continue;
    const previous = await previousSession(fs, join(collection, entry.name));
    if (previous !== undefined) return previous;
  }
  return undefined;
}

/** How many times `verifySession` and a salvage read a session that changes meanwhile. */
const VERIFY_TRIES = 3;

/**
 * True when `dir`'s meta.json no longer describes the committed range `meta` does, or is gone
 * (between a compaction's two renames the directory is missing for a moment).
 */
async function metaChanged(fs: FileSystem, dir: string, meta: StorageMeta): Promise<boolean> {
  let now: StorageMeta;
  try {
    now = await readStorageMeta(fs, dir, false, true);
  } catch (error) {
    if (error instanceof NotFound) return true;
    if (error instanceof SessionError || error instanceof FsError) return false; // as read
    throw error;
  }
  return now.generation !== meta.generation || now.start !== meta.start ||
    now.bytes !== meta.bytes || now.messageCount !== meta.messageCount;
}

/** One pass of `verifySession`. */
async function verifyOnce(
  fs: FileSystem,
  dir: string,
  options: VerifyOptions,
): Promise<VerifyReport> {
  const metaFile = join(dir, META_FILE);
  const logFile = join(dir, MESSAGES_FILE);
  const findings: VerifyFinding[] = [];
  // Nothing is read through a link: a session file that is not a regular file is an error, and
  // the session is not read further (opening it refuses it too).
  let listed: Awaited<ReturnType<typeof irregularSessionFiles>>;
  try {
    listed = await irregularSessionFiles(fs, dir);
  } catch (error) {
    // Gone since its kind was seen (a compaction or a delete moved it meanwhile).
    if (!(error instanceof NotFound)) throw error;
    const report: VerifyReport = {
      dir,
      ok: false,
      meta: undefined,
      validMessages: 0,
      findings: [{ severity: "error", kind: "meta", message: error.message, file: metaFile }],
    };
    MISSING.add(report);
    return report;
  }
  const { errors: irregular, indexKind } = listed;
  for (const error of irregular) {
    findings.push({
      severity: "error",
      kind: "file",
      message: error.message,
      file: error.file ?? dir,
    });
  }
  if (findings.length > 0) return { dir, ok: false, meta: undefined, validMessages: 0, findings };
  let meta: StorageMeta;
  try {
    // Its kind was just listed. The header's metadata arrays are checked below, after the log, in
    // the version-2 order an open follows: an array of the wrong shape hides no log finding.
    meta = await readStorageMeta(fs, dir, true, true);
  } catch (error) {
    if (error instanceof SessionError || error instanceof NotFound) {
      findings.push({
        severity: "error",
        kind: "meta",
        message: (error as Error).message,
        file: metaFile,
      });
      const report: VerifyReport = { dir, ok: false, meta: undefined, validMessages: 0, findings };
      if (error instanceof NotFound || error instanceof SessionNotFoundError) MISSING.add(report);
      return report;
    }
    throw error;
  }
  const name = basename(dir);
  const expected = options.id ?? (isSessionId(name) ? name : undefined);
  if (expected !== undefined && meta.header.id !== expected) {
    // As open and listing refuse it: a directory holding another session (a copy) is not that
    // session. A directory not named by an id (a staged or salvaged copy) is checked against the
    // id given for it, if any.
    findings.push({
      severity: "error",
      kind: "meta",
      message: options.id === undefined
        ? `header.id ${JSON.stringify(meta.header.id)} does not match the directory name`
        : `header.id ${JSON.stringify(meta.header.id)} is not the session's id ${
          JSON.stringify(options.id)
        }`,
      file: metaFile,
    });
  }
  const scan = await scanRange(fs, logFile, meta, options.sha256);
  const end = meta.start + meta.bytes;
  if (scan.fileSize < end) {
    findings.push({
      severity: "error",
      kind: "short-log",
      message: `the message log has ${scan.fileSize} bytes but the committed range ends at ${end}`,
      file: logFile,
      offset: scan.fileSize,
    });
  } else if (scan.digest !== meta.generation) {
    findings.push({
      severity: "error",
      kind: "checksum",
      message: `the committed bytes hash to ${scan.digest}, meta.json says ${meta.generation}`,
      file: logFile,
      ...(scan.firstBad === undefined
        ? {}
        : { offset: scan.firstBad.offset, messageIndex: scan.firstBad.index }),
    });
  }
  const checkMetadata = (roles: readonly MessageRole[] | undefined): void => {
    try {
      validateSessionMetadata(meta.header, roles, { file: metaFile });
    } catch (error) {
      if (!(error instanceof SessionError)) throw error;
      findings.push({
        severity: "error",
        kind: "metadata",
        message: error.message,
        file: metaFile,
      });
    }
  };
  if (scan.firstBad !== undefined) {
    findings.push({
      severity: "error",
      kind: "line",
      message: `message #${scan.firstBad.index} is not valid: ${scan.firstBad.message}`,
      file: logFile,
      offset: scan.firstBad.offset,
      messageIndex: scan.firstBad.index,
    });
  } else if (scan.lines !== meta.messageCount) {
    findings.push({
      severity: "error",
      kind: "count",
      message:
        `the committed range holds ${scan.lines} messages, meta.json says ${meta.messageCount}`,
      file: metaFile,
    });
  }
  // Without every message's role, the arrays' shapes alone.
  if (scan.firstBad !== undefined || scan.lines !== meta.messageCount) checkMetadata(undefined);
  else {
    if (scan.unfinished !== undefined) {
      // A message problem, as open reports it: in messages.jsonl, at the assistant message whose
      // tool calls have no result.
      findings.push({
        severity: "error",
        kind: "line",
        message: scan.unfinished.message,
        file: logFile,
        offset: scan.unfinished.offset,
        messageIndex: scan.unfinished.index,
      });
    }
    checkMetadata(scan.roles);
  }
  if (options.checkCwd !== false) {
    // A cwd that cannot be looked at (a storage error such as a denied permission; a path no
    // directory can have is gone, see `cwdState`) fails an open as well: reported, and the rest
    // is still verified.
    let state: Awaited<ReturnType<typeof cwdState>> | FsError;
    try {
      state = await cwdState(fs, meta.header.cwd);
    } catch (error) {
      if (!(error instanceof FsError)) throw error;
      state = error;
    }
    if (state !== "directory") {
      findings.push({
        severity: "error",
        kind: "cwd",
        message: state === "gone"
          ? `cwd no longer exists: ${meta.header.cwd}`
          : state === "not-directory"
          ? `cwd is not a directory: ${meta.header.cwd}`
          : `cwd cannot be checked: ${state.message}`,
        file: metaFile,
      });
    }
  }
  // Read within the size an index of the committed counts can have: a larger file is not parsed.
  // An index that cannot be read is not used (as readers do not use it): a warning, and the rest
  // is still verified.
  let read: Awaited<ReturnType<typeof readRoundIndexWithin>> | undefined;
  let unreadable = false;
  try {
    read = indexKind === undefined || indexKind === "file"
      ? await readRoundIndexWithin(fs, dir, indexKind === "file", meta)
      : undefined;
  } catch (error) {
    if (!(error instanceof FsError)) throw error;
    unreadable = true;
    findings.push({
      severity: "warning",
      kind: "index",
      message:
        `index.json cannot be read (${error.message}); the next page read by a writer replaces it`,
      file: join(dir, INDEX_FILE),
    });
  }
  const index = read === undefined || "oversized" in read ? undefined : read;
  if (indexKind !== undefined && indexKind !== "file") {
    findings.push({
      severity: "warning",
      kind: "index",
      message: `index.json is ${
        indexKind === "other" ? "a special file" : `a ${indexKind}`
      }, not a regular file; it is not read, and the next page read by a writer replaces it`,
      file: join(dir, INDEX_FILE),
    });
  } else if (read !== undefined && "oversized" in read) {
    findings.push({
      severity: "warning",
      kind: "index",
      message:
        `index.json is larger than an index of the committed range can be (at most ${read.oversized} bytes); it is not parsed, and the next page read by a writer rebuilds it`,
      file: join(dir, INDEX_FILE),
    });
  } else if (index === undefined) {
    // One that cannot be read was reported so above: not said to be missing or malformed too.
    if (!unreadable) {
      findings.push({
        severity: "warning",
        kind: "index",
        message: "index.json is missing or malformed; the next page read by a writer rebuilds it",
        file: join(dir, INDEX_FILE),
      });
    }
  } else if (
    !indexMatches(index, meta) && !(index.start === meta.start && index.bytes < meta.bytes)
  ) {
    findings.push({
      severity: "warning",
      kind: "index",
      message:
        "index.json does not describe the committed range; the next page read by a writer rebuilds it",
      file: join(dir, INDEX_FILE),
    });
  } else if (scan.firstBad === undefined) {
    const wrong = indexDisagreement(index, scan);
    if (wrong !== undefined) {
      findings.push({
        severity: "warning",
        kind: "index",
        message:
          `index.json ${wrong}; readers trust it (page reads, listing counts and titles): the next page read by a writer rebuilds it`,
        file: join(dir, INDEX_FILE),
      });
    }
  }
  findings.sort((a, b) => (a.severity === b.severity ? 0 : a.severity === "error" ? -1 : 1));
  return {
    dir,
    ok: findings.every((f) => f.severity !== "error"),
    meta,
    validMessages: scan.firstBad?.index ?? scan.lines,
    findings,
  };
}

/**
 * What is wrong with an index that describes the committed range (or a prefix of it) of the
 * scanned messages, all valid: rounds that are not the user messages it covers, with their
 * offsets, or a recorded fallback title that is not theirs. Undefined when it agrees.
 */
function indexDisagreement(index: RoundIndex, scan: ScanResult): string | undefined {
  const covered = index.messageCount;
  if (covered > scan.messages.length || scan.offsets[covered] !== index.bytes) {
    return `covers ${covered} messages in ${index.bytes} bytes, which do not end at a line`;
  }
  let k = 0;
  for (let i = 0; i < covered; i++) {
    if (scan.roles[i] !== "user") continue;
    const round = index.rounds[k++];
    if (round?.messageIndex !== i || round.byteOffset !== scan.offsets[i]) {
      return `does not list user message #${i} at byte ${scan.offsets[i]} as round ${k - 1}`;
    }
  }
  if (k !== index.rounds.length) return `lists ${index.rounds.length} rounds, not ${k}`;
  if (index.fallbackTitle === undefined) return undefined;
  const title = fallbackTitle(scan.messages.slice(0, covered)) ?? null;
  return recordsTitle(index, title)
    ? undefined
    : `records the fallback title ${
      JSON.stringify(index.fallbackTitle)
    }, but the messages it covers give ${JSON.stringify(title)}`;
}

/** Options of `salvageSession`. */
export interface SalvageOptions extends VerifyOptions {
  /** The collection directory to create the salvaged session in. */
  readonly toCollection: string;
  /** The new session id; default a random UUID. */
  readonly id?: string;
  /** The clock for `updatedAt`, in Unix milliseconds; default `Date.now`. */
  readonly now?: () => number;
  /** Durability of the new session's files; default `"full"`. */
  readonly durability?: Durability;
}

/** The result of `salvageSession`. */
export interface SalvageResult {
  /** The new session's directory. */
  readonly dir: string;
  /** The new session's id. */
  readonly id: string;
  /** Messages kept (the longest valid prefix that leaves no tool call unanswered). */
  readonly kept: number;
  /** Messages of the damaged session's committed range that were not kept. */
  readonly dropped: number;
  /**
   * The header metadata that lost entries because they referred to messages that were not kept
   * (or were invalid themselves): each of `runtimeContexts`, `promptTimings`, `compactions` and
   * `systemPromptCheckpoints` keeps its longest prefix of entries that is valid against the kept
   * messages, and is named here when that prefix is shorter than the array; `title` when a
   * stored title named a message that was not kept.
   */
  readonly droppedMetadata: readonly string[];
}

/** True when `check` accepts `value`. */
function validates(check: (value: unknown) => void, value: unknown): boolean {
  try {
    check(value);
    return true;
  } catch {
    return false;
  }
}

/**
 * The longest prefix of `entries` that `check` accepts (`entries` itself is not): found by halving,
 * since the rules of a metadata array hold for every prefix of a valid one (each entry valid and
 * anchored in the history, anchors increasing); checked, so the prefix returned is always valid.
 */
function longestValidPrefix(check: (value: unknown) => void, entries: unknown[]): unknown[] {
  let valid = 0;
  let invalid = entries.length;
  if (!validates(check, [])) return [];
  while (invalid - valid > 1) {
    const middle = valid + Math.floor((invalid - valid) / 2);
    if (validates(check, entries.slice(0, middle))) valid = middle;
    else invalid = middle;
  }
  return entries.slice(0, valid);
}

/** Refuses (`InvalidArgumentError`) a salvage id that is not a session id (a lowercase UUID). */
export function checkSalvageId(id: string): void {
  if (!isSessionId(id)) {
    throw new InvalidArgumentError(
      "id",
      `Invalid session id for the salvaged copy: ${preview(id)} (expected a lowercase UUID)`,
    );
  }
}

/**
 * Refuses (`SessionBusyError`, naming the entry) the id `id` when `collection` already uses it in
 * any form: anything at `<id>` (a session directory, a link, a file), anything at `<id>.jsonl` (a
 * legacy session not migrated yet, which a directory `<id>/` would hide from listings and opens,
 * or the backup of a migrated one), a staging directory of a migration or compaction of it, or an
 * uncommitted delete that names it (whose rollback would put it back). Reads only.
 */
async function refuseUsedId(fs: FileSystem, collection: string, id: string): Promise<void> {
  const used = (name: string, what: string): SessionBusyError =>
    new SessionBusyError(`A session ${id} already exists in the target collection (${what})`, {
      file: join(collection, name),
    });
  for (const entry of await fs.readDir(collection)) {
    if (entry.name === id) throw used(entry.name, `a ${entry.kind} at its name`);
    if (entry.name === id + LEGACY_EXTENSION) {
      throw used(entry.name, `a ${entry.kind} at its legacy file name`);
    }
    if (entry.kind !== "directory") continue;
    if (stagingSessionId(entry.name) === id) {
      throw used(entry.name, "a staging directory of a migration or compaction of it");
    }
    if (isDeleteStagingName(entry.name)) {
      const deletion = await inspectDeletion(fs, collection, entry.name);
      if (
        deletion !== undefined &&
        (deletion.ids.includes(id) || deletion.movedBack.includes(id) ||
          deletion.directories.has(id) || deletion.legacy.has(id))
      ) {
        throw used(entry.name, "an uncommitted delete that staged it");
      }
    }
  }
}

/**
 * Copies the longest valid prefix of the session in `dir` into a new session directory under
 * `toCollection` (built in a staging directory and renamed into place). The original is only
 * read. Metadata entries that refer past the kept prefix (a stored title naming a message that
 * was not kept included) are dropped, the entries before them kept, and the arrays listed. It takes no lock: where other processes may work on
 * `toCollection`, use `SessionStore.salvage`, which runs this under the collection's lock (a
 * cleanup there would otherwise remove the staging directory).
 *
 * `dir` may also be a legacy version-2 file (a path ending in `.jsonl`), such as one whose damage
 * makes its migration fail: its header must be valid by the legacy reader's rules (format and
 * version, then its fields; its id is not compared with the file name and the recorded cwd is not
 * checked), and its messages are validated as the migration validates them (JSON, the version-2
 * reader's rules for blank lines and trailing whitespace, each message, its nesting, tool call
 * pairing) up to the first record that is not valid; those kept are the longest prefix before it
 * that leaves no tool call unanswered. The new session is a version-3 directory like any other
 * salvage's.
 *
 * @throws {InvalidArgumentError} When `options.id` is not a session id (a lowercase UUID), before
 * anything is read or written.
 * @throws {SessionNotFoundError} When `dir` (a session directory) has no meta.json, or is
 * missing: naming meta.json; for a legacy file, when it is missing, naming it. Before anything is
 * written.
 * @throws {SessionFormatError} When `dir` is not a directory itself, or meta.json or
 * messages.jsonl is not a regular file (nothing is read through a link). index.json is never read:
 * one that is not a regular file (a link…) is ignored, and the new session gets its own. For a
 * legacy file: when it is not a regular file, is empty, or its header is not valid JSON or has an
 * invalid field (naming the file and the field).
 * @throws {UnsupportedSessionError} For a legacy file whose header is of another format or
 * version.
 * @throws {SessionBusyError} When `toCollection` already uses the id `options.id` in any form: a
 * session directory or anything else at `<id>`, a legacy file `<id>.jsonl`, or a staging or
 * uncommitted delete directory of that session.
 */
export async function salvageSession(
  fs: FileSystem,
  dir: string,
  options: SalvageOptions,
): Promise<SalvageResult> {
  if (options.id !== undefined) checkSalvageId(options.id);
  const source = isLegacySalvageSource(dir)
    ? await legacyPrefix(fs, dir)
    : await directoryPrefix(fs, dir, options.sha256);
  const messages = source.messages;
  const kept = messages.length;
  const roles = messages.map((message) => message.role);
  const droppedMetadata: string[] = [];
  const header: Record<string, unknown> = { ...source.header };
  const checks: [string, (value: unknown) => void][] = [
    ["runtimeContexts", (v) => validateRuntimeContexts(v, roles)],
    ["promptTimings", (v) => validatePromptTimings(v, roles)],
    ["compactions", (v) => validateCompactions(v, roles)],
    ["systemPromptCheckpoints", (v) => validateSystemPromptCheckpoints(v, roles)],
  ];
  for (const [key, check] of checks) {
    const value = header[key];
    if (value === undefined || validates(check, value)) continue;
    droppedMetadata.push(key);
    const entries = Array.isArray(value) ? longestValidPrefix(check, value) : [];
    // An empty array is left out of a header, as a save leaves it out.
    if (entries.length > 0) header[key] = entries;
    else delete header[key];
  }
  // A stored title is kept when every message it names was kept.
  const title = header.title as { readonly messageIndices?: readonly number[] } | undefined;
  if (title !== undefined && !(title.messageIndices ?? []).every((index) => index < kept)) {
    droppedMetadata.push("title");
    delete header.title;
  }
  const id = options.id ?? globalThis.crypto.randomUUID();
  const now = new Date((options.now ?? Date.now)()).toISOString();
  header.id = id;
  header.updatedAt = now;
  // A session directory's kept lines are copied as they are (a number JSON cannot hold exactly,
  // an escape, the spacing of a migrated line: what its open reads). Otherwise each message is
  // serialized and encoded once. A user message's round starts where its line does. Each was
  // parsed from JSON and is within `MAX_MESSAGE_NESTING` (the scan stops at a deeper line, as at
  // any bad line), which JSON.stringify writes on every runtime.
  const rounds: RoundEntry[] = [];
  let bytes: Uint8Array;
  if (source.lines !== undefined) {
    const { offsets } = source.lines;
    bytes = source.lines.bytes;
    messages.forEach((m, i) => {
      if (m.role === "user") rounds.push({ messageIndex: i, byteOffset: offsets[i] as number });
    });
  } else {
    const writer = new LineWriter(4096);
    messages.forEach((m, i) => {
      if (m.role === "user") rounds.push({ messageIndex: i, byteOffset: writer.length });
      writer.push(messageJson(m));
    });
    bytes = writer.bytes();
  }
  const generation = options.sha256().update(bytes).digestHex();
  const newMeta: StorageMeta = {
    format: STORAGE_FORMAT,
    version: STORAGE_VERSION,
    header: header as unknown as SessionHeader,
    generation,
    start: 0,
    bytes: bytes.length,
    messageCount: messages.length,
  };
  const durability = options.durability ?? "full";
  // A link or a file at the collection is refused as the store refuses it for a save.
  await ensureCollectionDir(fs, options.toCollection, durability);
  const target = join(options.toCollection, id);
  await refuseUsedId(fs, options.toCollection, id);
  const staging = join(
    options.toCollection,
    `.staging-${id}-${globalThis.crypto.randomUUID().slice(0, 8)}`,
  );
  // Only a staging directory this call made is removed on failure: it is made by an exclusive
  // mkdir (anything at that name refuses it and is left alone), and one made before a later step
  // of its creation failed (the fsync of the collection, its mode) is removed while still empty.
  let made = false;
  try {
    await fs.mkdir(staging, { mode: PRIVATE_DIR_MODE });
    made = true;
    await ensurePrivateDir(fs, staging, durability);
  } catch (error) {
    if (made) await fs.remove(staging).catch(() => undefined);
    throw error;
  }
  try {
    await atomicReplace(fs, join(staging, MESSAGES_FILE), bytes, { durability });
    await atomicReplace(fs, join(staging, META_FILE), encodeStorageMeta(newMeta), { durability });
    await atomicReplace(
      fs,
      join(staging, INDEX_FILE),
      encodeRoundIndex({
        format: INDEX_FORMAT,
        version: INDEX_VERSION,
        generation,
        start: 0,
        bytes: bytes.length,
        messageCount: messages.length,
        fallbackTitle: fallbackTitle(messages) ?? null,
        rounds,
      }),
      { durability },
    );
    await stagedPublish(fs, staging, target, { durability });
  } catch (error) {
    // A copy that was not published goes (a full disk would keep a hidden copy of the log);
    // one published before a later step failed is no longer at the staging name.
    await fs.remove(staging, { recursive: true }).catch(() => undefined);
    throw error;
  }
  return {
    dir: target,
    id,
    kept,
    dropped: source.total - kept,
    droppedMetadata,
  };
}

/** What a salvage copies: the source's header, the messages it keeps, and how many it holds. */
interface SalvageSource {
  readonly header: SessionHeader;
  /** The longest valid prefix of the messages that leaves no tool call unanswered. */
  readonly messages: readonly Message[];
  /** The messages (or message records) of the source in all, valid or not. */
  readonly total: number;
  /**
   * The bytes of those messages' lines as the source holds them (each with its newline), and where
   * each line starts in them; absent when they are written anew.
   */
  readonly lines?: { readonly bytes: Uint8Array; readonly offsets: readonly number[] } | undefined;
}

/** True when `path` names a legacy version-2 file (`….jsonl`), not a session directory. */
export function isLegacySalvageSource(path: string): boolean {
  return basename(normalize(path)).endsWith(LEGACY_EXTENSION);
}

/**
 * The salvage source of the session directory `dir`: its committed range, never read through a
 * link (see `verifySession`).
 */
async function directoryPrefix(
  fs: FileSystem,
  dir: string,
  sha256: Sha256Factory,
): Promise<SalvageSource> {
  const [irregular] = (await irregularSessionFiles(fs, dir)).errors;
  if (irregular !== undefined) throw irregular;
  const logFile = join(dir, MESSAGES_FILE);
  for (let attempt = 1;; attempt++) {
    const meta = await readSalvageMeta(fs, dir);
    const scan = await scanRange(fs, logFile, meta, sha256);
    const kept = scan.closedPrefix;
    const lines = await keptLines(fs, logFile, meta.start, scan.offsets.slice(0, kept + 1));
    // A meta.json another process published meanwhile (a compaction swapped the directory): the
    // log read may not be the one it describes, so the session is read again.
    if (attempt < VERIFY_TRIES && await metaChanged(fs, dir, meta)) continue;
    return {
      header: meta.header,
      messages: scan.messages.slice(0, kept),
      total: Math.max(meta.messageCount, scan.lines),
      lines,
    };
  }
}

/**
 * The bytes of the log `file` from `start` through the line ending at `offsets`' last entry
 * (relative to `start`), the lines a scan found valid; undefined when the file no longer holds
 * them all (the messages are then written anew).
 */
async function keptLines(
  fs: FileSystem,
  file: string,
  start: number,
  offsets: readonly number[],
): Promise<{ bytes: Uint8Array; offsets: readonly number[] } | undefined> {
  const length = offsets[offsets.length - 1] ?? 0;
  if (length === 0) return { bytes: new Uint8Array(0), offsets };
  let handle: FileHandle;
  try {
    ({ handle } = await openSessionFile(fs, file));
  } catch (error) {
    if (error instanceof NotFound) return undefined; // gone since the scan (a compaction's swap)
    throw error;
  }
  try {
    const bytes = await handle.read(start, length);
    if (bytes.length !== length || bytes[length - 1] !== 10) return undefined;
    return { bytes, offsets };
  } finally {
    await handle.close();
  }
}

/**
 * meta.json of the salvage source `dir` (`kindChecked` as for `readStorageMeta`), its header's
 * fields checked but not its metadata arrays: a salvage keeps each array that fits the messages
 * it keeps and drops (and lists) the others, as for a legacy file. A missing one (or a missing
 * `dir`) is `SessionNotFoundError` naming meta.json, the port's `NotFound` as its cause, as
 * opening such a directory says; a `CorruptSessionError` when index.json shows a save committed
 * there (`missingMetaError`).
 */
export async function readSalvageMeta(
  fs: FileSystem,
  dir: string,
  kindChecked = false,
): Promise<StorageMeta> {
  try {
    return await readStorageMeta(fs, dir, kindChecked, true);
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
    throw await missingMetaError(fs, dir, error);
  }
}

/**
 * Runs `read` of the legacy version-2 file `file`, a salvage source: a missing one is
 * `SessionNotFoundError` naming it, the port's `NotFound` as its cause, as opening it says.
 */
export async function readLegacySalvageSource<T>(
  file: string,
  read: () => Promise<T>,
): Promise<T> {
  try {
    return await read();
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
    throw new SessionNotFoundError(`No session at '${file}'`, { file, cause: error });
  }
}

/** The salvage source of the legacy version-2 file `file` (see `readLegacyPrefix`). */
async function legacyPrefix(fs: FileSystem, file: string): Promise<SalvageSource> {
  const prefix = await readLegacySalvageSource(file, () => readLegacyPrefix(fs, file));
  return { header: prefix.header, messages: prefix.messages, total: prefix.records };
}
