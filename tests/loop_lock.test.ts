import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { mkdtemp, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import process from "node:process";
import { MemoryFs } from "../adapters/memory.ts";
import { nodeFs, nodeProcessProbe } from "../adapters/node.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { FsIoError, NotFound } from "../src/port/errors.ts";
import { SessionBusyError, SessionFormatError, SessionLockedError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import {
  abandonedTokenCount,
  acquireWriterLock,
  COLLECTION_LOCK_FILE,
  type ProcessProbe,
  type StoreContext,
  withCollectionLock,
  WRITER_LOCK_FILE,
} from "../src/loop/lock.ts";
import { conversation, probe, user } from "./_fixtures.ts";
import { gate, hookedFs, withoutNoFollow } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const HOST = "test-host";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The same filesystem seen by another process (in-memory registrations do not carry over). */
function view(fs: FileSystem, delay?: () => number): FileSystem {
  return new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (delay === undefined) return value.bind(target);
      return async (...args: unknown[]) => {
        await new Promise((resolve) => setTimeout(resolve, delay()));
        return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      };
    },
  });
}

function storeAs(fs: FileSystem, pid: number, alive: Set<number>, host = HOST): SessionStore {
  return new SessionStore({ fs: view(fs), agentDir: AGENT, process: probe(pid, alive, host) });
}

async function setup(): Promise<{ fs: MemoryFs; alive: Set<number>; session: SessionManager }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const alive = new Set([100, 200]);
  const session = await storeAs(fs, 100, alive).create(CWD);
  await session.commit(conversation(1));
  await session.close();
  return { fs, alive, session };
}

async function lockRecord(fs: FileSystem, dir: string): Promise<Record<string, unknown>> {
  return JSON.parse(decoder.decode(await fs.readFile(`${dir}/${WRITER_LOCK_FILE}`)));
}

async function writeLock(fs: FileSystem, dir: string, content: unknown): Promise<void> {
  const text = typeof content === "string" ? content : JSON.stringify(content);
  await fs.writeFile(`${dir}/${WRITER_LOCK_FILE}`, encoder.encode(text), { mode: 0o600 });
}

test("a writable open holds writer.lock with pid, host and start time; close() releases it", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await assert.rejects(fs.lstat(`${dir}/${WRITER_LOCK_FILE}`));
  const writer = await storeAs(fs, 100, alive).open(dir);
  const record = await lockRecord(fs, dir);
  assert.equal(record.pid, 100);
  assert.equal(record.host, HOST);
  assert.equal(typeof record.startedAt, "string");
  assert.equal((await fs.stat(`${dir}/${WRITER_LOCK_FILE}`)).mode, 0o600);
  await writer.close();
  await assert.rejects(fs.lstat(`${dir}/${WRITER_LOCK_FILE}`));
});

/**
 * `fs` as process `pid` sees it, whose first handle on `path` stalls its first write until `stall`
 * opens, then lets it `land`, or fails it (ENOSPC), or fails the handle's close (EIO); and, with
 * `afterWrite`, calls it once that write returned.
 */
function stallingOn(
  fs: MemoryFs,
  path: string,
  stall: Promise<void>,
  land: "land" | "write fails" | "close fails",
  afterWrite?: () => void,
): { fs: FileSystem; created: () => boolean } {
  let created = false;
  const proxy = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== "open") return typeof value === "function" ? value.bind(target) : value;
      return async (at: string, options: Parameters<FileSystem["open"]>[1]) => {
        const handle = await target.open(at, options);
        if (at !== path || created) return handle;
        created = true;
        return new Proxy(handle, {
          get(h, key) {
            const member = Reflect.get(h, key, h);
            const call = member as (...a: unknown[]) => Promise<unknown>;
            if (key === "write") {
              return async (...args: unknown[]) => {
                await stall;
                if (land === "write fails") throw new FsIoError("ENOSPC", "write", at, "no space");
                const result = await call.apply(h, args);
                afterWrite?.();
                return result;
              };
            }
            if (key === "close" && land === "close fails") {
              return async () => {
                await call.apply(h, []);
                throw new FsIoError("EIO", "close", at, "I/O error");
              };
            }
            return typeof member === "function" ? member.bind(h) : member;
          },
        });
      };
    },
  });
  return { fs: proxy, created: () => created };
}

test("a holder that stalls between creating its lock and writing it, past the grace periods, loses the lock instead of sharing it or removing the new holder's", async () => {
  for (const land of ["land", "write fails", "close fails"] as const) {
    const { fs, alive, session } = await setup();
    alive.add(300);
    const dir = session.getSessionPath();
    // Process 100 creates writer.lock, then its write of the record stalls until released.
    const stall = gate();
    const stalling = stallingOn(fs, `${dir}/${WRITER_LOCK_FILE}`, stall.wait, land);
    const first = new SessionStore({ fs: stalling.fs, agentDir: AGENT, process: probe(100, alive) })
      .open(dir);
    while (!stalling.created()) await new Promise((resolve) => setTimeout(resolve, 5));
    // Process 200 finds the lock empty past the grace periods and takes it over.
    const second = await storeAs(fs, 200, alive).open(dir);
    assert.equal((await lockRecord(fs, dir)).pid, 200, land);
    stall.open();
    // The stalled holder's record went into the removed file (or its write failed): its open is
    // refused, and the lock stays process 200's.
    const refused = await first.then(() => undefined, (e: unknown) => e);
    if (land === "land") {
      assert.ok(refused instanceof SessionLockedError, String(refused));
      assert.equal(refused.pid, 200);
    } else assert.ok(refused instanceof FsIoError, String(refused));
    assert.equal((await lockRecord(fs, dir)).pid, 200, land);
    await assert.rejects(storeAs(fs, 300, alive).open(dir), SessionLockedError, land);
    await second.append([user("saved by 200")]);
    await second.close();
    const reader = await storeAs(fs, 300, alive).open(dir, { readOnly: true });
    assert.equal(reader.messages.at(-1)?.content, "saved by 200", land);
    await reader.close();
  }
});

test("a stalled holder whose write lands while a takeover is removing its empty lock waits for that takeover and is refused", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const stall = gate();
  const written = gate();
  const stalling = stallingOn(fs, lock, stall.wait, "land", written.open);
  const first = new SessionStore({ fs: stalling.fs, agentDir: AGENT, process: probe(100, alive) })
    .open(dir);
  while (!stalling.created()) await new Promise((resolve) => setTimeout(resolve, 5));
  // Process 200 read the lock empty for the last time; its remove comes only once process 100's
  // record has landed (and a moment later: a holder that did not wait would have read it back).
  let removing = true;
  const taker = hookedFs(fs, {
    before: async (method, args) => {
      if (method !== "remove" || args[0] !== lock || !removing) return;
      removing = false;
      stall.open();
      await written.wait;
      await new Promise((resolve) => setTimeout(resolve, 50));
    },
  });
  const second = await new SessionStore({ fs: taker, agentDir: AGENT, process: probe(200, alive) })
    .open(dir);
  const refused = await first.then(() => undefined, (e: unknown) => e);
  assert.ok(refused instanceof SessionLockedError, String(refused));
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  await second.close();
});

test("a second process gets SessionLockedError; read-only opens need no lock", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const writer = await storeAs(fs, 100, alive).open(dir);
  const other = storeAs(fs, 200, alive);
  const error = await other.open(dir).then(() => undefined, (e: unknown) => e);
  assert.ok(error instanceof SessionLockedError);
  assert.equal(error.pid, 100);
  assert.equal(error.host, HOST);
  const reader = await other.open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, writer.messages);
  await writer.commit([...writer.messages, user("more")]);
  await writer.close();
  const next = await other.open(dir);
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  await next.close();
});

