// Error reports name the file and the field at fault, and keep stored values short: a damaged
// delete journal (intent.json) names the field that is wrong; a huge stored value is shown short.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs, SimulatedCrash } from "../adapters/memory.ts";
import {
  CorruptSessionError,
  preview,
  SessionFormatError,
  UnsupportedSessionError,
} from "../src/loop/errors.ts";
import { LayoutRecordError, loadSessionTree, parseSessionManifest } from "../layout.ts";
import { newRoot } from "./layout_fixtures.ts";
import { stateEvalSeal } from "../src/layout/records.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation } from "./_fixtures.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function storeOn(fs: MemoryFs): SessionStore {
  return new SessionStore({ fs, agentDir: AGENT });
}

/**
 * A collection with two sessions, `keep` and the archived `target`, after a crash inside the
 * delete of `target` that left it staged with its journal and no commit marker.
 */
async function stagedDelete(): Promise<{
  fs: MemoryFs;
  staging: string;
  target: string;
  keep: string;
  collection: string;
}> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = storeOn(fs);
  const ids: string[] = [];
  let collection = "";
  for (const tag of ["keep", "target"]) {
    const session = await store.create(CWD);
    await session.commit(conversation(2, tag));
    ids.push(session.id);
    collection = session.getSessionPath().slice(0, -session.id.length - 1);
    await session.close();
  }
  const [keep, target] = ids as [string, string];
  await store.archive.set(CWD, [target], true);
  fs.syncAll();
  for (let n = 1; n < 500; n++) {
    const trial = fs.clone();
    trial.crashAfter(n);
    try {
      await storeOn(trial).archive.delete(CWD, [target]);
    } catch (error) {
      if (!(error instanceof SimulatedCrash) && !trial.crashTriggered) throw error;
    }
    const crashed = trial.crash({ tailMode: "whole", extraJournal: "all" });
    const name = (await crashed.readDir(collection))
      .map((entry) => entry.name)
      .find((entry) => entry.startsWith(".delete-"));
    if (name === undefined) continue;
    const inner = (await crashed.readDir(`${collection}/${name}`)).map((entry) => entry.name);
    if (inner.includes("intent.json") && !inner.includes("committed") && inner.includes(target)) {
      return { fs: crashed, staging: `${collection}/${name}`, target, keep, collection };
    }
  }
  throw new Error("no crash state with a staged, uncommitted delete");
}

/** The ways a journal is damaged, and the JSON path each report must name. */
const DAMAGE:
  readonly (readonly [string, (journal: Record<string, unknown>) => unknown, string])[] = [
    ["ids[0] a number", (j) => ({ ...j, ids: [1] }), "ids[0]"],
    ["operation missing", ({ operation: _, ...rest }) => rest, "operation"],
    ["operation another", (j) => ({ ...j, operation: "rename" }), "operation"],
    ["archived an object", (j) => ({ ...j, archived: {} }), "archived"],
    ["membersBefore[1] not an id", (j) => ({
      ...j,
      membersBefore: [...(j.membersBefore as string[]), "nope"],
    }), "membersBefore[1]"],
    ["entries[0] outside the collection", (j) => ({ ...j, entries: ["../x"] }), "entries[0]"],
    ["entries[1] not the journal's", (j) => ({
      ...j,
      entries: [...(j.entries as string[]), "0000aaaa-0000-4000-8000-00000000beef"],
    }), "entries[1]"],
    ["an array", () => [], ""],
  ];

function reportsField(file: string, path: string, label: string) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof CorruptSessionError, `${label}: ${error}`);
    assert.equal(error.file, file, label);
    const cause = error.cause;
    assert.ok(cause instanceof SessionFormatError, `${label}: cause ${cause}`);
    assert.equal(cause.file, file, label);
    assert.equal(cause.path, path, label);
    if (path !== "") assert.ok(error.message.includes(` at ${path}`), `${label}: ${error.message}`);
    assert.ok(error.message.length < 400, `${label}: ${error.message.length} characters`);
    return true;
  };
}

