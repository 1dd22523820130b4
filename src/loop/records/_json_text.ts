/**
 * The JSON text of a message, written whatever the length of its strings.
 *
 * Deno 2.9's `JSON.stringify` ends the process ("Fatal process out of memory") when a value holds
 * a flat string of more than 256 MiB (268 million one-byte or 134 million two-byte characters):
 * a string `JSON.parse` or `TextDecoder` made, say a tool result read back from a long line, as
 * a value or as a key. Its general path, taken when a replacer is given, writes such a string. A
 * message holding a string of more than 2^26 characters, or an object JSON writes its own way, is
 * written through it; any other through the fast path, whose text is the same.
 *
 * @module
 */
import { isRecord, MAX_MESSAGE_NESTING } from "./_validation.ts";

/** Strings longer than this many characters send a message through the general path. */
const LONG_STRING_CHARS = 1 << 26;

/** A replacer that changes nothing: it only makes `JSON.stringify` take its general path. */
const keepValue = (_key: string, value: unknown): unknown => value;

/**
 * `JSON.stringify(value)`, the same text, never through the fast path for a value holding a
 * string longer than `longChars` (2^26) characters (see the module doc). Throws what
 * `JSON.stringify` throws.
 */
export function messageJson(value: unknown, longChars: number = LONG_STRING_CHARS): string {
  return holdsLongString(value, longChars, [])
    ? JSON.stringify(value, keepValue)
    : JSON.stringify(value);
}

/**
 * True when `value` holds a string longer than `longChars` characters among what JSON writes of it
 * (own enumerable properties and their keys, array items), within `MAX_MESSAGE_NESTING` levels,
 * or an object JSON writes its own way (not a plain object or an array). A cycle (which
 * `JSON.stringify` refuses) ends the walk of its branch: `ancestors` are the objects above
 * `value`.
 */
export function holdsLongString(
  value: unknown,
  longChars: number,
  ancestors: object[] = [],
): boolean {
  if (typeof value === "string") return value.length > longChars;
  if (typeof value !== "object" || value === null) return false;
  if (ancestors.length >= MAX_MESSAGE_NESTING || ancestors.includes(value)) return false;
  const array = Array.isArray(value);
  // What JSON writes its own way (a `toJSON`, a boxed string, a class instance, a raw JSON
  // value) is not walked: the general path writes it, whatever it holds.
  if (!array && !isPlain(value)) return true;
  ancestors.push(value);
  let found = false;
  if (array) {
    for (let i = 0; i < value.length && !found; i++) {
      found = holdsLongString(value[i], longChars, ancestors);
    }
  } else {
    const record = value as Record<string, unknown>;
    const keys = Object.keys(record);
    for (let i = 0; i < keys.length && !found; i++) {
      const key = keys[i] as string;
      found = key.length > longChars || holdsLongString(record[key], longChars, ancestors);
    }
  }
  ancestors.pop();
  return found;
}

/** `isRecord`, or false when its look at the prototype throws (a Proxy's trap). */
function isPlain(value: object): boolean {
  try {
    return isRecord(value);
  } catch {
    return false; // JSON.stringify never asks for the prototype: the general path decides
  }
}
