// The store's public methods refuse arguments of the wrong kind up front, with an
// InvalidArgumentError naming the argument (never a raw TypeError from deep inside), and change
// nothing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { InvalidArgumentError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

const refused = (argument: string) => (error: unknown) => {
  assert.ok(error instanceof InvalidArgumentError, `${argument}: ${String(error)}`);
  assert.equal(error.argument, argument, error.message);
  return true;
};

test("store methods refuse a path, cwd or options argument of the wrong kind with InvalidArgumentError", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const dir = session.getSessionPath();
  fs.syncAll();
  const before = fs.clone();
  const calls: [string, () => Promise<unknown>][] = [
    ["options", () => store.listDetailed(CWD, undefined, null as never)],
    ["options", () => store.listDetailed(CWD, undefined, 5 as never)],
    ["options", () => store.list(CWD, undefined, "fast" as never)],
    ["fast", () => store.list(CWD, undefined, { fast: "yes" as never })],
    ["pinnedFirst", () => store.listDetailed(CWD, undefined, { pinnedFirst: 1 as never })],
    ["cwd", () => store.list(123 as never)],
    ["cwd", () => store.list(null as never)],
    ["sessionDir", () => store.list(undefined, 123 as never)],
    ["sessionDir", () => store.listDetailed(CWD, null as never)],
    ["cwd", () => store.canonicalCwd(123 as never)],
    ["cwd", () => store.collectionFor({} as never)],
    ["cwd", () => store.create(123 as never)],
    ["cwd", () => store.create(null as never)],
    ["path", () => store.open(123 as never)],
    ["path", () => store.open(undefined as never)],
    ["options", () => store.open(dir, null as never)],
    ["options", () => store.open(dir, true as never)],
    ["path", () => store.compact(123 as never)],
    ["path", () => store.removeLegacyBackup([dir] as never)],
    ["cwd", () => store.cleanup(123 as never)],
    ["sessionDir", () => store.cleanup(undefined, 123 as never)],
    ["cwd", () => store.archive.set(123 as never, [session.id], true)],
    ["cwd", () => store.archive.list(123 as never)],
    ["cwd", () => store.archive.isArchived(null as never, session.id)],
    ["cwd", () => store.archive.delete(123 as never, [session.id])],
    ["dir", () => store.salvage(123 as never, "/rescue")],
    ["dir", () => store.salvage("relative/dir", "/rescue")],
    ["toCollection", () => store.salvage(dir, 123 as never)],
    ["toCollection", () => store.salvage(dir, "rescue")],
    ["options", () => store.salvage(dir, "/rescue", null as never)],
  ];
  for (const [argument, call] of calls) {
    await assert.rejects(call(), refused(argument), `${argument}: ${call.toString()}`);
  }
  // Nothing was written by any of them.
  assert.deepEqual(fs.snapshotTree(), before.snapshotTree());
});
