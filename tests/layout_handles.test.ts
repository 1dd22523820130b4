// No operation of the folded layout leaves a file handle open, failed or not: for every public
// operation that touches files, a run without faults and a run with a fault injected at every
// operation n (EIO transient and persistent, and a persistent ENOSPC for the writers) leave
// `MemoryFs.openHandles` empty once the operation settled and the work it may have left running
// had its turn (a handle opened late by a promise nobody awaited is a leak too). The operations
// that open files to read or sync them run on a port without no-follow opens as well. After a
// transient fault, no temp file is left, and of the layout's own private entries only those the
// operation documents leaving: each goes with the recovery the layout names for it, except a
// root's ordinal reservation, which stays but holds no ordinal its published session does not.
import { test } from "node:test";
import { setImmediate } from "node:timers";
import assert from "node:assert/strict";
import type { FaultError, MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  acceptEvalReceipt,
  appendEvents,
  assertReceivesWork,
  chainKind,
  checkTraceSeals,
  createAttemptArtifacts,
  type CreateAttemptOptions,
  createRootSession,
  createSessionId,
  ensureRepository,
  findLoopyRoot,
  findWorkingSession,
  type GitBoundary,
  inspectTrace,
  listPendingChildRequests,
  listRootSessionIds,
  listTraces,
  loadSessionTree,
  locateTrace,
  LogicalReferenceResolver,
  MAX_CHILD_REQUEST_BYTES,
  missingScaffoldEntries,
  observeHandoff,
  openLoopyRoot,
  openSessionPaths,
  parseSessionManifest,
  processNextChildRequest,
  pruneRaw,
  publishChildRequest,
  readChildOutcome,
  readChildrenLedger,
  readControl,
  readEvents,
  readHandoff,
  readRecord,
  readRecordIfExists,
  readSessionManifest,
  readSessionState,
  readSessionStateIfExists,
  readTerminalControl,
  readTraceRef,
  recordChildOutcome,
  recordedTraces,
  recordParentAcceptance,
  removeStagingLeftovers,
  scanEvents,
  scanTraceManifests,
  SessionPaths,
  updateSessionState,
  verifyTrace,
  walkSessionDirs,
  writeAttemptResult,
  writeGitReceipt,
  writeSessionOutcome,
} from "../layout.ts";
import {
  childRequest,
  CONTRACTS,
  deterministic,
  evalReceipt,
  finishChildBlocked,
  newRepo,
  newRoot,
  STOPPED_AT,
  stoppedOutcome,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";
import { failAtEveryOperation } from "./_crash.ts";
import { isTempName } from "../src/port/durable.ts";
import { STAGING_PREFIX } from "../src/layout/paths.ts";
import { isPruningName } from "../src/layout/loopy_root.ts";
import { highestOrdinal, ORDINAL_RESERVATION_PREFIX } from "../src/layout/ids.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";
import {
  buildMirrorTree,
  CHILD_ATTEMPT,
  MIRROR_CHILD_ID,
  MIRROR_ROOT_ID,
  ROOT_ATTEMPTS,
  stopMirrorRoot,
} from "./fixtures/mirror_tree.ts";
import { withoutNoFollow } from "./_hooks.ts";

const encoder = new TextEncoder();
const REPO = "/repo";
const LOOPY = `${REPO}/.loopy_loop`;
const SESSIONS = `${LOOPY}/sessions`;
const ROOT_ID = "001_ship-the-ultimate-memory-program";
const ROOT_DIR = `${SESSIONS}/${ROOT_ID}`;
const root = new SessionPaths(ROOT_DIR, "folded");
const CHILD_ID = "01_phase-0";
const child = new SessionPaths(root.childDir(CHILD_ID), "folded");
const MIRROR_ROOT_DIR = `${SESSIONS}/${MIRROR_ROOT_ID}`;
const mirrorRoot = new SessionPaths(MIRROR_ROOT_DIR, "mirror");
const ATTEMPT = { iteration: 26, workflowId: "outer", attemptId: "a26" };
const BOUNDARY: GitBoundary = { head: "c0ffee", branch: "main", dirty: false };

/** The artifacts of attempt 26, the same each time (so a second creation finds them kept). */
function artifacts(): CreateAttemptOptions {
  return {
    prompt: "Attempt 26\n",
    pathsMap: { session_dir: ROOT_DIR },
    snapshot: { "assignment.json": { attempt_id: ATTEMPT.attemptId } },
    ...deterministic(),
  };
}

async function goalHash(fs: FileSystem, sessionDir: string): Promise<string> {
  return (await readSessionManifest(fs, sessionDir)).goal_hash;
}

// ---- Baselines: each built once, made durable, and cloned for every run. ----

type Baseline = () => Promise<MemoryFs>;

/** `build` run once on a new repository, its result made durable; later calls reuse it. */
function baseline(build: (fs: MemoryFs) => Promise<unknown> = async () => {}): Baseline {
  let built: Promise<MemoryFs> | undefined;
  return () =>
    built ??= (async () => {
      const fs = await newRepo();
      await build(fs);
      fs.syncAll();
      return fs;
    })();
}

const emptyRepo = baseline();
const withRoot = baseline(async (fs) => {
  await newRoot(fs);
});

/** The root without its events.jsonl: the next append creates it. */
const withoutEvents = baseline(async (fs) => {
  await newRoot(fs);
  await fs.remove(root.eventsJsonl);
});

/** The root with an events.jsonl ending in a torn record, and a root's staging leftover. */
const withRootExtras = baseline(async (fs) => {
  await newRoot(fs);
  await writeText(fs, root.eventsJsonl, '{"event":"torn');
  await fs.mkdir(`${SESSIONS}/.staging-002_next-0a1b2c3d/project_state`, { recursive: true });
  await writeText(fs, `${SESSIONS}/.staging-002_next-0a1b2c3d/session.json`, "{}");
});

/** Attempt 26 of the root, with its raw eval report, git-after receipt and eval receipt. */
async function buildAttempt(fs: MemoryFs): Promise<void> {
  await newRoot(fs);
  await createAttemptArtifacts(fs, root, ATTEMPT, artifacts());
  await writeJson(fs, `${ROOT_DIR}/raw/0026_outer/eval/report.json`, { passed: 3 });
  await writeGitReceipt(fs, root, ROOT_ID, ATTEMPT, "after", BOUNDARY, deterministic());
  await writeJson(fs, root.evalReceipt("tests-pass"), evalReceipt(ROOT_ID));
}

const withAttempt = baseline(buildAttempt);
const withAcceptedEval = baseline(async (fs) => {
  await buildAttempt(fs);
  await acceptEval(fs);
});

/** The root stopped (max_turns at revision 1), its outcome not written yet. */
async function buildStopped(fs: MemoryFs): Promise<void> {
  await newRoot(fs);
  await updateSessionState(fs, ROOT_DIR, (state) => {
    state.status = "max_turns";
    state.terminal_state_revision = 1;
    state.terminal_at = STOPPED_AT;
  }, { updatedAt: STOPPED_AT });
}

const stopped = baseline(buildStopped);
const withOutcome = baseline(async (fs) => {
  await buildStopped(fs);
  await writeOutcome(fs);
});

/** The request `phase-0` pending in the root, declaring two inputs. */
async function buildPending(fs: MemoryFs): Promise<void> {
  await newRoot(fs);
  await writeText(fs, `${ROOT_DIR}/project_state/tasks/spec.md`, "# Spec\n");
  await writeText(fs, `${REPO}/README.md`, "readme");
  await publishChildRequest(fs, root, pendingRequest());
}

function pendingRequest() {
  return childRequest("phase-0", {
    input_refs: ["session:/project_state/tasks/spec.md", "repo:/README.md"],
  });
}

const withPending = baseline(buildPending);
const withTornRequest = baseline(async (fs) => {
  await newRoot(fs);
  await writeText(fs, `${root.childRequestsPendingDir}/phase-0.json`, "{torn json");
});

const BIG_REQUEST = `${root.childRequestsPendingDir}/big.json`;

/** A pending request `reportedTooLarge` makes look too large to read. */
const withLargeRequest = baseline(async (fs) => {
  await newRoot(fs);
  await writeJson(fs, BIG_REQUEST, childRequest("big"));
});

/**
 * `fs` where `lstat` reports the file at `BIG_REQUEST` one byte larger than
 * `MAX_CHILD_REQUEST_BYTES` (as a sparse file of that size would be), so it is rejected unread and
 * hashed through a handle, without a 16 MiB file in every clone.
 */
function reportedTooLarge(fs: FileSystem): FileSystem {
  return new Proxy(fs, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (property === "lstat") {
        return async (path: string) => {
          const info = await target.lstat(path);
          return path === BIG_REQUEST ? { ...info, size: MAX_CHILD_REQUEST_BYTES + 1 } : info;
        };
      }
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** The root's active child `01_phase-0` finished (blocked), its outcome not recorded yet. */
async function buildTerminalChild(fs: MemoryFs): Promise<void> {
  await buildPending(fs);
  await processNext(fs);
  await finishChildBlocked(fs, child, CHILD_ID, ROOT_ID);
}

const withTerminalChild = baseline(buildTerminalChild);
const withRecordedChild = baseline(async (fs) => {
  await buildTerminalChild(fs);
  await recordOutcome(fs);
});

const folded = baseline(async (fs) => {
  await buildFoldedTree(fs);
});
const mirror = baseline(async (fs) => {
  await buildMirrorTree(fs);
});
const mirrorStopped = baseline(async (fs) => {
  await stopMirrorRoot(fs, await buildMirrorTree(fs));
});

// ---- The operations, as the scenarios call them. ----

function processNext(fs: FileSystem) {
  return processNextChildRequest(fs, {
    repoRoot: REPO,
    parentSessionId: ROOT_ID,
    ...deterministic(),
  });
}

function recordOutcome(fs: FileSystem) {
  return recordChildOutcome(fs, { repoRoot: REPO, parentSessionId: ROOT_ID, ...deterministic() });
}

function acceptEval(fs: FileSystem) {
  return acceptEvalReceipt(fs, root, "tests-pass", {
    sessionId: ROOT_ID,
    currentAttempt: ATTEMPT,
    ...deterministic(),
  });
}

async function writeOutcome(fs: FileSystem) {
  const input = stoppedOutcome(ROOT_ID, await goalHash(fs, ROOT_DIR), 1);
  return await writeSessionOutcome(fs, root, input);
}

function appendTwoEvents(fs: FileSystem, paths: SessionPaths, sessionId: string) {
  return appendEvents(
    fs,
    paths.eventsJsonl,
    sessionId,
    [{ type: "session_started" }, { type: "note", payload: { text: "two records" } }],
    deterministic(),
  );
}

/** Resolves a reference of every scheme from `sessionId`'s point of view. */
async function resolveAll(
  fs: FileSystem,
  sessionId: string,
  references: readonly string[],
): Promise<void> {
  const resolver = await LogicalReferenceResolver.forSession(fs, { repoRoot: REPO, sessionId });
  for (const reference of references) {
    await resolver.resolve(reference);
    await resolver.holder(reference);
  }
  await resolver.resolveExisting(references[0]!);
}

/** The attempt id of the mirror root's first sealed trace. */
const SEALED_ATTEMPT = ROOT_ATTEMPTS.first.attemptId;

// ---- The scenarios. ----

interface Scenario {
  /** What is run, on which state. */
  readonly name: string;
  /** The state it runs on. */
  readonly baseline: Baseline;
  /** The operation (on a clone of the baseline). */
  readonly run: (fs: FileSystem) => Promise<unknown>;
  /** True for an operation that writes: it is also run with a persistent ENOSPC. */
  readonly writes: boolean;
  /** Also run through a view of the port without its no-follow opens (opens after `lstat`). */
  readonly followingPort?: boolean;
  /** Checks that a run without faults took the path the name says. */
  readonly expect?: (result: unknown, fs: MemoryFs) => void;
  /** The kinds of private entry a transient fault may leave behind it (see `LEFTOVERS`). */
  readonly leaves?: readonly Leftover[];
}

/** The run published nothing: it found its record written already. */
function foundWritten(_result: unknown, fs: MemoryFs): void {
  const renames = fs.operationLog.filter((entry) => entry.op === "rename");
  assert.deepEqual(renames, [], "the record was written again");
}

/** The run processed a request to `kind` (with a reason matching `reason`, for a rejection). */
function processed(kind: "accepted" | "rejected", reason?: RegExp) {
  return (result: unknown): void => {
    const processed = result as Awaited<ReturnType<typeof processNextChildRequest>>;
    assert.equal(processed?.kind, kind, JSON.stringify(processed));
    if (reason !== undefined && processed?.kind === "rejected") {
      assert.match(processed.receipt.reason, reason);
    }
  };
}

const SCENARIOS: readonly Scenario[] = [
  // Scaffold of a session tree and of a child.
  {
    name: "ensureRepository",
    baseline: emptyRepo,
    run: (fs) => ensureRepository(fs, REPO, deterministic()),
    writes: true,
  },
  {
    name: "createRootSession (the first root)",
    baseline: emptyRepo,
    run: (fs) =>
      createRootSession(fs, { repoRoot: REPO, goal: "First", ...CONTRACTS, ...deterministic() }),
    writes: true,
    leaves: ["reservation"],
  },
  {
    name: "removeStagingLeftovers",
    baseline: withRootExtras,
    run: (fs) => removeStagingLeftovers(fs, SESSIONS),
    writes: true,
    leaves: ["staging"],
  },
  {
    name: "session tree reads (ids, manifest, scaffold check, state, working session)",
    baseline: withTerminalChild,
    run: async (fs) => {
      await createSessionId(fs, { repoRoot: REPO, goal: "Next" });
      await createSessionId(fs, { parentSessionDir: ROOT_DIR, requestId: "phase-1" });
      await missingScaffoldEntries(fs, ROOT_DIR, "root");
      await listRootSessionIds(fs, REPO);
      await openSessionPaths(fs, child.dir);
      await readSessionStateIfExists(fs, child.dir);
      const tree = await loadSessionTree(fs, REPO, CHILD_ID);
      await findWorkingSession(fs, tree);
      await assertReceivesWork(fs, tree, ROOT_ID).catch(() => undefined);
    },
    writes: false,
  },
  // Events.
  {
    name: "appendEvents (after a torn tail)",
    baseline: withRootExtras,
    run: (fs) => appendTwoEvents(fs, root, ROOT_ID),
    writes: true,
  },
  {
    name: "appendEvents (events.jsonl created)",
    baseline: withoutEvents,
    run: (fs) => appendTwoEvents(fs, root, ROOT_ID),
    writes: true,
    followingPort: true,
  },
  {
    name: "readEvents and scanEvents",
    baseline: withRootExtras,
    run: async (fs) => {
      await readEvents(fs, root.eventsJsonl);
      await scanEvents(fs, root.eventsJsonl);
    },
    writes: false,
  },
  // State.
  {
    name: "updateSessionState",
    baseline: withRoot,
    run: (fs) =>
      updateSessionState(fs, ROOT_DIR, (state) => {
        state.iteration_count = 1;
      }, { updatedAt: STOPPED_AT }),
    writes: true,
  },
  // Attempts.
  {
    name: "createAttemptArtifacts",
    baseline: withRoot,
    run: (fs) => createAttemptArtifacts(fs, root, ATTEMPT, artifacts()),
    writes: true,
  },
  {
    name: "createAttemptArtifacts again (the snapshot found written)",
    baseline: withAttempt,
    run: (fs) => createAttemptArtifacts(fs, root, ATTEMPT, artifacts()),
    writes: true,
    followingPort: true,
  },
  {
    name: "writeAttemptResult and readTraceRef",
    baseline: withAttempt,
    run: async (fs) => {
      const attempt = root.attempt(ATTEMPT.iteration, ATTEMPT.workflowId);
      await readTraceRef(fs, attempt);
      await writeAttemptResult(fs, attempt, { status: "succeeded" }, deterministic());
    },
    writes: true,
  },
  // Receipts and eval acceptance.
  {
    name: "writeGitReceipt (a new receipt with raw status and diff)",
    baseline: withAttempt,
    run: (fs) =>
      writeGitReceipt(fs, root, ROOT_ID, ATTEMPT, "before", {
        ...BOUNDARY,
        rawStatus: encoder.encode('{"path":"a.ts"}\n'),
        rawDiff: encoder.encode("--- a/a.ts\n"),
      }, deterministic()),
    writes: true,
  },
  {
    name: "writeGitReceipt again (the receipt found written)",
    baseline: withAttempt,
    run: (fs) => writeGitReceipt(fs, root, ROOT_ID, ATTEMPT, "after", BOUNDARY, deterministic()),
    writes: true,
    followingPort: true,
    expect: foundWritten,
  },
  {
    name: "acceptEvalReceipt",
    baseline: withAttempt,
    run: acceptEval,
    writes: true,
  },
  {
    name: "acceptEvalReceipt again (the acceptance found written)",
    baseline: withAcceptedEval,
    run: acceptEval,
    writes: true,
    followingPort: true,
    expect: foundWritten,
  },
  // Terminal outcomes.
  {
    name: "writeSessionOutcome",
    baseline: stopped,
    run: writeOutcome,
    writes: true,
  },
  {
    name: "writeSessionOutcome again (the outcome found written)",
    baseline: withOutcome,
    run: writeOutcome,
    writes: true,
    followingPort: true,
    expect: foundWritten,
  },
  {
    name:
      "control and handoff reads (readControl, readTerminalControl, readHandoff, observeHandoff)",
    baseline: withTerminalChild,
    run: async (fs) => {
      await readControl(fs, child);
      await readTerminalControl(fs, child, {
        sessionId: CHILD_ID,
        workflowId: "outer",
        attemptId: "c9",
      });
      await readHandoff(fs, root);
      await observeHandoff(fs, root, {
        sessionId: ROOT_ID,
        goalSha256: await goalHash(fs, ROOT_DIR),
        storedRevision: 0,
        storedSha256: null,
      });
    },
    writes: false,
  },
  // Child requests.
  {
    name: "publishChildRequest",
    baseline: withRoot,
    run: (fs) => publishChildRequest(fs, root, childRequest("phase-0")),
    writes: true,
  },
  {
    name: "publishChildRequest again (the request found pending)",
    baseline: withPending,
    run: (fs) => publishChildRequest(fs, root, pendingRequest()),
    writes: true,
    followingPort: true,
    expect: foundWritten,
  },
  {
    name: "processNextChildRequest (accepted: createChildSession, two inputs frozen)",
    baseline: withPending,
    run: processNext,
    writes: true,
    expect: processed("accepted"),
  },
  {
    name: "processNextChildRequest (rejected: torn JSON)",
    baseline: withTornRequest,
    run: processNext,
    writes: true,
    expect: processed("rejected"),
  },
  {
    name: "processNextChildRequest (rejected: too large, hashed through a handle)",
    baseline: withLargeRequest,
    run: (fs) => processNext(reportedTooLarge(fs)),
    writes: true,
    expect: processed("rejected", /larger than/),
    followingPort: true,
  },
  {
    name: "recordChildOutcome",
    baseline: withTerminalChild,
    run: recordOutcome,
    writes: true,
  },
  {
    name: "recordParentAcceptance",
    baseline: withRecordedChild,
    run: (fs) =>
      recordParentAcceptance(fs, {
        paths: root,
        parentSessionId: ROOT_ID,
        requestId: "phase-0",
        decision: "accepted",
        reason: "Evidence reviewed",
        producer: { workflowId: "outer", attemptId: "p2" },
        ...deterministic(),
      }),
    writes: true,
  },
  {
    name: "child request reads (ledger, pending list, child outcome)",
    baseline: withRecordedChild,
    run: async (fs) => {
      await readChildrenLedger(fs, root, ROOT_ID);
      await listPendingChildRequests(fs, root);
      await readChildOutcome(fs, root, "phase-0");
    },
    writes: false,
  },
  // References.
  {
    name: "LogicalReferenceResolver (folded: session, root, parent, repo, session:<id>)",
    baseline: folded,
    run: (fs) =>
      resolveAll(fs, "01_phase-1", [
        "session:/session.json",
        "root:/iterations/0002_outer/acceptance-audit.md",
        "parent:/raw/0002_outer/eval/report.json",
        "repo:/.loopy_loop/repository.json",
        `session:${ROOT_ID}:/project_state/handoff.json`,
      ]),
    writes: false,
  },
  {
    name: "LogicalReferenceResolver (mirror: session and trace references)",
    baseline: mirror,
    run: (fs) =>
      resolveAll(fs, MIRROR_CHILD_ID, [
        `session:/trace_seals/${CHILD_ATTEMPT.attemptId}.json`,
        `trace:trace-${CHILD_ATTEMPT.attemptId}:/eval/report.json`,
        `session:${MIRROR_ROOT_ID}:/state.json`,
      ]),
    writes: false,
  },
  // Traces.
  {
    name: "listTraces (every trace hashed)",
    baseline: mirror,
    run: (fs) => listTraces(fs, LOOPY),
    writes: false,
    followingPort: true,
  },
  {
    name: "locateTrace, inspectTrace and verifyTrace",
    baseline: mirror,
    run: async (fs) => {
      await locateTrace(fs, LOOPY, `trace-${SEALED_ATTEMPT}`);
      await inspectTrace(fs, LOOPY, SEALED_ATTEMPT);
      await verifyTrace(
        fs,
        LOOPY,
        `${LOOPY}/traces/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}/attempts/${SEALED_ATTEMPT}`,
      );
    },
    writes: false,
  },
  {
    name: "checkTraceSeals, scanTraceManifests and recordedTraces",
    baseline: mirror,
    run: async (fs) => {
      await checkTraceSeals(fs, LOOPY, { sessionId: MIRROR_ROOT_ID });
      await scanTraceManifests(fs, `${LOOPY}/traces`);
      await recordedTraces(fs, MIRROR_ROOT_DIR, MIRROR_ROOT_ID);
    },
    writes: false,
  },
  // prune-raw.
  {
    name: "pruneRaw (folded)",
    baseline: folded,
    run: (fs) => pruneRaw(fs, LOOPY),
    writes: true,
    leaves: ["pruning"],
  },
  {
    name: "pruneRaw --dry-run (folded)",
    baseline: folded,
    run: (fs) => pruneRaw(fs, LOOPY, { dryRun: true }),
    writes: false,
  },
  {
    name: "pruneRaw --legacy-traces (mirror)",
    baseline: mirrorStopped,
    run: (fs) => pruneRaw(fs, LOOPY, { legacyTraces: true }),
    writes: true,
    leaves: ["pruning"],
  },
  // The mirror layout's writers (a running mirror session finishes under its own layout).
  {
    name: "mirror: appendEvents, updateSessionState and writeAttemptResult",
    baseline: mirror,
    run: async (fs) => {
      await appendTwoEvents(fs, mirrorRoot, MIRROR_ROOT_ID);
      await updateSessionState(fs, MIRROR_ROOT_DIR, (state) => {
        state.iteration_count = 4;
      }, { updatedAt: STOPPED_AT });
      const { iteration, workflowId } = ROOT_ATTEMPTS.active;
      await writeAttemptResult(fs, mirrorRoot.attempt(iteration, workflowId), {
        status: "partial",
      }, deterministic());
    },
    writes: true,
  },
  {
    name: "mirror: writeSessionOutcome (citing every trace seal)",
    baseline: mirrorStopped,
    run: async (fs) =>
      writeSessionOutcome(
        fs,
        mirrorRoot,
        stoppedOutcome(MIRROR_ROOT_ID, await goalHash(fs, MIRROR_ROOT_DIR), 8, {
          terminalStatus: "stopped",
          stopReason: "stop_requested",
        }),
      ),
    writes: true,
  },
  // The .loopy_loop root, its session walk, and records.
  {
    name: "openLoopyRoot, walkSessionDirs, findLoopyRoot, chainKind",
    baseline: folded,
    run: async (fs) => {
      const opened = await openLoopyRoot(fs, LOOPY);
      await walkSessionDirs(fs, opened.sessionsDir);
      await findLoopyRoot(fs, `${ROOT_DIR}/project_state`);
      await chainKind(fs, LOOPY, `${ROOT_DIR}/state.json`);
    },
    writes: false,
  },
  {
    name: "readRecord, readRecordIfExists, readSessionState",
    baseline: folded,
    run: async (fs) => {
      await readRecord(fs, root.sessionJson, parseSessionManifest);
      await readRecordIfExists(fs, `${ROOT_DIR}/absent.json`, parseSessionManifest);
      await readSessionState(fs, ROOT_DIR);
    },
    writes: false,
  },
];

// ---- The checks. ----

/** A kind of private entry of the layout's own operations. */
type Leftover = "staging" | "pruning" | "reservation";

/**
 * Each kind of private entry, by the name the layout gives it. A creation removes its staging
 * directory when it fails (`buildAndPublish`); one `removeStagingLeftovers` moved aside and could
 * not remove goes at its rerun. An entry a prune moved aside (`.pruning-*`) goes at the next
 * prune. A root's ordinal reservation whose removal failed stays (`removeReservation`), ignored
 * by readers: it may only hold an ordinal a published session holds, so the next one is the same.
 */
const LEFTOVERS: Readonly<Record<Leftover, (name: string) => boolean>> = {
  staging: (name) => name.startsWith(STAGING_PREFIX),
  pruning: isPruningName,
  reservation: (name) => name.startsWith(ORDINAL_RESERVATION_PREFIX),
};

/** The tree's paths (from `/`). */
function pathsOf(fs: MemoryFs): string[] {
  return Object.keys(fs.snapshotTree()).map((key) => `/${key}`);
}

/** The entries of kind `kind` among `paths` not in `before` (the outermost of each tree). */
function leftoversOf(
  paths: readonly string[],
  before: ReadonlySet<string>,
  kind: Leftover,
): string[] {
  const named = LEFTOVERS[kind];
  return paths.filter((path) => {
    if (before.has(path)) return false;
    const names = path.split("/");
    return named(names.at(-1)!) && !names.slice(0, -1).some(named);
  });
}

/** The directory holding `path`. */
function parentOf(path: string): string {
  return path.slice(0, path.lastIndexOf("/"));
}

/**
 * Checks what a call settled after a transient fault left behind: no temp file (an atomic replace
 * removes its own when it fails), and of the private entries not in `before`, only the kinds the
 * scenario `leaves`, each gone after the recovery the layout names for it, or (a reservation) not
 * moving the next ordinal. A host whose disk fails now and then does not collect leftovers.
 */
async function assertNothingLeft(
  fs: MemoryFs,
  before: ReadonlySet<string>,
  scenario: Scenario,
  label: string,
): Promise<void> {
  const paths = pathsOf(fs);
  const temps = paths.filter((path) => path.split("/").some(isTempName));
  assert.deepEqual(temps, [], `${label}: temp files left`);
  const allowed = new Set(scenario.leaves ?? []);
  for (const kind of Object.keys(LEFTOVERS) as Leftover[]) {
    const left = leftoversOf(paths, before, kind);
    if (left.length === 0) continue;
    assert.ok(allowed.has(kind), `${label}: ${kind} left: ${left.join(", ")}`);
    if (kind === "staging") {
      for (const scope of new Set(left.map(parentOf))) await removeStagingLeftovers(fs, scope);
    } else if (kind === "pruning") {
      // The next prune; with `legacyTraces`, it enters the legacy trees a prune moves entries in.
      await pruneRaw(fs, LOOPY, { legacyTraces: true });
    } else {
      for (const reservation of left) {
        const scope = parentOf(reservation);
        assert.equal(
          await highestOrdinal(fs, scope),
          await highestOrdinal(fs, scope, { reservations: false }),
          `${label}: ${reservation} holds an ordinal no session holds`,
        );
      }
      continue;
    }
    const kept = leftoversOf(pathsOf(fs), before, kind);
    assert.deepEqual(kept, [], `${label}: ${kind} left after its recovery: ${kept.join(", ")}`);
  }
}

interface Mode {
  readonly error: FaultError;
  readonly persistent: boolean;
}

/**
 * EIO transient and persistent (a close after a persistent fault fails too); for a writer also a
 * persistent ENOSPC, a disk that stays full. The library never tells the two errors apart, so a
 * transient ENOSPC would take the paths a transient EIO takes.
 */
function modesOf(scenario: Scenario): Mode[] {
  const modes: Mode[] = [{ error: "EIO", persistent: false }, { error: "EIO", persistent: true }];
  if (scenario.writes) modes.push({ error: "ENOSPC", persistent: true });
  return modes;
}

function modeName(mode: Mode): string {
  return `${mode.persistent ? "persistent" : "transient"} ${mode.error}`;
}

/** Lets the work an operation left running go on until it waits for nothing but itself. */
function settled(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** The ports a scenario runs on: the memory filesystem itself, and maybe a following view. */
function portsOf(scenario: Scenario): [string, (fs: MemoryFs) => FileSystem][] {
  const ports: [string, (fs: MemoryFs) => FileSystem][] = [["", (fs) => fs]];
  if (scenario.followingPort === true) {
    ports.push([" (a port without no-follow opens)", (fs) => withoutNoFollow(fs)]);
  }
  return ports;
}

for (const scenario of SCENARIOS) {
  test(`${scenario.name} leaves no file handle open, failed or not, nor leftovers`, async () => {
    const base = await scenario.baseline();
    const before = new Set(pathsOf(base));
    for (const [portName, port] of portsOf(scenario)) {
      const label = `${scenario.name}${portName}`;
      const clean = base.clone();
      const result = await scenario.run(port(clean));
      await settled();
      scenario.expect?.(result, clean);
      assert.deepEqual(
        clean.openHandles,
        [],
        `${label} without a fault left open: ${clean.openHandles.join(", ")}`,
      );
      for (const mode of modesOf(scenario)) {
        let failed = 0;
        await failAtEveryOperation({
          baseline: base,
          error: mode.error,
          persistent: mode.persistent,
          run: (fs) => scenario.run(port(fs)),
          check: async (fs, info) => {
            if (!info.resolved) failed++;
            await settled();
            const how = info.resolved ? "resolved" : `rejected (${String(info.error)})`;
            assert.deepEqual(
              fs.openHandles,
              [],
              `${label}: ${modeName(mode)} at operation ${info.n} (${how}) left open: ` +
                fs.openHandles.join(", "),
            );
            if (!mode.persistent) {
              await assertNothingLeft(
                fs,
                before,
                scenario,
                `${label}: ${modeName(mode)} at operation ${info.n} (${how})`,
              );
            }
          },
        });
        assert.ok(failed > 0, `${label}: no ${modeName(mode)} failed the operation`);
      }
    }
  });
}
