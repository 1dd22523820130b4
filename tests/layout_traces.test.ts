// traces list / inspect / verify over the legacy mirror layout: integrity status per manifest,
// per-file hash verification, seal receipts, hostile manifests and lookups.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  checkTraceSeals,
  inspectTrace,
  LayoutRecordError,
  listTraces,
  locateTrace,
  LogicalReferenceError,
  LogicalReferenceResolver,
  TraceIntegrityError,
  traceInventoryRootSha256,
  TraceLookupError,
  type TraceLookupReason,
  verifyTrace,
} from "../layout.ts";
import { newRepo, readJson, writeJson, writeText } from "./layout_fixtures.ts";
import { sha256Hex } from "../src/port/sha256.ts";
import { FsIoError } from "../src/port/errors.ts";
import { memoryIo } from "./_cli_io.ts";
import { hookedFs, isRead, linkedBeforeOpen } from "./_hooks.ts";
import { runTraces } from "../src/cli/layout.ts";
import {
  buildMirrorTree,
  CHILD_ATTEMPT,
  mirror,
  MIRROR_CHILD_ID,
  MIRROR_ROOT_ID,
  ROOT_ATTEMPTS,
} from "./fixtures/mirror_tree.ts";

const FIRST = ROOT_ATTEMPTS.first.attemptId;

function lookupFails(reason: TraceLookupReason) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof TraceLookupError, String(error));
    assert.equal(error.reason, reason, error.message);
    return true;
  };
}

function integrityFails(file: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof TraceIntegrityError, String(error));
    assert.equal(error.file, file, error.message);
    return true;
  };
}

test("the inventory root hash is the engine's sorted-key, ASCII-escaped compact JSON hash", () => {
  // Expected values computed with Python: hashlib.sha256(json.dumps(inventory, sort_keys=True,
  // separators=(",", ":")).encode()).hexdigest().
  const inventory = [
    {
      path: "eval/report.json",
      sha256: `sha256:${"a".repeat(64)}`,
      size: 12,
      media_type: "application/json",
    },
    {
      path: "harness/caf\u00e9 \u{1F600}\u007f.txt",
      sha256: `sha256:${"b".repeat(64)}`,
      size: 0,
      media_type: "text/plain",
    },
  ];
  assert.equal(
    traceInventoryRootSha256(inventory),
    "sha256:87c2524ed568d6f3eff09387696f18ccdf96e4d27684cb7d16fffdef868bf7a1",
  );
  assert.equal(
    traceInventoryRootSha256([]),
    "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
  );
});

test("traces list shows every manifest with its lifecycle, integrity, session and workflow", async () => {
  const { fs, tree } = await mirror();
  const listed = await listTraces(fs, tree.loopyRoot);
  assert.deepEqual(
    listed.map((entry) => [
      entry.manifestId,
      entry.lifecycle,
      entry.integrity,
      entry.seal,
      entry.sessionId,
      entry.workflowId,
      entry.manifestPath,
    ]),
    [
      ROOT_ATTEMPTS.second,
      ROOT_ATTEMPTS.first,
      ROOT_ATTEMPTS.active,
      CHILD_ATTEMPT,
    ].map((attempt) => {
      const sealed = attempt !== ROOT_ATTEMPTS.active;
      const session = attempt === CHILD_ATTEMPT ? MIRROR_CHILD_ID : MIRROR_ROOT_ID;
      return [
        `trace-${attempt.attemptId}`,
        sealed ? "sealed" : "active",
        sealed ? "verified" : "not_finalized",
        sealed ? "verified" : "not_required",
        session,
        attempt.workflowId,
        `${tree.traceDir(attempt.attemptId)}/trace_manifest.json`,
      ];
    }),
  );
  assert.ok(listed.every((entry) => entry.problems.length === 0));
  const empty = await newRepo();
  await empty.mkdir("/repo/.loopy_loop");
  assert.deepEqual(await listTraces(empty, "/repo/.loopy_loop"), []);
});

