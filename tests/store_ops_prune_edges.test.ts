// Edges of the store-level operations (delete of unreadable sessions, delete journals and
// staging names, the writer lock's takeover, the listing cache's limit) and of the folded layout's
// prune-raw and logical references (the running iteration's attempts, the temp sweep, a
// session.json naming another session, the scope id's length).
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  CorruptSessionError,
  SessionFormatError,
  SessionLockedError,
  SessionNotFoundError,
} from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { WRITER_LOCK_FILE } from "../src/loop/lock.ts";
import { ListingCache } from "../src/loop/discovery.ts";
import { conversation, probe, user } from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";
import {
  LogicalReferenceError,
  parseLogicalReference,
  pruneRaw,
  TEMP_LEFTOVER_AGE_MS,
} from "../layout.ts";
import { newRepo } from "./layout_fixtures.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const GLOBAL = "/data/chats";
const encoder = new TextEncoder();

async function setup(): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  return fs;
}

function storeOn(fs: FileSystem, sessionDir = GLOBAL): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT, sessionDir });
}

async function saved(store: SessionStore, history: Message[], cwd = CWD): Promise<SessionManager> {
  const session = await store.create(cwd);
  await session.commit(history);
  await session.close();
  return session;
}

test("delete() by collection never deletes a session whose read failed with an I/O error", async () => {
  const fs = await setup();
  const plain = storeOn(fs);
  const session = await saved(plain, [user("keep me")]);
  await plain.archive.set(undefined, [session.id], true);
  const meta = `${GLOBAL}/${session.id}/meta.json`;
  // Every read of the session's meta.json fails as a failing disk would (EIO).
  const failing = hookedFs(fs, {
    before(method, args) {
      if (String(method).startsWith("read") || String(method).startsWith("open")) {
        if (args[0] === meta) throw new FsIoError("EIO", method, meta, "Input/output error");
      }
    },
  });
  const store = storeOn(failing);
  await assert.rejects(store.archive.delete(undefined, [session.id]), FsIoError);
  // Nothing of it is gone: the storage fault was not taken for an unreadable (corrupt) session.
  assert.deepEqual((await plain.list(undefined)).map((s) => s.id), [session.id]);
  assert.deepEqual(await plain.archive.list(undefined), [session.id]);
});

test("delete() for a cwd refuses a session that cannot be read, and deletes nothing", async () => {
  const fs = await setup();
  const store = storeOn(fs);
  const kept = await saved(store, [user("kept")]);
  const broken = await saved(store, [user("broken")]);
  await store.archive.set(CWD, [broken.id], true);
  await fs.writeFile(broken.getSessionFile(), encoder.encode("{"));
  // Not known to be the project's: refused, saying it cannot be read and how to delete it.
  await assert.rejects(
    store.archive.delete(CWD, [broken.id], { archivedOnly: false }),
    (error: unknown) =>
      error instanceof SessionNotFoundError && /cannot be read/.test(error.message) &&
      /delete it by its collection/.test(error.message),
  );
  assert.ok((await fs.readDir(GLOBAL)).some((entry) => entry.name === broken.id));
  assert.deepEqual(await store.archive.list(undefined), [broken.id]);
  assert.ok((await fs.readDir(GLOBAL)).some((entry) => entry.name === kept.id));
});

