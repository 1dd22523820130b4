import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  basename,
  dirname,
  isWithin,
  join,
  normalize,
  relativeWithin,
  resolve,
} from "../src/port/path.ts";
import { runsOf } from "./_soak.ts";

/** The segment-by-segment algorithm, applied to every path (the reference for the fast path). */
function reference(path: string): string {
  const absolute = path.startsWith("/");
  const out: string[] = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (out.length > 0 && out[out.length - 1] !== "..") out.pop();
      else if (!absolute) out.push("..");
      continue;
    }
    out.push(part);
  }
  const joined = out.join("/");
  if (absolute) return "/" + joined;
  return joined === "" ? "." : joined;
}

test("normalize() agrees with the segment-by-segment algorithm on any path", () => {
  const segment = fc.constantFrom(
    "a",
    "b.c",
    ".",
    "..",
    "",
    "...",
    ".hidden",
    "x..",
    "..y",
    "line\n",
    "\r",
    "sep\u2028",
    "\u2029",
  );
  const path = fc.tuple(fc.boolean(), fc.array(segment, { maxLength: 6 }), fc.boolean()).map((
    [absolute, parts, trailing],
  ) => (absolute ? "/" : "") + parts.join("/") + (trailing ? "/" : ""));
  fc.assert(
    fc.property(path, (p) => {
      assert.equal(normalize(p), reference(p), JSON.stringify(p));
      assert.equal(normalize(normalize(p)), normalize(p));
    }),
    { numRuns: runsOf(2000) },
  );
});

test("normalize(), join(), dirname() and basename() on the paths the store builds", () => {
  assert.equal(normalize(""), ".");
  assert.equal(normalize("/"), "/");
  assert.equal(normalize("/a/b/"), "/a/b");
  assert.equal(normalize("/a//b/./c/../d"), "/a/b/d");
  assert.equal(normalize("../a"), "../a");
  assert.equal(normalize("/.."), "/");
  assert.equal(
    join("/home/user/.loop", "sessions", "x", "meta.json"),
    "/home/user/.loop/sessions/x/meta.json",
  );
  assert.equal(join("/a/", "/b"), "/a/b");
  assert.equal(dirname("/a/b/meta.json"), "/a/b");
  assert.equal(basename("/a/b/meta.json/"), "meta.json");
  // Relative paths (a command line's arguments before they are resolved).
  assert.equal(dirname("meta.json"), ".");
  assert.equal(dirname("a/b/../meta.json"), "a");
  assert.equal(basename("a/./b"), "b");
  assert.equal(resolve("/work", "a/../b"), "/work/b");
  assert.equal(resolve("/work", "/etc//x/"), "/etc/x");
});

test("a name ending with a line break keeps its trailing slash trimmed like any other", () => {
  for (const name of ["a\n", "a\r", "a\u2028", "a\u2029"]) {
    assert.equal(normalize(`/${name}/`), `/${name}`);
    assert.equal(dirname(`/${name}/`), "/");
    assert.equal(basename(`/${name}/`), name);
    assert.equal(relativeWithin(`/${name}/`, `/${name}/b`), "b");
  }
});

test("relativeWithin() and isWithin() take every absolute path as within the root", () => {
  assert.equal(relativeWithin("/", "/"), "");
  assert.equal(relativeWithin("/", "/a"), "a");
  assert.equal(relativeWithin("/", "/a/b/"), "a/b");
  assert.equal(relativeWithin("/a", "/ab"), undefined);
  assert.ok(isWithin("/", "/home/user/.loop"));
  assert.ok(!isWithin("/home/user", "/home/username"));
});
