import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256, sha256Hex } from "../src/port/sha256.ts";
import { verifySession } from "../src/loop/verify.ts";
import { dirname } from "../src/port/path.ts";
import {
  CorruptSessionError,
  InvalidArgumentError,
  PendingSaveError,
  SessionBusyError,
  SessionCwdError,
  SessionError,
  SessionFormatError,
  SessionNotFoundError,
  StaleRevisionError,
  UnsupportedSessionError,
} from "../src/loop/errors.ts";
import { FsIoError, NotFound } from "../src/port/errors.ts";
import type { FileHandle, FileSystem } from "../src/port/fs.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { SessionManager } from "../src/loop/session_manager.ts";
import {
  encodeStorageMeta,
  encodeStorageMetaReusing,
  parseRoundIndexText,
} from "../src/loop/storage.ts";
import { type Message, newSessionHeader } from "../src/loop/records/mod.ts";
import { assistant, conversation, toolResult, user } from "./_fixtures.ts";
import { gate, hookedFs, linkedBeforeOpen, withoutNoFollow } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const text = new TextDecoder();

async function setup(): Promise<{ fs: MemoryFs; store: SessionStore; now: { t: number } }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const now = { t: Date.parse("2026-01-02T03:04:05.000Z") };
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => now.t });
  return { fs, store, now };
}

/** A session of one saved round, closed. */
async function savedSession(store: SessionStore): Promise<SessionManager> {
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  return session;
}

async function readJson(fs: MemoryFs, path: string): Promise<Record<string, unknown>> {
  return JSON.parse(text.decode(await fs.readFile(path)));
}

async function saved(store: SessionStore, session: SessionManager): Promise<Message[]> {
  const other = await store.open(session.getSessionPath(), { readOnly: true });
  return other.messages;
}

test("create() writes nothing until the history holds a user message", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit([]);
  await assert.rejects(fs.lstat(session.getSessionPath()));
  const opening = assistant("a greeting before the user spoke");
  await session.commit([opening]); // no user message yet: still a draft
  await assert.rejects(fs.lstat(session.getSessionPath()));
  assert.equal(session.getStorageInfo(), undefined);
  assert.deepEqual((await session.readHistory()).messages, [opening]);
  await session.commit([opening, user("hello")]);
  assert.equal((await saved(store, session)).length, 2);
  const names = (await fs.readDir(session.getSessionPath())).map((e) => e.name);
  assert.deepEqual(names, ["index.json", "messages.jsonl", "meta.json"]);
});

test("sessions live in <agentDir>/sessions/<workspace hash>/<uuid>/", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const hash = sha256Hex(new TextEncoder().encode(CWD)).slice(0, 24);
  assert.equal(workspaceHash(CWD), hash);
  assert.equal(session.getSessionDir(), `${AGENT}/sessions/${hash}`);
  assert.match(session.id, /^[0-9a-f-]{36}$/);
  assert.equal(session.getSessionFile(), `${AGENT}/sessions/${hash}/${session.id}/meta.json`);
});

test("the workspace hash is taken over the canonical cwd (symlinks resolved)", async () => {
  const { fs, store } = await setup();
  await fs.symlink(CWD, "/work/link");
  const session = await store.create("/work/link");
  assert.equal(session.getHeader().cwd, CWD);
  assert.equal(session.getSessionDir(), `${AGENT}/sessions/${workspaceHash(CWD)}`);
});

test("meta.json holds the committed range and the SHA-256 generation of its bytes", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const meta = await readJson(fs, session.getSessionFile());
  const log = await fs.readFile(`${session.getSessionPath()}/messages.jsonl`);
  assert.equal(meta.format, "loop-session");
  assert.equal(meta.version, 3);
  assert.equal(meta.start, 0);
  assert.equal(meta.bytes, log.length);
  assert.equal(meta.messageCount, history.length);
  assert.equal(meta.generation, sha256Hex(log));
  assert.equal((meta.header as Record<string, unknown>).version, 2);
  assert.equal(text.decode(log), history.map((m) => JSON.stringify(m)).join("\n") + "\n");
});

test("ordinary saves append the new messages and never rewrite earlier bytes", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const before = await fs.readFile(`${session.getSessionPath()}/messages.jsonl`);
  const more = [...history, user("next"), assistant("done")];
  await session.commit(more);
  const after = await fs.readFile(`${session.getSessionPath()}/messages.jsonl`);
  assert.deepEqual(after.subarray(0, before.length), before);
  const meta = await readJson(fs, session.getSessionFile());
  assert.equal(meta.start, 0);
  assert.equal(meta.bytes, after.length);
  assert.deepEqual(await saved(store, session), more);
});

test("replacing an earlier message appends a complete new generation and keeps the old bytes", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const oldLog = await fs.readFile(`${session.getSessionPath()}/messages.jsonl`);
  const replaced = [user("edited first question"), ...history.slice(1)];
  await session.commit(replaced);
  const log = await fs.readFile(`${session.getSessionPath()}/messages.jsonl`);
  const meta = await readJson(fs, session.getSessionFile());
  assert.deepEqual(log.subarray(0, oldLog.length), oldLog);
  assert.equal(meta.start, oldLog.length);
  assert.equal(meta.bytes, log.length - oldLog.length);
  assert.equal(meta.generation, sha256Hex(log.subarray(oldLog.length)));
  assert.deepEqual(await saved(store, session), replaced);
});

test("a changed message at any position is seen, also across the identity scan's blocks of eight", async () => {
  const { store } = await setup();
  for (const rounds of [3, 4, 5, 6, 9]) {
    const history = conversation(rounds);
    for (let at = 0; at < history.length; at++) {
      const session = await store.create(CWD);
      await session.commit(history);
      const start = session.getStorageInfo()?.start;
      // The same content in a new object is not a change: nothing is rewritten.
      const copied = history.map((message, i) => i === at ? structuredClone(message) : message);
      const grown = [...copied, user("next")];
      await session.commit(grown);
      const appended = session.getStorageInfo();
      assert.equal(
        appended?.messageCount,
        history.length + 1,
        `copy at ${at} of ${history.length}`,
      );
      assert.equal(appended?.start, start, `appended in place after a copy at ${at}`);
      // A new object with other content in its place is a change, whatever its position; every
      // other message is the very object saved before.
      const message = history[at] as Message;
      const changed = [...grown];
      changed[at] = { ...message, timestamp: message.timestamp + 1 } as Message;
      await session.commit(changed);
      assert.ok((session.getStorageInfo()?.start ?? 0) > (start ?? 0), `new generation at ${at}`);
      assert.deepEqual(
        await saved(store, session),
        changed,
        `change at ${at} of ${history.length}`,
      );
      // The very same objects again (every one of them the saved one now) change nothing.
      const replaced = session.getStorageInfo();
      await session.commit(changed);
      assert.deepEqual(session.getStorageInfo(), replaced, `the same history again (${at})`);
      await session.close();
    }
  }
});

test("truncating history switches the committed range to a shorter generation", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(3);
  await session.commit(history);
  const shorter = history.slice(0, 2);
  await session.commit(shorter);
  assert.deepEqual(await saved(store, session), shorter);
  assert.equal(session.getStorageInfo()?.messageCount, 2);
});

test("an in-place change to the last committed message is detected and saved", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const history = [user("q"), assistant("partial")];
  await session.commit(history);
  const last = history[1] as unknown as { content: { text: string }[] };
  (last.content[0] as { text: string }).text = "complete answer";
  await session.commit(history);
  const reopened = await saved(store, session);
  assert.equal(
    (reopened[1] as unknown as { content: { text: string }[] }).content[0]?.text,
    "complete answer",
  );
});

test("bytes past the committed range are ignored on open and truncated by the next save", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const committed = await fs.readFile(logPath);
  const handle = await fs.open(logPath, { append: true });
  await handle.write(new TextEncoder().encode('{"role":"user","content":"torn'));
  await handle.close();
  await session.close();
  const reopened = await store.open(session.getSessionPath());
  assert.deepEqual(reopened.messages, history);
  const more = [...history, user("after crash")];
  await reopened.commit(more);
  const log = await fs.readFile(logPath);
  assert.deepEqual(log.subarray(0, committed.length), committed);
  assert.equal(
    text.decode(log.subarray(committed.length)),
    JSON.stringify(more[more.length - 1]) + "\n",
  );
});

test("metadata-only commits never rewrite message bytes", async () => {
  const { fs, store, now } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const before = await fs.readFile(logPath);
  now.t += 1000;
  const contexts = [{ userTurn: 0, content: "runtime context", timestamp: 5 }];
  await session.commit(history, contexts as never);
  assert.deepEqual(await fs.readFile(logPath), before);
  assert.deepEqual(session.getRuntimeContexts(), contexts);
  assert.equal(session.getHeader().updatedAt, new Date(now.t).toISOString());
});

test("omitted optional arguments keep stored metadata; given arrays replace it; empty removes it", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  const contexts = [{ userTurn: 0, content: "ctx", timestamp: 1 }];
  const checkpoints = [{ messageCount: 1, timestamp: 1, sections: { preamble: "hi" } }];
  await session.commit(history, contexts as never, undefined, {
    systemPromptCheckpoints: checkpoints as never,
  });
  await session.commit([...history, user("more")]);
  assert.deepEqual(session.getRuntimeContexts(), contexts);
  assert.deepEqual(session.getSystemPromptCheckpoints(), checkpoints);
  await session.commit([...history, user("more")], [], undefined, {});
  assert.deepEqual(session.getRuntimeContexts(), []);
  assert.deepEqual(session.getSystemPromptCheckpoints(), checkpoints);
  const header = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.equal("runtimeContexts" in header, false);
});

test("metadata arrays changed by the caller after commit() or append() returns are saved as they were at the call", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  // Each kind of call: a commit prepared at once, a commit queued behind it, an append (prepared
  // when its turn comes). After each call returns, the caller pushes a record whose anchor is out
  // of range and rewrites a record in place; neither may reach meta.json.
  const calls: ((contexts: never, checkpoints: never) => Promise<void>)[] = [
    (contexts, checkpoints) =>
      session.commit(history, contexts, undefined, { systemPromptCheckpoints: checkpoints }),
    (contexts, checkpoints) =>
      session.commit(history, contexts, undefined, { systemPromptCheckpoints: checkpoints }),
    (contexts, checkpoints) =>
      session.append([], contexts, undefined, { systemPromptCheckpoints: checkpoints }),
  ];
  const saves: Promise<void>[] = [];
  const given: unknown[] = [];
  for (const [i, call] of calls.entries()) {
    const contexts = [{ userTurn: 0, content: `ctx ${i}`, timestamp: i }];
    const checkpoints = [{ messageCount: 1, timestamp: i, sections: { preamble: `hi ${i}` } }];
    given.push(structuredClone({ contexts, checkpoints }));
    saves.push(call(contexts as never, checkpoints as never));
    contexts.push({ userTurn: 7, content: "out of range", timestamp: 9 });
    contexts[0]!.content = "changed in place";
    checkpoints.push({ messageCount: 99, timestamp: 9, sections: { preamble: "late" } });
    checkpoints[0]!.sections.preamble = "changed in place";
  }
  await Promise.all(saves);
  const last = given.at(-1) as { contexts: unknown; checkpoints: unknown };
  assert.deepEqual(session.getRuntimeContexts(), last.contexts);
  assert.deepEqual(session.getSystemPromptCheckpoints(), last.checkpoints);
  const header = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.deepEqual(header.runtimeContexts, last.contexts);
  assert.deepEqual(header.systemPromptCheckpoints, last.checkpoints);
  await session.close();
  const reopened = await store.open(session.getSessionPath());
  assert.deepEqual(reopened.getRuntimeContexts(), last.contexts);
  await reopened.close();
});

test("a metadata array that cannot be copied fails its save in its turn, naming the field", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  const before = await fs.readFile(session.getSessionFile());
  const contexts = [{ userTurn: 0, content: "ctx", timestamp: 1, render: () => "x" }];
  for (
    const save of [
      () => session.commit(conversation(1), contexts as never),
      () => session.append([], contexts as never),
    ]
  ) {
    await assert.rejects(save(), (error: unknown) => {
      assert.ok(error instanceof SessionFormatError);
      assert.equal(error.path, "header.runtimeContexts");
      assert.equal(error.file, session.getSessionFile());
      return true;
    });
  }
  await assert.rejects(
    session.commit(conversation(1), undefined, undefined, {
      compactions: [{ run: Symbol("x") }] as never,
    }),
    (error: unknown) => error instanceof SessionFormatError && error.path === "header.compactions",
  );
  assert.deepEqual(await fs.readFile(session.getSessionFile()), before);
  assert.deepEqual(session.getRuntimeContexts(), []);

  // Saves settle in the order they were called: the refused one after the save queued before it.
  const order: string[] = [];
  const history = [...conversation(1), user("next")];
  const first = session.append([history.at(-1)!]).then(() => order.push("first"));
  const second = session.append([], contexts as never).catch(() => order.push("second refused"));
  await Promise.all([first, second]);
  assert.deepEqual(order, ["first", "second refused"]);

  // A closed session says so, whatever the arguments.
  await session.close();
  await assert.rejects(
    session.commit(history, contexts as never),
    (error: unknown) => !(error instanceof SessionFormatError) && /closed/.test(String(error)),
  );
});

test("a metadata array behind a Proxy is saved as its elements", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const contexts = [{ userTurn: 0, content: "ctx", timestamp: 1 }];
  await session.commit(conversation(1), new Proxy(contexts, {}) as never);
  assert.deepEqual(session.getRuntimeContexts(), contexts);
  await session.close();
  const reopened = await store.open(session.getSessionPath());
  assert.deepEqual(reopened.getRuntimeContexts(), contexts);
  await reopened.close();
});

test("createDraft keeps a copy of the header it is given", async () => {
  const { fs, store } = await setup();
  const header = {
    ...newSessionHeader({
      id: "0e5a3c1b-2d4f-4a6b-8c9d-0e1f2a3b4c5d",
      cwd: CWD,
      now: "2026-01-01T00:00:00.000Z",
    }),
    runtimeContexts: [{ userTurn: 0, content: "first", timestamp: 1 }],
  };
  const dir = `${AGENT}/sessions/draft`;
  const session = SessionManager.createDraft({
    context: store.context,
    dir,
    collectionDir: dirname(dir),
  }, header as never);
  await session.commit([user("q")]);
  header.runtimeContexts[0]!.content = "changed by the caller";
  header.runtimeContexts.push({ userTurn: 5, content: "out of range", timestamp: 2 });
  await session.append([assistant("a")]);
  const saved = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.deepEqual(saved.runtimeContexts, [{ userTurn: 0, content: "first", timestamp: 1 }]);
  assert.deepEqual(session.getRuntimeContexts(), saved.runtimeContexts);
  await session.close();
});

