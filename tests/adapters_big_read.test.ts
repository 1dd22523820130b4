import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, open, rm } from "node:fs/promises";
import { freemem, tmpdir } from "node:os";
import { join } from "node:path";
import { nodeFs } from "../adapters/node.ts";

const SIZE = 2 ** 31 + 4096; // past the 2 GiB that one native readFile holds

// Node's readFile refuses files over 2 GiB (Deno's Node layer reads them, slowly): the test runs
// where the limit is, and only with room for the bytes.
const skip = "Deno" in globalThis
  ? "Deno's Node layer has no 2 GiB limit"
  : freemem() < 3 * SIZE
  ? "not enough free memory"
  : false;

test(
  "nodeFs reads a whole file over 2 GiB with readFile and readFileNoFollow",
  { skip },
  async () => {
    const dir = await mkdtemp(join(tmpdir(), "loop-big-read-"));
    try {
      const path = join(dir, "big");
      const handle = await open(path, "w");
      // Sparse: marks at the start, across the first chunk's end and at the last byte.
      await handle.write(new Uint8Array([1]), 0, 1, 0);
      await handle.write(new Uint8Array([2]), 0, 1, 2 ** 30);
      await handle.write(new Uint8Array([3]), 0, 1, SIZE - 1);
      await handle.close();
      const fs = nodeFs();
      for (const read of [fs.readFile.bind(fs), fs.readFileNoFollow?.bind(fs)]) {
        if (read === undefined) continue;
        let data: Uint8Array | undefined = await read(path);
        assert.equal(data.length, SIZE);
        assert.deepEqual([data[0], data[1], data[2 ** 30], data[SIZE - 2], data[SIZE - 1]], [
          1,
          0,
          2,
          0,
          3,
        ]);
        data = undefined;
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
);
