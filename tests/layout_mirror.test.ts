// The legacy mirror layout end to end: mirror sessions load with the same API as folded ones
// (the layout read from session.json), their references resolve (trace: through the manifests),
// and prune-raw treats the mirror tree as the layout rules say, keeping every durable file.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { NotFound } from "../src/port/errors.ts";
import {
  checkTraceSeals,
  findWorkingSession,
  isSessionId,
  LayoutRecordError,
  listTraces,
  loadSessionTree,
  LogicalReferenceError,
  LogicalReferenceResolver,
  openSessionPaths,
  parseSessionOutcome,
  pruneRaw,
  readChildrenLedger,
  readRecord,
  readSessionState,
  readTraceRef,
  recordChildOutcome,
  sessionIdForm,
  updateSessionState,
} from "../layout.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import { deterministic, newRepo, patchState, readJson, writeJson } from "./layout_fixtures.ts";
import {
  CHILD_ATTEMPT,
  mirror,
  MIRROR_CHILD_ID,
  MIRROR_ROOT_ID,
  type MirrorTree,
  ROOT_ATTEMPTS,
} from "./fixtures/mirror_tree.ts";
import { collectReferences } from "./fixtures/references.ts";

async function stopRoot(fs: MemoryFs, tree: MirrorTree): Promise<void> {
  await writeJson(fs, `${tree.rootDir}/state.json`, {
    schema_version: 2,
    session_id: MIRROR_ROOT_ID,
    status: "stopped",
    current_task: null,
  });
}

/** The live tree without `.loopy_loop/traces/` and the outbox: what a prune must never touch. */
function durable(fs: MemoryFs): Record<string, string> {
  return Object.fromEntries(
    Object.entries(fs.snapshotTree("/")).filter(([key]) =>
      !key.startsWith("repo/.loopy_loop/traces/") &&
      !key.startsWith("repo/.loopy_loop/trace_finalization_outbox/")
    ),
  );
}

async function resolveAllCited(
  fs: MemoryFs,
  tree: MirrorTree,
): Promise<Map<string, string>> {
  const statuses = new Map<string, string>();
  for (
    const [sessionId, dir] of [[MIRROR_ROOT_ID, tree.rootDir], [MIRROR_CHILD_ID, tree.childDir]]
  ) {
    const resolver = await LogicalReferenceResolver.forSession(fs, {
      repoRoot: tree.repoRoot,
      sessionId: sessionId as string,
    });
    for (const { ref } of await collectReferences(fs, dir as string)) {
      statuses.set(`${sessionId} ${ref}`, (await resolver.resolve(ref)).status);
    }
  }
  return statuses;
}

/** What a cited reference resolves to: the child's outcome records its handoff as missing. */
function expectedStatus(ref: string, tracesPruned: boolean): string {
  if (ref === `${MIRROR_CHILD_ID} session:/project_state/handoff.json`) return "absent";
  return tracesPruned && ref.includes(" trace:") ? "pruned" : "present";
}

