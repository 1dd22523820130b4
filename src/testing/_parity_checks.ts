/**
 * The conformance checks of the rules the adapters were once found to disagree on by a
 * differential run (memory, Node, Deno). The suite (`conformance.ts`) runs them after `CHECKS`.
 *
 * @module
 */
import {
  AlreadyExists,
  FsIoError,
  IsADirectory,
  NotADirectory,
  NotEmpty,
  NotFound,
} from "../port/errors.ts";
import { join } from "../port/path.ts";
import {
  check,
  checkBytes,
  checkEqual,
  checkRejects,
  checkSame,
  ConformanceFailure,
  type FsErrorClass,
} from "./_assert.ts";
import type { Check } from "./_checks.ts";
import type { FileSystemFixture } from "./conformance.ts";

const encoder = new TextEncoder();

/**
 * The longest path, in UTF-8 bytes, the fixture's filesystem takes: its
 * `capabilities.longestPath` (an integer of at least 3,300, else a `ConformanceFailure`) up to
 * 4,095, or 4,095.
 */
function longestPathOf(f: FileSystemFixture): number {
  const declared: unknown = f.capabilities?.longestPath;
  if (declared === undefined) return 4095;
  if (!Number.isSafeInteger(declared) || (declared as number) < 3300) {
    throw new ConformanceFailure(
      `capabilities.longestPath must be an integer from 3300 to 4095, got ${String(declared)}`,
    );
  }
  return Math.min(4095, declared as number);
}

/**
 * The rules the adapters were once found to disagree on by a differential run (memory, Node,
 * Deno): each check holds every adapter to the one answer the port documents.
 */
