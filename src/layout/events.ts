/**
 * `events.jsonl`: a best-effort observability stream appended after state commits. Scheduling
 * and recovery never read it; they use `state.json`. Each record is appended in one write and
 * fsynced before the next, so a crash can only tear the last line, and the next append starts a
 * new line after the torn one (a newline is written first when the file does not end with one),
 * so an event appended after a crash is never lost in the torn bytes.
 *
 * The reader is tolerant by contract: it skips blank, torn, undecodable and invalid lines
 * (reporting them through `scanEvents`), tolerates gaps, and keeps the first record of each
 * `event_id`, so duplicates from a retried append are dropped.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { LayoutRecordError } from "./errors.ts";
import { appendJsonl, type JsonObject, recordBytes, utcSeconds } from "./json_io.ts";
import { type EventRecord, parseEventRecord } from "./records.ts";
import { type LayoutWriteOptions, resolveWriteOptions } from "./options.ts";
import { confined } from "./no_links.ts";
import { pyStrip } from "./_py_text.ts";

/** An event to append. */
export interface NewEvent {
  /** The event type (`session_started`, `child_started`, ...). */
  readonly type: string;
  /** Event data; default `{}`. */
  readonly payload?: JsonObject | undefined;
}

/**
 * Appends a batch of events for `sessionId` to the `events.jsonl` at `file`. The batch shares
 * one timestamp (UTC, second precision); each record gets a fresh 12-hex `event_id` and is
 * written as the engine writes it (compact JSON with every non-ASCII character escaped, so no
 * U+2028, U+2029 or U+0085 ends a line early for a reader splitting lines as Python does) and
 * fsynced on its own. Appends to one file in this process run one after another, so a record is
 * never glued onto the torn tail of a concurrent append that failed. An `events.jsonl` that is
 * not a regular file (a directory, FIFO, socket or device) is a `LayoutRecordError` naming it,
 * before anything is written. Returns the records written.
 */
export async function appendEvents(
  fs: FileSystem,
  file: string,
  sessionId: string,
  events: readonly NewEvent[],
  options: LayoutWriteOptions = {},
): Promise<EventRecord[]> {
  fs = confined(fs, file);
  const resolved = resolveWriteOptions(options);
  const ts = utcSeconds(resolved.now());
  const records: EventRecord[] = events.map((event) =>
    parseEventRecord({
      event_id: resolved.uuidHex().slice(0, 12),
      schema_version: 1,
      ts,
      session_id: sessionId,
      type: event.type,
      payload: event.payload ?? {},
    }, file)
  );
  for (const record of records) await appendJsonl(fs, file, record, resolved.durability);
  return records;
}

/** A line of `events.jsonl` the reader skipped. */
export interface SkippedEventLine {
  /** 1-based line number. */
  readonly line: number;
  /** Why it was skipped. */
  readonly reason: string;
}

/** What `scanEvents` found. */
export interface EventScan {
  /** Valid records, deduplicated by `event_id` (first occurrence kept), in file order. */
  readonly events: EventRecord[];
  /** How many valid records repeated an earlier `event_id`. */
  readonly duplicates: number;
  /** Lines that were not valid records (a torn last line, garbage, bad JSON, bad schema). */
  readonly skipped: SkippedEventLine[];
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * Reads `events.jsonl` tolerantly and reports what it skipped. A missing file has no events; one
 * that is not a regular file (a directory, FIFO, socket or device) is a `LayoutRecordError`
 * naming it, never waited on; other filesystem errors propagate. Reading never modifies the file.
 */
export async function scanEvents(fs: FileSystem, file: string): Promise<EventScan> {
  fs = confined(fs, file);
  // Read only as a regular file: a FIFO planted there is refused by name, never waited on.
  const bytes = await recordBytes(fs, file, true);
  const events: EventRecord[] = [];
  const skipped: SkippedEventLine[] = [];
  let duplicates = 0;
  if (bytes === undefined) return { events, duplicates, skipped };
  const seen = new Set<string>();
  let start = 0;
  let line = 0;
  while (start < bytes.length) {
    let end = bytes.indexOf(0x0a, start);
    const terminated = end >= 0;
    if (!terminated) end = bytes.length;
    line++;
    const slice = bytes.subarray(start, end);
    start = end + 1;
    let text: string;
    try {
      text = decoder.decode(slice);
    } catch {
      skipped.push({ line, reason: "not valid UTF-8" });
      continue;
    }
    if (pyStrip(text) === "") {
      if (text !== "") skipped.push({ line, reason: "blank" });
      continue;
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      skipped.push({ line, reason: terminated ? "not valid JSON" : "torn last line" });
      continue;
    }
    let record: EventRecord;
    try {
      record = parseEventRecord(value, file);
    } catch (error) {
      if (!(error instanceof LayoutRecordError)) throw error;
      skipped.push({ line, reason: error.message });
      continue;
    }
    if (seen.has(record.event_id)) {
      duplicates++;
      continue;
    }
    seen.add(record.event_id);
    events.push(record);
  }
  return { events, duplicates, skipped };
}

/**
 * Reads `events.jsonl` tolerantly: duplicates (by `event_id`), gaps and a truncated last line
 * are fine; invalid lines are skipped. See `scanEvents` for what was skipped.
 *
 * @example Duplicates and a torn tail are tolerated
 * ```ts
 * import { readEvents } from "@loop/sessions/layout";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * const line = JSON.stringify({
 *   event_id: "a1b2c3d4e5f6", schema_version: 1, ts: "2026-01-01T00:00:00Z",
 *   session_id: "001_demo", type: "session_started", payload: {},
 * });
 * await fs.writeFile("/events.jsonl", new TextEncoder().encode(`${line}\n${line}\n{"event_`));
 * const events = await readEvents(fs, "/events.jsonl");
 * if (events.length !== 1) throw new Error("unexpected result");
 * ```
 */
export async function readEvents(fs: FileSystem, file: string): Promise<EventRecord[]> {
  fs = confined(fs, file);
  return (await scanEvents(fs, file)).events;
}
