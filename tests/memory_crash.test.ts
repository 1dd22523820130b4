import { test } from "node:test";
import assert from "node:assert/strict";
import {
  type CrashOptions,
  MemoryFs,
  type RecoveredAs,
  SimulatedCrash,
  type TailMode,
} from "../adapters/memory.ts";
import { FsIoError, NotFound, PermissionDenied } from "../src/port/errors.ts";
import {
  atomicReplace,
  beginReplace,
  durableAppend,
  ensureDirDurable,
  ensureFileDurable,
  ensurePrivateDir,
  stagedPublish,
  stageReplace,
  tightenPrivateDir,
  writeNewFile,
} from "../src/port/durable.ts";
import { dirname } from "../src/port/path.ts";
import type { FileSystem, MkdirOptions } from "../src/port/fs.ts";
import { repeatsEarlierCrashState } from "./_crash.ts";

const encoder = new TextEncoder();

function bytes(text: string): Uint8Array {
  return encoder.encode(text);
}

/** The bytes at `path`, or undefined when nothing is there. */
async function readOrNothing(fs: FileSystem, path: string): Promise<Uint8Array | undefined> {
  try {
    return await fs.readFile(path);
  } catch (error) {
    if (error instanceof NotFound) return undefined;
    throw error;
  }
}

/** Appends `data` to `path` through a fresh handle, optionally syncing it. */
async function append(
  fs: FileSystem,
  path: string,
  data: Uint8Array,
  sync: boolean,
): Promise<void> {
  const handle = await fs.open(path, { append: true, create: true });
  await handle.write(data);
  if (sync) await handle.sync();
  await handle.close();
}

/** The live state strictly as made durable: committed entries and synced bytes only. */
function durableState(fs: MemoryFs): Record<string, string> {
  return fs.crash({ tailMode: "none", extraJournal: "none" }).snapshotTree();
}

test("an unsynced write is lost and a synced one survives a crash", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/log", new Uint8Array(0));
  fs.syncAll();
  await append(fs, "/log", bytes("synced;"), true);
  await append(fs, "/log", bytes("unsynced"), false);
  const recovered = fs.crash({ seed: 7, tailMode: "none" });
  assert.deepEqual(await recovered.readFile("/log"), bytes("synced;"));
  assert.equal(recovered.crashReport?.files["/log"], "none");
});

test("closing a file syncs nothing", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/f", bytes("data"));
  await fs.syncDir("/");
  const recovered = fs.crash({ tailMode: "none", extraJournal: "none" });
  assert.deepEqual(await recovered.readFile("/f"), new Uint8Array(0));
});

test("a file created and synced whose directory entry was never synced is gone after a crash", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  fs.syncAll();
  const handle = await fs.open("/d/new", { createNew: true, write: true });
  await handle.write(bytes("content"));
  await handle.sync();
  await handle.close();
  const lost = fs.crash({ seed: 1, extraJournal: "none" });
  await assert.rejects(lost.stat("/d/new"), NotFound);
  assert.deepEqual(lost.snapshotTree(), { d: "dir 755" });

  // The entry was in the journal: when the journal commits it by itself, the synced data is there.
  const lucky = fs.crash({ seed: 1, extraJournal: "all" });
  assert.deepEqual(await lucky.readFile("/d/new"), bytes("content"));

  await fs.syncDir("/d");
  const kept = fs.crash({ seed: 1, extraJournal: "none", tailMode: "none" });
  assert.deepEqual(await kept.readFile("/d/new"), bytes("content"));
});

test("a rename without a directory sync may be lost, and syncing either parent keeps it", async () => {
  const setup = async (): Promise<MemoryFs> => {
    const fs = new MemoryFs();
    await fs.mkdir("/from");
    await fs.mkdir("/to");
    await fs.writeFile("/from/file", bytes("F"));
    fs.syncAll();
    await fs.rename("/from/file", "/to/file");
    return fs;
  };
  const unsynced = await setup();
  const lost = unsynced.crash({ extraJournal: "none" });
  assert.deepEqual(await lost.readFile("/from/file"), bytes("F"));
  await assert.rejects(lost.stat("/to/file"), NotFound);

  for (const parent of ["/from", "/to"]) {
    const fs = await setup();
    await fs.syncDir(parent);
    for (let seed = 0; seed < 5; seed++) {
      const recovered = fs.crash({ seed, extraJournal: "none" });
      assert.deepEqual(await recovered.readFile("/to/file"), bytes("F"), `syncDir(${parent})`);
      await assert.rejects(recovered.stat("/from/file"), NotFound);
    }
  }
});

test("syncDir() commits that directory's operations, not another directory's", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/a");
  await fs.mkdir("/b");
  fs.syncAll();
  await fs.writeFile("/a/first", bytes(""));
  await fs.writeFile("/b/second", bytes(""));
  await fs.writeFile("/a/third", bytes(""));
  await fs.syncDir("/b");
  assert.deepEqual(Object.keys(durableState(fs)), ["a", "b", "b/second"]);
  await fs.syncDir("/a");
  assert.deepEqual(Object.keys(durableState(fs)), ["a", "a/first", "a/third", "b", "b/second"]);
});

test("syncDir() commits what its operations depend on: a rename brings the create it moves", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/a");
  await fs.mkdir("/b");
  fs.syncAll();
  await fs.writeFile("/a/moved", bytes("m"));
  await fs.writeFile("/a/other", bytes("o"));
  await fs.rename("/a/moved", "/b/moved");
  await fs.syncDir("/b");
  // The rename touched /a too, so /a's earlier operations are in order before it.
  assert.deepEqual(Object.keys(durableState(fs)), ["a", "a/other", "b", "b/moved"]);
});

test("a new directory's entries need the parent synced too: syncing the directory alone is not enough", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/dir");
  await fs.syncDir("/dir");
  assert.deepEqual(durableState(fs), {});
  await fs.writeFile("/dir/f", bytes(""));
  await fs.syncDir("/dir");
  // The create is durable in /dir, but /dir's own entry is not: nothing is reachable.
  assert.deepEqual(durableState(fs), {});
  await fs.syncDir("/");
  assert.deepEqual(Object.keys(durableState(fs)), ["dir", "dir/f"]);
});

test("chmod() is journaled: an uncommitted mode change is lost, a committed one survives", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/f", bytes(""), { mode: 0o644 });
  fs.syncAll();
  await fs.chmod("/f", 0o600);
  assert.equal((await fs.crash({ extraJournal: "none" }).stat("/f")).mode, 0o644);
  assert.equal((await fs.crash({ extraJournal: "all" }).stat("/f")).mode, 0o600);
  // A directory's sync does not cover a file's inode; the file's own fsync does.
  await fs.syncDir("/");
  assert.equal((await fs.crash({ extraJournal: "none" }).stat("/f")).mode, 0o644);
  const handle = await fs.open("/f", { write: true });
  await handle.sync();
  await handle.close();
  assert.equal((await fs.crash({ extraJournal: "none" }).stat("/f")).mode, 0o600);
});

test("a chmod made durable by the file's fsync is not undone when its create is committed later", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  fs.syncAll();
  await fs.writeFile("/d/f", bytes("x"), { mode: 0o644 });
  await fs.chmod("/d/f", 0o600);
  const handle = await fs.open("/d/f", { write: true });
  await handle.sync();
  await handle.close();
  for (const seed of [0, 1, 2, 3]) {
    const recovered = fs.crash({ seed, extraJournal: "all" });
    assert.equal((await recovered.stat("/d/f")).mode, 0o600, `seed ${seed}`);
  }
  await fs.syncDir("/d");
  assert.equal((await fs.crash({ extraJournal: "none" }).stat("/d/f")).mode, 0o600);
});

