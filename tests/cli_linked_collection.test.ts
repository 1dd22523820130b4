// A collection under `<data dir>/sessions/` that is a link to a directory: the read-only commands
// read through it, as the library's listings do (`sessions list` by cwd lists it), and the
// commands that write into a collection keep refusing it, as the store refuses it for writing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { PermissionDenied } from "../src/port/errors.ts";
import { memoryIo } from "./_cli_io.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { conversation, legacySessionBytes } from "./_fixtures.ts";

const CWD = "/work/project";
const OTHER = "/work/other";
const AGENT = "/home/user/.loop";
const ROOT = `${AGENT}/sessions`;

/** Runs `sessions args` on `fs`; returns its exit code, stdout and stderr. */
async function sessions(
  fs: MemoryFs,
  args: string[],
): Promise<{ code: number; out: string; err: string }> {
  const { io, out } = memoryIo(fs, CWD, Date.parse("2026-03-01T00:00:00Z"));
  let err = "";
  const code = await runCli(["--data-dir", AGENT, "sessions", ...args], {
    ...io,
    err: (text) => void (err += text),
  });
  return { code, out: out(), err };
}

/** A session of `cwd`'s collection, moved elsewhere and linked back; and one in a real one. */
async function linkedStore(): Promise<{ fs: MemoryFs; linked: string; real: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(OTHER, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const ids: string[] = [];
  for (const cwd of [CWD, OTHER]) {
    const session = await store.create(cwd);
    await session.commit(conversation(1, cwd));
    await session.close();
    ids.push(session.id);
  }
  // The collection lives on another disk, say, linked into the store.
  const collection = `${ROOT}/${workspaceHash(CWD)}`;
  await fs.mkdir("/disk2", { recursive: true });
  await fs.rename(collection, "/disk2/collection");
  await fs.symlink("/disk2/collection", collection);
  // Neither a dangling link, a link loop nor a link to a file is a collection.
  await fs.symlink("/nowhere", `${ROOT}/dangling`);
  await fs.symlink(`${ROOT}/loop`, `${ROOT}/loop`);
  await fs.writeFile("/disk2/file", new Uint8Array([1]));
  await fs.symlink("/disk2/file", `${ROOT}/to-a-file`);
  fs.syncAll();
  return { fs, linked: ids[0]!, real: ids[1]! };
}

test("read-only commands read a linked collection as the library's listing does", async () => {
  const { fs, linked, real } = await linkedStore();
  const byCwd = await sessions(fs, ["list", "--json"]);
  assert.equal(byCwd.code, 0, byCwd.err);
  assert.deepEqual(
    JSON.parse(byCwd.out).sessions.map((s: { id: string }) => s.id),
    [linked],
  );
  const all = await sessions(fs, ["list", "--all-workspaces", "--json"]);
  assert.equal(all.code, 0, all.err);
  assert.deepEqual(
    JSON.parse(all.out).sessions.map((s: { id: string }) => s.id).sort(),
    [linked, real].sort(),
  );
  assert.deepEqual(JSON.parse(all.out).failures, []);
  const show = await sessions(fs, ["show", linked, "--json"]);
  assert.equal(show.code, 0, show.err);
  assert.match(show.out, new RegExp(linked));
  const history = await sessions(fs, ["history", linked]);
  assert.equal(history.code, 0, history.err);
  assert.notEqual(history.out, "");
  const verify = await sessions(fs, ["verify", linked]);
  assert.equal(verify.code, 0, verify.err);
  const verifyAll = await sessions(fs, ["verify", "--all", "--json"]);
  assert.equal(verifyAll.code, 0, verifyAll.err);
  const reports = JSON.parse(verifyAll.out) as { dir: string; ok: boolean }[];
  assert.equal(reports.length, 2, verifyAll.out);
  assert.ok(reports.every((r) => r.ok), verifyAll.out);
  assert.ok(reports.some((r) => r.dir.endsWith(linked)), verifyAll.out);
});

/** What `archive`, `restore` and `delete` say of a session in the linked `collection`. */
function linkRefusal(sub: string, collection: string): string {
  return `error: Session collection path is a link, not a directory: 'sessions ${sub}' writes ` +
    `into the collection, and a link is never followed for writes (symlinks are refused); ` +
    `nothing was changed (in '${collection}')\n`;
}

/** Why `migrate --all` leaves a linked collection out. */
const migrateRefusal = "Session collection path is a link, not a directory: 'sessions migrate' " +
  "writes into the collection, and a link is never followed for writes (symlinks are refused)";

test("writing commands keep refusing a linked collection, by id as by path, changing nothing", async () => {
  const { fs, linked } = await linkedStore();
  const before = fs.clone();
  const collection = `${ROOT}/${workspaceHash(CWD)}`;
  for (const target of [linked, `${collection}/${linked}`]) {
    for (
      const args of [
        ["archive", target],
        ["restore", target],
        ["delete", "--include-unarchived", target],
        ["delete", target],
      ]
    ) {
      // Refused as compaction and salvage into it are (exit 1), naming the linked collection.
      const result = await sessions(fs, args);
      assert.equal(result.code, 1, `${args.join(" ")}: ${result.out}`);
      assert.equal(result.out, "", args.join(" "));
      assert.equal(result.err, linkRefusal(args[0] as string, collection), args.join(" "));
    }
    const compacted = await sessions(fs, ["compact", target]);
    assert.equal(compacted.code, 1, compacted.out);
    assert.match(
      compacted.err,
      /^error: Session collection path is not a directory \(symlinks are refused\)/,
    );
  }
  const salvaged = await sessions(fs, [
    "salvage",
    `/disk2/collection/${linked}`,
    "--to",
    collection,
  ]);
  assert.equal(salvaged.code, 1, salvaged.out);
  assert.match(
    salvaged.err,
    /^error: Session collection path is not a directory \(symlinks are refused\)/,
  );
  // Left out, and said so: nothing in it is left unmigrated (exit 0).
  const migrated = await sessions(fs, ["migrate", "--all"]);
  assert.equal(migrated.code, 0, migrated.err);
  assert.equal(
    migrated.out,
    `No legacy sessions to migrate.\nskipped  ${collection}: ${migrateRefusal}\n`,
  );
  const json = await sessions(fs, ["migrate", "--all", "--json"]);
  assert.equal(json.code, 0, json.err);
  assert.deepEqual(JSON.parse(json.out), {
    dryRun: false,
    results: [],
    skipped: [{ collection, reason: migrateRefusal, files: [] }],
  });
  assert.deepEqual(fs.snapshotTree(), before.snapshotTree());
});

test("archive, restore and delete refuse a linked collection before changing anything, also with --dir and beside a real one", async () => {
  const { fs, linked, real } = await linkedStore();
  const before = fs.clone();
  const collection = `${ROOT}/${workspaceHash(CWD)}`;
  for (const sub of ["archive", "restore", "delete"]) {
    const extra = sub === "delete" ? ["--include-unarchived"] : [];
    for (
      const args of [
        // The real collection's session first: it is checked, never changed.
        [sub, ...extra, real, linked],
        [sub, ...extra, "--json", real, linked],
        [sub, ...extra, "--dir", collection, linked],
        // By a path through the link, while --dir names the directory it leads to.
        [sub, ...extra, "--dir", "/disk2/collection", `${collection}/${linked}`],
      ]
    ) {
      const result = await sessions(fs, args);
      assert.equal(result.code, 1, `${args.join(" ")}: ${result.out}`);
      assert.equal(result.out, "", args.join(" "));
      assert.equal(result.err, linkRefusal(sub, collection), args.join(" "));
    }
  }
  assert.deepEqual(fs.snapshotTree(), before.snapshotTree());
  // The real collection's session alone is archived as before.
  const archived = await sessions(fs, ["archive", real]);
  assert.equal(archived.code, 0, archived.err);
  assert.equal(archived.out, `archived ${real}\n`);
});

test("migrate --all reports a linked collection with legacy files it leaves unmigrated (exit 1)", async () => {
  const { fs } = await linkedStore();
  const collection = `${ROOT}/${workspaceHash(CWD)}`;
  const otherCollection = `${ROOT}/${workspaceHash(OTHER)}`;
  const inLink = "0f0e0d0c-0b0a-4908-8706-050403020100";
  const inReal = "0f0e0d0c-0b0a-4908-8706-050403020101";
  await fs.writeFile(
    `/disk2/collection/${inLink}.jsonl`,
    legacySessionBytes(inLink, CWD, conversation(1)),
  );
  await fs.writeFile(
    `${otherCollection}/${inReal}.jsonl`,
    legacySessionBytes(inReal, OTHER, conversation(1)),
  );
  fs.syncAll();
  const skipped = [{
    collection,
    reason: migrateRefusal,
    files: [`${collection}/${inLink}.jsonl`],
  }];
  const before = fs.clone();
  const dry = await sessions(fs, ["migrate", "--all", "--dry-run"]);
  assert.equal(dry.code, 1, dry.out + dry.err);
  assert.equal(
    dry.out,
    `would migrate ${otherCollection}/${inReal}.jsonl -> ${otherCollection}/${inReal}\n` +
      `would skip ${collection}: ${migrateRefusal}\n` +
      `  not migrated: ${collection}/${inLink}.jsonl\n`,
  );
  const dryJson = await sessions(fs, ["migrate", "--all", "--dry-run", "--json"]);
  assert.equal(dryJson.code, 1, dryJson.err);
  assert.deepEqual(JSON.parse(dryJson.out).skipped, skipped);
  assert.deepEqual(fs.snapshotTree(), before.snapshotTree());
  const json = await sessions(fs, ["migrate", "--all", "--json"]);
  assert.equal(json.code, 1, json.err);
  const parsed = JSON.parse(json.out);
  assert.deepEqual(parsed.results, [{
    path: `${otherCollection}/${inReal}.jsonl`,
    migratedTo: `${otherCollection}/${inReal}`,
    alreadyMigrated: false,
  }]);
  assert.deepEqual(parsed.skipped, skipped);
  // Nothing was written through the link.
  assert.equal(await fs.lstat(`/disk2/collection/${inLink}`).catch(() => undefined), undefined);
  // Run again: the real collection's file is a backup now; the linked one is still reported.
  const again = await sessions(fs, ["migrate", "--all"]);
  assert.equal(again.code, 1, again.err);
  assert.equal(
    again.out,
    `skipped  ${collection}: ${migrateRefusal}\n  not migrated: ${collection}/${inLink}.jsonl\n`,
  );
});

test("migrate --all migrates the real collections when a linked one cannot be read, and reports it (exit 1)", async () => {
  const { fs } = await linkedStore();
  const collection = `${ROOT}/${workspaceHash(CWD)}`;
  const otherCollection = `${ROOT}/${workspaceHash(OTHER)}`;
  const inReal = "0f0e0d0c-0b0a-4908-8706-050403020101";
  await fs.writeFile(
    `${otherCollection}/${inReal}.jsonl`,
    legacySessionBytes(inReal, OTHER, conversation(1)),
  );
  // The linked directory is another user's, say: listing it fails.
  const readDir = fs.readDir.bind(fs);
  fs.readDir = (path: string) =>
    path === collection || path === "/disk2/collection"
      ? Promise.reject(new PermissionDenied("readDir", path))
      : readDir(path);
  const dry = await sessions(fs, ["migrate", "--all", "--dry-run", "--json"]);
  assert.equal(dry.code, 1, dry.err);
  const dryParsed = JSON.parse(dry.out);
  assert.equal(dryParsed.results.length, 1);
  assert.equal(dryParsed.skipped.length, 1);
  assert.equal(dryParsed.skipped[0].collection, collection);
  assert.deepEqual(dryParsed.skipped[0].files, []);
  assert.match(dryParsed.skipped[0].error, /permission denied/i);
  const run = await sessions(fs, ["migrate", "--all"]);
  assert.equal(run.code, 1, run.err);
  assert.match(
    run.out,
    new RegExp(`^migrated ${otherCollection}/${inReal}\\.jsonl -> ${otherCollection}/${inReal}\\n`),
  );
  assert.match(run.out, /skipped {2}.*\n {2}could not be read: .*permission denied/i);
  assert.equal((await fs.lstat(`${otherCollection}/${inReal}`)).kind, "directory");
});

test("cleanup --all-workspaces settles the real collections and skips a linked one (exit 1)", async () => {
  const { fs } = await linkedStore();
  const linkedPath = `${ROOT}/${workspaceHash(CWD)}`;
  const realPath = `${ROOT}/${workspaceHash(OTHER)}`;
  // A temp file a crash left in each: removed from the real one only.
  await fs.writeFile(`/disk2/collection/.meta.json.0badc0de1.tmp`, new Uint8Array([1]));
  await fs.writeFile(`${realPath}/.meta.json.0badc0de1.tmp`, new Uint8Array([1]));
  const run = await sessions(fs, ["cleanup", "--all-workspaces", "--json"]);
  assert.equal(run.code, 1, run.err);
  const report = JSON.parse(run.out);
  assert.deepEqual(report.collections.map((c: { collection: string }) => c.collection), [realPath]);
  assert.deepEqual(report.collections[0].removed, [`${realPath}/.meta.json.0badc0de1.tmp`]);
  assert.deepEqual(report.skipped.map((s: { collection: string }) => s.collection), [linkedPath]);
  assert.equal((await fs.lstat(`/disk2/collection/.meta.json.0badc0de1.tmp`)).kind, "file");
});
