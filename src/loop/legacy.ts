/**
 * Legacy version-2 single-file sessions: `<collection>/<id>.jsonl`, line 1 the version-2 header,
 * every further line one message. They stay readable, and an explicit open migrates them.
 *
 * Reading follows the version-2 reader: the whole file is trimmed, split on `\n` and every line is
 * parsed as JSON, so a blank line inside the file (or an empty file) is invalid JSON while leading
 * and trailing blank lines are not. Checks run in the version-2 order: the header's format and
 * version (`UnsupportedSessionError`), its fields (`SessionFormatError`), the recorded cwd
 * (`SessionCwdError`), then every message and the metadata arrays of the header. One difference
 * is kept for streaming: each message is parsed and validated in turn, so a message that is not
 * valid is reported before a later line that is not JSON (version 2 parses every line first).
 *
 * **Migration** (`migrateLegacySession`) validates the file completely while streaming it, once,
 * in chunks: a line that is one bare JSON object keeps its own bytes, any other line (surrounding
 * whitespace, a CRLF ending, bytes that are not UTF-8) is written the way `SessionManager`
 * writes a message (`JSON.stringify(message)`); each is followed by `\n`, hashed incrementally
 * into the generation, and written to `messages.jsonl` in a private staging directory
 * `<collection>/.staging-<id>-<random>` beside `meta.json` (start 0) and `index.json`. Reads,
 * parsing and writes overlap (one read ahead, one write behind); under full durability a second
 * handle on the staged log is synced every 8 MiB while the scan goes on, so the device writes back
 * as the file grows and the final fsync (always made, on the writing handle) has only the last
 * bytes left. The staging directory is made durable, the collection made private (0700, as a save
 * makes it: version 2 created collections with the default mode), and the staging directory renamed
 * to `<collection>/<id>/`; the legacy file is never modified and stays as a backup. A crash at any
 * point leaves the legacy file intact and the published directory either absent or complete;
 * staging leftovers are skipped by readers and removed by the next migration or cleanup.
 *
 * The caller (the store) holds the collection lock and has recovered the collection's leftovers
 * before migrating (a read-only open does so only when something of the session is held aside:
 * a staging directory of it, a copy or its legacy file staged by a delete; see `SessionStore`).
 *
 * @module
 */
import type { FileHandle, FileSystem } from "../port/fs.ts";
import { joinBytes } from "../port/bytes.ts";
import {
  forgetDurable,
  PRIVATE_DIR_MODE,
  PRIVATE_FILE_MODE,
  writeNewFile,
} from "../port/durable.ts";
import { basename, dirname, join } from "../port/path.ts";
import { promiseOf } from "../port/limit.ts";
import type { Sha256Factory } from "../port/sha256.ts";
import { SessionError, SessionFormatError } from "./errors.ts";
import {
  eligibleTitleOf,
  isSessionId,
  malformedTitleText,
  type Message,
  type MessageRole,
  MessageValidator,
  parseSessionHeader,
  type SessionHeader,
  type SessionTitle,
  validateSessionMetadata,
} from "./records/mod.ts";
import { parseHeaderFields } from "./records/header.ts";
import { jsonNestsDeeper, MAX_MESSAGE_NESTING, refuseDeepMessage } from "./records/_validation.ts";
import {
  checkSessionCwd,
  decodeLine,
  encodeRoundIndex,
  encodeStorageMeta,
  INDEX_FILE,
  INDEX_FORMAT,
  INDEX_VERSION,
  MESSAGES_FILE,
  META_FILE,
  openSessionFile,
  type RoundEntry,
  STORAGE_FORMAT,
  STORAGE_VERSION,
  type StorageMeta,
  undecodable,
} from "./storage.ts";
import type { StoreContext } from "./lock.ts";
import { ensureCollectionDir } from "./session_manager.ts";
import { messageJson } from "./records/_json_text.ts";

/** The file extension of a legacy version-2 session. */
export const LEGACY_EXTENSION = ".jsonl";
/** The name prefix of staging directories (migration and compaction). */
export const STAGING_PREFIX = ".staging-";

/**
 * The sizes that pace a migration's pipeline. The defaults suit sessions of any size; tests pass
 * small ones so that a small file crosses every boundary many times.
 */
export interface MigrationPacing {
  /** Bytes read from the legacy file at a time. */
  readonly readChunk: number;
  /** Output bytes gathered before they are written to the staged log. */
  readonly writeBatch: number;
  /** Bytes written to the staged log between background syncs (full durability only). */
  readonly syncEvery: number;
}

/** The default pacing: 4 MiB reads, 1 MiB writes, a background sync every 8 MiB. */
export const MIGRATION_PACING: MigrationPacing = {
  readChunk: 4 * 1024 * 1024,
  writeBatch: 1024 * 1024,
  syncEvery: 8 * 1024 * 1024,
};
/** Bytes read from a legacy file at a time (listing and plain reads). */
const READ_CHUNK = MIGRATION_PACING.readChunk;
/** Output pieces smaller than this are copied together into one write. */
const SMALL_PIECE = 64 * 1024;

