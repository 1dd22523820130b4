/**
 * A `FileSystem` wrapper that counts the bytes read through it (whole-file reads and positioned
 * reads) and the files opened. The memory section of the report uses it to show, exactly and
 * independently of timing noise, that a page read or a fast list reads the same number of bytes
 * whatever the size of the history.
 *
 * @module
 */
import type {
  DirEntry,
  FileHandle,
  FileInfo,
  FileSystem,
  MkdirOptions,
  OpenOptions,
  RemoveOptions,
  WriteFileOptions,
} from "../mod.ts";

/** What a `CountingFs` has seen since its last `reset()`. */
export interface ReadCounts {
  /** Bytes returned by `readFile` and `FileHandle.read`. */
  readonly bytesRead: number;
  /** Calls of `open` and `readFile`. */
  readonly filesOpened: number;
}

/** Delegates every call to `inner` and counts the bytes read. */
export class CountingFs implements FileSystem {
  readonly #inner: FileSystem;
  #bytesRead = 0;
  #filesOpened = 0;

  /** Wraps `inner`. */
  constructor(inner: FileSystem) {
    this.#inner = inner;
  }

  /** The counts since construction or the last `reset()`. */
  get counts(): ReadCounts {
    return { bytesRead: this.#bytesRead, filesOpened: this.#filesOpened };
  }

  /** Sets the counts back to zero. */
  reset(): void {
    this.#bytesRead = 0;
    this.#filesOpened = 0;
  }

  /** Opens through the inner filesystem; reads through the handle are counted. */
  async open(path: string, options?: OpenOptions): Promise<FileHandle> {
    const handle = await this.#inner.open(path, options);
    this.#filesOpened++;
    const count = (bytes: Uint8Array): Uint8Array => {
      this.#bytesRead += bytes.length;
      return bytes;
    };
    return {
      read: async (offset, length) => count(await handle.read(offset, length)),
      write: (data) => handle.write(data),
      truncate: (length) => handle.truncate(length),
      sync: () => handle.sync(),
      stat: () => handle.stat(),
      close: () => handle.close(),
    };
  }

  /** Reads a whole file (counted). */
  async readFile(path: string): Promise<Uint8Array> {
    const bytes = await this.#inner.readFile(path);
    this.#filesOpened++;
    this.#bytesRead += bytes.length;
    return bytes;
  }

  /** Delegated. */
  writeFile(path: string, data: Uint8Array, options?: WriteFileOptions): Promise<void> {
    return this.#inner.writeFile(path, data, options);
  }

  /** Delegated. */
  rename(from: string, to: string): Promise<void> {
    return this.#inner.rename(from, to);
  }

  /** Delegated. */
  remove(path: string, options?: RemoveOptions): Promise<void> {
    return this.#inner.remove(path, options);
  }

  /** Delegated. */
  mkdir(path: string, options?: MkdirOptions): Promise<void> {
    return this.#inner.mkdir(path, options);
  }

  /** Delegated. */
  readDir(path: string): Promise<DirEntry[]> {
    return this.#inner.readDir(path);
  }

  /** Delegated. */
  stat(path: string): Promise<FileInfo> {
    return this.#inner.stat(path);
  }

  /** Delegated. */
  lstat(path: string): Promise<FileInfo> {
    return this.#inner.lstat(path);
  }

  /** Delegated. */
  realPath(path: string): Promise<string> {
    return this.#inner.realPath(path);
  }

  /** Delegated. */
  chmod(path: string, mode: number): Promise<void> {
    return this.#inner.chmod(path, mode);
  }

  /** Delegated. */
  symlink(target: string, path: string): Promise<void> {
    return this.#inner.symlink(target, path);
  }

  /** Delegated. */
  readLink(path: string): Promise<string> {
    return this.#inner.readLink(path);
  }

  /** Delegated. */
  syncDir(path: string): Promise<void> {
    return this.#inner.syncDir(path);
  }

  /** Delegated. */
  utime(path: string, mtimeMs: number): Promise<void> {
    return this.#inner.utime(path, mtimeMs);
  }

  /** Delegated. */
  homeDir(): string | undefined {
    return this.#inner.homeDir?.();
  }
}
