// A writer that a test kills with SIGKILL: it opens a session (taking over a stale writer lock),
// checks it holds a round's exact history, then commits the next rounds forever, printing
// `committed <round>` after each commit resolves. Runs on Node (through tsx) or Deno:
//
//   node --import tsx tests/_kill_child.ts node <agentDir> <sessionDir> <full|ordered>
//   deno run -A tests/_kill_child.ts deno <agentDir> <sessionDir> <full|ordered>
import { writeSync } from "node:fs";
import process from "node:process";
import { isDeepStrictEqual } from "node:util";
import { SessionStore } from "../src/loop/store.ts";
import type { Durability } from "../src/port/durable.ts";
import { historyAt, nextHistory, roundOfLength } from "./_kill_history.ts";

/** Writes to stdout synchronously: a line written before the kill reaches the parent. */
function say(text: string): void {
  writeSync(1, text);
}

async function main(): Promise<void> {
  const [runtime, agentDir, dir, durability] = process.argv.slice(2);
  const adapter = runtime === "deno"
    ? await import("../adapters/deno.ts").then((m) => ({
      fs: m.denoFs(),
      sha256: m.denoSha256,
      process: m.denoProcessProbe(),
    }))
    : await import("../adapters/node.ts").then((m) => ({
      fs: m.nodeFs(),
      sha256: m.nodeSha256,
      process: m.nodeProcessProbe(),
    }));
  const store = new SessionStore({
    ...adapter,
    agentDir: agentDir as string,
    durability: durability as Durability,
  });
  const session = await store.open(dir as string);
  let messages = session.messages;
  let round = roundOfLength(messages.length);
  if (round === undefined || !isDeepStrictEqual(messages, historyAt(round))) {
    say(`unexpected history of ${messages.length} messages\n`);
    process.exit(3);
  }
  say(`opened ${round}\n`);
  for (;;) {
    round++;
    messages = nextHistory(messages, round);
    await session.commit(messages);
    say(`committed ${round}\n`);
  }
}

main().catch((error) => {
  say(`failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(2);
});
