// Migration on the Deno adapter (Deno only).
import { test } from "node:test";
import { denoFs, denoSha256 } from "../adapters/deno.ts";
import { pacedMigrationOnRealFs } from "./_migrate_real.ts";

test("a paced migration on the Deno adapter syncs behind its writes and publishes every byte", async () => {
  const base = await Deno.makeTempDir({ prefix: "loop-migrate-" });
  try {
    await pacedMigrationOnRealFs(denoFs(), denoSha256, base);
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});
