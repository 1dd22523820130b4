/**
 * System prompt checkpoints: the initial rendered sections, then patches of changed sections.
 *
 * Rules (each failure is a `SessionFormatError` naming the record and field):
 * - the value is absent or an array;
 * - each record is an object; `messageCount` is a safe integer ≥ 1, never below the previous
 *   record's (equal anchors are allowed) and, when the history is known, at most its length;
 *   `timestamp` is a safe integer ≥ 0; `sections` is a non-null, non-array object with at
 *   least one key, every key matches `^[a-z][a-z0-9_-]*$`, and every value is a string or
 *   `null` (a removed section; accepted even in the first record).
 *
 * The store validates anchors before any write and again on restore.
 *
 * @module
 */
import * as v from "valibot";
import type { MessageRole, RecordLocation, RecordSchema, SystemPromptCheckpoint } from "./types.ts";
import { checkSchema, childPath, fail, isRecord, safeIntegerSchema } from "./_validation.ts";

const WHAT = "Invalid system prompt checkpoints";

/** The pattern of a section name. */
export const SECTION_NAME_PATTERN: RegExp = /^[a-z][a-z0-9_-]*$/;

/** Reports the first problem of a sections object, or `undefined` when it is valid. */
function sectionsProblem(
  sections: unknown,
): { readonly key?: string; readonly detail: string; readonly value: unknown } | undefined {
  if (!isRecord(sections)) {
    return { detail: "sections must be a non-null object that is not an array", value: sections };
  }
  const keys = Object.keys(sections);
  if (keys.length === 0) {
    return { detail: "sections must have at least one section", value: sections };
  }
  for (const key of keys) {
    if (!SECTION_NAME_PATTERN.test(key)) {
      return { key, detail: "section names must match ^[a-z][a-z0-9_-]*$", value: key };
    }
    const text = sections[key];
    if (text !== null && typeof text !== "string") {
      return { key, detail: "a section must be a string, or null when removed", value: text };
    }
  }
  return undefined;
}

const baseEntries = {
  messageCount: safeIntegerSchema("messageCount", 1),
  timestamp: safeIntegerSchema("timestamp"),
};
const checkpointBase = v.looseObject(baseEntries);

/**
 * The schema of one checkpoint (without the ordering and history checks). Extra fields pass
 * through.
 */
export const SystemPromptCheckpointSchema: RecordSchema<SystemPromptCheckpoint> = v
  .looseObject({
    ...baseEntries,
    sections: v.custom<Readonly<Record<string, string | null>>>(
      (sections) => sectionsProblem(sections) === undefined,
      "sections must be a non-empty object of section names (^[a-z][a-z0-9_-]*$) to strings or null",
    ),
  });

/**
 * Validates system prompt checkpoints against the history's roles (see the module doc).
 *
 * @param value The stored or committed checkpoints; `undefined` is accepted.
 * @param roles The role of every message, or `undefined` to skip the checks that need the
 * history (header-only parsing).
 * @param options The file and JSON path (default `"header.systemPromptCheckpoints"`) for error
 * reports.
 * @throws {SessionFormatError} Naming the offending record and field.
 */
export function validateSystemPromptCheckpoints(
  value: unknown,
  roles: readonly MessageRole[] | undefined,
  options: RecordLocation = {},
): asserts value is readonly SystemPromptCheckpoint[] | undefined {
  if (value === undefined) return;
  const base = options.path ?? "header.systemPromptCheckpoints";
  const where: RecordLocation = { file: options.file };
  if (!Array.isArray(value)) fail(WHAT, "expected an array", where, base, value);
  let previous = 0;
  for (let i = 0; i < value.length; i++) {
    const path = childPath(base, i);
    checkSchema(checkpointBase, value[i], WHAT, { file: options.file, path });
    const checkpoint = value[i] as SystemPromptCheckpoint;
    // Checked by hand so that the error names the offending section.
    const problem = sectionsProblem(checkpoint.sections);
    if (problem !== undefined) {
      const at = childPath(path, "sections");
      fail(
        WHAT,
        problem.detail,
        where,
        problem.key === undefined ? at : childPath(at, problem.key),
        problem.value,
      );
    }
    if (checkpoint.messageCount < previous) {
      fail(
        WHAT,
        `messageCount must not be below the previous checkpoint's ${previous}`,
        where,
        `${path}.messageCount`,
        checkpoint.messageCount,
      );
    }
    if (roles !== undefined && checkpoint.messageCount > roles.length) {
      fail(
        WHAT,
        `messageCount must not exceed the history length ${roles.length}`,
        where,
        `${path}.messageCount`,
        checkpoint.messageCount,
      );
    }
    previous = checkpoint.messageCount;
  }
}
