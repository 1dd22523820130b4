import { test } from "node:test";
import assert from "node:assert/strict";
import { type MemoryFs, SimulatedCrash } from "../adapters/memory.ts";
import { FsIoError, NotFound } from "../src/port/errors.ts";
import { hookedFs } from "./_hooks.ts";
import { entryKind } from "../src/port/durable.ts";
import {
  assertReceivesWork,
  type ChildRequest,
  ChildRequestError,
  type CreatedSession,
  findWorkingSession,
  LayoutRecordError,
  listPendingChildRequests,
  loadSessionTree,
  missingScaffoldEntries,
  parseGoalContract,
  parseRejectedRequestReceipt,
  parseSessionManifest,
  processNextChildRequest,
  publishChildRequest,
  readChildOutcome,
  readChildrenLedger,
  readEvents,
  readTerminalControl,
  recordChildOutcome,
  recordParentAcceptance,
  SessionStateError,
  sha256Ref,
  writeSessionOutcome,
} from "../layout.ts";
import {
  childRequest,
  commitTerminalState,
  deterministic,
  engineOutcome,
  finishChildBlocked,
  newRepo,
  newRoot,
  patchState,
  readJson,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";

async function setup(): Promise<{ fs: MemoryFs; root: CreatedSession }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  return { fs, root };
}

async function processNext(fs: MemoryFs, expectedParentAttemptId?: string) {
  return await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    expectedParentAttemptId,
    ...deterministic(),
  });
}

test("a published request is pending until the engine processes it", async () => {
  const { fs, root } = await setup();
  const published = await publishChildRequest(fs, root.paths, childRequest("phase-0-foundations"));
  assert.equal(published.file, `${root.dir}/child_requests/pending/phase-0-foundations.json`);
  assert.equal(published.sha256, sha256Ref(await fs.readFile(published.file)));
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["phase-0-foundations.json"]);
  // The very request again (a rerun) is the published one; another request under its id is not.
  assert.deepEqual(
    await publishChildRequest(fs, root.paths, childRequest("phase-0-foundations")),
    published,
  );
  await assert.rejects(
    publishChildRequest(fs, root.paths, childRequest("phase-0-foundations", { goal: "Other" })),
    ChildRequestError,
  );
  await assert.rejects(
    publishChildRequest(fs, root.paths, { ...childRequest("bad"), goal: "  " }),
    LayoutRecordError,
  );
});

test("an accepted request is copied unchanged, indexed and frozen into a nested child", async () => {
  const { fs, root } = await setup();
  const { bytes } = await publishChildRequest(fs, root.paths, childRequest("phase-0-foundations"));
  const result = await processNext(fs, "attempt000001");
  assert.equal(result?.kind, "accepted");
  if (result?.kind !== "accepted") return;
  assert.equal(result.childSessionId, "01_phase-0-foundations");
  assert.equal(result.childDir, `${root.dir}/children/01_phase-0-foundations`);

  // Copied unchanged into accepted/ and into the child's inputs/.
  assert.deepEqual(await fs.readFile(root.paths.acceptedRequest("phase-0-foundations")), bytes);
  assert.deepEqual(await fs.readFile(`${result.childDir}/inputs/accepted_request.json`), bytes);
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), []);

  // Indexed in the revisioned ledger.
  const ledger = await readChildrenLedger(fs, root.paths, ROOT_ID);
  assert.equal(ledger.revision, 2);
  assert.equal(ledger.children.length, 1);
  assert.equal(ledger.children[0]?.session_id, "01_phase-0-foundations");
  assert.equal(ledger.children[0]?.status, "running");
  assert.equal(
    ledger.children[0]?.accepted_request_ref,
    "session:/child_requests/accepted/phase-0-foundations.json",
  );
  assert.equal(ledger.children[0]?.accepted_request_sha256, sha256Ref(bytes));

  // A complete child session with its manifest, parent.json and goal contract.
  assert.deepEqual(await missingScaffoldEntries(fs, result.childDir, "child"), []);
  await assert.rejects(fs.lstat(`${result.childDir}/harness_capability_roster.json`));
  const manifest = parseSessionManifest(await readJson(fs, `${result.childDir}/session.json`), "m");
  assert.equal(manifest.schema_version, 2);
  if (manifest.schema_version !== 2) return;
  assert.equal(manifest.parent_session_id, ROOT_ID);
  assert.equal(manifest.root_session_id, ROOT_ID);
  assert.equal(manifest.depth, 1);
  assert.equal(manifest.layout, "folded");
  assert.equal(
    manifest.origin.accepted_request_ref,
    `session:${ROOT_ID}:/child_requests/accepted/phase-0-foundations.json`,
  );
  assert.deepEqual(await readJson(fs, `${result.childDir}/parent.json`), {
    schema_version: 1,
    parent_session_id: ROOT_ID,
    parent_relative_path: "../..",
    created_at: "2026-04-19T14:30:22Z",
  });
  const contract = parseGoalContract(
    await readJson(fs, `${result.childDir}/goal_contract.json`),
    "g",
  );
  assert.equal(contract.goal, "Deliver phase-0-foundations");
  assert.equal(contract.origin_request_id, "phase-0-foundations");
  assert.equal(contract.accepted_request_ref, "session:/inputs/accepted_request.json");
  assert.equal(contract.accepted_request_sha256, sha256Ref(bytes));
  // The child inherits the parent's frozen contracts and references the root's roster.
  assert.deepEqual(
    await fs.readFile(`${result.childDir}/workflow_contract.json`),
    await fs.readFile(`${root.dir}/workflow_contract.json`),
  );
  const childState = await readJson(fs, `${result.childDir}/state.json`);
  assert.deepEqual(childState.harness_capability_roster, {
    ref: "root:/harness_capability_roster.json",
    sha256: sha256Ref(await fs.readFile(`${root.dir}/harness_capability_roster.json`)),
  });

  // The parent points at the child and is suspended; only the child receives work.
  assert.equal(
    (await readJson(fs, `${root.dir}/state.json`)).active_child_session_id,
    result.childSessionId,
  );
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  assert.equal((await findWorkingSession(fs, tree))?.node.sessionId, result.childSessionId);
  await assert.rejects(assertReceivesWork(fs, tree, ROOT_ID), SessionStateError);
  await assertReceivesWork(fs, tree, result.childSessionId);

  const events = await readEvents(fs, root.paths.eventsJsonl);
  assert.deepEqual(events.map((e) => e.type), ["child_started"]);
});

