// The conformance suite fails an adapter that breaks a promise the store builds on: each broken
// adapter here (a MemoryFs with one call changed) must fail the check named for it, while the
// same adapter unbroken passes it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { ConformanceFailure, type FileSystemCapabilities, testFileSystem } from "../testing.ts";
import type { FileHandle, FileSystem, MkdirOptions, OpenOptions } from "../src/port/fs.ts";
import { FsIoError, NotFound } from "../src/port/errors.ts";

/** `inner` with the calls of `over` in place of its own. */
function changed(inner: MemoryFs, over: Partial<Record<keyof FileSystem, unknown>>): FileSystem {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (typeof prop === "string" && prop in over) return over[prop as keyof FileSystem];
      const value = Reflect.get(target, prop, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  }) as unknown as FileSystem;
}

/** The suite's check that a rename over a file never leaves its name missing. */
const ATOMIC_RENAME =
  "rename() over an existing file replaces it atomically: the name is never missing";

/** A timer's turn, `ms` from now. */
const tick = (ms = 0) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `m` whose rename over a file removes the destination, then moves: apart by promise turns only,
 * or by what `pause` waits for.
 */
function removeThenMove(m: MemoryFs, pause?: () => Promise<unknown>): FileSystem {
  return changed(m, {
    async rename(from: string, to: string) {
      const both = await Promise.all([m.lstat(from), m.lstat(to)]).then(
        (infos) => infos.every((info) => info.kind === "file"),
        () => false,
      );
      if (both) {
        await m.remove(to);
        if (pause !== undefined) await pause();
      }
      await m.rename(from, to);
    },
  });
}

/** `inner` behind a wrapper that awaits each call, as a metrics or tracing wrapper does. */
function passThrough(inner: FileSystem): FileSystem {
  return new Proxy(inner, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      return async (...args: unknown[]) => {
        try {
          return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        } finally {
          // Nothing: the await and the finally add the turns a real wrapper adds.
        }
      };
    },
  });
}

/** A handle that writes at its own offset, from `start` on, instead of at the file's end. */
function ownOffset(handle: FileHandle, start: number): FileHandle {
  let offset = start;
  return {
    read: (at, length) => handle.read(at, length),
    async write(data) {
      // Rewrites the file from `offset`: what another handle appended there is overwritten.
      const whole = await handle.read(0, offset);
      await handle.truncate(0);
      await handle.write(whole);
      await handle.write(data);
      offset += data.length;
    },
    truncate: (length) => handle.truncate(length),
    sync: () => handle.sync(),
    stat: () => handle.stat(),
    close: () => handle.close(),
  };
}

