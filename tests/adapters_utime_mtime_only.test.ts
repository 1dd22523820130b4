/**
 * `FileSystem.utime` "updates the modification time of a path"; the access time stays as it was, as
 * the Node adapter keeps it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, stat, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nodeFs } from "../adapters/node.ts";

const isDeno = (globalThis as { Deno?: unknown }).Deno !== undefined;

test("utime changes the modification time only, never the access time", async () => {
  const adapters = [["nodeFs", nodeFs()]] as [string, ReturnType<typeof nodeFs>][];
  if (isDeno) adapters.push(["denoFs", (await import("../adapters/deno.ts")).denoFs()]);
  const dir = await mkdtemp(join(tmpdir(), "loop-utime-"));
  try {
    for (const [name, fs] of adapters) {
      const path = join(dir, name);
      await writeFile(path, "x");
      const atime = new Date(1_500_000_000_000);
      await utimes(path, atime, new Date(1_600_000_000_000));
      await fs.utime(path, 1_700_000_000_000);
      const after = await stat(path);
      assert.equal(after.mtimeMs, 1_700_000_000_000, name);
      assert.equal(after.atimeMs, atime.getTime(), name);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
