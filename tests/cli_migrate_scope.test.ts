// `sessions migrate`: a dry run says what the migration does (a legacy file an uncommitted delete
// staged, a legacy file in a linked collection); `--all` goes on past a collection it cannot read
// and leaves a file of another version alone; `list --all-workspaces` goes on past one too.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { PermissionDenied } from "../src/port/errors.ts";
import { SessionStore, workspaceHash } from "../mod.ts";
import { memoryIo } from "./_cli_io.ts";
import { hookedFs } from "./_hooks.ts";
import { conversation, legacySessionBytes, memoryStoreWithSession } from "./_fixtures.ts";
import type { FileSystem } from "../src/port/fs.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const SESSIONS = `${AGENT}/sessions`;
const COLLECTION = `${SESSIONS}/${workspaceHash(CWD)}`;
const ID = "2b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const OTHER = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";

async function cli(
  fs: MemoryFs,
  args: string[],
  through: FileSystem = fs,
): Promise<{ code: number; out: string; err: string }> {
  let err = "";
  const { io, out } = memoryIo(fs, CWD, Date.parse("2026-01-01T00:00:00Z"));
  const code = await runCli(["--data-dir", AGENT, "sessions", ...args], {
    ...io,
    fs: through,
    err: (text) => {
      err += text;
    },
  });
  return { code, out: out(), err };
}

/**
 * An uncommitted delete (no commit marker) that set the never-migrated legacy file of session
 * `ID` aside; returns its staging directory.
 */
