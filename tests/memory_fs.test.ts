import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import {
  AlreadyExists,
  FsIoError,
  IsADirectory,
  NotADirectory,
  NotEmpty,
  NotFound,
} from "../src/port/errors.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function bytes(text: string): Uint8Array {
  return encoder.encode(text);
}

async function readText(fs: MemoryFs, path: string): Promise<string> {
  return decoder.decode(await fs.readFile(path));
}

/** A clock that advances by one second on every reading. */
function tickingClock(start = 1_000_000): () => number {
  let now = start;
  return () => (now += 1_000);
}

test("a new MemoryFs holds only the root directory", async () => {
  const fs = new MemoryFs();
  assert.equal((await fs.stat("/")).kind, "directory");
  assert.deepEqual(await fs.readDir("/"), []);
  assert.equal(await fs.realPath("/"), "/");
});

test("homeDir() returns the configured home, /home/user by default, without creating it", async () => {
  assert.equal(new MemoryFs().homeDir(), "/home/user");
  const fs = new MemoryFs({ home: "/users/ada" });
  assert.equal(fs.homeDir(), "/users/ada");
  await assert.rejects(fs.stat("/users/ada"), NotFound);
});

test("create modes are masked by the umask and chmod sets the bits exactly", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/default", bytes("x"));
  await fs.mkdir("/dir");
  await fs.writeFile("/wide", bytes("x"), { mode: 0o777 });
  assert.equal((await fs.stat("/default")).mode, 0o644);
  assert.equal((await fs.stat("/dir")).mode, 0o755);
  assert.equal((await fs.stat("/wide")).mode, 0o755);
  await fs.chmod("/wide", 0o777);
  assert.equal((await fs.stat("/wide")).mode, 0o777);

  const strict = new MemoryFs({ umask: 0o077 });
  const handle = await strict.open("/f", { createNew: true, write: true, mode: 0o666 });
  await handle.close();
  await strict.mkdir("/a/b", { recursive: true });
  assert.equal((await strict.stat("/f")).mode, 0o600);
  assert.equal((await strict.stat("/a")).mode, 0o700);
  assert.equal((await strict.stat("/a/b")).mode, 0o700);
});

test("modification times come from the clock on content and entry changes", async () => {
  const fs = new MemoryFs({ now: tickingClock() });
  await fs.mkdir("/d");
  const created = (await fs.stat("/d")).mtimeMs;
  await fs.writeFile("/d/f", bytes("1"));
  const fileTime = (await fs.stat("/d/f")).mtimeMs;
  const dirAfterCreate = (await fs.stat("/d")).mtimeMs;
  assert.ok(dirAfterCreate > created, "creating an entry updates the directory");

  const handle = await fs.open("/d/f", { append: true });
  await handle.write(bytes("2"));
  const afterWrite = (await handle.stat()).mtimeMs;
  assert.ok(afterWrite > fileTime, "a write updates the file");
  await handle.sync();
  await handle.close();
  assert.equal((await fs.stat("/d/f")).mtimeMs, afterWrite, "sync and close change nothing");
  assert.equal((await fs.stat("/d")).mtimeMs, dirAfterCreate, "writing leaves the directory");

  await fs.rename("/d/f", "/d/g");
  assert.ok((await fs.stat("/d")).mtimeMs > dirAfterCreate, "a rename updates the directory");
  await fs.utime("/d/g", 42);
  assert.equal((await fs.stat("/d/g")).mtimeMs, 42);
});

test("paths that are relative or hold a NUL byte are rejected with EINVAL", async () => {
  const fs = new MemoryFs();
  for (const path of ["relative/file", "", "/a\0b"]) {
    const isInvalid = (e: unknown): boolean => {
      return e instanceof FsIoError && e.code === "EINVAL" && e.path === path;
    };
    await assert.rejects(fs.stat(path), isInvalid);
    await assert.rejects(fs.writeFile(path, bytes("x")), isInvalid);
    await assert.rejects(fs.mkdir(path, { recursive: true }), isInvalid);
  }
  assert.deepEqual(await fs.readDir("/"), []);
});

