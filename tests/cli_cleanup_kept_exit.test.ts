/**
 * The help says: "What it cannot settle is listed as kept (exit 1): look at it by hand." A staged
 * delete whose journal is torn may hold a session's only copy; a script running `sessions cleanup`
 * must see exit 1.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "../tests/_cli_io.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "../tests/_fixtures.ts";

const AGENT = "/home/user/.loop";
const CWD = "/work/project";

test("sessions cleanup exits 1 when it keeps a staged delete it cannot settle", async () => {
  const fs = new MemoryFs();
  const now = Date.parse("2026-03-01T00:00:00Z");
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => now });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const collection = await store.collectionFor(CWD);
  // A delete torn before its journal was whole: the session's only copy is staged.
  const staging = `${collection}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(staging);
  await fs.rename(`${collection}/${session.id}`, `${staging}/${session.id}`);
  await fs.writeFile(`${staging}/intent.json`, new TextEncoder().encode('{"operation":"del'));
  for (
    const args of [
      [],
      ["--json"],
      ["--dir", collection],
      ["--all-workspaces"],
    ]
  ) {
    const { io, out } = memoryIo(fs, CWD, now);
    const code = await runCli(["--data-dir", AGENT, "sessions", "cleanup", ...args], io);
    assert.match(out(), /kept/, args.join(" "));
    assert.equal(code, 1, `cleanup ${args.join(" ")}: ${out()}`);
  }
  assert.ok(await fs.lstat(`${staging}/${session.id}`));
});
