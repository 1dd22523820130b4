// A save that fails stays pending as it was serialized: flush() writes exactly that, whatever the
// host does to its message objects meanwhile (it may finish the last saved message in place).
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { streamedAssistant, toolResult, user } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

async function rig(): Promise<{ memory: MemoryFs; store: SessionStore }> {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  return { memory, store: new SessionStore({ fs: memory, agentDir: AGENT, process: null }) };
}

async function savedOn(store: SessionStore, session: SessionManager): Promise<Message[]> {
  const other = await store.open(session.getSessionPath(), { readOnly: true });
  const messages = other.messages;
  await other.close();
  return messages;
}

test("flush() retries a failed save as it was serialized, after the host finished the last saved message in place", async () => {
  const { memory, store } = await rig();
  const session = await store.create(CWD);
  const u0 = user("q0");
  const a0 = streamedAssistant("thinking");
  await session.commit([u0, a0]);
  const saved = structuredClone([u0, a0]);
  memory.resetCounter();
  memory.failAt(1, { ops: ["rename"] });
  await assert.rejects(session.commit([u0, a0]), FsIoError);
  assert.equal(session.hasPendingSave, true);
  memory.clearFaults();
  // The host streams a tool call into the message it saved last (allowed: it is the last one).
  a0.content.push({ type: "toolCall", id: "c1", name: "read", arguments: { path: "a" } });
  a0.stopReason = "toolUse";
  // The retry writes what the failed save serialized: it is not stuck on the unanswered call.
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(await savedOn(store, session), saved);
  // The finished message is saved by the next commit(), which compares the last saved message
  // with its saved line.
  const answer = toolResult("c1", "read");
  await session.commit([u0, a0, answer]);
  assert.deepEqual(await savedOn(store, session), structuredClone([u0, a0, answer]));
});

test("flush() of a failed append-only save writes the serialized tail, not an earlier message changed in place", async () => {
  const { memory, store } = await rig();
  const session = await store.create(CWD);
  const u0 = user("q0");
  const a0 = streamedAssistant("thinking");
  await session.commit([u0, a0]);
  const u1 = user("q1");
  const serialized = structuredClone([u0, a0, u1]);
  memory.resetCounter();
  memory.failAt(1, { ops: ["write"] });
  await assert.rejects(session.commit([u0, a0, u1]), FsIoError);
  assert.equal(session.hasPendingSave, true);
  memory.clearFaults();
  (a0.content[0] as { text: string }).text = "finished";
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(await savedOn(store, session), serialized);
});

test("flush() of a failed append() is not stuck on a saved message finished in place", async () => {
  const { memory, store } = await rig();
  const session = await store.create(CWD);
  const u0 = user("q0");
  const a0 = streamedAssistant("thinking");
  await session.commit([u0, a0]);
  const u1 = user("q1");
  memory.resetCounter();
  memory.failAt(1, { ops: ["rename"] });
  await assert.rejects(session.append([u1]), FsIoError);
  memory.clearFaults();
  a0.content.push({ type: "toolCall", id: "c1", name: "read", arguments: { path: "a" } });
  a0.stopReason = "toolUse";
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(
    await savedOn(store, session),
    structuredClone([u0, streamedAssistant("thinking"), u1]),
  );
});

test("a failed save whose meta.json landed is adopted; flush() then writes no other history", async () => {
  const { memory, store } = await rig();
  const session = await store.create(CWD);
  const u0 = user("q0");
  const a0 = streamedAssistant("thinking");
  await session.commit([u0, a0]);
  const u1 = user("q1");
  const a1 = streamedAssistant("answer");
  const serialized = structuredClone([u0, a0, u1, a1]);
  // The rename lands, the directory fsync after it fails: the outcome is unknown to the save.
  memory.resetCounter();
  memory.failAt(1, { ops: ["syncDir"] });
  const failed = await session.commit([u0, a0, u1, a1]).then(() => undefined, (e) => e);
  if (failed === undefined) return; // this durability publishes without a directory fsync
  assert.equal(session.hasPendingSave, true);
  memory.clearFaults();
  a0.content.push({ type: "toolCall", id: "c1", name: "read", arguments: { path: "a" } });
  a0.stopReason = "toolUse";
  a1.content.push({ type: "toolCall", id: "c2", name: "read", arguments: { path: "b" } });
  a1.stopReason = "toolUse";
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(await savedOn(store, session), serialized);
});

test("flush() writes what the failed save serialized, not what the host changed in the pending messages it was handed", async () => {
  for (const kind of ["replace", "append"] as const) {
    const { memory, store } = await rig();
    const session = await store.create(CWD);
    await session.commit([user("first")]);
    memory.resetCounter();
    memory.failAt(1, { persistent: true, ops: ["rename"] });
    const save = kind === "replace"
      ? session.commit([user("first, edited"), user("second")])
      : session.append([user("second")]);
    await assert.rejects(save, FsIoError);
    memory.clearFaults();
    assert.equal(session.hasPendingSave, true, kind);
    // The pending snapshot's objects, through the getter and through a page.
    const held = session.messages;
    const page = await session.readHistory();
    (held[held.length - 1] as { content: string }).content = "changed through messages";
    (page.messages[0] as { content: string }).content = "changed through a page";
    await session.flush();
    await session.close();
    const expected = kind === "replace" ? ["first, edited", "second"] : ["first", "second"];
    assert.deepEqual((await savedOn(store, session)).map((m) => m.content), expected, kind);
  }
});
