// A session tree whose topology lies (a linked parent.json or child, an id twice, a children/
// that is a file, a linked or file `.loopy_loop/`, a directory swapped while it loads) is refused
// naming where; entries that are no session are neither listed nor loaded; the working session
// is refused when a state's active child is not its published child.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  assertReceivesWork,
  findWorkingSession,
  listRootSessionIds,
  loadSessionTree,
  SessionStateError,
  TopologyError,
  UnknownSessionError,
} from "../layout.ts";
import { hookedFs } from "./_hooks.ts";
import { newRepo, newRoot, patchState, readJson, writeJson, writeText } from "./layout_fixtures.ts";

/**
 * Plants a published child `childId` in `parentDir/children/`, as the engine would: its
 * `session.json` derived from the parent's and its `parent.json`. Returns its directory.
 */
async function plantChild(fs: MemoryFs, parentDir: string, childId: string): Promise<string> {
  const parent = await readJson(fs, `${parentDir}/session.json`);
  const dir = `${parentDir}/children/${childId}`;
  await fs.mkdir(dir, { recursive: true });
  await writeJson(fs, `${dir}/session.json`, {
    ...parent,
    session_id: childId,
    parent_session_id: parent.session_id,
    root_session_id: parent.root_session_id,
    depth: Number(parent.depth) + 1,
  });
  await writeJson(fs, `${dir}/parent.json`, {
    schema_version: 1,
    parent_session_id: parent.session_id,
    parent_relative_path: "../..",
    created_at: "2026-04-19T14:30:22Z",
  });
  return dir;
}

/** Asserts `error` is a `TopologyError` found at `at` whose message says `says`. */
function topology(at: string, says: RegExp): (error: unknown) => boolean {
  return (error: unknown) => {
    assert.ok(error instanceof TopologyError, String(error));
    assert.equal(error.at, at);
    assert.match(error.message, says);
    return true;
  };
}

/** Asserts `error` is the tree at `rootDir` refused (`outer`) for a topology error at `at`. */
function invalidTree(
  rootDir: string,
  at: string,
  says: RegExp,
  outer = /invalid topology/,
): (error: unknown) => boolean {
  return (error: unknown) => {
    topology(rootDir, outer)(error);
    return topology(at, says)((error as TopologyError).cause);
  };
}

test("a child's parent.json that is a symlink is refused, naming it, and nothing is read through it", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const child = await plantChild(fs, root.dir, "01_child");
  await fs.remove(`${child}/parent.json`);
  await fs.symlink("/elsewhere/parent.json", `${child}/parent.json`);
  const before = fs.snapshotTree("/");
  let read = false;
  const watched = hookedFs(fs, {
    before: (op, args) => {
      if (String(args[0]).startsWith("/elsewhere")) read = true;
      if (/^(read|open)/.test(op) && args[0] === `${child}/parent.json`) read = true;
    },
  });
  for (const id of [root.sessionId, "01_child"]) {
    await assert.rejects(
      loadSessionTree(watched, "/repo", id),
      invalidTree(
        root.dir,
        `${child}/parent.json`,
        /Parent manifest may not be a symlink/,
        /belongs to an invalid topology/,
      ),
    );
  }
  assert.equal(read, false);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a child without parent.json loads, its place under children/ naming its parent; a root with one is refused", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const child = await plantChild(fs, root.dir, "01_child");
  await fs.remove(`${child}/parent.json`);
  const tree = await loadSessionTree(fs, "/repo", "01_child");
  const node = tree.require("01_child");
  assert.equal(node.parentSessionId, root.sessionId);
  assert.equal(node.depth, 1);
  assert.deepEqual(tree.require(root.sessionId).childIds, ["01_child"]);
  // The other way round: a root holding a parent.json is not a root.
  await writeJson(fs, `${root.dir}/parent.json`, {
    schema_version: 1,
    parent_session_id: "01_child",
    parent_relative_path: "../..",
    created_at: "2026-04-19T14:30:22Z",
  });
  await assert.rejects(
    loadSessionTree(fs, "/repo", root.sessionId),
    invalidTree(
      root.dir,
      `${root.dir}/parent.json`,
      /A root session must not contain parent\.json/,
    ),
  );
});

