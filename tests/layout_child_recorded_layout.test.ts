// The child lifecycle's writers decide from the parent's own session.json, never from what the
// caller claims: publishing a child request into a session whose session.json records the mirror
// layout is refused (UnsupportedLayoutError) whatever layout the SessionPaths were built for, and
// a child session is created only under a parent whose session.json records the identity the
// caller gave (its id, root and depth), so the child never contradicts its physical parent. Each
// refusal comes before anything is written.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  createChildSession,
  type CreateChildSessionOptions,
  LayoutRecordError,
  loadSessionTree,
  publishChildRequest,
  readSessionLayout,
  SessionPaths,
  sha256Ref,
  UnsupportedLayoutError,
} from "../layout.ts";
import { FsError } from "../src/port/errors.ts";
import { childRequest, CONTRACTS, deterministic, newRepo, newRoot } from "./layout_fixtures.ts";
import { buildMirrorTree, MIRROR_CHILD_ID, MIRROR_ROOT_ID } from "./fixtures/mirror_tree.ts";

test("publishChildRequest refuses a session whose session.json records mirror, whatever the paths say", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  for (const dir of [tree.rootDir, tree.childDir]) {
    assert.equal(await readSessionLayout(fs, dir), "mirror");
    const claimed = new SessionPaths(dir, "folded");
    const before = fs.snapshotTree("/");
    await assert.rejects(
      publishChildRequest(fs, claimed, childRequest("x-1")),
      UnsupportedLayoutError,
      dir,
    );
    assert.deepEqual(fs.snapshotTree("/"), before, dir);
  }
});

test("publishChildRequest refuses a directory without session.json before writing", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/not-a-session/child_requests/pending", { recursive: true });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    publishChildRequest(fs, new SessionPaths("/repo/not-a-session", "folded"), childRequest("x")),
    FsError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("publishChildRequest still publishes into a folded session", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const published = await publishChildRequest(fs, root.paths, childRequest("x-1"));
  assert.equal(published.file, root.paths.pendingRequest("x-1"));
});

const encoder = new TextEncoder();

function childOptions(
  parent: { dir: string; sessionId: string; rootSessionId: string; depth: number },
): CreateChildSessionOptions {
  const request = childRequest("r1");
  const bytes = encoder.encode(JSON.stringify(request));
  return {
    parentDir: parent.dir,
    parentSessionId: parent.sessionId,
    rootSessionId: parent.rootSessionId,
    parentDepth: parent.depth,
    sessionId: "01_r1",
    request,
    requestBytes: bytes,
    inputs: [],
    harnessCapabilityRosterSha256: sha256Ref(bytes),
    ...CONTRACTS,
    ...deterministic(),
  };
}

test("createChildSession refuses an identity the parent's session.json does not record", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const parent = {
    dir: root.dir,
    sessionId: root.sessionId,
    rootSessionId: root.sessionId,
    depth: 0,
  };
  const cases: [string, Partial<CreateChildSessionOptions>, unknown][] = [
    ["parent_session_id", { parentSessionId: "002_other" }, "002_other"],
    ["root_session_id", { rootSessionId: "002_other" }, "002_other"],
    ["depth", { parentDepth: 3 }, 4],
  ];
  const before = fs.snapshotTree("/");
  for (const [field, wrong, value] of cases) {
    await assert.rejects(
      createChildSession(fs, { ...childOptions(parent), ...wrong }),
      (error) =>
        error instanceof LayoutRecordError && error.path === field && error.value === value &&
        error.file === `${root.dir}/children/01_r1/session.json`,
      field,
    );
    assert.deepEqual(fs.snapshotTree("/"), before, field);
  }
  // The tree stays loadable, and the right identity creates the child.
  await loadSessionTree(fs, "/repo", root.sessionId);
  const created = await createChildSession(fs, childOptions(parent));
  const loaded = await loadSessionTree(fs, "/repo", created.sessionId);
  assert.equal(loaded.require(created.sessionId).parentSessionId, root.sessionId);
});

test("createChildSession refuses a parent directory without session.json before writing", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/not-a-session", { recursive: true });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    createChildSession(
      fs,
      childOptions({
        dir: "/repo/not-a-session",
        sessionId: "001_x",
        rootSessionId: "001_x",
        depth: 0,
      }),
    ),
    FsError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("createChildSession checks a mirror parent's identity too, and may nest a folded child in it", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  // Both layouts nest children at <parent>/children/<id>, and a folded child of a mirror parent
  // is a supported tree: only the identity the parent records decides.
  const parent = {
    dir: tree.rootDir,
    sessionId: MIRROR_ROOT_ID,
    rootSessionId: MIRROR_ROOT_ID,
    depth: 0,
  };
  const before = fs.snapshotTree("/");
  await assert.rejects(
    createChildSession(fs, { ...childOptions(parent), parentSessionId: MIRROR_CHILD_ID }),
    (error) => error instanceof LayoutRecordError && error.path === "parent_session_id",
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  const created = await createChildSession(fs, childOptions(parent));
  const loaded = await loadSessionTree(fs, "/repo", created.sessionId);
  assert.equal(loaded.require(created.sessionId).layout, "folded");
  assert.equal(loaded.require(MIRROR_ROOT_ID).layout, "mirror");
});

test("createChildSession checks a legacy v1 root parent as its own root at depth 0", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  await fs.writeFile(
    `${tree.rootDir}/session.json`,
    encoder.encode(JSON.stringify({
      session_id: MIRROR_ROOT_ID,
      goal_hash: "71393ee22450",
      workflow_set: "main",
      parent_session_id: null,
      created_at: "2026-04-19T14:30:22Z",
    })),
  );
  const parent = {
    dir: tree.rootDir,
    sessionId: MIRROR_ROOT_ID,
    rootSessionId: MIRROR_ROOT_ID,
    depth: 0,
  };
  const before = fs.snapshotTree("/");
  for (
    const [field, wrong] of [
      ["root_session_id", { rootSessionId: MIRROR_CHILD_ID }],
      ["depth", { parentDepth: 1 }],
    ] as const
  ) {
    await assert.rejects(
      createChildSession(fs, { ...childOptions(parent), ...wrong }),
      (error) => error instanceof LayoutRecordError && error.path === field,
      field,
    );
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
  await createChildSession(fs, childOptions(parent));
});