test("a path of 4095 UTF-8 bytes is looked up, one of 4096 is too long, and realPath() takes either", async () => {
  const fs = new MemoryFs();
  // Names of 200 bytes below /d, filled up to exactly `total` bytes.
  const pathOf = (total: number): string => {
    let path = "";
    while (path.length < total) {
      const room = total - path.length - 1;
      path += "/" + "d".repeat(room >= 202 ? 200 : room);
    }
    return path;
  };
  const longest = pathOf(4095);
  const dir = longest.slice(0, longest.lastIndexOf("/"));
  await assert.rejects(fs.stat(longest), NotFound);
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(longest, bytes("x"));
  assert.equal(await fs.realPath(longest), longest);
  const tooLong = `${longest}/`;
  await assert.rejects(fs.stat(tooLong), (e: unknown) => {
    return e instanceof FsIoError && e.code === "ENAMETOOLONG" && e.path === tooLong;
  });
  // realpath(3) walks a long path itself: only the canonical path must be shorter than PATH_MAX.
  assert.equal(await fs.realPath(dir + "/.".repeat(200)), dir);
  await fs.symlink("/" + "t".repeat(4094), "/longest-target");
  assert.equal((await fs.readLink("/longest-target")).length, 4095);
});

test("errors carry POSIX codes, the call and the path", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/file", bytes("F"));
  await fs.mkdir("/dir");
  await fs.writeFile("/dir/inner", bytes("I"));

  const missing = await fs.readFile("/nope").catch((e: unknown) => e);
  assert.ok(missing instanceof NotFound);
  assert.equal(missing.code, "ENOENT");
  assert.equal(missing.syscall, "readFile");
  assert.equal(missing.path, "/nope");

  await assert.rejects(fs.stat("/file/x"), NotADirectory);
  await assert.rejects(fs.writeFile("/file/x", bytes("x")), NotADirectory);
  await assert.rejects(fs.mkdir("/file/x", { recursive: true }), NotADirectory);
  await assert.rejects(fs.open("/dir"), IsADirectory);
  await assert.rejects(fs.readFile("/dir"), IsADirectory);
  await assert.rejects(fs.writeFile("/dir", bytes("x")), IsADirectory);
  await assert.rejects(fs.rename("/file", "/dir"), IsADirectory);
  await assert.rejects(fs.remove("/dir"), NotEmpty);
  await assert.rejects(fs.mkdir("/dir"), AlreadyExists);
  await assert.rejects(fs.mkdir("/"), AlreadyExists);
  await assert.rejects(fs.writeFile("/file", bytes("x"), { createNew: true }), AlreadyExists);
  await assert.rejects(fs.readDir("/file"), NotADirectory);
  await assert.rejects(fs.syncDir("/file"), NotADirectory);
  await assert.rejects(fs.readLink("/file"), (e: unknown) => {
    return e instanceof FsIoError && e.code === "EINVAL";
  });
  await assert.rejects(fs.remove("/"), (e: unknown) => e instanceof FsIoError);
  await assert.rejects(fs.rename("/dir", "/dir/inner/deeper"), NotADirectory);
  await assert.rejects(fs.stat("/file/"), NotADirectory);
});

test("rename() of a directory into its own subtree fails with EINVAL and changes nothing", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/a/b", { recursive: true });
  const before = fs.snapshotTree();
  await assert.rejects(fs.rename("/a", "/a/b/c"), (e: unknown) => {
    return e instanceof FsIoError && e.code === "EINVAL" && e.path === "/a/b/c";
  });
  assert.deepEqual(fs.snapshotTree(), before);
});

