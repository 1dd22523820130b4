// Names an agent or a caller can make too large: an ordinal near 2^53 planted in children/ or
// sessions/, and an attempt id too long for the names built from it.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  type AttemptIdentity,
  createAttemptArtifacts,
  createRootSession,
  LayoutOptionError,
  LayoutRecordError,
  processNextChildRequest,
  publishChildRequest,
  writeGitReceipt,
} from "../layout.ts";
import {
  childRequest,
  CONTRACTS,
  deterministic,
  newRepo,
  newRoot,
  writeText,
} from "./layout_fixtures.ts";

const MAX_SAFE = Number.MAX_SAFE_INTEGER; // 2^53 - 1

test("a name in children/ whose ordinal has no safe successor is ignored by the next child id", async () => {
  for (
    const [planted, childId] of [
      [`${MAX_SAFE}_x`, "01_phase-0"],
      [`${MAX_SAFE + 1}_x`, "01_phase-0"],
      // The last ordinal with a safe successor still counts.
      [`${MAX_SAFE - 1}_x`, `${MAX_SAFE}_phase-0`],
    ]
  ) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    await fs.mkdir(root.paths.childrenDir, { recursive: true });
    await writeText(fs, `${root.paths.childrenDir}/${planted}`, "");
    await publishChildRequest(fs, root.paths, childRequest("phase-0"));
    const result = await processNextChildRequest(fs, {
      repoRoot: "/repo",
      parentSessionId: root.sessionId,
      ...deterministic(),
    });
    assert.equal(result?.kind === "accepted" && result.childSessionId, childId, planted);
  }
});

test("a name in sessions/ whose ordinal has no safe successor is ignored by the next root id", async () => {
  for (
    const [planted, rootId] of [
      [`${MAX_SAFE}_x`, "002_second-goal"],
      [`${MAX_SAFE - 1}_x`, `${MAX_SAFE}_second-goal`],
    ]
  ) {
    const fs = await newRepo();
    await newRoot(fs);
    await writeText(fs, `/repo/.loopy_loop/sessions/${planted}`, "");
    const created = await createRootSession(fs, {
      repoRoot: "/repo",
      goal: "Second goal",
      ...CONTRACTS,
      ...deterministic(),
    });
    assert.equal(created.sessionId, rootId, planted);
  }
});

test("an attempt id making a name longer than 255 bytes is refused before anything is written", async () => {
  // `git-before-<attempt_id>.json` is the longest name built from an attempt id: 16 bytes more.
  const longest = "a".repeat(255 - 16);
  for (const attemptId of [`${longest}a`, "a".repeat(300)]) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    const attempt: AttemptIdentity = { iteration: 1, workflowId: "work", attemptId };
    const before = fs.snapshotTree("/");
    for (const snapshot of [undefined, { "assignment.json": { x: 1 } }]) {
      await assert.rejects(
        createAttemptArtifacts(fs, root.paths, attempt, {
          prompt: "p",
          pathsMap: {},
          ...(snapshot === undefined ? {} : { snapshot }),
        }),
        (error) => {
          assert.ok(error instanceof LayoutRecordError, String(error));
          assert.equal(error.file, root.paths.attempt(1, "work").traceRefJson);
          assert.equal(error.path, "attempt_id");
          assert.equal(error.value, attemptId);
          return true;
        },
      );
    }
    await assert.rejects(
      writeGitReceipt(fs, root.paths, root.sessionId, attempt, "before", {
        head: null,
        branch: null,
        dirty: null,
      }),
      (error) => {
        assert.ok(error instanceof LayoutOptionError, String(error));
        assert.equal(error.option, "attemptId");
        assert.equal(error.value, attemptId);
        return true;
      },
    );
    assert.deepEqual(fs.snapshotTree("/"), before, `${attemptId.length} characters`);
  }
  // The longest id allowed makes every name it is built into.
  const fs = await newRepo();
  const root = await newRoot(fs);
  const attempt: AttemptIdentity = { iteration: 1, workflowId: "work", attemptId: longest };
  const created = await createAttemptArtifacts(fs, root.paths, attempt, {
    prompt: "p",
    pathsMap: {},
    snapshot: { "assignment.json": { x: 1 } },
  });
  assert.equal(created.traceRef.attempt_id, longest);
  await writeGitReceipt(fs, root.paths, root.sessionId, attempt, "before", {
    head: null,
    branch: null,
    dirty: null,
  });
});
