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
 * await reopened.close();
 * ```
 *
 * @module
 */
export * from "./src/port/mod.ts";
export * from "./src/loop/errors.ts";
// Record types and validators (the valibot schemas stay internal: their types are valibot's).
export type {
  AssistantContentBlock,
  AssistantMessage,
  CompactionCheckpoint,
  ContentBlock,
  ImageContent,
  LoadedSkill,
  Message,
  MessageRole,
  ModelEffort,
  ModelRef,
  PermissionPreset,
  PromptTiming,
  RecordLocation,
  RuntimeContextSnapshot,
  SessionHeader,
  SessionTitle,
  StopReason,
  SummaryUsage,
  SystemPromptCheckpoint,
  TextContent,
  ThinkingContent,
  TitleInput,
  TitleModel,
  TitleSource,
  ToolCall,
  ToolResultContentBlock,
  ToolResultMessage,
  Usage,
  UserContentBlock,
  UserMessage,
} from "./src/loop/records/types.ts";
export { ID_PATTERN, isSessionId } from "./src/loop/records/ids.ts";
export {
  DEFAULT_PERMISSION_PRESET,
  isModelEffort,
  isPermissionPreset,
  MODEL_EFFORTS,
  parseModelRef,
  type ParseModelRefOptions,
  PERMISSION_PRESETS,
} from "./src/loop/records/model.ts";
export {
  FALLBACK_TITLE_MAX_BYTES,
  FALLBACK_TITLE_WORDS,
  fallbackTitle,
  fallbackTitleOf,
  isValidTitle,
  normalizeTitle,
  parseSessionTitle,
  type ParseSessionTitleOptions,
  TITLE_MAX_BYTES,
  TITLE_SOURCES,
  titleInputs,
  titleTextOf,
} from "./src/loop/records/title.ts";
export {
  MessageValidator,
  type MessageValidatorOptions,
  STOP_REASONS,
  validateMessages,
  type ValidateMessagesOptions,
  withToolDisplayName,
} from "./src/loop/records/messages.ts";
export { validatePromptTimings } from "./src/loop/records/timings.ts";
export { MAX_HEADER_NESTING, MAX_MESSAGE_NESTING } from "./src/loop/records/_validation.ts";
export { validateRuntimeContexts } from "./src/loop/records/runtime_context.ts";
export { validateCompactions } from "./src/loop/records/compaction.ts";
export {
  SECTION_NAME_PATTERN,
  validateSystemPromptCheckpoints,
} from "./src/loop/records/system_prompt.ts";
export {
  isAbsolutePath,
  isCanonicalIsoTimestamp,
  isSupportedHeader,
  newSessionHeader,
  type NewSessionHeaderInput,
  parseSessionHeader,
  SESSION_FORMAT,
  SESSION_HEADER_VERSION,
  validateSessionMetadata,
  type ValidateSessionMetadataOptions,
} from "./src/loop/records/header.ts";
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
  MESSAGES_FILE,
  META_FILE,
  type RoundEntry,
  type RoundIndex,
  STORAGE_FORMAT,
  STORAGE_VERSION,
  type StorageMeta,
} from "./src/loop/storage.ts";
export {
  acquireWriterLock,
  COLLECTION_LOCK_FILE,
  HeldLock,
  type LockFileState,
  type LockRecord,
  type LockState,
  type ProcessProbe,
  type StoreContext,
  WRITER_LOCK_FILE,
} from "./src/loop/lock.ts";
export {
  LEGACY_EXTENSION,
  legacySessionId,
  type LegacySummary,
  type ReadLegacyOptions,
  readLegacySession,
} from "./src/loop/legacy.ts";
export {
  comparePinnedFirst,
  compareSessions,
  type ListFailure,
  type ListOptions,
  type ListResult,
  type SessionInfo,
} from "./src/loop/discovery.ts";
export {
  ARCHIVE_FILE,
  type ArchiveHost,
  type DeleteOptions,
  SessionArchive,
  SessionNotArchivedError,
} from "./src/loop/archive.ts";
export { type CompactionResult } from "./src/loop/compaction.ts";
export { type CleanupReport } from "./src/loop/maintenance.ts";
export {
  type FindingSeverity,
  type SalvageOptions,
  type SalvageResult,
  salvageSession,
  type VerifyFinding,
  type VerifyOptions,
  type VerifyReport,
  verifySession,
} from "./src/loop/verify.ts";