test("a damaged delete journal is reported with the file and the JSON path of the field", async () => {
  const base = await stagedDelete();
  const file = `${base.staging}/intent.json`;
  const journal = JSON.parse(decoder.decode(await base.fs.readFile(file)));
  assert.equal(journal.membersBefore.length, 1);
  for (const [label, damage, path] of DAMAGE) {
    const fs = base.fs.clone();
    await fs.writeFile(file, encoder.encode(JSON.stringify(damage(journal))));
    const tree = fs.snapshotTree("/");
    const staged = fs.snapshotTree(base.staging);
    const store = storeOn(fs);
    for (const fast of [false, true]) {
      const listed = await store.listDetailed(CWD, undefined, { fast });
      // Reported as before: the staged session a failure naming the journal, the other listed.
      assert.deepEqual(listed.sessions.map((s) => s.id), [base.keep], label);
      assert.deepEqual(listed.failures.map((f) => [f.id, f.path]), [[base.target, file]], label);
      reportsField(file, path, label)(listed.failures[0]?.error);
    }
    const meta = `${base.collection}/${base.target}/meta.json`;
    await assert.rejects(store.open(meta, { readOnly: true }), reportsField(file, path, label));
    assert.deepEqual(fs.snapshotTree("/"), tree, `${label}: reading wrote`);
    // Recovery still refuses it the same way and keeps the staging directory for inspection.
    await assert.rejects(store.open(meta), reportsField(file, path, label));
    await assert.rejects(
      new SessionStore({ fs, agentDir: AGENT, sessionDir: base.collection }).archive.delete(
        undefined,
        [base.target],
        { archivedOnly: false },
      ),
      reportsField(file, path, label),
    );
    assert.deepEqual((await store.cleanup(CWD)).kept, [base.staging], label);
    assert.deepEqual(fs.snapshotTree(base.staging), staged, `${label}: the staging was changed`);
  }
});

test("a delete journal that is not JSON names the file, and a missing one reports as before", async () => {
  const base = await stagedDelete();
  const file = `${base.staging}/intent.json`;
  const fs = base.fs.clone();
  await fs.writeFile(file, encoder.encode("{"));
  const listed = await storeOn(fs).listDetailed(CWD);
  reportsField(file, "", "not JSON")(listed.failures[0]?.error);
  // A field nested 200,000 levels deep is named like any other (its value is not shown).
  const deep = "[".repeat(200_000) + "]".repeat(200_000);
  await fs.writeFile(file, encoder.encode(`{"operation":"delete","ids":[${deep}]}`));
  reportsField(file, "ids[0]", "deep")((await storeOn(fs).listDetailed(CWD)).failures[0]?.error);
  await fs.remove(file);
  const missing = (await storeOn(fs).listDetailed(CWD)).failures[0]?.error;
  assert.ok(missing instanceof CorruptSessionError);
  assert.equal(missing.file, file);
  assert.equal(missing.cause, undefined);
});

// ---------------------------------------------------------------------------------------------
// Stored values are shown short in messages (SessionFormatError: "kept short in the message").

const HUGE = "x".repeat(200_000);

/** A session saved in a collection, and the path of its meta.json. */
async function savedSession(): Promise<{ fs: MemoryFs; dir: string; meta: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const session = await storeOn(fs).create(CWD);
  await session.commit(conversation(2, "a"));
  const dir = session.getSessionPath();
  await session.close();
  return { fs, dir, meta: `${dir}/meta.json` };
}

test("meta.json fields holding a 200,000-character string are shown short in the error", async () => {
  const base = await savedSession();
  const meta = JSON.parse(decoder.decode(await base.fs.readFile(base.meta)));
  for (const field of ["format", "version", "generation", "start", "messageCount"]) {
    const fs = base.fs.clone();
    await fs.writeFile(base.meta, encoder.encode(JSON.stringify({ ...meta, [field]: HUGE })));
    await assert.rejects(storeOn(fs).open(base.dir, { readOnly: true }), (error: unknown) => {
      assert.ok(error instanceof Error, String(error));
      assert.ok(error.message.length < 500, `${field}: ${error.message.length} characters`);
      assert.ok(error.message.includes(`"xxxxxxxxxx`), `${field}: ${error.message}`);
      assert.ok(error.message.includes(base.meta), `${field}: ${error.message}`);
      if (error instanceof SessionFormatError) assert.equal(error.path, field);
      else {
        assert.ok(error instanceof UnsupportedSessionError, `${field}: ${error}`);
        assert.equal(error[field as "format" | "version"], HUGE, "the value is kept whole");
      }
      return true;
    });
    const listed = await storeOn(fs).listDetailed(CWD);
    assert.ok(
      listed.failures.every((failure) => failure.error.message.length < 500),
      `${field}: a listing's failure`,
    );
  }
});

