/**
 * Listing cases: fast list and full list over a collection of sessions, the fast list of one
 * session of each history size (it must not grow with the history), and our fast list against
 * the peer's list over the same sessions.
 *
 * @module
 */
import { SessionStore } from "../mod.ts";
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

/** Operation names. */
export const LIST_OP = {
  fast: "fast list",
  fastRepeated: "fast list, repeated",
  full: "full list",
  fastOne: "fast list of one session",
} as const;

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
export const listCases: readonly GlobalCase[] = [collectionCase, peerListCase];
