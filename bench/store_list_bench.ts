// Fast listing against its floor: 1,000 sessions of ~1 MB each, listed with `{ fast: true }`,
// against reading their 1,000 meta.json files raw (readdir + one readFile each, no parse), 32 at a
// time like the listing (the floor) and one after another (for comparison).
//
//   npx deno@2.9.6 bench -A bench/store_list_bench.ts
//   LIST_SESSIONS=200 LIST_ADAPTER=node npx deno@2.9.6 bench -A bench/store_list_bench.ts
//
// The summary of each group prints how many times slower than its baseline (the floor) each
// case is; the target for the fast list is within 3x. In the "fallback title" group sessions have
// no stored title and their index.json records the fallback title (as this library writes it): a
// listing reads meta.json and index.json, a repeated one by the same store meta.json and the kind
// of index.json. In the "stored title" group only meta.json and index.json are read. In the
// "unrecorded title" group the index records no title (as written before that field existed): a
// cold listing reads each session's first user message from its log.
//
// `deno task bench` measures the first two groups too ("fast list of large sessions"), each
// listing alternating with its floor in batches, and judges them against the 3x target there.
import { join } from "../src/port/path.ts";
import { type FileSystem, SessionStore, type Sha256Factory } from "../mod.ts";
import { denoFs, denoSha256 } from "../adapters/deno.ts";
import { nodeFs, nodeSha256 } from "../adapters/node.ts";
import { syntheticHistory } from "./data.ts";
import { addCopies } from "./cases_list.ts";
import { encodeRoundIndex, parseRoundIndexText } from "../src/loop/storage.ts";

const SESSIONS = Number(Deno.env.get("LIST_SESSIONS") ?? 1000);
const MESSAGES_PER_SESSION = 950; // ~1 MB of messages.jsonl with the synthetic shape
const node = Deno.env.get("LIST_ADAPTER") === "node";
const fs: FileSystem = node ? nodeFs() : denoFs();
const sha256: Sha256Factory = node ? nodeSha256 : denoSha256;
const decoder = new TextDecoder();

const root = await Deno.makeTempDir({ prefix: "loop-list-bench-" });
const cwd = join(root, "work");
await fs.mkdir(cwd, { recursive: true });

/**
 * Builds a collection of `SESSIONS` copies of one ~1 MB session (fresh ids), with a stored title,
 * a title recorded by its index or no title recorded anywhere.
 */
async function buildCollection(
  name: string,
  title: "stored" | "recorded" | "unrecorded",
): Promise<string> {
  const collection = join(root, name);
  const store = new SessionStore({
    fs,
    sha256,
    agentDir: join(root, "agent"),
    sessionDir: collection,
    durability: "ordered",
  });
  const session = await store.create(cwd);
  await session.commit(syntheticHistory(MESSAGES_PER_SESSION, 1));
  if (title === "stored") {
    await session.setTitle({ text: "A stored title", source: "user", messageIndices: [] });
  }
  await session.close();
  const dir = session.getSessionPath();
  let index: Uint8Array | undefined;
  if (title === "unrecorded") {
    const text = decoder.decode(await fs.readFile(join(dir, "index.json")));
    const { fallbackTitle: _recorded, ...rest } = parseRoundIndexText(text)!;
    index = encodeRoundIndex(rest);
    await fs.writeFile(join(dir, "index.json"), index);
  }
  await addCopies(fs, dir, collection, SESSIONS - 1, index);
  return collection;
}

const fallback = await buildCollection("fallback", "recorded");
const titled = await buildCollection("titled", "stored");
const unrecorded = await buildCollection("unrecorded", "unrecorded");
/** A store whose derived-title cache is warm after its first listing (a picker refreshing). */
const warm = new SessionStore({ fs, sha256, agentDir: join(root, "agent") });

/** How many meta.json files the floor reads at once: the fast list's default concurrency. */
const FLOOR_CONCURRENCY = 32;

/** Reads every session's meta.json raw, `concurrency` files at a time. */
async function rawMetaReads(collection: string, concurrency = FLOOR_CONCURRENCY): Promise<void> {
  const entries = await fs.readDir(collection);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < entries.length) {
      const entry = entries[next++] as (typeof entries)[number];
      await fs.readFile(join(collection, entry.name, "meta.json"));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

async function fastList(store: SessionStore, collection: string): Promise<void> {
  const sessions = await store.list(undefined, collection, { fast: true });
  if (sessions.length !== SESSIONS) throw new Error(`listed ${sessions.length} sessions`);
}

/** A fresh store per listing: nothing derived is cached (the first listing of a process). */
function coldStore(): SessionStore {
  return new SessionStore({ fs, sha256, agentDir: join(root, "agent") });
}

/**
 * The floors of a group over `collection`: its meta.json files read raw 32 at a time (the
 * baseline), and one after another for comparison. Deno needs bench names unique across groups,
 * hence `suffix`.
 */
function floors(group: string, collection: string, suffix: string): void {
  Deno.bench({
    name: `read ${SESSIONS} meta.json raw, ${FLOOR_CONCURRENCY} at a time (floor)${suffix}`,
    group,
    baseline: true,
    async fn() {
      await rawMetaReads(collection);
    },
  });
  Deno.bench({
    name: `read ${SESSIONS} meta.json raw, one after another${suffix}`,
    group,
    async fn() {
      await rawMetaReads(collection, 1);
    },
  });
}

floors("fallback title", fallback, "");
Deno.bench({
  name: `fast list, cold (${SESSIONS} sessions of ~1 MB, fallback titles)`,
  group: "fallback title",
  async fn() {
    await fastList(coldStore(), fallback);
  },
});
Deno.bench({
  name: `fast list, repeated (${SESSIONS} sessions of ~1 MB, fallback titles)`,
  group: "fallback title",
  async fn() {
    await fastList(warm, fallback);
  },
});
floors("stored title", titled, " ");
Deno.bench({
  name: `fast list, cold (${SESSIONS} sessions of ~1 MB, stored titles)`,
  group: "stored title",
  async fn() {
    await fastList(coldStore(), titled);
  },
});

floors("unrecorded title", unrecorded, "  ");
Deno.bench({
  name: `fast list, cold (${SESSIONS} sessions of ~1 MB, titles read from the log)`,
  group: "unrecorded title",
  async fn() {
    await fastList(coldStore(), unrecorded);
  },
});

globalThis.addEventListener("unload", () => {
  Deno.removeSync(root, { recursive: true });
});
