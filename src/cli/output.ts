/**
 * Output helpers of the command line: the runtime-neutral `CliIo`, aligned tables, JSON and a
 * progress line that only appears on a terminal.
 *
 * @module
 */
import { isAbsolute, normalize, resolve } from "../port/path.ts";
import type { FileSystem } from "../port/fs.ts";
import type { Sha256Factory } from "../port/sha256.ts";
import type { ProcessProbe } from "../loop/lock.ts";

/** What a command needs from the runtime. */
export interface CliIo {
  /** The filesystem (the runtime's own adapter). */
  readonly fs: FileSystem;
  /** The SHA-256 factory (native where the runtime has one). */
  readonly sha256: Sha256Factory;
  /** The process probe for writer locks, when the runtime has one. */
  readonly process?: ProcessProbe;
  /** Writes to standard output. */
  readonly out: (text: string) => void;
  /** Writes to standard error. */
  readonly err: (text: string) => void;
  /**
   * Optional: writes the program's own terminal controls (the progress line's) to standard error
   * as they are, where `err` escapes control characters; default `err`.
   */
  readonly errControls?: (text: string) => void;
  /** True when standard error is a terminal (progress lines are shown only then). */
  readonly errIsTerminal: boolean;
  /** Reads an environment variable. */
  readonly env: (name: string) => string | undefined;
  /**
   * The current working directory (absolute). A runtime may compute it when asked and throw a
   * usage error when it cannot be given (a path it cannot decode): read it only when needed.
   */
  readonly cwd: string;
  /** The clock, in Unix milliseconds. */
  readonly now: () => number;
}

/**
 * Output could not be written (other than to a reader that is gone, which is quiet): the disk is
 * full (`> /dev/full`), the descriptor is closed… The command ends with a one-line error, exit 1.
 */
