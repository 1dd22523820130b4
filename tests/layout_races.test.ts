// Interleavings the layout must survive: a prune that planned before an attempt started, two
// child-request processings (or outcome recordings, or state updates) of one parent at once, and
// two creators of root sessions in one repository that do not share a process.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import {
  acceptEvalReceipt,
  createAttemptArtifacts,
  type CreatedSession,
  createRootSession,
  ensureRepository,
  ImmutableArtifactError,
  ordinalReservationName,
  processNextChildRequest,
  pruneRaw,
  readChildrenLedger,
  readSessionState,
  recordChildOutcome,
  SessionStateError,
  sha256Ref,
  updateSessionState,
  writeAttemptResult,
  writeGitReceipt,
} from "../layout.ts";
import {
  childRequest,
  commitTerminalState,
  CONTRACTS,
  deterministic,
  engineOutcome,
  evalReceipt,
  newRepo,
  newRoot,
  patchState,
  pauseAfter,
  readJson,
  writeJson,
} from "./layout_fixtures.ts";
import { isRead } from "./_hooks.ts";

const SESSIONS = "/repo/.loopy_loop/sessions";
const LOOPY = "/repo/.loopy_loop";
const AT = "2026-04-19T15:00:00Z";

async function exists(fs: { lstat(path: string): Promise<unknown> }, path: string) {
  return await fs.lstat(path).then(() => true, () => false);
}

// ---------------------------------------------------------------------------------------------
// prune-raw against an attempt that starts while it runs

test("prune reads the state again before moving an entry: an attempt started after the plan keeps its raw output", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const first = { iteration: 1, workflowId: "outer", attemptId: "a00000000001" };
  await createAttemptArtifacts(fs, root.paths, first, { prompt: "p", pathsMap: {} });
  // The session is idle when the prune reads its state (attempt 1 finished).
  const pausing = pauseAfter(
    fs,
    (method, path) => isRead(method) && path.endsWith("/state.json"),
  );
  const prune = pruneRaw(pausing.fs, LOOPY);
  await pausing.paused;
  // Meanwhile the engine dispatches attempt 2: it commits the task and creates the raw directory.
  await updateSessionState(fs, root.dir, (state) => {
    state.current_task = { workflow_id: "outer", iteration: 2, attempt_id: "a00000000002" };
  }, { updatedAt: AT });
  await createAttemptArtifacts(
    fs,
    root.paths,
    { iteration: 2, workflowId: "outer", attemptId: "a00000000002" },
    { prompt: "p", pathsMap: {} },
  );
  pausing.release();
  const report = await prune;
  assert.ok(await exists(fs, `${root.paths.rawDir}/0002_outer`), "the running attempt's raw dir");
  assert.deepEqual(report.removed.map((entry) => entry.path), [`${root.paths.rawDir}/0001_outer`]);
  assert.deepEqual(
    report.skipped.map((skip) => [skip.path, skip.reason]),
    [[`${root.paths.rawDir}/0002_outer`, "running_attempt"]],
  );
});

test("prune keeps every raw directory at or above the running attempt's iteration", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  for (const iteration of [1, 2, 3]) {
    await createAttemptArtifacts(
      fs,
      root.paths,
      { iteration, workflowId: "outer", attemptId: `a0000000000${iteration}` },
      { prompt: "p", pathsMap: {} },
    );
  }
  await patchState(fs, root.dir, {
    current_task: { workflow_id: "outer", iteration: 2, attempt_id: "a00000000002" },
  });
  const report = await pruneRaw(fs, LOOPY);
  assert.deepEqual(report.removed.map((entry) => entry.path), [`${root.paths.rawDir}/0001_outer`]);
  assert.deepEqual(
    report.skipped.map((skip) => [skip.path.split("/").pop(), skip.reason]),
    [["0002_outer", "running_attempt"], ["0003_outer", "running_attempt"]],
  );
  assert.ok(await exists(fs, `${root.paths.rawDir}/0003_outer`));
  // Once the session is terminal nothing runs and everything goes.
  await patchState(fs, root.dir, { status: "stopped", current_task: null });
  assert.equal((await pruneRaw(fs, LOOPY)).count, 2);
});

