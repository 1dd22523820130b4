// A listing or a read-only open that saw an interrupted compaction's staging directory, racing
// one compact() call that recovers it (puts the session back in place, removes that staging
// directory) and compacts again (moves the session into a new staging directory): the session
// is found in the new staging directory, never missed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs, SimulatedCrash } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionNotFoundError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { compactableSession } from "./_fixtures.ts";
import { gate, hookedFs, withoutNoFollow } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;

function storeOn(fs: FileSystem): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT });
}

/** A collection whose session was caught by a crash between its compaction's two renames. */
async function crashedBetweenRenames(): Promise<
  { fs: MemoryFs; id: string; dir: string; history: Message[] }
> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const session = await compactableSession(storeOn(fs), CWD, 2);
  const { dir, history } = session;
  const probe = fs.clone();
  probe.resetCounter();
  await storeOn(probe).compact(dir);
  const n = probe.operationLog.find((r) => r.op === "rename" && r.to?.endsWith("/previous"))!
    .number;
  const crashing = fs.clone();
  crashing.resetCounter();
  crashing.crashAfter(n);
  await assert.rejects(storeOn(crashing).compact(dir), SimulatedCrash);
  const crashed = crashing.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
  const names = (await crashed.readDir(COLLECTION)).map((e) => e.name);
  assert.deepEqual(names.filter((name) => name === session.id), [], "caught between renames");
  assert.equal(names.filter((name) => name.startsWith(`.staging-${session.id}-`)).length, 1);
  return { fs: crashed, id: session.id, dir, history };
}

/**
 * Runs `read` with a filesystem that pauses it right after its first read of the collection
 * (which shows only the interrupted compaction's staging directory); meanwhile one compact()
 * recovers and compacts again, and is held between its renames while `read` resumes.
 */
async function acrossRecoveredThenCompacted<T>(
  fs: MemoryFs,
  dir: string,
  read: (fs: FileSystem) => Promise<T>,
): Promise<T> {
  const readerPaused = gate();
  const readerGo = gate();
  let armed = true;
  const readerFs = hookedFs(fs, {
    after: async (method, args) => {
      if (armed && method === "readDir" && args[0] === COLLECTION) {
        armed = false;
        readerPaused.open();
        await readerGo.wait;
      }
    },
  });
  const compactorPaused = gate();
  const compactorGo = gate();
  let renames = 0;
  const compactorFs = hookedFs(fs, {
    before: async (method, args) => {
      // 1: the recovery puts previous/ back; 2: the new compaction's swap into place.
      if (method === "rename" && args[1] === dir && ++renames === 2) {
        compactorPaused.open();
        await compactorGo.wait;
      }
    },
  });
  const reading = read(readerFs).then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  await readerPaused.wait;
  const compacting = storeOn(compactorFs).compact(dir);
  await compactorPaused.wait;
  const names = (await fs.readDir(COLLECTION)).map((e) => e.name);
  assert.ok(!names.includes(dir.slice(COLLECTION.length + 1)), "the session is moved away");
  readerGo.open();
  const got = await reading;
  compactorGo.open();
  assert.equal((await compacting).compacted, true);
  if ("error" in got) throw got.error;
  return got.value;
}

test("a listing that saw an interrupted compaction, recovered and compacted again meanwhile, lists the session", async () => {
  for (const fast of [true, false]) {
    const { fs, id, dir, history } = await crashedBetweenRenames();
    const result = await acrossRecoveredThenCompacted(
      fs,
      dir,
      (racing) => storeOn(racing).listDetailed(CWD, undefined, { fast }),
    );
    assert.deepEqual(result.failures, [], `fast: ${fast}`);
    assert.deepEqual(
      result.sessions.map((s) => [s.id, s.storage, s.messageCount]),
      [[id, "directory", history.length]],
      `fast: ${fast}`,
    );
  }
});

test("a read-only open that saw an interrupted compaction, recovered and compacted again meanwhile, opens the session", async () => {
  const { fs, id, dir, history } = await crashedBetweenRenames();
  const opened = await acrossRecoveredThenCompacted(
    fs,
    dir,
    (racing) => storeOn(racing).open(dir, { readOnly: true }),
  );
  assert.deepEqual(opened.messages, history);
  // Read where the racing compaction holds it (its previous directory), as such an open does.
  assert.equal(opened.id, id);
  await opened.close();
});

