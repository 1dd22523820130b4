/**
 * `sessions …` commands: list, show, history, verify, migrate, archive, restore, delete, compact
 * and salvage over a Loop session store on the real disk.
 *
 * @module
 */
import { NotFound } from "../port/errors.ts";
import { basename, dirname, isAbsolute, join, resolve } from "../port/path.ts";
import { SessionNotFoundError } from "../loop/errors.ts";
import { SessionStore } from "../loop/store.ts";
import type { SessionInfo } from "../loop/discovery.ts";
import { readStorageMeta } from "../loop/storage.ts";
import { salvageSession, type VerifyReport, verifySession } from "../loop/verify.ts";
import { legacySessionId, readLegacySession } from "../loop/legacy.ts";
import { type HistoryPage, pageBounds } from "../loop/session_manager.ts";
import type { Message } from "../loop/records/mod.ts";
import { numberOption, parseArgs, UsageError } from "./args.ts";
import { type CliIo, formatBytes, printJson, Progress, table } from "./output.ts";

const UUID_NAME = /^[a-f0-9-]{36}$/;

/** Help text of every `sessions` subcommand. */
export const SESSIONS_HELP: Readonly<Record<string, string>> = {
  list:
    `Usage: loop-sessions sessions list [--cwd DIR | --dir COLLECTION | --all-workspaces] [--fast] [--json]

Lists sessions, newest activity first (pinned first). --fast reads only meta.json and index.json
(the mode for pickers); without it every history is validated. Default: the sessions of the
current directory's workspace.`,
  show: `Usage: loop-sessions sessions show <id|path> [--json]

Shows a session's header, counts, generation, committed range, unread/pinned state and archive
membership. Reads only.`,
  history: `Usage: loop-sessions sessions history <id|path> [--before N] [--json]

Prints a page of history: the latest three user rounds, or the three before message index N.`,
  verify: `Usage: loop-sessions sessions verify [<id|path> | --all] [--json]

Checks checksums, every message and every metadata rule. Exit code 1 when anything is corrupt.
Never modifies anything; points at the first bad byte and message.`,
  migrate: `Usage: loop-sessions sessions migrate [<path> | --all] [--dry-run] [--json]

Migrates legacy version-2 <id>.jsonl sessions to version-3 directories. The original file is
kept unchanged as a backup. --dry-run lists what would migrate.`,
  archive: `Usage: loop-sessions sessions archive <id...>

Marks sessions archived in their collection. Touches no session file.`,
  restore: `Usage: loop-sessions sessions restore <id...>

Removes sessions from their collection's archive.`,
  delete: `Usage: loop-sessions sessions delete <id...> [--include-unarchived]

Deletes archived sessions (directory, legacy backup and companions) through a staged delete.`,
  compact: `Usage: loop-sessions sessions compact <id|path> [--json]

Rewrites messages.jsonl to hold only the committed generation (staged and atomic).`,
  salvage: `Usage: loop-sessions sessions salvage <id|path> --to <collection dir> [--json]

Exports the longest valid prefix of a damaged session into a new session under the given
collection directory. The original is left untouched.`,
};

/** Shared options of the sessions commands. */
interface StoreFlags {
  readonly agentDir: string;
}

function agentDirOf(io: CliIo, explicit: string | undefined): string {
  const chosen = explicit ?? io.env("LOOP_DATA_DIR");
  if (chosen !== undefined && chosen !== "") return resolve(io.cwd, chosen);
  const home = io.env("HOME") ?? io.fs.homeDir?.();
  if (home === undefined) {
    throw new UsageError("cannot find the home directory; pass --data-dir or set LOOP_DATA_DIR");
  }
  return join(home, ".loop");
}

function storeFor(io: CliIo, flags: StoreFlags, sessionDir?: string): SessionStore {
  return new SessionStore({
    fs: io.fs,
    agentDir: flags.agentDir,
    sha256: io.sha256,
    now: io.now,
    ...(sessionDir === undefined ? {} : { sessionDir }),
    ...(io.process === undefined ? {} : { process: io.process }),
  });
}

