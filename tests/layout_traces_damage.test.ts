// Trace readers over damaged mirror manifests: a manifest that only this trace's own problems
// make fail is reported as that trace's failure, never as a raw error of every reader (which would
// hide every other trace of the repository).
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  checkTraceSeals,
  inspectTrace,
  isSafeFileId,
  listTraces,
  LogicalReferenceError,
  LogicalReferenceResolver,
  MAX_FILE_NAME_BYTES,
  TraceIntegrityError,
  traceInventoryRootSha256,
  verifyTrace,
} from "../layout.ts";
import { newRepo, readJson, writeJson, writeText } from "./layout_fixtures.ts";
import { sha256Hex } from "../src/port/sha256.ts";
import { memoryIo } from "./_cli_io.ts";
import { runTraces } from "../src/cli/layout.ts";
import {
  buildMirrorTree,
  CHILD_ATTEMPT,
  mirror,
  MIRROR_ROOT_ID,
  type MirrorTree,
  ROOT_ATTEMPTS,
} from "./fixtures/mirror_tree.ts";

const FIRST = ROOT_ATTEMPTS.first.attemptId;
const SEALED = [ROOT_ATTEMPTS.second, ROOT_ATTEMPTS.first, CHILD_ATTEMPT].map((a) => a.attemptId);

/** The manifest of the first root attempt rewritten as `edit` returns it (JSON text). */
async function damageFirst(edit: (manifest: Record<string, unknown>) => string): Promise<{
  fs: MemoryFs;
  tree: MirrorTree;
  manifestPath: string;
}> {
  const { fs, tree } = await mirror();
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  await writeText(fs, manifestPath, edit(await readJson(fs, manifestPath)));
  return { fs, tree, manifestPath };
}

/** A manifest whose first inventory entry holds a value nested `depth` levels (`[[[…]]]`). */
function deepInventory(depth: number) {
  return (manifest: Record<string, unknown>): string => {
    const inventory = manifest.inventory as Record<string, unknown>[];
    (inventory[0] as Record<string, unknown>).media_type = "__DEEP__";
    return JSON.stringify(manifest, null, 2)
      .replace('"__DEEP__"', "[".repeat(depth) + "]".repeat(depth));
  };
}

/** Every other trace is listed as before: the damage of one hides none. */
async function othersListedNormally(fs: MemoryFs, tree: MirrorTree): Promise<void> {
  const listed = await listTraces(fs, tree.loopyRoot);
  assert.equal(listed.length, 4);
  for (const entry of listed) {
    if (entry.manifestPath === `${tree.traceDir(FIRST)}/trace_manifest.json`) continue;
    const sealed = entry.attemptId !== ROOT_ATTEMPTS.active.attemptId;
    assert.equal(entry.integrity, sealed ? "verified" : "not_finalized", entry.manifestPath);
    assert.deepEqual(entry.problems, [], entry.manifestPath);
  }
}

test("the inventory root hash is written without recursion, byte for byte as before", () => {
  // The sealed fixtures' receipts (hashed by an independent writer) still verify: see
  // layout_traces.test.ts. Here: deep values hash as their canonical text, on every runtime.
  for (const depth of [1, 4_000, 200_000]) {
    const text = "[".repeat(depth) + "]".repeat(depth);
    assert.equal(
      traceInventoryRootSha256(JSON.parse(text)),
      `sha256:${sha256Hex(new TextEncoder().encode(text))}`,
      `${depth} levels`,
    );
  }
  const nested = JSON.parse(
    '{"b":[1,{"z":null,"a":true}],"a":"\u00e9\\n","\u{1F600}":[],"c":{},"d":-0.5,"e":1e300}',
  );
  const text = '{"a":"\\u00e9\\n","b":[1,{"a":true,"z":null}],"c":{},"d":-0.5,"e":1e+300,' +
    '"\\ud83d\\ude00":[]}';
  assert.equal(
    traceInventoryRootSha256(nested),
    `sha256:${sha256Hex(new TextEncoder().encode(text))}`,
  );
});

