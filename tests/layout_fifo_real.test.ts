// Layout records on the real filesystem (nodeFs, on Node and on Deno's Node layer): a record an
// agent can write, planted as a FIFO, is refused with a typed error naming it, without waiting on
// it (a plain read of a FIFO blocks until a writer comes).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { closeSync, constants, openSync } from "node:fs";
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import type { MemoryFs } from "../adapters/memory.ts";
import { nodeFs } from "../adapters/node.ts";
import {
  acceptEvalReceipt,
  appendEvents,
  createAttemptArtifacts,
  type CreatedSession,
  createRootSession,
  LayoutRecordError,
  observeHandoff,
  processNextChildRequest,
  publishChildRequest,
  readControl,
  readEvents,
  readHandoff,
  readSessionState,
  readTerminalControl,
  recordChildOutcome,
  scanEvents,
  SessionPaths,
  updateSessionState,
  writeAttemptResult,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import {
  childRequest,
  CONTRACTS,
  deterministic,
  evalReceipt,
  finishChildBlocked,
  goalMetControl,
} from "./layout_fixtures.ts";

/**
 * Plants a FIFO at `file` for `run` (whatever was there is put back afterwards) and asserts that
 * `run` rejects as `check` says without waiting on it: a call still waiting after 5 s fails the
 * test, and a writer then opens and closes the FIFO, so the waiting read ends at once and the run
 * does not hang.
 */
async function refusedWithoutWaiting(
  file: string,
  run: () => Promise<unknown>,
  check: (error: unknown) => boolean,
): Promise<void> {
  const saved = await readFile(file).catch(() => undefined);
  await rm(file, { force: true });
  execFileSync("mkfifo", [file]);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const waited = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      try {
        closeSync(openSync(file, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // No reader is waiting on it.
      }
      reject(new Error(`waited on the FIFO at ${file}`));
    }, 5_000);
  });
  try {
    await assert.rejects(Promise.race([run(), waited]), check);
  } finally {
    clearTimeout(timer);
    await rm(file, { force: true });
    if (saved !== undefined) await writeFile(file, saved);
  }
}

/** A check: a `LayoutRecordError` naming `file` as not a regular file (a FIFO). */
function fifoRefused(file: string): (error: unknown) => boolean {
  return (error) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, file);
    assert.match(error.message, /not a regular file \(a FIFO, socket or device\)/);
    return true;
  };
}

/** A root session in a new temporary repository on the real filesystem. */
async function realRoot(): Promise<{ repo: string; root: CreatedSession }> {
  const repo = await realpath(await mkdtemp(join(tmpdir(), "loop-layout-fifo-")));
  const root = await createRootSession(nodeFs(), {
    repoRoot: repo,
    goal: "Read records safely",
    ...CONTRACTS,
    ...deterministic(),
  });
  return { repo, root };
}

