// What the layout writes stays where it belongs and stays what it was: ids are checked before
// anything is written, archived requests and their receipts are never overwritten, receipts and
// acceptance sidecars are written once, a folded outcome cites no mirror-only reference, and a
// finished (or sealed) attempt's result is final while a running mirror session still finishes.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  acceptEvalReceipt,
  type AttemptIdentity,
  createAttemptArtifacts,
  ImmutableArtifactError,
  LayoutError,
  LayoutRecordError,
  mirrorAttemptTraceDir,
  observeHandoff,
  openSessionPaths,
  parseRejectedRequestReceipt,
  parseSessionOutcome,
  processNextChildRequest,
  pruneRaw,
  readTraceRef,
  type SessionOutcomeInput,
  SessionPaths,
  sha256Ref,
  writeAttemptResult,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import {
  commitTerminalState,
  deterministic,
  evalReceipt,
  newRepo,
  newRoot,
  patchState,
  readJson,
  writeJson,
} from "./layout_fixtures.ts";
import { buildMirrorTree, MIRROR_ROOT_ID, ROOT_ATTEMPTS } from "./fixtures/mirror_tree.ts";

const ATTEMPT: AttemptIdentity = { iteration: 26, workflowId: "outer", attemptId: "97521a5ed6b7" };
const encoder = new TextEncoder();

async function setup(): Promise<{ fs: MemoryFs; paths: SessionPaths; sessionId: string }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  return { fs, paths: root.paths, sessionId: root.sessionId };
}

function recordError(path: string, file?: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.path, path, error.message);
    if (file !== undefined) assert.equal(error.file, file);
    return true;
  };
}

function immutable(file: string, path?: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof ImmutableArtifactError, String(error));
    assert.equal(error.file, file);
    if (path !== undefined) assert.equal(error.path, path, error.message);
    return true;
  };
}

// ---------------------------------------------------------------------------------------------
// 1. Ids are checked before anything is written

const HOSTILE_ATTEMPT_IDS = ["../../../../../../../escaped", "..", "a/b", "bad id", ""];

test("an attempt id that is not one safe component is refused before any attempt artifact is written", async () => {
  for (const attemptId of HOSTILE_ATTEMPT_IDS) {
    const { fs, paths } = await setup();
    const before = fs.snapshotTree("/");
    await assert.rejects(
      createAttemptArtifacts(fs, paths, { iteration: 1, workflowId: "outer", attemptId }, {
        prompt: "p",
        pathsMap: {},
        snapshot: { "assignment.json": { pwned: true } },
      }),
      recordError("attempt_id", paths.attempt(1, "outer").traceRefJson),
    );
    assert.deepEqual(fs.snapshotTree("/"), before, attemptId);
  }
});

