// Edges of verification, compaction and backup removal: a cwd or an index.json that cannot be
// looked at, a meta.json that claims more lines than its committed range holds, a legacy backup
// that is not a regular file, and a damaged legacy line that trimming does not mend.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { CorruptSessionError, SessionFormatError } from "../src/loop/errors.ts";
import { salvageSession, verifySession } from "../src/loop/verify.ts";
import { readLegacySession } from "../src/loop/legacy.ts";
import { FsIoError, PermissionDenied } from "../src/port/errors.ts";
import type { Message } from "../src/loop/records/mod.ts";
import {
  assistant,
  conversation,
  legacySessionBytes,
  memoryStoreWithSession,
  user,
} from "./_fixtures.ts";
import { hookedFs } from "./_hooks.ts";
import type { FileSystem, OpenedFile } from "../src/port/fs.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const options = { sha256: portableSha256 };
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A closed session of `rounds` rounds in CWD's collection under AGENT. */
async function saved(rounds = 3) {
  const { fs, store, session: dir, history } = await memoryStoreWithSession(AGENT, CWD, rounds);
  return { fs, store, dir, history };
}

/** The second generation the tests of two generations commit. */
function nextGeneration(): Message[] {
  return [user("a new first question"), ...conversation(2, "n")];
}

/** A closed session of `rounds` rounds, then of `next` committed by a writer that reopened it. */
async function twoGenerations(next: Message[] = nextGeneration(), rounds = 2) {
  const { fs, store, dir } = await saved(rounds);
  const session = await store.open(dir);
  await session.commit(next);
  await session.close();
  return { fs, store, dir };
}

/** A memory filesystem holding CWD and its empty collection, and a legacy file's path there. */
async function legacyCollection(): Promise<{ fs: MemoryFs; legacy: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  return { fs, legacy: `${COLLECTION}/${ID}.jsonl` };
}

/** The lines of a legacy file of two rounds (its header first), to damage one. */
function legacyLines(): string[] {
  return decoder.decode(legacySessionBytes(ID, CWD, conversation(2))).split("\n");
}

