import { test } from "node:test";
import assert from "node:assert/strict";
import { SimulatedCrash } from "../adapters/memory.ts";
import {
  createRootSession,
  encodeJson,
  ensureRepository,
  LayoutOptionError,
  LayoutRecordError,
  listRootSessionIds,
  missingScaffoldEntries,
  openSessionPaths,
  parseGoalContract,
  parseHandoff,
  parseSessionManifest,
  parseSessionState,
  readSessionLayout,
  removeStagingLeftovers,
  REPO_GITIGNORE_RAW_LINE,
  SESSION_GITIGNORE,
  sha256Ref,
  stagingSessionId,
  UnconfirmedPublishError,
} from "../layout.ts";
import {
  CONTRACTS,
  deterministic,
  newRepo,
  newRoot,
  readJson,
  readText,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";
import { repeatsEarlierCrashState } from "./_crash.ts";
import { gate, hookedFs } from "./_hooks.ts";
import { seedsAfter } from "./_soak.ts";

const ROOT_DIR = "/repo/.loopy_loop/sessions/001_ship-the-ultimate-memory-program";

test("createRootSession publishes every file and directory of the folded tree", async () => {
  const fs = await newRepo();
  const session = await newRoot(fs);
  assert.equal(session.sessionId, "001_ship-the-ultimate-memory-program");
  assert.equal(session.dir, ROOT_DIR);
  assert.deepEqual(await missingScaffoldEntries(fs, session.dir, "root"), []);
  for (const absent of ["parent.json", "inputs/accepted_request.json", "session_outcome.json"]) {
    await assert.rejects(fs.lstat(`${ROOT_DIR}/${absent}`), { code: "ENOENT" }, absent);
  }
  // The folded layout never creates the mirror directories.
  for (const mirror of ["git_receipts", "delivery_receipts", "trace_seals", "harness_outputs"]) {
    await assert.rejects(fs.lstat(`${ROOT_DIR}/${mirror}`), { code: "ENOENT" }, mirror);
  }
  await assert.rejects(fs.lstat("/repo/.loopy_loop/traces"), { code: "ENOENT" });
  assert.deepEqual(await listRootSessionIds(fs, "/repo"), [session.sessionId]);
});

test("session.json records the layout, machine fields and hashes of the frozen files", async () => {
  const fs = await newRepo();
  const session = await newRoot(fs);
  const manifest = parseSessionManifest(await readJson(fs, `${ROOT_DIR}/session.json`), "x");
  assert.equal(manifest.schema_version, 2);
  if (manifest.schema_version !== 2) return;
  assert.deepEqual(manifest, session.manifest);
  assert.equal(manifest.layout, "folded");
  assert.equal(manifest.root_session_id, session.sessionId);
  assert.equal(manifest.parent_session_id, null);
  assert.equal(manifest.depth, 0);
  assert.equal(manifest.created_at, "2026-04-19T14:30:22Z");
  assert.match(manifest.session_uuid ?? "", /^[0-9a-f]{32}$/);
  const goalBytes = new TextEncoder().encode("Ship the ultimate memory program");
  assert.equal(manifest.goal_hash, sha256Ref(goalBytes));
  assert.equal(
    manifest.goal_contract_hash,
    sha256Ref(await fs.readFile(`${ROOT_DIR}/goal_contract.json`)),
  );
  assert.equal(
    manifest.workflow_contract_hash,
    sha256Ref(await fs.readFile(`${ROOT_DIR}/workflow_contract.json`)),
  );
  assert.deepEqual(
    await readJson(fs, `${ROOT_DIR}/workflow_contract.json`),
    CONTRACTS.workflowContract,
  );
  assert.deepEqual(
    await readJson(fs, `${ROOT_DIR}/harness_capability_roster.json`),
    CONTRACTS.harnessCapabilityRoster,
  );
});

test("the scaffold's records are valid and neutral", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  // In the engine's bytes: its keys in its order, indented by two spaces.
  assert.equal(
    await readText(fs, `${ROOT_DIR}/control.json`),
    '{\n  "state": "running",\n  "reason": "session active",\n  "stop_reason": null,\n' +
      '  "schema_version": 1\n}',
  );
  // Created empty in every layout, as the engine creates it.
  assert.equal(await readText(fs, `${ROOT_DIR}/updates_from_user.md`), "");
  const state = parseSessionState(await readJson(fs, `${ROOT_DIR}/state.json`), "state.json");
  assert.equal(state.status, "running");
  assert.equal(state.current_task, null);
  assert.equal(state.active_child_session_id, null);
  assert.deepEqual(await readJson(fs, `${ROOT_DIR}/children.json`), {
    schema_version: 2,
    parent_session_id: "001_ship-the-ultimate-memory-program",
    revision: 0,
    children: [],
  });
  const handoff = parseHandoff(await readJson(fs, `${ROOT_DIR}/project_state/handoff.json`), "h");
  assert.equal(handoff.revision, 0);
  assert.equal(handoff.producer, null);
  const contract = parseGoalContract(await readJson(fs, `${ROOT_DIR}/goal_contract.json`), "g");
  assert.equal(contract.goal, "Ship the ultimate memory program");
  assert.equal(contract.terminal_blocker_policy_ref, "workflow:main");
  assert.equal(contract.origin_request_id, null);
});

