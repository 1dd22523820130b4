/**
 * Real processes killed mid-write (RELIABILITY.md, "Real processes too"): a child writer commits
 * rounds in a loop on a real filesystem and is killed with SIGKILL at a random moment; the parent
 * then opens the session (full validation and checksum) and must find exactly the history of the
 * last round the child saw resolve, or of the one in flight. The next child takes the stale
 * writer lock over and continues from there, so every round also recovers from the previous kill
 * (an uncommitted tail, a leftover temp file). Used by a Node-adapter test and a Deno-adapter
 * test.
 *
 * @module
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ProcessProbe } from "../src/loop/lock.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { Durability } from "../src/port/durable.ts";
import type { FileSystem } from "../src/port/fs.ts";
import type { Sha256Factory } from "../src/port/sha256.ts";
import { historyAt, roundOfLength } from "./_kill_history.ts";

/** The child script, as a file path. */
export const KILL_CHILD: string = new URL("./_kill_child.ts", import.meta.url).pathname;

/** How to run the child and how the parent reaches the same storage. */
export interface KillLoopOptions {
  /** The command that runs `KILL_CHILD` with `args` on the child's runtime. */
  readonly command: (args: readonly string[]) => { cmd: string; args: string[] };
  /** The adapter name the child uses (`node` or `deno`). */
  readonly adapter: "node" | "deno";
  /** The parent's adapter, probe and hashing. */
  readonly fs: FileSystem;
  readonly sha256: Sha256Factory;
  readonly process: ProcessProbe;
  /** Kills per durability mode. */
  readonly kills: number;
}

/** A small seeded generator, so a failing run can be told apart (the seed is in every message). */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

interface ChildRun {
  /** The last round the child printed as committed (resolved). */
  readonly resolved: number;
  /** The round the child opened with. */
  readonly opened: number;
}

/** Runs one child until it has resolved a commit, waits `delayMs` more, and kills it. */
async function runAndKill(
  options: KillLoopOptions,
  args: string[],
  delayMs: number,
): Promise<ChildRun> {
  const { cmd, args: argv } = options.command([KILL_CHILD, options.adapter, ...args]);
  const child = spawn(cmd, argv, {
    cwd: new URL("../", import.meta.url).pathname, // where `tsx` resolves
    stdio: ["ignore", "pipe", "inherit"],
  });
  let text = "";
  // "close": the child has exited and its stdout is drained, so no resolved round is missed.
  const exited = new Promise<number | null>((resolve) =>
    child.on("close", (code) => resolve(code))
  );
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the child never committed: ${text}`)), 60_000);
    child.stdout.on("data", (chunk: Uint8Array) => {
      text += new TextDecoder().decode(chunk);
      if (/committed \d+/.test(text)) {
        clearTimeout(timer);
        resolve();
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the child exited with ${code} before committing: ${text}`));
    });
  });
  await new Promise((resolve) => setTimeout(resolve, delayMs));
  child.kill("SIGKILL");
  await exited;
  const opened = Number(/opened (\d+)/.exec(text)?.[1]);
  const rounds = [...text.matchAll(/committed (\d+)/g)].map((m) => Number(m[1]));
  assert.ok(!Number.isNaN(opened), `no "opened" line: ${text}`);
  return { opened, resolved: Math.max(...rounds) };
}

/**
 * Kills `options.kills` writers per durability mode and checks each reopened state. Returns how
 * many rounds were committed in all (so a caller can tell the loop really ran).
 */
export async function killLoop(options: KillLoopOptions): Promise<number> {
  const seed = (Date.now() ^ (Math.random() * 2 ** 31)) >>> 0;
  const next = random(seed);
  const base = await mkdtemp(join(tmpdir(), "loop-kill-"));
  let total = 0;
  try {
    for (const durability of ["full", "ordered"] as Durability[]) {
      const agentDir = join(base, `agent-${durability}`);
      const cwd = join(base, `work-${durability}`);
      await options.fs.mkdir(cwd, { recursive: true });
      const store = new SessionStore({
        fs: options.fs,
        sha256: options.sha256,
        process: options.process,
        agentDir,
        durability,
      });
      const created = await store.create(cwd);
      await created.commit(historyAt(0));
      await created.close();
      const dir = created.getSessionPath();
      let round = 0;
      for (let kill = 0; kill < options.kills; kill++) {
        const delay = Math.floor(next() * 150);
        const where = `seed ${seed}, ${durability}, kill ${kill} after ${delay} ms`;
        const run = await runAndKill(options, [agentDir, dir, durability], delay);
        assert.equal(run.opened, round, `${where}: the child opened another round`);
        // A full open: checksum, every message, metadata; takes the dead writer's lock over.
        const session = await store.open(dir);
        try {
          const found = roundOfLength(session.messages.length);
          assert.ok(
            found === run.resolved || found === run.resolved + 1,
            `${where}: found round ${found}, the child resolved ${run.resolved}`,
          );
          assert.deepEqual(session.messages, historyAt(found as number), `${where}: history`);
          round = found as number;
        } finally {
          await session.close();
        }
        total += run.resolved - run.opened;
      }
      // Nothing but the session's files (and a temp file or two of a killed commit) is left.
      const left = (await readdir(dir)).filter((name) =>
        !["meta.json", "messages.jsonl", "index.json"].includes(name) && !name.endsWith(".tmp")
      );
      assert.deepEqual(left, [], `seed ${seed}, ${durability}: unexpected files`);
    }
  } finally {
    await rm(base, { recursive: true, force: true });
  }
  return total;
}
