/**
 * Environment variables as the process was given them, for Node: Node decodes each value as
 * UTF-8, putting U+FFFD in place of bytes that are not valid UTF-8, so a path spelled with such
 * bytes would name another file (another data directory). Internal to the Node adapter and CLI.
 *
 * @module
 */
import { readFileSync } from "node:fs";
import process from "node:process";

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

/**
 * The value of the environment variable `name` (undefined when unset), or an `Error` saying that
 * its bytes are not valid UTF-8. Only a value Node decoded with U+FFFD in it is looked at again,
 * in the environment the process started with (`/proc/self/environ`); where that cannot be read
 * (not Linux), the value is taken as Node gives it.
 */
export function environmentValue(name: string): string | undefined | Error {
  const value = process.env[name];
  if (value === undefined || !value.includes("\u{fffd}")) return value;
  let raw: Uint8Array;
  try {
    raw = readFileSync("/proc/self/environ");
  } catch {
    return value;
  }
  const prefix = encoder.encode(`${name}=`);
  let start = 0;
  while (start < raw.length) {
    let end = raw.indexOf(0, start);
    if (end < 0) end = raw.length;
    const entry = raw.subarray(start, end);
    if (entry.length >= prefix.length && prefix.every((byte, i) => entry[i] === byte)) {
      try {
        return strictUtf8.decode(entry.subarray(prefix.length));
      } catch {
        return new Error(`its value ${JSON.stringify(value)} is not valid UTF-8`);
      }
    }
    start = end + 1;
  }
  return value;
}
