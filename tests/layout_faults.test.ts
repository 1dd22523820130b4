// Storage faults (EIO, ENOSPC) in the middle of layout calls, and the host's rerun of the same
// call on the same filesystem object, as a long-running engine process does it. What a rerun
// reports must rest on durable state only: a power loss right after it resolves never takes back
// anything it built on, even when the first call failed after a rename and before the fsync of
// its directory (so the record is visible, and an "already done" branch finds it).
import { test } from "node:test";
import assert from "node:assert/strict";
import type { FaultError, MemoryFs } from "../adapters/memory.ts";
import { FsError } from "../src/port/errors.ts";
import { readDirIfExists, readIfExists } from "../src/port/durable.ts";
import {
  acceptEvalReceipt,
  appendEvents,
  createAttemptArtifacts,
  LayoutError,
  type LayoutWriteOptions,
  loadSessionTree,
  missingScaffoldEntries,
  processNextChildRequest,
  readChildrenLedger,
  recordChildOutcome,
  SessionPaths,
  SessionStateError,
  UnconfirmedPublishError,
  writeGitReceipt,
} from "../layout.ts";
import {
  childRequest,
  deterministic,
  evalReceipt,
  finishChildBlocked,
  newRepo,
  newRoot,
  readJson,
  writeJson,
} from "./layout_fixtures.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";
const ROOT_DIR = `/repo/.loopy_loop/sessions/${ROOT_ID}`;
const CHILD_ID = "01_phase-0";
const rootPaths = new SessionPaths(ROOT_DIR, "folded");
const ATTEMPT = { iteration: 26, workflowId: "outer", attemptId: "a26" };

/** The strictly durable state of `fs`: what a power loss right now leaves. */
function powerLoss(fs: MemoryFs): MemoryFs {
  return fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
}

/**
 * The number of the first `syncDir` after the first rename whose source matches `renamed`, in a
 * fault-free run of `call` on a clone of `baseline` prepared by `prepare`.
 */
async function syncAfterRename(
  baseline: MemoryFs,
  prepare: (fs: MemoryFs) => Promise<MemoryFs>,
  call: (fs: MemoryFs) => Promise<unknown>,
  renamed: RegExp,
): Promise<number> {
  const probe = await prepare(baseline);
  await call(probe);
  const log = probe.operationLog;
  const rename = log.findIndex((e) => e.op === "rename" && renamed.test(String(e.path)));
  assert.ok(rename >= 0, `no rename matching ${renamed}`);
  const sync = log.slice(rename).find((e) => e.op === "syncDir");
  assert.ok(sync !== undefined, `no syncDir after the rename matching ${renamed}`);
  return sync.number;
}

/**
 * Runs `call` on a prepared clone of `baseline` with operation `n` failing (`error`), expects it
 * to reject with a storage error, clears the fault and reruns it on the same filesystem object.
 * Returns the filesystem and the rerun's result.
 */
async function failThenRerun<T>(
  baseline: MemoryFs,
  prepare: (fs: MemoryFs) => Promise<MemoryFs>,
  call: (fs: MemoryFs) => Promise<T>,
  n: number,
  error: FaultError = "EIO",
): Promise<{ readonly fs: MemoryFs; readonly rerun: T }> {
  const fs = await prepare(baseline);
  fs.failAt(n, { error });
  await assert.rejects(call(fs), (e: unknown) => e instanceof FsError);
  fs.clearFaults();
  return { fs, rerun: await call(fs) };
}

/**
 * A clone of `baseline` as a long-running engine holds it: it appended to the root's
 * events.jsonl already, so that file's once-per-process directory fsync (which would make every
 * entry of the session directory durable as a side effect) is spent.
 */
async function engine(baseline: MemoryFs): Promise<MemoryFs> {
  const fs = baseline.clone();
  await appendEvents(
    fs,
    rootPaths.eventsJsonl,
    ROOT_ID,
    [{ type: "session_started" }],
    deterministic(),
  );
  fs.resetCounter();
  return fs;
}

const processNext = (fs: MemoryFs) =>
  processNextChildRequest(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID, ...deterministic() });

/** A root session with the request `phase-0` pending, all durable. */
async function withPendingRequest(): Promise<MemoryFs> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await writeJson(
    fs,
    `${root.paths.childRequestsPendingDir}/phase-0.json`,
    childRequest("phase-0"),
  );
  fs.syncAll();
  return fs;
}

