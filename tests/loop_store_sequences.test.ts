// Random sequences of what a host does to a session (saves that append, edit or shorten the
// history, appends, user turns saved with a runtime context and a prompt timing, pins, read
// receipts, titles, page reads, reopenings, compactions), crashed at random points: the session
// reopens at the state of the last operation that resolved or of the one in flight, as a whole,
// and every view of it (the history, every page, both listings, the header's contexts, timings and
// title) agrees.
// RELIABILITY.md's crash loops cover each operation at every step; these cover them in combination.
import { test } from "node:test";
import assert from "node:assert/strict";
import { isDeepStrictEqual as same } from "node:util";
import { type CrashOptions, MemoryFs, SimulatedCrash } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Durability } from "../src/port/durable.ts";
import type { Message, PromptTiming, RuntimeContextSnapshot } from "../src/loop/records/mod.ts";
import { assistant, legacySessionBytes, user } from "./_fixtures.ts";
import { mulberry32 } from "../adapters/_memory_nodes.ts";
import { seedsOf } from "./_soak.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

/** What a host can observe of a session and the model predicts. */
interface State {
  readonly messages: readonly Message[];
  readonly pinned: boolean;
  readonly unread: boolean;
  /** The runtime contexts of the header (written from kept bytes by a save that omits them). */
  readonly contexts: readonly RuntimeContextSnapshot[];
  /** The prompt timings of the header (the same). */
  readonly timings: readonly PromptTiming[];
  /** The stored title's text. */
  readonly title: string | undefined;
}

type Op =
  | { readonly kind: "commit"; readonly added: readonly Message[] }
  | { readonly kind: "append"; readonly added: readonly Message[] }
  | { readonly kind: "edit"; readonly at: number; readonly text: string }
  | { readonly kind: "shorten"; readonly by: number }
  | { readonly kind: "pin"; readonly pinned: boolean }
  | { readonly kind: "read" }
  | { readonly kind: "reopen" }
  | { readonly kind: "compact" }
  | { readonly kind: "burst"; readonly parts: readonly BurstPart[] }
  // A user turn saved with a runtime context snapshot and a prompt timing for it (the complete
  // arrays passed).
  | {
    readonly kind: "context";
    readonly via: "commit" | "append";
    readonly added: readonly Message[];
    readonly tag: string;
  }
  | { readonly kind: "title"; readonly text: string | undefined }
  // Every page of the history, walked from the latest back to the first.
  | { readonly kind: "page" };

/** One save of a burst: saves called together, without waiting (written as one batch). */
type BurstPart =
  | { readonly kind: "commit" | "append"; readonly added: readonly Message[] }
  | { readonly kind: "edit"; readonly at: number; readonly text: string }
  | Extract<Op, { readonly kind: "context" }>;

/** A sequence of `length` operations; message texts name the sequence and the step. */
function sequence(seed: number, length: number): Op[] {
  const next = mulberry32(seed);
  const pick = (n: number): number => Math.floor(next() * n);
  const ops: Op[] = [];
  let count = 2; // the baseline's history
  for (let i = 0; i < length; i++) {
    const tag = `s${seed}o${i}`;
    const roll = pick(14);
    if (roll === 13) {
      ops.push({ kind: "page" });
    } else if (roll === 11) {
      const added = [user(`${tag} question`), assistant(`${tag} answer`)];
      ops.push({ kind: "context", via: pick(2) === 0 ? "append" : "commit", added, tag });
      count += added.length;
    } else if (roll === 12) {
      ops.push({ kind: "title", text: pick(3) === 0 ? undefined : `${tag} title` });
    } else if (roll === 10) {
      const parts: BurstPart[] = [];
      for (let k = 0, n = 2 + pick(3); k < n; k++) {
        const part = pick(5);
        if (part === 0) {
          parts.push({ kind: "edit", at: pick(count), text: `${tag}p${k} edited` });
          continue;
        }
        const added = [user(`${tag}p${k} question`), assistant(`${tag}p${k} answer`)];
        // A save that passes the metadata arrays, written in one batch with saves that omit them.
        if (part === 1) {
          const via = pick(2) === 0 ? "append" : "commit";
          parts.push({ kind: "context", via, added, tag: `${tag}p${k}` });
        } else parts.push({ kind: pick(2) === 0 ? "append" : "commit", added });
        count += added.length;
      }
      ops.push({ kind: "burst", parts });
    } else if (roll < 3) {
      const added = [user(`${tag} question`), ...(pick(3) > 0 ? [assistant(`${tag} answer`)] : [])];
      ops.push({ kind: roll === 0 ? "append" : "commit", added });
      count += added.length;
    } else if (roll === 3) {
      ops.push({ kind: "edit", at: pick(count), text: `${tag} edited` });
    } else if (roll === 4 && count > 1) {
      const by = 1 + pick(Math.min(2, count - 1));
      ops.push({ kind: "shorten", by });
      count -= by;
    } else if (roll === 5) {
      ops.push({ kind: "pin", pinned: pick(2) === 0 });
    } else if (roll === 6) {
      ops.push({ kind: "read" });
    } else if (roll === 7) {
      ops.push({ kind: "reopen" });
    } else if (roll === 8) {
      ops.push({ kind: "compact" });
    } else {
      ops.push({ kind: "commit", added: [assistant(`${tag} more`)] });
      count++;
    }
  }
  return ops;
}

