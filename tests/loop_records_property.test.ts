import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import * as v from "valibot";
import {
  SessionFormatError,
  ToolPairingError,
  UnsupportedSessionError,
} from "../src/loop/errors.ts";
import {
  CompactionCheckpointSchema,
  isValidTitle,
  type MessageRole,
  MessageSchema,
  MessageValidator,
  MODEL_EFFORTS,
  parseSessionHeader,
  PERMISSION_PRESETS,
  PromptTimingSchema,
  RuntimeContextSnapshotSchema,
  SessionHeaderSchema,
  SessionTitleSchema,
  STOP_REASONS,
  SystemPromptCheckpointSchema,
  validateMessages,
  validateSessionMetadata,
} from "../src/loop/records/mod.ts";
import {
  parseStorageMeta,
  STORAGE_FORMAT,
  STORAGE_VERSION,
  StorageMetaSchema,
} from "../src/loop/storage.ts";
import { runsOf } from "./_soak.ts";

const RUNS = runsOf(150);
// Plain objects only, so that a JSON round trip is an exact deep equality.
const PLAIN = { noNullPrototype: true } as const;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = Record<string, Json>;
type Gen = fc.GeneratorValue;

interface Session {
  header: Obj;
  messages: Obj[];
}

// ---------------------------------------------------------------- generators

// Arbitraries are built once: building them (stringMatching above all) costs far more than
// drawing from them.
const KEY: fc.Arbitrary<string> = fc.stringMatching(/^[a-z][a-z0-9_-]{0,6}$/);
const SCALAR: fc.Arbitrary<Json> = fc.oneof(
  fc.integer(),
  fc.string({ maxLength: 8 }),
  fc.boolean(),
  fc.constant(null),
);
const JSON_VALUE: fc.Arbitrary<Json> = fc.oneof(
  SCALAR,
  fc.array(SCALAR, { maxLength: 3 }),
  fc.dictionary(KEY, SCALAR, { maxKeys: 3, noNullPrototype: true }),
);
const OBJECT_VALUE: fc.Arbitrary<Obj> = fc.dictionary(KEY, JSON_VALUE, {
  maxKeys: 3,
  noNullPrototype: true,
});
const MEDIA_BLOCKS: fc.Arbitrary<Obj[]> = fc.array(
  fc.oneof(
    fc.record({ type: fc.constant("text"), text: fc.string({ maxLength: 12 }) }, PLAIN),
    fc.record({
      type: fc.constant("image"),
      data: fc.base64String({ maxLength: 12 }),
      mimeType: fc.constantFrom("image/png", "image/jpeg"),
    }, PLAIN),
  ),
  { maxLength: 3 },
);
const ASSISTANT_BLOCKS: fc.Arbitrary<Obj[]> = fc.array(
  fc.oneof(
    fc.record({ type: fc.constant("text"), text: fc.string({ maxLength: 12 }) }, PLAIN),
    fc.record({ type: fc.constant("thinking"), thinking: fc.string({ maxLength: 12 }) }, PLAIN),
  ),
  { maxLength: 2 },
);
const SKILLS: fc.Arbitrary<Obj[]> = fc.array(
  fc.record(
    {
      id: fc.string({ maxLength: 4 }),
      name: fc.string({ maxLength: 4 }),
      path: fc.constant("/skills/x/SKILL.md"),
      content: fc.string({ maxLength: 8 }),
      revision: fc.string({ maxLength: 4 }),
      description: fc.string({ maxLength: 6 }),
    },
    { requiredKeys: ["id", "name", "path", "content", "revision"], noNullPrototype: true },
  ),
  { maxLength: 2 },
);
const SECTIONS: fc.Arbitrary<Obj> = fc.dictionary(
  KEY,
  fc.oneof(fc.string({ maxLength: 10 }), fc.constant(null)),
  { minKeys: 1, maxKeys: 3, noNullPrototype: true },
);
const key = () => KEY;
const jsonValue = () => JSON_VALUE;
const objectValue = () => OBJECT_VALUE;

function hexId(n: number): string {
  return `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`;
}

function mediaBlocks(g: Gen): Obj[] {
  return g(() => MEDIA_BLOCKS);
}

function userMessage(g: Gen, timestamp: number): Obj {
  const content: Json = g(fc.boolean) ? g(fc.string, { maxLength: 30 }) : mediaBlocks(g);
  return { role: "user", content, timestamp };
}

