import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionStore } from "../src/loop/store.ts";
import { InvalidArgumentError, SessionBusyError, SessionFormatError } from "../src/loop/errors.ts";
import { salvageSession, verifySession } from "../src/loop/verify.ts";
import { encodeRoundIndex } from "../src/loop/storage.ts";
import { assistant, conversation, user } from "./_fixtures.ts";
import { gate, hookedFs, linkedBeforeOpen } from "./_hooks.ts";
import { FsIoError, PermissionDenied } from "../src/port/errors.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const options = { sha256: portableSha256 };

async function saved(rounds = 3) {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = conversation(rounds);
  await session.commit(history);
  await session.close();
  return {
    fs,
    store,
    dir: session.getSessionPath(),
    history,
    logPath: `${session.getSessionPath()}/messages.jsonl`,
  };
}

test("verifySession() reports a healthy session as ok with no findings", async () => {
  const { fs, dir, history } = await saved();
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, true);
  assert.deepEqual(report.findings, []);
  assert.equal(report.validMessages, history.length);
});

test("verifySession() never verifies a log swapped for a link after its directory was listed", async () => {
  const { fs, dir, logPath } = await saved();
  // After the directory listing that checked every file's kind, just before the log's open.
  const racing = linkedBeforeOpen(fs, logPath, "/planted.jsonl", "/aside.jsonl");
  const error = await verifySession(racing.fs, dir, options).then(
    (report) => assert.fail(`verified through the link: ${JSON.stringify(report.findings)}`),
    (error: unknown) => error,
  );
  assert.ok(racing.swapped());
  assert.ok(error instanceof SessionFormatError);
  assert.equal(error.file, logPath);
});

test("verifySession() points at the first bad byte and message of a damaged line", async () => {
  const { fs, dir, logPath } = await saved();
  const log = await fs.readFile(logPath);
  const lines = new TextDecoder().decode(log).split("\n");
  const offset = new TextEncoder().encode(lines.slice(0, 2).join("\n") + "\n").length;
  const damaged = log.slice();
  damaged[offset] = 0x7e; // "{" becomes "~": message #2 no longer parses
  await fs.writeFile(logPath, damaged);
  const before = fs.snapshotTree();
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, false);
  const line = report.findings.find((f) => f.kind === "line");
  assert.equal(line?.messageIndex, 2);
  assert.equal(line?.offset, offset);
  assert.ok(report.findings.some((f) => f.kind === "checksum"));
  assert.deepEqual(fs.snapshotTree(), before, "verify modifies nothing");
});

test("verifySession() reports a metadata array of the wrong shape and still verifies the log, as open checks it last", async () => {
  const { fs, dir, logPath, history } = await saved();
  const metaPath = `${dir}/meta.json`;
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(metaPath)));
  meta.header.runtimeContexts = { userTurn: 0 }; // an object where an array belongs
  await fs.writeFile(metaPath, new TextEncoder().encode(`${JSON.stringify(meta)}\n`));
  // The log as committed: every message is counted, the array is the one finding.
  const shapeOnly = await verifySession(fs, dir, options);
  assert.equal(shapeOnly.validMessages, history.length);
  assert.equal(shapeOnly.meta?.messageCount, history.length);
  assert.deepEqual(shapeOnly.findings.map((f) => [f.kind, f.file]), [["metadata", metaPath]]);
  assert.match(shapeOnly.findings[0]?.message ?? "", /header\.runtimeContexts/);
  // And message #2 damaged: the log's findings come first, as open reports them first.
  const log = await fs.readFile(logPath);
  const lines = new TextDecoder().decode(log).split("\n");
  const offset = new TextEncoder().encode(lines.slice(0, 2).join("\n") + "\n").length;
  const damaged = log.slice();
  damaged[offset] = 0x7e;
  await fs.writeFile(logPath, damaged);
  const both = await verifySession(fs, dir, options);
  assert.equal(both.validMessages, 2);
  assert.deepEqual(both.findings.map((f) => f.kind), ["checksum", "line", "metadata"]);
  assert.equal(both.findings[1]?.messageIndex, 2);
});

