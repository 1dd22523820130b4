/**
 * `sessions list` and `sessions cleanup` name their collections one way: given two, the command
 * must refuse (usage error, exit 2) and change nothing, rather than pick one silently (a cleanup of
 * another collection than the one meant).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "../tests/_cli_io.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "../tests/_fixtures.ts";

const AGENT = "/home/user/.loop";

test("list and cleanup refuse two of --cwd, --dir and --all-workspaces", async () => {
  const fs = new MemoryFs();
  const now = Date.parse("2026-03-01T00:00:00Z");
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => now });
  for (const cwd of ["/work/a", "/work/b"]) {
    await fs.mkdir(cwd, { recursive: true });
    const session = await store.create(cwd);
    await session.commit(conversation(1));
    await session.close();
  }
  const collectionB = await store.collectionFor("/work/b");
  const before = fs.snapshotTree(AGENT);
  for (const sub of ["list", "cleanup"]) {
    for (
      const extra of [
        ["--cwd", "/work/a", "--dir", collectionB],
        ["--cwd", "/work/a", "--all-workspaces"],
        ["--dir", collectionB, "--all-workspaces"],
      ]
    ) {
      const { io, out } = memoryIo(fs, "/work/a", now);
      const code = await runCli(["--data-dir", AGENT, "sessions", sub, ...extra], io);
      assert.equal(code, 2, `${sub} ${extra.join(" ")}: ${out()}`);
      assert.equal(out(), "");
    }
  }
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});
