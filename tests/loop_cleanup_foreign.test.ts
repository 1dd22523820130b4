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
