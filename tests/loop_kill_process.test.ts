// Real processes killed mid-write, on the Node adapter: a Node child commits rounds in a loop and
// is killed with SIGKILL at random moments, in both durability modes; every reopened state is
// exactly the last resolved round or the one in flight (see tests/_kill.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { nodeFs, nodeProcessProbe, nodeSha256 } from "../adapters/node.ts";
import { killLoop } from "./_kill.ts";
import { runsOf } from "./_soak.ts";

test("a Node writer killed with SIGKILL at random moments leaves a resolved-or-in-flight history", async () => {
  const committed = await killLoop({
    adapter: "node",
    command: (args) => ({ cmd: "node", args: ["--import", "tsx", ...args] }),
    fs: nodeFs(),
    sha256: nodeSha256,
    process: nodeProcessProbe(),
    kills: runsOf(4),
  });
  assert.ok(committed >= 8, `only ${committed} rounds committed`);
});
