// A target is classified by the session that physically contains it, so every spelling of a
// reference (repo:/…, session:/children/<id>/…, session:<id>:/…, root:/…, parent:/…) resolves to
// the same status and the same canonical form; a prune's `.pruning-*` leftover is gone for every
// spelling; and the length limit applies to the reference the caller passed, not to its
// canonical form.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  LogicalReferenceError,
  LogicalReferenceResolver,
  MAX_REFERENCE_LENGTH,
  pruneRaw,
  type ResolvedReference,
} from "../layout.ts";
import { newRepo } from "./layout_fixtures.ts";
import { buildFoldedTree, type FoldedTree } from "./fixtures/folded_tree.ts";
import { buildMirrorTree, MIRROR_ROOT_ID } from "./fixtures/mirror_tree.ts";

async function folded(): Promise<{ fs: MemoryFs; tree: FoldedTree }> {
  const fs = await newRepo();
  return { fs, tree: await buildFoldedTree(fs) };
}

async function resolverFor(fs: MemoryFs, sessionId: string): Promise<LogicalReferenceResolver> {
  return await LogicalReferenceResolver.forSession(fs, { repoRoot: "/repo", sessionId });
}

/** Resolves each spelling with its resolver; all must agree; returns the common answer. */
async function agree(
  spellings: readonly (readonly [LogicalReferenceResolver, string])[],
): Promise<Pick<ResolvedReference, "canonical" | "status" | "exists" | "path">> {
  const answers = [];
  for (const [resolver, reference] of spellings) {
    const resolved = await resolver.resolve(reference);
    assert.equal(resolver.canonicalize(reference), resolved.canonical, reference);
    answers.push({
      reference,
      canonical: resolved.canonical,
      status: resolved.status,
      exists: resolved.exists,
      path: resolved.path,
    });
  }
  const [first] = answers;
  assert.ok(first !== undefined);
  for (const answer of answers) {
    assert.deepEqual(
      { ...answer, reference: "" },
      { ...first, reference: "" },
      `${answer.reference} vs ${first.reference}`,
    );
  }
  return first;
}

test("a prune's .pruning-* leftover is gone through every spelling", async () => {
  const { fs, tree } = await folded();
  const rootRaw = `${tree.root.dir}/raw`;
  await fs.rename(`${rootRaw}/0001_outer`, `${rootRaw}/.pruning-deadbeef-0001_outer`);
  const root = await resolverFor(fs, tree.rootId);
  const child = await resolverFor(fs, tree.childId);
  const hidden = "raw/.pruning-deadbeef-0001_outer/eval/report.json";
  const answer = await agree([
    [root, `session:/${hidden}`],
    [root, `repo:/.loopy_loop/sessions/${tree.rootId}/${hidden}`],
    [root, `session:${tree.rootId}:/${hidden}`],
    [child, `parent:/${hidden}`],
    [child, `root:/${hidden}`],
    [child, `repo:/.loopy_loop/sessions/${tree.rootId}/${hidden}`],
  ]);
  assert.deepEqual([answer.exists, answer.status], [false, "pruned"]);
  assert.equal(answer.canonical, `session:${tree.rootId}:/${hidden}`);
});

test("a pruned child raw directory reads the same through every spelling", async () => {
  const { fs, tree } = await folded();
  await pruneRaw(fs, tree.loopyRoot);
  const root = await resolverFor(fs, tree.rootId);
  const child = await resolverFor(fs, tree.childId);
  for (const below of ["raw/0001_leaf", "raw/0001_leaf/eval/report.json"]) {
    const answer = await agree([
      [child, `session:/${below}`],
      [root, `session:${tree.childId}:/${below}`],
      [root, `session:/children/${tree.childId}/${below}`],
      [child, `parent:/children/${tree.childId}/${below}`],
      [root, `repo:/.loopy_loop/sessions/${tree.rootId}/children/${tree.childId}/${below}`],
    ]);
    assert.deepEqual([answer.exists, answer.status], [false, "pruned"], below);
    assert.equal(answer.canonical, `session:${tree.childId}:/${below}`);
  }
  // A durable file of the child reads present, with the same canonical form, however named.
  const durable = await agree([
    [child, "session:/project_state/plan.md"],
    [root, `session:/children/${tree.childId}/project_state/plan.md`],
    [
      root,
      `repo:/.loopy_loop/sessions/${tree.rootId}/children/${tree.childId}/project_state/plan.md`,
    ],
  ]);
  assert.deepEqual([durable.exists, durable.status], [true, "present"]);
  assert.equal(durable.canonical, `session:${tree.childId}:/project_state/plan.md`);
  // Outside every session: a repository reference stays one.
  assert.equal(root.canonicalize("repo:/docs/spec.md"), "repo:/docs/spec.md");
  assert.equal(
    root.canonicalize(`repo:/.loopy_loop/sessions/${tree.rootId}`),
    `session:${tree.rootId}:/`,
  );
});

test("the length limit applies to the reference given, not to its longer canonical form", async () => {
  const { fs, tree } = await folded();
  const root = await resolverFor(fs, tree.rootId);
  const segment = "a".repeat(200);
  let reference = `session:/${Array.from({ length: 20 }, () => segment).join("/")}`;
  reference = `${reference}/${"b".repeat(4090 - reference.length - 1)}`;
  assert.equal(reference.length, 4090);
  const resolved = await root.resolve(reference);
  assert.equal(resolved.status, "absent");
  assert.ok(resolved.canonical.length > MAX_REFERENCE_LENGTH);
  assert.equal(
    resolved.canonical,
    `session:${tree.rootId}:/${reference.slice("session:/".length)}`,
  );
  assert.equal(root.canonicalize(reference), resolved.canonical);
  const tooLong = `${reference}${"c".repeat(MAX_REFERENCE_LENGTH - reference.length + 1)}`;
  await assert.rejects(
    root.resolve(tooLong),
    (error: unknown) => error instanceof LogicalReferenceError && error.reason === "grammar",
  );
});

test("a mirror trace tree a prune renamed aside is gone through a repo:/ spelling too", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID);
  const inside = `sessions/${MIRROR_ROOT_ID}/attempts`;
  assert.equal(
    (await resolver.resolve(`repo:/.loopy_loop/traces/${MIRROR_ROOT_ID}/${inside}`)).status,
    "present",
  );
  await fs.rename(
    `${tree.tracesDir}/${MIRROR_ROOT_ID}`,
    `${tree.tracesDir}/.pruning-0badf00d-${MIRROR_ROOT_ID}`,
  );
  const renamed = await resolver.resolve(
    `repo:/.loopy_loop/traces/.pruning-0badf00d-${MIRROR_ROOT_ID}/${inside}`,
  );
  assert.deepEqual([renamed.exists, renamed.status], [false, "pruned"]);
  const gone = await resolver.resolve(`repo:/.loopy_loop/traces/${MIRROR_ROOT_ID}/${inside}`);
  assert.deepEqual([gone.exists, gone.status], [false, "pruned"]);
});