/** A root with attempt 26, its raw eval report, git-after receipt and eval receipt `id`. */
async function withEvalReceipts(...ids: string[]): Promise<MemoryFs> {
  const fs = await newRepo();
  await newRoot(fs);
  const options: LayoutWriteOptions = deterministic();
  await createAttemptArtifacts(fs, rootPaths, ATTEMPT, { prompt: "p", pathsMap: {}, ...options });
  await writeJson(fs, `${ROOT_DIR}/raw/0026_outer/eval/report.json`, { passed: 3 });
  const boundary = { head: "c0ffee", branch: "main", dirty: false };
  await writeGitReceipt(fs, rootPaths, ROOT_ID, ATTEMPT, "after", boundary, options);
  for (const id of ids) {
    await writeJson(fs, rootPaths.evalReceipt(id), evalReceipt(ROOT_ID, "a26", { eval_id: id }));
  }
  fs.syncAll();
  return fs;
}

const STATE_TEMP = /\.state\.json\..*\.tmp$/;

test("a rerun child acceptance resolves only once the parent's state names the child durably", async () => {
  const baseline = await withPendingRequest();
  const n = await syncAfterRename(baseline, engine, processNext, STATE_TEMP);
  const { fs, rerun } = await failThenRerun(baseline, engine, processNext, n);
  assert.equal(rerun?.kind, "accepted");
  const after = powerLoss(fs);
  // The request left pending/ for good, so the state must name the child for good as well:
  // otherwise the child's outcome could never be recorded.
  const state = await readJson(after, rootPaths.stateJson);
  assert.equal(state.active_child_session_id, CHILD_ID);
  const ledger = await readChildrenLedger(after, rootPaths, ROOT_ID);
  assert.deepEqual(ledger.children.map((c) => [c.session_id, c.status]), [[CHILD_ID, "running"]]);
});

test("a rerun eval acceptance resolves only once its seal in state.json is durable", async () => {
  const baseline = await withEvalReceipts("lint-pass", "tests-pass");
  const accept = (fs: MemoryFs, id: string) =>
    acceptEvalReceipt(fs, rootPaths, id, {
      sessionId: ROOT_ID,
      currentAttempt: ATTEMPT,
      ...deterministic(),
    });
  // An engine that accepted another receipt already (state.json's entry is synced once by it).
  const prepare = async (from: MemoryFs) => {
    const fs = await engine(from);
    await accept(fs, "lint-pass");
    fs.resetCounter();
    return fs;
  };
  const run = (fs: MemoryFs) => accept(fs, "tests-pass");
  const n = await syncAfterRename(baseline, prepare, run, STATE_TEMP);
  const { fs } = await failThenRerun(baseline, prepare, run, n);
  const after = powerLoss(fs);
  const seals = (await readJson(after, rootPaths.stateJson)).accepted_eval_seals as Record<
    string,
    unknown
  >;
  assert.ok(
    Object.hasOwn(seals, "session:/eval_receipts/tests-pass.json"),
    "the resolved acceptance's seal was lost",
  );
});

/**
 * A clone of `baseline` as a long-running engine holds it, with the child's events.jsonl
 * appended to as well (when there is a child).
 */
async function engineWithChild(baseline: MemoryFs): Promise<MemoryFs> {
  const fs = await engine(baseline);
  const child = new SessionPaths(`${ROOT_DIR}/children/${CHILD_ID}`, "folded");
  await appendEvents(
    fs,
    child.eventsJsonl,
    CHILD_ID,
    [{ type: "session_started" }],
    deterministic(),
  );
  fs.resetCounter();
  return fs;
}

test("a rerun after an acceptance failed at the fsync of pending/ reports nothing pending only once the request left it durably", async () => {
  const baseline = await withPendingRequest();
  const probe = await engine(baseline);
  await processNext(probe);
  const log = probe.operationLog;
  const removed = log.findIndex((e) =>
    e.op === "remove" && /pending\/phase-0\.json$/.test(String(e.path))
  );
  assert.ok(removed >= 0);
  const n = log.slice(removed).find((e) => e.op === "syncDir")!.number;
  const { fs, rerun } = await failThenRerun(baseline, engine, processNext, n);
  assert.equal(rerun, undefined, "nothing is pending any more");
  const after = powerLoss(fs);
  assert.equal(await readIfExists(after, rootPaths.pendingRequest("phase-0")), undefined);
  assert.equal((await readJson(after, rootPaths.stateJson)).active_child_session_id, CHILD_ID);
});

test("a rerun after a rejection failed at the fsync of rejected/ reports nothing pending only once the request is archived durably", async () => {
  for (const error of ["EIO", "ENOSPC"] as const) {
    const baseline = await newRepo();
    const root = await newRoot(baseline);
    const pending = `${root.paths.childRequestsPendingDir}/phase-0.json`;
    await baseline.writeFile(pending, new TextEncoder().encode("{torn json"));
    baseline.syncAll();
    const n = await syncAfterRename(baseline, engine, processNext, /pending\/phase-0\.json$/);
    const { fs, rerun } = await failThenRerun(baseline, engine, processNext, n, error);
    assert.equal(rerun, undefined, "nothing is pending any more");
    const after = powerLoss(fs);
    assert.equal(await readIfExists(after, pending), undefined, `${error}: the request came back`);
    const archived = await readIfExists(
      after,
      `${root.paths.childRequestsRejectedDir}/phase-0.json`,
    );
    assert.equal(new TextDecoder().decode(archived), "{torn json");
  }
});