test("traces inspect finds a trace by manifest id, attempt id or path and verifies every listed file", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  const byId = await inspectTrace(fs, tree.loopyRoot, `trace-${FIRST}`);
  assert.equal(byId.manifestPath, `${dir}/trace_manifest.json`);
  assert.deepEqual(byId.manifest, await readJson(fs, `${dir}/trace_manifest.json`));
  const integrity = byId.observedIntegrity;
  assert.equal(integrity.status, "verified");
  assert.equal(byId.integrity, "verified");
  assert.equal(integrity.expected_file_count, 11);
  assert.equal(integrity.actual_file_count, 11);
  assert.equal(integrity.files.length, 11);
  assert.ok(integrity.files.every((file) => file.status === "ok"));
  assert.equal(integrity.seal.status, "verified");
  assert.equal(integrity.seal.receipt_path, `${tree.rootDir}/trace_seals/${FIRST}.json`);
  for (const reference of [FIRST, dir, `${dir}/trace_manifest.json`, dir.slice("/repo/".length)]) {
    assert.equal((await locateTrace(fs, tree.loopyRoot, reference)).traceDir, dir, reference);
  }
  // The repository reached through a link (a symlinked working directory spells paths so).
  await fs.symlink("/repo", "/linked-repo");
  const linked = `/linked-repo/${dir.slice("/repo/".length)}/trace_manifest.json`;
  assert.equal((await locateTrace(fs, tree.loopyRoot, linked)).traceDir, dir);
  // A link to the traces directory from outside a repository is not a way in.
  await fs.symlink(tree.tracesDir, "/traces-link");
  await assert.rejects(
    locateTrace(fs, tree.loopyRoot, `/traces-link/${dir.slice(tree.tracesDir.length + 1)}`),
    lookupFails("outside"),
  );
  const active = await verifyTrace(fs, tree.loopyRoot, ROOT_ATTEMPTS.active.attemptId);
  assert.equal(active.status, "not_finalized");
});

test("a changed, missing or unlisted file fails verification, and the error names the file", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  await writeJson(fs, `${dir}/eval/report.json`, { passed: 0, failed: 4 });
  const inspected = await inspectTrace(fs, tree.loopyRoot, `trace-${FIRST}`);
  const modified = inspected.observedIntegrity.modified;
  assert.equal(inspected.integrity, "failed");
  assert.deepEqual(modified.map((item) => item.path), ["eval/report.json"]);
  assert.notEqual(modified[0]?.actual_sha256, modified[0]?.expected_sha256);
  assert.equal(
    inspected.observedIntegrity.files.find((file) => file.path === "eval/report.json")?.status,
    "modified",
  );
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, `trace-${FIRST}`),
    integrityFails(`${dir}/eval/report.json`),
  );
  const listed = await listTraces(fs, tree.loopyRoot);
  assert.equal(listed.find((entry) => entry.attemptId === FIRST)?.integrity, "failed");

  const second = tree.traceDir(ROOT_ATTEMPTS.second.attemptId);
  await fs.remove(`${second}/harness/run.json`);
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, ROOT_ATTEMPTS.second.attemptId),
    integrityFails(`${second}/harness/run.json`),
  );
  const child = tree.traceDir(CHILD_ATTEMPT.attemptId);
  await writeText(fs, `${child}/agents/extra.log`, "written after sealing");
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, CHILD_ATTEMPT.attemptId),
    integrityFails(`${child}/agents/extra.log`),
  );
  // A listed file replaced by a symlink is not followed.
  await fs.remove(`${child}/agents/extra.log`);
  await fs.remove(`${child}/eval/report.json`);
  await fs.symlink("/etc/passwd", `${child}/eval/report.json`);
  const linked = await inspectTrace(fs, tree.loopyRoot, CHILD_ATTEMPT.attemptId);
  assert.equal(linked.observedIntegrity.modified[0]?.error, "path is a symbolic link");
});

