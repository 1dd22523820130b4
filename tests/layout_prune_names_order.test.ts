// prune-raw's hidden names, report order and leftovers as readers see them: an entry of any legal
// name (up to 255 UTF-8 bytes of 1- to 4-byte characters) moves aside and goes, the report lists
// entries in the planned order, a reference into a raw entry prune keeps is never `pruned`, and a
// `.pruning-*` leftover is gone for a trace located by path.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nodeFs } from "../adapters/node.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  inspectTrace,
  locateTrace,
  LogicalReferenceResolver,
  pruneRaw,
  PRUNING_PREFIX,
  TraceLookupError,
  verifyTrace,
} from "../layout.ts";
import { hookedFs } from "./_hooks.ts";
import { newRepo, newRoot } from "./layout_fixtures.ts";
import {
  buildMirrorTree,
  CHILD_ATTEMPT,
  MIRROR_CHILD_ID,
  MIRROR_ROOT_ID,
  ROOT_ATTEMPTS,
} from "./fixtures/mirror_tree.ts";

const DAY = 86_400_000;
const encoder = new TextEncoder();

function utf8Bytes(text: string): number {
  return encoder.encode(text).length;
}

/**
 * Names of exactly `bytes` UTF-8 bytes made of `char`, padded with ASCII: one starting with the
 * character, and one shifted by two ASCII bytes so a cut falls inside a character.
 */
function namesOf(char: string, bytes: number): string[] {
  const size = utf8Bytes(char);
  const whole = char.repeat(Math.floor(bytes / size)) + "x".repeat(bytes % size);
  const shifted = "ab" + char.repeat(Math.floor((bytes - 2) / size)) +
    "y".repeat((bytes - 2) % size);
  return [whole, shifted];
}

/** Every test name: 1-, 2-, 3- and 4-byte characters, at and around the cut, up to 255 bytes. */
function longNames(): string[] {
  const names = new Set<string>();
  for (const char of ["a", "é", "€", "😀"]) {
    for (const bytes of [200, 237, 238, 240, 253, 254, 255]) {
      for (const name of namesOf(char, bytes)) names.add(name);
    }
  }
  for (const name of names) assert.ok(utf8Bytes(name) <= 255, name);
  return [...names];
}

/** Checks a hidden name the prune renamed `original` to: a recognized, maximal, legal name. */
function checkHiddenName(original: string, hidden: string): void {
  assert.ok(utf8Bytes(hidden) <= 255, `${hidden} is ${utf8Bytes(hidden)} bytes`);
  assert.ok(hidden.startsWith(PRUNING_PREFIX), hidden);
  const match = /^\.pruning-[0-9a-f]{8}-/.exec(hidden);
  assert.ok(match !== null, hidden);
  const kept = hidden.slice(match[0].length);
  assert.ok(original.startsWith(kept), `${kept} is not a prefix of ${original}`);
  assert.ok(!/[\uD800-\uDBFF]$/.test(kept), "cut inside a character");
  if (kept.length < original.length) {
    const next = String.fromCodePoint(original.codePointAt(kept.length) as number);
    assert.ok(utf8Bytes(match[0] + kept + next) > 255, "the kept part is not the longest");
  }
}

/** Writes a text file, creating the directories above it. */
async function writeText(fs: FileSystem, path: string, text: string): Promise<void> {
  await fs.mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
  await fs.writeFile(path, encoder.encode(text));
}

