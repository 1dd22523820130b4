import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { appendEvents, LayoutRecordError, readEvents, scanEvents } from "../layout.ts";
import { deterministic } from "./layout_fixtures.ts";
import { hookedFs } from "./_hooks.ts";
import { seedsAfter } from "./_soak.ts";

const FILE = "/s/events.jsonl";
const encoder = new TextEncoder();

function line(eventId: string, type = "task_dispatched"): string {
  return JSON.stringify({
    event_id: eventId,
    schema_version: 1,
    ts: "2026-04-19T14:30:22Z",
    session_id: "001_demo",
    type,
    payload: { n: eventId },
  });
}

async function fsWith(content: Uint8Array | string): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir("/s");
  await fs.writeFile(FILE, typeof content === "string" ? encoder.encode(content) : content);
  return fs;
}

test("appendEvents writes one compact record per line sharing the batch timestamp", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s");
  const written = await appendEvents(fs, FILE, "001_demo", [
    { type: "session_started" },
    { type: "task_dispatched", payload: { workflow_id: "outer" } },
  ], deterministic());
  const text = new TextDecoder().decode(await fs.readFile(FILE));
  const lines = text.split("\n");
  assert.equal(lines.length, 3);
  assert.equal(lines[2], "");
  assert.deepEqual(lines.slice(0, 2).map((l) => JSON.parse(l)), written);
  assert.equal(written[0]?.ts, "2026-04-19T14:30:22Z");
  assert.equal(written[1]?.ts, written[0]?.ts);
  assert.match(written[0]?.event_id ?? "", /^[0-9a-f]{12}$/);
  assert.notEqual(written[0]?.event_id, written[1]?.event_id);
  assert.deepEqual(await readEvents(fs, FILE), written);
});

test("every appended event is synced before the next one is written", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s");
  fs.syncAll();
  await appendEvents(fs, FILE, "001_demo", [{ type: "a" }, { type: "b" }], deterministic());
  const syncs = fs.operationLog.filter((op) => op.op === "sync").length;
  assert.equal(syncs, 2);
  const recovered = fs.crash({ seed: 1, tailMode: "none", extraJournal: "none" });
  assert.deepEqual((await readEvents(recovered, FILE)).map((e) => e.type), ["a", "b"]);
});

test("readEvents drops duplicates by event_id, keeping the first", async () => {
  const fs = await fsWith(
    `${line("aaaaaaaaaaaa")}\n${line("bbbbbbbbbbbb")}\n${line("aaaaaaaaaaaa", "other")}\n`,
  );
  const scan = await scanEvents(fs, FILE);
  assert.deepEqual(scan.events.map((e) => [e.event_id, e.type]), [
    ["aaaaaaaaaaaa", "task_dispatched"],
    ["bbbbbbbbbbbb", "task_dispatched"],
  ]);
  assert.equal(scan.duplicates, 1);
});

test("readEvents tolerates a truncated last line, garbage, zeros and blank lines", async () => {
  const torn = line("cccccccccccc").slice(0, 30);
  const content = new Uint8Array([
    ...encoder.encode(`${line("aaaaaaaaaaaa")}\n\n   \n{"not":"an event"}\n[1,2]\n`),
    0xff,
    0xfe,
    0x0a,
    0,
    0,
    0,
    0x0a,
    ...encoder.encode(`${line("bbbbbbbbbbbb")}\n${torn}`),
  ]);
  const fs = await fsWith(content);
  const scan = await scanEvents(fs, FILE);
  assert.deepEqual(scan.events.map((e) => e.event_id), ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]);
  assert.deepEqual(scan.skipped.map((s) => s.line), [3, 4, 5, 6, 7, 9]);
  assert.equal(scan.skipped.at(-1)?.reason, "torn last line");
  // Reading modifies nothing.
  assert.deepEqual(await fs.readFile(FILE), content);
});

test("a line is blank as Python's str.strip() judges it", async () => {
  const fs = await fsWith(`${line("aaaaaaaaaaaa")}\n\u0085\u001f\n`);
  const scan = await scanEvents(fs, FILE);
  assert.deepEqual(scan.events.map((e) => e.event_id), ["aaaaaaaaaaaa"]);
  assert.deepEqual(scan.skipped, [{ line: 2, reason: "blank" }]);
});

test("readEvents tolerates gaps and a missing file", async () => {
  const fs = await fsWith(`${line("000000000003")}\n${line("000000000001")}\n`);
  assert.equal((await readEvents(fs, FILE)).length, 2);
  assert.deepEqual(await readEvents(new MemoryFs(), "/missing/events.jsonl"), []);
});

