import { test } from "node:test";
import assert from "node:assert/strict";
import { runInNewContext } from "node:vm";
import * as v from "valibot";
import { InvalidArgumentError, SessionFormatError, ToolPairingError } from "../src/loop/errors.ts";
import {
  type Message,
  MessageSchema,
  MessageValidator,
  STOP_REASONS,
  type ToolResultMessage,
  validateMessages,
  withToolDisplayName,
} from "../src/loop/records/mod.ts";
import { assistant, call, result, throwsAt, throwsPairing, user } from "./loop_records_fixtures.ts";

function valid(messages: unknown[]): void {
  validateMessages(messages);
  for (const message of messages) assert.equal(v.is(MessageSchema, message), true);
}

function invalidAt(messages: unknown[], path: string): SessionFormatError {
  const error = throwsAt(() => validateMessages(messages), path);
  assert.ok(!(error instanceof ToolPairingError), `expected a shape error, got ${error.message}`);
  assert.equal(v.is(MessageSchema, messages[messages.length - 1]), false);
  return error;
}

test("validateMessages rejects a value that is not an array", () => {
  throwsAt(() => validateMessages({ 0: user() }), "messages");
  throwsAt(() => validateMessages("[]"), "messages");
  validateMessages([]);
});

test("each message must be an object", () => {
  for (const bad of [null, 5, "user", [user()]]) invalidAt([bad], "messages[0]");
});

test("MessageValidator refuses in-memory values JSON writes as something else; null-prototype objects are plain", () => {
  const hidden = (value: Record<string, unknown>, field: string) =>
    Object.defineProperty(value, field, { value: value[field], enumerable: false });
  const inherits = (value: Record<string, unknown>, field: string) => {
    const child = Object.assign(Object.create({ [field]: value[field] }), value);
    delete child[field];
    return child;
  };
  const cases: [unknown[], string][] = [
    [[user(), assistant(undefined, "stop", { usage: new Number(1) })], "messages[1].usage"],
    [[user(new String("hi"))], "messages[0].content"],
    [
      [user(), assistant([call("c1", "read", new String("x"))], "toolUse")],
      "messages[1].content[0].arguments",
    ],
    [
      [user([Object.assign(new Boolean(true), { type: "text", text: "a" })])],
      "messages[0].content[0]",
    ],
    [[Object.assign(new Number(1), user())], "messages[0]"],
    [[inherits(user(), "role")], "messages[0]"],
    [[user(), inherits(assistant(), "api")], "messages[1]"],
    [[hidden(user(), "timestamp")], "messages[0].timestamp"],
    [[hidden(user(), "role")], "messages[0].role"],
    [[user(), hidden(assistant(), "stopReason")], "messages[1].stopReason"],
    [[user(), assistant(), hidden(result("x"), "toolCallId")], "messages[2].toolCallId"],
    [
      [user([hidden({ type: "image", data: "x", mimeType: "i" }, "mimeType")])],
      "messages[0].content[0].mimeType",
    ],
    [
      [user(), assistant([hidden({ type: "thinking", thinking: "t" }, "thinking")])],
      "messages[1].content[0].thinking",
    ],
    [
      [user(), assistant([hidden(call("c1"), "arguments")], "toolUse")],
      "messages[1].content[0].arguments",
    ],
  ];
  const rawJson = (JSON as { rawJSON?: (text: string) => unknown }).rawJSON;
  if (rawJson !== undefined) {
    // Written as its raw text (`1`), not as the object it is in memory.
    cases.push([
      [user(), assistant(undefined, "stop", { usage: rawJson("1") })],
      "messages[1].usage",
    ]);
  }
  for (const [messages, path] of cases) {
    const error = throwsAt(() => validateMessages(messages), path);
    assert.ok(!(error instanceof ToolPairingError), error.message);
  }
  // Objects without a prototype are written as they are.
  const bare = <T extends object>(value: T): T => Object.assign(Object.create(null), value);
  valid([
    bare(user([bare({ type: "text", text: "a" })])),
    bare(assistant([bare(call("c1"))], "toolUse", { usage: bare({}) })),
    bare(result("c1")),
  ]);
  // Plain objects made in another realm are written as they are too.
  const foreign = runInNewContext(
    `[{ role: "user", content: [{ type: "text", text: "a" }], timestamp: 1 }]`,
  ) as unknown[];
  valid(foreign);
  valid([...foreign, assistant(undefined, "stop", { usage: runInNewContext("({})") })]);
  // A foreign class instance is not.
  const instance = runInNewContext(
    `class Message { constructor() { this.role = "user"; this.content = "a"; this.timestamp = 1; } }
    new Message()`,
  );
  throwsAt(() => validateMessages([instance]), "messages[0]");
});

