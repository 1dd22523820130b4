// The child request lifecycle at its edges: child directories not built from their request or
// vanishing, a mirror-schema ledger in a folded parent, mirror sessions, pending requests or inputs
// that change or fail as read, active children the ledger lacks or records finished, forged or
// repeated outcomes, siblings kept, rejection slots taken by a directory, a link or a bad receipt.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  ChildRequestError,
  type CreatedSession,
  ImmutableArtifactError,
  LayoutRecordError,
  listPendingChildRequests,
  MAX_CHILD_REQUEST_BYTES,
  processNextChildRequest,
  publishChildRequest,
  readChildOutcome,
  recordChildOutcome,
  SessionPaths,
  SessionStateError,
  sha256Ref,
  UnsupportedLayoutError,
} from "../layout.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  childRequest,
  commitTerminalState,
  deterministic,
  engineOutcome,
  newRepo,
  newRoot,
  patchState,
  readJson,
  readText,
  unreadableAt,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";
import { mirror, MIRROR_ROOT_ID } from "./fixtures/mirror_tree.ts";
import { hookedFs } from "./_hooks.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";
const CHILD_ID = "01_phase-0";

/** Options naming the root `ROOT_ID` in `/repo` as the parent, with their own uuid source. */
function parentOptions() {
  return { repoRoot: "/repo", parentSessionId: ROOT_ID, ...deterministic() };
}

/** Processes the root's next child request through `fs`. */
async function processNext(fs: FileSystem) {
  return await processNextChildRequest(fs, parentOptions());
}

/** Publishes `requestId` to the root and processes it: its acceptance (anything else throws). */
async function acceptNext(fs: MemoryFs, root: CreatedSession, requestId: string) {
  await publishChildRequest(fs, root.paths, childRequest(requestId));
  const accepted = await processNext(fs);
  if (accepted?.kind !== "accepted") throw new Error(`not accepted: ${accepted?.kind}`);
  return accepted;
}

/** A new root that accepted request `requestId` (default `phase-0`) as its child. */
async function acceptedChild(requestId = "phase-0") {
  const fs = await newRepo();
  const root = await newRoot(fs);
  return { fs, root, accepted: await acceptNext(fs, root, requestId) };
}

/** Ends the child at `childDir` as failed at revision 3, with its own outcome. */
async function failChild(fs: MemoryFs, childId: string, childDir: string): Promise<void> {
  await patchState(fs, childDir, { status: "failed" });
  const goal = String((await readJson(fs, `${childDir}/session.json`)).goal_hash);
  await writeJson(
    fs,
    `${childDir}/session_outcome.json`,
    engineOutcome("failed", {
      session_id: childId,
      root_session_id: ROOT_ID,
      goal_sha256: goal,
      terminal_state_revision: 3,
      created_at: "2026-04-19T15:00:01Z",
    }),
  );
}

/** Rewrites the root's ledger so that its only child's record says `failed`. */
async function ledgerSaysFailed(fs: MemoryFs, root: CreatedSession): Promise<void> {
  const ledger = await readJson(fs, root.paths.childrenJson);
  const [record] = ledger.children as Record<string, unknown>[];
  await writeJson(fs, root.paths.childrenJson, {
    ...ledger,
    children: [{ ...record, status: "failed" }],
  });
}

/** A root holding `project_state/tasks/spec.md` and a pending request declaring it as input. */
async function withSpecRequest(): Promise<{ fs: MemoryFs; root: CreatedSession; spec: string }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const spec = `${root.dir}/project_state/tasks/spec.md`;
  await writeText(fs, spec, "# Spec\n");
  await publishChildRequest(
    fs,
    root.paths,
    childRequest("with-spec", { input_refs: ["session:/project_state/tasks/spec.md"] }),
  );
  return { fs, root, spec };
}

/**
 * A root whose acceptance of request `phase-0` stopped after indexing child `01_phase-0` (its
 * request still pending, its accepted copy written), before the child was published.
 */
async function interruptedAcceptance(): Promise<
  { fs: MemoryFs; root: CreatedSession; bytes: Uint8Array; childDir: string }
> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const { bytes } = await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  await fs.writeFile(root.paths.acceptedRequest("phase-0"), bytes);
  await writeJson(fs, root.paths.childrenJson, {
    schema_version: 2,
    parent_session_id: ROOT_ID,
    revision: 1,
    children: [{
      session_id: CHILD_ID,
      request_id: "phase-0",
      status: "dispatching",
      accepted_request_ref: "session:/child_requests/accepted/phase-0.json",
    }],
  });
  return { fs, root, bytes, childDir: root.paths.childDir(CHILD_ID) };
}

test("a child directory not built from the request being accepted is neither adopted nor removed", async () => {
  const cases = ["no copy", "another request", "copy unreadable", "no state.json"] as const;
  for (const found of cases) {
    const { fs, root, bytes, childDir } = await interruptedAcceptance();
    const copy = `${childDir}/inputs/accepted_request.json`;
    await fs.mkdir(`${childDir}/inputs`, { recursive: true });
    await writeText(fs, `${childDir}/notes.md`, "someone's work");
    if (found === "another request") {
      await writeJson(fs, copy, childRequest("phase-0", { goal: "Something else" }));
    }
    if (found === "copy unreadable") await fs.mkdir(copy);
    if (found === "no state.json") await fs.writeFile(copy, bytes);
    const before = fs.snapshotTree("/");
    await assert.rejects(processNext(fs), (error: unknown) => {
      assert.ok(error instanceof ChildRequestError, `${found}: ${error}`);
      assert.equal(error.requestId, "phase-0");
      assert.equal(error.file, `${root.paths.childRequestsPendingDir}/phase-0.json`);
      assert.ok(error.message.includes(childDir), error.message);
      const why = found === "no state.json" ? /has no state\.json/ : /not created from this/;
      assert.match(error.message, why, found);
      if (found === "copy unreadable") assert.ok(error.cause instanceof LayoutRecordError);
      else assert.equal(error.cause, undefined, found);
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, found);
    assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["phase-0.json"], found);
  }
});

