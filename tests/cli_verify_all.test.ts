// `sessions verify --all` verifies every session the store lists, where the store reads it, and
// reports what it cannot verify beside the rest instead of skipping it or stopping.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import { hookedFs } from "./_hooks.ts";
import type { CliIo } from "../src/cli/output.ts";
import { PermissionDenied } from "../src/port/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation, legacySessionBytes } from "./_fixtures.ts";
import { dirname } from "../src/port/path.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

interface Report {
  readonly dir: string;
  readonly ok: boolean;
  readonly findings: { severity: string; kind: string; message: string; file: string }[];
}

/** Runs `sessions verify --all --json`; returns its exit code, reports and stderr. */
async function verifyAll(io: CliIo): Promise<{ code: number; reports: Report[]; err: string }> {
  let out = "";
  let err = "";
  const code = await runCli(["--data-dir", AGENT, "sessions", "verify", "--all", "--json"], {
    ...io,
    out: (text) => void (out += text),
    err: (text) => void (err += text),
  });
  return { code, reports: out === "" ? [] : JSON.parse(out) as Report[], err };
}

async function saved(store: SessionStore, rounds = 1): Promise<{ id: string; dir: string }> {
  const session = await store.create(CWD);
  await session.commit(conversation(rounds));
  await session.close();
  return { id: session.id, dir: session.getSessionPath() };
}

