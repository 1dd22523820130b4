import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { CorruptSessionError, SessionNotFoundError } from "../src/loop/errors.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { crashAtEveryOperation, failAtEveryOperation } from "./_crash.ts";
import { assistant, conversation, user } from "./_fixtures.ts";
import { runsOf, seedsAfter } from "./_soak.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const NOW = Date.parse("2026-03-01T00:00:00.000Z");

function storeOn(fs: MemoryFs): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT, now: () => NOW });
}

/** A durable baseline holding one session with `history`; returns its directory. */
async function baselineWith(history: Message[]): Promise<{ fs: MemoryFs; dir: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const session = await storeOn(fs).create(CWD);
  if (history.length > 0) await session.commit(history);
  await session.close();
  fs.syncAll();
  return { fs, dir: session.getSessionPath() };
}

/** The history a reopen sees, or undefined when the session does not exist. */
async function reopenHistory(fs: MemoryFs, dir: string): Promise<Message[] | undefined> {
  try {
    const session = await storeOn(fs).open(dir, { readOnly: true });
    return session.messages;
  } catch (error) {
    if (error instanceof SessionNotFoundError) return undefined;
    throw error;
  }
}

/** Saves once more on a recovered state and checks the save is visible. */
async function saveAgain(fs: MemoryFs, dir: string, current: Message[] | undefined): Promise<void> {
  const store = storeOn(fs);
  if (current === undefined) return;
  const session = await store.open(dir);
  const next = [...current, user("after recovery"), assistant("recovered")];
  await session.commit(next);
  await session.close();
  assert.deepEqual(await reopenHistory(fs, dir), next);
}

test("case 1, 2, 4: a crash at every operation of a commit shows the old or the new history", async () => {
  const before = conversation(2);
  const after = [...before, user("new question"), assistant("new answer")];
  const { fs: baseline, dir } = await baselineWith(before);
  const points = await crashAtEveryOperation({
    baseline,
    run: async (fs) => {
      const session = await storeOn(fs).open(dir);
      await session.commit(after);
    },
    check: async (recovered, { resolved, n, seed }) => {
      const seen = await reopenHistory(recovered, dir);
      const label = `crash after op ${n}, seed ${seed}`;
      if (resolved) assert.deepEqual(seen, after, label);
      else assert.ok(isEqual(seen, before) || isEqual(seen, after), label);
      await saveAgain(recovered, dir, seen);
    },
  });
  assert.ok(points > 5);
});

test("case 1, 4: a crash at every operation of the first save leaves no session or the saved one", async () => {
  const history = conversation(1);
  const { fs: baseline } = await baselineWith([]);
  let dir = "";
  await crashAtEveryOperation({
    baseline,
    run: async (fs) => {
      dir = "";
      const session = await storeOn(fs).create(CWD);
      dir = session.getSessionPath();
      await session.commit(history);
    },
    check: async (recovered, { resolved, n, seed }) => {
      if (dir === "") return; // The crash came before the session had an id: nothing was written.
      const seen = await reopenHistory(recovered, dir);
      const label = `crash after op ${n}, seed ${seed}`;
      if (resolved) assert.deepEqual(seen, history, label);
      else assert.ok(seen === undefined || isEqual(seen, history), label);
      await saveAgain(recovered, dir, seen);
    },
  });
});

test("case 1: a crash at every operation of a replacement generation shows the old or the new history", async () => {
  const before = conversation(3);
  const after = [user("rewritten"), ...before.slice(1, 3)];
  const { fs: baseline, dir } = await baselineWith(before);
  await crashAtEveryOperation({
    baseline,
    run: async (fs) => {
      const session = await storeOn(fs).open(dir);
      await session.commit(after);
    },
    check: async (recovered, { resolved, n, seed }) => {
      const seen = await reopenHistory(recovered, dir);
      if (resolved) assert.deepEqual(seen, after);
      else assert.ok(isEqual(seen, before) || isEqual(seen, after), `op ${n} seed ${seed}`);
      await saveAgain(recovered, dir, seen);
    },
  });
});

