// prune-raw --legacy-traces never removes the traces of a tree in which a session cannot be
// identified (a directory without a regular session.json, or one behind a symlink): what that
// session runs is unknown, so the tree is kept and reported (`manifest_unreadable`, exit 1), as a
// session whose session.json cannot be read keeps its raw/. A tree whose sessions are all known
// and idle still goes, and so does a trace tree with no session directory at all.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { pruneRaw, type PruneReport } from "../layout.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import { newRepo, writeJson } from "./layout_fixtures.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";
import { hookedFs } from "./_hooks.ts";
import { FsIoError, PermissionDenied } from "../src/port/errors.ts";
import {
  buildMirrorTree,
  MIRROR_CHILD_ID,
  MIRROR_ROOT_ID,
  type MirrorTree,
  stopMirrorRoot,
} from "./fixtures/mirror_tree.ts";

async function exists(fs: MemoryFs, path: string): Promise<boolean> {
  return await fs.lstat(path).then(() => true, () => false);
}

function reasonFor(report: PruneReport, path: string): string | undefined {
  return report.skipped.find((skip) => skip.path === path)?.reason;
}

/** The mirror tree with its root stopped and its child running. */
async function childRunning(): Promise<{ fs: MemoryFs; tree: MirrorTree }> {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  await stopMirrorRoot(fs, tree);
  await writeJson(fs, `${tree.childDir}/state.json`, {
    schema_version: 2,
    session_id: MIRROR_CHILD_ID,
    status: "running",
    state_revision: 4,
    current_task: { workflow_id: "leaf", iteration: 1, attempt_id: "d00d00000001" },
    active_child_session_id: null,
  });
  return { fs, tree };
}

test("the traces of a running mirror root whose session.json is missing, a directory or a link are kept and reported", async () => {
  for (const damage of ["missing", "directory", "symlink"] as const) {
    const fs = await newRepo();
    const tree = await buildMirrorTree(fs); // the root runs
    const manifest = `${tree.rootDir}/session.json`;
    const bytes = await fs.readFile(manifest);
    await fs.remove(manifest);
    if (damage === "directory") await fs.mkdir(manifest);
    if (damage === "symlink") {
      await fs.writeFile(`${tree.repoRoot}/session.json.copy`, bytes);
      await fs.symlink(`${tree.repoRoot}/session.json.copy`, manifest);
    }
    const traces = `${tree.loopyRoot}/traces/${MIRROR_ROOT_ID}`;
    const report = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
    assert.equal(reasonFor(report, traces), "manifest_unreadable", damage);
    assert.ok(!report.removed.some((entry) => entry.kind === "legacy_traces"), damage);
    const detail = report.skipped.find((skip) => skip.path === traces)?.detail ?? "";
    assert.ok(detail.includes(tree.rootDir), `${damage}: ${detail}`);
    assert.ok(await exists(fs, traces), damage);
  }
});

test("a running mirror child whose session.json is missing keeps its root's traces; once identified and idle, they go", async () => {
  const { fs, tree } = await childRunning();
  const traces = `${tree.loopyRoot}/traces/${MIRROR_ROOT_ID}`;
  const present = await pruneRaw(fs.clone(), tree.loopyRoot, { legacyTraces: true, dryRun: true });
  assert.equal(reasonFor(present, traces), "running_attempt");
  const manifest = await fs.readFile(`${tree.childDir}/session.json`);
  await fs.remove(`${tree.childDir}/session.json`);
  const missing = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
  assert.equal(reasonFor(missing, traces), "manifest_unreadable");
  assert.ok(await exists(fs, traces));
  // The CLI lists it with the error and exits 1.
  const { io, out } = memoryIo(fs, tree.repoRoot, Date.parse("2026-05-01T00:00:00Z"));
  assert.equal(await runCli(["prune-raw", "--legacy-traces"], io), 1);
  assert.match(
    out(),
    /manifest_unreadable \(What the tree runs is unknown, .* has no session\.json\)/,
  );
  // Restored and stopped: nothing of the tree is unknown or running any more.
  await fs.writeFile(`${tree.childDir}/session.json`, manifest);
  await writeJson(fs, `${tree.childDir}/state.json`, {
    schema_version: 2,
    session_id: MIRROR_CHILD_ID,
    status: "stopped",
    state_revision: 5,
    current_task: null,
    active_child_session_id: null,
  });
  const idle = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
  assert.deepEqual(
    idle.removed.filter((entry) => entry.kind === "legacy_traces").map((entry) => entry.path),
    [traces],
  );
});

