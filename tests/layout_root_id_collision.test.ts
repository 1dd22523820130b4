// A child's ordinal grows past 99 (`100_phase-1`), so a new root with ordinal 100 and the same
// slug would take a child's id, and the engine could resolve neither tree. A root creation skips
// an ordinal whose id a session of the repository has, or a children.json ledger records.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  createRootSession,
  loadSessionTree,
  ORDINAL_RESERVATION_PREFIX,
  processNextChildRequest,
  publishChildRequest,
} from "../layout.ts";
import { childRequest, CONTRACTS, newRepo, newRoot, writeJson } from "./layout_fixtures.ts";

const SESSIONS = "/repo/.loopy_loop/sessions";

/** The reservations left in `sessions/`. */
async function reservations(fs: MemoryFs): Promise<string[]> {
  return (await fs.readDir(SESSIONS))
    .map((entry) => entry.name)
    .filter((name) => name.startsWith(ORDINAL_RESERVATION_PREFIX))
    .sort();
}

test("a new root skips an ordinal whose id is a child of another tree, and both trees load", async () => {
  const fs = await newRepo();
  const first = await newRoot(fs);
  // The parent already had 99 children (an entry stands for them: ordinals count every entry).
  await fs.mkdir(`${first.dir}/children/99_earlier-child`);
  await publishChildRequest(fs, first.paths, childRequest("phase-1"));
  const accepted = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: first.sessionId,
  });
  assert.equal(accepted?.kind === "accepted" && accepted.childSessionId, "100_phase-1");
  // Root ordinals up to 99 are taken (a crash left the reservation of the 99th).
  await fs.writeFile(`${SESSIONS}/${ORDINAL_RESERVATION_PREFIX}099`, new Uint8Array());

  const root = await createRootSession(fs, { repoRoot: "/repo", goal: "Phase 1", ...CONTRACTS });
  assert.equal(root.sessionId, "101_phase-1");
  const firstTree = await loadSessionTree(fs, "/repo", first.sessionId);
  assert.deepEqual([...firstTree.nodes.keys()], [first.sessionId, "100_phase-1"]);
  const rootTree = await loadSessionTree(fs, "/repo", root.sessionId);
  assert.deepEqual([...rootTree.nodes.keys()], ["101_phase-1"]);
  // The skipped ordinal's reservation is removed: only the crash leftover stays.
  assert.deepEqual(await reservations(fs), [`${ORDINAL_RESERVATION_PREFIX}099`]);
  // The gap is never filled: the next root takes the next ordinal.
  const next = await createRootSession(fs, { repoRoot: "/repo", goal: "Phase 1", ...CONTRACTS });
  assert.equal(next.sessionId, "102_phase-1");
});

test("a new root skips an ordinal whose id a ledger records for a child not published yet", async () => {
  const fs = await newRepo();
  const first = await newRoot(fs);
  // A dispatch that failed before its child was published keeps its id for a later dispatch.
  await writeJson(fs, first.paths.childrenJson, {
    schema_version: 2,
    parent_session_id: first.sessionId,
    revision: 1,
    children: [{
      session_id: "100_phase-1",
      request_id: "phase-1",
      status: "failed_dispatch",
      accepted_request_ref: "session:/child_requests/accepted/phase-1.json",
    }],
  });
  await fs.writeFile(`${SESSIONS}/${ORDINAL_RESERVATION_PREFIX}099`, new Uint8Array());
  const root = await createRootSession(fs, { repoRoot: "/repo", goal: "Phase 1", ...CONTRACTS });
  assert.equal(root.sessionId, "101_phase-1");
  assert.deepEqual(await reservations(fs), [`${ORDINAL_RESERVATION_PREFIX}099`]);
  // Another slug at ordinal 100 was free all along: nothing is skipped for it.
  const fs2 = await newRepo();
  await newRoot(fs2);
  await fs2.writeFile(`${SESSIONS}/${ORDINAL_RESERVATION_PREFIX}099`, new Uint8Array());
  const other = await createRootSession(fs2, { repoRoot: "/repo", goal: "Phase 2", ...CONTRACTS });
  assert.equal(other.sessionId, "100_phase-2");
});
