/**
 * The benchmark cases. Each per-size case measures one of our operations and its floor
 * interleaved (see `harness.ts`) over the size's synthetic session, and records rows, memory
 * figures and peer comparisons on the context.
 *
 * @module
 */
import { type Durability, type Message, SessionStore } from "../mod.ts";
import { join } from "../src/port/path.ts";
import { BenchError, measure, measurePair, type Stats, summarize } from "./harness.ts";
import { SyntheticConversation } from "./data.ts";
import { CountingFs } from "./counting_fs.ts";
import {
  type CaseContext,
  count,
  type GlobalCase,
  interleavePeer,
  lineOf,
  type SizeCase,
  type SizeFixture,
} from "./context.ts";
import { fastListSizeCase, listCases } from "./cases_list.ts";
import { migrationCase } from "./cases_migration.ts";
import { pruneCase } from "./cases_prune.ts";
import { runtimeContextsCase } from "./cases_contexts.ts";
import { formatMs } from "./report.ts";

/** How many saves a burst calls at once. */
const BURST = 10;

/** Operation names (the keys of the growth table). */
export const OP = {
  open: "full open",
  pageDefault: "readHistory() latest page",
  pageDeep: "readHistory(before) deep page",
  commit: (d: Durability): string => `commit one message (${d})`,
  append: (d: Durability): string => `append one message (${d})`,
  burst: (d: Durability): string => `${BURST} appends called at once (${d})`,
  replace: "commit a replacement generation (full)",
  pin: (d: Durability): string => `setPinned (${d})`,
  markRead: (d: Durability): string => `markRead (${d})`,
} as const;

const encoder = new TextEncoder();

/**
 * The log bytes of `messages`, one line each, the fastest way the runtime offers: each line
 * encoded straight into one buffer sized for the worst case (3 bytes per UTF-16 unit), so nothing
 * is joined, copied or counted twice. (Joining the lines into one string first costs several
 * times more when the text holds a character outside Latin-1, as real model output does.)
 */
function joinLines(messages: readonly Message[]): Uint8Array {
  const lines = messages.map((message) => JSON.stringify(message));
  let units = 0;
  for (const line of lines) units += line.length + 1;
  const buffer = new Uint8Array(units * 3);
  let at = 0;
  for (const line of lines) {
    at += encoder.encodeInto(line, buffer.subarray(at)).written;
    buffer[at++] = 0x0a;
  }
  return buffer.subarray(0, at);
}
const DURABILITIES: readonly Durability[] = ["full", "ordered"];

/** `<n> msgs`. */
function msgs(size: number): string {
  return `${count(size)} msgs`;
}

/** Milliseconds of a large-ish operation at `size` messages, roughly, to pick a plan. */
function linearEstimate(size: number, perMessageMs: number): number {
  return size * perMessageMs;
}

/** The recorded row of `op` at `size`, if any. */
export function rowOf(ctx: CaseContext, op: string, size: number): Stats | undefined {
  return ctx.rows.find((row) => row.op === op && row.size === size)?.ours;
}

/** The last role of a history. */
function lastRole(messages: readonly Message[]): string | undefined {
  return messages[messages.length - 1]?.role;
}

const openCase: SizeCase = {
  name: "open",
  growth: [{ op: OP.open, expect: "linear" }],
  async run(ctx, fx) {
    const store = ctx.store("full");
    const file = join(fx.sessionDir, "messages.jsonl");
    const stats = await measurePair(
      {
        run: async () => {
          const session = await store.open(fx.sessionDir, { readOnly: true });
          if (session.getStorageInfo()?.messageCount !== fx.size) {
            throw new BenchError(`open returned the wrong history`);
          }
          await session.close();
        },
      },
      { run: () => ctx.env.floors.readAndParse(file, 0, fx.bytes) },
      ctx.planFor(linearEstimate(fx.size, 0.02)),
    );
    ctx.row({
      op: OP.open,
      size: fx.size,
      sizeLabel: msgs(fx.size),
      ...stats,
      maxRatio: 2,
      bytes: fx.bytes,
      note: "floor: read + native SHA-256 + JSON.parse per line; target ≥ 50% of floor throughput",
    });
  },
};

/** The `before` boundary of the deep page: the round start about 10% into the history. */
function deepBoundary(fx: SizeFixture): number {
  const rounds = fx.roundStarts;
  if (rounds.length <= 3) return fx.size;
  const k = Math.max(3, Math.floor(rounds.length * 0.1));
  return rounds[Math.min(k, rounds.length - 1)] as number;
}

