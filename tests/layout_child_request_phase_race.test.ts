// The parent's phase changes while one of its child requests is being accepted (its engine starts
// an attempt, or commits a terminal transition, between the admission and the state update): the
// acceptance never points a frozen terminal state at a new child, nor an executing one.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  processNextChildRequest,
  readChildrenLedger,
  readSessionState,
  SessionStateError,
  updateSessionState,
} from "../layout.ts";
import {
  childRequest,
  deterministic,
  newRepo,
  newRoot,
  pauseAfter,
  writeJson,
} from "./layout_fixtures.ts";

/** Accepts `alpha` for a new root, running `meanwhile` once the child is published. */
async function acceptWhile(
  meanwhile: (fs: Awaited<ReturnType<typeof newRepo>>, dir: string) => Promise<void>,
) {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await writeJson(fs, root.paths.pendingRequest("alpha"), childRequest("alpha"));
  const pausing = pauseAfter(
    fs,
    (method, path) => method === "rename" && path.includes("/children/.staging-"),
  );
  const options = { repoRoot: "/repo", parentSessionId: root.sessionId, ...deterministic() };
  const run = processNextChildRequest(pausing.fs, options);
  await pausing.paused;
  await meanwhile(fs, root.dir);
  pausing.release();
  const outcome = await run.then(() => undefined, (error: unknown) => error);
  return { fs, root, options, outcome };
}

test("a terminal transition committed during an acceptance: the frozen state is kept, the child never dispatched", async () => {
  const { fs, root, outcome } = await acceptWhile(async (fs, dir) => {
    await updateSessionState(fs, dir, (s) => {
      s.status = "max_turns";
      s.current_task = null;
      s.terminal_state_revision = 7;
      s.terminal_at = "2026-04-19T15:00:00Z";
    }, { updatedAt: "2026-04-19T15:00:00Z" });
  });
  assert.ok(outcome instanceof SessionStateError, String(outcome));
  assert.match(outcome.message, /A terminal session dispatches no children/);
  const state = await readSessionState(fs, root.dir);
  assert.equal(state.status, "max_turns");
  assert.equal(state.active_child_session_id, null);
  assert.equal(state.state_revision, 1);
  const ledger = await readChildrenLedger(fs, root.paths, root.sessionId);
  assert.deepEqual(ledger.children.map((c) => [c.session_id, c.status]), [
    ["01_alpha", "failed_dispatch"],
  ]);
});

test("an attempt started during an acceptance: refused for now, and completed once it finished", async () => {
  const { fs, root, options, outcome } = await acceptWhile(async (fs, dir) => {
    await updateSessionState(fs, dir, (s) => {
      s.current_task = { workflow_id: "outer", iteration: 1, attempt_id: "a1" };
    }, { updatedAt: "2026-04-19T15:00:00Z" });
  });
  assert.ok(outcome instanceof SessionStateError, String(outcome));
  assert.match(outcome.message, /after the parent attempt has finished/);
  assert.equal((await readSessionState(fs, root.dir)).active_child_session_id, null);
  await updateSessionState(fs, root.dir, (s) => {
    s.current_task = null;
  }, { updatedAt: "2026-04-19T15:01:00Z" });
  const resumed = await processNextChildRequest(fs, options);
  assert.equal(resumed?.kind === "accepted" && resumed.childSessionId, "01_alpha");
  assert.equal((await readSessionState(fs, root.dir)).active_child_session_id, "01_alpha");
  const ledger = await readChildrenLedger(fs, root.paths, root.sessionId);
  assert.deepEqual(ledger.children.map((c) => [c.session_id, c.status]), [["01_alpha", "running"]]);
});

test("an acceptance refused for an attempt started meanwhile, whose parent then ends, is recorded failed_dispatch", async () => {
  const { fs, root, options, outcome } = await acceptWhile(async (fs, dir) => {
    await updateSessionState(fs, dir, (s) => {
      s.current_task = { workflow_id: "outer", iteration: 1, attempt_id: "a1" };
    }, { updatedAt: "2026-04-19T15:00:00Z" });
  });
  assert.ok(outcome instanceof SessionStateError, String(outcome));
  await updateSessionState(fs, root.dir, (s) => {
    s.status = "max_turns";
    s.current_task = null;
    s.terminal_state_revision = 7;
    s.terminal_at = "2026-04-19T15:01:00Z";
  }, { updatedAt: "2026-04-19T15:01:00Z" });
  await assert.rejects(processNextChildRequest(fs, options), /A terminal session dispatches no/);
  const ledger = await readChildrenLedger(fs, root.paths, root.sessionId);
  assert.deepEqual(ledger.children.map((c) => [c.session_id, c.status]), [
    ["01_alpha", "failed_dispatch"],
  ]);
  assert.equal((await readSessionState(fs, root.dir)).status, "max_turns");
});
