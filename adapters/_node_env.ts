/**
 * Bytes Node gives as text, decoded strictly, for Node: Node decodes names, paths and environment
 * values as UTF-8, putting U+FFFD in place of bytes that are not valid UTF-8, so a path spelled
 * with such bytes would name another file (another data directory). Internal to the adapters
 * and the CLI; also the home directory both adapters fall back to.
 *
 * @module
 */
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute } from "../src/port/path.ts";
import process from "node:process";

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const lossyUtf8 = new TextDecoder("utf-8", { ignoreBOM: true });
const encoder = new TextEncoder();

/** `bytes` decoded as UTF-8; undefined when they are not valid UTF-8 (a leading BOM is kept). */
export function strictText(bytes: Uint8Array): string | undefined {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** `bytes` decoded as Node decodes them (U+FFFD for what is not UTF-8): for messages. */
export function lossyText(bytes: Uint8Array): string {
  return lossyUtf8.decode(bytes);
}

/**
 * The value of the environment variable `name` (undefined when unset), or an `Error` saying that
 * its bytes are not valid UTF-8 (or that it cannot be read at all: Deno's Node layer refuses it
 * without `--allow-env`). Only a value Node decoded with U+FFFD in it is looked at again, in the
 * environment the process started with (`/proc/self/environ`), and only while it is still the
 * value the process started with (one set since is JavaScript's own string); where that cannot be
 * read (not Linux), the value is taken as Node gives it.
 */
export function environmentValue(name: string): string | undefined | Error {
  let value: string | undefined;
  try {
    value = process.env[name];
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
  if (value === undefined || !value.includes("\u{fffd}")) return value;
  const entries = procEntries("/proc/self/environ");
  if (entries === undefined) return value;
  const prefix = encoder.encode(`${name}=`);
  for (const entry of entries) {
    if (entry.length >= prefix.length && prefix.every((byte, i) => entry[i] === byte)) {
      const bytes = entry.subarray(prefix.length);
      // Changed since the process started: the current value, a string JavaScript set.
      if (lossyText(bytes) !== value) return value;
      return strictText(bytes) ??
        new Error(`its value ${JSON.stringify(value)} is not valid UTF-8`);
    }
  }
  return value;
}

/**
 * The first of `args` (the program's arguments, as the runtime decoded them: Node and Deno put
 * U+FFFD in place of bytes that are not valid UTF-8, a path naming another file) whose bytes are
 * not valid UTF-8, as an `Error` naming it by its place (1 for the first); undefined when none
 * is. Only an argument with U+FFFD in it is looked at again, in the command line the process
 * started with (`/proc/self/cmdline`, whose last entries are the program's arguments), and in
 * those of its ancestors, a few levels up: a launcher (`deno task`, `npx`, a Node wrapper)
 * decodes the arguments before it passes them on, so only the process the user started holds
 * their bytes. A process whose command line does not end with these arguments, as decoded, is
 * passed over; where none can be read (not Linux), the arguments are taken as given.
 */
export function invalidArgument(args: readonly string[]): Error | undefined {
  if (!args.some((arg) => arg.includes("\u{fffd}"))) return undefined;
  let pid = "self";
  for (let level = 0; level < ANCESTOR_LEVELS; level++) {
    const entries = procEntries(`/proc/${pid}/cmdline`);
    if (entries === undefined) return undefined;
    if (entries.length >= args.length) {
      const tail = entries.slice(entries.length - args.length);
      // This process was given these very arguments, as the runtime decoded them.
      if (tail.every((bytes, i) => lossyText(bytes) === args[i])) {
        for (const [i, arg] of args.entries()) {
          if (arg.includes("\u{fffd}") && strictText(tail[i] as Uint8Array) === undefined) {
            return new Error(`argument ${i + 1} (${JSON.stringify(arg)}) is not valid UTF-8`);
          }
        }
      }
    }
    const parent = parentOf(pid);
    if (parent === undefined || parent === "0") return undefined;
    pid = parent;
  }
  return undefined;
}

/** How many processes up `invalidArgument` looks for the bytes of the arguments. */
const ANCESTOR_LEVELS = 8;

/**
 * The NUL-separated entries of a `/proc` file (`/proc/<pid>/cmdline`, `/proc/self/environ`);
 * undefined when it cannot be read.
 */
function procEntries(path: string): Uint8Array[] | undefined {
  let raw: Uint8Array;
  try {
    raw = readFileSync(path);
  } catch {
    return undefined;
  }
  const entries: Uint8Array[] = [];
  let start = 0;
  while (start < raw.length) {
    let end = raw.indexOf(0, start);
    if (end < 0) end = raw.length;
    entries.push(raw.subarray(start, end));
    start = end + 1;
  }
  return entries;
}

/** The parent's pid of `pid`, from `/proc/<pid>/stat`; undefined when it cannot be read. */
function parentOf(pid: string): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  } catch {
    return undefined;
  }
  // "<pid> (<name>) <state> <ppid> ...": the name may hold spaces and parentheses.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const parent = fields[1];
  return parent !== undefined && /^\d+$/.test(parent) ? parent : undefined;
}

/**
 * The home directory `homeDirOf()` (by default `os.homedir()`) answers: HOME, else the account's
 * passwd entry (the user profile on Windows). Undefined when none can be determined (Node throws;
 * Deno's Node layer answers `null` for an account without a passwd entry), when the runtime
 * refuses to look (Deno without --allow-sys), or when the answer is not an absolute path: the
 * port's answer for "unknown", which no path is joined to.
 */
export function osHomeDir(homeDirOf: () => unknown = homedir): string | undefined {
  let home: unknown;
  try {
    home = homeDirOf();
  } catch (error) {
    if (error instanceof Error) return undefined;
    throw error;
  }
  return typeof home === "string" && isAbsolute(home) ? home : undefined;
}
