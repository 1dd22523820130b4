// Damaged mirror traces and seal receipts: malformed inventory entries, receipts that are not
// receipts, a sealed manifest edited back or gone while its trace stays, an ambiguous session
// id, symlinked or non-directory traces paths, files changed between listing and read, storage
// faults. Each is reported or refused naming what is wrong; nothing is written.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  checkTraceSeals,
  inspectTrace,
  LayoutRecordError,
  listTraces,
  locateTrace,
  LogicalReferenceError,
  LoopyRootError,
  scanTraceManifests,
  TraceIntegrityError,
  TraceLookupError,
  verifyTrace,
} from "../layout.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  assertNothingThrough,
  readJson,
  resolverFor,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";
import { hookedFs } from "./_hooks.ts";
import {
  CHILD_ATTEMPT,
  linkRootAttemptsOutside,
  mirror,
  MIRROR_CHILD_ID,
  MIRROR_ROOT_ID,
  type MirrorTree,
  ROOT_ATTEMPTS,
} from "./fixtures/mirror_tree.ts";

const FIRST = ROOT_ATTEMPTS.first.attemptId;
const SECOND = ROOT_ATTEMPTS.second.attemptId;
const HASH = `sha256:${"0".repeat(64)}`;

/** The mirror tree, with the path and contents of its first root attempt's trace manifest. */
async function firstManifest() {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  return { fs, tree, manifestPath, manifest: await readJson(fs, manifestPath) };
}

/** The entry `listTraces` gives for the trace whose manifest is at `manifestPath`. */
async function listedAt(fs: FileSystem, tree: MirrorTree, manifestPath: string) {
  return (await listTraces(fs, tree.loopyRoot)).find((entry) =>
    entry.manifestPath === manifestPath
  );
}

/** Asserts `error` is a `TraceIntegrityError` naming `file`. */
function integrityFails(file: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof TraceIntegrityError, String(error));
    assert.equal(error.file, file, error.message);
    return true;
  };
}

test("malformed inventory entries are manifest errors naming each entry, and none is trusted", async () => {
  const { fs, tree, manifestPath, manifest } = await firstManifest();
  const inventory = manifest.inventory as Record<string, unknown>[];
  const first = inventory[0] as Record<string, unknown>;
  const sealed = inventory.length;
  await writeJson(fs, manifestPath, {
    ...manifest,
    inventory: [
      ...inventory,
      "eval/report.json",
      { sha256: HASH, size: 1 },
      { path: "", sha256: HASH, size: 1 },
      // A second entry for a sealed file, with other bytes: the first entry stands.
      { ...first, sha256: HASH, size: 1 },
      { path: "extra/negative.txt", sha256: HASH, size: -1 },
      { path: "extra/fraction.txt", sha256: HASH, size: 1.5 },
      { path: "extra/text-size.txt", sha256: HASH, size: "1" },
      { path: "extra/upper.txt", sha256: `sha256:${"A".repeat(64)}`, size: 1 },
      { path: "extra/bare.txt", sha256: "0".repeat(64), size: 1 },
    ],
  });
  const before = fs.snapshotTree();
  const inspected = await inspectTrace(fs, tree.loopyRoot, `trace-${FIRST}`);
  const report = inspected.observedIntegrity;
  assert.deepEqual(report.manifest_errors.filter((error) => /^(manifest )?inventory/.test(error)), [
    `inventory[${sealed}] is not an object`,
    `inventory[${sealed + 1}].path is not a non-empty string`,
    `inventory[${sealed + 2}].path is not a non-empty string`,
    `manifest inventory repeats path ${JSON.stringify(first.path)}`,
    `inventory[${sealed + 4}].size is not a non-negative integer`,
    `inventory[${sealed + 5}].size is not a non-negative integer`,
    `inventory[${sealed + 6}].size is not a non-negative integer`,
    `inventory[${sealed + 7}].sha256 is not a canonical SHA-256 digest`,
    `inventory[${sealed + 8}].sha256 is not a canonical SHA-256 digest`,
  ]);
  // Only the valid entries are expected files: the sealed ones, each still intact.
  assert.equal(report.expected_file_count, sealed);
  assert.deepEqual(report.removed, []);
  assert.ok(report.files.every((file) => file.status === "ok"), JSON.stringify(report.files));
  assert.equal(report.status, "failed");
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, `trace-${FIRST}`),
    integrityFails(manifestPath),
  );
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a seal receipt that is a directory, not a JSON object, torn, or of another schema is a mismatch naming the receipt", async () => {
  const { fs, tree } = await mirror();
  const receipt = `${tree.rootDir}/trace_seals/${FIRST}.json`;
  const intact = await fs.readFile(receipt);
  const cases: [string, () => Promise<void>, string][] = [
    ["a directory", async () => {
      await fs.remove(receipt);
      await fs.mkdir(receipt);
    }, "trace seal receipt is not a regular file (directory)"],
    ["a JSON array", async () => {
      await fs.remove(receipt, { recursive: true });
      await writeJson(fs, receipt, [JSON.parse(new TextDecoder().decode(intact))]);
    }, "trace seal receipt is unreadable"],
    ["torn", async () => {
      await fs.writeFile(receipt, intact.subarray(0, 30));
    }, "trace seal receipt is unreadable"],
    ["of schema 2", async () => {
      const seal = JSON.parse(new TextDecoder().decode(intact));
      await writeJson(fs, receipt, { ...seal, schema_version: 2 });
    }, "trace seal receipt schema is invalid"],
  ];
  for (const [name, damage, problem] of cases) {
    await damage();
    const before = fs.snapshotTree();
    const seal = (await inspectTrace(fs, tree.loopyRoot, FIRST)).observedIntegrity.seal;
    assert.deepEqual(seal, { status: "mismatch", receipt_path: receipt, errors: [problem] }, name);
    await assert.rejects(verifyTrace(fs, tree.loopyRoot, FIRST), integrityFails(receipt), name);
    const listed = (await listTraces(fs, tree.loopyRoot)).find((entry) =>
      entry.attemptId === FIRST
    );
    assert.deepEqual([listed?.integrity, listed?.seal], ["failed", "mismatch"], name);
    assert.deepEqual(fs.snapshotTree(), before, name);
  }
});

