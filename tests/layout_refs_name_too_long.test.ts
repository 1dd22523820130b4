// A reference within the grammar's 4096 bytes can still name a path the filesystem finds too long
// (ENAMETOOLONG): the root of its scope (the session directory) is longer than `session:/`. That
// is the reference's fault, not the storage's: the resolver refuses it as a grammar
// LogicalReferenceError, so the records that cite it are refused at the citing field.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nodeFs } from "../adapters/node.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { FsError } from "../src/port/errors.ts";
import {
  createRootSession,
  LayoutRecordError,
  LogicalReferenceError,
  LogicalReferenceResolver,
  MAX_REFERENCE_LENGTH,
  readTerminalControl,
  writeSessionOutcome,
} from "../layout.ts";
import {
  commitTerminalState,
  CONTRACTS,
  goalMetControl,
  newRepo,
  newRoot,
  writeJson,
} from "./layout_fixtures.ts";

const PATH_MAX = 4096;

/**
 * `session:/project_state/<d…>/…/<e…>` followed by `suffix`: directories of 200-character names
 * are created below the session's `project_state/` up to about 3990 bytes of path, and the last
 * segment makes the whole path longer than `PATH_MAX`, while the reference stays within its
 * 4096-byte limit.
 */
async function deepReference(
  fs: FileSystem,
  sessionDir: string,
  suffix = "",
): Promise<string> {
  let dir = `${sessionDir}/project_state`;
  const segments = ["project_state"];
  const name = "d".repeat(200);
  while (dir.length + 201 < 3990) {
    dir = `${dir}/${name}`;
    segments.push(name);
    await fs.mkdir(dir);
  }
  segments.push("e".repeat(PATH_MAX + 4 - dir.length));
  const reference = `session:/${segments.join("/")}${suffix}`;
  assert.ok(reference.length <= MAX_REFERENCE_LENGTH, `${reference.length} bytes`);
  assert.ok(`${sessionDir}/${segments.join("/")}`.length > PATH_MAX);
  return reference;
}

/** Asserts a grammar refusal of `reference` caused by the filesystem's ENAMETOOLONG. */
function tooLong(reference: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LogicalReferenceError, String(error));
    assert.equal(error.reason, "grammar");
    assert.equal(error.reference, reference);
    assert.match(error.message, /too long for the filesystem/);
    assert.ok(error.cause instanceof FsError, String(error.cause));
    assert.equal(error.cause.code, "ENAMETOOLONG");
    return true;
  };
}

function refusedAt(file: string, path: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, path, error.message);
    return true;
  };
}

function goalMet(sessionId: string, refs: Record<string, string[]>): Record<string, unknown> {
  return goalMetControl(sessionId, "outer", refs);
}

const EXPECTED = { workflowId: "outer", attemptId: "a26", completionRole: "outer" };

test("a reference whose path is too long for the filesystem is a grammar LogicalReferenceError", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const reference = await deepReference(fs, root.dir);
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: root.sessionId,
  });
  await assert.rejects(resolver.resolve(reference), tooLong(reference));
  await assert.rejects(resolver.resolveExisting(reference), tooLong(reference));
  // holder looks up the listed spelling of `RAW` in the directory that is too long to reach.
  const holderRef = `${reference}/RAW/x.json`;
  await assert.rejects(resolver.holder(holderRef), tooLong(holderRef));
  // The same reference without the spelling to look up costs holder no call: it is classified.
  assert.equal((await resolver.holder(reference))?.sessionId, root.sessionId);
});

test("a goal_met control citing such evidence or eval receipt is refused at the field", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const reference = await deepReference(fs, root.dir);
  const file = root.paths.controlJson;
  await writeJson(fs, file, goalMet(root.sessionId, { evidence_refs: [reference] }));
  await assert.rejects(
    readTerminalControl(fs, root.paths, { sessionId: root.sessionId, ...EXPECTED }),
    refusedAt(file, "evidence_refs[0]"),
  );
  const evalRef = `${reference}/RAW/x.json`;
  await writeJson(fs, file, goalMet(root.sessionId, { eval_receipt_refs: [evalRef] }));
  await assert.rejects(
    readTerminalControl(fs, root.paths, { sessionId: root.sessionId, ...EXPECTED }),
    refusedAt(file, "eval_receipt_refs[0]"),
  );
});

test("a folded outcome citing such a path through delivery_receipts is refused at the field", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const reference = `${await deepReference(fs, root.dir)}/Delivery_Receipts/d.json`;
  await commitTerminalState(fs, root.dir, "failed", 3, "2026-04-19T15:00:01Z");
  await assert.rejects(
    writeSessionOutcome(fs, root.paths, {
      sessionId: root.sessionId,
      rootSessionId: root.sessionId,
      goalSha256: root.manifest.goal_hash,
      terminalStatus: "failed",
      stopReason: "max_turns",
      terminalStateRevision: 3,
      terminalAt: "2026-04-19T15:00:01Z",
      handoff: {
        status: "missing",
        handoff: undefined,
        sha256: null,
        revision: null,
        diagnosis: "none",
      },
      deliveryRefs: [reference],
    }),
    refusedAt(root.paths.sessionOutcomeJson, "delivery_refs[0]"),
  );
  assert.equal(await fs.lstat(root.paths.sessionOutcomeJson).then(() => true, () => false), false);
});

test("on a real filesystem, such evidence is refused at control.json evidence_refs[0]", async () => {
  const base = await realpath(await mkdtemp(join(tmpdir(), "loop-too-long-")));
  try {
    const fs = nodeFs();
    const root = await createRootSession(fs, { repoRoot: base, goal: "Ship it", ...CONTRACTS });
    const reference = await deepReference(fs, root.dir);
    const resolver = await LogicalReferenceResolver.forSession(fs, {
      repoRoot: base,
      sessionId: root.sessionId,
    });
    await assert.rejects(resolver.resolve(reference), tooLong(reference));
    const file = root.paths.controlJson;
    await fs.writeFile(
      file,
      new TextEncoder().encode(
        JSON.stringify(goalMet(root.sessionId, { evidence_refs: [reference] })),
      ),
    );
    await assert.rejects(
      readTerminalControl(fs, root.paths, { sessionId: root.sessionId, ...EXPECTED }),
      refusedAt(file, "evidence_refs[0]"),
    );
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});