/** Runs the suite's check named `check` over `make`; returns its failure message, if any. */
async function runCheck(
  check: string,
  make: (memory: MemoryFs) => FileSystem,
  capabilities?: FileSystemCapabilities,
): Promise<string | undefined> {
  const runs: (() => Promise<void>)[] = [];
  testFileSystem({
    name: "adapter",
    test: (name, fn) => {
      if (name === `adapter: ${check}`) runs.push(fn);
    },
    async setup() {
      const memory = new MemoryFs();
      await memory.mkdir("/root");
      return {
        fs: make(memory),
        root: "/root",
        cleanup: () => memory.remove("/root", { recursive: true }),
        ...(capabilities === undefined ? {} : { capabilities }),
      };
    },
  });
  assert.equal(runs.length, 1, `the suite has the check "${check}"`);
  try {
    await runs[0]!();
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

const BROKEN: {
  readonly check: string;
  /** How the adapter breaks it, where two entries break one check. */
  readonly how?: string;
  readonly broken: (memory: MemoryFs) => FileSystem;
  readonly capabilities?: FileSystemCapabilities;
}[] = [
  {
    check: "exclusive creates issued at once on one name: exactly one succeeds",
    // Looks, then creates: calls issued at once all see nothing there.
    broken: (m) =>
      changed(m, {
        async open(path: string, options: OpenOptions = {}) {
          if (!options.createNew) return await m.open(path, options);
          const there = await m.lstat(path).then(() => true, () => false);
          await tick();
          if (there) return await m.open(path, options);
          const { createNew: _, ...rest } = options;
          return await m.open(path, { ...rest, create: true, write: true });
        },
      }),
  },
  {
    check: ATOMIC_RENAME,
    // Removes the destination, then moves: for a moment there is nothing at its name.
    broken: (m) => removeThenMove(m, tick),
  },
  {
    check: ATOMIC_RENAME,
    how: "removes, then moves, with no timer or I/O between",
    // The same, its two steps apart by promise turns only (no timer, no I/O between them).
    broken: (m) => removeThenMove(m),
  },
  {
    check: ATOMIC_RENAME,
    how: "removes, then moves, behind a pass-through wrapper",
    // A wrapper (metrics, tracing) shifts the promise turns between the two steps.
    broken: (m) => passThrough(removeThenMove(m)),
  },
  {
    check: "readDir() lists entries sorted by name (by UTF-16 code unit) with their kinds",
    // Sorted by code point (as UTF-8 bytes sort), not as JavaScript's `<` sorts.
    broken: (m) =>
      changed(m, {
        async readDir(path: string) {
          const byCodePoint = (a: string, b: string): number => {
            const [x, y] = [[...a], [...b]];
            for (let i = 0; i < Math.min(x.length, y.length); i++) {
              const d = (x[i]?.codePointAt(0) ?? 0) - (y[i]?.codePointAt(0) ?? 0);
              if (d !== 0) return d;
            }
            return x.length - y.length;
          };
          return (await m.readDir(path)).sort((a, b) => byCodePoint(a.name, b.name));
        },
      }),
  },
  {
    check: "append handles write at the end the file has then, whatever another handle appended",
    // Each append handle keeps its own offset, from the end it saw at the open.
    broken: (m) =>
      changed(m, {
        async open(path: string, options: OpenOptions = {}) {
          const handle = await m.open(path, options);
          if (!options.append) return handle;
          return ownOffset(handle, (await handle.stat()).size);
        },
        openAppendNoFollow: undefined,
      }),
  },
  {
    check: "openAppendNoFollow(), where offered, appends at the end and refuses a final symlink",
    // Opens for writing at offset 0, not for appending; on a fixture without symlinks.
    broken: (m) =>
      changed(m, {
        async openAppendNoFollow(path: string) {
          const opened = await m.openAppendNoFollow(path);
          await opened.handle.close();
          return { handle: ownOffset(await m.open(path, { write: true }), 0), info: opened.info };
        },
      }),
    capabilities: { symlinks: false },
  },
  {
    check: "rename() moves a file to a new name",
    // Throws NotFound instead of returning a rejected promise.
    broken: (m) =>
      changed(m, {
        lstat(path: string) {
          if (path.endsWith("/from")) throw new NotFound("lstat", path);
          return m.lstat(path);
        },
      }),
  },
];

for (const { check, how, broken, capabilities } of BROKEN) {
  const title = how === undefined ? check : `${check} (${how})`;
  test(`the conformance suite fails an adapter that breaks: ${title}`, async () => {
    assert.equal(await runCheck(check, (m) => m, capabilities), undefined, "MemoryFs passes it");
    const failure = await runCheck(check, broken, capabilities);
    assert.ok(failure !== undefined, "the broken adapter passed");
  });
}

test("the longest-path syncDir check holds an adapter to 4095 bytes unless its fixture says less", async () => {
  // A chroot-like wrapper whose platform refuses its paths from 3,500 bytes on.
  const check = "syncDir() of a directory whose path is 4095 bytes (or the fixture's " +
    "longestPath) succeeds, and of anything but a directory fails";
  const limited = (m: MemoryFs) =>
    changed(m, {
      async mkdir(path: string, options?: MkdirOptions) {
        if (new TextEncoder().encode(path).length >= 3500) {
          throw new FsIoError("ENAMETOOLONG", "mkdir", path, "File name too long");
        }
        return await m.mkdir(path, options);
      },
    });
  assert.match(String(await runCheck(check, limited)), /File name too long/);
  assert.equal(await runCheck(check, limited, { longestPath: 3499 }), undefined);
  // A fixture cannot ask for more than the platform's 4095 bytes, nor declare what is no length.
  assert.equal(await runCheck(check, (m) => m, { longestPath: 9000 }), undefined);
  for (const bad of [Number.NaN, 2999, 3400.5]) {
    assert.match(
      String(await runCheck(check, (m) => m, { longestPath: bad })),
      /longestPath must be an integer from 3300 to 4095/,
    );
  }
});

test("the atomic rename check passes a correct adapter whose rename settles on a timer", async () => {
  // Reads answered at once, the rename a timer later: the check must give the timer its turn.
  const slow = (m: MemoryFs) =>
    changed(m, {
      async rename(from: string, to: string) {
        await tick(2);
        await m.rename(from, to);
      },
    });
  assert.equal(await runCheck(ATOMIC_RENAME, slow), undefined);
});

test("the atomic rename check reports a rename that fails, after its reads", async () => {
  const failing = (m: MemoryFs) =>
    changed(m, {
      async rename(_from: string, to: string) {
        await tick(2);
        throw new NotFound("rename", to);
      },
    });
  assert.match((await runCheck(ATOMIC_RENAME, failing)) ?? "", /No such file/);
});

test("a fixture cleanup that fails is reported: alone after a passing check, beside a failing one", async () => {
  const checks: [string, () => Promise<void>][] = [];
  let breakWrites = false;
  testFileSystem({
    name: "adapter",
    test: (name, fn) => {
      checks.push([name, fn]);
    },
    async setup() {
      const memory = new MemoryFs();
      await memory.mkdir("/root");
      return {
        fs: changed(memory, {
          writeFile: (...args: Parameters<MemoryFs["writeFile"]>) =>
            breakWrites
              ? Promise.reject(new FsIoError("EIO", "writeFile", args[0], "broken"))
              : memory.writeFile(...args),
        }),
        root: "/root",
        cleanup: () => Promise.reject(new Error("cleanup refused")),
      };
    },
  });
  const [name, first] = checks[0]!;
  await assert.rejects(first(), (error: unknown) => {
    // The check passed: the cleanup's own error is the failure, as thrown.
    assert.ok(!(error instanceof ConformanceFailure), name);
    assert.equal((error as Error).message, "cleanup refused");
    return true;
  });
  breakWrites = true;
  const failures: string[] = [];
  for (const [, run] of checks) {
    try {
      await run();
    } catch (error) {
      if (error instanceof ConformanceFailure) failures.push(error.message);
    }
  }
  const both = failures.filter((message) =>
    message.includes("(and the fixture cleanup failed: Error: cleanup refused)")
  );
  assert.ok(both.length > 0, "a failing check names the cleanup failure beside its own");
  for (const message of both) {
    assert.ok(!message.startsWith("(and"), "the check's own failure comes first");
  }
});

test("the suite's failures say what the check expected and what the adapter did", async () => {
  const cases: { check: string; broken: (m: MemoryFs) => FileSystem; says: RegExp }[] = [
    {
      check: "mkdir() creates a directory with the requested mode",
      broken: (m) =>
        changed(m, {
          mkdir: (path: string, options: MkdirOptions = {}) =>
            m.mkdir(path, { ...options, mode: 0o755 }),
        }),
      says: /^mode of a directory made with 0o700: expected mode 0o700, got 0o755$/,
    },
    {
      check: "writeFile() and readFile() round-trip text",
      broken: (m) =>
        changed(m, {
          readFile: async (path: string) => new Uint8Array([...await m.readFile(path), 0x0a]),
        }),
      says:
        /^text read back: expected 15 bytes \[68 c3 a9 .*\], got 16 bytes \[68 c3 a9 .* 0a 0a\]$/,
    },
    {
      check: "writeFile() and readFile() round-trip every byte value",
      broken: (m) =>
        changed(m, {
          readFile: async (path: string) => (await m.readFile(path)).map((b) => b === 10 ? 13 : b),
        }),
      says: /: bytes differ at offset \d+ \(expected 10, got 13\)$/,
    },
    {
      check: "mkdir() with a missing parent fails with NotFound",
      broken: (m) =>
        changed(m, {
          mkdir: (path: string, options: MkdirOptions = {}) =>
            m.mkdir(path, { ...options, recursive: true }),
        }),
      says: /^mkdir with a missing parent: expected a rejection with NotFound, but it resolved/,
    },
    {
      check: "readFile() of a directory fails with IsADirectory",
      broken: (m) =>
        changed(m, {
          readFile: (path: string) => Promise.reject(new FsIoError("EIO", "readFile", path, "bad")),
        }),
      says:
        /^readFile of a directory: expected a rejection with IsADirectory, got FsIoError \(EIO\)/,
    },
    {
      check: "mkdir() with a missing parent fails with NotFound",
      broken: (m) =>
        changed(m, {
          mkdir(path: string) {
            throw new NotFound("mkdir", path);
          },
        }),
      says: /^mkdir with a missing parent: threw NotFound \(ENOENT\): .* instead of returning a re/,
    },
    {
      check: "mkdir() with a missing parent fails with NotFound",
      // Refuses without a promise at all: a caller's `.catch()` would throw a TypeError.
      broken: (m) => changed(m, { mkdir: () => undefined }),
      says: /^mkdir with a missing parent: returned undefined, not a promise$/,
    },
  ];
  for (const { check, broken, says } of cases) {
    assert.equal(await runCheck(check, (m) => m), undefined, `MemoryFs passes "${check}"`);
    const failure = await runCheck(check, broken);
    assert.match(failure ?? "(passed)", says, `${check}: ${failure}`);
  }
});
