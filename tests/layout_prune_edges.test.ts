// prune-raw at the edges of what it may touch: a state.json or raw/ of the wrong kind, linked
// maintenance directories and session-tree entries, entries that vanish or fail while pruning is
// planned or carried out (a session removed meanwhile included). What it cannot judge it keeps and
// reports; an I/O error fails the call.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { LoopyRootError, pruneRaw, type PruneReport } from "../layout.ts";
import { FsIoError, NotADirectory, NotFound, PermissionDenied } from "../src/port/errors.ts";
import { newRepo, writeText } from "./layout_fixtures.ts";
import { buildFoldedTree, type FoldedTree } from "./fixtures/folded_tree.ts";
import { hookedFs } from "./_hooks.ts";

const DAY = 86_400_000;

/** A new repository holding the folded tree of `fixtures/folded_tree.ts`. */
async function folded(): Promise<{ fs: MemoryFs; tree: FoldedTree }> {
  const fs = await newRepo();
  return { fs, tree: await buildFoldedTree(fs) };
}

/** The report's skip of `path`, if any. */
function skipOf(report: PruneReport, path: string) {
  return report.skipped.find((skip) => skip.path === path);
}

/** The paths the report removed, sorted. */
function removedPaths(report: PruneReport): string[] {
  return report.removed.map((entry) => entry.path).sort();
}

/** The root session's raw attempt directories (the child's are in its own tree). */
function rootAttempts(tree: FoldedTree): string[] {
  return tree.prunable.filter((dir) => dir.startsWith(`${tree.root.rawDir}/`));
}

/** A `snapshotTree("/")` without the entries at or below `paths` (absolute). */
function without(snapshot: Record<string, string>, paths: readonly string[]) {
  return Object.fromEntries(
    Object.entries(snapshot).filter(([key]) =>
      !paths.some((path) => `/${key}` === path || `/${key}`.startsWith(`${path}/`))
    ),
  );
}

test("a state.json that is a directory or a link keeps all of the session's raw output, saying why", async () => {
  for (const damage of ["directory", "symlink"] as const) {
    const { fs, tree } = await folded();
    const state = tree.root.stateJson;
    const bytes = await fs.readFile(state);
    await fs.remove(state);
    if (damage === "directory") await fs.mkdir(state);
    else {
      // A copy of the session's own state behind the link: it is still not read through it.
      await fs.writeFile("/repo/state-copy.json", bytes);
      await fs.symlink("/repo/state-copy.json", state);
    }
    const before = fs.snapshotTree("/");
    const report = await pruneRaw(fs, tree.loopyRoot);
    for (const dir of rootAttempts(tree)) {
      const skip = skipOf(report, dir);
      assert.equal(skip?.reason, "state_unreadable", `${damage}: ${dir}`);
      assert.equal(skip?.detail, `state.json is not a regular file (${damage})`);
    }
    // The child's finished attempt, judged by its own state, still goes; nothing else changed.
    const others = tree.prunable.filter((dir) => !rootAttempts(tree).includes(dir));
    assert.deepEqual(removedPaths(report), others);
    assert.deepEqual(fs.snapshotTree("/"), without(before, others));
  }
});

test("a raw path that is a file is kept and reported as not a directory", async () => {
  const { fs, tree } = await folded();
  for (const dir of rootAttempts(tree)) await fs.remove(dir, { recursive: true });
  await fs.remove(tree.root.rawDir);
  await writeText(fs, tree.root.rawDir, "not a directory");
  const before = fs.snapshotTree("/");
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.equal(skipOf(report, tree.root.rawDir)?.reason, "not_a_directory");
  const others = tree.prunable.filter((dir) => !rootAttempts(tree).includes(dir));
  assert.deepEqual(removedPaths(report), others);
  assert.deepEqual(fs.snapshotTree("/"), without(before, others));
});