test("a finalized manifest whose identity is not an object cannot locate its seal and fails", async () => {
  const { fs, tree, manifestPath, manifest } = await firstManifest();
  for (const identity of ["97521a5ed6b7", null, [MIRROR_ROOT_ID, FIRST]]) {
    await writeJson(fs, manifestPath, { ...manifest, identity });
    const report = (await inspectTrace(fs, tree.loopyRoot, `trace-${FIRST}`)).observedIntegrity;
    assert.deepEqual(report.seal, {
      status: "mismatch",
      receipt_path: null,
      errors: ["finalized trace identity is invalid"],
    }, JSON.stringify(identity));
    assert.equal(report.status, "failed");
    await assert.rejects(
      verifyTrace(fs, tree.loopyRoot, `trace-${FIRST}`),
      integrityFails(manifestPath),
    );
  }
});

test("a session id two session directories share locates no seal: the trace is a mismatch", async () => {
  const { fs, tree } = await mirror();
  // Another tree holding a child under the same id as the mirror child.
  const other = `${tree.loopyRoot}/sessions/20260420_090000_aaaaaaaaaaaa_00000000`;
  await fs.mkdir(`${other}/children/${MIRROR_CHILD_ID}`, { recursive: true });
  await writeJson(fs, `${other}/session.json`, { session_id: "other" });
  await writeJson(fs, `${other}/children/${MIRROR_CHILD_ID}/session.json`, { session_id: "copy" });
  const before = fs.snapshotTree();
  const report = (await inspectTrace(fs, tree.loopyRoot, CHILD_ATTEMPT.attemptId))
    .observedIntegrity;
  assert.deepEqual(report.seal, {
    status: "mismatch",
    receipt_path: null,
    errors: [
      `session id ${JSON.stringify(MIRROR_CHILD_ID)} is ambiguous; its seal cannot be located`,
    ],
  });
  const manifestPath = `${tree.traceDir(CHILD_ATTEMPT.attemptId)}/trace_manifest.json`;
  await assert.rejects(
    verifyTrace(fs, tree.loopyRoot, CHILD_ATTEMPT.attemptId),
    integrityFails(manifestPath),
  );
  // The root's traces are not affected.
  assert.equal((await verifyTrace(fs, tree.loopyRoot, FIRST)).status, "verified");
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a symlinked traces directory is refused by every trace reader, naming it", async () => {
  const { fs, tree } = await mirror();
  await fs.rename(tree.tracesDir, "/elsewhere-traces");
  await fs.symlink("/elsewhere-traces", tree.tracesDir);
  const before = fs.snapshotTree();
  const refused = (error: unknown): boolean => {
    assert.ok(error instanceof LoopyRootError, String(error));
    assert.equal(error.path, tree.tracesDir);
    return true;
  };
  await assert.rejects(listTraces(fs, tree.loopyRoot), refused);
  await assert.rejects(locateTrace(fs, tree.loopyRoot, `trace-${FIRST}`), refused);
  await assert.rejects(inspectTrace(fs, tree.loopyRoot, FIRST), refused);
  await assert.rejects(
    checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID }),
    refused,
  );
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a trace directory named by path whose manifest is a symlink is refused", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  await fs.rename(`${dir}/trace_manifest.json`, "/copied_manifest.json");
  await fs.symlink("/copied_manifest.json", `${dir}/trace_manifest.json`);
  await assert.rejects(locateTrace(fs, tree.loopyRoot, dir), (error: unknown) => {
    assert.ok(error instanceof TraceLookupError, String(error));
    assert.equal(error.reason, "symlink");
    return true;
  });
});

