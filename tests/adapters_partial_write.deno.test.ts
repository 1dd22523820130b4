/**
 * Writes that land partially and then fail, on the real adapters: a child runtime runs under a
 * 4096-byte file size limit (bash's `ulimit -f 4`, SIGXFSZ ignored), so a write crossing it lands its
 * first bytes and the rest fails with EFBIG, as a write on a full disk does with ENOSPC.
 */
import assert from "node:assert/strict";

const CHILD = `
import { denoFs } from ${JSON.stringify(new URL("../adapters/deno.ts", import.meta.url).href)};
import { nodeFs } from ${JSON.stringify(new URL("../adapters/node.ts", import.meta.url).href)};
const dir = Deno.args[0];
const out = {};
const code = (p) => p.then(() => "ok", (e) => e.code);
for (const [name, fs] of [["deno", denoFs()], ["node", nodeFs()]]) {
  const path = dir + "/" + name;
  const h = await fs.open(path, { create: true });
  await h.write(new Uint8Array(4000).fill(0x61));
  const crossing = await code(h.write(new Uint8Array(200).fill(0x62)));
  const next = await code(h.write(new Uint8Array([0x5a])));
  await h.close();
  const data = await Deno.readFile(path);
  out[name] = { crossing, next, size: data.length, z: data.indexOf(0x5a), b: data.filter((x) => x === 0x62).length };
}
// A write over 64 KiB, which the Deno adapter makes asynchronously (smaller ones synchronously).
{
  const path = dir + "/deno-large";
  const h = await denoFs().open(path, { create: true });
  await h.write(new Uint8Array(4000).fill(0x61));
  const crossing = await code(h.write(new Uint8Array(70000).fill(0x62)));
  const next = await code(h.write(new Uint8Array([0x5a])));
  await h.close();
  const data = await Deno.readFile(path);
  out.denoLarge = { crossing, next, size: data.length, z: data.indexOf(0x5a), b: data.filter((x) => x === 0x62).length };
}
// writeFile of more than the limit: it writes the rest of what the kernel cut short, which fails,
// and never resolves with the file holding part of the data.
out.writeFile = {};
for (const [name, fs] of [["deno", denoFs()], ["node", nodeFs()]]) {
  const path = dir + "/whole-" + name;
  out.writeFile[name] = await code(fs.writeFile(path, new Uint8Array(5000).fill(0x61)));
}
console.log(JSON.stringify(out));
`;

Deno.test({
  name: "a write that lands partially moves the position past the bytes that landed",
  ignore: Deno.build.os !== "linux",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "loop-partial-" });
    try {
      const command = new Deno.Command("bash", {
        args: [
          "-c",
          `trap '' XFSZ; ulimit -f 4; exec "$0" eval --quiet "$1" "$2"`,
          Deno.execPath(),
          CHILD,
          dir,
        ],
        stdout: "piped",
        stderr: "piped",
      });
      const { code, stdout, stderr } = await command.output();
      const text = new TextDecoder().decode(stdout);
      assert.equal(code, 0, new TextDecoder().decode(stderr));
      const results = JSON.parse(text) as Record<string, unknown>;
      assert.deepEqual(results.deno, {
        // The limit cuts the write after 96 bytes; the error keeps its POSIX code.
        crossing: "EFBIG",
        // The next write goes after the 96 bytes, past the limit: nothing is overwritten.
        next: "EFBIG",
        size: 4096,
        z: -1,
        b: 96,
      });
      assert.deepEqual(results.denoLarge, results.deno);
      // Deno's Node layer reports the failed write without the bytes that landed, so nodeFs() on
      // Deno cannot move past them; only the code is held here (Node itself: tests/adapters_partial_write_node.test.ts).
      const node = results.node as { crossing: string; size: number };
      assert.equal(node.crossing, "EFBIG");
      assert.equal(node.size, 4096);
      assert.deepEqual(results.writeFile, { deno: "EFBIG", node: "EFBIG" });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
