// Layout records on the real filesystem (nodeFs, on Node and on Deno's Node layer): a record an
// agent can write, planted as a FIFO, is refused with a typed error naming it, without waiting on
// it (a plain read of a FIFO blocks until a writer comes).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";
import {
  createRootSession,
  LayoutRecordError,
  observeHandoff,
  readControl,
  readHandoff,
  readSessionState,
  updateSessionState,
} from "../layout.ts";
import { CONTRACTS, deterministic } from "./layout_fixtures.ts";

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
}
