/**
 * Bounded concurrency for independent filesystem work (a listing's sessions, a prune's entries).
 * Internal: not exported by the package.
 *
 * @module
 */

/**
 * Runs `task` over `items` with at most `limit` calls in flight and returns the results in the
 * input order. After a call fails no further item is started; the calls already running are
 * waited for, then the first failure is thrown. So nothing started by this call is still running
 * when it settles, whatever the outcome.
 */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  task: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  let failure: unknown;
  const worker = async (): Promise<void> => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        results[i] = await task(items[i] as T, i);
      } catch (error) {
        if (!failed) {
          failed = true;
          failure = error;
        }
      }
    }
  };
  // At least one caller, whatever the limit (below one, or not a number).
  const workers = limit >= 1 ? Math.min(Math.floor(limit), items.length) : 1;
  await Promise.all(Array.from({ length: workers }, worker));
  if (failed) throw failure;
  return results;
}

/**
 * What `run` returns, or a promise rejected with what it threw: a port call started beside
 * others (`Promise.allSettled([...])`) whose adapter throws where it should reject is settled like
 * the others instead of escaping before they are awaited.
 */
export function promiseOf<T>(run: () => Promise<T>): Promise<T> {
  try {
    return run();
  } catch (error) {
    return Promise.reject(error);
  }
}