test("a manifest whose inventory nests a value 4,000 or 200,000 levels deep fails that trace only", async () => {
  for (const depth of [4_000, 200_000]) {
    const { fs, tree, manifestPath } = await damageFirst(deepInventory(depth));
    const before = JSON.stringify(fs.snapshotTree("/"));
    const label = `${depth} levels`;
    const listed = await listTraces(fs, tree.loopyRoot);
    const damaged = listed.find((entry) => entry.manifestPath === manifestPath);
    assert.equal(damaged?.integrity, "failed", label);
    assert.equal(damaged?.manifestId, `trace-${FIRST}`, label);
    // The receipt binds the manifest's bytes and its inventory: both now differ.
    assert.deepEqual(damaged?.problems, [
      "trace seal receipt field 'manifest_sha256' does not match",
      "trace seal receipt field 'inventory_root_sha256' does not match",
    ], label);
    await othersListedNormally(fs, tree);
    const inspected = await inspectTrace(fs, tree.loopyRoot, manifestPath);
    assert.equal(inspected.integrity, "failed", label);
    assert.equal(inspected.observedIntegrity.seal.status, "mismatch", label);
    await assert.rejects(
      verifyTrace(fs, tree.loopyRoot, `trace-${FIRST}`),
      (error: unknown) => {
        assert.ok(error instanceof TraceIntegrityError, String(error));
        assert.equal(error.file, `${tree.rootDir}/trace_seals/${FIRST}.json`);
        assert.match(error.message, /inventory_root_sha256|manifest_sha256/);
        return true;
      },
      label,
    );
    const seals = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
    assert.deepEqual(
      new Map(seals.map((seal) => [seal.attemptId, seal.status])),
      new Map([[ROOT_ATTEMPTS.first.attemptId, "failed"], [
        ROOT_ATTEMPTS.second.attemptId,
        "verified",
      ]]),
      label,
    );
    const failed = seals.find((seal) => seal.status === "failed");
    assert.ok(
      failed?.problems.includes("trace seal receipt field 'inventory_root_sha256' does not match"),
    );
    const { io, out } = memoryIo(fs, tree.loopyRoot, Date.now());
    assert.equal(await runTraces(io, ["list"]), 1, label);
    for (const id of SEALED) assert.match(out(), new RegExp(`trace-${id}`), label);
    assert.equal(JSON.stringify(fs.snapshotTree("/")), before, `${label}: nothing written`);
  }
});

test("safe ids made into file names are at most 255 bytes with their extension", () => {
  assert.equal(MAX_FILE_NAME_BYTES, 255);
  assert.ok(isSafeFileId("a".repeat(250), ".json"));
  assert.ok(!isSafeFileId("a".repeat(251), ".json"));
  assert.ok(isSafeFileId("a".repeat(255)));
  assert.ok(!isSafeFileId("a".repeat(256)));
  assert.ok(isSafeFileId(FIRST, ".json"));
  for (const unsafe of ["", ".hidden", "a/b", "-x", "a b"]) {
    assert.ok(!isSafeFileId(unsafe), unsafe);
  }
});

test("a manifest whose identity.attempt_id is too long for a file name fails that trace only", async () => {
  for (const length of [251, 300, 5_000]) {
    const { fs, tree, manifestPath } = await damageFirst((manifest) => {
      (manifest.identity as Record<string, unknown>).attempt_id = "a".repeat(length);
      return JSON.stringify(manifest, null, 2);
    });
    const before = JSON.stringify(fs.snapshotTree("/"));
    const label = `${length} characters`;
    const listed = await listTraces(fs, tree.loopyRoot);
    const damaged = listed.find((entry) => entry.manifestPath === manifestPath);
    assert.equal(damaged?.integrity, "failed", label);
    assert.equal(damaged?.seal, "mismatch", label);
    assert.ok(
      damaged?.problems.includes("finalized trace identity cannot locate its seal receipt"),
      `${label}: ${damaged?.problems}`,
    );
    await othersListedNormally(fs, tree);
    const inspected = await inspectTrace(fs, tree.loopyRoot, manifestPath);
    assert.equal(inspected.observedIntegrity.seal.status, "mismatch", label);
    assert.equal(inspected.observedIntegrity.seal.receipt_path, null, label);
    await assert.rejects(
      verifyTrace(fs, tree.loopyRoot, manifestPath),
      (error: unknown) => error instanceof TraceIntegrityError && error.file === manifestPath,
      label,
    );
    const seals = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
    const first = seals.find((seal) => seal.attemptId === FIRST);
    assert.equal(first?.status, "failed", label);
    assert.ok(
      first?.problems.includes("trace seal receipt field 'attempt_id' does not match"),
      label,
    );
    const { io } = memoryIo(fs, tree.loopyRoot, Date.now());
    assert.equal(await runTraces(io, ["list"]), 1, label);
    assert.equal(JSON.stringify(fs.snapshotTree("/")), before, `${label}: nothing written`);
  }
});

