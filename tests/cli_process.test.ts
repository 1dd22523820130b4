// The command line as a process: all output reaches a pipe, a reader that goes away ends it
// quietly, and only running the entry file itself runs it (importing it runs nothing).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";
import { SessionStore } from "../src/loop/store.ts";
import { user } from "./_fixtures.ts";
import { MAX_WRITE_WAIT_MS, writeFully } from "../src/cli/output.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const BIN = fileURLToPath(new URL("../src/cli/bin.ts", import.meta.url));
const isDeno = (globalThis as { Deno?: unknown }).Deno !== undefined;
const TSX = isDeno ? "" : pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
const BIG = 3_000_000;

let base = "";
let agentDir = "";
let work = "";
let bigId = "";

/** The runtime's arguments to run the TypeScript file `file` (as the documentation launches it). */
function runtimeArgs(file: string): string[] {
  // Deno finds the project's deno.json (its import map) from a file inside the project only.
  const config = file.startsWith(ROOT) || !file.startsWith("/")
    ? []
    : ["--config", join(ROOT, "deno.json")];
  return isDeno ? ["run", "-A", "--quiet", ...config, file] : ["--import", TSX, file];
}

function env(): NodeJS.ProcessEnv {
  return { ...process.env, LOOP_DATA_DIR: agentDir, NO_COLOR: "1" };
}

before(async () => {
  base = mkdtempSync(join(tmpdir(), "loop-cli-process-"));
  agentDir = join(base, "agent");
  work = join(base, "work");
  mkdirSync(work, { recursive: true });
  const store = new SessionStore({ fs: nodeFs(), agentDir });
  const session = await store.create(work);
  await session.commit([user("x".repeat(BIG))]);
  await session.close();
  bigId = session.id;
});

after(() => {
  rmSync(base, { recursive: true, force: true });
});

test("output larger than a pipe's buffer reaches the reader whole", () => {
  const run = spawnSync(
    process.execPath,
    [...runtimeArgs(BIN), "sessions", "history", bigId, "--json"],
    { cwd: work, env: env(), encoding: "utf8", maxBuffer: 64 * 1024 * 1024 },
  );
  assert.equal(run.status, 0, run.stderr);
  assert.ok(run.stdout.length > BIG, `${run.stdout.length} bytes`);
  const page = JSON.parse(run.stdout);
  assert.equal(page.messages[0].content.length, BIG);
});

test("a reader that goes away (| head) ends the command quietly", () => {
  const command = [process.execPath, ...runtimeArgs(BIN), "sessions", "history", bigId, "--json"]
    .map((arg) => `'${arg.replaceAll("'", `'\\''`)}'`).join(" ");
  const run = spawnSync(
    "bash",
    ["-c", `${command} | head -c 100 > /dev/null; echo "exit=\${PIPESTATUS[0]}"`],
    { cwd: work, env: env(), encoding: "utf8" },
  );
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout.trim(), "exit=0");
  assert.equal(run.stderr, "");
});

test("importing the entry module from another file named *bin.ts runs nothing", () => {
  const dir = join(base, "importer");
  mkdirSync(dir, { recursive: true });
  const importer = join(dir, "my_bin.ts");
  writeFileSync(
    importer,
    `import { runCli } from ${JSON.stringify(BIN)};\nconsole.log(typeof runCli);\n`,
  );
  const run = spawnSync(process.execPath, [...runtimeArgs(importer), "--version"], {
    cwd: dir,
    env: env(),
    encoding: "utf8",
  });
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout, "function\n");
  assert.equal(run.stderr, "");
});

test("the documented launch runs the command line: the entry file by relative path, or a link to it on Node", () => {
  const relative = spawnSync(process.execPath, [...runtimeArgs("src/cli/bin.ts"), "--version"], {
    cwd: ROOT,
    env: env(),
    encoding: "utf8",
  });
  assert.equal(relative.status, 0, relative.stderr);
  assert.match(relative.stdout, /^\d+\.\d+\.\d+\n$/);
  // Deno resolves a linked module's imports from the link's place, so only Node runs a link.
  if (isDeno) return;
  const link = join(base, "loop-sessions.ts");
  symlinkSync(BIN, link);
  const linked = spawnSync(process.execPath, [...runtimeArgs(link), "--version"], {
    cwd: work,
    env: env(),
    encoding: "utf8",
  });
  assert.equal(linked.status, 0, linked.stderr);
  assert.equal(linked.stdout, relative.stdout);
});

test("a writer waiting for a stalled reader backs off exponentially, and starts over after a write", () => {
  const again = Object.assign(new Error("EAGAIN"), { code: "EAGAIN" });
  // 12 EAGAINs, 3 bytes, 10 EAGAINs, the rest.
  const script: (number | Error)[] = [
    ...Array(12).fill(again),
    3,
    ...Array(10).fill(again),
    7,
  ];
  const waits: number[] = [];
  const offsets: number[] = [];
  const ok = writeFully(
    (offset) => {
      offsets.push(offset);
      const step = script.shift();
      if (step instanceof Error) throw step;
      return step as number;
    },
    10,
    (ms) => waits.push(ms),
  );
  assert.equal(ok, true);
  assert.equal(MAX_WRITE_WAIT_MS, 100);
  const backoff = [1, 2, 4, 8, 16, 32, 64, 100, 100, 100];
  assert.deepEqual(waits, [...backoff, 100, 100, ...backoff]);
  assert.equal(offsets.at(-1), 3);
  // A write that takes no bytes waits like EAGAIN instead of spinning.
  const zeros: number[] = [0, 0, 0, 5];
  const zeroWaits: number[] = [];
  assert.equal(writeFully(() => zeros.shift() as number, 5, (ms) => zeroWaits.push(ms)), true);
  assert.deepEqual(zeroWaits, [1, 2, 4]);
  // A reader that is gone ends the write quietly; any other failure is thrown.
  const gone = Object.assign(new Error("EPIPE"), { code: "EPIPE" });
  assert.equal(
    writeFully(
      () => {
        throw gone;
      },
      1,
      () => {},
    ),
    false,
  );
  const full = Object.assign(new Error("ENOSPC"), { code: "ENOSPC" });
  assert.throws(() =>
    writeFully(
      () => {
        throw full;
      },
      1,
      () => {},
    ), /ENOSPC/);
});

test("output that cannot be written (a full disk) is a one-line error and exit code 1", {
  skip: !existsSync("/dev/full"),
}, () => {
  const full = openSync("/dev/full", "w");
  try {
    for (const args of [["--version"], ["sessions", "history", bigId, "--json"]]) {
      const run = spawnSync(process.execPath, [...runtimeArgs(BIN), ...args], {
        cwd: work,
        env: env(),
        encoding: "utf8",
        stdio: ["ignore", full, "pipe"],
      });
      assert.equal(run.status, 1, run.stderr);
      assert.match(run.stderr, /^error: cannot write to stdout: .*\n$/);
      assert.equal(run.stderr.split("\n").length, 2, run.stderr);
    }
  } finally {
    closeSync(full);
  }
});
