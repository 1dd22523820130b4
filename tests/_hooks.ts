// A filesystem seen through hooks (to pause or fail one call of one caller at a chosen point),
// and a gate to hold a caller there: the races of the store's tests are staged with these. Also a
// filesystem that records what is read through it, and the two ways a fast listing reads.
import type { FileHandle, FileSystem, OpenedFile } from "../src/port/fs.ts";

/** What runs before and after every call of a hooked filesystem. */
export interface FsHooks {
  /** Awaited before the call; throwing fails the call without running it. */
  readonly before?: (method: string, args: unknown[]) => Promise<void> | void;
  /** Awaited after the call resolved. */
  readonly after?: (method: string, args: unknown[]) => Promise<void> | void;
}

/** `fs` with `hooks` run around every call (a separate object: in-process locks are not shared). */
export function hookedFs(fs: FileSystem, hooks: FsHooks = {}): FileSystem {
  return new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        await hooks.before?.(String(prop), args);
        const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        await hooks.after?.(String(prop), args);
        return result;
      };
    },
  });
}

/** A promise to wait on and the function that opens it. */
export function gate(): { readonly wait: Promise<void>; readonly open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

/**
 * `fs` as a port without `readFileNoFollow`, `openNoFollow` and `openAppendNoFollow`: readers
 * and the writer then check a file's kind (`lstat`, `readDir`) before opening it, as they do on
 * adapters that cannot refuse a link in the open.
 */
export function withoutNoFollow(fs: FileSystem): FileSystem {
  return new Proxy(fs, {
    get(target, prop) {
      if (
        prop === "readFileNoFollow" || prop === "openNoFollow" || prop === "openAppendNoFollow"
      ) return undefined;
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/**
 * `fs` with the file at `path` swapped, just before its first open (`open`, `openNoFollow` or
 * `openAppendNoFollow`; with `appending`, its first open for appending), after every check of its
 * kind, for a link to a copy of it at `target`: read through the link it would look valid. The
 * original is moved aside to `aside`. `swapped()` says whether the open came.
 */
export function linkedBeforeOpen(
  fs: FileSystem,
  path: string,
  target: string,
  aside: string,
  options: { readonly appending?: boolean } = {},
): { readonly fs: FileSystem; readonly swapped: () => boolean } {
  let swapped = false;
  const racing = hookedFs(fs, {
    async before(method, args) {
      const appending = method === "openAppendNoFollow" ||
        (method === "open" && (args[1] as { append?: boolean } | undefined)?.append === true);
      const opening = method === "open" || method === "openNoFollow" ||
        method === "openAppendNoFollow";
      if (opening && args[0] === path && !swapped && (options.appending !== true || appending)) {
        swapped = true;
        await fs.writeFile(target, await fs.readFile(path));
        await fs.rename(path, aside);
        await fs.symlink(target, path);
      }
    },
  });
  return { fs: racing, swapped: () => swapped };
}

/** The two ways a fast listing reads: no-follow reads (MemoryFs has them), or a listing first. */
export const READ_MODES = [
  { name: "no-follow reads", port: (fs: FileSystem): FileSystem => fs },
  { name: "a directory listing", port: withoutNoFollow },
] as const;

/** What a recording filesystem saw: each read (whole-file or by a handle) and each call. */
export interface Recorded {
  readonly fs: FileSystem;
  readonly reads: { path: string; bytes: number }[];
  readonly calls: string[];
}

/**
 * `fs` recording the bytes every read returns (whole-file reads and handle reads), by path, and
 * the name of every call made on an index.json.
 */
export function recording(fs: FileSystem): Recorded {
  const reads: { path: string; bytes: number }[] = [];
  const calls: string[] = [];
  const counted = (handle: FileHandle, path: string): FileHandle => ({
    read: async (offset, length) => {
      const bytes = await handle.read(offset, length);
      reads.push({ path, bytes: bytes.length });
      return bytes;
    },
    write: (data) => handle.write(data),
    truncate: (length) => handle.truncate(length),
    sync: () => handle.sync(),
    stat: () => handle.stat(),
    close: () => handle.close(),
  });
  const wrapped = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        const path = String(args[0]);
        if (path.endsWith("/index.json")) calls.push(String(prop));
        const result = await value.apply(target, args);
        if (prop === "readFile" || prop === "readFileNoFollow") {
          reads.push({ path, bytes: (result as Uint8Array).length });
        }
        if (prop === "open") return counted(result, path);
        if (prop === "openNoFollow") return { ...result, handle: counted(result.handle, path) };
        return result;
      };
    },
  });
  return { fs: wrapped, reads, calls };
}

/** True for a call that reads a whole file (`readFile`, or `readFileNoFollow` where the port has it). */
export function isRead(method: string): boolean {
  return method === "readFile" || method === "readFileNoFollow";
}

/**
 * `fs` with every handle it opens (`open`, `openNoFollow`, `openAppendNoFollow`) passed through
 * `wrap`, with the path it was opened at and the method that opened it.
 */
export function wrappedHandles(
  fs: FileSystem,
  wrap: (handle: FileHandle, path: string, method: string) => FileHandle | Promise<FileHandle>,
): FileSystem {
  return new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        const method = String(prop);
        const path = String(args[0]);
        if (method === "open") return await wrap(result as FileHandle, path, method);
        if (method === "openNoFollow" || method === "openAppendNoFollow") {
          const opened = result as OpenedFile;
          return { ...opened, handle: await wrap(opened.handle, path, method) };
        }
        return result;
      };
    },
  });
}
