// The soak settings of tests/_soak.ts: a mistyped factor fails loudly, and a soak checks the seeds
// of a normal run before the ones it adds.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  isAddedSeed,
  parseSoakFactor,
  parseSoakFrom,
  runsOf,
  seedsAfter,
  seedsOf,
} from "./_soak.ts";

test("LOOP_SOAK is a positive integer, 1 when unset or empty; anything else is refused", () => {
  assert.equal(parseSoakFactor(undefined), 1);
  assert.equal(parseSoakFactor(""), 1);
  assert.equal(parseSoakFactor("1"), 1);
  assert.equal(parseSoakFactor("25"), 25);
  for (
    const text of ["0", "-2", "1.5", "2e3", " 3", "3 ", "0x10", "lots", "99999999999999999999"]
  ) {
    assert.throws(() => parseSoakFactor(text), /LOOP_SOAK must be an integer of at least 1/, text);
  }
});

test("LOOP_SOAK_FROM is an integer of at least 0, 0 when unset", () => {
  assert.equal(parseSoakFrom(undefined), 0);
  assert.equal(parseSoakFrom("0"), 0);
  assert.equal(parseSoakFrom("4000"), 4000);
  for (const text of ["-1", "1.5", "x"]) {
    assert.throws(() => parseSoakFrom(text), /LOOP_SOAK_FROM must be an integer of at least 0/);
  }
});

test("a normal run takes the seeds and runs a test writes; a soak adds new ones after them", () => {
  assert.deepEqual(seedsOf(101, 3, 1, 0), [101, 102, 103]);
  assert.deepEqual(seedsOf(101, 2, 3, 0), [101, 102, 1_000_101, 1_000_102, 1_000_103, 1_000_104]);
  // Another offset explores other seeds; the normal ones come first whatever it is.
  assert.deepEqual(seedsOf(1, 2, 2, 500), [1, 2, 1_000_501, 1_000_502]);
  assert.deepEqual(seedsAfter([0, 1, 7], 1, 0), [0, 1, 7]);
  assert.deepEqual(seedsAfter([0, 7], 2, 0), [0, 7, 1_000_000, 1_000_001]);
  assert.deepEqual(seedsAfter([0, 7], 2, 9), [0, 7, 1_000_009, 1_000_010]);
  assert.deepEqual(seedsOf(101, 2, 3, 0).map(isAddedSeed), [false, false, true, true, true, true]);
  assert.deepEqual(seedsAfter([0, 7], 2, 9).map(isAddedSeed), [false, false, true, true]);
  assert.equal(runsOf(150, 1), 150);
  assert.equal(runsOf(150, 4), 600);
});
