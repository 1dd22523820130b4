/**
 * A custom adapter: `instrumentedFs(inner)` wraps any `FileSystem` and counts calls, bytes read
 * and written, and fsyncs — what a host needs to export storage metrics. It passes the published
 * conformance suite (`tests/custom_adapter.test.ts` runs it over the memory and Node adapters).
 *
 * A wrapper keeps everything optional that `inner` offers: its `processes` probe (without it a
 * store makes no lock files, and two processes, or two stores over two wrappers in one process,
 * could write one session at once), its no-follow reads and opens (without them links and FIFOs
 * are checked by a separate call first) and its `homeDir`.
 *
 * Run the demo: `deno run -A examples/custom_adapter.ts`.
 *
 * @module
 */
import type {
  DirEntry,
  FileHandle,
  FileInfo,
  FileSystem,
  MkdirOptions,
  OpenedFile,
  OpenOptions,
  RemoveOptions,
  WriteFileOptions,
} from "../mod.ts";
import { SessionStore } from "../mod.ts";
import { MemoryFs } from "../adapters/memory.ts";

/** Counters kept by `instrumentedFs`. */
export interface StorageMetrics {
  /** Calls per operation name. */
  readonly calls: Record<string, number>;
  /** Bytes returned by reads. */
  bytesRead: number;
  /** Bytes passed to writes. */
  bytesWritten: number;
  /** File and directory fsyncs. */
  syncs: number;
}

/** Wraps `inner`, counting every call into `metrics`. Adds no storage logic of its own. */
export function instrumentedFs(inner: FileSystem, metrics: StorageMetrics): FileSystem {
  const count = (name: string): void => {
    metrics.calls[name] = (metrics.calls[name] ?? 0) + 1;
  };
  const wrapHandle = (handle: FileHandle): FileHandle => ({
    async read(offset: number, length: number): Promise<Uint8Array> {
      count("handle.read");
      const data = await handle.read(offset, length);
      metrics.bytesRead += data.length;
      return data;
    },
    async write(data: Uint8Array): Promise<void> {
      count("handle.write");
      await handle.write(data);
      metrics.bytesWritten += data.length;
    },
    truncate: (
      length: number,
    ): Promise<void> => (count("handle.truncate"), handle.truncate(length)),
    async sync(): Promise<void> {
      count("handle.sync");
      await handle.sync();
      metrics.syncs++;
    },
    stat: (): Promise<FileInfo> => (count("handle.stat"), handle.stat()),
    close: (): Promise<void> => (count("handle.close"), handle.close()),
  });
  const fs: FileSystem = {
    open: async (path: string, options?: OpenOptions): Promise<FileHandle> => {
      count("open");
      return wrapHandle(await inner.open(path, options));
    },
    readFile: async (path: string): Promise<Uint8Array> => {
      count("readFile");
      const data = await inner.readFile(path);
      metrics.bytesRead += data.length;
      return data;
    },
    writeFile: async (
      path: string,
      data: Uint8Array,
      options?: WriteFileOptions,
    ): Promise<void> => {
      count("writeFile");
      await inner.writeFile(path, data, options);
      metrics.bytesWritten += data.length;
    },
    rename: (from: string, to: string): Promise<void> => (count("rename"), inner.rename(from, to)),
    remove: (
      path: string,
      options?: RemoveOptions,
    ): Promise<void> => (count("remove"), inner.remove(path, options)),
    mkdir: (
      path: string,
      options?: MkdirOptions,
    ): Promise<void> => (count("mkdir"), inner.mkdir(path, options)),
    readDir: (path: string): Promise<DirEntry[]> => (count("readDir"), inner.readDir(path)),
    stat: (path: string): Promise<FileInfo> => (count("stat"), inner.stat(path)),
    lstat: (path: string): Promise<FileInfo> => (count("lstat"), inner.lstat(path)),
    realPath: (path: string): Promise<string> => (count("realPath"), inner.realPath(path)),
    chmod: (path: string, mode: number): Promise<void> => (count("chmod"), inner.chmod(path, mode)),
    symlink: (
      target: string,
      path: string,
    ): Promise<void> => (count("symlink"), inner.symlink(target, path)),
    readLink: (path: string): Promise<string> => (count("readLink"), inner.readLink(path)),
    syncDir: async (path: string): Promise<void> => {
      count("syncDir");
      await inner.syncDir(path);
      metrics.syncs++;
    },
    utime: (
      path: string,
      mtimeMs: number,
    ): Promise<void> => (count("utime"), inner.utime(path, mtimeMs)),
  };
  // The optional members `inner` has, kept: the process probe (cross-process locks), the
  // no-follow calls (counted and measured like the others) and the home directory.
  const readNoFollow = inner.readFileNoFollow?.bind(inner);
  const openNoFollow = inner.openNoFollow?.bind(inner);
  const openAppendNoFollow = inner.openAppendNoFollow?.bind(inner);
  const home = inner.homeDir?.bind(inner);
  const opened = async (name: string, open: () => Promise<OpenedFile>): Promise<OpenedFile> => {
    count(name);
    const file = await open();
    return { handle: wrapHandle(file.handle), info: file.info };
  };
  return {
    ...fs,
    ...(inner.processes === undefined ? {} : { processes: inner.processes }),
    ...(readNoFollow === undefined ? {} : {
      readFileNoFollow: async (path: string): Promise<Uint8Array> => {
        count("readFileNoFollow");
        const data = await readNoFollow(path);
        metrics.bytesRead += data.length;
        return data;
      },
    }),
    ...(openNoFollow === undefined ? {} : {
      openNoFollow: (path: string) => opened("openNoFollow", () => openNoFollow(path)),
    }),
    ...(openAppendNoFollow === undefined ? {} : {
      openAppendNoFollow: (path: string) =>
        opened("openAppendNoFollow", () => openAppendNoFollow(path)),
    }),
    ...(home === undefined ? {} : { homeDir: home }),
  };
}

/** Creates empty counters. */
export function newMetrics(): StorageMetrics {
  return { calls: {}, bytesRead: 0, bytesWritten: 0, syncs: 0 };
}

async function demo(): Promise<void> {
  const metrics = newMetrics();
  const memory = new MemoryFs();
  await memory.mkdir("/work/app", { recursive: true });
  const store = new SessionStore({
    fs: instrumentedFs(memory, metrics),
    agentDir: "/home/user/.loop",
  });
  const session = await store.create("/work/app");
  await session.commit([{ role: "user", content: "Count my writes", timestamp: Date.now() }]);
  await session.close();
  console.log(
    `one commit: ${metrics.syncs} fsyncs, ${metrics.bytesWritten} bytes written, ${
      metrics.calls["rename"] ?? 0
    } renames`,
  );
}

if ((import.meta as { main?: boolean }).main === true) demo();
