/**
 * The version-3 storage envelope of a Loop session directory: `meta.json` (the committed byte
 * range, its SHA-256 generation and the version-2 header), `messages.jsonl` (one message per
 * line) and `index.json` (the byte offset of each user round). Schemas, codecs and the streaming
 * reader of the committed range live here; the commit protocol lives in `session_manager.ts`.
 *
 * @module
 */
import * as v from "valibot";
import type { EntryKind, FileHandle, FileSystem } from "../port/fs.ts";
import { FsError, NotADirectory, NotFound } from "../port/errors.ts";
import type { Sha256, Sha256Factory } from "../port/sha256.ts";
import { join } from "../port/path.ts";
import { joinBytes } from "../port/bytes.ts";
import { entryKind } from "../port/durable.ts";
import {
  type Found,
  ifRegular,
  isBusy,
  openChecked,
  openIfRegular,
  openIfRegularWaiting,
  readIfRegular,
  readSessionFile,
  type RegularFile,
  type RegularOpenOptions,
  sizedLater,
} from "../port/regular.ts";

// The regular-file reads the session modules use, from the port (shared with the folded layout).
export { isBusy, openIfRegular, readIfRegular, readSessionFile, sizedLater };
export type { RegularFile, RegularOpenOptions };
import {
  CorruptSessionError,
  preview,
  SessionCwdError,
  SessionFormatError,
  SessionNotFoundError,
  UnsupportedSessionError,
} from "./errors.ts";
import type { SessionHeader, SessionTitle } from "./records/mod.ts";
import {
  isValidTitle,
  parseSessionHeader,
  SESSION_FORMAT,
  SessionTitleSchema,
} from "./records/mod.ts";
import { childPath, isSafeNonNegative, issueDetail } from "./records/_validation.ts";
import { parseHeaderFields } from "./records/header.ts";

/** The file name of the storage metadata. */
export const META_FILE = "meta.json";
/** The file name of the message log. */
export const MESSAGES_FILE = "messages.jsonl";
/** The file name of the round index. */
export const INDEX_FILE = "index.json";
/** The `format` of meta.json (shared with the version-2 header). */
export const STORAGE_FORMAT = "loop-session";
/** The storage envelope version this library reads and writes. */
export const STORAGE_VERSION = 3;
/** The `format` of index.json. */
export const INDEX_FORMAT = "loop-session-index";
/** The index version this library reads and writes. */
export const INDEX_VERSION = 1;

const SHA256_HEX = /^[0-9a-f]{64}$/;
const encoder = new TextEncoder();
/** One decoder for every whole-buffer decode (no streaming state is kept between calls). */
const decoder = new TextDecoder();
const lineDecoder = new TextDecoder("utf-8", { ignoreBOM: true });
/** Lines longer than this are decoded in pieces of this many bytes (see `decodeLine`). */
const DECODE_PIECE_BYTES = 1 << 26;

/**
 * Decodes one line of a session file (without its newline) to exactly its characters: a leading
 * BOM is kept, not dropped, and invalid UTF-8 becomes U+FFFD. A line of ASCII becomes a one-byte
 * string, which parses faster than a slice of a larger decoded text. A line longer than
 * `pieceBytes` (64 MiB) is decoded in pieces of that many bytes, to the same text.
 */
export function decodeLine(bytes: Uint8Array, pieceBytes: number = DECODE_PIECE_BYTES): string {
  if (bytes.length <= pieceBytes) return lineDecoder.decode(bytes);
  // Deno and Node refuse to decode more than about 512 MiB in one call, whatever the length of
  // the string it makes (a message of wide characters a save wrote): a long line is decoded in
  // pieces, as one text. Only a string longer than the runtime's longest fails (a RangeError).
  const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  let text = "";
  for (let at = 0; at < bytes.length; at += pieceBytes) {
    text += decoder.decode(bytes.subarray(at, at + pieceBytes), { stream: true });
  }
  return text + decoder.decode();
}

/** The parsed content of meta.json. */
export interface StorageMeta {
  /** Always `"loop-session"`. */
  readonly format: typeof STORAGE_FORMAT;
  /** Always 3. */
  readonly version: typeof STORAGE_VERSION;
  /** The version-2 session header. */
  readonly header: SessionHeader;
  /** SHA-256 (lowercase hex) of the committed message bytes. */
  readonly generation: string;
  /** The byte offset in messages.jsonl where the committed generation starts. */
  readonly start: number;
  /** The length of the committed generation in bytes. */
  readonly bytes: number;
  /** The number of messages (lines) in the committed generation. */
  readonly messageCount: number;
}

/** One user round of the index: where it starts, as a message index and a byte offset. */
export interface RoundEntry {
  /** The global index of the round's user message. */
  readonly messageIndex: number;
  /** The UTF-8 byte offset of that message, relative to the committed range's start. */
  readonly byteOffset: number;
}

/** The parsed content of index.json. */
export interface RoundIndex {
  /** Always `"loop-session-index"`. */
  readonly format: typeof INDEX_FORMAT;
  /** Always 1. */
  readonly version: typeof INDEX_VERSION;
  /** The generation the index was built for. */
  readonly generation: string;
  /** The committed range start the index was built for. */
  readonly start: number;
  /** The committed byte length the index covers. */
  readonly bytes: number;
  /** The number of messages the index covers. */
  readonly messageCount: number;
  /**
   * The fallback title of the messages the index covers (that of their first eligible user
   * message, see `fallbackTitle`), null when none of them has one; undefined when not recorded
   * (an index written before this field). A fast listing takes it from here instead of reading
   * the first user message from the log.
   */
  readonly fallbackTitle?: SessionTitle | null | undefined;
  /** Each user round, in order. */
  readonly rounds: readonly RoundEntry[];
}

const byteCount = v.pipe(v.number(), v.safeInteger(), v.minValue(0));

/** The shape `StorageMetaSchema` checks (the header is left to `parseSessionHeader`). */
export interface StorageEnvelope extends Omit<StorageMeta, "header"> {
  /** The header, validated separately. */
  readonly header: unknown;
}

/** The valibot schema of meta.json's envelope (the header is checked by `parseSessionHeader`). */
export const StorageMetaSchema: v.GenericSchema<unknown, StorageEnvelope> = v.object({
  format: v.literal(STORAGE_FORMAT),
  version: v.literal(STORAGE_VERSION),
  header: v.unknown(),
  generation: v.pipe(v.string(), v.regex(SHA256_HEX)),
  start: byteCount,
  bytes: byteCount,
  messageCount: byteCount,
});

/**
 * The valibot schema of index.json. `roundCount` (written by this library before `rounds`, so
 * that a reader learns the count from the first bytes of the file) must equal `rounds.length`.
 */
export const RoundIndexSchema: v.GenericSchema<unknown, RoundIndex> = v.pipe(
  v.object({
    format: v.literal(INDEX_FORMAT),
    version: v.literal(INDEX_VERSION),
    generation: v.pipe(v.string(), v.regex(SHA256_HEX)),
    start: byteCount,
    bytes: byteCount,
    messageCount: byteCount,
    roundCount: v.optional(byteCount),
    fallbackTitle: v.optional(v.nullable(SessionTitleSchema)),
    rounds: v.array(v.object({ messageIndex: byteCount, byteOffset: byteCount })),
  }),
  v.check(
    (index) => index.roundCount === undefined || index.roundCount === index.rounds.length,
    "roundCount must equal the number of rounds",
  ),
  v.check(
    (index) =>
      index.fallbackTitle === undefined || index.fallbackTitle === null ||
      isIndexTitle(index.fallbackTitle, index.messageCount),
    "fallbackTitle must be a fallback title of one message the index covers",
  ),
);

/**
 * True when an index records exactly `title` as the fallback title of the messages it covers
 * (text, source and message index; null for none). Undefined (nothing recorded) is never it.
 */