function assistantMessage(g: Gen, timestamp: number, calls: Obj[], stopReason: string): Obj {
  const blocks: Obj[] = g(() => ASSISTANT_BLOCKS);
  const message: Obj = {
    role: "assistant",
    content: [...blocks, ...calls],
    api: g(fc.constantFrom, "responses", "messages", ""),
    provider: g(fc.string, { maxLength: 6 }),
    model: g(fc.string, { maxLength: 6 }),
    usage: g(fc.boolean)
      ? { input: g(fc.nat), output: g(fc.nat), cacheRead: 0, cacheWrite: 0, totalTokens: g(fc.nat) }
      : {},
    stopReason,
    timestamp,
  };
  if ((stopReason === "error" || stopReason === "aborted") && g(fc.boolean)) {
    message.errorMessage = g(fc.string, { maxLength: 10 });
  }
  return message;
}

function resultMessage(g: Gen, timestamp: number, call: Obj): Obj {
  const message: Obj = {
    role: "toolResult",
    toolCallId: call.id as string,
    toolName: call.name as string,
    content: mediaBlocks(g),
    isError: g(fc.boolean),
    timestamp,
  };
  const details = g(fc.integer, { min: 0, max: 3 });
  if (details === 1) message.details = g(jsonValue);
  if (details === 2) message.details = { loopDisplayName: `srv · ${call.name as string}` };
  return message;
}

function history(g: Gen): Obj[] {
  const messages: Obj[] = [];
  let time = g(fc.integer, { min: 0, max: 1_000_000 });
  let callCount = 0;
  const turns = g(fc.integer, { min: 0, max: 5 });
  for (let t = 0; t < turns; t++) {
    messages.push(userMessage(g, time++));
    const steps = g(fc.integer, { min: 0, max: 3 });
    for (let s = 0; s < steps; s++) {
      const stopReason = g(fc.constantFrom, ...STOP_REASONS);
      const calls: Obj[] = [];
      const count = g(fc.integer, { min: 0, max: 3 });
      for (let c = 0; c < count; c++) {
        calls.push({
          type: "toolCall",
          id: `call_${callCount++}_${g(fc.string, { maxLength: 4 })}`,
          name: g(fc.constantFrom, "read", "write", "mcp_srv_tool_0123"),
          arguments: g(objectValue),
        });
      }
      messages.push(assistantMessage(g, time++, calls, stopReason));
      if (stopReason === "error" || stopReason === "aborted") continue;
      const shift = calls.length === 0 ? 0 : g(fc.nat, calls.length - 1);
      for (let c = 0; c < calls.length; c++) {
        messages.push(resultMessage(g, time++, calls[(c + shift) % calls.length] as Obj));
      }
    }
  }
  return messages;
}

function rolesOf(messages: readonly Obj[]): MessageRole[] {
  return messages.map((message) => message.role as MessageRole);
}

function userIndices(roles: readonly MessageRole[]): number[] {
  const out: number[] = [];
  roles.forEach((role, index) => role === "user" && out.push(index));
  return out;
}

function promptTimings(g: Gen, roles: readonly MessageRole[]): Obj[] {
  const users = userIndices(roles);
  const out: Obj[] = [];
  let attempt = 0;
  users.forEach((u, k) => {
    const next = users[k + 1] ?? roles.length;
    const kind = g(fc.integer, { min: 0, max: 2 });
    const startedAt = g(fc.integer, { min: 0, max: 1e12 });
    const finishedAt = startedAt + g(fc.integer, { min: 0, max: 1e6 });
    if (kind === 1) out.push({ userMessageIndex: u, startedAt, finishedAt });
    if (kind === 2) {
      const split = g(fc.integer, { min: u, max: next });
      const ranges = split === next ? [[u, next]] : [[u, split], [split, next]];
      ranges.forEach(([start, end], r) => {
        const record: Obj = {
          userMessageIndex: u,
          startedAt,
          finishedAt,
          id: `attempt-${attempt++}`,
          messageStartIndex: start as number,
          messageEndIndex: end as number,
        };
        if (r < ranges.length - 1 || g(fc.boolean)) record.stopped = g(fc.boolean);
        out.push(record);
      });
    }
  });
  return out;
}

function runtimeContexts(g: Gen, roles: readonly MessageRole[]): Obj[] {
  const turns = userIndices(roles).map((_, turn) => turn);
  return (g(fc.subarray, turns) as number[]).map((userTurn) => {
    const snapshot: Obj = {
      userTurn,
      content: `ctx ${g(fc.string, { maxLength: 10 })}`,
      timestamp: g(fc.nat),
    };
    if (g(fc.boolean)) snapshot.placement = "user";
    if (g(fc.boolean)) {
      snapshot.skills = g(() => SKILLS);
    }
    return snapshot;
  });
}

