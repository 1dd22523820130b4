/**
 * The collection a command reports is the normalized path the store uses: `sessions cleanup --dir
 * C/` (a shell's completion adds the slash) reports `C`, the same collection `--dir C` names, in
 * text and in --json, so scripts can match it against `sessions list --json` paths.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "../tests/_cli_io.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "../tests/_fixtures.ts";

const AGENT = "/home/user/.loop";
const CWD = "/work/project";

test("cleanup --dir names the collection by its normalized path, however it was spelled", async () => {
  const fs = new MemoryFs();
  const now = Date.parse("2026-03-01T00:00:00Z");
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT, now: () => now });
  const session = await store.create(CWD);
  await session.commit(conversation(1));
  await session.close();
  const collection = await store.collectionFor(CWD);
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