export function recordsTitle(index: RoundIndex, title: SessionTitle | null): boolean {
  const recorded = index.fallbackTitle;
  if (recorded === undefined || recorded === null || title === null) return recorded === title;
  return recorded.text === title.text && recorded.source === title.source &&
    recorded.messageIndices.length === title.messageIndices.length &&
    recorded.messageIndices.every((at, i) => at === title.messageIndices[i]);
}

/**
 * True for a fallback title an index of `messageCount` messages may record: a valid title of
 * source `"fallback"` naming one message of the range.
 */
function isIndexTitle(value: unknown, messageCount: number): value is SessionTitle {
  return isValidTitle(value) && value.source === "fallback" && value.model === undefined &&
    value.messageIndices.length === 1 && (value.messageIndices[0] as number) < messageCount;
}

/** The JSON path of the first valibot issue, in `a.b[2].c` form. */
export function issuePath(issue: v.BaseIssue<unknown>, prefix = ""): string {
  let path = prefix;
  for (const item of issue.path ?? []) {
    const key = (item as { key: unknown }).key;
    path += typeof key === "number" ? `[${key}]` : path === "" ? String(key) : `.${String(key)}`;
  }
  return path;
}

/** Parses JSON text, mapping a syntax error to a `SessionFormatError` naming the file. */
export function parseJsonText(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new SessionFormatError(`Invalid JSON: ${(error as Error).message}`, {
      file,
      cause: error,
    });
  }
}

/**
 * Validates parsed meta.json content. An unknown format or version is `UnsupportedSessionError`;
 * anything else that does not fit is `SessionFormatError` with the field's JSON path.
 * `headerFieldsOnly`: the header's metadata arrays (runtime contexts, prompt timings, compactions,
 * system prompt checkpoints) are left for the caller to check, as an open does after the cwd and
 * every message (the version-2 order of checks; see `parseHeaderFields`).
 */
export function parseStorageMeta(
  value: unknown,
  file: string,
  headerFieldsOnly = false,
): StorageMeta {
  const parseHeader = headerFieldsOnly ? parseHeaderFields : parseSessionHeader;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new SessionFormatError("Invalid session metadata: expected a JSON object", {
      file,
      path: "",
      value,
    });
  }
  const record = value as Record<string, unknown>;
  if (record.format !== STORAGE_FORMAT || record.version !== STORAGE_VERSION) {
    // The values found are shown short (`preview`) and kept whole on the error.
    throw new UnsupportedSessionError(
      `Unsupported session storage format or version (format ${preview(record.format)}, ` +
        `version ${preview(record.version)}); this library reads format "loop-session" version 3`,
      { file, format: record.format, version: record.version },
    );
  }
  checkEnvelopedHeader(record.header, file);
  const { generation, start, bytes, messageCount } = record;
  if (
    "header" in record && typeof generation === "string" && SHA256_HEX.test(generation) &&
    isSafeNonNegative(start) && isSafeNonNegative(bytes) && isSafeNonNegative(messageCount)
  ) {
    // The envelope checked by hand with the rules of `StorageMetaSchema`, at a fraction of its
    // cost (a listing parses one meta.json per session); its output has the schema's keys, in
    // its order. Anything else goes through the schema, which names the field.
    return {
      format: STORAGE_FORMAT,
      version: STORAGE_VERSION,
      header: parseHeader(record.header, { file, path: "header" }),
      generation,
      start,
      bytes,
      messageCount,
    };
  }
  const result = v.safeParse(StorageMetaSchema, value);
  if (!result.success) {
    const issue = result.issues[0];
    const path = issuePath(issue);
    throw new SessionFormatError(`Invalid session metadata: ${issueDetail(issue)}`, {
      file,
      path,
      value: issue.input,
    });
  }
  const header = parseHeader(record.header, { file, path: "header" });
  return { ...result.output, header } as StorageMeta;
}

/**
 * Inside a supported envelope the header is current-format metadata, so a header that is not an
 * object, or one whose `format` is not the session format or whose `version` is not an integer,
 * is damage (`SessionFormatError` naming the field), which listings report; only a header of
 * another integer version is one this library does not read (`UnsupportedSessionError`).
 */
function checkEnvelopedHeader(header: unknown, file: string): void {
  const invalid = (path: string, message: string, value: unknown): SessionFormatError =>
    new SessionFormatError(`Invalid session metadata: ${message}`, { file, path, value });
  if (typeof header !== "object" || header === null || Array.isArray(header)) {
    throw invalid("header", "expected the header object", header);
  }
  const { format, version } = header as Record<string, unknown>;
  if (format !== SESSION_FORMAT) {
    throw invalid("header.format", `expected "${SESSION_FORMAT}"`, format);
  }
  if (typeof version !== "number" || !Number.isSafeInteger(version)) {
    throw invalid("header.version", "expected an integer", version);
  }
}

/**
 * Reads and validates meta.json in `dir`, never through a link and never waiting on a FIFO
 * (`readSessionFile`): something else there is a `SessionFormatError`, nothing a `NotFound`.
 * `kindChecked`: the caller has just seen a regular file there (see `readSessionFile`).
 * `headerFieldsOnly`: see `parseStorageMeta`.
 */
export async function readStorageMeta(
  fs: FileSystem,
  dir: string,
  kindChecked = false,
  headerFieldsOnly = false,
): Promise<StorageMeta> {
  const file = join(dir, META_FILE);
  const read = await readSessionFile(fs, file, kindChecked);
  if (read === undefined) throw new NotFound("readFile", file);
  if (typeof read === "string") throw irregularFile(read, file);
  return decodeStorageMeta(read, file, headerFieldsOnly);
}

/**
 * The `SessionNotFoundError` for session directory `dir` without meta.json (or missing), naming
 * meta.json; `cause` is the port's `NotFound`, when one was raised.
 */
export function metaNotFound(dir: string, cause?: unknown): SessionNotFoundError {
  return new SessionNotFoundError(`No session at '${dir}': meta.json not found`, {
    file: join(dir, META_FILE),
    ...(cause === undefined ? {} : { cause }),
  });
}

/**
 * True when session directory `dir`, found without meta.json, had a save committed: its
 * `index.json` is there (written only after a save committed) and meta.json is still missing
 * when looked at after it (a save publishes meta.json first, so a first save that committed
 * meanwhile is never taken for a lost meta.json). Looks at entries only, following no link.
 */
export async function lostMetaJson(fs: FileSystem, dir: string): Promise<boolean> {
  if (await entryKind(fs, join(dir, INDEX_FILE)) === undefined) return false;
  return await entryKind(fs, join(dir, META_FILE)) === undefined;
}

/**
 * The error for session directory `dir` found without meta.json: a `CorruptSessionError` naming
 * meta.json when a save committed there (`lostMetaJson`), so a host never takes a damaged
 * session for one that does not exist; else `metaNotFound`. `cause` is the port's `NotFound`,
 * when one was raised.
 */
export async function missingMetaError(
  fs: FileSystem,
  dir: string,
  cause?: unknown,
): Promise<SessionNotFoundError | CorruptSessionError> {
  return await lostMetaJson(fs, dir) ? lostMetaError(dir, cause) : metaNotFound(dir, cause);
}

/** The `CorruptSessionError` of session directory `dir` whose meta.json is lost (`lostMetaJson`). */
export function lostMetaError(dir: string, cause?: unknown): CorruptSessionError {
  return new CorruptSessionError(
    "meta.json is missing but index.json shows a save committed here; the session is damaged " +
      "and was not modified",
    { file: join(dir, META_FILE), ...(cause === undefined ? {} : { cause }) },
  );
}