test("verifySession() reports tool calls unanswered at the end of the history against messages.jsonl and the message, as open does", async () => {
  const { fs, store, dir, history, logPath } = await saved(1);
  // Written by another program: a history whose last assistant's tool call has no result.
  const calling = assistant("calling", [{ id: "c1", name: "read" }]);
  const text = [...history, user("next"), calling].map((m) => JSON.stringify(m) + "\n").join("");
  const bytes = new TextEncoder().encode(text);
  const metaPath = `${dir}/meta.json`;
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(metaPath)));
  const index = history.length + 1;
  Object.assign(meta, {
    generation: await portableSha256().update(bytes).digestHex(),
    start: 0,
    bytes: bytes.length,
    messageCount: history.length + 2,
  });
  await fs.writeFile(logPath, bytes);
  await fs.writeFile(metaPath, new TextEncoder().encode(JSON.stringify(meta) + "\n"));
  await fs.remove(`${dir}/index.json`);
  const opening = await store.open(dir, { readOnly: true }).then(
    () => assert.fail("opened"),
    (error: unknown) => error,
  );
  assert.ok(opening instanceof SessionFormatError);
  assert.equal(opening.file, logPath);
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, false);
  const errors = report.findings.filter((f) => f.severity === "error");
  assert.deepEqual(errors.map((f) => [f.kind, f.file, f.messageIndex]), [["line", logPath, index]]);
  const offset = bytes.length - new TextEncoder().encode(JSON.stringify(calling) + "\n").length;
  assert.equal(errors[0]?.offset, offset);
  assert.match(errors[0]?.message ?? "", /Unfinished tool calls/);
  assert.ok(errors[0]?.message.includes(`messages[${index}]`), errors[0]?.message);
});

test("verifySession() reports a short log, bad meta.json and a missing cwd", async () => {
  const { fs, dir, logPath } = await saved();
  const log = await fs.readFile(logPath);
  await fs.writeFile(logPath, log.subarray(0, log.length - 10));
  let report = await verifySession(fs, dir, options);
  assert.ok(report.findings.some((f) => f.kind === "short-log" && f.offset === log.length - 10));
  await fs.writeFile(logPath, log);
  await fs.remove(CWD);
  report = await verifySession(fs, dir, options);
  assert.deepEqual(report.findings.map((f) => f.kind), ["cwd"]);
  await fs.writeFile(`${dir}/meta.json`, new TextEncoder().encode("{"));
  report = await verifySession(fs, dir, options);
  assert.deepEqual(report.findings.map((f) => f.kind), ["meta"]);
});

test("verifySession() reports a session copied under another id, as open and listing do", async () => {
  const { fs, store, dir } = await saved();
  const other = `${dir.slice(0, dir.lastIndexOf("/"))}/00000000-0000-4000-8000-000000000000`;
  await fs.mkdir(other);
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.writeFile(`${other}/${name}`, await fs.readFile(`${dir}/${name}`));
  }
  await assert.rejects(store.open(other, { readOnly: true }), SessionFormatError);
  const before = fs.snapshotTree();
  const report = await verifySession(fs, other, options);
  assert.equal(report.ok, false);
  assert.deepEqual(
    report.findings.map((f) => [f.kind, f.file]),
    [["meta", `${other}/meta.json`]],
  );
  assert.match(report.findings[0]?.message ?? "", /header\.id/);
  assert.deepEqual(fs.snapshotTree(), before, "verify modifies nothing");
  // A directory not named by a session id (a staged or exported copy) is not held to its name.
  const copy = "/rescue/copy";
  await fs.mkdir(copy, { recursive: true });
  for (const name of ["meta.json", "messages.jsonl", "index.json"]) {
    await fs.writeFile(`${copy}/${name}`, await fs.readFile(`${dir}/${name}`));
  }
  assert.equal((await verifySession(fs, copy, options)).ok, true);
});

test("verifySession() warns about a missing index without failing", async () => {
  const { fs, dir } = await saved();
  await fs.remove(`${dir}/index.json`);
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, true);
  assert.deepEqual(report.findings.map((f) => [f.severity, f.kind]), [["warning", "index"]]);
});

