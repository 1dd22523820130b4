import assert from "node:assert/strict";
import { homedir } from "node:os";
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
  const expected = home === undefined ? homedir() : home;
  assert.equal(denoFs().homeDir?.(), expected?.startsWith("/") ? expected : undefined);
});

Deno.test("without HOME, denoFs and nodeFs both answer the account's home directory; with one, only an absolute HOME", async () => {
  const root = new URL("..", import.meta.url).pathname;
  const show = (adapter: string, name: string) =>
    `import { ${name} } from ${JSON.stringify(`${root}adapters/${adapter}.ts`)};\n` +
    `console.log(JSON.stringify({ home: ${name}().homeDir?.() ?? null }));\n`;
  const dir = await Deno.makeTempDir({ prefix: "loop-home-" });
  try {
    await Deno.writeTextFile(`${dir}/deno.ts`, show("deno", "denoFs"));
    await Deno.writeTextFile(`${dir}/node.ts`, show("node", "nodeFs"));
    // Deno keeps its cache where it is, whatever HOME the child gets.
    const denoDir = Deno.env.get("DENO_DIR") ?? `${homedir()}/.cache/deno`;
    const homeOf = async (
      command: string,
      args: string[],
      env: Record<string, string> = {},
    ): Promise<string | null> => {
      const out = await new Deno.Command(command, {
        args,
        cwd: root,
        clearEnv: true,
        env: { PATH: Deno.env.get("PATH") ?? "", DENO_DIR: denoDir, ...env },
      }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, stderr);
      return JSON.parse(new TextDecoder().decode(out.stdout)).home;
    };
    const config = ["--config", `${root}deno.json`];
    const deno = await homeOf(Deno.execPath(), ["run", "-A", ...config, `${dir}/deno.ts`]);
    const node = await homeOf("node", ["--import", "tsx", `${dir}/node.ts`]);
    assert.equal(typeof deno, "string");
    assert.notEqual(deno, "");
    assert.equal(deno, node);
    // Without --allow-sys the account's entry cannot be read: the home directory is unknown.
    const denied = await homeOf(Deno.execPath(), [
      "run",
      "--allow-read",
      ...config,
      `${dir}/deno.ts`,
    ]);
    assert.equal(denied, null);
    // A HOME that is set is the answer when it is an absolute path, and unknown otherwise (never
    // the account's in its place), through either adapter on either runtime.
    for (const [home, expected] of [["", null], ["rel", null], ["/abs/home", "/abs/home"]]) {
      const env = { HOME: home as string };
      const runs = {
        denoFs: await homeOf(Deno.execPath(), ["run", "-A", ...config, `${dir}/deno.ts`], env),
        nodeFsOnDeno: await homeOf(
          Deno.execPath(),
          ["run", "-A", ...config, `${dir}/node.ts`],
          env,
        ),
        nodeFsOnNode: await homeOf("node", ["--import", "tsx", `${dir}/node.ts`], env),
      };
      assert.deepEqual(
        runs,
        { denoFs: expected, nodeFsOnDeno: expected, nodeFsOnNode: expected },
        JSON.stringify(home),
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
