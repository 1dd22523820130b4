/**
 * Model identity, reasoning effort levels and permission presets.
 *
 * @module
 */
import * as v from "valibot";
import type { ModelEffort, ModelRef, PermissionPreset, RecordSchema } from "./types.ts";
import { checkSchema, isRecord } from "./_validation.ts";

/** Every reasoning effort level, `"default"` first. */
export const MODEL_EFFORTS: readonly ModelEffort[] = Object.freeze([
  "default",
  "off",
  "minimal",
  "low",
  "medium",
  "high",
  "xhigh",
  "max",
]);

/** Every permission preset. */
export const PERMISSION_PRESETS: readonly PermissionPreset[] = Object.freeze([
  "read-only",
  "workspace-write",
  "danger-full-access",
]);

/** The preset of new sessions. */
export const DEFAULT_PERMISSION_PRESET: PermissionPreset = "read-only";

/** True when `value` is one of `MODEL_EFFORTS` (including `"default"`). */
export function isModelEffort(value: unknown): value is ModelEffort {
  return typeof value === "string" && (MODEL_EFFORTS as readonly string[]).includes(value);
}

/** True when `value` is one of `PERMISSION_PRESETS`. */
export function isPermissionPreset(value: unknown): value is PermissionPreset {
  return typeof value === "string" && (PERMISSION_PRESETS as readonly string[]).includes(value);
}

/** The schema of a reasoning effort level. */
export const ModelEffortSchema: RecordSchema<ModelEffort> = v.picklist(MODEL_EFFORTS);

/** The schema of a permission preset. */
export const PermissionPresetSchema: RecordSchema<PermissionPreset> = v.picklist(
  PERMISSION_PRESETS,
);

/**
 * The schema of a stored model: string `provider` and `id` (empty strings allowed) and an
 * optional known `effort` (`"default"` included). Extra fields pass through.
 */
export const ModelRefSchema: RecordSchema<ModelRef> = v.looseObject({
  provider: v.string(),
  id: v.string(),
  effort: v.optional(ModelEffortSchema),
});

/**
 * True when `value` is a stored model of the plain shape JSON gives, checked by hand with the
 * rules of `ModelRefSchema`. False means only "not accepted here": callers then run the schema.
 */
export function isPlainModelRef(value: unknown): value is ModelRef {
  return isRecord(value) && typeof value.provider === "string" && typeof value.id === "string" &&
    (value.effort === undefined || isModelEffort(value.effort));
}

/** Options of `parseModelRef`. */
export interface ParseModelRefOptions {
  /** The file the value came from, when known. */
  readonly file?: string | undefined;
  /** The JSON path of the value; default `"model"`. */
  readonly path?: string | undefined;
}

/**
 * Validates a model selection and returns the record `setModel` stores: `provider` and `id`,
 * plus `effort` only when it is not `"default"`. Other fields are not kept.
 *
 * @param value The selection to check.
 * @param options Where the value came from, for error reports.
 * @returns A new `ModelRef`.
 * @throws {SessionFormatError} When a field is missing or invalid; an unknown effort is named
 * at `model.effort`.
 *
 * @example Default effort is not stored
 * ```ts
 * import { parseModelRef } from "./model.ts";
 * parseModelRef({ provider: "p", id: "m", effort: "default" }); // { provider: "p", id: "m" }
 * parseModelRef({ provider: "p", id: "m", effort: "high" }); // { provider: "p", id: "m", effort: "high" }
 * ```
 */
export function parseModelRef(value: unknown, options: ParseModelRefOptions = {}): ModelRef {
  checkSchema(ModelRefSchema, value, "Invalid model", {
    file: options.file,
    path: options.path ?? "model",
  });
  const model = value as ModelRef;
  return model.effort === undefined || model.effort === "default"
    ? { provider: model.provider, id: model.id }
    : { provider: model.provider, id: model.id, effort: model.effort };
}