test("syncDir() of a directory commits a chmod of that directory", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/private");
  fs.syncAll();
  await fs.chmod("/private", 0o700);
  assert.equal((await fs.crash({ extraJournal: "none" }).stat("/private")).mode, 0o755);
  await fs.syncDir("/private");
  assert.equal((await fs.crash({ extraJournal: "none" }).stat("/private")).mode, 0o700);
});

test("a crash replays a prefix of the uncommitted journal, and every prefix length occurs", async () => {
  const fs = new MemoryFs();
  const names = ["a", "b", "c", "d"];
  for (const name of names) await fs.writeFile(`/${name}`, bytes(name));
  const seen = new Set<number>();
  for (let seed = 0; seed < 200; seed++) {
    const recovered = fs.crash(seed);
    const present = (await recovered.readDir("/")).map((e) => e.name);
    assert.deepEqual(present, names.slice(0, present.length), `seed ${seed} replays a prefix`);
    assert.equal(recovered.crashReport?.journalReplayed, present.length);
    assert.equal(recovered.crashReport?.journalPending, 4);
    seen.add(present.length);
  }
  assert.deepEqual([...seen].sort(), [0, 1, 2, 3, 4]);
});

/** A file with 6 synced bytes and 10 unsynced bytes appended after them. */
async function tornFile(): Promise<{ fs: MemoryFs; durable: Uint8Array; live: Uint8Array }> {
  const fs = new MemoryFs();
  await append(fs, "/log", bytes("head;\n"), true);
  await fs.syncDir("/");
  await append(fs, "/log", bytes("tail-bytes"), false);
  return { fs, durable: bytes("head;\n"), live: bytes("head;\ntail-bytes") };
}

/** Asserts that `data` is what tail mode `mode` makes of the durable bytes and the live bytes. */
function assertTail(mode: RecoveredAs, data: Uint8Array, durable: Uint8Array, live: Uint8Array) {
  const tail = live.subarray(durable.length);
  const got = data.subarray(durable.length);
  if (mode !== "none") assert.deepEqual(data.subarray(0, durable.length), durable, "durable kept");
  switch (mode) {
    case "none":
      assert.deepEqual(data, durable);
      return;
    case "whole":
      assert.deepEqual(data, live);
      return;
    case "short":
      assert.ok(got.length > 0 && got.length < tail.length, `cut at ${got.length}`);
      assert.deepEqual(got, tail.subarray(0, got.length));
      return;
    case "zeros":
      assert.deepEqual(got, new Uint8Array(tail.length));
      return;
    case "garbage":
      assert.equal(got.length, tail.length);
      assert.notEqual(got[0], tail[0], "garbage never starts like the real tail");
      assert.notEqual(got[0], 0, "garbage never starts like zeros");
      return;
    default:
      assert.fail(`unexpected recovery ${mode}`);
  }
}

test("the torn tail comes back in each of its modes for some seed", async () => {
  const { fs, durable, live } = await tornFile();
  const seeds = new Map<RecoveredAs, number>();
  for (let seed = 0; seed < 500 && seeds.size < 5; seed++) {
    const recovered = fs.crash(seed);
    const mode = recovered.crashReport?.files["/log"];
    assert.ok(mode !== undefined, `seed ${seed}: the file survives (its entry was committed)`);
    assertTail(mode, await recovered.readFile("/log"), durable, live);
    if (!seeds.has(mode)) seeds.set(mode, seed);
  }
  assert.deepEqual([...seeds.keys()].sort(), ["garbage", "none", "short", "whole", "zeros"]);
});

test("a forced tail mode applies exactly", async () => {
  const { fs, durable, live } = await tornFile();
  const modes: TailMode[] = ["none", "whole", "short", "zeros", "garbage"];
  for (const tailMode of modes) {
    for (let seed = 0; seed < 20; seed++) {
      const recovered = fs.crash({ seed, tailMode });
      assert.equal(recovered.crashReport?.files["/log"], tailMode);
      assertTail(tailMode, await recovered.readFile("/log"), durable, live);
    }
  }
});

test("a short tail is often one byte of the tail or all of it but one", async () => {
  // A tail of 200 bytes: a cut of uniform length would be one byte once in 199 seeds.
  const fs = new MemoryFs();
  await append(fs, "/log", bytes("head;\n"), true);
  await fs.syncDir("/");
  await append(fs, "/log", bytes("t".repeat(200)), false);
  const durable = bytes("head;\n");
  const tail = 200;
  const cuts = new Map<number, number>();
  for (let seed = 0; seed < 40; seed++) {
    const data = await fs.crash({ seed, tailMode: "short" }).readFile("/log");
    const cut = data.length - durable.length;
    cuts.set(cut, (cuts.get(cut) ?? 0) + 1);
  }
  // Each edge about a quarter of the time: at least 4 times in 40 seeds.
  assert.ok((cuts.get(1) ?? 0) >= 4, JSON.stringify([...cuts]));
  assert.ok((cuts.get(tail - 1) ?? 0) >= 4, JSON.stringify([...cuts]));
  assert.ok(cuts.size >= 6, "lengths between the edges too");
});

test("garbage tails differ between seeds and are not the real bytes", async () => {
  const { fs, live } = await tornFile();
  const tails = new Set<string>();
  for (let seed = 0; seed < 20; seed++) {
    const data = await fs.crash({ seed, tailMode: "garbage" }).readFile("/log");
    assert.notDeepEqual(data, live);
    tails.add(data.join(","));
  }
  assert.ok(tails.size >= 19, `only ${tails.size} distinct garbage tails in 20 seeds`);
});

test("a file rewritten since its last sync comes back old, new, cut short or zeroed", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/meta", bytes("version-1"));
  fs.syncAll();
  const handle = await fs.open("/meta", { write: true });
  await handle.write(bytes("VERSION-2 longer"));
  await handle.close();
  const outcomes = new Map<string, string>();
  for (let seed = 0; seed < 50; seed++) {
    const recovered = fs.crash(seed);
    const as = recovered.crashReport?.files["/meta"] ?? "missing";
    const text = new TextDecoder().decode(await recovered.readFile("/meta"));
    if (as === "cut") {
      // Written in place from offset 0: anything from empty to one byte short of the new bytes.
      assert.ok("VERSION-2 longer".startsWith(text) && text.length < 16, JSON.stringify(text));
      outcomes.set(as, "a prefix");
    } else outcomes.set(as, text);
  }
  assert.deepEqual(Object.fromEntries(outcomes), {
    durable: "version-1",
    live: "VERSION-2 longer",
    cut: "a prefix",
    zeros: "\0".repeat(16),
  });
  assert.deepEqual(
    await fs.crash({ seed: 1, rewriteMode: "live" }).readFile("/meta"),
    bytes("VERSION-2 longer"),
  );
  assert.deepEqual(await fs.crash({ tailMode: "none" }).readFile("/meta"), bytes("version-1"));
});

test("a file truncated below its synced length counts as rewritten, not as a torn tail", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/f", bytes("0123456789"));
  fs.syncAll();
  const handle = await fs.open("/f", { write: true });
  await handle.truncate(4);
  await handle.write(bytes("ab"));
  await handle.close();
  assert.deepEqual(await fs.crash({ rewriteMode: "durable" }).readFile("/f"), bytes("0123456789"));
  assert.deepEqual(await fs.crash({ rewriteMode: "live" }).readFile("/f"), bytes("ab23"));
});

