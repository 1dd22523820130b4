/**
 * The TypeScript shapes of every record the Loop session store reads or writes: the public
 * version-2 `SessionHeader`, the conversation `Message`s of `messages.jsonl`, and the header's
 * metadata arrays (prompt timings, runtime contexts, compactions, system prompt checkpoints).
 *
 * Optional fields are written `field?: T | undefined`: the validators treat a present
 * `undefined` like an absent field (it disappears when the record is serialized to JSON).
 * Records keep unknown extra fields untouched; the types name only the fields this library
 * reads.
 *
 * @module
 */
import type { GenericSchema } from "valibot";

/**
 * A valibot schema that checks an unknown value and outputs a `T`. Every persisted record has
 * one (`SessionHeaderSchema`, `MessageSchema`, ...); use it with valibot's `parse`,
 * `safeParse` or `is`.
 */
export type RecordSchema<T> = GenericSchema<unknown, T>;

/** A reasoning effort level. `"default"` means "let the model decide" and is never stored by `setModel`. */
export type ModelEffort =
  | "default"
  | "off"
  | "minimal"
  | "low"
  | "medium"
  | "high"
  | "xhigh"
  | "max";

/** The permission preset a session runs with. */
export type PermissionPreset = "read-only" | "workspace-write" | "danger-full-access";

/** The model a session uses. No API key or endpoint is stored. */
export interface ModelRef {
  /** The provider name (may be empty). */
  readonly provider: string;
  /** The model id (may be empty). */
  readonly id: string;
  /** The reasoning effort; absent means `"default"`. */
  readonly effort?: ModelEffort | undefined;
}

/** The model identity that produced a title. */
export interface TitleModel {
  /** The provider name. */
  readonly provider: string;
  /** The model id. */
  readonly id: string;
}

/** Who chose a session title. */
export type TitleSource = "fallback" | "model" | "user";

/** A session title as stored in the header. */
export interface SessionTitle {
  /** Normalized text: no control characters, no edge or doubled whitespace, at most 120 UTF-8 bytes. */
  readonly text: string;
  /** Who chose the title. */
  readonly source: TitleSource;
  /** The messages the title was derived from, strictly increasing. */
  readonly messageIndices: readonly number[];
  /** The model that generated the title, when one did. */
  readonly model?: TitleModel | undefined;
}

/** One eligible user message for title derivation. */
export interface TitleInput {
  /** The message's position in the whole history. */
  readonly index: number;
  /** The raw (not normalized) text the message contributes. */
  readonly text: string;
}

/** A text block. Allowed in every role. */
export interface TextContent {
  /** The block kind. */
  readonly type: "text";
  /** The text. */
  readonly text: string;
}

/** An image block: base64 data and its MIME type. Allowed in user and tool result messages. */
export interface ImageContent {
  /** The block kind. */
  readonly type: "image";
  /** Base64 image bytes (not decoded by validation). */
  readonly data: string;
  /** The image MIME type (not checked by validation). */
  readonly mimeType: string;
}

/** A model's reasoning block. Allowed in assistant messages only. */
export interface ThinkingContent {
  /** The block kind. */
  readonly type: "thinking";
  /** The reasoning text. */
  readonly thinking: string;
}

/** A tool call an assistant made. Allowed in assistant messages only. */
export interface ToolCall {
  /** The block kind. */
  readonly type: "toolCall";
  /** The call id that the matching tool result names in `toolCallId`. */
  readonly id: string;
  /** The model-facing tool name. */
  readonly name: string;
  /** The call arguments: a non-null, non-array object. */
  readonly arguments: Readonly<Record<string, unknown>>;
}

/** A block of a user message. */
export type UserContentBlock = TextContent | ImageContent;
/** A block of an assistant message. */
export type AssistantContentBlock = TextContent | ThinkingContent | ToolCall;
/** A block of a tool result message. */
export type ToolResultContentBlock = TextContent | ImageContent;
/** Any content block. */
export type ContentBlock = TextContent | ImageContent | ThinkingContent | ToolCall;

/**
 * Token usage of an assistant message. Validation requires an object and does not inspect its
 * fields; the usual ones are named here.
 */
