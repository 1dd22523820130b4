// Terminal records at their edges: a goal_met control cites only its own session's accepted eval
// receipts, and a storage fault reading them is that fault; a handoff under a file project_state
// is invalid, and one from an unknown attempt too; a legacy v1 session's outcome names the root
// its nesting gives, or is refused before it is written.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  LayoutRecordError,
  observeHandoff,
  openSessionPaths,
  readTerminalControl,
  recordChildOutcome,
  type SessionOutcomeInput,
  type SessionPaths,
  writeSessionOutcome,
} from "../layout.ts";
import {
  acceptedTestsPass,
  awaitingV1Child,
  deterministic,
  evalReceipt,
  goalMetControl,
  newRepo,
  newRoot,
  patchState,
  readJson,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";
import { mirror, MIRROR_CHILD_ID, MIRROR_ROOT_ID } from "./fixtures/mirror_tree.ts";
import { hookedFs } from "./_hooks.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";

const goalMet = goalMetControl(ROOT_ID);
const current = {
  sessionId: ROOT_ID,
  workflowId: "outer",
  attemptId: "a26",
  completionRole: "outer",
};

test("a goal_met control citing another session's eval receipt of the same name is refused", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const other = await newRoot(fs, "Other program");
  await acceptedTestsPass(fs, root.paths, ROOT_ID);
  // A child of the root, and another tree, each holding a receipt named like the accepted one.
  const manifest = await readJson(fs, root.paths.sessionJson);
  const child = `${root.dir}/children/01_child`;
  await fs.mkdir(child, { recursive: true });
  await writeJson(fs, `${child}/session.json`, {
    ...manifest,
    session_id: "01_child",
    parent_session_id: ROOT_ID,
    depth: 1,
  });
  for (const dir of [child, other.dir]) {
    await fs.mkdir(`${dir}/eval_receipts`, { recursive: true });
    await writeJson(fs, `${dir}/eval_receipts/tests-pass.json`, evalReceipt(ROOT_ID));
  }
  const foreign = [
    "session:01_child:/eval_receipts/tests-pass.json",
    `repo:/.loopy_loop/sessions/${ROOT_ID}/children/01_child/eval_receipts/tests-pass.json`,
    `repo:/.loopy_loop/sessions/${other.sessionId}/eval_receipts/tests-pass.json`,
  ];
  for (const ref of foreign) {
    await writeJson(fs, root.paths.controlJson, { ...goalMet, eval_receipt_refs: [ref] });
    const before = fs.snapshotTree("/");
    await assert.rejects(readTerminalControl(fs, root.paths, current), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, `${ref}: ${error}`);
      assert.equal(error.file, root.paths.controlJson);
      assert.equal(error.path, "eval_receipt_refs[0]");
      assert.equal(error.value, ref);
      assert.match(error.message, /must name an eval receipt of this session/);
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, ref);
  }
  // Its own receipt, spelled through the repository, is the accepted one.
  const own = `repo:/.loopy_loop/sessions/${ROOT_ID}/eval_receipts/tests-pass.json`;
  await writeJson(fs, root.paths.controlJson, { ...goalMet, eval_receipt_refs: [own] });
  assert.deepEqual((await readTerminalControl(fs, root.paths, current))?.record.eval_receipt_refs, [
    own,
  ]);
});

