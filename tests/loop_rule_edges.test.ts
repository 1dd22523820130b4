// Edges of the Loop store's rules, each at its exact boundary: a crash tail of one byte is cut
// before the next save appends; the latest page of a history that starts before its first user
// message starts at 0, and `before = 0` there is an empty page; markRead(0) of an emptied history
// is false; a fallback title after a long run of whitespace keeps its words; a prefix index whose
// byte length is not its messages' end, or a round at the range's end, is never trusted; the log's
// creation is made durable before meta.json names it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import { fallbackTitle } from "../src/loop/records/mod.ts";
import { pageBounds } from "../src/loop/session_manager.ts";
import { verifySession } from "../src/loop/verify.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { assistant, conversation, rewriteIndex, user } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const NOW = Date.parse("2026-03-01T00:00:00.000Z");

async function setup() {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => NOW });
  return { fs, store };
}

test("a one-byte crash tail is cut before the next save appends", async () => {
  const { fs, store } = await setup();
  const s = await store.create(CWD);
  const before = [user("q"), assistant("a")];
  await s.commit(before);
  const dir = s.getSessionPath();
  await s.close();
  // A crash tail of one byte (an interrupted append that landed one byte).
  const log = `${dir}/messages.jsonl`;
  const h = await fs.open(log, { append: true });
  await h.write(new TextEncoder().encode("{"));
  await h.close();
  const w = await store.open(dir);
  const after = [...before, user("q2"), assistant("a2")];
  await w.commit(after);
  await w.close();
  const r = await store.open(dir, { readOnly: true });
  assert.deepEqual(r.messages, after);
});

test("the latest page of a history whose first message is not a user message starts at 0", async () => {
  assert.deepEqual(pageBounds((k) => [1, 3, 5][k] as number, 3, 7, undefined), [0, 7]);
  const { store } = await setup();
  const s = await store.create(CWD);
  const history = [
    assistant("intro"),
    user("q1"),
    assistant("a1"),
    user("q2"),
    assistant("a2"),
    user("q3"),
    assistant("a3"),
  ];
  await s.commit(history);
  const page = await s.readHistory();
  assert.equal(page.start, 0);
  assert.equal(page.messages.length, 7);
  await s.close();
});

test("before=0 on a history whose first message is not a user message is an empty page", async () => {
  assert.deepEqual(pageBounds((k) => [1, 3][k] as number, 2, 4, 0), [0, 0]);
  const { store } = await setup();
  const s = await store.create(CWD);
  await s.commit([assistant("intro"), user("q1"), assistant("a1")]);
  const page = await s.readHistory(0);
  assert.deepEqual([page.start, page.end, page.messages.length], [0, 0, 0]);
  await s.close();
});

test("markRead(0) on a saved, emptied history returns false and keeps unread", async () => {
  const { store } = await setup();
  const s = await store.create(CWD);
  await s.commit([user("q"), assistant("a")]);
  await s.commit([]);
  assert.equal(s.getHeader().unread, true);
  assert.equal(await s.markRead(0), false);
  assert.equal(s.getHeader().unread, true);
  await s.close();
});

test("the fallback title of a long message that starts with a long whitespace run", () => {
  const text = " ".repeat(4090) + "hello world foo bar";
  const title = fallbackTitle([{ role: "user", content: text, timestamp: 0 } as never]);
  assert.equal(title?.text, "hello world foo bar");
});

test("a prefix index.json whose byte length is not its messages' end is rebuilt by a writer's page read", async () => {
  const { fs, store } = await setup();
  const s = await store.create(CWD);
  await s.commit(conversation(3));
  const dir = s.getSessionPath();
  await s.close();
  const text = new TextDecoder().decode(await fs.readFile(`${dir}/messages.jsonl`));
  const ends: number[] = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "\n") ends.push(new TextEncoder().encode(text.slice(0, i + 1)).length);
  }
  // A prefix of 2 messages (one round), but the byte length of 3.
  await rewriteIndex(fs, dir, (index) => ({
    ...index,
    messageCount: 2,
    bytes: ends[2] as number,
    rounds: index.rounds.slice(0, 1),
  }));
  const w = await store.open(dir);
  await w.readHistory();
  // While the writer is still open (or after it stopped without closing), readers see index.json.
  const report = await verifySession(fs, dir, { sha256: portableSha256 });
  assert.deepEqual(report.findings, []);
  await w.close();
});

for (const bad of ["a round at the range's end", "two rounds at one byte offset"] as const) {
  test(`compaction never copies the rounds of an index.json with ${bad}`, async () => {
    const { fs, store } = await setup();
    const s = await store.create(CWD);
    const first = conversation(2);
    await s.commit(first);
    await s.commit([user("edited"), ...first.slice(1)]); // a new generation: start > 0
    const dir = s.getSessionPath();
    await s.close();
    await rewriteIndex(fs, dir, (index) => ({
      ...index,
      rounds: [index.rounds[0]!, {
        messageIndex: index.rounds[1]!.messageIndex,
        byteOffset: bad === "a round at the range's end"
          ? index.bytes
          : index.rounds[0]!.byteOffset,
      }],
    }));
    const result = await store.compact(dir);
    assert.equal(result.compacted, true);
    const report = await verifySession(fs, dir, { sha256: portableSha256 });
    assert.deepEqual(report.findings, []);
  });
}

test("the log's creation is made durable (its directory synced) before meta.json is renamed in", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  fs.syncAll();
  const calls: string[] = [];
  const view = hookedFs(fs, {
    before: (method, args) => {
      if (method === "open" && String(args[0]).endsWith("/messages.jsonl")) {
        calls.push(
          `open ${(args[1] as { createNew?: boolean })?.createNew === true ? "create" : ""}`,
        );
      } else if (method === "syncDir") calls.push(`syncDir ${args[0]}`);
      else if (method === "rename" && String(args[1]).endsWith("/meta.json")) {
        calls.push("rename meta");
      }
    },
  });
  const store = new SessionStore({ fs: view, agentDir: AGENT });
  const s = await store.create(CWD);
  await s.commit([user("q"), assistant("a")]);
  const dir = s.getSessionPath();
  await s.close();
  const created = calls.indexOf("open create");
  const renamed = calls.indexOf("rename meta");
  assert.ok(created >= 0 && renamed > created, calls.join("\n"));
  assert.ok(calls.slice(created, renamed).includes(`syncDir ${dir}`), calls.join("\n"));
});