function compactions(g: Gen, roles: readonly MessageRole[]): Obj[] {
  const boundaries = g(fc.subarray, userIndices(roles).filter((index) => index >= 1)) as number[];
  return boundaries.map((first, k) => ({
    id: hexId(k + 1),
    firstKeptMessageIndex: first,
    historyMessageCount: g(fc.integer, { min: first + 1, max: roles.length }),
    summary: `summary ${g(fc.string, { maxLength: 10 })}`,
    timestamp: g(fc.nat),
    provider: g(fc.string, { maxLength: 4 }),
    model: g(fc.string, { maxLength: 4 }),
    usage: {
      input: g(fc.nat),
      output: g(fc.nat),
      cacheRead: 0,
      cacheWrite: 0,
      totalTokens: g(fc.nat),
      cost: g(jsonValue),
    },
  }));
}

function systemPromptCheckpoints(g: Gen, roles: readonly MessageRole[]): Obj[] {
  if (roles.length === 0) return [];
  const counts =
    (g(fc.array, fc.integer({ min: 1, max: roles.length }), { maxLength: 3 }) as number[])
      .sort((a, b) => a - b);
  return counts.map((messageCount) => ({
    messageCount,
    timestamp: g(fc.nat),
    sections: g(() => SECTIONS),
  }));
}

function header(g: Gen, roles: readonly MessageRole[]): Obj {
  const header: Obj = {
    format: "loop-session",
    version: 2,
    id: hexId(g(fc.nat)),
    cwd: `/work/${g(key)}`,
    createdAt: new Date(g(fc.integer, { min: 0, max: 4e12 })).toISOString(),
    updatedAt: new Date(g(fc.integer, { min: 0, max: 4e12 })).toISOString(),
    unread: g(fc.boolean),
    permissionPreset: g(fc.constantFrom, ...PERMISSION_PRESETS),
  };
  if (g(fc.boolean)) header.pinnedAt = new Date(g(fc.integer, { min: 0, max: 4e12 })).toISOString();
  if (g(fc.boolean)) {
    header.model = { provider: g(fc.string, { maxLength: 4 }), id: g(fc.string, { maxLength: 4 }) };
    if (g(fc.boolean)) header.model.effort = g(fc.constantFrom, ...MODEL_EFFORTS);
  }
  if (g(fc.boolean)) {
    const users = userIndices(roles);
    header.title = {
      text: g(fc.constantFrom, "Fix the build", "Übersicht 🙂", "x"),
      source: g(fc.constantFrom, "fallback", "model", "user"),
      messageIndices: g(fc.subarray, users) as number[],
    };
    if (g(fc.boolean)) header.title.model = { provider: "p", id: "m" };
  }
  if (g(fc.boolean)) header.futureField = g(jsonValue);
  const timings = promptTimings(g, roles);
  if (timings.length > 0) header.promptTimings = timings;
  const contexts = runtimeContexts(g, roles);
  if (contexts.length > 0) header.runtimeContexts = contexts;
  const checkpoints = compactions(g, roles);
  if (checkpoints.length > 0) header.compactions = checkpoints;
  const prompts = systemPromptCheckpoints(g, roles);
  if (prompts.length > 0) header.systemPromptCheckpoints = prompts;
  return header;
}

/** A new arbitrary of valid sessions (see `assertInRounds`). */
function sessionArb(): fc.Arbitrary<Session> {
  return fc.gen().map((g) => {
    const messages = history(g);
    return { header: header(g, rolesOf(messages)), messages };
  });
}

/** How many runs `assertInRounds` makes on one set of arbitraries. */
const RUNS_PER_ROUND = 500;

/**
 * `fc.assert` of the property `build` makes, `runs` times (stopping at the first failure), in
 * rounds of at most `RUNS_PER_ROUND` runs, each on a property built afresh: an `fc.gen()`
 * arbitrary keeps an arbitrary for each distinct argument list its runs gave it, which would grow
 * without bound over the runs of a soak (`_soak.ts`).
 */
function assertInRounds<T>(build: () => fc.IProperty<T>, runs: number): void {
  for (let done = 0; done < runs; done += RUNS_PER_ROUND) {
    fc.assert(build(), { numRuns: Math.min(RUNS_PER_ROUND, runs - done), endOnFailure: true });
  }
}

function loadSession(session: Session): void {
  const parsed = parseSessionHeader(session.header, { file: "meta.json" });
  validateMessages(session.messages, { file: "messages.jsonl" });
  validateSessionMetadata(parsed, rolesOf(session.messages), { file: "meta.json" });
}

// ---------------------------------------------------------------- valid sessions

