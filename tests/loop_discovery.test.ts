import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { nodeFs } from "../adapters/node.ts";
import { FsIoError, NotFound, PermissionDenied } from "../src/port/errors.ts";
import { portableSha256, sha256Hex } from "../src/port/sha256.ts";
import {
  CorruptSessionError,
  InvalidArgumentError,
  SessionFormatError,
  UnsupportedSessionError,
} from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { comparePinnedFirst, compareSessions, type SessionInfo } from "../src/loop/discovery.ts";
import { verifySession } from "../src/loop/verify.ts";
import {
  encodeRoundIndex,
  HEAD_TEXT_BYTES,
  indexSizeBound,
  readListingIndex,
  type RoundIndex,
} from "../src/loop/storage.ts";
import {
  assistant,
  conversation,
  imageOnly,
  rewriteIndex,
  user,
  withoutRecordedTitle,
} from "./_fixtures.ts";
import { hookedFs, READ_MODES, recording, withoutNoFollow } from "./_hooks.ts";
import { runsOf } from "./_soak.ts";

const CWD = "/work/project";
const OTHER = "/work/other";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const GLOBAL = "/data/chats";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

interface Clock {
  t: number;
}

async function setup(
  options: { sessionDir?: string } = {},
): Promise<{ fs: MemoryFs; store: SessionStore; clock: Clock }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(OTHER, { recursive: true });
  const clock = { t: Date.parse("2026-02-01T00:00:00.000Z") };
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => clock.t, ...options });
  return { fs, store, clock };
}

async function saved(
  store: SessionStore,
  clock: Clock,
  history: Message[],
  cwd = CWD,
): Promise<SessionManager> {
  clock.t += 60_000;
  const session = await store.create(cwd);
  await session.commit(history);
  await session.close();
  return session;
}

function legacyFile(id: string, cwd: string, messages: readonly Message[], version = 2): string {
  const head = {
    format: "loop-session",
    version,
    id,
    cwd,
    createdAt: "2025-01-01T00:00:00.000Z",
    updatedAt: "2025-01-01T00:00:00.000Z",
    permissionPreset: "read-only",
  };
  return [head, ...messages].map((r) => JSON.stringify(r)).join("\n") + "\n";
}

test("list(cwd) lists both layouts, each session once, newest activity first", async () => {
  const { fs, store, clock } = await setup();
  const a = await saved(store, clock, conversation(2, "a"));
  const b = await saved(store, clock, [user("second session"), assistant("ok")]);
  const legacyId = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(
    `${COLLECTION}/${legacyId}.jsonl`,
    encoder.encode(legacyFile(legacyId, CWD, [user("old one")])),
  );
  // A migrated session's backup is not listed beside its directory.
  const migratedId = "1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(
    `${COLLECTION}/${migratedId}.jsonl`,
    encoder.encode(legacyFile(migratedId, CWD, [user("migrated")])),
  );
  await (await store.open(`${COLLECTION}/${migratedId}.jsonl`)).close();
  const listed = await store.list(CWD);
  assert.deepEqual(
    listed.map((s) => s.id),
    [b.id, a.id, migratedId, legacyId].sort((x, y) => {
      const order = [b.id, a.id];
      const ix = order.indexOf(x);
      const iy = order.indexOf(y);
      return (ix < 0 ? 2 : ix) - (iy < 0 ? 2 : iy) || y.localeCompare(x);
    }),
  );
  const first = listed[0] as SessionInfo;
  assert.equal(first.path, b.getSessionFile());
  assert.equal(first.storage, "directory");
  assert.equal(first.messageCount, 2);
  assert.equal(first.userMessageCount, 1);
  assert.equal(first.title?.text, "second session");
  assert.equal(first.title?.source, "fallback");
  assert.deepEqual(first.header.title, first.title);
  assert.equal(first.unread, true);
  assert.equal(first.pinned, false);
  assert.equal(first.archived, false);
  const legacy = listed.find((s) => s.id === legacyId) as SessionInfo;
  assert.equal(legacy.storage, "legacy");
  assert.equal(legacy.path, `${COLLECTION}/${legacyId}.jsonl`);
  const migrated = listed.find((s) => s.id === migratedId) as SessionInfo;
  assert.equal(migrated.storage, "directory");
});

test("list(undefined, sessionDir) lists an explicit collection without the cwd filter", async () => {
  const { store, clock } = await setup({ sessionDir: GLOBAL });
  const here = await saved(store, clock, [user("here")], CWD);
  const there = await saved(store, clock, [user("there")], OTHER);
  const all = await store.list(undefined, GLOBAL);
  assert.deepEqual(all.map((s) => s.id), [there.id, here.id]);
  assert.deepEqual(all.map((s) => s.cwd), [OTHER, CWD]);
  assert.deepEqual((await store.list()).map((s) => s.id), [there.id, here.id]);
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [here.id]);
  assert.deepEqual((await store.list(OTHER, GLOBAL)).map((s) => s.id), [there.id]);
});

test("list(undefined) needs a collection directory", async () => {
  const { store } = await setup();
  await assert.rejects(store.list(), InvalidArgumentError);
  await assert.rejects(store.list(undefined, "relative/dir"), InvalidArgumentError);
  assert.deepEqual(await store.list(undefined, "/no/such/collection"), []);
});

test("a listing's concurrency must be a positive integer; any such one lists the same", async () => {
  const { store, clock } = await setup();
  for (let i = 0; i < 5; i++) await saved(store, clock, [user(`s${i}`)]);
  for (const concurrency of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
    await assert.rejects(
      store.listDetailed(CWD, undefined, { concurrency }),
      (error) => error instanceof InvalidArgumentError && error.message.includes("concurrency"),
      String(concurrency),
    );
  }
  const expected = (await store.list(CWD)).map((s) => s.id);
  assert.equal(expected.length, 5);
  for (const concurrency of [1, 2, 64]) {
    for (const fast of [false, true]) {
      const listed = await store.list(CWD, undefined, { concurrency, fast });
      assert.deepEqual(listed.map((s) => s.id), expected, `${concurrency} ${fast}`);
    }
  }
});

