/**
 * Schemas and validation of every record the Loop session store reads or writes: the public
 * version-2 session header, the messages of `messages.jsonl` with their tool call pairing,
 * prompt timings, runtime contexts, compaction and system prompt checkpoints, and titles.
 *
 * Every record has a valibot schema (`SessionHeaderSchema`, `MessageSchema`, ...); the
 * validators add the rules that span records and report each failure as a typed error:
 * `UnsupportedSessionError` for a format or version this library does not read,
 * `SessionFormatError` with the JSON path of the offending field (and the file when known),
 * and `ToolPairingError` with the message index.
 *
 * @example Validate a small history
 * ```ts
 * import { fallbackTitle, validateMessages } from "./mod.ts";
 * const messages: unknown[] = [
 *   { role: "user", content: "List the files", timestamp: 1 },
 *   {
 *     role: "assistant",
 *     content: [{ type: "toolCall", id: "c1", name: "ls", arguments: {} }],
 *     api: "responses",
 *     provider: "example",
 *     model: "m",
 *     usage: {},
 *     stopReason: "toolUse",
 *     timestamp: 2,
 *   },
 *   { role: "toolResult", toolCallId: "c1", toolName: "ls", content: [], isError: false, timestamp: 3 },
 * ];
 * validateMessages(messages);
 * fallbackTitle(messages); // { text: "List the files", source: "fallback", messageIndices: [0] }
 * ```
 *
 * @module
 */
export type * from "./types.ts";
export { ID_PATTERN, isSessionId } from "./ids.ts";
export {
  DEFAULT_PERMISSION_PRESET,
  isModelEffort,
  isPermissionPreset,
  MODEL_EFFORTS,
  ModelEffortSchema,
  ModelRefSchema,
  parseModelRef,
  type ParseModelRefOptions,
  PERMISSION_PRESETS,
  PermissionPresetSchema,
} from "./model.ts";
export {
  eligibleTitleOf,
  FALLBACK_TITLE_MAX_BYTES,
  FALLBACK_TITLE_WORDS,
  fallbackTitle,
  fallbackTitleOf,
  isValidTitle,
  malformedTitleText,
  normalizeTitle,
  parseSessionTitle,
  type ParseSessionTitleOptions,
  SessionTitleSchema,
  TITLE_MAX_BYTES,
  TITLE_SOURCES,
  titleInputs,
  titleTextOf,
} from "./title.ts";
export {
  AssistantMessageSchema,
  ImageContentSchema,
  MessageSchema,
  MessageValidator,
  type MessageValidatorOptions,
  STOP_REASONS,
  TextContentSchema,
  ThinkingContentSchema,
  ToolCallSchema,
  ToolResultMessageSchema,
  UserMessageSchema,
  validateMessages,
  type ValidateMessagesOptions,
  withToolDisplayName,
} from "./messages.ts";
export { PromptTimingSchema, validatePromptTimings } from "./timings.ts";
export {
  LoadedSkillSchema,
  RuntimeContextSnapshotSchema,
  validateRuntimeContexts,
} from "./runtime_context.ts";
export {
  CompactionCheckpointSchema,
  SummaryUsageSchema,
  validateCompactions,
} from "./compaction.ts";
export {
  SECTION_NAME_PATTERN,
  SystemPromptCheckpointSchema,
  validateSystemPromptCheckpoints,
} from "./system_prompt.ts";
export {
  isAbsolutePath,
  isCanonicalIsoTimestamp,
  isSupportedHeader,
  newSessionHeader,
  type NewSessionHeaderInput,
  parseSessionHeader,
  SESSION_FORMAT,
  SESSION_HEADER_VERSION,
  SessionHeaderSchema,
  validateSessionMetadata,
  type ValidateSessionMetadataOptions,
} from "./header.ts";