test("unlisted and changed files are reported in code point order, as the engine sorts them", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  // UTF-16 order puts the surrogate pair of U+1F600 before U+FF01; code point order after it.
  const names = ["agents/\u{1F600}.log", "agents/\uFF01.log", "agents/b.log", "agents/a.log"];
  for (const name of names) await writeText(fs, `${dir}/${name}`, "written after sealing");
  const inspected = await inspectTrace(fs, tree.loopyRoot, `trace-${FIRST}`);
  assert.deepEqual(inspected.observedIntegrity.added, [
    "agents/a.log",
    "agents/b.log",
    "agents/\uFF01.log",
    "agents/\u{1F600}.log",
  ]);
  // Listed files gone, and listed files changed, likewise.
  const manifestPath = `${dir}/trace_manifest.json`;
  const manifest = await readJson(fs, manifestPath) as { inventory: Record<string, unknown>[] };
  const listed = (path: string) => ({
    path,
    sha256: `sha256:${"0".repeat(64)}`,
    size: 1,
    media_type: "text/plain",
  });
  for (const name of ["\u{1F600}", "\uFF01", "b", "a"]) {
    manifest.inventory.push(listed(`gone/${name}.log`), listed(`agents/${name}.log`));
  }
  await writeJson(fs, manifestPath, manifest);
  const again = (await inspectTrace(fs, tree.loopyRoot, `trace-${FIRST}`)).observedIntegrity;
  const order = (prefix: string) =>
    ["a", "b", "\uFF01", "\u{1F600}"].map((name) => `${prefix}/${name}.log`);
  assert.deepEqual(again.added, []);
  assert.deepEqual(again.removed, order("gone"));
  assert.deepEqual(again.modified.map((item) => item.path), order("agents"));
});

test("traces are listed in the engine's path order: part by part, each by code point", async () => {
  const { fs, tree } = await mirror();
  // Misplaced manifests (each listed as failed), named so that UTF-16 order, or a walk listing a
  // directory's own manifest before those below it, would give another order.
  const places = ["\u{1F600}", "\uFF01", "x", "x/sub"];
  for (const place of places) {
    await fs.mkdir(`${tree.tracesDir}/${place}`, { recursive: true });
    await writeJson(fs, `${tree.tracesDir}/${place}/trace_manifest.json`, {
      manifest_id: `m-${place}`,
    });
  }
  const listed = (await listTraces(fs, tree.loopyRoot)).map((entry) => entry.traceDir);
  const misplaced = listed.filter((dir) => !dir.startsWith(`${tree.tracesDir}/${MIRROR_ROOT_ID}`));
  assert.deepEqual(
    misplaced,
    ["x/sub", "x", "\uFF01", "\u{1F600}"].map((place) => `${tree.tracesDir}/${place}`),
  );
  // The engine's own trace directories come first here ("2026..." sorts before "x").
  assert.equal(listed.indexOf(misplaced[0] as string), listed.length - 4);
});

test("a listed file swapped for a link to an identical copy after the listing is not followed", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  const member = `${dir}/eval/report.json`;
  // The verifier lists the trace, then opens each file it saw: the swap comes in between, and a
  // link to a copy with the sealed bytes would hash as the sealed file if the open followed it.
  const racing = linkedBeforeOpen(fs, member, "/copy-of-report.json", "/report-aside.json");
  const inspected = await inspectTrace(racing.fs, tree.loopyRoot, `trace-${FIRST}`);
  assert.ok(racing.swapped());
  assert.equal(inspected.integrity, "failed");
  assert.deepEqual(inspected.observedIntegrity.modified.map((item) => [item.path, item.error]), [
    ["eval/report.json", "path is a symbolic link"],
  ]);
  assert.equal(
    inspected.observedIntegrity.files.find((file) => file.path === "eval/report.json")?.status,
    "not_a_file",
  );
});