const NEWLINE = 10;
const NEWLINE_BYTES = new Uint8Array([NEWLINE]);
const encoder = new TextEncoder();

/**
 * Where the bytes a migration keeps of a legacy message line lie (`chunk.subarray(start, end)`
 * without its newline), or undefined when it writes the message in canonical form instead. The
 * line's own bytes are kept, without the JSON whitespace around them (the `\r` of a CRLF file,
 * spaces, tabs), when they are one bare JSON object: the session manager compares messages by
 * value, not by byte layout, and re-serializing 50 MB would cost as much as parsing it (and would
 * write a number JSON.stringify cannot, such as `-0` or `1e400`, as another). A line whose bytes
 * are not UTF-8 (decoded to U+FFFD, `replaced`) is written in canonical form, so the log is
 * always valid UTF-8.
 */
function keptLineRange(
  chunk: Uint8Array,
  start: number,
  end: number,
  replaced: boolean,
): readonly [number, number] | undefined {
  if (replaced) return undefined;
  while (start < end && isJsonSpace(chunk[start] as number)) start++;
  while (end > start && isJsonSpace(chunk[end - 1] as number)) end--;
  return end > start && chunk[start] === 0x7b && chunk[end - 1] === 0x7d ? [start, end] : undefined;
}

/** JSON's whitespace within a line: space, tab, carriage return. */
function isJsonSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0d;
}

/**
 * The sizes and SHA-256s (lowercase hex) of the messages.jsonl bytes a migration of the legacy
 * file at `path` writes, its first generation: as this version writes it (each line as
 * `keptLineRange` keeps it, or canonical) and, when that differs, as earlier versions wrote it
 * (a line kept only when it is a bare object untrimmed, any other line canonical). Read and
 * validated as `readLegacyHistory` reads it, without keeping the history.
 *
 * @throws As `readLegacyHistory`.
 */
export async function migratedLogDigests(
  fs: FileSystem,
  path: string,
  factory: Sha256Factory,
): Promise<readonly { readonly size: number; readonly hex: string }[]> {
  const now = { hash: factory(), size: 0 };
  const before = { hash: factory(), size: 0 };
  let differ = false;
  const add = (into: typeof now, bytes: Uint8Array): void => {
    into.hash.update(bytes);
    into.size += bytes.length;
  };
  await readLegacy(fs, path, true, {
    message: (message, chunk, start, end, _index, replaced) => {
      const kept = keptLineRange(chunk, start, end, replaced);
      const untrimmed = kept !== undefined && kept[0] === start && kept[1] === end;
      const canonical = untrimmed ? undefined : encoder.encode(messageJson(message) + "\n");
      if (kept === undefined) add(now, canonical as Uint8Array);
      else {
        add(now, chunk.subarray(kept[0], kept[1]));
        add(now, NEWLINE_BYTES);
      }
      if (untrimmed) {
        add(before, chunk.subarray(start, end));
        add(before, NEWLINE_BYTES);
      } else {
        add(before, canonical as Uint8Array);
        if (kept !== undefined) differ = true;
      }
    },
    flush: () => Promise.resolve(),
  });
  const current = { size: now.size, hex: now.hash.digestHex() };
  return differ ? [current, { size: before.size, hex: before.hash.digestHex() }] : [current];
}

/** `pieces` as writes: runs of small pieces copied together, large pieces as they are. */
function coalesce(pieces: readonly Uint8Array[]): Uint8Array[] {
  const writes: Uint8Array[] = [];
  let group: Uint8Array[] = [];
  let groupLength = 0;
  const close = (): void => {
    if (group.length > 0) writes.push(joinBytes(group, groupLength));
    group = [];
    groupLength = 0;
  };
  for (const piece of pieces) {
    if (piece.length >= SMALL_PIECE) {
      close();
      writes.push(piece);
    } else {
      group.push(piece);
      groupLength += piece.length;
    }
  }
  close();
  return writes;
}

/** The session id of a legacy file name `<id>.jsonl`, or undefined for any other name. */
export function legacySessionId(name: string): string | undefined {
  if (!name.endsWith(LEGACY_EXTENSION)) return undefined;
  const id = name.slice(0, -LEGACY_EXTENSION.length);
  return isSessionId(id) ? id : undefined;
}

/** A fresh staging directory name for session `id`. */
export function stagingName(id: string): string {
  return `${STAGING_PREFIX}${id}-${globalThis.crypto.randomUUID().slice(0, 8)}`;
}