test("a snapshot file name is checked before anything is written", async () => {
  const { fs, paths } = await setup();
  const before = fs.snapshotTree("/");
  await assert.rejects(
    createAttemptArtifacts(fs, paths, ATTEMPT, {
      prompt: "p",
      pathsMap: {},
      snapshot: { "ok.json": 1, "../escape": 2 },
    }),
    LayoutError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  // A safe name longer than a file name can be (255 bytes) is refused the same way, before the
  // attempt's files are written; one of 255 bytes is written.
  await assert.rejects(
    createAttemptArtifacts(fs, paths, ATTEMPT, {
      prompt: "p",
      pathsMap: {},
      snapshot: { "ok.json": 1, [`${"s".repeat(251)}.json`]: 2 },
    }),
    (error: unknown) => error instanceof LayoutError && /longer than 255 bytes/.test(error.message),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  const name = `${"s".repeat(250)}.json`;
  const created = await createAttemptArtifacts(fs, paths, ATTEMPT, {
    prompt: "p",
    pathsMap: {},
    snapshot: { [name]: 2 },
  });
  assert.equal(
    new TextDecoder().decode(
      await fs.readFile(`${created.paths.snapshotDir(ATTEMPT.attemptId)}/${name}`),
    )
      .trim(),
    "2",
  );
});

test("the trace_ref.json an attempt writes is one its own reader accepts", async () => {
  const { fs, paths } = await setup();
  const created = await createAttemptArtifacts(fs, paths, ATTEMPT, { prompt: "p", pathsMap: {} });
  assert.deepEqual(await readTraceRef(fs, created.paths), created.traceRef);
});

test("a git receipt with an invalid attempt id writes neither raw output nor a receipt", async () => {
  for (const attemptId of HOSTILE_ATTEMPT_IDS) {
    const { fs, paths, sessionId } = await setup();
    const before = fs.snapshotTree("/");
    await assert.rejects(
      writeGitReceipt(
        fs,
        paths,
        sessionId,
        { iteration: 3, workflowId: "outer", attemptId },
        "after",
        {
          head: null,
          branch: null,
          dirty: null,
          rawStatus: encoder.encode("{}\n"),
          rawDiff: encoder.encode("diff\n"),
        },
      ),
      LayoutError,
    );
    assert.deepEqual(fs.snapshotTree("/"), before, attemptId);
  }
});

test("a git receipt naming an invalid session id is refused before any write", async () => {
  const { fs, paths } = await setup();
  const before = fs.snapshotTree("/");
  await assert.rejects(
    writeGitReceipt(fs, paths, "../other", ATTEMPT, "after", {
      head: null,
      branch: null,
      dirty: null,
      rawStatus: encoder.encode("{}\n"),
    }),
    recordError("session_id"),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("every path helper that takes an id refuses one that is not a safe component", () => {
  const folded = new SessionPaths("/repo/.loopy_loop/sessions/001_a", "folded");
  const mirror = new SessionPaths("/repo/.loopy_loop/sessions/001_a", "mirror");
  const attempt = folded.attempt(1, "outer");
  for (const bad of ["..", "../x", "a/b", "", "."]) {
    assert.throws(() => attempt.snapshotDir(bad), LayoutError, `snapshotDir ${bad}`);
    assert.throws(() => attempt.rawSubarea(bad), LayoutError, `rawSubarea ${bad}`);
    assert.throws(() => attempt.gitReceipt("after", bad), LayoutError, `folded gitReceipt ${bad}`);
    assert.throws(
      () => mirror.attempt(1, "outer").gitReceipt("after", bad),
      LayoutError,
      `mirror gitReceipt ${bad}`,
    );
    assert.throws(() => mirrorAttemptTraceDir("/repo", bad, "s", "a"), LayoutError);
    assert.throws(() => mirrorAttemptTraceDir("/repo", "r", bad, "a"), LayoutError);
    assert.throws(() => mirrorAttemptTraceDir("/repo", "r", "s", bad), LayoutError);
  }
});

// ---------------------------------------------------------------------------------------------
// 4. Rejected requests and their receipts are never overwritten

async function reject(fs: MemoryFs, sessionId: string) {
  const result = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: sessionId,
    ...deterministic(),
  });
  assert.equal(result?.kind, "rejected");
  return result;
}

/** Every archived request in rejected/ has exactly one receipt naming it with its hash. */
async function assertArchive(fs: MemoryFs, paths: SessionPaths, originals: Uint8Array[]) {
  const names = (await fs.readDir(paths.childRequestsRejectedDir)).map((entry) => entry.name);
  const receipts = names.filter((name) => name.endsWith(".receipt.json"));
  const archived = names.filter((name) => !name.endsWith(".receipt.json"));
  assert.equal(receipts.length, archived.length, names.join(", "));
  const hashes = originals.map((bytes) => sha256Ref(bytes)).sort();
  const seen: string[] = [];
  for (const name of archived) {
    const file = `${paths.childRequestsRejectedDir}/${name}`;
    const receipt = parseRejectedRequestReceipt(
      await readJson(fs, `${file}.receipt.json`),
      `${file}.receipt.json`,
    );
    assert.equal(receipt.archived_file, name);
    assert.equal(receipt.original_sha256, sha256Ref(await fs.readFile(file)), name);
    seen.push(receipt.original_sha256);
  }
  assert.deepEqual(seen.sort(), hashes);
}

test("a rejection never overwrites an archived request named like a receipt", async () => {
  const { fs, paths, sessionId } = await setup();
  const first = encoder.encode('{"first request": "original bytes, invalid"}');
  const second = encoder.encode('{"second": true}');
  await fs.writeFile(`${paths.childRequestsPendingDir}/a.json.receipt.json`, first);
  const one = await reject(fs, sessionId);
  // An archive name never ends with .receipt.json, so it can never take a receipt's name.
  assert.ok(one?.kind === "rejected" && !one.archivedFile.endsWith(".receipt.json"));
  assert.deepEqual(await fs.readFile(one.archivedFile), first);
  await fs.writeFile(`${paths.childRequestsPendingDir}/a.json`, second);
  const two = await reject(fs, sessionId);
  assert.ok(two?.kind === "rejected");
  assert.deepEqual(await fs.readFile(one.archivedFile), first);
  assert.deepEqual(await fs.readFile(two.archivedFile), second);
  await assertArchive(fs, paths, [first, second]);
});

test("a rejection picks a name whose archive and receipt are both free", async () => {
  const { fs, paths, sessionId } = await setup();
  // Left by an older version: an archived request under a receipt's name, and a stray receipt.
  const planted = encoder.encode('{"planted": "archived request"}');
  const stray = encoder.encode('{"stray": "receipt"}');
  await fs.writeFile(`${paths.childRequestsRejectedDir}/a.json.receipt.json`, planted);
  const bytes = encoder.encode('{"not": "a request"}');
  const hex = sha256Ref(bytes).slice(7, 15);
  await fs.writeFile(`${paths.childRequestsRejectedDir}/a.${hex}.json.receipt.json`, stray);
  await fs.writeFile(`${paths.childRequestsPendingDir}/a.json`, bytes);
  const result = await reject(fs, sessionId);
  assert.ok(result?.kind === "rejected");
  assert.equal(result.archivedFile, `${paths.childRequestsRejectedDir}/a.${hex}-2.json`);
  assert.deepEqual(
    await fs.readFile(`${paths.childRequestsRejectedDir}/a.json.receipt.json`),
    planted,
  );
  assert.deepEqual(
    await fs.readFile(`${paths.childRequestsRejectedDir}/a.${hex}.json.receipt.json`),
    stray,
  );
  assert.deepEqual(await fs.readFile(result.archivedFile), bytes);
  assert.equal((await readJson(fs, result.receiptFile)).original_sha256, sha256Ref(bytes));
});

test("a receipt left by an interrupted rejection of the same request is reused, not rewritten", async () => {
  const { fs, paths, sessionId } = await setup();
  const bytes = encoder.encode("{torn json");
  await fs.writeFile(`${paths.childRequestsPendingDir}/a.json`, bytes);
  // The reason this request is rejected for (found on a copy of the repository).
  const probe = await reject(fs.clone(), sessionId);
  assert.ok(probe?.kind === "rejected");
  const receiptFile = `${paths.childRequestsRejectedDir}/a.json.receipt.json`;
  const leftover = {
    schema_version: 1,
    kind: "child_request_rejected",
    request_file: "a.json",
    archived_file: "a.json",
    request_id: null,
    original_sha256: sha256Ref(bytes),
    reason: probe.receipt.reason,
    field: probe.receipt.field,
    rejected_at: "2026-04-19T10:00:00Z",
  };
  await writeJson(fs, receiptFile, leftover);
  const before = await fs.readFile(receiptFile);
  const result = await reject(fs, sessionId);
  assert.ok(result?.kind === "rejected");
  assert.equal(result.archivedFile, `${paths.childRequestsRejectedDir}/a.json`);
  assert.deepEqual(await fs.readFile(receiptFile), before);
  assert.deepEqual(result.receipt, leftover);
});

test("a leftover receipt of the same request that gives another reason is replaced by the rerun's", async () => {
  const { fs, paths, sessionId } = await setup();
  // An interrupted rejection (e.g. against the parent's previous attempt) wrote its receipt;
  // the request is still pending, and the rerun rejects it for another reason.
  const bytes = encoder.encode(JSON.stringify({
    schema_version: 3,
    request_id: "phase-0",
    goal: "Deliver phase-0",
    origin: { parent_attempt_id: "attempt000001" },
  }));
  await fs.writeFile(`${paths.childRequestsPendingDir}/phase-0.json`, bytes);
  const receiptFile = `${paths.childRequestsRejectedDir}/phase-0.json.receipt.json`;
  const stale = {
    schema_version: 1,
    kind: "child_request_rejected",
    request_file: "phase-0.json",
    archived_file: "phase-0.json",
    request_id: "phase-0",
    original_sha256: sha256Ref(bytes),
    reason: "origin.parent_attempt_id is not the parent's latest successful attempt (attemptAAAA)",
    field: "origin.parent_attempt_id",
    rejected_at: "2026-04-19T10:00:00Z",
  };
  for (
    const [leftover, expectedParentAttemptId, field] of [
      // Another reason for the same field ...
      [stale, "attemptBBBB", "origin.parent_attempt_id"],
      // ... and another field.
      [stale, undefined, "workflow_set"],
    ] as const
  ) {
    const copy = fs.clone();
    await writeJson(copy, receiptFile, leftover);
    const result = await processNextChildRequest(copy, {
      repoRoot: "/repo",
      parentSessionId: sessionId,
      expectedParentAttemptId,
      resolveWorkflow: field === "workflow_set" ? () => undefined : undefined,
      ...deterministic(),
    });
    assert.ok(result?.kind === "rejected");
    assert.equal(result.archivedFile, `${paths.childRequestsRejectedDir}/phase-0.json`);
    assert.equal(result.receiptFile, receiptFile);
    assert.equal(result.receipt.field, field);
    if (field === "origin.parent_attempt_id") assert.match(result.receipt.reason, /attemptBBBB/);
    assert.notEqual(result.receipt.reason, stale.reason);
    // The receipt on disk is the rerun's, and it is the only one.
    assert.deepEqual(
      parseRejectedRequestReceipt(await readJson(copy, receiptFile), receiptFile),
      result.receipt,
    );
    await assertArchive(copy, paths, [bytes]);
  }
});

test("a leftover receipt of a request the rerun accepts is removed before the acceptance commits", async () => {
  const { fs, paths, sessionId } = await setup();
  const bytes = encoder.encode(JSON.stringify({
    schema_version: 3,
    request_id: "phase-0",
    goal: "Deliver phase-0",
    origin: { parent_attempt_id: "attempt000001" },
  }));
  await fs.writeFile(`${paths.childRequestsPendingDir}/phase-0.json`, bytes);
  const receipt = (archived: string) => ({
    schema_version: 1,
    kind: "child_request_rejected",
    request_file: "phase-0.json",
    archived_file: archived,
    request_id: "phase-0",
    original_sha256: sha256Ref(bytes),
    reason: "origin.parent_attempt_id is not the parent's latest successful attempt (attemptAAAA)",
    field: "origin.parent_attempt_id",
    rejected_at: "2026-04-19T10:00:00Z",
  });
  // Another request's archive and receipt take the first slot; the interrupted rejection of
  // this one wrote its receipt in the second.
  const hex = sha256Ref(bytes).slice(7, 15);
  const dir = paths.childRequestsRejectedDir;
  await fs.writeFile(`${dir}/phase-0.json`, encoder.encode("{}"));
  await writeJson(fs, `${dir}/phase-0.json.receipt.json`, {
    ...receipt("phase-0.json"),
    original_sha256: sha256Ref(encoder.encode("{}")),
  });
  const before = await fs.readFile(`${dir}/phase-0.json.receipt.json`);
  await writeJson(fs, `${dir}/phase-0.${hex}.json.receipt.json`, receipt(`phase-0.${hex}.json`));
  const result = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: sessionId,
    expectedParentAttemptId: "attempt000001",
    ...deterministic(),
  });
  assert.equal(result?.kind, "accepted");
  assert.deepEqual((await fs.readDir(dir)).map((entry) => entry.name), [
    "phase-0.json",
    "phase-0.json.receipt.json",
  ]);
  assert.deepEqual(await fs.readFile(`${dir}/phase-0.json.receipt.json`), before);
});

// ---------------------------------------------------------------------------------------------
// 5. Git receipts and eval acceptance sidecars are written once

const BOUNDARY = { head: "c0ffee", branch: "main", dirty: false } as const;

test("a git receipt is never rewritten for another attempt or with other contents", async () => {
  const { fs, paths, sessionId } = await setup();
  const written = await writeGitReceipt(fs, paths, sessionId, ATTEMPT, "after", {
    ...BOUNDARY,
    rawDiff: encoder.encode("diff 1\n"),
  }, deterministic());
  const bytes = await fs.readFile(written.file);
  const diff = `${paths.dir}/raw/0026_outer/git/after-diff.patch`;
  // The same receipt again (a rerun, at another time) changes nothing and returns the original.
  const later = { ...deterministic(), now: () => new Date("2026-04-20T00:00:00Z") };
  const again = await writeGitReceipt(fs, paths, sessionId, ATTEMPT, "after", {
    ...BOUNDARY,
    rawDiff: encoder.encode("diff 1\n"),
  }, later);
  assert.deepEqual(again.receipt, written.receipt);
  assert.deepEqual(await fs.readFile(written.file), bytes);
  // Another attempt of the same iteration, or other contents: refused, nothing rewritten.
  await assert.rejects(
    writeGitReceipt(fs, paths, sessionId, { ...ATTEMPT, attemptId: "ffffffffffff" }, "after", {
      ...BOUNDARY,
      rawDiff: encoder.encode("diff 2\n"),
    }),
    immutable(written.file, "attempt_id"),
  );
  await assert.rejects(
    writeGitReceipt(fs, paths, sessionId, ATTEMPT, "after", { ...BOUNDARY, dirty: true }),
    immutable(written.file, "dirty"),
  );
  assert.deepEqual(await fs.readFile(written.file), bytes);
  assert.equal(new TextDecoder().decode(await fs.readFile(diff)), "diff 1\n");
});

async function evalReady(): Promise<{ fs: MemoryFs; paths: SessionPaths; sessionId: string }> {
  const ready = await setup();
  const { fs, paths, sessionId } = ready;
  await createAttemptArtifacts(fs, paths, ATTEMPT, { prompt: "p", pathsMap: {} });
  await writeJson(fs, `${paths.dir}/raw/0026_outer/eval/report.json`, { failures: 3 });
  await writeGitReceipt(fs, paths, sessionId, ATTEMPT, "after", BOUNDARY);
  return ready;
}

async function writeEvalReceipt(
  fs: MemoryFs,
  paths: SessionPaths,
  sessionId: string,
  verdict: string,
  attemptId = ATTEMPT.attemptId,
): Promise<void> {
  await writeJson(
    fs,
    paths.evalReceipt("ev-1"),
    evalReceipt(sessionId, attemptId, { eval_id: "ev-1", verdict }),
  );
}

test("an accepted eval receipt edited afterwards is not accepted again; the sidecar never changes", async () => {
  const { fs, paths, sessionId } = await evalReady();
  await writeEvalReceipt(fs, paths, sessionId, "fail");
  const options = { sessionId, currentAttempt: ATTEMPT, ...deterministic() };
  const first = await acceptEvalReceipt(fs, paths, "ev-1", options);
  const sidecar = paths.evalAcceptedSidecar("ev-1");
  const sealed = await fs.readFile(sidecar);
  // Accepting the same bytes again returns the same acceptance, even once the attempt finished.
  const later = { sessionId, ...deterministic(), now: () => new Date("2026-04-21T00:00:00Z") };
  assert.deepEqual(await acceptEvalReceipt(fs, paths, "ev-1", later), first);
  await writeEvalReceipt(fs, paths, sessionId, "pass");
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "ev-1", options),
    immutable(sidecar, "receipt_sha256"),
  );
  assert.deepEqual(await fs.readFile(sidecar), sealed);
});

