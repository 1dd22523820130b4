// Mirror traces on the real filesystem (nodeFs) holding FIFOs: a sealed trace's file replaced
// by a FIFO, or a FIFO added to it, is reported as not a regular file without being opened
// (opening one would release a writer waiting on it), and a trace: reference to a FIFO resolves
// to an entry of kind "other"; nothing waits on a FIFO.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";
import { hookedFs } from "./_hooks.ts";
import { inspectTrace, listTraces, LogicalReferenceResolver } from "../layout.ts";
import { buildMirrorTree, MIRROR_ROOT_ID, ROOT_ATTEMPTS } from "./fixtures/mirror_tree.ts";

const FIRST = ROOT_ATTEMPTS.first.attemptId;

/** `run()`, failing when it has not settled within 5 s (it waits on a FIFO). */
async function withoutWaiting<T>(what: string, run: () => Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const waited = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} waited on a FIFO`)), 5_000);
  });
  try {
    return await Promise.race([run(), waited]);
  } finally {
    clearTimeout(timer);
  }
}

if (process.platform !== "win32") {
  test("FIFOs in a sealed trace are reported as not regular files, and a trace: reference to one is of kind other", async () => {
    const repo = await realpath(await mkdtemp(join(tmpdir(), "loop-traces-fifo-")));
    const fs = nodeFs();
    try {
      const tree = await buildMirrorTree(fs, repo);
      const dir = tree.traceDir(FIRST);
      await rm(`${dir}/eval/report.json`);
      execFileSync("mkfifo", [`${dir}/eval/report.json`]);
      execFileSync("mkfifo", [`${dir}/agents/pipe`]);
      // Opening a FIFO, even without blocking, would release a writer waiting on it.
      const opened: string[] = [];
      const watched = hookedFs(fs, {
        before(method, args) {
          if (method.startsWith("open")) opened.push(String(args[0]));
        },
      });
      const inspection = await withoutWaiting(
        "inspect",
        () => inspectTrace(watched, tree.loopyRoot, FIRST),
      );
      const fifos = [`${dir}/eval/report.json`, `${dir}/agents/pipe`];
      assert.deepEqual(opened.filter((path) => fifos.includes(path)), []);
      const report = inspection.observedIntegrity;
      assert.equal(report.status, "failed");
      assert.deepEqual(
        report.modified.map((item) => [item.path, item.error]),
        [["eval/report.json", "path is not a regular file"]],
      );
      assert.deepEqual(report.added, ["agents/pipe"]);
      const listed = await withoutWaiting("list", () => listTraces(fs, tree.loopyRoot));
      assert.equal(listed.find((entry) => entry.attemptId === FIRST)?.integrity, "failed");
      const resolver = await LogicalReferenceResolver.forSession(fs, {
        repoRoot: repo,
        sessionId: MIRROR_ROOT_ID,
      });
      const resolved = await resolver.resolve(`trace:trace-${FIRST}:/eval/report.json`);
      assert.deepEqual(
        [resolved.exists, resolved.kind, resolved.status, resolved.path],
        [true, "other", "present", `${dir}/eval/report.json`],
      );
    } finally {
      await rm(repo, { recursive: true, force: true });
    }
  });
}