test("a folded parent whose children.json is of the mirror schema dispatches nothing, naming the field", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await publishChildRequest(fs, root.paths, childRequest("phase-0"));
  await writeJson(fs, root.paths.childrenJson, { schema_version: 1, children: [] });
  const before = fs.snapshotTree("/");
  await assert.rejects(processNext(fs), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, root.paths.childrenJson);
    assert.equal(error.path, "schema_version");
    assert.equal(error.value, 1);
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a mirror session neither publishes nor processes child requests", async () => {
  const { fs, tree } = await mirror();
  const before = fs.snapshotTree("/");
  const paths = new SessionPaths(tree.rootDir, "mirror");
  await assert.rejects(
    publishChildRequest(fs, paths, childRequest("phase-0")),
    (error: unknown) => {
      assert.ok(error instanceof UnsupportedLayoutError, String(error));
      assert.match(error.message, /published in folded sessions/);
      return true;
    },
  );
  await assert.rejects(
    processNextChildRequest(fs, {
      repoRoot: tree.repoRoot,
      parentSessionId: MIRROR_ROOT_ID,
      ...deterministic(),
    }),
    (error: unknown) => {
      assert.ok(error instanceof UnsupportedLayoutError, String(error));
      assert.match(error.message, /processed in folded sessions/);
      return true;
    },
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("another pending request replaced by a directory as it is read holds no request id; one that cannot be read fails the publish", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const pending = root.paths.childRequestsPendingDir;
  const other = `${pending}/other.json`;
  await writeJson(fs, other, childRequest("phase-0"));
  // Listed as a file, then (before it is read) a directory takes its place.
  let swapped = false;
  const swapping = hookedFs(fs, {
    async after(method, args) {
      if (method === "readDir" && args[0] === pending && !swapped) {
        swapped = true;
        await fs.remove(other);
        await fs.mkdir(other);
      }
    },
  });
  const published = await publishChildRequest(swapping, root.paths, childRequest("phase-0"));
  assert.equal(swapped, true);
  assert.equal(published.file, `${pending}/phase-0.json`);
  // A pending file another agent wrote, which the storage fails to read.
  await fs.remove(other);
  await writeJson(fs, other, childRequest("phase-1"));
  const failing = unreadableAt(fs, other);
  const before = fs.snapshotTree("/");
  await assert.rejects(
    publishChildRequest(failing, root.paths, childRequest("phase-2")),
    FsIoError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("an active child the ledger does not hold is refused naming children.json, and nothing is recorded", async () => {
  const { fs, root, accepted } = await acceptedChild();
  await failChild(fs, accepted.childSessionId, accepted.childDir);
  const ledger = await readJson(fs, root.paths.childrenJson);
  await writeJson(fs, root.paths.childrenJson, { ...ledger, children: [] });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    recordChildOutcome(fs, parentOptions()),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, root.paths.childrenJson);
      assert.equal(error.path, "children");
      assert.equal(error.value, accepted.childSessionId);
      return true;
    },
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.equal(await readChildOutcome(fs, root.paths, "phase-0"), undefined);
});

test("a parent still pointing at a child its ledger records finished dispatches no other child", async () => {
  const { fs, root, accepted } = await acceptedChild("first");
  // The outcome's recording stopped after the ledger took the child's status, before the state
  // let the child go.
  await ledgerSaysFailed(fs, root);
  await publishChildRequest(fs, root.paths, childRequest("second"));
  const before = fs.snapshotTree("/");
  await assert.rejects(processNext(fs), (error: unknown) => {
    assert.ok(error instanceof SessionStateError, String(error));
    assert.ok(error.message.includes(`outcome of child ${accepted.childSessionId}`), error.message);
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a rejection never archives under a name whose receipt slot holds a directory or a link", async () => {
  for (const planted of ["directory", "symlink"] as const) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    const rejected = root.paths.childRequestsRejectedDir;
    await fs.mkdir(rejected, { recursive: true });
    const slot = `${rejected}/dup.json.receipt.json`;
    if (planted === "directory") await fs.mkdir(slot);
    else {
      await writeText(fs, "/repo/outside.json", "{}");
      await fs.symlink("/repo/outside.json", slot);
    }
    await writeText(fs, `${root.paths.childRequestsPendingDir}/dup.json`, "{broken");
    const result = await processNext(fs);
    assert.equal(result?.kind, "rejected", planted);
    if (result?.kind !== "rejected") continue;
    const hash = sha256Ref(new TextEncoder().encode("{broken")).slice(7, 15);
    assert.equal(result.archivedFile, `${rejected}/dup.${hash}.json`, planted);
    assert.equal((await fs.lstat(slot)).kind, planted, planted);
    if (planted === "symlink") assert.equal(await readText(fs, "/repo/outside.json"), "{}");
    await assert.rejects(fs.lstat(`${rejected}/dup.json`), { code: "ENOENT" });
  }
});

test("a receipt left in a rejection's slot that cannot be read fails the rejection; the request stays pending", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const rejected = root.paths.childRequestsRejectedDir;
  await fs.mkdir(rejected, { recursive: true });
  const slot = `${rejected}/dup.json.receipt.json`;
  await writeJson(fs, slot, { leftover: true });
  await writeText(fs, `${root.paths.childRequestsPendingDir}/dup.json`, "{broken");
  const failing = unreadableAt(fs, slot);
  const before = fs.snapshotTree("/");
  await assert.rejects(
    processNext(failing),
    FsIoError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["dup.json"]);
});

test("a child outcome record found with other contents is never overwritten, and the parent keeps its child", async () => {
  const { fs, root, accepted } = await acceptedChild();
  await failChild(fs, accepted.childSessionId, accepted.childDir);
  const outcomeFile = root.paths.childOutcome("phase-0");
  await fs.mkdir(`${root.dir}/child_outcomes`, { recursive: true });
  await writeJson(fs, outcomeFile, { schema_version: 2, request_id: "phase-0", forged: true });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    recordChildOutcome(fs, parentOptions()),
    (error: unknown) => {
      assert.ok(error instanceof ImmutableArtifactError, String(error));
      assert.equal(error.file, outcomeFile);
      return true;
    },
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.equal(
    (await readJson(fs, root.paths.stateJson)).active_child_session_id,
    accepted.childSessionId,
  );
});

test("recording a child's outcome leaves the ledger records of its earlier siblings as they were", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const options = parentOptions();
  const ledgerRecords = async () =>
    (await readJson(fs, root.paths.childrenJson)).children as Record<string, unknown>[];
  const ids: string[] = [];
  let firstRecord: Record<string, unknown> | undefined;
  for (const request of ["first", "second"]) {
    const accepted = await acceptNext(fs, root, request);
    ids.push(accepted.childSessionId);
    await failChild(fs, accepted.childSessionId, accepted.childDir);
    await recordChildOutcome(fs, options);
    // The first child's record once it finished, before its sibling ran.
    firstRecord ??= (await ledgerRecords())[0];
  }
  const children = await ledgerRecords();
  assert.deepEqual(children.map((c) => c.session_id), ids);
  assert.deepEqual(children[0], firstRecord);
  assert.equal(children[0]?.outcome_ref, "session:/child_outcomes/first.json");
  assert.equal(children[1]?.status, "failed");
  assert.equal(children[1]?.outcome_ref, "session:/child_outcomes/second.json");
});

test("a declared input that vanishes or changes while it is read rejects the request, freezing nothing", async () => {
  for (const race of ["vanishes", "grows"] as const) {
    const { fs, root, spec } = await withSpecRequest();
    let raced = false;
    const view = hookedFs(fs, {
      async before(method, args) {
        const reading = method === "readFile" || method === "readFileNoFollow";
        if (race === "vanishes" && reading && args[0] === spec && !raced) {
          raced = true;
          await fs.remove(spec);
        }
      },
      async after(method, args) {
        const reading = method === "readFile" || method === "readFileNoFollow";
        if (race === "grows" && reading && args[0] === spec && !raced) {
          raced = true;
          await fs.writeFile(spec, new TextEncoder().encode("# Spec\nand more\n"));
        }
      },
    });
    const result = await processNext(view);
    assert.equal(raced, true, race);
    assert.equal(result?.kind, "rejected", race);
    if (result?.kind !== "rejected") continue;
    assert.equal(result.receipt.field, "input_refs[0]", race);
    const why = race === "vanishes" ? /is absent or not a file/ : /changed while it was read/;
    assert.match(result.receipt.reason, why, race);
    assert.deepEqual(await fs.readDir(`${root.dir}/children`), [], race);
    assert.deepEqual((await readJson(fs, root.paths.childrenJson)).children, [], race);
  }
});

test("a parent that ended marks only its stranded acceptance failed, never a finished child's record", async () => {
  const { fs, root, accepted: first } = await acceptedChild("first");
  const options = parentOptions();
  await failChild(fs, first.childSessionId, first.childDir);
  await recordChildOutcome(fs, options);
  // A second acceptance stopped after indexing its child; then the parent ended.
  await publishChildRequest(fs, root.paths, childRequest("second"));
  const ledger = await readJson(fs, root.paths.childrenJson);
  const [finished] = ledger.children as Record<string, unknown>[];
  await writeJson(fs, root.paths.childrenJson, {
    ...ledger,
    revision: (ledger.revision as number) + 1,
    children: [finished, {
      session_id: "02_second",
      request_id: "second",
      status: "dispatching",
      accepted_request_ref: "session:/child_requests/accepted/second.json",
    }],
  });
  await patchState(fs, root.dir, { status: "max_turns", current_task: null });
  await assert.rejects(processNext(fs), SessionStateError);
  const after = (await readJson(fs, root.paths.childrenJson)).children as Record<
    string,
    unknown
  >[];
  assert.deepEqual(after[0], finished);
  assert.equal(after[1]?.status, "failed_dispatch");
});

test("a pending file too large to read, met while an interrupted acceptance resumes, is skipped, then rejected unread", async () => {
  const { fs, root } = await interruptedAcceptance();
  const pending = root.paths.childRequestsPendingDir;
  // Considered before phase-0.json, and one byte over the limit.
  const big = new Uint8Array(MAX_CHILD_REQUEST_BYTES + 1).fill(0x20);
  await fs.writeFile(`${pending}/a-big.json`, big);
  const resumed = await processNext(fs);
  assert.equal(resumed?.kind, "accepted");
  assert.equal(resumed?.kind === "accepted" && resumed.childSessionId, CHILD_ID);
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["a-big.json"]);
  // Once the child's outcome is recorded, the big file is rejected without being parsed.
  await patchState(fs, root.dir, { active_child_session_id: null });
  await ledgerSaysFailed(fs, root);
  const rejected = await processNext(fs);
  assert.equal(rejected?.kind, "rejected");
  assert.match(rejected?.kind === "rejected" ? rejected.receipt.reason : "", /larger than/);
});

