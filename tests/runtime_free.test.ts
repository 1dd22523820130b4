// Keeps src/ runtime-free: no module outside src/cli/ may import a Node builtin or touch a
// runtime global. The scanner is tested on synthetic sources so it cannot silently go blind.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

/** One runtime reference found in a source file. */
interface Violation {
  readonly line: number;
  readonly rule: string;
  readonly text: string;
}

/**
 * Blanks out comments (keeping line breaks and string literals), so a doc comment that names
 * `Deno.test` is not a violation while `import("node:fs")` still is.
 */
function stripComments(source: string): string {
  let out = "";
  let i = 0;
  while (i < source.length) {
    const ch = source[i]!;
    const next = source[i + 1];
    if (ch === "/" && next === "/") {
      while (i < source.length && source[i] !== "\n") i++;
      continue;
    }
    if (ch === "/" && next === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end < 0 ? source.length : end + 2;
      out += source.slice(i, stop).replace(/[^\n]/g, " ");
      i = stop;
      continue;
    }
    if (ch === '"' || ch === "'" || ch === "`") {
      let j = i + 1;
      while (j < source.length && source[j] !== ch) {
        if (source[j] === "\\") j++;
        else if (ch !== "`" && source[j] === "\n") break;
        j++;
      }
      out += source.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    out += ch;
    i++;
  }
  return out;
}

const BARE_BUILTINS = builtinModules.filter((name) => !name.startsWith("_"));
const BUILTIN_NAME = `(?:node:[\\w/.-]+|(?:${
  BARE_BUILTINS.map((name) => name.replace(/[/.]/g, "\\$&")).join("|")
})(?:/[\\w/.-]*)?)`;

const RULES: readonly (readonly [string, RegExp])[] = [
  ["import from a Node builtin", new RegExp(`\\bfrom\\s*["'\`]${BUILTIN_NAME}["'\`]`)],
  ["side-effect import of a Node builtin", new RegExp(`\\bimport\\s*["'\`]${BUILTIN_NAME}["'\`]`)],
  [
    "dynamic import of a Node builtin",
    new RegExp(`\\bimport\\s*\\(\\s*["'\`]${BUILTIN_NAME}["'\`]`),
  ],
  ["reference to Deno", /\bDeno\s*\??\.[A-Za-z_$]/],
  ["reference to process", /(?<![.\w$])process\s*\??\.[A-Za-z_$]/],
  ["reference to Bun", /\bBun\s*\??\.[A-Za-z_$]/],
  // A CommonJS require takes a specifier; a method named `require(id)` is no runtime reference.
  [
    "call to require",
    /(?<![.\w$])require\s*\(\s*["'`]|(?<![.\w$])require\s*\.\s*(?:resolve|cache|main)\b|\bcreateRequire\b/,
  ],
  ["reference to __dirname or __filename", /\b__(?:dirname|filename)\b/],
  [
    "runtime global through globalThis",
    /\bglobalThis\s*(?:\.\s*|\[\s*["'`])(?:Deno|process|Bun|require)\b/,
  ],
];

/** Every runtime reference in `source`, with 1-based line numbers (multi-line forms too). */
function findRuntimeReferences(source: string): Violation[] {
  const code = stripComments(source);
  const lines = code.split("\n");
  const out: Violation[] = [];
  for (const [rule, pattern] of RULES) {
    for (const match of code.matchAll(new RegExp(pattern.source, "g"))) {
      const line = code.slice(0, match.index).split("\n").length;
      out.push({ line, rule, text: (lines[line - 1] ?? "").trim() });
    }
  }
  return out.sort((a, b) => a.line - b.line);
}

/** The `.ts` files below `srcDir`, except those under `srcDir/cli/`, sorted. */
async function runtimeFreeFiles(srcDir: string): Promise<string[]> {
  const out: string[] = [];
  async function walk(dir: string): Promise<void> {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (relative(srcDir, path).split(sep).join("/") !== "cli") await walk(path);
      } else if (entry.isFile() && entry.name.endsWith(".ts")) {
        out.push(path);
      }
    }
  }
  await walk(srcDir);
  return out.sort();
}

/** Every violation below `srcDir`, as `file:line: rule: text`. */
async function scanTree(srcDir: string): Promise<string[]> {
  const out: string[] = [];
  for (const path of await runtimeFreeFiles(srcDir)) {
    const rel = relative(srcDir, path).split(sep).join("/");
    for (const v of findRuntimeReferences(await readFile(path, "utf8"))) {
      out.push(`src/${rel}:${v.line}: ${v.rule}: ${v.text}`);
    }
  }
  return out;
}

const SRC = fileURLToPath(new URL("../src/", import.meta.url));

test("no module under src/ outside src/cli/ touches a runtime", async () => {
  const files = await runtimeFreeFiles(SRC);
  assert.ok(files.length > 0, "found no source files to scan");
  assert.deepEqual(await scanTree(SRC), []);
});

test("the scanner flags every kind of runtime reference", () => {
  const cases: readonly (readonly [string, string])[] = [
    ['import { readFile } from "node:fs/promises";', "import from a Node builtin"],
    ["import type { Stats } from 'node:fs';", "import from a Node builtin"],
    ['import * as path from "path";', "import from a Node builtin"],
    ['import { join } from "path/posix";', "import from a Node builtin"],
    ['export { createHash } from "node:crypto";', "import from a Node builtin"],
    ['export * from "node:os";', "import from a Node builtin"],
    ['import "node:process";', "side-effect import of a Node builtin"],
    ['const fs = await import("node:fs");', "dynamic import of a Node builtin"],
    ['const fs = await import(\n  "node:fs"\n);', "dynamic import of a Node builtin"],
    ['import {\n  readFile,\n} from "node:fs";', "import from a Node builtin"],
    ["const os = await import( 'os' );", "dynamic import of a Node builtin"],
    ['type H = import("node:crypto").Hash;', "dynamic import of a Node builtin"],
    ["const text = await Deno.readTextFile(path);", "reference to Deno"],
    ["const cwd = process.cwd();", "reference to process"],
    ["const env = process?.env;", "reference to process"],
    ["if (typeof Bun !== 'undefined') Bun.write(p, d);", "reference to Bun"],
    ['const fs = require("fs");', "call to require"],
    ["const path = require.resolve('x');", "call to require"],
    ['import { createRequire } from "./module.ts";', "call to require"],
    ["const here = __dirname;", "reference to __dirname or __filename"],
    ["const env = globalThis.process;", "runtime global through globalThis"],
    ['const d = globalThis["Deno"];', "runtime global through globalThis"],
  ];
  for (const [source, rule] of cases) {
    const found = findRuntimeReferences(`const before = 1;\n${source}\n`);
    assert.ok(
      found.some((v) => v.rule === rule && v.line >= 2),
      `${JSON.stringify(source)} was not flagged as ${rule}: ${JSON.stringify(found)}`,
    );
  }
});

test("the scanner ignores comments, look-alike names and module specifiers that are not builtins", () => {
  const clean = [
    "/** Runs on Deno.test and Node; never calls process.exit() or require(). */",
    '// import { x } from "node:fs"; Deno.exit(1); __dirname',
    "/*",
    " * Bun.write(path, data)",
    " */",
    'import { sha256 } from "@noble/hashes/sha2.js";',
    'import * as v from "valibot";',
    'import { join } from "./path.ts";',
    'import type { FileSystem } from "../port/fs.ts";',
    'const url = "https://example.com/a//b"; const processed = reprocess.count;',
    "const message = `the process. ended`; const denoise = 1; this.process.run();",
    "myRequire(x); const requireConfirm = true;",
    "class Tree { require(id: string): Node { return this.nodes.require(id); } }",
    'const node = tree.require("001_root");',
    "const ratio = a / b / c; // Deno.exit()",
  ].join("\n");
  assert.deepEqual(findRuntimeReferences(clean), []);
});

test("the tree scan reports a violation added under src/ and allows src/cli/", async () => {
  const root = await mkdtemp(join(tmpdir(), "loop-runtime-free-"));
  try {
    const src = join(root, "src");
    await mkdir(join(src, "port"), { recursive: true });
    await mkdir(join(src, "cli"), { recursive: true });
    await writeFile(join(src, "port", "clean.ts"), 'import { join } from "./path.ts";\n');
    await writeFile(join(src, "cli", "main.ts"), 'import { argv } from "node:process";\n');
    assert.deepEqual(await scanTree(src), []);

    await writeFile(
      join(src, "port", "leak.ts"),
      '/** A helper. */\nexport const home = (): string => Deno.env.get("HOME") ?? "";\n',
    );
    await writeFile(join(src, "port", "notes.md"), "Deno.exit() in a non-TypeScript file\n");
    assert.deepEqual(await scanTree(src), [
      'src/port/leak.ts:2: reference to Deno: export const home = (): string => Deno.env.get("HOME") ?? "";',
    ]);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});