test("createDraft refuses a header an open would refuse, naming meta.json and the field", async () => {
  const { fs, store } = await setup();
  const dir = `${AGENT}/sessions/draft`;
  const base = newSessionHeader({
    id: "0e5a3c1b-2d4f-4a6b-8c9d-0e1f2a3b4c5d",
    cwd: CWD,
    now: "2026-01-01T00:00:00.000Z",
  });
  const init = { context: store.context, dir, collectionDir: dirname(dir) };
  for (
    const [field, value] of [
      ["pinnedAt", "2026-01-01"],
      ["permissionPreset", "root"],
      ["title", { text: " padded ", source: "user", messageIndices: [] }],
    ] as const
  ) {
    assert.throws(
      () => SessionManager.createDraft(init, { ...base, [field]: value } as never),
      (error: unknown) => {
        assert.ok(error instanceof SessionFormatError, String(error));
        assert.equal(error.file, `${dir}/meta.json`);
        assert.ok(error.path?.startsWith(`header.${field}`), error.path);
        return true;
      },
    );
  }
  await assert.rejects(fs.lstat(dir), NotFound);
});

test("store options and call arguments of the wrong kind are refused with InvalidArgumentError", async () => {
  const { fs, store } = await setup();
  const refused = (argument: string) => (error: unknown) => {
    assert.ok(error instanceof InvalidArgumentError, String(error));
    assert.equal(error.argument, argument);
    return true;
  };
  const options = { fs, agentDir: AGENT };
  for (
    const [name, value] of [
      ["durability", "Full"],
      ["collectionLockWaitMs", Number.NaN],
      ["collectionLockWaitMs", -1],
      ["now", "soon"],
      ["sha256", "sha"],
      ["process", 5],
      ["fs", undefined],
    ] as const
  ) {
    assert.throws(
      () => new SessionStore({ ...options, [name]: value } as never),
      refused(name),
    );
  }
  assert.ok(new SessionStore({ ...options, collectionLockWaitMs: Infinity }));
  // Other keys are ignored: a larger configuration may be spread into the options.
  assert.ok(new SessionStore({ ...options, theme: "dark" } as never));
  assert.throws(() => workspaceHash(undefined as never), refused("canonicalCwd"));
  assert.throws(() => workspaceHash("relative/dir"), refused("canonicalCwd"));
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  assert.equal(session.sessionFile, session.getSessionFile());
  await session.close();
  const dir = session.getSessionPath();
  await assert.rejects(store.open(dir, { readOnly: "yes" as never }), refused("readOnly"));
  for (const name of ["messages.jsonl", "index.json"]) {
    await assert.rejects(store.open(`${dir}/${name}`), (error: unknown) => {
      assert.ok(error instanceof InvalidArgumentError, String(error));
      assert.match(error.message, /open the session directory or its meta\.json/);
      return true;
    });
  }
  await assert.rejects(store.archive.delete(CWD, [session.id], null as never), refused("options"));
  await assert.rejects(
    store.archive.delete(CWD, [session.id], { archivedOnly: "no" as never }),
    refused("archivedOnly"),
  );
});

test("invalid history is rejected before anything is written", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const before = await fs.readFile(logPath);
  const names = async () => (await fs.readDir(session.getSessionPath())).map((e) => e.name);
  const files = await names();
  const bad = [...conversation(1, "x"), assistant("call", [{ id: "c1", name: "read" }])];
  await assert.rejects(session.commit(bad), SessionFormatError);
  assert.deepEqual(await fs.readFile(logPath), before);
  // The temp file of the next meta.json, created while the history was checked, is removed
  // before the session's next operation runs.
  await session.flush();
  assert.deepEqual(await names(), files);
  await assert.rejects(
    session.append([assistant("call", [{ id: "c1", name: "read" }])]),
    SessionFormatError,
  );
  assert.deepEqual(await names(), files);
  assert.equal(session.hasPendingSave, false);
});

test("a commit that fails before writing settles, and cleans up, before the next queued call", async () => {
  const { fs, store } = await setup();
  const created = await store.create(CWD);
  const history = conversation(1);
  await created.commit(history);
  await created.close();
  const dir = created.getSessionPath();
  const session = await store.open(dir);
  // The log vanishes behind the session's back: the next save fails before writing anything.
  await fs.remove(`${dir}/messages.jsonl`);
  const names = async () => (await fs.readDir(dir)).map((entry) => entry.name).sort();
  const files = await names();
  const order: string[] = [];
  const outcome = (label: string) =>
    [
      () => order.push(`${label} resolved`),
      (error: unknown) => order.push(`${label} ${(error as Error).name}`),
    ] as const;
  const first = session.commit([...history, user("one")]).then(...outcome("first"));
  const second = session.commit([...history, user("one"), user("two")]).then(
    ...outcome("second"),
  );
  const closed = session.close().then(() => order.push("closed"));
  await Promise.all([first, second, closed]);
  // Called together, the two saves are written together: both fail with the write's error.
  assert.deepEqual(order, ["first CorruptSessionError", "second CorruptSessionError", "closed"]);
  assert.deepEqual(await names(), files, "no temp file is left once close() resolves");
});

test("a failed save stays pending, blocks new commits, and flush() retries the same snapshot", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  await session.markRead(history.length);
  const next = [...history, user("pending question"), assistant("pending answer")];
  fs.failAt(fs.operationCount + 4, { error: "EIO", persistent: true });
  await assert.rejects(session.commit(next));
  fs.clearFaults();
  assert.equal(session.hasPendingSave, true);
  assert.deepEqual(session.messages, next);
  assert.equal(session.unread, true);
  assert.equal(session.getHeader().unread, false);
  await assert.rejects(session.commit(next), PendingSaveError);
  await assert.rejects(session.markRead(2), PendingSaveError);
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(await saved(store, session), next);
});

test("commit() sets unread only when new history contains assistant or tool output", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  await session.commit([user("q")]);
  assert.equal(session.unread, false);
  const history = [
    user("q"),
    assistant("a", [{ id: "t", name: "read" }]),
    toolResult("t", "read"),
    assistant("b"),
  ];
  await session.commit(history);
  assert.equal(session.unread, true);
  assert.equal(await session.markRead(history.length), true);
  assert.equal(session.unread, false);
  await session.commit(history);
  assert.equal(session.unread, false);
  await session.commit([...history, user("again")]);
  assert.equal(session.unread, false);
});

test("markRead() accepts only the saved, non-empty count and rejects invalid counts", async () => {
  const { fs, store, now } = await setup();
  const session = await store.create(CWD);
  assert.equal(await session.markRead(0), false);
  const history = conversation(1);
  await session.commit(history);
  const updatedAt = session.getHeader().updatedAt;
  now.t += 5000;
  assert.equal(await session.markRead(history.length + 1), false);
  assert.equal(session.unread, true);
  assert.equal(await session.markRead(0), false);
  await assert.rejects(session.markRead(-1), InvalidArgumentError);
  await assert.rejects(session.markRead(1.5), InvalidArgumentError);
  assert.equal(await session.markRead(history.length), true);
  assert.equal(await session.markRead(history.length), true);
  const header = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.equal(header.unread, false);
  assert.equal(header.updatedAt, updatedAt);
});

test("setPinned() saves a canonical pin time, keeps it on repeat, removes it on false", async () => {
  const { fs, store, now } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  const updatedAt = session.getHeader().updatedAt;
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const log = await fs.readFile(logPath);
  now.t += 60_000;
  const pinnedAt = await session.setPinned(true);
  assert.equal(pinnedAt, new Date(now.t).toISOString());
  now.t += 60_000;
  assert.equal(await session.setPinned(true), pinnedAt);
  const header = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.equal(header.pinnedAt, pinnedAt);
  assert.equal(header.updatedAt, updatedAt);
  assert.equal(await session.setPinned(false), undefined);
  assert.equal(
    "pinnedAt" in ((await readJson(fs, session.getSessionFile())).header as object),
    false,
  );
  assert.deepEqual(await fs.readFile(logPath), log);
  await assert.rejects(session.setPinned("yes" as unknown as boolean), InvalidArgumentError);
});

test("pinning a draft writes nothing, and its first save carries the pin", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const pinnedAt = await session.setPinned(true);
  await assert.rejects(fs.lstat(session.getSessionPath()));
  await session.commit([user("first")]);
  const header = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.equal(header.pinnedAt, pinnedAt);
});

test("a failed pin write leaves the header unchanged and can be retried", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  fs.failAt(fs.operationCount + 1, { error: "ENOSPC", persistent: true });
  await assert.rejects(session.setPinned(true));
  fs.clearFaults();
  assert.equal(session.getHeader().pinnedAt, undefined);
  assert.equal((await readJson(fs, session.getSessionFile())).header !== undefined, true);
  const pinnedAt = await session.setPinned(true);
  assert.equal(session.getHeader().pinnedAt, pinnedAt);
});

for (const pinFails of [false, true]) {
  test(
    `a commit called while a pin is being written carries the pin only if it was written (${
      pinFails ? "it fails" : "it succeeds"
    })`,
    async () => {
      const { fs, store } = await setup();
      const session = await store.create(CWD);
      const history = conversation(2);
      await session.commit(history);
      // The pin's first file call fails, once; the commit queued behind it is written after it.
      if (pinFails) fs.failAt(fs.operationCount + 1, { error: "ENOSPC" });
      const pinning = session.setPinned(true);
      const longer = [...history, ...conversation(1, "x")];
      const saving = session.commit(longer);
      const [pinned, saved] = await Promise.allSettled([pinning, saving]);
      assert.equal(pinned.status, pinFails ? "rejected" : "fulfilled");
      assert.equal(saved.status, "fulfilled");
      const pinnedAt = pinned.status === "fulfilled" ? pinned.value : undefined;
      assert.equal(session.getHeader().pinnedAt, pinnedAt);
      const meta = await readJson(fs, session.getSessionFile());
      assert.equal((meta.header as Record<string, unknown>).pinnedAt, pinnedAt);
      assert.equal(meta.messageCount, longer.length);
      await session.close();
      const reopened = await store.open(session.getSessionPath(), { readOnly: true });
      assert.equal(reopened.getHeader().pinnedAt, pinnedAt);
      assert.equal(reopened.messages.length, longer.length);
    },
  );
}

test("a pin set while a save is pending is kept by the flushed save", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  fs.failAt(fs.operationCount + 3, { error: "EIO", persistent: true });
  await assert.rejects(session.commit([...history, user("q2")]));
  fs.clearFaults();
  const pinnedAt = await session.setPinned(true);
  await session.flush();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.getHeader().pinnedAt, pinnedAt);
  assert.equal(reopened.messages.length, history.length + 1);
});

test("setTitle() keeps activity timestamps; setModel() updates them and drops default effort", async () => {
  const { fs, store, now } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  const updatedAt = session.getHeader().updatedAt;
  now.t += 1000;
  await session.setTitle({ text: "Fix the parser", source: "user", messageIndices: [0] });
  let header = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.deepEqual(header.title, { text: "Fix the parser", source: "user", messageIndices: [0] });
  assert.equal(header.updatedAt, updatedAt);
  await assert.rejects(
    session.setTitle({ text: " padded ", source: "user", messageIndices: [] }),
    SessionFormatError,
  );
  await session.setModel({ provider: "p", id: "m", effort: "default" });
  header = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.deepEqual(header.model, { provider: "p", id: "m" });
  assert.equal(header.updatedAt, new Date(now.t).toISOString());
  await assert.rejects(session.setModel({ provider: "p", id: "m", effort: "turbo" as never }));
});

test("setTitle() writes the title as it was when called; bad arguments name meta.json and the field", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  const title = { text: "Fix the parser", source: "user" as const, messageIndices: [0] };
  const setting = session.setTitle(title);
  // Changed by the caller before the write runs: what was checked is what is written.
  title.text = " bad \u0007 ";
  title.messageIndices.push(0);
  await setting;
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.getHeader().title, {
    text: "Fix the parser",
    source: "user",
    messageIndices: [0],
  });
  const file = reopened.getSessionFile();
  await reopened.close();
  const writer = await store.open(session.getSessionPath());
  const named = (field: string) => (error: unknown) => {
    assert.ok(error instanceof SessionError, String(error));
    assert.equal(error.file, file, String(error));
    const where = error instanceof InvalidArgumentError
      ? error.argument
      : (error as SessionFormatError).path;
    assert.ok(where?.startsWith(field), `${where} for ${field}`);
    return true;
  };
  await assert.rejects(writer.setPinned("yes" as never), named("pinned"));
  await assert.rejects(writer.markRead(-1), named("messageCount"));
  await assert.rejects(writer.setTitle({ ...title, text: "" }), named("header.title"));
  await assert.rejects(
    writer.setTitle({ text: "x", source: "user", messageIndices: [], f: () => 1 } as never),
    named("header.title"),
  );
  await assert.rejects(writer.setModel({ provider: "p", id: 1 } as never), named("header.model"));
  await assert.rejects(writer.setPermissionPreset("root" as never), named("preset"));
  await writer.close();
});

test("getHeader() derives a fallback title without writing it", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit([
    user("  Please   fix the flaky login test today now ok thanks  "),
    assistant("ok"),
  ]);
  const header = session.getHeader();
  assert.equal(header.title?.source, "fallback");
  assert.deepEqual(header.title?.messageIndices, [0]);
  const stored = (await readJson(fs, session.getSessionFile())).header as Record<string, unknown>;
  assert.equal("title" in stored, false);
});

test("index.json records the generation and each user round's index and byte offset", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(3);
  await session.commit(history);
  const index = await readJson(fs, `${session.getSessionPath()}/index.json`);
  const meta = await readJson(fs, session.getSessionFile());
  assert.equal(index.generation, meta.generation);
  const lines = history.map((m) => JSON.stringify(m) + "\n");
  const expected: { messageIndex: number; byteOffset: number }[] = [];
  let offset = 0;
  history.forEach((m, i) => {
    if (m.role === "user") expected.push({ messageIndex: i, byteOffset: offset });
    offset += new TextEncoder().encode(lines[i]).length;
  });
  assert.deepEqual(index.rounds, expected);
});

