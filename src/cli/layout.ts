/**
 * `layout …`, `prune-raw` and `traces …` commands over the `.loopy_loop/` tree of a repository,
 * found by walking up from the current directory like git finds `.git`.
 *
 * @module
 */
import { dirname, join } from "../port/path.ts";
import { LOOPY_DIRNAME } from "../layout/paths.ts";
import { sessionPhase } from "../layout/records.ts";
import {
  findWorkingSession,
  listRootSessionIds,
  loadSessionTree,
  readSessionState,
  type SessionNode,
  type SessionTree,
} from "../layout/tree.ts";
import { LogicalReferenceResolver } from "../layout/refs.ts";
import { LogicalReferenceError } from "../layout/errors.ts";
import { isSessionId } from "../layout/ids.ts";
import { type ParsedReference, parseLogicalReference } from "../layout/ref_grammar.ts";
import { type PrunedEntry, type PruneKind, pruneRaw } from "../layout/prune.ts";
import { findLoopyRoot } from "../layout/loopy_root.ts";
import { inspectTrace, listTraces } from "../layout/traces.ts";
import { ENGINE_PRINTABLE_LEVELS, engineJson, nestsDeeper } from "../layout/_engine_json.ts";
import { numberOption, parseArgs, UsageError } from "./args.ts";
import {
  type CliIo,
  fieldRows,
  formatBytes,
  inlined,
  JSON_INDENTED_LEVELS,
  printJson,
  Progress,
  resolvePath,
  table,
} from "./output.ts";

const HELP: Readonly<Record<string, string>> = {
  tree: `Usage: loop-sessions layout tree [ROOT] [--json]

Prints each root session's recursive tree with its status; '*' marks the deepest live session,
the only one that receives work.`,
  show: `Usage: loop-sessions layout show <session id> [--json]

Shows a session's layout, depth, parent, status, children and manifest fields (its origin with
--json).`,
  resolve: `Usage: loop-sessions layout resolve <logical ref> [--session ID] [--json]

Resolves repo:/, session:/, root:/, parent:/, session:<id>:/ or trace:<manifest>:/ references to a
confined path. --session names the current session (default: the working session when only one
tree exists).`,
  "prune-raw":
    `Usage: loop-sessions prune-raw [--older-than DAYS] [--session ID] [--legacy-traces] [--dry-run] [--json]

Deletes raw attempt directories (raw/<NNNN>_<workflow>/) of folded sessions, and the temp files
of writes a crash interrupted (.<name>.<random>.tmp, an hour old); never a durable file.
--session prunes that session only (its children have ids of their own). --legacy-traces
also removes the historical .loopy_loop/traces/ mirror and, without --session, its outbox.
--dry-run prints the plan and changes nothing. Entries kept by the rules (running, too recent, a
link) are listed as skipped; one that could not be read or removed is listed with the error and
makes the exit code 1.`,
  traces: `Usage: loop-sessions traces list [--json]
       loop-sessions traces inspect <attempt or manifest id> [--json]

Lists legacy mirror-layout trace manifests with their seal status, or shows one manifest's
inventory with every file's hash verified.`,
};

/** Finds the repository root: the nearest directory from `start` upward holding `.loopy_loop/`. */
export async function findRepoRoot(io: CliIo, start: string): Promise<string> {
  const loopyRoot = await findLoopyRoot(io.fs, start);
  if (loopyRoot === undefined) {
    throw new UsageError(
      `no ${LOOPY_DIRNAME}/ directory in '${start}' or any parent; run from inside a repository`,
    );
  }
  return dirname(loopyRoot);
}

/**
 * Refuses, as a usage error, a session id argument (`what`: how the command line names it) that
 * no session can have: one of neither session id form (a path, `..`, an empty name, `NOPE`),
 * which no session.json may record.
 */
function sessionIdArgument(value: string, what: string): void {
  if (!isSessionId(value)) throw new UsageError(`${what} must be a session id, got '${value}'`);
}

function helpOr(io: CliIo, key: string, parsed: { flags: ReadonlySet<string> }): boolean {
  if (!parsed.flags.has("help")) return false;
  io.out((HELP[key] ?? "") + "\n");
  return true;
}

interface TreeLine {
  readonly id: string;
  readonly depth: number;
  readonly status: string;
  readonly phase: string;
  readonly layout: string;
  readonly working: boolean;
  /** True when the session's state.json could not be read. */
  readonly invalid: boolean;
}