test("re-accepting an accepted eval receipt after prune-raw removed the raw report returns the sidecar", async () => {
  const { fs, paths, sessionId } = await evalReady();
  await writeEvalReceipt(fs, paths, sessionId, "pass");
  const options = { sessionId, currentAttempt: ATTEMPT, ...deterministic() };
  const first = await acceptEvalReceipt(fs, paths, "ev-1", options);
  const sidecar = paths.evalAcceptedSidecar("ev-1");
  const sealed = await fs.readFile(sidecar);
  // The attempt finished; prune-raw removes its raw output (the report the receipt cites).
  await patchState(fs, paths.dir, { current_task: null });
  const pruned = await pruneRaw(fs, "/repo/.loopy_loop");
  assert.deepEqual(pruned.removed.map((entry) => entry.path), [`${paths.dir}/raw/0026_outer`]);
  // The same bytes again (an engine rerun after a crash): the existing acceptance, unchanged.
  const later = { sessionId, ...deterministic(), now: () => new Date("2026-04-21T00:00:00Z") };
  assert.deepEqual(await acceptEvalReceipt(fs, paths, "ev-1", later), first);
  assert.deepEqual(await fs.readFile(sidecar), sealed);
  // An edited receipt is still refused as an edit of an accepted receipt (not for the raw
  // report prune-raw removed), and the sidecar keeps its bytes.
  await writeEvalReceipt(fs, paths, sessionId, "fail");
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "ev-1", later),
    immutable(sidecar, "receipt_sha256"),
  );
  assert.deepEqual(await fs.readFile(sidecar), sealed);
});

