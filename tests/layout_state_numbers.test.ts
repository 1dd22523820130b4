// updateSessionState keeps every number a change leaves alone byte for byte (the engine writes a
// float as `1.0`; an integer past 2^53 or `1e-07` would otherwise be rewritten), and writes the
// numbers a change sets as JSON.stringify writes them; every other byte is canonical JSON.
import { test } from "node:test";
import assert from "node:assert/strict";
import { updateSessionState } from "../layout.ts";
import { newRepo, newRoot, readJson, readText, writeText } from "./layout_fixtures.ts";

/** Number texts as an engine may write them, put in place of `"@name@"` placeholders. */
const RAW: Readonly<Record<string, string>> = {
  big: "1745073022123456789",
  one: "1.0",
  tiny: "1e-07",
  negZero: "-0.0",
  sci: "1E5",
  half: "2.50",
  neg: "-3.0e+2",
};

/** Canonical JSON (indent 2, ASCII-escaped) of `value` with its placeholders as raw numbers. */
function withNumbers(value: unknown): string {
  return JSON.stringify(value, null, 2)
    .replace(/"@(\w+)@"/g, (_, name: string) => RAW[name] as string)
    .replace(/[\u007f-\uffff]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

test("numbers an update leaves alone keep their text; the ones it sets are new", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const file = root.paths.stateJson;
  const initial = await readJson(fs, file);
  // Engine fields this library does not interpret, numbers nested in objects and arrays, a key
  // and a string that hold what looks like numbers and brackets.
  const template: Record<string, unknown> = {
    ...initial,
    started_ns: "@big@",
    cost_usd: "@one@",
    usage: { tokens: ["@one@", "@half@", { x: "@negZero@" }], ratio: "@tiny@" },
    "k\u00e9y [1.0]": { "1.5": "@sci@", note: 'a "1.0" \\ [2, {3}] \u00e9' },
    limits: ["@sci@", "@neg@"],
    budget: "@one@",
    zero: "@negZero@",
  };
  await writeText(fs, file, withNumbers(template));
  const state = await updateSessionState(fs, root.paths.dir, (s) => {
    s.iteration = 1; // set: 0 becomes 1
    s.budget = 12.5; // set to another value
    s.zero = 0; // -0.0 set to 0: another value, told apart from -0
    s.limits = [100000, -300, 7]; // replaced: the same value at the same place keeps its text
  }, { updatedAt: "2026-12-03T15:00:00Z" });
  const expected = {
    ...template,
    state_revision: 1,
    iteration: 1,
    limits: ["@sci@", "@neg@", 7],
    budget: 12.5,
    zero: 0,
    updated_at: "2026-12-03T15:00:00Z",
  };
  assert.equal(await readText(fs, file), withNumbers(expected));
  // The values the caller sees are JSON.parse's.
  const read = state as unknown as Record<string, unknown>;
  assert.equal(read.started_ns, Number(RAW.big));
  assert.equal(read.cost_usd, 1);
  // Another update keeps them again: only what it changes differs.
  await updateSessionState(fs, root.paths.dir, (s) => {
    s.iteration = 2;
  }, { updatedAt: "2026-12-03T15:00:01Z" });
  assert.equal(
    await readText(fs, file),
    withNumbers({
      ...expected,
      state_revision: 2,
      iteration: 2,
      updated_at: "2026-12-03T15:00:01Z",
    }),
  );
});

test("a number a change removes or moves is not kept at another path", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const file = root.paths.stateJson;
  const template: Record<string, unknown> = {
    ...await readJson(fs, file),
    samples: ["@one@", "@half@"],
    ratio: "@one@",
  };
  await writeText(fs, file, withNumbers(template));
  await updateSessionState(fs, root.paths.dir, (s) => {
    // A new first sample: the old ones move one place on, with values unlike what was there.
    s.samples = [3, 1, 2.5];
    delete s.ratio;
    s.moved = 1; // the value `ratio` had, at another path
  }, { updatedAt: "2026-12-03T15:00:00Z" });
  const { ratio: _, ...rest } = template;
  assert.equal(
    await readText(fs, file),
    withNumbers({
      ...rest,
      state_revision: 1,
      samples: [3, 1, 2.5],
      updated_at: "2026-12-03T15:00:00Z",
      moved: 1,
    }),
  );
});