async function exists(io: CliIo, path: string): Promise<boolean> {
  try {
    await io.fs.lstat(path);
    return true;
  } catch (error) {
    if (error instanceof NotFound) return false;
    throw error;
  }
}

/** The collection directories under `<agentDir>/sessions`. */
async function collections(io: CliIo, agentDir: string): Promise<string[]> {
  const root = join(agentDir, "sessions");
  try {
    return (await io.fs.readDir(root))
      .filter((e) => e.kind === "directory" && !e.name.startsWith("."))
      .map((e) => join(root, e.name));
  } catch (error) {
    if (error instanceof NotFound) return [];
    throw error;
  }
}

/**
 * Resolves `<id|path>` to what `SessionStore.open` takes: an absolute or relative path to a
 * session directory, meta.json or legacy file, or a session id searched in every collection.
 */
async function locate(io: CliIo, agentDir: string, target: string): Promise<string> {
  if (target.includes("/") || target.endsWith(".jsonl") || target === "." || target === "..") {
    const path = resolve(io.cwd, target);
    if (!(await exists(io, path))) {
      throw new SessionNotFoundError(`No session at '${path}': the path does not exist`);
    }
    return path;
  }
  if (!UUID_NAME.test(target)) {
    throw new UsageError(`'${target}' is neither a session id (a lowercase UUID) nor a path`);
  }
  const found: string[] = [];
  for (const collection of await collections(io, agentDir)) {
    if (await exists(io, join(collection, target, "meta.json"))) {
      found.push(join(collection, target));
    } else if (await exists(io, join(collection, `${target}.jsonl`))) {
      found.push(join(collection, `${target}.jsonl`));
    }
  }
  if (found.length === 0) {
    throw new SessionNotFoundError(
      `No session with id ${target} under '${
        join(agentDir, "sessions")
      }'; pass a path or --data-dir`,
    );
  }
  if (found.length > 1) {
    throw new UsageError(
      `Session id ${target} exists in several collections; pass a path: ${found.join(", ")}`,
    );
  }
  return found[0] as string;
}

/** The session directory (or legacy file) and its collection for a located target. */
function splitTarget(path: string): { dir: string; collection: string; id: string } {
  const normalized = basename(path) === "meta.json" ? dirname(path) : path;
  const name = basename(normalized);
  const id = legacySessionId(name) ?? name;
  return { dir: normalized, collection: dirname(normalized), id };
}

function infoRow(info: SessionInfo): string[] {
  return [
    info.id,
    info.updatedAt.replace("T", " ").replace(/\.\d+Z$/, "Z"),
    String(info.messageCount),
    [
      info.pinned ? "pinned" : "",
      info.unread ? "unread" : "",
      info.archived ? "archived" : "",
      info.storage === "legacy" ? "v2" : "",
    ]
      .filter((s) => s !== "").join(",") || "-",
    info.title?.text ?? "",
  ];
}

function textOf(message: Message): string {
  const content = (message as { content?: unknown }).content;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map(
    (block: { type?: string; text?: string; name?: string; thinking?: string }) => {
      if (block.type === "text") return block.text ?? "";
      if (block.type === "toolCall") return `[tool call ${block.name ?? ""}]`;
      if (block.type === "thinking") return "[thinking]";
      if (block.type === "image") return "[image]";
      return "";
    },
  ).filter((t) => t !== "").join(" ");
}

function oneLine(text: string, width = 100): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > width ? flat.slice(0, width - 1) + "…" : flat;
}

