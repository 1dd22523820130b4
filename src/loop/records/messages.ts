/**
 * Conversation messages (`user`, `assistant`, `toolResult`), their content blocks and the
 * tool call pairing rule, validated incrementally so that huge histories stream through.
 *
 * Shape rules (each failure is a `SessionFormatError` naming the JSON path, such as
 * `messages[12].content[0].arguments`):
 * - a message is an object with a finite numeric `timestamp` (negative and fractional values
 *   are accepted; order is not checked) and a `role` of `user`, `assistant` or `toolResult`;
 * - a `user` message has string `content`, or an array of `text` and `image` blocks;
 * - an `assistant` message has an array of `text`, `thinking` and `toolCall` blocks, string
 *   `api`, `provider` and `model`, an object `usage` (an array too; its fields are not
 *   inspected) and a known `stopReason`; its `errorMessage` is kept as stored, unchecked;
 * - a `toolResult` has an array of `text` and `image` blocks, string `toolCallId` and
 *   `toolName`, and a boolean `isError`; `details` is opaque host data and never inspected;
 * - blocks: `text` has string `text`; `image` has string `data` and `mimeType` (neither the
 *   base64 nor the MIME value is checked); `thinking` has string `thinking`; `toolCall` has
 *   string `id` and `name` and `arguments` that is a non-null, non-array object.
 *
 * Pairing rules (each failure is a `ToolPairingError` with the message index):
 * - an assistant whose `stopReason` is not `error` or `aborted` registers each of its tool
 *   calls as pending, whatever its stop reason; a call id that is already pending (in this or
 *   an earlier message) is a duplicate;
 * - calls of `error`/`aborted` assistants are excluded from pairing (replay drops those
 *   assistants), so a result for one is unmatched;
 * - a tool result must name a pending call id with the same tool name; results of one
 *   assistant may come in any order;
 * - a user or assistant message while calls are pending, or calls still pending at the end of
 *   the history, is an unfinished-calls error: automatic replay is not supported.
 *
 * Unknown extra fields on messages and blocks pass through untouched.
 *
 * Values in memory (what a save is given) must be what JSON writes: the message, its blocks,
 * `usage` and `arguments` must be plain objects (prototype `Object.prototype` or `null`, no
 * `toJSON` method; so no boxed primitive, class instance, `Date` or `JSON.rawJSON` value), and
 * every field the rules above read must be an own enumerable property. Parsed JSON always is.
 * What the rules do not read (`usage`'s fields, tool call `arguments`, `details`, unknown fields)
 * is stored as `JSON.stringify` writes it: a `NaN` or infinite number is written as `null`, `-0`
 * as `0`, and an `undefined` field is left out, so the session reads back that way when opened
 * again (the manager that saved it keeps the values it was given).
 *
 * @module
 */
import * as v from "valibot";
import { InvalidArgumentError, preview, SessionFormatError, ToolPairingError } from "../errors.ts";
import type {
  AssistantMessage,
  ImageContent,
  Message,
  RecordSchema,
  StopReason,
  TextContent,
  ThinkingContent,
  ToolCall,
  ToolResultMessage,
  Usage,
  UserMessage,
} from "./types.ts";
import { isJsonArray, isRecord, notPlainReason } from "./_validation.ts";

/** Every assistant stop reason. */
export const STOP_REASONS: readonly StopReason[] = Object.freeze([
  "stop",
  "toolUse",
  "length",
  "error",
  "aborted",
  "deferred",
  "pending",
]);

const STOP_REASON_SET: ReadonlySet<unknown> = new Set<unknown>(STOP_REASONS);

/** The message of unfinished-calls errors. */
const UNFINISHED = "Unfinished tool calls; automatic replay is not supported";
/** The message prefix of shape errors. */
const INVALID = "Invalid session message";

