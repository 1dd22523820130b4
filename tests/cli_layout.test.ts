import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runLayout, runPruneRaw, runTraces } from "../src/cli/layout.ts";
import { memoryIo } from "./_cli_io.ts";
import { hookedFs } from "./_hooks.ts";
import { FsIoError } from "../src/port/errors.ts";
import {
  createAttemptArtifacts,
  createRootSession,
  processNextChildRequest,
  publishChildRequest,
} from "../layout.ts";
import { childRequest, CONTRACTS, deterministic, newRepo, newRoot } from "./layout_fixtures.ts";

/** Runs `prune-raw args` in `/repo` of `fs`; returns its exit code and its last output line. */
async function pruneRaw(fs: MemoryFs, args: string[]): Promise<{ code: number; summary: string }> {
  const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
  const code = await runPruneRaw(io, args);
  return { code, summary: out().trim().split("\n").at(-1) ?? "" };
}

test("prune-raw counts an interrupted prune's leftovers as what they were, by where they lie", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  // A raw attempt directory, and an interrupted prune's leftover of one beside it.
  for (const iteration of [1, 2]) {
    const attempt = { iteration, workflowId: "outer", attemptId: `a${iteration}` };
    await createAttemptArtifacts(fs, root.paths, attempt, { prompt: "p", pathsMap: {} });
  }
  await fs.rename(`${root.dir}/raw/0002_outer`, `${root.dir}/raw/.pruning-0123abcd-0002_outer`);
  // A legacy trace tree, and an interrupted prune's leftover of another.
  const traces = "/repo/.loopy_loop/traces";
  for (const name of ["20260419_143022_71393ee22450_ab12cd34", ".pruning-0123abcd-20260420_0"]) {
    const attempt = `${traces}/${name}/sessions/x/attempts/a`;
    await fs.mkdir(attempt, { recursive: true });
    await fs.writeFile(`${attempt}/trace_manifest.json`, new TextEncoder().encode("{}"));
  }
  const dry = await pruneRaw(fs, ["--legacy-traces", "--dry-run"]);
  assert.equal(dry.code, 0);
  assert.match(
    dry.summary,
    /^would prune 2 raw attempt dir\(s\); would remove 2 legacy trace tree\(s\), /,
  );
  const run = await pruneRaw(fs, ["--legacy-traces"]);
  assert.match(run.summary, /^pruned 2 raw attempt dir\(s\); removed 2 legacy trace tree\(s\), /);
  assert.deepEqual(await fs.readDir(traces), []);
  assert.deepEqual(await fs.readDir(`${root.dir}/raw`), []);
});

test("layout tree shows every tree when a state.json on one tree's active chain is damaged", async () => {
  const fs = await newRepo();
  const first = await newRoot(fs);
  const second = await newRoot(fs, "Second goal");
  await publishChildRequest(fs, first.paths, childRequest("phase-0-foundations"));
  const accepted = await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: first.sessionId,
    ...deterministic(),
  });
  assert.equal(accepted?.kind, "accepted");
  const childState = `${first.dir}/children/01_phase-0-foundations/state.json`;
  const run = async (args: string[]) => {
    const { io, out } = memoryIo(fs, "/repo", Date.now());
    return { code: await runLayout(io, ["tree", ...args]), out: out() };
  };
  const healthy = await run([]);
  assert.equal(healthy.code, 0);
  assert.match(healthy.out, /^\* +01_phase-0-foundations {2}running$/m);
  await fs.writeFile(childState, new TextEncoder().encode('{"status":'));
  const damaged = await run([]);
  assert.equal(damaged.code, 1, "a state that cannot be read is a finding");
  assert.match(damaged.out, new RegExp(`^ +${first.sessionId} `, "m"));
  assert.match(damaged.out, /01_phase-0-foundations {2}invalid state\.json/);
  assert.match(damaged.out, new RegExp(`^[* ] +${second.sessionId} `, "m"));
  assert.match(damaged.out, /working session unknown/);
  const json = JSON.parse((await run(["--json"])).out);
  assert.deepEqual(json.trees.map((t: { root: string }) => t.root), [
    first.sessionId,
    second.sessionId,
  ]);
  assert.equal(typeof json.trees[0].error, "string");
});

