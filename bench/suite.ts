/**
 * The benchmark suite: builds the synthetic sessions once per size, runs every case over them
 * (ours and its floor interleaved), and returns a `Report`. Runtime-free: everything that needs
 * a runtime (floors on real files, child processes, the peer) comes in through `SuiteEnv`, so
 * the same suite runs over the memory adapter in the smoke test.
 *
 * @module
 */
import { type FileSystem, NotFound, SessionStore } from "../mod.ts";
import { join } from "../src/port/path.ts";
import { syntheticHistory } from "./data.ts";
import type {
  CaseRow,
  GrowthSpec,
  MemoryRow,
  Mode,
  PeerRow,
  PrimitiveRow,
  Report,
  SuiteConfig,
  SuiteEnv,
} from "./types.ts";
import { globalCases, sizeCases } from "./cases.ts";
import { type CaseContext, count, type SizeFixture } from "./context.ts";

/** The configuration of each mode. */
export function configFor(mode: Mode): SuiteConfig {
  switch (mode) {
    case "full":
      return {
        mode,
        sizes: [100, 10_000, 100_000],
        listSessions: 1_000,
        listSessionMessages: 20,
        listLargeSessionMessages: 950,
        peerListSessions: 500,
        peerListSessionBytes: 240 * 1024,
        migrationBytes: [100 * 1024, 5 * 1024 * 1024, 50 * 1024 * 1024],
        pruneDirs: 10_000,
        runtimeContexts: 2_000,
        plans: {
          micro: { warmup: 50, batches: 20, batchSize: 50, maxMs: 8_000 },
          write: { warmup: 10, batches: 10, batchSize: 20, maxMs: 12_000 },
          slow: { warmup: 2, batches: 6, batchSize: 3, maxMs: 10_000 },
          huge: { warmup: 1, batches: 8, batchSize: 1, maxMs: 45_000 },
        },
      };
    case "quick":
      return {
        mode,
        sizes: [100, 1_000, 10_000],
        listSessions: 100,
        listSessionMessages: 20,
        listLargeSessionMessages: 950,
        peerListSessions: 50,
        peerListSessionBytes: 240 * 1024,
        migrationBytes: [100 * 1024, 1024 * 1024],
        pruneDirs: 500,
        runtimeContexts: 500,
        plans: {
          micro: { warmup: 10, batches: 6, batchSize: 20, maxMs: 1_000 },
          write: { warmup: 3, batches: 4, batchSize: 8, maxMs: 1_500 },
          slow: { warmup: 1, batches: 2, batchSize: 2, maxMs: 2_000 },
          huge: { warmup: 0, batches: 2, batchSize: 1, maxMs: 3_000 },
        },
      };
    case "tiny":
      return {
        mode,
        sizes: [8, 24],
        listSessions: 4,
        listSessionMessages: 4,
        listLargeSessionMessages: 12,
        peerListSessions: 2,
        peerListSessionBytes: 8 * 1024,
        migrationBytes: [4 * 1024, 16 * 1024],
        pruneDirs: 6,
        runtimeContexts: 3,
        plans: {
          micro: { warmup: 1, batches: 2, batchSize: 1 },
          write: { warmup: 1, batches: 2, batchSize: 1 },
          slow: { warmup: 0, batches: 2, batchSize: 1 },
          huge: { warmup: 0, batches: 2, batchSize: 1 },
        },
      };
  }
}

async function buildFixture(ctx: CaseContext, size: number): Promise<SizeFixture> {
  const { fs } = ctx.env;
  const history = syntheticHistory(size);
  const collection = await ctx.dir("sessions", `read-${size}`);
  const session = await ctx.store("ordered", collection).create(ctx.cwd);
  await session.commit(history);
  await session.close();
  const sessionDir = join(collection, session.id);
  const log = await fs.readFile(join(sessionDir, "messages.jsonl"));
  const offsets = [0];
  for (let at = log.indexOf(10); at >= 0; at = log.indexOf(10, at + 1)) offsets.push(at + 1);
  const roundStarts: number[] = [];
  history.forEach((message, index) => {
    if (message.role === "user") roundStarts.push(index);
  });
  const metaBytes = await fs.readFile(join(sessionDir, "meta.json"));
  return {
    size,
    history,
    offsets,
    roundStarts,
    sessionDir,
    id: session.id,
    bytes: log.length,
    metaBytes,
    copy: async (name) => {
      const target = join(await ctx.dir("sessions", `${name}-${size}`), session.id);
      await fs.mkdir(target, { mode: 0o700 });
      for (const file of ["meta.json", "messages.jsonl", "index.json"]) {
        const bytes = file === "messages.jsonl" ? log : await fs.readFile(join(sessionDir, file));
        await fs.writeFile(join(target, file), bytes, { mode: 0o600 });
      }
      return target;
    },
  };
}