test("unsupported formats and versions are skipped without modification", async () => {
  const { fs, store, clock } = await setup();
  const good = await saved(store, clock, [user("good")]);
  const v3 = "2b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(`${COLLECTION}/${v3}.jsonl`, encoder.encode(legacyFile(v3, CWD, [], 3)));
  const futureDir = "3b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.mkdir(`${COLLECTION}/${futureDir}`);
  await fs.writeFile(
    `${COLLECTION}/${futureDir}/meta.json`,
    encoder.encode(JSON.stringify({ format: "loop-session", version: 4 })),
  );
  const foreign = "4b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(
    `${COLLECTION}/${foreign}.jsonl`,
    encoder.encode(JSON.stringify({ format: "other-tool", version: 2 }) + "\n"),
  );
  const before = fs.snapshotTree(AGENT);
  for (const fast of [false, true]) {
    const result = await store.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(result.sessions.map((s) => s.id), [good.id]);
    assert.deepEqual(result.failures, []);
  }
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("an unsupported session is skipped whatever its log is, and an open refuses it as unsupported", async () => {
  const { fs, store, clock } = await setup();
  const good = await saved(store, clock, [user("good")]);
  const envelope = JSON.parse(decoder.decode(await fs.readFile(good.getSessionFile())));
  const id = "5b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const dir = `${COLLECTION}/${id}`;
  const metas: [string, unknown][] = [
    ["version 4", { format: "loop-session", version: 4, whatever: true }],
    ["another format", { format: "other-tool", version: 3 }],
    ["a header of another version", {
      ...envelope,
      header: { ...envelope.header, id, version: 3 },
    }],
  ];
  const logs = ["missing", "a file", "a directory", "a symlink", "a dangling symlink"] as const;
  for (const [what, meta] of metas) {
    for (const log of logs) {
      try {
        await fs.remove(dir, { recursive: true });
      } catch (error) {
        if (!(error instanceof NotFound)) throw error;
      }
      await fs.mkdir(dir);
      await fs.writeFile(`${dir}/meta.json`, encoder.encode(JSON.stringify(meta) + "\n"));
      const logFile = `${dir}/messages.jsonl`;
      if (log === "a file") await fs.writeFile(logFile, encoder.encode("x\n"));
      if (log === "a directory") await fs.mkdir(logFile);
      if (log === "a symlink") await fs.symlink(good.getSessionPath() + "/messages.jsonl", logFile);
      if (log === "a dangling symlink") await fs.symlink("/nowhere", logFile);
      const before = fs.snapshotTree(AGENT);
      for (const mode of READ_MODES) {
        const port = mode.port(fs);
        const lister = new SessionStore({ fs: port, agentDir: AGENT });
        for (const fast of [false, true]) {
          const label = `${what}, log ${log}, ${mode.name}, fast: ${fast}`;
          const result = await lister.listDetailed(CWD, undefined, { fast });
          assert.deepEqual(result.sessions.map((s) => s.id), [good.id], label);
          assert.deepEqual(result.failures, [], label);
          const listed = await lister.list(undefined, COLLECTION, { fast });
          assert.deepEqual(listed.map((s) => s.id), [good.id], label);
        }
        const label = `${what}, log ${log}, ${mode.name}`;
        const unsupported = (error: unknown) =>
          error instanceof UnsupportedSessionError && error.file === `${dir}/meta.json`;
        await assert.rejects(
          lister.open(`${dir}/meta.json`, { readOnly: true }),
          unsupported,
          label,
        );
        await assert.rejects(lister.open(`${dir}/meta.json`), unsupported, label);
      }
      assert.deepEqual(fs.snapshotTree(AGENT), before, `${what}, log ${log}`);
    }
  }
  // A supported session's log that is not a regular file is still refused, in both modes.
  await fs.remove(dir, { recursive: true });
  await fs.remove(`${good.getSessionPath()}/index.json`);
  await fs.remove(`${good.getSessionPath()}/messages.jsonl`);
  await fs.mkdir(`${good.getSessionPath()}/messages.jsonl`);
  for (const mode of READ_MODES) {
    const lister = new SessionStore({ fs: mode.port(fs), agentDir: AGENT });
    for (const fast of [false, true]) {
      const result = await lister.listDetailed(CWD, undefined, { fast });
      assert.deepEqual(result.sessions, [], `${mode.name}, fast: ${fast}`);
      assert.ok(result.failures[0]?.error instanceof SessionFormatError, `${mode.name}, ${fast}`);
    }
  }
});

test("a session that lost its meta.json after a save is a listing failure, never dropped", async () => {
  const { fs, store, clock } = await setup();
  const kept = await saved(store, clock, [user("kept")]);
  const lost = await saved(store, clock, [user("lost")]);
  const dir = lost.getSessionPath();
  await fs.remove(`${dir}/meta.json`);
  // A first save in progress (its log written, nothing committed yet) is not a failure.
  const draft = await store.create(CWD);
  await fs.mkdir(draft.getSessionPath());
  await fs.writeFile(`${draft.getSessionPath()}/messages.jsonl`, encoder.encode("{}\n"));
  const before = fs.snapshotTree(AGENT);
  const isLost = (error: unknown) =>
    error instanceof CorruptSessionError && error.file === `${dir}/meta.json` &&
    /index\.json/.test(error.message);
  for (const mode of READ_MODES) {
    const lister = new SessionStore({ fs: mode.port(fs), agentDir: AGENT });
    for (const fast of [false, true]) {
      const result = await lister.listDetailed(CWD, undefined, { fast });
      const label = `${mode.name}, fast: ${fast}`;
      assert.deepEqual(result.sessions.map((info) => info.id), [kept.id], label);
      assert.equal(result.failures.length, 1, label);
      assert.ok(isLost(result.failures[0]?.error), label);
    }
    await assert.rejects(lister.open(dir, { readOnly: true }), isLost);
    await assert.rejects(lister.open(dir), isLost);
  }
  assert.deepEqual(fs.snapshotTree(AGENT), before, "reading modified nothing");
  await assert.rejects(store.compact(dir), isLost);
  assert.deepEqual(fs.snapshotTree(AGENT), before, "a refused compaction changed nothing");
});

test("a damaged header inside a supported meta.json is reported, not skipped as unsupported", async () => {
  const damages: [string, (header: Record<string, unknown>) => unknown, string][] = [
    ["null", () => null, "header"],
    ["an array", () => [], "header"],
    ["empty", () => ({}), "header.format"],
    ["without format", ({ format: _, ...rest }) => rest, "header.format"],
    ["without version", ({ version: _, ...rest }) => rest, "header.version"],
    ["with a text version", (header) => ({ ...header, version: "2" }), "header.version"],
  ];
  for (const [what, damage, path] of damages) {
    const { fs, store, clock } = await setup();
    const session = await saved(store, clock, [user(what)]);
    const file = session.getSessionFile();
    const meta = JSON.parse(decoder.decode(await fs.readFile(file)));
    meta.header = damage(meta.header);
    await fs.writeFile(file, encoder.encode(JSON.stringify(meta)));
    const before = fs.snapshotTree(AGENT);
    const named = (error: unknown) =>
      error instanceof SessionFormatError && error.file === file && error.path === path;
    for (const fast of [false, true]) {
      for (const [cwd, dir] of [[CWD, undefined], [undefined, COLLECTION]] as const) {
        const result = await store.listDetailed(cwd, dir, { fast });
        assert.deepEqual(result.sessions, [], what);
        assert.equal(result.failures.length, 1, what);
        assert.ok(named(result.failures[0]?.error), `${what}: ${result.failures[0]?.error}`);
      }
    }
    await assert.rejects(store.open(file, { readOnly: true }), named, what);
    assert.deepEqual(fs.snapshotTree(AGENT), before, what);
  }
  // A header of another version inside the envelope is one this library does not read: skipped.
  const { fs, store, clock } = await setup();
  const future = await saved(store, clock, [user("future header")]);
  const meta = JSON.parse(decoder.decode(await fs.readFile(future.getSessionFile())));
  meta.header.version = 3;
  await fs.writeFile(future.getSessionFile(), encoder.encode(JSON.stringify(meta)));
  for (const fast of [false, true]) {
    assert.deepEqual(await store.listDetailed(CWD, undefined, { fast }), {
      sessions: [],
      failures: [],
    });
  }
});

test("invalid JSON, invalid metadata and corruption are reported as typed failures", async () => {
  const { fs, store, clock } = await setup();
  const good = await saved(store, clock, [user("good")]);
  const badJson = await saved(store, clock, [user("bad json")]);
  await fs.writeFile(badJson.getSessionFile(), encoder.encode("{nope"));
  const badMeta = await saved(store, clock, [user("bad meta")]);
  const meta = JSON.parse(decoder.decode(await fs.readFile(badMeta.getSessionFile())));
  meta.header.pinnedAt = "yesterday";
  await fs.writeFile(badMeta.getSessionFile(), encoder.encode(JSON.stringify(meta)));
  const corrupt = await saved(store, clock, [user("corrupt")]);
  const log = `${corrupt.getSessionPath()}/messages.jsonl`;
  const bytes = await fs.readFile(log);
  const at = decoder.decode(bytes).indexOf("corrupt");
  bytes[at] = 0x43; // "Corrupt": still valid JSON, but the checksum no longer matches
  await fs.writeFile(log, bytes);
  const legacyId = "5b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(`${COLLECTION}/${legacyId}.jsonl`, encoder.encode("{broken\n"));
  const before = fs.snapshotTree(AGENT);

  // list() throws the first failure in collection order (by id): one of the typed errors.
  await assert.rejects(
    store.list(CWD),
    (error) => error instanceof SessionFormatError || error instanceof CorruptSessionError,
  );
  const full = await store.listDetailed(CWD);
  assert.deepEqual(full.sessions.map((s) => s.id), [good.id]);
  const byId = new Map(full.failures.map((f) => [f.id, f.error]));
  assert.ok(byId.get(badJson.id) instanceof SessionFormatError);
  assert.ok(byId.get(badMeta.id) instanceof SessionFormatError);
  assert.ok(byId.get(corrupt.id) instanceof CorruptSessionError);
  assert.ok(byId.get(legacyId) instanceof SessionFormatError);
  assert.equal(full.failures.length, 4);
  // Fast mode trusts the committed range, so only the unreadable files fail there.
  const fast = await store.listDetailed(CWD, undefined, { fast: true });
  assert.deepEqual(fast.sessions.map((s) => s.id).sort(), [good.id, corrupt.id].sort());
  assert.equal(fast.failures.length, 3);
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("hostile names in a collection are skipped and never followed", async () => {
  const { fs, store, clock } = await setup();
  const good = await saved(store, clock, [user("good")]);
  const elsewhere = await saved(store, clock, [user("elsewhere")], OTHER);
  const elsewhereCollection = elsewhere.getSessionDir();
  const linkId = "6b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.symlink(elsewhere.getSessionPath(), `${COLLECTION}/${linkId}`);
  await fs.symlink(`${elsewhereCollection}/x.jsonl`, `${COLLECTION}/${linkId}.jsonl`);
  const dirId = "7b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.mkdir(`${COLLECTION}/${dirId}.jsonl`);
  const fileId = "8b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(`${COLLECTION}/${fileId}`, encoder.encode("not a directory"));
  await fs.mkdir(`${COLLECTION}/not-a-uuid`);
  await fs.writeFile(`${COLLECTION}/NOTES.jsonl`, encoder.encode("{}\n"));
  await fs.writeFile(
    `${COLLECTION}/9B8F2F9E-3C1D-4A5B-9E6F-7A8B9C0D1E2F.jsonl`,
    encoder.encode(legacyFile("9b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f", CWD, [user("upper")])),
  );
  await fs.mkdir(`${COLLECTION}/.delete-0000`);
  const result = await store.listDetailed(undefined, COLLECTION);
  assert.deepEqual(result.sessions.map((s) => s.id), [good.id]);
  assert.deepEqual(result.failures, []);
});

test("fast mode gives the same listing as the full mode for valid sessions", async () => {
  const { fs, store, clock } = await setup();
  const a = await saved(store, clock, conversation(5));
  await saved(store, clock, [
    {
      role: "user",
      content: [{ type: "image", data: "AAAA", mimeType: "image/png" }],
      timestamp: 1,
    } as Message,
    assistant("saw an image"),
    user("now a text question"),
  ]);
  const titled = await saved(store, clock, [user("untitled text")]);
  const manager = await store.open(titled.getSessionPath());
  await manager.setTitle({ text: "Stored title", source: "user", messageIndices: [] });
  await manager.setPinned(true);
  await manager.close();
  const archived = await saved(store, clock, [user("archived one")]);
  await store.archive.set(CWD, [archived.id], true);
  const legacyId = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(
    `${COLLECTION}/${legacyId}.jsonl`,
    encoder.encode(legacyFile(legacyId, CWD, conversation(2))),
  );
  const full = await store.list(CWD);
  const fast = await store.list(CWD, undefined, { fast: true });
  assert.deepEqual(fast, full);
  assert.equal(full.length, 5);
  const image = full.find((s) => s.userMessageCount === 2) as SessionInfo;
  assert.deepEqual(image.title, {
    text: "now a text question",
    source: "fallback",
    messageIndices: [2],
  });
  const pinned = full.find((s) => s.id === titled.id) as SessionInfo;
  assert.equal(pinned.title?.text, "Stored title");
  assert.equal(pinned.pinned, true);
  assert.equal(full.find((s) => s.id === archived.id)?.archived, true);
  assert.equal(full.find((s) => s.id === a.id)?.userMessageCount, 5);
});

for (const mode of READ_MODES) {
  test(`fast mode reads only meta.json and index.json, plus the first user message when the index records no title (${mode.name})`, async () => {
    const { fs, store, clock } = await setup();
    const sessions: SessionManager[] = [];
    for (let i = 0; i < 5; i++) {
      sessions.push(await saved(store, clock, conversation(200, `s${i}`)));
    }
    const titled = sessions[0] as SessionManager;
    const manager = await store.open(titled.getSessionPath());
    await manager.setTitle({ text: "Named", source: "user", messageIndices: [] });
    await manager.close();
    // An index as written before it recorded the fallback title.
    const unrecorded = sessions[1] as SessionManager;
    await withoutRecordedTitle(fs, unrecorded.getSessionPath());
    const { fs: recorded, reads } = recording(mode.port(fs));
    const calls: string[] = [];
    const watched = new Proxy(recorded, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          calls.push(`${String(prop)} ${String(args[0]).split("/").slice(-2).join("/")}`);
          return value.apply(target, args);
        };
      },
    });
    const fastStore = new SessionStore({ fs: watched, agentDir: AGENT });
    const listed = await fastStore.list(CWD, undefined, { fast: true });
    assert.equal(listed.length, 5);
    assert.deepEqual(listed, await store.list(CWD));
    for (const session of sessions) {
      const log = `${session.getSessionPath()}/messages.jsonl`;
      const logBytes = reads.filter((r) => r.path === log).reduce((sum, r) => sum + r.bytes, 0);
      const size = (await fs.stat(log)).size;
      if (session !== unrecorded) assert.equal(logBytes, 0);
      else assert.ok(logBytes <= 1024 && size > 100_000, `${logBytes} of ${size} bytes read`);
    }
    const files = new Set(reads.map((r) => r.path.split("/").pop()));
    assert.deepEqual([...files].sort(), ["index.json", "messages.jsonl", "meta.json"]);
    // What each session costs: with no-follow reads, a session with a stored title or one its
    // index records is two reads; one whose index records no title also opens its log
    // (no-follow, its kind from the open) to read the first user message from it, then reads
    // meta.json again to know that line was of the range it read first.
    for (const session of [titled, sessions[2] as SessionManager]) {
      const id = session.id;
      assert.deepEqual(
        calls.filter((call) => call.includes(id)),
        mode.name === "no-follow reads"
          ? [`readFileNoFollow ${id}/meta.json`, `readFileNoFollow ${id}/index.json`]
          : [
            `readDir ${workspaceHash(CWD)}/${id}`,
            `readFile ${id}/meta.json`,
            `readFile ${id}/index.json`,
          ],
      );
    }
    if (mode.name === "no-follow reads") {
      const other = unrecorded.id;
      assert.deepEqual(calls.filter((call) => call.includes(other)), [
        `readFileNoFollow ${other}/meta.json`,
        `readFileNoFollow ${other}/index.json`,
        `openNoFollow ${other}/messages.jsonl`,
        `readFileNoFollow ${other}/meta.json`,
      ]);
    }
  });
}

test("index.json records the fallback title, so a fast listing of untitled sessions opens no log", async () => {
  const { fs, store, clock } = await setup();
  const histories = {
    first: conversation(3),
    later: [imageOnly(), assistant("saw it"), user("   "), assistant("?"), user("the real ask")],
    none: [imageOnly(), assistant("saw it")],
  };
  const dirs: Record<string, string> = {};
  for (const [name, history] of Object.entries(histories)) {
    dirs[name] = (await saved(store, clock, history)).getSessionPath();
  }
  const recordedTitle = async (dir: string) =>
    JSON.parse(decoder.decode(await fs.readFile(`${dir}/index.json`))).fallbackTitle;
  for (const [name, dir] of Object.entries(dirs)) {
    const reader = await store.open(dir, { readOnly: true });
    // What the index records is what the session's header derives, null for none.
    assert.deepEqual(await recordedTitle(dir), reader.getHeader().title ?? null, name);
    await reader.close();
  }
  assert.deepEqual(await recordedTitle(dirs.later as string), {
    text: "the real ask",
    source: "fallback",
    messageIndices: [4],
  });
  assert.equal(await recordedTitle(dirs.none as string), null);
  const logCalls = () => {
    const calls: string[] = [];
    const watched = hookedFs(fs, {
      before(method, args) {
        if (String(args[0]).endsWith("/messages.jsonl")) calls.push(method);
        return Promise.resolve();
      },
    });
    return { calls, store: new SessionStore({ fs: watched, agentDir: AGENT }) };
  };
  const first = logCalls();
  const listed = await first.store.list(CWD, undefined, { fast: true });
  assert.deepEqual(first.calls, []);
  assert.deepEqual(listed, await store.list(CWD));
  // A new first message makes a new generation: its index records the new title.
  const writer = await store.open(dirs.first as string);
  await writer.commit([user("a new first question"), ...writer.messages.slice(1)]);
  await writer.close();
  const again = logCalls();
  const relisted = await again.store.list(CWD, undefined, { fast: true });
  assert.deepEqual(again.calls, []);
  assert.equal(
    relisted.find((s) => s.path.startsWith(dirs.first as string))?.title?.text,
    "a new first question",
  );
  assert.deepEqual(relisted, await store.list(CWD));
});

test("the recorded title is that of the saved text, though the caller changed a saved message object in place", async () => {
  const { fs, store } = await setup();
  const writer = await store.create(CWD);
  const history = [user("original question"), assistant("a")];
  await writer.commit(history);
  // Saved messages are recognized by identity: this change is never saved.
  (history[0] as { content: string }).content = "never saved text";
  // Eight more rounds: the index lags enough to be written again.
  await writer.commit([...history, ...conversation(8, "more")]);
  assert.equal(writer.getHeader().title?.text, "original question");
  await writer.close();
  const index = JSON.parse(
    decoder.decode(await fs.readFile(`${writer.getSessionPath()}/index.json`)),
  );
  assert.equal(
    index.messageCount,
    2 + conversation(8).length,
    "the index was written by the second save",
  );
  assert.equal(index.fallbackTitle.text, "original question");
  const fast = await store.list(CWD, undefined, { fast: true });
  assert.equal(fast[0]?.title?.text, "original question");
  assert.deepEqual(fast, await store.list(CWD));
});

for (const damage of ["no recorded title", "a wrong recorded title"] as const) {
  test(`a writer's page read rewrites an index with ${damage}, and listings then read no log`, async () => {
    const { fs, store, clock } = await setup();
    const session = await saved(store, clock, conversation(3));
    const dir = session.getSessionPath();
    const written = await fs.readFile(`${dir}/index.json`);
    await rewriteIndex(
      fs,
      dir,
      ({ fallbackTitle: _title, ...index }) =>
        damage === "no recorded title"
          ? index
          : { ...index, fallbackTitle: { text: "Wrong", source: "fallback", messageIndices: [0] } },
    );
    // A read-only manager writes nothing; a writer's page read puts the index right.
    const reader = await store.open(dir, { readOnly: true });
    await reader.readHistory();
    await reader.close();
    assert.notDeepEqual(await fs.readFile(`${dir}/index.json`), written);
    const writer = await store.open(dir);
    await writer.readHistory();
    await writer.close();
    assert.deepEqual(await fs.readFile(`${dir}/index.json`), written);
    const { fs: watched, reads } = recording(fs);
    const listed = await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
      fast: true,
    });
    assert.equal(listed[0]?.title?.text, "r0 question ✓");
    assert.ok(!reads.some((r) => r.path.endsWith("/messages.jsonl")));
  });
}