test("a line with a record of the wrong shape is skipped with its reason", async () => {
  const bad = JSON.stringify({ ...JSON.parse(line("dddddddddddd")), session_id: "not an id" });
  const fs = await fsWith(`${bad}\n`);
  const scan = await scanEvents(fs, FILE);
  assert.equal(scan.events.length, 0);
  assert.match(scan.skipped[0]?.reason ?? "", /session_id/);
});

test("an event appended after a crash tore the last line is read back, in every tail mode", async () => {
  // One id sequence for every append: each event gets its own event_id.
  const options = deterministic();
  const base = new MemoryFs();
  await base.mkdir("/s");
  await appendEvents(base, FILE, "001_demo", [{ type: "first" }], options);
  base.syncAll();
  // The operation number of the second append's write, found on a dry run.
  const dry = base.clone();
  const before = dry.operationLog.length;
  await appendEvents(dry, FILE, "001_demo", [{ type: "torn" }], options);
  const write = dry.operationLog.slice(before).find((o) => o.op === "write");
  assert.ok(write !== undefined);
  for (const tailMode of ["short", "zeros", "garbage", "whole"] as const) {
    for (const seed of seedsAfter([1, 2, 3])) {
      const fs = base.clone();
      fs.crashAfter(write.number); // written, not fsynced
      await appendEvents(fs, FILE, "001_demo", [{ type: "torn" }], options).catch(() => {});
      const recovered = fs.crash({ seed, tailMode });
      await appendEvents(recovered, FILE, "001_demo", [{ type: "after" }], options);
      const types = (await readEvents(recovered, FILE)).map((e) => e.type);
      assert.equal(types[0], "first", `${tailMode}/${seed}`);
      assert.equal(types.at(-1), "after", `${tailMode}/${seed}: ${JSON.stringify(types)}`);
      // Nothing was removed: the torn bytes are still there, on a line of their own.
      const text = new TextDecoder().decode(await recovered.readFile(FILE));
      assert.ok(text.endsWith("\n"), `${tailMode}/${seed}`);
    }
  }
});

test("an append to a file whose last line is complete adds no blank line", async () => {
  const fs = await fsWith(`${line("aaaaaaaaaaaa")}\n`);
  await appendEvents(fs, FILE, "001_demo", [{ type: "next" }], deterministic());
  const lines = new TextDecoder().decode(await fs.readFile(FILE)).split("\n");
  assert.equal(lines.length, 3); // two records and the empty string after the last newline
  assert.equal(lines[2], "");
  assert.ok(lines.every((l, i) => i === 2 || l.length > 0));
});

test("an append after one whose new file's directory fsync failed makes the file durable", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s", { mode: 0o700 }); // private already: the only directory fsync is the entry's
  fs.syncAll();
  const options = deterministic();
  // The first append creates events.jsonl; its directory fsync fails once.
  fs.failAt(fs.operationCount + 1, { ops: ["syncDir"] });
  await assert.rejects(appendEvents(fs, FILE, "001_demo", [{ type: "first" }], options));
  fs.clearFaults();
  await appendEvents(fs, FILE, "001_demo", [{ type: "second" }], options);
  // A power loss keeps what was fsynced: both records (the file's entry too).
  const after = fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
  assert.deepEqual((await readEvents(after, FILE)).map((e) => e.type), ["first", "second"]);
});

test("a created events file whose write, sync or close failed is made durable by the next append", async () => {
  for (const op of ["write", "sync", "close"] as const) {
    const fs = new MemoryFs();
    await fs.mkdir("/s", { mode: 0o700 });
    fs.syncAll();
    const options = deterministic();
    fs.failAt(fs.operationCount + 1, { ops: [op] });
    await assert.rejects(appendEvents(fs, FILE, "001_demo", [{ type: "first" }], options), op);
    fs.clearFaults();
    await appendEvents(fs, FILE, "001_demo", [{ type: "second" }], options);
    const after = fs.crash({ seed: 1, tailMode: "none", extraJournal: "none" });
    const types = (await readEvents(after, FILE)).map((e) => e.type);
    assert.ok(types.includes("second"), `${op}: the resolved append was lost`);
  }
});

