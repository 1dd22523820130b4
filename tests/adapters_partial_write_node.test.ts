/**
 * A write that lands partially and then fails, on nodeFs() under real Node: a Node child runs under
 * a 4096-byte file size limit (bash's `ulimit -f 4`, SIGXFSZ ignored), so a write crossing it lands
 * its first bytes and the rest fails with EFBIG, as a write on a full disk does with ENOSPC. The
 * Deno run (tests/adapters_partial_write.deno.test.ts) cannot hold nodeFs() to this: Deno's Node
 * layer reports the failed write without the bytes that landed. This file runs the Node child
 * under both runners.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

const ROOT = new URL("../", import.meta.url);

const CHILD = `
const { nodeFs } = await import(${JSON.stringify(new URL("adapters/node.ts", ROOT).href)});
const { readFileSync } = await import("node:fs");
const dir = process.argv[2];
const code = (p) => p.then(() => "ok", (e) => e.code);
const fs = nodeFs();
const result = {};
// A write of 200 bytes (one synchronous call) and one of 70,000 (asynchronous) crossing the limit.
for (const length of [200, 70000]) {
  const path = dir + "/node-" + length;
  const h = await fs.open(path, { create: true });
  await h.write(new Uint8Array(4000).fill(0x61));
  const crossing = await code(h.write(new Uint8Array(length).fill(0x62)));
  const next = await code(h.write(new Uint8Array([0x5a])));
  await h.close();
  const data = readFileSync(path);
  result[length] = {
    crossing,
    next,
    size: data.length,
    z: data.indexOf(0x5a),
    b: data.filter((x) => x === 0x62).length,
  };
}
console.log(JSON.stringify(result));
`;

test(
  "nodeFs() on Node: a write that lands partially moves the position past the bytes that landed",
  {
    skip: process.platform !== "linux" && "needs Linux (bash's ulimit -f with SIGXFSZ ignored)",
  },
  async () => {
    const dir = await mkdtemp(join(tmpdir(), "loop-partial-node-"));
    try {
      const script = join(dir, "child.mts");
      await writeFile(script, CHILD);
      // Under Deno, process.execPath is deno: the child is Node, found on the PATH.
      const node = process.versions.deno === undefined ? process.execPath : "node";
      const { status, stdout, stderr, error } = spawnSync("bash", [
        "-c",
        `trap '' XFSZ; ulimit -f 4; exec "$0" --import tsx "$1" "$2"`,
        node,
        script,
        dir,
      ], { cwd: new URL(".", ROOT).pathname, encoding: "utf8" });
      assert.equal(error, undefined, String(error));
      assert.equal(status, 0, stderr);
      const expected = {
        // The limit cuts the write after 96 bytes; the error keeps its POSIX code.
        crossing: "EFBIG",
        // The next write goes after the 96 bytes, past the limit: nothing is overwritten.
        next: "EFBIG",
        size: 4096,
        z: -1,
        b: 96,
      };
      assert.deepEqual(JSON.parse(stdout), { 200: expected, 70000: expected });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
);
