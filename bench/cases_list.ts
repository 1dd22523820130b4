/**
 * Listing cases: fast list and full list over a collection of sessions, the fast list of one
 * session of each history size (it must not grow with the history), and our fast list against
 * the peer's list over the same sessions.
 *
 * @module
 */
import { type FileSystem, SessionStore } from "../mod.ts";
import { join } from "../src/port/path.ts";
import { syntheticHistory } from "./data.ts";
import { BenchError, measurePair, type Stats } from "./harness.ts";
import { CountingFs } from "./counting_fs.ts";
import {
  type CaseContext,
  count,
  type GlobalCase,
  interleavePeer,
  type SizeCase,
} from "./context.ts";
import { formatMs } from "./report.ts";
import { HEAD_BYTES } from "../src/loop/storage.ts";

/** Operation names. */
export const LIST_OP = {
  fast: "fast list",
  fastRepeated: "fast list, repeated",
  full: "full list",
  fastOne: "fast list of one session",
  fastLarge: "fast list of large sessions",
  fastLargeTwoFiles: "fast list of large sessions, two-file floor",
} as const;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The fast list's target over sessions of about 1 MB: within 3× of reading their meta.json raw. */
export const LARGE_LIST_MAX_RATIO = 3;

/**
 * Adds `copies` copies of the session directory `source` to `collection`, under fresh ids: its
 * log and index as they are (or `index` in place of its index.json), and its meta.json with the
 * new id, private like a saved session's files. The bytes a save would write, in a fraction of
 * the time (a large collection of large sessions is built in seconds).
 */
export async function addCopies(
  fs: FileSystem,
  source: string,
  collection: string,
  copies: number,
  index?: Uint8Array,
): Promise<void> {
  const log = await fs.readFile(join(source, "messages.jsonl"));
  const indexBytes = index ?? await fs.readFile(join(source, "index.json"));
  const meta = JSON.parse(decoder.decode(await fs.readFile(join(source, "meta.json"))));
  for (let i = 0; i < copies; i++) {
    const id = globalThis.crypto.randomUUID();
    const copy = join(collection, id);
    await fs.mkdir(copy, { mode: 0o700 });
    await fs.writeFile(join(copy, "messages.jsonl"), log, { mode: 0o600 });
    await fs.writeFile(join(copy, "index.json"), indexBytes, { mode: 0o600 });
    const copyMeta = { ...meta, header: { ...meta.header, id } };
    await fs.writeFile(join(copy, "meta.json"), encoder.encode(`${JSON.stringify(copyMeta)}\n`), {
      mode: 0o600,
    });
  }
}

/** `bytes` in MB (one decimal) from 1 MB on, in KB below. */
function sizeText(bytes: number): string {
  return bytes >= 1048576 ? `${(bytes / 1048576).toFixed(1)} MB` : `${Math.round(bytes / 1024)} KB`;
}

/** Creates `sessions` sessions of `messages` messages each in a fresh collection `name`. */
async function buildCollection(
  ctx: CaseContext,
  name: string,
  sessions: number,
  messages: number,
): Promise<string> {
  const collection = await ctx.dir("collections", name);
  const store = ctx.store("ordered", collection);
  for (let i = 0; i < sessions; i++) {
    const session = await store.create(ctx.cwd);
    await session.commit(syntheticHistory(messages, i + 1));
    await session.close();
  }
  return collection;
}

async function listed(
  store: SessionStore,
  collection: string,
  fast: boolean,
  expected: number,
): Promise<void> {
  const sessions = await store.list(undefined, collection, { fast });
  if (sessions.length !== expected) {
    throw new BenchError(`listed ${sessions.length} sessions, expected ${expected}`);
  }
}

/**
 * Measures fast and full list of `collection` against their floors. Each listing runs on a fresh
 * store (a first listing: nothing derived is remembered); `repeated` also measures a fast listing
 * by a store that listed the collection before (a picker refreshing).
 */
async function measureLists(
  ctx: CaseContext,
  collection: string,
  sessions: number,
  sizeLabel: string,
  note: string,
  repeated = false,
): Promise<void> {
  if (repeated) {
    const warm = ctx.store("full");
    await listed(warm, collection, true, sessions);
    const stats = await measurePair(
      { run: () => listed(warm, collection, true, sessions) },
      { run: () => ctx.env.floors.listCollection(collection, false) },
      ctx.planFor(sessions * 0.1),
    );
    ctx.row({
      op: LIST_OP.fastRepeated,
      size: sessions,
      sizeLabel,
      ...stats,
      maxRatio: undefined,
      note:
        `${note}; the same store again: reads each meta.json and the kind of index.json; floor: readdir + ` +
        "read and parse each meta.json",
    });
  }
  for (const fast of [true, false]) {
    const stats = await measurePair(
      { run: () => listed(ctx.store("full"), collection, fast, sessions) },
      { run: () => ctx.env.floors.listCollection(collection, !fast) },
      ctx.planFor(fast ? sessions * 0.2 : sessions * 2),
    );
    ctx.row({
      op: fast ? LIST_OP.fast : LIST_OP.full,
      size: sessions,
      sizeLabel,
      ...stats,
      maxRatio: undefined,
      note: `${note}; floor: readdir + ${
        fast ? "read and parse each meta.json" : "meta.json + read, hash and parse each log"
      }`,
    });
  }
}

