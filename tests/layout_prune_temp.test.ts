// prune-raw removes the temp files of atomic replaces a crash interrupted (`.<name>.<random>.tmp`)
// from the durable tree once they are an hour old, and nothing else of it: not a younger temp file
// (a write that may be in flight), not a user's file of another shape, not outside `.loopy_loop/`.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { pruneRaw, TEMP_LEFTOVER_AGE_MS, updateSessionState } from "../layout.ts";
import { runCli } from "../src/cli/main.ts";
import { newRepo } from "./layout_fixtures.ts";
import { buildFoldedTree, type FoldedTree } from "./fixtures/folded_tree.ts";
import { memoryIo } from "./_cli_io.ts";
import { hookedFs } from "./_hooks.ts";
import { FsIoError, PermissionDenied } from "../src/port/errors.ts";

const HOUR = 3_600_000;

async function folded(): Promise<{ fs: MemoryFs; tree: FoldedTree }> {
  const fs = await newRepo();
  return { fs, tree: await buildFoldedTree(fs) };
}

/** Writes `path` with a modification time `ageMs` before `now`. */
async function planted(fs: MemoryFs, path: string, now: number, ageMs: number): Promise<string> {
  await fs.writeFile(path, new TextEncoder().encode("{}"));
  await fs.utime(path, now - ageMs);
  return path;
}

/** Every path in the tree, from a snapshot of `/`. */
function paths(fs: MemoryFs): string[] {
  return Object.keys(fs.snapshotTree("/")).map((key) => `/${key}`);
}

test("a crash inside a layout write leaves a temp file that prune-raw removes an hour later", async () => {
  const { fs, tree } = await folded();
  fs.syncAll();
  const bump = (on: MemoryFs) =>
    updateSessionState(on, tree.root.dir, (state) => {
      state.iteration = (state.iteration as number) + 1;
    }, { updatedAt: "2026-04-19T15:00:00Z" });
  // The state update stops right before its rename: its temp file is written and synced.
  const probe = fs.clone();
  await bump(probe);
  const rename = probe.operationLog.findIndex((op) => op.op === "rename");
  assert.ok(rename > 0);
  const crashed = fs.clone();
  crashed.crashAfter(rename);
  await assert.rejects(bump(crashed));
  const after = crashed.crash({ seed: 1, extraJournal: "all" });
  const temps = paths(after).filter((path) =>
    /\/\.state\.json\.[0-9a-f]{8}[0-9a-z]+\.tmp$/.test(path)
  );
  assert.deepEqual(temps.length, 1, "the crash left the temp file");
  const [temp] = temps as [string];
  const written = (await after.lstat(temp)).mtimeMs;
  // Still young: a write may be in flight, so it stays and is not reported.
  const early = await pruneRaw(after, tree.loopyRoot, { now: () => new Date(written + HOUR / 2) });
  assert.ok(!early.removed.some((entry) => entry.path === temp));
  assert.ok(!early.skipped.some((entry) => entry.path === temp));
  assert.ok(paths(after).includes(temp));
  const later = await pruneRaw(after, tree.loopyRoot, {
    now: () => new Date(written + TEMP_LEFTOVER_AGE_MS + 1),
  });
  const entry = later.removed.find((removed) => removed.path === temp);
  assert.deepEqual(entry, {
    path: temp,
    bytes: entry?.bytes,
    kind: "temp_leftover",
    sessionId: tree.rootId,
  });
  assert.ok((entry?.bytes ?? 0) > 0);
  assert.ok(!paths(after).includes(temp));
  // The state the crash kept is the one readers see; the next update works as before.
  await bump(after);
});

