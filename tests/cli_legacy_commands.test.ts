// The `sessions` commands on a legacy version-2 file not migrated yet: read in place, once,
// never through a link, and never written.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runSessions } from "../src/cli/sessions.ts";
import { memoryIo } from "./_cli_io.ts";
import { hookedFs } from "./_hooks.ts";
import { workspaceHash } from "../src/loop/store.ts";
import { assistant, legacySessionBytes, user } from "./_fixtures.ts";
import type { FileSystem } from "../src/port/fs.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const LEGACY = `${COLLECTION}/${ID}.jsonl`;

async function legacyStore(messages: readonly unknown[]): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true });
  await fs.writeFile(LEGACY, legacySessionBytes(ID, CWD, messages), { mode: 0o600 });
  return fs;
}

/** Runs `sessions args` on `fs` (or `through`, a view of it); returns the exit code and stdout. */
async function sessions(
  fs: MemoryFs,
  args: string[],
  through: FileSystem = fs,
): Promise<{ code: number; out: string }> {
  const { io, out } = memoryIo(fs, CWD, Date.now());
  return { code: await runSessions({ ...io, fs: through }, args, AGENT), out: out() };
}

test("sessions history of a legacy file prints what it validated, even when a link is swapped in after its read", async () => {
  const fs = await legacyStore([user("real question"), assistant("real answer")]);
  await fs.writeFile(
    "/planted.jsonl",
    legacySessionBytes(ID, CWD, [{ role: "user", content: "PLANTED", timestamp: "not a number" }]),
  );
  const isOpen = (method: string, args: unknown[]): boolean =>
    (method === "open" || method === "openNoFollow") && args[0] === LEGACY;
  // How often the command opens the file (finding the session opens it too): the swap comes
  // right after the last open, the one its page is read from.
  let opens = 0;
  const counting = hookedFs(fs, {
    after(method, args) {
      if (isOpen(method, args)) opens++;
      return Promise.resolve();
    },
  });
  assert.equal((await sessions(fs, ["history", LEGACY, "--json"], counting)).code, 0);
  let seen = 0;
  let swapped = false;
  const racing = hookedFs(fs, {
    async after(method, args) {
      if (isOpen(method, args) && ++seen === opens) {
        swapped = true;
        await fs.rename(LEGACY, "/aside.jsonl");
        await fs.symlink("/planted.jsonl", LEGACY);
      }
    },
  });
  const { code, out } = await sessions(fs, ["history", LEGACY, "--json"], racing);
  assert.equal(swapped, true);
  assert.equal(code, 0, out);
  const page = JSON.parse(out);
  assert.deepEqual(page.messages.map((m: { content: unknown }) => m.content), [
    "real question",
    assistant("real answer").content,
  ]);
  assert.equal(page.total, 2);
  assert.ok(!out.includes("PLANTED"), out);
});
