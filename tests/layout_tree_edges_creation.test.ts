// Creating sessions against other processes and odd trees: a root ordinal another creator takes
// around our reservation is skipped (and creation gives up after its bound); a staging directory
// published meanwhile stays whole; a .gitignore swapped for a link is left as it is; a root without
// a harness roster, or a child contradicting its legacy parent, is refused before writing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  createChildSession,
  createRootSession,
  LayoutError,
  LayoutRecordError,
  loadSessionTree,
  ordinalReservationName,
  removeStagingLeftovers,
  SessionIdError,
  sha256Ref,
} from "../layout.ts";
import { mirror, MIRROR_CHILD_ID, MIRROR_ROOT_ID } from "./fixtures/mirror_tree.ts";
import { hookedFs } from "./_hooks.ts";
import { AlreadyExists } from "../src/port/errors.ts";
import {
  childRequest,
  CONTRACTS,
  deterministic,
  newRepo,
  readJson,
  readText,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";

const SESSIONS = "/repo/.loopy_loop/sessions";

/** Deterministic options creating a root session for `goal` in `/repo`. */
function rootOptions(goal: string) {
  return { repoRoot: "/repo", goal, ...CONTRACTS, ...deterministic() };
}

/** A `session.json` of a root `001_beta`, as another process publishes it. */
async function betaManifest(): Promise<Uint8Array> {
  const other = new MemoryFs();
  await other.mkdir("/elsewhere");
  await createRootSession(other, { ...rootOptions("beta"), repoRoot: "/elsewhere" });
  return await other.readFile("/elsewhere/.loopy_loop/sessions/001_beta/session.json");
}

/** The names in the sessions directory of `memory`, sorted. */
async function sessionNames(memory: MemoryFs): Promise<string[]> {
  return (await memory.readDir(SESSIONS)).map((entry) => entry.name).sort();
}

/** `memory` with `race` run once `when` our reservation of ordinal 1 is written; `raced()`. */
function racingOrdinal(
  memory: MemoryFs,
  when: "before" | "after",
  race: () => Promise<void>,
): { fs: FileSystem; raced: () => boolean } {
  let raced = false;
  const hook = async (op: string, args: unknown[]) => {
    if (!raced && op === "writeFile" && args[0] === `${SESSIONS}/.ordinal-001`) {
      raced = true;
      await race();
    }
  };
  return { fs: hookedFs(memory, { [when]: hook }), raced: () => raced };
}

test("an ordinal another process reserves just before our reservation is skipped", async () => {
  const memory = await newRepo();
  // Another process (no shared in-process serialization) reserves ordinal 1 right before us.
  const { fs, raced } = racingOrdinal(memory, "before", async () => {
    await memory.writeFile(`${SESSIONS}/.ordinal-001`, new Uint8Array(), { createNew: true });
  });
  assert.equal((await createRootSession(fs, rootOptions("alpha"))).sessionId, "002_alpha");
  assert.ok(raced());
  // The other process's reservation is its own: left as it is; ours is released.
  assert.deepEqual(await sessionNames(memory), [".ordinal-001", "002_alpha"]);
});

test("an ordinal another process publishes right after our reservation is skipped", async () => {
  const memory = await newRepo();
  const beta = await betaManifest();
  // Another process reserved 1 before our scan, published 001_beta, and released its
  // reservation just as ours was created (the exclusive create could not see it).
  const { fs, raced } = racingOrdinal(memory, "after", async () => {
    await memory.mkdir(`${SESSIONS}/001_beta`);
    await memory.writeFile(`${SESSIONS}/001_beta/session.json`, beta);
  });
  assert.equal((await createRootSession(fs, rootOptions("alpha"))).sessionId, "002_alpha");
  assert.ok(raced());
  assert.deepEqual(await sessionNames(memory), ["001_beta", "002_alpha"]);
});

test("a staging directory published while leftovers are removed stays whole and is not reported", async () => {
  const memory = await newRepo();
  const staged = `${SESSIONS}/.staging-001_alpha-0123abcd`;
  const stale = `${SESSIONS}/.staging-002_beta-89abcdef`;
  for (const dir of [staged, stale]) {
    await memory.mkdir(dir, { recursive: true });
    await writeJson(memory, `${dir}/session.json`, { session_id: dir });
  }
  let published = false;
  // The creation of 001_alpha publishes its staging directory just before it is set aside.
  const fs = hookedFs(memory, {
    before: async (op, args) => {
      if (!published && op === "rename" && args[0] === staged) {
        published = true;
        await memory.rename(staged, `${SESSIONS}/001_alpha`);
      }
    },
  });
  assert.deepEqual(await removeStagingLeftovers(fs, SESSIONS), [".staging-002_beta-89abcdef"]);
  assert.ok(published);
  assert.deepEqual((await memory.readDir(SESSIONS)).map((entry) => entry.name), ["001_alpha"]);
  assert.deepEqual(await readJson(memory, `${SESSIONS}/001_alpha/session.json`), {
    session_id: staged,
  });
});

test("a reservation name for an ordinal that is not a positive integer is refused", () => {
  assert.equal(ordinalReservationName(7, 3), ".ordinal-007");
  assert.equal(ordinalReservationName(1234, 3), ".ordinal-1234");
  for (const ordinal of [0, -1, 1.5, Number.NaN, 2 ** 53]) {
    assert.throws(() => ordinalReservationName(ordinal, 3), SessionIdError, String(ordinal));
  }
});

test("a .gitignore swapped for a link while a root is created is left as it is, never written through", async () => {
  const memory = await newRepo();
  await writeText(memory, "/repo/.gitignore", "node_modules/\n");
  await memory.mkdir("/shared");
  await writeText(memory, "/shared/ignore", "dist/\n");
  let swapped = false;
  // Once the creation has seen a regular .gitignore, the user replaces it with a link.
  const fs = hookedFs(memory, {
    after: async (op, args) => {
      if (!swapped && op === "lstat" && args[0] === "/repo/.gitignore") {
        swapped = true;
        await memory.remove("/repo/.gitignore");
        await memory.symlink("/shared/ignore", "/repo/.gitignore");
      }
    },
  });
  assert.equal((await createRootSession(fs, rootOptions("alpha"))).sessionId, "001_alpha");
  assert.ok(swapped);
  assert.equal((await memory.lstat("/repo/.gitignore")).kind, "symlink");
  assert.equal(await memory.readLink("/repo/.gitignore"), "/shared/ignore");
  assert.equal(await readText(memory, "/shared/ignore"), "dist/\n");
});

test("a root without a harness capability roster is refused, leaving no session behind", async () => {
  const fs = await newRepo();
  const { harnessCapabilityRoster: _roster, ...contracts } = CONTRACTS;
  const options = { repoRoot: "/repo", goal: "alpha", ...contracts, ...deterministic() };
  await assert.rejects(
    createRootSession(fs, options as unknown as Parameters<typeof createRootSession>[1]),
    (error: unknown) => {
      assert.ok(error instanceof LayoutError, String(error));
      assert.match(error.message, /needs the root's harness capability roster/);
      return true;
    },
  );
  // No session, no staging directory, no ordinal reservation.
  assert.deepEqual(await fs.readDir(SESSIONS), []);
});

test("a child whose root or depth contradicts its legacy v1 parent is refused before writing", async () => {
  const { fs, tree } = await mirror();
  // Legacy v1 manifests record no root and no depth; the tree's nesting gives both.
  for (
    const [dir, id, parent] of [
      [tree.rootDir, MIRROR_ROOT_ID, null],
      [tree.childDir, MIRROR_CHILD_ID, MIRROR_ROOT_ID],
    ] as const
  ) {
    const manifest = await readJson(fs, `${dir}/session.json`);
    await writeJson(fs, `${dir}/session.json`, {
      schema_version: 1,
      session_id: id,
      goal_hash: manifest.goal_hash,
      workflow_set: "main",
      parent_session_id: parent,
      created_at: manifest.created_at,
    });
  }
  const request = childRequest("r1");
  const requestBytes = new TextEncoder().encode(JSON.stringify(request));
  const options = (parentDir: string, parentSessionId: string, root: string, depth: number) => ({
    parentDir,
    parentSessionId,
    rootSessionId: root,
    parentDepth: depth,
    sessionId: "01_r1",
    request,
    requestBytes,
    inputs: [],
    harnessCapabilityRosterSha256: sha256Ref(requestBytes),
    ...CONTRACTS,
    ...deterministic(),
  });
  const cases: [string, string, string, number, string, unknown][] = [
    [tree.rootDir, MIRROR_ROOT_ID, "002_other", 0, "root_session_id", "002_other"],
    [tree.rootDir, MIRROR_ROOT_ID, MIRROR_ROOT_ID, 2, "depth", 3],
    [tree.childDir, MIRROR_CHILD_ID, "002_other", 1, "root_session_id", "002_other"],
    [tree.childDir, MIRROR_CHILD_ID, MIRROR_CHILD_ID, 1, "root_session_id", MIRROR_CHILD_ID],
    [tree.childDir, MIRROR_CHILD_ID, MIRROR_ROOT_ID, 0, "depth", 1],
    [tree.childDir, MIRROR_CHILD_ID, MIRROR_ROOT_ID, 4, "depth", 5],
  ];
  const before = fs.snapshotTree("/");
  for (const [dir, parentId, root, depth, field, value] of cases) {
    const what = `${parentId} ${root} ${depth}`;
    await assert.rejects(createChildSession(fs, options(dir, parentId, root, depth)), (error) => {
      assert.ok(error instanceof LayoutRecordError, `${what}: ${error}`);
      assert.equal(error.file, `${dir}/children/01_r1/session.json`, what);
      assert.equal(error.path, field, what);
      assert.equal(error.value, value, what);
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, what);
  }
  // The tree still loads, and the identity its nesting gives creates a child that keeps it so.
  await loadSessionTree(fs, tree.repoRoot, MIRROR_ROOT_ID);
  const created = await createChildSession(
    fs,
    options(tree.childDir, MIRROR_CHILD_ID, MIRROR_ROOT_ID, 1),
  );
  const loaded = await loadSessionTree(fs, tree.repoRoot, created.sessionId);
  assert.equal(loaded.require(created.sessionId).depth, 2);
  assert.equal(loaded.require(created.sessionId).parentSessionId, MIRROR_CHILD_ID);
});

test("a root creation whose every ordinal another process reserves first gives up, leaving nothing", async () => {
  const memory = await newRepo();
  let tries = 0;
  // Another process always reserves the ordinal chosen (and releases it before the next scan).
  const fs = hookedFs(memory, {
    before: (op, args) => {
      if (op === "writeFile" && /\/\.ordinal-\d+$/.test(String(args[0]))) {
        tries++;
        throw new AlreadyExists("open", String(args[0]));
      }
    },
  });
  await assert.rejects(createRootSession(fs, rootOptions("alpha")), (error: unknown) => {
    assert.ok(error instanceof LayoutError, String(error));
    assert.match(error.message, /Could not reserve a root session ordinal .* after 1000 attempts/);
    return true;
  });
  assert.equal(tries, 1000);
  assert.deepEqual(await memory.readDir(SESSIONS), []);
});
