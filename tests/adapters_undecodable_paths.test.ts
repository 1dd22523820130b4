// A path the system gives back that is not valid UTF-8 (a directory named with the byte 0xff) is
// refused by `realPath` and `readLink` on every adapter of the runtime, never decoded lossily
// into a string that names another file: a store never files a session under another workspace.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { nodeFs } from "../adapters/node.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionFormatError } from "../src/loop/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const isDeno = "Deno" in globalThis;

async function adapters(): Promise<[string, FileSystem][]> {
  const all: [string, FileSystem][] = [["nodeFs", nodeFs()]];
  if (isDeno) {
    const { denoFs } = await import("../adapters/deno.ts");
    all.push(["denoFs", denoFs()]);
  }
  return all;
}

/** A store under `dir` and one saved, closed session of it (its cwd `dir/work`). */
async function savedSession(fs: FileSystem, dir: string) {
  const cwd = `${dir}/work`;
  await fs.mkdir(cwd, { recursive: true });
  const store = new SessionStore({ fs, agentDir: `${dir}/agent`, durability: "ordered" });
  const session = await store.create(cwd);
  await session.commit(conversation(1));
  await session.close();
  return { cwd, store, session, collection: session.getSessionDir() };
}

function undecodable(error: unknown): boolean {
  assert.ok(error instanceof FsIoError, String(error));
  assert.match(error.message, /not valid UTF-8/);
  return true;
}