test("the spine files carry their headings and the goal", async () => {
  const fs = await newRepo();
  await newRoot(fs, "Ship the\nultimate program  ");
  const dir = "/repo/.loopy_loop/sessions/001_ship-the-ultimate-program";
  const plan = await readText(fs, `${dir}/project_state/plan.md`);
  assert.match(plan, /^# Layer Plan\n\n- Revision: 0\n- Layer goal: Ship the ultimate program\n/);
  assert.match(plan, /\| ID \| Outcome \| Status \| Dependencies \| Evidence \|/);
  assert.match(plan, /No leaf or child outcome is selected yet\./);
  assert.match(await readText(fs, `${dir}/project_state/current_state.md`), /^# Current State\n/);
  assert.match(await readText(fs, `${dir}/project_state/eval_state.md`), /^# Evaluation State\n/);
  assert.equal(await readText(fs, `${dir}/project_state/finished.md`), "# Finished Work\n");
  assert.equal(await readText(fs, `${dir}/goal.md`), "Ship the\nultimate program\n");
  assert.equal(await readText(fs, `${dir}/.gitignore`), SESSION_GITIGNORE);
  assert.ok(SESSION_GITIGNORE.split("\n").includes("raw/"));
  assert.equal(await readText(fs, `${dir}/events.jsonl`), "");
  assert.equal(await readText(fs, `${dir}/inputs/user_updates.jsonl`), "");
});

test("an empty goal writes no goal.md and names the plan's goal by its hash", async () => {
  const fs = await newRepo();
  const session = await newRoot(fs, "");
  assert.equal(session.sessionId, "001_session");
  await assert.rejects(fs.lstat(`${session.dir}/goal.md`), { code: "ENOENT" });
  const plan = await readText(fs, `${session.dir}/project_state/plan.md`);
  assert.ok(plan.includes(`- Layer goal: ${session.manifest.goal_hash}`));
});

test("session files are private: 0600 files and 0700 directories", async () => {
  const fs = await newRepo();
  const session = await newRoot(fs);
  for (const [path, kind] of Object.entries(fs.snapshotTree(session.dir))) {
    if (kind.startsWith("dir")) assert.ok(kind.startsWith("dir 700"), `${path}: ${kind}`);
    else assert.ok(kind.startsWith("file 600"), `${path}: ${kind}`);
  }
});

test("creation is deterministic with an injected clock and uuid source", async () => {
  const a = await newRepo();
  const b = await newRepo();
  await newRoot(a);
  await newRoot(b);
  assert.deepEqual(a.snapshotTree("/repo"), b.snapshotTree("/repo"));
});

test("a second root session takes the next ordinal", async () => {
  const fs = await newRepo();
  await newRoot(fs);
  const second = await newRoot(fs, "Write the docs");
  assert.equal(second.sessionId, "002_write-the-docs");
});

test("ensureRepository writes repository.json once and adds the raw line to .gitignore once", async () => {
  const fs = await newRepo();
  await writeText(fs, "/repo/.gitignore", "node_modules/");
  await fs.chmod("/repo/.gitignore", 0o644);
  const first = await ensureRepository(fs, "/repo", deterministic());
  const second = await ensureRepository(fs, "/repo", deterministic());
  assert.deepEqual(second, first);
  assert.match(first.repository_id, /^[0-9a-f]{32}$/);
  assert.equal(
    await readText(fs, "/repo/.gitignore"),
    `node_modules/\n${REPO_GITIGNORE_RAW_LINE}\n`,
  );
  assert.equal(REPO_GITIGNORE_RAW_LINE, ".loopy_loop/sessions/**/raw/");
  // The repository's own file keeps its mode.
  assert.equal((await fs.stat("/repo/.gitignore")).mode, 0o644);
});

test("ensureRepository keeps a .gitignore's mode exactly, bits the umask would clear included", async () => {
  for (const mode of [0o664, 0o666, 0o640, 0o600]) {
    const fs = await newRepo(); // umask 0o022
    await writeText(fs, "/repo/.gitignore", "node_modules/\n");
    await fs.chmod("/repo/.gitignore", mode);
    await ensureRepository(fs, "/repo", deterministic());
    assert.equal(
      await readText(fs, "/repo/.gitignore"),
      `node_modules/\n${REPO_GITIGNORE_RAW_LINE}\n`,
    );
    assert.equal((await fs.stat("/repo/.gitignore")).mode, mode, mode.toString(8));
    // And through a power loss.
    const recovered = fs.crash({ seed: 0, extraJournal: "none", tailMode: "none" });
    assert.equal((await recovered.stat("/repo/.gitignore")).mode, mode, mode.toString(8));
  }
});

test("ensureRepository appends the raw line after the .gitignore's bytes as they are, whatever their encoding", async () => {
  const fs = await newRepo();
  // "café" in Latin-1, no final newline: git matches bytes, so this is a valid pattern.
  const original = new Uint8Array([0x63, 0x61, 0x66, 0xe9]);
  await fs.writeFile("/repo/.gitignore", original, { mode: 0o640 });
  await ensureRepository(fs, "/repo", deterministic());
  const line = new TextEncoder().encode(`\n${REPO_GITIGNORE_RAW_LINE}\n`);
  assert.deepEqual(await fs.readFile("/repo/.gitignore"), new Uint8Array([...original, ...line]));
  assert.equal((await fs.stat("/repo/.gitignore")).mode, 0o640);
});

test("a repository .gitignore that is a symlink is left as it is, and so is its target", async () => {
  const fs = await newRepo();
  await fs.mkdir("/shared");
  await writeText(fs, "/shared/gitignore", "node_modules/\n");
  await fs.symlink("/shared/gitignore", "/repo/.gitignore");
  const created = await newRoot(fs);
  assert.equal((await fs.lstat("/repo/.gitignore")).kind, "symlink");
  assert.equal(await readText(fs, "/shared/gitignore"), "node_modules/\n");
  // The session's own .gitignore still ignores its raw output.
  assert.equal(await readText(fs, `${created.paths.dir}/.gitignore`), SESSION_GITIGNORE);
});

test("an unknown durability is a LayoutOptionError before anything is written", async () => {
  const fs = await newRepo();
  const before = fs.snapshotTree("/");
  await assert.rejects(
    createRootSession(fs, {
      repoRoot: "/repo",
      goal: "Ship it",
      ...CONTRACTS,
      ...deterministic(),
      durability: "Full" as never,
    }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutOptionError, String(error));
      assert.equal(error.option, "durability");
      return true;
    },
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a malformed repository.json is a typed error naming the file", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/.loopy_loop");
  await writeJson(fs, "/repo/.loopy_loop/repository.json", { schema_version: 1 });
  await assert.rejects(ensureRepository(fs, "/repo"), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError);
    assert.equal(error.file, "/repo/.loopy_loop/repository.json");
    assert.equal(error.path, "repository_id");
    return true;
  });
});

