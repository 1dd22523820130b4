/**
 * The `loop-sessions` executable: runs the command line on Deno (with `denoFs`) or on Node
 * (with `nodeFs`), with native SHA-256 and the filesystem's own process probe for writer locks
 * (`processes`: on Deno none without `--allow-sys=hostname`, so locks then hold within the process).
 *
 * ```sh
 * deno run -A jsr:@loop/sessions/cli sessions list --all-workspaces
 * # in a checkout, once `npx --yes deno@2.9.6 install` has installed tsx:
 * node --import tsx src/cli/bin.ts sessions verify --all
 * ```
 *
 * @module
 */
import { type CliIo, OutputError, writeFully } from "./output.ts";
import { UsageError } from "./args.ts";
import { reportUsageError, runCli } from "./main.ts";
import type { FileSystem } from "../port/fs.ts";
import type { ProcessProbe } from "../port/probe.ts";

export type { CliIo } from "./output.ts";
export { runCli } from "./main.ts";

interface DenoLike {
  readonly args: string[];
  cwd(): string;
  exit(code: number): never;
  readonly env: { get(name: string): string | undefined };
  readonly stdout: { writeSync(data: Uint8Array): number };
  readonly stderr: { writeSync(data: Uint8Array): number; isTerminal(): boolean };
  readonly errors: {
    readonly BrokenPipe: new (...args: never[]) => Error;
    readonly WouldBlock: new (...args: never[]) => Error;
    readonly NotCapable: new (...args: never[]) => Error;
    readonly PermissionDenied: new (...args: never[]) => Error;
  };
}

/** The slice of `node:fs` the Node output and current directory need. */
interface NodeWrite {
  writeSync(fd: number, data: Uint8Array, offset: number, length: number): number;
  realpathSync: { native(path: string, options: { encoding: "buffer" }): Uint8Array };
}

/**
 * Writes all of `data` to file descriptor `fd` with Node's `writeSync`, which may write part of
 * it, or fail with EAGAIN, when the descriptor is a non-blocking pipe (see `writeFully`). Returns
 * false when the reader is gone (EPIPE).
 */
function nodeWriteAll(fs: NodeWrite, fd: number, data: Uint8Array): boolean {
  return writeFully((offset) => fs.writeSync(fd, data, offset, data.length - offset), data.length);
}

/** The `process` of a `CliIo`: the filesystem's own probe, as a store would take by default. */
function probeOf(fs: FileSystem): { process?: ProcessProbe } {
  const probe = fs.processes;
  return probe === undefined ? {} : { process: probe };
}

/** Builds the runtime's `CliIo` and the program arguments. */
export async function runtimeIo(): Promise<
  { io: CliIo; args: string[]; exit: (code: number) => void }
