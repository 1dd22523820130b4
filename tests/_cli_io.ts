/** A command line's I/O over a `MemoryFs`, for in-process CLI tests. */
import type { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import type { CliIo } from "../src/cli/output.ts";
import { portableSha256 } from "../src/port/sha256.ts";

/** The I/O of a command run in `cwd` of `fs` at time `now`, and what it printed on each stream. */
export function memoryIo(
  fs: MemoryFs,
  cwd: string,
  now: number,
): { io: CliIo; out: () => string; err: () => string } {
  let out = "";
  let err = "";
  const io: CliIo = {
    fs,
    sha256: portableSha256,
    out: (text) => {
      out += text;
    },
    err: (text) => {
      err += text;
    },
    errIsTerminal: false,
    env: () => undefined,
    cwd,
    now: () => now,
  };
  return { io, out: () => out, err: () => err };
}

/** What a command run in process gave: its exit code, and what it printed on each stream. */
export interface CliRun {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** Runs `loop-sessions args` in `cwd` of `fs` at time `now`, its I/O changed as `change` says. */
export async function runMemoryCli(
  fs: MemoryFs,
  cwd: string,
  now: number,
  args: string[],
  change: Partial<CliIo> = {},
): Promise<CliRun> {
  const { io, out, err } = memoryIo(fs, cwd, now);
  const code = await runCli(args, { ...io, ...change });
  return { code, out: out(), err: err() };
}

/** Runs `loop-sessions args` in /repo of `fs` (as `newRepo()` makes it) on 2026-12-01. */
export function runInRepo(fs: MemoryFs, args: string[]): Promise<CliRun> {
  return runMemoryCli(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"), args);
}

/** The `key  value` rows a `show` command prints as text, by key. */
export function shownRows(out: string): Map<string, string> {
  return new Map(
    out.trimEnd().split("\n").map((line) => {
      const [key, ...value] = line.split(/ {2,}/);
      return [key ?? "", value.join("  ")];
    }),
  );
}

/** What the command line prints on stderr for a usage error saying `message`. */
export function usageError(message: string): string {
  return `usage error: ${message}\nRun 'loop-sessions --help' for the commands.\n`;
}
