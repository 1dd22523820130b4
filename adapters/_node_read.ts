/**
 * Whole-file reads over the callback `readFile` of `node:fs`, and no-follow opens over `node:fs`
 * descriptors, shared by the Node adapter and the Deno adapter's `readFileNoFollow` and
 * `openNoFollow` (through Deno's Node layer). Internal to the adapters.
 *
 * @module
 */
import {
  close as closeCallback,
  constants,
  fstat as fstatCallback,
  open as openCallback,
  read as readCallback,
  readFile as readFileCallback,
} from "node:fs";
import { Buffer } from "node:buffer";
import { open as openNative } from "node:fs/promises";
import { joinBytes } from "../src/port/bytes.ts";
import { FsError, FsIoError, IsADirectory } from "../src/port/errors.ts";
import type { OpenedFile } from "../src/port/fs.ts";
import { callMapped, codeOf, mapNativeError } from "./_errors.ts";
import {
  closeAfter,
  NodeFileHandle,
  openDescriptor,
  statDescriptor,
  toInfo,
} from "./_node_handle.ts";

/** Maps a native error of `syscall` on `path` to the port's typed error. */
export type ErrorMapper = (error: unknown, syscall: string, path: string) => FsError;

/** A plain `Uint8Array` over a Buffer's bytes, copied when the Buffer shares a pool. */
export function plainBytes(buffer: Uint8Array): Uint8Array {
  if (buffer.byteOffset === 0 && buffer.byteLength === buffer.buffer.byteLength) {
    return new Uint8Array(buffer.buffer, 0, buffer.byteLength);
  }
  return new Uint8Array(buffer);
}

/** The most one read call of `readInChunks` asks for (the runtime refuses lengths past 2 GiB). */
const READ_CHUNK = 1024 * 1024 * 1024;

/**
 * Reads a whole file through a handle opened with `flags`, in reads of at most `chunk` bytes
 * (default `READ_CHUNK`): for a file over 2 GiB, which the callback `readFile` refuses
 * (`ERR_FS_FILE_TOO_LARGE`). A file larger than one `Uint8Array` holds fails with `FsIoError`
 * code `"EFBIG"`, naming the port call `syscall`. Native errors are thrown as they are.
 */
