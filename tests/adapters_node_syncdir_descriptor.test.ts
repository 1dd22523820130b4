/**
 * nodeFs().syncDir opens the directory to fsync it: every call must close what it opened, or a
 * long-running store (every save syncs its session directory) runs out of descriptors (EMFILE).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readdir, readlink, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";

async function descriptorsOn(path: string): Promise<number> {
  let count = 0;
  for (const fd of await readdir("/proc/self/fd")) {
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => undefined);
    if (target === path) count++;
  }
  return count;
}

test(
  "nodeFs().syncDir closes the directory descriptor it opened",
  { skip: process.platform !== "linux" && "counts /proc/self/fd (Linux)" },
  async () => {
    const dir = await realpath(await mkdtemp(join(tmpdir(), "loop-syncdir-fd-")));
    try {
      const before = await descriptorsOn(dir);
      for (let i = 0; i < 20; i++) await nodeFs().syncDir(dir);
      assert.equal(await descriptorsOn(dir), before);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
);
