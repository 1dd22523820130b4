import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runSessions } from "../src/cli/sessions.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import { hookedFs } from "./_hooks.ts";
import { PermissionDenied } from "../src/port/errors.ts";
import { tempNameFor } from "../src/port/durable.ts";
import type { CliIo } from "../src/cli/output.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { conversation, legacySessionBytes } from "./_fixtures.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { dirname } from "../src/port/path.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

/** Runs `sessions args` on `fs` at time `now`; returns its exit code and stdout. */
async function sessions(
  fs: MemoryFs,
  now: number,
  args: string[],
): Promise<{ code: number; out: string }> {
  const { io, out } = memoryIo(fs, CWD, now);
  return { code: await runSessions(io, args, AGENT), out: out() };
}

test("sessions list orders pinned sessions by latest pin, then the rest by newest activity", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const clock = { t: Date.parse("2026-03-01T00:00:00Z") };
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => clock.t });
  const ids: Record<string, string> = {};
  for (const name of ["a", "b", "c"]) {
    clock.t += 60_000;
    const session = await store.create(CWD);
    await session.commit(conversation(1, name));
    await session.close();
    ids[name] = session.id;
  }
  // a is pinned after b, but b was active later; c is unpinned and the most recent.
  for (const name of ["b", "a"]) {
    clock.t += 60_000;
    const opened = await store.open((await store.list(CWD)).find((s) => s.id === ids[name])!.path);
    await opened.setPinned(true);
    await opened.close();
  }
  const listed = await sessions(fs, clock.t, ["list", "--json"]);
  assert.equal(listed.code, 0);
  const order = JSON.parse(listed.out).sessions.map((s: { id: string }) => s.id);
  assert.deepEqual(order, [ids.a, ids.b, ids.c]);
  assert.deepEqual(
    order,
    (await store.list(CWD, undefined, { pinnedFirst: true })).map((s) => s.id),
  );
});

test("migrate --dry-run reports a legacy file the migration would refuse, and writes nothing", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const collection = `${AGENT}/sessions/${workspaceHash(CWD)}`;
  await fs.mkdir(collection, { recursive: true });
  const good = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const bad = "1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(`${collection}/${good}.jsonl`, legacySessionBytes(good, CWD, conversation(1)));
  const torn = legacySessionBytes(bad, CWD, conversation(1));
  await fs.writeFile(`${collection}/${bad}.jsonl`, torn.subarray(0, torn.length - 5));
  const before = fs.snapshotTree(AGENT);
  const dry = await sessions(fs, Date.now(), ["migrate", "--all", "--dry-run"]);
  assert.equal(dry.code, 1);
  assert.match(dry.out, new RegExp(`would migrate .*${good}\\.jsonl`));
  assert.match(dry.out, new RegExp(`failed +.*${bad}\\.jsonl`));
  assert.deepEqual(fs.snapshotTree(AGENT), before);
  // The migration itself agrees.
  const run = await sessions(fs, Date.now(), ["migrate", "--all"]);
  assert.equal(run.code, 1);
  assert.match(run.out, new RegExp(`^migrated .*${good}\\.jsonl`, "m"));
  assert.match(run.out, new RegExp(`failed +.*${bad}\\.jsonl`));
});

