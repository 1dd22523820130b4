// The `sessions` commands on a legacy version-2 file not migrated yet: read in place, once,
// never through a link, and never written.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runSessions } from "../src/cli/sessions.ts";
import { SessionFormatError } from "../src/loop/errors.ts";
import { memoryIo } from "./_cli_io.ts";
import { hookedFs } from "./_hooks.ts";
import { workspaceHash } from "../src/loop/store.ts";
import { assistant, legacySessionBytes, stoppedBetweenRenames, user } from "./_fixtures.ts";
import type { FileSystem } from "../src/port/fs.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const LEGACY = `${COLLECTION}/${ID}.jsonl`;

async function legacyStore(messages: readonly unknown[]): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  await fs.writeFile(LEGACY, legacySessionBytes(ID, CWD, messages), { mode: 0o600 });
  return fs;
}

/** Runs `sessions args` on `fs` (or `through`, a view of it); returns the exit code and stdout. */
async function sessions(
  fs: MemoryFs,
  args: string[],
  through: FileSystem = fs,
): Promise<{ code: number; out: string }> {
  const { io, out } = memoryIo(fs, CWD, Date.now());
  return { code: await runSessions({ ...io, fs: through }, args, AGENT), out: out() };
}

test("sessions history of a legacy file prints what it validated, even when a link is swapped in after its read", async () => {
  const fs = await legacyStore([user("real question"), assistant("real answer")]);
  await fs.writeFile(
    "/planted.jsonl",
    legacySessionBytes(ID, CWD, [{ role: "user", content: "PLANTED", timestamp: "not a number" }]),
  );
  const isOpen = (method: string, args: unknown[]): boolean =>
    (method === "open" || method === "openNoFollow") && args[0] === LEGACY;
  // How often the command opens the file (finding the session opens it too): the swap comes
  // right after the last open, the one its page is read from.
  let opens = 0;
  const counting = hookedFs(fs, {
    after(method, args) {
      if (isOpen(method, args)) opens++;
      return Promise.resolve();
    },
  });
  assert.equal((await sessions(fs, ["history", LEGACY, "--json"], counting)).code, 0);
  let seen = 0;
  let swapped = false;
  const racing = hookedFs(fs, {
    async after(method, args) {
      if (isOpen(method, args) && ++seen === opens) {
        swapped = true;
        await fs.rename(LEGACY, "/aside.jsonl");
        await fs.symlink("/planted.jsonl", LEGACY);
      }
    },
  });
  const { code, out } = await sessions(fs, ["history", LEGACY, "--json"], racing);
  assert.equal(swapped, true);
  assert.equal(code, 0, out);
  const page = JSON.parse(out);
  assert.deepEqual(page.messages.map((m: { content: unknown }) => m.content), [
    "real question",
    assistant("real answer").content,
  ]);
  assert.equal(page.total, 2);
  assert.ok(!out.includes("PLANTED"), out);
});

test("migrate --all reports a legacy file it cannot migrate because a link or a file is at its name, as migrate <file> does", async () => {
  for (const planted of ["a dangling link", "a file"] as const) {
    const fs = await legacyStore([user("hi"), assistant("yo")]);
    const dir = `${COLLECTION}/${ID}`;
    if (planted === "a file") await fs.writeFile(dir, new TextEncoder().encode("stray"));
    else await fs.symlink("/nowhere", dir);
    const before = fs.snapshotTree("/");
    for (const dryRun of [false, true]) {
      const label = `${planted}${dryRun ? ", --dry-run" : ""}`;
      const args = ["migrate", "--all", ...(dryRun ? ["--dry-run"] : [])];
      const human = await sessions(fs, args);
      assert.equal(human.code, 1, `${label}: ${human.out}`);
      assert.match(
        human.out,
        new RegExp(`^failed +${LEGACY.replaceAll(".", "\\.")}: .*not a directory`, "m"),
        label,
      );
      const json = await sessions(fs, [...args, "--json"]);
      assert.equal(json.code, 1, label);
      const { results } = JSON.parse(json.out);
      assert.equal(results.length, 1, label);
      assert.equal(results[0].path, LEGACY, label);
      assert.equal(results[0].alreadyMigrated, false, label);
      assert.match(results[0].error, /not a directory/, label);
      // The single form says the same.
      assert.equal(
        (await sessions(fs, ["migrate", LEGACY, ...(dryRun ? ["--dry-run"] : [])])).code,
        1,
        label,
      );
    }
    assert.deepEqual(fs.snapshotTree("/"), before, `${planted}: nothing was written`);
  }
});

test("migrate --all still skips the backup of a session whose directory is in place", async () => {
  const fs = await legacyStore([user("hi"), assistant("yo")]);
  assert.equal((await sessions(fs, ["migrate", "--all"])).code, 0);
  for (const args of [["migrate", "--all"], ["migrate", "--all", "--dry-run"]]) {
    const { code, out } = await sessions(fs, args);
    assert.equal(code, 0, out);
    assert.equal(out, "No legacy sessions to migrate.\n");
  }
});

