/**
 * The lazily made process probe the Node and Deno adapters offer as `FileSystem.processes`.
 * Internal to the adapters.
 *
 * @module
 */
import type { ProcessProbe } from "../src/port/probe.ts";

/**
 * A getter of the probe `make()` returns, made on first use and kept; undefined (kept too) when
 * `make` throws, as where the runtime may not read the host name (Deno without `--allow-sys`): a
 * store then locks within its process only, and respects the lock files of others as live.
 */
export function lazyProbe(make: () => ProcessProbe): () => ProcessProbe | undefined {
  let made: ProcessProbe | null | undefined;
  return () => {
    if (made === undefined) {
      try {
        made = make();
      } catch {
        made = null;
      }
    }
    return made ?? undefined;
  };
}
