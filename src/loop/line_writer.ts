/**
 * One-pass encoding of JSON lines to UTF-8: each line is encoded straight into one growing
 * buffer, followed by a newline, and its end offset comes from the encoder itself. The bytes and
 * the offsets recorded for them are therefore one computation and cannot disagree, and a long
 * generation is encoded without first joining its lines into one string (which for a two-byte
 * string doubles the memory, and then takes a second pass to count bytes).
 *
 * @module
 */

const encoder = new TextEncoder();

/** The newline byte that ends every line. */
const NEWLINE = 0x0a;

/** The most UTF-8 bytes one UTF-16 code unit encodes to (a lone surrogate becomes U+FFFD). */
const MAX_BYTES_PER_UNIT = 3;

/**
 * Encodes lines to UTF-8 into one buffer, each followed by `"\n"`. The buffer starts at the
 * given capacity and doubles when a line does not fit, so writing n bytes copies O(n) bytes.
 */
export class LineWriter {
  #buffer: Uint8Array;
  #length = 0;

  /** Starts an empty writer whose buffer holds `capacity` bytes before it first grows. */
  constructor(capacity = 0) {
    this.#buffer = new Uint8Array(Math.max(0, Math.ceil(capacity)));
  }

  /** The number of bytes written so far: the end offset of the last line, its newline included. */
  get length(): number {
    return this.#length;
  }

  /**
   * Writes `line` as UTF-8, then a newline, and returns the new length: the offset just past
   * this line's newline. The line is encoded as `TextEncoder` encodes it (a lone surrogate, which
   * `JSON.stringify` never produces, becomes U+FFFD).
   */
  push(line: string): number {
    let rest = line;
    // ASCII needs one byte per code unit: room for that, and the newline, before the first try.
    this.#reserve(rest.length + 1);
    for (;;) {
      const { read, written } = encoder.encodeInto(rest, this.#buffer.subarray(this.#length));
      this.#length += written;
      if (read === rest.length) break;
      // Multi-byte characters filled the room first; the encoder stopped on a character boundary.
      rest = rest.slice(read);
      this.#reserve(rest.length * MAX_BYTES_PER_UNIT + 1);
    }
    // Multi-byte characters may have filled the room kept for the newline.
    this.#reserve(1);
    this.#buffer[this.#length++] = NEWLINE;
    return this.#length;
  }

  /**
   * The bytes written so far: a view of the writer's buffer, which later pushes never change
   * (they write past it, or into a new buffer).
   */
  bytes(): Uint8Array {
    return this.#buffer.subarray(0, this.#length);
  }

  /** Makes room for at least `bytes` more bytes. */
  #reserve(bytes: number): void {
    const needed = this.#length + bytes;
    if (needed <= this.#buffer.length) return;
    const grown = new Uint8Array(Math.max(needed, this.#buffer.length * 2, 256));
    grown.set(this.#buffer.subarray(0, this.#length));
    this.#buffer = grown;
  }
}
