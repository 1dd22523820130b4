import { test } from "node:test";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import fc from "fast-check";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256, sha256Hex } from "../src/port/sha256.ts";
import {
  CorruptSessionError,
  SessionCwdError,
  SessionFormatError,
  SessionNotFoundError,
  ToolPairingError,
  UnsupportedSessionError,
} from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { Message } from "../src/loop/records/mod.ts";
import {
  LineReader,
  migratedLogDigests,
  migrateLegacySession,
  type MigrationPacing,
  readLegacyHistory,
  readLegacySession,
} from "../src/loop/legacy.ts";
import { nodeFs, nodeSha256 } from "../adapters/node.ts";
import { NotFound } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { linkedBeforeOpen } from "./_hooks.ts";
import { crashAtEveryOperation, failAtEveryOperation, READ_ONLY_OPERATIONS } from "./_crash.ts";
import { pacedMigrationOnRealFs } from "./_migrate_real.ts";
import { assistant, conversation, toolResult, user } from "./_fixtures.ts";
import { runsOf } from "./_soak.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const LEGACY = `${COLLECTION}/${ID}.jsonl`;
const DIR = `${COLLECTION}/${ID}`;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function header(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    format: "loop-session",
    version: 2,
    id: ID,
    cwd: CWD,
    createdAt: "2025-06-01T10:00:00.000Z",
    updatedAt: "2025-06-02T11:00:00.000Z",
    unread: true,
    permissionPreset: "workspace-write",
    ...overrides,
  };
}

function legacyText(head: unknown, messages: readonly unknown[]): string {
  return [head, ...messages].map((record) => JSON.stringify(record)).join("\n") + "\n";
}

async function setup(
  text: string = legacyText(header(), conversation(3)),
): Promise<{ fs: MemoryFs; store: SessionStore }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  await fs.writeFile(LEGACY, encoder.encode(text), { mode: 0o600 });
  fs.syncAll();
  return { fs, store: new SessionStore({ fs, agentDir: AGENT }) };
}

function snapshot(fs: MemoryFs): Record<string, string> {
  return fs.snapshotTree(AGENT);
}

/** `fs` with the legacy file swapped for a link to a copy of it just before it is opened. */
function swappedBeforeOpen(fs: MemoryFs): { fs: FileSystem; swapped: () => boolean } {
  return linkedBeforeOpen(fs, LEGACY, "/planted.jsonl", "/aside.jsonl");
}

test("a legacy file swapped for a link after a listing saw it is reported when read, never read through", async () => {
  for (const fast of [true, false]) {
    const { fs } = await setup();
    const racing = swappedBeforeOpen(fs);
    const store = new SessionStore({ fs: racing.fs, agentDir: AGENT });
    const result = await store.listDetailed(CWD, undefined, { fast });
    assert.ok(racing.swapped());
    assert.deepEqual(result.sessions, [], `fast: ${fast}`);
    assert.ok(result.failures[0]?.error instanceof SessionFormatError, `fast: ${fast}`);
    assert.equal((result.failures[0]?.error as SessionFormatError).file, LEGACY);
  }
});

test("a legacy file swapped for a link after the migration checked it is refused, never migrated", async () => {
  const { fs } = await setup();
  const racing = swappedBeforeOpen(fs);
  const store = new SessionStore({ fs: racing.fs, agentDir: AGENT });
  await assert.rejects(store.open(LEGACY), SessionFormatError);
  assert.ok(racing.swapped());
  await assert.rejects(fs.lstat(DIR), NotFound);
  assert.equal((await fs.lstat("/planted.jsonl")).kind, "file");
});

test("a read-only open of a legacy file whose migration crashed migrates it, the leftover staging directory removed", async () => {
  const history = conversation(3);
  const { fs } = await setup(legacyText(header(), history));
  const probe = fs.clone();
  probe.resetCounter();
  await new SessionStore({ fs: probe, agentDir: AGENT }).open(LEGACY, { readOnly: true });
  // A crash once the staging directory holds the log, before anything is published.
  const n = probe.operationLog.find((r) => r.op === "write" && r.path.includes("/.staging-"))!
    .number;
  const running = fs.clone();
  running.resetCounter();
  running.crashAfter(n);
  await assert.rejects(new SessionStore({ fs: running, agentDir: AGENT }).open(LEGACY));
  const crashed = running.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
  const names = (await crashed.readDir(COLLECTION)).map((entry) => entry.name);
  assert.ok(names.some((name) => name.startsWith(".staging-")), names.join(", "));
  const reader = await new SessionStore({ fs: crashed, agentDir: AGENT }).open(LEGACY, {
    readOnly: true,
  });
  assert.deepEqual(reader.messages, history);
  await reader.close();
  assert.ok(!(await crashed.readDir(COLLECTION)).some((e) => e.name.startsWith(".staging-")));
});

test("a read-only open of a never-migrated legacy file an uncommitted delete staged rolls the delete back, then migrates it", async () => {
  const history = conversation(2);
  const { fs } = await setup(legacyText(header(), history));
  await new SessionStore({ fs, agentDir: AGENT }).archive.set(CWD, [ID], true);
  fs.syncAll();
  const probe = fs.clone();
  probe.resetCounter();
  await new SessionStore({ fs: probe, agentDir: AGENT }).archive.delete(CWD, [ID]);
  // A crash once the legacy file was moved into the delete's staging directory.
  const n = probe.operationLog.find((r) => r.op === "rename" && r.path === LEGACY)!.number;
  const running = fs.clone();
  running.resetCounter();
  running.crashAfter(n);
  await assert.rejects(
    new SessionStore({ fs: running, agentDir: AGENT }).archive.delete(CWD, [ID]),
  );
  const crashed = running.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
  const store = new SessionStore({ fs: crashed, agentDir: AGENT });
  // The delete did not happen: the session is listed, from inside the staging directory.
  const [listed] = await store.list(CWD);
  assert.equal(listed?.id, ID);
  assert.equal(listed?.storage, "legacy");
  // Opening a legacy file migrates it, which writes; so the open first recovers the collection,
  // as a writable open does (documented on SessionStore.open).
  const reader = await store.open(listed.path, { readOnly: true });
  assert.deepEqual(reader.messages, history);
  assert.equal(reader.getSessionPath(), DIR);
  await reader.close();
  const names = (await crashed.readDir(COLLECTION)).map((e) => e.name).sort();
  assert.deepEqual(names, [ID, `${ID}.jsonl`, "archive.json"]);
  assert.ok(await store.archive.isArchived(CWD, ID));
});

