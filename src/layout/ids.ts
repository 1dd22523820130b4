/**
 * Readable session ids. A root session is `NNN_<slug>` (a repo-scoped ordinal plus a slug of the
 * goal's first words), a child session is `NN_<slug>` (an ordinal within the parent's
 * `children/` plus a slug of the request id). The id is derived exactly once, at creation, and
 * passed as a value afterwards: nothing in this library re-derives an id from a path or a hash.
 * Legacy ids (`YYYYMMDD_HHMMSS_<goalhash12>_<random8>`) are still accepted by validation.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { readDirIfExists } from "../port/durable.ts";
import { isAbsolute, join, NAME_MAX_BYTES } from "../port/path.ts";
import { LayoutOptionError, SessionIdError } from "./errors.ts";
import { CHILDREN_DIRNAME, LOOPY_DIRNAME, repositoryPaths, SESSIONS_DIRNAME } from "./paths.ts";
import { confined } from "./no_links.ts";

/** Minimum digits of a root session's ordinal (`001_…`); ordinals past 999 simply grow wider. */
export const ROOT_ORDINAL_WIDTH = 3;
/** Minimum digits of a child session's ordinal (`01_…`); ordinals past 99 simply grow wider. */
export const CHILD_ORDINAL_WIDTH = 2;
/** Longest slug, in characters. */
export const SLUG_MAX_LENGTH = 40;
/** The slug used when the text has no letters or digits. */
export const EMPTY_SLUG = "session";

const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const READABLE_ID = /^(\d+)_([a-z0-9]+(?:-[a-z0-9]+)*)$/;
const LEGACY_ID = /^\d{8}_\d{6}_[0-9a-f]{12}_[0-9a-f]{8}$/;
// A legacy timestamp directory must never be read as an ordinal (20260419_… is not 20 million).
const LEGACY_PREFIX = /^\d{8}_\d{6}_/;
const ORDINAL_PREFIX = /^(\d+)_/;

/**
 * The slug of `text`: lowercase `[a-z0-9]` runs joined by `-`, every word kept, at most 40
 * characters cut at a word boundary, `session` when nothing is left.
 *
 * @example Slugs keep every word
 * ```ts
 * import { slugify } from "@loop/sessions/layout";
 * const slug = slugify("Ship the ultimate memory program!");
 * if (slug !== "ship-the-ultimate-memory-program") throw new Error(`unexpected slug ${slug}`);
 * if (slugify("¿?") !== "session") throw new Error("an empty slug becomes session");
 * ```
 */
export function slugify(text: string): string {
  const tokens = text.toLowerCase().match(/[a-z0-9]+/g) ?? [];
  let slug = "";
  for (const token of tokens) {
    const next = slug === "" ? token : `${slug}-${token}`;
    if (slug !== "" && next.length > SLUG_MAX_LENGTH) break;
    slug = next;
  }
  slug = slug.slice(0, SLUG_MAX_LENGTH).replace(/^-+|-+$/g, "");
  return slug === "" ? EMPTY_SLUG : slug;
}

/** True when `value` is a safe identifier: `[A-Za-z0-9][A-Za-z0-9_.-]*`. */
export function isSafeId(value: string): boolean {
  return SAFE_ID.test(value);
}

/**
 * The longest file name, in bytes, a safe id may make with its extension (`<id>.json`): 255, the
 * limit of a name on common filesystems (`NAME_MAX`). A longer name cannot be looked up at all
 * (`ENAMETOOLONG`), so a reader must not build one from a recorded id.
 */
export const MAX_FILE_NAME_BYTES: number = NAME_MAX_BYTES;

/**
 * True when `value` is a safe id (`isSafeId`) that makes, with `extension` (ASCII, such as
 * `.json`), a file name of at most `MAX_FILE_NAME_BYTES` bytes (a safe id is ASCII: one byte a
 * character). For an id read from a record and then used as a file name.
 */
export function isSafeFileId(value: string, extension = ""): boolean {
  return value.length + extension.length <= MAX_FILE_NAME_BYTES && isSafeId(value);
}

/** The form of a session id: readable (`NNN_<slug>` / `NN_<slug>`) or legacy (timestamped). */
export type SessionIdForm = "readable" | "legacy";

/**
 * The form of `id`, or `undefined` when it is neither a readable id (at least two ordinal digits,
 * a slug of at most 40 characters) nor a legacy id.
 */