test("a handoff under a project_state that is a file is observed as invalid, and nothing changes", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await fs.remove(`${root.dir}/project_state`, { recursive: true });
  await writeText(fs, `${root.dir}/project_state`, "not a directory");
  const before = fs.snapshotTree("/");
  const seen = await observeHandoff(fs, root.paths, {
    sessionId: ROOT_ID,
    goalSha256: root.manifest.goal_hash,
    storedRevision: 0,
    storedSha256: null,
  });
  assert.equal(seen.status, "invalid");
  assert.equal(seen.handoff, undefined);
  assert.equal(seen.sha256, null);
  assert.match(String(seen.diagnosis), /not a regular file \(a directory on its path is a file\)/);
  assert.ok(seen.diagnosis?.includes(root.paths.handoffJson), seen.diagnosis);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

/** Makes `dir` a legacy v1 session stopped (max_turns) at `revision`: paths, outcome by root. */
async function stoppedV1(
  fs: MemoryFs,
  dir: string,
  sessionId: string,
  parentId: string | null,
  revision: number,
  state: Record<string, unknown> = {},
): Promise<{ paths: SessionPaths; outcome: (rootSessionId: string) => SessionOutcomeInput }> {
  const manifest = await readJson(fs, `${dir}/session.json`);
  await writeJson(fs, `${dir}/session.json`, {
    schema_version: 1,
    session_id: sessionId,
    goal_hash: manifest.goal_hash,
    workflow_set: "main",
    parent_session_id: parentId,
    created_at: manifest.created_at,
  });
  await patchState(fs, dir, {
    status: "max_turns",
    ...state,
    terminal_state_revision: revision,
    terminal_at: "2026-04-19T15:00:01Z",
  });
  const paths = await openSessionPaths(fs, dir);
  const goalSha256 = String(manifest.goal_hash);
  const expected = { sessionId, goalSha256, storedRevision: 0, storedSha256: null };
  const handoff = await observeHandoff(fs, paths, expected);
  const outcome = (rootSessionId: string): SessionOutcomeInput => ({
    sessionId,
    rootSessionId,
    goalSha256,
    terminalStatus: "max_turns",
    stopReason: "max_turns",
    terminalStateRevision: revision,
    terminalAt: "2026-04-19T15:00:01Z",
    handoff,
  });
  return { paths, outcome };
}

/** `memory` where a call whose name matches `ops` on `path` fails with a simulated I/O error. */
function failingAt(memory: MemoryFs, path: string, ops = /^/): FileSystem {
  return hookedFs(memory, {
    before: (op, args) => {
      if (ops.test(op) && args[0] === path) {
        throw new FsIoError("EIO", op, path, "simulated I/O error");
      }
    },
  });
}

/** Asserts `error` is a storage fault at `path` (`label` leads its failure message). */
function faultAt(path: string, label = ""): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof FsIoError, `${label}${error}`);
    assert.equal(error.path, path);
    return true;
  };
}

test("a legacy v1 child's outcome naming another root than its tree's is refused before it is written", async () => {
  const { fs, tree } = await mirror();
  await fs.remove(`${tree.childDir}/session_outcome.json`);
  // A v1 child manifest records no root: the child's nesting under the root says which it is.
  const { paths, outcome } = await stoppedV1(fs, tree.childDir, MIRROR_CHILD_ID, MIRROR_ROOT_ID, 3);
  const before = fs.snapshotTree("/");
  // Written once, such an outcome could never be recorded by the parent, nor rewritten.
  for (const root of [MIRROR_CHILD_ID, "002_other"]) {
    await assert.rejects(writeSessionOutcome(fs, paths, outcome(root)), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, `${root}: ${error}`);
      assert.equal(error.file, paths.sessionOutcomeJson);
      assert.equal(error.path, "root_session_id");
      assert.equal(error.value, root);
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, root);
  }
  // The tree's root is written, and the parent records the child's outcome.
  await writeSessionOutcome(fs, paths, outcome(MIRROR_ROOT_ID));
  await awaitingV1Child(fs, tree.rootDir, MIRROR_CHILD_ID);
  const recorded = await recordChildOutcome(fs, {
    repoRoot: tree.repoRoot,
    parentSessionId: MIRROR_ROOT_ID,
    ...deterministic(),
  });
  assert.equal(recorded.child_session_id, MIRROR_CHILD_ID);
});

test("a legacy v1 root's outcome must name the root itself", async () => {
  const { fs, tree } = await mirror();
  const { paths, outcome } = await stoppedV1(fs, tree.rootDir, MIRROR_ROOT_ID, null, 8, {
    current_task: null,
  });
  const before = fs.snapshotTree("/");
  await assert.rejects(writeSessionOutcome(fs, paths, outcome(MIRROR_CHILD_ID)), (error) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.path, "root_session_id");
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.equal(
    (await writeSessionOutcome(fs, paths, outcome(MIRROR_ROOT_ID))).root_session_id,
    MIRROR_ROOT_ID,
  );
});

