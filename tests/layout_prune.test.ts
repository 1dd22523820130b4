// prune-raw over the folded layout: what is removed, what is kept and why, the durable tree and
// every reference in it after pruning, the age and session filters, hostile trees, dry runs.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  createAttemptArtifacts,
  findLoopyRoot,
  LayoutOptionError,
  LogicalReferenceResolver,
  LoopyRootError,
  pruneRaw,
  type PruneReport,
  PRUNING_PREFIX,
  readTraceRef,
  type ResolvedReference,
  UnknownSessionError,
} from "../layout.ts";
import { deterministic, newRepo, writeJson, writeText } from "./layout_fixtures.ts";
import { buildFoldedTree, type FoldedTree } from "./fixtures/folded_tree.ts";
import { collectReferences } from "./fixtures/references.ts";
import { hookedFs } from "./_hooks.ts";
import { FsIoError, NotFound, PermissionDenied } from "../src/port/errors.ts";
import { seedsAfter } from "./_soak.ts";

const DAY = 86_400_000;

async function folded(): Promise<{ fs: MemoryFs; tree: FoldedTree }> {
  const fs = await newRepo();
  return { fs, tree: await buildFoldedTree(fs) };
}

async function exists(fs: MemoryFs, path: string): Promise<boolean> {
  try {
    await fs.lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** The live tree minus everything below a session's `raw/`: the durable tree. */
function durable(snapshot: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(snapshot).filter(([path]) => !/(^|\/)raw\/./.test(path)),
  );
}

/** Sums the sizes of the regular files below `dir` from a `snapshotTree` of `/`. */
async function bytesBelow(fs: MemoryFs, dir: string): Promise<number> {
  let total = 0;
  const visit = async (path: string): Promise<void> => {
    for (const entry of await fs.readDir(path)) {
      const child = `${path}/${entry.name}`;
      if (entry.kind === "directory") await visit(child);
      else if (entry.kind === "file") total += (await fs.readFile(child)).length;
    }
  };
  await visit(dir);
  return total;
}

function removedPaths(report: PruneReport): string[] {
  return report.removed.map((entry) => entry.path).sort();
}

function skippedFor(report: PruneReport, path: string): string | undefined {
  return report.skipped.find((skip) => skip.path === path)?.reason;
}

test("prune removes every finished raw attempt directory, keeps raw/ itself and the running attempt", async () => {
  const { fs, tree } = await folded();
  const expectedBytes = (await Promise.all(tree.prunable.map((dir) => bytesBelow(fs, dir))))
    .reduce((a, b) => a + b, 0);
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.deepEqual(removedPaths(report), [...tree.prunable].sort());
  assert.ok(report.removed.every((entry) => entry.kind === "raw_attempt"));
  assert.equal(report.count, tree.prunable.length);
  assert.equal(report.bytes, expectedBytes);
  assert.ok(report.bytes > 0);
  assert.equal(report.dryRun, false);
  for (const dir of tree.prunable) assert.equal(await exists(fs, dir), false, dir);
  assert.deepEqual(await fs.readDir(tree.root.rawDir), []);
  assert.ok(await exists(fs, `${tree.running}/eval/report.json`));
  assert.equal(skippedFor(report, tree.running), "running_attempt");
  // Nothing is left behind under a hidden name.
  const leftovers = Object.keys(fs.snapshotTree("/")).filter((p) => p.includes(PRUNING_PREFIX));
  assert.deepEqual(leftovers, []);
});

test("a dry run reports the same plan as the prune and changes nothing", async () => {
  const { fs, tree } = await folded();
  const before = fs.snapshotTree("/");
  const plan = await pruneRaw(fs, tree.loopyRoot, { dryRun: true });
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.equal(plan.dryRun, true);
  const progress: string[] = [];
  const done = await pruneRaw(fs, tree.loopyRoot, {
    onProgress: (count, total) => progress.push(`${count}/${total}`),
  });
  assert.deepEqual(progress, ["0/4", "1/4", "2/4", "3/4", "4/4"]);
  assert.deepEqual(done.removed, plan.removed);
  assert.deepEqual(done.skipped, plan.skipped);
  assert.deepEqual([done.count, done.bytes], [plan.count, plan.bytes]);
  const again = await pruneRaw(fs, tree.loopyRoot, { dryRun: true });
  assert.equal(again.count, 0, "a second prune has nothing left to remove");
});

test("the durable tree is untouched and every reference it cites still resolves after pruning", async () => {
  const { fs, tree } = await folded();
  const before = durable(fs.snapshotTree("/"));
  await pruneRaw(fs, tree.loopyRoot);
  assert.deepEqual(durable(fs.snapshotTree("/")), before);

  const statuses = new Map<string, ResolvedReference["status"]>();
  for (const [sessionId, dir] of [[tree.rootId, tree.root.dir], [tree.childId, tree.child.dir]]) {
    const resolver = await LogicalReferenceResolver.forSession(fs, {
      repoRoot: tree.repoRoot,
      sessionId: sessionId as string,
    });
    const cited = await collectReferences(fs, dir as string);
    assert.ok(cited.length > 5, "the fixture cites references");
    for (const { file, ref } of cited) {
      const resolved = await resolver.resolve(ref);
      const inRaw = /^session:\/raw\/\d{4}_[a-z]+(\/|$)/.test(ref);
      const running = sessionId === tree.childId && ref.startsWith("session:/raw/0002_leaf");
      const expected = running ? "present" : inRaw ? "pruned" : "present";
      assert.equal(resolved.status, expected, `${ref} cited in ${file}`);
      assert.equal(resolved.exists, expected === "present", ref);
      statuses.set(`${sessionId} ${ref}`, resolved.status);
    }
  }
  // The citations that matter most are among them.
  assert.equal(statuses.get(`${tree.rootId} session:/raw/0002_outer/eval/report.json`), "pruned");
  assert.equal(
    statuses.get(`${tree.rootId} session:/iterations/0002_outer/acceptance-audit.md`),
    "present",
  );
  assert.equal(statuses.get(`${tree.rootId} session:/eval_receipts/ev-0002.json`), "present");
  // trace_ref.json still names its raw directory; the resolver says it was pruned.
  const traceRef = await readTraceRef(fs, tree.root.attempt(1, "outer"));
  assert.ok("raw_dir_ref" in traceRef);
  const root = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: tree.rootId,
  });
  const raw = await root.resolve(traceRef.raw_dir_ref);
  assert.deepEqual([raw.exists, raw.status], [false, "pruned"]);
  // A plain absent durable file is absent, not pruned.
  assert.equal((await root.resolve("session:/iterations/0001_outer/missing.md")).status, "absent");
});