test("a child directory named like its own root is a duplicate id, refused naming both places", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  // A child whose id is the root's: its manifest matches its directory name, its parent is real.
  const twin = await plantChild(fs, root.dir, root.sessionId);
  const before = fs.snapshotTree("/");
  await assert.rejects(loadSessionTree(fs, "/repo", root.sessionId), (error: unknown) => {
    topology(root.dir, /invalid topology/)(error);
    const cause = (error as TopologyError).cause;
    topology(twin, /Duplicate session id/)(cause);
    assert.match((cause as Error).message, new RegExp(`also ${root.dir}\\)`));
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("an id of the loaded tree that another tree also holds is refused, naming the other", async () => {
  const fs = await newRepo();
  const first = await newRoot(fs, "First program");
  const second = await newRoot(fs, "Second program");
  await plantChild(fs, first.dir, "01_shared");
  const other = await plantChild(fs, second.dir, "01_shared");
  // Either root, asked for itself, meets the child id the other tree holds too.
  await assert.rejects(
    loadSessionTree(fs, "/repo", first.sessionId),
    topology(other, /Duplicate session id "01_shared" in two trees/),
  );
  await assert.rejects(
    loadSessionTree(fs, "/repo", second.sessionId),
    topology(`${first.dir}/children/01_shared`, /Duplicate session id "01_shared" in two trees/),
  );
  // Without the second child, the trees are independent and each knows the other's ids.
  await fs.remove(other, { recursive: true });
  const tree = await loadSessionTree(fs, "/repo", first.sessionId);
  assert.deepEqual([...tree.idsElsewhere], [second.sessionId]);
});

test("a session's children path that is a file is refused, naming it", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await fs.remove(`${root.dir}/children`, { recursive: true }).catch(() => undefined);
  await writeText(fs, `${root.dir}/children`, "not a directory");
  const before = fs.snapshotTree("/");
  await assert.rejects(
    loadSessionTree(fs, "/repo", root.sessionId),
    invalidTree(root.dir, `${root.dir}/children`, /children path is not a directory/),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a .loopy_loop or sessions/ that is a file or a symlink is refused by loading and listing", async () => {
  for (
    const [place, planted] of [
      [".loopy_loop", "file"],
      [".loopy_loop/sessions", "file"],
      [".loopy_loop", "symlink"],
      [".loopy_loop/sessions", "symlink"],
    ] as const
  ) {
    const fs = await newRepo();
    const path = `/repo/${place}`;
    await fs.mkdir("/repo/.loopy_loop");
    await fs.mkdir("/real/sessions/001_a", { recursive: true });
    if (place === ".loopy_loop") await fs.remove(path, { recursive: true });
    if (planted === "file") await writeText(fs, path, "{}");
    else await fs.symlink(place === ".loopy_loop" ? "/real" : "/real/sessions", path);
    const says = planted === "file" ? /Expected a directory/ : /may not use a symlink/;
    await assert.rejects(loadSessionTree(fs, "/repo", "001_a"), topology(path, says));
    await assert.rejects(listRootSessionIds(fs, "/repo"), topology(path, says));
  }
});

test("top-level entries that are not session directories are neither listed nor loaded", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const sessions = "/repo/.loopy_loop/sessions";
  await writeText(fs, `${sessions}/002_a-file`, "{}");
  await fs.mkdir(`${sessions}/003_no-manifest`);
  await fs.mkdir(`${sessions}/.staging-004`);
  await writeJson(fs, `${sessions}/.staging-004/session.json`, {});
  await fs.symlink(root.dir, `${sessions}/005_link`);
  assert.deepEqual((await listRootSessionIds(fs, "/repo")).sort(), [root.sessionId, "005_link"]);
  // The root loads whatever lies beside it; none of the others is a session.
  assert.deepEqual([...(await loadSessionTree(fs, "/repo", root.sessionId)).nodes.keys()], [
    root.sessionId,
  ]);
  for (const id of ["002_a-file", "003_no-manifest"]) {
    await assert.rejects(loadSessionTree(fs, "/repo", id), UnknownSessionError, id);
  }
  // A link asked for by its name is refused as a link, never followed to the tree it names.
  await assert.rejects(
    loadSessionTree(fs, "/repo", "005_link"),
    topology(`${sessions}/005_link`, /may not use a symlink/),
  );
});

test("a top-level session directory swapped for a link or a file while the tree loads is refused", async () => {
  for (const planted of ["symlink", "file"] as const) {
    const memory = await newRepo();
    const root = await newRoot(memory);
    const moved = "/elsewhere/moved";
    await memory.mkdir("/elsewhere");
    let swapped = false;
    const fs = hookedFs(memory, {
      after: async (op, args) => {
        // Once the loader has seen the directory's session.json, the directory is replaced.
        if (!swapped && op === "lstat" && args[0] === `${root.dir}/session.json`) {
          swapped = true;
          await memory.rename(root.dir, moved);
          if (planted === "symlink") await memory.symlink(moved, root.dir);
          else await writeText(memory, root.dir, "{}");
        }
      },
    });
    const says = planted === "symlink" ? /may not use a symlink/ : /Expected a session directory/;
    await assert.rejects(
      loadSessionTree(fs, "/repo", root.sessionId),
      invalidTree(root.dir, root.dir, says),
      planted,
    );
    assert.ok(swapped, planted);
  }
});

test("a terminal root tree has no working session and gives work to none", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await patchState(fs, root.dir, { status: "goal_met" });
  const tree = await loadSessionTree(fs, "/repo", root.sessionId);
  assert.equal(await findWorkingSession(fs, tree), undefined);
  await assert.rejects(assertReceivesWork(fs, tree, root.sessionId), (error: unknown) => {
    assert.ok(error instanceof SessionStateError, String(error));
    assert.match(error.message, /The session tree is terminal/);
    return true;
  });
});

test("an active child that is not a published child of the session is refused, naming the state", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const child = await plantChild(fs, root.dir, "01_child");
  const grandchild = await plantChild(fs, child, "01_grandchild");
  await writeJson(fs, `${child}/state.json`, {
    ...(await readJson(fs, `${root.dir}/state.json`)),
    session_id: "01_child",
    active_session_id: "01_child",
  });
  await writeJson(fs, `${grandchild}/state.json`, {
    ...(await readJson(fs, `${root.dir}/state.json`)),
    session_id: "01_grandchild",
    active_session_id: "01_grandchild",
  });
  const tree = await loadSessionTree(fs, "/repo", root.sessionId);
  // Unknown in the tree, or in it but a grandchild: neither is this session's child.
  for (const active of ["01_missing", "01_grandchild"]) {
    await patchState(fs, root.dir, { active_child_session_id: active });
    const before = fs.snapshotTree("/");
    await assert.rejects(
      findWorkingSession(fs, tree),
      topology(
        `${root.dir}/state.json`,
        new RegExp(`Active child "${active}" is not a published child of ${root.sessionId}`),
      ),
    );
    await assert.rejects(assertReceivesWork(fs, tree, root.sessionId), TopologyError);
    assert.deepEqual(fs.snapshotTree("/"), before);
  }
  // Its real child is followed.
  await patchState(fs, root.dir, { active_child_session_id: "01_child" });
  assert.equal((await findWorkingSession(fs, tree))?.node.sessionId, "01_child");
});

