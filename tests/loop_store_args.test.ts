// The store's public methods refuse arguments of the wrong kind up front, with an
// InvalidArgumentError naming the argument (never a raw TypeError from deep inside), and change
// nothing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryFs } from "../adapters/memory.ts";
import { nodeFs } from "../adapters/node.ts";
import { InvalidArgumentError, SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { conversation } from "./_fixtures.ts";
import { dirname } from "../src/port/path.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

const refused = (argument: string) => (error: unknown) => {
  assert.ok(error instanceof InvalidArgumentError, `${argument}: ${String(error)}`);
  assert.equal(error.argument, argument, error.message);
  return true;
};

/** Whether `error` is the store's refusal of a symbolic link. */
const linkRefused = (error: unknown): boolean =>
  error instanceof SessionFormatError && /symlinks are refused/.test(error.message);

/** A memory filesystem holding CWD, and the store of AGENT on it. */
async function memoryStore(): Promise<{ fs: MemoryFs; store: SessionStore }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  return { fs, store: new SessionStore({ fs, agentDir: AGENT }) };
}

/** A new session of `cwd` in `store`, saved with one round and closed. */
async function saved(store: SessionStore, cwd = CWD): Promise<SessionManager> {
  const session = await store.create(cwd);
  await session.commit(conversation(1));
  await session.close();
  return session;
}

test("store methods refuse a path, cwd or options argument of the wrong kind with InvalidArgumentError", async () => {
  const { fs, store } = await memoryStore();
  const session = await saved(store);
  const dir = session.getSessionPath();
  fs.syncAll();
  const before = fs.clone();
  const calls: [string, () => Promise<unknown>][] = [
    ["options", () => store.listDetailed(CWD, undefined, null as never)],
    ["options", () => store.listDetailed(CWD, undefined, 5 as never)],
    ["options", () => store.list(CWD, undefined, "fast" as never)],
    ["fast", () => store.list(CWD, undefined, { fast: "yes" as never })],
    ["pinnedFirst", () => store.listDetailed(CWD, undefined, { pinnedFirst: 1 as never })],
    ["cwd", () => store.list(123 as never)],
    ["cwd", () => store.list(null as never)],
    ["sessionDir", () => store.list(undefined, 123 as never)],
    ["sessionDir", () => store.listDetailed(CWD, null as never)],
    ["cwd", () => store.canonicalCwd(123 as never)],
    ["cwd", () => store.collectionFor({} as never)],
    ["cwd", () => store.create(123 as never)],
    ["cwd", () => store.create(null as never)],
    ["path", () => store.open(123 as never)],
    ["path", () => store.open(undefined as never)],
    ["options", () => store.open(dir, null as never)],
    ["options", () => store.open(dir, true as never)],
    ["path", () => store.compact(123 as never)],
    ["path", () => store.removeLegacyBackup([dir] as never)],
    ["cwd", () => store.cleanup(123 as never)],
    ["sessionDir", () => store.cleanup(undefined, 123 as never)],
    ["cwd", () => store.archive.set(123 as never, [session.id], true)],
    ["cwd", () => store.archive.list(123 as never)],
    ["cwd", () => store.archive.isArchived(null as never, session.id)],
    ["cwd", () => store.archive.delete(123 as never, [session.id])],
    ["dir", () => store.salvage(123 as never, "/rescue")],
    ["dir", () => store.salvage("relative/dir", "/rescue")],
    ["toCollection", () => store.salvage(dir, 123 as never)],
    ["toCollection", () => store.salvage(dir, "rescue")],
    ["options", () => store.salvage(dir, "/rescue", null as never)],
  ];
  for (const [argument, call] of calls) {
    await assert.rejects(call(), refused(argument), `${argument}: ${call.toString()}`);
  }
  // Nothing was written by any of them.
  assert.deepEqual(fs.snapshotTree(), before.snapshotTree());
});

test("salvage refuses a destination that is no collection: a private directory, the sessions root, or inside a session", async () => {
  const { fs, store } = await memoryStore();
  const damaged = await saved(store);
  const other = await saved(store);
  const collection = dirname(damaged.getSessionPath());
  const otherDir = other.getSessionPath();
  // A collection outside the data directory, with a session in it and one a compaction holds.
  const custom = new SessionStore({ fs, agentDir: AGENT, sessionDir: "/custom" });
  const inCustom = (await saved(custom)).getSessionPath();
  const heldDir = (await saved(custom)).getSessionPath();
  const held = heldDir.slice("/custom/".length);
  await fs.mkdir(`/custom/.staging-${held}-abcdef12`);
  await fs.rename(heldDir, `/custom/.staging-${held}-abcdef12/previous`);
  // A link into a session directory, and a session directory not named by its id.
  await fs.symlink(otherDir, "/linked");
  await fs.mkdir("/odd", { recursive: true });
  await fs.writeFile("/odd/meta.json", await fs.readFile(`${otherDir}/meta.json`));
  fs.syncAll();
  const before = fs.clone();
  for (
    const to of [
      `${collection}/.staging-rescue`,
      `${collection}/.delete-rescue`,
      `${collection}/.staging-rescue/deeper`,
      `${AGENT}/sessions/.rescue`,
      `${AGENT}/sessions/.rescue/sub`,
      `${AGENT}/sessions`,
      otherDir,
      `${otherDir}/nested`,
      `${collection}/${damaged.id}`,
      "/custom/.delete-x",
      inCustom,
      `${inCustom}/nested`,
      heldDir,
      "/linked",
      "/linked/nested",
      "/odd",
    ]
  ) {
    await assert.rejects(store.salvage(damaged.getSessionPath(), to), refused("toCollection"), to);
  }
  assert.deepEqual(fs.snapshotTree(), before.snapshotTree());
  // A collection of the store, a new one, another directory, an explicit collection: accepted.
  for (const to of [collection, `${AGENT}/sessions/rescued`, "/rescue", "/custom"]) {
    const result = await store.salvage(damaged.getSessionPath(), to);
    assert.equal(dirname(result.dir), to);
    assert.equal(result.kept, 2, to);
  }
});

