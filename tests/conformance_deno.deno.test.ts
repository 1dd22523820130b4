import assert from "node:assert/strict";
import { denoFs } from "../adapters/deno.ts";
import { testFileSystem } from "../testing.ts";
import { FsIoError, NotFound, PermissionDenied } from "../src/port/errors.ts";

testFileSystem({
  name: "denoFs",
  test: Deno.test,
  async setup() {
    const root = await Deno.makeTempDir({ prefix: "loop-conformance-" });
    return { fs: denoFs(), root, cleanup: () => Deno.remove(root, { recursive: true }) };
  },
});

Deno.test("denoFs keeps the native error as cause and its code on mapped errors", async () => {
  const root = await Deno.makeTempDir({ prefix: "loop-deno-errors-" });
  try {
    const fs = denoFs();
    const missing = `${root}/missing`;
    const notFound = await fs.readFile(missing).then(
      () => assert.fail("readFile of a missing file resolved"),
      (error: unknown) => error,
    );
    assert.ok(notFound instanceof NotFound);
    assert.equal(notFound.path, missing);
    assert.ok(notFound.cause instanceof Deno.errors.NotFound);

    // A symlink loop is neither of the named conditions: it maps to FsIoError keeping ELOOP.
    await fs.symlink(`${root}/loop`, `${root}/loop`);
    const loop = await fs.stat(`${root}/loop`).then(
      () => assert.fail("stat of a symlink loop resolved"),
      (error: unknown) => error,
    );
    assert.ok(loop instanceof FsIoError);
    assert.equal(loop.code, "ELOOP");
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("denoFs maps a refused permission to PermissionDenied keeping the native code", async () => {
  const fs = denoFs();
  const refusals: PermissionDenied[] = [];
  const root = await Deno.makeTempDir({ prefix: "loop-deno-perm-" });
  try {
    const locked = `${root}/locked`;
    await fs.mkdir(locked, { mode: 0o700 });
    await fs.chmod(locked, 0o000);
    const outcome = await fs.readDir(locked).then(() => undefined, (error: unknown) => error);
    await fs.chmod(locked, 0o700);
    if (outcome !== undefined) {
      assert.ok(outcome instanceof PermissionDenied, String(outcome));
      assert.equal(outcome.code, "EACCES");
      refusals.push(outcome);
    }
  } finally {
    await Deno.remove(root, { recursive: true });
  }
  // procfs refuses a chmod even to root (Linux).
  const procfs = "/proc/self/status";
  if (await fs.lstat(procfs).then(() => true, () => false)) {
    const outcome = await fs.chmod(procfs, 0o777).then(() => undefined, (e: unknown) => e);
    assert.ok(outcome instanceof PermissionDenied, String(outcome));
    assert.ok(outcome.code === "EPERM" || outcome.code === "EACCES", outcome.code);
    refusals.push(outcome);
  }
  assert.ok(refusals.length > 0, "no permission refusal could be provoked on this machine");
});

Deno.test("denoFs homeDir() reads HOME", () => {
  const home = Deno.env.get(Deno.build.os === "windows" ? "USERPROFILE" : "HOME");
  assert.equal(denoFs().homeDir?.(), home === "" ? undefined : home);
});
