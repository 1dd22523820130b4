// Real processes: a Node child holds a session's writer lock while committing in a loop and is
// killed with SIGKILL; the parent is refused while it lives, then takes the stale lock over and
// finds a resolved-or-later history every time.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { nodeFs, nodeProcessProbe, nodeSha256 } from "../adapters/node.ts";
import { SessionLockedError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { Message } from "../src/loop/records/mod.ts";

const ROOT = new URL("../", import.meta.url);

const HOLDER = `
const { SessionStore } = await import(${JSON.stringify(new URL("src/loop/store.ts", ROOT).href)});
const adapter = await import(${JSON.stringify(new URL("adapters/node.ts", ROOT).href)});
const [agentDir, dir] = process.argv.slice(2);
const store = new SessionStore({
  fs: adapter.nodeFs(),
  agentDir,
  sha256: adapter.nodeSha256,
  process: adapter.nodeProcessProbe(),
});
const session = await store.open(dir);
let messages = session.messages;
process.stdout.write("locked\\n");
for (let i = 0; ; i++) {
  messages = [
    ...messages,
    { role: "user", content: "question " + i, timestamp: i },
    {
      role: "assistant",
      content: [{ type: "text", text: "answer " + i }],
      api: "synthetic-api",
      provider: "synthetic",
      model: "model-1",
      usage: {},
      stopReason: "stop",
      timestamp: i,
    },
  ];
  await session.commit(messages);
  process.stdout.write("committed " + messages.length + "\\n");
}
`;

function waitFor(child: ChildProcess, predicate: (text: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    const timer = setTimeout(() => reject(new Error(`child timed out: ${text}`)), 30_000);
    child.stdout?.on("data", (chunk: Uint8Array) => {
      text += new TextDecoder().decode(chunk);
      if (predicate(text)) {
        clearTimeout(timer);
        resolve(text);
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      if (!predicate(text)) reject(new Error(`child exited with ${code} before it was ready`));
    });
  });
}

/** Resolves when the child has exited (listen before killing it: runtimes differ in timing). */
function exitOf(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => child.on("exit", () => resolve()));
}

test("a writer killed with SIGKILL leaves a stale lock that the next writer takes over", async () => {
  const base = await mkdtemp(join(tmpdir(), "loop-lock-"));
  try {
    const cwd = join(base, "work");
    const agentDir = join(base, "agent");
    await nodeFs().mkdir(cwd, { recursive: true });
    const script = join(base, "holder.mts");
    await writeFile(script, HOLDER);
    const store = new SessionStore({
      fs: nodeFs(),
      agentDir,
      sha256: nodeSha256,
      process: nodeProcessProbe(),
    });
    const session = await store.create(cwd);
    await session.commit([{ role: "user", content: "start", timestamp: 0 } as Message]);
    await session.close();
    const dir = session.getSessionPath();
    for (let round = 0; round < 3; round++) {
      const child = spawn("node", ["--import", "tsx", script, agentDir, dir], {
        cwd: new URL(".", ROOT).pathname,
        stdio: ["ignore", "pipe", "inherit"],
      });
      const exit = exitOf(child);
      let seen = "";
      child.stdout?.on("data", (chunk: Uint8Array) => {
        seen += new TextDecoder().decode(chunk);
      });
      await waitFor(child, (text) => text.includes("committed"));
      const refused = await store.open(dir).then(() => undefined, (e: unknown) => e);
      assert.ok(refused instanceof SessionLockedError, String(refused));
      assert.equal(refused.pid, child.pid);
      await new Promise((resolve) => setTimeout(resolve, 20 + round * 40));
      child.kill("SIGKILL");
      await exit;
      const resolved = Math.max(
        0,
        ...[...seen.matchAll(/committed (\d+)/g)].map((m) => Number(m[1])),
      );
      const writer = await store.open(dir);
      assert.ok(
        writer.messages.length >= resolved,
        `round ${round}: ${writer.messages.length} messages, ${resolved} resolved`,
      );
      assert.equal(writer.messages.length % 2, 1, `round ${round}: a torn round`);
      await writer.close();
    }
    assert.equal(process.pid > 0, true);
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});