test("generated valid sessions always pass and every record schema accepts them", () => {
  assertInRounds(() =>
    fc.property(sessionArb(), (session) => {
      loadSession(session);
      assert.equal(v.is(SessionHeaderSchema, session.header), true);
      for (const message of session.messages) assert.equal(v.is(MessageSchema, message), true);
      const h = session.header;
      const all = (schema: v.GenericSchema<unknown, unknown>, list: Json | undefined) =>
        ((list ?? []) as Json[]).every((item) => v.is(schema, item));
      assert.ok(all(PromptTimingSchema, h.promptTimings));
      assert.ok(all(RuntimeContextSnapshotSchema, h.runtimeContexts));
      assert.ok(all(CompactionCheckpointSchema, h.compactions));
      assert.ok(all(SystemPromptCheckpointSchema, h.systemPromptCheckpoints));
      if (h.title !== undefined) assert.ok(v.is(SessionTitleSchema, h.title));
    }), RUNS);
});

test("generated valid sessions round-trip through JSON unchanged", () => {
  assertInRounds(() =>
    fc.property(sessionArb(), (session) => {
      const text = JSON.stringify(session);
      const copy = JSON.parse(text) as Session;
      assert.deepEqual(copy, session);
      loadSession(copy);
      const parsed = parseSessionHeader(copy.header);
      assert.equal(JSON.stringify(parsed), JSON.stringify(session.header));
      assert.deepEqual(parseSessionHeader(JSON.parse(JSON.stringify(parsed))), parsed);
    }), RUNS);
});

test("incremental validation from cloned states agrees with whole-history validation", () => {
  assertInRounds(() =>
    fc.property(sessionArb(), fc.nat(), (session, cut) => {
      const at = session.messages.length === 0 ? 0 : cut % (session.messages.length + 1);
      const committed = new MessageValidator();
      session.messages.slice(0, at).forEach((message, i) => committed.push(message, i));
      const next = committed.clone();
      session.messages.slice(at).forEach((message, i) => next.push(message, at + i));
      next.finish();
      assert.equal(committed.nextIndex, at);
      assert.equal(next.nextIndex, session.messages.length);
    }), RUNS);
});

// ---------------------------------------------------------------- single rule-breaking mutations

interface Mutation {
  readonly name: string;
  /** Breaks one rule in place; returns the expected error path, or undefined if not applicable. */
  readonly apply: (session: Session, g: Gen) => string | undefined;
  /** The expected error class. */
  readonly kind?: new (...args: never[]) => Error;
}

function pick<T>(g: Gen, items: readonly T[]): [T, number] | undefined {
  if (items.length === 0) return undefined;
  const index = g(fc.nat, items.length - 1);
  return [items[index] as T, index];
}

function indicesWhere(messages: readonly Obj[], test: (message: Obj) => boolean): number[] {
  const out: number[] = [];
  messages.forEach((message, index) => test(message) && out.push(index));
  return out;
}

function pairsCalls(message: Obj): boolean {
  return message.role === "assistant" && message.stopReason !== "error" &&
    message.stopReason !== "aborted" &&
    (message.content as Obj[]).some((block) => block.type === "toolCall");
}

function list(header: Obj, field: string): Obj[] {
  return (header[field] ?? []) as Obj[];
}