test("a listed file removed or replaced by a directory after the listing is missing or not a file", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  const removed = `${dir}/eval/report.json`;
  const replaced = `${dir}/harness/run.json`;
  const done = new Set<string>();
  // Each changed right before it is opened, after the walk listed it as a file.
  const racing = hookedFs(fs, {
    async before(method, args) {
      const path = args[0];
      if (!/^open/.test(method) || typeof path !== "string" || done.has(path)) return;
      if (path === removed) {
        done.add(path);
        await fs.remove(path);
      } else if (path === replaced) {
        done.add(path);
        await fs.remove(path);
        await fs.mkdir(path);
      }
    },
  });
  const report = (await inspectTrace(racing, tree.loopyRoot, FIRST)).observedIntegrity;
  assert.equal(done.size, 2);
  assert.deepEqual(report.removed, ["eval/report.json"]);
  assert.deepEqual(
    report.modified.map((item) => [item.path, item.error]),
    [["harness/run.json", "path is not a regular file"]],
  );
  const status = Object.fromEntries(report.files.map((file) => [file.path, file.status]));
  assert.equal(status["eval/report.json"], "missing");
  assert.equal(status["harness/run.json"], "not_a_file");
  assert.equal(report.status, "failed");
});

test("a storage fault while the traces are scanned fails the listing: no trace is silently left out", async () => {
  const { fs, tree } = await mirror();
  const attempts = `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}/attempts`;
  const failing = hookedFs(fs, {
    before(method, args) {
      if (method === "readDir" && args[0] === attempts) {
        throw new FsIoError("EIO", "readDir", attempts, "injected");
      }
    },
  });
  await assert.rejects(listTraces(failing, tree.loopyRoot), FsIoError);
  await assert.rejects(locateTrace(failing, tree.loopyRoot, `trace-${FIRST}`), FsIoError);
  const resolver = await resolverFor(failing, MIRROR_ROOT_ID, tree.repoRoot);
  await assert.rejects(resolver.resolve(`trace:trace-${FIRST}:/eval/report.json`), FsIoError);
});

test("a manifest carrying no id under any key the engine reads is listed without one", async () => {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  const { manifest_id: _id, ...manifest } = await readJson(fs, manifestPath);
  await writeJson(fs, manifestPath, { ...manifest, trace_id: 7, attempt_id: null });
  const listed = await listedAt(fs, tree, manifestPath);
  assert.equal(listed?.manifestId, null);
  assert.equal(listed?.integrity, "failed");
  // Found by its identity's attempt id, never by an id it does not carry.
  assert.equal((await locateTrace(fs, tree.loopyRoot, FIRST)).manifestPath, manifestPath);
});

test("checkTraceSeals reports trace_seals/ that is missing or not a directory, and skips other names", async () => {
  const { fs, tree } = await mirror();
  const seals = `${tree.childDir}/trace_seals`;
  const child = { sessionId: MIRROR_CHILD_ID };
  await writeText(fs, `${seals}/notes.txt`, "not a receipt");
  await writeText(fs, `${seals}/.hidden.json`, "{ torn");
  assert.deepEqual(
    (await checkTraceSeals(fs, tree.loopyRoot, child)).map((check) => check.status),
    ["verified"],
  );
  await fs.remove(seals, { recursive: true });
  assert.deepEqual(await checkTraceSeals(fs, tree.loopyRoot, child), []);
  await writeText(fs, seals, "a file where trace_seals/ belongs");
  const before = fs.snapshotTree();
  assert.deepEqual(await checkTraceSeals(fs, tree.loopyRoot, child), [{
    sealPath: seals,
    manifestId: null,
    attemptId: null,
    status: "invalid",
    traceDir: null,
    problems: ["trace_seals is not a directory (file)"],
  }]);
  assert.deepEqual(fs.snapshotTree(), before);
});

