import { test } from "node:test";
import assert from "node:assert/strict";
import * as v from "valibot";
import {
  CompactionCheckpointSchema,
  type MessageRole,
  PromptTimingSchema,
  RuntimeContextSnapshotSchema,
  SystemPromptCheckpointSchema,
  validateCompactions,
  validatePromptTimings,
  validateRuntimeContexts,
  validateSystemPromptCheckpoints,
} from "../src/loop/records/mod.ts";
import { CHECKPOINT_ID, throwsAt } from "./loop_records_fixtures.ts";

// user, assistant, toolResult, assistant, user, assistant, user, assistant
const ROLES: MessageRole[] = [
  "user",
  "assistant",
  "toolResult",
  "assistant",
  "user",
  "assistant",
  "user",
  "assistant",
];

function timing(u: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { userMessageIndex: u, startedAt: 100, finishedAt: 200, ...extra };
}

function attempt(
  u: number,
  id: string,
  start: number,
  end: number,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return timing(u, { id, messageStartIndex: start, messageEndIndex: end, ...extra });
}

const timings = (value: unknown, roles: readonly MessageRole[] | null = ROLES) =>
  validatePromptTimings(value, roles ?? undefined);

// ---------------------------------------------------------------- prompt timings

test("prompt timings may be absent but not a non-array", () => {
  timings(undefined);
  timings([]);
  throwsAt(() => timings({}), "header.promptTimings");
  throwsAt(() => timings([null]), "header.promptTimings[0]");
});

test("legacy timings strictly increase by user message index", () => {
  timings([timing(0), timing(4), timing(6)]);
  throwsAt(() => timings([timing(4), timing(4)]), "header.promptTimings[1].userMessageIndex");
  throwsAt(() => timings([timing(4), timing(0)]), "header.promptTimings[1].userMessageIndex");
  throwsAt(() => timings([timing(-1)]), "header.promptTimings[0].userMessageIndex");
  throwsAt(() => timings([timing(0.5)]), "header.promptTimings[0].userMessageIndex");
});

test("a timing must name a user message of the history", () => {
  throwsAt(() => timings([timing(1)]), "header.promptTimings[0].userMessageIndex");
  throwsAt(() => timings([timing(8)]), "header.promptTimings[0].userMessageIndex");
  timings([timing(8)], null);
});

test("startedAt is a safe integer of 0 or more and finishedAt is required and not earlier", () => {
  timings([timing(0, { startedAt: 0, finishedAt: 0 })]);
  throwsAt(() => timings([timing(0, { startedAt: -1 })]), "header.promptTimings[0].startedAt");
  throwsAt(() => timings([timing(0, { startedAt: 1.5 })]), "header.promptTimings[0].startedAt");
  throwsAt(() => timings([timing(0, { startedAt: "1" })]), "header.promptTimings[0].startedAt");
  throwsAt(
    () => timings([timing(0, { startedAt: Number.MAX_SAFE_INTEGER + 1 })]),
    "header.promptTimings[0].startedAt",
  );
  throwsAt(
    () => timings([timing(0, { finishedAt: undefined })]),
    "header.promptTimings[0].finishedAt",
  );
  const error = throwsAt(
    () => timings([timing(0), timing(4, { startedAt: 300, finishedAt: 299 })]),
    "header.promptTimings[1].finishedAt",
  );
  assert.match(error.message, /finishedAt must not be before startedAt/);
  assert.equal(error.value, 299);
});

test("attempt records carry an id and a half-open message range", () => {
  timings([
    attempt(0, "a1", 0, 4),
    attempt(4, "a2", 4, 6, { stopped: true }),
    attempt(6, "a3", 6, 8),
  ]);
  timings([attempt(0, "a1", 1, 4)]);
  throwsAt(() => timings([attempt(0, "", 0, 4)]), "header.promptTimings[0].id");
  throwsAt(() => timings([attempt(0, 7 as never, 0, 4)]), "header.promptTimings[0].id");
  throwsAt(
    () => timings([attempt(0, "a", 0, 4, { stopped: "yes" })]),
    "header.promptTimings[0].stopped",
  );
});

