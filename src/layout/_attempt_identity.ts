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
import { utf8Length } from "../port/path.ts";

/** The form of a workflow id and an attempt id: one safe path component. */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/**
 * Checks an attempt's identity as a caller gave it, before any path is built from it: the
 * iteration a non-negative safe integer, the workflow id and the attempt id one safe path
 * component. An invalid one is a `LayoutOptionError` naming the field (`iteration`,
 * `workflowId`, `attemptId`) and the value; an invalid attempt id is refused with
 * `refuseAttemptId(reason)` instead when it is given (the caller's own error). So is a workflow
 * or attempt id that makes a file or directory name longer than `MAX_FILE_NAME_BYTES` (255)
 * UTF-8 bytes: the longest name built from it (see `longestWorkflowName`, `longestAttemptName`)
 * could not be looked up (`ENAMETOOLONG`).
 */
export function checkAttemptIdentity(
  attempt: AttemptIdentity,
  refuseAttemptId: (reason: string) => Error = (reason) =>
    new LayoutOptionError("attemptId", attempt.attemptId, reason),
): void {
  if (!Number.isSafeInteger(attempt.iteration) || attempt.iteration < 0) {
    throw new LayoutOptionError(
      "iteration",
      attempt.iteration,
      "Iteration must be a non-negative integer",
    );
  }
  if (typeof attempt.workflowId !== "string" || !SAFE_ID.test(attempt.workflowId)) {
    throw new LayoutOptionError("workflowId", attempt.workflowId, SAFE_ID_REASON);
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
  if (typeof attempt.attemptId !== "string" || !SAFE_ID.test(attempt.attemptId)) {
    throw refuseAttemptId(SAFE_ID_REASON);
  }
  const longestAttempt = longestAttemptName(attempt.attemptId);
  if (utf8Length(longestAttempt) > MAX_FILE_NAME_BYTES) {
    throw refuseAttemptId(
      `Attempt id makes a file name longer than ${MAX_FILE_NAME_BYTES} bytes ` +
        `(${utf8Length(longestAttempt)} bytes: ${longestAttempt})`,
    );
  }
}

const SAFE_ID_REASON = "Id must be one safe path component";

/**
 * The longest file or directory name the writers of this check build from an attempt id: the
 * folded `workflow_snapshot/<attempt_id>/`, the id itself (both writers write folded sessions
 * only; the mirror layout's longer names, such as `git-<phase>-<attempt_id>.json`, are built
 * only by readers of ids the engine recorded, which check them there).
 */
function longestAttemptName(attemptId: string): string {
  return attemptId;
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