/** Validates the bytes of meta.json read from `file` (`headerFieldsOnly`: see `parseStorageMeta`). */
export function decodeStorageMeta(
  bytes: Uint8Array,
  file: string,
  headerFieldsOnly = false,
): StorageMeta {
  return parseStorageMeta(parseJsonBytes(bytes, file), file, headerFieldsOnly);
}

/**
 * Decodes and parses the JSON text of `file`: a failure of either (bytes too many for the
 * runtime's longest string included) is a `SessionFormatError` naming the file.
 */
export function parseJsonBytes(bytes: Uint8Array, file: string): unknown {
  let text: string;
  try {
    text = decoder.decode(bytes);
  } catch (error) {
    throw undecodable(error, bytes.length, file);
  }
  return parseJsonText(text, file);
}

/**
 * The `SessionFormatError` for `length` bytes of `file` (at JSON path `path`) that the runtime
 * could not decode as one string (more characters than its longest string holds).
 */
export function undecodable(
  error: unknown,
  length: number,
  file: string,
  path?: string,
): SessionFormatError {
  return new SessionFormatError(
    `Invalid JSON: ${length} bytes cannot be read as one string (${(error as Error).message})`,
    { file, ...(path === undefined ? {} : { path }), cause: error },
  );
}

/**
 * Opens the session file at `path` for reading (or with `append` for appending) with
 * `openIfRegularWaiting`: never through a link, never waiting on a FIFO, and a regular file that
 * the no-follow open finds busy (a lease held by another process) opened with an open that waits
 * for the lease: a saved session is never reported unreadable for a lease.
 *
 * @throws {SessionFormatError} When what is there is not a regular file, naming it.
 * @throws {NotFound} When nothing is there.
 */
export async function openSessionFile(
  fs: FileSystem,
  path: string,
  options: RegularOpenOptions = {},
): Promise<RegularFile> {
  const opened = await openIfRegularWaiting(fs, path, options);
  if (typeof opened === "object") return opened;
  if (opened !== undefined) refuseIrregularFile(opened, path);
  throw new NotFound("open", path);
}

/**
 * Refuses a session file whose own kind (`lstat`, or a directory entry) is not a regular file: a
 * symlink, a directory, a device or a FIFO is never read or written through.
 *
 * @throws {SessionFormatError} Naming the file and its kind.
 */
export function refuseIrregularFile(kind: EntryKind, path: string): void {
  if (kind !== "file") throw irregularFile(kind, path);
}

/** The error for a session file at `path` that is a `kind` other than a regular file. */
function irregularFile(kind: EntryKind, path: string): SessionFormatError {
  const what = kind === "other" ? "special file (a FIFO, socket or device)" : kind;
  return new SessionFormatError(
    `Session file is a ${what}, not a regular file; refusing to read or write through it`,
    { file: path },
  );
}

/**
 * Serializes meta.json (compact JSON and a trailing newline).
 *
 * @param meta The storage metadata.
 * @param file The meta.json path, for error reports.
 * @throws {SessionFormatError} When a field holds a value JSON cannot write (a BigInt), naming
 * the field: a validation failure, found before anything is written.
 */
export function encodeStorageMeta(meta: StorageMeta, file?: string): Uint8Array {
  let text: string;
  try {
    text = JSON.stringify(meta);
  } catch (error) {
    throw unwritableMeta(error, unwritablePath(meta), file);
  }
  return encoder.encode(text + "\n");
}

/** `JSON.stringify(value)`; a value JSON cannot write is refused as `unwritableMeta` at `path`. */
function metaJson(value: unknown, path: string, file: string | undefined): string | undefined {
  try {
    return JSON.stringify(value);
  } catch (error) {
    throw unwritableMeta(error, path, file);
  }
}

/** The path (`header.title`, say) of the first field of `meta` that JSON cannot write. */
function unwritablePath(meta: StorageMeta): string | undefined {
  for (const [key, value] of Object.entries(meta)) {
    const fields = key === "header" && typeof value === "object" && value !== null
      ? Object.entries(value)
      : [];
    for (const [field, fieldValue] of fields) {
      try {
        JSON.stringify(fieldValue);
      } catch {
        return childPath(key, field);
      }
    }
    try {
      JSON.stringify(value);
    } catch {
      return key;
    }
  }
  return undefined;
}

/**
 * The error for metadata that JSON cannot write (`cause`, the error `JSON.stringify` threw): a
 * `SessionFormatError`, as a failed validation is.
 */
function unwritableMeta(
  cause: unknown,
  path: string | undefined,
  file: string | undefined,
): SessionFormatError {
  return new SessionFormatError(
    `Invalid session metadata: it cannot be written as JSON (${(cause as Error).message})`,
    {
      ...(file === undefined ? {} : { file }),
      ...(path === undefined ? {} : { path }),
      cause,
    },
  );
}

/**
 * The bytes of each array of a header, kept by `encodeStorageMetaReusing` while that array is the
 * same object.
 */
export type EncodedArrays = WeakMap<readonly unknown[], Uint8Array>;

/**
 * `encodeStorageMeta`, byte for byte, for a writer that publishes meta.json again and again with
 * the same header arrays (runtime contexts, prompt timings, checkpoints: they grow with the session
 * and are rarely given again): the encoded bytes of each non-empty array of the header are kept in
 * `cache` and reused while the header holds the same array object, so a save that keeps them
 * copies their bytes instead of serializing and encoding them again. The caller must never change
 * an array once it was encoded here. A value JSON cannot write is refused as `encodeStorageMeta`
 * refuses it (a `SessionFormatError` naming `file` and the field).
 */
export function encodeStorageMetaReusing(
  meta: StorageMeta,
  cache: EncodedArrays,
  file?: string,
): Uint8Array {
  // Nothing to reuse: one `JSON.stringify`, as `encodeStorageMeta` writes it (and refuses it).
  if (!hasArrayToReuse(meta.header)) return encodeStorageMeta(meta, file);
  const parts: Uint8Array[] = [];
  let text = "{";
  // JSON.stringify's own order and omissions: own enumerable string keys in property order, a
  // value that serializes to nothing (undefined) leaves its key out.
  let firstKey = true;
  for (const [key, value] of Object.entries(meta)) {
    const comma = firstKey ? "" : ",";
    if (key !== "header" || typeof value !== "object" || value === null || Array.isArray(value)) {
      const json = metaJson(value, key, file);
      if (json === undefined) continue;
      text += `${comma}${JSON.stringify(key)}:${json}`;
      firstKey = false;
      continue;
    }
    firstKey = false;
    text += `${comma}${JSON.stringify(key)}:{`;
    let first = true;
    for (const [field, fieldValue] of Object.entries(value)) {
      if (Array.isArray(fieldValue) && fieldValue.length > 0) {
        let bytes = cache.get(fieldValue);
        if (bytes === undefined) {
          bytes = encoder.encode(metaJson(fieldValue, childPath(key, field), file) as string);
          cache.set(fieldValue, bytes);
        }
        text += `${first ? "" : ","}${JSON.stringify(field)}:`;
        parts.push(encoder.encode(text), bytes);
        text = "";
      } else {
        const json = metaJson(fieldValue, childPath(key, field), file);
        if (json === undefined) continue;
        text += `${first ? "" : ","}${JSON.stringify(field)}:${json}`;
      }
      first = false;
    }
    text += "}";
  }
  parts.push(encoder.encode(text + "}\n"));
  return joinBytes(parts);
}

/**
 * True when `header` holds a non-empty array, whose bytes `encodeStorageMetaReusing` keeps (an
 * inherited enumerable field counts too: the answer only chooses the longer path).
 */
function hasArrayToReuse(header: unknown): boolean {
  for (const field in header as Record<string, unknown>) {
    const value = (header as Record<string, unknown>)[field];
    if (Array.isArray(value) && value.length > 0) return true;
  }
  return false;
}

