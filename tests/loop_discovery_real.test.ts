// Fast listings on the real filesystem (nodeFs, on Node and on Deno's Node layer): session files
// planted as a FIFO or a link are reported or passed over without hanging and without reading
// through the link, exactly as a listing that lists each session directory first reports them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtemp, rename, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { nodeFs, nodeSha256 } from "../adapters/node.ts";
import type { FileSystem } from "../src/port/fs.ts";
import { SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import type { ListResult } from "../src/loop/discovery.ts";
import { withoutNoFollow } from "./_hooks.ts";
import { conversation, withoutRecordedTitle } from "./_fixtures.ts";

/**
 * Where a listed session's title comes from: meta.json (a stored title), index.json (the fallback
 * title it records) or the log (the fallback title derived from the first user message, for an
 * index that records none).
 */
type TitleKind = "stored" | "recorded" | "derived";
const TITLE_KINDS: readonly TitleKind[] = ["stored", "recorded", "derived"];
const TITLE_LABELS: Record<TitleKind, string> = {
  stored: "stored title",
  recorded: "title recorded by the index",
  derived: "fallback title read from the log",
};

const POSIX = process.platform !== "win32";

/**
 * A collection holding one session of `rounds` user rounds (6 messages by default), with a title
 * of kind `kind`, on the real filesystem.
 */
async function fixture(kind: TitleKind, rounds = 3): Promise<{
  root: string;
  collection: string;
  dir: string;
  list: (fs: FileSystem) => Promise<ListResult>;
}> {
  const root = await mkdtemp(join(tmpdir(), "loop-fast-list-"));
  const collection = join(root, "sessions");
  const store = new SessionStore({
    fs: nodeFs(),
    sha256: nodeSha256,
    agentDir: join(root, "agent"),
    sessionDir: collection,
  });
  const session = await store.create(root);
  await session.commit(conversation(rounds, "real"));
  if (kind === "stored") {
    await session.setTitle({ text: "Stored", source: "user", messageIndices: [] });
  }
  await session.close();
  if (kind === "derived") await withoutRecordedTitle(nodeFs(), session.getSessionPath());
  const list = (fs: FileSystem) =>
    new SessionStore({ fs, sha256: nodeSha256, agentDir: join(root, "agent") })
      .listDetailed(undefined, collection, { fast: true });
  return { root, collection, dir: session.getSessionPath(), list };
}

/** Sessions and failures of a listing, comparable across the two ways of reading. */
function summary(result: ListResult): unknown {
  return {
    sessions: result.sessions.map((s) => [s.id, s.userMessageCount, s.title?.text]),
    failures: result.failures.map((f) => [
      f.id,
      f.error.constructor.name,
      (f.error as SessionFormatError).file,
    ]),
  };
}

test("nodeFs offers readFileNoFollow and openNoFollow on POSIX platforms", () => {
  assert.equal(typeof nodeFs().readFileNoFollow === "function", POSIX);
  assert.equal(typeof nodeFs().openNoFollow === "function", POSIX);
});

if (POSIX) {
  for (const kind of TITLE_KINDS) {
    test(
      `a fast listing reports a meta.json planted as a FIFO, without waiting on it (${
        TITLE_LABELS[kind]
      })`,
      async () => {
        const { root, dir, list } = await fixture(kind);
        try {
          await rm(join(dir, "meta.json"));
          execFileSync("mkfifo", [join(dir, "meta.json")]);
          const result = await list(nodeFs());
          assert.deepEqual(result.sessions, []);
          assert.ok(result.failures[0]?.error instanceof SessionFormatError);
          assert.match(result.failures[0].error.message, /not a regular file/);
          assert.deepEqual(summary(result), summary(await list(withoutNoFollow(nodeFs()))));
        } finally {
          await rm(root, { recursive: true, force: true });
        }
      },
    );

    test(
      `a fast listing passes over an index.json planted as a FIFO and scans the log (${
        TITLE_LABELS[kind]
      })`,
      async () => {
        const { root, dir, list } = await fixture(kind);
        try {
          await rm(join(dir, "index.json"));
          execFileSync("mkfifo", [join(dir, "index.json")]);
          const result = await list(nodeFs());
          assert.deepEqual(result.failures, []);
          assert.equal(result.sessions[0]?.userMessageCount, 3);
          assert.equal(
            result.sessions[0]?.title?.text,
            kind === "stored" ? "Stored" : "real0 question ✓",
          );
          assert.deepEqual(summary(result), summary(await list(withoutNoFollow(nodeFs()))));
        } finally {
          await rm(root, { recursive: true, force: true });
        }
      },
    );

    test(
      `a fast listing never reads meta.json or the log through a link (${TITLE_LABELS[kind]})`,
      async () => {
        const { root, dir, list } = await fixture(kind);
        try {
          await rename(join(dir, "meta.json"), join(root, "planted-meta.json"));
          await symlink(join(root, "planted-meta.json"), join(dir, "meta.json"));
          const linkedMeta = await list(nodeFs());
          assert.deepEqual(linkedMeta.sessions, []);
          assert.equal(
            (linkedMeta.failures[0]?.error as SessionFormatError).file,
            join(dir, "meta.json"),
          );
          assert.deepEqual(summary(linkedMeta), summary(await list(withoutNoFollow(nodeFs()))));
          await rm(join(dir, "meta.json"));
          await rename(join(root, "planted-meta.json"), join(dir, "meta.json"));
          // A linked log: refused whenever it would be read (a title the index does not record);
          // a stored or recorded title needs no log read with no-follow reads, while a directory
          // listing refuses it anyway.
          await rename(join(dir, "messages.jsonl"), join(root, "planted.jsonl"));
          await symlink(join(root, "planted.jsonl"), join(dir, "messages.jsonl"));
          const linkedLog = await list(nodeFs());
          if (kind !== "derived") {
            assert.deepEqual(linkedLog.failures, []);
            assert.equal(
              linkedLog.sessions[0]?.title?.text,
              kind === "stored" ? "Stored" : "real0 question ✓",
            );
          } else {
            assert.deepEqual(linkedLog.sessions, []);
            assert.equal(
              (linkedLog.failures[0]?.error as SessionFormatError).file,
              join(dir, "messages.jsonl"),
            );
          }
          const listed = await list(withoutNoFollow(nodeFs()));
          assert.deepEqual(listed.sessions, []);
          assert.ok(listed.failures[0]?.error instanceof SessionFormatError);
        } finally {
          await rm(root, { recursive: true, force: true });
        }
      },
    );
  }

  test("a fast listing refuses a log planted as a FIFO when it reads it, without waiting on it", async () => {
    const { root, dir, list } = await fixture("derived");
    try {
      await rm(join(dir, "messages.jsonl"));
      execFileSync("mkfifo", [join(dir, "messages.jsonl")]);
      const result = await list(nodeFs());
      assert.deepEqual(result.sessions, []);
      const error = result.failures[0]?.error as SessionFormatError;
      assert.ok(error instanceof SessionFormatError);
      assert.equal(error.file, join(dir, "messages.jsonl"));
      assert.match(error.message, /not a regular file/);
      assert.deepEqual(summary(result), summary(await list(withoutNoFollow(nodeFs()))));
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  test("a fast listing passes over a large index.json planted as a FIFO or a link", async () => {
    // 1,000 rounds: an index too large to be read whole, so it is opened and read by its head.
    const { root, dir, list } = await fixture("stored", 1000);
    try {
      const index = join(dir, "index.json");
      const expected = summary(await list(nodeFs()));
      assert.deepEqual(expected, {
        sessions: [[dir.split("/").pop(), 1000, "Stored"]],
        failures: [],
      });
      // A link to an index that lies about the counts: never followed, so the log is scanned.
      const lying = new TextDecoder().decode(await nodeFs().readFile(index))
        .replace(/"roundCount":\d+/, '"roundCount":7');
      await rm(index);
      await nodeFs().writeFile(join(root, "planted-index.json"), new TextEncoder().encode(lying));
      await symlink(join(root, "planted-index.json"), index);
      assert.deepEqual(summary(await list(nodeFs())), expected);
      assert.deepEqual(summary(await list(withoutNoFollow(nodeFs()))), expected);
      await rm(index);
      execFileSync("mkfifo", [index]);
      assert.deepEqual(summary(await list(nodeFs())), expected);
      assert.deepEqual(summary(await list(withoutNoFollow(nodeFs()))), expected);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  test("archive.json planted as a FIFO is refused and reported, without waiting on it", async () => {
    const { root, collection, dir, list } = await fixture("stored");
    try {
      const file = join(collection, "archive.json");
      execFileSync("mkfifo", [file]);
      const id = dir.split("/").pop() as string;
      for (const fs of [nodeFs(), withoutNoFollow(nodeFs())]) {
        const store = new SessionStore({
          fs,
          sha256: nodeSha256,
          agentDir: join(root, "agent"),
          sessionDir: collection,
        });
        await assert.rejects(store.archive.isArchived(undefined, id), SessionFormatError);
        const listed = await list(fs);
        assert.deepEqual(listed.sessions.map((s) => s.id), [id]);
        assert.equal((listed.failures[0]?.error as SessionFormatError).file, file);
      }
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  test("a FIFO another process holds open at meta.json or index.json is never waited on", async () => {
    const { root, dir } = await fixture("stored");
    /** Settles `work`, or fails the test after 5 s instead of hanging. */
    const within = <T>(work: Promise<T>, what: string): Promise<T> =>
      Promise.race([
        work,
        new Promise<T>((_, reject) =>
          setTimeout(() => reject(new Error(`${what}: still waiting on the FIFO`)), 5000)
        ),
      ]);
    /** A FIFO at `path` that a writer holds open (so a non-blocking read is busy, not empty). */
    const heldFifo = async (path: string) => {
      await rm(path);
      execFileSync("mkfifo", [path]);
      const holder = spawn("bash", ["-c", `exec 3<>'${path}'; sleep 30`], { stdio: "ignore" });
      await new Promise((resolve) => setTimeout(resolve, 300));
      return holder;
    };
    const store = new SessionStore({
      fs: nodeFs(),
      sha256: nodeSha256,
      agentDir: join(root, "agent"),
    });
    const holders = [];
    try {
      // index.json: derived data, replaced by the writer's page read, which is served.
      holders.push(await heldFifo(join(dir, "index.json")));
      const writer = await within(store.open(dir), "open");
      const page = await within(writer.readHistory(), "page read");
      assert.deepEqual(page.messages, writer.messages); // three rounds: one page
      await writer.close();
      // meta.json: refused by the open, typed, naming the file.
      holders.push(await heldFifo(join(dir, "meta.json")));
      for (const readOnly of [true, false]) {
        await assert.rejects(
          within(store.open(dir, { readOnly }), "open"),
          (error: unknown) =>
            error instanceof SessionFormatError && error.file === join(dir, "meta.json"),
        );
      }
    } finally {
      for (const holder of holders) holder.kill("SIGKILL");
      await rm(root, { recursive: true, force: true });
    }
  });
}
