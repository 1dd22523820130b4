/** A command line's I/O over a `MemoryFs`, for in-process CLI tests. */
import type { MemoryFs } from "../adapters/memory.ts";
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
