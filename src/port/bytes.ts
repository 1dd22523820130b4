/**
 * Byte-array helpers shared by the core and the adapters.
 *
 * @module
 */

/**
 * `pieces` in order in one array (`length` is their total size). A single piece is returned as
 * it is, without a copy.
 */
export function joinBytes(
  pieces: readonly Uint8Array[],
  length: number = pieces.reduce((sum, piece) => sum + piece.length, 0),
): Uint8Array {
  if (pieces.length === 1) return pieces[0] as Uint8Array;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const piece of pieces) {
    out.set(piece, offset);
    offset += piece.length;
  }
  return out;
}
