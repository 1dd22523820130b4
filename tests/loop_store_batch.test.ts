// Saves queued behind a call in flight are written together: one log write, one meta.json publish.
import { test } from "node:test";
import assert from "node:assert/strict";
import { isDeepStrictEqual } from "node:util";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  PendingSaveError,
  SessionBusyError,
  SessionError,
  SessionFormatError,
} from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { assistant, conversation, savedOn, toolResult, user } from "./_fixtures.ts";
import { gate, hookedFs } from "./_hooks.ts";
import { crashAtEveryOperation } from "./_crash.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

/** A store whose meta.json publishes are counted and can be held at a gate or failed. */
interface Rig {
  readonly memory: MemoryFs;
  readonly store: SessionStore;
  /** The meta.json renames so far. */
  publishes(): number;
  /**
   * Holds the next meta.json rename until `release` is called; `reached` resolves once it is
   * held (the save is then in flight).
   */
  holdNextPublish(): { readonly release: () => void; readonly reached: Promise<void> };
  /** Fails the next meta.json rename that starts after this call with EIO. */
  failNextPublish(): void;
}

async function rig(memory = new MemoryFs()): Promise<Rig> {
  await memory.mkdir(CWD, { recursive: true });
  let publishes = 0;
  let held: { wait: Promise<void>; reached: () => void } | undefined;
  let fail = false;
  const fs: FileSystem = hookedFs(memory, {
    async before(method, args) {
      if (method !== "rename" || !String(args[1]).endsWith("/meta.json")) return;
      const hold = held;
      const failing = fail;
      held = undefined;
      fail = false;
      if (hold !== undefined) {
        hold.reached();
        await hold.wait;
      }
      if (failing) throw new FsIoError("EIO", "rename", String(args[1]), "injected EIO");
      publishes++;
    },
  });
  return {
    memory,
    store: new SessionStore({ fs, agentDir: AGENT, process: null }),
    publishes: () => publishes,
    holdNextPublish() {
      const { wait, open } = gate();
      const reached = gate();
      held = { wait, reached: reached.open };
      return { release: open, reached: reached.wait };
    },
    failNextPublish() {
      fail = true;
    },
  };
}

/** Calls the saves of one burst: `first` at once, the others while it is in flight. */
async function burst(
  session: SessionManager,
  rig: Rig,
  inFlight: boolean,
): Promise<{ expected: Message[]; order: string[]; published: number }> {
  const history = session.messages;
  const first = [...history, user("one"), assistant("one answer")];
  const [two, twoAnswer, three, threeAnswer] = [
    user("two"),
    assistant("two answer"),
    user("3"),
    assistant("3 answer"),
  ];
  const published = rig.publishes();
  const { release, reached } = rig.holdNextPublish();
  const order: string[] = [];
  const track = (label: string, p: Promise<void>) => p.then(() => order.push(label));
  const saves = [track("first", session.commit(first))];
  if (inFlight) await reached;
  saves.push(
    track("append user", session.append([two])),
    track("append answer", session.append([twoAnswer])),
    track("commit", session.commit([...first, two, twoAnswer, three])),
    track("append last", session.append([threeAnswer])),
  );
  release();
  await Promise.all(saves);
  return {
    expected: [...first, two, twoAnswer, three, threeAnswer],
    order,
    published: rig.publishes() - published,
  };
}

test("saves called while one is in flight are written together: one meta.json publish for all", async () => {
  const setup = await rig();
  const session = await setup.store.create(CWD);
  await session.commit(conversation(2));
  const start = session.getStorageInfo()?.start;
  const { expected, order, published } = await burst(session, setup, true);
  assert.equal(published, 2, "the first save alone, then the four queued at once");
  assert.deepEqual(order, ["first", "append user", "append answer", "commit", "append last"]);
  assert.deepEqual(session.messages, expected);
  assert.deepEqual(await savedOn(setup.store, session), expected);
  assert.equal(session.getStorageInfo()?.start, start, "appended, not a new generation");
  assert.equal(session.getStorageInfo()?.messageCount, expected.length);
  assert.equal(session.unread, true);
});