test("timestamps are finite numbers, negative and fractional values included", () => {
  valid([user("a", -5), user("b", 1.5), user("c", 0)]);
  for (const bad of ["1", Number.NaN, Number.POSITIVE_INFINITY, null, undefined]) {
    invalidAt([{ role: "user", content: "a", timestamp: bad }], "messages[0].timestamp");
  }
});

test("message timestamps are not checked for order", () => {
  valid([user("later", 500), assistant([], "stop", { timestamp: 100 }), user("earlier", -1)]);
});

test("shape errors name the field and the value that failed", () => {
  const error = invalidAt(
    [user(), assistant([call("c1", "read", [1, 2])], "toolUse")],
    "messages[1].content[0].arguments",
  );
  assert.match(error.message, /at messages\[1\]\.content\[0\]\.arguments: \[1,2\]$/);
  assert.deepEqual(error.value, [1, 2]);
});

test("roles are user, assistant or toolResult", () => {
  for (const role of ["system", "tool", "", undefined]) {
    const error = invalidAt([{ role, content: "x", timestamp: 1 }], "messages[0].role");
    assert.match(error.message, /unsupported role/);
  }
});

test("user content is a string or an array of text and image blocks", () => {
  valid([user("plain")]);
  valid([user([])]);
  valid([
    user([{ type: "text", text: "see" }, { type: "image", data: "!!not base64", mimeType: "x" }]),
  ]);
  invalidAt([user(5)], "messages[0].content");
  invalidAt([user(null)], "messages[0].content");
  invalidAt([user([{ type: "thinking", thinking: "t" }])], "messages[0].content[0].type");
  invalidAt([user([call("c1")])], "messages[0].content[0].type");
  invalidAt([user(["text"])], "messages[0].content[0]");
  invalidAt([user([{ type: "text", text: 1 }])], "messages[0].content[0].text");
  invalidAt([user([{ type: "image", mimeType: "image/png" }])], "messages[0].content[0].data");
  invalidAt(
    [user([{ type: "image", data: "AA==", mimeType: 1 }])],
    "messages[0].content[0].mimeType",
  );
});

test("assistant content is an array of text, thinking and tool call blocks", () => {
  valid([user(), assistant([])]);
  valid([user(), assistant([{ type: "thinking", thinking: "hm" }, { type: "text", text: "ok" }])]);
  invalidAt([user(), assistant("text" as never)], "messages[1].content");
  invalidAt(
    [user(), assistant([{ type: "image", data: "", mimeType: "" }])],
    "messages[1].content[0].type",
  );
  invalidAt(
    [user(), assistant([{ type: "thinking", thinking: null }])],
    "messages[1].content[0].thinking",
  );
  invalidAt([user(), assistant([{ type: "text" }])], "messages[1].content[0].text");
});

test("tool calls need string id and name and object arguments", () => {
  invalidAt(
    [user(), assistant([{ ...call("c1"), id: 1 }], "toolUse")],
    "messages[1].content[0].id",
  );
  invalidAt(
    [user(), assistant([{ ...call("c1"), name: null }], "toolUse")],
    "messages[1].content[0].name",
  );
  for (const args of [[1, 2], null, "{}", 3, undefined]) {
    const error = invalidAt(
      [
        user(),
        assistant([{ type: "text", text: "x" }, {
          type: "toolCall",
          id: "c",
          name: "n",
          arguments: args,
        }]),
      ],
      "messages[1].content[1].arguments",
    );
    assert.match(error.message, /messages\[1\]\.content\[1\]\.arguments/);
  }
});

test("assistants need a known stop reason, identity strings and an object usage", () => {
  for (const stopReason of STOP_REASONS) valid([user(), assistant([], stopReason)]);
  invalidAt([user(), assistant([], "done")], "messages[1].stopReason");
  invalidAt([user(), assistant([], "stop", { model: 1 })], "messages[1].model");
  invalidAt([user(), assistant([], "stop", { provider: undefined })], "messages[1].provider");
  invalidAt([user(), assistant([], "stop", { api: null })], "messages[1].api");
  invalidAt([user(), assistant([], "stop", { usage: null })], "messages[1].usage");
  invalidAt([user(), assistant([], "stop", { usage: "lots" })], "messages[1].usage");
  valid([user(), assistant([], "stop", { usage: {} })]);
  // Any object, as Loop's loader asks (`typeof usage === "object"`): an array too.
  valid([user(), assistant([], "stop", { usage: [] })]);
});

test("an assistant's model error is kept as stored, unchecked, as Loop's loader does", () => {
  valid([user(), assistant([], "error", { errorMessage: "rate limited" })]);
  valid([user(), assistant([], "error", { errorMessage: 429 })]);
  valid([user(), assistant([], "error", { errorMessage: null })]);
  valid([user(), assistant([], "stop", { errorMessage: { code: 500 } })]);
});

