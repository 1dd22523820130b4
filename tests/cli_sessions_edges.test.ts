// The `sessions` commands at their edges: paths inside the store's private directories or outside
// the named collection, links at a legacy file's or a collection's name, copies interrupted deletes
// staged, faults while looking, usage errors and help, and what listings, verify and cleanup say
// of what they cannot read. Each refusal and each read changes nothing on disk.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { type CliRun, runMemoryCli, shownRows, usageError } from "./_cli_io.ts";
import { hookedFs } from "./_hooks.ts";
import { PermissionDenied } from "../src/port/errors.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { tempNameFor } from "../src/port/durable.ts";
import { conversation, imageOnly, legacySessionBytes } from "./_fixtures.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { SESSIONS_HELP } from "../src/cli/sessions.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const ROOT = `${AGENT}/sessions`;
const COLLECTION = `${ROOT}/${workspaceHash(CWD)}`;
const NOW = Date.parse("2026-03-01T00:00:00Z");
/** A session id of a legacy file written by hand. */
const LEGACY = "0f0e0d0c-0b0a-4908-8706-050403020100";
/** Where session LEGACY's never-migrated file stands, in the collection of CWD. */
const LEGACY_FILE = `${COLLECTION}/${LEGACY}.jsonl`;
const DELETING = `${COLLECTION}/.delete-00000000-0000-4000-8000-000000000000`;

/** Runs `loop-sessions --data-dir AGENT sessions args` in CWD (on `fs`, or `through` it). */
function sessions(fs: MemoryFs, args: string[], through: FileSystem = fs): Promise<CliRun> {
  return runMemoryCli(fs, CWD, NOW, ["--data-dir", AGENT, "sessions", ...args], { fs: through });
}

/** A memory filesystem holding the directory CWD. */
async function withCwd(): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  return fs;
}

/** A new session of CWD saved with `messages` and closed, in AGENT's store as `options` say. */
async function saved(
  fs: MemoryFs,
  messages: Message[],
  options: { agentDir?: string; sessionDir?: string } = {},
): Promise<SessionManager> {
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => NOW, ...options });
  const session = await store.create(CWD);
  await session.commit(messages);
  await session.close();
  return session;
}

/** A store with one saved session in the collection of CWD. */
async function oneSession(): Promise<{ fs: MemoryFs; id: string; dir: string }> {
  const fs = await withCwd();
  const session = await saved(fs, conversation(2));
  return { fs, id: session.id, dir: session.getSessionPath() };
}

/** Session LEGACY's version-2 file, of one round. */
const legacyBytes = (): Uint8Array => legacySessionBytes(LEGACY, CWD, conversation(1));

/** Puts at LEGACY_FILE a link to a legacy file elsewhere. */
async function linkedLegacyFile(fs: MemoryFs): Promise<void> {
  await fs.writeFile("/elsewhere.jsonl", legacyBytes());
  await fs.symlink("/elsewhere.jsonl", LEGACY_FILE);
}

/** Stages at DELETING a delete of `ids` (set aside as `entries`) that did not commit. */
async function stagedDelete(fs: MemoryFs, ids: string[], entries: string[]): Promise<void> {
  await fs.mkdir(DELETING);
  await fs.writeFile(
    `${DELETING}/intent.json`,
    new TextEncoder().encode(
      JSON.stringify({ operation: "delete", ids, entries, archived: [], membersBefore: [] }) + "\n",
    ),
  );
}