// ---------------------------------------------------------------------------------------------
// One parent, two operations at once (one process)

test("two processings of one parent's request at once make one child and lose no ledger entry", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await writeJson(fs, root.paths.pendingRequest("alpha"), childRequest("alpha"));
  const options = { repoRoot: "/repo", parentSessionId: root.sessionId, ...deterministic() };
  const results = await Promise.all([
    processNextChildRequest(fs, options),
    processNextChildRequest(fs, options),
  ]);
  // The second caller sees the first one's result: nothing is pending any more.
  assert.deepEqual(results.map((result) => result?.kind), ["accepted", undefined]);
  const ledger = await readChildrenLedger(fs, root.paths, root.sessionId);
  assert.deepEqual(
    ledger.children.map((child) => [child.session_id, child.request_id, child.status]),
    [["01_alpha", "alpha", "running"]],
  );
  assert.deepEqual((await fs.readDir(root.paths.childrenDir)).map((entry) => entry.name), [
    "01_alpha",
  ]);
  assert.equal((await readSessionState(fs, root.dir)).active_child_session_id, "01_alpha");
});

test("a processing that read the ledger first still runs after the one that commits first", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await writeJson(fs, root.paths.pendingRequest("alpha"), childRequest("alpha"));
  await writeJson(fs, root.paths.pendingRequest("beta"), childRequest("beta"));
  const options = { repoRoot: "/repo", parentSessionId: root.sessionId, ...deterministic() };
  const pausing = pauseAfter(
    fs,
    (method, path) => isRead(method) && path.endsWith("children.json"),
  );
  const slow = processNextChildRequest(pausing.fs, options);
  const fast = processNextChildRequest(fs, options);
  await pausing.paused;
  pausing.release();
  const settled = await Promise.allSettled([slow, fast]);
  // Whichever runs first accepts alpha; the parent then waits for its child, so the other finds
  // it suspended (a typed error) and beta stays pending.
  const accepted = settled.filter((r) => r.status === "fulfilled" && r.value?.kind === "accepted");
  const refused = settled.filter((r) =>
    r.status === "rejected" && r.reason instanceof SessionStateError
  );
  assert.equal(accepted.length, 1, JSON.stringify(settled));
  assert.equal(refused.length, 1, JSON.stringify(settled));
  const ledger = await readChildrenLedger(fs, root.paths, root.sessionId);
  assert.deepEqual(ledger.children.map((child) => child.request_id), ["alpha"]);
  assert.ok(await exists(fs, root.paths.pendingRequest("beta")));
});

test("two recordings of one child's outcome at once record it once; the second is a typed refusal", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await writeJson(fs, root.paths.pendingRequest("alpha"), childRequest("alpha"));
  const options = { repoRoot: "/repo", parentSessionId: root.sessionId, ...deterministic() };
  await processNextChildRequest(fs, options);
  const childDir = root.paths.childDir("01_alpha");
  await patchState(fs, childDir, { status: "max_turns", terminal_state_revision: 1 });
  await writeJson(
    fs,
    `${childDir}/session_outcome.json`,
    engineOutcome("max_turns", {
      session_id: "01_alpha",
      root_session_id: root.sessionId,
      goal_sha256: `sha256:${"a".repeat(64)}`,
      terminal_state_revision: 1,
      created_at: AT,
    }),
  );
  const before = (await readSessionState(fs, root.dir)).state_revision ?? 0;
  const [a, b] = await Promise.allSettled([
    recordChildOutcome(fs, options),
    recordChildOutcome(fs, options),
  ]);
  assert.equal(a.status, "fulfilled");
  assert.ok(b.status === "rejected" && b.reason instanceof SessionStateError, String(b));
  const ledger = await readChildrenLedger(fs, root.paths, root.sessionId);
  assert.deepEqual(ledger.children.map((child) => child.status), ["max_turns"]);
  const state = await readSessionState(fs, root.dir);
  assert.equal(state.active_child_session_id, null);
  assert.equal(state.state_revision, before + 1);
});