const pageCase: SizeCase = {
  name: "page",
  growth: [
    { op: OP.pageDefault, expect: "flat", maxGrowth: 1.5, byFloor: true },
    { op: OP.pageDeep, expect: "flat", maxGrowth: 1.5, byFloor: true },
  ],
  async run(ctx, fx) {
    const session = await ctx.store("full").open(fx.sessionDir, { readOnly: true });
    const file = join(fx.sessionDir, "messages.jsonl");
    const range = await ctx.env.floors.openRange(file);
    try {
      for (const [op, before] of [[OP.pageDefault, undefined], [OP.pageDeep, deepBoundary(fx)]]) {
        const page = await session.readHistory(before as number | undefined);
        const from = fx.offsets[page.start] as number;
        const length = (fx.offsets[page.end] as number) - from;
        const stats = await measurePair(
          { run: () => session.readHistory(before as number | undefined) },
          { run: () => range.read(from, length) },
          ctx.planFor(0.1),
        );
        ctx.row({
          op: op as string,
          size: fx.size,
          sizeLabel: msgs(fx.size),
          ...stats,
          maxRatio: 2,
          bytes: length,
          note: `${page.end - page.start} msgs, ${
            count(length)
          } B; floor: one positioned read on the open file + parse`,
        });
      }
    } finally {
      await range.close();
      await session.close();
    }
  },
};

const metadataCase: SizeCase = {
  name: "metadata",
  growth: DURABILITIES.flatMap((d) => [
    { op: OP.pin(d), expect: "flat" as const, maxGrowth: 1.5, byFloor: true },
    { op: OP.markRead(d), expect: "flat" as const, maxGrowth: 1.5, byFloor: true },
  ]),
  async run(ctx, fx) {
    for (const durability of DURABILITIES) {
      const dir = await fx.copy(`meta-${durability}`);
      const session = await ctx.store(durability).open(dir);
      const floorDir = await ctx.dir("floor", `meta-${durability}-${fx.size}`);
      const floorMeta = join(floorDir, "meta.json");
      const replaceFloor = () => ctx.env.floors.atomicReplace(floorMeta, fx.metaBytes, durability);
      await replaceFloor();
      // markRead follows a commit (new output makes the session unread): its floor follows the
      // commit floor of the same messages, so both replace a meta.json the disk has just taken.
      const floorLog = await ctx.env.floors.commitLog(floorDir, durability);
      try {
        let pinned = session.getHeader().pinnedAt !== undefined;
        const pin = await measurePair(
          { run: () => session.setPinned(pinned = !pinned) },
          { run: replaceFloor },
          ctx.planFor(2),
        );
        ctx.row({
          op: OP.pin(durability),
          size: fx.size,
          sizeLabel: msgs(fx.size),
          ...pin,
          maxRatio: 1.3,
          note: "pin and unpin alternately; floor: atomic replace of meta.json-sized file",
        });

        const messages = session.messages;
        const conversation = new SyntheticConversation(202).continueAfter(lastRole(messages));
        const theirs = new SyntheticConversation(202).continueAfter(lastRole(messages));
        let readCount = 0;
        const mark = await measurePair(
          {
            before: async () => {
              // New assistant output makes the session unread again (untimed).
              do messages.push(conversation.nextPlain()); while (lastRole(messages) === "user");
              await session.commit(messages);
              readCount = messages.length;
            },
            run: async () => {
              if (!(await session.markRead(readCount))) throw new BenchError("markRead refused");
            },
          },
          {
            before: async () => {
              // The same new output, through the commit floor (untimed).
              const output: Message[] = [];
              do output.push(theirs.nextPlain()); while (lastRole(output) === "user");
              await floorLog.commit(joinLines(output), fx.metaBytes);
            },
            run: replaceFloor,
          },
          ctx.planFor(2),
        );
        if (session.unread) throw new BenchError("markRead left the session unread");
        ctx.row({
          op: OP.markRead(durability),
          size: fx.size,
          sizeLabel: msgs(fx.size),
          ...mark,
          maxRatio: 1.3,
          note: "after new output (untimed commit); floor: atomic replace, after the untimed " +
            "commit floor of the same output",
        });
      } finally {
        await floorLog.close();
        await session.close();
        await ctx.drop("floor", `meta-${durability}-${fx.size}`);
      }
    }
  },
};

