/**
 * Python's whitespace rules, as the engine applies them to the text it reads and writes:
 * `str.strip()`, `str.rstrip()` and `str.splitlines()`.
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
