/**
 * The public session header (schema version 2): parsing in the order of the v2 rules, the
 * discovery check, new headers, and the metadata checks that need the message roles.
 *
 * `parseSessionHeader` checks, first failure wins:
 * 1. `format === "loop-session"` and `version === 2`, exact types; anything else (including a
 *    header that is not an object) is an `UnsupportedSessionError`, a distinct error from an
 *    invalid header, so discovery can skip the file without modifying it;
 * 2. the obsolete `runTimings` field is dropped, whatever its value;
 * 3. field checks, each a `SessionFormatError` naming `header.<field>` and its value:
 *    `id` is 36 characters of `[a-f0-9-]` (uppercase fails; the UUID layout is not checked);
 *    `cwd` is an absolute path (POSIX `/…`, or a Windows drive or UNC path); `createdAt` and
 *    `updatedAt` are strings `Date.parse` accepts (not necessarily canonical); `unread` is
 *    absent or a boolean; `pinnedAt` is absent or a canonical ISO UTC timestamp (equal to
 *    `new Date(s).toISOString()`); `permissionPreset` is required and known; `title` is
 *    absent or valid (see `isValidTitle`); `model` is absent or has string `provider`
 *    and `id` and a known `effort` when present (`"default"` included);
 * 4. the shapes and ordering of `runtimeContexts`, `promptTimings`, `compactions` and
 *    `systemPromptCheckpoints` (the checks against the history run in
 *    `validateSessionMetadata`).
 *
 * Unknown extra fields pass through untouched, as in the v2 format: a newer writer's fields
 * survive a load and save by this library. The existence of `cwd` is not checked here (the
 * store does that through its filesystem).
 *
 * @module
 */
import * as v from "valibot";
import { preview, SessionFormatError, UnsupportedSessionError } from "../errors.ts";
import type { MessageRole, RecordLocation, RecordSchema, SessionHeader } from "./types.ts";
import { checkNesting, checkSchema, isRecord, MAX_HEADER_NESTING } from "./_validation.ts";
import { ID_PATTERN } from "./ids.ts";
import {
  DEFAULT_PERMISSION_PRESET,
  isPermissionPreset,
  isPlainModelRef,
  ModelRefSchema,
  PermissionPresetSchema,
} from "./model.ts";
import { isPlainValidTitle, SessionTitleSchema } from "./title.ts";
import { validatePromptTimings } from "./timings.ts";
import { validateRuntimeContexts } from "./runtime_context.ts";
import { validateCompactions } from "./compaction.ts";
import { validateSystemPromptCheckpoints } from "./system_prompt.ts";

/** The header's `format`. */
export const SESSION_FORMAT = "loop-session";
/** The header's schema version. */
export const SESSION_HEADER_VERSION = 2;

const WHAT = "Invalid session metadata";

/** True for a POSIX absolute path, or a Windows drive (`C:\`, `C:/`) or UNC (`\\`) path. */
export function isAbsolutePath(path: string): boolean {
  return path.startsWith("/") || /^[A-Za-z]:[\\/]/.test(path) || path.startsWith("\\\\");
}

/** True when `text` parses as a date and equals its own `toISOString()` (canonical UTC). */
export function isCanonicalIsoTimestamp(text: string): boolean {
  const time = Date.parse(text);
  return Number.isFinite(time) && new Date(time).toISOString() === text;
}

function isParsableTimestamp(text: string): boolean {
  return Number.isFinite(Date.parse(text));
}

/** The field checks of rule 3, in order. */
const fieldEntries = {
  id: v.pipe(v.string(), v.regex(ID_PATTERN, "id must be 36 characters of [a-f0-9-]")),
  cwd: v.pipe(v.string(), v.check(isAbsolutePath, "cwd must be an absolute path")),
  createdAt: v.pipe(
    v.string(),
    v.check(isParsableTimestamp, "createdAt must be an ISO timestamp"),
  ),
  updatedAt: v.pipe(
    v.string(),
    v.check(isParsableTimestamp, "updatedAt must be an ISO timestamp"),
  ),
  unread: v.optional(v.boolean()),
  pinnedAt: v.optional(
    v.pipe(
      v.string(),
      v.check(
        isCanonicalIsoTimestamp,
        "pinnedAt must be a canonical ISO UTC timestamp such as 2026-01-02T03:04:05.000Z",
      ),
    ),
  ),
  permissionPreset: PermissionPresetSchema,
  title: v.optional(SessionTitleSchema),
  model: v.optional(ModelRefSchema),
};
const headerFields = v.looseObject(fieldEntries);

