/**
 * The filesystem port conformance suite. One suite runs unchanged over every `FileSystem`
 * adapter (memory, Node, Deno, or a user's own) and registers one test per check, so every
 * misbehaviour of an adapter is reported at once.
 *
 * The suite takes the test registrar as a parameter (`node:test`'s `test`, Deno's `test` function, or any
 * function of the same shape) and asserts with its own `ConformanceFailure`, so it carries no
 * runtime import.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { ConformanceFailure, describeError } from "./_assert.ts";
import { type Capability, CAPABILITY_FALLBACKS, type Check, CHECKS } from "./_checks.ts";
import { PARITY_CHECKS } from "./_parity_checks.ts";

export { ConformanceFailure, type ConformanceFailureOptions } from "./_assert.ts";

/**
 * Optional capabilities of a filesystem. `symlinks` and `modes` default to `true`; a check that
 * needs one the fixture declares absent runs the capability's fallback check instead, so it still
 * fails when the adapter misbehaves:
 *
 * - without `symlinks`, `symlink()` must reject with a port error and leave nothing behind;
 * - without `modes`, `chmod()` and creating with a mode must succeed and `stat()` must report
 *   permission bits within `0o777`.
 */
export interface FileSystemCapabilities {
  /** The filesystem creates and resolves symlinks. */
  readonly symlinks?: boolean;
  /** The filesystem keeps POSIX permission bits (`mode` on create, `chmod`). */
  readonly modes?: boolean;
  /**
   * The longest path, in UTF-8 bytes, the filesystem takes: default (and at most) 4095, Linux's
   * `PATH_MAX` less its terminating NUL. An adapter that maps its paths below a directory of its
   * own (a chroot-like wrapper) takes 4095 less that directory's length, and declares it here:
   * the checks of long paths make none longer. An integer from 3300 (the suite needs paths that
   * long); a larger one than 4095 counts as 4095, and anything else fails those checks.
   */
  readonly longestPath?: number;
}

/** A fresh filesystem to run one check on. */
export interface FileSystemFixture {
  /** The filesystem under test. */
  readonly fs: FileSystem;
  /** An empty directory, as an absolute normalized path, that the check may fill. */
  readonly root: string;
  /** Releases the fixture (removes a temporary directory); called after every check. */
  cleanup(): Promise<void>;
  /** What the filesystem supports; everything is assumed supported when omitted. */
  readonly capabilities?: FileSystemCapabilities;
}

/**
 * Registers one test. Compatible with `test` from `node:test` and with Deno's `test` function; the test
 * function resolves when the check passes and rejects with the failure otherwise.
 */
export type TestRegistrar = (name: string, fn: () => Promise<void>) => unknown;

/** Options of `testFileSystem`. */
export interface TestFileSystemOptions {
  /** The adapter's name, prefixed to every test name (`"nodeFs"`). */
  readonly name: string;
  /** The test registrar (`test` from `node:test`, or Deno's `test` function). */
  readonly test: TestRegistrar;
  /** Creates a fresh fixture for each check. */
  setup(): Promise<FileSystemFixture> | FileSystemFixture;
}

/** Every check of the suite, in registration order. */
const ALL_CHECKS: readonly Check[] = [...CHECKS, ...PARITY_CHECKS];

/** The names of every check the suite registers, in registration order. */
export const CONFORMANCE_CHECK_NAMES: readonly string[] = ALL_CHECKS.map((c) => c.name);

/**
 * Registers the conformance suite: one test per check, each named `"<name>: <check>"`, each
 * on a fresh fixture from `setup()` that is cleaned up afterwards.
 *
 * @param options The adapter's name, the test registrar and the fixture factory.
 *
 * See the `@loop/sessions/testing` entry point for examples with `node:test` and without a runner.
 */
export function testFileSystem(options: TestFileSystemOptions): void {
  for (const entry of ALL_CHECKS) {
    options.test(`${options.name}: ${entry.name}`, async () => {
      const fixture = await options.setup();
      let checkError: unknown;
      let checkFailed = false;
      try {
        const absent: Capability[] = (entry.needs ?? []).filter((capability) =>
          fixture.capabilities?.[capability] === false
        );
        if (absent.length === 0) await entry.run(fixture);
        else for (const capability of absent) await CAPABILITY_FALLBACKS[capability](fixture);
      } catch (error) {
        checkFailed = true;
        checkError = error;
      }
      try {
        await fixture.cleanup();
      } catch (cleanupError) {
        if (!checkFailed) throw cleanupError;
        // Report both: the check's failure is the news, the cleanup failure a consequence.
        throw new ConformanceFailure(
          `${describeError(checkError)} (and the fixture cleanup failed: ${
            describeError(cleanupError)
          })`,
          { cause: checkError },
        );
      }
      if (checkFailed) throw checkError;
    });
  }
}
