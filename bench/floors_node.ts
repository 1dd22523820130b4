/**
 * The floors done directly with `node:fs` and `node:crypto`: the calls the Node adapter itself
 * makes, without the port, the store or any validation. Files are opened, read, written, synced
 * and closed through descriptors with the callback calls (a write of up to 64 KiB with one
 * synchronous call), and whole files read with the callback `readFile`, as the adapter does
 * (faster than `fs/promises` handles). Runs on Node and on Deno.
 *
 * @module
 */
import { constants, readFile as readFileCallback } from "node:fs";
import * as fsp from "node:fs/promises";
import { createHash } from "node:crypto";
import { dirname, join } from "node:path";
import {
  closeDescriptor,
  openDescriptor,
  readDescriptor,
  syncDescriptor,
  writeDescriptorSome,
} from "../adapters/_node_handle.ts";
import { Buffer } from "node:buffer";
import type { Durability } from "../mod.ts";
import { FAST_LIST_CONCURRENCY, FULL_LIST_CONCURRENCY } from "../src/loop/discovery.ts";
import { HEAD_BYTES } from "../src/loop/storage.ts";
import {
  eachLimited,
  type Floors,
  floorTempName,
  parseLines,
  roundCountOfHead,
  streamLines,
} from "./floors.ts";

/** The open flags of an exclusive create for writing (`"wx"`). */
const CREATE_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL;
/** The open flags of an append that creates the file (`"a"`). */
const APPEND = constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND;

/**
 * Writes all of `data` to descriptor `fd` at its position (the end, for an append), synchronously
 * up to 64 KiB as the adapter writes.
 */
async function writeAll(fd: number, data: Uint8Array): Promise<void> {
  let written = 0;
  while (written < data.length) {
    written += await writeDescriptorSome(fd, data, written, data.length - written, null);
  }
}

async function syncDirectory(path: string): Promise<void> {
  const fd = await openDescriptor(path, constants.O_RDONLY | (constants.O_DIRECTORY ?? 0));
  try {
    await syncDescriptor(fd);
  } finally {
    await closeDescriptor(fd);
  }
}

/** The first half of an atomic replace: the temp file beside `path`, written (and fsynced). */
async function stage(path: string, data: Uint8Array, durability: Durability): Promise<string> {
  const temp = floorTempName(path);
  const fd = await openDescriptor(temp, CREATE_NEW, 0o600);
  try {
    await writeAll(fd, data);
    if (durability === "full") await syncDescriptor(fd);
  } finally {
    await closeDescriptor(fd);
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

/** The session directories of `collection`: its directories whose names do not start with `.`. */
async function sessionNames(collection: string): Promise<string[]> {
  return (await fsp.readdir(collection, { withFileTypes: true }))
    .filter((entry) => entry.isDirectory() && !entry.name.startsWith("."))
    .map((entry) => entry.name);
}

/** Reads a whole file with the callback `readFile`, as the adapter does. */
function readWhole(path: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    readFileCallback(path, (error, data) => (error === null ? resolve(data) : reject(error)));
  });
}

/** Reads `length` bytes at `offset` (fewer only at the end of the file). */
async function readFully(fd: number, offset: number, length: number): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(length);
  let filled = 0;
  while (filled < length) {
    const bytesRead = await readDescriptor(fd, buffer, filled, length - filled, offset + filled);
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
      const log = await openDescriptor(join(dir, "messages.jsonl"), APPEND, 0o600);
      const meta = join(dir, "meta.json");
      return {
        async commit(line, bytes) {
          // The fastest schedule of these calls: the log's append (and fsync) and the temp
          // file's writing run at once; the rename, the commit point, waits for both.
          const appending = (async () => {
            await writeAll(log, line);
            if (durability === "full") await syncDescriptor(log);
          })();
          const [, temp] = await Promise.all([appending, stage(meta, bytes, durability)]);
          await publish(temp, meta, durability);
        },
        close: () => closeDescriptor(log),
      };
    },
    atomicReplace: replace,
    async readAndParse(path, start, length) {
      const fd = await openDescriptor(path, constants.O_RDONLY);
      try {
        const hash = createHash("sha256");
        const lines = await streamLines(
          (offset, size) => readFully(fd, offset, size),
          start,
          length,
          (bytes) => hash.update(bytes),
        );
        hash.digest("hex");
        return lines;
      } finally {
        await closeDescriptor(fd);
      }
    },
    async openRange(path) {
      const fd = await openDescriptor(path, constants.O_RDONLY);
      return {
        read: async (offset, length) => parseLines(await readFully(fd, offset, length)),
        close: () => closeDescriptor(fd),
      };
    },
    async stagedPublish(stagingDir, finalDir, files, durability, ready) {
      await fsp.mkdir(stagingDir, { mode: 0o700 });
      for (const file of files) {
        const fd = await openDescriptor(join(stagingDir, file.name), CREATE_NEW, 0o600);
        try {
          await writeAll(fd, file.data);
          if (durability === "full") await syncDescriptor(fd);
        } finally {
          await closeDescriptor(fd);
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
      const log = await openDescriptor(join(dir, "log"), APPEND, 0o600);
      const meta = await openDescriptor(
        join(dir, "meta"),
        constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC,
        0o600,
      );
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
          { name: "append 2 KB to a held handle", subject: { run: () => writeAll(log, line) } },
          {
            name: "write 600 B in place at offset 0 of a held handle",
            subject: {
              run: async () => void await writeDescriptorSome(meta, small, 0, small.length, 0),
            },
          },
          {
            name: "fsync a file after a 2 KB append",
            subject: { before: () => writeAll(log, line), run: () => syncDescriptor(log) },
          },
          { name: "fsync a directory", subject: { run: () => syncDirectory(dir) } },
          {
            name: "create a new file exclusively, write 600 B, close",
            subject: {
              run: async () => {
                const fd = await openDescriptor(fresh(), CREATE_NEW, 0o600);
                await writeAll(fd, small);
                await closeDescriptor(fd);
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
          await closeDescriptor(log);
          await closeDescriptor(meta);
        },
      };
    },
    async listCollectionHeads(collection) {
      const names = await sessionNames(collection);
      await eachLimited(names, FAST_LIST_CONCURRENCY, async (name) => {
        JSON.parse((await readWhole(join(collection, name, "meta.json"))).toString("utf8"));
        const fd = await openDescriptor(join(collection, name, "index.json"), constants.O_RDONLY);
        try {
          roundCountOfHead(await readFully(fd, 0, HEAD_BYTES));
        } finally {
          await closeDescriptor(fd);
        }
      });
      return names.length;
    },
    async listCollection(collection, full) {
      const names = await sessionNames(collection);
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