test("declared parent inputs are frozen into the child by reference and hash", async () => {
  const { fs, root } = await setup();
  await writeText(fs, `${root.dir}/project_state/tasks/spec.md`, "# Spec\nexact bytes\n");
  await writeText(fs, "/repo/README.md", "readme");
  await publishChildRequest(
    fs,
    root.paths,
    childRequest("with-inputs", {
      input_refs: ["session:/project_state/tasks/spec.md", "repo:/README.md"],
    }),
  );
  const result = await processNext(fs);
  assert.equal(result?.kind, "accepted");
  if (result?.kind !== "accepted") return;
  const contract = parseGoalContract(
    await readJson(fs, `${result.childDir}/goal_contract.json`),
    "g",
  );
  const specBytes = await fs.readFile(`${root.dir}/project_state/tasks/spec.md`);
  const specHash = sha256Ref(specBytes);
  assert.deepEqual(contract.inputs.map((i) => i.source_ref), [
    `session:${ROOT_ID}:/project_state/tasks/spec.md`,
    "repo:/README.md",
  ]);
  assert.equal(contract.inputs[0]?.sha256, specHash);
  const frozen = contract.inputs[0]?.frozen_ref ?? "";
  assert.equal(frozen, `session:/inputs/artifacts/input-0001-${specHash.slice(7, 19)}.artifact`);
  assert.deepEqual(
    await fs.readFile(`${result.childDir}/${frozen.slice("session:/".length)}`),
    specBytes,
  );
  assert.equal(contract.inputs[1]?.size, 6);
});

test("an invalid request is archived in rejected/ with its original hash and a diagnosis", async () => {
  const cases: [string, unknown, string | null][] = [
    ["not-json.json", "{broken", null],
    ["v2.json", { ...childRequest("v2"), schema_version: 2 }, "schema_version"],
    ["assignment.json", { ...childRequest("a"), assignment: { goal: "x" } }, "assignment"],
    ["unknown-key.json", { ...childRequest("u"), extra: 1 }, "extra"],
    ["blank-goal.json", { ...childRequest("b"), goal: " " }, "goal"],
    ["bad-id.json", { ...childRequest("x"), request_id: "../x" }, "request_id"],
    [
      "wrong-attempt.json",
      childRequest("w", { origin: { parent_attempt_id: "other" } }),
      "origin.parent_attempt_id",
    ],
    ["unknown-set.json", childRequest("s", { workflow_set: "nope" }), "workflow_set"],
    ["absent-input.json", childRequest("i", { input_refs: ["session:/nope.md"] }), "input_refs[0]"],
    ["escaping-input.json", childRequest("e", { input_refs: ["session:/../x"] }), "input_refs[0]"],
  ];
  for (const [name, body, field] of cases) {
    const { fs, root } = await setup();
    const file = `${root.paths.childRequestsPendingDir}/${name}`;
    if (typeof body === "string") await writeText(fs, file, body);
    else await writeJson(fs, file, body);
    const original = await fs.readFile(file);
    const result = await processNext(fs, "attempt000001");
    assert.equal(result?.kind, "rejected", name);
    if (result?.kind !== "rejected") continue;
    assert.equal(result.archivedFile, `${root.paths.childRequestsRejectedDir}/${name}`);
    assert.deepEqual(await fs.readFile(result.archivedFile), original, name);
    const receipt = parseRejectedRequestReceipt(await readJson(fs, result.receiptFile), "r");
    assert.equal(receipt.original_sha256, sha256Ref(original));
    assert.equal(receipt.field, field, `${name}: ${receipt.reason}`);
    assert.ok(receipt.reason.length > 0);
    assert.deepEqual(await listPendingChildRequests(fs, root.paths), []);
    assert.equal((await readChildrenLedger(fs, root.paths, ROOT_ID)).revision, 0);
  }
});

test("a rejected name that is already archived gets a hash suffix", async () => {
  const { fs, root } = await setup();
  await writeText(fs, `${root.paths.childRequestsRejectedDir}/dup.json`, "old");
  await writeText(fs, `${root.paths.childRequestsPendingDir}/dup.json`, "{new");
  const result = await processNext(fs);
  assert.equal(result?.kind, "rejected");
  if (result?.kind !== "rejected") return;
  const hash = sha256Ref(new TextEncoder().encode("{new")).slice(7, 15);
  assert.equal(result.archivedFile, `${root.paths.childRequestsRejectedDir}/dup.${hash}.json`);
});

test("a request id accepted before with a different body is rejected", async () => {
  const { fs, root } = await setup();
  await writeJson(
    fs,
    root.paths.acceptedRequest("same"),
    childRequest("same", { goal: "Deliver something else" }),
  );
  await writeJson(fs, `${root.paths.childRequestsPendingDir}/same.json`, childRequest("same"));
  const result = await processNext(fs);
  assert.equal(result?.kind, "rejected");
  if (result?.kind === "rejected") assert.equal(result.receipt.field, "request_id");
});

test("a suspended parent leaves further requests pending", async () => {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("first"));
  await publishChildRequest(fs, root.paths, childRequest("second"));
  assert.equal((await processNext(fs))?.kind, "accepted");
  await assert.rejects(processNext(fs), SessionStateError);
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["second.json"]);
});

test("a parent executing an attempt or terminal does not dispatch children", async () => {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("first"));
  await patchState(fs, root.dir, {
    current_task: { workflow_id: "outer", iteration: 1, attempt_id: "a1" },
  });
  await assert.rejects(processNext(fs), SessionStateError);
  await patchState(fs, root.dir, { current_task: null, status: "goal_met" });
  await assert.rejects(processNext(fs), SessionStateError);
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["first.json"]);
});

test("nothing pending means nothing processed", async () => {
  const { fs } = await setup();
  assert.equal(await processNext(fs), undefined);
});

test("a malformed children.json is a typed error naming the file and field", async () => {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("first"));
  const live = {
    session_id: "01_a",
    request_id: "a",
    status: "running",
    accepted_request_ref: "session:/child_requests/accepted/a.json",
  };
  const damaged: [unknown, string][] = [
    [{ schema_version: 2, parent_session_id: ROOT_ID, revision: -1, children: [] }, "revision"],
    [
      { schema_version: 3, parent_session_id: ROOT_ID, revision: 0, children: [] },
      "schema_version",
    ],
    [
      {
        schema_version: 2,
        parent_session_id: ROOT_ID,
        revision: 0,
        children: [{ ...live, status: "zombie" }],
      },
      "children[0].status",
    ],
    [
      {
        schema_version: 2,
        parent_session_id: ROOT_ID,
        revision: 0,
        children: [live, {
          ...live,
          session_id: "02_b",
          request_id: "b",
          accepted_request_ref: "session:/child_requests/accepted/b.json",
        }],
      },
      "children[1].status",
    ],
    [
      {
        schema_version: 2,
        parent_session_id: ROOT_ID,
        revision: 0,
        children: [{ ...live, accepted_request_ref: "repo:/README.md" }],
      },
      "children[0].accepted_request_ref",
    ],
    [
      {
        schema_version: 2,
        parent_session_id: ROOT_ID,
        revision: 0,
        children: [{
          ...live,
          status: "goal_met",
          outcome_ref: "session:/child_outcomes/another.json",
        }],
      },
      "children[0].outcome_ref",
    ],
    [
      {
        schema_version: 2,
        parent_session_id: ROOT_ID,
        revision: 0,
        children: [live, { ...live, status: "failed" }],
      },
      "children[1].session_id",
    ],
    [
      { schema_version: 2, parent_session_id: "002_other", revision: 0, children: [] },
      "parent_session_id",
    ],
  ];
  for (const [value, path] of damaged) {
    await writeJson(fs, root.paths.childrenJson, value);
    await assert.rejects(processNext(fs), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, root.paths.childrenJson);
      assert.equal(error.path, path);
      return true;
    });
  }
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["first.json"]);
});

