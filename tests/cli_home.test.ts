// Where the CLI's default data directory (`~/.loop`) is: HOME when it is set and not empty, else
// the adapter's home directory (the account's); a relative HOME, or none at all, is a usage error
// (exit 2) that changes nothing, never a store read or written relative to the current directory.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionStore } from "../src/loop/store.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import { conversation } from "./_fixtures.ts";

/**
 * Lists every session with HOME as given (undefined: unset) on `fs` (without its `homeDir()` with
 * `homeless`); returns the outcome.
 */
async function listWith(fs: MemoryFs, home: string | undefined, homeless = false) {
  const { io, out } = memoryIo(fs, "/work", Date.now());
  let err = "";
  const port: FileSystem = homeless
    ? new Proxy(fs, {
      get: (target, prop) => {
        if (prop === "homeDir") return undefined;
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    })
    : fs;
  const code = await runCli(["sessions", "list", "--all-workspaces", "--json"], {
    ...io,
    fs: port,
    env: (name) => (name === "HOME" ? home : undefined),
    err: (text) => {
      err += text;
    },
  });
  return { code, out: out(), err };
}

async function storeAt(fs: MemoryFs, agentDir: string): Promise<string> {
  await fs.mkdir("/work", { recursive: true });
  const session = await new SessionStore({ fs, agentDir }).create("/work");
  await session.commit(conversation(1));
  await session.close();
  return session.id;
}

test("HOME names the data directory; unset or empty, the adapter's home directory does", async () => {
  const fs = new MemoryFs({ home: "/home/ada" });
  const atAda = await storeAt(fs, "/home/ada/.loop");
  const atBob = await storeAt(fs, "/home/bob/.loop");
  const ids = (run: { out: string }) =>
    JSON.parse(run.out).sessions.map((session: { id: string }) => session.id);
  for (const home of [undefined, ""]) {
    const run = await listWith(fs, home);
    assert.equal(run.code, 0, run.err);
    assert.deepEqual(ids(run), [atAda], String(home));
  }
  const bob = await listWith(fs, "/home/bob");
  assert.equal(bob.code, 0, bob.err);
  assert.deepEqual(ids(bob), [atBob]);
});

test("a relative HOME, or no home directory at all, is a usage error that reads nothing", async () => {
  const fs = new MemoryFs({ home: "/home/ada" });
  await storeAt(fs, "/home/ada/.loop");
  await storeAt(fs, "/work/rel/.loop");
  const relative = await listWith(fs, "rel");
  assert.equal(relative.code, 2);
  assert.equal(relative.out, "");
  assert.match(relative.err, /HOME is not an absolute path \("rel"\)/);
  const none = await listWith(fs, undefined, true);
  assert.equal(none.code, 2);
  assert.match(none.err, /cannot find the home directory/);
});
