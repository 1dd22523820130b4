/**
 * JSON and JSONL reading and writing for layout records, over the port.
 *
 * Canonical JSON is `JSON.stringify(value, null, 2)` with every character outside printable ASCII
 * escaped as `\uXXXX`: two-space indentation, keys in insertion order, no trailing newline. It is
 * what the engine's `json.dumps(indent=2)` writes (ASCII-escaped), so a record this library
 * writes has the bytes the engine would write for it: hashes over files agree, and a write-once
 * record the engine wrote is recognized when written again. Records keep their key order because
 * the writers build them in a fixed order. JSONL records are compact (`JSON.stringify(value)`)
 * plus `\n`.
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
  ensureFileDurable,
  readIfExists,
  tightenPrivateDir,
} from "../port/durable.ts";
import { IsADirectory, NotADirectory, NotFound } from "../port/errors.ts";
import { type Found, readSessionFile } from "../port/regular.ts";
import { dirname } from "../port/path.ts";
import { portableSha256, type Sha256Factory, sha256Hex } from "../port/sha256.ts";
import { ImmutableArtifactError, LayoutRecordError } from "./errors.ts";
import { confined } from "./no_links.ts";
import { serializedOn } from "./serial.ts";
import { preview } from "../loop/errors.ts";

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
 * Encodes `value` as canonical JSON bytes: `JSON.stringify(value, null, 2)`, ASCII-escaped
 * (`asciiEscaped`), as the engine's `json.dumps(indent=2)` writes it.
 */
export function encodeJson(value: unknown): Uint8Array {
  return encoder.encode(asciiEscaped(JSON.stringify(value, null, 2)));
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
 * missing file is `undefined` when `ifExists`, else the port's `NotFound`.
 */
export async function recordBytes(
  fs: FileSystem,
  file: string,
  ifExists: boolean,
): Promise<Uint8Array | undefined> {
  let found: Found<Uint8Array>;
  try {
    found = await readSessionFile(fs, file);
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

/** Atomically replaces `file` with the canonical JSON of `value`; returns the bytes written. */
export async function writeJsonAtomic(
  fs: FileSystem,
  file: string,
  value: unknown,
  durability: Durability = "full",
): Promise<Uint8Array> {
  fs = confined(fs, file);
  const bytes = encodeJson(value);
  await tightenPrivateDir(fs, dirname(file), durability);
  await atomicReplace(fs, file, bytes, { durability });
  return bytes;
}

/**
 * Freezes `bytes` at `file`: writes them atomically when the file is absent, does nothing when it
 * holds the same bytes, and throws `ImmutableArtifactError` when it holds different bytes.
 * Returns true when it wrote.
 *
 * The check and the write of one file run serialized with every other freeze of it in this
 * process (keyed by its canonical path, see `serializedOn`): of two concurrent freezes with
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
    const existing = await readIfExists(fs, file);
    if (existing !== undefined) {
      if (bytesEqual(existing, bytes)) {
        // Frozen already, maybe by a call that failed before its directory's fsync.
        await ensureFileDurable(fs, file, durability);
        return false;
      }
      throw new ImmutableArtifactError(file);
    }
    await tightenPrivateDir(fs, dirname(file), durability);
    await atomicReplace(fs, file, bytes, { durability });
    return true;
  });
}

/**
 * Appends one compact JSON record plus `\n` to a JSONL file in a single write, then fsyncs it
 * (and its directory when the file was created). A torn last line left by a crash stays a line
 * of its own: the record starts a new line.
 */
export async function appendJsonl(
  fs: FileSystem,
  file: string,
  value: unknown,
  durability: Durability = "full",
): Promise<void> {
  fs = confined(fs, file);
  await tightenPrivateDir(fs, dirname(file), durability);
  await durableAppend(fs, file, encoder.encode(`${JSON.stringify(value)}\n`), {
    durability,
    lines: true,
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
