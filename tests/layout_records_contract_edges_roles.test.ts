// The frozen workflow contract that decides which workflow may stop a session: a projection its
// legacy state pins but that is gone, a contract that is no JSON object, an orchestration that
// is no object. Each is a typed error naming the file and field, never read as "no roles".
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { type CreatedSession, readTerminalControl } from "../layout.ts";
import {
  goalMetControl,
  newRepo,
  newRoot,
  patchState,
  readJson,
  recordError,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";

/** A goal_met control by workflow `intruder`, which no contract above names as completion role. */
const goalMet = goalMetControl(ROOT_ID, "intruder", {
  evidence_refs: ["session:/project_state/finished.md"],
});
const expected = { sessionId: ROOT_ID, workflowId: "intruder", attemptId: "a26" };

/** A root whose state is rewritten with `state` merged in, holding the intruder's control. */
async function rootWith(state: Record<string, unknown>): Promise<{
  fs: MemoryFs;
  root: CreatedSession;
}> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await patchState(fs, root.dir, state);
  await writeJson(fs, root.paths.controlJson, goalMet);
  return { fs, root };
}

test("a legacy state pinning a workflow contract projection that is gone refuses every stop", async () => {
  // The state records no contract, only the projection's pin: the projection is the contract.
  const { fs, root } = await rootWith({ workflow_contract: null });
  const pin = (await readJson(fs, root.paths.stateJson)).workflow_contract_sha256;
  assert.match(String(pin), /^sha256:/);
  await fs.remove(root.paths.workflowContractJson);
  const before = fs.snapshotTree("/");
  await assert.rejects(
    readTerminalControl(fs, root.paths, expected),
    recordError(root.paths.stateJson, "workflow_contract_sha256", /is missing/),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  // Neither pinned nor recorded, a missing projection names no roles: the caller's decide.
  await patchState(fs, root.dir, { workflow_contract_sha256: null });
  assert.equal((await readTerminalControl(fs, root.paths, expected))?.record.control_id, "done-1");
});

test("a workflow contract projection that is no JSON object is refused naming it", async () => {
  for (const text of ["[]", '"outer"', "null", "3"]) {
    const { fs, root } = await rootWith({
      workflow_contract: null,
      workflow_contract_sha256: null,
    });
    await writeText(fs, root.paths.workflowContractJson, text);
    const before = fs.snapshotTree("/");
    await assert.rejects(
      readTerminalControl(fs, root.paths, expected),
      recordError(root.paths.workflowContractJson, "", /Expected a JSON object/),
      text,
    );
    assert.deepEqual(fs.snapshotTree("/"), before, text);
  }
});

test("an orchestration that is no object is refused naming the contract's file and field", async () => {
  for (const orchestration of ["intruder", ["intruder"], 1, true]) {
    const contract = { orchestration, terminal_blocker_reporting_roles: ["outer"] };
    // Recorded in the state (unpinned), or only in the projection of a legacy state.
    const recorded = await rootWith({
      workflow_contract: contract,
      workflow_contract_sha256: null,
    });
    await assert.rejects(
      readTerminalControl(recorded.fs, recorded.root.paths, expected),
      recordError(
        recorded.root.paths.stateJson,
        "workflow_contract.orchestration",
        /must be a workflow id/,
      ),
      JSON.stringify(orchestration),
    );
    const projected = await rootWith({ workflow_contract: null, workflow_contract_sha256: null });
    await writeJson(projected.fs, projected.root.paths.workflowContractJson, contract);
    await assert.rejects(
      readTerminalControl(projected.fs, projected.root.paths, expected),
      recordError(projected.root.paths.workflowContractJson, "orchestration", /workflow id/),
      JSON.stringify(orchestration),
    );
  }
});
