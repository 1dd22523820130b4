/**
 * Runs one operation in a loop over a synthetic session, for profiling, and prints where the
 * time goes: the port calls per operation (count and time) and the time spent outside them.
 *
 * ```sh
 * node --cpu-prof --cpu-prof-dir=/tmp/prof --import tsx bench/profile.ts commit 10000 ordered
 * deno run -A bench/profile.ts setPinned 100000 full
 * ```
 *
 * Operations: `commit` (one message, the complete history passed), `append` (one message, only
 * the new one passed), `setPinned`, `markRead`, `page` (latest page),
 * `open` (full open, read-only).
 *
 * @module
 */
import * as fsp from "node:fs/promises";
import * as os from "node:os";
import { join } from "node:path";
import process from "node:process";
import type { Durability, FileHandle, FileSystem } from "../mod.ts";
import { SessionStore } from "../mod.ts";
import { nodeFs, nodeSha256 } from "../adapters/node.ts";
import { SyntheticConversation, syntheticHistory } from "./data.ts";
import { BenchError } from "./harness.ts";
import { runMain } from "./runtime.ts";

/** Time and count of each port call. */
const calls = new Map<string, { n: number; ms: number }>();
/** Whether port calls are being recorded (markRead's untimed commits are not). */
let recording = false;

function record(name: string, started: number): void {
  if (!recording) return;
  const entry = calls.get(name) ?? { n: 0, ms: 0 };
  entry.n++;
  entry.ms += performance.now() - started;
  calls.set(name, entry);
}

function timed<T extends object>(target: T, prefix: string): T {
  return new Proxy(target, {
    get(object, property) {
      const value = Reflect.get(object, property);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        const started = performance.now();
        const result = await value.apply(object, args);
        record(`${prefix}${String(property)}`, started);
        return property === "open" ? timed(result as FileHandle, "handle.") : result;
      };
    },
  });
}

async function main(): Promise<void> {
  const [operation = "commit", sizeText = "10000", durabilityText = "ordered", countText] = process
    .argv.slice(2);
  const size = Number(sizeText);
  const durability = durabilityText as Durability;
  const iterations = Number(countText ?? (operation === "open" ? 5 : 1000));
  if (!["commit", "append", "setPinned", "markRead", "page", "open"].includes(operation)) {
    throw new BenchError(`Unknown operation '${operation}'`);
  }

  const dir = await fsp.mkdtemp(join(os.tmpdir(), "loop-profile-"));
  try {
    await fsp.mkdir(join(dir, "cwd"));
    const fs: FileSystem = timed(nodeFs(), "");
    const store = new SessionStore({
      fs,
      sha256: nodeSha256,
      agentDir: join(dir, "agent"),
      sessionDir: join(dir, "sessions"),
      durability,
    });
    const session = await store.create(join(dir, "cwd"));
    const messages = syntheticHistory(size);
    await session.commit(messages);
    const conversation = new SyntheticConversation(5).continueAfter(messages.at(-1)?.role);
    const step = async (i: number): Promise<void> => {
      switch (operation) {
        case "commit":
          messages.push(conversation.nextPlain());
          await session.commit(messages);
          return;
        case "append": {
          const message = conversation.nextPlain();
          messages.push(message);
          await session.append([message]);
          return;
        }
        case "setPinned":
          await session.setPinned(i % 2 === 0);
          return;
        case "markRead": {
          const wasRecording = recording;
          recording = false;
          do messages.push(conversation.nextPlain()); while (messages.at(-1)?.role === "user");
          await session.commit(messages);
          recording = wasRecording;
          const started = performance.now();
          await session.markRead(messages.length);
          markReadMs += performance.now() - started;
          return;
        }
        case "page":
          await session.readHistory();
          return;
        case "open": {
          const opened = await store.open(session.getSessionPath(), { readOnly: true });
          await opened.close();
          return;
        }
      }
    };
    let markReadMs = 0;
    for (let i = 0; i < Math.min(50, iterations); i++) await step(i);
    markReadMs = 0;
    recording = true;
    const started = performance.now();
    for (let i = 0; i < iterations; i++) await step(i);
    recording = false;
    const total = operation === "markRead" ? markReadMs : performance.now() - started;
    let inPort = 0;
    const lines: string[] = [];
    for (const [name, entry] of [...calls].sort((a, b) => b[1].ms - a[1].ms)) {
      inPort += entry.ms;
      lines.push(
        `  ${name.padEnd(16)} ${(entry.n / iterations).toFixed(2).padStart(6)} calls ${
          (entry.ms / iterations * 1000).toFixed(1).padStart(9)
        } µs`,
      );
    }
    const perOp = (ms: number) => `${(ms / iterations * 1000).toFixed(1)} µs`;
    process.stdout.write(
      `${operation} @ ${size} messages (${durability}), ${iterations} runs: ${
        perOp(total)
      } per run\n` +
        `port calls per run:\n${lines.join("\n")}\n` +
        `outside the port: ${perOp(total - inPort)} per run\n`,
    );
    await session.close();
  } finally {
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

runMain(main);
