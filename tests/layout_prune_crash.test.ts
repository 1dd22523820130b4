// Crash and fault loops over prune-raw (RELIABILITY.md): crash (or fail) at every operation, then
// check that the durable tree is intact and every prunable entry is either whole or gone (a
// `.pruning-*` leftover counts as gone), and that pruning again completes the job.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { LogicalReferenceResolver, pruneRaw, PRUNING_PREFIX } from "../layout.ts";
import { newRepo, writeJson } from "./layout_fixtures.ts";
import { crashAtEveryOperation, failAtEveryOperation } from "./_crash.ts";
import { buildFoldedTree, type FoldedTree } from "./fixtures/folded_tree.ts";
import { buildMirrorTree, MIRROR_ROOT_ID, type MirrorTree } from "./fixtures/mirror_tree.ts";
import { seedsAfter } from "./_soak.ts";

// Two seeds per crash point: each recovers a different prefix of the unsynced journal.
const SEEDS = seedsAfter([1, 2]);

/** The snapshot keys (relative to `/`) of everything below `dir`, with their values. */
function below(snapshot: Record<string, string>, dir: string): Record<string, string> {
  const prefix = `${dir.slice(1)}/`;
  return Object.fromEntries(Object.entries(snapshot).filter(([key]) => key.startsWith(prefix)));
}

/** The snapshot without the entries below any of `dirs` and without prune leftovers. */
function without(
  snapshot: Record<string, string>,
  dirs: readonly string[],
): Record<string, string> {
  const prefixes = dirs.map((dir) => dir.slice(1));
  return Object.fromEntries(
    Object.entries(snapshot).filter(([key]) =>
      !key.includes(PRUNING_PREFIX) &&
      !prefixes.some((prefix) => key === prefix || key.startsWith(`${prefix}/`))
    ),
  );
}

function leftovers(snapshot: Record<string, string>): string[] {
  return Object.keys(snapshot).filter((key) => key.split("/").at(-1)?.startsWith(PRUNING_PREFIX));
}

/**
 * Checks the invariant: outside the prunable entries nothing changed, and each prunable entry is
 * exactly as before or entirely gone. Returns how many are gone.
 */
function checkWholeOrGone(
  baseline: Record<string, string>,
  recovered: Record<string, string>,
  prunable: readonly string[],
  label: string,
): number {
  assert.deepEqual(without(recovered, prunable), without(baseline, prunable), label);
  let gone = 0;
  for (const dir of prunable) {
    const key = dir.slice(1);
    const was = { [key]: baseline[key] as string, ...below(baseline, dir) };
    const now = recovered[key] === undefined
      ? {}
      : { [key]: recovered[key], ...below(recovered, dir) };
    if (Object.keys(now).length === 0) gone++;
    else assert.deepEqual(now, was, `${label}: ${dir} is torn`);
  }
  return gone;
}

async function foldedBaseline(): Promise<{ fs: MemoryFs; tree: FoldedTree }> {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  fs.syncAll();
  return { fs, tree };
}

async function assertReferencesResolve(
  fs: MemoryFs,
  tree: FoldedTree,
  label: string,
): Promise<void> {
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: tree.rootId,
  });
  const report = await resolver.resolve("session:/raw/0002_outer/eval/report.json");
  assert.equal(report.status, "pruned", label);
  const audit = await resolver.resolve("session:/iterations/0002_outer/acceptance-audit.md");
  assert.equal(audit.status, "present", label);
}

test("a crash at any step of prune leaves every raw directory whole or gone, and a rerun finishes", async () => {
  const { fs: baseline, tree } = await foldedBaseline();
  const before = baseline.snapshotTree("/");
  let sawPartial = false;
  const points = await crashAtEveryOperation({
    baseline,
    seeds: SEEDS,
    run: async (fs) => {
      await pruneRaw(fs, tree.loopyRoot);
    },
    check: async (recovered, info) => {
      const label = `crash after ${info.n}, seed ${info.seed}`;
      const gone = checkWholeOrGone(before, recovered.snapshotTree("/"), tree.prunable, label);
      if (gone > 0 && gone < tree.prunable.length) sawPartial = true;
      if (info.resolved) {
        assert.equal(gone, tree.prunable.length, label);
        assert.deepEqual(leftovers(recovered.snapshotTree("/")), [], label);
      }
      await pruneRaw(recovered, tree.loopyRoot);
      const after = recovered.snapshotTree("/");
      assert.equal(checkWholeOrGone(before, after, tree.prunable, label), tree.prunable.length);
      assert.deepEqual(leftovers(after), [], `${label}: the rerun removes leftovers`);
      assert.ok(after[tree.running.slice(1)] !== undefined, `${label}: running attempt kept`);
      await assertReferencesResolve(recovered, tree, label);
    },
  });
  assert.ok(points > 20, `the loop covered ${points} crash points`);
  assert.ok(sawPartial, "some crash point interrupted the prune between two directories");
});

