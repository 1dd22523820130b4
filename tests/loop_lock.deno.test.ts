// The Deno adapter's process probe (Deno only: it uses Deno.pid and Deno.hostname()).
import { test } from "node:test";
import assert from "node:assert/strict";
import { denoFs, denoProcessProbe } from "../adapters/deno.ts";
import { SessionBusyError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

test("denoProcessProbe reports this process alive and an exited one dead", async () => {
  const probe = denoProcessProbe();
  assert.equal(probe.pid, Deno.pid);
  assert.equal(probe.host, Deno.hostname());
  assert.equal(probe.isAlive(Deno.pid), true);
  assert.equal(probe.isAlive(0), false);
  assert.equal(probe.isAlive(-1), false);
  const child = new Deno.Command(Deno.execPath(), {
    args: ["eval", "console.log(Deno.pid)"],
    stdout: "piped",
  });
  const output = await child.output();
  const exited = Number(new TextDecoder().decode(output.stdout).trim());
  assert.ok(Number.isSafeInteger(exited) && exited > 0);
  assert.equal(probe.isAlive(exited), false);
});

test("denoFs() offers its probe as processes, so its stores lock across processes by default", () => {
  const probe = denoFs().processes;
  assert.equal(probe?.pid, Deno.pid);
  assert.equal(probe?.host, Deno.hostname());
  assert.equal(probe?.isAlive(Deno.pid), true);
  assert.equal(denoFs().processes, probe);
  const store = new SessionStore({ fs: denoFs(), agentDir: "/nonexistent/agent" });
  assert.equal(store.context.probe, probe);
});

test("two stores of one process, each given denoFs(), refuse a second writer to each other", async () => {
  assert.equal(denoFs(), denoFs());
  const base = await Deno.makeTempDir({ prefix: "loop-two-stores-" });
  try {
    const cwd = `${base}/work`;
    await denoFs().mkdir(cwd, { recursive: true });
    const first = new SessionStore({ fs: denoFs(), agentDir: `${base}/agent` });
    const second = new SessionStore({ fs: denoFs(), agentDir: `${base}/agent` });
    const writer = await first.create(cwd);
    await writer.commit(conversation(1));
    await assert.rejects(second.open(writer.getSessionPath()), SessionBusyError);
    await writer.close();
    const next = await second.open(writer.getSessionPath());
    await next.close();
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});

test("denoFs()'s probe under narrow permissions: never a prompt, and a lock it cannot judge is respected", async () => {
  const base = await Deno.makeTempDir({ prefix: "loop-lock-permissions-" });
  try {
    const cwd = `${base}/work`;
    const agentDir = `${base}/agent`;
    await denoFs().mkdir(cwd, { recursive: true });
    const writer = await new SessionStore({ fs: denoFs(), agentDir }).create(cwd);
    await writer.commit(conversation(1));
    await writer.close();
    const dir = writer.getSessionPath();
    // The lock of a process of this host that has exited: a probe that can signal takes it over.
    const exited = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "console.log(Deno.pid)"],
      stdout: "piped",
    }).output();
    const pid = Number(new TextDecoder().decode(exited.stdout).trim());
    const lock = JSON.stringify({
      pid,
      host: Deno.hostname(),
      startedAt: "2026-01-01T00:00:00.000Z",
      token: "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
    });
    const child = new URL("./_lock_perm_child.ts", import.meta.url).pathname;
    const run = async (permissions: string[]) => {
      await Deno.writeTextFile(`${dir}/writer.lock`, lock, { mode: 0o600 });
      const output = await new Deno.Command(Deno.execPath(), {
        args: ["run", "--no-prompt", ...permissions, child, dir, agentDir],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(output.stdout).trim();
      assert.ok(text.length > 0, new TextDecoder().decode(output.stderr));
      return JSON.parse(text) as { probe: boolean; outcome: string; message?: string };
    };
    const files = [`--allow-read=${base}`, `--allow-write=${base}`];
    // No host name: no probe (asked by a query, so --no-prompt never fails the store's creation).
    const none = await run(files);
    assert.deepEqual([none.probe, none.outcome], [false, "SessionLockedError"]);
    assert.match(none.message ?? "", /no process probe/);
    // A probe that may not signal: the holder may run, so the lock is respected.
    const noSignal = await run([...files, "--allow-sys=hostname"]);
    assert.deepEqual([noSignal.probe, noSignal.outcome], [true, "SessionLockedError"]);
    // A probe that may signal finds the holder gone and takes the lock over.
    const full = await run([...files, "--allow-sys=hostname", "--allow-run"]);
    assert.deepEqual([full.probe, full.outcome], [true, "opened"]);
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});

test("without --allow-run, a dead process's lock is refused saying this process may not signal it", async () => {
  const probe = denoProcessProbe();
  assert.equal(probe.maySignal?.(), true);
  assert.equal(denoFs().processes?.maySignal?.(), true);
  const base = await Deno.makeTempDir({ prefix: "loop-lock-norun-" });
  try {
    const cwd = `${base}/work`;
    const agentDir = `${base}/agent`;
    await denoFs().mkdir(cwd, { recursive: true });
    const writer = await new SessionStore({ fs: denoFs(), agentDir }).create(cwd);
    await writer.commit(conversation(1));
    await writer.close();
    const dir = writer.getSessionPath();
    const exited = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "console.log(Deno.pid)"],
      stdout: "piped",
    }).output();
    const pid = Number(new TextDecoder().decode(exited.stdout).trim());
    await Deno.writeTextFile(
      `${dir}/writer.lock`,
      JSON.stringify({
        pid,
        host: Deno.hostname(),
        startedAt: "2026-01-01T00:00:00.000Z",
        token: "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
      }),
      { mode: 0o600 },
    );
    const child = new URL("./_lock_perm_child.ts", import.meta.url).pathname;
    const output = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--no-prompt",
        `--allow-read=${base}`,
        `--allow-write=${base}`,
        "--allow-sys=hostname",
        child,
        dir,
        agentDir,
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(output.stdout).trim();
    assert.ok(text.length > 0, new TextDecoder().decode(output.stderr));
    const result = JSON.parse(text) as { probe: boolean; outcome: string; message?: string };
    assert.deepEqual([result.probe, result.outcome], [true, "SessionLockedError"]);
    assert.match(result.message ?? "", new RegExp(`may not signal process ${pid}[^]*--allow-run`));
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});