test("saves called together, before the first one runs, are written with one meta.json publish", async () => {
  const setup = await rig();
  const session = await setup.store.create(CWD);
  await session.commit(conversation(2));
  const { expected, order, published } = await burst(session, setup, false);
  assert.equal(published, 1);
  assert.deepEqual(order, ["first", "append user", "append answer", "commit", "append last"]);
  assert.deepEqual(await savedOn(setup.store, session), expected);
});

test("a queued batch keeps the metadata each save gave: a later array wins, an omitted one is kept (each of the four arrays)", async () => {
  const { store, publishes, holdNextPublish } = await rig();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const contexts = [{ userTurn: 0, content: "ctx", timestamp: 1 }];
  const later = [{ userTurn: 1, content: "later ctx", timestamp: 2 }];
  const checkpoints = [{ messageCount: 1, timestamp: 1, sections: { preamble: "hi" } }];
  const timings = [{ userMessageIndex: history.length, startedAt: 1, finishedAt: 2 }];
  // The summary of the history up to `a`, keeping `a` on.
  const compactions = [{
    id: "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f",
    firstKeptMessageIndex: history.length,
    historyMessageCount: history.length + 1,
    summary: "the story so far",
    timestamp: 5,
    provider: "synthetic",
    model: "model-1",
    usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2 },
  }];
  const published = publishes();
  const { release } = holdNextPublish();
  const [a, b, c] = [user("a"), assistant("b"), user("c")];
  const saves = [
    session.commit([...history, a]),
    session.commit([...history, a], contexts as never, timings, {
      compactions,
      systemPromptCheckpoints: checkpoints as never,
    }),
    session.append([b]),
    session.append([c], later as never),
  ];
  release();
  await Promise.all(saves);
  assert.equal(publishes() - published, 1);
  assert.deepEqual(session.getRuntimeContexts(), later);
  assert.deepEqual(session.getSystemPromptCheckpoints(), checkpoints);
  assert.deepEqual(session.getPromptTimings(), timings);
  assert.deepEqual(session.getCompactions(), compactions);
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.getRuntimeContexts(), later);
  assert.deepEqual(reopened.getSystemPromptCheckpoints(), checkpoints);
  assert.deepEqual(reopened.getPromptTimings(), timings);
  assert.deepEqual(reopened.getCompactions(), compactions);
  assert.deepEqual(reopened.messages, [...history, a, b, c]);
  await reopened.close();
  // An empty array given later removes the field, as it does for a save called alone.
  const { release: release2 } = holdNextPublish();
  const more = [
    session.append([assistant("d")]),
    session.append([user("e")], []),
    session.append([assistant("f")]),
  ];
  release2();
  await Promise.all(more);
  assert.deepEqual(session.getRuntimeContexts(), []);
  assert.deepEqual(session.getSystemPromptCheckpoints(), checkpoints);
  assert.deepEqual(session.getPromptTimings(), timings);
  assert.deepEqual(session.getCompactions(), compactions);
});

test("a batch whose first save changes only metadata writes the messages the saves after it add", async () => {
  for (const then of ["append", "commit"] as const) {
    const { store, publishes, holdNextPublish } = await rig();
    const session = await store.create(CWD);
    const history = conversation(2);
    await session.commit(history);
    const contexts = [{ userTurn: 0, content: "ctx", timestamp: 1 }];
    const [a, b] = [user("a"), assistant("b")];
    const published = publishes();
    const { release, reached } = holdNextPublish();
    // A pin in flight; behind it, a save of the same history with new contexts (no message
    // bytes), then a save that adds two messages.
    const pinned = session.setPinned(true);
    await reached;
    const saves = [
      session.commit(history, contexts),
      then === "append" ? session.append([a, b]) : session.commit([...history, a, b]),
    ];
    release();
    await Promise.all([pinned, ...saves]);
    assert.equal(publishes() - published, 2, then); // the pin, then the batch
    const reopened = await store.open(session.getSessionPath(), { readOnly: true });
    assert.deepEqual(reopened.messages, [...history, a, b], then);
    assert.deepEqual(reopened.getRuntimeContexts(), contexts, then);
    await reopened.close();
    assert.deepEqual(await savedOn(store, session), [...history, a, b], then);
    await session.close();
  }
});