test("the age limit measures each entry's own modification time", async () => {
  const { fs, tree } = await folded();
  const now = Date.parse("2026-05-01T00:00:00Z");
  const [first, second, third, childFirst] = tree.prunable as [string, string, string, string];
  await fs.utime(first, now - 10 * DAY);
  await fs.utime(childFirst, now - 6 * DAY);
  // Old contents do not make a recently modified entry old.
  await fs.utime(second, now - 1 * DAY);
  await fs.utime(`${second}/eval/report.json`, now - 30 * DAY);
  await fs.utime(third, now - 4 * DAY);
  await fs.utime(tree.running, now - 30 * DAY);
  const report = await pruneRaw(fs, tree.loopyRoot, {
    olderThanDays: 5,
    now: () => new Date(now),
  });
  assert.deepEqual(removedPaths(report), [first, childFirst].sort());
  assert.equal(skippedFor(report, second), "too_recent");
  assert.equal(skippedFor(report, third), "too_recent");
  assert.equal(skippedFor(report, tree.running), "running_attempt");
  const zero = await pruneRaw(fs, tree.loopyRoot, { olderThanDays: 0, now: () => new Date(now) });
  assert.deepEqual(removedPaths(zero), [second, third].sort());
});

test("a session filter prunes only that session's raw output, not its children's", async () => {
  const { fs, tree } = await folded();
  const childOnly = await pruneRaw(fs, tree.loopyRoot, { sessionId: tree.childId });
  assert.deepEqual(removedPaths(childOnly), [`${tree.child.rawDir}/0001_leaf`]);
  for (const dir of tree.prunable.slice(0, 3)) assert.ok(await exists(fs, dir), dir);
  const fresh = await folded();
  const rootOnly = await pruneRaw(fresh.fs, fresh.tree.loopyRoot, {
    sessionId: fresh.tree.rootId,
  });
  const childRaw = `${fresh.tree.child.rawDir}/0001_leaf`;
  assert.deepEqual(
    removedPaths(rootOnly),
    fresh.tree.prunable.filter((dir) => dir !== childRaw).sort(),
  );
  assert.ok(await exists(fresh.fs, childRaw), "the child's raw output stays");
  await assert.rejects(
    pruneRaw(fs, tree.loopyRoot, { sessionId: "404_missing" }),
    UnknownSessionError,
  );
});

