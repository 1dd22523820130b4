// What a reader refuses it refuses before reading through what it refuses: an unsafe session id
// or a reference the grammar refuses touches no file, and a `.loopy_loop/sessions` planted as a
// symlink is never listed through.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  createRootSession,
  createSessionId,
  ensureRepository,
  LayoutOptionError,
  listRootSessionIds,
  loadSessionTree,
  LogicalReferenceResolver,
  processNextChildRequest,
  TopologyError,
} from "../layout.ts";
import { nodeFs } from "../adapters/node.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { CONTRACTS } from "./layout_fixtures.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import { newRepo, newRoot } from "./layout_fixtures.ts";

test("a resolver for an unsafe session id is refused before any file is touched", async () => {
  for (const sessionId of ["../../etc", "", "a/b", "..", ".staging-x", "x\u0000y"]) {
    const fs = await newRepo();
    await newRoot(fs);
    fs.resetCounter();
    await assert.rejects(LogicalReferenceResolver.forSession(fs, { repoRoot: "/repo", sessionId }));
    assert.deepEqual(fs.operationLog.map((r) => `${r.op} ${r.path}`), [], sessionId);
  }
});

test("`layout resolve` refuses a reference the grammar refuses before it reads anything", async () => {
  for (
    const reference of [
      "session:/../../etc/passwd",
      "session://etc/passwd",
      "session:/a\u0000b",
      "ftp:/x",
      "session:/a//b",
    ]
  ) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    fs.resetCounter();
    const { io } = memoryIo(fs, "/repo", 0);
    const code = await runCli(["layout", "resolve", reference, "--session", root.sessionId], io);
    assert.notEqual(code, 0, reference);
    assert.deepEqual(fs.operationLog.map((r) => `${r.op} ${r.path}`), [], reference);
  }
});

async function linkedSessionsRoot(): Promise<MemoryFs> {
  const fs = await newRepo();
  await newRoot(fs);
  await fs.mkdir("/outside", { recursive: true });
  await fs.rename("/repo/.loopy_loop/sessions", "/outside/sessions");
  await fs.symlink("/outside/sessions", "/repo/.loopy_loop/sessions");
  fs.resetCounter();
  return fs;
}

function readThrough(fs: MemoryFs): string[] {
  return fs.operationLog.filter((r) =>
    r.path.startsWith("/repo/.loopy_loop/sessions/") ||
    (r.path === "/repo/.loopy_loop/sessions" && r.op !== "lstat")
  ).map((r) => `${r.op} ${r.path}`);
}

test("root sessions are never listed through a symlinked sessions root, by the API or `layout tree`", async () => {
  const fs = await linkedSessionsRoot();
  await assert.rejects(listRootSessionIds(fs, "/repo"), TopologyError);
  assert.deepEqual(readThrough(fs), []);
  const cli = await linkedSessionsRoot();
  const { io } = memoryIo(cli, "/repo", 0);
  assert.notEqual(await runCli(["layout", "tree"], io), 0);
  assert.deepEqual(readThrough(cli), []);
});

test("a repository root that is not an absolute path is refused alike on every adapter, before any file is touched", async () => {
  const memory = await newRepo();
  await newRoot(memory);
  // A real filesystem would take a relative path against the process's current directory.
  const ports: [string, FileSystem][] = [["memory", memory], ["node", nodeFs()]];
  for (const repoRoot of ["relrepo", "./repo", "", "repo/.."]) {
    for (const [name, fs] of ports) {
      memory.resetCounter();
      const calls: [string, () => Promise<unknown>][] = [
        ["createRootSession", () => createRootSession(fs, { repoRoot, goal: "g", ...CONTRACTS })],
        ["ensureRepository", () => ensureRepository(fs, repoRoot)],
        ["loadSessionTree", () => loadSessionTree(fs, repoRoot, "001_g")],
        ["createSessionId", () => createSessionId(fs, { repoRoot, goal: "g" })],
        [
          "forSession",
          () => LogicalReferenceResolver.forSession(fs, { repoRoot, sessionId: "001_g" }),
        ],
        [
          "processNextChildRequest",
          () => processNextChildRequest(fs, { repoRoot, parentSessionId: "001_g" }),
        ],
      ];
      for (const [call, run] of calls) {
        await assert.rejects(
          run(),
          (error: unknown) =>
            error instanceof LayoutOptionError && error.option === "repoRoot" &&
            error.value === repoRoot,
          `${call} on ${name}: ${repoRoot}`,
        );
      }
      assert.deepEqual(memory.operationLog.map((r) => `${r.op} ${r.path}`), [], repoRoot);
      // A child id's scope is its parent's directory: the same rule.
      await assert.rejects(
        createSessionId(fs, { parentSessionDir: repoRoot, requestId: "r" }),
        (error: unknown) =>
          error instanceof LayoutOptionError && error.option === "parentSessionDir",
        `createSessionId (child) on ${name}: ${repoRoot}`,
      );
    }
  }
});