test("resumed attempts may share a user message index", () => {
  timings([
    attempt(0, "a1", 0, 2, { stopped: true }),
    attempt(0, "a2", 2, 4),
    attempt(4, "b", 4, 6),
  ]);
  throwsAt(
    () => timings([attempt(4, "a1", 4, 5), attempt(0, "a2", 5, 6)]),
    "header.promptTimings[1].userMessageIndex",
  );
});

test("an attempt that produced no message has an empty range", () => {
  timings([attempt(0, "a1", 0, 4, { stopped: true }), attempt(0, "a2", 4, 4, { stopped: true })]);
});

test("an attempt range may hold user messages steered in while it ran", () => {
  timings([attempt(0, "a1", 0, 8)]);
});

test("legacy and attempt records never share an index", () => {
  timings([timing(0), attempt(4, "a", 4, 6), timing(6)]);
  throwsAt(
    () => timings([timing(0), attempt(0, "a", 0, 2)]),
    "header.promptTimings[1].userMessageIndex",
  );
  throwsAt(
    () => timings([attempt(0, "a", 0, 2), timing(0)]),
    "header.promptTimings[1].userMessageIndex",
  );
});

test("id and both range indices come together, and stopped only with them", () => {
  throwsAt(() => timings([timing(0, { id: "a" })]), "header.promptTimings[0].messageStartIndex");
  throwsAt(
    () => timings([timing(0, { id: "a", messageStartIndex: 0 })]),
    "header.promptTimings[0].messageEndIndex",
  );
  throwsAt(
    () => timings([timing(0, { messageStartIndex: 0, messageEndIndex: 2 })]),
    "header.promptTimings[0].id",
  );
  throwsAt(() => timings([timing(0, { stopped: false })]), "header.promptTimings[0].stopped");
});

test("duplicate attempt ids reject", () => {
  const error = throwsAt(
    () => timings([attempt(0, "same", 0, 4), attempt(4, "same", 4, 6)]),
    "header.promptTimings[1].id",
  );
  assert.match(error.message, /duplicate/);
});

test("overlapping or out-of-order attempt ranges reject", () => {
  throwsAt(
    () => timings([attempt(0, "a", 0, 3), attempt(0, "b", 2, 4)]),
    "header.promptTimings[1].messageStartIndex",
  );
  throwsAt(
    () => timings([attempt(4, "a", 4, 6), attempt(6, "b", 0, 1)]),
    "header.promptTimings[1].messageStartIndex",
  );
  throwsAt(
    () => timings([attempt(0, "a", 0, 6), timing(4), attempt(6, "b", 5, 7)]),
    "header.promptTimings[2].messageStartIndex",
  );
});

test("attempt indices must be ordered and within the history", () => {
  throwsAt(() => timings([attempt(4, "a", 3, 6)]), "header.promptTimings[0].messageStartIndex");
  throwsAt(() => timings([attempt(4, "a", 6, 5)]), "header.promptTimings[0].messageEndIndex");
  throwsAt(() => timings([attempt(4, "a", 4, 9)]), "header.promptTimings[0].messageEndIndex");
  throwsAt(() => timings([attempt(4, "a", -1, 5)]), "header.promptTimings[0].messageStartIndex");
  timings([attempt(4, "a", 4, 9)], null);
});

test("timing errors honour the file and path options", () => {
  const error = throwsAt(
    () => validatePromptTimings([timing(1)], ROLES, { file: "f.json", path: "promptTimings" }),
    "promptTimings[0].userMessageIndex",
  );
  assert.equal(error.file, "f.json");
});

test("PromptTimingSchema checks one record", () => {
  assert.equal(v.is(PromptTimingSchema, attempt(0, "a", 0, 1, { stopped: true })), true);
  assert.equal(v.is(PromptTimingSchema, timing(0, { id: "a" })), false);
  assert.equal(v.is(PromptTimingSchema, timing(0, { finishedAt: 1 })), false);
});

