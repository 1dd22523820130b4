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

/**
 * Units (bytes of logs a listing holds in memory) shared by concurrent tasks. `take(n)` resolves
 * once `n` units are free, in call order, with the function that gives them back; a task asking
 * for more than the whole budget takes all of it, so it runs alone.
 */
export class Budget {
  readonly #total: number;
  #free: number;
  readonly #waiting: { readonly need: number; readonly wake: () => void }[] = [];

  /** A budget of `total` units (a positive number). */
  constructor(total: number) {
    this.#total = total;
    this.#free = total;
  }

  /** Takes `units` (at most the whole budget), waiting behind earlier takers for them. */
  async take(units: number): Promise<() => void> {
    const need = Math.min(Math.max(0, units), this.#total);
    if (this.#waiting.length === 0 && need <= this.#free) {
      this.#free -= need;
    } else {
      // Woken with its units already taken for it (see `#wake`).
      await new Promise<void>((wake) => this.#waiting.push({ need, wake }));
    }
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.#free += need;
      this.#wake();
    };
  }

  #wake(): void {
    for (let next = this.#waiting[0]; next !== undefined; next = this.#waiting[0]) {
      if (next.need > this.#free) return;
      this.#waiting.shift();
      this.#free -= next.need;
      next.wake();
    }
  }
}