/** The lines of `tree`, and why its working session is unknown (a state on its chain is bad). */
async function treeLines(
  io: CliIo,
  tree: SessionTree,
): Promise<{ lines: TreeLine[]; workingError?: string }> {
  let working: Awaited<ReturnType<typeof findWorkingSession>>;
  let workingError: string | undefined;
  try {
    working = await findWorkingSession(io.fs, tree);
  } catch (error) {
    // One unreadable state on the active chain leaves the working session unknown; the tree
    // itself is still shown, that session marked invalid below.
    if (!(error instanceof Error)) throw error;
    workingError = error.message;
  }
  const lines: TreeLine[] = [];
  const visit = async (node: SessionNode): Promise<void> => {
    let status = "unknown";
    let phase = "unknown";
    let invalid = false;
    try {
      const state = await readSessionState(io.fs, node.dir);
      status = state.status;
      phase = sessionPhase(state);
    } catch (error) {
      if (!(error instanceof Error)) throw error;
      status = `invalid state.json (${error.message})`;
      invalid = true;
    }
    lines.push({
      id: node.sessionId,
      depth: node.depth,
      status,
      phase,
      layout: node.layout,
      working: working?.node.sessionId === node.sessionId,
      invalid,
    });
    for (const child of node.childIds) {
      const childNode = tree.get(child);
      if (childNode !== undefined) await visit(childNode);
    }
  };
  await visit(tree.root);
  return workingError === undefined ? { lines } : { lines, workingError };
}

/** Runs `layout <subcommand> …`; returns the exit code. */
export async function runLayout(io: CliIo, args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "help" || sub === "--help" || sub === "-h") {
    const help = `Usage: loop-sessions layout <tree|show|resolve> [options]\n`;
    // A missing command is a usage error, like a missing top-level command: help on stderr, 2.
    if (sub === undefined) {
      io.err(help);
      return 2;
    }
    parseArgs(rest, {}); // an option after it is still an unknown one
    io.out(help);
    return 0;
  }
  if (sub === "tree") {
    const parsed = parseArgs(rest, { json: "boolean" });
    if (helpOr(io, "tree", parsed)) return 0;
    if (parsed.positionals.length > 1) throw new UsageError("layout tree takes at most one ROOT");
    for (const root of parsed.positionals) sessionIdArgument(root, "ROOT");
    const repoRoot = await findRepoRoot(io, io.cwd);
    const roots = parsed.positionals.length === 1
      ? parsed.positionals
      : await listRootSessionIds(io.fs, repoRoot);
    const trees: { root: string; sessions: TreeLine[]; error?: string }[] = [];
    for (const root of roots) {
      let tree: SessionTree;
      try {
        tree = await loadSessionTree(io.fs, repoRoot, root);
      } catch (error) {
        // Named, the tree must load; listed, one that does not is reported beside the others.
        if (parsed.positionals.length === 1 || !(error instanceof Error)) throw error;
        trees.push({ root, sessions: [], error: error.message });
        continue;
      }
      const { lines, workingError } = await treeLines(io, tree);
      trees.push({
        root: tree.rootSessionId,
        sessions: lines,
        ...(workingError === undefined ? {} : { error: workingError }),
      });
    }
    if (parsed.flags.has("json")) printJson(io, { repoRoot, trees });
    else {
      if (trees.length === 0) io.out("No sessions found.\n");
      for (const tree of trees) {
        if (tree.sessions.length === 0 && tree.error !== undefined) {
          io.out(inlined`  ${tree.root}  invalid tree (${tree.error})\n`);
          continue;
        }
        for (const line of tree.sessions) {
          io.out(
            inlined`${line.working ? "*" : " "} ${
              "  ".repeat(line.depth)
            }${line.id}  ${line.status}${line.layout === "mirror" ? " (mirror)" : ""}\n`,
          );
        }
        if (tree.error !== undefined) io.out(inlined`  (working session unknown: ${tree.error})\n`);
      }
    }
    // A tree or a state that cannot be read is a finding.
    const findings = trees.some((t) => t.error !== undefined || t.sessions.some((s) => s.invalid));
    return findings ? 1 : 0;
  }
  if (sub === "show") {
    const parsed = parseArgs(rest, { json: "boolean" });
    if (helpOr(io, "show", parsed)) return 0;
    const [id] = parsed.positionals;
    if (id === undefined || parsed.positionals.length > 1) {
      throw new UsageError("layout show takes one <session id>");
    }
    sessionIdArgument(id, "<session id>");
    const repoRoot = await findRepoRoot(io, io.cwd);
    const tree = await loadSessionTree(io.fs, repoRoot, id);
    const node = tree.require(id);
    const state = await readSessionState(io.fs, node.dir);
    const result = {
      sessionId: node.sessionId,
      dir: node.dir,
      layout: node.layout,
      depth: node.depth,
      parentSessionId: node.parentSessionId,
      rootSessionId: node.rootSessionId,
      status: state.status,
      phase: sessionPhase(state),
      children: node.childIds,
      manifest: node.manifest,
    };
    if (parsed.flags.has("json")) printJson(io, result);
    else {
      const rows: [string, string][] = [
        ["session", result.sessionId],
        ["dir", result.dir],
        ["layout", result.layout],
        ["depth", String(result.depth)],
        ["parent", result.parentSessionId ?? "-"],
        ["root", result.rootSessionId],
        ["status", `${result.status} (${result.phase})`],
        ["children", result.children.length === 0 ? "-" : result.children.join(", ")],
      ];
      // The manifest's other fields, as its session.json names them (a nested record, such as
      // its origin, with --json).
      for (const [key, value] of Object.entries(result.manifest)) {
        if (SHOWN_MANIFEST_FIELDS.has(key) || (typeof value === "object" && value !== null)) {
          continue;
        }
        rows.push([key, value === null ? "-" : String(value)]);
      }
      io.out(fieldRows(rows));
    }
    return 0;
  }
  if (sub === "resolve") {
    const parsed = parseArgs(rest, { session: "value", json: "boolean" });
    if (helpOr(io, "resolve", parsed)) return 0;
    const [reference] = parsed.positionals;
    if (reference === undefined || parsed.positionals.length > 1) {
      throw new UsageError("layout resolve takes one <logical ref>");
    }
    // A reference the grammar refuses is a bad argument, refused before any file is read.
    let scope: ParsedReference;
    try {
      scope = parseLogicalReference(reference);
    } catch (error) {
      if (error instanceof LogicalReferenceError) throw new UsageError(error.message);
      throw error;
    }
    if (scope.scope === "session" && scope.id !== undefined) {
      sessionIdArgument(scope.id, "the session of session:<id>:/");
    }
    let sessionId = parsed.values.get("session");
    if (sessionId !== undefined) sessionIdArgument(sessionId, "--session");
    const repoRoot = await findRepoRoot(io, io.cwd);
    if (sessionId === undefined) {
      const roots = await listRootSessionIds(io.fs, repoRoot);
      if (roots.length !== 1) {
        throw new UsageError(`pass --session: the repository has ${roots.length} session trees`);
      }
      const tree = await loadSessionTree(io.fs, repoRoot, roots[0] as string);
      sessionId = (await findWorkingSession(io.fs, tree))?.node.sessionId ?? tree.rootSessionId;
    }
    const resolver = await LogicalReferenceResolver.forSession(io.fs, { repoRoot, sessionId });
    const resolved = await resolver.resolve(reference);
    if (parsed.flags.has("json")) printJson(io, { sessionId, ...resolved });
    // An absent target says why: not written (absent), or raw output a prune removed (pruned).
    else io.out(inlined`${resolved.path}${resolved.exists ? "" : ` (${resolved.status})`}\n`);
    return 0;
  }
  throw new UsageError(`unknown command 'layout ${sub}'`);
}

