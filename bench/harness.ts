/**
 * The measurement harness: warm-up, then our operation and its floor alternated in interleaved
 * batches (the order flips every batch so drift and caches hit both alike), every run timed on
 * its own, and median / p90 over all runs. Runtime-neutral: only `performance.now()`.
 *
 * @module
 */

/** Summary statistics of a set of timings, in milliseconds. */
export interface Stats {
  /** How many runs were timed. */
  readonly n: number;
  /** The median run. */
  readonly median: number;
  /** The 90th percentile run. */
  readonly p90: number;
  /** The fastest run. */
  readonly min: number;
  /** The mean run. */
  readonly mean: number;
}

/** One measured operation. */
export interface Subject {
  /** Untimed work before every timed run (e.g. making the session unread again). */
  readonly before?: () => Promise<unknown> | unknown;
  /** The timed operation. */
  readonly run: () => Promise<unknown> | unknown;
}

/** How long to measure. */
export interface Plan {
  /** Untimed runs of each subject first. */
  readonly warmup: number;
  /** The most batches to run. */
  readonly batches: number;
  /** Runs of each subject per batch. */
  readonly batchSize: number;
  /** Stop starting new batches after this many milliseconds (at least two batches run). */
  readonly maxMs?: number;
}

/** The timings of a subject and its floor measured together. */
export interface PairStats {
  /** Our operation. */
  readonly ours: Stats;
  /** The floor, when one was measured. */
  readonly floor: Stats | undefined;
}

/** The median, p90, min and mean of `samples` (milliseconds). */
export function summarize(samples: readonly number[]): Stats {
  if (samples.length === 0) return { n: 0, median: NaN, p90: NaN, min: NaN, mean: NaN };
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number): number => {
    const position = (sorted.length - 1) * q;
    const low = Math.floor(position);
    const high = Math.ceil(position);
    const a = sorted[low] as number;
    const b = sorted[high] as number;
    return a + (b - a) * (position - low);
  };
  return {
    n: sorted.length,
    median: at(0.5),
    p90: at(0.9),
    min: sorted[0] as number,
    mean: sorted.reduce((sum, x) => sum + x, 0) / sorted.length,
  };
}

async function timeOnce(subject: Subject): Promise<number> {
  if (subject.before !== undefined) await subject.before();
  const started = performance.now();
  await subject.run();
  return performance.now() - started;
}

/**
 * Measures `ours` and `floor` alternately: `plan.warmup` untimed runs of each, then batches of
 * `plan.batchSize` timed runs of one and then the other, the order flipping every batch.
 */
export async function measurePair(
  ours: Subject,
  floor: Subject | undefined,
  plan: Plan,
): Promise<PairStats> {
  for (let i = 0; i < plan.warmup; i++) {
    await timeOnce(ours);
    if (floor !== undefined) await timeOnce(floor);
  }
  const oursSamples: number[] = [];
  const floorSamples: number[] = [];
  const started = performance.now();
  for (let batch = 0; batch < plan.batches; batch++) {
    if (batch >= 2 && plan.maxMs !== undefined && performance.now() - started > plan.maxMs) break;
    const order: [Subject, number[]][] = [[ours, oursSamples]];
    if (floor !== undefined) {
      if (batch % 2 === 0) order.push([floor, floorSamples]);
      else order.unshift([floor, floorSamples]);
    }
    for (const [subject, samples] of order) {
      for (let i = 0; i < plan.batchSize; i++) samples.push(await timeOnce(subject));
    }
  }
  return {
    ours: summarize(oursSamples),
    floor: floor === undefined ? undefined : summarize(floorSamples),
  };
}

/** Times `runs` runs of `subject` after `warmup` untimed ones; returns every timing. */
export async function collect(subject: Subject, warmup: number, runs: number): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await timeOnce(subject);
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) samples.push(await timeOnce(subject));
  return samples;
}

/** Measures one subject alone (no floor). */
export async function measure(subject: Subject, plan: Plan): Promise<Stats> {
  return (await measurePair(subject, undefined, plan)).ours;
}

/** A benchmark that could not produce a valid figure (a case saw a wrong result, a child failed). */
export class BenchError extends Error {
  /** Creates the error. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "BenchError";
  }
}
