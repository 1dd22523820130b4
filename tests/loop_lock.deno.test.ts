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