test("migrate --dry-run of a migrated file checks its published directory as the migration's open does", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const collection = `${AGENT}/sessions/${workspaceHash(CWD)}`;
  await fs.mkdir(collection, { recursive: true });
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const file = `${collection}/${id}.jsonl`;
  await fs.writeFile(file, legacySessionBytes(id, CWD, conversation(1)));
  const migrated = await sessions(fs, Date.now(), ["migrate", file]);
  assert.equal(migrated.code, 0, migrated.out);
  const healthy = await sessions(fs, Date.now(), ["migrate", file, "--dry-run"]);
  assert.equal(healthy.code, 0, healthy.out);
  assert.match(healthy.out, /^already migrated /m);
  // The published directory is damaged: the dry run says what the real run will.
  await fs.writeFile(`${collection}/${id}/meta.json`, new TextEncoder().encode("{not json"));
  const before = fs.snapshotTree(AGENT);
  const dry = await sessions(fs, Date.now(), ["migrate", file, "--dry-run"]);
  assert.equal(dry.code, 1, dry.out);
  assert.match(dry.out, new RegExp(`^failed +.*${id}\\.jsonl: .*meta\\.json`, "m"));
  assert.deepEqual(fs.snapshotTree(AGENT), before);
  const run = await sessions(fs, Date.now(), ["migrate", file]);
  assert.equal(run.code, 1, run.out);
  assert.match(run.out, new RegExp(`^failed +.*${id}\\.jsonl`, "m"));
});

test("migrate --all skips the backup of a session whose directory an interrupted compaction staged", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const collection = `${AGENT}/sessions/${workspaceHash(CWD)}`;
  await fs.mkdir(collection, { recursive: true });
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(`${collection}/${id}.jsonl`, legacySessionBytes(id, CWD, conversation(1)));
  assert.equal((await sessions(fs, Date.now(), ["migrate", `${collection}/${id}.jsonl`])).code, 0);
  // A compaction interrupted between its two renames holds the session's directory.
  await fs.mkdir(`${collection}/.staging-${id}-abcdef12`);
  await fs.rename(`${collection}/${id}`, `${collection}/.staging-${id}-abcdef12/previous`);
  // Still the store's session, found where it is staged.
  const listed = await new SessionStore({ fs, agentDir: AGENT }).list(CWD);
  assert.deepEqual(listed.map((s) => [s.id, s.storage]), [[id, "directory"]]);
  const before = fs.snapshotTree(AGENT);
  for (const args of [["migrate", "--all", "--dry-run"], ["migrate", "--all"]]) {
    const run = await sessions(fs, Date.now(), args);
    assert.equal(run.code, 0, run.out);
    assert.equal(run.out, "No legacy sessions to migrate.\n");
  }
  assert.deepEqual(fs.snapshotTree(AGENT), before);
});

test("sessions salvage of a session an interrupted compaction holds works into its own collection and another", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = conversation(3);
  await session.commit(history);
  await session.commit([{ ...history[0]!, content: "edited" } as Message, ...history.slice(1)]);
  await session.close();
  const dir = session.getSessionPath();
  fs.syncAll();
  // A compaction that crashed right after moving the session to its previous directory.
  const probe = fs.clone();
  probe.resetCounter();
  await new SessionStore({ fs: probe, agentDir: AGENT }).compact(dir);
  const n = probe.operationLog.find((r) => r.op === "rename" && r.to?.endsWith("/previous"))!
    .number;
  const running = fs.clone();
  running.resetCounter();
  running.crashAfter(n);
  await assert.rejects(new SessionStore({ fs: running, agentDir: AGENT }).compact(dir));
  const crashed = running.crash({ seed: 0, tailMode: "whole", extraJournal: "all" });
  await assert.rejects(crashed.lstat(dir));
  for (const to of [dirname(dir), "/rescue"]) {
    const copy = crashed.clone();
    const run = await sessions(copy, Date.now(), ["salvage", session.id, "--to", to, "--json"]);
    assert.equal(run.code, 0, `${to}: ${run.out}`);
    const salvaged = JSON.parse(run.out) as { dir: string; kept: number };
    const reopened = await new SessionStore({ fs: copy, agentDir: AGENT }).open(salvaged.dir, {
      readOnly: true,
    });
    assert.equal(reopened.messages.length, history.length, to);
    assert.equal(reopened.messages[0]?.content, "edited", to);
    await reopened.close();
  }
});

