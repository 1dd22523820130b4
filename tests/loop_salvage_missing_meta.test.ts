import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { NotFound } from "../src/port/errors.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionStore } from "../src/loop/store.ts";
import { CorruptSessionError, SessionNotFoundError } from "../src/loop/errors.ts";
import { salvageSession } from "../src/loop/verify.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

async function saved() {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  return { fs, store, dir: session.getSessionPath() };
}

/** Checks `error` is the SessionNotFoundError naming `metaPath`, with the port's NotFound as cause. */
function notFoundNaming(metaPath: string): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof SessionNotFoundError, `got ${String(error)}`);
    assert.equal(error.file, metaPath);
    assert.ok(error.message.includes(metaPath) || error.message.includes("meta.json"));
    assert.ok(error.cause instanceof NotFound, `cause ${String(error.cause)}`);
    return true;
  };
}

test("salvage of a session directory without meta.json says what open says of it", async () => {
  const { fs, store, dir } = await saved();
  const metaPath = `${dir}/meta.json`;
  await fs.remove(metaPath);
  // index.json shows a save committed there: a lost meta.json is damage, for open and salvage.
  const lost = (error: unknown) => {
    assert.ok(error instanceof CorruptSessionError, `got ${String(error)}`);
    assert.equal(error.file, metaPath);
    assert.ok(error.cause instanceof NotFound, `cause ${String(error.cause)}`);
    return true;
  };
  await assert.rejects(store.open(dir), lost);
  await assert.rejects(store.salvage(dir, "/rescue"), lost);
  await assert.rejects(
    salvageSession(fs, dir, { sha256: portableSha256, toCollection: "/rescue" }),
    lost,
  );
  // Without index.json nothing says a save committed: no session there.
  await fs.remove(`${dir}/index.json`);
  await assert.rejects(store.open(dir), SessionNotFoundError);
  await assert.rejects(store.salvage(dir, "/rescue"), notFoundNaming(metaPath));
  await assert.rejects(
    salvageSession(fs, dir, { sha256: portableSha256, toCollection: "/rescue" }),
    notFoundNaming(metaPath),
  );
  // Nothing was written: the collection is not made, the source is left as it was.
  await assert.rejects(fs.lstat("/rescue"), NotFound);
  assert.deepEqual((await fs.readDir(dir)).map((entry) => entry.name), ["messages.jsonl"]);
});

test("salvage of a missing session directory is SessionNotFoundError naming its meta.json", async () => {
  const { fs, store, dir } = await saved();
  const gone = `${dir.slice(0, dir.lastIndexOf("/"))}/00000000-0000-4000-8000-000000000000`;
  const metaPath = `${gone}/meta.json`;
  await assert.rejects(store.salvage(gone, "/rescue"), notFoundNaming(metaPath));
  await assert.rejects(
    salvageSession(fs, gone, { sha256: portableSha256, toCollection: "/rescue" }),
    notFoundNaming(metaPath),
  );
  await assert.rejects(fs.lstat("/rescue"), NotFound);
});

test("salvage of a missing legacy file is SessionNotFoundError naming it, as open says", async () => {
  const { fs, store, dir } = await saved();
  const file = `${dir.slice(0, dir.lastIndexOf("/"))}/00000000-0000-4000-8000-000000000000.jsonl`;
  await assert.rejects(store.open(file), SessionNotFoundError);
  const naming = (error: unknown) => {
    assert.ok(error instanceof SessionNotFoundError, `got ${String(error)}`);
    assert.equal(error.file, file);
    assert.ok(error.cause instanceof NotFound, `cause ${String(error.cause)}`);
    return true;
  };
  await assert.rejects(store.salvage(file, "/rescue"), naming);
  await assert.rejects(
    salvageSession(fs, file, { sha256: portableSha256, toCollection: "/rescue" }),
    naming,
  );
  await assert.rejects(fs.lstat("/rescue"), NotFound);
});