// ---------------------------------------------------------------- runtime contexts

function snapshot(userTurn: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { userTurn, content: "Runtime context", timestamp: 5, ...extra };
}

function skill(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: "s1",
    name: "review",
    path: "/skills/review",
    content: "Do it",
    revision: "r1",
    ...extra,
  };
}

const contexts = (value: unknown, roles: readonly MessageRole[] | null = ROLES) =>
  validateRuntimeContexts(value, roles ?? undefined);

test("runtime contexts may be absent but not a non-array", () => {
  contexts(undefined);
  contexts([]);
  throwsAt(() => contexts("ctx"), "header.runtimeContexts");
  throwsAt(() => contexts([0]), "header.runtimeContexts[0]");
});

test("user turns strictly increase and reference real user messages", () => {
  contexts([snapshot(0), snapshot(1), snapshot(2)]);
  throwsAt(() => contexts([snapshot(1), snapshot(1)]), "header.runtimeContexts[1].userTurn");
  throwsAt(() => contexts([snapshot(2), snapshot(1)]), "header.runtimeContexts[1].userTurn");
  throwsAt(() => contexts([snapshot(-1)]), "header.runtimeContexts[0].userTurn");
  throwsAt(() => contexts([snapshot(3)]), "header.runtimeContexts[0].userTurn");
  throwsAt(() => contexts([snapshot(0)], ["assistant"]), "header.runtimeContexts[0].userTurn");
  contexts([snapshot(3)], null);
});

test("snapshot content has a non-whitespace character", () => {
  contexts([snapshot(0, { content: " x " })]);
  for (const content of ["", " \n\t", 5, undefined]) {
    throwsAt(() => contexts([snapshot(0, { content })]), "header.runtimeContexts[0].content");
  }
});

test("placement is absent or exactly user", () => {
  contexts([snapshot(0, { placement: "user" })]);
  for (const placement of [null, "assistant", "USER"]) {
    throwsAt(() => contexts([snapshot(0, { placement })]), "header.runtimeContexts[0].placement");
  }
});

test("snapshot timestamps are non-negative safe integers", () => {
  contexts([snapshot(0, { timestamp: 0 })]);
  for (const timestamp of [-1, 1.5, "5", Number.MAX_SAFE_INTEGER + 2]) {
    throwsAt(() => contexts([snapshot(0, { timestamp })]), "header.runtimeContexts[0].timestamp");
  }
});

test("skills carry identities, source paths, instructions, revisions and optional descriptions", () => {
  contexts([
    snapshot(0, { skills: [] }),
    snapshot(1, { skills: [skill(), skill({ description: "d", id: "" })] }),
  ]);
  throwsAt(() => contexts([snapshot(0, { skills: "review" })]), "header.runtimeContexts[0].skills");
  throwsAt(
    () => contexts([snapshot(0, { skills: [null] })]),
    "header.runtimeContexts[0].skills[0]",
  );
  for (const field of ["id", "name", "path", "content", "revision"]) {
    const error = throwsAt(
      () => contexts([snapshot(0, { skills: [skill({ [field]: 1 })] })]),
      `header.runtimeContexts[0].skills[0].${field}`,
    );
    assert.match(error.message, /Invalid session skill context/);
    throwsAt(
      () => contexts([snapshot(0, { skills: [skill({ [field]: undefined })] })]),
      `header.runtimeContexts[0].skills[0].${field}`,
    );
  }
  throwsAt(
    () => contexts([snapshot(0, { skills: [skill({ description: null })] })]),
    "header.runtimeContexts[0].skills[0].description",
  );
});

test("skills are checked after the snapshot's own fields", () => {
  const error = throwsAt(
    () => contexts([snapshot(0, { content: "", skills: "bad" })]),
    "header.runtimeContexts[0].content",
  );
  assert.match(error.message, /Invalid session runtime context/);
});