test("a session whose compaction staging directory holds no copy and is not in place stays not found, after a bounded number of looks", async () => {
  const { fs, id, dir } = await crashedBetweenRenames();
  // The session is really gone: only an empty staging directory of it is left.
  const staging = (await fs.readDir(COLLECTION)).find((e) => e.name.startsWith(`.staging-${id}-`))!;
  await fs.remove(`${COLLECTION}/${staging.name}`, { recursive: true });
  await fs.mkdir(`${COLLECTION}/${staging.name}`);
  for (const reader of ["list", "list fast", "open"] as const) {
    let reads = 0;
    const counting = hookedFs(fs, {
      after: (method, args) => {
        if (method === "readDir" && args[0] === COLLECTION) reads++;
      },
    });
    const store = storeOn(counting);
    if (reader === "open") {
      await assert.rejects(store.open(dir, { readOnly: true }), SessionNotFoundError);
    } else {
      const result = await store.listDetailed(CWD, undefined, { fast: reader === "list fast" });
      assert.deepEqual([result.sessions, result.failures], [[], []], reader);
    }
    assert.ok(reads >= 1 && reads <= 10, `${reader}: ${reads} reads of the collection`);
  }
});

test("a read-only open that judged a compaction's staging directory before its first rename opens the session once it moved", async () => {
  const { fs, dir, history } = await crashedBetweenRenames();
  // The reader pauses before it reads the collection, and again before its next look at the
  // session's place; meanwhile a compact() recovers the session and compacts it again, holding
  // first with its compacted copy complete (no previous copy yet: what the reader judges), then
  // between its renames (the session moved away when the reader looks).
  const [readerAtList, readerListGo, readerAtLook, readerLookGo] = [gate(), gate(), gate(), gate()];
  let listings = 0;
  let looks = 0;
  const readerFs = hookedFs(fs, {
    before: async (method, args) => {
      if (method === "readDir" && args[0] === COLLECTION && ++listings === 1) {
        readerAtList.open();
        await readerListGo.wait;
      }
      if (method === "lstat" && args[0] === dir && ++looks === 3) {
        readerAtLook.open();
        await readerLookGo.wait;
      }
    },
  });
  const [beforeMove, moveGo, betweenRenames, swapGo] = [gate(), gate(), gate(), gate()];
  let intoPlace = 0;
  const compactorFs = hookedFs(fs, {
    before: async (method, args) => {
      if (method === "rename" && args[0] === dir && String(args[1]).endsWith("/previous")) {
        beforeMove.open();
        await moveGo.wait;
      }
      if (method === "rename" && args[1] === dir && ++intoPlace === 2) {
        betweenRenames.open();
        await swapGo.wait;
      }
    },
  });
  const reading = storeOn(readerFs).open(dir, { readOnly: true }).then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  await readerAtList.wait;
  const compacting = storeOn(compactorFs).compact(dir);
  await beforeMove.wait;
  readerListGo.open();
  await readerAtLook.wait;
  moveGo.open();
  await betweenRenames.wait;
  readerLookGo.open();
  const got = await reading;
  swapGo.open();
  assert.equal((await compacting).compacted, true);
  if ("error" in got) throw got.error;
  assert.deepEqual(got.value.messages, history);
  await got.value.close();
});

for (const [fast, noFollow] of [[true, true], [true, false], [false, true]] as const) {
  test(`a listing that judged a compaction's staging directory before its first rename lists the session once it moved (fast: ${fast}, no-follow reads: ${noFollow})`, async () => {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const session = await compactableSession(storeOn(fs), CWD);
    const { dir, history } = session;
    // The compaction holds with its compacted copy complete (no previous copy yet), then between
    // its renames; the listing reads the collection in between and the session once it moved.
    const [atMove, moveGo, betweenRenames, swapGo] = [gate(), gate(), gate(), gate()];
    const compactorFs = hookedFs(fs, {
      before: async (method, args) => {
        if (method === "rename" && args[0] === dir && String(args[1]).endsWith("/previous")) {
          atMove.open();
          await moveGo.wait;
        }
        if (method === "rename" && args[1] === dir) {
          betweenRenames.open();
          await swapGo.wait;
        }
      },
    });
    const compacting = storeOn(compactorFs).compact(dir);
    await atMove.wait;
    const [readerAt, readerGo] = [gate(), gate()];
    let listed = false;
    let armed = true;
    const readerFs = hookedFs(fs, {
      before: async (method, args) => {
        if (method === "readDir" && args[0] === COLLECTION) listed = true;
        const path = String(args[0]);
        if (armed && listed && (path === dir || path.startsWith(`${dir}/`))) {
          armed = false;
          readerAt.open();
          await readerGo.wait;
        }
      },
    });
    const listing = storeOn(noFollow ? readerFs : withoutNoFollow(readerFs)).listDetailed(
      CWD,
      undefined,
      { fast },
    );
    await readerAt.wait;
    moveGo.open();
    await betweenRenames.wait;
    readerGo.open();
    const result = await listing;
    swapGo.open();
    assert.equal((await compacting).compacted, true);
    assert.deepEqual(result.failures, []);
    assert.deepEqual(
      result.sessions.map((s) => [s.id, s.messageCount]),
      [[session.id, history.length]],
    );
  });
}