/**
 * True when the fields of rule 3 are valid, checked by hand with the rules of `fieldEntries` for
 * the plain shapes JSON gives. A listing parses one header per session, and this costs a fraction
 * of the schema. False means only "not accepted here": the schema then decides and names the
 * field. A test damages headers at random and checks that this never accepts what it rejects.
 */
function plainFieldsValid(header: Record<string, unknown>): boolean {
  const { id, cwd, createdAt, updatedAt, unread, pinnedAt, permissionPreset, title, model } =
    header;
  return typeof id === "string" && ID_PATTERN.test(id) &&
    typeof cwd === "string" && isAbsolutePath(cwd) &&
    typeof createdAt === "string" && isParsableTimestamp(createdAt) &&
    typeof updatedAt === "string" && isParsableTimestamp(updatedAt) &&
    (unread === undefined || typeof unread === "boolean") &&
    (pinnedAt === undefined ||
      (typeof pinnedAt === "string" && isCanonicalIsoTimestamp(pinnedAt))) &&
    isPermissionPreset(permissionPreset) &&
    (title === undefined || isPlainValidTitle(title)) &&
    (model === undefined || isPlainModelRef(model));
}

function metadataArray<T>(
  validate: (value: unknown, roles: undefined) => void,
): v.GenericSchema<unknown, T> {
  return v.custom<T>((value) => {
    try {
      validate(value, undefined);
      return true;
    } catch (error) {
      if (error instanceof SessionFormatError) return false;
      throw error;
    }
  }, "invalid metadata array");
}

function normalizeHeader(header: Record<string, unknown>): SessionHeader {
  const { runTimings: _obsolete, ...rest } = header;
  // Only a missing (or undefined) value reads as false; `null` and other values stay to be rejected.
  return {
    ...rest,
    unread: rest.unread === undefined ? false : rest.unread,
  } as unknown as SessionHeader;
}

/**
 * The schema of a stored header: rules 1–4 of the module doc (without the checks that need the
 * history). Its output drops `runTimings` and reads a missing `unread` as false, like
 * `parseSessionHeader`.
 */
export const SessionHeaderSchema: RecordSchema<SessionHeader> = v.pipe(
  v.looseObject({
    format: v.literal(SESSION_FORMAT),
    version: v.literal(SESSION_HEADER_VERSION),
    ...fieldEntries,
    runtimeContexts: v.optional(metadataArray(validateRuntimeContexts)),
    promptTimings: v.optional(metadataArray(validatePromptTimings)),
    compactions: v.optional(metadataArray(validateCompactions)),
    systemPromptCheckpoints: v.optional(metadataArray(validateSystemPromptCheckpoints)),
  }),
  v.transform((header): SessionHeader => normalizeHeader(header)),
);

/**
 * True when `value` is a header of the supported format and version (`format ===
 * "loop-session"`, `version === 2`), whatever its other fields. Discovery skips other files.
 */
export function isSupportedHeader(value: unknown): boolean {
  return isRecord(value) && value.format === SESSION_FORMAT &&
    value.version === SESSION_HEADER_VERSION;
}

/**
 * Parses a stored header (see the module doc for the order of checks).
 *
 * @param value The parsed JSON header.
 * @param options The file, and the JSON path prefix of the header (default `"header"`).
 * @returns A shallow copy without `runTimings`, with `unread` read as false when missing.
 * Nested values are shared with `value`, which is never modified.
 * @throws {UnsupportedSessionError} When the format or version is not supported.
 * @throws {SessionFormatError} When a field is invalid, naming `header.<field>` and the value.
 *
 * @example
 * ```ts
 * import { parseSessionHeader } from "./header.ts";
 * const header = parseSessionHeader({
 *   format: "loop-session",
 *   version: 2,
 *   id: "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
 *   cwd: "/work",
 *   createdAt: "2026-01-01T00:00:00.000Z",
 *   updatedAt: "2026-01-01T00:00:00.000Z",
 *   permissionPreset: "read-only",
 * });
 * header.unread; // false
 * ```
 */
