/**
 * The histories a killed writer commits, one per round, so a test can tell exactly which
 * committed state it finds after the kill. Round `r` holds a first user message and `r` question
 * and answer pairs. Most rounds append a pair to the previous round's history; every fifth round
 * also edits the first message, so storage appends a replacement generation.
 *
 * @module
 */
import type { Message } from "../src/loop/records/mod.ts";

/** Every how many rounds the first message is edited (a replacement generation). */
export const EDIT_EVERY = 5;

function firstMessage(round: number): Message {
  const edited = Math.floor(round / EDIT_EVERY) * EDIT_EVERY;
  return {
    role: "user",
    content: edited === 0 ? "start" : `start, edited in round ${edited}`,
    timestamp: edited,
  } as Message;
}

function pair(i: number): Message[] {
  return [
    { role: "user", content: `question ${i}`, timestamp: 1000 + i },
    {
      role: "assistant",
      content: [{ type: "text", text: `answer ${i} `.repeat(1 + (i % 7) * 40) }],
      api: "synthetic-api",
      provider: "synthetic",
      model: "model-1",
      usage: {},
      stopReason: "stop",
      timestamp: 1000 + i,
    },
  ] as Message[];
}

/** The complete history of round `round`, as new objects. */
export function historyAt(round: number): Message[] {
  const out = [firstMessage(round)];
  for (let i = 0; i < round; i++) out.push(...pair(i));
  return out;
}

/** The round whose history has `length` messages (undefined for a torn length). */
export function roundOfLength(length: number): number | undefined {
  return length % 2 === 1 ? (length - 1) / 2 : undefined;
}

/**
 * The history of round `round`, given the history of the round before it: the same array with a
 * pair appended, or a fresh array when the round edits the first message.
 */
export function nextHistory(previous: Message[], round: number): Message[] {
  if (round % EDIT_EVERY === 0) return historyAt(round);
  previous.push(...pair(round - 1));
  return previous;
}