test("traces inspect prints a manifest nested deeper than the call stack goes, keys sorted", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/.loopy_loop/sessions", { recursive: true });
  const dir = "/repo/.loopy_loop/traces/t1";
  await fs.mkdir(dir, { recursive: true });
  // An agent-written manifest: an extra value 20,000 levels deep (the library reads it).
  const depth = 20_000;
  const text = `{"manifest_id":"trace-1","lifecycle":"sealed","identity":{"workflow_id":"w",` +
    `"session_id":"s","attempt_id":"a"},"x":${"[".repeat(depth)}${"]".repeat(depth)}}`;
  await fs.writeFile(`${dir}/trace_manifest.json`, new TextEncoder().encode(text));
  const { io, out } = memoryIo(fs, "/repo", Date.now());
  const code = await runTraces(io, ["inspect", "trace-1"]);
  assert.equal(code, 1, "a sealed manifest without a seal fails its check");
  const printed = JSON.parse(out());
  assert.equal(printed.manifest_id, "trace-1");
  assert.equal(printed.observed_integrity.status, "failed");
  assert.deepEqual(Object.keys(printed), [
    "identity",
    "lifecycle",
    "manifest_id",
    "observed_integrity",
    "x",
  ]);
  assert.deepEqual(Object.keys(printed.identity), ["attempt_id", "session_id", "workflow_id"]);
  let level = 0;
  for (let value = printed.x; Array.isArray(value) && value.length > 0; value = value[0]) level++;
  assert.equal(level, depth - 1);
  // Deep levels are written on one line, not indented 20,000 times over.
  assert(out().length < 200_000, `${out().length} characters`);
});

/** A repository whose legacy mirror layout holds one trace, `traces/t1`, with `manifest`. */
async function oneTrace(manifest: Record<string, unknown>): Promise<MemoryFs> {
  const fs = await newRepo();
  await fs.mkdir("/repo/.loopy_loop/sessions", { recursive: true });
  const dir = "/repo/.loopy_loop/traces/t1";
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(
    `${dir}/trace_manifest.json`,
    new TextEncoder().encode(JSON.stringify(manifest)),
  );
  return fs;
}

test("traces list exits 1 when a trace's integrity check failed, as inspect does", async () => {
  // A sealed manifest without its seal is a finding.
  const fs = await oneTrace({
    manifest_id: "trace-1",
    lifecycle: "sealed",
    identity: { workflow_id: "w", session_id: "s", attempt_id: "a" },
  });
  const inspect = memoryIo(fs, "/repo", Date.now());
  assert.equal(await runTraces(inspect.io, ["inspect", "trace-1"]), 1);
  for (const args of [["list"], ["list", "--json"]]) {
    const { io, out } = memoryIo(fs, "/repo", Date.now());
    const code = await runTraces(io, args);
    assert.match(out(), /failed/);
    assert.equal(code, 1, `${args.join(" ")}: ${out()}`);
  }
});

test("traces inspect prints as the engine's json.dumps(indent=2, sort_keys=True) prints", async () => {
  // Keys sorted by code point as text (a JS object would list "9" before "10"), non-ASCII
  // escaped. The expected block is Python 3's output for the same value.
  const fs = await oneTrace({
    manifest_id: "trace-1",
    lifecycle: "active",
    identity: { workflow_id: "w", session_id: "s", attempt_id: "a" },
    extra: {
      "9": [],
      "10": {},
      b: [1, { z: null, a: true }],
      "\uFF01": "\u00e9\u{1F600}",
      "\u{1F600}": -2.5,
    },
  });
  const { io, out } = memoryIo(fs, "/repo", Date.now());
  await runTraces(io, ["inspect", "trace-1"]);
  const python = '{\n  "extra": {\n    "10": {},\n    "9": [],\n    "b": [\n      1,\n      {\n' +
    '        "a": true,\n        "z": null\n      }\n    ],\n' +
    '    "\\uff01": "\\u00e9\\ud83d\\ude00",\n    "\\ud83d\\ude00": -2.5\n  },\n' +
    '  "identity": {\n    "attempt_id": "a",\n    "session_id": "s",\n    "workflow_id": "w"\n  },\n' +
    '  "lifecycle": "active",\n  "manifest_id": "trace-1",\n  "observed_integrity": {\n';
  assert.equal(out().slice(0, python.length), python);
  assert.ok(out().endsWith("\n  }\n}\n"), out().slice(-20));
  assert.equal(JSON.parse(out()).observed_integrity.seal.status, "not_required");
});

