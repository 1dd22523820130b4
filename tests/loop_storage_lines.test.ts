import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256, sha256Hex } from "../src/port/sha256.ts";
import { CorruptSessionError } from "../src/loop/errors.ts";
import { forEachCommittedLine, type StorageMeta } from "../src/loop/storage.ts";
import { runsOf } from "./_soak.ts";

const DIR = "/session";
const encoder = new TextEncoder();

/** Writes `before + range + after` as messages.jsonl and returns meta for the committed range. */
async function logWith(
  fs: MemoryFs,
  before: string,
  range: string,
  after: string,
  messageCount: number,
): Promise<StorageMeta> {
  const rangeBytes = encoder.encode(range);
  await fs.writeFile(`${DIR}/messages.jsonl`, encoder.encode(before + range + after));
  return {
    format: "loop-session",
    version: 3,
    header: {} as StorageMeta["header"],
    generation: sha256Hex(rangeBytes),
    start: encoder.encode(before).length,
    bytes: rangeBytes.length,
    messageCount,
  };
}

const lineText = fc.array(fc.constantFrom("a", "é", "{}", "✓", "😀", "xyz", " "), {
  minLength: 1,
  maxLength: 6,
}).map((parts) => parts.join(""));

test("the committed range streams line by line, with offsets and text, whatever the chunk size", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(lineText, { maxLength: 12 }),
      fc.integer({ min: 1, max: 9 }),
      fc.string({ maxLength: 5 }),
      async (texts, chunkSize, tail) => {
        const fs = new MemoryFs();
        await fs.mkdir(DIR);
        const range = texts.map((t) => t + "\n").join("");
        // Bytes before the range (an older generation) and after it (an uncommitted tail).
        const meta = await logWith(fs, "old line\n", range, tail, texts.length);
        const seen: { index: number; offset: number; text: string; bytes: number[] }[] = [];
        const summary = await forEachCommittedLine(
          fs,
          DIR,
          meta,
          { sha256: portableSha256, chunkSize },
          (line) => seen.push({ ...line, bytes: [...line.bytes] }),
        );
        assert.equal(summary.lines, texts.length);
        let offset = 0;
        texts.forEach((text, index) => {
          const bytes = encoder.encode(text);
          assert.deepEqual(seen[index], { index, offset, text, bytes: [...bytes] });
          offset += bytes.length + 1;
        });
      },
    ),
    { numRuns: runsOf(300) },
  );
});

test("any bytes, invalid UTF-8 included, give each line the text it decodes to alone", async () => {
  // Sequences cut by a chunk boundary, truncated at a line's end or invalid must not swallow
  // or shift a newline, nor change what the line decodes to.
  const lineBytes = fc.array(
    fc.oneof(
      fc.integer({ min: 0, max: 255 }).filter((b) => b !== 10),
      fc.constantFrom(0xc3, 0xe2, 0x98, 0xf0, 0x9f, 0x80, 0xff, 0xed, 0xa0),
    ),
    { maxLength: 8 },
  );
  await fc.assert(
    fc.asyncProperty(
      fc.array(lineBytes, { minLength: 1, maxLength: 10 }),
      fc.constantFrom(1, 2, 3, 5, 8, 4096),
      async (lines, chunkSize) => {
        const fs = new MemoryFs();
        await fs.mkdir(DIR);
        const range = Uint8Array.from(lines.flatMap((line) => [...line, 10]));
        await fs.writeFile(`${DIR}/messages.jsonl`, range);
        const meta: StorageMeta = {
          format: "loop-session",
          version: 3,
          header: {} as StorageMeta["header"],
          generation: sha256Hex(range),
          start: 0,
          bytes: range.length,
          messageCount: lines.length,
        };
        const seen: { text: string; bytes: number[] }[] = [];
        await forEachCommittedLine(
          fs,
          DIR,
          meta,
          { sha256: portableSha256, chunkSize },
          (line) => seen.push({ text: line.text, bytes: [...line.bytes] }),
        );
        // What each line's own bytes decode to, by a decoder of the test's (invalid sequences
        // become U+FFFD, a BOM is kept).
        const alone = new TextDecoder("utf-8", { ignoreBOM: true });
        assert.deepEqual(
          seen,
          lines.map((line) => ({ text: alone.decode(Uint8Array.from(line)), bytes: line })),
        );
      },
    ),
    { numRuns: runsOf(400) },
  );
});

test("a committed range that is cut short, does not end with a newline or holds more lines is corrupt", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(DIR);
  for (const chunkSize of [1, 3, 1024]) {
    const unterminated = await logWith(fs, "", "one\ntwo", "", 2);
    await assert.rejects(
      forEachCommittedLine(fs, DIR, unterminated, { sha256: portableSha256, chunkSize }, () => {}),
      (error: unknown) =>
        error instanceof CorruptSessionError && /do not end with a newline/.test(error.message),
    );
    const short = await logWith(fs, "old\n", "one\ntwo\n", "", 2);
    await fs.writeFile(`${DIR}/messages.jsonl`, encoder.encode("old\none\ntw"));
    await assert.rejects(
      forEachCommittedLine(fs, DIR, short, { sha256: portableSha256, chunkSize }, () => {}),
      (error: unknown) =>
        error instanceof CorruptSessionError && error.offset === 10 &&
        /shorter than its committed range \(10 bytes, committed range ends at 12\)/.test(
          error.message,
        ),
    );
    // A file that ends before the range even starts names its real size.
    await fs.writeFile(`${DIR}/messages.jsonl`, encoder.encode("ol"));
    await assert.rejects(
      forEachCommittedLine(fs, DIR, short, { sha256: portableSha256, chunkSize }, () => {}),
      (error: unknown) =>
        error instanceof CorruptSessionError && error.offset === 2 &&
        /\(2 bytes, committed range ends at 12\)/.test(error.message),
    );
    const extra = await logWith(fs, "", "one\ntwo\nthree\n", "", 2);
    await assert.rejects(
      forEachCommittedLine(fs, DIR, extra, { sha256: portableSha256, chunkSize }, () => {}),
      (error: unknown) =>
        error instanceof CorruptSessionError && /more lines than the 2/.test(error.message),
    );
  }
});

test("a line is its exact characters: a leading BOM is kept and a long line spans many chunks", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(DIR);
  const long = "x".repeat(50);
  const meta = await logWith(fs, "", "\uFEFF{}\n" + long + "\nend\n", "", 3);
  for (const chunkSize of [1, 4, 7, 64]) {
    const texts: string[] = [];
    await forEachCommittedLine(
      fs,
      DIR,
      meta,
      { sha256: portableSha256, chunkSize },
      (line) => texts.push(line.text),
    );
    assert.deepEqual(texts, ["\uFEFF{}", long, "end"], `chunk size ${chunkSize}`);
  }
});
