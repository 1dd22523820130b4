/**
 * A child process for the memory figures: opens one session (full validation, read-only) with
 * the adapter named (`deno` or `node`) and its native hashing, then prints its peak resident
 * memory (`VmHWM`) as JSON. With `--baseline` it loads the same modules and opens nothing.
 *
 * Usage: `deno run -A bench/open_child.ts <deno | node> <session-dir | --baseline>` (or
 * `node --import tsx`).
 *
 * @module
 */
import { readFileSync } from "node:fs";
import process from "node:process";
import { SessionStore } from "../mod.ts";
import { loadAdapter, runMain } from "./runtime.ts";

function statusKb(field: string): number {
  const status = readFileSync("/proc/self/status", "utf8");
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
  return match === null ? NaN : Number(match[1]);
}

async function main(): Promise<void> {
  const [adapterName, target] = process.argv.slice(2);
  const { fs, sha256 } = await loadAdapter(adapterName === "deno" ? "deno" : "node");
  let messages = 0;
  if (target !== undefined && target !== "--baseline") {
    const store = new SessionStore({
      fs,
      sha256,
      agentDir: "/nonexistent-agent-dir",
    });
    const session = await store.open(target, { readOnly: true });
    messages = session.getStorageInfo()?.messageCount ?? 0;
    await session.close();
  }
  process.stdout.write(
    JSON.stringify({ peakKb: statusKb("VmHWM"), rssKb: statusKb("VmRSS"), messages }),
  );
}

runMain(main);