test("tool results need text or image content, ids, a name and a boolean isError", () => {
  const pair = [user(), assistant([call("c1")], "toolUse")];
  valid([...pair, result("c1", "read", { content: [{ type: "image", data: "", mimeType: "" }] })]);
  invalidAt([...pair, result("c1", "read", { content: "done" })], "messages[2].content");
  invalidAt(
    [...pair, result("c1", "read", { content: [{ type: "thinking", thinking: "" }] })],
    "messages[2].content[0].type",
  );
  invalidAt([...pair, result("c1", "read", { toolCallId: 1 })], "messages[2].toolCallId");
  invalidAt([...pair, result("c1", "read", { toolName: undefined })], "messages[2].toolName");
  invalidAt([...pair, result("c1", "read", { isError: "false" })], "messages[2].isError");
});

test("tool result details are opaque", () => {
  const pair = [user(), assistant([call("c1")], "toolUse")];
  for (const details of [[1], "x", null, 0, { loopDisplayName: 5 }, { any: { thing: true } }]) {
    valid([...pair, result("c1", "read", { details })]);
  }
});

test("unknown extra fields on messages and blocks pass", () => {
  valid([
    { ...user([{ type: "text", text: "x", cacheControl: 1 }]), meta: { a: 1 } },
    assistant([{ type: "thinking", thinking: "t", signature: "s" }], "stop", { responseId: "r" }),
  ]);
});

test("completed tool calls are answered by matching results in any order", () => {
  valid([
    user(),
    assistant([call("a", "read"), call("b", "write")], "toolUse"),
    result("b", "write"),
    result("a", "read"),
    assistant([{ type: "text", text: "done" }]),
    user(),
    assistant([call("a", "read")], "toolUse"),
    result("a", "read"),
  ]);
});

test("tool calls register even when the stop reason is stop", () => {
  throwsPairing(() => validateMessages([user(), assistant([call("a")], "stop")]), 1, /Unfinished/);
  valid([user(), assistant([call("a")], "stop"), result("a")]);
});

test("a duplicate tool call id rejects", () => {
  const error = throwsPairing(
    () => validateMessages([user(), assistant([call("a"), call("a")], "toolUse")]),
    1,
    /Duplicate tool call ID/,
  );
  assert.equal(error.path, "messages[1].content[1].id");
});

test("calls of error and aborted assistants are excluded from pairing", () => {
  for (const stopReason of ["error", "aborted"]) {
    valid([user(), assistant([call("a")], stopReason), user()]);
    valid([user(), assistant([call("a"), call("a")], stopReason)]);
    const error = throwsPairing(
      () => validateMessages([user(), assistant([call("a")], stopReason), result("a")]),
      2,
      /Unmatched tool result/,
    );
    assert.equal(error.path, "messages[2].toolCallId");
  }
});

test("a result with an unknown id, a second result, or another tool name is unmatched", () => {
  throwsPairing(() => validateMessages([user(), result("a")]), 1, /Unmatched/);
  throwsPairing(
    () => validateMessages([user(), assistant([call("a")], "toolUse"), result("a"), result("a")]),
    3,
    /Unmatched/,
  );
  const error = throwsPairing(
    () =>
      validateMessages([user(), assistant([call("a", "read")], "toolUse"), result("a", "write")]),
    2,
    /Unmatched tool result.*"read"/,
  );
  assert.equal(error.path, "messages[2].toolName");
  assert.equal(error.value, "write");
});

test("a new turn while calls are pending is unfinished", () => {
  const open = [user(), assistant([call("a"), call("b")], "toolUse"), result("a")];
  throwsPairing(
    () => validateMessages([...open, user()]),
    3,
    /Unfinished tool calls.*"b".*messages\[1\]/,
  );
  throwsPairing(() => validateMessages([...open, assistant()]), 3, /Unfinished/);
  throwsPairing(() => validateMessages([...open, assistant([], "error")]), 3, /Unfinished/);
});

test("calls still pending at the end of the history are unfinished", () => {
  const error = throwsPairing(
    () => validateMessages([user(), assistant([{ type: "text", text: "" }, call("a")], "toolUse")]),
    1,
    /Unfinished tool calls; automatic replay is not supported/,
  );
  assert.equal(error.path, "messages[1].content[1].id");
});

test("pairing errors are format errors that name the file", () => {
  let caught: unknown;
  try {
    validateMessages([user(), result("zz")], { file: "/s/messages.jsonl" });
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ToolPairingError);
  assert.ok(caught instanceof SessionFormatError);
  assert.equal(caught.file, "/s/messages.jsonl");
  assert.match(caught.message, /"zz"/);
});

