/**
 * Compaction checkpoints: complete summaries that stand in for the original history before a
 * boundary. The original messages stay unchanged; boundaries reference their indices.
 *
 * Rules (each failure is a `SessionFormatError` naming the record and field):
 * - the value is absent or an array;
 * - each record is an object; `id` is 36 characters of `[a-f0-9-]` and unique in the array;
 *   `firstKeptMessageIndex` is a safe integer that strictly increases (the first ≥ 1);
 *   `historyMessageCount` is a safe integer greater than `firstKeptMessageIndex` and, when
 *   the history is known, at most its length (it need not rise from one record to the next);
 *   the message at `firstKeptMessageIndex` is a `user` message; `summary` is not all
 *   whitespace; `timestamp` is a safe integer ≥ 0; `provider` and `model` are strings; and
 *   `usage` is an object whose `input`, `output`, `cacheRead`, `cacheWrite` and `totalTokens`
 *   are finite numbers ≥ 0 (`cost` is not checked).
 *
 * @module
 */
import * as v from "valibot";
import type {
  CompactionCheckpoint,
  MessageRole,
  RecordLocation,
  RecordSchema,
  SummaryUsage,
} from "./types.ts";
import {
  checkSchema,
  childPath,
  fail,
  hasVisibleText,
  recordRule,
  safeIntegerSchema,
} from "./_validation.ts";
import { ID_PATTERN } from "./ids.ts";

const WHAT = "Invalid compaction checkpoints";

function tokenCount(name: string) {
  return v.pipe(
    v.number(),
    v.finite(`${name} must be a finite number`),
    v.minValue(0, `${name} must be 0 or more`),
  );
}

const usage = v.looseObject({
  input: tokenCount("input"),
  output: tokenCount("output"),
  cacheRead: tokenCount("cacheRead"),
  cacheWrite: tokenCount("cacheWrite"),
  totalTokens: tokenCount("totalTokens"),
});

/** The schema of a summary's token usage. Extra fields (such as `cost`) pass through. */
export const SummaryUsageSchema: RecordSchema<SummaryUsage> = usage;

const checkpointFields = v.looseObject({
  id: v.pipe(v.string(), v.regex(ID_PATTERN, "id must be 36 characters of [a-f0-9-]")),
  firstKeptMessageIndex: safeIntegerSchema("firstKeptMessageIndex", 1),
  historyMessageCount: safeIntegerSchema("historyMessageCount"),
  summary: v.pipe(
    v.string(),
    v.check(hasVisibleText, "summary must have a non-whitespace character"),
  ),
  timestamp: safeIntegerSchema("timestamp"),
  provider: v.string(),
  model: v.string(),
  usage,
});

/**
 * The schema of one checkpoint (without the ordering, uniqueness and history checks). Extra
 * fields pass through.
 */
export const CompactionCheckpointSchema: RecordSchema<CompactionCheckpoint> = v.pipe(
  checkpointFields,
  recordRule<v.InferOutput<typeof checkpointFields>>((checkpoint) =>
    checkpoint.historyMessageCount > checkpoint.firstKeptMessageIndex ? undefined : {
      field: "historyMessageCount",
      detail: "historyMessageCount must be greater than firstKeptMessageIndex",
    }
  ),
);

/**
 * Validates compaction checkpoints against the history's roles (see the module doc).
 *
 * @param value The stored or committed checkpoints; `undefined` is accepted.
 * @param roles The role of every message, or `undefined` to skip the checks that need the
 * history (header-only parsing).
 * @param options The file and JSON path (default `"header.compactions"`) for error reports.
 * @throws {SessionFormatError} Naming the offending record and field.
 */
export function validateCompactions(
  value: unknown,
  roles: readonly MessageRole[] | undefined,
  options: RecordLocation = {},
): asserts value is readonly CompactionCheckpoint[] | undefined {
  if (value === undefined) return;
  const base = options.path ?? "header.compactions";
  const where = { file: options.file };
  if (!Array.isArray(value)) fail(WHAT, "expected an array", where, base, value);
  const ids = new Set<string>();
  let previous = 0;
  for (let i = 0; i < value.length; i++) {
    const path = childPath(base, i);
    checkSchema(CompactionCheckpointSchema, value[i], WHAT, { file: options.file, path });
    const checkpoint = value[i] as CompactionCheckpoint;
    if (ids.has(checkpoint.id)) fail(WHAT, "duplicate id", where, `${path}.id`, checkpoint.id);
    ids.add(checkpoint.id);
    const first = checkpoint.firstKeptMessageIndex;
    if (first <= previous) {
      fail(
        WHAT,
        `firstKeptMessageIndex must be greater than the previous checkpoint's ${previous}`,
        where,
        `${path}.firstKeptMessageIndex`,
        first,
      );
    }
    if (roles !== undefined) {
      if (checkpoint.historyMessageCount > roles.length) {
        fail(
          WHAT,
          `historyMessageCount must not exceed the history length ${roles.length}`,
          where,
          `${path}.historyMessageCount`,
          checkpoint.historyMessageCount,
        );
      }
      if (roles[first] !== "user") {
        fail(
          WHAT,
          `firstKeptMessageIndex must name a user message, not a ${String(roles[first])} message`,
          where,
          `${path}.firstKeptMessageIndex`,
          first,
        );
      }
    }
    previous = first;
  }
}
