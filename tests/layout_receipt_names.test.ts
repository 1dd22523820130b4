// Names that go into receipt file names are checked before anything is built from them: a
// delivery receipt's reference is built only from one safe path component, and a workflow id that
// would make a git receipt's file name longer than 255 bytes is refused before the attempt's
// artifacts or its receipt are written.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  createAttemptArtifacts,
  deliveryReceiptRef,
  LayoutError,
  LayoutOptionError,
  MAX_FILE_NAME_BYTES,
  SessionPaths,
  writeGitReceipt,
} from "../layout.ts";
import { newRepo, newRoot } from "./layout_fixtures.ts";

const BOUNDARY = { head: null, branch: null, dirty: null } as const;

test("a delivery receipt reference is refused for a name that is not one safe path component", () => {
  for (const layout of ["folded", "mirror"] as const) {
    const paths = new SessionPaths("/repo/.loopy_loop/sessions/001_x", layout);
    for (const name of ["../state.json", "sub/d.json", "", "..", ".hidden", "a\\b", "/abs"]) {
      // The same refusal as the receipt's path.
      let expected: unknown;
      try {
        paths.deliveryReceipt(name);
      } catch (error) {
        expected = error;
      }
      assert.ok(expected instanceof LayoutError, name);
      assert.throws(
        () => deliveryReceiptRef(paths, name),
        (error: unknown) => {
          assert.ok(error instanceof LayoutError, String(error));
          assert.equal(error.constructor, expected.constructor);
          assert.equal(error.message, expected.message);
          return true;
        },
        name,
      );
    }
  }
  const folded = new SessionPaths("/repo/.loopy_loop/sessions/001_x", "folded");
  assert.equal(deliveryReceiptRef(folded, "delivery-1.json"), "session:/receipts/delivery-1.json");
  const mirror = new SessionPaths("/repo/.loopy_loop/sessions/001_x", "mirror");
  assert.equal(
    deliveryReceiptRef(mirror, "delivery-1.json"),
    "session:/delivery_receipts/delivery-1.json",
  );
});

/** The longest workflow id whose git receipt name `<NNNN>_<workflow>_git_before.json` fits. */
function longestWorkflowId(iteration: number): string {
  const digits = Math.max(4, String(iteration).length);
  return "w".repeat(MAX_FILE_NAME_BYTES - digits - "_".length - "_git_before.json".length);
}

function refusedWorkflowId(value: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LayoutOptionError, String(error));
    assert.equal(error.option, "workflowId");
    assert.equal(error.value, value);
    return true;
  };
}

test("a workflow id that makes a git receipt name longer than 255 bytes is refused before anything is written", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  for (const iteration of [1, 123456]) {
    const fits = longestWorkflowId(iteration);
    const long = `${fits}w`;
    const attempt = { iteration, workflowId: long, attemptId: "a1" };
    await assert.rejects(
      createAttemptArtifacts(fs, root.paths, attempt, { prompt: "p", pathsMap: {} }),
      refusedWorkflowId(long),
    );
    await assert.rejects(
      writeGitReceipt(fs, root.paths, root.sessionId, attempt, "after", {
        ...BOUNDARY,
        rawStatus: new TextEncoder().encode("{}\n"),
      }),
      refusedWorkflowId(long),
    );
    // Nothing of the attempt was written: no iteration, raw or receipt entry.
    const prefix = `${String(iteration).padStart(4, "0")}_`;
    for (const dir of [root.paths.iterationsDir, root.paths.rawDir, root.paths.gitReceiptsDir]) {
      const names = (await fs.readDir(dir).catch(() => [])).map((entry) => entry.name);
      assert.deepEqual(names.filter((name) => name.startsWith(prefix)), [], dir);
    }

    // One byte less fits: the attempt and both its receipts are written.
    const fitting = { iteration, workflowId: fits, attemptId: "a1" };
    await createAttemptArtifacts(fs, root.paths, fitting, { prompt: "p", pathsMap: {} });
    for (const phase of ["before", "after"] as const) {
      const written = await writeGitReceipt(fs, root.paths, root.sessionId, fitting, phase, {
        ...BOUNDARY,
      });
      const name = written.file.slice(written.file.lastIndexOf("/") + 1);
      assert.ok(new TextEncoder().encode(name).length <= MAX_FILE_NAME_BYTES, name);
      assert.equal((await fs.lstat(written.file)).kind, "file");
    }
  }
});