test("with the current attempt given, a receipt of another attempt is refused before any write", async () => {
  const { fs, paths, sessionId } = await evalReady();
  await writeEvalReceipt(fs, paths, sessionId, "pass");
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "ev-1", {
      sessionId,
      currentAttempt: { ...ATTEMPT, attemptId: "0123456789ab", iteration: 27 },
    }),
    recordError("producer.attempt_id", paths.evalReceipt("ev-1")),
  );
  await assert.rejects(fs.lstat(paths.evalAcceptedSidecar("ev-1")), { code: "ENOENT" });
});

// ---------------------------------------------------------------------------------------------
// 7. A folded outcome cites no trace: reference and no folded session's delivery_receipts/

function outcomeInput(sessionId: string, goalSha256: string): SessionOutcomeInput {
  return {
    sessionId,
    rootSessionId: sessionId,
    goalSha256,
    terminalStatus: "failed",
    stopReason: "max_turns",
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:00Z",
    handoff: {
      status: "missing",
      handoff: undefined,
      sha256: null,
      revision: null,
      diagnosis: "x",
    },
  };
}

test("a folded session_outcome.json refuses trace: refs and delivery_receipts/ refs", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const id = root.sessionId;
  const base = outcomeInput(id, root.manifest.goal_hash);
  await commitTerminalState(fs, root.dir, "failed", 3, "2026-04-19T15:00:00Z");
  const refused: [Partial<SessionOutcomeInput>, string][] = [
    [{ evidenceRefs: ["trace:trace-97521a5ed6b7:/eval/report.json"] }, "evidence_refs[0]"],
    [
      { evalRefs: ["session:/eval_receipts/a.json", "trace:t-1:/eval/report.json"] },
      "eval_refs[1]",
    ],
    [{ deliveryRefs: [`session:${id}:/delivery_receipts/delivery-1.json`] }, "delivery_refs[0]"],
    [{ deliveryRefs: ["session:/delivery_receipts/delivery-1.json"] }, "delivery_refs[0]"],
    [{ deliveryRefs: ["root:/delivery_receipts/d.json"] }, "delivery_refs[0]"],
    [{ deliveryRefs: ["session:/delivery_receipts"] }, "delivery_refs[0]"],
    [
      { deliveryRefs: [`repo:/.loopy_loop/sessions/${id}/delivery_receipts/d.json`] },
      "delivery_refs[0]",
    ],
    [
      { evidenceRefs: [`repo:/.loopy_loop/traces/${id}/sessions/${id}/attempts/a/x.json`] },
      "evidence_refs[0]",
    ],
  ];
  for (const [override, path] of refused) {
    await assert.rejects(
      writeSessionOutcome(fs, root.paths, { ...base, ...override }),
      recordError(path, root.paths.sessionOutcomeJson),
    );
    await assert.rejects(fs.lstat(root.paths.sessionOutcomeJson), { code: "ENOENT" });
  }
  const written = await writeSessionOutcome(fs, root.paths, {
    ...base,
    evidenceRefs: ["session:/raw/0001_outer/eval/report.json", "repo:/docs/delivery_receipts.md"],
    deliveryRefs: ["session:/receipts/delivery-1.json"],
  });
  assert.deepEqual(written.delivery_refs, ["session:/receipts/delivery-1.json"]);
  // The same references are a mirror session's own. Reading never judges what a record cites:
  // the engine itself writes delivery_receipts/ references in folded sessions.
  const mirrorOutcome = { ...(await readJson(fs, root.paths.sessionOutcomeJson)) };
  mirrorOutcome.evidence_refs = ["trace:trace-97521a5ed6b7:/eval/report.json"];
  mirrorOutcome.delivery_refs = ["session:/delivery_receipts/d.json"];
  parseSessionOutcome(mirrorOutcome, "session_outcome.json", "mirror");
  assert.deepEqual(
    parseSessionOutcome(mirrorOutcome, "session_outcome.json", "folded").delivery_refs,
    ["session:/delivery_receipts/d.json"],
  );
});

