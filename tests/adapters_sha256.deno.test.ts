import assert from "node:assert/strict";
import { denoSha256 } from "../adapters/deno.ts";
import { portableSha256, sha256Hex } from "../src/port/sha256.ts";

const encoder = new TextEncoder();

Deno.test('denoSha256 hashes the empty input and "abc" to the published digests', () => {
  assert.equal(
    sha256Hex(new Uint8Array(0), denoSha256),
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  );
  assert.equal(
    sha256Hex(encoder.encode("abc"), denoSha256),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
});

Deno.test("denoSha256 agrees with portableSha256 on a 1 MB buffer fed in chunks", () => {
  const data = new Uint8Array(1_000_000).map((_, i) => (i * 31 + (i >> 9)) & 0xff);
  const state = denoSha256();
  for (let i = 0; i < data.length; i += 4099) state.update(data.subarray(i, i + 4099));
  assert.equal(state.digestHex(), sha256Hex(data, portableSha256));
});

Deno.test("denoSha256 clones are independent and digestHex() does not consume the state", () => {
  const state = denoSha256().update(encoder.encode("ab"));
  const clone = state.clone().update(encoder.encode("c"));
  assert.equal(state.digestHex(), sha256Hex(encoder.encode("ab")));
  assert.equal(state.digestHex(), sha256Hex(encoder.encode("ab")));
  assert.equal(clone.digestHex(), sha256Hex(encoder.encode("abc")));
  state.update(encoder.encode("x"));
  assert.equal(clone.digestHex(), sha256Hex(encoder.encode("abc")));
  assert.equal(state.digestHex(), sha256Hex(encoder.encode("abx")));
});