test("a recorded title that names no user round of the index is not used: the title comes from the log", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(3));
  // Message 1 is the first assistant reply: a title recorded for it is not the session's.
  await rewriteIndex(fs, session.getSessionPath(), (index) => ({
    ...index,
    fallbackTitle: { text: "Wrong", source: "fallback", messageIndices: [1] },
  }));
  const { fs: watched, reads } = recording(fs);
  const listed = await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  });
  assert.equal(listed[0]?.title?.text, "r0 question ✓");
  assert.equal(listed[0]?.userMessageCount, 3);
  assert.ok(reads.some((r) => r.path.endsWith("/messages.jsonl")));
});

test("a recorded title is listed with a fallback title's fields only, and a caller changing it changes no later listing", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(2));
  await rewriteIndex(fs, session.getSessionPath(), (index) => ({
    ...index,
    fallbackTitle: { ...index.fallbackTitle, extra: { a: 1 } } as RoundIndex["fallbackTitle"],
  }));
  const expected = { text: "r0 question ✓", source: "fallback", messageIndices: [0] };
  const lister = new SessionStore({ fs, agentDir: AGENT });
  const first = await lister.list(CWD, undefined, { fast: true });
  assert.deepEqual(first[0]?.title, expected);
  (first[0]?.title?.messageIndices as number[]).push(9);
  // The same store again (its cache of derived titles), then a new one (the index again).
  assert.deepEqual((await lister.list(CWD, undefined, { fast: true }))[0]?.title, expected);
  assert.deepEqual((await store.list(CWD, undefined, { fast: true }))[0]?.title, expected);
});

test("fast mode with a stale index that covers a prefix scans only the unindexed tail", async () => {
  const { fs, store, clock } = await setup();
  const history = conversation(100);
  const session = await saved(store, clock, history);
  const indexPath = `${session.getSessionPath()}/index.json`;
  const staleIndex = await fs.readFile(indexPath);
  const writer = await store.open(session.getSessionPath());
  const more = [...history, user("tail one"), assistant("a"), user("tail two"), assistant("b")];
  await writer.commit(more);
  await writer.close();
  await fs.writeFile(indexPath, staleIndex);
  const log = `${session.getSessionPath()}/messages.jsonl`;
  const before = fs.snapshotTree(AGENT);
  const { fs: watched, reads } = recording(fs);
  const listed = await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  });
  assert.equal(listed[0]?.userMessageCount, 102);
  assert.equal(listed[0]?.messageCount, more.length);
  const tail = (await fs.stat(log)).size - JSON.parse(decoder.decode(staleIndex)).bytes;
  const logBytes = reads.filter((r) => r.path === log).reduce((sum, r) => sum + r.bytes, 0);
  assert.ok(logBytes <= tail + 1 + 1024, `${logBytes} bytes read for a ${tail}-byte tail`);
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("fast mode reads an unindexed tail of many MiB in bounded pieces (an index another writer left lagging)", async () => {
  const { fs, store, clock } = await setup();
  const start = [user("short start"), assistant("ok")];
  const session = await saved(store, clock, start);
  const dir = session.getSessionPath();
  const indexPath = `${dir}/index.json`;
  const staleIndex = await fs.readFile(indexPath); // covers the first two messages
  // About 5 MiB more, in 100 KB messages (the writer itself republishes its index past 1 MiB).
  const more: Message[] = [...start];
  for (let i = 0; i < 25; i++) {
    more.push(user(`question ${i} ${"q".repeat(100_000)}`), assistant("a".repeat(100_000)));
  }
  const writer = await store.open(dir);
  await writer.commit(more);
  await writer.close();
  await fs.writeFile(indexPath, staleIndex);
  const full = (await store.list(CWD))[0];
  const { fs: watched, reads } = recording(fs);
  const fast = (await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  }))[0];
  assert.equal(fast?.messageCount, more.length);
  assert.equal(fast?.userMessageCount, 26);
  assert.equal(full?.userMessageCount, 26);
  assert.deepEqual(fast?.title, full?.title);
  const log = `${dir}/messages.jsonl`;
  const logReads = reads.filter((r) => r.path === log).map((r) => r.bytes);
  const tail = (await fs.stat(log)).size - JSON.parse(decoder.decode(staleIndex)).bytes;
  assert.ok(tail > 4 * 1024 * 1024, `a ${tail}-byte tail`);
  assert.ok(Math.max(...logReads) <= 1024 * 1024, `reads of ${logReads.join(", ")} bytes`);
  assert.ok(
    logReads.reduce((sum, n) => sum + n, 0) <= tail + 1 + 1024,
    `${logReads.join(", ")} bytes read for a ${tail}-byte tail`,
  );
  // The same counts when the tail does not line up: one line too many for the counts (left to
  // the full scan, which reports the session's damage).
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  await fs.writeFile(
    `${dir}/meta.json`,
    encoder.encode(`${JSON.stringify({ ...meta, messageCount: meta.messageCount - 1 })}\n`),
  );
  const { failures } = await new SessionStore({ fs, agentDir: AGENT }).listDetailed(
    CWD,
    undefined,
    { fast: true },
  );
  assert.equal(failures.length, 1);
  assert.equal(failures[0]?.error.name, "CorruptSessionError");
});

