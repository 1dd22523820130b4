// Edges of the storage layer: index.json texts near the canonical form but not an index (never
// trusted, never a thrown TypeError), and the port's durable helpers meeting a file, a non-empty
// directory or a planted link where they would publish or create a directory, and a read that
// fails for another reason than a missing file.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as v from "valibot";
import { MemoryFs } from "../adapters/memory.ts";
import { ensurePrivateDir, readIfExists, stagedPublish } from "../src/port/durable.ts";
import { AlreadyExists, FsError, FsIoError } from "../src/port/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import { verifySession } from "../src/loop/verify.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { memoryStoreWithSession } from "./_fixtures.ts";
import { parseRoundIndexText, type RoundIndex, RoundIndexSchema } from "../src/loop/storage.ts";
import { hookedFs, withoutNoFollow } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const encoder = new TextEncoder();
const GENERATION = "a".repeat(64);
/** The canonical head of an index of two messages in 9 bytes, with one round. */
const HEAD = `{"format":"loop-session-index","version":1,"generation":"${GENERATION}",` +
  `"start":0,"bytes":9,"messageCount":2,"roundCount":1,`;

/** What readers take from an index: its counts, its title and each round's two numbers. */
function used(index: unknown): unknown {
  if (index === undefined) return undefined;
  const { generation, start, bytes, messageCount, fallbackTitle, rounds } = index as RoundIndex;
  return {
    generation,
    start,
    bytes,
    messageCount,
    fallbackTitle,
    rounds: rounds.map(({ messageIndex, byteOffset }) => ({ messageIndex, byteOffset })),
  };
}

/** What the index schema makes of `text`. */
function bySchema(text: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  const result = v.safeParse(RoundIndexSchema, value);
  return result.success ? used(result.output) : undefined;
}

test("index texts near the canonical form read as the index schema reads them, never as a throw", () => {
  const title = '{"text":"T","source":"fallback","messageIndices":[1]}';
  const samples = [
    // Rounds that are not objects: null, a number, an array.
    `${HEAD}"rounds":[null]}`,
    `${HEAD}"rounds":[5]}`,
    `${HEAD}"rounds":[[1,3]]}`,
    // A title the rounds key never follows.
    `${HEAD}"fallbackTitle":${title},"roundz":[{"messageIndex":1,"byteOffset":3}]}`,
    // A round with its keys in another order, or a key more: plain JSON, read by the schema.
    `${HEAD}"rounds":[{"byteOffset":3,"messageIndex":1}]}\n`,
    `${HEAD}"rounds":[{"messageIndex":1,"byteOffset":3,"x":0}]}\n`,
    `${HEAD}"fallbackTitle":${title},"rounds":[{"messageIndex":1,"byteOffset":3,"x":0}]}`,
    // A round whose first key only has the length of messageIndex, and one not closed.
    `${HEAD}"rounds":[{"messageIndez":1,"byteOffset":3}]}`,
    `${HEAD}"rounds":[{"messageIndex":1,"byteOffset":3 ]}`,
    // A byte offset that is not a count.
    `${HEAD}"rounds":[{"messageIndex":1,"byteOffset":-3}]}`,
    `${HEAD}"rounds":[{"messageIndex":1,"byteOffset":03}]}`,
  ];
  for (const text of samples) {
    let parsed: unknown;
    assert.doesNotThrow(() => (parsed = parseRoundIndexText(text)), text);
    assert.deepEqual(used(parsed), bySchema(text), text);
  }
  // The ones with a key more or in another order are indexes still, the others are not.
  assert.equal(parseRoundIndexText(samples[0] as string), undefined);
  assert.notEqual(parseRoundIndexText(samples[4] as string), undefined);
  assert.notEqual(parseRoundIndexText(samples[5] as string), undefined);
});