test("a queued save that fails validation rejects alone; the batch is written without it", async () => {
  const { store, publishes, holdNextPublish } = await rig();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const published = publishes();
  const { release } = holdNextPublish();
  const [q, half, answer, next] = [user("q"), assistant("half"), assistant("answer"), user("next")];
  const settled: string[] = [];
  const track = (label: string, p: Promise<void>) =>
    p.then(() => settled.push(label), (error) => {
      settled.push(`${label} rejected`);
      throw error;
    });
  const first = track("first", session.append([q]));
  const good = track("good", session.append([half, answer]));
  // A tool result without its call: refused, after the first of its messages was looked at.
  const bad = track("bad", session.append([user("orphan"), toolResult("nowhere", "read")]));
  const after = track("after", session.append([next]));
  release();
  await first;
  await good;
  await assert.rejects(bad, SessionFormatError);
  await after;
  assert.deepEqual(settled, ["first", "good", "bad rejected", "after"], "in call order");
  const expected = [...history, q, half, answer, next];
  assert.equal(publishes() - published, 1);
  assert.deepEqual(session.messages, expected);
  assert.deepEqual(await savedOn(store, session), expected);
  assert.equal(session.hasPendingSave, false);
});

test("a save that is not an array rejects in its turn, naming the log, and the others are written", async () => {
  const { store } = await rig();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const settled: string[] = [];
  const track = (label: string, p: Promise<void>) =>
    p.then(() => settled.push(label), (error) => {
      settled.push(`${label} rejected`);
      throw error;
    });
  const [q, a] = [user("q"), assistant("a")];
  const first = track("first", session.commit([...history, q]));
  const notArray = "not an array" as unknown as Message[];
  const bad = track("commit", session.commit(notArray));
  const worse = track("append", session.append(notArray));
  const last = track("last", session.append([a]));
  await first;
  for (const rejected of [bad, worse]) {
    await assert.rejects(rejected, (error: unknown) => {
      assert.ok(error instanceof SessionFormatError);
      assert.equal(error.file, `${session.getSessionPath()}/messages.jsonl`);
      assert.equal(error.path, "messages");
      return true;
    });
  }
  await last;
  assert.deepEqual(settled, ["first", "commit rejected", "append rejected", "last"]);
  assert.deepEqual(await savedOn(store, session), [...history, q, a]);
});

test("saves rejected because an earlier failed write could not be settled stay pending for flush()", async () => {
  const memory = new MemoryFs();
  const { store } = await rig(memory);
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  // The disk fails from a pin's write on: the pin rejects, and so does the undo of its attempt.
  memory.failAt(memory.operationCount + 1, { error: "EIO", persistent: true });
  await assert.rejects(session.setPinned(true), FsIoError);
  // The next saves find that attempt unsettled, and settling it fails too: nothing is written.
  const more = [...history, user("q2"), assistant("important output")];
  const saves = [
    session.commit(more.slice(0, -1)),
    session.append([more.at(-1) as Message]),
    session.append("bad" as unknown as Message[]),
  ];
  await assert.rejects(saves[0] as Promise<void>, FsIoError);
  await assert.rejects(saves[1] as Promise<void>, FsIoError);
  await assert.rejects(saves[2] as Promise<void>, SessionFormatError);
  assert.equal(session.hasPendingSave, true);
  // A later save is refused while one is pending (nothing is written before it), and the
  // pending one is left as it is.
  await assert.rejects(session.append([user("not written")]), PendingSaveError);
  // Once the disk works again, flush() writes exactly what was pending.
  memory.clearFaults();
  await session.flush();
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(session.messages, more);
  assert.deepEqual(await savedOn(store, session), more);
  const next = user("next");
  await session.append([next]);
  assert.deepEqual(await savedOn(store, session), [...more, next]);
  // The failed pin never took effect.
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.getHeader().pinnedAt, undefined);
  await reopened.close();
});

