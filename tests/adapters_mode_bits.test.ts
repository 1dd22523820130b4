/**
 * The port's `FileInfo.mode` is the permission bits (0o777) only, as the Deno adapter and MemoryFs
 * give it: a sticky directory (like /tmp) or a setgid one must read 0o777, not 0o1777.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";

test(
  "nodeFs(): stat, lstat and a handle's stat give only the permission bits",
  { skip: process.platform === "win32" && "POSIX modes" },
  async () => {
    const dir = await mkdtemp(join(tmpdir(), "loop-mode-"));
    try {
      const sticky = join(dir, "sticky");
      await mkdir(sticky);
      await chmod(sticky, 0o1777);
      const file = join(dir, "setgid");
      await writeFile(file, "x");
      await chmod(file, 0o2750);
      const fs = nodeFs();
      assert.equal((await fs.stat(sticky)).mode, 0o777);
      assert.equal((await fs.lstat(sticky)).mode, 0o777);
      assert.equal((await fs.stat(file)).mode, 0o750);
      const handle = await fs.open(file);
      try {
        assert.equal((await handle.stat()).mode, 0o750);
      } finally {
        await handle.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
);
