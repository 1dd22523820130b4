/**
 * JSON written as the engine's Python `json.dumps` writes it, for what the library must print or
 * hash exactly as the engine does. Internal to the layout and its CLI.
 *
 * @module
 */
import { asciiEscaped } from "./json_io.ts";
import { compareCodePoints } from "./_py_text.ts";

/** `text` as a JSON string with every non-ASCII character escaped. */
function asciiJsonString(text: string): string {
  return asciiEscaped(JSON.stringify(text));
}

/**
 * JSON of parsed `value` with its object keys sorted by code point and every non-ASCII character
 * escaped as `\uXXXX`, as the engine's `json.dumps(value, sort_keys=True)` writes it: compact
 * (`indent` 0, as the engine hashes an inventory) or, with `indent` spaces a level, as
 * `json.dumps(value, indent=indent, sort_keys=True)` prints it (`", "` between items becomes a
 * line break, `": "` after a key; an empty array or object stays `[]` or `{}`), levels nested
 * deeper than `indentedLevels` on one line (the engine's writer, which recurses, cannot print a
 * value nested past about 1,000 levels at all, and indenting thousands of levels takes space
 * quadratic in the depth). Numbers are written
 * as JavaScript writes them (a `1.0` of the file as `1`), anything JSON has no value for as `null`.
 * Written with an explicit stack, not by recursion: a manifest holds whatever its writer put there,
 * and a value nested some thousands of levels deep (a few kilobytes of `[`) must be written like
 * any other, not overflow the call stack of every trace reader.
 */
export function engineJson(value: unknown, indent = 0, indentedLevels = Infinity): string {
  const parts: string[] = [];
  const colon = indent > 0 ? ": " : ":";
  // The break before an item, or a closing bracket, at a nesting level (none when compact).
  const breakAt = (level: number): string =>
    indent > 0 && level <= indentedLevels ? `\n${" ".repeat(indent * level)}` : "";
  // The break before the closing bracket of a level: there when its members were broken.
  const closingBreak = (level: number): string => breakAt(level + 1) === "" ? "" : breakAt(level);
  // What is left to write, last first: a value at its level, or text (`]`, `,`, `"key":`, ...).
  const stack: ({ readonly value: unknown; readonly level: number } | { readonly text: string })[] =
    [{ value, level: 0 }];
  for (let work = stack.pop(); work !== undefined; work = stack.pop()) {
    if ("text" in work) {
      parts.push(work.text);
      continue;
    }
    const { value: item, level } = work;
    if (item === null || typeof item === "boolean") parts.push(String(item));
    else if (typeof item === "number") parts.push(Number.isFinite(item) ? String(item) : "null");
    else if (typeof item === "string") parts.push(asciiJsonString(item));
    else if (Array.isArray(item)) {
      if (item.length === 0) {
        parts.push("[]");
        continue;
      }
      parts.push("[");
      stack.push({ text: `${closingBreak(level)}]` });
      for (let i = item.length - 1; i >= 0; i--) {
        stack.push({ value: item[i], level: level + 1 });
        stack.push({ text: `${i > 0 ? "," : ""}${breakAt(level + 1)}` });
      }
    } else if (typeof item === "object") {
      const record = item as Record<string, unknown>;
      const keys = Object.keys(record).sort(compareCodePoints);
      if (keys.length === 0) {
        parts.push("{}");
        continue;
      }
      parts.push("{");
      stack.push({ text: `${closingBreak(level)}}` });
      for (let i = keys.length - 1; i >= 0; i--) {
        const key = keys[i] as string;
        stack.push({ value: record[key], level: level + 1 });
        stack.push({
          text: `${i > 0 ? "," : ""}${breakAt(level + 1)}${asciiJsonString(key)}${colon}`,
        });
      }
    } else parts.push("null");
  }
  return parts.join("");
}

/**
 * The deepest nesting (the value itself level 1) the engine's `json.dumps(..., indent=2)` prints:
 * its writer recurses, and Python 3's default recursion limit stops it past about 995 levels.
 */
export const ENGINE_PRINTABLE_LEVELS = 995;

/** True when the arrays and objects of parsed JSON `value` nest deeper than `limit` levels. */
export function nestsDeeper(value: unknown, limit: number): boolean {
  if (typeof value !== "object" || value === null) return false;
  const stack: [object, number][] = [[value, 1]];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const [item, level] = top;
    if (level > limit) return true;
    for (const member of Array.isArray(item) ? item : Object.values(item)) {
      if (typeof member === "object" && member !== null) stack.push([member, level + 1]);
    }
  }
  return false;
}
