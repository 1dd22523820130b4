// Crash and fault loops over the multi-step operations of the layout (RELIABILITY.md): for every
// operation number n, crash (or fail) at n, recover with several seeds, check the invariant,
// then run the operation again and check that it completes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type MemoryFs, SimulatedCrash } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { readIfExists } from "../src/port/durable.ts";
import {
  acceptEvalReceipt,
  appendEvents,
  type ChildRequestResult,
  createAttemptArtifacts,
  type CreatedSession,
  missingScaffoldEntries,
  parseRejectedRequestReceipt,
  processNextChildRequest,
  readChildrenLedger,
  readEvents,
  readSessionState,
  readTerminalControl,
  recordChildOutcome,
  scanEvents,
  SessionPaths,
  sha256Ref,
  STAGING_PREFIX,
  updateSessionState,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import {
  childRequest,
  deterministic,
  evalReceipt,
  finishChildBlocked,
  goalMetControl,
  newRepo,
  newRoot,
  readJson,
  writeJson,
} from "./layout_fixtures.ts";
import { repeatsEarlierCrashState } from "./_crash.ts";
import { seedsAfter, seedsOf } from "./_soak.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";
const ROOT_DIR = `/repo/.loopy_loop/sessions/${ROOT_ID}`;
const CHILD_ID = "01_phase-0";
const SEEDS = seedsAfter([1, 2, 3]);
const rootPaths = new SessionPaths(ROOT_DIR, "folded");

async function process(fs: MemoryFs): Promise<ChildRequestResult | undefined> {
  return await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    ...deterministic(),
  });
}

/** A synced repository with a root session and one pending request. */
async function baselineWithPending(
  body: unknown = childRequest("phase-0"),
): Promise<{ fs: MemoryFs; root: CreatedSession; bytes: Uint8Array }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  if (typeof body === "string") {
    await fs.writeFile(
      `${root.paths.childRequestsPendingDir}/phase-0.json`,
      new TextEncoder().encode(body),
    );
  } else {
    await writeJson(fs, `${root.paths.childRequestsPendingDir}/phase-0.json`, body);
  }
  fs.syncAll();
  const bytes = await fs.readFile(`${root.paths.childRequestsPendingDir}/phase-0.json`);
  return { fs, root, bytes };
}

/** Every published child directory is complete; staging leftovers are ignored. */
async function assertChildrenComplete(fs: MemoryFs, label: string): Promise<string[]> {
  const published: string[] = [];
  for (const entry of await fs.readDir(rootPaths.childrenDir)) {
    if (entry.name.startsWith(STAGING_PREFIX)) continue;
    published.push(entry.name);
    const dir = rootPaths.childDir(entry.name);
    assert.deepEqual(await missingScaffoldEntries(fs, dir, "child"), [], `${label}: ${entry.name}`);
  }
  return published;
}

/** The request is either pending with its original bytes, or fully accepted and indexed. */
async function acceptanceState(
  fs: MemoryFs,
  bytes: Uint8Array,
  label: string,
): Promise<"pending" | "accepted"> {
  const published = await assertChildrenComplete(fs, label);
  const pending = await readIfExists(fs, rootPaths.pendingRequest("phase-0"));
  if (pending !== undefined) {
    assert.deepEqual(pending, bytes, `${label}: pending bytes changed`);
    return "pending";
  }
  assert.deepEqual(await fs.readFile(rootPaths.acceptedRequest("phase-0")), bytes, label);
  const ledger = await readChildrenLedger(fs, rootPaths, ROOT_ID);
  assert.deepEqual(
    ledger.children.map((c) => [c.session_id, c.request_id, c.status]),
    [[CHILD_ID, "phase-0", "running"]],
    label,
  );
  assert.deepEqual(published, [CHILD_ID], label);
  assert.deepEqual(
    await fs.readFile(`${rootPaths.childDir(CHILD_ID)}/inputs/accepted_request.json`),
    bytes,
    label,
  );
  assert.equal((await readJson(fs, rootPaths.stateJson)).active_child_session_id, CHILD_ID, label);
  return "accepted";
}