test("sessions verify <legacy id|path> verifies the file in place as verify --all does, writing nothing", async () => {
  const fs = await legacyStore([user("q"), assistant("a")]);
  const before = fs.snapshotTree("/");
  for (const target of [ID, LEGACY]) {
    const human = await sessions(fs, ["verify", target]);
    assert.equal(human.code, 0, human.out);
    assert.equal(human.out, `ok       ${LEGACY} (2 messages)\n`);
    const json = await sessions(fs, ["verify", target, "--json"]);
    assert.equal(json.code, 0);
    const all = await sessions(fs, ["verify", "--all", "--json"]);
    assert.deepEqual(JSON.parse(json.out), JSON.parse(all.out));
  }
  // Damaged: a finding naming the file and the field, exit 1.
  const bytes = await fs.readFile(LEGACY);
  const torn = bytes.subarray(0, bytes.length - 5);
  await fs.writeFile(LEGACY, torn);
  const damaged = fs.snapshotTree("/");
  for (const target of [ID, LEGACY]) {
    const json = await sessions(fs, ["verify", target, "--json"]);
    assert.equal(json.code, 1, json.out);
    const [report] = JSON.parse(json.out);
    assert.equal(report.dir, LEGACY);
    assert.equal(report.ok, false);
    assert.equal(report.findings[0].kind, "legacy");
    assert.equal(report.findings[0].file, LEGACY);
    assert.match(report.findings[0].message, /messages\[1\]/);
    const all = await sessions(fs, ["verify", "--all", "--json"]);
    assert.deepEqual(JSON.parse(json.out), JSON.parse(all.out));
    const human = await sessions(fs, ["verify", target]);
    assert.equal(human.code, 1);
    assert.match(human.out, /^CORRUPT {2}/);
  }
  assert.deepEqual(fs.snapshotTree("/"), damaged, "verify never writes");
  await fs.writeFile(LEGACY, bytes);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("migrate --all, --dry-run or not, reports a legacy backup whose session a damaged compaction holds", async () => {
  const fs = await legacyStore([user("hi"), assistant("yo")]);
  assert.equal((await sessions(fs, ["migrate", "--all"])).code, 0);
  // The migrated session moved away by a compaction stopped between its renames, its previous
  // copy damaged; its compacted copy is complete and the legacy backup is stale.
  const dir = `${COLLECTION}/${ID}`;
  const staging = await stoppedBetweenRenames(fs, dir);
  await fs.remove(`${staging}/previous/meta.json`);
  const before = fs.snapshotTree("/");
  for (const dryRun of [true, false]) {
    const args = ["migrate", "--all", ...(dryRun ? ["--dry-run"] : []), "--json"];
    const { code, out } = await sessions(fs, args);
    assert.equal(code, 1, out);
    const { results } = JSON.parse(out);
    assert.equal(results.length, 1, out);
    assert.match(results[0].error, /previous copy damaged/, `dry run: ${dryRun}`);
  }
  assert.deepEqual(fs.snapshotTree("/"), before, "nothing was written");
});

test("sessions delete removes a session a damaged compaction holds, with what is kept of it", async () => {
  const fs = await legacyStore([user("hi"), assistant("yo")]);
  assert.equal((await sessions(fs, ["migrate", "--all"])).code, 0);
  const staging = await stoppedBetweenRenames(fs, `${COLLECTION}/${ID}`);
  await fs.remove(`${staging}/previous/meta.json`);
  const { code, out } = await sessions(fs, ["delete", ID, "--include-unarchived"]);
  assert.equal(code, 0, out);
  const left = (await fs.readDir(COLLECTION)).map((e) => e.name);
  assert.deepEqual(left.filter((name) => name.includes(ID)), [], left.join(", "));
});

for (const place of ["missing", "an empty directory"] as const) {
  test(`salvage and migrate <id> of a session a damaged compaction holds report the damage (its place ${place})`, async () => {
    const fs = await legacyStore([user("hi"), assistant("yo")]);
    assert.equal((await sessions(fs, ["migrate", "--all"])).code, 0);
    await fs.remove(LEGACY); // the backup removed: only the compaction's copies are left
    const staging = await stoppedBetweenRenames(fs, `${COLLECTION}/${ID}`);
    await fs.remove(`${staging}/previous/meta.json`);
    if (place === "an empty directory") await fs.mkdir(`${COLLECTION}/${ID}`);
    const before = fs.snapshotTree("/");
    for (const args of [["salvage", ID, "--to", "/rescue"], ["migrate", ID]]) {
      await assert.rejects(sessions(fs, args), (error: unknown) => {
        assert.ok(error instanceof SessionFormatError, `${args[0]}: ${error}`);
        assert.equal(error.file, `${staging}/previous`);
        return true;
      });
    }
    assert.deepEqual(fs.snapshotTree("/"), before, "nothing was written");
  });
}