/** What reading a legacy file learned. */
export interface LegacySummary {
  /** The parsed header (without `runTimings`, `unread` read as false when missing). */
  readonly header: SessionHeader;
  /** The number of messages. */
  readonly messageCount: number;
  /** The number of user messages. */
  readonly userMessageCount: number;
  /** The fallback title of the first eligible user message, when there is one. */
  readonly fallbackTitle: SessionTitle | undefined;
}

/** Options of `readLegacySession`. */
export interface ReadLegacyOptions {
  /**
   * Validate everything (messages, pairing, metadata against the history, the recorded cwd);
   * default true. With false only the header is validated and the messages are parsed for their
   * roles and the fallback title (the fast listing mode).
   */
  readonly validate?: boolean;
}

/**
 * Reads a file in batches of whole lines. The next chunk is already being read while the caller
 * processes the current one. The last line may lack its newline. A line cut by the end of a chunk
 * is completed as a batch of its own, so the rest of a chunk is handed on without a copy.
 */
export class LineReader {
  readonly #handle: FileHandle;
  readonly #chunkSize: number;
  #position = 0;
  #carry: Uint8Array[] = [];
  #carryLength = 0;
  /** Whole lines of the last chunk, after the batch that completed the carried line. */
  #rest: Uint8Array | undefined;
  #done = false;
  #prefetch: Promise<Uint8Array> | undefined;

  /** Reads `handle` from its start, `chunkSize` bytes at a time. */
  constructor(handle: FileHandle, chunkSize: number = READ_CHUNK) {
    this.#handle = handle;
    this.#chunkSize = chunkSize;
  }

