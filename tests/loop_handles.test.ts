// No operation of the Loop store leaves a file handle open behind it, whether it resolves or
// fails: a host that runs for weeks and meets a full disk or a failing device now and then must
// not run out of descriptors. Each operation runs with an EIO (or ENOSPC) at every operation it
// makes, transient and persistent; once it settled and the managers it opened are closed,
// `MemoryFs.openHandles` must be empty. A manager still open holds exactly the handles its state
// explains (its log, and the one its page reads keep), checked before it is closed. Nor does a
// call leave a session claimed: its writer slot in this process and its lock file are released,
// so every session in the collection opens for writing again. And it leaves nothing that builds
// up: no temp file after a transient fault, and nothing the next maintenance does not remove.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type FaultError, MemoryFs } from "../adapters/memory.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { parseLockRecord, type ProcessProbe, WRITER_LOCK_FILE } from "../src/loop/lock.ts";
import { SessionBusyError, SessionLockedError } from "../src/loop/errors.ts";
import { isSessionId } from "../src/loop/records/ids.ts";
import { isTempName } from "../src/port/durable.ts";
import { isPrivateStagingName } from "../src/loop/archive.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { salvageSession, verifySession } from "../src/loop/verify.ts";
import { failAtEveryOperation } from "./_crash.ts";
import {
  assistant,
  compactableSession,
  conversation,
  imageOnly,
  legacySessionBytes,
  recommit,
  stoppedBetweenRenames,
  user,
  withoutRecordedTitle,
} from "./_fixtures.ts";
import { nodeSha256 } from "../adapters/node.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
/** The collection salvaged copies go to. */
const SALVAGED = `${AGENT}/salvaged`;
const LEGACY_ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const NOW = Date.parse("2026-03-01T00:00:00.000Z");

function storeOn(fs: MemoryFs, probe?: ProcessProbe): SessionStore {
  // Native hashing: the portable one, loaded through the Node test run's TypeScript loader, makes
  // the long session's reads about ten times slower there.
  return new SessionStore({
    fs,
    sha256: nodeSha256,
    agentDir: AGENT,
    now: () => NOW,
    process: probe ?? null,
  });
}

/** A process probe under which every lock file names a live process (this one). */
const LIVE: ProcessProbe = { pid: 4242, host: "host", isAlive: () => true };

/** What a scenario's baseline holds. */
interface Baseline {
  readonly fs: MemoryFs;
  /** A closed session of several rounds, with a replaced generation before its committed one. */
  readonly dir: string;
  readonly id: string;
  readonly history: readonly Message[];
}

/**
 * The baseline every scenario starts from: one compactable session, a second whose index.json
 * records no fallback title (a fast listing reads its log), and a legacy version-2 file.
 */
async function baseline(): Promise<Baseline> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = storeOn(fs);
  const { id, dir, history } = await compactableSession(store, CWD, 4);
  const other = await store.create(CWD);
  await other.commit(conversation(3, "o"));
  await other.close();
  await withoutRecordedTitle(fs, other.getSessionPath());
  await fs.writeFile(
    `${COLLECTION}/${LEGACY_ID}.jsonl`,
    legacySessionBytes(LEGACY_ID, CWD, conversation(2, "l")),
  );
  fs.syncAll();
  return { fs, dir, id, history };
}

/** The managers a scenario opened, closed by the loop once the scenario settled. */
type Opened = SessionManager[];

interface Scenario {
  readonly name: string;
  /** The errors to inject; every scenario gets EIO. */
  readonly errors?: readonly FaultError[];
  /** The process probe of the scenario's stores (lock files are made only with one). */
  readonly probe?: ProcessProbe;
  /** Changes made to the baseline before the scenario runs (with no fault armed). */
  readonly setup?: (fs: MemoryFs, base: Baseline) => Promise<void>;
  readonly run: (fs: MemoryFs, base: Baseline, opened: Opened) => Promise<unknown>;
}

/** Opens `path` through `store` and records the manager in `opened`. */
async function openOn(
  store: SessionStore,
  path: string,
  opened: Opened,
  readOnly = false,
): Promise<SessionManager> {
  const session = await store.open(path, { readOnly });
  opened.push(session);
  return session;
}

const more = (history: readonly Message[], tag: string): Message[] => [
  ...history,
  user(`${tag} question`),
  assistant(`${tag} answer`),
];