const commitCase: SizeCase = {
  name: "commit",
  growth: DURABILITIES.flatMap((d) =>
    [OP.commit(d), OP.append(d)].map((op) => ({
      op,
      expect: "flat" as const,
      maxGrowth: 1.5,
      byFloor: true,
    }))
  ),
  async run(ctx, fx) {
    for (const durability of DURABILITIES) {
      const dir = await fx.copy(`commit-${durability}`);
      const session = await ctx.store(durability).open(dir);
      const floorDir = await ctx.dir("floor", `commit-${durability}-${fx.size}`);
      const floor = await ctx.env.floors.commitLog(floorDir, durability);
      const messages = session.messages;
      // The same stream on both sides: ours and the floor append the same bytes.
      const ours = new SyntheticConversation(101).continueAfter(lastRole(messages));
      const theirs = new SyntheticConversation(101).continueAfter(lastRole(messages));
      let line: Uint8Array = new Uint8Array(0);
      let appended = 0;
      const floorSubject = {
        before: () => {
          line = lineOf(theirs.nextPlain());
          appended++;
        },
        run: () => floor.commit(line, fx.metaBytes),
      };
      const note = (what: string) =>
        `${count(appended)} ${what} of alternating ~200 B user / ~2 KB assistant messages; ` +
        `floor: append${durability === "full" ? " + fsync" : ""} + atomic replace`;
      try {
        const stats = await measurePair(
          {
            before: () => messages.push(ours.nextPlain()),
            run: () => session.commit(messages),
          },
          floorSubject,
          ctx.planFor(2),
        );
        ctx.row({
          op: OP.commit(durability),
          size: fx.size,
          sizeLabel: msgs(fx.size),
          ...stats,
          maxRatio: 1.3,
          note: note("commits (the complete history each time)"),
        });
        appended = 0;
        let next: Message[] = [];
        const append = await measurePair(
          {
            before: () => {
              next = [ours.nextPlain()];
            },
            run: () => session.append(next),
          },
          floorSubject,
          ctx.planFor(2),
        );
        ctx.row({
          op: OP.append(durability),
          size: fx.size,
          sizeLabel: msgs(fx.size),
          ...append,
          maxRatio: 1.3,
          note: note("appends (the new message only)"),
        });
        // A burst: BURST saves called at once, as a host appending each message of a turn as it
        // comes. They are written together, with one log write and one publish.
        let burst: Message[] = [];
        let burstLine: Uint8Array = new Uint8Array(0);
        const bursts = await measurePair(
          {
            before: () => {
              burst = Array.from({ length: BURST }, () => ours.nextPlain());
            },
            run: () => Promise.all(burst.map((message) => session.append([message]))),
          },
          {
            before: () => {
              burstLine = joinLines(Array.from({ length: BURST }, () => theirs.nextPlain()));
            },
            run: () => floor.commit(burstLine, fx.metaBytes),
          },
          ctx.planFor(2 * 3),
        );
        const one = rowOf(ctx, OP.append(durability), fx.size);
        ctx.row({
          op: OP.burst(durability),
          size: fx.size,
          sizeLabel: msgs(fx.size),
          ...bursts,
          maxRatio: undefined,
          note: `${BURST} appends called at once, written together; floor: one append of the ` +
            `${BURST} messages` +
            `${durability === "full" ? " + fsync" : ""} + atomic replace` +
            (one === undefined
              ? ""
              : `; ${BURST} × the median of one awaited append: ${formatMs(one.median * BURST)}`),
        });
      } finally {
        await floor.close();
        await session.close();
        await ctx.drop("floor", `commit-${durability}-${fx.size}`);
        await ctx.drop("sessions", `commit-${durability}-${fx.size}`);
      }
    }
  },
};