export interface Usage {
  /** Input tokens. */
  readonly input?: number | undefined;
  /** Output tokens. */
  readonly output?: number | undefined;
  /** Tokens read from the provider's cache. */
  readonly cacheRead?: number | undefined;
  /** Tokens written to the provider's cache. */
  readonly cacheWrite?: number | undefined;
  /** Total tokens. */
  readonly totalTokens?: number | undefined;
  /** Other provider data, such as cost. */
  readonly [key: string]: unknown;
}

/** Why an assistant message ended. */
export type StopReason =
  | "stop"
  | "toolUse"
  | "length"
  | "error"
  | "aborted"
  | "deferred"
  | "pending";

/** A message the user sent. */
export interface UserMessage {
  /** The role. */
  readonly role: "user";
  /** Plain text, or text and image blocks. */
  readonly content: string | readonly UserContentBlock[];
  /** Unix milliseconds (any finite number). */
  readonly timestamp: number;
}

/** A model response. */
export interface AssistantMessage {
  /** The role. */
  readonly role: "assistant";
  /** Text, thinking and tool call blocks. */
  readonly content: readonly AssistantContentBlock[];
  /** The API the response came through. */
  readonly api: string;
  /** The provider name. */
  readonly provider: string;
  /** The model id. */
  readonly model: string;
  /** Token usage. */
  readonly usage: Usage;
  /** Why the response ended. */
  readonly stopReason: StopReason;
  /**
   * The model or transport error, for `error`/`aborted` responses. Not validated (as Loop's
   * loader does not), so a stored session may carry another value here.
   */
  readonly errorMessage?: string | undefined;
  /** Unix milliseconds (any finite number). */
  readonly timestamp: number;
}

/** The answer to one tool call. */
export interface ToolResultMessage {
  /** The role. */
  readonly role: "toolResult";
  /** The id of the tool call this answers. */
  readonly toolCallId: string;
  /** The model-facing tool name; must equal the call's name. */
  readonly toolName: string;
  /** Text and image blocks. */
  readonly content: readonly ToolResultContentBlock[];
  /** Whether the tool failed. */
  readonly isError: boolean;
  /**
   * Opaque host data, never inspected by validation. Hosts keep presentation data here, such
   * as `details.loopDisplayName` (see `withToolDisplayName`).
   */
  readonly details?: unknown;
  /** Unix milliseconds (any finite number). */
  readonly timestamp: number;
}

/** One line of `messages.jsonl`: a message directly, with no entry wrapper. */
export type Message = UserMessage | AssistantMessage | ToolResultMessage;

/** The role of a message. */
export type MessageRole = Message["role"];

/**
 * The wall time of one prompt. Legacy records carry only `userMessageIndex`, `startedAt` and
 * `finishedAt`; newer records describe one attempt and add `id`, `messageStartIndex` and
 * `messageEndIndex` (all three together) and optionally `stopped`. See `validatePromptTimings`
 * for the exact rules.
 */
export interface PromptTiming {
  /** The index of the user message that started the prompt. */
  readonly userMessageIndex: number;
  /** Unix milliseconds when the attempt started. */
  readonly startedAt: number;
  /** Unix milliseconds when the attempt finished; not before `startedAt`. */
  readonly finishedAt: number;
  /** The attempt id, unique in the session (newer records only). */
  readonly id?: string | undefined;
  /** The first message of the attempt, inclusive (newer records only). */
  readonly messageStartIndex?: number | undefined;
  /** The end of the attempt's messages, exclusive (newer records only). */
  readonly messageEndIndex?: number | undefined;
  /** True when the attempt was stopped before it completed (newer records only). */
  readonly stopped?: boolean | undefined;
}

/** A Skill that was explicitly loaded for a user turn. */
export interface LoadedSkill {
  /** The Skill's identity. */
  readonly id: string;
  /** The Skill's name. */
  readonly name: string;
  /** The source path the Skill was read from. */
  readonly path: string;
  /** The Skill's instruction text. */
  readonly content: string;
  /** The revision of the Skill that was loaded. */
  readonly revision: string;
  /** The Skill's description. */
  readonly description?: string | undefined;
}