test("prune-raw removes old temp files in the durable tree only, each with its session, in a dry run too", async () => {
  const { fs, tree } = await folded();
  const now = Date.parse("2026-05-01T00:00:00Z");
  const old = 2 * HOUR;
  const gone = [
    await planted(fs, `${tree.loopyRoot}/.repository.json.0a1b2c3d1.tmp`, now, old),
    await planted(fs, `${tree.root.dir}/.state.json.0a1b2c3d2.tmp`, now, old),
    await planted(fs, `${tree.root.iterationsDir}/.x.json.0a1b2c3dz9.tmp`, now, old),
    await planted(fs, `${tree.child.dir}/.children.json.ffffffff3.tmp`, now, old),
  ];
  const kept = [
    // Young: may be a write in flight.
    await planted(fs, `${tree.root.dir}/.session_outcome.json.0a1b2c3d4.tmp`, now, HOUR / 2),
    // Not the shape the library stages under: a file of the user's or an agent's.
    await planted(fs, `${tree.root.dir}/.notes.tmp`, now, old),
    await planted(fs, `${tree.root.dir}/.state.json.0A1B2C3D5.tmp`, now, old),
    // Outside .loopy_loop/: the repository's own files are never touched.
    await planted(fs, `${tree.repoRoot}/..gitignore.0a1b2c3d6.tmp`, now, old),
  ];
  await fs.mkdir(`${tree.root.dir}/linked`);
  await fs.symlink(`${tree.root.dir}/linked`, `${tree.root.dir}/link`);
  await planted(fs, `${tree.root.dir}/linked/.a.json.0a1b2c3d7.tmp`, now, old);
  gone.push(`${tree.root.dir}/linked/.a.json.0a1b2c3d7.tmp`);
  const options = { now: () => new Date(now) };
  const plan = await pruneRaw(fs, tree.loopyRoot, { ...options, dryRun: true });
  const planned = plan.removed.filter((entry) => entry.kind === "temp_leftover");
  assert.deepEqual(planned.map((entry) => entry.path).sort(), [...gone].sort());
  assert.deepEqual(
    Object.fromEntries(planned.map((entry) => [entry.path, entry.sessionId])),
    {
      [gone[0] as string]: null,
      [gone[1] as string]: tree.rootId,
      [gone[2] as string]: tree.rootId,
      [gone[3] as string]: tree.childId,
      [gone[4] as string]: tree.rootId,
    },
  );
  for (const path of [...gone, ...kept]) assert.ok(paths(fs).includes(path), `dry run: ${path}`);
  // With a session, only its own tree (not its children's, not the root's shared files).
  const own = await pruneRaw(fs, tree.loopyRoot, { ...options, sessionId: tree.rootId });
  assert.deepEqual(
    own.removed.filter((entry) => entry.kind === "temp_leftover").map((entry) => entry.path)
      .sort(),
    [gone[1], gone[2], gone[4]].sort(),
  );
  const all = await pruneRaw(fs, tree.loopyRoot, options);
  assert.deepEqual(
    all.removed.filter((entry) => entry.kind === "temp_leftover").map((entry) => entry.path)
      .sort(),
    [gone[0], gone[3]].sort(),
  );
  for (const path of gone) assert.ok(!paths(fs).includes(path), path);
  for (const path of kept) assert.ok(paths(fs).includes(path), path);
  // The age limit applies too: an entry younger than it stays, reported as every entry the age
  // limit keeps is (one younger than an hour, a write that may be in flight, is not reported).
  const young = await planted(fs, `${tree.root.dir}/.state.json.0a1b2c3d8.tmp`, now, 3 * HOUR);
  const limited = await pruneRaw(fs, tree.loopyRoot, { ...options, olderThanDays: 1 });
  assert.ok(!limited.removed.some((entry) => entry.path === young));
  assert.deepEqual(
    limited.skipped.filter((entry) => entry.path.endsWith(".tmp")).map((entry) => [
      entry.path,
      entry.reason,
    ]),
    [[young, "too_recent"]],
  );
  assert.ok(paths(fs).includes(young));
});

test("the prune-raw command counts removed temp files apart from raw attempt directories", async () => {
  const { fs, tree } = await folded();
  const now = Date.now() + 2 * HOUR;
  const temp = await planted(fs, `${tree.root.dir}/.state.json.0a1b2c3d9.tmp`, now, 2 * HOUR);
  const { io, out } = memoryIo(fs, tree.repoRoot, now);
  assert.equal(await runCli(["prune-raw"], io), 0);
  assert.match(out(), new RegExp(`removed ${temp.replaceAll(".", "\\.")} `));
  assert.match(out(), /pruned 4 raw attempt dir\(s\) and 1 temp file\(s\) left by a crash, /);
});

/** `fs` with `method` on `path` failing with `code`. */
function refusing(fs: MemoryFs, method: string, path: string, code: string) {
  return hookedFs(fs, {
    before: (called, args) => {
      if (called !== method || args[0] !== path) return;
      throw code === "EACCES"
        ? new PermissionDenied(method, path)
        : new FsIoError(code, method, path, `${code} (injected)`);
    },
  });
}

