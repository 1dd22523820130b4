// The JSON the library prints or hashes as the engine's Python `json.dumps` writes it, and the
// order Python's `sorted()` gives strings. Expected texts are Python 3's own output for the same
// values (`json.dumps(v, indent=2, sort_keys=True)`, `json.dumps(v, sort_keys=True,
// separators=(",", ":"))`, `sorted(...)`).
import { test } from "node:test";
import assert from "node:assert/strict";
import { engineJson, nestsDeeper } from "../src/layout/_engine_json.ts";
import { compareCodePoints } from "../src/layout/_py_text.ts";

const VALUE = {
  b: [1, { z: null, a: true }],
  "10": "x",
  "9": [],
  "\u00e9": {},
  "\uFF01": "\u00e9\u{1F600}",
  "\u{1F600}": { k: [[]] },
  a: -2.5,
};

test("engineJson writes indented, key-sorted, ASCII-escaped JSON as json.dumps prints it", () => {
  const python = '{\n  "10": "x",\n  "9": [],\n  "a": -2.5,\n  "b": [\n    1,\n    {\n' +
    '      "a": true,\n      "z": null\n    }\n  ],\n  "\\u00e9": {},\n' +
    '  "\\uff01": "\\u00e9\\ud83d\\ude00",\n  "\\ud83d\\ude00": {\n    "k": [\n      []\n' +
    "    ]\n  }\n}";
  assert.equal(engineJson(VALUE, 2), python);
});

test("engineJson writes compact key-sorted JSON as the engine hashes it", () => {
  const python = '{"10":"x","9":[],"a":-2.5,"b":[1,{"a":true,"z":null}],"\\u00e9":{},' +
    '"\\uff01":"\\u00e9\\ud83d\\ude00","\\ud83d\\ude00":{"k":[[]]}}';
  assert.equal(engineJson(VALUE), python);
  assert.equal(engineJson([]), "[]");
  assert.equal(engineJson({}), "{}");
  assert.equal(engineJson("plain"), '"plain"');
});

test("engineJson writes levels past indentedLevels on one line, as valid JSON", () => {
  const depth = 1_000;
  let deep: unknown = { leaf: 1 };
  for (let i = 0; i < depth; i++) deep = [deep];
  const text = engineJson({ deep }, 2, 3);
  assert.equal(JSON.stringify(JSON.parse(text)), JSON.stringify({ deep }));
  // Three levels broken and indented; the rest on the line of the third.
  assert.equal(text.split("\n").length, 7);
  assert.ok(text.startsWith('{\n  "deep": [\n    [\n      [[['), text.slice(0, 40));
  assert.ok(text.endsWith("]]]\n    ]\n  ]\n}"), text.slice(-40));
});

test("compareCodePoints orders strings as Python's sorted() does", () => {
  const values = ["\u{1F600}", "\uFFFF", "b", "\uDC80", "\uE000", "a", "ab", "\u{1F600}a"];
  assert.deepEqual(values.slice().sort(compareCodePoints), [
    "a",
    "ab",
    "b",
    "\uDC80",
    "\uE000",
    "\uFFFF",
    "\u{1F600}",
    "\u{1F600}a",
  ]);
  assert.equal(compareCodePoints("same", "same"), 0);
  assert.ok(compareCodePoints("\u{1F600}", "\uFF01") > 0);
  assert.ok(compareCodePoints("10", "9") < 0);
});

test("nestsDeeper counts the levels of arrays and objects, the value itself level 1", () => {
  assert.equal(nestsDeeper(1, 0), false);
  assert.equal(nestsDeeper([], 1), false);
  assert.equal(nestsDeeper([], 0), true);
  assert.equal(nestsDeeper({ a: [{ b: [] }] }, 4), false);
  assert.equal(nestsDeeper({ a: [{ b: [] }] }, 3), true);
  assert.equal(nestsDeeper({ a: 1, b: [2, [3]] }, 2), true);
});