test("stored terminal escapes are printed as visible text, in human and JSON output alike", async () => {
  const fs = new MemoryFs();
  const cwd = "/work/evil\u001b[2J\u001b]0;PWNED\u0007dir";
  await fs.mkdir(cwd, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(cwd);
  const text = "Fix the \u001b[31mflaky\u001b[0m test \u009b2J \u202eevil";
  await session.commit([{ role: "user", content: text, timestamp: 1 }]);
  await session.close();
  const run = async (args: string[]) => {
    const { io, out } = memoryIo(fs, "/", Date.now());
    const code = await runCli(["--data-dir", AGENT, "sessions", ...args], io);
    return { code, out: out() };
  };
  // deno-lint-ignore no-control-regex
  const raw = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/;
  const history = await run(["history", session.id]);
  assert.equal(history.code, 0);
  assert.doesNotMatch(history.out, raw);
  assert.match(history.out, /Fix the \\u001b\[31mflaky\\u001b\[0m test \\u009b2J \\u202eevil/);
  const show = await run(["show", session.id]);
  assert.equal(show.code, 0);
  assert.doesNotMatch(show.out, raw);
  assert.match(show.out, /evil\\u001b\[2J\\u001b\]0;PWNED\\u0007dir/);
  // JSON keeps the values: the escapes are JSON's own.
  const json = await run(["history", session.id, "--json"]);
  assert.doesNotMatch(json.out, raw);
  assert.equal(JSON.parse(json.out).messages[0].content, text);
});

test("a data directory given with ~ is the home's, and a missing one is said, not taken for an empty store", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const run = async (args: string[]) => {
    const { io, out } = memoryIo(fs, CWD, Date.now());
    let err = "";
    const code = await runCli(args, { ...io, err: (text) => void (err += text) });
    return { code, out: out(), err };
  };
  // The memory filesystem's home is /home/user, where AGENT is.
  const listed = await run(["--data-dir=~/.loop", "sessions", "list", "--json"]);
  assert.equal(listed.code, 0, listed.err);
  assert.deepEqual(JSON.parse(listed.out).sessions.map((s: { id: string }) => s.id), [session.id]);
  assert.equal(listed.err, "");
  const missing = await run(["--data-dir", "/nowhere", "sessions", "list"]);
  assert.equal(missing.code, 0);
  assert.match(missing.err, /data directory '\/nowhere' does not exist/);
  const noCollection = await run(["--data-dir", AGENT, "sessions", "list", "--dir", "/nowhere"]);
  assert.equal(noCollection.code, 1);
  assert.match(noCollection.err, /Collection directory does not exist: '\/nowhere'/);
  // A session directory given as the collection is refused, not listed as holding no session.
  const sessionDir = dirname(session.getSessionFile());
  const ofSession = await run(["--data-dir", AGENT, "sessions", "list", "--dir", sessionDir]);
  assert.equal(ofSession.code, 1);
  assert.equal(ofSession.out, "");
  assert.match(ofSession.err, /is a session directory \(it holds meta\.json\), not a collection/);
  assert.ok(ofSession.err.includes(`--dir '${session.getSessionDir()}'`), ofSession.err);
});

test("the progress line keeps its own terminal controls while stored data is escaped", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  for (let i = 0; i < 2; i++) {
    const session = await store.create(CWD);
    await session.commit(conversation(1, `s${i}`));
    await session.close();
  }
  const { io } = memoryIo(fs, CWD, Date.now());
  let err = "";
  const code = await runCli(["--data-dir", AGENT, "sessions", "verify", "--all"], {
    ...io,
    errIsTerminal: true,
    err: (text) => void (err += text),
  });
  assert.equal(code, 0);
  assert.match(err, /\rverifying 1\/2/);
  assert.ok(err.endsWith("\r\u001b[K"), JSON.stringify(err));
  assert.doesNotMatch(err, /\\u001b/);
});

test("sessions show writes a stored line feed, carriage return or tab as an escape, never as a row", async () => {
  const fs = new MemoryFs();
  const cwd = "/work/two\nlines\tdir";
  await fs.mkdir(cwd, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(cwd);
  await session.commit(conversation(1));
  // Written by a host (or another program) into the header; valid for the library.
  const model = { provider: "acme", id: "m1\narchived    true\rpinned      yes" };
  await session.setModel(model);
  await session.close();
  const run = async (args: string[]) => {
    const { io, out } = memoryIo(fs, "/", Date.now());
    const code = await runCli(["--data-dir", AGENT, "sessions", ...args], io);
    return { code, out: out() };
  };
  const show = await run(["show", session.id]);
  assert.equal(show.code, 0);
  assert.doesNotMatch(show.out, /[\r\t]/);
  const lines = show.out.trimEnd().split("\n");
  assert.deepEqual(lines.map((line) => line.split(" ")[0]), [
    "id",
    "path",
    "cwd",
    "title",
    "created",
    "updated",
    "model",
    "permission",
    "messages",
    "generation",
    "committed",
    "unread",
    "pinned",
    "archived",
  ]);
  assert(lines.includes("cwd         /work/two\\u000alines\\u0009dir"), show.out);
  assert(
    lines.includes("model       acme/m1\\u000aarchived    true\\u000dpinned      yes"),
    show.out,
  );
  // JSON keeps the values.
  const json = JSON.parse((await run(["show", session.id, "--json"])).out);
  assert.equal(json.header.cwd, cwd);
  assert.equal(json.header.model.id, model.id);
});

test("sessions delete of a session that is not archived names --include-unarchived, not the API's option", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const run = async (io: CliIo) => {
    let err = "";
    const code = await runCli(
      ["--data-dir", AGENT, "sessions", "delete", session.id],
      { ...io, err: (text) => void (err += text) },
    );
    return { code, err };
  };
  const refused = await run(memoryIo(fs, CWD, Date.now()).io);
  assert.equal(refused.code, 1);
  assert.match(
    refused.err,
    /^error: Session is not archived: .*--include-unarchived.*archive\.json/,
  );
  assert.doesNotMatch(refused.err, /archivedOnly/);
  // Archived when the command checks, restored by another process before the delete takes the
  // collection's lock: the library refuses it, and the command says so in its own words.
  await store.archive.set(CWD, [session.id], true);
  const archive = `${AGENT}/sessions/${workspaceHash(CWD)}/archive.json`;
  let restored = false;
  const hooked = hookedFs(fs, {
    before: async (_method, args) => {
      if (!restored && String(args[0]).endsWith("/.collection.lock")) {
        restored = true;
        await fs.writeFile(archive, new TextEncoder().encode("[]\n"));
      }
    },
  });
  const raced = await run({ ...memoryIo(fs, CWD, Date.now()).io, fs: hooked });
  assert(restored, "the collection lock was taken");
  assert.equal(raced.code, 1);
  assert.match(raced.err, /^error: Session is not archived: .*--include-unarchived/);
  assert.doesNotMatch(raced.err, /archivedOnly/);
  assert.equal((await store.list(CWD)).length, 1, "nothing was deleted");
});

test("sessions compact --json has one shape: findings is always there, empty when none", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = conversation(2);
  await session.commit(history);
  // A rewrite leaves the earlier generation's bytes in messages.jsonl: something to compact.
  await session.commit([{ ...history[0]!, content: "edited" } as Message, ...history.slice(1)]);
  await session.close();
  const keys = (out: string) => Object.keys(JSON.parse(out)).sort();
  const compacted = await sessions(fs, Date.now(), ["compact", session.id, "--json"]);
  assert.equal(compacted.code, 0, compacted.out);
  assert.equal(JSON.parse(compacted.out).compacted, true);
  assert.deepEqual(JSON.parse(compacted.out).findings, []);
  const again = await sessions(fs, Date.now(), ["compact", session.id, "--json"]);
  assert.equal(again.code, 0, again.out);
  assert.equal(JSON.parse(again.out).compacted, false);
  assert.deepEqual(JSON.parse(again.out).findings, []);
  assert.deepEqual(keys(compacted.out), keys(again.out));
});