test("a trace tree with no session directory goes; a symlinked sessions/ keeps every tree", async () => {
  const { fs, tree } = await childRunning();
  const orphan = `${tree.loopyRoot}/traces/20260101_000000_000000000000_00000000`;
  await fs.mkdir(`${orphan}/sessions`, { recursive: true });
  const report = await pruneRaw(fs.clone(), tree.loopyRoot, { legacyTraces: true, dryRun: true });
  assert.ok(report.removed.some((entry) => entry.path === orphan));
  // sessions/ behind a link: no session of any tree can be seen, so none of the trees goes.
  const sessions = `${tree.loopyRoot}/sessions`;
  await fs.rename(sessions, `${tree.repoRoot}/elsewhere`);
  await fs.symlink(`${tree.repoRoot}/elsewhere`, sessions);
  const linked = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
  assert.equal(reasonFor(linked, sessions), "symlink");
  assert.equal(reasonFor(linked, orphan), "manifest_unreadable");
  assert.equal(
    reasonFor(linked, `${tree.loopyRoot}/traces/${MIRROR_ROOT_ID}`),
    "manifest_unreadable",
  );
  assert.ok(await exists(fs, orphan));
});

test("a directory where a session would be without session.json is reported once, and what it holds kept", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  // The root's manifest is gone: neither its raw/ nor its child's (below it) is pruned, and the
  // directory is said once, with exit 1.
  await fs.remove(tree.root.sessionJson);
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.deepEqual(report.removed, []);
  assert.deepEqual(report.skipped.map((skip) => [skip.path, skip.reason]), [
    [tree.root.dir, "manifest_unreadable"],
  ]);
  assert.match(report.skipped[0]?.detail ?? "", /it has no session\.json/);
  for (const dir of tree.prunable) assert.ok(await exists(fs, dir), dir);
  const { io, out } = memoryIo(fs, tree.repoRoot, Date.now());
  assert.equal(await runCli(["prune-raw"], io), 1);
  assert.match(out(), /manifest_unreadable/);
});

test("a session.json or children/ the filesystem refuses to show keeps that part of the tree and stops nothing else", async () => {
  for (const refused of ["lstat", "readDir"] as const) {
    const fs = await newRepo();
    const tree = await buildFoldedTree(fs);
    const path = refused === "lstat" ? tree.child.sessionJson : `${tree.root.dir}/children`;
    const denying = hookedFs(fs, {
      before: (method, args) => {
        if (method === refused && args[0] === path) throw new PermissionDenied(method, path);
      },
    });
    const report = await pruneRaw(denying, tree.loopyRoot);
    const kept = refused === "lstat" ? tree.child.dir : path;
    assert.equal(reasonFor(report, kept), "manifest_unreadable", refused);
    assert.match(
      report.skipped.find((skip) => skip.path === kept)?.detail ?? "",
      /Permission denied/,
    );
    // The root's own finished attempts still go; the child's raw output is kept.
    assert.deepEqual(
      report.removed.map((entry) => entry.path).sort(),
      [...tree.prunable.slice(0, 3)].sort(),
      refused,
    );
    assert.ok(await exists(fs, `${tree.child.rawDir}/0001_leaf`), refused);
    // An I/O error there fails the call, as everywhere: a rerun finishes the job.
    const failing = hookedFs(fs, {
      before: (method, args) => {
        if (method === refused && args[0] === path) {
          throw new FsIoError("EIO", method, path, "I/O error");
        }
      },
    });
    await assert.rejects(pruneRaw(failing, tree.loopyRoot), FsIoError);
  }
});
