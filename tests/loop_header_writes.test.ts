// Header changes (pin, read receipt, title, model, permission preset) replace meta.json. On an
// idle session the temp file of the new meta.json is created at the call, so its create overlaps
// the work before the write, as a save's does; it never outlives the call.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionNotFoundError } from "../src/loop/errors.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/agent/.loop";

async function setup(): Promise<{ fs: MemoryFs; store: SessionStore; session: SessionManager }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(2)); // ends with assistant output: unread
  return { fs, store, session };
}

/** The temp files of meta.json that operations since the last reset created. */
function tempCreates(fs: MemoryFs, dir: string): string[] {
  return fs.operationLog
    .filter((record) =>
      record.op === "open" && record.path.startsWith(`${dir}/.meta.json.`) &&
      record.path.endsWith(".tmp")
    )
    .map((record) => record.path);
}

/** The names in the session directory that are temp files. */
async function leftovers(fs: MemoryFs, dir: string): Promise<string[]> {
  return (await fs.readDir(dir)).map((entry) => entry.name).filter((name) => name.endsWith(".tmp"));
}

const changes: [string, (session: SessionManager) => Promise<unknown>][] = [
  ["setPinned", (session) => session.setPinned(true)],
  ["markRead", (session) => session.markRead(session.messages.length)],
  [
    "setTitle",
    (session) => session.setTitle({ text: "Renamed", source: "user", messageIndices: [] }),
  ],
  ["setModel", (session) => session.setModel({ provider: "synthetic", id: "model-2" })],
  ["setPermissionPreset", (session) => session.setPermissionPreset("danger-full-access")],
];

for (const [name, change] of changes) {
  test(`${name} on an idle session creates the temp file of meta.json at the call, and publishes it`, async () => {
    const { fs, session } = await setup();
    const dir = session.getSessionPath();
    const before = await fs.readFile(`${dir}/meta.json`);
    fs.resetCounter();
    const changing = change(session);
    // Synchronously, before any queued task ran: the exclusive create was issued.
    assert.equal(tempCreates(fs, dir).length, 1);
    await changing;
    const [temp] = tempCreates(fs, dir);
    assert.ok(
      fs.operationLog.some((record) =>
        record.op === "rename" && record.path === temp && record.to === `${dir}/meta.json`
      ),
      "the temp file begun at the call is the one renamed over meta.json",
    );
    assert.notDeepEqual(await fs.readFile(`${dir}/meta.json`), before);
    assert.deepEqual(await leftovers(fs, dir), []);
    await session.close();
  });
}

test("a read receipt that changes nothing creates no temp file", async () => {
  const { fs, session } = await setup();
  const dir = session.getSessionPath();
  const count = session.messages.length;
  assert.equal(await session.markRead(count), true);
  fs.resetCounter();
  // Already read, a count that does not match, an empty count: nothing to write.
  assert.equal(await session.markRead(count), true);
  assert.equal(await session.markRead(count - 1), false);
  assert.equal(await session.markRead(0), false);
  assert.deepEqual(tempCreates(fs, dir), []);
  assert.deepEqual(fs.operationLog.filter((record) => record.op !== "lstat"), []);
  await session.close();
});

test("a header change that fails before its write removes the temp file begun at the call", async () => {
  const { fs, store, session: created } = await setup();
  await created.close();
  const dir = created.getSessionPath();
  // Opened again, then meta.json vanishes behind the session's back: its first write looks,
  // and refuses the pin before anything is written.
  const session = await store.open(dir);
  const meta = await fs.readFile(`${dir}/meta.json`);
  await fs.remove(`${dir}/meta.json`);
  fs.resetCounter();
  await assert.rejects(session.setPinned(true), SessionNotFoundError);
  assert.equal(tempCreates(fs, dir).length, 1);
  assert.deepEqual(await leftovers(fs, dir), []);
  assert.ok(!(await fs.readDir(dir)).some((entry) => entry.name === "meta.json"));
  // Put back, the session takes the next change.
  await fs.writeFile(`${dir}/meta.json`, meta);
  await session.setPinned(true);
  assert.deepEqual(await leftovers(fs, dir), []);
  await session.close();
});

test("a header change whose rename fails removes its temp file and keeps meta.json", async () => {
  const { fs, session } = await setup();
  const dir = session.getSessionPath();
  const before = await fs.readFile(`${dir}/meta.json`);
  fs.resetCounter();
  fs.failAt(1, { ops: ["rename"] });
  await assert.rejects(session.setPinned(true), (error: unknown) => {
    assert.equal((error as { code?: string }).code, "EIO");
    return true;
  });
  fs.clearFaults();
  assert.deepEqual(await fs.readFile(`${dir}/meta.json`), before);
  assert.deepEqual(await leftovers(fs, dir), []);
  assert.equal(session.getHeader().pinnedAt, undefined);
  const pinnedAt = await session.setPinned(true);
  assert.equal(typeof pinnedAt, "string");
  await session.close();
});

test("a header change queued behind another call creates its temp file when its turn comes", async () => {
  const { fs, session } = await setup();
  const dir = session.getSessionPath();
  const saving = session.append(conversation(1, "later"));
  fs.resetCounter();
  const pinning = session.setPinned(true);
  // The save's write runs first; nothing of the pin was issued at its call.
  assert.deepEqual(tempCreates(fs, dir), []);
  await Promise.all([saving, pinning]);
  assert.equal(tempCreates(fs, dir).length, 1);
  assert.deepEqual(await leftovers(fs, dir), []);
  assert.equal(typeof session.getHeader().pinnedAt, "string");
  await session.close();
});
