import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { LineWriter } from "../src/loop/line_writer.ts";
import { runsOf } from "./_soak.ts";

const encoder = new TextEncoder();

/** What the writer must produce: each line encoded by `TextEncoder`, then a newline. */
function expected(lines: readonly string[]): { bytes: Uint8Array; ends: number[] } {
  const ends: number[] = [];
  let end = 0;
  for (const line of lines) {
    end += encoder.encode(line).length + 1;
    ends.push(end);
  }
  return { bytes: encoder.encode(lines.map((line) => `${line}\n`).join("")), ends };
}

function written(
  lines: readonly string[],
  capacity: number,
): { bytes: Uint8Array; ends: number[] } {
  const writer = new LineWriter(capacity);
  const ends = lines.map((line) => writer.push(line));
  assert.equal(writer.length, ends.at(-1) ?? 0);
  return { bytes: writer.bytes(), ends };
}

test("LineWriter: lines of one- to four-byte characters, each end offset as TextEncoder counts", () => {
  const lines = [
    '{"role":"user","content":"plain"}',
    '{"text":"Übersicht"}', // two bytes
    '{"text":"✓ done — ok"}', // three bytes
    '{"text":"🙂🙂"}', // four bytes (surrogate pairs)
    "",
    JSON.stringify({ lone: "\ud800" }), // JSON.stringify escapes a lone surrogate
  ];
  for (const capacity of [0, 1, 7, 64, 4096]) {
    assert.deepEqual(written(lines, capacity), expected(lines), `capacity ${capacity}`);
  }
  // Exact figures, not only agreement with the encoder: 5 + 1 newline, then "é" is two bytes.
  const writer = new LineWriter();
  assert.equal(writer.push("abcde"), 6);
  assert.equal(writer.push("é"), 9);
  assert.equal(writer.push("🙂"), 14);
  assert.deepEqual([...writer.bytes()], [
    97,
    98,
    99,
    100,
    101,
    10,
    0xc3,
    0xa9,
    10,
    0xf0,
    0x9f,
    0x99,
    0x82,
    10,
  ]);
});

test("LineWriter: a line of multi-byte characters longer than the room left grows the buffer mid-line", () => {
  // 3,000 three-byte characters into 100 bytes: the encoder stops on a character boundary, the
  // writer grows and encodes the rest; a surrogate pair is never split across the two tries.
  for (const line of ["✓".repeat(3000), "a🙂".repeat(1500), "🙂".repeat(999) + "x"]) {
    assert.deepEqual(written([line], 100), expected([line]));
    assert.deepEqual(written(["xyz", line, "é"], 5), expected(["xyz", line, "é"]));
  }
});

test("LineWriter: a lone surrogate is encoded as TextEncoder does (U+FFFD)", () => {
  const lines = ["a\ud800b", "\udc00", "x\ud83d"];
  assert.deepEqual(written(lines, 2), expected(lines));
  assert.deepEqual([...written(["\ud800"], 0).bytes], [0xef, 0xbf, 0xbd, 10]);
});

test("LineWriter: bytes() taken earlier stays as it was after later pushes grow the buffer", () => {
  const writer = new LineWriter(4);
  writer.push("ab");
  const early = writer.bytes();
  const copy = early.slice();
  for (let i = 0; i < 50; i++) writer.push("✓".repeat(i * 10));
  assert.deepEqual(early, copy);
  assert.equal(writer.bytes().length, writer.length);
  assert.deepEqual(new LineWriter(1024).bytes(), new Uint8Array(0));
});

test("LineWriter: any strings at any starting capacity give TextEncoder's bytes and offsets", () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(fc.string(), fc.string({ unit: "grapheme" }), fc.string({ unit: "binary" })),
      ),
      fc.nat(300),
      (lines, capacity) => {
        assert.deepEqual(written(lines, capacity), expected(lines));
      },
    ),
    { numRuns: runsOf(500) },
  );
});
