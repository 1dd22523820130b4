// Shared by the tests of the message nesting limit (`MAX_MESSAGE_NESTING`): values nested past it,
// built as objects or as text, and the check of the error that refuses them. Not a test file.
import assert from "node:assert/strict";
import { SessionFormatError } from "../src/loop/errors.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { MAX_MESSAGE_NESTING } from "../src/loop/records/_validation.ts";
import { toolResult } from "./_fixtures.ts";

/** A chain of `levels` objects, each holding the next under `a`. */
export function nested(levels: number): Record<string, unknown> {
  let value: Record<string, unknown> = {};
  for (let i = 1; i < levels; i++) value = { a: value };
  return value;
}

/** The JSON text of `nested(levels)`, built as text (Node's JSON.stringify stops near 4,000). */
export function nestedText(levels: number): string {
  return '{"a":'.repeat(levels - 1) + "{}" + "}".repeat(levels - 1);
}

/** A tool result answering call `c1` whose `details` (at the message's level 2) nests `levels`. */
export function deepResult(levels: number): Message {
  return { ...toolResult("c1", "ast"), details: nested(levels) } as Message;
}

/** The JSON line of `deepResult(levels)`, built as text. */
export function deepResultLine(levels: number): string {
  return JSON.stringify(toolResult("c1", "ast")).slice(0, -1) + `,"details":${nestedText(levels)}}`;
}

/** The path of the first object of a deep result at message index 2 past the limit. */
export const DEEP_PATH = `messages[2].details${".a".repeat(MAX_MESSAGE_NESTING - 1)}`;

/** Checks the `SessionFormatError` refusing a deep result at message index 2 of `file`. */
export function tooDeep(file: string): (error: unknown) => boolean {
  return (error: unknown): boolean => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, file);
    assert.equal(error.path, DEEP_PATH);
    assert.match(error.message, new RegExp(`nested deeper than ${MAX_MESSAGE_NESTING} levels`));
    return true;
  };
}