test("readHistory() pages the latest three user rounds, then earlier ones by `before`", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(5);
  await session.commit(history);
  const starts = history.flatMap((m, i) => (m.role === "user" ? [i] : []));
  const page = await session.readHistory();
  assert.equal(page.total, history.length);
  assert.equal(page.start, starts[2]);
  assert.equal(page.end, history.length);
  assert.deepEqual(page.messages, history.slice(starts[2]));
  assert.equal(page.revision, session.getStorageInfo()?.generation);
  const earlier = await session.readHistory(page.start, page.revision);
  assert.equal(earlier.start, 0);
  assert.equal(earlier.end, starts[2]);
  assert.deepEqual(earlier.messages, history.slice(0, starts[2]));
  await assert.rejects(session.readHistory((starts[2] as number) + 1), InvalidArgumentError);
  await assert.rejects(session.readHistory(history.length + 1), InvalidArgumentError);
  const empty = await session.readHistory(0);
  assert.deepEqual([empty.start, empty.end, empty.messages.length], [0, 0, 0]);
});

test("readHistory() with an old revision rejects with StaleRevisionError", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const { revision } = await session.readHistory();
  await session.commit([...history, user("new")]);
  await assert.rejects(session.readHistory(undefined, revision), StaleRevisionError);
});

test("readHistory() reads only the page's byte range of the log", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(40));
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const size = (await fs.stat(logPath)).size;
  const reads: number[] = [];
  /** `handle` of `path`, with its reads of the log counted. */
  const counted = (handle: FileHandle, path: string): FileHandle => {
    if (path !== logPath) return handle;
    const read = handle.read.bind(handle);
    handle.read = async (offset: number, length: number) => {
      reads.push(length);
      return await read(offset, length);
    };
    return handle;
  };
  const original = fs.open.bind(fs);
  fs.open = async (path, options) => counted(await original(path, options), path);
  const openNoFollow = fs.openNoFollow.bind(fs);
  fs.openNoFollow = async (path) => {
    const opened = await openNoFollow(path);
    return { handle: counted(opened.handle, path), info: opened.info };
  };
  const readFile = fs.readFile.bind(fs);
  fs.readFile = async (path) => {
    assert.notEqual(path, logPath, "page reads must not read the whole log");
    return await readFile(path);
  };
  await session.readHistory(); // the first page also loads the index
  reads.length = 0;
  await session.readHistory();
  assert.equal(reads.length, 1);
  assert.ok((reads[0] as number) < size / 5);
});

test("page reads keep the log they opened: a link planted later is never read through", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(4);
  await session.commit(history);
  await session.close();
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  const first = await reader.readHistory();
  const log = `${session.getSessionPath()}/messages.jsonl`;
  const bytes = await fs.readFile(log);
  await fs.writeFile("/victim.txt", new Uint8Array(bytes.length).fill(120), { mode: 0o644 });
  await fs.rename(log, `${log}.moved`);
  await fs.symlink("/victim.txt", log);
  assert.deepEqual(await reader.readHistory(), first);
  await reader.close();
  // Closed: a new manager checks the path again.
  await assert.rejects(
    store.open(session.getSessionPath(), { readOnly: true }),
    SessionFormatError,
  );
});

test("unsaved drafts and pending snapshots page their in-memory messages", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  await session.commit([assistant("greeting")]);
  const page = await session.readHistory();
  assert.equal(page.revision, "");
  assert.equal(page.total, 1);
});

for (const damage of ["missing", "truncated", "malformed", "stale"] as const) {
  test(`a ${damage} index.json is rebuilt on the next page read and equals a fresh build`, async () => {
    const { fs, store } = await setup();
    const session = await store.create(CWD);
    const history = conversation(4);
    await session.commit(history);
    const indexPath = `${session.getSessionPath()}/index.json`;
    const fresh = await fs.readFile(indexPath);
    if (damage === "missing") await fs.remove(indexPath);
    if (damage === "truncated") await fs.writeFile(indexPath, fresh.subarray(0, 20));
    if (damage === "malformed") {
      await fs.writeFile(indexPath, new TextEncoder().encode('{"rounds": 5}'));
    }
    if (damage === "stale") {
      const stale = JSON.parse(text.decode(fresh));
      stale.generation = "0".repeat(64);
      await fs.writeFile(indexPath, new TextEncoder().encode(JSON.stringify(stale)));
    }
    await session.close();
    const reopened = await store.open(session.getSessionPath());
    const page = await reopened.readHistory();
    assert.deepEqual(page.messages, history.slice(page.start));
    assert.deepEqual(await fs.readFile(indexPath), fresh);
  });
}

for (const damage of ["missing", "truncated", "malformed", "a symlink"] as const) {
  test(`the writer's close() publishes again an index.json made ${damage} by another process while it was open`, async () => {
    const { fs, store } = await setup();
    const session = await store.create(CWD);
    const history = conversation(4);
    await session.commit(history);
    const indexPath = `${session.getSessionPath()}/index.json`;
    const fresh = await fs.readFile(indexPath);
    await session.readHistory(); // trusts the index it published
    if (damage === "missing") await fs.remove(indexPath);
    if (damage === "truncated") await fs.writeFile(indexPath, fresh.subarray(0, 20));
    if (damage === "malformed") {
      await fs.writeFile(indexPath, new TextEncoder().encode("{not json"));
    }
    if (damage === "a symlink") {
      await fs.writeFile("/elsewhere.json", fresh, { mode: 0o644 });
      await fs.remove(indexPath);
      await fs.symlink("/elsewhere.json", indexPath);
    }
    const page = await session.readHistory();
    assert.deepEqual(page.messages, history.slice(page.start));
    await session.close();
    assert.equal((await fs.lstat(indexPath)).kind, "file");
    assert.deepEqual(await fs.readFile(indexPath), fresh);
    if (damage === "a symlink") assert.deepEqual(await fs.readFile("/elsewhere.json"), fresh);
  });
}

for (const damage of ["truncated", "malformed", "grown"] as const) {
  test(`the writer's close() publishes again an index.json it adopted at open and another process made ${damage}`, async () => {
    const { fs, store } = await setup();
    const created = await store.create(CWD);
    const history = conversation(4);
    await created.commit(history);
    await created.readHistory(); // publishes the index of the whole history
    await created.close();
    const dir = created.getSessionPath();
    const indexPath = `${dir}/index.json`;
    const fresh = await fs.readFile(indexPath);
    const session = await store.open(dir); // adopts the current index: nothing to publish
    const page = await session.readHistory();
    assert.deepEqual(page.messages, history.slice(page.start));
    if (damage === "truncated") await fs.writeFile(indexPath, fresh.subarray(0, 20));
    if (damage === "malformed") {
      await fs.writeFile(indexPath, new TextEncoder().encode("{not json"));
    }
    if (damage === "grown") {
      // The same valid index, written longer (indented): only its length changed.
      const grown = new TextEncoder().encode(
        JSON.stringify(JSON.parse(text.decode(fresh)), null, 2) + "\n",
      );
      assert.ok(grown.length > fresh.length);
      assert.ok(parseRoundIndexText(text.decode(grown)) !== undefined, "a valid index");
      await fs.writeFile(indexPath, grown);
    }
    await session.close();
    assert.deepEqual(await fs.readFile(indexPath), fresh);
  });
}

for (const writer of ["adopted its index", "left its index lagging"] as const) {
  for (const swap of ["a link to another session", "another session's directory"] as const) {
    test(`close() of a writer that ${writer} never writes into a session directory swapped for ${swap}`, async () => {
      const { fs, store } = await setup();
      const sessions: SessionManager[] = [];
      for (const rounds of [2, 5]) {
        const session = await store.create(CWD);
        await session.commit(conversation(rounds, `s${rounds}`));
        await session.readHistory(); // publishes the index of the whole history
        await session.close();
        sessions.push(session);
      }
      const [x, y] = sessions.map((s) => s.getSessionPath()) as [string, string];
      const open = await store.open(x);
      await open.readHistory();
      if (writer === "left its index lagging") await open.append([user("one more")]);
      await fs.rename(x, `${x}.moved`);
      if (swap === "a link to another session") await fs.symlink(y, x);
      else await fs.rename(y, x);
      const other = swap === "a link to another session" ? y : x;
      const before = fs.snapshotTree?.(other);
      await open.close();
      assert.deepEqual(fs.snapshotTree?.(other), before, "the other session is untouched");
    });
  }
}

for (const index of ["adopted at open", "missing at open"] as const) {
  for (const swap of ["a link to another session", "another session's directory"] as const) {
    test(`a writer's first page read refuses a session directory swapped for ${swap} (index ${index}), reading and writing nothing there`, async () => {
      const { fs, store } = await setup();
      const sessions: SessionManager[] = [];
      for (const rounds of [2, 2]) {
        const session = await store.create(CWD);
        await session.commit(conversation(rounds, `s${sessions.length}`));
        await session.readHistory(); // publishes the index of the whole history
        await session.close();
        sessions.push(session);
      }
      const [x, y] = sessions.map((s) => s.getSessionPath()) as [string, string];
      if (index === "missing at open") await fs.remove(`${x}/index.json`);
      const open = await store.open(x);
      await fs.rename(x, `${x}.moved`);
      if (swap === "a link to another session") await fs.symlink(y, x);
      else await fs.rename(y, x);
      const other = swap === "a link to another session" ? y : x;
      const before = fs.snapshotTree?.(other);
      await assert.rejects(open.readHistory(), SessionNotFoundError);
      await open.close();
      assert.deepEqual(fs.snapshotTree?.(other), before, "the other session is untouched");
    });
  }
}

test("a writer's first page read reports a meta.json damaged since the open as damaged, not as moved away", async () => {
  const { fs, store } = await setup();
  const created = await store.create(CWD);
  await created.commit(conversation(2));
  await created.close();
  const dir = created.getSessionPath();
  const open = await store.open(dir);
  const meta = await fs.readFile(`${dir}/meta.json`);
  await fs.writeFile(`${dir}/meta.json`, meta.subarray(0, 40));
  await assert.rejects(open.readHistory(), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, `${dir}/meta.json`);
    return true;
  });
  await open.close();
});

test("the writer's close() leaves an index.json it published and nobody changed as it is", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(4));
  await session.readHistory();
  const before = fs.snapshotTree?.();
  await session.close();
  assert.deepEqual(fs.snapshotTree?.(), before);
});

for (const write of ["setPinned", "markRead", "commit", "append", "setTitle"] as const) {
  for (const gone of ["removed", "moved away", "replaced by an empty directory"] as const) {
    test(`a writer's first ${write} after its session directory was ${gone} is SessionNotFoundError and writes nothing there`, async () => {
      const { fs, store } = await setup();
      const created = await store.create(CWD);
      const history = conversation(2);
      await created.commit(history);
      const dir = created.getSessionPath();
      await created.close();
      const writer = await store.open(dir);
      if (gone === "removed") await fs.remove(dir, { recursive: true });
      else await fs.rename(dir, "/elsewhere");
      if (gone === "replaced by an empty directory") await fs.mkdir(dir, { mode: 0o700 });
      const moved = gone === "removed" ? undefined : fs.snapshotTree?.();
      const saving = write === "setPinned"
        ? writer.setPinned(true)
        : write === "commit"
        ? writer.commit([...history, user("again")])
        : write === "append"
        ? writer.append([user("again")])
        : write === "markRead"
        ? writer.markRead(history.length)
        : writer.setTitle({ text: "A title", source: "user", messageIndices: [0] });
      await assert.rejects(saving, (error: unknown) => {
        assert.ok(error instanceof SessionNotFoundError, String(error));
        assert.equal(error.file, `${dir}/meta.json`);
        return true;
      });
      await writer.close();
      if (gone === "replaced by an empty directory") assert.deepEqual(await fs.readDir(dir), []);
      else await assert.rejects(fs.lstat(dir), NotFound);
      assert.deepEqual((await store.listDetailed(CWD)).failures, []);
      if (moved !== undefined) assert.deepEqual(fs.snapshotTree?.(), moved);
    });
  }
}

for (const write of ["setPinned", "commit", "append", "setTitle"] as const) {
  for (const gone of ["removed", "moved away"] as const) {
    test(`a writer's ${write} after an earlier write, once its session directory was ${gone}, is SessionNotFoundError naming meta.json`, async () => {
      const { fs, store } = await setup();
      const writer = await store.create(CWD);
      const history = conversation(2);
      await writer.commit(history);
      await writer.setPinned(true); // the directory is known: later writes no longer look
      const dir = writer.getSessionPath();
      if (gone === "removed") await fs.remove(dir, { recursive: true });
      else await fs.rename(dir, "/elsewhere");
      const saving = write === "setPinned"
        ? writer.setPinned(false)
        : write === "commit"
        ? writer.commit([...history, user("again")])
        : write === "append"
        ? writer.append([user("again")])
        : writer.setTitle({ text: "A title", source: "user", messageIndices: [0] });
      await assert.rejects(saving, (error: unknown) => {
        assert.ok(error instanceof SessionNotFoundError, String(error));
        assert.equal(error.file, `${dir}/meta.json`);
        assert.ok(error.cause instanceof NotFound);
        return true;
      });
      await writer.close();
      await assert.rejects(fs.lstat(dir), NotFound);
    });
  }
}

for (const gone of ["removed", "moved away", "replaced by an empty directory"] as const) {
  test(`close() publishes no index.json once the session directory was ${gone}`, async () => {
    const { fs, store } = await setup();
    const created = await store.create(CWD);
    await created.commit(conversation(4));
    const dir = created.getSessionPath();
    await created.close();
    const writer = await store.open(dir);
    await writer.readHistory(); // the index is known to be there
    await writer.append([user("one more")]); // and lags behind the history
    if (gone === "removed") await fs.remove(dir, { recursive: true });
    else await fs.rename(dir, "/elsewhere");
    if (gone === "replaced by an empty directory") await fs.mkdir(dir, { mode: 0o700 });
    const before = fs.snapshotTree?.();
    await writer.close();
    assert.deepEqual(fs.snapshotTree?.(), before);
  });
}

/** An array holding an array ... `levels` arrays deep around 1. */
function nestedArrays(levels: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < levels; i++) value = [value];
  return value;
}