const finiteTimestamp = v.pipe(v.number(), v.finite());
const textBlock = v.looseObject({ type: v.literal("text"), text: v.string() });
const imageBlock = v.looseObject({
  type: v.literal("image"),
  data: v.string(),
  mimeType: v.string(),
});
const thinkingBlock = v.looseObject({ type: v.literal("thinking"), thinking: v.string() });
const toolCallBlock = v.looseObject({
  type: v.literal("toolCall"),
  id: v.string(),
  name: v.string(),
  arguments: v.custom<Readonly<Record<string, unknown>>>(
    isRecord,
    "arguments must be a plain object (not null, not an array)",
  ),
});
const mediaBlocks = v.array(v.variant("type", [textBlock, imageBlock]));
const userMessage = v.looseObject({
  role: v.literal("user"),
  content: v.union([v.string(), mediaBlocks]),
  timestamp: finiteTimestamp,
});
const assistantMessage = v.looseObject({
  role: v.literal("assistant"),
  content: v.array(v.variant("type", [textBlock, thinkingBlock, toolCallBlock])),
  api: v.string(),
  provider: v.string(),
  model: v.string(),
  usage: v.custom<Usage>(isUsage, "usage must be a plain object or an array"),
  stopReason: v.picklist(STOP_REASONS),
  // Not checked, as Loop's loader does not: kept as it was stored.
  errorMessage: v.optional(v.custom<string>(() => true)),
  timestamp: finiteTimestamp,
});
const toolResultMessage = v.looseObject({
  role: v.literal("toolResult"),
  toolCallId: v.string(),
  toolName: v.string(),
  content: mediaBlocks,
  isError: v.boolean(),
  details: v.optional(v.unknown()),
  timestamp: finiteTimestamp,
});

/** The schema of a `text` block. */
export const TextContentSchema: RecordSchema<TextContent> = textBlock;
/** The schema of an `image` block (base64 `data` and `mimeType`, neither checked further). */
export const ImageContentSchema: RecordSchema<ImageContent> = imageBlock;
/** The schema of a `thinking` block. */
export const ThinkingContentSchema: RecordSchema<ThinkingContent> = thinkingBlock;
/** The schema of a `toolCall` block; `arguments` is a non-null, non-array object. */
export const ToolCallSchema: RecordSchema<ToolCall> = toolCallBlock;
/** The schema of a `user` message. */
export const UserMessageSchema: RecordSchema<UserMessage> = userMessage;
/** The schema of an `assistant` message. */
export const AssistantMessageSchema: RecordSchema<AssistantMessage> = assistantMessage;
/** The schema of a `toolResult` message; `details` is opaque. */
export const ToolResultMessageSchema: RecordSchema<ToolResultMessage> = toolResultMessage;

/**
 * The schema of one message (shape only; pairing is a cross-message rule, see
 * `MessageValidator`). `MessageValidator.push` implements the same shape rules by hand for
 * speed; tests check that both agree on JSON values (what a session file holds). On values in
 * memory `push` also refuses an object or array that JSON would write as something else (one
 * with a `toJSON` method, a boxed primitive, a class instance) and a field it reads that JSON
 * would not write (not own enumerable), so what a save validates is what it writes.
 */
export const MessageSchema: RecordSchema<Message> = v.variant("role", [
  userMessage,
  assistantMessage,
  toolResultMessage,
]);

/** A tool call waiting for its result. */
interface PendingCall {
  readonly name: string;
  readonly messageIndex: number;
  readonly blockIndex: number;
}

/** Options of `MessageValidator`. */
export interface MessageValidatorOptions {
  /** The file the messages come from, for error reports. */
  readonly file?: string | undefined;
  /** The global index of the first message that will be pushed; default 0. */
  readonly firstIndex?: number | undefined;
}

/**
 * An assistant's `usage`: any object (Loop's loader asks only `typeof usage === "object"` of a
 * truthy value, so an array passes); its fields are not checked. Nor one that JSON writes as
 * something else (a boxed primitive, a `toJSON` method), as for every object.
 */
function isUsage(value: unknown): value is Usage {
  return isRecord(value) || isJsonArray(value);
}

/**
 * The fields the validator reads of each kind of message and block, all required. Each must be a
 * key JSON writes (an own enumerable property), or a save would write a line without it.
 */
const USER_FIELDS: readonly string[] = ["role", "content", "timestamp"];
const ASSISTANT_FIELDS: readonly string[] = [
  "role",
  "content",
  "api",
  "provider",
  "model",
  "usage",
  "stopReason",
  "timestamp",
];
const TOOL_RESULT_FIELDS: readonly string[] = [
  "role",
  "content",
  "toolCallId",
  "toolName",
  "isError",
  "timestamp",
];
const TEXT_FIELDS: readonly string[] = ["type", "text"];
const IMAGE_FIELDS: readonly string[] = ["type", "data", "mimeType"];
const THINKING_FIELDS: readonly string[] = ["type", "thinking"];
const TOOL_CALL_FIELDS: readonly string[] = ["type", "id", "name", "arguments"];