test("appends to an existing events.jsonl sync its directory once per process, not per append", async () => {
  const memory = new MemoryFs();
  const dir = "/repo/.loopy_loop/sessions/001_demo";
  await memory.mkdir(dir, { recursive: true });
  await memory.chmod(dir, 0o700);
  await memory.writeFile(`${dir}/events.jsonl`, encoder.encode(`${line("a")}\n`), { mode: 0o600 });
  memory.syncAll();
  const synced: string[] = [];
  const fs = hookedFs(memory, {
    before: (method, args) => {
      if (method === "syncDir") synced.push(args[0] as string);
    },
  });
  for (let i = 0; i < 10; i++) {
    await appendEvents(fs, `${dir}/events.jsonl`, "001_demo", [{ type: "tick" }]);
  }
  // The first append of this process makes the file's entry durable, and those of the
  // directories holding it up to .loopy_loop's own (another process may have made them and died
  // before syncing their parents); the others need not.
  assert.deepEqual(synced, ["/repo", "/repo/.loopy_loop", "/repo/.loopy_loop/sessions", dir]);
  assert.equal((await readEvents(memory, `${dir}/events.jsonl`)).length, 11);
});

test("concurrent appends, one failing part way: the one that resolved is read back", async () => {
  // The failing append's torn bytes stay a line of their own, whichever append ran first: the
  // two are serialized, so the other never glues its record onto them.
  for (const op of ["write", "sync"] as const) {
    const options = deterministic();
    const fs = new MemoryFs();
    await fs.mkdir("/s", { mode: 0o700 });
    await appendEvents(fs, FILE, "001_demo", [{ type: "first" }], options);
    fs.syncAll();
    // The next handle write (or sync) fails: the first append's, 10 bytes of it landed.
    fs.failAt(fs.operationCount + 1, { ops: [op], landed: 10 });
    const [a, b] = await Promise.allSettled([
      appendEvents(fs, FILE, "001_demo", [{ type: "A" }], options),
      appendEvents(fs, FILE, "001_demo", [{ type: "B" }], options),
    ]);
    fs.clearFaults();
    assert.equal(a.status, "rejected", op);
    assert.equal(b.status, "fulfilled", op);
    // A failed sync is followed by a power loss: what was fsynced stays.
    const target = op === "write"
      ? fs
      : fs.crash({ seed: 0, tailMode: "none", extraJournal: "none" });
    const types = (await readEvents(target, FILE)).map((e) => e.type);
    assert.deepEqual(types, ["first", "B"], op);
  }
});

test("event lines are the engine's bytes: every non-ASCII character escaped", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s");
  const payload = {
    summary: "line one\u2028line two",
    note: "next\u0085line",
    para: "a\u2029b",
    accent: "\u00e9",
    emoji: "\u{1F600}",
    del: "\u007f",
    ctrl: "\u0001\t",
  };
  const [written] = await appendEvents(
    fs,
    FILE,
    "001_demo",
    [{ type: "task_finished", payload }],
    deterministic(),
  );
  const bytes = await fs.readFile(FILE);
  // `json.dumps(record, separators=(",", ":"))` of the engine (Python), byte for byte.
  const engine = '{"event_id":"000000000001","schema_version":1,"ts":"2026-04-19T14:30:22Z",' +
    '"session_id":"001_demo","type":"task_finished","payload":{"summary":"line one\\u2028line ' +
    'two","note":"next\\u0085line","para":"a\\u2029b","accent":"\\u00e9","emoji":' +
    '"\\ud83d\\ude00","del":"\\u007f","ctrl":"\\u0001\\t"}}\n';
  assert.deepEqual(bytes, encoder.encode(engine));
  assert.ok(bytes.every((byte) => byte < 0x80), "every byte is ASCII");
  // Python's str.splitlines (the engine's reader) finds the one line.
  // deno-lint-ignore no-control-regex -- Python's line boundaries include these controls
  const lines = new TextDecoder().decode(bytes).split(/\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]/);
  assert.deepEqual(lines, [engine.slice(0, -1), ""]);
  assert.deepEqual(await readEvents(fs, FILE), [written]);
  assert.deepEqual(written?.payload, payload);
});

test("a directory at events.jsonl is refused by name, before anything is written", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(FILE, { recursive: true });
  for (
    const call of [
      () => appendEvents(fs, FILE, "001_demo", [{ type: "x" }], deterministic()),
      () => scanEvents(fs, FILE),
    ]
  ) {
    await assert.rejects(call(), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.file, FILE);
      assert.match(error.message, /not a regular file \(a directory\)/);
      return true;
    });
  }
  assert.deepEqual(await fs.readDir(FILE), []);
});