test("a replacement in a batch writes one new generation holding what was appended after it", async () => {
  const { store, publishes, holdNextPublish } = await rig();
  const session = await store.create(CWD);
  const history = conversation(3);
  await session.commit(history);
  const start = session.getStorageInfo()?.start as number;
  const published = publishes();
  const { release } = holdNextPublish();
  const edited = [user("rewritten"), ...history.slice(1)];
  const [y, yAnswer] = [user("y"), assistant("y answer")];
  const saves = [
    session.append([user("x")]),
    session.commit(edited),
    session.append([y, yAnswer]),
  ];
  release();
  await Promise.all(saves);
  const expected = [...edited, y, yAnswer];
  assert.equal(publishes() - published, 1);
  assert.deepEqual(session.messages, expected);
  assert.deepEqual(await savedOn(store, session), expected);
  assert.ok((session.getStorageInfo()?.start as number) > start, "a new generation");
  // A batch that only shortens the history is a new generation too.
  const { release: release2 } = holdNextPublish();
  const shorter = [
    session.append([user("z")]),
    session.commit(expected.slice(0, 2)),
  ];
  release2();
  await Promise.all(shorter);
  assert.deepEqual(await savedOn(store, session), expected.slice(0, 2));
  const page = await session.readHistory();
  assert.deepEqual(page.messages, expected.slice(0, 2));
});

test("a failed batch rejects every save in it with the write's error; flush() saves the last state", async () => {
  const { store, publishes, holdNextPublish, failNextPublish } = await rig();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const { release, reached } = holdNextPublish();
  const [q, a, r] = [user("q"), assistant("a"), user("r")];
  const first = session.append([q]);
  await reached; // the first is in flight: the others are queued behind it
  failNextPublish();
  const second = session.append([a]);
  const third = session.commit([...history, q, a, r]);
  const errors: unknown[] = [];
  const caught = [second, third].map((p) => p.catch((error) => errors.push(error)));
  release();
  await first;
  await Promise.all(caught);
  assert.equal(errors.length, 2);
  assert.ok(errors[0] instanceof FsIoError);
  assert.equal(errors[0], errors[1], "one write, one error");
  const last = [...history, q, a, r];
  assert.equal(session.hasPendingSave, true);
  assert.deepEqual(session.messages, last);
  assert.deepEqual(await savedOn(store, session), [...history, q]);
  await assert.rejects(session.append([assistant("s")]), PendingSaveError);
  const published = publishes();
  await session.flush();
  assert.equal(publishes() - published, 1);
  assert.deepEqual(await savedOn(store, session), last);
});

test("saves queued behind a failed save reject with PendingSaveError and write nothing", async () => {
  const { store, publishes, holdNextPublish, failNextPublish } = await rig();
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const { release, reached } = holdNextPublish();
  failNextPublish();
  const q = user("q");
  const first = session.append([q]);
  await reached;
  const queued = [session.append([assistant("a")]), session.commit([user("other")])];
  release();
  await assert.rejects(first, FsIoError);
  for (const save of queued) await assert.rejects(save, PendingSaveError);
  const published = publishes();
  await session.flush();
  assert.equal(publishes() - published, 1);
  assert.deepEqual(await savedOn(store, session), [...history, q]);
});

test("any other call splits the queued saves: every call runs in the order it was made", async () => {
  const { store, publishes, holdNextPublish } = await rig();
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  const published = publishes();
  const { release } = holdNextPublish();
  const order: string[] = [];
  const h1 = [...history, user("1")];
  const h2 = [...h1, assistant("2")];
  const three = user("3");
  const h3 = [...h2, three];
  const four = assistant("4");
  const calls = [
    session.commit(h1).then(() => order.push("commit 1")),
    session.commit(h2).then(() => order.push("commit 2")),
    session.setPinned(true).then(() => order.push("pin")),
    session.commit(h3).then(() => order.push("commit 3")),
    session.readHistory().then((page) => {
      order.push("read");
      assert.equal(page.messages.at(-1)?.content, three.content, "it sees the save before it");
    }),
    session.append([four]).then(() => order.push("append 4")),
  ];
  release();
  await Promise.all(calls);
  assert.deepEqual(order, ["commit 1", "commit 2", "pin", "commit 3", "read", "append 4"]);
  // The first two together; every other save alone, as another call came before it.
  assert.equal(publishes() - published, 4);
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.messages, [...h3, four]);
  assert.equal(typeof reopened.getHeader().pinnedAt, "string");
  await reopened.close();
});