test("crash() is deterministic per seed and leaves the crashed filesystem unchanged", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  await append(fs, "/d/a", bytes("aaaa"), true);
  await fs.syncDir("/d");
  await append(fs, "/d/a", bytes("more-a"), false);
  await append(fs, "/d/b", bytes("bbbb"), false);
  await fs.rename("/d/b", "/d/c");
  const live = fs.snapshotTree();
  const outcomes = new Set<string>();
  for (let seed = 0; seed < 30; seed++) {
    const first = fs.crash(seed);
    const again = fs.crash(seed);
    assert.deepEqual(again.snapshotTree(), first.snapshotTree(), `seed ${seed}`);
    assert.deepEqual(again.crashReport, first.crashReport);
    outcomes.add(JSON.stringify(first.snapshotTree()));
  }
  assert.ok(outcomes.size > 3, `only ${outcomes.size} distinct outcomes`);
  assert.deepEqual(fs.snapshotTree(), live);
});

test("a recovered filesystem is fully durable: crashing it again changes nothing", async () => {
  const { fs } = await tornFile();
  await fs.writeFile("/pending", bytes("p"));
  for (let seed = 0; seed < 10; seed++) {
    const recovered = fs.crash(seed);
    const state = recovered.snapshotTree();
    assert.deepEqual(recovered.crash({ seed: seed + 100 }).snapshotTree(), state);
    assert.equal(recovered.operationCount, 0);
  }
});

test("a crash that keeps the whole journal and whole tails is a process crash: the live state", async () => {
  const { fs } = await tornFile();
  await fs.mkdir("/x/y", { recursive: true });
  await fs.writeFile("/x/y/z", bytes("z"));
  await fs.rename("/x/y", "/x/w");
  await fs.chmod("/x", 0o700);
  const recovered = fs.crash({ seed: 5, tailMode: "whole", extraJournal: "all" });
  assert.deepEqual(recovered.snapshotTree(), fs.snapshotTree());
});

test("syncAll() makes the whole live state durable", async () => {
  const { fs } = await tornFile();
  await fs.mkdir("/x");
  await fs.writeFile("/x/f", bytes("f"));
  fs.syncAll();
  for (let seed = 0; seed < 10; seed++) {
    const options: CrashOptions = { seed, tailMode: "garbage", extraJournal: "none" };
    assert.deepEqual(fs.crash(options).snapshotTree(), fs.snapshotTree());
  }
});

test("clone() is independent of the original in live state, durable state and journal", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  await fs.syncDir("/");
  await append(fs, "/d/f", bytes("synced"), true);
  await fs.syncDir("/d");
  await append(fs, "/d/f", bytes("+tail"), false);
  await fs.writeFile("/d/pending", bytes("p"));
  const copy = fs.clone();
  assert.deepEqual(copy.snapshotTree(), fs.snapshotTree());
  assert.deepEqual(durableState(copy), durableState(fs));

  await append(copy, "/d/f", bytes("+copy"), true);
  await copy.syncDir("/d");
  await copy.writeFile("/d/copy-only", bytes("c"));
  assert.equal(await readOrNothing(fs, "/d/copy-only"), undefined);
  assert.deepEqual(await fs.readFile("/d/f"), bytes("synced+tail"));
  assert.deepEqual(durableState(fs), { d: "dir 755", "d/f": 'file 644 "synced"' });
  assert.deepEqual(durableState(copy), {
    d: "dir 755",
    "d/f": 'file 644 "synced+tail+copy"',
    "d/pending": 'file 644 ""',
  });

  await fs.writeFile("/d/f", bytes("original changed"));
  assert.deepEqual(await copy.readFile("/d/f"), bytes("synced+tail+copy"));
});

test("clone() copies file bytes: an in-place write on either side stays on that side", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/f", bytes("abcdef"));
  await fs.syncDir("/");
  const copy = fs.clone();
  const handle = await fs.open("/f", { write: true });
  await handle.write(bytes("XY"));
  await handle.sync();
  await handle.close();
  const other = await copy.open("/f", { write: true });
  await other.write(bytes("Z"));
  await other.close();
  assert.deepEqual(await fs.readFile("/f"), bytes("XYcdef"));
  assert.deepEqual(await copy.readFile("/f"), bytes("Zbcdef"));
  assert.deepEqual(durableState(copy), { f: 'file 644 ""' });
});

test("clone() starts with a zero count and copies no faults or crash point", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  fs.failAt(fs.operationCount + 1, { persistent: true });
  const copy = fs.clone();
  assert.equal(copy.operationCount, 0);
  assert.deepEqual(copy.operationLog, []);
  await copy.stat("/d");
  await assert.rejects(fs.stat("/d"), FsIoError);
  fs.clearFaults();
  fs.crashAfter(fs.operationCount);
  const second = fs.clone();
  await second.stat("/d");
  await assert.rejects(fs.stat("/d"), SimulatedCrash);
});

test("failAt(n) fails exactly the n-th operation once, with no effect, and the next call succeeds", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d"); // operation 1
  fs.failAt(3, { error: "ENOSPC" });
  await fs.writeFile("/d/a", bytes("a")); // 2
  const error = await fs.writeFile("/d/b", bytes("b")).catch((e: unknown) => e); // 3
  assert.ok(error instanceof FsIoError);
  assert.equal(error.code, "ENOSPC");
  assert.equal(error.syscall, "writeFile");
  assert.equal(error.path, "/d/b");
  assert.equal(await readOrNothing(fs, "/d/b"), undefined); // 4
  await fs.writeFile("/d/b", bytes("b")); // 5
  assert.deepEqual(Object.keys(fs.snapshotTree()), ["d", "d/a", "d/b"]);
  assert.equal(fs.operationCount, 5);
});

test("a persistent fault fails its operation and every later one until cleared", async () => {
  const fs = new MemoryFs();
  fs.failAt(2, { persistent: true, error: "EACCES" });
  await fs.mkdir("/d");
  for (let i = 0; i < 3; i++) {
    await assert.rejects(fs.writeFile(`/d/${i}`, bytes("x")), PermissionDenied);
  }
  await assert.rejects(fs.stat("/d"), PermissionDenied);
  fs.clearFaults();
  await fs.writeFile("/d/ok", bytes("x"));
  assert.deepEqual(Object.keys(fs.snapshotTree()), ["d", "d/ok"]);
});

test("a fault filtered to some operations fails only those", async () => {
  const fs = new MemoryFs();
  fs.failAt(1, { ops: ["sync"], persistent: true });
  const handle = await fs.open("/f", { createNew: true, write: true });
  await handle.write(bytes("data"));
  await assert.rejects(handle.sync(), (e: unknown) => e instanceof FsIoError && e.code === "EIO");
  await assert.rejects(handle.sync(), (e: unknown) => e instanceof FsIoError && e.code === "EIO");
  await handle.close();
  await fs.syncDir("/");
  // The failed syncs made nothing durable.
  assert.deepEqual(durableState(fs), { f: 'file 644 ""' });

  const once = new MemoryFs();
  once.failAt(1, { ops: ["rename"] });
  await once.writeFile("/a", bytes("a"));
  await assert.rejects(once.rename("/a", "/b"), FsIoError);
  await once.rename("/a", "/b");
  assert.deepEqual(once.snapshotTree(), { b: 'file 644 "a"' });
});

/** A script touching every kind of operation, on a filesystem with a synced baseline. */
async function script(fs: FileSystem): Promise<void> {
  await fs.mkdir("/w/sub", { recursive: true });
  const handle = await fs.open("/w/log", { append: true, createNew: true });
  await handle.write(bytes("one;"));
  await handle.sync();
  await handle.write(bytes("two;"));
  await handle.truncate(6);
  await handle.stat();
  await handle.read(0, 4);
  await handle.close();
  await fs.syncDir("/w");
  await fs.writeFile("/w/sub/f", bytes("f"));
  await fs.chmod("/w/sub/f", 0o600);
  await fs.symlink("../log", "/w/sub/link");
  await fs.rename("/w/sub/f", "/w/g");
  await fs.utime("/w/g", 5);
  await fs.syncDir("/w/sub");
  await fs.readDir("/w");
  await fs.remove("/base/old");
  await fs.remove("/w/sub", { recursive: true });
  await fs.syncDir("/");
}