/**
 * Serializes index.json (compact JSON and a trailing newline) in a fixed key order with
 * `roundCount` and the fallback title (when recorded) before the rounds: `readIndexHead` reads
 * them from the first bytes.
 */
export function encodeRoundIndex(index: RoundIndex): Uint8Array {
  const { format, version, generation, start, bytes, messageCount, fallbackTitle, rounds } = index;
  return encoder.encode(
    JSON.stringify({
      format,
      version,
      generation,
      start,
      bytes,
      messageCount,
      roundCount: rounds.length,
      ...(fallbackTitle === undefined ? {} : { fallbackTitle }),
      rounds,
    }) + "\n",
  );
}

/**
 * Reads index.json in `dir` (never through a link, never waiting on a FIFO; `kindChecked` as for
 * `readStorageMeta`). Returns `undefined` when it is missing, not a regular file, unparsable, does
 * not match its schema, or is larger than any index of this library's form can be for the
 * `committed` counts (`readRoundIndexWithin`): the index is derived data and is rebuilt, never
 * trusted blindly.
 */
export async function readRoundIndex(
  fs: FileSystem,
  dir: string,
  kindChecked: boolean,
  committed: IndexCounts,
): Promise<RoundIndex | undefined> {
  return (await readSizedRoundIndex(fs, dir, kindChecked, committed))?.index;
}

/** The committed counts that bound the size of an index (`indexSizeBound`). */
export type IndexCounts = Pick<StorageMeta, "messageCount" | "bytes">;

/** An index.json larger than `oversized` bytes, the bound for its counts: not parsed, not used. */
export interface OversizedIndex {
  /** The most bytes an index of this library's form can have for the counts it was read for. */
  readonly oversized: number;
}

/**
 * `readRoundIndex`, telling an index.json larger than its size bound (`OversizedIndex`, not
 * parsed) from one that is missing, not a regular file or not valid (undefined).
 *
 * The bound is `indexSizeBound` of `committed` (meta.json's counts). When it exceeds
 * `INDEX_HEAD_LIMIT` the file is opened and its size (from the open where the port has
 * `openNoFollow`, otherwise an `fstat`) is checked before anything is read, so nothing past the
 * bound is read. Otherwise the file is read whole in one call, as a small index is, and its
 * length is checked before it is decoded.
 */
export async function readRoundIndexWithin(
  fs: FileSystem,
  dir: string,
  kindChecked: boolean,
  committed: IndexCounts,
): Promise<RoundIndex | OversizedIndex | undefined> {
  const read = await readIndexBytes(fs, dir, kindChecked, committed);
  return read === undefined || "oversized" in read
    ? read
    : parseRoundIndexText(decoder.decode(read));
}

/** An index.json read by `readSizedRoundIndex`: its records and its length in bytes. */
export interface SizedRoundIndex {
  /** The index, as `readRoundIndex` returns it. */
  readonly index: RoundIndex;
  /** The length of the file it was read from, in bytes. */
  readonly size: number;
}

/**
 * `readRoundIndex`, also returning the length of the file read: a writer that keeps using the
 * index it found tells by that length whether another process changed the file since.
 */
export async function readSizedRoundIndex(
  fs: FileSystem,
  dir: string,
  kindChecked: boolean,
  committed: IndexCounts,
): Promise<SizedRoundIndex | undefined> {
  const read = await readIndexBytes(fs, dir, kindChecked, committed);
  if (read === undefined || "oversized" in read) return undefined;
  const index = parseRoundIndexText(decoder.decode(read));
  return index === undefined ? undefined : { index, size: read.length };
}

/**
 * The bytes of index.json in `dir` for `readRoundIndexWithin`: undefined when it is missing or not
 * a regular file, `OversizedIndex` when it is larger than the bound for `committed`.
 */
async function readIndexBytes(
  fs: FileSystem,
  dir: string,
  kindChecked: boolean,
  committed: IndexCounts,
): Promise<Uint8Array | OversizedIndex | undefined> {
  const file = join(dir, INDEX_FILE);
  const bound = indexSizeBound(committed.messageCount, committed.bytes);
  let bytes: Uint8Array;
  if (bound > INDEX_HEAD_LIMIT) {
    // A port that reads a file whole cannot stop at the bound: open it, and ask its size first.
    const kindKnown = kindChecked && fs.openNoFollow === undefined;
    const within = await readIndexWithin(fs, file, kindKnown, true, bound);
    if (within === undefined) return undefined;
    if (within === "oversized") return { oversized: bound };
    bytes = within;
  } else {
    let read: Found<Uint8Array>;
    try {
      read = await readSessionFile(fs, file, kindChecked);
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      // Too large to be read whole: larger than any bound that allows reading it whole.
      if (isTooLarge(error)) return { oversized: bound };
      throw error;
    }
    // Not a regular file (a planted link, a FIFO): never read through, and rebuilt like a missing one.
    if (read === undefined || typeof read === "string") return undefined;
    bytes = read;
    if (bytes.length > bound) return { oversized: bound };
  }
  return bytes;
}

/** True for the failure of a whole-file read of a file too large for one buffer (`EFBIG`). */
function isTooLarge(error: unknown): boolean {
  return error instanceof FsError && error.code === "EFBIG";
}

/**
 * Opens index.json at `file` for reading only if it is a regular file (`openIfRegular`), or at once
 * with `kindKnown` (the caller saw a regular file there). Undefined when nothing is there or
 * something else is. A regular file that the no-follow open finds busy (`EAGAIN`: a lease another
 * process holds) is, with `wait`, opened after an `lstat` by an open that waits for the lease, and
 * is otherwise not used (undefined): the index is derived data.
 */
async function openIndex(
  fs: FileSystem,
  file: string,
  kindKnown: boolean,
  wait: boolean,
): Promise<RegularFile | undefined> {
  if (kindKnown) {
    try {
      return sizedLater(await fs.open(file));
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      throw error;
    }
  }
  let found: Found<RegularFile>;
  try {
    found = await openIfRegular(fs, file);
  } catch (error) {
    if (!isBusy(error)) throw error;
    if (!wait) return undefined;
    found = await ifRegular(fs, file, undefined, () => openChecked(fs, file, {}));
  }
  // Missing, or a link, a directory or a FIFO: not an index.
  return typeof found === "object" ? found : undefined;
}

/**
 * Opens index.json at `file` (`openIndex`) and reads it whole if it holds at most `bound` bytes:
 * its size (known from the open, or an `fstat`) is checked before anything is read. `"oversized"`
 * when it holds more; undefined when `openIndex` finds no index there.
 */
async function readIndexWithin(
  fs: FileSystem,
  file: string,
  kindKnown: boolean,
  wait: boolean,
  bound: number,
): Promise<Uint8Array | "oversized" | undefined> {
  const opened = await openIndex(fs, file, kindKnown, wait);
  if (opened === undefined) return undefined;
  try {
    const size = await opened.size();
    return size > bound ? "oversized" : await opened.handle.read(0, size);
  } finally {
    await opened.handle.close();
  }
}

/** The counts at the start of index.json, and its first round when it is in the first bytes. */
export interface RoundIndexHead {
  /** The generation the index was built for. */
  readonly generation: string;
  /** The committed range start the index was built for. */
  readonly start: number;
  /** The committed byte length the index covers. */
  readonly bytes: number;
  /** The number of messages the index covers. */
  readonly messageCount: number;
  /** The number of user rounds the index lists. */
  readonly roundCount: number;
  /** The recorded fallback title (see `RoundIndex.fallbackTitle`); undefined when not recorded. */
  readonly fallbackTitle: SessionTitle | null | undefined;
  /** The first round, when it lies in the bytes read. */
  readonly firstRound: RoundEntry | undefined;
  /** The byte offset of the first round in the file, when it lies in the bytes read. */
  readonly roundsAt?: number;
}

