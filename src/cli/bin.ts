/**
 * The `loop-sessions` executable: runs the command line on Deno (with `denoFs`) or on Node
 * (with `nodeFs`), with native SHA-256 and the runtime's process probe for writer locks.
 *
 * ```sh
 * deno run -A jsr:@loop/sessions/cli sessions list --all-workspaces
 * node --import tsx src/cli/bin.ts sessions verify --all
 * ```
 *
 * @module
 */
import type { CliIo } from "./output.ts";
import { runCli } from "./main.ts";

export type { CliIo } from "./output.ts";
export { runCli } from "./main.ts";

interface DenoLike {
  readonly args: string[];
  cwd(): string;
  exit(code: number): never;
  readonly env: { get(name: string): string | undefined };
  readonly stdout: { writeSync(data: Uint8Array): number };
  readonly stderr: { writeSync(data: Uint8Array): number; isTerminal(): boolean };
}

/** Builds the runtime's `CliIo` and the program arguments. */
export async function runtimeIo(): Promise<
  { io: CliIo; args: string[]; exit: (code: number) => void }
> {
  const deno = (globalThis as { Deno?: DenoLike }).Deno;
  const encoder = new TextEncoder();
  if (deno !== undefined) {
    const { denoFs, denoSha256, denoProcessProbe } = await import("../../adapters/deno.ts");
    const writeAll = (sink: { writeSync(data: Uint8Array): number }, text: string): void => {
      let data = encoder.encode(text);
      while (data.length > 0) data = data.subarray(sink.writeSync(data));
    };
    const io: CliIo = {
      fs: denoFs(),
      sha256: denoSha256,
      process: denoProcessProbe(),
      out: (text) => writeAll(deno.stdout, text),
      err: (text) => writeAll(deno.stderr, text),
      errIsTerminal: deno.stderr.isTerminal(),
      env: (name) => {
        try {
          return deno.env.get(name);
        } catch {
          return undefined;
        }
      },
      cwd: deno.cwd(),
      now: Date.now,
    };
    return { io, args: deno.args, exit: (code) => deno.exit(code) };
  }
  const { nodeFs, nodeSha256, nodeProcessProbe } = await import("../../adapters/node.ts");
  const process = await import("node:process");
  const { writeSync } = await import("node:fs");
  const io: CliIo = {
    fs: nodeFs(),
    sha256: nodeSha256,
    process: nodeProcessProbe(),
    out: (text) => void writeSync(1, text),
    err: (text) => void writeSync(2, text),
    errIsTerminal: process.stderr.isTTY === true,
    env: (name) => process.env[name],
    cwd: process.cwd(),
    now: Date.now,
  };
  return { io, args: process.argv.slice(2), exit: (code) => process.exit(code) };
}

/** Runs the command line for the current process and exits with its code. */
export async function main(): Promise<void> {
  const { io, args, exit } = await runtimeIo();
  exit(await runCli(args, io));
}

// No top-level await: under Node the file may be loaded as CommonJS.
if ((import.meta as { main?: boolean }).main === true || isNodeEntry()) {
  main().catch((error: unknown) => {
    throw error;
  });
}

function isNodeEntry(): boolean {
  const process = (globalThis as { process?: { argv?: string[] } }).process;
  const entry = process?.argv?.[1];
  if (entry === undefined || (globalThis as { Deno?: unknown }).Deno !== undefined) return false;
  return import.meta.url.endsWith(entry.replace(/\\/g, "/")) ||
    import.meta.url.endsWith("/bin.ts") && entry.endsWith("bin.ts");
}