test("fast mode counts and titles user messages another writer spaced or escaped in the unindexed tail", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, [user(""), assistant("ok")]);
  const dir = session.getSessionPath();
  const reader = await store.open(dir);
  await reader.readHistory(); // index.json covers these two messages: a prefix of what follows
  await reader.close();
  // Valid lines, not in JSON.stringify's compact form: a JSON writer's spacing, an escaped value.
  const tail = [
    '{"role": "user", "content": "Fix the flaky build", "timestamp": 5}',
    JSON.stringify(assistant("done")),
    '{"role":"\\u0075ser","content":"and the docs","timestamp":6}',
    JSON.stringify(assistant("done too")),
  ].map((line) => `${line}\n`).join("");
  const log = `${dir}/messages.jsonl`;
  const bytes = new Uint8Array([...(await fs.readFile(log)), ...encoder.encode(tail)]);
  await fs.writeFile(log, bytes);
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  meta.generation = sha256Hex(bytes);
  meta.bytes = bytes.length;
  meta.messageCount = 6;
  await fs.writeFile(`${dir}/meta.json`, encoder.encode(`${JSON.stringify(meta)}\n`));
  const full = (await store.list(CWD))[0];
  const fast = (await new SessionStore({ fs, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  }))[0];
  assert.equal(full?.userMessageCount, 3);
  assert.equal(full?.title?.text, "Fix the flaky build");
  assert.equal(fast?.messageCount, 6);
  assert.equal(fast?.userMessageCount, 3);
  assert.deepEqual(fast?.title, full?.title);
});

test("a staging directory a listing cannot look at is one failure, and every other session is listed", async () => {
  for (const leftover of ["delete staging", "delete journal", "compaction staging"] as const) {
    const { fs, store, clock } = await setup();
    const healthy = await saved(store, clock, [user("healthy"), assistant("ok")]);
    const other = await saved(store, clock, [user("other"), assistant("ok")]);
    // archive.json read, and a listed session not archived: the listing looks at the deletes
    // once more, and reports an unreadable one once all the same.
    await store.archive.set(CWD, [healthy.id], true);
    const collection = COLLECTION;
    const deletion = `${collection}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f`;
    let denied: string;
    if (leftover === "compaction staging") {
      denied = `${collection}/.staging-${other.id}-abcdef12`;
      await fs.mkdir(denied, { mode: 0o700 });
    } else {
      await fs.mkdir(deletion, { mode: 0o700 });
      await fs.writeFile(`${deletion}/intent.json`, encoder.encode("{}"));
      denied = leftover === "delete journal" ? `${deletion}/intent.json` : deletion;
    }
    // As a directory of mode 000 (or another owner's 0700) refuses a process; a journal, EIO.
    const refusing = hookedFs(fs, {
      before(method, args) {
        const path = String(args[0]);
        if (path !== denied && !path.startsWith(`${denied}/`)) return;
        if (leftover === "delete journal") throw new FsIoError("EIO", method, path, "I/O error");
        throw new PermissionDenied(method, path);
      },
    });
    const lister = new SessionStore({ fs: refusing, agentDir: AGENT });
    for (const fast of [true, false]) {
      const what = `${leftover}, fast ${fast}`;
      const listed = await lister.listDetailed(CWD, undefined, { fast });
      assert.deepEqual(
        listed.sessions.map((s) => s.id).sort(),
        [healthy.id, other.id].sort(),
        what,
      );
      if (leftover === "compaction staging") {
        // The session is in place: its leftover is never needed, and fails nothing.
        assert.deepEqual(listed.failures, [], what);
      } else {
        assert.deepEqual(listed.failures.map((f) => [f.path, f.id]), [[denied, undefined]], what);
      }
    }
    if (leftover === "compaction staging") {
      // With the session's directory gone, the leftover is where the session may be: its failure.
      await fs.remove(other.getSessionPath(), { recursive: true });
      const listed = await lister.listDetailed(CWD);
      assert.deepEqual(listed.sessions.map((s) => s.id), [healthy.id]);
      assert.deepEqual(listed.failures.map((f) => [f.id, f.error instanceof PermissionDenied]), [
        [other.id, true],
      ]);
    }
  }
});

test("a session a delete stages while it is listed, into a staging directory the listing cannot read, is a failure, never dropped", async () => {
  for (const fast of [true, false]) {
    const { fs, store, clock } = await setup();
    const session = await saved(store, clock, [user("keep me"), assistant("ok")]);
    const dir = session.getSessionPath();
    const staging = `${COLLECTION}/.delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f`;
    let raced = false;
    // Another process's delete stages the session after the listing read the collection and
    // before it reads the session; its staging directory refuses this process.
    const racing = hookedFs(fs, {
      async before(_method, args) {
        const path = String(args[0]);
        if (!raced && path.startsWith(`${dir}/`)) {
          raced = true;
          await fs.mkdir(staging, { mode: 0o700 });
          await fs.writeFile(`${staging}/intent.json`, encoder.encode("{}"));
          await fs.rename(dir, `${staging}/${session.id}`);
        }
        if (path === staging || path.startsWith(`${staging}/`)) {
          throw new PermissionDenied("readDir", path);
        }
      },
    });
    const listed = await new SessionStore({ fs: racing, agentDir: AGENT }).listDetailed(
      CWD,
      undefined,
      { fast },
    );
    assert.ok(raced);
    assert.deepEqual(listed.sessions, []);
    assert.deepEqual(
      listed.failures.map((f) => [f.id, f.path, f.error instanceof PermissionDenied]),
      [[session.id, staging, true]],
      `fast ${fast}`,
    );
  }
});

for (const damage of ["missing", "malformed", "another generation"] as const) {
  test(`fast mode with a ${damage} index scans the committed range and writes nothing`, async () => {
    const { fs, store, clock } = await setup();
    const history = conversation(7);
    const session = await saved(store, clock, history);
    const indexPath = `${session.getSessionPath()}/index.json`;
    if (damage === "missing") await fs.remove(indexPath);
    else if (damage === "malformed") await fs.writeFile(indexPath, encoder.encode("[1,2"));
    else {
      const index = JSON.parse(decoder.decode(await fs.readFile(indexPath)));
      index.start = 5;
      await fs.writeFile(indexPath, encoder.encode(JSON.stringify(index)));
    }
    const before = fs.snapshotTree(AGENT);
    const listed = await store.list(CWD, undefined, { fast: true });
    assert.equal(listed[0]?.userMessageCount, 7);
    assert.equal(listed[0]?.title?.text, "r0 question ✓");
    assert.deepEqual(fs.snapshotTree(AGENT), before);
  });
}

test("fast mode reads index.json once, also when its head sends it to the whole index", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(7));
  const indexPath = `${session.getSessionPath()}/index.json`;
  // Another generation's index: its head does not match, so the whole index is looked at.
  const index = JSON.parse(decoder.decode(await fs.readFile(indexPath)));
  index.generation = "0".repeat(64);
  await fs.writeFile(indexPath, encodeRoundIndex(index));
  const calls: string[] = [];
  const watched = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if (args[0] === indexPath) calls.push(String(prop));
        return value.apply(target, args);
      };
    },
  });
  const listed = await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  });
  assert.equal(listed[0]?.userMessageCount, 7);
  assert.deepEqual(calls, ["readFileNoFollow"]);
});

test("fast mode does without an index.json a no-follow read finds busy, and reports its I/O errors", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(4, "b"));
  const indexPath = `${session.getSessionPath()}/index.json`;
  const failing = (code: string) =>
    new Proxy(fs, {
      get(target, prop) {
        if (prop === "readFileNoFollow") {
          return (path: string) =>
            path === indexPath
              ? Promise.reject(new FsIoError(code, "read", path, "injected"))
              : target.readFileNoFollow(path);
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  // A lease held by another process: the open fails at once with EAGAIN instead of waiting.
  const busy = await new SessionStore({ fs: failing("EAGAIN"), agentDir: AGENT }).listDetailed(
    CWD,
    undefined,
    { fast: true },
  );
  assert.deepEqual(busy.failures, []);
  assert.equal(busy.sessions[0]?.userMessageCount, 4);
  assert.equal(busy.sessions[0]?.title?.text, "b0 question ✓");
  const broken = await new SessionStore({ fs: failing("EIO"), agentDir: AGENT }).listDetailed(
    CWD,
    undefined,
    { fast: true },
  );
  assert.deepEqual(broken.sessions, []);
  assert.equal((broken.failures[0]?.error as FsIoError).code, "EIO");
});

test("an I/O error reading meta.json or a legacy file is that entry's failure, in both modes", async () => {
  const { fs, store, clock } = await setup();
  const good = await saved(store, clock, conversation(2, "good"));
  const bad = await saved(store, clock, conversation(2, "bad"));
  const legacyId = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacyPath = `${COLLECTION}/${legacyId}.jsonl`;
  await fs.writeFile(legacyPath, encoder.encode(legacyFile(legacyId, CWD, [user("old one")])));
  const failing = new Set([`${bad.getSessionPath()}/meta.json`, legacyPath]);
  const eio = (path: string) => Promise.reject(new FsIoError("EIO", "read", path, "injected"));
  const broken = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        const path = args[0];
        // Every way a file's bytes are reached fails for these two paths.
        if (
          typeof path === "string" && failing.has(path) &&
          ["readFile", "readFileNoFollow", "open", "openNoFollow"].includes(String(prop))
        ) return eio(path);
        return value.apply(target, args);
      };
    },
  });
  const before = fs.snapshotTree("/");
  for (const fast of [false, true]) {
    const result = await new SessionStore({ fs: broken, agentDir: AGENT }).listDetailed(
      CWD,
      undefined,
      { fast },
    );
    assert.deepEqual(result.sessions.map((info) => info.id), [good.id], `fast: ${fast}`);
    const failures = result.failures.map((failure) => ({
      id: failure.id ?? "",
      code: (failure.error as FsIoError).code,
      path: (failure.error as FsIoError).path,
    }));
    assert.deepEqual(
      failures.sort((a, b) => a.id.localeCompare(b.id)),
      [
        { id: bad.id, code: "EIO", path: `${bad.getSessionPath()}/meta.json` },
        { id: legacyId, code: "EIO", path: legacyPath },
      ].sort((a, b) => a.id.localeCompare(b.id)),
      `fast: ${fast}`,
    );
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a log a no-follow open finds busy is opened by an open that waits, by listings, opens and page reads", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(3, "leased"));
  // The listing reads the log for the title only when the index records none.
  await withoutRecordedTitle(fs, session.getSessionPath());
  const log = `${session.getSessionPath()}/messages.jsonl`;
  const calls: string[] = [];
  // A lease held by another process: the non-blocking open fails at once with EAGAIN, while an
  // open that waits (here at once) gets the file.
  const leased = new Proxy(fs, {
    get(target, prop) {
      if (prop === "openNoFollow") {
        return (path: string) => {
          if (path !== log) return target.openNoFollow(path);
          calls.push("openNoFollow");
          return Promise.reject(new FsIoError("EAGAIN", "open", path, "injected lease"));
        };
      }
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if (args[0] === log) calls.push(String(prop));
        return value.apply(target, args);
      };
    },
  });
  const reader = new SessionStore({ fs: leased, agentDir: AGENT });
  const listed = await reader.listDetailed(CWD, undefined, { fast: true });
  assert.deepEqual(listed.failures, []);
  assert.equal(listed.sessions[0]?.title?.text, "leased0 question ✓");
  assert.deepEqual(calls, ["openNoFollow", "lstat", "open"]);
  const total = conversation(3, "leased").length;
  const opened = await reader.open(session.getSessionPath(), { readOnly: true });
  assert.equal(opened.messages.length, total);
  assert.equal((await opened.readHistory()).total, total);
  await opened.close();
  const writer = await reader.open(session.getSessionPath());
  assert.equal((await writer.readHistory()).total, total);
  await writer.close();
  assert.equal(calls.filter((call) => call === "openNoFollow").length, 4);
});

