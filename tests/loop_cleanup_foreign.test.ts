// Cleanup removes only what the store made: a file or directory of the user's that merely looks
// like a leftover (a `.notes.tmp`, a `.staging-area/`) is left alone, and a path that is no
// collection (the sessions root, a session directory) is refused before anything changes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import { InvalidArgumentError } from "../src/loop/errors.ts";
import { isTempName, tempNameFor } from "../src/port/durable.ts";
import { conversation } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";
import { PermissionDenied } from "../src/port/errors.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const encoder = new TextEncoder();

test("only the temp names the store makes are temp names", () => {
  for (let i = 0; i < 50; i++) {
    for (const file of ["meta.json", "archive.json", "x".repeat(250)]) {
      const name = tempNameFor(`/c/${file}`).slice(3);
      assert.ok(isTempName(name), name);
    }
  }
  for (const name of [".notes.tmp", ".meta.json.abc.tmp", "meta.json.0badc0de1.tmp", ".tmp"]) {
    assert.equal(isTempName(name), false, name);
  }
});

test("cleanup of a directory given as a collection leaves the user's look-alike entries alone", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(`${CWD}/.staging-area/src`, { recursive: true });
  await fs.writeFile(`${CWD}/.staging-area/src/work.txt`, encoder.encode("mine"));
  await fs.writeFile(`${CWD}/.notes.tmp`, encoder.encode("mine too"));
  // Named like the store's staging and delete directories, but not of their exact shapes: a
  // folder holding a file named `committed` is no finished delete, an empty one no leftover.
  const id = "0b7f7e1c-3d7e-4c55-9a77-3c9d2f6a1e10";
  for (const dir of [".delete-drafts", ".delete-later", `.staging-${id}-backup`]) {
    await fs.mkdir(`${CWD}/${dir}`);
  }
  await fs.writeFile(`${CWD}/.delete-drafts/committed`, encoder.encode(""));
  await fs.writeFile(`${CWD}/.delete-drafts/draft.md`, encoder.encode("draft"));
  await fs.mkdir(`${CWD}/.staging-${id}-backup/previous`);
  await fs.writeFile(`${CWD}/.staging-${id}-backup/previous/meta.json`, encoder.encode("{}"));
  const leftover = tempNameFor(`${CWD}/archive.json`);
  await fs.writeFile(leftover, encoder.encode("{"));
  const store = new SessionStore({ fs, agentDir: AGENT });
  const report = await store.cleanup(undefined, CWD);
  // The store's own temp file goes; nothing of the user's does.
  assert.deepEqual(report.removed, [leftover]);
  assert.deepEqual(report.kept, []);
  assert.equal(
    new TextDecoder().decode(await fs.readFile(`${CWD}/.staging-area/src/work.txt`)),
    "mine",
  );
  assert.equal((await fs.lstat(`${CWD}/.notes.tmp`)).kind, "file");
  assert.deepEqual((await fs.readDir(CWD)).map((e) => e.name).sort(), [
    ".delete-drafts",
    ".delete-later",
    ".notes.tmp",
    `.staging-${id}-backup`,
    ".staging-area",
  ]);
  assert.equal(
    new TextDecoder().decode(await fs.readFile(`${CWD}/.delete-drafts/draft.md`)),
    "draft",
  );
  // A listing of it takes none of them for a session held aside.
  assert.deepEqual((await store.listDetailed(undefined, CWD)).failures, []);
});

test("a store configured with a session directory or the sessions root as its collection refuses to clean it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  await fs.writeFile(tempNameFor(`${session.getSessionPath()}/meta.json`), encoder.encode("{"));
  const before = fs.snapshotTree();
  for (const sessionDir of [`${AGENT}/sessions`, session.getSessionPath()]) {
    const configured = new SessionStore({ fs, agentDir: AGENT, sessionDir });
    for (const call of [() => configured.cleanup(), () => configured.cleanup(CWD)]) {
      await assert.rejects(call(), InvalidArgumentError);
    }
  }
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a custom collection under a session-id-named directory whose parent cannot be listed is cleaned", async () => {
  const fs = new MemoryFs();
  const collection = "/srv/0b7f7e1c-3d7e-4c55-9a77-3c9d2f6a1e10/chats";
  await fs.mkdir(collection, { recursive: true });
  const leftover = tempNameFor(`${collection}/archive.json`);
  await fs.writeFile(leftover, encoder.encode("{"));
  // /srv may be entered, not listed (mode 0711).
  const refusing = hookedFs(fs, {
    before(method, args) {
      if (method === "readDir" && args[0] === "/srv") throw new PermissionDenied(method, "/srv");
    },
  });
  const store = new SessionStore({ fs: refusing, agentDir: AGENT });
  assert.deepEqual((await store.cleanup(undefined, collection)).removed, [leftover]);
});

test("cleanup refuses the sessions root and a session directory as its collection, changing nothing", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const inSession = tempNameFor(`${session.getSessionPath()}/meta.json`);
  await fs.writeFile(inSession, encoder.encode("{"));
  const before = fs.snapshotTree();
  for (const dir of [`${AGENT}/sessions`, session.getSessionPath()]) {
    await assert.rejects(store.cleanup(undefined, dir), (error: unknown) => {
      assert.ok(error instanceof InvalidArgumentError, String(error));
      assert.match(error.message, /is not a collection to clean up/);
      return true;
    });
  }
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a collection under a directory merely named like a staging or delete directory is an ordinary one", async () => {
  for (const sessionDir of ["/data/.staging-area", "/data/.delete-drafts/sessions"]) {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    await fs.mkdir(sessionDir, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT, sessionDir });
    const session = await store.create(CWD);
    await session.commit(conversation(1));
    await session.close();
    assert.deepEqual((await store.list(CWD)).map((s) => s.id), [session.id]);
    const reopened = await store.open(session.getSessionPath(), { readOnly: true });
    assert.equal(reopened.messages.length, conversation(1).length);
    await reopened.close();
    await store.compact(session.getSessionPath());
    assert.deepEqual(await store.cleanup(), { removed: [], restored: [], finished: [], kept: [] });
  }
});
