// A process that finds a session tree another process published and died before making durable
// (killed between the publish rename and the fsync of its parent) makes the tree's entries
// durable before anything it writes there resolves: a power loss afterwards keeps the session
// and every write that resolved. Each process is its own `FileSystem` object over one MemoryFs,
// as each holds its own memory of what it made durable.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { PermissionDenied } from "../src/port/errors.ts";
import {
  appendEvents,
  createAttemptArtifacts,
  createRootSession,
  ensureRepository,
  listRootSessionIds,
  readEvents,
  SessionPaths,
  updateSessionState,
  writeAttemptResult,
} from "../layout.ts";
import { hookedFs } from "./_hooks.ts";
import { CONTRACTS, deterministic } from "./layout_fixtures.ts";

const REPO = "/repo";

/** A process whose every call after `killedAfter` returns true fails: it was killed. */
function killableProcess(
  fs: MemoryFs,
  killedAfter: (method: string, args: unknown[]) => boolean,
) {
  let dead = false;
  return hookedFs(fs, {
    before: () => {
      if (dead) throw new Error("the process was killed");
    },
    after: (method, args) => {
      if (killedAfter(method, args)) dead = true;
    },
  });
}

test("a session published by a process killed before its parent's fsync is made durable by the next process writing in it", async () => {
  const memory = new MemoryFs();
  await memory.mkdir(REPO);
  memory.syncAll();
  // Killed right after the rename that publishes the root session into sessions/.
  const first = killableProcess(
    memory,
    (method, args) => method === "rename" && /\/sessions\/001_[^/]*$/.test(String(args[1])),
  );
  await assert.rejects(
    createRootSession(first, { repoRoot: REPO, goal: "Ship it", ...CONTRACTS, ...deterministic() }),
  );
  // The next process finds the session and works in it; every call resolves.
  const next = hookedFs(memory);
  const [id] = await listRootSessionIds(next, REPO);
  assert.equal(id, "001_ship-it");
  const dir = `${REPO}/.loopy_loop/sessions/${id}`;
  const paths = new SessionPaths(dir, "folded");
  const identity = { iteration: 1, workflowId: "outer", attemptId: "attempt000001" };
  await updateSessionState(next, dir, (state) => {
    state.iteration = 1;
  }, { updatedAt: "2026-04-19T14:30:22Z" });
  await createAttemptArtifacts(next, paths, identity, {
    prompt: "p\n",
    pathsMap: { session_dir: dir },
    ...deterministic(),
  });
  await appendEvents(next, paths.eventsJsonl, id as string, [{ type: "tick" }], deterministic());
  await writeAttemptResult(
    next,
    paths.attempt(1, "outer"),
    { schema_version: 1, status: "ok" },
    deterministic(),
  );
  // A power loss keeps exactly what was made durable: the session and all of it.
  const after = memory.crash({
    seed: 0,
    extraJournal: "none",
    tailMode: "none",
    rewriteMode: "durable",
  });
  assert.deepEqual(await listRootSessionIds(after, REPO), [id]);
  assert.deepEqual((await readEvents(after, paths.eventsJsonl)).map((e) => e.type), ["tick"]);
  const attempt = paths.attempt(1, "outer");
  assert.equal((await after.lstat(attempt.promptTxt)).kind, "file");
  assert.equal(
    JSON.parse(new TextDecoder().decode(await after.readFile(attempt.resultJson))).status,
    "ok",
  );
  assert.equal(
    JSON.parse(new TextDecoder().decode(await after.readFile(paths.stateJson))).iteration,
    1,
  );
});

test("a writer refused the repository root (allowed only .loopy_loop) still writes into a tree it found", async () => {
  const memory = new MemoryFs();
  await memory.mkdir(REPO);
  const created = await createRootSession(memory, {
    repoRoot: REPO,
    goal: "Ship it",
    ...CONTRACTS,
    ...deterministic(),
  });
  memory.syncAll();
  // Another process, which may not open the repository root (Deno permissions scoped to
  // .loopy_loop, or a root it may traverse but not list).
  const scoped = hookedFs(memory, {
    before: (method, args) => {
      const path = String(args[0]);
      if (!path.startsWith(`${REPO}/.loopy_loop`) && method !== "realPath") {
        throw new PermissionDenied(method, path);
      }
    },
  });
  await appendEvents(scoped, created.paths.eventsJsonl, created.sessionId, [{ type: "tick" }]);
  await updateSessionState(scoped, created.dir, (state) => {
    state.iteration = 1;
  }, { updatedAt: "2026-04-19T14:30:22Z" });
  assert.deepEqual(
    (await readEvents(memory, created.paths.eventsJsonl)).map((e) => e.type),
    ["tick"],
  );
});

test("a tree written without fsyncs keeps the writes a full-durability process resolved in it, .loopy_loop included", async () => {
  const memory = new MemoryFs();
  await memory.mkdir(REPO);
  memory.syncAll();
  // Made by a writer that never fsyncs (this library in "ordered" mode, or the engine itself).
  const created = await createRootSession(memory, {
    repoRoot: REPO,
    goal: "Ship it",
    ...CONTRACTS,
    ...deterministic(),
    durability: "ordered",
  });
  const next = hookedFs(memory);
  await appendEvents(next, created.paths.eventsJsonl, created.sessionId, [{ type: "tick" }]);
  const after = memory.crash({
    seed: 0,
    extraJournal: "none",
    tailMode: "none",
    rewriteMode: "durable",
  });
  assert.deepEqual(await listRootSessionIds(after, REPO), [created.sessionId]);
  assert.deepEqual((await readEvents(after, created.paths.eventsJsonl)).map((e) => e.type), [
    "tick",
  ]);
});

test("a record found written that another actor removes or replaces before it is synced leaves the call standing", async () => {
  for (const swap of ["symlink", "remove"] as const) {
    const memory = new MemoryFs();
    await memory.mkdir(REPO);
    await memory.mkdir("/shared");
    await ensureRepository(memory, REPO);
    await memory.writeFile("/shared/ignore", await memory.readFile(`${REPO}/.gitignore`));
    memory.syncAll();
    // The user's tooling swaps .gitignore for a link, or removes it, right after it is read.
    let swapped = false;
    const fs = hookedFs(memory, {
      after: async (method, args) => {
        const read = method === "readFileNoFollow" || method === "readFile";
        if (!swapped && read && args[0] === `${REPO}/.gitignore`) {
          swapped = true;
          await memory.remove(`${REPO}/.gitignore`);
          if (swap === "symlink") await memory.symlink("/shared/ignore", `${REPO}/.gitignore`);
        }
      },
    });
    const record = await ensureRepository(fs, REPO);
    assert.ok(swapped, swap);
    assert.equal(typeof record.repository_id, "string", swap);
  }
});
