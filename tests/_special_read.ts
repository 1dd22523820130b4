// A no-follow read of a FIFO, socket or device must come back at once without reading it: shared
// by the Node adapter's test (on Node, and on Deno's Node layer) and the Deno adapter's.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { closeSync, constants, openSync, writeSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FileSystem } from "../src/port/fs.ts";
import { readIfRegular } from "../src/port/regular.ts";

/** `read` settled within two seconds, or the test fails (a device read never ends). */
async function atOnce<T>(read: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not come back at once`)), 2_000);
  });
  try {
    return await Promise.race([read, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Checks `fs.readFileNoFollow` on a character device (`/dev/zero`, which never ends), a FIFO a
 * writer holds open with bytes in it, and a regular file, and that `readIfRegular` then says what
 * is there instead of returning bytes.
 */
export async function checkSpecialFilesUnread(fs: FileSystem): Promise<void> {
  const read = fs.readFileNoFollow?.bind(fs);
  assert.ok(read !== undefined, "the adapter offers readFileNoFollow on this platform");
  assert.equal((await atOnce(read("/dev/zero"), "a read of /dev/zero")).length, 0);
  assert.equal(await atOnce(readIfRegular(fs, "/dev/zero"), "readIfRegular(/dev/zero)"), "other");
  const dir = await mkdtemp(join(tmpdir(), "loop-special-read-"));
  const fifo = join(dir, "fifo");
  execFileSync("mkfifo", [fifo]);
  // A reader end held open (non-blocking) lets a writer open it and leave bytes in the pipe.
  const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
  const writer = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
  try {
    writeSync(writer, "bytes in the pipe");
    assert.equal((await atOnce(read(fifo), "a read of a FIFO")).length, 0);
    assert.equal(await atOnce(readIfRegular(fs, fifo), "readIfRegular(fifo)"), "other");
    const file = join(dir, "file");
    await writeFile(file, "regular");
    assert.equal(new TextDecoder().decode(await read(file)), "regular");
  } finally {
    closeSync(writer);
    closeSync(reader);
    await rm(dir, { recursive: true, force: true });
  }
}
