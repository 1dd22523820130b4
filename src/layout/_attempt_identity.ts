/**
 * The check of an attempt identity a caller gives, shared by the writers of attempt artifacts and
 * git receipts. Internal to the layout.
 *
 * @module
 */
import { LayoutOptionError } from "./errors.ts";
import type { AttemptIdentity } from "./attempts.ts";
import { MAX_FILE_NAME_BYTES } from "./ids.ts";
import { gitReceiptFilename, iterationName } from "./paths.ts";

/** The form of a workflow id and an attempt id: one safe path component. */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/**
 * Checks an attempt's identity as a caller gave it, before any path is built from it: the
 * iteration a non-negative safe integer, the workflow id (and, unless `attemptId` is false, the
 * attempt id) one safe path component. An invalid one is a `LayoutOptionError` naming the field
 * (`iteration`, `workflowId`, `attemptId`) and the value. So is a workflow id that makes, with
 * the iteration, a file name longer than `MAX_FILE_NAME_BYTES` (255) UTF-8 bytes: the longest
 * name built from it (see `longestWorkflowName`) could not be looked up (`ENAMETOOLONG`).
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
  const longest = longestWorkflowName(attempt.iteration, attempt.workflowId);
  if (utf8Length(longest) > MAX_FILE_NAME_BYTES) {
    throw new LayoutOptionError(
      "workflowId",
      attempt.workflowId,
      `Workflow id makes a file name longer than ${MAX_FILE_NAME_BYTES} bytes ` +
        `(${utf8Length(longest)} bytes: ${longest})`,
    );
  }
}

/**
 * The longest file or directory name `paths.ts` builds from an attempt's workflow id: of the
 * iteration and raw directories (`<NNNN>_<workflow>`) and the folded git receipts
 * (`<NNNN>_<workflow>_git_<phase>.json`; their name holds no attempt id, so any valid one
 * serves).
 */
function longestWorkflowName(iteration: number, workflowId: string): string {
  const names = [
    iterationName(iteration, workflowId),
    ...(["before", "after"] as const).map((phase) =>
      gitReceiptFilename("folded", phase, { iteration, workflowId, attemptId: "0" })
    ),
  ];
  return names.reduce((a, b) => (utf8Length(b) > utf8Length(a) ? b : a));
}

function utf8Length(text: string): number {
  return new TextEncoder().encode(text).length;
}
