/**
 * The README's usage examples, run as written (their package imports pointed at this checkout)
 * in a fresh home directory: the Deno one with Deno, the Node one with Node.
 */
import assert from "node:assert/strict";

const ROOT = new URL("..", import.meta.url);
const README = await Deno.readTextFile(new URL("README.md", ROOT));

/** The first ```ts block after the line `heading`, its package imports pointed at this checkout. */
function example(heading: string): string {
  const start = README.indexOf(`\n${heading}`);
  assert.ok(start >= 0, `README has no "${heading}"`);
  const code = /```ts\n([\s\S]*?)```/.exec(README.slice(start));
  assert.ok(code !== null, `README has no example after "${heading}"`);
  const at = (path: string) => JSON.stringify(new URL(path, ROOT).href);
  return (code[1] as string)
    .replaceAll('"jsr:@loop/sessions/deno"', at("adapters/deno.ts"))
    .replaceAll('"jsr:@loop/sessions"', at("mod.ts"))
    .replaceAll('"@loop/sessions/node"', at("adapters/node.ts"))
    .replaceAll('"@loop/sessions"', at("mod.ts"));
}

/** Runs `args` in a fresh home directory; returns its stdout once it exited 0. */
async function run(command: string, args: string[], file: string): Promise<string> {
  const home = await Deno.makeTempDir({ prefix: "readme-home-" });
  try {
    const output = await new Deno.Command(command, {
      args: [...args, file],
      cwd: new URL(".", ROOT).pathname,
      env: { HOME: home, NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(output.stderr);
    assert.equal(output.code, 0, stderr);
    return new TextDecoder().decode(output.stdout);
  } finally {
    await Deno.remove(home, { recursive: true });
  }
}

Deno.test("the README's Deno example runs", async () => {
  const dir = await Deno.makeTempDir({ prefix: "readme-deno-" });
  try {
    const file = `${dir}/example.ts`;
    await Deno.writeTextFile(file, `${example("Deno:")}\nconsole.log(page.messages.length);\n`);
    const config = new URL("deno.json", ROOT).pathname;
    const args = ["run", "-A", "--quiet", "--config", config];
    assert.equal((await run(Deno.execPath(), args, file)).trim(), "1");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the README's Node example runs", async () => {
  const dir = await Deno.makeTempDir({ prefix: "readme-node-" });
  try {
    // An ES module wherever it lies (the example awaits at its top level).
    const file = `${dir}/example.mts`;
    await Deno.writeTextFile(file, example("Node ("));
    assert.equal((await run("node", ["--import", "tsx"], file)).trim(), "1");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
