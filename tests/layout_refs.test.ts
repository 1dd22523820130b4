import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  isLogicalReference,
  LayoutRecordError,
  loadSessionTree,
  LogicalReferenceError,
  type LogicalReferenceErrorReason,
  LogicalReferenceResolver,
  parseLogicalReference,
  processNextChildRequest,
  publishChildRequest,
  TopologyError,
  UnknownSessionError,
} from "../layout.ts";
import { childRequest, newRepo, newRoot, readJson, writeJson } from "./layout_fixtures.ts";
import { buildMirrorTree, MIRROR_ROOT_ID, ROOT_ATTEMPTS } from "./fixtures/mirror_tree.ts";
import { runsOf } from "./_soak.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";
const ROOT_DIR = `/repo/.loopy_loop/sessions/${ROOT_ID}`;
const CHILD_ID = "01_phase-0";
const CHILD_DIR = `${ROOT_DIR}/children/${CHILD_ID}`;

/** A repository with a root session and one accepted child. */
async function treeWithChild(): Promise<MemoryFs> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  const result = await processNextChildRequest(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID });
  assert.equal(result?.kind, "accepted");
  return fs;
}

async function resolverFor(fs: MemoryFs, id: string): Promise<LogicalReferenceResolver> {
  return await LogicalReferenceResolver.forSession(fs, { repoRoot: "/repo", sessionId: id });
}

function refusal(reason: LogicalReferenceErrorReason) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LogicalReferenceError, String(error));
    assert.equal(error.reason, reason, error.message);
    return true;
  };
}

test("the grammar accepts the five scopes and splits the path into segments", () => {
  assert.deepEqual(parseLogicalReference("repo:/docs/a.md").segments, ["docs", "a.md"]);
  assert.equal(parseLogicalReference("session:/").segments.length, 0);
  assert.equal(parseLogicalReference("root:/plan.md").scope, "root");
  assert.equal(parseLogicalReference("parent:/x").scope, "parent");
  const named = parseLogicalReference("session:01_phase-0:/session_outcome.json");
  assert.deepEqual([named.scope, named.id], ["session", "01_phase-0"]);
  const trace = parseLogicalReference("trace:trace-ab12:/eval/report.json");
  assert.deepEqual([trace.scope, trace.id], ["trace", "trace-ab12"]);
});

test("the grammar refuses traversal, absolute paths, NUL, empty segments and long references", () => {
  const grammar = [
    "",
    "session:/../escape",
    "session:/a/../../b",
    "session:/./a",
    "session://etc/passwd",
    "session:/a//b",
    "session:/a/",
    "session:/a\u0000b",
    "session:/a\\b",
    "session:/a\nb",
    "session:/a\u009b31mb",
    "session:/a\u0085b",
    "session:/a:/b",
    "no-marker",
    `session:/${"a".repeat(256)}`,
    `session:/${"a/".repeat(2100)}a`,
    // Lengths are the filesystem's: UTF-8 bytes, not characters.
    `session:/${"é".repeat(128)}`,
    `session:/${"ü/".repeat(1400)}a`,
  ];
  for (const reference of grammar) {
    assert.throws(() => parseLogicalReference(reference), refusal("grammar"), reference);
    assert.equal(isLogicalReference(reference), false);
  }
  const scopes = [
    "file:/etc/passwd",
    "http://example.com/x",
    "/etc/passwd:/x",
    "session::/x",
    "session:../x:/y",
    "session:a:b:/x",
    "repo:x:/y",
    "trace:/x",
    "SESSION:/x",
  ];
  for (const reference of scopes) {
    assert.throws(() => parseLogicalReference(reference), refusal("unknown_scope"), reference);
  }
});

test("a segment of 255 UTF-8 bytes is accepted and one of 256 is not", () => {
  assert.equal(parseLogicalReference(`session:/${"é".repeat(127)}a`).segments.length, 1);
  assert.throws(() => parseLogicalReference(`session:/${"é".repeat(128)}`), refusal("grammar"));
});

