// What the command line prints at the edges: the prune summary's finalization outbox entries (an
// interrupted prune's leftover there counted with them), a reference resolved in a tree with no
// live session, an empty trace listing, a session's children, the layout commands' help, and the
// output functions on short rows, deep objects, odd write errors and a full pipe.
import { test } from "node:test";
import assert from "node:assert/strict";
import { jsonText, OutputError, table, writeFully } from "../src/cli/output.ts";
import { PRUNING_PREFIX } from "../src/layout/loopy_root.ts";
import { runInRepo, shownRows } from "./_cli_io.ts";
import { processNextChildRequest, publishChildRequest } from "../layout.ts";
import {
  childRequest,
  commitTerminalState,
  deterministic,
  newRepo,
  newRoot,
  writeText,
} from "./layout_fixtures.ts";

const LOOPY = "/repo/.loopy_loop";
const OUTBOX = `${LOOPY}/trace_finalization_outbox`;

test("prune-raw --legacy-traces counts outbox entries, an interrupted prune's leftover there too", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  await fs.mkdir(`${LOOPY}/traces/T1`, { recursive: true });
  await writeText(fs, `${LOOPY}/traces/T1/trace.txt`, "t");
  await fs.mkdir(OUTBOX);
  await writeText(fs, `${OUTBOX}/a--b--final.json`, "xx");
  const one = await runInRepo(fs, ["prune-raw", "--legacy-traces", "--dry-run"]);
  assert.equal(one.code, 0, one.err);
  assert.equal(
    one.out.split("\n").at(-2),
    "would prune 0 raw attempt dir(s); would remove 1 legacy trace tree(s) and 1 finalization " +
      "outbox entry, 3 B",
  );
  // What an interrupted prune left in the outbox is an outbox entry, not a raw attempt.
  await fs.mkdir(`${OUTBOX}/${PRUNING_PREFIX}00000000-0005_x`);
  await writeText(fs, `${OUTBOX}/${PRUNING_PREFIX}00000000-0005_x/f.json`, "yyyy");
  const before = fs.snapshotTree();
  const two = await runInRepo(fs, ["prune-raw", "--legacy-traces", "--dry-run"]);
  assert.equal(two.code, 0, two.err);
  assert.equal(
    two.out,
    `would remove ${LOOPY}/traces/T1 (1 B)\n` +
      `would remove ${OUTBOX}/${PRUNING_PREFIX}00000000-0005_x (4 B)\n` +
      `would remove ${OUTBOX}/a--b--final.json (2 B)\n` +
      "would prune 0 raw attempt dir(s); would remove 1 legacy trace tree(s) and 2 finalization " +
      "outbox entries, 7 B\n",
  );
  assert.deepEqual(fs.snapshotTree(), before);
  const done = await runInRepo(fs, ["prune-raw", "--legacy-traces"]);
  assert.equal(done.code, 0, done.err);
  assert.equal(
    done.out.split("\n").at(-2),
    "pruned 0 raw attempt dir(s); removed 1 legacy trace tree(s) and 2 finalization outbox " +
      "entries, 7 B",
  );
  assert.deepEqual(await fs.readDir(OUTBOX), []);
});

test("layout resolve without --session resolves in the root of a tree that has no live session", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await commitTerminalState(fs, root.dir, "goal_met", 5, "2026-04-20T00:00:00Z");
  const before = fs.snapshotTree();
  const resolved = await runInRepo(fs, ["layout", "resolve", "session:/state.json", "--json"]);
  assert.equal(resolved.code, 0, resolved.err);
  const json = JSON.parse(resolved.out);
  assert.equal(json.sessionId, root.sessionId);
  assert.equal(json.path, `${root.dir}/state.json`);
  const tree = await runInRepo(fs, ["layout", "tree"]);
  assert.equal(tree.out, `  ${root.sessionId}  goal_met\n`);
  assert.deepEqual(fs.snapshotTree(), before);
});

test("traces list says when there are no traces", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  assert.deepEqual(await runInRepo(fs, ["traces", "list"]), {
    code: 0,
    out: "No traces found.\n",
    err: "",
  });
  assert.deepEqual(await runInRepo(fs, ["traces", "list", "--json"]), {
    code: 0,
    out: "[]\n",
    err: "",
  });
});

