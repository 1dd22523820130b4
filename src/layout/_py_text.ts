/**
 * Python's text rules, as the engine applies them to the text it reads and writes:
 * `str.strip()`, `str.rstrip()`, `str.splitlines()`, and the order `sorted()` puts strings in.
 *
 * @module
 */

/**
 * The characters Python's `str.strip()` removes (`str.isspace()`), which the engine applies to the
 * goal, to every record field that must be non-blank and to the lines of `events.jsonl`:
 * JavaScript's `trim()` also removes U+FEFF and keeps U+001C-U+001F and U+0085.
 */
const PY_WHITESPACE =
  "\t\n\v\f\r\u001c\u001d\u001e\u001f \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005" +
  "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";

/** `text.rstrip()` as Python computes it. */
export function pyRstrip(text: string): string {
  let end = text.length;
  while (end > 0 && PY_WHITESPACE.includes(text[end - 1] as string)) end--;
  return text.slice(0, end);
}

/** `text.strip()` as Python computes it. */
export function pyStrip(text: string): string {
  let start = 0;
  const rest = pyRstrip(text);
  while (start < rest.length && PY_WHITESPACE.includes(rest[start] as string)) start++;
  return rest.slice(start);
}

/**
 * `text.splitlines()` as Python computes it: split at `\r\n` and at each of `\n \r \v \f`,
 * U+001C-U+001E, U+0085, U+2028 and U+2029, no empty last line for a final break.
 */
export function pySplitlines(text: string): string[] {
  // deno-lint-ignore no-control-regex -- Python's line boundaries include these controls
  const lines = text.split(/\r\n|[\n\r\v\f\u001c\u001d\u001e\u0085\u2028\u2029]/);
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** A UTF-16 surrogate: the only units whose order differs from their code points' order. */
const SURROGATE = /[\ud800-\udfff]/;

/**
 * Compares two strings by Unicode code point, the order Python's `sorted()` gives `str` values (and
 * the names of `Path` values in one directory). JavaScript's `<` compares UTF-16 units, which puts
 * a character past U+FFFF (two surrogate units) before one from U+E000 to U+FFFF. A lone
 * surrogate counts as its own code point, as Python counts one.
 */
export function compareCodePoints(a: string, b: string): number {
  if (!SURROGATE.test(a) && !SURROGATE.test(b)) return a < b ? -1 : a > b ? 1 : 0;
  const left = [...a];
  const right = [...b];
  const length = Math.min(left.length, right.length);
  for (let i = 0; i < length; i++) {
    const x = left[i]?.codePointAt(0) ?? 0;
    const y = right[i]?.codePointAt(0) ?? 0;
    if (x !== y) return x - y;
  }
  return left.length - right.length;
}