const MUTATIONS: readonly Mutation[] = [
  {
    name: "uppercase id",
    apply: (s) => ((s.header.id = "ABCDEF00-0000-4000-8000-000000000000"), "header.id"),
  },
  { name: "relative cwd", apply: (s) => ((s.header.cwd = "work/dir"), "header.cwd") },
  {
    name: "bad createdAt",
    apply: (s) => ((s.header.createdAt = "not a date"), "header.createdAt"),
  },
  { name: "bad updatedAt", apply: (s) => ((s.header.updatedAt = 17), "header.updatedAt") },
  { name: "string unread", apply: (s) => ((s.header.unread = "true"), "header.unread") },
  { name: "short pinnedAt", apply: (s) => ((s.header.pinnedAt = "2026-01-01"), "header.pinnedAt") },
  {
    name: "no preset",
    apply: (s) => (delete s.header.permissionPreset, "header.permissionPreset"),
  },
  {
    name: "bad preset",
    apply: (s) => ((s.header.permissionPreset = "root"), "header.permissionPreset"),
  },
  {
    name: "unknown effort",
    apply: (
      s,
    ) => ((s.header.model = { provider: "p", id: "m", effort: "turbo" }), "header.model.effort"),
  },
  {
    name: "decreasing title indices",
    apply: (s) => (
      (s.header.title = { text: "T", source: "user", messageIndices: [1, 0] }),
        "header.title.messageIndices"
    ),
  },
  {
    name: "untrimmed title",
    apply: (
      s,
    ) => ((s.header.title = { text: " T", source: "user", messageIndices: [] }),
      "header.title.text"),
  },
  {
    name: "version 3",
    apply: (s) => ((s.header.version = 3), ""),
    kind: UnsupportedSessionError,
  },
  {
    name: "format",
    apply: (s) => ((s.header.format = "x"), ""),
    kind: UnsupportedSessionError,
  },
  {
    name: "string timestamp",
    apply: (s, g) => {
      const [message, i] = pick(g, s.messages) ?? [];
      if (message === undefined) return undefined;
      message.timestamp = "1";
      return `messages[${i}].timestamp`;
    },
  },
  {
    name: "unknown role",
    apply: (s, g) => {
      const [message, i] = pick(g, s.messages) ?? [];
      if (message === undefined) return undefined;
      message.role = "system";
      return `messages[${i}].role`;
    },
  },
  {
    name: "numeric user content",
    apply: (s, g) => {
      const [i] = pick(g, indicesWhere(s.messages, (m) => m.role === "user")) ?? [];
      if (i === undefined) return undefined;
      (s.messages[i] as Obj).content = 5;
      return `messages[${i}].content`;
    },
  },
  {
    name: "thinking in a tool result",
    apply: (s, g) => {
      const [i] = pick(g, indicesWhere(s.messages, (m) => m.role === "toolResult")) ?? [];
      if (i === undefined) return undefined;
      const content = (s.messages[i] as Obj).content as Obj[];
      content.push({ type: "thinking", thinking: "t" });
      return `messages[${i}].content[${content.length - 1}].type`;
    },
  },
  {
    name: "unknown stop reason",
    apply: (s, g) => {
      const [i] = pick(g, indicesWhere(s.messages, (m) => m.role === "assistant")) ?? [];
      if (i === undefined) return undefined;
      (s.messages[i] as Obj).stopReason = "finished";
      return `messages[${i}].stopReason`;
    },
  },
  {
    name: "null usage",
    apply: (s, g) => {
      const [i] = pick(g, indicesWhere(s.messages, (m) => m.role === "assistant")) ?? [];
      if (i === undefined) return undefined;
      (s.messages[i] as Obj).usage = null;
      return `messages[${i}].usage`;
    },
  },
  {
    name: "array tool arguments",
    apply: (s, g) => {
      const [i] = pick(
        g,
        indicesWhere(
          s.messages,
          (m) => m.role === "assistant" && (m.content as Obj[]).some((b) => b.type === "toolCall"),
        ),
      ) ?? [];
      if (i === undefined) return undefined;
      const content = (s.messages[i] as Obj).content as Obj[];
      const j = content.findIndex((block) => block.type === "toolCall");
      (content[j] as Obj).arguments = [1];
      return `messages[${i}].content[${j}].arguments`;
    },
  },
  {
    name: "string isError",
    apply: (s, g) => {
      const [i] = pick(g, indicesWhere(s.messages, (m) => m.role === "toolResult")) ?? [];
      if (i === undefined) return undefined;
      (s.messages[i] as Obj).isError = "no";
      return `messages[${i}].isError`;
    },
  },
  {
    name: "unmatched tool result",
    kind: ToolPairingError,
    apply: (s, g) => {
      const [i] = pick(g, indicesWhere(s.messages, (m) => m.role === "toolResult")) ?? [];
      if (i === undefined) return undefined;
      (s.messages[i] as Obj).toolCallId = "nobody-called-this";
      return `messages[${i}].toolCallId`;
    },
  },
  {
    name: "duplicate tool call",
    kind: ToolPairingError,
    apply: (s, g) => {
      const [i] = pick(g, indicesWhere(s.messages, pairsCalls)) ?? [];
      if (i === undefined) return undefined;
      const content = (s.messages[i] as Obj).content as Obj[];
      const call = content.find((block) => block.type === "toolCall") as Obj;
      content.push({ ...call });
      return `messages[${i}].content[${content.length - 1}].id`;
    },
  },
  {
    name: "missing tool result",
    kind: ToolPairingError,
    apply: (s, g) => {
      const [i] = pick(g, indicesWhere(s.messages, (m) => m.role === "toolResult")) ?? [];
      if (i === undefined) return undefined;
      const id = (s.messages[i] as Obj).toolCallId;
      s.messages.splice(i, 1);
      // The first later user or assistant message is where pairing fails; else the end.
      const next = s.messages.findIndex((m, k) => k >= i && m.role !== "toolResult");
      if (next !== -1) return `messages[${next}]`;
      const a = s.messages.findLastIndex((m, k) =>
        k < i && m.role === "assistant" && (m.content as Obj[]).some((b) => b.id === id)
      );
      const calls = (s.messages[a] as Obj).content as Obj[];
      const pending = new Set(s.messages.slice(a + 1).map((m) => m.toolCallId));
      const j = calls.findIndex((b) => b.type === "toolCall" && !pending.has(b.id as string));
      return `messages[${a}].content[${j}].id`;
    },
  },
  {
    name: "finishedAt before startedAt",
    apply: (s, g) => {
      const [t, k] = pick(g, list(s.header, "promptTimings")) ?? [];
      if (t === undefined) return undefined;
      t.startedAt = (t.finishedAt as number) + 1;
      return `header.promptTimings[${k}].finishedAt`;
    },
  },
  {
    name: "timing at a non-user message",
    apply: (s) => {
      const timings = list(s.header, "promptTimings");
      const k = timings.length - 1;
      const t = timings[k];
      if (t === undefined) return undefined;
      const u = (t.userMessageIndex as number) + 1;
      if (u >= s.messages.length || s.messages[u]?.role === "user") return undefined;
      t.userMessageIndex = u;
      if (t.id !== undefined) {
        t.messageStartIndex = Math.max(t.messageStartIndex as number, u);
        t.messageEndIndex = Math.max(t.messageEndIndex as number, u);
      }
      return `header.promptTimings[${k}].userMessageIndex`;
    },
  },
  {
    name: "duplicate attempt id",
    apply: (s) => {
      const attempts = list(s.header, "promptTimings").map((t, k) => [t, k] as const).filter((
        [t],
      ) => t.id !== undefined);
      if (attempts.length < 2) return undefined;
      const [first] = attempts[0] as readonly [Obj, number];
      const [second, k] = attempts[1] as readonly [Obj, number];
      second.id = first.id as string;
      return `header.promptTimings[${k}].id`;
    },
  },
  {
    name: "blank runtime context",
    apply: (s, g) => {
      const [c, k] = pick(g, list(s.header, "runtimeContexts")) ?? [];
      if (c === undefined) return undefined;
      c.content = " \n ";
      return `header.runtimeContexts[${k}].content`;
    },
  },
  {
    name: "runtime context past the user turns",
    apply: (s) => {
      const contexts = list(s.header, "runtimeContexts");
      const last = contexts[contexts.length - 1];
      if (last === undefined) return undefined;
      last.userTurn = userIndices(rolesOf(s.messages)).length;
      return `header.runtimeContexts[${contexts.length - 1}].userTurn`;
    },
  },
  {
    name: "blank compaction summary",
    apply: (s, g) => {
      const [c, k] = pick(g, list(s.header, "compactions")) ?? [];
      if (c === undefined) return undefined;
      c.summary = "\t";
      return `header.compactions[${k}].summary`;
    },
  },
  {
    name: "compaction past the history",
    apply: (s, g) => {
      const [c, k] = pick(g, list(s.header, "compactions")) ?? [];
      if (c === undefined) return undefined;
      c.historyMessageCount = s.messages.length + 1;
      return `header.compactions[${k}].historyMessageCount`;
    },
  },
  {
    name: "empty sections",
    apply: (s, g) => {
      const [c, k] = pick(g, list(s.header, "systemPromptCheckpoints")) ?? [];
      if (c === undefined) return undefined;
      c.sections = {};
      return `header.systemPromptCheckpoints[${k}].sections`;
    },
  },
  {
    name: "zero anchor",
    apply: (s) => {
      const prompts = list(s.header, "systemPromptCheckpoints");
      if (prompts.length === 0) return undefined;
      (prompts[0] as Obj).messageCount = 0;
      return "header.systemPromptCheckpoints[0].messageCount";
    },
  },
];

