// salvageSession() of a legacy version-2 file not migrated yet: its longest valid prefix becomes
// a new version-3 session; the file itself is never modified.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { portableSha256 } from "../src/port/sha256.ts";
import { SessionStore, workspaceHash } from "../src/loop/store.ts";
import {
  SessionBusyError,
  SessionFormatError,
  UnsupportedSessionError,
} from "../src/loop/errors.ts";
import { salvageSession, verifySession } from "../src/loop/verify.ts";
import type { Message } from "../src/loop/records/mod.ts";
import { assistant, toolResult, user } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;
const ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const LEGACY = `${COLLECTION}/${ID}.jsonl`;
const RESCUE = "/rescue";
const options = { sha256: portableSha256, toCollection: RESCUE };
const encoder = new TextEncoder();

function header(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    format: "loop-session",
    version: 2,
    id: ID,
    cwd: CWD,
    createdAt: "2025-06-01T10:00:00.000Z",
    updatedAt: "2025-06-02T11:00:00.000Z",
    permissionPreset: "workspace-write",
    ...overrides,
  };
}

/** A legacy file of `lines`: records as JSON, strings as they are. */
function text(lines: readonly unknown[]): string {
  return lines.map((line) => typeof line === "string" ? line : JSON.stringify(line)).join("\n") +
    "\n";
}

async function setup(content: string): Promise<{ fs: MemoryFs; store: SessionStore }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  await fs.mkdir(COLLECTION, { recursive: true, mode: 0o700 });
  await fs.writeFile(LEGACY, encoder.encode(content), { mode: 0o600 });
  return { fs, store: new SessionStore({ fs, agentDir: AGENT }) };
}

/** Salvages LEGACY; checks the file and its collection are unchanged and the copy verifies. */
async function salvaged(fs: MemoryFs, store: SessionStore, id?: string) {
  const before = fs.snapshotTree(AGENT);
  const bytes = await fs.readFile(LEGACY);
  const result = await salvageSession(fs, LEGACY, { ...options, ...(id ? { id } : {}) });
  assert.deepEqual(fs.snapshotTree(AGENT), before, "the source's collection is unchanged");
  assert.deepEqual(await fs.readFile(LEGACY), bytes, "the legacy file is unchanged");
  assert.equal((await verifySession(fs, result.dir, { sha256: portableSha256 })).ok, true);
  const rescued = await store.open(result.dir, { readOnly: true });
  const messages = rescued.messages;
  const saved = rescued.getHeader();
  await rescued.close();
  return { result, messages, header: saved };
}

test("salvageSession() of a damaged legacy file keeps its longest valid prefix as a new version-3 session", async () => {
  const history = [user("first question"), assistant("answer")];
  const { fs, store } = await setup(
    text([
      header(),
      ...history,
      { role: "user", content: "second", timestamp: "broken" },
      user("x"),
    ]),
  );
  const { result, messages, header: saved } = await salvaged(fs, store);
  assert.equal(result.kept, 2);
  assert.equal(result.dropped, 2);
  assert.deepEqual(result.droppedMetadata, []);
  assert.deepEqual(messages, history);
  assert.equal(result.dir, `${RESCUE}/${result.id}`);
  assert.equal(saved.id, result.id);
  assert.equal(saved.createdAt, "2025-06-01T10:00:00.000Z");
  assert.equal(saved.cwd, CWD);
  assert.equal(saved.permissionPreset, "workspace-write");
  const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(`${result.dir}/meta.json`)));
  assert.equal(meta.version, 3);
});

test("salvageSession() of a valid legacy file keeps every message, as its migration would", async () => {
  const history = [
    user("q"),
    assistant("a", [{ id: "c1", name: "read" }]),
    toolResult("c1", "read"),
  ];
  const content = text([header(), ...history]).replace(/\n$/, "\u00a0\n\n"); // trailing whitespace
  const { fs, store } = await setup(content);
  const { result, messages } = await salvaged(fs, store);
  assert.equal(result.kept, 3);
  assert.equal(result.dropped, 0);
  const migrated = await store.open(LEGACY, { readOnly: true });
  assert.deepEqual(messages, migrated.messages);
  await migrated.close();
});