test("mirror sessions load with the same API as folded ones, the layout read from session.json", async () => {
  const { fs, tree } = await mirror();
  assert.equal(sessionIdForm(MIRROR_ROOT_ID), "legacy");
  assert.ok(isSessionId(MIRROR_CHILD_ID));
  const loaded = await loadSessionTree(fs, tree.repoRoot, MIRROR_CHILD_ID);
  assert.equal(loaded.rootSessionId, MIRROR_ROOT_ID);
  // The root records "mirror"; the child's v2 manifest has no layout field, which means mirror.
  assert.equal(loaded.require(MIRROR_ROOT_ID).layout, "mirror");
  assert.equal(loaded.require(MIRROR_CHILD_ID).layout, "mirror");
  assert.equal(loaded.require(MIRROR_CHILD_ID).depth, 1);

  const paths = await openSessionPaths(fs, tree.rootDir);
  assert.equal(paths.layout, "mirror");
  assert.equal(paths.gitReceiptsDir, `${tree.rootDir}/git_receipts`);
  assert.equal(paths.deliveryReceiptsDir, `${tree.rootDir}/delivery_receipts`);
  for (const dir of [paths.harnessOutputsDir, paths.evalReadinessDir, paths.traceSealsDir]) {
    assert.equal((await fs.lstat(dir)).kind, "directory", dir);
  }
  assert.equal(
    (await fs.lstat(paths.traceSealReceipt(ROOT_ATTEMPTS.first.attemptId))).kind,
    "file",
  );
  await assert.rejects(fs.lstat(paths.rawDir), NotFound, "a mirror session has no raw/");
  const first = ROOT_ATTEMPTS.first;
  const attempt = paths.attempt(first.iteration, first.workflowId);
  assert.ok(
    (await fs.lstat(attempt.gitReceipt("after", first.attemptId))).kind === "file",
    "the hash-keyed git receipt is where the mirror paths say",
  );
  assert.deepEqual(await readTraceRef(fs, attempt), {
    schema_version: 1,
    manifest_id: `trace-${first.attemptId}`,
    manifest_ref: `trace:trace-${first.attemptId}:/trace_manifest.json`,
    attempt_id: first.attemptId,
  });
  const state = await readSessionState(fs, tree.rootDir);
  assert.equal(state.current_task?.attempt_id, ROOT_ATTEMPTS.active.attemptId);
  const working = await findWorkingSession(fs, loaded);
  assert.equal(working?.node.sessionId, MIRROR_ROOT_ID);
  const outcome = await readRecord(
    fs,
    `${tree.childDir}/session_outcome.json`,
    (value, file) => parseSessionOutcome(value, file, "mirror"),
  );
  assert.deepEqual(outcome.record.trace_seal_refs, [
    `session:/trace_seals/${CHILD_ATTEMPT.attemptId}.json`,
  ]);
  // The same outcome is refused as a folded session's: folded sessions have no trace seals.
  await assert.rejects(
    readRecord(fs, `${tree.childDir}/session_outcome.json`, parseSessionOutcome),
  );
});

test("every reference a mirror session cites resolves, trace: references through the manifests", async () => {
  const { fs, tree } = await mirror();
  const statuses = await resolveAllCited(fs, tree);
  assert.ok(statuses.size >= 8, `the fixture cites references: ${[...statuses.keys()]}`);
  for (const [ref, status] of statuses) assert.equal(status, expectedStatus(ref, false), ref);
  const first = ROOT_ATTEMPTS.first.attemptId;
  assert.ok(statuses.has(`${MIRROR_ROOT_ID} trace:trace-${first}:/eval/report.json`));
  assert.ok(statuses.has(`${MIRROR_ROOT_ID} session:/git_receipts/git-after-${first}.json`));
  assert.ok(
    statuses.has(`${MIRROR_CHILD_ID} session:/trace_seals/${CHILD_ATTEMPT.attemptId}.json`),
  );
  // A child reaches its own traces (all traces of a tree share the root's part of traces/).
  const child = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: MIRROR_CHILD_ID,
  });
  const report = await child.resolve(`trace:trace-${CHILD_ATTEMPT.attemptId}:/eval/report.json`);
  assert.equal(report.path, `${tree.traceDir(CHILD_ATTEMPT.attemptId)}/eval/report.json`);
});