test("salvage takes a path with a trailing slash as the path itself: a linked collection or session directory stays refused (memory and the runtime's disk)", async () => {
  const isDeno = (globalThis as { Deno?: unknown }).Deno !== undefined;
  const runtimeFs = isDeno ? (await import("../adapters/deno.ts")).denoFs() : nodeFs();
  const base = await realpath(await mkdtemp(join(tmpdir(), "loop-salvage-slash-")));
  try {
    for (
      const [name, fs, root] of [["memory", new MemoryFs(), "/base"], [
        "disk",
        runtimeFs,
        base,
      ]] as const
    ) {
      const cwd = `${root}/cwd`;
      await fs.mkdir(cwd, { recursive: true });
      const store = new SessionStore({ fs, agentDir: `${root}/agent` });
      const dir = (await saved(store, cwd)).getSessionPath();
      const names = async (path: string) => (await fs.readDir(path)).map((entry) => entry.name);
      // A linked collection: refused however it is spelled, and nothing is written through it.
      await fs.mkdir(`${root}/real-rescue`, { recursive: true });
      await fs.symlink(`${root}/real-rescue`, `${root}/rescue`);
      for (
        const to of [`${root}/rescue`, `${root}/rescue/`, `${root}/rescue//`, `${root}/rescue/.`]
      ) {
        await assert.rejects(store.salvage(dir, to), linkRefused, `${name} ${to}`);
        assert.deepEqual(await names(`${root}/real-rescue`), [], `${name} ${to}`);
      }
      // A link planted at a session's name in its collection: refused with a trailing slash too,
      // before the destination collection is made.
      const linked = (await saved(store, cwd)).getSessionPath();
      await fs.mkdir(`${root}/elsewhere`, { recursive: true });
      await fs.rename(linked, `${root}/elsewhere/x`);
      await fs.symlink(`${root}/elsewhere/x`, linked);
      for (const from of [linked, `${linked}/`, `${linked}/.`]) {
        await assert.rejects(store.salvage(from, `${root}/fresh`), linkRefused, `${name} ${from}`);
        assert.equal(await names(`${root}`).then((entries) => entries.includes("fresh")), false);
      }
      // A real collection and session spelled with a trailing slash: salvaged, the path normalized.
      const result = await store.salvage(`${dir}/`, `${root}/ok/`);
      assert.equal(result.dir, `${root}/ok/${result.id}`, name);
      assert.equal(result.kept, 2, name);
      assert.deepEqual(await names(`${root}/ok`), [result.id], name);
    }
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("a store given its agent directory never asks the adapter for the home directory", () => {
  const fs = new MemoryFs();
  let asked = 0;
  const counting = Object.assign(Object.create(fs) as MemoryFs, {
    homeDir: (): string | undefined => {
      asked++;
      return "/home/someone";
    },
  });
  const named = new SessionStore({ fs: counting, agentDir: "/data/agent" });
  assert.equal(named.agentDir, "/data/agent");
  assert.equal(asked, 0);
  // Without one, the home directory is asked for, once, and the agent directory is under it.
  assert.equal(new SessionStore({ fs: counting }).agentDir, "/home/someone/.loop");
  assert.equal(asked, 1);
});

test("listing refuses a private staging directory of the store as the collection, and a user's look-alike is listed", async () => {
  const { fs, store } = await memoryStore();
  const session = await saved(store);
  const dir = session.getSessionPath();
  const collection = dirname(dir);
  const copyInto = async (place: string): Promise<void> => {
    await fs.mkdir(`${place}/${session.id}`, { recursive: true });
    for (const name of ["messages.jsonl", "index.json", "meta.json"]) {
      await fs.writeFile(`${place}/${session.id}/${name}`, await fs.readFile(`${dir}/${name}`));
    }
  };
  const deleting = `${collection}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f`;
  const staging = `${collection}/.staging-${session.id}-0a1b2c3d`;
  await copyInto(deleting);
  await fs.mkdir(staging);
  const before = fs.snapshotTree();
  for (const place of [deleting, staging, `${deleting}/${session.id}`, `${deleting}/`]) {
    for (const call of [() => store.list(undefined, place), () => store.listDetailed(CWD, place)]) {
      await assert.rejects(call(), (error: unknown) => {
        refused("sessionDir")(error);
        assert.match((error as Error).message, /is a private staging directory of the store/);
        return true;
      });
    }
  }
  assert.deepEqual(fs.snapshotTree(), before, "nothing was read into being or changed");
  // A directory a user named like one is an ordinary collection.
  const lookAlike = `${collection}/.staging-area`;
  await copyInto(lookAlike);
  assert.deepEqual((await store.list(undefined, lookAlike)).map((s) => s.id), [session.id]);
});
