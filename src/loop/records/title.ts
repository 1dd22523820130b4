/**
 * Session titles: normalization, validation and the fallback title derived from the first
 * eligible user message when no title is stored. Reading never writes the fallback to disk;
 * these functions are pure.
 *
 * @module
 */
import * as v from "valibot";
import type { Message, RecordSchema, SessionTitle, TitleInput, TitleSource } from "./types.ts";
import { checkSchema, isRecord, isSafeNonNegative } from "./_validation.ts";

/** The UTF-8 byte limit of a stored title. */
export const TITLE_MAX_BYTES = 120;
/** The UTF-8 byte limit of a fallback title. */
export const FALLBACK_TITLE_MAX_BYTES = 96;
/** The number of words a fallback title keeps. */
export const FALLBACK_TITLE_WORDS = 8;

/** Every title source. */
export const TITLE_SOURCES: readonly TitleSource[] = Object.freeze(["fallback", "model", "user"]);

// Terminal escapes: OSC (ESC ] ... BEL or ESC \, see `withoutOsc`) and CSI (ESC [ params
// intermediates final).
// deno-lint-ignore no-control-regex
const CSI = /\u001b\[[0-?]*[ -/]*[@-~]/g;
// C0 controls except tab/newline/carriage return (whitespace is collapsed later), DEL and C1,
// zero-width and bidirectional formatting characters, word joiners and the byte order mark.
const INVISIBLE =
  // deno-lint-ignore no-control-regex
  /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]/g;

/**
 * `text` without its OSC sequences: each `ESC ]` up to the nearest BEL or `ESC \` after it, as
 * the regular expression `/\u001b\][\s\S]*?(?:\u0007|\u001b\\)/g` removes them, in one pass. (That
 * expression, run by a backtracking engine, scans to the end of the text from every unterminated
 * `ESC ]`: quadratic time, minutes for a crafted title or message of a few hundred KB.) An
 * `ESC ]` with no terminator after it ends the removal: no later one has a terminator either.
 */
function withoutOsc(text: string): string {
  let start = text.indexOf("\u001b]");
  if (start < 0) return text;
  let kept = "";
  let from = 0;
  // The next BEL and `ESC \\` at or after a position, found again only once passed (each search
  // scans forward from the last, so all of them together read the text once).
  let bel = -2;
  let st = -2;
  while (start >= 0) {
    const after = start + 2;
    if (bel !== -1 && bel < after) bel = text.indexOf("\u0007", after);
    if (st !== -1 && st < after) st = text.indexOf("\u001b\\", after);
    const end = bel < 0 ? (st < 0 ? -1 : st + 2) : st < 0 || bel < st ? bel + 1 : st + 2;
    if (end < 0) break;
    kept += text.slice(from, start);
    from = end;
    start = text.indexOf("\u001b]", end);
  }
  return from === 0 ? text : kept + text.slice(from);
}

function utf8Length(codePoint: number): number {
  return codePoint < 0x80 ? 1 : codePoint < 0x800 ? 2 : codePoint < 0x10000 ? 3 : 4;
}

/**
 * Normalizes title text: removes terminal escape sequences and invisible or control
 * characters, collapses whitespace runs to one space, trims, then keeps whole code points up
 * to `maxBytes` UTF-8 bytes and trims again.
 *
 * @param text The raw text.
 * @param maxBytes The UTF-8 byte limit; default 120.
 * @returns The normalized text, possibly empty.
 *
 * @example
 * ```ts
 * import { normalizeTitle } from "./title.ts";
 * normalizeTitle("\u001b[31m Hello\n world\u001b[0m"); // "Hello world"
 * ```
 */
export function normalizeTitle(text: string, maxBytes: number = TITLE_MAX_BYTES): string {
  const clean = withoutOsc(text)
    .replace(CSI, "")
    .replace(INVISIBLE, "")
    .replace(/\s+/g, " ")
    .trim();
  let bytes = 0;
  let end = 0;
  for (const character of clean) {
    bytes += utf8Length(character.codePointAt(0) ?? 0);
    if (bytes > maxBytes) break;
    end += character.length;
  }
  return end === clean.length ? clean : clean.slice(0, end).trim();
}

function isStrictlyIncreasing(values: readonly number[]): boolean {
  for (let i = 1; i < values.length; i++) {
    if ((values[i] as number) <= (values[i - 1] as number)) return false;
  }
  return true;
}