const cases: [string, unknown[], number, number][] = [
  // [what, lines after the header, kept, dropped]
  ["a line that is not JSON", [user("a"), assistant("b"), "{broken", user("c")], 2, 2],
  [
    "tool calls unanswered before the bad line",
    [user("a"), assistant("b"), user("c"), assistant("d", [{ id: "k", name: "read" }]), "{"],
    3,
    2,
  ],
  ["tool calls unanswered at the end", [user("a"), assistant("b", [{ id: "k", name: "x" }])], 1, 1],
  ["a blank line inside", [user("a"), assistant("b"), "", user("c")], 2, 2],
  [
    "a line that is JSON only trimmed, not the last",
    [user("a"), assistant("b"), JSON.stringify(user("c")) + "\u00a0", assistant("d")],
    2,
    2,
  ],
  [
    "a tool result that answers no call",
    [user("a"), assistant("b"), toolResult("nobody", "read")],
    2,
    1,
  ],
  ["a truncated last line", [user("a"), assistant("b"), '{"role":"user","con'], 2, 1],
  ["no message", [], 0, 0],
];
for (const [what, lines, kept, dropped] of cases) {
  test(`salvageSession() of a legacy file with ${what} keeps the longest valid closed prefix`, async () => {
    const content = text([header(), ...lines]);
    const { fs, store } = await setup(
      what === "a truncated last line" ? content.replace(/\n$/, "") : content,
    );
    const { result, messages } = await salvaged(fs, store);
    assert.equal(result.kept, kept, what);
    assert.equal(result.dropped, dropped, what);
    assert.deepEqual(messages, (lines as Message[]).slice(0, kept), what);
  });
}

test("salvageSession() of a legacy file drops header metadata past the prefix, and ignores a cwd that is gone", async () => {
  const { fs } = await setup(
    text([
      header({
        cwd: "/gone",
        runtimeContexts: [{ userTurn: 1, content: "ctx", timestamp: 1 }],
        title: { text: "Named", source: "user", messageIndices: [0] },
      }),
      user("a"),
      assistant("b"),
      "{broken",
    ]),
  );
  const bytes = await fs.readFile(LEGACY);
  const result = await salvageSession(fs, LEGACY, options);
  assert.deepEqual(await fs.readFile(LEGACY), bytes);
  assert.equal(result.kept, 2);
  assert.deepEqual(result.droppedMetadata, ["runtimeContexts"]);
  const report = await verifySession(fs, result.dir, { sha256: portableSha256, checkCwd: false });
  assert.equal(report.ok, true, JSON.stringify(report.findings));
  const saved = report.meta?.header;
  assert.deepEqual(saved?.title, { text: "Named", source: "user", messageIndices: [0] });
  assert.equal(saved?.cwd, "/gone");
  assert.equal(saved?.runtimeContexts, undefined);
});

test("salvageSession() of a legacy file whose header cannot be read fails naming the file and field, writing nothing", async () => {
  const damaged: [string, string, new (...args: never[]) => Error, string][] = [
    ["an empty file", "", SessionFormatError, "header"],
    [
      "a header that is not JSON",
      "{oops\n" + JSON.stringify(user("a")) + "\n",
      SessionFormatError,
      "header",
    ],
    [
      "a header of another version",
      text([header({ version: 9 }), user("a")]),
      UnsupportedSessionError,
      "",
    ],
    [
      "a header with an invalid field",
      text([header({ createdAt: 5 }), user("a")]),
      SessionFormatError,
      "header.createdAt",
    ],
  ];
  for (const [what, content, type, path] of damaged) {
    const { fs } = await setup(content);
    const before = fs.snapshotTree("/");
    await assert.rejects(salvageSession(fs, LEGACY, options), (error: unknown) => {
      assert.ok(error instanceof type, `${what}: ${error}`);
      assert.equal((error as SessionFormatError).file, LEGACY, what);
      if (path !== "") assert.equal((error as SessionFormatError).path, path, what);
      return true;
    });
    assert.deepEqual(fs.snapshotTree("/"), before, `${what}: nothing written`);
  }
});

test("salvageSession() never reads a legacy file through a link", async () => {
  const { fs } = await setup(text([header(), user("a")]));
  await fs.rename(LEGACY, "/elsewhere.jsonl");
  await fs.symlink("/elsewhere.jsonl", LEGACY);
  const before = fs.snapshotTree("/");
  await assert.rejects(salvageSession(fs, LEGACY, options), (error: unknown) => {
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.file, LEGACY);
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("salvageSession() of a legacy file keeps the destination rules: an id in use is refused", async () => {
  const { fs } = await setup(text([header(), user("a"), "{"]));
  // Into its own collection under its own id: the legacy file itself uses it.
  const before = fs.snapshotTree("/");
  await assert.rejects(
    salvageSession(fs, LEGACY, { ...options, toCollection: COLLECTION, id: ID }),
    SessionBusyError,
  );
  assert.deepEqual(fs.snapshotTree("/"), before);
  // Into its own collection under a new id: the file stays as it is, beside the new session.
  const result = await salvageSession(fs, LEGACY, { ...options, toCollection: COLLECTION });
  assert.equal(result.kept, 1);
  const listed = await new SessionStore({ fs, agentDir: AGENT }).listDetailed(CWD);
  assert.deepEqual(listed.sessions.map((s) => s.id), [result.id]);
  assert.equal(listed.failures[0]?.path, LEGACY);
});