test("sessions salvage --to a private staging directory or into a session is refused in one line, writing nothing", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const dir = session.getSessionPath();
  const collection = dirname(dir);
  fs.syncAll();
  const before = fs.clone();
  for (const to of [`${collection}/.staging-rescue`, `${collection}/.delete-rescue`, dir]) {
    let err = "";
    const { io, out } = memoryIo(fs, CWD, Date.now());
    const code = await runCli(
      ["--data-dir", AGENT, "sessions", "salvage", session.id, "--to", to],
      { ...io, err: (text) => void (err += text) },
    );
    assert.equal(code, 1, `${to}: ${out()}`);
    assert.match(err, /^error: Salvage destination .* is not a collection: .*\n$/, to);
    assert.equal(err.split("\n").length, 2, err);
    assert.equal(out(), "", to);
  }
  assert.deepEqual(fs.snapshotTree(), before.snapshotTree());
});

test("sessions salvage --to a linked collection is refused however it is spelled (a trailing slash too), writing nothing through the link", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  await fs.mkdir("/real-rescue", { recursive: true });
  await fs.symlink("/real-rescue", "/rescue");
  await fs.symlink("/real-rescue", `${CWD}/rescue`);
  fs.syncAll();
  const before = fs.clone();
  for (const to of ["/rescue", "/rescue/", "/rescue//", "/rescue/.", "rescue/", "./rescue/"]) {
    let err = "";
    const { io, out } = memoryIo(fs, CWD, Date.now());
    const code = await runCli(
      ["--data-dir", AGENT, "sessions", "salvage", session.id, "--to", to],
      { ...io, err: (text) => void (err += text) },
    );
    assert.equal(code, 1, `${to}: ${out()}`);
    assert.match(
      err,
      /^error: Session collection path is not a directory \(symlinks are refused\)/,
      to,
    );
    assert.equal(out(), "", to);
    assert.deepEqual(await fs.readDir("/real-rescue"), [], to);
  }
  assert.deepEqual(fs.snapshotTree(), before.snapshotTree());
  // A real collection with a trailing slash: salvaged there, the path printed normalized.
  const { io, out } = memoryIo(fs, CWD, Date.now());
  assert.equal(
    await runCli(
      ["--data-dir", AGENT, "sessions", "salvage", session.id, "--to", "/ok/", "--json"],
      io,
    ),
    0,
  );
  const salvaged = JSON.parse(out()) as { dir: string; id: string; kept: number };
  assert.equal(salvaged.dir, `/ok/${salvaged.id}`);
  assert.equal(salvaged.kept, 2);
});

