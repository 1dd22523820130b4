// The Deno adapter never reads a FIFO or device through readFileNoFollow.
import { denoFs } from "../adapters/deno.ts";
import { checkSpecialFilesUnread } from "./_special_read.ts";

if (Deno.build.os === "linux") {
  Deno.test("denoFs readFileNoFollow reads a device or a FIFO with bytes in it as empty, at once", async () => {
    await checkSpecialFilesUnread(denoFs());
  });
}