/** The state after `op`, as the library documents it. */
function model(state: State, op: Op): State {
  switch (op.kind) {
    case "commit":
    case "append":
      return {
        ...state,
        messages: [...state.messages, ...op.added],
        // Newly appended output (anything but a user message) marks the session unread.
        unread: state.unread || op.added.some((message) => message.role !== "user"),
      };
    case "edit":
      // A replaced message is not new output: unread is kept.
      return {
        ...state,
        messages: state.messages.map((message, i) =>
          i === op.at ? edited(message, op.text) : message
        ),
      };
    case "shorten": {
      // The host passes the contexts and timings of the turns that remain (a save that keeps one
      // of a turn no longer in the history is refused).
      const messages = state.messages.slice(0, state.messages.length - op.by);
      const turns = userTurns(messages);
      return {
        ...state,
        messages,
        contexts: state.contexts.filter((c) => c.userTurn < turns),
        timings: state.timings.filter((t) => t.userMessageIndex < messages.length),
      };
    }
    case "context":
      return {
        ...state,
        messages: [...state.messages, ...op.added],
        unread: true,
        contexts: [...state.contexts, {
          userTurn: userTurns(state.messages),
          content: `context of ${op.tag}`,
          timestamp: 1_700_000_000_000 + state.messages.length,
        }],
        timings: [...state.timings, {
          userMessageIndex: state.messages.length,
          startedAt: 1_700_000_000_000 + state.messages.length,
          finishedAt: 1_700_000_000_500 + state.messages.length,
        }],
      };
    case "title":
      return { ...state, title: op.text };
    case "pin":
      return { ...state, pinned: op.pinned };
    case "read":
      return { ...state, unread: state.messages.length > 0 ? false : state.unread };
    case "reopen":
    case "compact":
    case "page":
      return state;
    case "burst":
      return op.parts.reduce(model, state);
  }
}

/** The number of user messages of `messages`: the user turn a new user message starts. */
function userTurns(messages: readonly Message[]): number {
  return messages.filter((message) => message.role === "user").length;
}

/** The new message objects made by `edited`, by role and text: the model's runs agree. */
const editedMessages = new Map<string, Message>();

/**
 * A new message object in place of `message`: the same role, other text (the same object for the
 * same role and text, however often the model is run).
 */
function edited(message: Message, text: string): Message {
  const key = `${message.role} ${text}`;
  let made = editedMessages.get(key);
  if (made === undefined) {
    made = message.role === "user" ? user(text) : assistant(text);
    editedMessages.set(key, made);
  }
  return made;
}

