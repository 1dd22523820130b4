// A tree of the repository that cannot be read (a directory the process may not list, children
// nested past what the filesystem's paths take) is left out when another tree is loaded, as a
// corrupt one is: it does not make a healthy tree unavailable. Asked for itself, it fails with
// its storage error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FsIoError, PermissionDenied } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { loadSessionTree, TopologyError } from "../layout.ts";
import { hookedFs } from "./_hooks.ts";
import { newRepo, newRoot } from "./layout_fixtures.ts";

test("children nested past the path limit in another tree do not hide a healthy tree", async () => {
  for (const manifests of [true, false]) {
    const fs = await newRepo();
    const healthy = await newRoot(fs, "Healthy program");
    const other = await newRoot(fs, "Other program");
    // Nested until a path is too long: with a manifest at every level (sessions the tree's own
    // scan enters), or as plain directories below one bogus child (which it never enters).
    let dir = other.dir;
    if (!manifests) {
      dir = `${dir}/children/01_bad`;
      await fs.mkdir(dir, { recursive: true });
      await fs.writeFile(`${dir}/session.json`, new TextEncoder().encode("{}"));
    }
    // Levels of long names, then a last directory whose own path fits the limit (4,095 bytes)
    // but whose session.json or children/ does not: reading there fails with ENAMETOOLONG.
    for (let level = 0; dir.length < 3840; level++) {
      dir = `${dir}/children/${manifests ? `01_l${level}` : "d"}${"x".repeat(200)}`;
      await fs.mkdir(dir, { recursive: true });
      if (manifests) await fs.writeFile(`${dir}/session.json`, new TextEncoder().encode("{}"));
    }
    await fs.mkdir(`${dir}/children`);
    const last = `${dir}/children/${"z".repeat(4090 - dir.length - "/children/".length)}`;
    assert.equal(last.length, 4090);
    await fs.mkdir(last);
    await assert.rejects(fs.lstat(`${last}/session.json`), (error: unknown) => {
      return error instanceof FsIoError && error.code === "ENAMETOOLONG";
    });
    const tree = await loadSessionTree(fs, "/repo", healthy.sessionId);
    assert.deepEqual([...tree.nodes.keys()], [healthy.sessionId], `manifests: ${manifests}`);
    // The other tree is invalid itself, and says so when asked for.
    await assert.rejects(loadSessionTree(fs, "/repo", other.sessionId));
  }
});

test("a directory of another tree that cannot be read does not hide a healthy tree", async () => {
  const memory = await newRepo();
  const healthy = await newRoot(memory, "Healthy program");
  const other = await newRoot(memory, "Other program");
  await memory.mkdir(`${other.dir}/children/01_child`, { recursive: true });
  await memory.writeFile(`${other.dir}/children/01_child/session.json`, new Uint8Array());
  // The other tree's children/ (or its whole directory) may not be read, as after a chmod 000.
  for (const denied of [`${other.dir}/children`, other.dir]) {
    const fs: FileSystem = hookedFs(memory, {
      before: (op, args) => {
        const path = String(args[0]);
        if (path === denied || path.startsWith(`${denied}/`)) {
          if (op === "readDir" && path === denied || path !== denied) {
            throw new PermissionDenied(op, path);
          }
        }
      },
    });
    const tree = await loadSessionTree(fs, "/repo", healthy.sessionId);
    assert.deepEqual([...tree.nodes.keys()], [healthy.sessionId], denied);
    // Asked for, the unreadable tree fails with its own storage error, naming where.
    await assert.rejects(
      loadSessionTree(fs, "/repo", other.sessionId),
      (error: unknown) => error instanceof PermissionDenied && error.path.startsWith(denied),
    );
  }
});

test("a tree holding the id asked for fails with its storage error, whatever of it was readable", async () => {
  const memory = await newRepo();
  const root = await newRoot(memory, "Main program");
  for (const id of ["01_alpha", "02_beta"]) {
    await memory.mkdir(`${root.dir}/children/${id}`, { recursive: true });
    await memory.writeFile(`${root.dir}/children/${id}/session.json`, new Uint8Array());
  }
  // 01_alpha may not be read (as after a chmod 000): its tree cannot be loaded, so no session
  // of it, readable or not, is unknown: each fails with the storage error.
  const denied = `${root.dir}/children/01_alpha`;
  const fs: FileSystem = hookedFs(memory, {
    before: (op, args) => {
      const path = String(args[0]);
      if (path.startsWith(`${denied}/`) || (op === "readDir" && path === denied)) {
        throw new PermissionDenied(op, path);
      }
    },
  });
  for (const id of [root.sessionId, "01_alpha", "02_beta"]) {
    await assert.rejects(loadSessionTree(fs, "/repo", id), PermissionDenied, id);
  }
});

test("the invalid tree holding the id is reported, not another tree that could not be read", async () => {
  const memory = await newRepo();
  const unreadable = await newRoot(memory, "Other program"); // 001: sorts first
  await memory.mkdir(`${unreadable.dir}/children`, { recursive: true });
  const holder = await newRoot(memory, "Holder program");
  await memory.mkdir(`${holder.dir}/children/01_x`, { recursive: true });
  await memory.writeFile(
    `${holder.dir}/children/01_x/session.json`,
    new TextEncoder().encode("{}"),
  );
  const denied = `${unreadable.dir}/children`;
  const fs: FileSystem = hookedFs(memory, {
    before: (op, args) => {
      if (op === "readDir" && args[0] === denied) throw new PermissionDenied(op, denied);
    },
  });
  await assert.rejects(loadSessionTree(fs, "/repo", "01_x"), (error: unknown) => {
    assert.ok(error instanceof TopologyError, String(error));
    assert.equal(error.at, holder.dir);
    return true;
  });
  // An id no readable tree holds may be in the unreadable one: its storage error says so.
  await assert.rejects(loadSessionTree(fs, "/repo", "02_nowhere"), PermissionDenied);
});