const replaceCase: SizeCase = {
  name: "replace",
  growth: [{ op: OP.replace, expect: "linear" }],
  async run(ctx, fx) {
    const dir = await fx.copy("replace");
    const session = await ctx.store("full").open(dir);
    const floorDir = await ctx.dir("floor", `replace-${fx.size}`);
    const floor = await ctx.env.floors.commitLog(floorDir, "full");
    const messages = session.messages;
    const first = messages[0] as Message;
    let edits = 0;
    try {
      const stats = await measurePair(
        {
          // An edited first message: the whole history is written as a new generation.
          before: () => {
            messages[0] = { ...first, timestamp: first.timestamp + ++edits } as Message;
          },
          run: () => session.commit(messages),
        },
        {
          // The new generation's bytes, and their SHA-256 (meta.json records it), then the commit.
          run: () => {
            const bytes = joinLines(messages);
            ctx.env.sha256().update(bytes).digestHex();
            return floor.commit(bytes, fx.metaBytes);
          },
        },
        ctx.planFor(linearEstimate(fx.size, 0.02)),
      );
      ctx.row({
        op: OP.replace,
        size: fx.size,
        sizeLabel: msgs(fx.size),
        ...stats,
        maxRatio: undefined,
        bytes: fx.bytes,
        note: "first message edited; floor: serialize every line + SHA-256 + append + fsync + " +
          "atomic replace (ours also republishes index.json, which the floor does not)",
      });
    } finally {
      await floor.close();
      await session.close();
      await ctx.drop("floor", `replace-${fx.size}`);
      await ctx.drop("sessions", `replace-${fx.size}`);
    }
  },
};

/** Bytes read by a page read (after the first one) and by the first one after open. */
const boundedReadsCase: SizeCase = {
  name: "memory",
  async run(ctx, fx) {
    const counting = new CountingFs(ctx.env.fs);
    const store = new SessionStore({
      fs: counting,
      sha256: ctx.env.sha256,
      agentDir: join(ctx.env.workDir, "agent"),
    });
    const session = await store.open(fx.sessionDir, { readOnly: true });
    try {
      counting.reset();
      await session.readHistory();
      const first = counting.counts;
      counting.reset();
      await session.readHistory();
      const next = counting.counts;
      counting.reset();
      await session.readHistory(deepBoundary(fx));
      const deep = counting.counts;
      const limit = 64 * 1024;
      ctx.memory({
        what: "bytes read by a page read (latest / deep)",
        size: msgs(fx.size),
        value: `${count(next.bytesRead)} B / ${count(deep.bytesRead)} B`,
        limit: `≤ ${count(limit)} B at every size`,
        pass: next.bytesRead <= limit && deep.bytesRead <= limit,
      });
      ctx.memory({
        what: "bytes read by the first page read after a read-only open (no index.json read)",
        size: msgs(fx.size),
        value: `${count(first.bytesRead)} B`,
      });
      if (ctx.env.heapUsed !== undefined && ctx.env.gc !== undefined) {
        ctx.env.gc();
        const before = ctx.env.heapUsed();
        // Enough pages kept that one page's heap stands out of the collector's noise.
        const pages: unknown[] = [];
        for (let i = 0; i < 100; i++) pages.push(await session.readHistory());
        ctx.env.gc();
        const held = (ctx.env.heapUsed() - before) / pages.length;
        ctx.memory({
          what: "heap held per latest page (100 pages kept, after GC)",
          size: msgs(fx.size),
          value: `${(held / 1024).toFixed(1)} KiB`,
        });
      }
    } finally {
      await session.close();
    }
    const largest = ctx.config.sizes[ctx.config.sizes.length - 1];
    if (fx.size !== largest) return;
    if (ctx.env.peakOpenMemory === undefined) {
      ctx.skip("peak RSS of full open", "no child-process runner in this environment");
      return;
    }
    const peak = await ctx.env.peakOpenMemory(fx.sessionDir);
    const fileMb = fx.bytes / 1048576;
    const peakMb = peak.peakKb / 1024;
    const baseMb = peak.baselineKb / 1024;
    ctx.memory({
      what: "peak RSS of full open (child process, VmHWM)",
      size: `${fileMb.toFixed(1)} MB file, ${msgs(peak.messages)}`,
      value: `${peakMb.toFixed(0)} MB (runtime baseline ${baseMb.toFixed(0)} MB, net ${
        (peakMb - baseMb).toFixed(0)
      } MB = ${((peakMb - baseMb) / fileMb).toFixed(2)}× file)`,
      limit: `≤ 3× file = ${(3 * fileMb).toFixed(0)} MB${
        fileMb < 50 ? " (judged on files of 50 MB or more)" : ""
      }`,
      ...(fileMb < 50 ? {} : { pass: peakMb <= 3 * fileMb }),
    });
  },
};

function mbps(bytes: number, stats: Stats): string {
  return `${(bytes / 1048576 / (stats.median / 1000)).toFixed(0)} MB/s`;
}

