// The set of paths the port keeps of what it made durable: forgetting a path forgets exactly it
// and what is below it, as a scan of every path with a prefix test does, whatever was added,
// deleted and forgotten before.
import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { PathSet } from "../src/port/durable.ts";
import { runsOf } from "./_soak.ts";

const SEGMENTS = ["a", "b", "ab", "c"];

/** An absolute path of one to four segments from a small alphabet (so paths share prefixes). */
const pathArb = fc.array(fc.constantFrom(...SEGMENTS), { minLength: 1, maxLength: 4 })
  .map((parts) => `/${parts.join("/")}`);

type Op = { kind: "add" | "delete" | "forget"; path: string };

const opArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constantFrom("add", "add", "delete", "forget") as fc.Arbitrary<Op["kind"]>,
  path: pathArb,
});

/** Every path the small alphabet spells, to compare the two sets on. */
function everyPath(): string[] {
  const out: string[] = [];
  const walk = (prefix: string, depth: number) => {
    if (depth === 4) return;
    for (const segment of SEGMENTS) {
      const path = `${prefix}/${segment}`;
      out.push(path);
      walk(path, depth + 1);
    }
  };
  walk("", 0);
  return out;
}

test("PathSet holds what a plain set with prefix forgetting holds, after any sequence of calls", () => {
  const universe = everyPath();
  fc.assert(
    fc.property(fc.array(opArb, { maxLength: 60 }), (ops) => {
      const set = new PathSet();
      const model = new Set<string>();
      for (const { kind, path } of ops) {
        if (kind === "add") {
          set.add(path);
          model.add(path);
        } else if (kind === "delete") {
          set.delete(path);
          model.delete(path);
        } else {
          set.forgetBelow(path);
          for (const held of [...model]) {
            if (held === path || held.startsWith(`${path}/`)) model.delete(held);
          }
        }
      }
      for (const path of universe) assert.equal(set.has(path), model.has(path), path);
    }),
    { numRuns: runsOf(500) },
  );
});

test("PathSet takes a path spelled with a trailing slash or doubled slashes as the same path", () => {
  const set = new PathSet();
  set.add("/s/c//id/");
  assert.equal(set.has("/s/c/id"), true);
  set.add("/s/c/id/meta.json");
  set.add("/s/c/idx/meta.json");
  set.forgetBelow("/s/c/id/");
  assert.equal(set.has("/s/c/id"), false);
  assert.equal(set.has("/s/c/id/meta.json"), false);
  assert.equal(set.has("/s/c/idx/meta.json"), true);
});
