// Guards of src/loop/storage.ts that only damaged files reach: meta.json that is not an object or
// claims messages in an empty range, an empty range past the end of the log, a recorded cwd that
// is a file, and index.json text that is not an index of this library's form (not JSON, counts
// that disagree, a title an index may not record, another generation, a size past its bound).
// Each test pins what readers do with such a file: the typed error, or the index not being used.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionStore } from "../src/loop/store.ts";
import { CorruptSessionError, SessionCwdError, SessionFormatError } from "../src/loop/errors.ts";
import { verifySession } from "../src/loop/verify.ts";
import {
  encodeRoundIndex,
  indexSizeBound,
  parseRoundIndexText,
  type RoundIndex,
} from "../src/loop/storage.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const options = { sha256: portableSha256 };
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function sha256Hex(bytes: Uint8Array): string {
  return portableSha256().update(bytes).digestHex();
}

/** A closed session of `rounds` rounds without a stored title, its index.json published. */
async function saved(rounds = 3) {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = conversation(rounds);
  await session.commit(history);
  await session.readHistory();
  await session.close();
  const dir = session.getSessionPath();
  const indexPath = `${dir}/index.json`;
  const index = parseRoundIndexText(decoder.decode(await fs.readFile(indexPath)));
  assert.ok(index !== undefined);
  return {
    fs,
    dir,
    history,
    index,
    metaPath: `${dir}/meta.json`,
    logPath: `${dir}/messages.jsonl`,
    indexPath,
  };
}

/** Rewrites meta.json with `fields` changed (compact JSON, as another writer might). */
async function changeMeta(fs: MemoryFs, metaPath: string, fields: Record<string, unknown>) {
  const meta = JSON.parse(decoder.decode(await fs.readFile(metaPath)));
  await fs.writeFile(metaPath, encoder.encode(JSON.stringify({ ...meta, ...fields }) + "\n"));
}

/** A listing of CWD by a new store (nothing cached), fast or full. */
function list(fs: MemoryFs, fast: boolean) {
  return new SessionStore({ fs, agentDir: AGENT }).listDetailed(CWD, undefined, { fast });
}

/** Opens `dir` read-only and expects `check` of the rejection. */
async function refusedOpen(fs: MemoryFs, dir: string, check: (error: unknown) => void) {
  const store = new SessionStore({ fs, agentDir: AGENT });
  const error = await store.open(dir, { readOnly: true }).then(
    async (session) => {
      const count = session.messages.length;
      await session.close();
      return assert.fail(`opened with ${count} messages`);
    },
    (error: unknown) => error,
  );
  check(error);
}

/** `verifySession` of `dir`: ok, with exactly one index warning matching `message`. */
async function indexWarning(fs: MemoryFs, dir: string, message: RegExp, label: string) {
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, true, `${label}: ${JSON.stringify(report.findings)}`);
  assert.deepEqual(
    report.findings.map((f) => [f.severity, f.kind, f.file]),
    [["warning", "index", `${dir}/index.json`]],
    label,
  );
  assert.match(report.findings[0]?.message ?? "", message, label);
}

test("meta.json that is null or an array is a SessionFormatError naming meta.json, at open and in listings", async () => {
  for (const text of ["null", "[]"]) {
    const { fs, dir, metaPath } = await saved(1);
    await fs.writeFile(metaPath, encoder.encode(text + "\n"));
    await refusedOpen(fs, dir, (error) => {
      assert.ok(error instanceof SessionFormatError, `${text}: ${String(error)}`);
      assert.equal(error.file, metaPath, text);
      assert.equal(error.path, "", text);
      assert.match(error.message, /expected a JSON object/, text);
    });
    for (const fast of [false, true]) {
      const label = `${text}, fast: ${fast}`;
      const listed = await list(fs, fast);
      assert.deepEqual(listed.sessions, [], label);
      assert.equal(listed.failures.length, 1, label);
      const error = listed.failures[0]?.error;
      assert.ok(error instanceof SessionFormatError, `${label}: ${String(error)}`);
      assert.equal(error.file, metaPath, label);
      assert.match(error.message, /expected a JSON object/, label);
    }
  }
});