test("salvageSession() exports the longest valid prefix into a new session and keeps the original", async () => {
  const { fs, store, dir, history, logPath } = await saved(4);
  const log = await fs.readFile(logPath);
  const text = new TextDecoder().decode(log);
  // Damage message #5 (inside round 2): the salvaged prefix is rounds 0 and 1, closed.
  const cut = new TextEncoder().encode(text.split("\n").slice(0, 5).join("\n") + "\n").length;
  const damaged = log.slice();
  damaged[cut + 1] = 0x00;
  await fs.writeFile(logPath, damaged);
  const before = fs.snapshotTree(dir);
  const result = await salvageSession(fs, dir, { ...options, toCollection: "/rescue" });
  assert.deepEqual(fs.snapshotTree(dir), before);
  assert.equal(result.kept, 5);
  assert.equal(result.dropped, history.length - 5);
  const rescued = await store.open(result.dir, { readOnly: true });
  assert.deepEqual(rescued.messages, history.slice(0, 5));
  assert.equal((await verifySession(fs, result.dir, options)).ok, true);
  // Its index records the fallback title of what was kept, as a save would.
  const index = JSON.parse(new TextDecoder().decode(await fs.readFile(`${result.dir}/index.json`)));
  assert.deepEqual(index.fallbackTitle, rescued.getHeader().title);
  assert.equal(index.fallbackTitle.source, "fallback");
  await rescued.close();
});

test("a salvage that fails while writing its copy leaves no hidden copy in the destination", async () => {
  const { fs, store, dir } = await saved(3);
  await fs.mkdir("/rescue", { recursive: true });
  // A full disk at each write of the copy in turn (the log, meta.json, index.json) and at its
  // publishing rename.
  let tried = 0;
  for (let n = 1;; n++) {
    // Two copies of the same state take the same steps: one to find the step, one to fail it.
    const probe = fs.clone();
    probe.resetCounter();
    await salvageSession(probe, dir, { ...options, toCollection: "/rescue" });
    const writes = probe.operationLog.filter((op) =>
      op.path.startsWith("/rescue/.staging-") && (op.op === "write" || op.op === "rename")
    );
    const fault = writes[n - 1];
    if (fault === undefined) break;
    const run = fs.clone();
    run.resetCounter();
    run.failAt(fault.number, { error: "ENOSPC", ops: [fault.op] });
    await assert.rejects(
      salvageSession(run, dir, { ...options, toCollection: "/rescue" }),
      (error: unknown) => error instanceof FsIoError && error.code === "ENOSPC",
    );
    run.clearFaults();
    assert.deepEqual(await run.readDir("/rescue"), [], `fault at ${fault.op} ${fault.path}`);
    tried++;
  }
  assert.ok(tried >= 4, `${tried} steps failed`);
  // Once there is room, the same salvage succeeds.
  const result = await store.salvage(dir, "/rescue");
  assert.equal((await verifySession(fs, result.dir, options)).ok, true);
});

test("salvage into a collection that is a link is refused as the store refuses it, writing nothing through it", async () => {
  const { fs, store, dir } = await saved(2);
  await fs.mkdir("/real-rescue", { recursive: true });
  await fs.symlink("/real-rescue", "/rescue");
  for (
    const call of [
      () => salvageSession(fs, dir, { ...options, toCollection: "/rescue" }),
      () => store.salvage(dir, "/rescue"),
    ]
  ) {
    await assert.rejects(call(), (error: unknown) => {
      assert.ok(error instanceof SessionFormatError, String(error));
      assert.equal(error.file, "/rescue");
      assert.match(error.message, /symlinks are refused/);
      return true;
    });
    assert.deepEqual(await fs.readDir("/real-rescue"), []);
  }
});

test("salvageSession() stops before unanswered tool calls and drops metadata past the prefix", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = [user("a"), assistant("b"), user("c"), assistant("d")];
  await session.commit(history, [{ userTurn: 1, content: "ctx", timestamp: 1 }] as never);
  await session.close();
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const log = new TextDecoder().decode(await fs.readFile(logPath));
  const lines = log.split("\n");
  lines[2] = "{broken";
  await fs.writeFile(logPath, new TextEncoder().encode(lines.join("\n")));
  const result = await salvageSession(fs, session.getSessionPath(), {
    ...options,
    toCollection: "/rescue",
  });
  assert.equal(result.kept, 2);
  assert.deepEqual(result.droppedMetadata, ["runtimeContexts"]);
});