test("RuntimeContextSnapshotSchema checks one snapshot with its skills", () => {
  assert.equal(v.is(RuntimeContextSnapshotSchema, snapshot(0, { skills: [skill()] })), true);
  assert.equal(v.is(RuntimeContextSnapshotSchema, snapshot(0, { skills: [{}] })), false);
});

// ---------------------------------------------------------------- compactions

function checkpoint(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: CHECKPOINT_ID,
    firstKeptMessageIndex: 4,
    historyMessageCount: 6,
    summary: "Earlier work",
    timestamp: 9,
    provider: "p",
    model: "m",
    usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, totalTokens: 15, cost: "any" },
    ...extra,
  };
}

const OTHER_ID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
const compactions = (value: unknown, roles: readonly MessageRole[] | null = ROLES) =>
  validateCompactions(value, roles ?? undefined);

test("compactions may be absent but not a non-array", () => {
  compactions(undefined);
  compactions([]);
  throwsAt(() => compactions(1), "header.compactions");
});

test("compaction boundaries strictly increase and keep a user message first", () => {
  compactions([
    checkpoint(),
    checkpoint({ id: OTHER_ID, firstKeptMessageIndex: 6, historyMessageCount: 8 }),
  ]);
  compactions([
    checkpoint({ historyMessageCount: 8 }),
    checkpoint({ id: OTHER_ID, firstKeptMessageIndex: 6, historyMessageCount: 7 }),
  ]);
  throwsAt(
    () => compactions([checkpoint(), checkpoint({ id: OTHER_ID })]),
    "header.compactions[1].firstKeptMessageIndex",
  );
  throwsAt(
    () => compactions([checkpoint({ firstKeptMessageIndex: 0 })]),
    "header.compactions[0].firstKeptMessageIndex",
  );
  throwsAt(
    () => compactions([checkpoint({ firstKeptMessageIndex: 3 })]),
    "header.compactions[0].firstKeptMessageIndex",
  );
  compactions([checkpoint({ firstKeptMessageIndex: 3 })], null);
});

test("historyMessageCount lies after the boundary and within the history", () => {
  compactions([checkpoint({ historyMessageCount: 8 })]);
  throwsAt(
    () => compactions([checkpoint({ historyMessageCount: 4 })]),
    "header.compactions[0].historyMessageCount",
  );
  throwsAt(
    () => compactions([checkpoint({ historyMessageCount: 9 })]),
    "header.compactions[0].historyMessageCount",
  );
  throwsAt(
    () => compactions([checkpoint({ historyMessageCount: 6.5 })]),
    "header.compactions[0].historyMessageCount",
  );
  compactions([checkpoint({ historyMessageCount: 9 })], null);
});

test("compaction ids match the id pattern and are unique", () => {
  throwsAt(
    () => compactions([checkpoint({ id: CHECKPOINT_ID.toUpperCase() })]),
    "header.compactions[0].id",
  );
  throwsAt(() => compactions([checkpoint({ id: "c1" })]), "header.compactions[0].id");
  const error = throwsAt(
    () =>
      compactions([checkpoint(), checkpoint({ firstKeptMessageIndex: 6, historyMessageCount: 8 })]),
    "header.compactions[1].id",
  );
  assert.match(error.message, /duplicate/);
});

test("summaries, timestamps and model identity are checked", () => {
  throwsAt(() => compactions([checkpoint({ summary: "  " })]), "header.compactions[0].summary");
  throwsAt(() => compactions([checkpoint({ summary: null })]), "header.compactions[0].summary");
  throwsAt(() => compactions([checkpoint({ timestamp: -3 })]), "header.compactions[0].timestamp");
  throwsAt(() => compactions([checkpoint({ provider: 1 })]), "header.compactions[0].provider");
  throwsAt(() => compactions([checkpoint({ model: undefined })]), "header.compactions[0].model");
});

