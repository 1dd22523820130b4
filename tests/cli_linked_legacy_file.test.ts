// `sessions verify <id|path>` of a never-migrated legacy `<id>.jsonl` that is not a regular file (a
// link, also one in a linked collection, a dangling link, a directory) reports it as `verify
// --all` does: one file finding naming it, exit code 1, nothing read through the link; the other
// commands refuse it by id as they do by path.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { memoryIo } from "./_cli_io.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import { conversation, legacySessionBytes } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const ROOT = `${AGENT}/sessions`;
const ID = "0f0e0d0c-0b0a-4908-8706-050403020100";

interface Report {
  readonly dir: string;
  readonly ok: boolean;
  readonly findings: { severity: string; kind: string; message: string; file: string }[];
}

/** Runs `sessions args` on `fs`; returns its exit code, stdout and stderr. */
async function sessions(
  fs: MemoryFs,
  args: string[],
): Promise<{ code: number; out: string; err: string }> {
  const { io, out } = memoryIo(fs, CWD, Date.parse("2026-03-01T00:00:00Z"));
  let err = "";
  const code = await runCli(["--data-dir", AGENT, "sessions", ...args], {
    ...io,
    err: (text) => void (err += text),
  });
  return { code, out: out(), err };
}

type Planted = "link" | "dangling link" | "directory";

/**
 * A store with one healthy session and, at `<collection>/<ID>.jsonl`, `planted` instead of a legacy
 * file; with `linkedCollection`, the collection itself is a link to a directory elsewhere.
 */
async function plantedStore(
  planted: Planted,
  linkedCollection: boolean,
): Promise<{ fs: MemoryFs; file: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  await session.commit(conversation(1, CWD));
  await session.close();
  const collection = `${ROOT}/${workspaceHash(CWD)}`;
  if (linkedCollection) {
    await fs.mkdir("/disk2", { recursive: true });
    await fs.rename(collection, "/disk2/collection");
    await fs.symlink("/disk2/collection", collection);
  }
  const file = `${collection}/${ID}.jsonl`;
  if (planted === "link") {
    // A link to a valid legacy session: never read through.
    await fs.writeFile("/elsewhere.jsonl", legacySessionBytes(ID, CWD, conversation(1)));
    await fs.symlink("/elsewhere.jsonl", file);
  } else if (planted === "dangling link") {
    await fs.symlink("/nowhere.jsonl", file);
  } else {
    await fs.mkdir(file);
  }
  fs.syncAll();
  return { fs, file };
}

test("verify <id|path> reports anything but a regular file at a never-migrated <id>.jsonl, as verify --all does", async () => {
  for (const planted of ["link", "dangling link", "directory"] as const) {
    for (const linkedCollection of [false, true]) {
      const { fs, file } = await plantedStore(planted, linkedCollection);
      const label = `${planted}${linkedCollection ? " in a linked collection" : ""}`;
      const before = fs.snapshotTree("/");
      const all = await sessions(fs, ["verify", "--all", "--json"]);
      assert.equal(all.code, 1, `${label}: ${all.out}`);
      const expected = (JSON.parse(all.out) as Report[]).find((r) => r.dir === file);
      assert.ok(expected !== undefined, `${label}: ${all.out}`);
      for (const target of [ID, file]) {
        const json = await sessions(fs, ["verify", target, "--json"]);
        assert.equal(json.code, 1, `${label}, ${target}: ${json.out}${json.err}`);
        assert.equal(json.err, "", `${label}, ${target}`);
        const reports = JSON.parse(json.out) as Report[];
        assert.deepEqual(reports, [expected], `${label}, ${target}`);
        const finding = reports[0]?.findings[0];
        assert.equal(finding?.kind, "file");
        assert.equal(finding?.file, file);
        assert.match(finding?.message ?? "", /not a regular file \(links are refused\)/);
        const text = await sessions(fs, ["verify", target]);
        assert.equal(text.code, 1, `${label}, ${target}: ${text.out}${text.err}`);
        assert.equal(text.err, "", `${label}, ${target}`);
        assert.equal(
          text.out,
          `CORRUPT  ${file}\n  error: ${finding?.message}\n    in ${file}\n`,
          `${label}, ${target}`,
        );
      }
      // The other commands name what is there, by id as by path, instead of no session.
      for (const target of [ID, file]) {
        const shown = await sessions(fs, ["show", target]);
        assert.equal(shown.code, 1, `${label}, ${target}: ${shown.out}`);
        assert.equal(
          shown.err,
          `error: Legacy session file is not a regular file (links are refused) (in '${file}')\n`,
          `${label}, ${target}`,
        );
      }
      // Reading only.
      assert.deepEqual(fs.snapshotTree("/"), before, label);
    }
  }
});

test("verify <id> still says no session when nothing is at the id", async () => {
  const { fs } = await plantedStore("link", false);
  const missing = "0f0e0d0c-0b0a-4908-8706-0504030201ff";
  const result = await sessions(fs, ["verify", missing]);
  assert.equal(result.code, 1, result.out);
  assert.match(result.err, /^error: No session with id /);
});
