import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionLockedError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { COLLECTION_LOCK_FILE, type ProcessProbe, WRITER_LOCK_FILE } from "../src/loop/lock.ts";
import { conversation } from "./_fixtures.ts";

// A probe that may not signal other processes (Deno without --allow-run) cannot tell a dead
// holder from a live one: its isAlive reports every pid alive, so their locks are respected. The
// refusal then says why (this process may not signal the holder, and what grant lets it take over
// a lock whose holder is gone), as the refusals of a store without a probe and of a lock naming a
// pid namespace it cannot compare do, instead of only telling to close the session "there".

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const HOST = "test-host";
const NS = "pid:[4026531836]";
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

/**
 * Process `pid`, which may signal others (`maySignal` true: only itself is alive) or not (every
 * pid is reported alive, as a probe that may not check does).
 */
function probeOf(pid: number, maySignal: boolean | undefined, ns?: string): ProcessProbe {
  return {
    pid,
    host: HOST,
    isAlive: (other) => maySignal === false || other === pid,
    ...(maySignal === undefined ? {} : { maySignal: () => maySignal }),
    ...(ns === undefined ? {} : { pidNamespace: ns }),
  };
}

function storeAs(fs: FileSystem, process: ProcessProbe): SessionStore {
  return new SessionStore({ fs: view(fs), agentDir: AGENT, process, collectionLockWaitMs: 50 });
}

async function setup(): Promise<{ fs: MemoryFs; dir: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const session = await storeAs(fs, probeOf(100, true)).create(CWD);
  await session.commit(conversation(1));
  await session.close();
  return { fs, dir: session.getSessionPath() };
}

/** The lock of pid 7, which has exited (no probe here reports it alive unless it may not check). */
async function writeLock(fs: FileSystem, path: string, ns?: string): Promise<string> {
  const text = JSON.stringify({
    pid: 7,
    host: HOST,
    startedAt: "2026-01-01T00:00:00.000Z",
    token: "7a7a",
    ...(ns === undefined ? {} : { pidNamespace: ns }),
  });
  await fs.writeFile(path, encoder.encode(text), { mode: 0o600 });
  return text;
}

const NO_SIGNAL = /may not signal process 7[^]*--allow-run[^]*holder is gone/;

test("a writer lock a probe may not signal the holder of is refused with a hint naming --allow-run", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const text = await writeLock(fs, lock);
  await assert.rejects(storeAs(fs, probeOf(300, false)).open(dir), (error) => {
    assert.ok(error instanceof SessionLockedError, String(error));
    assert.match(error.message, NO_SIGNAL);
    assert.equal(error.pid, 7);
    return true;
  });
  assert.equal(decoder.decode(await fs.readFile(lock)), text);
  // Also when both name the same pid namespace: the pid is judged, and could not be signalled.
  await writeLock(fs, lock, NS);
  await assert.rejects(
    storeAs(fs, probeOf(300, false, NS)).open(dir),
    (error) => error instanceof SessionLockedError && NO_SIGNAL.test(error.message),
  );
  // A probe that may signal finds pid 7 gone and takes the lock over.
  await writeLock(fs, lock);
  const writer = await storeAs(fs, probeOf(300, true)).open(dir);
  assert.equal(JSON.parse(decoder.decode(await fs.readFile(lock))).pid, 300);
  await writer.close();
});

test("a collection lock a probe may not signal the holder of is refused with a hint naming --allow-run", async () => {
  const { fs } = await setup();
  const lock = `${COLLECTION}/${COLLECTION_LOCK_FILE}`;
  const text = await writeLock(fs, lock);
  await assert.rejects(storeAs(fs, probeOf(300, false)).cleanup(CWD), (error) => {
    assert.ok(error instanceof SessionLockedError, String(error));
    assert.match(error.message, /^Session collection is locked by process 7/);
    assert.match(error.message, NO_SIGNAL);
    return true;
  });
  assert.equal(decoder.decode(await fs.readFile(lock)), text);
  // A probe that may signal finds pid 7 gone: its cleanup takes the lock over, and releases it.
  await storeAs(fs, probeOf(300, true)).cleanup(CWD);
  const names = (await fs.readDir(COLLECTION)).map((entry) => entry.name);
  assert.ok(!names.includes(COLLECTION_LOCK_FILE), JSON.stringify(names));
});

test("a holder that runs, a probe that says nothing of signalling, or another namespace: no such hint", async () => {
  const { fs, dir } = await setup();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  // A live holder, by a probe that may signal.
  await writeLock(fs, lock);
  const alive: ProcessProbe = { ...probeOf(300, true), isAlive: () => true };
  await assert.rejects(
    storeAs(fs, alive).open(dir),
    (error) => error instanceof SessionLockedError && !/signal/.test(error.message),
  );
  // A probe of its own without maySignal: as before.
  await assert.rejects(
    storeAs(fs, { pid: 300, host: HOST, isAlive: () => true }).open(dir),
    (error) => error instanceof SessionLockedError && !/signal/.test(error.message),
  );
  // Another pid namespace is respected for that reason, not for want of signalling.
  await writeLock(fs, lock, "pid:[4026532001]");
  await assert.rejects(
    storeAs(fs, probeOf(300, false, NS)).open(dir),
    (error) => error instanceof SessionLockedError && !/signal/.test(error.message),
  );
});
