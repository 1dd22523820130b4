// Eval acceptance at its edges: a git-after receipt that is absent or unreadable, a legacy state
// without seals accepting the same bytes again, a sidecar the state does not seal (valid and
// different, or damaged), a sealed acceptance's sidecar that is damaged or differs from its seal,
// and a damaged seal written into the state while the acceptance is verified.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  acceptEvalReceipt,
  type AttemptIdentity,
  evalSealKey,
  ImmutableArtifactError,
  LayoutRecordError,
  type SessionPaths,
} from "../layout.ts";
import { FsIoError } from "../src/port/errors.ts";
import {
  deterministic,
  evalAttempt,
  evalReceipt,
  newRepo,
  newRoot,
  patchState,
  readJson,
  unreadableAt,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const ATTEMPT: AttemptIdentity = { iteration: 26, workflowId: "outer", attemptId: "97521a5ed6b7" };
const BOUNDARY = { head: null, branch: null, dirty: null } as const;
const LATER = () => new Date("2026-04-21T00:00:00Z");

/** A root whose attempt 26 left a raw eval report, a git-after receipt and receipt `ev-1`. */
async function evalReady(): Promise<{ fs: MemoryFs; paths: SessionPaths; sessionId: string }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const { paths, sessionId } = root;
  await evalAttempt(fs, paths, sessionId, ATTEMPT, { failures: 0 }, BOUNDARY);
  await writeJson(
    fs,
    paths.evalReceipt("ev-1"),
    evalReceipt(sessionId, ATTEMPT.attemptId, { eval_id: "ev-1" }),
  );
  return { fs, paths, sessionId };
}

/** The `accepted_eval_seals` recorded in the session's state.json. */
async function sealsOf(fs: MemoryFs, paths: SessionPaths): Promise<Record<string, unknown>> {
  return (await readJson(fs, paths.stateJson)).accepted_eval_seals as Record<string, unknown>;
}

/** Asserts `error` is an `ImmutableArtifactError` of `file` at `path`. */
function immutable(file: string, path: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof ImmutableArtifactError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, path, error.message);
    return true;
  };
}

