import { test } from "node:test";
import assert from "node:assert/strict";
import { nodeSha256 } from "../adapters/node.ts";
import {
  portableSha256,
  type Sha256Factory,
  sha256Hex,
  sha256OfHandle,
} from "../src/port/sha256.ts";

const encoder = new TextEncoder();

const VECTORS: readonly (readonly [string, Uint8Array, string])[] = [
  [
    "the empty input",
    new Uint8Array(0),
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  ],
  [
    '"abc"',
    encoder.encode("abc"),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  ],
  [
    "the two-block NIST message",
    encoder.encode("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
  ],
  [
    'one million "a" bytes',
    new Uint8Array(1_000_000).fill(0x61),
    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
  ],
];

const FACTORIES: readonly (readonly [string, Sha256Factory])[] = [
  ["nodeSha256", nodeSha256],
  ["portableSha256", portableSha256],
];

/** A deterministic 1 MiB buffer that is not periodic. */
function megabyte(): Uint8Array {
  const out = new Uint8Array(1024 * 1024);
  let state = 7;
  for (let i = 0; i < out.length; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out[i] = state >>> 24;
  }
  return out;
}

for (const [name, factory] of FACTORIES) {
  for (const [label, input, digest] of VECTORS) {
    test(`${name} hashes ${label} to the published digest`, () => {
      assert.equal(sha256Hex(input, factory), digest);
    });
  }

  test(`${name} gives the same digest for incremental updates of any chunking`, () => {
    const data = megabyte().subarray(0, 256 * 1024 + 5);
    const whole = factory().update(data).digestHex();
    for (const chunk of [63, 64, 65, 4096, 100_003]) {
      const state = factory();
      for (let i = 0; i < data.length; i += chunk) state.update(data.subarray(i, i + chunk));
      assert.equal(state.digestHex(), whole, `chunks of ${chunk}`);
    }
    const head = data.subarray(0, 10_000);
    const byteByByte = factory();
    for (let i = 0; i < head.length; i++) byteByByte.update(head.subarray(i, i + 1));
    assert.equal(byteByByte.digestHex(), factory().update(head).digestHex(), "single bytes");
  });

  test(`${name} clones are independent of the original and of each other`, () => {
    const state = factory().update(encoder.encode("ab"));
    const clone = state.clone();
    assert.equal(clone.update(encoder.encode("c")).digestHex(), sha256Hex(encoder.encode("abc")));
    assert.equal(state.digestHex(), sha256Hex(encoder.encode("ab")));
    state.update(encoder.encode("x"));
    assert.equal(state.digestHex(), sha256Hex(encoder.encode("abx")));
    assert.equal(clone.digestHex(), sha256Hex(encoder.encode("abc")));
  });

  test(`${name} digestHex() does not consume the state and update() chains`, () => {
    const state = factory();
    assert.equal(state.update(encoder.encode("a")), state);
    assert.equal(state.digestHex(), state.digestHex());
    state.update(encoder.encode("bc"));
    assert.equal(state.digestHex(), sha256Hex(encoder.encode("abc")));
  });
}

test("nodeSha256 and portableSha256 agree on a 1 MiB buffer", () => {
  const data = megabyte();
  const native = sha256Hex(data, nodeSha256);
  assert.match(native, /^[0-9a-f]{64}$/);
  assert.equal(native, sha256Hex(data, portableSha256));
});

test("sha256OfHandle() hashes a file of exactly maxBytes bytes and refuses one byte more", async () => {
  const data = encoder.encode("abcdef");
  const handle = {
    read: (offset: number, length: number) => Promise.resolve(data.slice(offset, offset + length)),
  };
  assert.deepEqual(await sha256OfHandle(handle, portableSha256, 6), {
    size: 6,
    hex: sha256Hex(data),
  });
  assert.equal(await sha256OfHandle(handle, portableSha256, 5), undefined);
  assert.deepEqual(await sha256OfHandle(handle, portableSha256), { size: 6, hex: sha256Hex(data) });
});