async function baseline(): Promise<MemoryFs> {
  const fs = new MemoryFs({ now: () => 1 });
  await fs.mkdir("/base");
  await fs.writeFile("/base/old", bytes("old"));
  fs.syncAll();
  return fs;
}

test("an injected fault at any operation of a script has no effect when no bytes land", async () => {
  const base = await baseline();
  let total = 0;
  for (let n = 1;; n++) {
    // The state after exactly n - 1 operations, as the reference.
    const reference = base.clone();
    reference.crashAfter(n - 1);
    await script(reference).catch((e: unknown) => assert.ok(e instanceof SimulatedCrash));
    const faulted = base.clone();
    // A failed write lands nothing with `landed: 0` (by default it lands a prefix).
    faulted.failAt(n, { error: "EIO", landed: 0 });
    const error = await script(faulted).then(() => undefined, (e: unknown) => e);
    if (error === undefined) {
      total = n - 1;
      break;
    }
    assert.ok(error instanceof FsIoError && error.code === "EIO", `operation ${n}`);
    const op = faulted.operationLog[n - 1]?.op;
    assert.deepEqual(faulted.snapshotTree(), reference.snapshotTree(), `live after ${op} ${n}`);
    assert.deepEqual(durableState(faulted), durableState(reference), `durable after ${op} ${n}`);
  }
  assert.equal(total, 20, "the script has 20 operations");
});

test("a crash right after a read recovers what a crash right after the operation before it does", async () => {
  // Each read between writes that are not yet durable: a skipped crash point (see
  // `repeatsEarlierCrashState`) must recover the very state of the point before it, every seed.
  const reads = async (fs: MemoryFs): Promise<void> => {
    await fs.readFile("/w/log");
    await fs.readFileNoFollow?.("/w/log");
    await fs.readDir("/w");
    await fs.stat("/w/log");
    await fs.lstat("/w/link");
    await fs.realPath("/w/link");
    await fs.readLink("/w/link");
    const opened = await fs.openNoFollow?.("/w/log");
    await opened?.handle.read(0, 3);
    await opened?.handle.stat();
    await opened?.handle.close();
  };
  const run = async (fs: MemoryFs): Promise<void> => {
    await fs.mkdir("/w");
    const handle = await fs.open("/w/log", { append: true, createNew: true });
    await handle.write(bytes("one;"));
    await fs.symlink("log", "/w/link");
    await reads(fs);
    await handle.sync();
    await handle.write(bytes("two;"));
    await fs.writeFile("/w/other", bytes("other"));
    await reads(fs);
    await fs.rename("/w/other", "/w/renamed");
    await reads(fs);
    await handle.close();
  };
  const base = await baseline();
  const states: Record<string, string>[][] = [];
  let skipped = 0;
  for (let n = 0;; n++) {
    const fs = base.clone();
    fs.crashAfter(n);
    await run(fs).catch((e: unknown) => assert.ok(e instanceof SimulatedCrash, String(e)));
    if (!fs.crashTriggered) break;
    states.push([0, 1, 2, 3, 7].map((seed) => fs.crash(seed).snapshotTree()));
    if (repeatsEarlierCrashState(fs, n)) {
      skipped++;
      assert.deepEqual(states[n], states[n - 1], `after ${fs.operationLog[n - 1]?.op} ${n}`);
    }
  }
  assert.ok(skipped >= 30, `only ${skipped} read crash points`);
});

test("crashAfter(n) lets exactly n operations run, then every call throws SimulatedCrash", async () => {
  const fs = new MemoryFs();
  fs.crashAfter(3);
  await fs.mkdir("/a");
  const handle = await fs.open("/a/f", { createNew: true, write: true });
  await handle.write(bytes("x"));
  assert.equal(fs.crashTriggered, false);
  const error = await handle.sync().catch((e: unknown) => e);
  assert.ok(error instanceof SimulatedCrash);
  assert.ok(error instanceof FsIoError);
  assert.equal(error.code, "ECRASH");
  assert.equal(fs.crashTriggered, true);
  await assert.rejects(handle.close(), SimulatedCrash);
  await assert.rejects(fs.stat("/a"), SimulatedCrash);
  assert.equal(fs.operationCount, 6);
  // The refused sync made nothing durable.
  const recovered = fs.crash({ extraJournal: "all", tailMode: "none" });
  assert.deepEqual(recovered.snapshotTree(), { a: "dir 755", "a/f": 'file 644 ""' });
});

test("a removed file stays durable until its removal is committed, and an orphan's sync is harmless", async () => {
  const fs = new MemoryFs();
  await append(fs, "/f", bytes("committed"), true);
  await fs.syncDir("/");
  const orphan = await fs.open("/f", { append: true });
  await fs.remove("/f");
  await orphan.write(bytes("+orphan"));
  await orphan.sync();
  // The unlink is not committed: the entry comes back, with the inode's synced bytes.
  const undone = fs.crash({ extraJournal: "none" });
  assert.deepEqual(await undone.readFile("/f"), bytes("committed+orphan"));
  await fs.syncDir("/");
  await orphan.write(bytes("+after"));
  await orphan.close();
  for (let seed = 0; seed < 5; seed++) assert.deepEqual(fs.crash(seed).snapshotTree(), {});
});

test("handles of the crashed filesystem do not reach the recovered one", async () => {
  const fs = new MemoryFs();
  const handle = await fs.open("/f", { createNew: true, write: true });
  await handle.write(bytes("a"));
  await handle.sync();
  fs.syncAll();
  const recovered = fs.crash(1);
  await handle.write(bytes("b"));
  await handle.sync();
  assert.deepEqual(await recovered.readFile("/f"), bytes("a"));
  assert.equal(recovered.operationCount, 1);
});

/** Runs `replace` under a crash after every operation; returns the seeds' outcomes per n. */
async function crashLoop(
  replace: (fs: FileSystem) => Promise<void>,
  check: (data: Uint8Array | undefined, n: number, seed: number, resolved: boolean) => void,
): Promise<number> {
  const base = new MemoryFs();
  await base.mkdir("/store");
  await base.writeFile("/store/meta.json", bytes("old contents"));
  base.syncAll();
  for (let n = 0;; n++) {
    const fs = base.clone();
    fs.crashAfter(n);
    let resolved = false;
    try {
      await replace(fs);
      resolved = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    for (let seed = 0; seed < 40; seed++) {
      check(await readOrNothing(fs.crash(seed), "/store/meta.json"), n, seed, resolved);
    }
    if (!fs.crashTriggered) return n;
  }
}

test("atomicReplace() under a crash at every operation leaves exactly the old or the new bytes", async () => {
  const outcomes = new Set<string>();
  const steps = await crashLoop(
    (fs) => atomicReplace(fs, "/store/meta.json", bytes("new contents, longer")),
    (data, n, seed, resolved) => {
      const text = data === undefined ? "<missing>" : new TextDecoder().decode(data);
      const allowed = resolved
        ? ["new contents, longer"]
        : ["old contents", "new contents, longer"];
      assert.ok(allowed.includes(text), `crash after ${n}, seed ${seed}: ${JSON.stringify(text)}`);
      outcomes.add(text);
    },
  );
  assert.equal(steps, 6, "open, write, sync, close, rename, syncDir");
  assert.deepEqual([...outcomes].sort(), ["new contents, longer", "old contents"]);
});

test("stageReplace() keeps the target old until publish; discard leaves only the old bytes", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/store");
  await fs.writeFile("/store/meta.json", bytes("old"));
  fs.syncAll();
  const names = async () => (await fs.readDir("/store")).map((entry) => entry.name);

  const kept = await stageReplace(fs, "/store/meta.json", bytes("new"));
  assert.equal(new TextDecoder().decode(await fs.readFile("/store/meta.json")), "old");
  assert.equal((await names()).length, 2, "the staged temp file sits beside the target");
  // Staged under full durability: a crash now loses no byte of it, and the target is still old.
  const crashed = fs.clone().crash({ seed: 3, tailMode: "none", extraJournal: "none" });
  assert.equal(new TextDecoder().decode(await crashed.readFile("/store/meta.json")), "old");
  await kept.publish();
  assert.equal(new TextDecoder().decode(await fs.readFile("/store/meta.json")), "new");
  assert.deepEqual(await names(), ["meta.json"]);
  await assert.rejects(kept.publish(), NotFound, "a staged replacement publishes once");

  const dropped = await stageReplace(fs, "/store/meta.json", bytes("newer"));
  await dropped.discard();
  await dropped.discard();
  assert.deepEqual(await names(), ["meta.json"]);
  assert.equal(new TextDecoder().decode(await fs.readFile("/store/meta.json")), "new");
  await assert.rejects(dropped.publish(), NotFound, "a discarded replacement cannot be published");
  assert.equal(new TextDecoder().decode(await fs.readFile("/store/meta.json")), "new");
});