test("a delete journal naming an entry with a '/' is refused, and its rollback moves nothing outside the collection", async () => {
  const fs = await setup();
  const store = new SessionStore({ fs, agentDir: AGENT });
  const collection = `${AGENT}/sessions/${workspaceHash(CWD)}`;
  const victim = (await saved(store, conversation(1))).id;
  // A file beside the collection, which a journal entry climbing out of it names.
  const outside = `${AGENT}/sessions/secret.txt`;
  await fs.writeFile(outside, encoder.encode("not the store's"));
  const staging = `${collection}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(staging);
  await fs.rename(`${collection}/${victim}`, `${staging}/${victim}`);
  const entry = `${victim}.x/../../../secret.txt`;
  const intent = {
    operation: "delete",
    ids: [victim],
    entries: [victim, entry],
    archived: [],
    membersBefore: [],
  };
  await fs.writeFile(`${staging}/intent.json`, encoder.encode(JSON.stringify(intent)));
  const listed = await store.listDetailed(CWD);
  const error = listed.failures[0]?.error;
  assert.ok(error instanceof CorruptSessionError, String(error));
  assert.ok(error.cause instanceof SessionFormatError, String(error.cause));
  assert.equal(error.cause.path, "entries[1]");
  assert.equal(error.cause.value, entry);
  assert.deepEqual((await store.cleanup(CWD)).kept, [staging]);
  // Nothing moved: the file outside is where it was, and the staged session stays staged.
  assert.equal(new TextDecoder().decode(await fs.readFile(outside)), "not the store's");
  assert.ok((await fs.readDir(staging)).some((e) => e.name === victim));
});

test("an empty lock file whose holder writes its record during the takeover's second look is not taken over", async () => {
  const fs = await setup();
  const alive = new Set([100, 200]);
  const first = new SessionStore({ fs, agentDir: AGENT, process: probe(100, alive) });
  const session = await first.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const dir = session.getSessionPath();
  const lock = `${dir}/${WRITER_LOCK_FILE}`;
  // The record process 100 writes into its lock (taken once to have its exact bytes).
  const holder = await first.open(dir);
  const record = await fs.readFile(lock);
  await holder.close();
  // Process 100 has created its lock and not written it yet (an empty file: unparsable).
  await fs.writeFile(lock, new Uint8Array(0), { mode: 0o600 });
  // Process 200 judges it stale after the grace period and claims the takeover; meanwhile (well
  // within a second grace period) process 100's record lands.
  let landed!: Promise<void>;
  const taker = hookedFs(fs, {
    after(method, args) {
      if (method === "open" && args[0] === `${lock}.takeover-other` && landed === undefined) {
        landed = new Promise((resolve) =>
          setTimeout(() => fs.writeFile(lock, record).then(resolve), 300)
        );
      }
    },
  });
  const second = new SessionStore({ fs: taker, agentDir: AGENT, process: probe(200, alive) });
  const outcome = await second.open(dir).then(
    async (opened) => {
      await landed;
      await opened.close().catch(() => undefined);
      return opened;
    },
    (error: unknown) => error,
  );
  await landed;
  assert.ok(outcome instanceof SessionLockedError, `taken over a live lock: ${String(outcome)}`);
  assert.equal(outcome.pid, 100);
  assert.equal(JSON.parse(new TextDecoder().decode(await fs.readFile(lock))).pid, 100);
});

test("prune keeps another raw attempt of the running iteration (one being set up), as running", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const running = tree.running.slice(tree.running.lastIndexOf("/") + 1);
  const iteration = running.slice(0, running.indexOf("_"));
  // The running iteration's next workflow is being set up beside it (same iteration).
  const sibling = `${tree.running.slice(0, tree.running.lastIndexOf("/"))}/${iteration}_setup`;
  await fs.mkdir(sibling, { recursive: true });
  await fs.writeFile(`${sibling}/output.txt`, encoder.encode("in progress"));
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.equal(report.skipped.find((skip) => skip.path === sibling)?.reason, "running_attempt");
  assert.ok(!report.removed.some((entry) => entry.path === sibling));
  assert.equal(new TextDecoder().decode(await fs.readFile(`${sibling}/output.txt`)), "in progress");
});

test("a scope id longer than 255 bytes is refused as an unknown scope; one of 255 is accepted", () => {
  for (const scope of ["session", "trace"]) {
    assert.equal(parseLogicalReference(`${scope}:${"a".repeat(255)}:/x`).id, "a".repeat(255));
    const reference = `${scope}:${"a".repeat(256)}:/x`;
    assert.throws(
      () => parseLogicalReference(reference),
      (error: unknown) =>
        error instanceof LogicalReferenceError && error.reason === "unknown_scope",
      reference,
    );
  }
});

test("prune's temp-file sweep never reaches into raw/: a temp-named file of the running attempt stays", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const now = Date.parse("2026-05-01T00:00:00Z");
  // An agent's own output in raw/, named like an atomic replace's temp file, long since written.
  const agentFile = `${tree.running}/.notes.txt.0a1b2c3d1.tmp`;
  await fs.writeFile(agentFile, encoder.encode("agent output"));
  await fs.utime(agentFile, now - 10 * TEMP_LEFTOVER_AGE_MS);
  const report = await pruneRaw(fs, tree.loopyRoot, { now: () => new Date(now) });
  assert.ok(!report.removed.some((entry) => entry.path === agentFile), "reported removed");
  assert.equal(new TextDecoder().decode(await fs.readFile(agentFile)), "agent output");
});

test("prune keeps the raw/ of a session whose session.json names another session", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  // The child's session.json was copied from its parent: its layout says nothing of the child.
  const manifestPath = `${tree.child.dir}/session.json`;
  const manifest = JSON.parse(new TextDecoder().decode(await fs.readFile(manifestPath)));
  manifest.session_id = tree.rootId;
  await fs.writeFile(manifestPath, encoder.encode(JSON.stringify(manifest)));
  const finished = tree.prunable.filter((dir) => dir.startsWith(`${tree.child.dir}/`));
  assert.ok(finished.length > 0);
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.equal(
    report.skipped.find((skip) => skip.path === `${tree.child.dir}/raw`)?.reason,
    "manifest_unreadable",
  );
  for (const dir of finished) {
    assert.ok(!report.removed.some((entry) => entry.path === dir), dir);
    assert.equal((await fs.lstat(dir)).kind, "directory", dir);
  }
});

test("the listing cache holds at most its limit of sessions, dropping the least recently used", () => {
  const cache = new ListingCache(2);
  const state = (n: number) => ({ generation: `g${n}`, start: 0, bytes: n, messageCount: n });
  const derived = (n: number) => ({ userMessageCount: n, title: null });
  cache.set("/a", state(1), derived(1));
  cache.set("/b", state(2), derived(2));
  assert.deepEqual(cache.get("/a", state(1)), derived(1)); // /a is now the most recently used
  cache.set("/c", state(3), derived(3));
  assert.equal(cache.size, 2);
  assert.equal(cache.get("/b", state(2)), undefined);
  assert.deepEqual(cache.get("/a", state(1)), derived(1));
  assert.deepEqual(cache.get("/c", state(3)), derived(3));
});

test("a user's directory named like '.delete-<something>' is not a delete staging directory: left alone", async () => {
  const fs = await setup();
  const store = new SessionStore({ fs, agentDir: AGENT });
  const collection = `${AGENT}/sessions/${workspaceHash(CWD)}`;
  const session = await saved(store, [user("kept")]);
  const other = await saved(store, [user("deleted")]);
  // The user's own directories: one holding notes, one empty.
  await fs.mkdir(`${collection}/.delete-drafts`);
  await fs.writeFile(`${collection}/.delete-drafts/notes.txt`, encoder.encode("mine"));
  await fs.mkdir(`${collection}/.delete-later`);
  const listed = await store.listDetailed(CWD);
  assert.deepEqual(listed.failures, []);
  assert.deepEqual(listed.sessions.map((s) => s.id).sort(), [session.id, other.id].sort());
  const report = await store.cleanup(CWD);
  assert.deepEqual([report.kept, report.removed, report.restored], [[], [], []]);
  await store.archive.delete(CWD, [other.id], { archivedOnly: false });
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [session.id]);
  assert.equal(
    new TextDecoder().decode(await fs.readFile(`${collection}/.delete-drafts/notes.txt`)),
    "mine",
  );
  assert.equal((await fs.lstat(`${collection}/.delete-later`)).kind, "directory");
});