test("checkTraceSeals never follows a symlink on the way to a sealed trace", async () => {
  const { fs, tree } = await mirror();
  const attempts = await linkRootAttemptsOutside(fs, tree);
  fs.resetCounter();
  const checks = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  assert.deepEqual(
    checks.map((check) => [check.attemptId, check.status, check.traceDir, check.problems]),
    [SECOND, FIRST].map((attempt) => [
      attempt,
      "invalid",
      tree.traceDir(attempt),
      ["the sealed trace's path passes through a symlink"],
    ]),
  );
  assertNothingThrough(fs, "/outside-attempts", `${attempts}/`);
});

test("checkTraceSeals fails a seal whose manifest is active, torn, a directory or a symlink, and only that seal", async () => {
  const { fs, tree, manifestPath, manifest } = await firstManifest();
  const intact = await fs.readFile(manifestPath);
  const cases: [string, () => Promise<void>, (problems: readonly string[]) => boolean][] = [
    ["active", async () => {
      await writeJson(fs, manifestPath, { ...manifest, lifecycle: "active" });
    }, (problems) =>
      problems.includes(
        "the sealed trace's manifest is not finalized, and its session holds its seal receipt",
      )],
    ["torn", async () => {
      await fs.writeFile(manifestPath, intact.subarray(0, 40));
    }, (problems) => problems.length === 1 && problems[0]?.includes(manifestPath) === true],
    ["a directory", async () => {
      await fs.remove(manifestPath);
      await fs.mkdir(manifestPath);
    }, (problems) =>
      problems.length === 1 &&
      problems[0]?.startsWith("Trace manifest is not a regular file (directory)") === true],
    ["a symlink", async () => {
      await fs.remove(manifestPath, { recursive: true });
      await fs.writeFile("/copied_manifest.json", intact);
      await fs.symlink("/copied_manifest.json", manifestPath);
    }, (problems) =>
      problems.length === 1 &&
      problems[0]?.startsWith("Trace manifest is not a regular file (symlink)") === true],
  ];
  for (const [name, damage, expected] of cases) {
    await damage();
    const before = fs.snapshotTree();
    const checks = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
    const first = checks.find((check) => check.attemptId === FIRST);
    assert.equal(first?.status, "failed", name);
    assert.equal(first?.traceDir, tree.traceDir(FIRST), name);
    assert.ok(expected(first?.problems ?? []), `${name}: ${first?.problems.join("; ")}`);
    assert.equal(checks.find((check) => check.attemptId === SECOND)?.status, "verified", name);
    assert.deepEqual(fs.snapshotTree(), before, name);
  }
});

test("a manifest that is valid JSON but not an object is listed as failed and refused by inspect, naming it", async () => {
  const { fs, tree, manifestPath, manifest } = await firstManifest();
  for (const value of [[manifest], 7, null, "trace-97521a5ed6b7"]) {
    await writeJson(fs, manifestPath, value);
    const before = fs.snapshotTree();
    const listed = await listedAt(fs, tree, manifestPath);
    assert.deepEqual(
      [listed?.manifestId, listed?.integrity, listed?.seal, listed?.problems],
      [null, "failed", null, [`Trace manifest is not a JSON object (in '${manifestPath}')`]],
      JSON.stringify(value),
    );
    await assert.rejects(inspectTrace(fs, tree.loopyRoot, manifestPath), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, manifestPath);
      return true;
    });
    assert.deepEqual(fs.snapshotTree(), before);
  }
});

test("a trace directory removed while the traces are scanned is left out, and the others are listed", async () => {
  const { fs, tree } = await mirror();
  const gone = tree.traceDir(FIRST);
  let removed = false;
  // Removed right before the scan lists it, after its parent's listing named it (a prune).
  const racing = hookedFs(fs, {
    async before(method, args) {
      if (!removed && method === "readDir" && args[0] === gone) {
        removed = true;
        await fs.remove(gone, { recursive: true });
      }
    },
  });
  const listed = await listTraces(racing, tree.loopyRoot);
  assert.ok(removed);
  assert.deepEqual(
    listed.map((entry) => entry.attemptId),
    [SECOND, ROOT_ATTEMPTS.active.attemptId, CHILD_ATTEMPT.attemptId],
  );
});