test("traces inspect indents every level of a manifest the engine can print, 150 levels deep", async () => {
  let extra: unknown = 1;
  for (let i = 0; i < 150; i++) extra = [extra];
  const fs = await oneTrace({
    manifest_id: "trace-1",
    lifecycle: "active",
    identity: { workflow_id: "w", session_id: "s", attempt_id: "a" },
    extra,
  });
  const { io, out } = memoryIo(fs, "/repo", Date.now());
  await runTraces(io, ["inspect", "trace-1"]);
  // The leaf sits at level 151 (the manifest is level 0), on its own line, as json.dumps puts it.
  assert.ok(out().includes(`\n${" ".repeat(2 * 151)}1\n${" ".repeat(2 * 150)}]\n`));
  assert.equal(JSON.stringify(JSON.parse(out()).extra), JSON.stringify(extra));
});

test("traces inspect resolves a relative manifest path against the current directory", async () => {
  // As every path the command line takes: the library alone would take it from the repository
  // root, where no such file is.
  const fs = await oneTrace({
    manifest_id: "trace-1",
    lifecycle: "active",
    identity: { workflow_id: "w", session_id: "s", attempt_id: "a" },
  });
  const { io, out } = memoryIo(fs, "/repo/.loopy_loop/traces", Date.now());
  const code = await runTraces(io, ["inspect", "t1/trace_manifest.json"]).catch((e) => e);
  assert.equal(typeof code, "number", String(code));
  assert.equal(JSON.parse(out()).manifest_id, "trace-1");
});

test("traces list writes an agent-written manifest field on its row, never as rows of its own", async () => {
  const manifest = {
    manifest_id: "trace-1",
    lifecycle: "sealed\ntrace-2      sealed     verified",
    identity: { session_id: "s", workflow_id: "w\r\t", attempt_id: "a" },
  };
  const fs = await oneTrace(manifest);
  const { io, out } = memoryIo(fs, "/repo", Date.now());
  await runTraces(io, ["list"]);
  assert.doesNotMatch(out(), /[\r\t]/);
  const lines = out().trimEnd().split("\n");
  assert.equal(lines.length, 2, out());
  assert.match(
    lines[1] as string,
    /^trace-1 +sealed\\u000atrace-2 {6}sealed {5}verified +\S+ +s +w\\u000d\\u0009 /,
  );
  // JSON keeps the values.
  const json = memoryIo(fs, "/repo", Date.now());
  await runTraces(json.io, ["list", "--json"]);
  assert.equal(JSON.parse(json.out())[0].lifecycle, manifest.lifecycle);
});

test("layout show, resolve and tree write a line feed or tab in a repository's path as an escape", async () => {
  const fs = new MemoryFs();
  const repo = "/two\nlines\trepo";
  await fs.mkdir(repo, { recursive: true });
  const root = await createRootSession(fs, {
    repoRoot: repo,
    goal: "Goal",
    ...CONTRACTS,
    ...deterministic(),
  });
  const escaped = "/two\\u000alines\\u0009repo";
  const run = async (args: string[]) => {
    const { io, out } = memoryIo(fs, repo, Date.now());
    return { code: await runLayout(io, args), out: out() };
  };
  const show = await run(["show", root.sessionId]);
  assert.equal(show.code, 0);
  // One line a row (8 of the session, 8 of its manifest), none broken by the path.
  assert.equal(show.out.split("\n").length, 17, show.out);
  assert.match(
    show.out,
    new RegExp(`^dir +${escaped.replaceAll("\\", "\\\\")}/\\.loopy_loop/`, "m"),
  );
  const resolved = await run(["resolve", "repo:/notes.md"]);
  assert.equal(resolved.out, `${escaped}/notes.md (absent)\n`);
  // An unreadable state.json: the error names its path, on the tree's lines.
  await fs.writeFile(`${root.dir}/state.json`, new TextEncoder().encode('{"status":'));
  const tree = await run(["tree"]);
  assert.equal(tree.code, 1);
  assert.doesNotMatch(tree.out, /\t/);
  assert.equal(tree.out.split("\n").length, 3, tree.out);
  assert(tree.out.includes(escaped), tree.out);
});