test("the layout is read from session.json, never from the directory name", async () => {
  const fs = await newRepo();
  // A readable name with a legacy v1 manifest is a mirror session.
  await fs.mkdir("/repo/s/001_readable-name", { recursive: true });
  await writeJson(fs, "/repo/s/001_readable-name/session.json", {
    session_id: "001_readable-name",
    goal_hash: "71393ee22450",
    workflow_set: "main",
    parent_session_id: null,
    created_at: "2026-04-19T14:30:22Z",
  });
  assert.equal(await readSessionLayout(fs, "/repo/s/001_readable-name"), "mirror");
  // A legacy name with a folded manifest is folded.
  const legacy = "20260419_143022_71393ee22450_ab12cd34";
  const session = await newRoot(fs);
  const manifest = await readJson(fs, `${session.dir}/session.json`);
  await fs.mkdir(`/repo/s/${legacy}`);
  await writeJson(fs, `/repo/s/${legacy}/session.json`, {
    ...manifest,
    session_id: legacy,
    root_session_id: legacy,
  });
  assert.equal(await readSessionLayout(fs, `/repo/s/${legacy}`), "folded");
  assert.equal(
    (await openSessionPaths(fs, `/repo/s/${legacy}`)).gitReceiptsDir,
    `/repo/s/${legacy}/receipts`,
  );
  // A missing manifest is an error, never a guess.
  await fs.mkdir("/repo/s/002_empty");
  await assert.rejects(readSessionLayout(fs, "/repo/s/002_empty"), { code: "ENOENT" });
});