test("a manifest below a directory named trace_manifest.json is listed after it, as the engine sorts paths", async () => {
  const { fs, tree } = await mirror();
  const misplaced = `${tree.tracesDir}/${MIRROR_ROOT_ID}/trace_manifest.json`;
  await fs.mkdir(misplaced);
  await writeJson(fs, `${misplaced}/trace_manifest.json`, { manifest_id: "trace-nested" });
  const listed = await listTraces(fs, tree.loopyRoot);
  const paths = listed.map((entry) => entry.manifestPath).filter((path) =>
    path.startsWith(misplaced)
  );
  assert.deepEqual(paths, [misplaced, `${misplaced}/trace_manifest.json`]);
  assert.ok(
    listed.filter((entry) => entry.manifestPath.startsWith(misplaced)).every((entry) =>
      entry.integrity === "failed"
    ),
  );
});

test("a regular file where .loopy_loop/traces belongs holds no trace, for every reader alike", async () => {
  const { fs, tree } = await mirror();
  await fs.remove(tree.tracesDir, { recursive: true });
  await writeText(fs, tree.tracesDir, "a file where the traces directory belongs");
  const before = fs.snapshotTree();
  assert.deepEqual(await listTraces(fs, tree.loopyRoot), []);
  assert.deepEqual(
    await scanTraceManifests(fs, tree.tracesDir, { rootSessionId: MIRROR_ROOT_ID }),
    [],
  );
  const seals = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  assert.deepEqual(seals.map((check) => check.status), ["trace_absent", "trace_absent"]);
  // A trace: reference reads the same: a recorded trace is pruned, any other id unknown.
  const resolver = await resolverFor(fs, MIRROR_ROOT_ID, tree.repoRoot);
  const pruned = await resolver.resolve(`trace:trace-${FIRST}:/eval/report.json`);
  assert.deepEqual([pruned.exists, pruned.status], [false, "pruned"]);
  await assert.rejects(
    resolver.resolve("trace:trace-000000000000:/eval/report.json"),
    (error: unknown) => error instanceof LogicalReferenceError && error.reason === "unknown_trace",
  );
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a trace path is looked up as spelled when the repository cannot be resolved, and a port's own bug is not hidden", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  // The repository is resolved once when the .loopy_loop root is opened; later resolutions fail.
  const failingRealPath = (error: Error) => {
    let calls = 0;
    return hookedFs(fs, {
      before(method) {
        if (method === "realPath" && ++calls > 1) throw error;
      },
    });
  };
  // A storage error resolving the repository: the path is used as given.
  const io = failingRealPath(new FsIoError("EIO", "realPath", tree.repoRoot, "injected"));
  assert.equal((await locateTrace(io, tree.loopyRoot, dir)).traceDir, dir);
  // Anything else a port throws is a bug of the port, reported as it is.
  const bug = new TypeError("realPath is broken");
  await assert.rejects(locateTrace(failingRealPath(bug), tree.loopyRoot, dir), (error) => {
    assert.equal(error, bug);
    return true;
  });
});