// Each counts, in one `for...in` (the enumerable keys, which JSON writes of a plain object), how
// many of a kind's fields are among them: all are when the count is the number of fields. One
// function per kind with the names in a `switch` (compared by identity, as interned strings) is
// several times cheaper than asking `propertyIsEnumerable` of each field or a `Set` of each key.

function userFieldsWritten(record: object): boolean {
  let count = 0;
  for (const key in record) if (key === "role" || key === "content" || key === "timestamp") count++;
  return count === 3;
}

function assistantFieldsWritten(record: object): boolean {
  let count = 0;
  for (const key in record) {
    switch (key) {
      case "role":
      case "content":
      case "api":
      case "provider":
      case "model":
      case "usage":
      case "stopReason":
      case "timestamp":
        count++;
    }
  }
  return count === 8;
}

function toolResultFieldsWritten(record: object): boolean {
  let count = 0;
  for (const key in record) {
    switch (key) {
      case "role":
      case "content":
      case "toolCallId":
      case "toolName":
      case "isError":
      case "timestamp":
        count++;
    }
  }
  return count === 6;
}

function textFieldsWritten(record: object): boolean {
  let count = 0;
  for (const key in record) if (key === "type" || key === "text") count++;
  return count === 2;
}

function imageFieldsWritten(record: object): boolean {
  let count = 0;
  for (const key in record) if (key === "type" || key === "data" || key === "mimeType") count++;
  return count === 3;
}

function thinkingFieldsWritten(record: object): boolean {
  let count = 0;
  for (const key in record) if (key === "type" || key === "thinking") count++;
  return count === 2;
}

function toolCallFieldsWritten(record: object): boolean {
  let count = 0;
  for (const key in record) {
    if (key === "type" || key === "id" || key === "name" || key === "arguments") count++;
  }
  return count === 4;
}

const propertyIsEnumerable = Object.prototype.propertyIsEnumerable;

/** The first of `fields` that `record` holds but JSON does not write (not own enumerable). */
function unwrittenField(record: object, fields: readonly string[]): string | undefined {
  for (const field of fields) {
    if (field in record && !propertyIsEnumerable.call(record, field)) return field;
  }
  return undefined;
}

function blockPath(index: number, block: number, field?: string): string {
  return field === undefined
    ? `messages[${index}].content[${block}]`
    : `messages[${index}].content[${block}].${field}`;
}

/**
 * Streaming validation of a history: push each message in order, then call `finish()` at the
 * end of the history. The validator's state is the set of pending tool calls; `clone()`
 * snapshots it, so a store can keep a validator that covers the committed history and push
 * only new messages on each commit.
 *
 * A `push` that throws leaves the validator unchanged.
 *
 * @example
 * ```ts
 * import { MessageValidator } from "./messages.ts";
 * const validator = new MessageValidator({ file: "messages.jsonl" });
 * validator.push({ role: "user", content: "hi", timestamp: 1 }, 0);
 * validator.finish();
 * ```
 */
export class MessageValidator {
  readonly #file: string | undefined;
  #next: number;
  #pending: Map<string, PendingCall>;

  /** Creates a validator for a history that starts at `options.firstIndex` (default 0). */
  constructor(options: MessageValidatorOptions = {}) {
    const first = options.firstIndex ?? 0;
    if (!Number.isSafeInteger(first) || first < 0) {
      throw new InvalidArgumentError(
        "firstIndex",
        `Invalid first message index ${String(first)}: expected a safe integer of 0 or more`,
      );
    }
    this.#file = options.file;
    this.#next = first;
    this.#pending = new Map();
  }

  /** The index the next pushed message must have. */
  get nextIndex(): number {
    return this.#next;
  }