test("verifySession() reports a cwd it may not look at as an error and still verifies the rest", async () => {
  const { fs, dir, history } = await saved();
  const denied = hookedFs(fs, {
    before(method, args) {
      if (method === "stat" && args[0] === CWD) throw new PermissionDenied("stat", CWD);
    },
  });
  const before = fs.snapshotTree("/");
  const report = await verifySession(denied, dir, options);
  assert.equal(report.ok, false);
  assert.equal(report.findings.length, 1);
  const [finding] = report.findings;
  assert.equal(finding?.severity, "error");
  assert.equal(finding?.kind, "cwd");
  assert.equal(finding?.file, `${dir}/meta.json`);
  assert.match(String(finding?.message), /^cwd cannot be checked: /);
  // The log was still read and found whole.
  assert.equal(report.validMessages, history.length);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("verifySession() warns about an index.json it cannot read and finds the session otherwise whole", async () => {
  const { fs, dir, history } = await saved();
  const index = `${dir}/index.json`;
  const failing = hookedFs(fs, {
    before(method, args) {
      const opening = method === "open" || method === "openNoFollow" ||
        method === "readFile" || method === "readFileNoFollow";
      if (opening && args[0] === index) {
        throw new FsIoError("EIO", "read", index, "input/output error");
      }
    },
  });
  const before = fs.snapshotTree("/");
  const report = await verifySession(failing, dir, options);
  assert.equal(report.ok, true);
  assert.equal(report.validMessages, history.length);
  assert.equal(report.findings.length, 1);
  const [finding] = report.findings;
  assert.equal(finding?.severity, "warning");
  assert.equal(finding?.kind, "index");
  assert.equal(finding?.file, index);
  // Said once, as unreadable: not also as missing or malformed.
  assert.match(String(finding?.message), /^index\.json cannot be read \(/);
  // Reading never repairs: the index stays as it was.
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("compaction refuses a meta.json that claims more lines than its committed range holds", async () => {
  // A second generation, so compaction has old bytes to drop.
  const { fs, store, dir } = await twoGenerations(nextGeneration(), 3);
  const metaPath = `${dir}/meta.json`;
  const meta = JSON.parse(decoder.decode(await fs.readFile(metaPath)));
  // The checksum and byte count still match the range: only the line count lies.
  meta.messageCount += 1;
  await fs.writeFile(metaPath, encoder.encode(JSON.stringify(meta)));
  const before = fs.snapshotTree("/");
  await assert.rejects(store.compact(dir), (error: unknown) => {
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.file, `${dir}/messages.jsonl`);
    assert.match(error.message, /holds \d+ complete lines but its metadata claims \d+/);
    return true;
  });
  // Nothing was rewritten, moved or left behind.
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("removeLegacyBackup() leaves alone a link or a directory at the backup's name, naming it", async () => {
  for (const kind of ["symlink", "directory"] as const) {
    const { fs, store, dir } = await saved();
    const id = dir.slice(dir.lastIndexOf("/") + 1);
    const backup = `${dir}.jsonl`;
    const target = "/elsewhere/precious.jsonl";
    await fs.mkdir("/elsewhere", { recursive: true });
    await fs.writeFile(target, legacySessionBytes(id, CWD, conversation(3)));
    if (kind === "symlink") await fs.symlink(target, backup);
    else await fs.mkdir(backup);
    const before = fs.snapshotTree("/");
    await assert.rejects(store.removeLegacyBackup(dir), (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, String(error));
      assert.equal(error.file, backup);
      assert.match(error.message, /not a regular file/);
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, kind);
  }
});

test("a legacy line with trailing whitespace that is still not JSON is refused, naming its message", async () => {
  const { fs, legacy } = await legacyCollection();
  const lines = legacyLines();
  // The second message, cut inside its JSON, then a carriage return and blanks.
  lines[2] = `${(lines[2] as string).slice(0, 20)}\r  `;
  await fs.writeFile(legacy, encoder.encode(lines.join("\n")));
  const store = new SessionStore({ fs, agentDir: AGENT });
  const before = fs.snapshotTree("/");
  await assert.rejects(store.open(legacy), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, legacy);
    assert.equal(error.path, "messages[1]");
    assert.match(error.message, /^Invalid JSON/);
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

/** A session of two generations whose index.json is gone, so compaction rebuilds the rounds. */
async function twoGenerationsWithoutIndex(next: Message[]) {
  const { fs, store, dir } = await twoGenerations(next);
  await fs.remove(`${dir}/index.json`);
  return { fs, store, dir };
}

test("compaction of a log whose user line was changed in place to unreadable content reports a checksum mismatch", async () => {
  const { fs, store, dir } = await twoGenerationsWithoutIndex(nextGeneration());
  const logPath = `${dir}/messages.jsonl`;
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  const log = await fs.readFile(logPath);
  // The committed range's first line, a user message, rewritten with content a title cannot be
  // read from, padded to the same length: every offset still falls on a line.
  const lineEnd = log.indexOf(10, meta.start);
  const length = lineEnd - meta.start;
  const stub = '{"role":"user","content":[null],"pad":"';
  const forged = encoder.encode(stub + "x".repeat(length - stub.length - 2) + '"}');
  assert.equal(forged.length, length);
  const damaged = log.slice();
  damaged.set(forged, meta.start);
  await fs.writeFile(logPath, damaged);
  const before = fs.snapshotTree("/");
  await assert.rejects(store.compact(dir), (error: unknown) => {
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.file, logPath);
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("compaction copies a committed line longer than its copy chunk whole, and pages read it back", async () => {
  // One user message of more than 4 MiB, so a line crosses the copy's chunk boundary.
  const long = user(`a long paste: ${"0123456789abcdef".repeat(300_000)}`);
  const next = [user("a new first question"), assistant("ok"), long, assistant("read it")];
  const { store, dir } = await twoGenerationsWithoutIndex(next);
  const result = await store.compact(dir);
  assert.equal(result.compacted, true);
  const reader = await store.open(dir, { readOnly: true });
  assert.deepEqual(reader.messages, next);
  const page = await reader.readHistory();
  assert.deepEqual(page.messages, next);
  assert.equal(reader.getHeader().title?.text, "a new first question");
  await reader.close();
});

test("a header-only read of a legacy file refuses a message line that is not an object with a role", async () => {
  for (const line of ["null", "5", '"text"', '{"content":"no role"}', '{"role":7}']) {
    const { fs, legacy } = await legacyCollection();
    const lines = legacyLines();
    lines[2] = line;
    await fs.writeFile(legacy, encoder.encode(lines.join("\n")));
    const before = fs.snapshotTree("/");
    await assert.rejects(readLegacySession(fs, legacy, { validate: false }), (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, `${line}: ${error}`);
      assert.equal(error.file, legacy);
      assert.equal(error.path, "messages[1]");
      assert.match(error.message, /expected an object with a role/);
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, line);
  }
});

test("removeLegacyBackup() removes the backup of a migrated file whose line held bytes that are not UTF-8", async () => {
  const { fs, legacy } = await legacyCollection();
  const bytes = legacySessionBytes(ID, CWD, [user("caf@ latte"), assistant("ok")]);
  // The `@` becomes a lone 0xE9 (Latin-1 é): not UTF-8, read as U+FFFD.
  bytes[bytes.indexOf(0x40)] = 0xe9;
  await fs.writeFile(legacy, bytes);
  const store = new SessionStore({ fs, agentDir: AGENT });
  const migrated = await store.open(legacy);
  const dir = migrated.getSessionPath();
  assert.equal((migrated.messages[0] as { content: string }).content, "caf\uFFFD latte");
  await migrated.close();
  const log = await fs.readFile(`${dir}/messages.jsonl`);
  // The log holds the line in canonical form: valid UTF-8.
  assert.equal(new TextDecoder("utf-8", { fatal: true }).decode(log).includes("\uFFFD"), true);
  assert.equal(await store.removeLegacyBackup(dir), true);
  await assert.rejects(fs.lstat(legacy));
  const reader = await store.open(dir, { readOnly: true });
  assert.equal(reader.messages.length, 2);
  await reader.close();
});

test("salvage writes the kept messages anew when the log is cut or removed after its scan", async () => {
  for (const change of ["cut", "removed"] as const) {
    const { fs, dir, history } = await saved(3);
    const logPath = `${dir}/messages.jsonl`;
    const log = await fs.readFile(logPath);
    // The last line's closing brace damaged: the messages before it are the valid prefix.
    const damaged = log.slice();
    damaged[damaged.length - 2] = 0x78; // "x"
    await fs.writeFile(logPath, damaged);
    let opens = 0;
    // After the scan read the log, before salvage opens it again to copy the kept lines.
    const racing = hookedFs(fs, {
      async before(method, args) {
        const opening = method === "open" || method === "openNoFollow";
        if (!opening || args[0] !== logPath || ++opens !== 2) return;
        if (change === "cut") await fs.writeFile(logPath, damaged.subarray(0, 10));
        else await fs.remove(logPath);
      },
    });
    const result = await salvageSession(racing, dir, { ...options, toCollection: "/rescue" });
    assert.equal(opens >= 2, true, change);
    assert.equal(result.kept, history.length - 1, change);
    const report = await verifySession(fs, result.dir, options);
    assert.equal(report.ok, true, `${change}: ${JSON.stringify(report.findings)}`);
    const store = new SessionStore({ fs, agentDir: AGENT });
    const reader = await store.open(result.dir, { readOnly: true });
    assert.deepEqual(reader.messages, history.slice(0, -1), change);
    await reader.close();
  }
});

test("verifySession() reports a log emptied after its open as damaged, and ends", async () => {
  const { fs, dir } = await saved(3);
  const logPath = `${dir}/messages.jsonl`;
  let reads = 0;
  // The log is emptied right after its open reported its size: every read then comes back
  // empty. A read count bounds the test should the reading never stop.
  const shrinking = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== "openNoFollow") return typeof value === "function" ? value.bind(target) : value;
      return async (path: string): Promise<OpenedFile> => {
        const opened = await target.openNoFollow(path);
        if (path !== logPath) return opened;
        await target.writeFile(logPath, new Uint8Array(0));
        const handle = opened.handle;
        return {
          info: opened.info,
          handle: new Proxy(handle, {
            get(h, name) {
              const method = Reflect.get(h, name, h);
              if (name !== "read") return typeof method === "function" ? method.bind(h) : method;
              return (at: number, length: number) => {
                if (++reads > 1000) throw new Error("the log is read again and again");
                return handle.read(at, length);
              };
            },
          }),
        };
      };
    },
  }) as FileSystem;
  const report = await verifySession(shrinking, dir, options);
  assert.ok(reads <= 1000);
  assert.equal(report.ok, false);
  // The bytes read (none) are not the committed ones, nor do they hold the committed messages.
  const errors = report.findings.filter((finding) => finding.severity === "error");
  assert.deepEqual(errors.map((finding) => finding.kind).sort(), ["checksum", "count"]);
  assert.equal(errors.find((finding) => finding.kind === "checksum")?.file, logPath);
});

test("removeLegacyBackup() keeps the backup when the session's log is gone by the time it is compared", async () => {
  const { fs, legacy } = await legacyCollection();
  const dir = `${COLLECTION}/${ID}`;
  await fs.writeFile(legacy, legacySessionBytes(ID, CWD, conversation(2)));
  await (await new SessionStore({ fs, agentDir: AGENT }).open(legacy)).close();
  const logPath = `${dir}/messages.jsonl`;
  let opens = 0;
  // After the directory was opened and validated, before its log is compared with the backup.
  const racing = hookedFs(fs, {
    async before(method, args) {
      const opening = method === "open" || method === "openNoFollow";
      if (opening && args[0] === logPath && ++opens === 2) await fs.rename(logPath, "/aside.jsonl");
    },
  });
  const backup = await fs.readFile(legacy);
  await assert.rejects(
    new SessionStore({ fs: racing, agentDir: AGENT }).removeLegacyBackup(dir),
    (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, String(error));
      assert.equal(error.file, legacy);
      assert.equal(error.path, "messages");
      return true;
    },
  );
  assert.ok(opens >= 2);
  // The backup is then the only copy of the history: kept as it was.
  assert.deepEqual(await fs.readFile(legacy), backup);
});

test("compaction that finds meta.json gone once it holds the session reports it lost, changing nothing", async () => {
  const { fs, dir } = await twoGenerations();
  const metaPath = `${dir}/meta.json`;
  const collection = dir.slice(0, dir.lastIndexOf("/"));
  let found: Record<string, string> | undefined;
  // After the store's checks of the session, when compaction lists the directory it holds.
  const racing = hookedFs(fs, {
    async before(method, args) {
      if (method === "readDir" && args[0] === dir && found === undefined) {
        await fs.rename(metaPath, "/aside-meta.json");
        found = fs.snapshotTree(collection);
      }
    },
  });
  await assert.rejects(
    new SessionStore({ fs: racing, agentDir: AGENT }).compact(dir),
    (error: unknown) => {
      // index.json shows a save committed here: the session is damaged, not missing.
      assert.ok(error instanceof CorruptSessionError, String(error));
      assert.equal(error.file, metaPath);
      return true;
    },
  );
  assert.ok(found !== undefined);
  // Nothing staged, moved or rewritten.
  assert.deepEqual(fs.snapshotTree(collection), found);
});
