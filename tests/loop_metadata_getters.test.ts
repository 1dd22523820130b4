// The metadata getters return copies of the committed state, or of a pending save's once a save
// failed (seed 000: "getCompactions() and getSystemPromptCheckpoints() return cloned committed or
// pending state"); what flush() then writes is what they returned, after a reopen too.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { conversation } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const CWD = "/work/app";
const AGENT = "/home/user/.loop";

/** A store whose next meta.json rename fails once `failNextPublish()` is called. */
async function rig(): Promise<{ store: SessionStore; failNextPublish: () => void }> {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  let armed = false;
  const fs = hookedFs(memory, {
    before: (method, args) => {
      if (armed && method === "rename" && String(args[1]).endsWith("/meta.json")) {
        armed = false;
        throw new Error("injected: meta.json publish failed");
      }
    },
  });
  return { store: new SessionStore({ fs, agentDir: AGENT }), failNextPublish: () => armed = true };
}

/** Every getter's result, as one value. */
function metadata(session: SessionManager): unknown {
  return {
    compactions: session.getCompactions(),
    checkpoints: session.getSystemPromptCheckpoints(),
    timings: session.getPromptTimings(),
    contexts: session.getRuntimeContexts(),
  };
}

/** Metadata anchored in `history` (its second user message), summarized as `label`. */
function metadataFor(history: Message[], label: string) {
  const second = history.findIndex((m, i) => i > 0 && m.role === "user");
  const compaction = {
    id: `a1111111-2222-3333-4444-${label === "first" ? "55555555555b" : "66666666666c"}`,
    firstKeptMessageIndex: second,
    historyMessageCount: second + 1,
    summary: `${label} summary`,
    timestamp: 1,
    provider: "p",
    model: "m",
    usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2 },
  };
  return {
    contexts: [{ userTurn: 0, content: `${label} context`, timestamp: 1 }],
    timings: [{
      userMessageIndex: second,
      startedAt: label === "first" ? 1 : 3,
      finishedAt: label === "first" ? 2 : 4,
    }],
    context: {
      compactions: [compaction],
      systemPromptCheckpoints: [{ messageCount: 1, timestamp: 1, sections: { a: label } }],
    },
  };
}

test("the metadata getters return copies of the committed state", async () => {
  const { store } = await rig();
  const session = await store.create(CWD);
  const history = conversation(3);
  const given = metadataFor(history, "first");
  await session.commit(history, given.contexts, given.timings, given.context as never);
  const expected = {
    compactions: given.context.compactions,
    checkpoints: given.context.systemPromptCheckpoints,
    timings: given.timings,
    contexts: given.contexts,
  };
  assert.deepEqual(metadata(session), expected);
  // Changing what a getter returned (the records' types are read-only; plain JavaScript callers
  // are not held to them) changes nothing the session holds.
  const compactions = session.getCompactions();
  (compactions[0] as { summary: string }).summary = "changed by the caller";
  compactions.push(compactions[0]!);
  (session.getSystemPromptCheckpoints()[0]!.sections as Record<string, string>).a = "changed";
  (session.getPromptTimings()[0] as { startedAt: number }).startedAt = 99;
  session.getPromptTimings().pop();
  (session.getRuntimeContexts()[0] as { content: string }).content = "changed";
  assert.deepEqual(metadata(session), expected);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(metadata(reopened), expected);
  await reopened.close();
});

for (const omitted of [true, false]) {
  test(
    `after a failed save the metadata getters return the pending save's, which flush() writes (${
      omitted ? "checkpoints and timings omitted: kept" : "every kind replaced"
    })`,
    async () => {
      const { store, failNextPublish } = await rig();
      const session = await store.create(CWD);
      const history = conversation(3);
      const first = metadataFor(history, "first");
      await session.commit(history, first.contexts, first.timings, first.context as never);
      const longer = [...history, ...conversation(1, "n")];
      const second = metadataFor(longer, "second");
      failNextPublish();
      await assert.rejects(
        omitted
          ? session.commit(longer, second.contexts, undefined, {
            compactions: second.context.compactions,
          } as never)
          : session.commit(longer, second.contexts, second.timings, second.context as never),
        /injected/,
      );
      assert.equal(session.hasPendingSave, true);
      const pending = {
        compactions: second.context.compactions, // replaced by the failed save
        checkpoints: (omitted ? first : second).context.systemPromptCheckpoints,
        timings: (omitted ? first : second).timings,
        contexts: second.contexts,
      };
      assert.deepEqual(metadata(session), pending);
      (session.getCompactions()[0] as { summary: string }).summary = "changed by the caller";
      (session.getSystemPromptCheckpoints()[0]!.sections as Record<string, string>).a = "changed";
      (session.getPromptTimings()[0] as { startedAt: number }).startedAt = 99;
      (session.getRuntimeContexts()[0] as { content: string }).content = "changed";
      assert.deepEqual(metadata(session), pending);
      await session.flush();
      assert.equal(session.hasPendingSave, false);
      assert.deepEqual(metadata(session), pending);
      await session.close();
      const reopened = await store.open(session.getSessionPath(), { readOnly: true });
      assert.deepEqual(metadata(reopened), pending);
      assert.equal(reopened.messages.length, longer.length);
      await reopened.close();
    },
  );
}
