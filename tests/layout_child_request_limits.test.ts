// Child requests an agent shaped to block the parent's queue: a second pending file reusing the
// request id of an interrupted acceptance, and request files or declared inputs too large to
// read (on a real filesystem their read fails with ENOMEM or EFBIG, which a hooked filesystem
// stands in for here).
import { test } from "node:test";
import assert from "node:assert/strict";
import type { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  ChildRequestError,
  type CreatedSession,
  listPendingChildRequests,
  MAX_CHILD_REQUEST_BYTES,
  parseRejectedRequestReceipt,
  processNextChildRequest,
  publishChildRequest,
  readChildrenLedger,
  readSessionState,
} from "../layout.ts";
import {
  childRequest,
  deterministic,
  newRepo,
  newRoot,
  patchState,
  readJson,
  writeJson,
} from "./layout_fixtures.ts";
import { hookedFs } from "./_hooks.ts";
import { sha256Ref } from "../src/layout/json_io.ts";

const ROOT_ID = "001_ship-the-ultimate-memory-program";

async function setup(): Promise<{ fs: MemoryFs; root: CreatedSession }> {
  const fs = await newRepo();
  const root = await newRoot(fs);
  return { fs, root };
}

async function processNext(fs: FileSystem) {
  return await processNextChildRequest(fs, {
    repoRoot: "/repo",
    parentSessionId: ROOT_ID,
    ...deterministic(),
  });
}

const READS = new Set(["readFile", "readFileNoFollow"]);

/**
 * `fs` where reading a regular file larger than `MAX_CHILD_REQUEST_BYTES` fails as reading a
 * huge (say 1 TiB sparse) file fails on a real filesystem: `FsIoError` ENOMEM.
 */
function hugeReadsFail(fs: MemoryFs): FileSystem {
  return hookedFs(fs, {
    before: async (method, args) => {
      const path = args[0];
      if (!READS.has(method) || typeof path !== "string") return;
      const info = await fs.lstat(path).catch(() => undefined);
      if (info?.kind === "file" && info.size > MAX_CHILD_REQUEST_BYTES) {
        throw new FsIoError("ENOMEM", method, path, "Cannot allocate memory");
      }
    },
  });
}

/** A valid request of exactly `size` bytes (its goal pads it). */
function requestOfSize(requestId: string, size: number): Uint8Array {
  const head = JSON.stringify(childRequest(requestId, { goal: "" }));
  const padding = size - head.length;
  return new TextEncoder().encode(
    JSON.stringify(childRequest(requestId, { goal: "g".repeat(padding) })),
  );
}

test("an interrupted acceptance completes with the pending file holding its accepted bytes, whatever file sorts first", async () => {
  const { fs, root } = await setup();
  const paths = root.paths;
  const published = await publishChildRequest(fs, paths, childRequest("phase-0"));
  const accepted = await processNext(fs);
  assert.equal(accepted?.kind, "accepted");
  // The state of a crash before the commit point: the ledger says running and the child is
  // published, but the state does not point at it yet and the request is still pending.
  await patchState(fs, paths.dir, { active_child_session_id: null });
  await fs.writeFile(published.file, published.bytes);
  // An agent reuses the id with another body, in a file that sorts first.
  await writeJson(
    fs,
    `${paths.childRequestsPendingDir}/a-dup.json`,
    childRequest("phase-0", { goal: "something else" }),
  );

  const resumed = await processNext(fs);
  assert.equal(resumed?.kind, "accepted", JSON.stringify(resumed));
  assert.equal(resumed?.kind === "accepted" && resumed.childSessionId, "01_phase-0");
  const ledger = await readChildrenLedger(fs, paths, ROOT_ID);
  assert.deepEqual(ledger.children.map((c) => [c.session_id, c.status]), [
    ["01_phase-0", "running"],
  ]);
  assert.equal((await readSessionState(fs, paths.dir)).active_child_session_id, "01_phase-0");
  assert.deepEqual(await listPendingChildRequests(fs, paths), ["a-dup.json"]);

  // The other body under the id is then rejected alone; the child keeps running.
  const next = await processNext(fs);
  assert.equal(next?.kind, "rejected");
  assert.equal(next?.kind === "rejected" && next.receipt.request_file, "a-dup.json");
  assert.deepEqual(
    (await readChildrenLedger(fs, paths, ROOT_ID)).children.map((c) => c.status),
    ["running"],
  );
  assert.equal((await readSessionState(fs, paths.dir)).active_child_session_id, "01_phase-0");
});

