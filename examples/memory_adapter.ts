/**
 * The memory adapter as a crash simulator: commit, crash after every operation, and check that
 * each recovered state shows the old or the new history.
 * Run: `deno run -A examples/memory_adapter.ts`.
 *
 * @module
 */
import { type Message, SessionStore } from "../mod.ts";
import { MemoryFs, SimulatedCrash } from "../adapters/memory.ts";

async function main(): Promise<void> {
  const baseline = new MemoryFs();
  await baseline.mkdir("/work", { recursive: true });
  const store = new SessionStore({ fs: baseline, agentDir: "/home/user/.loop" });
  const session = await store.create("/work");
  const before: Message[] = [{ role: "user", content: "first", timestamp: 1 }];
  await session.commit(before);
  await session.close();
  baseline.syncAll();
  const after: Message[] = [...before, { role: "user", content: "second", timestamp: 2 }];
  const outcomes = new Map<number, number>();
  for (let n = 0;; n++) {
    const fs = baseline.clone();
    fs.crashAfter(n);
    try {
      const s = await new SessionStore({ fs, agentDir: "/home/user/.loop" }).open(
        session.getSessionPath(),
      );
      await s.commit(after);
    } catch (error) {
      if (!(error instanceof SimulatedCrash)) throw error;
    }
    for (const seed of [0, 1, 2]) {
      const recovered = fs.crash(seed);
      const reopened = await new SessionStore({ fs: recovered, agentDir: "/home/user/.loop" })
        .open(session.getSessionPath(), { readOnly: true });
      const count = reopened.messages.length;
      outcomes.set(count, (outcomes.get(count) ?? 0) + 1);
    }
    if (!fs.crashTriggered) {
      console.log(
        `${n + 1} crash points, recovered histories by length: ${JSON.stringify([...outcomes])}`,
      );
      return;
    }
  }
}

main();