test("salvageSession() keeps the metadata entries anchored in the kept messages and drops only those past them", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  const history = [user("a"), assistant("b"), user("c"), assistant("d"), user("e"), assistant("f")];
  const contexts = [0, 1, 2].map((turn) => ({
    userTurn: turn,
    content: `ctx ${turn}`,
    timestamp: 1,
  }));
  const timings = [2, 4].map((index) => ({
    userMessageIndex: index,
    startedAt: index,
    finishedAt: index + 1,
  }));
  await session.commit(history, contexts as never, timings as never);
  await session.close();
  const logPath = `${session.getSessionPath()}/messages.jsonl`;
  const lines = new TextDecoder().decode(await fs.readFile(logPath)).split("\n");
  lines[3] = "{broken"; // the first round and the second user message are the valid prefix
  await fs.writeFile(logPath, new TextEncoder().encode(lines.join("\n")));
  const result = await store.salvage(session.getSessionPath(), "/rescue");
  assert.equal(result.kept, 3);
  assert.deepEqual(result.droppedMetadata, ["runtimeContexts", "promptTimings"]);
  const rescued = await store.open(result.dir, { readOnly: true });
  assert.deepEqual(rescued.getRuntimeContexts(), contexts.slice(0, 2));
  assert.deepEqual(rescued.getPromptTimings(), timings.slice(0, 1));
  await rescued.close();
  // Nothing of them kept: the arrays are left out of the header, as a save leaves empty ones out.
  lines[1] = "{broken";
  await fs.writeFile(logPath, new TextEncoder().encode(lines.join("\n")));
  const first = await store.salvage(session.getSessionPath(), "/rescue");
  assert.equal(first.kept, 1);
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(`${first.dir}/meta.json`)));
  assert.deepEqual(first.droppedMetadata, ["runtimeContexts", "promptTimings"]);
  assert.deepEqual(meta.header.runtimeContexts, [contexts[0]]);
  assert.equal("promptTimings" in meta.header, false);
});

for (const named of ["kept", "not kept"] as const) {
  test(`salvage keeps a stored title whose messages were kept, and drops and lists one naming a message that was not (${named})`, async () => {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT });
    const session = await store.create(CWD);
    await session.commit([user("Fix the build"), assistant("done"), user("And the docs")]);
    const title = {
      text: "Build fixes",
      source: "user",
      messageIndices: [named === "kept" ? 0 : 2],
    };
    await session.setTitle(title as never);
    await session.close();
    const logPath = `${session.getSessionPath()}/messages.jsonl`;
    const text = new TextDecoder().decode(await fs.readFile(logPath));
    // The last line damaged in place: the first round is the valid prefix.
    await fs.writeFile(
      logPath,
      new TextEncoder().encode(text.replace("And the docs", "And the d\u0000cs")),
    );
    const result = await store.salvage(session.getSessionPath(), "/rescue");
    assert.equal(result.kept, 2);
    const rescued = await store.open(result.dir, { readOnly: true });
    if (named === "kept") {
      assert.deepEqual(rescued.getHeader().title, title);
      assert.deepEqual(result.droppedMetadata, []);
    } else {
      assert.equal(rescued.getHeader().title?.source, "fallback");
      assert.deepEqual(result.droppedMetadata, ["title"]);
    }
    await rescued.close();
  });
}

for (const id of ["NOT-A-UUID", "../../escaped", ""]) {
  test(`salvage refuses the id ${JSON.stringify(id)} before anything is written`, async () => {
    const { fs, store, dir } = await saved();
    const before = fs.snapshotTree("/");
    for (
      const run of [
        () => store.salvage(dir, "/rescue", { id }),
        () => salvageSession(fs, dir, { ...options, toCollection: "/rescue", id }),
      ]
    ) {
      await assert.rejects(run(), (error: unknown) => {
        assert.ok(error instanceof InvalidArgumentError, String(error));
        assert.equal(error.argument, "id");
        return true;
      });
    }
    assert.deepEqual(fs.snapshotTree("/"), before);
  });
}