  /** The ids of tool calls still waiting for a result, in call order. */
  get pendingToolCallIds(): readonly string[] {
    return [...this.#pending.keys()];
  }

  /** An independent copy of this validator's state. */
  clone(): MessageValidator {
    const copy = new MessageValidator({ file: this.#file, firstIndex: this.#next });
    copy.#pending = new Map(this.#pending);
    return copy;
  }

  /**
   * Validates the message at `index` (its shape, then pairing against the earlier messages).
   *
   * @param message The parsed message.
   * @param index Its global index; must equal `nextIndex`.
   * @throws {SessionFormatError} When the shape is invalid, naming the field.
   * @throws {ToolPairingError} When tool calls and results do not pair up.
   * @throws {InvalidArgumentError} When `index` is not `nextIndex`.
   */
  push(message: unknown, index: number): void {
    if (index !== this.#next) {
      throw new InvalidArgumentError(
        "index",
        `Message index ${
          String(index)
        } does not follow the validated history; expected ${this.#next}`,
      );
    }
    if (!isRecord(message)) {
      this.#fail(
        `message must be a plain object${notPlainReason(message)}`,
        `messages[${index}]`,
        message,
      );
    }
    const timestamp = message.timestamp;
    if (typeof timestamp !== "number" || !Number.isFinite(timestamp)) {
      this.#fail("timestamp must be a finite number", `messages[${index}].timestamp`, timestamp);
    }
    switch (message.role) {
      case "user":
        this.#user(message, index);
        break;
      case "assistant":
        this.#assistant(message, index);
        break;
      case "toolResult":
        this.#toolResult(message, index);
        break;
      default:
        this.#fail(
          'unsupported role: expected "user", "assistant" or "toolResult"',
          `messages[${index}].role`,
          message.role,
        );
    }
    this.#next = index + 1;
  }

  /**
   * Refuses a field the validator read of `record` (at `path`) that JSON does not write: one that
   * is not an own enumerable property (a field defined non-enumerable, say). Called only when
   * the record's count of written fields (`written`) came short; a missing field is left to the
   * shape checks, which ran first.
   */
  #unwritten(record: object, fields: readonly string[], path: string): void {
    const field = unwrittenField(record, fields);
    if (field === undefined) return;
    this.#fail(
      `${field} must be an own enumerable field: JSON would not write it`,
      `${path}.${field}`,
      (record as Record<string, unknown>)[field],
    );
  }

  /**
   * Checks the end-of-history rule: no tool call may still be waiting for its result. Does not
   * change the validator; more messages may be pushed afterwards.
   *
   * @throws {ToolPairingError} Naming the assistant message whose calls are unfinished.
   */
  finish(): void {
    const first = this.#pending.entries().next();
    if (first.done) return;
    const [id, call] = first.value;
    throw new ToolPairingError(
      `${UNFINISHED}: ${this.#pending.size} tool call(s) have no result at the end of the history, first ${
        preview(id)
      } called in messages[${call.messageIndex}]`,
      call.messageIndex,
      { ...this.#where(), path: blockPath(call.messageIndex, call.blockIndex, "id"), value: id },
    );
  }

  #where(): { file?: string } {
    return this.#file === undefined ? {} : { file: this.#file };
  }

  #fail(detail: string, path: string, value: unknown): never {
    throw new SessionFormatError(`${INVALID}: ${detail}`, { ...this.#where(), path, value });
  }

  #content(message: Record<string, unknown>, index: number): unknown[] {
    const content = message.content;
    if (!isJsonArray(content)) {
      this.#fail("content must be an array of blocks", `messages[${index}].content`, content);
    }
    return content;
  }

  /** Text and image blocks (user and tool result messages). */
  #mediaBlocks(content: unknown[], index: number, role: string): void {
    for (let j = 0; j < content.length; j++) {
      const block = content[j];
      if (!isRecord(block)) {
        this.#fail(
          `block must be a plain object${notPlainReason(block)}`,
          blockPath(index, j),
          block,
        );
      }
      switch (block.type) {
        case "text":
          if (typeof block.text !== "string") {
            this.#fail("text must be a string", blockPath(index, j, "text"), block.text);
          }
          if (!textFieldsWritten(block)) this.#unwritten(block, TEXT_FIELDS, blockPath(index, j));
          break;
        case "image":
          if (typeof block.data !== "string") {
            this.#fail(
              "image data must be a base64 string",
              blockPath(index, j, "data"),
              block.data,
            );
          }
          if (typeof block.mimeType !== "string") {
            this.#fail(
              "image mimeType must be a string",
              blockPath(index, j, "mimeType"),
              block.mimeType,
            );
          }
          if (!imageFieldsWritten(block)) this.#unwritten(block, IMAGE_FIELDS, blockPath(index, j));
          break;
        default:
          this.#fail(
            `unsupported block type in a ${role} message: expected "text" or "image"`,
            blockPath(index, j, "type"),
            block.type,
          );
      }
    }
  }

  #unfinishedBefore(index: number): never {
    const [id, call] = this.#pending.entries().next().value as [string, PendingCall];
    throw new ToolPairingError(
      `${UNFINISHED}: messages[${index}] starts a new turn while ${this.#pending.size} tool call(s) have no result, first ${
        preview(id)
      } called in messages[${call.messageIndex}]`,
      index,
      { ...this.#where(), path: `messages[${index}]`, value: id },
    );
  }

  #user(message: Record<string, unknown>, index: number): void {
    const content = message.content;
    if (typeof content !== "string") {
      if (!isJsonArray(content)) {
        this.#fail(
          "content must be a string or an array of blocks",
          `messages[${index}].content`,
          content,
        );
      }
      this.#mediaBlocks(content, index, "user");
    }
    if (!userFieldsWritten(message)) this.#unwritten(message, USER_FIELDS, `messages[${index}]`);
    if (this.#pending.size > 0) this.#unfinishedBefore(index);
  }

  #assistant(message: Record<string, unknown>, index: number): void {
    const content = this.#content(message, index);
    let calls = 0;
    for (let j = 0; j < content.length; j++) {
      const block = content[j];
      if (!isRecord(block)) {
        this.#fail(
          `block must be a plain object${notPlainReason(block)}`,
          blockPath(index, j),
          block,
        );
      }
      switch (block.type) {
        case "text":
          if (typeof block.text !== "string") {
            this.#fail("text must be a string", blockPath(index, j, "text"), block.text);
          }
          if (!textFieldsWritten(block)) this.#unwritten(block, TEXT_FIELDS, blockPath(index, j));
          break;
        case "thinking":
          if (typeof block.thinking !== "string") {
            this.#fail(
              "thinking must be a string",
              blockPath(index, j, "thinking"),
              block.thinking,
            );
          }
          if (!thinkingFieldsWritten(block)) {
            this.#unwritten(block, THINKING_FIELDS, blockPath(index, j));
          }
          break;
        case "toolCall":
          if (typeof block.id !== "string") {
            this.#fail("tool call id must be a string", blockPath(index, j, "id"), block.id);
          }
          if (typeof block.name !== "string") {
            this.#fail("tool call name must be a string", blockPath(index, j, "name"), block.name);
          }
          if (!isRecord(block.arguments)) {
            this.#fail(
              "tool call arguments must be a plain object (not null, not an array)" +
                notPlainReason(block.arguments),
              blockPath(index, j, "arguments"),
              block.arguments,
            );
          }
          if (!toolCallFieldsWritten(block)) {
            this.#unwritten(block, TOOL_CALL_FIELDS, blockPath(index, j));
          }
          calls++;
          break;
        default:
          this.#fail(
            'unsupported block type in an assistant message: expected "text", "thinking" or "toolCall"',
            blockPath(index, j, "type"),
            block.type,
          );
      }
    }
    const stopReason = message.stopReason;
    if (!STOP_REASON_SET.has(stopReason)) {
      this.#fail(
        `unknown stop reason: expected one of ${STOP_REASONS.join(", ")}`,
        `messages[${index}].stopReason`,
        stopReason,
      );
    }
    if (typeof message.model !== "string") {
      this.#fail("model must be a string", `messages[${index}].model`, message.model);
    }
    if (typeof message.provider !== "string") {
      this.#fail("provider must be a string", `messages[${index}].provider`, message.provider);
    }
    if (typeof message.api !== "string") {
      this.#fail("api must be a string", `messages[${index}].api`, message.api);
    }
    if (!isUsage(message.usage)) {
      this.#fail(
        `usage must be a plain object or an array${notPlainReason(message.usage)}`,
        `messages[${index}].usage`,
        message.usage,
      );
    }
    // `errorMessage` is not checked, as Loop's loader does not: it is kept as it was stored.
    if (!assistantFieldsWritten(message)) {
      this.#unwritten(message, ASSISTANT_FIELDS, `messages[${index}]`);
    }

    if (this.#pending.size > 0) this.#unfinishedBefore(index);
    // Calls of error/aborted assistants are excluded: replay drops those assistants.
    if (calls === 0 || stopReason === "error" || stopReason === "aborted") return;
    const added = new Map<string, PendingCall>();
    for (let j = 0; j < content.length; j++) {
      const block = content[j] as Record<string, unknown>;
      if (block.type !== "toolCall") continue;
      const id = block.id as string;
      const earlier = added.get(id) ?? this.#pending.get(id);
      if (earlier !== undefined) {
        throw new ToolPairingError(
          `Duplicate tool call ID: ${
            preview(id)
          } is already pending from messages[${earlier.messageIndex}].content[${earlier.blockIndex}]`,
          index,
          { ...this.#where(), path: blockPath(index, j, "id"), value: id },
        );
      }
      added.set(id, { name: block.name as string, messageIndex: index, blockIndex: j });
    }
    for (const [id, call] of added) this.#pending.set(id, call);
  }

  #toolResult(message: Record<string, unknown>, index: number): void {
    const content = this.#content(message, index);
    this.#mediaBlocks(content, index, "toolResult");
    const toolCallId = message.toolCallId;
    if (typeof toolCallId !== "string") {
      this.#fail("toolCallId must be a string", `messages[${index}].toolCallId`, toolCallId);
    }
    const toolName = message.toolName;
    if (typeof toolName !== "string") {
      this.#fail("toolName must be a string", `messages[${index}].toolName`, toolName);
    }
    if (typeof message.isError !== "boolean") {
      this.#fail("isError must be a boolean", `messages[${index}].isError`, message.isError);
    }
    if (!toolResultFieldsWritten(message)) {
      this.#unwritten(message, TOOL_RESULT_FIELDS, `messages[${index}]`);
    }
    const call = this.#pending.get(toolCallId);
    if (call === undefined) {
      throw new ToolPairingError(
        `Unmatched tool result: no pending tool call has id ${
          preview(toolCallId)
        } (calls of error or aborted assistants, and calls already answered, are not pending)`,
        index,
        { ...this.#where(), path: `messages[${index}].toolCallId`, value: toolCallId },
      );
    }
    if (call.name !== toolName) {
      throw new ToolPairingError(
        `Unmatched tool result: tool call ${
          preview(toolCallId)
        } at messages[${call.messageIndex}] called ${preview(call.name)}`,
        index,
        { ...this.#where(), path: `messages[${index}].toolName`, value: toolName },
      );
    }
    this.#pending.delete(toolCallId);
  }
}

/** Options of `validateMessages`. */
export interface ValidateMessagesOptions {
  /** The file the messages come from, for error reports. */
  readonly file?: string | undefined;
}

/**
 * Validates a complete history: every message's shape and the tool call pairing, including
 * the end-of-history rule.
 *
 * @param messages The parsed history.
 * @param options Where the messages came from, for error reports.
 * @throws {SessionFormatError} When `messages` is not an array or a message is invalid.
 * @throws {ToolPairingError} When tool calls and results do not pair up.
 */
export function validateMessages(
  messages: unknown,
  options: ValidateMessagesOptions = {},
): asserts messages is Message[] {
  if (!Array.isArray(messages)) {
    throw new SessionFormatError("Invalid session messages: expected an array", {
      ...(options.file === undefined ? {} : { file: options.file }),
      path: "messages",
      value: messages,
    });
  }
  const validator = new MessageValidator({ file: options.file });
  for (let i = 0; i < messages.length; i++) validator.push(messages[i], i);
  validator.finish();
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * Records a tool's display name (for MCP tools, `"<server> · <tool>"`) on a tool result as
 * opaque presentation data in `details.loopDisplayName`, so history can still label the call
 * after the server is disabled or removed. Pairing and the model-facing `toolName` are not
 * affected.
 *
 * - Other roles, and an unknown display name (`undefined`), return the message unchanged.
 * - A tool result whose plain-object `details` already has a string `loopDisplayName` is
 *   returned unchanged: the historical label wins.
 * - Otherwise a copy is returned with `details` = the existing plain-object details plus
 *   `loopDisplayName`; array or primitive details are dropped.
 *
 * @param message The message to label.
 * @param displayName The display name known for `message.toolName`, if any.
 * @returns `message` itself or a labelled copy.
 */
export function withToolDisplayName<T extends Message>(
  message: T,
  displayName: string | undefined,
): T {
  if (message.role !== "toolResult" || displayName === undefined) return message;
  const details = (message as ToolResultMessage).details;
  if (isPlainObject(details)) {
    if (typeof details.loopDisplayName === "string") return message;
    return { ...message, details: { ...details, loopDisplayName: displayName } };
  }
  return { ...message, details: { loopDisplayName: displayName } };
}
