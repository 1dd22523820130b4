/**
 * Runtime context snapshots: host-owned context anchored at a user turn, kept apart from the
 * chat messages.
 *
 * Rules (each failure is a `SessionFormatError` naming the record and field):
 * - the value is absent or an array;
 * - each snapshot is an object whose `userTurn` is a safe integer that strictly increases
 *   (the first ≥ 0) and, when the history is known, is below the number of user messages;
 *   `content` is a string with at least one non-whitespace character; `placement` is absent
 *   or exactly `"user"` (new explicit Skill snapshots; absent keeps legacy replay); and
 *   `timestamp` is a safe integer ≥ 0 (Unix milliseconds);
 * - only then its `skills`: absent or an array (empty allowed) of objects with string `id`,
 *   `name`, `path`, `content` and `revision` (empty strings allowed) and a `description` that
 *   is absent or a string.
 *
 * @module
 */
import * as v from "valibot";
import type {
  LoadedSkill,
  MessageRole,
  RecordLocation,
  RecordSchema,
  RuntimeContextSnapshot,
} from "./types.ts";
import { checkSchema, childPath, fail, hasVisibleText, safeIntegerSchema } from "./_validation.ts";
import { InvalidArgumentError } from "../errors.ts";

const WHAT = "Invalid session runtime context";
const SKILL_WHAT = "Invalid session skill context";

const skill = v.looseObject({
  id: v.string(),
  name: v.string(),
  path: v.string(),
  content: v.string(),
  revision: v.string(),
  description: v.optional(v.string()),
});

/** The schema of a loaded Skill. Extra fields pass through. */
export const LoadedSkillSchema: RecordSchema<LoadedSkill> = skill;

const snapshotEntries = {
  userTurn: safeIntegerSchema("userTurn"),
  content: v.pipe(
    v.string(),
    v.check(hasVisibleText, "content must have a non-whitespace character"),
  ),
  placement: v.optional(v.literal("user")),
  timestamp: safeIntegerSchema("timestamp"),
};
const snapshotBase = v.looseObject(snapshotEntries);
const skillList = v.optional(v.array(skill));

/**
 * The schema of one snapshot (without the ordering and history checks). Extra fields pass
 * through.
 */
export const RuntimeContextSnapshotSchema: RecordSchema<RuntimeContextSnapshot> = v
  .looseObject({ ...snapshotEntries, skills: skillList });

/**
 * Validates runtime context snapshots against the history's roles (see the module doc).
 *
 * @param value The stored or committed snapshots; `undefined` is accepted.
 * @param roles The role of every message; or the number of user messages, for a caller that
 * counts them already (a writer appending to a long history: the check then costs nothing per
 * message, and refuses what it refuses given the roles, with the same errors); or `undefined` to
 * skip the checks that need the history (header-only parsing).
 * @param options The file and JSON path (default `"header.runtimeContexts"`) for error reports.
 * @throws {SessionFormatError} Naming the offending snapshot and field.
 * @throws {InvalidArgumentError} For a user-message count that is not a non-negative safe integer.
 */
export function validateRuntimeContexts(
  value: unknown,
  roles: readonly MessageRole[] | number | undefined,
  options: RecordLocation = {},
): asserts value is readonly RuntimeContextSnapshot[] | undefined {
  if (typeof roles === "number" && !(Number.isSafeInteger(roles) && roles >= 0)) {
    // Not a count: the user-turn checks would pass anything (or name a fractional count).
    throw new InvalidArgumentError(
      "roles",
      `Invalid user-message count: expected a non-negative safe integer, got ${String(roles)}`,
      { file: options.file },
    );
  }
  if (value === undefined) return;
  const base = options.path ?? "header.runtimeContexts";
  const where = { file: options.file };
  if (!Array.isArray(value)) fail(WHAT, "expected an array", where, base, value);
  let userTurns = -1;
  if (typeof roles === "number") userTurns = roles;
  else if (roles !== undefined) {
    userTurns = 0;
    for (const role of roles) if (role === "user") userTurns++;
  }
  let previous = -1;
  for (let i = 0; i < value.length; i++) {
    const path = childPath(base, i);
    checkSchema(snapshotBase, value[i], WHAT, { file: options.file, path });
    const snapshot = value[i] as RuntimeContextSnapshot;
    if (snapshot.userTurn <= previous) {
      fail(
        WHAT,
        `userTurn must be greater than the previous snapshot's ${previous}`,
        where,
        `${path}.userTurn`,
        snapshot.userTurn,
      );
    }
    if (userTurns >= 0 && snapshot.userTurn >= userTurns) {
      fail(
        WHAT,
        `userTurn must name one of the ${userTurns} user message(s)`,
        where,
        `${path}.userTurn`,
        snapshot.userTurn,
      );
    }
    previous = snapshot.userTurn;
    checkSchema(skillList, snapshot.skills, SKILL_WHAT, {
      file: options.file,
      path: `${path}.skills`,
    });
  }
}
