// The temp file of an atomic replace sits beside its target under a name that must itself be
// legal: a target whose own name is near the 255-byte limit is still replaceable.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as os from "node:os";
import * as fsp from "node:fs/promises";
import { join } from "node:path";
import { MemoryFs } from "../adapters/memory.ts";
import { nodeFs } from "../adapters/node.ts";
import { atomicReplace, isTempName, tempNameFor } from "../src/port/durable.ts";
import type { FileSystem } from "../src/port/fs.ts";

const encoder = new TextEncoder();
const bytes = (text: string): number => encoder.encode(text).length;

/** Names of 1 to 255 UTF-8 bytes, in one-, two-, three- and four-byte characters. */
function names(): string[] {
  const out: string[] = [];
  for (const char of ["a", "é", "€", "😀"]) {
    const size = bytes(char);
    for (const length of [1, 60, 236, 240, 250, 255]) {
      const count = Math.floor(length / size);
      if (count > 0) out.push(char.repeat(count));
    }
  }
  // Characters of every size mixed, one short of the limit: the cut falls inside none of them.
  out.push(`${"a".repeat(244)}é€😀`);
  return out;
}

test("tempNameFor() makes a temp name of at most 255 bytes beside any legal name", () => {
  for (const name of names()) {
    assert.ok(bytes(name) <= 255, name);
    const temp = tempNameFor(`/dir/${name}`);
    assert.ok(temp.startsWith("/dir/."), temp);
    const tempName = temp.slice("/dir/".length);
    assert.ok(bytes(tempName) <= 255, `${bytes(tempName)} bytes for a ${bytes(name)}-byte name`);
    assert.ok(isTempName(tempName), tempName);
    // Whole characters only: no lone surrogate from a cut pair.
    assert.equal(tempName, tempName.toWellFormed(), tempName);
    // A short name is kept whole, so a temp file says which file it was for.
    if (bytes(name) <= 200) assert.ok(tempName.startsWith(`.${name}.`), tempName);
    // Two temp names of the same target differ.
    assert.notEqual(tempNameFor(`/dir/${name}`), temp);
  }
});

async function replaceLongNames(fs: FileSystem, dir: string): Promise<void> {
  for (const name of names()) {
    const path = `${dir}/${name}`;
    await fs.writeFile(path, encoder.encode("old"));
    await atomicReplace(fs, path, encoder.encode(`new ${name}`));
    assert.equal(new TextDecoder().decode(await fs.readFile(path)), `new ${name}`);
  }
  // Nothing but the targets is left.
  const entries = (await fs.readDir(dir)).map((entry) => entry.name).sort();
  assert.deepEqual(entries, [...new Set(names())].sort());
}

test("atomicReplace() replaces a file whose name is up to 255 bytes (memory)", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/dir");
  await replaceLongNames(fs, "/dir");
});

test("atomicReplace() replaces a file whose name is up to 255 bytes (real disk)", async () => {
  const dir = await fsp.mkdtemp(join(os.tmpdir(), "loop-durable-names-"));
  try {
    await replaceLongNames(nodeFs(), dir);
  } finally {
    await fsp.rm(dir, { recursive: true, force: true });
  }
});

test("isTempName() takes only the names tempNameFor() makes, not a user's file ending in .tmp", () => {
  assert.ok(isTempName(".notes.abcdef01z.tmp"));
  assert.ok(isTempName(tempNameFor("/dir/notes").slice("/dir/".length)));
  for (
    const name of [
      ".notes.abcdef01.tmp",
      "notes.abcdef01z.tmp",
      ".notes.tmp",
      ".notes.ABCDEF01z.tmp",
    ]
  ) {
    assert.ok(!isTempName(name), name);
  }
});