test("rename() replaces a file atomically and renaming a path onto itself changes nothing", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/old", bytes("old"));
  await fs.writeFile("/new", bytes("new"));
  await fs.rename("/new", "/old");
  assert.deepEqual(fs.snapshotTree(), { old: 'file 644 "new"' });
  await fs.rename("/old", "/old");
  assert.deepEqual(fs.snapshotTree(), { old: 'file 644 "new"' });
});

test("create, mkdir and symlink refuse a dangling symlink in the way", async () => {
  const fs = new MemoryFs();
  await fs.symlink("/target", "/link");
  await assert.rejects(fs.open("/link", { createNew: true, write: true }), AlreadyExists);
  await assert.rejects(fs.writeFile("/link", bytes("x"), { createNew: true }), AlreadyExists);
  await assert.rejects(fs.mkdir("/link"), AlreadyExists);
  await assert.rejects(fs.mkdir("/link", { recursive: true }), AlreadyExists);
  await assert.rejects(fs.symlink("/other", "/link"), AlreadyExists);
  await assert.rejects(fs.lstat("/target"), NotFound);
});

test("open() with create follows a dangling symlink and creates its target", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  await fs.symlink("made", "/d/link");
  await fs.writeFile("/d/link", bytes("through"));
  assert.equal(await readText(fs, "/d/made"), "through");
  assert.equal((await fs.lstat("/d/link")).kind, "symlink");
});

test("relative symlink targets resolve against the link's directory, and .. is physical", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/a/b", { recursive: true });
  await fs.mkdir("/x/y", { recursive: true });
  await fs.writeFile("/x/y/file", bytes("Y"));
  await fs.writeFile("/x/sibling", bytes("S"));
  await fs.symlink("../../x/y", "/a/b/to-y");
  assert.equal(await readText(fs, "/a/b/to-y/file"), "Y");
  assert.equal(await fs.realPath("/a/b/to-y/file"), "/x/y/file");
  // `..` after a symlinked directory goes to the parent of the target, not of the link.
  assert.equal(await readText(fs, "/a/b/to-y/../sibling"), "S");
  assert.equal(await fs.realPath("/a/b/./to-y/.."), "/x");
});

test("lstat, remove and rename follow intermediate symlinks but not the final one", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/real");
  await fs.writeFile("/real/file", bytes("F"));
  await fs.symlink("/real", "/via");
  await fs.symlink("file", "/real/file-link");
  assert.equal((await fs.lstat("/via/file-link")).kind, "symlink");
  assert.equal((await fs.lstat("/via")).kind, "symlink");
  assert.equal((await fs.stat("/via")).kind, "directory");
  await fs.rename("/via/file-link", "/via/moved-link");
  assert.equal(await fs.readLink("/real/moved-link"), "file");
  await fs.remove("/via/moved-link");
  assert.deepEqual(await fs.readDir("/via"), [{ name: "file", kind: "file" }]);
});

test("symlink loops and chains longer than 40 hops fail with ELOOP", async () => {
  const fs = new MemoryFs();
  await fs.symlink("/loop-b", "/loop-a");
  await fs.symlink("/loop-a", "/loop-b");
  const isLoop = (e: unknown): boolean => e instanceof FsIoError && e.code === "ELOOP";
  await assert.rejects(fs.stat("/loop-a"), isLoop);
  await assert.rejects(fs.readFile("/loop-a/x"), isLoop);
  await assert.rejects(fs.writeFile("/loop-a", bytes("x")), isLoop);
  assert.equal((await fs.lstat("/loop-a")).kind, "symlink");

  await fs.writeFile("/end", bytes("E"));
  await fs.symlink("/end", "/hop0");
  for (let i = 1; i <= 41; i++) await fs.symlink(`/hop${i - 1}`, `/hop${i}`);
  assert.equal(await readText(fs, "/hop39"), "E", "40 hops resolve");
  await assert.rejects(fs.readFile("/hop40"), isLoop);
});

