// The Deno adapter's process probe (Deno only: it uses Deno.pid and Deno.hostname()).
import { test } from "node:test";
import assert from "node:assert/strict";
import { denoProcessProbe } from "../adapters/deno.ts";

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
