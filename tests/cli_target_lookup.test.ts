// How the command line resolves a session target (`<id|path>`) it cannot use: an id found in two
// collections, an id found nowhere, a name that is neither id nor path, a legacy file not named
// by its id, a path that does not exist. Each is refused in one line on stderr, writing nothing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { type CliRun, runMemoryCli } from "./_cli_io.ts";
import { dirname, join } from "../src/port/path.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/project";
const OTHER = "/work/other";
const AGENT = "/home/user/.loop";
const NOW = Date.parse("2026-03-01T00:00:00Z");
/** A well-formed session id no session has. */
const ABSENT = "9d3e0c1a-5b2f-4e6d-8a7c-1f0e2d3c4b5a";

/** Runs `loop-sessions --data-dir AGENT args` in CWD; returns its exit code, stdout and stderr. */
function run(fs: MemoryFs, args: string[]): Promise<CliRun> {
  return runMemoryCli(fs, CWD, NOW, ["--data-dir", AGENT, ...args]);
}

/** A store with one saved session in the collection of CWD; also makes OTHER's collection. */
async function oneSession(): Promise<{ fs: MemoryFs; id: string; dir: string; other: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(OTHER, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => NOW });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const elsewhere = await store.create(OTHER);
  await elsewhere.commit(conversation(1, "other"));
  await elsewhere.close();
  return {
    fs,
    id: session.id,
    dir: session.getSessionPath(),
    other: dirname(elsewhere.getSessionPath()),
  };
}

/** Copies the session directory `dir` into `collection`, under the same id. */
async function copySession(fs: MemoryFs, dir: string, collection: string): Promise<string> {
  const copy = join(collection, dir.slice(dir.lastIndexOf("/") + 1));
  await fs.mkdir(copy, { mode: 0o700 });
  for (const name of ["messages.jsonl", "index.json", "meta.json"]) {
    await fs.writeFile(join(copy, name), await fs.readFile(join(dir, name)), { mode: 0o600 });
  }
  return copy;
}

test("an id found in two collections is refused, naming both: the command needs a path", async () => {
  const { fs, id, dir, other } = await oneSession();
  await copySession(fs, dir, other);
  const before = fs.snapshotTree();
  for (const command of [["show"], ["delete", "--include-unarchived"], ["archive"]]) {
    const result = await run(fs, ["sessions", ...command, id]);
    assert.equal(result.code, 2, result.err);
    assert.equal(result.out, "");
    assert.match(result.err, new RegExp(`^usage error: Session id ${id} exists in several`));
    assert.ok(result.err.includes(dirname(dir)) && result.err.includes(other), result.err);
    assert.match(result.err, /pass a path/);
  }
  assert.deepEqual(fs.snapshotTree(), before, "nothing was archived or deleted");
  // Either path resolves it.
  for (const path of [dir, join(other, id)]) {
    const shown = await run(fs, ["sessions", "show", path, "--json"]);
    assert.equal(shown.code, 0, shown.err);
    assert.equal(JSON.parse(shown.out).id, id);
  }
});

test("an id whose <id>.jsonl is not a regular file in two collections is refused, naming both", async () => {
  const { fs, dir, other } = await oneSession();
  const here = join(dirname(dir), `${ABSENT}.jsonl`);
  const there = join(other, `${ABSENT}.jsonl`);
  for (const file of [here, there]) await fs.mkdir(file);
  const before = fs.snapshotTree();
  const result = await run(fs, ["sessions", "show", ABSENT]);
  assert.equal(result.code, 2, result.err);
  assert.match(result.err, new RegExp(`Session id ${ABSENT} names a file in several collections`));
  assert.ok(result.err.includes(here), result.err);
  assert.ok(result.err.includes(there), result.err);
  // In one collection only, the file is named as not regular.
  await fs.remove(there);
  const one = await run(fs, ["sessions", "show", ABSENT]);
  assert.equal(one.code, 1, one.err);
  assert.ok(one.err.includes(here), one.err);
  assert.match(one.err, /not a regular file/);
  const after = fs.snapshotTree();
  assert.equal(Object.keys(after).length, Object.keys(before).length - 1, "only the removal");
});

test("an id found nowhere says where it was looked for", async () => {
  const { fs } = await oneSession();
  const result = await run(fs, ["sessions", "show", ABSENT]);
  assert.equal(result.code, 1, result.err);
  assert.equal(
    result.err,
    `error: No session with id ${ABSENT} under '${AGENT}/sessions'; pass a path or --data-dir\n`,
  );
});

test("a target that is neither a session id nor a path is a usage error", async () => {
  const { fs } = await oneSession();
  for (const target of ["not-a-session", ABSENT.toUpperCase()]) {
    const result = await run(fs, ["sessions", "show", target]);
    assert.equal(result.code, 2, result.err);
    assert.match(
      result.err,
      new RegExp(`^usage error: '${target}' is neither a session id \\(a lowercase UUID\\) nor`),
    );
  }
});

test("a path to a .jsonl file not named by a session id is refused as no legacy session", async () => {
  const { fs } = await oneSession();
  const file = join(CWD, "notes.jsonl");
  await fs.writeFile(file, new TextEncoder().encode('{"type":"session"}\n'));
  const before = fs.snapshotTree();
  const result = await run(fs, ["sessions", "migrate", file]);
  assert.equal(result.code, 1, result.err);
  assert.match(result.err, /A legacy session file must be named <session id>\.jsonl/);
  assert.ok(result.err.includes(file), result.err);
  assert.deepEqual(fs.snapshotTree(), before);
});

test("a path that names no session says whether it exists", async () => {
  const { fs, dir } = await oneSession();
  const missing = await run(fs, ["sessions", "show", join(CWD, "nothing-here")]);
  assert.equal(missing.code, 1, missing.err);
  assert.match(
    missing.err,
    /No session at '\/work\/project\/nothing-here': the path does not exist/,
  );
  // A session-shaped path in a real collection, with nothing there.
  const absent = join(dirname(dir), ABSENT);
  const gone = await run(fs, ["sessions", "show", absent]);
  assert.equal(gone.code, 1, gone.err);
  assert.equal(gone.err, `error: No session at '${absent}': the path does not exist\n`);
});