/** Runs `sessions <subcommand> …`; returns the exit code. */
export async function runSessions(
  io: CliIo,
  args: readonly string[],
  dataDir: string | undefined,
): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "help" || sub === "--help" || sub === "-h") {
    io.out(
      `Usage: loop-sessions sessions <command> [options]\n\nCommands: ${
        Object.keys(SESSIONS_HELP).join(", ")
      }\nRun 'loop-sessions sessions <command> --help' for details.\n`,
    );
    return sub === undefined ? 2 : 0;
  }
  const help = SESSIONS_HELP[sub];
  if (help === undefined) throw new UsageError(`unknown command 'sessions ${sub}'`);
  const flags = { agentDir: agentDirOf(io, dataDir) };
  switch (sub) {
    case "list":
      return await list(io, flags, rest);
    case "show":
      return await show(io, flags, rest);
    case "history":
      return await history(io, flags, rest);
    case "verify":
      return await verify(io, flags, rest);
    case "migrate":
      return await migrate(io, flags, rest);
    case "archive":
    case "restore":
    case "delete":
      return await membership(io, flags, sub, rest);
    case "compact":
      return await compact(io, flags, rest);
    case "salvage":
      return await salvage(io, flags, rest);
  }
  throw new UsageError(`unknown command 'sessions ${sub}'`);
}

function wantsHelp(io: CliIo, sub: string, parsed: { flags: ReadonlySet<string> }): boolean {
  if (!parsed.flags.has("help")) return false;
  io.out((SESSIONS_HELP[sub] ?? "") + "\n");
  return true;
}

async function list(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, {
    cwd: "value",
    dir: "value",
    "all-workspaces": "boolean",
    fast: "boolean",
    json: "boolean",
  });
  if (wantsHelp(io, "list", parsed)) return 0;
  if (parsed.positionals.length > 0) {
    throw new UsageError("sessions list takes no positional arguments");
  }
  const modes = ["cwd", "dir"].filter((n) => parsed.values.has(n)).length +
    (parsed.flags.has("all-workspaces") ? 1 : 0);
  if (modes > 1) throw new UsageError("pass only one of --cwd, --dir and --all-workspaces");
  const json = parsed.flags.has("json");
  const options = { fast: parsed.flags.has("fast"), pinnedFirst: true };
  const store = storeFor(io, flags);
  const sessions: SessionInfo[] = [];
  const failures: { path: string; error: string }[] = [];
  const add = (result: { sessions: SessionInfo[]; failures: { path: string; error: Error }[] }) => {
    sessions.push(...result.sessions);
    failures.push(...result.failures.map((f) => ({ path: f.path, error: f.error.message })));
  };
  if (parsed.flags.has("all-workspaces")) {
    for (const collection of await collections(io, flags.agentDir)) {
      add(await store.listDetailed(undefined, collection, options));
    }
  } else if (parsed.values.has("dir")) {
    add(
      await store.listDetailed(
        undefined,
        resolve(io.cwd, parsed.values.get("dir") as string),
        options,
      ),
    );
  } else {
    add(
      await store.listDetailed(
        resolve(io.cwd, parsed.values.get("cwd") ?? "."),
        undefined,
        options,
      ),
    );
  }
  sessions.sort((
    a,
    b,
  ) => (a.pinned !== b.pinned
    ? (a.pinned ? -1 : 1)
    : a.updatedAt < b.updatedAt
    ? 1
    : a.updatedAt > b.updatedAt
    ? -1
    : 0)
  );
  if (json) printJson(io, { sessions, failures });
  else {
    if (sessions.length === 0) io.out("No sessions found.\n");
    else io.out(table(["ID", "UPDATED", "MESSAGES", "STATE", "TITLE"], sessions.map(infoRow)));
    for (const failure of failures) io.err(`error: ${failure.error}\n`);
  }
  return failures.length > 0 ? 1 : 0;
}

