import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  FALLBACK_TITLE_MAX_BYTES,
  fallbackTitle,
  fallbackTitleOf,
  isValidTitle,
  type Message,
  normalizeTitle,
  parseSessionTitle,
  titleInputs,
  titleTextOf,
} from "../src/loop/records/mod.ts";
import { assistant, throwsAt, user } from "./loop_records_fixtures.ts";
import { runsOf } from "./_soak.ts";

const bytes = (text: string) => new TextEncoder().encode(text).length;

test("normalizeTitle removes terminal escapes, controls and invisible characters", () => {
  assert.equal(normalizeTitle("\u001b[31m Hello\n world\u001b[0m\u202e"), "Hello world");
  assert.equal(normalizeTitle("\u001b]0;hidden\u0007Visible"), "Visible");
  assert.equal(normalizeTitle("\u001b]8;;http://x\u001b\\link\u001b]8;;\u001b\\"), "link");
  assert.equal(normalizeTitle("a\u0000b\u0007c\u007fd\u0085e\u009ff"), "abcdef");
  assert.equal(normalizeTitle("\ufeffzero\u200bwidth\u200f\u2060join\u206f"), "zerowidthjoin");
  assert.equal(normalizeTitle("bidi\u202aembed\u202e"), "bidiembed");
});

test("normalizeTitle collapses whitespace and trims", () => {
  assert.equal(normalizeTitle("  many \t\r\n  spaces\u00a0\u3000here  "), "many spaces here");
  assert.equal(normalizeTitle(" \n "), "");
});

test("normalizeTitle keeps whole code points within the byte limit", () => {
  assert.equal(normalizeTitle("你好🙂", 8), "你好");
  assert.equal(normalizeTitle("你好🙂", 10), "你好🙂");
  assert.equal(normalizeTitle("ab cd", 3), "ab");
  assert.equal(normalizeTitle("abc", 0), "");
  const long = "é".repeat(100);
  const cut = normalizeTitle(long);
  assert.equal(cut, "é".repeat(60));
  assert.equal(bytes(cut), 120);
});

test("a valid title has normalized text, a known source and increasing indices", () => {
  assert.equal(isValidTitle({ text: "Task", source: "user", messageIndices: [] }), true);
  assert.equal(isValidTitle({ text: "Task", source: "model", messageIndices: [0, 3, 9] }), true);
  assert.equal(
    isValidTitle({ text: "Task", source: "fallback", messageIndices: [0], extra: 1 }),
    true,
  );
  assert.equal(isValidTitle({ text: "x".repeat(120), source: "user", messageIndices: [] }), true);
  for (
    const bad of [
      { text: "Task", source: "model", messageIndices: [2, 0] },
      { text: "Task", source: "model", messageIndices: [1, 1] },
      { text: "Task", source: "model", messageIndices: [-1] },
      { text: "Task", source: "model", messageIndices: [1.5] },
      { text: "Task", source: "model", messageIndices: "0" },
      { text: "Task", source: "model" },
      { text: "", source: "user", messageIndices: [] },
      { text: " Task", source: "user", messageIndices: [] },
      { text: "Ta  sk", source: "user", messageIndices: [] },
      { text: "Ta\nsk", source: "user", messageIndices: [] },
      { text: "Ta\u0007sk", source: "user", messageIndices: [] },
      { text: "x".repeat(121), source: "user", messageIndices: [] },
      { text: 5, source: "user", messageIndices: [] },
      { text: "Task", source: "auto", messageIndices: [] },
      null,
      "Task",
      [],
    ]
  ) {
    assert.equal(isValidTitle(bad), false, JSON.stringify(bad));
  }
});

test("a title's model identity is optional but needs string provider and id", () => {
  const base = { text: "T", source: "model", messageIndices: [0] };
  assert.equal(isValidTitle({ ...base, model: { provider: "p", id: "m" } }), true);
  assert.equal(isValidTitle({ ...base, model: { provider: "p" } }), false);
  assert.equal(isValidTitle({ ...base, model: { provider: 1, id: "m" } }), false);
  assert.equal(isValidTitle({ ...base, model: null }), false);
});

test("parseSessionTitle names the offending field", () => {
  const base = { text: "T", source: "model", messageIndices: [0] };
  assert.equal(parseSessionTitle(base), base);
  throwsAt(() => parseSessionTitle({ ...base, text: "T " }), "title.text");
  throwsAt(() => parseSessionTitle({ ...base, source: "x" }), "title.source");
  throwsAt(() => parseSessionTitle({ ...base, messageIndices: [3, 1] }), "title.messageIndices");
  throwsAt(
    () => parseSessionTitle({ ...base, messageIndices: [0, -1] }),
    "title.messageIndices[1]",
  );
  throwsAt(() => parseSessionTitle({ ...base, model: { provider: "p", id: 2 } }), "title.model.id");
  const error = throwsAt(
    () => parseSessionTitle(7, { file: "f", path: "header.title" }),
    "header.title",
  );
  assert.equal(error.file, "f");
});

test("titleTextOf reads a user message's text and ignores images", () => {
  assert.equal(titleTextOf(user("plain") as unknown as Message), "plain");
  assert.equal(
    titleTextOf(user([
      { type: "text", text: "one" },
      { type: "image", data: "AA==", mimeType: "image/png" },
      { type: "text", text: "two" },
    ]) as unknown as Message),
    "one\ntwo",
  );
  assert.equal(
    titleTextOf(user([{ type: "image", data: "", mimeType: "" }]) as unknown as Message),
    "",
  );
  assert.equal(titleTextOf(assistant() as unknown as Message), undefined);
});

