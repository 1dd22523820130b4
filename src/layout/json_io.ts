/**
 * JSON and JSONL reading and writing for layout records, over the port.
 *
 * Canonical JSON is `JSON.stringify(value, null, 2)` with every character outside printable ASCII
 * escaped as `\uXXXX`: two-space indentation, keys in insertion order, no trailing newline. It is
 * what the engine's `json.dumps(indent=2)` writes (ASCII-escaped), so a record this library
 * writes has the bytes the engine would write for it: hashes over files agree, and a write-once
 * record the engine wrote is recognized when written again. Records keep their key order because
 * the writers build them in a fixed order. JSONL records are compact (`JSON.stringify(value)`),
 * ASCII-escaped the same way, plus `\n`: what the engine's `json.dumps(separators=(",", ":"))`
 * writes for an event.
 *
 * Engine-owned JSON is replaced atomically (same-directory temp file, fsync, rename, directory
 * fsync); JSONL records are appended and fsynced one at a time.
 *
 * @module
 */
import * as v from "valibot";
import type { FileSystem } from "../port/fs.ts";
import {
  atomicReplace,
  type Durability,
  durableAppend,
  ensureDirChainDurable,
  entryKind,
  tightenPrivateDir,
} from "../port/durable.ts";
import { IsADirectory, NotADirectory, NotFound } from "../port/errors.ts";
import { ensureFoundFileDurable, type Found, readSessionFile } from "../port/regular.ts";
import { dirname } from "../port/path.ts";
import { portableSha256, type Sha256Factory, sha256Hex } from "../port/sha256.ts";
import { ImmutableArtifactError, LayoutRecordError } from "./errors.ts";
import { confined, loopyDirOf } from "./no_links.ts";
import { serializedOn } from "./serial.ts";
import { preview } from "../loop/errors.ts";
import { childPath, jsonNestsDeeper } from "../loop/records/_validation.ts";

/** A JSON value. */
export type JsonValue =
  | null
  | boolean
  | number
  | string
  | readonly JsonValue[]
  | { readonly [key: string]: JsonValue };

/** A JSON object. */
export type JsonObject = { readonly [key: string]: JsonValue };

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * Encodes `value` as canonical JSON bytes: `JSON.stringify(value, null, 2)` with every UTF-16 unit
 * from U+007F up escaped as `\uXXXX`, as the engine's `json.dumps(indent=2)` writes it.
 */
export function encodeJson(value: unknown): Uint8Array {
  return encoder.encode(asciiEscaped(JSON.stringify(value, null, 2)));
}

/**
 * How deeply a record this library writes may nest objects and arrays (the record itself is level
 * 1). Far past any record the engine writes, and about half what its Python `json` reads (a
 * recursion limit of 1,000), and far below what the indented `JSON.stringify` (which recurses once
 * a level) can write on any runtime. A record that is rewritten (`state.json`, `children.json`) is
 * held to it when read, so a deeper one is refused before an operation writes anything, not by
 * the write halfway through it; records that are only read (handoffs, trace manifests) may nest
 * deeper.
 */
export const MAX_RECORD_NESTING = 500;

/**
 * `encodeJson(value)` (with `numbers`, keeping their texts: `keepingNumbers`) of a record to be
 * written to `file`, refused first (a `LayoutRecordError` naming `file` and, where it can be told,
 * the field) when JSON cannot write it (a BigInt, a cycle, a `toJSON` that throws) or what it
 * writes nests deeper than `MAX_RECORD_NESTING` levels. What is judged is what JSON writes: `toJSON`
 * applied, as `JSON.stringify` applies it.
 */