async function removeIfPresent(fs: FileSystem, path: string): Promise<void> {
  try {
    await fs.remove(path, { recursive: true });
  } catch (error) {
    if (!(error instanceof NotFound)) throw error;
  }
}

/** Runs the whole suite in `env` with `config`. */
export async function runSuite(env: SuiteEnv, config: SuiteConfig): Promise<Report> {
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const rows: CaseRow[] = [];
  const memory: MemoryRow[] = [];
  const peer: PeerRow[] = [];
  const primitives: PrimitiveRow[] = [];
  const skipped: string[] = [];
  const log = env.log ?? (() => {});
  const cwdPath = join(env.workDir, "cwd");
  await env.fs.mkdir(cwdPath, { recursive: true });
  const cwd = await env.fs.realPath(cwdPath);
  const ctx: CaseContext = {
    env,
    config,
    cwd,
    rows,
    store: (durability, sessionDir) =>
      new SessionStore({
        fs: env.fs,
        sha256: env.sha256,
        agentDir: join(env.workDir, "agent"),
        durability,
        ...(sessionDir === undefined ? {} : { sessionDir }),
      }),
    dir: async (...parts) => {
      const path = join(env.workDir, ...parts);
      await removeIfPresent(env.fs, path);
      await env.fs.mkdir(path, { recursive: true, mode: 0o700 });
      return path;
    },
    drop: (...parts) => removeIfPresent(env.fs, join(env.workDir, ...parts)),
    planFor: (estimateMs) =>
      estimateMs < 1
        ? config.plans.micro
        : estimateMs < 10
        ? config.plans.write
        : estimateMs < 300
        ? config.plans.slow
        : config.plans.huge,
    row: (row) => {
      rows.push(row);
      const ratio = row.floor === undefined
        ? ""
        : ` ×${(row.ours.median / row.floor.median).toFixed(2)}`;
      log(`  ${row.op} @ ${row.sizeLabel}: ${row.ours.median.toFixed(3)} ms${ratio}`);
    },
    memory: (row) => memory.push(row),
    peer: (row) => peer.push(row),
    primitive: (row) => primitives.push(row),
    skip: (what, why) => {
      skipped.push(`${what}: ${why}`);
      log(`  skipped ${what}: ${why}`);
    },
    selected: (name) => env.only === undefined || env.only.some((part) => name.includes(part)),
    log,
  };
  const growth: GrowthSpec[] = [];
  for (const c of [...sizeCases, ...globalCases]) growth.push(...(c.growth ?? []));

  for (const size of config.sizes) {
    const selected = sizeCases.filter((c) => ctx.selected(c.name));
    if (selected.length === 0) break;
    log(`size ${count(size)} messages: building the session`);
    const fixture = await buildFixture(ctx, size);
    for (const c of selected) {
      log(`${c.name} @ ${count(size)}`);
      await c.run(ctx, fixture);
    }
    await ctx.drop("sessions");
  }
  for (const c of globalCases) {
    if (!ctx.selected(c.name)) continue;
    log(c.name);
    await c.run(ctx);
  }
  const peerStatus = env.peer === undefined
    ? "not measured"
    : "label" in env.peer
    ? env.peer.label
    : `not measured: ${env.peer.unavailable}`;
  return {
    mode: config.mode,
    machine: env.machine,
    floors: env.floors.name,
    rows,
    growth,
    memory,
    peer,
    primitives,
    peerStatus,
    skipped,
    startedAt,
    durationMs: performance.now() - started,
  };
}
