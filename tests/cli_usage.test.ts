// A command line that does not fit its command is a usage error (exit 2) before anything is read
// or changed: an unknown option (whatever its name), a value option given twice, a session id or
// logical reference no session can have, and an option after `help` or `--version`.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { runCli } from "../src/cli/main.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { newRepo, newRoot } from "./layout_fixtures.ts";

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

async function cli(fs: MemoryFs, args: string[]): Promise<Run> {
  let out = "";
  let err = "";
  const code = await runCli(args, {
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
    cwd: "/repo",
    now: () => Date.parse("2026-12-01T00:00:00Z"),
  });
  return { code, out, err };
}

/** A repository with one root session whose raw/ holds one attempt directory. */
async function repoWithRaw(): Promise<{ fs: MemoryFs; rawFile: string; rootId: string }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await fs.mkdir(`${root.dir}/raw/0001_outer`, { recursive: true });
  const rawFile = `${root.dir}/raw/0001_outer/log.txt`;
  await fs.writeFile(rawFile, new TextEncoder().encode("noise"));
  return { fs, rawFile, rootId: root.sessionId };
}

function assertUsage(run: Run, pattern: RegExp, args: string[]): void {
  assert.equal(run.code, 2, `${args.join(" ")}: ${run.err}`);
  assert.match(run.err, /(^|\n)usage error: /, args.join(" "));
  assert.match(run.err, pattern, args.join(" "));
  assert.equal(run.out, "", args.join(" "));
}

test("an option named like an object's built-in property is an unknown option", async () => {
  const { fs } = await repoWithRaw();
  for (
    const args of [
      ["sessions", "list", "--constructor=x"],
      ["sessions", "list", "--toString", "1"],
      ["sessions", "verify", "--all", "--valueOf=1"],
      ["sessions", "list", "--__proto__=1"],
      ["prune-raw", "--hasOwnProperty=1", "--help"],
      ["layout", "tree", "--isPrototypeOf"],
    ]
  ) {
    assertUsage(await cli(fs, args), /unknown option '--/, args);
  }
  const command = ["sessions", "toString"];
  assertUsage(await cli(fs, command), /unknown command 'sessions toString'/, command);
});

test("a value option given twice is a usage error, and nothing is pruned", async () => {
  const { fs, rawFile, rootId } = await repoWithRaw();
  for (
    const args of [
      ["prune-raw", "--session", rootId, "--session", rootId],
      ["prune-raw", `--older-than=0`, "--older-than", "0"],
      ["sessions", "salvage", "x", "--to", "/a", "--to=/b"],
      ["--data-dir", "/a", "--data-dir=/b", "sessions", "list"],
    ]
  ) {
    assertUsage(await cli(fs, args), /given more than once/, args);
  }
  assert.equal(new TextDecoder().decode(await fs.readFile(rawFile)), "noise");
  // Given once, the same command prunes.
  const once = await cli(fs, ["prune-raw", "--session", rootId, "--json"]);
  assert.equal(once.code, 0, once.err);
  await assert.rejects(fs.readFile(rawFile), { name: "NotFound" });
});

test("a session id or a logical reference that no session can have is a usage error", async () => {
  const { fs, rawFile, rootId } = await repoWithRaw();
  for (
    const [args, pattern] of [
      [["layout", "resolve", "bogus"], /no ':\/'/],
      [["layout", "resolve", "repo:/../etc/passwd"], /'\.\.'/],
      [["layout", "resolve", "repo:/notes.md", "--session", "../x"], /--session must be a session/],
      [["layout", "show", "../x"], /<session id> must be a session id/],
      [["layout", "tree", "a/b"], /ROOT must be a session id/],
      [["prune-raw", "--session", "../x"], /--session must be a session id/],
      [["prune-raw", "--session=.hidden"], /--session must be a session id/],
      // Safe names, but of neither session id form: no session.json may record them.
      [["layout", "show", "NOPE"], /<session id> must be a session id, got 'NOPE'/],
      [["layout", "tree", "NOPE"], /ROOT must be a session id/],
      [["layout", "resolve", "session:/goal.md", "--session", "NOPE"], /--session must be/],
      [["layout", "resolve", "session:NOPE:/goal.md"], /the session of session:<id>:\/ must be/],
      [["prune-raw", "--session", "NOPE", "--dry-run"], /--session must be a session id/],
    ] as const
  ) {
    assertUsage(await cli(fs, [...args]), pattern, [...args]);
  }
  assert.equal(new TextDecoder().decode(await fs.readFile(rawFile)), "noise");
  // The same commands with arguments that fit them.
  const resolved = await cli(fs, ["layout", "resolve", "repo:/notes.md", "--session", rootId]);
  assert.equal(resolved.code, 0, resolved.err);
  assert.equal(resolved.out, "/repo/notes.md (absent)\n");
  assert.equal((await cli(fs, ["layout", "show", rootId])).code, 0);
  assert.equal((await cli(fs, ["layout", "tree", rootId])).code, 0);
});

test("an option after help or --version, and an option as --data-dir's value, are usage errors", async () => {
  const { fs } = await repoWithRaw();
  for (
    const [args, pattern] of [
      [["--version", "--bogus"], /unknown option '--bogus'/],
      [["--version", "extra"], /--version takes no arguments/],
      [["help", "--bogus"], /unknown option '--bogus'/],
      [["--help", "--bogus"], /unknown option '--bogus'/],
      [["sessions", "help", "--bogus"], /unknown option '--bogus'/],
      [["layout", "--help", "--bogus"], /unknown option '--bogus'/],
      [["--data-dir", "--json", "sessions", "list"], /'--data-dir' needs a value/],
    ] as const
  ) {
    assertUsage(await cli(fs, [...args]), pattern, [...args]);
  }
  const version = await cli(fs, ["--version"]);
  assert.deepEqual([version.code, version.out], [0, "0.1.0\n"]);
  for (const args of [["help"], ["sessions", "help"], ["layout", "help", "--help"]]) {
    const run = await cli(fs, args);
    assert.equal(run.code, 0, args.join(" "));
    assert.match(run.out, /Usage: loop-sessions/, args.join(" "));
  }
});

test("layout resolve says whether an absent target was pruned or never written", async () => {
  const { fs, rawFile, rootId } = await repoWithRaw();
  const ref = "session:/raw/0001_outer/log.txt";
  const present = await cli(fs, ["layout", "resolve", ref, "--session", rootId]);
  assert.deepEqual([present.code, present.out], [0, `${rawFile}\n`]);
  assert.equal((await cli(fs, ["prune-raw", "--session", rootId])).code, 0);
  const pruned = await cli(fs, ["layout", "resolve", ref, "--session", rootId]);
  assert.deepEqual([pruned.code, pruned.out], [0, `${rawFile} (pruned)\n`]);
  const json = await cli(fs, ["layout", "resolve", ref, "--session", rootId, "--json"]);
  assert.equal(JSON.parse(json.out).status, "pruned");
  const absent = await cli(fs, ["layout", "resolve", "session:/notes.md", "--session", rootId]);
  assert.match(absent.out, /\/notes\.md \(absent\)\n$/);
});
