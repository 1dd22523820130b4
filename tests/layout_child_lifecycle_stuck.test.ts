// A parent's child lifecycle never gets stuck: an interrupted acceptance followed by a changed or
// vanished request, a rejection after an interrupted acceptance, two roots accepting at once, a
// very long pending file name, and a request id pending under another file name.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type MemoryFs, SimulatedCrash } from "../adapters/memory.ts";
import {
  ChildRequestError,
  listPendingChildRequests,
  loadSessionTree,
  processNextChildRequest,
  publishChildRequest,
  readChildrenLedger,
  SessionPaths,
  SessionStateError,
} from "../layout.ts";
import {
  childRequest,
  deterministic,
  newRepo,
  newRoot,
  readJson,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";
const paths = new SessionPaths(`/repo/.loopy_loop/sessions/${ROOT_ID}`, "folded");

async function processNext(fs: MemoryFs, expectedParentAttemptId?: string) {
  return await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    expectedParentAttemptId,
    ...deterministic(),
  });
}

/**
 * A repository whose root has `request` pending, after a processNextChildRequest that crashed
 * right after the fsync following the `nth` rename `isTarget` picks (everything synced before).
 */
async function interrupted(
  isTarget: (to: string) => boolean,
  nth: number,
  request = childRequest("phase-0"),
  expectedParentAttemptId?: string,
): Promise<MemoryFs> {
  const baseline = await newRepo();
  await newRoot(baseline);
  await publishChildRequest(baseline, paths, request);
  baseline.syncAll();
  baseline.resetCounter();
  const probe = baseline.clone();
  await processNext(probe, expectedParentAttemptId);
  const log = probe.operationLog;
  const renames = log.filter((e) => e.op === "rename" && isTarget(String(e.to ?? e.path)));
  const target = renames[nth];
  assert.ok(target !== undefined, "the crash point exists");
  const sync = log.slice(log.indexOf(target)).find((e) => e.op === "syncDir");
  assert.ok(sync !== undefined);
  const fs = baseline.clone();
  fs.crashAfter(sync.number);
  await assert.rejects(processNext(fs, expectedParentAttemptId), SimulatedCrash);
  return fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
}

const ledgerRename = (to: string) => /children\.json$/.test(to);

async function ledgerStatuses(fs: MemoryFs): Promise<[string, string][]> {
  const ledger = await readChildrenLedger(fs, paths, ROOT_ID);
  return ledger.children.map((c) => [c.session_id, c.status]);
}

for (const [where, nth] of [["dispatching", 0], ["running", 1]] as const) {
  test(`an interrupted acceptance (${where}) whose request was rewritten is abandoned, not stuck`, async () => {
    const fs = await interrupted(ledgerRename, nth);
    assert.deepEqual(await ledgerStatuses(fs), [["01_phase-0", where]]);
    assert.equal((await readJson(fs, paths.stateJson)).active_child_session_id, null);
    // The parent (not suspended) ran again and rewrote its request.
    await writeJson(
      fs,
      paths.pendingRequest("phase-0"),
      childRequest("phase-0", { goal: "Deliver phase-0, revised" }),
    );
    const rerun = await processNext(fs);
    assert.equal(rerun?.kind, "rejected");
    assert.deepEqual(await ledgerStatuses(fs), [["01_phase-0", "failed_dispatch"]]);
    await publishChildRequest(fs, paths, childRequest("phase-1"));
    const next = await processNext(fs);
    assert.equal(next?.kind, "accepted");
    assert.equal(next?.kind === "accepted" ? next.childSessionId : "", "02_phase-1");
  });

  test(`an interrupted acceptance (${where}) whose request vanished is abandoned, not stuck`, async () => {
    const fs = await interrupted(ledgerRename, nth);
    await fs.remove(paths.pendingRequest("phase-0"));
    await publishChildRequest(fs, paths, childRequest("phase-1"));
    const next = await processNext(fs);
    assert.equal(next?.kind === "accepted" ? next.childSessionId : next?.kind, "02_phase-1");
    assert.deepEqual(await ledgerStatuses(fs), [
      ["01_phase-0", "failed_dispatch"],
      ["02_phase-1", "running"],
    ]);
  });
}

test("an interrupted acceptance whose request became unparsable is abandoned, not stuck", async () => {
  const fs = await interrupted(ledgerRename, 0);
  await writeText(fs, paths.pendingRequest("phase-0"), "{not json");
  const rerun = await processNext(fs);
  assert.equal(rerun?.kind, "rejected");
  await publishChildRequest(fs, paths, childRequest("phase-1"));
  assert.equal((await processNext(fs))?.kind, "accepted");
  assert.deepEqual((await ledgerStatuses(fs))[0], ["01_phase-0", "failed_dispatch"]);
});