test("a crash at any step of root creation leaves no session directory or a complete one", async () => {
  const baseline = await newRepo();
  baseline.syncAll();
  let completed = false;
  for (let n = 1; !completed; n++) {
    const fs = baseline.clone();
    fs.crashAfter(n);
    try {
      await createRootSession(fs, {
        repoRoot: "/repo",
        goal: "Crash me",
        ...CONTRACTS,
        ...deterministic(),
      });
      completed = true;
    } catch (error) {
      // A crash at the fsync after the rename reaches the caller as the published session's
      // unconfirmed durability (in real life, the process is gone).
      const crash = error instanceof UnconfirmedPublishError ? error.cause : error;
      if (!(crash instanceof SimulatedCrash)) throw error;
    }
    if (repeatsEarlierCrashState(fs, n)) continue; // the state of crash point n - 1
    for (const seed of seedsAfter([1, 2, 3])) {
      const recovered = fs.crash(seed);
      const ids = await listRootSessionIds(recovered, "/repo");
      if (completed) assert.deepEqual(ids, ["001_crash-me"], `n=${n} seed=${seed}`);
      for (const id of ids) {
        const dir = `/repo/.loopy_loop/sessions/${id}`;
        assert.deepEqual(await missingScaffoldEntries(recovered, dir, "root"), [], `n=${n}`);
        const manifest = await readJson(recovered, `${dir}/session.json`);
        assert.equal(manifest.session_id, id);
      }
      // Creating again after the crash works and never collides with leftovers.
      const again = await createRootSession(recovered, {
        repoRoot: "/repo",
        goal: "Crash me",
        ...CONTRACTS,
      });
      assert.deepEqual(await missingScaffoldEntries(recovered, again.dir, "root"), []);
    }
  }
});

test("JSON records are written ASCII-escaped, as the engine's json.dumps writes them", async () => {
  const fs = await newRepo();
  const goal = "Ship the café menu ✓ 😀\u007f";
  const root = await newRoot(fs, goal);
  const bytes = await fs.readFile(root.paths.goalContractJson);
  assert.deepEqual([...bytes].filter((b) => b > 0x7e), [], "printable ASCII only");
  const text = new TextDecoder().decode(bytes);
  // Each UTF-16 code unit from U+007F up as a lowercase \uXXXX escape, as Python's ensure_ascii.
  assert.ok(text.includes("caf\\u00e9 menu \\u2713 \\ud83d\\ude00\\u007f"), text);
  assert.equal((JSON.parse(text) as { goal: string }).goal, goal);
  assert.deepEqual(bytes, encodeJson(JSON.parse(text)), "the bytes are the canonical encoding");
});

test("removeStagingLeftovers with a session id removes that id's staging directories only", async () => {
  const fs = await newRepo();
  const scope = "/repo/.loopy_loop/sessions";
  await fs.mkdir(scope, { recursive: true });
  for (
    const name of [
      ".staging-001_ship-0a1b2c3d",
      ".staging-001_ship-it-9f8e7d6c",
      ".staging-001_ship-notes",
      "001_ship",
    ]
  ) {
    await fs.mkdir(`${scope}/${name}`);
  }
  assert.deepEqual(await removeStagingLeftovers(fs, scope, "001_ship"), [
    ".staging-001_ship-0a1b2c3d",
  ]);
  assert.deepEqual(
    (await fs.readDir(scope)).map((entry) => entry.name).sort(),
    [".staging-001_ship-it-9f8e7d6c", ".staging-001_ship-notes", "001_ship"],
  );
  assert.equal(stagingSessionId(".staging-001_ship-it-9f8e7d6c"), "001_ship-it");
  assert.equal(stagingSessionId(".staging-001_ship-notes"), undefined);
  // Without an id, every staging leftover of the scope goes; sessions stay.
  assert.deepEqual((await removeStagingLeftovers(fs, scope)).sort(), [
    ".staging-001_ship-it-9f8e7d6c",
    ".staging-001_ship-notes",
  ]);
  assert.deepEqual((await fs.readDir(scope)).map((entry) => entry.name), ["001_ship"]);
});