/** Runs `prune-raw …`; returns the exit code. */
export async function runPruneRaw(io: CliIo, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, {
    "older-than": "value",
    session: "value",
    "legacy-traces": "boolean",
    "dry-run": "boolean",
    json: "boolean",
  });
  if (helpOr(io, "prune-raw", parsed)) return 0;
  if (parsed.positionals.length > 0) {
    throw new UsageError("prune-raw takes no positional arguments");
  }
  const olderThanDays = numberOption(parsed, "older-than", false);
  const sessionId = parsed.values.get("session");
  if (sessionId !== undefined) sessionIdArgument(sessionId, "--session");
  const repoRoot = await findRepoRoot(io, io.cwd);
  const json = parsed.flags.has("json");
  const progress = new Progress(io, "pruning", json);
  let report: Awaited<ReturnType<typeof pruneRaw>>;
  try {
    report = await pruneRaw(io.fs, join(repoRoot, LOOPY_DIRNAME), {
      ...(olderThanDays === undefined ? {} : { olderThanDays }),
      ...(sessionId === undefined ? {} : { sessionId }),
      legacyTraces: parsed.flags.has("legacy-traces"),
      dryRun: parsed.flags.has("dry-run"),
      now: () => new Date(io.now()),
      onProgress: (done: number, total: number) => progress.update(done, total),
    });
  } finally {
    progress.end(); // an error's line never joins the progress line
  }
  // What could not be read or removed is a finding (exit 1); what was kept by the rules (running,
  // too recent, a link, a mirror session) is not.
  const failed = report.skipped.some((item) => PRUNE_FAILURES.has(item.reason));
  if (json) {
    printJson(io, report);
    return failed ? 1 : 0;
  }
  const verb = report.dryRun ? "would remove" : "removed";
  for (const item of report.removed) {
    io.out(inlined`${verb} ${item.path} (${formatBytes(item.bytes)})\n`);
  }
  for (const item of report.skipped) {
    io.out(
      PRUNE_FAILURES.has(item.reason)
        ? inlined`skipped ${item.path}: ${item.reason} (${item.detail})\n`
        : inlined`skipped ${item.path}: ${item.reason}\n`,
    );
  }
  // Raw attempt directories and trace trees apart; an interrupted prune's leftover counts as what
  // it was, by where it lies.
  const kindOf = (item: PrunedEntry): PruneKind => {
    if (item.kind !== "pruning_leftover") return item.kind;
    if (item.path.includes(`/${LOOPY_DIRNAME}/traces/`)) return "legacy_traces";
    if (item.path.includes(`/${LOOPY_DIRNAME}/trace_finalization_outbox/`)) {
      return "finalization_outbox";
    }
    return "raw_attempt";
  };
  const counted = (kind: PruneKind) =>
    report.removed.filter((item) => kindOf(item) === kind).length;
  let summary = `${report.dryRun ? "would prune" : "pruned"} ${
    counted("raw_attempt")
  } raw attempt dir(s)`;
  const temps = counted("temp_leftover");
  if (temps > 0) summary += ` and ${temps} temp file(s) left by a crash`;
  if (parsed.flags.has("legacy-traces")) {
    summary += `; ${verb} ${counted("legacy_traces")} legacy trace tree(s)`;
    const outbox = counted("finalization_outbox");
    if (outbox > 0) {
      summary += ` and ${outbox} finalization outbox entr${outbox === 1 ? "y" : "ies"}`;
    }
  }
  io.out(`${summary}, ${formatBytes(report.bytes)}\n`);
  return failed ? 1 : 0;
}

