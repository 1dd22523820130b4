// A listing that runs while a delete (or a compaction) runs in another process never loses or
// fails a session: a delete that has not committed did not happen, and a compaction swaps one
// complete directory for another. Each interleaving is forced with hooks on the filesystem.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import {
  assistant,
  conversation,
  legacySessionBytes,
  toolResult,
  user,
  withoutRecordedTitle,
} from "./_fixtures.ts";
import type { Message } from "../src/loop/records/mod.ts";
import type { ProcessProbe } from "../src/loop/lock.ts";
import { gate, hookedFs, withoutNoFollow } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;

/** A version-2 session file of one exchange, recorded for `CWD`. */
function legacyFile(id: string): Uint8Array {
  return legacySessionBytes(id, CWD, conversation(1));
}

/**
 * A store of the listing process: after its first read of the collection it opens `read` and
 * waits for `resume`, so another process can act between the listing's steps.
 */
function pausedLister(
  fs: FileSystem,
  read: { open: () => void },
  resume: { wait: Promise<void> },
): SessionStore {
  let first = true;
  return new SessionStore({
    fs: hookedFs(fs, {
      after: async (method, args) => {
        if (method === "readDir" && args[0] === COLLECTION && first) {
          first = false;
          read.open();
          await resume.wait;
        }
      },
    }),
    agentDir: AGENT,
  });
}

async function setup(withBackup: boolean) {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  let id: string;
  if (withBackup) {
    id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
    await fs.mkdir(COLLECTION, { recursive: true });
    const legacy = `${COLLECTION}/${id}.jsonl`;
    await fs.writeFile(legacy, legacyFile(id));
    const s = await store.open(legacy); // migrates; the legacy file stays as backup
    await s.close();
  } else {
    const s = await store.create(CWD);
    await s.commit(conversation(1));
    await s.close();
    id = s.id;
  }
  const keep = await store.create(CWD);
  await keep.commit([user("keep")]);
  await keep.close();
  await store.archive.set(CWD, [id], true);
  return { fs, id };
}

for (const withBackup of [false, true]) {
  for (const fast of [false, true]) {
    test(`listing (fast ${fast}) while a delete runs in another process, ${withBackup ? "migrated session with backup" : "plain session"}`, async () => {
      const { fs, id } = await setup(withBackup);
      const before = await new SessionStore({ fs, agentDir: AGENT }).list(CWD);
      assert.ok(before.some((s) => s.id === id));
      const staged = gate();
      const listed = gate();
      const listerRead = gate();
      // The deleting process: after it staged the directory, it waits; then its commit-marker
      // write fails, so the delete rolls back (it never happened).
      const deleter = new SessionStore({
        fs: hookedFs(fs, {
          before: async (method, args) => {
            if (method === "rename" && String(args[1]).includes("/.delete-")) await listerRead.wait;
            if (method === "open" && String(args[0]).includes("/.committed.")) {
              staged.open();
              await listed.wait;
              throw new FsIoError("EIO", "open", String(args[0]), "injected");
            }
          },
        }),
        agentDir: AGENT,
      });
      // The listing process reads the collection, then waits for the other process.
      const lister = pausedLister(fs, listerRead, staged);
      const deleting = deleter.archive.delete(CWD, [id]).then(
        () => "resolved",
        (e) => `rejected ${(e as Error).name}`,
      );
      // Start listing after the delete took its lock (give it a tick).
      await new Promise((r) => setTimeout(r, 0));
      const result = await lister.listDetailed(CWD, undefined, { fast });
      listed.open();
      assert.equal(await deleting, "rejected FsIoError");
      const after = await new SessionStore({ fs, agentDir: AGENT }).list(CWD);
      assert.ok(after.some((s) => s.id === id), "rolled back: the session is still there");
      assert.ok(
        result.sessions.some((s) => s.id === id) && result.failures.length === 0,
        "the session whose delete never committed was missing from (or failed) the listing",
      );
    });
  }
}

