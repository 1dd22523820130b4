/**
 * denoFs.syncDir never blocks on a FIFO: a read-only open of a FIFO waits for a writer, so the
 * open itself must refuse anything but a directory, also when the directory is swapped for a FIFO
 * right after a stat saw a directory, and also for a path of 4095 bytes (too long for a trailing
 * slash).
 */
import assert from "node:assert/strict";
import { closeSync, constants, openSync } from "node:fs";
import { denoFs } from "../adapters/deno.ts";
import { NotADirectory } from "../src/port/errors.ts";

const encoder = new TextEncoder();

/** A directory path under `root` of exactly `bytes` bytes. */
function pathOf(root: string, bytes: number): string {
  let path = root;
  for (;;) {
    const room = bytes - encoder.encode(path).length - 1;
    if (room < 1) break;
    path += "/" + (room >= 202 ? "n".repeat(200) : "d".repeat(room));
  }
  assert.equal(encoder.encode(path).length, bytes);
  return path;
}

function mkfifo(path: string): void {
  const { code, stderr } = new Deno.Command("mkfifo", { args: [path] }).outputSync();
  assert.equal(code, 0, new TextDecoder().decode(stderr));
}

/**
 * Runs syncDir(`path`) and says how it settled within two seconds. A pending open of the FIFO
 * at `path` is then released by a writer (opened non-blocking, so it never waits itself).
 */
async function settle(path: string): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const pending = Symbol("pending");
  const outcome = await Promise.race([
    denoFs().syncDir(path).then(() => "resolved", (error: unknown) => error),
    new Promise<symbol>((resolve) => timer = setTimeout(() => resolve(pending), 2000)),
  ]);
  clearTimeout(timer);
  if (outcome === pending) {
    try {
      closeSync(openSync(path, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch { /* no reader left */ }
    // Let the released open settle, so the test leaks no pending op.
    await new Promise((resolve) => setTimeout(resolve, 200));
    return "pending";
  }
  return outcome;
}

/**
 * Makes the next stat or lstat of `dir` move it to `moved` and put a FIFO in its place right after
 * the call returns (as another process could). The function returned restores both and says
 * whether the swap was made.
 */
function swapAfterStat(dir: string, moved: string): () => boolean {
  const deno = Deno as unknown as Record<"stat" | "lstat", typeof Deno.stat>;
  const saved = { stat: deno.stat, lstat: deno.lstat };
  let swapped = false;
  for (const name of ["stat", "lstat"] as const) {
    const real = saved[name];
    deno[name] = async (path: string | URL) => {
      const info = await real(path);
      if (!swapped && String(path).replace(/\/+$/, "") === dir) {
        swapped = true;
        await Deno.rename(dir, moved);
        mkfifo(dir);
      }
      return info;
    };
  }
  return () => {
    deno.stat = saved.stat;
    deno.lstat = saved.lstat;
    return swapped;
  };
}

for (const bytes of [100, 4095]) {
  Deno.test({
    name: `denoFs.syncDir refuses a FIFO without waiting on it (a ${bytes}-byte path)`,
    ignore: Deno.build.os === "windows",
    async fn() {
      const root = await Deno.makeTempDir({ prefix: "loop-deno-syncdir-" });
      try {
        const parent = pathOf(root, bytes - 5);
        await Deno.mkdir(parent, { recursive: true });
        const fifo = `${parent}/fifo`;
        const dir = `${parent}/coll`;
        assert.equal(encoder.encode(dir).length, bytes);
        mkfifo(fifo);
        await Deno.mkdir(dir);

        // A FIFO from the start.
        const first = await settle(fifo);
        assert.ok(first instanceof NotADirectory, `a FIFO: ${String(first)}`);

        // A directory swapped for a FIFO right after a stat saw the directory.
        const moved = `${parent}/m`;
        const restore = swapAfterStat(dir, moved);
        let second: unknown;
        let swapped = false;
        try {
          second = await settle(dir);
        } finally {
          swapped = restore();
        }
        if (swapped) {
          assert.ok(second instanceof NotADirectory, `a swapped-in FIFO: ${String(second)}`);
          await Deno.remove(dir);
          await Deno.rename(moved, dir);
        } else {
          // No stat came before the open: the directory itself was synced.
          assert.equal(second, "resolved");
        }

        // The directory itself syncs.
        await denoFs().syncDir(dir);
      } finally {
        await Deno.remove(root, { recursive: true });
      }
    },
  });
}

Deno.test("denoFs.syncDir reports a directory that Deno's permissions deny as PermissionDenied, also for a 4095-byte path", async () => {
  const root = await Deno.makeTempDir({ prefix: "loop-deno-syncdir-denied-" });
  try {
    const short = `${root}/short`;
    const long = pathOf(root, 4095);
    await Deno.mkdir(short);
    await Deno.mkdir(long, { recursive: true });
    const script = `${root}/probe.ts`;
    await Deno.writeTextFile(
      script,
      `import { denoFs } from ${
        JSON.stringify(new URL("../adapters/deno.ts", import.meta.url).href)
      };
for (const path of Deno.args) {
  try {
    await denoFs().syncDir(path);
    console.log("synced");
  } catch (error) {
    console.log((error as Error).constructor.name, (error as { code?: string }).code);
  }
}
`,
    );
    const repo = new URL("../", import.meta.url).pathname;
    const output = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--quiet",
        `--config=${repo}deno.json`,
        "--allow-read",
        `--deny-read=${short},${long}`,
        script,
        short,
        long,
      ],
      cwd: repo,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
    assert.deepEqual(new TextDecoder().decode(output.stdout).trim().split("\n"), [
      "PermissionDenied EACCES",
      "PermissionDenied EACCES",
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
