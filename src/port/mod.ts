/**
 * The filesystem port, its typed errors, the SHA-256 port, POSIX path helpers and the
 * durability recipes shared by both storage designs.
 *
 * @module
 */
export type {
  DirEntry,
  EntryKind,
  FileHandle,
  FileInfo,
  FileSystem,
  MkdirOptions,
  OpenedFile,
  OpenOptions,
  RemoveOptions,
  WriteFileOptions,
} from "./fs.ts";
export type { ProcessProbe } from "./probe.ts";
export {
  AlreadyExists,
  FsError,
  type FsErrorOptions,
  FsIoError,
  IsADirectory,
  isFsError,
  NotADirectory,
  NotEmpty,
  NotFound,
  PermissionDenied,
} from "./errors.ts";
export { portableSha256, type Sha256, type Sha256Factory, sha256Hex, toHex } from "./sha256.ts";
export {
  atomicReplace,
  type AtomicReplaceOptions,
  type Durability,
  durableAppend,
  type DurableAppendOptions,
  ensurePrivateDir,
  PRIVATE_DIR_MODE,
  PRIVATE_FILE_MODE,
  readDirIfExists,
  readIfExists,
  stagedPublish,
  type StagedPublishOptions,
  syncTree,
  tempNameFor,
  writeNewFile,
  type WriteNewFileOptions,
} from "./durable.ts";
