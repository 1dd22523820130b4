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
  SessionIdError,
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

test("a name in children/ numbered 2^53 - 1 stops new child ids with an error naming the scope", async () => {
  for (
    const [planted, childId] of [
      [`${MAX_SAFE}_x`, undefined],
      // Past the safe integers: ignored, as a name without an ordinal.
      [`${MAX_SAFE + 1}_x`, "01_phase-0"],
      [`${MAX_SAFE - 1}_x`, `${MAX_SAFE}_phase-0`],
    ] as const
  ) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    await fs.mkdir(root.paths.childrenDir, { recursive: true });
    await writeText(fs, `${root.paths.childrenDir}/${planted}`, "");
    await publishChildRequest(fs, root.paths, childRequest("phase-0"));
    const processing = processNextChildRequest(fs, {
      repoRoot: "/repo",
      parentSessionId: root.sessionId,
      ...deterministic(),
    });
    if (childId === undefined) {
      await assert.rejects(processing, (error: unknown) => {
        assert.ok(error instanceof SessionIdError, String(error));
        assert.equal(error.id, root.paths.childrenDir);
        return true;
      });
      continue;
    }
    const result = await processing;
    assert.equal(result?.kind === "accepted" && result.childSessionId, childId, planted);
  }
});

test("a name in sessions/ numbered 2^53 - 1 stops new root ids: the last ordinal is never repeated", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  const sessions = "/repo/.loopy_loop/sessions";
  await writeText(fs, `${sessions}/${MAX_SAFE - 1}_x`, "");
  const create = (goal: string) =>
    createRootSession(fs, { repoRoot: "/repo", goal, ...CONTRACTS, ...deterministic() });
  assert.equal((await create("Second goal")).sessionId, `${MAX_SAFE}_second-goal`);
  for (const goal of ["Third goal", "Fourth goal"]) {
    await assert.rejects(create(goal), (error: unknown) => {
      assert.ok(error instanceof SessionIdError, String(error));
      assert.equal(error.id, sessions);
      return true;
    });
  }
  const names = (await fs.readDir(sessions)).map((entry) => entry.name).filter((name) =>
    name.startsWith(String(MAX_SAFE))
  );
  assert.deepEqual(names, [`${MAX_SAFE}_second-goal`]);
});

test("an attempt id making a name longer than 255 bytes is refused before anything is written", async () => {
  // `workflow_snapshot/<attempt_id>/` is the longest name a folded session builds from it.
  const longest = "a".repeat(255);
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
