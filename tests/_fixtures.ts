// Builders of synthetic Loop sessions for tests. Synthetic only: no real cwd or conversation.
import type { FileSystem } from "../src/port/fs.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { encodeRoundIndex, parseRoundIndexText, type RoundIndex } from "../src/loop/storage.ts";
import { MemoryFs } from "../adapters/memory.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { ProcessProbe } from "../src/loop/lock.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { FsIoError } from "../src/port/errors.ts";
import { hookedFs } from "./_hooks.ts";

let clock = 1_700_000_000_000;

/** A user message holding only an image: not eligible for a fallback title. */
export function imageOnly(): Message {
  return {
    role: "user",
    content: [{ type: "image", data: "AAAA", mimeType: "image/png" }],
    timestamp: 1,
  } as Message;
}

/** A user message with text content. */
export function user(text: string): Message {
  return { role: "user", content: text, timestamp: clock++ } as Message;
}

/**
 * A finished assistant message with text alone ("stop"), typed so a test can change it in place,
 * as a host streaming into its last message does.
 */
export function streamedAssistant(
  text: string,
): Message & { content: unknown[]; stopReason: string } {
  return {
    role: "assistant",
    content: [{ type: "text", text }],
    api: "synthetic-api",
    provider: "synthetic",
    model: "model-1",
    usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2 },
    stopReason: "stop",
    timestamp: 1,
  } as unknown as Message & { content: unknown[]; stopReason: string };
}

/** A completed assistant message with text and optional tool calls. */
export function assistant(text: string, toolCalls: { id: string; name: string }[] = []): Message {
  return {
    role: "assistant",
    content: [
      { type: "text", text },
      ...toolCalls.map((call) => ({
        type: "toolCall",
        id: call.id,
        name: call.name,
        arguments: { path: "a.txt" },
      })),
    ],
    api: "synthetic-api",
    provider: "synthetic",
    model: "model-1",
    usage: { input: 10, output: 20, cacheRead: 0, cacheWrite: 0, totalTokens: 30 },
    stopReason: toolCalls.length > 0 ? "toolUse" : "stop",
    timestamp: clock++,
  } as unknown as Message;
}

/** A tool result answering `id`. */
export function toolResult(id: string, name: string, text = "ok"): Message {
  return {
    role: "toolResult",
    toolCallId: id,
    toolName: name,
    content: [{ type: "text", text }],
    isError: false,
    timestamp: clock++,
  } as unknown as Message;
}

/**
 * A version-2 session file: the header of session `id` recorded for `cwd`, then `messages`, one
 * JSON line each (newline-terminated).
 */
export function legacySessionBytes(
  id: string,
  cwd: string,
  messages: readonly unknown[],
): Uint8Array {
  const header = {
    format: "loop-session",
    version: 2,
    id,
    cwd,
    createdAt: "2025-01-01T00:00:00.000Z",
    updatedAt: "2025-01-01T00:00:00.000Z",
    permissionPreset: "read-only",
  };
  return new TextEncoder().encode(
    [header, ...messages].map((record) => JSON.stringify(record)).join("\n") + "\n",
  );
}

/** A conversation of `rounds` user rounds; every other round uses a tool. */
export function conversation(rounds: number, prefix = "r"): Message[] {
  const out: Message[] = [];
  for (let i = 0; i < rounds; i++) {
    out.push(user(`${prefix}${i} question ✓`));
    if (i % 2 === 1) {
      out.push(assistant(`${prefix}${i} calling`, [{ id: `${prefix}call${i}`, name: "read" }]));
      out.push(toolResult(`${prefix}call${i}`, "read", `${prefix}${i} file body`));
    }
    out.push(assistant(`${prefix}${i} answer`));
  }
  return out;
}

/** Rewrites the index.json of session directory `dir` as `change` makes it, in canonical form. */
export async function rewriteIndex(
  fs: FileSystem,
  dir: string,
  change: (index: RoundIndex) => RoundIndex,
): Promise<void> {
  const file = `${dir}/index.json`;
  const index = parseRoundIndexText(new TextDecoder().decode(await fs.readFile(file)));
  if (index === undefined) throw new Error(`${file} is not a valid index`);
  await fs.writeFile(file, encodeRoundIndex(change(index)));
}

/**
 * Rewrites the index.json of session directory `dir` as an index without a recorded fallback
 * title (as written before that field existed): a fast listing then reads the session's first
 * user message from its log for the title.
 */
export async function withoutRecordedTitle(fs: FileSystem, dir: string): Promise<void> {
  await rewriteIndex(fs, dir, ({ fallbackTitle: _recorded, ...rest }) => rest);
}

/**
 * A memory filesystem holding directory `cwd` and, in its workspace's collection under
 * `agentDir`, one saved and closed session of `rounds` user rounds (so the collection exists):
 * with the store that saved it, the session's directory and its history.
 */
