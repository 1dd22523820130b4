// The command line against the Loop store on the real disk: which sessions it resolves, and what
// it refuses to touch. Runs each command as a subprocess on the runtime running the tests.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";
import { SessionStore } from "../src/loop/store.ts";
import { assistant, conversation, user } from "./_fixtures.ts";

const BIN = new URL("../src/cli/bin.ts", import.meta.url).pathname;
const isDeno = (globalThis as { Deno?: unknown }).Deno !== undefined;
const TSX = isDeno ? "" : pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

let base = "";
let agentDir = "";
let work = "";

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

function cli(args: string[], options: { env?: Record<string, string> } = {}): Run {
  const runtimeArgs = isDeno
    ? ["run", "-A", "--quiet", BIN, ...args]
    : ["--import", TSX, BIN, ...args];
  const result = spawnSync(process.execPath, runtimeArgs, {
    cwd: work,
    env: { ...process.env, LOOP_DATA_DIR: agentDir, NO_COLOR: "1", ...options.env },
    encoding: "utf8",
  });
  return { code: result.status ?? -1, out: result.stdout, err: result.stderr };
}

/** Every path under `root` with its kind and content (a snapshot to compare). */
function snapshot(root: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        out.set(path, "dir");
        walk(path);
      } else out.set(path, entry.isFile() ? readFileSync(path, "utf8") : "other");
    }
  };
  walk(root);
  return out;
}

let counter = 0;
/** A fresh store with one session per entry of `histories`, in one workspace collection. */
async function freshStore(
  histories: ReturnType<typeof conversation>[],
): Promise<{ store: SessionStore; collection: string; ids: string[] }> {
  const fs = nodeFs();
  const store = new SessionStore({ fs, agentDir });
  const cwd = join(work, `w${counter++}`);
  await fs.mkdir(cwd, { recursive: true });
  const ids: string[] = [];
  let collection = "";
  for (const history of histories) {
    const session = await store.create(cwd);
    await session.commit(history);
    await session.close();
    ids.push(session.id);
    collection = session.getSessionDir();
  }
  return { store, collection, ids };
}

/** Writes a legacy version-2 session file `<id>.jsonl` into `collection`. */
async function writeLegacy(collection: string, id: string): Promise<string> {
  const header = {
    format: "loop-session",
    version: 2,
    id,
    cwd: await nodeFs().realPath(work),
    createdAt: "2026-01-01T00:00:00.000Z",
    updatedAt: "2026-01-01T00:00:00.000Z",
    permissionPreset: "read-only",
  };
  const file = join(collection, `${id}.jsonl`);
  writeFileSync(
    file,
    [header, user("legacy q"), assistant("legacy a")].map((l) => JSON.stringify(l)).join("\n") +
      "\n",
  );
  return file;
}

before(() => {
  base = mkdtempSync(join(tmpdir(), "loop-cli-store-"));
  agentDir = join(base, "agent");
  work = join(base, "work");
  mkdirSync(work, { recursive: true });
});

after(() => {
  rmSync(base, { recursive: true, force: true });
});

test("delete, archive and restore refuse a folder outside the store's collections, however it is named", async () => {
  await freshStore([conversation(1)]);
  const victim = join(base, "project");
  const id = "11111111-2222-4333-8444-555555555555";
  mkdirSync(join(victim, id), { recursive: true });
  writeFileSync(join(victim, id, "important.txt"), "precious");
  writeFileSync(join(victim, `${id}.jsonl`), "not a session\n");
  writeFileSync(join(victim, `${id}.notes.md`), "my notes");
  const before = snapshot(victim);
  for (const target of [join(victim, id), join(victim, `${id}.jsonl`)]) {
    const run = cli(["sessions", "delete", "--include-unarchived", target]);
    assert.equal(run.code, 2, run.err);
    assert.match(run.err, /not in a collection of the store/);
    assert.equal(cli(["sessions", "archive", target]).code, 2);
    assert.equal(cli(["sessions", "restore", target]).code, 2);
  }
  // Named explicitly as the collection, it is still not a session the store recognizes.
  const explicit = cli(["sessions", "delete", "--include-unarchived", "--dir", victim, id]);
  assert.equal(explicit.code, 1, explicit.err);
  assert.match(explicit.err, /not a session the store recognizes/);
  assert.deepEqual(snapshot(victim), before);
});

