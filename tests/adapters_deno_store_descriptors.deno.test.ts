import { test } from "node:test";
import { denoFs, denoSha256 } from "../adapters/deno.ts";
import { checkStoreDescriptors } from "./_store_descriptors.ts";

test(
  "denoFs(): the store's reads, saves, listings and compaction leave no descriptor open, also on damaged files",
  { skip: Deno.build.os !== "linux" && "counts /proc/self/fd (Linux)" },
  () => checkStoreDescriptors(denoFs(), denoSha256),
);