test("salvage into an id that already exists is SessionBusyError and leaves nothing behind", async () => {
  const { fs, store, dir } = await saved();
  const first = await store.salvage(dir, "/rescue");
  const before = fs.snapshotTree("/");
  await assert.rejects(store.salvage(dir, "/rescue", { id: first.id }), SessionBusyError);
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("verifySession() and salvageSession() never read a session file through a link", async () => {
  for (const file of ["meta.json", "messages.jsonl"]) {
    const { fs, dir } = await saved();
    const moved = `/elsewhere/${file}`;
    await fs.mkdir("/elsewhere", { recursive: true });
    await fs.rename(`${dir}/${file}`, moved);
    await fs.symlink(moved, `${dir}/${file}`);
    const before = fs.snapshotTree();
    const report = await verifySession(fs, dir, options);
    assert.equal(report.ok, false, file);
    assert.deepEqual(report.findings.map((f) => [f.severity, f.kind, f.file]), [
      ["error", "file", `${dir}/${file}`],
    ]);
    assert.match(report.findings[0]?.message ?? "", /symlink, not a regular file/);
    await assert.rejects(
      salvageSession(fs, dir, { ...options, toCollection: "/rescue" }),
      (error: Error) =>
        error.name === "SessionFormatError" && error.message.includes(`${dir}/${file}`),
    );
    assert.deepEqual(fs.snapshotTree(), before, "neither modifies anything");
  }
});

test("a linked index.json is a warning: verify checks everything else, salvage ignores it", async () => {
  const { fs, dir, history } = await saved();
  await fs.mkdir("/elsewhere", { recursive: true });
  await fs.rename(`${dir}/index.json`, "/elsewhere/index.json");
  await fs.symlink("/elsewhere/index.json", `${dir}/index.json`);
  // A damaged byte in the log's last message: still found, the link notwithstanding.
  const logPath = `${dir}/messages.jsonl`;
  const log = await fs.readFile(logPath);
  const at = log.length - 5;
  log[at] = log[at] === 0x61 ? 0x62 : 0x61;
  await fs.writeFile(logPath, log);
  fs.resetCounter();
  const report = await verifySession(fs, dir, options);
  assert.equal(report.ok, false);
  const kinds = report.findings.map((f) => [f.severity, f.kind]);
  assert.ok(
    kinds.some(([severity, kind]) => severity === "error" && kind !== "file"),
    String(kinds),
  );
  assert.deepEqual(kinds.filter(([, kind]) => kind === "index"), [["warning", "index"]]);
  assert.ok(
    fs.operationLog.every((r) => !(r.path === `${dir}/index.json` && r.op !== "lstat")),
    "index.json was read through the link",
  );
  fs.resetCounter();
  const result = await salvageSession(fs, dir, { ...options, toCollection: "/rescue" });
  assert.ok(
    fs.operationLog.every((r) => !(r.path === `${dir}/index.json` && r.op !== "lstat")),
    "salvage read index.json (through the link)",
  );
  // Everything before the damaged last message, from the log alone.
  assert.equal(history.length, 8);
  assert.deepEqual([result.kept, result.dropped], [history.length - 1, 1]);
});

test("verifySession() warns about an index whose rounds or recorded title are not the session's", async () => {
  const { fs, store, dir, history } = await saved(3);
  const indexPath = `${dir}/index.json`;
  const original = await fs.readFile(indexPath);
  const index = JSON.parse(new TextDecoder().decode(original));
  const damages: [string, Record<string, unknown>, RegExp][] = [
    [
      "a title of another message",
      { fallbackTitle: { text: "r1 question ✓", source: "fallback", messageIndices: [2] } },
      /records the fallback title/,
    ],
    ["no title where there is one", { fallbackTitle: null }, /records the fallback title/],
    [
      "a round at the wrong offset",
      {
        rounds: [index.rounds[0], {
          ...index.rounds[1],
          byteOffset: index.rounds[1].byteOffset + 1,
        }, index.rounds[2]],
      },
      new RegExp(`does not list user message #${index.rounds[1].messageIndex} `),
    ],
    [
      "a round missing",
      { rounds: index.rounds.slice(0, 2) },
      new RegExp(`does not list user message #${index.rounds[2].messageIndex} `),
    ],
  ];
  for (const [what, change, message] of damages) {
    await fs.writeFile(indexPath, encodeRoundIndex({ ...index, ...change }));
    const report = await verifySession(fs, dir, options);
    assert.equal(report.ok, true, what);
    assert.equal(report.findings.length, 1, what);
    assert.equal(report.findings[0]?.kind, "index", what);
    assert.match(
      report.findings[0]?.message ?? "",
      message,
      `${what}: ${report.findings[0]?.message}`,
    );
  }
  // Removed as the warning says, the index is rebuilt by the next page read, and agrees.
  await fs.remove(indexPath);
  const writer = await store.open(dir);
  await writer.readHistory();
  await writer.close();
  assert.deepEqual(await fs.readFile(indexPath), original);
  assert.deepEqual((await verifySession(fs, dir, options)).findings, []);
  // An index that covers a prefix of the committed range (as one lagging a few rounds behind
  // the saves does) agrees too.
  const appender = await store.open(dir);
  await appender.commit([...history, user("one more"), assistant("ok")]);
  await appender.close();
  await fs.writeFile(indexPath, original);
  assert.deepEqual((await verifySession(fs, dir, options)).findings, []);
});

test("verifySession() reads lines longer than its reads: every message, and the right bad line", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(CWD);
  // Message #1 spans three 4 MiB reads; the others are short, before and after it.
  const history = [
    user("q"),
    assistant("x".repeat(9 * 1024 * 1024)),
    user("again"),
    assistant("a"),
  ];
  await session.commit(history);
  await session.close();
  const dir = session.getSessionPath();
  const logPath = `${dir}/messages.jsonl`;
  let report = await verifySession(fs, dir, options);
  assert.deepEqual(report.findings, []);
  assert.equal(report.validMessages, history.length);
  // A byte of the long line damaged in its third read: the finding points at the line's start.
  const log = await fs.readFile(logPath);
  const text = new TextDecoder().decode(log);
  const start = new TextEncoder().encode(text.slice(0, text.indexOf("\n") + 1)).length;
  const damaged = log.slice();
  damaged[start + 8 * 1024 * 1024 + 17] = 0x22; // a quote inside the text: no longer JSON
  await fs.writeFile(logPath, damaged);
  report = await verifySession(fs, dir, options);
  const line = report.findings.find((f) => f.kind === "line");
  assert.equal(line?.messageIndex, 1);
  assert.equal(line?.offset, start);
  assert.equal(report.validMessages, 1);
});

test("SessionStore.salvage builds under the target collection's lock: a cleanup meanwhile waits", async () => {
  const { fs, dir } = await saved();
  const target = "/rescued";
  await fs.mkdir(target, { recursive: true });
  const building = gate();
  const resume = gate();
  let paused = false;
  const hooked = hookedFs(fs, {
    async before(method, args) {
      // Halfway: the staging directory exists and holds the log, meta.json is next.
      if (
        !paused && method === "open" && /\/\.staging-[^/]+\/\.meta\.json\./.test(String(args[0]))
      ) {
        paused = true;
        building.open();
        await resume.wait;
      }
    },
  });
  const store = new SessionStore({ fs: hooked, agentDir: AGENT, sessionDir: target });
  const salvaging = store.salvage(dir, target);
  await building.wait;
  let cleaned = false;
  const cleanup = store.cleanup(undefined, target).then((report) => {
    cleaned = true;
    return report;
  });
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(cleaned, false, "the cleanup ran while the salvage was building");
  resume.open();
  const result = await salvaging;
  const report = await cleanup;
  assert.deepEqual(report.removed, []);
  const reopened = await store.open(result.dir, { readOnly: true });
  assert.equal(reopened.messages.length, result.kept);
  await reopened.close();
});

test("salvage refuses an id its destination uses in any form (a legacy file, a link, a staging or delete directory), writing nothing", async () => {
  const id = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
  const legacy = new TextEncoder().encode(
    [
      {
        format: "loop-session",
        version: 2,
        id,
        cwd: CWD,
        createdAt: "2025-06-01T10:00:00.000Z",
        updatedAt: "2025-06-01T10:00:00.000Z",
        permissionPreset: "read-only",
      },
      user("the legacy session's only copy"),
    ].map((record) => JSON.stringify(record)).join("\n") + "\n",
  );
  const forms: [string, (fs: MemoryFs) => Promise<string>][] = [
    ["a legacy session file", async (fs) => {
      await fs.writeFile(`/rescue/${id}.jsonl`, legacy);
      return `/rescue/${id}.jsonl`;
    }],
    ["a link named like a legacy file", async (fs) => {
      await fs.symlink("/nowhere", `/rescue/${id}.jsonl`);
      return `/rescue/${id}.jsonl`;
    }],
    ["a dangling link at its name", async (fs) => {
      await fs.symlink("/nowhere", `/rescue/${id}`);
      return `/rescue/${id}`;
    }],
    ["a migration's staging directory", async (fs) => {
      await fs.mkdir(`/rescue/.staging-${id}-abcdef12`);
      return `/rescue/.staging-${id}-abcdef12`;
    }],
    ["an uncommitted delete that staged its legacy file", async (fs) => {
      const deleting = "/rescue/.delete-00000000-0000-4000-8000-000000000000";
      await fs.mkdir(deleting);
      await fs.writeFile(
        `${deleting}/intent.json`,
        new TextEncoder().encode(
          JSON.stringify({
            operation: "delete",
            ids: [id],
            entries: [`${id}.jsonl`],
            archived: [],
            membersBefore: [],
          }) + "\n",
        ),
      );
      await fs.writeFile(`${deleting}/${id}.jsonl`, legacy);
      return deleting;
    }],
  ];
  for (const [form, plant] of forms) {
    const { fs, store, dir } = await saved();
    await fs.mkdir("/rescue", { mode: 0o700 });
    const file = await plant(fs);
    const before = fs.snapshotTree("/");
    await assert.rejects(
      salvageSession(fs, dir, { ...options, toCollection: "/rescue", id }),
      (error: unknown) => {
        assert.ok(error instanceof SessionBusyError, `${form}: ${error}`);
        assert.equal(error.file, file, form);
        return true;
      },
    );
    assert.deepEqual(fs.snapshotTree("/"), before, form);
    if (form === "a legacy session file") {
      // The store's salvage too: under the lock, after its recovery, the file is still there.
      await assert.rejects(store.salvage(dir, "/rescue", { id }), SessionBusyError);
      assert.deepEqual(fs.snapshotTree("/"), before, form);
    }
  }
});

test("verifySession() reports an index.json it cannot read and a cwd it cannot check, and goes on to the log", async () => {
  for (const damage of ["index.json unreadable", "cwd denied"] as const) {
    const { fs, dir, logPath } = await saved();
    // The log is damaged too: its findings must still be reported.
    const log = await fs.readFile(logPath);
    log[log.indexOf(10) + 1] = 0x21;
    await fs.writeFile(logPath, log);
    let port: typeof fs | ReturnType<typeof hookedFs> = fs;
    if (damage === "index.json unreadable") {
      const index = `${dir}/index.json`;
      port = hookedFs(fs, {
        before(method, args) {
          if (args[0] === index && /^(open|read)/.test(method)) {
            throw new PermissionDenied(method, index);
          }
        },
      });
    } else {
      // A cwd whose stat fails with a storage error (a path that cannot exist, too long or with
      // a NUL byte, is gone instead).
      const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(`${dir}/meta.json`)));
      const cwd = meta.header.cwd;
      port = hookedFs(fs, {
        before(method, args) {
          if (args[0] === cwd && method === "stat") throw new PermissionDenied(method, cwd);
        },
      });
    }
    const report = await verifySession(port, dir, options);
    assert.equal(report.ok, false, damage);
    const kinds = report.findings.map((f) => `${f.severity} ${f.kind} ${f.file}`);
    if (damage === "index.json unreadable") {
      assert.ok(kinds.includes(`warning index ${dir}/index.json`), JSON.stringify(kinds));
    } else {
      const cwd = report.findings.find((f) => f.kind === "cwd");
      assert.equal(cwd?.severity, "error", JSON.stringify(kinds));
      assert.match(cwd?.message ?? "", /cwd cannot be checked/);
    }
    assert.ok(
      report.findings.some((f) => f.severity === "error" && f.file === logPath),
      `${damage}: ${JSON.stringify(kinds)}`,
    );
  }
});