test("a listed file another process holds a lease on is read once the lease allows, never failed for it", async () => {
  const { fs, tree } = await mirror();
  const member = `${tree.traceDir(FIRST)}/eval/report.json`;
  // A lease makes the non-blocking no-follow open fail at once (EAGAIN); a plain open waits.
  const leased = hookedFs(fs, {
    before(method, args) {
      if ((method === "openNoFollow" || method === "readFileNoFollow") && args[0] === member) {
        throw new FsIoError("EAGAIN", method, member, "Resource temporarily unavailable");
      }
    },
  });
  const inspected = await inspectTrace(leased, tree.loopyRoot, `trace-${FIRST}`);
  assert.equal(inspected.integrity, "verified");
  await verifyTrace(leased, tree.loopyRoot, `trace-${FIRST}`);
});

test("a manifest listing ../ or absolute paths is reported and nothing it names is read", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  const manifestPath = `${dir}/trace_manifest.json`;
  const manifest = await readJson(fs, manifestPath);
  const escape = `../../../../../sessions/${MIRROR_ROOT_ID}/state.json`;
  const hash = `sha256:${"0".repeat(64)}`;
  await writeJson(fs, manifestPath, {
    ...manifest,
    inventory: [
      ...(manifest.inventory as unknown[]),
      { path: escape, sha256: hash, size: 1, media_type: "application/json" },
      { path: "/etc/passwd", sha256: hash, size: 1, media_type: "text/plain" },
      { path: "eval//report.json", sha256: hash, size: 1, media_type: "text/plain" },
    ],
  });
  fs.resetCounter();
  const inspected = await inspectTrace(fs, tree.loopyRoot, `trace-${FIRST}`);
  const errors = inspected.observedIntegrity.manifest_errors;
  assert.ok(errors.some((error) => error.includes(JSON.stringify(escape))), errors.join("; "));
  assert.ok(errors.some((error) => error.includes('"/etc/passwd"')), errors.join("; "));
  assert.ok(errors.some((error) => error.includes('"eval//report.json"')), errors.join("; "));
  assert.equal(inspected.observedIntegrity.status, "failed");
  const touched = new Set(fs.operationLog.map((op) => op.path));
  assert.equal(touched.has(`${tree.rootDir}/state.json`), false);
  assert.equal(touched.has("/etc/passwd"), false);
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, `trace-${FIRST}`),
    integrityFails(manifestPath),
  );
});

test("a seal receipt that contradicts its manifest, or is missing, fails verification", async () => {
  const { fs, tree } = await mirror();
  const receipt = `${tree.rootDir}/trace_seals/${FIRST}.json`;
  const seal = await readJson(fs, receipt);
  await writeJson(fs, receipt, { ...seal, manifest_sha256: `sha256:${"1".repeat(64)}` });
  const inspected = await inspectTrace(fs, tree.loopyRoot, FIRST);
  assert.equal(inspected.observedIntegrity.seal.status, "mismatch");
  assert.deepEqual(inspected.observedIntegrity.seal.errors, [
    "trace seal receipt field 'manifest_sha256' does not match",
  ]);
  await assert.rejects(verifyTrace(fs, tree.loopyRoot, FIRST), integrityFails(receipt));
  // Editing the manifest (here: its lifecycle) breaks the seal's manifest hash.
  await writeJson(fs, receipt, seal);
  assert.equal((await verifyTrace(fs, tree.loopyRoot, FIRST)).status, "verified");
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  await writeJson(fs, manifestPath, {
    ...(await readJson(fs, manifestPath)),
    lifecycle: "incomplete",
  });
  await assert.rejects(verifyTrace(fs, tree.loopyRoot, FIRST), integrityFails(receipt));
  await fs.remove(receipt);
  const missing = await inspectTrace(fs, tree.loopyRoot, FIRST);
  assert.equal(missing.observedIntegrity.seal.status, "missing");
  assert.equal(missing.observedIntegrity.status, "failed");
});

