// A target in a folded session's raw/<NNNN>_<workflow>/ is pruned when absent, whichever tree
// of the repository the session is in: a repo:/ reference into another tree's session reads the
// same status as the session's own spelling, as the layout that session's session.json records
// says (a mirror session's raw/ is never prunable output).
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { LogicalReferenceResolver, pruneRaw } from "../layout.ts";
import { newRepo, newRoot } from "./layout_fixtures.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";
import { buildMirrorTree, MIRROR_ROOT_ID } from "./fixtures/mirror_tree.ts";

async function resolverFor(fs: MemoryFs, sessionId: string): Promise<LogicalReferenceResolver> {
  return await LogicalReferenceResolver.forSession(fs, { repoRoot: "/repo", sessionId });
}

test("another tree's pruned raw output is pruned through repo:/, as through its own spelling", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const other = await newRoot(fs, "Another folded program");
  await pruneRaw(fs, tree.loopyRoot);
  const own = await resolverFor(fs, tree.rootId);
  const elsewhere = await resolverFor(fs, other.sessionId);
  const sessions = `repo:/.loopy_loop/sessions/${tree.rootId}`;
  for (
    const [below, ownSpelling] of [
      ["raw/0001_outer/eval/report.json", "session:/raw/0001_outer/eval/report.json"],
      ["raw/0002_outer", "session:/raw/0002_outer"],
      [
        `children/${tree.childId}/raw/0001_leaf/eval/report.json`,
        `session:${tree.childId}:/raw/0001_leaf/eval/report.json`,
      ],
    ] as const
  ) {
    const expected = await own.resolve(ownSpelling);
    assert.deepEqual([expected.exists, expected.status], [false, "pruned"], ownSpelling);
    const resolved = await elsewhere.resolve(`${sessions}/${below}`);
    assert.deepEqual([resolved.exists, resolved.status], [false, "pruned"], below);
    assert.equal(resolved.canonical, `${sessions}/${below}`);
  }
  // A durable file of the other tree is not raw output: absent is absent there.
  const durable = await elsewhere.resolve(`${sessions}/project_state/missing.md`);
  assert.deepEqual([durable.exists, durable.status], [false, "absent"]);
  // raw/ itself is no prunable entry.
  assert.equal((await elsewhere.resolve(`${sessions}/raw`)).status, "present");
});

test("another tree's raw entry a prune renamed aside is gone through repo:/", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const other = await newRoot(fs, "Another folded program");
  const raw = `${tree.root.dir}/raw`;
  await fs.rename(`${raw}/0001_outer`, `${raw}/.pruning-deadbeef-0001_outer`);
  const elsewhere = await resolverFor(fs, other.sessionId);
  const hidden = `repo:/.loopy_loop/sessions/${tree.rootId}/raw/.pruning-deadbeef-0001_outer`;
  const resolved = await elsewhere.resolve(`${hidden}/eval/report.json`);
  assert.deepEqual([resolved.exists, resolved.status], [false, "pruned"]);
  // The entry beside it is still there.
  const present = await elsewhere.resolve(
    `repo:/.loopy_loop/sessions/${tree.rootId}/raw/0002_outer/eval/report.json`,
  );
  assert.deepEqual([present.exists, present.status], [true, "present"]);
});

test("another tree's mirror session raw/ is not prunable output", async () => {
  const fs = await newRepo();
  await buildMirrorTree(fs);
  const folded = await newRoot(fs);
  const resolver = await resolverFor(fs, folded.sessionId);
  const resolved = await resolver.resolve(
    `repo:/.loopy_loop/sessions/${MIRROR_ROOT_ID}/raw/0001_outer/eval/report.json`,
  );
  assert.deepEqual([resolved.exists, resolved.status], [false, "absent"]);
});