/** Runs `op` on the open `session` of `dir`; returns the session to go on with. */
async function perform(
  store: SessionStore,
  dir: string,
  session: SessionManager,
  op: Op,
  expected: State,
): Promise<SessionManager> {
  switch (op.kind) {
    case "commit":
      await session.commit([...session.messages, ...op.added]);
      return session;
    case "append":
      await session.append(op.added);
      return session;
    case "edit": {
      // The saved objects, and in place of one of them the model's new object.
      const messages = session.messages;
      messages[op.at] = expected.messages[op.at] as Message;
      await session.commit(messages);
      return session;
    }
    case "shorten": {
      const header = session.getHeader();
      const contexts = (header.runtimeContexts ?? []).length === expected.contexts.length
        ? undefined
        : expected.contexts;
      const timings = (header.promptTimings ?? []).length === expected.timings.length
        ? undefined
        : expected.timings;
      await session.commit(
        session.messages.slice(0, expected.messages.length),
        contexts,
        timings,
      );
      return session;
    }
    case "context":
      if (op.via === "append") {
        await session.append(op.added, expected.contexts, expected.timings);
      } else {
        await session.commit(
          [...session.messages, ...op.added],
          expected.contexts,
          expected.timings,
        );
      }
      return session;
    case "title":
      await session.setTitle(
        op.text === undefined ? undefined : { text: op.text, source: "user", messageIndices: [] },
      );
      return session;
    case "pin":
      await session.setPinned(op.pinned);
      return session;
    case "read":
      assert.equal(await session.markRead(session.messages.length), true);
      return session;
    case "reopen":
      await session.close();
      return await store.open(dir);
    case "compact":
      await session.close();
      await store.compact(dir);
      return await store.open(dir);
    case "page":
      await walkPages(session, expected.messages, "page operation");
      return session;
    case "burst": {
      // Every save called before any is awaited, each with the history the ones before it made.
      let state: State = stateOf(session);
      const saves = op.parts.map((part) => {
        const before = state.messages;
        state = model(state, part);
        if (part.kind === "context") {
          return part.via === "append"
            ? session.append(part.added, state.contexts, state.timings)
            : session.commit(state.messages, state.contexts, state.timings);
        }
        if (part.kind !== "edit") {
          return part.kind === "append"
            ? session.append(part.added)
            : session.commit(state.messages);
        }
        const messages = [...before];
        messages[part.at] = state.messages[part.at] as Message;
        return session.commit(messages);
      });
      await Promise.all(saves);
      return session;
    }
  }
}

/**
 * Reads every page of `session` from the latest back to the first, each before the start of the
 * one after it, all of the first page's revision: each must be the last three user rounds before
 * its end (all messages before the fourth-last round's start otherwise) of `messages`.
 */
async function walkPages(session: SessionManager, messages: readonly Message[], label: string) {
  const rounds = messages.flatMap((message, i) => message.role === "user" ? [i] : []);
  let before: number | undefined;
  let revision: string | undefined;
  for (;;) {
    const page = await session.readHistory(before, revision);
    revision ??= page.revision;
    const end = before ?? messages.length;
    const started = rounds.filter((at) => at < end);
    const start = started.length <= 3 ? 0 : started[started.length - 3] as number;
    assert.deepEqual(
      [page.start, page.end, page.total, page.revision],
      [start, end, messages.length, revision],
      `${label}: the page before ${before}`,
    );
    assert.deepEqual(
      page.messages,
      messages.slice(start, end),
      `${label}: the page before ${before}`,
    );
    if (start === 0) return;
    before = start;
  }
}

function stateOf(session: SessionManager): State {
  const header = session.getHeader();
  return {
    messages: session.messages,
    pinned: header.pinnedAt !== undefined,
    unread: header.unread === true,
    contexts: header.runtimeContexts ?? [],
    timings: header.promptTimings ?? [],
    // Without a stored title the header shows the fallback of the first user message.
    title: header.title?.source === "fallback" ? undefined : header.title?.text,
  };
}

/** A synced baseline: one saved session of two messages. */
async function baseline(
  durability: Durability,
): Promise<{ fs: MemoryFs; dir: string; state: State }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const session = await new SessionStore({ fs, agentDir: AGENT, durability }).create(CWD);
  await session.commit([user("first question"), assistant("first answer")]);
  const state = stateOf(session);
  await session.close();
  fs.syncAll();
  return { fs, dir: session.getSessionPath(), state };
}

