// Readers racing a delete that another process finishes (or rolls back) while the reader looks at
// the delete's staging directory: between the reader's listing of the collection and its listing
// of the staging directory, or between that listing and its read of the journal. The staging
// directory (or its journal) is gone because the delete is done (or undone), not because
// anything is damaged. Readers see the session gone (a finished delete) or in place, with its
// archive membership restored (a rolled-back delete: it never stopped existing), never a
// CorruptSessionError and never a session missing. (Opens never read the journal in that window;
// they are checked as a guard.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionNotFoundError } from "../src/loop/errors.ts";
import { SessionStore, workspaceHash } from "../mod.ts";
import { DELETE_PREFIX } from "../src/loop/archive.ts";
import { conversation, legacySessionBytes, user } from "./_fixtures.ts";
import { gate, hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const LEGACY_ID = "0c7d5a3e-9b1f-4e2a-8c6d-2f4b7a9e1d30";

type Mode = "list" | "listDetailed" | "fast listDetailed" | "open read-only";

/** Where the reader is when the delete settles (see `race`). */
type Window = "journal" | "staging listing";

/** How far the delete gets before the reader goes on (see `race`). */
type Until = "settled" | "journal removal" | "staging removal";

interface RaceOptions {
  /** The delete fails right before its commit marker, and rolls back. */
  readonly failing: boolean;
  /**
   * `journal`: the reader listed the staging directory with the session in it, and the delete
   * settles before the reader reads its journal; `staging listing`: the reader listed the
   * collection with the session staged, and the delete settles before it lists the staging
   * directory.
   */
  readonly window?: Window;
  /**
   * How far the delete gets before the reader goes on: `settled` (the default), or paused in its
   * teardown (a rollback's or a finish's) right before it removes its journal (`journal
   * removal`: nothing staged any more, the journal still there) or its staging directory
   * (`staging removal`: the staging directory empty).
   */
  readonly until?: Until;
  /** The session deleted is archived (the delete takes it out of archive.json). */
  readonly archived?: boolean;
  /** The session deleted is a version-2 legacy file, not a directory. */
  readonly legacy?: boolean;
}

/**
 * Stages a delete of one session by a "process" that pauses right before its commit marker
 * (`failing`: and then fails there, rolling back), and a reader whose first look at the delete
 * (see `window`) waits until that delete has settled. Returns what the reader got.
 */
async function race(mode: Mode, options: RaceOptions) {
  const { failing, window = "journal", until = "settled", archived = false, legacy = false } =
    options;
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  let victimId: string;
  let victimPath: string;
  if (legacy) {
    victimId = LEGACY_ID;
    victimPath = `${COLLECTION}/${LEGACY_ID}.jsonl`;
    await fs.mkdir(COLLECTION, { recursive: true });
    await fs.writeFile(victimPath, legacySessionBytes(LEGACY_ID, CWD, conversation(1)));
  } else {
    const victim = await store.create(CWD);
    await victim.commit(conversation(1));
    await victim.close();
    victimId = victim.id;
    victimPath = victim.getSessionPath();
  }
  const keep = await store.create(CWD);
  await keep.commit([user("keep")]);
  await keep.close();
  if (archived) await store.archive.set(CWD, [victimId], true);

  const staged = gate();
  const resume = gate();
  const paused = gate();
  const release = gate();
  const deleter = new SessionStore({
    fs: hookedFs(fs, {
      before: async (method, args) => {
        const path = String(args[0]);
        if (method === "open" && path.includes("/.committed.")) {
          staged.open();
          await resume.wait;
          if (failing) throw new FsIoError("EIO", "open", path, "injected");
        }
        if (method !== "remove" || !path.includes(`/${DELETE_PREFIX}`)) return;
        const last = path.slice(path.lastIndexOf("/") + 1);
        if (
          (until === "journal removal" && last === "intent.json") ||
          (until === "staging removal" && last.startsWith(DELETE_PREFIX))
        ) {
          paused.open();
          await release.wait;
        }
      },
    }),
    agentDir: AGENT,
  });
  const deleting = deleter.archive.delete(CWD, [victimId], { archivedOnly: false }).then(
    () => "resolved",
    (e) => `rejected ${e.name}`,
  );
  await staged.wait; // the session is staged in .delete-*, the marker not there yet

  let raced = 0;
  const reader = new SessionStore({
    fs: hookedFs(fs, {
      before: async (method, args) => {
        const path = String(args[0]);
        if (raced !== 0 || !path.includes(`/${DELETE_PREFIX}`)) return;
        const settles = window === "journal"
          ? path.endsWith("/intent.json") && method !== "readDir"
          : method === "readDir";
        if (settles) {
          // The reader saw the session staged; now the delete settles, and removes everything
          // (its staging directory too), or gets as far as `until`, before the reader looks
          // (again).
          raced++;
          resume.open();
          await (until === "settled" ? deleting : paused.wait);
        }
      },
    }),
    agentDir: AGENT,
  });
  let outcome: unknown;
  try {
    if (mode === "list") outcome = await reader.list(CWD);
    else if (mode === "open read-only") {
      const opened = await reader.open(victimPath, { readOnly: true });
      await opened.close();
      outcome = "opened";
    } else {
      outcome = await reader.listDetailed(CWD, undefined, { fast: mode === "fast listDetailed" });
    }
  } catch (error) {
    outcome = error;
  }
  resume.open();
  release.open();
  const settled = await deleting;
  return { outcome, settled, raced, keep: keep.id, victim: victimId, fs };
}

type Listed = { id: string; archived: boolean; storage: string };

/** The sessions a listing returned, after checking it reported no failure. */
function listed(mode: Mode, outcome: unknown): Listed[] {
  assert.ok(!(outcome instanceof Error), String(outcome));
  if (mode === "list") return outcome as Listed[];
  const result = outcome as { sessions: Listed[]; failures: { error: Error }[] };
  assert.deepEqual(result.failures.map((f) => `${f.error.name}: ${f.error.message}`), []);
  return result.sessions;
}

const MODES = ["list", "listDetailed", "fast listDetailed", "open read-only"] as const;
const WINDOWS = ["journal", "staging listing"] as const;
const UNTILS = ["settled", "journal removal", "staging removal"] as const;

/** Where a race of `window` and `until` has the reader look (for test names). */
function when(window: Window, until: Until): string {
  return `before its ${window} read${until === "settled" ? "" : ` (paused at its ${until})`}`;
}

for (const window of WINDOWS) {
  for (const until of UNTILS) {
    for (const mode of MODES) {
      test(`${mode} racing a delete that finishes ${when(window, until)} reports no corruption and lists the session gone`, async () => {
        const { outcome, settled, raced, keep, victim, fs } = await race(mode, {
          failing: false,
          window,
          until,
        });
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
        const sessions = listed(mode, outcome);
        assert.ok(sessions.some((s) => s.id === keep), "the other session is listed");
        // The delete committed before the listing looked at it: the session is gone.
        assert.ok(!sessions.some((s) => s.id === victim), "the deleted session is not listed");
      });
    }
  }
}

const VICTIMS = [
  { archived: false, legacy: false },
  { archived: true, legacy: false },
  { archived: false, legacy: true },
  { archived: true, legacy: true },
] as const;

for (const window of WINDOWS) {
  for (const until of UNTILS) {
    for (const { archived, legacy } of VICTIMS) {
      for (const mode of MODES) {
        const what = `${archived ? "an archived" : "a"} ${legacy ? "legacy " : ""}session`;
        test(`${mode} racing a delete of ${what} that rolls back ${when(window, until)} lists the session, membership restored`, async () => {
          const { outcome, settled, raced, keep, victim, fs } = await race(mode, {
            failing: true,
            window,
            until,
            archived,
            legacy,
          });
          assert.equal(settled, "rejected FsIoError");
          assert.equal(raced, 1, "the race was staged");
          assert.deepEqual(
            (await fs.readDir(COLLECTION)).filter((e) => e.name.startsWith(DELETE_PREFIX)),
            [],
          );
          if (mode === "open read-only") {
            // The session never stopped existing.
            assert.equal(outcome, "opened");
            return;
          }
          const sessions = listed(mode, outcome);
          assert.ok(sessions.some((s) => s.id === keep), "the other session is listed");
          // The delete did not happen: the session is listed, as a later listing lists it.
          const found = sessions.find((s) => s.id === victim);
          assert.ok(found !== undefined, "the session of the rolled-back delete is listed");
          assert.equal(found.storage, legacy ? "legacy" : "directory");
          assert.equal(found.archived, archived, "the membership its rollback restored");
        });
      }
    }
  }
}