test("a single rule-breaking mutation is always rejected with a typed error naming the field", () => {
  const seen = new Set<string>();
  assertInRounds(
    () =>
      fc.property(sessionArb(), fc.constantFrom(...MUTATIONS), fc.gen(), (session, mutation, g) => {
        const broken = structuredClone(session);
        const path = mutation.apply(broken, g);
        fc.pre(path !== undefined);
        seen.add(mutation.name);
        let caught: unknown;
        try {
          loadSession(broken);
        } catch (error) {
          caught = error;
        }
        const kind = mutation.kind ?? SessionFormatError;
        assert.ok(
          caught instanceof kind,
          `${mutation.name}: expected ${kind.name}, got ${String(caught)}`,
        );
        if (caught instanceof SessionFormatError) {
          assert.equal(caught.path, path, `${mutation.name}: ${caught.message}`);
          assert.ok(caught.message.includes(path as string), caught.message);
          if (!(caught instanceof ToolPairingError) && path?.startsWith("messages[")) {
            const index = Number(/^messages\[(\d+)\]/.exec(path)?.[1]);
            assert.equal(v.is(MessageSchema, broken.messages[index]), false, "schema must agree");
          }
        } else {
          assert.equal(kind, UnsupportedSessionError, String(caught));
        }
      }),
    RUNS * 3,
  );
  assert.ok(seen.size >= MUTATIONS.length - 2, `only ${[...seen].join(", ")} were exercised`);
});

