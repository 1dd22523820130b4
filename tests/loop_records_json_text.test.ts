// Message lines are written and read whatever the length of their strings: a message holding a
// very long string is written through JSON.stringify's general path (the fast path of Deno 2.9
// ends the process past 256 MiB), to the same text, and a line longer than 64 MiB is decoded in
// pieces (the runtimes refuse to decode about 512 MiB at once), to the same text.
import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { holdsLongString, messageJson } from "../src/loop/records/_json_text.ts";
import { childPath, MAX_MESSAGE_NESTING } from "../src/loop/records/_validation.ts";
import { preview } from "../src/loop/errors.ts";
import { decodeLine } from "../src/loop/storage.ts";
import { runsOf } from "./_soak.ts";

test("holdsLongString finds a long string wherever JSON writes it, and only there", () => {
  const long = "x".repeat(11);
  assert.equal(holdsLongString(long, 10), true);
  assert.equal(holdsLongString("x".repeat(10), 10), false);
  assert.equal(holdsLongString({ a: [1, { b: [null, long] }] }, 10), true);
  assert.equal(holdsLongString({ a: [1, { b: [null, "short"] }], n: 12345678901 }, 10), false);
  // A key is written too (and the fast path fails on a long one as on a long value).
  assert.equal(holdsLongString({ [long]: 1 }, 10), true);
  assert.equal(holdsLongString({ a: { short: 1 } }, 10), false);
  // An object JSON writes its own way is never walked: the general path writes it.
  assert.equal(holdsLongString(Object.create({ inherited: long }), 10), true);
  assert.equal(holdsLongString({ at: new Date(0) }, 10), true);
  assert.equal(holdsLongString([new String("short")], 10), true);
  assert.equal(holdsLongString(Object.create(null), 10), false);
  // A cycle ends its branch (JSON.stringify refuses it, and so does messageJson).
  const cyclic: Record<string, unknown> = { text: "short" };
  cyclic.self = cyclic;
  cyclic.other = [cyclic, long];
  assert.equal(holdsLongString(cyclic, 10), true);
  delete cyclic.other;
  assert.equal(holdsLongString(cyclic, 10), false);
  assert.throws(() => messageJson(cyclic, 10), TypeError);
  // Within MAX_MESSAGE_NESTING levels it is found; past them nothing is looked for (such a
  // message is refused anyway).
  let deep: unknown = long;
  for (let i = 0; i < MAX_MESSAGE_NESTING; i++) deep = [deep];
  assert.equal(holdsLongString(deep, 10), true);
  assert.equal(holdsLongString([deep], 10), false);
});

test("messageJson writes the text JSON.stringify writes, through either path", () => {
  fc.assert(
    fc.property(fc.jsonValue({ maxDepth: 4 }), fc.integer({ min: 0, max: 12 }), (value, limit) => {
      assert.equal(messageJson(value, limit), JSON.stringify(value));
      assert.equal(messageJson(value), JSON.stringify(value));
    }),
    { numRuns: runsOf(300) },
  );
  // What JSON leaves out or converts is left out or converted the same way.
  const boxed = { s: new String("boxed"), n: new Number(2), d: new Date(0), m: new Map() };
  assert.equal(messageJson(boxed, 10), JSON.stringify(boxed));
  const odd = {
    a: undefined,
    f: () => 1,
    d: new Date(0),
    n: NaN,
    s: "x".repeat(20),
    arr: [undefined],
  };
  assert.equal(messageJson(odd, 10), JSON.stringify(odd));
});

test("decodeLine in pieces gives the text of a decode in one call", () => {
  const encoder = new TextEncoder();
  const samples = [
    encoder.encode('\uFEFF{"text":"h\u00e9llo \u4e16\u754c \u{1F600}"}'),
    new Uint8Array([0x7b, 0xe4, 0xb8, 0x22, 0xf0, 0x9f, 0x98, 0x80, 0xff, 0xc3]),
  ];
  const whole = new TextDecoder("utf-8", { ignoreBOM: true });
  for (const bytes of samples) {
    for (let piece = 1; piece <= 8; piece++) {
      assert.equal(decodeLine(bytes, piece), whole.decode(bytes), `pieces of ${piece}`);
    }
  }
  fc.assert(
    fc.property(
      fc.uint8Array({ maxLength: 64 }),
      fc.integer({ min: 1, max: 9 }),
      (bytes, piece) => {
        assert.equal(decodeLine(bytes, piece), whole.decode(bytes));
      },
    ),
    { numRuns: runsOf(500) },
  );
  assert.equal(decodeLine(samples[0] as Uint8Array).charCodeAt(0), 0xfeff); // a BOM is kept
});

test("an error naming a value of any length shows its first characters", () => {
  const long = "x".repeat(5000);
  assert.equal(preview(long), `"${"x".repeat(76)}...`);
  assert.equal(preview({ id: long }).length, 80);
  assert.equal(preview("short"), '"short"');
  assert.equal(preview(new String("boxed")), '"boxed"');
  // A path through a long key names it by its first characters.
  assert.equal(childPath("details", long), `details["${"x".repeat(77)}..."]`);
});

test("a Proxy whose prototype cannot be read is written as JSON.stringify writes it", () => {
  const proxy = new Proxy({ a: 1 }, {
    getPrototypeOf() {
      throw new Error("no prototype");
    },
  });
  const message = { details: proxy };
  assert.equal(messageJson(message), JSON.stringify(message));
  assert.equal(messageJson(message, 0), JSON.stringify(message));
});
