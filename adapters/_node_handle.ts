/**
 * The port's file handle over a `node:fs` file descriptor driven by the callback calls, shared by
 * the Node adapter and the Deno adapter's `openNoFollow` (through Deno's Node layer). Internal to
 * the adapters.
 *
 * The callback calls, not `node:fs/promises` handles, for the same system calls: on Node, opening,
 * reading the head of and closing 1,000 small files, 32 at a time (as a listing reads index.json
 * by its head), took 17 ms against 47 ms, and an exclusive create, write and close followed by a
 * rename 216 µs against 241 µs; in the store, 2-3% less per save and pin on Node and Deno.
 *
 * A write of up to `SYNC_WRITE_LIMIT` bytes is one synchronous call on the main thread, as the
 * Deno adapter writes and as Deno's Node layer writes: it lands in the page cache in microseconds,
 * where an asynchronous one waits for a thread of libuv's pool and then for the event loop (on a
 * 2-core machine, ~57 µs for the 600 bytes of a `meta.json`). A write that blocks (a page cache
 * full of dirty pages, a stalled network filesystem) holds the event loop while it lasts; larger
 * writes, fsyncs, reads, opens and closes stay asynchronous.
 *
 * @module
 */
import {
  close as closeFd,
  fstat,
  fsync,
  ftruncate,
  open as openFd,
  read as readFd,
  type Stats,
  write as writeFd,
  writeSync as writeFdSync,
} from "node:fs";
import type { EntryKind, FileHandle, FileInfo } from "../src/port/fs.ts";
import { callMapped, checkCount, checkReadRange, closedHandle, notWritable } from "./_errors.ts";
import type { ErrorMapper } from "./_node_read.ts";

/** A callback's outcome as a promise: rejected with the native error, else with the value. */
function settle<T>(start: (done: (error: Error | null, value: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    start((
      error,
      value,
    ) => (error === null || error === undefined ? resolve(value) : reject(error)));
  });
}

/** Opens `path` with `flags` (and `mode` when it creates); native errors as thrown. */
export function openDescriptor(path: string, flags: number, mode = 0o666): Promise<number> {
  return settle<number>((done) => openFd(path, flags, mode, done));
}

/** The `Stats` of descriptor `fd`; native errors as thrown. */
export function statDescriptor(fd: number): Promise<Stats> {
  return settle<Stats>((done) => fstat(fd, done));
}

/** Flushes descriptor `fd` to the disk; native errors as thrown. */
export function syncDescriptor(fd: number): Promise<void> {
  return settle<void>((done) => fsync(fd, (error) => done(error, undefined)));
}

/**
 * Reads up to `length` bytes at file offset `position` of descriptor `fd` into `buffer` from
 * `offset`; resolves with the number read (0 at the end of the file). Native errors as thrown.
 */
export function readDescriptor(
  fd: number,
  buffer: Uint8Array,
  offset: number,
  length: number,
  position: number,
): Promise<number> {
  return settle<number>((done) => readFd(fd, buffer, offset, length, position, done));
}

/**
 * Writes up to `length` bytes of `data` from `offset` to descriptor `fd`, at file offset
 * `position` (null: the current position, the end for an append descriptor); resolves with the
 * number written. Native errors as thrown.
 */
export function writeDescriptor(
  fd: number,
  data: Uint8Array,
  offset: number,
  length: number,
  position: number | null,
): Promise<number> {
  return settle<number>((done) => writeFd(fd, data, offset, length, position, done));
}

/**
 * Writes of at most this many bytes are one synchronous call on the main thread (see the module
 * doc), in the Node and Deno adapters; larger writes stay asynchronous.
 */
export const SYNC_WRITE_LIMIT = 64 * 1024;

/**
 * `writeDescriptor`, synchronously when `length` is at most `SYNC_WRITE_LIMIT`: the number written,
 * or a promise of it. Native errors are thrown or rejected as they are.
 */
export function writeDescriptorSome(
  fd: number,
  data: Uint8Array,
  offset: number,
  length: number,
  position: number | null,
): number | Promise<number> {
  return length <= SYNC_WRITE_LIMIT
    ? writeFdSync(fd, data, offset, length, position)
    : writeDescriptor(fd, data, offset, length, position);
}

/** Cuts (or extends) the file of descriptor `fd` to `length` bytes; native errors as thrown. */
export function truncateDescriptor(fd: number, length: number): Promise<void> {
  return settle<void>((done) => ftruncate(fd, length, (error) => done(error, undefined)));
}

/** Closes descriptor `fd`; native errors as thrown. */
export function closeDescriptor(fd: number): Promise<void> {
  return settle<void>((done) => closeFd(fd, (error) => done(error, undefined)));
}

/**
 * Closes descriptor `fd` after a failure, which is thrown as it was; a failure of the close is
 * dropped (the first one is what the caller reports).
 */
export async function closeAfter(fd: number, error: unknown): Promise<never> {
  await closeDescriptor(fd).catch(() => undefined);
  throw error;
}

