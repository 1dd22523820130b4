// The command line's output helpers, on inputs of any size and content.
import { test } from "node:test";
import assert from "node:assert/strict";
import { table } from "../src/cli/output.ts";
import { parseArgs } from "../src/cli/args.ts";

// More items than a call takes arguments: a spread of them into a call (`Math.max(...rows)`,
// `push(...rows)`) overflows the stack at about 125,000 on Deno and Node.
const MANY = 200_000;

test("table aligns a listing of more rows than a call takes arguments", () => {
  const rows = Array.from(
    { length: MANY },
    (_, i) => [String(i), i === 7 ? "a longer cell" : "x", "t"],
  );
  const lines = table(["ID", "STATE", "TITLE"], rows).trimEnd().split("\n");
  assert.equal(lines.length, MANY + 1);
  assert.equal(lines[0], `ID${" ".repeat(String(MANY - 1).length)}STATE${" ".repeat(10)}TITLE`);
  assert.equal(lines[8], `7${" ".repeat(String(MANY - 1).length + 1)}a longer cell  t`);
});

test("parseArgs takes more positionals after '--' than a call takes arguments", () => {
  const rest = Array.from({ length: MANY }, (_, i) => `p${i}`);
  const parsed = parseArgs(["--json", "--", ...rest], { json: "boolean" });
  assert.equal(parsed.positionals.length, MANY);
  assert.equal(parsed.positionals.at(-1), `p${MANY - 1}`);
  assert(parsed.flags.has("json"));
});
