/**
 * `@loop/sessions`: stores coding-agent sessions on any filesystem through a small port.
 *
 * This entry point is the **Loop session store**: version-3 session directories
 * (`meta.json`, `messages.jsonl`, `index.json`) with committed byte ranges, SHA-256
 * generations, crash-tail truncation, history pages by user round and pin / unread / title
 * metadata. A save that resolved survives a crash; corruption is reported, never hidden.
 *
 * Pick a filesystem adapter: `@loop/sessions/node`, `@loop/sessions/deno`, or the in-memory
 * `@loop/sessions/memory` used by tests.
 *
 * @example Save a conversation, reopen it and page its history
 * ```ts
 * import { SessionStore } from "@loop/sessions";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * await fs.mkdir("/work/app", { recursive: true });
 * const store = new SessionStore({ fs, agentDir: "/home/me/.loop" });
 *
 * const session = await store.create("/work/app");
 * await session.commit([
 *   { role: "user", content: "Hello", timestamp: Date.now() },
 * ]);
 * await session.close();
 *
 * const reopened = await store.open(session.getSessionFile());
 * const page = await reopened.readHistory();
 * if (page.messages.length !== 1) throw new Error("expected one message");
 * ```
 *
 * @module
 */
export * from "./src/port/mod.ts";
export * from "./src/loop/errors.ts";
export * from "./src/loop/records/mod.ts";
export {
  type CommitContext,
  DEFAULT_PAGE_ROUNDS,
  type HistoryPage,
  type SessionContext,
  SessionManager,
  type SessionManagerInit,
} from "./src/loop/session_manager.ts";
export {
  type OpenSessionOptions,
  SessionStore,
  type SessionStoreOptions,
  workspaceHash,
} from "./src/loop/store.ts";
export {
  INDEX_FILE,
  INDEX_FORMAT,
  INDEX_VERSION,
  META_FILE,
  MESSAGES_FILE,
  STORAGE_FORMAT,
  STORAGE_VERSION,
  type RoundEntry,
  type RoundIndex,
  type StorageMeta,
} from "./src/loop/storage.ts";
