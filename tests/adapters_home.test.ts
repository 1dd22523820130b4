// The home directory both adapters fall back to when HOME is unset (`osHomeDir`): only an
// absolute path is a home directory; whatever else the runtime answers is "unknown" (undefined),
// so no store is ever placed at a path joined to `null` or to a relative name.
import { test } from "node:test";
import assert from "node:assert/strict";
import { homedir } from "node:os";
import { osHomeDir } from "../adapters/_node_env.ts";

test("osHomeDir() keeps an absolute answer and takes anything else as unknown", () => {
  assert.equal(osHomeDir(() => "/home/ada"), "/home/ada");
  // Deno's Node layer answers null for an account without a passwd entry.
  assert.equal(osHomeDir(() => null), undefined);
  assert.equal(osHomeDir(() => ""), undefined);
  assert.equal(osHomeDir(() => "relative/home"), undefined);
  // Node throws when it cannot determine one; Deno without --allow-sys throws NotCapable.
  assert.equal(
    osHomeDir(() => {
      throw new Error("uv_os_homedir returned ENOENT");
    }),
    undefined,
  );
});

test("osHomeDir() answers what the runtime's os.homedir() does on this machine", () => {
  const native = homedir();
  assert.equal(osHomeDir(), native.startsWith("/") ? native : undefined);
});
