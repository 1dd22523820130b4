// The crash and fault loops of RELIABILITY.md, over the memory adapter's simulator.
import {
  type FaultError,
  type MemoryFs,
  type MemoryOperation,
  SimulatedCrash,
} from "../adapters/memory.ts";
import { seedsAfter } from "./_soak.ts";

/**
 * The seeds every crash point is recovered with (each picks other tails and journal prefixes); a
 * soak adds more (`_soak.ts`).
 */
export const SEEDS: readonly number[] = seedsAfter([0, 1, 2, 3, 7]);

/** What a check learns about the run it checks. */
export interface RunInfo {
  /** True when the operation resolved before the crash or fault. */
  readonly resolved: boolean;
  /** The crash point or fault operation number. */
  readonly n: number;
  /** The crash seed (undefined in fault loops). */
  readonly seed?: number;
}

/**
 * The operations that change nothing a crash can keep: no entry, byte, mode or journal record.
 * `tests/memory_crash.test.ts` checks that a crash right after one recovers what a crash right
 * after the operation before it recovers.
 */
export const READ_ONLY_OPERATIONS: ReadonlySet<MemoryOperation> = new Set<MemoryOperation>([
  "readFile",
  "readFileNoFollow",
  "openNoFollow",
  "readDir",
  "stat",
  "lstat",
  "realPath",
  "readLink",
  "read",
  "fstat",
]);

/**
 * True when `fs`, crashed after operation `n` (counted from its construction or
 * `resetCounter`), holds a state a smaller crash point already gave: operation n only read, so
 * every seed recovers what it recovers after operation n - 1. Crash loops skip checking it.
 */
export function repeatsEarlierCrashState(fs: MemoryFs, n: number): boolean {
  const last = fs.operationLog[n - 1];
  return fs.crashTriggered && last?.number === n && READ_ONLY_OPERATIONS.has(last.op);
}

/**
 * Runs `run` on a copy of `baseline` crashing after operation n, for n = 0, 1, ... until the
 * operation completes without reaching n; recovers each crashed state with every seed and
 * hands it to `check` (a crash point right after a read is skipped: see
 * `repeatsEarlierCrashState`). Returns the number of crash points tried.
 */
export async function crashAtEveryOperation(options: {
  readonly baseline: MemoryFs;
  readonly run: (fs: MemoryFs) => Promise<void>;
  readonly check: (recovered: MemoryFs, info: RunInfo) => Promise<void>;
  readonly seeds?: readonly number[];
}): Promise<number> {
  for (let n = 0;; n++) {
    const fs = options.baseline.clone();
    fs.crashAfter(n);
    let resolved = false;
    try {
      await options.run(fs);
      resolved = true;
    } catch (error) {
      if (!(error instanceof SimulatedCrash) && !fs.crashTriggered) throw error;
    }
    if (repeatsEarlierCrashState(fs, n)) continue;
    for (const seed of options.seeds ?? SEEDS) {
      await options.check(fs.crash(seed), { resolved, n, seed });
    }
    if (!fs.crashTriggered) return n + 1;
    if (n > 10_000) throw new Error("crash loop did not terminate");
  }
}

/**
 * Runs `run` on a copy of `baseline` with operation n failing (transient or persistent), for
 * n = 1, 2, ... until the operation completes without reaching n; hands the (uncrashed) state to
 * `check` after clearing the fault. Returns the number of fault points tried.
 */
export async function failAtEveryOperation(options: {
  readonly baseline: MemoryFs;
  readonly error: FaultError;
  readonly persistent: boolean;
  readonly run: (fs: MemoryFs) => Promise<unknown>;
  readonly check: (fs: MemoryFs, info: RunInfo & { readonly error?: unknown }) => Promise<void>;
}): Promise<number> {
  for (let n = 1;; n++) {
    const fs = options.baseline.clone();
    fs.failAt(n, { error: options.error, persistent: options.persistent });
    let resolved = false;
    let failure: unknown;
    try {
      await options.run(fs);
      resolved = true;
    } catch (error) {
      failure = error;
    }
    const reached = fs.operationCount >= n;
    fs.clearFaults();
    await options.check(fs, { resolved, n, error: failure });
    if (!reached) return n;
    if (n > 10_000) throw new Error("fault loop did not terminate");
  }
}
