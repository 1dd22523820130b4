/**
 * In-process serialization of layout operations that must not interleave on one directory or
 * file: the child lifecycle of one parent (two publications of one request id would both pass
 * the "already in use" check; two acceptances of one request would create two children), the
 * read-modify-write of one `state.json`, the write-once receipts and sidecars, and root session
 * creation in one repository. Operations on the same key run one after another in call order;
 * other keys are not delayed. A task must not wait for another task on its own key (that never
 * settles). Processes do not coordinate through this (the layout's engine runs one process per
 * repository); the one cross-process guarantee, unique root ordinals, comes from an exclusive
 * file creation (see `createRootSession`).
 *
 * The layout's operations key by canonical path (`serializedOn`, `canonicalPath`): one session
 * reached through two spellings of its repository (a symlinked checkout, macOS `/tmp` and
 * `/private/tmp`) has one key, so callers that spell it differently are still serialized.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { canonicalPath } from "./no_links.ts";

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

/**
 * `serialized` keyed by the canonical path of `path` (see `canonicalPath`): every spelling of one
 * directory or file shares one queue.
 */
export async function serializedOn<T>(
  fs: FileSystem,
  path: string,
  task: () => Promise<T>,
): Promise<T> {
  return await serialized(await canonicalPath(fs, path), task);
}
