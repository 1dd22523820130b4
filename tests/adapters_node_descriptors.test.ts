/**
 * The Node adapter's handles own a raw descriptor (driven by the callback calls of `node:fs`):
 * a closed handle never touches its former descriptor number again (the kernel hands it to the
 * next open), a refused open leaves no descriptor behind, and a handle dropped without a close has
 * its descriptor closed when it is collected. Runs under Node and Deno (Deno's Node layer).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  realpath,
  rm,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";
import { FsIoError, IsADirectory } from "../src/port/errors.ts";

const ROOT = new URL("../", import.meta.url);
const LINUX = process.platform === "linux";

async function withDir(run: (dir: string) => Promise<void>): Promise<void> {
  // Its real path: the one /proc/self/fd links name.
  const dir = await realpath(await mkdtemp(join(tmpdir(), "loop-descriptors-")));
  try {
    await run(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * How many descriptors of this process are open on `path` (Linux: the entries of /proc/self/fd
 * that link to it). Only those: the runtime opens and closes descriptors of its own meanwhile.
 */
async function descriptorsOn(path: string): Promise<number> {
  let count = 0;
  for (const fd of await readdir("/proc/self/fd")) {
    // One closed since the listing has no link to read.
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => undefined);
    if (target === path) count++;
  }
  return count;
}

test("nodeFs(): a closed handle fails with EBADF and never reaches the descriptor reused after it", async () => {
  await withDir(async (dir) => {
    const fs = nodeFs();
    await writeFile(join(dir, "a"), "first file");
    await writeFile(join(dir, "b"), "second file");
    const a = await fs.open(join(dir, "a"), { write: true });
    await a.close();
    // The kernel gives the lowest free number: most likely the one `a` had.
    const b = await fs.open(join(dir, "b"), { write: true });
    try {
      for (
        const call of [
          () => a.read(0, 4),
          () => a.write(new TextEncoder().encode("XXXX")),
          () => a.truncate(0),
          () => a.sync(),
          () => a.stat(),
          () => a.close(),
        ]
      ) {
        await assert.rejects(call(), (error: unknown) => {
          assert.ok(error instanceof FsIoError);
          assert.equal(error.code, "EBADF");
          return true;
        });
      }
      assert.equal(new TextDecoder().decode(await b.read(0, 64)), "second file");
      assert.equal((await b.stat()).size, 11);
    } finally {
      await b.close();
    }
    assert.equal(await readFile(join(dir, "a"), "utf8"), "first file");
    assert.equal(await readFile(join(dir, "b"), "utf8"), "second file");
  });
});

test("nodeFs(): handles read, write at their position, append and truncate through descriptors", async () => {
  await withDir(async (dir) => {
    const fs = nodeFs();
    const path = join(dir, "file");
    const encoder = new TextEncoder();
    const h = await fs.open(path, { create: true, write: true });
    await h.write(encoder.encode("hello world"));
    // A read does not move the write position.
    assert.equal(new TextDecoder().decode(await h.read(6, 5)), "world");
    await h.write(encoder.encode("!"));
    await h.truncate(5);
    await h.write(encoder.encode("?"));
    await h.sync();
    await h.close();
    // A cut below the write position brings the position back to the new end: no hole.
    assert.equal(await readFile(path, "utf8"), "hello?");
    const appender = await fs.open(path, { append: true });
    await appender.write(encoder.encode(" more"));
    assert.equal((await appender.stat()).size, 11);
    await appender.close();
    assert.equal(await readFile(path, "utf8"), "hello? more");
    const reader = await fs.open(path);
    // A read past the end returns what there is.
    assert.equal(new TextDecoder().decode(await reader.read(7, 100)), "more");
    await assert.rejects(reader.write(encoder.encode("x")), (error: unknown) => {
      assert.ok(error instanceof FsIoError);
      assert.equal(error.code, "EBADF");
      return true;
    });
    await reader.close();
  });
});

test(
  "nodeFs(): an open refused after the descriptor was taken leaves no descriptor open",
  { skip: !LINUX && "counts /proc/self/fd (Linux)" },
  async () => {
    await withDir(async (dir) => {
      const fs = nodeFs();
      const sub = join(dir, "sub");
      await mkdir(sub);
      for (let i = 0; i < 20; i++) {
        await assert.rejects(fs.open(sub), IsADirectory);
        if (fs.openNoFollow !== undefined) {
          await assert.rejects(fs.openNoFollow(sub), IsADirectory);
        }
      }
      assert.equal(await descriptorsOn(sub), 0);
    });
  },
);

const CHILD = `
const { nodeFs } = await import(${JSON.stringify(new URL("adapters/node.ts", ROOT).href)});
const { readdirSync, readlinkSync, writeFileSync } = await import("node:fs");
const path = process.argv[2];
writeFileSync(path, "x");
// The descriptors open on the file (the runtime opens and closes descriptors of its own).
const count = () => readdirSync("/proc/self/fd").filter((fd) => {
  try {
    return readlinkSync("/proc/self/fd/" + fd) === path;
  } catch {
    return false;
  }
}).length;
const fs = nodeFs();
const handles = [];
for (let i = 0; i < 10; i++) handles.push(await fs.open(path));
const held = count();
handles.length = 0;
let after = held;
for (let i = 0; i < 50 && after > 0; i++) {
  globalThis.gc();
  await new Promise((resolve) => setTimeout(resolve, 20));
  after = count();
}
// A closed handle, collected, never closes the descriptor number the kernel gave to the next open.
let closed = await fs.open(path);
await closed.close();
const reused = await fs.open(path);
closed = undefined;
for (let i = 0; i < 10; i++) {
  globalThis.gc();
  await new Promise((resolve) => setTimeout(resolve, 10));
}
const text = new TextDecoder().decode(await reused.read(0, 10));
await reused.close();
console.log(JSON.stringify({ opened: held, left: after, text }));
`;

test(
  "nodeFs() on Node: a handle dropped without a close has its descriptor closed when collected, a closed one never",
  { skip: !LINUX && "counts /proc/self/fd (Linux)" },
  async () => {
    await withDir(async (dir) => {
      const script = join(dir, "child.mts");
      await writeFile(script, CHILD);
      // Under Deno, process.execPath is deno: the child is Node, found on the PATH.
      const node = process.versions.deno === undefined ? process.execPath : "node";
      const { status, stdout, stderr, error } = spawnSync(
        node,
        ["--expose-gc", "--import", "tsx", script, join(dir, "file")],
        { cwd: new URL(".", ROOT).pathname, encoding: "utf8" },
      );
      assert.equal(error, undefined, String(error));
      assert.equal(status, 0, stderr);
      assert.deepEqual(JSON.parse(stdout), { opened: 10, left: 0, text: "x" });
    });
  },
);

test(
  "nodeFs().syncDir closes the directory descriptor it opened",
  { skip: !LINUX && "counts /proc/self/fd (Linux)" },
  async () => {
    // Every save syncs its session directory: a descriptor left open each time would run a
    // long-running store out of descriptors (EMFILE).
    await withDir(async (dir) => {
      const before = await descriptorsOn(dir);
      for (let i = 0; i < 20; i++) await nodeFs().syncDir(dir);
      assert.equal(await descriptorsOn(dir), before);
    });
  },
);