export function parseSessionHeader(value: unknown, options: RecordLocation = {}): SessionHeader {
  const header = parseHeaderFields(value, options);
  validateSessionMetadata(header, undefined, options); // their shapes: no history yet
  return header;
}

/**
 * `parseSessionHeader` without the checks of the metadata arrays (runtime contexts, prompt
 * timings, compactions, system prompt checkpoints): steps 1-3 of the version-2 order, whose step 6
 * checks those arrays (`validateSessionMetadata`) after the cwd and every message. The result is
 * a `SessionHeader` only once that step has passed. Internal: not exported by the package.
 */
export function parseHeaderFields(value: unknown, options: RecordLocation = {}): SessionHeader {
  const base = options.path ?? "header";
  if (!isSupportedHeader(value)) {
    const record = isRecord(value) ? value : {};
    throw new UnsupportedSessionError(
      `Unsupported session format or version: expected format "${SESSION_FORMAT}" version ${SESSION_HEADER_VERSION}, found ${
        isRecord(value)
          ? `format ${preview(record.format)} version ${preview(record.version)}`
          : `a header that is not an object: ${preview(value)}`
      }`,
      {
        format: record.format,
        version: record.version,
        ...(options.file === undefined ? {} : { file: options.file }),
      },
    );
  }
  // Before its fields are read, once the obsolete `runTimings` is dropped (ignored whatever its
  // value, never written again): a header too deep to copy or write is refused by its field.
  const header = normalizeHeader(value as Record<string, unknown>);
  checkNesting(header, MAX_HEADER_NESTING, WHAT, { file: options.file }, base);
  const where = { file: options.file, path: base };
  if (!plainFieldsValid(header as unknown as Record<string, unknown>)) {
    checkSchema(headerFields, header, WHAT, where);
  }
  return header;
}

/** Options of `validateSessionMetadata`. */
export interface ValidateSessionMetadataOptions {
  /** The file the header came from, for error reports. */
  readonly file?: string | undefined;
  /** The JSON path prefix of the header; default `"header"`. */
  readonly path?: string | undefined;
}

/**
 * Checks the header's metadata arrays against the history, in order: runtime contexts, prompt
 * timings, compactions, system prompt checkpoints. Only the roles of the messages are needed,
 * so a store can keep just the roles of a huge history.
 *
 * @param header The header (parsed, or about to be written).
 * @param roles The role of every message of the history; `undefined` checks the arrays' shapes
 * alone (what can be checked before the history is read).
 * @param options The file and header path for error reports.
 * @throws {SessionFormatError} Naming the offending record and field.
 */
export function validateSessionMetadata(
  header: SessionHeader,
  roles: readonly MessageRole[] | undefined,
  options: ValidateSessionMetadataOptions = {},
): void {
  const base = options.path ?? "header";
  const file = options.file;
  validateRuntimeContexts(header.runtimeContexts, roles, { file, path: `${base}.runtimeContexts` });
  validatePromptTimings(header.promptTimings, roles, { file, path: `${base}.promptTimings` });
  validateCompactions(header.compactions, roles, { file, path: `${base}.compactions` });
  validateSystemPromptCheckpoints(header.systemPromptCheckpoints, roles, {
    file,
    path: `${base}.systemPromptCheckpoints`,
  });
}

/** Inputs of `newSessionHeader`. */
export interface NewSessionHeaderInput {
  /** The session id (36 characters of `[a-f0-9-]`, normally a lowercase UUID). */
  readonly id: string;
  /** The absolute canonical working directory. */
  readonly cwd: string;
  /** The creation time as an ISO string; used for `createdAt` and `updatedAt`. */
  readonly now: string;
}

/**
 * The header of a new session: version 2, permission preset `"read-only"`, `unread` false.
 *
 * @param input The id, cwd and creation time.
 * @returns A validated header.
 * @throws {SessionFormatError} When the id, cwd or time is invalid.
 */
export function newSessionHeader(input: NewSessionHeaderInput): SessionHeader {
  return parseSessionHeader({
    format: SESSION_FORMAT,
    version: SESSION_HEADER_VERSION,
    id: input.id,
    cwd: input.cwd,
    createdAt: input.now,
    updatedAt: input.now,
    unread: false,
    permissionPreset: DEFAULT_PERMISSION_PRESET,
  });
}