test("hostile raw entries are reported and never followed", async () => {
  const { fs, tree } = await folded();
  await fs.mkdir("/outside/dir", { recursive: true });
  await writeText(fs, "/outside/dir/secret.txt", "secret");
  await writeText(fs, "/outside/file.txt", "file");
  const raw = tree.root.rawDir;
  // A symlink named like a raw attempt directory, pointing outside.
  await fs.symlink("/outside/dir", `${raw}/0009_outer`);
  // A file named like a raw attempt directory, and an entry that is not an attempt at all.
  await writeText(fs, `${raw}/0010_outer`, "not a directory");
  await fs.mkdir(`${raw}/scratch`);
  // A symlink inside an attempt that is pruned: the link goes, its target stays.
  await fs.symlink("/outside/file.txt", `${tree.prunable[0]}/harness/link.txt`);
  // The child's whole raw/ replaced by a link to a directory outside.
  await fs.remove(`${tree.child.rawDir}`, { recursive: true });
  await fs.symlink("/outside", tree.child.rawDir);
  // A symlinked session directory next to the real ones.
  await fs.mkdir("/elsewhere/777_fake/raw/0001_outer", { recursive: true });
  await writeJson(fs, "/elsewhere/777_fake/session.json", { session_id: "777_fake" });
  await fs.symlink("/elsewhere/777_fake", `${tree.loopyRoot}/sessions/777_fake`);
  const outsideBefore = fs.snapshotTree("/outside");
  const elsewhereBefore = fs.snapshotTree("/elsewhere");
  fs.resetCounter();

  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.equal(skippedFor(report, `${raw}/0009_outer`), "symlink");
  assert.equal(skippedFor(report, `${raw}/0010_outer`), "not_a_directory");
  assert.equal(skippedFor(report, `${raw}/scratch`), "unrecognized_name");
  assert.equal(skippedFor(report, tree.child.rawDir), "symlink");
  assert.equal(skippedFor(report, `${tree.loopyRoot}/sessions/777_fake`), "symlink");
  assert.deepEqual(removedPaths(report), tree.prunable.slice(0, 3).sort());
  assert.deepEqual(fs.snapshotTree("/outside"), outsideBefore);
  assert.deepEqual(fs.snapshotTree("/elsewhere"), elsewhereBefore);
  assert.equal((await fs.lstat(`${raw}/0009_outer`)).kind, "symlink");
  assert.equal((await fs.lstat(`${raw}/0010_outer`)).kind, "file");
  // Nothing outside .loopy_loop/ was renamed or removed.
  assert.ok(fs.operationLog.some((op) => op.op === "remove"));
  for (const op of fs.operationLog) {
    if (op.op === "remove" || op.op === "rename") {
      assert.ok(op.path.startsWith(`${tree.loopyRoot}/`), `${op.op} ${op.path}`);
    }
  }
});

test("a session whose state cannot be read keeps all its raw output, not a prune's leftover", async () => {
  const { fs, tree } = await folded();
  await writeText(fs, tree.child.stateJson, "{ not json");
  // A leftover of an interrupted prune is already gone for readers: it goes whatever runs.
  const leftover = `${tree.child.rawDir}/${PRUNING_PREFIX}1a2b3c4d-0000_leaf`;
  await fs.mkdir(leftover);
  await writeText(fs, `${leftover}/run.json`, "{}");
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.deepEqual(removedPaths(report), [...tree.prunable.slice(0, 3), leftover].sort());
  assert.equal(await exists(fs, leftover), false);
  assert.equal(skippedFor(report, `${tree.child.rawDir}/0001_leaf`), "state_unreadable");
  assert.equal(skippedFor(report, tree.running), "state_unreadable");
  // Once the session stops, its last attempt is no longer protected.
  await writeJson(fs, tree.child.stateJson, { schema_version: 2, status: "stopped" });
  const after = await pruneRaw(fs, tree.loopyRoot);
  assert.deepEqual(removedPaths(after), [`${tree.child.rawDir}/0001_leaf`, tree.running].sort());
});

test("a state.json copied from another session protects nothing of this one's and releases nothing: its raw output is kept", async () => {
  const { fs, tree } = await folded();
  // The root's (stopped) state in the running child's place: read as the child's own, it would
  // let the running attempt's raw output go.
  const rootState = JSON.parse(new TextDecoder().decode(await fs.readFile(tree.root.stateJson)));
  await writeJson(fs, tree.child.stateJson, {
    ...rootState,
    status: "stopped",
    current_task: null,
  });
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.equal(skippedFor(report, tree.running), "state_unreadable");
  assert.equal(skippedFor(report, `${tree.child.rawDir}/0001_leaf`), "state_unreadable");
  assert.ok(await exists(fs, tree.running));
  assert.deepEqual(removedPaths(report), [...tree.prunable.slice(0, 3)].sort());
});

