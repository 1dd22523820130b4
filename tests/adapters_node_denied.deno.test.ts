// nodeFs run on Deno maps a call that Deno's permissions refuse (Deno's Node layer throws Deno's
// own `NotCapable`, without a code) to PermissionDenied, as denoFs does, never to an I/O fault.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("../", import.meta.url));

Deno.test("nodeFs on Deno reports reads and writes denied by Deno's permissions as PermissionDenied", async () => {
  const root = await Deno.makeTempDir({ prefix: "loop-node-denied-" });
  try {
    const denied = `${root}/denied.json`;
    await Deno.writeTextFile(denied, "{}");
    const script = `${root}/probe.ts`;
    await Deno.writeTextFile(
      script,
      `import { nodeFs } from ${
        JSON.stringify(new URL("../adapters/node.ts", import.meta.url).href)
      };
const fs = nodeFs();
const denied = ${JSON.stringify(denied)};
const root = ${JSON.stringify(root)};
const calls: [string, () => Promise<unknown>][] = [
  ["readFile", () => fs.readFile(denied)],
  ["readFileNoFollow", () => fs.readFileNoFollow!(denied)],
  ["openNoFollow", () => fs.openNoFollow!(denied)],
  ["open", () => fs.open(denied)],
  ["stat", () => fs.stat(denied)],
  ["lstat", () => fs.lstat(denied)],
  ["realPath", () => fs.realPath(denied)],
  ["writeFile", () => fs.writeFile(root + "/new", new Uint8Array(1))],
  ["mkdir", () => fs.mkdir(root + "/dir")],
  ["rename", () => fs.rename(denied, root + "/renamed")],
  ["remove", () => fs.remove(denied)],
];
for (const [name, run] of calls) {
  try {
    await run();
    console.log(name, "done");
  } catch (error) {
    console.log(name, (error as Error).constructor.name, (error as { code?: string }).code);
  }
}
`,
    );
    const output = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--quiet",
        "--no-prompt",
        `--config=${repo}deno.json`,
        "--allow-read",
        `--deny-read=${denied}`,
        "--allow-write",
        `--deny-write=${root}`,
        script,
      ],
      cwd: repo,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(output.stdout);
    assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
    assert.deepEqual(text.trim().split("\n"), [
      "readFile PermissionDenied EACCES",
      "readFileNoFollow PermissionDenied EACCES",
      "openNoFollow PermissionDenied EACCES",
      "open PermissionDenied EACCES",
      "stat PermissionDenied EACCES",
      "lstat PermissionDenied EACCES",
      "realPath PermissionDenied EACCES",
      "writeFile PermissionDenied EACCES",
      "mkdir PermissionDenied EACCES",
      "rename PermissionDenied EACCES",
      "remove PermissionDenied EACCES",
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