test("a pruning root that is missing or not a directory is refused before anything is read", async () => {
  const fs = await newRepo();
  await assert.rejects(pruneRaw(fs, "/repo/.loopy_loop"), (error: unknown) => {
    assert.ok(error instanceof LoopyRootError, String(error));
    assert.match(error.message, /does not exist/);
    return true;
  });
  await writeText(fs, "/repo/.loopy_loop", "a file");
  const before = fs.snapshotTree("/");
  await assert.rejects(pruneRaw(fs, "/repo/.loopy_loop"), (error: unknown) => {
    assert.ok(error instanceof LoopyRootError, String(error));
    assert.match(error.message, /not a directory/);
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a linked or misplaced traces/ or outbox is kept and never followed by a legacy-trace prune", async () => {
  const { fs, tree } = await folded();
  // traces/ links to a tree outside .loopy_loop; the outbox is a file.
  await fs.mkdir("/elsewhere/root-traces", { recursive: true });
  await writeText(fs, "/elsewhere/root-traces/trace.json", "{}");
  await fs.symlink("/elsewhere", `${tree.loopyRoot}/traces`);
  await writeText(fs, `${tree.loopyRoot}/trace_finalization_outbox`, "not a directory");
  const before = fs.snapshotTree("/");
  const report = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
  assert.equal(skipOf(report, `${tree.loopyRoot}/traces`)?.reason, "symlink");
  assert.equal(
    skipOf(report, `${tree.loopyRoot}/trace_finalization_outbox`)?.reason,
    "not_a_directory",
  );
  assert.ok(report.removed.every((entry) => entry.kind === "raw_attempt"));
  assert.deepEqual(fs.snapshotTree("/"), without(before, tree.prunable));
});

test("a session's mirror traces behind a link are reported and kept when that session is pruned", async () => {
  const { fs, tree } = await folded();
  await fs.mkdir("/elsewhere/attempts", { recursive: true });
  await writeText(fs, "/elsewhere/attempts/trace.json", "{}");
  const sessionsDir = `${tree.loopyRoot}/traces/${tree.rootId}/sessions`;
  await fs.mkdir(sessionsDir, { recursive: true });
  await fs.symlink("/elsewhere", `${sessionsDir}/${tree.rootId}`);
  const link = `${sessionsDir}/${tree.rootId}`;
  const report = await pruneRaw(fs, tree.loopyRoot, {
    sessionId: tree.rootId,
    legacyTraces: true,
  });
  assert.equal(skipOf(report, link)?.reason, "symlink");
  assert.equal((await fs.lstat(link)).kind, "symlink");
  assert.equal(await fs.readLink(link), "/elsewhere");
  assert.equal((await fs.lstat("/elsewhere/attempts/trace.json")).kind, "file");
  assert.deepEqual(removedPaths(report), rootAttempts(tree));
});

test("a trace tree whose session's state cannot be read is kept: what it runs is unknown", async () => {
  const { fs, tree } = await folded();
  const traces = `${tree.loopyRoot}/traces/${tree.rootId}`;
  await fs.mkdir(`${traces}/sessions/${tree.rootId}/attempts`, { recursive: true });
  await writeText(fs, `${traces}/sessions/${tree.rootId}/attempts/trace.json`, "{}");
  await writeText(fs, tree.root.stateJson, "{ not json");
  const report = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
  const skip = skipOf(report, traces);
  assert.equal(skip?.reason, "state_unreadable");
  assert.ok(skip?.detail.startsWith(`${tree.rootId}: `), skip?.detail);
  assert.ok(skip?.detail.includes("state.json"), skip?.detail);
  assert.equal(
    (await fs.lstat(`${traces}/sessions/${tree.rootId}/attempts/trace.json`)).kind,
    "file",
  );
  assert.ok(!report.removed.some((entry) => entry.kind === "legacy_traces"));
});

test("a linked children/ or child entry is reported and nothing behind it is pruned", async () => {
  for (const where of ["children", "child"] as const) {
    const { fs, tree } = await folded();
    const children = `${tree.root.dir}/children`;
    // The child's tree moves outside .loopy_loop, and a link takes its place.
    const target = where === "children" ? children : tree.child.dir;
    await fs.rename(target, "/outside");
    await fs.symlink("/outside", target);
    const before = fs.snapshotTree("/");
    const report = await pruneRaw(fs, tree.loopyRoot);
    assert.equal(skipOf(report, target)?.reason, "symlink", where);
    assert.deepEqual(removedPaths(report), rootAttempts(tree), where);
    assert.deepEqual(fs.snapshotTree("/"), without(before, rootAttempts(tree)), where);
  }
});

test("a child being built aside (a staging directory) is not a session: nothing in it is pruned or reported", async () => {
  const { fs, tree } = await folded();
  const children = `${tree.root.dir}/children`;
  const staging = `${children}/.staging-${tree.childId}-0000abcd`;
  await fs.mkdir(staging);
  // A copy of the child's tree, as a build in progress holds it (raw output included).
  for (const [key, value] of Object.entries(fs.snapshotTree(tree.child.dir))) {
    const path = `${staging}/${key}`;
    if (value.startsWith("dir")) await fs.mkdir(path, { recursive: true });
    else await fs.writeFile(path, await fs.readFile(`${tree.child.dir}/${key}`));
  }
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.deepEqual(removedPaths(report), [...tree.prunable].sort());
  assert.ok(!report.skipped.some((skip) => skip.path.startsWith(staging)), JSON.stringify(report));
  assert.ok(!report.removed.some((entry) => entry.path.startsWith(staging)));
  const copied = tree.prunable.find((dir) => dir.startsWith(`${tree.child.dir}/`))!;
  const inStaging = `${staging}${copied.slice(tree.child.dir.length)}`;
  assert.equal((await fs.lstat(inStaging)).kind, "directory");
});

test("a raw attempt removed by someone else while the plan measures it is reported vanished", async () => {
  const { fs, tree } = await folded();
  const [gone] = rootAttempts(tree) as [string];
  let removed = false;
  const view = hookedFs(fs, {
    async before(method, args) {
      if (method === "readDir" && args[0] === gone && !removed) {
        removed = true;
        await fs.remove(gone, { recursive: true });
      }
    },
  });
  const report = await pruneRaw(view, tree.loopyRoot);
  assert.equal(removed, true);
  assert.equal(skipOf(report, gone)?.reason, "vanished");
  assert.deepEqual(removedPaths(report), tree.prunable.filter((dir) => dir !== gone).sort());
});

test("an I/O error while a raw tree is measured fails the prune before anything moves; a directory replaced meanwhile is measured again", async () => {
  for (const fault of ["EIO", "ENOSPC"] as const) {
    const { fs, tree } = await folded();
    const [target] = rootAttempts(tree) as [string];
    const inner = `${target}/agents`;
    await fs.mkdir(inner, { recursive: true });
    await writeText(fs, `${inner}/notes.txt`, "notes");
    let failed = false;
    const view = hookedFs(fs, {
      before(method, args) {
        if (method === "readDir" && args[0] === inner && !failed) {
          failed = true;
          throw new FsIoError(fault, "readDir", inner, "injected");
        }
      },
    });
    const before = fs.snapshotTree("/");
    await assert.rejects(
      pruneRaw(view, tree.loopyRoot),
      (error: unknown) => error instanceof FsIoError && error.code === fault,
    );
    assert.equal(failed, true);
    assert.deepEqual(fs.snapshotTree("/"), before, "nothing moved aside or removed");
    // Once the fault clears, a rerun finishes the job.
    const report = await pruneRaw(view, tree.loopyRoot);
    assert.deepEqual(removedPaths(report), [...tree.prunable].sort());
    assert.deepEqual(report.skipped.filter((skip) => skip.reason === "unreadable"), []);
  }
  // A directory of the tree that is a file when it is listed (replaced since its parent was
  // listed, then put back): the tree is measured again, and goes.
  const { fs, tree } = await folded();
  const [target] = rootAttempts(tree) as [string];
  const inner = `${target}/agents`;
  await fs.mkdir(inner, { recursive: true });
  let replaced = 0;
  const view = hookedFs(fs, {
    before(method, args) {
      if (method === "readDir" && args[0] === inner && replaced++ === 0) {
        throw new NotADirectory("readDir", inner);
      }
    },
  });
  const report = await pruneRaw(view, tree.loopyRoot);
  assert.equal(replaced >= 2, true, "measured again");
  assert.deepEqual(removedPaths(report), [...tree.prunable].sort());
});

test("with an age limit, an attempt gone before its age is read is vanished; an I/O error there fails the prune", async () => {
  for (const fault of ["removed", "io"] as const) {
    const { fs, tree } = await folded();
    const [target] = rootAttempts(tree) as [string];
    const view = hookedFs(fs, {
      async before(method, args) {
        if (method !== "lstat" || args[0] !== target) return;
        if (fault === "io") throw new FsIoError("EIO", "lstat", target, "injected");
        await fs.remove(target, { recursive: true });
      },
    });
    const now = () => new Date(Date.now() + 30 * DAY);
    if (fault === "io") {
      const before = fs.snapshotTree("/");
      await assert.rejects(pruneRaw(view, tree.loopyRoot, { olderThanDays: 7, now }), FsIoError);
      assert.deepEqual(fs.snapshotTree("/"), before);
      continue;
    }
    const report = await pruneRaw(view, tree.loopyRoot, { olderThanDays: 7, now });
    assert.equal(skipOf(report, target)?.reason, "vanished");
    assert.deepEqual(removedPaths(report), tree.prunable.filter((dir) => dir !== target).sort());
  }
});

test("an old temp file renamed into place while planned is left unreported; an I/O error looking at it fails the prune", async () => {
  for (const fault of ["renamed", "io"] as const) {
    const { fs, tree } = await folded();
    const temp = `${tree.root.dir}/.notes.json.0123abcd1.tmp`;
    await writeText(fs, temp, "{}");
    await fs.utime(temp, Date.now() - 2 * DAY);
    let looked = false;
    const view = hookedFs(fs, {
      async before(method, args) {
        if (method !== "lstat" || args[0] !== temp || looked) return;
        looked = true;
        if (fault === "io") throw new FsIoError("EIO", "lstat", temp, "injected");
        // Its write finished: renamed over the file it replaces.
        await fs.rename(temp, `${tree.root.dir}/notes.json`);
      },
    });
    if (fault === "io") {
      const before = fs.snapshotTree("/");
      await assert.rejects(pruneRaw(view, tree.loopyRoot), FsIoError);
      assert.deepEqual(fs.snapshotTree("/"), before);
      continue;
    }
    const report = await pruneRaw(view, tree.loopyRoot);
    assert.equal(looked, true);
    assert.equal(skipOf(report, temp), undefined);
    assert.ok(!report.removed.some((entry) => entry.kind === "temp_leftover"));
    assert.deepEqual(removedPaths(report), [...tree.prunable].sort());
  }
});

/** Prunes a folded tree whose first root attempt's move aside throws `refusal(stuck)`. */
async function pruneWithStuckRename(refusal: (path: string) => Error) {
  const { fs, tree } = await folded();
  const [stuck] = rootAttempts(tree) as [string];
  const view = hookedFs(fs, {
    before(method, args) {
      if (method === "rename" && args[0] === stuck) throw refusal(stuck);
    },
  });
  const report = await pruneRaw(view, tree.loopyRoot);
  return { fs, tree, stuck, report, skip: skipOf(report, stuck) };
}

test("an attempt listed but not found by its name when it is moved aside is unreadable and kept", async () => {
  const { fs, tree, stuck, report, skip } = await pruneWithStuckRename((path) =>
    new NotFound("rename", path)
  );
  assert.equal(skip?.reason, "unreadable");
  assert.match(skip?.detail ?? "", /cannot be reached by its name/);
  assert.equal((await fs.lstat(`${stuck}/eval/report.json`)).kind, "file");
  assert.deepEqual(removedPaths(report), tree.prunable.filter((dir) => dir !== stuck).sort());
});

test("a running tree's traces with a linked sessions/ are kept, and nothing behind the link is planned", async () => {
  for (const dryRun of [true, false]) {
    const { fs, tree } = await folded(); // the child runs an attempt: its root's traces stay
    await fs.mkdir(`/elsewhere/.pruning-0000abcd-${tree.rootId}`, { recursive: true });
    await writeText(fs, `/elsewhere/.pruning-0000abcd-${tree.rootId}/trace.json`, "{}");
    const traces = `${tree.loopyRoot}/traces/${tree.rootId}`;
    await fs.mkdir(traces, { recursive: true });
    await fs.symlink("/elsewhere", `${traces}/sessions`);
    const report = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true, dryRun });
    assert.equal(skipOf(report, traces)?.reason, "running_attempt");
    assert.ok(!report.removed.some((entry) => entry.path.startsWith(traces)), `${dryRun}`);
    assert.equal(
      (await fs.lstat(`/elsewhere/.pruning-0000abcd-${tree.rootId}/trace.json`)).kind,
      "file",
    );
  }
});