test("table leaves the missing cells of a short row empty", () => {
  assert.equal(
    table(["ID", "STATE", "TITLE"], [["a"], ["b", "pinned", "t"]]),
    "ID  STATE   TITLE\na\nb   pinned  t\n",
  );
});

test("jsonText writes the object members of levels past the indented ones as JSON.stringify does", () => {
  const depth = 30_000;
  let deep: unknown = { leaf: [1, "two"] };
  for (let i = 0; i < depth; i++) deep = { k: deep, n: i };
  assert.throws(() => JSON.stringify(deep, null, 2), RangeError);
  const text = jsonText(deep);
  // Indented levels as JSON.stringify(value, null, 2) writes them, deeper ones on one line.
  assert(text.startsWith(`{\n  "k": {\n    "k": {\n`), text.slice(0, 100));
  assert(text.includes(`\n${"  ".repeat(100)}"k": {"k":{"k":`));
  assert(text.includes(`{"k":{"leaf":[1,"two"]},"n":0},"n":1}`));
  let value = JSON.parse(text);
  for (let i = depth - 1; i >= 0; i--) {
    assert.equal(value.n, i);
    value = value.k;
  }
  assert.deepEqual(value, { leaf: [1, "two"] });
});

test("a write error whose cause is no Error is said by its text", () => {
  const error = new OutputError("stdout", "EBADF");
  assert.equal(error.message, "cannot write to stdout: EBADF");
  assert.equal(error.stream, "stdout");
  assert.equal(error.cause, "EBADF");
  assert.equal(
    new OutputError("stderr", new Error("No space left on device")).message,
    "cannot write to stderr: No space left on device",
  );
});

test("writeFully waits for a reader of a full pipe before it writes the rest", () => {
  const chunks: number[] = [];
  let full = 2;
  const started = performance.now();
  const wrote = writeFully((offset) => {
    if (full-- > 0) {
      throw Object.assign(new Error("resource temporarily unavailable"), {
        code: "EAGAIN",
      });
    }
    chunks.push(offset);
    return 4;
  }, 8);
  // Two waits, of 1 ms and then 2 ms, before the writes go through.
  assert.equal(wrote, true);
  assert.deepEqual(chunks, [0, 4]);
  assert(performance.now() - started >= 2.5, `${performance.now() - started} ms`);
});

test("layout show lists a session's children, and a child its parent and depth", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await publishChildRequest(fs, root.paths, childRequest("phase-0-foundations"));
  await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: root.sessionId,
    ...deterministic(),
  });
  const child = "01_phase-0-foundations";
  const rows = async (id: string): Promise<Map<string, string>> => {
    const shown = await runInRepo(fs, ["layout", "show", id]);
    assert.equal(shown.code, 0, shown.err);
    return shownRows(shown.out);
  };
  const parent = await rows(root.sessionId);
  assert.deepEqual(
    [parent.get("depth"), parent.get("parent"), parent.get("children")],
    ["0", "-", child],
  );
  const shown = await rows(child);
  assert.deepEqual(
    [shown.get("depth"), shown.get("parent"), shown.get("root"), shown.get("children")],
    ["1", root.sessionId, root.sessionId, "-"],
  );
  assert.equal(shown.get("dir"), `${root.dir}/children/${child}`);
});

test("layout, prune-raw and traces commands print their help with --help, reading nothing", async () => {
  const fs = await newRepo();
  const before = fs.snapshotTree();
  const cases: [string[], string][] = [
    [["layout", "tree", "--help"], "Usage: loop-sessions layout tree [ROOT] [--json]\n"],
    [["layout", "show", "-h"], "Usage: loop-sessions layout show <session id> [--json]\n"],
    [
      ["layout", "resolve", "--help"],
      "Usage: loop-sessions layout resolve <logical ref> [--session ID] [--json]\n",
    ],
    [["prune-raw", "--help"], "Usage: loop-sessions prune-raw [--older-than DAYS] "],
    [["traces", "list", "--help"], "Usage: loop-sessions traces list [--json]\n"],
  ];
  // No .loopy_loop/ here: the help needs none.
  for (const [args, start] of cases) {
    const shown = await runInRepo(fs, args);
    assert.equal(shown.code, 0, `${args.join(" ")}: ${shown.err}`);
    assert.equal(shown.err, "");
    assert(shown.out.startsWith(start), shown.out);
    assert(shown.out.endsWith(".\n"), shown.out);
  }
  assert.deepEqual(fs.snapshotTree(), before);
});
