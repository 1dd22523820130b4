// A user's own adapter proves itself with the published conformance suite, like the built-in ones.
import { test } from "node:test";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { testFileSystem } from "../testing.ts";
import { MemoryFs } from "../adapters/memory.ts";
import { nodeFs } from "../adapters/node.ts";
import { instrumentedFs, newMetrics } from "../examples/custom_adapter.ts";
import { SessionStore } from "../src/loop/store.ts";
import { user } from "./_fixtures.ts";

let n = 0;
testFileSystem({
  name: "instrumentedFs(memory)",
  test,
  setup: async () => {
    const fs = new MemoryFs();
    const root = `/custom-${n++}`;
    await fs.mkdir(root);
    return { fs: instrumentedFs(fs, newMetrics()), root, cleanup: async () => {} };
  },
});

testFileSystem({
  name: "instrumentedFs(node)",
  test,
  setup: async () => {
    const root = await mkdtemp(join(tmpdir(), "loop-custom-"));
    return {
      fs: instrumentedFs(nodeFs(), newMetrics()),
      root,
      cleanup: () => rm(root, { recursive: true, force: true }),
    };
  },
});

test("a commit through the instrumented adapter fsyncs the log, meta.json and their directory", async () => {
  const metrics = newMetrics();
  const memory = new MemoryFs();
  await memory.mkdir("/w", { recursive: true });
  const store = new SessionStore({ fs: instrumentedFs(memory, metrics), agentDir: "/a" });
  const session = await store.create("/w");
  await session.commit([user("one")]);
  const before = { ...metrics, calls: { ...metrics.calls } };
  await session.commit([user("one"), user("two")]);
  // The second commit: log append + fsync, meta.json temp write + fsync + rename + dir fsync.
  assert.equal(metrics.syncs - before.syncs >= 3, true);
  assert.equal((metrics.calls["rename"] ?? 0) - (before.calls["rename"] ?? 0) >= 1, true);
});

test("an adapter whose open throws instead of rejecting fails a commit with a rejected promise", async () => {
  const memory = new MemoryFs();
  await memory.mkdir("/work/project", { recursive: true });
  let refuse = false;
  const fs = new Proxy(memory, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (property !== "open") return typeof value === "function" ? value.bind(target) : value;
      return (path: string, options?: object) => {
        if (refuse && path.endsWith(".tmp")) throw new Error(`refused: ${path}`);
        return target.open(path, options);
      };
    },
  });
  const store = new SessionStore({ fs, agentDir: "/home/user/.loop" });
  const session = await store.create("/work/project");
  await session.commit([user("first")]);
  refuse = true;
  let committing: Promise<void> | undefined;
  assert.doesNotThrow(() => {
    committing = session.commit([user("first"), user("second")]);
  });
  await assert.rejects(committing as Promise<void>, /refused/);
  assert.equal(session.hasPendingSave, true);
  refuse = false;
  await session.flush();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.messages.map((message) => message.content), ["first", "second"]);
});
