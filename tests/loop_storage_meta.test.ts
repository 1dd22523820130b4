import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { MemoryFs } from "../adapters/memory.ts";
import {
  type EncodedArrays,
  encodeStorageMeta,
  encodeStorageMetaReusing,
  type StorageMeta,
} from "../src/loop/storage.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation, user } from "./_fixtures.ts";
import { runsOf } from "./_soak.ts";

const META = {
  format: "loop-session",
  version: 3,
  generation: "ab".repeat(32),
  start: 0,
  bytes: 10,
  messageCount: 2,
};

/** A meta.json record whose header holds `header`'s fields, in `META`'s key order. */
function metaWith(header: Record<string, unknown>): StorageMeta {
  const { format, version, ...rest } = META;
  return { format, version, header, ...rest } as unknown as StorageMeta;
}

const jsonValue = fc.jsonValue({ maxDepth: 3 });

test("encodeStorageMetaReusing writes the bytes encodeStorageMeta writes, on a miss and on a hit", () => {
  fc.assert(
    fc.property(
      fc.dictionary(
        fc.string({ unit: "grapheme" }),
        fc.oneof(
          jsonValue,
          fc.array(jsonValue),
          fc.constant(undefined),
          fc.array(fc.oneof(jsonValue, fc.constant(undefined))),
        ),
      ),
      (header) => {
        const meta = metaWith(header);
        const cache: EncodedArrays = new WeakMap();
        const expected = encodeStorageMeta(meta);
        assert.deepEqual(encodeStorageMetaReusing(meta, cache), expected);
        // The same arrays again, in a new header object with other fields changed.
        const next = metaWith({ ...header, updatedAt: "2026-01-01T00:00:00.000Z" });
        assert.deepEqual(encodeStorageMetaReusing(next, cache), encodeStorageMeta(next));
        assert.deepEqual(encodeStorageMetaReusing(meta, cache), expected);
      },
    ),
    { numRuns: runsOf(300) },
  );
});

test("encodeStorageMetaReusing keeps the bytes of an array by identity, and a new array is encoded anew", () => {
  const contexts = [{ userTurn: 0, content: "✓ ctx", timestamp: 1 }];
  const cache: EncodedArrays = new WeakMap();
  const first = encodeStorageMetaReusing(metaWith({ runtimeContexts: contexts }), cache);
  assert.deepEqual(first, encodeStorageMeta(metaWith({ runtimeContexts: contexts })));
  // An equal array that is another object: encoded from its own content.
  const other = [{ userTurn: 0, content: "other", timestamp: 2 }];
  assert.match(
    new TextDecoder().decode(encodeStorageMetaReusing(metaWith({ runtimeContexts: other }), cache)),
    /"content":"other"/,
  );
  // The cache answers for the very array it encoded: that is the contract (its arrays never
  // change), shown here by changing one against it.
  contexts[0]!.content = "changed";
  assert.deepEqual(encodeStorageMetaReusing(metaWith({ runtimeContexts: contexts }), cache), first);
  // Top-level fields and other values are never taken from the cache.
  const moved = encodeStorageMetaReusing(
    { ...metaWith({ runtimeContexts: other }), bytes: 99 },
    cache,
  );
  assert.match(new TextDecoder().decode(moved), /"bytes":99/);
});

test("a session's meta.json stays canonical as saves keep, replace and drop its metadata arrays", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/w", { recursive: true });
  const store = new SessionStore({ fs, agentDir: "/a", process: null });
  const session = await store.create("/w");
  const history = conversation(2);
  const file = session.getSessionFile();
  const text = new TextDecoder();
  const check = async (contexts: unknown) => {
    const bytes = await fs.readFile(file);
    const parsed = JSON.parse(text.decode(bytes)) as StorageMeta;
    assert.deepEqual(bytes, encodeStorageMeta(parsed));
    assert.deepEqual(parsed.header.runtimeContexts, contexts);
  };
  const a = [{ userTurn: 0, content: "first ✓", timestamp: 1 }];
  await session.commit(history, a as never);
  await check(a);
  history.push(user("more"));
  await session.append([history.at(-1)!]); // kept
  await check(a);
  await session.setPinned(true); // kept, by a metadata write
  await check(a);
  const b = [{ userTurn: 0, content: "second", timestamp: 2 }]; // same length, new content
  await session.commit(history, b as never);
  await check(b);
  await session.markRead(history.length);
  await check(b);
  await session.commit(history, [] as never); // dropped
  await check(undefined);
  await session.close();
  const again = await store.open(session.getSessionPath());
  assert.deepEqual(again.getRuntimeContexts(), []);
  await again.close();
});