test("MessageValidator validates incrementally from a first index", () => {
  const validator = new MessageValidator({ firstIndex: 10, file: "m.jsonl" });
  validator.push(user(), 10);
  validator.push(assistant([call("a")], "toolUse"), 11);
  assert.deepEqual(validator.pendingToolCallIds, ["a"]);
  assert.equal(validator.nextIndex, 12);
  const error = throwsAt(
    () => validator.push(result("a", "read", { isError: 0 }), 12),
    "messages[12].isError",
  );
  assert.equal(error.file, "m.jsonl");
  validator.push(result("a"), 12);
  validator.finish();
});

test("push rejects an index that does not follow the history", () => {
  const validator = new MessageValidator();
  assert.throws(() => validator.push(user(), 1), InvalidArgumentError);
  validator.push(user(), 0);
  assert.throws(() => validator.push(user(), 0), InvalidArgumentError);
  assert.throws(() => new MessageValidator({ firstIndex: -1 }), InvalidArgumentError);
});

test("clone snapshots the pending calls independently", () => {
  const committed = new MessageValidator();
  committed.push(user(), 0);
  committed.push(assistant([call("a")], "toolUse"), 1);
  const attempt = committed.clone();
  attempt.push(result("a"), 2);
  attempt.finish();
  assert.deepEqual(committed.pendingToolCallIds, ["a"]);
  assert.equal(committed.nextIndex, 2);
  assert.throws(() => committed.finish(), ToolPairingError);
  committed.push(result("a"), 2);
  committed.finish();
});

test("a push that throws leaves the validator unchanged", () => {
  const validator = new MessageValidator();
  validator.push(user(), 0);
  assert.throws(
    () => validator.push(assistant([call("a"), call("a")], "toolUse"), 1),
    ToolPairingError,
  );
  assert.deepEqual(validator.pendingToolCallIds, []);
  assert.throws(() => validator.push(assistant([call("b")], "bad"), 1), SessionFormatError);
  assert.deepEqual(validator.pendingToolCallIds, []);
  assert.equal(validator.nextIndex, 1);
  validator.push(assistant([call("b")], "toolUse"), 1);
  assert.throws(() => validator.push(result("b", "other"), 2), ToolPairingError);
  assert.deepEqual(validator.pendingToolCallIds, ["b"]);
  validator.push(result("b"), 2);
  validator.finish();
});

test("finish does not change the validator", () => {
  const validator = new MessageValidator();
  validator.push(user(), 0);
  validator.push(assistant([call("a")], "toolUse"), 1);
  assert.throws(() => validator.finish(), ToolPairingError);
  assert.throws(() => validator.finish(), ToolPairingError);
  validator.push(result("a"), 2);
  validator.finish();
  validator.push(user(), 3);
  validator.finish();
});

test("withToolDisplayName labels tool results and leaves other messages alone", () => {
  const plain = user() as unknown as Message;
  assert.equal(withToolDisplayName(plain, "srv · tool"), plain);
  const bare = result("a", "mcp_x") as unknown as ToolResultMessage;
  assert.equal(withToolDisplayName(bare, undefined), bare);
  const labelled = withToolDisplayName(bare, "srv · tool");
  assert.notEqual(labelled, bare);
  assert.deepEqual(labelled.details, { loopDisplayName: "srv · tool" });
  assert.equal("details" in bare, false);
});

test("withToolDisplayName keeps a historical label and merges plain-object details", () => {
  const kept = result("a", "t", {
    details: { loopDisplayName: "old · name", x: 1 },
  }) as unknown as ToolResultMessage;
  assert.equal(withToolDisplayName(kept, "new · name"), kept);
  const merged = result("a", "t", {
    details: { x: 1, loopDisplayName: 7 },
  }) as unknown as ToolResultMessage;
  const out = withToolDisplayName(merged, "srv · t");
  assert.deepEqual(out.details, { x: 1, loopDisplayName: "srv · t" });
  assert.deepEqual(merged.details, { x: 1, loopDisplayName: 7 });
  for (const details of [[1, 2], "text", 3, null]) {
    const message = result("a", "t", { details }) as unknown as ToolResultMessage;
    assert.deepEqual(withToolDisplayName(message, "s · t").details, { loopDisplayName: "s · t" });
  }
});

test("a display name does not change pairing", () => {
  const labelled = withToolDisplayName(result("a", "mcp_x") as unknown as Message, "srv · x");
  valid([user(), assistant([call("a", "mcp_x")], "toolUse"), labelled]);
  throwsPairing(
    () =>
      validateMessages([
        user(),
        assistant([call("a", "mcp_x")], "toolUse"),
        withToolDisplayName(result("a", "srv · x") as unknown as Message, "srv · x"),
      ]),
    2,
    /Unmatched/,
  );
});
