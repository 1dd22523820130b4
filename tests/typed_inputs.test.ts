// Inputs a caller gives the library, or records it reads, that JSON, Date or String() cannot
// handle as they are: each is refused with a typed error naming the argument, or the file and
// the field, never a raw TypeError or RangeError (and never thrown synchronously from a method
// that returns a promise). A layout record nested too deep to be written again is refused when
// it is read, before anything is written.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { InvalidArgumentError, SessionStore } from "../mod.ts";
import {
  createRootSession,
  type JsonValue,
  LayoutError,
  LayoutOptionError,
  LayoutRecordError,
  MAX_RECORD_NESTING,
  processNextChildRequest,
  pruneRaw,
  publishChildRequest,
  readChildrenLedger,
  readSessionState,
  updateSessionState,
} from "../layout.ts";
import { childRequest, CONTRACTS, deterministic, newRepo, newRoot } from "./layout_fixtures.ts";

/** An array nested `levels` deep. */
function nested(levels: number): unknown[] {
  let value: unknown[] = [];
  for (let i = 1; i < levels; i++) value = [value];
  return value;
}

async function openSession() {
  const fs = new MemoryFs();
  await fs.mkdir("/w", { recursive: true });
  const store = new SessionStore({ fs, agentDir: "/h/.loop" });
  const session = await store.create("/w");
  await session.commit([{ role: "user", content: "hi", timestamp: 1 }]);
  return { fs, store, session };
}

/** Calls `call` and checks it returned a promise that rejects with `check`. */
async function rejectsAsync(call: () => unknown, check: (error: unknown) => boolean) {
  let result: unknown;
  assert.doesNotThrow(() => (result = call()), "thrown synchronously");
  assert.ok(result instanceof Promise);
  await assert.rejects(result, check);
}

test("arguments String() or JSON cannot render are refused as InvalidArgumentError", async () => {
  const { store, session } = await openSession();
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  const odd: unknown[] = [Object.create(null), nested(100_000), 10n, cyclic];
  const typed = (error: unknown) => error instanceof InvalidArgumentError;
  for (const value of odd) {
    await rejectsAsync(() => session.setPinned(value as boolean), typed);
    await rejectsAsync(() => session.markRead(value as number), typed);
    await rejectsAsync(() => session.setPermissionPreset(value as "read-only"), typed);
    await rejectsAsync(() => session.readHistory(value as number), typed);
    await rejectsAsync(
      () => store.listDetailed("/w", undefined, { concurrency: value as number }),
      typed,
    );
  }
  await session.close();
});

test("a store clock that reads no time a Date can hold is an InvalidArgumentError naming now", async () => {
  for (const reading of [NaN, Infinity, 9e15, "1"]) {
    const fs = new MemoryFs();
    await fs.mkdir("/w");
    const store = new SessionStore({ fs, agentDir: "/h/.loop", now: () => reading as number });
    await assert.rejects(store.create("/w"), (error: unknown) => {
      assert.ok(error instanceof InvalidArgumentError, String(error));
      assert.equal(error.argument, "now");
      return true;
    });
  }
});

test("a session's saves and header writes reject (never throw) when the clock reads no time", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/w");
  let broken = false;
  const store = new SessionStore({ fs, agentDir: "/h/.loop", now: () => (broken ? NaN : 1) });
  const session = await store.create("/w");
  await session.commit([{ role: "user", content: "hi", timestamp: 1 }]);
  broken = true;
  const typed = (error: unknown) =>
    error instanceof InvalidArgumentError && error.argument === "now";
  const history = [{ role: "user" as const, content: "hi", timestamp: 1 }, {
    role: "user" as const,
    content: "more",
    timestamp: 2,
  }];
  await rejectsAsync(() => session.commit(history), typed);
  await rejectsAsync(() => session.append([history[1]!]), typed);
  await rejectsAsync(() => session.setPinned(true), typed);
  await rejectsAsync(() => session.setModel({ provider: "p", id: "m" }), typed);
  await rejectsAsync(() => session.setPermissionPreset("read-only"), typed);
  // Nothing was written, and the session goes on once the clock does.
  broken = false;
  await session.commit(history);
  assert.equal(session.messages.length, 2);
  await session.close();
});

test("layout options: a clock without a valid date and a uuid that is no string are typed", async () => {
  const fs = await newRepo();
  const options = { repoRoot: "/repo", goal: "g", ...CONTRACTS };
  await assert.rejects(
    createRootSession(fs, { ...options, ...deterministic(), now: () => new Date(NaN) }),
    (error: unknown) => error instanceof LayoutOptionError && error.option === "now",
  );
  await assert.rejects(
    createRootSession(fs, { ...options, uuid: () => 5 as unknown as string }),
    (error: unknown) =>
      error instanceof LayoutError && /without 32 hex digits: 5/.test(error.message),
  );
  for (const reading of [Date.now(), undefined, new Date(NaN)]) {
    await assert.rejects(
      pruneRaw(fs, "/repo/.loopy_loop", { olderThanDays: 1, now: () => reading as Date }),
      (error: unknown) => error instanceof LayoutOptionError && error.option === "now",
    );
  }
  for (const value of [Object.create(null), nested(100_000), 1n]) {
    await assert.rejects(
      pruneRaw(fs, "/repo/.loopy_loop", { olderThanDays: value as number }),
      (error: unknown) => error instanceof LayoutOptionError && error.option === "olderThanDays",
    );
    await assert.rejects(
      pruneRaw(fs, "/repo/.loopy_loop", { sessionId: value as string }),
      (error: unknown) => error instanceof LayoutOptionError && error.option === "sessionId",
    );
  }
});

