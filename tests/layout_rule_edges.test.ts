// Edges of the folded layout's rules, each at its exact boundary: prune-raw's running-attempt
// guard (at the running iteration, another workflow), its age cutoffs (an entry modified exactly
// at the cutoff goes; a temp leftover exactly an hour old goes; only the library's own temp-file
// shape is ever removed), a re-created events.jsonl's entry made durable again, event
// de-duplication by event_id alone, the slug's 40-character limit, highestOrdinal's `except`, and
// a stored outcome missing a field never taken for the same outcome.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  appendEvents,
  highestOrdinal,
  ImmutableArtifactError,
  LayoutRecordError,
  observeHandoff,
  pruneRaw,
  readEvents,
  scanEvents,
  slugify,
  TEMP_LEFTOVER_AGE_MS,
  updateSessionState,
  writeSessionOutcome,
} from "../layout.ts";
import { commitTerminalState, newRepo, newRoot } from "./layout_fixtures.ts";
import { buildFoldedTree } from "./fixtures/folded_tree.ts";
import { MemoryFs } from "../adapters/memory.ts";

// README: prune-raw never removes "a running (or newer) attempt's output"; prune.ts keeps an
// entry "at or above the iteration of the running attempt". The child runs 0002_leaf: a raw
// directory of the same iteration for another workflow must be kept.
test("a raw entry at the running attempt's iteration (another workflow) is kept", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const sibling = `${tree.child.rawDir}/0002_other`;
  await fs.mkdir(sibling);
  await fs.writeFile(`${sibling}/out.txt`, new TextEncoder().encode("in flight"));
  const report = await pruneRaw(fs, tree.loopyRoot);
  assert.ok(!report.removed.some((e) => e.path === sibling));
  assert.equal(report.skipped.find((s) => s.path === sibling)?.reason, "running_attempt");
  await fs.lstat(`${sibling}/out.txt`);
});

// loopy-layout-rules.md §6: "An entry is kept when its own st_mtime is later than the cutoff".
test("a raw entry modified exactly at the cutoff is pruned", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const now = Date.parse("2026-05-01T00:00:00Z");
  const first = tree.prunable[0] as string;
  for (const dir of tree.prunable) await fs.utime(dir, now);
  await fs.utime(first, now - 2 * 86_400_000);
  const report = await pruneRaw(fs, tree.loopyRoot, { olderThanDays: 2, now: () => new Date(now) });
  assert.deepEqual(report.removed.map((e) => e.path), [first]);
});

// FORMATS.md: a temp file "goes once its modification time is an hour old".
test("a temp leftover exactly an hour old is removed", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const now = Date.parse("2026-05-01T00:00:00Z");
  const temp = `${tree.root.dir}/.state.json.0a1b2c3d2.tmp`;
  await fs.writeFile(temp, new TextEncoder().encode("{}"));
  await fs.utime(temp, now - TEMP_LEFTOVER_AGE_MS);
  const report = await pruneRaw(fs, tree.loopyRoot, { now: () => new Date(now) });
  assert.ok(report.removed.some((e) => e.path === temp && e.kind === "temp_leftover"));
});

// FORMATS.md: only a temp file of exactly the library's shape (8 hex digits + base-36 counter) is
// removed; an agent's/user's other `.tmp` file is never touched.
test("an old dot-file ending .tmp whose random part is not hex is kept", async () => {
  const fs = await newRepo();
  const tree = await buildFoldedTree(fs);
  const now = Date.parse("2026-05-01T00:00:00Z");
  const mine = `${tree.root.dir}/.notes.workfile.tmp`;
  await fs.writeFile(mine, new TextEncoder().encode("my notes"));
  await fs.utime(mine, now - 48 * 3_600_000);
  const report = await pruneRaw(fs, tree.loopyRoot, { now: () => new Date(now) });
  assert.ok(!report.removed.some((e) => e.path === mine));
  assert.equal(new TextDecoder().decode(await fs.readFile(mine)), "my notes");
});

