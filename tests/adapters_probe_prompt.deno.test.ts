// The process probes of the Node and Deno adapters never make Deno prompt: before a call that
// needs a permission (reading /proc/self/ns/pid or /proc/<pid>/stat, signalling a pid) they query
// it, and skip the call unless it is granted. Deno prompts only where stdin is a terminal and
// --no-prompt is not given, so the end-to-end checks run a child Deno in a pseudo-terminal (with
// util-linux `script`, where it exists) and watch for "Deno requests".
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { denoFs } from "../adapters/deno.ts";
import { nodeProcessProbe } from "../adapters/node.ts";
import { denoProcessProbe } from "../adapters/deno.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const repo = fileURLToPath(new URL("../", import.meta.url));
const linux = Deno.build.os === "linux";

type Descriptor = Deno.PermissionDescriptor;

/**
 * Runs `body` while `Deno.permissions.querySync` answers "prompt" for every descriptor `deny`
 * matches (as under narrow grants), and returns the descriptors it was asked about.
 */
function withQueries(deny: (descriptor: Descriptor) => boolean, body: () => void): Descriptor[] {
  const asked: Descriptor[] = [];
  const permissions = Deno.permissions;
  const real = permissions.querySync.bind(permissions);
  Object.defineProperty(permissions, "querySync", {
    configurable: true,
    writable: true,
    value: (descriptor: Descriptor) => {
      asked.push(descriptor);
      return deny(descriptor)
        ? { state: "prompt", partial: false, onchange: null }
        : real(descriptor);
    },
  });
  try {
    body();
  } finally {
    delete (permissions as { querySync?: unknown }).querySync;
  }
  return asked;
}

/** The pid of a process of this host that has exited. */
async function exitedPid(): Promise<number> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "console.log(Deno.pid)"],
    stdout: "piped",
  }).output();
  const pid = Number(new TextDecoder().decode(output.stdout).trim());
  assert.ok(Number.isSafeInteger(pid) && pid > 0);
  return pid;
}

const isProc = (d: Descriptor) => d.name === "read" && String(d.path ?? "").startsWith("/proc/");
const isRun = (d: Descriptor) => d.name === "run";

for (
  const [name, make] of [["nodeProcessProbe", nodeProcessProbe], [
    "denoProcessProbe",
    denoProcessProbe,
  ]] as const
) {
  Deno.test(`${name} on Deno reads /proc only where the read is granted, by a query first`, {
    ignore: !linux,
  }, () => {
    // Another process than this one (whose own start, once read, is kept: it never changes).
    const other = Deno.ppid;
    const full = make();
    assert.notEqual(full.pidNamespace, undefined);
    assert.notEqual(full.processStart?.(other), undefined);
    let narrow: ReturnType<typeof make> | undefined;
    let start: string | undefined = "unset";
    const asked = withQueries(isProc, () => {
      narrow = make();
      start = narrow.processStart?.(other);
    });
    assert.equal(narrow?.pidNamespace, undefined);
    assert.equal(start, undefined);
    assert.ok(
      asked.some((d) => d.name === "read" && d.path === "/proc/self/ns/pid"),
      JSON.stringify(asked),
    );
    assert.ok(
      asked.some((d) => d.name === "read" && d.path === `/proc/${other}/stat`),
      JSON.stringify(asked),
    );
  });

  Deno.test(`${name} on Deno signals a pid only where running is granted, else takes it as alive`, async () => {
    const probe = make();
    const gone = await exitedPid();
    assert.equal(probe.isAlive(gone), false);
    let alive: boolean | undefined;
    const asked = withQueries(isRun, () => {
      alive = probe.isAlive(gone);
    });
    assert.equal(alive, true);
    assert.ok(asked.some(isRun), JSON.stringify(asked));
    // Pids no process can have are none, whatever the permissions.
    withQueries(isRun, () => {
      assert.equal(probe.isAlive(0), false);
      assert.equal(probe.isAlive(-1), false);
    });
  });
}

