// The folded-only writers (attempt artifacts, git receipts, eval acceptance) decide the layout from
// the session's own session.json, never from the SessionPaths a caller built: a session whose
// session.json records the mirror layout is refused (UnsupportedLayoutError) before anything is
// written, whatever layout the paths were built for.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  acceptEvalReceipt,
  createAttemptArtifacts,
  readSessionLayout,
  SessionPaths,
  UnsupportedLayoutError,
  writeGitReceipt,
} from "../layout.ts";
import { newRepo, writeJson } from "./layout_fixtures.ts";
import { buildMirrorTree, MIRROR_ROOT_ID } from "./fixtures/mirror_tree.ts";

test("folded-only writers refuse a session whose session.json records mirror, whatever the paths say", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  assert.equal(await readSessionLayout(fs, tree.rootDir), "mirror");
  const claimed = new SessionPaths(tree.rootDir, "folded");
  const attempt = { iteration: 9, workflowId: "outer", attemptId: "abcabcabcabc" };
  await fs.mkdir(`${tree.rootDir}/eval_receipts`, { recursive: true });
  await writeJson(fs, `${tree.rootDir}/eval_receipts/e1.json`, { eval_id: "e1" });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    createAttemptArtifacts(fs, claimed, attempt, { prompt: "p", pathsMap: {} }),
    UnsupportedLayoutError,
  );
  await assert.rejects(
    writeGitReceipt(fs, claimed, MIRROR_ROOT_ID, attempt, "after", {
      head: null,
      branch: null,
      dirty: null,
      rawStatus: new TextEncoder().encode("{}\n"),
    }),
    UnsupportedLayoutError,
  );
  await assert.rejects(
    acceptEvalReceipt(fs, claimed, "e1", { sessionId: MIRROR_ROOT_ID }),
    UnsupportedLayoutError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});