/**
 * Runs `ops` on a copy of `base` crashing after operation `crashAfter` (none when undefined).
 * Returns the states of the last resolved operation and of the one in flight, and the number
 * of filesystem operations the run made.
 */
async function run(
  base: { fs: MemoryFs; dir: string; state: State },
  durability: Durability,
  ops: readonly Op[],
  crashAfter: number | undefined,
): Promise<{ fs: MemoryFs; resolved: State; inFlight: State | undefined; operations: number }> {
  const fs = base.fs.clone();
  const store = new SessionStore({ fs, agentDir: AGENT, durability });
  let resolved = base.state;
  if (crashAfter !== undefined) fs.crashAfter(crashAfter);
  let session: SessionManager | undefined;
  try {
    session = await store.open(base.dir);
    for (const op of ops) {
      const target = model(resolved, op);
      try {
        session = await perform(store, base.dir, session, op, target);
      } catch (error) {
        if (!(error instanceof SimulatedCrash) && !fs.crashTriggered) throw error;
        return { fs, resolved, inFlight: target, operations: fs.operationCount };
      }
      resolved = target;
      // What the host sees once the operation resolved is what the model says.
      assert.ok(same(stateOf(session), resolved), `${op.kind} resolved to another state`);
    }
    await session.close();
  } catch (error) {
    if (!(error instanceof SimulatedCrash) && !fs.crashTriggered) throw error;
  }
  return { fs, resolved, inFlight: undefined, operations: fs.operationCount };
}

/** Reopens a recovered state and checks it is one of `allowed`, the same in every view. */
async function check(recovered: MemoryFs, dir: string, allowed: State[], label: string) {
  const store = new SessionStore({ fs: recovered, agentDir: AGENT });
  const session = await store.open(dir);
  const state = stateOf(session);
  assert.ok(
    allowed.some((candidate) => same(state, candidate)),
    `${label}: reopened at ${JSON.stringify(state)}, expected one of ${JSON.stringify(allowed)}`,
  );
  // Every page, by a writer: its first page read rebuilds an index.json the crash left stale.
  await walkPages(session, state.messages, `${label}: writer's pages`);
  for (const fast of [false, true]) {
    const listed = (await store.list(CWD, undefined, { fast })).find((s) => s.id === session.id);
    assert.equal(listed?.messageCount, state.messages.length, `${label}: listing (fast ${fast})`);
  }
  // And it goes on: a save after recovery is kept.
  const next = [...session.messages, user("after recovery"), assistant("kept")];
  await session.commit(next);
  await session.close();
  const again = await store.open(dir, { readOnly: true });
  assert.deepEqual(again.messages, next, `${label}: save after recovery`);
  await walkPages(again, next, `${label}: pages after recovery`);
  await again.close();
}

for (const durability of ["full", "ordered"] as const) {
  test(`random host sequences (${durability}), crashed anywhere, reopen at the last resolved state or the one in flight`, async () => {
    const base = await baseline(durability);
    // Under `full` a resolved save survives power loss; under `ordered`, the crash of the process.
    const crashes: CrashOptions[] = durability === "full"
      ? [{ seed: 0 }, { seed: 1 }, { seed: 5 }]
      : [{ seed: 2, tailMode: "whole", extraJournal: "all" }];
    let checked = 0;
    let midOperation = 0;
    const kinds = new Set<string>();
    const seeds = seedsOf(1, 40);
    for (const seed of seeds) {
      const ops = sequence(seed, 10);
      for (const op of ops) kinds.add(op.kind);
      const whole = await run(base, durability, ops, undefined);
      assert.equal(whole.inFlight, undefined);
      const next = mulberry32(seed * 7919);
      for (let k = 0; k < 3; k++) {
        const point = Math.floor(next() * whole.operations);
        const crashed = await run(base, durability, ops, point);
        if (crashed.inFlight !== undefined) midOperation++;
        const allowed = crashed.inFlight === undefined
          ? [crashed.resolved]
          : [crashed.resolved, crashed.inFlight];
        for (const options of crashes) {
          const label = `sequence ${seed} [${ops.map((op) => op.kind)}], crash after ${point}, ` +
            JSON.stringify(options);
          await check(crashed.fs.crash(options), base.dir, allowed, label);
          checked++;
        }
      }
    }
    assert.equal(checked, seeds.length * 3 * crashes.length);
    // Every kind of operation ran, and most crash points fell inside one.
    assert.equal(kinds.size, 12, [...kinds].join());
    assert.ok(midOperation > 80, `${midOperation} of 120 crash points inside an operation`);
  });
}