test("a child's goal_met is recorded by reference and hash and never completes its parent", async () => {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  const accepted = await processNext(fs);
  if (accepted?.kind !== "accepted") throw new Error("expected acceptance");
  const childDir = accepted.childDir;

  // Recording before the child is terminal is refused.
  await assert.rejects(
    recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID }),
    SessionStateError,
  );

  // The child finishes with goal_met.
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  const childPaths = tree.paths(accepted.childSessionId);
  const control = {
    schema_version: 3,
    state: "stopped",
    stop_reason: "goal_met",
    control_id: "done-1",
    reason: "All phase-0 outcomes are accepted",
    created_at: "2026-04-19T15:00:00Z",
    producer: { session_id: accepted.childSessionId, workflow_id: "outer", attempt_id: "c1" },
  };
  await writeJson(fs, childPaths.controlJson, control);
  const acceptedControl = await readTerminalControl(fs, childPaths, {
    sessionId: accepted.childSessionId,
    workflowId: "outer",
    attemptId: "c1",
    completionRole: "outer",
  });
  await patchState(fs, childDir, { status: "goal_met" });
  const manifest = await readJson(fs, `${childDir}/session.json`);
  await writeSessionOutcome(fs, childPaths, {
    sessionId: accepted.childSessionId,
    rootSessionId: ROOT_ID,
    goalSha256: String(manifest.goal_hash),
    terminalStatus: "goal_met",
    stopReason: "goal_met",
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:01Z",
    control: acceptedControl,
    handoff: {
      status: "missing",
      handoff: undefined,
      sha256: null,
      revision: null,
      diagnosis: "none",
    },
  });

  // The parent finds a terminal child and must record its outcome before other work.
  const working = await findWorkingSession(fs, tree);
  assert.equal(working?.node.sessionId, ROOT_ID);
  assert.equal(working?.terminalChild?.sessionId, accepted.childSessionId);
  await assert.rejects(assertReceivesWork(fs, tree, ROOT_ID), SessionStateError);

  const outcome = await recordChildOutcome(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    ...deterministic(),
  });
  assert.deepEqual(outcome, {
    schema_version: 2,
    request_id: "phase-0",
    child_session_id: accepted.childSessionId,
    session_outcome_ref: `session:${accepted.childSessionId}:/session_outcome.json`,
    session_outcome_sha256: sha256Ref(await fs.readFile(childPaths.sessionOutcomeJson)),
  });
  assert.deepEqual(await readChildOutcome(fs, root.paths, "phase-0"), outcome);
  const ledger = await readChildrenLedger(fs, root.paths, ROOT_ID);
  assert.equal(ledger.children[0]?.status, "goal_met");
  assert.equal(ledger.children[0]?.outcome_ref, "session:/child_outcomes/phase-0.json");

  // The parent resumes, still running, with its neutral control.
  const parentState = await readJson(fs, `${root.dir}/state.json`);
  assert.equal(parentState.status, "running");
  assert.equal(parentState.active_child_session_id, null);
  assert.equal((await readJson(fs, `${root.dir}/control.json`)).state, "running");
  await assertReceivesWork(fs, tree, ROOT_ID);

  // Recording again is refused: the parent no longer waits for a child.
  const again = await recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID }).catch(
    (error: unknown) => error,
  );
  assert.ok(again instanceof SessionStateError);

  // The parent orchestrator records its own decision.
  const decision = await recordParentAcceptance(fs, {
    paths: root.paths,
    parentSessionId: ROOT_ID,
    requestId: "phase-0",
    decision: "accepted",
    reason: "Evidence reviewed",
    producer: { workflowId: "outer", attemptId: "p2" },
    ...deterministic(),
  });
  assert.equal(decision.child_outcome_ref, "session:/child_outcomes/phase-0.json");
  assert.equal(
    decision.child_outcome_sha256,
    sha256Ref(await fs.readFile(root.paths.childOutcome("phase-0"))),
  );
  assert.deepEqual(await readJson(fs, root.paths.parentAcceptance("phase-0")), decision);
  assert.equal((await readJson(fs, `${root.dir}/state.json`)).status, "running");
  const events = await readEvents(fs, root.paths.eventsJsonl);
  assert.deepEqual(events.map((e) => e.type), ["child_started", "child_finished"]);
});

test("a child outcome that is not the child's own is refused and nothing is recorded", async () => {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  const accepted = await processNext(fs);
  if (accepted?.kind !== "accepted") throw new Error("expected acceptance");
  const childId = accepted.childSessionId;
  const childDir = accepted.childDir;
  await patchState(fs, childDir, { status: "failed" });
  const goal = String((await readJson(fs, `${childDir}/session.json`)).goal_hash);
  const own = {
    session_id: childId,
    root_session_id: ROOT_ID,
    goal_sha256: goal,
    terminal_state_revision: 3,
    created_at: "2026-04-19T15:00:01Z",
  };
  const foreign: [string, Record<string, unknown>][] = [
    ["session_id", engineOutcome("failed", { ...own, session_id: ROOT_ID })],
    ["root_session_id", engineOutcome("failed", { ...own, root_session_id: childId })],
    ["terminal_status", engineOutcome("goal_met", own)],
  ];
  const ledgerBefore = await fs.readFile(root.paths.childrenJson);
  for (const [field, outcome] of foreign) {
    await writeJson(fs, `${childDir}/session_outcome.json`, outcome);
    await assert.rejects(
      recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, field);
        assert.equal(error.file, `${childDir}/session_outcome.json`);
        assert.equal(error.path, field);
        return true;
      },
    );
    assert.deepEqual(await fs.readFile(root.paths.childrenJson), ledgerBefore, field);
    assert.equal(await readChildOutcome(fs, root.paths, "phase-0"), undefined, field);
  }
  // The child's own outcome is recorded.
  await writeJson(fs, `${childDir}/session_outcome.json`, engineOutcome("failed", own));
  await recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID, ...deterministic() });
  assert.equal((await readChildrenLedger(fs, root.paths, ROOT_ID)).children[0]?.status, "failed");
});
test("a second child takes the next ordinal after the first finished", async () => {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("first"));
  await processNext(fs);
  await publishChildRequest(fs, root.paths, childRequest("second-milestone"));
  // Simulate the first child's end directly in the ledger and parent state.
  const ledger = await readJson(fs, root.paths.childrenJson);
  const children = ledger.children as Record<string, unknown>[];
  await writeJson(fs, root.paths.childrenJson, {
    ...ledger,
    children: children.map((c) => ({ ...c, status: "failed" })),
  });
  await patchState(fs, root.dir, { active_child_session_id: null });
  const second = await processNext(fs);
  assert.equal(second?.kind === "accepted" && second.childSessionId, "02_second-milestone");
});

