// The command line's output helpers, on inputs of any size and content.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fieldRows, inline, inlined, jsonText, table } from "../src/cli/output.ts";
import { parseArgs } from "../src/cli/args.ts";
import { runCli } from "../src/cli/main.ts";
import { MemoryFs } from "../adapters/memory.ts";
import { memoryIo } from "./_cli_io.ts";

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

/** Arrays nested `depth` levels deep, as JSON.parse reads them (without the call stack). */
function nested(depth: number): unknown[] {
  return JSON.parse("[".repeat(depth) + "]".repeat(depth));
}

test("jsonText writes a value too deep for JSON.stringify, and writes the rest as it does", () => {
  const date = new Date(Date.UTC(2026, 0, 2));
  const sample = {
    text: 'quote " backslash \\ line\n tab\t nul\u0000 é \u2028 😀',
    numbers: [0, -0, 1.5, -2e-7, 1e21, NaN, Infinity],
    flags: [true, false, null],
    empty: { array: [], object: {} },
    skipped: { missing: undefined, fn: () => 1 },
    inArray: [undefined, () => 1, Symbol("s")],
    holes: [1, , 3],
    date,
    withToJSON: { toJSON: (key: string) => `key ${key}` },
    ...JSON.parse('{"__proto__": {"kept": 1}, "10": "ten", "9": "nine"}'),
  };
  const deep = 30_000;
  assert.throws(() => JSON.stringify({ sample, deep: nested(deep) }), RangeError);
  const text = jsonText({ sample, deep: nested(deep) });
  // The members before the deep one are written exactly as JSON.stringify writes them.
  const expected = JSON.stringify({ sample }, null, 2);
  assert(text.startsWith(expected.slice(0, -2) + ",\n"), text.slice(0, 2000));
  const parsed = JSON.parse(text);
  assert.deepEqual(parsed.sample, JSON.parse(expected).sample);
  let level = 0;
  for (let value = parsed.deep; Array.isArray(value) && value.length > 0; value = value[0]) level++;
  assert.equal(level, deep - 1);
  // Indented down to a depth, then on one line: linear in the depth, not quadratic.
  assert(text.includes(`\n${"  ".repeat(100)}[`));
  assert(!text.includes(`\n${"  ".repeat(101)}[`));
  assert(text.length < expected.length + 2 * deep + 40_000, `${text.length} characters`);
  // A value JSON.stringify writes is written by it.
  assert.equal(jsonText(sample), JSON.stringify(sample, null, 2));
});

test("jsonText refuses a cycle in a value too deep for JSON.stringify, as JSON.stringify does", () => {
  const cycle: unknown[] = [];
  cycle.push(cycle);
  assert.throws(() => jsonText([nested(30_000), cycle]), TypeError);
});

/** A stack overflow, as the runtime throws it. */
function stackOverflow(): RangeError {
  const recurse = (n: number): number => recurse(n + 1) + 1;
  try {
    recurse(0);
  } catch (error) {
    return error as RangeError;
  }
  throw new Error("no stack overflow");
}

test("runCli reports a stack overflow as a one-line error, and lets any other defect through", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/work", { recursive: true });
  const run = async (thrown: Error) => {
    const { io } = memoryIo(fs, "/work", Date.now());
    let err = "";
    const env = (): string => {
      throw thrown;
    };
    const code = await runCli(["sessions", "list"], { ...io, env, err: (t) => void (err += t) });
    return { code, err };
  };
  const overflow = await run(stackOverflow());
  assert.equal(overflow.code, 1);
  assert.match(overflow.err, /^error: Maximum call stack size exceeded: .+\n$/);
  // A programming error keeps its stack trace (bin.ts lets it escape).
  const defect = new TypeError("x is undefined");
  await assert.rejects(run(defect), (error) => error === defect);
});

test("a line feed, carriage return or tab in a cell or a value is written as an escape", () => {
  assert.equal(inline("a\nb\rc\td\u000be"), "a\\u000ab\\u000dc\\u0009d\u000be");
  const value = "x\ny";
  assert.equal(inlined`one ${value} and ${3}\n`, "one x\\u000ay and 3\n");
  assert.equal(
    table(["A", "B"], [["1\n2", "t\tu"], ["3", "4"]]),
    "A         B\n1\\u000a2  t\\u0009u\n3         4\n",
  );
  assert.equal(fieldRows([["id", "a\rb"], ["model", "m"]]), "id     a\\u000db\nmodel  m\n");
});

test("an error's message is one line whatever it quotes", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/work", { recursive: true });
  const { io } = memoryIo(fs, "/work", Date.now());
  let err = "";
  const code = await runCli(["list\nerror: forged"], {
    ...io,
    err: (text) => void (err += text),
  });
  assert.equal(code, 2);
  assert.equal(
    err,
    "usage error: unknown command 'list\\u000aerror: forged'\nRun 'loop-sessions --help' for the commands.\n",
  );
});
