import { test } from "node:test";
import assert from "node:assert/strict";
import * as v from "valibot";
import { SessionFormatError, UnsupportedSessionError } from "../src/loop/errors.ts";
import {
  DEFAULT_PERMISSION_PRESET,
  isModelEffort,
  isPermissionPreset,
  isSupportedHeader,
  MODEL_EFFORTS,
  newSessionHeader,
  parseModelRef,
  parseSessionHeader,
  PERMISSION_PRESETS,
  SessionHeaderSchema,
  validateSessionMetadata,
} from "../src/loop/records/mod.ts";
import { MAX_HEADER_NESTING } from "../src/loop/records/_validation.ts";
import { header, SESSION_ID, throwsAt, user } from "./loop_records_fixtures.ts";

function unsupported(value: unknown): UnsupportedSessionError {
  let caught: unknown;
  try {
    parseSessionHeader(value, { file: "/s/meta.json" });
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof UnsupportedSessionError, `expected unsupported, got ${caught}`);
  assert.ok(!(caught instanceof SessionFormatError), "unsupported must differ from invalid");
  return caught;
}

test("parseSessionHeader accepts a valid header and returns an equal copy", () => {
  const input = header();
  const parsed = parseSessionHeader(input);
  assert.deepEqual(parsed, input);
  assert.notEqual(parsed, input);
});

test("an unknown format is unsupported, not invalid", () => {
  const error = unsupported(header({ format: "other-session" }));
  assert.equal(error.format, "other-session");
  assert.equal(error.file, "/s/meta.json");
  assert.match(error.message, /other-session/);
});

test("versions other than the number 2 are unsupported", () => {
  assert.equal(unsupported(header({ version: 3 })).version, 3);
  assert.equal(unsupported(header({ version: 1 })).version, 1);
  assert.equal(unsupported(header({ version: "2" })).version, "2");
  unsupported(header({ version: undefined }));
  unsupported(header({ format: undefined }));
});

test("a header that is not an object is unsupported", () => {
  unsupported(null);
  unsupported([header()]);
  unsupported("loop-session");
});

test("the format and version are checked before any field", () => {
  unsupported(header({ version: 3, id: "BAD", permissionPreset: "admin" }));
});

test("isSupportedHeader looks only at the format and version", () => {
  assert.equal(isSupportedHeader(header({ id: "BAD" })), true);
  assert.equal(isSupportedHeader(header({ version: 3 })), false);
  assert.equal(isSupportedHeader(header({ format: "x" })), false);
  assert.equal(isSupportedHeader(null), false);
  assert.equal(isSupportedHeader(42), false);
});

test("runTimings is dropped whatever its value and the input is not modified", () => {
  // Nested past the header's limit too: it is never copied or written again.
  let deep: unknown = 0;
  for (let i = 0; i < 250; i++) deep = [deep];
  for (const runTimings of [[{ a: 1 }], "garbage", null, deep]) {
    const input = header({ runTimings });
    const parsed = parseSessionHeader(input);
    assert.equal("runTimings" in parsed, false);
    assert.deepEqual(input.runTimings, runTimings);
  }
});

test("unknown extra fields pass through untouched", () => {
  const extra = { nested: [1, { deep: true }] };
  const parsed = parseSessionHeader(header({ futureField: extra })) as unknown as Record<
    string,
    unknown
  >;
  assert.deepEqual(parsed.futureField, extra);
});

test("id must be 36 characters of lowercase hex and dashes", () => {
  parseSessionHeader(header({ id: SESSION_ID }));
  parseSessionHeader(header({ id: "-".repeat(36) }));
  const error = throwsAt(
    () => parseSessionHeader(header({ id: SESSION_ID.toUpperCase() })),
    "header.id",
  );
  assert.match(error.message, /header\.id/);
  assert.match(error.message, new RegExp(SESSION_ID.toUpperCase()));
  throwsAt(() => parseSessionHeader(header({ id: SESSION_ID.slice(1) })), "header.id");
  throwsAt(() => parseSessionHeader(header({ id: `${SESSION_ID}0` })), "header.id");
  throwsAt(() => parseSessionHeader(header({ id: 7 })), "header.id");
  throwsAt(() => parseSessionHeader(header({ id: undefined })), "header.id");
});

test("cwd must be an absolute path", () => {
  parseSessionHeader(header({ cwd: "/" }));
  parseSessionHeader(header({ cwd: "C:\\Users\\me" }));
  throwsAt(() => parseSessionHeader(header({ cwd: "relative/dir" })), "header.cwd");
  throwsAt(() => parseSessionHeader(header({ cwd: "" })), "header.cwd");
  throwsAt(() => parseSessionHeader(header({ cwd: 1 })), "header.cwd");
});