test("a state that turns unreadable after the plan keeps the raw attempts, not a prune's leftover", async () => {
  const { fs, tree } = await folded();
  const leftover = `${tree.root.rawDir}/${PRUNING_PREFIX}1a2b3c4d-0000_outer`;
  await fs.mkdir(leftover);
  const report = await pruneRaw(fs, tree.loopyRoot, {
    sessionId: tree.rootId,
    // Called once the plan is made, before anything is moved (MemoryFs writes at once).
    onProgress: (done) => {
      if (done === 0) void fs.writeFile(tree.root.stateJson, new TextEncoder().encode("{ no"));
    },
  });
  // Only the leftover goes (the child's raw output is not the root's).
  assert.deepEqual(removedPaths(report), [leftover]);
  for (const dir of tree.prunable.slice(0, 3)) {
    assert.equal(skippedFor(report, dir), "state_unreadable", dir);
    assert.ok(await exists(fs, dir), dir);
  }
});

test("bad options and a wrong root are refused before anything is touched", async () => {
  const { fs, tree } = await folded();
  const before = fs.snapshotTree("/");
  for (const olderThanDays of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
    await assert.rejects(pruneRaw(fs, tree.loopyRoot, { olderThanDays }), LayoutOptionError);
  }
  for (const sessionId of ["../escape", "", "a/b"]) {
    await assert.rejects(pruneRaw(fs, tree.loopyRoot, { sessionId }), LayoutOptionError);
  }
  await assert.rejects(pruneRaw(fs, tree.repoRoot), LoopyRootError);
  await assert.rejects(pruneRaw(fs, ".loopy_loop"), LoopyRootError);
  await fs.mkdir("/other");
  await fs.symlink(tree.loopyRoot, "/other/.loopy_loop");
  await assert.rejects(pruneRaw(fs, "/other/.loopy_loop"), LoopyRootError);
  await fs.remove("/other/.loopy_loop");
  const after = fs.snapshotTree("/");
  delete after["other"];
  assert.deepEqual(after, before);
});

test("a leftover of an interrupted prune is gone for readers and removed by the next prune", async () => {
  const { fs, tree } = await folded();
  const leftover = `${tree.root.rawDir}/${PRUNING_PREFIX}1a2b3c4d-0001_outer`;
  await fs.rename(tree.prunable[0] as string, leftover);
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: tree.rootId,
  });
  const hidden = await resolver.resolve(
    `session:/raw/${PRUNING_PREFIX}1a2b3c4d-0001_outer/eval/report.json`,
  );
  assert.deepEqual([hidden.exists, hidden.status], [false, "pruned"]);
  assert.equal((await resolver.resolve("session:/raw/0001_outer")).status, "pruned");
  const report = await pruneRaw(fs, tree.loopyRoot, { sessionId: tree.rootId });
  const entry = report.removed.find((item) => item.path === leftover);
  assert.equal(entry?.kind, "pruning_leftover");
  assert.equal(await exists(fs, leftover), false);
});

test("findLoopyRoot walks up to the nearest .loopy_loop directory like git finds .git", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/.loopy_loop/sessions", { recursive: true });
  await fs.mkdir("/repo/packages/app/src", { recursive: true });
  assert.equal(await findLoopyRoot(fs, "/repo/packages/app/src"), "/repo/.loopy_loop");
  assert.equal(await findLoopyRoot(fs, "/repo"), "/repo/.loopy_loop");
  await fs.mkdir("/repo/packages/app/.loopy_loop");
  assert.equal(await findLoopyRoot(fs, "/repo/packages/app/src"), "/repo/packages/app/.loopy_loop");
  await fs.mkdir("/plain/dir", { recursive: true });
  assert.equal(await findLoopyRoot(fs, "/plain/dir"), undefined);
  await fs.symlink("/repo/.loopy_loop", "/plain/.loopy_loop");
  await assert.rejects(findLoopyRoot(fs, "/plain/dir"), LoopyRootError);
  await assert.rejects(findLoopyRoot(fs, "relative/dir"), LoopyRootError);
});

test("pruning thousands of raw directories costs the same filesystem work per directory", async () => {
  const counts: number[] = [];
  let tenThousand: PruneReport | undefined;
  for (const n of [1_000, 4_000, 10_000]) {
    const fs = await newRepo();
    const tree = await buildFoldedTree(fs);
    const raw = tree.root.rawDir;
    for (let i = 10; i < 10 + n; i++) {
      const dir = `${raw}/${String(i).padStart(5, "0")}_outer`;
      await fs.mkdir(dir);
      await fs.writeFile(`${dir}/run.json`, new Uint8Array(8));
    }
    fs.resetCounter();
    const report = await pruneRaw(fs, tree.loopyRoot, { sessionId: tree.rootId });
    counts.push(fs.operationCount / n);
    assert.equal(report.count, n + 3);
    if (n === 10_000) tenThousand = report;
  }
  const [small, , large] = counts as [number, number, number];
  assert.ok(large < small * 1.2, `operations per directory grew: ${counts.join(", ")}`);
  assert.ok((tenThousand?.bytes ?? 0) >= 80_000);
});