test("a path inside a delete's or a compaction's private directory is refused, naming it", async () => {
  const { fs, id, dir } = await oneSession();
  // A delete that staged the session and did not commit, and a compaction's previous copy.
  await stagedDelete(fs, [id], [id]);
  await fs.rename(dir, `${DELETING}/${id}`);
  const other = await saved(fs, conversation(1));
  const staging = `${COLLECTION}/.staging-${other.id}-abcdef12`;
  await fs.mkdir(staging);
  await fs.rename(other.getSessionPath(), `${staging}/previous`);
  const before = fs.snapshotTree("/");
  for (
    const path of [`${DELETING}/${id}`, `${staging}/previous`, `${staging}/previous/meta.json`]
  ) {
    const shown = path.endsWith("meta.json") ? path.slice(0, -"/meta.json".length) : path;
    for (const args of [["show", path], ["history", path], ["verify", path], ["compact", path]]) {
      const run = await sessions(fs, args);
      assert.equal(run.code, 1, `${args.join(" ")}: ${run.out}${run.err}`);
      assert.equal(run.out, "");
      assert.equal(
        run.err,
        `error: Session path is inside a private staging directory: '${shown}'; name the ` +
          "session by its id or its collection path\n",
      );
    }
    const deleted = await sessions(fs, ["delete", "--include-unarchived", path]);
    assert.equal(deleted.code, 1, deleted.err);
    assert.match(deleted.err, /inside a private staging directory/);
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
  // By its id, each is the store's session, found where it is staged.
  for (const sessionId of [id, other.id]) {
    assert.equal((await sessions(fs, ["show", sessionId])).code, 0);
  }
});

test("with --dir, a session path of another collection is refused, also when --dir does not exist", async () => {
  const { fs, dir } = await oneSession();
  await fs.mkdir(`${ROOT}/other`);
  const before = fs.snapshotTree("/");
  for (const explicit of [`${ROOT}/other`, `${ROOT}/missing`]) {
    for (const sub of ["archive", "restore", "delete"]) {
      const args = sub === "delete" ? [sub, "--include-unarchived"] : [sub];
      const run = await sessions(fs, [...args, "--dir", explicit, dir]);
      assert.equal(run.code, 2, `${sub} --dir ${explicit}: ${run.err}`);
      assert.equal(
        run.err,
        usageError(
          `'${dir}' is not in the collection '${explicit}'; nothing was changed (name a session ` +
            "by its id, or its collection with --dir)",
        ),
      );
    }
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a session under a dot-named directory of the sessions root is no collection's: never touched", async () => {
  const { fs, id } = await oneSession();
  // A directory of the sessions root whose name starts with '.' is private: not a collection.
  const hidden = `${ROOT}/.trash`;
  const session = await saved(fs, conversation(1), { sessionDir: hidden });
  const leftover = tempNameFor(`${hidden}/archive.json`);
  await fs.writeFile(leftover, new TextEncoder().encode("{"));
  const before = fs.snapshotTree("/");
  const target = session.getSessionPath();
  for (const sub of ["archive", "restore", "delete"]) {
    const args = sub === "delete" ? [sub, "--include-unarchived"] : [sub];
    const run = await sessions(fs, [...args, target]);
    assert.equal(run.code, 2, `${sub}: ${run.err}`);
    assert.match(run.err, /is not in a collection of the store/);
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
  // What goes over every collection leaves it out: listed, verified and cleaned are the others.
  const listed = await sessions(fs, ["list", "--all-workspaces", "--json"]);
  assert.equal(listed.code, 0, listed.err);
  assert.deepEqual(JSON.parse(listed.out).sessions.map((s: { id: string }) => s.id), [id]);
  const verified = await sessions(fs, ["verify", "--all", "--json"]);
  assert.equal(verified.code, 0, verified.out);
  assert.equal(JSON.parse(verified.out).length, 1);
  const cleaned = await sessions(fs, ["cleanup", "--all-workspaces", "--json"]);
  assert.equal(cleaned.code, 0, cleaned.err);
  assert.deepEqual(
    JSON.parse(cleaned.out).collections.map((c: { collection: string }) => c.collection),
    [COLLECTION],
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a session path whose never-migrated <id>.jsonl is a link is refused naming the link, never read", async () => {
  const { fs } = await oneSession();
  await linkedLegacyFile(fs);
  const before = fs.snapshotTree("/");
  const refusal = `error: Legacy session file is not a regular file (links are refused) ` +
    `(in '${LEGACY_FILE}')\n`;
  for (const sub of ["show", "history", "compact", "migrate"]) {
    const run = await sessions(fs, [sub, `${COLLECTION}/${LEGACY}`]);
    assert.equal(run.code, 1, `${sub}: ${run.out}${run.err}`);
    assert.equal(run.err, refusal, sub);
  }
  // verify reports it as a finding naming the link, as it does when given the file itself.
  const verified = await sessions(fs, ["verify", `${COLLECTION}/${LEGACY}`, "--json"]);
  assert.equal(verified.code, 1, verified.err);
  const [report] = JSON.parse(verified.out);
  assert.equal(report.ok, false);
  assert.equal(report.findings[0].file, LEGACY_FILE);
  assert.match(report.findings[0].message, /not a regular file/);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("compact refuses a legacy file not migrated yet, and migrate a session that has no legacy file", async () => {
  const { fs, dir } = await oneSession();
  await fs.writeFile(LEGACY_FILE, legacyBytes());
  const before = fs.snapshotTree("/");
  for (const target of [LEGACY, LEGACY_FILE]) {
    const run = await sessions(fs, ["compact", target]);
    assert.equal(run.code, 2, run.err);
    assert.equal(
      run.err,
      usageError(
        `'${LEGACY_FILE}' is a legacy version-2 file; migrate it first, then compact its directory`,
      ),
    );
  }
  const migrated = await sessions(fs, ["migrate", dir]);
  assert.equal(migrated.code, 2, migrated.out);
  assert.match(
    migrated.err,
    new RegExp(`^usage error: '${dir}' is not a legacy <id>\\.jsonl session file\\n`),
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a damaged legacy session is still the store's: delete removes it when asked by name", async () => {
  const { fs, id } = await oneSession();
  const torn = legacyBytes();
  await fs.writeFile(LEGACY_FILE, torn.subarray(0, torn.length - 5));
  // The listing reports it as damaged: it cannot be read, yet it is a session of the store.
  const listed = await sessions(fs, ["list", "--json"]);
  assert.equal(listed.code, 1);
  const failures = JSON.parse(listed.out).failures as { path: string }[];
  assert.deepEqual(failures.map((f) => f.path), [LEGACY_FILE]);
  const refused = await sessions(fs, ["delete", LEGACY]);
  assert.equal(refused.code, 1);
  assert.match(refused.err, /not archived/);
  const deleted = await sessions(fs, ["delete", "--include-unarchived", LEGACY]);
  assert.equal(deleted.code, 0, deleted.err);
  assert.equal(deleted.out, `deleted ${LEGACY}\n`);
  assert.equal(fs.snapshotTree(COLLECTION)[LEGACY_FILE], undefined);
  assert.equal((await sessions(fs, ["show", id])).code, 0);
});

/**
 * `fs` whose sessions root lists one more collection, `c\uFFFD`, than is there by that name (a
 * name the runtime decodes lossily, not valid UTF-8).
 */
function withLossyCollection(fs: MemoryFs): FileSystem {
  return new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== "readDir") return typeof value === "function" ? value.bind(target) : value;
      return async (path: string) => {
        const entries = await fs.readDir(path);
        return path === ROOT ? [...entries, { name: "c\uFFFD", kind: "directory" }] : entries;
      };
    },
  });
}

test("a collection listed by a name it cannot be read by is said by list and skipped by cleanup", async () => {
  const { fs, id } = await oneSession();
  const lossy = `${ROOT}/c\uFFFD`;
  const before = fs.snapshotTree("/");
  const listed = await sessions(fs, ["list", "--all-workspaces"], withLossyCollection(fs));
  assert.equal(listed.code, 1);
  assert.match(listed.out, new RegExp(`^${id} `, "m"));
  assert.equal(
    listed.err,
    `error: Collection directory cannot be read by the name it is listed under: '${lossy}'\n`,
  );
  const cleaned = await sessions(fs, ["cleanup", "--all-workspaces"], withLossyCollection(fs));
  assert.equal(cleaned.code, 1, cleaned.err);
  assert.equal(
    cleaned.out,
    `${COLLECTION}: nothing to do\n` +
      `${lossy}: skipped: it cannot be read by the name it is listed under\n`,
  );
  const json = await sessions(
    fs,
    ["cleanup", "--all-workspaces", "--json"],
    withLossyCollection(fs),
  );
  assert.equal(json.code, 1);
  assert.deepEqual(JSON.parse(json.out).skipped, [{
    collection: lossy,
    reason: "it cannot be read by the name it is listed under",
  }]);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a session path in a collection that does not exist says the path does not exist", async () => {
  const { fs } = await oneSession();
  const path = `${ROOT}/missing/${LEGACY}`;
  for (const sub of ["show", "verify"]) {
    const run = await sessions(fs, [sub, path]);
    assert.equal(run.code, 1, run.out);
    assert.equal(run.err, `error: No session at '${path}': the path does not exist\n`);
  }
});

/** `fs` on which every call `name` of `path` fails from its `nth` call on (permission denied). */
function denied(fs: MemoryFs, name: string, path: string, nth = 1): FileSystem {
  let calls = 0;
  return hookedFs(fs, {
    before(method, args) {
      if (method === name && args[0] === path && ++calls >= nth) {
        throw new PermissionDenied(method, path);
      }
    },
  });
}

interface Report {
  readonly dir: string;
  readonly ok: boolean;
  readonly findings: { severity: string; kind: string; message: string; file: string }[];
}

test("verify --all reports a link at a legacy file's name it cannot look at, at any look, beside the rest", async () => {
  const { fs, dir } = await oneSession();
  await linkedLegacyFile(fs);
  const before = fs.snapshotTree("/");
  // The name is looked at several times (the listing's answer, the lookup, the report): a fault
  // at any of them is the file's finding, never the end of the command.
  for (const nth of [1, 2, 3]) {
    const refused = denied(fs, "lstat", LEGACY_FILE, nth);
    const run = await sessions(fs, ["verify", "--all", "--json"], refused);
    assert.equal(run.code, 1, `${nth}: ${run.err}`);
    const reports = JSON.parse(run.out) as Report[];
    // Reported under the session's name (or the file's), naming the file it could not look at.
    assert.deepEqual(reports.map((r) => r.ok).sort(), [false, true]);
    assert.equal(reports.find((r) => r.ok)?.dir, dir);
    const failed = reports.find((r) => !r.ok)!;
    assert(failed.dir.startsWith(`${COLLECTION}/${LEGACY}`), failed.dir);
    const [finding] = failed.findings;
    assert.equal(finding?.file, LEGACY_FILE);
    assert.match(finding?.message ?? "", /^Permission denied: lstat /);
  }
  // Without the fault, the link is the finding.
  const plain = await sessions(fs, ["verify", "--all", "--json"]);
  const linked = (JSON.parse(plain.out) as Report[]).find((report) => !report.ok);
  assert.match(linked?.findings[0]?.message ?? "", /not a regular file/);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("verify --all keeps a corruption report when the second look at the session fails", async () => {
  const { fs, dir } = await oneSession();
  const healthy = await saved(fs, conversation(1));
  const log = await fs.readFile(`${dir}/messages.jsonl`);
  log[5] = log[5]! ^ 1;
  await fs.writeFile(`${dir}/messages.jsonl`, log);
  const before = fs.snapshotTree("/");
  // A corrupt session is looked at again (it may have moved meanwhile); that look cannot be made.
  const run = await sessions(
    fs,
    ["verify", "--all", "--json"],
    denied(fs, "lstat", `${dir}/index.json`),
  );
  assert.equal(run.code, 1, run.err);
  const reports = JSON.parse(run.out) as Report[];
  assert.deepEqual(
    reports.map((r) => [r.dir, r.ok]).sort(),
    [[dir, false], [healthy.getSessionPath(), true]].sort(),
  );
  const corrupt = reports.find((r) => r.dir === dir)!;
  assert.equal(corrupt.findings[0]?.file, `${dir}/messages.jsonl`);
  assert.match(corrupt.findings[0]?.message ?? "", /hash/);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a command that is refused a file by its permissions says which, and how to fix it", async () => {
  const { fs, dir } = await oneSession();
  const before = fs.snapshotTree("/");
  const refused = denied(fs, "readDir", COLLECTION);
  for (const args of [["list", "--dir", COLLECTION], ["list"], ["show", dir]]) {
    const run = await sessions(fs, args, refused);
    assert.equal(run.code, 1, `${args.join(" ")}: ${run.out}`);
    assert.equal(run.out, "");
    assert.equal(
      run.err,
      `error: permission denied: ${COLLECTION}; check the file's owner and mode\n`,
      args.join(" "),
    );
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("sessions history shows a thinking block and an image as placeholders", async () => {
  const fs = await withCwd();
  const [question, answer] = conversation(1);
  const thought = {
    ...answer,
    content: [{ type: "thinking", thinking: "secret plan" }, { type: "text", text: "Done." }],
  } as Message;
  const session = await saved(fs, [question!, thought, imageOnly(), answer!]);
  const run = await sessions(fs, ["history", session.id]);
  assert.equal(run.code, 0, run.err);
  assert.equal(
    run.out,
    "messages 0..4 of 4\n" +
      `#0 user       ${(question!.content as string).trim()}\n` +
      "#1 assistant  [thinking] Done.\n" +
      "#2 user       [image]\n" +
      "#3 assistant  r0 answer\n",
  );
});

test("sessions show of a legacy file not migrated yet says it migrates on open, and writes nothing", async () => {
  const { fs } = await oneSession();
  await fs.writeFile(LEGACY_FILE, legacyBytes());
  const before = fs.snapshotTree("/");
  const run = await sessions(fs, ["show", LEGACY]);
  assert.equal(run.code, 0, run.err);
  const rows = shownRows(run.out);
  assert.equal(rows.get("path"), LEGACY_FILE);
  assert.equal(rows.get("generation"), "legacy version-2 file (migrates on open)");
  assert.equal(rows.get("committed"), "-");
  assert.equal(rows.get("messages"), "2 (1 from the user)");
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("sessions salvage says which metadata it dropped", async () => {
  const { fs } = await oneSession();
  const [header, ...lines] = new TextDecoder().decode(legacyBytes()).split("\n");
  // A header whose compactions are no array: the migration refuses it, salvage drops them.
  const damaged = JSON.stringify({ ...JSON.parse(header!), compactions: "zzz" });
  await fs.writeFile(LEGACY_FILE, new TextEncoder().encode([damaged, ...lines].join("\n")));
  const before = await fs.readFile(LEGACY_FILE);
  const run = await sessions(fs, ["salvage", LEGACY, "--to", COLLECTION]);
  assert.equal(run.code, 0, run.err);
  const [salvaged, dropped, end] = run.out.split("\n");
  assert.match(
    salvaged!,
    new RegExp(`^salvaged 2 message\\(s\\) into ${COLLECTION}/\\S+ \\(dropped 0\\)$`),
  );
  assert.equal(dropped, "dropped metadata: compactions");
  assert.equal(end, "");
  assert.deepEqual(await fs.readFile(LEGACY_FILE), before);
});

test("every sessions command prints its help with --help, whatever the data directory", async () => {
  const fs = await withCwd();
  const before = fs.snapshotTree("/");
  for (const [sub, help] of Object.entries(SESSIONS_HELP)) {
    for (const flag of ["--help", "-h"]) {
      const run = await sessions(fs, [sub, flag]);
      assert.deepEqual(run, { code: 0, out: `${help}\n`, err: "" }, `${sub} ${flag}`);
    }
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a sessions command given the wrong number of targets is a usage error", async () => {
  const { fs, id, dir } = await oneSession();
  const cases: [string[], string][] = [
    [["show"], "sessions show takes one <id|path>"],
    [["show", id, id], "sessions show takes one <id|path>"],
    [["history"], "sessions history takes one <id|path>"],
    [["history", id, dir], "sessions history takes one <id|path>"],
    [["verify"], "sessions verify takes one <id|path> or --all"],
    [["verify", id, id], "sessions verify takes one <id|path> or --all"],
    [["verify", "--all", id], "pass either <id|path> or --all"],
    [["migrate"], "sessions migrate takes one <path> or --all"],
    [["migrate", dir, dir], "sessions migrate takes one <path> or --all"],
    [["migrate", "--all", dir], "pass either <path> or --all"],
    [["archive"], "sessions archive takes at least one <id|path>"],
    [["restore", "--dir", COLLECTION], "sessions restore takes at least one <id|path>"],
    [["delete", "--include-unarchived"], "sessions delete takes at least one <id|path>"],
    [["compact"], "sessions compact takes one <id|path>"],
    [["compact", id, id], "sessions compact takes one <id|path>"],
    [["salvage", id], "sessions salvage takes one <id|path> and --to <collection dir>"],
    [["salvage", "--to", "/x"], "sessions salvage takes one <id|path> and --to <collection dir>"],
    [["list", CWD], "sessions list takes no positional arguments"],
    [["cleanup", COLLECTION], "sessions cleanup takes no positional arguments"],
    [["delete", id, "--dir="], "option '--dir' needs a value"],
    [["salvage", id, "--to="], "option '--to' needs a value"],
  ];
  const before = fs.snapshotTree("/");
  for (const [args, message] of cases) {
    const run = await sessions(fs, args);
    assert.deepEqual(run, { code: 2, out: "", err: usageError(message) }, args.join(" "));
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a data directory given as ~ is the home directory itself", async () => {
  const fs = await withCwd();
  const session = await saved(fs, conversation(1), { agentDir: "/home/user" });
  const env = (name: string) => (name === "HOME" ? "/home/user" : undefined);
  const args = ["--data-dir", "~", "sessions", "list", "--json"];
  const run = await runMemoryCli(fs, CWD, NOW, args, { env });
  assert.equal(run.code, 0, run.err);
  assert.deepEqual(JSON.parse(run.out).sessions.map((s: { id: string }) => s.id), [session.id]);
});

test("a store without a sessions directory has no sessions; a file in its place is an error", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(`${AGENT}`, { recursive: true });
  await fs.mkdir(CWD, { recursive: true });
  const everything: [string[], string][] = [
    [["list", "--all-workspaces"], "No sessions found.\n"],
    [["verify", "--all"], "No sessions found.\n"],
    [["migrate", "--all"], "No legacy sessions to migrate.\n"],
    [["cleanup", "--all-workspaces"], ""],
  ];
  for (const [args, out] of everything) {
    assert.deepEqual(await sessions(fs, args), { code: 0, out, err: "" }, args.join(" "));
  }
  // Something other than a directory there: said, never taken for an empty store.
  await fs.writeFile(`${ROOT}`, new TextEncoder().encode("not a directory"));
  const before = fs.snapshotTree("/");
  for (const [args] of everything) {
    const run = await sessions(fs, args);
    assert.equal(run.code, 1, args.join(" "));
    assert.equal(run.out, "", args.join(" "));
    assert.match(run.err, new RegExp(`^error: Not a directory: readDir '${ROOT}'\\n$`));
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a linked collection that cannot be looked at fails the command, never left out unsaid", async () => {
  const { fs } = await oneSession();
  await fs.mkdir("/disk2/collection", { recursive: true });
  const linked = `${ROOT}/linked`;
  await fs.symlink("/disk2/collection", linked);
  const refused = denied(fs, "stat", linked);
  const before = fs.snapshotTree("/");
  for (const args of [["list", "--all-workspaces"], ["verify", "--all"], ["migrate", "--all"]]) {
    const run = await sessions(fs, args, refused);
    assert.equal(run.code, 1, args.join(" "));
    assert.equal(run.out, "");
    assert.equal(run.err, `error: permission denied: ${linked}; check the file's owner and mode\n`);
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a session with no title is listed with an empty title", async () => {
  const fs = await withCwd();
  // An image is no text to take a fallback title from.
  const session = await saved(fs, [imageOnly()]);
  for (const scope of [[], ["--dir", COLLECTION]]) {
    const run = await sessions(fs, ["list", ...scope]);
    assert.equal(run.code, 0, run.err);
    assert.equal(
      run.out,
      "ID                                    UPDATED               MESSAGES  STATE  TITLE\n" +
        `${session.id}  2026-03-01 00:00:00Z  1         -\n`,
    );
  }
});

test("migrate --all leaves alone the backup an interrupted delete staged ahead of its directory", async () => {
  const fs = await withCwd();
  await fs.mkdir(COLLECTION, { recursive: true });
  await fs.writeFile(LEGACY_FILE, legacyBytes());
  assert.equal((await sessions(fs, ["migrate", LEGACY_FILE])).code, 0);
  // A delete that staged the session's legacy backup, and not yet its directory, then stopped.
  await stagedDelete(fs, [LEGACY], [`${LEGACY}.jsonl`, LEGACY]);
  await fs.rename(LEGACY_FILE, `${DELETING}/${LEGACY}.jsonl`);
  const before = fs.snapshotTree("/");
  for (const dry of [["--dry-run"], []]) {
    const run = await sessions(fs, ["migrate", "--all", ...dry]);
    assert.deepEqual(run, { code: 0, out: "No legacy sessions to migrate.\n", err: "" });
  }
  assert.deepEqual(fs.snapshotTree("/"), before);
  // The session is the migrated directory, in place.
  const shown = await sessions(fs, ["show", LEGACY, "--json"]);
  assert.equal(JSON.parse(shown.out).path, `${COLLECTION}/${LEGACY}`);
});

test("a session whose only copy an uncommitted delete staged is damaged: its damage is said, not 'no session'", async () => {
  const { fs, id, dir } = await oneSession();
  await stagedDelete(fs, [id], [id]);
  await fs.rename(dir, `${DELETING}/${id}`);
  await fs.remove(`${DELETING}/${id}/meta.json`);
  const before = fs.snapshotTree("/");
  const damage = new RegExp(
    `^error: meta\\.json is missing but index\\.json shows a save committed here; .*\\(in '` +
      `${DELETING}/${id}/meta\\.json'\\)\\n$`,
  );
  for (const target of [id, dir]) {
    for (const sub of ["show", "history", "verify"]) {
      const run = await sessions(fs, [sub, target]);
      assert.equal(run.code, 1, `${sub} ${target}: ${run.out}`);
      assert.match(run.err, damage, `${sub} ${target}`);
    }
  }
  const all = await sessions(fs, ["verify", "--all", "--json"]);
  assert.equal(all.code, 1);
  const [report] = JSON.parse(all.out) as Report[];
  assert.equal(report?.ok, false);
  assert.match(report?.findings[0]?.message ?? "", /meta\.json is missing/);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("verify --all verifies the legacy files an uncommitted delete staged, in one read of the collection", async () => {
  /** Reports and collection reads of verify --all over `count` legacy files a delete staged. */
  const staged = async (count: number): Promise<{ reports: Report[]; reads: number }> => {
    const { fs, dir } = await oneSession();
    const ids = Array.from(
      { length: count },
      (_, i) => `${i.toString(16).padStart(8, "0")}-3c1d-4a5b-9e6f-7a8b9c0d1e2f`,
    );
    await stagedDelete(fs, ids, ids.map((id) => `${id}.jsonl`));
    for (const id of ids) {
      await fs.writeFile(`${DELETING}/${id}.jsonl`, legacySessionBytes(id, CWD, conversation(1)));
    }
    let reads = 0;
    const counting = hookedFs(fs, {
      before(method, args) {
        if (method === "readDir" && args[0] === COLLECTION) reads++;
      },
    });
    const before = fs.snapshotTree("/");
    const run = await sessions(fs, ["verify", "--all", "--json"], counting);
    assert.equal(run.code, 0, run.err);
    assert.deepEqual(fs.snapshotTree("/"), before);
    const reports = JSON.parse(run.out) as Report[];
    assert.deepEqual(
      reports.map((r) => [r.dir, r.ok]).sort(),
      [[dir, true], ...ids.map((id) => [`${DELETING}/${id}.jsonl`, true])].sort(),
    );
    return { reports, reads };
  };
  const few = await staged(2);
  assert.equal((await staged(12)).reads, few.reads);
});

test("verify --all leaves a legacy file of another version alone, as listings skip it", async () => {
  const { fs, dir } = await oneSession();
  const text = new TextDecoder().decode(legacyBytes()).replace('"version":2', '"version":1');
  await fs.writeFile(LEGACY_FILE, new TextEncoder().encode(text));
  const before = fs.snapshotTree("/");
  const run = await sessions(fs, ["verify", "--all", "--json"]);
  assert.equal(run.code, 0, run.out);
  assert.deepEqual((JSON.parse(run.out) as Report[]).map((r) => [r.dir, r.ok]), [[dir, true]]);
  // Named, it is verified, and refused for its version.
  const named = await sessions(fs, ["verify", LEGACY_FILE, "--json"]);
  assert.equal(named.code, 1, named.out);
  const [report] = JSON.parse(named.out) as Report[];
  assert.equal(report?.findings[0]?.file, LEGACY_FILE);
  assert.match(report?.findings[0]?.message ?? "", /version/i);
  assert.deepEqual(fs.snapshotTree("/"), before);
});