export function sessionIdForm(id: string): SessionIdForm | undefined {
  if (LEGACY_ID.test(id)) return "legacy";
  const match = READABLE_ID.exec(id);
  if (match === null) return undefined;
  const [, ordinal = "", slug = ""] = match;
  if (ordinal.length < CHILD_ORDINAL_WIDTH || slug.length > SLUG_MAX_LENGTH) return undefined;
  return "readable";
}

/** True when `id` is a readable or a legacy session id. */
export function isSessionId(id: string): boolean {
  return sessionIdForm(id) !== undefined;
}

/** Throws `SessionIdError` unless `id` is a readable or a legacy session id. */
export function assertSessionId(id: string): void {
  if (!isSessionId(id)) {
    throw new SessionIdError(
      id,
      "Session id is neither NNN_<slug> / NN_<slug> nor YYYYMMDD_HHMMSS_<goalhash12>_<random8>",
    );
  }
}

/** Formats an id from an ordinal (zero-padded to at least `width` digits) and a slug. */
export function formatSessionId(ordinal: number, width: number, slug: string): string {
  if (!Number.isSafeInteger(ordinal) || ordinal < 1) {
    throw new SessionIdError(String(ordinal), "Session ordinal must be a positive integer");
  }
  return `${String(ordinal).padStart(width, "0")}_${slug}`;
}

/**
 * The prefix of an ordinal reservation: `<sessions dir>/.ordinal-<NNN>`, an empty file created
 * exclusively by a root session's creator before it builds the session, and removed once the
 * session is published. Its exclusive creation is what makes a root ordinal unique across
 * processes; readers ignore it like every other dot entry.
 */
export const ORDINAL_RESERVATION_PREFIX: string = ".ordinal-";

const RESERVATION = /^\.ordinal-(\d+)$/;

/** The reservation file name of `ordinal` (zero-padded to at least `width` digits). */
export function ordinalReservationName(ordinal: number, width: number): string {
  if (!Number.isSafeInteger(ordinal) || ordinal < 1) {
    throw new SessionIdError(String(ordinal), "Session ordinal must be a positive integer");
  }
  return `${ORDINAL_RESERVATION_PREFIX}${String(ordinal).padStart(width, "0")}`;
}

/** What `highestOrdinal` counts. */
export interface HighestOrdinalOptions {
  /** Count ordinal reservations (`.ordinal-<NNN>`) too; default true. */
  readonly reservations?: boolean | undefined;
  /** A reservation name not to count (the caller's own). */
  readonly except?: string | undefined;
}

/**
 * The highest ordinal taken in a scope directory, 0 for a missing or empty scope: the
 * `<digits>_` prefix of every entry (files included, any number of digits) and, unless turned
 * off, every ordinal reservation. Other hidden entries (`.staging-*`, temp files), legacy
 * timestamp ids and ordinals past `Number.MAX_SAFE_INTEGER` never count.
 */
export async function highestOrdinal(
  fs: FileSystem,
  scopeDir: string,
  options: HighestOrdinalOptions = {},
): Promise<number> {
  fs = confined(fs, scopeDir);
  let highest = 0;
  for (const entry of await readDirIfExists(fs, scopeDir)) {
    let match: RegExpExecArray | null;
    if (entry.name.startsWith(".")) {
      if (options.reservations === false || entry.name === options.except) continue;
      match = RESERVATION.exec(entry.name);
    } else {
      if (LEGACY_PREFIX.test(entry.name)) continue;
      match = ORDINAL_PREFIX.exec(entry.name);
    }
    if (match === null) continue;
    const ordinal = Number(match[1]);
    if (Number.isSafeInteger(ordinal) && ordinal > highest) highest = ordinal;
  }
  return highest;
}

/**
 * Checks that `ordinal`, the next one of the scope directory `scope`, can name a session: an
 * entry of the scope numbered `Number.MAX_SAFE_INTEGER` (2^53 - 1, planted: no run creates that
 * many sessions) leaves none after it. Gaps are never reused, so no id can be made there until
 * that entry is renamed or removed: a `SessionIdError` naming the scope says so, rather than an
 * id repeated (which would make the trees holding it unloadable).
 */
export function checkNextOrdinal(ordinal: number, scope: string): void {
  if (Number.isSafeInteger(ordinal)) return;
  throw new SessionIdError(
    scope,
    `No session ordinal is left in the scope: an entry is numbered ${
      ordinal - 1
    }, the largest safe integer; rename or remove it`,
  );
}

