/**
 * The checks of the conformance suite. Each check gets a fresh fixture with an empty root and
 * asserts one rule of the `FileSystem` port contract.
 *
 * @module
 */
import type { FileHandle, FileSystem, OpenOptions } from "../port/fs.ts";
import {
  AlreadyExists,
  FsError,
  FsIoError,
  IsADirectory,
  NotADirectory,
  NotEmpty,
  NotFound,
} from "../port/errors.ts";
import { isAbsolute, join, normalize } from "../port/path.ts";
import {
  check,
  checkBytes,
  checkEqual,
  checkMode,
  checkRejects,
  checkSame,
  ConformanceFailure,
  describeError,
} from "./_assert.ts";
import type { FileSystemFixture } from "./conformance.ts";

/** An optional capability a check may need. */
export type Capability = "symlinks" | "modes";

/** One rule of the port contract. */
export interface Check {
  /** A sentence naming the rule. */
  readonly name: string;
  /** Capabilities the check needs; when the fixture lacks one, its fallback runs instead. */
  readonly needs?: readonly Capability[];
  /** Runs the check on a fresh fixture. */
  run(fixture: FileSystemFixture): Promise<void>;
}

const encoder = new TextEncoder();

/**
 * How many reads of a rename's destination the atomic-rename check starts one per promise turn,
 * with no turn of the event loop between them, before it waits a turn between reads.
 */
const RENAME_BACK_TO_BACK_READS = 64;

function bytes(text: string): Uint8Array {
  return encoder.encode(text);
}

function at(fixture: FileSystemFixture, ...parts: string[]): string {
  return join(fixture.root, ...parts);
}

/** Opens `path`, runs `body` with the handle and closes it whatever happens. */
async function withHandle<T>(
  fs: FileSystem,
  path: string,
  options: OpenOptions,
  body: (handle: FileHandle) => Promise<T>,
): Promise<T> {
  const handle = await fs.open(path, options);
  try {
    return await body(handle);
  } finally {
    await handle.close();
  }
}

/** Opens and closes at once: for checks that expect the open itself to fail. */
async function openAndClose(fs: FileSystem, path: string, options?: OpenOptions): Promise<void> {
  const handle = await fs.open(path, options);
  await handle.close();
}

/** A deterministic pattern of `length` bytes that is not periodic on small powers of two. */
function pattern(length: number): Uint8Array {
  const out = new Uint8Array(length);
  let state = 0x12345678;
  for (let i = 0; i < length; i++) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    out[i] = state >>> 24;
  }
  return out;
}

/**
 * An absolute path of exactly `total` UTF-8 bytes below `root`, of names of 200 bytes made of
 * `unit` (one or two UTF-8 bytes), the last one filled up with `d`s; nothing of it exists.
 */
function pathOfBytes(root: string, total: number, unit: string): string {
  const name = unit.repeat(200 / bytes(unit).length);
  let path = root;
  for (;;) {
    const room = total - bytes(path).length - 1;
    if (room < 1) return path;
    // Leaves at least two bytes for the last name (a slash and a letter).
    path += "/" + (room >= 202 ? name : "d".repeat(room));
  }
}

async function checkMissing(fs: FileSystem, path: string, what: string): Promise<void> {
  await checkRejects(() => fs.lstat(path), NotFound, `${what}: lstat('${path}')`);
}

/**
 * A call on a missing path that must fail with `NotFound` naming that path and, in `syscall`, the
 * port call it was.
 */
interface MissingPathCall {
  readonly call: string;
  readonly syscall: string;
  readonly run: (fs: FileSystem, missing: string, fixture: FileSystemFixture) => Promise<unknown>;
}

const MISSING_PATH_CALLS: readonly MissingPathCall[] = [
  { call: "open() of a missing path", syscall: "open", run: (fs, p) => openAndClose(fs, p) },
  {
    call: "open() with write of a missing path",
    syscall: "open",
    run: (fs, p) => openAndClose(fs, p, { write: true }),
  },
  {
    call: "open() with create in a missing directory",
    syscall: "open",
    run: (fs, p) => openAndClose(fs, join(p, "file"), { create: true }),
  },
  { call: "readFile() of a missing path", syscall: "readFile", run: (fs, p) => fs.readFile(p) },
  {
    call: "writeFile() in a missing directory",
    syscall: "writeFile",
    run: (fs, p) => fs.writeFile(join(p, "file"), bytes("x")),
  },
  {
    call: "rename() of a missing path",
    syscall: "rename",
    run: (fs, p, f) => fs.rename(p, at(f, "elsewhere")),
  },
  { call: "remove() of a missing path", syscall: "remove", run: (fs, p) => fs.remove(p) },
  {
    call: "remove() with recursive of a missing path",
    syscall: "remove",
    run: (fs, p) => fs.remove(p, { recursive: true }),
  },
  {
    call: "mkdir() in a missing directory",
    syscall: "mkdir",
    run: (fs, p) => fs.mkdir(join(p, "child")),
  },
  { call: "readDir() of a missing path", syscall: "readDir", run: (fs, p) => fs.readDir(p) },
  { call: "stat() of a missing path", syscall: "stat", run: (fs, p) => fs.stat(p) },
  { call: "lstat() of a missing path", syscall: "lstat", run: (fs, p) => fs.lstat(p) },
  { call: "realPath() of a missing path", syscall: "realPath", run: (fs, p) => fs.realPath(p) },
  { call: "chmod() of a missing path", syscall: "chmod", run: (fs, p) => fs.chmod(p, 0o600) },
  { call: "readLink() of a missing path", syscall: "readLink", run: (fs, p) => fs.readLink(p) },
  {
    call: "utime() of a missing path",
    syscall: "utime",
    run: (fs, p) => fs.utime(p, 1_600_000_000_000),
  },
  { call: "syncDir() of a missing path", syscall: "syncDir", run: (fs, p) => fs.syncDir(p) },
  {
    call: "symlink() in a missing directory",
    syscall: "symlink",
    run: (fs, p) => fs.symlink("target", join(p, "link")),
  },
];

const missingPathChecks: Check[] = MISSING_PATH_CALLS.map(({ call, syscall, run }) => ({
  name: `${call} fails with NotFound`,
  ...(call.startsWith("symlink") ? { needs: ["symlinks"] as const } : {}),
  async run(fixture) {
    const missing = at(fixture, "missing");
    const error = await checkRejects(() => run(fixture.fs, missing, fixture), NotFound, call);
    checkEqual(error.code, "ENOENT", `${call}: error code`);
    checkEqual(error.syscall, syscall, `${call}: error syscall (the port call that failed)`);
    if (!call.includes("in a missing directory")) {
      checkEqual(error.path, missing, `${call}: error path`);
    }
  },
}));

/** How a promise settled: its value, or the error it rejected with. */
type Settled<T> = { readonly ok: true; readonly value: T } | {
  readonly ok: false;
  readonly error: unknown;
};

/**
 * Settles `promise` into a value that never rejects: a check can issue calls without waiting and
 * look at their outcomes later, with no rejection left unhandled meanwhile.
 */
function settle<T>(promise: Promise<T>): Promise<Settled<T>> {
  return promise.then(
    (value) => ({ ok: true, value }),
    (error: unknown) => ({ ok: false, error }),
  );
}

/** The value of a settled call, or a failure naming `what` when it rejected. */
function settledValue<T>(settled: Settled<T>, what: string): T {
  if (settled.ok) return settled.value;
  throw new ConformanceFailure(`${what}: rejected with ${describeError(settled.error)}`, {
    cause: settled.error,
  });
}

/** Fails unless `run` rejects with `FsIoError` code `code`. */
async function checkRejectsCode(
  run: () => Promise<unknown>,
  code: string,
  what: string,
): Promise<FsError> {
  const error = await checkRejects(run, FsIoError, what);
  checkEqual(error.code, code, `${what}: error code`);
  return error;
}

/**
 * Checks on `handle`, an empty file opened for writing (appending or not), that reads and stats
 * issued without waiting see the writes, truncation and close issued before them.
 */
async function checkHandleCallOrder(handle: FileHandle, what: string): Promise<void> {
  const write = settle(handle.write(bytes("abc")));
  const read = settle(handle.read(0, 10));
  const stat = settle(handle.stat());
  settledValue(await write, `${what}: write`);
  checkBytes(settledValue(await read, `${what}: read`), "abc", `${what}: a read after a write`);
  checkEqual(settledValue(await stat, `${what}: stat`).size, 3, `${what}: size after a write`);
  const truncate = settle(handle.truncate(1));
  const afterTruncate = settle(handle.read(0, 10));
  const statAfterTruncate = settle(handle.stat());
  settledValue(await truncate, `${what}: truncate`);
  checkBytes(
    settledValue(await afterTruncate, `${what}: read after truncate`),
    "a",
    `${what}: a read after a truncate(1)`,
  );
  checkEqual(
    settledValue(await statAfterTruncate, `${what}: stat after truncate`).size,
    1,
    `${what}: size after a truncate(1)`,
  );
  const close = settle(handle.close());
  const readAfterClose = settle(handle.read(0, 1));
  const statAfterClose = settle(handle.stat());
  settledValue(await close, `${what}: close`);
  for (const [call, outcome] of [["read", readAfterClose], ["stat", statAfterClose]] as const) {
    const settled = await outcome;
    await checkRejectsCode(
      () => settled.ok ? Promise.resolve(settled.value) : Promise.reject(settled.error),
      "EBADF",
      `${what}: a ${call} issued after close()`,
    );
  }
}

/** Checks that every call on `handle`, already closed, fails with EBADF naming `path`. */
async function checkClosedHandle(handle: FileHandle, path: string, what: string): Promise<void> {
  const calls: readonly (readonly [string, () => Promise<unknown>])[] = [
    ["read(0, 1)", () => handle.read(0, 1)],
    ["read(0, 0)", () => handle.read(0, 0)],
    ["write() of no bytes", () => handle.write(new Uint8Array(0))],
    ["write()", () => handle.write(bytes("x"))],
    ["truncate(0)", () => handle.truncate(0)],
    ["sync()", () => handle.sync()],
    ["stat()", () => handle.stat()],
    ["a second close()", () => handle.close()],
  ];
  for (const [call, run] of calls) {
    const error = await checkRejectsCode(run, "EBADF", `${call} on a closed ${what}`);
    checkEqual(error.path, path, `${call} on a closed ${what}: error path`);
  }
}

/** Checks that `handle`, opened read-only on a file holding `abc`, refuses writes with EBADF. */
async function checkReadOnlyHandle(handle: FileHandle, what: string): Promise<void> {
  const calls: readonly (readonly [string, () => Promise<unknown>])[] = [
    ["write() of no bytes", () => handle.write(new Uint8Array(0))],
    ["write()", () => handle.write(bytes("x"))],
    ["truncate(1)", () => handle.truncate(1)],
    ["truncate(0)", () => handle.truncate(0)],
  ];
  for (const [call, run] of calls) {
    await checkRejectsCode(run, "EBADF", `${call} on a ${what}`);
  }
  checkBytes(await handle.read(0, 10), "abc", `the file read through the ${what}`);
}

/**
 * Checks that the no-follow call `call` (named `what`) refuses a directory (`dir`) with
 * `IsADirectory` and a missing file with `NotFound`; where the fixture has symlinks, also that it
 * refuses a final symlink to `file`, and a dangling one, with `FsIoError` code `"ELOOP"`, then
 * links `dir` as `dir-link` for the caller's check that a linked parent directory is followed
 * (true; false without symlinks).
 */
