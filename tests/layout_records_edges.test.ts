// Records at their edges: values JSON cannot write, records not UTF-8 or a directory, frozen files
// not UTF-8, outcomes and seals that hold no object (typed errors naming the file and field); a
// state without a revision; ids allocated past damaged, never unreadable, ledgers; goal_met eval
// citations whose receipt or legacy acceptance is damaged or gone, or whose session is elsewhere.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import {
  createAttemptArtifacts,
  createRootSession,
  ImmutableArtifactError,
  LayoutRecordError,
  readRecord,
  readTerminalControl,
  SessionPaths,
  TopologyError,
  updateSessionState,
  writeSessionOutcome,
} from "../layout.ts";
import { FsIoError } from "../src/port/errors.ts";
import {
  acceptedTestsPass,
  commitTerminalState,
  CONTRACTS,
  deterministic,
  goalMetControl,
  newRepo,
  newRoot,
  readJson,
  stoppedOutcome,
  unreadableAt,
  writeJson,
  writeText,
} from "./layout_fixtures.ts";
import { hookedFs, withoutNoFollow } from "./_hooks.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";
const ATTEMPT = { iteration: 1, workflowId: "outer", attemptId: "a00000000001" };

test("a snapshot value JSON cannot write is refused naming its file, and the attempt is not created", async () => {
  const cases: [string, unknown, RegExp][] = [
    ["undefined", undefined, /not a JSON value/],
    ["a function", () => 1, /not a JSON value/],
    ["a BigInt", 10n, /BigInt cannot be written/],
  ];
  for (const [what, value, message] of cases) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    const before = fs.snapshotTree("/");
    const file = `${root.dir}/iterations/0001_outer/workflow_snapshot/a00000000001/a.json`;
    await assert.rejects(
      createAttemptArtifacts(fs, root.paths, ATTEMPT, {
        prompt: "p",
        pathsMap: {},
        snapshot: { "a.json": value as never },
      }),
      (error: unknown) => {
        assert.ok(error instanceof LayoutRecordError, `${what}: ${error}`);
        assert.equal(error.file, file, what);
        assert.equal(error.path, "", what);
        assert.match(error.message, message, what);
        return true;
      },
    );
    assert.deepEqual(fs.snapshotTree("/"), before, what);
  }
});

test("a record that is not UTF-8, even inside a string, is a typed error naming the file", async () => {
  const fs = await newRepo();
  const file = "/repo/record.json";
  // `{"name": "<0xff>"}`: a lenient decoder would read a replacement character and parse it.
  const bytes = new Uint8Array([...new TextEncoder().encode('{"name": "'), 0xff, 0x22, 0x7d]);
  await fs.writeFile(file, bytes);
  await assert.rejects(readRecord(fs, file, (value) => value), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, file);
    assert.match(error.message, /not valid UTF-8/);
    return true;
  });
  assert.deepEqual(await fs.readFile(file), bytes);
});

test("a record that is a directory is a typed error naming it", async () => {
  const fs = await newRepo();
  await fs.mkdir("/repo/record.json");
  await assert.rejects(readRecord(fs, "/repo/record.json", (value) => value), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, "/repo/record.json");
    assert.match(error.message, /not a regular file \(a directory\)/);
    return true;
  });
  assert.equal((await fs.lstat("/repo/record.json")).kind, "directory");
  // On a port that reads only after looking: a directory swapped in between is refused the same.
  await fs.remove("/repo/record.json");
  await writeJson(fs, "/repo/record.json", { name: "a" });
  let swapped = false;
  const racing = hookedFs(withoutNoFollow(fs), {
    async before(method, args) {
      if (method === "readFile" && args[0] === "/repo/record.json" && !swapped) {
        swapped = true;
        await fs.remove("/repo/record.json");
        await fs.mkdir("/repo/record.json");
      }
    },
  });
  await assert.rejects(
    readRecord(racing, "/repo/record.json", (value) => value),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, "/repo/record.json");
      assert.match(error.message, /not a regular file \(a directory\)/);
      return true;
    },
  );
  assert.equal(swapped, true);
});

test("a damaged children.json of another tree does not stop a new root; one that cannot be read does", async () => {
  const fs = await newRepo();
  const first = await newRoot(fs);
  await writeText(fs, first.paths.childrenJson, "{ damaged");
  const second = await newRoot(fs, "Second goal");
  assert.equal(second.sessionId, "002_second-goal");
  // The storage fails to read it: an id it records could be given out again, so nothing is made.
  const failing = unreadableAt(fs, first.paths.childrenJson);
  const before = fs.snapshotTree("/");
  await assert.rejects(
    createRootSession(failing, {
      repoRoot: "/repo",
      goal: "Third goal",
      ...CONTRACTS,
      ...deterministic(),
    }),
    FsIoError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

// ---------------------------------------------------------------------------------------------
// A goal_met control's eval receipt citations

const EVAL_REF = "session:/eval_receipts/tests-pass.json";

const goalMet = goalMetControl(ROOT_ID, "outer", { eval_receipt_refs: [EVAL_REF] });
const current = { sessionId: ROOT_ID, workflowId: "outer", attemptId: "a26" };

/** A root whose eval receipt `tests-pass` of attempt a26 is accepted; `legacy`: without seals. */
async function acceptedEval(legacy: boolean): Promise<{ fs: MemoryFs; paths: SessionPaths }> {
  const fs = await newRepo();
  const { paths } = await newRoot(fs);
  if (legacy) {
    const state = await readJson(fs, paths.stateJson);
    delete state.accepted_eval_seals;
    await writeJson(fs, paths.stateJson, state);
  }
  await acceptedTestsPass(fs, paths, ROOT_ID);
  await writeJson(fs, paths.controlJson, goalMet);
  return { fs, paths };
}

/** Asserts `error` refuses the citation of `EVAL_REF` saying `message` (`cause`: record error). */
function refusedAtCitation(paths: SessionPaths, message: RegExp, cause?: boolean) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, paths.controlJson);
    assert.equal(error.path, "eval_receipt_refs[0]", error.message);
    assert.equal(error.value, EVAL_REF);
    assert.match(error.message, message);
    if (cause === true) assert.ok(error.cause instanceof LayoutRecordError, String(error.cause));
    return true;
  };
}

