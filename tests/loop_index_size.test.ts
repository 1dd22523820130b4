// index.json larger than any index of the committed counts (`indexSizeBound`) is derived data
// that is not of this library's form: a fast listing lists the session from a scan of its
// committed range, verify reports it as an `index` finding, and a writer's page read rebuilds it.
// Where the bound is above INDEX_HEAD_LIMIT (a long history) the file is opened and its size
// checked before anything is read; a small bound's file is read in one call, as a small index
// always is, and refused by its length before it is decoded.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionStore } from "../src/loop/store.ts";
import { verifySession } from "../src/loop/verify.ts";
import {
  INDEX_HEAD_LIMIT,
  indexSizeBound,
  parseRoundIndexText,
  readStorageMeta,
} from "../src/loop/storage.ts";
import { conversation } from "./_fixtures.ts";
import { READ_MODES, recording } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const decoder = new TextDecoder();

/** A short history (its bound is below INDEX_HEAD_LIMIT) and a long one (above it). */
const SIZES = [
  { name: "a short history", rounds: 3 },
  { name: "a long history", rounds: 2500 },
] as const;

/** Where the padding goes: before the index (not the canonical form) or after it (canonical head). */
const PADDINGS = ["leading", "trailing"] as const;

/** Whether two byte arrays are equal (without the diff a failed deep equality prints of them). */
function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

/** Bytes read from files whose path ends with `name`. */
function bytesRead(reads: readonly { path: string; bytes: number }[], name: string): number {
  return reads.filter((r) => r.path.endsWith(name)).reduce((sum, r) => sum + r.bytes, 0);
}

/**
 * A closed session of `rounds` rounds without a stored title, whose valid index.json is then
 * padded with spaces (`padding` of it) past the bound of its committed counts. Returns the
 * session directory, its history, the index as written, the padded size and the bound.
 */
async function paddedSession(rounds: number, padding: (typeof PADDINGS)[number]) {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = conversation(rounds, "p");
  await session.commit(history);
  await session.readHistory(); // index.json published, with the fallback title
  await session.close();
  const dir = session.getSessionPath();
  const indexPath = `${dir}/index.json`;
  const fresh = await fs.readFile(indexPath);
  assert.ok(parseRoundIndexText(decoder.decode(fresh)) !== undefined);
  const meta = await readStorageMeta(fs, dir);
  const bound = indexSizeBound(meta.messageCount, meta.bytes);
  assert.equal(bound > INDEX_HEAD_LIMIT, rounds > 100, "the history's length picks the path");
  // Spaces around a JSON value keep it valid JSON: only its size says it is not an index.
  const padded = new Uint8Array(bound + 1 + fresh.length).fill(0x20);
  padded.set(fresh, padding === "leading" ? padded.length - fresh.length : 0);
  await fs.writeFile(indexPath, padded, { mode: 0o600 });
  assert.ok(padded.length > bound);
  return { fs, store, dir, history, fresh, indexPath, bound, size: padded.length };
}

for (const mode of READ_MODES) {
  for (const size of SIZES) {
    for (const padding of PADDINGS) {
      test(`a fast listing lists a session whose index.json is padded past its bound (${padding}) from a scan: ${size.name}, ${mode.name}`, async () => {
        const { fs, history, bound, size: fileSize } = await paddedSession(size.rounds, padding);
        const watched = recording(mode.port(fs));
        const store = new SessionStore({ fs: watched.fs, agentDir: AGENT });
        const result = await store.listDetailed(CWD, undefined, { fast: true });
        assert.deepEqual(result.failures, []);
        assert.equal(result.sessions.length, 1);
        const [listed] = result.sessions;
        assert.equal(listed?.messageCount, history.length);
        assert.equal(listed?.userMessageCount, size.rounds);
        assert.equal(listed?.title?.text, "p0 question ✓");
        // The index was not used: the committed range was scanned for the counts and the title.
        assert.ok(bytesRead(watched.reads, "/messages.jsonl") > 0, "the log was scanned");
        const indexBytes = bytesRead(watched.reads, "/index.json");
        if (bound > INDEX_HEAD_LIMIT) {
          // Opened, its size seen (from the open, or an fstat), and nothing of it read.
          assert.equal(indexBytes, 0);
        } else {
          // One whole-file read, as for any small index; its length refuses it undecoded.
          assert.deepEqual(watched.calls, [
            mode.name === "no-follow reads" ? "readFileNoFollow" : "readFile",
          ]);
          assert.equal(indexBytes, fileSize);
        }
        // The same listing from the full mode.
        const full = await store.listDetailed(CWD);
        assert.deepEqual(full.sessions.map((s) => [s.userMessageCount, s.title?.text]), [
          [listed?.userMessageCount, listed?.title?.text],
        ]);
      });
    }
  }
}