function kindOf(stats: Stats): EntryKind {
  if (stats.isFile()) return "file";
  if (stats.isDirectory()) return "directory";
  if (stats.isSymbolicLink()) return "symlink";
  return "other";
}

/** What a `node:fs` `Stats` says, as the port's `FileInfo`. */
export function toInfo(stats: Stats): FileInfo {
  return {
    kind: kindOf(stats),
    size: stats.size,
    mode: stats.mode & 0o777,
    mtimeMs: stats.mtimeMs,
  };
}

/** Reads longer than this are first clamped to the file's size. */
const LARGE_READ = 64 * 1024 * 1024;
/** The most one read call asks for (the runtime refuses lengths past 2 GiB). */
const MAX_READ_CALL = 1024 * 1024 * 1024;
/** The most one write call gives (the runtime refuses lengths past 2 GiB, as for reads). */
const MAX_WRITE_CALL = MAX_READ_CALL;

/**
 * Closes the descriptor of a handle that was dropped without being closed, as a
 * `node:fs/promises` handle does on Node (Deno's Node layer does not): the descriptor is still the
 * handle's own (a close unregisters it first), so no other file's descriptor is ever closed.
 */
const unclosed = new FinalizationRegistry<number>((fd) => {
  closeFd(fd, () => undefined);
});

/**
 * The port's `FileHandle` over a `node:fs` file descriptor; native errors are mapped with the
 * adapter's mapper. The descriptor is closed by `close()` only (or, for a handle dropped unclosed,
 * when it is collected).
 */
export class NodeFileHandle implements FileHandle {
  readonly #fd: number;
  readonly #path: string;
  readonly #append: boolean;
  readonly #writable: boolean;
  readonly #map: ErrorMapper;
  /** The write position of a non-append handle; tracked here so reads never move it. */
  #position = 0;
  /** Set when the close runs: every later call fails with EBADF, never touching the descriptor. */
  #closed = false;
  /**
   * Every call runs one after another, in call order, as on the other adapters: two writes issued
   * without waiting never land at the same position, a sync covers every write issued before it,
   * and a read or stat sees the writes, truncations and close issued before it.
   */
  #queue: Promise<unknown> = Promise.resolve();

  /**
   * Takes over descriptor `fd`, opened at `path` (in append mode when `append`, for writing when
   * `writable`); `map` maps native errors.
   */
  constructor(fd: number, path: string, append: boolean, writable: boolean, map: ErrorMapper) {
    this.#fd = fd;
    this.#path = path;
    this.#append = append;
    this.#writable = writable;
    this.#map = map;
    unclosed.register(this, fd, this);
  }

  #serial<T>(syscall: string, run: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(() =>
      callMapped(this.#map, syscall, this.#path, () => {
        if (this.#closed) throw closedHandle(syscall, this.#path);
        return run();
      })
    );
    this.#queue = result.then(() => undefined, () => undefined);
    return result;
  }

  read(offset: number, length: number): Promise<Uint8Array> {
    return this.#serial("read", async () => {
      checkReadRange(this.#path, offset, length);
      const fd = this.#fd;
      let want = length;
      if (want > LARGE_READ) {
        // A length taken from a file's metadata may lie: never allocate past the end of the file.
        want = Math.max(0, Math.min(want, (await statDescriptor(fd)).size - offset));
      }
      const buffer = new Uint8Array(want);
      let filled = 0;
      while (filled < want) {
        const chunk = Math.min(want - filled, MAX_READ_CALL);
        const bytesRead = await readDescriptor(fd, buffer, filled, chunk, offset + filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      return filled === want ? buffer : buffer.slice(0, filled);
    });
  }

  write(data: Uint8Array): Promise<void> {
    return this.#serial("write", async () => {
      if (!this.#writable) throw notWritable("write", this.#path);
      const fd = this.#fd;
      let written = 0;
      while (written < data.length) {
        // An append handle writes at the end whatever the position (O_APPEND).
        const position = this.#append ? null : this.#position;
        const bytesWritten = await writeDescriptorSome(
          fd,
          data,
          written,
          Math.min(data.length - written, MAX_WRITE_CALL),
          position,
        );
        written += bytesWritten;
        if (!this.#append) this.#position += bytesWritten;
      }
    });
  }

  truncate(length: number): Promise<void> {
    return this.#serial("truncate", async () => {
      if (!this.#writable) throw notWritable("truncate", this.#path);
      checkCount("truncate", this.#path, length);
      await truncateDescriptor(this.#fd, length);
      if (this.#position > length) this.#position = length;
    });
  }

  sync(): Promise<void> {
    return this.#serial("sync", () => syncDescriptor(this.#fd));
  }

  stat(): Promise<FileInfo> {
    return this.#serial("fstat", async () => toInfo(await statDescriptor(this.#fd)));
  }

  close(): Promise<void> {
    return this.#serial("close", () => {
      this.#closed = true;
      unclosed.unregister(this);
      return closeDescriptor(this.#fd);
    });
  }
}
