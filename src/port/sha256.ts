/**
 * The incremental SHA-256 port, and the portable default built on `@noble/hashes`. Adapters may
 * offer a native implementation (`nodeSha256`), which is much faster on large histories.
 *
 * @module
 */
import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js";

/** An incremental SHA-256 computation. */
export interface Sha256 {
  /** Feeds more bytes; returns the same object for chaining. */
  update(data: Uint8Array): Sha256;
  /** An independent copy of the current state (the original stays usable). */
  clone(): Sha256;
  /** The digest of everything fed so far, as 64 lowercase hex characters. Does not consume the state. */
  digestHex(): string;
}

/** Creates fresh SHA-256 states. */
export type Sha256Factory = () => Sha256;

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/** Formats bytes as lowercase hex. */
export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += HEX[byte];
  return out;
}

type NobleHash = ReturnType<typeof nobleSha256.create>;

class NobleSha256 implements Sha256 {
  #state: NobleHash;
  constructor(state: NobleHash) {
    this.#state = state;
  }
  update(data: Uint8Array): Sha256 {
    this.#state.update(data);
    return this;
  }
  clone(): Sha256 {
    return new NobleSha256(this.#state.clone());
  }
  digestHex(): string {
    return toHex(this.#state.clone().digest());
  }
}

/** The portable SHA-256 factory (pure TypeScript, runs everywhere). */
export const portableSha256: Sha256Factory = (): Sha256 => new NobleSha256(nobleSha256.create());

/** SHA-256 of `data` as lowercase hex, with the given factory (portable by default). */
export function sha256Hex(data: Uint8Array, factory: Sha256Factory = portableSha256): string {
  return factory().update(data).digestHex();
}
