// Runs every command of the command line as a subprocess against temp directories on the real
// disk, on the runtime running the tests (Deno runs `deno run`, Node runs `node --import tsx`).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";
import { SessionStore } from "../src/loop/store.ts";
import { assistant, conversation, toolResult, user } from "./_fixtures.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";
import { buildMirrorTree } from "./fixtures/mirror_tree.ts";

const BIN = new URL("../src/cli/bin.ts", import.meta.url).pathname;
// The subprocess runs in temp directories, so tsx is named by its resolved location.
const TSX = isDenoRuntime()
  ? ""
  : pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

function isDenoRuntime(): boolean {
  return (globalThis as { Deno?: unknown }).Deno !== undefined;
}
const isDeno = isDenoRuntime();

let base = "";
let agentDir = "";
let workA = "";
let workB = "";
let repo = "";
let mirrorRepo = "";
let sessionA = "";
let sessionB = "";
let legacyId = "";
let foldedRootId = "";

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

function cli(args: string[], options: { cwd?: string; env?: Record<string, string> } = {}): Run {
  const runtimeArgs = isDeno
    ? ["run", "-A", "--quiet", BIN, ...args]
    : ["--import", TSX, BIN, ...args];
  const result = spawnSync(process.execPath, runtimeArgs, {
    cwd: options.cwd ?? workA,
    env: { ...process.env, LOOP_DATA_DIR: agentDir, NO_COLOR: "1", ...options.env },
    encoding: "utf8",
  });
  return { code: result.status ?? -1, out: result.stdout, err: result.stderr };
}

before(async () => {
  base = mkdtempSync(join(tmpdir(), "loop-cli-"));
  agentDir = join(base, "agent");
  workA = join(base, "work-a");
  workB = join(base, "work-b");
  const fs = nodeFs();
  await fs.mkdir(workA, { recursive: true });
  await fs.mkdir(workB, { recursive: true });
  const store = new SessionStore({ fs, agentDir });
  const a = await store.create(workA);
  await a.commit([
    user("Fix the flaky login test"),
    assistant("Reading it", [{ id: "t1", name: "read" }]),
    toolResult("t1", "read", "file body"),
    assistant("Fixed"),
  ]);
  await a.close();
  sessionA = a.id;
  const b = await store.create(workB);
  await b.commit(conversation(5));
  await b.close();
  sessionB = b.id;
  // A legacy version-2 single-file session in workspace A's collection.
  legacyId = "0f0e0d0c-0b0a-4908-8706-050403020100";
  const header = {
    format: "loop-session",
    version: 2,
    id: legacyId,
    cwd: await fs.realPath(workA),
    createdAt: "2026-01-01T00:00:00.000Z",
    updatedAt: "2026-01-01T00:00:00.000Z",
    permissionPreset: "read-only",
  };
  writeFileSync(
    join(a.getSessionDir(), `${legacyId}.jsonl`),
    [header, user("legacy question"), assistant("legacy answer")].map((l) => JSON.stringify(l))
      .join("\n") + "\n",
  );
  repo = join(base, "repo");
  await fs.mkdir(repo, { recursive: true });
  foldedRootId = (await buildFoldedTree(fs, repo)).rootId;
  mirrorRepo = join(base, "mirror");
  await fs.mkdir(mirrorRepo, { recursive: true });
  await buildMirrorTree(fs, mirrorRepo);
});

after(() => {
  rmSync(base, { recursive: true, force: true });
});

test("--help prints the commands; no command is a usage error (exit 2)", () => {
  const help = cli(["--help"]);
  assert.equal(help.code, 0);
  assert.match(help.out, /sessions list/);
  assert.match(help.out, /prune-raw/);
  const none = cli([]);
  assert.equal(none.code, 2);
  const unknown = cli(["frobnicate"]);
  assert.equal(unknown.code, 2);
  assert.match(unknown.err, /unknown command 'frobnicate'/);
  assert.equal(cli(["sessions", "list", "--bogus"]).code, 2);
  assert.equal(cli(["sessions", "verify", "--help"]).code, 0);
});

test("sessions list shows the current workspace's sessions as a table and as JSON", () => {
  const table = cli(["sessions", "list"]);
  assert.equal(table.code, 0, table.err);
  assert.match(table.out, /^ID\s+UPDATED\s+MESSAGES\s+STATE\s+TITLE/);
  assert.ok(table.out.includes(sessionA));
  assert.ok(table.out.includes(legacyId));
  assert.ok(!table.out.includes(sessionB));
  const json = cli(["sessions", "list", "--fast", "--json"]);
  assert.equal(json.code, 0, json.err);
  const parsed = JSON.parse(json.out);
  const ids = parsed.sessions.map((s: { id: string }) => s.id).sort();
  assert.deepEqual(ids, [sessionA, legacyId].sort());
  const all = JSON.parse(cli(["sessions", "list", "--all-workspaces", "--json"]).out);
  assert.ok(all.sessions.some((s: { id: string }) => s.id === sessionB));
});

