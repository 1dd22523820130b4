// Validation cost of a large history, against the cost of parsing it.
//
//   npx deno@2.9.6 bench bench/records_bench.ts
//
// Every case handles the same 100,000 typical messages (rounds of user prompt, assistant with
// thinking, text and a tool call, tool result, final assistant answer), stored as JSONL lines.
// The "messages" group's baseline parses every line twice; the summary prints how many times
// faster validation alone is (the target: well under the baseline).
import { MessageValidator, validateMessages } from "../src/loop/records/mod.ts";

const MESSAGE_COUNT = 100_000;

function prose(seed: number, length: number): string {
  const words = ["build", "session", "file", "the", "error", "test", "commit", "index", "value"];
  let text = "";
  for (let i = 0; text.length < length; i++) text += `${words[(seed + i * 7) % words.length]} `;
  return text.slice(0, length);
}

function typicalHistory(count: number): unknown[] {
  const messages: unknown[] = [];
  for (let round = 0; messages.length < count; round++) {
    const time = 1_760_000_000_000 + round * 10_000;
    const callId = `call_${round.toString(36)}`;
    messages.push({ role: "user", content: prose(round, 120), timestamp: time });
    messages.push({
      role: "assistant",
      content: [
        { type: "thinking", thinking: prose(round + 1, 300), thinkingSignature: "sig" },
        { type: "text", text: prose(round + 2, 160) },
        {
          type: "toolCall",
          id: callId,
          name: "read",
          arguments: { path: `/work/src/file_${round}.ts`, offset: 0, limit: 200 },
        },
      ],
      api: "openai-responses",
      provider: "openai",
      model: "gpt-5",
      usage: {
        input: 1200,
        output: 300,
        cacheRead: 800,
        cacheWrite: 0,
        totalTokens: 2300,
        cost: { input: 0.001, output: 0.002, cacheRead: 0, cacheWrite: 0, total: 0.003 },
      },
      stopReason: "toolUse",
      timestamp: time + 1,
    });
    messages.push({
      role: "toolResult",
      toolCallId: callId,
      toolName: "read",
      content: [{ type: "text", text: prose(round + 3, 1200) }],
      isError: false,
      details: { loopDisplayName: "files · read", bytes: 1200 },
      timestamp: time + 2,
    });
    messages.push({
      role: "assistant",
      content: [{ type: "text", text: prose(round + 4, 400) }],
      api: "openai-responses",
      provider: "openai",
      model: "gpt-5",
      usage: { input: 1500, output: 120, cacheRead: 1200, cacheWrite: 0, totalTokens: 2820 },
      stopReason: "stop",
      timestamp: time + 3,
    });
  }
  return messages.slice(0, count);
}

const history = typicalHistory(MESSAGE_COUNT);
const lines = history.map((message) => JSON.stringify(message));
validateMessages(history);

let sink = 0;

Deno.bench({
  name: "JSON.parse every line twice",
  group: "messages",
  baseline: true,
  fn() {
    for (let pass = 0; pass < 2; pass++) {
      for (const line of lines) sink += (JSON.parse(line) as { timestamp: number }).timestamp;
    }
  },
});

Deno.bench({
  name: "JSON.parse every line once",
  group: "messages",
  fn() {
    for (const line of lines) sink += (JSON.parse(line) as { timestamp: number }).timestamp;
  },
});

Deno.bench({
  name: "MessageValidator.push on parsed messages",
  group: "messages",
  fn() {
    const validator = new MessageValidator();
    for (let i = 0; i < history.length; i++) validator.push(history[i], i);
    validator.finish();
    sink += validator.nextIndex;
  },
});

Deno.bench({
  name: "JSON.parse and MessageValidator.push",
  group: "messages",
  fn() {
    const validator = new MessageValidator();
    for (let i = 0; i < lines.length; i++) validator.push(JSON.parse(lines[i] as string), i);
    validator.finish();
    sink += validator.nextIndex;
  },
});

globalThis.addEventListener("unload", () => {
  if (sink === 0) console.log("unreachable: keeps the results observable");
});
