/**
 * `prune-raw` over a `.loopy_loop/` tree of folded sessions holding raw attempt directories
 * (10,000 in a full run, spread over 20 sessions, two small files each).
 *
 * @module
 */
import { createRootSession, pruneRaw } from "../layout.ts";
import { join } from "../src/port/path.ts";
import { BenchError, measurePair, type Plan } from "./harness.ts";
import { count, type GlobalCase } from "./context.ts";
import { eachLimited } from "./floors.ts";

/** The operation name. */
export const PRUNE_OP = "prune-raw";

const encoder = new TextEncoder();
const STDOUT = encoder.encode(`${JSON.stringify({ type: "event", text: "x".repeat(900) })}\n`);
const RUN = encoder.encode(JSON.stringify({ status: "finished", exit: 0 }));

/** The prune-raw case. */
export const pruneCase: GlobalCase = {
  name: "prune",
  async run(ctx) {
    const { fs } = ctx.env;
    const total = ctx.config.pruneDirs;
    const sessionCount = Math.max(1, Math.min(20, Math.floor(total / 10)));
    const repo = await ctx.dir("prune", "repo");
    const rawDirs: string[] = [];
    for (let i = 0; i < sessionCount; i++) {
      const session = await createRootSession(fs, {
        repoRoot: repo,
        goal: `Benchmark session ${i + 1}`,
        workflowSet: "main",
        workflowContract: {},
        workflowRoster: {},
        harnessCapabilityRoster: {},
      });
      rawDirs.push(session.paths.rawDir);
    }
    const attempts: string[] = [];
    for (let k = 0; attempts.length < total; k++) {
      for (const rawDir of rawDirs) {
        // Numbered from 1001: never the attempt a fresh session reports as running.
        if (attempts.length < total) attempts.push(join(rawDir, `${1001 + k}_outer`));
      }
    }
    const build = async () => {
      for (const rawDir of rawDirs) await fs.mkdir(rawDir, { recursive: true, mode: 0o700 });
      await eachLimited(attempts, 8, async (attempt) => {
        await fs.mkdir(attempt, { mode: 0o700 });
        await fs.writeFile(join(attempt, "stdout.jsonl"), STDOUT, { mode: 0o600 });
        await fs.writeFile(join(attempt, "run.json"), RUN, { mode: 0o600 });
      });
    };
    const loopyRoot = join(repo, ".loopy_loop");
    const plan: Plan = ctx.config.mode === "tiny"
      ? ctx.config.plans.huge
      : { warmup: 0, batches: 2, batchSize: 1 };
    ctx.log(
      `  ${count(total)} raw attempt directories in ${sessionCount} sessions, rebuilt per run`,
    );
    const stats = await measurePair(
      {
        before: build,
        run: async () => {
          const report = await pruneRaw(fs, loopyRoot);
          if (report.count !== total) {
            throw new BenchError(`prune-raw removed ${report.count} of ${total} raw directories`);
          }
        },
      },
      {
        before: build,
        // The trees at once, as many as prune-raw works on at a time (16).
        run: () => eachLimited(rawDirs, 16, (rawDir) => ctx.env.floors.removeTree(rawDir)),
      },
      plan,
    );
    ctx.row({
      op: PRUNE_OP,
      size: total,
      sizeLabel: `${count(total)} raw dirs`,
      ...stats,
      maxRatio: undefined,
      note: "ours renames each entry aside, fsyncs, removes, fsyncs (crash-safe); " +
        "floor: recursive remove of each raw/ tree, 16 at a time, then an fsync of its parent",
    });
    await ctx.drop("prune");
  },
};
