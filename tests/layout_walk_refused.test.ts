// A part of the session tree the filesystem refuses to show (another user's 0700 tree, a
// chmod 000 directory) is reported by prune-raw and kept, but the callers that must see every
// session fail instead of taking it for a part without sessions: an id allocation would give out
// an id that tree holds (and both trees would then fail to load), and a seal check would pass a
// trace whose session it could not read.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { PermissionDenied } from "../src/port/errors.ts";
import {
  createRootSession,
  listTraces,
  loadSessionTree,
  processNextChildRequest,
  publishChildRequest,
  verifyTrace,
  walkSessionDirs,
} from "../layout.ts";
import { hookedFs } from "./_hooks.ts";
import { childRequest, CONTRACTS, newRepo, newRoot } from "./layout_fixtures.ts";
import { buildMirrorTree, CHILD_ATTEMPT } from "./fixtures/mirror_tree.ts";

/** `fs` refusing every call about `dir`'s contents (and its listing). */
function refusing(fs: MemoryFs, dir: string): FileSystem {
  return hookedFs(fs, {
    before: (method, args) => {
      const path = String(args[0]);
      if (path.startsWith(`${dir}/`) || (method === "readDir" && path === dir)) {
        throw new PermissionDenied(method, path);
      }
    },
  });
}

test("the walk keeps the refusal it went past; a child id is not allocated past it", async () => {
  const memory = await newRepo();
  const mine = await newRoot(memory, "Main program");
  const other = await newRoot(memory, "Other program");
  await publishChildRequest(memory, other.paths, childRequest("phase-1"));
  const taken = await processNextChildRequest(memory, {
    repoRoot: "/repo",
    parentSessionId: other.sessionId,
  });
  assert.equal(taken?.kind, "accepted");
  const fs = refusing(memory, other.dir);
  const walk = await walkSessionDirs(fs, "/repo/.loopy_loop/sessions");
  assert.deepEqual(walk.unidentified.map((dir) => dir.path), [other.dir]);
  assert.ok(walk.unidentified[0]?.error instanceof PermissionDenied);
  await publishChildRequest(fs, mine.paths, childRequest("phase-1"));
  await assert.rejects(
    processNextChildRequest(fs, { repoRoot: "/repo", parentSessionId: mine.sessionId }),
    PermissionDenied,
  );
  await assert.rejects(
    createRootSession(fs, { repoRoot: "/repo", goal: "Third program", ...CONTRACTS }),
    PermissionDenied,
  );
  // Nothing was given out twice: both trees still load.
  for (const id of [mine.sessionId, other.sessionId]) await loadSessionTree(memory, "/repo", id);
});

test("a trace whose session the filesystem refuses to show is not passed as needing no seal", async () => {
  const memory = await newRepo();
  const tree = await buildMirrorTree(memory);
  const fs = refusing(memory, tree.childDir);
  await assert.rejects(listTraces(fs, tree.loopyRoot), PermissionDenied);
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, `trace-${CHILD_ATTEMPT.attemptId}`),
    PermissionDenied,
  );
});