const SCENARIOS: readonly Scenario[] = [
  {
    name: "create and a first commit",
    errors: ["EIO", "ENOSPC"],
    run: async (fs, _base, opened) => {
      const session = await storeOn(fs).create(CWD);
      opened.push(session);
      await session.commit(conversation(2, "n"));
    },
  },
  {
    name: "open, commit (append), append, and a page read",
    errors: ["EIO", "ENOSPC"],
    run: async (fs, base, opened) => {
      const session = await openOn(storeOn(fs), base.dir, opened);
      const history = more(base.history, "a");
      await session.commit(history);
      await session.append([user("appended"), assistant("ok")]);
      await session.readHistory();
    },
  },
  {
    name: "a page read first, then a replacement generation",
    errors: ["EIO", "ENOSPC"],
    run: async (fs, base, opened) => {
      const session = await openOn(storeOn(fs), base.dir, opened);
      const page = await session.readHistory();
      if (page.start > 0) await session.readHistory(page.start, page.revision);
      await session.commit([user("rewritten"), assistant("from scratch")]);
    },
  },
  {
    name: "saves called together (one batch), then flush after a failure",
    errors: ["EIO", "ENOSPC"],
    run: async (fs, base, opened) => {
      const session = await openOn(storeOn(fs), base.dir, opened);
      const results = await Promise.allSettled([
        session.append([user("b1"), assistant("b1")]),
        session.append([user("b2"), assistant("b2")]),
      ]);
      if (results.some((result) => result.status === "rejected")) await session.flush();
    },
  },
  {
    name: "pin, title, read receipt, model, permission preset",
    run: async (fs, base, opened) => {
      const session = await openOn(storeOn(fs), base.dir, opened);
      await session.setPinned(true);
      await session.setTitle({ text: "A title", source: "user", messageIndices: [] });
      await session.markRead(base.history.length);
      await session.setModel({ provider: "synthetic", id: "model-2" });
      await session.setPermissionPreset("danger-full-access");
    },
  },
  {
    name: "read-only open and its pages",
    run: async (fs, base, opened) => {
      const session = await openOn(storeOn(fs), base.dir, opened, true);
      const page = await session.readHistory();
      if (page.start > 0) await session.readHistory(page.start, page.revision);
    },
  },
  {
    name: "fast listing (one session's title read from its log), then a repeated one",
    run: async (fs) => {
      const store = storeOn(fs);
      await store.list(CWD, undefined, { fast: true });
      await store.list(CWD, undefined, { fast: true });
    },
  },
  {
    name: "full listing",
    run: (fs) => storeOn(fs).listDetailed(CWD),
  },
  {
    name: "compaction",
    errors: ["EIO", "ENOSPC"],
    run: (fs, base) => storeOn(fs).compact(base.dir),
  },
  {
    name: "migration of a legacy file by its open",
    errors: ["EIO", "ENOSPC"],
    run: async (fs, _base, opened) => {
      await openOn(storeOn(fs), `${COLLECTION}/${LEGACY_ID}.jsonl`, opened);
    },
  },
  {
    name: "verify and salvage",
    errors: ["EIO", "ENOSPC"],
    run: async (fs, base) => {
      await verifySession(fs, base.dir, { sha256: nodeSha256 });
      await fs.mkdir(SALVAGED, { recursive: true });
      await storeOn(fs).salvage(base.dir, SALVAGED);
      await salvageSession(fs, base.dir, { sha256: nodeSha256, toCollection: SALVAGED });
    },
  },
  {
    name: "archive, then delete",
    errors: ["EIO", "ENOSPC"],
    run: async (fs, base) => {
      const store = storeOn(fs);
      await store.archive.set(CWD, [base.id], true);
      await store.archive.set(CWD, [base.id], true); // already so: made durable again
      await store.archive.list(CWD);
      await store.archive.isArchived(CWD, base.id);
      await store.archive.delete(CWD, [base.id]);
    },
  },
  {
    name: "recovery of a compaction stopped between its renames, by an open",
    errors: ["EIO", "ENOSPC"],
    setup: async (fs, base) => void await stoppedBetweenRenames(fs, base.dir),
    run: (fs, base, opened) => openOn(storeOn(fs), base.dir, opened),
  },
  {
    name: "removal of a legacy backup after its migration",
    setup: async (fs) => {
      await (await storeOn(fs).open(`${COLLECTION}/${LEGACY_ID}.jsonl`)).close();
    },
    run: (fs) => storeOn(fs).removeLegacyBackup(`${COLLECTION}/${LEGACY_ID}`),
  },
  {
    name: "a save that makes the modes of a session's files private again",
    setup: async (fs, base) => {
      for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
        await fs.chmod(`${base.dir}/${name}`, 0o644);
      }
    },
    run: async (fs, base, opened) => {
      const session = await openOn(storeOn(fs), base.dir, opened);
      await session.append([user("private"), assistant("again")]);
    },
  },
  {
    name: "a session holding a message that is not valid: opens and listings",
    setup: async (fs, base) => {
      await recommit(fs, base.dir, [JSON.stringify(user("fine")), `{"role":"narrator"}`]);
    },
    run: async (fs, base, opened) => {
      const store = storeOn(fs);
      for (const readOnly of [true, false]) {
        await assert.rejects(openOn(store, base.dir, opened, readOnly));
      }
      await store.list(CWD, undefined, { fast: true });
      await store.listDetailed(CWD);
    },
  },
  {
    name: "a long session (its index read by its head, its title of a later round), " +
      "a lagging index and a cleared history: fast listings, opens and pages",
    setup: async (fs, base) => {
      const store = storeOn(fs);
      const long = await store.create(CWD);
      await long.commit([imageOnly(), assistant("seen"), ...conversation(700, "x")]);
      await long.close();
      const cleared = await store.create(CWD);
      await cleared.commit(conversation(2, "c"));
      await cleared.commit([]);
      await cleared.close();
      const lagging = await store.open(base.dir);
      await lagging.append([user("lag"), assistant("ging")]);
      // Left open: its index.json lags the history, as a writer that stopped leaves it.
    },
    run: async (fs, _base, opened) => {
      const store = storeOn(fs);
      const listed = await store.list(CWD, undefined, { fast: true });
      await store.list(CWD, undefined, { fast: true });
      for (const { path } of listed) {
        for (const readOnly of [true, false]) {
          const session = await openOn(store, path, opened, readOnly);
          await session.readHistory();
          await session.close();
        }
      }
    },
  },
  {
    name: "a writer's lock file, with a process probe: open, save, close; and a compaction",
    errors: ["EIO", "ENOSPC"],
    probe: LIVE,
    run: async (fs, base, opened) => {
      const store = storeOn(fs, LIVE);
      const session = await openOn(store, base.dir, opened);
      await session.append([user("locked"), assistant("save")]);
      await session.close();
      await store.compact(base.dir);
    },
  },
  {
    name: "cleanup of the collection",
    run: (fs) => storeOn(fs).cleanup(CWD),
  },
];