test("summary usage token counts are finite and not negative", () => {
  compactions([
    checkpoint({ usage: { input: 0.5, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0 } }),
  ]);
  throwsAt(() => compactions([checkpoint({ usage: null })]), "header.compactions[0].usage");
  for (const field of ["input", "output", "cacheRead", "cacheWrite", "totalTokens"]) {
    for (const bad of [-1, "1", null, undefined]) {
      const usage = {
        input: 1,
        output: 1,
        cacheRead: 1,
        cacheWrite: 1,
        totalTokens: 1,
        [field]: bad,
      };
      if (bad === undefined) delete usage[field];
      throwsAt(() => compactions([checkpoint({ usage })]), `header.compactions[0].usage.${field}`);
    }
  }
});

test("CompactionCheckpointSchema checks one checkpoint", () => {
  assert.equal(v.is(CompactionCheckpointSchema, checkpoint()), true);
  assert.equal(v.is(CompactionCheckpointSchema, checkpoint({ historyMessageCount: 4 })), false);
});

// ---------------------------------------------------------------- system prompt checkpoints

function prompt(messageCount: number, sections: unknown = { preamble: "p", tools: "t" }) {
  return { messageCount, timestamp: 3, sections };
}

const prompts = (value: unknown, roles: readonly MessageRole[] | null = ROLES) =>
  validateSystemPromptCheckpoints(value, roles ?? undefined);

test("system prompt checkpoints may be absent but not a non-array", () => {
  prompts(undefined);
  prompts([]);
  throwsAt(() => prompts({}), "header.systemPromptCheckpoints");
});

test("checkpoint anchors are at least 1, never decrease and stay within the history", () => {
  prompts([prompt(1), prompt(1, { tools: null }), prompt(8, { tools: "t2" })]);
  throwsAt(() => prompts([prompt(0)]), "header.systemPromptCheckpoints[0].messageCount");
  throwsAt(() => prompts([prompt(3), prompt(2)]), "header.systemPromptCheckpoints[1].messageCount");
  throwsAt(() => prompts([prompt(9)]), "header.systemPromptCheckpoints[0].messageCount");
  throwsAt(() => prompts([prompt(1)], []), "header.systemPromptCheckpoints[0].messageCount");
  prompts([prompt(9)], null);
});

test("checkpoint timestamps are non-negative safe integers", () => {
  throwsAt(
    () => prompts([{ messageCount: 1, timestamp: -1, sections: { a: "x" } }]),
    "header.systemPromptCheckpoints[0].timestamp",
  );
});

test("sections are a non-empty map of valid names to text or null", () => {
  prompts([prompt(1, { a: null, "b-2_c": "x" })]);
  for (const sections of [null, [], {}, "text"]) {
    throwsAt(() => prompts([prompt(1, sections)]), "header.systemPromptCheckpoints[0].sections");
  }
  const names: [string, string][] = [
    ["Tools", ".Tools"],
    ["1st", '["1st"]'],
    ["a b", '["a b"]'],
    ["_x", "._x"],
    ["__proto__", ".__proto__"],
  ];
  for (const [name, at] of names) {
    const sections = JSON.parse(`{${JSON.stringify(name)}: "x"}`);
    assert.deepEqual(Object.keys(sections), [name]);
    throwsAt(
      () => prompts([prompt(1, sections)]),
      `header.systemPromptCheckpoints[0].sections${at}`,
    );
  }
  throwsAt(
    () => prompts([prompt(1, { tools: 5 })]),
    "header.systemPromptCheckpoints[0].sections.tools",
  );
  throwsAt(
    () => prompts([prompt(1, JSON.parse('{"constructor": 5}'))]),
    "header.systemPromptCheckpoints[0].sections.constructor",
  );
});

test("SystemPromptCheckpointSchema checks one checkpoint", () => {
  assert.equal(v.is(SystemPromptCheckpointSchema, prompt(1)), true);
  assert.equal(v.is(SystemPromptCheckpointSchema, prompt(1, { Bad: "x" })), false);
  assert.equal(
    v.is(SystemPromptCheckpointSchema, prompt(1, JSON.parse('{"constructor": 5}'))),
    false,
  );
});
