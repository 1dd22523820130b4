/**
 * The rule tying a terminal transition's stop reason, status and control together, shared by the
 * writer of `session_outcome.json` (`writeSessionOutcome`) and its reader
 * (`parseSessionOutcome`). Internal to the layout.
 *
 * @module
 */
import { LayoutRecordError } from "./errors.ts";

/** A terminal transition as an outcome records it. */
export interface TerminalTransition {
  /** The stop reason (`goal_met`, `unresolvable_error`, `max_turns`, ...). */
  readonly stopReason: string;
  /** The terminal status (`goal_met`, `failed`, `stopped`, `max_turns`). */
  readonly terminalStatus: string;
  /**
   * The control record bound to the transition: its `sha256:` and, when the record itself is at
   * hand (the writer has it, the reader only its hash), the stop reason it decided.
   */
  readonly control:
    | { readonly sha256: string; readonly stopReason?: string | undefined }
    | undefined;
}

/**
 * Refuses (`LayoutRecordError` naming `file` and the field) a transition whose control, stop
 * reason and status do not belong together, as the engine's stop precedence sets them:
 *
 * - goal_met and unresolvable_error are decided by a control record, and no other stop is: a
 *   missing control for one (the engine raises `StateInvariantError`) or a control bound to
 *   another is refused at `control`;
 * - a control whose own stop reason is known must have decided this stop (at `stop_reason`);
 * - goal_met, and only goal_met, completes the session (status `goal_met`), and
 *   unresolvable_error fails it (`failed`): anything else is refused at `terminal_status`.
 */
export function checkTerminalTransition(file: string, transition: TerminalTransition): void {
  const { control, stopReason, terminalStatus } = transition;
  const decided = stopReason === "goal_met" || stopReason === "unresolvable_error";
  if (control === undefined && decided) {
    throw new LayoutRecordError(
      file,
      `A ${stopReason} transition is decided by a control record; a snapshot of it must be bound`,
      { path: "control", value: null },
    );
  }
  if (control !== undefined && !decided) {
    throw new LayoutRecordError(
      file,
      `A ${stopReason} transition binds no control record; only goal_met and ` +
        "unresolvable_error are decided by one",
      { path: "control", value: control.sha256 },
    );
  }
  if (
    control?.stopReason !== undefined && control.stopReason !== stopReason
  ) {
    throw new LayoutRecordError(
      file,
      `The bound control record decided ${control.stopReason}, not this transition`,
      { path: "stop_reason", value: stopReason },
    );
  }
  // The engine's stop precedence: goal_met sets the status goal_met, unresolvable_error sets it
  // failed, and no other stop sets goal_met.
  const status = stopReason === "goal_met"
    ? "goal_met"
    : stopReason === "unresolvable_error"
    ? "failed"
    : undefined;
  if (status !== undefined ? terminalStatus !== status : terminalStatus === "goal_met") {
    throw new LayoutRecordError(
      file,
      status !== undefined
        ? `A ${stopReason} stop leaves the session ${status}`
        : "Only a goal_met stop completes a session",
      { path: "terminal_status", value: terminalStatus },
    );
  }
}