test("session_outcome.json's eval_refs add the keys of the eval seals state.json records, each once", async () => {
  const { fs, paths, sessionId } = await evalReady();
  await writeEvalReceipt(fs, paths, sessionId, "pass");
  await acceptEvalReceipt(fs, paths, "ev-1", {
    sessionId,
    currentAttempt: ATTEMPT,
    ...deterministic(),
  });
  const key = "session:/eval_receipts/ev-1.json";
  const seals = (await readJson(fs, paths.stateJson)).accepted_eval_seals as object;
  assert.deepEqual(Object.keys(seals), [key]);
  await commitTerminalState(fs, paths.dir, "failed", 3, "2026-04-19T15:00:00Z");
  const manifest = await readJson(fs, `${paths.dir}/session.json`);
  const input = {
    ...outcomeInput(sessionId, String(manifest.goal_hash)),
    evalRefs: ["session:/eval_receipts/ev-0.json", key],
  };
  const written = await writeSessionOutcome(fs, paths, input);
  assert.deepEqual(written.eval_refs, ["session:/eval_receipts/ev-0.json", key]);
  // Not cited: the sealed key is still there, after what is cited.
  const fresh = await evalReady();
  await writeEvalReceipt(fresh.fs, fresh.paths, fresh.sessionId, "pass");
  await acceptEvalReceipt(fresh.fs, fresh.paths, "ev-1", {
    sessionId: fresh.sessionId,
    currentAttempt: ATTEMPT,
    ...deterministic(),
  });
  await commitTerminalState(fresh.fs, fresh.paths.dir, "failed", 3, "2026-04-19T15:00:00Z");
  const goal = String((await readJson(fresh.fs, `${fresh.paths.dir}/session.json`)).goal_hash);
  const plain = outcomeInput(fresh.sessionId, goal);
  const outcome = await writeSessionOutcome(fresh.fs, fresh.paths, plain);
  assert.deepEqual(outcome.eval_refs, [key]);
  const file = fresh.paths.sessionOutcomeJson;
  assert.deepEqual((await readJson(fresh.fs, file)).eval_refs, [key]);
  // A rerun with the same input finds the same outcome.
  const bytes = await fresh.fs.readFile(file);
  assert.deepEqual(await writeSessionOutcome(fresh.fs, fresh.paths, plain), outcome);
  assert.deepEqual(await fresh.fs.readFile(file), bytes);
});