test("createdAt and updatedAt must be strings Date.parse accepts, canonical or not", () => {
  parseSessionHeader(header({ createdAt: "2026-01-01", updatedAt: "2026-01-01T10:00:00+02:00" }));
  throwsAt(() => parseSessionHeader(header({ createdAt: "yesterday" })), "header.createdAt");
  throwsAt(() => parseSessionHeader(header({ createdAt: 1767225600000 })), "header.createdAt");
  throwsAt(() => parseSessionHeader(header({ updatedAt: "not a date" })), "header.updatedAt");
  throwsAt(() => parseSessionHeader(header({ updatedAt: undefined })), "header.updatedAt");
});

test("a missing unread reads as false and a boolean is kept", () => {
  assert.equal(parseSessionHeader(header({ unread: undefined })).unread, false);
  assert.equal(parseSessionHeader(header({ unread: true })).unread, true);
});

test("a non-boolean unread rejects", () => {
  for (const unread of ["true", 1, null]) {
    throwsAt(() => parseSessionHeader(header({ unread })), "header.unread");
  }
});

test("pinnedAt must be a canonical ISO UTC timestamp", () => {
  const pinnedAt = "2026-03-04T05:06:07.089Z";
  assert.equal(parseSessionHeader(header({ pinnedAt })).pinnedAt, pinnedAt);
  assert.equal("pinnedAt" in parseSessionHeader(header()), false);
  for (
    const bad of [
      "2026-01-01",
      "2026-02-30T00:00:00.000Z",
      "2026-01-01T00:00:00Z",
      "2026-01-01T01:00:00.000+01:00",
      "soon",
      1,
      null,
    ]
  ) {
    const error = throwsAt(() => parseSessionHeader(header({ pinnedAt: bad })), "header.pinnedAt");
    assert.match(error.message, /pinnedAt/);
  }
});

test("permissionPreset is required and must be one of three values", () => {
  for (const preset of PERMISSION_PRESETS) {
    assert.equal(parseSessionHeader(header({ permissionPreset: preset })).permissionPreset, preset);
  }
  throwsAt(
    () => parseSessionHeader(header({ permissionPreset: undefined })),
    "header.permissionPreset",
  );
  throwsAt(
    () => parseSessionHeader(header({ permissionPreset: "admin" })),
    "header.permissionPreset",
  );
});

test("a stored title must be valid", () => {
  const title = { text: "Fix the build", source: "model", messageIndices: [0, 2] };
  assert.deepEqual(parseSessionHeader(header({ title })).title, title);
  throwsAt(
    () => parseSessionHeader(header({ title: { ...title, messageIndices: [2, 0] } })),
    "header.title.messageIndices",
  );
  throwsAt(
    () => parseSessionHeader(header({ title: { ...title, text: " x" } })),
    "header.title.text",
  );
  throwsAt(() => parseSessionHeader(header({ title: "Fix" })), "header.title");
});

test("model needs string provider and id and a known effort when present", () => {
  parseSessionHeader(header({ model: { provider: "", id: "" } }));
  for (const effort of MODEL_EFFORTS) {
    parseSessionHeader(header({ model: { provider: "p", id: "m", effort } }));
  }
  throwsAt(
    () => parseSessionHeader(header({ model: { provider: "p", id: "m", effort: "turbo" } })),
    "header.model.effort",
  );
  throwsAt(() => parseSessionHeader(header({ model: null })), "header.model");
  throwsAt(
    () => parseSessionHeader(header({ model: { provider: 1, id: "m" } })),
    "header.model.provider",
  );
  throwsAt(() => parseSessionHeader(header({ model: { provider: "p" } })), "header.model.id");
});

test("fields are checked in the order of the rules file", () => {
  throwsAt(
    () => parseSessionHeader(header({ id: "X", cwd: "x", permissionPreset: "x" })),
    "header.id",
  );
  throwsAt(() => parseSessionHeader(header({ cwd: "x", permissionPreset: "x" })), "header.cwd");
  throwsAt(
    () => parseSessionHeader(header({ permissionPreset: "x", model: null })),
    "header.permissionPreset",
  );
});

test("errors name the file and honour a JSON path prefix", () => {
  const error = throwsAt(
    () =>
      parseSessionHeader(header({ unread: "yes" }), { file: "/s/meta.json", path: "meta.header" }),
    "meta.header.unread",
  );
  assert.equal(error.file, "/s/meta.json");
  assert.match(error.message, /\/s\/meta\.json/);
  assert.equal(error.value, "yes");
});

