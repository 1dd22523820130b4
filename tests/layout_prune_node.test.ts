// prune-raw, the trace readers and layout writes on a real filesystem (the Node adapter, on Deno
// and on Node): the same fixtures as the memory tests, with real symlinks pointing outside the repository.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  chmod,
  lstat,
  mkdir,
  mkdtemp,
  readFile,
  realpath,
  rm,
  symlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nodeFs } from "../adapters/node.ts";
import {
  appendEvents,
  findLoopyRoot,
  listTraces,
  LogicalReferenceResolver,
  pruneRaw,
  TraceIntegrityError,
  verifyTrace,
} from "../layout.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";
import { buildMirrorTree, ROOT_ATTEMPTS } from "./fixtures/mirror_tree.ts";

async function withTempDir(body: (dir: string) => Promise<void>): Promise<void> {
  const dir = await realpath(await mkdtemp(join(tmpdir(), "loop-prune-")));
  try {
    await body(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("on a real filesystem prune removes raw attempts and never follows a symlink out of the repository", async () => {
  await withTempDir(async (dir) => {
    const fs = nodeFs();
    const repo = join(dir, "repo");
    const outside = join(dir, "outside");
    await mkdir(repo);
    await mkdir(outside);
    await writeFile(join(outside, "keep.txt"), "keep");
    const tree = await buildFoldedTree(fs, repo);
    await symlink(outside, join(tree.root.rawDir, "0009_outer"));
    await symlink(join(outside, "keep.txt"), join(tree.prunable[0] as string, "harness", "link"));
    assert.equal(await findLoopyRoot(fs, tree.root.iterationsDir), tree.loopyRoot);

    const report = await pruneRaw(fs, tree.loopyRoot);
    assert.deepEqual(report.removed.map((entry) => entry.path).sort(), [...tree.prunable].sort());
    assert.equal(
      report.skipped.find((skip) => skip.path === join(tree.root.rawDir, "0009_outer"))?.reason,
      "symlink",
    );
    assert.equal(await readFile(join(outside, "keep.txt"), "utf8"), "keep");
    assert.ok((await lstat(join(tree.root.rawDir, "0009_outer"))).isSymbolicLink());
    assert.ok((await lstat(join(tree.running, "eval", "report.json"))).isFile());
    const resolver = await LogicalReferenceResolver.forSession(fs, {
      repoRoot: repo,
      sessionId: tree.rootId,
    });
    const raw = await resolver.resolve("session:/raw/0002_outer/eval/report.json");
    assert.equal(raw.status, "pruned");
    const audit = await resolver.resolve("session:/iterations/0002_outer/acceptance-audit.md");
    assert.equal(audit.status, "present");
  });
});

test("on a real filesystem mirror traces list as verified and a changed file fails verification", async () => {
  await withTempDir(async (dir) => {
    const fs = nodeFs();
    const repo = join(dir, "repo");
    await mkdir(repo);
    const tree = await buildMirrorTree(fs, repo);
    const listed = await listTraces(fs, tree.loopyRoot);
    assert.deepEqual(
      listed.map((entry) => entry.integrity),
      ["verified", "verified", "not_finalized", "verified"],
    );
    const first = ROOT_ATTEMPTS.first.attemptId;
    const report = join(tree.traceDir(first), "eval", "report.json");
    await writeFile(report, '{"passed":0}');
    await assert.rejects(
      verifyTrace(fs, tree.loopyRoot, first),
      (error: unknown) => error instanceof TraceIntegrityError && error.file === report,
    );
  });
});

test("on a real filesystem layout writes bring a widened session to private modes", async () => {
  await withTempDir(async (dir) => {
    const fs = nodeFs();
    const tree = await buildFoldedTree(fs, dir);
    const session = tree.root.dir;
    const events = join(session, "events.jsonl");
    await chmod(session, 0o755);
    await chmod(events, 0o644);
    await appendEvents(fs, events, tree.rootId, [{ type: "tick" }]);
    assert.equal((await lstat(events)).mode & 0o777, 0o600);
    assert.equal((await lstat(session)).mode & 0o777, 0o700);
    // A second append finds both private and changes nothing more.
    await appendEvents(fs, events, tree.rootId, [{ type: "tock" }]);
    assert.equal((await lstat(session)).mode & 0o777, 0o700);
  });
});