/** True when util-linux `script` can run a command in a pseudo-terminal here. */
async function hasScript(): Promise<boolean> {
  try {
    const output = await new Deno.Command("script", {
      args: ["-qec", "true", "/dev/null"],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).output();
    return output.success;
  } catch {
    return false;
  }
}

const quote = (text: string) => `'${text.replaceAll("'", `'\\''`)}'`;

/**
 * Runs `deno run <args>` in a pseudo-terminal, without --no-prompt and answering nothing, for at
 * most `ms`, in the directory `cwd`; returns what it printed and whether it finished in time.
 */
async function inTerminal(
  args: string[],
  cwd = repo,
  ms = 20_000,
): Promise<{ text: string; finished: boolean }> {
  const command = [Deno.execPath(), "run", "--quiet", ...args].map(quote).join(" ");
  const child = new Deno.Command("script", {
    args: ["-qfec", command, "/dev/null"],
    cwd,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).spawn();
  let finished = true;
  const timer = setTimeout(() => {
    finished = false;
    child.kill("SIGTERM");
  }, ms);
  const output = await child.output().finally(() => clearTimeout(timer));
  await child.stdin.close().catch(() => {});
  const decoder = new TextDecoder();
  const text = (decoder.decode(output.stdout) + decoder.decode(output.stderr)).replaceAll("\r", "");
  return { text, finished };
}

Deno.test("a store of denoFs() under narrow permissions never makes Deno prompt in a terminal", {
  ignore: !(await hasScript()),
}, async () => {
  const base = await Deno.realPath(await Deno.makeTempDir({ prefix: "loop-probe-prompt-" }));
  try {
    const cwd = `${base}/work`;
    const agentDir = `${base}/agent`;
    await denoFs().mkdir(cwd, { recursive: true });
    const writer = await new SessionStore({ fs: denoFs(), agentDir }).create(cwd);
    await writer.commit(conversation(1));
    await writer.close();
    const dir = writer.getSessionPath();
    const child = new URL("./_lock_perm_child.ts", import.meta.url).pathname;
    const files = [
      `--allow-read=${base}`,
      `--allow-write=${base}`,
      "--allow-sys=hostname",
      "--allow-env",
    ];
    const outcome = async (permissions: string[]) => {
      const { text, finished } = await inTerminal([...permissions, child, dir, agentDir]);
      assert.ok(!/Deno requests/.test(text), text);
      assert.ok(finished, text);
      const line = text.split("\n").find((l) => l.startsWith("{"));
      assert.ok(line !== undefined, text);
      return JSON.parse(line) as { probe: boolean; outcome: string; message?: string };
    };
    // No lock: the store is made, the lock taken and released, without a read of /proc.
    const opened = await outcome([...files, "--allow-run"]);
    assert.deepEqual([opened.probe, opened.outcome], [true, "opened"]);
    // The lock of a process that has exited, and no --allow-run: respected, without asking to run.
    const lock = JSON.stringify({
      pid: await exitedPid(),
      host: Deno.hostname(),
      startedAt: "2026-01-01T00:00:00.000Z",
      token: "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
    });
    await Deno.writeTextFile(`${dir}/writer.lock`, lock, { mode: 0o600 });
    const refused = await outcome(files);
    assert.deepEqual([refused.probe, refused.outcome], [true, "SessionLockedError"]);
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});

for (
  const [name, make] of [["nodeProcessProbe", nodeProcessProbe], [
    "denoProcessProbe",
    denoProcessProbe,
  ]] as const
) {
  Deno.test(`${name} on Deno without the host name granted throws NotCapable naming --allow-sys=hostname`, () => {
    let thrown: unknown;
    const asked = withQueries((d) => d.name === "sys", () => {
      try {
        make();
      } catch (error) {
        thrown = error;
      }
    });
    assert.ok(thrown instanceof Deno.errors.NotCapable, String(thrown));
    assert.match(thrown.message, new RegExp(`^${name}\\(\\)[^]*--allow-sys=hostname`));
    assert.ok(asked.some((d) => d.name === "sys" && d.kind === "hostname"), JSON.stringify(asked));
  });
}

/** Runs the command line `sessions list` of the agent directory `agentDir` under `permissions`. */
function cliArgs(permissions: string[], agentDir: string): string[] {
  return [
    ...permissions,
    `--config=${repo}deno.json`,
    `${repo}src/cli/bin.ts`,
    "--data-dir",
    agentDir,
    "sessions",
    "list",
  ];
}

Deno.test("the command line on Deno without --allow-sys lists sessions, without a probe and without a stack trace", async () => {
  const base = await Deno.realPath(await Deno.makeTempDir({ prefix: "loop-cli-nosys-" }));
  try {
    const cwd = `${base}/work`;
    const agentDir = `${base}/agent`;
    await denoFs().mkdir(cwd, { recursive: true });
    const writer = await new SessionStore({ fs: denoFs(), agentDir }).create(cwd);
    await writer.commit(conversation(1));
    await writer.close();
    const permissions = [`--allow-read=${base}`, `--allow-write=${base}`, "--allow-env"];
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--quiet", "--no-prompt", ...cliArgs(permissions, agentDir)],
      cwd,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const decoder = new TextDecoder();
    const [out, err] = [decoder.decode(output.stdout), decoder.decode(output.stderr)];
    assert.equal(output.code, 0, err);
    assert.ok(!/NotCapable|Uncaught/.test(err), err);
    assert.ok(out.includes(writer.id), out);
    if (await hasScript()) {
      // In a terminal, without --no-prompt: no prompt for the host name either.
      const { text, finished } = await inTerminal(cliArgs(permissions, agentDir), cwd);
      assert.ok(!/Deno requests/.test(text), text);
      assert.ok(finished, text);
      assert.ok(text.includes(writer.id), text);
    }
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});
