// The Node adapter (on Node, and on Deno's Node layer) and MemoryFs where the disk holds what a
// store does not expect: a sparse file larger than any buffer, a file shorter than its size says,
// reads far past the end, a filesystem refusing directory fsync, a link to a file on a path.
import { test } from "node:test";
import assert from "node:assert/strict";
import { closeSync, constants, existsSync, ftruncateSync, openSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { nodeFs, nodeProcessProbe } from "../adapters/node.ts";
import { readInChunks } from "../adapters/_node_read.ts";
import { lazyProbe } from "../adapters/_probe.ts";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError, NotADirectory, NotFound } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";

const linux = process.platform === "linux";

async function withDir(run: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "loop-adapter-edges-"));
  try {
    await run(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** 8 TiB: a sparse file of this size costs nothing on disk, and no buffer holds it. */
const HUGE = 2 ** 43;

/**
 * Makes a sparse file of `HUGE` bytes at `path`. Fails the test where this process could
 * allocate a buffer that large (a whole read would then go ahead) or the filesystem refuses such
 * a size (every Linux filesystem these tests run on holds one).
 */
function sparseHugeFile(path: string): void {
  assert.throws(() => new Uint8Array(HUGE), RangeError, "no buffer holds 8 TiB");
  const fd = openSync(path, "w");
  try {
    ftruncateSync(fd, HUGE);
  } finally {
    closeSync(fd);
  }
}

/** A predicate for `assert.rejects`: `FsIoError` EFBIG of `syscall` on `path`. */
function tooLarge(syscall: string, path: string): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof FsIoError, String(error));
    assert.equal(error.code, "EFBIG", error.message);
    assert.equal(error.syscall, syscall);
    assert.equal(error.path, path);
    return true;
  };
}

test("nodeFs refuses a whole read of a sparse file larger than any buffer with EFBIG, naming it", async () => {
  await withDir(async (dir) => {
    const path = join(dir, "index.json");
    sparseHugeFile(path);
    const fs = nodeFs();
    await assert.rejects(fs.readFile(path), tooLarge("readFile", path));
    const noFollow = fs.readFileNoFollow?.bind(fs);
    if (noFollow !== undefined) {
      await assert.rejects(noFollow(path), tooLarge("readFileNoFollow", path));
    }
    // Nothing was written: the file is as it was.
    assert.equal((await fs.stat(path)).size, HUGE);
  });
});

/** A sysfs file whose size (a page) is larger than what it holds, with what it holds. */
function shortSysfsFile(): { path: string; text: string } {
  const path = "/sys/devices/system/cpu/online";
  const text = readFileSync(path, "utf8");
  assert.ok(text.length > 0 && text.length < 4096, `${path} holds less than its size`);
  return { path, text };
}

test("a file holding fewer bytes than its size says reads as what it holds, never padded", {
  skip: !linux,
}, async () => {
  const sysfs = shortSysfsFile();
  // The stand-in for a file cut short between the size check and the read.
  const fs = nodeFs();
  assert.ok((await fs.stat(sysfs.path)).size > sysfs.text.length);
  const noFollow = fs.readFileNoFollow?.bind(fs);
  if (noFollow !== undefined) {
    assert.equal(new TextDecoder().decode(await noFollow(sysfs.path)), sysfs.text);
  }
  assert.equal(new TextDecoder().decode(await fs.readFile(sysfs.path)), sysfs.text);
  for (const chunk of [1, 3, 4096]) {
    const bytes = await readInChunks(sysfs.path, constants.O_RDONLY, chunk);
    assert.equal(new TextDecoder().decode(bytes), sysfs.text, `chunks of ${chunk}`);
  }
});

test(
  "a regular file whose size reads as 0 but that holds bytes reads whole, as readFile reads it",
  {
    skip: !linux || !existsSync("/proc/sys/kernel/osrelease"),
  },
  async () => {
    // procfs reports size 0 for what it generates on read, as some network filesystems do for a
    // file whose size they do not know.
    const path = "/proc/sys/kernel/osrelease";
    const text = readFileSync(path, "utf8");
    assert.ok(text.length > 0);
    const fs = nodeFs();
    assert.equal((await fs.stat(path)).size, 0);
    const noFollow = fs.readFileNoFollow?.bind(fs);
    if (noFollow !== undefined) assert.equal(new TextDecoder().decode(await noFollow(path)), text);
    assert.equal(new TextDecoder().decode(await fs.readFile(path)), text);
  },
);

