// Readers racing a delete that another process finishes (or rolls back) between the reader's
// listing of the delete's staging directory and its read of the journal: the journal is gone
// because the delete is done (or undone), not because anything is damaged. Readers see the
// session gone (or still there), never a CorruptSessionError. (Opens never read the journal in
// that window; they are checked as a guard.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionNotFoundError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../mod.ts";
import { DELETE_PREFIX } from "../src/loop/archive.ts";
import { conversation, user } from "./_fixtures.ts";
import { gate, hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;

type Mode = "list" | "listDetailed" | "fast listDetailed" | "open read-only";

/**
 * Stages a delete of one session by a "process" that pauses right before its commit marker
 * (`failing`: and then fails there, rolling back), and a reader whose first read of the delete's
 * journal waits until that delete has settled. Returns what the reader got.
 */
async function race(mode: Mode, failing: boolean) {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const victim = await store.create(CWD);
  await victim.commit(conversation(1));
  await victim.close();
  const keep = await store.create(CWD);
  await keep.commit([user("keep")]);
  await keep.close();

  const staged = gate();
  const resume = gate();
  const deleter = new SessionStore({
    fs: hookedFs(fs, {
      before: async (method, args) => {
        if (method === "open" && String(args[0]).includes("/.committed.")) {
          staged.open();
          await resume.wait;
          if (failing) throw new FsIoError("EIO", "open", String(args[0]), "injected");
        }
      },
    }),
    agentDir: AGENT,
  });
  const deleting = deleter.archive.delete(CWD, [victim.id], { archivedOnly: false }).then(
    () => "resolved",
    (e) => `rejected ${e.name}`,
  );
  await staged.wait; // the session is staged in .delete-*, the marker not there yet

  let raced = 0;
  const reader = new SessionStore({
    fs: hookedFs(fs, {
      before: async (method, args) => {
        const path = String(args[0]);
        if (
          raced === 0 && path.includes(`/${DELETE_PREFIX}`) && path.endsWith("/intent.json") &&
          method !== "readDir"
        ) {
          // The reader listed the staging directory with the session in it; now the delete
          // settles, and removes everything (its journal too), before the journal is read.
          raced++;
          resume.open();
          await deleting;
        }
      },
    }),
    agentDir: AGENT,
  });
  let outcome: unknown;
  try {
    if (mode === "list") outcome = await reader.list(CWD);
    else if (mode === "open read-only") {
      const opened = await reader.open(victim.getSessionPath(), { readOnly: true });
      await opened.close();
      outcome = "opened";
    } else {
      outcome = await reader.listDetailed(CWD, undefined, { fast: mode === "fast listDetailed" });
    }
  } catch (error) {
    outcome = error;
  }
  resume.open();
  const settled = await deleting;
  return { outcome, settled, raced, keep: keep.id, fs };
}

for (const mode of ["list", "listDetailed", "fast listDetailed", "open read-only"] as const) {
  test(`${mode} racing a delete that finishes between its listing and its journal read reports no corruption`, async () => {
    const { outcome, settled, raced, keep, fs } = await race(mode, false);
    assert.equal(settled, "resolved");
    assert.equal(raced, 1, "the race was staged");
    assert.deepEqual(
      (await fs.readDir(COLLECTION)).filter((e) => e.name.startsWith(DELETE_PREFIX)),
      [],
    );
    if (mode === "open read-only") {
      // Gone, or read as it was before the delete; never damage.
      assert.ok(
        outcome === "opened" || outcome instanceof SessionNotFoundError,
        String(outcome),
      );
      return;
    }
    assert.ok(!(outcome instanceof Error), String(outcome));
    const sessions = mode === "list"
      ? outcome as { id: string }[]
      : (outcome as { sessions: { id: string }[]; failures: unknown[] }).sessions;
    if (mode !== "list") {
      const failures = (outcome as { failures: { error: Error }[] }).failures;
      assert.deepEqual(failures.map((f) => `${f.error.name}: ${f.error.message}`), []);
    }
    // The other session is listed; the deleted one is listed as before the delete, or gone.
    assert.ok(sessions.some((s) => s.id === keep), "the other session is listed");
  });
}

for (const mode of ["listDetailed", "open read-only"] as const) {
  test(`${mode} racing a delete that rolls back between its listing and its journal read reports no corruption`, async () => {
    const { outcome, settled, raced, keep } = await race(mode, true);
    assert.equal(settled, "rejected FsIoError");
    assert.equal(raced, 1, "the race was staged");
    if (mode === "open read-only") {
      assert.ok(
        outcome === "opened" || outcome instanceof SessionNotFoundError,
        String(outcome),
      );
      return;
    }
    assert.ok(!(outcome instanceof Error), String(outcome));
    const result = outcome as { sessions: { id: string }[]; failures: { error: Error }[] };
    assert.deepEqual(result.failures.map((f) => `${f.error.name}: ${f.error.message}`), []);
    assert.ok(result.sessions.some((s) => s.id === keep), "the other session is listed");
  });
}