test("checkTraceSeals verifies each seal and reports one for a missing attempt or a foreign one", async () => {
  const { fs, tree } = await mirror();
  const seals = `${tree.rootDir}/trace_seals`;
  const good = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  assert.deepEqual(good.map((check) => [check.attemptId, check.status]), [
    [ROOT_ATTEMPTS.second.attemptId, "verified"],
    [FIRST, "verified"],
  ]);
  const seal = await readJson(fs, `${seals}/${FIRST}.json`);
  // A seal for an attempt that has no trace.
  await writeJson(fs, `${seals}/ffffffffffff.json`, {
    ...seal,
    attempt_id: "ffffffffffff",
    manifest_id: "trace-ffffffffffff",
  });
  // A copy under another attempt's name, one naming another session, and a symlinked one.
  await writeJson(fs, `${seals}/aaaaaaaaaaaa.json`, seal);
  await writeJson(fs, `${seals}/bbbbbbbbbbbb.json`, {
    ...seal,
    attempt_id: "bbbbbbbbbbbb",
    session_id: MIRROR_CHILD_ID,
  });
  await fs.symlink(`${seals}/${FIRST}.json`, `${seals}/cccccccccccc.json`);
  await writeText(fs, `${seals}/dddddddddddd.json`, "{ torn");
  const checks = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  const status = Object.fromEntries(
    checks.map((check) => [check.sealPath.split("/").at(-1), check.status]),
  );
  assert.deepEqual(status, {
    [`${ROOT_ATTEMPTS.second.attemptId}.json`]: "verified",
    [`${FIRST}.json`]: "verified",
    "aaaaaaaaaaaa.json": "invalid",
    "bbbbbbbbbbbb.json": "invalid",
    "cccccccccccc.json": "invalid",
    "dddddddddddd.json": "invalid",
    "ffffffffffff.json": "trace_absent",
  });
  // The resolver treats the sealed-but-absent trace as pruned rather than unknown.
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: MIRROR_ROOT_ID,
  });
  assert.equal(
    (await resolver.resolve("trace:trace-ffffffffffff:/eval/report.json")).status,
    "pruned",
  );
});

test("checkTraceSeals compares each receipt with its manifest, whatever session the manifest names", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  const manifestPath = `${dir}/trace_manifest.json`;
  // A sealed file replaced, the inventory re-hashed to match it, and the manifest's identity
  // pointed at a session that does not exist, so that no receipt is found through it.
  const forged = new TextEncoder().encode(JSON.stringify({ passed: 0, failed: 9 }));
  await fs.writeFile(`${dir}/eval/report.json`, forged);
  const manifest = await readJson(fs, manifestPath);
  const inventory = (manifest.inventory as Record<string, unknown>[]).map((item) =>
    item.path === "eval/report.json"
      ? { ...item, sha256: `sha256:${sha256Hex(forged)}`, size: forged.length }
      : item
  );
  const identity = {
    ...(manifest.identity as Record<string, unknown>),
    session_id: "ghost-session",
  };
  await writeJson(fs, manifestPath, { ...manifest, inventory, identity });
  const checks = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  const first = checks.find((check) => check.attemptId === FIRST);
  assert.equal(first?.status, "failed");
  const problems = first?.problems ?? [];
  for (const field of ["manifest_sha256", "inventory_root_sha256", "session_id"]) {
    assert.ok(
      problems.includes(`trace seal receipt field '${field}' does not match`),
      problems.join("; "),
    );
  }
  assert.ok(
    problems.some((problem) => problem.includes("'identity.session_id'")),
    problems.join("; "),
  );
  // The other seal is untouched.
  assert.equal(
    checks.find((check) => check.attemptId === ROOT_ATTEMPTS.second.attemptId)?.status,
    "verified",
  );
  // An identity naming the attempt of another directory is caught the same way.
  await writeJson(fs, manifestPath, {
    ...manifest,
    identity: { ...(manifest.identity as Record<string, unknown>), attempt_id: "0123456789ab" },
  });
  const moved = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  const again = moved.find((check) => check.attemptId === FIRST);
  assert.equal(again?.status, "failed");
  assert.ok(
    again?.problems.includes("trace seal receipt field 'attempt_id' does not match"),
    again?.problems.join("; "),
  );
  assert.ok(
    again?.problems.some((problem) => problem.includes("'identity.attempt_id'")),
    again?.problems.join("; "),
  );
});

