/**
 * POSIX path helpers for the core. Paths handed to the port are absolute and normalized.
 *
 * @module
 */

/** True when `path` starts with `/`. */
export function isAbsolute(path: string): boolean {
  return path.startsWith("/");
}

/** A path holding any of these (`//`, a `.` or `..` segment, a trailing `/`) needs work. */
const NEEDS_NORMALIZING = /\/\/|(?:^|\/)\.{1,2}(?:\/|$)|[^]\/$/;

/** Collapses `.`, `..`, repeated and trailing slashes. Keeps a leading `/`. */
export function normalize(path: string): string {
  // Most paths the core builds are normalized already: they come back as they are.
  if (path !== "" && !NEEDS_NORMALIZING.test(path)) return path;
  const absolute = isAbsolute(path);
  const out: string[] = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (out.length > 0 && out[out.length - 1] !== "..") out.pop();
      else if (!absolute) out.push("..");
      continue;
    }
    out.push(part);
  }
  const joined = out.join("/");
  if (absolute) return "/" + joined;
  return joined === "" ? "." : joined;
}

/** Joins path segments and normalizes the result. */
export function join(...parts: string[]): string {
  return normalize(parts.filter((p) => p !== "").join("/"));
}

/** Resolves `path` against the absolute `base` (an absolute `path` wins). */
export function resolve(base: string, path: string): string {
  return isAbsolute(path) ? normalize(path) : normalize(`${base}/${path}`);
}

/** The parent directory of a normalized path (`/` for `/` and top-level entries). */
export function dirname(path: string): string {
  const normalized = normalize(path);
  const index = normalized.lastIndexOf("/");
  if (index < 0) return ".";
  if (index === 0) return "/";
  return normalized.slice(0, index);
}

/** The last segment of a path. */
export function basename(path: string): string {
  const normalized = normalize(path);
  const index = normalized.lastIndexOf("/");
  return index < 0 ? normalized : normalized.slice(index + 1);
}

/**
 * The path of `target` relative to `from` (both absolute), or `undefined` when `target` is not
 * `from` or below it.
 */
export function relativeWithin(from: string, target: string): string | undefined {
  const base = normalize(from);
  const full = normalize(target);
  if (full === base) return "";
  const prefix = base === "/" ? "/" : base + "/";
  return full.startsWith(prefix) ? full.slice(prefix.length) : undefined;
}

/** True when `target` is `root` or lies below it (after normalization). */
export function isWithin(root: string, target: string): boolean {
  return relativeWithin(root, target) !== undefined;
}

const utf8 = new TextEncoder();

/** The length of `text` in UTF-8 bytes (a lone surrogate counts as its replacement's 3). */
export function utf8Length(text: string): number {
  return utf8.encode(text).length;
}

/** The longest name of one path component, in UTF-8 bytes (`NAME_MAX` on common filesystems). */
export const NAME_MAX_BYTES = 255;

/**
 * The longest prefix of `name`, on whole characters (never half a surrogate pair), of at most
 * `bytes` UTF-8 bytes: a name cut to fit a file name's limit. A lone surrogate counts as the 3
 * bytes of the replacement character a filesystem name gets for it.
 */
export function utf8Prefix(name: string, bytes: number): string {
  // A name of at most bytes / 3 UTF-16 units is at most `bytes` UTF-8 bytes (a unit encodes in
  // at most 3 bytes; a surrogate pair, two units, in 4): the common case costs no count.
  if (name.length * 3 <= bytes) return name;
  let used = 0;
  let end = 0;
  for (const char of name) {
    const code = char.codePointAt(0) as number;
    const size = code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
    if (used + size > bytes) break;
    used += size;
    end += char.length;
  }
  return name.slice(0, end);
}