/** A damage to an index.json that otherwise matches its meta.json (or covers a prefix of it). */
interface IndexDamage {
  readonly name: string;
  readonly stale?: boolean;
  readonly damage: (
    index: { rounds: { messageIndex: number; byteOffset: number }[] },
    lines: string[],
  ) => void;
}

const INDEX_DAMAGES: readonly IndexDamage[] = [
  {
    name: "a first round off its line start",
    damage: (index) => void (index.rounds[0]!.byteOffset = 1),
  },
  { name: "no rounds", damage: (index) => void (index.rounds = []) },
  {
    name: "a first round at an assistant line",
    damage: (index, lines) =>
      void (index.rounds[0] = { messageIndex: 1, byteOffset: (lines[0] as string).length + 1 }),
  },
  {
    name: "an extra round packed closer than lines can be",
    damage: (index) => {
      const first = index.rounds[0] as { messageIndex: number; byteOffset: number };
      index.rounds.splice(1, 0, {
        messageIndex: first.messageIndex + 1,
        byteOffset: first.byteOffset + 1,
      });
    },
  },
  {
    name: "a stale prefix whose first round is off its line start",
    stale: true,
    damage: (index) => void (index.rounds[0]!.byteOffset = 1),
  },
];

for (const { name, stale, damage } of INDEX_DAMAGES) {
  test(`fast mode with ${name} in index.json falls back to a read-only scan`, async () => {
    const { fs, store, clock } = await setup();
    const history = conversation(6);
    const session = await saved(store, clock, history);
    const indexPath = `${session.getSessionPath()}/index.json`;
    if (stale === true) {
      const staleIndex = await fs.readFile(indexPath);
      const writer = await store.open(session.getSessionPath());
      await writer.commit([...history, user("tail"), assistant("ok")]);
      await writer.close();
      await fs.writeFile(indexPath, staleIndex);
    }
    const index = JSON.parse(decoder.decode(await fs.readFile(indexPath)));
    const log = decoder.decode(await fs.readFile(`${session.getSessionPath()}/messages.jsonl`));
    damage(index, log.split("\n"));
    await fs.writeFile(indexPath, encoder.encode(JSON.stringify(index)));
    const before = fs.snapshotTree(AGENT);
    const full = await store.listDetailed(CWD);
    const fast = await store.listDetailed(CWD, undefined, { fast: true });
    assert.deepEqual(fast, full);
    assert.deepEqual(fast.failures, []);
    assert.equal(fast.sessions[0]?.userMessageCount, stale === true ? 7 : 6);
    assert.equal(fast.sessions[0]?.title?.text, "r0 question ✓");
    assert.deepEqual(fs.snapshotTree(AGENT), before);
    // With a stored title no line is read: these damages still never give wrong counts.
    const titled = await store.open(session.getSessionPath());
    await titled.setTitle({ text: "Stored", source: "user", messageIndices: [] });
    await titled.close();
    await fs.writeFile(indexPath, encoder.encode(JSON.stringify(index)));
    const withTitle = await store.listDetailed(CWD, undefined, { fast: true });
    assert.deepEqual(withTitle, await store.listDetailed(CWD));
    assert.equal(withTitle.sessions[0]?.title?.text, "Stored");
  });
}

