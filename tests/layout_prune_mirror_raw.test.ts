// The layout a session records in its session.json decides whether its `raw/` is prunable output,
// never the presence of the directory: prune-raw and the reference resolver treat `raw/` as
// prunable only in folded sessions. A mirror session has no raw/ area: a `raw/` in it is an
// ordinary directory, kept by prune-raw (reported as `mirror_layout`) and resolved as present or
// absent, never pruned; a session whose session.json cannot be read keeps its raw/.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  LogicalReferenceResolver,
  pruneRaw,
  type PruneReport,
  PRUNING_PREFIX,
  readSessionLayout,
} from "../layout.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import { newRepo, writeText } from "./layout_fixtures.ts";
import {
  buildMirrorTree,
  MIRROR_ROOT_ID,
  type MirrorTree,
  stopMirrorRoot,
} from "./fixtures/mirror_tree.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";

async function idleMirror(): Promise<{ fs: MemoryFs; tree: MirrorTree }> {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  await stopMirrorRoot(fs, tree);
  return { fs, tree };
}

/** A mirror root whose `raw/` holds what looks like a raw attempt directory (an agent's notes). */
async function mirrorWithRaw(): Promise<{ fs: MemoryFs; tree: MirrorTree; raw: string }> {
  const { fs, tree } = await idleMirror();
  const raw = `${tree.rootDir}/raw`;
  await fs.mkdir(`${raw}/0001_outer`, { recursive: true });
  await writeText(fs, `${raw}/0001_outer/audit.md`, "# durable audit\n");
  return { fs, tree, raw };
}

function skippedFor(report: PruneReport, path: string): string | undefined {
  return report.skipped.find((skip) => skip.path === path)?.reason;
}

test("prune-raw never removes anything in a mirror session's raw/, and reports it kept", async () => {
  const { fs, tree, raw } = await mirrorWithRaw();
  assert.equal(await readSessionLayout(fs, tree.rootDir), "mirror");
  // Not even what looks like a leftover of an interrupted prune: no prune put it there.
  await fs.mkdir(`${raw}/${PRUNING_PREFIX}1a2b3c4d-0000_outer`);
  await writeText(fs, `${raw}/${PRUNING_PREFIX}1a2b3c4d-0000_outer/notes.md`, "notes\n");
  const before = fs.snapshotTree("/");
  for (const options of [{ dryRun: true }, {}, { sessionId: MIRROR_ROOT_ID }]) {
    const report = await pruneRaw(fs, tree.loopyRoot, options);
    assert.deepEqual(report.removed, [], JSON.stringify(options));
    assert.equal(skippedFor(report, raw), "mirror_layout", JSON.stringify(options));
    assert.deepEqual(fs.snapshotTree("/"), before, JSON.stringify(options));
  }
  // With the legacy traces too: the traces go, the session's raw/ stays.
  const report = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
  assert.ok(report.removed.some((entry) => entry.kind === "legacy_traces"));
  assert.ok(report.removed.every((entry) => !entry.path.startsWith(`${raw}/`)));
  assert.equal(skippedFor(report, raw), "mirror_layout");
  assert.ok((await fs.lstat(`${raw}/0001_outer/audit.md`)).kind === "file");
});

test("the prune-raw command keeps a mirror session's raw/ and says why", async () => {
  const { fs, raw } = await mirrorWithRaw();
  const { io, out } = memoryIo(fs, "/repo", Date.now());
  const code = await runCli(["prune-raw"], io);
  assert.equal(code, 0);
  assert.match(out(), new RegExp(`skipped ${raw}: mirror_layout`));
  assert.match(out(), /pruned 0 /);
  assert.deepEqual((await fs.readDir(raw)).map((entry) => entry.name), ["0001_outer"]);
});

test("a session whose session.json cannot be read keeps its raw/: its layout is unknown", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const leftover = `${tree.root.rawDir}/${PRUNING_PREFIX}1a2b3c4d-0000_outer`;
  await fs.mkdir(leftover);
  const rootRaw = await fs.readDir(tree.root.rawDir);
  await writeText(fs, tree.root.sessionJson, "{ not json");
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.equal(skippedFor(report, tree.root.rawDir), "manifest_unreadable");
  assert.deepEqual(await fs.readDir(tree.root.rawDir), rootRaw);
  // The child's (folded, readable) finished attempt still goes.
  assert.deepEqual(report.removed.map((entry) => entry.path), [`${tree.child.rawDir}/0001_leaf`]);

  // A session.json copied from another session says nothing of this directory's layout.
  const fs2 = await newRepo();
  const tree2 = await buildFoldedTree(fs2);
  const childManifest = await fs2.readFile(tree2.child.sessionJson);
  const rootRaw2 = await fs2.readDir(tree2.root.rawDir);
  await fs2.writeFile(tree2.root.sessionJson, childManifest);
  const report2 = await pruneRaw(fs2, tree2.loopyRoot);
  assert.equal(skippedFor(report2, tree2.root.rawDir), "manifest_unreadable");
  assert.deepEqual(await fs2.readDir(tree2.root.rawDir), rootRaw2);
});

test("in a mirror session a session:/raw/ reference is present or absent, never pruned", async () => {
  const { fs, tree, raw } = await mirrorWithRaw();
  await fs.mkdir(`${raw}/${PRUNING_PREFIX}1a2b3c4d-0000_outer`);
  await writeText(fs, `${raw}/${PRUNING_PREFIX}1a2b3c4d-0000_outer/notes.md`, "notes\n");
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: MIRROR_ROOT_ID,
  });
  assert.equal(resolver.layout, "mirror");
  const audit = await resolver.resolve("session:/raw/0001_outer/audit.md");
  assert.equal(audit.status, "present");
  const never = await resolver.resolve("session:/raw/0042_outer/never-written.md");
  assert.equal(never.status, "absent");
  assert.equal(never.exists, false);
  const notes = await resolver.resolve(
    `session:/raw/${PRUNING_PREFIX}1a2b3c4d-0000_outer/notes.md`,
  );
  assert.equal(notes.status, "present");
  assert.equal(notes.exists, true);
  await fs.remove(`${raw}/0001_outer`, { recursive: true });
  assert.equal((await resolver.resolve("session:/raw/0001_outer/audit.md")).status, "absent");
  // The same target named from the repository.
  const fromRepo = await resolver.resolve(
    `repo:/.loopy_loop/sessions/${MIRROR_ROOT_ID}/raw/0001_outer/audit.md`,
  );
  assert.equal(fromRepo.status, "absent");
});

test("in a folded session a never-written raw target is still pruned output", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: tree.rootId,
  });
  assert.equal((await resolver.resolve("session:/raw/0042_outer/x.md")).status, "pruned");
  assert.equal((await resolver.resolve("session:/iterations/0042_outer/x.md")).status, "absent");
});