test("in one process a second writer is SessionBusyError, with or without a probe", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const store = storeAs(fs, 100, alive);
  const writer = await store.open(dir);
  await assert.rejects(store.open(dir), SessionBusyError);
  await writer.close();
  const plain = new SessionStore({ fs, agentDir: AGENT });
  const unlocked = await plain.open(dir);
  await assert.rejects(fs.lstat(`${dir}/${WRITER_LOCK_FILE}`));
  await assert.rejects(plain.open(dir), SessionBusyError);
  await unlocked.close();
});

test("a stale lock of a dead process on this host is taken over", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await writeLock(fs, dir, {
    pid: 999,
    host: HOST,
    startedAt: "2020-01-01T00:00:00.000Z",
    token: "t",
  });
  const writer = await storeAs(fs, 200, alive).open(dir);
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  await writer.close();
  const names = (await fs.readDir(dir)).map((e) => e.name);
  assert.deepEqual(names, ["index.json", "messages.jsonl", "meta.json"]);
});

test("a lock of another host is respected even when its pid is unknown here", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await writeLock(fs, dir, { pid: 999, host: "elsewhere", startedAt: "x", token: "t" });
  await assert.rejects(storeAs(fs, 200, alive).open(dir), SessionLockedError);
});

test("a leftover lock with this process's pid but a foreign token is stale", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await writeLock(fs, dir, { pid: 200, host: HOST, startedAt: "x", token: "not-ours" });
  const writer = await storeAs(fs, 200, alive).open(dir);
  // Taken over: the record is this writer's now (its pid, a fresh token this copy holds, so
  // another open by the same pid finds it live), and close() removes it as its own.
  const record = await lockRecord(fs, dir);
  assert.equal(record.pid, 200);
  assert.equal(typeof record.token, "string");
  assert.notEqual(record.token, "not-ours");
  await assert.rejects(
    storeAs(fs, 200, alive).open(dir),
    (error: Error) => error instanceof SessionBusyError || error instanceof SessionLockedError,
  );
  await writer.close();
  await assert.rejects(fs.lstat(`${dir}/${WRITER_LOCK_FILE}`), NotFound);
});

test("an unparsable lock file is stale after a short grace period", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await writeLock(fs, dir, "");
  const writer = await storeAs(fs, 200, alive).open(dir);
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  await writer.close();
});

test("racing takeovers of one stale lock leave exactly one writer", async () => {
  const { fs, session } = await setup();
  const dir = session.getSessionPath();
  let seed = 7;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  for (let round = 0; round < 25; round++) {
    const alive = new Set([300, 400, 500]);
    await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: `stale${round}` });
    const contenders = [300, 400, 500].map((pid) =>
      new SessionStore({
        fs: view(fs, () => Math.floor(random() * 3)),
        agentDir: AGENT,
        process: probe(pid, alive),
      })
    );
    const results = await Promise.allSettled(contenders.map((store) => store.open(dir)));
    const winners = results.filter((r) => r.status === "fulfilled");
    assert.equal(winners.length, 1, `round ${round}: ${winners.length} writers`);
    for (const r of results) {
      if (r.status === "rejected") {
        assert.ok(r.reason instanceof SessionLockedError, String(r.reason));
      }
    }
    const holder = (await lockRecord(fs, dir)).pid;
    assert.ok([300, 400, 500].includes(holder as number));
    await (winners[0] as PromiseFulfilledResult<SessionManager>).value.close();
    const leftovers = (await fs.readDir(dir)).filter((e) => e.name.includes("lock"));
    assert.deepEqual(leftovers, [], `round ${round}`);
  }
});

test("a takeover marker left by a dead process does not block the lock forever", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "dead-beef" });
  await fs.writeFile(
    `${dir}/${WRITER_LOCK_FILE}.takeover-dead-beef`,
    encoder.encode(JSON.stringify({ pid: 998, host: HOST, startedAt: "x", token: "taker" })),
  );
  const writer = await storeAs(fs, 200, alive).open(dir);
  await writer.close();
  assert.deepEqual((await fs.readDir(dir)).filter((e) => e.name.includes("lock")), []);
});

test("create() takes the lock at its first write and close() releases it", async () => {
  const { fs, alive } = await setup();
  const store = storeAs(fs, 100, alive);
  const session = await store.create(CWD);
  await session.setPinned(true);
  await assert.rejects(fs.lstat(session.getSessionPath()));
  await session.commit([user("first")]);
  assert.equal((await lockRecord(fs, session.getSessionPath())).pid, 100);
  await assert.rejects(storeAs(fs, 200, alive).open(session.getSessionPath()), SessionLockedError);
  await session.close();
  await assert.rejects(fs.lstat(`${session.getSessionPath()}/${WRITER_LOCK_FILE}`));
});

test("a held lock does not upset listing, and compaction refuses a live writer", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const mine = storeAs(fs, 100, alive);
  const writer = await mine.open(dir);
  const replaced = [user("replaced")];
  await writer.commit(replaced);
  const other = storeAs(fs, 200, alive);
  for (const fast of [false, true]) {
    assert.deepEqual((await other.list(CWD, undefined, { fast })).map((s) => s.id), [session.id]);
  }
  await assert.rejects(other.compact(dir), SessionLockedError);
  await assert.rejects(mine.compact(dir), SessionBusyError);
  await writer.close();
  const result = await other.compact(dir);
  assert.equal(result.compacted, true);
  assert.deepEqual((await other.open(dir, { readOnly: true })).messages, replaced);
});

test("the collection lock is waited for, then refused; a stale one is taken over", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(COLLECTION, { recursive: true });
  const alive = new Set([100, 200]);
  const lock = `${COLLECTION}/${COLLECTION_LOCK_FILE}`;
  const holder = { pid: 100, host: HOST, startedAt: "x", token: "held" };
  await fs.writeFile(lock, encoder.encode(JSON.stringify(holder)));
  const context = (pid: number, waitMs: number): StoreContext => ({
    ...new SessionStore({ fs: view(fs), agentDir: AGENT }).context,
    probe: probe(pid, alive),
    collectionLockWaitMs: waitMs,
  });
  await assert.rejects(
    withCollectionLock(context(200, 40), COLLECTION, () => Promise.resolve()),
    SessionLockedError,
  );
  setTimeout(() => void fs.remove(lock), 30);
  let ran = false;
  await withCollectionLock(context(200, 2000), COLLECTION, () => {
    ran = true;
    return Promise.resolve();
  });
  assert.equal(ran, true);
  await fs.writeFile(lock, encoder.encode(JSON.stringify({ ...holder, pid: 999 })));
  await withCollectionLock(context(200, 0), COLLECTION, async () => {
    assert.equal(JSON.parse(decoder.decode(await fs.readFile(lock))).pid, 200);
  });
  await assert.rejects(fs.lstat(lock));
});

test("the collection lock serializes callers in one process instead of refusing them", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(COLLECTION, { recursive: true });
  const context = new SessionStore({ fs, agentDir: AGENT }).context;
  const order: string[] = [];
  const task = (name: string) => async () => {
    order.push(`${name} in`);
    await new Promise((resolve) => setTimeout(resolve, 5));
    order.push(`${name} out`);
  };
  await Promise.all([
    withCollectionLock(context, COLLECTION, task("a")),
    withCollectionLock(context, COLLECTION, task("b")),
  ]);
  assert.deepEqual(order, ["a in", "a out", "b in", "b out"]);
});