export async function memoryStoreWithSession(
  agentDir: string,
  cwd: string,
  rounds = 1,
): Promise<{ fs: MemoryFs; store: SessionStore; session: string; history: Message[] }> {
  const fs = new MemoryFs();
  await fs.mkdir(cwd, { recursive: true });
  const store = new SessionStore({ fs, agentDir });
  const saved = await store.create(cwd);
  const history = conversation(rounds);
  await saved.commit(history);
  await saved.close();
  return { fs, store, session: saved.getSessionPath(), history };
}

/** A saved and closed session of three rounds, as `savedThreeRounds` returns it. */
export interface ThreeRoundSession {
  readonly fs: MemoryFs;
  readonly store: SessionStore;
  readonly dir: string;
  readonly history: Message[];
  readonly metaPath: string;
  readonly logPath: string;
  readonly indexPath: string;
}

/**
 * A memory filesystem holding directory `cwd` and one closed session of 3 rounds (8 messages:
 * users at 0, 2 and 6) in its workspace's collection under `agentDir`, its index.json published.
 */
export async function savedThreeRounds(agentDir: string, cwd: string): Promise<ThreeRoundSession> {
  const fs = new MemoryFs();
  await fs.mkdir(cwd, { recursive: true });
  const store = new SessionStore({ fs, agentDir });
  const session = await store.create(cwd);
  const history = conversation(3);
  await session.commit(history);
  await session.readHistory();
  await session.close();
  const dir = session.getSessionPath();
  return {
    fs,
    store,
    dir,
    history,
    metaPath: `${dir}/meta.json`,
    logPath: `${dir}/messages.jsonl`,
    indexPath: `${dir}/index.json`,
  };
}

/**
 * Leaves session directory `dir` as a compaction stopped between its renames leaves it: its
 * compacted copy complete in `<collection>/.staging-<id>-0123abcd/session/`, the directory
 * itself moved to `previous/` beside it. Returns the staging directory.
 */
export async function stoppedBetweenRenames(fs: FileSystem, dir: string): Promise<string> {
  const cut = dir.lastIndexOf("/");
  const staging = `${dir.slice(0, cut)}/.staging-${dir.slice(cut + 1)}-0123abcd`;
  await fs.mkdir(`${staging}/session`, { recursive: true });
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.writeFile(`${staging}/session/${name}`, await fs.readFile(`${dir}/${name}`));
  }
  await fs.rename(dir, `${staging}/previous`);
  return staging;
}

/**
 * A closed session of `store` in `cwd` whose log holds a replaced generation before the committed
 * one (so a compaction has bytes to drop): its id, directory and committed history.
 */
export async function compactableSession(
  store: SessionStore,
  cwd: string,
  rounds = 3,
): Promise<{ id: string; dir: string; history: Message[] }> {
  const session = await store.create(cwd);
  const first = conversation(rounds);
  const history = [user("edited"), ...first.slice(1), user("more"), assistant("ok")];
  await session.commit(first);
  await session.commit(history);
  await session.close();
  return { id: session.id, dir: session.getSessionPath(), history };
}

/** The fields of meta.json `recommit` changes. */
export interface CommittedRange {
  readonly generation: string;
  readonly start: number;
  readonly bytes: number;
  readonly messageCount: number;
}

/**
 * Appends a generation holding `lines` (each followed by a newline) after the log's bytes of
 * session directory `dir` and commits it as a writer would: meta.json's range, count and checksum
 * match it, and index.json is removed (a fast listing then reads the log). Returns meta.json's
 * range as it was before.
 */
export async function recommit(
  fs: FileSystem,
  dir: string,
  lines: readonly string[],
): Promise<CommittedRange> {
  const log = `${dir}/messages.jsonl`;
  const metaPath = `${dir}/meta.json`;
  const old = await fs.readFile(log);
  const generation = new TextEncoder().encode(lines.map((line) => `${line}\n`).join(""));
  const both = new Uint8Array(old.length + generation.length);
  both.set(old);
  both.set(generation, old.length);
  await fs.writeFile(log, both);
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(metaPath))) as CommittedRange;
  await fs.writeFile(
    metaPath,
    new TextEncoder().encode(JSON.stringify({
      ...meta,
      start: old.length,
      bytes: generation.length,
      messageCount: lines.length,
      generation: portableSha256().update(generation).digestHex(),
    })),
  );
  await fs.remove(`${dir}/index.json`);
  return meta;
}

/** The process probe of process `pid` on host `host`: the processes in `alive` are running. */
export function probe(pid: number, alive: Set<number>, host = "test-host"): ProcessProbe {
  return { pid, host, isAlive: (other) => alive.has(other) };
}

/** `fs` failing each call `fails` picks (by method and first argument) with EIO naming its path. */
export function failingWithEio(
  fs: FileSystem,
  fails: (method: string, path: string) => boolean,
): FileSystem {
  return hookedFs(fs, {
    before(method, args) {
      const path = String(args[0]);
      if (fails(method, path)) throw new FsIoError("EIO", method, path, "Input/output error");
    },
  });
}

/** The messages `session` has saved on disk, as another (read-only) manager reads them. */
export async function savedOn(store: SessionStore, session: SessionManager): Promise<Message[]> {
  const other = await store.open(session.getSessionPath(), { readOnly: true });
  const messages = other.messages;
  await other.close();
  return messages;
}