/**
 * Checks that no session of the collection is left claimed: each opens for writing in this
 * process (a writer slot left taken, or a lock file naming a live process, refuses it). A lock
 * file a failed write left torn is removed first: the next writer takes such a file over only
 * after a grace period (`tests/loop_lock.test.ts`), too long to wait here at every fault point.
 */
async function assertNothingClaimed(fs: MemoryFs, label: string, probe?: ProcessProbe) {
  const store = storeOn(fs, probe);
  const entries = await fs.readDir(COLLECTION).catch(() => []);
  for (const entry of entries) {
    if (!isSessionId(entry.name) || entry.kind !== "directory") continue;
    const dir = `${COLLECTION}/${entry.name}`;
    const lock = await fs.readFile(`${dir}/${WRITER_LOCK_FILE}`).catch(() => undefined);
    if (lock !== undefined && parseLockRecord(lock) === undefined) {
      await fs.remove(`${dir}/${WRITER_LOCK_FILE}`);
    }
    try {
      await (await store.open(dir)).close();
    } catch (error) {
      // Damage a scenario made is reported by the open; a claim left behind must not be.
      if (error instanceof SessionLockedError || error instanceof SessionBusyError) {
        assert.fail(`${label}: ${dir} is left claimed: ${error.message}`);
      }
    }
  }
}

/**
 * Checks that a failed call leaves nothing that builds up: after a transient fault no temp file is
 * left at all (the call removes its own), and after any fault, once the disk works again, the
 * next maintenance of each collection written to (`cleanup`) leaves no temp file and no private
 * directory of the store's operations. A host whose disk fails now and then collects nothing.
 */
async function assertNothingLeft(
  fs: MemoryFs,
  label: string,
  persistent: boolean,
  probe?: ProcessProbe,
): Promise<void> {
  const leftovers = (test: (name: string) => boolean) =>
    Object.keys(fs.snapshotTree()).filter((path) => path.split("/").some(test));
  if (!persistent) assert.deepEqual(leftovers(isTempName), [], `${label}: temp files`);
  const store = storeOn(fs, probe);
  await store.cleanup(CWD);
  if ((await fs.readDir(SALVAGED).catch(() => undefined)) !== undefined) {
    await store.cleanup(undefined, SALVAGED);
  }
  assert.deepEqual(leftovers(isTempName), [], `${label}: temp files after cleanup`);
  assert.deepEqual(leftovers(isPrivateStagingName), [], `${label}: private directories`);
}

/** The handles the open `managers` may hold: none, once each is closed. */
async function closeAll(managers: Opened): Promise<void> {
  for (const session of managers) {
    try {
      await session.close();
    } catch {
      // A close that fails (a metadata change it could not undo) still releases the handles.
    }
  }
}