/**
 * Runs `ops` on a copy of `base` with operation `n` failing once (`error`). A failed save is
 * retried with `flush()` (it must then land); a failed metadata write must leave the state as it
 * was; a failed reopening or compaction changes nothing. Returns the filesystem and the state it
 * must reopen at.
 */
async function runWithFault(
  base: { fs: MemoryFs; dir: string; state: State },
  ops: readonly Op[],
  n: number,
  error: "EIO" | "ENOSPC",
): Promise<{ fs: MemoryFs; expected: State; failed: string | undefined }> {
  const fs = base.fs.clone();
  const store = new SessionStore({ fs, agentDir: AGENT });
  fs.resetCounter();
  fs.failAt(n, { error });
  let state = base.state;
  let session: SessionManager | undefined;
  let failed: string | undefined;
  try {
    session = await store.open(base.dir);
  } catch {
    return { fs, expected: state, failed: "open" };
  }
  for (const op of ops) {
    const target = model(state, op);
    try {
      session = await perform(store, base.dir, session, op, target);
      state = target;
      continue;
    } catch {
      failed = op.kind;
    }
    fs.clearFaults();
    if (
      op.kind === "commit" || op.kind === "append" || op.kind === "edit" ||
      op.kind === "shorten" || op.kind === "burst" || op.kind === "context"
    ) {
      assert.equal(session.hasPendingSave, true, `a failed ${op.kind} is pending`);
      await session.flush();
      state = target;
      assert.ok(same(stateOf(session), state), `${op.kind}: flushed to another state`);
    } else if (
      op.kind === "pin" || op.kind === "read" || op.kind === "title" || op.kind === "page"
    ) {
      assert.ok(same(stateOf(session), state), `a failed ${op.kind} changed the state`);
      // Nor do readers see it meanwhile (the caller was told it failed).
      const reader = await store.open(base.dir, { readOnly: true });
      assert.ok(same(stateOf(reader), state), `a reader saw the failed ${op.kind}`);
      await reader.close();
    }
    break;
  }
  await session.close().catch(() => undefined);
  return { fs, expected: state, failed };
}

test("random host sequences with an I/O error at a random step: a failed save lands on flush(), anything else fails whole", async () => {
  const base = await baseline("full");
  const failedKinds = new Set<string>();
  for (const seed of seedsOf(101, 40)) {
    const ops = sequence(seed, 10);
    const whole = await run(base, "full", ops, undefined);
    const next = mulberry32(seed * 104729);
    for (let k = 0; k < 3; k++) {
      const n = 1 + Math.floor(next() * whole.operations);
      const error = k % 2 === 0 ? "EIO" : "ENOSPC";
      const { fs, expected, failed } = await runWithFault(base, ops, n, error);
      if (failed !== undefined) failedKinds.add(failed);
      const label = `sequence ${seed} [${ops.map((op) => op.kind)}], ${error} at ${n} (${failed})`;
      await check(fs, base.dir, [expected], label);
    }
  }
  // Failures fell in saves, metadata writes and the rest.
  for (const kind of ["commit", "pin", "compact"]) {
    assert.ok(failedKinds.has(kind), `no failure in ${kind}: ${[...failedKinds]}`);
  }
});

// ---------------------------------------------------------------------------------------------
// Collections: sessions created, saved, migrated, archived, deleted and compacted in one
// collection, crashed anywhere. Each session is whole or gone, and a listing needs no recovery.

/** What a listing shows of a session: its id, message count and archive flag. */
type Listed = readonly [id: string, messages: number, archived: boolean];

/** The collection the model predicts, in creation order. */
interface Collection {
  readonly sessions: readonly Listed[];
}

