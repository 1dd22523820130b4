// What a process knows to be durable of a session (entries it synced) is forgotten when the
// session's writer closes: a host that saves thousands of sessions, deleted later by another
// process, holds nothing for them. The next writer makes the entries durable again at its first
// save, so a save still never rests on an entry a power loss can take away.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import { knownDurableCount } from "../src/port/durable.ts";
import { conversation, user } from "./_fixtures.ts";

const CWD = "/work/project";

test("closing writers forgets their sessions' durable entries: the count does not grow per session", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: "/home/user/.loop" });
  const counts: number[] = [];
  for (let i = 0; i < 20; i++) {
    const session = await store.create(CWD);
    await session.commit(conversation(2));
    await session.readHistory();
    assert.ok(knownDurableCount(fs) > (counts[0] ?? 0), "an open writer keeps what it synced");
    await session.close();
    counts.push(knownDurableCount(fs));
    // Deleted by another process: nothing of it is kept here.
    await fs.remove(session.getSessionPath(), { recursive: true });
  }
  assert.deepEqual(counts, counts.map(() => counts[0]));
});

test("a save by the next writer after a close is durable: a crash right after it keeps it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: "/home/user/.loop" });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const dir = session.getSessionPath();
  const reopened = await store.open(dir);
  fs.resetCounter();
  await reopened.append([user("one more")]);
  await reopened.close();
  const synced = fs.operationLog.filter((op) => op.op === "syncDir").map((op) => op.path);
  assert.ok(synced.includes(dir), JSON.stringify(synced));
  const recovered = fs.crash({ seed: 1 });
  const check = await new SessionStore({ fs: recovered, agentDir: "/home/user/.loop" }).open(dir, {
    readOnly: true,
  });
  assert.equal(check.messages.length, 3);
  await check.close();
});
