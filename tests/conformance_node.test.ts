import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nodeFs } from "../adapters/node.ts";
import {
  CONFORMANCE_CHECK_NAMES,
  ConformanceFailure,
  type FileSystemCapabilities,
  testFileSystem,
} from "../testing.ts";
import type { FileSystem } from "../src/port/fs.ts";
import {
  AlreadyExists,
  FsIoError,
  NotEmpty,
  NotFound,
  PermissionDenied,
} from "../src/port/errors.ts";

testFileSystem({
  name: "nodeFs",
  test,
  async setup() {
    const root = await mkdtemp(join(tmpdir(), "loop-conformance-"));
    return { fs: nodeFs(), root, cleanup: () => rm(root, { recursive: true, force: true }) };
  },
});

test("the conformance suite registers every check once under the adapter's name", () => {
  const names: string[] = [];
  testFileSystem({
    name: "probe",
    test: (name) => names.push(name),
    setup: () => {
      throw new Error("setup is not called while registering");
    },
  });
  assert.equal(names.length, CONFORMANCE_CHECK_NAMES.length);
  assert.equal(new Set(names).size, names.length);
  assert.ok(names.every((name) => name.startsWith("probe: ")));
  assert.ok(CONFORMANCE_CHECK_NAMES.length > 60);
});