/**
 * The schema of a stored title: non-empty `text` that `normalizeTitle` leaves unchanged (so at
 * most 120 UTF-8 bytes, no control characters, no edge or doubled whitespace), a known
 * `source`, strictly increasing non-negative safe-integer `messageIndices` (empty allowed) and
 * an optional `model` with string `provider` and `id`. Extra fields pass through.
 */
export const SessionTitleSchema: RecordSchema<SessionTitle> = v.looseObject({
  text: v.pipe(
    v.string(),
    v.check(
      // Longer than the limit in UTF-16 units is longer in UTF-8 bytes: refused unnormalized.
      (text) => text !== "" && text.length <= TITLE_MAX_BYTES && normalizeTitle(text) === text,
      "text must be non-empty normalized text (no control characters, no edge or doubled whitespace, at most 120 UTF-8 bytes)",
    ),
  ),
  source: v.picklist(TITLE_SOURCES),
  messageIndices: v.pipe(
    v.array(
      v.pipe(
        v.number(),
        v.safeInteger("message index must be a safe integer"),
        v.minValue(0, "message index must not be negative"),
      ),
    ),
    v.check((indices) => isStrictlyIncreasing(indices), "message indices must strictly increase"),
  ),
  model: v.optional(v.looseObject({ provider: v.string(), id: v.string() })),
});

/**
 * Printable ASCII words separated by single spaces: text that `normalizeTitle` leaves unchanged
 * when it is at most `TITLE_MAX_BYTES` long (one byte per character), checked without it.
 */
const PLAIN_TITLE = /^[!-~]+(?: [!-~]+)*$/;

/**
 * True when `value` is a stored title of the plain shape JSON gives (an object, a dense array),
 * checked by hand with the rules of `SessionTitleSchema` at a fraction of its cost. False means
 * only "not accepted here": callers then run the schema, which decides and names the field. A
 * test damages titles at random and checks that this never accepts what the schema rejects.
 */
export function isPlainValidTitle(value: unknown): value is SessionTitle {
  if (!isRecord(value)) return false;
  const { text, source, messageIndices, model } = value;
  if (typeof text !== "string" || text === "" || text.length > TITLE_MAX_BYTES) return false;
  if (!PLAIN_TITLE.test(text) && normalizeTitle(text) !== text) return false;
  if (!(TITLE_SOURCES as readonly unknown[]).includes(source)) return false;
  if (!Array.isArray(messageIndices)) return false;
  let previous = -1;
  for (let i = 0; i < messageIndices.length; i++) {
    const index: unknown = messageIndices[i];
    if (!isSafeNonNegative(index) || index <= previous) return false;
    previous = index;
  }
  return model === undefined ||
    (isRecord(model) && typeof model.provider === "string" && typeof model.id === "string");
}

/**
 * True when `value` is a valid stored title: an object whose `text` is a non-empty string that
 * `normalizeTitle` leaves unchanged (so at most `TITLE_MAX_BYTES` UTF-8 bytes), whose `source` is
 * one of `TITLE_SOURCES`, whose `messageIndices` are safe non-negative integers in strictly
 * increasing order (empty allowed), and whose `model`, when present, has string `provider` and
 * `id`. Other keys are allowed.
 */
export function isValidTitle(value: unknown): value is SessionTitle {
  return isPlainValidTitle(value) || v.is(SessionTitleSchema, value);
}

/** Options of `parseSessionTitle`. */
export interface ParseSessionTitleOptions {
  /** The file the title came from, when known. */
  readonly file?: string | undefined;
  /** The JSON path of the title; default `"title"`. */
  readonly path?: string | undefined;
}

/**
 * Validates a title and returns it (the same object).
 *
 * @param value The title to check.
 * @param options Where the value came from, for error reports.
 * @returns `value`, typed.
 * @throws {SessionFormatError} Naming the offending field, such as `header.title.text`.
 */
export function parseSessionTitle(
  value: unknown,
  options: ParseSessionTitleOptions = {},
): SessionTitle {
  checkSchema(SessionTitleSchema, value, "Invalid session title", {
    file: options.file,
    path: options.path ?? "title",
  });
  return value as SessionTitle;
}

/**
 * The text a message contributes to title derivation: a user message's string content, or its
 * text blocks joined with `\n` (images are ignored). `undefined` for other roles.
 */
export function titleTextOf(message: Message): string | undefined {
  if (message.role !== "user") return undefined;
  if (typeof message.content === "string") return message.content;
  let text: string | undefined;
  for (const block of message.content) {
    if (block.type === "text") text = text === undefined ? block.text : `${text}\n${block.text}`;
  }
  return text ?? "";
}

