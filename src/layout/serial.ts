/**
 * In-process serialization of layout operations that must not interleave on one directory: two
 * root sessions created at once in one repository would both pick the same ordinal, and two
 * publications of one request id would both pass the "already in use" check. Operations on the
 * same key run one after another in call order; other keys are not delayed. Processes do not
 * coordinate through this (the layout's engine runs one process per repository).
 *
 * @module
 */

const chains = new Map<string, Promise<void>>();

/** Runs `task` once every task serialized on `key` before it has settled; returns its outcome. */
export async function serialized<T>(key: string, task: () => Promise<T>): Promise<T> {
  const previous = chains.get(key) ?? Promise.resolve();
  let release!: () => void;
  const mine = new Promise<void>((resolve) => (release = resolve));
  const tail = previous.then(() => mine);
  chains.set(key, tail);
  try {
    await previous;
    return await task();
  } finally {
    release();
    if (chains.get(key) === tail) chains.delete(key);
  }
}
