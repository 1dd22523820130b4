/**
 * The Deno adapter: `denoFs()` over `Deno.*` APIs with native SHA-256.
 * Run: `deno run -A examples/deno_adapter.ts`.
 *
 * @module
 */
import { SessionStore } from "../mod.ts";
import { denoFs, denoProcessProbe, denoSha256 } from "../adapters/deno.ts";

const base = await Deno.makeTempDir({ prefix: "loop-deno-" });
try {
  const store = new SessionStore({
    fs: denoFs(),
    sha256: denoSha256,
    process: denoProcessProbe(),
    agentDir: `${base}/agent`,
  });
  const session = await store.create(base);
  await session.commit([{ role: "user", content: "Hello from Deno", timestamp: Date.now() }]);
  const [info] = await store.list(base, undefined, { fast: true });
  console.log(`listed ${info?.id} with ${info?.messageCount} message(s)`);
  await session.close();
} finally {
  await Deno.remove(base, { recursive: true });
}
