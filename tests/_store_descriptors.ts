// On a real adapter, the store's operations leave no descriptor open on the session's files
// (closed when the call settles, or, for a file opened beside a check that failed, as soon as its
// open returns), also on the paths where they refuse what they find: a log, index or meta.json
// replaced by a FIFO, a directory or a link, or a log cut short. Counts /proc/self/fd (Linux).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, readlink, realpath, rm } from "node:fs/promises";
import { symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FileSystem } from "../src/port/fs.ts";
import type { Sha256Factory } from "../src/port/sha256.ts";
import { SessionStore } from "../src/loop/store.ts";
import { assistant, conversation, user } from "./_fixtures.ts";

/** The descriptors of this process open on a path under `dir` (the runtime opens its own too). */
async function descriptorsUnder(dir: string): Promise<string[]> {
  const held: string[] = [];
  for (const fd of await readdir("/proc/self/fd")) {
    // One closed since the listing has no link to read.
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => undefined);
    if (target !== undefined && target.startsWith(`${dir}/`)) held.push(target);
  }
  return held;
}

/**
 * The descriptors still open under `dir` once those a call opened have had a moment to close: a
 * call that refuses a session may settle while a file it opened beside its checks (the log, read
 * beside meta.json) is still being opened, and closes it as soon as that open returns, without
 * waiting for it (an open can wait on another process's lease). Looks again for up to half a
 * second.
 */
async function closedSoon(dir: string): Promise<string[]> {
  let held = await descriptorsUnder(dir);
  for (let waited = 0; held.length > 0 && waited < 500; waited += 10) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    held = await descriptorsUnder(dir);
  }
  return held;
}

/** The ways a session file is replaced. */
const DAMAGES = ["fifo", "directory", "link", "cut"] as const;

/**
 * Runs the store's reads and writes on `fs` over a real temporary directory, with each session
 * file damaged in each way in turn, and checks that no descriptor is left open on the directory's
 * files once each call settled and its manager is closed.
 */
export async function checkStoreDescriptors(fs: FileSystem, sha256: Sha256Factory): Promise<void> {
  const dir = await realpath(await mkdtemp(join(tmpdir(), "loop-store-descriptors-")));
  try {
    const cwd = join(dir, "cwd");
    await mkdir(cwd);
    const store = new SessionStore({ fs, sha256, agentDir: join(dir, "agent"), process: null });
    const created = await store.create(cwd);
    await created.commit(conversation(4));
    await created.close();
    const session = created.getSessionPath();
    const calls: [string, () => Promise<unknown>][] = [
      ["read-only open and a page", async () => {
        const opened = await store.open(session, { readOnly: true });
        try {
          await opened.readHistory();
        } finally {
          await opened.close();
        }
      }],
      ["writable open, a page and a save", async () => {
        const opened = await store.open(session);
        try {
          await opened.readHistory();
          await opened.append([user("one more"), assistant("done")]);
        } finally {
          await opened.close();
        }
      }],
      ["fast listing", () => store.list(cwd, undefined, { fast: true })],
      ["full listing", () => store.listDetailed(cwd)],
      ["compaction", () => store.compact(session)],
    ];
    const check = async (label: string) => {
      for (const [name, call] of calls) {
        await call().catch(() => undefined);
        assert.deepEqual(await closedSoon(dir), [], `${label}: ${name}`);
      }
    };
    await check("healthy");
    for (const file of ["messages.jsonl", "index.json", "meta.json"]) {
      const path = join(session, file);
      const saved = await readFile(path);
      for (const damage of DAMAGES) {
        await rm(path, { recursive: true, force: true });
        if (damage === "fifo") execFileSync("mkfifo", [path]);
        if (damage === "directory") await mkdir(path);
        if (damage === "link") await symlink(join(dir, "elsewhere"), path);
        if (damage === "cut") await writeFile(path, saved.subarray(0, 10));
        await check(`${file} as a ${damage}`);
      }
      await rm(path, { recursive: true, force: true });
      await writeFile(path, saved);
    }
    await check("restored");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