test("a new attempt can be created where a pruned one was", async () => {
  const { fs, tree } = await folded();
  await pruneRaw(fs, tree.loopyRoot);
  const again = await createAttemptArtifacts(fs, tree.root, {
    iteration: 4,
    workflowId: "outer",
    attemptId: "a00000000004",
  }, { prompt: "Next\n", pathsMap: {}, ...deterministic() });
  assert.ok(await exists(fs, `${again.paths.rawDir}/eval`));
  const report = await pruneRaw(fs, tree.loopyRoot, { dryRun: true });
  assert.deepEqual(removedPaths(report), [again.paths.rawDir]);
});

test("two prunes running at once remove each directory once and never fail on each other", async () => {
  const { fs, tree } = await folded();
  const [a, b] = await Promise.all([pruneRaw(fs, tree.loopyRoot), pruneRaw(fs, tree.loopyRoot)]);
  const removed = [...removedPaths(a), ...removedPaths(b)].sort();
  assert.deepEqual(removed, [...tree.prunable].sort(), "each directory is reported removed once");
  for (const dir of tree.prunable) assert.equal(await exists(fs, dir), false, dir);
  const leftovers = Object.keys(fs.snapshotTree("/")).filter((p) => p.includes(PRUNING_PREFIX));
  assert.deepEqual(leftovers, []);
});

/**
 * `fs` answering every call after a pseudo-random delay, so calls started together finish in a
 * shuffled order.
 */
function shuffledTiming(fs: MemoryFs, seed: number): FileSystem {
  let state = seed;
  const delay = (): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state >>> 16) % 4;
  };
  return new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        await new Promise((resolve) => setTimeout(resolve, delay()));
        return await value.apply(target, args);
      };
    },
  }) as FileSystem;
}

test("the report keeps the planned order however the filesystem's answers are ordered", async () => {
  const { fs, tree } = await folded();
  const raw = tree.root.rawDir;
  // Many attempts, with entries kept for different reasons among them.
  for (let i = 10; i < 70; i++) {
    const dir = `${raw}/${String(i).padStart(4, "0")}_outer`;
    await fs.mkdir(dir);
    await fs.writeFile(`${dir}/run.json`, new Uint8Array(i));
    if (i % 9 === 0) await writeText(fs, `${raw}/notes-${i}.txt`, "kept\n");
    if (i % 13 === 0) await writeText(fs, `${raw}/${String(i + 1000).padStart(4, "0")}_x`, "f");
  }
  // A leftover among them, and the mirror layout's finalization outbox.
  await fs.mkdir(`${raw}/${PRUNING_PREFIX}00000000-0005_outer`);
  const outbox = `${tree.loopyRoot}/trace_finalization_outbox`;
  await fs.mkdir(outbox);
  for (let i = 0; i < 30; i++) {
    await writeText(fs, `${outbox}/${tree.rootId}--a${i}--final.json`, "x".repeat(i));
  }
  const options = { legacyTraces: true };
  const plan = await pruneRaw(fs, tree.loopyRoot, { ...options, dryRun: true });
  assert.ok(plan.count >= 90 && plan.skipped.length >= 8, `${plan.count} ${plan.skipped.length}`);
  for (const seed of seedsAfter([1, 2])) {
    const shuffled = await pruneRaw(shuffledTiming(fs, seed), tree.loopyRoot, {
      ...options,
      dryRun: true,
    });
    assert.deepEqual(shuffled, plan, `dry run, seed ${seed}`);
  }
  const progress: number[] = [];
  const done = await pruneRaw(shuffledTiming(fs, 3), tree.loopyRoot, {
    ...options,
    onProgress: (count) => progress.push(count),
  });
  assert.deepEqual(done.removed, plan.removed);
  assert.deepEqual(done.skipped, plan.skipped);
  assert.deepEqual(progress, Array.from({ length: plan.count + 1 }, (_, i) => i));
  assert.deepEqual(
    await pruneRaw(fs, tree.loopyRoot, { ...options, dryRun: true }).then((r) => r.count),
    0,
  );
});

/**
 * Prunes the root session of a folded tree whose `raw/` is replaced, at the call `swapAt` picks,
 * by a link to its `iterations/` (the durable directories there have the names of the raw ones):
 * the durable tree and the moved raw output must come out whole.
 */