test("readDir() lists entries sorted by code unit, with their own kinds", async () => {
  const fs = new MemoryFs();
  for (const name of ["b", "B", "a", "_", "é", "10", "9"]) {
    await fs.writeFile(`/${name}`, bytes(""));
  }
  await fs.mkdir("/sub");
  await fs.symlink("/sub", "/link");
  const names = (await fs.readDir("/")).map((e) => e.name);
  assert.deepEqual(names, ["10", "9", "B", "_", "a", "b", "link", "sub", "é"]);
  assert.deepEqual((await fs.readDir("/")).find((e) => e.name === "link"), {
    name: "link",
    kind: "symlink",
  });
});

test("a handle reads at positions, writes sequentially and zero-fills a gap past the end", async () => {
  const fs = new MemoryFs();
  const writer = await fs.open("/f", { create: true, write: true });
  await writer.write(bytes("hello world"));
  const other = await fs.open("/f", { write: true });
  await other.truncate(5);
  assert.deepEqual(await writer.read(0, 100), bytes("hello"));
  // The first handle's position is still 11: POSIX leaves a hole of zeros.
  await writer.write(bytes("!"));
  assert.deepEqual(
    await fs.readFile("/f"),
    new Uint8Array([...bytes("hello"), 0, 0, 0, 0, 0, 0, 33]),
  );
  await other.write(bytes("HELLO"));
  assert.equal(decoder.decode((await fs.readFile("/f")).subarray(0, 5)), "HELLO");
  await writer.close();
  await other.close();
});

test("truncate() pulls back the write position of its own handle only", async () => {
  const fs = new MemoryFs();
  const handle = await fs.open("/f", { create: true, write: true });
  await handle.write(bytes("abcdef"));
  await handle.truncate(2);
  await handle.write(bytes("X"));
  await handle.truncate(6);
  await handle.write(bytes("Y"));
  await handle.close();
  assert.deepEqual(await fs.readFile("/f"), new Uint8Array([97, 98, 88, 89, 0, 0]));
});

test("a handle without write access refuses write and truncate with EBADF", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/f", bytes("keep"));
  const handle = await fs.open("/f");
  const isBadFd = (e: unknown): boolean => e instanceof FsIoError && e.code === "EBADF";
  await assert.rejects(handle.write(bytes("x")), isBadFd);
  await assert.rejects(handle.truncate(0), isBadFd);
  await handle.sync();
  await handle.close();
  assert.equal(await readText(fs, "/f"), "keep");
});

test("every call on a closed handle fails with EBADF", async () => {
  const fs = new MemoryFs();
  const handle = await fs.open("/f", { createNew: true, write: true });
  await handle.close();
  const calls: Array<() => Promise<unknown>> = [
    () => handle.read(0, 1),
    () => handle.write(bytes("x")),
    () => handle.truncate(0),
    () => handle.sync(),
    () => handle.stat(),
    () => handle.close(),
  ];
  for (const call of calls) {
    await assert.rejects(call(), (e: unknown) => {
      return e instanceof FsIoError && e.code === "EBADF" && e.path === "/f";
    });
  }
});

test("a handle keeps working on the inode after its entry is removed or replaced", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/f", bytes("first"));
  const orphan = await fs.open("/f", { append: true });
  await fs.remove("/f");
  await assert.rejects(fs.stat("/f"), NotFound);
  await orphan.write(bytes("+more"));
  assert.deepEqual(await orphan.read(0, 100), bytes("first+more"));
  assert.equal((await orphan.stat()).size, 10);
  await orphan.close();
  assert.deepEqual(await fs.readDir("/"), []);

  await fs.writeFile("/g", bytes("old"));
  const reader = await fs.open("/g");
  await fs.writeFile("/g.tmp", bytes("new"));
  await fs.rename("/g.tmp", "/g");
  assert.deepEqual(await reader.read(0, 10), bytes("old"));
  assert.equal(await readText(fs, "/g"), "new");
  await reader.close();
});

