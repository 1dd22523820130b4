// On a case-insensitive filesystem (the default on macOS and Windows) a reference spelled with
// other letter case reaches the same file as the engine's spelling; the resolver classifies it by
// the spelling the directory lists, so `RAW/` output is raw and `Children/<id>/` is the child's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { LogicalReferenceResolver, pruneRaw, PRUNING_PREFIX } from "../layout.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";

/**
 * A case-insensitive view of a memory filesystem whose names are all lowercase: every absolute
 * path given to it is lowercased, while `readDir` reports the names as they are stored.
 */
function caseInsensitive(inner: MemoryFs): { fs: FileSystem; readDirs: string[] } {
  const readDirs: string[] = [];
  const fs = new Proxy(inner, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if (prop === "readDir") readDirs.push(String(args[0]));
        return value.apply(
          target,
          args.map((arg) =>
            typeof arg === "string" && arg.startsWith("/") ? arg.toLowerCase() : arg
          ),
        );
      };
    },
  }) as unknown as FileSystem;
  return { fs, readDirs };
}

test("on a case-insensitive filesystem, raw/ and children/ spelled in other case are classified as the engine spells them", async () => {
  const memory = new MemoryFs();
  await memory.mkdir("/repo");
  const tree = await buildFoldedTree(memory);
  const { fs, readDirs } = caseInsensitive(memory);
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: tree.rootId,
  });
  const report = "session:/raw/0001_outer/eval/report.json";
  const shouted = "session:/RAW/0001_outer/eval/report.json";
  const plan = `session:/children/${tree.childId}/project_state/plan.md`;
  const capitalized = `session:/Children/${tree.childId}/project_state/plan.md`;
  readDirs.length = 0;
  const exact = await resolver.resolve(report);
  assert.deepEqual(readDirs, [], "an exact spelling lists no directory");
  const folded = await resolver.resolve(shouted);
  assert.equal(folded.canonical, exact.canonical);
  assert.equal(folded.path, exact.path);
  assert.equal(folded.status, "present");
  const child = await resolver.resolve(plan);
  const childFolded = await resolver.resolve(capitalized);
  assert.equal(childFolded.canonical, `session:${tree.childId}:/project_state/plan.md`);
  assert.equal(childFolded.canonical, child.canonical);
  assert.equal((await resolver.holder(capitalized))?.sessionId, tree.childId);
  const viaRepo = await resolver.resolve(
    `repo:/.LOOPY_LOOP/Sessions/${tree.rootId}/CHILDREN/${tree.childId}/project_state/plan.md`,
  );
  assert.equal(viaRepo.canonical, child.canonical);
  await pruneRaw(memory, tree.loopyRoot);
  const pruned = await resolver.resolve(shouted);
  assert.deepEqual([pruned.exists, pruned.status], [false, "pruned"]);
});

test("on a case-sensitive filesystem, RAW/ is another directory than raw/", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/repo");
  const tree = await buildFoldedTree(fs);
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: tree.rootId,
  });
  const absent = await resolver.resolve("session:/RAW/0001_outer/eval/report.json");
  assert.deepEqual([absent.exists, absent.status], [false, "absent"]);
  assert.equal(absent.canonical, `session:${tree.rootId}:/RAW/0001_outer/eval/report.json`);
  // A real RAW/ beside raw/ is durable output of its own.
  await fs.mkdir(`${tree.root.dir}/RAW/0001_outer`, { recursive: true });
  const durable = await resolver.resolve("session:/RAW/0001_outer");
  assert.deepEqual([durable.exists, durable.status], [true, "present"]);
  assert.equal(durable.path, `${tree.root.dir}/RAW/0001_outer`);
});

test("a prune leftover named with its prefix in other case is gone for readers, as its exact spelling is", async () => {
  const memory = new MemoryFs();
  await memory.mkdir("/repo");
  const tree = await buildFoldedTree(memory);
  // A prune stopped after moving raw/0001_outer aside.
  await memory.rename(
    tree.prunable[0] as string,
    `${tree.root.rawDir}/${PRUNING_PREFIX}1a2b3c4d-0001_outer`,
  );
  const { fs } = caseInsensitive(memory);
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: tree.rootId,
  });
  for (const prefix of [".pruning-", ".PRUNING-", ".Pruning-"]) {
    for (const raw of ["raw", "RAW"]) {
      const resolved = await resolver.resolve(
        `session:/${raw}/${prefix}1a2b3c4d-0001_outer/eval/report.json`,
      );
      assert.deepEqual([resolved.exists, resolved.status], [false, "pruned"], `${raw}/${prefix}`);
    }
  }
});
