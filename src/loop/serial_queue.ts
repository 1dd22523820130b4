/**
 * A promise queue that runs tasks one at a time, in call order. History and metadata writes of a
 * session go through one queue so they never interleave.
 *
 * @module
 */

/** Runs async tasks strictly one after another. */
export class SerialQueue {
  #tail: Promise<unknown> = Promise.resolve();
  #unsettled = 0;

  /** True while a scheduled task has not settled yet. */
  get busy(): boolean {
    return this.#unsettled > 0;
  }

  /** Schedules `task` after every task scheduled before it; resolves or rejects with its result. */
  run<T>(task: () => Promise<T>): Promise<T> {
    this.#unsettled++;
    const result = this.#tail.then(task, task);
    // The queue continues whatever the task's outcome; the caller receives the outcome.
    this.#tail = result.then(
      () => {
        this.#unsettled--;
      },
      () => {
        this.#unsettled--;
      },
    );
    return result;
  }
}