test("meta.json claiming messages in an empty committed range is corrupt, at open and in a listing", async () => {
  const { fs, dir, metaPath } = await saved(2);
  await changeMeta(fs, metaPath, {
    generation: sha256Hex(new Uint8Array()),
    start: 0,
    bytes: 0,
    messageCount: 5,
  });
  await refusedOpen(fs, dir, (error) => {
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.file, metaPath);
    assert.match(error.message, /claims 5 messages in an empty range/);
  });
  for (const fast of [false, true]) {
    const listed = await list(fs, fast);
    assert.deepEqual(listed.sessions, [], `fast: ${fast}`);
    assert.equal(listed.failures.length, 1, `fast: ${fast}`);
    const error = listed.failures[0]?.error;
    assert.ok(error instanceof CorruptSessionError, `fast: ${fast}: ${String(error)}`);
    assert.equal(error.file, metaPath, `fast: ${fast}`);
    assert.match(error.message, /claims 5 messages in an empty range/, `fast: ${fast}`);
  }
});

test("an empty committed range starting one byte past the end of the log is corrupt at open", async () => {
  const { fs, dir, metaPath, logPath } = await saved(2);
  const size = (await fs.readFile(logPath)).length;
  await changeMeta(fs, metaPath, {
    generation: sha256Hex(new Uint8Array()),
    start: size + 1,
    bytes: 0,
    messageCount: 0,
  });
  await refusedOpen(fs, dir, (error) => {
    assert.ok(error instanceof CorruptSessionError, String(error));
    assert.equal(error.file, logPath);
    assert.equal(error.offset, size);
    assert.match(error.message, /shorter than its committed range/);
  });
  // At the end of the log exactly, the range is whole: the session opens, empty.
  await changeMeta(fs, metaPath, { start: size });
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir, { readOnly: true });
  assert.equal(session.messages.length, 0);
  await session.close();
});

test("a session whose recorded cwd is now a regular file is refused with SessionCwdError", async () => {
  const { fs, dir, metaPath } = await saved(1);
  await fs.remove(CWD, { recursive: true });
  await fs.writeFile(CWD, encoder.encode("a file now\n"));
  await refusedOpen(fs, dir, (error) => {
    assert.ok(error instanceof SessionCwdError, String(error));
    assert.equal(error.cwd, CWD);
    assert.equal(error.file, metaPath);
    assert.match(error.message, /not a directory/);
  });
});

test("index.json holding null is not an index: listed from a scan, reported by verify", async () => {
  const { fs, dir, history, indexPath } = await saved(3);
  await fs.writeFile(indexPath, encoder.encode("null\n"));
  assert.equal(parseRoundIndexText("null"), undefined);
  for (const fast of [true, false]) {
    const listed = await list(fs, fast);
    assert.deepEqual(listed.failures, [], `fast: ${fast}`);
    assert.deepEqual(
      listed.sessions.map((s) => [s.messageCount, s.userMessageCount, s.title?.text]),
      [[history.length, 3, "r0 question ✓"]],
      `fast: ${fast}`,
    );
  }
  await indexWarning(fs, dir, /missing or malformed/, "null");
});

test("a pretty-printed index of another generation with the committed counts is not used by a fast listing", async () => {
  const { fs, dir, history, index, indexPath } = await saved(3);
  // Everything but the generation matches; its last round is dropped.
  const other = {
    ...index,
    generation: "ab".repeat(32),
    roundCount: 2,
    rounds: index.rounds.slice(0, 2),
  };
  await fs.writeFile(indexPath, encoder.encode(JSON.stringify(other, null, 2) + "\n"));
  const parsed = parseRoundIndexText(decoder.decode(await fs.readFile(indexPath)));
  assert.equal(parsed?.rounds.length, 2, "a valid index, not in the canonical form");
  const listed = await list(fs, true);
  assert.deepEqual(listed.failures, []);
  assert.deepEqual(
    listed.sessions.map((s) => [s.messageCount, s.userMessageCount]),
    [[history.length, 3]],
  );
  await indexWarning(fs, dir, /does not describe the committed range/, "another generation");
});

test("index.json text that JSON.parse or the index schema refuses is malformed to verify", async () => {
  const { fs, dir, index, indexPath } = await saved(3);
  const canonical = decoder.decode(encodeRoundIndex(index));
  assert.ok(canonical.includes('"roundCount":3,'));
  assert.ok(canonical.includes('{"messageIndex":0,'));
  assert.ok(canonical.includes('},{"messageIndex":'));
  assert.ok(canonical.endsWith("]}\n"));
  const damages: [string, string][] = [
    // The canonical form with a roundCount that is not its number of rounds.
    ["roundCount", canonical.replace('"roundCount":3,', '"roundCount":2,')],
    // The same in another JSON form (pretty-printed).
    ["pretty roundCount", JSON.stringify({ ...index, roundCount: 4 }, null, 2) + "\n"],
    // Not JSON: a leading zero, text after the index, a semicolon between two rounds.
    ["leading zero", canonical.replace('{"messageIndex":0,', '{"messageIndex":00,')],
    ["trailing text", canonical.replace(/\n$/, "GARBAGE")],
    ["semicolon", canonical.replace('},{"messageIndex":', '};{"messageIndex":')],
  ];
  for (const [label, text] of damages) {
    assert.notEqual(text, canonical, label);
    assert.equal(parseRoundIndexText(text), undefined, label);
    await fs.writeFile(indexPath, encoder.encode(text));
    await indexWarning(fs, dir, /missing or malformed/, label);
  }
});

