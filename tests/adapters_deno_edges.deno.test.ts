// The Deno adapter where the disk holds what a store does not expect: a sparse file larger than
// any buffer.
import { test } from "node:test";
import assert from "node:assert/strict";
import { denoFs } from "../adapters/deno.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

async function withDir(run: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "loop-deno-edges-" });
  try {
    await run(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** 8 TiB: a sparse file of this size costs nothing on disk, and no buffer holds it. */
const HUGE = 2 ** 43;

/**
 * A sparse file of `HUGE` bytes at `path`; false where the filesystem refuses such a size, or
 * where this process could allocate a buffer that large (a whole read would then go ahead).
 */
async function sparseHugeFile(path: string): Promise<boolean> {
  try {
    new Uint8Array(HUGE);
    return false;
  } catch {
    // Expected: the whole-file reads below must refuse it rather than try.
  }
  using file = await Deno.open(path, { write: true, create: true });
  try {
    await file.truncate(HUGE);
    return true;
  } catch {
    return false;
  }
}

test("denoFs refuses a whole read of a sparse file larger than any buffer with EFBIG, naming it", async () => {
  await withDir(async (dir) => {
    const path = `${dir}/index.json`;
    if (!(await sparseHugeFile(path))) return;
    const fs = denoFs();
    const reads: [string, ((path: string) => Promise<Uint8Array>) | undefined][] = [
      ["readFile", (p) => fs.readFile(p)],
      ["readFileNoFollow", fs.readFileNoFollow],
    ];
    for (const [syscall, read] of reads) {
      if (read === undefined) continue;
      await assert.rejects(read(path), (error: unknown) => {
        assert.ok(error instanceof FsIoError, String(error));
        assert.equal(error.code, "EFBIG", error.message);
        assert.equal(error.syscall, syscall);
        assert.equal(error.path, path);
        return true;
      });
    }
    assert.equal((await fs.stat(path)).size, HUGE);
  });
});

test("a session whose index.json is a sparse file of terabytes is listed from a scan on denoFs", async () => {
  await withDir(async (dir) => {
    const fs = denoFs();
    const cwd = `${dir}/project`;
    await fs.mkdir(cwd);
    const store = new SessionStore({ fs, agentDir: `${dir}/agent` });
    const session = await store.create(cwd);
    await session.commit(conversation(3, "e"));
    await session.close();
    const index = `${session.getSessionPath()}/index.json`;
    await fs.remove(index);
    if (!(await sparseHugeFile(index))) return;
    // Too large to be read whole, as on Node: not an index, so the listing scans the messages.
    const listed = await store.listDetailed(cwd, undefined, { fast: true });
    assert.deepEqual(listed.failures, []);
    assert.deepEqual(listed.sessions.map((s) => s.userMessageCount), [3]);
    assert.equal((await fs.stat(index)).size, HUGE);
  });
});
