// The order of checks in open (version-2 rules §1, the first failure wins): the header's fields,
// then stat(cwd), then every message line, then the metadata validators. A version-3 session
// reports what a version-2 file with the same damage reports.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { sha256Hex } from "../src/port/sha256.ts";
import {
  CorruptSessionError,
  SessionCwdError,
  SessionError,
  SessionFormatError,
} from "../src/loop/errors.ts";
import { SessionStore } from "../src/loop/store.ts";
import { conversation, legacySessionBytes } from "./_fixtures.ts";

const GONE = "/work/gone";
const OTHER = "/work/other";
const AGENT = "/home/user/.loop";
const LEGACY_ID = "0b8f2f9e-3c1d-4a5b-9e6f-7a8b9c0d1e2f";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What is damaged besides (optionally) the cwd. */
type Damage =
  | "invalid message"
  | "message not JSON"
  | "runtimeContexts not an array"
  | "invalid message and runtimeContexts not an array"
  | "invalid permissionPreset";

const INVALID_LINE = JSON.stringify({ role: "robot", content: "x", timestamp: 1 });

function damageHeader(header: Record<string, unknown>, damage: Damage): void {
  if (damage.includes("runtimeContexts")) header.runtimeContexts = "not an array";
  if (damage === "invalid permissionPreset") header.permissionPreset = "root";
}

function damagedLine(damage: Damage): string | undefined {
  if (damage.startsWith("invalid message")) return INVALID_LINE;
  if (damage === "message not JSON") return "{not json";
  return undefined;
}

/** A version-3 session of `cwd` with `damage`; returns the store and its directory. */
async function v3Session(
  damage: Damage,
  cwdGone: boolean,
): Promise<{ fs: MemoryFs; store: SessionStore; path: string; collection: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(GONE, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const session = await store.create(GONE);
  await session.commit(conversation(1));
  await session.close();
  const dir = session.getSessionPath();
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${dir}/meta.json`)));
  damageHeader(meta.header, damage);
  const line = damagedLine(damage);
  if (line !== undefined) {
    const bytes = encoder.encode(line + "\n");
    await fs.writeFile(`${dir}/messages.jsonl`, bytes);
    Object.assign(meta, { start: 0, bytes: bytes.length, messageCount: 1 });
    meta.generation = sha256Hex(bytes);
  }
  await fs.writeFile(`${dir}/meta.json`, encoder.encode(JSON.stringify(meta)));
  if (cwdGone) await fs.remove(GONE, { recursive: true });
  return { fs, store, path: dir, collection: session.getSessionDir() };
}

/** The version-2 file of the same session, with the same damage. */
async function v2Session(
  damage: Damage,
  cwdGone: boolean,
): Promise<{ fs: MemoryFs; store: SessionStore; path: string }> {
  const fs = new MemoryFs();
  await fs.mkdir(OTHER, { recursive: true });
  if (!cwdGone) await fs.mkdir(GONE, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const collection = await store.collectionFor(OTHER);
  await fs.mkdir(collection, { recursive: true });
  const lines = decoder.decode(legacySessionBytes(LEGACY_ID, GONE, conversation(1))).trim()
    .split("\n");
  const header = JSON.parse(lines[0] as string);
  damageHeader(header, damage);
  lines[0] = JSON.stringify(header);
  const line = damagedLine(damage);
  const all = line === undefined ? lines : [lines[0], line];
  const path = `${collection}/${LEGACY_ID}.jsonl`;
  await fs.writeFile(path, encoder.encode(all.join("\n") + "\n"));
  return { fs, store, path };
}

/** The error an open of `path` rejects with. */
async function openError(store: SessionStore, path: string): Promise<SessionError> {
  try {
    const session = await store.open(path, { readOnly: true });
    await session.close();
  } catch (error) {
    assert.ok(error instanceof SessionError, String(error));
    return error;
  }
  assert.fail(`${path} opened`);
}

const DAMAGES: readonly Damage[] = [
  "invalid message",
  "message not JSON",
  "runtimeContexts not an array",
  "invalid message and runtimeContexts not an array",
  "invalid permissionPreset",
];

test("a version-3 open reports a gone cwd before any damage of its log or metadata arrays, after its header's fields, as a version-2 open does", async () => {
  for (const damage of DAMAGES) {
    const v3 = await v3Session(damage, true);
    const before = v3.fs.snapshotTree?.();
    const error = await openError(v3.store, v3.path);
    const v2 = await v2Session(damage, true);
    const legacy = await openError(v2.store, v2.path);
    const expected = damage === "invalid permissionPreset" ? SessionFormatError : SessionCwdError;
    assert.ok(error instanceof expected, `${damage}: ${error}`);
    assert.ok(legacy instanceof expected, `${damage} (version 2): ${legacy}`);
    // A full listing of the collection reports the same error for the session.
    const listing = await v3.store.listDetailed(undefined, v3.collection);
    assert.equal(listing.failures.length, 1, damage);
    assert.ok(listing.failures[0]?.error instanceof expected, `${damage}: listing`);
    assert.deepEqual(v3.fs.snapshotTree?.(), before);
  }
});

test("with the cwd there, a version-3 open reports a bad message line before a bad metadata array, as a version-2 open does", async () => {
  const damage: Damage = "invalid message and runtimeContexts not an array";
  const v3 = await v3Session(damage, false);
  const v2 = await v2Session(damage, false);
  for (const { store, path } of [v3, v2]) {
    const error = await openError(store, path);
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.path, "messages[0].role");
  }
  // Alone, the bad array is reported by its field.
  for (const session of [await v3Session("runtimeContexts not an array", false)]) {
    const error = await openError(session.store, session.path);
    assert.ok(error instanceof SessionFormatError, String(error));
    assert.equal(error.path, "header.runtimeContexts");
  }
});

test("a version-3 open reports a gone cwd before a log that does not match its checksum", async () => {
  const { fs, store, path } = await v3Session("runtimeContexts not an array", false);
  // Repair the array, then damage the log's bytes (same length): a checksum mismatch.
  const meta = JSON.parse(decoder.decode(await fs.readFile(`${path}/meta.json`)));
  delete meta.header.runtimeContexts;
  await fs.writeFile(`${path}/meta.json`, encoder.encode(JSON.stringify(meta)));
  const log = await fs.readFile(`${path}/messages.jsonl`);
  const damaged = log.slice();
  damaged[damaged.indexOf(encoder.encode("r")[0] as number, 20)] = encoder.encode("R")[0] as number;
  await fs.writeFile(`${path}/messages.jsonl`, damaged);
  const corrupt = await openError(store, path);
  assert.ok(corrupt instanceof CorruptSessionError, String(corrupt));
  await fs.remove(GONE, { recursive: true });
  const gone = await openError(store, path);
  assert.ok(gone instanceof SessionCwdError, String(gone));
});