test("saves called together on a new session create its files with one write", async () => {
  const { store, publishes } = await rig();
  const session = await store.create(CWD);
  const [q, a, q2] = [user("q"), assistant("a"), user("q2")];
  const saves = [
    session.commit([]), // a draft save: nothing to write yet
    session.append([q]), // the first to create the session's files
    session.append([a]),
    session.append([q2]),
  ];
  await Promise.all(saves);
  assert.equal(publishes(), 1);
  assert.deepEqual(await savedOn(store, session), [q, a, q2]);
  assert.equal(session.getStorageInfo()?.start, 0);
  assert.equal(session.getStorageInfo()?.messageCount, 3);
  assert.equal(session.unread, true);
});

test("a batch on a new session leaves the files and state that one-by-one saves leave", async () => {
  // Each plan is run twice on new sessions: every save awaited, then all called together.
  const [q, a, tail, again] = [user("q"), assistant("a"), assistant("no round"), user("again")];
  type Save = (s: SessionManager) => Promise<void>;
  const plans: Save[][] = [
    [(s) => s.commit([q]), (s) => s.commit([])], // created, then emptied: saved and empty
    [(s) => s.commit([tail]), (s) => s.append([q]), (s) => s.commit([tail])], // no round left
    [(s) => s.commit([tail]), (s) => s.commit([])], // never a user message: nothing written
    [(s) => s.append([q, a]), (s) => s.commit([q]), (s) => s.append([again])],
  ];
  for (const [n, plan] of plans.entries()) {
    const outcomes = [];
    for (const together of [false, true]) {
      const { store, publishes } = await rig();
      const session = await store.create(CWD);
      if (together) await Promise.all(plan.map((save) => save(session)));
      else for (const save of plan) await save(session);
      const listed = await store.list(CWD);
      outcomes.push({
        messages: session.messages,
        unread: session.unread,
        listed: listed.map((info) => info.messageCount),
        saved: listed.length === 0 ? undefined : await savedOn(store, session),
        wrote: publishes() > 0,
      });
      await session.close();
    }
    assert.deepEqual(outcomes[1], outcomes[0], `plan ${n}`);
  }
});

test("a failed first batch on a new session, retried by flush(), leaves what one-by-one saves leave", async () => {
  // The first save of each plan creates the files; a later one leaves the history without a user
  // round. One by one, the session stays saved; together, the batch's one write fails, and
  // flush() must write its last state although it holds no user round.
  const [q, a, tail] = [user("q"), assistant("a"), assistant("no round")];
  type Save = (s: SessionManager) => Promise<void>;
  const plans: Save[][] = [
    [(s) => s.append([q]), (s) => s.commit([]), (s) => s.append([a])],
    [(s) => s.commit([q]), (s) => s.commit([tail])],
    [(s) => s.commit([q, a]), (s) => s.commit([])],
  ];
  for (const [n, plan] of plans.entries()) {
    const outcomes = [];
    for (const together of [false, true]) {
      const setup = await rig();
      const session = await setup.store.create(CWD);
      if (together) {
        setup.failNextPublish();
        const settled = await Promise.allSettled(plan.map((save) => save(session)));
        assert.ok(settled.every((s) => s.status === "rejected"), `plan ${n}: one write, failed`);
        assert.equal(session.hasPendingSave, true);
        await session.flush();
      } else for (const save of plan) await save(session);
      assert.equal(session.hasPendingSave, false);
      const listed = await setup.store.listDetailed(CWD);
      assert.deepEqual(listed.failures, []);
      outcomes.push({
        messages: session.messages,
        listed: listed.sessions.map((info) => info.messageCount),
        saved: listed.sessions.length === 0 ? undefined : await savedOn(setup.store, session),
      });
      await session.close();
    }
    assert.deepEqual(outcomes[1], outcomes[0], `plan ${n}`);
    assert.equal(outcomes[0]?.listed.length, 1, `plan ${n}: saved one by one`);
  }
});