test("sessions show prints header, counts, generation and committed range", () => {
  const run = cli(["sessions", "show", sessionA]);
  assert.equal(run.code, 0, run.err);
  assert.match(run.out, /generation\s+[0-9a-f]{64}/);
  assert.match(run.out, /messages\s+4 \(1 from the user\)/);
  assert.match(run.out, /title\s+Fix the flaky login test \(fallback\)/);
  const json = JSON.parse(cli(["sessions", "show", sessionA, "--json"]).out);
  assert.equal(json.messageCount, 4);
  assert.equal(json.archived, false);
});

test("sessions history pages rounds and follows --before", () => {
  const run = cli(["sessions", "history", sessionB]);
  assert.equal(run.code, 0, run.err);
  const range = /messages (\d+)\.\.(\d+) of (\d+)/.exec(run.out);
  assert.ok(range !== null);
  const earlier = /earlier: --before (\d+)/.exec(run.out);
  assert.ok(earlier !== null);
  const previous = cli([
    "sessions",
    "history",
    sessionB,
    "--before",
    earlier[1] as string,
    "--json",
  ]);
  assert.equal(previous.code, 0, previous.err);
  assert.equal(JSON.parse(previous.out).end, Number(earlier[1]));
  assert.equal(cli(["sessions", "history", sessionB, "--before", "-3"]).code, 2);
  assert.equal(cli(["sessions", "history", sessionB, "--before", "0x1"]).code, 2);
  // A count that is not where a round starts is a bad argument (2), not a finding (1).
  const inside = cli(["sessions", "history", sessionB, "--before", "1"]);
  assert.equal(inside.code, 2, inside.err);
  assert.match(inside.err, /--before/);
});