test("list --all-workspaces reports a collection it cannot read by its listed name, never hides it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  // A name the runtime decodes lossily (not valid UTF-8): listed, but nothing is there by it.
  const root = `${AGENT}/sessions`;
  const lossy = `${root}/c\uFFFD`;
  const withLossyName = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== "readDir") return typeof value === "function" ? value.bind(target) : value;
      return async (path: string) => {
        const entries = await fs.readDir(path);
        return path === root ? [...entries, { name: "c\uFFFD", kind: "directory" }] : entries;
      };
    },
  });
  const { io, out } = memoryIo(fs, CWD, Date.parse("2026-03-01T00:00:00Z"));
  let err = "";
  const code = await runSessions(
    { ...io, fs: withLossyName, err: (text) => void (err += text) },
    ["list", "--all-workspaces", "--json"],
    AGENT,
  );
  assert.equal(code, 1);
  const listed = JSON.parse(out());
  assert.deepEqual(listed.sessions.map((s: { id: string }) => s.id), [session.id]);
  assert.deepEqual(listed.failures.map((f: { path: string }) => f.path), [lossy]);
  assert.equal(err, "");
});

test("a bare meta.json is the session of the current directory", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const { io, out } = memoryIo(fs, session.getSessionPath(), Date.parse("2026-03-01T00:00:00Z"));
  assert.equal(await runSessions(io, ["verify", "meta.json", "--json"], AGENT), 0);
  assert.deepEqual(JSON.parse(out()).map((r: { dir: string }) => r.dir), [
    session.getSessionPath(),
  ]);
});

