// Shared builders and assertions for the loop_records_* tests (not a test file itself).
import assert from "node:assert/strict";
import { SessionFormatError, ToolPairingError } from "../src/loop/errors.ts";
import type { Message, MessageRole } from "../src/loop/records/mod.ts";

/** A valid session id. */
export const SESSION_ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
/** A valid compaction id. */
export const CHECKPOINT_ID = "a1111111-2222-3333-4444-55555555555b";

/** A valid stored header, with `overrides` applied (a value of `undefined` removes the key). */
export function header(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const base: Record<string, unknown> = {
    format: "loop-session",
    version: 2,
    id: SESSION_ID,
    cwd: "/work/project",
    createdAt: "2026-01-01T00:00:00.000Z",
    updatedAt: "2026-01-02T00:00:00.000Z",
    unread: false,
    permissionPreset: "read-only",
  };
  for (const [key, value] of Object.entries(overrides)) {
    if (value === undefined) delete base[key];
    else base[key] = value;
  }
  return base;
}

/** A user message. */
export function user(content: unknown = "hello", timestamp = 1): Record<string, unknown> {
  return { role: "user", content, timestamp };
}

/** A tool call block. */
export function call(id: string, name = "read", args: unknown = {}): Record<string, unknown> {
  return { type: "toolCall", id, name, arguments: args };
}

/** An assistant message. */
export function assistant(
  content: unknown[] = [{ type: "text", text: "ok" }],
  stopReason = "stop",
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    role: "assistant",
    content,
    api: "responses",
    provider: "example",
    model: "model-1",
    usage: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0, totalTokens: 3 },
    stopReason,
    timestamp: 2,
    ...extra,
  };
}

/** A tool result message. */
export function result(
  toolCallId: string,
  toolName = "read",
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    role: "toolResult",
    toolCallId,
    toolName,
    content: [{ type: "text", text: "done" }],
    isError: false,
    timestamp: 3,
    ...extra,
  };
}

/** The roles of `messages`. */
export function rolesOf(messages: readonly unknown[]): MessageRole[] {
  return messages.map((message) => (message as Message).role);
}

/** Asserts that `fn` throws a `SessionFormatError` (or `kind`) whose path is `path`. */
export function throwsAt(
  fn: () => unknown,
  path: string,
  kind: typeof SessionFormatError = SessionFormatError,
): SessionFormatError {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught !== undefined, `expected an error at ${path}, but nothing was thrown`);
  assert.ok(caught instanceof kind, `expected ${kind.name}, got ${String(caught)}`);
  assert.equal((caught as SessionFormatError).path, path, String(caught));
  return caught as SessionFormatError;
}

/** Asserts that `fn` throws a `ToolPairingError` at `messageIndex` whose message matches. */
export function throwsPairing(
  fn: () => unknown,
  messageIndex: number,
  message: RegExp,
): ToolPairingError {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ToolPairingError, `expected ToolPairingError, got ${String(caught)}`);
  assert.equal(caught.messageIndex, messageIndex, caught.message);
  assert.match(caught.message, message);
  return caught;
}