test("stageReplace() removes its temp file when the write or sync fails", async () => {
  for (const op of ["write", "sync", "close"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir("/store");
    await fs.writeFile("/store/meta.json", bytes("old"));
    fs.failAt(fs.operationCount + 1, { ops: [op] });
    await assert.rejects(stageReplace(fs, "/store/meta.json", bytes("new")), FsIoError, op);
    fs.clearFaults();
    assert.deepEqual((await fs.readDir("/store")).map((entry) => entry.name), ["meta.json"], op);
  }
});

test("durableAppend() calls that race to create the file both append, and the entry is synced", async () => {
  for (const durability of ["full", "ordered"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir("/d");
    fs.syncAll();
    const results = await Promise.allSettled(
      ["a", "b", "c"].map((line) =>
        durableAppend(fs, "/d/events.jsonl", bytes(`${line}\n`), { lines: true, durability })
      ),
    );
    assert.deepEqual(results.map((result) => result.status), [
      "fulfilled",
      "fulfilled",
      "fulfilled",
    ]);
    const lines = new TextDecoder().decode(await fs.readFile("/d/events.jsonl")).split("\n");
    assert.deepEqual(lines.sort(), ["", "a", "b", "c"]);
    if (durability === "full") {
      // Every call resolved under full durability, so a power loss keeps all three.
      const recovered = fs.crash({ seed: 1, extraJournal: "none", tailMode: "none" });
      assert.deepEqual(
        await readOrNothing(recovered, "/d/events.jsonl"),
        await fs.readFile("/d/events.jsonl"),
      );
    }
  }
});

test("durableAppend() retries a failed directory sync on its filesystem, whatever another one did", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  fs.syncAll();
  const other = new MemoryFs();
  await other.mkdir("/d");
  // The append that creates the file fails at its directory sync.
  fs.failAt(fs.operationCount + 1, { ops: ["syncDir"] });
  await assert.rejects(durableAppend(fs, "/d/log", bytes("1\n")), FsIoError);
  // The same path on another filesystem is another file: it does not settle the first one's sync.
  await durableAppend(other, "/d/log", bytes("x\n"));
  await durableAppend(fs, "/d/log", bytes("2\n"));
  const recovered = fs.crash({ seed: 0, extraJournal: "none", tailMode: "none" });
  assert.deepEqual(await readOrNothing(recovered, "/d/log"), bytes("1\n2\n"));
});

test("durableAppend() after another process created the file and died before syncing its entry survives power loss", async () => {
  const baseline = new MemoryFs();
  await baseline.mkdir("/d");
  baseline.syncAll();
  for (let n = 0;; n++) {
    const fs = baseline.clone();
    // The first process: creates the file and dies at operation n (the kernel keeps its work).
    fs.crashAfter(n);
    let finished = false;
    try {
      await durableAppend(fs, "/d/events.jsonl", bytes("first\n"), { lines: true });
      finished = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    fs.clearFaults();
    // The next process appends; its append resolved, so a power loss must keep it.
    const next = fs.clone();
    await durableAppend(next, "/d/events.jsonl", bytes("second\n"), { lines: true });
    for (const seed of [0, 1, 2]) {
      const recovered = next.crash({ seed, extraJournal: "none", tailMode: "none" });
      const text = new TextDecoder().decode(await recovered.readFile("/d/events.jsonl"));
      assert.ok(text.endsWith("second\n"), `n=${n} seed=${seed}: ${JSON.stringify(text)}`);
    }
    if (finished) break;
  }
});

test("ensurePrivateDir() of a directory another process created and never synced makes it durable", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/data");
  fs.syncAll();
  // Another process created the directory and died before syncing /data.
  await fs.mkdir("/data/collection", { mode: 0o700 });
  // This process (a fresh view: it knows nothing of that directory) relies on it.
  const next = fs.clone();
  await ensurePrivateDir(next, "/data/collection");
  await atomicReplace(next, "/data/collection/meta.json", bytes("saved"));
  const recovered = next.crash({ seed: 0, extraJournal: "none", tailMode: "none" });
  assert.deepEqual(await readOrNothing(recovered, "/data/collection/meta.json"), bytes("saved"));
});

test("ensurePrivateDir() of a directory whose parent another process creates at the same time makes that parent durable", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/data");
  fs.syncAll();
  // Between this process's look for /data/sessions and its mkdir, another process creates it
  // (and dies before syncing /data).
  let raced = false;
  const racing = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== "mkdir") return typeof value === "function" ? value.bind(target) : value;
      return async (path: string, options?: MkdirOptions) => {
        if (!raced && path === "/data/sessions") {
          raced = true;
          await target.mkdir(path, { mode: 0o700 });
        }
        return await target.mkdir(path, options);
      };
    },
  });
  await ensurePrivateDir(racing, "/data/sessions/collection");
  await atomicReplace(racing, "/data/sessions/collection/meta.json", bytes("saved"));
  assert.ok(raced, "the other process created the parent first");
  const recovered = fs.crash({ seed: 0, extraJournal: "none", tailMode: "none" });
  assert.deepEqual(
    await readOrNothing(recovered, "/data/sessions/collection/meta.json"),
    bytes("saved"),
  );
});

test("beginReplace() creates the temp file at once; discard before stage closes and removes it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/store");
  await fs.writeFile("/store/meta.json", bytes("old"));
  const names = async () => (await fs.readDir("/store")).map((entry) => entry.name);
  const before = fs.operationCount;
  const pending = beginReplace(fs, "/store/meta.json");
  assert.equal(fs.operationCount, before + 1, "the exclusive create is issued by the call");
  assert.equal((await names()).length, 2);
  await pending.discard();
  await pending.discard();
  assert.deepEqual(await names(), ["meta.json"]);
  await assert.rejects(pending.stage(bytes("new")), NotFound, "a discarded replace stages nothing");
  assert.deepEqual(await names(), ["meta.json"]);
  assert.equal(new TextDecoder().decode(await fs.readFile("/store/meta.json")), "old");

  const staged = beginReplace(fs, "/store/meta.json");
  const replace = await staged.stage(bytes("new"));
  await assert.rejects(staged.stage(bytes("again")), NotFound, "a replace stages once");
  await staged.discard(); // no effect once staged: the staged file is the caller's
  assert.equal((await names()).length, 2);
  await replace.publish();
  assert.deepEqual(await names(), ["meta.json"]);
  assert.equal(new TextDecoder().decode(await fs.readFile("/store/meta.json")), "new");
});

