import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionLockedError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { COLLECTION_LOCK_FILE, type ProcessProbe, WRITER_LOCK_FILE } from "../src/loop/lock.ts";
import { conversation } from "./_fixtures.ts";

// A lock names the pid namespace of its writer where that writer's probe could tell it (Linux,
// Node or Deno -A). A probe that cannot tell its own (Deno without -A cannot read
// /proc/self/ns/pid) cannot tell whether such a lock's pid is one of its namespace: the lock is
// respected as another host's, never taken over (nor removed by cleanup) as a dead pid.

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const HOST = "test-host";
const NS_A = "pid:[4026531836]";
const NS_B = "pid:[4026532001]";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The same filesystem seen by another process (in-memory registrations do not carry over). */
function view(fs: FileSystem): FileSystem {
  return new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** A process `pid` of namespace `ns` (undefined: a probe that cannot tell) seeing only itself. */
function storeAs(fs: FileSystem, pid: number, ns: string | undefined): SessionStore {
  const process: ProcessProbe = {
    pid,
    host: HOST,
    isAlive: (other) => other === pid,
    ...(ns === undefined ? {} : { pidNamespace: ns }),
  };
  return new SessionStore({ fs: view(fs), agentDir: AGENT, process });
}

async function setup(): Promise<{ fs: MemoryFs; dir: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const session = await storeAs(fs, 100, NS_A).create(CWD);
  await session.commit(conversation(1));
  await session.close();
  return { fs, dir: session.getSessionPath() };
}

async function lockText(fs: FileSystem, path: string): Promise<string> {
  return decoder.decode(await fs.readFile(path));
}

/** A lock of pid 7 (dead out here) naming namespace `ns` (or none). */
function record(ns: string | undefined, token = "7a7a") {
  return {
    pid: 7,
    host: HOST,
    startedAt: "2026-01-01T00:00:00.000Z",
    token,
    ...(ns === undefined ? {} : { pidNamespace: ns }),
  };
}

async function writeLock(fs: FileSystem, path: string, content: unknown): Promise<void> {
  await fs.writeFile(path, encoder.encode(JSON.stringify(content)), { mode: 0o600 });
}

test("a lock naming a pid namespace is refused, never taken over, by a probe that cannot tell its own", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  // A live writer of another namespace (pid 7 there; no pid 7 out here) holds the session.
  await writeLock(fs, lock, record(NS_B));
  const before = await lockText(fs, lock);
  const narrow = storeAs(fs, 300, undefined);
  await assert.rejects(narrow.open(dir), (error) => {
    assert.ok(error instanceof SessionLockedError, String(error));
    // Says why it cannot be checked, and how to proceed.
    assert.match(error.message, /pid namespace/);
    assert.match(error.message, /\/proc/);
    assert.match(error.message, /remove the lock file by hand/);
    return true;
  });
  assert.equal(await lockText(fs, lock), before);
  // cleanup() leaves it.
  const report = await narrow.cleanup(CWD);
  assert.ok(!report.removed.includes(lock), JSON.stringify(report.removed));
  assert.equal(await lockText(fs, lock), before);
  // A read-only open is fine meanwhile.
  const reader = await narrow.open(dir, { readOnly: true });
  await reader.close();
});

test("a collection lock naming a pid namespace is waited for, then refused, by a probe that cannot tell its own", async () => {
  const { fs } = await setup();
  const lock = `${COLLECTION}/${COLLECTION_LOCK_FILE}`;
  await writeLock(fs, lock, record(NS_B, "c0c0"));
  const before = await lockText(fs, lock);
  const narrow = new SessionStore({
    fs: view(fs),
    agentDir: AGENT,
    process: { pid: 300, host: HOST, isAlive: (other) => other === 300 },
    collectionLockWaitMs: 50,
  });
  await assert.rejects(narrow.cleanup(CWD), (error) => {
    assert.ok(error instanceof SessionLockedError, String(error));
    assert.match(error.message, /pid namespace/);
    return true;
  });
  assert.equal(await lockText(fs, lock), before);
});

test("a lock naming no pid namespace is checked by pid, also by a probe that knows its own", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  // Written by a limited probe (Deno without -A): pid 7 is dead here, so the lock is stale.
  await writeLock(fs, lock, record(undefined));
  const writer = await storeAs(fs, 300, NS_A).open(dir);
  assert.equal(JSON.parse(await lockText(fs, lock)).pid, 300);
  await writer.close();
  // cleanup() removes such a lock too.
  await writeLock(fs, lock, record(undefined));
  const report = await storeAs(fs, 300, NS_A).cleanup(CWD);
  assert.ok(report.removed.includes(lock), JSON.stringify(report.removed));
  // Neither side knowing a namespace: by pid, as ever.
  await writeLock(fs, lock, record(undefined));
  const narrow = await storeAs(fs, 300, undefined).open(dir);
  await narrow.close();
});

test("a lock and a probe both naming pid namespaces: the same one is checked by pid, another is respected", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  // Same namespace, dead pid: stale, taken over.
  await writeLock(fs, lock, record(NS_A));
  const writer = await storeAs(fs, 300, NS_A).open(dir);
  assert.equal(JSON.parse(await lockText(fs, lock)).pid, 300);
  await writer.close();
  // Same namespace, live pid: refused.
  const holder = await storeAs(fs, 400, NS_A).open(dir);
  await assert.rejects(
    new SessionStore({
      fs: view(fs),
      agentDir: AGENT,
      process: { pid: 300, host: HOST, pidNamespace: NS_A, isAlive: (p) => p === 300 || p === 400 },
    }).open(dir),
    SessionLockedError,
  );
  await holder.close();
  // Another namespace: respected, and left by cleanup.
  await writeLock(fs, lock, record(NS_B));
  const before = await lockText(fs, lock);
  await assert.rejects(storeAs(fs, 300, NS_A).open(dir), SessionLockedError);
  const report = await storeAs(fs, 300, NS_A).cleanup(CWD);
  assert.ok(!report.removed.includes(lock));
  assert.equal(await lockText(fs, lock), before);
});
