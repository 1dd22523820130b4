// Logical references against hostile or damaged trees: trace: references through a symlinked
// traces directory, manifest or pruned trace's path, duplicate or non-object manifests, a
// manifest changing under the resolver; session directories gone or replaced after the tree was
// loaded; holders of targets in other trees; and the formatting of references.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  formatLogicalReference,
  type LayoutRecordError,
  LogicalReferenceError,
  type LogicalReferenceErrorReason,
  LogicalReferenceResolver,
  TopologyError,
} from "../layout.ts";
import { FsIoError } from "../src/port/errors.ts";
import {
  assertNothingThrough,
  newRepo,
  newRoot,
  readJson,
  recordError,
  resolverFor,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";
import { hookedFs } from "./_hooks.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";
import {
  linkRootAttemptsOutside,
  mirror,
  MIRROR_ROOT_ID,
  ROOT_ATTEMPTS,
} from "./fixtures/mirror_tree.ts";

const FIRST = ROOT_ATTEMPTS.first.attemptId;
const SECOND = ROOT_ATTEMPTS.second.attemptId;
const FIRST_REPORT = `trace:trace-${FIRST}:/eval/report.json`;

/** Asserts `error` is a `LogicalReferenceError` for `reason` (saying `message`, when given). */
function refusal(reason: LogicalReferenceErrorReason, message?: RegExp) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LogicalReferenceError, String(error));
    assert.equal(error.reason, reason, error.message);
    if (message !== undefined) assert.match(error.message, message);
    return true;
  };
}

test("a trace: reference is refused when the traces directory is a symlink, naming it", async () => {
  const { fs, tree } = await mirror();
  await fs.rename(tree.tracesDir, "/elsewhere-traces");
  await fs.symlink("/elsewhere-traces", tree.tracesDir);
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  fs.resetCounter();
  await assert.rejects(
    resolver.resolve(FIRST_REPORT),
    refusal("symlink", new RegExp(`traces directory is a symlink at ${tree.tracesDir}`)),
  );
  assertNothingThrough(fs, `${tree.tracesDir}/`);
});

test("a trace: reference is refused when its manifest is a symlink, naming the manifest", async () => {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  await fs.rename(manifestPath, "/copied_manifest.json");
  await fs.symlink("/copied_manifest.json", manifestPath);
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  await assert.rejects(
    resolver.resolve(FIRST_REPORT),
    refusal("symlink", new RegExp(`Trace manifest is a symlink at ${manifestPath}`)),
  );
});

test("a recorded trace whose manifest is a directory or a JSON array is an error naming the manifest, not pruned", async () => {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  const intact = await readJson(fs, manifestPath);
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  await fs.remove(manifestPath);
  await fs.mkdir(manifestPath);
  let before = fs.snapshotTree();
  await assert.rejects(
    resolver.resolve(FIRST_REPORT),
    recordError(manifestPath, "", /is not a regular file \(directory\)/),
  );
  assert.deepEqual(fs.snapshotTree(), before);
  await fs.remove(manifestPath);
  await writeJson(fs, manifestPath, [intact]);
  before = fs.snapshotTree();
  await assert.rejects(
    resolver.resolve(FIRST_REPORT),
    recordError(manifestPath, "", /is not a JSON object/),
  );
  assert.deepEqual(fs.snapshotTree(), before);
});

test("two trace manifests carrying one id make a trace: reference a TopologyError", async () => {
  const { fs, tree } = await mirror();
  const second = `${tree.traceDir(SECOND)}/trace_manifest.json`;
  await writeJson(fs, second, { ...(await readJson(fs, second)), manifest_id: `trace-${FIRST}` });
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  await assert.rejects(resolver.resolve(FIRST_REPORT), (error: unknown) => {
    assert.ok(error instanceof TopologyError, String(error));
    assert.match(error.message, new RegExp(`Duplicate trace manifest id "trace-${FIRST}"`));
    // Named at the second of the two in the engine's path order.
    assert.equal(error.at, tree.traceDir(FIRST));
    return true;
  });
});