for (const probed of [false, true]) {
  test(
    `the collection lock serializes callers through two spellings of one collection (a symlink), ${
      probed ? "with" : "without"
    } a probe, in call order`,
    async () => {
      const fs = new MemoryFs();
      await fs.mkdir(COLLECTION, { recursive: true });
      await fs.mkdir("/links", { recursive: true });
      await fs.symlink(COLLECTION, "/links/collection");
      const options = probed ? { process: { pid: 100, host: HOST, isAlive: () => true } } : {};
      const context = new SessionStore({ fs, agentDir: AGENT, ...options }).context;
      const order: string[] = [];
      const task = (name: string) => async () => {
        order.push(`${name} in`);
        await new Promise((resolve) => setTimeout(resolve, 5));
        order.push(`${name} out`);
      };
      await Promise.all([
        withCollectionLock(context, COLLECTION, task("a")),
        withCollectionLock(context, "/links/collection", task("b")),
        withCollectionLock(context, COLLECTION, task("c")),
      ]);
      assert.deepEqual(order, ["a in", "a out", "b in", "b out", "c in", "c out"]);
    },
  );
}

test("archive.set through two spellings of one collection keeps both changes (no probe)", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir("/data/loop", { recursive: true });
  await fs.mkdir("/home", { recursive: true });
  await fs.symlink("/data/loop", "/home/link"); // e.g. ~/.loop linked to a dotfiles directory
  const real = new SessionStore({ fs, agentDir: "/data/loop", sessionDir: "/data/loop/chats" });
  const linked = new SessionStore({ fs, agentDir: "/home/link", sessionDir: "/home/link/chats" });
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const session = await real.create(CWD);
    await session.commit(conversation(1));
    ids.push(session.id);
    await session.close();
  }
  const [first, second] = ids as [string, string];
  await Promise.all([
    real.archive.set(undefined, [first], true),
    linked.archive.set(undefined, [second], true),
  ]);
  assert.deepEqual(
    [
      await real.archive.isArchived(undefined, first),
      await real.archive.isArchived(undefined, second),
    ],
    [true, true],
  );
});

test("cleanup() removes stale locks and markers and keeps live ones", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "dead" });
  await fs.writeFile(`${dir}/${WRITER_LOCK_FILE}.takeover-dead`, encoder.encode("{}"));
  await fs.writeFile(`${dir}/.meta.json.0badc0de1.tmp`, encoder.encode("partial"));
  const report = await storeAs(fs, 200, alive).cleanup(CWD);
  assert.deepEqual(
    report.removed.map((p) => p.slice(dir.length + 1)).sort(),
    [".meta.json.0badc0de1.tmp", WRITER_LOCK_FILE, `${WRITER_LOCK_FILE}.takeover-dead`].sort(),
  );
  const writer = await storeAs(fs, 100, alive).open(dir);
  await fs.writeFile(`${dir}/.index.json.0badc0de2.tmp`, encoder.encode("in flight"));
  await storeAs(fs, 200, alive).cleanup(CWD);
  assert.equal((await lockRecord(fs, dir)).pid, 100);
  assert.equal((await fs.lstat(`${dir}/.index.json.0badc0de2.tmp`)).kind, "file");
  await writer.close();
});

test("acquireWriterLock without a probe only registers in this process", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s", { recursive: true });
  const context = new SessionStore({ fs, agentDir: AGENT }).context;
  const held = await acquireWriterLock(context, "/s");
  await assert.rejects(acquireWriterLock(context, "/s"), SessionBusyError);
  assert.deepEqual(await fs.readDir("/s"), []);
  await held.release();
  await (await acquireWriterLock(context, "/s")).release();
});

test("a lock that failed before its file existed remembers no token; one whose file stayed does", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s", { recursive: true });
  const context = new SessionStore({ fs, agentDir: AGENT, process: probe(100, new Set([100])) })
    .context;
  // The directory refuses new files: nothing is created, so nothing is left behind, however
  // often a host retries.
  const before = abandonedTokenCount();
  fs.failAt(fs.operationCount + 1, { error: "EACCES", persistent: true, ops: ["open"] });
  for (let i = 0; i < 50; i++) await assert.rejects(acquireWriterLock(context, "/s"));
  fs.clearFaults();
  assert.equal(abandonedTokenCount(), before);
  // A lock file written whole, whose close and removal failed: its token is remembered, so the
  // file is stale to this process and the next acquisition takes it over.
  fs.failAt(fs.operationCount + 1, { persistent: true, ops: ["close", "remove"] });
  await assert.rejects(acquireWriterLock(context, "/s"), FsIoError);
  fs.clearFaults();
  assert.equal(abandonedTokenCount(), before + 1);
  const left = JSON.parse(decoder.decode(await fs.readFile(`/s/${WRITER_LOCK_FILE}`)));
  const held = await acquireWriterLock(context, "/s");
  const taken = JSON.parse(decoder.decode(await fs.readFile(`/s/${WRITER_LOCK_FILE}`)));
  assert.notEqual(taken.token, left.token);
  await held.release();
  assert.equal(abandonedTokenCount(), before, "the takeover removed the file and its token");
});

test("nodeProcessProbe reports this process alive and an exited one dead", () => {
  const node = nodeProcessProbe();
  assert.equal(node.pid, process.pid);
  assert.equal(node.host, hostname());
  assert.equal(node.isAlive(process.pid), true);
  assert.equal(node.isAlive(0), false);
  assert.equal(node.isAlive(-1), false);
  const child = spawnSync("node", ["-e", "process.stdout.write(String(process.pid))"]);
  const exited = Number(child.stdout.toString());
  assert.ok(Number.isSafeInteger(exited) && exited > 0);
  assert.equal(node.isAlive(exited), false);
});

test("nodeProcessProbe reports a pid no process can have (past 2^31 - 1) dead, and its lock is taken over and cleaned up", async () => {
  const node = nodeProcessProbe();
  for (const pid of [2 ** 31, 3_000_000_000, Number.MAX_SAFE_INTEGER]) {
    assert.equal(node.isAlive(pid), false, String(pid));
  }
  const base = await mkdtemp(join(tmpdir(), "loop-lock-pid-"));
  try {
    const fs = nodeFs();
    const cwd = join(base, "work");
    await fs.mkdir(cwd);
    const store = new SessionStore({ fs, agentDir: join(base, "agent"), process: node });
    const session = await store.create(cwd);
    await session.commit(conversation(2));
    await session.close();
    const dir = session.getSessionPath();
    const stale = { pid: 3_000_000_000, host: hostname(), startedAt: "x", token: "stale" };
    await writeLock(fs, dir, stale);
    const collection = dirname(dir);
    await fs.writeFile(
      join(collection, COLLECTION_LOCK_FILE),
      encoder.encode(JSON.stringify(stale)),
    );
    const report = await store.cleanup(cwd);
    // The stale collection lock is taken over by cleanup's own (and reported removed), then
    // released with it.
    assert.deepEqual(
      report.removed.map((path) => path.slice(collection.length + 1)),
      [COLLECTION_LOCK_FILE, `${session.id}/${WRITER_LOCK_FILE}`],
    );
    await assert.rejects(fs.lstat(join(collection, COLLECTION_LOCK_FILE)), NotFound);
    await writeLock(fs, dir, stale);
    const reopened = await store.open(dir); // the stale lock is taken over
    assert.equal((await lockRecord(fs, dir)).pid, process.pid);
    await reopened.close();
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("nodeProcessProbe reports a zombie (exited, not yet reaped) dead on Linux", {
  skip: process.platform !== "linux" && "no procfs process state outside Linux",
}, async () => {
  // `sleep 0.1` exits under a parent (`exec sleep 5`) that never reaps it: a zombie.
  const parent = spawn("bash", ["-c", "sleep 0.1 & echo $!; exec sleep 5"]);
  try {
    const zombie = await new Promise<number>((resolve) =>
      parent.stdout.once("data", (data) => resolve(Number(String(data).trim())))
    );
    const node = nodeProcessProbe();
    let state = "";
    for (let i = 0; i < 100 && state !== "Z"; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      const stat = readFileSync(`/proc/${zombie}/stat`, "latin1");
      state = stat.charAt(stat.lastIndexOf(")") + 2);
    }
    assert.equal(state, "Z", "the child became a zombie");
    assert.equal(node.isAlive(zombie), false);
    assert.equal(node.isAlive(parent.pid as number), true);
  } finally {
    parent.kill("SIGKILL");
  }
});

test("a crafted token in a stale lock never becomes a path", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "../../../escape" });
  const writer = await storeAs(fs, 200, alive).open(dir);
  await writer.close();
  assert.deepEqual((await fs.readDir(dir)).filter((e) => e.name.includes("lock")), []);
  await assert.rejects(fs.lstat(`${AGENT}/escape`));
  assert.deepEqual((await fs.readDir(AGENT)).map((e) => e.name), ["sessions"]);
});