test("delete refuses a folder named like a session inside a collection when it is no session", async () => {
  const { collection, ids } = await freshStore([conversation(1)]);
  const junk = "21111111-2222-4333-8444-555555555555";
  mkdirSync(join(collection, junk));
  writeFileSync(join(collection, junk, "important.txt"), "precious");
  writeFileSync(join(collection, `${junk}.jsonl`), "not a session\n");
  const before = snapshot(collection);
  for (const target of [junk, join(collection, junk)]) {
    // Together with a real session: nothing at all is deleted.
    const run = cli(["sessions", "delete", "--include-unarchived", ids[0] as string, target]);
    assert.equal(run.code, 1, run.err);
    assert.match(run.err, /not a session the store recognizes/);
  }
  assert.deepEqual(snapshot(collection), before);
  // A session of the store is deleted by its path, and one of an explicit collection by --dir.
  const byPath = cli(["sessions", "delete", "--include-unarchived", join(collection, ids[0]!)]);
  assert.equal(byPath.code, 0, byPath.err);
  assert.equal(existsSync(join(collection, ids[0]!)), false);
  const other = join(base, "global-chats");
  const store = new SessionStore({ fs: nodeFs(), agentDir, sessionDir: other });
  const chat = await store.create(work);
  await chat.commit(conversation(1));
  await chat.close();
  assert.equal(cli(["sessions", "delete", "--include-unarchived", chat.id]).code, 1);
  const byDir = cli(["sessions", "delete", "--include-unarchived", "--dir", other, chat.id]);
  assert.equal(byDir.code, 0, byDir.err);
  assert.equal(existsSync(join(other, chat.id)), false);
});

test("an explicit empty --data-dir is a usage error, never the home store", async () => {
  const home = join(base, "home");
  const homeStore = new SessionStore({ fs: nodeFs(), agentDir: join(home, ".loop") });
  const session = await homeStore.create(work);
  await session.commit(conversation(1));
  await session.close();
  const before = snapshot(join(home, ".loop"));
  // Deno keeps its cache where it was (under the real home by default).
  const denoDir = process.env.DENO_DIR ?? join(process.env.HOME ?? tmpdir(), ".cache", "deno");
  const env = { HOME: home, LOOP_DATA_DIR: "", DENO_DIR: denoDir };
  for (
    const args of [
      ["--data-dir=", "sessions", "list", "--all-workspaces", "--json"],
      ["--data-dir", "", "sessions", "delete", "--include-unarchived", session.id],
    ]
  ) {
    const run = cli(args, { env });
    assert.equal(run.code, 2, run.err);
    assert.equal(run.out, "");
    assert.match(run.err, /--data-dir/);
  }
  assert.deepEqual(snapshot(join(home, ".loop")), before);
  // An empty LOOP_DATA_DIR still means the default store.
  const listed = cli(["sessions", "list", "--all-workspaces", "--json"], { env });
  assert.equal(listed.code, 0, listed.err);
  assert.equal(JSON.parse(listed.out).sessions[0].id, session.id);
  // Only `--data-dir` itself is the option; a longer name is an unknown one.
  for (const args of [["--data-dirx=" + agentDir], ["--data-directory", agentDir]]) {
    const run = cli([...args, "sessions", "list", "--fast"], { env });
    assert.equal(run.code, 2, run.err);
    assert.match(run.err, /unknown option/);
  }
});