test("concurrent state updates of one session never lose an update", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const bump = () =>
    updateSessionState(fs, root.dir, (state) => {
      state.counter = (typeof state.counter === "number" ? state.counter : 0) + 1;
    }, { updatedAt: AT });
  await Promise.all([bump(), bump(), bump(), bump()]);
  const state = await readSessionState(fs, root.dir);
  assert.equal(state.counter, 4);
  assert.equal(state.state_revision, 4);
});

// ---------------------------------------------------------------------------------------------
// Root ordinals across processes

const rootOptions = (goal: string) => ({
  repoRoot: "/repo",
  goal,
  ...CONTRACTS,
  ...deterministic(),
});

test("a root ordinal reserved by another creator is skipped", async () => {
  const fs = await newRepo();
  await fs.mkdir(SESSIONS, { recursive: true });
  const pausing = pauseAfter(fs, (method, path) => method === "readDir" && path === SESSIONS);
  const creation = createRootSession(pausing.fs, rootOptions("alpha"));
  await pausing.paused;
  // Another process (which this process's in-memory serialization cannot see) reserves 1.
  await fs.writeFile(`${SESSIONS}/${ordinalReservationName(1, 3)}`, new Uint8Array(), {
    createNew: true,
  });
  pausing.release();
  assert.equal((await creation).sessionId, "002_alpha");
  assert.deepEqual((await fs.readDir(SESSIONS)).map((entry) => entry.name).sort(), [
    ".ordinal-001",
    "002_alpha",
  ]);
});

test("a root ordinal another creator published after our id check, before our ordinal scan, is skipped", async () => {
  const fs = await newRepo();
  await fs.mkdir(SESSIONS, { recursive: true });
  // Paused after the first listing of the sessions directory: the check that the id is free.
  // (Races with the ordinal scan and the reservation itself: layout_tree_edges_creation.)
  const pausing = pauseAfter(fs, (method, path) => method === "readDir" && path === SESSIONS);
  const creation = createRootSession(pausing.fs, rootOptions("alpha"));
  await pausing.paused;
  // Another process reserved 1, published 001_beta and released its reservation meanwhile.
  // (Built in another repository: a creation in this one waits for the paused one.)
  const other = new MemoryFs();
  await other.mkdir("/elsewhere");
  await createRootSession(other, { ...rootOptions("beta"), repoRoot: "/elsewhere" });
  await fs.mkdir(`${SESSIONS}/001_beta`);
  await fs.writeFile(
    `${SESSIONS}/001_beta/session.json`,
    await other.readFile("/elsewhere/.loopy_loop/sessions/001_beta/session.json"),
  );
  pausing.release();
  assert.equal((await creation).sessionId, "002_alpha");
  assert.deepEqual((await fs.readDir(SESSIONS)).map((entry) => entry.name).sort(), [
    "001_beta",
    "002_alpha",
  ]);
});

test("root sessions created one after another leave no reservation behind", async () => {
  const fs = await newRepo();
  await newRoot(fs, "first goal");
  await newRoot(fs, "second goal");
  assert.deepEqual((await fs.readDir(SESSIONS)).map((entry) => entry.name).sort(), [
    "001_first-goal",
    "002_second-goal",
  ]);
});

// ---------------------------------------------------------------------------------------------
// Write-once artifacts and the attempt result against concurrent writers