test("verify --all verifies staged copies, reports a link at a session's name and legacy files", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const healthy = await saved(store);
  const compacted = await saved(store);
  const deleted = await saved(store, 2);
  const linked = await saved(store);
  const collection = dirname(healthy.dir);
  // A compaction interrupted between its two renames holds a copy that is damaged.
  const staging = `${collection}/.staging-${compacted.id}-abcdef12`;
  await fs.mkdir(staging);
  await fs.rename(compacted.dir, `${staging}/previous`);
  const log = await fs.readFile(`${staging}/previous/messages.jsonl`);
  log[5] = log[5]! ^ 1;
  await fs.writeFile(`${staging}/previous/messages.jsonl`, log);
  // A delete that staged a session but did not commit: it did not happen.
  const deleting = `${collection}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(deleting);
  await fs.writeFile(
    `${deleting}/intent.json`,
    new TextEncoder().encode(
      JSON.stringify({
        operation: "delete",
        ids: [deleted.id],
        entries: [deleted.id],
        archived: [],
        membersBefore: [],
      }) + "\n",
    ),
  );
  await fs.rename(deleted.dir, `${deleting}/${deleted.id}`);
  // A session folder replaced by a link to a copy elsewhere.
  await fs.rename(linked.dir, "/elsewhere");
  await fs.symlink("/elsewhere", linked.dir);
  // Legacy version-2 files, never migrated: one valid, one whose second line is not JSON.
  const legacyGood = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacyBad = "1b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  await fs.writeFile(
    `${collection}/${legacyGood}.jsonl`,
    legacySessionBytes(legacyGood, CWD, conversation(1)),
  );
  const torn = legacySessionBytes(legacyBad, CWD, conversation(1));
  await fs.writeFile(`${collection}/${legacyBad}.jsonl`, torn.subarray(0, torn.length - 5));
  const before = fs.snapshotTree("/");
  const { code, reports } = await verifyAll(memoryIo(fs, CWD, Date.now()).io);
  assert.equal(code, 1);
  const byDir = new Map(reports.map((r) => [r.dir, r]));
  assert.equal(byDir.get(healthy.dir)?.ok, true, JSON.stringify(reports));
  assert.equal(byDir.get(`${staging}/previous`)?.ok, false, JSON.stringify(reports));
  assert.equal(byDir.get(`${deleting}/${deleted.id}`)?.ok, true, JSON.stringify(reports));
  const link = byDir.get(linked.dir);
  assert.equal(link?.ok, false, JSON.stringify(reports));
  assert.equal(link?.findings[0]?.file, linked.dir);
  assert.match(link?.findings[0]?.message ?? "", /not a directory/);
  assert.equal(byDir.get(`${collection}/${legacyGood}.jsonl`)?.ok, true, JSON.stringify(reports));
  const bad = byDir.get(`${collection}/${legacyBad}.jsonl`);
  assert.equal(bad?.ok, false, JSON.stringify(reports));
  assert.equal(bad?.findings[0]?.file, `${collection}/${legacyBad}.jsonl`);
  assert.equal(reports.length, 6, JSON.stringify(reports.map((r) => r.dir)));
  // Reading only.
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("verify --all reports a link or a directory at a never-migrated legacy <id>.jsonl", async () => {
  for (const kind of ["link", "directory"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT });
    const healthy = await saved(store);
    const collection = dirname(healthy.dir);
    const id = "0f0e0d0c-0b0a-4908-8706-050403020100";
    const file = `${collection}/${id}.jsonl`;
    if (kind === "link") {
      // A link to a valid copy: never read through.
      await fs.writeFile("/elsewhere.jsonl", legacySessionBytes(id, CWD, conversation(1)));
      await fs.symlink("/elsewhere.jsonl", file);
    } else {
      await fs.mkdir(file);
    }
    const before = fs.snapshotTree("/");
    const { code, reports } = await verifyAll(memoryIo(fs, CWD, Date.now()).io);
    assert.equal(code, 1, kind);
    const byDir = new Map(reports.map((r) => [r.dir, r]));
    assert.equal(byDir.get(healthy.dir)?.ok, true, JSON.stringify(reports));
    const report = byDir.get(file);
    assert.equal(report?.ok, false, JSON.stringify(reports));
    assert.equal(report?.findings[0]?.kind, "file");
    assert.equal(report?.findings[0]?.file, file);
    assert.match(report?.findings[0]?.message ?? "", /not a regular file/);
    assert.equal(reports.length, 2, JSON.stringify(reports.map((r) => r.dir)));
    assert.deepEqual(fs.snapshotTree("/"), before);
  }
});

test("verify --all reports a session it cannot read beside the others and goes on", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const first = await saved(store);
  const denied = await saved(store);
  const last = await saved(store);
  const deniedLog = `${denied.dir}/messages.jsonl`;
  // A collection of another workspace whose directory cannot be listed.
  await fs.mkdir("/work/other", { recursive: true });
  const session = await store.create("/work/other");
  await session.commit(conversation(1));
  await session.close();
  const deniedCollection = dirname(session.getSessionPath());
  const io = {
    ...memoryIo(fs, CWD, Date.now()).io,
    fs: hookedFs(fs, {
      before: (method, args) => {
        if (args[0] === deniedLog && /^(open|read)/.test(method)) {
          throw new PermissionDenied(method, deniedLog);
        }
        if (args[0] === deniedCollection && method === "readDir") {
          throw new PermissionDenied(method, deniedCollection);
        }
      },
    }),
  };
  const { code, reports, err } = await verifyAll(io);
  assert.equal(code, 1, err);
  const byDir = new Map(reports.map((r) => [r.dir, r]));
  assert.equal(byDir.get(first.dir)?.ok, true, JSON.stringify(reports));
  assert.equal(byDir.get(last.dir)?.ok, true, JSON.stringify(reports));
  const failed = byDir.get(denied.dir);
  assert.equal(failed?.ok, false, JSON.stringify(reports));
  assert.equal(failed?.findings[0]?.file, deniedLog);
  assert.match(failed?.findings[0]?.message ?? "", /Permission denied/);
  const unlisted = byDir.get(deniedCollection);
  assert.equal(unlisted?.ok, false, JSON.stringify(reports));
  assert.equal(unlisted?.findings[0]?.file, deniedCollection);
  assert.equal(reports.length, 4);
  // In human output too: every session, the unreadable one as a finding naming its file.
  let out = "";
  const human = await runCli(["--data-dir", AGENT, "sessions", "verify", "--all"], {
    ...io,
    out: (text) => void (out += text),
    err: () => undefined,
  });
  assert.equal(human, 1);
  assert.match(out, new RegExp(`ok +${first.dir}`));
  assert.match(out, new RegExp(`ok +${last.dir}`));
  assert.match(out, new RegExp(`FAILED +${denied.dir}\\n.*Permission denied`));
});

test("verify --all reads each collection a fixed number of times, however many sessions it holds", async () => {
  /** How many times verify --all reads the collection of `count` sessions and `count` legacy files. */
  const collectionReads = async (count: number): Promise<number> => {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT });
    let collection = "";
    for (let i = 0; i < count; i++) collection = dirname((await saved(store)).dir);
    for (let i = 0; i < count; i++) {
      const id = `${i.toString(16).padStart(8, "0")}-3c1d-4a5b-9e6f-7a8b9c0d1e2f`;
      await fs.writeFile(`${collection}/${id}.jsonl`, legacySessionBytes(id, CWD, conversation(1)));
    }
    let reads = 0;
    const io = {
      ...memoryIo(fs, CWD, Date.now()).io,
      fs: hookedFs(fs, {
        before: (method, args) => {
          if (method === "readDir" && args[0] === collection) reads++;
        },
      }),
    };
    const { code, reports, err } = await verifyAll(io);
    assert.equal(code, 0, err);
    assert.equal(reports.length, 2 * count);
    assert.ok(reports.every((report) => report.ok), JSON.stringify(reports));
    return reads;
  };
  const few = await collectionReads(2);
  assert.equal(await collectionReads(20), few);
});

test("verify (one session and --all) reports a staged copy that holds another session's files", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const held = await saved(store);
  const other = await saved(store);
  const collection = dirname(held.dir);
  // A compaction interrupted between its renames holds the session's previous copy, which now
  // holds the other session's files (valid on their own).
  const staging = `${collection}/.staging-${held.id}-abcdef12`;
  await fs.mkdir(staging);
  await fs.rename(held.dir, `${staging}/previous`);
  for (const file of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.writeFile(`${staging}/previous/${file}`, await fs.readFile(`${other.dir}/${file}`));
  }
  const before = fs.snapshotTree("/");
  const { io } = memoryIo(fs, CWD, Date.now());
  const { code, reports } = await verifyAll(io);
  assert.equal(code, 1);
  const copy = reports.find((r) => r.dir === `${staging}/previous`);
  assert.equal(copy?.ok, false, JSON.stringify(reports));
  assert.ok(
    copy?.findings.some((f) =>
      f.kind === "meta" && f.file === `${staging}/previous/meta.json` && f.message.includes(held.id)
    ),
    JSON.stringify(copy?.findings),
  );
  let out = "";
  const one = await runCli(["--data-dir", AGENT, "sessions", "verify", held.id, "--json"], {
    ...io,
    out: (text) => void (out += text),
    err: () => undefined,
  });
  assert.equal(one, 1);
  assert.match(out, /is not the session's id/);
  assert.deepEqual(fs.snapshotTree("/"), before);
});