test("a pruned trace whose directory would be reached through a symlink is refused, not pruned", async () => {
  const { fs, tree } = await mirror();
  const attempts = await linkRootAttemptsOutside(fs, tree);
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  fs.resetCounter();
  await assert.rejects(
    resolver.resolve(FIRST_REPORT),
    refusal("symlink", /pruned trace's directory passes through a symlink/),
  );
  assertNothingThrough(fs, "/outside-attempts", `${attempts}/`);
});

test("a file where a tree's traces directory belongs holds no trace: a recorded one reads as pruned", async () => {
  const { fs, tree } = await mirror();
  const treeTraces = `${tree.tracesDir}/${MIRROR_ROOT_ID}`;
  await fs.remove(treeTraces, { recursive: true });
  await writeText(fs, treeTraces, "a file where the tree's traces belong");
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  const before = fs.snapshotTree();
  const pruned = await resolver.resolve(FIRST_REPORT);
  assert.deepEqual(
    [pruned.exists, pruned.status, pruned.path],
    [false, "pruned", `${tree.traceDir(FIRST)}/eval/report.json`],
  );
  // An id no record names is unknown, as in a tree without traces.
  await assert.rejects(
    resolver.resolve("trace:trace-000000000000:/eval/report.json"),
    refusal("unknown_trace"),
  );
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a manifest rewritten with the id while the reference is resolved is an error naming it", async () => {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  const intact = await fs.readFile(manifestPath);
  // The scan reads a manifest naming another trace; the engine rewrites it right after.
  await writeJson(fs, manifestPath, {
    ...(await readJson(fs, manifestPath)),
    manifest_id: "trace-other",
  });
  let reads = 0;
  const racing = hookedFs(fs, {
    async after(method, args) {
      if (/^read/.test(method) && args[0] === manifestPath && ++reads === 1) {
        await fs.writeFile(manifestPath, intact);
      }
    },
  });
  const resolver = await resolverFor(racing, MIRROR_ROOT_ID);
  await assert.rejects(resolver.resolve(FIRST_REPORT), (error: unknown) => {
    assert.ok(
      recordError(manifestPath, "manifest_id", /changed while the reference was resolved/)(error),
    );
    assert.equal((error as LayoutRecordError).value, `trace-${FIRST}`);
    return true;
  });
  assert.equal(reads, 2);
  // Resolved again, the rewritten manifest is found.
  assert.equal((await resolver.resolve(FIRST_REPORT)).status, "present");
});

test("a session directory removed or replaced by a file after the tree was loaded is a TopologyError", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const resolver = await resolverFor(fs, tree.childId);
  const childDir = tree.child.dir;
  await fs.rename(childDir, "/moved-child");
  for (const reference of ["session:/project_state/plan.md", `session:${tree.childId}:/x`]) {
    await assert.rejects(resolver.resolve(reference), (error: unknown) => {
      assert.ok(error instanceof TopologyError, String(error));
      assert.equal(error.at, childDir);
      assert.match(error.message, /Session directory disappeared/);
      return true;
    });
  }
  await writeText(fs, childDir, "a file where the session was");
  const before = fs.snapshotTree();
  await assert.rejects(resolver.resolve("session:/project_state/plan.md"), (error: unknown) => {
    assert.ok(error instanceof TopologyError, String(error));
    assert.equal(error.at, childDir);
    assert.match(error.message, /Expected a directory/);
    return true;
  });
  assert.deepEqual(fs.snapshotTree(), before);
  // The root's own references are unaffected.
  const root = await resolverFor(fs, tree.rootId);
  assert.equal((await root.resolve("session:/session.json")).status, "present");
});