const SPEC_REF = "session:/project_state/tasks/spec.md";

/**
 * A root whose request `needs-spec` (declaring the input `SPEC_REF`) was interrupted after the
 * child was indexed, before it was built, and whose input then vanished.
 */
async function interruptedWithoutInput(): Promise<
  { fs: MemoryFs; root: CreatedSession; bytes: Uint8Array; spec: string }
> {
  const { fs, root } = await setup();
  const spec = `${root.dir}/project_state/tasks/spec.md`;
  await writeText(fs, spec, "spec");
  const { bytes } = await publishChildRequest(
    fs,
    root.paths,
    childRequest("needs-spec", { input_refs: [SPEC_REF] }),
  );
  // The state an acceptance leaves when it stops after indexing the child, before building it.
  await fs.writeFile(root.paths.acceptedRequest("needs-spec"), bytes);
  await writeJson(fs, root.paths.childrenJson, {
    schema_version: 2,
    parent_session_id: ROOT_ID,
    revision: 1,
    children: [{
      session_id: "01_needs-spec",
      request_id: "needs-spec",
      status: "dispatching",
      accepted_request_ref: "session:/child_requests/accepted/needs-spec.json",
    }],
  });
  await fs.remove(spec);
  return { fs, root, bytes, spec };
}

test("an interrupted acceptance whose declared input vanished is marked failed_dispatch and rejected", async () => {
  const { fs, root } = await interruptedWithoutInput();
  const result = await processNext(fs);
  assert.equal(result?.kind, "rejected");
  if (result?.kind === "rejected") assert.equal(result.receipt.field, "input_refs[0]");
  const ledger = await readChildrenLedger(fs, root.paths, ROOT_ID);
  assert.equal(ledger.children[0]?.status, "failed_dispatch");
  assert.equal(ledger.revision, 2);
  await assert.rejects(fs.lstat(`${root.dir}/children/01_needs-spec`), { code: "ENOENT" });
  // The parent is not left suspended: the next request gets the next free ordinal.
  await publishChildRequest(fs, root.paths, childRequest("next"));
  const next = await processNext(fs);
  assert.equal(next?.kind === "accepted" && next.childSessionId, "02_next");
});

/** A root whose request `needs-spec` failed to dispatch (as the test above), its input back. */
async function failedDispatch(): Promise<
  { fs: MemoryFs; root: CreatedSession; bytes: Uint8Array }
> {
  const { fs, root, bytes, spec } = await interruptedWithoutInput();
  assert.equal((await processNext(fs))?.kind, "rejected");
  await writeText(fs, spec, "spec"); // the input is back
  return { fs, root, bytes };
}

test("a request refused at publish names the file it would be published at, or the record", async () => {
  const { fs, root } = await setup();
  const refused = (file: string, path: string) => (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, path);
    return true;
  };
  await assert.rejects(
    publishChildRequest(fs, root.paths, childRequest("phase-2", { goal: " " })),
    refused(`${root.dir}/child_requests/pending/phase-2.json`, "goal"),
  );
  await assert.rejects(
    publishChildRequest(fs, root.paths, childRequest("../x")),
    refused("child request", "request_id"),
  );
  // An id the schema refuses for its length names no file either (it could be none).
  await assert.rejects(
    publishChildRequest(fs, root.paths, childRequest("a".repeat(129))),
    refused("child request", "request_id"),
  );
  const listed = [childRequest("r1")] as unknown as ChildRequest;
  await assert.rejects(publishChildRequest(fs, root.paths, listed), refused("child request", ""));
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), []);
});

test("a request whose dispatch failed before its child was published is dispatched again under the same id", async () => {
  const { fs, root } = await failedDispatch();
  await publishChildRequest(
    fs,
    root.paths,
    childRequest("needs-spec", {
      input_refs: [SPEC_REF],
    }),
  );
  const result = await processNext(fs);
  assert.equal(result?.kind, "accepted", result?.kind === "rejected" ? result.receipt.reason : "");
  assert.equal(result?.kind === "accepted" && result.childSessionId, "01_needs-spec");
  const ledger = await readChildrenLedger(fs, root.paths, ROOT_ID);
  assert.deepEqual(
    ledger.children.map((c) => [c.session_id, c.status]),
    [["01_needs-spec", "running"]],
  );
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  assert.equal(tree.require("01_needs-spec").parentSessionId, ROOT_ID);
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), []);
});

test("a failed dispatch whose child directory exists is final, and the queue goes on", async () => {
  const published = await failedDispatch();
  const childDir = `${published.root.dir}/children/01_needs-spec`;
  await published.fs.mkdir(childDir, { recursive: true });
  await writeText(published.fs, `${childDir}/state.json`, "{}");
  await assert.rejects(
    publishChildRequest(
      published.fs,
      published.root.paths,
      childRequest("needs-spec", {
        input_refs: [SPEC_REF],
      }),
    ),
    ChildRequestError,
  );
  // Written into pending/ directly (as an agent may), it is rejected when processed.
  await published.fs.writeFile(
    published.root.paths.pendingRequest("needs-spec"),
    published.bytes,
  );
  const final = await processNext(published.fs);
  assert.equal(final?.kind, "rejected");
  if (final?.kind === "rejected") {
    assert.equal(final.receipt.reason, "The request was already dispatched (failed_dispatch)");
  }

  // A child directory that exists without state.json (a child is published whole, so it is
  // damaged) makes the failure final too: nothing of it is adopted or removed, and the queue
  // goes on.
  const damaged = await failedDispatch();
  const dir = `${damaged.root.dir}/children/01_needs-spec`;
  await damaged.fs.mkdir(dir, { recursive: true });
  await writeText(damaged.fs, `${dir}/note.txt`, "left");
  await assert.rejects(
    publishChildRequest(
      damaged.fs,
      damaged.root.paths,
      childRequest("needs-spec", {
        input_refs: [SPEC_REF],
      }),
    ),
    ChildRequestError,
  );
  await damaged.fs.writeFile(damaged.root.paths.pendingRequest("needs-spec"), damaged.bytes);
  await publishChildRequest(damaged.fs, damaged.root.paths, childRequest("next"));
  const refused = await processNext(damaged.fs);
  assert.equal(refused?.kind, "rejected");
  assert.equal((await damaged.fs.readFile(`${dir}/note.txt`)).length, 4, "the directory stays");
  const next = await processNext(damaged.fs);
  assert.equal(next?.kind === "accepted" && next.childSessionId, "02_next");
});