test("prune without legacy traces leaves a mirror repository untouched", async () => {
  const { fs, tree } = await mirror();
  await stopRoot(fs, tree);
  const before = fs.snapshotTree("/");
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.equal(report.count, 0);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("legacy traces of a running tree are kept; the outbox is emptied", async () => {
  const { fs, tree } = await mirror();
  const before = durable(fs);
  const report = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
  const rootTraces = `${tree.tracesDir}/${MIRROR_ROOT_ID}`;
  assert.equal(report.skipped.find((skip) => skip.path === rootTraces)?.reason, "running_attempt");
  assert.deepEqual(
    report.removed.map((entry) => entry.kind),
    ["finalization_outbox", "finalization_outbox"],
  );
  assert.deepEqual(await fs.readDir(tree.outboxDir), []);
  assert.equal((await listTraces(fs, tree.loopyRoot)).length, 4);
  assert.deepEqual(durable(fs), before);
});

test("pruning legacy traces keeps the durable tree, and its trace references resolve as pruned", async () => {
  const { fs, tree } = await mirror();
  await stopRoot(fs, tree);
  const before = durable(fs);
  const plan = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true, dryRun: true });
  const report = await pruneRaw(fs, tree.loopyRoot, { legacyTraces: true });
  assert.deepEqual(report.removed, plan.removed);
  assert.deepEqual(
    report.removed.map((entry) => [entry.kind, entry.path]),
    [
      ["legacy_traces", `${tree.tracesDir}/${MIRROR_ROOT_ID}`],
      ...(plan.removed.slice(1).map((entry) => ["finalization_outbox", entry.path])),
    ],
  );
  assert.ok(report.bytes > 1000);
  assert.deepEqual(await fs.readDir(tree.tracesDir), []);
  assert.deepEqual(durable(fs), before);

  const statuses = await resolveAllCited(fs, tree);
  for (const [ref, status] of statuses) {
    assert.equal(status, expectedStatus(ref, true), ref);
  }
  // Even the active attempt's trace, which has no seal, is known from its trace_ref.json.
  const root = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: MIRROR_ROOT_ID,
  });
  const active = await root.resolve(
    `trace:trace-${ROOT_ATTEMPTS.active.attemptId}:/harness/run.json`,
  );
  assert.deepEqual([active.status, active.path], [
    "pruned",
    `${tree.traceDir(ROOT_ATTEMPTS.active.attemptId)}/harness/run.json`,
  ]);
  // An id no durable record names is still unknown.
  await assert.rejects(
    root.resolve("trace:trace-000000000000:/eval/report.json"),
    (error: unknown) => error instanceof LogicalReferenceError && error.reason === "unknown_trace",
  );
  const seals = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  assert.deepEqual(seals.map((seal) => seal.status), ["trace_absent", "trace_absent"]);
  assert.deepEqual(await listTraces(fs, tree.loopyRoot), []);
});

test("pruning one session's legacy traces removes only its part of the traces tree, not the outbox", async () => {
  const { fs, tree } = await mirror();
  const outbox = (await fs.readDir(tree.outboxDir)).map((entry) => entry.name).sort();
  assert.ok(outbox.includes(`${MIRROR_CHILD_ID}--${CHILD_ATTEMPT.attemptId}--abandoned.json`));
  const report = await pruneRaw(fs, tree.loopyRoot, {
    legacyTraces: true,
    sessionId: MIRROR_CHILD_ID,
  });
  const childTraces = `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions/${MIRROR_CHILD_ID}`;
  assert.deepEqual(report.removed.map((entry) => [entry.kind, entry.path, entry.sessionId]), [
    ["legacy_traces", childTraces, MIRROR_CHILD_ID],
  ]);
  const listed = await listTraces(fs, tree.loopyRoot);
  assert.deepEqual(
    listed.map((entry) => [entry.sessionId, entry.integrity]),
    [
      [MIRROR_ROOT_ID, "verified"],
      [MIRROR_ROOT_ID, "verified"],
      [MIRROR_ROOT_ID, "not_finalized"],
    ],
  );
  // The outbox is emptied only by a prune of every session's traces.
  assert.deepEqual((await fs.readDir(tree.outboxDir)).map((entry) => entry.name).sort(), outbox);
});

test("the age limit and symlinks apply to legacy trees too", async () => {
  const { fs, tree } = await mirror();
  await stopRoot(fs, tree);
  const now = Date.parse("2026-05-01T00:00:00Z");
  await fs.utime(`${tree.tracesDir}/${MIRROR_ROOT_ID}`, now - 86_400_000);
  await fs.mkdir("/outside/traces", { recursive: true });
  await fs.symlink("/outside/traces", `${tree.tracesDir}/elsewhere`);
  await fs.symlink("/outside/traces", `${tree.outboxDir}/linked--x--finished.json`);
  const report = await pruneRaw(fs, tree.loopyRoot, {
    legacyTraces: true,
    olderThanDays: 2,
    now: () => new Date(now),
  });
  const reasons = Object.fromEntries(report.skipped.map((skip) => [skip.path, skip.reason]));
  assert.equal(reasons[`${tree.tracesDir}/${MIRROR_ROOT_ID}`], "too_recent");
  assert.equal(reasons[`${tree.tracesDir}/elsewhere`], "symlink");
  assert.equal(reasons[`${tree.outboxDir}/linked--x--finished.json`], "symlink");
  // The outbox ignores the age limit, as the engine's does; links stay.
  assert.deepEqual(
    (await fs.readDir(tree.outboxDir)).map((entry) => entry.name),
    ["linked--x--finished.json"],
  );
  assert.ok((await fs.lstat("/outside/traces")).kind === "directory");
});