// An events.jsonl removed and created again by a later append in the same process is a new
// directory entry: the resolved append must survive power loss (its directory synced again).
test("an append that re-creates a removed events.jsonl makes its new entry durable", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s");
  fs.syncAll();
  await appendEvents(fs, "/s/events.jsonl", "001_demo", [{ type: "first" }]);
  await fs.remove("/s/events.jsonl");
  await fs.syncDir("/s");
  await appendEvents(fs, "/s/events.jsonl", "001_demo", [{ type: "second" }]);
  const after = fs.crash({ seed: 1, tailMode: "none", extraJournal: "none" });
  assert.deepEqual((await readEvents(after, "/s/events.jsonl")).map((e) => e.type), ["second"]);
});

// A retried append that re-writes the same event later carries the same event_id and a later ts:
// the reader keeps the first record of each event_id whatever its other fields.
test("a duplicate event_id with another timestamp is dropped", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/s");
  const rec = (ts: string) =>
    JSON.stringify({
      event_id: "aaaaaaaaaaaa",
      schema_version: 1,
      ts,
      session_id: "001_demo",
      type: "t",
      payload: {},
    });
  await fs.writeFile(
    "/s/events.jsonl",
    new TextEncoder().encode(`${rec("2026-04-19T14:30:22Z")}\n${rec("2026-04-19T14:30:23Z")}\n`),
  );
  const scan = await scanEvents(fs, "/s/events.jsonl");
  assert.equal(scan.events.length, 1);
  assert.equal(scan.events[0]?.ts, "2026-04-19T14:30:22Z");
  assert.equal(scan.duplicates, 1);
});

// loopy-layout-rules.md §1 step 4: a token is added while the running length stays <= 40.
test("a slug of exactly 40 characters keeps its last word", () => {
  const text = `${"a".repeat(19)} ${"b".repeat(20)}`;
  assert.equal(slugify(text), `${"a".repeat(19)}-${"b".repeat(20)}`);
});

// HighestOrdinalOptions.except: "A reservation name not to count (the caller's own)".
test("highestOrdinal leaves out the excepted reservation", async () => {
  const fs = new MemoryFs();
  const scope = "/repo/.loopy_loop/sessions";
  await fs.mkdir(`${scope}/001_x`, { recursive: true });
  await fs.writeFile(`${scope}/.ordinal-005`, new Uint8Array());
  await fs.writeFile(`${scope}/.ordinal-003`, new Uint8Array());
  assert.equal(await highestOrdinal(fs, scope, { except: ".ordinal-005" }), 3);
  assert.equal(await highestOrdinal(fs, scope), 5);
});

const ROOT_ID = "001_ship-the-ultimate-memory-program";

// session_outcome.json is write-once: a stored outcome that lacks a field the new one has is not
// "the same outcome" (a rerun must not report it as written).
test("a stored outcome missing a field is not taken for the same outcome", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  const paths = root.paths;
  const goal = root.manifest.goal_hash;
  const input = {
    sessionId: ROOT_ID,
    rootSessionId: ROOT_ID,
    goalSha256: goal,
    handoff: await observeHandoff(fs, paths, {
      sessionId: ROOT_ID,
      goalSha256: goal,
      storedRevision: 0,
      storedSha256: null,
    }),
    terminalStatus: "max_turns" as const,
    stopReason: "max_turns",
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:01Z",
  };
  await commitTerminalState(fs, paths.dir, "max_turns", 3, "2026-04-19T15:00:01Z");
  await writeSessionOutcome(fs, paths, input);
  const stored = JSON.parse(new TextDecoder().decode(await fs.readFile(paths.sessionOutcomeJson)));
  delete stored.created_at;
  await fs.writeFile(paths.sessionOutcomeJson, new TextEncoder().encode(JSON.stringify(stored)));
  await assert.rejects(writeSessionOutcome(fs, paths, input), ImmutableArtifactError);
});

test("a refused state change names its field and file once", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await assert.rejects(
    updateSessionState(fs, root.dir, (state) => {
      state.status = 42;
    }, { updatedAt: "2026-04-19T15:00:00Z" }),
    (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, String(error));
      assert.equal(error.path, "status");
      const message = (error as Error).message;
      assert.match(message, /^Refusing to write an invalid state: /);
      assert.equal(message.split(" at status").length, 2, message);
      assert.equal(message.split("(in '").length, 2, message);
      return true;
    },
  );
});
