/**
 * A write the kernel cuts short (a file size limit, a full disk) returns the bytes that landed;
 * `writeFile` must write the rest, which then fails, or it resolves with the file cut short: a
 * resolved write of a `meta.json` that is not whole. The child runs under a 4096-byte file size
 * limit (bash's `ulimit -f 4`, SIGXFSZ ignored), as tests/adapters_partial_write.deno.test.ts does.
 */
import assert from "node:assert/strict";

const CHILD = `
import { denoFs } from ${JSON.stringify(new URL("../adapters/deno.ts", import.meta.url).href)};
import { nodeFs } from ${JSON.stringify(new URL("../adapters/node.ts", import.meta.url).href)};
const dir = Deno.args[0];
const out = {};
for (const [name, fs] of [["deno", denoFs()], ["node", nodeFs()]]) {
  const path = dir + "/" + name;
  out[name] = await fs.writeFile(path, new Uint8Array(5000).fill(0x61)).then(() => "resolved", (e) => e.code);
}
console.log(JSON.stringify(out));
`;

Deno.test({
  name: "writeFile that the kernel cuts short rejects, never resolves with part of the data",
  ignore: Deno.build.os !== "linux",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "loop-partial-wf-" });
    try {
      const { code, stdout, stderr } = await new Deno.Command("bash", {
        args: [
          "-c",
          `trap '' XFSZ; ulimit -f 4; exec "$0" eval --quiet "$1" "$2"`,
          Deno.execPath(),
          CHILD,
          dir,
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(code, 0, new TextDecoder().decode(stderr));
      const results = JSON.parse(new TextDecoder().decode(stdout));
      assert.deepEqual(results, { deno: "EFBIG", node: "EFBIG" });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