test("a seal receipt path too long to look up (a deep repository) is a mismatch of that trace only", async () => {
  // The repository's path leaves room for every file of the tree (at most 158 bytes below it),
  // not for a receipt named after a 250-character attempt id (327 bytes below it).
  const repoRoot = `/${Array.from({ length: 19 }, () => "d".repeat(200)).join("/")}/${
    "r".repeat(30)
  }`;
  assert.equal(repoRoot.length, 3850);
  const fs = await newRepo();
  await fs.mkdir(repoRoot, { recursive: true });
  const tree = await buildMirrorTree(fs, repoRoot);
  const manifestPath = `${tree.traceDir(FIRST)}/trace_manifest.json`;
  const manifest = await readJson(fs, manifestPath);
  (manifest.identity as Record<string, unknown>).attempt_id = "a".repeat(250);
  await writeText(fs, manifestPath, JSON.stringify(manifest, null, 2));
  const before = JSON.stringify(fs.snapshotTree("/"));
  const listed = await listTraces(fs, tree.loopyRoot);
  const damaged = listed.find((entry) => entry.manifestPath === manifestPath);
  assert.equal(damaged?.integrity, "failed");
  assert.equal(damaged?.seal, "mismatch");
  assert.ok(
    damaged?.problems.includes("trace seal receipt path is too long to be looked up"),
    String(damaged?.problems),
  );
  await othersListedNormally(fs, tree);
  const inspected = await inspectTrace(fs, tree.loopyRoot, manifestPath);
  assert.equal(inspected.observedIntegrity.seal.status, "mismatch");
  const seals = await checkTraceSeals(fs, tree.loopyRoot, { sessionId: MIRROR_ROOT_ID });
  assert.equal(seals.find((seal) => seal.attemptId === FIRST)?.status, "failed");
  assert.equal(JSON.stringify(fs.snapshotTree("/")), before, "nothing written");
});

test("a manifest holding a 200,000-character string shows it short in every problem and error", async () => {
  const huge = "a".repeat(200_000);
  const { fs, tree, manifestPath } = await damageFirst((manifest) => {
    (manifest.identity as Record<string, unknown>).attempt_id = huge;
    const inventory = manifest.inventory as Record<string, unknown>[];
    (inventory[0] as Record<string, unknown>).path = `../${huge}`;
    return JSON.stringify(manifest, null, 2);
  });
  const damaged = (await listTraces(fs, tree.loopyRoot))
    .find((entry) => entry.manifestPath === manifestPath);
  assert.equal(damaged?.integrity, "failed");
  assert.ok(damaged?.problems.some((problem) => problem.startsWith("inventory[0].path")));
  assert.ok(damaged?.problems.some((problem) => problem.includes("identity.attempt_id")));
  for (const problem of damaged?.problems ?? []) {
    assert.ok(problem.length < 500, `${problem.length}`);
  }
  await assert.rejects(verifyTrace(fs, tree.loopyRoot, manifestPath), (error: unknown) => {
    assert.ok(error instanceof TraceIntegrityError, String(error));
    assert.ok(error.message.length < 1_000, `${error.message.length} characters`);
    return true;
  });
});

test("a trace record naming an attempt id too long for a file name is skipped when resolving trace: refs", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  await fs.mkdir(`${tree.rootDir}/iterations/0009_outer`, { recursive: true });
  const statuses: string[] = [];
  for (const length of [12, 250, 300]) {
    await writeJson(fs, `${tree.rootDir}/iterations/0009_outer/trace_ref.json`, {
      manifest_id: `trace-long-${length}`,
      attempt_id: "a".repeat(length),
    });
    const resolver = await LogicalReferenceResolver.forSession(fs, {
      repoRoot: tree.repoRoot,
      sessionId: MIRROR_ROOT_ID,
    });
    const reference = `trace:trace-long-${length}:/eval/report.json`;
    try {
      statuses.push((await resolver.resolve(reference)).status);
    } catch (error) {
      // A record that cannot name a trace directory names no trace: an unknown manifest.
      assert.ok(error instanceof LogicalReferenceError, `${length}: ${error}`);
      statuses.push("refused");
    }
  }
  // Recorded and resolvable (its trace was pruned) while the attempt id makes a file name.
  assert.deepEqual(statuses.slice(0, 2), ["pruned", "pruned"]);
  assert.equal(statuses[2], "refused");
});
