// Readers of the folded layout over records of the wrong kind: a record path that is a directory,
// or that sits under a regular file, is reported as the typed error or status each reader
// documents, never as the port's raw IsADirectory / NotADirectory.
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadSessionTree, LogicalReferenceResolver, pruneRaw, TopologyError } from "../layout.ts";
import { runLayout } from "../src/cli/layout.ts";
import { memoryIo } from "./_cli_io.ts";
import { newRepo, newRoot } from "./layout_fixtures.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";

test("a session.json that is a directory confines the damage to its own tree", async () => {
  const fs = await newRepo();
  const damaged = await newRoot(fs, "First goal");
  const healthy = await newRoot(fs, "Second goal");
  const manifest = `${damaged.dir}/session.json`;
  await fs.remove(manifest);
  await fs.mkdir(manifest);
  const tree = await loadSessionTree(fs, "/repo", healthy.sessionId);
  assert.equal(tree.rootSessionId, healthy.sessionId);
  await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: healthy.sessionId,
  });
  await pruneRaw(fs, "/repo/.loopy_loop", { dryRun: true, sessionId: healthy.sessionId });
  const { io } = memoryIo(fs, "/repo", 0);
  assert.equal(await runLayout(io, ["show", healthy.sessionId]), 0);
  await assert.rejects(
    loadSessionTree(fs, "/repo", damaged.sessionId),
    (error: unknown) =>
      error instanceof TopologyError && error.message.includes("not a regular file") &&
      error.message.includes(manifest),
  );
});

test("a child's session.json or parent.json that is a directory is a TopologyError", async () => {
  for (const name of ["session.json", "parent.json"]) {
    const fs = await newRepo();
    const tree = await buildFoldedTree(fs);
    const file = `${tree.child.dir}/${name}`;
    await fs.remove(file);
    await fs.mkdir(file);
    await assert.rejects(
      loadSessionTree(fs, "/repo", tree.childId),
      (error: unknown) =>
        error instanceof TopologyError && error.message.includes(file) &&
        error.message.includes("not a regular file"),
      name,
    );
  }
});