test("a legacy backup is never shown in place of its published directory", async () => {
  const { store, collection } = await freshStore([conversation(1)]);
  const id = "0f0e0d0c-0b0a-4908-8706-050403020100";
  const backup = await writeLegacy(collection, id);
  const migrated = await store.open(backup); // migrates; the file stays as the backup
  await migrated.commit([...migrated.messages, user("newer q"), assistant("newer a")]);
  await migrated.close();
  const shown = cli(["sessions", "show", backup, "--json"]);
  assert.equal(shown.code, 0, shown.err);
  assert.equal(JSON.parse(shown.out).legacy, false);
  assert.equal(JSON.parse(shown.out).messageCount, 4);
  assert.match(cli(["sessions", "history", backup]).out, /messages 0\.\.4 of 4/);
  // The published directory made invalid: an error, never the stale backup.
  renameSync(join(collection, id, "meta.json"), join(base, "moved-meta.json"));
  for (const target of [id, backup]) {
    for (const command of ["show", "history"]) {
      const run = cli(["sessions", command, target]);
      assert.equal(run.code, 1, `${command} ${target}: ${run.out}`);
      assert.match(run.err, /meta\.json/);
    }
    const verified = cli(["sessions", "verify", target]);
    assert.equal(verified.code, 1, verified.err);
    assert.match(verified.out, /CORRUPT/);
  }
  // A link published in place of the directory is refused too.
  rmSync(join(collection, id), { recursive: true });
  const copy = join(base, "copy-of-published");
  mkdirSync(copy);
  symlinkSync(copy, join(collection, id));
  const linked = cli(["sessions", "show", backup, "--json"]);
  assert.equal(linked.code, 1, linked.out);
  assert.match(linked.err, /not a directory/);
});

test("sessions of an interrupted delete or compaction are found where the listing finds them", async () => {
  const { collection, ids } = await freshStore([conversation(2), conversation(1)]);
  const [deleted, compacted] = ids as [string, string];
  // A delete that staged the session but did not commit: it did not happen.
  const staging = join(collection, ".delete-00000000-0000-4000-8000-000000000000");
  mkdirSync(staging);
  writeFileSync(
    join(staging, "intent.json"),
    JSON.stringify({
      operation: "delete",
      ids: [deleted],
      entries: [deleted],
      archived: [],
      membersBefore: [],
    }) + "\n",
  );
  renameSync(join(collection, deleted), join(staging, deleted));
  // A compaction interrupted between its two renames.
  const previous = join(collection, `.staging-${compacted}-abcdef12`, "previous");
  mkdirSync(join(collection, `.staging-${compacted}-abcdef12`));
  renameSync(join(collection, compacted), previous);
  const before = snapshot(collection);
  const verifiedDelete = cli(["sessions", "verify", deleted]);
  assert.equal(verifiedDelete.code, 0, verifiedDelete.err + verifiedDelete.out);
  assert.ok(verifiedDelete.out.includes(join(staging, deleted)));
  const verifiedCompaction = cli(["sessions", "verify", join(collection, compacted)]);
  assert.equal(verifiedCompaction.code, 0, verifiedCompaction.err + verifiedCompaction.out);
  assert.ok(verifiedCompaction.out.includes(previous));
  const shown = cli(["sessions", "show", deleted, "--json"]);
  assert.equal(shown.code, 0, shown.err);
  assert.equal(JSON.parse(shown.out).messageCount, conversation(2).length);
  assert.deepEqual(snapshot(collection), before);
});

test("verify and salvage refuse a link planted at the session folder", async () => {
  const { collection, ids } = await freshStore([conversation(1)]);
  const id = ids[0] as string;
  const elsewhere = join(base, "elsewhere");
  cpSync(join(collection, id), elsewhere, { recursive: true });
  rmSync(join(collection, id), { recursive: true });
  symlinkSync(elsewhere, join(collection, id));
  for (const target of [id, join(collection, id), join(collection, id, "meta.json")]) {
    const verified = cli(["sessions", "verify", target]);
    assert.equal(verified.code, 1, verified.out);
    assert.match(verified.err, /symlinks are refused/);
    const rescue = join(base, "rescue");
    const salvaged = cli(["sessions", "salvage", target, "--to", rescue]);
    assert.equal(salvaged.code, 1, salvaged.out);
    assert.match(salvaged.err, /symlinks are refused/);
    assert.equal(existsSync(rescue), false);
  }
});