test("readFile() and writeFile() copy bytes: callers never share buffers with the filesystem", async () => {
  const fs = new MemoryFs();
  const data = bytes("abc");
  await fs.writeFile("/f", data);
  data[0] = 0x7a;
  const read = await fs.readFile("/f");
  read[1] = 0x7a;
  assert.equal(await readText(fs, "/f"), "abc");
});

test("remove() with recursive removes a tree without following links out of it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/keep");
  await fs.writeFile("/keep/precious", bytes("P"));
  await fs.mkdir("/tree/sub", { recursive: true });
  await fs.writeFile("/tree/sub/f", bytes("f"));
  await fs.symlink("/keep", "/tree/link");
  await fs.remove("/tree", { recursive: true });
  assert.deepEqual(fs.snapshotTree(), { keep: "dir 755", "keep/precious": 'file 644 "P"' });
});

test("snapshotTree() describes directories, text, binary files and links by relative path", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s/d", { recursive: true, mode: 0o700 });
  await fs.writeFile("/s/text", bytes('say "hi"\n'), { mode: 0o600 });
  await fs.writeFile("/s/d/bin", new Uint8Array([0xff, 0x00, 0x10]));
  await fs.symlink("../text", "/s/d/link");
  assert.deepEqual(fs.snapshotTree("/s"), {
    d: "dir 700",
    "d/bin": "file 644 hex:ff0010",
    "d/link": "link -> ../text",
    text: 'file 600 "say \\"hi\\"\\n"',
  });
  assert.deepEqual(Object.keys(fs.snapshotTree()), ["s", "s/d", "s/d/bin", "s/d/link", "s/text"]);
  assert.throws(() => fs.snapshotTree("/s/text"), NotADirectory);
});

test("every port call and handle call counts as one operation, logged in order", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  const handle = await fs.open("/d/f", { createNew: true, write: true });
  await handle.write(bytes("x"));
  await handle.read(0, 1);
  await handle.truncate(1);
  await handle.sync();
  await handle.stat();
  await handle.close();
  await fs.rename("/d/f", "/d/g");
  await fs.stat("/d/missing").catch(() => undefined);
  fs.homeDir();
  fs.snapshotTree();
  assert.equal(fs.operationCount, 10);
  assert.deepEqual(fs.operationLog.map((r) => `${r.number} ${r.op} ${r.path}${r.to ?? ""}`), [
    "1 mkdir /d",
    "2 open /d/f",
    "3 write /d/f",
    "4 read /d/f",
    "5 truncate /d/f",
    "6 sync /d/f",
    "7 fstat /d/f",
    "8 close /d/f",
    "9 rename /d/f/d/g",
    "10 stat /d/missing",
  ]);
  fs.resetCounter();
  assert.equal(fs.operationCount, 0);
  assert.deepEqual(fs.operationLog, []);
  await fs.lstat("/d");
  assert.equal(fs.operationCount, 1);
});

test("a 100 MiB file written in 1 MiB appends with a sync after each is stored whole", async () => {
  const fs = new MemoryFs();
  const chunk = new Uint8Array(1024 * 1024);
  const handle = await fs.open("/big", { createNew: true, append: true });
  for (let i = 0; i < 100; i++) {
    chunk.fill(i);
    await handle.write(chunk);
    await handle.sync();
  }
  await handle.close();
  assert.equal((await fs.stat("/big")).size, 100 * 1024 * 1024);
  const reader = await fs.open("/big");
  assert.deepEqual(await reader.read(57 * 1024 * 1024 - 1, 2), new Uint8Array([56, 57]));
  await reader.close();
  await fs.syncDir("/");
  const recovered = fs.crash({ seed: 3, tailMode: "garbage" });
  assert.equal((await recovered.stat("/big")).size, 100 * 1024 * 1024);
  assert.equal(recovered.crashReport?.files["/big"], "synced");
});

