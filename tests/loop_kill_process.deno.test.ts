// Real processes killed mid-write, on the Deno adapter: a Deno child commits rounds in a loop and
// is killed with SIGKILL at random moments, in both durability modes; every reopened state is
// exactly the last resolved round or the one in flight (see tests/_kill.ts).
import assert from "node:assert/strict";
import { denoFs, denoProcessProbe, denoSha256 } from "../adapters/deno.ts";
import { killLoop } from "./_kill.ts";
import { runsOf } from "./_soak.ts";

Deno.test("a Deno writer killed with SIGKILL at random moments leaves a resolved-or-in-flight history", async () => {
  const committed = await killLoop({
    adapter: "deno",
    command: (args) => ({ cmd: Deno.execPath(), args: ["run", "-A", ...args] }),
    fs: denoFs(),
    sha256: denoSha256,
    process: denoProcessProbe(),
    kills: runsOf(4),
  });
  assert.ok(committed >= 8, `only ${committed} rounds committed`);
});