function basename(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** `fs` recording every rename it is asked to make (source, destination). */
function recordingRenames(fs: FileSystem): { fs: FileSystem; renames: [string, string][] } {
  const renames: [string, string][] = [];
  const hooked = hookedFs(fs, {
    before(method, args) {
      if (method === "rename") renames.push([args[0] as string, args[1] as string]);
    },
  });
  return { fs: hooked, renames };
}

async function fillLongNames(
  fs: FileSystem,
  loopy: string,
  names: readonly string[],
): Promise<void> {
  await fs.mkdir(`${loopy}/sessions`, { recursive: true });
  await fs.mkdir(`${loopy}/trace_finalization_outbox`, { recursive: true });
  await fs.mkdir(`${loopy}/traces`, { recursive: true });
  for (const name of names) {
    await fs.writeFile(`${loopy}/trace_finalization_outbox/${name}`, encoder.encode("{}"));
    await fs.mkdir(`${loopy}/traces/${name}`);
    await fs.writeFile(`${loopy}/traces/${name}/trace.txt`, encoder.encode("trace"));
  }
}

test("prune removes entries named in 1- to 4-byte characters, up to 255 bytes", async () => {
  const fs = await newRepo();
  const loopy = "/repo/.loopy_loop";
  const names = longNames();
  await fillLongNames(fs, loopy, names);
  const plan = await pruneRaw(fs, loopy, { legacyTraces: true, dryRun: true });
  assert.equal(plan.count, names.length * 2);
  assert.deepEqual(plan.skipped, []);

  const recording = recordingRenames(fs);
  const done = await pruneRaw(recording.fs, loopy, { legacyTraces: true });
  assert.deepEqual(done.removed, plan.removed);
  assert.deepEqual(done.skipped, plan.skipped);
  assert.equal(done.bytes, plan.bytes);
  assert.deepEqual(await fs.readDir(`${loopy}/trace_finalization_outbox`), []);
  assert.deepEqual(await fs.readDir(`${loopy}/traces`), []);
  assert.equal(recording.renames.length, names.length * 2);
  for (const [from, to] of recording.renames) checkHiddenName(basename(from), basename(to));
  // Nothing is left for a second prune.
  assert.equal((await pruneRaw(fs, loopy, { legacyTraces: true })).count, 0);
});

test("on a real filesystem prune removes entries of 255-byte names in any characters", async () => {
  const dir = await realpath(await mkdtemp(join(tmpdir(), "loop-prune-names-")));
  try {
    const fs = nodeFs();
    const repo = join(dir, "repo");
    const loopy = join(repo, ".loopy_loop");
    const names = ["a", "é", "€", "😀"].flatMap((char) => namesOf(char, 255));
    await fillLongNames(fs, loopy, names);
    const plan = await pruneRaw(fs, loopy, { legacyTraces: true, dryRun: true });
    const recording = recordingRenames(fs);
    const done = await pruneRaw(recording.fs, loopy, { legacyTraces: true });
    assert.equal(done.count, names.length * 2);
    assert.deepEqual(done.removed, plan.removed);
    assert.deepEqual(await fs.readDir(join(loopy, "trace_finalization_outbox")), []);
    assert.deepEqual(await fs.readDir(join(loopy, "traces")), []);
    for (const [from, to] of recording.renames) checkHiddenName(basename(from), basename(to));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

/** traces/A and traces/C (old, removed) around traces/B (recent, kept, holding a leftover). */
async function interleavedTraces(): Promise<{
  fs: FileSystem;
  loopy: string;
  options: Parameters<typeof pruneRaw>[2];
}> {
  const fs = await newRepo();
  const loopy = "/repo/.loopy_loop";
  await fs.mkdir(`${loopy}/sessions`, { recursive: true });
  for (const tree of ["A", "B", "C"]) {
    await writeText(fs, `${loopy}/traces/${tree}/sessions/s1/trace.txt`, tree);
  }
  await fs.mkdir(`${loopy}/traces/B/sessions/${PRUNING_PREFIX}deadbeef-s2`);
  const now = Date.parse("2026-05-01T00:00:00Z");
  await fs.utime(`${loopy}/traces/A`, now - 10 * DAY);
  await fs.utime(`${loopy}/traces/B`, now);
  await fs.utime(`${loopy}/traces/C`, now - 10 * DAY);
  return {
    fs,
    loopy,
    options: { legacyTraces: true, olderThanDays: 1, now: () => new Date(now) },
  };
}

test("prune reports the entries removed in planned order, as a dry run lists them", async () => {
  const { fs, loopy, options } = await interleavedTraces();
  const plan = await pruneRaw(fs, loopy, { ...options, dryRun: true });
  const planned = [
    `${loopy}/traces/A`,
    `${loopy}/traces/B/sessions/${PRUNING_PREFIX}deadbeef-s2`,
    `${loopy}/traces/C`,
  ];
  assert.deepEqual(plan.removed.map((entry) => entry.path), planned);
  const done = await pruneRaw(fs, loopy, options);
  assert.deepEqual(done.removed, plan.removed);
  assert.deepEqual(done.skipped, plan.skipped);
  assert.deepEqual(
    done.skipped.map((skip) => [skip.path, skip.reason]),
    [[`${loopy}/traces/B`, "too_recent"]],
  );
});

test("prune reports entries kept while removing after the plan's, in planned order", async () => {
  const { fs, loopy, options } = await interleavedTraces();
  const plan = await pruneRaw(fs, loopy, { ...options, dryRun: true });
  const leftover = `${loopy}/traces/B/sessions/${PRUNING_PREFIX}deadbeef-s2`;
  // Another prune removes C and the leftover right before this one gets to them.
  const racing = hookedFs(fs, {
    async before(method, args) {
      const path = args[0];
      if (
        (method === "rename" || method === "remove") &&
        (path === leftover || path === `${loopy}/traces/C`)
      ) {
        await fs.remove(path, { recursive: true });
      }
    },
  });
  const done = await pruneRaw(racing, loopy, options);
  assert.deepEqual(done.removed.map((entry) => entry.path), [`${loopy}/traces/A`]);
  assert.deepEqual(done.skipped.slice(0, plan.skipped.length), plan.skipped);
  assert.deepEqual(
    done.skipped.slice(plan.skipped.length).map((skip) => [skip.path, skip.reason]),
    [[leftover, "vanished"], [`${loopy}/traces/C`, "vanished"]],
  );
});

test("an absent target in a raw/ entry prune keeps resolves absent, not pruned", async () => {
  const fs = await newRepo();
  const root = await newRoot(fs);
  await writeText(fs, `${root.dir}/raw/acceptance-audit.md`, "# audit\n");
  await writeText(fs, `${root.dir}/raw/notes/review.md`, "# review\n");
  await writeText(fs, `${root.dir}/raw/0001_outer/eval/report.json`, "{}");
  const report = await pruneRaw(fs, "/repo/.loopy_loop");
  assert.deepEqual(report.removed.map((entry) => entry.path), [`${root.dir}/raw/0001_outer`]);
  assert.deepEqual(
    report.skipped.map((skip) => [skip.path, skip.reason]).sort(),
    [
      [`${root.dir}/raw/acceptance-audit.md`, "unrecognized_name"],
      [`${root.dir}/raw/notes`, "unrecognized_name"],
    ],
  );
  // Someone else (not prune) deletes what prune kept.
  await fs.remove(`${root.dir}/raw/acceptance-audit.md`);
  await fs.remove(`${root.dir}/raw/notes`, { recursive: true });
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: root.sessionId,
  });
  const expected: Record<string, string> = {
    "session:/raw/acceptance-audit.md": "absent",
    "session:/raw/notes/review.md": "absent",
    "session:/raw/notes": "absent",
    "session:/raw/0001_outer/eval/report.json": "pruned",
    "session:/raw/0001_outer": "pruned",
    "session:/raw/0002_outer/eval/report.json": "pruned",
    [`session:/raw/${PRUNING_PREFIX}deadbeef-0001_outer/eval/report.json`]: "pruned",
    [`repo:/.loopy_loop/sessions/${root.sessionId}/raw/notes/review.md`]: "absent",
    [`repo:/.loopy_loop/sessions/${root.sessionId}/raw/0001_outer/eval`]: "pruned",
  };
  for (const [reference, status] of Object.entries(expected)) {
    const resolved = await resolver.resolve(reference);
    assert.deepEqual([resolved.exists, resolved.status], [false, status], reference);
  }
});

async function notFound(run: () => Promise<unknown>, label: string): Promise<void> {
  await assert.rejects(run, (error: unknown) => {
    assert.ok(error instanceof TraceLookupError, `${label}: ${String(error)}`);
    assert.equal(error.reason, "not_found", label);
    return true;
  });
}

test("a trace path through a .pruning-* leftover is not found, as by its id", async () => {
  const fs = await newRepo();
  const tree = await buildMirrorTree(fs);
  const sessionsDir = `${tree.tracesDir}/${MIRROR_ROOT_ID}/sessions`;
  const childLeftover = `${sessionsDir}/${PRUNING_PREFIX}deadbeef-${MIRROR_CHILD_ID}`;
  await fs.rename(`${sessionsDir}/${MIRROR_CHILD_ID}`, childLeftover);
  const childTrace = `${childLeftover}/attempts/${CHILD_ATTEMPT.attemptId}`;
  const references = [
    `trace-${CHILD_ATTEMPT.attemptId}`,
    CHILD_ATTEMPT.attemptId,
    childTrace,
    `${childTrace}/trace_manifest.json`,
    childTrace.slice("/repo/".length),
    childLeftover,
  ];
  for (const reference of references) {
    await notFound(() => locateTrace(fs, tree.loopyRoot, reference), reference);
    await notFound(() => inspectTrace(fs, tree.loopyRoot, reference), reference);
    await notFound(() => verifyTrace(fs, tree.loopyRoot, reference), reference);
  }
  // A whole root tree moved aside, at the top of traces/.
  const rootLeftover = `${tree.tracesDir}/${PRUNING_PREFIX}cafebabe-${MIRROR_ROOT_ID}`;
  await fs.rename(`${tree.tracesDir}/${MIRROR_ROOT_ID}`, rootLeftover);
  const rootTrace = tree.traceDir(ROOT_ATTEMPTS.first.attemptId)
    .replace(`${tree.tracesDir}/${MIRROR_ROOT_ID}/`, `${rootLeftover}/`);
  assert.ok(rootTrace.startsWith(rootLeftover), rootTrace);
  await notFound(() => inspectTrace(fs, tree.loopyRoot, rootTrace), rootTrace);
  await notFound(
    () => inspectTrace(fs, tree.loopyRoot, `trace-${ROOT_ATTEMPTS.first.attemptId}`),
    "root trace by id",
  );
});
