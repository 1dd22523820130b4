/**
 * `sessions delete` without --include-unarchived checks every target of every collection before the
 * first collection is touched: when a later collection holds an archived and an unarchived target,
 * nothing at all may be deleted (the existing test covers one target per collection only).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runSessions } from "../src/cli/sessions.ts";
import { memoryIo } from "../tests/_cli_io.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "../tests/_fixtures.ts";

const AGENT = "/home/user/.loop";

test("delete of several targets per collection deletes nothing when a later one is not archived", async () => {
  const fs = new MemoryFs();
  const now = Date.parse("2026-03-01T00:00:00Z");
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => now });
  const make = async (cwd: string): Promise<string> => {
    await fs.mkdir(cwd, { recursive: true });
    const session = await store.create(cwd);
    await session.commit(conversation(1));
    await session.close();
    return session.id;
  };
  // The first collection (first on the command line): one archived session. The second: an
  // archived one and one that is not.
  const a = await make("/work/a");
  const b1 = await make("/work/b");
  const b2 = await make("/work/b");
  await store.archive.set("/work/a", [a], true);
  await store.archive.set("/work/b", [b1], true);
  const before = fs.snapshotTree(AGENT);
  const { io, out } = memoryIo(fs, "/work/a", now);
  const code = await runSessions(io, ["delete", a, b1, b2], AGENT).catch((error) => error);
  // Refused (an error, or exit code 1) with nothing changed: `a` is still there.
  assert.ok(code instanceof Error || code === 1, `exit ${code}`);
  assert.equal(out(), "");
  assert.deepEqual(fs.snapshotTree(AGENT), before);
  assert.ok((await store.list("/work/a")).some((s) => s.id === a));
});