test("realPath and readLink refuse a path that is not valid UTF-8; a store files no session through it", async () => {
  const base = await realpath(await mkdtemp(join(tmpdir(), "loop-undecodable-")));
  try {
    // `proj\xff` (not UTF-8), a link to it, and a look-alike `proj\u{fffd}` (valid UTF-8): the
    // name a lossy decoding of the first gives.
    const made = spawnSync("sh", [
      "-c",
      `cd "$0" && mkdir "$(printf 'proj\\377')" proj$(printf '\\357\\277\\275') && ` +
      `ln -s "$(printf 'proj\\377')" mine && ln -s "$(printf '\\357\\273\\277dir')" bom`,
      base,
    ]);
    assert.equal(made.status, 0, String(made.stderr));
    for (const [name, fs] of await adapters()) {
      await assert.rejects(fs.realPath(`${base}/mine`), undecodable, name);
      await assert.rejects(fs.readLink(`${base}/mine`), undecodable, name);
      // A target that starts with U+FEFF is given back whole (no byte order mark is dropped).
      assert.equal(await fs.readLink(`${base}/bom`), "\u{feff}dir", name);
      const agentDir = `${base}/agent-${name}`;
      const store = new SessionStore({ fs, agentDir, durability: "ordered" });
      await assert.rejects(
        (async () => {
          const session = await store.create(`${base}/mine`);
          await session.commit(conversation(1));
        })(),
        undecodable,
        name,
      );
      // Nothing was filed for the look-alike workspace.
      assert.deepEqual(await store.list(`${base}/proj\u{fffd}`), [], name);
    }
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("a delete of a session with a companion whose name is not valid UTF-8 is refused by name, changing nothing", async () => {
  const base = await realpath(await mkdtemp(join(tmpdir(), "loop-undecodable-")));
  try {
    const cases = (await adapters()).flatMap(([adapter, fs]) =>
      [false, true].map((lookalike) =>
        [`${adapter}${lookalike ? "-lookalike" : ""}`, fs, lookalike] as const
      )
    );
    for (const [name, fs, lookalike] of cases) {
      const { cwd, store, session, collection } = await savedSession(fs, `${base}/${name}`);
      // A host's companion file `<id>.trace\xff` beside the session, and a readable one; with a
      // look-alike, also `<id>.trace\u{fffd}` (valid UTF-8), the name the first is listed by.
      const made = spawnSync("sh", [
        "-c",
        `cd "$0" && printf x > "$1.trace$(printf '\\377')" && printf y > "$1.ok"` +
        (lookalike ? ` && printf z > "$1.trace$(printf '\\357\\277\\275')"` : ""),
        collection,
        session.id,
      ]);
      assert.equal(made.status, 0, String(made.stderr));
      await store.archive.set(cwd, [session.id], true);
      const before = (await fs.readDir(collection)).map((entry) => entry.name);
      await assert.rejects(store.archive.delete(cwd, [session.id]), (error: unknown) => {
        assert.ok(error instanceof SessionFormatError, String(error));
        assert.equal(error.file, `${collection}/${session.id}.trace\u{fffd}`);
        assert.match(error.message, /not valid UTF-8.*rename or remove it/);
        return true;
      }, name);
      assert.deepEqual((await fs.readDir(collection)).map((entry) => entry.name), before, name);
      assert.deepEqual(await store.archive.list(cwd), [session.id], name);
      // Once the file is renamed, the delete removes the session and both companions.
      const renamed = spawnSync("sh", [
        "-c",
        `cd "$0" && mv "$1.trace$(printf '\\377')" "$1.trace"`,
        collection,
        session.id,
      ]);
      assert.equal(renamed.status, 0, String(renamed.stderr));
      await store.archive.delete(cwd, [session.id]);
      assert.deepEqual(
        (await fs.readDir(collection)).map((entry) => entry.name).filter((entry) =>
          entry.startsWith(session.id)
        ),
        [],
        name,
      );
    }
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("a companion spelled with U+FFFD is deleted when the name beside it that is not valid UTF-8 is a directory", async () => {
  const base = await realpath(await mkdtemp(join(tmpdir(), "loop-undecodable-")));
  try {
    for (const [name, fs] of await adapters()) {
      const { cwd, store, session, collection } = await savedSession(fs, `${base}/${name}`);
      // The session's companion `<id>.trace\u{fffd}` (a file), and a host's directory
      // `<id>.trace\xff`, listed by the same name.
      const made = spawnSync("sh", [
        "-c",
        `cd "$0" && printf x > "$1.trace$(printf '\\357\\277\\275')" && ` +
        `mkdir "$1.trace$(printf '\\377')"`,
        collection,
        session.id,
      ]);
      assert.equal(made.status, 0, String(made.stderr));
      await store.archive.set(cwd, [session.id], true);
      await store.archive.delete(cwd, [session.id]);
      const left = (await fs.readDir(collection)).filter((entry) =>
        entry.name.startsWith(session.id)
      );
      assert.deepEqual(
        left.map((entry) => [entry.name, entry.kind]),
        [[`${session.id}.trace\u{fffd}`, "directory"]],
        name,
      );
    }
  } finally {
    await rm(base, { recursive: true, force: true });
  }
});

test("nodeFs homeDir() is unknown when HOME is not valid UTF-8, as denoFs's is", async () => {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const dir = await mkdtemp(join(tmpdir(), "loop-home-"));
  try {
    const script = join(dir, "home.ts");
    await writeFile(
      script,
      `import { nodeFs } from ${JSON.stringify(join(root, "adapters", "node.ts"))};\n` +
        "console.log(JSON.stringify({ home: nodeFs().homeDir() ?? null }));\n",
    );
    const run = (home: string) =>
      spawnSync("sh", [
        "-c",
        `HOME="$(printf "$0")" exec node --import tsx "$1"`,
        home,
        script,
      ], { cwd: root, encoding: "utf8" });
    const bad = run("/tmp/home-\\377");
    assert.equal(bad.status, 0, bad.stderr);
    assert.deepEqual(JSON.parse(bad.stdout), { home: null });
    const good = run("/tmp/home-\\303\\251");
    assert.equal(good.status, 0, good.stderr);
    assert.deepEqual(JSON.parse(good.stdout), { home: "/tmp/home-\u00e9" });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("an environment value is read again only while it is the one the process started with; a refused read is unknown", async () => {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const dir = await mkdtemp(join(tmpdir(), "loop-env-"));
  try {
    const script = join(dir, "env.ts");
    await writeFile(
      script,
      `import { environmentValue } from ${
        JSON.stringify(join(root, "adapters", "_node_env.ts"))
      };\n` +
        `import { nodeFs } from ${JSON.stringify(join(root, "adapters", "node.ts"))};\n` +
        "const show = (v: unknown) => v instanceof Error ? 'error' : v ?? null;\n" +
        "const start = show(environmentValue('LOOP_X'));\n" +
        "process.env.LOOP_X = 'set-\\u{fffd}';\n" +
        "const changed = show(environmentValue('LOOP_X'));\n" +
        "console.log(JSON.stringify({ start, changed, home: nodeFs().homeDir() ?? null }));\n",
    );
    const node = spawnSync("sh", [
      "-c",
      `LOOP_X="$(printf 'start-\\377')" exec node --import tsx "$0"`,
      script,
    ], { cwd: root, encoding: "utf8" });
    assert.equal(node.status, 0, node.stderr);
    const seen = JSON.parse(node.stdout);
    assert.equal(seen.start, "error");
    assert.equal(seen.changed, "set-\u{fffd}");
    if (isDeno) {
      // Deno's Node layer without --allow-env refuses the read: the home directory is unknown.
      const home = join(dir, "home.ts");
      await writeFile(
        home,
        `import { nodeFs } from ${JSON.stringify(join(root, "adapters", "node.ts"))};\n` +
          "console.log(JSON.stringify({ home: nodeFs().homeDir() ?? null }));\n",
      );
      const deno = spawnSync(process.execPath, [
        "run",
        "--allow-read",
        "--config",
        join(root, "deno.json"),
        home,
      ], { cwd: root, encoding: "utf8" });
      assert.equal(deno.status, 0, deno.stderr);
      assert.equal(JSON.parse(deno.stdout).home, null);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