async function pruneWithRawSwapped(
  swapAt: (method: string, args: unknown[], tree: FoldedTree) => boolean,
): Promise<{ report: PruneReport; swapped: boolean; fs: MemoryFs; tree: FoldedTree }> {
  const { fs, tree } = await folded();
  const { rawDir, iterationsDir } = tree.root;
  const movedRaw = `${rawDir}.moved`;
  const iterationsBefore = fs.snapshotTree(iterationsDir);
  assert.ok(Object.keys(iterationsBefore).some((path) => path.includes("0001_outer/")));
  let swapped = false;
  const hooked = hookedFs(fs, {
    async before(method, args) {
      if (swapped || !swapAt(method, args, tree)) return;
      swapped = true;
      await fs.rename(rawDir, movedRaw);
      await fs.symlink(iterationsDir, rawDir);
    },
  });
  const report = await pruneRaw(hooked, tree.loopyRoot, { sessionId: tree.rootId });
  assert.ok(swapped, "the swap happened");
  assert.deepEqual(fs.snapshotTree(iterationsDir), iterationsBefore, "the durable tree is whole");
  assert.equal((await fs.lstat(rawDir)).kind, "symlink", "the link is left as it is");
  return { report, swapped, fs, tree };
}

test("a link swapped in for raw/ while prune waits for the session's state is never followed", async () => {
  let stateReads = 0;
  const { report, fs, tree } = await pruneWithRawSwapped((method, args, tree) =>
    // The first read makes the plan, the second is taken right before entries move aside.
    (method === "readFile" || method === "readFileNoFollow") && args[0] === tree.root.stateJson &&
    ++stateReads === 2
  );
  assert.deepEqual(report.removed, []);
  for (const dir of tree.prunable.slice(0, 3)) assert.equal(skippedFor(report, dir), "symlink");
  // The raw output moved away with raw/ is untouched too.
  for (const dir of tree.prunable.slice(0, 3)) {
    assert.equal((await fs.lstat(dir.replace("/raw/", "/raw.moved/"))).kind, "directory", dir);
  }
});

test("a link swapped in for raw/ right before an entry is moved aside: what moved through it is moved back", async () => {
  const { report, fs, tree } = await pruneWithRawSwapped((method, args, tree) =>
    method === "rename" && String(args[0]).startsWith(`${tree.root.rawDir}/`)
  );
  assert.deepEqual(report.removed, []);
  for (const dir of tree.prunable.slice(0, 3)) assert.equal(skippedFor(report, dir), "symlink");
  // No hidden entry is left in the durable directory.
  const hidden = (await fs.readDir(tree.root.iterationsDir)).filter((entry) =>
    entry.name.startsWith(PRUNING_PREFIX)
  );
  assert.deepEqual(hidden, []);
});

test("a link swapped in for raw/ after entries were moved aside removes nothing through it", async () => {
  const { report, tree } = await pruneWithRawSwapped((method) => method === "remove");
  // Whichever check sees the link, nothing was removed through it (each entry was hidden under
  // a name nothing in iterations/ has).
  assert.deepEqual(report.removed, []);
  for (const dir of tree.prunable.slice(0, 3)) {
    assert.ok(["symlink", "vanished"].includes(skippedFor(report, dir) ?? ""), dir);
  }
});

test("an entry that cannot be moved back from where a swapped-in link led it fails the prune, never silently", async () => {
  const { fs, tree } = await folded();
  const { rawDir, iterationsDir } = tree.root;
  let swapped = false;
  const hooked = hookedFs(fs, {
    async before(method, args) {
      if (!swapped && method === "rename" && String(args[0]).startsWith(`${rawDir}/`)) {
        swapped = true;
        await fs.rename(rawDir, `${rawDir}.moved`);
        await fs.symlink(iterationsDir, rawDir);
        return;
      }
      // The move back fails.
      if (swapped && method === "rename" && String(args[0]).includes(`/${PRUNING_PREFIX}`)) {
        throw new FsIoError("EIO", "rename", String(args[0]), "injected");
      }
    },
  });
  await assert.rejects(
    pruneRaw(hooked, tree.loopyRoot, { sessionId: tree.rootId }),
    (error: unknown) => error instanceof FsIoError && error.code === "EIO",
  );
  // Nothing was removed: the durable entries are all there, some under a hidden name, which the
  // error reported.
  const names = (await fs.readDir(iterationsDir)).map((entry) => entry.name);
  for (const dir of tree.prunable.slice(0, 3)) {
    const name = dir.slice(dir.lastIndexOf("/") + 1);
    assert.ok(
      names.includes(name) || names.some((n) => n.startsWith(PRUNING_PREFIX) && n.endsWith(name)),
      `${name}: ${JSON.stringify(names)}`,
    );
  }
});