/** A root whose child ended while the root was stopped: the root still names its child. */
async function endedParent(): Promise<{ fs: MemoryFs; root: CreatedSession }> {
  const { fs, root, accepted } = await acceptedChild();
  const revision = Number((await readJson(fs, root.paths.stateJson)).state_revision);
  await commitTerminalState(fs, root.dir, "stopped", revision + 1, "2026-04-19T15:00:05Z");
  await failChild(fs, accepted.childSessionId, accepted.childDir);
  return { fs, root };
}

test("a rerun that finds the ended parent's child_finished event but cannot make it durable never appends it again", async () => {
  const { fs, root } = await endedParent();
  const options = parentOptions();
  // A first run that never fsyncs.
  const outcome = await recordChildOutcome(fs, { ...options, durability: "ordered" });
  const events = root.paths.eventsJsonl;
  // The rerun reads the events file; making it durable then fails, once.
  let read = false;
  let failed = false;
  const failing = hookedFs(fs, {
    before(method, args) {
      if (String(args[0]) !== events) return;
      if (read && !failed && (method === "open" || method === "openNoFollow")) {
        failed = true;
        throw new FsIoError("EIO", method, events, "injected");
      }
      if (method === "readFile" || method === "readFileNoFollow") read = true;
    },
  });
  const before = fs.snapshotTree("/");
  assert.deepEqual(await recordChildOutcome(failing, options), outcome);
  assert.equal(failed, true);
  assert.deepEqual(fs.snapshotTree("/"), before);
  const lines = (await readText(fs, events)).split("\n").filter((line) =>
    line.includes('"child_finished"')
  );
  assert.equal(lines.length, 1);
});