test("two stores of one process, each given nodeFs(), refuse a second writer to each other", async () => {
  assert.equal(nodeFs(), nodeFs());
  const base = await mkdtemp(join(tmpdir(), "loop-two-stores-"));
  try {
    const cwd = join(base, "work");
    await nodeFs().mkdir(cwd, { recursive: true });
    const first = new SessionStore({ fs: nodeFs(), agentDir: join(base, "agent") });
    const second = new SessionStore({ fs: nodeFs(), agentDir: join(base, "agent") });
    const writer = await first.create(cwd);
    await writer.commit(conversation(1));
    await assert.rejects(second.open(writer.getSessionPath()), SessionBusyError);
    await writer.close();
    const next = await second.open(writer.getSessionPath());
    await next.close();
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("a store of nodeFs() locks across processes by default, with the adapter's own probe", async () => {
  const probeOfFs = nodeFs().processes;
  assert.equal(probeOfFs?.pid, process.pid);
  assert.equal(probeOfFs?.host, hostname());
  assert.equal(nodeFs().processes, probeOfFs);
  const base = await mkdtemp(join(tmpdir(), "loop-default-probe-"));
  try {
    const cwd = join(base, "work");
    await nodeFs().mkdir(cwd, { recursive: true });
    const agentDir = join(base, "agent");
    // No `process` option: the lock file is this process's.
    const writer = await new SessionStore({ fs: nodeFs(), agentDir }).create(cwd);
    await writer.commit(conversation(1));
    const dir = writer.getSessionPath();
    const record = await lockRecord(nodeFs(), dir);
    assert.equal(record.pid, process.pid);
    assert.equal(record.host, hostname());
    // Another process on this host (a probe of its own, over a view the in-process registrations
    // do not reach) is refused while this one runs.
    const other = new SessionStore({
      fs: view(nodeFs()),
      agentDir,
      process: probe(process.pid + 1_000_000, new Set([process.pid]), hostname()),
    });
    await assert.rejects(other.open(dir), SessionLockedError);
    await writer.close();
    await assert.rejects(nodeFs().lstat(join(dir, WRITER_LOCK_FILE)));
    await (await other.open(dir)).close();
    // `process: null` opts out: no lock file of its own.
    const alone = new SessionStore({ fs: nodeFs(), agentDir, process: null });
    assert.equal(alone.context.probe, undefined);
    const unlocked = await alone.open(dir);
    await assert.rejects(nodeFs().lstat(join(dir, WRITER_LOCK_FILE)));
    await unlocked.close();
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("a store without a probe respects another process's lock files as live", async () => {
  const { fs, session } = await setup();
  const dir = session.getSessionPath();
  // A lock whose holder a probe would find dead: without one nothing tells, so it holds.
  const dead = { pid: 999, host: HOST, startedAt: "2020-01-01T00:00:00.000Z", token: "t" };
  await writeLock(fs, dir, dead);
  const plain = new SessionStore({ fs: view(fs), agentDir: AGENT, collectionLockWaitMs: 30 });
  const refused = await plain.open(dir).then(
    () => assert.fail("opened for writing under a lock"),
    (error: unknown) => error,
  );
  assert.ok(refused instanceof SessionLockedError);
  assert.equal(refused.pid, 999);
  assert.match(refused.message, /no process probe/);
  await (await plain.open(dir, { readOnly: true })).close();
  // Structural changes are refused too, and cleanup leaves the lock where it is.
  await assert.rejects(plain.compact(dir), SessionLockedError);
  await assert.rejects(
    plain.archive.delete(CWD, [session.id], { archivedOnly: false }),
    SessionLockedError,
  );
  await plain.cleanup(CWD);
  assert.deepEqual(await lockRecord(fs, dir), dead);
  // A store with a probe takes the dead holder's lock over.
  const writer = await storeAs(fs, 200, new Set([200])).open(dir);
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  await writer.close();
  // A collection lock another process holds is waited for, then refused.
  await writeLock(fs, COLLECTION, dead);
  await fs.rename(`${COLLECTION}/${WRITER_LOCK_FILE}`, `${COLLECTION}/${COLLECTION_LOCK_FILE}`);
  await assert.rejects(plain.cleanup(CWD), SessionLockedError);
  await fs.remove(`${COLLECTION}/${COLLECTION_LOCK_FILE}`);
  const opened = await plain.open(dir);
  assert.deepEqual(await fs.readDir(dir).then((e) => e.map((x) => x.name).sort()), [
    "index.json",
    "messages.jsonl",
    "meta.json",
  ]);
  await opened.close();
});

test("cleanup() never removes a writer lock that another process took over after it looked", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "dead" });
  // Process 300 runs cleanup; just before it starts removing the stale lock, process 200 takes
  // the lock over and starts writing.
  let writer: SessionManager | undefined;
  const cleaner = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        const path = String(args[0]);
        if (writer === undefined && path.includes(`${WRITER_LOCK_FILE}.takeover-`)) {
          writer = await storeAs(fs, 200, alive).open(dir);
        }
        return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      };
    },
  });
  alive.add(300);
  const cleanup = new SessionStore({ fs: cleaner, agentDir: AGENT, process: probe(300, alive) });
  const report = await cleanup.cleanup(CWD);
  assert.ok(writer !== undefined);
  assert.equal(report.removed.some((p) => p.endsWith(`/${WRITER_LOCK_FILE}`)), false);
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  // So a third process is refused while 200 writes.
  await assert.rejects(storeAs(fs, 100, alive).open(dir), SessionLockedError);
  await writer.commit([...writer.messages, user("from 200")]);
  await writer.close();
});

test("an operation whose collection lock cannot be removed afterwards still succeeds; the lock is taken over", async () => {
  const { fs, alive, session } = await setup();
  const store = storeAs(fs, 200, alive);
  await store.archive.set(CWD, [session.id], true);
  // The removal of the collection lock after the delete fails once.
  const lock = `${COLLECTION}/${COLLECTION_LOCK_FILE}`;
  let failed = false;
  const flaky = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        if (prop === "remove" && args[0] === lock && !failed) {
          failed = true;
          throw new FsIoError("EIO", "remove", lock, "injected");
        }
        return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      };
    },
  });
  const deleting = new SessionStore({ fs: flaky, agentDir: AGENT, process: probe(200, alive) });
  await deleting.archive.delete(CWD, [session.id]);
  assert.equal(failed, true);
  assert.deepEqual(await storeAs(fs, 200, alive).list(CWD), []);
  // The leftover lock names this process and a token it no longer holds: its next operation
  // takes it over (another process sees a live holder until this one does so, or exits).
  await storeAs(fs, 200, alive).archive.set(CWD, [], true);
  await assert.rejects(fs.lstat(lock));
});