/**
 * `fs` (synced) after a delete of the archived sessions `ids` crashed right after the operation
 * `at` picks (a rename of an entry into the staging directory, or of the commit marker), with
 * every unsynced change kept; and the delete's staging directory.
 */
async function crashedDelete(
  fs: MemoryFs,
  ids: readonly string[],
  at: (r: { op: string; path: string; to?: string }) => boolean,
): Promise<{ fs: MemoryFs; staging: string }> {
  await new SessionStore({ fs, agentDir: AGENT }).archive.set(CWD, ids, true);
  fs.syncAll();
  const probe = fs.clone();
  probe.resetCounter();
  await new SessionStore({ fs: probe, agentDir: AGENT }).archive.delete(CWD, ids);
  const n = probe.operationLog.find(at)!.number;
  const running = fs.clone();
  running.resetCounter();
  running.crashAfter(n);
  await assert.rejects(new SessionStore({ fs: running, agentDir: AGENT }).archive.delete(CWD, ids));
  const crashed = running.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
  const name = (await crashed.readDir(COLLECTION)).find((e) => e.name.startsWith(".delete-"));
  assert.ok(name !== undefined, "no delete staging directory");
  return { fs: crashed, staging: `${COLLECTION}/${name.name}` };
}

/** The operations of `MemoryFs` that change nothing (a close included). */
const READS: ReadonlySet<string> = new Set([...READ_ONLY_OPERATIONS, "close"]);

for (const migrated of [false, true]) {
  test(
    `a writable open of a ${
      migrated ? "migrated" : "never-migrated"
    } legacy file that a delete with an unreadable journal staged reports that journal, as readers do`,
    async () => {
      const { fs: base } = await setup(legacyText(header(), conversation(2)));
      if (migrated) {
        await (await new SessionStore({ fs: base, agentDir: AGENT }).open(LEGACY)).close();
      }
      // A crash once the last entry (the legacy file, or the directory after it) was staged.
      const moved = migrated ? DIR : LEGACY;
      const { fs, staging } = await crashedDelete(
        base,
        [ID],
        (r) => r.op === "rename" && r.path === moved,
      );
      const journal = `${staging}/intent.json`;
      await fs.writeFile(journal, encoder.encode("{"));
      const tree = snapshot(fs);
      const store = new SessionStore({ fs, agentDir: AGENT });
      const listed = await store.listDetailed(CWD);
      assert.deepEqual(listed.failures.map((f) => [f.id, f.path]), [[ID, journal]]);
      const reportsJournal = (error: unknown): boolean =>
        error instanceof CorruptSessionError && error.file === journal &&
        error.message.includes("no readable journal");
      await assert.rejects(store.open(LEGACY, { readOnly: true }), reportsJournal);
      await assert.rejects(store.open(LEGACY), reportsJournal);
      // Recovery keeps the staging directory; nothing was migrated or moved.
      assert.deepEqual(snapshot(fs), tree);
      assert.deepEqual((await store.cleanup(CWD)).kept, [staging]);
    },
  );
}

test("a read-only open of a legacy file whose delete committed writes nothing, even to finish the delete, and says not found", async () => {
  const { fs: base } = await setup(legacyText(header(), conversation(2)));
  await (await new SessionStore({ fs: base, agentDir: AGENT }).open(LEGACY)).close();
  // A crash right after the commit marker was renamed in: the delete is done for every reader,
  // its staged entries still wait for recovery to remove them.
  const { fs } = await crashedDelete(
    base,
    [ID],
    (r) => r.op === "rename" && r.to?.endsWith("/committed") === true,
  );
  const tree = fs.snapshotTree("/");
  fs.resetCounter();
  await assert.rejects(
    new SessionStore({ fs, agentDir: AGENT }).open(LEGACY, { readOnly: true }),
    (error: unknown) => error instanceof SessionNotFoundError && error.file === LEGACY,
  );
  assert.deepEqual(fs.snapshotTree("/"), tree, "a read-only open changed the filesystem");
  const written = fs.operationLog.filter((r) => !READS.has(r.op)).map((r) => `${r.op} ${r.path}`);
  assert.deepEqual(written, []);
  // Where nothing can be written (a read-only collection), the answer is the same.
  fs.failAt(1, {
    error: "EACCES",
    persistent: true,
    ops: ["writeFile", "rename", "remove", "mkdir", "chmod", "symlink", "syncDir", "write"],
  });
  await assert.rejects(
    new SessionStore({ fs, agentDir: AGENT }).open(LEGACY, { readOnly: true }),
    SessionNotFoundError,
  );
  fs.clearFaults();
  assert.deepEqual(fs.snapshotTree("/"), tree);
  // A writer's structural operation finishes the delete, as before.
  assert.equal((await new SessionStore({ fs, agentDir: AGENT }).cleanup(CWD)).finished.length, 1);
});

test("a read-only open that migrates a legacy file leaves another session's interrupted delete to recovery", async () => {
  const other = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
  const history = conversation(2);
  const { fs: base } = await setup(legacyText(header(), history));
  const otherLegacy = `${COLLECTION}/${other}.jsonl`;
  await base.writeFile(
    otherLegacy,
    encoder.encode(legacyText(header({ id: other }), conversation(1))),
    { mode: 0o600 },
  );
  // The other session's delete crashed once its legacy file was staged (not committed).
  const { fs, staging } = await crashedDelete(
    base,
    [other],
    (r) => r.op === "rename" && r.path === otherLegacy,
  );
  const staged = fs.snapshotTree(staging);
  const listedBefore = await new SessionStore({ fs, agentDir: AGENT }).list(CWD);
  assert.deepEqual(listedBefore.map((s) => s.id).sort(), [ID, other].sort());
  // The documented exception: opening a never-migrated legacy file migrates it, read-only too.
  const reader = await new SessionStore({ fs, agentDir: AGENT }).open(LEGACY, { readOnly: true });
  assert.deepEqual(reader.messages, history);
  assert.equal(reader.getSessionPath(), DIR);
  await reader.close();
  // Nothing of the other session moved: its delete is still staged, and still did not happen.
  assert.deepEqual(fs.snapshotTree(staging), staged);
  const listed = await new SessionStore({ fs, agentDir: AGENT }).list(CWD);
  assert.deepEqual(listed.map((s) => s.id).sort(), [ID, other].sort());
  assert.equal(listed.find((s) => s.id === other)?.archived, true);
});