test("a delete interrupted past its commit point: its rerun says how to finish it, and cleanup does", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  await store.archive.set(CWD, [session.id], true);
  const now = Date.parse("2026-03-01T00:00:00Z");
  // The process ends (Ctrl-C) right after the delete's commit marker is in place.
  const interrupted = hookedFs(fs, {
    after: (method, args) => {
      if (method === "rename" && String(args[1]).endsWith("/committed")) {
        throw new Error("interrupted");
      }
    },
  });
  const first = memoryIo(fs, CWD, now);
  await assert.rejects(
    runSessions({ ...first.io, fs: interrupted }, ["delete", session.id], AGENT),
    /interrupted/,
  );
  const collection = `${AGENT}/sessions/${workspaceHash(CWD)}`;
  const staged = (await fs.readDir(collection)).filter((e) => e.name.startsWith(".delete-"));
  assert.equal(staged.length, 1);
  // The rerun finds the session gone, and says what finishes the delete.
  let err = "";
  const rerun = memoryIo(fs, CWD, now);
  const code = await runCli(["--data-dir", AGENT, "sessions", "delete", session.id], {
    ...rerun.io,
    err: (text) => void (err += text),
  });
  assert.equal(code, 1);
  assert.match(err, /if a delete of it was interrupted, 'sessions cleanup' finishes it/);
  // Cleanup of the current directory's workspace finishes it: nothing of the session is left.
  const cleaned = memoryIo(fs, CWD, now);
  assert.equal(await runSessions(cleaned.io, ["cleanup", "--json"], AGENT), 0);
  const report = JSON.parse(cleaned.out());
  assert.deepEqual(report.collections.map((c: { collection: string }) => c.collection), [
    collection,
  ]);
  assert.deepEqual(report.collections[0].finished, [`${collection}/${staged[0]?.name}`]);
  assert.deepEqual((await fs.readDir(collection)).map((e) => e.name), ["archive.json"]);
  // Nothing more to do: said as such.
  const again = memoryIo(fs, CWD, now);
  assert.equal(await runSessions(again.io, ["cleanup"], AGENT), 0);
  assert.equal(again.out(), `${collection}: nothing to do\n`);
});

test("cleanup --all-workspaces skips a collection it cannot read, says why, and cleans the others", async () => {
  const fs = new MemoryFs();
  const store = new SessionStore({ fs, agentDir: AGENT });
  const collections: string[] = [];
  for (const cwd of ["/work/a", "/work/b"]) {
    await fs.mkdir(cwd, { recursive: true });
    const session = await store.create(cwd);
    await session.commit(conversation(1));
    await session.close();
    collections.push(`${AGENT}/sessions/${workspaceHash(cwd)}`);
  }
  collections.sort();
  const [denied, other] = collections as [string, string];
  const leftovers = collections.map((c) => tempNameFor(`${c}/archive.json`));
  for (const file of leftovers) await fs.writeFile(file, new TextEncoder().encode("{"));
  const refusing = hookedFs(fs, {
    before(method, args) {
      if (method === "readDir" && args[0] === denied) throw new PermissionDenied(method, denied);
    },
  });
  const { io, out } = memoryIo(fs, "/work/a", Date.parse("2026-03-01T00:00:00Z"));
  const code = await runSessions(
    { ...io, fs: refusing },
    ["cleanup", "--all-workspaces", "--json"],
    AGENT,
  );
  assert.equal(code, 1);
  const report = JSON.parse(out());
  assert.deepEqual(report.collections.map((c: { collection: string }) => c.collection), [other]);
  assert.deepEqual(report.collections[0].removed, [leftovers[1]]);
  assert.deepEqual(report.skipped.map((s: { collection: string }) => s.collection), [denied]);
  assert.match(report.skipped[0].reason, /Permission denied/);
});
