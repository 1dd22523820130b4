// What `sessions cleanup` reports: exit 1 for what it keeps (the help says: "What it cannot settle
// is listed as kept (exit 1): look at it by hand"; a staged delete whose journal is torn may hold a
// session's only copy), and a collection by the normalized path the store uses, however `--dir`
// spelled it (`C/` from a shell's completion reports `C`, in text and in --json, so scripts can
// match it against `sessions list --json` paths).
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import type { SessionManager } from "../src/loop/session_manager.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const AGENT = "/home/user/.loop";
const CWD = "/work/project";
const now = Date.parse("2026-03-01T00:00:00Z");

/** A store holding one saved session in the collection of CWD. */
async function oneSession(): Promise<
  { fs: MemoryFs; session: SessionManager; collection: string }
> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => now });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  return { fs, session, collection: await store.collectionFor(CWD) };
}

test("sessions cleanup exits 1 when it keeps a staged delete it cannot settle", async () => {
  const { fs, session, collection } = await oneSession();
  // A delete torn before its journal was whole: the session's only copy is staged.
  const staging = `${collection}/.delete-00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(staging);
  await fs.rename(`${collection}/${session.id}`, `${staging}/${session.id}`);
  await fs.writeFile(`${staging}/intent.json`, new TextEncoder().encode('{"operation":"del'));
  for (
    const args of [
      [],
      ["--json"],
      ["--dir", collection],
      ["--all-workspaces"],
    ]
  ) {
    const { io, out } = memoryIo(fs, CWD, now);
    const code = await runCli(["--data-dir", AGENT, "sessions", "cleanup", ...args], io);
    assert.match(out(), /kept/, args.join(" "));
    assert.equal(code, 1, `cleanup ${args.join(" ")}: ${out()}`);
  }
  assert.ok(await fs.lstat(`${staging}/${session.id}`));
});

test("cleanup --dir names the collection by its normalized path, however it was spelled", async () => {
  const { fs, collection } = await oneSession();
  for (const spelled of [`${collection}/`, `${collection}/.`, `${collection}//`]) {
    const json = memoryIo(fs, CWD, now);
    assert.equal(
      await runCli(
        ["--data-dir", AGENT, "sessions", "cleanup", "--dir", spelled, "--json"],
        json.io,
      ),
      0,
    );
    assert.deepEqual(
      JSON.parse(json.out()).collections.map((c: { collection: string }) => c.collection),
      [collection],
      spelled,
    );
    const text = memoryIo(fs, CWD, now);
    assert.equal(
      await runCli(["--data-dir", AGENT, "sessions", "cleanup", "--dir", spelled], text.io),
      0,
    );
    assert.equal(text.out(), `${collection}: nothing to do\n`, spelled);
  }
});