test("with no earlier attempts known, a handoff is valid only from the current attempt", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const goal = root.manifest.goal_hash;
  const handoff = {
    schema_version: 1,
    session_id: ROOT_ID,
    goal_sha256: goal,
    revision: 1,
    producer: { workflow_id: "outer", attempt_id: "a20" },
    summary: "Revision 1",
    accepted_outcomes: [],
    open_work: [],
    risks: [],
    decision_refs: [],
    evidence_refs: [],
    delivery_refs: [],
    eval_refs: [],
    updated_at: "2026-04-19T15:00:00Z",
  };
  await writeJson(fs, root.paths.handoffJson, handoff);
  const expectation = {
    sessionId: ROOT_ID,
    goalSha256: goal,
    storedRevision: 0,
    storedSha256: null,
  };
  const seen = async (extra: Record<string, unknown>) =>
    await observeHandoff(fs, root.paths, { ...expectation, ...extra });
  const stranger = await seen({ currentAttemptId: "a26" });
  assert.equal(stranger.status, "invalid");
  assert.equal(stranger.diagnosis, "The handoff producer is not an attempt of this session");
  assert.equal((await seen({ currentAttemptId: "a26", knownAttemptIds: ["a20"] })).status, "valid");
  assert.equal((await seen({ currentAttemptId: "a20" })).status, "valid");
});

test("a storage fault reading a cited eval receipt or its seal fails with that fault", async () => {
  for (const sealed of ["in state.json", "in a legacy sidecar"]) {
    const memory = await newRepo();
    const root = await newRoot(memory);
    await acceptedTestsPass(memory, root.paths, ROOT_ID);
    if (sealed === "in a legacy sidecar") {
      // A legacy state records no seals: its acceptances are their sidecars.
      const { accepted_eval_seals: _seals, ...state } = await readJson(
        memory,
        root.paths.stateJson,
      );
      await writeJson(memory, root.paths.stateJson, state);
    }
    await writeJson(memory, root.paths.controlJson, {
      ...goalMet,
      eval_receipt_refs: ["session:/eval_receipts/tests-pass.json"],
    });
    assert.ok(await readTerminalControl(memory, root.paths, current), sealed);
    const failing = [root.paths.evalReceipt("tests-pass")];
    if (sealed === "in a legacy sidecar") {
      failing.push(root.paths.evalAcceptedSidecar("tests-pass"));
    }
    for (const path of failing) {
      const fs = failingAt(memory, path, /^(read|open)/);
      const before = memory.snapshotTree("/");
      await assert.rejects(
        readTerminalControl(fs, root.paths, current),
        faultAt(path, `${sealed} ${path}: `),
      );
      assert.deepEqual(memory.snapshotTree("/"), before);
    }
  }
});

test("a storage fault resolving a goal_met control's evidence fails with that fault", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory);
  await writeJson(memory, root.paths.controlJson, {
    ...goalMet,
    evidence_refs: ["session:/project_state/finished.md"],
  });
  assert.ok(await readTerminalControl(memory, root.paths, current));
  const path = `${root.dir}/project_state/finished.md`;
  const fs = failingAt(memory, path);
  await assert.rejects(readTerminalControl(fs, root.paths, current), faultAt(path));
});

test("a storage fault finding which session holds a cited eval receipt fails with that fault", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory);
  const other = await newRoot(memory, "Other program");
  const ref = `repo:/.loopy_loop/sessions/${other.sessionId}/eval_receipts/tests-pass.json`;
  await writeJson(memory, root.paths.controlJson, { ...goalMet, eval_receipt_refs: [ref] });
  // Readable, the other tree holds it: refused as no receipt of this session.
  await assert.rejects(readTerminalControl(memory, root.paths, current), LayoutRecordError);
  // The other tree's manifest cannot be looked at (an I/O error): the tree of this session still
  // loads without it, and the receipt's holder cannot be told.
  const path = `${other.dir}/session.json`;
  const fs = failingAt(memory, path);
  await assert.rejects(readTerminalControl(fs, root.paths, current), faultAt(path));
});