test("a storage fault looking at a declared input once read leaves the request pending, never rejected", async () => {
  const { fs, spec } = await withSpecRequest();
  // Once the input is read, its reference is resolved again and then its size looked at: that
  // last look fails.
  let read = false;
  let looks = 0;
  const failing = hookedFs(fs, {
    before(method, args) {
      if (args[0] !== spec) return;
      if (method === "readFile" || method === "readFileNoFollow") read = true;
      else if (read && method === "lstat" && ++looks === 2) {
        throw new FsIoError("EIO", "lstat", spec, "injected");
      }
    },
  });
  const before = fs.snapshotTree("/");
  await assert.rejects(
    processNext(failing),
    FsIoError,
  );
  assert.equal(looks, 2);
  assert.deepEqual(fs.snapshotTree("/"), before);
  assert.equal((await processNext(fs))?.kind, "accepted");
});

test("a child directory that vanishes while an interrupted acceptance resumes is reported, never rebuilt", async () => {
  const { fs, root, childDir } = await interruptedAcceptance();
  await fs.mkdir(childDir, { recursive: true });
  // Found when the request is admitted (the third look at it, after the two walks of the tree),
  // gone when the child is checked again before it is adopted.
  let looks = 0;
  let gone = false;
  const view = hookedFs(fs, {
    async after(method, args) {
      if (method === "lstat" && args[0] === childDir && ++looks === 3) {
        gone = true;
        await fs.remove(childDir, { recursive: true });
      }
    },
  });
  await assert.rejects(
    processNext(view),
    (error: unknown) => {
      assert.ok(error instanceof ChildRequestError, String(error));
      assert.equal(error.requestId, "phase-0");
      assert.match(error.message, /vanished/);
      return true;
    },
  );
  assert.equal(gone, true);
  await assert.rejects(fs.lstat(childDir), { code: "ENOENT" });
  assert.deepEqual(await listPendingChildRequests(fs, root.paths), ["phase-0.json"]);
});
