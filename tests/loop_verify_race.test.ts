// Verifying and looking up a healthy session while another process compacts, deletes or first
// saves it: it is verified where it is (the compaction's previous copy between its two renames,
// or in place again), a session deleted meanwhile is not reported, and one whose first save is
// in progress is a warning, never a corrupt session or "no session with id".
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore, verifySession } from "../mod.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { runCli } from "../src/cli/main.ts";
import type { CliIo } from "../src/cli/output.ts";
import { hookedFs } from "./_hooks.ts";
import { user } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

/** A session with a replacement generation (so a compaction has work), closed. */
async function replacedSession(fs: MemoryFs) {
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit([user("first")]);
  await session.commit([user("first, edited")]);
  await session.close();
  return { dir: session.getSessionPath(), id: session.id };
}

async function cli(fs: FileSystem, args: string[]): Promise<{ code: number; text: string }> {
  let text = "";
  const io: CliIo = {
    fs,
    sha256: portableSha256,
    out: (t) => void (text += t),
    err: (t) => void (text += t),
    errIsTerminal: false,
    env: () => undefined,
    cwd: CWD,
    now: () => Date.parse("2026-12-01T00:00:00Z"),
  };
  return { code: await runCli(["--data-dir", AGENT, ...args], io), text };
}

test("verifySession between a compaction's two renames verifies the session, not a missing one", async () => {
  const fs = new MemoryFs();
  const { dir } = await replacedSession(fs);
  let during: Awaited<ReturnType<typeof verifySession>> | undefined;
  const compacting = hookedFs(fs, {
    async after(method, args) {
      if (method === "rename" && args[0] === dir && during === undefined) {
        during = await verifySession(fs, dir, { sha256: portableSha256 });
      }
    },
  });
  await new SessionStore({ fs: compacting, agentDir: AGENT }).compact(dir);
  assert.ok(during !== undefined, "the compaction moved the directory");
  assert.equal(during.ok, true, JSON.stringify(during.findings));
  assert.equal(during.dir, dir);
  assert.equal(during.validMessages, 1);
});

test("a CLI lookup that finds the directory missing while a compaction finishes finds it in place", async () => {
  const fs = new MemoryFs();
  const { dir, id } = await replacedSession(fs);
  // The compaction pauses after moving the directory aside, and finishes once the CLI has seen
  // the directory missing (before it looks for the staged copy).
  let resume: (() => void) | undefined;
  let moved!: () => void;
  const aside = new Promise<void>((resolve) => (moved = resolve));
  const compacting = hookedFs(fs, {
    async after(method, args) {
      if (method === "rename" && args[0] === dir && resume === undefined) {
        await new Promise<void>((resolve) => {
          resume = resolve;
          moved();
        });
      }
    },
  });
  const compaction = new SessionStore({ fs: compacting, agentDir: AGENT }).compact(dir);
  await aside;
  let finished = false;
  let seenMissing = false;
  const looking = hookedFs(fs, {
    async before(method, args) {
      if (finished) return;
      if (method === "lstat" && args[0] === dir) {
        seenMissing = !(await fs.lstat(dir).then(() => true, () => false));
      } else if (seenMissing && method === "readDir") {
        // The directory was just seen missing; before the CLI looks for the staged copy, the
        // compaction finishes (the copy goes, the directory is back).
        finished = true;
        resume?.();
        await compaction;
      }
    },
  });
  const run = await cli(looking, ["sessions", "show", id]);
  assert.ok(finished, "the CLI looked while the directory was aside");
  assert.equal(run.code, 0, run.text);
  assert.match(run.text, new RegExp(id));
});

test("verify --all leaves out a session another process deleted while it was verified", async () => {
  const fs = new MemoryFs();
  const { dir, id } = await replacedSession(fs);
  const store = new SessionStore({ fs, agentDir: AGENT });
  await store.archive.set(CWD, [id], true);
  // The delete runs once verify --all found the session in place and starts verifying it (its
  // first look into the directory), after the listing had listed it.
  let deleted = false;
  const racing = hookedFs(fs, {
    async before(method, args) {
      if (!deleted && method === "readDir" && args[0] === dir) {
        deleted = true;
        await store.archive.delete(CWD, [id]);
      }
    },
  });
  const run = await cli(racing, ["sessions", "verify", "--all"]);
  assert.ok(deleted);
  assert.equal(run.code, 0, run.text);
  assert.doesNotMatch(run.text, /CORRUPT|FAILED/);
});

test("verify --all: a directory whose first save has not committed is a warning; one committed meanwhile is verified", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit([user("hi")]);
  await session.close();
  const dir = session.getSessionPath();
  const meta = await fs.readFile(`${dir}/meta.json`);
  const index = await fs.readFile(`${dir}/index.json`);
  // meta.json lost from a session that committed (its index.json is there): an error.
  await fs.remove(`${dir}/meta.json`);
  const lost = await cli(fs, ["sessions", "verify", "--all"]);
  assert.equal(lost.code, 1, lost.text);
  assert.match(lost.text, /CORRUPT/);
  // Neither file: a first save that has not committed.
  await fs.remove(`${dir}/index.json`);
  const pending = await cli(fs, ["sessions", "verify", "--all"]);
  assert.equal(pending.code, 0, pending.text);
  assert.match(pending.text, /No meta\.json: nothing committed/);
  // Its meta.json comes into place once the verification found none.
  let committed = false;
  const racing = hookedFs(fs, {
    async before(method, args) {
      if (!committed && method === "lstat" && args[0] === `${dir}/meta.json`) {
        committed = true;
        await fs.writeFile(`${dir}/meta.json`, meta);
        await fs.writeFile(`${dir}/index.json`, index);
      }
    },
  });
  const run = await cli(racing, ["sessions", "verify", "--all", "--json"]);
  assert.equal(run.code, 0, run.text);
  const reports = JSON.parse(run.text) as { ok: boolean; findings: unknown[] }[];
  assert.deepEqual(reports.map((r) => [r.ok, r.findings.length]), [[true, 0]]);
});