for (const mode of READ_MODES) {
  for (const size of SIZES) {
    test(`verifySession reports an index.json padded past its bound as an index finding: ${size.name}, ${mode.name}`, async () => {
      const { fs, dir, bound, size: fileSize } = await paddedSession(size.rounds, "leading");
      const watched = recording(mode.port(fs));
      const report = await verifySession(watched.fs, dir, { sha256: portableSha256 });
      assert.equal(report.ok, true, JSON.stringify(report.findings));
      assert.deepEqual(report.findings.map((f) => [f.severity, f.kind]), [["warning", "index"]]);
      assert.match(report.findings[0]?.message ?? "", new RegExp(`at most ${bound} bytes`));
      assert.equal(report.findings[0]?.file, `${dir}/index.json`);
      const indexBytes = bytesRead(watched.reads, "/index.json");
      assert.equal(indexBytes, bound > INDEX_HEAD_LIMIT ? 0 : fileSize);
    });
  }
}

for (const size of SIZES) {
  for (const padding of PADDINGS) {
    test(`a writer's page read serves pages and rebuilds an index.json padded past its bound (${padding}): ${size.name}`, async () => {
      const { fs, store, dir, history, fresh, indexPath } = await paddedSession(
        size.rounds,
        padding,
      );
      const writer = await store.open(dir);
      try {
        const page = await writer.readHistory();
        assert.deepEqual(page.messages, history.slice(page.start));
        assert.equal(page.total, history.length);
        // Rebuilt by the page read (not trusted), as a malformed index is.
        assert.ok(sameBytes(await fs.readFile(indexPath), fresh), "rebuilt by the page read");
        const earlier = await writer.readHistory(page.start);
        assert.deepEqual(earlier.messages, history.slice(earlier.start, earlier.end));
      } finally {
        await writer.close();
      }
      assert.ok(sameBytes(await fs.readFile(indexPath), fresh), "kept by close()");
      // And a reader opened read-only pages without it.
      const reader = await store.open(dir, { readOnly: true });
      assert.equal((await reader.readHistory()).total, history.length);
      await reader.close();
    });
  }
}

test("an index.json too large for the port to read whole is not an index: listed from a scan, reported by verify", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = conversation(3, "e");
  await session.commit(history);
  await session.readHistory();
  await session.close();
  const dir = session.getSessionPath();
  // What the Node and Deno adapters say of a file larger than one buffer can hold.
  const tooLarge = new Proxy(fs, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        const path = String(args[0]);
        if ((prop === "readFile" || prop === "readFileNoFollow") && path.endsWith("/index.json")) {
          return Promise.reject(
            new FsIoError("EFBIG", "read", path, "File too large to read whole: 9 PB"),
          );
        }
        return value.apply(target, args);
      };
    },
  });
  for (const mode of READ_MODES) {
    const port = mode.port(tooLarge);
    const listed = await new SessionStore({ fs: port, agentDir: AGENT }).listDetailed(
      CWD,
      undefined,
      { fast: true },
    );
    assert.deepEqual(listed.failures, [], mode.name);
    assert.deepEqual(
      listed.sessions.map((s) => [s.userMessageCount, s.title?.text]),
      [[3, "e0 question ✓"]],
      mode.name,
    );
    const report = await verifySession(port, dir, { sha256: portableSha256 });
    assert.deepEqual(report.findings.map((f) => f.kind), ["index"], mode.name);
    assert.match(report.findings[0]?.message ?? "", /larger than/, mode.name);
  }
});
