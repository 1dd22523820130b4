// Runtime context snapshots are checked against the number of user messages: a caller that counts
// them already (an append knows its user rounds) passes the count, so the check does not grow with
// the history, and refuses exactly what the check over every role refuses, with the same error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { InvalidArgumentError, SessionFormatError } from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import {
  type MessageRole,
  type RuntimeContextSnapshot,
  validateRuntimeContexts,
} from "../src/loop/records/mod.ts";
import { assistant, toolResult, user } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";

function snapshot(userTurn: number, content = "context"): RuntimeContextSnapshot {
  return { userTurn, content, timestamp: 1 } as RuntimeContextSnapshot;
}

/** What `run` throws, as the fields a caller sees (or "ok"). */
function outcome(run: () => void): unknown {
  try {
    run();
    return "ok";
  } catch (error) {
    assert.ok(error instanceof SessionFormatError);
    return {
      name: error.name,
      message: error.message,
      file: error.file,
      path: error.path,
      value: (error as { value?: unknown }).value,
    };
  }
}

const histories: MessageRole[][] = [
  [],
  ["assistant"],
  ["user"],
  ["user", "assistant", "toolResult", "user", "assistant"],
  ["user", "user", "user"],
];
const values: unknown[] = [
  undefined,
  [],
  [snapshot(0)],
  [snapshot(0), snapshot(1)],
  [snapshot(0), snapshot(2)],
  [snapshot(1), snapshot(1)],
  [snapshot(3)],
  [snapshot(-1)],
  [snapshot(0, " ")],
  [{ ...snapshot(5), skills: "none" }],
  "not an array",
];

test("validateRuntimeContexts given the user-turn count refuses what it refuses given the roles, with the same error", () => {
  for (const roles of histories) {
    const turns = roles.filter((role) => role === "user").length;
    for (const value of values) {
      const location = { file: "/s/meta.json", path: "header.runtimeContexts" };
      assert.deepEqual(
        outcome(() => validateRuntimeContexts(value, turns, location)),
        outcome(() => validateRuntimeContexts(value, roles, location)),
        `${JSON.stringify(value)} on ${JSON.stringify(roles)}`,
      );
    }
  }
});

test("append() with runtime contexts refuses a snapshot past the user messages, and keeps one that names one", async () => {
  const memory = new MemoryFs();
  await memory.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs: memory, agentDir: AGENT, process: null });
  const session = await store.create(CWD);
  await session.commit([user("q0"), assistant("a0")]);
  await assert.rejects(
    session.append([assistant("a1")], [snapshot(0), snapshot(1)]),
    (error: Error) =>
      error instanceof SessionFormatError &&
      error.message.startsWith(
        "Invalid session runtime context: userTurn must name one of the 1 user message(s) at",
      ) &&
      error.path === "header.runtimeContexts[1].userTurn" &&
      error.file === session.getSessionFile(),
  );
  await session.append([assistant("a1", [{ id: "c1", name: "read" }]), toolResult("c1", "read")]);
  await session.append([user("q1")], [snapshot(0), snapshot(1)]);
  assert.deepEqual(session.getRuntimeContexts(), [snapshot(0), snapshot(1)]);
  const reopened = await store.open(session.getSessionPath(), { readOnly: true });
  assert.deepEqual(reopened.getRuntimeContexts(), [snapshot(0), snapshot(1)]);
  await reopened.close();
});

test("a user-message count that is not a non-negative safe integer is an InvalidArgumentError", () => {
  for (const count of [-1, 1.5, 6.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
    for (const value of [[snapshot(5)], undefined]) {
      assert.throws(
        () => validateRuntimeContexts(value, count, { file: "/s/meta.json" }),
        (error: unknown) => {
          assert.ok(error instanceof InvalidArgumentError, `${count}: ${error}`);
          assert.equal(error.argument, "roles");
          assert.equal(error.file, "/s/meta.json");
          return true;
        },
        String(count),
      );
    }
  }
  // 0 and a count above every snapshot's turn are counts.
  validateRuntimeContexts([], 0);
  validateRuntimeContexts([snapshot(5)], 6);
});