// ---------------------------------------------------------------- schema vs fast path

function paths(value: Json, prefix: (string | number)[] = []): (string | number)[][] {
  const out: (string | number)[][] = [prefix];
  if (Array.isArray(value)) value.forEach((item, i) => out.push(...paths(item, [...prefix, i])));
  else if (value !== null && typeof value === "object") {
    for (const [k, item] of Object.entries(value)) out.push(...paths(item, [...prefix, k]));
  }
  return out;
}

function setAt(root: Json, path: readonly (string | number)[], value: Json | undefined): Json {
  if (path.length === 0) return value ?? null;
  let node = root as Record<string | number, Json>;
  for (const step of path.slice(0, -1)) node = node[step] as Record<string | number, Json>;
  const last = path[path.length - 1] as string | number;
  if (value === undefined) {
    if (Array.isArray(node)) node.splice(last as number, 1);
    else delete node[last];
  } else node[last] = value;
  return root;
}

test("MessageSchema and MessageValidator.push agree on randomly damaged messages", () => {
  const damage = fc.oneof(
    jsonValue(),
    fc.constantFrom<Json | undefined>(
      undefined,
      "user",
      "assistant",
      "toolResult",
      "text",
      "image",
      "toolCall",
      "stop",
      {},
      [],
    ),
  );
  assertInRounds(
    () =>
      fc.property(sessionArb(), fc.nat(), fc.nat(), damage, (session, which, where, value) => {
        fc.pre(session.messages.length > 0);
        const original = session.messages[which % session.messages.length] as Obj;
        const spots = paths(original);
        const damaged = setAt(
          structuredClone(original),
          spots[where % spots.length] as (string | number)[],
          value,
        );
        let shapeError: unknown;
        try {
          // A lone message: pairing errors (ToolPairingError) are not shape errors.
          new MessageValidator().push(damaged, 0);
        } catch (error) {
          if (!(error instanceof ToolPairingError)) shapeError = error;
        }
        if (shapeError !== undefined) assert.ok(shapeError instanceof SessionFormatError);
        assert.equal(
          v.is(MessageSchema, damaged),
          shapeError === undefined,
          JSON.stringify(damaged),
        );
      }),
    RUNS * 4,
  );
});

// Values that sit at the edges of the header's field rules (dates, titles, ids, counts, shapes),
// so the hand-written checks of the common shapes meet every boundary the schema draws.
const HEADER_DAMAGE: readonly (Json | undefined)[] = [
  undefined,
  null,
  true,
  "",
  "x",
  " T",
  "T ",
  "a  b",
  "a\tb",
  "x\u0007",
  "\u200bx",
  "\u001b[31mx",
  "A".repeat(120),
  "A".repeat(121),
  "Ü".repeat(60),
  "Ü".repeat(61),
  "fallback",
  "model",
  "user",
  "auto",
  "read-only",
  "danger-full-access",
  "default",
  "max",
  "/abs",
  "relative",
  "C:\\work",
  "\\\\host\\share",
  "2026-01-01",
  "2026-01-01T00:00:00Z",
  "2026-01-01T00:00:00.000Z",
  "not a date",
  "00000000-0000-4000-8000-00000000000A",
  "00000000-0000-4000-8000-00000000000a",
  "------------------------------------",
  0,
  -1,
  1.5,
  2 ** 53,
  [],
  [0],
  [1, 0],
  [0, 0],
  [0, 2, 5],
  ["0"],
  {},
  { provider: "p", id: "m" },
  { provider: "p", id: "m", effort: "high" },
  { provider: "p", id: "m", effort: "turbo" },
  { provider: 1, id: "m" },
  { text: "T", source: "user", messageIndices: [] },
  { text: "T", source: "user", messageIndices: [0], model: {} },
];