test("the holder of a target in another tree is the deepest session with a valid session.json on its way", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const other = await newRoot(fs, "Another folded program");
  const resolver = await resolverFor(fs, other.sessionId);
  const sessions = "/repo/.loopy_loop/sessions";
  const manifest = await fs.readFile(`${tree.root.dir}/session.json`);
  // A staging directory an interrupted creation left, holding a complete session.json.
  await fs.mkdir(`${sessions}/.staging-0001/project_state`, { recursive: true });
  await fs.writeFile(`${sessions}/.staging-0001/session.json`, manifest);
  // A directory without session.json, one with a torn one, and a stray file.
  await fs.mkdir(`${sessions}/not-a-session/project_state`, { recursive: true });
  await fs.mkdir(`${sessions}/torn-session/project_state`, { recursive: true });
  await fs.writeFile(`${sessions}/torn-session/session.json`, manifest.subarray(0, 20));
  await writeText(fs, `${sessions}/notes.txt`, "not a session");
  // A session.json planted as a link to a valid one is never read through.
  await fs.mkdir(`${sessions}/linked-session/project_state`, { recursive: true });
  await fs.symlink(`${tree.root.dir}/session.json`, `${sessions}/linked-session/session.json`);
  const before = fs.snapshotTree();
  for (
    const below of [
      ".staging-0001/project_state/plan.md",
      "not-a-session/project_state/plan.md",
      "torn-session/project_state/plan.md",
      "notes.txt/plan.md",
      "linked-session/project_state/plan.md",
    ]
  ) {
    assert.equal(await resolver.holder(`repo:/.loopy_loop/sessions/${below}`), undefined, below);
  }
  // children/ that is a regular file holds no child: the session above it holds the target.
  const root = tree.root.dir;
  await fs.rename(`${root}/children`, "/moved-children");
  await writeText(fs, `${root}/children`, "not a directory");
  const held = await resolver.holder(
    `repo:/.loopy_loop/sessions/${tree.rootId}/children/${tree.childId}/session.json`,
  );
  assert.deepEqual(held, {
    sessionId: tree.rootId,
    dir: root,
    layout: "folded",
    relative: `children/${tree.childId}/session.json`,
    inTree: false,
  });
  await fs.remove(`${root}/children`);
  await fs.rename("/moved-children", `${root}/children`);
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a storage fault reading another tree's session.json fails the holder lookup, not hiding the session", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const other = await newRoot(fs, "Another folded program");
  const manifest = `${tree.root.dir}/session.json`;
  const failing = hookedFs(fs, {
    before(method, args) {
      if (/^(read|open)/.test(method) && args[0] === manifest) {
        throw new FsIoError("EIO", method, manifest, "injected");
      }
    },
  });
  const resolver = await resolverFor(failing, other.sessionId);
  const reference = `repo:/.loopy_loop/sessions/${tree.rootId}/raw/0001_outer/eval/report.json`;
  await assert.rejects(resolver.holder(reference), FsIoError);
  await assert.rejects(resolver.resolve(reference), FsIoError);
  // Without the fault, the session is found.
  const held = await (await resolverFor(fs, other.sessionId)).holder(reference);
  assert.equal(held?.sessionId, tree.rootId);
});

test("a trace: reference canonicalizes to itself in a mirror session and is refused in a folded one", async () => {
  const { fs } = await mirror();
  const mirrorResolver = await resolverFor(fs, MIRROR_ROOT_ID);
  assert.equal(mirrorResolver.canonicalize(FIRST_REPORT), FIRST_REPORT);
  const folded = await newRoot(fs);
  const foldedResolver = await resolverFor(fs, folded.sessionId);
  assert.throws(() => foldedResolver.canonicalize(FIRST_REPORT), refusal("mirror_only"));
});

test("a resolver opened through a symlinked repository path reports the canonical repository root", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await fs.symlink("/repo", "/linked-repo");
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/linked-repo",
    sessionId: root.sessionId,
  });
  assert.equal(resolver.repoRoot, "/repo");
  assert.equal((await resolver.resolve("repo:/")).path, "/repo");
});