test("beginReplace() reports a failed create from stage, and discard then has nothing to remove", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/store");
  await fs.writeFile("/store/meta.json", bytes("old"));
  fs.failAt(fs.operationCount + 1, { ops: ["open"], error: "ENOSPC" });
  const failed = beginReplace(fs, "/store/meta.json");
  await assert.rejects(failed.stage(bytes("new")), FsIoError);
  fs.clearFaults();
  assert.deepEqual((await fs.readDir("/store")).map((entry) => entry.name), ["meta.json"]);

  fs.failAt(fs.operationCount + 1, { ops: ["open"] });
  const dropped = beginReplace(fs, "/store/meta.json");
  await dropped.discard(); // the rejected create is not an unhandled rejection
  fs.clearFaults();
  assert.deepEqual((await fs.readDir("/store")).map((entry) => entry.name), ["meta.json"]);
});

/** atomicReplace without the file fsync: the bug the simulator must catch. */
async function replaceWithoutSync(fs: FileSystem, path: string, data: Uint8Array): Promise<void> {
  const temp = `${path}.tmp`;
  const handle = await fs.open(temp, { createNew: true, write: true, mode: 0o600 });
  await handle.write(data);
  await handle.close();
  await fs.rename(temp, path);
  await fs.syncDir(dirname(path));
}

test("an atomic replace without the file sync is caught: some crash leaves a torn or empty file", async () => {
  const bad = new Set<string>();
  await crashLoop(
    (fs) => replaceWithoutSync(fs, "/store/meta.json", bytes("new contents, longer")),
    (data) => {
      const text = data === undefined ? "<missing>" : new TextDecoder().decode(data);
      if (text !== "old contents" && text !== "new contents, longer") bad.add(text);
    },
  );
  assert.ok(bad.has(""), "an empty file is among the outcomes");
  assert.ok(bad.size >= 3, `torn outcomes: ${JSON.stringify([...bad])}`);
});

test("ensurePrivateDir() on an adapter without modes does not sync the directory every time", async () => {
  const memory = new MemoryFs();
  await memory.mkdir("/data/collection", { recursive: true });
  memory.syncAll();
  let dirSyncs = 0;
  // Modes are not kept: a chmod changes nothing and every entry reports all bits.
  const modeless = new Proxy(memory, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (prop === "chmod") return () => Promise.resolve();
      if (prop === "lstat" || prop === "stat") {
        return async (path: string) => ({ ...(await value.call(target, path)), mode: 0o777 });
      }
      return (...args: unknown[]) => {
        if (prop === "syncDir") dirSyncs++;
        return value.apply(target, args);
      };
    },
  });
  for (let i = 0; i < 10; i++) await ensurePrivateDir(modeless, "/data/collection");
  // Once, for the directory's entry in its parent; a mode that did not change needs no sync.
  assert.equal(dirSyncs, 1);
});

/** Every distinct text a crash of `fs` can leave at `path`, over `seeds` seeds. */
async function outcomesOf(fs: MemoryFs, path: string, seeds = 300): Promise<Set<string>> {
  const seen = new Set<string>();
  for (let seed = 0; seed < seeds; seed++) {
    seen.add(new TextDecoder().decode(await fs.crash(seed).readFile(path)));
  }
  return seen;
}

/** A file at `path` holding `text`, synced with its directory entry. */
async function syncedFile(fs: MemoryFs, path: string, text: string): Promise<void> {
  const handle = await fs.open(path, { createNew: true });
  await handle.write(bytes(text));
  await handle.sync();
  await handle.close();
  await fs.syncDir(dirname(path));
}

test("bytes pending at a failed sync are not made durable by a later successful sync", async () => {
  const fs = new MemoryFs();
  await syncedFile(fs, "/f", "base");
  const handle = await fs.open("/f", { append: true });
  await handle.write(bytes("-lost"));
  fs.failAt(fs.operationCount + 1, { ops: ["sync"], error: "EIO" });
  await assert.rejects(handle.sync(), (error: unknown) => error instanceof FsIoError);
  await handle.sync(); // Linux returns 0: the failed pages were marked clean
  const strict = fs.crash({ seed: 1, tailMode: "none", extraJournal: "none" });
  const text = new TextDecoder().decode(await strict.readFile("/f"));
  assert.ok(text.startsWith("base"), text);
  assert.notEqual(text, "base-lost");
  assert.equal(text, "base\0\0\0\0\0");
  // A process crash loses nothing: the page cache still serves the pages writeback failed on.
  const processCrash = fs.crash({ seed: 1, tailMode: "whole", extraJournal: "all" });
  assert.equal(new TextDecoder().decode(await processCrash.readFile("/f")), "base-lost");
  // Written again after the failure, they are made durable by the next sync.
  await handle.write(bytes("+kept"));
  await handle.sync();
  assert.equal(
    new TextDecoder().decode(await fs.crash({ seed: 2, tailMode: "none" }).readFile("/f")),
    "base\0\0\0\0\0+kept",
  );
  await handle.close();
  const again = new MemoryFs();
  await syncedFile(again, "/g", "0123456789");
  const rewrite = await again.open("/g", { write: true });
  await rewrite.write(bytes("abc"));
  again.failAt(again.operationCount + 1, { ops: ["sync"], error: "ENOSPC" });
  await assert.rejects(rewrite.sync());
  await rewrite.write(bytes("D")); // only offset 3 is written again
  await rewrite.sync();
  await rewrite.close();
  assert.equal(
    new TextDecoder().decode(await again.crash({ seed: 0, tailMode: "none" }).readFile("/g")),
    "012D456789",
  );
});

test("a write failing with EIO or ENOSPC lands a prefix of its bytes first", async () => {
  const fs = new MemoryFs();
  const handle = await fs.open("/f", { createNew: true });
  await handle.write(bytes("0123456789"));
  fs.failAt(fs.operationCount + 1, { ops: ["write"], error: "ENOSPC" });
  await assert.rejects(
    handle.write(bytes("abcdefghij")),
    (error: unknown) => error instanceof FsIoError && error.code === "ENOSPC",
  );
  assert.equal(new TextDecoder().decode(await fs.readFile("/f")), "0123456789abcde");
  // The position moved past the bytes that landed.
  await handle.write(bytes("Z"));
  assert.equal(new TextDecoder().decode(await fs.readFile("/f")), "0123456789abcdeZ");
  fs.failAt(fs.operationCount + 1, { ops: ["write"], error: "EIO", landed: 2 });
  await assert.rejects(handle.write(bytes("xyz")));
  fs.failAt(fs.operationCount + 1, { ops: ["write"], error: "EIO", landed: 0 });
  await assert.rejects(handle.write(bytes("nothing")));
  fs.failAt(fs.operationCount + 1, { ops: ["write"], error: "EACCES" });
  await assert.rejects(handle.write(bytes("refused")));
  await handle.close();
  assert.equal(new TextDecoder().decode(await fs.readFile("/f")), "0123456789abcdeZxy");
});

test("a synced file rewritten in place may come back old, new, empty, cut short or zeroed", async () => {
  const fs = new MemoryFs();
  await syncedFile(fs, "/f", "old-old-old");
  await fs.writeFile("/f", bytes("NEW-NEW"));
  const seen = await outcomesOf(fs, "/f");
  for (const text of ["old-old-old", "NEW-NEW", "", "NEW", "\0\0\0\0\0\0\0"]) {
    assert.ok(seen.has(text), `${JSON.stringify(text)} among ${JSON.stringify([...seen])}`);
  }
  for (const text of seen) {
    assert.ok(
      text === "old-old-old" || "NEW-NEW".startsWith(text) || text === "\0".repeat(7),
      JSON.stringify(text),
    );
  }
});