test("any reference the grammar accepts has only plain segments", () => {
  fc.assert(
    fc.property(fc.string({ maxLength: 60 }), (tail) => {
      const reference = `session:/${tail}`;
      if (!isLogicalReference(reference)) return;
      for (const segment of parseLogicalReference(reference).segments) {
        assert.ok(segment !== "" && segment !== "." && segment !== "..");
        assert.ok(!segment.includes("/") && !segment.includes("\u0000"));
      }
    }),
    { numRuns: runsOf(500) },
  );
});

test("a reference refused by the grammar or the scope touches no file", async () => {
  const fs = await treeWithChild();
  const root = await resolverFor(fs, ROOT_ID);
  const bad: [string, LogicalReferenceErrorReason][] = [
    ["session:/../../etc/passwd", "grammar"],
    ["session://etc/passwd", "grammar"],
    ["session:/a\u0000b", "grammar"],
    ["session:/a//b", "grammar"],
    ["ftp:/x", "unknown_scope"],
    ["session:99_nobody:/x", "unknown_session"],
    ["parent:/plan.md", "no_parent"],
    ["trace:trace-abc:/eval/report.json", "mirror_only"],
  ];
  for (const [reference, reason] of bad) {
    const before = fs.operationCount;
    await assert.rejects(root.resolve(reference), refusal(reason), reference);
    assert.equal(fs.operationCount, before, `${reference} touched the filesystem`);
  }
});

test("session, root, parent, named session and repo references resolve to confined paths", async () => {
  const fs = await treeWithChild();
  const child = await resolverFor(fs, CHILD_ID);
  assert.equal(
    await child.resolveExisting("session:/goal_contract.json"),
    `${CHILD_DIR}/goal_contract.json`,
  );
  assert.equal(await child.resolveExisting("parent:/children.json"), `${ROOT_DIR}/children.json`);
  assert.equal(
    await child.resolveExisting("root:/harness_capability_roster.json"),
    `${ROOT_DIR}/harness_capability_roster.json`,
  );
  assert.equal(
    await child.resolveExisting(`session:${ROOT_ID}:/project_state/plan.md`),
    `${ROOT_DIR}/project_state/plan.md`,
  );
  assert.equal(await child.resolveExisting("repo:/.gitignore"), "/repo/.gitignore");
  const scope = await child.resolve("session:/");
  assert.deepEqual([scope.path, scope.exists, scope.kind], [CHILD_DIR, true, "directory"]);
  const root = await resolverFor(fs, ROOT_ID);
  assert.equal(
    await root.resolveExisting(`session:${CHILD_ID}:/inputs/accepted_request.json`),
    `${CHILD_DIR}/inputs/accepted_request.json`,
  );
});

test("an absent target is reported as absent, and the strict variant refuses it", async () => {
  const fs = await treeWithChild();
  const root = await resolverFor(fs, ROOT_ID);
  const raw = await root.resolve("session:/raw/0026_outer/eval/report.json");
  assert.equal(raw.exists, false);
  assert.equal(raw.kind, undefined);
  assert.equal(raw.path, `${ROOT_DIR}/raw/0026_outer/eval/report.json`);
  assert.equal(raw.canonical, `session:${ROOT_ID}:/raw/0026_outer/eval/report.json`);
  await assert.rejects(root.resolveExisting("session:/raw/0026_outer"), refusal("absent"));
  // A path through a file cannot exist either.
  const through = await root.resolve("session:/goal.md/child");
  assert.equal(through.exists, false);
});

test("canonicalize names a reference so it means the same target from anywhere in the tree", async () => {
  const fs = await treeWithChild();
  const child = await resolverFor(fs, CHILD_ID);
  assert.equal(child.canonicalize("session:/a.md"), `session:${CHILD_ID}:/a.md`);
  assert.equal(child.canonicalize("parent:/b.md"), `session:${ROOT_ID}:/b.md`);
  assert.equal(child.canonicalize("root:/c.md"), `session:${ROOT_ID}:/c.md`);
  assert.equal(child.canonicalize("repo:/d.md"), "repo:/d.md");
});

