import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { mapNativeError } from "../adapters/_errors.ts";
import { FsIoError, NotFound, PermissionDenied } from "../src/port/errors.ts";

const linux = process.platform === "linux";

test("an error without a code gets the POSIX code its '(os error N)' names", {
  skip: !linux,
}, () => {
  const cases: readonly (readonly [number, string])[] = [
    [27, "EFBIG"],
    [122, "EDQUOT"],
    [28, "ENOSPC"],
    [30, "EROFS"],
    [24, "EMFILE"],
    [23, "ENFILE"],
    [18, "EXDEV"],
    [36, "ENAMETOOLONG"],
    [22, "EINVAL"],
    [16, "EBUSY"],
    [26, "ETXTBSY"],
    [5, "EIO"],
  ];
  for (const [errno, code] of cases) {
    const native = new Error(`Something failed (os error ${errno})`);
    const mapped = mapNativeError(native, "write", "/f");
    assert.ok(mapped instanceof FsIoError, `${code}: ${mapped}`);
    assert.equal(mapped.code, code);
    assert.equal(mapped.cause, native);
  }
  const denied = mapNativeError(new Error("Operation not permitted (os error 1)"), "chmod", "/f");
  assert.ok(denied instanceof PermissionDenied);
  assert.equal(denied.code, "EPERM");
  assert.equal(mapNativeError(new Error("x (os error 13)"), "open", "/f").code, "EACCES");
  assert.ok(mapNativeError(new Error("gone (os error 2)"), "open", "/f") instanceof NotFound);
});

test("an error with neither a code nor a known errno maps to EIO", () => {
  assert.equal(mapNativeError(new Error("odd"), "write", "/f").code, "EIO");
  assert.equal(mapNativeError(new Error("odd (os error 9999)"), "write", "/f").code, "EIO");
  assert.equal(mapNativeError("not an error", "write", "/f").code, "EIO");
});

test("a native code wins over the errno in the message", () => {
  const native = Object.assign(new Error("No space left (os error 27)"), { code: "ENOSPC" });
  assert.equal(mapNativeError(native, "write", "/f").code, "ENOSPC");
});

test("Node's argument and size codes map to EINVAL and EFBIG", () => {
  for (const code of ["ERR_INVALID_ARG_VALUE", "ERR_INVALID_ARG_TYPE", "ERR_OUT_OF_RANGE"]) {
    const mapped = mapNativeError(Object.assign(new TypeError("bad"), { code }), "open", "/a");
    assert.ok(mapped instanceof FsIoError);
    assert.equal(mapped.code, "EINVAL", code);
  }
  const big = Object.assign(new RangeError("too large"), { code: "ERR_FS_FILE_TOO_LARGE" });
  assert.equal(mapNativeError(big, "read", "/a").code, "EFBIG");
});

test("a mapped error names its call and path once, not again after the runtime's own", () => {
  const node = Object.assign(
    new Error("ELOOP: too many symbolic links encountered, lstat '/a/b'"),
    { code: "ELOOP" },
  );
  const deno = new Error("Too many levels of symbolic links (os error 40): lstat '/a/b'");
  const renamed = Object.assign(
    new Error("EXDEV: cross-device link not permitted, rename '/a' -> '/b'"),
    {
      code: "EXDEV",
    },
  );
  assert.equal(
    mapNativeError(node, "lstat", "/a/b").message,
    "ELOOP: too many symbolic links encountered: lstat '/a/b'",
  );
  assert.equal(
    mapNativeError(deno, "lstat", "/a/b").message,
    "Too many levels of symbolic links (os error 40): lstat '/a/b'",
  );
  assert.equal(
    mapNativeError(renamed, "rename", "/a").message,
    "EXDEV: cross-device link not permitted: rename '/a'",
  );
  // A message that names no call keeps all its words.
  assert.equal(
    mapNativeError(new Error("odd, really"), "write", "/f").message,
    "odd, really: write '/f'",
  );
});
