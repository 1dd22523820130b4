import { test } from "node:test";
import assert from "node:assert/strict";
import { constants } from "node:fs";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readInChunks, readWith } from "../adapters/_node_read.ts";
import { FsIoError, NotFound } from "../src/port/errors.ts";

/** Node's refusal of a whole-file read of a file over 2 GiB. */
function tooLarge(): Promise<Uint8Array> {
  return Promise.reject(Object.assign(new RangeError("File size is greater than 2 GiB"), {
    code: "ERR_FS_FILE_TOO_LARGE",
  }));
}

async function withFile(run: (dir: string, path: string, bytes: Uint8Array) => Promise<void>) {
  const dir = await mkdtemp(join(tmpdir(), "loop-chunked-read-"));
  try {
    const bytes = new Uint8Array(1000).map((_, i) => (i * 7 + 3) % 251);
    const path = join(dir, "file");
    await writeFile(path, bytes);
    await run(dir, path, bytes);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("a file read in chunks comes back whole, whatever the chunk size", async () => {
  await withFile(async (_dir, path, bytes) => {
    for (const chunk of [1, 7, 999, 1000, 4096]) {
      assert.deepEqual(await readInChunks(path, constants.O_RDONLY, chunk), bytes, `${chunk}`);
    }
  });
});

test("a file the one-call read refuses as too large is read in chunks, with the same flags", async () => {
  await withFile(async (dir, path, bytes) => {
    assert.deepEqual(await readWith(path, undefined, undefined, tooLarge), bytes);
    // The no-follow flags still refuse a link when the read falls back to chunks.
    const link = join(dir, "link");
    await symlink(path, link);
    const noFollow = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
    assert.deepEqual(await readWith(path, noFollow, undefined, tooLarge), bytes);
    await assert.rejects(
      readWith(link, noFollow, undefined, tooLarge),
      (error: unknown) =>
        error instanceof FsIoError && error.code === "ELOOP" &&
        error.syscall === "readFileNoFollow",
    );
    // The chunked read names the port call, as the one-call read does.
    await assert.rejects(
      readWith(join(dir, "missing"), undefined, undefined, tooLarge),
      (error: unknown) => error instanceof NotFound && error.syscall === "readFile",
    );
  });
});
