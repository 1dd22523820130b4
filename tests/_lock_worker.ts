// The worker of loop_lock_worker.deno.test.ts: tries to open a session for writing with its own
// copy of the library's module state, and answers with the error's name (or "opened").
import { SessionStore } from "../src/loop/store.ts";
import { denoFs, denoProcessProbe } from "../adapters/deno.ts";

const scope = globalThis as unknown as {
  onmessage: ((event: MessageEvent) => void) | null;
  postMessage(message: unknown): void;
};

scope.onmessage = async (event: MessageEvent) => {
  const { agentDir, path } = event.data as { agentDir: string; path: string };
  const store = new SessionStore({ fs: denoFs(), agentDir, process: denoProcessProbe() });
  try {
    const session = await store.open(path);
    await session.close();
    scope.postMessage("opened");
  } catch (error) {
    scope.postMessage((error as Error).constructor.name);
  }
};
