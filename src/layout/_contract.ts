/**
 * A folded session's frozen workflow contract, read from its trust root: the engine-owned
 * `state.json`, which records the complete parsed contract and pins the hashes of the on-disk
 * projections (the seed: "The complete parsed contract also lives in engine-owned state.json").
 * Child dispatch inherits it from there; a terminal control's producer roles are checked
 * against it.
 *
 * @module
 */

import type { FileSystem } from "../port/fs.ts";
import type { Sha256Factory } from "../port/sha256.ts";
import { LayoutRecordError } from "./errors.ts";
import {
  decodeJson,
  encodeJson,
  jsonEqual,
  type JsonObject,
  recordBytes,
  sha256Ref,
} from "./json_io.ts";
import type { SessionPaths } from "./paths.ts";
import { type StateContractPins, stateContractPins } from "./records.ts";
import { readSessionState } from "./tree.ts";

/**
 * The workflow contract a state records, checked against its pin (see `inheritedContracts` in
 * `child_requests.ts`).
 */
export async function trustedWorkflowContract(
  fs: FileSystem,
  paths: SessionPaths,
  pins: StateContractPins,
  sha256?: Sha256Factory,
): Promise<JsonObject> {
  const projection = paths.workflowContractJson;
  const pin = pins.workflowContractSha256;
  const recorded = pins.workflowContract as JsonObject | undefined;
  if (recorded === undefined) {
    // A legacy state records no contract: the projection, checked against the pin if any.
    const bytes = await recordBytes(fs, projection, false) as Uint8Array;
    requirePinnedBytes(
      bytes,
      projection,
      pin,
      paths.stateJson,
      "workflow_contract_sha256",
      sha256,
    );
    return jsonObject(decodeJson(bytes, projection), projection);
  }
  if (pin === undefined || sha256Ref(encodeJson(recorded), sha256) === pin) return recorded;
  // The pinned bytes may be the engine's spelling of this very contract.
  const bytes = await recordBytes(fs, projection, true);
  if (
    bytes !== undefined && sha256Ref(bytes, sha256) === pin &&
    jsonEqual(decodeJson(bytes, projection), recorded)
  ) return recorded;
  throw new LayoutRecordError(
    paths.stateJson,
    `The workflow contract this state records is not the one workflow_contract_sha256 pins ` +
      `(${pin}), and neither is ${projection}`,
    { path: "workflow_contract", value: recorded },
  );
}

/**
 * `sha256:` of `bytes`, the contents of the projection `projection`; a `LayoutRecordError`
 * naming `stateFile` and `field` when `pin` is given and is another hash (the projection was
 * changed after it was frozen).
 */
export function requirePinnedBytes(
  bytes: Uint8Array,
  projection: string,
  pin: string | undefined,
  stateFile: string,
  field: string,
  sha256?: Sha256Factory,
): string {
  const actual = sha256Ref(bytes, sha256);
  if (pin !== undefined && actual !== pin) {
    throw new LayoutRecordError(
      stateFile,
      `The frozen projection ${projection} was changed: it has ${actual}, not the ${pin} ` +
        "this state pins",
      { path: field, value: actual },
    );
  }
  return actual;
}

/** `value` when it is a JSON object; else a `LayoutRecordError` naming `file`. */
export function jsonObject(value: unknown, file: string): JsonObject {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new LayoutRecordError(file, "Expected a JSON object", { value });
  }
  return value as JsonObject;
}

/** The producer roles a session's frozen workflow contract gives a terminal control. */
export interface ContractTerminalRoles {
  /** `orchestration.completion_role`: the only workflow that may declare `goal_met`. */
  readonly completionRole: string | undefined;
  /** `terminal_blocker_reporting_roles`: the workflows that may declare `unresolvable_error`. */
  readonly blockerReportingRoles: readonly string[] | undefined;
}

/**
 * The terminal roles of the session's frozen workflow contract: the contract its engine-owned
 * `state.json` records, checked against `workflow_contract_sha256` (see
 * `trustedWorkflowContract`), or — for a legacy state that records none — the projection
 * `workflow_contract.json`, checked against the pin when the state has one. A session without
 * `state.json` has no current task to judge a control by: its read fails as `readSessionState`
 * says, as does a pinned projection that is missing (a `LayoutRecordError` naming `state.json`
 * at `workflow_contract_sha256`). A role the contract does not name is `undefined`, and so are
 * both when a legacy state pins and records no contract and there is no projection. A role that
 * is not a string (or a list of strings) is a `LayoutRecordError` naming the contract's file and
 * the field.
 */
export async function contractTerminalRoles(
  fs: FileSystem,
  paths: SessionPaths,
  sha256?: Sha256Factory,
): Promise<ContractTerminalRoles> {
  const state = await readSessionState(fs, paths.dir);
  const pins = stateContractPins(state, paths.stateJson);
  let contract: JsonObject | undefined;
  let file = paths.stateJson;
  let prefix = "workflow_contract.";
  if (pins.workflowContract !== undefined) {
    contract = await trustedWorkflowContract(fs, paths, pins, sha256);
  } else {
    const bytes = await recordBytes(fs, paths.workflowContractJson, true);
    if (bytes === undefined) {
      const pin = pins.workflowContractSha256;
      if (pin !== undefined) {
        // The state pins a projection that is gone: never read as "no contract, no roles".
        throw new LayoutRecordError(
          paths.stateJson,
          `The frozen projection ${paths.workflowContractJson} this state pins (${pin}) is missing`,
          { path: "workflow_contract_sha256", value: pin },
        );
      }
      return { completionRole: undefined, blockerReportingRoles: undefined };
    }
    requirePinnedBytes(
      bytes,
      paths.workflowContractJson,
      pins.workflowContractSha256,
      paths.stateJson,
      "workflow_contract_sha256",
      sha256,
    );
    contract = jsonObject(
      decodeJson(bytes, paths.workflowContractJson),
      paths.workflowContractJson,
    );
    file = paths.workflowContractJson;
    prefix = "";
  }
  const refuse = (field: string, value: unknown): never => {
    throw new LayoutRecordError(
      file,
      `The frozen workflow contract's ${field} must be ` +
        (field.endsWith("roles") ? "a list of workflow ids" : "a workflow id"),
      { path: prefix + field, value },
    );
  };
  const orchestration = contract.orchestration;
  let completionRole: string | undefined;
  if (orchestration !== undefined && orchestration !== null) {
    if (typeof orchestration !== "object" || Array.isArray(orchestration)) {
      refuse("orchestration", orchestration);
    }
    const role = (orchestration as JsonObject).completion_role;
    if (role !== undefined && role !== null) {
      if (typeof role !== "string") refuse("orchestration.completion_role", role);
      completionRole = role as string;
    }
  }
  const roles = contract.terminal_blocker_reporting_roles;
  let blockerReportingRoles: readonly string[] | undefined;
  if (roles !== undefined && roles !== null) {
    if (!Array.isArray(roles) || !roles.every((role) => typeof role === "string")) {
      refuse("terminal_blocker_reporting_roles", roles);
    }
    blockerReportingRoles = roles as readonly string[];
  }
  return { completionRole, blockerReportingRoles };
}