test("case 11: a second crash during the save that follows a crash keeps invariants 1-2", async () => {
  const before = conversation(1);
  const middle = [...before, user("second")];
  const after = [...middle, assistant("third")];
  const { fs: baseline, dir } = await baselineWith(before);
  // First crash: mid-commit, leaving an uncommitted tail for some seeds.
  const crashed = baseline.clone();
  crashed.crashAfter(6);
  await assert.rejects(storeOn(crashed).open(dir).then((s) => s.commit(middle)));
  for (const seed of seedsAfter([0, 1, 2, 3])) {
    const firstRecovery = crashed.crash({ seed, tailMode: seed % 2 === 0 ? "garbage" : "whole" });
    const seenFirst = await reopenHistory(firstRecovery, dir);
    assert.ok(isEqual(seenFirst, before) || isEqual(seenFirst, middle));
    await crashAtEveryOperation({
      baseline: firstRecovery,
      seeds: [0, 1, 2],
      run: async (fs) => {
        const session = await storeOn(fs).open(dir);
        await session.commit(after);
      },
      check: async (recovered, { resolved }) => {
        const seen = await reopenHistory(recovered, dir);
        if (resolved) assert.deepEqual(seen, after);
        else assert.ok(isEqual(seen, seenFirst) || isEqual(seen, after));
      },
    });
  }
});

for (const error of ["EIO", "ENOSPC"] as const) {
  for (const persistent of [false, true]) {
    test(`case 6: ${error} (${persistent ? "persistent" : "transient"}) at every operation of a commit`, async () => {
      const before = conversation(2);
      const after = [...before, user("q"), assistant("a")];
      const { fs: baseline, dir } = await baselineWith(before);
      let session: SessionManager | undefined;
      await failAtEveryOperation({
        baseline,
        error,
        persistent,
        run: async (fs) => {
          session = undefined;
          session = await storeOn(fs).open(dir);
          await session.commit(after);
        },
        check: async (fs, { resolved, n }) => {
          if (session === undefined) {
            // The open itself failed: nothing was written.
            assert.deepEqual(await reopenHistory(fs, dir), before);
            return;
          }
          const label = `fault at op ${n}`;
          if (resolved) {
            assert.deepEqual(await reopenHistory(fs, dir), after, label);
            return;
          }
          // A failed call leaves the before-state, or the after-state when only the final
          // directory fsync failed (visible, but not acknowledged as durable).
          const seen = await reopenHistory(fs, dir);
          assert.ok(isEqual(seen, before) || isEqual(seen, after), label);
          assert.equal(session.hasPendingSave, true, label);
          if (!persistent) {
            // The meta.json staged beside the log write is removed when either of them fails.
            const left = (await fs.readDir(dir)).map((entry) => entry.name);
            assert.deepEqual(left.filter((name) => name.endsWith(".tmp")), [], label);
          }
          await session.flush();
          assert.deepEqual(await reopenHistory(fs, dir), after, label);
          // And the session still saves after the fault clears.
          const later = [...after, user("later")];
          await session.commit(later);
          assert.deepEqual(await reopenHistory(fs, dir), later, label);
        },
      });
    });
  }
}

test("case 7: an fsync that fails once fails the save; flush() rewrites and syncs the snapshot again", async () => {
  const before = conversation(1);
  const after = [...before, user("q"), assistant("a")];
  const { fs: baseline, dir } = await baselineWith(before);
  const fs = baseline.clone();
  const session = await storeOn(fs).open(dir);
  fs.failAt(fs.operationCount + 1, { ops: ["sync"] });
  await assert.rejects(session.commit(after));
  assert.equal(session.hasPendingSave, true);
  // Nothing was acknowledged: a crash now shows the old history.
  assert.deepEqual(await reopenHistory(fs.crash({ seed: 1, tailMode: "none" }), dir), before);
  await session.flush();
  // The retry synced for real: with every unsynced byte lost, the new history is there.
  assert.deepEqual(
    await reopenHistory(fs.crash({ seed: 2, tailMode: "none", extraJournal: "none" }), dir),
    after,
  );
});