/**
 * The next ordinal of a scope directory: one more than the highest `<digits>_` prefix among its
 * entries (files included, any number of digits) and its ordinal reservations, 1 for a missing
 * or empty scope. Gaps are never reused. Other hidden entries (`.staging-*`, temp files),
 * legacy timestamp ids and ordinals past `Number.MAX_SAFE_INTEGER` never count.
 */
export async function nextOrdinal(fs: FileSystem, scopeDir: string): Promise<number> {
  return (await highestOrdinal(fs, scopeDir)) + 1;
}

/** Input of `createSessionId` for a root session. */
export interface RootSessionIdInput {
  /** The repository root; the scope is `<repoRoot>/.loopy_loop/sessions/`. */
  readonly repoRoot: string;
  /** The goal; its first words make the slug. */
  readonly goal: string;
}

/** Input of `createSessionId` for a child session. */
export interface ChildSessionIdInput {
  /** The parent session's directory; the scope is its `children/`. */
  readonly parentSessionDir: string;
  /** The child request's id; it makes the slug (`session` when undefined). */
  readonly requestId: string | undefined;
  /**
   * Ids already promised in the parent's ledger (children.json) whose directories may not exist
   * (a failed dispatch); their ordinals count as taken too.
   */
  readonly reservedIds?: readonly string[] | undefined;
}

/**
 * Derives a new session id, once, at creation: `NNN_<slug>` for a root, `NN_<slug>` for a child.
 * The ordinal alone makes the id unique within its scope. This only computes the id: it takes
 * no lock and reserves nothing, so two callers can get the same ordinal (with different slugs,
 * which a rename would not catch). `createRootSession` makes root ordinals unique across
 * processes with an exclusive reservation (`ORDINAL_RESERVATION_PREFIX`); child ids are derived
 * under the parent's serialized child lifecycle and recorded in its ledger before the child is
 * built (one engine process runs a repository).
 *
 * @example A root id and a child id
 * ```ts
 * import { createSessionId } from "@loop/sessions/layout";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * const root = await createSessionId(fs, { repoRoot: "/repo", goal: "Ship the landing page" });
 * if (root !== "001_ship-the-landing-page") throw new Error("unexpected result");
 * const child = await createSessionId(fs, {
 *   parentSessionDir: "/repo/.loopy_loop/sessions/" + root,
 *   requestId: "phase-0-foundations",
 * });
 * if (child !== "01_phase-0-foundations") throw new Error("unexpected result");
 * ```
 */
export async function createSessionId(
  fs: FileSystem,
  input: RootSessionIdInput | ChildSessionIdInput,
): Promise<string> {
  // Absolute paths only (the port's), refused alike on every adapter before anything is read.
  if ("parentSessionDir" in input) {
    const dir = input.parentSessionDir;
    if (typeof dir !== "string" || !isAbsolute(dir)) {
      throw new LayoutOptionError(
        "parentSessionDir",
        dir,
        "The parent session directory must be an absolute path",
      );
    }
  } else repositoryPaths(input.repoRoot);
  fs = confined(
    fs,
    "parentSessionDir" in input ? input.parentSessionDir : join(input.repoRoot, LOOPY_DIRNAME),
  );
  if ("parentSessionDir" in input) {
    const scope = join(input.parentSessionDir, CHILDREN_DIRNAME);
    let ordinal = await nextOrdinal(fs, scope);
    for (const id of input.reservedIds ?? []) {
      const match = ORDINAL_PREFIX.exec(id);
      const reserved = Number(match?.[1]);
      if (match !== null && !LEGACY_PREFIX.test(id) && Number.isSafeInteger(reserved)) {
        ordinal = Math.max(ordinal, reserved + 1);
      }
    }
    checkNextOrdinal(ordinal, scope);
    return formatSessionId(ordinal, CHILD_ORDINAL_WIDTH, slugify(input.requestId ?? ""));
  }
  const scope = join(input.repoRoot, LOOPY_DIRNAME, SESSIONS_DIRNAME);
  const ordinal = await nextOrdinal(fs, scope);
  checkNextOrdinal(ordinal, scope);
  return formatSessionId(ordinal, ROOT_ORDINAL_WIDTH, slugify(input.goal));
}
