/**
 * Like every path the command line takes, a relative trace path names a file from where the command
 * runs: `traces inspect t1/trace_manifest.json` run inside `.loopy_loop/traces/` inspects that
 * manifest (the library alone would take it from the repository root, where no such file is).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { runTraces } from "../src/cli/layout.ts";
import { memoryIo } from "../tests/_cli_io.ts";
import { newRepo } from "../tests/layout_fixtures.ts";

test("traces inspect resolves a relative manifest path against the current directory", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/.loopy_loop/sessions", { recursive: true });
  const dir = "/repo/.loopy_loop/traces/t1";
  await fs.mkdir(dir, { recursive: true });
  const manifest = {
    manifest_id: "trace-1",
    lifecycle: "active",
    identity: { workflow_id: "w", session_id: "s", attempt_id: "a" },
  };
  await fs.writeFile(
    `${dir}/trace_manifest.json`,
    new TextEncoder().encode(JSON.stringify(manifest)),
  );
  const { io, out } = memoryIo(fs, "/repo/.loopy_loop/traces", Date.now());
  const code = await runTraces(io, ["inspect", "t1/trace_manifest.json"]).catch((e) => e);
  assert.equal(typeof code, "number", String(code));
  assert.equal(JSON.parse(out()).manifest_id, "trace-1");
});