test("an eval receipt whose git-after receipt is absent is refused naming that field; an I/O error reading it propagates", async () => {
  const { fs, paths, sessionId } = await evalReady();
  const git = paths.attempt(26, "outer").gitReceipt("after", ATTEMPT.attemptId);
  const bytes = await fs.readFile(git);
  await fs.remove(git);
  let before = fs.snapshotTree("/");
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "ev-1", { sessionId, ...deterministic() }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, paths.evalReceipt("ev-1"));
      assert.equal(error.path, "git_receipt_ref");
      assert.match(error.message, /git-after receipt is absent/);
      return true;
    },
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  // The receipt is there but cannot be read: a storage fault, never taken for an absent receipt.
  await fs.writeFile(git, bytes);
  before = fs.snapshotTree("/");
  const failing = unreadableAt(fs, git);
  await assert.rejects(
    acceptEvalReceipt(failing, paths, "ev-1", { sessionId, ...deterministic() }),
    FsIoError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("in a legacy state without seals, accepting the same bytes again returns the sidecar as it is", async () => {
  const { fs, paths, sessionId } = await evalReady();
  await patchState(fs, paths.dir, { accepted_eval_seals: null });
  const first = await acceptEvalReceipt(fs, paths, "ev-1", { sessionId, ...deterministic() });
  const sidecar = paths.evalAcceptedSidecar("ev-1");
  const before = fs.snapshotTree("/");
  // Later, once the raw report is gone: the acceptance stands on its sidecar alone.
  await fs.remove(`${paths.dir}/raw/0026_outer`, { recursive: true });
  const again = await acceptEvalReceipt(fs, paths, "ev-1", { sessionId, now: LATER });
  assert.deepEqual(again, first);
  const after = fs.snapshotTree("/");
  assert.equal(
    after[sidecar.slice(1)],
    before[sidecar.slice(1)],
    "the sidecar keeps its bytes and its time",
  );
  assert.equal((await readJson(fs, paths.stateJson)).accepted_eval_seals, null);
});

test("a valid sidecar the state does not seal, saying something else, is refused naming the field", async () => {
  const { fs, paths, sessionId } = await evalReady();
  // Accepted once, then the seal dropped from state.json: the sidecar is what remains.
  await acceptEvalReceipt(fs, paths, "ev-1", { sessionId, ...deterministic() });
  const sidecar = paths.evalAcceptedSidecar("ev-1");
  const found = await readJson(fs, sidecar);
  await writeJson(fs, sidecar, { ...found, git_receipt_sha256: `sha256:${"0".repeat(64)}` });
  await patchState(fs, paths.dir, { accepted_eval_seals: {} });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    acceptEvalReceipt(fs, paths, "ev-1", { sessionId, now: LATER }),
    immutable(sidecar, "git_receipt_sha256"),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a sidecar the state does not seal that is no valid acceptance is replaced, and the acceptance sealed", async () => {
  const { fs, paths, sessionId } = await evalReady();
  const sidecar = paths.evalAcceptedSidecar("ev-1");
  await fs.mkdir(`${paths.dir}/eval_receipts/accepted`, { recursive: true });
  await writeText(fs, sidecar, '{"schema_version": 1, "eval_id": "ev-1"');
  const accepted = await acceptEvalReceipt(fs, paths, "ev-1", { sessionId, ...deterministic() });
  assert.deepEqual(await readJson(fs, sidecar), accepted);
  const seals = await sealsOf(fs, paths);
  assert.deepEqual(seals[evalSealKey("ev-1")], accepted);
});

test("a damaged sidecar of a sealed acceptance is written again from the seal", async () => {
  const { fs, paths, sessionId } = await evalReady();
  const first = await acceptEvalReceipt(fs, paths, "ev-1", { sessionId, ...deterministic() });
  const sidecar = paths.evalAcceptedSidecar("ev-1");
  const sealed = await fs.readFile(sidecar);
  await writeText(fs, sidecar, "{ damaged");
  const again = await acceptEvalReceipt(fs, paths, "ev-1", { sessionId, now: LATER });
  assert.deepEqual(again, first);
  assert.deepEqual(await fs.readFile(sidecar), sealed);
});

test("a damaged seal written into the state while an acceptance is verified is refused, never replaced", async () => {
  const { fs, paths, sessionId } = await evalReady();
  const key = evalSealKey("ev-1");
  const report = `${paths.dir}/raw/0026_outer/eval/report.json`;
  let planted = false;
  const view = hookedFs(fs, {
    async after(method, args) {
      // Once the state was read and the raw report is being checked, another writer seals the
      // same receipt with a record that is no acceptance.
      if (method === "lstat" && args[0] === report && !planted) {
        planted = true;
        await patchState(fs, paths.dir, { accepted_eval_seals: { [key]: { eval_id: "ev-1" } } });
      }
    },
  });
  await assert.rejects(
    acceptEvalReceipt(view, paths, "ev-1", { sessionId, ...deterministic() }),
    immutable(paths.stateJson, "accepted_eval_seals"),
  );
  assert.equal(planted, true);
  const seals = await sealsOf(fs, paths);
  assert.deepEqual(seals[key], { eval_id: "ev-1" });
  await assert.rejects(fs.lstat(paths.evalAcceptedSidecar("ev-1")), { code: "ENOENT" });
});

test("a sidecar of a sealed acceptance differing from its seal by a list's length or a key's name is written again", async () => {
  const { fs, paths, sessionId } = await evalReady();
  const first = await acceptEvalReceipt(fs, paths, "ev-1", { sessionId, ...deterministic() });
  const sidecar = paths.evalAcceptedSidecar("ev-1");
  const sealed = await fs.readFile(sidecar);
  const found = await readJson(fs, sidecar);
  const { accepted_at: _time, ...rest } = found;
  const damaged: [string, string][] = [
    ["a shorter list", JSON.stringify({ ...found, raw_report_refs: [] })],
    // As many keys, one of them not the seal's (named as an inherited property is named).
    ["another key", JSON.stringify({ ...rest, ["__proto__"]: {} })],
  ];
  assert.match(damaged[1]![1], /"__proto__":\{\}/);
  for (const [what, text] of damaged) {
    await writeText(fs, sidecar, text);
    const again = await acceptEvalReceipt(fs, paths, "ev-1", { sessionId, now: LATER });
    assert.deepEqual(again, first, what);
    assert.deepEqual(await fs.readFile(sidecar), sealed, what);
  }
});
