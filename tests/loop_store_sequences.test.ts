// Random sequences of what a host does to a session (saves that append, edit or shorten the
// history, appends, pins, read receipts, reopenings, compactions), crashed at random points: the
// session reopens at the state of the last operation that resolved or of the one in flight, as a
// whole, and every view of it (the history, a page, both listings) agrees. RELIABILITY.md's crash
// loops cover each operation at every step; these cover them in combination.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type CrashOptions, MemoryFs, SimulatedCrash } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Durability } from "../src/port/durable.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { assistant, user } from "./_fixtures.ts";
import { mulberry32 } from "../adapters/_memory_nodes.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

/** What a host can observe of a session and the model predicts. */
interface State {
  readonly messages: readonly Message[];
  readonly pinned: boolean;
  readonly unread: boolean;
}

type Op =
  | { readonly kind: "commit"; readonly added: readonly Message[] }
  | { readonly kind: "append"; readonly added: readonly Message[] }
  | { readonly kind: "edit"; readonly at: number; readonly text: string }
  | { readonly kind: "shorten"; readonly by: number }
  | { readonly kind: "pin"; readonly pinned: boolean }
  | { readonly kind: "read" }
  | { readonly kind: "reopen" }
  | { readonly kind: "compact" };

/** A sequence of `length` operations; message texts name the sequence and the step. */
function sequence(seed: number, length: number): Op[] {
  const next = mulberry32(seed);
  const pick = (n: number): number => Math.floor(next() * n);
  const ops: Op[] = [];
  let count = 2; // the baseline's history
  for (let i = 0; i < length; i++) {
    const tag = `s${seed}o${i}`;
    const roll = pick(10);
    if (roll < 3) {
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
    case "shorten":
      return { ...state, messages: state.messages.slice(0, state.messages.length - op.by) };
    case "pin":
      return { ...state, pinned: op.pinned };
    case "read":
      return { ...state, unread: state.messages.length > 0 ? false : state.unread };
    case "reopen":
    case "compact":
      return state;
  }
}

/** A new message object in place of `message`: the same role, other text. */
function edited(message: Message, text: string): Message {
  return message.role === "user" ? user(text) : assistant(text);
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
    case "shorten":
      await session.commit(session.messages.slice(0, expected.messages.length));
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
  }
}

function stateOf(session: SessionManager): State {
  const header = session.getHeader();
  return {
    messages: session.messages,
    pinned: header.pinnedAt !== undefined,
    unread: header.unread === true,
  };
}

function same(a: State, b: State): boolean {
  try {
    assert.deepEqual(a, b);
    return true;
  } catch {
    return false;
  }
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
  const page = await session.readHistory();
  assert.deepEqual(page.messages, state.messages.slice(page.start), `${label}: page`);
  assert.equal(page.total, state.messages.length, `${label}: page total`);
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
    for (let seed = 1; seed <= 40; seed++) {
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
    assert.equal(checked, 40 * 3 * crashes.length);
    // Every kind of operation ran, and most crash points fell inside one.
    assert.equal(kinds.size, 8, [...kinds].join());
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
      op.kind === "commit" || op.kind === "append" || op.kind === "edit" || op.kind === "shorten"
    ) {
      assert.equal(session.hasPendingSave, true, `a failed ${op.kind} is pending`);
      await session.flush();
      state = target;
      assert.ok(same(stateOf(session), state), `${op.kind}: flushed to another state`);
    } else if (op.kind === "pin" || op.kind === "read") {
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
  for (let seed = 101; seed <= 140; seed++) {
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