test("list(cwd) keeps sessions whose recorded cwd resolves to it, and skips vanished ones", async () => {
  const { fs, store, clock } = await setup({ sessionDir: GLOBAL });
  // A project recorded under /work/old was moved; /work/old now links to its new place.
  await fs.mkdir("/work/old", { recursive: true });
  const moved = await saved(store, clock, [user("moved")], "/work/old");
  const here = await saved(store, clock, [user("here")], CWD);
  await fs.rename("/work/old", "/work/new");
  await fs.symlink("/work/new", "/work/old");
  // A session whose cwd no longer exists matches nothing and fails nothing.
  await fs.mkdir("/work/gone", { recursive: true });
  await saved(store, clock, [user("gone")], "/work/gone");
  await fs.remove("/work/gone", { recursive: true });
  // Legacy sessions may record a path through a symlink.
  const legacyIds = [
    "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
    "1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
  ];
  for (const id of legacyIds) {
    await fs.writeFile(
      `${GLOBAL}/${id}.jsonl`,
      encoder.encode(legacyFile(id, "/work/old", [user("legacy")])),
    );
  }
  let realPaths = 0;
  const counting = new Proxy(fs, {
    get(target, prop) {
      if (prop === "realPath") {
        return (path: string) => {
          realPaths++;
          return target.realPath(path);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const watched = new SessionStore({ fs: counting, agentDir: AGENT, sessionDir: GLOBAL });
  const before = fs.snapshotTree("/");
  for (const fast of [false, true]) {
    for (const cwd of ["/work/new", "/work/old"]) {
      realPaths = 0;
      const result = await watched.listDetailed(cwd, undefined, { fast });
      assert.deepEqual(
        result.sessions.map((s) => s.id).sort(),
        [moved.id, ...legacyIds].sort(),
        `${cwd}, fast: ${fast}`,
      );
      assert.deepEqual(result.failures, [], `${cwd}, fast: ${fast}`);
      // The listing cwd, then each distinct recorded cwd once (/work/old, /work/project and, in
      // fast mode only, /work/gone: the full mode's validation finds it missing first).
      assert.equal(realPaths, 1 + (fast ? 3 : 2), `${cwd}, fast: ${fast}`);
    }
    const mine = await watched.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(mine.sessions.map((s) => s.id), [here.id]);
    assert.deepEqual(mine.failures, []);
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("the list is sorted by updatedAt as a string, then by id, both descending", async () => {
  const { fs, store } = await setup();
  await fs.mkdir(COLLECTION, { recursive: true });
  // By time the first is later; by string the second is (the order of the version-2 list).
  const sessions = [
    ["0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f", "2026-01-01T00:30:00.000Z"],
    ["1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f", "2026-01-01T01:00:00.000+02:00"],
    ["2b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f", "2026-01-01T00:30:00.000Z"],
  ] as const;
  for (const [id, updatedAt] of sessions) {
    const text = legacyFile(id, CWD, [user(id)]).replace(
      '"updatedAt":"2025-01-01T00:00:00.000Z"',
      `"updatedAt":"${updatedAt}"`,
    );
    await fs.writeFile(`${COLLECTION}/${id}.jsonl`, encoder.encode(text));
  }
  const expected = [sessions[1][0], sessions[2][0], sessions[0][0]];
  for (const fast of [false, true]) {
    assert.deepEqual((await store.list(CWD, undefined, { fast })).map((s) => s.id), expected);
  }
});

test("a session directory that never committed is skipped; listing modifies nothing", async () => {
  const { fs, store, clock } = await setup();
  const good = await saved(store, clock, [user("good")]);
  await fs.mkdir(`${COLLECTION}/ab8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f`);
  const before = fs.snapshotTree(AGENT);
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [good.id]);
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("an invalid archive.json fails list() and is reported by listDetailed()", async () => {
  const { fs, store, clock } = await setup();
  const good = await saved(store, clock, [user("good")]);
  await fs.writeFile(`${COLLECTION}/archive.json`, encoder.encode('["not-an-id"]\n'));
  await assert.rejects(store.list(CWD), SessionFormatError);
  const result = await store.listDetailed(CWD, undefined, { fast: true });
  assert.deepEqual(result.sessions.map((s) => s.id), [good.id]);
  assert.equal(result.failures[0]?.path, `${COLLECTION}/archive.json`);
});

test("pinned sessions can be put on top; ties fall back to activity then id", async () => {
  const { store, clock } = await setup();
  const older = await saved(store, clock, [user("older")]);
  const newer = await saved(store, clock, [user("newer")]);
  const manager = await store.open(older.getSessionPath());
  await manager.setPinned(true);
  await manager.close();
  assert.deepEqual((await store.list(CWD)).map((s) => s.id), [newer.id, older.id]);
  const pinnedFirst = await store.list(CWD, undefined, { fast: true, pinnedFirst: true });
  assert.deepEqual(pinnedFirst.map((s) => s.id), [older.id, newer.id]);
  const [a, b] = pinnedFirst as [SessionInfo, SessionInfo];
  assert.ok(comparePinnedFirst(a, b) < 0);
  assert.ok(compareSessions(a, b) > 0);
  const tie = { ...b, id: "ffffffff-ffff-ffff-ffff-ffffffffffff" };
  assert.ok(compareSessions(tie, b) < 0);
});

test("listing a legacy session in fast mode skips message validation but not the header", async () => {
  const { fs, store } = await setup();
  await fs.mkdir(COLLECTION, { recursive: true });
  const id = "cb8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const unpaired = [user("q"), assistant("calling", [{ id: "c1", name: "read" }])];
  await fs.writeFile(`${COLLECTION}/${id}.jsonl`, encoder.encode(legacyFile(id, CWD, unpaired)));
  await assert.rejects(store.list(CWD), SessionFormatError);
  const fast = await store.list(CWD, undefined, { fast: true });
  assert.equal(fast[0]?.messageCount, 2);
  assert.equal(fast[0]?.userMessageCount, 1);
});

test("a fast listing reports a user message whose content has no readable text as that session's failure", async () => {
  const malformed: [unknown, string][] = [
    [null, "content"],
    [[null], "content[0]"],
    [[{ type: "text", text: 5 }], "content[0].text"],
  ];
  for (const [content, path] of malformed) {
    // A legacy file, read unvalidated in fast mode.
    const { fs, store, clock } = await setup();
    const good = await saved(store, clock, conversation(1));
    const id = "cb8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
    const bad = [{ role: "user", content, timestamp: 1 }, assistant("answer")] as Message[];
    await fs.writeFile(`${COLLECTION}/${id}.jsonl`, encoder.encode(legacyFile(id, CWD, bad)));
    // A version-3 session whose committed log holds such a message, with no index.json.
    const v3 = await saved(store, clock, [user("placeholder"), assistant("answer")]);
    const dir = v3.getSessionPath();
    const bytes = encoder.encode(bad.map((message) => JSON.stringify(message) + "\n").join(""));
    await fs.writeFile(`${dir}/messages.jsonl`, bytes);
    const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
    Object.assign(meta, { start: 0, bytes: bytes.length, generation: sha256Hex(bytes) });
    await fs.writeFile(`${dir}/meta.json`, encoder.encode(JSON.stringify(meta)));
    await fs.remove(`${dir}/index.json`);
    const before = fs.snapshotTree(AGENT);
    for (const fast of [true, false]) {
      const listed = await store.listDetailed(CWD, undefined, { fast });
      assert.deepEqual(listed.sessions.map((session) => session.id), [good.id], `${path} ${fast}`);
      const failures = listed.failures.map((failure) => {
        assert.ok(failure.error instanceof SessionFormatError, `${path}: ${failure.error}`);
        return [failure.error.file, failure.error.path];
      }).sort();
      assert.deepEqual(
        failures,
        [
          [`${COLLECTION}/${id}.jsonl`, `messages[0].${path}`],
          [`${dir}/messages.jsonl`, `messages[0].${path}`],
        ].sort(),
        `${path} fast: ${fast}`,
      );
    }
    assert.deepEqual(fs.snapshotTree(AGENT), before);
  }
});

test("the longest head an index can have, with its fallback title and first round, is found in the bytes decoded for it", async () => {
  const max = Number.MAX_SAFE_INTEGER;
  // A title of 120 bytes that JSON escapes every one of.
  const longest = { text: '"'.repeat(120), source: "fallback" as const, messageIndices: [max - 1] };
  for (const fallbackTitle of [longest, null, undefined]) {
    const index = {
      format: "loop-session-index" as const,
      version: 1 as const,
      generation: "f".repeat(64),
      start: max,
      bytes: max,
      messageCount: max,
      fallbackTitle,
      rounds: [{ messageIndex: max - 1, byteOffset: max - 2 }, {
        messageIndex: max,
        byteOffset: max,
      }],
    };
    const bytes = encodeRoundIndex(index);
    const head = decoder.decode(bytes).indexOf("},{") + 1;
    assert.ok(head <= HEAD_TEXT_BYTES, `the head with its first round takes ${head} bytes`);
    const fs = new MemoryFs();
    await fs.mkdir("/s");
    await fs.writeFile("/s/index.json", bytes);
    // Read whole (a small committed state) and by its first bytes (a large one): the same head.
    // Both bound the size of an index enough for this one's (a larger file is not an index).
    for (
      const meta of [{ messageCount: 100, bytes: 10_000 }, { messageCount: 100_000, bytes: max }]
    ) {
      assert.ok(bytes.length <= indexSizeBound(meta.messageCount, meta.bytes));
      const read = await readListingIndex(fs, "/s", meta);
      assert.ok(read !== undefined && "head" in read, JSON.stringify(meta));
      assert.deepEqual(read.head, {
        generation: index.generation,
        start: max,
        bytes: max,
        messageCount: max,
        roundCount: 2,
        fallbackTitle,
        firstRound: { messageIndex: max - 1, byteOffset: max - 2 },
        // The byte offset of that round (its rounds are looked up from there).
        roundsAt: bytes.findIndex((_, i) =>
          decoder.decode(bytes.subarray(i, i + 16)) === '{"messageIndex":'
        ),
      });
    }
  }
});

test("the index text parser accepts exactly what the index schema accepts", async () => {
  const { parseRoundIndexText } = await import("../src/loop/storage.ts");
  const { encodeRoundIndex, RoundIndexSchema } = await import("../src/loop/storage.ts");
  const v = await import("valibot");
  const fc = (await import("fast-check")).default;
  const count = fc.nat({ max: Number.MAX_SAFE_INTEGER });
  // Title texts that `normalizeTitle` keeps, some with what the scanner looks for inside them.
  const titleText = fc.constantFrom(
    'Fix "the" build',
    "Übersicht 🙂",
    "x\\y",
    'a,"rounds":[b',
    "}]",
  );
  const index = fc.record({
    format: fc.constant("loop-session-index" as const),
    version: fc.constant(1 as const),
    generation: fc.stringMatching(/^[0-9a-f]{64}$/),
    start: count,
    bytes: count,
    messageCount: count,
    fallbackTitle: fc.option(
      fc.record({ text: titleText, source: fc.constant("fallback" as const), at: count }),
      { nil: undefined },
    ),
    titleIsNull: fc.boolean(),
    rounds: fc.array(fc.record({ messageIndex: count, byteOffset: count }), { maxLength: 20 }),
  }).map(({ fallbackTitle, titleIsNull, ...rest }) => ({
    ...rest,
    // A title names one of the messages the index covers.
    fallbackTitle: rest.messageCount === 0 || fallbackTitle === undefined
      ? (titleIsNull ? null : undefined)
      : {
        text: fallbackTitle.text,
        source: fallbackTitle.source,
        messageIndices: [fallbackTitle.at % rest.messageCount],
      },
  }));
  fc.assert(
    fc.property(index, (generated) => {
      const value = JSON.parse(JSON.stringify(generated));
      const text = decoder.decode(encodeRoundIndex(value));
      assert.deepEqual(parseRoundIndexText(text), value);
      // The same index in another JSON layout goes through JSON.parse and reads the same.
      assert.deepEqual(parseRoundIndexText(JSON.stringify(value, null, 1)), value);
    }),
    { numRuns: runsOf(100) },
  );
  const samples = [
    "",
    "{",
    "[]",
    '{"format":"loop-session-index","version":1}',
    '{"format":"loop-session-index","version":1,"generation":"' + "a".repeat(64) +
    '","start":0,"bytes":01,"messageCount":0,"rounds":[]}',
    '{"format":"loop-session-index","version":1,"generation":"' + "a".repeat(64) +
    '","start":0,"bytes":1,"messageCount":0,"rounds":[{"messageIndex":-1,"byteOffset":0}]}',
    '{"format":"loop-session-index","version":2,"generation":"' + "a".repeat(64) +
    '","start":0,"bytes":1,"messageCount":0,"rounds":[]}',
    '{"format":"loop-session-index","version":1,"generation":"' + "a".repeat(64) +
    '","start":0,"bytes":1,"messageCount":0,"rounds":[{"messageIndex":1.5,"byteOffset":0}]}',
    // Recorded titles: valid, and each way one is not a fallback title of a covered message.
    ...[
      "null",
      '{"text":"T","source":"fallback","messageIndices":[1]}',
      '{"text":"T","source":"fallback","messageIndices":[2]}',
      '{"text":"T","source":"user","messageIndices":[1]}',
      '{"text":"T","source":"fallback","messageIndices":[0,1]}',
      '{"text":"T","source":"fallback","messageIndices":[]}',
      '{"text":"T","source":"fallback","messageIndices":[1],"model":{"provider":"p","id":"m"}}',
      '{"text":" T","source":"fallback","messageIndices":[1]}',
      '{"text":"T","source":"fallback","messageIndices":[1]',
      "5",
      '"T"',
    ].map((title) =>
      '{"format":"loop-session-index","version":1,"generation":"' + "a".repeat(64) +
      '","start":0,"bytes":9,"messageCount":2,"roundCount":1,"fallbackTitle":' + title +
      ',"rounds":[{"messageIndex":1,"byteOffset":3}]}\n'
    ),
  ];
  for (const text of samples) {
    let expected: unknown;
    try {
      const result = v.safeParse(RoundIndexSchema, JSON.parse(text));
      if (result.success) {
        // The scanner leaves out roundCount (the number of rounds it returns).
        const { roundCount: _count, ...output } = result.output as { roundCount?: number };
        expected = output;
      }
    } catch {
      expected = undefined;
    }
    assert.deepEqual(parseRoundIndexText(text), expected, text);
  }
});

test("a repeated fast listing reuses derived titles until the generation changes", async () => {
  const { fs, clock } = await setup();
  const { fs: watched, reads } = recording(fs);
  const store = new SessionStore({ fs: watched, agentDir: AGENT, now: () => clock.t });
  const session = await saved(store, clock, conversation(3, "first"));
  // An index that records no title: the first listing derives it from the log.
  await withoutRecordedTitle(fs, session.getSessionPath());
  const log = `${session.getSessionPath()}/messages.jsonl`;
  const logReads = () => reads.filter((r) => r.path === log).length;
  assert.equal(
    (await store.list(CWD, undefined, { fast: true }))[0]?.title?.text,
    "first0 question ✓",
  );
  const afterFirst = logReads();
  assert.ok(afterFirst > 0);
  assert.equal(
    (await store.list(CWD, undefined, { fast: true }))[0]?.title?.text,
    "first0 question ✓",
  );
  assert.equal(logReads(), afterFirst);
  const writer = await store.open(session.getSessionPath());
  await writer.commit([user("renamed by a new first message"), ...writer.messages.slice(1)]);
  await writer.close();
  const listed = await store.list(CWD, undefined, { fast: true });
  assert.equal(listed[0]?.title?.text, "renamed by a new first message");
  assert.deepEqual(listed, await store.list(CWD));
});

for (const mode of READ_MODES) {
  test(`a repeated fast listing reads only meta.json until the generation changes (${mode.name})`, async () => {
    const { fs, clock } = await setup();
    const { fs: watched, reads } = recording(mode.port(fs));
    const store = new SessionStore({ fs: watched, agentDir: AGENT, now: () => clock.t });
    const titled = await saved(store, clock, conversation(4, "titled"));
    const writer = await store.open(titled.getSessionPath());
    await writer.setTitle({ text: "Stored", source: "user", messageIndices: [] });
    await writer.close();
    const derived = await saved(store, clock, conversation(3, "derived"));
    const readOf = (name: string) => reads.filter((r) => r.path.endsWith(`/${name}`)).length;
    const indexBefore = readOf("index.json"); // the writer's open read one
    const first = await store.list(CWD, undefined, { fast: true });
    assert.deepEqual(first.map((info) => info.userMessageCount).sort(), [3, 4]);
    const indexReads = readOf("index.json");
    const logReads = readOf("messages.jsonl");
    assert.equal(indexReads - indexBefore, 2);
    const metaReads = readOf("meta.json");
    const again = await store.list(CWD, undefined, { fast: true });
    assert.deepEqual(again, first);
    assert.equal(readOf("index.json"), indexReads, "no index.json is read again");
    assert.equal(readOf("messages.jsonl"), logReads, "no message is read again");
    assert.equal(readOf("meta.json"), metaReads + 2, "meta.json is read every time");
    // A new generation is read anew, and its counts are right.
    const next = await store.open(derived.getSessionPath());
    await next.commit([...next.messages, user("one more")]);
    await next.close();
    const beforeAfter = readOf("index.json"); // the writer's open read one
    const after = await store.list(CWD, undefined, { fast: true });
    assert.equal(readOf("index.json"), beforeAfter + 1);
    assert.deepEqual(after, await store.list(CWD));
    assert.equal(after.find((info) => info.id === derived.id)?.userMessageCount, 4);
    // What is remembered never hides a meta.json planted as a link, nor an index.json that is no
    // longer a regular file (its counts are derived again, from the log).
    const dir = titled.getSessionPath();
    await fs.rename(`${dir}/index.json`, "/planted-index.json");
    await fs.symlink("/planted-index.json", `${dir}/index.json`);
    const unindexed = readOf("messages.jsonl");
    assert.deepEqual(await store.list(CWD, undefined, { fast: true }), after);
    assert.ok(readOf("messages.jsonl") > unindexed, "the log is scanned without its index");
    await fs.rename(`${dir}/meta.json`, "/planted-meta.json");
    await fs.symlink("/planted-meta.json", `${dir}/meta.json`);
    const result = await store.listDetailed(CWD, undefined, { fast: true });
    assert.deepEqual(result.sessions.map((info) => info.id), [derived.id]);
    assert.ok(result.failures[0]?.error instanceof SessionFormatError);
    assert.equal((result.failures[0]?.error as SessionFormatError).file, `${dir}/meta.json`);
  });
}

test("a fast listing with a directory listing refuses a linked log it does not read", async () => {
  const { fs, clock } = await setup();
  const store = new SessionStore({ fs: withoutNoFollow(fs), agentDir: AGENT, now: () => clock.t });
  const titled = await saved(store, clock, conversation(4, "titled"));
  const writer = await store.open(titled.getSessionPath());
  await writer.setTitle({ text: "Stored", source: "user", messageIndices: [] });
  await writer.close();
  assert.equal((await store.list(CWD, undefined, { fast: true })).length, 1);
  await fs.remove(`${titled.getSessionPath()}/messages.jsonl`);
  await fs.symlink("/elsewhere", `${titled.getSessionPath()}/messages.jsonl`);
  const result = await store.listDetailed(CWD, undefined, { fast: true });
  assert.deepEqual(result.sessions, []);
  assert.ok(result.failures[0]?.error instanceof SessionFormatError);
});

test("a repeated fast listing reports what a first listing would after meta.json or the index changes", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(3, "kept"));
  const dir = session.getSessionPath();
  const fresh = () =>
    new SessionStore({ fs, agentDir: AGENT }).listDetailed(CWD, undefined, { fast: true });
  const summary = (result: Awaited<ReturnType<typeof fresh>>) => ({
    sessions: result.sessions,
    failures: result.failures.map((f) => [f.id, f.error.constructor.name]),
  });
  const first = await store.listDetailed(CWD, undefined, { fast: true });
  assert.equal(first.sessions[0]?.userMessageCount, 3);
  // A title handed out can be changed by its caller without changing the next listing.
  (first.sessions[0]?.title as { text: string }).text = "changed by the caller";
  assert.equal(
    (await store.list(CWD, undefined, { fast: true }))[0]?.title?.text,
    "kept0 question ✓",
  );
  // meta.json rewritten with the same generation and count but another committed range.
  const meta = JSON.parse(decoder.decode(await fs.readFile(session.getSessionFile())));
  meta.bytes -= 3;
  await fs.writeFile(session.getSessionFile(), encoder.encode(JSON.stringify(meta) + "\n"));
  const shrunk = await store.listDetailed(CWD, undefined, { fast: true });
  assert.deepEqual(summary(shrunk), summary(await fresh()));
  assert.ok(shrunk.failures[0]?.error instanceof CorruptSessionError);
  meta.bytes += 3;
  await fs.writeFile(session.getSessionFile(), encoder.encode(JSON.stringify(meta) + "\n"));
  const restored = await store.listDetailed(CWD, undefined, { fast: true });
  assert.deepEqual(summary(restored), summary(await fresh()));
  assert.deepEqual(restored.failures, []);
  // Without index.json a listing scans the committed range, so damage there is reported.
  await fs.remove(`${dir}/index.json`);
  const log = await fs.readFile(`${dir}/messages.jsonl`);
  log[5] = log[5] === 0x61 ? 0x62 : 0x61;
  await fs.writeFile(`${dir}/messages.jsonl`, log);
  const damaged = await store.listDetailed(CWD, undefined, { fast: true });
  assert.deepEqual(summary(damaged), summary(await fresh()));
  assert.ok(damaged.failures[0]?.error instanceof CorruptSessionError);
});

test("metadata that lies about its message count is reported in both modes", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(3));
  const meta = JSON.parse(decoder.decode(await fs.readFile(session.getSessionFile())));
  meta.messageCount += 2;
  await fs.writeFile(session.getSessionFile(), encoder.encode(JSON.stringify(meta) + "\n"));
  const before = fs.snapshotTree(AGENT);
  for (const fast of [false, true]) {
    const result = await store.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(result.sessions, [], `fast: ${fast}`);
    assert.ok(result.failures[0]?.error instanceof CorruptSessionError, `fast: ${fast}`);
  }
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("metadata that claims no messages over a non-empty range, or an empty range of another hash, is reported in both modes, by open and by verify", async () => {
  const EMPTY = sha256Hex(new Uint8Array(0));
  const damages: [string, (meta: Record<string, unknown>) => void][] = [
    ["count 0 over the range", (meta) => (meta.messageCount = 0)],
    ["count 0 over the range, empty generation", (meta) => {
      meta.messageCount = 0;
      meta.generation = EMPTY;
    }],
    ["an empty range of the old generation", (meta) => {
      meta.messageCount = 0;
      meta.bytes = 0;
    }],
    ["an empty range of another generation", (meta) => {
      meta.messageCount = 0;
      meta.bytes = 0;
      meta.generation = "0".repeat(64);
    }],
  ];
  for (const [what, damage] of damages) {
    for (const mode of READ_MODES) {
      const { fs, store, clock } = await setup();
      const session = await saved(store, clock, conversation(3));
      const file = session.getSessionFile();
      // A first listing fills the store's listing cache with the valid state.
      const listed = await store.list(CWD, undefined, { fast: true });
      assert.equal(listed[0]?.messageCount, conversation(3).length);
      const meta = JSON.parse(decoder.decode(await fs.readFile(file)));
      damage(meta);
      await fs.writeFile(file, encoder.encode(JSON.stringify(meta) + "\n"));
      const before = fs.snapshotTree(AGENT);
      const port = mode.port(fs);
      for (const lister of [store, new SessionStore({ fs: port, agentDir: AGENT })]) {
        for (const fast of [false, true]) {
          const label = `${what}, ${mode.name}, fast: ${fast}`;
          const result = await lister.listDetailed(CWD, undefined, { fast });
          assert.deepEqual(result.sessions, [], label);
          assert.equal(result.failures.length, 1, label);
          assert.ok(result.failures[0]?.error instanceof CorruptSessionError, label);
          assert.equal(result.failures[0]?.id, session.id, label);
        }
      }
      const reader = new SessionStore({ fs: port, agentDir: AGENT });
      await assert.rejects(reader.open(file, { readOnly: true }), CorruptSessionError, what);
      await assert.rejects(reader.open(file), CorruptSessionError, what);
      const report = await verifySession(port, session.getSessionPath(), {
        sha256: portableSha256,
      });
      assert.equal(report.ok, false, what);
      assert.ok(report.findings.some((f) => f.severity === "error"), what);
      assert.deepEqual(fs.snapshotTree(AGENT), before, what);
    }
  }
  // A history cleared (nothing committed after earlier generations) lists as before.
  const { fs, store, clock } = await setup();
  const cleared = await saved(store, clock, conversation(2));
  const again = await store.open(cleared.getSessionFile());
  await again.commit([]);
  await again.close();
  const meta = JSON.parse(decoder.decode(await fs.readFile(cleared.getSessionFile())));
  assert.deepEqual([meta.messageCount, meta.bytes, meta.generation], [0, 0, EMPTY]);
  assert.ok(meta.start > 0);
  for (const mode of READ_MODES) {
    for (const fast of [false, true]) {
      const lister = new SessionStore({ fs: mode.port(fs), agentDir: AGENT });
      const result = await lister.listDetailed(CWD, undefined, { fast });
      assert.deepEqual(result.failures, [], `${mode.name}, fast: ${fast}`);
      assert.deepEqual(
        result.sessions.map((s) => [s.id, s.messageCount, s.userMessageCount]),
        [[cleared.id, 0, 0]],
      );
    }
  }
});

test("fast listing reads a few KiB of a large index whatever the history's length", async () => {
  const { fs, store, clock } = await setup();
  const big = await saved(store, clock, conversation(2500, "b"));
  const indexPath = `${big.getSessionPath()}/index.json`;
  assert.ok((await fs.stat(indexPath)).size > 64 * 1024);
  const { fs: counted, reads } = recording(fs);
  const fast = await new SessionStore({ fs: counted, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  });
  const full = await store.list(CWD);
  assert.equal(fast[0]?.userMessageCount, full[0]?.userMessageCount);
  assert.equal(fast[0]?.userMessageCount, 2500);
  assert.deepEqual(fast[0]?.title, full[0]?.title);
  const indexBytes = reads.filter((r) => r.path === indexPath).reduce((n, r) => n + r.bytes, 0);
  assert.ok(indexBytes <= 4096, `read ${indexBytes} bytes of index.json`);
  const logBytes = reads.filter((r) => r.path.endsWith("messages.jsonl")).reduce(
    (n, r) => n + r.bytes,
    0,
  );
  assert.ok(logBytes < 4096, `read ${logBytes} bytes of the log`);
});

test("fast listing of a large index that lags, or whose head lies, still counts right", async () => {
  const { fs, store, clock } = await setup();
  const big = await saved(store, clock, conversation(2500, "c"));
  const reopened = await store.open(big.getSessionPath());
  const history = reopened.messages;
  history.push(user("one more"), assistant("ok"));
  await reopened.commit(history); // a small lag: index.json stays a valid prefix
  const lagging = await store.list(CWD, undefined, { fast: true });
  assert.equal(lagging[0]?.userMessageCount, 2501);
  await reopened.close();
  const indexPath = `${big.getSessionPath()}/index.json`;
  const text = decoder.decode(await fs.readFile(indexPath));
  await fs.writeFile(
    indexPath,
    encoder.encode(text.replace(/"roundCount":\d+/, '"roundCount":99999')),
  );
  const lying = await store.list(CWD, undefined, { fast: true });
  assert.equal(lying[0]?.userMessageCount, 2501);
});

for (const mode of READ_MODES) {
  test(`fast listing reads a small index.json in one call and a large one by its head (${mode.name})`, async () => {
    const { fs, store, clock } = await setup();
    const small = await saved(store, clock, conversation(20, "s"));
    const big = await saved(store, clock, conversation(2500, "b"));
    const calls: string[] = [];
    const port = mode.port(fs);
    const watched = new Proxy(port, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          const path = String(args[0]);
          if (path.endsWith("/index.json")) calls.push(`${String(prop)} ${path}`);
          return value.apply(target, args);
        };
      },
    });
    const listed = await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
      fast: true,
    });
    assert.deepEqual(listed.map((s) => s.userMessageCount).sort((a, b) => a - b), [20, 2500]);
    const expected = mode.name === "no-follow reads"
      ? [
        // A large index is read by its head, through a handle opened without following a link.
        `openNoFollow ${big.getSessionPath()}/index.json`,
        `readFileNoFollow ${small.getSessionPath()}/index.json`,
      ]
      : [
        `open ${big.getSessionPath()}/index.json`,
        `readFile ${small.getSessionPath()}/index.json`,
      ];
    assert.deepEqual(calls.sort(), expected.sort());
  });
}

test("fast listing uses a valid index.json written in another form, without reading the log", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(30, "p"));
  const manager = await store.open(session.getSessionPath());
  await manager.setTitle({ text: "Named", source: "user", messageIndices: [] });
  await manager.close();
  // The same index, pretty-printed with its keys in another order: not the canonical head.
  const indexPath = `${session.getSessionPath()}/index.json`;
  const index = JSON.parse(new TextDecoder().decode(await fs.readFile(indexPath)));
  const { rounds, roundCount, ...rest } = index;
  const other = { rounds, ...rest, roundCount };
  await fs.writeFile(indexPath, new TextEncoder().encode(JSON.stringify(other, null, 2)));
  const { fs: watched, reads } = recording(fs);
  const listed = await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  });
  assert.equal(listed[0]?.userMessageCount, 30);
  assert.equal(listed[0]?.messageCount, session.messages.length);
  assert.deepEqual(reads.filter((r) => r.path.endsWith("/messages.jsonl")), []);
});