test("a failed dispatch accepted in other bytes (unescaped text) is published again in those bytes", async () => {
  const { fs, root } = await setup();
  const request = childRequest("menu", { goal: "Livrer le menu du café" });
  // Accepted from a pending file another writer encoded with raw UTF-8; its input then vanished.
  const raw = new TextEncoder().encode(JSON.stringify(request, null, 2));
  await fs.writeFile(root.paths.pendingRequest("menu"), raw);
  await fs.writeFile(root.paths.acceptedRequest("menu"), raw);
  await writeJson(fs, root.paths.childrenJson, {
    schema_version: 2,
    parent_session_id: ROOT_ID,
    revision: 1,
    children: [{
      session_id: "01_menu",
      request_id: "menu",
      status: "failed_dispatch",
      accepted_request_ref: "session:/child_requests/accepted/menu.json",
    }],
  });
  await fs.remove(root.paths.pendingRequest("menu"));
  const published = await publishChildRequest(fs, root.paths, request);
  assert.deepEqual(published.bytes, raw, "the accepted bytes, not a new encoding");
  const result = await processNext(fs);
  assert.equal(result?.kind === "accepted" && result.childSessionId, "01_menu");
});

test("a failed dispatch is published again from the same request object with undefined optional fields", async () => {
  const { fs, root, spec } = await interruptedWithoutInput();
  await fs.remove(root.paths.acceptedRequest("needs-spec"));
  await fs.remove(root.paths.pendingRequest("needs-spec"));
  // As TypeScript callers build it: optional fields present with the value undefined.
  const request = childRequest("needs-spec", {
    input_refs: [SPEC_REF],
    workflow_set: undefined,
    origin: { parent_attempt_id: "attempt000001", parent_work_item_id: undefined },
  });
  const { bytes } = await publishChildRequest(fs, root.paths, request);
  await fs.writeFile(root.paths.acceptedRequest("needs-spec"), bytes);
  assert.equal((await processNext(fs))?.kind, "rejected");
  await writeText(fs, spec, "spec");
  assert.deepEqual((await publishChildRequest(fs, root.paths, request)).bytes, bytes);
  const result = await processNext(fs);
  assert.equal(result?.kind === "accepted" && result.childSessionId, "01_needs-spec");
});

test("a new child id repeats no id of the repository's trees, so every tree stays resolvable", async () => {
  const { fs, root } = await setup();
  const second = await newRoot(fs, "Second goal");
  const acceptIn = async (parentSessionId: string) => {
    const result = await processNextChildRequest(fs, {
      repoRoot: "/repo",
      parentSessionId,
      ...deterministic(),
    });
    assert.equal(result?.kind, "accepted");
    return result?.kind === "accepted" ? result : assert.fail("not accepted");
  };
  await publishChildRequest(fs, root.paths, childRequest("phase-0-foundations"));
  assert.equal((await acceptIn(ROOT_ID)).childSessionId, "01_phase-0-foundations");
  // The same request id under another root: the next ordinal that is free in the repository.
  await publishChildRequest(fs, second.paths, childRequest("phase-0-foundations"));
  const other = await acceptIn(second.sessionId);
  assert.equal(other.childSessionId, "02_phase-0-foundations");
  // A grandchild requested under the request id of its parent: not its parent's id either.
  const childPaths = (await loadSessionTree(fs, "/repo", "01_phase-0-foundations")).paths(
    "01_phase-0-foundations",
  );
  await publishChildRequest(fs, childPaths, childRequest("phase-0-foundations"));
  const grandchild = await acceptIn("01_phase-0-foundations");
  assert.equal(grandchild.childSessionId, "03_phase-0-foundations");
  for (
    const id of [
      ROOT_ID,
      second.sessionId,
      "01_phase-0-foundations",
      "02_phase-0-foundations",
      "03_phase-0-foundations",
    ]
  ) {
    const tree = await loadSessionTree(fs, "/repo", id);
    assert.ok(tree.nodes.has(id));
  }
});

/** A root whose child (request `phase-0`) failed and whose outcome is recorded. */
async function recordedChild(): Promise<{ fs: MemoryFs; root: CreatedSession; childId: string }> {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  const accepted = await processNext(fs);
  if (accepted?.kind !== "accepted") throw new Error("expected acceptance");
  const childId = accepted.childSessionId;
  await patchState(fs, accepted.childDir, { status: "failed" });
  await writeJson(
    fs,
    `${accepted.childDir}/session_outcome.json`,
    engineOutcome("failed", {
      session_id: childId,
      root_session_id: ROOT_ID,
      goal_sha256: String((await readJson(fs, `${accepted.childDir}/session.json`)).goal_hash),
      terminal_state_revision: 3,
      created_at: "2026-04-19T15:00:01Z",
    }),
  );
  await recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID, ...deterministic() });
  return { fs, root, childId };
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

function decide(fs: MemoryFs, root: CreatedSession, requestId: string, sessionId = ROOT_ID) {
  return recordParentAcceptance(fs, {
    paths: root.paths,
    parentSessionId: sessionId,
    requestId,
    decision: "accepted",
    reason: "Evidence reviewed",
    producer: { workflowId: "outer", attemptId: "p2" },
    ...deterministic(),
  });
}

test("a child outcome naming another request than its file's is refused, and not bound", async () => {
  const { fs, root, childId } = await recordedChild();
  const file = root.paths.childOutcome("phase-0");
  const own = await readJson(fs, file);
  assert.equal(own.child_session_id, childId);
  // Another request's record (another child), placed or damaged under phase-0's name.
  await writeJson(fs, file, {
    ...own,
    request_id: "phase-9",
    child_session_id: "09_phase-9",
    session_outcome_ref: "session:09_phase-9:/session_outcome.json",
  });
  await assert.rejects(
    readChildOutcome(fs, root.paths, "phase-0"),
    recordError(file, "request_id"),
  );
  await assert.rejects(decide(fs, root, "phase-0"), recordError(file, "request_id"));
  await assert.rejects(fs.lstat(root.paths.parentAcceptance("phase-0")), NotFound);
  // A record of its own request for a request the ledger does not know is refused too.
  const unknown = root.paths.childOutcome("phase-7");
  await writeJson(fs, unknown, { ...own, request_id: "phase-7" });
  await assert.rejects(
    readChildOutcome(fs, root.paths, "phase-7"),
    recordError(unknown, "request_id"),
  );
  await assert.rejects(decide(fs, root, "phase-7"), recordError(unknown, "request_id"));
  await assert.rejects(fs.lstat(root.paths.parentAcceptance("phase-7")), NotFound);
});