async function show(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { json: "boolean" });
  if (wantsHelp(io, "show", parsed)) return 0;
  const [target] = parsed.positionals;
  if (target === undefined || parsed.positionals.length > 1) {
    throw new UsageError("sessions show takes one <id|path>");
  }
  const path = await locate(io, flags.agentDir, target);
  const { collection, id } = splitTarget(path);
  const store = storeFor(io, flags, collection);
  let result;
  if (path.endsWith(".jsonl")) {
    // A legacy version-2 file: read it in place (opening it would migrate it).
    const legacy = await readLegacySession(io.fs, path);
    const header = legacy.fallbackTitle !== undefined && !legacy.header.title
      ? { ...legacy.header, title: legacy.fallbackTitle }
      : legacy.header;
    result = {
      id,
      path,
      header,
      messageCount: legacy.messageCount,
      userMessageCount: legacy.userMessageCount,
      storage: null,
      legacy: true,
      unread: header.unread ?? false,
      pinnedAt: header.pinnedAt ?? null,
      archived: false,
    };
  } else {
    const session = await store.open(path, { readOnly: true });
    try {
      const header = session.getHeader();
      const messages = session.messages;
      result = {
        id,
        path: session.getSessionPath(),
        header,
        messageCount: messages.length,
        userMessageCount: messages.filter((m) => m.role === "user").length,
        storage: session.getStorageInfo() ?? null,
        legacy: false,
        unread: session.unread,
        pinnedAt: header.pinnedAt ?? null,
        archived: false,
      };
    } finally {
      await session.close();
    }
  }
  // Membership is read once the target is known to be a session (its id is then valid).
  result.archived = await store.archive.isArchived(undefined, id);
  const archived = result.archived;
  const { header, storage } = result;
  if (parsed.flags.has("json")) {
    printJson(io, result);
    return 0;
  }
  const rows: [string, string][] = [
    ["id", id],
    ["path", result.path],
    ["cwd", header.cwd],
    [
      "title",
      `${header.title?.text ?? ""}${header.title?.source === "fallback" ? " (fallback)" : ""}`,
    ],
    ["created", header.createdAt],
    ["updated", header.updatedAt],
    [
      "model",
      header.model === undefined
        ? "-"
        : `${header.model.provider}/${header.model.id}${
          header.model.effort ? ` (${header.model.effort})` : ""
        }`,
    ],
    ["permission", header.permissionPreset],
    ["messages", `${result.messageCount} (${result.userMessageCount} from the user)`],
    [
      "generation",
      storage?.generation ?? (result.legacy ? "legacy version-2 file (migrates on open)" : "-"),
    ],
    [
      "committed",
      storage === null
        ? "-"
        : `bytes ${storage.start}..${storage.start + storage.bytes} (${
          formatBytes(storage.bytes)
        })`,
    ],
    ["unread", String(result.unread)],
    ["pinned", header.pinnedAt ?? "no"],
    ["archived", String(archived)],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  io.out(rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n") + "\n");
  return 0;
}

async function history(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { before: "value", json: "boolean" });
  if (wantsHelp(io, "history", parsed)) return 0;
  const [target] = parsed.positionals;
  if (target === undefined || parsed.positionals.length > 1) {
    throw new UsageError("sessions history takes one <id|path>");
  }
  const before = numberOption(parsed, "before", true);
  const path = await locate(io, flags.agentDir, target);
  const page = path.endsWith(".jsonl")
    ? await legacyPage(io, path, before)
    : await committedPage(storeFor(io, flags, splitTarget(path).collection), path, before);
  {
    if (parsed.flags.has("json")) {
      printJson(io, page);
      return 0;
    }
    io.out(`messages ${page.start}..${page.end} of ${page.total}\n`);
    page.messages.forEach((message, i) => {
      io.out(`#${page.start + i} ${message.role.padEnd(10)} ${oneLine(textOf(message))}\n`);
    });
    if (page.start > 0) io.out(`earlier: --before ${page.start}\n`);
    return 0;
  }
}

async function committedPage(
  store: SessionStore,
  path: string,
  before: number | undefined,
): Promise<HistoryPage> {
  const session = await store.open(path, { readOnly: true });
  try {
    return await session.readHistory(before);
  } finally {
    await session.close();
  }
}

/** A history page of a legacy version-2 file, read in place (validated first, never migrated). */
async function legacyPage(
  io: CliIo,
  path: string,
  before: number | undefined,
): Promise<HistoryPage> {
  await readLegacySession(io.fs, path);
  const lines = new TextDecoder().decode(await io.fs.readFile(path)).trim().split("\n").slice(1);
  const messages = lines.map((line) => JSON.parse(line) as Message);
  const starts = messages.flatMap((m, i) => (m.role === "user" ? [i] : []));
  const [start, end] = pageBounds(
    (k) => starts[k] as number,
    starts.length,
    messages.length,
    before,
  );
  return { messages: messages.slice(start, end), start, end, total: messages.length, revision: "" };
}