test("removing staging leftovers while a creation publishes never empties a session a creation reported", async () => {
  const memory = await newRepo();
  const exists = (path: string) => memory.lstat(path).then(() => true, () => false);
  const atPublish = gate();
  const release = gate();
  let staging = "";
  let final = "";
  // The creation pauses right before it renames its staging directory into place.
  const creatorFs = hookedFs(memory, {
    async before(method, args) {
      const [from, to] = args.map(String);
      if (method === "rename" && from!.includes("/.staging-") && !to!.includes("/.staging-")) {
        [staging, final] = [from!, to!];
        atPublish.open();
        await release.wait;
      }
    },
  });
  const creating = createRootSession(creatorFs, {
    repoRoot: "/repo",
    goal: "Publish while leftovers are removed",
    ...CONTRACTS,
    ...deterministic(),
  });
  await atPublish.wait;
  // The recursive remove is under way when the creation's rename lands: a removal that walks
  // the directory it opened goes on in it wherever it now is (as a removal by directory handle
  // does on a real filesystem).
  const removerFs = hookedFs(memory, {
    async before(method, args) {
      if (method !== "remove" || !String(args[0]).includes("/.staging-")) return;
      release.open();
      await creating.catch(() => undefined);
      if (!(await exists(String(args[0]))) && await exists(final)) {
        await memory.remove(final, { recursive: true });
      }
    },
  });
  await removeStagingLeftovers(removerFs, "/repo/.loopy_loop/sessions").catch(() => undefined);
  const outcome = await creating.then(() => "published", () => "failed");
  assert.ok(staging !== "" && final !== "");
  if (outcome === "published") {
    assert.ok(await exists(`${final}/session.json`), "a reported session is whole");
  } else assert.equal(await exists(final), false, "a failed creation published nothing");
  const names = (await memory.readDir("/repo/.loopy_loop/sessions")).map((entry) => entry.name);
  assert.deepEqual(names.filter((name) => name.startsWith(".staging-")), []);
});

test("goal.md and plan.md's layer goal strip and split the goal as the engine's Python does", async () => {
  // [goal, " ".join(goal.strip().splitlines()), goal.rstrip() + "\n"], as Python computes them.
  const cases: [string, string, string][] = [
    ["Ship it\u2028now", "Ship it now", "Ship it\u2028now\n"],
    ["Ship it\vnow", "Ship it now", "Ship it\vnow\n"],
    ["Ship it\x85", "Ship it", "Ship it\n"],
    ["Ship it\x1c", "Ship it", "Ship it\n"],
    ["\ufeffGoal\ufeff", "\ufeffGoal\ufeff", "\ufeffGoal\ufeff\n"],
    [" a\r\nb\n\nc ", "a b  c", " a\r\nb\n\nc\n"],
  ];
  for (const [goal, layer, goalMd] of cases) {
    const fs = await newRepo();
    const created = await createRootSession(fs, {
      repoRoot: "/repo",
      goal,
      ...CONTRACTS,
      ...deterministic(),
    });
    // Decoded keeping a leading U+FEFF (a default decoder drops it).
    const text = async (file: string) =>
      new TextDecoder("utf-8", { ignoreBOM: true }).decode(await fs.readFile(file));
    const plan = await text(`${created.dir}/project_state/plan.md`);
    assert.equal(/- Layer goal: ([^]*?)\n- Current milestone/.exec(plan)?.[1], layer, goal);
    assert.equal(await text(`${created.dir}/goal.md`), goalMd, goal);
  }
});

test("a record that cannot be written is refused naming the session's own file, never a staging path", async () => {
  const deep: Record<string, unknown> = {};
  let level = deep;
  for (let i = 0; i < 600; i++) level = (level.next = {}) as Record<string, unknown>;
  const cases: [string, Record<string, unknown>][] = [
    ["workflow_contract.json", { workflowContract: { ...CONTRACTS.workflowContract, n: 1n } }],
    ["workflow_roster.json", { workflowRoster: { roles: [], deep } }],
    ["harness_capability_roster.json", { harnessCapabilityRoster: { n: 2n } }],
    ["goal_contract.json", { constraints: [{ n: 3n }] }],
  ];
  for (const [name, change] of cases) {
    const fs = await newRepo();
    await assert.rejects(
      createRootSession(fs, {
        repoRoot: "/repo",
        goal: "Ship the ultimate memory program",
        ...CONTRACTS,
        ...deterministic(),
        ...change,
      } as never),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, `${name}: ${error}`);
        assert.equal(error.file, `${ROOT_DIR}/${name}`);
        return true;
      },
    );
    // Nothing was published, and the staging directory is gone.
    assert.deepEqual(await fs.readDir("/repo/.loopy_loop/sessions"), [], name);
  }
});