test("listing while a compaction swaps the directory in another process", async () => {
  const { fs, id } = await setup(false);
  const store0 = new SessionStore({ fs, agentDir: AGENT });
  // Make a replacement generation so compaction has something to do.
  const s = await store0.open(`${COLLECTION}/${id}`);
  await s.commit([user("replaced")]);
  await s.close();
  const swapped = gate();
  const listed = gate();
  const listerRead = gate();
  const compactor = new SessionStore({
    fs: hookedFs(fs, {
      before: async (method, args) => {
        if (method === "rename" && String(args[1]).endsWith("/previous")) await listerRead.wait;
      },
      after: async (method, args) => {
        if (method === "rename" && String(args[1]).endsWith("/previous")) {
          swapped.open();
          await listed.wait;
        }
      },
    }),
    agentDir: AGENT,
  });
  // The listing process reads the collection, then waits for the other process.
  const lister = pausedLister(fs, listerRead, swapped);
  const compacting = compactor.compact(`${COLLECTION}/${id}`);
  await new Promise((r) => setTimeout(r, 0));
  const result = await lister.listDetailed(CWD, undefined, { fast: true });
  listed.open();
  assert.equal((await compacting).compacted, true);
  assert.ok(result.sessions.some((x) => x.id === id), "session missing during compaction");
});

for (
  const [fastMode, noFollow] of [[false, true], [true, true], [true, false]] as const
) {
  test(
    `listing (fast ${fastMode}${
      noFollow ? "" : ", a port without no-follow reads"
    }) while a compaction swaps the directory between its meta.json and log reads`,
    async () => {
      const { fs, id } = await setup(false);
      const store0 = new SessionStore({ fs, agentDir: AGENT });
      const s = await store0.open(`${COLLECTION}/${id}`);
      await s.commit([user("replaced"), ...conversation(3)]);
      await s.close();
      const metaRead = gate();
      const swapped = gate();
      const compactor = new SessionStore({
        fs: hookedFs(fs, {
          before: async (method, args) => {
            if (method === "rename" && String(args[1]).endsWith("/previous")) await metaRead.wait;
          },
          after: (method, args) => {
            if (method === "rename" && String(args[1]) === `${COLLECTION}/${id}`) swapped.open();
          },
        }),
        agentDir: AGENT,
      });
      let first = true;
      const port: FileSystem = noFollow ? fs : withoutNoFollow(fs);
      const lister = new SessionStore({
        fs: hookedFs(port, {
          after: async (method, args) => {
            if (
              (method === "readFile" || method === "readFileNoFollow") &&
              args[0] === `${COLLECTION}/${id}/meta.json` && first
            ) {
              first = false;
              metaRead.open();
              await swapped.wait;
            }
          },
        }),
        agentDir: AGENT,
      });
      const compacting = compactor.compact(`${COLLECTION}/${id}`);
      const result = await lister.listDetailed(CWD, undefined, { fast: fastMode });
      await compacting;
      assert.deepEqual(
        result.failures,
        [],
        "a healthy session reported as a failure during compaction",
      );
    },
  );
}

for (const commits of [false, true]) {
  for (const fast of [false, true]) {
    test(
      `a never-migrated legacy session: listing (fast ${fast}) races a delete that ${
        commits ? "commits" : "rolls back"
      }`,
      async () => {
        const fs = new MemoryFs();
        await fs.mkdir(COLLECTION, { recursive: true });
        await fs.mkdir(CWD, { recursive: true });
        const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
        await fs.writeFile(`${COLLECTION}/${id}.jsonl`, legacyFile(id));
        const store = new SessionStore({ fs, agentDir: AGENT });
        const keep = await store.create(CWD);
        await keep.commit([user("keep")]);
        await keep.close();
        await store.archive.set(CWD, [id], true);
        const staged = gate();
        const listed = gate();
        const listerRead = gate();
        const deleter = new SessionStore({
          fs: hookedFs(fs, {
            before: async (method, args) => {
              if (method === "rename" && String(args[1]).includes("/.delete-")) {
                await listerRead.wait;
              }
              if (method === "open" && String(args[0]).includes("/.committed.")) {
                staged.open();
                if (!commits) {
                  await listed.wait;
                  throw new FsIoError("EIO", "open", String(args[0]), "injected");
                }
              }
            },
          }),
          agentDir: AGENT,
        });
        const deleting = deleter.archive.delete(CWD, [id]).then(() => "resolved", () => "rejected");
        // The listing reads the collection, then waits until the delete staged (and, when it
        // commits, finished).
        const resume = commits
          ? { wait: staged.wait.then(() => deleting).then(() => undefined) }
          : staged;
        const lister = pausedLister(fs, listerRead, resume);
        await new Promise((resolve) => setTimeout(resolve, 0));
        const result = await lister.listDetailed(CWD, undefined, { fast });
        listed.open();
        assert.equal(await deleting, commits ? "resolved" : "rejected");
        assert.deepEqual(result.failures, []);
        assert.equal(result.sessions.some((s) => s.id === id), !commits);
      },
    );
  }
}