test("open() of a legacy file publishes the three-file directory and keeps the file as a backup", async () => {
  const history = conversation(3);
  const text = legacyText(header({ runTimings: [{ obsolete: true }] }), history);
  const { fs, store } = await setup(text);
  const session = await store.open(LEGACY);
  assert.deepEqual(session.messages, history);
  assert.equal(session.getSessionFile(), `${DIR}/meta.json`);
  assert.equal(session.getHeader().permissionPreset, "workspace-write");
  assert.equal(session.getHeader().unread, true);
  assert.equal("runTimings" in session.getHeader(), false);
  await session.close();
  assert.equal(decoder.decode(await fs.readFile(LEGACY)), text);
  const names = (await fs.readDir(DIR)).map((e) => e.name);
  assert.deepEqual(names, ["index.json", "messages.jsonl", "meta.json"]);
  const log = await fs.readFile(`${DIR}/messages.jsonl`);
  assert.equal(decoder.decode(log), history.map((m) => JSON.stringify(m)).join("\n") + "\n");
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${DIR}/meta.json`)));
  assert.equal(meta.version, 3);
  assert.equal(meta.start, 0);
  assert.equal(meta.bytes, log.length);
  assert.equal(meta.messageCount, history.length);
  assert.equal(meta.generation, sha256Hex(log));
  assert.equal(meta.header.updatedAt, "2025-06-02T11:00:00.000Z");
  const tree = snapshot(fs);
  assert.equal(tree[`sessions/${workspaceHash(CWD)}/${ID}`], "dir 700");
  assert.equal(
    tree[`sessions/${workspaceHash(CWD)}/${ID}/meta.json`]?.startsWith("file 600"),
    true,
  );
});

test("migration writes the same bytes as SessionManager for the same history", async () => {
  const history = conversation(4);
  const { fs, store } = await setup(legacyText(header(), history));
  const migrated = await store.open(LEGACY);
  await migrated.close();
  const native = await store.create(CWD);
  await native.commit(history);
  await native.close();
  for (const name of ["messages.jsonl", "index.json"]) {
    assert.deepEqual(
      await fs.readFile(`${DIR}/${name}`),
      await fs.readFile(`${native.getSessionPath()}/${name}`),
      name,
    );
  }
});

test("a migrated session keeps working: saves append and a reopen sees them", async () => {
  const history = conversation(2);
  const { store } = await setup(legacyText(header(), history));
  const session = await store.open(LEGACY);
  const more = [...history, user("after migration"), assistant("fine")];
  await session.commit(more);
  await session.close();
  const reopened = await store.open(DIR, { readOnly: true });
  assert.deepEqual(reopened.messages, more);
});

test("a legacy assistant with a non-string errorMessage or an array usage lists, migrates and opens as stored", async () => {
  const failed = { ...assistant("upstream failed"), stopReason: "error", errorMessage: null };
  const odd = { ...assistant("done"), usage: [] };
  const history = [user("go"), failed, user("again"), odd] as unknown as Message[];
  const { store } = await setup(legacyText(header(), history));
  for (const fast of [false, true]) {
    const listed = await store.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(listed.failures, [], `fast: ${fast}`);
    assert.equal(listed.sessions.length, 1);
  }
  const session = await store.open(LEGACY);
  assert.deepEqual(session.messages, history);
  await session.commit([...history, user("more"), assistant("ok")]);
  await session.close();
  const reopened = await store.open(DIR, { readOnly: true });
  assert.deepEqual(reopened.messages.slice(0, 4), history);
  await reopened.close();
});

test("a valid published directory takes precedence over its legacy backup", async () => {
  const history = conversation(2);
  const { fs, store } = await setup(legacyText(header(), history));
  const session = await store.open(LEGACY);
  const newer = [...history, user("newer")];
  await session.commit(newer);
  await session.close();
  const before = snapshot(fs);
  const again = await store.open(LEGACY, { readOnly: true });
  assert.deepEqual(again.messages, newer);
  assert.deepEqual(snapshot(fs), before);
});

test("an invalid published directory is an error, never a fallback to the stale backup", async () => {
  const { fs, store } = await setup();
  const session = await store.open(LEGACY);
  await session.close();
  await fs.writeFile(`${DIR}/meta.json`, encoder.encode("{not json"));
  await assert.rejects(store.open(LEGACY), SessionFormatError);
  const { sessions, failures } = await store.listDetailed(CWD);
  assert.deepEqual(sessions, []);
  assert.equal(failures.length, 1);
  assert.equal(failures[0]?.id, ID);
  assert.ok(failures[0]?.error instanceof SessionFormatError);
  await fs.remove(`${DIR}/meta.json`);
  // index.json shows a save committed there: a lost meta.json is damage, not a missing session,
  // for an open and a listing alike (the backup is not used in its place).
  await assert.rejects(store.open(LEGACY), CorruptSessionError);
  for (const fast of [false, true]) {
    const listed = await store.listDetailed(CWD, undefined, { fast });
    assert.deepEqual(listed.sessions, []);
    assert.equal(listed.failures.length, 1);
    assert.ok(listed.failures[0]?.error instanceof CorruptSessionError, `fast: ${fast}`);
  }
  await fs.remove(`${DIR}/index.json`);
  await assert.rejects(store.open(LEGACY), SessionNotFoundError);
  for (const fast of [false, true]) {
    const listed = await store.listDetailed(CWD, undefined, { fast });
    assert.equal(listed.failures.length, 1);
    assert.ok(listed.failures[0]?.error instanceof SessionNotFoundError, `fast: ${fast}`);
  }
});

test("a migrated session that lost its meta.json is reported damaged at every crash point of its delete, never listed as its stale backup", async () => {
  const { fs, store } = await setup(legacyText(header(), conversation(1)));
  const session = await store.open(LEGACY);
  await session.commit([...session.messages, ...conversation(1)]);
  await session.close();
  await fs.remove(`${DIR}/meta.json`);
  fs.syncAll();
  const damaged = (error: unknown) =>
    error instanceof CorruptSessionError && /index\.json/.test(error.message);
  // By its project the session is not known to be the project's: said, with why.
  await assert.rejects(
    store.archive.delete(CWD, [ID], { archivedOnly: false }),
    (error: unknown) =>
      error instanceof SessionNotFoundError && damaged(error.cause) &&
      /cannot be read .*delete it by its collection/.test(error.message),
  );
  let committed = 0;
  for (let n = 0;; n++) {
    const running = fs.clone();
    running.resetCounter();
    running.crashAfter(n);
    // Deleted by collection: a session that cannot be read is not known to be the project's.
    await new SessionStore({ fs: running, agentDir: AGENT, sessionDir: COLLECTION }).archive
      .delete(undefined, [ID], { archivedOnly: false })
      .catch(() => undefined);
    const crashed = running.crash({ seed: 0 });
    const reader = new SessionStore({ fs: crashed, agentDir: AGENT });
    let gone = false;
    for (const fast of [false, true]) {
      const listed = await reader.listDetailed(CWD, undefined, { fast });
      // Never the 2-message backup in the session's place: damaged, or gone once deleted.
      assert.deepEqual(listed.sessions, [], `crash after ${n}, fast: ${fast}`);
      gone = listed.failures.length === 0;
      if (!gone) assert.ok(damaged(listed.failures[0]?.error), `crash after ${n}, fast: ${fast}`);
    }
    if (gone) committed++;
    // A read-only open says what the listing says.
    const opened = await reader.open(DIR, { readOnly: true }).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(
      gone ? opened instanceof SessionNotFoundError : damaged(opened),
      `crash after ${n}: ${String(opened)}`,
    );
    if (!running.crashTriggered) break;
  }
  assert.ok(committed > 0, "the delete committed at the last crash points");
});

test("an unsupported legacy version is rejected on open and nothing is written", async () => {
  const { fs, store } = await setup(legacyText(header({ version: 3 }), conversation(1)));
  const before = snapshot(fs);
  await assert.rejects(store.open(LEGACY), UnsupportedSessionError);
  assert.deepEqual(snapshot(fs), before);
});

for (
  const [name, text, error, path] of [
    [
      "a blank line inside the file",
      legacyText(header(), [user("a")]) + "\n" + JSON.stringify(assistant("b")) + "\n",
      SessionFormatError,
      "messages[1]",
    ],
    ["an empty file", "", SessionFormatError, "header"],
    [
      "invalid JSON in a message",
      legacyText(header(), [user("a")]) + "{oops\n",
      SessionFormatError,
      "messages[1]",
    ],
    [
      "an unmatched tool result",
      legacyText(header(), [user("a"), toolResult("nope", "read")]),
      SessionFormatError,
      "messages[1].toolCallId",
    ],
    [
      "invalid metadata",
      legacyText(header({ pinnedAt: "2026-01-01" }), [user("a")]),
      SessionFormatError,
      "header.pinnedAt",
    ],
    [
      "a header id that differs from the file name",
      legacyText(header({ id: "1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f" }), [user("a")]),
      SessionFormatError,
      "header.id",
    ],
    [
      "a cwd that no longer exists",
      legacyText(header({ cwd: "/gone" }), [user("a")]),
      SessionCwdError,
      "/gone",
    ],
    [
      "a cwd whose path now runs through a file",
      legacyText(header({ cwd: `${LEGACY}/project` }), [user("a")]),
      SessionCwdError,
      `${LEGACY}/project`,
    ],
  ] as const
) {
  test(`migration rejects ${name} and leaves no directory or staging behind`, async () => {
    const { fs, store } = await setup(text);
    const before = snapshot(fs);
    const thrown = await store.open(LEGACY).then(() => undefined, (e: unknown) => e);
    assert.ok(thrown instanceof error, `${name}: ${thrown}`);
    // Case 15: the error names the file, and the field (or, for the cwd, the directory).
    assert.equal(thrown.file, LEGACY);
    if (thrown instanceof SessionFormatError) assert.equal(thrown.path, path);
    else assert.equal((thrown as SessionCwdError).cwd, path);
    assert.deepEqual(snapshot(fs), before);
  });
}

test("a file with two faults fails on the one the version-2 order checks first", async () => {
  const strayResult = toolResult("x", "r", "out");
  const cases: [string, string, (error: unknown) => boolean][] = [
    [
      // Step 4 (the cwd) comes before step 6 (the metadata arrays).
      "metadata arrays of the wrong type and a cwd that is gone",
      legacyText(header({ cwd: "/gone", runtimeContexts: "bad" }), [user("x")]),
      (error) => error instanceof SessionCwdError,
    ],
    [
      // Step 5 (every line parses) comes before step 6.
      "metadata arrays of the wrong type and a line that is not JSON",
      JSON.stringify(header({ runtimeContexts: "bad" })) + "\n{oops\n",
      (error) => error instanceof SessionFormatError && error.path === "messages[0]",
    ],
    [
      // In step 6 the messages are validated before the arrays.
      "metadata arrays of the wrong type and an unmatched tool result",
      legacyText(header({ promptTimings: 7 }), [user("a"), strayResult]),
      (error) => error instanceof ToolPairingError && error.path === "messages[1].toolCallId",
    ],
    [
      // Alone, the arrays are still checked, naming the field.
      "metadata arrays of the wrong type alone",
      legacyText(header({ promptTimings: 7 }), [user("a")]),
      (error) => error instanceof SessionFormatError && error.path === "header.promptTimings",
    ],
  ];
  for (const [name, text, expected] of cases) {
    const { store } = await setup(text);
    const thrown = await store.open(LEGACY).then(() => undefined, (e: unknown) => e);
    assert.ok(expected(thrown), `${name}: ${thrown}`);
    // A fast listing checks the header and its arrays too (but not the messages).
    if (!name.includes("line that is not JSON") && !name.includes("unmatched")) {
      const listed = await store.listDetailed(undefined, COLLECTION, { fast: true });
      assert.equal(listed.failures.length, 1, name);
    }
  }
});

test("leading and trailing blank lines, CRLF and a header-only file are read like version 2", async () => {
  const history = [user("one"), assistant("two")];
  const body = history.map((m) => JSON.stringify(m) + "\r\n").join("");
  const { store } = await setup("\n \n" + JSON.stringify(header()) + "\r\n" + body + "\n\n  \n");
  const session = await store.open(LEGACY);
  assert.deepEqual(session.messages, history);
  await session.close();

  const empty = await setup(JSON.stringify(header()));
  const summary = await readLegacySession(empty.fs, LEGACY);
  assert.equal(summary.messageCount, 0);
  const opened = await empty.store.open(LEGACY);
  assert.deepEqual(opened.messages, []);
  assert.equal(opened.getStorageInfo()?.bytes, 0);
});

test("a migration keeps a CRLF or space-padded line's own bytes, so numbers JSON would rewrite stay", async () => {
  // `-0` and `1e400` (Infinity) are what JSON.stringify cannot write back: a line rewritten in
  // canonical form would read back as 0 and null.
  const lines = [
    ' {"role":"user","content":"one","timestamp":-0,"x":1e400}\t\r',
    '{"role":"user","content":"two","timestamp":2,"x":-0.0}\r',
    '{"role":"user","content":"three","timestamp":3}',
  ];
  const { fs, store } = await setup(JSON.stringify(header()) + "\r\n" + lines.join("\n") + "\n");
  const legacy = await readLegacyHistory(fs, LEGACY);
  const session = await store.open(LEGACY);
  assert.deepEqual(session.messages, legacy.messages);
  assert.ok(Object.is((session.messages[0] as { timestamp: number }).timestamp, -0));
  assert.equal((session.messages[0] as unknown as { x: number }).x, Infinity);
  await session.close();
  const log = decoder.decode(await fs.readFile(`${DIR}/messages.jsonl`));
  assert.equal(log, lines.map((line) => line.trim()).join("\n") + "\n");
  const reopened = await store.open(DIR, { readOnly: true });
  assert.deepEqual(reopened.messages, legacy.messages);
  // The file is still what was migrated: its backup can go.
  assert.equal(await store.removeLegacyBackup(DIR), true);
});

test("a backup is recognized as migrated by this version's rule and by the earlier one", async () => {
  // Earlier versions wrote a CRLF or padded line as JSON.stringify writes its message: the bytes
  // a migration of this file wrote then are those, and its backup is still what was migrated.
  const lines = [
    '{"role": "user", "content": "caf\u00e9", "timestamp": 1}\r',
    '{"role":"user","content":"b","timestamp":2}',
  ];
  const { fs } = await setup(JSON.stringify(header()) + "\n" + lines.join("\n") + "\n");
  const digests = await migratedLogDigests(fs, LEGACY, portableSha256);
  const bytes = (text: string) => encoder.encode(text);
  const now = lines.map((line) => line.trim()).join("\n") + "\n";
  const before = JSON.stringify(JSON.parse(lines[0]!)) + "\n" + lines[1] + "\n";
  assert.deepEqual(digests, [
    { size: bytes(now).length, hex: sha256Hex(bytes(now)) },
    { size: bytes(before).length, hex: sha256Hex(bytes(before)) },
  ]);
  // A file whose lines are all kept as they are has one digest.
  const plain = await setup(JSON.stringify(header()) + "\n" + lines[1] + "\n");
  assert.equal((await migratedLogDigests(plain.fs, LEGACY, portableSha256)).length, 1);
});

test("a header line with trailing non-JSON whitespace is valid only when nothing follows it", async () => {
  // The version-2 reader trims the whole file, then parses each line: U+00A0 after the header
  // is trimmed away only at the end of the file.
  const alone = await setup(JSON.stringify(header()) + "\u00a0\n");
  assert.equal((await readLegacySession(alone.fs, LEGACY)).messageCount, 0);
  const followed = await setup(
    JSON.stringify(header()) + "\u00a0\n" + JSON.stringify(user("hi")) + "\n",
  );
  const before = snapshot(followed.fs);
  await assert.rejects(readLegacySession(followed.fs, LEGACY), SessionFormatError);
  await assert.rejects(followed.store.open(LEGACY), SessionFormatError);
  await assert.rejects(followed.store.list(CWD), SessionFormatError);
  assert.deepEqual(snapshot(followed.fs), before);
});

test("a header line that is JSON only once trimmed, with a line after it, is the JSON error before any header check", async () => {
  // Version 2 parses every line of the trimmed file before it checks anything: the JSON error of
  // the header line wins over an unsupported version, an invalid field and a missing cwd.
  const cases: [string, Record<string, unknown>, boolean][] = [
    ["an unsupported version", header({ version: 3 }), true],
    ["an invalid field", header({ permissionPreset: "everything" }), true],
    ["a missing cwd", header(), false],
  ];
  for (const [what, fields, withCwd] of cases) {
    const { fs, store } = await setup(
      JSON.stringify(fields) + "\f\n" + JSON.stringify(user("hi")) + "\n",
    );
    if (!withCwd) await fs.remove(CWD, { recursive: true });
    const before = snapshot(fs);
    const jsonError = (error: unknown): boolean => {
      assert.ok(error instanceof SessionFormatError, `${what}: ${String(error)}`);
      assert.match(error.message, /^Invalid JSON/, what);
      assert.equal(error.file, LEGACY, what);
      assert.equal(error.path, "header", what);
      return true;
    };
    await assert.rejects(readLegacySession(fs, LEGACY), jsonError);
    await assert.rejects(store.open(LEGACY), jsonError);
    // Listed, it is reported (rethrown), never skipped as an unsupported file.
    await assert.rejects(store.list(undefined, COLLECTION), jsonError);
    assert.deepEqual(snapshot(fs), before, what);
  }
});

test("non-canonical JSON lines keep their bytes; the generation covers them and saves append", async () => {
  const message = user("spaced");
  const spaced = JSON.stringify(message, null, 0).replace(/,"/g, ', "');
  const { fs, store } = await setup(JSON.stringify(header()) + "\n" + spaced + "\n");
  const session = await store.open(LEGACY);
  assert.deepEqual(session.messages, [message]);
  const log = await fs.readFile(`${DIR}/messages.jsonl`);
  assert.equal(decoder.decode(log), spaced + "\n");
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${DIR}/meta.json`)));
  assert.equal(meta.generation, sha256Hex(log));
  // The unchanged message is not mistaken for an edit: the next save appends.
  await session.commit([...session.messages, user("next")]);
  const after = JSON.parse(decoder.decode(await fs.readFile(`${DIR}/meta.json`)));
  assert.equal(after.start, 0);
  assert.equal(after.messageCount, 2);
  await session.close();
});

