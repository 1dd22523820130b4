// mapLimit: the bounded concurrency of listings and prunes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mapLimit } from "../src/port/limit.ts";

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test("results keep the input order whatever order the calls finish in, within the limit", async () => {
  let running = 0;
  let peak = 0;
  const items = Array.from({ length: 40 }, (_, i) => i);
  const results = await mapLimit(items, 6, async (item, index) => {
    running++;
    peak = Math.max(peak, running);
    // Later items finish first.
    await sleep((40 - item) % 7);
    running--;
    return `${item}@${index}`;
  });
  assert.deepEqual(results, items.map((i) => `${i}@${i}`));
  assert.equal(peak, 6);
  assert.equal(running, 0);
});

test("no items, or fewer than the limit, are handled without idle callers", async () => {
  assert.deepEqual(await mapLimit([], 8, () => Promise.resolve(1)), []);
  assert.deepEqual(await mapLimit([1, 2], 8, (x) => Promise.resolve(x * 2)), [2, 4]);
  // A limit below one, or not a number, still makes progress, one at a time.
  for (const limit of [0, -3, Number.NaN]) {
    let running = 0;
    let peak = 0;
    const results = await mapLimit([1, 2, 3], limit, async (x) => {
      peak = Math.max(peak, ++running);
      await sleep(1);
      running--;
      return x;
    });
    assert.deepEqual([results, peak], [[1, 2, 3], 1], String(limit));
  }
});

test("after a failure nothing new starts, running calls finish first, the first failure is thrown", async () => {
  const started: number[] = [];
  const finished: number[] = [];
  const first = new Error("first");
  const outcome = mapLimit([0, 1, 2, 3, 4, 5], 3, async (item) => {
    started.push(item);
    if (item === 0) {
      await sleep(1);
      throw first;
    }
    // Items 1 and 2 are running when item 0 fails; item 2 then fails too.
    await sleep(item === 1 ? 15 : item === 2 ? 8 : 0);
    finished.push(item);
    if (item === 2) throw new Error("second");
    return item;
  });
  await assert.rejects(outcome, (error) => error === first);
  assert.deepEqual(started, [0, 1, 2]);
  assert.deepEqual(finished, [2, 1], "the running calls finished before the call settled");
  await sleep(20);
  assert.deepEqual(started, [0, 1, 2], "nothing starts after the call settled");
});
