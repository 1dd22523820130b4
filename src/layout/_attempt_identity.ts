/**
 * The check of an attempt identity a caller gives, shared by the writers of attempt artifacts and
 * git receipts. Internal to the layout.
 *
 * @module
 */
import { LayoutOptionError } from "./errors.ts";
import type { AttemptIdentity } from "./attempts.ts";

/** The form of a workflow id and an attempt id: one safe path component. */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/**
 * Checks an attempt's identity as a caller gave it, before any path is built from it: the
 * iteration a non-negative safe integer, the workflow id (and, unless `attemptId` is false, the
 * attempt id) one safe path component. An invalid one is a `LayoutOptionError` naming the field
 * (`iteration`, `workflowId`, `attemptId`) and the value.
 */
export function checkAttemptIdentity(attempt: AttemptIdentity, attemptId = true): void {
  if (!Number.isSafeInteger(attempt.iteration) || attempt.iteration < 0) {
    throw new LayoutOptionError(
      "iteration",
      attempt.iteration,
      "Iteration must be a non-negative integer",
    );
  }
  for (const field of attemptId ? ["workflowId", "attemptId"] as const : ["workflowId"] as const) {
    const value = attempt[field];
    if (typeof value !== "string" || !SAFE_ID.test(value)) {
      throw new LayoutOptionError(field, value, "Id must be one safe path component");
    }
  }
}