const PLANTED_TITLES: [string, (index: RoundIndex) => RoundIndex["fallbackTitle"], string][] = [
  [
    "is not of source fallback",
    () => ({ text: "Planted", source: "user", messageIndices: [0] }),
    "user title",
  ],
  [
    "names a message it does not cover",
    (index) => ({ text: "Planted", source: "fallback", messageIndices: [index.messageCount] }),
    "title past the covered messages",
  ],
];

for (const [what, title, label] of PLANTED_TITLES) {
  test(`an index whose fallback title ${what} is not used: a fast listing reads the title from the log`, async () => {
    const { fs, dir, index, indexPath } = await saved(3);
    const planted: RoundIndex = { ...index, fallbackTitle: title(index) };
    await fs.writeFile(indexPath, encodeRoundIndex(planted));
    assert.equal(parseRoundIndexText(decoder.decode(encodeRoundIndex(planted))), undefined);
    for (const fast of [true, false]) {
      const listed = await list(fs, fast);
      assert.deepEqual(listed.failures, [], `fast: ${fast}`);
      assert.deepEqual(
        listed.sessions.map((s) => [s.userMessageCount, s.title]),
        [[3, { text: "r0 question ✓", source: "fallback", messageIndices: [0] }]],
        `fast: ${fast}`,
      );
    }
    await indexWarning(fs, dir, /missing or malformed/, label);
  });
}

test("an index.json one byte past its size bound is reported as oversized by verify", async () => {
  const { fs, dir, history, index, indexPath } = await saved(3);
  const bound = indexSizeBound(history.length, index.bytes);
  const fresh = encodeRoundIndex(index);
  // Trailing spaces keep it valid JSON: only its size says it is not an index.
  const padded = new Uint8Array(bound + 1).fill(0x20);
  padded.set(fresh);
  await fs.writeFile(indexPath, padded);
  assert.ok(parseRoundIndexText(decoder.decode(padded)) !== undefined);
  await indexWarning(fs, dir, new RegExp(`larger than .*at most ${bound} bytes`), "bound + 1");
  // At its bound exactly, it is an index.
  await fs.writeFile(indexPath, padded.subarray(0, bound));
  const report = await verifySession(fs, dir, options);
  assert.deepEqual(report.findings, []);
});

test("an index recording the right title text for another message is rebuilt, and verify reports it", async () => {
  const { fs, dir, index, indexPath } = await saved(3);
  assert.deepEqual(index.fallbackTitle?.messageIndices, [0]);
  const planted: RoundIndex = {
    ...index,
    fallbackTitle: { text: "r0 question ✓", source: "fallback", messageIndices: [1] },
  };
  await fs.writeFile(indexPath, encodeRoundIndex(planted));
  await indexWarning(fs, dir, /records the fallback title/, "title of another message");
  // A writer's page read rebuilds it with the title of the message it comes from.
  const writer = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  await writer.readHistory();
  await writer.close();
  const rebuilt = parseRoundIndexText(decoder.decode(await fs.readFile(indexPath)));
  assert.deepEqual(rebuilt?.fallbackTitle?.messageIndices, [0]);
  const report = await verifySession(fs, dir, options);
  assert.deepEqual(report.findings, []);
});

test("a meta.json header whose version is not an integer is a SessionFormatError naming header.version", async () => {
  for (const version of [2.5, 1e300]) {
    const { fs, dir, metaPath } = await saved(1);
    const meta = JSON.parse(decoder.decode(await fs.readFile(metaPath)));
    await changeMeta(fs, metaPath, { header: { ...meta.header, version } });
    await refusedOpen(fs, dir, (error) => {
      assert.ok(error instanceof SessionFormatError, `${version}: ${String(error)}`);
      assert.equal(error.file, metaPath);
      assert.equal(error.path, "header.version");
    });
    for (const fast of [false, true]) {
      const listed = await list(fs, fast);
      assert.deepEqual(listed.sessions, [], `${version}, fast: ${fast}`);
      const error = listed.failures[0]?.error;
      assert.ok(error instanceof SessionFormatError, `${version}, fast: ${fast}: ${String(error)}`);
      assert.equal(error.path, "header.version");
    }
  }
});
