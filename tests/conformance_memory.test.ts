import { test } from "node:test";
import { MemoryFs } from "../adapters/memory.ts";
import { testFileSystem } from "../testing.ts";

let next = 0;

testFileSystem({
  name: "MemoryFs",
  test,
  async setup() {
    const fs = new MemoryFs();
    const root = `/conformance-${next++}`;
    await fs.mkdir(root);
    return { fs, root, cleanup: () => fs.remove(root, { recursive: true }) };
  },
});
