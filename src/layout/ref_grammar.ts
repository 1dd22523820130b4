/**
 * The grammar of logical references, checked without touching any file:
 *
 * ```
 * reference := scope ":/" path
 * scope     := "repo" | "session" | "root" | "parent" | "session:" id | "trace:" id
 * path      := "" | segment ("/" segment)*      (no "", ".", ".." segments; no leading "/")
 * id        := [A-Za-z0-9][A-Za-z0-9_.-]*
 * ```
 *
 * A reference is at most 4096 UTF-8 bytes, a segment at most 255 (UTF-8 bytes, not characters:
 * what a filesystem limits), and neither may contain a control character (NUL included), a
 * backslash, or a second `:/`.
 *
 * @module
 */
import { utf8Length } from "../port/path.ts";
import { LogicalReferenceError } from "./errors.ts";

/** The scope of a logical reference. `session` with an `id` is the named `session:<id>:/` form. */
export type LogicalScope = "repo" | "session" | "root" | "parent" | "trace";

/** A reference that passed the grammar check. */
export interface ParsedReference {
  /** The reference as given. */
  readonly reference: string;
  /** The scope. */
  readonly scope: LogicalScope;
  /** The session id (`session:<id>:/`) or trace manifest id (`trace:<id>:/`); else undefined. */
  readonly id: string | undefined;
  /** The path segments below the scope's root (empty for the root itself). */
  readonly segments: readonly string[];
}

/** Longest accepted reference, in UTF-8 bytes (a path the filesystem can take). */
export const MAX_REFERENCE_LENGTH = 4096;
/** Longest accepted path segment, in UTF-8 bytes (a file name the filesystem can take). */
export const MAX_SEGMENT_LENGTH = 255;

const IMPLICIT = new Set(["repo", "session", "root", "parent"]);
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
/** A control character (C0, DEL or C1: Unicode category Cc) or a backslash. */
const FORBIDDEN = /[\p{Cc}\\]/u;

/**
 * Parses a logical reference, throwing `LogicalReferenceError` (reason `grammar` or
 * `unknown_scope`) when it does not follow the grammar. Pure: no file is touched.
 *
 * @example Parse a named session reference
 * ```ts
 * import { parseLogicalReference } from "@loop/sessions/layout";
 * const ref = parseLogicalReference("session:01_phase-0:/session_outcome.json");
 * if (ref.scope !== "session") throw new Error("unexpected result");
 * if (ref.id !== "01_phase-0") throw new Error("unexpected result");
 * if (ref.segments.join("/") !== "session_outcome.json") throw new Error("unexpected path");
 * ```
 */
export function parseLogicalReference(reference: string): ParsedReference {
  if (typeof reference !== "string" || reference === "") {
    throw new LogicalReferenceError(String(reference), "grammar", "Logical reference is empty");
  }
  if (reference.length > MAX_REFERENCE_LENGTH || utf8Length(reference) > MAX_REFERENCE_LENGTH) {
    throw new LogicalReferenceError(reference, "grammar", "Logical reference is too long");
  }
  if (FORBIDDEN.test(reference)) {
    throw new LogicalReferenceError(
      reference,
      "grammar",
      "Logical reference contains a control character or a backslash",
    );
  }
  const marker = reference.indexOf(":/");
  if (marker < 0) {
    throw new LogicalReferenceError(reference, "grammar", "Logical reference has no ':/'");
  }
  const prefix = reference.slice(0, marker);
  const relative = reference.slice(marker + 2);
  const parts = prefix.split(":");
  let scope: LogicalScope;
  let id: string | undefined;
  if (parts.length === 1 && IMPLICIT.has(parts[0] ?? "")) {
    scope = parts[0] as LogicalScope;
  } else if (
    parts.length === 2 && (parts[0] === "session" || parts[0] === "trace") &&
    SAFE_ID.test(parts[1] ?? "") && (parts[1] ?? "").length <= MAX_SEGMENT_LENGTH
  ) {
    scope = parts[0];
    id = parts[1];
  } else {
    throw new LogicalReferenceError(
      reference,
      "unknown_scope",
      "Logical reference has an unknown or malformed scope",
    );
  }
  if (relative.includes(":/") || relative.startsWith("/")) {
    throw new LogicalReferenceError(reference, "grammar", "Logical reference path is malformed");
  }
  const segments = relative === "" ? [] : relative.split("/");
  for (const segment of segments) {
    if (segment === "" || segment === "." || segment === "..") {
      throw new LogicalReferenceError(
        reference,
        "grammar",
        "Logical reference path has an empty, '.' or '..' segment",
      );
    }
    if (utf8Length(segment) > MAX_SEGMENT_LENGTH) {
      throw new LogicalReferenceError(
        reference,
        "grammar",
        "Logical reference path segment is too long",
      );
    }
  }
  return { reference, scope, id, segments };
}

/** True when `reference` follows the grammar (see `parseLogicalReference`). */
export function isLogicalReference(reference: string): boolean {
  try {
    parseLogicalReference(reference);
    return true;
  } catch (error) {
    if (error instanceof LogicalReferenceError) return false;
    throw error;
  }
}

/** Formats a reference from a scope, an optional id and a session-relative path. */
export function formatLogicalReference(
  scope: LogicalScope,
  id: string | undefined,
  relativePath: string,
): string {
  const reference = id === undefined
    ? `${scope}:/${relativePath}`
    : `${scope}:${id}:/${relativePath}`;
  parseLogicalReference(reference);
  return reference;
}