test("compact says what it did, and a corrupt committed range is exit code 1", async () => {
  const { collection, ids } = await freshStore([
    conversation(1),
    [user("one"), assistant("two"), user("three")],
  ]);
  const [healthy, damaged] = ids as [string, string];
  const nothing = cli(["sessions", "compact", healthy]);
  assert.equal(nothing.code, 0, nothing.err);
  assert.match(nothing.out, /^not compacted: .* already holds only the committed generation/);
  // A session whose working directory is gone compacts as any other: the cwd is not checked.
  const cwd = JSON.parse(readFileSync(join(collection, healthy, "meta.json"), "utf8")).header.cwd;
  renameSync(cwd, `${cwd}.moved`);
  const moved = cli(["sessions", "compact", healthy]);
  renameSync(`${cwd}.moved`, cwd);
  assert.equal(moved.code, 0, moved.err);
  assert.match(moved.out, /^not compacted: .* already holds only the committed generation/);
  const log = join(collection, damaged, "messages.jsonl");
  const bytes = readFileSync(log);
  bytes[bytes.indexOf("\n") + 1] = 0x21; // same size: nothing to compact, but corrupt
  writeFileSync(log, bytes);
  const corrupt = cli(["sessions", "compact", damaged]);
  assert.equal(corrupt.code, 1, corrupt.out);
  assert.match(corrupt.out, /not compacted: .* is corrupt/);
  assert.match(corrupt.err, /committed bytes hash to/);
  // A finding whose message names its file already (an anchor past the history) names it once.
  writeFileSync(log, bytes.with(bytes.indexOf("\n") + 1, 0x7b));
  const metaPath = join(collection, damaged, "meta.json");
  const meta = JSON.parse(readFileSync(metaPath, "utf8"));
  meta.header.promptTimings = [{ userMessageIndex: 1, startedAt: 1, finishedAt: 2 }];
  writeFileSync(metaPath, JSON.stringify(meta));
  const anchored = cli(["sessions", "compact", damaged]);
  assert.equal(anchored.code, 1, anchored.out);
  assert.match(anchored.err, /promptTimings/);
  for (const line of [...corrupt.err.trim().split("\n"), ...anchored.err.trim().split("\n")]) {
    assert.equal(line.split(collection).length, 2, line);
  }
  const json = cli(["sessions", "compact", damaged, "--json"]);
  assert.equal(json.code, 1);
  assert.equal(JSON.parse(json.out).ok, false);
  // A crash tail after the committed range is compacted away.
  writeFileSync(join(collection, healthy, "messages.jsonl"), '{"role":"user","cont', {
    flag: "a",
  });
  const compacted = cli(["sessions", "compact", healthy]);
  assert.equal(compacted.code, 0, compacted.err);
  assert.match(compacted.out, /^compacted /);
});

test("migrate says when a file was already migrated", async () => {
  const { collection } = await freshStore([conversation(1)]);
  const id = "3f0e0d0c-0b0a-4908-8706-050403020100";
  const file = await writeLegacy(collection, id);
  const first = cli(["sessions", "migrate", file]);
  assert.equal(first.code, 0, first.err);
  assert.match(first.out, /^migrated /);
  const again = cli(["sessions", "migrate", file]);
  assert.equal(again.code, 0, again.err);
  assert.match(again.out, /^already migrated /);
  const json = JSON.parse(cli(["sessions", "migrate", file, "--json"]).out);
  assert.equal(json.results[0].alreadyMigrated, true);
  assert.match(cli(["sessions", "migrate", file, "--dry-run"]).out, /^already migrated /);
});

test("archive, restore and delete print JSON with --json", async () => {
  const { collection, ids } = await freshStore([conversation(1)]);
  const id = ids[0] as string;
  for (const [command, action] of [["archive", "archived"], ["restore", "restored"]]) {
    const run = cli(["sessions", command as string, id, "--json"]);
    assert.equal(run.code, 0, run.err);
    assert.deepEqual(JSON.parse(run.out), { action, sessions: [{ id, collection }] });
  }
  const deleted = cli(["sessions", "delete", id, "--include-unarchived", "--json"]);
  assert.equal(deleted.code, 0, deleted.err);
  assert.deepEqual(JSON.parse(deleted.out), { action: "deleted", sessions: [{ id, collection }] });
});

