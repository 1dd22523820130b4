// Everything a layout writer writes into is private afterwards (files 0600, directories 0700),
// however wide the tree was found: a file appended to or replaced, and each directory that gains
// an entry.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  appendEvents,
  createAttemptArtifacts,
  processNextChildRequest,
  publishChildRequest,
  updateSessionState,
  writeAttemptResult,
  writeGitReceipt,
} from "../layout.ts";
import { childRequest, newRepo, newRoot } from "./layout_fixtures.ts";

const LOOPY = "/repo/.loopy_loop";

/** Widens every file below `root` to 0644 and every directory to 0755. */
async function widen(fs: MemoryFs, root: string): Promise<void> {
  for (const [key, value] of Object.entries(fs.snapshotTree(root))) {
    if (value.startsWith("dir ")) await fs.chmod(`${root}/${key}`, 0o755);
    else if (value.startsWith("file ")) await fs.chmod(`${root}/${key}`, 0o644);
  }
}

/**
 * Runs `step` and returns what it wrote that is not private: files whose bytes changed or that
 * are new, and directories that gained an entry, with their modes.
 */
async function notPrivateAfter(fs: MemoryFs, step: () => Promise<unknown>): Promise<string[]> {
  const before = fs.snapshotTree(LOOPY);
  await step();
  const after = fs.snapshotTree(LOOPY);
  const gained = (dir: string) =>
    Object.keys(after).some((key) =>
      key.slice(0, key.lastIndexOf("/")) === dir && before[key] === undefined
    );
  const out: string[] = [];
  for (const [key, value] of Object.entries(after)) {
    const [kind, mode] = value.split(" ");
    const body = (text: string | undefined) => text?.replace(/^(file|dir) \d+ ?/, "");
    if (kind === "file" && body(before[key]) !== body(value) && mode !== "600") {
      out.push(`${key} ${mode}`);
    }
    if (kind === "dir" && gained(key) && mode !== "700") {
      out.push(`${key}/ ${mode}`);
    }
  }
  return out;
}

test("layout writers leave what they write private in a tree found with 0644 files and 0755 directories", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await createAttemptArtifacts(fs, root.paths, {
    iteration: 1,
    workflowId: "outer",
    attemptId: "a00000000001",
  }, { prompt: "p", pathsMap: {} });
  await widen(fs, LOOPY);
  const attempt = { iteration: 2, workflowId: "outer", attemptId: "a00000000002" };
  const steps: [string, () => Promise<unknown>][] = [
    ["events", () => appendEvents(fs, root.paths.eventsJsonl, root.sessionId, [{ type: "x" }])],
    [
      "attempt",
      () => createAttemptArtifacts(fs, root.paths, attempt, { prompt: "p2", pathsMap: {} }),
    ],
    [
      "result",
      () => writeAttemptResult(fs, root.paths.attempt(2, "outer"), { status: "succeeded" }),
    ],
    ["receipt", () =>
      writeGitReceipt(fs, root.paths, root.sessionId, attempt, "after", {
        head: "0123456789abcdef0123456789abcdef01234567",
        branch: "main",
        dirty: false,
      })],
    ["state", () =>
      updateSessionState(fs, root.dir, (state) => {
        state.current_task = null;
      }, { updatedAt: "2026-04-19T14:30:22Z" })],
    ["publish request", () => publishChildRequest(fs, root.paths, childRequest("phase-0"))],
    [
      "accept request",
      () => processNextChildRequest(fs, { repoRoot: "/repo", parentSessionId: root.sessionId }),
    ],
  ];
  for (const [name, step] of steps) {
    await widen(fs, LOOPY);
    assert.deepEqual(await notPrivateAfter(fs, step), [], name);
  }
  assert.equal((await fs.stat(root.paths.eventsJsonl)).mode, 0o600);
});