export function encodeRecord(value: unknown, file: string, numbers?: NumberTexts): Uint8Array {
  // Serialized once: the text written is the text judged.
  let written: string | undefined;
  try {
    written = JSON.stringify(value, null, 2);
  } catch (error) {
    // Named at the field where the value shows it (a BigInt, nesting past the stack), if it does.
    refuseUnwritable(value, file);
    throw new LayoutRecordError(file, "The record cannot be written as JSON", { cause: error });
  }
  if (written === undefined) {
    throw new LayoutRecordError(file, "The record is not a JSON value");
  }
  // Too deep as written: named at the field, in what JSON wrote.
  if (jsonNestsDeeper(value, written, MAX_RECORD_NESTING)) {
    refuseUnwritable(JSON.parse(written), file);
  }
  return numbers === undefined
    ? encoder.encode(asciiEscaped(written))
    : keepingNumbers(value, written, numbers);
}

/**
 * Refuses a record that is read to be written again (`state.json`, `children.json`) when it nests
 * deeper than `MAX_RECORD_NESTING` levels: a `LayoutRecordError` naming `file` and the field.
 */
export function refuseDeepRecord(value: unknown, file: string): void {
  refuseUnwritable(value, file);
}

/** One value on the way down a record, with the way back up (for its path). */
interface Step {
  readonly value: object;
  readonly level: number;
  readonly parent: Step | undefined;
  readonly key: string | number;
}

/** The JSON path of `step` (`children[1].status`), `key` appended when given. */
function pathOf(step: Step | undefined, key?: string | number): string {
  const keys: (string | number)[] = key === undefined ? [] : [key];
  for (let at = step; at?.parent !== undefined; at = at.parent) keys.push(at.key);
  return keys.reverse().reduce<string>((base, item) => childPath(base, item), "");
}

/**
 * Throws the `LayoutRecordError` (of `file`, at the field) of the first object or array of
 * `value` nested deeper than `MAX_RECORD_NESTING` levels, or of a BigInt; returns when there is
 * none. Reads `value` as it is, not as `toJSON` would turn it: for parsed JSON, and for naming
 * the field of a value `JSON.stringify` refused. Iterative: no depth overflows it.
 */
function refuseUnwritable(value: unknown, file: string): void {
  const bigint = (at: Step | undefined, key?: string | number): never => {
    throw new LayoutRecordError(file, "A BigInt cannot be written as JSON", {
      path: pathOf(at, key),
    });
  };
  if (typeof value === "bigint") bigint(undefined);
  if (typeof value !== "object" || value === null) return;
  const stack: Step[] = [{ value, level: 1, parent: undefined, key: "" }];
  for (let step = stack.pop(); step !== undefined; step = stack.pop()) {
    if (step.level > MAX_RECORD_NESTING) {
      throw new LayoutRecordError(
        file,
        `The record nests deeper than ${MAX_RECORD_NESTING} levels`,
        { path: pathOf(step) },
      );
    }
    const node = step.value as Record<string, unknown>;
    const keys: readonly (string | number)[] = Array.isArray(node)
      ? node.map((_, index) => index)
      : Object.keys(node);
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i] as string | number;
      const item = node[key];
      if (typeof item === "bigint") bigint(step, key);
      if (typeof item === "object" && item !== null) {
        stack.push({ value: item, level: step.level + 1, parent: step, key });
      }
    }
  }
}

/**
 * `json` (text `JSON.stringify` produced) with every UTF-16 code unit from U+007F up escaped as
 * `\uXXXX` (lowercase hex, a surrogate pair as two escapes), as Python's `json.dumps` escapes
 * with `ensure_ascii`. Such characters occur only inside strings, where the escape means the same.
 */