type CollectionOp =
  | { readonly kind: "new" }
  | { readonly kind: "save"; readonly pick: number }
  | { readonly kind: "archive"; readonly pick: number; readonly archived: boolean }
  | { readonly kind: "delete"; readonly picks: readonly number[] }
  | { readonly kind: "compact"; readonly pick: number }
  | { readonly kind: "cleanup" };

const COLLECTION_KINDS = ["new", "save", "archive", "delete", "compact", "cleanup"] as const;

/** Legacy version-2 sessions of the baseline: listed as files, migrated by their first open. */
const LEGACY_IDS = ["0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f", "1c9a3fa0-4d2e-4b6c-8f70-8b9cad1e2f30"];

function collectionSequence(seed: number, length: number): CollectionOp[] {
  const next = mulberry32(seed);
  const pick = (): number => Math.floor(next() * 1000);
  return Array.from({ length }, (): CollectionOp => {
    const kind = COLLECTION_KINDS[Math.floor(next() * COLLECTION_KINDS.length)];
    switch (kind) {
      case "new":
      case "cleanup":
        return { kind };
      case "save":
      case "compact":
        return { kind, pick: pick() };
      case "archive":
        return { kind, pick: pick(), archived: next() < 0.7 };
      default:
        return { kind: "delete", picks: [pick(), pick()] };
    }
  });
}

function modelCollection(state: Collection, op: CollectionOp, created?: string): Collection {
  const sessions = state.sessions;
  const at = (pick: number): Listed | undefined => sessions[pick % Math.max(1, sessions.length)];
  switch (op.kind) {
    case "new":
      return { sessions: [...sessions, [created as string, 2, false]] };
    case "save": {
      const target = at(op.pick);
      return {
        sessions: sessions.map((s) => s === target ? [s[0], s[1] + 2, s[2]] as const : s),
      };
    }
    case "archive": {
      const target = at(op.pick);
      return {
        sessions: sessions.map((s) => s === target ? [s[0], s[1], op.archived] as const : s),
      };
    }
    case "delete": {
      // Only archived sessions are deleted (the default); the others are left out of the call.
      const gone = new Set(op.picks.map(at).filter((s) => s !== undefined && s[2]));
      return { sessions: sessions.filter((s) => !gone.has(s)) };
    }
    case "compact":
    case "cleanup":
      return state;
  }
}

async function performOnCollection(
  store: SessionStore,
  pathOf: (id: string) => Promise<string>,
  state: Collection,
  op: CollectionOp,
  onCreated: (id: string) => void,
): Promise<void> {
  const at = (pick: number): Listed | undefined =>
    state.sessions[pick % Math.max(1, state.sessions.length)];
  switch (op.kind) {
    case "new": {
      const session = await store.create(CWD);
      onCreated(session.id);
      await session.commit([user(`${session.id} question`), assistant("answer")]);
      await session.close();
      return;
    }
    case "save": {
      const target = at(op.pick);
      if (target === undefined) return;
      const session = await store.open(await pathOf(target[0]));
      await session.commit([...session.messages, user("more"), assistant("more")]);
      await session.close();
      return;
    }
    case "archive": {
      const target = at(op.pick);
      if (target !== undefined) await store.archive.set(CWD, [target[0]], op.archived);
      return;
    }
    case "delete": {
      const ids = [...new Set(op.picks.map(at).filter((s) => s !== undefined && s[2]))];
      if (ids.length > 0) await store.archive.delete(CWD, ids.map((s) => (s as Listed)[0]));
      return;
    }
    case "compact": {
      const target = at(op.pick);
      if (target === undefined) return;
      // A legacy session is migrated by its first open; compaction takes a directory.
      const session = await store.open(await pathOf(target[0]));
      await session.close();
      await store.compact(session.getSessionPath());
      return;
    }
    case "cleanup":
      await store.cleanup(CWD);
      return;
  }
}