test("a command group without its command is a usage error: help on stderr, exit 2", () => {
  for (const group of ["sessions", "layout", "traces"]) {
    const run = cli([group]);
    assert.equal(run.code, 2, run.err);
    assert.equal(run.out, "");
    assert.match(run.err, /^Usage: loop-sessions /);
    const help = cli([group, "--help"]);
    assert.equal(help.code, 0, help.err);
    assert.match(help.out, /^Usage: loop-sessions /);
  }
});

test("a delete over several collections checks every target first: nothing is deleted when one is not archived", async () => {
  const first = await freshStore([conversation(1)]);
  const second = await freshStore([conversation(1)]);
  const [a, b] = [first.ids[0] as string, second.ids[0] as string];
  assert.equal(cli(["sessions", "archive", a]).code, 0);
  const before = [snapshot(first.collection), snapshot(second.collection)];
  const run = cli(["sessions", "delete", a, b]);
  assert.equal(run.code, 1, run.err);
  assert.match(run.err, /not archived: .*archive\.json/);
  assert.equal(run.out, "");
  assert.deepEqual([snapshot(first.collection), snapshot(second.collection)], before);
});

test("a damaged archive.json in a later collection fails archive, restore and delete before anything changes", async () => {
  const first = await freshStore([conversation(1)]);
  const second = await freshStore([conversation(1)]);
  const [a, b] = [first.ids[0] as string, second.ids[0] as string];
  writeFileSync(join(second.collection, "archive.json"), "{ not json");
  const before = [snapshot(first.collection), snapshot(second.collection)];
  for (
    const args of [["archive", a, b], ["restore", a, b], ["delete", a, b, "--include-unarchived"]]
  ) {
    const run = cli(["sessions", ...args]);
    assert.equal(run.code, 1, run.err);
    assert.equal(run.out, "", args.join(" "));
    assert.match(run.err, /archive\.json/);
    assert.doesNotMatch(run.err, /before the failure/);
    assert.deepEqual([snapshot(first.collection), snapshot(second.collection)], before);
  }
});

test("one collection named two ways is one collection, and a repeated id is one session", async () => {
  const { collection, ids } = await freshStore([conversation(1), conversation(1)]);
  const [a, b] = ids as [string, string];
  const alias = join(base, `alias-${counter++}`);
  symlinkSync(join(agentDir, "sessions"), alias);
  const aliased = join(alias, collection.split("/").pop() as string);
  const archived = cli(["sessions", "archive", a, join(aliased, a), a, b, "--json"]);
  assert.equal(archived.code, 0, archived.err);
  assert.deepEqual(JSON.parse(archived.out).sessions.map((s: { id: string }) => s.id), [a, b]);
  const run = cli(["sessions", "delete", a, join(aliased, a), b, b, "--json"]);
  assert.equal(run.code, 0, run.err);
  assert.deepEqual(JSON.parse(run.out), {
    action: "deleted",
    sessions: [{ id: a, collection }, { id: b, collection }],
  });
  assert.equal(existsSync(join(collection, a)), false);
  assert.equal(existsSync(join(collection, b)), false);
});

test("a delete that fails in a later collection says what it already deleted", async () => {
  const first = await freshStore([conversation(1)]);
  const second = await freshStore([conversation(1)]);
  const [a, b] = [first.ids[0] as string, second.ids[0] as string];
  // A live writer (of another host, which is never probed) holds the second session.
  const lock = {
    pid: 1,
    host: "another-host.invalid",
    startedAt: "2026-01-01T00:00:00.000Z",
    token: "0123456789abcdef0123456789abcdef",
  };
  writeFileSync(join(second.collection, b, "writer.lock"), JSON.stringify(lock));
  const run = cli(["sessions", "delete", a, b, "--include-unarchived"]);
  assert.equal(run.code, 1, run.err);
  assert.equal(run.out, `deleted ${a}\n`);
  assert.match(run.err, new RegExp(`not deleted: ${b}`));
  assert.match(run.err, /^error: /m);
  assert.equal(existsSync(join(first.collection, a)), false);
  assert.equal(existsSync(join(second.collection, b)), true);
  const third = await freshStore([conversation(1)]);
  const c = third.ids[0] as string;
  const json = cli(["sessions", "delete", c, b, "--include-unarchived", "--json"]);
  assert.equal(json.code, 1, json.err);
  const report = JSON.parse(json.out);
  assert.deepEqual(report.sessions, [{ id: c, collection: third.collection }]);
  assert.deepEqual(report.notDone, [b]);
  assert.equal(report.error.collection, second.collection);
});