test("a symlink planted at the target, an intermediate directory or a session dir is refused", async () => {
  const fs = await treeWithChild();
  const root = await resolverFor(fs, ROOT_ID);
  await fs.mkdir("/outside");
  await fs.writeFile("/outside/secret", new TextEncoder().encode("secret"));
  // The target.
  await fs.symlink("/outside/secret", `${ROOT_DIR}/project_state/link.md`);
  await assert.rejects(root.resolve("session:/project_state/link.md"), refusal("symlink"));
  // A link that stays inside the scope is refused too (stricter than the engine).
  await fs.symlink(`${ROOT_DIR}/goal.md`, `${ROOT_DIR}/project_state/inside.md`);
  await assert.rejects(root.resolve("session:/project_state/inside.md"), refusal("symlink"));
  // An intermediate directory.
  await fs.symlink("/outside", `${ROOT_DIR}/iterations/0001_outer`);
  await assert.rejects(root.resolve("session:/iterations/0001_outer/secret"), refusal("symlink"));
  // A dangling link at the target.
  await fs.symlink("/nowhere", `${ROOT_DIR}/raw/0002_outer`);
  await assert.rejects(root.resolve("session:/raw/0002_outer"), refusal("symlink"));
  // A session directory swapped for a link after the tree was validated.
  await fs.rename(CHILD_DIR, "/outside/child");
  await fs.symlink("/outside/child", CHILD_DIR);
  await assert.rejects(root.resolve(`session:${CHILD_ID}:/goal.md`), refusal("symlink"));
  // ...and a fresh resolver refuses the whole topology.
  await assert.rejects(resolverFor(fs, ROOT_ID), TopologyError);
});

test("a symlinked children directory or sessions root is refused", async () => {
  const fs = await treeWithChild();
  await fs.rename(`${ROOT_DIR}/children`, "/repo/elsewhere");
  await fs.symlink("/repo/elsewhere", `${ROOT_DIR}/children`);
  await assert.rejects(resolverFor(fs, ROOT_ID), TopologyError);

  const other = await newRepo();
  await newRoot(other);
  await other.rename("/repo/.loopy_loop/sessions", "/repo/real-sessions");
  await other.symlink("/repo/real-sessions", "/repo/.loopy_loop/sessions");
  await assert.rejects(resolverFor(other, ROOT_ID), TopologyError);
});

test("staging leftovers and child directories without a manifest are not part of the tree", async () => {
  const fs = await treeWithChild();
  await fs.mkdir(`${ROOT_DIR}/children/.staging-02_x-00000000`);
  await writeJson(fs, `${ROOT_DIR}/children/.staging-02_x-00000000/session.json`, { junk: true });
  await fs.mkdir(`${ROOT_DIR}/children/03_no-manifest`);
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  assert.deepEqual([...tree.nodes.keys()], [ROOT_ID, CHILD_ID]);
  assert.deepEqual(tree.root.childIds, [CHILD_ID]);
  assert.equal(tree.require(CHILD_ID).depth, 1);
  assert.equal(tree.require(CHILD_ID).rootSessionId, ROOT_ID);
});