test("a meta.json header nested too deep to copy is a SessionFormatError in open, both listings and verify; the other sessions list", async () => {
  const { fs, store } = await setup();
  const healthy = await savedSession(store);
  const damaged = await savedSession(store);
  const metaPath = damaged.getSessionFile();
  const meta = await readJson(fs, metaPath);
  // Another writer's field, 5,000 levels deep: valid JSON that a structured clone cannot copy
  // (written as text: JSON.stringify cannot write it either on Node).
  (meta.header as Record<string, unknown>).futureField = "DEEP";
  const deep = `${"[".repeat(5000)}1${"]".repeat(5000)}`;
  await fs.writeFile(
    metaPath,
    new TextEncoder().encode(JSON.stringify(meta).replace('"DEEP"', deep)),
  );
  const before = fs.snapshotTree?.();
  const isDeep = (error: unknown): boolean => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, metaPath);
    assert.ok(error.path?.startsWith("header.futureField[0][0]"), error.path);
    return true;
  };
  await assert.rejects(store.open(metaPath), isDeep);
  await assert.rejects(store.open(metaPath, { readOnly: true }), isDeep);
  for (const fast of [false, true]) {
    const listing = await store.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(listing.sessions.map((info) => info.id), [healthy.id]);
    assert.equal(listing.failures.length, 1);
    isDeep(listing.failures[0]?.error);
  }
  const report = await verifySession(fs, damaged.getSessionPath(), { sha256: portableSha256 });
  assert.equal(report.ok, false);
  assert.deepEqual(fs.snapshotTree?.(), before);
});

test("a save whose metadata nests deeper than a header may is refused before anything is written", async () => {
  const { fs, store } = await setup();
  const session = await store.open((await savedSession(store)).getSessionPath());
  const before = fs.snapshotTree?.();
  const contexts = [{ userTurn: 0, content: "first", timestamp: 1, extra: nestedArrays(300) }];
  await assert.rejects(session.commit(session.messages, contexts as never), (error) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.ok(error.path?.startsWith("header.runtimeContexts[0].extra[0]"), error.path);
    return true;
  });
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(fs.snapshotTree?.(), before);
  await session.close();
});

test("metadata holding a BigInt is refused with a SessionFormatError naming meta.json and the field, before anything is written and never kept pending", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  const file = session.getSessionFile();
  const history = session.messages;
  const users = history.flatMap((message, i) => (message.role === "user" ? [i] : []));
  const refused = (path: string) => (error: unknown): boolean => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, path);
    return true;
  };
  const usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0 };
  const saves: [string, (extra: unknown) => Promise<void>][] = [
    [
      "header.runtimeContexts[0].extra",
      (extra) =>
        session.commit(history, [{ userTurn: 0, content: "c", timestamp: 1, extra }] as never),
    ],
    [
      "header.promptTimings[0].extra",
      (extra) =>
        session.append([], undefined, [{
          userMessageIndex: users[0],
          startedAt: 1,
          finishedAt: 2,
          extra,
        }] as never),
    ],
    [
      "header.compactions[0].usage.cost",
      (extra) =>
        session.commit(history, undefined, undefined, {
          compactions: [{
            id: "a1111111-2222-3333-4444-55555555555b",
            firstKeptMessageIndex: users[1],
            historyMessageCount: history.length,
            summary: "s",
            timestamp: 1,
            provider: "p",
            model: "m",
            usage: { ...usage, cost: extra },
          }],
        } as never),
    ],
    [
      "header.systemPromptCheckpoints[0].extra",
      (extra) =>
        session.commit(history, undefined, undefined, {
          systemPromptCheckpoints: [{ messageCount: 1, timestamp: 1, sections: { a: "x" }, extra }],
        } as never),
    ],
    [
      "header.title.extra",
      (extra) =>
        session.setTitle({ text: "T", source: "user", messageIndices: [0], extra } as never),
    ],
  ];
  const header = session.getHeader();
  const before = fs.snapshotTree?.();
  for (const [path, save] of saves) {
    for (const value of [1n, Object(2n), [3n], { deeper: [{ n: 4n }] }]) {
      const where = Array.isArray(value) ? `${path}[0]` : typeof value === "object" &&
          (value as { deeper?: unknown }).deeper !== undefined
        ? `${path}.deeper[0].n`
        : path;
      await assert.rejects(save(value), refused(where));
      assert.equal(session.hasPendingSave, false, where);
    }
  }
  assert.deepEqual(fs.snapshotTree?.(), before, "nothing was written");
  assert.deepEqual(session.getHeader(), header);
  // Nothing is pending, so the session goes on saving.
  await session.flush();
  await session.commit([...history, user("more")]);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.messages.length, history.length + 1);
  await reopened.close();

  // A draft keeps its title and header in memory until its first save: refused when given.
  const draft = await store.create(CWD);
  await assert.rejects(
    draft.setTitle({ text: "Draft", source: "user", messageIndices: [], extra: 2n } as never),
    (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, String(error));
      assert.equal(error.file, draft.getSessionFile());
      assert.equal(error.path, "header.title.extra");
      return true;
    },
  );
  await draft.commit([user("first")]);
  assert.equal(draft.hasPendingSave, false);
  await draft.close();
  const dir = `${AGENT}/sessions/draft`;
  assert.throws(
    () =>
      SessionManager.createDraft(
        { context: store.context, dir, collectionDir: dirname(dir) },
        {
          ...newSessionHeader({
            id: "0e5a3c1b-2d4f-4a6b-8c9d-0e1f2a3b4c5d",
            cwd: CWD,
            now: "2026-01-01T00:00:00.000Z",
          }),
          futureField: { n: 5n },
        } as never,
      ),
    (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, String(error));
      assert.equal(error.file, `${dir}/meta.json`);
      assert.equal(error.path, "header.futureField.n");
      return true;
    },
  );
  assert.equal((await store.list(CWD)).length, 2);
});

test("the meta.json encoders refuse a value JSON cannot write with a SessionFormatError naming the file and the field", () => {
  const header = {
    ...newSessionHeader({
      id: "0e5a3c1b-2d4f-4a6b-8c9d-0e1f2a3b4c5d",
      cwd: CWD,
      now: "2026-01-01T00:00:00.000Z",
    }),
  };
  const meta = (extra: Record<string, unknown>) =>
    ({
      format: "loop-session-storage",
      version: 3,
      header: { ...header, ...extra },
      generation: "0".repeat(64),
      start: 0,
      bytes: 0,
      messageCount: 0,
    }) as never;
  for (
    const [extra, path] of [
      [{ title: { text: "T", source: "user", messageIndices: [], n: 1n } }, "header.title"],
      [
        { runtimeContexts: [{ userTurn: 0, content: "c", timestamp: 1, n: 1n }] },
        "header.runtimeContexts",
      ],
      [{ futureField: 1n }, "header.futureField"],
    ] as const
  ) {
    for (
      const encode of [
        () => encodeStorageMeta(meta(extra), "/s/meta.json"),
        () => encodeStorageMetaReusing(meta(extra), new WeakMap(), "/s/meta.json"),
      ]
    ) {
      assert.throws(encode, (error: unknown) => {
        assert.ok(error instanceof SessionFormatError, String(error));
        assert.equal(error.file, "/s/meta.json");
        assert.equal(error.path, path);
        return true;
      });
    }
  }
});

test("setTitle() refuses a title nested deeper than a header may, on a saved session and on a draft, before anything is written; one at the limit saves and opens", async () => {
  const { fs, store } = await setup();
  const session = await store.open((await savedSession(store)).getSessionPath());
  const file = session.getSessionFile();
  const title = { text: "Deep", source: "user" as const, messageIndices: [0] };
  // The header is level 1 and its title level 2: 199 arrays below the title reach level 201.
  const tooDeep = (error: unknown): boolean => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, file);
    assert.ok(error.path?.startsWith("header.title.extra[0]"), error.path);
    return true;
  };
  const before = fs.snapshotTree?.();
  await assert.rejects(session.setTitle({ ...title, extra: nestedArrays(199) } as never), tooDeep);
  assert.deepEqual(fs.snapshotTree?.(), before);
  assert.equal(session.getHeader().title?.source, "fallback");
  await session.setTitle({ ...title, extra: nestedArrays(198) } as never);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.getHeader().title?.text, "Deep");
  await reopened.close();
  for (const fast of [false, true]) {
    assert.deepEqual((await store.listDetailed(CWD, undefined, { fast })).failures, []);
  }
  // A draft keeps its title in memory until its first save: refused when set, so that save (and
  // the session it creates) is never one an open would refuse.
  const draft = await store.create(CWD);
  await assert.rejects(
    draft.setTitle({ ...title, messageIndices: [], extra: nestedArrays(199) } as never),
    (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, String(error));
      assert.equal(error.file, draft.getSessionFile());
      assert.ok(error.path?.startsWith("header.title.extra[0]"), error.path);
      return true;
    },
  );
  await draft.commit(conversation(1));
  assert.equal(draft.hasPendingSave, false);
  await draft.close();
  const opened = await store.open(draft.getSessionPath(), { readOnly: true });
  assert.equal(opened.getHeader().title?.source, "fallback");
  await opened.close();
  assert.equal((await store.list(CWD)).length, 2);
});

test("open() reports a log shorter than its committed range and modifies nothing", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const log = await fs.readFile(logPath);
  await fs.writeFile(logPath, log.subarray(0, log.length - 3));
  const before = fs.snapshotTree?.();
  await assert.rejects(store.open(session.getSessionPath()), CorruptSessionError);
  assert.deepEqual(fs.snapshotTree?.(), before);
});

for (const damage of ["truncated", "removed"] as const) {
  test(`an empty committed range past the end of a ${damage} log is reported by open, listing and verify alike`, async () => {
    const { fs, store } = await setup();
    const session = await store.create(CWD);
    await session.commit(conversation(2));
    await session.commit([]); // a cleared history: an empty generation where the log ends
    await session.close();
    const dir = session.getSessionPath();
    const logPath = `${dir}/messages.jsonl`;
    const meta = await readJson(fs, `${dir}/meta.json`);
    const start = meta.start as number;
    assert.ok(start > 0 && meta.bytes === 0);
    // Healthy, it opens and takes the next save.
    const healthy = fs.clone();
    const check = new SessionStore({ fs: healthy, agentDir: AGENT });
    const writer = await check.open(dir);
    await writer.commit(conversation(1));
    await writer.close();

    if (damage === "truncated") await fs.writeFile(logPath, new Uint8Array(5));
    else await fs.remove(logPath);
    const size = damage === "truncated" ? 5 : 0;
    const before = fs.snapshotTree?.();
    for (const readOnly of [true, false]) {
      await assert.rejects(store.open(dir, { readOnly }), (error: unknown) => {
        assert.ok(error instanceof CorruptSessionError);
        assert.equal(error.file, logPath);
        assert.equal(error.offset, size);
        return true;
      });
    }
    const listed = await store.listDetailed(CWD);
    assert.deepEqual(listed.sessions, []);
    assert.ok(listed.failures[0]?.error instanceof CorruptSessionError);
    const report = await verifySession(fs, dir, { sha256: portableSha256 });
    assert.equal(report.ok, false);
    assert.deepEqual(report.findings.map((finding) => finding.kind), ["short-log"]);
    assert.deepEqual(fs.snapshotTree?.(), before);
  });
}

test("open() reports a checksum mismatch inside the committed range", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const log = await fs.readFile(logPath);
  const damaged = log.slice();
  damaged[10] = damaged[10] === 0x41 ? 0x42 : 0x41;
  await fs.writeFile(logPath, damaged);
  await assert.rejects(store.open(session.getSessionPath()), (error: unknown) => {
    assert.ok(error instanceof CorruptSessionError);
    assert.equal(error.file, logPath);
    return true;
  });
  assert.deepEqual(await fs.readFile(logPath), damaged);
});

test("open() requires the session's cwd to still exist", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  await fs.remove(CWD, { recursive: true });
  await assert.rejects(store.open(session.getSessionPath()), SessionCwdError);
});

test("a cwd whose path now runs through a file is gone: open rejects it, verify reports it", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  await session.close();
  // The project directory's parent is replaced by a file: stat of the cwd fails with ENOTDIR.
  await fs.remove("/work", { recursive: true });
  await fs.writeFile("/work", new TextEncoder().encode("a file now"));
  const thrown = await store.open(session.getSessionPath()).then(() => undefined, (e) => e);
  assert.ok(thrown instanceof SessionCwdError, String(thrown));
  assert.equal(thrown.cwd, CWD);
  assert.equal(thrown.file, session.getSessionFile());
  const report = await verifySession(fs, session.getSessionPath(), { sha256: portableSha256 });
  assert.deepEqual(
    report.findings.map((f) => [f.severity, f.kind, f.message]),
    [["error", "cwd", `cwd no longer exists: ${CWD}`]],
  );
});

test("a recorded cwd no directory can have (a NUL byte, too long, a link loop) is gone: open rejects it naming the session, a listing skips it", async () => {
  const { fs, store } = await setup();
  const other = await savedSession(store); // a healthy session of the same workspace
  await other.close();
  const session = await savedSession(store);
  await session.close();
  const metaPath = session.getSessionFile();
  const meta = await readJson(fs, metaPath) as { header: Record<string, unknown> };
  await fs.symlink("/loop-b", "/loop-a");
  await fs.symlink("/loop-a", "/loop-b");
  for (const cwd of [`${CWD}\u0000`, `/${"d/".repeat(2100)}d`, "/loop-a"]) {
    const header = { ...meta.header, cwd };
    await fs.writeFile(metaPath, new TextEncoder().encode(JSON.stringify({ ...meta, header })));
    const thrown = await store.open(metaPath, { readOnly: true }).then(() => undefined, (e) => e);
    assert.ok(thrown instanceof SessionCwdError, String(thrown));
    assert.equal(thrown.cwd, cwd);
    assert.equal(thrown.file, metaPath);
    // The workspace's listing goes on: the damaged session is not of this cwd.
    for (const fast of [true, false]) {
      const listed = await store.list(CWD, undefined, { fast });
      assert.deepEqual(listed.map((info) => info.id), [other.id], `fast: ${fast}`);
    }
  }
});