/** Indexes up to this size are read and checked whole; larger ones by their head only. */
export const INDEX_HEAD_LIMIT = 64 * 1024;
/** How many bytes of a large index are read for its head. */
export const HEAD_BYTES = 4096;
/**
 * How many of those bytes are decoded for the head: the canonical head with its first round is
 * at most 631 bytes (244 for the counts with 16-digit numbers, 324 for a fallback title of 120
 * bytes that are all escaped, 63 for the first round), and a listing decodes it once per session.
 */
export const HEAD_TEXT_BYTES = 1024;

/**
 * The largest index.json `encodeRoundIndex` can write for a committed range of `messageCount`
 * messages in `bytes` bytes: its fixed fields (a fallback title included, as this library writes
 * one: at most 120 bytes of text, no model) and at most one round per message, each
 * `{"messageIndex":…,"byteOffset":…},` with as many digits as those counts have. A larger
 * index.json is not of this library's form: readers never parse it (`readListingIndex`,
 * `readRoundIndexWithin`), and a writer's page read rebuilds it.
 */
export function indexSizeBound(messageCount: number, bytes: number): number {
  const digits = (n: number): number => String(n).length;
  return 600 + messageCount * (32 + digits(messageCount) + digits(bytes));
}

/** What a listing read of index.json found: its head (and how to read it whole), or all of it. */
export type ListingIndex =
  | { readonly index: RoundIndex }
  | {
    readonly head: RoundIndexHead;
    /** The whole index, parsed from the bytes already read or read again the same way. */
    readonly whole: () => Promise<RoundIndex | undefined>;
    /**
     * For an index too large to be read in one call: true when its rounds list a round of the
     * message `messageIndex`, found by a few small reads (`roundListed`); false when they do not
     * (or the file is no longer of this library's form), so that the caller reads it whole.
     */
    readonly listsRound?: (messageIndex: number) => Promise<boolean>;
  };

/**
 * Reads index.json for a listing of the committed state `meta`, as its head: the counts and the
 * first round, which the canonical form puts first (a file not in that form is parsed whole).
 * When an index of this library's form for that state fits in `INDEX_HEAD_LIMIT` (see
 * `indexSizeBound`) the file is read in one call, otherwise by its first bytes
 * (`readIndexHead`), so reading the index costs at most `INDEX_HEAD_LIMIT` bytes whatever the
 * history's size (a few KiB once the history is too long for a whole read).
 * Undefined when the file is missing or not of this library's form, which a file larger than
 * `indexSizeBound` for `meta`'s counts is not: a small one is refused by the length its one read
 * returns, before it is decoded, and a large one by its size (from the open with `openNoFollow`,
 * otherwise an `fstat`), before anything is read, here or when it is read whole.
 *
 * Not read through a link: with `kindKnown` the caller has seen index.json to be a regular file
 * (a directory listing); without it, a small index is read with `readIfRegular` (and read whole
 * from those same bytes when asked) and a large one is opened with `openIfRegular`, which check
 * the kind in the read or open itself where the port has `readFileNoFollow` and `openNoFollow`.
 * A link, a directory or a FIFO there is not an index (undefined), nor is a regular file that a
 * no-follow read or open found busy (`EAGAIN`: a lease held by another process; the index is
 * derived data, so the listing does without it instead of waiting).
 */
export async function readListingIndex(
  fs: FileSystem,
  dir: string,
  meta: IndexCounts,
  kindKnown = true,
): Promise<ListingIndex | undefined> {
  const file = join(dir, INDEX_FILE);
  const bound = indexSizeBound(meta.messageCount, meta.bytes);
  if (bound > INDEX_HEAD_LIMIT) {
    const opened = await openIndex(fs, file, kindKnown, false);
    if (opened === undefined) return undefined;
    const read = await readIndexHead(opened, bound);
    if (read === undefined || "index" in read) return read;
    const whole = async (): Promise<RoundIndex | undefined> => {
      // Opened again, and its size checked again: it may have been replaced since.
      const bytes = await readIndexWithin(fs, file, kindKnown, false, bound);
      return bytes instanceof Uint8Array ? parseRoundIndexText(decoder.decode(bytes)) : undefined;
    };
    const roundsAt = read.head.roundsAt;
    const listsRound = roundsAt === undefined ? undefined : async (target: number) => {
      // Opened again, and its size checked again: it may have been replaced since.
      const again = await openIndex(fs, file, kindKnown, false);
      if (again === undefined) return false;
      try {
        const size = await again.size();
        if (size > bound) return false;
        return await roundListed(
          (at, length) => again.handle.read(at, length),
          roundsAt,
          size,
          target,
        );
      } finally {
        await again.handle.close();
      }
    };
    return { head: read.head, whole, ...(listsRound === undefined ? {} : { listsRound }) };
  }
  // The whole file in one call, never through a link when its kind is not known.
  let read: Found<Uint8Array>;
  try {
    read = kindKnown ? await fs.readFile(file) : await readIfRegular(fs, file);
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    // A busy regular file is not used (derived data), nor is one too large to read whole; any
    // other failure is reported.
    if ((!kindKnown && isBusy(error)) || isTooLarge(error)) return undefined;
    throw error;
  }
  // A link, a directory or a FIFO is just not an index, nor is a file larger than the bound: its
  // bytes are not decoded.
  if (typeof read !== "object" || read.length > bound) return undefined;
  const bytes = read;
  // The head is in the first bytes of the canonical form: decode only those for it.
  const head = indexHeadOf(decoder.decode(bytes.subarray(0, HEAD_TEXT_BYTES)));
  if (head !== undefined) {
    return { head, whole: () => Promise.resolve(parseRoundIndexText(decoder.decode(bytes))) };
  }
  const index = parseRoundIndexText(decoder.decode(bytes));
  return index === undefined ? undefined : { index };
}

/**
 * Bytes `roundListed` reads at a time: twice the longest canonical round entry (67 bytes, with
 * 16-digit numbers, and its comma), so an entry that starts in the first half is read whole.
 */
const ROUND_WINDOW = 136;

/**
 * True when the rounds of an index in the canonical form (`encodeRoundIndex`), from byte `from`
 * (its first round) to byte `to` (the end of the file), read by `read`, list a round of the
 * message `target`: a binary search by byte position over the entries, which this library writes
 * in increasing message order, reading `ROUND_WINDOW` bytes at a time (about 20 reads for a
 * million rounds). False when none is found, also for text not in that form: the caller then
 * reads the index whole. True only for an entry of the file that names `target`.
 */
export async function roundListed(
  read: (offset: number, length: number) => Promise<Uint8Array>,
  from: number,
  to: number,
  target: number,
): Promise<boolean> {
  const half = ROUND_WINDOW / 2;
  let low = from; // the target's entry, if listed, starts in [low, high)
  let high = to;
  while (high - low > half) {
    const mid = low + Math.floor((high - low) / 2);
    const text = decoder.decode(await read(mid, ROUND_WINDOW));
    const at = text.indexOf(ROUND_KEY);
    // No entry starts in the first half-window after mid: past the last one (the canonical
    // entries follow one another), so every entry starts before mid.
    if (at < 0 || at >= half || mid + at >= high) {
      high = mid;
      continue;
    }
    const found = roundEntryIndex(text, at);
    if (found === undefined) return false;
    if (found === target) return true;
    if (found < target) low = mid + at + 1;
    else high = mid + at;
  }
  const text = decoder.decode(await read(low, high - low + ROUND_WINDOW));
  for (
    let at = text.indexOf(ROUND_KEY);
    at >= 0 && low + at < high;
    at = text.indexOf(ROUND_KEY, at + 1)
  ) {
    if (roundEntryIndex(text, at) === target) return true;
  }
  return false;
}

