// A real filesystem's recursive remove unlinks a directory's children before the directory: while
// a healthy compaction removes its staging directory's previous/ copy, there is a moment where
// previous/ is a directory without meta.json and the session is already back in place. A fast
// listing and verify that look in that moment must see the healthy session, never a damaged
// compaction. Simulated on MemoryFs: the compactor's remove of previous/ first unlinks its
// meta.json, and holds.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { verifySession } from "../src/loop/verify.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { compactableSession } from "./_fixtures.ts";
import { gate, hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;

function storeOn(fs: FileSystem): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT });
}

/** A closed session whose log holds a replaced generation (so compaction has work). */
async function setup(): Promise<{ fs: MemoryFs; dir: string; history: Message[] }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const { dir, history } = await compactableSession(storeOn(fs), CWD);
  return { fs, dir, history };
}

/**
 * A compaction of `dir` that holds before its first rename (`atMove`, released by `moveGo`), says
 * when it moved the directory (`moved`), holds before its second rename (until `swapGo`), and
 * holds in the middle of removing previous/ (`midRemove`, released by `removeGo`).
 */
function heldCompaction(fs: MemoryFs, dir: string) {
  const g = {
    atMove: gate(),
    moveGo: gate(),
    moved: gate(),
    swapGo: gate(),
    midRemove: gate(),
    removeGo: gate(),
  };
  let previous = "";
  const compactorFs = hookedFs(fs, {
    before: async (method, args) => {
      if (method === "rename" && args[0] === dir) {
        g.atMove.open();
        await g.moveGo.wait;
      }
      if (method === "rename" && args[1] === dir) await g.swapGo.wait;
      if (method === "remove" && previous !== "" && args[0] === previous) {
        await fs.remove(`${previous}/meta.json`); // its first child unlinked
        g.midRemove.open();
        await g.removeGo.wait;
      }
    },
    after: (method, args) => {
      if (method === "rename" && args[0] === dir) {
        previous = String(args[1]);
        g.moved.open();
      }
      return Promise.resolve();
    },
  });
  return { g, compacting: storeOn(compactorFs).compact(dir) };
}

test("a fast listing that meets a compaction removing its previous copy lists the session", async () => {
  const { fs, dir, history } = await setup();
  const { g, compacting } = heldCompaction(fs, dir);
  await g.atMove.wait;
  let listed = false;
  let phase = 0;
  const [atDir, dirGo] = [gate(), gate()];
  const readerFs = hookedFs(fs, {
    before: async (method, args) => {
      if (method === "readDir" && args[0] === COLLECTION) listed = true;
      const path = String(args[0]);
      if (phase === 0 && listed && (path === dir || path.startsWith(`${dir}/`))) {
        phase = 1;
        atDir.open();
        await dirGo.wait; // the compaction moves the directory away now
        return;
      }
      if (phase === 1 && method === "lstat" && path === dir) {
        phase = 2;
        g.swapGo.open();
        await g.midRemove.wait; // back in place; previous/ half removed
      }
    },
  });
  const listing = storeOn(readerFs).listDetailed(CWD, undefined, { fast: true });
  await atDir.wait;
  g.moveGo.open();
  await g.moved.wait;
  dirGo.open();
  const result = await listing;
  g.swapGo.open();
  g.removeGo.open();
  assert.equal((await compacting).compacted, true);
  assert.equal(phase, 2, "the listing looked while previous/ was half removed");
  assert.deepEqual(result.failures, []);
  assert.deepEqual(result.sessions.map((s) => s.messageCount), [history.length]);
});

test("verify that meets a compaction removing its previous copy verifies the session in place", async () => {
  const { fs, dir } = await setup();
  const { g, compacting } = heldCompaction(fs, dir);
  g.moveGo.open();
  await g.moved.wait;
  let looks = 0;
  const readerFs = hookedFs(fs, {
    before: async (method, args) => {
      // Once verify found the session missing, it looks at the collection for a staged copy.
      if (method === "readDir" && args[0] === COLLECTION && looks++ === 0) {
        g.swapGo.open();
        await g.midRemove.wait;
      }
    },
  });
  const report = await verifySession(readerFs, dir, { sha256: portableSha256 });
  g.removeGo.open();
  assert.equal((await compacting).compacted, true);
  assert.equal(looks > 0, true, "verify looked while previous/ was half removed");
  assert.deepEqual(report.findings, []);
  assert.equal(report.ok, true);
});
