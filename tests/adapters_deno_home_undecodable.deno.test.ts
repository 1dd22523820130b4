/**
 * The port's `homeDir()` answers undefined for a home it cannot name (no path string spells those
 * bytes); a throw would escape every caller that falls back on it (the CLI's "pass --data-dir or
 * set LOOP_DATA_DIR").
 */
import assert from "node:assert/strict";

const CHILD = `
import { denoFs } from ${JSON.stringify(new URL("../adapters/deno.ts", import.meta.url).href)};
let answer;
try { answer = { home: denoFs().homeDir() ?? null }; } catch (e) { answer = { threw: e.name }; }
console.log(JSON.stringify(answer));
`;

Deno.test({
  name: "denoFs().homeDir() is undefined for a HOME that is not valid UTF-8",
  ignore: Deno.build.os !== "linux",
  async fn() {
    const { code, stdout, stderr } = await new Deno.Command("bash", {
      args: [
        "-c",
        `HOME="$(printf '/tmp/home-\\377')" exec "$0" eval --quiet "$1"`,
        Deno.execPath(),
        CHILD,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(code, 0, new TextDecoder().decode(stderr));
    assert.deepEqual(JSON.parse(new TextDecoder().decode(stdout)), { home: null });
  },
});
