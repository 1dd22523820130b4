/**
 * Migration of a legacy version-2 session file (`<collection>/<id>.jsonl`: a header line, then
 * one message per line) into a version-3 directory, at several file sizes up to 50 MB in a full
 * run.
 *
 * @module
 */
import { type Message, newSessionHeader } from "../mod.ts";
import { migrateLegacySession } from "../src/loop/legacy.ts";
import { join } from "../src/port/path.ts";
import { joinBytes } from "../src/port/bytes.ts";
import { syntheticHistory } from "./data.ts";
import { BenchError, measurePair } from "./harness.ts";
import { count, type GlobalCase } from "./context.ts";

/** The operation name. */
export const MIGRATE_OP = "migrate a legacy v2 file (full)";

const encoder = new TextEncoder();

/** The migration case. */
export const migrationCase: GlobalCase = {
  name: "migration",
  growth: [{ op: MIGRATE_OP, expect: "linear" }],
  async run(ctx) {
    const { fs } = ctx.env;
    for (const target of ctx.config.migrationBytes) {
      const history: Message[] = syntheticHistory(Math.max(2, Math.round(target / 1100)), 7);
      const collection = await ctx.dir("migration", String(target));
      const id = globalThis.crypto.randomUUID();
      const header = newSessionHeader({ id, cwd: ctx.cwd, now: new Date(0).toISOString() });
      const body = encoder.encode(history.map((m) => JSON.stringify(m)).join("\n") + "\n");
      const file = joinBytes([encoder.encode(JSON.stringify(header) + "\n"), body]);
      const legacyPath = join(collection, `${id}.jsonl`);
      await fs.writeFile(legacyPath, file, { mode: 0o600 });
      const published = join(collection, id);
      const store = ctx.store("full", collection);
      const migrate = async () => {
        const result = await migrateLegacySession(store.context, legacyPath);
        if (result.meta.messageCount !== history.length) {
          throw new BenchError(`migration kept ${result.meta.messageCount} messages`);
        }
      };
      // One untimed migration gives the floor the same meta.json and index.json sizes.
      await migrate();
      const meta = await fs.readFile(join(published, "meta.json"));
      const index = await fs.readFile(join(published, "index.json"));
      let floors = 0;
      const floorFinal = () => join(collection, `floor-${floors}`);
      const stats = await measurePair(
        {
          before: () => fs.remove(published, { recursive: true }),
          run: migrate,
        },
        {
          before: async () => {
            // As before ours: the previous output is removed (untimed), so both sides write
            // just after a removal of the same size (this disk writes faster then).
            if (floors > 0) await fs.remove(floorFinal(), { recursive: true });
            floors++;
          },
          // Reading and writing overlap, as in a migration that writes while it reads: the floor
          // is the slower of the two, then the rename that publishes once both are done.
          run: async () => {
            const read = ctx.env.floors.readAndParse(legacyPath, 0, file.length);
            await Promise.all([
              read,
              ctx.env.floors.stagedPublish(
                join(collection, `.floor-staging-${floors}`),
                floorFinal(),
                [
                  { name: "messages.jsonl", data: body },
                  { name: "meta.json", data: meta },
                  { name: "index.json", data: index },
                ],
                "full",
                read,
              ),
            ]);
          },
        },
        ctx.planFor(history.length * 0.03),
      );
      ctx.row({
        op: MIGRATE_OP,
        size: file.length,
        sizeLabel: `${(file.length / 1048576).toFixed(1)} MB (${count(history.length)} msgs)`,
        ...stats,
        maxRatio: undefined,
        bytes: file.length,
        note: "ours validates every message and keeps each bare line's bytes (re-serializing " +
          "only lines that are not bare JSON objects), writing while it reads; floor: read + " +
          "SHA-256 + parse while the 3 files are written in a staging dir, fsync, rename, fsync",
      });
      await ctx.drop("migration", String(target));
    }
  },
};