test("an open in the process that runs cleanup never ends with cleanup removing its lock", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "dead" });
  alive.add(300);
  // Process 300 cleans up; when its takeover has read the stale lock back, it opens the session.
  const opener = new SessionStore({ fs, agentDir: AGENT, process: probe(300, alive) });
  let marker = false;
  let opened: SessionManager | Error | undefined;
  const hooked = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        const path = String(args[0]);
        if (prop === "open" && path.includes(`${WRITER_LOCK_FILE}.takeover-`)) marker = true;
        const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        const read = prop === "readFile" || prop === "readFileNoFollow";
        if (read && path === lock && marker && opened === undefined) {
          opened = await opener.open(dir).catch((error: Error) => error);
        }
        return result;
      };
    },
  });
  await new SessionStore({ fs: hooked, agentDir: AGENT, process: probe(300, alive) }).cleanup(CWD);
  assert.ok(opened !== undefined);
  if (opened instanceof Error) {
    // Refused while cleanup held the takeover: safe, and the next open succeeds.
    assert.ok(opened instanceof SessionLockedError, String(opened));
    opened = await opener.open(dir);
  }
  // The writer holds a lock file another process respects.
  assert.equal((await lockRecord(fs, dir)).pid, 300);
  await assert.rejects(storeAs(fs, 100, alive).open(dir), SessionLockedError);
  await (opened as SessionManager).close();
});

test("cleanup locks a session only to remove its temp files, and a writer of its process waits for it", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await session.close();
  let pause: { reached: () => void; release: Promise<void> } | undefined;
  let listings = 0;
  const paused = hookedFs(fs, {
    before: async (method, args) => {
      // The second listing of the session directory is the one under cleanup's hold.
      if (method === "readDir" && args[0] === dir && pause !== undefined && ++listings === 2) {
        pause.reached();
        await pause.release;
      }
    },
  });
  const store = new SessionStore({ fs: paused, agentDir: AGENT, process: probe(200, alive) });
  // Nothing to remove: cleanup takes no lock, and an open meanwhile goes through.
  const [report, writer] = await Promise.all([store.cleanup(CWD), store.open(dir)]);
  assert.deepEqual(report.removed, []);
  await writer.close();
  // A temp file left by a crash: cleanup holds the lock while it removes it; an open of this
  // process started meanwhile waits for it, then opens.
  await fs.writeFile(`${dir}/.meta.json.0badc0de1.tmp`, encoder.encode("partial"));
  let release!: () => void;
  const reached = new Promise<void>((resolve) => {
    pause = { reached: resolve, release: new Promise<void>((done) => (release = done)) };
  });
  const cleaning = store.cleanup(CWD);
  await reached;
  assert.equal(
    JSON.parse(decoder.decode(await fs.readFile(`${dir}/${WRITER_LOCK_FILE}`))).pid,
    200,
  );
  const opening = store.open(dir);
  await new Promise((resolve) => setTimeout(resolve, 5));
  release();
  assert.deepEqual((await cleaning).removed, [`${dir}/.meta.json.0badc0de1.tmp`]);
  const opened = await opening;
  await opened.close();
});

test("cleanup removes its own hold of a session's lock even when the first removal fails", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await session.close();
  await fs.writeFile(`${dir}/.meta.json.0badc0de1.tmp`, encoder.encode("partial"));
  const probeFs = fs.clone();
  probeFs.resetCounter();
  await storeAs(probeFs, 300, new Set([...alive, 300])).cleanup(CWD);
  const removals = probeFs.operationLog.filter((r) =>
    r.op === "remove" && r.path === `${dir}/${WRITER_LOCK_FILE}`
  );
  assert.equal(removals.length, 1);
  alive.add(300);
  fs.resetCounter();
  fs.failAt(removals[0]!.number, { error: "EIO" });
  const report = await storeAs(fs, 300, alive).cleanup(CWD);
  fs.clearFaults();
  assert.deepEqual(report.removed, [`${dir}/.meta.json.0badc0de1.tmp`]);
  await assert.rejects(fs.lstat(`${dir}/${WRITER_LOCK_FILE}`));
  // Another live process can write the session at once.
  const writer = await storeAs(fs, 200, alive).open(dir);
  await writer.close();
});

test("a writer of the process waits for cleanup's hold also while cleanup is still taking it", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await session.close();
  await fs.writeFile(`${dir}/.meta.json.0badc0de1.tmp`, encoder.encode("partial"));
  let reached!: () => void;
  const atCreate = new Promise<void>((resolve) => (reached = resolve));
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let armed = true;
  const paused = hookedFs(fs, {
    before: async (method, args) => {
      // Cleanup pauses as it creates the lock file of its hold.
      if (armed && method === "open" && args[0] === `${dir}/${WRITER_LOCK_FILE}`) {
        armed = false;
        reached();
        await gate;
      }
    },
  });
  const store = new SessionStore({ fs: paused, agentDir: AGENT, process: probe(200, alive) });
  const cleaning = store.cleanup(CWD);
  await atCreate;
  const opening = store.open(dir);
  await new Promise((resolve) => setTimeout(resolve, 5));
  release();
  assert.deepEqual((await cleaning).removed, [`${dir}/.meta.json.0badc0de1.tmp`]);
  const writer = await opening;
  await writer.close();
});

test("a lock removal retried after a failure never removes the lock a writer of the process took meanwhile", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  await session.close();
  alive.add(300);
  const lockPath = `${dir}/${WRITER_LOCK_FILE}`;
  await fs.writeFile(`${dir}/.meta.json.0badc0de1.tmp`, encoder.encode("partial"));
  let reached!: () => void;
  const atHold = new Promise<void>((resolve) => (reached = resolve));
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let listings = 0;
  let removes = 0;
  const paused = hookedFs(fs, {
    before: async (method, args) => {
      if (method === "readDir" && args[0] === dir && ++listings === 2) {
        reached();
        await gate;
      }
      if (method === "remove" && args[0] === lockPath) {
        removes++;
        if (removes === 1) throw new FsIoError("EIO", "remove", lockPath, "EIO (injected)");
        if (removes === 2) await new Promise((resolve) => setTimeout(resolve, 30));
      }
    },
  });
  const store = new SessionStore({ fs: paused, agentDir: AGENT, process: probe(200, alive) });
  const cleaning = store.cleanup(CWD);
  await atHold;
  const opening = store.open(dir); // waits for the hold
  await new Promise((resolve) => setTimeout(resolve, 5));
  release();
  await cleaning;
  const writer = await opening;
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  await assert.rejects(storeAs(fs, 300, alive).open(dir), SessionLockedError);
  await writer.close();
});

