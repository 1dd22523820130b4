/**
 * Session and checkpoint ids.
 *
 * @module
 */

/**
 * The pattern of session and compaction checkpoint ids: exactly 36 characters of `[a-f0-9-]`.
 * Uppercase fails; the UUID layout itself is not checked (the rules of the v2 format).
 */
export const ID_PATTERN: RegExp = /^[a-f0-9-]{36}$/;

/** True when `value` is a string matching `ID_PATTERN`. */
export function isSessionId(value: unknown): value is string {
  return typeof value === "string" && ID_PATTERN.test(value);
}