test("fast listing never reads an index.json that is not a regular file", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(3, "l"));
  const indexPath = `${session.getSessionPath()}/index.json`;
  // A link to an endless file would hang a listing that read it; here it points at a real index.
  await fs.rename(indexPath, "/planted-index.json");
  await fs.symlink("/planted-index.json", indexPath);
  const read: string[] = [];
  const watched = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if ((prop === "readFile" || prop === "open") && args[0] === indexPath) read.push(indexPath);
        return value.apply(target, args);
      };
    },
  });
  const before = fs.snapshotTree(AGENT);
  const fast = await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  });
  assert.deepEqual(read, []);
  // The index is unusable, so the committed range is scanned: the counts are still right.
  assert.equal(fast[0]?.userMessageCount, 3);
  assert.equal(fast[0]?.title?.text, "l0 question ✓");
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("fast and full listings refuse a meta.json, or a messages.jsonl the fast one reads, that is a link alike", async () => {
  for (const file of ["meta.json", "messages.jsonl"]) {
    const { fs, store, clock } = await setup();
    const session = await saved(store, clock, conversation(2, "k"));
    // A fast listing reads the log only for a title the index does not record (as it never reads
    // it for a stored title): here it does.
    await withoutRecordedTitle(fs, session.getSessionPath());
    const path = `${session.getSessionPath()}/${file}`;
    await fs.rename(path, `/planted-${file}`);
    await fs.symlink(`/planted-${file}`, path);
    const before = fs.snapshotTree(AGENT);
    const fast = await store.listDetailed(CWD, undefined, { fast: true });
    const full = await store.listDetailed(CWD);
    for (const result of [fast, full]) {
      assert.deepEqual(result.sessions, [], file);
      assert.equal(result.failures.length, 1, file);
      assert.ok(result.failures[0]?.error instanceof SessionFormatError, file);
      assert.equal((result.failures[0]?.error as SessionFormatError).file, path);
    }
    assert.deepEqual(fs.snapshotTree(AGENT), before);
  }
});

