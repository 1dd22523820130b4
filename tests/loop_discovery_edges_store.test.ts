// Where a store looks for sessions: its options (agent and collection directories), the working
// directory of a new session, and the session paths of opens and maintenance calls are checked
// before anything is written; a session path that is a link or a file is refused, naming it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { InvalidArgumentError, SessionCwdError, SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore, type SessionStoreOptions } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const GLOBAL = "/data/chats";

async function setup(): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  return fs;
}

function refusal(argument: string, message: RegExp): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof InvalidArgumentError, String(error));
    assert.equal(error.argument, argument);
    assert.match(error.message, message);
    return true;
  };
}

test("store options that are no object, or name directories that are no absolute paths, are refused", async () => {
  const fs = await setup();
  const cases: [unknown, string, RegExp][] = [
    [null, "options", /options must be an object, got null/],
    ["/home/user/.loop", "options", /options must be an object/],
    [{ fs, agentDir: 42 }, "agentDir", /agentDir must be a path, got 42/],
    [{ fs, sessionDir: ["/data"] }, "sessionDir", /sessionDir must be a path/],
    [{ fs, agentDir: "relative/.loop" }, "agentDir", /absolute agent directory is required/],
    [{ fs, sessionDir: "data/chats" }, "sessionDir", /sessionDir must be absolute: 'data\/chats'/],
  ];
  for (const [options, argument, message] of cases) {
    assert.throws(
      () => new SessionStore(options as SessionStoreOptions),
      refusal(argument, message),
    );
  }
  // An adapter that knows no home directory, and no agentDir: none can be determined.
  const homeless = new Proxy(fs, {
    get(target, prop) {
      if (prop === "homeDir") return undefined;
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  }) as FileSystem;
  assert.throws(
    () => new SessionStore({ fs: homeless }),
    refusal("agentDir", /got undefined\); pass agentDir/),
  );
  assert.deepEqual(await fs.readDir("/"), [{ name: "work", kind: "directory" }]);
});

test("a new session's working directory must be an absolute path to an existing directory", async () => {
  const fs = await setup();
  await fs.writeFile(`${CWD}/notes.txt`, new TextEncoder().encode("a file"));
  const store = new SessionStore({ fs, agentDir: AGENT });
  const before = fs.snapshotTree("/");
  await assert.rejects(store.create("work/project"), refusal("cwd", /must be an absolute path/));
  for (
    const [cwd, message] of [
      ["/work/missing", /does not exist: '\/work\/missing'/],
      [`${CWD}/notes.txt`, /is not a directory: '\/work\/project\/notes.txt'/],
    ] as const
  ) {
    await assert.rejects(store.create(cwd), (error: unknown) => {
      assert.ok(error instanceof SessionCwdError, String(error));
      assert.match(error.message, message);
      return true;
    });
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("opens and maintenance calls refuse a relative session path before touching anything", async () => {
  const fs = await setup();
  const store = new SessionStore({ fs, agentDir: AGENT, sessionDir: GLOBAL });
  const before = fs.snapshotTree("/");
  const relative = "data/chats/0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  for (
    const call of [
      () => store.open(relative),
      () => store.open(relative, { readOnly: true }),
      () => store.compact(relative),
      () => store.removeLegacyBackup(relative),
    ]
  ) {
    await assert.rejects(call(), refusal("path", /Session path must be absolute: 'data\/chats\//));
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("compaction and backup removal refuse a session path that is a link or a file, naming it", async () => {
  const fs = await setup();
  const store = new SessionStore({ fs, agentDir: AGENT, sessionDir: GLOBAL });
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  // The session's directory moved out of the collection, a link to it in its place.
  const dir = session.getSessionPath();
  const outside = "/elsewhere/copy";
  await fs.mkdir("/elsewhere");
  await fs.rename(dir, outside);
  await fs.symlink(outside, dir);
  // And a regular file named like another session.
  const file = `${GLOBAL}/0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f`;
  await fs.writeFile(file, new TextEncoder().encode("not a session"));
  const before = fs.snapshotTree("/");
  for (const path of [dir, file]) {
    for (const call of [() => store.compact(path), () => store.removeLegacyBackup(path)]) {
      await assert.rejects(call(), (error: unknown) => {
        assert.ok(error instanceof SessionFormatError, String(error));
        assert.equal(error.file, path);
        assert.match(error.message, /not a directory/);
        return true;
      });
    }
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});