test("nodeFs keeps the native error as cause and its code on mapped errors", async () => {
  const root = await mkdtemp(join(tmpdir(), "loop-node-errors-"));
  try {
    const fs = nodeFs();
    const missing = join(root, "missing");
    const notFound = await fs.readFile(missing).then(
      () => assert.fail("readFile of a missing file resolved"),
      (error: unknown) => error,
    );
    assert.ok(notFound instanceof NotFound);
    assert.equal(notFound.path, missing);
    assert.equal((notFound.cause as { code?: string }).code, "ENOENT");

    await fs.writeFile(join(root, "f"), new Uint8Array([1]));
    const exists = await fs.mkdir(join(root, "f")).then(
      () => assert.fail("mkdir over a file resolved"),
      (error: unknown) => error,
    );
    assert.ok(exists instanceof AlreadyExists);

    // A symlink loop is neither of the named conditions: it maps to FsIoError keeping ELOOP.
    await fs.symlink(join(root, "loop"), join(root, "loop"));
    const loop = await fs.stat(join(root, "loop")).then(
      () => assert.fail("stat of a symlink loop resolved"),
      (error: unknown) => error,
    );
    assert.ok(loop instanceof FsIoError);
    assert.equal(loop.code, "ELOOP");
    assert.equal((loop.cause as { code?: string }).code, "ELOOP");
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

test("nodeFs maps a refused permission to PermissionDenied keeping the native code", async () => {
  const fs = nodeFs();
  const refusals: PermissionDenied[] = [];
  // Permission bits refuse an unprivileged user...
  const root = await mkdtemp(join(tmpdir(), "loop-node-perm-"));
  try {
    const locked = join(root, "locked");
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
    await rm(root, { recursive: true, force: true });
  }
  // ...while procfs refuses a chmod even to root (Linux).
  const procfs = "/proc/self/status";
  if (await fs.lstat(procfs).then(() => true, () => false)) {
    const outcome = await fs.chmod(procfs, 0o777).then(() => undefined, (e: unknown) => e);
    assert.ok(outcome instanceof PermissionDenied, String(outcome));
    assert.ok(outcome.code === "EPERM" || outcome.code === "EACCES", outcome.code);
    assert.equal((outcome.cause as { code?: string }).code, outcome.code);
    refusals.push(outcome);
  }
  assert.ok(refusals.length > 0, "no permission refusal could be provoked on this machine");
});

/** Runs every check over `fs` in fresh temp dirs; returns the failures by check name. */
async function runSuite(
  fs: FileSystem,
  capabilities?: FileSystemCapabilities,
): Promise<Map<string, unknown>> {
  const checks: [string, () => Promise<void>][] = [];
  testFileSystem({
    name: "probe",
    test: (name, fn) => checks.push([name.slice("probe: ".length), fn]),
    async setup() {
      const root = await mkdtemp(join(tmpdir(), "loop-conformance-probe-"));
      const cleanup = () => rm(root, { recursive: true, force: true });
      return capabilities === undefined
        ? { fs, root, cleanup }
        : { fs, root, cleanup, capabilities };
    },
  });
  const failures = new Map<string, unknown>();
  for (const [name, fn] of checks) {
    await fn().catch((error: unknown) => failures.set(name, error));
  }
  return failures;
}

test("the conformance suite reports each misbehaviour of a broken adapter", async () => {
  const real = nodeFs();
  const broken: FileSystem = {
    ...bind(real),
    // Unsorted listings.
    readDir: async (path) => (await real.readDir(path)).reverse(),
    // createNew degraded to create + truncate.
    open: (path, options = {}) =>
      real.open(
        path,
        options.createNew === true ? { ...options, createNew: false, create: true } : options,
      ),
    // NotEmpty leaked as a generic I/O error.
    rename: (from, to) =>
      real.rename(from, to).catch((error: unknown) => {
        throw error instanceof NotEmpty ? new FsIoError("EIO", "rename", to, "broken") : error;
      }),
    // lstat following symlinks.
    lstat: (path) => real.stat(path),
  };
  const failures = await runSuite(broken);
  for (
    const name of [
      "readDir() lists entries sorted by name (by UTF-16 code unit) with their kinds",
      "open() with createNew fails with AlreadyExists on an existing file",
      "open() with createNew fails with AlreadyExists on a dangling symlink",
      "rename() of a directory over a non-empty directory fails with NotEmpty",
      "stat() follows a symlink and lstat() does not",
    ]
  ) {
    assert.ok(failures.has(name), `the suite missed: ${name}`);
    assert.ok(failures.get(name) instanceof ConformanceFailure, `${name}: ${failures.get(name)}`);
  }
  assert.ok(!failures.has("writeFile() and readFile() round-trip text"));
  assert.ok(failures.size < CONFORMANCE_CHECK_NAMES.length / 2, `${failures.size} failures`);
});

test("the conformance suite checks the fallback of a capability a fixture declares absent", async () => {
  const real = nodeFs();
  // Claiming no symlinks while creating them is itself a misbehaviour the fallback catches.
  const lying = await runSuite(real, { symlinks: false });
  assert.ok(lying.has("stat() follows a symlink and lstat() does not"));
  assert.ok(
    lying.get("stat() follows a symlink and lstat() does not") instanceof ConformanceFailure,
  );
  assert.ok(!lying.has("writeFile() and readFile() round-trip text"));

  const withoutLinks: FileSystem = {
    ...bind(real),
    symlink: (_target, path) => Promise.reject(new PermissionDenied("symlink", path)),
  };
  const honest = await runSuite(withoutLinks, { symlinks: false, modes: false });
  assert.deepEqual([...honest.keys()], []);
});

/** The methods of `fs` bound to it, so a wrapper can override a few of them. */
function bind(fs: FileSystem): FileSystem {
  return {
    open: fs.open.bind(fs),
    readFile: fs.readFile.bind(fs),
    writeFile: fs.writeFile.bind(fs),
    rename: fs.rename.bind(fs),
    remove: fs.remove.bind(fs),
    mkdir: fs.mkdir.bind(fs),
    readDir: fs.readDir.bind(fs),
    stat: fs.stat.bind(fs),
    lstat: fs.lstat.bind(fs),
    realPath: fs.realPath.bind(fs),
    chmod: fs.chmod.bind(fs),
    symlink: fs.symlink.bind(fs),
    readLink: fs.readLink.bind(fs),
    syncDir: fs.syncDir.bind(fs),
    utime: fs.utime.bind(fs),
  };
}
