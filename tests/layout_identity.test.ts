// A session's state.json is its own: a state that names another session (session_id, the engine's
// active_session_id, root_session_id) than the directory's session.json records is a typed error
// naming the file and the field, never read (or rewritten) as this session's scheduling truth.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  findWorkingSession,
  LayoutRecordError,
  loadSessionTree,
  processNextChildRequest,
  publishChildRequest,
  readSessionState,
  updateSessionState,
} from "../layout.ts";
import {
  childRequest,
  deterministic,
  newRepo,
  newRoot,
  patchState,
  readJson,
  writeJson,
} from "./layout_fixtures.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";
const UPDATED_AT = "2026-04-19T15:00:00Z";

/** A root suspended on its running child (request `phase-1`). */
async function suspendedRoot(): Promise<
  { fs: MemoryFs; rootDir: string; childId: string; childDir: string }
> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await publishChildRequest(fs, root.paths, childRequest("phase-1"));
  const accepted = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    ...deterministic(),
  });
  if (accepted?.kind !== "accepted") throw new Error("expected acceptance");
  return {
    fs,
    rootDir: root.dir,
    childId: accepted.childSessionId,
    childDir: accepted.childDir,
  };
}

/** Asserts a `LayoutRecordError` naming `file` and `field`. */
function recordError(file: string, field: string): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, field, error.message);
    return true;
  };
}

test("a state.json that names another session is a typed error, not this session's state", async () => {
  const { fs, rootDir, childDir } = await suspendedRoot();
  const file = `${rootDir}/state.json`;
  // The child's state lands in the root's directory (a restore or copy mistake).
  await fs.writeFile(file, await fs.readFile(`${childDir}/state.json`));
  const copied = await fs.readFile(file);
  await assert.rejects(readSessionState(fs, rootDir), recordError(file, "session_id"));
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  await assert.rejects(findWorkingSession(fs, tree), recordError(file, "session_id"));
  await assert.rejects(
    updateSessionState(fs, rootDir, (state) => {
      state.status = "stopped";
    }, { updatedAt: UPDATED_AT }),
    recordError(file, "session_id"),
  );
  assert.deepEqual(await fs.readFile(file), copied, "a foreign state is never rewritten");
});

test("a state.json that names another root is a typed error at root_session_id", async () => {
  const { fs, childDir } = await suspendedRoot();
  const file = `${childDir}/state.json`;
  await patchState(fs, childDir, { root_session_id: "002_another-program" });
  await assert.rejects(readSessionState(fs, childDir), recordError(file, "root_session_id"));
  // The walk down the active chain meets the child's foreign state.
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  await assert.rejects(findWorkingSession(fs, tree), recordError(file, "root_session_id"));
  // The engine leaves a legacy state's root null: that names no root, and is read.
  await patchState(fs, childDir, { root_session_id: null });
  assert.equal((await readSessionState(fs, childDir)).root_session_id, null);
});

test("the engine's active_session_id is the state's session: another one is a typed error", async () => {
  const id = "20260419_143022_71393ee22450_ab12cd34";
  const dir = `/repo/.loopy_loop/sessions/${id}`;
  const fs = await newRepo();
  await fs.mkdir(dir, { recursive: true });
  await writeJson(fs, `${dir}/session.json`, {
    session_id: id,
    goal_hash: "71393ee22450",
    workflow_set: "main",
    parent_session_id: null,
    created_at: "2026-04-19T14:30:22Z",
  });
  const state = {
    status: "running",
    goal_hash: "71393ee22450",
    workflow_set: "main",
    max_turns: 50,
    active_session_id: id,
    root_session_id: id,
    current_task: null,
  };
  const file = `${dir}/state.json`;
  await writeJson(fs, file, state);
  assert.equal((await readSessionState(fs, dir)).active_session_id, id);
  const other = "20260419_150000_71393ee22450_cd34ab12";
  await writeJson(fs, file, { ...state, active_session_id: other });
  await assert.rejects(readSessionState(fs, dir), recordError(file, "active_session_id"));
  const tree = await loadSessionTree(fs, "/repo", id);
  await assert.rejects(findWorkingSession(fs, tree), recordError(file, "active_session_id"));
  // A legacy root is its own root (its v1 session.json records no parent).
  await writeJson(fs, file, { ...state, root_session_id: other });
  await assert.rejects(readSessionState(fs, dir), recordError(file, "root_session_id"));
});

test("updateSessionState refuses a change that makes the state name another session", async () => {
  const { fs, rootDir, childId } = await suspendedRoot();
  const file = `${rootDir}/state.json`;
  const before = await fs.readFile(file);
  for (const [field, value] of [["session_id", childId], ["root_session_id", childId]]) {
    await assert.rejects(
      updateSessionState(fs, rootDir, (state) => {
        state[field as string] = value;
      }, { updatedAt: UPDATED_AT }),
      recordError(file, field as string),
    );
    assert.deepEqual(await fs.readFile(file), before, field);
  }
  // Its own identity is kept by an ordinary update.
  await updateSessionState(fs, rootDir, (state) => {
    state.note = "kept";
  }, { updatedAt: UPDATED_AT });
  const written = await readJson(fs, file);
  assert.deepEqual([written.session_id, written.root_session_id], [ROOT_ID, ROOT_ID]);
});

test("findWorkingSession checks states against the loaded tree without reading session.json", async () => {
  const { fs, childId } = await suspendedRoot();
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  fs.resetCounter();
  assert.equal((await findWorkingSession(fs, tree))?.node.sessionId, childId);
  const read = fs.operationLog.map((op) => op.path);
  assert.ok(read.some((path) => path.endsWith("/state.json")), String(read));
  assert.deepEqual(read.filter((path) => path.endsWith("/session.json")), []);
});