for (const scenario of SCENARIOS) {
  test(`${scenario.name}: nothing is left open, claimed or behind, whatever operation fails`, async () => {
    const base = await baseline();
    if (scenario.setup !== undefined) {
      await scenario.setup(base.fs, base);
      base.fs.syncAll();
    }
    // Without a fault: the scenario works and leaves nothing open once its managers are closed.
    {
      const fs = base.fs.clone();
      const opened: Opened = [];
      await scenario.run(fs, base, opened);
      await closeAll(opened);
      assert.deepEqual(fs.openHandles, [], `${scenario.name}, no fault`);
      await assertNothingClaimed(fs, `${scenario.name}, no fault`, scenario.probe);
    }
    for (const error of scenario.errors ?? ["EIO"]) {
      for (const persistent of [false, true]) {
        let opened: Opened = [];
        const points = await failAtEveryOperation({
          baseline: base.fs,
          error,
          persistent,
          run: (fs) => {
            opened = [];
            return scenario.run(fs, base, opened);
          },
          check: async (fs, { n }) => {
            const label = `${scenario.name}: ${persistent ? "persistent" : "transient"} ` +
              `${error} at operation ${n}`;
            await closeAll(opened);
            assert.deepEqual(fs.openHandles, [], label);
            await assertNothingClaimed(fs, label, scenario.probe);
            await assertNothingLeft(fs, label, persistent, scenario.probe);
          },
        });
        assert.ok(points > 3, `${scenario.name}: ${points} fault points`);
      }
    }
  });
}

test("an open manager holds only its log and its page reader's handle, each once", async () => {
  const base = await baseline();
  const fs = base.fs.clone();
  const store = storeOn(fs);
  const writer = await store.open(base.dir);
  await writer.append([user("q"), assistant("a")]);
  await writer.readHistory();
  await writer.readHistory();
  const held = fs.openHandles;
  assert.ok(held.length <= 2, `held: ${held.join(", ")}`);
  assert.ok(held.every((path) => path === `${base.dir}/messages.jsonl`), held.join(", "));
  const reader = await store.open(base.dir, { readOnly: true });
  await reader.readHistory();
  await reader.readHistory();
  assert.equal(fs.openHandles.length, held.length + 1);
  await reader.close();
  await writer.close();
  assert.deepEqual(fs.openHandles, []);
});

test("a salvage failing at any operation leaves its target collection as it was or with the copy published", async () => {
  const base = await baseline();
  await base.fs.mkdir(SALVAGED, { recursive: true });
  base.fs.syncAll();
  const before = (await base.fs.readDir(SALVAGED)).map((entry) => entry.name);
  for (const error of ["EIO", "ENOSPC"] as const) {
    await failAtEveryOperation({
      baseline: base.fs,
      error,
      persistent: false,
      run: (fs) => salvageSession(fs, base.dir, { sha256: nodeSha256, toCollection: SALVAGED }),
      check: async (fs, { n, resolved }) => {
        if (resolved) return;
        // As before, or with the salvaged copy published (a step after its rename failed).
        const names = (await fs.readDir(SALVAGED)).map((entry) => entry.name);
        const added = names.filter((name) => !before.includes(name));
        const label = `${error} at operation ${n}: ${names.join(", ")}`;
        assert.ok(added.length === 0 || (added.length === 1 && isSessionId(added[0]!)), label);
      },
    });
  }
});

test("a salvage never removes what it finds at its staging name, whichever call fails", async () => {
  const base = await baseline();
  const id = "11111111-2222-4333-8444-555555555555";
  const staging = `${SALVAGED}/.staging-${id}-deadbeef`;
  const random = globalThis.crypto.randomUUID;
  for (
    const [kind, place] of [
      ["file", (fs: MemoryFs) => fs.writeFile(staging, new Uint8Array([1]))],
      ["empty directory", (fs: MemoryFs) => fs.mkdir(staging)],
    ] as const
  ) {
    // Whichever of the salvage's calls fails: what is at the name must stay.
    for (let n = 1; n <= 40; n++) {
      const fs = base.fs.clone();
      await fs.mkdir(SALVAGED, { recursive: true });
      await place(fs);
      fs.failAt(fs.operationCount + n);
      globalThis.crypto.randomUUID = () => "deadbeef-0000-4000-8000-000000000000";
      try {
        await assert.rejects(
          salvageSession(fs, base.dir, { sha256: nodeSha256, toCollection: SALVAGED, id }),
        );
      } finally {
        globalThis.crypto.randomUUID = random;
      }
      fs.clearFaults();
      const expected = kind === "file" ? "file" : "directory";
      assert.equal((await fs.lstat(staging)).kind, expected, `${kind}, call ${n} failing`);
    }
  }
});