/** Reads at offsets no file reaches return no bytes, and move nothing a later read sees. */
async function checkReadsFarPastTheEnd(fs: FileSystem, path: string): Promise<void> {
  await fs.writeFile(path, new TextEncoder().encode("hello"));
  const handle = await fs.open(path);
  try {
    for (const offset of [5, 2 ** 40, 2 ** 50, Number.MAX_SAFE_INTEGER - 10]) {
      assert.deepEqual(await handle.read(offset, 10), new Uint8Array(0), `at ${offset}`);
    }
    assert.equal(new TextDecoder().decode(await handle.read(0, 10)), "hello");
  } finally {
    await handle.close();
  }
}

test("a read far past the end of a file, as a lying header could ask, returns no bytes", async () => {
  await withDir((dir) => checkReadsFarPastTheEnd(nodeFs(), join(dir, "messages.jsonl")));
  await checkReadsFarPastTheEnd(new MemoryFs(), "/messages.jsonl");
});

test("nodeFs syncDir() of a directory whose filesystem refuses a directory fsync is a no-op", {
  skip: !linux || !existsSync("/proc/self"),
}, async () => {
  // procfs refuses fsync (EINVAL), as some network and FUSE filesystems do.
  const fs = nodeFs();
  await fs.syncDir("/proc");
  await fs.syncDir("/proc/self");
  // A refusal is not taken for any error: a missing directory still fails.
  await assert.rejects(fs.syncDir("/proc/no-such-entry"), (error: unknown) => {
    return error instanceof NotFound && error.path === "/proc/no-such-entry";
  });
});

/** A recursive mkdir beneath a link to a file fails with NotADirectory and makes nothing. */
async function checkMkdirBeneathLinkToFile(fs: FileSystem, root: string): Promise<void> {
  await fs.writeFile(`${root}/file`, new TextEncoder().encode("x"));
  await fs.symlink(`${root}/file`, `${root}/link`);
  for (const path of [`${root}/link/dir`, `${root}/link/dir/deeper`]) {
    await assert.rejects(fs.mkdir(path, { recursive: true }), (error: unknown) => {
      assert.ok(error instanceof NotADirectory, String(error));
      assert.equal(error.path, path);
      return true;
    });
  }
  assert.deepEqual((await fs.readDir(root)).map((entry) => entry.name), ["file", "link"]);
  assert.equal(new TextDecoder().decode(await fs.readFile(`${root}/file`)), "x");
}

test("a recursive mkdir beneath a link to a file fails with NotADirectory, as beneath the file", async () => {
  await withDir((dir) => checkMkdirBeneathLinkToFile(nodeFs(), dir));
  const memory = new MemoryFs();
  await memory.mkdir("/root");
  await checkMkdirBeneathLinkToFile(memory, "/root");
});

test("the Node process probe knows no start for a pid no process has", { skip: !linux }, () => {
  const probe = nodeProcessProbe();
  assert.ok(probe.processStart !== undefined);
  assert.match(probe.processStart(process.pid) ?? "", /^\d+$/);
  // Past any pid_max: no process has it, and its /proc entry cannot be read.
  assert.equal(probe.processStart(0x7ffffffe), undefined);
  for (const pid of [0, -1, 1.5]) assert.equal(probe.processStart(pid), undefined);
});

test("a process probe that cannot be made is none, and is not asked for again", () => {
  let made = 0;
  const probe = lazyProbe(() => {
    made++;
    throw new Error("the host name cannot be read");
  });
  // A store then locks within its process only, rather than failing to open.
  assert.equal(probe(), undefined);
  assert.equal(probe(), undefined);
  assert.equal(made, 1);
  const working = lazyProbe(() => nodeProcessProbe());
  assert.equal(working()?.pid, process.pid);
  assert.equal(working(), working());
});
