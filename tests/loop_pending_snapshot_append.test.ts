// append() reads its message objects when commit() does: at the call when the write queue is
// idle (the caller may change them at once), when its turn comes when it is queued behind a call.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { streamedAssistant, user } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

async function rig(): Promise<{ memory: MemoryFs; store: SessionStore }> {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  return { memory, store: new SessionStore({ fs: memory, agentDir: AGENT, process: null }) };
}

/** Adds an unanswered tool call to `message` in place. */
function addToolCall(message: { content: unknown[]; stopReason: string }): void {
  message.content.push({ type: "toolCall", id: "c1", name: "read", arguments: { path: "a" } });
  message.stopReason = "toolUse";
}

async function savedOn(store: SessionStore, session: SessionManager): Promise<Message[]> {
  const other = await store.open(session.getSessionPath(), { readOnly: true });
  const messages = other.messages;
  await other.close();
  return messages;
}

type Save = "commit" | "append";

/** Saves `added` after `history` (the saved history) with `how`. */
function save(session: SessionManager, how: Save, history: Message[], added: Message[]) {
  return how === "commit" ? session.commit([...history, ...added]) : session.append(added);
}

for (const how of ["commit", "append"] as const) {
  test(`${how}() on an idle session validates and serializes its messages at the call`, async () => {
    const { store } = await rig();
    const session = await store.create(CWD);
    const u0 = user("q0");
    await session.commit([u0]);
    const a0 = streamedAssistant("thinking");
    const saving = save(session, how, [u0], [a0]);
    const serialized = structuredClone([u0, a0]);
    addToolCall(a0); // the caller reuses its object at once
    await saving;
    assert.deepEqual(await savedOn(store, session), serialized);
  });

  test(`${how}() on an idle session writes the message as it was at the call, not a later valid edit`, async () => {
    const { store } = await rig();
    const session = await store.create(CWD);
    const u0 = user("q0");
    await session.commit([u0]);
    const a0 = streamedAssistant("thinking");
    const saving = save(session, how, [u0], [a0]);
    const serialized = structuredClone([u0, a0]);
    (a0.content[0] as { text: string }).text = "edited";
    await saving;
    assert.deepEqual(await savedOn(store, session), serialized);
  });

  test(`${how}() on an unsaved session reads its messages at the call`, async () => {
    const { store } = await rig();
    const session = await store.create(CWD);
    const u0 = user("q0");
    const a0 = streamedAssistant("thinking");
    const saving = how === "commit" ? session.commit([u0, a0]) : session.append([u0, a0]);
    const serialized = structuredClone([u0, a0]);
    addToolCall(a0);
    await saving;
    assert.deepEqual(await savedOn(store, session), serialized);
  });

  test(`${how}() on an idle session refuses an invalid message at the call and leaves no temp file`, async () => {
    const { memory, store } = await rig();
    const session = await store.create(CWD);
    const u0 = user("q0");
    await session.commit([u0]);
    const a0 = streamedAssistant("thinking");
    addToolCall(a0);
    const saving = save(session, how, [u0], [a0]);
    a0.content.pop(); // too late: the save was validated at the call
    a0.stopReason = "stop";
    await assert.rejects(saving, (error: Error) => error.name === "ToolPairingError");
    assert.deepEqual(
      await memory.readDir(session.getSessionPath()).then((entries) =>
        entries.map((entry) => entry.name).filter((name) => name !== "index.json").sort()
      ),
      ["messages.jsonl", "meta.json"],
    );
    assert.deepEqual(await savedOn(store, session), structuredClone([u0]));
  });

  test(`${how}() queued behind another call reads its messages when its turn comes`, async () => {
    const { store } = await rig();
    const session = await store.create(CWD);
    const u0 = user("q0");
    await session.commit([u0]);
    const pinning = session.setPinned(true); // in flight: the save below is queued behind it
    const a0 = streamedAssistant("thinking");
    const saving = save(session, how, [u0], [a0]);
    (a0.content[0] as { text: string }).text = "edited before its turn";
    await Promise.all([pinning, saving]);
    assert.deepEqual(await savedOn(store, session), structuredClone([u0, a0]));
  });
}

test("append() of something that is not an array on an idle session rejects with the format error", async () => {
  const { store } = await rig();
  const session = await store.create(CWD);
  await session.commit([user("q0")]);
  await assert.rejects(session.append("bad" as unknown as Message[]), SessionFormatError);
  assert.equal(session.hasPendingSave, false);
});