// ---------------------------------------------------------------------------------------------
// A mirror parent's v1 children.json (rules §3: the v1 form, and a bare list, are read)

test("a mirror session's v1 children.json and a bare list are read into the typed ledger", async () => {
  const { fs, tree } = await mirror();
  const paths = await openSessionPaths(fs, tree.rootDir);
  // The fixture's own ledger: `{schema_version: 1, children: []}`.
  assert.deepEqual(await readChildrenLedger(fs, paths, MIRROR_ROOT_ID), {
    schema_version: 1,
    parent_session_id: MIRROR_ROOT_ID,
    revision: 0,
    children: [],
  });
  // A bare list is the v1 form too; an old record without a request id is read as it is.
  const old = { session_id: MIRROR_CHILD_ID, status: "goal_met", request_file: "phase.json" };
  await writeJson(fs, paths.childrenJson, [old]);
  const ledger = await readChildrenLedger(fs, paths, MIRROR_ROOT_ID);
  assert.equal(ledger.schema_version, 1);
  assert.equal(ledger.revision, 0);
  assert.deepEqual(ledger.children, [old]);
  // A v1 record is still checked: a typed error names the file and the field.
  await writeJson(fs, paths.childrenJson, {
    schema_version: 1,
    children: [{ ...old, status: "paused" }],
  });
  await assert.rejects(readChildrenLedger(fs, paths, MIRROR_ROOT_ID), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, paths.childrenJson);
    assert.equal(error.path, "children[0].status");
    return true;
  });
  await writeJson(fs, paths.childrenJson, { schema_version: 3, children: [] });
  await assert.rejects(
    readChildrenLedger(fs, paths, MIRROR_ROOT_ID),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "schema_version",
  );
});

test("recordChildOutcome works for a mirror parent with a v1 ledger, which keeps its v1 form", async () => {
  for (const form of ["object", "list"] as const) {
    const { fs, tree } = await mirror();
    await patchState(fs, tree.rootDir, {
      current_task: null,
      active_child_session_id: MIRROR_CHILD_ID,
    });
    const record = {
      session_id: MIRROR_CHILD_ID,
      workflow_set: "main",
      request_id: "legacy-phase",
      status: "running",
      created_at: "2026-04-19T15:05:01.123456Z",
    };
    await writeJson(
      fs,
      `${tree.rootDir}/children.json`,
      form === "list" ? [record] : { schema_version: 1, children: [record] },
    );
    const outcome = await recordChildOutcome(fs, {
      repoRoot: tree.repoRoot,
      parentSessionId: MIRROR_ROOT_ID,
      ...deterministic(),
    });
    assert.equal(outcome.child_session_id, MIRROR_CHILD_ID, form);
    assert.equal(outcome.request_id, "legacy-phase", form);
    // Rewritten as the engine rewrites a v1 ledger: `{schema_version: 1, children}`, no revision.
    assert.deepEqual(await readJson(fs, `${tree.rootDir}/children.json`), {
      schema_version: 1,
      children: [{
        ...record,
        status: "goal_met",
        outcome_ref: "session:/child_outcomes/legacy-phase.json",
        updated_at: "2026-04-19T14:30:22Z",
      }],
    }, form);
    assert.equal((await readSessionState(fs, tree.rootDir)).active_child_session_id, null, form);
    // Rerunning after the pointer was cleared is a typed refusal, and the ledger stays v1.
    await assert.rejects(
      recordChildOutcome(fs, { repoRoot: tree.repoRoot, parentSessionId: MIRROR_ROOT_ID }),
    );
  }
});

