/**
 * The id of a mirror trace manifest and the key it was read from (internal to the layout: the
 * public reader is `traceManifestId` in `traces.ts`).
 *
 * @module
 */

/**
 * The id of a mirror trace manifest and the key it was read from, the first string among
 * `trace_manifest_id`, `manifest_id`, `trace_id`, `attempt_id` (the engine's order); `undefined`
 * when there is none.
 */
export function traceManifestIdField(
  value: unknown,
): { readonly key: string; readonly id: string } | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const record = value as Record<string, unknown>;
  for (const key of ["trace_manifest_id", "manifest_id", "trace_id", "attempt_id"]) {
    const id = record[key];
    if (typeof id === "string") return { key, id };
  }
  return undefined;
}