test("a crash at any step of child acceptance leaves the request pending or fully accepted", async () => {
  const { fs: baseline, bytes } = await baselineWithPending();
  let completed = false;
  let sawPending = false;
  let sawAccepted = false;
  for (let n = 1; !completed; n++) {
    const fs = baseline.clone();
    fs.crashAfter(n);
    try {
      const result = await process(fs);
      assert.equal(result?.kind, "accepted");
      completed = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    if (repeatsEarlierCrashState(fs, n)) continue; // the state of crash point n - 1
    for (const seed of SEEDS) {
      const label = `n=${n} seed=${seed}`;
      const recovered = fs.crash(seed);
      const state = await acceptanceState(recovered, bytes, label);
      if (state === "pending") sawPending = true;
      else sawAccepted = true;
      if (completed) assert.equal(state, "accepted", label);
      // Running the engine again finishes the interrupted acceptance with the same child id.
      const rerun = await process(recovered);
      if (state === "pending") {
        assert.equal(rerun?.kind, "accepted", label);
        assert.equal(rerun?.kind === "accepted" && rerun.childSessionId, CHILD_ID, label);
      } else {
        assert.equal(rerun, undefined, label);
      }
      assert.equal(await acceptanceState(recovered, bytes, `${label} rerun`), "accepted");
    }
  }
  assert.ok(sawPending && sawAccepted);
});

test("an I/O error at any step of child acceptance fails the call and a retry completes it", async () => {
  const { fs: baseline, bytes } = await baselineWithPending();
  // The operations of a fault-free call, for the tail that appends the `child_started` event.
  const clean = baseline.clone();
  await process(clean);
  const log = clean.operationLog;
  const events = `${ROOT_DIR}/events.jsonl`;
  const inEventAppend = (op: { op: string; path: string }) =>
    op.path === events || (op.op === "lstat" && `${ROOT_DIR}/`.startsWith(`${op.path}/`)) ||
    (op.op === "syncDir" && op.path === ROOT_DIR);
  let appendStart = log.length;
  while (appendStart > 0 && inEventAppend(log[appendStart - 1]!)) appendStart--;
  assert.ok(
    log.slice(appendStart).some((op) => op.op === "write" && op.path === events),
    "a fault-free call ends by appending to the parent's events.jsonl",
  );
  /**
   * The only operations whose failure the call tolerates, each best effort by contract:
   * resolving the repository root for a canonical path (`canonicalPath`, src/layout/no_links.ts:
   * on failure the normalized path is used, and whatever uses it fails on its own first access),
   * and the `child_started` event appended after the commit point (`processNextChildRequest` and
   * `appendEventAfterCommit`, src/layout/child_requests.ts: events.jsonl is a best-effort stream).
   */
  const tolerated = (n: number, op: { op: string; path: string } | undefined) =>
    op !== undefined && ((op.op === "realPath" && op.path === "/repo") || n - 1 >= appendStart);
  let failedCalls = 0;
  let toleratedFaults = 0;
  // Every operation is faulted in turn, until the call no longer reaches the fault point: a call
  // that resolves although its fault fired does not end the loop.
  for (let n = 1;; n++) {
    assert.ok(n < 10_000, "fault loop did not terminate");
    const fs = baseline.clone();
    fs.failAt(n, { error: n % 2 === 0 ? "EIO" : "ENOSPC" });
    let resolved = false;
    try {
      await process(fs);
      resolved = true;
    } catch (error) {
      if (!(error instanceof FsIoError)) throw error;
      assert.ok(["EIO", "ENOSPC"].includes(error.code), String(error));
    }
    const reached = fs.operationCount >= n;
    const faulted = fs.operationLog[n - 1];
    fs.clearFaults();
    const label = `n=${n} (${faulted?.op} ${faulted?.path})`;
    if (resolved && reached) {
      assert.ok(
        tolerated(n, faulted),
        `${label}: the call resolved although this operation failed`,
      );
      toleratedFaults++;
    }
    if (!resolved) failedCalls++;
    const state = await acceptanceState(fs, bytes, label);
    if (resolved) assert.equal(state, "accepted", label);
    else await process(fs);
    assert.equal(await acceptanceState(fs, bytes, `${label} retry`), "accepted");
    if (!reached) break;
  }
  assert.ok(failedCalls > 100, `only ${failedCalls} fault points failed the call`);
  assert.ok(toleratedFaults > log.length - appendStart, `only ${toleratedFaults} tolerated faults`);
});

test("a crash at any step of a rejection leaves the request pending or archived with its receipt", async () => {
  const { fs: baseline, bytes } = await baselineWithPending("{torn json");
  const archived = `${rootPaths.childRequestsRejectedDir}/phase-0.json`;
  let completed = false;
  for (let n = 1; !completed; n++) {
    const fs = baseline.clone();
    fs.crashAfter(n);
    try {
      assert.equal((await process(fs))?.kind, "rejected");
      completed = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    if (repeatsEarlierCrashState(fs, n)) continue; // the state of crash point n - 1
    for (const seed of SEEDS) {
      const label = `n=${n} seed=${seed}`;
      const recovered = fs.crash(seed);
      const check = async (): Promise<"pending" | "rejected"> => {
        const pending = await readIfExists(recovered, rootPaths.pendingRequest("phase-0"));
        const moved = await readIfExists(recovered, archived);
        assert.ok((pending === undefined) !== (moved === undefined), `${label}: both or neither`);
        assert.deepEqual(pending ?? moved, bytes, label);
        if (pending !== undefined) return "pending";
        const receipt = parseRejectedRequestReceipt(
          await readJson(recovered, `${archived}.receipt.json`),
          label,
        );
        assert.equal(receipt.original_sha256, sha256Ref(bytes), label);
        return "rejected";
      };
      const state = await check();
      if (completed) assert.equal(state, "rejected", label);
      if (state === "pending") assert.equal((await process(recovered))?.kind, "rejected", label);
      assert.equal(await check(), "rejected", label);
      assert.equal((await readChildrenLedger(recovered, rootPaths, ROOT_ID)).children.length, 0);
    }
  }
});

test("a crash at any step of recording a child outcome resumes to the same record", async () => {
  const { fs } = await baselineWithPending();
  await process(fs);
  const childPaths = new SessionPaths(rootPaths.childDir(CHILD_ID), "folded");
  await finishChildBlocked(fs, childPaths, CHILD_ID, ROOT_ID);
  fs.syncAll();
  const record = () =>
    recordChildOutcome(fs2, { repoRoot: "/repo", parentSessionId: ROOT_ID, ...deterministic() });
  let fs2: MemoryFs = fs;
  let completed = false;
  for (let n = 1; !completed; n++) {
    fs2 = fs.clone();
    fs2.crashAfter(n);
    try {
      await record();
      completed = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    if (repeatsEarlierCrashState(fs2, n)) continue; // the state of crash point n - 1
    for (const seed of SEEDS) {
      const label = `n=${n} seed=${seed}`;
      const recovered = fs2.crash(seed);
      const state = await readJson(recovered, rootPaths.stateJson);
      if (state.active_child_session_id === CHILD_ID) {
        assert.ok(!completed, label);
        await recordChildOutcome(recovered, { repoRoot: "/repo", parentSessionId: ROOT_ID });
      }
      const after = await readJson(recovered, rootPaths.stateJson);
      assert.equal(after.active_child_session_id, null, label);
      assert.equal(after.status, "running", label);
      const ledger = await readChildrenLedger(recovered, rootPaths, ROOT_ID);
      assert.equal(ledger.children[0]?.status, "failed", label);
      const outcome = await readJson(recovered, rootPaths.childOutcome("phase-0"));
      assert.equal(
        outcome.session_outcome_sha256,
        sha256Ref(await recovered.readFile(childPaths.sessionOutcomeJson)),
        label,
      );
    }
  }
});

test("a crash at any step of a terminal transition and its outcome resumes to the outcome the state records", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  fs.syncAll();
  const goal = root.manifest.goal_hash;
  const at = "2026-04-19T15:00:01Z";
  const outcomeOf = (revision: number) =>
    writeSessionOutcome(engine, rootPaths, {
      sessionId: ROOT_ID,
      rootSessionId: ROOT_ID,
      goalSha256: goal,
      terminalStatus: "max_turns",
      stopReason: "max_turns",
      terminalStateRevision: revision,
      terminalAt: at,
      handoff: {
        status: "missing",
        handoff: undefined,
        sha256: null,
        revision: null,
        diagnosis: "-",
      },
    });
  // The engine's order: commit the transition to state.json (unless it is committed already),
  // then write the outcome bound to the revision and time the state froze.
  const finish = async () => {
    let state = await readSessionState(engine, ROOT_DIR);
    if (state.status === "running") {
      state = await updateSessionState(engine, ROOT_DIR, (next, current) => {
        next.status = "max_turns";
        next.terminal_state_revision = (current.state_revision ?? 0) + 1;
        next.terminal_at = at;
      }, { updatedAt: at });
    }
    return await outcomeOf(state.terminal_state_revision ?? -1);
  };
  let engine: MemoryFs = fs;
  let completed = false;
  for (let n = 1; !completed; n++) {
    engine = fs.clone();
    engine.crashAfter(n);
    try {
      await finish();
      completed = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    if (repeatsEarlierCrashState(engine, n)) continue; // the state of crash point n - 1
    const crashed = engine;
    for (const seed of SEEDS) {
      const label = `n=${n} seed=${seed}`;
      engine = crashed.crash(seed);
      // An outcome on disk is always the transition's the state records.
      const state = await readJson(engine, rootPaths.stateJson);
      const before = await readIfExists(engine, rootPaths.sessionOutcomeJson);
      if (before !== undefined) {
        const outcome = JSON.parse(new TextDecoder().decode(before));
        assert.equal(state.status, "max_turns", label);
        assert.equal(outcome.terminal_state_revision, state.terminal_state_revision, label);
        assert.equal(outcome.created_at, state.terminal_at, label);
      }
      if (completed) assert.ok(before !== undefined, label);
      // The engine restarts and finishes; the outcome is the one the state records.
      const written = await finish();
      const after = await readJson(engine, rootPaths.stateJson);
      assert.equal(written.terminal_state_revision, after.terminal_state_revision, label);
      assert.equal(after.terminal_state_revision, 1, label);
    }
  }
});

test("a crash at any step of an eval acceptance leaves no sidecar without its state seal, and a rerun completes it", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  const attempt = { iteration: 26, workflowId: "outer", attemptId: "a26" };
  await createAttemptArtifacts(fs, rootPaths, attempt, { prompt: "p", pathsMap: {} });
  const report = `${ROOT_DIR}/raw/0026_outer/eval/report.json`;
  await writeJson(fs, report, { passed: 3 });
  await writeGitReceipt(fs, rootPaths, ROOT_ID, attempt, "after", {
    head: "c0ffee",
    branch: "main",
    dirty: false,
  });
  await writeJson(fs, rootPaths.evalReceipt("tests-pass"), evalReceipt(ROOT_ID));
  await writeJson(
    fs,
    rootPaths.controlJson,
    goalMetControl(ROOT_ID, "outer", {
      eval_receipt_refs: ["session:/eval_receipts/tests-pass.json"],
    }),
  );
  fs.syncAll();
  const KEY = "session:/eval_receipts/tests-pass.json";
  const accept = (on: MemoryFs) =>
    acceptEvalReceipt(on, rootPaths, "tests-pass", {
      sessionId: ROOT_ID,
      currentAttempt: attempt,
      ...deterministic(),
    });
  const sealOf = async (on: MemoryFs) =>
    ((await readJson(on, rootPaths.stateJson)).accepted_eval_seals as Record<string, unknown>)[
      KEY
    ];
  let completed = false;
  let sawSealOnly = false;
  for (let n = 1; !completed; n++) {
    const clone = fs.clone();
    clone.crashAfter(n);
    try {
      await accept(clone);
      completed = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    if (repeatsEarlierCrashState(clone, n)) continue; // the state of crash point n - 1
    for (const seed of SEEDS) {
      const label = `n=${n} seed=${seed}`;
      const recovered = clone.crash(seed);
      const seal = await sealOf(recovered);
      const sidecar = await readIfExists(recovered, rootPaths.evalAcceptedSidecar("tests-pass"));
      // The seal is written first: a sidecar never stands without it.
      if (sidecar !== undefined) {
        assert.deepEqual(JSON.parse(new TextDecoder().decode(sidecar)), seal, label);
      }
      if (completed) assert.ok(seal !== undefined && sidecar !== undefined, label);
      if (seal !== undefined && sidecar === undefined) {
        sawSealOnly = true;
        // The seal alone completes the acceptance: even with the raw report pruned meanwhile.
        await recovered.remove(report);
      }
      const accepted = await accept(recovered);
      assert.deepEqual(await sealOf(recovered), accepted, label);
      assert.deepEqual(
        await readJson(recovered, rootPaths.evalAcceptedSidecar("tests-pass")),
        accepted,
        label,
      );
      const control = await readTerminalControl(recovered, rootPaths, {
        sessionId: ROOT_ID,
        workflowId: "outer",
        attemptId: "a26",
        completionRole: "outer",
      });
      assert.deepEqual(control?.record.eval_receipt_refs, [KEY], label);
    }
  }
  assert.ok(sawSealOnly, "a crash between the seal and its sidecar was reached");
});

test("a crash while appending events leaves a prefix of the batch and nothing else", async () => {
  const fs = await newRepo();
  fs.syncAll();
  const file = "/repo/events.jsonl";
  const batch = [{ type: "a" }, { type: "b" }, { type: "c" }];
  let completed = false;
  for (let n = 1; !completed; n++) {
    const clone = fs.clone();
    clone.crashAfter(n);
    try {
      await appendEvents(clone, file, ROOT_ID, batch, deterministic());
      completed = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    if (repeatsEarlierCrashState(clone, n)) continue; // the state of crash point n - 1
    for (const seed of seedsOf(1, 60)) {
      const recovered = clone.crash(seed);
      const scan = await scanEvents(recovered, file);
      const types = scan.events.map((e) => e.type);
      assert.deepEqual(types, ["a", "b", "c"].slice(0, types.length), `n=${n} seed=${seed}`);
      if (completed) assert.deepEqual(types, ["a", "b", "c"]);
      // Only the crash tail may be skipped: lines after the events kept (a garbage tail may
      // hold line feeds, so it can make more than one line).
      assert.ok(
        scan.skipped.every((skipped) => skipped.line > types.length),
        `n=${n} seed=${seed} ${JSON.stringify(scan.skipped)}`,
      );
      assert.deepEqual(await readEvents(recovered, file), scan.events);
    }
  }
});