/** The message index of the canonical round entry at `at` of `text`; undefined if not one. */
function roundEntryIndex(text: string, at: number): number | undefined {
  const index = readCount(text, at + ROUND_KEY.length);
  if (index === undefined || !text.startsWith(OFFSET_KEY, index[1])) return undefined;
  const offset = readCount(text, index[1] + OFFSET_KEY.length);
  if (offset === undefined || text.charCodeAt(offset[1]) !== 125 /* } */) return undefined;
  return index[0];
}

/**
 * Reads index.json by its first bytes: its counts and, when it lies in those bytes, its first
 * round (the canonical form puts them first). A head not in the canonical form makes the whole
 * file be read and parsed. Undefined when the file is missing or not of this library's form,
 * which a file larger than `bound` is not: its size is checked before anything is read.
 */
async function readIndexHead(
  file: RegularFile,
  bound: number,
): Promise<{ readonly index: RoundIndex } | { readonly head: RoundIndexHead } | undefined> {
  const handle = file.handle;
  try {
    const size = await file.size();
    if (size > bound) return undefined;
    const first = await handle.read(0, HEAD_BYTES);
    const head = indexHeadOf(decoder.decode(first.subarray(0, HEAD_TEXT_BYTES)));
    if (head !== undefined) return { head };
    const whole = first.length < HEAD_BYTES ? first : await handle.read(0, size);
    const index = parseRoundIndexText(decoder.decode(whole));
    return index === undefined ? undefined : { index };
  } finally {
    await handle.close();
  }
}

/** The head of index.json text in the canonical form, or undefined for any other text. */
function indexHeadOf(text: string): RoundIndexHead | undefined {
  const head = INDEX_HEAD.exec(text);
  if (head === null) return undefined;
  const messageCount = Number(head[4]);
  const titled = readTitleField(text, head[0].length, messageCount);
  if (titled === undefined) return undefined;
  let firstRound: RoundEntry | undefined;
  const at = titled[1];
  if (text.startsWith(ROUND_KEY, at)) {
    const messageIndex = readCount(text, at + ROUND_KEY.length);
    if (messageIndex !== undefined && text.startsWith(OFFSET_KEY, messageIndex[1])) {
      const byteOffset = readCount(text, messageIndex[1] + OFFSET_KEY.length);
      if (byteOffset !== undefined && text.charCodeAt(byteOffset[1]) === 125 /* } */) {
        firstRound = { messageIndex: messageIndex[0], byteOffset: byteOffset[0] };
      }
    }
  }
  return {
    generation: head[1] as string,
    start: Number(head[2]),
    bytes: Number(head[3]),
    messageCount,
    roundCount: Number(head[5]),
    fallbackTitle: titled[0],
    firstRound,
    ...(firstRound === undefined ? {} : { roundsAt: encoder.encode(text.slice(0, at)).length }),
  };
}

/**
 * Parses index.json text with the rules of `RoundIndexSchema`: the canonical form that
 * `encodeRoundIndex` writes is scanned without building an object per round, anything else is
 * parsed as JSON and checked by hand. Undefined when the text is not a valid index.
 */
export function parseRoundIndexText(text: string): RoundIndex | undefined {
  const scanned = scanCanonicalIndex(text);
  if (scanned !== undefined) return scanned;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const index = value as Record<string, unknown>;
  const count = (x: unknown): boolean => Number.isSafeInteger(x) && (x as number) >= 0;
  if (
    index.format !== INDEX_FORMAT || index.version !== INDEX_VERSION ||
    typeof index.generation !== "string" || !SHA256_HEX.test(index.generation) ||
    !count(index.start) || !count(index.bytes) || !count(index.messageCount) ||
    !Array.isArray(index.rounds) ||
    (index.roundCount !== undefined && index.roundCount !== index.rounds.length) ||
    (index.fallbackTitle !== undefined && index.fallbackTitle !== null &&
      !isIndexTitle(index.fallbackTitle, index.messageCount as number))
  ) return undefined;
  for (const round of index.rounds as unknown[]) {
    if (typeof round !== "object" || round === null) return undefined;
    const entry = round as Record<string, unknown>;
    if (!count(entry.messageIndex) || !count(entry.byteOffset)) return undefined;
  }
  return index as unknown as RoundIndex;
}

const INDEX_HEAD =
  /^\{"format":"loop-session-index","version":1,"generation":"([0-9a-f]{64})","start":(0|[1-9]\d{0,15}),"bytes":(0|[1-9]\d{0,15}),"messageCount":(0|[1-9]\d{0,15}),"roundCount":(0|[1-9]\d{0,15}),/;
const TITLE_KEY = '"fallbackTitle":';
const ROUNDS_KEY = '"rounds":[';
const ROUND_KEY = '{"messageIndex":';
const OFFSET_KEY = ',"byteOffset":';

/**
 * Reads what follows `roundCount` in the canonical form, at `at`: the optional fallback title and
 * the key of the rounds. Returns the title (undefined when not recorded) and the position of the
 * first round, or undefined when the text is not of that form there. The title's JSON ends where
 * `,"rounds":[` first follows it: inside a JSON string every quote is escaped, so that text can
 * only be the next key.
 */
function readTitleField(
  text: string,
  at: number,
  messageCount: number,
): [SessionTitle | null | undefined, number] | undefined {
  let title: SessionTitle | null | undefined;
  let next = at;
  if (text.startsWith(TITLE_KEY, at)) {
    const from = at + TITLE_KEY.length;
    const end = text.indexOf(`,${ROUNDS_KEY}`, from);
    if (end < 0) return undefined;
    let value: unknown;
    try {
      value = JSON.parse(text.slice(from, end));
    } catch {
      return undefined;
    }
    if (value !== null && !isIndexTitle(value, messageCount)) return undefined;
    title = value;
    next = end + 1;
  }
  return text.startsWith(ROUNDS_KEY, next) ? [title, next + ROUNDS_KEY.length] : undefined;
}

/** Reads a decimal safe integer at `at`; returns [value, next position] or undefined. */
function readCount(text: string, at: number): [number, number] | undefined {
  let value = 0;
  let i = at;
  for (; i < text.length; i++) {
    const digit = text.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) break;
    if (i > at && value === 0) return undefined; // a leading zero
    value = value * 10 + digit;
  }
  return i === at || !Number.isSafeInteger(value) ? undefined : [value, i];
}

/**
 * Reads an index in exactly the form `encodeRoundIndex` writes (compact JSON, fixed key order)
 * without building an object per round; undefined for any other text (the caller then parses it
 * as JSON). Equivalent to `JSON.parse` plus the schema for the texts it accepts.
 */
function scanCanonicalIndex(text: string): RoundIndex | undefined {
  const head = INDEX_HEAD.exec(text);
  if (head === null) return undefined;
  const messageCount = Number(head[4]);
  const titled = readTitleField(text, head[0].length, messageCount);
  if (titled === undefined) return undefined;
  const rounds: RoundEntry[] = [];
  let at = titled[1];
  if (text.charCodeAt(at) !== 93 /* ] */) {
    for (;;) {
      if (!text.startsWith(ROUND_KEY, at)) return undefined;
      const messageIndex = readCount(text, at + ROUND_KEY.length);
      if (messageIndex === undefined || !text.startsWith(OFFSET_KEY, messageIndex[1])) {
        return undefined;
      }
      const byteOffset = readCount(text, messageIndex[1] + OFFSET_KEY.length);
      if (byteOffset === undefined || text.charCodeAt(byteOffset[1]) !== 125 /* } */) {
        return undefined;
      }
      rounds.push({ messageIndex: messageIndex[0], byteOffset: byteOffset[0] });
      at = byteOffset[1] + 1;
      const next = text.charCodeAt(at);
      if (next === 93) break;
      if (next !== 44 /* , */) return undefined;
      at++;
    }
  }
  const rest = text.slice(at);
  if (rest !== "]}\n" && rest !== "]}") return undefined;
  if (rounds.length !== Number(head[5])) return undefined;
  return {
    format: INDEX_FORMAT,
    version: INDEX_VERSION,
    generation: head[1] as string,
    start: Number(head[2]),
    bytes: Number(head[3]),
    messageCount,
    ...(titled[0] === undefined ? {} : { fallbackTitle: titled[0] }),
    rounds,
  };
}