if (process.platform !== "win32") {
  test("control.json, handoff.json and state.json planted as FIFOs are refused by name, without waiting on them", async () => {
    const repo = await realpath(await mkdtemp(join(tmpdir(), "loop-layout-fifo-")));
    const fs = nodeFs();
    try {
      const { paths, dir } = await createRootSession(fs, {
        repoRoot: repo,
        goal: "Read records safely",
        ...CONTRACTS,
        ...deterministic(),
      });
      const reads: [string, () => Promise<unknown>][] = [
        [paths.controlJson, () => readControl(fs, paths)],
        [paths.handoffJson, () => readHandoff(fs, paths)],
        [paths.stateJson, () => readSessionState(fs, dir)],
        [
          paths.stateJson,
          () =>
            updateSessionState(fs, dir, () => false, {
              updatedAt: "2026-01-01T00:00:00Z",
              durability: "ordered",
            }),
        ],
      ];
      for (const [file, read] of reads) {
        await rm(file, { force: true });
        execFileSync("mkfifo", [file]);
        // A read that waits on the FIFO never settles: the timer fails the test instead.
        let timer: ReturnType<typeof setTimeout> | undefined;
        const waited = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`waited on the FIFO at ${file}`)), 5_000);
        });
        try {
          await assert.rejects(Promise.race([read(), waited]), (error: unknown) => {
            assert.ok(error instanceof LayoutRecordError, String(error));
            assert.equal(error.file, file);
            assert.match(error.message, /not a regular file \(a FIFO, socket or device\)/);
            return true;
          });
        } finally {
          clearTimeout(timer);
        }
      }
      // The engine's observation of the agent's handoff: invalid, with the reason, never waited on.
      const observed = await observeHandoff(fs, paths, {
        sessionId: paths.dir.slice(paths.dir.lastIndexOf("/") + 1),
        goalSha256: "sha256:x",
        storedRevision: 0,
        storedSha256: null,
      });
      assert.equal(observed.status, "invalid");
      assert.match(observed.diagnosis ?? "", /not a regular file/);
    } finally {
      await rm(repo, { recursive: true, force: true });
    }
  });
  test("a FIFO events.jsonl is refused when read or appended to, never waited on", async () => {
    const { repo, root } = await realRoot();
    const fs = nodeFs();
    const file = root.paths.eventsJsonl;
    try {
      await refusedWithoutWaiting(file, () => readEvents(fs, file), fifoRefused(file));
      await refusedWithoutWaiting(file, () => scanEvents(fs, file), fifoRefused(file));
      // Refused before anything is written into the pipe (it would take the record and fail
      // its fsync).
      await refusedWithoutWaiting(
        file,
        () => appendEvents(fs, file, root.sessionId, [{ type: "x" }], deterministic()),
        fifoRefused(file),
      );
      // The regular file put back is appended to and read as before.
      await appendEvents(fs, file, root.sessionId, [{ type: "y" }], deterministic());
      assert.deepEqual((await readEvents(fs, file)).map((e) => e.type), ["y"]);
    } finally {
      await rm(repo, { recursive: true, force: true });
    }
  });

  test("FIFO result.json and snapshot files are refused, never waited on", async () => {
    const { repo, root } = await realRoot();
    const fs = nodeFs();
    try {
      const attempt = { iteration: 1, workflowId: "outer", attemptId: "a1" };
      const created = await createAttemptArtifacts(fs, root.paths, attempt, {
        prompt: "p",
        pathsMap: {},
        snapshot: { "assignment.json": { actor: "outer" } },
      });
      const snapshotDir = created.paths.snapshotDir("a1");
      const planted = join(snapshotDir, "scheduler_view.json");
      await refusedWithoutWaiting(
        planted,
        () =>
          createAttemptArtifacts(fs, root.paths, attempt, {
            prompt: "p",
            pathsMap: {},
            snapshot: { "assignment.json": { actor: "outer" }, "scheduler_view.json": {} },
          }),
        fifoRefused(planted),
      );
      await updateSessionState(fs, root.dir, (s) => {
        s.current_task = { workflow_id: "outer", iteration: 1, attempt_id: "a1" };
      }, { updatedAt: "2026-04-19T15:00:00Z" });
      const result = created.paths.resultJson;
      await refusedWithoutWaiting(
        result,
        () => writeAttemptResult(fs, created.paths, { success: true }),
        fifoRefused(result),
      );
      await writeAttemptResult(fs, created.paths, { success: true });
    } finally {
      await rm(repo, { recursive: true, force: true });
    }
  });

  test("a FIFO session_outcome.json or cited eval receipt is refused, not waited on", async () => {
    const { repo, root } = await realRoot();
    const fs = nodeFs();
    const id = root.sessionId;
    const paths = root.paths;
    try {
      // A goal_met control citing an accepted eval receipt of the running attempt.
      const attempt = { iteration: 26, workflowId: "outer", attemptId: "a26" };
      await createAttemptArtifacts(fs, paths, attempt, { prompt: "p", pathsMap: {} });
      await updateSessionState(fs, root.dir, (s) => {
        s.current_task = { workflow_id: "outer", iteration: 26, attempt_id: "a26" };
      }, { updatedAt: "2026-04-19T15:00:00Z" });
      await writeFile(`${paths.dir}/raw/0026_outer/eval/report.json`, '{"passed":3}');
      await writeGitReceipt(fs, paths, id, attempt, "after", {
        head: "c0ffee",
        branch: "main",
        dirty: false,
      });
      const receipt = paths.evalReceipt("tests-pass");
      await writeFile(
        receipt,
        JSON.stringify(evalReceipt(id)),
      );
      await acceptEvalReceipt(fs, paths, "tests-pass", { sessionId: id });
      await writeFile(
        paths.controlJson,
        JSON.stringify(
          goalMetControl(id, "outer", {
            eval_receipt_refs: ["session:/eval_receipts/tests-pass.json"],
          }),
        ),
      );
      const current = { sessionId: id, workflowId: "outer", attemptId: "a26" };
      await refusedWithoutWaiting(
        receipt,
        () => readTerminalControl(fs, paths, current),
        (error) => {
          // The control's citation is at fault: the control and the entry are named.
          assert.ok(error instanceof LayoutRecordError, String(error));
          assert.equal(error.file, paths.controlJson);
          assert.equal(error.path, "eval_receipt_refs[0]");
          assert.match(error.message, /not a regular file \(a FIFO, socket or device\)/);
          return true;
        },
      );
      const control = await readTerminalControl(fs, paths, current);
      assert.equal(control?.record.control_id, "done-1");
      await updateSessionState(fs, root.dir, (s) => {
        s.status = "goal_met";
        s.current_task = null;
        s.terminal_state_revision = 3;
        s.terminal_at = "2026-04-19T15:00:01Z";
      }, { updatedAt: "2026-04-19T15:00:01Z" });
      const handoff = await observeHandoff(fs, paths, {
        sessionId: id,
        goalSha256: root.manifest.goal_hash,
        storedRevision: 0,
        storedSha256: null,
      });
      const input = {
        sessionId: id,
        rootSessionId: id,
        goalSha256: root.manifest.goal_hash,
        terminalStatus: "goal_met",
        stopReason: "goal_met",
        terminalStateRevision: 3,
        terminalAt: "2026-04-19T15:00:01Z",
        control,
        handoff,
      } as const;
      const outcome = paths.sessionOutcomeJson;
      await refusedWithoutWaiting(
        outcome,
        () => writeSessionOutcome(fs, paths, input),
        fifoRefused(outcome),
      );
      assert.equal((await writeSessionOutcome(fs, paths, input)).terminal_status, "goal_met");
    } finally {
      await rm(repo, { recursive: true, force: true });
    }
  });

  test("FIFO child request records and projections are refused, never waited on", async () => {
    const { repo, root } = await realRoot();
    const fs = nodeFs();
    const paths = root.paths;
    const options = { repoRoot: repo, parentSessionId: root.sessionId, ...deterministic() };
    try {
      // publishChildRequest: the pending slot and the accepted copy of the id.
      for (const planted of [paths.pendingRequest("r"), paths.acceptedRequest("r")]) {
        await refusedWithoutWaiting(
          planted,
          () => publishChildRequest(fs, paths, childRequest("r")),
          fifoRefused(planted),
        );
      }
      await publishChildRequest(fs, paths, childRequest("r"));
      // processNextChildRequest: the accepted copy, the parent's roster projection and the
      // root's harness roster; the request stays pending each time.
      for (
        const planted of [
          paths.acceptedRequest("r"),
          paths.workflowRosterJson,
          paths.harnessCapabilityRosterJson,
        ]
      ) {
        await refusedWithoutWaiting(
          planted,
          () => processNextChildRequest(fs, options),
          fifoRefused(planted),
        );
        const pending = JSON.parse(await readFile(paths.pendingRequest("r"), "utf8"));
        assert.equal(pending.request_id, "r");
      }
      const accepted = await processNextChildRequest(fs, options);
      assert.ok(accepted?.kind === "accepted");
      // recordChildOutcome: the parent's child_outcomes/<request_id>.json.
      const childId = accepted.childSessionId;
      const child = new SessionPaths(accepted.childDir, "folded");
      // The fixture writes and reads through the port's readFile and writeFile, which the real
      // filesystem has too.
      await finishChildBlocked(fs as unknown as MemoryFs, child, childId, root.sessionId);
      const outcomeFile = paths.childOutcome("r");
      await mkdir(paths.childOutcomesDir, { recursive: true });
      await refusedWithoutWaiting(
        outcomeFile,
        () => recordChildOutcome(fs, options),
        fifoRefused(outcomeFile),
      );
      assert.equal((await recordChildOutcome(fs, options)).request_id, "r");
    } finally {
      await rm(repo, { recursive: true, force: true });
    }
  });
}