export function asciiEscaped(json: string): string {
  return json.replace(
    /[\u007f-\uffff]/g,
    (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** Encodes text as UTF-8. */
export function encodeText(text: string): Uint8Array {
  return encoder.encode(text);
}

/** `sha256:<64 hex>` of `bytes`. */
export function sha256Ref(bytes: Uint8Array, factory: Sha256Factory = portableSha256): string {
  return `sha256:${sha256Hex(bytes, factory)}`;
}

/** Decodes UTF-8 JSON bytes; invalid UTF-8 or JSON is a `LayoutRecordError` naming `file`. */
export function decodeJson(bytes: Uint8Array, file: string): unknown {
  let text: string;
  try {
    text = decoder.decode(bytes);
  } catch (error) {
    throw new LayoutRecordError(file, "File is not valid UTF-8", { cause: error });
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new LayoutRecordError(file, "File is not valid JSON", { cause: error });
  }
}

/**
 * The text of every number of a JSON text as written (`1.0`, `1e-07`, `-0.0`, an integer beyond
 * 2^53), by the path of its value (see `decodeJsonNumbers`). A duplicate key's last number counts,
 * as `JSON.parse` keeps the last.
 */
export type NumberTexts = ReadonlyMap<string, string>;

/**
 * Decodes UTF-8 JSON bytes as `decodeJson` does, and collects the text of each number in them
 * (`NumberTexts`): `JSON.parse` keeps only the value (`1.0` reads as `1`, 1745073022123456789 as
 * 1745073022123456800), and a rewrite that keeps the fields it does not change keeps their
 * numbers' texts (`writeJsonAtomic` given them). Needs no `JSON.parse` source access (a reviver's
 * `context.source` is not in Node 20).
 */
export function decodeJsonNumbers(
  bytes: Uint8Array,
  file: string,
): { readonly value: unknown; readonly numbers: NumberTexts } {
  const value = decodeJson(bytes, file);
  // Valid UTF-8 and JSON now: decoded the same way again, for its number tokens.
  const numbers = new Map<string, string>();
  scanNumbers(decoder.decode(bytes), (path, text) => numbers.set(path(), text));
  return { value, numbers };
}

/**
 * `encodeJson(value)` from `text`, its `JSON.stringify(value, null, 2)`, except that a number
 * whose path (see `NumberTexts`) has a text in `numbers` and whose value that text reads as
 * (`Number(text)`, `-0` told from `0`) is written as that text: a number a change left alone keeps
 * its bytes (`1.0`, `1E5`, `1e-07`, `-0.0`, an integer beyond 2^53), and every other number is
 * written as `JSON.stringify` writes it. Every other byte is `encodeJson`'s.
 */
function keepingNumbers(value: unknown, text: string, numbers: NumberTexts): Uint8Array {
  if (numbers.size === 0) return encoder.encode(asciiEscaped(text));
  let out = "";
  let last = 0;
  scanNumbers(text, (path, token, start, segments) => {
    const kept = numbers.get(path());
    if (kept === undefined || kept === token) return;
    const read = Number(kept);
    const written = Number(token);
    if (read !== written) return;
    // `JSON.stringify` writes -0 as `0`: the value itself tells them apart.
    if (written === 0 && !Object.is(read, valueAt(value, segments()))) return;
    out += text.slice(last, start) + kept;
    last = start + token.length;
  });
  return encoder.encode(asciiEscaped(out + text.slice(last)));
}

/** The value at `segments` below `value` (`undefined` where there is none). */
function valueAt(value: unknown, segments: readonly (string | number)[]): unknown {
  let at = value;
  for (const segment of segments) {
    if (typeof at !== "object" || at === null) return undefined;
    at = (at as Record<string | number, unknown>)[segment];
  }
  return at;
}

/** A container being scanned: its path, and where in it the scan is. */
interface ScanFrame {
  /** Its path key (see `NumberTexts`). */
  readonly path: string;
  /** Its own key or index in its container (`undefined` at the top). */
  readonly segment: string | number | undefined;
  /** An array (else an object). */
  readonly array: boolean;
  /** The index of the current element (arrays). */
  index: number;
  /** The current key (objects). */
  key: string;
  /** The next string is a key (objects). */
  expectKey: boolean;
}

/**
 * Calls `found` for every number token of the valid JSON `text`, in order, with its path key
 * (`""` for the top value; `.<key as JSON>` for an object member, `[<index>]` for an array
 * element, appended to the container's), its text, its offset, and its path as segments. Both
 * are computed only when asked for. Iterative: any nesting depth.
 */
function scanNumbers(
  text: string,
  found: (
    path: () => string,
    token: string,
    start: number,
    segments: () => (string | number)[],
  ) => void,
): void {
  const stack: ScanFrame[] = [];
  const childSegment = (top: ScanFrame): string | number => top.array ? top.index : top.key;
  const childPath = (): string => {
    const top = stack[stack.length - 1];
    if (top === undefined) return "";
    return top.array ? `${top.path}[${top.index}]` : `${top.path}.${JSON.stringify(top.key)}`;
  };
  const childSegments = (): (string | number)[] => {
    const out: (string | number)[] = [];
    for (const frame of stack) if (frame.segment !== undefined) out.push(frame.segment);
    const top = stack[stack.length - 1];
    if (top !== undefined) out.push(childSegment(top));
    return out;
  };
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x7b || c === 0x5b) { // { [
      const top = stack[stack.length - 1];
      stack.push({
        path: childPath(),
        segment: top === undefined ? undefined : childSegment(top),
        array: c === 0x5b,
        index: 0,
        key: "",
        expectKey: c === 0x7b,
      });
      i++;
    } else if (c === 0x7d || c === 0x5d) { // } ]
      stack.pop();
      i++;
    } else if (c === 0x2c) { // ,
      const top = stack[stack.length - 1];
      if (top !== undefined) {
        if (top.array) top.index++;
        else top.expectKey = true;
      }
      i++;
    } else if (c === 0x22) { // "
      let end = i + 1;
      while (end < text.length && text.charCodeAt(end) !== 0x22) {
        end += text.charCodeAt(end) === 0x5c ? 2 : 1;
      }
      const top = stack[stack.length - 1];
      if (top !== undefined && !top.array && top.expectKey) {
        top.key = JSON.parse(text.slice(i, end + 1)) as string;
        top.expectKey = false;
      }
      i = end + 1;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) { // - 0-9
      let end = i + 1;
      while (end < text.length && NUMBER_CHAR.test(text[end] as string)) end++;
      const start = i;
      found(childPath, text.slice(start, end), start, childSegments);
      i = end;
    } else i++; // whitespace, `:`, and the letters of true, false and null
  }
}

const NUMBER_CHAR = /[0-9.eE+-]/;

/** Formats a valibot issue path as `a.b[2].c` (`""` for the record itself). */
export function issuePath(issue: v.BaseIssue<unknown>): string {
  let out = "";
  for (const item of issue.path ?? []) {
    const key = (item as { readonly key: unknown }).key;
    if (typeof key === "number") out += `[${key}]`;
    else out += out === "" ? String(key) : `.${String(key)}`;
  }
  return out;
}

/**
 * A valibot issue's message with the value received shown short: valibot's own messages end
 * with the value in full (a 200,000-character string would be all of the message); a string,
 * number or other scalar is shown as `preview` shows it (at most 80 characters), an object or
 * array by its kind, as valibot names it (never walked: it may be nested however deep).
 */
export function issueMessage(issue: v.BaseIssue<unknown>): string {
  const input = issue.input;
  const shown = typeof input === "object" && input !== null ? issue.received : preview(input);
  // valibot's own messages: `Invalid <what>: Expected <this> but received <value>`, or
  // `Invalid <what>: Received <value>`; a schema's own message names no value.
  return issue.message.endsWith(`eceived ${issue.received}`)
    ? `${issue.message.slice(0, -issue.received.length)}${shown}`
    : issue.message;
}

/**
 * Validates `value` with a valibot schema; the first issue becomes a `LayoutRecordError` naming
 * `file`, the field's JSON path (below `at`, the path of `value` in its file, when given) and its
 * value (shown short in the message, see `issueMessage`).
 */
export function parseWithSchema<T>(
  schema: v.GenericSchema<unknown, T>,
  value: unknown,
  file: string,
  label: string,
  at?: string,
): T {
  const result = v.safeParse(schema, value);
  if (result.success) return result.output;
  const issue = result.issues[0];
  const path = issuePath(issue);
  throw new LayoutRecordError(file, `Invalid ${label}: ${issueMessage(issue)}`, {
    path: at === undefined ? path : path === "" ? at : `${at}.${path}`,
    value: issue.input,
  });
}

/** A record read from a file with the bytes it was parsed from. */
export interface ReadRecord<T> {
  /** The validated record. */
  readonly record: T;
  /** The exact bytes of the file. */
  readonly bytes: Uint8Array;
  /** `sha256:<hex>` of the bytes. */
  readonly sha256: string;
}

/** A function that validates a decoded JSON value read from `file`. */
export type RecordParser<T> = (value: unknown, file: string) => T;

/**
 * The bytes of the record `file`, read only if it is a regular file: never through a link in its
 * last component and, where the port reads without following one, never waiting on a FIFO. A
 * directory, a FIFO, socket or device there, or a file where a directory of its path should be,
 * is a `LayoutRecordError` naming `file` (its `cause` the port's error, when one was raised); a
 * missing file is `undefined` when `ifExists`, else the port's `NotFound`. A read that fails with
 * a storage error is never taken for a missing file: the error propagates.
 */
export async function recordBytes(
  fs: FileSystem,
  file: string,
  ifExists: boolean,
): Promise<Uint8Array | undefined> {
  let found: Found<Uint8Array>;
  try {
    // A failed read is never taken for a missing file: a storage fault while reading a record
    // fails the call rather than passing for an absent record.
    found = await readSessionFile(fs, file, false, { failureIsNotMissing: true });
  } catch (error) {
    if (error instanceof IsADirectory) {
      throw new LayoutRecordError(file, "Record is not a regular file (a directory)", {
        cause: error,
      });
    }
    if (error instanceof NotADirectory) {
      throw new LayoutRecordError(
        file,
        "Record is not a regular file (a directory on its path is a file)",
        { cause: error },
      );
    }
    throw error;
  }
  if (found === undefined) {
    if (ifExists) return undefined;
    throw new NotFound("readFile", file);
  }
  if (typeof found === "string") {
    const what = found === "other" ? "a FIFO, socket or device" : `a ${found}`;
    throw new LayoutRecordError(file, `Record is not a regular file (${what})`);
  }
  return found;
}

/**
 * Reads and validates a JSON record. A missing file propagates the port's `NotFound`; a record
 * that is not a regular file (a directory, or under a file), bad JSON or a schema violation is a
 * `LayoutRecordError`. Reading never modifies anything.
 */
export async function readRecord<T>(
  fs: FileSystem,
  file: string,
  parse: RecordParser<T>,
  factory: Sha256Factory = portableSha256,
): Promise<ReadRecord<T>> {
  fs = confined(fs, file);
  const bytes = await recordBytes(fs, file, false) as Uint8Array;
  return { record: parse(decodeJson(bytes, file), file), bytes, sha256: sha256Ref(bytes, factory) };
}

/** Like `readRecord`, but `undefined` when the file does not exist. */
export async function readRecordIfExists<T>(
  fs: FileSystem,
  file: string,
  parse: RecordParser<T>,
  factory: Sha256Factory = portableSha256,
): Promise<ReadRecord<T> | undefined> {
  fs = confined(fs, file);
  const bytes = await recordBytes(fs, file, true);
  if (bytes === undefined) return undefined;
  return { record: parse(decodeJson(bytes, file), file), bytes, sha256: sha256Ref(bytes, factory) };
}

/**
 * Prepares the directory `dir` of a record about to be written: private (0700, see
 * `tightenPrivateDir`) and, under `"full"` durability, its entry and those of the directories
 * above it up to the repository's `.loopy_loop` durable (`ensureTreeDurable`). A session tree
 * found existing may be one a process that died published without syncing its parent (a root
 * session renamed into `sessions/`, an iteration directory made just before a crash): a record
 * written into it must not rest on that entry.
 */
export async function prepareRecordDir(
  fs: FileSystem,
  dir: string,
  durability: Durability = "full",
): Promise<void> {
  await tightenPrivateDir(fs, dir, durability);
  await ensureTreeDurable(fs, dir, durability);
}

/**
 * Makes the record `file`, found already written (by a call that failed before its directory's
 * fsync, by a process that died, or by a writer that does not fsync), durable as a write of it
 * would: its bytes, its entry and those of the directories above it up to the repository's
 * `.loopy_loop` (`ensureTreeDurable`, `ensureFoundFileDurable`).
 */
export async function ensureRecordDurable(
  fs: FileSystem,
  file: string,
  durability: Durability = "full",
): Promise<void> {
  if (durability !== "full") return; // nothing is synced in this mode
  await ensureTreeDurable(fs, dirname(file), durability);
  await ensureFoundFileDurable(fs, file, durability);
}

/**
 * The entries of `dir` and of the directories above it up to its repository's `.loopy_loop`
 * (that one's own included) made durable, once per process (`ensureDirChainDurable`); nothing
 * for a directory outside a `.loopy_loop`.
 */
async function ensureTreeDurable(
  fs: FileSystem,
  dir: string,
  durability: Durability,
): Promise<void> {
  const loopyDir = loopyDirOf(dir);
  if (loopyDir !== undefined) await ensureDirChainDurable(fs, dir, loopyDir, durability);
}

/**
 * Atomically replaces `file` with the canonical JSON of `value`; returns the bytes written. With
 * `numbers` (the number texts of the record the value was read from, see `decodeJsonNumbers`),
 * a number whose path and value are unchanged keeps its text (see `keepingNumbers`).
 */
export async function writeJsonAtomic(
  fs: FileSystem,
  file: string,
  value: unknown,
  durability: Durability = "full",
  numbers?: NumberTexts,
): Promise<Uint8Array> {
  fs = confined(fs, file);
  const bytes = encodeRecord(value, file, numbers);
  await prepareRecordDir(fs, dirname(file), durability);
  await atomicReplace(fs, file, bytes, { durability });
  return bytes;
}

/**
 * Freezes `bytes` at `file`: writes them atomically when the file is absent, does nothing when it
 * holds the same bytes, and throws `ImmutableArtifactError` when it holds different bytes.
 * Returns true when it wrote.
 *
 * The check and the write of one file run serialized with every other freeze of it in this
 * process (keyed by its canonical path): of two concurrent freezes with
 * different bytes exactly one writes and the other is refused, never both told they froze.
 * Must not be called by a task already serialized on `file`'s own key.
 */
export async function freezeBytes(
  fs: FileSystem,
  file: string,
  bytes: Uint8Array,
  durability: Durability = "full",
): Promise<boolean> {
  fs = confined(fs, file);
  return await serializedOn(fs, file, async () => {
    // Read only as a regular file: a FIFO planted there is refused by name, never waited on.
    const existing = await recordBytes(fs, file, true);
    if (existing !== undefined) {
      if (bytesEqual(existing, bytes)) {
        // Frozen already, maybe by a call that failed before its directory's fsync.
        await ensureRecordDurable(fs, file, durability);
        return false;
      }
      throw new ImmutableArtifactError(file);
    }
    await prepareRecordDir(fs, dirname(file), durability);
    await atomicReplace(fs, file, bytes, { durability });
    return true;
  });
}

/**
 * Appends one compact JSON record plus `\n` to a JSONL file in a single write, then fsyncs it
 * (and its directory when the file was created). A torn last line left by a crash stays a line
 * of its own: the record starts a new line.
 *
 * The record is `JSON.stringify(value)` ASCII-escaped (from U+007F up), as the engine writes an
 * event (`json.dumps(record, separators=(",", ":"))`, which escapes every non-ASCII character):
 * the bytes are the engine's, and no U+2028, U+2029 or U+0085 is written raw, which a reader
 * splitting lines the way Python's `str.splitlines` does would take for a line end.
 *
 * A file that exists must be a regular file: a directory, FIFO, socket or device there is a
 * `LayoutRecordError` naming it, before anything is written (a FIFO would take the record and
 * fail its fsync). The check and the append run serialized with every other append to the file
 * in this process (keyed by its canonical path): an append that fails part
 * way leaves a torn tail that the next append starts a new line after, never one an append
 * running alongside it glued its record onto. Must not be called by a task already serialized
 * on `file`'s own key.
 */
export async function appendJsonl(
  fs: FileSystem,
  file: string,
  value: unknown,
  durability: Durability = "full",
): Promise<void> {
  fs = confined(fs, file);
  const bytes = encoder.encode(`${asciiEscaped(JSON.stringify(value))}\n`);
  await serializedOn(fs, file, async () => {
    // A link is left to the view's own check (`confined`) when the append opens it.
    const kind = await entryKind(fs, file);
    if (kind === "directory" || kind === "other") {
      const what = kind === "other" ? "a FIFO, socket or device" : "a directory";
      throw new LayoutRecordError(file, `Record is not a regular file (${what})`);
    }
    await prepareRecordDir(fs, dirname(file), durability);
    await durableAppend(fs, file, bytes, { durability, lines: true });
  });
}

/** True when two byte arrays hold the same bytes. */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * True when `existing` holds the record whose canonical bytes (`encodeJson`) are `bytes`: the same
 * bytes, or the same text with its non-ASCII characters not escaped, as this library wrote records
 * before it escaped them. Nothing else is the same record (numbers, keys and their order as
 * written).
 */
export function sameJsonRecord(existing: Uint8Array, bytes: Uint8Array): boolean {
  if (bytesEqual(existing, bytes)) return true;
  let text: string;
  try {
    text = decoder.decode(existing);
  } catch {
    return false; // not UTF-8
  }
  return bytesEqual(encoder.encode(asciiEscaped(text)), bytes);
}

/**
 * Structural equality of two JSON values (object key order ignored). Iterative, with an explicit
 * stack: values nested deeper than the call stack compare like any other.
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  const pending: [unknown, unknown][] = [[a, b]];
  for (let pair = pending.pop(); pair !== undefined; pair = pending.pop()) {
    const [x, y] = pair;
    if (x === y) continue;
    if (typeof x !== "object" || typeof y !== "object" || x === null || y === null) return false;
    if (Array.isArray(x) !== Array.isArray(y)) return false;
    if (Array.isArray(x) && Array.isArray(y)) {
      if (x.length !== y.length) return false;
      for (let i = x.length - 1; i >= 0; i--) pending.push([x[i], y[i]]);
      continue;
    }
    const xk = Object.keys(x);
    if (xk.length !== Object.keys(y).length) return false;
    const xo = x as Record<string, unknown>;
    const yo = y as Record<string, unknown>;
    for (let i = xk.length - 1; i >= 0; i--) {
      const key = xk[i] as string;
      if (!Object.hasOwn(yo, key)) return false;
      pending.push([xo[key], yo[key]]);
    }
  }
  return true;
}

/**
 * The first top-level field (in `next`'s key order, then `previous`'s) whose JSON value differs
 * between two records, ignoring `ignored`; `undefined` when they are equal.
 */
export function firstDifference(
  previous: object,
  next: object,
  ignored: readonly string[],
): string | undefined {
  const a = previous as Record<string, unknown>;
  const b = next as Record<string, unknown>;
  for (const key of new Set([...Object.keys(b), ...Object.keys(a)])) {
    if (ignored.includes(key)) continue;
    if (!jsonEqual(a[key], b[key])) return key;
  }
  return undefined;
}

/** The current time as a UTC timestamp to the second: `2026-04-19T14:30:22Z`. */
export function utcSeconds(date: Date): string {
  return `${date.toISOString().slice(0, 19)}Z`;
}