/** The fields that name a committed range, in meta.json and in an index.json of it. */
export type RangeFields = Pick<StorageMeta, "generation" | "start" | "bytes" | "messageCount">;

/** True when `a` and `b` name the same committed range: generation, start, length and count. */
export function sameCommittedRange(a: RangeFields, b: RangeFields): boolean {
  return a.generation === b.generation && a.start === b.start && a.bytes === b.bytes &&
    a.messageCount === b.messageCount;
}

/**
 * True when `index` describes exactly the committed range of `meta`: same generation, start,
 * length and count, and round entries that are strictly increasing and inside the range.
 */
export function indexMatches(index: RoundIndex, meta: StorageMeta): boolean {
  if (!sameCommittedRange(index, meta)) return false;
  let previous: RoundEntry | undefined;
  for (const round of index.rounds) {
    if (round.messageIndex >= meta.messageCount || round.byteOffset >= meta.bytes) return false;
    if (
      previous !== undefined &&
      (round.messageIndex <= previous.messageIndex || round.byteOffset <= previous.byteOffset)
    ) return false;
    previous = round;
  }
  return true;
}

/** One committed line handed to a `forEachCommittedLine` callback. */
export interface CommittedLine {
  /** The message index (line number, from 0). */
  readonly index: number;
  /** The line's byte offset relative to the committed range start. */
  readonly offset: number;
  /** The line's bytes, without the newline. Valid only during the callback. */
  readonly bytes: Uint8Array;
  /**
   * The line decoded as UTF-8. Reading it throws a `SessionFormatError` (path `messages[<index>]`)
   * for a line longer than the runtime's longest string.
   */
  readonly text: string;
}

/** Options of `forEachCommittedLine`. */
export interface CommittedRangeOptions {
  /** The SHA-256 factory used to verify the generation. */
  readonly sha256: Sha256Factory;
  /** Bytes read at a time (default 1 MiB); bounds memory for huge histories. */
  readonly chunkSize?: number;
  /**
   * messages.jsonl already being opened by the caller (read-only), so the open overlaps reading
   * meta.json; this function then owns the handle and closes it. By default it opens the file.
   */
  readonly opening?: Promise<FileHandle>;
  /**
   * Keep the log open after a successful read and hand it back as `handle` (the caller closes
   * it); on failure it is closed as always.
   */
  readonly keepOpen?: boolean;
}

/** What `forEachCommittedLine` learned about the committed range. */
export interface CommittedRangeSummary {
  /** The SHA-256 state after the committed bytes (reusable for incremental hashing). */
  readonly hash: Sha256;
  /** The number of lines read. */
  readonly lines: number;
  /** The log, still open, when `keepOpen` was asked and bytes are committed. */
  readonly handle?: FileHandle;
}

/**
 * Streams the committed range of messages.jsonl line by line, hashing as it goes, and checks it
 * against meta: the file must hold the whole range, the bytes must end with a newline, the line
 * count must equal `messageCount` and the SHA-256 must equal `generation`. Any mismatch is a
 * `CorruptSessionError` naming the file. Bytes past the committed range are never read. A log
 * cut short is found where the reads reach its end, so the lines before that point have already
 * been handed to `onLine`: callers keep nothing until this resolves.
 */
export async function forEachCommittedLine(
  fs: FileSystem,
  dir: string,
  meta: StorageMeta,
  options: CommittedRangeOptions,
  onLine: (line: CommittedLine) => void,
): Promise<CommittedRangeSummary> {
  const file = join(dir, MESSAGES_FILE);
  const hash = options.sha256();
  if (meta.bytes === 0) {
    try {
      if (meta.messageCount !== 0) {
        throw new CorruptSessionError(
          `Session metadata claims ${meta.messageCount} messages in an empty range`,
          { file: join(dir, META_FILE) },
        );
      }
      checkGeneration(hash, meta, file);
    } catch (error) {
      // The log opened early is closed on every refusal, as once it is read.
      if (options.opening !== undefined) closeWhenOpened(options.opening);
      throw error;
    }
    if (meta.start === 0) {
      // Nothing committed: a log opened early is not needed (and may be missing).
      if (options.opening !== undefined) closeWhenOpened(options.opening);
    } else {
      // An empty range after earlier generations (a history cleared): the log must still reach
      // its start, where the next save appends, as a writer and `verifySession` require.
      await checkLogReaches(fs, file, meta.start, options.opening);
    }
    return { hash, lines: 0 };
  }
  const chunkSize = options.chunkSize ?? 1024 * 1024;
  const handle = await openMessages(fs, file, options.opening);
  let lines = 0;
  let kept = false;
  try {
    const emit = (bytes: Uint8Array, offset: number): void => {
      if (lines >= meta.messageCount) {
        throw new CorruptSessionError(
          `Message log holds more lines than the ${meta.messageCount} its metadata commits`,
          { file, offset: meta.start + offset, messageIndex: lines },
        );
      }
      // Each line is decoded alone (a newline never occurs inside a multi-byte sequence).
      let line: CommittedLine;
      try {
        line = { index: lines, offset, bytes, text: decodeLine(bytes) };
      } catch (error) {
        // More bytes than the runtime's longest string: the callback meets the typed error where
        // it reads the text, as it meets a line that is not JSON (the range is still hashed).
        const failure = undecodable(error, bytes.length, file, `messages[${lines}]`);
        line = {
          index: lines,
          offset,
          bytes,
          get text(): string {
            throw failure;
          },
        };
      }
      onLine(line);
      lines++;
    };
    const read = await readLines(handle, meta.start, meta.start + meta.bytes, chunkSize, {
      onChunk: (chunk) => hash.update(chunk),
      onLine: emit,
    });
    if (read.shortAt !== undefined) {
      // A short read is the end of the file, unless the filesystem answered short (no stat up
      // front: one call fewer per open); the file may end before the range starts, so its size
      // is asked for here.
      throw await shortReadError(handle, file, read.shortAt, meta.start + meta.bytes);
    }
    if (read.trailing !== undefined) {
      throw new CorruptSessionError("Committed message bytes do not end with a newline", {
        file,
        offset: meta.start + read.trailing,
        messageIndex: lines,
      });
    }
    if (lines !== meta.messageCount) {
      throw new CorruptSessionError(
        `Message log holds ${lines} committed lines but its metadata claims ${meta.messageCount}`,
        { file, messageIndex: lines },
      );
    }
    checkGeneration(hash, meta, file);
    kept = options.keepOpen === true;
  } finally {
    if (!kept) await handle.close();
  }
  return kept ? { hash, lines, handle } : { hash, lines };
}

/** How `readLines` ended. */
export interface LinesRead {
  /**
   * Where a read came back short (an absolute offset), undefined when none did: the file ends
   * before the range does (or, where a filesystem answers a read short before the end of a file,
   * the read stopped early).
   */
  readonly shortAt: number | undefined;
  /** True when `onLine` returned false, which stops the reading. */
  readonly stopped: boolean;
  /** The offset (from the range's start) of bytes after the last newline; undefined when none. */
  readonly trailing: number | undefined;
}

/**
 * Splits bytes `from` to `to` of `handle` into lines, read `chunkSize` at a time: `onChunk` gets
 * each chunk as it is read, `onLine` each whole line (without its newline) and its offset from
 * `from`, in order; `onLine` returning false stops the reading. Only the line a chunk boundary
 * cuts is copied together; memory holds a chunk and that line, whatever the range's size.
 */
