// `sessions salvage` and SessionStore.salvage of a legacy version-2 file not migrated yet.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runSessions } from "../src/cli/sessions.ts";
import { memoryIo } from "./_cli_io.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { SessionFormatError } from "../src/loop/errors.ts";
import { verifySession } from "../src/loop/verify.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { assistant, legacySessionBytes, user } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const LEGACY = `${COLLECTION}/${ID}.jsonl`;

async function damagedLegacy(): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true, mode: 0o700 });
  const bytes = legacySessionBytes(ID, CWD, [
    user("first question"),
    assistant("answer"),
    { role: "user", content: "second", timestamp: "broken" },
  ]);
  await fs.writeFile(LEGACY, bytes, { mode: 0o600 });
  return fs;
}

async function sessions(fs: MemoryFs, args: string[]): Promise<{ code: number; out: string }> {
  const { io, out } = memoryIo(fs, CWD, Date.now());
  return { code: await runSessions(io, args, AGENT), out: out() };
}

test("sessions salvage of a damaged legacy file that cannot migrate exports its valid prefix", async () => {
  for (const target of [ID, LEGACY]) {
    const fs = await damagedLegacy();
    assert.equal((await sessions(fs, ["migrate", LEGACY])).code, 1, "the migration fails");
    const before = fs.snapshotTree(AGENT);
    const { code, out } = await sessions(fs, ["salvage", target, "--to", "/rescue", "--json"]);
    assert.equal(code, 0, out);
    const result = JSON.parse(out);
    assert.equal(result.kept, 2);
    assert.equal(result.dropped, 1);
    assert.deepEqual(
      fs.snapshotTree(AGENT),
      before,
      "the legacy file and its collection are unchanged",
    );
    assert.equal((await verifySession(fs, result.dir, { sha256: portableSha256 })).ok, true);
    const store = new SessionStore({ fs, agentDir: AGENT });
    const rescued = await store.open(result.dir, { readOnly: true });
    assert.deepEqual(rescued.messages.map((m) => m.role), ["user", "assistant"]);
    await rescued.close();
  }
});

test("SessionStore.salvage of a legacy file: its header must be readable, checked before the destination is made", async () => {
  const fs = await damagedLegacy();
  const store = new SessionStore({ fs, agentDir: AGENT });
  const result = await store.salvage(LEGACY, "/rescue");
  assert.equal(result.kept, 2);
  await fs.writeFile(LEGACY, new TextEncoder().encode("{not a header\n"));
  const before = fs.snapshotTree("/");
  await assert.rejects(store.salvage(LEGACY, "/elsewhere"), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, LEGACY);
    assert.equal(error.path, "header");
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
  // The command line fails with the same error (exit 1 from the entry point).
  await assert.rejects(sessions(fs, ["salvage", ID, "--to", "/elsewhere"]), SessionFormatError);
  assert.deepEqual(fs.snapshotTree("/"), before);
});
