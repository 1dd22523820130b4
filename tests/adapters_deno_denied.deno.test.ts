// denoFs maps a read that Deno's permissions deny to PermissionDenied, also for readFileNoFollow
// and openNoFollow, which go through Deno's Node layer (it rejects with Deno's own error class,
// without a code).
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("../", import.meta.url));

Deno.test("denoFs reports a read denied by Deno's permissions as PermissionDenied, with or without following links", async () => {
  const root = await Deno.makeTempDir({ prefix: "loop-deno-denied-" });
  try {
    const denied = `${root}/denied.json`;
    await Deno.writeTextFile(denied, "{}");
    const script = `${root}/probe.ts`;
    await Deno.writeTextFile(
      script,
      `import { denoFs } from ${
        JSON.stringify(new URL("../adapters/deno.ts", import.meta.url).href)
      };
const fs = denoFs();
for (const method of ["readFile", "readFileNoFollow", "openNoFollow"] as const) {
  try {
    await fs[method]!(${JSON.stringify(denied)});
    console.log(method, "read");
  } catch (error) {
    console.log(method, (error as Error).constructor.name, (error as { code?: string }).code);
  }
}
`,
    );
    const output = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--quiet",
        `--config=${repo}deno.json`,
        `--allow-read`,
        `--deny-read=${denied}`,
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
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
