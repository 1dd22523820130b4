// A user's own adapter proves itself with the published conformance suite, like the built-in ones.
import { test } from "node:test";
import { mkdir, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { testFileSystem } from "../testing.ts";
import { MemoryFs } from "../adapters/memory.ts";
import { nodeFs } from "../adapters/node.ts";
import { instrumentedFs, newMetrics } from "../examples/custom_adapter.ts";
import { SessionStore } from "../src/loop/store.ts";
import { SessionLockedError } from "../src/loop/errors.ts";
import { NotFound } from "../src/port/errors.ts";
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

test("an adapter whose lstat throws NotFound instead of rejecting still creates, saves and opens", async () => {
  const memory = new MemoryFs();
  await memory.mkdir("/work/project", { recursive: true });
  const fs = new Proxy(memory, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (property !== "lstat") return typeof value === "function" ? value.bind(target) : value;
      // A missing entry of an existing directory is answered at once, by a throw.
      return (path: string) => {
        const tree = target.snapshotTree("/");
        const parent = path.slice(0, path.lastIndexOf("/"));
        const parentIsDir = parent === "" || (tree[parent.slice(1)] ?? "").startsWith("dir");
        if (parentIsDir && !Object.hasOwn(tree, path.slice(1))) throw new NotFound("lstat", path);
        return target.lstat(path);
      };
    },
  });
  const store = new SessionStore({ fs, agentDir: "/home/user/.loop" });
  const session = await store.create("/work/project");
  await session.commit([user("first")]);
  await session.commit([user("first"), user("second")]);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.messages.map((message) => message.content), ["first", "second"]);
});

test("the instrumented adapter keeps the wrapped adapter's lock probe and no-follow calls", async () => {
  const root = await mkdtemp(join(tmpdir(), "loop-custom-lock-"));
  try {
    const inner = nodeFs();
    const metrics = newMetrics();
    const wrapped = instrumentedFs(inner, metrics);
    assert.equal(wrapped.processes, inner.processes);
    assert.equal(typeof wrapped.readFileNoFollow, "function");
    assert.equal(typeof wrapped.openNoFollow, "function");
    assert.equal(typeof wrapped.openAppendNoFollow, "function");
    await mkdir(join(root, "work"));
    const options = { agentDir: join(root, "agent"), sessionDir: join(root, "sessions") };
    const writer = await new SessionStore({ fs: wrapped, ...options }).create(join(root, "work"));
    await writer.commit([user("first")]);
    // The writer holds a lock file, so another store over another wrapper is refused.
    await stat(join(writer.getSessionPath(), "writer.lock"));
    const other = new SessionStore({ fs: instrumentedFs(inner, newMetrics()), ...options });
    await assert.rejects(other.open(writer.getSessionPath()), SessionLockedError);
    await writer.close();
    // A fast listing reads through the no-follow calls, counted like the others.
    const listed = await new SessionStore({ fs: wrapped, ...options }).list(
      undefined,
      options.sessionDir,
      { fast: true },
    );
    assert.equal(listed.length, 1);
    assert.ok((metrics.calls["readFileNoFollow"] ?? 0) >= 1);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});