/** Fast and full list over the listing collection (1,000 small sessions in a full run). */
const collectionCase: GlobalCase = {
  name: "list",
  async run(ctx) {
    const { listSessions, listSessionMessages } = ctx.config;
    ctx.log(`  building ${count(listSessions)} sessions of ${listSessionMessages} messages`);
    const collection = await buildCollection(ctx, "list", listSessions, listSessionMessages);
    await measureLists(
      ctx,
      collection,
      listSessions,
      `${count(listSessions)} sessions`,
      `${listSessionMessages} messages each`,
      true,
    );
    const counting = new CountingFs(ctx.env.fs);
    const store = new SessionStore({
      fs: counting,
      sha256: ctx.env.sha256,
      agentDir: join(ctx.env.workDir, "agent"),
    });
    await listed(store, collection, true, listSessions);
    ctx.memory({
      what: "bytes read by a fast list, per session",
      size: `${count(listSessions)} sessions of ${listSessionMessages} msgs`,
      value: `${count(Math.round(counting.counts.bytesRead / listSessions))} B in ${
        (counting.counts.filesOpened / listSessions).toFixed(1)
      } files`,
    });
    await ctx.drop("collections", "list");
  },
};

/**
 * The fast list's target case: `listSessions` sessions of `listLargeSessionMessages` messages
 * (about 1 MB each in a full run), listed by a fresh store each time against reading their
 * meta.json files raw, once with fallback titles (recorded by each index.json) and once with
 * stored titles. Copies of one saved session make up the collection.
 */
const largeListCase: GlobalCase = {
  name: "list-large",
  async run(ctx) {
    const { listSessions: sessions, listLargeSessionMessages: messages } = ctx.config;
    const fs = ctx.env.fs;
    for (const titled of [false, true]) {
      const name = titled ? "list-large-titled" : "list-large";
      const collection = await ctx.dir("collections", name);
      const session = await ctx.store("ordered", collection).create(ctx.cwd);
      await session.commit(syntheticHistory(messages, 1));
      if (titled) {
        await session.setTitle({ text: "A stored title", source: "user", messageIndices: [] });
      }
      await session.close();
      const source = join(collection, session.id);
      const logBytes = (await fs.stat(join(source, "messages.jsonl"))).size;
      ctx.log(
        `  building ${count(sessions)} sessions of ${count(messages)} messages (${
          titled ? "stored titles" : "fallback titles"
        })`,
      );
      await addCopies(fs, source, collection, sessions - 1);
      const sizeLabel = `${count(sessions)} sessions of ${sizeText(logBytes)}, ${
        titled ? "stored titles" : "fallback titles"
      }`;
      const about = `${count(messages)} messages each; a fresh store each time; ${
        titled ? "the title is in meta.json" : "each index.json records the fallback title"
      }`;
      const ours = { run: () => listed(ctx.store("full"), collection, true, sessions) };
      ctx.row({
        op: LIST_OP.fastLarge,
        size: sessions,
        sizeLabel,
        ...await measurePair(
          ours,
          { run: () => ctx.env.floors.listCollection(collection, false) },
          ctx.planFor(sessions * 0.2),
        ),
        maxRatio: LARGE_LIST_MAX_RATIO,
        note: `${about}; floor: readdir + read and parse each meta.json`,
      });
      // A listing entry carries its user-message count, which only index.json holds: this floor
      // reads what an entry needs at the least, where the one above reads meta.json alone.
      ctx.row({
        op: LIST_OP.fastLargeTwoFiles,
        size: sessions,
        sizeLabel,
        ...await measurePair(
          ours,
          { run: () => ctx.env.floors.listCollectionHeads(collection) },
          ctx.planFor(sessions * 0.2),
        ),
        maxRatio: undefined,
        note: `${about}; floor: readdir + read and parse each meta.json + one read of the first ` +
          `${count(HEAD_BYTES)} B of each index.json, its round count found`,
      });
      await ctx.drop("collections", name);
    }
  },
};

