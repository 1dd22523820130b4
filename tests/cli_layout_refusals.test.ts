// The layout commands' refusals and reports: a reference the grammar refuses, a repository whose
// tree `layout resolve` cannot choose alone, a listed tree that cannot be loaded (reported beside
// the others, exit 1), and arguments a command does not take. Nothing is written by any of them.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { runInRepo } from "./_cli_io.ts";
import { newRepo, newRoot } from "./layout_fixtures.ts";

test("layout resolve without --session picks the one tree, and refuses to guess among several", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/.loopy_loop", { recursive: true });
  const none = await runInRepo(fs, ["layout", "resolve", "session:/state.json"]);
  assert.equal(none.code, 2, none.err);
  assert.match(none.err, /^usage error: pass --session: the repository has 0 session trees\n/);
  const empty = await runInRepo(fs, ["layout", "tree"]);
  assert.deepEqual([empty.code, empty.out], [0, "No sessions found.\n"]);
  const first = await newRoot(fs, "First program");
  const one = await runInRepo(fs, ["layout", "resolve", "session:/state.json", "--json"]);
  assert.equal(one.code, 0, one.err);
  const resolved = JSON.parse(one.out);
  assert.equal(resolved.sessionId, first.sessionId);
  assert.equal(resolved.path, `${first.dir}/state.json`);
  const second = await newRoot(fs, "Second program");
  const before = fs.snapshotTree();
  const two = await runInRepo(fs, ["layout", "resolve", "session:/state.json"]);
  assert.equal(two.code, 2, two.err);
  assert.match(two.err, /^usage error: pass --session: the repository has 2 session trees\n/);
  const chosen = await runInRepo(fs, [
    "layout",
    "resolve",
    "session:/state.json",
    "--session",
    second.sessionId,
  ]);
  assert.equal(chosen.code, 0, chosen.err);
  assert.equal(chosen.out, `${second.dir}/state.json\n`);
  assert.deepEqual(fs.snapshotTree(), before);
});

test("layout resolve refuses a reference outside the grammar as a usage error, reading nothing", async () => {
  const fs = await newRepo();
  await newRoot(fs, "A program");
  let reads = 0;
  const counted = new Proxy(fs, {
    get(target, property) {
      const value = Reflect.get(target, property);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        reads++;
        return value.apply(target, args);
      };
    },
  });
  for (const reference of ["session:/../escape", "session:/a//b", "nope:/x", "/etc/passwd"]) {
    const result = await runInRepo(counted as MemoryFs, ["layout", "resolve", reference]);
    assert.equal(result.code, 2, `${reference}: ${result.err}`);
    assert.match(result.err, /^usage error: /);
    assert.equal(result.out, "");
  }
  assert.equal(reads, 0, "refused before any file is touched");
});

test("layout tree reports a tree it cannot load beside the others, and exits 1", async () => {
  const fs = await newRepo();
  const healthy = await newRoot(fs, "Healthy program");
  const broken = await newRoot(fs, "Broken program");
  await fs.writeFile(`${broken.dir}/session.json`, new TextEncoder().encode("{"));
  const before = fs.snapshotTree();
  const listed = await runInRepo(fs, ["layout", "tree"]);
  assert.equal(listed.code, 1, listed.err);
  assert.ok(listed.out.includes(healthy.sessionId), listed.out);
  assert.match(listed.out, new RegExp(`  ${broken.sessionId}  invalid tree \\(.+\\)\\n`));
  const json = JSON.parse((await runInRepo(fs, ["layout", "tree", "--json"])).out);
  const trees = new Map(json.trees.map((tree: { root: string }) => [tree.root, tree]));
  assert.equal((trees.get(healthy.sessionId) as { error?: string }).error, undefined);
  const failed = trees.get(broken.sessionId) as { sessions: unknown[]; error: string };
  assert.deepEqual(failed.sessions, []);
  assert.equal(typeof failed.error, "string");
  // Named, the tree must load: its error is the command's.
  const named = await runInRepo(fs, ["layout", "tree", broken.sessionId]);
  assert.equal(named.code, 1);
  assert.match(named.err, /^error: /);
  assert.equal(named.out, "");
  assert.deepEqual(fs.snapshotTree(), before);
});

test("layout and traces commands refuse arguments they do not take, as usage errors", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs, "A program");
  const cases: [string[], RegExp][] = [
    [["layout", "tree", root.sessionId, root.sessionId], /layout tree takes at most one ROOT/],
    [["layout", "show"], /layout show takes one <session id>/],
    [["layout", "show", root.sessionId, root.sessionId], /layout show takes one <session id>/],
    [["layout", "resolve"], /layout resolve takes one <logical ref>/],
    [["layout", "resolve", "session:/a", "session:/b"], /layout resolve takes one <logical ref>/],
    [["prune-raw", "extra"], /prune-raw takes no positional arguments/],
    [["traces", "list", "extra"], /traces list takes no positional arguments/],
    [["traces", "inspect"], /traces inspect takes one <attempt or manifest id>/],
    [["traces", "inspect", "a", "b"], /traces inspect takes one <attempt or manifest id>/],
    [["layout", "frobnicate"], /unknown command 'layout frobnicate'/],
    [["traces", "frobnicate"], /unknown command 'traces frobnicate'/],
  ];
  const before = fs.snapshotTree();
  for (const [args, message] of cases) {
    const result = await runInRepo(fs, args);
    assert.equal(result.code, 2, `${args.join(" ")}: ${result.err}`);
    assert.match(result.err, message, args.join(" "));
    assert.equal(result.out, "", args.join(" "));
  }
  assert.deepEqual(fs.snapshotTree(), before);
});
