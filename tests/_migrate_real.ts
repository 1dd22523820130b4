// A paced migration on a real adapter: the staged log is written in many batches, synced in the
// background through its second handle, and published intact (shared by the Node and Deno tests).
import assert from "node:assert/strict";
import type { FileSystem } from "../src/port/fs.ts";
import type { Sha256Factory } from "../src/port/sha256.ts";
import { join } from "../src/port/path.ts";
import { newSessionHeader } from "../src/loop/records/mod.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { migrateLegacySession } from "../src/loop/legacy.ts";
import { conversation } from "./_fixtures.ts";

/** Migrates a legacy session in `base` (a fresh temp directory) with small pacing and checks it. */
export async function pacedMigrationOnRealFs(
  fs: FileSystem,
  sha256: Sha256Factory,
  base: string,
): Promise<void> {
  await fs.mkdir(join(base, "work"), { recursive: true });
  const cwd = await fs.realPath(join(base, "work"));
  const agentDir = join(base, "agent");
  const collection = join(agentDir, "sessions", workspaceHash(cwd));
  await fs.mkdir(collection, { recursive: true });
  const id = globalThis.crypto.randomUUID();
  const history = conversation(60);
  const header = newSessionHeader({ id, cwd, now: new Date().toISOString() });
  const lines = [header, ...history].map((record) => JSON.stringify(record) + "\n");
  const legacy = join(collection, `${id}.jsonl`);
  await fs.writeFile(legacy, new TextEncoder().encode(lines.join("")));
  const syncs: string[] = [];
  const counted = countingSyncs(fs, syncs);
  const store = new SessionStore({ fs: counted, sha256, agentDir });
  const { dir, meta } = await migrateLegacySession(store.context, legacy, {
    readChunk: 300,
    writeBatch: 700,
    syncEvery: 1500,
  });
  assert.equal(meta.messageCount, history.length);
  const logSyncs = syncs.filter((path) => path.endsWith("messages.jsonl")).length;
  // At least one sync behind the writes (the first always starts; later ones are skipped while
  // one is in flight, so their number depends on the disk) and the final one.
  assert.ok(logSyncs >= 2, `staged log synced ${logSyncs} times`);
  // Every message line kept its bytes, in order, and nothing else was written.
  const log = new TextDecoder().decode(await fs.readFile(join(dir, "messages.jsonl")));
  assert.equal(log, lines.slice(1).join(""));
  const session = await store.open(dir, { readOnly: true });
  try {
    assert.deepEqual(session.messages, history);
  } finally {
    await session.close();
  }
}

/** `fs` with every handle's `sync()` recorded (by path) in `syncs`. */
function countingSyncs(fs: FileSystem, syncs: string[]): FileSystem {
  return new Proxy(fs, {
    get(target, key) {
      if (key === "open") {
        return async (path: string, options?: Parameters<FileSystem["open"]>[1]) => {
          const handle = await target.open(path, options);
          return new Proxy(handle, {
            get(inner, name) {
              if (name === "sync") {
                return () => {
                  syncs.push(path);
                  return inner.sync();
                };
              }
              const value = Reflect.get(inner, name, inner);
              return typeof value === "function" ? value.bind(inner) : value;
            },
          });
        };
      }
      const value = Reflect.get(target, key, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}
