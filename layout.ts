/**
 * `@loop/sessions/layout`: the folded session layout of coding-agent sessions, over the
 * filesystem port.
 *
 * A session is one directory holding everything it produces: durable evidence and state, plus a
 * prunable `raw/` subdirectory for mechanical noise. Sessions nest: a root session lives in
 * `.loopy_loop/sessions/NNN_<slug>/`, and each child a parent requests is published in the
 * parent's `children/NN_<slug>/`. This module derives readable ids once, builds every path from
 * the layout recorded in `session.json`, creates complete sessions atomically (staging directory
 * plus rename), validates every record with a schema, resolves logical references
 * (`session:/…`, `repo:/…`, `root:/…`, `parent:/…`, `session:<id>:/…`) to confined paths,
 * runs the child request lifecycle crash-safely, and reads `events.jsonl` tolerantly.
 *
 * Maintenance: `pruneRaw` deletes raw attempt directories (and, on request, the legacy mirror
 * trace tree) crash-safely and never a durable file, nor the raw output of a running (or newer)
 * attempt. Sessions of the legacy mirror layout load with the same API and a running one finishes
 * under its own layout (state, events, results, outcome with its `trace_seal_refs`); their traces
 * are listed, inspected and verified against their seals (`listTraces`, `inspectTrace`,
 * `verifyTrace`, `checkTraceSeals`) and never rewritten, and `trace:<manifest_id>:/…` references
 * resolve through the manifests.
 *
 * Records that are final stay final: a git receipt and an eval acceptance sidecar are written
 * once, a finished or sealed attempt's `result.json` is not rewritten, and an archived rejected
 * request or its receipt is never overwritten (each refusal is a typed error naming the file).
 *
 * One process writes a repository: writes are serialized within a process (by each session's
 * real path), not across processes, as the engine runs one process per repository. Only root
 * session creation is safe from several processes at once; any other write from a second process
 * (a state update, a child request's processing, an acceptance, a prune) can be lost
 * without an error. Readers may run anywhere.
 *
 * @example Create a root session, request a child, and resolve a reference in it
 * ```ts
 * import {
 *   createRootSession,
 *   LogicalReferenceResolver,
 *   processNextChildRequest,
 *   publishChildRequest,
 * } from "@loop/sessions/layout";
 * import { MemoryFs } from "@loop/sessions/memory";
 * import assert from "node:assert/strict";
 *
 * const fs = new MemoryFs();
 * await fs.mkdir("/repo");
 * const root = await createRootSession(fs, {
 *   repoRoot: "/repo",
 *   goal: "Ship the ultimate memory program",
 *   workflowSet: "main",
 *   workflowContract: { orchestration: { completion_role: "outer" } },
 *   workflowRoster: { roles: ["outer"] },
 *   harnessCapabilityRoster: { coordinator: "default" },
 * });
 * assert.equal(root.sessionId, "001_ship-the-ultimate-memory-program");
 *
 * await publishChildRequest(fs, root.paths, {
 *   schema_version: 3,
 *   request_id: "phase-0-foundations",
 *   goal: "Lay the foundations",
 *   origin: { parent_attempt_id: "a1b2c3d4e5f6" },
 * });
 * const result = await processNextChildRequest(fs, {
 *   repoRoot: "/repo",
 *   parentSessionId: root.sessionId,
 * });
 * assert.equal(result?.kind, "accepted");
 * assert.equal(result?.kind === "accepted" && result.childSessionId, "01_phase-0-foundations");
 *
 * const resolver = await LogicalReferenceResolver.forSession(fs, {
 *   repoRoot: "/repo",
 *   sessionId: "01_phase-0-foundations",
 * });
 * const request = await resolver.resolveExisting("session:/inputs/accepted_request.json");
 * assert.ok(request.endsWith("/children/01_phase-0-foundations/inputs/accepted_request.json"));
 * ```
 *
 * @module
 */
export type {
  DirEntry,
  EntryKind,
  FileHandle,
  FileInfo,
  FileSystem,
  MkdirOptions,
  OpenedFile,
  OpenOptions,
  RemoveOptions,
  WriteFileOptions,
} from "./src/port/fs.ts";
export { FsError } from "./src/port/errors.ts";
export type { ProcessProbe } from "./src/loop/lock.ts";
export type { Durability } from "./src/port/durable.ts";
export type { Sha256, Sha256Factory } from "./src/port/sha256.ts";
export * from "./src/layout/errors.ts";
export * from "./src/layout/ids.ts";
export * from "./src/layout/paths.ts";
export {
  encodeJson,
  type JsonObject,
  type JsonValue,
  MAX_RECORD_NESTING,
  type ReadRecord,
  readRecord,
  readRecordIfExists,
  type RecordParser,
  sha256Ref,
} from "./src/layout/json_io.ts";
export * from "./src/layout/options.ts";
export * from "./src/layout/ref_grammar.ts";
export * from "./src/layout/records.ts";
export * from "./src/layout/state.ts";
export * from "./src/layout/tree.ts";
export * from "./src/layout/scaffold.ts";
export * from "./src/layout/refs.ts";
export * from "./src/layout/events.ts";
export * from "./src/layout/attempts.ts";
export * from "./src/layout/receipts.ts";
export * from "./src/layout/terminal.ts";
export * from "./src/layout/child_requests.ts";
export {
  chainKind,
  findLoopyRoot,
  type LoopyRoot,
  openLoopyRoot,
  PRUNING_PREFIX,
  type SessionDirEntry,
  type SessionDirWalk,
  type UnidentifiedDir,
  walkSessionDirs,
  type WalkSkip,
} from "./src/layout/loopy_root.ts";
export * from "./src/layout/traces.ts";
export * from "./src/layout/prune.ts";