export async function readLines(
  handle: FileHandle,
  from: number,
  to: number,
  chunkSize: number,
  on: {
    readonly onChunk?: (chunk: Uint8Array) => void;
    readonly onLine: (bytes: Uint8Array, offset: number) => boolean | void;
  },
): Promise<LinesRead> {
  /** The start of a line cut by chunk boundaries, in pieces (never copied until it ends). */
  let carry: Uint8Array[] = [];
  let carryLength = 0;
  let carryOffset = 0;
  let position = 0;
  const total = to - from;
  while (position < total) {
    const length = Math.min(chunkSize, total - position);
    const chunk = await handle.read(from + position, length);
    if (chunk.length !== length) {
      return { shortAt: from + position + chunk.length, stopped: false, trailing: undefined };
    }
    on.onChunk?.(chunk);
    let lineStart = 0;
    if (carryLength > 0) {
      const first = chunk.indexOf(10);
      if (first < 0) {
        carry.push(chunk);
        carryLength += chunk.length;
        position += length;
        continue;
      }
      carry.push(chunk.subarray(0, first));
      const line = joinBytes(carry, carryLength + first);
      carry = [];
      carryLength = 0;
      if (on.onLine(line, carryOffset) === false) {
        return { shortAt: undefined, stopped: true, trailing: undefined };
      }
      lineStart = first + 1;
    }
    for (;;) {
      const newline = chunk.indexOf(10, lineStart);
      if (newline < 0) break;
      if (on.onLine(chunk.subarray(lineStart, newline), position + lineStart) === false) {
        return { shortAt: undefined, stopped: true, trailing: undefined };
      }
      lineStart = newline + 1;
    }
    if (lineStart < chunk.length) {
      carry = [chunk.subarray(lineStart)];
      carryLength = chunk.length - lineStart;
      carryOffset = position + lineStart;
    }
    position += length;
  }
  return {
    shortAt: undefined,
    stopped: false,
    trailing: carryLength > 0 ? carryOffset : undefined,
  };
}

/**
 * Refuses (`CorruptSessionError`) a log that is missing or shorter than `end`, the end of an
 * empty committed range that does not start at 0. Takes the open already started, if any.
 */
async function checkLogReaches(
  fs: FileSystem,
  file: string,
  end: number,
  opening: Promise<FileHandle> | undefined,
): Promise<void> {
  let handle: FileHandle;
  try {
    handle = await (opening ?? openSessionFile(fs, file).then((log) => log.handle));
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
    throw new CorruptSessionError(
      `Message log is missing but its committed range starts at byte ${end}; the session is damaged and was not modified`,
      { file, offset: 0, cause: error },
    );
  }
  let size: number;
  try {
    size = (await handle.stat()).size;
  } finally {
    await handle.close();
  }
  if (size < end) throw shortLog(file, size, end);
}

/**
 * The error of a message log `file` of `size` bytes that ends before its committed range does
 * (at `end`): corruption, reported where the file ends.
 */
export function shortLog(file: string, size: number, end: number): CorruptSessionError {
  return new CorruptSessionError(
    `Message log is shorter than its committed range (${size} bytes, committed range ends at ${end}); the session is damaged and was not modified`,
    { file, offset: size },
  );
}

/**
 * The error of a read of the message log `file` that came back short at `at`, before byte `end`
 * of its committed range that it was to reach, although the file holds `size` bytes, no fewer:
 * the filesystem answered a read short before the end of the file, or the log changed while it
 * was read. The committed bytes could not be read: corruption, reported where the read ended.
 */
function shortRead(file: string, at: number, size: number, end: number): CorruptSessionError {
  return new CorruptSessionError(
    `A read of the message log stopped at byte ${at}, before byte ${end} of its committed range, although the file holds ${size} bytes (a filesystem whose reads come back short before the end of a file, or a log changed while it was read); the session was not modified`,
    { file, offset: at },
  );
}

/**
 * The error of a read of the committed range of the message log `file`, through `handle`, that
 * stopped at byte `at`, as the open reports it: the log is shorter than the committed range, which
 * ends at `end` (`shortLog`, at the file's end), or, when the file holds the whole range, the read
 * was answered short (`shortRead`). A failure to ask the file's size rejects with that failure.
 */
export async function shortReadError(
  handle: FileHandle,
  file: string,
  at: number,
  end: number,
): Promise<CorruptSessionError> {
  const size = (await handle.stat()).size;
  return size >= end ? shortRead(file, at, size, end) : shortLog(file, size, end);
}

function checkGeneration(hash: Sha256, meta: StorageMeta, file: string): void {
  const actual = hash.digestHex();
  if (actual !== meta.generation) {
    throw new CorruptSessionError(
      `Checksum mismatch: committed message bytes hash to ${actual}, metadata says ${meta.generation}; the session is damaged and was not modified`,
      { file },
    );
  }
}

/**
 * Closes a handle still being opened, in the background, once it is open; a failed open or close
 * is nobody's error (the handle was never going to be used).
 */
export function closeWhenOpened(opening: Promise<FileHandle>): void {
  opening.then((handle) => handle.close(), () => undefined).catch(() => undefined);
}

/**
 * Opens the message log `file` with `openSessionFile` (or takes the open already started,
 * `opening`) whose metadata commits bytes: a missing log is then corruption.
 *
 * @throws {CorruptSessionError} When the log is missing.
 * @throws {SessionFormatError} When the log is not a regular file.
 */
export async function openMessages(
  fs: FileSystem,
  file: string,
  opening?: Promise<FileHandle>,
): Promise<FileHandle> {
  try {
    return await (opening ?? openSessionFile(fs, file).then((log) => log.handle));
  } catch (error) {
    if (error instanceof NotFound) {
      throw new CorruptSessionError("Message log is missing but metadata commits messages", {
        file,
        cause: error,
      });
    }
    throw error;
  }
}

/**
 * What a session's recorded cwd is now: a directory, something else, or gone: missing, its path
 * running through a file (ENOTDIR), or a path no directory can have (`isUnreachablePath`), as
 * listings treat it. Other storage errors are thrown.
 */
export async function cwdState(
  fs: FileSystem,
  cwd: string,
): Promise<"directory" | "not-directory" | "gone"> {
  try {
    return (await fs.stat(cwd)).kind === "directory" ? "directory" : "not-directory";
  } catch (error) {
    if (isUnreachablePath(error)) return "gone";
    throw error;
  }
}

/**
 * True for the error of a path that names nothing there now and, for the last three, nothing
 * that could be: missing (`NotFound`), running through a file (`NotADirectory`), too long for the
 * filesystem (`ENAMETOOLONG`), holding a NUL byte (`EINVAL`), or looping through links (`ELOOP`).
 * A recorded cwd failing so is gone, never a storage fault of the session reading it.
 */
export function isUnreachablePath(error: unknown): boolean {
  return error instanceof NotFound || error instanceof NotADirectory ||
    (error instanceof FsError && UNREACHABLE_PATH_CODES.has(error.code));
}

const UNREACHABLE_PATH_CODES: ReadonlySet<string> = new Set(["ENAMETOOLONG", "EINVAL", "ELOOP"]);

/**
 * Checks that a session's recorded cwd still exists as a directory: `SessionCwdError` (naming
 * `file`, the session's meta.json or legacy file) when it does not.
 */
export async function checkSessionCwd(fs: FileSystem, cwd: string, file: string): Promise<void> {
  const state = await cwdState(fs, cwd);
  if (state === "not-directory") {
    throw new SessionCwdError(cwd, `Session cwd is not a directory: '${cwd}'`, { file });
  }
  if (state === "gone") {
    throw new SessionCwdError(
      cwd,
      `Session cwd no longer exists: '${cwd}'; restore the directory to open the session`,
      { file },
    );
  }
}
