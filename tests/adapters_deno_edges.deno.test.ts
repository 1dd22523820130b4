// The Deno adapter where the disk holds what a store does not expect: a sparse file larger than
// any buffer, reads far past the largest file, a filesystem refusing directory fsync, a link to
// a file on a path, and an open whose truncate or check fails after the file was opened.
import { test } from "node:test";
import assert from "node:assert/strict";
import { denoFs } from "../adapters/deno.ts";
import { FsIoError, NotADirectory, NotFound, PermissionDenied } from "../src/port/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const linux = Deno.build.os === "linux";

async function withDir(run: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "loop-deno-edges-" });
  try {
    await run(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** 8 TiB: a sparse file of this size costs nothing on disk, and no buffer holds it. */
const HUGE = 2 ** 43;

/**
 * Makes a sparse file of `HUGE` bytes at `path`. Fails the test where this process could
 * allocate a buffer that large (a whole read would then go ahead) or the filesystem refuses such
 * a size (every Linux filesystem these tests run on holds one).
 */
async function sparseHugeFile(path: string): Promise<void> {
  assert.throws(() => new Uint8Array(HUGE), RangeError, "no buffer holds 8 TiB");
  using file = await Deno.open(path, { write: true, create: true });
  await file.truncate(HUGE);
}

test("denoFs refuses a whole read of a sparse file larger than any buffer with EFBIG, naming it", async () => {
  await withDir(async (dir) => {
    const path = `${dir}/index.json`;
    await sparseHugeFile(path);
    const fs = denoFs();
    const reads: [string, ((path: string) => Promise<Uint8Array>) | undefined][] = [
      ["readFile", (p) => fs.readFile(p)],
      ["readFileNoFollow", fs.readFileNoFollow],
    ];
    for (const [syscall, read] of reads) {
      if (read === undefined) continue;
      await assert.rejects(read(path), (error: unknown) => {
        assert.ok(error instanceof FsIoError, String(error));
        assert.equal(error.code, "EFBIG", error.message);
        assert.equal(error.syscall, syscall);
        assert.equal(error.path, path);
        return true;
      });
    }
    assert.equal((await fs.stat(path)).size, HUGE);
  });
});

test("a session whose index.json is a sparse file of terabytes is listed from a scan on denoFs", async () => {
  await withDir(async (dir) => {
    const fs = denoFs();
    const cwd = `${dir}/project`;
    await fs.mkdir(cwd);
    const store = new SessionStore({ fs, agentDir: `${dir}/agent` });
    const session = await store.create(cwd);
    await session.commit(conversation(3, "e"));
    await session.close();
    const index = `${session.getSessionPath()}/index.json`;
    await fs.remove(index);
    await sparseHugeFile(index);
    // Too large to be read whole, as on Node: not an index, so the listing scans the messages.
    const listed = await store.listDetailed(cwd, undefined, { fast: true });
    assert.deepEqual(listed.failures, []);
    assert.deepEqual(listed.sessions.map((s) => s.userMessageCount), [3]);
    assert.equal((await fs.stat(index)).size, HUGE);
  });
});

test("denoFs reads far past the largest file, as a lying header could ask, as no bytes", async () => {
  await withDir(async (dir) => {
    const fs = denoFs();
    const path = `${dir}/messages.jsonl`;
    await fs.writeFile(path, new TextEncoder().encode("hello"));
    const handle = await fs.open(path);
    try {
      // Past the largest file the filesystem holds, the seek itself is refused (EINVAL).
      for (const offset of [5, 2 ** 40, 2 ** 50, Number.MAX_SAFE_INTEGER - 10]) {
        assert.deepEqual(await handle.read(offset, 10), new Uint8Array(0), `at ${offset}`);
      }
      assert.equal(new TextDecoder().decode(await handle.read(1, 10)), "ello");
    } finally {
      await handle.close();
    }
  });
});

test("denoFs syncDir() of a directory whose filesystem refuses a directory fsync is a no-op", {
  skip: !linux,
}, async () => {
  // procfs refuses fsync (EINVAL), as some network and FUSE filesystems do.
  const fs = denoFs();
  await fs.syncDir("/proc");
  await fs.syncDir("/proc/self");
  await assert.rejects(fs.syncDir("/proc/no-such-entry"), (error: unknown) => {
    return error instanceof NotFound && error.path === "/proc/no-such-entry";
  });
});

test("denoFs mkdir beneath a link to a file fails with NotADirectory, as beneath the file", async () => {
  await withDir(async (dir) => {
    const fs = denoFs();
    await fs.writeFile(`${dir}/file`, new TextEncoder().encode("x"));
    await fs.symlink(`${dir}/file`, `${dir}/link`);
    for (const path of [`${dir}/link/dir`, `${dir}/link/dir/deeper`]) {
      await assert.rejects(fs.mkdir(path, { recursive: true }), (error: unknown) => {
        return error instanceof NotADirectory && error.path === path;
      });
    }
    assert.deepEqual((await fs.readDir(dir)).map((entry) => entry.name), ["file", "link"]);
  });
});

/**
 * Runs `run` while every file `Deno.open` opens refuses its method `refused` with `error`;
 * returns how many of those files were closed.
 */
async function withFilesRefusing(
  refused: "truncate" | "stat",
  error: () => Error,
  run: () => Promise<void>,
): Promise<number> {
  const deno = Deno as unknown as { open: typeof Deno.open };
  const original = deno.open;
  let closed = 0;
  deno.open = async (...args: Parameters<typeof Deno.open>) => {
    const file = await original(...args);
    return new Proxy(file, {
      get(target, key) {
        if (key === refused) return () => Promise.reject(error());
        if (key === "close") {
          return () => {
            closed++;
            target.close();
          };
        }
        const value = Reflect.get(target, key, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  };
  try {
    await run();
  } finally {
    deno.open = original;
  }
  return closed;
}

test("denoFs open with append and truncate whose truncate is refused closes the file and reports it", async () => {
  await withDir(async (dir) => {
    const fs = denoFs();
    const path = `${dir}/events.jsonl`;
    await fs.writeFile(path, new TextEncoder().encode("kept"));
    // A file the platform lets be opened for appending but not cut (Linux's append-only
    // attribute: EPERM), simulated by refusing the truncate of the file Deno opens.
    const refusal = () => new Deno.errors.PermissionDenied("Operation not permitted");
    const closed = await withFilesRefusing("truncate", refusal, async () => {
      await assert.rejects(fs.open(path, { append: true, truncate: true }), (error: unknown) => {
        return error instanceof PermissionDenied && error.path === path;
      });
    });
    assert.equal(closed, 1, "the file opened is closed");
    assert.equal(await Deno.readTextFile(path), "kept");
  });
});

test("denoFs open for reading whose check of what it opened fails closes the file and reports it", async () => {
  await withDir(async (dir) => {
    const fs = denoFs();
    const path = `${dir}/meta.json`;
    await fs.writeFile(path, new TextEncoder().encode("{}"));
    const failure = () =>
      Object.assign(new Error("Input/output error (os error 5)"), { code: "EIO" });
    const closed = await withFilesRefusing("stat", failure, async () => {
      await assert.rejects(fs.open(path), (error: unknown) => {
        return error instanceof FsIoError && error.code === "EIO" && error.path === path;
      });
    });
    assert.equal(closed, 1, "the file opened is closed");
  });
});