test("a crash at every operation of the first batch of a new session shows nothing or all of it", async () => {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  memory.syncAll();
  const [q, a, q2, a2] = [user("q"), assistant("a"), user("q2"), assistant("a2")];
  const after = [q, a, q2, a2];
  let dir = "";
  await crashAtEveryOperation({
    baseline: memory,
    run: async (fs) => {
      const crashed = await rig(fs);
      const manager = await crashed.store.create(CWD);
      dir = manager.getSessionPath();
      await Promise.all([
        manager.commit([q]),
        manager.append([a]),
        manager.commit([q, a, q2]),
        manager.append([a2]),
      ]);
      assert.equal(crashed.publishes(), 1);
    },
    check: async (recovered, { resolved, n, seed }) => {
      const label = `crash after op ${n}, seed ${seed}`;
      const store = new SessionStore({ fs: recovered, agentDir: AGENT, process: null });
      const listed = await store.listDetailed(CWD);
      assert.deepEqual(listed.failures, [], label);
      if (listed.sessions.length === 0) {
        assert.ok(!resolved, `${label}: a resolved batch is listed`);
        return;
      }
      assert.equal(listed.sessions.length, 1, label);
      const reader = await store.open(dir, { readOnly: true });
      const seen = reader.messages;
      await reader.close();
      assert.deepEqual(seen, after, label);
    },
  });
});

test("a crash at every operation of a batch shows the state before it or after it, never one inside", async () => {
  const memory = new MemoryFs();
  const { store } = await rig(memory);
  const session = await store.create(CWD);
  const before = conversation(2);
  await session.commit(before);
  const dir = session.getSessionPath();
  await session.close();
  memory.syncAll();
  const first = [...before, user("first")];
  const insideAnswer = assistant("inside");
  const inside = [...first, insideAnswer];
  const after = [...inside, user("after"), assistant("after answer")];
  const states = [before, after];
  let batched = 0;
  await crashAtEveryOperation({
    baseline: memory,
    run: async (fs) => {
      const crashed = await rig(fs);
      const manager = await crashed.store.open(dir);
      await Promise.all([
        manager.commit(first),
        manager.append([insideAnswer]),
        manager.commit(after),
      ]);
      batched = crashed.publishes();
    },
    check: async (recovered, { resolved, n, seed }) => {
      const reader = await new SessionStore({ fs: recovered, agentDir: AGENT, process: null })
        .open(dir, { readOnly: true });
      const seen = reader.messages;
      await reader.close();
      const label = `crash after op ${n}, seed ${seed}`;
      if (resolved) assert.deepEqual(seen, after, label);
      assert.ok(states.some((state) => isDeepStrictEqual(state, seen)), label);
      assert.ok(!isDeepStrictEqual(seen, first) && !isDeepStrictEqual(seen, inside), label);
    },
  });
  assert.equal(batched, 1, "the three saves, called together, are written at once");
});

test("a save called once the one before has settled starts at once: the session is idle again", async () => {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  const calls: string[] = [];
  const fs: FileSystem = hookedFs(memory, {
    before(method, args) {
      calls.push(`${method} ${String(args[0])}`);
    },
  });
  const store = new SessionStore({ fs, agentDir: AGENT, process: null });
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  // Each save, called right after the one before resolved or rejected, creates the temp file of
  // its meta.json before it returns: it is not queued behind the previous save's task.
  const startsAtOnce = (save: () => Promise<void>): Promise<void> => {
    calls.length = 0;
    const saving = save();
    assert.ok(
      calls.some((call) => call.startsWith("open ") && call.includes("meta.json")),
      `started at once: ${calls.join(", ")}`,
    );
    return saving;
  };
  history.push(user("q1"));
  await startsAtOnce(() => session.commit(history));
  await startsAtOnce(() => session.append([assistant("a1")]));
  await Promise.all([session.append([user("q2")]), session.append([assistant("a2")])]);
  history.push(assistant("a1"), user("q2"), assistant("a2"), user("q3"));
  await startsAtOnce(() => session.commit(history));
  const orphan = startsAtOnce(() => session.append([toolResult("nowhere", "read")]));
  await assert.rejects(orphan, SessionFormatError);
  const last = assistant("a3");
  await startsAtOnce(() => session.append([last]));
  assert.deepEqual(await savedOn(store, session), [...history, last]);
});