test("a trace_manifest.json above the attempts hides no trace below it and is listed as failed", async () => {
  const { fs, tree } = await mirror();
  await writeJson(fs, `${tree.traceDir(FIRST)}/eval/report.json`, { passed: 99 });
  const sessionTraces = `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}`;
  const decoy = `${sessionTraces}/trace_manifest.json`;
  await writeJson(fs, decoy, {
    schema_version: 1,
    manifest_id: "trace-decoy",
    lifecycle: "active",
  });
  const listed = await listTraces(fs, tree.loopyRoot);
  const integrity = Object.fromEntries(
    listed.map((entry) => [entry.manifestPath, entry.integrity]),
  );
  assert.deepEqual(integrity, {
    [decoy]: "failed",
    [`${tree.traceDir(ROOT_ATTEMPTS.second.attemptId)}/trace_manifest.json`]: "verified",
    [`${tree.traceDir(FIRST)}/trace_manifest.json`]: "failed",
    [`${tree.traceDir(ROOT_ATTEMPTS.active.attemptId)}/trace_manifest.json`]: "not_finalized",
    [`${tree.traceDir(CHILD_ATTEMPT.attemptId)}/trace_manifest.json`]: "verified",
  });
  const misplaced = listed.find((entry) => entry.manifestPath === decoy);
  assert.match(misplaced?.problems.join() ?? "", /not in an attempt's trace directory/);
  await assert.rejects(verifyTrace(fs, tree.loopyRoot, "trace-decoy"), integrityFails(decoy));
  // Lookups and references still reach the traces below it.
  assert.equal(
    (await locateTrace(fs, tree.loopyRoot, `trace-${FIRST}`)).traceDir,
    tree.traceDir(FIRST),
  );
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: MIRROR_ROOT_ID,
  });
  const report = await resolver.resolve(`trace:trace-${FIRST}:/eval/report.json`);
  assert.deepEqual([report.exists, report.status], [true, "present"]);
  // A misplaced manifest is never the target of a trace: reference.
  await assert.rejects(
    resolver.resolve("trace:trace-decoy:/attempts"),
    (error: unknown) => error instanceof LogicalReferenceError && error.reason === "unknown_trace",
  );
  const { io } = memoryIo(fs, tree.loopyRoot, Date.now());
  assert.equal(await runTraces(io, ["list"]), 1);
});

test("a finalized manifest whose identity names another session or attempt than its directory fails", async () => {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  const manifest = await readJson(fs, manifestPath);
  await writeJson(fs, manifestPath, {
    ...manifest,
    identity: { ...(manifest.identity as Record<string, unknown>), session_id: "ghost-session" },
  });
  const inspected = await inspectTrace(fs, tree.loopyRoot, `trace-${FIRST}`);
  assert.equal(inspected.integrity, "failed");
  assert.ok(
    inspected.observedIntegrity.manifest_errors.some((error) =>
      error.includes("'identity.session_id'")
    ),
    inspected.observedIntegrity.manifest_errors.join("; "),
  );
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, `trace-${FIRST}`),
    integrityFails(manifestPath),
  );
});

