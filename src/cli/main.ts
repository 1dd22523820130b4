/**
 * The command line of `@loop/sessions`: inspect, verify, migrate and maintain Loop session
 * stores (`~/.loop`) and folded session trees (`.loopy_loop/`). `runCli` is runtime-neutral;
 * `bin.ts` wires it to Deno or Node.
 *
 * Exit codes: 0 success, 1 findings (corruption, failures), 2 usage errors.
 *
 * @module
 */
import { FsError, PermissionDenied } from "../port/errors.ts";
import { SessionError } from "../loop/errors.ts";
import { LayoutError } from "../layout/errors.ts";
import { parseArgs, UsageError } from "./args.ts";
import { type CliIo, inlined, isStackOverflow, OutputError, terminalSafeIo } from "./output.ts";
import { runSessions } from "./sessions.ts";
import { runLayout, runPruneRaw, runTraces } from "./layout.ts";

export type { CliIo } from "./output.ts";

/** The version printed by `--version`. */
export const CLI_VERSION = "0.1.0";

/** The top-level help text. */
export const MAIN_HELP =
  `loop-sessions ${CLI_VERSION}: inspect and maintain coding-agent session stores

Usage: loop-sessions [--data-dir DIR] <command> [options]

Loop session store (default ~/.loop, or $LOOP_DATA_DIR, or --data-dir):
  sessions list [--cwd DIR | --dir COLLECTION | --all-workspaces] [--fast] [--json]
  sessions show <id|path> [--json]
  sessions history <id|path> [--before N] [--json]
  sessions verify (<id|path> | --all) [--json]
  sessions migrate (<path> | --all) [--dry-run] [--json]
  sessions archive|restore <id|path...> [--dir COLLECTION] [--json]
  sessions delete <id|path...> [--dir COLLECTION] [--include-unarchived] [--json]
  sessions cleanup [--cwd DIR | --dir COLLECTION | --all-workspaces] [--json]
  sessions compact <id|path> [--json]
  sessions salvage <id|path> --to <collection dir> [--json]

Folded session layout (.loopy_loop/ found by walking up from the current directory):
  layout tree [ROOT] [--json]
  layout show <session id> [--json]
  layout resolve <logical ref> [--session ID] [--json]
  prune-raw [--older-than DAYS] [--session ID] [--legacy-traces] [--dry-run] [--json]
  traces list [--json]
  traces inspect <attempt or manifest id> [--json]

Every command takes --help. Exit codes: 0 ok, 1 findings, 2 usage.
`;

/** Runs the command line with `args` (without the program name); returns the exit code. */
export async function runCli(args: readonly string[], io: CliIo): Promise<number> {
  // Stored data is printed as text, never as terminal commands.
  io = terminalSafeIo(io);
  try {
    let dataDir: string | undefined;
    let rest = [...args];
    // Only `--data-dir DIR` and `--data-dir=DIR` (another option is an unknown one, below).
    while (rest[0] === "--data-dir" || rest[0]?.startsWith("--data-dir=")) {
      if (dataDir !== undefined) throw new UsageError("option '--data-dir' given more than once");
      const first = rest[0];
      if (first !== "--data-dir") {
        dataDir = first.slice("--data-dir=".length);
        rest = rest.slice(1);
      } else {
        dataDir = rest[1];
        // An option in its place is not its value (`--data-dir --json`), as for any option.
        if (dataDir === undefined || (dataDir.startsWith("-") && !/^-\d/.test(dataDir))) {
          throw new UsageError("option '--data-dir' needs a value");
        }
        rest = rest.slice(2);
      }
      // An explicit empty value (an unset shell variable) never falls back to ~/.loop.
      if (dataDir === "") throw new UsageError("option '--data-dir' needs a non-empty value");
    }
    const [command, ...tail] = rest;
    switch (command) {
      case undefined:
        io.err(MAIN_HELP);
        return 2;
      case "help":
      case "--help":
      case "-h":
        parseArgs(tail, {}); // an option after it is still an unknown one
        io.out(MAIN_HELP);
        return 0;
      case "--version":
        if (parseArgs(tail, {}).positionals.length > 0) {
          throw new UsageError("--version takes no arguments");
        }
        io.out(`${CLI_VERSION}\n`);
        return 0;
      case "sessions":
        return await runSessions(io, tail, dataDir);
      case "layout":
        return await runLayout(io, tail);
      case "prune-raw":
        return await runPruneRaw(io, tail);
      case "traces":
        return await runTraces(io, tail);
      default:
        parseArgs([command], {});
        throw new UsageError(`unknown command '${command}'`);
    }
  } catch (error) {
    return report(io, error);
  }
}

/**
 * Reports `error` as the command line reports a usage error (two lines on stderr) and returns
 * its exit code, 2: for what the runtime's entry point refuses before `runCli` (an argument whose
 * bytes are not valid UTF-8).
 */
export function reportUsageError(io: CliIo, error: UsageError): number {
  return report(terminalSafeIo(io), error);
}

/** Prints one line for a failure and returns its exit code. */
function report(io: CliIo, error: unknown): number {
  if (error instanceof UsageError) {
    io.err(inlined`usage error: ${error.message}\nRun 'loop-sessions --help' for the commands.\n`);
    return 2;
  }
  if (error instanceof OutputError) {
    io.err(inlined`error: ${error.message}\n`);
    return 1;
  }
  if (error instanceof PermissionDenied) {
    io.err(inlined`error: permission denied: ${error.path}; check the file's owner and mode\n`);
    return 1;
  }
  if (error instanceof SessionError || error instanceof FsError || error instanceof LayoutError) {
    io.err(inlined`error: ${(error as Error).message}\n`);
    return 1;
  }
  if (isStackOverflow(error)) {
    // Stored data nested or sized beyond what the command can walk: a failure of this input, said
    // in one line like the others. Any other unexpected error is a defect and keeps its trace.
    io.err(
      inlined`error: ${
        (error as Error).message
      }: the data read is nested too deeply or too large for this command\n`,
    );
    return 1;
  }
  throw error;
}