test("truncate() and write() past the largest file fail with EFBIG and change nothing", async () => {
  const fs = new MemoryFs();
  const handle = await fs.open("/f", { createNew: true });
  await handle.write(bytes("abc"));
  for (const length of [2 ** 44 + 1, 2 ** 50, Number.MAX_SAFE_INTEGER]) {
    await assert.rejects(
      handle.truncate(length),
      (error: unknown) => error instanceof FsIoError && error.code === "EFBIG",
    );
  }
  await handle.close();
  const sparse = await fs.open("/f", { append: true });
  assert.equal((await sparse.stat()).size, 3);
  await sparse.close();
  assert.equal(await readText(fs, "/f"), "abc");
});

test("a file that would grow past the room there is fails with ENOSPC and changes nothing", async () => {
  // The room of a nearly full disk (as a size the process cannot allocate, without needing one).
  const fs = new MemoryFs({ maxFileSize: 8 });
  const handle = await fs.open("/f", { createNew: true });
  await handle.write(bytes("abc"));
  await handle.sync();
  const noSpace = (error: unknown) => error instanceof FsIoError && error.code === "ENOSPC";
  await assert.rejects(handle.truncate(9), noSpace);
  await assert.rejects(handle.write(bytes("defghi")), noSpace);
  assert.equal((await handle.stat()).size, 3);
  await handle.write(bytes("defgh"));
  await handle.close();
  assert.equal(await readText(fs, "/f"), "abcdefgh");
  await assert.rejects(fs.writeFile("/f", bytes("123456789")), noSpace);
  assert.equal(await readText(fs, "/f"), "abcdefgh");
  await fs.writeFile("/f", bytes("12345678"));
  assert.equal(await readText(fs, "/f"), "12345678");
});

test("a handle whose close failed is released all the same, as Linux's close(2) releases it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  const handle = await fs.open("/d/f", { write: true, create: true });
  fs.failAt(1, { ops: ["close"] });
  await assert.rejects(handle.close(), (error: unknown) => error instanceof FsIoError);
  fs.clearFaults();
  // Every later call fails with EBADF, a second close included.
  for (const call of [() => handle.write(new Uint8Array([1])), () => handle.close()]) {
    await assert.rejects(call(), (error: unknown) => {
      assert.ok(error instanceof FsIoError, String(error));
      assert.equal(error.code, "EBADF");
      return true;
    });
  }
});

test("openHandles lists each handle from its open to its close, a failed close included", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/a", bytes("a"));
  await fs.writeFile("/b", bytes("b"));
  const first = await fs.open("/a");
  const second = await fs.open("/a", { append: true });
  const third = (await fs.openNoFollow("/b")).handle;
  const fourth = (await fs.openAppendNoFollow("/b")).handle;
  assert.deepEqual(fs.openHandles, ["/a", "/a", "/b", "/b"]);
  // Refused opens and whole-file calls hold nothing.
  await assert.rejects(fs.open("/missing"), NotFound);
  await fs.readFile("/a");
  assert.equal(fs.openHandles.length, 4);
  assert.equal(fs.clone().openHandles.length, 0);
  await second.close();
  assert.deepEqual(fs.openHandles, ["/a", "/b", "/b"]);
  await assert.rejects(second.close(), FsIoError); // EBADF: released once
  // A close an injected fault fails still frees the handle, as close(2) does.
  fs.failAt(fs.operationCount + 1);
  await assert.rejects(third.close(), FsIoError);
  assert.deepEqual(fs.openHandles, ["/a", "/b"]);
  // One the crash point refuses does not: the process is gone before it ran.
  fs.crashAfter(fs.operationCount);
  await assert.rejects(first.close());
  assert.deepEqual(fs.openHandles, ["/a", "/b"]);
  fs.clearFaults();
  await first.close();
  await fourth.close();
  assert.deepEqual(fs.openHandles, []);
});