test("salvageSession() copies each kept line of a session directory as it is, not re-serialized", async () => {
  const { fs, dir, logPath } = await saved(2);
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  // A line another writer (a migration keeps a legacy line's bytes) wrote in its own form: a
  // number JSON cannot hold exactly, a trailing zero, an escape, spacing. Its open reads it as is.
  const lines = decoder.decode(await fs.readFile(logPath)).split("\n");
  lines[1] = lines[1]!.replace(
    /^\{/,
    '{"n": 12345678901234567890, "y": 1.50, "z": "\\u00e9", ',
  );
  // Then a torn line: salvage keeps the lines before it.
  const kept = lines.slice(0, 2).join("\n") + "\n";
  const log = encoder.encode(kept + lines.slice(2).join("\n").slice(0, 40));
  await fs.writeFile(logPath, log);
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  meta.bytes = log.length;
  meta.generation = portableSha256().update(log).digestHex();
  await fs.writeFile(`${dir}/meta.json`, encoder.encode(JSON.stringify(meta)));
  const result = await salvageSession(fs, dir, { ...options, toCollection: "/rescue" });
  assert.equal(result.kept, 2);
  assert.equal(decoder.decode(await fs.readFile(`${result.dir}/messages.jsonl`)), kept);
  const report = await verifySession(fs, result.dir, options);
  assert.deepEqual(report.findings, []);
});

test("verifySession() and salvageSession() read again a session compacted between their reads of meta.json and the log", async () => {
  const { fs, store, dir, history } = await saved(3);
  for (const what of ["verify", "salvage"] as const) {
    // A replacement generation: the log holds bytes before the committed range to compact away.
    const writer = await store.open(dir);
    await writer.commit([user(`edited for ${what}`), ...history.slice(1)]);
    await writer.close();
    const paused = gate();
    const resume = gate();
    let armed = true;
    const racing = hookedFs(fs, {
      async after(method, args) {
        if (armed && /^readFile/.test(method) && args[0] === `${dir}/meta.json`) {
          armed = false;
          paused.open();
          await resume.wait;
        }
      },
    });
    const running = what === "verify"
      ? verifySession(racing, dir, options)
      : salvageSession(racing, dir, { ...options, toCollection: "/rescue" });
    await paused.wait;
    // Another store (another process: its own collection lock) compacts the session meanwhile.
    const compacted = await new SessionStore({ fs, agentDir: AGENT }).compact(dir);
    assert.equal(compacted.compacted, true);
    resume.open();
    const result = await running;
    if ("findings" in result) {
      assert.deepEqual(result.findings, [], what);
      assert.equal(result.validMessages, history.length);
    } else {
      assert.equal(result.kept, history.length, what);
      assert.equal(result.dropped, 0, what);
    }
  }
});

test("salvageSession() of a directory drops metadata arrays that are invalid in themselves, as for a legacy file", async () => {
  const { fs, dir, history } = await saved(2);
  const decoder = new TextDecoder();
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  meta.header.promptTimings = [{ userMessageIndex: 0, startedAt: "x", finishedAt: 1 }];
  meta.header.compactions = "zzz";
  await fs.writeFile(`${dir}/meta.json`, new TextEncoder().encode(JSON.stringify(meta)));
  const before = fs.snapshotTree(dir);
  const result = await salvageSession(fs, dir, { ...options, toCollection: "/rescue" });
  assert.equal(result.kept, history.length);
  assert.deepEqual([...result.droppedMetadata].sort(), ["compactions", "promptTimings"]);
  assert.deepEqual((await verifySession(fs, result.dir, options)).findings, []);
  assert.deepEqual(fs.snapshotTree(dir), before, "the source is only read");
});

test("verifySession() and salvageSession() read again a session whose directory a compaction had moved aside for a moment", async () => {
  for (const what of ["verify", "salvage"] as const) {
    const { fs, dir, history } = await saved(3);
    const writer = await new SessionStore({ fs, agentDir: AGENT }).open(dir);
    await writer.commit([user(`edited for ${what}`), ...history.slice(1)]);
    await writer.close();
    // The compaction pauses between its two renames: no directory is at the session's name.
    const betweenRenames = gate();
    const resumeCompaction = gate();
    const compactFs = hookedFs(fs, {
      async after(method, args) {
        if (method === "rename" && args[0] === dir) {
          betweenRenames.open();
          await resumeCompaction.wait;
        }
      },
    });
    let compacting: Promise<unknown> | undefined;
    let metaReads = 0;
    const readerFs = hookedFs(fs, {
      async before(method, args) {
        if (!/^readFile/.test(method) || args[0] !== `${dir}/meta.json`) return;
        metaReads++;
        // After the first read of meta.json the compaction starts and stops between its renames:
        // the reader's second look finds no meta.json; by its third the compaction has finished
        // (as it would in its own process).
        if (metaReads === 3) {
          resumeCompaction.open();
          await compacting;
        }
      },
      async after(method, args) {
        if (metaReads !== 1 || !/^readFile/.test(method) || args[0] !== `${dir}/meta.json`) return;
        if (compacting !== undefined) return;
        compacting = new SessionStore({ fs: compactFs, agentDir: AGENT }).compact(dir);
        await betweenRenames.wait;
      },
    });
    const result = what === "verify"
      ? await verifySession(readerFs, dir, options)
      : await salvageSession(readerFs, dir, { ...options, toCollection: "/rescue" });
    await compacting;
    if ("findings" in result) assert.deepEqual(result.findings, [], what);
    else assert.equal(result.kept, history.length, what);
  }
});