test("a live child the state names is never abandoned when its request is gone", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  await publishChildRequest(fs, paths, childRequest("phase-0"));
  assert.equal((await processNext(fs))?.kind, "accepted");
  await publishChildRequest(fs, paths, childRequest("phase-1"));
  await assert.rejects(processNext(fs), SessionStateError);
  assert.deepEqual(await ledgerStatuses(fs), [["01_phase-0", "running"]]);
  assert.equal((await readJson(fs, paths.stateJson)).active_child_session_id, "01_phase-0");
});

test("a rejection after an interrupted acceptance leaves the request id free", async () => {
  const request = childRequest("phase-0", { origin: { parent_attempt_id: "attempt000001" } });
  const fs = await interrupted(
    (to) => /accepted\/phase-0\.json$/.test(to),
    0,
    request,
    "attempt000001",
  );
  assert.ok((await fs.readFile(paths.acceptedRequest("phase-0"))).length > 0);
  assert.deepEqual(await ledgerStatuses(fs), []);
  // The parent ran another attempt meanwhile.
  const rerun = await processNext(fs, "attempt000002");
  assert.equal(rerun?.kind, "rejected");
  await assert.rejects(fs.readFile(paths.acceptedRequest("phase-0")));
  const again = childRequest("phase-0", { origin: { parent_attempt_id: "attempt000002" } });
  await publishChildRequest(fs, paths, again);
  const accepted = await processNext(fs, "attempt000002");
  assert.equal(accepted?.kind === "accepted" ? accepted.childSessionId : "", "01_phase-0");
});

test("two roots accepting the same request id at once get distinct child ids", async () => {
  const fs = await newRepo();
  const a = await newRoot(fs, "First goal");
  const b = await newRoot(fs, "Second goal");
  await publishChildRequest(fs, a.paths, childRequest("phase-1"));
  await publishChildRequest(fs, b.paths, childRequest("phase-1"));
  const run = (id: string) =>
    processNextChildRequest(fs, { repoRoot: "/repo", parentSessionId: id, ...deterministic() });
  const [ra, rb] = await Promise.all([run(a.sessionId), run(b.sessionId)]);
  const ids = [ra, rb].map((r) => r?.kind === "accepted" ? r.childSessionId : "");
  assert.notEqual(ids[0], ids[1]);
  await loadSessionTree(fs, "/repo", a.sessionId);
  await loadSessionTree(fs, "/repo", b.sessionId);
});

for (const valid of [true, false]) {
  test(`a ${valid ? "valid" : "invalid"} request under a 251-byte name does not block the queue`, async () => {
    const fs = await newRepo();
    await newRoot(fs);
    const name = `0${"a".repeat(245)}.json`;
    const file = `${paths.childRequestsPendingDir}/${name}`;
    if (valid) await writeJson(fs, file, childRequest("phase-0"));
    else await writeText(fs, file, "{not json");
    await publishChildRequest(fs, paths, childRequest("phase-1"));
    const first = await processNext(fs);
    assert.equal(first?.kind, valid ? "accepted" : "rejected");
    if (first?.kind === "rejected") {
      for (const f of [first.archivedFile, first.receiptFile]) {
        const base = f.slice(f.lastIndexOf("/") + 1);
        assert.ok(new TextEncoder().encode(base).length <= 255, base);
        assert.ok((await fs.readFile(f)).length > 0);
      }
      assert.equal(first.receipt.request_file, name);
      assert.equal((await processNext(fs))?.kind, "accepted");
    }
    assert.deepEqual(await listPendingChildRequests(fs, paths), valid ? ["phase-1.json"] : []);
  });
}

test("two long names sharing a prefix are archived apart, each under a stable name", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  const names = ["x", "y"].map((c) => `0${"a".repeat(230)}${c}${"b".repeat(10)}.json`);
  for (const name of names) {
    await writeText(fs, `${paths.childRequestsPendingDir}/${name}`, "{not json");
  }
  const first = await processNext(fs);
  const second = await processNext(fs);
  assert.ok(first?.kind === "rejected" && second?.kind === "rejected");
  assert.notEqual(first.archivedFile, second.archivedFile);
  assert.deepEqual([first.receipt.request_file, second.receipt.request_file], names);
});