test("a crash at every operation of setPinned, markRead and setTitle keeps the header old or new", async () => {
  const history = conversation(2);
  const { fs: baseline, dir } = await baselineWith(history);
  const operations: {
    name: string;
    run: (s: SessionManager) => Promise<unknown>;
    field: (h: Record<string, unknown>) => unknown;
    after: unknown;
    before: unknown;
  }[] = [
    {
      name: "setPinned",
      run: (s) => s.setPinned(true),
      field: (h) => h.pinnedAt,
      before: undefined,
      after: new Date(NOW).toISOString(),
    },
    {
      name: "markRead",
      run: (s) => s.markRead(history.length),
      field: (h) => h.unread,
      before: true,
      after: false,
    },
    {
      name: "setTitle",
      run: (s) => s.setTitle({ text: "Named", source: "user", messageIndices: [] }),
      field: (h) => (h.title as { text?: string } | undefined)?.text,
      before: undefined,
      after: "Named",
    },
  ];
  for (const operation of operations) {
    await crashAtEveryOperation({
      baseline,
      seeds: [0, 1, 2],
      run: async (fs) => {
        const session = await storeOn(fs).open(dir);
        await operation.run(session);
      },
      check: async (recovered, { resolved, n, seed }) => {
        const session = await storeOn(recovered).open(dir, { readOnly: true });
        assert.deepEqual(session.messages, history);
        const raw = JSON.parse(
          new TextDecoder().decode(await recovered.readFile(`${dir}/meta.json`)),
        );
        const value = operation.field(raw.header);
        const label = `${operation.name}: op ${n} seed ${seed}`;
        if (resolved) assert.deepEqual(value, operation.after, label);
        else assert.ok(isEqual(value, operation.before) || isEqual(value, operation.after), label);
      },
    });
  }
});

test("case 10: a crash at every operation of an index rebuild leaves a usable session", async () => {
  const history = conversation(4);
  const { fs: baseline, dir } = await baselineWith(history);
  await baseline.remove(`${dir}/index.json`);
  baseline.syncAll();
  const fresh = await (async () => {
    const fs = baseline.clone();
    const session = await storeOn(fs).open(dir);
    await session.readHistory();
    return fs.readFile(`${dir}/index.json`);
  })();
  await crashAtEveryOperation({
    baseline,
    run: async (fs) => {
      const session = await storeOn(fs).open(dir);
      await session.readHistory();
    },
    check: async (recovered) => {
      const session = await storeOn(recovered).open(dir);
      const page = await session.readHistory();
      assert.deepEqual(page.messages, history.slice(page.start));
      assert.deepEqual(await recovered.readFile(`${dir}/index.json`), fresh);
    },
  });
});

function isEqual(a: unknown, b: unknown): boolean {
  try {
    assert.deepEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

test("property: random byte damage inside the committed range is always detected", async () => {
  const fc = (await import("fast-check")).default;
  const history = conversation(3);
  const { fs: baseline, dir } = await baselineWith(history);
  const log = await baseline.readFile(`${dir}/messages.jsonl`);
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 0, max: log.length - 1 }),
      fc.integer({ min: 1, max: 255 }),
      async (offset, flip) => {
        const fs = baseline.clone();
        const damaged = log.slice();
        damaged[offset] = (damaged[offset] as number) ^ flip;
        await fs.writeFile(`${dir}/messages.jsonl`, damaged);
        await assert.rejects(storeOn(fs).open(dir, { readOnly: true }), CorruptSessionError);
        assert.deepEqual(await fs.readFile(`${dir}/messages.jsonl`), damaged, "nothing repaired");
      },
    ),
    { numRuns: runsOf(200) },
  );
});

test("every kind of save cuts a crash tail to the committed length, also one that adds no message", async () => {
  const saves: [string, (s: SessionManager, h: Message[]) => Promise<unknown>][] = [
    ["an append", (s, h) => s.commit([...h, user("next")])],
    ["the same history with new prompt timings", (s, h) => s.commit(h, undefined, [])],
    ["the same history", (s, h) => s.commit(h)],
    ["append() of nothing", (s) => s.append([])],
  ];
  for (const [name, save] of saves) {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT, process: null });
    const session = await store.create(CWD);
    const history = conversation(2);
    await session.commit(history);
    await session.close();
    const log = `${session.getSessionPath()}/messages.jsonl`;
    const end = (await fs.stat(log)).size;
    // What a crash leaves past the committed range: bytes never published.
    const handle = await fs.open(log, { append: true });
    await handle.write(new TextEncoder().encode('{"role":"user","conte'));
    await handle.close();
    const writer = await store.open(session.getSessionPath());
    assert.deepEqual(writer.messages, history);
    await save(writer, history);
    await writer.close();
    const info = (await reopenHistory(fs, session.getSessionPath()))?.length ?? 0;
    const meta = JSON.parse(
      new TextDecoder().decode(await fs.readFile(`${session.getSessionPath()}/meta.json`)),
    ) as { start: number; bytes: number };
    assert.equal((await fs.stat(log)).size, meta.start + meta.bytes, name);
    assert.ok(meta.start + meta.bytes >= end, name);
    assert.ok(info >= history.length, name);
  }
});