test("'traces help' prints the traces help like 'sessions help' and 'layout help' (exit 0)", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/repo", { recursive: true });
  const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
  assert.equal(await runTraces(io, ["help"]), 0);
  assert.match(out(), /traces list/);
  assert.match(out(), /traces inspect/);
});

test("prune-raw lists an entry it could not remove with the error and exits 1", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  for (const iteration of [1, 2]) {
    const attempt = { iteration, workflowId: "outer", attemptId: `a${iteration}` };
    await createAttemptArtifacts(fs, root.paths, attempt, { prompt: "p", pathsMap: {} });
  }
  const failing = hookedFs(fs, {
    before(method, args) {
      if (method === "remove" && String(args[0]).endsWith("-0001_outer")) {
        throw new FsIoError("EIO", "remove", String(args[0]), "simulated I/O error");
      }
    },
  });
  for (const json of [false, true]) {
    const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
    const code = await runPruneRaw({ ...io, fs: failing }, json ? ["--json"] : []);
    assert.equal(code, 1, out());
    if (!json) {
      assert.match(
        out(),
        /skipped \S+\/raw\/0001_outer: remove_failed \(\S+\.pruning-[0-9a-f]{8}-0001_outer: .*simulated I\/O error/,
      );
    }
  }
  // Kept by the rules only (nothing left to prune, the first still hidden): exit 0 once removable.
  const { io } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
  assert.equal(await runPruneRaw(io, []), 0);
});

test("layout tree lists a root tree whose directory or session.json is a link as one it cannot read", async () => {
  for (const linked of ["directory", "session.json"] as const) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    if (linked === "directory") {
      await fs.rename(root.dir, "/elsewhere");
      await fs.symlink("/elsewhere", root.dir);
    } else {
      await fs.rename(`${root.dir}/session.json`, "/elsewhere.json");
      await fs.symlink("/elsewhere.json", `${root.dir}/session.json`);
    }
    for (const json of [false, true]) {
      const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
      const code = await runLayout(io, ["tree", ...(json ? ["--json"] : [])]);
      assert.equal(code, 1, `${linked}: ${out()}`);
      assert.doesNotMatch(out(), /No sessions found/);
      assert.match(out(), /symlink/);
    }
  }
});

test("layout show prints the manifest's fields in text, as --json has them", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
  assert.equal(await runLayout(io, ["show", root.sessionId]), 0);
  const text = out();
  for (const field of ["goal_hash", "workflow_set", "layer_kind", "created_at"]) {
    const value = (root.manifest as unknown as Record<string, unknown>)[field];
    assert.match(
      text,
      new RegExp(`^${field}\\s+${String(value).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`, "m"),
    );
  }
});

test("layout show escapes a manifest's field names, so a stored name cannot forge a row", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const file = `${root.dir}/session.json`;
  const manifest = JSON.parse(new TextDecoder().decode(await fs.readFile(file)));
  manifest["note\nstatus"] = "stopped (forged row)";
  await fs.writeFile(file, new TextEncoder().encode(JSON.stringify(manifest, null, 2)));
  const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
  assert.equal(await runLayout(io, ["show", root.sessionId]), 0);
  assert.doesNotMatch(out(), /^status +stopped/m);
  assert.match(out(), /^note\\u000astatus +stopped \(forged row\)$/m);
});