test("a goal_met control citing a legacy acceptance whose sidecar is damaged is refused at the citation", async () => {
  const { fs, paths } = await acceptedEval(true);
  assert.ok(await readTerminalControl(fs, paths, current));
  await writeText(fs, paths.evalAcceptedSidecar("tests-pass"), "{ damaged");
  const before = fs.snapshotTree("/");
  await assert.rejects(
    readTerminalControl(fs, paths, current),
    refusedAtCitation(paths, /acceptance seal is invalid/, true),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a goal_met control citing an accepted eval receipt that is gone or a directory is refused at the citation", async () => {
  for (const damage of ["absent", "directory"] as const) {
    const { fs, paths } = await acceptedEval(false);
    assert.ok(await readTerminalControl(fs, paths, current));
    await fs.remove(paths.evalReceipt("tests-pass"));
    if (damage === "directory") await fs.mkdir(paths.evalReceipt("tests-pass"));
    const before = fs.snapshotTree("/");
    await assert.rejects(
      readTerminalControl(fs, paths, current),
      damage === "absent"
        ? refusedAtCitation(paths, /accepted eval receipt is absent/)
        : refusedAtCitation(paths, /accepted eval receipt is unreadable/, true),
    );
    assert.deepEqual(fs.snapshotTree("/"), before, damage);
  }
});

test("a goal_met control of a session directory outside .loopy_loop is refused before its citations are read", async () => {
  const { fs } = await acceptedEval(false);
  await fs.rename("/repo/.loopy_loop", "/repo/loopy-copy");
  const before = fs.snapshotTree("/");
  const moved = new SessionPaths(`/repo/loopy-copy/sessions/${ROOT_ID}`, "folded");
  await assert.rejects(readTerminalControl(fs, moved, current), (error: unknown) => {
    assert.ok(error instanceof TopologyError, String(error));
    assert.match(error.message, /not inside a \.loopy_loop directory/);
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a frozen snapshot file that is not UTF-8 is never taken for the record being frozen", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const dir = `${root.dir}/iterations/0001_outer/workflow_snapshot/a00000000001`;
  await fs.mkdir(dir, { recursive: true });
  const bytes = new Uint8Array([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]); // {"a":"?"}
  await fs.writeFile(`${dir}/a.json`, bytes);
  const before = fs.snapshotTree("/");
  await assert.rejects(
    createAttemptArtifacts(fs, root.paths, ATTEMPT, {
      prompt: "p",
      pathsMap: {},
      snapshot: { "a.json": { a: "\ufffd" } },
    }),
    (error: unknown) => {
      assert.ok(error instanceof ImmutableArtifactError, String(error));
      assert.equal(error.file, `${dir}/a.json`);
      return true;
    },
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a session_outcome.json found holding no object is never overwritten: the whole record differs", async () => {
  for (const planted of ["null", '"done"', "7"]) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    const paths = root.paths;
    await commitTerminalState(fs, paths.dir, "max_turns", 3, "2026-04-19T15:00:01Z");
    await writeText(fs, paths.sessionOutcomeJson, planted);
    const before = fs.snapshotTree("/");
    await assert.rejects(
      writeSessionOutcome(
        fs,
        paths,
        stoppedOutcome(ROOT_ID, root.manifest.goal_hash, 3, {
          terminalAt: "2026-04-19T15:00:01Z",
        }),
      ),
      (error: unknown) => {
        assert.ok(error instanceof ImmutableArtifactError, `${planted}: ${error}`);
        assert.equal(error.file, paths.sessionOutcomeJson);
        assert.equal(error.path, "", planted);
        return true;
      },
    );
    assert.deepEqual(fs.snapshotTree("/"), before, planted);
  }
});

test("a state seal that is no object is named by its own key in state.json", async () => {
  const { fs, paths } = await acceptedEval(false);
  const state = await readJson(fs, paths.stateJson);
  const key = "session:/eval_receipts/tests-pass.json";
  await writeJson(fs, paths.stateJson, { ...state, accepted_eval_seals: { [key]: "accepted" } });
  const before = fs.snapshotTree("/");
  await assert.rejects(readTerminalControl(fs, paths, current), (error: unknown) => {
    refusedAtCitation(paths, /seal is invalid/, true)(error);
    const cause = (error as LayoutRecordError).cause as LayoutRecordError;
    assert.equal(cause.file, paths.stateJson);
    assert.equal(cause.path, `accepted_eval_seals[${JSON.stringify(key)}]`);
    assert.equal(cause.value, "accepted");
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a state that records no revision yet is updated to revision 1, everything else kept", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const { state_revision: _revision, ...older } = await readJson(fs, root.paths.stateJson);
  await writeJson(fs, root.paths.stateJson, older);
  const updated = await updateSessionState(fs, root.dir, (state) => {
    state.iteration = 1;
  }, { updatedAt: "2026-04-20T00:00:00Z" });
  assert.equal(updated.state_revision, 1);
  assert.deepEqual(await readJson(fs, root.paths.stateJson), {
    ...older,
    iteration: 1,
    state_revision: 1,
    updated_at: "2026-04-20T00:00:00Z",
  });
});