/**
 * For a user message that was not validated (a fast listing reads lines unchecked): what keeps
 * `titleTextOf` from reading it (content that is neither a string nor an array, a block that is
 * not an object, a text block without string text), as its path below the message (`content`,
 * `content[2]`, `content[2].text`) and value; undefined when it can be read.
 */
export function malformedTitleText(
  message: { readonly content?: unknown },
): { readonly path: string; readonly value: unknown } | undefined {
  const content = message.content;
  if (typeof content === "string") return undefined;
  if (!Array.isArray(content)) return { path: "content", value: content };
  for (let i = 0; i < content.length; i++) {
    const block: unknown = content[i];
    if (typeof block !== "object" || block === null) return { path: `content[${i}]`, value: block };
    const { type, text } = block as { type?: unknown; text?: unknown };
    if (type === "text" && typeof text !== "string") {
      return { path: `content[${i}].text`, value: text };
    }
  }
  return undefined;
}

/** Every eligible user message (its text normalizes to something non-empty), in order. */
export function titleInputs(messages: readonly Message[]): TitleInput[] {
  const inputs: TitleInput[] = [];
  messages.forEach((message, index) => {
    const text = titleTextOf(message);
    if (text !== undefined && normalizeTitle(text) !== "") inputs.push({ index, text });
  });
  return inputs;
}

/** How much of a long message is looked at first for its fallback title. */
const TITLE_HEAD = 4096;

/**
 * The start of `text` that yields the same fallback title as all of it, so a message of megabytes
 * is not normalized whole for 96 bytes of title. Without an escape character in it, normalizing
 * is local to each character and whitespace run: the head normalizes to the start of what the
 * whole text does, and once that start holds more bytes than a fallback title keeps, the rest
 * cannot change them. Otherwise (an escape sequence may run past the head) the whole text.
 */
function titleHead(text: string): string {
  if (text.length <= TITLE_HEAD) return text;
  const head = text.slice(0, TITLE_HEAD);
  if (head.includes("\u001b")) return text;
  const clean = normalizeTitle(head, Number.POSITIVE_INFINITY);
  let bytes = 0;
  for (const character of clean) bytes += utf8Length(character.codePointAt(0) ?? 0);
  // Past the bytes kept by a margin: only the head's last run of characters may normalize
  // otherwise (a word or whitespace run the cut splits).
  return bytes > FALLBACK_TITLE_MAX_BYTES + 16 ? head : text;
}

/**
 * The fallback title of one eligible message: its first eight words, normalized to at most 96
 * UTF-8 bytes, with source `"fallback"` and the message's index.
 */
export function fallbackTitleOf(input: TitleInput): SessionTitle {
  const words = normalizeTitle(titleHead(input.text), FALLBACK_TITLE_MAX_BYTES)
    .split(" ")
    .slice(0, FALLBACK_TITLE_WORDS)
    .join(" ");
  return {
    text: normalizeTitle(words, FALLBACK_TITLE_MAX_BYTES),
    source: "fallback",
    messageIndices: [input.index],
  };
}

/**
 * The fallback title of `message`, at global index `index`, when it is an eligible user message
 * (its text normalizes to something non-empty); otherwise undefined.
 */
export function eligibleTitleOf(message: Message, index: number): SessionTitle | undefined {
  const text = titleTextOf(message);
  if (text === undefined) return undefined;
  // The fallback title is empty exactly when the text normalizes to nothing.
  const title = fallbackTitleOf({ index, text });
  return title.text === "" ? undefined : title;
}

/**
 * The fallback title of a history: derived from the first eligible user message, or
 * `undefined` when there is none. Computed on read and never stored in the header (index.json
 * records it as derived data, see `RoundIndex.fallbackTitle`).
 *
 * @example
 * ```ts
 * import { fallbackTitle } from "./title.ts";
 * fallbackTitle([{ role: "user", content: "Fix the failing build please", timestamp: 0 }]);
 * // { text: "Fix the failing build please", source: "fallback", messageIndices: [0] }
 * ```
 */
export function fallbackTitle(messages: readonly Message[]): SessionTitle | undefined {
  for (let index = 0; index < messages.length; index++) {
    const title = eligibleTitleOf(messages[index] as Message, index);
    if (title !== undefined) return title;
  }
  return undefined;
}