test("migration keeps each bare line's bytes and writes any other line canonically", async () => {
  // Any mix of line forms, and a last line with or without its newline: messages.jsonl holds
  // exactly the bare lines' own bytes or the canonical form, the generation and the rounds match.
  const unicode = conversation(6);
  // Lines of pure ASCII too, which decode to one-byte strings.
  const ascii = JSON.parse(JSON.stringify(unicode).replace(/[^ -~]/g, "?")) as Message[];
  const form = fc.constantFrom("bare", "spaced", "crlf", "leading space");
  await fc.assert(
    fc.asyncProperty(
      fc.array(form, { minLength: unicode.length, maxLength: unicode.length }),
      fc.boolean(),
      fc.boolean(),
      async (forms, lastNewline, isAscii) => {
        const history = isAscii ? ascii : unicode;
        const lines = history.map((message, i) => {
          const json = JSON.stringify(message);
          switch (forms[i]) {
            case "spaced":
              return { text: json.replace(/,"/g, ', "'), stored: json.replace(/,"/g, ', "') };
            case "crlf":
              return { text: json + "\r", stored: json };
            case "leading space":
              return { text: " " + json, stored: json };
            default:
              return { text: json, stored: json };
          }
        });
        // A spaced line is still one bare object: its bytes are kept as they are.
        let text = JSON.stringify(header()) + "\n" + lines.map((l) => l.text).join("\n");
        if (lastNewline) text += "\n";
        const { fs, store } = await setup(text);
        const session = await store.open(LEGACY);
        assert.deepEqual(session.messages, history);
        await session.close();
        const log = await fs.readFile(`${DIR}/messages.jsonl`);
        const expected = lines.map((l) => l.stored + "\n").join("");
        assert.equal(decoder.decode(log), expected);
        const meta = JSON.parse(decoder.decode(await fs.readFile(`${DIR}/meta.json`)));
        assert.equal(meta.generation, sha256Hex(log));
        assert.equal(meta.bytes, log.length);
        const index = JSON.parse(decoder.decode(await fs.readFile(`${DIR}/index.json`)));
        for (const round of index.rounds as { messageIndex: number; byteOffset: number }[]) {
          const at = expected.split("\n").slice(0, round.messageIndex).join("\n").length;
          assert.equal(
            round.byteOffset,
            round.messageIndex === 0 ? 0 : encoder.encode(
              expected.slice(0, at + 1),
            ).length,
          );
        }
      },
    ),
    { numRuns: runsOf(40) },
  );
});

test("the line reader hands on whole lines, in order, whatever the chunk size", async () => {
  const piece = fc.constantFrom("a", "é", "\n", "{}", "✓", "\n\n", "xyz");
  await fc.assert(
    fc.asyncProperty(
      fc.array(piece, { maxLength: 40 }),
      fc.integer({ min: 1, max: 9 }),
      async (pieces, chunkSize) => {
        const bytes = encoder.encode(pieces.join(""));
        const fs = new MemoryFs();
        await fs.writeFile("/file", bytes);
        const handle = await fs.open("/file");
        const reader = new LineReader(handle, chunkSize);
        const batches: Uint8Array[] = [];
        for (let batch = await reader.next(); batch !== undefined; batch = await reader.next()) {
          batches.push(batch);
        }
        await handle.close();
        const joined = batches.flatMap((b) => [...b]);
        assert.deepEqual(joined, [...bytes]);
        // Every batch but the one holding the file's end ends at a line end.
        let seen = 0;
        for (const batch of batches) {
          seen += batch.length;
          if (batch.length > 0 && seen < bytes.length) assert.equal(batch[batch.length - 1], 10);
        }
      },
    ),
    { numRuns: runsOf(300) },
  );
});

test("a history larger than one read chunk streams through migration intact", async () => {
  const big = "x".repeat(5 * 1024 * 1024);
  const history: Message[] = [user("start"), assistant(big), user("é ✓ end"), assistant("ok")];
  const { fs, store } = await setup(legacyText(header(), history));
  const session = await store.open(LEGACY);
  assert.deepEqual(session.messages, history);
  await session.close();
  const index = JSON.parse(decoder.decode(await fs.readFile(`${DIR}/index.json`)));
  const log = await fs.readFile(`${DIR}/messages.jsonl`);
  assert.deepEqual(index.rounds.map((r: { messageIndex: number }) => r.messageIndex), [0, 2]);
  const second = index.rounds[1].byteOffset as number;
  assert.equal(decoder.decode(log.subarray(second, second + 16)), '{"role":"user","');
});

test("hostile legacy names are refused without following them", async () => {
  const { fs, store } = await setup();
  const other = "1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.symlink(LEGACY, `${COLLECTION}/${other}.jsonl`);
  await assert.rejects(store.open(`${COLLECTION}/${other}.jsonl`), SessionFormatError);
  const third = "2b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.mkdir(`${COLLECTION}/${third}.jsonl`);
  await assert.rejects(store.open(`${COLLECTION}/${third}.jsonl`), SessionFormatError);
  await fs.writeFile(`${COLLECTION}/notes.jsonl`, encoder.encode(legacyText(header(), [])));
  await assert.rejects(store.open(`${COLLECTION}/notes.jsonl`), SessionFormatError);
  await assert.rejects(store.open(`${COLLECTION}/../x.jsonl`), SessionFormatError);
  // A symlink planted where the published directory goes is refused too.
  await fs.symlink("/elsewhere", DIR);
  await assert.rejects(store.open(LEGACY), SessionFormatError);
  assert.equal((await fs.lstat(DIR)).kind, "symlink");
});

test("listing never migrates a legacy session", async () => {
  const { fs, store } = await setup();
  const before = snapshot(fs);
  const full = await store.list(CWD);
  const fast = await store.list(CWD, undefined, { fast: true });
  assert.equal(full.length, 1);
  assert.equal(full[0]?.storage, "legacy");
  assert.equal(full[0]?.path, LEGACY);
  assert.deepEqual(fast, full);
  assert.deepEqual(snapshot(fs), before);
});

test("staging leftovers are ignored by readers and removed by the next migration", async () => {
  const { fs, store } = await setup();
  const leftover = `${COLLECTION}/.staging-${ID}-deadbeef`;
  await fs.mkdir(leftover);
  await fs.writeFile(`${leftover}/messages.jsonl`, encoder.encode("partial"));
  assert.equal((await store.list(CWD)).length, 1);
  const session = await store.open(LEGACY);
  await session.close();
  await assert.rejects(fs.lstat(leftover));
  assert.equal((await store.list(CWD)).length, 1);
});

test("migrateLegacySession refuses a file whose name is not a session id", async () => {
  const { fs, store } = await setup();
  await fs.writeFile(`${COLLECTION}/x.jsonl`, encoder.encode(legacyText(header(), [])));
  await assert.rejects(
    migrateLegacySession(store.context, `${COLLECTION}/x.jsonl`),
    SessionFormatError,
  );
});

async function checkMigrationState(fs: MemoryFs, text: string, history: Message[], label: string) {
  assert.equal(decoder.decode(await fs.readFile(LEGACY)), text, `${label}: legacy file changed`);
  const store = new SessionStore({ fs, agentDir: AGENT });
  let published = true;
  try {
    await fs.lstat(DIR);
  } catch {
    published = false;
  }
  if (published) {
    const reader = await store.open(DIR, { readOnly: true });
    assert.deepEqual(reader.messages, history, `${label}: published directory incomplete`);
  }
  const listed = await store.list(CWD);
  assert.equal(listed.length, 1, `${label}: listed ${listed.length} sessions`);
  assert.equal(listed[0]?.messageCount, history.length, label);
  // The next explicit open finishes the job and cleans the staging leftovers.
  const session = await store.open(LEGACY);
  assert.deepEqual(session.messages, history, label);
  await session.close();
  const leftovers = (await fs.readDir(COLLECTION)).filter((e) => e.name.startsWith("."));
  assert.deepEqual(leftovers, [], `${label}: leftovers after the next migration`);
}

test("case 8: a crash at every step of migration leaves the legacy file intact and the directory absent or complete", async () => {
  const history = conversation(3);
  const text = legacyText(header(), history);
  const { fs: baseline } = await setup(text);
  const points = await crashAtEveryOperation({
    baseline,
    run: async (fs) => {
      const session = await new SessionStore({ fs, agentDir: AGENT }).open(LEGACY);
      await session.close();
    },
    check: async (recovered, { resolved, n, seed }) => {
      const label = `crash after op ${n}, seed ${seed}`;
      if (resolved) assert.ok((await recovered.lstat(`${DIR}/meta.json`)).kind === "file", label);
      await checkMigrationState(recovered, text, history, label);
    },
  });
  assert.ok(points > 10, `only ${points} crash points`);
});

/** A pacing that makes a small file cross every read, write and background-sync boundary. */
const SMALL_PACING: MigrationPacing = { readChunk: 256, writeBatch: 512, syncEvery: 1024 };

/** The operations of `fs` on the staged log of a migration, in order. */
function stagedLogOps(fs: MemoryFs): string[] {
  return fs.operationLog
    .filter((record) =>
      record.path.includes("/.staging-") && record.path.endsWith("/messages.jsonl")
    )
    .map((record) => record.op);
}

test("migration syncs the staged log behind its writes under full durability and publishes the same files", async () => {
  const history = conversation(40);
  const { fs: baseline } = await setup(legacyText(header(), history));
  const paced = baseline.clone();
  const plain = baseline.clone();
  paced.resetCounter();
  await migrateLegacySession(new SessionStore({ fs: paced, agentDir: AGENT }).context, LEGACY, {
    ...SMALL_PACING,
  });
  await migrateLegacySession(new SessionStore({ fs: plain, agentDir: AGENT }).context, LEGACY);
  assert.deepEqual(paced.snapshotTree(DIR), plain.snapshotTree(DIR));
  const ops = stagedLogOps(paced);
  const lastWrite = ops.lastIndexOf("write");
  const syncsBehind = ops.slice(0, lastWrite).filter((op) => op === "sync").length;
  assert.ok(syncsBehind >= 2, `background syncs before the last write: ${ops.join(",")}`);
  assert.ok(ops.lastIndexOf("sync") > lastWrite, `a sync after the last write: ${ops.join(",")}`);
  const session = await new SessionStore({ fs: paced, agentDir: AGENT }).open(DIR, {
    readOnly: true,
  });
  assert.deepEqual(session.messages, history);
  await session.close();
});

test("migration in ordered durability never syncs the staged log", async () => {
  const { fs } = await setup(legacyText(header(), conversation(40)));
  fs.resetCounter();
  const store = new SessionStore({ fs, agentDir: AGENT, durability: "ordered" });
  await migrateLegacySession(store.context, LEGACY, SMALL_PACING);
  const ops = stagedLogOps(fs);
  assert.ok(ops.filter((op) => op === "write").length > 5, ops.join(","));
  assert.ok(!ops.includes("sync"), ops.join(","));
});

test("a failed background sync fails the migration even when the final sync would succeed", async () => {
  const history = conversation(40);
  const text = legacyText(header(), history);
  const { fs } = await setup(text);
  // One transient EIO on the first sync: the background sync of the staged log.
  fs.failAt(1, { error: "EIO", ops: ["sync"] });
  const store = new SessionStore({ fs, agentDir: AGENT });
  await assert.rejects(
    migrateLegacySession(store.context, LEGACY, SMALL_PACING),
    /Input\/output error \(injected\): sync .*messages\.jsonl/,
  );
  fs.clearFaults();
  await assert.rejects(fs.lstat(DIR));
  const leftovers = (await fs.readDir(COLLECTION)).filter((e) => e.name.startsWith("."));
  assert.deepEqual(leftovers, []);
  await checkMigrationState(fs, text, history, "after a failed background sync");
});

test("case 8: a crash at every step of a paced migration (background syncs) leaves the legacy file intact and the directory absent or complete", async () => {
  const history = conversation(12);
  const text = legacyText(header(), history);
  const { fs: baseline } = await setup(text);
  const points = await crashAtEveryOperation({
    baseline,
    run: async (fs) => {
      const store = new SessionStore({ fs, agentDir: AGENT });
      await migrateLegacySession(store.context, LEGACY, SMALL_PACING);
    },
    check: async (recovered, { resolved, n, seed }) => {
      const label = `crash after op ${n}, seed ${seed}`;
      if (resolved) assert.ok((await recovered.lstat(`${DIR}/meta.json`)).kind === "file", label);
      await checkMigrationState(recovered, text, history, label);
    },
    seeds: [0, 3],
  });
  assert.ok(points > 20, `only ${points} crash points`);
});

for (const persistent of [false, true]) {
  test(
    `case 6, 8: EIO (${
      persistent ? "persistent" : "transient"
    }) at every step of a paced migration fails cleanly`,
    async () => {
      const history = conversation(12);
      const text = legacyText(header(), history);
      const { fs: baseline } = await setup(text);
      await failAtEveryOperation({
        baseline,
        error: "EIO",
        persistent,
        run: async (fs) => {
          const store = new SessionStore({ fs, agentDir: AGENT });
          await migrateLegacySession(store.context, LEGACY, SMALL_PACING);
        },
        check: async (fs, { resolved, n }) => {
          const label = `EIO at op ${n}`;
          if (resolved) assert.ok((await fs.lstat(`${DIR}/meta.json`)).kind === "file", label);
          else if (!persistent) {
            // A transient fault leaves the removal of the staging directory free to succeed.
            const leftovers = (await fs.readDir(COLLECTION)).filter((e) => e.name.startsWith("."));
            assert.deepEqual(leftovers, [], `${label}: leftovers`);
          }
          await checkMigrationState(fs, text, history, label);
        },
      });
    },
  );
}

for (const error of ["EIO", "ENOSPC"] as const) {
  for (const persistent of [false, true]) {
    test(
      `case 6, 8: ${error} (${
        persistent ? "persistent" : "transient"
      }) at every step of migration fails cleanly`,
      async () => {
        const history = conversation(2);
        const text = legacyText(header(), history);
        const { fs: baseline } = await setup(text);
        await failAtEveryOperation({
          baseline,
          error,
          persistent,
          run: async (fs) => {
            const session = await new SessionStore({ fs, agentDir: AGENT }).open(LEGACY);
            await session.close();
          },
          check: async (fs, { resolved, n }) => {
            const label = `${error} at op ${n}`;
            if (resolved) assert.ok((await fs.lstat(`${DIR}/meta.json`)).kind === "file", label);
            await checkMigrationState(fs, text, history, label);
          },
        });
      },
    );
  }
}

test("a paced migration on the Node adapter syncs behind its writes and publishes every byte", async () => {
  const base = await mkdtemp(join(tmpdir(), "loop-migrate-"));
  try {
    await pacedMigrationOnRealFs(nodeFs(), nodeSha256, base);
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("a legacy line holding bytes that are not UTF-8 is migrated in canonical form, so the log is valid UTF-8", async () => {
  const history = conversation(2);
  const lines = legacyText(header(), history).split("\n");
  // "r0 question ✓" with an invalid byte sequence (0xff 0xc3) put inside its text.
  const [before, after] = (lines[1] as string).split("question");
  const bytes = new Uint8Array([
    ...encoder.encode(`${lines[0]}\n${before}`),
    0xff,
    0xc3,
    ...encoder.encode(`question${after}\n${lines.slice(2).join("\n")}`),
  ]);
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  await fs.writeFile(LEGACY, bytes, { mode: 0o600 });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const migrated = await store.open(LEGACY);
  const messages = migrated.messages;
  await migrated.close();
  assert.match(JSON.stringify(messages[0]), /\uFFFD/);
  const log = await fs.readFile(`${DIR}/messages.jsonl`);
  // Valid UTF-8 (a fatal decoder accepts it), and the bytes a fresh save of these messages writes.
  new TextDecoder("utf-8", { fatal: true }).decode(log);
  assert.equal(decoder.decode(log), messages.map((m) => JSON.stringify(m) + "\n").join(""));
  assert.deepEqual(await fs.readFile(LEGACY), bytes);
});

test("a migration makes a version-2 collection private (0700), and survives a power loss so", async () => {
  for (const readOnly of [false, true]) {
    const { fs } = await setup();
    // Version 2 created collections with the default mode.
    await fs.chmod(COLLECTION, 0o755);
    fs.syncAll();
    const session = await new SessionStore({ fs, agentDir: AGENT }).open(LEGACY, { readOnly });
    await session.close();
    assert.equal((await fs.stat(COLLECTION)).mode, 0o700, `readOnly: ${readOnly}`);
    assert.equal((await fs.stat(DIR)).mode, 0o700, `readOnly: ${readOnly}`);
    const recovered = fs.crash({ seed: 0, extraJournal: "none", tailMode: "none" });
    assert.equal((await recovered.stat(COLLECTION)).mode, 0o700, `readOnly: ${readOnly}`);
    // The backup keeps its own mode: it stays as version 2 wrote it.
    assert.equal((await fs.stat(LEGACY)).mode, 0o600);
  }
  // A file that is not migrated (another format) leaves the collection as it was.
  const { fs } = await setup(legacyText(header({ format: "other" }), conversation(1)));
  await fs.chmod(COLLECTION, 0o755);
  await assert.rejects(
    new SessionStore({ fs, agentDir: AGENT }).open(LEGACY),
    UnsupportedSessionError,
  );
  assert.equal((await fs.stat(COLLECTION)).mode, 0o755);
});
