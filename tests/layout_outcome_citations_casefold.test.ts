// A folded session_outcome.json cites nothing in the mirror trace tree nor in a folded session's
// delivery_receipts/, in any letter case: on a case-insensitive filesystem (the default on macOS
// and Windows) `.loopy_loop/Traces/` and `Delivery_Receipts/` are those very directories, and the
// engine never creates another spelling of them. A mirror session's delivery receipts may still
// be cited in any spelling.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  LayoutRecordError,
  LogicalReferenceResolver,
  type SessionOutcomeInput,
  writeSessionOutcome,
} from "../layout.ts";
import { commitTerminalState, newRoot } from "./layout_fixtures.ts";
import { buildMirrorTree, MIRROR_ROOT_ID, ROOT_ATTEMPTS } from "./fixtures/mirror_tree.ts";

/**
 * A case-insensitive view of a memory filesystem whose names are all lowercase: every absolute
 * path given to it is lowercased, while `readDir` reports the names as they are stored.
 */
function caseInsensitive(inner: MemoryFs): FileSystem {
  return new Proxy(inner, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) =>
        value.apply(
          target,
          args.map((arg) =>
            typeof arg === "string" && arg.startsWith("/") ? arg.toLowerCase() : arg
          ),
        );
    },
  }) as unknown as FileSystem;
}

function outcomeInput(sessionId: string, goalSha256: string): SessionOutcomeInput {
  return {
    sessionId,
    rootSessionId: sessionId,
    goalSha256,
    terminalStatus: "failed",
    stopReason: "max_turns",
    terminalStateRevision: 3,
    terminalAt: "2026-04-19T15:00:01Z",
    handoff: { status: "missing", handoff: undefined, sha256: null, revision: null, diagnosis: "" },
  };
}

async function setup() {
  const memory = new MemoryFs();
  await memory.mkdir("/repo");
  await buildMirrorTree(memory);
  const root = await newRoot(memory);
  await commitTerminalState(memory, root.dir, "failed", 3, "2026-04-19T15:00:01Z");
  return { memory, fs: caseInsensitive(memory), root };
}

test("a folded outcome refuses the mirror trace tree and folded delivery_receipts/ in any letter case", async () => {
  const { memory, fs, root } = await setup();
  const id = root.sessionId;
  // The folded session's delivery_receipts/ exists, as an agent may have made it.
  await memory.mkdir(`${root.dir}/delivery_receipts`);
  const base = outcomeInput(id, root.manifest.goal_hash);
  const file = root.paths.sessionOutcomeJson;
  for (
    const ref of [
      `repo:/.loopy_loop/Traces/${MIRROR_ROOT_ID}`,
      `repo:/.LOOPY_LOOP/traces/${MIRROR_ROOT_ID}/sessions/${MIRROR_ROOT_ID}`,
      "repo:/.loopy_loop/Trace_Finalization_Outbox",
      "session:/Delivery_Receipts/d.json",
      "session:/DELIVERY_RECEIPTS",
      `session:${id}:/Delivery_Receipts/d.json`,
      `root:/delivery_Receipts/d.json`,
      `repo:/.loopy_loop/sessions/${id}/Delivery_Receipts/d.json`,
      `repo:/.Loopy_Loop/Sessions/${id}/DELIVERY_RECEIPTS/d.json`,
    ]
  ) {
    for (const field of ["evidence", "delivery"] as const) {
      await assert.rejects(
        writeSessionOutcome(fs, root.paths, { ...base, [`${field}Refs`]: [ref] }),
        (error: unknown) => {
          assert.ok(error instanceof LayoutRecordError, String(error));
          assert.equal(error.file, file);
          assert.equal(error.path, `${field}_refs[0]`, error.message);
          return true;
        },
        ref,
      );
      assert.equal(await memory.lstat(file).then(() => true, () => false), false, ref);
    }
  }
  // receipts/ is where a folded session's delivery receipts live, in the engine's spelling.
  const written = await writeSessionOutcome(fs, root.paths, {
    ...base,
    deliveryRefs: ["session:/receipts/delivery-1.json"],
  });
  assert.deepEqual(written.delivery_refs, ["session:/receipts/delivery-1.json"]);
});

test("the resolver names a folded delivery_receipts/ spelled in other case as its directory lists it", async () => {
  const { memory, fs, root } = await setup();
  await memory.mkdir(`${root.dir}/delivery_receipts`);
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: "/repo",
    sessionId: root.sessionId,
  });
  const resolved = await resolver.resolve("session:/Delivery_Receipts/d.json");
  assert.equal(resolved.path, `${root.dir}/delivery_receipts/d.json`);
  assert.equal(resolved.canonical, `session:${root.sessionId}:/delivery_receipts/d.json`);
  const holder = await resolver.holder(
    `repo:/.loopy_loop/sessions/${root.sessionId}/DELIVERY_RECEIPTS/d.json`,
  );
  assert.deepEqual([holder?.sessionId, holder?.relative], [
    root.sessionId,
    "delivery_receipts/d.json",
  ]);
});

test("a mirror session's delivery_receipts/ may be cited in any letter case", async () => {
  const { fs, root } = await setup();
  const delivery = `delivery-${ROOT_ATTEMPTS.first.attemptId}.json`;
  const refs = [
    `repo:/.loopy_loop/sessions/${MIRROR_ROOT_ID}/Delivery_Receipts/${delivery}`,
    `repo:/.loopy_loop/sessions/${MIRROR_ROOT_ID}/DELIVERY_RECEIPTS/${delivery}`,
  ];
  const written = await writeSessionOutcome(fs, root.paths, {
    ...outcomeInput(root.sessionId, root.manifest.goal_hash),
    deliveryRefs: refs,
  });
  assert.deepEqual(written.delivery_refs, refs);
});
