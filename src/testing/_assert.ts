/**
 * The small assertion kit of the conformance suite. It throws `ConformanceFailure` so the suite
 * needs no runtime assertion module and `src/` stays runtime-free.
 *
 * @module
 */
import { FsError } from "../port/errors.ts";

/** Options of a `ConformanceFailure`. */
export interface ConformanceFailureOptions {
  /** The error the adapter raised, when the failure is about one. */
  readonly cause?: unknown;
}

/** A filesystem adapter broke the port contract in one conformance check. */
export class ConformanceFailure extends Error {
  /** Creates a failure that says what the adapter did wrong. */
  constructor(message: string, options: ConformanceFailureOptions = {}) {
    super(message, options.cause === undefined ? {} : { cause: options.cause });
    this.name = "ConformanceFailure";
  }
}

/** A constructor of a port error class (`NotFound`, `AlreadyExists`, ...). */
// deno-lint-ignore no-explicit-any
export type FsErrorClass = abstract new (...args: any[]) => FsError;

/** Fails with `message` unless `condition` holds. */
export function check(condition: boolean, message: string): asserts condition {
  if (!condition) throw new ConformanceFailure(message);
}

/** Fails unless `actual` is `expected` (same value by `Object.is`). */
export function checkEqual<T>(actual: T, expected: T, what: string): void {
  if (!Object.is(actual, expected)) {
    throw new ConformanceFailure(`${what}: expected ${show(expected)}, got ${show(actual)}`);
  }
}

/** Fails unless the permission bits `actual` are `expected` (reported in octal). */
export function checkMode(actual: number, expected: number, what: string): void {
  if (actual !== expected) {
    throw new ConformanceFailure(
      `${what}: expected mode 0o${expected.toString(8)}, got 0o${actual.toString(8)}`,
    );
  }
}

/** Fails unless `actual` and `expected` serialize to the same JSON (plain data only). */
export function checkSame(actual: unknown, expected: unknown, what: string): void {
  const a = JSON.stringify(actual);
  const b = JSON.stringify(expected);
  if (a !== b) throw new ConformanceFailure(`${what}: expected ${b}, got ${a}`);
}

/** Fails unless `actual` holds exactly the bytes of `expected` (a string is UTF-8 encoded). */
export function checkBytes(actual: Uint8Array, expected: Uint8Array | string, what: string): void {
  check(actual instanceof Uint8Array, `${what}: expected a Uint8Array, got ${show(actual)}`);
  const want = typeof expected === "string" ? new TextEncoder().encode(expected) : expected;
  if (actual.length !== want.length) {
    throw new ConformanceFailure(
      `${what}: expected ${want.length} bytes ${preview(want)}, got ${actual.length} bytes ${
        preview(actual)
      }`,
    );
  }
  for (let i = 0; i < want.length; i++) {
    if (actual[i] !== want[i]) {
      throw new ConformanceFailure(
        `${what}: bytes differ at offset ${i} (expected ${want[i]}, got ${actual[i]})`,
      );
    }
  }
}

/**
 * Fails unless `run` rejects with an instance of `errorClass`; returns the error. A rejection
 * with any other error is reported with that error as `cause`.
 */
export async function checkRejects(
  run: () => Promise<unknown>,
  errorClass: FsErrorClass,
  what: string,
): Promise<FsError> {
  let result: unknown;
  let pending: Promise<unknown>;
  try {
    pending = run();
  } catch (error) {
    // Every port call returns a promise: one that throws escapes a caller that starts it beside
    // others (`Promise.allSettled([...])`) before they are awaited.
    throw new ConformanceFailure(
      `${what}: threw ${describeError(error)} instead of returning a rejected promise`,
      { cause: error },
    );
  }
  if (typeof (pending as { then?: unknown } | undefined)?.then !== "function") {
    throw new ConformanceFailure(`${what}: returned ${show(pending)}, not a promise`);
  }
  try {
    result = await pending;
  } catch (error) {
    if (error instanceof errorClass) return error;
    throw new ConformanceFailure(
      `${what}: expected a rejection with ${errorClass.name}, got ${describeError(error)}`,
      { cause: error },
    );
  }
  throw new ConformanceFailure(
    `${what}: expected a rejection with ${errorClass.name}, but it resolved with ${show(result)}`,
  );
}

/** A short description of a thrown value for failure messages. */
export function describeError(error: unknown): string {
  if (error instanceof FsError) return `${error.name} (${error.code}): ${error.message}`;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return show(error);
}

function show(value: unknown): string {
  if (value instanceof Uint8Array) return `${value.length} bytes ${preview(value)}`;
  if (typeof value === "string") return JSON.stringify(value);
  if (value === null || typeof value !== "object") return String(value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return `an object (${value.constructor?.name ?? "null prototype"})`;
}

function preview(bytes: Uint8Array): string {
  const head = Array.from(bytes.subarray(0, 16), (b) => b.toString(16).padStart(2, "0"));
  return `[${head.join(" ")}${bytes.length > 16 ? " ..." : ""}]`;
}