test("header metadata arrays are shape-checked on parse without the history", () => {
  throwsAt(() => parseSessionHeader(header({ promptTimings: "x" })), "header.promptTimings");
  throwsAt(
    () =>
      parseSessionHeader(header({
        promptTimings: [{ userMessageIndex: 0, startedAt: 5, finishedAt: 4 }],
      })),
    "header.promptTimings[0].finishedAt",
  );
  throwsAt(
    () =>
      parseSessionHeader(
        header({ runtimeContexts: [{ userTurn: 0, content: " ", timestamp: 1 }] }),
      ),
    "header.runtimeContexts[0].content",
  );
  throwsAt(() => parseSessionHeader(header({ compactions: {} })), "header.compactions");
  throwsAt(
    () =>
      parseSessionHeader(header({
        systemPromptCheckpoints: [{ messageCount: 0, timestamp: 1, sections: { a: "x" } }],
      })),
    "header.systemPromptCheckpoints[0].messageCount",
  );
  // Indices beyond any history are only checked against the roles.
  parseSessionHeader(header({
    promptTimings: [{ userMessageIndex: 99, startedAt: 1, finishedAt: 2 }],
  }));
});

test("validateSessionMetadata checks runtime contexts, timings, compactions, then checkpoints", () => {
  const roles = ["user", "assistant"] as const;
  const bad = {
    runtimeContexts: [{ userTurn: 1, content: "ctx", timestamp: 1 }],
    promptTimings: [{ userMessageIndex: 1, startedAt: 1, finishedAt: 2 }],
    compactions: [{ bad: true }],
    systemPromptCheckpoints: [{ messageCount: 3, timestamp: 1, sections: { a: "x" } }],
  };
  const parsed = parseSessionHeader(header({
    runtimeContexts: [{ userTurn: 0, content: "ctx", timestamp: 1 }],
    promptTimings: [{ userMessageIndex: 0, startedAt: 1, finishedAt: 2 }],
    systemPromptCheckpoints: [{ messageCount: 2, timestamp: 1, sections: { a: "x" } }],
  }));
  validateSessionMetadata(parsed, roles);
  const order = [
    "header.runtimeContexts[0].userTurn",
    "header.promptTimings[0].userMessageIndex",
    "header.compactions[0].id",
    "header.systemPromptCheckpoints[0].messageCount",
  ];
  const keys = Object.keys(bad) as (keyof typeof bad)[];
  for (let i = 0; i < keys.length; i++) {
    const withBad = { ...parsed } as Record<string, unknown>;
    for (const key of keys.slice(i)) withBad[key] = bad[key];
    const error = throwsAt(
      () => validateSessionMetadata(withBad as never, roles, { file: "/s/meta.json" }),
      order[i] as string,
    );
    assert.equal(error.file, "/s/meta.json");
  }
});

test("newSessionHeader builds a version 2, read-only, read header", () => {
  const created = newSessionHeader({ id: SESSION_ID, cwd: "/w", now: "2026-05-06T07:08:09.000Z" });
  assert.deepEqual(created, {
    format: "loop-session",
    version: 2,
    id: SESSION_ID,
    cwd: "/w",
    createdAt: "2026-05-06T07:08:09.000Z",
    updatedAt: "2026-05-06T07:08:09.000Z",
    unread: false,
    permissionPreset: "read-only",
  });
  throwsAt(() => newSessionHeader({ id: SESSION_ID, cwd: "w", now: "2026-01-01" }), "header.cwd");
  throwsAt(() => newSessionHeader({ id: "nope", cwd: "/w", now: "2026-01-01" }), "header.id");
});

test("parseModelRef stores effort only when it is not default and drops other fields", () => {
  assert.deepEqual(parseModelRef({ provider: "p", id: "m", effort: "default" }), {
    provider: "p",
    id: "m",
  });
  assert.deepEqual(parseModelRef({ provider: "p", id: "m" }), { provider: "p", id: "m" });
  assert.deepEqual(parseModelRef({ provider: "p", id: "m", effort: "high", apiKey: "secret" }), {
    provider: "p",
    id: "m",
    effort: "high",
  });
  throwsAt(() => parseModelRef({ provider: "p", id: "m", effort: "ultra" }), "model.effort");
  throwsAt(() => parseModelRef(null), "model");
});

test("effort and preset guards accept exactly the listed values", () => {
  assert.deepEqual([...MODEL_EFFORTS], [
    "default",
    "off",
    "minimal",
    "low",
    "medium",
    "high",
    "xhigh",
    "max",
  ]);
  for (const effort of MODEL_EFFORTS) assert.equal(isModelEffort(effort), true);
  for (const bad of ["DEFAULT", "", "extreme", 1, null, undefined]) {
    assert.equal(isModelEffort(bad), false);
  }
  assert.deepEqual([...PERMISSION_PRESETS], ["read-only", "workspace-write", "danger-full-access"]);
  for (const preset of PERMISSION_PRESETS) assert.equal(isPermissionPreset(preset), true);
  for (const bad of ["Read-Only", "full", 0, null]) assert.equal(isPermissionPreset(bad), false);
  assert.equal(DEFAULT_PERMISSION_PRESET, "read-only");
});