test("a child outcome whose child is not the ledger's child for its request is refused", async () => {
  const { fs, root } = await recordedChild();
  const file = root.paths.childOutcome("phase-0");
  const own = await readJson(fs, file);
  await writeJson(fs, file, {
    ...own,
    child_session_id: "02_phase-0",
    session_outcome_ref: "session:02_phase-0:/session_outcome.json",
  });
  await assert.rejects(
    readChildOutcome(fs, root.paths, "phase-0"),
    recordError(file, "child_session_id"),
  );
  await assert.rejects(decide(fs, root, "phase-0"), recordError(file, "child_session_id"));
  await assert.rejects(fs.lstat(root.paths.parentAcceptance("phase-0")), NotFound);
  // The request's own record is read and bound.
  await writeJson(fs, file, own);
  assert.deepEqual(await readChildOutcome(fs, root.paths, "phase-0"), own);
  assert.equal((await decide(fs, root, "phase-0")).child_session_id, own.child_session_id);
});

test("recordParentAcceptance refuses a producer session that is not the directory's session", async () => {
  const { fs, root, childId } = await recordedChild();
  const file = root.paths.parentAcceptance("phase-0");
  for (const other of [childId, "002_another-root"]) {
    await assert.rejects(
      decide(fs, root, "phase-0", other),
      recordError(file, "producer.session_id"),
    );
    await assert.rejects(fs.lstat(file), NotFound);
  }
  assert.equal((await decide(fs, root, "phase-0")).producer.session_id, ROOT_ID);
});

// ---------------------------------------------------------------------------------------------
// state.json is the trust root of the contract projections a child inherits

/** A root with one pending request, and its parent-side files as they were frozen. */
async function pendingWithFrozenProjections() {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  const frozen = {
    contract: await fs.readFile(root.paths.workflowContractJson),
    roster: await fs.readFile(root.paths.workflowRosterJson),
    harness: await fs.readFile(root.paths.harnessCapabilityRosterJson),
  };
  return { fs, root, frozen };
}

/** The request is still pending, and nothing of a dispatch or a rejection was written. */
async function assertUntouched(fs: MemoryFs, root: CreatedSession, label: string) {
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["phase-0.json"], label);
  assert.deepEqual(await fs.readDir(root.paths.childRequestsRejectedDir), [], label);
  assert.deepEqual(await fs.readDir(root.paths.childRequestsAcceptedDir), [], label);
  assert.deepEqual((await readChildrenLedger(fs, root.paths, ROOT_ID)).children, [], label);
  assert.equal((await readJson(fs, root.paths.stateJson)).active_child_session_id, null, label);
}

test("a child inherits the workflow contract state.json records, not an edited workflow_contract.json", async () => {
  const { fs, root, frozen } = await pendingWithFrozenProjections();
  const recorded = (await readJson(fs, root.paths.stateJson)).workflow_contract;
  await writeJson(fs, root.paths.workflowContractJson, {
    orchestration: { completion_role: "rogue" },
  });
  const result = await processNext(fs);
  assert.equal(result?.kind, "accepted");
  if (result?.kind !== "accepted") return;
  const childState = await readJson(fs, `${result.childDir}/state.json`);
  assert.deepEqual(childState.workflow_contract, recorded);
  assert.deepEqual(await fs.readFile(`${result.childDir}/workflow_contract.json`), frozen.contract);
  assert.equal(childState.workflow_contract_sha256, sha256Ref(frozen.contract));
});

test("an edited workflow_roster.json or root harness roster leaves the request pending with an error naming state.json and the field", async () => {
  const cases = [
    ["workflowRosterJson", "workflow_roster_sha256", "roster"],
    ["harnessCapabilityRosterJson", "harness_capability_roster.sha256", "harness"],
  ] as const;
  for (const [projection, field, key] of cases) {
    const { fs, root, frozen } = await pendingWithFrozenProjections();
    const edited = { roles: [{ id: "rogue" }] };
    await writeJson(fs, root.paths[projection], edited);
    await assert.rejects(processNext(fs), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, root.paths.stateJson);
      assert.equal(error.path, field);
      assert.equal(
        error.value,
        sha256Ref(new TextEncoder().encode(JSON.stringify(edited, null, 2))),
      );
      assert.ok(error.message.includes(root.paths[projection]), error.message);
      return true;
    });
    // The parent's corruption, not the request's fault: the request is neither rejected nor
    // half accepted, and once the projection is restored it is dispatched.
    await assertUntouched(fs, root, field);
    await fs.writeFile(root.paths[projection], frozen[key]);
    const result = await processNext(fs);
    assert.equal(result?.kind, "accepted", field);
    if (result?.kind !== "accepted") return;
    assert.equal(
      (await readJson(fs, `${result.childDir}/state.json`)).workflow_contract_sha256,
      sha256Ref(frozen.contract),
    );
  }
});

test("a grandchild is built against the harness roster the root's state.json pins", async () => {
  const { fs, root, frozen } = await pendingWithFrozenProjections();
  const child = await processNext(fs);
  assert.equal(child?.kind, "accepted");
  if (child?.kind !== "accepted") return;
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  const childPaths = tree.paths(child.childSessionId);
  await publishChildRequest(fs, childPaths, childRequest("deeper"));
  const processChild = () =>
    processNextChildRequest(fs, {
      repoRoot: "/repo",
      parentSessionId: child.childSessionId,
      ...deterministic(),
    });
  await writeJson(fs, root.paths.harnessCapabilityRosterJson, { coordinator: "rogue" });
  await assert.rejects(processChild(), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, root.paths.stateJson);
    assert.equal(error.path, "harness_capability_roster.sha256");
    return true;
  });
  assert.deepEqual(await listPendingChildRequests(fs, childPaths), ["deeper.json"]);
  await fs.writeFile(root.paths.harnessCapabilityRosterJson, frozen.harness);
  const grandchild = await processChild();
  assert.equal(grandchild?.kind, "accepted");
  if (grandchild?.kind !== "accepted") return;
  assert.equal(
    ((await readJson(fs, `${grandchild.childDir}/state.json`)).harness_capability_roster as {
      sha256: string;
    }).sha256,
    sha256Ref(frozen.harness),
  );
});

test("a state whose recorded contract or pins are damaged leaves the request pending", async () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ workflow_contract: { orchestration: { completion_role: "rogue" } } }, "workflow_contract"],
    [{ workflow_contract: ["not", "an", "object"] }, "workflow_contract"],
    [{ workflow_contract_sha256: "sha256:" + "0".repeat(64) }, "workflow_contract"],
    [{ workflow_roster_sha256: "not-a-hash" }, "workflow_roster_sha256"],
    [{ harness_capability_roster: { sha256: 7 } }, "harness_capability_roster.sha256"],
  ];
  for (const [patch, field] of cases) {
    const { fs, root } = await pendingWithFrozenProjections();
    await patchState(fs, root.dir, patch);
    await assert.rejects(processNext(fs), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, root.paths.stateJson, JSON.stringify(patch));
      assert.equal(error.path, field, error.message);
      return true;
    });
    await assertUntouched(fs, root, field);
  }
});