/**
 * The fast list of the collection holding one session of each size: its cost and the bytes it
 * reads must not grow with the history.
 */
export const fastListSizeCase: SizeCase = {
  name: "list-size",
  growth: [{
    op: LIST_OP.fastOne,
    expect: "flat",
    maxGrowth: 1.5,
    byFloor: true,
    // Up to about 1,500 messages index.json is read whole in one call; from there on it is read
    // by its head (an open, one read, a close), the same few bytes whatever the history's length.
    from: 10_000,
    why: "a smaller index.json is read whole, in one call fewer",
  }],
  async run(ctx, fx) {
    const collection = join(fx.sessionDir, "..");
    const stats = await measurePair(
      { run: () => listed(ctx.store("full"), collection, true, 1) },
      { run: () => ctx.env.floors.listCollection(collection, false) },
      ctx.planFor(0.5),
    );
    ctx.row({
      op: LIST_OP.fastOne,
      size: fx.size,
      sizeLabel: `${count(fx.size)} msgs`,
      ...stats,
      maxRatio: undefined,
      note: "floor: readdir + read and parse meta.json",
    });
    const counting = new CountingFs(ctx.env.fs);
    const countingStore = new SessionStore({
      fs: counting,
      sha256: ctx.env.sha256,
      agentDir: join(ctx.env.workDir, "agent"),
    });
    await listed(countingStore, collection, true, 1);
    const limit = 64 * 1024;
    ctx.memory({
      what: "bytes read by a fast list of one session",
      size: `${count(fx.size)} msgs`,
      value: `${count(counting.counts.bytesRead)} B in ${counting.counts.filesOpened} files`,
      limit: `≤ ${count(limit)} B at every size`,
      pass: counting.counts.bytesRead <= limit,
    });
  },
};

/** Our fast list against the peer's list over the same sessions (500 of ~240 KB in a full run). */
const peerListCase: GlobalCase = {
  name: "peer-list",
  async run(ctx) {
    const { peerListSessions: sessions, peerListSessionBytes: bytes } = ctx.config;
    const messages = Math.max(4, Math.round(bytes / 1100));
    ctx.log(`  building ${count(sessions)} sessions of ${messages} messages`);
    const collection = await buildCollection(ctx, "peer-list", sessions, messages);
    const sizeLabel = `${count(sessions)} sessions × ${count(messages)} msgs`;
    await measureLists(
      ctx,
      collection,
      sessions,
      sizeLabel,
      `~${Math.round(bytes / 1024)} KB each`,
    );
    const peer = ctx.env.peer;
    if (peer === undefined || !("label" in peer)) {
      await ctx.drop("collections", "peer-list");
      return;
    }
    const peerDir = await ctx.dir("peer", "list");
    const names = (await ctx.env.fs.readDir(collection))
      .filter((entry) => entry.kind === "directory" && !entry.name.startsWith("."))
      .map((entry) => entry.name);
    const built = await peer.run({
      op: "build",
      sources: names.map((name) => ({
        messages: join(collection, name, "messages.jsonl"),
        file: join(peerDir, `${name}.jsonl`),
        cwd: ctx.cwd,
      })),
    });
    // Ours and the peer alternate round by round: the machine's load hits both alike. Ours lists
    // with a fresh store each time, as a first listing in a process.
    const tiny = ctx.config.mode === "tiny";
    const peerFigure = (stats: Stats) =>
      `${formatMs(stats.median)} (${
        ((built.facts?.bytes ?? 0) / 1048576).toFixed(0)
      } MB read whole)`;
    for (const fast of [true, false]) {
      const { ours, peer: list } = await interleavePeer(
        peer,
        { run: () => listed(ctx.store("full"), collection, fast, sessions) },
        { op: "list", dir: peerDir, cwd: ctx.cwd },
        tiny ? 2 : 3,
        tiny ? 1 : 2,
        1,
      );
      const factor = list.median / ours.median;
      ctx.peer(
        fast
          ? {
            what: "fast list vs the peer's list",
            size: sizeLabel,
            ours: formatMs(ours.median),
            peer: peerFigure(list),
            factor,
            target: "≥ 10× faster",
            pass: factor >= 10,
          }
          : {
            what: "full list (ours verifies every checksum and message) vs the peer's list",
            size: sizeLabel,
            ours: formatMs(ours.median),
            peer: peerFigure(list),
            factor,
          },
      );
    }
    await ctx.drop("peer", "list");
    await ctx.drop("collections", "peer-list");
  },
};

/** The listing cases run once per suite. */
export const listCases: readonly GlobalCase[] = [collectionCase, largeListCase, peerListCase];
