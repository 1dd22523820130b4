// The folded-only writers (attempt artifacts, git receipts, eval acceptance) decide the layout from
// the session's own session.json, never from the SessionPaths a caller built: a session whose
// session.json records the mirror layout is refused (UnsupportedLayoutError) before anything is
// written, whatever layout the paths were built for. The writers of both layouts (attempt results,
// session outcomes) refuse paths built for the other layout the same way.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  acceptEvalReceipt,
  createAttemptArtifacts,
  readSessionLayout,
  SessionPaths,
  UnsupportedLayoutError,
  updateSessionState,
  writeAttemptResult,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import { newRepo, newRoot, stoppedOutcome, writeJson } from "./layout_fixtures.ts";
import {
  buildMirrorTree,
  MIRROR_ROOT_ID,
  ROOT_ATTEMPTS,
  stopMirrorRoot,
} from "./fixtures/mirror_tree.ts";

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

test("a folded session's outcome and attempt result refuse paths built for the mirror layout", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await updateSessionState(fs, root.dir, (state) => {
    state.status = "max_turns";
    state.terminal_state_revision = 1;
    state.terminal_at = "2026-04-20T00:00:00Z";
  }, { updatedAt: "2026-04-20T00:00:00Z" });
  // Mirror-only files an agent left in the folded tree are never cited for it.
  await fs.mkdir(`${root.dir}/trace_seals`);
  await writeJson(fs, `${root.dir}/trace_seals/a1b2c3d4e5f6.json`, {});
  const claimed = new SessionPaths(root.dir, "mirror");
  const input = stoppedOutcome(root.sessionId, root.manifest.goal_hash, 1, {
    evidenceRefs: ["trace:trace-a1b2c3d4e5f6:/eval/report.json"],
  });
  const before = fs.snapshotTree("/");
  await assert.rejects(writeSessionOutcome(fs, claimed, input), UnsupportedLayoutError);
  await assert.rejects(
    writeAttemptResult(fs, claimed.attempt(1, "outer"), { status: "completed", exit_code: 0 }),
    UnsupportedLayoutError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  // The session still finishes under its own layout, citing no trace seal.
  const own = new SessionPaths(root.dir, "folded");
  const written = await writeSessionOutcome(fs, own, { ...input, evidenceRefs: [] });
  assert.deepEqual(written.trace_seal_refs, []);
});

test("a mirror session's outcome and attempt result refuse paths built for the folded layout", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const claimed = new SessionPaths(tree.rootDir, "folded");
  const { iteration, workflowId } = ROOT_ATTEMPTS.active;
  const before = fs.snapshotTree("/");
  await assert.rejects(
    writeAttemptResult(fs, claimed.attempt(iteration, workflowId), { status: "partial" }),
    UnsupportedLayoutError,
  );
  await stopMirrorRoot(fs, tree);
  const goal = JSON.parse(
    new TextDecoder().decode(await fs.readFile(`${tree.rootDir}/session.json`)),
  )
    .goal_hash as string;
  const input = stoppedOutcome(MIRROR_ROOT_ID, goal, 8, {
    terminalStatus: "stopped",
    stopReason: "stop_requested",
  });
  const stopped = fs.snapshotTree("/");
  assert.notDeepEqual(stopped, before);
  await assert.rejects(writeSessionOutcome(fs, claimed, input), UnsupportedLayoutError);
  assert.deepEqual(fs.snapshotTree("/"), stopped);
  // Under its own layout the outcome lists every seal of trace_seals/, as the engine does.
  const written = await writeSessionOutcome(fs, new SessionPaths(tree.rootDir, "mirror"), input);
  assert.deepEqual(
    written.trace_seal_refs,
    [
      `session:/trace_seals/${ROOT_ATTEMPTS.second.attemptId}.json`,
      `session:/trace_seals/${ROOT_ATTEMPTS.first.attemptId}.json`,
    ].sort(),
  );
});