test("a pending request file larger than MAX_CHILD_REQUEST_BYTES is rejected unread, before anything is recorded", async () => {
  const { fs: memory, root } = await setup();
  const paths = root.paths;
  const bigFile = `${paths.childRequestsPendingDir}/big.json`;
  // The calls made on the big file: it is hashed through a handle opened without following a
  // link (never waiting on a FIFO swapped in), never read whole.
  const calls: string[] = [];
  const fs = hookedFs(hugeReadsFail(memory), {
    before: (method, args) => {
      if (args[0] === bigFile) calls.push(method);
    },
  });
  const big = requestOfSize("big", MAX_CHILD_REQUEST_BYTES + 1);
  assert.equal(big.length, MAX_CHILD_REQUEST_BYTES + 1);
  await memory.writeFile(bigFile, big);

  const result = await processNext(fs);
  assert.equal(result?.kind, "rejected", JSON.stringify(result));
  if (result?.kind !== "rejected") return;
  assert.equal(result.archivedFile, `${paths.childRequestsRejectedDir}/big.json`);
  assert.equal((await memory.lstat(result.archivedFile)).size, big.length);
  const receipt = parseRejectedRequestReceipt(await readJson(memory, result.receiptFile), "r");
  assert.deepEqual(receipt, result.receipt);
  assert.equal(receipt.request_file, "big.json");
  assert.equal(receipt.request_id, null);
  // Its original hash, read in chunks (never whole: whole reads of it fail here).
  assert.equal(receipt.original_sha256, sha256Ref(big));
  assert.ok(calls.includes("openNoFollow"), calls.join());
  assert.ok(!calls.includes("open") && !calls.includes("readFile"), calls.join());
  assert.equal(receipt.field, null);
  assert.match(receipt.reason, new RegExp(`larger than ${MAX_CHILD_REQUEST_BYTES} bytes`));
  // Nothing of it was recorded: no ledger entry, no accepted copy, no child.
  const ledger = await readChildrenLedger(memory, paths, ROOT_ID);
  assert.equal(ledger.revision, 0);
  assert.deepEqual(ledger.children, []);
  assert.deepEqual(await memory.readDir(paths.childRequestsAcceptedDir), []);
  assert.deepEqual(
    (await memory.readDir(paths.childrenDir).catch(() => [])).map((e) => e.name),
    [],
  );

  // The queue goes on.
  await publishChildRequest(fs, paths, childRequest("phase-1"));
  const next = await processNext(fs);
  assert.equal(next?.kind === "accepted" && next.childSessionId, "01_phase-1");
});

test("a request file too large to read, under another process's lease, is still hashed and rejected", async () => {
  const { fs: memory, root } = await setup();
  const paths = root.paths;
  const bigFile = `${paths.childRequestsPendingDir}/big.json`;
  // A lease makes the non-blocking no-follow calls fail at once (EAGAIN); a plain open waits.
  const fs = hookedFs(hugeReadsFail(memory), {
    before: (method, args) => {
      if ((method === "openNoFollow" || method === "readFileNoFollow") && args[0] === bigFile) {
        throw new FsIoError("EAGAIN", method, bigFile, "Resource temporarily unavailable");
      }
    },
  });
  const big = requestOfSize("big", MAX_CHILD_REQUEST_BYTES + 1);
  await memory.writeFile(bigFile, big);
  const result = await processNext(fs);
  assert.equal(result?.kind, "rejected", JSON.stringify(result));
  if (result?.kind !== "rejected") return;
  assert.equal(result.receipt.original_sha256, sha256Ref(big));
  assert.match(result.receipt.reason, new RegExp(`larger than ${MAX_CHILD_REQUEST_BYTES} bytes`));
});

