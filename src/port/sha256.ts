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

/** What `sha256OfHandle` reads at a time. */
const HANDLE_CHUNK = 1 << 20;

/**
 * The size and SHA-256 (lowercase hex) of what `handle` holds from offset 0 to its end, read in
 * chunks (never whole); undefined once more than `maxBytes` bytes are there. Internal: not
 * exported by the package.
 */
export async function sha256OfHandle(
  handle: { read(offset: number, length: number): Promise<Uint8Array> },
  factory: Sha256Factory,
  maxBytes: number = Number.POSITIVE_INFINITY,
): Promise<{ readonly size: number; readonly hex: string } | undefined> {
  const hash = factory();
  let size = 0;
  for (;;) {
    const chunk = await handle.read(size, HANDLE_CHUNK);
    if (chunk.length === 0) break;
    size += chunk.length;
    if (size > maxBytes) return undefined;
    hash.update(chunk);
    // A regular file reads short only at its end.
    if (chunk.length < HANDLE_CHUNK) break;
  }
  return { size, hex: hash.digestHex() };
}
