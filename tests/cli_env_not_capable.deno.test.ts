/**
 * Run with `--allow-env=HOME` only, the command line finds LOOP_DATA_DIR not granted: that is
 * "unset" (the default, ~/.loop, applies), not a usage error.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const BIN = fileURLToPath(new URL("../src/cli/bin.ts", import.meta.url));
const CONFIG = fileURLToPath(new URL("../deno.json", import.meta.url));

test("on Deno, LOOP_DATA_DIR not granted (--allow-env=HOME only) is unset: ~/.loop is used", () => {
  const home = mkdtempSync(join(tmpdir(), "loop-env-"));
  try {
    mkdirSync(join(home, ".loop", "sessions"), { recursive: true });
    const run = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--quiet",
        "--config",
        CONFIG,
        "--allow-read",
        "--allow-write",
        "--allow-env=HOME",
        BIN,
        "sessions",
        "list",
        "--all-workspaces",
        "--json",
      ],
      env: { HOME: home, LOOP_DATA_DIR: "/nonexistent", NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    const err = new TextDecoder().decode(run.stderr);
    assert.equal(run.code, 0, err);
    assert.deepEqual(JSON.parse(new TextDecoder().decode(run.stdout)), {
      sessions: [],
      failures: [],
    });
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});