test("open() rejects unsupported storage versions and malformed meta.json with typed errors", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  const metaPath = session.getSessionFile();
  const meta = await readJson(fs, metaPath);
  await fs.writeFile(metaPath, new TextEncoder().encode(JSON.stringify({ ...meta, version: 4 })));
  await assert.rejects(store.open(metaPath), UnsupportedSessionError);
  await fs.writeFile(metaPath, new TextEncoder().encode("{not json"));
  await assert.rejects(store.open(metaPath), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError);
    assert.equal(error.file, metaPath);
    return true;
  });
  await fs.writeFile(metaPath, new TextEncoder().encode(JSON.stringify({ ...meta, bytes: -1 })));
  await assert.rejects(store.open(metaPath), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError);
    assert.equal(error.path, "bytes");
    return true;
  });
});

test("saves enforce 0700 directories and 0600 files even when they existed with wider modes", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  const dir = session.getSessionPath();
  await fs.chmod(dir, 0o755);
  await fs.chmod(session.getSessionDir(), 0o755);
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.chmod(`${dir}/${name}`, 0o644);
  }
  const reopened = await store.open(dir);
  await reopened.commit([...reopened.messages, user("more")]);
  assert.equal((await fs.stat(dir)).mode, 0o700);
  assert.equal((await fs.stat(session.getSessionDir())).mode, 0o700);
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    assert.equal((await fs.stat(`${dir}/${name}`)).mode, 0o600, name);
  }
});

test("compact, cleanup, removeLegacyBackup, restore and delete bring a collection of a wider mode to 0700, as saves do", async () => {
  const operations = ["compact", "cleanup", "removeLegacyBackup", "restore", "delete"] as const;
  for (const operation of operations) {
    const { fs, store } = await setup();
    const session = await savedSession(store);
    const collection = session.getSessionDir();
    await store.archive.set(CWD, [session.id], true);
    await fs.chmod(collection, 0o755);
    if (operation === "compact") await store.compact(session.getSessionPath());
    else if (operation === "cleanup") await store.cleanup(CWD);
    else if (operation === "restore") await store.archive.set(CWD, [session.id], false);
    else if (operation === "delete") await store.archive.delete(CWD, [session.id]);
    else assert.equal(await store.removeLegacyBackup(session.getSessionPath()), false);
    assert.equal((await fs.stat(collection)).mode, 0o700, operation);
  }
  // A collection that does not exist is not made by a cleanup.
  const { fs, store } = await setup();
  await store.cleanup(CWD);
  await assert.rejects(fs.lstat(`${AGENT}/sessions`), NotFound);
});

test("the private modes a save enforces survive a power loss, also when the save wrote no log bytes", async () => {
  for (const save of ["setPinned", "commit"] as const) {
    for (const process of ["same", "next"] as const) {
      const { fs, store } = await setup();
      const session = await store.create(CWD);
      await session.commit(conversation(1));
      await session.close();
      const dir = session.getSessionPath();
      const collection = session.getSessionDir();
      await fs.chmod(dir, 0o755);
      await fs.chmod(collection, 0o755);
      for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
        await fs.chmod(`${dir}/${name}`, 0o644);
      }
      fs.syncAll();
      // The same store, or another process (a new filesystem view, a new store).
      const live = process === "same" ? fs : fs.clone();
      const writer = await (process === "same" ? store : new SessionStore({
        fs: live,
        agentDir: AGENT,
      })).open(dir);
      if (save === "setPinned") await writer.setPinned(true);
      else await writer.commit([...writer.messages, user("more")]);
      await writer.close();
      const recovered = live.crash({ seed: 0, extraJournal: "none", tailMode: "none" });
      const label = `${save}, ${process} process`;
      assert.equal((await recovered.stat(collection)).mode, 0o700, label);
      assert.equal((await recovered.stat(dir)).mode, 0o700, label);
      for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
        assert.equal((await recovered.stat(`${dir}/${name}`)).mode, 0o600, `${label}: ${name}`);
      }
    }
  }
});

test("a save whose log mode it tightened works where a read-only handle cannot be fsynced", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  const dir = session.getSessionPath();
  await fs.chmod(`${dir}/messages.jsonl`, 0o644);
  // As on platforms that fsync only handles open for writing.
  const strict = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (prop !== "open" && prop !== "openNoFollow") return value.bind(target);
      return async (path: string, options?: { write?: boolean; append?: boolean }) => {
        const opened = await value.call(target, path, options);
        const handle = "handle" in opened ? opened.handle : opened;
        if (prop === "open" && (options?.write === true || options?.append === true)) {
          return opened;
        }
        handle.sync = () => Promise.reject(new FsIoError("EPERM", "fsync", path, "read-only"));
        return opened;
      };
    },
  });
  const writer = await new SessionStore({ fs: strict, agentDir: AGENT }).open(dir);
  await writer.setPinned(true);
  await writer.close();
  assert.equal((await fs.stat(`${dir}/messages.jsonl`)).mode, 0o600);
});

test("a writer changes the mode of no session file that is private already (a chmod goes by path)", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  const dir = session.getSessionPath();
  const chmods: string[] = [];
  const watched = hookedFs(fs, {
    before(method, args) {
      if (method === "chmod" && String(args[0]).startsWith(`${dir}/`)) chmods.push(String(args[0]));
      return Promise.resolve();
    },
  });
  const writer = await new SessionStore({ fs: watched, agentDir: AGENT }).open(dir);
  await writer.commit([...writer.messages, user("more")]);
  await writer.close();
  assert.deepEqual(chmods, []);
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    assert.equal((await fs.stat(`${dir}/${name}`)).mode, 0o600, name);
  }
});

test("concurrent calls from one process are serialized in call order", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const h1 = conversation(1);
  const h2 = [...h1, user("two")];
  const h3 = [...h2, assistant("three")];
  await Promise.all([
    session.commit(h1),
    session.setPinned(true),
    session.commit(h2),
    session.commit(h3),
  ]);
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.messages, h3);
  assert.notEqual(reopened.getHeader().pinnedAt, undefined);
});

test("a second writable manager for the same session in one process is refused", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await assert.rejects(store.open(session.getSessionPath()), SessionBusyError);
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  await assert.rejects(reader.commit(reader.messages));
  await session.close();
  const writer = await store.open(session.getSessionPath());
  await writer.commit([...writer.messages, user("ok")]);
});

test("a symlink planted at the session directory is refused", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  await fs.rename(session.getSessionPath(), "/elsewhere");
  await fs.symlink("/elsewhere", session.getSessionPath());
  await assert.rejects(store.open(session.getSessionPath()), SessionFormatError);
});

test("index.json may lag by a few rounds as a valid prefix, and close() brings it up to date", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const indexPath = `${session.getSessionPath()}/index.json`;
  const first = await readJson(fs, indexPath);
  history.push(user("three"), assistant("three"));
  await session.commit(history);
  const lagging = await readJson(fs, indexPath);
  assert.deepEqual(lagging, first, "a small lag does not republish the index");
  const meta = await readJson(fs, session.getSessionFile());
  assert.equal(lagging.start, meta.start);
  assert.ok((lagging.bytes as number) < (meta.bytes as number));
  const page = await session.readHistory();
  assert.deepEqual(page.messages, history.slice(page.start));
  assert.deepEqual(
    await readJson(fs, indexPath),
    first,
    "a valid prefix index is not rebuilt by reads",
  );
  await session.close();
  const closed = await readJson(fs, indexPath);
  assert.equal(closed.generation, meta.generation);
  assert.equal((closed.rounds as unknown[]).length, 3);
});

test("index.json is republished once it lags by eight rounds", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const indexPath = `${session.getSessionPath()}/index.json`;
  for (let i = 0; i < 8; i++) {
    history.push(user(`q${i}`));
    await session.commit(history);
  }
  const index = await readJson(fs, indexPath);
  assert.equal((index.rounds as unknown[]).length, 9);
  assert.equal(index.generation, (await readJson(fs, session.getSessionFile())).generation);
});

test("index.json is republished once it lags by 1 MiB of committed bytes, without a new round", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const indexPath = `${session.getSessionPath()}/index.json`;
  const first = await readJson(fs, indexPath);
  // Long answers in the same round: no round lags, only bytes.
  for (let i = 0; i < 4; i++) {
    history.push(assistant(`a${i} ${"x".repeat(300 * 1024)}`));
    await session.commit(history);
  }
  const meta = await readJson(fs, session.getSessionFile());
  assert.ok((meta.bytes as number) - (first.bytes as number) >= 1024 * 1024);
  const index = await readJson(fs, indexPath);
  assert.equal(index.bytes, meta.bytes, "the index covers the committed bytes again");
  assert.equal(index.messageCount, meta.messageCount);
  assert.equal(index.generation, meta.generation);
  await session.close();
});

test("opening for writing and closing without a write modifies nothing", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(3));
  await session.close();
  await fs.remove(`${session.getSessionPath()}/index.json`);
  const before = fs.snapshotTree();
  const reopened = await store.open(session.getSessionPath());
  await reopened.close();
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a last line written in another JSON layout is not mistaken for an edit", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = [user("q"), assistant("a")];
  await session.commit(history);
  await session.close();
  // Rewrite the committed bytes with the same messages in an indented layout (as another writer
  // could have), keeping meta.json consistent.
  const dir = session.getSessionPath();
  const text = history.map((m) => JSON.stringify(m, null, 1).replaceAll("\n", "")).join("\n") +
    "\n";
  const bytes = new TextEncoder().encode(text);
  await fs.writeFile(`${dir}/messages.jsonl`, bytes);
  const meta = await readJson(fs, `${dir}/meta.json`);
  await fs.writeFile(
    `${dir}/meta.json`,
    new TextEncoder().encode(
      JSON.stringify({ ...meta, bytes: bytes.length, generation: sha256Hex(bytes) }),
    ),
  );
  const reopened = await store.open(dir);
  await reopened.commit([...reopened.messages, user("next")]);
  const after = await readJson(fs, `${dir}/meta.json`);
  assert.equal(after.start, 0, "appended to the same generation");
  assert.equal(after.messageCount, 3);
});

test("append() adds messages to the saved history like a complete-history commit", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.append([user("q"), assistant("calling", [{ id: "c9", name: "read" }])]).then(
    () => assert.fail("unfinished tool calls must reject"),
    (error) => assert.ok(error instanceof SessionFormatError),
  );
  const first = user("first");
  await session.append([first]); // a draft is saved whole
  const history = [first];
  const more = [assistant("calling", [{ id: "c1", name: "read" }]), toolResult("c1", "read")];
  await session.append(more);
  history.push(...more);
  assert.deepEqual(await saved(store, session), history);
  const log = await fs.readFile(`${session.getSessionPath()}/messages.jsonl`);
  assert.equal(
    new TextDecoder().decode(log),
    history.map((m) => JSON.stringify(m)).join("\n") + "\n",
  );
  assert.equal(session.unread, true);
  await assert.rejects(session.append([toolResult("c1", "read")]), SessionFormatError);
  assert.deepEqual(session.messages, history);
});

test("append() right after a draft's first commit, not awaited, keeps what that commit saves", async () => {
  const { store } = await setup();
  // A first user message, then the answer appended before the first save ran.
  const session = await store.create(CWD);
  const question = user("first question");
  const answer = assistant("answer");
  await Promise.all([session.commit([question]), session.append([answer])]);
  assert.deepEqual(session.messages, [question, answer]);
  assert.deepEqual(await saved(store, session), [question, answer]);
  // A greeting kept as a draft (no user round, no file yet), then a user message appended.
  const greeted = await store.create(CWD);
  const greeting = assistant("hello");
  const ask = user("a question");
  await Promise.all([greeted.commit([greeting]), greeted.append([ask])]);
  assert.deepEqual(greeted.messages, [greeting, ask]);
  assert.deepEqual(await saved(store, greeted), [greeting, ask]);
});

test("append() keeps a failed save pending for flush()", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit([user("a")]);
  fs.failAt(fs.operationCount + 2, { error: "EIO", persistent: true });
  await assert.rejects(session.append([assistant("b")]));
  fs.clearFaults();
  await assert.rejects(session.append([user("c")]), PendingSaveError);
  await session.flush();
  assert.equal((await saved(store, session)).length, 2);
});

test("a symlink planted at messages.jsonl is refused: nothing is read or written through it", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = [user("q"), assistant("a")];
  await session.commit(history);
  await session.close();
  const log = `${session.getSessionPath()}/messages.jsonl`;
  const bytes = await fs.readFile(log);
  const victim = new Uint8Array([...bytes, ...new TextEncoder().encode("PRECIOUS\n")]);
  await fs.writeFile("/victim.txt", victim, { mode: 0o644 });
  await fs.remove(log);
  await fs.symlink("/victim.txt", log);
  await assert.rejects(store.open(session.getSessionPath()), SessionFormatError);
  assert.deepEqual(await fs.readFile("/victim.txt"), victim);
  assert.equal((await fs.stat("/victim.txt")).mode, 0o644);
});

test("a log swapped for a link after the open checked it is refused by the open itself, not read through", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit([user("q"), assistant("a")]);
  await session.close();
  const log = `${session.getSessionPath()}/messages.jsonl`;
  // A copy of the log elsewhere: read through a link, it would open as the session's history.
  await fs.writeFile("/planted.jsonl", await fs.readFile(log));
  let swapped = false;
  const swap = gate();
  const racing = hookedFs(fs, {
    async before(method, args) {
      // The open of the log comes after the swap (a read-only open opens it while it checks).
      if (method === "openNoFollow" && args[0] === log) await swap.wait;
    },
    async after(method, args) {
      // Right after the open's kind check of the log, a link takes its place.
      if (method === "lstat" && args[0] === log && !swapped) {
        swapped = true;
        await fs.remove(log);
        await fs.symlink("/planted.jsonl", log);
        swap.open();
      }
    },
  });
  const reader = new SessionStore({ fs: racing, agentDir: AGENT });
  const error = await reader.open(session.getSessionPath(), { readOnly: true }).then(
    () => assert.fail("the open read the log through a link"),
    (error: unknown) => error,
  );
  assert.ok(swapped);
  assert.ok(error instanceof SessionFormatError);
  assert.equal(error.file, log);
});

test("a link planted at index.json never blocks a save and is replaced, never followed", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = [user("q"), assistant("a")];
  await session.commit(history);
  await session.close();
  const index = `${session.getSessionPath()}/index.json`;
  const victim = new TextEncoder().encode("PRECIOUS\n");
  await fs.writeFile("/victim.txt", victim, { mode: 0o644 });
  await fs.remove(index);
  await fs.symlink("/victim.txt", index);
  const writer = await store.open(session.getSessionPath());
  history.push(user("more"));
  await writer.commit(history);
  assert.equal(writer.hasPendingSave, false);
  assert.equal((await writer.readHistory()).total, 3);
  await writer.close();
  assert.equal((await fs.lstat(index)).kind, "file");
  assert.deepEqual(await fs.readFile("/victim.txt"), victim);
  assert.equal((await fs.stat("/victim.txt")).mode, 0o644);
});