test("a truncate to L then an append keeps the synced bytes below L intact in every crash", async () => {
  const fs = new MemoryFs();
  await syncedFile(fs, "/f", "keep-TAILTAIL");
  const handle = await fs.open("/f", { append: true });
  await handle.truncate(4);
  await handle.write(bytes("+new"));
  await handle.close();
  const seen = await outcomesOf(fs, "/f");
  for (const text of ["keep-TAILTAIL", "keep+new", "keep", "keep+", "keep\0\0\0\0"]) {
    assert.ok(seen.has(text), `${JSON.stringify(text)} among ${JSON.stringify([...seen])}`);
  }
  for (const text of seen) assert.ok(text.startsWith("keep"), JSON.stringify(text));
});

test("a write that fails is the error a recipe reports, even when the close after it fails too; nothing is left behind", async () => {
  const recipes: [string, (fs: MemoryFs) => Promise<void>][] = [
    ["atomicReplace", (fs) => atomicReplace(fs, "/d/meta.json", bytes("new"))],
    ["writeNewFile", (fs) => writeNewFile(fs, "/d/new.json", bytes("new"))],
    ["durableAppend", (fs) => durableAppend(fs, "/d/events.jsonl", bytes("next\n"))],
  ];
  for (const [name, run] of recipes) {
    const fs = new MemoryFs();
    await fs.mkdir("/d");
    await fs.writeFile("/d/meta.json", bytes("old"));
    await fs.writeFile("/d/events.jsonl", bytes("first\n"));
    const before = await fs.readDir("/d");
    fs.failAt(1, { ops: ["write"], error: "ENOSPC", landed: 0 });
    fs.failAt(1, { ops: ["close"], error: "EIO" });
    await assert.rejects(run(fs), (error: unknown) => {
      assert.ok(error instanceof FsIoError, `${name}: ${String(error)}`);
      assert.equal(error.code, "ENOSPC", name);
      return true;
    });
    fs.clearFaults();
    // No temp file is left; a file the recipe creates may stay (empty), as a failed create does.
    const after = (await fs.readDir("/d")).map((entry) => entry.name);
    assert.deepEqual(
      after.filter((entry) => !before.some((old) => old.name === entry) && entry !== "new.json"),
      [],
      name,
    );
    assert.deepEqual(await fs.readFile("/d/meta.json"), bytes("old"), name);
    assert.deepEqual(await fs.readFile("/d/events.jsonl"), bytes("first\n"), name);
  }
});

test("a private mode whose sync failed is made durable by the next call that restricts the directory", async () => {
  const recipes: [string, (fs: MemoryFs) => Promise<unknown>][] = [
    ["ensurePrivateDir", (fs) => ensurePrivateDir(fs, "/a/d")],
    ["tightenPrivateDir", (fs) => tightenPrivateDir(fs, "/a/d")],
  ];
  for (const [name, run] of recipes) {
    const base = new MemoryFs();
    await base.mkdir("/a", { mode: 0o700 });
    await base.mkdir("/a/d", { mode: 0o755 });
    base.syncAll();
    // The sync that makes the new mode durable fails once; the mode already reads 0700.
    const dry = base.clone();
    await run(dry);
    const sync = dry.operationLog.find((op) => op.op === "syncDir" && op.path === "/a/d");
    assert.ok(sync !== undefined, name);
    const fs = base.clone();
    fs.failAt(sync.number);
    await assert.rejects(run(fs), FsIoError, name);
    fs.clearFaults();
    assert.equal((await fs.stat("/a/d")).mode, 0o700, name);
    await run(fs);
    const recovered = fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
    assert.equal((await recovered.stat("/a/d")).mode, 0o700, name);
  }
});

test("clone() crashes as the original does: the same entries, bytes and modes for every seed", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  await syncedFile(fs, "/d/synced", "synced");
  await syncedFile(fs, "/d/rewritten", "old-old-old");
  await fs.writeFile("/d/rewritten", bytes("NEW-NEW"));
  await syncedFile(fs, "/d/in-place", "abcdef");
  const inPlace = await fs.open("/d/in-place", { write: true });
  await inPlace.write(bytes("XY"));
  await inPlace.close();
  await syncedFile(fs, "/d/lost", "base");
  const lost = await fs.open("/d/lost", { append: true });
  await lost.write(bytes("-lost"));
  fs.failAt(fs.operationCount + 1, { ops: ["sync"] });
  await assert.rejects(lost.sync(), FsIoError);
  await lost.close();
  await fs.syncDir("/");
  await fs.chmod("/d/synced", 0o600);
  await fs.chmod("/d", 0o700);
  await fs.writeFile("/d/pending", bytes("p"));
  const copy = fs.clone();
  const variants: CrashOptions[] = [
    {},
    { tailMode: "none", extraJournal: "none" },
    { tailMode: "whole", extraJournal: "all" },
    { rewriteMode: "cut" },
    { rewriteMode: "zeros" },
  ];
  for (const variant of variants) {
    for (let seed = 0; seed < 40; seed++) {
      const options = { ...variant, seed };
      const mine = fs.crash(options);
      const theirs = copy.crash(options);
      assert.deepEqual(theirs.snapshotTree(), mine.snapshotTree(), JSON.stringify(options));
      assert.deepEqual(theirs.crashReport, mine.crashReport, JSON.stringify(options));
    }
  }
  // A later in-place write to the original leaves the copy's synced bytes alone.
  const before = durableState(copy);
  const handle = await fs.open("/d/synced", { write: true });
  await handle.write(bytes("XY"));
  await handle.close();
  assert.deepEqual(durableState(copy), before);
});

test("a truncate after a failed sync drops the failed ranges: bytes cut and grown back are zeros once synced", async () => {
  const fs = new MemoryFs();
  await syncedFile(fs, "/f", "0123456789");
  const handle = await fs.open("/f", { write: true });
  await handle.write(bytes("abc"));
  fs.failAt(fs.operationCount + 1, { ops: ["sync"], error: "EIO" });
  await assert.rejects(handle.sync(), FsIoError);
  await handle.truncate(0);
  await handle.truncate(10);
  await handle.sync();
  await handle.close();
  assert.deepEqual(await fs.readFile("/f"), new Uint8Array(10));
  const strict = fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
  assert.deepEqual(await strict.readFile("/f"), new Uint8Array(10));
});

test("bytes whose writeback failed never come back from a power loss, whatever tail it keeps", async () => {
  const fs = new MemoryFs();
  await syncedFile(fs, "/f", "base");
  const handle = await fs.open("/f", { append: true });
  await handle.write(bytes("-lost"));
  fs.failAt(fs.operationCount + 1, { ops: ["sync"], error: "EIO" });
  await assert.rejects(handle.sync(), FsIoError);
  await handle.close();
  const modes = new Set<RecoveredAs>();
  for (let seed = 0; seed < 100; seed++) {
    const recovered = fs.crash(seed);
    const as = recovered.crashReport?.files["/f"];
    assert.ok(as !== undefined);
    modes.add(as);
    const text = new TextDecoder().decode(await recovered.readFile("/f"));
    assert.ok(!text.includes("lost"), `${as}: ${JSON.stringify(text)}`);
    if (as === "whole") assert.equal(text, "base\0\0\0\0\0");
  }
  assert.ok(modes.has("whole"), [...modes].join());
});

test("a file's fsync makes its own chmod durable, not another file's", async () => {
  const fs = new MemoryFs();
  await fs.writeFile("/a", bytes("a"));
  await fs.writeFile("/b", bytes("b"));
  fs.syncAll();
  await fs.chmod("/a", 0o600);
  await fs.chmod("/b", 0o600);
  const handle = await fs.open("/a");
  await handle.sync();
  await handle.close();
  assert.deepEqual(durableState(fs), { a: 'file 600 "a"', b: 'file 644 "b"' });
});

