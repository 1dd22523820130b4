/**
 * `sessions migrate (<path> | --all)`: given both, the user meant one file; the command must refuse
 * (usage error, exit 2) and write nothing, not migrate every legacy file of the data directory.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "../tests/_cli_io.ts";
import { workspaceHash } from "../src/loop/store.ts";
import { conversation, legacySessionBytes } from "../tests/_fixtures.ts";

const AGENT = "/home/user/.loop";
const CWD = "/work/project";

test("sessions migrate refuses a path together with --all, writing nothing", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const collection = `${AGENT}/sessions/${workspaceHash(CWD)}`;
  await fs.mkdir(collection, { recursive: true });
  const one = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const other = "1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  for (const id of [one, other]) {
    await fs.writeFile(`${collection}/${id}.jsonl`, legacySessionBytes(id, CWD, conversation(1)));
  }
  const before = fs.snapshotTree(AGENT);
  for (const dry of [[], ["--dry-run"]]) {
    const { io, out } = memoryIo(fs, CWD, Date.now());
    const code = await runCli(
      ["--data-dir", AGENT, "sessions", "migrate", `${collection}/${one}.jsonl`, "--all", ...dry],
      io,
    );
    assert.equal(code, 2, out());
    assert.equal(out(), "");
  }
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});
