/**
 * The published conformance suite of the filesystem port. Run it over any `FileSystem` adapter,
 * yours included, to check that it honours the port contract the session store relies on:
 * typed errors, exclusive creates that refuse symlinks, positioned reads, append semantics,
 * renames that never follow links, recursive removes that stay inside the tree, modes and
 * symlinks.
 *
 * `testFileSystem` registers one test per check through the registrar you pass (`test` from
 * `node:test`, or `Deno.test`), each on a fresh fixture from your `setup()`.
 *
 * @example Checking the Node adapter in a temporary directory
 * ```ts ignore
 * import { test } from "node:test";
 * import { mkdtemp, rm } from "node:fs/promises";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 * import { nodeFs } from "@loop/sessions/node";
 * import { testFileSystem } from "@loop/sessions/testing";
 *
 * testFileSystem({
 *   name: "nodeFs",
 *   test,
 *   async setup() {
 *     const root = await mkdtemp(join(tmpdir(), "conformance-"));
 *     return { fs: nodeFs(), root, cleanup: () => rm(root, { recursive: true, force: true }) };
 *   },
 * });
 * ```
 *
 * @example Running every check without a test runner (a failure rejects)
 * ```ts
 * import assert from "node:assert/strict";
 * import { MemoryFs } from "@loop/sessions/memory";
 * import { CONFORMANCE_CHECK_NAMES, testFileSystem } from "@loop/sessions/testing";
 *
 * const checks: (() => Promise<void>)[] = [];
 * let next = 0;
 * testFileSystem({
 *   name: "MemoryFs",
 *   test: (_name, fn) => checks.push(fn),
 *   async setup() {
 *     const fs = new MemoryFs();
 *     const root = `/conformance-${next++}`;
 *     await fs.mkdir(root);
 *     return { fs, root, cleanup: () => fs.remove(root, { recursive: true }) };
 *   },
 * });
 * assert.equal(checks.length, CONFORMANCE_CHECK_NAMES.length);
 * for (const check of checks) await check();
 * ```
 *
 * @module
 */
export {
  CONFORMANCE_CHECK_NAMES,
  ConformanceFailure,
  type ConformanceFailureOptions,
  type FileSystemCapabilities,
  type FileSystemFixture,
  testFileSystem,
  type TestFileSystemOptions,
  type TestRegistrar,
} from "./src/testing/conformance.ts";