test("a second crash while a crashed prune is finished again still leaves a consistent tree", async () => {
  const { fs: baseline, tree } = await foldedBaseline();
  const before = baseline.snapshotTree("/");
  // Find a crashed state with a renamed-away leftover: the interesting place to crash again.
  let interrupted: MemoryFs | undefined;
  for (let n = 1; interrupted === undefined; n++) {
    const fs = baseline.clone();
    fs.crashAfter(n);
    await pruneRaw(fs, tree.loopyRoot).catch(() => undefined);
    assert.ok(fs.crashTriggered, "the prune finished before any leftover was durable");
    const recovered = fs.crash({ seed: 1, extraJournal: "none" });
    if (leftovers(recovered.snapshotTree("/")).length > 0) interrupted = recovered;
  }
  interrupted.syncAll();
  await crashAtEveryOperation({
    baseline: interrupted,
    seeds: [3],
    run: async (fs) => {
      await pruneRaw(fs, tree.loopyRoot);
    },
    check: async (recovered, info) => {
      const label = `second crash after ${info.n}, seed ${info.seed}`;
      checkWholeOrGone(before, recovered.snapshotTree("/"), tree.prunable, label);
      await pruneRaw(recovered, tree.loopyRoot);
      const after = recovered.snapshotTree("/");
      assert.equal(checkWholeOrGone(before, after, tree.prunable, label), tree.prunable.length);
      assert.deepEqual(leftovers(after), [], label);
    },
  });
});

test("an I/O error at any step of prune fails the call, leaves the tree consistent, and a rerun finishes", async () => {
  const { fs: baseline, tree } = await foldedBaseline();
  const before = baseline.snapshotTree("/");
  for (const persistent of [false, true]) {
    let failures = 0;
    await failAtEveryOperation({
      baseline,
      error: "EIO",
      persistent,
      run: (fs) => pruneRaw(fs, tree.loopyRoot),
      check: async (fs, info) => {
        const label = `${persistent ? "persistent" : "transient"} EIO at ${info.n}`;
        if (!info.resolved) {
          failures++;
          assert.ok(info.error instanceof FsIoError, `${label}: ${String(info.error)}`);
        }
        checkWholeOrGone(before, fs.snapshotTree("/"), tree.prunable, label);
        await pruneRaw(fs, tree.loopyRoot);
        const after = fs.snapshotTree("/");
        assert.equal(checkWholeOrGone(before, after, tree.prunable, label), tree.prunable.length);
        assert.deepEqual(leftovers(after), [], label);
      },
    });
    assert.ok(failures > 20, `${failures} fault points failed the call`);
  }
});

async function mirrorBaseline(): Promise<{ fs: MemoryFs; tree: MirrorTree }> {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  // The root has stopped: nothing protects its traces any more.
  await writeJson(fs, `${tree.rootDir}/state.json`, {
    schema_version: 2,
    session_id: MIRROR_ROOT_ID,
    status: "stopped",
    current_task: null,
  });
  fs.syncAll();
  return { fs, tree };
}

test("a crash at any step of a legacy-trace prune leaves each trace tree and outbox record whole or gone", async () => {
  const { fs: baseline, tree } = await mirrorBaseline();
  const before = baseline.snapshotTree("/");
  const prunable = [
    `${tree.tracesDir}/${MIRROR_ROOT_ID}`,
    ...(await baseline.readDir(tree.outboxDir)).map((entry) => `${tree.outboxDir}/${entry.name}`),
  ];
  assert.equal(prunable.length, 3);
  await crashAtEveryOperation({
    baseline,
    seeds: [2],
    run: async (fs) => {
      await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
    },
    check: async (recovered, info) => {
      const label = `crash after ${info.n}, seed ${info.seed}`;
      const gone = checkWholeOrGone(before, recovered.snapshotTree("/"), prunable, label);
      if (info.resolved) assert.equal(gone, prunable.length, label);
      await pruneRaw(recovered, tree.loopyRoot, { legacyTraces: true });
      const after = recovered.snapshotTree("/");
      assert.equal(checkWholeOrGone(before, after, prunable, label), prunable.length, label);
      assert.deepEqual(leftovers(after), [], label);
    },
  });
});