test("a sealed trace whose manifest was edited back to active fails: its session holds the seal receipt", async () => {
  const { fs, tree } = await mirror();
  const dir = tree.traceDir(FIRST);
  const manifestPath = `${dir}/trace_manifest.json`;
  const manifest = await readJson(fs, manifestPath);
  // Unsealing the manifest would otherwise hide any later change of the sealed files.
  await writeJson(fs, `${dir}/eval/report.json`, { passed: 0, failed: 99 });
  for (const lifecycle of ["active", undefined]) {
    await writeJson(fs, manifestPath, { ...manifest, lifecycle });
    const before = fs.snapshotTree();
    const report = (await inspectTrace(fs, tree.loopyRoot, FIRST)).observedIntegrity;
    const problem = "the sealed trace's manifest is not finalized, and its session holds its " +
      "seal receipt";
    assert.equal(report.status, "failed", String(lifecycle));
    assert.deepEqual(report.manifest_errors, [problem]);
    assert.deepEqual(report.seal, {
      status: "mismatch",
      receipt_path: `${tree.rootDir}/trace_seals/${FIRST}.json`,
      errors: [],
    });
    await assert.rejects(verifyTrace(fs, tree.loopyRoot, FIRST), integrityFails(manifestPath));
    const listed = await listedAt(fs, tree, manifestPath);
    assert.deepEqual([listed?.integrity, listed?.seal, listed?.problems], [
      "failed",
      "mismatch",
      [problem],
    ]);
    assert.deepEqual(fs.snapshotTree(), before);
  }
  // The trace the root is running has no receipt yet: it is not finalized, and nothing else,
  // also where no receipt can be looked for (trace_seals/ a file, or a link never followed).
  const running = ROOT_ATTEMPTS.active.attemptId;
  assert.equal((await verifyTrace(fs, tree.loopyRoot, running)).status, "not_finalized");
  const seals = `${tree.rootDir}/trace_seals`;
  await fs.rename(seals, "/outside-seals");
  await writeText(fs, seals, "not a directory");
  assert.equal((await verifyTrace(fs, tree.loopyRoot, running)).status, "not_finalized");
  await fs.remove(seals);
  await fs.symlink("/outside-seals", seals);
  assert.equal((await verifyTrace(fs, tree.loopyRoot, running)).status, "not_finalized");
});

test("checkTraceSeals fails a seal whose manifest is not finalized even where the session id is ambiguous", async () => {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(CHILD_ATTEMPT.attemptId)}/trace_manifest.json`;
  await writeJson(fs, manifestPath, { ...(await readJson(fs, manifestPath)), lifecycle: "active" });
  // Another tree holding a child under the same id as the mirror child.
  const other = `${tree.loopyRoot}/sessions/20260420_090000_aaaaaaaaaaaa_00000000`;
  await fs.mkdir(`${other}/children/${MIRROR_CHILD_ID}`, { recursive: true });
  await writeJson(fs, `${other}/session.json`, { session_id: "other" });
  await writeJson(fs, `${other}/children/${MIRROR_CHILD_ID}/session.json`, { session_id: "copy" });
  const checks = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_CHILD_ID });
  assert.equal(checks[0]?.status, "failed");
  assert.ok(
    checks[0]?.problems.includes(
      "the sealed trace's manifest is not finalized, and its session holds its seal receipt",
    ),
    checks[0]?.problems.join("; "),
  );
});

test("checkTraceSeals fails a seal whose trace is still there without its manifest, or is a file", async () => {
  const { fs, tree } = await mirror();
  // The sealed files stay, changed; only the manifest that lists their hashes is gone.
  await fs.remove(`${tree.traceDir(FIRST)}/trace_manifest.json`);
  await writeJson(fs, `${tree.traceDir(FIRST)}/eval/report.json`, { passed: 0, failed: 99 });
  await fs.remove(tree.traceDir(SECOND), { recursive: true });
  await writeText(fs, tree.traceDir(SECOND), "a file where the trace belongs");
  const before = fs.snapshotTree();
  const checks = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  assert.deepEqual(
    checks.map((check) => [check.attemptId, check.status, check.traceDir, check.problems]),
    [
      [SECOND, "failed", tree.traceDir(SECOND), [
        "the sealed trace's directory is not a directory (file)",
      ]],
      [FIRST, "failed", tree.traceDir(FIRST), [
        "the sealed trace's manifest is missing while its trace directory is present",
      ]],
    ],
  );
  assert.deepEqual(fs.snapshotTree(), before);
  // A trace that is gone altogether is absent (pruned), not failed.
  await fs.remove(tree.traceDir(FIRST), { recursive: true });
  const pruned = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  assert.equal(pruned.find((check) => check.attemptId === FIRST)?.status, "trace_absent");
});

test("a storage fault looking for the seal receipt of an unfinalized trace fails the check, never passing it", async () => {
  const { fs, tree } = await mirror();
  const receipt = `${tree.rootDir}/trace_seals/${ROOT_ATTEMPTS.active.attemptId}.json`;
  const failing = hookedFs(fs, {
    before(method, args) {
      if (method === "lstat" && args[0] === receipt) {
        throw new FsIoError("EIO", "lstat", receipt, "injected");
      }
    },
  });
  await assert.rejects(
    verifyTrace(failing, tree.loopyRoot, ROOT_ATTEMPTS.active.attemptId),
    FsIoError,
  );
  assert.equal(
    (await verifyTrace(fs, tree.loopyRoot, ROOT_ATTEMPTS.active.attemptId)).status,
    "not_finalized",
  );
});