test("a value a layout writer is given that JSON cannot write is refused at its field", async () => {
  const cases: [unknown, RegExp, string][] = [
    [{ notes: { n: 1n } }, /BigInt/, "notes.n"],
    [
      { x: nested(MAX_RECORD_NESTING + 10) },
      /deeper than/,
      "x" + "[0]".repeat(MAX_RECORD_NESTING - 1),
    ],
  ];
  for (const [workflowContract, message, path] of cases) {
    const fs = await newRepo();
    await assert.rejects(
      createRootSession(fs, {
        repoRoot: "/repo",
        goal: "g",
        ...CONTRACTS,
        workflowContract: workflowContract as typeof CONTRACTS.workflowContract,
        ...deterministic(),
      }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.match(error.message, message);
        assert.equal(error.path, path);
        assert.match(error.file, /workflow_contract\.json$/);
        return true;
      },
    );
  }
});

test("what JSON writes is judged: toJSON applied, a deep one refused, a shallow one written", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const before = await fs.readFile(root.paths.stateJson);
  // An update whose value writes deeper than the limit through toJSON: refused, nothing written
  // (the state stays readable and updatable).
  const deep = { toJSON: () => nested(MAX_RECORD_NESTING + 5) };
  await assert.rejects(
    updateSessionState(fs, root.dir, (state) => {
      state.engine_note = deep;
    }, { updatedAt: "2026-04-19T15:00:00Z" }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.path, "engine_note" + "[0]".repeat(MAX_RECORD_NESTING - 1));
      return true;
    },
  );
  assert.deepEqual(await fs.readFile(root.paths.stateJson), before);
  // Values JSON writes fine through toJSON (a class holding a BigInt, a deep private state) are.
  class Money {
    constructor(readonly cents: bigint) {}
    toJSON(): string {
      return this.cents.toString();
    }
  }
  const summary = { inner: nested(MAX_RECORD_NESTING + 5), toJSON: () => "summary" };
  const state = await updateSessionState(fs, root.dir, (state) => {
    state.cost = { total: new Money(1234n) };
    state.notes = summary;
  }, { updatedAt: "2026-04-19T15:00:00Z" });
  assert.ok(state);
  const written = JSON.parse(new TextDecoder().decode(await fs.readFile(root.paths.stateJson)));
  assert.deepEqual([written.cost, written.notes], [{ total: "1234" }, "summary"]);
});

test("a workflow contract too deep for the state.json that embeds it is refused before publishing", async () => {
  const fs = await newRepo();
  // One level below the limit in workflow_contract.json, at it one level down in state.json.
  await assert.rejects(
    createRootSession(fs, {
      repoRoot: "/repo",
      goal: "deep contract",
      ...CONTRACTS,
      workflowContract: {
        ...CONTRACTS.workflowContract,
        x: nested(MAX_RECORD_NESTING - 1) as JsonValue,
      },
      ...deterministic(),
    }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.match(error.file, /state\.json$/);
      return true;
    },
  );
  assert.deepEqual(await fs.readDir("/repo/.loopy_loop/sessions"), []);
});

test("state.json or children.json nested too deep to be written again is refused as read", async () => {
  for (const which of ["state", "children"] as const) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    const file = which === "state" ? root.paths.stateJson : root.paths.childrenJson;
    const record = JSON.parse(new TextDecoder().decode(await fs.readFile(file)));
    record.engine_notes = nested(MAX_RECORD_NESTING);
    await fs.writeFile(file, new TextEncoder().encode(JSON.stringify(record)));
    await publishChildRequest(fs, root.paths, childRequest("phase-1"));
    const before = fs.snapshotTree("/repo");
    const refused = (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, file);
      assert.equal(error.path, "engine_notes" + "[0]".repeat(MAX_RECORD_NESTING - 1));
      return true;
    };
    const read = which === "state"
      ? readSessionState(fs, root.dir)
      : readChildrenLedger(fs, root.paths, root.sessionId);
    await assert.rejects(read, refused);
    await assert.rejects(
      processNextChildRequest(fs, {
        repoRoot: "/repo",
        parentSessionId: root.sessionId,
        ...deterministic(),
      }),
      refused,
    );
    if (which === "state") {
      await assert.rejects(
        updateSessionState(fs, root.dir, () => true, { updatedAt: "2026-04-19T15:00:00Z" }),
        refused,
      );
    }
    assert.deepEqual(fs.snapshotTree("/repo"), before, "nothing was written");
    // One level less is read, and written again.
    record.engine_notes = nested(MAX_RECORD_NESTING - 1);
    await fs.writeFile(file, new TextEncoder().encode(JSON.stringify(record)));
    const again = which === "state"
      ? await readSessionState(fs, root.dir)
      : await readChildrenLedger(fs, root.paths, root.sessionId);
    assert.ok(again);
  }
});
