// `deno task cli` runs the command line where it is called (Deno only: Node has no `deno task`).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";
import { SessionStore } from "../src/loop/store.ts";
import { user } from "./_fixtures.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

let base = "";
let work = "";
let sessionId = "";

before(async () => {
  base = mkdtempSync(join(tmpdir(), "loop-cli-task-"));
  work = join(base, "work");
  mkdirSync(work, { recursive: true });
  const store = new SessionStore({ fs: nodeFs(), agentDir: join(base, "agent") });
  const session = await store.create(work);
  await session.commit([user("hello")]);
  await session.close();
  sessionId = session.id;
});

after(() => {
  rmSync(base, { recursive: true, force: true });
});

test("'deno task cli' runs the command line where it is called, not in the checkout", () => {
  // As from a shell: deno task sets INIT_CWD to where it is called only when it is not set (an
  // npm or npx around this test set it). `env -u`, as Deno's child_process keeps a deleted
  // variable of its own environment.
  const run = spawnSync(
    "env",
    [
      "-u",
      "INIT_CWD",
      process.execPath,
      "task",
      "--quiet",
      "--config",
      join(ROOT, "deno.json"),
      "cli",
      // From the workspace of the session, with a relative --data-dir: both are the caller's.
      "--data-dir",
      "../agent",
      "sessions",
      "list",
      "--fast",
      "--json",
    ],
    { cwd: work, env: { ...process.env, NO_COLOR: "1", LOOP_DATA_DIR: "" }, encoding: "utf8" },
  );
  assert.equal(run.status, 0, run.stderr);
  const listed = JSON.parse(run.stdout) as { sessions: { id: string }[] };
  assert.deepEqual(listed.sessions.map((s) => s.id), [sessionId], run.stderr);
});