/** Host-owned context anchored at a user turn, kept apart from the chat messages. */
export interface RuntimeContextSnapshot {
  /** The zero-based ordinal of the user message (counting only user messages). */
  readonly userTurn: number;
  /** The rendered context; has at least one non-whitespace character. */
  readonly content: string;
  /** Unix milliseconds. */
  readonly timestamp: number;
  /** Explicitly selected Skills. */
  readonly skills?: readonly LoadedSkill[] | undefined;
  /**
   * `"user"`: the snapshot is placed before the user turn's content. Absent: legacy replay, a
   * separate user message after the turn.
   */
  readonly placement?: "user" | undefined;
}

/** Token usage of a compaction summary. */
export interface SummaryUsage {
  /** Input tokens. */
  readonly input: number;
  /** Output tokens. */
  readonly output: number;
  /** Tokens read from the provider's cache. */
  readonly cacheRead: number;
  /** Tokens written to the provider's cache. */
  readonly cacheWrite: number;
  /** Total tokens. */
  readonly totalTokens: number;
  /** Other provider data, such as cost (not checked). */
  readonly [key: string]: unknown;
}

/** A completed compaction: a summary that stands in for the history before a boundary. */
export interface CompactionCheckpoint {
  /** The checkpoint id: 36 characters of `[a-f0-9-]`, unique in the session. */
  readonly id: string;
  /** The first original message kept after the summary; a user message. */
  readonly firstKeptMessageIndex: number;
  /** The number of original messages when the compaction ran. */
  readonly historyMessageCount: number;
  /** The summary text; not all whitespace. */
  readonly summary: string;
  /** Unix milliseconds. */
  readonly timestamp: number;
  /** The provider that wrote the summary. */
  readonly provider: string;
  /** The model that wrote the summary. */
  readonly model: string;
  /** The summary's native token usage. */
  readonly usage: SummaryUsage;
}

/**
 * Rendered system prompt sections. The first checkpoint holds every section; later ones hold
 * only changed sections, with `null` for a removed one.
 */
export interface SystemPromptCheckpoint {
  /** The number of messages the prompt applied from; at least 1, never decreasing. */
  readonly messageCount: number;
  /** Unix milliseconds. */
  readonly timestamp: number;
  /** Section name (`^[a-z][a-z0-9_-]*$`) to text, or `null` for a removed section. */
  readonly sections: Readonly<Record<string, string | null>>;
}

/**
 * The public session header (schema version 2). Unknown extra fields are kept as they are; the
 * obsolete `runTimings` field is dropped on load and never written again.
 */
export interface SessionHeader {
  /** Always `"loop-session"`. */
  readonly format: "loop-session";
  /** Always 2. */
  readonly version: 2;
  /** The session id: 36 characters of `[a-f0-9-]`. */
  readonly id: string;
  /** The absolute canonical working directory. */
  readonly cwd: string;
  /** ISO timestamp of creation. */
  readonly createdAt: string;
  /** ISO timestamp of the last activity. */
  readonly updatedAt: string;
  /** Whether completed output is unread; a missing stored value reads as false. */
  readonly unread: boolean;
  /** Canonical ISO UTC timestamp of the pin; absent means unpinned. */
  readonly pinnedAt?: string | undefined;
  /** The model the session uses. */
  readonly model?: ModelRef | undefined;
  /** The stored title; absent means a fallback is derived on read. */
  readonly title?: SessionTitle | undefined;
  /** The permission preset. */
  readonly permissionPreset: PermissionPreset;
  /** Completed prompt timings. */
  readonly promptTimings?: readonly PromptTiming[] | undefined;
  /** Runtime context snapshots. */
  readonly runtimeContexts?: readonly RuntimeContextSnapshot[] | undefined;
  /** System prompt sections and their changes. */
  readonly systemPromptCheckpoints?: readonly SystemPromptCheckpoint[] | undefined;
  /** Completed compactions. */
  readonly compactions?: readonly CompactionCheckpoint[] | undefined;
}

/** Where a record came from, for error reports. */
export interface RecordLocation {
  /** The file the record was read from, when known. */
  readonly file?: string | undefined;
  /** The JSON path prefix of the record (`"header"`, `"header.promptTimings"`). */
  readonly path?: string | undefined;
}
