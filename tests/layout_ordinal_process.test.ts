// Real processes: several Node processes create root sessions in one repository at the same
// moment (no shared in-process serialization), each with its own goal. The ordinal alone makes
// an id unique, so every session must get its own ordinal.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readdir, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = new URL("../", import.meta.url);

const CREATOR = `
const { createRootSession } = await import(${JSON.stringify(new URL("layout.ts", ROOT).href)});
const { nodeFs } = await import(${JSON.stringify(new URL("adapters/node.ts", ROOT).href)});
const { existsSync } = await import("node:fs");
const [repo, goal, go] = process.argv.slice(2);
while (!existsSync(go)) await new Promise((resolve) => setTimeout(resolve, 2));
const session = await createRootSession(nodeFs(), {
  repoRoot: repo,
  goal,
  workflowSet: "main",
  workflowContract: {},
  workflowRoster: {},
  harnessCapabilityRoster: {},
  durability: "ordered",
});
process.stdout.write(session.sessionId + "\\n");
`;

function run(script: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn("node", ["--import", "tsx", script, ...args], {
      cwd: new URL(".", ROOT).pathname,
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout?.on("data", (chunk: Uint8Array) => (out += new TextDecoder().decode(chunk)));
    child.on("error", reject);
    child.on(
      "exit",
      (code) => code === 0 ? resolve(out.trim()) : reject(new Error(`exit ${code}`)),
    );
  });
}

test("root sessions created by several processes at once get distinct ordinals", async () => {
  const base = await realpath(await mkdtemp(join(tmpdir(), "loop-ordinal-")));
  try {
    const script = join(base, "creator.mts");
    await writeFile(script, CREATOR);
    for (let round = 0; round < 2; round++) {
      const repo = join(base, `repo-${round}`);
      await mkdir(join(repo, ".loopy_loop", "sessions"), { recursive: true });
      const go = join(base, `go-${round}`);
      const goals = ["alpha goal", "beta goal", "gamma goal"];
      const runs = goals.map((goal) => run(script, [repo, goal, go]));
      // Let every process load and wait at the barrier, then release them together.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      await writeFile(go, "");
      const ids = await Promise.all(runs);
      const ordinals = ids.map((id) => id.split("_")[0]).sort();
      assert.deepEqual(ordinals, ["001", "002", "003"], `round ${round}: ${ids.join(", ")}`);
      const entries = (await readdir(join(repo, ".loopy_loop", "sessions"))).sort();
      assert.deepEqual(entries, [...ids].sort(), `round ${round}: no reservation is left behind`);
    }
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});
