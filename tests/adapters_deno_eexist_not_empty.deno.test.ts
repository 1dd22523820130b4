/**
 * A non-empty directory that some platforms' rmdir reports as EEXIST is `NotEmpty` too. Linux says
 * ENOTEMPTY, so the platform's answer is simulated by replacing `Deno.remove` for one call (as the
 * adapter tests replace `Deno.stat`). The port promises `NotEmpty` for a non-recursive remove of a
 * non-empty directory on every platform, never `AlreadyExists`.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { denoFs } from "../adapters/deno.ts";
import { NotEmpty } from "../src/port/errors.ts";

test("denoFs().remove maps a platform's EEXIST for a non-empty directory to NotEmpty", async () => {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/file`, "x");
  const deno = Deno as unknown as { remove: typeof Deno.remove };
  const original = deno.remove;
  deno.remove = () => {
    const error = new Error("File exists (os error 17)");
    return Promise.reject(Object.assign(error, { code: "EEXIST" }));
  };
  try {
    await assert.rejects(denoFs().remove(dir), (error: unknown) => {
      assert.ok(error instanceof NotEmpty, String(error));
      return true;
    });
  } finally {
    deno.remove = original;
    await Deno.remove(dir, { recursive: true });
  }
});
