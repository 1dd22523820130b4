// A session collection that is a symlink (the configured `sessionDir`, or a workspace collection
// `<agentDir>/sessions/<hash>`) is refused with one clear SessionFormatError naming it, by every
// call that would write into it: a writable open and create() before anything is written, a save
// and archive.set when the collection became a link later. Read-only opens and listings through
// it keep working; a symlinked agentDir (or `<agentDir>/sessions`) is supported.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryFs } from "../adapters/memory.ts";
import { nodeFs } from "../adapters/node.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { conversation, user } from "./_fixtures.ts";

const ROUND = conversation(1);
/** A probe: the writer lock is then a lock file (without one, the lock writes nothing). */
const PROBE = { pid: 100, host: "test-host", isAlive: () => true };
const MORE = [...ROUND, user("more")];

interface Place {
  readonly fs: FileSystem;
  /** An absolute directory that exists and is empty. */
  readonly base: string;
  readonly done: () => Promise<void>;
}

const adapters: [string, () => Promise<Place>][] = [
  ["memory", async () => {
    const fs = new MemoryFs();
    await fs.mkdir("/base", { recursive: true });
    return { fs, base: "/base", done: () => Promise.resolve() };
  }],
  ["node", async () => {
    const base = await realpath(await mkdtemp(join(tmpdir(), "loop-linked-coll-")));
    return { fs: nodeFs(), base, done: () => rm(base, { recursive: true, force: true }) };
  }],
];

const READS = new Set([
  "readFile",
  "readFileNoFollow",
  "openNoFollow",
  "readDir",
  "stat",
  "lstat",
  "realPath",
  "readLink",
  "homeDir",
]);

/** `fs`, recording each call that may write (`writes`): any but a read, an open for reading. */
function recording(fs: FileSystem): { fs: FileSystem; writes: string[] } {
  const writes: string[] = [];
  const wrapped = new Proxy(fs, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver);
      if (typeof value !== "function" || typeof key !== "string") return value;
      return (...args: unknown[]) => {
        const options = key === "open" ? (args[1] ?? {}) as Record<string, unknown> : {};
        const reading = key === "open"
          ? !["write", "append", "create", "createNew", "truncate"].some((k) => options[k])
          : READS.has(key);
        if (!reading) writes.push(`${key} ${String(args[0])}`);
        return value.apply(target, args);
      };
    },
  });
  return { fs: wrapped, writes };
}

/** Every entry under `root` (never following a link): kind, and the bytes of each file. */
async function tree(fs: FileSystem, root: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await fs.readDir(dir)) {
      const path = `${dir}/${entry.name}`;
      const kind = (await fs.lstat(path)).kind;
      if (kind === "directory") {
        out[path] = "dir";
        await walk(path);
      } else if (kind === "file") {
        out[path] = new TextDecoder().decode(await fs.readFile(path));
      } else {
        out[path] = kind;
      }
    }
  };
  await walk(root);
  return out;
}

/** Asserts `error` is the refusal of the linked collection `collection`. */
function refusesCollection(collection: string): (error: unknown) => boolean {
  return (error) => {
    assert.ok(error instanceof SessionFormatError, `not a SessionFormatError: ${error}`);
    assert.equal(error.file, collection);
    assert.match(
      error.message,
      /Session collection path is not a directory \(symlinks are refused\)/,
    );
    return true;
  };
}

async function savedIn(store: SessionStore, cwd: string): Promise<SessionManager> {
  const session = await store.create(cwd);
  await session.commit(ROUND);
  await session.close();
  return session;
}