test("a raw tree that cannot be measured or removed is reported and stops nothing else", async () => {
  const { fs, tree } = await folded();
  const [deep, stuck, ...others] = tree.prunable as [string, string, ...string[]];
  for (const dir of [`${deep}/agents/scratch`, `${stuck}/agents/readonly`]) {
    await fs.mkdir(dir, { recursive: true });
    await writeText(fs, `${dir}/noise.txt`, "noise");
  }
  // A path in `deep` past the system's limit; a directory in `stuck` whose entries cannot go.
  const hooked = hookedFs(fs, {
    before(method, args) {
      const path = String(args[0]);
      if (method === "readDir" && path === `${deep}/agents/scratch`) {
        throw new FsIoError("ENAMETOOLONG", "readDir", path, "File name too long");
      }
      if (method === "remove" && path.includes(`${PRUNING_PREFIX}`) && path.endsWith("_outer")) {
        const name = stuck.slice(stuck.lastIndexOf("/") + 1);
        if (path.endsWith(`-${name}`)) throw new PermissionDenied("remove", path);
      }
    },
  });
  const plan = await pruneRaw(hooked, tree.loopyRoot, { dryRun: true });
  assert.equal(skippedFor(plan, deep), "unreadable");
  assert.match(plan.skipped.find((skip) => skip.path === deep)?.detail ?? "", /File name too long/);
  const report = await pruneRaw(hooked, tree.loopyRoot);
  assert.equal(skippedFor(report, deep), "unreadable");
  assert.equal(skippedFor(report, stuck), "remove_failed");
  const failed = report.skipped.find((skip) => skip.path === stuck)?.detail ?? "";
  assert.match(
    failed,
    new RegExp(`/${PRUNING_PREFIX}[^/]*-${stuck.slice(stuck.lastIndexOf("/") + 1)}: `),
  );
  // Every other prunable entry went.
  assert.deepEqual(removedPaths(report), [...others].sort());
  for (const dir of others) assert.equal(await exists(fs, dir), false, dir);
  assert.ok(await exists(fs, `${deep}/agents/scratch/noise.txt`));
  assert.equal(await exists(fs, stuck), false, "the stuck tree is under its hidden name");
  // Once the trees can be read and removed, the next prune takes both.
  const last = await pruneRaw(fs, tree.loopyRoot);
  assert.equal(last.skipped.some((skip) => skip.reason === "unreadable"), false);
  assert.equal(last.removed.length, 2);
  assert.deepEqual(
    Object.keys(fs.snapshotTree("/")).filter((p) => p.includes(PRUNING_PREFIX)),
    [],
  );
  assert.equal(await exists(fs, deep), false);
});

test("a raw tree with a name that cannot be reached by its listed spelling is unreadable, not vanished", async () => {
  const { fs, tree } = await folded();
  const [entry] = tree.prunable as [string, ...string[]];
  await fs.mkdir(`${entry}/agents`, { recursive: true });
  await writeText(fs, `${entry}/agents/odd.log`, "noise");
  // Listed, then not found by that name (a name the platform cannot spell back).
  const hooked = hookedFs(fs, {
    before(method, args) {
      if (method === "lstat" && args[0] === `${entry}/agents/odd.log`) {
        throw new NotFound("lstat", String(args[0]));
      }
    },
  });
  const report = await pruneRaw(hooked, tree.loopyRoot, { dryRun: true });
  assert.equal(skippedFor(report, entry), "unreadable");
  assert.match(report.skipped.find((skip) => skip.path === entry)?.detail ?? "", /odd\.log/);
});

test("a raw tree something is removed from while it is measured (another prune) is not unreadable", async () => {
  const { fs, tree } = await folded();
  const [entry] = tree.prunable as [string, ...string[]];
  await fs.mkdir(`${entry}/agents`, { recursive: true });
  await writeText(fs, `${entry}/agents/a.log`, "noise");
  await writeText(fs, `${entry}/agents/b.log`, "noise");
  // The first look finds a listed file gone (removed meanwhile); looked at again, the tree reads.
  let missed = false;
  const hooked = hookedFs(fs, {
    async before(method, args) {
      if (!missed && method === "lstat" && args[0] === `${entry}/agents/a.log`) {
        missed = true;
        await fs.remove(`${entry}/agents/a.log`);
      }
    },
  });
  const report = await pruneRaw(hooked, tree.loopyRoot);
  assert.ok(missed);
  assert.equal(skippedFor(report, entry), undefined);
  assert.ok(report.removed.some((item) => item.path === entry));
});

test("an entry listed but never found by its name is unreadable on every run, never vanished", async () => {
  const { fs, tree } = await folded();
  const [entry] = tree.prunable as [string, ...string[]];
  // The platform lists the name but cannot open it by that spelling (not valid UTF-8).
  const unreachable = hookedFs(fs, {
    before(method, args) {
      const path = String(args[0]);
      if (method !== "readDir" && (path === entry || path.startsWith(`${entry}/`))) {
        throw new NotFound(method, path);
      }
      if (method === "readDir" && path === entry) throw new NotFound(method, path);
    },
  });
  for (const dryRun of [true, false, false]) {
    const report = await pruneRaw(unreachable, tree.loopyRoot, { dryRun });
    assert.equal(skippedFor(report, entry), "unreadable", `dryRun ${dryRun}`);
  }
  assert.equal(await exists(fs, entry), true);
});