test("stagedPublish() never replaces a file or a non-empty directory at the final name", async () => {
  for (const occupant of ["file", "directory"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir("/c/.staging/sub", { recursive: true });
    await fs.writeFile("/c/.staging/sub/new.json", encoder.encode("new"));
    if (occupant === "file") await fs.writeFile("/c/final", encoder.encode("kept"));
    else {
      await fs.mkdir("/c/final");
      await fs.writeFile("/c/final/old.json", encoder.encode("kept"));
    }
    const before = fs.snapshotTree("/");
    await assert.rejects(stagedPublish(fs, "/c/.staging", "/c/final"), (error: unknown) => {
      assert.ok(error instanceof AlreadyExists, String(error));
      assert.equal(error.path, "/c/final");
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, occupant);
  }
  // An empty directory is replaced, as rename replaces one.
  const fs = new MemoryFs();
  await fs.mkdir("/c/.staging", { recursive: true });
  await fs.writeFile("/c/.staging/new.json", encoder.encode("new"));
  await fs.mkdir("/c/final");
  await stagedPublish(fs, "/c/.staging", "/c/final");
  assert.deepEqual(await fs.readFile("/c/final/new.json"), encoder.encode("new"));
});

test("ensurePrivateDir() refuses a link planted at its path just before its mkdir, creating nothing through it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/data", { recursive: true });
  await fs.mkdir("/elsewhere");
  let planted = false;
  const racing = hookedFs(fs, {
    async before(method, args) {
      if (method === "mkdir" && args[0] === "/data/sessions" && !planted) {
        planted = true;
        await fs.symlink("/elsewhere", "/data/sessions");
      }
    },
  });
  await assert.rejects(ensurePrivateDir(racing, "/data/sessions"), (error: unknown) => {
    assert.ok(error instanceof AlreadyExists, String(error));
    assert.equal(error.path, "/data/sessions");
    return true;
  });
  assert.ok(planted);
  assert.equal((await fs.lstat("/data/sessions")).kind, "symlink");
  assert.deepEqual(await fs.readDir("/elsewhere"), []);
  // A directory another process created there meanwhile is taken as found.
  const other = new MemoryFs();
  await other.mkdir("/data", { recursive: true });
  let created = false;
  const creating = hookedFs(other, {
    async before(method, args) {
      if (method === "mkdir" && args[0] === "/data/sessions" && !created) {
        created = true;
        await other.mkdir("/data/sessions");
      }
    },
  });
  assert.equal(await ensurePrivateDir(creating, "/data/sessions"), false);
  assert.equal((await other.lstat("/data/sessions")).kind, "directory");
});

test("ensurePrivateDir() refuses a file that appears at a missing parent meanwhile, creating nothing below it", async () => {
  // Before the parent is looked at, and between its check and its mkdir.
  for (const when of ["stat", "mkdir"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir("/data", { recursive: true });
    let planted = false;
    const racing = hookedFs(fs, {
      async before(method, args) {
        if (method === when && args[0] === "/data/sessions" && !planted) {
          planted = true;
          await fs.writeFile("/data/sessions", encoder.encode("not a directory"));
        }
      },
    });
    await assert.rejects(ensurePrivateDir(racing, "/data/sessions/abc"), (error: unknown) => {
      assert.ok(error instanceof AlreadyExists, `${when}: ${error}`);
      assert.equal(error.path, "/data/sessions");
      return true;
    });
    assert.ok(planted, when);
    assert.deepEqual(await fs.readFile("/data/sessions"), encoder.encode("not a directory"));
  }
});

test("readIfExists() reports a read that fails for another reason than a missing file", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/meta.json", encoder.encode("{}"));
  assert.equal(await readIfExists(fs, "/missing.json"), undefined);
  fs.failAt(1, { ops: ["readFile"] });
  await assert.rejects(readIfExists(fs, "/meta.json"), (error: unknown) => {
    assert.ok(error instanceof FsIoError, String(error));
    assert.equal(error.path, "/meta.json");
    return true;
  });
  fs.clearFaults();
  assert.deepEqual(await readIfExists(fs, "/meta.json"), encoder.encode("{}"));
});

