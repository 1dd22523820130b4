/**
 * Options shared by the writing operations of the layout: an injectable clock and randomness
 * (so creation is deterministic in tests), the durability of writes and the SHA-256 factory.
 *
 * @module
 */
import type { Durability } from "../port/durable.ts";
import { portableSha256, type Sha256Factory } from "../port/sha256.ts";
import { LayoutError, LayoutOptionError } from "./errors.ts";
import { preview } from "../loop/errors.ts";

/** Injectable clock and randomness, so creation is deterministic in tests. */
export interface LayoutClock {
  /**
   * The current time; default `() => new Date()`. A reading that is not a valid `Date` is a
   * `LayoutOptionError` naming `now`.
   */
  readonly now?: (() => Date) | undefined;
  /** A fresh UUID (any form with 32 hex digits); default `crypto.randomUUID`. */
  readonly uuid?: (() => string) | undefined;
}

/** Options shared by the writing operations of the layout. */
export interface LayoutWriteOptions extends LayoutClock {
  /** Durability of every write; default `"full"` (fsync before each publish). */
  readonly durability?: Durability | undefined;
  /** SHA-256 implementation; default the portable one. */
  readonly sha256?: Sha256Factory | undefined;
}

/** Resolved write options. */
export interface ResolvedWriteOptions {
  /** The clock. */
  readonly now: () => Date;
  /** 32 lowercase hex digits of a fresh UUID. */
  readonly uuidHex: () => string;
  /** Durability of every write. */
  readonly durability: Durability;
  /** SHA-256 implementation. */
  readonly sha256: Sha256Factory;
}

/**
 * Fills in the defaults of `LayoutWriteOptions`. A `durability` other than `"full"` or
 * `"ordered"` is a `LayoutOptionError`: an unknown one would otherwise sync nothing.
 */
export function resolveWriteOptions(options: LayoutWriteOptions = {}): ResolvedWriteOptions {
  const durability = options.durability ?? "full";
  if (durability !== "full" && durability !== "ordered") {
    throw new LayoutOptionError(
      "durability",
      durability,
      'Unknown durability (expected "full" or "ordered")',
    );
  }
  const uuid = options.uuid ?? (() => globalThis.crypto.randomUUID());
  const clock = options.now;
  return {
    now: clock === undefined ? () => new Date() : () => {
      const date: unknown = clock();
      if (!(date instanceof Date) || Number.isNaN(date.getTime())) {
        throw new LayoutOptionError("now", date, "now must return a valid date");
      }
      return date;
    },
    uuidHex: () => {
      const value: unknown = uuid();
      const hex = typeof value === "string" ? value.replace(/-/g, "").toLowerCase() : "";
      if (!/^[0-9a-f]{32}$/.test(hex)) {
        throw new LayoutError(
          `The uuid source returned a value without 32 hex digits: ${preview(value)}`,
        );
      }
      return hex;
    },
    durability,
    sha256: options.sha256 ?? portableSha256,
  };
}