test("a prune's leftover inside a tree, found gone while measured (its prune removing it), counts nothing", async () => {
  const { fs, tree } = await folded();
  const [entry] = tree.prunable as [string, ...string[]];
  const leftover = `${entry}/agents/${PRUNING_PREFIX}0123abcd-x`;
  await fs.mkdir(leftover, { recursive: true });
  await writeText(fs, `${leftover}/a.log`, "noise");
  // Every read inside the leftover finds it gone, as while another prune removes it.
  const racing = hookedFs(fs, {
    before(method, args) {
      if (String(args[0]).startsWith(`${leftover}/`) || String(args[0]) === leftover) {
        throw new NotFound(method, String(args[0]));
      }
    },
  });
  const report = await pruneRaw(racing, tree.loopyRoot);
  assert.ok(report.removed.some((item) => item.path === entry), JSON.stringify(report.skipped));
});

test("agent output named like a prune's leftover is measured like the rest of its tree", async () => {
  const { fs, tree } = await folded();
  const [entry] = tree.prunable as [string, ...string[]];
  const before = await bytesBelow(fs, entry);
  await fs.mkdir(`${entry}/agents/${PRUNING_PREFIX}cache`, { recursive: true });
  await fs.writeFile(`${entry}/agents/${PRUNING_PREFIX}cache/blob`, new Uint8Array(1000));
  const plan = await pruneRaw(fs, tree.loopyRoot, { dryRun: true });
  assert.equal(plan.removed.find((item) => item.path === entry)?.bytes, before + 1000);
});

test("a state.json or session.json the filesystem refuses to read keeps that session's raw output and stops no other session's", async () => {
  for (const refused of ["state", "manifest"] as const) {
    const { fs, tree } = await folded();
    const file = refused === "state" ? tree.child.stateJson : tree.root.sessionJson;
    const reads = new Set(["readFile", "readFileNoFollow", "open", "openNoFollow"]);
    const denying = hookedFs(fs, {
      before: (method, args) => {
        if (reads.has(method) && args[0] === file) throw new PermissionDenied(method, file);
      },
    });
    const report = await pruneRaw(denying, tree.loopyRoot);
    if (refused === "state") {
      assert.deepEqual(removedPaths(report), [...tree.prunable.slice(0, 3)].sort(), refused);
      for (const dir of [`${tree.child.rawDir}/0001_leaf`, tree.running]) {
        assert.equal(skippedFor(report, dir), "state_unreadable", dir);
        assert.ok(await exists(fs, dir), dir);
      }
      const detail = report.skipped.find((skip) => skip.path === tree.running)?.detail ?? "";
      assert.match(detail, /state\.json cannot be read: .*Permission denied/);
    } else {
      assert.deepEqual(removedPaths(report), [`${tree.child.rawDir}/0001_leaf`], refused);
      assert.equal(skippedFor(report, tree.root.rawDir), "manifest_unreadable");
      for (const dir of tree.prunable.slice(0, 3)) assert.ok(await exists(fs, dir), dir);
      const detail = report.skipped.find((skip) => skip.path === tree.root.rawDir)?.detail ?? "";
      assert.match(detail, /session\.json cannot be read: .*Permission denied/);
    }
  }
});

test("a link swapped in for raw/ while prune waits for the session's state moves nothing through it, not even for a moment", async () => {
  const { fs, tree } = await folded();
  const { rawDir, iterationsDir } = tree.root;
  let stateReads = 0;
  let swapped = false;
  const hooked = hookedFs(fs, {
    async before(method, args) {
      // The first state read makes the plan, the second is taken right before entries move aside.
      if (
        swapped || !(method === "readFile" || method === "readFileNoFollow") ||
        args[0] !== tree.root.stateJson || ++stateReads !== 2
      ) return;
      swapped = true;
      await fs.rename(rawDir, `${rawDir}.moved`);
      await fs.symlink(iterationsDir, rawDir);
    },
  });
  fs.resetCounter();
  const report = await pruneRaw(hooked, tree.loopyRoot, { sessionId: tree.rootId });
  assert.ok(swapped, "the swap happened");
  assert.deepEqual(report.removed, []);
  // A durable iteration directory moved aside through the link (even if moved back once the link
  // was seen) is a `.pruning-*` leftover after a crash at that moment, which the next prune
  // removes.
  const through = fs.operationLog.filter((op) =>
    op.op === "rename" && op.path.startsWith(`${rawDir}/`)
  );
  assert.deepEqual(through, []);
});