test("a v1 ledger record without a request id cannot name its child outcome: a typed error", async () => {
  const { fs, tree } = await mirror();
  await patchState(fs, tree.rootDir, {
    current_task: null,
    active_child_session_id: MIRROR_CHILD_ID,
  });
  const ledger = {
    schema_version: 1,
    children: [{ session_id: MIRROR_CHILD_ID, status: "running", request_file: "phase.json" }],
  };
  await writeJson(fs, `${tree.rootDir}/children.json`, ledger);
  await assert.rejects(
    recordChildOutcome(fs, { repoRoot: tree.repoRoot, parentSessionId: MIRROR_ROOT_ID }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, `${tree.rootDir}/children.json`);
      assert.equal(error.path, "children[0].request_id");
      return true;
    },
  );
  assert.deepEqual(await readJson(fs, `${tree.rootDir}/children.json`), ledger);
  await assert.rejects(fs.lstat(`${tree.rootDir}/child_outcomes/undefined.json`), NotFound);
});

// ---------------------------------------------------------------------------------------------
// Pre-versioned legacy states (engine LoopState: "Missing means legacy v1", default 1; a v1
// CurrentTask's attempt_id is None "only on pre-attempt persisted state")

const LEGACY_ID = "20260419_143022_71393ee22450_ab12cd34";
const LEGACY_DIR = `/repo/.loopy_loop/sessions/${LEGACY_ID}`;

/** A pre-versioned v1 state, as the legacy engine dumped it: no `schema_version`. */
const PRE_VERSIONED_STATE = {
  state_revision: 3,
  status: "running",
  goal_hash: "71393ee22450",
  workflow_set: "main",
  parent_session_id: null,
  max_turns: 50,
  active_session_id: LEGACY_ID,
  iteration_count: 2,
  active_child_session_id: null,
  current_task: null,
  history: [],
};

/** A legacy root session with a v1 `session.json` and the given `state.json`. */
async function legacySession(state: Record<string, unknown>): Promise<MemoryFs> {
  const fs = await newRepo();
  await fs.mkdir(LEGACY_DIR, { recursive: true });
  await writeJson(fs, `${LEGACY_DIR}/session.json`, {
    session_id: LEGACY_ID,
    goal_hash: "71393ee22450",
    workflow_set: "main",
    parent_session_id: null,
    created_at: "2026-04-19T14:30:22Z",
  });
  await writeJson(fs, `${LEGACY_DIR}/state.json`, state);
  return fs;
}

test("a legacy state.json without schema_version is read as v1 and its session receives work", async () => {
  const fs = await legacySession(PRE_VERSIONED_STATE);
  const state = await readSessionState(fs, LEGACY_DIR);
  assert.equal(state.schema_version, 1);
  assert.equal(state.status, "running");
  assert.equal(state.iteration_count, 2, "fields the library does not interpret are kept");
  const tree = await loadSessionTree(fs, "/repo", LEGACY_ID);
  assert.equal((await findWorkingSession(fs, tree))?.node.sessionId, LEGACY_ID);
});

test("layout tree lists a pre-versioned legacy session as running (mirror), exit 0", async () => {
  const fs = await legacySession(PRE_VERSIONED_STATE);
  const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-05-01T00:00:00Z"));
  const code = await runCli(["layout", "tree"], io);
  assert.equal(code, 0, out());
  assert.equal(out(), `* ${LEGACY_ID}  running (mirror)\n`);
});

test("a v1 state's current task may predate attempt ids (attempt_id null or absent)", async () => {
  const task = {
    workflow_set: "main",
    workflow_id: "outer",
    session_id: LEGACY_ID,
    iteration: 3,
    started_at: "2026-04-19T14:35:00Z",
    worker: null,
  };
  for (const [current, attemptId] of [[{ ...task, attempt_id: null }, null], [task, undefined]]) {
    for (const version of [{ schema_version: 1 }, {}]) {
      const fs = await legacySession({ ...PRE_VERSIONED_STATE, ...version, current_task: current });
      const state = await readSessionState(fs, LEGACY_DIR);
      assert.equal(state.schema_version, 1);
      assert.equal(state.current_task?.iteration, 3);
      assert.equal(state.current_task?.attempt_id, attemptId);
      const tree = await loadSessionTree(fs, "/repo", LEGACY_ID);
      assert.equal((await findWorkingSession(fs, tree))?.state.current_task?.workflow_id, "outer");
    }
  }
});