test("publishChildRequest refuses a request larger than MAX_CHILD_REQUEST_BYTES before writing", async () => {
  const { fs, root } = await setup();
  const before = fs.snapshotTree("/");
  const request = childRequest("big", { goal: "g".repeat(MAX_CHILD_REQUEST_BYTES) });
  await assert.rejects(publishChildRequest(fs, root.paths, request), (error) => {
    assert.ok(error instanceof ChildRequestError, String(error));
    assert.equal(error.file, root.paths.pendingRequest("big"));
    assert.equal(error.requestId, "big");
    return true;
  });
  assert.deepEqual(fs.snapshotTree("/"), before);
});

test("a file too large to read under pending/ does not fail the publication of another request", async () => {
  const { fs: memory, root } = await setup();
  const fs = hugeReadsFail(memory);
  const paths = root.paths;
  await memory.writeFile(
    `${paths.childRequestsPendingDir}/aaa.json`,
    requestOfSize("zz-next", MAX_CHILD_REQUEST_BYTES + 1),
  );
  const published = await publishChildRequest(fs, paths, childRequest("zz-next"));
  assert.equal(published.file, paths.pendingRequest("zz-next"));
  // The own slot too large to read is another request: the id is in use.
  await memory.writeFile(
    paths.pendingRequest("own"),
    requestOfSize("own", MAX_CHILD_REQUEST_BYTES + 1),
  );
  await assert.rejects(publishChildRequest(fs, paths, childRequest("own")), (error) => {
    assert.ok(error instanceof ChildRequestError, String(error));
    assert.equal(error.file, paths.pendingRequest("own"));
    return true;
  });
  // Processing rejects the large files unread and accepts the published request.
  const results = [await processNext(fs), await processNext(fs), await processNext(fs)];
  assert.deepEqual(
    results.map((r) => r?.kind === "rejected" ? r.receipt.request_file : r?.kind),
    ["aaa.json", "own.json", "accepted"],
  );
});

test("a declared input larger than MAX_CHILD_REQUEST_BYTES rejects its request at input_refs[<i>]", async () => {
  const { fs: memory, root } = await setup();
  const fs = hugeReadsFail(memory);
  const paths = root.paths;
  await memory.writeFile("/repo/small.bin", new Uint8Array(8));
  await memory.writeFile("/repo/big.bin", new Uint8Array(MAX_CHILD_REQUEST_BYTES + 1));
  await publishChildRequest(
    fs,
    paths,
    childRequest("aaa", { input_refs: ["repo:/small.bin", "repo:/big.bin"] }),
  );
  const result = await processNext(fs);
  assert.equal(result?.kind, "rejected", JSON.stringify(result));
  if (result?.kind !== "rejected") return;
  assert.equal(result.receipt.field, "input_refs[1]");
  assert.equal(result.receipt.request_id, "aaa");
  assert.match(result.receipt.reason, /repo:\/big\.bin is larger than/);
  assert.deepEqual((await readChildrenLedger(memory, paths, ROOT_ID)).children, []);

  // Exactly at the limit is read and frozen.
  await memory.writeFile("/repo/limit.bin", new Uint8Array(MAX_CHILD_REQUEST_BYTES));
  await publishChildRequest(fs, paths, childRequest("bbb", { input_refs: ["repo:/limit.bin"] }));
  const accepted = await processNext(fs);
  assert.equal(accepted?.kind === "accepted" && accepted.childSessionId, "01_bbb");
});