// ---------------------------------------------------------------------------------------------
// 9. Results are final once an attempt finished (or its trace is sealed); mirror sessions finish

test("a finished attempt's result.json is final; the running attempt's may be rewritten", async () => {
  const { fs, paths } = await setup();
  const created = await createAttemptArtifacts(fs, paths, ATTEMPT, { prompt: "p", pathsMap: {} });
  await patchState(fs, paths.dir, {
    current_task: { workflow_id: "outer", iteration: 26, attempt_id: ATTEMPT.attemptId },
  });
  await writeAttemptResult(fs, created.paths, { status: "running" });
  await writeAttemptResult(fs, created.paths, { status: "succeeded" });
  await patchState(fs, paths.dir, { current_task: null });
  // The same result again is fine; another one is refused and the file keeps its bytes.
  await writeAttemptResult(fs, created.paths, { status: "succeeded" });
  await assert.rejects(
    writeAttemptResult(fs, created.paths, { status: "failed" }),
    immutable(created.paths.resultJson),
  );
  assert.deepEqual(await readJson(fs, created.paths.resultJson), { status: "succeeded" });
  // A result that is not a JSON object is refused before anything is written.
  await assert.rejects(
    writeAttemptResult(fs, paths.attempt(27, "outer"), [1, 2] as never),
    recordError(""),
  );
});