test("a fast listing racing a replacement and a compaction shows one committed state, and caches only that", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const alive = new Set([100, 200, 300]);
  /** A store of process `pid` (its own view of `fs`, as another process has). */
  const storeAs = (pid: number, view: FileSystem = hookedFs(fs, {})) => {
    const probe: ProcessProbe = { pid, host: "h", isAlive: (other) => alive.has(other) };
    return new SessionStore({ fs: view, agentDir: AGENT, process: probe });
  };
  const size = (messages: Message[]) =>
    messages.reduce((sum, message) => sum + JSON.stringify(message).length + 1, 0);
  // B: one round with a tool call. A: two rounds, padded to B's bytes and message count, so
  // once compacted B has A's start, length and count, and only its generation differs.
  const b = [
    user("Title B"),
    assistant("call", [{ id: "c1", name: "read" }]),
    toolResult("c1", "read"),
    assistant("done"),
  ];
  const padless = [user("Title A"), assistant("x"), user("second"), assistant("")];
  const a = [...padless.slice(0, 3), assistant("y".repeat(size(b) - size(padless)))];
  assert.equal(size(a), size(b));
  const writer = await storeAs(100).create(CWD);
  await writer.commit(a);
  await writer.close();
  const dir = writer.getSessionPath();
  const stateA = ["Title A", 2];
  const metaRead = gate();
  const resume = gate();
  let armed = true;
  const lister = storeAs(
    300,
    hookedFs(fs, {
      after: async (method, args) => {
        if (armed && method.startsWith("readFile") && args[0] === `${dir}/meta.json`) {
          armed = false;
          metaRead.open();
          await resume.wait;
        }
      },
    }),
  );
  const listing = lister.listDetailed(CWD, undefined, { fast: true });
  await metaRead.wait;
  // Another process replaces the history; a third compacts it (its log restarts at 0).
  const replacing = await storeAs(100).open(dir);
  await replacing.commit(b);
  await replacing.close();
  assert.equal((await storeAs(200).compact(dir)).compacted, true);
  resume.open();
  const result = await listing;
  assert.deepEqual(result.failures, []);
  const seen = result.sessions[0];
  const truth = (await storeAs(300).list(CWD))[0];
  assert.deepEqual(
    [seen?.updatedAt, seen?.title?.text, seen?.userMessageCount],
    [truth?.updatedAt, truth?.title?.text, truth?.userMessageCount],
  );
  // Back to exactly state A: the listing store's cache must not answer with B's title and count.
  const rewinding = await storeAs(100).open(dir);
  await rewinding.commit(a);
  await rewinding.close();
  await storeAs(200).compact(dir);
  const again = (await lister.list(CWD, undefined, { fast: true }))[0];
  assert.deepEqual([again?.title?.text, again?.userMessageCount], stateA);
});

test("a fast listing that read the log while saves changed the session lists one committed state, never a failure", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const writer = await store.create(CWD);
  const history = conversation(3);
  await writer.commit(history);
  // One more round past what index.json covers (it is published with lag): a fast listing
  // reads the log's tail. Then the listing's first user message is read from the log as well.
  history.push(user("next"), assistant("reply"));
  await writer.commit(history);
  await withoutRecordedTitle(fs, writer.getSessionPath());
  const listedBefore = (await store.list(CWD))[0];
  // A busy writer: it saves again each time the listing opens the log.
  let saves = 0;
  const metaReads: string[] = [];
  const lister = new SessionStore({
    fs: hookedFs(fs, {
      after: async (method, args) => {
        const path = String(args[0]);
        if (path.endsWith("/meta.json")) metaReads.push(method);
        if (method.startsWith("open") && path.endsWith("/messages.jsonl")) {
          history.push(assistant(`streamed ${saves++}`));
          await writer.commit(history);
        }
      },
    }),
    agentDir: AGENT,
  });
  const result = await lister.listDetailed(CWD, undefined, { fast: true });
  assert.deepEqual(result.failures, []);
  assert.ok(saves >= 1);
  // meta.json was read again after the log, found changed, and the range first read was checked.
  assert.ok(metaReads.length >= 2, metaReads.join(", "));
  const listed = result.sessions[0];
  assert.deepEqual(
    [listed?.updatedAt, listed?.messageCount, listed?.userMessageCount, listed?.title?.text],
    [
      listedBefore?.updatedAt,
      listedBefore?.messageCount,
      listedBefore?.userMessageCount,
      listedBefore?.title?.text,
    ],
  );
  await writer.close();
  // Once the writer is done, the listing shows its last state.
  const settled = (await lister.list(CWD, undefined, { fast: true }))[0];
  assert.equal(settled?.messageCount, history.length);
});