test("titleInputs lists eligible user messages with their raw text", () => {
  const messages = [
    user([{ type: "image", data: "", mimeType: "image/png" }]),
    assistant(),
    user("  \n "),
    user("  First   real\nquestion "),
    user("second"),
  ] as unknown as Message[];
  assert.deepEqual(titleInputs(messages), [
    { index: 3, text: "  First   real\nquestion " },
    { index: 4, text: "second" },
  ]);
});

test("the fallback title keeps the first eight words of the first eligible message", () => {
  const messages = [
    user([{ type: "image", data: "", mimeType: "image/png" }]),
    user("one two three four five six seven eight nine"),
  ] as unknown as Message[];
  const before = structuredClone(messages);
  const title = fallbackTitle(messages);
  assert.deepEqual(title, {
    text: "one two three four five six seven eight",
    source: "fallback",
    messageIndices: [1],
  });
  assert.equal(isValidTitle(title), true);
  assert.deepEqual(messages, before);
});

test("the fallback title is at most 96 bytes and undefined without an eligible message", () => {
  const title = fallbackTitleOf({ index: 0, text: "word".repeat(40) + " tail" });
  assert.ok(bytes(title.text) <= 96);
  assert.equal(title.text, "word".repeat(24));
  assert.equal(fallbackTitle([assistant(), user(" ")] as unknown as Message[]), undefined);
  assert.equal(fallbackTitle([]), undefined);
});

test("the fallback title of a long message is that of its whole text, read from its start", () => {
  // The whole text normalized, then cut: what the title is by definition.
  const whole = (text: string): string =>
    normalizeTitle(
      normalizeTitle(text, FALLBACK_TITLE_MAX_BYTES).split(" ").slice(0, 8).join(" "),
      FALLBACK_TITLE_MAX_BYTES,
    );
  const piece = fc.constantFrom(
    "word",
    "é",
    "😀",
    " ",
    "\n\t ",
    "\u200b",
    "\u001b[31m",
    "\u001b]8;;https://example.com/",
    "\u0007",
    "x".repeat(700),
    " ".repeat(900),
    "\u200b".repeat(1500),
  );
  fc.assert(
    fc.property(fc.array(piece, { maxLength: 60 }), fc.nat(5000), (pieces, pad) => {
      const text = " ".repeat(pad % 7) + pieces.join("") + "tail ".repeat(pad % 1100);
      const title = fallbackTitleOf({ index: 0, text });
      assert.equal(title.text, whole(text), JSON.stringify(text.slice(0, 200)));
    }),
    { numRuns: runsOf(400) },
  );
  // A message of megabytes is titled from its start.
  const huge = "Fix the flaky login test " + "and more ".repeat(2_000_000);
  assert.equal(
    fallbackTitleOf({ index: 0, text: huge }).text,
    "Fix the flaky login test and more and",
  );
});

/** What `normalizeTitle` did with a regular expression for OSC sequences: the reference. */
function referenceNormalize(text: string): string {
  return text
    // deno-lint-ignore no-control-regex
    .replace(/\u001b\][\s\S]*?(?:\u0007|\u001b\\)/g, "")
    // deno-lint-ignore no-control-regex
    .replace(/\u001b\[[0-?]*[ -/]*[@-~]/g, "")
    .replace(
      // deno-lint-ignore no-control-regex
      /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]/g,
      "",
    )
    .replace(/\s+/g, " ")
    .trim();
}

test("normalizeTitle removes OSC sequences exactly as the regular expression of the title rules does", () => {
  // Text made of the characters that open, close and fill OSC and CSI sequences.
  const piece = fc.constantFrom("\u001b", "]", "[", "\u0007", "\\", "a", " ", "0", "m", "é");
  fc.assert(
    fc.property(fc.array(piece, { maxLength: 40 }), (pieces) => {
      const text = pieces.join("");
      assert.equal(normalizeTitle(text, Number.POSITIVE_INFINITY), referenceNormalize(text));
    }),
    { numRuns: runsOf(5000) },
  );
  assert.equal(normalizeTitle("a\u001b]0;x\u0007b\u001b]2;y\u001b\\c\u001b]z d"), "abc]z d");
});

test("unterminated OSC openers are kept, in a title of any length; a stored title past 120 units is refused", () => {
  // 200,000 characters of `ESC ]` with no terminator (a backtracking regular expression scans to
  // the end of the text from each of them; normalizeTitle reads the text once).
  const text = "\u001b]".repeat(100_000);
  assert.equal(normalizeTitle(text, Number.POSITIVE_INFINITY), "]".repeat(100_000));
  assert.equal(normalizeTitle(`x\u001b]0;t\u0007${text}`), "x" + "]".repeat(119));
  assert.equal(isValidTitle({ text, source: "user", messageIndices: [] }), false);
  const error = throwsAt(
    () => parseSessionTitle({ text, source: "user", messageIndices: [] }),
    "title.text",
  );
  assert.match(error.message, /at most 120 UTF-8 bytes/);
  assert.equal(
    fallbackTitle([user(`${text} hello`)] as unknown as Message[])?.text,
    "]".repeat(96),
  );
});