test("a loaded tree refuses a session it does not hold", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const tree = await loadSessionTree(fs, "/repo", root.sessionId);
  assert.equal(tree.paths(root.sessionId).dir, root.dir);
  assert.throws(() => tree.paths("002_other"), (error: unknown) => {
    assert.ok(error instanceof UnknownSessionError, String(error));
    assert.match(error.message, /not in this tree/);
    return true;
  });
});

test("an id found only in a staging directory or as a file of a broken tree is unknown", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const children = `${root.dir}/children`;
  // The tree is broken (a child manifest that is no manifest), so the loader looks for the id in
  // it: a staged child's own children and a plain file are not sessions of it.
  await fs.mkdir(`${children}/01_broken`, { recursive: true });
  await writeText(fs, `${children}/01_broken/session.json`, "{}");
  await fs.mkdir(`${children}/.staging-02/children/02_staged`, { recursive: true });
  await writeJson(fs, `${children}/.staging-02/session.json`, {});
  await writeJson(fs, `${children}/.staging-02/children/02_staged/session.json`, {});
  await writeText(fs, `${children}/03_file`, "{}");
  const before = fs.snapshotTree("/");
  for (const id of ["02_staged", "03_file"]) {
    await assert.rejects(loadSessionTree(fs, "/repo", id), (error: unknown) => {
      assert.ok(error instanceof UnknownSessionError, `${id}: ${error}`);
      return true;
    });
  }
  // The broken child itself is reported with its tree.
  await assert.rejects(
    loadSessionTree(fs, "/repo", "01_broken"),
    topology(root.dir, /invalid topology/),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a child directory planted as a symlink is reported with its tree when asked for, never as unknown", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory);
  await memory.mkdir("/elsewhere/01_linked", { recursive: true });
  await writeJson(memory, "/elsewhere/01_linked/session.json", {});
  await memory.mkdir(`${root.dir}/children`, { recursive: true });
  const link = `${root.dir}/children/01_linked`;
  await memory.symlink("/elsewhere/01_linked", link);
  let followed = false;
  const fs = hookedFs(memory, {
    before: (_op, args) => {
      if (String(args[0]).startsWith("/elsewhere") || String(args[0]).startsWith(`${link}/`)) {
        followed = true;
      }
    },
  });
  const before = memory.snapshotTree("/");
  // As a link in place of a top-level session is, whichever of the tree's ids is asked for.
  for (const id of [root.sessionId, "01_linked"]) {
    await assert.rejects(
      loadSessionTree(fs, "/repo", id),
      invalidTree(root.dir, link, /may not use a symlink/),
      id,
    );
  }
  assert.equal(followed, false);
  assert.deepEqual(memory.snapshotTree("/"), before);
});