test("manifests that contradict the physical tree are topology errors", async () => {
  const cases: [string, (fs: MemoryFs) => Promise<void>][] = [
    ["an id that is not the directory name", async (fs) => {
      const m = await readJson(fs, `${CHILD_DIR}/session.json`);
      await writeJson(fs, `${CHILD_DIR}/session.json`, { ...m, session_id: "02_other" });
    }],
    ["a declared parent that is not the physical parent", async (fs) => {
      const m = await readJson(fs, `${CHILD_DIR}/session.json`);
      await writeJson(fs, `${CHILD_DIR}/session.json`, { ...m, parent_session_id: "002_else" });
    }],
    ["a declared depth that is not the nesting depth", async (fs) => {
      const m = await readJson(fs, `${CHILD_DIR}/session.json`);
      await writeJson(fs, `${CHILD_DIR}/session.json`, { ...m, depth: 2 });
    }],
    ["a declared root that is not the tree's root", async (fs) => {
      const m = await readJson(fs, `${CHILD_DIR}/session.json`);
      await writeJson(fs, `${CHILD_DIR}/session.json`, { ...m, root_session_id: CHILD_ID });
    }],
    ["a parent.json in a root session", async (fs) => {
      await writeJson(fs, `${ROOT_DIR}/parent.json`, { schema_version: 1 });
    }],
    ["a parent.json that names another parent", async (fs) => {
      const p = await readJson(fs, `${CHILD_DIR}/parent.json`);
      await writeJson(fs, `${CHILD_DIR}/parent.json`, { ...p, parent_session_id: "002_else" });
    }],
    ["a parent_relative_path that leaves the tree", async (fs) => {
      const p = await readJson(fs, `${CHILD_DIR}/parent.json`);
      await writeJson(fs, `${CHILD_DIR}/parent.json`, { ...p, parent_relative_path: "../../.." });
    }],
  ];
  for (const [name, damage] of cases) {
    const fs = await treeWithChild();
    await damage(fs);
    await assert.rejects(resolverFor(fs, CHILD_ID), TopologyError, name);
  }
});

test("a malformed manifest in the tree names the file and field", async () => {
  const fs = await treeWithChild();
  const m = await readJson(fs, `${CHILD_DIR}/session.json`);
  await writeJson(fs, `${CHILD_DIR}/session.json`, { ...m, depth: "one" });
  await assert.rejects(resolverFor(fs, CHILD_ID), (error: unknown) => {
    assert.ok(error instanceof TopologyError);
    assert.ok(error.cause instanceof LayoutRecordError);
    assert.equal(error.cause.file, `${CHILD_DIR}/session.json`);
    assert.equal(error.cause.path, "depth");
    return true;
  });
});

test("a corrupt unrelated tree does not hide a healthy one, but a duplicate id does", async () => {
  const fs = await treeWithChild();
  const other = "/repo/.loopy_loop/sessions/002_broken";
  await fs.mkdir(other);
  await fs.writeFile(`${other}/session.json`, new TextEncoder().encode("{not json"));
  assert.equal((await resolverFor(fs, CHILD_ID)).current.sessionId, CHILD_ID);
  await assert.rejects(resolverFor(fs, "002_broken"), TopologyError);

  // A second healthy tree that also contains the child id makes the id ambiguous.
  const dup = "/repo/.loopy_loop/sessions/003_dup";
  await fs.mkdir(`${dup}/children`, { recursive: true });
  const rootManifest = await readJson(fs, `${ROOT_DIR}/session.json`);
  await writeJson(fs, `${dup}/session.json`, {
    ...rootManifest,
    session_id: "003_dup",
    root_session_id: "003_dup",
  });
  await fs.rename(`${CHILD_DIR}`, `/repo/child-copy`);
  await fs.mkdir(CHILD_DIR);
  for (const [name, kind] of Object.entries(fs.snapshotTree("/repo/child-copy"))) {
    if (kind.startsWith("dir")) await fs.mkdir(`${CHILD_DIR}/${name}`);
    else await fs.writeFile(`${CHILD_DIR}/${name}`, await fs.readFile(`/repo/child-copy/${name}`));
  }
  await fs.rename("/repo/child-copy", `${dup}/children/${CHILD_ID}`);
  const copied = await readJson(fs, `${dup}/children/${CHILD_ID}/session.json`);
  await writeJson(fs, `${dup}/children/${CHILD_ID}/session.json`, {
    ...copied,
    root_session_id: "003_dup",
    parent_session_id: "003_dup",
  });
  const parentJson = await readJson(fs, `${dup}/children/${CHILD_ID}/parent.json`);
  await writeJson(fs, `${dup}/children/${CHILD_ID}/parent.json`, {
    ...parentJson,
    parent_session_id: "003_dup",
  });
  await assert.rejects(resolverFor(fs, CHILD_ID), TopologyError);
});

