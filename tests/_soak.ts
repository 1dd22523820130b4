// How much of the randomized testing a run does. A normal run (CI, `deno task test`) checks the
// fixed seeds and run counts written in the tests. A soak (`deno task soak`) multiplies them, to
// look for the rare interleaving or crash point a normal run does not reach:
//
//   LOOP_SOAK=<n>       n times the random sequences, crash seeds and property runs (default 1)
//   LOOP_SOAK_FROM=<k>  where the added seeds start (default 0), so that repeated soaks explore
//                       new seeds instead of the same ones again
//
// A soak always checks the seeds of a normal run first, so it never checks less. A failure names
// its seed (each test's labels do), which reproduces it in a normal run of that seed.
import process from "node:process";

/** Where the seeds a soak adds begin, far past every range a test writes. */
const ADDED_SEEDS_START = 1_000_000;

/**
 * The factor given by `text` (the value of `LOOP_SOAK`): a positive integer, 1 when unset or
 * empty. Anything else throws, so that a mistyped soak does not silently run as a normal run.
 */
export function parseSoakFactor(text: string | undefined): number {
  return parseCount(text, "LOOP_SOAK", 1, 1);
}

/** The offset given by `text` (the value of `LOOP_SOAK_FROM`): an integer ≥ 0, 0 when unset. */
export function parseSoakFrom(text: string | undefined): number {
  return parseCount(text, "LOOP_SOAK_FROM", 0, 0);
}

function parseCount(text: string | undefined, name: string, unset: number, min: number): number {
  if (text === undefined || text === "") return unset;
  const value = Number(text);
  if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(value) || value < min) {
    throw new Error(`${name} must be an integer of at least ${min}, not ${JSON.stringify(text)}`);
  }
  return value;
}

/** This run's soak factor (`LOOP_SOAK`). */
export const SOAK: number = parseSoakFactor(process.env.LOOP_SOAK);

/** This run's offset of added seeds (`LOOP_SOAK_FROM`). */
export const SOAK_FROM: number = parseSoakFrom(process.env.LOOP_SOAK_FROM);

/**
 * The seeds of a loop that a normal run takes from `first` to `first + count - 1`: those, then
 * in a soak `count × (factor - 1)` more, from `ADDED_SEEDS_START + from + first` on (so that
 * loops over other ranges add other seeds).
 */
export function seedsOf(
  first: number,
  count: number,
  factor: number = SOAK,
  from: number = SOAK_FROM,
): number[] {
  const listed = Array.from({ length: count }, (_, i) => first + i);
  return seedsAfter(listed, factor, from + first);
}

/** The seeds `listed`, then in a soak `listed.length × (factor - 1)` more (see `seedsOf`). */
export function seedsAfter(
  listed: readonly number[],
  factor: number = SOAK,
  from: number = SOAK_FROM,
): number[] {
  const seeds = [...listed];
  const added = ADDED_SEEDS_START + from;
  for (let i = 0; i < listed.length * (factor - 1); i++) seeds.push(added + i);
  return seeds;
}

/** True for a seed a soak added (`seedsOf`, `seedsAfter`), not one a test writes. */
export function isAddedSeed(seed: number): boolean {
  return seed >= ADDED_SEEDS_START;
}

/** `runs` property runs in a normal run, `runs × factor` in a soak. */
export function runsOf(runs: number, factor: number = SOAK): number {
  return runs * factor;
}