test("verify and salvage refuse a link planted at a session file", async () => {
  for (const file of ["meta.json", "messages.jsonl"]) {
    const { collection, ids } = await freshStore([conversation(1)]);
    const id = ids[0] as string;
    const moved = join(base, `moved-${counter++}-${file}`);
    renameSync(join(collection, id, file), moved);
    symlinkSync(moved, join(collection, id, file));
    const verified = cli(["sessions", "verify", id]);
    assert.equal(verified.code, 1, verified.out);
    assert.match(verified.out, /CORRUPT/);
    assert.match(verified.out, /symlink, not a regular file/);
    const all = cli(["sessions", "verify", "--all", "--json"]);
    assert.equal(all.code, 1, all.out);
    const report = JSON.parse(all.out).find((r: { dir: string }) => r.dir.endsWith(id));
    assert.equal(report.ok, false);
    assert.equal(report.findings[0].file, join(collection, id, file));
    const rescue = join(base, `rescue-${counter++}`);
    const salvaged = cli(["sessions", "salvage", id, "--to", rescue]);
    assert.equal(salvaged.code, 1, salvaged.out);
    assert.match(salvaged.err, /^error: Session file is a symlink, not a regular file/);
    assert.equal(existsSync(rescue), false);
  }
});

test("archive, restore and delete refuse a private staging directory given as --dir", async () => {
  const { collection, ids } = await freshStore([conversation(1)]);
  const id = ids[0] as string;
  // A delete that staged the session but did not commit.
  const staging = join(collection, ".delete-10000000-0000-4000-8000-000000000000");
  mkdirSync(staging);
  writeFileSync(
    join(staging, "intent.json"),
    JSON.stringify({
      operation: "delete",
      ids: [id],
      entries: [id],
      archived: [],
      membersBefore: [],
    }) +
      "\n",
  );
  renameSync(join(collection, id), join(staging, id));
  // A link with an ordinary name that leads to the staging directory.
  const alias = join(dirname(collection), "alias-of-staging");
  symlinkSync(staging, alias);
  const before = snapshot(collection);
  for (const args of [["archive"], ["restore"], ["delete"], ["delete", "--include-unarchived"]]) {
    for (
      const dir of [staging, `${staging}/`, join(collection, `.staging-${id}-abcdef12`), alias]
    ) {
      const run = cli(["sessions", ...args, id, "--dir", dir, "--json"]);
      assert.equal(run.code, 2, `${args.join(" ")} ${dir}: ${run.out}`);
      assert.equal(run.out, "");
      assert.match(run.err, /private staging directory/);
    }
  }
  assert.deepEqual(snapshot(collection), before);
});

test("archive, restore, delete and compact refuse '..' in a path: the kernel resolves it after links", async () => {
  const { collection, ids } = await freshStore([conversation(1)]);
  const id = ids[0] as string;
  // C/link/../<id> is, for the kernel, a session of another collection.
  const other = join(agentDir, "sessions", `other-${counter++}`);
  mkdirSync(join(other, "sub"), { recursive: true });
  cpSync(join(collection, id), join(other, id), { recursive: true });
  symlinkSync(join(other, "sub"), join(collection, "link"));
  const target = `${collection}/link/../${id}`;
  const before = [snapshot(collection), snapshot(other)];
  for (
    const args of [
      ["archive", target],
      ["restore", target],
      ["delete", target, "--include-unarchived"],
      ["delete", id, "--dir", `${collection}/link/..`, "--include-unarchived"],
      ["compact", target],
    ]
  ) {
    const run = cli(["sessions", ...args]);
    assert.equal(run.code, 2, `${args.join(" ")}: ${run.out}`);
    assert.match(run.err, /'\.\.'/);
  }
  assert.deepEqual([snapshot(collection), snapshot(other)], before);
});