test("a sealed mirror attempt's result.json is final; a running mirror session still finishes", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const paths = await openSessionPaths(fs, tree.rootDir);
  assert.equal(paths.layout, "mirror");
  const sealed = paths.attempt(ROOT_ATTEMPTS.first.iteration, ROOT_ATTEMPTS.first.workflowId);
  const before = await fs.readFile(sealed.resultJson);
  await assert.rejects(writeAttemptResult(fs, sealed, { ok: true }), immutable(sealed.resultJson));
  assert.deepEqual(await fs.readFile(sealed.resultJson), before);
  // Sealed stays final even if the state (wrongly) names the attempt as running.
  await patchState(fs, tree.rootDir, {
    current_task: {
      workflow_id: "outer",
      iteration: ROOT_ATTEMPTS.first.iteration,
      attempt_id: ROOT_ATTEMPTS.first.attemptId,
    },
  });
  await assert.rejects(writeAttemptResult(fs, sealed, { ok: true }), immutable(sealed.resultJson));
  // The running (unsealed) attempt writes its result under its own layout.
  await patchState(fs, tree.rootDir, {
    current_task: {
      workflow_id: "outer",
      iteration: ROOT_ATTEMPTS.active.iteration,
      attempt_id: ROOT_ATTEMPTS.active.attemptId,
    },
  });
  const active = paths.attempt(ROOT_ATTEMPTS.active.iteration, ROOT_ATTEMPTS.active.workflowId);
  await writeAttemptResult(fs, active, { status: "succeeded" });
  assert.deepEqual(await readJson(fs, active.resultJson), { status: "succeeded" });
});

