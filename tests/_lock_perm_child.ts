// A Deno child for loop_lock.deno.test.ts: opens the session directory Deno.args[0] (of the agent
// directory Deno.args[1]) for writing with a store of denoFs() and no `process` option, under the
// permissions its parent gave it, and prints what happened as one JSON line.
import { denoFs } from "../adapters/deno.ts";
import { SessionStore } from "../src/loop/store.ts";

const [dir, agentDir] = Deno.args as [string, string];
const store = new SessionStore({ fs: denoFs(), agentDir });
const probe = store.context.probe !== undefined;
try {
  const session = await store.open(dir);
  await session.close();
  console.log(JSON.stringify({ probe, outcome: "opened" }));
} catch (error) {
  const { name, message } = error as Error;
  console.log(JSON.stringify({ probe, outcome: name, message }));
}