export async function readInChunks(
  path: string,
  flags: number,
  chunk: number = READ_CHUNK,
  syscall: string = "readFile",
): Promise<Uint8Array> {
  const handle = await openNative(path, flags);
  try {
    const size = (await handle.stat()).size;
    let buffer: Uint8Array;
    try {
      buffer = new Uint8Array(size);
    } catch (error) {
      throw new FsIoError("EFBIG", syscall, path, `File too large to read whole: ${size} bytes`, {
        cause: error,
      });
    }
    let filled = 0;
    while (filled < size) {
      const { bytesRead } = await handle.read(
        buffer,
        filled,
        Math.min(size - filled, chunk),
        filled,
      );
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return filled === size ? buffer : buffer.slice(0, filled);
  } finally {
    await handle.close();
  }
}

/**
 * Reads a whole file with the callback `readFile`, opened with `flags` when given: the runtime
 * drives open, fstat, read and close itself, about three times faster than `fs/promises` on
 * small files (meta.json, index.json), in Node and Deno. A file it refuses for its size (over
 * 2 GiB on Node, larger than memory on Deno) is read in chunks, opened with the same flags.
 * Errors are mapped to the port's, naming the port call `syscall` (by default `readFile`, or
 * `readFileNoFollow` when `flags` are given). `whole` is the one-call read (replaced only by
 * tests, to refuse a small file as Node refuses a large one).
 */
export async function readWith(
  path: string,
  flags: number | undefined,
  map: ErrorMapper = mapNativeError,
  whole: (path: string, flags: number | undefined) => Promise<Uint8Array> = readWhole,
  syscall: string = flags === undefined ? "readFile" : "readFileNoFollow",
): Promise<Uint8Array> {
  try {
    return await whole(path, flags);
  } catch (error) {
    if (!tooLargeForOneCall(error)) throw map(error, syscall, path);
  }
  return await callMapped(
    map,
    syscall,
    path,
    () => readInChunks(path, flags ?? constants.O_RDONLY, READ_CHUNK, syscall),
  );
}

/**
 * True when a one-call read refused a file for its size: Node refuses one over 2 GiB
 * (`ERR_FS_FILE_TOO_LARGE`); Deno, and Deno's Node layer, fail to allocate a buffer for one larger
 * than memory holds (`ENOMEM`, as a sparse file of terabytes is). Read in chunks, such a file
 * is read whole or fails with `EFBIG`, as on Node.
 */
export function tooLargeForOneCall(error: unknown): boolean {
  const code = codeOf(error);
  return code === "ERR_FS_FILE_TOO_LARGE" || code === "ENOMEM";
}

/** One callback `readFile` of `path`, opened with `flags` when given; native errors as thrown. */
function readWhole(path: string, flags: number | undefined): Promise<Uint8Array> {
  return new Promise<Uint8Array>((resolve, reject) => {
    const done = (error: Error | null, data: Uint8Array): void => {
      if (error === null) resolve(plainBytes(data));
      else reject(error);
    };
    if (flags === undefined) readFileCallback(path, done);
    // Node's types name `flag` a string, but it takes numeric flags as `open` does (Node and
    // Deno): the only way to pass O_NOFOLLOW.
    else readFileCallback(path, { flag: flags as unknown as string }, done);
  });
}

/** `FileSystem.readFile` over `node:fs`. */
export function readFileNative(path: string): Promise<Uint8Array> {
  return readWith(path, undefined, mapNativeError, readWhole, "readFile");
}

/**
 * The open flags of `readFileNoFollow`: read-only, refusing a final symlink (`ELOOP`), never
 * waiting on a FIFO. Undefined where the platform lacks them (Windows).
 */
const NO_FOLLOW_READ: number | undefined =
  typeof constants.O_NOFOLLOW === "number" && typeof constants.O_NONBLOCK === "number"
    ? constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK
    : undefined;

/** What `readFileNoFollow` returns for a FIFO, socket or device: it is never read. */
const NOTHING_READ = new Uint8Array(0);

/**
 * `FileSystem.readFileNoFollow` over `node:fs` with the adapter's error mapping `map` (Deno's
 * Node layer rejects a denied path with Deno's own error class), where the platform has
 * `O_NOFOLLOW` and `O_NONBLOCK`; undefined elsewhere (the adapters then leave the method out).
 *
 * With `checked` false (Node), one open, one `fstat` of what it opened and the reads of a regular
 * file, on callback descriptors (as cheap as the callback `readFile`, which would read a device
 * such as `/dev/zero` without end): what is not a regular file is closed unread and reads as
 * empty. With `checked` (Deno, whose callback descriptor calls cost several times its one-call
 * `readFile`), the one-call read with the same flags: the caller has checked by `lstat` that no
 * device is there (see `denoFs`).
 */
export function readFileNoFollowNative(
  map: ErrorMapper,
  checked = false,
): ((path: string) => Promise<Uint8Array>) | undefined {
  const flags = NO_FOLLOW_READ;
  if (flags === undefined) return undefined;
  const syscall = "readFileNoFollow";
  if (checked) return (path: string) => readWith(path, flags, map, readWhole, syscall);
  return (path: string): Promise<Uint8Array> =>
    readRegularOnly(path, flags, syscall).catch((error) => {
      throw error instanceof FsError ? error : map(error, syscall, path);
    });
}

/**
 * Opens `path` with `flags`, reads it whole if an `fstat` of the open descriptor says it is a
 * regular file (in reads of at most `READ_CHUNK` bytes, up to the size the `fstat` found, or to
 * the end when it found 0), and closes it. A directory fails with `IsADirectory`, as a read of
 * one does; anything else is closed unread and reads as empty. A file larger than one
 * `Uint8Array` holds fails with `FsIoError` code `"EFBIG"`; native errors are thrown as they are.
 */
function readRegularOnly(path: string, flags: number, syscall: string): Promise<Uint8Array> {
  return new Promise<Uint8Array>((resolve, reject) => {
    openCallback(path, flags, (error, fd) => {
      if (error !== null) return reject(error);
      const finish = (failure: unknown, bytes?: Uint8Array): void =>
        closeCallback(fd, (closeError) => {
          if (failure !== undefined) reject(failure);
          else if (closeError !== null) reject(closeError);
          else resolve(bytes as Uint8Array);
        });
      fstatCallback(fd, (error, stats) => {
        if (error !== null) return finish(error);
        if (stats.isDirectory()) return finish(new IsADirectory(syscall, path));
        if (!stats.isFile()) return finish(undefined, NOTHING_READ);
        // A size of 0 may not be the size (procfs, a filesystem that does not know it): read to
        // the end, as the callback `readFile` does.
        if (stats.size === 0) return readToEnd(fd, finish);
        const size = stats.size;
        let buffer: Uint8Array;
        try {
          buffer = plainBytes(Buffer.allocUnsafeSlow(size));
        } catch (cause) {
          const message = `File too large to read whole: ${size} bytes`;
          return finish(new FsIoError("EFBIG", syscall, path, message, { cause }));
        }
        let filled = 0;
        const next = (): void => {
          if (filled === size) return finish(undefined, buffer);
          const length = Math.min(size - filled, READ_CHUNK);
          readCallback(fd, buffer, filled, length, filled, (error, bytesRead) => {
            if (error !== null) return finish(error);
            // A file cut short since the `fstat`: what it still holds.
            if (bytesRead === 0) return finish(undefined, buffer.slice(0, filled));
            filled += bytesRead;
            next();
          });
        };
        next();
      });
    });
  });
}

/** What one read of `readToEnd` asks for (the callback `readFile` asks for as much). */
const TO_END_CHUNK = 64 * 1024;

/**
 * Reads the descriptor `fd` of a regular file from offset 0 until a read returns no bytes, and
 * calls `finish` with what it read or the error of a read.
 */
function readToEnd(fd: number, finish: (failure: unknown, bytes?: Uint8Array) => void): void {
  const chunks: Uint8Array[] = [];
  let total = 0;
  const next = (): void => {
    const chunk = new Uint8Array(TO_END_CHUNK);
    readCallback(fd, chunk, 0, chunk.length, total, (error, bytesRead) => {
      if (error !== null) return finish(error);
      if (bytesRead === 0) return finish(undefined, joinBytes(chunks, total));
      chunks.push(chunk.subarray(0, bytesRead));
      total += bytesRead;
      next();
    });
  };
  next();
}

/**
 * The open flags of `openAppendNoFollow`: read and write, every write at the end (as the adapters'
 * `open` with `append`), refusing a final symlink, never waiting on a FIFO.
 */
const NO_FOLLOW_APPEND: number | undefined = NO_FOLLOW_READ === undefined
  ? undefined
  : constants.O_RDWR | constants.O_APPEND | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * `FileSystem.openNoFollow` (or, with `appending`, `openAppendNoFollow`) over `node:fs` descriptors
 * with the adapter's error mapping `map`: one open with the flags of `readFileNoFollow` (or for
 * appending) and one `fstat` of what it opened. Undefined where the platform lacks the flags (the
 * adapters then leave the method out).
 */
export function openNoFollowNative(
  map: ErrorMapper,
  appending = false,
): ((path: string) => Promise<OpenedFile>) | undefined {
  const flags = appending ? NO_FOLLOW_APPEND : NO_FOLLOW_READ;
  if (flags === undefined) return undefined;
  const syscall = appending ? "openAppendNoFollow" : "openNoFollow";
  return (path: string): Promise<OpenedFile> =>
    callMapped(map, syscall, path, async () => {
      // The handle keeps O_NONBLOCK, which reads and writes of a regular file ignore (only a FIFO
      // or a device, refused by the caller from the fstat below, would be non-blocking).
      const fd = await openDescriptor(path, flags);
      const info = await statDescriptor(fd).then(toInfo).catch((error) => closeAfter(fd, error));
      if (info.kind === "directory") await closeAfter(fd, new IsADirectory(syscall, path));
      return { handle: new NodeFileHandle(fd, path, appending, appending, map), info };
    });
}