  #read(): Promise<Uint8Array> {
    const read = this.#handle.read(this.#position, this.#chunkSize);
    // Observed here too, so a read abandoned after a failure is not an unhandled rejection.
    read.catch(() => undefined);
    return read;
  }

  /**
   * The next batch of complete lines (possibly empty), each ending with a newline except a last
   * line at the end of the file; undefined after the end.
   */
  async next(): Promise<Uint8Array | undefined> {
    const rest = this.#rest;
    if (rest !== undefined) {
      this.#rest = undefined;
      return rest;
    }
    if (this.#done) return undefined;
    const chunk = await (this.#prefetch ?? this.#read());
    this.#position += chunk.length;
    this.#prefetch = chunk.length === 0 ? undefined : this.#read();
    if (chunk.length === 0) {
      this.#done = true;
      return this.#takeCarry(new Uint8Array(0));
    }
    const last = chunk.lastIndexOf(NEWLINE);
    if (last < 0) {
      this.#carry.push(chunk);
      this.#carryLength += chunk.length;
      return new Uint8Array(0);
    }
    let lines: Uint8Array;
    if (this.#carryLength > 0) {
      const first = chunk.indexOf(NEWLINE);
      lines = this.#takeCarry(chunk.subarray(0, first + 1));
      if (first < last) this.#rest = chunk.subarray(first + 1, last + 1);
    } else {
      lines = chunk.subarray(0, last + 1);
    }
    if (last + 1 < chunk.length) {
      this.#carry.push(chunk.subarray(last + 1));
      this.#carryLength = chunk.length - last - 1;
    }
    return lines;
  }

  #takeCarry(last: Uint8Array): Uint8Array {
    if (this.#carryLength === 0) return last;
    const out = joinBytes([...this.#carry, last], this.#carryLength + last.length);
    this.#carry = [];
    this.#carryLength = 0;
    return out;
  }
}

function isBlank(text: string): boolean {
  // Fast path: a record line starts with its opening brace.
  return text.charCodeAt(0) !== 123 && text.trim() === "";
}

function parseLine(text: string, file: string, path: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new SessionFormatError(`Invalid JSON: ${(error as Error).message}`, {
      file,
      path,
      cause: error,
    });
  }
}

/** Receives each message of a legacy file, in order, with where its line lies. */
interface MessageSink {
  /**
   * Called for every message; its raw line is `chunk.subarray(start, end)` (without the newline,
   * which is `chunk[end]` unless the line ends the file). `replaced` is true when decoding the
   * line replaced bytes that are not UTF-8 (or it holds U+FFFD itself): its bytes are then not
   * the message's text.
   */
  message(
    message: Message,
    chunk: Uint8Array,
    start: number,
    end: number,
    index: number,
    replaced: boolean,
  ): void;
  /** Called after every chunk (for batched writes). */
  flush(): Promise<void>;
}

/** The outcome of streaming a legacy file. */
interface LegacyScan extends LegacySummary {
  readonly roles: MessageRole[];
  /**
   * With `until: "prefix"`: how many messages make the longest valid prefix that leaves no tool
   * call unanswered, and how many message records the file holds in all (its lines after the
   * header up to the last that is not blank, as the version-2 reader splits them).
   */
  readonly prefix?: { readonly kept: number; readonly records: number };
}

/** How far `scanLegacy` reads a legacy file. */
type ScanUntil =
  /** Every line: the first thing that is not valid is thrown. */
  | "end"
  /** The header only (and the next line that is not blank, which may invalidate it). */
  | "header"
  /**
   * The longest valid prefix (validating only): the header must be valid, and a message record
   * that is not stops the scan instead of throwing; the end-of-history and metadata rules are
   * left to the caller (see `LegacyScan.prefix`).
   */
  | "prefix";

/** Options of `scanLegacy`. */
interface ScanOptions {
  /** Validate every message (`readLegacySession`'s `validate`). */
  readonly validate: boolean;
  /** Called once the header is read, before any message is parsed. */
  readonly beforeMessages?: (header: SessionHeader) => Promise<void>;
  /** Receives every message (with `until: "prefix"`, those up to the first invalid record). */
  readonly sink?: MessageSink;
  /** Bytes read at a time. */
  readonly readChunk?: number;
  /** How far to read; default `"end"`. */
  readonly until?: ScanUntil;
}

/**
 * Streams the legacy file at `path`: the header is validated (and the cwd checked when
 * validating) before any message is parsed; every message is handed to `options.sink`.
 */
async function scanLegacy(
  fs: FileSystem,
  path: string,
  options: ScanOptions,
): Promise<LegacyScan> {
  const { validate, sink } = options;
  const until = options.until ?? "end";
  // Never through a link, never waiting on a FIFO, even one swapped in since its kind was seen.
  const { handle } = await openSessionFile(fs, path);
  try {
    const reader = new LineReader(handle, options.readChunk ?? READ_CHUNK);
    let header: SessionHeader | undefined;
    let index = 0;
    let userMessageCount = 0;
    let title: SessionTitle | undefined;
    let blankAt: number | undefined;
    /** A last line that parsed only after trimming: valid only if nothing follows it. */
    let trimmedError: SessionFormatError | undefined;
    /** The header line's value when it parsed only after trimming, until what follows is known. */
    let headerOnceTrimmed: { readonly value: unknown } | undefined;
    /**
     * Validates the header's value (validating, without the metadata arrays, checked in the
     * version-2 order after the cwd and every message by `validateSessionMetadata` below;
     * otherwise, a fast listing, with them) and runs `beforeMessages` on it.
     */
    const judgeHeader = async (value: unknown): Promise<SessionHeader> => {
      const parsed = validate
        ? parseHeaderFields(value, { file: path, path: "header" })
        : parseSessionHeader(value, { file: path, path: "header" });
      await options.beforeMessages?.(parsed);
      return parsed;
    };
    /**
     * The longest prefix of the messages taken so far that leaves no tool call unanswered, and
     * that prefix before the last message was taken (prefix mode).
     */
    let closed = 0;
    let closedBefore = 0;
    /** Prefix mode: the first invalid record was found; lines are only counted from then on. */
    let stopped = false;
    /** Prefix mode: lines after the header, and that count at the last line not blank. */
    let linesAfterHeader = 0;
    let records = 0;
    const roles: MessageRole[] = [];
    const validator = validate ? new MessageValidator({ file: path }) : undefined;
    /** Parses, checks and hands on the message on `text`, the line `chunk[start, end)`. */
    const takeMessage = (
      text: string | SessionFormatError,
      chunk: Uint8Array,
      start: number,
      end: number,
    ): void => {
      const where = `messages[${index}]`;
      if (trimmedError !== undefined) throw trimmedError;
      if (blankAt !== undefined) {
        throw new SessionFormatError(
          "Invalid JSON: a blank line inside a session file is not a record",
          { file: path, path: `messages[${blankAt}]` },
        );
      }
      // A line that could not be decoded (see the loop below).
      if (typeof text !== "string") throw text;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (error) {
        // The version-2 reader trims the whole file, so the last line may end in any whitespace.
        const trimmed = text.trimEnd();
        if (trimmed === text) throw parseError(error, path, where);
        value = parseLine(trimmed, path, where);
        trimmedError = parseError(error, path, where);
      }
      if (validator !== undefined) {
        validator.push(value, index);
        // As an open of a session directory refuses it, before the migration writes it: a
        // message nested deeper than `MAX_MESSAGE_NESTING` levels (a short line is not looked
        // at).
        if (jsonNestsDeeper(value, text, MAX_MESSAGE_NESTING)) {
          refuseDeepMessage(value, path, where);
        }
      } else if (
        typeof value !== "object" || value === null ||
        typeof (value as { role?: unknown }).role !== "string"
      ) {
        throw new SessionFormatError("Invalid session message: expected an object with a role", {
          file: path,
          path: where,
        });
      }
      const message = value as Message;
      roles.push(message.role);
      if (message.role === "user") {
        userMessageCount++;
        if (title === undefined) {
          // Unvalidated (a fast listing): content a title cannot be read from is refused.
          const malformed = malformedTitleText(message);
          if (malformed !== undefined) {
            throw new SessionFormatError("Invalid user message content", {
              file: path,
              path: `${where}.${malformed.path}`,
              value: malformed.value,
            });
          }
          title = eligibleTitleOf(message, index);
        }
      }
      sink?.message(message, chunk, start, end, index, text.includes("\uFFFD"));
      index++;
      closedBefore = closed;
      if (validator !== undefined && validator.pendingToolCallIds.length === 0) closed = index;
    };
    reading: for (;;) {
      const chunk = await reader.next();
      if (chunk === undefined) break;
      let byteAt = 0;
      while (byteAt < chunk.length) {
        let byteEnd = chunk.indexOf(NEWLINE, byteAt);
        if (byteEnd < 0) byteEnd = chunk.length;
        const lineStart = byteAt;
        // Each line is decoded alone (a newline is never part of a multi-byte sequence). A line
        // too long for one string is an invalid record, reported where a line that is not JSON
        // is.
        let text: string | SessionFormatError;
        try {
          text = decodeLine(chunk.subarray(byteAt, byteEnd));
        } catch (error) {
          const where = header === undefined ? "header" : `messages[${index}]`;
          text = undecodable(error, byteEnd - byteAt, path, where);
        }
        byteAt = byteEnd + 1;
        if (header !== undefined) linesAfterHeader++;
        if (typeof text === "string" && isBlank(text)) {
          if (header !== undefined && blankAt === undefined) blankAt = index;
          continue;
        }
        // A header line that is JSON only once trimmed fails its `JSON.parse` before anything is
        // checked when a line follows it (the version-2 order: every line is parsed first).
        if (headerOnceTrimmed !== undefined) throw trimmedError as SessionFormatError;
        if (header === undefined) {
          if (typeof text !== "string") throw text;
          // The version-2 reader trims the whole file: the header line loses its leading
          // whitespace, and its trailing whitespace only when nothing follows it.
          const start = text.trimStart();
          let value: unknown;
          try {
            value = JSON.parse(start);
          } catch (error) {
            const trimmed = start.trimEnd();
            if (trimmed === start) throw parseError(error, path, "header");
            value = parseLine(trimmed, path, "header");
            trimmedError = parseError(error, path, "header");
            // Judged once the next line (its error) or the end of the file (a valid header) is
            // known.
            headerOnceTrimmed = { value };
            continue;
          }
          header = await judgeHeader(value);
          continue;
        }
        records = linesAfterHeader;
        if (stopped) continue;
        if (until === "header") break reading;
        try {
          takeMessage(text, chunk, lineStart, byteEnd);
        } catch (error) {
          if (until !== "prefix" || !(error instanceof SessionError)) throw error;
          // The first record that is not valid: the message before it when that one parsed only
          // after trimming and is not the last, else this one (or the blank line before it).
          stopped = true;
          if (error === trimmedError) closed = closedBefore;
        }
      }
      await sink?.flush();
    }
    // A header line that is JSON once trimmed, with nothing after it: the file's only record.
    if (headerOnceTrimmed !== undefined) header = await judgeHeader(headerOnceTrimmed.value);
    if (header === undefined) {
      throw new SessionFormatError("Invalid JSON: the session file is empty", {
        file: path,
        path: "header",
      });
    }
    if (until === "prefix") {
      return {
        header,
        messageCount: index,
        userMessageCount,
        fallbackTitle: title,
        roles,
        prefix: { kept: closed, records },
      };
    }
    if (validator !== undefined && until === "end") {
      validator.finish();
      validateSessionMetadata(header, roles, { file: path });
    }
    return { header, messageCount: index, userMessageCount, fallbackTitle: title, roles };
  } finally {
    await handle.close();
  }
}

function parseError(error: unknown, file: string, path: string): SessionFormatError {
  return new SessionFormatError(`Invalid JSON: ${(error as Error).message}`, {
    file,
    path,
    cause: error,
  });
}

function checkIdMatches(header: SessionHeader, path: string): void {
  const id = legacySessionId(basename(path));
  if (header.id !== id) {
    throw new SessionFormatError("Session id does not match its file name", {
      file: path,
      path: "header.id",
      value: header.id,
    });
  }
}

/**
 * Reads a legacy version-2 session without modifying anything: by default with the complete
 * validation of an open (messages, pairing, metadata, cwd); with `validate: false` only the
 * header is validated (the fast listing mode).
 *
 * @throws {UnsupportedSessionError} For a header of another format or version.
 * @throws {SessionFormatError} For invalid JSON, a blank inner line, invalid fields or messages.
 * @throws {SessionCwdError} When validating and the recorded cwd is gone.
 */
export async function readLegacySession(
  fs: FileSystem,
  path: string,
  options: ReadLegacyOptions = {},
): Promise<LegacySummary> {
  return await readLegacy(fs, path, options.validate !== false);
}

/**
 * `readLegacySession` (validating everything) with the messages it read: the history, read once
 * (never through a link), exactly as it was validated.
 *
 * @throws {UnsupportedSessionError} For a header of another format or version.
 * @throws {SessionFormatError} For invalid JSON, a blank inner line, invalid fields or messages.
 * @throws {SessionCwdError} When the recorded cwd is gone.
 */
export async function readLegacyHistory(
  fs: FileSystem,
  path: string,
): Promise<LegacySummary & { readonly messages: readonly Message[] }> {
  const messages: Message[] = [];
  const summary = await readLegacy(fs, path, true, collectingInto(messages));
  return { ...summary, messages };
}

/** A sink that keeps every message it is handed in `messages`. */
function collectingInto(messages: Message[]): MessageSink {
  return {
    message: (message) => void messages.push(message),
    flush: () => Promise.resolve(),
  };
}

async function readLegacy(
  fs: FileSystem,
  path: string,
  validate: boolean,
  sink?: MessageSink,
): Promise<LegacySummary> {
  const scan = await scanLegacy(fs, path, {
    validate,
    beforeMessages: async (header) => {
      checkIdMatches(header, path);
      if (validate) await checkSessionCwd(fs, header.cwd, path);
    },
    ...(sink === undefined ? {} : { sink }),
  });
  return {
    header: scan.header,
    messageCount: scan.messageCount,
    userMessageCount: scan.userMessageCount,
    fallbackTitle: scan.fallbackTitle,
  };
}

/**
 * The header of the legacy version-2 file at `path`, by the rules `readLegacySession` reads it
 * with (its fields; the metadata arrays are not checked against the history, which is not read).
 * Reads the file's first lines only (never through a link); modifies nothing. Its id is not
 * compared with the file name.
 *
 * @throws {UnsupportedSessionError} For a header of another format or version.
 * @throws {SessionFormatError} For an empty file, or a header that is not valid JSON or has an
 * invalid field.
 */
export async function readLegacyHeader(fs: FileSystem, path: string): Promise<SessionHeader> {
  return (await scanLegacy(fs, path, { validate: true, until: "header" })).header;
}

/** The longest valid prefix of a legacy version-2 file (`readLegacyPrefix`). */
export interface LegacyPrefix {
  /** The header, valid by the legacy reader's rules for its fields (see `readLegacyPrefix`). */
  readonly header: SessionHeader;
  /** The longest prefix of valid messages that leaves no tool call unanswered. */
  readonly messages: readonly Message[];
  /** The message records the file holds in all, valid or not (as the version-2 reader splits it). */
  readonly records: number;
}

/**
 * The longest valid prefix of the legacy version-2 file at `path`, for a salvage. The header must
 * be valid as `readLegacySession` reads it (format and version, then its fields; its id is not
 * compared with the file name, the recorded cwd is not checked, and the metadata arrays are left
 * to the caller, as the history they refer to is cut). The messages are validated as a migration
 * validates them (JSON, the version-2 reader's rules for blank lines and trailing whitespace,
 * each message, its nesting, tool call pairing) up to the first record that is not valid; those
 * kept are the longest prefix before it that leaves no tool call unanswered. Reads only, never
 * through a link.
 *
 * @throws {UnsupportedSessionError} For a header of another format or version.
 * @throws {SessionFormatError} For an empty file, or a header that is not valid JSON or has an
 * invalid field (naming the file and the field), or a path that is not a regular file.
 */
export async function readLegacyPrefix(fs: FileSystem, path: string): Promise<LegacyPrefix> {
  const messages: Message[] = [];
  const scan = await scanLegacy(fs, path, {
    validate: true,
    until: "prefix",
    sink: collectingInto(messages),
  });
  const { kept, records } = scan.prefix as { kept: number; records: number };
  messages.length = kept;
  return { header: scan.header, messages, records };
}

/** What `migrateLegacySession` published. */
export interface MigrationResult {
  /** The published session directory `<collection>/<id>`. */
  readonly dir: string;
  /** The storage metadata that was published. */
  readonly meta: StorageMeta;
}

/** Builds `messages.jsonl` in the staging directory while the legacy file streams in. */
class StagedLog implements MessageSink {
  readonly #context: StoreContext;
  readonly #path: string;
  #handle: FileHandle | undefined;
  readonly #hash;
  /** Output pieces not yet written, newlines included. */
  #pieces: Uint8Array[] = [];
  #pending = 0;
  /** Consecutive verbatim lines of one chunk, gathered as one piece: `chunk[start..end)`. */
  #run: { chunk: Uint8Array; start: number; end: number } | undefined;
  /** The write in flight: the next batch is prepared while it runs. */
  #writing: Promise<void> = Promise.resolve();
  /** A second handle on the staged log, synced in the background while the scan goes on. */
  #syncHandle: FileHandle | undefined;
  /** The background sync in flight, if any (it never rejects: see `#syncFailure`). */
  #syncing: Promise<void> | undefined;
  /** The first failure of a background sync. */
  #syncFailure: { readonly error: unknown } | undefined;
  /** Bytes handed to writes since the last background sync started. */
  #unsynced = 0;
  /** Bytes written or pending so far: the offset of the next line. */
  bytes = 0;
  readonly rounds: RoundEntry[] = [];

  readonly #pacing: MigrationPacing;

  constructor(context: StoreContext, path: string, pacing: MigrationPacing) {
    this.#context = context;
    this.#path = path;
    this.#pacing = pacing;
    this.#hash = context.sha256();
  }

  async open(): Promise<void> {
    this.#handle = await this.#context.fs.open(this.#path, {
      createNew: true,
      write: true,
      mode: PRIVATE_FILE_MODE,
    });
    if (this.#context.durability === "full") {
      this.#syncHandle = await this.#context.fs.open(this.#path, { write: true });
    }
  }

  message(
    message: Message,
    chunk: Uint8Array,
    start: number,
    end: number,
    index: number,
    replaced: boolean,
  ): void {
    if (message.role === "user") this.rounds.push({ messageIndex: index, byteOffset: this.bytes });
    // The validated line's own bytes are kept when they are one bare JSON object (the version-2
    // writer's output; see keptLineRange). Consecutive such lines are written straight from the
    // chunk they were read in, newlines and all, without a copy.
    const kept = keptLineRange(chunk, start, end, replaced);
    if (kept !== undefined && (kept[0] !== start || kept[1] !== end)) {
      // Trimmed (a CRLF line): its bytes, then a newline of its own.
      this.#closeRun();
      this.#pieces.push(chunk.subarray(kept[0], kept[1]), NEWLINE_BYTES);
      this.#pending += kept[1] - kept[0] + 1;
      this.bytes += kept[1] - kept[0] + 1;
      return;
    }
    if (kept !== undefined) {
      const run = this.#run;
      if (run !== undefined && run.chunk === chunk && run.end + 1 === start) run.end = end;
      else {
        this.#closeRun();
        this.#run = { chunk, start, end };
      }
      this.#pending += end - start + 1;
      this.bytes += end - start + 1;
      return;
    }
    this.#closeRun();
    const out = encoder.encode(messageJson(message) + "\n");
    this.#pieces.push(out);
    this.#pending += out.length;
    this.bytes += out.length;
  }

  #closeRun(): void {
    const run = this.#run;
    if (run === undefined) return;
    this.#run = undefined;
    if (run.end < run.chunk.length) {
      // The newline after the run's last line is in the chunk.
      this.#pieces.push(run.chunk.subarray(run.start, run.end + 1));
    } else {
      this.#pieces.push(run.chunk.subarray(run.start, run.end), NEWLINE_BYTES);
    }
  }

  async flush(force = false): Promise<void> {
    this.#closeRun();
    if (this.#pending === 0 || (!force && this.#pending < this.#pacing.writeBatch)) return;
    if (this.#syncFailure !== undefined) throw this.#syncFailure.error;
    const pieces = this.#pieces;
    this.#pieces = [];
    this.#pending = 0;
    const writes = coalesce(pieces);
    for (const piece of writes) this.#hash.update(piece);
    await this.#writing;
    const handle = this.#handle as FileHandle;
    const writing = (async () => {
      for (const piece of writes) await handle.write(piece);
    })();
    writing.catch(() => undefined); // awaited by the next flush or finish
    this.#writing = writing;
    this.#unsynced += writes.reduce((total, piece) => total + piece.length, 0);
    this.#syncBehind(writing);
  }

  /**
   * Under full durability, starts a sync of what is written so far through the second handle
   * once `syncEvery` bytes have gone to the file since the last one, unless one is in flight:
   * the device writes back while the scan parses, and the final sync (on the writing handle,
   * always made) has only the last bytes left. A failure is kept and rethrown: after a failed
   * fsync a later one may succeed without the lost pages being written.
   */
  #syncBehind(writing: Promise<void>): void {
    const syncHandle = this.#syncHandle;
    if (syncHandle === undefined || this.#syncing !== undefined) return;
    if (this.#unsynced < this.#pacing.syncEvery) return;
    this.#unsynced = 0;
    this.#syncing = writing.then(() => syncHandle.sync()).then(
      () => {
        this.#syncing = undefined;
      },
      (error) => {
        this.#syncFailure ??= { error };
        this.#syncing = undefined;
      },
    );
  }

  /** Hands what is pending to the file and returns the generation; `close()` completes it. */
  async end(): Promise<string> {
    await this.flush(true);
    return this.#hash.digestHex();
  }

  /** Waits for the writes, syncs (under full durability) and closes. */
  async close(): Promise<void> {
    const handle = this.#handle as FileHandle;
    this.#handle = undefined;
    const syncHandle = this.#syncHandle;
    this.#syncHandle = undefined;
    try {
      await this.#writing;
      await this.#syncing;
      if (this.#syncFailure !== undefined) throw this.#syncFailure.error;
      if (this.#context.durability === "full") await handle.sync();
    } finally {
      try {
        await handle.close();
      } finally {
        await syncHandle?.close();
      }
    }
  }

  async abandon(): Promise<void> {
    const handle = this.#handle;
    this.#handle = undefined;
    const syncHandle = this.#syncHandle;
    this.#syncHandle = undefined;
    await this.#writing.catch(() => undefined);
    await this.#syncing;
    await handle?.close().catch(() => undefined);
    await syncHandle?.close().catch(() => undefined);
  }
}

/** The refusal of a legacy session path that is not a regular file (a link, a directory). */
export function legacyNotARegularFile(path: string): SessionFormatError {
  return new SessionFormatError(
    "Legacy session path is not a regular file (symlinks and directories are refused)",
    { file: path },
  );
}

/**
 * Migrates the legacy session file `legacyPath` to `<collection>/<id>/` (see the module doc).
 * The legacy file must be a regular file named `<id>.jsonl` whose header id is `<id>`; the
 * target directory must not exist. On any failure the staging directory is removed (a removal
 * that fails too leaves a leftover for cleanup) and the error propagates; nothing else changes.
 *
 * @throws {UnsupportedSessionError} For a header of another format or version (nothing written).
 * @throws {SessionFormatError} For an invalid file (nothing published).
 * @throws {SessionCwdError} When the recorded cwd is gone (nothing written).
 */
export async function migrateLegacySession(
  context: StoreContext,
  legacyPath: string,
  pacing: MigrationPacing = MIGRATION_PACING,
): Promise<MigrationResult> {
  const fs = context.fs;
  const collection = dirname(legacyPath);
  const id = legacySessionId(basename(legacyPath));
  if (id === undefined) {
    throw new SessionFormatError("A legacy session file must be named <session id>.jsonl", {
      file: legacyPath,
    });
  }
  const info = await fs.lstat(legacyPath);
  if (info.kind !== "file") throw legacyNotARegularFile(legacyPath);
  const dir = join(collection, id);
  const staging = join(collection, stagingName(id));
  const log = new StagedLog(context, join(staging, MESSAGES_FILE), pacing);
  let created = false;
  try {
    const scan = await scanLegacy(fs, legacyPath, {
      validate: true,
      beforeMessages: async (header) => {
        checkIdMatches(header, legacyPath);
        await checkSessionCwd(fs, header.cwd, legacyPath);
        await fs.mkdir(staging, { mode: PRIVATE_DIR_MODE });
        created = true;
        await fs.chmod(staging, PRIVATE_DIR_MODE);
        await log.open();
      },
      sink: log,
      readChunk: pacing.readChunk,
    });
    const generation = await log.end();
    const meta: StorageMeta = {
      format: STORAGE_FORMAT,
      version: STORAGE_VERSION,
      header: scan.header,
      generation,
      start: 0,
      bytes: log.bytes,
      messageCount: scan.messageCount,
    };
    const index = encodeRoundIndex({
      format: INDEX_FORMAT,
      version: INDEX_VERSION,
      generation,
      start: 0,
      bytes: log.bytes,
      messageCount: scan.messageCount,
      fallbackTitle: scan.fallbackTitle ?? null,
      rounds: log.rounds,
    });
    // The three files are independent until the rename: the log's last writes and fsync run
    // beside meta.json's and index.json's; all are durable before the directory is published.
    const files = await Promise.allSettled([
      log.close(),
      promiseOf(() => fs.chmod(join(staging, MESSAGES_FILE), PRIVATE_FILE_MODE)),
      writeNewFile(fs, join(staging, META_FILE), encodeStorageMeta(meta), {
        durability: context.durability,
      }),
      writeNewFile(fs, join(staging, INDEX_FILE), index, { durability: context.durability }),
    ]);
    for (const file of files) if (file.status === "rejected") throw file.reason;
    if (context.durability === "full") await fs.syncDir(staging);
    // The collection is made private (0700), as a save makes it, before a session is published
    // into it: version 2 created collections with the default mode. Only now: a migration that
    // fails before this point (an invalid file, a missing cwd, a failed write) leaves the
    // collection as it was; one whose publishing rename then fails leaves it private, the mode
    // any save of the store gives it.
    await ensureCollectionDir(fs, collection, context.durability);
    forgetDurable(fs, dir);
    await fs.rename(staging, dir);
    created = false;
    if (context.durability === "full") await fs.syncDir(collection);
    return { dir, meta };
  } catch (error) {
    await log.abandon();
    if (created) await fs.remove(staging, { recursive: true }).catch(() => undefined);
    throw error;
  }
}