test("a durable directory that cannot be listed (refused, a path too long) is reported and stops nothing else; an I/O error fails the call", async () => {
  for (const code of ["EACCES", "ENAMETOOLONG", "ELOOP"]) {
    const { fs, tree } = await folded();
    const now = Date.now() + 2 * HOUR;
    const temp = await planted(fs, `${tree.child.dir}/.state.json.0a1b2c3da.tmp`, now, 2 * HOUR);
    const refused = tree.root.iterationsDir;
    const options = { now: () => new Date(now) };
    await assert.rejects(
      pruneRaw(refusing(fs, "readDir", refused, "EIO"), tree.loopyRoot, options),
      FsIoError,
    );
    const report = await pruneRaw(refusing(fs, "readDir", refused, code), tree.loopyRoot, options);
    const skip = report.skipped.find((entry) => entry.path === refused);
    assert.equal(skip?.reason, "unreadable", code);
    assert.match(skip?.detail ?? "", code === "EACCES" ? /Permission denied/ : new RegExp(code));
    assert.deepEqual(
      report.removed.filter((entry) => entry.kind !== "raw_attempt").map((entry) => entry.path),
      [temp],
      code,
    );
    assert.equal(report.removed.filter((entry) => entry.kind === "raw_attempt").length, 4, code);
  }
});

test("a temp file that cannot be looked at is reported; the other sessions are pruned", async () => {
  const { fs, tree } = await folded();
  const now = Date.now() + 2 * HOUR;
  const hidden = await planted(fs, `${tree.root.dir}/.state.json.0a1b2c3db.tmp`, now, 2 * HOUR);
  const temp = await planted(fs, `${tree.child.dir}/.state.json.0a1b2c3dc.tmp`, now, 2 * HOUR);
  const report = await pruneRaw(refusing(fs, "lstat", hidden, "EACCES"), tree.loopyRoot, {
    now: () => new Date(now),
  });
  assert.equal(report.skipped.find((entry) => entry.path === hidden)?.reason, "unreadable");
  assert.deepEqual(
    report.removed.filter((entry) => entry.kind === "temp_leftover").map((entry) => entry.path),
    [temp],
  );
  assert.equal(report.removed.filter((entry) => entry.kind === "raw_attempt").length, 4);
});

test("a raw/ that cannot be listed is reported and the other sessions' raw output still goes", async () => {
  const { fs, tree } = await folded();
  const report = await pruneRaw(
    refusing(fs, "readDir", tree.child.rawDir, "EACCES"),
    tree.loopyRoot,
  );
  assert.equal(
    report.skipped.find((entry) => entry.path === tree.child.rawDir)?.reason,
    "unreadable",
  );
  assert.deepEqual(
    report.removed.map((entry) => entry.path).sort(),
    [...tree.prunable.slice(0, 3)].sort(),
  );
  await assert.rejects(
    pruneRaw(refusing(fs, "readDir", tree.child.rawDir, "EIO"), tree.loopyRoot),
    FsIoError,
  );
});

test("a linked sessions/ is not swept for temp files, not even in a dry run", async () => {
  const { fs, tree } = await folded();
  const now = Date.now() + 2 * HOUR;
  const sessions = `${tree.loopyRoot}/sessions`;
  await fs.rename(sessions, `${tree.repoRoot}/elsewhere`);
  await fs.symlink(`${tree.repoRoot}/elsewhere`, sessions);
  const outside = await planted(
    fs,
    `${tree.repoRoot}/elsewhere/.cache.db.0a1b2c3dd.tmp`,
    now,
    2 * HOUR,
  );
  for (const dryRun of [true, false]) {
    const report = await pruneRaw(fs, tree.loopyRoot, { now: () => new Date(now), dryRun });
    assert.deepEqual(report.removed, [], `dryRun ${dryRun}`);
    assert.deepEqual(report.skipped.map((entry) => [entry.path, entry.reason]), [
      [sessions, "symlink"],
    ]);
  }
  assert.ok(paths(fs).includes(outside));
});

test("a temp file replaced by a directory after the plan is not removed with what that directory holds", async () => {
  const { fs, tree } = await folded();
  const now = Date.parse("2026-05-01T00:00:00Z");
  const temp = await planted(fs, `${tree.root.dir}/.state.json.0a1b2c3d2.tmp`, now, 2 * HOUR);
  let swapped = false;
  const hooked = hookedFs(fs, {
    async before(method, args) {
      if (swapped || method !== "remove" || args[0] !== temp) return;
      swapped = true;
      // Something else (an agent, a user) put a directory with its own file at that name.
      await fs.remove(temp);
      await fs.mkdir(temp);
      await fs.writeFile(`${temp}/keep.txt`, new TextEncoder().encode("mine"));
    },
  });
  const report = await pruneRaw(hooked, tree.loopyRoot, { now: () => new Date(now) });
  assert.ok(swapped, "the swap happened");
  assert.ok(!report.removed.some((entry) => entry.path === temp));
  assert.equal(report.skipped.find((skip) => skip.path === temp)?.reason, "remove_failed");
  assert.equal(new TextDecoder().decode(await fs.readFile(`${temp}/keep.txt`)), "mine");
});