test("a mirror session's outcome references the seal receipts in its trace_seals/", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const paths = await openSessionPaths(fs, tree.rootDir);
  const goal = String((await readJson(fs, paths.sessionJson)).goal_hash);
  // A legacy state records no terminal revision or time: only its status is compared.
  await patchState(fs, paths.dir, { status: "failed", current_task: null });
  const outcome = await writeSessionOutcome(fs, paths, {
    ...outcomeInput(MIRROR_ROOT_ID, goal),
    handoff: await observeHandoff(fs, paths, {
      sessionId: MIRROR_ROOT_ID,
      goalSha256: goal,
      storedRevision: 0,
      storedSha256: null,
    }),
  });
  const expected = [ROOT_ATTEMPTS.first.attemptId, ROOT_ATTEMPTS.second.attemptId].sort().map((
    id,
  ) => `session:/trace_seals/${id}.json`);
  assert.deepEqual(outcome.trace_seal_refs, expected);
  assert.deepEqual((await readJson(fs, paths.sessionOutcomeJson)).trace_seal_refs, expected);
  const bad = { ...(await readJson(fs, paths.sessionOutcomeJson)) };
  bad.trace_seal_refs = ["session:/trace_seals/../x.json"];
  assert.throws(
    () => parseSessionOutcome(bad, "session_outcome.json", "mirror"),
    recordError("trace_seal_refs[0]"),
  );
});

test("a git receipt rewritten with another head, branch or raw output is refused at that field", async () => {
  const cases: [Partial<Parameters<typeof writeGitReceipt>[5]>, string][] = [
    [{ head: "deadbeef" }, "head"],
    [{ branch: "release" }, "branch"],
    [{ head: null }, "head"],
    [{ rawStatus: encoder.encode('{"path":"b.ts"}\n') }, "raw_status_ref"],
  ];
  for (const [change, field] of cases) {
    const { fs, paths, sessionId } = await setup();
    const written = await writeGitReceipt(fs, paths, sessionId, ATTEMPT, "after", BOUNDARY);
    const bytes = await fs.readFile(written.file);
    await assert.rejects(
      writeGitReceipt(fs, paths, sessionId, ATTEMPT, "after", { ...BOUNDARY, ...change }),
      immutable(written.file, field),
    );
    assert.deepEqual(await fs.readFile(written.file), bytes, field);
  }
});

test("with the current attempt given, a receipt naming its attempt id at another iteration or workflow is refused", async () => {
  const cases: [Partial<AttemptIdentity>, string][] = [
    [{ iteration: 27 }, "producer.iteration"],
    [{ workflowId: "inner" }, "producer.workflow_id"],
  ];
  for (const [change, field] of cases) {
    const { fs, paths, sessionId } = await evalReady();
    await writeEvalReceipt(fs, paths, sessionId, "pass");
    const before = fs.snapshotTree();
    await assert.rejects(
      acceptEvalReceipt(fs, paths, "ev-1", {
        sessionId,
        currentAttempt: { ...ATTEMPT, ...change },
        ...deterministic(),
      }),
      recordError(field, paths.evalReceipt("ev-1")),
    );
    assert.deepEqual(fs.snapshotTree(), before, field);
  }
});