test("metadata arguments of the wrong type and unserializable messages reject with typed errors", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history, [{ userTurn: 0, content: "ctx", timestamp: 1 }] as never);
  for (const bad of [{}, null, ""]) {
    await assert.rejects(session.commit(history, bad as never), SessionFormatError);
    await assert.rejects(session.commit(history, undefined, bad as never), SessionFormatError);
  }
  await assert.rejects(
    session.commit(history, undefined, undefined, "x" as never),
    SessionFormatError,
  );
  assert.equal(session.getRuntimeContexts().length, 1, "stored metadata is kept");
  const cyclic = user("loop") as unknown as Record<string, unknown>;
  cyclic.self = cyclic;
  await assert.rejects(session.commit([...history, cyclic as never]), SessionFormatError);
  assert.equal(session.hasPendingSave, false);
  // What JSON writes as something else (a Date written as a string) is refused, not saved into a
  // session that opening would then refuse.
  const when = {
    role: "assistant",
    content: [{ type: "toolCall", id: "c1", name: "when", arguments: new Date(0) }],
    api: "a",
    provider: "p",
    model: "m",
    usage: {},
    stopReason: "toolUse",
    timestamp: 2,
  };
  await assert.rejects(session.commit([...history, when as never]), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError);
    assert.match(String(error.path), /arguments/);
    return true;
  });
  const content = [{ type: "text", text: "hi" }];
  for (
    const [field, odd] of [
      ["usage", { ...when, content: [], stopReason: "stop", usage: new Date(0) }],
      ["usage", { ...when, content: [], stopReason: "stop", usage: { toJSON: () => undefined } }],
      ["content", { ...user("q"), content: Object.assign([...content], { toJSON: () => "x" }) }],
    ] as const
  ) {
    await assert.rejects(session.commit([...history, odd as never]), (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, field);
      assert.match(String(error.path), new RegExp(field));
      return true;
    });
  }
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.messages.length, history.length);
  await reopened.close();
});

test("a save refuses messages JSON writes as something else (boxed primitives, inherited or non-enumerable fields) before anything is written", async () => {
  const { fs, store } = await setup();
  const session = await store.open((await savedSession(store)).getSessionPath());
  const history = session.messages;
  const messagesFile = `${session.getSessionPath()}/messages.jsonl`;
  const reply = (over: Record<string, unknown>) => ({
    ...(assistant("a") as unknown as Record<string, unknown>),
    ...over,
  });
  class Reply {
    content = [{ type: "text", text: "a" }];
    api = "a";
    provider = "p";
    model = "m";
    usage = {};
    stopReason = "stop";
    timestamp = 2;
    get role(): string {
      return "assistant";
    }
  }
  const hidden = (value: Record<string, unknown>, field: string) =>
    Object.defineProperty(value, field, { value: value[field], enumerable: false });
  const inherited = Object.assign(Object.create({ role: "assistant" }), reply({}));
  delete inherited.role;
  const cases: [string, unknown[], RegExp][] = [
    ["usage = new Number(1)", [reply({ usage: new Number(1) })], /^messages\[\d+\]\.usage$/],
    [
      "toolCall arguments = new String('x')",
      [
        reply({
          stopReason: "toolUse",
          content: [{ type: "toolCall", id: "c", name: "t", arguments: new String("x") }],
        }),
        { ...toolResult("c", "t") },
      ],
      /^messages\[\d+\]\.content\[0\]\.arguments$/,
    ],
    [
      "a content block that is a boxed Boolean with fields",
      [reply({ content: [Object.assign(new Boolean(true), { type: "text", text: "a" })] })],
      /^messages\[\d+\]\.content\[0\]$/,
    ],
    ["a role inherited from a prototype", [inherited], /^messages\[\d+\]$/],
    ["a class instance whose role is a getter", [new Reply()], /^messages\[\d+\]$/],
    [
      "a non-enumerable timestamp",
      [hidden(reply({}), "timestamp")],
      /^messages\[\d+\]\.timestamp$/,
    ],
    [
      "a non-enumerable block text",
      [reply({ content: [hidden({ type: "text", text: "a" }, "text")] })],
      /^messages\[\d+\]\.content\[0\]\.text$/,
    ],
    [
      "a non-enumerable user content",
      [hidden({ ...user("q") }, "content")],
      /^messages\[\d+\]\.content$/,
    ],
  ];
  const before = fs.snapshotTree?.();
  for (const [label, added, path] of cases) {
    for (const save of ["commit", "append"] as const) {
      const saving = save === "commit"
        ? session.commit([...history, ...added] as never)
        : session.append(added as never);
      await assert.rejects(saving, (error: unknown) => {
        assert.ok(error instanceof SessionFormatError, `${label} (${save}): ${error}`);
        assert.equal(error.file, messagesFile, label);
        assert.match(String(error.path), path, `${label} (${save})`);
        return true;
      });
      assert.equal(session.hasPendingSave, false, label);
    }
  }
  assert.deepEqual(fs.snapshotTree?.(), before, "nothing was written");
  // A plain copy, with the role as an own field, saves.
  await session.commit([...history, { ...new Reply(), role: "assistant" } as never]);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.messages.length, history.length + 1);
  await reopened.close();
});

test("a replacement of saved messages does not set unread; newly appended output does", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const history = [user("q"), assistant("a"), user("q2"), assistant("a2")];
  await session.commit(history);
  await session.markRead(4);
  await session.commit([user("q edited"), ...history.slice(1)]);
  assert.equal(session.unread, false);
  await session.commit([user("q edited"), assistant("a changed"), ...history.slice(2)]);
  // A changed saved message is not newly appended output.
  assert.equal(session.unread, false);
  await session.commit([user("q edited"), assistant("a changed"), ...history.slice(2), user("q3")]);
  assert.equal(session.unread, false);
  await session.commit([
    user("q edited"),
    assistant("a changed"),
    ...history.slice(2),
    user("q3"),
    assistant("a3"),
  ]);
  assert.equal(session.unread, true);
});

test("unread follows newly appended output only: rewriting saved messages never sets it", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const reply = assistant("partial");
  const history = [user("q"), reply];
  await session.commit(history);
  assert.equal(session.unread, true);
  assert.equal(await session.markRead(2), true);
  const before = session.getStorageInfo()?.generation;
  // Completed in place and saved again: a new generation, but nothing was appended.
  (reply as unknown as { content: { text: string }[] }).content[0]!.text = "partial, then complete";
  await session.commit(history);
  assert.notEqual(session.getStorageInfo()?.generation, before);
  assert.equal(session.unread, false);
  assert.deepEqual(await saved(store, session), history);
  // An earlier assistant message replaced by a new object: not appended either.
  await session.commit([user("q"), assistant("other answer")]);
  assert.equal(session.unread, false);
  // A replacement that also appends output: unread.
  await session.commit([user("q edited"), assistant("a"), user("q2"), assistant("a2")]);
  assert.equal(session.unread, true);
});

test("a read-only manager's page reads never look at index.json, so its faults cannot fail them", async () => {
  const { fs, store } = await setup();
  const writer = await store.create(CWD);
  const history = conversation(6);
  await writer.commit(history);
  await writer.close();
  const index = `${writer.getSessionPath()}/index.json`;
  await fs.writeFile(index, new TextEncoder().encode("{ stale"));
  const reader = await store.open(writer.getSessionPath(), { readOnly: true });
  fs.resetCounter();
  // Every readFile fails: a page read uses the log by a handle, never readFile.
  fs.failAt(1, { ops: ["readFile"], persistent: true });
  const page = await reader.readHistory();
  const again = await reader.readHistory();
  fs.clearFaults();
  assert.deepEqual(page.messages, history.slice(page.start));
  assert.deepEqual(again, page);
  assert.ok(
    fs.operationLog.every((record) => !record.path.endsWith("/index.json")),
    fs.operationLog.map((record) => `${record.op} ${record.path}`).join("; "),
  );
  assert.equal(text.decode(await fs.readFile(index)), "{ stale");
  await reader.close();
});

test("a writable manager serves a page when index.json cannot be read, and rebuilds it", async () => {
  const { fs, store } = await setup();
  const writer = await store.create(CWD);
  const history = conversation(6);
  await writer.commit(history);
  await writer.close();
  const index = `${writer.getSessionPath()}/index.json`;
  const built = text.decode(await fs.readFile(index));
  await fs.writeFile(index, new TextEncoder().encode("{ stale"));
  // The open finds index.json malformed; the page read reads it again, and on one I/O error
  // there the page is served and the index rebuilt anyway.
  const session = await store.open(writer.getSessionPath());
  fs.failAt(fs.operationCount + 1, { ops: ["readFile"] });
  const page = await session.readHistory();
  fs.clearFaults();
  assert.deepEqual(page.messages, history.slice(page.start));
  assert.equal(text.decode(await fs.readFile(index)), built);
  await session.close();
});

test("a save to a session whose emptied history's log went missing reports it, creating no log", async () => {
  const { fs, store } = await setup();
  const created = await store.create(CWD);
  await created.commit(conversation(1));
  // A replacement with no messages commits an empty range at the old log's end.
  await created.commit([]);
  await created.close();
  const dir = created.getSessionPath();
  const session = await store.open(dir);
  await fs.remove(`${dir}/messages.jsonl`);
  const names = async () => (await fs.readDir(dir)).map((entry) => entry.name).sort();
  const files = await names();
  await assert.rejects(
    session.commit([user("again")]),
    (error: unknown) =>
      error instanceof CorruptSessionError && error.file === `${dir}/messages.jsonl` &&
      /starts at byte [1-9]/.test(error.message),
  );
  assert.deepEqual(await names(), files, "no messages.jsonl is created in a damaged session");
  await session.close();
  await assert.rejects(store.open(dir), CorruptSessionError);
});

test("a page read of a session whose log went missing reports corruption, as an open does", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await fs.remove(`${session.getSessionPath()}/messages.jsonl`);
  await assert.rejects(session.readHistory(), CorruptSessionError);
  await session.close();
  await assert.rejects(store.open(session.getSessionPath()), CorruptSessionError);
});

test("readHistory() takes -0 as the boundary 0 and refuses null and a non-string revision", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(4));
  const empty = await session.readHistory(-0);
  assert.ok(Object.is(empty.end, 0) && Object.is(empty.start, 0));
  await assert.rejects(session.readHistory(null as unknown as number), InvalidArgumentError);
  await assert.rejects(
    session.readHistory(undefined, 123 as unknown as string),
    InvalidArgumentError,
  );
  const draft = await store.create(CWD);
  await assert.rejects(draft.readHistory(undefined, 7 as unknown as string), InvalidArgumentError);
});

test("a pin whose directory fsync failed does not take effect with a later write", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  fs.failAt(fs.operationCount + 1, { ops: ["syncDir"] });
  await assert.rejects(session.setPinned(true));
  fs.clearFaults();
  assert.equal(session.getHeader().pinnedAt, undefined);
  await session.commit([...history, user("more")]);
  assert.equal(session.getHeader().pinnedAt, undefined);
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.getHeader().pinnedAt, undefined);
});

test("a failed pin or read receipt whose meta.json landed is undone at once, and at close", async () => {
  for (const change of ["pin", "read"] as const) {
    const { fs, store } = await setup();
    const session = await store.create(CWD);
    const history = conversation(1);
    await session.commit(history);
    const write = () =>
      change === "pin" ? session.setPinned(true) : session.markRead(history.length);
    // The rename lands, the directory fsync fails: the write is rejected.
    fs.failAt(fs.operationCount + 1, { ops: ["syncDir"] });
    await assert.rejects(write());
    fs.clearFaults();
    const seen = async () => {
      const reader = await store.open(session.getSessionPath(), { readOnly: true });
      return change === "pin" ? reader.getHeader().pinnedAt : reader.getHeader().unread;
    };
    // Readers never see the rejected change, neither now nor after close().
    assert.equal(await seen(), change === "pin" ? undefined : true, `${change}: right after`);
    await session.close();
    assert.equal(await seen(), change === "pin" ? undefined : true, `${change}: after close`);
  }
  // When the undo itself fails before its rename, close() settles it.
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  const start = fs.operationCount;
  fs.failAt(start + 1, { ops: ["syncDir"] }); // the pin's rename lands, its fsync fails
  fs.failAt(start + 2, { ops: ["open"], persistent: true }); // so does every undo's temp file
  await assert.rejects(session.setPinned(true));
  fs.clearFaults();
  const pinned = async () =>
    (await store.open(session.getSessionPath(), { readOnly: true })).getHeader().pinnedAt;
  assert.notEqual(await pinned(), undefined, "the undo failed: the pin is still on disk");
  await session.close();
  assert.equal(await pinned(), undefined);
});

test("close() rejects, once closed, when a rejected metadata change it must undo cannot be undone", async () => {
  for (const change of ["pin", "title", "read"] as const) {
    const { fs: memory } = await setup();
    // Once armed, the directory fsync after the rename fails, and so does every call after it
    // until the disk is mended: the write's own undo and close()'s.
    let armed = false;
    let broken = false;
    const fs = hookedFs(memory, {
      before(method, args) {
        if (armed && method === "syncDir") [armed, broken] = [false, true];
        if (broken) throw new FsIoError("EIO", method, String(args[0]), "the disk fails");
      },
    });
    const store = new SessionStore({ fs, agentDir: AGENT });
    const session = await store.create(CWD);
    const history = conversation(1);
    await session.commit(history);
    await session.setTitle({ text: "Accepted", source: "user", messageIndices: [] });
    const write = () =>
      change === "pin"
        ? session.setPinned(true)
        : change === "title"
        ? session.setTitle({ text: "Rejected", source: "user", messageIndices: [] })
        : session.markRead(history.length);
    armed = true;
    await assert.rejects(write(), FsIoError);
    const closing = await session.close().then(() => undefined, (e: unknown) => e);
    assert.ok(closing instanceof SessionError, `${change}: ${closing}`);
    assert.equal(closing.file, session.getSessionFile());
    assert.ok(closing.cause instanceof FsIoError, `${change}: ${closing.cause}`);
    assert.match(closing.message, /could not be undone/);
    broken = false;
    // The session is closed all the same: its writer slot is free and the change is reported.
    await assert.rejects(session.setPinned(false), SessionError);
    const reopened = await store.open(session.getSessionPath());
    const header = reopened.getHeader();
    const landed = change === "pin"
      ? header.pinnedAt !== undefined
      : change === "title"
      ? header.title?.text === "Rejected"
      : header.unread === false;
    assert.ok(landed, `${change}: the rejected change is what meta.json holds, as close() said`);
    await reopened.close();
  }
});

