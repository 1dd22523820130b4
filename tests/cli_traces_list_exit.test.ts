/**
 * `traces list` exits 1 when a listed trace's integrity check failed, as `traces inspect` does for
 * that trace: a sealed manifest without its seal is a finding.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { runTraces } from "../src/cli/layout.ts";
import { memoryIo } from "../tests/_cli_io.ts";
import { newRepo } from "../tests/layout_fixtures.ts";

test("traces list exits 1 when a trace's integrity check failed, as inspect does", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/.loopy_loop/sessions", { recursive: true });
  const dir = "/repo/.loopy_loop/traces/t1";
  await fs.mkdir(dir, { recursive: true });
  const manifest = {
    manifest_id: "trace-1",
    lifecycle: "sealed",
    identity: { workflow_id: "w", session_id: "s", attempt_id: "a" },
  };
  await fs.writeFile(
    `${dir}/trace_manifest.json`,
    new TextEncoder().encode(JSON.stringify(manifest)),
  );
  const inspect = memoryIo(fs, "/repo", Date.now());
  assert.equal(await runTraces(inspect.io, ["inspect", "trace-1"]), 1);
  for (const args of [["list"], ["list", "--json"]]) {
    const { io, out } = memoryIo(fs, "/repo", Date.now());
    const code = await runTraces(io, args);
    assert.match(out(), /failed/);
    assert.equal(code, 1, `${args.join(" ")}: ${out()}`);
  }
});