export class OutputError extends Error {
  /** The stream: `stdout` or `stderr`. */
  readonly stream: string;
  /** Creates the error for `stream`, caused by `cause`. */
  constructor(stream: string, cause: unknown) {
    super(`cannot write to ${stream}: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = "OutputError";
    this.stream = stream;
  }
}

/**
 * Control characters that reach a terminal as commands rather than text: C0 controls but the line
 * feed, the tab and the carriage return (the output's own line breaks and the progress line's;
 * stored data put into a line of human output passes through `inline`), DEL, C1 controls, and the
 * bidirectional controls that reorder what is shown.
 */
const TERMINAL_CONTROLS =
  // deno-lint-ignore no-control-regex
  /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/**
 * `text` with every terminal control in it (see `TERMINAL_CONTROLS`) written as a visible
 * `\uXXXX` escape, so stored data (message text, a cwd, a model name) printed by a command can
 * neither run terminal commands (clear the screen, set the window title) nor reorder what is shown.
 * Inside a JSON string the escape is the same character, so JSON output keeps its values.
 */
export function terminalSafe(text: string): string {
  return text.replace(
    TERMINAL_CONTROLS,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** The line feed, the carriage return and the tab: the controls `TERMINAL_CONTROLS` lets through. */
const LINE_CONTROLS = /[\t\n\r]/g;

/**
 * `text` for one line of human output (a table cell, a `key  value` row, a path or a message in a
 * line): the line feed, the carriage return and the tab written as visible `\uXXXX` escapes, as
 * `terminalSafe` writes the other controls, so stored data can neither forge rows nor overprint
 * them. Never applied to JSON output, whose strings escape these characters already.
 */
export function inline(text: string): string {
  return text.replace(
    LINE_CONTROLS,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/**
 * A template tag for lines of human output: the template's own text as written (its line
 * breaks included), every value put into it passed through `inline`.
 */
export function inlined(strings: TemplateStringsArray, ...values: unknown[]): string {
  let text = strings[0] ?? "";
  for (const [i, value] of values.entries()) text += inline(String(value)) + (strings[i + 1] ?? "");
  return text;
}

/** Formats `key  value` rows, keys padded to the longest, each value on its own line (`inline`). */
export function fieldRows(rows: readonly (readonly [string, string])[]): string {
  // Keys too may be stored data (a record's own field names): escaped like the values.
  const keys = rows.map(([key]) => inline(key));
  const width = keys.reduce((max, key) => Math.max(max, key.length), 0);
  return rows.map(([, value], i) => `${(keys[i] as string).padEnd(width)}  ${inline(value)}`)
    .join("\n") + "\n";
}

/**
 * `path` resolved against the current directory, which is asked for only when `path` is relative
 * (a runtime may fail to give it: see `CliIo.cwd`).
 */
export function resolvePath(io: CliIo, path: string): string {
  return isAbsolute(path) ? normalize(path) : resolve(io.cwd, path);
}

/**
 * `io` with everything it writes passed through `terminalSafe`. Its other members are read from
 * `io` when asked (not copied): a `cwd` the runtime computes on demand fails only the commands
 * that need it.
 */
export function terminalSafeIo(io: CliIo): CliIo {
  const safe: Pick<CliIo, "out" | "err" | "errControls"> = {
    out: (text) => io.out(terminalSafe(text)),
    err: (text) => io.err(terminalSafe(text)),
    // The progress line's own controls, and only them, reach the terminal as controls.
    errControls: io.errControls ?? io.err,
  };
  return Object.setPrototypeOf(safe, io) as CliIo;
}

/**
 * Formats rows as an aligned table with a header row, every cell on its row (see `inline`). Widths
 * are found with a loop: a listing may have more rows than a call takes arguments
 * (`Math.max(...rows)` overflows the stack).
 */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h) => h.length);
  const cells = rows.map((row) => row.map(inline));
  for (const row of cells) {
    for (const [i, width] of widths.entries()) {
      const length = (row[i] ?? "").length;
      if (length > width) widths[i] = length;
    }
  }
  const line = (cells: readonly string[]): string =>
    cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] as number))).join("  ")
      .trimEnd();
  return [line(header), ...cells.map(line)].join("\n") + "\n";
}

/** Writes `value` as indented JSON with a trailing newline (see `jsonText`). */
export function printJson(io: CliIo, value: unknown): void {
  io.out(jsonText(value) + "\n");
}

/** True when `error` is the runtime's stack overflow (`Maximum call stack size exceeded`). */
export function isStackOverflow(error: unknown): boolean {
  return error instanceof RangeError && /call stack/i.test(error.message);
}

/**
 * Nesting levels that `jsonText` writes with line breaks and indentation when `JSON.stringify`
 * cannot write the value (and `traces inspect` when the engine could not print it); deeper levels
 * are written on one line.
 */
export const JSON_INDENTED_LEVELS = 100;

/**
 * `value` as `JSON.stringify(value, null, 2)` writes it. Stored data (an agent's trace manifest,
 * a message) may be nested deeper than `JSON.stringify` goes before the call stack overflows (a
 * few thousand levels): such a value is written by an iterative writer instead, the same values
 * in valid JSON, its levels past `JSON_INDENTED_LEVELS` on one line (indenting them all would
 * take space quadratic in the depth).
 */
export function jsonText(value: unknown): string {
  try {
    return JSON.stringify(value, null, 2);
  } catch (error) {
    if (!isStackOverflow(error)) throw error;
  }
  return deepJsonText(value);
}

/** One array or object that `deepJsonText` is writing. */
interface JsonFrame {
  readonly value: object;
  /** The keys of an object; undefined for an array. */
  readonly keys: readonly string[] | undefined;
  readonly depth: number;
  /** The next member to write. */
  next: number;
  /** True once a member is written. */
  wrote: boolean;
}

/** `value` as `JSON.stringify` would take it: after `toJSON`, or undefined when it is skipped. */
function jsonValue(value: unknown, key: string): unknown {
  const toJSON = (value as { toJSON?: unknown } | null | undefined)?.toJSON;
  const taken = typeof toJSON === "function" ? toJSON.call(value, key) : value;
  return typeof taken === "function" || typeof taken === "symbol" ? undefined : taken;
}

/**
 * `jsonText` without the call stack, by the rules of `JSON.stringify(value, null, 2)` for what the
 * command line prints (JSON data and plain results: `toJSON`, skipped members, cycles refused).
 */
function deepJsonText(value: unknown): string {
  const parts: string[] = [];
  const stack: JsonFrame[] = [];
  const open = new Set<object>();
  /** Writes `item` (a primitive), or opens it (an array or object) as the deepest frame. */
  const write = (item: unknown, depth: number): void => {
    if (item === null || typeof item !== "object") {
      parts.push(JSON.stringify(item) ?? "null");
      return;
    }
    if (open.has(item)) throw new TypeError("Converting circular structure to JSON");
    open.add(item);
    const keys = Array.isArray(item) ? undefined : Object.keys(item);
    stack.push({ value: item, keys, depth, next: 0, wrote: false });
    parts.push(keys === undefined ? "[" : "{");
  };
  const top = jsonValue(value, "");
  if (top === undefined) return "undefined";
  write(top, 0);
  for (let frame = stack.at(-1); frame !== undefined; frame = stack.at(-1)) {
    const indented = frame.depth < JSON_INDENTED_LEVELS;
    const { keys } = frame;
    const length = keys === undefined ? (frame.value as unknown[]).length : keys.length;
    if (frame.next >= length) {
      stack.pop();
      open.delete(frame.value);
      if (frame.wrote && indented) parts.push("\n" + "  ".repeat(frame.depth));
      parts.push(keys === undefined ? "]" : "}");
      continue;
    }
    const index = frame.next++;
    const key = keys === undefined ? String(index) : keys[index] as string;
    let member = jsonValue((frame.value as Record<string, unknown>)[key], key);
    if (member === undefined) {
      if (keys !== undefined) continue; // An object leaves the member out, an array writes null.
      member = null;
    }
    const separator = frame.wrote ? "," : "";
    const indent = indented ? "\n" + "  ".repeat(frame.depth + 1) : "";
    const name = keys === undefined ? "" : JSON.stringify(key) + (indented ? ": " : ":");
    parts.push(separator + indent + name);
    frame.wrote = true;
    write(member, frame.depth + 1);
  }
  return parts.join("");
}

/** A progress line on standard error, shown only on a terminal and never with `--json`. */
export class Progress {
  readonly #io: CliIo;
  readonly #enabled: boolean;
  readonly #label: string;
  #shown = false;

  /** Creates a progress line for `label`; disabled unless stderr is a terminal and not `json`. */
  constructor(io: CliIo, label: string, json: boolean) {
    this.#io = io;
    this.#label = label;
    this.#enabled = io.errIsTerminal && !json;
  }

  /** Shows `done` of `total`. */
  update(done: number, total: number): void {
    if (!this.#enabled) return;
    this.#shown = true;
    // The label is the program's own text: written with its controls as they are.
    (this.#io.errControls ?? this.#io.err)(`\r${this.#label} ${done}/${total}`);
  }

  /** Clears the line. */
  end(): void {
    if (this.#shown) (this.#io.errControls ?? this.#io.err)("\r\x1b[K");
  }
}

/** Formats a byte count (`1.5 MiB`). */
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** The longest wait, in milliseconds, for a reader that takes nothing from a full pipe. */
export const MAX_WRITE_WAIT_MS = 100;

/** Blocks the thread for `ms` milliseconds (as a blocking write to a full pipe would). */
function blockFor(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Writes `length` bytes with `write(offset)`, which writes from `offset` on and returns how many
 * bytes it wrote; it may write part of them, or fail with EAGAIN (a non-blocking pipe that is
 * full): the rest is written after a wait for the reader, 1 ms first, doubled after each EAGAIN
 * up to `MAX_WRITE_WAIT_MS`, and back to 1 ms once a write succeeds (a write of no bytes waits
 * the same way). Errors are judged by their `code`: EPIPE (the reader is gone) returns false,
 * EAGAIN waits, any other error is thrown.
 */
export function writeFully(
  write: (offset: number) => number,
  length: number,
  sleep: (ms: number) => void = blockFor,
): boolean {
  let offset = 0;
  let delay = 1;
  while (offset < length) {
    let written: number;
    try {
      written = write(offset);
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code === "EPIPE") return false;
      if (code !== "EAGAIN") throw error;
      written = 0;
    }
    if (written > 0) {
      offset += written;
      delay = 1;
    } else {
      // Nothing taken (EAGAIN, or a write of no bytes): wait for the reader.
      sleep(delay);
      delay = Math.min(delay * 2, MAX_WRITE_WAIT_MS);
    }
  }
  return true;
}
