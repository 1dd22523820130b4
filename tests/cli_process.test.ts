// The command line as a process: all output reaches a pipe, a reader that goes away ends it
// quietly, and only running the entry file itself runs it (importing it runs nothing).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { Buffer } from "node:buffer";
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readSync,
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

test("output to a non-blocking pipe whose reader stalls reaches it whole, on Node and on Deno", {
  skip: process.platform === "win32",
}, async () => {
  // A FIFO opened non-blocking on both ends: the command's stdout is a non-blocking pipe (the
  // flag belongs to the open file, which the command inherits), and nothing reads it for a while,
  // so its writes meet a full pipe (EAGAIN) and must wait instead of failing or losing output.
  const fifo = join(base, "stalled.fifo");
  const made = spawnSync("mkfifo", [fifo]);
  assert.equal(made.status, 0, String(made.stderr));
  const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
  const writer = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
  const child = spawn(process.execPath, [
    ...runtimeArgs(BIN),
    "sessions",
    "history",
    bigId,
    "--json",
  ], { cwd: work, env: env(), stdio: ["ignore", writer, "pipe"] });
  closeSync(writer);
  let stderr = "";
  child.stderr?.on("data", (chunk) => (stderr += String(chunk)));
  const exited = new Promise<number | null>((resolve) => child.on("close", resolve));
  try {
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const chunks: Buffer[] = [];
    const buffer = Buffer.alloc(1024 * 1024);
    for (;;) {
      let read: number;
      try {
        read = readSync(reader, buffer, 0, buffer.length, null);
      } catch (error) {
        if ((error as { code?: unknown }).code !== "EAGAIN") throw error;
        await new Promise((resolve) => setTimeout(resolve, 5));
        continue;
      }
      if (read === 0) break; // every writer closed: the command is done
      chunks.push(Buffer.from(buffer.subarray(0, read)));
    }
    assert.equal(await exited, 0, stderr);
    const text = Buffer.concat(chunks).toString("utf8");
    assert.ok(text.length > BIG, `${text.length} bytes`);
    assert.equal(JSON.parse(text).messages[0].content.length, BIG);
  } finally {
    closeSync(reader);
    child.kill();
  }
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

test("the documented launch runs the command line: the entry file by relative path", () => {
  const relative = spawnSync(process.execPath, [...runtimeArgs("src/cli/bin.ts"), "--version"], {
    cwd: ROOT,
    env: env(),
    encoding: "utf8",
  });
  assert.equal(relative.status, 0, relative.stderr);
  assert.match(relative.stdout, /^\d+\.\d+\.\d+\n$/);
});

test("the documented launch runs the command line: a link to the entry file on Node", {
  skip: isDeno && "Deno resolves a linked module's imports from the link's place",
}, () => {
  const relative = spawnSync(process.execPath, [...runtimeArgs("src/cli/bin.ts"), "--version"], {
    cwd: ROOT,
    env: env(),
    encoding: "utf8",
  });
  assert.equal(relative.status, 0, relative.stderr);
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

test("a current directory that is not valid UTF-8 fails only what needs it, never taken for a look-alike", () => {
  const sh = (script: string) =>
    spawnSync("sh", ["-c", script], {
      env: { ...env(), RUNTIME: process.execPath, ARGS: runtimeArgs(BIN).join(" ") },
      encoding: "utf8",
    });
  // `cwd-\xff`, and beside it its look-alike `cwd-\u{fffd}` (valid UTF-8: the name a lossy
  // decoding gives), which the listing must not be taken for.
  const undecodable = `${base}/cwd-\\377`;
  const lookalike = `${base}/cwd-\\357\\277\\275`;
  const inside = `mkdir -p "$(printf '${undecodable}')" "$(printf '${lookalike}')" && ` +
    `cd "$(printf '${undecodable}')" && `;
  const version = sh(`${inside}exec "$RUNTIME" $ARGS --version`);
  assert.equal(version.status, 0, version.stderr);
  const listed = sh(`${inside}exec "$RUNTIME" $ARGS sessions list --all-workspaces --json`);
  assert.equal(listed.status, 0, listed.stderr);
  assert.equal(JSON.parse(listed.stdout).sessions.length, 1);
  const here = sh(`${inside}exec "$RUNTIME" $ARGS sessions list`);
  assert.equal(here.status, 2, here.stderr);
  assert.match(here.stderr, /^usage error: the current directory cannot be read \(.*UTF-8\)$/m);
});

test("an argument that is not valid UTF-8 is refused in one line, never taken for a look-alike", () => {
  const sh = (script: string) =>
    spawnSync("sh", ["-c", script], {
      env: { ...env(), RUNTIME: process.execPath, ARGS: runtimeArgs(BIN).join(" ") },
      encoding: "utf8",
    });
  // `store-\xff`, and beside it a look-alike `store-\u{fffd}` holding a store with a session.
  const lookalike = join(base, "store-\u{fffd}");
  mkdirSync(join(lookalike, "sessions", "x"), { recursive: true });
  const before = readdirSync(join(lookalike, "sessions"));
  for (
    const args of [
      `--data-dir "$(printf '${base}/store-\\377')" sessions list --all-workspaces`,
      `sessions delete --include-unarchived "$(printf '${lookalike}/sessions/x/\\377')"`,
      `--data-dir "${lookalike}" sessions cleanup --dir "$(printf '${base}/store-\\377')"`,
    ]
  ) {
    const run = sh(`cd "${work}" && exec "$RUNTIME" $ARGS ${args}`);
    assert.equal(run.status, 2, run.stderr);
    assert.match(run.stderr, /^usage error: argument \d+ \(".*\u{fffd}.*"\) is not valid UTF-8$/mu);
    assert.equal(run.stdout, "");
  }
  // Through a launcher that decodes its arguments and passes them on (as `deno task` and `npx`
  // do), the bytes are found in the launcher's command line.
  const launcher = join(base, "launcher.cjs");
  writeFileSync(
    launcher,
    `const { spawnSync } = require("node:child_process");
process.exitCode = spawnSync(process.argv[2], process.argv.slice(3), { stdio: "inherit" }).status;
`,
  );
  const launched = sh(
    `cd "${work}" && exec node "${launcher}" "$RUNTIME" $ARGS sessions delete --include-unarchived "$(printf '${lookalike}/sessions/x/\\377')"`,
  );
  assert.equal(launched.status, 2, launched.stderr);
  assert.match(launched.stderr, /^usage error: argument \d+ .* is not valid UTF-8$/mu);
  assert.deepEqual(readdirSync(join(lookalike, "sessions")), before);
  // A real U+FFFD (valid UTF-8) is an argument like any other.
  const valid = sh(
    `cd "${work}" && exec "$RUNTIME" $ARGS --data-dir "${lookalike}" sessions list --all-workspaces`,
  );
  assert.equal(valid.status, 0, valid.stderr);
});

test("a LOOP_DATA_DIR or HOME that is not valid UTF-8 is refused in one line, never taken for a look-alike", () => {
  const sh = (script: string) =>
    spawnSync("sh", ["-c", script], {
      env: { ...env(), RUNTIME: process.execPath, ARGS: runtimeArgs(BIN).join(" ") },
      encoding: "utf8",
    });
  // `data-\xff`, and beside it a look-alike `data-\u{fffd}` holding a store.
  mkdirSync(join(base, "data-\u{fffd}", "sessions"), { recursive: true });
  const data = sh(
    `cd "${work}" && LOOP_DATA_DIR="$(printf '${base}/data-\\377')" exec "$RUNTIME" $ARGS sessions list --all-workspaces`,
  );
  assert.equal(data.status, 2, data.stderr);
  assert.match(
    data.stderr,
    /^usage error: the environment variable LOOP_DATA_DIR cannot be read/m,
  );
  // The same for a HOME the default data directory (~/.loop) is under.
  mkdirSync(join(base, "home-\u{fffd}", ".loop", "sessions"), { recursive: true });
  const home = sh(
    `cd "${work}" && unset LOOP_DATA_DIR && HOME="$(printf '${base}/home-\\377')" exec "$RUNTIME" $ARGS sessions list --all-workspaces`,
  );
  assert.equal(home.status, 2, home.stderr);
  assert.match(home.stderr, /^usage error: the environment variable HOME cannot be read/m);
});
