// A writer adopts a current index.json at open: the first save after an open, a page read and
// close() after a metadata change do not rewrite an index that already covers the history (a
// whole rewrite, ~1.5 MB at 100,000 messages), while a stale, damaged or foreign one is still
// rebuilt as before.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import { readRoundIndex } from "../src/loop/storage.ts";
import { assistant, conversation, imageOnly, rewriteIndex, user } from "./_fixtures.ts";

const CWD = "/work/app";
const AGENT = "/home/user/.loop";

/** A MemoryFs that records every path renamed onto. */
class RenameLog extends MemoryFs {
  readonly renamed: string[] = [];
  override rename(from: string, to: string): Promise<void> {
    this.renamed.push(to);
    return super.rename(from, to);
  }
  /** How many times index.json was replaced since the last call. */
  indexWrites(): number {
    const n = this.renamed.filter((path) => path.endsWith("/index.json")).length;
    this.renamed.length = 0;
    return n;
  }
}

/** A closed session of `rounds` rounds whose index.json covers its whole history. */
async function indexedSession(rounds: number): Promise<{ fs: RenameLog; dir: string }> {
  const fs = new RenameLog();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(rounds));
  await session.readHistory(); // publishes the index of the whole history
  await session.close();
  const dir = session.getSessionPath();
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(`${dir}/meta.json`)));
  const index = await readRoundIndex(fs, dir, false, meta);
  assert.equal(index?.messageCount, meta.messageCount, "the index covers the whole history");
  fs.indexWrites();
  return { fs, dir };
}

test("the first append after an open does not rewrite a current index.json", async () => {
  const { fs, dir } = await indexedSession(200);
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  await session.append([user("one more"), assistant("done")]);
  assert.equal(fs.indexWrites(), 0, "first append");
  await session.readHistory();
  assert.equal(fs.indexWrites(), 0, "page read");
  // close() publishes the lag of its own saves, as documented.
  await session.close();
  assert.equal(fs.indexWrites(), 1, "close after a save");
  const reopened = await new SessionStore({ fs, agentDir: AGENT }).open(dir, { readOnly: true });
  const page = await reopened.readHistory();
  assert.equal(page.total, reopened.messages.length);
  await reopened.close();
});

test("a pin, a read receipt or a title change then close() leave a current index.json alone", async () => {
  const { fs, dir } = await indexedSession(50);
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  await session.setPinned(true);
  await session.markRead(session.messages.length);
  await session.setTitle({ text: "Renamed", source: "user", messageIndices: [] });
  await session.close();
  assert.equal(fs.indexWrites(), 0);
});

test("an index.json that no longer matches the history is still rebuilt by a writer", async () => {
  for (const damage of ["rounds", "missing"] as const) {
    const { fs, dir } = await indexedSession(50);
    const current = new TextDecoder().decode(await fs.readFile(`${dir}/index.json`));
    if (damage === "missing") {
      await fs.remove(`${dir}/index.json`);
    } else {
      await rewriteIndex(fs, dir, (index) => ({
        ...index,
        rounds: index.rounds.map((round, k) =>
          k === 3 ? { ...round, byteOffset: round.byteOffset + 1 } : round
        ),
      }));
    }
    fs.indexWrites();
    const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
    await session.readHistory();
    assert.equal(fs.indexWrites(), 1, damage);
    await session.close();
    assert.equal(fs.indexWrites(), 0, damage);
    // Rebuilt as the index the history makes.
    assert.equal(new TextDecoder().decode(await fs.readFile(`${dir}/index.json`)), current, damage);
  }
});

test("a prefix index.json listing rounds past the messages it covers is rebuilt by a writer", async () => {
  const { fs, dir } = await indexedSession(6);
  const current = new TextDecoder().decode(await fs.readFile(`${dir}/index.json`));
  // It claims the first 4 messages (with their true byte length) but lists all 6 rounds.
  const log = await fs.readFile(`${dir}/messages.jsonl`);
  let lines = 0;
  let bytes = 0;
  while (lines < 4) if (log[bytes++] === 0x0a) lines++;
  await rewriteIndex(fs, dir, (index) => ({ ...index, messageCount: 4, bytes }));
  fs.indexWrites();
  const session = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  const page = await session.readHistory();
  assert.equal(page.total, 18);
  assert.equal(fs.indexWrites(), 1, "the page read rebuilds it");
  await session.close();
  assert.equal(new TextDecoder().decode(await fs.readFile(`${dir}/index.json`)), current);
});

test("close() publishes a lag a writer adopted from a process that stopped before close()", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit([user("first")]);
  await session.append([user("second")]);
  await session.append([user("third")]);
  const dir = session.getSessionPath();
  const covered = async (disk: MemoryFs) => {
    const meta = JSON.parse(new TextDecoder().decode(await disk.readFile(`${dir}/meta.json`)));
    return (await readRoundIndex(disk, dir, false, meta))?.messageCount;
  };
  // The process stops here, without close(): what it left on disk, for the next process.
  const left = fs.clone();
  await session.close();
  assert.equal(await covered(left), 1, "the index lags the committed history");
  // A read-only manager never writes, at close() either.
  const reader = await new SessionStore({ fs: left, agentDir: AGENT }).open(dir, {
    readOnly: true,
  });
  assert.equal((await reader.readHistory()).total, 3);
  await reader.close();
  assert.equal(await covered(left), 1, "read-only");
  // A writer adopts the lagging prefix, reads a page from it and brings it up to date at close().
  const writer = await new SessionStore({ fs: left, agentDir: AGENT }).open(dir);
  assert.equal((await writer.readHistory()).total, 3);
  await writer.close();
  assert.equal(await covered(left), 3, "a session at rest has a complete index");
});

test("a prefix index.json ending just before the first titled message is adopted, not rewritten", async () => {
  const fs = new RenameLog();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  // The first user message has no text: the fallback title is that of message 2.
  const history = [imageOnly(), assistant("a picture")];
  await session.commit(history);
  const dir = session.getSessionPath();
  const prefix = await fs.readFile(`${dir}/index.json`);
  history.push(user("what is in it?"), assistant("a cat"));
  await session.commit(history); // the index lags by one round: not republished
  await session.close();
  // As a writer that stopped before close() left it: an index of the first two messages, which
  // records no title (none of them has one).
  await fs.writeFile(`${dir}/index.json`, prefix);
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(`${dir}/meta.json`)));
  const index = await readRoundIndex(fs, dir, false, meta);
  assert.equal(index?.messageCount, 2);
  assert.equal(index?.fallbackTitle, null);
  fs.indexWrites();
  const reopened = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
  assert.equal(reopened.getHeader().title?.text, "what is in it?");
  const page = await reopened.readHistory();
  assert.deepEqual(page.messages, history);
  assert.equal(fs.indexWrites(), 0, "a valid prefix index is not rewritten by a page read");
  await reopened.close();
  assert.equal(fs.indexWrites(), 1, "close() publishes the lag");
});