test("a result rewrite and the attempt's finish never interleave: a finished attempt's result is never rewritten", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const attempt = { iteration: 1, workflowId: "outer", attemptId: "a1b2c3d4e5f6" };
  await patchState(fs, root.dir, {
    current_task: { workflow_id: "outer", iteration: 1, attempt_id: attempt.attemptId },
  });
  const { paths } = await createAttemptArtifacts(fs, root.paths, attempt, {
    prompt: "p",
    pathsMap: {},
  });
  await writeAttemptResult(fs, paths, { status: "running" });
  const order: string[] = [];
  // The rewrite reads state.json (the attempt is running) and stops right there.
  const pausing = pauseAfter(
    fs,
    (method, path) => (isRead(method) || method === "open") && path.endsWith("/state.json"),
  );
  const rewrite = writeAttemptResult(pausing.fs, paths, { status: "rewritten" }).then(
    () => order.push("rewritten"),
    (error: unknown) => {
      assert.ok(error instanceof ImmutableArtifactError, String(error));
      order.push("refused");
    },
  );
  await pausing.paused;
  // Meanwhile the engine finishes the attempt.
  const finish = updateSessionState(fs, root.dir, (state) => {
    state.current_task = null;
  }, { updatedAt: AT }).then(() => order.push("finished"));
  await Promise.race([finish, new Promise((resolve) => setTimeout(resolve, 50))]);
  pausing.release();
  await Promise.all([rewrite, finish]);
  const result = await readJson(fs, paths.resultJson);
  if (order[0] === "finished") {
    // The finish committed first: the rewrite, whatever it read before, is refused.
    assert.deepEqual(order, ["finished", "refused"]);
    assert.deepEqual(result, { status: "running" });
  } else {
    // The rewrite went first, while the attempt was running; the finish came after it.
    assert.deepEqual(order, ["rewritten", "finished"]);
    assert.deepEqual(result, { status: "rewritten" });
  }
  await assert.rejects(writeAttemptResult(fs, paths, { status: "late" }), ImmutableArtifactError);
});

test("two concurrent freezes of one snapshot file: exactly one wins, the other is refused", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const attempt = { iteration: 1, workflowId: "outer", attemptId: "a1b2c3d4e5f6" };
  const make = (objective: string) =>
    createAttemptArtifacts(fs, root.paths, attempt, {
      prompt: objective,
      pathsMap: {},
      snapshot: { "assignment.json": { objective } },
    });
  const results = await Promise.allSettled([make("A"), make("B")]);
  const file =
    `${root.paths.dir}/iterations/0001_outer/workflow_snapshot/${attempt.attemptId}/assignment.json`;
  const onDisk = sha256Ref(await fs.readFile(file));
  const won = results.filter((r) => r.status === "fulfilled");
  const lost = results.filter((r) => r.status === "rejected");
  assert.equal(won.length, 1);
  assert.equal(won[0]?.value.snapshotHashes["assignment.json"], onDisk);
  assert.ok(lost[0]?.reason instanceof ImmutableArtifactError, String(lost[0]?.reason));
  assert.equal(lost[0]?.reason.file, file);
});

test("concurrent ensureRepository calls agree on one repository id", async () => {
  const fs = await newRepo();
  let n = 0;
  const options = () => ({ uuid: () => (++n).toString(16).padStart(32, "0") });
  const records = await Promise.all([
    ensureRepository(fs, "/repo", options()),
    ensureRepository(fs, "/repo", options()),
    ensureRepository(fs, "/repo/", options()),
  ]);
  const disk = await readJson(fs, `${LOOPY}/repository.json`);
  for (const record of records) assert.deepEqual(record, disk);
  assert.equal(
    (await fs.readFile("/repo/.gitignore").then((b) => new TextDecoder().decode(b)))
      .split("\n").filter((line) => line.includes("raw/")).length,
    1,
  );
});

/** A root session whose running attempt wrote the eval receipt `ev-1`, ready to be accepted. */
async function evalReceiptReady(): Promise<{ fs: MemoryFs; root: CreatedSession }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const attempt = { iteration: 26, workflowId: "outer", attemptId: "97521a5ed6b7" };
  await createAttemptArtifacts(fs, root.paths, attempt, { prompt: "p", pathsMap: {} });
  await writeJson(fs, `${root.paths.rawDir}/0026_outer/eval/report.json`, { passed: 1 });
  await writeGitReceipt(fs, root.paths, root.sessionId, attempt, "after", {
    head: "c0ffee",
    branch: "main",
    dirty: false,
  });
  await writeJson(
    fs,
    root.paths.evalReceipt("ev-1"),
    evalReceipt(root.sessionId, attempt.attemptId, { eval_id: "ev-1", created_at: AT }),
  );
  return { fs, root };
}