test("formatLogicalReference builds references that pass the grammar and refuses the others", () => {
  assert.equal(formatLogicalReference("session", undefined, "a/b.json"), "session:/a/b.json");
  assert.equal(formatLogicalReference("session", "01_phase-0", "x"), "session:01_phase-0:/x");
  assert.equal(formatLogicalReference("trace", "trace-ab12", ""), "trace:trace-ab12:/");
  assert.equal(formatLogicalReference("repo", undefined, ""), "repo:/");
  for (
    const [scope, id, path] of [
      ["session", undefined, "../escape"],
      ["repo", undefined, "/etc/passwd"],
      ["session", "../x", "a"],
      ["root", undefined, "a//b"],
      ["repo", undefined, "a\u0000b"],
      ["repo", undefined, "x".repeat(256)],
    ] as const
  ) {
    assert.throws(
      () => formatLogicalReference(scope, id, path),
      LogicalReferenceError,
      `${scope} ${id} ${path}`,
    );
  }
});

test("a storage fault on the second look at a recorded trace's manifest is that fault, not a damaged manifest", async () => {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  // The scan finds no manifest with the id, so the recorded trace's manifest is looked at again.
  await writeJson(fs, manifestPath, {
    ...(await readJson(fs, manifestPath)),
    manifest_id: "trace-other",
  });
  for (const [method, skip] of [["lstat", 0], ["read", 1]] as const) {
    let seen = 0;
    const failing = hookedFs(fs, {
      before(called, args) {
        if (called.startsWith(method) && args[0] === manifestPath && seen++ === skip) {
          throw new FsIoError("EIO", called, manifestPath, "injected");
        }
      },
    });
    const resolver = await resolverFor(failing, MIRROR_ROOT_ID);
    await assert.rejects(resolver.resolve(FIRST_REPORT), FsIoError, method);
    assert.equal(seen, skip + 1, method);
  }
  // Without a fault, the manifest is named as carrying another id.
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  await assert.rejects(
    resolver.resolve(FIRST_REPORT),
    recordError(manifestPath, "manifest_id", /carries another id/),
  );
});

test("records of a folded session in a mirror tree name no trace: its seal receipts are no hint", async () => {
  const { fs, tree } = await mirror();
  const manifest = await readJson(fs, `${tree.childDir}/session.json`);
  await writeJson(fs, `${tree.childDir}/session.json`, { ...manifest, layout: "folded" });
  const planted = "eeeeeeeeeeee";
  await writeJson(fs, `${tree.childDir}/trace_seals/${planted}.json`, {
    schema_version: 1,
    manifest_id: `trace-${planted}`,
    attempt_id: planted,
  });
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  await assert.rejects(
    resolver.resolve(`trace:trace-${planted}:/eval/report.json`),
    refusal("unknown_trace"),
  );
});

test("a trace only an iteration's trace_ref.json records reads as pruned once gone, whatever else iterations/ holds", async () => {
  const { fs, tree } = await mirror();
  await fs.remove(`${tree.rootDir}/trace_seals/${FIRST}.json`);
  await fs.remove(tree.traceDir(FIRST), { recursive: true });
  // An iteration without a trace_ref.json, one whose trace_ref.json is a list, and one where it
  // is a directory: none names a trace, and none stops the others being read.
  await fs.mkdir(`${tree.rootDir}/iterations/0000_empty`);
  await fs.mkdir(`${tree.rootDir}/iterations/0000_list`);
  await writeJson(fs, `${tree.rootDir}/iterations/0000_list/trace_ref.json`, [{
    manifest_id: "trace-listed000001",
    attempt_id: "listed000001",
  }]);
  await fs.mkdir(`${tree.rootDir}/iterations/0000_dir/trace_ref.json`, { recursive: true });
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  const before = fs.snapshotTree();
  const pruned = await resolver.resolve(FIRST_REPORT);
  assert.deepEqual([pruned.exists, pruned.status], [false, "pruned"]);
  await assert.rejects(
    resolver.resolve("trace:trace-listed000001:/eval/report.json"),
    refusal("unknown_trace"),
  );
  assert.deepEqual(fs.snapshotTree(), before);
});