function printReport(io: CliIo, report: VerifyReport): void {
  if (report.findings.length === 0) {
    io.out(`ok       ${report.dir} (${report.validMessages} messages)\n`);
    return;
  }
  io.out(`${report.ok ? "warning" : "CORRUPT"}  ${report.dir}\n`);
  for (const finding of report.findings) {
    const at = [
      finding.messageIndex === undefined ? "" : `message #${finding.messageIndex}`,
      finding.offset === undefined ? "" : `byte ${finding.offset}`,
    ].filter((s) => s !== "").join(", ");
    io.out(
      `  ${finding.severity}: ${finding.message}${
        at === "" ? "" : ` (${at})`
      }\n    in ${finding.file}\n`,
    );
  }
}

async function verify(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { all: "boolean", json: "boolean" });
  if (wantsHelp(io, "verify", parsed)) return 0;
  const json = parsed.flags.has("json");
  const dirs: string[] = [];
  if (parsed.flags.has("all")) {
    if (parsed.positionals.length > 0) throw new UsageError("pass either <id|path> or --all");
    for (const collection of await collections(io, flags.agentDir)) {
      for (const entry of await io.fs.readDir(collection)) {
        if (entry.kind === "directory" && UUID_NAME.test(entry.name)) {
          dirs.push(join(collection, entry.name));
        }
      }
    }
  } else {
    const [target] = parsed.positionals;
    if (target === undefined || parsed.positionals.length > 1) {
      throw new UsageError("sessions verify takes one <id|path> or --all");
    }
    const path = await locate(io, flags.agentDir, target);
    if (path.endsWith(".jsonl")) {
      throw new UsageError(
        `'${path}' is a legacy version-2 file; migrate it first, or verify its directory`,
      );
    }
    dirs.push(splitTarget(path).dir);
  }
  const progress = new Progress(io, "verifying", json);
  const reports: VerifyReport[] = [];
  for (const [i, dir] of dirs.entries()) {
    progress.update(i, dirs.length);
    reports.push(await verifySession(io.fs, dir, { sha256: io.sha256 }));
  }
  progress.end();
  if (json) printJson(io, reports.map(({ meta: _meta, ...rest }) => rest));
  else {
    for (const report of reports) printReport(io, report);
    if (dirs.length === 0) io.out("No sessions found.\n");
  }
  return reports.every((r) => r.ok) ? 0 : 1;
}

async function migrate(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { all: "boolean", "dry-run": "boolean", json: "boolean" });
  if (wantsHelp(io, "migrate", parsed)) return 0;
  const json = parsed.flags.has("json");
  const dryRun = parsed.flags.has("dry-run");
  const files: string[] = [];
  if (parsed.flags.has("all")) {
    if (parsed.positionals.length > 0) throw new UsageError("pass either <path> or --all");
    for (const collection of await collections(io, flags.agentDir)) {
      for (const entry of await io.fs.readDir(collection)) {
        if (entry.kind !== "file" || legacySessionId(entry.name) === undefined) continue;
        const id = legacySessionId(entry.name) as string;
        if (await exists(io, join(collection, id))) continue; // Already migrated: the backup stays.
        files.push(join(collection, entry.name));
      }
    }
  } else {
    const [target] = parsed.positionals;
    if (target === undefined || parsed.positionals.length > 1) {
      throw new UsageError("sessions migrate takes one <path> or --all");
    }
    const path = await locate(io, flags.agentDir, target);
    if (!path.endsWith(".jsonl")) {
      throw new UsageError(`'${path}' is not a legacy <id>.jsonl session file`);
    }
    files.push(path);
  }
  const results: { path: string; migratedTo?: string; error?: string }[] = [];
  const progress = new Progress(io, "migrating", json);
  for (const [i, file] of files.entries()) {
    progress.update(i, files.length);
    if (dryRun) {
      results.push({
        path: file,
        migratedTo: join(dirname(file), legacySessionId(basename(file)) as string),
      });
      continue;
    }
    try {
      const session = await storeFor(io, flags, dirname(file)).open(file, { readOnly: true });
      results.push({ path: file, migratedTo: session.getSessionPath() });
      await session.close();
    } catch (error) {
      results.push({ path: file, error: (error as Error).message });
    }
  }
  progress.end();
  if (json) printJson(io, { dryRun, results });
  else {
    if (files.length === 0) io.out("No legacy sessions to migrate.\n");
    for (const r of results) {
      if (r.error !== undefined) io.out(`failed   ${r.path}: ${r.error}\n`);
      else io.out(`${dryRun ? "would migrate" : "migrated"} ${r.path} -> ${r.migratedTo}\n`);
    }
  }
  return results.some((r) => r.error !== undefined) ? 1 : 0;
}