export const PARITY_CHECKS: readonly Check[] = [
  {
    name:
      "mkdir() with recursive of a file, a link to a file or a link loop, even with a trailing slash, fails with AlreadyExists",
    needs: ["symlinks"],
    async run(f) {
      const file = join(f.root, "file");
      await f.fs.writeFile(file, encoder.encode("F"));
      await f.fs.symlink("file", join(f.root, "file-link"));
      await f.fs.symlink("loop", join(f.root, "loop"));
      for (const name of ["file", "file-link", "loop"]) {
        const path = join(f.root, name);
        for (const spelled of [path, `${path}/`]) {
          const what = `mkdir('${name}${spelled === path ? "" : "/"}', recursive)`;
          const error = await checkRejects(
            () => f.fs.mkdir(spelled, { recursive: true }),
            AlreadyExists,
            what,
          );
          checkEqual(error.path, spelled, `${what}: error path`);
        }
      }
      // Beneath a link loop, nothing is in the way: the loop itself is the error.
      const below = join(f.root, "loop", "sub");
      const loop = await checkRejects(
        () => f.fs.mkdir(below, { recursive: true }),
        FsIoError,
        "mkdir('loop/sub', recursive)",
      );
      checkEqual(loop.code, "ELOOP", "mkdir('loop/sub', recursive): error code");
      checkEqual(loop.path, below, "mkdir('loop/sub', recursive): error path");
      checkBytes(await f.fs.readFile(file), "F", "the file left intact");
      checkEqual((await f.fs.lstat(join(f.root, "loop"))).kind, "symlink", "the loop left alone");
    },
  },
  {
    name:
      "mkdir(), symlink() and a create with createNew of an existing entry fail with AlreadyExists, even spelled with a trailing slash",
    async run(f) {
      const file = join(f.root, "file");
      const dir = join(f.root, "dir");
      await f.fs.writeFile(file, encoder.encode("F"));
      await f.fs.mkdir(join(dir, "sub"), { recursive: true });
      const calls: [string, () => Promise<unknown>][] = [
        ["mkdir('file/')", () => f.fs.mkdir(`${file}/`)],
        ["mkdir('dir/')", () => f.fs.mkdir(`${dir}/`)],
      ];
      // A path ending in `.` or `..` names an existing directory: a trailing slash changes nothing.
      for (const dotted of [`${dir}/./`, `${dir}/.`, `${dir}/sub/..`, `${dir}/sub/../`]) {
        calls.push([
          `writeFile('${dotted.slice(f.root.length + 1)}', createNew)`,
          () => f.fs.writeFile(dotted, encoder.encode("x"), { createNew: true }),
        ]);
        calls.push([
          `open('${dotted.slice(f.root.length + 1)}', createNew)`,
          async () => await (await f.fs.open(dotted, { createNew: true })).close(),
        ]);
      }
      if (f.capabilities?.symlinks !== false) {
        await f.fs.symlink("file", join(f.root, "file-link"));
        await f.fs.symlink("loop", join(f.root, "loop"));
        calls.push(
          ["symlink('target', 'file/')", () => f.fs.symlink("target", `${file}/`)],
          ["symlink('target', 'dir/')", () => f.fs.symlink("target", `${dir}/`)],
          ["mkdir('file-link/')", () => f.fs.mkdir(`${join(f.root, "file-link")}/`)],
          ["mkdir('loop/')", () => f.fs.mkdir(`${join(f.root, "loop")}/`)],
        );
      }
      for (const [what, run] of calls) await checkRejects(run, AlreadyExists, what);
      // Removing a file spelled as a directory is still refused as not one.
      await checkRejects(() => f.fs.remove(`${file}/`), NotADirectory, "remove('file/')");
      checkBytes(await f.fs.readFile(file), "F", "the file left intact");
      checkEqual(
        JSON.stringify(await f.fs.readDir(dir)),
        JSON.stringify([{ name: "sub", kind: "directory" }]),
        "the directory left as it was",
      );
    },
  },
  {
    name:
      "syncDir() of a directory whose path is 4095 bytes (or the fixture's longestPath) succeeds, and of anything but a directory fails",
    async run(f) {
      // 4095 bytes is the longest path (Linux's PATH_MAX counts the terminating NUL); a wrapper
      // that maps paths below a directory of its own declares how long a path it takes.
      const longest = longestPathOf(f);
      let long = f.root;
      for (;;) {
        const room = longest - encoder.encode(long).length - 1;
        if (room < 1) break;
        long += "/" + (room >= 202 ? "n".repeat(200) : "d".repeat(room));
      }
      await f.fs.mkdir(long, { recursive: true });
      checkEqual(encoder.encode(long).length, longest, "the length of the directory's path");
      await f.fs.syncDir(long);
      const file = join(f.root, "file");
      await f.fs.writeFile(file, encoder.encode("F"));
      const refusals: [string, string, FsErrorClass, string?][] = [
        ["file", file, NotADirectory],
        ["file/", `${file}/`, NotADirectory],
      ];
      if (f.capabilities?.symlinks !== false) {
        await f.fs.symlink("file", join(f.root, "file-link"));
        await f.fs.symlink("nowhere", join(f.root, "dangling"));
        await f.fs.symlink("loop", join(f.root, "loop"));
        refusals.push(
          ["file-link", join(f.root, "file-link"), NotADirectory],
          ["dangling", join(f.root, "dangling"), NotFound],
          ["loop", join(f.root, "loop"), FsIoError, "ELOOP"],
        );
      }
      for (const [name, path, errorClass, code] of refusals) {
        const error = await checkRejects(
          () => f.fs.syncDir(path),
          errorClass,
          `syncDir('${name}')`,
        );
        checkEqual(error.path, path, `syncDir('${name}'): error path`);
        if (code !== undefined) checkEqual(error.code, code, `syncDir('${name}'): error code`);
      }
    },
  },
  {
    name: "remove() with recursive deletes a tree deeper than PATH_MAX, following no symlink in it",
    async run(f) {
      // Paths into the tree reach 6,000 bytes, past the 4,096 any one call may name: the tree is
      // made in two halves of 3,000 bytes each, one moved to the bottom of the other. No call
      // names more than about 3,250 bytes, within the shortest `longestPath` a fixture declares.
      longestPathOf(f); // refuses a longestPath that is no length, as every long-path check does
      const deep = async (top: string): Promise<string> => {
        await f.fs.mkdir(top);
        let path = top;
        while (encoder.encode(path).length < 3000) path = join(path, "n".repeat(200));
        await f.fs.mkdir(path, { recursive: true });
        return path;
      };
      const outside = join(f.root, "outside");
      await f.fs.mkdir(outside);
      await f.fs.writeFile(join(outside, "precious"), encoder.encode("P"));
      const upper = await deep(join(f.root, "tree"));
      const lower = await deep(join(f.root, "lower"));
      await f.fs.writeFile(join(lower, "leaf"), encoder.encode("L"));
      await f.fs.writeFile(join(upper, "middle"), encoder.encode("M"));
      if (f.capabilities?.symlinks !== false) {
        await f.fs.symlink(outside, join(lower, "to-outside"));
        await f.fs.symlink(outside, join(f.root, "lower", "near-top"));
      }
      await f.fs.rename(join(f.root, "lower"), join(upper, "lower"));
      await f.fs.remove(join(f.root, "tree"), { recursive: true });
      await checkRejects(() => f.fs.lstat(join(f.root, "tree")), NotFound, "lstat('tree')");
      checkSame(
        await f.fs.readDir(f.root),
        [{ name: "outside", kind: "directory" }],
        "the root after the remove",
      );
      checkBytes(await f.fs.readFile(join(outside, "precious")), "P", "the outside target");
    },
  },
  {
    name:
      "utime() keeps a time before 1970 and whole milliseconds exactly, and refuses a time that is not finite or past what a Date holds with EINVAL",
    async run(f) {
      const file = join(f.root, "file");
      await f.fs.writeFile(file, encoder.encode("F"));
      for (const mtime of [1_700_000_000_123, -86_400_000, -1_700_000_000_123, 0, 1]) {
        await f.fs.utime(file, mtime);
        checkEqual((await f.fs.stat(file)).mtimeMs, mtime, `mtimeMs after utime(${mtime})`);
      }
      // A fraction of a millisecond may be cut, never more.
      await f.fs.utime(file, 1_700_000_000_123.5);
      const fraction = (await f.fs.stat(file)).mtimeMs;
      check(
        fraction >= 1_700_000_000_123 && fraction <= 1_700_000_000_123.5,
        `mtimeMs after utime(1700000000123.5): ${fraction}`,
      );
      await f.fs.utime(file, 1_600_000_000_000);
      const refused = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 1e16, -1e16];
      for (const mtime of refused) {
        const what = `utime(file, ${mtime})`;
        const error = await checkRejects(() => f.fs.utime(file, mtime), FsIoError, what);
        checkEqual(error.code, "EINVAL", `${what}: error code`);
        checkEqual(error.path, file, `${what}: error path`);
      }
      checkEqual((await f.fs.stat(file)).mtimeMs, 1_600_000_000_000, "mtimeMs after refusals");
    },
  },
  {
    name:
      "rename() reports a missing source first, then a non-directory spelled with a trailing slash, then what is wrong with the destination, naming the path at fault",
    async run(f) {
      const file = join(f.root, "file");
      const dir = join(f.root, "dir");
      const missing = join(f.root, "missing");
      await f.fs.writeFile(file, encoder.encode("F"));
      await f.fs.mkdir(join(dir, "sub"), { recursive: true });
      await f.fs.writeFile(join(dir, "in"), encoder.encode("I"));
      let long = f.root;
      while (encoder.encode(long).length < 4096) long += "/" + "n".repeat(200);
      const cases: [string, string, FsErrorClass, string, string?][] = [
        // The source first: missing (whatever the destination), or beneath a file.
        [missing, join(f.root, "nowhere", "x"), NotFound, missing],
        [missing, `${file}/`, NotFound, missing],
        [join(file, "x"), join(f.root, "moved"), NotADirectory, join(file, "x")],
        [`${f.root}/a\0b`, join(f.root, "moved"), FsIoError, `${f.root}/a\0b`, "EINVAL"],
        // Then anything but a directory spelled with a trailing slash, on either side.
        [`${file}/`, join(missing, "x"), NotADirectory, `${file}/`],
        [file, `${join(f.root, "new")}/`, NotADirectory, `${join(f.root, "new")}/`],
        // Then the destination.
        [file, join(missing, "x"), NotFound, join(missing, "x")],
        [file, join(file, "x"), NotADirectory, join(file, "x")],
        [file, `${f.root}/a\0b`, FsIoError, `${f.root}/a\0b`, "EINVAL"],
        [file, long, FsIoError, long, "ENAMETOOLONG"],
        [dir, join(dir, "sub", "x"), FsIoError, join(dir, "sub", "x"), "EINVAL"],
        [join(dir, "in"), dir, NotEmpty, dir],
        [join(dir, "sub"), dir, NotEmpty, dir],
        [dir, file, NotADirectory, file],
        [file, dir, IsADirectory, dir],
      ];
      if (f.capabilities?.symlinks !== false) {
        const link = join(f.root, "link");
        const loop = join(f.root, "loop");
        await f.fs.symlink(dir, link);
        await f.fs.symlink("loop", loop);
        cases.push(
          [missing, `${link}/`, NotFound, missing],
          [join(loop, "x"), join(f.root, "moved"), FsIoError, join(loop, "x"), "ELOOP"],
          [`${link}/`, join(missing, "x"), NotADirectory, `${link}/`],
          [file, join(loop, "x"), FsIoError, join(loop, "x"), "ELOOP"],
          [join(dir, "sub"), link, NotADirectory, link],
        );
      }
      const name = (path: string) => path.length > 300 ? "<4096 bytes>" : path;
      for (const [from, to, errorClass, path, code] of cases) {
        const what = `rename('${name(from)}', '${name(to)}')`;
        const error = await checkRejects(() => f.fs.rename(from, to), errorClass, what);
        check(
          error.path === path,
          `${what}: error path '${name(error.path)}', not '${name(path)}'`,
        );
        if (code !== undefined) checkEqual(error.code, code, `${what}: error code`);
      }
      checkBytes(await f.fs.readFile(file), "F", "the file after the refused renames");
      checkSame(
        await f.fs.readDir(dir),
        [{ name: "in", kind: "file" }, { name: "sub", kind: "directory" }],
        "the directory after the refused renames",
      );
      await checkRejects(() => f.fs.lstat(missing), NotFound, "nothing made at 'missing'");
      await checkRejects(() => f.fs.lstat(join(f.root, "new")), NotFound, "nothing made at 'new'");
    },
  },
  {
    name:
      "mkdir() with recursive through a name longer than 255 bytes fails with ENAMETOOLONG naming the whole path",
    async run(f) {
      const long = "n".repeat(256);
      const paths: [string, string][] = [
        ["a/<256 bytes>/x", join(f.root, "a", long, "x")],
        ["<256 bytes>/../x", `${f.root}/${long}/../x`],
      ];
      for (const [spelled, path] of paths) {
        const what = `mkdir('${spelled}', recursive)`;
        const error = await checkRejects(
          () => f.fs.mkdir(path, { recursive: true }),
          FsIoError,
          what,
        );
        checkEqual(error.code, "ENAMETOOLONG", `${what}: error code`);
        check(error.path === path, `${what}: the error names another path, '${error.path}'`);
      }
    },
  },
];