test("a lock naming this process instance is live (another thread), an earlier instance's with this pid is stale", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  // This process (pid 300) started at tick 500; pid 200 now runs as the instance started at 90.
  const starts = new Map([[300, "500"], [200, "90"]]);
  const withStarts: ProcessProbe = {
    pid: 300,
    host: HOST,
    isAlive: (pid) => pid === 300 || alive.has(pid),
    processStart: (pid) => starts.get(pid),
  };
  const store = new SessionStore({ fs: view(fs), agentDir: AGENT, process: withStarts });
  const lock = (pid: number, processStart?: string) => ({
    pid,
    host: HOST,
    startedAt: "2026-01-01T00:00:00.000Z",
    token: "0123abcd-0000-4000-8000-000000000001",
    ...(processStart === undefined ? {} : { processStart }),
  });
  const cases: { lock: ReturnType<typeof lock>; live: boolean; why: string }[] = [
    { lock: lock(300, "500"), live: true, why: "this instance, a token another thread holds" },
    { lock: lock(300, "420"), live: false, why: "an earlier process that had this pid" },
    { lock: lock(300), live: false, why: "this pid without an identity (as before)" },
    { lock: lock(200, "90"), live: true, why: "another live process, the same instance" },
    { lock: lock(200, "70"), live: false, why: "another process now runs with that pid" },
    { lock: lock(200), live: true, why: "a live pid without an identity" },
  ];
  for (const { lock: record, live, why } of cases) {
    await writeLock(fs, dir, record);
    if (live) {
      await assert.rejects(store.open(dir), SessionLockedError, why);
      assert.deepEqual(await lockRecord(fs, dir), record, why);
    } else {
      const writer = await store.open(dir);
      const taken = await lockRecord(fs, dir);
      assert.equal(taken.pid, 300, why);
      assert.equal(taken.processStart, "500", why);
      await writer.close();
    }
    await fs.remove(`${dir}/${WRITER_LOCK_FILE}`).catch(() => undefined);
  }
});

for (const planted of ["a directory", "a dangling link", "a link to a live lock"] as const) {
  test(`a writer.lock that is ${planted} is refused by name, never followed or removed; cleanup goes on`, async () => {
    const { fs, alive, session } = await setup();
    const dir = session.getSessionPath();
    const lock = `${dir}/${WRITER_LOCK_FILE}`;
    const other = await storeAs(fs, 100, alive).create(CWD);
    await other.commit(conversation(1));
    await other.close();
    await fs.writeFile(`${other.getSessionPath()}/.meta.json.0badc0de3.tmp`, encoder.encode("x"));
    if (planted === "a directory") await fs.mkdir(lock);
    else if (planted === "a dangling link") await fs.symlink("/nowhere", lock);
    else {
      await writeLock(fs, "/", { pid: 200, host: HOST, startedAt: "x", token: "live-token" });
      await fs.symlink(`/${WRITER_LOCK_FILE}`, lock);
    }
    for (const port of [fs, withoutNoFollow(fs)]) {
      const store = new SessionStore({
        fs: view(port),
        agentDir: AGENT,
        process: probe(300, alive),
      });
      const refused = await store.open(dir).catch((error: unknown) => error);
      assert.ok(refused instanceof SessionFormatError, String(refused));
      assert.equal(refused.file, lock);
      const reader = await store.open(dir, { readOnly: true });
      await reader.close();
      // Cleanup of the collection goes on past it: the other session's temp file is removed.
      const report = await store.cleanup(CWD);
      assert.ok(!report.removed.includes(lock));
    }
    assert.equal((await fs.lstat(lock)).kind, planted === "a directory" ? "directory" : "symlink");
    assert.deepEqual(
      (await fs.readDir(other.getSessionPath())).map((e) => e.name).filter((n) =>
        n.endsWith(".tmp")
      ),
      [],
    );
  });
}

test("two contenders finding the same dead takeover marker: one writer, the other refused", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const marker = `${lock}.takeover-dead-beef`;
  // A writer (999) died holding the lock; a takeover (998) died between its marker and its end.
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "dead-beef" });
  await fs.writeFile(
    marker,
    encoder.encode(JSON.stringify({ pid: 998, host: HOST, startedAt: "x", token: "taker" })),
  );
  alive.add(300);
  alive.add(400);
  // The interleaving that let both through when a dead marker was removed by a plain read and
  // remove: C reaches the marker's removal, B removes it, creates its own marker and reads the
  // lock, then C removes B's marker, and each removes the lock the other took. A step the
  // takeover no longer makes is waited for briefly, then skipped.
  const step = (g: ReturnType<typeof gate>) =>
    Promise.race([g.wait, new Promise((resolve) => setTimeout(resolve, 200))]);
  const cAtMarker = gate(), bReadLock = gate(), cReadLock = gate(), bOpened = gate();
  let bRemovedMarker = false, cRemovedMarker = false;
  const isRead = (method: string) => method === "readFile" || method === "readFileNoFollow";
  const fsB = hookedFs(fs, {
    before: async (method, args) => {
      if (method === "remove" && args[0] === marker && !bRemovedMarker) {
        await step(cAtMarker);
        bRemovedMarker = true;
      }
      if (method === "remove" && args[0] === lock) await step(cReadLock);
    },
    after: (method, args) => {
      if (isRead(method) && args[0] === lock && bRemovedMarker) bReadLock.open();
    },
  });
  const fsC = hookedFs(fs, {
    before: async (method, args) => {
      if (method === "remove" && args[0] === marker && !cRemovedMarker) {
        cAtMarker.open();
        await step(bReadLock);
        cRemovedMarker = true;
      }
      if (method === "remove" && args[0] === lock) await step(bOpened);
    },
    after: (method, args) => {
      if (isRead(method) && args[0] === lock && cRemovedMarker) cReadLock.open();
    },
  });
  const b = new SessionStore({ fs: fsB, agentDir: AGENT, process: probe(300, alive) });
  const c = new SessionStore({ fs: fsC, agentDir: AGENT, process: probe(400, alive) });
  const results = await Promise.allSettled([
    b.open(dir).then((writer) => {
      bOpened.open();
      return writer;
    }),
    c.open(dir),
  ]);
  const writers = results.filter((r) => r.status === "fulfilled");
  assert.equal(writers.length, 1, JSON.stringify(results.map((r) => r.status)));
  const refused = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
  assert.ok(refused.reason instanceof SessionLockedError, String(refused.reason));
  const writer = (writers[0] as PromiseFulfilledResult<SessionManager>).value;
  assert.ok([300, 400].includes((await lockRecord(fs, dir)).pid as number));
  await writer.commit([...writer.messages, user("only writer")]);
  await writer.close();
});

/**
 * The probe of process `pid` on a host where the probe knows process instances (what
 * `nodeProcessProbe()` and `denoProcessProbe()` give on Linux): every live pid has a start.
 */
function instanceProbe(pid: number, alive: Set<number>): ProcessProbe {
  return {
    pid,
    host: HOST,
    isAlive: (other) => alive.has(other),
    processStart: (other) => (alive.has(other) ? `start-of-${other}` : undefined),
  };
}

/** `fs` whose `remove` of `path` fails while `faults.removes` is positive (each use counts). */
function failingRemovals(fs: FileSystem, path: string, faults: { removes: number }): FileSystem {
  return hookedFs(fs, {
    before: (method, args) => {
      if (method === "remove" && args[0] === path && faults.removes > 0) {
        faults.removes--;
        throw new FsIoError("EIO", "remove", path, "EIO (injected)");
      }
    },
  });
}

test("a collection lock this process failed to remove is taken over by its next operation, also with process instances; other processes wait for it meanwhile", async () => {
  const { fs, alive, session } = await setup();
  alive.add(300);
  const lock = `${COLLECTION}/${COLLECTION_LOCK_FILE}`;
  const faults = { removes: 0 };
  const store = new SessionStore({
    fs: failingRemovals(fs, lock, faults),
    agentDir: AGENT,
    process: instanceProbe(300, alive),
    collectionLockWaitMs: 50,
  });
  // Both removals of the lock after the archive fail (release() tries twice): the operation
  // stands, its lock file stays.
  faults.removes = 2;
  await store.archive.set(CWD, [session.id], true);
  assert.equal(faults.removes, 0);
  const left = JSON.parse(decoder.decode(await fs.readFile(lock)));
  assert.equal(left.pid, 300);
  assert.equal(left.processStart, "start-of-300");
  // Another process cannot tell it from the lock of a live holder: it waits, then is refused.
  const other = new SessionStore({
    fs: view(fs),
    agentDir: AGENT,
    process: instanceProbe(200, alive),
    collectionLockWaitMs: 50,
  });
  await assert.rejects(other.archive.set(CWD, [session.id], false), SessionLockedError);
  // This process no longer holds its token: its next operation takes the lock over.
  await store.archive.set(CWD, [session.id], false);
  await assert.rejects(fs.lstat(lock));
  assert.deepEqual(await other.archive.list(CWD), []);
  await other.archive.set(CWD, [session.id], true);
  assert.deepEqual(await store.archive.list(CWD), [session.id]);
});

