import { test } from "node:test";
import assert from "node:assert/strict";
import { numberOption, parseArgs, UsageError } from "../src/cli/args.ts";

const SPEC = { to: "value", dir: "value", before: "value", json: "boolean" } as const;

test("options take values in both spellings; positionals and -- pass through", () => {
  const parsed = parseArgs(["id", "--to", "out", "--dir=d", "--json", "--", "--to"], SPEC);
  assert.deepEqual(parsed.positionals, ["id", "--to"]);
  assert.deepEqual([...parsed.values], [["to", "out"], ["dir", "d"]]);
  assert.deepEqual([...parsed.flags], ["json"]);
  // A value that starts with a dash is given with `=`; a negative number is a value.
  assert.equal(parseArgs(["--dir=-odd"], SPEC).values.get("dir"), "-odd");
  assert.equal(parseArgs(["--before", "-1"], SPEC).values.get("before"), "-1");
});

test("an option whose value is missing is a usage error, also when another option follows it", () => {
  for (
    const args of [
      ["id", "--to"],
      ["id", "--to", "--json"],
      ["--dir", "--json"],
      ["--dir", "-h"],
      ["--dir", "-x"],
      ["--dir="],
      ["--to", ""],
    ]
  ) {
    assert.throws(() => parseArgs(args, SPEC), (error: unknown) => {
      assert.ok(error instanceof UsageError, args.join(" "));
      assert.match(error.message, /needs a value/, args.join(" "));
      return true;
    });
  }
});

test("unknown options and values given to flags are usage errors", () => {
  assert.throws(() => parseArgs(["--nope"], SPEC), UsageError);
  assert.throws(() => parseArgs(["-x"], SPEC), UsageError);
  assert.throws(() => parseArgs(["--json=yes"], SPEC), UsageError);
  assert.equal(parseArgs(["-h"], SPEC).flags.has("help"), true);
});

test("number options are non-negative numbers, integers where asked", () => {
  const of = (raw: string, integer: boolean) =>
    numberOption(parseArgs([`--before=${raw}`], SPEC), "before", integer);
  assert.equal(of("3", true), 3);
  assert.equal(of("1.5", false), 1.5);
  for (const raw of ["-1", "1.5", "soon", " ", " 2", "0x1", "1e3"]) {
    assert.throws(() => of(raw, true), UsageError, raw);
  }
  // Floats as the engine's `--older-than DAYS` reads them (Python's float()).
  for (
    const [raw, value] of [["0.5", 0.5], [".5", 0.5], ["2.", 2], ["1e-3", 0.001], ["1E2", 100]]
  ) {
    assert.equal(of(raw as string, false), value, raw as string);
  }
  for (const raw of ["-1", "+1", ".", "e3", "1e", "0x1", " 2", "Infinity", "1e999", "1..2"]) {
    assert.throws(() => of(raw, false), UsageError, raw);
  }
});
