/**
 * The Node adapter: sessions on the real disk with native SHA-256 and the cross-process writer
 * lock. Run: `node --import tsx examples/node_adapter.ts` (also runs on Deno).
 *
 * @module
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SessionBusyError, SessionLockedError, SessionStore } from "../mod.ts";
import { nodeFs, nodeProcessProbe, nodeSha256 } from "../adapters/node.ts";

async function main(): Promise<void> {
  const base = await mkdtemp(join(tmpdir(), "loop-node-"));
  try {
    const options = {
      fs: nodeFs(),
      sha256: nodeSha256,
      process: nodeProcessProbe(),
      agentDir: join(base, "agent"),
    };
    const store = new SessionStore(options);
    const session = await store.create(base);
    await session.commit([{ role: "user", content: "Hello from Node", timestamp: Date.now() }]);
    // A second writer cannot open it: another process gets SessionLockedError (the writer.lock
    // file), another manager in this process gets SessionBusyError.
    const other = new SessionStore(options);
    try {
      await other.open(session.getSessionFile());
    } catch (error) {
      if (error instanceof SessionLockedError || error instanceof SessionBusyError) {
        console.log(`second writer refused: ${error.name}`);
      } else throw error;
    }
    await session.close();
    const reopened = await other.open(session.getSessionFile());
    console.log(`reopened with ${reopened.messages.length} message(s)`);
    await reopened.close();
  } finally {
    await rm(base, { recursive: true, force: true });
  }
}

main();
