// A fast listing takes a recorded fallback title from the head of a large index.json. A title of
// a later message (the first user messages held no text, an image only) is taken once the index
// is found to list that message's round by a binary search of a few small reads (`roundListed`),
// not by reading an index that grows with the history whole; an index that does not list it is
// read whole, as before, and the title comes from the log.
import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import {
  encodeRoundIndex,
  INDEX_FORMAT,
  INDEX_HEAD_LIMIT,
  INDEX_VERSION,
  indexSizeBound,
  type RoundEntry,
  roundListed,
} from "../src/loop/storage.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { assistant, imageOnly, user } from "./_fixtures.ts";
import { READ_MODES, recording } from "./_hooks.ts";
import { runsOf } from "./_soak.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const ROUND_KEY = new TextEncoder().encode('{"messageIndex":');

/** The byte offset of the first round entry in canonical index bytes. */
function firstRoundAt(bytes: Uint8Array): number {
  outer: for (let i = 0; i < bytes.length; i++) {
    for (let j = 0; j < ROUND_KEY.length; j++) if (bytes[i + j] !== ROUND_KEY[j]) continue outer;
    return i;
  }
  return -1;
}

test("roundListed finds exactly the rounds a canonical index lists, in few reads", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.uniqueArray(fc.integer({ min: 0, max: 20_000_000 }), { minLength: 1, maxLength: 400 }),
      fc.array(fc.integer({ min: 0, max: 20_000_001 }), { maxLength: 20 }),
      async (indices, probes) => {
        const sorted = [...indices].sort((a, b) => a - b);
        const rounds: RoundEntry[] = sorted.map((messageIndex) => ({
          messageIndex,
          byteOffset: messageIndex * 977,
        }));
        const last = sorted[sorted.length - 1] as number;
        const bytes = encodeRoundIndex({
          format: INDEX_FORMAT,
          version: INDEX_VERSION,
          generation: "a".repeat(64),
          start: 0,
          bytes: (last + 1) * 977,
          messageCount: last + 1,
          fallbackTitle: { text: "t", source: "fallback", messageIndices: [sorted[0] as number] },
          rounds,
        });
        const from = firstRoundAt(bytes);
        let reads = 0;
        const read = (at: number, length: number) => {
          reads++;
          return Promise.resolve(bytes.subarray(at, at + length));
        };
        for (const target of [...sorted, ...probes]) {
          reads = 0;
          assert.equal(
            await roundListed(read, from, bytes.length, target),
            sorted.includes(target),
            `round ${target}`,
          );
          assert.ok(reads <= Math.ceil(Math.log2(bytes.length)) + 2, `${reads} reads`);
        }
      },
    ),
    { numRuns: runsOf(150) },
  );
  // Text not in the canonical form is not searched: the caller reads the index whole.
  const spaced = new TextEncoder().encode(
    `{"rounds":[${Array.from({ length: 50 }, (_, i) => `{"messageIndex": ${i}}`).join(",")}]}`,
  );
  assert.equal(
    await roundListed(
      (at, n) => Promise.resolve(spaced.subarray(at, at + n)),
      11,
      spaced.length,
      7,
    ),
    false,
  );
});

/** A closed session whose first user message is an image and whose index is large. */
async function imageFirstSession(rounds: number) {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history: Message[] = [imageOnly(), assistant("saw it")];
  for (let i = 1; i < rounds; i++) history.push(user(`ask ${i}`), assistant(`answer ${i}`));
  await session.commit(history);
  await session.readHistory(); // index.json published, with the fallback title
  await session.close();
  return { fs, dir: session.getSessionPath(), history };
}

for (const mode of READ_MODES) {
  test(`a fast listing takes a later message's recorded title from a large index by a few small reads: ${mode.name}`, async () => {
    const { fs, dir, history } = await imageFirstSession(3000);
    const index = await fs.readFile(`${dir}/index.json`);
    assert.ok(index.length > INDEX_HEAD_LIMIT);
    assert.ok(
      indexSizeBound(history.length, (await fs.stat(`${dir}/messages.jsonl`)).size) >
        INDEX_HEAD_LIMIT,
    );
    const watched = recording(mode.port(fs));
    const listed = await new SessionStore({ fs: watched.fs, agentDir: AGENT }).listDetailed(
      CWD,
      undefined,
      { fast: true },
    );
    assert.deepEqual(listed.failures, []);
    assert.deepEqual(listed.sessions[0]?.title, {
      text: "ask 1",
      source: "fallback",
      messageIndices: [2],
    });
    assert.equal(listed.sessions[0]?.userMessageCount, 3000);
    const indexBytes = watched.reads.filter((r) => r.path.endsWith("/index.json"))
      .reduce((sum, r) => sum + r.bytes, 0);
    assert.ok(indexBytes < 8 * 1024, `${indexBytes} bytes of a ${index.length}-byte index read`);
    assert.equal(watched.reads.filter((r) => r.path.endsWith("/messages.jsonl")).length, 0);
    // The full listing agrees.
    const full = await new SessionStore({ fs, agentDir: AGENT }).list(CWD);
    assert.deepEqual(full[0]?.title, listed.sessions[0]?.title);
  });
}

test("a large index whose rounds do not list the recorded title's message is read whole, and the title comes from the log", async () => {
  const { fs, dir } = await imageFirstSession(3000);
  const path = `${dir}/index.json`;
  const text = new TextDecoder().decode(await fs.readFile(path));
  // The title names message 4 (a user message), which the index's rounds do not list: the
  // rounds are checked against it, and the index is not trusted.
  const edited = text.replace('"messageIndices":[2]', '"messageIndices":[4]')
    .replace('"text":"ask 1"', '"text":"ask 2"');
  assert.notEqual(edited, text);
  const withoutRound = edited.replace('{"messageIndex":4,', '{"messageIndex":5,');
  await fs.writeFile(path, new TextEncoder().encode(withoutRound), { mode: 0o600 });
  const watched = recording(fs);
  const listed = await new SessionStore({ fs: watched.fs, agentDir: AGENT }).listDetailed(
    CWD,
    undefined,
    { fast: true },
  );
  assert.deepEqual(listed.failures, []);
  assert.equal(listed.sessions[0]?.title?.text, "ask 1");
  const indexBytes = watched.reads.filter((r) => r.path.endsWith("/index.json"))
    .reduce((sum, r) => sum + r.bytes, 0);
  assert.ok(indexBytes >= withoutRound.length, "read whole");
});