test("a request id pending under another file name is refused by publishChildRequest", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  await writeJson(
    fs,
    `${paths.childRequestsPendingDir}/0-first.json`,
    childRequest("phase-0", { goal: "Agent's phase-0" }),
  );
  await assert.rejects(
    publishChildRequest(fs, paths, childRequest("phase-0", { goal: "Host's phase-0" })),
    ChildRequestError,
  );
  await assert.rejects(
    publishChildRequest(fs, paths, childRequest("phase-0", { goal: "Agent's phase-0" })),
    ChildRequestError,
  );
  assert.deepEqual(await listPendingChildRequests(fs, paths), ["0-first.json"]);
  // An unrelated or unparsable pending file does not get in the way.
  await writeText(fs, `${paths.childRequestsPendingDir}/junk.json`, "{not json");
  await publishChildRequest(fs, paths, childRequest("phase-1"));
});

test("a pending request reusing the running child's request id with another body is rejected; the child keeps running", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  await writeJson(fs, `${paths.childRequestsPendingDir}/a.json`, childRequest("phase-0"));
  await writeJson(
    fs,
    `${paths.childRequestsPendingDir}/b.json`,
    childRequest("phase-0", { goal: "Deliver phase-0 another way" }),
  );
  const first = await processNext(fs);
  assert.ok(first?.kind === "accepted");
  const second = await processNext(fs);
  assert.equal(second?.kind, "rejected");
  const ledger = await readChildrenLedger(fs, paths, ROOT_ID);
  assert.deepEqual(ledger.children.map((c) => [c.session_id, c.status]), [
    [first.childSessionId, "running"],
  ]);
  assert.equal((await readJson(fs, paths.stateJson)).active_child_session_id, first.childSessionId);
  assert.deepEqual(await listPendingChildRequests(fs, paths), []);
});

test("a child id another root's ledger records but has not published yet is not given to a new child", async () => {
  const base = await newRepo();
  const a = await newRoot(base, "First goal");
  const b = await newRoot(base, "Second goal");
  await publishChildRequest(base, a.paths, childRequest("phase-1"));
  const run = (fs: MemoryFs, id: string) =>
    processNextChildRequest(fs, { repoRoot: "/repo", parentSessionId: id, ...deterministic() });
  // Where A's acceptance builds its child's staging directory, once the ledger recorded the id.
  const probe = base.clone();
  probe.resetCounter();
  await run(probe, a.sessionId);
  const log = probe.operationLog;
  const recorded = log.findIndex((e) => e.op === "rename" && /children\.json$/.test(e.to ?? ""));
  const building = log.slice(recorded).find((e) => e.op === "mkdir" && /\.staging-/.test(e.path));
  assert.ok(recorded >= 0 && building !== undefined);
  const fs = base.clone();
  fs.resetCounter();
  fs.failAt(building.number, { ops: ["mkdir"] });
  await assert.rejects(run(fs, a.sessionId));
  fs.clearFaults();
  const aLedger = await readChildrenLedger(fs, a.paths, a.sessionId);
  assert.deepEqual(aLedger.children.map((c) => c.status), ["dispatching"]);
  await publishChildRequest(fs, b.paths, childRequest("phase-1"));
  const rb = await run(fs, b.sessionId);
  const ra = await run(fs, a.sessionId);
  assert.ok(rb?.kind === "accepted" && ra?.kind === "accepted");
  assert.equal(ra.childSessionId, aLedger.children[0]?.session_id);
  assert.notEqual(rb.childSessionId, ra.childSessionId);
  await loadSessionTree(fs, "/repo", a.sessionId);
  await loadSessionTree(fs, "/repo", b.sessionId);
});

test("pending requests are considered in code point order, as the engine sorts their paths", async () => {
  // UTF-16 order puts a character past U+FFFF (a surrogate pair) before U+FF01; code point order
  // (Python's `sorted()`) puts it after.
  const fs = await newRepo();
  await newRoot(fs);
  const names = ["\u{1F600}-emoji.json", "\uFF01-fullwidth.json", "b.json", "a.json"];
  for (const [i, name] of names.entries()) {
    await writeJson(fs, `${paths.childRequestsPendingDir}/${name}`, childRequest(`req-${i}`));
  }
  assert.deepEqual(await listPendingChildRequests(fs, paths), [
    "a.json",
    "b.json",
    "\uFF01-fullwidth.json",
    "\u{1F600}-emoji.json",
  ]);
  // Without the plain names, the fullwidth one is dispatched first.
  for (const name of ["a.json", "b.json"]) {
    await fs.remove(`${paths.childRequestsPendingDir}/${name}`);
  }
  const result = await processNext(fs);
  assert.ok(result !== undefined && result.kind === "accepted");
  assert.equal(result.requestId, "req-1");
  assert.deepEqual(await listPendingChildRequests(fs, paths), ["\u{1F600}-emoji.json"]);
});
