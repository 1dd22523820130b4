/**
 * The floors done directly with `node:fs/promises` and `node:crypto`: the calls the Node adapter
 * itself makes, without the port, the store or any validation. Whole files are read with the
 * callback `readFile`, as the adapter reads them (much faster than `fs/promises` on small files).
 * Runs on Node and on Deno.
 *
 * @module
 */
import { constants, readFile as readFileCallback } from "node:fs";
import * as fsp from "node:fs/promises";
import { createHash } from "node:crypto";
import { dirname, join } from "node:path";
import { Buffer } from "node:buffer";
import type { Durability } from "../mod.ts";
import { FAST_LIST_CONCURRENCY, FULL_LIST_CONCURRENCY } from "../src/loop/discovery.ts";
import { eachLimited, type Floors, floorTempName, parseLines, streamLines } from "./floors.ts";

async function syncDirectory(path: string): Promise<void> {
  const handle = await fsp.open(path, constants.O_RDONLY | (constants.O_DIRECTORY ?? 0));
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** The first half of an atomic replace: the temp file beside `path`, written (and fsynced). */
async function stage(path: string, data: Uint8Array, durability: Durability): Promise<string> {
  const temp = floorTempName(path);
  const handle = await fsp.open(temp, "wx", 0o600);
  try {
    await handle.write(data);
    if (durability === "full") await handle.sync();
  } finally {
    await handle.close();
  }
  return temp;
}

/** The second half: the rename over `path` (then the directory fsync). */
async function publish(temp: string, path: string, durability: Durability): Promise<void> {
  await fsp.rename(temp, path);
  if (durability === "full") await syncDirectory(dirname(path));
}

async function replace(path: string, data: Uint8Array, durability: Durability): Promise<void> {
  await publish(await stage(path, data, durability), path, durability);
}

/** Reads a whole file with the callback `readFile`, as the adapter does. */
function readWhole(path: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    readFileCallback(path, (error, data) => (error === null ? resolve(data) : reject(error)));
  });
}

/** Reads `length` bytes at `offset` (fewer only at the end of the file). */
async function readFully(
  handle: fsp.FileHandle,
  offset: number,
  length: number,
): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await handle.read(buffer, filled, length - filled, offset + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buffer.subarray(0, filled);
}

/** Floors over `node:fs/promises` and native `node:crypto` hashing. */
export function nodeFloors(): Floors {
  return {
    name: "node:fs + node:crypto",
    async commitLog(dir, durability) {
      const log = await fsp.open(join(dir, "messages.jsonl"), "a", 0o600);
      const meta = join(dir, "meta.json");
      return {
        async commit(line, bytes) {
          // The fastest schedule of these calls: the log's append (and fsync) and the temp
          // file's writing run at once; the rename, the commit point, waits for both.
          const appending = (async () => {
            await log.write(line);
            if (durability === "full") await log.sync();
          })();
          const [, temp] = await Promise.all([appending, stage(meta, bytes, durability)]);
          await publish(temp, meta, durability);
        },
        close: () => log.close(),
      };
    },
    atomicReplace: replace,
    async readAndParse(path, start, length) {
      const handle = await fsp.open(path, "r");
      try {
        const hash = createHash("sha256");
        const lines = await streamLines(
          (offset, size) => readFully(handle, offset, size),
          start,
          length,
          (bytes) => hash.update(bytes),
        );
        hash.digest("hex");
        return lines;
      } finally {
        await handle.close();
      }
    },
    async openRange(path) {
      const handle = await fsp.open(path, "r");
      return {
        read: async (offset, length) => parseLines(await readFully(handle, offset, length)),
        close: () => handle.close(),
      };
    },
    async stagedPublish(stagingDir, finalDir, files, durability, ready) {
      await fsp.mkdir(stagingDir, { mode: 0o700 });
      for (const file of files) {
        const handle = await fsp.open(join(stagingDir, file.name), "wx", 0o600);
        try {
          await handle.write(file.data);
          if (durability === "full") await handle.sync();
        } finally {
          await handle.close();
        }
      }
      if (durability === "full") await syncDirectory(stagingDir);
      await ready;
      await fsp.rename(stagingDir, finalDir);
      if (durability === "full") await syncDirectory(dirname(finalDir));
    },
    async removeTree(path) {
      await fsp.rm(path, { recursive: true, force: true });
      await syncDirectory(dirname(path));
    },
    async primitives(dir) {
      const log = await fsp.open(join(dir, "log"), "a", 0o600);
      const meta = await fsp.open(join(dir, "meta"), "w", 0o600);
      const line = new Uint8Array(2048).fill(120);
      const small = new Uint8Array(600).fill(121);
      let n = 0;
      const fresh = () => join(dir, `file-${++n}`);
      let pending = "";
      const makeFile = async () => {
        pending = fresh();
        await fsp.writeFile(pending, small, { mode: 0o600 });
      };
      return {
        subjects: [
          { name: "append 2 KB to a held handle", subject: { run: () => log.write(line) } },
          {
            name: "write 600 B in place at offset 0 of a held handle",
            subject: { run: () => meta.write(small, 0, small.length, 0) },
          },
          {
            name: "fsync a file after a 2 KB append",
            subject: { before: () => log.write(line), run: () => log.sync() },
          },
          { name: "fsync a directory", subject: { run: () => syncDirectory(dir) } },
          {
            name: "create a new file exclusively, write 600 B, close",
            subject: {
              run: async () => {
                const handle = await fsp.open(fresh(), "wx", 0o600);
                await handle.write(small);
                await handle.close();
              },
            },
          },
          { name: "chmod a file", subject: { run: () => fsp.chmod(join(dir, "meta"), 0o600) } },
          {
            name: "rename a file over an existing one",
            subject: { before: makeFile, run: () => fsp.rename(pending, join(dir, "target")) },
          },
          { name: "unlink a file", subject: { before: makeFile, run: () => fsp.unlink(pending) } },
          {
            name: "atomic replace without fsync (temp file + rename)",
            subject: { run: () => replace(join(dir, "target"), small, "ordered") },
          },
          {
            name: "atomic replace with fsyncs (file and directory)",
            subject: { run: () => replace(join(dir, "target"), small, "full") },
          },
        ],
        close: async () => {
          await log.close();
          await meta.close();
        },
      };
    },
    async listCollection(collection, full) {
      const names = (await fsp.readdir(collection, { withFileTypes: true }))
        .filter((entry) => entry.isDirectory() && !entry.name.startsWith("."))
        .map((entry) => entry.name);
      // As many at once as the listing measured beside it reads.
      const limit = full ? FULL_LIST_CONCURRENCY : FAST_LIST_CONCURRENCY;
      await eachLimited(names, limit, async (name) => {
        JSON.parse((await readWhole(join(collection, name, "meta.json"))).toString("utf8"));
        if (full) {
          const bytes = await readWhole(join(collection, name, "messages.jsonl"));
          createHash("sha256").update(bytes).digest("hex");
          parseLines(bytes);
        }
      });
      return names.length;
    },
  };
}