test("layout records holding a 200,000-character string name the field and show the value short", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/repo");
  const root = await newRoot(fs);
  const file = `${root.paths.dir}/session.json`;
  const manifest = JSON.parse(decoder.decode(await fs.readFile(file)));
  // A picklist (`layout`), a literal (`schema_version`), checks (`session_id`, `created_at`):
  // valibot's own messages show the value received, in full.
  for (const field of ["layout", "schema_version", "session_id", "created_at"]) {
    const value = { ...manifest, [field]: HUGE };
    assert.throws(() => parseSessionManifest(value, file), (error: unknown) => {
      assert.ok(error instanceof LayoutRecordError, `${field}: ${error}`);
      assert.equal(error.path, field);
      assert.equal(error.value, HUGE, "the value is kept whole");
      assert.ok(error.message.length < 500, `${field}: ${error.message.length} characters`);
      return true;
    });
  }
  await fs.writeFile(file, encoder.encode(JSON.stringify({ ...manifest, layout: HUGE })));
  await assert.rejects(loadSessionTree(fs, "/repo", root.sessionId), (error: unknown) => {
    assert.ok(error instanceof Error, String(error));
    assert.ok(error.message.length < 1_000, `${error.message.length} characters`);
    assert.ok(error.message.includes("layout"), error.message);
    return true;
  });
});

test("meta.json fields holding arrays nested 200,000 deep are typed errors on every runtime", async () => {
  const base = await savedSession();
  const meta = JSON.parse(decoder.decode(await base.fs.readFile(base.meta)));
  const deep = "[".repeat(200_000) + "]".repeat(200_000);
  for (const field of ["format", "version", "generation", "start", "messageCount"]) {
    const fs = base.fs.clone();
    // Written as text: JSON.stringify of such a value overflows Node's stack.
    const damaged = JSON.stringify({ ...meta, [field]: "@deep@" }).replace('"@deep@"', deep);
    await fs.writeFile(base.meta, encoder.encode(damaged));
    await assert.rejects(storeOn(fs).open(base.dir, { readOnly: true }), (error: unknown) => {
      assert.ok(
        error instanceof SessionFormatError || error instanceof UnsupportedSessionError,
        `${field}: ${error}`,
      );
      assert.ok(error.message.length < 500, `${field}: ${error.message.length} characters`);
      return true;
    });
    const listed = await storeOn(fs).listDetailed(CWD);
    // An unsupported format or version is skipped; any other damage is the session's failure.
    assert.equal(listed.sessions.length, 0, field);
    const unsupported = field === "format" || field === "version";
    assert.equal(listed.failures.length, unsupported ? 0 : 1, field);
    for (const failure of listed.failures) {
      assert.ok(failure.error instanceof SessionFormatError, `${field}: ${failure.error}`);
      assert.ok(failure.error.message.length < 500, field);
    }
  }
});

test("preview() renders any value short and never throws", () => {
  let deep: unknown[] = [];
  for (let i = 0; i < 200_000; i++) deep = [deep];
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  for (
    const value of [deep, cyclic, [1n], { big: 2n }, 3n, Symbol("s"), undefined, "x".repeat(500)]
  ) {
    const text = preview(value);
    assert.ok(text.length <= 80, text);
  }
  assert.equal(preview(cyclic), "[object]");
  assert.equal(preview([1n]), "[array]");
  assert.equal(preview(3n), "3n");
  assert.equal(preview("ab"), '"ab"');
  // Values JSON would write as something else are shown as themselves.
  assert.equal(preview(NaN), "NaN");
  assert.equal(preview(-Infinity), "-Infinity");
  assert.equal(preview(-0), "-0");
  assert.equal(preview(new Date(NaN)), "Invalid Date");
  assert.equal(preview(Object.create(null)), "{}");
});

test("an eval seal in state.json holding a 200,000-character string is shown short", () => {
  const key = "session:/eval_receipts/ev-1.json";
  const seal = { schema_version: HUGE };
  assert.throws(() => stateEvalSeal({ [key]: seal }, "ev-1", "/s/state.json"), (error: unknown) => {
    assert.ok(error instanceof LayoutRecordError, String(error));
    assert.equal(error.file, "/s/state.json");
    assert.ok(error.path?.startsWith(`accepted_eval_seals[${JSON.stringify(key)}]`), error.path);
    assert.ok(error.message.length < 500, `${error.message.length} characters`);
    return true;
  });
});