async function stageUncommittedDelete(fs: MemoryFs): Promise<string> {
  const staging = `${COLLECTION}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(staging);
  await fs.writeFile(
    `${staging}/intent.json`,
    new TextEncoder().encode(
      JSON.stringify({
        operation: "delete",
        ids: [ID],
        entries: [`${ID}.jsonl`],
        archived: [],
        membersBefore: [],
      }) + "\n",
    ),
  );
  await fs.writeFile(`${staging}/${ID}.jsonl`, legacySessionBytes(ID, CWD, conversation(2)));
  return staging;
}

test("migrate <id> --dry-run of a legacy file an uncommitted delete staged says it would migrate, as the migration does", async () => {
  const { fs } = await memoryStoreWithSession(AGENT, CWD);
  const staging = await stageUncommittedDelete(fs);
  const before = fs.snapshotTree("/");
  const dry = await cli(fs, ["migrate", ID, "--dry-run"]);
  assert.equal(dry.code, 0, dry.out + dry.err);
  assert.equal(dry.out, `would migrate ${COLLECTION}/${ID}.jsonl -> ${COLLECTION}/${ID}\n`);
  assert.deepEqual(fs.snapshotTree("/"), before, "a dry run writes nothing");
  // A damaged staged copy fails the dry run, as it fails the migration: the staged copy is read.
  const bytes = await fs.readFile(`${staging}/${ID}.jsonl`);
  await fs.writeFile(`${staging}/${ID}.jsonl`, bytes.subarray(0, bytes.length - 7));
  const damaged = await cli(fs, ["migrate", ID, "--dry-run"]);
  assert.equal(damaged.code, 1, damaged.out);
  assert.match(damaged.out, /^failed /);
  await fs.writeFile(`${staging}/${ID}.jsonl`, bytes);
  const real = await cli(fs, ["migrate", ID]);
  assert.equal(real.code, 0, real.out + real.err);
  assert.equal(real.out, `migrated ${COLLECTION}/${ID}.jsonl -> ${COLLECTION}/${ID}\n`);
});

test("migrate <id> --dry-run of a staged legacy file fails as the migration does when a link or a directory is at its name", async () => {
  for (const planted of ["link", "directory"] as const) {
    const { fs } = await memoryStoreWithSession(AGENT, CWD);
    await stageUncommittedDelete(fs);
    const file = `${COLLECTION}/${ID}.jsonl`;
    if (planted === "link") await fs.symlink("/nowhere.jsonl", file);
    else await fs.mkdir(file);
    for (const dryRun of [true, false]) {
      const { code, out, err } = await cli(fs, ["migrate", ID, ...(dryRun ? ["--dry-run"] : [])]);
      assert.equal(code, 1, `${planted}, dry run ${dryRun}: ${out}`);
      assert.match(
        err,
        /^error: Legacy session file is not a regular file/,
        `${planted}, dry run ${dryRun}`,
      );
      // --all, which finds the staged copy by the collection, says the same of it.
      const all = await cli(fs, ["migrate", "--all", ...(dryRun ? ["--dry-run"] : [])]);
      assert.equal(all.code, 1, all.out);
      assert.match(all.out, /^failed .*: Legacy session path is not a regular file/);
    }
    // The store's listings report it as a failure naming that path, as its open refuses it.
    for (const fast of [false, true]) {
      const { sessions, failures } = await new SessionStore({ fs, agentDir: AGENT })
        .listDetailed(CWD, undefined, { fast });
      assert.ok(!sessions.some((s) => s.id === ID), `${planted}, fast ${fast}`);
      assert.deepEqual(failures.map((f) => [f.path, f.error.name]), [[file, "SessionFormatError"]]);
    }
    // verify says so too, by id and with --all, instead of passing the staged copy.
    for (const args of [["verify", ID, "--json"], ["verify", "--all", "--json"]]) {
      const { code, out } = await cli(fs, args);
      assert.equal(code, 1, `${planted}, ${args.join(" ")}: ${out}`);
      const parsed = JSON.parse(out);
      const reports = Array.isArray(parsed) ? parsed : parsed.reports;
      const report = reports.find((r: { dir: string }) => r.dir === file);
      assert.ok(report !== undefined, out);
      assert.equal(report.ok, false);
    }
  }
});

test("migrate --all takes a legacy file an uncommitted delete staged, as migrate <id> does", async () => {
  const { fs } = await memoryStoreWithSession(AGENT, CWD);
  await stageUncommittedDelete(fs);
  const before = fs.snapshotTree("/");
  const dry = await cli(fs, ["migrate", "--all", "--dry-run"]);
  assert.equal(dry.code, 0, dry.out);
  assert.equal(dry.out, `would migrate ${COLLECTION}/${ID}.jsonl -> ${COLLECTION}/${ID}\n`);
  assert.deepEqual(fs.snapshotTree("/"), before);
  const real = await cli(fs, ["migrate", "--all"]);
  assert.equal(real.code, 0, real.out);
  assert.equal(real.out, `migrated ${COLLECTION}/${ID}.jsonl -> ${COLLECTION}/${ID}\n`);
  assert.equal((await fs.lstat(`${COLLECTION}/${ID}`)).kind, "directory");
  const again = await cli(fs, ["migrate", "--all"]);
  assert.equal(again.out, "No legacy sessions to migrate.\n");
});

test("migrate <file> --dry-run in a linked collection fails as the migration does", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir("/disk2/collection", { recursive: true });
  await fs.mkdir(SESSIONS, { recursive: true });
  await fs.symlink("/disk2/collection", COLLECTION);
  await fs.writeFile(
    `/disk2/collection/${ID}.jsonl`,
    legacySessionBytes(ID, CWD, conversation(2)),
  );
  const before = fs.snapshotTree("/");
  for (const dryRun of [true, false]) {
    const { code, out } = await cli(fs, [
      "migrate",
      `${COLLECTION}/${ID}.jsonl`,
      ...(dryRun ? ["--dry-run"] : []),
    ]);
    assert.equal(code, 1, out);
    assert.match(
      out,
      new RegExp(
        `^failed +${COLLECTION}/${ID}\\.jsonl: Session collection path is not a directory`,
      ),
      `dry run: ${dryRun}`,
    );
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("migrate --all and list --all-workspaces report a collection they cannot read and go on with the others", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const good = `${SESSIONS}/aaaaaaaaaaaaaaaaaaaaaaaa`;
  const locked = `${SESSIONS}/bbbbbbbbbbbbbbbbbbbbbbbb`;
  await fs.mkdir(good, { recursive: true });
  await fs.mkdir(locked, { recursive: true });
  await fs.writeFile(`${good}/${ID}.jsonl`, legacySessionBytes(ID, CWD, conversation(2)));
  // Reading the second collection fails, as a 0700 directory of another user does.
  const through = hookedFs(fs, {
    before(method, args) {
      if (method === "readDir" && args[0] === locked) {
        throw new PermissionDenied("scandir", locked);
      }
    },
  });
  const listed = await cli(fs, ["list", "--all-workspaces", "--json"], through);
  assert.equal(listed.code, 1);
  const { sessions, failures } = JSON.parse(listed.out);
  assert.deepEqual(sessions.map((s: { id: string }) => s.id), [ID]);
  assert.equal(failures.length, 1);
  assert.equal(failures[0].path, locked);
  assert.match(failures[0].error, /ermission denied/);

  const dry = await cli(fs, ["migrate", "--all", "--dry-run", "--json"], through);
  assert.equal(dry.code, 1, dry.out);
  const planned = JSON.parse(dry.out);
  assert.deepEqual(planned.results, [
    { path: `${good}/${ID}.jsonl`, migratedTo: `${good}/${ID}`, alreadyMigrated: false },
  ]);
  assert.equal(planned.skipped.length, 1);
  assert.equal(planned.skipped[0].collection, locked);
  assert.match(planned.skipped[0].error, /ermission denied/);

  const real = await cli(fs, ["migrate", "--all"], through);
  assert.equal(real.code, 1, real.out);
  assert.match(real.out, new RegExp(`^migrated ${good}/${ID}\\.jsonl -> ${good}/${ID}$`, "m"));
  assert.match(
    real.out,
    new RegExp(`^skipped  ${locked}: Session collection cannot be read$`, "m"),
  );
  assert.match(real.out, /^ {2}could not be read: .*ermission denied/m);
  assert.equal((await fs.lstat(`${good}/${ID}`)).kind, "directory");
});

test("migrate --all leaves a legacy file of another version alone, as listings skip it; migrate <file> fails on it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  await fs.writeFile(`${COLLECTION}/${ID}.jsonl`, legacySessionBytes(ID, CWD, conversation(2)));
  const v1 = new TextDecoder().decode(legacySessionBytes(OTHER, CWD, conversation(1)))
    .replace('"version":2', '"version":1');
  await fs.writeFile(`${COLLECTION}/${OTHER}.jsonl`, new TextEncoder().encode(v1));
  const before = await fs.readFile(`${COLLECTION}/${OTHER}.jsonl`);

  const dry = await cli(fs, ["migrate", "--all", "--dry-run", "--json"]);
  assert.equal(dry.code, 0, dry.out);
  const planned = JSON.parse(dry.out).results;
  assert.equal(planned.length, 2);
  const left = planned.find((r: { path: string }) => r.path.endsWith(`${OTHER}.jsonl`));
  assert.equal(left.error, undefined);
  assert.match(left.unsupported, /version/i);

  for (let run = 0; run < 2; run++) {
    const real = await cli(fs, ["migrate", "--all"]);
    assert.equal(real.code, 0, real.out);
    assert.match(
      real.out,
      new RegExp(`^left alone ${COLLECTION}/${OTHER}\\.jsonl: .*version`, "m"),
    );
  }
  assert.equal((await fs.lstat(`${COLLECTION}/${ID}`)).kind, "directory");
  assert.deepEqual(await fs.readFile(`${COLLECTION}/${OTHER}.jsonl`), before);
  // Named on its own, the file is what the user asked for: it fails.
  const single = await cli(fs, ["migrate", `${COLLECTION}/${OTHER}.jsonl`]);
  assert.equal(single.code, 1, single.out);
  assert.match(single.out, /^failed /);
});

test("migrate --all leaves alone the backup of a migrated session an interrupted delete staged with its directory", async () => {
  // A migrated session (its backup kept), archived; a delete of it that crashed once both its
  // directory and its backup were staged, before its commit point.
  const build = async (): Promise<MemoryFs> => {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    await fs.mkdir(COLLECTION, { recursive: true });
    await fs.writeFile(`${COLLECTION}/${ID}.jsonl`, legacySessionBytes(ID, CWD, conversation(2)));
    const store = new SessionStore({ fs, agentDir: AGENT });
    const session = await store.open(`${COLLECTION}/${ID}.jsonl`);
    await session.commit([...session.messages, ...conversation(1, "after")]);
    await session.close();
    await store.archive.set(CWD, [ID], true);
    return fs;
  };
  let found: MemoryFs | undefined;
  for (let n = 1; n < 400 && found === undefined; n++) {
    const fs = await build();
    fs.resetCounter();
    fs.crashAfter(n);
    try {
      await new SessionStore({ fs, agentDir: AGENT }).archive.delete(CWD, [ID]);
      break; // the delete finished before the crash point: no such state
    } catch {
      // crashed
    }
    const after = fs.crash({ seed: 1, tailMode: "whole", extraJournal: "all" });
    const names = Object.keys(after.snapshotTree(COLLECTION));
    const staged = names.filter((path) =>
      path.startsWith(".delete-") && (path.endsWith(`/${ID}`) || path.endsWith(`/${ID}.jsonl`))
    );
    if (staged.length === 2 && !names.some((path) => path.endsWith("/committed"))) found = after;
  }
  assert.ok(found !== undefined, "a crash point with both entries staged");
  const fs = found;
  const listed = await cli(fs, ["list", "--json"]);
  assert.deepEqual(
    JSON.parse(listed.out).sessions.map((s: { id: string; storage: string }) => [s.id, s.storage]),
    [[ID, "directory"]],
  );
  const before = fs.snapshotTree("/");
  for (const args of [["migrate", "--all", "--dry-run"], ["migrate", "--all"]]) {
    const run = await cli(fs, args);
    assert.equal(run.code, 0, run.out);
    assert.equal(run.out, "No legacy sessions to migrate.\n", args.join(" "));
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});