/**
 * A session whose writer (process 300, on a probe that knows process instances) failed to remove
 * its lock file at close: the file is left, naming that process.
 */
async function leftWriterLock() {
  const { fs, alive, session } = await setup();
  alive.add(300);
  const dir = session.getSessionPath();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const faults = { removes: 0 };
  const store = new SessionStore({
    fs: failingRemovals(fs, lock, faults),
    agentDir: AGENT,
    process: instanceProbe(300, alive),
  });
  const writer = await store.open(dir);
  faults.removes = 2;
  await assert.rejects(writer.close(), (error) => error instanceof FsIoError);
  assert.equal((await lockRecord(fs, dir)).pid, 300);
  return { fs, alive, dir, lock, store };
}

test("a writer lock whose removal failed at close is taken over by the next writer of this process, also with process instances", async () => {
  const { fs, alive, dir, lock, store } = await leftWriterLock();
  // Another process sees a live holder: this process may still write there, for all it knows.
  const other = new SessionStore({
    fs: view(fs),
    agentDir: AGENT,
    process: instanceProbe(200, alive),
  });
  await assert.rejects(other.open(dir), SessionLockedError);
  // This process knows it gave that token up: its next writer takes the lock over.
  const again = await store.open(dir);
  await again.commit([...again.messages, user("after the fault")]);
  await again.close();
  await assert.rejects(fs.lstat(lock));
  const theirs = await other.open(dir);
  assert.equal(theirs.messages.length, again.messages.length);
  await theirs.close();
});

test("cleanup() removes a writer lock whose removal failed at close in this process, also with process instances", async () => {
  const { fs, alive, dir, lock, store } = await leftWriterLock();
  const report = await store.cleanup(CWD);
  assert.deepEqual(report.removed, [lock]);
  await assert.rejects(fs.lstat(lock));
  // Another process writes the session at once.
  const other = new SessionStore({
    fs: view(fs),
    agentDir: AGENT,
    process: instanceProbe(200, alive),
  });
  await (await other.open(dir)).close();
});

test("a writer lock file left by a failed acquisition is taken over by the next writer of this process, also with process instances", async () => {
  const { fs, alive, session } = await setup();
  alive.add(300);
  const dir = session.getSessionPath();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  // The lock file is created and written, then its close fails and so does its removal.
  let failClose = true;
  const faults = { removes: 0 };
  const faulty = new Proxy(failingRemovals(fs, lock, faults), {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== "open" || typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        const handle = await (value as (...a: unknown[]) => Promise<object>).apply(target, args);
        if (args[0] !== lock || !failClose) return handle;
        failClose = false;
        faults.removes = 1;
        return new Proxy(handle, {
          get(h, p) {
            const member = Reflect.get(h, p, h);
            if (p === "close") {
              return async () => {
                await (member as () => Promise<void>).call(h);
                throw new FsIoError("EIO", "close", lock, "EIO (injected)");
              };
            }
            return typeof member === "function" ? member.bind(h) : member;
          },
        });
      };
    },
  });
  const store = new SessionStore({
    fs: faulty,
    agentDir: AGENT,
    process: instanceProbe(300, alive),
  });
  await assert.rejects(store.open(dir), (error) => error instanceof FsIoError);
  assert.equal(faults.removes, 0);
  assert.equal((await lockRecord(fs, dir)).pid, 300);
  const writer = await store.open(dir);
  await writer.close();
  await assert.rejects(fs.lstat(lock));
});

test("a writer in another pid namespace of the same host is never taken over as a dead pid", async () => {
  const { fs, session } = await setup();
  const dir = session.getSessionPath();
  /** A process of pid namespace `ns` that sees only its own namespace's pids as alive. */
  const inNamespace = (pid: number, ns: string) =>
    new SessionStore({
      fs: view(fs),
      agentDir: AGENT,
      process: { pid, host: HOST, pidNamespace: ns, isAlive: (other) => other === pid },
    });
  // Pid 1 of a sandbox holds the session; pid 1 does not exist (or is init) out here.
  const sandboxed = await inNamespace(1, "pid:[4026532001]").open(dir);
  assert.equal((await lockRecord(fs, dir)).pidNamespace, "pid:[4026532001]");
  await assert.rejects(inNamespace(300, "pid:[4026531836]").open(dir), SessionLockedError);
  // A lock of this very namespace whose pid is dead is stale, as ever.
  await sandboxed.close();
  await writeLock(fs, dir, {
    pid: 7,
    host: HOST,
    startedAt: "2026-01-01T00:00:00.000Z",
    token: "t",
    pidNamespace: "pid:[4026531836]",
  });
  const taken = await inNamespace(300, "pid:[4026531836]").open(dir);
  await taken.close();
});

test("one session reached through two spellings of its data directory has one writer in this process", async () => {
  for (const probed of [true, false]) {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    await fs.mkdir(AGENT, { recursive: true });
    await fs.symlink(AGENT, "/home/user/loop-link");
    const options = (agentDir: string) => ({
      fs,
      agentDir,
      process: probed ? probe(100, new Set([100])) : null,
    });
    const direct = new SessionStore(options(AGENT));
    const linked = new SessionStore(options("/home/user/loop-link"));
    const session = await direct.create(CWD);
    await session.commit(conversation(1));
    const through = session.getSessionPath().replace(AGENT, "/home/user/loop-link");
    await assert.rejects(linked.open(through), SessionBusyError, `probe: ${probed}`);
    await session.close();
    const second = await linked.open(through);
    await second.close();
  }
});

test("a writer that comes while another process takes over a stale lock waits for it, and is not refused", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  // A lock left by pid 999, which is dead.
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "0dead" });
  const removing = gate();
  const slowRemoval = hookedFs(view(fs), {
    async before(method, args) {
      if (method === "remove" && String(args[0]).endsWith(`/${WRITER_LOCK_FILE}`)) {
        removing.open();
        await new Promise((resolve) => setTimeout(resolve, 50)); // a slow disk's unlink
      }
    },
  });
  alive.add(300);
  const cleaner = new SessionStore({
    fs: slowRemoval,
    agentDir: AGENT,
    process: probe(300, alive),
  });
  const cleanup = cleaner.cleanup(CWD);
  await removing.wait;
  // Meanwhile another process opens the session: the stale lock is being taken over, not held.
  const writer = await storeAs(fs, 200, alive).open(dir);
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  assert.deepEqual((await cleanup).removed, [`${dir}/${WRITER_LOCK_FILE}`]);
  await writer.close();
});