/** The collection as a listing shows it, in the model's order; failures are an error. */
async function listedCollection(store: SessionStore, order: readonly string[]): Promise<Listed[]> {
  const result = await store.listDetailed(CWD);
  assert.deepEqual(result.failures.map((f) => `${f.id}: ${f.error.message}`), []);
  const rank = (id: string): number => {
    const i = order.indexOf(id);
    return i < 0 ? order.length : i;
  };
  return result.sessions
    .map((s): Listed => [s.id, s.messageCount, s.archived])
    .sort((a, b) => rank(a[0]) - rank(b[0]) || a[0].localeCompare(b[0]));
}

test("random collection sequences (create, save, migrate, archive, delete, compact, cleanup), crashed or failed anywhere, list every session whole or gone", async () => {
  // The baseline: two legacy files and one saved session, synced.
  const base = new MemoryFs();
  await base.mkdir(CWD, { recursive: true });
  const setupStore = new SessionStore({ fs: base, agentDir: AGENT });
  const first = await setupStore.create(CWD);
  await first.commit([user("first question"), assistant("first answer")]);
  await first.close();
  const collection = first.getSessionDir();
  for (const id of LEGACY_IDS) {
    await base.writeFile(
      `${collection}/${id}.jsonl`,
      legacySessionBytes(id, CWD, [user(`${id} question`), assistant("answer")]),
    );
  }
  base.syncAll();
  const initial: Collection = {
    sessions: [...LEGACY_IDS.map((id): Listed => [id, 2, false]), [first.id, 2, false]],
  };
  /** Runs `ops` on a copy of the baseline, crashing after `crashAfter`. */
  const runCollection = async (ops: readonly CollectionOp[], crashAfter: number | undefined) => {
    const fs = base.clone();
    const store = new SessionStore({ fs, agentDir: AGENT });
    // A legacy session is opened by its file until a directory was published for it.
    const pathOf = async (id: string): Promise<string> => {
      const dir = `${collection}/${id}`;
      if (!LEGACY_IDS.includes(id)) return dir;
      return await fs.lstat(dir).then(() => dir, () => `${dir}.jsonl`);
    };
    let state = initial;
    if (crashAfter !== undefined) fs.crashAfter(crashAfter);
    for (const op of ops) {
      let created: string | undefined;
      try {
        await performOnCollection(store, pathOf, state, op, (id) => (created = id));
      } catch (error) {
        if (!(error instanceof SimulatedCrash) && !fs.crashTriggered) throw error;
        const inFlight = op.kind === "new" && created === undefined
          ? state
          : modelCollection(state, op, created);
        return { fs, resolved: state, inFlight, operations: fs.operationCount };
      }
      state = modelCollection(state, op, created);
      if (crashAfter === undefined) {
        // What a listing shows once the operation resolved is what the model says.
        const order = state.sessions.map((s) => s[0]);
        assert.deepEqual(await listedCollection(store, order), state.sessions, `after ${op.kind}`);
      }
    }
    return { fs, resolved: state, inFlight: undefined, operations: fs.operationCount };
  };

  const kinds = new Set<string>();
  let midOperation = 0;
  for (const seed of seedsOf(1, 25)) {
    const ops = collectionSequence(seed, 12);
    for (const op of ops) kinds.add(op.kind);
    await runCollection(ops, undefined); // checks the model after every operation
    // The operations of a run that lists nothing in between, as the crashed runs do.
    const total = (await runCollection(ops, Number.MAX_SAFE_INTEGER)).operations;
    const next = mulberry32(seed * 7717);
    for (let k = 0; k < 3; k++) {
      const point = Math.floor(next() * total);
      const crashed = await runCollection(ops, point);
      if (crashed.inFlight !== undefined) midOperation++;
      const allowed = [crashed.resolved, ...(crashed.inFlight ? [crashed.inFlight] : [])];
      const order = allowed.flatMap((state) => state.sessions.map((s) => s[0]));
      for (const seedOfCrash of [0, 3]) {
        const label = `collection sequence ${seed} [${ops.map((op) => op.kind)}], crash after ` +
          `${point}, seed ${seedOfCrash}`;
        const recovered = crashed.fs.crash({ seed: seedOfCrash });
        const store = new SessionStore({ fs: recovered, agentDir: AGENT });
        // Readers need no recovery: an interrupted delete, migration or compaction is invisible.
        const seen = await listedCollection(store, order);
        assert.ok(
          allowed.some((state) => equalListing(state.sessions, seen)),
          `${label}: listed ${JSON.stringify(seen)}, expected one of ${JSON.stringify(allowed)}`,
        );
        // Recovery keeps that, and leaves nothing staged behind.
        await store.cleanup(CWD);
        assert.deepEqual(await listedCollection(store, order), seen, `${label}: after cleanup`);
        const leftovers = Object.keys(recovered.snapshotTree(collection)).filter((p) =>
          /^\.(delete|staging)-/.test(p) || p.endsWith(".tmp")
        );
        assert.deepEqual(leftovers, [], `${label}: leftovers`);
        // Every listed session opens with the history the listing counted.
        for (const [id, messages] of seen) {
          const path = (await store.list(CWD)).find((s) => s.id === id)?.path as string;
          const session = await store.open(path, { readOnly: true });
          assert.equal(session.messages.length, messages, `${label}: ${id}`);
          await session.close();
        }
      }
    }
  }
  assert.equal(kinds.size, COLLECTION_KINDS.length, [...kinds].join());
  assert.ok(midOperation > 40, `${midOperation} of 75 crash points inside an operation`);

  // The same sequences with one step failing (EIO or ENOSPC, once): the failed call leaves the
  // collection as before it or as after it, whole, for a listing at once and after cleanup, and
  // the next operations work.
  const failedKinds = new Set<string>();
  for (const seed of seedsOf(1, 25)) {
    const ops = collectionSequence(seed, 12);
    const total = (await runCollection(ops, Number.MAX_SAFE_INTEGER)).operations;
    const next = mulberry32(seed * 6007);
    for (let k = 0; k < 3; k++) {
      const n = 1 + Math.floor(next() * total);
      const error = k % 2 === 0 ? "EIO" : "ENOSPC";
      const fs = base.clone();
      const store = new SessionStore({ fs, agentDir: AGENT });
      fs.resetCounter();
      fs.failAt(n, { error });
      let state = initial;
      let allowed: Collection[] | undefined;
      let failedAt = 0;
      for (const [i, op] of ops.entries()) {
        let created: string | undefined;
        const pathOf = async (id: string): Promise<string> => {
          const dir = `${collection}/${id}`;
          if (!LEGACY_IDS.includes(id)) return dir;
          return await fs.lstat(dir).then(() => dir, () => `${dir}.jsonl`);
        };
        try {
          await performOnCollection(store, pathOf, state, op, (id) => (created = id));
        } catch {
          failedKinds.add(op.kind);
          allowed = [state, modelCollection(state, op, created)];
          failedAt = i;
          break;
        }
        state = modelCollection(state, op, created);
      }
      fs.clearFaults();
      const label = `collection sequence ${seed}, ${error} at ${n} (${ops[failedAt]?.kind})`;
      const order = (allowed ?? [state]).flatMap((c) => c.sessions.map((s) => s[0]));
      const seen = await listedCollection(store, order);
      assert.ok(
        (allowed ?? [state]).some((c) => equalListing(c.sessions, seen)),
        `${label}: listed ${JSON.stringify(seen)}, expected one of ${JSON.stringify(allowed)}`,
      );
      await store.cleanup(CWD);
      assert.deepEqual(await listedCollection(store, order), seen, `${label}: after cleanup`);
      // The host goes on: one more session is created and listed.
      const more = await store.create(CWD);
      await more.commit([user("after the fault"), assistant("kept")]);
      await more.close();
      const after = await listedCollection(store, [...order, more.id]);
      assert.ok(equalListing(after, [...seen, [more.id, 2, false]]), `${label}: the next save`);
    }
  }
  for (const kind of ["new", "save", "delete"]) {
    assert.ok(failedKinds.has(kind), `no failure in ${kind}: ${[...failedKinds]}`);
  }
});

function equalListing(a: readonly Listed[], b: readonly Listed[]): boolean {
  const key = (list: readonly Listed[]) => JSON.stringify([...list].sort());
  return key(a) === key(b);
}