/** A root whose active child `01_phase-0` is terminal and has its outcome, all durable. */
async function withTerminalChild(): Promise<MemoryFs> {
  const fs = await withPendingRequest();
  await processNext(fs);
  const child = new SessionPaths(`${ROOT_DIR}/children/${CHILD_ID}`, "folded");
  await finishChildBlocked(fs, child, CHILD_ID, ROOT_ID);
  fs.syncAll();
  return fs;
}

test("a rerun child outcome that finds the active child cleared reports it once the cleared state is durable", async () => {
  const baseline = await withTerminalChild();
  const record = (fs: MemoryFs) =>
    recordChildOutcome(fs, { repoRoot: "/repo", parentSessionId: ROOT_ID, ...deterministic() });
  const n = await syncAfterRename(baseline, engineWithChild, record, STATE_TEMP);
  const fs = await engineWithChild(baseline);
  fs.failAt(n, { error: "EIO" });
  await assert.rejects(record(fs), (e: unknown) => e instanceof FsError);
  fs.clearFaults();
  await assert.rejects(record(fs), (e: unknown) => e instanceof SessionStateError);
  // What the rerun reported (no active child) is what a power loss leaves.
  const state = await readJson(powerLoss(fs), rootPaths.stateJson);
  assert.equal(state.active_child_session_id, null);
});

/** The session names visible in `.loopy_loop/sessions/` (hidden reservations and staging left out). */
async function visibleSessions(fs: MemoryFs): Promise<string[]> {
  return (await readDirIfExists(fs, "/repo/.loopy_loop/sessions")).map((e) => e.name)
    .filter((name) => !name.startsWith("."));
}

test("a root creation that fails after publishing its session says so and names it, so a caller adopts it instead of creating a second", async () => {
  const baseline = await newRepo();
  baseline.syncAll();
  const probe = baseline.clone();
  await newRoot(probe);
  const log = probe.operationLog;
  const rename = log.findIndex((e) => e.op === "rename" && String(e.path).includes("/.staging-"));
  const n = log.slice(rename).find((e) => e.op === "syncDir")!.number;
  for (const error of ["EIO", "ENOSPC"] as const) {
    for (const persistent of [false, true]) {
      const label = `${error} ${persistent ? "persistent" : "transient"}`;
      const fs = baseline.clone();
      fs.failAt(n, { error, persistent });
      const failure = await newRoot(fs).catch((e) => e);
      fs.clearFaults();
      assert.ok(failure instanceof UnconfirmedPublishError, `${label}: ${failure}`);
      assert.ok(failure instanceof LayoutError, label);
      assert.ok(failure.cause instanceof FsError, label);
      assert.equal(failure.sessionId, ROOT_ID, label);
      assert.equal(failure.dir, ROOT_DIR, label);
      assert.match(failure.message, /published/, label);
      // The session it names is there and complete: the caller adopts it.
      assert.deepEqual(await visibleSessions(fs), [ROOT_ID], label);
      assert.deepEqual(await missingScaffoldEntries(fs, failure.dir, "root"), [], label);
      const tree = await loadSessionTree(fs, "/repo", failure.sessionId);
      assert.equal(tree.require(failure.sessionId).dir, failure.dir, label);
    }
  }
});

test("a root creation failing at any operation either published nothing (a storage error) or names the session it published", async () => {
  const baseline = await newRepo();
  baseline.syncAll();
  for (const persistent of [false, true]) {
    for (let n = 1;; n++) {
      const label = `n=${n} ${persistent ? "persistent" : "transient"}`;
      const fs = baseline.clone();
      fs.failAt(n, { error: "EIO", persistent });
      let failure: unknown;
      try {
        await newRoot(fs);
      } catch (error) {
        failure = error;
      }
      const reached = fs.operationCount >= n;
      fs.clearFaults();
      const visible = await visibleSessions(fs);
      if (failure === undefined || failure instanceof UnconfirmedPublishError) {
        assert.deepEqual(visible, [ROOT_ID], label);
      } else {
        assert.ok(failure instanceof FsError, `${label}: ${failure}`);
        assert.deepEqual(visible, [], `${label}: ${failure}`);
      }
      if (!reached) break;
    }
  }
});