test("the wait for another process's collection lock is measured on the real clock, whatever the store's now", async () => {
  const { fs, session } = await setup();
  const collection = dirname(session.getSessionPath());
  const holder = { pid: 999, host: HOST, startedAt: "2020-01-01T00:00:00.000Z", token: "held" };
  await fs.writeFile(
    `${collection}/${COLLECTION_LOCK_FILE}`,
    new TextEncoder().encode(JSON.stringify(holder)),
  );
  // Deterministic timestamps: a clock that never moves.
  const fixed = new SessionStore({
    fs: view(fs),
    agentDir: AGENT,
    now: () => Date.parse("2026-01-01T00:00:00.000Z"),
    collectionLockWaitMs: 50,
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("still waiting after 5 s")), 5_000);
  });
  try {
    await assert.rejects(
      Promise.race([fixed.archive.set(CWD, [session.id], true), hung]),
      SessionLockedError,
    );
  } finally {
    clearTimeout(timer);
  }
});

/**
 * A store over a fresh `MemoryFs` with `probe`, holding one saved and closed session, and the
 * path of the lock `which` names: the collection's or that session's writer lock.
 */
async function storeWithLock(
  probe: ProcessProbe,
  collectionLockWaitMs: number,
  which: "collection" | "writer",
): Promise<{ fs: MemoryFs; store: SessionStore; session: SessionManager; lock: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT, process: probe, collectionLockWaitMs });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const lock = which === "collection"
    ? `${COLLECTION}/${COLLECTION_LOCK_FILE}`
    : `${session.getSessionPath()}/${WRITER_LOCK_FILE}`;
  return { fs, store, session, lock };
}

test("another live process's takeover of an unparsable stale lock is waited for a bounded time, then reported as its holder", async () => {
  // An empty lock (stale once its grace period is over) that process 7, alive, is taking over:
  // its marker holds the takeover. Each judgment of the empty lock waits out the grace period,
  // so a wait counted in such judgments ran for minutes whatever the caller's limit.
  const probe: ProcessProbe = { pid: 2, host: HOST, isAlive: (pid) => pid === 2 || pid === 7 };
  const taker = { pid: 7, host: HOST, startedAt: "2026-01-01T00:00:00.000Z", token: "0123" };
  for (const which of ["collection", "writer"] as const) {
    const { fs, store, session, lock } = await storeWithLock(probe, 100, which);
    await fs.writeFile(lock, new Uint8Array(0));
    await fs.writeFile(`${lock}.takeover-other`, encoder.encode(JSON.stringify(taker)));
    const started = Date.now();
    const error =
      await (which === "collection" ? store.cleanup(CWD) : store.open(session.getSessionPath()))
        .then(() => undefined, (error: unknown) => error);
    // A bound far above the grace period (1 s) and the waits (0.1 s, 0.5 s): it took minutes.
    assert.ok(Date.now() - started < 20_000, `${which}: ${Date.now() - started} ms`);
    assert.ok(error instanceof SessionLockedError, `${which}: ${String(error)}`);
    assert.equal(error.pid, 7, which);
    // Nothing of the other takeover was touched.
    assert.equal((await fs.readFile(lock)).length, 0, which);
    assert.deepEqual(
      JSON.parse(decoder.decode(await fs.readFile(`${lock}.takeover-other`))),
      taker,
    );
  }
});

test("a takeover whose process dies while it is waited for is taken over, not reported as a holder", async () => {
  for (const which of ["collection", "writer"] as const) {
    const alive = new Set([2, 7]);
    const probe: ProcessProbe = { pid: 2, host: HOST, isAlive: (pid) => alive.has(pid) };
    // A wait long enough that a refusal at its end could not pass for the takeover.
    const { fs, store, session, lock } = await storeWithLock(probe, 2_000, which);
    // A stale lock of a dead process, and process 7's marker of its takeover; 7 dies meanwhile.
    const stale = { pid: 999, host: HOST, startedAt: "2026-01-01T00:00:00.000Z", token: "aaaa" };
    await fs.writeFile(lock, encoder.encode(JSON.stringify(stale)));
    const marker = { pid: 7, host: HOST, startedAt: "2026-01-01T00:00:01.000Z", token: "bbbb" };
    await fs.writeFile(`${lock}.takeover-aaaa`, encoder.encode(JSON.stringify(marker)));
    setTimeout(() => alive.delete(7), 50);
    if (which === "collection") {
      const report = await store.cleanup(CWD);
      assert.ok(report.removed.some((path) => path.endsWith(COLLECTION_LOCK_FILE)), which);
    } else {
      const writer = await store.open(session.getSessionPath());
      assert.equal((await lockRecord(fs, session.getSessionPath())).pid, 2);
      await writer.close();
    }
    await assert.rejects(fs.lstat(`${lock}.takeover-aaaa`), NotFound, which);
  }
});

test("close() leaves a writer.lock that was replaced by another process's in place", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const writer = await storeAs(fs, 100, alive).open(dir);
  // The lock file is removed by hand, and another process's writer takes the lock meanwhile.
  await fs.remove(`${dir}/${WRITER_LOCK_FILE}`);
  const other = await storeAs(fs, 200, alive).open(dir);
  await writer.close();
  // Still process 200's: a third process is refused while it writes.
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  await assert.rejects(storeAs(fs, 300, alive).open(dir), SessionLockedError);
  await other.close();
  await assert.rejects(fs.lstat(`${dir}/${WRITER_LOCK_FILE}`), NotFound);
});

test("a takeover leaves a marker that another process put in place of its own", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const marker = `${lock}.takeover-dead-beef`;
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "dead-beef" });
  const theirs = { pid: 300, host: HOST, startedAt: "y", token: "0123-4567" };
  alive.add(300);
  // As the stale lock is removed, process 300 (judging this takeover's marker dead, say) has put
  // its own marker in place: it is that process's to remove, not this takeover's.
  const swapping = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== "remove") return typeof value === "function" ? value.bind(target) : value;
      return async (path: string, options?: { recursive?: boolean }) => {
        if (path === lock) {
          await target.writeFile(marker, encoder.encode(JSON.stringify(theirs)), { mode: 0o600 });
        }
        return await target.remove(path, options);
      };
    },
  });
  const writer = await storeAs(swapping, 200, alive).open(dir);
  assert.equal((await lockRecord(fs, dir)).pid, 200);
  assert.deepEqual(JSON.parse(decoder.decode(await fs.readFile(marker))), theirs);
  await writer.close();
});

test("a writer waiting for another process's takeover is refused by the lock's new holder, not by the takeover's marker", async () => {
  const { fs, alive, session } = await setup();
  const dir = session.getSessionPath();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  const marker = `${lock}.takeover-dead-beef`;
  await writeLock(fs, dir, { pid: 999, host: HOST, startedAt: "x", token: "dead-beef" });
  alive.add(300).add(400);
  // Process 300 is taking the stale lock over (its marker, live), and process 400 takes the lock
  // meanwhile: once the lock no longer holds the stale token, that takeover is not waited for.
  await fs.writeFile(
    marker,
    encoder.encode(JSON.stringify({ pid: 300, host: HOST, startedAt: "y", token: "0123-4567" })),
    { mode: 0o600 },
  );
  let swapped = false;
  const swapping = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (typeof prop !== "string" || !prop.startsWith("read")) return value.bind(target);
      return async (...args: unknown[]) => {
        if (args[0] === marker && !swapped) {
          swapped = true;
          const record = { pid: 400, host: HOST, startedAt: "z", token: "89ab-cdef" };
          await target.writeFile(lock, encoder.encode(JSON.stringify(record)), { mode: 0o600 });
        }
        return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      };
    },
  });
  // Refused by process 400, the lock's holder (waiting out process 300's takeover would end in a
  // refusal naming process 300).
  await assert.rejects(
    storeAs(swapping, 200, alive).open(dir),
    (error: unknown) => error instanceof SessionLockedError && error.pid === 400,
  );
  assert.ok(swapped);
});
