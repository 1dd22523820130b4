/**
 * The port's file handle over `node:fs/promises`, shared by the Node adapter and the Deno
 * adapter's `openNoFollow` (through Deno's Node layer). Internal to the adapters.
 *
 * @module
 */
import type { Stats } from "node:fs";
import type { FileHandle as NativeHandle } from "node:fs/promises";
import type { EntryKind, FileHandle, FileInfo } from "../src/port/fs.ts";
import { callMapped, checkCount, checkReadRange, closedHandle, notWritable } from "./_errors.ts";
import type { ErrorMapper } from "./_node_read.ts";

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

/**
 * The port's `FileHandle` over a `node:fs/promises` handle; native errors are mapped with the
 * adapter's mapper.
 */
export class NodeFileHandle implements FileHandle {
  readonly #handle: NativeHandle;
  readonly #path: string;
  readonly #append: boolean;
  readonly #writable: boolean;
  readonly #map: ErrorMapper;
  /** The write position of a non-append handle; tracked here so reads never move it. */
  #position = 0;
  /** Set when the close runs: every later call fails with EBADF (Node's own close is idempotent). */
  #closed = false;
  /**
   * Every call runs one after another, in call order, as on the other adapters: two writes issued
   * without waiting never land at the same position, a sync covers every write issued before it,
   * and a read or stat sees the writes, truncations and close issued before it.
   */
  #queue: Promise<unknown> = Promise.resolve();

  /**
   * Wraps `handle`, opened at `path` (in append mode when `append`, for writing when `writable`);
   * `map` maps native errors.
   */
  constructor(
    handle: NativeHandle,
    path: string,
    append: boolean,
    writable: boolean,
    map: ErrorMapper,
  ) {
    this.#handle = handle;
    this.#path = path;
    this.#append = append;
    this.#writable = writable;
    this.#map = map;
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
      let want = length;
      if (want > LARGE_READ) {
        // A length taken from a file's metadata may lie: never allocate past the end of the file.
        want = Math.max(0, Math.min(want, (await this.#handle.stat()).size - offset));
      }
      const buffer = new Uint8Array(want);
      let filled = 0;
      while (filled < want) {
        const { bytesRead } = await this.#handle.read(
          buffer,
          filled,
          Math.min(want - filled, MAX_READ_CALL),
          offset + filled,
        );
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      return filled === want ? buffer : buffer.slice(0, filled);
    });
  }

  write(data: Uint8Array): Promise<void> {
    return this.#serial("write", async () => {
      if (!this.#writable) throw notWritable("write", this.#path);
      let written = 0;
      while (written < data.length) {
        // An append handle writes at the end whatever the position (O_APPEND).
        const position = this.#append ? null : this.#position;
        const { bytesWritten } = await this.#handle.write(
          data,
          written,
          data.length - written,
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
      await this.#handle.truncate(length);
      if (this.#position > length) this.#position = length;
    });
  }

  sync(): Promise<void> {
    return this.#serial("sync", () => this.#handle.sync());
  }

  stat(): Promise<FileInfo> {
    return this.#serial("fstat", async () => toInfo(await this.#handle.stat()));
  }

  close(): Promise<void> {
    return this.#serial("close", () => {
      this.#closed = true;
      return this.#handle.close();
    });
  }
}
