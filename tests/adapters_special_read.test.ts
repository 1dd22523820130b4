// The Node adapter never reads a FIFO or device through readFileNoFollow (on Node, and on Deno's
// Node layer): the fast listing reads every meta.json with it.
import { test } from "node:test";
import process from "node:process";
import { nodeFs } from "../adapters/node.ts";
import { checkSpecialFilesUnread } from "./_special_read.ts";

if (process.platform === "linux") {
  test("nodeFs readFileNoFollow reads a device or a FIFO with bytes in it as empty, at once", async () => {
    await checkSpecialFilesUnread(nodeFs());
  });
}
