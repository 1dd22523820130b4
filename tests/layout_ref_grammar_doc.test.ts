// The grammar's module doc states the length limits the code applies: UTF-8 bytes (what a
// filesystem limits), with the values of MAX_REFERENCE_LENGTH and MAX_SEGMENT_LENGTH. The
// behaviour itself is tested in layout_refs.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { MAX_REFERENCE_LENGTH, MAX_SEGMENT_LENGTH, parseLogicalReference } from "../layout.ts";

async function moduleDoc(): Promise<string> {
  const source = await readFile(new URL("../src/layout/ref_grammar.ts", import.meta.url), "utf8");
  const end = source.indexOf("*/");
  assert.ok(source.startsWith("/**") && end > 0, "ref_grammar.ts opens with its module doc");
  return source.slice(0, end).replace(/\n \* ?/g, " ").replace(/\s+/g, " ");
}

test("the grammar's module doc gives the length limits in UTF-8 bytes, as the code counts them", async () => {
  const doc = await moduleDoc();
  const limits = /at most (\d+) UTF-8 bytes, a segment at most (\d+)/.exec(doc);
  assert.ok(limits !== null, `the limits are stated in UTF-8 bytes: ${doc}`);
  assert.equal(Number(limits[1]), MAX_REFERENCE_LENGTH);
  assert.equal(Number(limits[2]), MAX_SEGMENT_LENGTH);
  assert.doesNotMatch(doc, /\d+ characters/);
  // What the doc says: fewer characters than the limit, more bytes, is refused.
  const reference = `session:/${"é/".repeat(1400)}a`;
  assert.ok(reference.length < MAX_REFERENCE_LENGTH);
  assert.throws(() => parseLogicalReference(reference));
});