async function membership(
  io: CliIo,
  flags: StoreFlags,
  sub: "archive" | "restore" | "delete",
  args: readonly string[],
): Promise<number> {
  const parsed = parseArgs(
    args,
    sub === "delete" ? { "include-unarchived": "boolean", json: "boolean" } : { json: "boolean" },
  );
  if (wantsHelp(io, sub, parsed)) return 0;
  if (parsed.positionals.length === 0) {
    throw new UsageError(`sessions ${sub} takes at least one <id>`);
  }
  const byCollection = new Map<string, string[]>();
  for (const target of parsed.positionals) {
    const { collection, id } = splitTarget(await locate(io, flags.agentDir, target));
    byCollection.set(collection, [...(byCollection.get(collection) ?? []), id]);
  }
  for (const [collection, ids] of byCollection) {
    const store = storeFor(io, flags, collection);
    if (sub === "delete") {
      await store.archive.delete(undefined, ids, {
        archivedOnly: !parsed.flags.has("include-unarchived"),
      });
    } else {
      await store.archive.set(undefined, ids, sub === "archive");
    }
    for (const id of ids) {
      io.out(
        `${sub === "archive" ? "archived" : sub === "restore" ? "restored" : "deleted"} ${id}\n`,
      );
    }
  }
  return 0;
}

async function compact(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { json: "boolean" });
  if (wantsHelp(io, "compact", parsed)) return 0;
  const [target] = parsed.positionals;
  if (target === undefined || parsed.positionals.length > 1) {
    throw new UsageError("sessions compact takes one <id|path>");
  }
  const path = await locate(io, flags.agentDir, target);
  const { dir, collection } = splitTarget(path);
  const result = await storeFor(io, flags, collection).compact(dir);
  if (parsed.flags.has("json")) printJson(io, result);
  else io.out(`compacted ${dir}\n`);
  return 0;
}

async function salvage(io: CliIo, flags: StoreFlags, args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args, { to: "value", json: "boolean" });
  if (wantsHelp(io, "salvage", parsed)) return 0;
  const [target] = parsed.positionals;
  const to = parsed.values.get("to");
  if (target === undefined || parsed.positionals.length > 1 || to === undefined) {
    throw new UsageError("sessions salvage takes one <id|path> and --to <collection dir>");
  }
  const path = await locate(io, flags.agentDir, target);
  const { dir } = splitTarget(path);
  await readStorageMeta(io.fs, dir);
  const toCollection = isAbsolute(to) ? to : resolve(io.cwd, to);
  const result = await salvageSession(io.fs, dir, { sha256: io.sha256, toCollection, now: io.now });
  if (parsed.flags.has("json")) printJson(io, result);
  else {
    io.out(`salvaged ${result.kept} message(s) into ${result.dir} (dropped ${result.dropped})\n`);
    if (result.droppedMetadata.length > 0) {
      io.out(`dropped metadata: ${result.droppedMetadata.join(", ")}\n`);
    }
  }
  return 0;
}
