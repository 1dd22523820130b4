// Listings racing a delete of several sessions (or of a legacy file) that fails before its commit
// point and rolls back while the listing looks at it: the rollback moves the sessions back one by
// one and then removes its journal and staging directory, so the listing may see some sessions
// staged, others already back, and then no journal at all. The delete did not happen: every
// session is listed, none reported as a failure.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionStore, workspaceHash } from "../mod.ts";
import { DELETE_PREFIX } from "../src/loop/archive.ts";
import { conversation, legacySessionBytes, user } from "./_fixtures.ts";
import { gate, hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const LEGACY_ID = "0c7d5a3e-9b1f-4e2a-8c6d-2f4b7a9e1d30";

const MODES = ["list", "listDetailed", "fast listDetailed"] as const;
type Mode = typeof MODES[number];

type Listed = { id: string; archived: boolean; storage: string };

/** Lists through `store` in `mode`; a listing that reports a failure fails the test. */
async function listIn(store: SessionStore, mode: Mode): Promise<Listed[]> {
  if (mode === "list") return await store.list(CWD);
  const result = await store.listDetailed(CWD, undefined, { fast: mode === "fast listDetailed" });
  assert.deepEqual(result.failures.map((f) => `${f.error.name}: ${f.error.message}`), []);
  return result.sessions;
}

for (const archived of [false, true]) {
  for (const mode of MODES) {
    test(`${mode} that finds the journal of a rolled-back delete of two ${archived ? "archived " : ""}sessions gone after listing its staging directory lists both`, async () => {
      const fs = new MemoryFs();
      await fs.mkdir(CWD, { recursive: true });
      const store = new SessionStore({ fs, agentDir: AGENT });
      const ids: string[] = [];
      for (const text of ["x", "y", "keep"]) {
        const s = await store.create(CWD);
        await s.commit(text === "keep" ? [user("keep")] : conversation(1, text));
        await s.close();
        ids.push(s.id);
      }
      const [x, y] = ids as [string, string, string];
      if (archived) await store.archive.set(CWD, [x, y], true);
      const before = (await store.list(CWD)).map((s) => `${s.id} ${s.archived}`).sort();

      // The delete stages x and y, then fails at its commit marker; its rollback moves y back
      // first (the later entry), then pauses before moving x back.
      const staged = gate();
      const resume = gate();
      const yBack = gate();
      const release = gate();
      const deleter = new SessionStore({
        fs: hookedFs(fs, {
          before: async (method, args) => {
            const path = String(args[0]);
            if (method === "open" && path.includes("/.committed.")) {
              staged.open();
              await resume.wait;
              throw new FsIoError("EIO", "open", path, "injected");
            }
            if (method === "rename" && path.endsWith(`/${x}`) && path.includes(DELETE_PREFIX)) {
              yBack.open();
              await release.wait;
            }
          },
        }),
        agentDir: AGENT,
      });
      const deleting = deleter.archive.delete(CWD, [x, y], { archivedOnly: false }).then(
        () => "resolved",
        (e) => `rejected ${e.name}`,
      );
      await staged.wait; // x and y are staged; the listing reads the collection now

      let step = 0;
      const reader = new SessionStore({
        fs: hookedFs(fs, {
          before: async (method, args) => {
            const path = String(args[0]);
            if (!path.includes(`/${DELETE_PREFIX}`)) return;
            if (step === 0 && method === "readDir") {
              // The listing lists the staging directory once y is back: x staged, y not.
              step = 1;
              resume.open();
              await yBack.wait;
            } else if (step === 1 && path.endsWith("/intent.json")) {
              // The rollback finishes (x back, journal and staging directory removed) before the
              // listing reads the journal.
              step = 2;
              release.open();
              await deleting;
            }
          },
        }),
        agentDir: AGENT,
      });
      let sessions: Listed[];
      try {
        sessions = await listIn(reader, mode);
      } finally {
        resume.open();
        release.open();
      }
      assert.equal(await deleting, "rejected FsIoError");
      assert.equal(step, 2, "the race was staged");
      assert.deepEqual(
        (await fs.readDir(COLLECTION)).filter((e) => e.name.startsWith(DELETE_PREFIX)),
        [],
      );
      // The delete did not happen: both sessions are listed, with their membership.
      assert.deepEqual(sessions.map((s) => `${s.id} ${s.archived}`).sort(), before);
    });
  }
}

for (const archived of [false, true]) {
  for (const mode of MODES) {
    test(`${mode} whose read of ${archived ? "an archived" : "a"} legacy file fails while a delete stages it, the delete rolling back before the listing looks again, lists the session`, async () => {
      const fs = new MemoryFs();
      await fs.mkdir(CWD, { recursive: true });
      const store = new SessionStore({ fs, agentDir: AGENT });
      const keep = await store.create(CWD);
      await keep.commit([user("keep")]);
      await keep.close();
      const file = `${COLLECTION}/${LEGACY_ID}.jsonl`;
      await fs.writeFile(file, legacySessionBytes(LEGACY_ID, CWD, conversation(1)));
      if (archived) await store.archive.set(CWD, [LEGACY_ID], true);
      const before = (await store.list(CWD)).map((s) => `${s.id} ${s.storage} ${s.archived}`)
        .sort();

      const atLegacy = gate();
      const staged = gate();
      const resume = gate();
      const settled = gate();
      let phase = 0;
      const reader = new SessionStore({
        fs: hookedFs(fs, {
          before: async (method, args) => {
            const path = String(args[0]);
            if (phase === 0 && path === file) {
              // The listing read the collection (the file in place) and is about to read the
              // file: a delete stages it meanwhile, so the read fails with NotFound.
              phase = 1;
              atLegacy.open();
              await staged.wait;
            } else if (phase === 1 && method === "readDir" && path === COLLECTION) {
              // The listing looks at the collection again: the delete has rolled back by now,
              // the file is back at the same path.
              phase = 2;
              resume.open();
              await settled.wait;
            }
          },
        }),
        agentDir: AGENT,
      });
      const deleter = new SessionStore({
        fs: hookedFs(fs, {
          before: async (method, args) => {
            if (method === "open" && String(args[0]).includes("/.committed.")) {
              staged.open();
              await resume.wait;
              throw new FsIoError("EIO", "open", String(args[0]), "injected");
            }
          },
        }),
        agentDir: AGENT,
      });
      const listing = listIn(reader, mode);
      await atLegacy.wait;
      const deleting = deleter.archive.delete(CWD, [LEGACY_ID], { archivedOnly: false }).then(
        () => "resolved",
        (e) => `rejected ${e.name}`,
      );
      assert.equal(await deleting, "rejected FsIoError");
      settled.open();
      const sessions = await listing;
      assert.equal(phase, 2, "the race was staged");
      // The delete did not happen: the session is listed from its file, as before.
      assert.deepEqual(sessions.map((s) => `${s.id} ${s.storage} ${s.archived}`).sort(), before);
    });
  }
}