/** Values JSON cannot hold but a caller's object can: holes, NaN, -0, Infinity. */
const IN_MEMORY_DAMAGE: readonly unknown[] = [
  // deno-lint-ignore no-sparse-arrays
  [0, , 2],
  new Array(2),
  Number.NaN,
  -0,
  Number.POSITIVE_INFINITY,
];

test("parseSessionHeader and SessionHeaderSchema agree on randomly damaged headers", () => {
  const damage = fc.oneof(
    jsonValue(),
    fc.constantFrom(...HEADER_DAMAGE),
    fc.constantFrom(...IN_MEMORY_DAMAGE as Json[]),
  );
  let accepted = 0;
  assertInRounds(() =>
    fc.property(sessionArb(), fc.nat(), damage, (session, where, value) => {
      const spots = paths(session.header);
      const spot = spots[where % spots.length] as (string | number)[];
      const damaged = setAt(structuredClone(session.header), spot, value as Json | undefined);
      let parsed: unknown;
      let failure: unknown;
      try {
        parsed = parseSessionHeader(damaged);
      } catch (error) {
        failure = error;
      }
      if (failure !== undefined) {
        assert.ok(
          failure instanceof SessionFormatError || failure instanceof UnsupportedSessionError,
          String(failure),
        );
      }
      const schema = v.safeParse(SessionHeaderSchema, damaged);
      assert.equal(failure === undefined, schema.success, JSON.stringify(damaged));
      if (schema.success) {
        accepted++;
        assert.deepEqual(parsed, schema.output);
      }
    }), RUNS * 8);
  assert.ok(accepted > RUNS / 3, `only ${accepted} damaged headers were still valid`);
});

test("parseStorageMeta and StorageMetaSchema agree on randomly damaged meta.json", () => {
  const damage = fc.oneof(
    fc.constantFrom(...HEADER_DAMAGE),
    fc.constantFrom(...IN_MEMORY_DAMAGE as Json[]),
    fc.constantFrom<Json>("e".repeat(64), "E".repeat(64), "e".repeat(63), 2 ** 53 - 1),
  );
  assertInRounds(
    () =>
      fc.property(sessionArb(), fc.nat(), damage, fc.boolean(), (session, where, value, deep) => {
        const meta: Obj = {
          format: STORAGE_FORMAT,
          version: STORAGE_VERSION,
          header: session.header,
          generation: "0".repeat(64),
          start: 7,
          bytes: 100,
          messageCount: session.messages.length,
        };
        if (deep) meta.extra = 1;
        const spots = paths(meta).filter((spot) => spot.length > 0 && (deep || spot.length === 1));
        const spot = spots[where % spots.length] as (string | number)[];
        const damaged = setAt(structuredClone(meta), spot, value as Json | undefined) as Obj;
        let parsed: unknown;
        let failure: unknown;
        try {
          parsed = parseStorageMeta(damaged, "meta.json");
        } catch (error) {
          failure = error;
        }
        // The reference: the envelope's schema, then the header's schema.
        const envelope = v.safeParse(StorageMetaSchema, damaged);
        const header = envelope.success
          ? v.safeParse(SessionHeaderSchema, damaged.header)
          : undefined;
        const valid = damaged.format === STORAGE_FORMAT && damaged.version === STORAGE_VERSION &&
          envelope.success && header?.success === true;
        assert.equal(
          failure === undefined,
          valid,
          `${String(failure)}: ${JSON.stringify(damaged)}`,
        );
        if (failure !== undefined) {
          assert.ok(
            failure instanceof SessionFormatError || failure instanceof UnsupportedSessionError,
            String(failure),
          );
          assert.equal((failure as SessionFormatError).file, "meta.json");
        }
        if (valid && envelope.success && header?.success) {
          const expected = { ...envelope.output, header: header.output };
          assert.deepEqual(parsed, expected);
          assert.deepEqual(Object.keys(parsed as object), Object.keys(expected));
        }
      }),
    RUNS * 4,
  );
});

test("isValidTitle and SessionTitleSchema agree on arbitrary title text", () => {
  const text = fc.oneof(
    fc.string({ unit: "binary-ascii", maxLength: 130 }),
    fc.string({
      unit: fc.constantFrom("a", "~", " ", "\t", "\u001b", "[", "m", "Ü"),
      maxLength: 24,
    }),
    fc.string({ unit: fc.constantFrom("a", " "), minLength: 117, maxLength: 123 }),
  );
  fc.assert(
    fc.property(text, (value) => {
      const title = { text: value, source: "user", messageIndices: [] };
      assert.equal(isValidTitle(title), v.is(SessionTitleSchema, title), JSON.stringify(value));
    }),
    { numRuns: RUNS * 8 },
  );
});