test("a v2 state's current task still names its attempt: attempt_id null is a typed error", async () => {
  const { fs, tree } = await mirror();
  const file = `${tree.rootDir}/state.json`;
  for (const attempt of [{ attempt_id: null }, {}]) {
    await patchState(fs, tree.rootDir, {
      current_task: { workflow_id: "outer", iteration: 3, ...attempt },
    });
    await assert.rejects(readSessionState(fs, tree.rootDir), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, file);
      assert.equal(error.path, "current_task.attempt_id");
      return true;
    });
  }
});

test("prune-raw --legacy-traces removes the traces of a stopped pre-versioned legacy session", async () => {
  const fs = await legacySession({ ...PRE_VERSIONED_STATE, status: "stopped" });
  const traces = `/repo/.loopy_loop/traces/${LEGACY_ID}`;
  const attempt = `${traces}/sessions/${LEGACY_ID}/attempts/a1b2c3d4e5f6`;
  await fs.mkdir(attempt, { recursive: true });
  await writeJson(fs, `${attempt}/trace_manifest.json`, {});
  const report = await pruneRaw(fs, "/repo/.loopy_loop", { legacyTraces: true });
  assert.deepEqual(report.skipped, []);
  assert.deepEqual(report.removed.map((entry) => [entry.kind, entry.path]), [
    ["legacy_traces", traces],
  ]);
});

test("updating a pre-versioned state writes schema_version 1; a change of version is refused", async () => {
  const fs = await legacySession(PRE_VERSIONED_STATE);
  const file = `${LEGACY_DIR}/state.json`;
  const updated = await updateSessionState(fs, LEGACY_DIR, (state) => {
    state.status = "stopped";
  }, { updatedAt: "2026-04-19T15:00:00Z" });
  assert.equal(updated.schema_version, 1);
  const written = await readJson(fs, file);
  assert.equal(written.schema_version, 1);
  assert.equal(Object.keys(written)[0], "schema_version");
  assert.equal(written.state_revision, 4);
  assert.equal(written.active_session_id, LEGACY_ID);
  const before = await fs.readFile(file);
  for (const change of [2, undefined]) {
    await assert.rejects(
      updateSessionState(fs, LEGACY_DIR, (state) => {
        if (change === undefined) delete state.schema_version;
        else state.schema_version = change;
      }, { updatedAt: "2026-04-19T15:00:01Z" }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, String(error));
        assert.equal(error.file, file);
        assert.equal(error.path, "schema_version");
        return true;
      },
    );
  }
  // A v2 state stays v2: dropping its version (which would read as v1) is refused too.
  const { fs: v2Fs, tree } = await mirror();
  await assert.rejects(
    updateSessionState(v2Fs, tree.rootDir, (state) => {
      delete state.schema_version;
    }, { updatedAt: "2026-04-19T15:00:01Z" }),
    (error: unknown) => error instanceof LayoutRecordError && error.path === "schema_version",
  );
  assert.deepEqual(await fs.readFile(file), before);
});

test("pruning one running session's legacy traces keeps its part of the traces tree, as its dry run says", async () => {
  const { fs, tree } = await mirror();
  const rootPart = `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}`;
  assert.equal((await fs.lstat(rootPart)).kind, "directory");
  const before = fs.snapshotTree(rootPart);
  // The root runs an attempt (as the fixture leaves it): its traces are being written. A dry
  // run says so too: it reports the same plan as the prune.
  const plan = await pruneRaw(fs, tree.loopyRoot, {
    legacyTraces: true,
    sessionId: MIRROR_ROOT_ID,
    dryRun: true,
  });
  assert.deepEqual(plan.removed.filter((entry) => entry.kind === "legacy_traces"), []);
  assert.equal(plan.skipped.find((skip) => skip.path === rootPart)?.reason, "running_attempt");
  const report = await pruneRaw(fs, tree.loopyRoot, {
    legacyTraces: true,
    sessionId: MIRROR_ROOT_ID,
  });
  assert.deepEqual(report.removed.filter((entry) => entry.kind === "legacy_traces"), []);
  assert.equal(report.skipped.find((skip) => skip.path === rootPart)?.reason, "running_attempt");
  assert.deepEqual(fs.snapshotTree(rootPart), before);
});
