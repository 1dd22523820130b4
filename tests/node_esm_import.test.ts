// Node programs are ES modules (top-level await, as every example in the docs uses it): one that
// imports the library from a checkout gets every export of every entry point, as Deno gives them.
// The checkout's package.json makes its `.ts` files ES modules for Node's loader (tsx); without
// it they load as CommonJS, and an ES module importing them sees only the names a CommonJS module
// declares directly, not those re-exported with `export *` (most of the layout API).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import * as main from "../mod.ts";
import * as layout from "../layout.ts";
import * as memory from "../adapters/memory.ts";
import * as node from "../adapters/node.ts";
import * as testing from "../testing.ts";

const ROOT = new URL("../", import.meta.url);
const ENTRIES = {
  "mod.ts": main,
  "layout.ts": layout,
  "adapters/memory.ts": memory,
  "adapters/node.ts": node,
  "testing.ts": testing,
};

/** A Node ES module that imports each entry point and uses the layout API with top-level await. */
function program(): string {
  const imports = Object.keys(ENTRIES).map((entry, i) =>
    `import * as e${i} from ${JSON.stringify(new URL(entry, ROOT).href)};`
  );
  return `${imports.join("\n")}
import { createRootSession, pruneRaw } from ${JSON.stringify(new URL("layout.ts", ROOT).href)};
import { MemoryFs } from ${JSON.stringify(new URL("adapters/memory.ts", ROOT).href)};
const fs = new MemoryFs();
await fs.mkdir("/repo");
const session = await createRootSession(fs, {
  repoRoot: "/repo",
  goal: "Write the docs",
  workflowSet: "main",
  workflowContract: {},
  workflowRoster: {},
  harnessCapabilityRoster: {},
});
const pruned = await pruneRaw(fs, "/repo/.loopy_loop", { dryRun: true });
console.log(JSON.stringify({
  names: [${Object.keys(ENTRIES).map((_, i) => `Object.keys(e${i}).sort()`).join(", ")}],
  session: session.sessionId,
  removed: pruned.removed.length,
}));
`;
}

test("a Node ES module imports every export of every entry point from a checkout", async () => {
  const dir = await mkdtemp(join(tmpdir(), "loop-esm-"));
  try {
    const script = join(dir, "host.mts");
    await writeFile(script, program());
    // Under Deno, process.execPath is deno: the child is Node, found on the PATH.
    const executable = process.versions.deno === undefined ? process.execPath : "node";
    const { status, stdout, stderr, error } = spawnSync(
      executable,
      ["--import", "tsx", script],
      { cwd: new URL(".", ROOT).pathname, encoding: "utf8" },
    );
    assert.equal(error, undefined, String(error));
    assert.equal(status, 0, stderr);
    const printed = JSON.parse(stdout) as { names: string[][]; session: string; removed: number };
    const expected = Object.values(ENTRIES).map((entry) => Object.keys(entry).sort());
    Object.keys(ENTRIES).forEach((entry, i) => {
      assert.deepEqual(printed.names[i], expected[i], entry);
    });
    assert.ok((expected[1] as string[]).length > 100, "the layout entry exports its API");
    assert.equal(printed.session, "001_write-the-docs");
    assert.equal(printed.removed, 0);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("package.json declares only the module type: dependencies live in deno.json's imports", async () => {
  // With a package.json at the root, `deno add npm:x` writes there rather than to deno.json:
  // the project's dependencies stay in one place, deno.json's imports (package.json is left out
  // of the published package).
  const manifest = JSON.parse(await readFile(new URL("package.json", ROOT), "utf8"));
  assert.deepEqual(manifest, { private: true, type: "module" });
});