test("a session directory removed while prune looks for temp files in it is not an error", async () => {
  const { fs, tree } = await folded();
  let removed = false;
  const view = hookedFs(fs, {
    async before(method, args) {
      if (method === "readDir" && args[0] === tree.child.dir && !removed) {
        removed = true;
        await fs.remove(tree.child.dir, { recursive: true });
      }
    },
  });
  const report = await pruneRaw(view, tree.loopyRoot);
  assert.equal(removed, true);
  assert.deepEqual(removedPaths(report), rootAttempts(tree));
  const childAttempt = tree.prunable.find((dir) => dir.startsWith(`${tree.child.dir}/`))!;
  assert.equal(skipOf(report, childAttempt)?.reason, "vanished");
});

test("a traces/, outbox or trace sessions/ the filesystem refuses to list is reported and stops nothing else", async () => {
  for (const dir of ["traces", "trace_finalization_outbox", "traces/ROOT/sessions"]) {
    const { fs, tree } = await folded(); // the child runs: its root's trace tree is kept
    const refused = `${tree.loopyRoot}/${dir.replace("ROOT", tree.rootId)}`;
    await fs.mkdir(refused, { recursive: true });
    const view = hookedFs(fs, {
      before(method, args) {
        if (method === "readDir" && args[0] === refused) {
          throw new PermissionDenied("readDir", refused);
        }
      },
    });
    const report = await pruneRaw(view, tree.loopyRoot, { legacyTraces: true });
    const skip = skipOf(report, refused);
    assert.equal(skip?.reason, "unreadable", dir);
    assert.match(skip?.detail ?? "", /Permission denied/, dir);
    assert.deepEqual(removedPaths(report), [...tree.prunable].sort(), dir);
    assert.equal((await fs.lstat(refused)).kind, "directory", dir);
    // A storage fault there still fails the call, as everywhere.
    const failing = hookedFs(fs, {
      before(method, args) {
        if (method === "readDir" && args[0] === refused) {
          throw new FsIoError("EIO", "readDir", refused, "injected");
        }
      },
    });
    await assert.rejects(pruneRaw(failing, tree.loopyRoot, { legacyTraces: true }), FsIoError);
  }
});