/** The manifest fields `layout show` shows in rows of their own. */
const SHOWN_MANIFEST_FIELDS: ReadonlySet<string> = new Set([
  "session_id",
  "parent_session_id",
  "root_session_id",
  "depth",
  "layout",
]);

/** The skip reasons that are failures: something could not be read or removed. */
const PRUNE_FAILURES: ReadonlySet<string> = new Set([
  "unreadable",
  "remove_failed",
  "state_unreadable",
  "manifest_unreadable",
]);

/** Runs `traces list|inspect …`; returns the exit code. */
export async function runTraces(io: CliIo, args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  const parsed = parseArgs(rest, { json: "boolean" });
  if (sub === undefined) {
    // A missing command is a usage error, like a missing top-level command: help on stderr, 2.
    io.err(HELP.traces + "\n");
    return 2;
  }
  if (sub === "help" || sub === "--help" || sub === "-h" || parsed.flags.has("help")) {
    io.out(HELP.traces + "\n");
    return 0;
  }
  const repoRoot = await findRepoRoot(io, io.cwd);
  const loopyRoot = join(repoRoot, LOOPY_DIRNAME);
  if (sub === "list") {
    if (parsed.positionals.length > 0) {
      throw new UsageError("traces list takes no positional arguments");
    }
    const traces = await listTraces(io.fs, loopyRoot);
    if (parsed.flags.has("json")) printJson(io, traces);
    else if (traces.length === 0) io.out("No traces found.\n");
    else {
      io.out(table(
        ["MANIFEST", "LIFECYCLE", "INTEGRITY", "SESSION", "WORKFLOW", "PATH"],
        traces.map((t) =>
          [t.manifestId, t.lifecycle, t.integrity, t.sessionId, t.workflowId, t.manifestPath].map((
            cell,
          ) => cell ?? "-")
        ),
      ));
    }
    // A trace whose integrity check failed is a finding, as `traces inspect` reports it.
    return traces.some((t) => t.integrity === "failed") ? 1 : 0;
  }
  if (sub === "inspect") {
    const [ref] = parsed.positionals;
    if (ref === undefined || parsed.positionals.length > 1) {
      throw new UsageError("traces inspect takes one <attempt or manifest id>");
    }
    const inspection = await inspectTrace(
      io.fs,
      loopyRoot,
      ref.includes("/") ? resolvePath(io, ref) : ref,
    );
    // Printed as the engine prints it: `json.dumps(..., indent=2, sort_keys=True)`. A manifest
    // nested deeper than the engine can print at all has its deep levels on one line (indenting
    // thousands of levels takes space quadratic in the depth).
    const shown = { ...inspection.manifest, observed_integrity: inspection.observedIntegrity };
    const levels = nestsDeeper(shown, ENGINE_PRINTABLE_LEVELS) ? JSON_INDENTED_LEVELS : Infinity;
    io.out(`${engineJson(shown, 2, levels)}\n`);
    return inspection.integrity === "failed" ? 1 : 0;
  }
  throw new UsageError(`unknown command 'traces ${sub}'`);
}
