// A repository reached through a symlinked path (macOS /tmp -> /private/tmp, a symlinked
// checkout): the in-process serialization of the layout must not depend on how a caller spells
// the repository. createRootSession hands back paths spelled as the caller gave the repository,
// while loadSessionTree (and so processNextChildRequest, recordChildOutcome, pruneRaw) works
// with the real path; both spellings of one session must share one queue.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import {
  ChildRequestError,
  createAttemptArtifacts,
  createRootSession,
  loadSessionTree,
  processNextChildRequest,
  pruneRaw,
  publishChildRequest,
  readChildrenLedger,
  updateSessionState,
} from "../layout.ts";
import {
  childRequest,
  CONTRACTS,
  deterministic,
  patchState,
  pauseAfter,
  readJson,
  writeJson,
} from "./layout_fixtures.ts";
import { isRead } from "./_hooks.ts";

const AT = "2026-04-19T15:00:00Z";

/** A repository at `/real/repo` that callers reach as `/link/repo` (`/link` -> `/real`). */
async function linkedRepo() {
  const fs = new MemoryFs();
  await fs.mkdir("/real/repo", { recursive: true });
  await fs.symlink("/real", "/link");
  const root = await createRootSession(fs, {
    repoRoot: "/link/repo",
    goal: "g",
    ...CONTRACTS,
    ...deterministic(),
  });
  const tree = await loadSessionTree(fs, "/link/repo", root.sessionId);
  const realDir = tree.paths(root.sessionId).dir;
  return { fs, root, realDir };
}

/** Lets every operation that is not waiting for another one run as far as it can. */
async function settle(): Promise<void> {
  // MemoryFs settles every call in a microtask: one macrotask drains them all.
  await new Promise((resolve) => setTimeout(resolve, 0));
}

test("two spellings of one session's directory: concurrent state updates lose nothing", async () => {
  const { fs, root, realDir } = await linkedRepo();
  // The premise: the two spellings really differ.
  assert.equal(root.paths.dir, "/link/repo/.loopy_loop/sessions/001_g");
  assert.equal(realDir, "/real/repo/.loopy_loop/sessions/001_g");
  await Promise.all([
    updateSessionState(fs, root.paths.dir, (state) => {
      state.engine_note = 1;
    }, { updatedAt: AT }),
    updateSessionState(fs, realDir, (state) => {
      state.other_note = 2;
    }, { updatedAt: AT }),
    updateSessionState(fs, `/link/repo/../repo/.loopy_loop/sessions/001_g`, (state) => {
      state.third_note = 3;
    }, { updatedAt: AT }),
  ]);
  const state = await readJson(fs, `${realDir}/state.json`);
  assert.equal(state.engine_note, 1);
  assert.equal(state.other_note, 2);
  assert.equal(state.third_note, 3);
  assert.equal(state.state_revision, 3);
});

test("an engine state update spelled through the link is serialized with an acceptance: the active child survives", async () => {
  const { fs, root } = await linkedRepo();
  await writeJson(
    fs,
    `${root.paths.childRequestsPendingDir}/phase-0.json`,
    childRequest("phase-0"),
  );
  // The engine reads the parent's state (through the link) and is held there.
  const pausing = pauseAfter(
    fs,
    (method, path) => isRead(method) && path.endsWith("001_g/state.json"),
  );
  const engine = updateSessionState(pausing.fs, root.paths.dir, (state) => {
    state.handoff_revision = 1;
  }, { updatedAt: AT });
  await pausing.paused;
  // Meanwhile the request is accepted (the tree's real paths): its pointer to the child must
  // not be overwritten by the engine's stale copy of the state.
  const processing = processNextChildRequest(fs, {
    repoRoot: "/link/repo",
    parentSessionId: root.sessionId,
    ...deterministic(),
  });
  await settle();
  pausing.release();
  const [accepted] = await Promise.all([processing, engine]);
  assert.equal(accepted?.kind, "accepted");
  const state = await readJson(fs, root.paths.stateJson);
  assert.equal(state.active_child_session_id, "01_phase-0");
  assert.equal(state.handoff_revision, 1);
  const ledger = await readChildrenLedger(fs, root.paths, root.sessionId);
  assert.deepEqual(ledger.children.map((c) => [c.session_id, c.status]), [
    ["01_phase-0", "running"],
  ]);
});

test("prune reached through the link re-reads the state in the same queue as the engine's update", async () => {
  const { fs, root } = await linkedRepo();
  await createAttemptArtifacts(fs, root.paths, {
    iteration: 1,
    workflowId: "outer",
    attemptId: "a00000000001",
  }, { prompt: "p", pathsMap: {} });
  await patchState(fs, root.paths.dir, { current_task: null });
  // The engine is about to start attempt 1 again (it has read the state, through the link).
  const pausing = pauseAfter(
    fs,
    (method, path) => isRead(method) && path.endsWith("001_g/state.json"),
  );
  const engine = updateSessionState(pausing.fs, root.paths.dir, (state) => {
    state.current_task = { workflow_id: "outer", iteration: 1, attempt_id: "a00000000001" };
  }, { updatedAt: AT });
  await pausing.paused;
  const prune = pruneRaw(fs, "/link/repo/.loopy_loop");
  await settle();
  pausing.release();
  const [report] = await Promise.all([prune, engine]);
  // The prune's last look at the state came after the engine's update: the attempt it started
  // keeps its raw output.
  assert.deepEqual(report.removed, []);
  assert.deepEqual(report.skipped.map((skip) => skip.reason), ["running_attempt"]);
});

test("one request id published through both spellings at once: exactly one publication", async () => {
  const { fs, root, realDir } = await linkedRepo();
  const tree = await loadSessionTree(fs, "/link/repo", root.sessionId);
  // Two requests under one id (the very same request twice would be one publication, rerun).
  const results = await Promise.allSettled([
    publishChildRequest(fs, root.paths, childRequest("phase-0")),
    publishChildRequest(fs, tree.paths(root.sessionId), childRequest("phase-0", { goal: "Other" })),
  ]);
  assert.deepEqual(results.map((r) => r.status).sort(), ["fulfilled", "rejected"]);
  const refused = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
  assert.ok(refused.reason instanceof ChildRequestError);
  assert.equal(refused.reason.requestId, "phase-0");
  assert.deepEqual(
    (await fs.readDir(`${realDir}/child_requests/pending`)).map((e) => e.name),
    ["phase-0.json"],
  );
});