test("a link swapped in for a whole session directory after the plan moves nothing through it", async () => {
  // Swapped at the first look at the session directory once the plan is made (the chain check as
  // its entries' group starts), or at the second (as the session's state is read again).
  for (const look of [1, 2]) {
    const { fs, tree } = await folded();
    let planned = false;
    let looks = 0;
    let outside: Record<string, string> | undefined;
    const view = hookedFs(fs, {
      async before(method, args) {
        if (planned && method === "lstat" && args[0] === tree.root.dir && ++looks === look) {
          await fs.rename(tree.root.dir, "/outside-root");
          await fs.symlink("/outside-root", tree.root.dir);
          outside = fs.snapshotTree("/outside-root");
        }
      },
    });
    const report = await pruneRaw(view, tree.loopyRoot, {
      onProgress: (done) => {
        if (done === 0) planned = true;
      },
    });
    assert.ok(outside !== undefined, `${look}`);
    assert.deepEqual(report.removed, [], `${look}`);
    for (const dir of tree.prunable) {
      assert.equal(skipOf(report, dir)?.reason, "symlink", `${look}: ${dir}`);
    }
    assert.deepEqual(fs.snapshotTree("/outside-root"), outside, `${look}`);
  }
});

test("an attempt the filesystem refuses to move aside is reported and stops nothing else", async () => {
  const { fs, tree, stuck, report, skip } = await pruneWithStuckRename((path) =>
    new PermissionDenied("rename", path)
  );
  assert.equal(skip?.reason, "remove_failed");
  assert.match(skip?.detail ?? "", /Permission denied/);
  assert.deepEqual(removedPaths(report), tree.prunable.filter((dir) => dir !== stuck).sort());
  assert.equal((await fs.lstat(`${stuck}/eval/report.json`)).kind, "file");
  const hidden = Object.keys(fs.snapshotTree("/")).filter((path) => path.includes(".pruning-"));
  assert.deepEqual(hidden, []);
  // Once it may be moved, the next prune takes it.
  assert.deepEqual(removedPaths(await pruneRaw(fs, tree.loopyRoot)), [stuck]);
});

test("a trace directory another prune removes while this one lists it is gone, not an error", async () => {
  for (const dir of ["traces", "trace_finalization_outbox", "traces/ROOT/sessions"]) {
    const { fs, tree } = await folded(); // the child runs: its root's trace tree is kept
    const going = `${tree.loopyRoot}/${dir.replace("ROOT", tree.rootId)}`;
    await fs.mkdir(`${going}/.pruning-0000abcd-old`, { recursive: true });
    let removed = false;
    const view = hookedFs(fs, {
      async before(method, args) {
        if (method === "readDir" && args[0] === going && !removed) {
          removed = true;
          await fs.remove(going, { recursive: true });
        }
      },
    });
    const report = await pruneRaw(view, tree.loopyRoot, { legacyTraces: true });
    assert.equal(removed, true, dir);
    assert.deepEqual(removedPaths(report), [...tree.prunable].sort(), dir);
    assert.equal(skipOf(report, going), undefined, dir);
  }
});
