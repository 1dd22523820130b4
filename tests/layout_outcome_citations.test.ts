// What a folded session's session_outcome.json may cite is decided by the session that holds
// each target, not by the reference's text: a mirror session's delivery_receipts/ (an older
// mirror session of the repository, a mirror parent) may be cited, a folded session's may not,
// whatever the spelling. Reading an outcome never judges what it cites, so a parent can always
// record its child's outcome.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  createChildSession,
  LayoutRecordError,
  loadSessionTree,
  parseSessionOutcome,
  processNextChildRequest,
  recordChildOutcome,
  type SessionOutcomeInput,
  type SessionPaths,
  sha256Ref,
  writeSessionOutcome,
} from "../layout.ts";
import {
  childRequest,
  commitTerminalState,
  CONTRACTS,
  deterministic,
  engineOutcome,
  newRepo,
  newRoot,
  patchState,
  readJson,
  writeJson,
} from "./layout_fixtures.ts";
import {
  buildMirrorTree,
  MIRROR_CHILD_ID,
  MIRROR_ROOT_ID,
  ROOT_ATTEMPTS,
} from "./fixtures/mirror_tree.ts";

const MIRROR_DELIVERY = `delivery-${ROOT_ATTEMPTS.first.attemptId}.json`;
const MIRROR_SESSIONS = `repo:/.loopy_loop/sessions/${MIRROR_ROOT_ID}`;

function outcomeInput(
  sessionId: string,
  rootSessionId: string,
  goalSha256: string,
): SessionOutcomeInput {
  return {
    sessionId,
    rootSessionId,
    goalSha256,
    terminalStatus: "failed",
    stopReason: "max_turns",
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:01Z",
    handoff: {
      status: "missing",
      handoff: undefined,
      sha256: null,
      revision: null,
      diagnosis: "none",
    },
  };
}

function refused(path: string, file: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.path, path, error.message);
    assert.equal(error.file, file);
    return true;
  };
}

async function exists(fs: MemoryFs, path: string): Promise<boolean> {
  return await fs.lstat(path).then(() => true, () => false);
}

test("a folded root may cite an older mirror session's delivery receipts, not a folded session's", async () => {
  const fs = await newRepo();
  await buildMirrorTree(fs);
  const root = await newRoot(fs);
  const other = await newRoot(fs, "Another folded program");
  const id = root.sessionId;
  const base = outcomeInput(id, id, root.manifest.goal_hash);
  await commitTerminalState(fs, root.dir, "failed", 3, "2026-04-19T15:00:01Z");
  const written = await writeSessionOutcome(fs, root.paths, {
    ...base,
    evidenceRefs: [`${MIRROR_SESSIONS}/delivery_receipts/${MIRROR_DELIVERY}`],
    deliveryRefs: [
      `${MIRROR_SESSIONS}/delivery_receipts/${MIRROR_DELIVERY}`,
      `${MIRROR_SESSIONS}/children/${MIRROR_CHILD_ID}/delivery_receipts/d.json`,
      "session:/receipts/delivery-1.json",
    ],
  });
  assert.deepEqual(written.evidence_refs, [
    `${MIRROR_SESSIONS}/delivery_receipts/${MIRROR_DELIVERY}`,
  ]);
  assert.deepEqual(
    (await readJson(fs, root.paths.sessionOutcomeJson)).delivery_refs,
    written.delivery_refs,
  );
  await fs.remove(root.paths.sessionOutcomeJson);
  // Another folded tree of the repository keeps no delivery_receipts/ either: found by its
  // session.json, not by the reference's text.
  for (
    const ref of [
      `repo:/.loopy_loop/sessions/${other.sessionId}/delivery_receipts/d.json`,
      `repo:/.loopy_loop/sessions/${id}/delivery_receipts/d.json`,
      `repo:/.loopy_loop/traces/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}`,
      "repo:/.loopy_loop/trace_finalization_outbox",
      `trace:trace-${ROOT_ATTEMPTS.first.attemptId}:/eval/report.json`,
    ]
  ) {
    await assert.rejects(
      writeSessionOutcome(fs, root.paths, { ...base, deliveryRefs: [ref] }),
      refused("delivery_refs[0]", root.paths.sessionOutcomeJson),
      ref,
    );
    assert.equal(await exists(fs, root.paths.sessionOutcomeJson), false);
  }
});

/** A mirror tree whose root has a folded child (a child with its own, newer workflow set). */
async function foldedChildOfMirror(): Promise<
  { fs: MemoryFs; childId: string; childPaths: SessionPaths; goal: string }