test("lookups that name no single trace are typed errors", async () => {
  const { fs, tree } = await mirror();
  await assert.rejects(
    locateTrace(fs, tree.loopyRoot, "trace-000000000000"),
    lookupFails("not_found"),
  );
  await assert.rejects(locateTrace(fs, tree.loopyRoot, "/etc/passwd"), lookupFails("outside"));
  await assert.rejects(locateTrace(fs, tree.loopyRoot, "../outside/x"), lookupFails("outside"));
  await assert.rejects(locateTrace(fs, tree.loopyRoot, tree.tracesDir), lookupFails("outside"));
  await assert.rejects(
    locateTrace(fs, tree.loopyRoot, `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions`),
    lookupFails("not_a_manifest"),
  );
  await assert.rejects(
    locateTrace(fs, tree.loopyRoot, `${tree.traceDir(FIRST)}/eval/report.json`),
    lookupFails("not_a_manifest"),
  );
  await assert.rejects(
    locateTrace(fs, tree.loopyRoot, `${tree.tracesDir}/nowhere/trace_manifest.json`),
    lookupFails("not_found"),
  );
  // A symlinked trace directory inside traces/ is neither listed nor inspected through.
  const linked = `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}/attempts/linked`;
  await fs.symlink(tree.traceDir(FIRST), linked);
  await assert.rejects(locateTrace(fs, tree.loopyRoot, linked), lookupFails("symlink"));
  assert.equal((await listTraces(fs, tree.loopyRoot)).length, 4);
  // Two manifests with one id.
  const copy = `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}/attempts/copy`;
  await fs.mkdir(copy);
  await fs.writeFile(
    `${copy}/trace_manifest.json`,
    await fs.readFile(`${tree.traceDir(FIRST)}/trace_manifest.json`),
  );
  await assert.rejects(locateTrace(fs, tree.loopyRoot, `trace-${FIRST}`), lookupFails("ambiguous"));
});

test("an unreadable or symlinked manifest is listed as failed, and lookups report it", async () => {
  const { fs, tree } = await mirror();
  const attempts = `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}/attempts`;
  await fs.mkdir(`${attempts}/torn`);
  await writeText(fs, `${attempts}/torn/trace_manifest.json`, '{"manifest_id": "trace-torn"');
  await fs.mkdir(`${attempts}/linked`);
  await fs.symlink("/etc/manifest.json", `${attempts}/linked/trace_manifest.json`);
  const listed = await listTraces(fs, tree.loopyRoot);
  const failed = listed.filter((entry) => entry.manifestId === null);
  assert.deepEqual(failed.map((entry) => [entry.traceDir, entry.integrity]), [
    [`${attempts}/linked`, "failed"],
    [`${attempts}/torn`, "failed"],
  ]);
  assert.ok(failed.every((entry) => entry.problems.length === 1));
  // The trace named (by its attempt id or its manifest id) has a damaged manifest: that damage
  // is the answer, naming the manifest, not "not found".
  const damaged = (path: string) => (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, path);
    return true;
  };
  for (const reference of ["torn", "trace-torn"]) {
    await assert.rejects(
      locateTrace(fs, tree.loopyRoot, reference),
      damaged(`${attempts}/torn/trace_manifest.json`),
    );
    await assert.rejects(
      inspectTrace(fs, tree.loopyRoot, reference),
      damaged(`${attempts}/torn/trace_manifest.json`),
    );
  }
  await assert.rejects(
    locateTrace(fs, tree.loopyRoot, "linked"),
    damaged(`${attempts}/linked/trace_manifest.json`),
  );
  await assert.rejects(inspectTrace(fs, tree.loopyRoot, `${attempts}/torn`), LayoutRecordError);
  // An id no readable manifest has: not found, saying that two manifests could not be read.
  await assert.rejects(locateTrace(fs, tree.loopyRoot, "trace-elsewhere"), (error: unknown) => {
    assert.ok(lookupFails("not_found")(error));
    assert.match(
      (error as Error).message,
      new RegExp(`2 manifests could not be read.*"${attempts}/linked/trace_manifest\\.json"`),
    );
    return true;
  });
  assert.equal((await verifyTrace(fs, tree.loopyRoot, FIRST)).status, "verified");
});