for (
  const meanwhile of [
    "the same acceptance made at another time",
    "other contents",
    "a field its producer does not have",
  ] as const
) {
  test(
    `an eval acceptance that finds the state sealed meanwhile with ${meanwhile} ${
      meanwhile === "the same acceptance made at another time"
        ? "returns that seal"
        : "is refused, writing no sidecar"
    }`,
    async () => {
      const { fs, root } = await evalReceiptReady();
      const key = "session:/eval_receipts/ev-1.json";
      // What an acceptance at another time seals (another process of the engine, say).
      const atOtherTime = await acceptEvalReceipt(fs.clone(), root.paths, "ev-1", {
        sessionId: root.sessionId,
        ...deterministic(),
        now: () => new Date("2026-04-20T00:00:00Z"),
      });
      const other = meanwhile === "other contents"
        ? { ...atOtherTime, receipt_sha256: "0".repeat(64) }
        : meanwhile === "a field its producer does not have"
        ? { ...atOtherTime, producer: { ...atOtherTime.producer, extra: 1 } }
        : atOtherTime;
      // This acceptance has read the state (no seal yet) and is checking the raw report...
      const pausing = pauseAfter(fs, (_method, path) => path.endsWith("/eval/report.json"));
      const accepting = acceptEvalReceipt(pausing.fs, root.paths, "ev-1", {
        sessionId: root.sessionId,
        ...deterministic(),
      });
      await pausing.paused;
      // ...when the other one commits its seal to state.json.
      const state = await readJson(fs, root.paths.stateJson);
      await writeJson(fs, root.paths.stateJson, {
        ...state,
        accepted_eval_seals: { [key]: other },
      });
      pausing.release();
      if (meanwhile !== "the same acceptance made at another time") {
        await assert.rejects(accepting, (error: unknown) => {
          assert.ok(error instanceof ImmutableArtifactError, String(error));
          assert.equal(error.file, root.paths.stateJson);
          return true;
        });
        assert.equal(await exists(fs, root.paths.evalAcceptedSidecar("ev-1")), false);
      } else {
        // As a later call returns the sealed acceptance: the seal, its time included, and its copy.
        assert.deepEqual(await accepting, other);
        assert.deepEqual(await readJson(fs, root.paths.evalAcceptedSidecar("ev-1")), other);
      }
      // The seal stands as the other acceptance wrote it.
      assert.deepEqual(
        (await readJson(fs, root.paths.stateJson)).accepted_eval_seals,
        { [key]: other },
      );
    },
  );
}

test("an eval acceptance racing the terminal transition never seals into the frozen state", async () => {
  const { fs, root } = await evalReceiptReady();
  // This acceptance has read the state (running) and is checking the raw report...
  const pausing = pauseAfter(fs, (_method, path) => path.endsWith("/eval/report.json"));
  const accepting = acceptEvalReceipt(pausing.fs, root.paths, "ev-1", {
    sessionId: root.sessionId,
    ...deterministic(),
  });
  await pausing.paused;
  // ...when the engine commits the session's terminal transition: its state is frozen.
  await commitTerminalState(fs, root.dir, "stopped", 5, AT);
  const frozen = await fs.readFile(root.paths.stateJson);
  pausing.release();
  await assert.rejects(accepting, (error: unknown) => {
    assert.ok(error instanceof SessionStateError, String(error));
    return true;
  });
  assert.deepEqual(await fs.readFile(root.paths.stateJson), frozen);
  assert.equal(await exists(fs, root.paths.evalAcceptedSidecar("ev-1")), false);
});
