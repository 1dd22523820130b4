import { test } from "node:test";
import process from "node:process";
import { nodeFs, nodeSha256 } from "../adapters/node.ts";
import { checkStoreDescriptors } from "./_store_descriptors.ts";

test(
  "nodeFs(): the store's reads, saves, listings and compaction leave no descriptor open, also on damaged files",
  { skip: process.platform !== "linux" && "counts /proc/self/fd (Linux)" },
  () => checkStoreDescriptors(nodeFs(), nodeSha256),
);