async function checkRefusesFinalLinks(
  f: FileSystemFixture,
  call: (path: string) => Promise<unknown>,
  file: string,
  dir: string,
  what: string,
): Promise<boolean> {
  await checkRejects(() => call(dir), IsADirectory, `${what} of a directory`);
  await checkRejects(() => call(at(f, "missing")), NotFound, `${what} of a missing file`);
  // Without symlinks, what the call does with a file is checked all the same (by the caller).
  if (f.capabilities?.symlinks === false) return false;
  await f.fs.symlink(file, at(f, "link"));
  const refused = await checkRejects(
    () => call(at(f, "link")),
    FsIoError,
    `${what} of a symlink to a file`,
  );
  checkEqual(refused.code, "ELOOP", "the code of a refused final symlink");
  await f.fs.symlink(at(f, "nowhere"), at(f, "dangling"));
  const dangling = await checkRejects(
    () => call(at(f, "dangling")),
    FsIoError,
    `${what} of a dangling symlink`,
  );
  checkEqual(dangling.code, "ELOOP", "the code of a refused dangling symlink");
  // Only the last component is not followed: a linked parent directory is.
  await f.fs.symlink(dir, at(f, "dir-link"));
  return true;
}

/**
 * Makes `target/` holding `keep` (a file) and `sub/`, and `link` to it, for the checks of paths
 * ending in `.` or `..`; returns `target`.
 */
async function dottedFixture(f: FileSystemFixture): Promise<string> {
  const target = at(f, "target");
  await f.fs.mkdir(join(target, "sub"), { recursive: true });
  await f.fs.writeFile(join(target, "keep"), bytes("precious"));
  await f.fs.symlink(target, at(f, "link"));
  return target;
}

/**
 * Paths naming `target` or the link to it with a final `.` or `..`, spelled by hand (`join` would
 * normalize them away).
 */
function dottedPaths(f: FileSystemFixture, target: string): string[] {
  return [`${target}/.`, `${target}/sub/..`, `${f.root}/link/.`, `${f.root}/link/sub/..`];
}

