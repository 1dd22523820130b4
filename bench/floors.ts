/**
 * Floors: the least work an operation must physically do on a filesystem, measured beside our
 * operation in the same process. `Floors` is the interface the cases call; `portFloors` does the
 * work through the `FileSystem` port (for the memory adapter, where the port is the runtime),
 * and `bench/floors_node.ts` does it with `node:fs/promises` directly (the Node adapter's calls,
 * on Node and on Deno).
 *
 * @module
 */
import type { Durability, FileSystem, Sha256Factory } from "../mod.ts";
import { dirname, join } from "../src/port/path.ts";
import { joinBytes } from "../src/port/bytes.ts";
import { FAST_LIST_CONCURRENCY, FULL_LIST_CONCURRENCY } from "../src/loop/discovery.ts";
import { HEAD_BYTES, HEAD_TEXT_BYTES } from "../src/loop/storage.ts";
import type { Subject } from "./harness.ts";

/** A message log with a held append handle and a small metadata file beside it. */
export interface CommitFloor {
  /**
   * Appends `line` (fsynced under `"full"`) and replaces the metadata file with `meta` by atomic
   * replace (exclusive temp file, write, fsync, rename, directory fsync; no fsyncs under
   * `"ordered"`), in the fastest order these calls allow: the append and the temp file at once,
   * the rename once both are done.
   */
  commit(line: Uint8Array, meta: Uint8Array): Promise<void>;
  /** Closes the append handle. */
  close(): Promise<void>;
}

/** One file to write into a staged directory. */
export interface StagedFile {
  /** The file name inside the directory. */
  readonly name: string;
  /** The bytes. */
  readonly data: Uint8Array;
}

/** A file held open for range reads (see `Floors.openRange`). */
export interface RangeFloor {
  /** One positioned read of `length` bytes at `offset`, then `JSON.parse` of each line. */
  read(offset: number, length: number): Promise<number>;
  /** Closes the file. */
  close(): Promise<void>;
}

/** The floors of every benchmark case. */
export interface Floors {
  /** What the floors run on, for the report. */
  readonly name: string;
  /** Opens a commit floor over `dir/messages.jsonl` and `dir/meta.json` (created if missing). */
  commitLog(dir: string, durability: Durability): Promise<CommitFloor>;
  /** Replaces `path` with `data` atomically (fsyncs under `"full"`). */
  atomicReplace(path: string, data: Uint8Array, durability: Durability): Promise<void>;
  /**
   * Reads `length` bytes at `start` of `path`, hashes them with native SHA-256 and `JSON.parse`s
   * every line. Returns the number of lines.
   */
  readAndParse(path: string, start: number, length: number): Promise<number>;
  /**
   * Opens `path` for range reads: each `read` is one positioned read of `length` bytes at
   * `offset` on the open file, then `JSON.parse` of each line (a page reader keeps its file open).
   */
  openRange(path: string): Promise<RangeFloor>;
  /**
   * Writes `files` into a new `stagingDir`, fsyncs them and the directory, renames it to
   * `finalDir` (once `ready`, when given, has settled) and fsyncs the parent (no fsyncs under
   * `"ordered"`).
   */
  stagedPublish(
    stagingDir: string,
    finalDir: string,
    files: readonly StagedFile[],
    durability: Durability,
    ready?: Promise<unknown>,
  ): Promise<void>;
  /**
   * Removes `path` and everything below it, then fsyncs its parent directory (the removal made
   * durable, as prune-raw makes it).
   */
  removeTree(path: string): Promise<void>;
  /**
   * Lists the session directories of `collection` (names not starting with `.`) and reads and
   * parses each one's meta.json; with `full`, also reads, hashes and parses each one's
   * messages.jsonl. As many sessions at a time as a listing reads by default (32 fast, 4 full).
   * Returns the number of sessions.
   */
  listCollection(collection: string, full: boolean): Promise<number>;
  /**
   * The least a fast listing entry must read, with its user-message count (held by index.json,
   * not meta.json): lists the session directories of `collection`, reads and parses each one's
   * meta.json, then reads the head of its index.json (one positioned read of `HEAD_BYTES` on the
   * open file) and finds the round count in its first `HEAD_TEXT_BYTES`. As many sessions at a
   * time as a fast listing reads. Returns the number of sessions.
   */
  listCollectionHeads(collection: string): Promise<number>;
  /**
   * The single filesystem calls a commit is made of, as measurable subjects working in `dir`
   * (when the floors run on a real runtime), so the report can show what each costs on this disk.
   */
  primitives?(dir: string): Promise<DiskPrimitives>;
}