> {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const request = childRequest("folded-phase");
  const bytes = new TextEncoder().encode(JSON.stringify(request));
  const created = await createChildSession(fs, {
    parentDir: tree.rootDir,
    parentSessionId: MIRROR_ROOT_ID,
    rootSessionId: MIRROR_ROOT_ID,
    parentDepth: 0,
    sessionId: "01_folded-phase",
    request,
    requestBytes: bytes,
    inputs: [],
    harnessCapabilityRosterSha256: sha256Ref(bytes),
    ...CONTRACTS,
    ...deterministic(),
  });
  const loaded = await loadSessionTree(fs, "/repo", created.sessionId);
  assert.equal(loaded.require(created.sessionId).layout, "folded");
  assert.equal(loaded.require(MIRROR_ROOT_ID).layout, "mirror");
  return {
    fs,
    childId: created.sessionId,
    childPaths: created.paths,
    goal: created.manifest.goal_hash,
  };
}

test("a folded child of a mirror parent may cite the parent's delivery receipts, not its own", async () => {
  const { fs, childId, childPaths, goal } = await foldedChildOfMirror();
  const base = outcomeInput(childId, MIRROR_ROOT_ID, goal);
  await commitTerminalState(fs, childPaths.dir, "failed", 3, "2026-04-19T15:00:01Z");
  const citations = [
    `parent:/delivery_receipts/${MIRROR_DELIVERY}`,
    `root:/delivery_receipts/${MIRROR_DELIVERY}`,
    `session:${MIRROR_ROOT_ID}:/delivery_receipts/${MIRROR_DELIVERY}`,
    `${MIRROR_SESSIONS}/delivery_receipts/${MIRROR_DELIVERY}`,
  ];
  const written = await writeSessionOutcome(fs, childPaths, {
    ...base,
    evidenceRefs: citations,
    deliveryRefs: ["session:/receipts/delivery-1.json"],
  });
  assert.deepEqual(written.evidence_refs, citations);
  // Its own delivery receipts live in receipts/: delivery_receipts/ of the folded child is
  // refused however it is spelled.
  await fs.remove(childPaths.sessionOutcomeJson);
  for (
    const ref of [
      "session:/delivery_receipts/d.json",
      `session:${childId}:/delivery_receipts/d.json`,
      `session:${MIRROR_ROOT_ID}:/children/${childId}/delivery_receipts/d.json`,
      `root:/children/${childId}/delivery_receipts/d.json`,
      `${MIRROR_SESSIONS}/children/${childId}/delivery_receipts/d.json`,
    ]
  ) {
    await assert.rejects(
      writeSessionOutcome(fs, childPaths, { ...base, evidenceRefs: [ref] }),
      refused("evidence_refs[0]", childPaths.sessionOutcomeJson),
      ref,
    );
    assert.equal(await exists(fs, childPaths.sessionOutcomeJson), false);
  }
});

test("a parent records the outcome of a folded child whatever the child's outcome cites", async () => {
  const fs = await newRepo();
  await buildMirrorTree(fs);
  const root = await newRoot(fs);
  await writeJson(
    fs,
    `${root.paths.childRequestsPendingDir}/phase-0.json`,
    childRequest("phase-0"),
  );
  const accepted = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: root.sessionId,
    ...deterministic(),
  });
  assert.ok(accepted?.kind === "accepted");
  const childId = accepted.childSessionId;
  await patchState(fs, accepted.childDir, { status: "goal_met" });
  // Written by the engine: it cites an older mirror session's delivery receipt, and (an engine
  // quirk this library does not copy when it writes) its own receipt as delivery_receipts/.
  const outcome = engineOutcome("goal_met", {
    session_id: childId,
    root_session_id: root.sessionId,
    goal_sha256: String((await readJson(fs, `${accepted.childDir}/session.json`)).goal_hash),
    terminal_state_revision: 3,
    evidence_refs: [`${MIRROR_SESSIONS}/delivery_receipts/${MIRROR_DELIVERY}`],
    delivery_refs: [`session:${childId}:/delivery_receipts/delivery-1.json`],
    created_at: "2026-04-19T15:00:01Z",
  });
  await writeJson(fs, `${accepted.childDir}/session_outcome.json`, outcome);
  assert.deepEqual(
    parseSessionOutcome(outcome, "session_outcome.json", "folded").delivery_refs,
    outcome.delivery_refs,
  );
  const recorded = await recordChildOutcome(fs, {
    repoRoot: "/repo",
    parentSessionId: root.sessionId,
    ...deterministic(),
  });
  assert.equal(recorded.child_session_id, childId);
  assert.equal(
    recorded.session_outcome_sha256,
    sha256Ref(await fs.readFile(`${accepted.childDir}/session_outcome.json`)),
  );
  assert.equal((await readJson(fs, root.paths.stateJson)).active_child_session_id, null);
});
