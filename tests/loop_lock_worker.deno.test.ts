// A worker thread of the process that holds a session's writer lock is refused, on the real
// filesystem with the Deno adapter's probe: the lock names this process instance
// (`processStart`), so another copy of the library in the same process does not take it over.
import assert from "node:assert/strict";
import { SessionStore } from "../src/loop/store.ts";
import { denoFs, denoProcessProbe } from "../adapters/deno.ts";
import { user } from "./_fixtures.ts";

Deno.test({
  name: "a worker thread cannot take the writer lock its process's main thread holds",
  ignore: Deno.build.os !== "linux",
  async fn() {
    const base = await Deno.makeTempDir({ prefix: "loop-lock-worker-" });
    try {
      const cwd = `${base}/work`;
      await Deno.mkdir(cwd, { recursive: true });
      const agentDir = `${base}/agent`;
      const store = new SessionStore({ fs: denoFs(), agentDir, process: denoProcessProbe() });
      const session = await store.create(cwd);
      await session.commit([user("main")]);
      const worker = new Worker(new URL("./_lock_worker.ts", import.meta.url).href, {
        type: "module",
      });
      try {
        const reply = await new Promise<string>((resolve) => {
          worker.onmessage = (event) => resolve(String(event.data));
          worker.postMessage({ agentDir, path: session.getSessionPath() });
        });
        assert.equal(reply, "SessionLockedError");
      } finally {
        worker.terminate();
      }
      await session.commit([...session.messages, user("main again")]);
      await session.close();
      const reader = await store.open(session.getSessionPath(), { readOnly: true });
      assert.deepEqual(reader.messages.map((m) => m.content), ["main", "main again"]);
      await reader.close();
    } finally {
      await Deno.remove(base, { recursive: true });
    }
  },
});