test("a seal receipt is never read through a symlinked trace_seals/: the seal is a mismatch", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const seals = `${tree.rootDir}/trace_seals`;
  await fs.mkdir("/outside", { recursive: true });
  await fs.rename(seals, "/outside/seals");
  await fs.symlink("/outside/seals", seals);
  fs.resetCounter();
  const listed = await listTraces(fs, tree.loopyRoot);
  const inspection = await inspectTrace(
    fs,
    tree.loopyRoot,
    `trace-${ROOT_ATTEMPTS.first.attemptId}`,
  );
  const reads = fs.operationLog.filter((record) =>
    /^(readFile|open)/.test(record.op) && record.path.startsWith(`${seals}/`)
  );
  assert.deepEqual(reads, [], "nothing read through the link");
  const first = listed.find((entry) => entry.attemptId === ROOT_ATTEMPTS.first.attemptId);
  assert.equal(first?.seal, "mismatch");
  assert.equal(inspection.observedIntegrity.seal.status, "mismatch");
  assert.match(inspection.observedIntegrity.seal.errors.join(), /symlink/);
});

test("traces list exits 1 when a trace fails its integrity check, as traces inspect does", async () => {
  const { fs, tree } = await mirror();
  const run = async (args: string[]) => {
    const { io, out } = memoryIo(fs, tree.loopyRoot, Date.now());
    return { code: await runTraces(io, args), out: out() };
  };
  assert.equal((await run(["list"])).code, 0);
  await writeJson(fs, `${tree.traceDir(FIRST)}/eval/report.json`, { passed: 0, failed: 4 });
  const table = await run(["list"]);
  assert.equal(table.code, 1);
  assert.match(table.out, new RegExp(`trace-${FIRST} +\\S+ +failed`));
  assert.equal((await run(["list", "--json"])).code, 1);
  assert.equal((await run(["inspect", `trace-${FIRST}`])).code, 1);
});

test("a trace removed while the traces are listed is left out, and the others are listed", async () => {
  const { fs, tree } = await mirror();
  const gone = tree.traceDir(ROOT_ATTEMPTS.first.attemptId);
  let removed = false;
  // Removed right before its manifest is read, after the scan found it (a prune meanwhile).
  const racing = hookedFs(fs, {
    async before(method, args) {
      if (!removed && isRead(method) && args[0] === `${gone}/trace_manifest.json`) {
        removed = true;
        await fs.remove(gone, { recursive: true });
      }
    },
  });
  const listed = await listTraces(racing, tree.loopyRoot);
  assert.ok(removed);
  assert.deepEqual(
    listed.map((entry) => [entry.manifestId, entry.integrity]),
    [ROOT_ATTEMPTS.second, ROOT_ATTEMPTS.active, CHILD_ATTEMPT].map((attempt) => [
      `trace-${attempt.attemptId}`,
      attempt === ROOT_ATTEMPTS.active ? "not_finalized" : "verified",
    ]),
  );
});

test("a manifest whose id is under another key the engine reads is listed, found and refused by that id and key", async () => {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  const manifest = await readJson(fs, manifestPath);
  // trace_manifest_id comes first in the engine's order: it is the trace's id.
  await writeJson(fs, manifestPath, { ...manifest, trace_manifest_id: "legacy-first" });
  const listed = (await listTraces(fs, tree.loopyRoot)).find((entry) =>
    entry.manifestPath === manifestPath
  );
  assert.equal(listed?.manifestId, "legacy-first");
  assert.equal((await locateTrace(fs, tree.loopyRoot, "legacy-first")).manifestPath, manifestPath);
  // Looked up by the id of its directory, the manifest is refused at the key its id is under.
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: tree.repoRoot,
    sessionId: MIRROR_ROOT_ID,
  });
  await assert.rejects(
    resolver.resolve(`trace:trace-${FIRST}:/eval/report.json`),
    (error: unknown) =>
      error instanceof LayoutRecordError && error.file === manifestPath &&
      error.path === "trace_manifest_id" && error.value === "legacy-first",
  );
});