/** A closed session of 800 rounds: long enough that its index.json is not read whole. */
async function longSession() {
  const { fs, session: dir, history } = await memoryStoreWithSession(AGENT, CWD, 800);
  return { fs, dir, history, index: `${dir}/index.json` };
}

/**
 * A saved session long enough that index.json is read by an open and a size check (not whole),
 * on a filesystem where its no-follow open finds it busy (a lease another process holds) and an
 * open that waits for the lease, unless `waits`, fails the test's way.
 */
async function busyIndex(waits: boolean) {
  const { fs, dir, history, index } = await longSession();
  const waited: string[] = [];
  const leased = hookedFs(fs, {
    before(method, args) {
      if (args[0] !== index) return;
      if (method === "openNoFollow") {
        throw new FsError("EAGAIN", "open", index, "Resource temporarily unavailable");
      }
      if (method === "open") {
        waited.push(index);
        if (!waits) throw new Error("waited for the lease on index.json");
      }
    },
  });
  return { fs, leased, dir, history, waited };
}

test("a fast listing does without an index.json a lease keeps busy, never waiting for it", async () => {
  const { fs, leased, dir, history, waited } = await busyIndex(false);
  const before = fs.snapshotTree("/");
  const listed = await new SessionStore({ fs: leased, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  });
  assert.deepEqual(waited, []);
  assert.equal(listed.length, 1);
  assert.equal(listed[0]?.path, `${dir}/meta.json`);
  assert.equal(listed[0]?.messageCount, history.length);
  assert.equal(listed[0]?.userMessageCount, 800);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("verifySession() waits for the lease on a busy index.json and checks it", async () => {
  const { fs, leased, dir, history, waited } = await busyIndex(true);
  const before = fs.snapshotTree("/");
  const report = await verifySession(leased, dir, { sha256: portableSha256 });
  assert.equal(waited.length, 1);
  assert.equal(report.ok, true);
  assert.deepEqual(report.findings, []);
  assert.equal(report.validMessages, history.length);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a fast listing uses a long index.json in another JSON layout without reading the log", async () => {
  const { fs, history, index } = await longSession();
  // The same index, pretty-printed: not the canonical form, so its head is not scanned.
  const value = parseRoundIndexText(new TextDecoder().decode(await fs.readFile(index)));
  assert.ok(value !== undefined);
  await fs.writeFile(index, encoder.encode(JSON.stringify(value, null, 1)));
  const logReads: string[] = [];
  const watched = hookedFs(fs, {
    before(method, args) {
      if (String(args[0]).endsWith("/messages.jsonl")) logReads.push(method);
    },
  });
  const listed = await new SessionStore({ fs: watched, agentDir: AGENT }).list(CWD, undefined, {
    fast: true,
  });
  assert.equal(listed[0]?.messageCount, history.length);
  assert.equal(listed[0]?.userMessageCount, 800);
  assert.equal(listed[0]?.title?.text, "r0 question ✓");
  assert.deepEqual(logReads, []);
});

test("verifySession() says a long index.json removed after the directory listing is missing, not unreadable", async () => {
  const { fs, dir, history, index } = await longSession();
  let removed = false;
  // On a port without no-follow opens the listing shows index.json a regular file, and it is
  // then opened by its path: it goes between the two.
  const racing = withoutNoFollow(hookedFs(fs, {
    async before(method, args) {
      if (method === "open" && args[0] === index && !removed) {
        removed = true;
        await fs.remove(index);
      }
    },
  }));
  const report = await verifySession(racing, dir, { sha256: portableSha256 });
  assert.ok(removed);
  assert.equal(report.ok, true);
  assert.equal(report.validMessages, history.length);
  assert.deepEqual(report.findings.map((finding) => [finding.kind, finding.message]), [
    ["index", "index.json is missing or malformed; the next page read by a writer rebuilds it"],
  ]);
});