test("readHistory() never reads through a link planted at messages.jsonl after the session was opened", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = [user("q"), assistant("a")];
  await session.commit(history);
  const log = `${session.getSessionPath()}/messages.jsonl`;
  const bytes = await fs.readFile(log);
  // Same size, other bytes: a page read through the link would not parse.
  await fs.writeFile("/victim.txt", new Uint8Array(bytes.length).fill(0x20), { mode: 0o644 });
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  await fs.remove(log);
  await fs.symlink("/victim.txt", log);
  // The writer opens its page log lazily and refuses the link; the read-only manager pages the
  // log its open verified.
  await assert.rejects(session.readHistory(), SessionFormatError);
  assert.deepEqual((await reader.readHistory()).messages, history);
  await reader.close();
});

test("a writer never appends through a link swapped in for messages.jsonl just before it opens the log", async () => {
  const { fs, store } = await setup();
  const first = await store.create(CWD);
  const history = [user("q"), assistant("a")];
  await first.commit(history);
  await first.close();
  const dir = first.getSessionPath();
  const log = `${dir}/messages.jsonl`;
  const racing = linkedBeforeOpen(fs, log, "/victim.jsonl", "/aside.jsonl", { appending: true });
  const writer = await new SessionStore({ fs: racing.fs, agentDir: AGENT }).open(dir);
  await assert.rejects(writer.commit([...history, user("more")]), SessionFormatError);
  assert.equal(racing.swapped(), true, "the log was swapped just before the writer's open");
  await writer.close();
  // Nothing was written through the link, and the session is as it was.
  assert.deepEqual(await fs.readFile("/victim.jsonl"), await fs.readFile("/aside.jsonl"));
  await fs.remove(log);
  await fs.rename("/aside.jsonl", log);
  const reader = await store.open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, history);
  await reader.close();
});

test("a writer on a port without openAppendNoFollow (an adapter written before it) checks its log with lstat and saves", async () => {
  const { fs, store } = await setup();
  const first = await store.create(CWD);
  const history = [user("q"), assistant("a")];
  await first.commit(history);
  await first.close();
  const calls: string[] = [];
  const older = new Proxy(fs, {
    get(target, prop) {
      if (prop === "openAppendNoFollow") return undefined;
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if (String(args[0]).endsWith("/messages.jsonl")) calls.push(String(prop));
        return value.apply(target, args);
      };
    },
  });
  const writer = await new SessionStore({ fs: older, agentDir: AGENT }).open(
    first.getSessionPath(),
  );
  calls.length = 0;
  const more = [...history, user("more"), assistant("ok")];
  await writer.commit(more);
  await writer.close();
  // The log is checked, then opened (after the permission check of the session's files).
  const opened = calls.indexOf("open");
  assert.deepEqual(calls.slice(opened - 1, opened + 1), ["lstat", "open"], calls.join(", "));
  const reader = await store.open(first.getSessionPath(), { readOnly: true });
  assert.deepEqual(reader.messages, more);
  await reader.close();
});

test("a retried save never moves updatedAt backwards", async () => {
  const { fs, store, now } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  now.t += 1000;
  fs.failAt(fs.operationCount + 2, { error: "EIO", persistent: true });
  await assert.rejects(session.commit([...history, user("q")]));
  fs.clearFaults();
  now.t += 1000;
  await session.setModel({ provider: "p", id: "m" });
  const modelTime = session.getHeader().updatedAt;
  await session.flush();
  assert.equal(session.getHeader().updatedAt, modelTime);
});

test("a save sets updatedAt to its own time, even when the stored one is later (a clock stepped back)", async () => {
  const { store, now } = await setup();
  const session = await store.create(CWD);
  const history = conversation(1);
  now.t += 60_000;
  await session.commit(history);
  const ahead = session.getHeader().updatedAt;
  now.t -= 30_000; // the clock is stepped back: the stored time is now in the future
  await session.commit([...history, user("q"), assistant("a")]);
  assert.equal(session.getHeader().updatedAt, new Date(now.t).toISOString());
  assert.ok(session.getHeader().updatedAt < ahead);
  now.t -= 1_000;
  await session.append([user("r")]);
  assert.equal(session.getHeader().updatedAt, new Date(now.t).toISOString());
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.getHeader().updatedAt, new Date(now.t).toISOString());
  await reopened.close();
});

test("setPermissionPreset() validates and stores the preset; metadata writes fix every file's mode", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  const dir = session.getSessionPath();
  await fs.chmod(`${dir}/messages.jsonl`, 0o644);
  const reopened = await store.open(dir);
  await reopened.setPermissionPreset("workspace-write");
  assert.equal(reopened.getHeader().permissionPreset, "workspace-write");
  assert.equal((await fs.stat(`${dir}/messages.jsonl`)).mode, 0o600);
  await assert.rejects(reopened.setPermissionPreset("root" as never), InvalidArgumentError);
});

test("a full open checks each session file once, reads meta.json once and lists nothing", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const dir = session.getSessionPath();
  for (const readOnly of [true, false]) {
    fs.resetCounter();
    const opened = await store.open(dir, { readOnly });
    const log = fs.operationLog.map((record) => `${record.op} ${record.path}`);
    await opened.close();
    const label = readOnly ? "read-only" : "writable";
    const lstats = log.filter((entry) => entry.startsWith("lstat "));
    // A writer also looks for a lock file another process made (this store has no probe).
    assert.deepEqual(
      [...lstats].sort(),
      [
        `lstat ${dir}`,
        `lstat ${dir}/messages.jsonl`,
        `lstat ${dir}/meta.json`,
        ...(readOnly ? [] : [`lstat ${dir}/writer.lock`]),
      ],
      label,
    );
    // No-follow reads: never through a link, never waiting on a FIFO. A writer also reads
    // index.json, to know whether its saves must rewrite it.
    assert.deepEqual(log.filter((entry) => entry.startsWith("readFile")), [
      `readFileNoFollow ${dir}/meta.json`,
      ...(readOnly ? [] : [`readFileNoFollow ${dir}/index.json`]),
    ], label);
    assert.deepEqual(log.filter((entry) => entry.startsWith("readDir ")), [], label);
    assert.deepEqual(log.filter((entry) => entry.startsWith("stat ")), [`stat ${CWD}`], label);
    assert.ok(log.length <= (readOnly ? 9 : 11), `${label}: ${log.join(", ")}`);
  }
});

test("read-only and writable opens refuse a symlinked session directory or meta.json", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  const dir = session.getSessionPath();
  await fs.rename(dir, "/elsewhere");
  await fs.symlink("/elsewhere", dir);
  for (const readOnly of [true, false]) {
    await assert.rejects(store.open(dir, { readOnly }), SessionFormatError);
    await assert.rejects(
      SessionManager.open({ context: store.context, dir, collectionDir: "/", readOnly: true }),
      SessionFormatError,
    );
  }
  await fs.remove(dir);
  await fs.rename("/elsewhere", dir);
  const meta = `${dir}/meta.json`;
  await fs.rename(meta, "/meta-elsewhere.json");
  await fs.symlink("/meta-elsewhere.json", meta);
  for (const readOnly of [true, false]) {
    await assert.rejects(store.open(dir, { readOnly }), SessionFormatError);
  }
  await fs.remove(meta);
  await fs.rename("/meta-elsewhere.json", meta);
  const reopened = await store.open(dir, { readOnly: true });
  assert.equal(reopened.messages.length, 2);
  await reopened.close();
});

/**
 * The port calls of one open of `dir`, in the order they started and ended (`start op path`,
 * `end op path`). With `release`, the `lstat` of `dir` waits until `release` says so (at the
 * latest 2 s after the first call, so an open that waits for it before reading fails instead of
 * hanging).
 */
function orderedCalls(
  fs: FileSystem,
  dir: string,
  release?: (started: readonly string[]) => boolean,
): { readonly fs: FileSystem; readonly calls: string[] } {
  const calls: string[] = [];
  const held = gate();
  let timeout: ReturnType<typeof setTimeout> | undefined;
  const hooked = hookedFs(fs, {
    async before(method, args) {
      calls.push(`start ${method} ${String(args[0])}`);
      if (release === undefined) return;
      timeout ??= setTimeout(held.open, 2000);
      if (release(calls)) {
        clearTimeout(timeout);
        held.open();
      }
      if (method === "lstat" && args[0] === dir) await held.wait;
    },
    after(method, args) {
      calls.push(`end ${method} ${String(args[0])}`);
      return Promise.resolve();
    },
  });
  return { fs: hooked, calls };
}

test("a read-only open reads meta.json and opens the log while it checks the session directory", async () => {
  const { fs, store } = await setup();
  const dir = (await savedSession(store)).getSessionPath();
  const metaRead = `start readFileNoFollow ${dir}/meta.json`;
  const reads = [metaRead, `start openNoFollow ${dir}/messages.jsonl`];
  const bothStarted = (started: readonly string[]) => reads.every((r) => started.includes(r));
  for (const how of ["store", "SessionManager.open"]) {
    const { fs: hooked, calls } = orderedCalls(fs, dir, bothStarted);
    const reader = new SessionStore({ fs: hooked, agentDir: AGENT });
    const opened = how === "store"
      ? await reader.open(dir, { readOnly: true })
      : await SessionManager.open({
        context: reader.context,
        dir,
        collectionDir: dirname(dir),
        readOnly: true,
      });
    assert.equal(opened.messages.length, 2, how);
    await opened.close();
    const checked = calls.indexOf(`end lstat ${dir}`);
    for (const read of reads) {
      assert.ok(calls.indexOf(read) < checked, `${how}: ${calls.join(", ")}`);
    }
  }
  // A writer reads only after the check (and its lock); so does a reader on a port that cannot
  // refuse a link in the read itself.
  const cases = [
    { label: "writable", port: fs as FileSystem, readOnly: false, read: metaRead },
    {
      label: "without no-follow calls",
      port: withoutNoFollow(fs),
      readOnly: true,
      read: `start readFile ${dir}/meta.json`,
    },
  ];
  for (const { label, port, readOnly, read } of cases) {
    const { fs: hooked, calls } = orderedCalls(port, dir);
    const opened = await new SessionStore({ fs: hooked, agentDir: AGENT }).open(dir, { readOnly });
    await opened.close();
    const checked = calls.indexOf(`end lstat ${dir}`);
    assert.ok(checked >= 0 && calls.indexOf(read) > checked, `${label}: ${calls.join(", ")}`);
  }
});

test("a read-only open of a linked session directory reports the link, whatever it read through it", async () => {
  const { fs, store } = await setup();
  const dir = (await savedSession(store)).getSessionPath();
  await fs.rename(dir, "/elsewhere");
  await fs.symlink("/elsewhere", dir);
  const metaFile = `${dir}/meta.json`;
  for (const meta of ["valid", "not JSON", "missing"]) {
    if (meta === "not JSON") await fs.writeFile("/elsewhere/meta.json", new Uint8Array([123]));
    if (meta === "missing") await fs.remove("/elsewhere/meta.json");
    for (const how of ["store", "SessionManager.open"]) {
      // The directory's lstat waits until meta.json was read through the link (its bytes, or its
      // failure, known first), at most 2 s.
      let read = false;
      const readDone = gate();
      const timeout = setTimeout(readDone.open, 2000);
      const gated = new Proxy(fs, {
        get(target, prop) {
          const value = Reflect.get(target, prop, target);
          if (typeof value !== "function") return value;
          if (prop === "readFileNoFollow") {
            return (path: string) => {
              const reading = value.call(target, path) as Promise<Uint8Array>;
              if (path === metaFile) {
                read = true;
                reading.then(readDone.open, readDone.open);
              }
              return reading;
            };
          }
          if (prop === "lstat") {
            return async (path: string) => {
              if (path === dir) await readDone.wait;
              return await value.call(target, path);
            };
          }
          return value.bind(target);
        },
      });
      const reader = new SessionStore({ fs: gated, agentDir: AGENT });
      const opening = how === "store" ? reader.open(dir, { readOnly: true }) : SessionManager.open({
        context: reader.context,
        dir,
        collectionDir: dirname(dir),
        readOnly: true,
      });
      await assert.rejects(
        opening,
        (error: unknown) => error instanceof SessionFormatError && error.file === dir,
        `${meta}, ${how}`,
      );
      clearTimeout(timeout);
      assert.ok(read, `${meta}, ${how}: meta.json was read before the check ended`);
    }
  }
});

