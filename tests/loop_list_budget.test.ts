// A full listing reads whole, at once, only sessions whose logs fit its byte budget together
// (`ListOptions.maxBytesAtOnce`): a collection of sessions of hundreds of megabytes each is then
// read one or a few at a time, so the memory held stays bounded; a session larger than the
// budget is read alone. `Budget` is the primitive.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { wrappedHandles } from "./_hooks.ts";
import { Budget } from "../src/port/limit.ts";
import { InvalidArgumentError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/app";
const AGENT = "/home/user/.loop";

test("Budget gives units in call order, and a task larger than the budget runs alone", async () => {
  const budget = new Budget(10);
  const log: string[] = [];
  const a = await budget.take(6);
  const b = await budget.take(4);
  // Full: the next takers wait, in call order, even one that would fit before another.
  const big = budget.take(50).then((give) => (log.push("big"), give));
  const small = budget.take(1).then((give) => (log.push("small"), give));
  await new Promise((resolve) => setTimeout(resolve, 5));
  assert.deepEqual(log, []);
  a();
  a(); // Giving back twice gives back once.
  await new Promise((resolve) => setTimeout(resolve, 5));
  assert.deepEqual(log, [], "the big task waits for the whole budget");
  b();
  const giveBig = await big;
  await new Promise((resolve) => setTimeout(resolve, 5));
  assert.deepEqual(log, ["big"], "the small one waits behind the big one");
  giveBig();
  (await small)();
  assert.deepEqual(log, ["big", "small"]);
  // All given back: the whole budget is free again.
  (await budget.take(10))();
});

/**
 * `fs` whose opens of a message log are slowed (so that reads overlap when they may) and counted
 * while their handle is open: `most` is the largest number open at once.
 */
function countingLogs(fs: MemoryFs): { fs: FileSystem; most: () => number } {
  let open = 0;
  let most = 0;
  const wrapped = wrappedHandles(fs, async (handle, path) => {
    if (!path.endsWith("/messages.jsonl")) return handle;
    open++;
    most = Math.max(most, open);
    await new Promise((resolve) => setTimeout(resolve, 5));
    return new Proxy(handle, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (prop === "close") {
          return async () => {
            open--;
            return await target.close();
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  });
  return { fs: wrapped, most: () => most };
}

/** A MemoryFs holding six saved sessions of `CWD`; `then` runs on each session's directory. */
async function sixSessions(then?: (memory: MemoryFs, dir: string) => Promise<void>) {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  const writer = new SessionStore({ fs: memory, agentDir: AGENT });
  for (let i = 0; i < 6; i++) {
    const session = await writer.create(CWD);
    await session.commit(conversation(4, `s${i}`));
    await session.close();
    await then?.(memory, session.getSessionPath());
  }
  return memory;
}

test("a full listing reads at once only the sessions its byte budget holds", async () => {
  const memory = await sixSessions();
  const listed = async (options: { maxBytesAtOnce?: number }) => {
    const { fs, most } = countingLogs(memory);
    const store = new SessionStore({ fs, agentDir: AGENT });
    const sessions = await store.list(CWD, undefined, options);
    return { count: sessions.length, most: most() };
  };
  // The default budget holds these small sessions four at a time (the concurrency).
  const free = await listed({});
  assert.equal(free.count, 6);
  assert.ok(free.most > 1, `${free.most} at once`);
  // A budget smaller than any one log: each is read alone, and every session is still listed.
  const alone = await listed({ maxBytesAtOnce: 1 });
  assert.deepEqual(alone, { count: 6, most: 1 });
});

test("sessions read from the copy recovery keeps are read within the budget too", async () => {
  // As a compaction stopped between its renames leaves it: <id>/ without meta.json, the
  // session in .staging-<id>-<hex>/previous.
  const memory = await sixSessions(async (fs, dir) => {
    const slash = dir.lastIndexOf("/");
    const staging = `${dir.slice(0, slash)}/.staging-${dir.slice(slash + 1)}-deadbeef`;
    await fs.mkdir(staging);
    await fs.rename(dir, `${staging}/previous`);
    await fs.mkdir(dir);
  });
  const { fs, most } = countingLogs(memory);
  const store = new SessionStore({ fs, agentDir: AGENT });
  const result = await store.listDetailed(CWD, undefined, { maxBytesAtOnce: 1 });
  assert.deepEqual(result.failures.map((failure) => String(failure.error)), []);
  assert.equal(result.sessions.length, 6);
  assert.equal(most(), 1, `${most()} logs open at once`);
});

test("maxBytesAtOnce must be a positive integer", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  for (const bad of [0, -1, 1.5, Number.NaN, "1"]) {
    await assert.rejects(
      store.list(CWD, undefined, { maxBytesAtOnce: bad as number }),
      InvalidArgumentError,
    );
  }
});