for (const [adapter, make] of adapters) {
  for (const probed of [false, true]) {
    const name = `${adapter}, ${probed ? "with" : "without"} a probe`;
    const probe = probed ? PROBE : null;
    test(`${name}: a linked sessionDir is refused by a writable open, create() and archive.set before anything is written; read-only opens and listings still read through it`, async () => {
      const { fs, base, done } = await make();
      try {
        const cwd = `${base}/work`;
        await fs.mkdir(cwd, { recursive: true });
        const real = `${base}/real`;
        const link = `${base}/coll`;
        const id = (await savedIn(
          new SessionStore({ fs, agentDir: `${base}/agent`, sessionDir: real, process: probe }),
          cwd,
        )).id;
        await fs.symlink(real, link);
        const recorder = recording(fs);
        const store = new SessionStore({
          fs: recorder.fs,
          agentDir: `${base}/agent`,
          sessionDir: link,
          process: probe,
        });
        const before = await tree(fs, real);

        await assert.rejects(store.open(`${link}/${id}`), refusesCollection(link));
        await assert.rejects(store.open(`${link}/${id}/meta.json`), refusesCollection(link));
        await assert.rejects(store.create(cwd), refusesCollection(link));
        await assert.rejects(store.archive.set(undefined, [id], true), refusesCollection(link));
        await assert.rejects(store.compact(`${link}/${id}`), refusesCollection(link));
        await assert.rejects(store.cleanup(), refusesCollection(link));
        // No writer.lock (not even for a moment), no archive.json, nothing written through the link.
        assert.deepEqual(recorder.writes, []);
        assert.deepEqual(await tree(fs, real), before);
        assert.equal((await fs.lstat(link)).kind, "symlink");

        // Reading through the link is unchanged.
        const reader = await store.open(`${link}/${id}`, { readOnly: true });
        assert.deepEqual(reader.messages, ROUND);
        await reader.close();
        assert.deepEqual((await store.list()).map((info) => info.id), [id]);
        assert.deepEqual((await store.list(cwd)).map((info) => info.id), [id]);
        assert.deepEqual(recorder.writes, []);
        assert.deepEqual(await tree(fs, real), before);
      } finally {
        await done();
      }
    });

    test(`${name}: a collection that became a link after the open or create() fails the save with the SessionFormatError naming it, and archive.set too`, async () => {
      const { fs, base, done } = await make();
      try {
        const cwd = `${base}/work`;
        await fs.mkdir(cwd, { recursive: true });
        const collection = `${base}/coll`;
        const moved = `${base}/moved`;
        const store = new SessionStore({
          fs,
          agentDir: `${base}/agent`,
          sessionDir: collection,
          process: probe,
        });
        const id = (await savedIn(store, cwd)).id;
        const opened = await store.open(`${collection}/${id}`);
        const draft = await store.create(cwd);
        await fs.rename(collection, moved);
        await fs.symlink(moved, collection);
        const before = await tree(fs, moved);

        await assert.rejects(
          opened.commit(MORE),
          refusesCollection(collection),
        );
        assert.equal(opened.hasPendingSave, true);
        await assert.rejects(opened.flush(), refusesCollection(collection));
        await assert.rejects(draft.commit([user("new")]), refusesCollection(collection));
        await assert.rejects(
          store.archive.set(undefined, [id], true),
          refusesCollection(collection),
        );
        // Nothing written through the link: no save, no lock of the draft, no archive.json.
        assert.deepEqual(await tree(fs, moved), before);
        await draft.close().catch(() => undefined);
        await opened.close().catch(() => undefined);
      } finally {
        await done();
      }
    });

    test(`${name}: a linked workspace collection is refused the same way, while a linked agentDir and a linked sessions/ work`, async () => {
      const { fs, base, done } = await make();
      try {
        const cwd = `${base}/work`;
        await fs.mkdir(cwd, { recursive: true });
        // A linked agentDir, whose sessions/ is a link too: supported.
        await fs.mkdir(`${base}/data/agent`, { recursive: true });
        await fs.mkdir(`${base}/data/sessions`, { recursive: true });
        await fs.symlink(`${base}/data/sessions`, `${base}/data/agent/sessions`);
        await fs.symlink(`${base}/data/agent`, `${base}/agent`);
        const store = new SessionStore({ fs, agentDir: `${base}/agent`, process: probe });
        const session = await savedIn(store, cwd);
        const writer = await store.open(session.getSessionPath());
        await writer.commit(MORE);
        await writer.close();
        await store.archive.set(cwd, [session.id], true);
        assert.equal(await store.archive.isArchived(cwd, session.id), true);

        // The workspace collection itself a link: refused.
        const hash = workspaceHash(cwd);
        const collection = `${base}/agent/sessions/${hash}`;
        await fs.rename(`${base}/data/sessions/${hash}`, `${base}/data/elsewhere`);
        await fs.symlink(`${base}/data/elsewhere`, `${base}/data/sessions/${hash}`);
        const before = await tree(fs, `${base}/data/elsewhere`);
        await assert.rejects(
          store.open(`${collection}/${session.id}`),
          refusesCollection(collection),
        );
        await assert.rejects(store.create(cwd), refusesCollection(collection));
        await assert.rejects(
          store.archive.set(cwd, [session.id], false),
          refusesCollection(collection),
        );
        assert.deepEqual(await tree(fs, `${base}/data/elsewhere`), before);
        const reader = await store.open(`${collection}/${session.id}`, { readOnly: true });
        assert.deepEqual(reader.messages, MORE);
        await reader.close();
      } finally {
        await done();
      }
    });
  }
}
