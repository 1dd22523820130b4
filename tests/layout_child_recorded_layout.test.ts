// The child lifecycle's writers decide from the parent's own session.json, never from what the
// caller claims: publishing a child request into a session whose session.json records the mirror
// layout is refused (UnsupportedLayoutError) whatever layout the SessionPaths were built for,
// before anything is written.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  publishChildRequest,
  readSessionLayout,
  SessionPaths,
  UnsupportedLayoutError,
} from "../layout.ts";
import { FsError } from "../src/port/errors.ts";
import { childRequest, newRepo, newRoot } from "./layout_fixtures.ts";
import { buildMirrorTree } from "./fixtures/mirror_tree.ts";

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