test("a recursive remove cut short by a crash may leave its directory with only some entries gone", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  await fs.writeFile("/d/a", bytes("a"));
  await fs.writeFile("/d/b", bytes("b"));
  await fs.mkdir("/d/sub");
  await fs.writeFile("/d/sub/c", bytes("c"));
  fs.syncAll();
  const whole = fs.snapshotTree();
  await fs.remove("/d", { recursive: true });
  const states = new Set<string>();
  for (let seed = 0; seed < 200; seed++) {
    const tree = fs.crash(seed).snapshotTree();
    for (const [path, entry] of Object.entries(tree)) assert.equal(entry, whole[path], path);
    states.add(Object.keys(tree).join(","));
  }
  assert.ok(states.has("d,d/b,d/sub,d/sub/c"), [...states].join(" | "));
  assert.ok(states.has(""), [...states].join(" | "));
});

/** The text at `path` in the strictly durable state of `fs`, or undefined when nothing is there. */
async function durableText(fs: MemoryFs, path: string): Promise<string | undefined> {
  const data = await readOrNothing(
    fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" }),
    path,
  );
  return data === undefined ? undefined : new TextDecoder().decode(data);
}

/** The number of the first `op` on `path` that `run` makes on a clone of `fs`. */
async function operationNumber(
  fs: MemoryFs,
  run: (fs: MemoryFs) => Promise<unknown>,
  op: string,
  path: string,
): Promise<number> {
  const dry = fs.clone();
  dry.resetCounter();
  await run(dry);
  const found = dry.operationLog.find((record) => record.op === op && record.path === path);
  assert.ok(found !== undefined, `${op} ${path}`);
  return fs.operationCount + found.number;
}

test("atomicReplace() whose directory sync failed is made durable by ensureFileDurable(), even over a replace that synced it", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  fs.syncAll();
  await atomicReplace(fs, "/d/meta.json", bytes("first"));
  fs.failAt(fs.operationCount + 1, { ops: ["syncDir"] });
  await assert.rejects(atomicReplace(fs, "/d/meta.json", bytes("second")), FsIoError);
  fs.clearFaults();
  await ensureFileDurable(fs, "/d/meta.json");
  assert.equal(await durableText(fs, "/d/meta.json"), "second");
});

test("ensurePrivateDir() of a directory it created again after a failed sync makes the new entry durable", async () => {
  const fs = new MemoryFs();
  await ensurePrivateDir(fs, "/a/d");
  await writeNewFile(fs, "/a/d/old", bytes("old"));
  await fs.syncDir("/a/d");
  await fs.remove("/a/d", { recursive: true });
  fs.failAt(fs.operationCount + 1, { ops: ["syncDir"] });
  await assert.rejects(ensurePrivateDir(fs, "/a/d"), FsIoError);
  fs.clearFaults();
  await ensurePrivateDir(fs, "/a/d");
  const recovered = fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
  assert.deepEqual(recovered.snapshotTree("/a"), { d: "dir 700" });
});

test("durableAppend() with lines after a failed fsync starts the next record on a line of its own, once", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/d");
  fs.syncAll();
  await durableAppend(fs, "/d/log", bytes("a\n"), { lines: true });
  fs.failAt(fs.operationCount + 1, { ops: ["sync"] });
  await assert.rejects(durableAppend(fs, "/d/log", bytes("b\n"), { lines: true }), FsIoError);
  fs.clearFaults();
  await durableAppend(fs, "/d/log", bytes("c\n"), { lines: true });
  // The failed record's bytes come back as zeros: the next record is not joined to them.
  assert.equal(await durableText(fs, "/d/log"), "a\n\0\0\nc\n");
  await durableAppend(fs, "/d/log", bytes("d\n"), { lines: true });
  assert.equal(new TextDecoder().decode(await fs.readFile("/d/log")), "a\nb\n\nc\nd\n");
});

test("stagedPublish() makes the whole staged tree durable before it resolves", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/p");
  fs.syncAll();
  await fs.mkdir("/p/.stage");
  await fs.writeFile("/p/.stage/a", bytes("alpha"));
  await fs.mkdir("/p/.stage/sub");
  await fs.writeFile("/p/.stage/sub/b", bytes("beta"));
  const staged = fs.snapshotTree("/p/.stage");
  await stagedPublish(fs, "/p/.stage", "/p/final");
  const recovered = fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
  assert.deepEqual(recovered.snapshotTree("/p/final"), staged);
  assert.equal(await readOrNothing(recovered, "/p/.stage"), undefined);
});

test("stagedPublish() from another parent syncs both parents", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s");
  await fs.mkdir("/p");
  await fs.mkdir("/s/stage");
  fs.syncAll();
  const synced: string[] = [];
  const spy = new Proxy(fs, {
    get(target, key) {
      if (key === "syncDir") {
        return (path: string) => {
          synced.push(path);
          return target.syncDir(path);
        };
      }
      const value = Reflect.get(target, key, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  await stagedPublish(spy, "/s/stage", "/p/final");
  assert.ok(synced.includes("/p"), synced.join());
  assert.ok(synced.includes("/s"), synced.join());
});

test("stagedPublish() over a path this process made durable before syncs the new entry again after a failed sync", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/p");
  fs.syncAll();
  await ensurePrivateDir(fs, "/p/final");
  await fs.remove("/p/final");
  await fs.mkdir("/p/.stage");
  await writeNewFile(fs, "/p/.stage/a", bytes("alpha"));
  const publish = (target: MemoryFs) => stagedPublish(target, "/p/.stage", "/p/final");
  fs.failAt(await operationNumber(fs, publish, "syncDir", "/p"));
  await assert.rejects(publish(fs), FsIoError);
  fs.clearFaults();
  await ensureDirDurable(fs, "/p/final");
  assert.equal(await durableText(fs, "/p/final/a"), "alpha");
});

test("beginReplace() discarded before stage closes the temp file's handle before it removes the file", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/store");
  fs.resetCounter();
  const pending = beginReplace(fs, "/store/meta.json");
  await pending.discard();
  assert.deepEqual(fs.operationLog.map((record) => record.op), ["open", "close", "remove"]);
  assert.deepEqual(await fs.readDir("/store"), []);
});

test("a crash with tailMode none brings a rewritten file back with its durable bytes for every seed", async () => {
  const fs = new MemoryFs();
  await syncedFile(fs, "/f", "old-old-old");
  await fs.writeFile("/f", bytes("NEW-NEW"));
  for (let seed = 0; seed < 50; seed++) {
    const recovered = fs.crash({ seed, tailMode: "none" });
    assert.equal(recovered.crashReport?.files["/f"], "durable", `seed ${seed}`);
    assert.equal(new TextDecoder().decode(await recovered.readFile("/f")), "old-old-old");
  }
});

test("a write into the middle of bytes whose writeback failed makes only the bytes it wrote reachable again", async () => {
  const fs = new MemoryFs();
  await syncedFile(fs, "/f", "0123456789");
  const handle = await fs.open("/f", { write: true });
  await handle.write(bytes("abcdef"));
  fs.failAt(fs.operationCount + 1, { ops: ["sync"], error: "EIO" });
  await assert.rejects(handle.sync(), FsIoError);
  const again = await fs.open("/f", { write: true });
  await again.write(bytes("01D"));
  await again.sync();
  await again.close();
  await handle.close();
  assert.equal(new TextDecoder().decode(await fs.readFile("/f")), "01Ddef6789");
  const strict = fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
  assert.equal(new TextDecoder().decode(await strict.readFile("/f")), "01D3456789");
});
