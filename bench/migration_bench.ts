// Migration against its floor: a ~50 MB legacy version-2 session file migrated to a version-3
// directory (full validation, each bare line's bytes kept, hashing, staged and fsynced publish), against
// reading its bytes and writing them once (readFile, then an exclusive create, write and fsync).
//
//   npx deno@2.9.6 bench -A bench/migration_bench.ts
//   MIGRATION_MB=10 MIGRATION_ADAPTER=node npx deno@2.9.6 bench -A bench/migration_bench.ts
//
// The group summary prints how many times slower than the floor the migration is; the target is
// within 2x.
import { join } from "../src/port/path.ts";
import { type FileSystem, newSessionHeader, SessionStore, type Sha256Factory } from "../mod.ts";
import { migrateLegacySession } from "../src/loop/legacy.ts";
import { denoFs, denoSha256 } from "../adapters/deno.ts";
import { nodeFs, nodeSha256 } from "../adapters/node.ts";
import { syntheticHistory } from "./data.ts";

const TARGET_BYTES = Number(Deno.env.get("MIGRATION_MB") ?? 50) * 1_000_000;
const node = Deno.env.get("MIGRATION_ADAPTER") === "node";
const fs: FileSystem = node ? nodeFs() : denoFs();
const sha256: Sha256Factory = node ? nodeSha256 : denoSha256;

const root = await Deno.makeTempDir({ prefix: "loop-migration-bench-" });
const cwd = join(root, "work");
const collection = join(root, "collection");
await fs.mkdir(cwd, { recursive: true });
await fs.mkdir(collection, { recursive: true });

const id = globalThis.crypto.randomUUID();
const history = syntheticHistory(Math.max(2, Math.round(TARGET_BYTES / 1100)), 7);
const header = newSessionHeader({ id, cwd, now: new Date(0).toISOString() });
const legacy = join(collection, `${id}.jsonl`);
await fs.writeFile(
  legacy,
  new TextEncoder().encode([header, ...history].map((r) => JSON.stringify(r)).join("\n") + "\n"),
  { mode: 0o600 },
);
const size = (await fs.stat(legacy)).size;
const published = join(collection, id);
const store = new SessionStore({
  fs,
  sha256,
  agentDir: join(root, "agent"),
  sessionDir: collection,
});
const label = `${(size / 1_000_000).toFixed(1)} MB, ${history.length} messages`;

Deno.bench({
  name: `read and write its bytes once (floor, ${label})`,
  group: "migration",
  baseline: true,
  n: 12,
  warmup: 2,
  async fn(b) {
    const copy = join(collection, "floor-copy");
    await fs.remove(copy).catch(() => undefined);
    b.start();
    const bytes = await fs.readFile(legacy);
    const handle = await fs.open(copy, { createNew: true, write: true, mode: 0o600 });
    await handle.write(bytes);
    await handle.sync();
    await handle.close();
    b.end();
  },
});

Deno.bench({
  name: `migrate the legacy file (${label})`,
  group: "migration",
  n: 12,
  warmup: 2,
  async fn(b) {
    await fs.remove(published, { recursive: true }).catch(() => undefined);
    b.start();
    const result = await migrateLegacySession(store.context, legacy);
    b.end();
    if (result.meta.messageCount !== history.length) throw new Error("lost messages");
  },
});

globalThis.addEventListener("unload", () => {
  Deno.removeSync(root, { recursive: true });
});