/** The checks of the suite, in registration order. */
export const CHECKS: readonly Check[] = [
  {
    name: "the fixture root is an empty absolute directory",
    async run(f) {
      check(isAbsolute(f.root), `root '${f.root}' is not absolute`);
      checkEqual(normalize(f.root), f.root, "root is normalized");
      checkEqual((await f.fs.stat(f.root)).kind, "directory", "stat(root).kind");
      checkSame(await f.fs.readDir(f.root), [], "readDir(root)");
    },
  },

  // open()
  {
    name: "open() defaults to read-only on an existing file",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("hello"));
      await withHandle(f.fs, path, {}, async (handle) => {
        checkBytes(await handle.read(0, 5), "hello", "read through a default handle");
        await checkRejects(() => handle.write(bytes("X")), FsError, "write through a read handle");
      });
      checkBytes(await f.fs.readFile(path), "hello", "file after a refused write");
    },
  },
  {
    name: "open() with create makes a missing file and keeps an existing file's bytes",
    async run(f) {
      const path = at(f, "file");
      await withHandle(f.fs, path, { create: true }, async (handle) => {
        checkEqual((await handle.stat()).size, 0, "size of a created file");
      });
      checkEqual((await f.fs.stat(path)).kind, "file", "kind of a created file");
      await f.fs.writeFile(path, bytes("abc"));
      await withHandle(f.fs, path, { create: true, write: true }, async () => {});
      checkBytes(await f.fs.readFile(path), "abc", "existing file after open with create");
    },
  },
  {
    name: "open() with createNew fails with AlreadyExists on an existing file",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("keep"));
      await checkRejects(
        () => openAndClose(f.fs, path, { createNew: true, write: true }),
        AlreadyExists,
        "open with createNew on a file",
      );
      checkBytes(await f.fs.readFile(path), "keep", "file after a refused createNew");
    },
  },
  {
    name: "open() with createNew fails with AlreadyExists on a dangling symlink",
    needs: ["symlinks"],
    async run(f) {
      const link = at(f, "link");
      const target = at(f, "target");
      await f.fs.symlink(target, link);
      await checkRejects(
        () => openAndClose(f.fs, link, { createNew: true, write: true }),
        AlreadyExists,
        "open with createNew on a dangling symlink",
      );
      await checkMissing(f.fs, target, "nothing is created through the link");
      checkEqual((await f.fs.lstat(link)).kind, "symlink", "the link stays a link");
    },
  },
  {
    name: "open() with createNew creates a file with the requested mode",
    needs: ["modes"],
    async run(f) {
      const path = at(f, "file");
      await withHandle(f.fs, path, { createNew: true, write: true, mode: 0o600 }, async (h) => {
        await h.write(bytes("x"));
      });
      checkMode((await f.fs.stat(path)).mode, 0o600, "mode of a file created with 0o600");
    },
  },
  {
    name: "open() with truncate empties an existing file",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("hello world"));
      await withHandle(f.fs, path, { write: true, truncate: true }, async (handle) => {
        checkEqual((await handle.stat()).size, 0, "size right after open with truncate");
        await handle.write(bytes("hi"));
      });
      checkBytes(await f.fs.readFile(path), "hi", "file after truncate and write");
    },
  },
  {
    name: "open() with append writes after the existing bytes",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("hello"));
      await withHandle(f.fs, path, { append: true }, async (handle) => {
        await handle.write(bytes(" wor"));
        await handle.write(bytes("ld"));
      });
      checkBytes(await f.fs.readFile(path), "hello world", "file after appends");
    },
  },
  {
    name: "an append handle writes at the end even after truncate",
    async run(f) {
      const path = at(f, "file");
      await withHandle(f.fs, path, { append: true, create: true }, async (handle) => {
        await handle.write(bytes("abc"));
        await handle.truncate(1);
        await handle.write(bytes("de"));
        checkEqual((await handle.stat()).size, 3, "size after truncate and append");
      });
      checkBytes(await f.fs.readFile(path), "ade", "file after truncate and append");
    },
  },
  {
    name: "append handles write at the end the file has then, whatever another handle appended",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("a"));
      const appendNoFollow = f.fs.openAppendNoFollow?.bind(f.fs);
      const first = await f.fs.open(path, { append: true });
      try {
        const second = appendNoFollow === undefined
          ? await f.fs.open(path, { append: true })
          : (await appendNoFollow(path)).handle;
        try {
          // Each write lands after what the other handle appended since it was opened.
          await first.write(bytes("b"));
          await second.write(bytes("c"));
          await first.write(bytes("d"));
          await second.write(bytes("e"));
        } finally {
          await second.close();
        }
      } finally {
        await first.close();
      }
      checkBytes(await f.fs.readFile(path), "abcde", "file after appends through two handles");
    },
  },
  {
    name: "exclusive creates issued at once on one name: exactly one succeeds",
    async run(f) {
      // Two processes taking a lock file (or reserving a name) at once: one wins, the others see
      // AlreadyExists. A check-then-create adapter lets both win.
      const winners = async (what: string, create: () => Promise<unknown>): Promise<void> => {
        const results = await Promise.allSettled(Array.from({ length: 8 }, () => create()));
        const won = results.filter((result) => result.status === "fulfilled").length;
        checkEqual(won, 1, `${what}: how many of 8 issued at once succeed`);
        for (const result of results) {
          if (result.status === "rejected" && !(result.reason instanceof AlreadyExists)) {
            throw new ConformanceFailure(
              `${what}: the losers must fail with AlreadyExists, got ${
                describeError(result.reason)
              }`,
              { cause: result.reason },
            );
          }
        }
      };
      await winners(
        "open() with createNew",
        () => openAndClose(f.fs, at(f, "lock"), { createNew: true, write: true }),
      );
      await winners(
        "writeFile() with createNew",
        () => f.fs.writeFile(at(f, "reserved"), bytes("x"), { createNew: true }),
      );
      await winners("mkdir()", () => f.fs.mkdir(at(f, "dir")));
    },
  },
  {
    name: "open() of a directory fails with IsADirectory",
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(dir);
      await checkRejects(() => openAndClose(f.fs, dir), IsADirectory, "open a directory to read");
      await checkRejects(
        () => openAndClose(f.fs, dir, { write: true }),
        IsADirectory,
        "open a directory to write",
      );
    },
  },
  {
    name: "open() follows a symlink to a file",
    needs: ["symlinks"],
    async run(f) {
      const target = at(f, "target");
      const link = at(f, "link");
      await f.fs.writeFile(target, bytes("through"));
      await f.fs.symlink(target, link);
      await withHandle(f.fs, link, {}, async (handle) => {
        checkBytes(await handle.read(0, 100), "through", "read through a symlink");
      });
      await withHandle(f.fs, link, { append: true }, (handle) => handle.write(bytes(" link")));
      checkBytes(await f.fs.readFile(target), "through link", "target after append via link");
    },
  },

  // FileHandle
  {
    name: "read() returns the bytes at an offset",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("0123456789"));
      await withHandle(f.fs, path, {}, async (handle) => {
        checkBytes(await handle.read(2, 3), "234", "read(2, 3)");
        checkBytes(await handle.read(0, 10), "0123456789", "read(0, 10)");
        checkBytes(await handle.read(9, 1), "9", "read(9, 1)");
        checkBytes(await handle.read(2, 3), "234", "read(2, 3) again (reads are positioned)");
      });
    },
  },
  {
    name: "read() returns a short read at the end of the file",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("0123456789"));
      await withHandle(f.fs, path, {}, async (handle) => {
        checkBytes(await handle.read(8, 5), "89", "read(8, 5)");
        checkBytes(await handle.read(0, 64), "0123456789", "read(0, 64)");
      });
    },
  },
  {
    name: "read() at or beyond the end of the file returns no bytes",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("0123456789"));
      await withHandle(f.fs, path, {}, async (handle) => {
        checkBytes(await handle.read(10, 4), "", "read(10, 4)");
        checkBytes(await handle.read(1000, 4), "", "read(1000, 4)");
        checkBytes(await handle.read(3, 0), "", "read(3, 0)");
      });
    },
  },
  {
    name: "read() with a negative or fractional offset or length fails with EINVAL",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("0123456789"));
      await withHandle(f.fs, path, {}, async (handle) => {
        for (const [offset, length] of [[-1, 4], [0, -1], [1.5, 2], [0, Number.NaN]]) {
          const error = await checkRejects(
            () => handle.read(offset as number, length as number),
            FsIoError,
            `read(${offset}, ${length})`,
          );
          if (error.code !== "EINVAL") {
            throw new ConformanceFailure(`read(${offset}, ${length}): code ${error.code}`);
          }
        }
      });
    },
  },
  {
    name: "read() of a length far past the end of a small file returns its bytes",
    async run(f) {
      // A length taken from lying metadata: the read must neither allocate it nor fail.
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("0123456789"));
      await withHandle(f.fs, path, {}, async (handle) => {
        checkBytes(await handle.read(0, 2 ** 33), "0123456789", "read(0, 2 ** 33)");
        checkBytes(await handle.read(4, 3_000_000_000), "456789", "read(4, 3e9)");
        checkBytes(await handle.read(20, 2 ** 33), "", "read(20, 2 ** 33)");
      });
    },
  },
  {
    name: "read() at an offset far past the end of the file returns no bytes",
    async run(f) {
      // Past the largest file a filesystem holds (ext4: 16 TiB), where a seek would fail.
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("0123456789"));
      await withHandle(f.fs, path, {}, async (handle) => {
        for (const offset of [2 ** 44, 2 ** 50, Number.MAX_SAFE_INTEGER]) {
          checkBytes(await handle.read(offset, 4), "", `read(${offset}, 4)`);
        }
        checkBytes(await handle.read(2, 3), "234", "read(2, 3) after reads far past the end");
      });
    },
  },
  {
    name: "open() with append and truncate empties the file and appends",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("old content"));
      await withHandle(f.fs, path, { append: true, truncate: true }, async (handle) => {
        await handle.write(bytes("new"));
      });
      checkBytes(await f.fs.readFile(path), "new", "file after append + truncate");
    },
  },
  {
    name: "writes and truncations issued without waiting apply in call order",
    async run(f) {
      const path = at(f, "file");
      await withHandle(f.fs, path, { create: true, write: true }, async (handle) => {
        await Promise.all([
          handle.write(bytes("aaaa")),
          handle.write(bytes("bb")),
          handle.write(bytes("c")),
        ]);
      });
      checkBytes(await f.fs.readFile(path), "aaaabbc", "three writes issued at once");
      await withHandle(f.fs, path, { write: true, truncate: true }, async (handle) => {
        await Promise.all([
          handle.write(bytes("ab")),
          handle.truncate(1),
          handle.write(bytes("c")),
        ]);
      });
      checkBytes(await f.fs.readFile(path), "ac", "write, truncate, write issued at once");
    },
  },
  {
    name: "write() writes sequentially and read() does not move the write position",
    async run(f) {
      const path = at(f, "file");
      await withHandle(f.fs, path, { createNew: true, write: true }, async (handle) => {
        await handle.write(bytes("abc"));
        checkBytes(await handle.read(0, 2), "ab", "read between writes");
        await handle.write(bytes("def"));
        await handle.write(new Uint8Array(0));
        await handle.write(bytes("g"));
        checkBytes(await handle.read(0, 100), "abcdefg", "read through the writing handle");
      });
      checkBytes(await f.fs.readFile(path), "abcdefg", "file after sequential writes");
    },
  },
  {
    name: "reads and writes in any order see the bytes written before them",
    async run(f) {
      const path = at(f, "file");
      // Each step lands where a cursor left by the step before would mislead a careless adapter.
      await withHandle(f.fs, path, { createNew: true, write: true }, async (handle) => {
        await handle.write(bytes("0123"));
        checkBytes(await handle.read(4, 4), "", "read at the write position");
        checkBytes(await handle.read(2, 2), "23", "read(2, 2) after a write");
        await handle.write(bytes("45"));
        checkBytes(await handle.read(0, 6), "012345", "read(0, 6) after a read and a write");
        checkBytes(await handle.read(6, 1), "", "read where the last read ended");
        await handle.write(bytes("6"));
        checkBytes(await handle.read(6, 1), "6", "read(6, 1) where the last read ended");
        await handle.truncate(3);
        checkBytes(await handle.read(0, 10), "012", "read after truncate(3)");
        await handle.write(bytes("7")); // the write position moved back to the new length
        checkBytes(await handle.read(3, 5), "7", "read after truncate and write");
      });
      checkBytes(await f.fs.readFile(path), "0127", "file after truncate and write");
      await withHandle(f.fs, path, { append: true }, async (handle) => {
        checkBytes(await handle.read(0, 3), "012", "read(0, 3) of an append handle");
        await handle.write(bytes("8"));
        checkBytes(await handle.read(3, 10), "78", "read after an append");
        await handle.write(bytes("9"));
        checkBytes(await handle.read(0, 3), "012", "read(0, 3) after appends");
        checkBytes(await handle.read(5, 1), "9", "read(5, 1) after appends");
      });
      checkBytes(await f.fs.readFile(path), "012789", "file after appends");
    },
  },
  {
    name: "handle stat() reports the kind and size of the open file",
    async run(f) {
      const path = at(f, "file");
      await withHandle(f.fs, path, { create: true, write: true }, async (handle) => {
        await handle.write(bytes("abcdef"));
        const info = await handle.stat();
        checkEqual(info.kind, "file", "handle stat kind");
        checkEqual(info.size, 6, "handle stat size before any sync");
      });
    },
  },
  {
    name: "handle truncate() sets the length and pulls the write position back",
    async run(f) {
      const path = at(f, "file");
      await withHandle(f.fs, path, { create: true, write: true }, async (handle) => {
        await handle.write(bytes("abcdef"));
        await handle.truncate(2);
        await handle.write(bytes("X"));
        checkBytes(await handle.read(0, 100), "abX", "after truncate(2) and a write");
        await handle.truncate(5);
        checkBytes(await handle.read(0, 100), "abX\0\0", "truncate(5) extends with zeros");
        await handle.write(bytes("Y"));
        checkBytes(await handle.read(0, 100), "abXY\0", "write position unmoved by growth");
      });
    },
  },
  {
    name: "handle truncate() with a negative or fractional length fails with EINVAL",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("hello"));
      await withHandle(f.fs, path, { write: true }, async (handle) => {
        for (const length of [-1, 1.5, Number.NaN, -0.5]) {
          const error = await checkRejectsCode(
            () => handle.truncate(length),
            "EINVAL",
            `truncate(${length})`,
          );
          checkEqual(error.path, path, `truncate(${length}): error path`);
        }
        checkBytes(await handle.read(0, 10), "hello", "the file after refused truncations");
      });
      checkBytes(await f.fs.readFile(path), "hello", "the file after refused truncations");
    },
  },
  {
    name: "handle read() and stat() issued without waiting see the calls issued before them",
    async run(f) {
      const path = at(f, "file");
      await checkHandleCallOrder(await f.fs.open(path, { createNew: true }), "a handle of open()");
      const append = f.fs.openAppendNoFollow?.bind(f.fs);
      if (append === undefined) return;
      const other = at(f, "other");
      await f.fs.writeFile(other, new Uint8Array(0));
      await checkHandleCallOrder((await append(other)).handle, "a handle of openAppendNoFollow()");
    },
  },
  {
    name: "every call on a closed handle fails with EBADF, a second close() included",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("abc"));
      for (const options of [{}, { write: true }, { append: true }] as const) {
        const handle = await f.fs.open(path, options);
        await handle.close();
        await checkClosedHandle(handle, path, `handle of open(${JSON.stringify(options)})`);
      }
      for (const call of ["openNoFollow", "openAppendNoFollow"] as const) {
        const open = f.fs[call]?.bind(f.fs);
        if (open === undefined) continue;
        const { handle } = await open(path);
        await handle.close();
        await checkClosedHandle(handle, path, `handle of ${call}()`);
      }
      checkBytes(await f.fs.readFile(path), "abc", "the file after calls on closed handles");
    },
  },
  {
    name: "write() and truncate() on a handle not opened for writing fail with EBADF",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("abc"));
      await withHandle(f.fs, path, {}, (handle) => checkReadOnlyHandle(handle, "read-only handle"));
      const open = f.fs.openNoFollow?.bind(f.fs);
      if (open !== undefined) {
        const { handle } = await open(path);
        try {
          await checkReadOnlyHandle(handle, "handle of openNoFollow()");
        } finally {
          await handle.close();
        }
      }
      checkBytes(await f.fs.readFile(path), "abc", "the file after refused writes");
    },
  },
  {
    name: "write() and read() move large buffers whole",
    async run(f) {
      const path = at(f, "file");
      const data = pattern(3 * 1024 * 1024 + 17);
      await withHandle(f.fs, path, { createNew: true, write: true }, async (handle) => {
        await handle.write(data);
        checkBytes(await handle.read(0, data.length), data, "large read through the handle");
        checkBytes(
          await handle.read(1_000_001, 2_000_000),
          data.subarray(1_000_001, 3_000_001),
          "large read at an offset",
        );
      });
      checkBytes(await f.fs.readFile(path), data, "large file read back");
    },
  },
  {
    name: "sync() on a handle and syncDir() on a directory succeed",
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(dir);
      const path = join(dir, "file");
      await withHandle(f.fs, path, { createNew: true, write: true }, async (handle) => {
        await handle.write(bytes("durable"));
        await handle.sync();
      });
      await withHandle(f.fs, path, {}, (handle) => handle.sync());
      await f.fs.syncDir(dir);
      await f.fs.syncDir(f.root);
      checkBytes(await f.fs.readFile(path), "durable", "file after sync");
    },
  },
  {
    name: "syncDir() of a file fails with NotADirectory",
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      const error = await checkRejects(() => f.fs.syncDir(file), NotADirectory, "syncDir(file)");
      checkEqual(error.path, file, "syncDir(file): error path");
    },
  },

  // writeFile() / readFile()
  {
    name: "writeFile() and readFile() round-trip text",
    async run(f) {
      const path = at(f, "file.txt");
      await f.fs.writeFile(path, bytes("héllo, wörld\n"));
      checkBytes(await f.fs.readFile(path), "héllo, wörld\n", "text read back");
      checkEqual((await f.fs.stat(path)).size, bytes("héllo, wörld\n").length, "size");
    },
  },
  {
    name: "writeFile() and readFile() round-trip an empty file",
    async run(f) {
      const path = at(f, "empty");
      await f.fs.writeFile(path, new Uint8Array(0));
      checkBytes(await f.fs.readFile(path), "", "empty file read back");
      const info = await f.fs.stat(path);
      checkEqual(info.kind, "file", "kind of an empty file");
      checkEqual(info.size, 0, "size of an empty file");
    },
  },
  {
    name: "writeFile() and readFile() round-trip every byte value",
    async run(f) {
      const path = at(f, "binary");
      const data = new Uint8Array(512).map((_, i) => (i * 7 + 3) % 256);
      data[0] = 0;
      data[1] = 255;
      await f.fs.writeFile(path, data);
      checkBytes(await f.fs.readFile(path), data, "binary bytes read back");
      const large = pattern(1024 * 1024 + 3);
      await f.fs.writeFile(path, large);
      checkBytes(await f.fs.readFile(path), large, "large binary file read back");
    },
  },
  {
    name: "writeFile() replaces all bytes of an existing longer file",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("a much longer first version"));
      await f.fs.writeFile(path, bytes("short"));
      checkBytes(await f.fs.readFile(path), "short", "file after a shorter write");
    },
  },
  {
    name: "writeFile() with createNew fails with AlreadyExists on an existing file",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("keep"), { createNew: true });
      await checkRejects(
        () => f.fs.writeFile(path, bytes("lost"), { createNew: true }),
        AlreadyExists,
        "writeFile with createNew on a file",
      );
      checkBytes(await f.fs.readFile(path), "keep", "file after a refused createNew");
    },
  },
  {
    name: "writeFile() with createNew fails with AlreadyExists on a dangling symlink",
    needs: ["symlinks"],
    async run(f) {
      const link = at(f, "link");
      const target = at(f, "target");
      await f.fs.symlink(target, link);
      await checkRejects(
        () => f.fs.writeFile(link, bytes("x"), { createNew: true }),
        AlreadyExists,
        "writeFile with createNew on a dangling symlink",
      );
      await checkMissing(f.fs, target, "nothing is written through the link");
    },
  },
  {
    name: "writeFile() creates a file with the requested mode",
    needs: ["modes"],
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("secret"), { mode: 0o600 });
      checkMode((await f.fs.stat(path)).mode, 0o600, "mode of a file written with 0o600");
    },
  },
  {
    name: "writeFile() and open() leave the mode of an existing file alone",
    needs: ["modes"],
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("first"), { mode: 0o600 });
      await f.fs.chmod(path, 0o640);
      await f.fs.writeFile(path, bytes("second"), { mode: 0o600 });
      checkMode((await f.fs.stat(path)).mode, 0o640, "mode after writeFile over the file");
      await withHandle(f.fs, path, { create: true, write: true, mode: 0o600 }, async () => {});
      checkMode((await f.fs.stat(path)).mode, 0o640, "mode after open with create");
      checkBytes(await f.fs.readFile(path), "second", "bytes of the rewritten file");
    },
  },
  {
    name: "writeFile() follows a symlink to a file",
    needs: ["symlinks"],
    async run(f) {
      const target = at(f, "target");
      const link = at(f, "link");
      await f.fs.writeFile(target, bytes("old"));
      await f.fs.symlink("target", link);
      await f.fs.writeFile(link, bytes("new"));
      checkBytes(await f.fs.readFile(target), "new", "target after a write through the link");
      checkEqual((await f.fs.lstat(link)).kind, "symlink", "the link stays a link");
    },
  },
  {
    name: "readFile() of a directory fails with IsADirectory",
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(dir);
      await checkRejects(() => f.fs.readFile(dir), IsADirectory, "readFile of a directory");
    },
  },

  // readFileNoFollow() (optional: checked only where the adapter offers it)
  {
    name:
      "readFileNoFollow(), where offered, reads a file, refuses a final symlink and follows parent links",
    async run(f) {
      const read = f.fs.readFileNoFollow?.bind(f.fs);
      if (read === undefined) return;
      const dir = at(f, "dir");
      const file = join(dir, "file");
      await f.fs.mkdir(dir);
      await f.fs.writeFile(file, bytes("regular"));
      await f.fs.writeFile(at(f, "empty"), new Uint8Array(0));
      checkBytes(await read(file), "regular", "readFileNoFollow of a file");
      checkBytes(await read(at(f, "empty")), "", "readFileNoFollow of an empty file");
      if (await checkRefusesFinalLinks(f, read, file, dir, "readFileNoFollow")) {
        checkBytes(
          await read(at(f, "dir-link", "file")),
          "regular",
          "a file under a linked directory",
        );
      }
    },
  },

  // openNoFollow() (optional: checked only where the adapter offers it)
  {
    name:
      "openNoFollow(), where offered, opens a file with its info, refuses a final symlink and follows parent links",
    async run(f) {
      const open = f.fs.openNoFollow?.bind(f.fs);
      if (open === undefined) return;
      checkEqual(
        typeof f.fs.readFileNoFollow,
        "function",
        "readFileNoFollow is offered with openNoFollow",
      );
      const dir = at(f, "dir");
      const file = join(dir, "file");
      await f.fs.mkdir(dir);
      await f.fs.writeFile(file, bytes("regular"));
      const opened = await open(file);
      try {
        checkEqual(opened.info.kind, "file", "the kind openNoFollow reports for a file");
        checkEqual(opened.info.size, 7, "the size openNoFollow reports for a file");
        checkBytes(await opened.handle.read(2, 3), "gul", "a read through the opened handle");
      } finally {
        await opened.handle.close();
      }
      if (await checkRefusesFinalLinks(f, open, file, dir, "openNoFollow")) {
        const viaLink = await open(at(f, "dir-link", "file"));
        try {
          checkBytes(await viaLink.handle.read(0, 7), "regular", "a file under a linked directory");
        } finally {
          await viaLink.handle.close();
        }
      }
    },
  },

  {
    name: "openAppendNoFollow(), where offered, appends at the end and refuses a final symlink",
    async run(f) {
      const open = f.fs.openAppendNoFollow?.bind(f.fs);
      if (open === undefined) return;
      checkEqual(
        typeof f.fs.openNoFollow,
        "function",
        "openNoFollow is offered with openAppendNoFollow",
      );
      const dir = at(f, "dir");
      const file = join(dir, "file");
      await f.fs.mkdir(dir);
      await f.fs.writeFile(file, bytes("abc"));
      const opened = await open(file);
      try {
        checkEqual(opened.info.kind, "file", "the kind openAppendNoFollow reports for a file");
        checkEqual(opened.info.size, 3, "the size openAppendNoFollow reports for a file");
        await opened.handle.write(bytes("de"));
        await opened.handle.write(bytes("f"));
        checkBytes(await opened.handle.read(0, 6), "abcdef", "a read through the append handle");
      } finally {
        await opened.handle.close();
      }
      checkBytes(await f.fs.readFile(file), "abcdef", "appended through openAppendNoFollow");
      await checkRefusesFinalLinks(f, open, file, dir, "openAppendNoFollow");
      checkBytes(await f.fs.readFile(file), "abcdef", "nothing written through a refused link");
    },
  },

  // rename()
  {
    name: "rename() moves a file to a new name",
    async run(f) {
      const from = at(f, "from");
      const to = at(f, "to");
      await f.fs.writeFile(from, bytes("moved"));
      await f.fs.rename(from, to);
      checkBytes(await f.fs.readFile(to), "moved", "file at the new name");
      await checkMissing(f.fs, from, "the old name is gone");
    },
  },
  {
    name: "rename() replaces an existing file",
    async run(f) {
      const from = at(f, "from");
      const to = at(f, "to");
      await f.fs.writeFile(from, bytes("new"));
      await f.fs.writeFile(to, bytes("old and longer"));
      await f.fs.rename(from, to);
      checkBytes(await f.fs.readFile(to), "new", "replaced file");
      await checkMissing(f.fs, from, "the old name is gone");
      checkSame(await f.fs.readDir(f.root), [{ name: "to", kind: "file" }], "root listing");
    },
  },
  {
    name: "rename() over an existing file replaces it atomically: the name is never missing",
    async run(f) {
      const from = at(f, "from");
      const to = at(f, "to");
      // A reader of `to` while the rename runs sees the old bytes or the new ones, never nothing
      // (a remove-then-move adapter leaves a moment with nothing there; a crash then loses both).
      for (let round = 0; round < 20; round++) {
        await f.fs.writeFile(to, bytes("old"));
        await f.fs.writeFile(from, bytes("new"));
        let done = false;
        // Settled into a value at once: a failed rename is reported after the reads, never left
        // unhandled meanwhile.
        const renaming = f.fs.rename(from, to).then(
          () => ({ failed: false, error: undefined }),
          (error: unknown) => ({ failed: true, error }),
        ).finally(() => {
          done = true;
        });
        const readOnce = async (): Promise<ConformanceFailure | undefined> => {
          let seen: Uint8Array;
          try {
            seen = await f.fs.readFile(to);
          } catch (error) {
            return new ConformanceFailure(
              `a read of the destination while rename() ran failed: ${describeError(error)}`,
              { cause: error },
            );
          }
          const text = new TextDecoder().decode(seen);
          return text === "old" || text === "new" ? undefined : new ConformanceFailure(
            `a read of the destination while rename() ran saw ${JSON.stringify(text)}`,
          );
        };
        // First one read started at each promise turn, none awaited before the next starts, so a
        // remove-then-move adapter whose two steps are apart by promise turns only (behind any
        // wrapper) is seen between them; then a turn of the event loop between reads, so a rename
        // that settles on a timer or I/O completes however fast the reads are answered.
        const started: Promise<ConformanceFailure | undefined>[] = [];
        for (let i = 0; i < RENAME_BACK_TO_BACK_READS && !done; i++) {
          started.push(readOnce());
          await null;
        }
        let failure = (await Promise.all(started)).find((seen) => seen !== undefined);
        while (failure === undefined && !done) {
          failure = await readOnce();
          if (failure === undefined) await new Promise((resolve) => setTimeout(resolve, 0));
        }
        if (failure !== undefined) {
          await renaming;
          throw failure;
        }
        const outcome = await renaming;
        if (outcome.failed) throw outcome.error;
        checkBytes(await f.fs.readFile(to), "new", "the destination after rename()");
      }
    },
  },
  {
    name: "rename() moves a directory with its contents",
    async run(f) {
      const from = at(f, "from");
      await f.fs.mkdir(join(from, "sub"), { recursive: true });
      await f.fs.writeFile(join(from, "a"), bytes("A"));
      await f.fs.writeFile(join(from, "sub", "b"), bytes("B"));
      const to = at(f, "to");
      await f.fs.rename(from, to);
      checkBytes(await f.fs.readFile(join(to, "a")), "A", "a file of the moved directory");
      checkBytes(await f.fs.readFile(join(to, "sub", "b")), "B", "a nested file");
      await checkMissing(f.fs, from, "the old directory is gone");
    },
  },
  {
    name: "rename() of a directory replaces an empty directory",
    async run(f) {
      const from = at(f, "from");
      const to = at(f, "to");
      await f.fs.mkdir(from);
      await f.fs.writeFile(join(from, "a"), bytes("A"));
      await f.fs.mkdir(to);
      await f.fs.rename(from, to);
      checkSame(await f.fs.readDir(to), [{ name: "a", kind: "file" }], "replaced directory");
      await checkMissing(f.fs, from, "the old directory is gone");
    },
  },
  {
    name: "rename() of a directory over a non-empty directory fails with NotEmpty",
    async run(f) {
      const from = at(f, "from");
      const to = at(f, "to");
      await f.fs.mkdir(from);
      await f.fs.writeFile(join(from, "a"), bytes("A"));
      await f.fs.mkdir(to);
      await f.fs.writeFile(join(to, "b"), bytes("B"));
      await checkRejects(() => f.fs.rename(from, to), NotEmpty, "rename over a non-empty dir");
      checkBytes(await f.fs.readFile(join(from, "a")), "A", "source left intact");
      checkBytes(await f.fs.readFile(join(to, "b")), "B", "destination left intact");
    },
  },
  {
    name: "rename() of a file over a directory fails with IsADirectory",
    async run(f) {
      const from = at(f, "file");
      const to = at(f, "dir");
      await f.fs.writeFile(from, bytes("F"));
      await f.fs.mkdir(to);
      await checkRejects(() => f.fs.rename(from, to), IsADirectory, "rename a file over a dir");
      checkBytes(await f.fs.readFile(from), "F", "source left intact");
      checkEqual((await f.fs.stat(to)).kind, "directory", "destination left intact");
    },
  },
  {
    name: "rename() of a directory over a file fails with NotADirectory",
    async run(f) {
      const from = at(f, "dir");
      const to = at(f, "file");
      await f.fs.mkdir(from);
      await f.fs.writeFile(to, bytes("F"));
      await checkRejects(() => f.fs.rename(from, to), NotADirectory, "rename a dir over a file");
      checkEqual((await f.fs.stat(from)).kind, "directory", "source left intact");
      checkBytes(await f.fs.readFile(to), "F", "destination left intact");
    },
  },
  {
    name: "rename() of a symlink moves the link, not its target",
    needs: ["symlinks"],
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(dir);
      await f.fs.writeFile(join(dir, "inside"), bytes("I"));
      await f.fs.symlink(dir, at(f, "link"));
      await f.fs.rename(at(f, "link"), at(f, "moved"));
      checkEqual((await f.fs.lstat(at(f, "moved"))).kind, "symlink", "moved entry kind");
      checkEqual(await f.fs.readLink(at(f, "moved")), dir, "moved link target");
      checkBytes(await f.fs.readFile(join(dir, "inside")), "I", "target left in place");
      await checkMissing(f.fs, at(f, "link"), "the old link name is gone");
    },
  },
  {
    name: "rename() of a file to a name with a trailing slash fails with NotADirectory",
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      await checkRejects(
        () => f.fs.rename(file, `${at(f, "new")}/`),
        NotADirectory,
        "rename(file, 'new/')",
      );
      checkBytes(await f.fs.readFile(file), "F", "source left intact");
      await checkMissing(f.fs, at(f, "new"), "nothing created at the new name");
    },
  },
  {
    name:
      "remove() and rename() of a symlink spelled with a trailing slash fail with NotADirectory, following nothing",
    needs: ["symlinks"],
    async run(f) {
      const dir = at(f, "dir");
      const empty = at(f, "empty");
      const other = at(f, "other");
      await f.fs.mkdir(dir);
      await f.fs.writeFile(join(dir, "inside"), bytes("I"));
      await f.fs.mkdir(empty);
      await f.fs.mkdir(other);
      const link = at(f, "link");
      const emptyLink = at(f, "empty-link");
      const dangling = at(f, "dangling");
      await f.fs.symlink(dir, link);
      await f.fs.symlink(empty, emptyLink);
      await f.fs.symlink(at(f, "nowhere"), dangling);
      const refusals: readonly (readonly [string, () => Promise<unknown>])[] = [
        ["remove('link/', recursive)", () => f.fs.remove(`${link}/`, { recursive: true })],
        ["remove('empty-link/')", () => f.fs.remove(`${emptyLink}/`)],
        ["remove('dangling/')", () => f.fs.remove(`${dangling}/`)],
        ["rename('link/', 'moved')", () => f.fs.rename(`${link}/`, at(f, "moved"))],
        ["rename('empty-link//', 'moved')", () => f.fs.rename(`${emptyLink}//`, at(f, "moved"))],
        ["rename('other', 'empty-link/')", () => f.fs.rename(other, `${emptyLink}/`)],
      ];
      for (const [call, run] of refusals) await checkRejects(run, NotADirectory, call);
      for (const path of [link, emptyLink, dangling]) {
        checkEqual((await f.fs.lstat(path)).kind, "symlink", `'${path}' stays a link`);
      }
      checkBytes(await f.fs.readFile(join(dir, "inside")), "I", "the target's file");
      checkSame(await f.fs.readDir(empty), [], "the empty target");
      checkEqual((await f.fs.lstat(other)).kind, "directory", "the directory not moved");
      await checkMissing(f.fs, at(f, "moved"), "nothing moved");
      await checkMissing(f.fs, at(f, "nowhere"), "nothing at the dangling link's target");
      // A directory spelled with a trailing slash is removed and renamed as ever.
      await f.fs.rename(`${other}/`, `${at(f, "renamed")}/`);
      await f.fs.remove(`${at(f, "renamed")}/`);
      await checkMissing(f.fs, at(f, "renamed"), "the renamed directory, removed");
    },
  },

  // remove()
  {
    name: "remove() deletes a file",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("x"));
      await f.fs.remove(path);
      await checkMissing(f.fs, path, "the removed file");
      checkSame(await f.fs.readDir(f.root), [], "root listing after remove");
    },
  },
  {
    name: "remove() deletes an empty directory",
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(dir);
      await f.fs.remove(dir);
      await checkMissing(f.fs, dir, "the removed directory");
    },
  },
  {
    name: "remove() of a non-empty directory without recursive fails with NotEmpty",
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(dir);
      await f.fs.writeFile(join(dir, "a"), bytes("A"));
      await checkRejects(() => f.fs.remove(dir), NotEmpty, "remove of a non-empty directory");
      checkBytes(await f.fs.readFile(join(dir, "a")), "A", "contents left intact");
    },
  },
  {
    name: "remove() with recursive deletes a directory tree",
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(join(dir, "a", "b"), { recursive: true });
      await f.fs.writeFile(join(dir, "a", "b", "c"), bytes("C"));
      await f.fs.writeFile(join(dir, "top"), bytes("T"));
      await f.fs.remove(dir, { recursive: true });
      await checkMissing(f.fs, dir, "the removed tree");
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      await f.fs.remove(file, { recursive: true });
      await checkMissing(f.fs, file, "a file removed with recursive");
    },
  },
  {
    name: "remove() of a symlink deletes the link, not its target",
    needs: ["symlinks"],
    async run(f) {
      const file = at(f, "file");
      const dir = at(f, "dir");
      await f.fs.writeFile(file, bytes("F"));
      await f.fs.mkdir(dir);
      await f.fs.writeFile(join(dir, "inside"), bytes("I"));
      await f.fs.symlink(file, at(f, "file-link"));
      await f.fs.symlink(dir, at(f, "dir-link"));
      await f.fs.remove(at(f, "file-link"));
      await f.fs.remove(at(f, "dir-link"), { recursive: true });
      await checkMissing(f.fs, at(f, "file-link"), "the removed file link");
      await checkMissing(f.fs, at(f, "dir-link"), "the removed directory link");
      checkBytes(await f.fs.readFile(file), "F", "the file target");
      checkBytes(await f.fs.readFile(join(dir, "inside")), "I", "the directory target's file");
    },
  },
  {
    name: "remove() with recursive does not follow symlinks out of the tree",
    needs: ["symlinks"],
    async run(f) {
      const outside = at(f, "outside");
      await f.fs.mkdir(outside);
      await f.fs.writeFile(join(outside, "precious"), bytes("P"));
      const tree = at(f, "tree");
      await f.fs.mkdir(join(tree, "sub"), { recursive: true });
      await f.fs.symlink(outside, join(tree, "to-outside"));
      await f.fs.symlink("../../outside", join(tree, "sub", "relative-to-outside"));
      await f.fs.remove(tree, { recursive: true });
      await checkMissing(f.fs, tree, "the removed tree");
      checkBytes(await f.fs.readFile(join(outside, "precious")), "P", "the outside target");
    },
  },

  // mkdir()
  {
    name: "mkdir() creates a directory",
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(dir);
      checkEqual((await f.fs.stat(dir)).kind, "directory", "kind of the new directory");
      checkSame(await f.fs.readDir(dir), [], "listing of the new directory");
    },
  },
  {
    name: "mkdir() of an existing path fails with AlreadyExists",
    async run(f) {
      const dir = at(f, "dir");
      const file = at(f, "file");
      await f.fs.mkdir(dir);
      await f.fs.writeFile(file, bytes("F"));
      await checkRejects(() => f.fs.mkdir(dir), AlreadyExists, "mkdir of an existing directory");
      await checkRejects(() => f.fs.mkdir(file), AlreadyExists, "mkdir of an existing file");
      await checkRejects(
        () => f.fs.mkdir(file, { recursive: true }),
        AlreadyExists,
        "recursive mkdir of an existing file",
      );
      checkBytes(await f.fs.readFile(file), "F", "the file left intact");
    },
  },
  {
    name: "mkdir() with recursive creates missing parents and accepts an existing directory",
    async run(f) {
      const deep = at(f, "a", "b", "c");
      await f.fs.mkdir(deep, { recursive: true });
      checkEqual((await f.fs.stat(deep)).kind, "directory", "kind of the deep directory");
      checkEqual((await f.fs.stat(at(f, "a", "b"))).kind, "directory", "kind of a parent");
      await f.fs.mkdir(deep, { recursive: true });
      await f.fs.mkdir(at(f, "a"), { recursive: true });
      checkSame(await f.fs.readDir(at(f, "a")), [{ name: "b", kind: "directory" }], "listing");
    },
  },
  {
    name: "mkdir() of a dangling symlink fails with AlreadyExists, with recursive too",
    needs: ["symlinks"],
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      // Targets whose final name is missing, whose parent is missing (relative and absolute), and
      // one that leads through a file.
      const targets: readonly (readonly [string, string])[] = [
        ["dangling", at(f, "nowhere")],
        ["relative", join("missing", "target")],
        ["absolute", at(f, "absent", "deeper")],
        ["through-file", join("file", "target")],
      ];
      for (const [name, target] of targets) {
        const link = at(f, name);
        await f.fs.symlink(target, link);
        const calls: readonly (readonly [string, () => Promise<unknown>])[] = [
          [`mkdir(${name})`, () => f.fs.mkdir(link)],
          [`mkdir('${name}/')`, () => f.fs.mkdir(`${link}/`)],
          [`mkdir(${name}, recursive)`, () => f.fs.mkdir(link, { recursive: true })],
        ];
        for (const [call, run] of calls) await checkRejects(run, AlreadyExists, call);
        // Beneath the link, a directory is in the way as much as the link is, unless the link
        // leads through a file, which holds no directory (as mkdir() under a file).
        await checkRejects(
          () => f.fs.mkdir(join(link, "child"), { recursive: true }),
          name === "through-file" ? NotADirectory : AlreadyExists,
          `mkdir(${name}/child, recursive)`,
        );
        checkEqual((await f.fs.lstat(link)).kind, "symlink", `${name}: the link stays a link`);
      }
      for (const missing of ["nowhere", "missing", "absent"]) {
        await checkMissing(f.fs, at(f, missing), "nothing created through the links");
      }
      checkBytes(await f.fs.readFile(file), "F", "the file left intact");
    },
  },
  {
    name: "mkdir() with a missing parent fails with NotFound",
    async run(f) {
      const dir = at(f, "missing", "dir");
      await checkRejects(() => f.fs.mkdir(dir), NotFound, "mkdir with a missing parent");
      await checkMissing(f.fs, at(f, "missing"), "no parent is created");
    },
  },
  {
    name: "mkdir() under a file fails with NotADirectory",
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      await checkRejects(
        () => f.fs.mkdir(join(file, "dir")),
        NotADirectory,
        "mkdir under a file",
      );
      await checkRejects(
        () => f.fs.mkdir(join(file, "dir", "deeper"), { recursive: true }),
        NotADirectory,
        "recursive mkdir under a file",
      );
    },
  },
  {
    name: "mkdir() creates a directory with the requested mode",
    needs: ["modes"],
    async run(f) {
      const dir = at(f, "private");
      await f.fs.mkdir(dir, { mode: 0o700 });
      checkMode((await f.fs.stat(dir)).mode, 0o700, "mode of a directory made with 0o700");
      const deep = at(f, "a", "b");
      await f.fs.mkdir(deep, { mode: 0o700, recursive: true });
      checkMode((await f.fs.stat(deep)).mode, 0o700, "mode of a recursively made directory");
    },
  },

  // readDir()
  {
    name: "readDir() lists entries sorted by name (by UTF-16 code unit) with their kinds",
    async run(f) {
      await f.fs.writeFile(at(f, "c.txt"), bytes("c"));
      await f.fs.mkdir(at(f, "a"));
      await f.fs.writeFile(at(f, "B"), bytes("B"));
      await f.fs.writeFile(at(f, "9"), bytes("9"));
      await f.fs.mkdir(at(f, "10"));
      await f.fs.writeFile(at(f, "a", "nested"), bytes("n"));
      // Past U+FFFF (a surrogate pair) before U+FF5E, as JavaScript's `<` puts them (code point
      // and UTF-8 byte order put it after).
      await f.fs.writeFile(at(f, "\uFF5E"), bytes("w"));
      await f.fs.writeFile(at(f, "\u{1F600}"), bytes("s"));
      await f.fs.writeFile(at(f, "\u00E9"), bytes("e"));
      checkSame(
        await f.fs.readDir(f.root),
        [
          { name: "10", kind: "directory" },
          { name: "9", kind: "file" },
          { name: "B", kind: "file" },
          { name: "a", kind: "directory" },
          { name: "c.txt", kind: "file" },
          { name: "\u00E9", kind: "file" },
          { name: "\u{1F600}", kind: "file" },
          { name: "\uFF5E", kind: "file" },
        ],
        "readDir(root)",
      );
    },
  },
  {
    name: "readDir() reports a symlink as a symlink, never following it",
    needs: ["symlinks"],
    async run(f) {
      await f.fs.mkdir(at(f, "dir"));
      await f.fs.writeFile(at(f, "dir", "inside"), bytes("I"));
      await f.fs.symlink(at(f, "dir"), at(f, "dir-link"));
      await f.fs.symlink(at(f, "nowhere"), at(f, "dangling"));
      checkSame(
        await f.fs.readDir(f.root),
        [
          { name: "dangling", kind: "symlink" },
          { name: "dir", kind: "directory" },
          { name: "dir-link", kind: "symlink" },
        ],
        "readDir(root)",
      );
      checkSame(
        await f.fs.readDir(at(f, "dir-link")),
        [{ name: "inside", kind: "file" }],
        "readDir through a directory symlink",
      );
    },
  },
  {
    name: "readDir() of a file fails with NotADirectory",
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      await checkRejects(() => f.fs.readDir(file), NotADirectory, "readDir of a file");
    },
  },

  // stat() / lstat()
  {
    name: "stat() reports the kind, size, permission bits and mtime of a file",
    async run(f) {
      const path = at(f, "file");
      await f.fs.writeFile(path, bytes("hello"));
      const info = await f.fs.stat(path);
      checkEqual(info.kind, "file", "kind");
      checkEqual(info.size, 5, "size");
      check(
        Number.isInteger(info.mode) && (info.mode & ~0o777) === 0,
        `mode ${info.mode} holds bits outside 0o777`,
      );
      check(Number.isFinite(info.mtimeMs), `mtimeMs ${info.mtimeMs} is not a finite number`);
      const same = await f.fs.lstat(path);
      checkEqual(same.kind, "file", "lstat kind of a plain file");
      checkEqual(same.size, 5, "lstat size of a plain file");
    },
  },
  {
    name: "stat() reports a directory",
    async run(f) {
      const dir = at(f, "dir");
      await f.fs.mkdir(dir);
      checkEqual((await f.fs.stat(dir)).kind, "directory", "stat kind");
      checkEqual((await f.fs.lstat(dir)).kind, "directory", "lstat kind");
    },
  },
  {
    name: "stat() follows a symlink and lstat() does not",
    needs: ["symlinks"],
    async run(f) {
      const target = at(f, "target");
      const link = at(f, "link");
      await f.fs.writeFile(target, bytes("hello"));
      await f.fs.symlink("target", link);
      const followed = await f.fs.stat(link);
      checkEqual(followed.kind, "file", "stat kind through the link");
      checkEqual(followed.size, 5, "stat size through the link");
      const own = await f.fs.lstat(link);
      checkEqual(own.kind, "symlink", "lstat kind of the link");
      checkEqual(own.size, "target".length, "lstat size of the link (its target's length)");
    },
  },
  {
    name: "stat() of a dangling symlink fails with NotFound while lstat() succeeds",
    needs: ["symlinks"],
    async run(f) {
      const link = at(f, "link");
      await f.fs.symlink(at(f, "nowhere"), link);
      await checkRejects(() => f.fs.stat(link), NotFound, "stat of a dangling link");
      checkEqual((await f.fs.lstat(link)).kind, "symlink", "lstat kind of a dangling link");
    },
  },
  {
    name: "stat() through a file used as a directory fails with NotADirectory",
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      await checkRejects(() => f.fs.stat(join(file, "x")), NotADirectory, "stat(file/x)");
      await checkRejects(() => f.fs.readFile(join(file, "x")), NotADirectory, "readFile(file/x)");
    },
  },

  // realPath()
  {
    name: "realPath() returns the canonical absolute path of a file",
    async run(f) {
      const base = await f.fs.realPath(f.root);
      check(isAbsolute(base), `realPath(root) '${base}' is not absolute`);
      await f.fs.mkdir(at(f, "dir"));
      await f.fs.writeFile(at(f, "dir", "file"), bytes("F"));
      checkEqual(
        await f.fs.realPath(at(f, "dir", "file")),
        join(base, "dir", "file"),
        "realPath of a plain file",
      );
      checkEqual(
        await f.fs.realPath(`${f.root}/dir/../dir/./file`),
        join(base, "dir", "file"),
        "realPath of a path with dot segments",
      );
    },
  },
  {
    name: "realPath() resolves a symlinked directory",
    needs: ["symlinks"],
    async run(f) {
      const base = await f.fs.realPath(f.root);
      await f.fs.mkdir(at(f, "real"));
      await f.fs.writeFile(at(f, "real", "file"), bytes("F"));
      await f.fs.symlink("real", at(f, "relative-link"));
      await f.fs.symlink(at(f, "real"), at(f, "absolute-link"));
      const want = join(base, "real", "file");
      checkEqual(await f.fs.realPath(at(f, "relative-link", "file")), want, "relative link");
      checkEqual(await f.fs.realPath(at(f, "absolute-link", "file")), want, "absolute link");
      checkEqual(await f.fs.realPath(at(f, "relative-link")), join(base, "real"), "the link");
    },
  },

  // chmod()
  {
    name: "chmod() sets the permission bits of a file and a directory",
    needs: ["modes"],
    async run(f) {
      const file = at(f, "file");
      const dir = at(f, "dir");
      await f.fs.writeFile(file, bytes("F"), { mode: 0o600 });
      await f.fs.mkdir(dir, { mode: 0o700 });
      await f.fs.chmod(file, 0o644);
      await f.fs.chmod(dir, 0o755);
      checkMode((await f.fs.stat(file)).mode, 0o644, "file mode after chmod");
      checkMode((await f.fs.stat(dir)).mode, 0o755, "directory mode after chmod");
      await f.fs.chmod(file, 0o600);
      await f.fs.chmod(dir, 0o700);
      checkMode((await f.fs.stat(file)).mode, 0o600, "file mode after a second chmod");
      checkMode((await f.fs.stat(dir)).mode, 0o700, "directory mode after a second chmod");
    },
  },
  {
    name: "chmod() refuses a mode that is not an integer from 0 to 2^32 - 1 and changes nothing",
    needs: ["modes"],
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"), { mode: 0o600 });
      for (const mode of [-1, 0o600 + 0.5, Number.NaN, 2 ** 32]) {
        await checkRejects(() => f.fs.chmod(file, mode), FsIoError, `chmod(${mode})`);
      }
      checkMode((await f.fs.stat(file)).mode, 0o600, "file mode after refused chmods");
    },
  },
  {
    name: "open(), writeFile() and mkdir() refuse a mode that is not an integer from 0 to 2^32 - 1",
    needs: ["modes"],
    async run(f) {
      for (const mode of [-1, 0o600 + 0.5, 2 ** 32]) {
        const file = at(f, `file-${mode}`);
        await checkRejects(
          () => f.fs.open(file, { createNew: true, write: true, mode }),
          FsIoError,
          `open(mode ${mode})`,
        );
        await checkRejects(
          () => f.fs.writeFile(file, bytes("F"), { mode }),
          FsIoError,
          `writeFile(mode ${mode})`,
        );
        await checkRejects(
          () => f.fs.mkdir(at(f, `dir-${mode}`), { mode }),
          FsIoError,
          `mkdir(mode ${mode})`,
        );
      }
    },
  },
  {
    name: "chmod(), open(), writeFile() and mkdir() take a mode from 2^31 up to 2^32 - 1",
    needs: ["modes"],
    async run(f) {
      // Such a mode is in the port's range: its permission bits are kept (the rest the platform
      // ignores). A runtime whose native layer takes only signed 32-bit modes must not fail on
      // it, nor abort the process.
      const high = 2 ** 31;
      const file = at(f, "file");
      const handle = await f.fs.open(file, { createNew: true, write: true, mode: high + 0o600 });
      await handle.close();
      checkMode((await f.fs.stat(file)).mode, 0o600, "mode of a file created with 2^31 + 0o600");
      await f.fs.chmod(file, high + 0o640);
      checkMode((await f.fs.stat(file)).mode, 0o640, "file mode after chmod(2^31 + 0o640)");
      const written = at(f, "written");
      await f.fs.writeFile(written, bytes("W"), { mode: high + 0o600 });
      checkMode((await f.fs.stat(written)).mode, 0o600, "mode of a file written with 2^31 + 0o600");
      const dir = at(f, "dir");
      await f.fs.mkdir(dir, { mode: high + 0o700 });
      checkMode((await f.fs.stat(dir)).mode, 0o700, "mode of a directory made with 2^31 + 0o700");
      await f.fs.chmod(file, 2 ** 32 - 1 - 0o7000);
      checkMode((await f.fs.stat(file)).mode, 0o777, "file mode after chmod(2^32 - 1 - 0o7000)");
    },
  },
  {
    name: "chmod() follows a symlink",
    needs: ["symlinks", "modes"],
    async run(f) {
      const target = at(f, "target");
      await f.fs.writeFile(target, bytes("T"), { mode: 0o600 });
      await f.fs.chmod(target, 0o600);
      await f.fs.symlink("target", at(f, "link"));
      await f.fs.chmod(at(f, "link"), 0o640);
      checkMode((await f.fs.stat(target)).mode, 0o640, "target mode after chmod via the link");
    },
  },

  // symlink() / readLink()
  {
    name: "symlink() and readLink() round-trip absolute and relative targets, byte for byte",
    needs: ["symlinks"],
    async run(f) {
      await f.fs.symlink("/absolute/target", at(f, "absolute"));
      await f.fs.symlink("../relative/target", at(f, "relative"));
      await f.fs.symlink("plain", at(f, "plain"));
      checkEqual(await f.fs.readLink(at(f, "absolute")), "/absolute/target", "absolute target");
      checkEqual(await f.fs.readLink(at(f, "relative")), "../relative/target", "relative target");
      checkEqual(await f.fs.readLink(at(f, "plain")), "plain", "plain target");
      // Byte for byte: a leading U+FEFF (which a default UTF-8 decoder drops) and other planes.
      await f.fs.symlink("\u{feff}t\u{e9}\u{1f642}", at(f, "bom"));
      checkEqual(await f.fs.readLink(at(f, "bom")), "\u{feff}t\u{e9}\u{1f642}", "U+FEFF target");
    },
  },
  {
    name: "symlink() over an existing path fails with AlreadyExists",
    needs: ["symlinks"],
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      await f.fs.symlink("one", at(f, "link"));
      await checkRejects(() => f.fs.symlink("x", file), AlreadyExists, "symlink over a file");
      await checkRejects(
        () => f.fs.symlink("two", at(f, "link")),
        AlreadyExists,
        "symlink over a link",
      );
      checkBytes(await f.fs.readFile(file), "F", "the file left intact");
      checkEqual(await f.fs.readLink(at(f, "link")), "one", "the link left intact");
    },
  },
  {
    name: "symlink() at a missing name with a trailing slash fails with NotFound",
    needs: ["symlinks"],
    async run(f) {
      await checkRejects(
        () => f.fs.symlink("target", `${at(f, "link")}/`),
        NotFound,
        "symlink('target', 'link/')",
      );
      await checkMissing(f.fs, at(f, "link"), "no link created");
    },
  },
  {
    name: "readLink() of a path that is not a symlink fails with a port error",
    needs: ["symlinks"],
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      await checkRejects(() => f.fs.readLink(file), FsError, "readLink of a file");
    },
  },

  // utime()
  {
    name: "utime() sets the modification time",
    async run(f) {
      const file = at(f, "file");
      const dir = at(f, "dir");
      await f.fs.writeFile(file, bytes("F"));
      await f.fs.mkdir(dir);
      const mtime = 1_600_000_000_000;
      await f.fs.utime(file, mtime);
      await f.fs.utime(dir, mtime + 5_000);
      const fileTime = (await f.fs.stat(file)).mtimeMs;
      const dirTime = (await f.fs.stat(dir)).mtimeMs;
      check(Math.abs(fileTime - mtime) < 1, `file mtimeMs ${fileTime}, expected ${mtime}`);
      check(
        Math.abs(dirTime - (mtime + 5_000)) < 1,
        `directory mtimeMs ${dirTime}, expected ${mtime + 5_000}`,
      );
    },
  },
  {
    name: "utime() follows a symlink",
    needs: ["symlinks"],
    async run(f) {
      const target = at(f, "target");
      await f.fs.writeFile(target, bytes("T"));
      await f.fs.symlink("target", at(f, "link"));
      const mtime = 1_500_000_000_000;
      await f.fs.utime(at(f, "link"), mtime);
      const time = (await f.fs.stat(target)).mtimeMs;
      check(Math.abs(time - mtime) < 1, `target mtimeMs ${time}, expected ${mtime}`);
    },
  },
  {
    name:
      "utime() shows in the mtimeMs of lstat(), stat() and a handle's stat() of a file, and of lstat() and stat() of a directory",
    async run(f) {
      const file = at(f, "file");
      const dir = at(f, "dir");
      await f.fs.writeFile(file, bytes("F"));
      await f.fs.mkdir(dir);
      for (const mtime of [1_600_000_000_000, -86_400_000, 1_700_000_000_123]) {
        await f.fs.utime(file, mtime);
        await f.fs.utime(dir, mtime + 5_000);
        checkEqual((await f.fs.lstat(file)).mtimeMs, mtime, "lstat(file).mtimeMs after utime");
        checkEqual((await f.fs.stat(file)).mtimeMs, mtime, "stat(file).mtimeMs after utime");
        const held = await withHandle(f.fs, file, {}, (handle) => handle.stat());
        checkEqual(held.mtimeMs, mtime, "the handle's stat().mtimeMs after utime");
        checkEqual(
          (await f.fs.lstat(dir)).mtimeMs,
          mtime + 5_000,
          "lstat(dir).mtimeMs after utime",
        );
        checkEqual((await f.fs.stat(dir)).mtimeMs, mtime + 5_000, "stat(dir).mtimeMs after utime");
      }
    },
  },
  {
    name:
      "a write moves a file's mtimeMs past an older time, in lstat(), stat() and the handle's stat()",
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      // Before 1970: earlier than any clock reads, even one that starts at 0.
      const old = -86_400_000;
      const after = async (what: string, handle?: FileHandle) => {
        const infos: [string, number][] = [
          ["lstat", (await f.fs.lstat(file)).mtimeMs],
          ["stat", (await f.fs.stat(file)).mtimeMs],
        ];
        if (handle !== undefined) infos.push(["the handle's stat", (await handle.stat()).mtimeMs]);
        for (const [call, mtimeMs] of infos) {
          check(mtimeMs > old, `${call}().mtimeMs ${mtimeMs} ${what}: not past ${old}`);
        }
      };
      const baseline = async () => {
        await f.fs.utime(file, old);
        checkEqual((await f.fs.lstat(file)).mtimeMs, old, "lstat().mtimeMs after utime");
        checkEqual((await f.fs.stat(file)).mtimeMs, old, "stat().mtimeMs after utime");
      };
      await baseline();
      await withHandle(f.fs, file, { write: true }, async (handle) => {
        checkEqual((await handle.stat()).mtimeMs, old, "the handle's stat().mtimeMs after utime");
        await handle.write(bytes("more"));
        await after("after a write through a handle", handle);
      });
      await after("after a write through a handle, closed");
      await baseline();
      await f.fs.writeFile(file, bytes("new"));
      await after("after writeFile()");
    },
  },
  {
    name:
      "lstat() of a symlink reports the link's own mtimeMs, not its target's, before and after utime() through the link",
    needs: ["symlinks"],
    async run(f) {
      const before = at(f, "before");
      const target = at(f, "target");
      const link = at(f, "link");
      await f.fs.writeFile(before, bytes("B"));
      await f.fs.writeFile(target, bytes("T"));
      const old = 1_000_000_000_000;
      await f.fs.utime(target, old);
      await f.fs.symlink("target", link);
      const made = (await f.fs.stat(before)).mtimeMs;
      const own = (await f.fs.lstat(link)).mtimeMs;
      checkEqual((await f.fs.stat(link)).mtimeMs, old, "stat(link).mtimeMs (its target's)");
      check(own !== old, `lstat(link).mtimeMs ${own} is its target's`);
      // The link was made after 'before' was written: its time is not earlier (a second of slack
      // for coarse clocks).
      check(
        own >= made - 1_000,
        `lstat(link).mtimeMs ${own} is before 'before' was written, ${made}`,
      );
      const later = 1_500_000_000_000;
      await f.fs.utime(link, later);
      checkEqual(
        (await f.fs.stat(target)).mtimeMs,
        later,
        "stat(target).mtimeMs after utime(link)",
      );
      checkEqual((await f.fs.stat(link)).mtimeMs, later, "stat(link).mtimeMs after utime(link)");
      checkEqual((await f.fs.lstat(link)).mtimeMs, own, "lstat(link).mtimeMs after utime(link)");
    },
  },

  // homeDir()
  {
    name: "homeDir() returns an absolute path or undefined",
    run(f) {
      const home = f.fs.homeDir?.();
      check(
        home === undefined || (typeof home === "string" && isAbsolute(home)),
        `homeDir() returned ${JSON.stringify(home)}`,
      );
      return Promise.resolve();
    },
  },

  {
    name: "a path component longer than 255 UTF-8 bytes fails with FsIoError ENAMETOOLONG",
    async run(f) {
      // 255 bytes is the longest name (NAME_MAX), counted in UTF-8 bytes, not characters.
      const longest = ["n".repeat(255), "\u20ac".repeat(85)];
      for (const name of longest) await f.fs.writeFile(at(f, name), bytes("x"));
      checkEqual((await f.fs.readDir(f.root)).length, 2, "files with 255-byte names");
      for (const name of ["n".repeat(256), "\u00e9".repeat(128)]) {
        const path = at(f, name);
        const calls: readonly (readonly [string, string, () => Promise<unknown>])[] = [
          ["writeFile", path, () => f.fs.writeFile(path, bytes("x"))],
          ["stat", path, () => f.fs.stat(path)],
          ["mkdir", path, () => f.fs.mkdir(path)],
          ["stat below it", join(path, "x"), () => f.fs.stat(join(path, "x"))],
        ];
        for (const [call, named, run] of calls) {
          const what = `${call} with a name of ${bytes(name).length} bytes`;
          const error = await checkRejectsCode(run, "ENAMETOOLONG", what);
          checkEqual(error.path, named, `${what}: error path`);
        }
      }
      checkEqual((await f.fs.readDir(f.root)).length, 2, "nothing created with a longer name");
    },
  },
  {
    name: "a lone UTF-16 surrogate in a name becomes U+FFFD, as the name is stored in UTF-8",
    async run(f) {
      // Two names that differ only in a lone surrogate are one name on disk.
      await f.fs.writeFile(at(f, "note-\uD800"), bytes("first"));
      await f.fs.writeFile(at(f, "note-\uDC00"), bytes("second"));
      checkSame(
        await f.fs.readDir(f.root),
        [{ name: "note-\uFFFD", kind: "file" }],
        "listing after writing 'note-\\uD800' and 'note-\\uDC00'",
      );
      checkBytes(await f.fs.readFile(at(f, "note-\uD800")), "second", "readFile('note-\\uD800')");
      checkBytes(await f.fs.readFile(at(f, "note-\uFFFD")), "second", "readFile('note-\\uFFFD')");
      await f.fs.mkdir(at(f, "dir-\uDBFF"));
      await checkRejects(
        () => f.fs.mkdir(at(f, "dir-\uFFFD")),
        AlreadyExists,
        "mkdir('dir-\\uFFFD') after mkdir('dir-\\uDBFF')",
      );
      checkEqual((await f.fs.stat(at(f, "dir-\uDC01"))).kind, "directory", "stat('dir-\\uDC01')");
      await f.fs.rename(at(f, "note-\uDFFF"), at(f, "dir-\uD83D", "moved-\uD83D"));
      checkSame(
        await f.fs.readDir(at(f, "dir-\uFFFD")),
        [{ name: "moved-\uFFFD", kind: "file" }],
        "listing after a rename to 'moved-\\uD83D'",
      );
      checkEqual(
        await f.fs.realPath(at(f, "dir-\uDFFF")),
        join(await f.fs.realPath(f.root), "dir-\uFFFD"),
        "realPath('dir-\\uDFFF')",
      );
    },
  },
  {
    name: "a lone UTF-16 surrogate in a symlink target becomes U+FFFD",
    needs: ["symlinks"],
    async run(f) {
      await f.fs.mkdir(at(f, "dir-\uFFFD"));
      await f.fs.symlink("dir-\uD800", at(f, "link-\uDC00"));
      checkEqual(await f.fs.readLink(at(f, "link-\uFFFD")), "dir-\uFFFD", "readLink of the link");
      checkEqual((await f.fs.stat(at(f, "link-\uD800"))).kind, "directory", "stat through it");
    },
  },
  {
    name: "a path of 4096 UTF-8 bytes or more fails with FsIoError ENAMETOOLONG",
    async run(f) {
      // Linux's PATH_MAX counts bytes with the terminating NUL: 4096 bytes is one too many. The
      // second path is shorter than that in UTF-16 units, but not in UTF-8 bytes. (realPath() is
      // left out: realpath(3) walks the path itself, and reports a missing entry first.)
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("F"));
      for (const unit of ["d", "\u00e9"]) {
        const path = pathOfBytes(f.root, 4096, unit);
        const calls: readonly (readonly [string, () => Promise<unknown>])[] = [
          ["stat", () => f.fs.stat(path)],
          ["lstat", () => f.fs.lstat(path)],
          ["readFile", () => f.fs.readFile(path)],
          ["writeFile", () => f.fs.writeFile(path, bytes("x"))],
          ["open with create", () => openAndClose(f.fs, path, { create: true, write: true })],
          ["mkdir with recursive", () => f.fs.mkdir(path, { recursive: true })],
          ["readDir", () => f.fs.readDir(path)],
          ["remove", () => f.fs.remove(path)],
        ];
        for (const [call, run] of calls) {
          const what = `${call} of a path of ${bytes(path).length} bytes (${path.length} units)`;
          const error = await checkRejectsCode(run, "ENAMETOOLONG", what);
          checkEqual(error.path, path, `${what}: error path`);
        }
        await checkRejectsCode(
          () => f.fs.rename(file, path),
          "ENAMETOOLONG",
          `rename() to a path of ${bytes(path).length} bytes`,
        );
      }
      checkSame(await f.fs.readDir(f.root), [{ name: "file", kind: "file" }], "nothing created");
    },
  },
  {
    name: "symlink() at a path or to a target of 4096 UTF-8 bytes or more fails with ENAMETOOLONG",
    needs: ["symlinks"],
    async run(f) {
      const link = at(f, "link");
      for (const target of ["/" + "x/".repeat(2048), "/" + "x".repeat(4095)]) {
        const what = `symlink() with a target of ${bytes(target).length} bytes`;
        const error = await checkRejectsCode(
          () => f.fs.symlink(target, link),
          "ENAMETOOLONG",
          what,
        );
        checkEqual(error.path, link, `${what}: error path`);
      }
      const path = pathOfBytes(f.root, 4096, "d");
      const what = `symlink() at a path of ${bytes(path).length} bytes`;
      const error = await checkRejectsCode(
        () => f.fs.symlink("target", path),
        "ENAMETOOLONG",
        what,
      );
      checkEqual(error.path, path, `${what}: error path`);
      checkSame(await f.fs.readDir(f.root), [], "nothing created");
    },
  },

  // Paths that end in `.` or `..`
  {
    name: "remove() of a path ending in '.' or '..' fails with EINVAL and removes nothing",
    needs: ["symlinks"],
    async run(f) {
      const target = await dottedFixture(f);
      const paths = [
        ...dottedPaths(f, target),
        `${f.root}/link/./`,
        `${target}/sub/../`,
        `${target}/sub/.`,
      ];
      for (const path of paths) {
        for (const recursive of [false, true]) {
          const what = `remove('${path}'${recursive ? ", recursive" : ""})`;
          const error = await checkRejectsCode(
            () => f.fs.remove(path, { recursive }),
            "EINVAL",
            what,
          );
          checkEqual(error.path, path, `${what}: error path`);
          checkSame(
            await f.fs.readDir(target),
            [{ name: "keep", kind: "file" }, { name: "sub", kind: "directory" }],
            `the target directory after ${what}`,
          );
          checkEqual((await f.fs.lstat(at(f, "link"))).kind, "symlink", `the link after ${what}`);
        }
      }
      checkBytes(await f.fs.readFile(join(target, "keep")), "precious", "the target's file");
    },
  },
  {
    name: "rename() from or to a path ending in '.' or '..' fails with EBUSY and moves nothing",
    needs: ["symlinks"],
    async run(f) {
      const target = await dottedFixture(f);
      await f.fs.mkdir(at(f, "other"));
      const dotted = dottedPaths(f, target);
      for (const path of dotted) {
        await checkRejectsCode(
          () => f.fs.rename(path, at(f, "moved")),
          "EBUSY",
          `rename('${path}', ...)`,
        );
        await checkRejectsCode(
          () => f.fs.rename(at(f, "other"), path),
          "EBUSY",
          `rename(..., '${path}')`,
        );
      }
      checkSame(
        await f.fs.readDir(f.root),
        [
          { name: "link", kind: "symlink" },
          { name: "other", kind: "directory" },
          { name: "target", kind: "directory" },
        ],
        "the root after the refused renames",
      );
      checkSame(
        await f.fs.readDir(target),
        [{ name: "keep", kind: "file" }, { name: "sub", kind: "directory" }],
        "the target after the refused renames",
      );
    },
  },
  {
    name:
      "mkdir(), writeFile() and open() with create of a path ending in '.' or '..' change nothing",
    needs: ["symlinks"],
    async run(f) {
      const target = await dottedFixture(f);
      const dotted = dottedPaths(f, target);
      for (const path of dotted) {
        await checkRejects(() => f.fs.mkdir(path), AlreadyExists, `mkdir('${path}')`);
        await f.fs.mkdir(path, { recursive: true });
        await checkRejects(
          () => f.fs.writeFile(path, bytes("x")),
          IsADirectory,
          `writeFile('${path}')`,
        );
        await checkRejects(
          () => f.fs.writeFile(path, bytes("x"), { createNew: true }),
          FsError,
          `writeFile('${path}', createNew)`,
        );
        await checkRejects(
          () => openAndClose(f.fs, path, { create: true }),
          IsADirectory,
          `open('${path}', create)`,
        );
        await checkRejects(
          () => openAndClose(f.fs, path, { create: true, truncate: true }),
          IsADirectory,
          `open('${path}', create, truncate)`,
        );
      }
      checkSame(
        await f.fs.readDir(target),
        [{ name: "keep", kind: "file" }, { name: "sub", kind: "directory" }],
        "the target after the calls",
      );
      checkBytes(await f.fs.readFile(join(target, "keep")), "precious", "the target's file");
    },
  },

  // Trailing slashes on a create
  {
    name:
      "open() with create and writeFile() of a name with a trailing slash fail with IsADirectory",
    async run(f) {
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("old"));
      const calls: readonly (readonly [string, () => Promise<unknown>])[] = [
        ["open('file/', create)", () => openAndClose(f.fs, `${file}/`, { create: true })],
        ["open('file/', createNew)", () => openAndClose(f.fs, `${file}/`, { createNew: true })],
        ["writeFile('file/')", () => f.fs.writeFile(`${file}/`, bytes("new"))],
        [
          "writeFile('file/', createNew)",
          () => f.fs.writeFile(`${file}/`, bytes("new"), { createNew: true }),
        ],
        [
          "open('missing/', create)",
          () => openAndClose(f.fs, `${f.root}/missing/`, { create: true }),
        ],
        ["writeFile('missing/')", () => f.fs.writeFile(`${f.root}/missing/`, bytes("new"))],
      ];
      for (const [what, run] of calls) await checkRejects(run, IsADirectory, what);
      checkBytes(await f.fs.readFile(file), "old", "the file after the refused creates");
      await checkMissing(f.fs, at(f, "missing"), "a refused create");
      // Without create, a file named as a directory is not one.
      await checkRejects(() => openAndClose(f.fs, `${file}/`), NotADirectory, "open('file/')");
      // A missing directory on the way is still reported as missing.
      await checkRejects(
        () => openAndClose(f.fs, `${f.root}/missing/x/`, { create: true }),
        NotFound,
        "open('missing/x/', create)",
      );
    },
  },

  // Paths holding NUL
  {
    name: "a path holding a NUL byte fails with FsIoError EINVAL in every call",
    async run(f) {
      const bad = `${f.root}/a\0b`;
      const file = at(f, "file");
      await f.fs.writeFile(file, bytes("x"));
      const calls: [string, () => Promise<unknown>][] = [
        ["open", () => openAndClose(f.fs, bad)],
        ["open with create", () => openAndClose(f.fs, bad, { create: true })],
        ["readFile", () => f.fs.readFile(bad)],
        ["writeFile", () => f.fs.writeFile(bad, bytes("x"))],
        ["rename from", () => f.fs.rename(bad, at(f, "x"))],
        ["rename to", () => f.fs.rename(file, bad)],
        ["remove", () => f.fs.remove(bad)],
        ["remove with recursive", () => f.fs.remove(bad, { recursive: true })],
        ["mkdir", () => f.fs.mkdir(bad)],
        ["mkdir with recursive", () => f.fs.mkdir(`${bad}/c`, { recursive: true })],
        ["readDir", () => f.fs.readDir(bad)],
        ["stat", () => f.fs.stat(bad)],
        ["lstat", () => f.fs.lstat(bad)],
        ["realPath", () => f.fs.realPath(bad)],
        ["chmod", () => f.fs.chmod(bad, 0o600)],
        ["readLink", () => f.fs.readLink(bad)],
        ["syncDir", () => f.fs.syncDir(bad)],
        ["utime", () => f.fs.utime(bad, 1_600_000_000_000)],
      ];
      const fs = f.fs;
      const { readFileNoFollow, openNoFollow, openAppendNoFollow } = fs;
      if (readFileNoFollow !== undefined) {
        calls.push(["readFileNoFollow", () => readFileNoFollow.call(fs, bad)]);
      }
      if (openNoFollow !== undefined) {
        calls.push(["openNoFollow", async () => (await openNoFollow.call(fs, bad)).handle.close()]);
      }
      if (openAppendNoFollow !== undefined) {
        calls.push([
          "openAppendNoFollow",
          async () => (await openAppendNoFollow.call(fs, bad)).handle.close(),
        ]);
      }
      if (f.capabilities?.symlinks !== false) {
        calls.push(["symlink at it", () => f.fs.symlink("target", bad)]);
        calls.push(["symlink to it", () => f.fs.symlink(bad, at(f, "link"))]);
      }
      for (const [call, run] of calls) {
        const what = `${call} of a path holding NUL`;
        const error = await checkRejectsCode(run, "EINVAL", what);
        // The port call is the first word of `call`.
        checkEqual(error.syscall, call.split(" ")[0], `${what}: error syscall`);
      }
      checkSame(await f.fs.readDir(f.root), [{ name: "file", kind: "file" }], "nothing created");
    },
  },

  // Lengths
  {
    name: "truncate() to a length past any file's size fails with a port error or sets that size",
    async run(f) {
      const path = at(f, "file");
      await withHandle(f.fs, path, { create: true }, async (handle) => {
        for (const length of [2 ** 44, 2 ** 50, Number.MAX_SAFE_INTEGER]) {
          const what = `truncate(${length})`;
          let outcome: unknown;
          try {
            await handle.truncate(length);
          } catch (error) {
            outcome = error;
          }
          if (outcome === undefined) {
            checkEqual((await handle.stat()).size, length, `the size after ${what}`);
            await handle.truncate(0);
            continue;
          }
          check(outcome instanceof FsIoError, `${what}: rejected with ${describeError(outcome)}`);
          check(
            outcome.code === "EFBIG" || outcome.code === "EINVAL",
            `${what}: expected code EFBIG (or EINVAL), got ${outcome.code}`,
          );
          checkEqual((await handle.stat()).size, 0, `the size after a refused ${what}`);
        }
      });
    },
  },

  // Errors
  ...missingPathChecks,
  {
    name: "every failing call names the port call it was in error.syscall",
    async run(f) {
      const fs = f.fs;
      const file = at(f, "file");
      const dir = at(f, "dir");
      const missing = at(f, "missing");
      const under = join(file, "x");
      await fs.writeFile(file, bytes("F"));
      await fs.mkdir(dir);
      await fs.writeFile(join(dir, "inside"), bytes("I"));
      const calls: [string, string, () => Promise<unknown>][] = [
        ["open", "open(file/x)", () => openAndClose(fs, under)],
        ["open", "open(file, createNew)", () => openAndClose(fs, file, { createNew: true })],
        ["readFile", "readFile(file/x)", () => fs.readFile(under)],
        ["readFile", "readFile(dir)", () => fs.readFile(dir)],
        ["writeFile", "writeFile(file/x)", () => fs.writeFile(under, bytes("x"))],
        [
          "writeFile",
          "writeFile(file, createNew)",
          () => fs.writeFile(file, bytes("x"), { createNew: true }),
        ],
        ["writeFile", "writeFile(dir)", () => fs.writeFile(dir, bytes("x"))],
        ["rename", "rename(file/x, y)", () => fs.rename(under, at(f, "y"))],
        ["rename", "rename(file, missing/x)", () => fs.rename(file, join(missing, "x"))],
        ["rename", "rename(dir, file)", () => fs.rename(dir, file)],
        ["remove", "remove(file/x)", () => fs.remove(under)],
        ["remove", "remove(dir) of a non-empty directory", () => fs.remove(dir)],
        ["mkdir", "mkdir(file/x)", () => fs.mkdir(under)],
        ["mkdir", "mkdir(dir) of an existing directory", () => fs.mkdir(dir)],
        ["readDir", "readDir(file)", () => fs.readDir(file)],
        ["stat", "stat(file/x)", () => fs.stat(under)],
        ["lstat", "lstat(file/x)", () => fs.lstat(under)],
        ["realPath", "realPath(file/x)", () => fs.realPath(under)],
        ["chmod", "chmod(file/x)", () => fs.chmod(under, 0o600)],
        ["readLink", "readLink(file/x)", () => fs.readLink(under)],
        ["syncDir", "syncDir(file)", () => fs.syncDir(file)],
        ["utime", "utime(file/x)", () => fs.utime(under, 1_600_000_000_000)],
      ];
      if (f.capabilities?.symlinks !== false) {
        calls.push(["symlink", "symlink(file/x)", () => fs.symlink("target", under)]);
        calls.push(["symlink", "symlink(file) over a file", () => fs.symlink("target", file)]);
      }
      const { readFileNoFollow, openNoFollow, openAppendNoFollow } = fs;
      if (readFileNoFollow !== undefined) {
        const read = (path: string) => () => readFileNoFollow.call(fs, path);
        calls.push(["readFileNoFollow", "readFileNoFollow(missing)", read(missing)]);
        calls.push(["readFileNoFollow", "readFileNoFollow(file/x)", read(under)]);
        calls.push(["readFileNoFollow", "readFileNoFollow(dir)", read(dir)]);
      }
      for (
        const [name, open] of [["openNoFollow", openNoFollow], [
          "openAppendNoFollow",
          openAppendNoFollow,
        ]] as const
      ) {
        if (open === undefined) continue;
        const run = (path: string) => async () => (await open.call(fs, path)).handle.close();
        calls.push([name, `${name}(missing)`, run(missing)]);
        calls.push([name, `${name}(file/x)`, run(under)]);
        calls.push([name, `${name}(dir)`, run(dir)]);
      }
      const readOnly = await fs.open(file);
      try {
        calls.push(["write", "write() on a read-only handle", () => readOnly.write(bytes("x"))]);
        calls.push(["truncate", "truncate() on a read-only handle", () => readOnly.truncate(0)]);
        calls.push(["read", "read(-1, 1) on a handle", () => readOnly.read(-1, 1)]);
        const closed = await fs.open(file, { write: true });
        await closed.close();
        calls.push(
          ["read", "read() on a closed handle", () => closed.read(0, 1)],
          ["write", "write() on a closed handle", () => closed.write(bytes("x"))],
          ["truncate", "truncate() on a closed handle", () => closed.truncate(0)],
          ["sync", "sync() on a closed handle", () => closed.sync()],
          ["fstat", "stat() on a closed handle", () => closed.stat()],
          ["close", "a second close() of a handle", () => closed.close()],
        );
        for (const [syscall, what, run] of calls) {
          const error = await checkRejects(run, FsError, what);
          checkEqual(error.syscall, syscall, `${what}: error syscall (the port call that failed)`);
        }
      } finally {
        await readOnly.close();
      }
    },
  },
];

/** What each capability's absence must still look like; runs instead of the skipped check. */
export const CAPABILITY_FALLBACKS: Readonly<
  Record<Capability, (fixture: FileSystemFixture) => Promise<void>>
> = {
  async symlinks(f) {
    const link = at(f, "link");
    await checkRejects(
      () => f.fs.symlink("target", link),
      FsError,
      "symlink() on a filesystem without symlinks",
    );
    await checkMissing(f.fs, link, "a refused symlink leaves nothing behind");
  },
  async modes(f) {
    const file = at(f, "file");
    const dir = at(f, "dir");
    await f.fs.writeFile(file, bytes("F"), { mode: 0o600 });
    await f.fs.mkdir(dir, { mode: 0o700 });
    await f.fs.chmod(file, 0o644);
    await f.fs.chmod(dir, 0o755);
    for (const path of [file, dir]) {
      const mode = (await f.fs.stat(path)).mode;
      if (!Number.isInteger(mode) || (mode & ~0o777) !== 0) {
        throw new ConformanceFailure(`stat('${path}').mode ${mode} holds bits outside 0o777`);
      }
    }
  },
};