/** Single filesystem calls to measure, and how to release what they hold. */
export interface DiskPrimitives {
  /** Each call, named. */
  readonly subjects: readonly { readonly name: string; readonly subject: Subject }[];
  /** Closes held handles. */
  close(): Promise<void>;
}

/** Runs `task` over `items`, `limit` at a time. */
export async function eachLimited<T>(
  items: readonly T[],
  limit: number,
  task: (item: T) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await task(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

const decoder = new TextDecoder();

/** The session directories of `collection`: its directories whose names do not start with `.`. */
async function sessionNames(fs: FileSystem, collection: string): Promise<string[]> {
  return (await fs.readDir(collection))
    .filter((entry) => entry.kind === "directory" && !entry.name.startsWith("."))
    .map((entry) => entry.name);
}

const ROUND_COUNT = /"roundCount":([0-9]+)/;

/**
 * The round count an index.json head states (`head` holds the file's first bytes), found in its
 * first `HEAD_TEXT_BYTES` as a listing finds it. Throws when it is not there: the floor must do
 * the work it stands for.
 */
export function roundCountOfHead(head: Uint8Array): number {
  const found = ROUND_COUNT.exec(decoder.decode(head.subarray(0, HEAD_TEXT_BYTES)));
  if (found === null) throw new Error("no round count in the head of an index.json");
  return Number(found[1]);
}

/**
 * `JSON.parse`s every newline-terminated line of `bytes`, each line decoded alone (as the store
 * does: a line of ASCII becomes a one-byte string, which parses faster than a slice of a chunk
 * decoded whole); returns the line count.
 */
export function parseLines(bytes: Uint8Array): number {
  let count = 0;
  let start = 0;
  for (;;) {
    const end = bytes.indexOf(10, start);
    if (end < 0) break;
    JSON.parse(decoder.decode(bytes.subarray(start, end)));
    count++;
    start = end + 1;
  }
  return count;
}

/** Bytes read at a time by the streaming floors (the store reads its range 1 MiB at a time). */
export const FLOOR_CHUNK = 4 * 1024 * 1024;

/**
 * Reads `length` bytes at `start` in `FLOOR_CHUNK` pieces through `read`, feeds every piece to
 * `hash` and `JSON.parse`s every complete line, each decoded alone (`parseLines`). The next piece
 * is read while the current one is hashed and parsed, so reading overlaps the work on the main
 * thread. Returns the number of lines.
 */
export async function streamLines(
  read: (offset: number, length: number) => Promise<Uint8Array>,
  start: number,
  length: number,
  hash: (bytes: Uint8Array) => void,
): Promise<number> {
  let count = 0;
  let carry: Uint8Array | undefined;
  const piece = (position: number) =>
    position < length
      ? read(start + position, Math.min(FLOOR_CHUNK, length - position))
      : undefined;
  let next = piece(0);
  for (let position = 0; position < length; position += FLOOR_CHUNK) {
    const chunk = await (next as Promise<Uint8Array>);
    next = piece(position + FLOOR_CHUNK);
    hash(chunk);
    const last = chunk.lastIndexOf(10);
    if (last < 0) {
      carry = carry === undefined ? chunk : joinBytes([carry, chunk]);
      continue;
    }
    const lines = chunk.subarray(0, last + 1);
    count += parseLines(carry === undefined ? lines : joinBytes([carry, lines]));
    carry = chunk.subarray(last + 1);
  }
  return count;
}

let tempCounter = 0;

/** A temp name beside `path` for the floors' atomic replace. */
export function floorTempName(path: string): string {
  tempCounter++;
  return `${path}.floor${tempCounter}.tmp`;
}

/** Floors done through the `FileSystem` port (the memory adapter's own "runtime calls"). */
export function portFloors(fs: FileSystem, sha256: Sha256Factory): Floors {
  const stage = async (path: string, data: Uint8Array, durability: Durability) => {
    const temp = floorTempName(path);
    const handle = await fs.open(temp, { createNew: true, write: true, mode: 0o600 });
    await handle.write(data);
    if (durability === "full") await handle.sync();
    await handle.close();
    return temp;
  };
  const publish = async (temp: string, path: string, durability: Durability) => {
    await fs.rename(temp, path);
    if (durability === "full") await fs.syncDir(dirname(path));
  };
  const replace = async (path: string, data: Uint8Array, durability: Durability) => {
    await publish(await stage(path, data, durability), path, durability);
  };
  return {
    name: "FileSystem port",
    async commitLog(dir, durability) {
      const log = await fs.open(join(dir, "messages.jsonl"), { append: true, create: true });
      const meta = join(dir, "meta.json");
      return {
        async commit(line, bytes) {
          // As the node floor: append and temp file at once, then the rename.
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
      const handle = await fs.open(path);
      try {
        const hash = sha256();
        const lines = await streamLines(
          (offset, size) => handle.read(offset, size),
          start,
          length,
          (bytes) => hash.update(bytes),
        );
        hash.digestHex();
        return lines;
      } finally {
        await handle.close();
      }
    },
    async openRange(path) {
      const handle = await fs.open(path);
      return {
        read: async (offset, length) => parseLines(await handle.read(offset, length)),
        close: () => handle.close(),
      };
    },
    async stagedPublish(stagingDir, finalDir, files, durability, ready) {
      await fs.mkdir(stagingDir, { mode: 0o700 });
      for (const file of files) {
        const handle = await fs.open(join(stagingDir, file.name), {
          createNew: true,
          write: true,
          mode: 0o600,
        });
        await handle.write(file.data);
        if (durability === "full") await handle.sync();
        await handle.close();
      }
      if (durability === "full") await fs.syncDir(stagingDir);
      await ready;
      await fs.rename(stagingDir, finalDir);
      if (durability === "full") await fs.syncDir(dirname(finalDir));
    },
    async removeTree(path) {
      await fs.remove(path, { recursive: true });
      await fs.syncDir(dirname(path));
    },
    async listCollectionHeads(collection) {
      const names = await sessionNames(fs, collection);
      await eachLimited(names, FAST_LIST_CONCURRENCY, async (name) => {
        JSON.parse(decoder.decode(await fs.readFile(join(collection, name, "meta.json"))));
        const handle = await fs.open(join(collection, name, "index.json"));
        try {
          roundCountOfHead(await handle.read(0, HEAD_BYTES));
        } finally {
          await handle.close();
        }
      });
      return names.length;
    },
    async listCollection(collection, full) {
      const names = await sessionNames(fs, collection);
      // As many at once as the listing measured beside it reads.
      const limit = full ? FULL_LIST_CONCURRENCY : FAST_LIST_CONCURRENCY;
      await eachLimited(names, limit, async (name) => {
        JSON.parse(decoder.decode(await fs.readFile(join(collection, name, "meta.json"))));
        if (full) {
          const bytes = await fs.readFile(join(collection, name, "messages.jsonl"));
          sha256().update(bytes).digestHex();
          parseLines(bytes);
        }
      });
      return names.length;
    },
  };
}