test("on a new session, saves called after the one that creates its files append to it", async () => {
  const { store, publishes } = await rig();
  const session = await store.create(CWD);
  const q = user("question");
  const a = assistant("partial");
  const saves = [session.commit([q, a])]; // serialized now, as the caller gave it
  // Finished in place after its save was called: an append does not look at earlier messages,
  // so neither does an append that joins the same batch.
  (a.content as { type: "text"; text: string }[])[0] = { type: "text", text: "FINISHED" };
  const q2 = user("next");
  saves.push(session.append([q2]));
  await Promise.all(saves);
  assert.equal(publishes(), 1);
  const reader = await store.open(session.getSessionPath(), { readOnly: true });
  const saved = reader.messages;
  await reader.close();
  assert.equal(saved.length, 3);
  assert.deepEqual(saved[1]?.content, [{ type: "text", text: "partial" }]);
  assert.deepEqual(saved[2], q2);
});

test("a batch takes the time of its latest save, also when the clock stepped back between its saves", async () => {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  let held: { wait: Promise<void>; reached: () => void } | undefined;
  const fs: FileSystem = hookedFs(memory, {
    async before(method, args) {
      if (method !== "rename" || !String(args[1]).endsWith("/meta.json")) return;
      const hold = held;
      held = undefined;
      if (hold !== undefined) {
        hold.reached();
        await hold.wait;
      }
    },
  });
  let now = Date.parse("2026-01-01T00:00:00.000Z");
  const store = new SessionStore({ fs, agentDir: AGENT, process: null, now: () => now });
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  const { wait, open } = gate();
  const reached = gate();
  held = { wait, reached: reached.open };
  now = Date.parse("2026-01-01T00:01:00.000Z");
  const first = session.append([user("q")]);
  await reached.wait; // in flight: the next three are queued into one batch
  now = Date.parse("2026-01-01T00:02:00.000Z");
  const second = session.append([assistant("a")]);
  now = Date.parse("2026-01-01T00:04:00.000Z"); // the latest: neither the batch's first nor last
  const third = session.append([user("r")]);
  now = Date.parse("2026-01-01T00:03:00.000Z"); // the clock stepped back
  const fourth = session.append([assistant("b")]);
  open();
  await Promise.all([first, second, third, fourth]);
  assert.equal(session.getHeader().updatedAt, "2026-01-01T00:04:00.000Z");
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.equal(reopened.getHeader().updatedAt, "2026-01-01T00:04:00.000Z");
  await reopened.close();
});

test("saves refused because another writer changed meta.json are not kept pending", async () => {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  let failRename = false;
  let failLstat = false;
  const fs: FileSystem = hookedFs(memory, {
    before(method, args) {
      if (failRename && method === "rename" && String(args[1]).endsWith("/meta.json")) {
        failRename = false;
        failLstat = true;
        throw new FsIoError("EIO", "rename", String(args[1]), "injected EIO");
      }
      if (failLstat && method === "lstat" && String(args[0]).endsWith("/meta.json")) {
        failLstat = false;
        throw new FsIoError("EIO", "lstat", String(args[0]), "injected EIO");
      }
    },
  });
  const store = new SessionStore({ fs, agentDir: AGENT, process: null });
  const session = await store.create(CWD);
  const history = conversation(1);
  await session.commit(history);
  // A pin whose publication fails, and whose undo cannot read meta.json back: unsettled.
  failRename = true;
  await assert.rejects(session.setPinned(true), FsIoError);
  assert.equal(failLstat, false, "the undo looked at meta.json and failed");
  // Another writer replaces meta.json meanwhile.
  const metaFile = session.getSessionFile();
  const meta = JSON.parse(new TextDecoder().decode(await memory.readFile(metaFile)));
  meta.header.title = { text: "Another writer", source: "user", messageIndices: [] };
  await memory.writeFile(metaFile, new TextEncoder().encode(JSON.stringify(meta) + "\n"));
  const saves = [
    session.commit([...history, user("q2")]),
    session.append([assistant("a2")]),
  ];
  for (const save of saves) await assert.rejects(save, SessionBusyError);
  // Another writer's change is final: nothing is kept for flush() to write over it.
  assert.equal(session.hasPendingSave, false);
  assert.deepEqual(session.messages, history);
  await assert.rejects(session.flush(), SessionBusyError);
  // close() says the failed pin could not be undone, and writes nothing over the other writer.
  await assert.rejects(session.close(), SessionError);
  const after = JSON.parse(new TextDecoder().decode(await memory.readFile(metaFile)));
  assert.deepEqual(after, meta, "meta.json is the other writer's");
});