test("a contract pinned in the engine's own bytes, or a legacy state without pins, still dispatches", async () => {
  // The engine wrote the projection in other bytes than this library would; the state's pin is
  // the hash of those bytes, and they hold the very contract the state records.
  {
    const { fs, root } = await pendingWithFrozenProjections();
    const recorded = (await readJson(fs, root.paths.stateJson)).workflow_contract;
    const engineBytes = new TextEncoder().encode(JSON.stringify(recorded));
    await fs.writeFile(root.paths.workflowContractJson, engineBytes);
    await patchState(fs, root.dir, { workflow_contract_sha256: sha256Ref(engineBytes) });
    const result = await processNext(fs);
    assert.equal(result?.kind, "accepted");
    if (result?.kind === "accepted") {
      assert.deepEqual(
        (await readJson(fs, `${result.childDir}/state.json`)).workflow_contract,
        recorded,
      );
    }
  }
  // A legacy state records no contract and no pins: the projections are inherited as they are.
  {
    const { fs, root } = await pendingWithFrozenProjections();
    const state = await readJson(fs, root.paths.stateJson);
    for (
      const field of [
        "workflow_contract",
        "workflow_contract_sha256",
        "workflow_roster_sha256",
        "harness_capability_roster",
      ]
    ) delete state[field];
    await writeJson(fs, root.paths.stateJson, state);
    const result = await processNext(fs);
    assert.equal(result?.kind, "accepted");
    if (result?.kind === "accepted") {
      assert.deepEqual(
        await fs.readFile(`${result.childDir}/workflow_contract.json`),
        await fs.readFile(root.paths.workflowContractJson),
      );
    }
  }
});

test("a child outcome recorded for a parent that ended meanwhile leaves the parent's terminal state as it froze", async () => {
  const { fs, root } = await endedParent();
  const frozen = await fs.readFile(root.paths.stateJson);
  const outcome = await recordChildOutcome(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    ...deterministic(),
  });
  assert.deepEqual(await fs.readFile(root.paths.stateJson), frozen);
  // The parent still names its child: a rerun returns the same outcome and logs nothing again.
  for (let run = 0; run < 2; run++) {
    assert.deepEqual(
      await recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID }),
      outcome,
    );
  }
  const finished = (await readEvents(fs, root.paths.eventsJsonl)).filter((event) =>
    event.type === "child_finished"
  );
  assert.equal(finished.length, 1);
  const ledger = await readChildrenLedger(fs, root.paths, ROOT_ID);
  assert.equal(ledger.children[0]?.outcome_ref, "session:/child_outcomes/phase-0.json");
  assert.ok(await readChildOutcome(fs, root.paths, "phase-0"));
});

/** A root whose child ended while the root was stopped: the root still names its child. */
async function endedParent(): Promise<{ fs: MemoryFs; root: CreatedSession }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  const accepted = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    ...deterministic(),
  });
  if (accepted?.kind !== "accepted") throw new Error(`not accepted: ${accepted?.kind}`);
  // The operator stops the tree while the child runs; then the child ends.
  const revision = Number((await readJson(fs, root.paths.stateJson)).state_revision);
  await commitTerminalState(fs, root.dir, "stopped", revision + 1, "2026-04-19T15:00:05Z");
  const tree = await loadSessionTree(fs, "/repo", ROOT_ID);
  await finishChildBlocked(
    fs,
    tree.paths(accepted.childSessionId),
    accepted.childSessionId,
    ROOT_ID,
  );
  return { fs, root };
}

test("a child outcome for an ended parent stands when its events.jsonl is a link, as any append failure", async () => {
  const { fs, root } = await endedParent();
  await fs.remove(root.paths.eventsJsonl);
  await fs.writeFile(`${root.dir}/elsewhere.jsonl`, new Uint8Array());
  await fs.symlink(`${root.dir}/elsewhere.jsonl`, root.paths.eventsJsonl);
  for (let run = 0; run < 2; run++) {
    const outcome = await recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID });
    assert.equal(outcome.request_id, "phase-0");
  }
  assert.equal((await fs.readFile(`${root.dir}/elsewhere.jsonl`)).length, 0);
});

test("a rerun that finds the ended parent's child_finished event makes it durable before it resolves", async () => {
  const { fs, root } = await endedParent();
  fs.syncAll();
  // A first run that never fsyncs (as the engine writes, or "ordered" durability).
  await recordChildOutcome(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    ...deterministic(),
    durability: "ordered",
  });
  // A full-durability rerun finds everything written, the event too, and relies on it.
  await recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID });
  const after = fs.crash({
    seed: 0,
    extraJournal: "none",
    tailMode: "none",
    rewriteMode: "durable",
  });
  const finished = (await readEvents(after, root.paths.eventsJsonl)).filter((event) =>
    event.type === "child_finished"
  );
  assert.equal(finished.length, 1);
  assert.ok(await readChildOutcome(after, root.paths, "phase-0"));
});

test("a rerun that finds the ended parent's event under another process's lease waits it out and appends nothing", async () => {
  const { fs: memory, root } = await endedParent();
  await recordChildOutcome(memory, { repoRoot: "/repo", parentSessionId: ROOT_ID });
  // A lease makes the non-blocking no-follow calls fail at once (EAGAIN); a plain open waits.
  const events = root.paths.eventsJsonl;
  const fs = hookedFs(memory, {
    before: (method, args) => {
      if ((method === "openNoFollow" || method === "readFileNoFollow") && args[0] === events) {
        throw new FsIoError("EAGAIN", method, events, "Resource temporarily unavailable");
      }
    },
  });
  await recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID });
  const finished = (await readEvents(memory, events)).filter((event) =>
    event.type === "child_finished"
  );
  assert.equal(finished.length, 1);
});

