// MemoryFs at its edges: faults whose partial effect cannot land, files larger than memory holds,
// test controls given numbers they cannot use, a crash keeping bytes whose writeback failed, and
// the Linux refusals of names no entry may take (the root, links spelled as directories, empty
// link targets, names and canonical paths past the limits).
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import {
  AlreadyExists,
  FsIoError,
  IsADirectory,
  NotADirectory,
  NotFound,
} from "../src/port/errors.ts";
import type { FileHandle } from "../src/port/fs.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function bytes(text: string): Uint8Array {
  return encoder.encode(text);
}

/** A predicate for `assert.rejects`: `FsIoError` with `code` about `path`. */
function ioError(code: string, path?: string): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof FsIoError, String(error));
    assert.equal(error.code, code, error.message);
    if (path !== undefined) assert.equal(error.path, path);
    return true;
  };
}

/** A predicate for `assert.rejects`: `IsADirectory` about `path`. */
function isADirectory(path: string): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof IsADirectory, String(error));
    assert.equal(error.path, path);
    return true;
  };
}

/** Creates "/f" in `fs` holding `text`, durable with its entry; returns its handle, still open. */
async function syncedFile(fs: MemoryFs, text: string): Promise<FileHandle> {
  const handle = await fs.open("/f", { createNew: true, write: true });
  await handle.write(bytes(text));
  await handle.sync();
  await fs.syncDir("/");
  return handle;
}

/** The state strictly as made durable: committed entries and synced bytes only. */
function durableState(fs: MemoryFs): Record<string, string> {
  return fs.crash({ tailMode: "none", extraJournal: "none" }).snapshotTree();
}

test("a write failing with EIO whose landed prefix would not fit either reports the EIO and lands nothing", async () => {
  const fs = new MemoryFs({ maxFileSize: 10 });
  const handle = await syncedFile(fs, "12345678");
  // Half of the six bytes (the default landed prefix) would grow the file past its room.
  fs.failAt(fs.operationCount + 1, { ops: ["write"], error: "EIO" });
  await assert.rejects(handle.write(bytes("abcdef")), ioError("EIO", "/f"));
  assert.equal((await handle.stat()).size, 8);
  // The handle and the file stay usable: two more bytes fit.
  await handle.write(bytes("90"));
  await handle.sync();
  await handle.close();
  assert.equal(decoder.decode(await fs.readFile("/f")), "1234567890");
});

test("a file grown past what memory can hold fails with ENOSPC and changes nothing", async () => {
  const fs = new MemoryFs();
  const handle = await syncedFile(fs, "abc");
  const before = fs.snapshotTree();
  // A TiB is below the largest file (no EFBIG) but more than the process can allocate.
  await assert.rejects(handle.truncate(2 ** 40), (error: unknown) => {
    assert.ok(error instanceof FsIoError, String(error));
    assert.equal(error.code, "ENOSPC");
    assert.equal(error.syscall, "truncate");
    assert.equal(error.path, "/f");
    assert.match(error.message, /memory/);
    return true;
  });
  assert.deepEqual(fs.snapshotTree(), before);
  assert.deepEqual(durableState(fs), before);
  // Nothing half-done is left: the handle still writes where it was.
  await handle.write(bytes("d"));
  await handle.close();
  assert.equal(decoder.decode(await fs.readFile("/f")), "abcd");
});

test("failAt() and crashAfter() refuse an operation number no operation has", () => {
  const fs = new MemoryFs();
  for (const n of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
    assert.throws(() => fs.failAt(n), RangeError, `failAt(${n})`);
  }
  for (const n of [-1, 0.5, Number.NaN]) {
    assert.throws(() => fs.crashAfter(n), RangeError, `crashAfter(${n})`);
  }
});

test("a refused failAt() or crashAfter() arms nothing: the next operations run", async () => {
  const fs = new MemoryFs();
  assert.throws(() => fs.failAt(0));
  assert.throws(() => fs.crashAfter(-1));
  await fs.writeFile("/f", bytes("x"));
  await fs.mkdir("/d");
  assert.equal(fs.crashTriggered, false);
  assert.deepEqual(fs.snapshotTree(), { d: "dir 755", f: 'file 644 "x"' });
});

test("an open that creates through a dangling link whose target ends in a slash is a directory's name: IsADirectory, nothing made", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  await fs.symlink("/d/missing/", "/d/link");
  const before = fs.snapshotTree();
  for (
    const options of [{ create: true }, { create: true, write: true }, {
      append: true,
      create: true,
    }]
  ) {
    await assert.rejects(fs.open("/d/link", options), isADirectory("/d/link"));
  }
  await assert.rejects(fs.writeFile("/d/link", bytes("x")), IsADirectory);
  assert.deepEqual(fs.snapshotTree(), before);
  assert.deepEqual(fs.openHandles, []);
  // Without the slash the same link leads to a file name: the create follows it.
  await fs.symlink("/d/plain", "/d/other");
  await fs.writeFile("/d/other", bytes("x"));
  assert.equal(decoder.decode(await fs.readFile("/d/plain")), "x");
});

