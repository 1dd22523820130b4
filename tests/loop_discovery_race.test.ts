// A listing that runs while a delete (or a compaction) runs in another process never loses or
// fails a session: a delete that has not committed did not happen, and a compaction swaps one
// complete directory for another. Each interleaving is forced with hooks on the filesystem.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { conversation, legacySessionBytes, user } from "./_fixtures.ts";
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
