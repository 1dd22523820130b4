// prune-raw --legacy-traces against a mirror attempt that starts while the prune runs: the check
// that the tree's sessions are idle and the move of their trace tree are serialized with this
// process's state updates, so a trace written by an attempt that started is never removed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { pruneRaw, updateSessionState } from "../layout.ts";
import { newRepo } from "./layout_fixtures.ts";
import { buildMirrorTree, MIRROR_ROOT_ID } from "./fixtures/mirror_tree.ts";
import { gate, hookedFs } from "./_hooks.ts";

test("a mirror attempt that starts while its idle trace tree is pruned keeps the trace it writes", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  for (const dir of [tree.rootDir, tree.childDir]) {
    await updateSessionState(fs, dir, (s) => {
      s.current_task = null;
    }, { updatedAt: "2026-04-20T00:00:00Z" });
  }
  // The prune pauses right after its last reading of the states before moving the tree aside
  // (the plan reads the two sessions' states, the move reads them again).
  let stateReads = 0;
  const hold = gate();
  let reached!: () => void;
  const paused = new Promise<void>((resolve) => (reached = resolve));
  const view = hookedFs(fs, {
    async after(method, args) {
      const read = method === "readFile" || method === "readFileNoFollow";
      if (read && String(args[0]).endsWith("/state.json") && ++stateReads === 4) {
        reached();
        await hold.wait;
      }
    },
  });
  const prune = pruneRaw(view, tree.loopyRoot, { legacyTraces: true });
  await paused;
  // Meanwhile the engine starts attempt 4 of the root: its state, then its trace.
  const trace =
    `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}/attempts/c0ffee000004`;
  let started = false;
  const attempt = updateSessionState(fs, tree.rootDir, (s) => {
    s.current_task = { workflow_id: "outer", iteration: 4, attempt_id: "c0ffee000004" };
  }, { updatedAt: "2026-04-20T00:00:01Z" }).then(async () => {
    started = true;
    await fs.mkdir(trace, { recursive: true });
    await fs.writeFile(`${trace}/trace_manifest.json`, new TextEncoder().encode("{}"));
  });
  await new Promise((resolve) => setTimeout(resolve, 20));
  // The state update waits for the prune's check and move of the tree it would change.
  assert.equal(started, false);
  hold.open();
  const report = await prune;
  await attempt;
  // The idle tree went; the trace of the attempt that started after it is there.
  assert.ok(report.removed.some((entry) => entry.kind === "legacy_traces"), JSON.stringify(report));
  assert.equal((await fs.lstat(`${trace}/trace_manifest.json`)).kind, "file");
});