test("renaming the root, or anything onto the root, fails with EBUSY and changes nothing", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/a");
  await fs.writeFile("/a/f", bytes("x"));
  const before = fs.snapshotTree();
  await assert.rejects(fs.rename("/", "/b"), ioError("EBUSY", "/"));
  await assert.rejects(fs.rename("/a", "/"), ioError("EBUSY", "/"));
  await assert.rejects(fs.rename("/a", "//"), ioError("EBUSY", "//"));
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a recursive mkdir with a name over 255 bytes fails with ENAMETOOLONG naming the whole path", async () => {
  const fs = new MemoryFs();
  const path = `/a/${"n".repeat(256)}/b`;
  await assert.rejects(fs.mkdir(path, { recursive: true }), ioError("ENAMETOOLONG", path));
  assert.equal((await fs.stat("/a")).kind, "directory");
  assert.deepEqual(await fs.readDir("/a"), []);
  // 255 bytes is the longest name (a two-byte character counts twice).
  await fs.mkdir(`/a/${"é".repeat(127)}n/b`, { recursive: true });
  await assert.rejects(
    fs.mkdir(`/a/${"é".repeat(128)}/b`, { recursive: true }),
    ioError("ENAMETOOLONG"),
  );
});

test("realPath() of a short path whose canonical path is 4096 bytes or more fails with ENAMETOOLONG", async () => {
  const fs = new MemoryFs();
  // Twenty names of 200 bytes: a directory 4020 bytes deep, reached through a short link.
  const deep = "/" + Array.from({ length: 20 }, (_, i) => `${i % 10}`.repeat(200)).join("/");
  await fs.mkdir(deep, { recursive: true });
  await fs.symlink(deep, "/s");
  await fs.mkdir(`/s/${"x".repeat(74)}`);
  // 4020 + 1 + 74 = 4095 bytes: the longest canonical path there is.
  assert.equal(await fs.realPath(`/s/${"x".repeat(74)}`), `${deep}/${"x".repeat(74)}`);
  await fs.mkdir(`/s/${"y".repeat(75)}`);
  const short = `/s/${"y".repeat(75)}`;
  await assert.rejects(fs.realPath(short), ioError("ENAMETOOLONG", short));
  // The entry is there all the same, and reachable through the link.
  assert.equal((await fs.stat(short)).kind, "directory");
});

test("snapshotTree() of a missing root or of a file is refused, naming it", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/f", bytes("x"));
  assert.throws(() => fs.snapshotTree("/missing"), (error: unknown) => {
    return error instanceof NotFound && error.path === "/missing";
  });
  assert.throws(() => fs.snapshotTree("/f"), (error: unknown) => {
    return error instanceof NotADirectory && error.path === "/f";
  });
  // A counted operation none of them is.
  assert.equal(fs.operationCount, 1);
});

test("a crash forcing the live rewrite keeps bytes whose writeback failed, reported as live", async () => {
  const fs = new MemoryFs();
  const handle = await syncedFile(fs, "base");
  await handle.write(bytes("-kept"));
  fs.failAt(fs.operationCount + 1, { ops: ["sync"], error: "EIO" });
  await assert.rejects(handle.sync(), ioError("EIO"));
  await handle.close();
  // The page cache still serves the bytes writeback failed on, as for a process crash.
  const recovered = fs.crash({ seed: 1, rewriteMode: "live", extraJournal: "all" });
  assert.equal(decoder.decode(await recovered.readFile("/f")), "base-kept");
  assert.equal(recovered.crashReport?.files["/f"], "live");
});

test("a recursive mkdir through a link to a name over 255 bytes fails with ENAMETOOLONG naming the whole path", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  await fs.symlink(`/${"n".repeat(256)}`, "/d/link");
  const before = fs.snapshotTree();
  // As the kernel's walk of the whole path reports it (the Node and Deno adapters say the same).
  for (const path of ["/d/link/x", "/d/link/x/y"]) {
    await assert.rejects(fs.mkdir(path, { recursive: true }), ioError("ENAMETOOLONG", path));
    await assert.rejects(fs.mkdir(path), ioError("ENAMETOOLONG", path));
  }
  // At the final name the link is in the way, as any entry there is.
  for (const path of ["/d/link", "/d/link/"]) {
    for (const recursive of [true, false]) {
      await assert.rejects(fs.mkdir(path, { recursive }), (error: unknown) => {
        return error instanceof AlreadyExists && error.path === path;
      });
    }
  }
  assert.deepEqual(fs.snapshotTree(), before);
});

test("an open that creates through a link to a file spelled with a trailing slash is IsADirectory, the file untouched", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/file", bytes("kept"));
  await fs.symlink("/file/", "/link");
  const before = fs.snapshotTree();
  // As Linux's open with O_CREAT says (the Node and Deno adapters report EISDIR).
  const creates = [
    () => fs.open("/link", { create: true, write: true }),
    () => fs.open("/link", { create: true, truncate: true }),
    () => fs.writeFile("/link", bytes("lost")),
  ];
  for (const create of creates) {
    await assert.rejects(create(), isADirectory("/link"));
  }
  // Opened without create, the slash asks for a directory where a file is (ENOTDIR).
  await assert.rejects(fs.open("/link"), NotADirectory);
  assert.deepEqual(fs.snapshotTree(), before);
  assert.deepEqual(fs.openHandles, []);
});

test("a symlink with an empty target is refused with NotFound before its name is looked up", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/file", bytes("x"));
  await fs.mkdir("/dir");
  const before = fs.snapshotTree();
  // As Linux's symlink takes the target in first (ENOENT), whatever is at the name or above it.
  for (const path of ["/new", "/file", "/dir", "/file/x", "/missing/x"]) {
    await assert.rejects(fs.symlink("", path), (error: unknown) => {
      assert.ok(error instanceof NotFound, `${path}: ${error}`);
      assert.equal(error.path, path);
      return true;
    });
  }
  assert.deepEqual(fs.snapshotTree(), before);
});