test("an open refusing an empty committed range closes the log it opened beside meta.json", async () => {
  const { fs, store } = await setup();
  const dir = (await savedSession(store)).getSessionPath();
  const metaPath = `${dir}/meta.json`;
  const saved = JSON.parse(text.decode(await fs.readFile(metaPath)));
  const damages: Record<string, Record<string, unknown>> = {
    "a wrong generation at start 0": {
      start: 0,
      bytes: 0,
      messageCount: 0,
      generation: "a".repeat(64),
    },
    "a wrong generation after earlier bytes": {
      bytes: 0,
      messageCount: 0,
      generation: "a".repeat(64),
    },
    "messages claimed in no bytes": { bytes: 0, messageCount: 2 },
  };
  for (const [label, damage] of Object.entries(damages)) {
    await fs.writeFile(metaPath, new TextEncoder().encode(JSON.stringify({ ...saved, ...damage })));
    let opened = 0;
    let closed = 0;
    const counting = new Proxy(fs, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target);
        if (typeof value !== "function") return value;
        if (prop !== "openNoFollow") return value.bind(target);
        return async (path: string) => {
          const result = await value.call(target, path);
          opened++;
          const close = () => {
            closed++;
            return result.handle.close();
          };
          return {
            ...result,
            handle: new Proxy(result.handle, {
              get: (h, key) => key === "close" ? close : Reflect.get(h, key, h),
            }),
          };
        };
      },
    });
    const reader = new SessionStore({ fs: counting, agentDir: AGENT });
    for (const readOnly of [true, false]) {
      await assert.rejects(reader.open(dir, { readOnly }), CorruptSessionError, `${label}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 0)); // closes run in the background
    assert.ok(opened > 0, label);
    assert.equal(closed, opened, label);
  }
});

test("opening a missing session rejects with SessionNotFoundError; SessionManager.open with meta.json's NotFound", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  const dir = session.getSessionPath();
  const missing = `${session.getSessionDir()}/00000000-0000-4000-8000-000000000000`;
  for (const readOnly of [true, false]) {
    await assert.rejects(store.open(missing, { readOnly }), SessionNotFoundError);
  }
  await fs.remove(`${dir}/meta.json`);
  // A save committed there (index.json is written after one): damage, not a missing session.
  for (const readOnly of [true, false]) {
    await assert.rejects(
      store.open(dir, { readOnly }),
      (error: unknown) => error instanceof CorruptSessionError && error.file === `${dir}/meta.json`,
    );
  }
  await fs.remove(`${dir}/index.json`);
  for (const readOnly of [true, false]) {
    await assert.rejects(store.open(dir, { readOnly }), SessionNotFoundError);
  }
  for (const target of [dir, missing]) {
    await assert.rejects(
      SessionManager.open({
        context: store.context,
        dir: target,
        collectionDir: "/",
        readOnly: true,
      }),
      (error: unknown) => {
        assert.ok(error instanceof NotFound);
        assert.equal(error.path, `${target}/meta.json`);
        return true;
      },
    );
  }
});

test("a non-message in place of a saved message is a change, rejected before anything is written", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const before = fs.snapshotTree?.();
  for (const bad of [Number.NaN, -0, null, "text"]) {
    await assert.rejects(session.commit([bad as never, ...history.slice(1)]), SessionFormatError);
    await assert.rejects(
      session.commit([...history.slice(0, 2), bad as never, ...history.slice(3)]),
      SessionFormatError,
    );
  }
  assert.deepEqual(fs.snapshotTree?.(), before);
  assert.equal(session.hasPendingSave, false);
  await session.commit([...history, user("more")]);
  assert.equal((await saved(store, session)).length, history.length + 1);
});

test("every handle an open makes is closed, whether the open succeeds or fails", async () => {
  const { fs } = await setup();
  let open = 0;
  let opened = 0;
  /** `handle`, counted as open until it is closed. */
  const counted = (handle: FileHandle): FileHandle => {
    open++;
    opened++;
    return {
      read: (offset: number, length: number) => handle.read(offset, length),
      write: (data: Uint8Array) => handle.write(data),
      truncate: (length: number) => handle.truncate(length),
      sync: () => handle.sync(),
      stat: () => handle.stat(),
      close: async () => {
        open--;
        await handle.close();
      },
    };
  };
  const watched: FileSystem = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop === "open") {
        return async (...args: Parameters<FileSystem["open"]>) =>
          counted(await target.open(...args));
      }
      if (prop === "openNoFollow") {
        return async (path: string) => {
          const { handle, info } = await target.openNoFollow(path);
          return { handle: counted(handle), info };
        };
      }
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const store = new SessionStore({ fs: watched, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const dir = session.getSessionPath();
  const metaPath = `${dir}/meta.json`;
  const logPath = `${dir}/messages.jsonl`;
  const meta = await fs.readFile(metaPath);
  const log = await fs.readFile(logPath);
  const cases: [string, () => Promise<void>, (new (...a: never[]) => Error) | undefined][] = [
    ["a valid session", async () => {}, undefined],
    [
      "meta.json that is not JSON",
      () => fs.writeFile(metaPath, new TextEncoder().encode("{")),
      SessionFormatError,
    ],
    [
      "meta.json of another version",
      () =>
        fs.writeFile(
          metaPath,
          new TextEncoder().encode(text.decode(meta).replace('"version":3', '"version":4')),
        ),
      UnsupportedSessionError,
    ],
    [
      "a missing log that meta.json commits bytes of",
      () => fs.remove(logPath),
      CorruptSessionError,
    ],
    ["a log cut short", () => fs.writeFile(logPath, log.subarray(0, 10)), CorruptSessionError],
  ];
  for (const [name, damage, expected] of cases) {
    await fs.writeFile(metaPath, meta);
    await fs.writeFile(logPath, log);
    await damage();
    for (const readOnly of [true, false]) {
      open = 0;
      opened = 0;
      const opening = store.open(dir, { readOnly });
      if (expected === undefined) await (await opening).close();
      else await assert.rejects(opening, expected, name);
      // Let a handle closed in the background settle.
      await new Promise((resolve) => setTimeout(resolve, 0));
      const what = `${name} (${readOnly ? "read-only" : "writable"})`;
      assert.equal(open, 0, `${what}: handles left open`);
      // The log was opened (and counted) whenever it is there.
      if (name !== "a missing log that meta.json commits bytes of") {
        assert.ok(opened > 0, `${what}: no handle was counted`);
      }
    }
  }
});

test("a session inside a private staging or delete directory is never opened by that path", async () => {
  const { fs, store } = await setup();
  const session = await savedSession(store);
  const collection = dirname(session.getSessionPath());
  for (
    const stage of [
      ".delete-0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
      `.staging-${session.id}-0a1b2c3d`,
    ]
  ) {
    const copy = `${collection}/${stage}/${session.id}`;
    await fs.mkdir(copy, { recursive: true });
    for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
      await fs.writeFile(
        `${copy}/${name}`,
        await fs.readFile(`${session.getSessionPath()}/${name}`),
      );
    }
    for (const path of [copy, `${copy}/meta.json`]) {
      for (const readOnly of [false, true]) {
        await assert.rejects(store.open(path, { readOnly }), InvalidArgumentError);
      }
    }
  }
});

test("a collection whose own name starts with a dot opens like any other", async () => {
  const { fs } = await setup();
  const store = new SessionStore({ fs, agentDir: AGENT, sessionDir: `${CWD}/.sessions` });
  const session = await savedSession(store);
  const [listed] = await store.list(CWD);
  assert.ok(listed !== undefined);
  const reopened = await store.open(listed.path);
  assert.equal(reopened.messages.length, session.messages.length);
  await reopened.close();
});

test("a failed save is retried as it was given, though the host finishes its last message in place meanwhile", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  const answer = assistant("partial");
  const given = [...session.messages, user("q"), answer];
  fs.failAt(fs.operationCount + 1, { ops: ["sync"] });
  await assert.rejects(session.commit(given));
  assert.equal(session.hasPendingSave, true);
  const snapshot = structuredClone(given);
  // The host streams on into its last message: a tool call arrives, its result is not there yet.
  (answer.content as unknown[]).push({ type: "toolCall", id: "c1", name: "read", arguments: {} });
  (answer as { stopReason: string }).stopReason = "toolUse";
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(await saved(store, session), snapshot);
  // The finished history, with the tool's result, saves as usual.
  const finished = [...given, toolResult("c1", "read", "body")];
  await session.commit(finished);
  assert.deepEqual(await saved(store, session), finished);
  await session.close();
});

test("a session directory whose first parent fsync failed is made durable by the retry that saves", async () => {
  const { fs, store } = await setup();
  const first = await store.create(CWD);
  await first.commit([user("the collection exists")]);
  await first.close();
  const session = await store.create(CWD);
  const collection = dirname(session.getSessionPath());
  // The first save creates the session directory; the fsync of the collection after it fails.
  fs.resetCounter();
  fs.failAt(1, { ops: ["syncDir"] });
  const history = conversation(1);
  await assert.rejects(session.commit(history));
  const failed = fs.operationLog.find((r) => r.op === "syncDir");
  fs.resetCounter();
  await session.flush();
  // The retry finds the directory there and still syncs the collection that holds its entry.
  assert.ok(
    fs.operationLog.some((r) => r.op === "syncDir" && r.path === failed?.path),
    fs.operationLog.map((r) => `${r.op} ${r.path}`).join("; "),
  );
  assert.equal(failed?.path, collection);
  assert.deepEqual(await saved(store, session), history);
  await session.close();
});

test("meta.json and index.json are read only by no-follow calls where the adapter has them", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit(conversation(4));
  await session.readHistory(); // index.json published
  await session.close();
  const dir = session.getSessionPath();
  const watched = new Set([`${dir}/meta.json`, `${dir}/index.json`]);
  const reads: string[] = [];
  const recording = hookedFs(fs, {
    before(method, args) {
      if (watched.has(String(args[0])) && /^(readFile|open)/.test(method)) {
        reads.push(`${method} ${String(args[0]).slice(dir.length + 1)}`);
      }
    },
  });
  const other = new SessionStore({ fs: recording, agentDir: AGENT });
  for (const readOnly of [true, false]) {
    const opened = await other.open(dir, { readOnly });
    await opened.readHistory();
    await opened.close();
  }
  await other.list(CWD);
  await other.list(CWD, undefined, { fast: true });
  assert.equal((await verifySession(recording, dir, { sha256: portableSha256 })).ok, true);
  await other.compact(session.getSessionFile());
  assert.ok(reads.includes("readFileNoFollow meta.json"), reads.join(", "));
  assert.deepEqual(reads.filter((read) => !read.startsWith("readFileNoFollow")), []);
});

test("a meta.json swapped for a link after the open checked it is refused, not read through", async () => {
  for (const readOnly of [true, false]) {
    const { fs, store } = await setup();
    const session = await store.create(CWD);
    await session.commit([user("q"), assistant("a")]);
    await session.setPinned(true);
    await session.close();
    const meta = session.getSessionFile();
    // An unpinned copy elsewhere: read through a link, it would open as the session's header.
    const copy = JSON.parse(new TextDecoder().decode(await fs.readFile(meta)));
    delete copy.header.pinnedAt;
    await fs.writeFile("/planted.json", new TextEncoder().encode(JSON.stringify(copy)));
    let swapped = false;
    const swap = gate();
    const racing = hookedFs(fs, {
      async before(method, args) {
        // The read of meta.json comes after the swap (a read-only open reads it while it checks).
        if (method === "readFileNoFollow" && args[0] === meta) await swap.wait;
      },
      async after(method, args) {
        if (method === "lstat" && args[0] === meta && !swapped) {
          swapped = true;
          await fs.rename(meta, "/aside.json");
          await fs.symlink("/planted.json", meta);
          swap.open();
        }
      },
    });
    const reader = new SessionStore({ fs: racing, agentDir: AGENT });
    const error = await reader.open(session.getSessionPath(), { readOnly }).then(
      () => assert.fail("the open read meta.json through a link"),
      (error: unknown) => error,
    );
    assert.ok(swapped);
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, meta);
  }
});

test("an invalid line is corruption when the checksum disagrees, and a format error naming the message when it agrees", async () => {
  const { fs, store } = await setup();
  const session = await store.create(CWD);
  await session.commit([user("q"), assistant("a"), user("again")]);
  await session.close();
  const dir = session.getSessionPath();
  const logPath = `${dir}/messages.jsonl`;
  const text = new TextDecoder().decode(await fs.readFile(logPath));
  const lines = text.split("\n");
  const offset = new TextEncoder().encode(`${lines[0]}\n`).length;
  // Message #1 becomes a message of an unknown role: still JSON, the same length.
  const damaged = text.replace('"role":"assistant"', '"role":"assistanX"');
  assert.notEqual(damaged, text);
  await fs.writeFile(logPath, new TextEncoder().encode(damaged));
  for (const readOnly of [true, false]) {
    const corrupt = await store.open(dir, { readOnly }).then(
      () => assert.fail("opened a log whose checksum disagrees"),
      (error: unknown) => error,
    );
    assert.ok(corrupt instanceof CorruptSessionError, String(corrupt));
    assert.equal(corrupt.file, logPath);
    assert.equal(corrupt.messageIndex, 1);
    assert.equal(corrupt.offset, offset);
  }
  // The same bytes with a generation that agrees: written so, not damaged.
  const metaPath = `${dir}/meta.json`;
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(metaPath)));
  meta.generation = sha256Hex(new TextEncoder().encode(damaged));
  await fs.writeFile(metaPath, new TextEncoder().encode(JSON.stringify(meta)));
  for (const readOnly of [true, false]) {
    const invalid = await store.open(dir, { readOnly }).then(
      () => assert.fail("opened a log with an invalid message"),
      (error: unknown) => error,
    );
    assert.ok(invalid instanceof SessionFormatError, String(invalid));
    assert.equal(invalid.file, logPath);
    assert.match(String(invalid.path), /^messages\[1\]/);
  }
});

test("a resumed host's equal copies are kept as the saved messages: later saves know them by identity", async () => {
  const { store } = await setup();
  const writer = await store.create(CWD);
  await writer.commit(conversation(3));
  await writer.close();
  const resumed = await store.open(writer.getSessionPath());
  // The host rebuilds its history from pages (copies of what was saved), each message watched:
  // a save that compares a message by value reads its fields; one that knows it by identity does
  // not.
  const pages: Message[] = [];
  for (let page = await resumed.readHistory();; page = await resumed.readHistory(page.start)) {
    pages.unshift(...page.messages);
    if (page.start === 0) break;
  }
  let reads = 0;
  const watched = pages.map((message) =>
    new Proxy(message, {
      get(target, key, receiver) {
        reads++;
        return Reflect.get(target, key, receiver);
      },
    })
  );
  const history = [...watched, user("next")];
  await resumed.commit(history);
  assert.ok(reads > 0, "the first save compares the copies by value");
  reads = 0;
  history.push(assistant("answer"));
  await resumed.commit(history);
  // Only the last saved message is compared by value (a host may finish it in place).
  assert.equal(reads, 0);
  await resumed.close();
  const reopened = await store.open(writer.getSessionPath(), { readOnly: true });
  assert.equal(reopened.messages.length, conversation(3).length + 2);
  await reopened.close();
});

test("a save refused by validation keeps the saved messages it was given copies of as they were", async () => {
  const { store } = await setup();
  const session = await store.create(CWD);
  const saved = conversation(2);
  await session.commit(saved);
  const copies = saved.map((message) => structuredClone(message));
  // Refused before anything is written: its equal copies are not taken for the saved messages.
  await assert.rejects(
    session.commit([...copies, { role: "user", content: 42 } as unknown as Message]),
  );
  assert.equal(session.messages[0], saved[0]);
  // So an edit of a copy is still told from the saved message by value, and saved.
  (copies[0] as { content: string }).content = "edited";
  await session.commit(copies);
  await session.close();
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal((reopened.messages[0] as { content: string }).content, "edited");
  await reopened.close();
});
