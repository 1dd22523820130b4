/**
 * `state.json`, the engine-owned scheduling source of truth: its initial form and validated
 * read-modify-write updates that keep every field this library does not interpret.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import type { Durability } from "../port/durable.ts";
import { join } from "../port/path.ts";
import {
  decodeJsonNumbers,
  ensureRecordDurable,
  type JsonObject,
  recordBytes,
  writeJsonAtomic,
} from "./json_io.ts";
import {
  assertStateOwner,
  parseSessionState,
  parseSessionStateAsRead,
  type SessionState,
  type StateOwner,
} from "./records.ts";
import { readSessionManifest } from "./tree.ts";
import { stateOwnerAt } from "./_nesting.ts";
import { LayoutRecordError } from "./errors.ts";
import { confined } from "./no_links.ts";
import { serializedOn } from "./serial.ts";

/** What the initial `state.json` of a new session binds. */
export interface InitialStateInput {
  /** The session. */
  readonly sessionId: string;
  /** Its root. */
  readonly rootSessionId: string;
  /** Creation time. */
  readonly createdAt: string;
  /** The frozen workflow contract (the trust root of the on-disk projection). */
  readonly workflowContract: JsonObject;
  /** `sha256:` of `workflow_contract.json`. */
  readonly workflowContractSha256: string;
  /** `sha256:` of `workflow_roster.json`. */
  readonly workflowRosterSha256: string;
  /** `sha256:` of the root's `harness_capability_roster.json`. */
  readonly harnessCapabilityRosterSha256: string;
}

/** The `state.json` of a new session: running, ready, revision 0, no handoff accepted yet. */
export function initialSessionState(input: InitialStateInput): JsonObject {
  return {
    schema_version: 2,
    session_id: input.sessionId,
    root_session_id: input.rootSessionId,
    status: "running",
    state_revision: 0,
    iteration: 0,
    current_task: null,
    active_child_session_id: null,
    history: [],
    workflow_contract: input.workflowContract,
    workflow_contract_sha256: input.workflowContractSha256,
    workflow_roster_sha256: input.workflowRosterSha256,
    harness_capability_roster: {
      ref: "root:/harness_capability_roster.json",
      sha256: input.harnessCapabilityRosterSha256,
    },
    handoff_revision: 0,
    handoff_sha256: null,
    accepted_eval_seals: {},
    terminal_state_revision: null,
    terminal_at: null,
    created_at: input.createdAt,
    updated_at: input.createdAt,
  };
}

/** Options of `updateSessionState`. */
export interface UpdateStateOptions {
  /** The time written to `updated_at`. */
  readonly updatedAt: string;
  /** Durability of the replace; default `"full"`. */
  readonly durability?: Durability;
  /**
   * The session the state must belong to, as its `session.json` records (a `SessionNode` of a
   * loaded tree is one); when not given, `session.json` is read (a legacy v1 child's root, which
   * it does not record, is then the one its nesting gives, as its tree's scan derives it).
   */
  readonly owner?: StateOwner | undefined;
}

/**
 * Reads `state.json`, validates it, lets `change` edit a copy of the raw object (unknown fields
 * kept), bumps `state_revision` and `updated_at`, validates the result and replaces the file
 * atomically. Returns the new state. The file is written as canonical JSON (`encodeJson`), except
 * that every number the change leaves alone (the same value at the same path) keeps the text it
 * was read in: the engine writes a float as `1.0`, and an integer beyond 2^53 (a nanosecond
 * clock), `1e-07`, `1E5` or `-0.0` would otherwise be rewritten (as `1`, a rounded integer,
 * `1e-7`, `100000`, `0`); a number the change sets is written as `JSON.stringify` writes it. The
 * values `change` and the returned state see are `JSON.parse`'s (an integer beyond 2^53 rounded).
 * A `change` that returns `false` leaves the file untouched, made durable (its bytes and its
 * directory synced under `"full"` durability): the state it returns may be one that a call which
 * failed before its directory's fsync wrote, or another writer that does not fsync, and a caller
 * builds on it.
 * The state keeps its version: a legacy state without `schema_version` (v1) is written with
 * `schema_version: 1`, and a `change` that alters the version is refused (`LayoutRecordError`).
 * The state must be the session's own, before and after `change`: one that names another session
 * than `session.json` records is a `LayoutRecordError` at that field (see `assertStateOwner`).
 *
 * Updates of one session's state in this process run one after another (each reads the state
 * the previous one wrote), so two concurrent read-modify-writes never lose an update, also when
 * the callers spell the session directory differently (the repository reached through a
 * symlink): they are ordered by the canonical path. `change`
 * must not itself update the same session's state. Works on both layouts: a running mirror
 * session finishes under its own layout.
 */
export async function updateSessionState(
  fs: FileSystem,
  sessionDir: string,
  change: (state: Record<string, unknown>, current: SessionState) => boolean | void,
  options: UpdateStateOptions,
): Promise<SessionState> {
  fs = confined(fs, sessionDir);
  const file = join(sessionDir, "state.json");
  // session.json is immutable: read once, outside the serialized read-modify-write.
  const owner = options.owner ??
    stateOwnerAt(await readSessionManifest(fs, sessionDir), sessionDir);
  return await serializedOn(fs, file, async () => {
    // Read only as a regular file (a FIFO planted there is refused by name, never waited on).
    // The text of each number is kept: a number the change leaves alone is written as it was.
    const { value: raw, numbers } = decodeJsonNumbers(
      await recordBytes(fs, file, false) as Uint8Array,
      file,
    );
    const current = parseSessionStateAsRead(raw, file);
    assertStateOwner(current, owner, file);
    // A legacy state without `schema_version` is v1; it is rewritten saying so, as the engine
    // rewrites it (its dump writes the default), never as another version.
    const next: Record<string, unknown> = "schema_version" in (raw as Record<string, unknown>)
      ? { ...(raw as Record<string, unknown>) }
      : { schema_version: current.schema_version, ...(raw as Record<string, unknown>) };
    if (change(next, current) === false) {
      // Nothing to change: the state already says what the caller relies on, maybe because a
      // call that failed after its rename (before the directory's fsync) wrote it. It is made
      // durable before it is reported.
      await ensureRecordDurable(fs, file, options.durability);
      return current;
    }
    if (next.schema_version !== current.schema_version) {
      // A write keeps the version it read: a v2 state never becomes a v1 one (or the reverse).
      throw new LayoutRecordError(
        file,
        `Refusing to write an invalid state: schema_version must stay ${current.schema_version}`,
        { path: "schema_version", value: next.schema_version },
      );
    }
    const revision = current.state_revision ?? 0;
    next.state_revision = revision + 1;
    next.updated_at = options.updatedAt;
    let validated: SessionState;
    try {
      validated = parseSessionState(next, file);
      assertStateOwner(validated, owner, file);
    } catch (error) {
      if (!(error instanceof LayoutRecordError)) throw error;
      // Its field and file are said once, by the error made here.
      const where = `${error.path ? ` at ${error.path}` : ""} (in '${error.file}')`;
      const reason = error.file === file && error.message.endsWith(where)
        ? error.message.slice(0, -where.length)
        : error.message;
      throw new LayoutRecordError(file, `Refusing to write an invalid state: ${reason}`, {
        path: error.path,
        value: error.value,
        cause: error,
      });
    }
    await writeJsonAtomic(fs, file, next, options.durability, numbers);
    return validated;
  });
}