test("SessionHeaderSchema agrees with parseSessionHeader", () => {
  const input = header({ runTimings: [], extra: 1, unread: undefined });
  const output = v.parse(SessionHeaderSchema, input);
  assert.deepEqual(output, parseSessionHeader(input));
  for (
    const bad of [
      header({ version: 3 }),
      header({ pinnedAt: "2026-01-01" }),
      header({ unread: null }),
      header({ promptTimings: [{ userMessageIndex: 0, startedAt: 2, finishedAt: 1 }] }),
    ]
  ) {
    assert.equal(v.safeParse(SessionHeaderSchema, bad).success, false);
    assert.throws(() => parseSessionHeader(bad));
  }
});

test("a header parsed from JSON survives a save and load unchanged", () => {
  const stored = header({
    pinnedAt: "2026-01-01T00:00:00.000Z",
    model: { provider: "p", id: "m", effort: "low" },
    title: { text: "T", source: "user", messageIndices: [] },
    promptTimings: [{ userMessageIndex: 0, startedAt: 1, finishedAt: 2 }],
  });
  const once = parseSessionHeader(JSON.parse(JSON.stringify(stored)));
  const twice = parseSessionHeader(JSON.parse(JSON.stringify(once)));
  assert.equal(JSON.stringify(twice), JSON.stringify(stored));
  validateSessionMetadata(twice, [JSON.parse(JSON.stringify(user())).role]);
});

/** An array holding an array ... `levels` arrays deep around 1. */
function nestedArrays(levels: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < levels; i++) value = [value];
  return value;
}

test("a header nested deeper than MAX_HEADER_NESTING levels is refused by the path of its first too-deep value", () => {
  // The header is level 1 and its field's outermost array level 2: 199 arrays fit, 200 do not.
  const fits = header({ futureField: nestedArrays(MAX_HEADER_NESTING - 1) } as never);
  assert.deepEqual(parseSessionHeader(fits), fits);
  const deep = { futureField: nestedArrays(MAX_HEADER_NESTING) };
  const error = throwsAt(
    () => parseSessionHeader(header(deep as never), { file: "/s/meta.json" }),
    `header.futureField${"[0]".repeat(MAX_HEADER_NESTING - 1)}`,
  );
  assert.equal(error.file, "/s/meta.json");
  assert.match(error.message, /nested deeper than 200 levels/);
  // Any depth is judged without a stack overflow, objects as arrays.
  let object: Record<string, unknown> = {};
  const root = object;
  for (let i = 0; i < 100_000; i++) object = (object.next = {}) as Record<string, unknown>;
  const far = throwsAt(
    () => parseSessionHeader(header({ model: { provider: "p", id: "m", extra: root } } as never)),
    `header.model.extra${".next".repeat(MAX_HEADER_NESTING - 2)}`,
  );
  assert.ok(far instanceof SessionFormatError);
});

test("SessionManager.createDraft keeps the header as parsed: an obsolete runTimings is never written, a missing unread reads as false", async () => {
  const { MemoryFs } = await import("../adapters/memory.ts");
  const { SessionManager } = await import("../src/loop/session_manager.ts");
  const { portableSha256 } = await import("../src/port/sha256.ts");
  const fs = new MemoryFs();
  await fs.mkdir("/work/p", { recursive: true });
  const dir = `/coll/${SESSION_ID}`;
  const given = { ...header({ cwd: "/work/p" }), runTimings: [{ obsolete: true }] } as Record<
    string,
    unknown
  >;
  delete given.unread;
  const draft = SessionManager.createDraft({
    context: { fs, sha256: portableSha256, now: Date.now, durability: "full" },
    dir,
    collectionDir: "/coll",
  }, given as never);
  const before = draft.getHeader() as unknown as Record<string, unknown>;
  assert.equal("runTimings" in before, false);
  assert.equal(before.unread, false);
  assert.equal(draft.unread, false);
  await draft.commit([user("hi") as never]);
  await draft.close();
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(`${dir}/meta.json`)));
  assert.equal("runTimings" in meta.header, false);
  assert.equal(meta.header.unread, false); // written, as every save writes it
  // The caller's object is not changed.
  assert.deepEqual(given.runTimings, [{ obsolete: true }]);
});