> {
  const deno = (globalThis as { Deno?: DenoLike }).Deno;
  const encoder = new TextEncoder();
  // Once a reader is gone (`loop-sessions … | head`), later output to it is dropped quietly.
  const gone = new Set<string>();
  if (deno !== undefined) {
    const { denoFs, denoSha256 } = await import("../../adapters/deno.ts");
    const writeAll = (
      name: string,
      sink: { writeSync(data: Uint8Array): number },
      text: string,
    ): void => {
      if (gone.has(name)) return;
      const data = encoder.encode(text);
      // Deno's errors carry no `code`: a full non-blocking pipe and a reader that went away are
      // given theirs, so both runtimes wait and stop the same way (`writeFully`).
      const write = (offset: number): number => {
        try {
          return sink.writeSync(data.subarray(offset));
        } catch (error) {
          if (error instanceof deno.errors.WouldBlock) {
            throw Object.assign(error, { code: "EAGAIN" });
          }
          if (error instanceof deno.errors.BrokenPipe) {
            throw Object.assign(error, { code: "EPIPE" });
          }
          throw error;
        }
      };
      try {
        if (!writeFully(write, data.length)) gone.add(name);
      } catch (error) {
        // Nothing more is written to a stream that failed.
        gone.add(name);
        throw new OutputError(name, error);
      }
    };
    const fs = denoFs();
    const io: CliIo = {
      fs,
      sha256: denoSha256,
      // The filesystem's own probe, made on first use where Deno grants the host name (a query,
      // never a prompt); without --allow-sys=hostname, none: locks hold within this process only.
      ...probeOf(fs),
      out: (text) => writeAll("stdout", deno.stdout, text),
      err: (text) => writeAll("stderr", deno.stderr, text),
      errIsTerminal: deno.stderr.isTerminal(),
      env: (name) => {
        try {
          return deno.env.get(name);
        } catch (error) {
          // Not granted (--allow-env): unset, as the default applies. A value Deno cannot decode
          // (not valid UTF-8) is said, never taken for unset: another data directory would be
          // used in its place.
          if (error instanceof deno.errors.NotCapable) return undefined;
          if (error instanceof deno.errors.PermissionDenied) return undefined;
          throw new UsageError(
            `the environment variable ${name} cannot be read (${(error as Error).message})`,
          );
        }
      },
      // Asked when a command needs it: a directory whose path Deno cannot decode fails only
      // those, in one line.
      get cwd(): string {
        try {
          return deno.cwd();
        } catch (error) {
          throw new UsageError(
            `the current directory cannot be read (${(error as Error).message})`,
          );
        }
      },
      now: Date.now,
    };
    return { io, args: deno.args, exit: (code) => deno.exit(code) };
  }
  const { nodeFs, nodeSha256 } = await import("../../adapters/node.ts");
  const { environmentValue, lossyText, strictText } = await import(
    "../../adapters/_node_env.ts"
  );
  const process = await import("node:process");
  const fs: NodeWrite = await import("node:fs");
  const writeAll = (fd: number, text: string): void => {
    const name = fd === 1 ? "stdout" : "stderr";
    if (gone.has(name)) return;
    let written: boolean;
    try {
      written = nodeWriteAll(fs, fd, encoder.encode(text));
    } catch (error) {
      // Nothing more is written to a stream that failed (ENOSPC, EBADF…).
      gone.add(name);
      throw new OutputError(name, error);
    }
    if (!written) gone.add(name);
  };
  const files = nodeFs();
  const io: CliIo = {
    fs: files,
    sha256: nodeSha256,
    ...probeOf(files),
    out: (text) => writeAll(1, text),
    err: (text) => writeAll(2, text),
    errIsTerminal: process.stderr.isTTY === true,
    // A value that is not valid UTF-8 is said, never taken as Node decodes it (another data
    // directory), as on Deno.
    env: (name) => {
      const value = environmentValue(name);
      if (value instanceof Error) {
        throw new UsageError(`the environment variable ${name} cannot be read (${value.message})`);
      }
      return value;
    },
    // Asked when a command needs it, as on Deno: Node's own `process.cwd()` puts U+FFFD in place
    // of bytes that are not valid UTF-8, a path naming another directory (another workspace's),
    // so the path is taken as bytes and a directory it cannot spell fails those commands.
    get cwd(): string {
      let bytes: Uint8Array;
      try {
        bytes = fs.realpathSync.native(".", { encoding: "buffer" });
      } catch (error) {
        throw new UsageError(`the current directory cannot be read (${(error as Error).message})`);
      }
      const path = strictText(bytes);
      if (path !== undefined) return path;
      throw new UsageError(
        `the current directory cannot be read (its path ${
          JSON.stringify(lossyText(bytes))
        } is not valid UTF-8)`,
      );
    },
    now: Date.now,
  };
  return { io, args: process.argv.slice(2), exit: (code) => process.exit(code) };
}

/** Runs the command line for the current process and exits with its code. */
export async function main(): Promise<void> {
  const { io, args, exit } = await runtimeIo();
  // An argument the runtime decoded with U+FFFD in place of bytes that are not valid UTF-8 names
  // another path (another store, another session): refused, as such a LOOP_DATA_DIR or HOME is.
  const { invalidArgument } = await import("../../adapters/_node_env.ts");
  const invalid = invalidArgument(args);
  let code: number;
  try {
    code = invalid === undefined
      ? await runCli(args, io)
      : reportUsageError(io, new UsageError(invalid.message));
  } catch (error) {
    // runCli reports an output failure on stderr; when stderr itself fails, nothing can be said.
    if (!(error instanceof OutputError)) throw error;
    code = 1;
  }
  exit(code);
}

// No top-level await: under Node the file may be loaded as CommonJS. The command line runs only
// when this very file is the program (Deno's `import.meta.main`, or Node's entry script resolving
// to this file); importing it never runs anything.
if ((import.meta as { main?: boolean }).main === true) {
  void main();
} else {
  isNodeEntry().then((entry) => entry ? main() : undefined).catch((error: unknown) => {
    throw error;
  });
}

/** True under Node when the entry script (`process.argv[1]`) is this file, by real path. */
async function isNodeEntry(): Promise<boolean> {
  if ((globalThis as { Deno?: unknown }).Deno !== undefined) return false;
  const process = (globalThis as { process?: { argv?: string[] } }).process;
  const entry = process?.argv?.[1];
  if (entry === undefined || !import.meta.url.startsWith("file:")) return false;
  const { realpathSync } = await import("node:fs");
  const { fileURLToPath } = await import("node:url");
  const real = (path: string): string | undefined => {
    try {
      return realpathSync(path);
    } catch {
      return undefined;
    }
  };
  const self = real(fileURLToPath(import.meta.url));
  // Node also runs `bin` for an entry named without its extension.
  return self !== undefined && [entry, `${entry}.ts`].some((path) => real(path) === self);
}