/** The same messages through the peer: open, append, and (having none) a page read. */
const peerCase: SizeCase = {
  name: "peer",
  async run(ctx, fx) {
    const peer = ctx.env.peer;
    if (peer === undefined || !("label" in peer)) return;
    const peerDir = await ctx.dir("peer", `size-${fx.size}`);
    const file = join(peerDir, `${fx.id}.jsonl`);
    const built = await peer.run({
      op: "build",
      sources: [{ messages: join(fx.sessionDir, "messages.jsonl"), file, cwd: ctx.cwd }],
    });
    const peerBytes = built.facts?.bytes ?? 0;
    // Ours and the peer alternate round by round: the machine's load hits both alike.
    const estimate = linearEstimate(fx.size, 0.02);
    const store = ctx.store("full");
    const { ours: oursOpen, peer: open } = await interleavePeer(
      peer,
      {
        run: async () => {
          const session = await store.open(fx.sessionDir, { readOnly: true });
          await session.close();
        },
      },
      { op: "open", file },
      ctx.config.mode === "tiny" ? 2 : estimate > 300 ? 3 : 4,
      estimate > 300 ? 1 : estimate > 10 ? 3 : 10,
      estimate > 300 ? 0 : 1,
    );
    const largest = fx.size === ctx.config.sizes[ctx.config.sizes.length - 1];
    const factor = open.median / oursOpen.median;
    ctx.peer({
      what: "full open (ours verifies SHA-256 and validates every message)",
      size: msgs(fx.size),
      ours: `${formatMs(oursOpen.median)} (${mbps(fx.bytes, oursOpen)})`,
      peer: `${formatMs(open.median)} (${mbps(peerBytes, open)})`,
      factor,
      target: "≥ 1.5× faster on the largest history",
      ...(largest ? { pass: factor >= 1.5 } : {}),
    });
    const oursPage = rowOf(ctx, OP.pageDefault, fx.size);
    if (oursPage !== undefined) {
      ctx.peer({
        what: "latest page of history (the peer has no page read: it opens the whole file)",
        size: msgs(fx.size),
        ours: formatMs(oursPage.median),
        peer: formatMs(open.median),
        factor: open.median / oursPage.median,
      });
    }
    // Appends: alternating user / assistant messages, as in our commit case.
    const conversation = new SyntheticConversation(303).continueAfter(fx.history.at(-1)?.role);
    const appendPlan = ctx.planFor(2);
    const appendCount = appendPlan.warmup + appendPlan.batches * appendPlan.batchSize;
    let lines = "";
    for (let i = 0; i < appendCount; i++) lines += `${JSON.stringify(conversation.nextPlain())}\n`;
    const appendFile = join(peerDir, "append.jsonl");
    await ctx.env.fs.writeFile(appendFile, encoder.encode(lines));
    const append = summarize(
      (await peer.run({ op: "append", file, messages: appendFile, warmup: appendPlan.warmup }))
        .samples,
    );
    for (const durability of DURABILITIES) {
      for (
        const [op, what] of [[OP.commit(durability), "commit"], [OP.append(durability), "append"]]
      ) {
        const ours = rowOf(ctx, op as string, fx.size);
        if (ours === undefined) continue;
        ctx.peer({
          what: `the peer's append of one message vs our ${what} (${durability})`,
          size: msgs(fx.size),
          ours: formatMs(ours.median),
          peer: formatMs(append.median),
          factor: append.median / ours.median,
          note: durability === "full"
            ? "the peer never fsyncs and publishes no metadata"
            : "ours publishes meta.json by temp file + rename every time; the peer appends only",
        });
      }
    }
    await ctx.drop("peer", `size-${fx.size}`);
  },
};

/** What single filesystem calls cost on the disk under test (when the floors can tell). */
const diskCase: GlobalCase = {
  name: "disk",
  async run(ctx) {
    const { floors } = ctx.env;
    if (floors.primitives === undefined) return;
    const calls = await floors.primitives(await ctx.dir("disk"));
    try {
      for (const { name, subject } of calls.subjects) {
        ctx.primitive({ what: name, stats: await measure(subject, ctx.planFor(0.5)) });
      }
    } finally {
      await calls.close();
      await ctx.drop("disk");
    }
  },
};

/** Per-size cases, in the order they run (the read-only ones first). */
export const sizeCases: readonly SizeCase[] = [
  openCase,
  pageCase,
  boundedReadsCase,
  fastListSizeCase,
  metadataCase,
  commitCase,
  replaceCase,
  peerCase,
];

/** Cases run once per suite. */
export const globalCases: readonly GlobalCase[] = [
  diskCase,
  ...listCases,
  runtimeContextsCase,
  migrationCase,
  pruneCase,
];
