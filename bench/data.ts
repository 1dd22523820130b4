/**
 * Synthetic conversations for the benchmarks: deterministic, valid Loop histories whose message
 * sizes follow a coding agent's shape. A user message is ~200 bytes of JSON, an assistant message
 * ~2 KB; every fourth round uses a tool (an assistant with a tool call, a ~200-byte tool result,
 * then the final assistant answer). The text is pseudo-random words (with the occasional
 * non-ASCII character) so serializing and parsing cost what real prose costs.
 *
 * Synthetic only: no real cwd, prompt or tool output.
 *
 * @module
 */
import type { Message } from "../mod.ts";

/** Target JSON size of a user message, in bytes. */
export const USER_BYTES = 200;
/** Target JSON size of an assistant message, in bytes. */
export const ASSISTANT_BYTES = 2048;
/** Every this many rounds, the round uses a tool. */
export const TOOL_ROUND_EVERY = 4;

const WORDS = [
  "the",
  "session",
  "file",
  "commit",
  "range",
  "index",
  "round",
  "message",
  "assistant",
  "tool",
  "result",
  "generation",
  "bytes",
  "append",
  "publish",
  "meta",
  "checksum",
  "replace",
  "history",
  "page",
  "read",
  "write",
  "directory",
  "workspace",
  "naïve",
  "function",
  "return",
  "const",
  "value",
  "error",
  "test",
];

/** A deterministic linear congruential generator in [0, 1). */
function lcg(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 0x1_0000_0000;
  };
}

/** A long pseudo-random text from which message bodies are sliced. */
function corpus(seed: number, length: number): string {
  const random = lcg(seed);
  const parts: string[] = [];
  let size = 0;
  while (size < length) {
    // A rare character outside Latin-1 (about one assistant message in five holds one): V8 then
    // stores that message's strings with two bytes per character, as it does for real ones.
    const word = random() < 1 / 2000 ? "✓" : WORDS[Math.floor(random() * WORDS.length)] as string;
    parts.push(word);
    size += word.length + 1;
  }
  return parts.join(" ");
}

/**
 * An endless, valid conversation generated message by message. Every prefix that ends outside a
 * tool call (before the assistant with the call or after its result) is a valid history.
 */
export class SyntheticConversation {
  readonly #random: () => number;
  readonly #text: string;
  #clock: number;
  #round = 0;
  /** The messages still to emit in the current round. */
  #queue: Message[] = [];
  #emitted = 0;
  #lastRole: string | undefined;

  /** Starts a conversation; the same seed always yields the same messages. */
  constructor(seed = 1, clock = 1_700_000_000_000) {
    this.#random = lcg(seed * 7919 + 17);
    this.#text = corpus(seed, 256 * 1024);
    this.#clock = clock;
  }

  /** Makes `nextPlain` continue after a message of `role` (a user message is answered first). */
  continueAfter(role: string | undefined): this {
    this.#lastRole = role;
    return this;
  }

  /** How many messages were emitted so far. */
  get emitted(): number {
    return this.#emitted;
  }

  /** True when the next message starts a new user round. */
  get atRoundStart(): boolean {
    return this.#queue.length === 0;
  }

  /** The next message of the conversation. */
  next(): Message {
    if (this.#queue.length === 0) this.#queue = this.#roundMessages();
    return this.#emit(this.#queue.shift() as Message);
  }

  /** The next message of a plain round (user, then assistant), never a tool call. */
  nextPlain(): Message {
    if (this.#queue.length > 0) return this.next();
    return this.#emit(this.#lastRole === "user" ? this.#assistant() : this.#user());
  }

  #emit(message: Message): Message {
    this.#emitted++;
    this.#lastRole = message.role;
    return message;
  }

  /** The next `count` messages, adjusted so that the history ends outside a tool call. */
  take(count: number): Message[] {
    const out: Message[] = [];
    while (out.length < count) {
      // A tool round needs four slots; near the end, use a plain round instead.
      if (this.#queue.length === 0 && count - out.length < 4) {
        this.#queue = count - out.length >= 2 ? [this.#user(), this.#assistant()] : [this.#user()];
        this.#round++;
      }
      out.push(this.next());
    }
    return out;
  }

  #roundMessages(): Message[] {
    const round = this.#round++;
    const user = this.#user();
    if (round % TOOL_ROUND_EVERY !== TOOL_ROUND_EVERY - 1) return [user, this.#assistant()];
    const id = `call_${round.toString(36)}`;
    return [
      user,
      this.#assistant(ASSISTANT_BYTES - 300, id),
      this.#toolResult(id),
      this.#assistant(),
    ];
  }

  #slice(length: number): string {
    const start = Math.floor(this.#random() * (this.#text.length - length - 1));
    return this.#text.slice(start, start + length);
  }

  #user(): Message {
    // ~40 bytes of JSON around the content.
    return {
      role: "user",
      content: this.#slice(USER_BYTES - 45),
      timestamp: this.#clock++,
    } as Message;
  }

  #assistant(bytes = ASSISTANT_BYTES, toolCallId?: string): Message {
    const content: unknown[] = [{ type: "text", text: this.#slice(bytes - 260) }];
    if (toolCallId !== undefined) {
      content.push({
        type: "toolCall",
        id: toolCallId,
        name: "read",
        arguments: { path: `src/${this.#slice(12).replace(/\W/g, "_")}.ts` },
      });
    }
    return {
      role: "assistant",
      content,
      api: "synthetic-api",
      provider: "synthetic",
      model: "model-1",
      usage: { input: 1200, output: 340, cacheRead: 0, cacheWrite: 0, totalTokens: 1540 },
      stopReason: toolCallId === undefined ? "stop" : "toolUse",
      timestamp: this.#clock++,
    } as unknown as Message;
  }

  #toolResult(id: string): Message {
    return {
      role: "toolResult",
      toolCallId: id,
      toolName: "read",
      content: [{ type: "text", text: this.#slice(USER_BYTES - 110) }],
      isError: false,
      timestamp: this.#clock++,
    } as unknown as Message;
  }
}

/** A valid history of exactly `count` messages (seeded). */
export function syntheticHistory(count: number, seed = 1): Message[] {
  return new SyntheticConversation(seed).take(count);
}