test("indexSizeBound is never below the size of an index written for those counts", () => {
  const state = fc.integer({ min: 1, max: 5000 }).chain((messageCount) =>
    fc.record({
      messageCount: fc.constant(messageCount),
      bytes: fc.integer({ min: 2 * messageCount, max: Number.MAX_SAFE_INTEGER }),
      users: fc.integer({ min: 0, max: messageCount }),
    })
  );
  fc.assert(
    fc.property(state, ({ messageCount, bytes, users }) => {
      // The worst case for those counts: the largest indices and offsets the range allows.
      const rounds = Array.from({ length: users }, (_, i) => ({
        messageIndex: messageCount - users + i,
        byteOffset: bytes - 2 * (users - i),
      }));
      const encoded = encodeRoundIndex({
        format: "loop-session-index",
        version: 1,
        generation: "f".repeat(64),
        start: Number.MAX_SAFE_INTEGER,
        bytes,
        messageCount,
        rounds,
      });
      assert.ok(encoded.length <= indexSizeBound(messageCount, bytes));
    }),
    { numRuns: runsOf(100) },
  );
});

test("a meta.json that claims gigabytes is reported as corrupt on the real filesystem", async () => {
  const base = await mkdtemp(join(tmpdir(), "loop-liar-"));
  try {
    const cwd = join(base, "work");
    await nodeFs().mkdir(cwd, { recursive: true });
    const store = new SessionStore({ fs: nodeFs(), agentDir: join(base, "agent") });
    const session = await store.create(cwd);
    const first = user("hello");
    await session.commit([first]);
    await session.commit([first, user("again")]); // index.json now covers a prefix of what follows
    await session.close();
    const metaPath = join(session.getSessionPath(), "meta.json");
    for (const bytes of [3_000_000_000, 1e15]) {
      const meta = JSON.parse(await readFile(metaPath, "utf8"));
      await writeFile(metaPath, JSON.stringify({ ...meta, bytes, messageCount: 3 }) + "\n");
      for (const fast of [true, false]) {
        const fresh = new SessionStore({ fs: nodeFs(), agentDir: join(base, "agent") });
        await assert.rejects(fresh.list(cwd, undefined, { fast }), CorruptSessionError);
      }
    }
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("listing reports what an open refuses: a copied directory, a link where a session was published", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, conversation(2, "a"));
  const copy = "3b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const copyDir = `${COLLECTION}/${copy}`;
  await fs.mkdir(copyDir);
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.writeFile(
      `${copyDir}/${name}`,
      await fs.readFile(`${session.getSessionPath()}/${name}`),
    );
  }
  // A legacy backup whose published path is a link to another session's directory.
  const migrated = "5c9a3f0e-1d2b-4c3d-8e4f-5a6b7c8d9e0f";
  await fs.writeFile(
    `${COLLECTION}/${migrated}.jsonl`,
    new TextEncoder().encode(legacyFile(migrated, CWD, [user("stale")])),
  );
  await fs.symlink(session.getSessionPath(), `${COLLECTION}/${migrated}`);
  const tree = fs.snapshotTree("/");
  for (const fast of [false, true]) {
    const result = await store.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(result.sessions.map((s) => s.id), [session.id], `fast=${fast}`);
    const failed = new Map(result.failures.map((f) => [f.id, f.error]));
    assert.ok(failed.get(copy) instanceof SessionFormatError, `fast=${fast}: the copy`);
    assert.ok(failed.get(migrated) instanceof SessionFormatError, `fast=${fast}: the link`);
    await assert.rejects(store.open(copyDir), SessionFormatError);
  }
  assert.deepEqual(fs.snapshotTree("/"), tree);
});

test("a link planted as an interrupted compaction's previous directory is never followed", async () => {
  const { fs, store, clock } = await setup();
  const outside = new SessionStore({ fs, agentDir: "/elsewhere/.loop" });
  const secret = await outside.create(CWD);
  await secret.commit([user("outside this agent directory")]);
  await secret.close();
  const mine = await saved(store, clock, [user("mine")]);
  const id = "4b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.mkdir(`${COLLECTION}/.staging-${id}-abcd1234`);
  await fs.symlink(secret.getSessionPath(), `${COLLECTION}/.staging-${id}-abcd1234/previous`);
  for (const fast of [false, true]) {
    const listed = await store.list(CWD, undefined, { fast });
    assert.deepEqual(listed.map((s) => s.id), [mine.id], `fast=${fast}`);
  }
  await store.cleanup(CWD);
  assert.equal((await fs.lstat(secret.getSessionPath())).kind, "directory");
  await assert.rejects(fs.lstat(`${COLLECTION}/${id}`), NotFound);
});

test("a missing log is reported as corruption by a fast listing that would read it, in every read mode", async () => {
  for (const port of [(fs: MemoryFs): FileSystem => fs, withoutNoFollow]) {
    const { fs, store, clock } = await setup();
    // One session whose index records no title (read from the log), one whose index lags (its
    // tail read from the log); both lose their log.
    const untitled = await saved(store, clock, conversation(2));
    await withoutRecordedTitle(fs, untitled.getSessionPath());
    const lagging = await store.create(CWD);
    await lagging.commit(conversation(2));
    await lagging.append([user("more"), assistant("then")]);
    for (const session of [untitled, lagging]) {
      await fs.remove(`${session.getSessionPath()}/messages.jsonl`);
    }
    const before = fs.snapshotTree(AGENT);
    const listed = await new SessionStore({ fs: port(fs), agentDir: AGENT }).listDetailed(
      CWD,
      undefined,
      { fast: true },
    );
    assert.deepEqual(listed.sessions, []);
    assert.deepEqual(
      listed.failures.map((
        f,
      ) => [f.id, f.error.constructor.name, (f.error as CorruptSessionError).file])
        .sort(),
      [untitled, lagging].map((s) => [
        s.id,
        "CorruptSessionError",
        `${s.getSessionPath()}/messages.jsonl`,
      ]).sort(),
    );
    assert.deepEqual(fs.snapshotTree(AGENT), before);
    await lagging.close().catch(() => undefined);
  }
});

test("fast mode takes the fallback title from a later round when the first user message has none and the index records none", async () => {
  const { fs, store, clock } = await setup();
  const session = await saved(store, clock, [
    imageOnly(),
    assistant("saw it"),
    user("the real ask"),
    assistant("done"),
  ]);
  // An index as written before it recorded the fallback title.
  await withoutRecordedTitle(fs, session.getSessionPath());
  const fast = await store.list(CWD, undefined, { fast: true });
  assert.deepEqual(fast[0]?.title, {
    text: "the real ask",
    source: "fallback",
    messageIndices: [2],
  });
  assert.deepEqual(fast, await store.list(CWD));
});

test("a repeated fast listing by one store takes the fallback title once a stored title is cleared", async () => {
  const { store, clock } = await setup();
  const session = await saved(store, clock, [user("the first question"), assistant("an answer")]);
  const writer = await store.open(session.getSessionPath());
  await writer.setTitle({ text: "Stored", source: "user", messageIndices: [] });
  await writer.close();
  assert.equal((await store.list(CWD, undefined, { fast: true }))[0]?.title?.text, "Stored");
  const clearing = await store.open(session.getSessionPath());
  await clearing.setTitle(undefined);
  await clearing.close();
  const again = await store.list(CWD, undefined, { fast: true });
  assert.deepEqual(again[0]?.title, {
    text: "the first question",
    source: "fallback",
    messageIndices: [0],
  });
  assert.deepEqual(again, await store.list(CWD));
});

test("a fast listing lists a legacy session whose recorded cwd is gone; a full one reports it", async () => {
  const { fs, store } = await setup();
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.mkdir(`${COLLECTION}`, { recursive: true });
  await fs.writeFile(
    `${COLLECTION}/${id}.jsonl`,
    encoder.encode(legacyFile(id, "/work/gone", conversation(1))),
  );
  const fast = await store.listDetailed(undefined, COLLECTION, { fast: true });
  assert.deepEqual(fast.sessions.map((s) => s.id), [id]);
  assert.deepEqual(fast.failures, []);
  const full = await store.listDetailed(undefined, COLLECTION);
  assert.deepEqual(full.sessions, []);
  assert.equal(full.failures[0]?.error.name, "SessionCwdError");
});