test("a parent that ended while its child runs never gives that child up when a request is pending", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await publishChildRequest(fs, root.paths, childRequest("phase-1"));
  const options = { repoRoot: "/repo", parentSessionId: root.sessionId, ...deterministic() };
  const accepted = await processNextChildRequest(fs, options);
  assert.equal(accepted?.kind, "accepted");
  const childId = accepted?.kind === "accepted" ? accepted.childSessionId : "";
  // The parent is stopped while its child runs: its frozen state still names the child.
  await commitTerminalState(fs, root.dir, "stopped", 7, "2026-04-19T15:00:00Z");
  // An agent publishes another request meanwhile.
  await publishChildRequest(fs, root.paths, childRequest("phase-2"));
  await assert.rejects(processNextChildRequest(fs, options), SessionStateError);
  const ledger = await readChildrenLedger(fs, root.paths, root.sessionId);
  assert.deepEqual(
    ledger.children.map((c) => [c.session_id, c.status]),
    [[childId, "running"]],
  );
});
test("a request rewritten after its rejection was interrupted gets a receipt with its own hash", async () => {
  const { fs: memory, root } = await setup();
  const pending = `${root.dir}/child_requests/pending/phase-1.json`;
  await writeJson(memory, pending, childRequest("phase-1", { goal: "First body" }));
  // The rejection writes its receipt, then fails to move the request into rejected/.
  const failing = hookedFs(memory, {
    before(method, args) {
      if (method === "rename" && args[0] === pending) {
        throw new FsIoError("EIO", "rename", pending, "Input/output error (injected)");
      }
    },
  });
  await assert.rejects(
    processNextChildRequest(failing, {
      repoRoot: "/repo",
      parentSessionId: ROOT_ID,
      expectedParentAttemptId: "attempt999999",
      ...deterministic(),
    }),
    FsIoError,
  );
  // The agent rewrites the request meanwhile; it is rejected for the same reason.
  await writeJson(memory, pending, childRequest("phase-1", { goal: "Second body" }));
  const bytes = await memory.readFile(pending);
  const result = await processNext(memory, "attempt999999");
  assert.equal(result?.kind, "rejected");
  if (result?.kind !== "rejected") return;
  // The receipt binds the bytes archived beside it, never the first body's.
  assert.deepEqual(await memory.readFile(result.archivedFile), bytes);
  assert.equal(result.receipt.original_sha256, sha256Ref(bytes));
  assert.equal((await readJson(memory, result.receiptFile)).original_sha256, sha256Ref(bytes));
});
test("a rejection that freed an interrupted acceptance's request id keeps it free after a power loss", async () => {
  const { fs, root } = await setup();
  const published = await publishChildRequest(fs, root.paths, childRequest("phase-1"));
  // An acceptance interrupted right after it froze the accepted copy (before the ledger knew it).
  const copy = `${root.dir}/child_requests/accepted/phase-1.json`;
  await fs.mkdir(`${root.dir}/child_requests/accepted`, { recursive: true });
  await fs.writeFile(copy, published.bytes);
  fs.syncAll();
  // The request is rejected now (the parent has a newer attempt): its copy goes, freeing the id.
  const result = await processNext(fs, "attempt999999");
  assert.equal(result?.kind, "rejected");
  // A power loss right after the rejection resolved: the id stays free.
  const after = fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
  await assert.rejects(after.lstat(copy), NotFound);
  const again = await publishChildRequest(
    after,
    root.paths,
    childRequest("phase-1", { goal: "Again" }),
  );
  assert.equal(again.file, published.file);
});

/**
 * The state a crash at the first step of processing `pending/phase-0.json` that satisfies `when`
 * leaves (strict power loss: only durable state kept).
 */
async function crashedAcceptance(
  when: (fs: MemoryFs, paths: CreatedSession["paths"]) => Promise<boolean>,
): Promise<{ fs: MemoryFs; root: CreatedSession }> {
  const { fs: baseline, root } = await setup();
  await writeJson(
    baseline,
    `${root.paths.childRequestsPendingDir}/phase-0.json`,
    childRequest("phase-0"),
  );
  baseline.syncAll();
  for (let n = 1; n < 5000; n++) {
    const fs = baseline.clone();
    fs.crashAfter(n);
    await assert.rejects(processNext(fs), SimulatedCrash, "the crash point is reached");
    const recovered = fs.crash({ tailMode: "none", extraJournal: "none" });
    if (await when(recovered, root.paths)) return { fs: recovered, root };
  }
  throw new Error("no such crash point");
}

/** True when anything is at `path`. */
async function exists(fs: MemoryFs, path: string): Promise<boolean> {
  return await entryKind(fs, path) !== undefined;
}

for (const stage of ["before the ledger records it", "once its child runs"] as const) {
  test(`an accepted copy damaged after an acceptance stopped ${stage} is reported by name, changing nothing`, async () => {
    const { fs, root } = await crashedAcceptance(async (recovered, paths) => {
      const records = (await readChildrenLedger(recovered, paths, ROOT_ID)).children;
      if (!(await exists(recovered, paths.acceptedRequest("phase-0")))) return false;
      if (stage === "before the ledger records it") return records.length === 0;
      return records[0]?.status === "running" &&
        await exists(recovered, `${paths.childDir(records[0].session_id)}/state.json`);
    });
    const copy = root.paths.acceptedRequest("phase-0");
    await fs.writeFile(copy, (await fs.readFile(copy)).subarray(0, 20));
    const before = fs.snapshotTree();
    await assert.rejects(processNext(fs), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, copy);
      return true;
    });
    // The request stays pending, the copy stays for a person to look at, and no child is given up.
    assert.deepEqual(fs.snapshotTree(), before);
    // Published again once gone from pending/: the damaged copy is named, not "id in use".
    await fs.remove(`${root.paths.childRequestsPendingDir}/phase-0.json`);
    await assert.rejects(
      publishChildRequest(fs, root.paths, childRequest("phase-0")),
      (error: unknown) => error instanceof LayoutRecordError && error.file === copy,
    );
  });
}

test("an acceptance stopped once its child runs, its record naming no hash, resumes the pending file holding the accepted bytes", async () => {
  const { fs, root } = await crashedAcceptance(async (recovered, paths) => {
    const record = (await readChildrenLedger(recovered, paths, ROOT_ID)).children[0];
    return record?.status === "running" &&
      await exists(recovered, `${paths.childDir(record.session_id)}/state.json`) &&
      await exists(recovered, `${paths.childRequestsPendingDir}/phase-0.json`);
  });
  // A ledger record of schema 2 need not name the accepted bytes' hash.
  const ledger = await readJson(fs, root.paths.childrenJson);
  const records = ledger.children as Record<string, unknown>[];
  delete records[0]!.accepted_request_sha256;
  await writeJson(fs, root.paths.childrenJson, ledger);
  // An agent reuses the request id under a file name considered first, with another body.
  await writeJson(
    fs,
    `${root.paths.childRequestsPendingDir}/a-phase-0.json`,
    childRequest("phase-0", { goal: "Deliver phase-0 another way" }),
  );
  const resumed = await processNext(fs);
  assert.equal(resumed?.kind, "accepted");
  const after = await readChildrenLedger(fs, root.paths, ROOT_ID);
  assert.deepEqual(after.children.map((c) => c.status), ["running"]);
  assert.equal(
    (await readJson(fs, root.paths.stateJson)).active_child_session_id,
    after.children[0]?.session_id,
  );
});