test("an unknown session id is its own typed error", async () => {
  const fs = await treeWithChild();
  await assert.rejects(resolverFor(fs, "404_missing"), UnknownSessionError);
  const empty = await newRepo();
  await assert.rejects(resolverFor(empty, "001_x"), UnknownSessionError);
});

test("trace: references resolve only in mirror sessions, to their manifest's directory", async () => {
  const fs = await newRepo();
  const legacy = "20260419_143022_71393ee22450_ab12cd34";
  const dir = `/repo/.loopy_loop/sessions/${legacy}`;
  await fs.mkdir(dir, { recursive: true });
  await writeJson(fs, `${dir}/session.json`, {
    session_id: legacy,
    goal_hash: "71393ee22450",
    workflow_set: "main",
    parent_session_id: null,
    created_at: "2026-04-19T14:30:22Z",
  });
  const attemptDir = `/repo/.loopy_loop/traces/${legacy}/sessions/${legacy}/attempts/97521a5ed6b7`;
  await fs.mkdir(`${attemptDir}/eval`, { recursive: true });
  await writeJson(fs, `${attemptDir}/trace_manifest.json`, {
    schema_version: 1,
    manifest_id: "trace-97521a5ed6b7",
  });
  await writeJson(fs, `${attemptDir}/eval/report.json`, { passed: 1 });
  const resolver = await resolverFor(fs, legacy);
  assert.equal(resolver.layout, "mirror");
  assert.equal(
    await resolver.resolveExisting("trace:trace-97521a5ed6b7:/eval/report.json"),
    `${attemptDir}/eval/report.json`,
  );
  await assert.rejects(
    resolver.resolve("trace:trace-000000000000:/eval/report.json"),
    refusal("unknown_trace"),
  );
  await fs.symlink("/etc", `${attemptDir}/eval/link`);
  await assert.rejects(resolver.resolve("trace:trace-97521a5ed6b7:/eval/link"), refusal("symlink"));
});

test("a trace: reference in a mirror session without traces is unknown", async () => {
  const fs = await newRepo();
  const legacy = "20260419_143022_71393ee22450_ab12cd34";
  const dir = `/repo/.loopy_loop/sessions/${legacy}`;
  await fs.mkdir(dir, { recursive: true });
  await writeJson(fs, `${dir}/session.json`, {
    session_id: legacy,
    goal_hash: "71393ee22450",
    workflow_set: "main",
    parent_session_id: null,
    created_at: "2026-04-19T14:30:22Z",
  });
  const resolver = await resolverFor(fs, legacy);
  await assert.rejects(
    resolver.resolve("trace:trace-abc:/eval/report.json"),
    refusal("unknown_trace"),
  );
});

test("a trace: reference whose trace is present but whose manifest is corrupt is an error naming the manifest, not pruned", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const attempt = ROOT_ATTEMPTS.first.attemptId;
  const reference = `trace:trace-${attempt}:/eval/report.json`;
  const manifestPath = `${tree.traceDir(attempt)}/trace_manifest.json`;
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  assert.equal((await resolver.resolve(reference)).status, "present");
  const recordFails = (path: string) => (error: unknown): boolean => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, manifestPath, error.message);
    assert.equal(error.path, path, error.message);
    return true;
  };
  const intact = await fs.readFile(manifestPath);
  // A torn write.
  await fs.writeFile(manifestPath, intact.subarray(0, 40));
  await assert.rejects(resolver.resolve(reference), recordFails(""));
  // A manifest that names another trace.
  await writeJson(fs, manifestPath, { schema_version: 1, manifest_id: "trace-other" });
  await assert.rejects(resolver.resolve(reference), recordFails("manifest_id"));
  // The manifest gone while the trace's files are still there.
  await fs.remove(manifestPath);
  await assert.rejects(resolver.resolve(reference), recordFails(""));
  // Only a trace directory that is gone is pruned.
  await fs.remove(tree.traceDir(attempt), { recursive: true });
  const pruned = await resolver.resolve(reference);
  assert.deepEqual([pruned.exists, pruned.status], [false, "pruned"]);
});
