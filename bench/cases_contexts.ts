/**
 * An append to a session whose meta.json carries a large header: one runtime context snapshot per
 * user turn (rendered context of ~1.5 KB each), as a host records them. meta.json holds the
 * header, so every save republishes it whole; the arrays a save does not replace are written
 * from their kept bytes rather than serialized again.
 *
 * @module
 */
import type { Durability, Message, RuntimeContextSnapshot } from "../mod.ts";
import { join } from "../src/port/path.ts";
import { SyntheticConversation, syntheticHistory } from "./data.ts";
import { BenchError, measurePair } from "./harness.ts";
import { count, type GlobalCase, lineOf } from "./context.ts";

/** The operation name of the case in `durability`. */
export const CONTEXTS_OP = (durability: Durability): string =>
  `append one message, large meta.json (${durability})`;

/** ~1.5 KB of rendered runtime context: the environment and instructions a host injects. */
function renderedContext(turn: number): string {
  const lines = [`Runtime context for turn ${turn}.`];
  for (let i = 0; lines.join("\n").length < 1500; i++) {
    lines.push(
      `- workspace fact ${i}: /home/user/project/src/module_${(turn + i) % 97}.ts is tracked`,
    );
  }
  return lines.join("\n");
}

/** The case: `config.runtimeContexts` snapshots, appends of one message against their floor. */
export const runtimeContextsCase: GlobalCase = {
  name: "runtime-contexts",
  async run(ctx) {
    const { fs } = ctx.env;
    const wanted = ctx.config.runtimeContexts;
    // Enough history for one snapshot per user turn (about two in five messages are users).
    const history: Message[] = syntheticHistory(wanted * 3, 11);
    const users = history.filter((message) => message.role === "user").length;
    if (users < wanted) throw new BenchError(`Only ${users} user turns for ${wanted} contexts`);
    const contexts = Array.from({ length: wanted }, (_, turn) => ({
      userTurn: turn,
      content: renderedContext(turn),
      timestamp: 1_700_000_000_000 + turn,
    })) as RuntimeContextSnapshot[];
    for (const durability of ["full", "ordered"] as const) {
      const collection = await ctx.dir("contexts", durability);
      const session = await ctx.store(durability, collection).create(ctx.cwd);
      const floorDir = await ctx.dir("floor", `contexts-${durability}`);
      const floor = await ctx.env.floors.commitLog(floorDir, durability);
      try {
        await session.commit(history, contexts);
        // The floor publishes a file of the very size of this meta.json.
        const metaBytes = await fs.readFile(join(session.getSessionPath(), "meta.json"));
        const ours = new SyntheticConversation(12).continueAfter(history.at(-1)?.role);
        const theirs = new SyntheticConversation(12).continueAfter(history.at(-1)?.role);
        let next: Message[] = [];
        let line: Uint8Array = new Uint8Array(0);
        const stats = await measurePair(
          {
            before: () => {
              next = [ours.nextPlain()];
            },
            run: () => session.append(next),
          },
          {
            before: () => {
              line = lineOf(theirs.nextPlain());
            },
            run: () => floor.commit(line, metaBytes),
          },
          ctx.planFor(durability === "full" ? 8 : 5),
        );
        const megabytes = (metaBytes.length / 1e6).toFixed(1);
        ctx.row({
          op: CONTEXTS_OP(durability),
          size: wanted,
          sizeLabel: `${count(wanted)} runtime contexts, ${megabytes} MB meta.json`,
          ...stats,
          maxRatio: undefined,
          note: `one snapshot per user turn (~1.5 KB each), kept by the append; floor: append` +
            `${durability === "full" ? " + fsync" : ""} + atomic replace of a file of that size`,
        });
      } finally {
        await floor.close();
        await session.close();
        await ctx.drop("floor", `contexts-${durability}`);
        await ctx.drop("contexts", durability);
      }
    }
  },
};