test("sessions verify passes a healthy session and exits 1 on corruption without modifying it", async () => {
  const ok = cli(["sessions", "verify", sessionB]);
  assert.equal(ok.code, 0, ok.err + ok.out);
  assert.match(ok.out, /^ok/);
  const victim = await damagedCopy();
  const log = join(victim.dir, "messages.jsonl");
  const before = readFileSync(log);
  const bad = cli(["sessions", "verify", victim.dir]);
  assert.equal(bad.code, 1);
  assert.match(bad.out, /CORRUPT/);
  assert.match(bad.out, /message #1/);
  assert.deepEqual(readFileSync(log), before);
  const json = JSON.parse(cli(["sessions", "verify", victim.dir, "--json"]).out);
  assert.equal(json[0].ok, false);
  const salvaged = cli(["sessions", "salvage", victim.dir, "--to", join(base, "rescued")]);
  assert.equal(salvaged.code, 0, salvaged.err);
  assert.match(salvaged.out, /salvaged 1 message\(s\)/);
  assert.deepEqual(readFileSync(log), before);
});

test("a file of a session given as the target names the session directory to use instead", () => {
  const sessions = join(agentDir, "sessions");
  const collection = readdirSync(sessions).map((name) => join(sessions, name))
    .find((path) => existsSync(join(path, sessionB))) as string;
  const dir = join(collection, sessionB);
  for (const file of ["messages.jsonl", "index.json"]) {
    for (const command of ["verify", "show", "history"]) {
      const run = cli(["sessions", command, join(dir, file)]);
      assert.equal(run.code, 1, run.err);
      assert.match(run.err, /is a file of a session: name the session directory or its meta\.json/);
      assert.doesNotMatch(run.err, /legacy/);
    }
  }
});

/** A session in its own collection whose second message is damaged. */
async function damagedCopy(): Promise<{ dir: string }> {
  const fs = nodeFs();
  const collection = join(base, "damaged");
  const store = new SessionStore({ fs, agentDir, sessionDir: collection });
  const session = await store.create(workA);
  await session.commit([user("one"), assistant("two"), user("three")]);
  await session.close();
  const log = join(session.getSessionPath(), "messages.jsonl");
  const bytes = readFileSync(log);
  const at = bytes.indexOf("\n") + 1;
  bytes[at] = 0x21;
  writeFileSync(log, bytes);
  return { dir: session.getSessionPath() };
}

test("bad input: a path that is not a session, a truncated meta.json, an unknown version", async () => {
  const notSession = cli(["sessions", "show", base]);
  assert.equal(notSession.code, 1);
  assert.match(notSession.err, /^error: .*meta\.json/);
  const fs = nodeFs();
  const collection = join(base, "broken");
  const store = new SessionStore({ fs, agentDir, sessionDir: collection });
  const session = await store.create(workA);
  await session.commit([user("x")]);
  await session.close();
  const meta = join(session.getSessionPath(), "meta.json");
  const text = readFileSync(meta, "utf8");
  writeFileSync(meta, text.slice(0, 30));
  const truncated = cli(["sessions", "show", session.getSessionPath()]);
  assert.equal(truncated.code, 1);
  assert.match(truncated.err, /meta\.json/);
  assert.equal(readFileSync(meta, "utf8"), text.slice(0, 30));
  writeFileSync(meta, text.replace('"version":3', '"version":9'));
  const unknown = cli(["sessions", "show", session.getSessionPath()]);
  assert.equal(unknown.code, 1);
  assert.match(unknown.err, /[Uu]nsupported/);
  assert.equal(cli(["sessions", "show", "not-an-id"]).code, 2);
});

test("sessions migrate --dry-run lists, then migrate keeps the legacy file as a backup", () => {
  const legacyFile = join(agentDir, "sessions", collectionOf(sessionA), `${legacyId}.jsonl`);
  const original = readFileSync(legacyFile);
  const dry = cli(["sessions", "migrate", "--all", "--dry-run"]);
  assert.equal(dry.code, 0, dry.err);
  assert.match(dry.out, /would migrate/);
  const run = cli(["sessions", "migrate", legacyFile]);
  assert.equal(run.code, 0, run.err + run.out);
  assert.match(run.out, /migrated/);
  assert.deepEqual(readFileSync(legacyFile), original);
  const shown = JSON.parse(cli(["sessions", "show", legacyId, "--json"]).out);
  assert.equal(shown.messageCount, 2);
});

function collectionOf(id: string): string {
  const listed = JSON.parse(cli(["sessions", "list", "--all-workspaces", "--json"]).out);
  const info = listed.sessions.find((s: { id: string }) => s.id === id);
  return info.path.split("/").slice(-3, -2)[0];
}

test("sessions archive, restore, compact and delete", () => {
  assert.equal(cli(["sessions", "archive", sessionB]).code, 0);
  assert.equal(JSON.parse(cli(["sessions", "show", sessionB, "--json"]).out).archived, true);
  assert.equal(cli(["sessions", "restore", sessionB]).code, 0);
  assert.equal(JSON.parse(cli(["sessions", "show", sessionB, "--json"]).out).archived, false);
  const compacted = cli(["sessions", "compact", sessionB]);
  assert.equal(compacted.code, 0, compacted.err);
  const refused = cli(["sessions", "delete", sessionB]);
  assert.equal(refused.code, 1);
  assert.equal(cli(["sessions", "archive", sessionB]).code, 0);
  const deleted = cli(["sessions", "delete", sessionB]);
  assert.equal(deleted.code, 0, deleted.err);
  assert.equal(cli(["sessions", "show", sessionB]).code, 1);
});

test("layout tree, show and resolve work from anywhere inside the repository", () => {
  const cwd = join(repo, ".loopy_loop", "sessions");
  const tree = cli(["layout", "tree"], { cwd });
  assert.equal(tree.code, 0, tree.err);
  assert.ok(tree.out.includes(foldedRootId));
  assert.match(tree.out, /^\*/m);
  const show = cli(["layout", "show", foldedRootId, "--json"], { cwd });
  assert.equal(show.code, 0, show.err);
  assert.equal(JSON.parse(show.out).layout, "folded");
  const resolved = cli([
    "layout",
    "resolve",
    "session:/project_state/plan.md",
    "--session",
    foldedRootId,
  ], { cwd });
  assert.equal(resolved.code, 0, resolved.err);
  assert.ok(resolved.out.trim().endsWith("project_state/plan.md"));
  const escape = cli(["layout", "resolve", "session:/../x", "--session", foldedRootId], { cwd });
  // A reference the grammar refuses is a bad argument, like an unknown option.
  assert.equal(escape.code, 2);
  assert.match(escape.err, /usage error: .*'\.\.' segment/);
  assert.equal(cli(["layout", "tree"], { cwd: base }).code, 2);
});

test("prune-raw --dry-run plans, prune-raw removes raw attempt directories only", () => {
  const dry = cli(["prune-raw", "--dry-run", "--json"], { cwd: repo });
  assert.equal(dry.code, 0, dry.err);
  const plan = JSON.parse(dry.out);
  assert.equal(plan.dryRun, true);
  assert.ok(plan.count > 0);
  const run = cli(["prune-raw"], { cwd: repo });
  assert.equal(run.code, 0, run.err);
  assert.match(run.out, new RegExp(`pruned ${plan.count} raw attempt dir\\(s\\)`));
  const again = JSON.parse(cli(["prune-raw", "--json"], { cwd: repo }).out);
  assert.equal(again.count, 0);
  assert.equal(cli(["prune-raw", "--older-than", "soon"], { cwd: repo }).code, 2);
});

test("prune-raw --legacy-traces counts raw attempt directories and legacy trace trees apart", async () => {
  const pruned = join(base, "pruned");
  const fs = nodeFs();
  await fs.mkdir(pruned, { recursive: true });
  await buildFoldedTree(fs, pruned);
  const plan = JSON.parse(cli(["prune-raw", "--dry-run", "--json"], { cwd: pruned }).out);
  const rawDirs = plan.count;
  assert.ok(rawDirs > 0);
  // Two trace trees of legacy roots that have no session directory any more.
  for (
    const root of ["20260419_143022_71393ee22450_ab12cd34", "20260420_090000_0123456789ab_cd34ef56"]
  ) {
    const attempt = join(pruned, ".loopy_loop", "traces", root, "sessions", "x", "attempts", "a");
    await fs.mkdir(attempt, { recursive: true });
    await fs.writeFile(join(attempt, "trace_manifest.json"), new TextEncoder().encode("{}"));
  }
  const dry = cli(["prune-raw", "--legacy-traces", "--dry-run"], { cwd: pruned });
  assert.equal(dry.code, 0, dry.err);
  assert.match(
    dry.out,
    new RegExp(
      `would prune ${rawDirs} raw attempt dir\\(s\\); would remove 2 legacy trace tree\\(s\\)`,
    ),
  );
  const run = cli(["prune-raw", "--legacy-traces"], { cwd: pruned });
  assert.equal(run.code, 0, run.err);
  assert.match(
    run.out,
    new RegExp(`pruned ${rawDirs} raw attempt dir\\(s\\); removed 2 legacy trace tree\\(s\\)`),
  );
  // Without the flag, the summary does not speak of traces.
  const again = cli(["prune-raw"], { cwd: pruned });
  assert.match(again.out, /^pruned 0 raw attempt dir\(s\), /m);
  assert.doesNotMatch(again.out, /legacy trace/);
});

test("traces list and traces inspect read the legacy mirror layout", () => {
  const list = cli(["traces", "list", "--json"], { cwd: mirrorRepo });
  assert.equal(list.code, 0, list.err);
  const traces = JSON.parse(list.out);
  assert.ok(traces.length > 0);
  const table = cli(["traces", "list"], { cwd: mirrorRepo });
  assert.match(table.out, /^MANIFEST/);
  const first = traces.find((t: { manifestId: string | null }) => t.manifestId !== null);
  const inspect = cli(["traces", "inspect", first.manifestId], { cwd: mirrorRepo });
  assert.ok(inspect.code === 0 || inspect.code === 1, inspect.err);
  assert.ok("observed_integrity" in JSON.parse(inspect.out));
  assert.equal(cli(["traces", "inspect", "trace-nope"], { cwd: mirrorRepo }).code, 1);
});

test("sessions show and history read a legacy file in place without migrating it", async () => {
  const fs = nodeFs();
  const collection = join(base, "legacy-only");
  await fs.mkdir(collection, { recursive: true });
  const id = "1a1a1a1a-2b2b-4c4c-8d8d-3e3e3e3e3e3e";
  const header = {
    format: "loop-session",
    version: 2,
    id,
    cwd: await fs.realPath(workA),
    createdAt: "2026-01-01T00:00:00.000Z",
    updatedAt: "2026-01-01T00:00:00.000Z",
    permissionPreset: "read-only",
  };
  const file = join(collection, `${id}.jsonl`);
  writeFileSync(
    file,
    [header, user("old q"), assistant("old a")].map((l) => JSON.stringify(l)).join("\n") + "\n",
  );
  const show = cli(["sessions", "show", file, "--json"]);
  assert.equal(show.code, 0, show.err);
  assert.equal(JSON.parse(show.out).legacy, true);
  const history = cli(["sessions", "history", file]);
  assert.equal(history.code, 0, history.err);
  assert.match(history.out, /messages 0\.\.2 of 2/);
  assert.deepEqual((await fs.readDir(collection)).map((e) => e.name), [`${id}.jsonl`]);
});
