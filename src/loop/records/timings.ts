/**
 * Prompt timings: the wall time of each prompt, in the seed's newer record shape, with legacy
 * records still valid.
 *
 * A record is `{userMessageIndex, startedAt, finishedAt}` (legacy) or, for one attempt at a
 * prompt, the same plus `{id, messageStartIndex, messageEndIndex, stopped?}`. The exact rules:
 *
 * Each record
 * 1. is an object;
 * 2. `userMessageIndex` is a safe integer ≥ 0 and, when the history is known, names a `user`
 *    message (`roles[userMessageIndex] === "user"`);
 * 3. `startedAt` is a safe integer ≥ 0 (Unix milliseconds); `finishedAt` is required and is a
 *    safe integer ≥ `startedAt` (equal allowed);
 * 4. `id`, `messageStartIndex` and `messageEndIndex` are all present (an attempt record) or
 *    all absent (a legacy record); `stopped` may appear only on an attempt record and is a
 *    boolean;
 * 5. on an attempt record `id` is a non-empty string, and the range `[messageStartIndex,
 *    messageEndIndex)` (start inclusive, end exclusive) satisfies
 *    `userMessageIndex ≤ messageStartIndex ≤ messageEndIndex ≤ messages.length` (the length
 *    check only when the history is known). An empty range is an attempt that produced no
 *    message, such as a resume stopped at once. The range may contain later user messages
 *    (messages steered in while the attempt ran).
 *
 * Across the array
 * 6. attempt ids are unique;
 * 7. records are ordered by `userMessageIndex`: an attempt record may share the index of the
 *    attempt record before it (a resumed attempt at the same prompt); any other pair of
 *    neighbours (where either is legacy) strictly increases, which is the legacy rule;
 * 8. attempt ranges appear in ascending order and never overlap: each attempt's
 *    `messageStartIndex` is ≥ the previous attempt's `messageEndIndex`.
 *
 * @module
 */
import * as v from "valibot";
import type { MessageRole, PromptTiming, RecordLocation, RecordSchema } from "./types.ts";
import {
  checkSchema,
  childPath,
  fail,
  recordRule,
  type RuleViolation,
  safeIntegerSchema,
} from "./_validation.ts";

const WHAT = "Invalid prompt timings";

function timingRule(timing: PromptTiming): RuleViolation | undefined {
  if (timing.finishedAt < timing.startedAt) {
    return { field: "finishedAt", detail: "finishedAt must not be before startedAt" };
  }
  const hasId = timing.id !== undefined;
  const hasStart = timing.messageStartIndex !== undefined;
  const hasEnd = timing.messageEndIndex !== undefined;
  if (hasId || hasStart || hasEnd) {
    const missing = !hasId
      ? "id"
      : !hasStart
      ? "messageStartIndex"
      : !hasEnd
      ? "messageEndIndex"
      : undefined;
    if (missing !== undefined) {
      return {
        field: missing,
        detail: "an attempt record needs id, messageStartIndex and messageEndIndex together",
      };
    }
    if ((timing.messageStartIndex as number) < timing.userMessageIndex) {
      return {
        field: "messageStartIndex",
        detail: "messageStartIndex must not be before userMessageIndex",
      };
    }
    if ((timing.messageEndIndex as number) < (timing.messageStartIndex as number)) {
      return {
        field: "messageEndIndex",
        detail: "messageEndIndex (exclusive) must not be before messageStartIndex (inclusive)",
      };
    }
  } else if (timing.stopped !== undefined) {
    return { field: "stopped", detail: "stopped belongs only to attempt records (with an id)" };
  }
  return undefined;
}

const timingFields = v.looseObject({
  userMessageIndex: safeIntegerSchema("userMessageIndex"),
  startedAt: safeIntegerSchema("startedAt"),
  finishedAt: safeIntegerSchema("finishedAt"),
  id: v.optional(v.pipe(v.string(), v.nonEmpty("id must be a non-empty string"))),
  messageStartIndex: v.optional(safeIntegerSchema("messageStartIndex")),
  messageEndIndex: v.optional(safeIntegerSchema("messageEndIndex")),
  stopped: v.optional(v.boolean()),
});

/**
 * The schema of one prompt timing record: rules 1–5 of the module doc, without the checks
 * that need the history. Extra fields pass through.
 */
export const PromptTimingSchema: RecordSchema<PromptTiming> = v.pipe(
  timingFields,
  recordRule<v.InferOutput<typeof timingFields>>(timingRule),
);

/**
 * Validates prompt timings against the history's roles (rules 1–8 of the module doc).
 *
 * @param value The stored or committed timings; `undefined` is accepted.
 * @param roles The role of every message, or `undefined` to skip the checks that need the
 * history (header-only parsing).
 * @param options The file and JSON path (default `"header.promptTimings"`) for error reports.
 * @throws {SessionFormatError} Naming the offending record and field, such as
 * `header.promptTimings[3].finishedAt`.
 */
export function validatePromptTimings(
  value: unknown,
  roles: readonly MessageRole[] | undefined,
  options: RecordLocation = {},
): asserts value is readonly PromptTiming[] | undefined {
  if (value === undefined) return;
  const base = options.path ?? "header.promptTimings";
  const where = { file: options.file };
  if (!Array.isArray(value)) fail(WHAT, "expected an array", where, base, value);
  const ids = new Set<string>();
  let previous: PromptTiming | undefined;
  let previousAttempt: PromptTiming | undefined;
  for (let i = 0; i < value.length; i++) {
    const path = childPath(base, i);
    checkSchema(PromptTimingSchema, value[i], WHAT, { file: options.file, path });
    const timing = value[i] as PromptTiming;
    const index = timing.userMessageIndex;
    if (roles !== undefined && roles[index] !== "user") {
      fail(
        WHAT,
        index < roles.length
          ? `userMessageIndex must name a user message, not a ${String(roles[index])} message`
          : `userMessageIndex must name a user message; the history has ${roles.length} message(s)`,
        where,
        `${path}.userMessageIndex`,
        index,
      );
    }
    const attempt = timing.id !== undefined;
    if (previous !== undefined) {
      const shared = attempt && previous.id !== undefined;
      if (shared ? index < previous.userMessageIndex : index <= previous.userMessageIndex) {
        fail(
          WHAT,
          shared
            ? `records must be ordered by userMessageIndex (the previous record has ${previous.userMessageIndex})`
            : `userMessageIndex must be greater than the previous record's ${previous.userMessageIndex}; only attempt records (with ids) may share an index`,
          where,
          `${path}.userMessageIndex`,
          index,
        );
      }
    }
    if (attempt) {
      const id = timing.id as string;
      if (ids.has(id)) fail(WHAT, "duplicate attempt id", where, `${path}.id`, id);
      ids.add(id);
      const start = timing.messageStartIndex as number;
      const end = timing.messageEndIndex as number;
      if (roles !== undefined && end > roles.length) {
        fail(
          WHAT,
          `messageEndIndex must not exceed the history length ${roles.length}`,
          where,
          `${path}.messageEndIndex`,
          end,
        );
      }
      if (previousAttempt !== undefined && start < (previousAttempt.messageEndIndex as number)) {
        fail(
          WHAT,
          `attempt range [${start}, ${end}) overlaps or precedes the previous attempt's range [${previousAttempt.messageStartIndex}, ${previousAttempt.messageEndIndex})`,
          where,
          `${path}.messageStartIndex`,
          start,
        );
      }
      previousAttempt = timing;
    }
    previous = timing;
  }
}
