import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import type { CliIo } from "../src/cli/output.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

/** Runs the CLI on `fs`; returns its exit code, stdout and stderr. */
async function cli(fs: MemoryFs, args: string[]) {
  let out = "";
  let err = "";
  const io: CliIo = {
    fs,
    sha256: portableSha256,
    out: (text) => {
      out += text;
    },
    err: (text) => {
      err += text;
    },
    errIsTerminal: false,
    env: () => undefined,
    cwd: CWD,
    now: () => Date.parse("2026-03-01T00:00:00Z"),
  };
  const code = await runCli(["--data-dir", AGENT, ...args], io);
  return { code, out, err };
}

test("sessions salvage of a session directory whose meta.json is gone says so as open does, in one line, writing nothing", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(2));
  await session.close();
  const dir = session.getSessionPath();
  await fs.remove(`${dir}/meta.json`);
  // index.json shows a save committed there (damage); without it no session is there.
  const cases: [string, string][] = [
    [
      "lost",
      `error: meta.json is missing but index.json shows a save committed here; the session is ` +
      `damaged and was not modified (in '${dir}/meta.json')\n`,
    ],
    ["none", `error: No session at '${dir}': meta.json not found (in '${dir}/meta.json')\n`],
  ];
  for (const [what, message] of cases) {
    if (what === "none") await fs.remove(`${dir}/index.json`);
    const before = fs.snapshotTree(AGENT);
    for (const target of [dir, session.id]) {
      const run = await cli(fs, ["sessions", "salvage", target, "--to", "/rescue"]);
      assert.equal(run.code, 1, run.err);
      assert.equal(run.out, "");
      // As opening it says (before: the port's "No such file or directory: open '<meta.json>'").
      assert.equal(run.err, message, `${what}, ${target}`);
      assert.deepEqual(fs.snapshotTree(AGENT), before);
      assert.equal(await fs.lstat("/rescue").then(() => true, () => false), false);
    }
  }
});
