// A layout call that fails after its rename but before its directory's fsync leaves its record
// visible but not durable. The host reruns it (as the fault tests say to); the rerun finds the
// record in place and returns it. These tests hold that the rerun makes the record durable before
// it resolves: a power loss right after it never takes back what it reported as written.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  type AttemptIdentity,
  createAttemptArtifacts,
  ensureRepository,
  loadSessionTree,
  observeHandoff,
  processNextChildRequest,
  publishChildRequest,
  writeAttemptResult,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import {
  childRequest,
  commitTerminalState,
  deterministic,
  newRepo,
  newRoot,
} from "./layout_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const ATTEMPT: AttemptIdentity = { iteration: 26, workflowId: "outer", attemptId: "97521a5ed6b7" };

/**
 * `memory` with the next fsync of directory `dir` failing with EIO (once), after the rename it
 * would have made durable; `failed()` says whether it came.
 */
function failingDirSync(
  memory: MemoryFs,
  dir: string,
): { readonly fs: FileSystem; readonly failed: () => boolean } {
  let failed = false;
  const fs = hookedFs(memory, {
    before(method, args) {
      if (method === "syncDir" && args[0] === dir && !failed) {
        failed = true;
        throw new FsIoError("EIO", "fsync", dir, "Input/output error (injected)");
      }
    },
  });
  return { fs, failed: () => failed };
}

/** The bytes of `path` after a power loss (strictly the durable state), or undefined. */
async function afterPowerLoss(memory: MemoryFs, path: string): Promise<string | undefined> {
  const crashed = memory.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
  try {
    return new TextDecoder().decode(await crashed.readFile(path));
  } catch {
    return undefined;
  }
}

/**
 * Runs `call` through a port whose fsync of `dir` fails once, expects it to fail, reruns it on
 * the same port, and returns the rerun's result.
 */
async function failThenRerun<T>(
  memory: MemoryFs,
  dir: string,
  call: (fs: FileSystem) => Promise<T>,
): Promise<T> {
  const { fs, failed } = failingDirSync(memory, dir);
  await assert.rejects(call(fs), (error: unknown) => error instanceof FsIoError);
  assert.ok(failed(), `no fsync of ${dir} was made`);
  return await call(fs);
}

test("a rerun result.json is durable once the rerun resolves", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory);
  const { paths } = await createAttemptArtifacts(memory, root.paths, ATTEMPT, {
    prompt: "p",
    pathsMap: {},
  });
  memory.syncAll();
  const result = { status: "completed", exit_code: 0 };
  const file = paths.resultJson;
  await failThenRerun(
    memory,
    file.slice(0, file.lastIndexOf("/")),
    (fs) => writeAttemptResult(fs, paths, result),
  );
  assert.deepEqual(JSON.parse((await afterPowerLoss(memory, file)) ?? "null"), result);
});

test("a rerun attempt's frozen snapshot is durable once the rerun resolves", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory);
  memory.syncAll();
  const options = { prompt: "p", pathsMap: {}, snapshot: { "assignment.json": { a: 1 } } };
  const snapshotDir = root.paths.attempt(ATTEMPT.iteration, ATTEMPT.workflowId)
    .snapshotDir(ATTEMPT.attemptId);
  await failThenRerun(
    memory,
    snapshotDir,
    (fs) => createAttemptArtifacts(fs, root.paths, ATTEMPT, options),
  );
  const frozen = await afterPowerLoss(memory, `${snapshotDir}/assignment.json`);
  assert.deepEqual(JSON.parse(frozen ?? "null"), { a: 1 });
});

test("a rerun git receipt, repository.json and session outcome are durable once the rerun resolves", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory);
  await createAttemptArtifacts(memory, root.paths, ATTEMPT, { prompt: "p", pathsMap: {} });
  memory.syncAll();
  const boundary = { head: "c0ffee", branch: "main", dirty: false };
  const receipt = await failThenRerun(
    memory,
    `${root.dir}/receipts`,
    (fs) => writeGitReceipt(fs, root.paths, root.sessionId, ATTEMPT, "after", boundary),
  );
  assert.equal(JSON.parse((await afterPowerLoss(memory, receipt.file)) ?? "null")?.head, "c0ffee");

  const handoff = await observeHandoff(memory, root.paths, {
    sessionId: root.sessionId,
    goalSha256: root.manifest.goal_hash,
    storedRevision: 0,
    storedSha256: null,
  });
  const outcome = {
    sessionId: root.sessionId,
    rootSessionId: root.sessionId,
    goalSha256: root.manifest.goal_hash,
    terminalStatus: "max_turns",
    stopReason: "max_turns",
    terminalStateRevision: 4,
    terminalAt: "2026-04-19T15:00:01Z",
    handoff,
  } as const;
  await commitTerminalState(memory, root.dir, "max_turns", 4, "2026-04-19T15:00:01Z");
  memory.syncAll();
  await failThenRerun(memory, root.dir, (fs) => writeSessionOutcome(fs, root.paths, outcome));
  const written = await afterPowerLoss(memory, root.paths.sessionOutcomeJson);
  assert.equal(JSON.parse(written ?? "null")?.stop_reason, "max_turns");

  const fresh = await newRepo();
  const record = await failThenRerun(
    fresh,
    "/repo/.loopy_loop",
    (fs) => ensureRepository(fs, "/repo", deterministic()),
  );
  const durable = await afterPowerLoss(fresh, "/repo/.loopy_loop/repository.json");
  assert.equal(JSON.parse(durable ?? "null")?.repository_id, record.repository_id);
});

test("a rerun child request publication is durable once the rerun resolves", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory);
  memory.syncAll();
  const published = await failThenRerun(
    memory,
    root.paths.childRequestsPendingDir,
    (fs) => publishChildRequest(fs, root.paths, childRequest("phase-0-foundations")),
  );
  const durable = await afterPowerLoss(memory, published.file);
  assert.equal(durable, new TextDecoder().decode(published.bytes));
});

test("a rerun child acceptance builds only on a child directory made durable", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory);
  await publishChildRequest(memory, root.paths, childRequest("phase-0-foundations"));
  memory.syncAll();
  const process = (fs: FileSystem) =>
    processNextChildRequest(fs, {
      repoRoot: "/repo",
      parentSessionId: root.sessionId,
      ...deterministic(),
    });
  const accepted = await failThenRerun(memory, `${root.dir}/children`, process);
  assert.equal(accepted?.kind, "accepted");
  // After a power loss the tree the resolved acceptance left still loads, its child in place.
  const crashed = memory.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
  const tree = await loadSessionTree(crashed, "/repo", "01_phase-0-foundations");
  assert.equal(tree.get("01_phase-0-foundations")?.parentSessionId, root.sessionId);
});
