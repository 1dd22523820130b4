/**
 * `SessionStore`: where Loop sessions live on a filesystem, and the entry point to create, open,
 * list, archive, delete, compact and clean them up.
 *
 * ```
 * <agentDir>/sessions/<workspace-hash>/<session-id>/{meta.json, messages.jsonl, index.json}
 * <agentDir>/sessions/<workspace-hash>/<session-id>.jsonl     legacy v2 session or its backup
 * <agentDir>/sessions/<workspace-hash>/archive.json           archive membership
 * ```
 *
 * A collection is one such directory: the workspace collection of a cwd, or an explicit
 * `sessionDir` (for example a global collection of independent chats that keep their own cwd).
 *
 * **Locks.** With a process probe (the `process` option, or by default the filesystem's own, which
 * `nodeFs()` and `denoFs()` offer), a writable session holds `<session>/writer.lock` so a second
 * process gets `SessionLockedError`, and structural changes of a collection (migration, archive
 * membership, delete, compaction, cleanup) hold `<collection>/.collection.lock`; a lock left by a
 * dead process on this host is taken over. Without a probe (`MemoryFs`, an adapter without
 * `processes`) both are enforced inside this process only, and a lock file another process made
 * is treated as live: a writer or a structural change is refused with `SessionLockedError`.
 *
 * @example List sessions for a picker, fast, without being blocked by a damaged one
 * ```ts
 * import { SessionStore } from "@loop/sessions";
 * import { MemoryFs } from "@loop/sessions/memory";
 *
 * const fs = new MemoryFs();
 * await fs.mkdir("/work/app", { recursive: true });
 * const store = new SessionStore({ fs, agentDir: "/home/me/.loop" });
 * const session = await store.create("/work/app");
 * await session.commit([{ role: "user", content: "Fix the build", timestamp: 1 }]);
 * await session.close();
 *
 * const { sessions, failures } = await store.listDetailed("/work/app", undefined, {
 *   fast: true,
 *   pinnedFirst: true,
 * });
 * if (sessions[0]?.title?.text !== "Fix the build" || failures.length !== 0) {
 *   throw new Error("unexpected listing");
 * }
 * ```
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { portableSha256, type Sha256Factory } from "../port/sha256.ts";
import type { Durability } from "../port/durable.ts";
import { basename, dirname, isAbsolute, join, normalize } from "../port/path.ts";
import { promiseOf } from "../port/limit.ts";
import { FsError, NotFound } from "../port/errors.ts";
import { entryKind, tightenPrivateDir } from "../port/durable.ts";
import {
  CorruptSessionError,
  InvalidArgumentError,
  preview,
  SessionCwdError,
  type SessionError,
  SessionFormatError,
  SessionNotFoundError,
} from "./errors.ts";
import { isSessionId, newSessionHeader } from "./records/mod.ts";
import {
  checkMetaId,
  checkSessionFiles,
  collectionNotADirectory,
  ensureCollectionDir,
  openCheckedSession,
  SessionManager,
  type SessionManagerInit,
  sessionNotADirectory,
} from "./session_manager.ts";
import {
  INDEX_FILE,
  lostMetaError,
  lostMetaJson,
  MESSAGES_FILE,
  META_FILE,
  missingMetaError,
  readStorageMeta,
} from "./storage.ts";
import {
  acquireWriterLock,
  type CollectionLockTaken,
  DEFAULT_COLLECTION_LOCK_WAIT_MS,
  type HeldLock,
  type ProcessProbe,
  type StoreContext,
  withCollectionLock,
} from "./lock.ts";
import {
  LEGACY_EXTENSION,
  legacySessionId,
  migrateLegacySession,
  readLegacyHeader,
  STAGING_PREFIX,
} from "./legacy.ts";
import {
  discoverSessions,
  findSessions,
  ListingCache,
  type ListOptions,
  type ListResult,
  type SessionInfo,
} from "./discovery.ts";
import {
  type ArchiveHost,
  DELETE_PREFIX,
  inspectDeletion,
  isDeleteStagingName,
  isPrivateStagingName,
  SessionArchive,
} from "./archive.ts";
import {
  type CompactionResult,
  compactSession,
  damagedCompactionError,
  previousSession,
  removeLegacyBackup,
  stagingSessionId,
  stoppedBetweenRenames,
} from "./compaction.ts";
import { cleanupCollection, type CleanupReport, recoverLeftovers } from "./maintenance.ts";
import {
  checkSalvageId,
  irregularSessionFiles,
  isLegacySalvageSource,
  readLegacySalvageSource,
  readSalvageMeta,
  type SalvageResult,
  salvageSession,
} from "./verify.ts";

/** Options of `SessionStore`. */
export interface SessionStoreOptions {
  /** The filesystem to store sessions on. */
  readonly fs: FileSystem;
  /** The agent directory; default `~/.loop` from the adapter's home directory. */
  readonly agentDir?: string;
  /**
   * An explicit collection directory. When set, `create` puts sessions there instead of the
   * workspace collection, and `list(undefined)` / `archive` with an undefined cwd use it.
   */
  readonly sessionDir?: string;
  /** The SHA-256 implementation; default portable. Pass `nodeSha256` / `denoSha256` for speed. */
  readonly sha256?: Sha256Factory;
  /**
   * The clock, in Unix milliseconds; default `Date.now`. A reading that is not a time a `Date`
   * can hold is an `InvalidArgumentError` naming `now`, from the call that read it.
   */
  readonly now?: () => number;
  /**
   * `"full"` (default) fsyncs every step: a resolved save survives power loss. `"ordered"` skips
   * fsyncs but keeps the write order: a resolved save survives a crash of the process.
   */
  readonly durability?: Durability;
  /**
   * The process probe that enables cross-process locks (`nodeProcessProbe()` from
   * `@loop/sessions/node`, `denoProcessProbe()` from `@loop/sessions/deno`); default the
   * filesystem's own (`FileSystem.processes`, which `nodeFs()` and `denoFs()` offer); `null`
   * for none. Without a probe, writer and collection locks hold inside this process only, and a
   * lock file another process made is respected as live (never written under, never removed).
   */
  readonly process?: ProcessProbe | null;
  /**
   * How long a structural operation waits for another process's collection lock; default 10 s.
   * Measured on the real clock, whatever `now` is.
   */
  readonly collectionLockWaitMs?: number;
}

/**
 * Refuses (`InvalidArgumentError`) store options of the wrong kind. Other keys are ignored, so a
 * larger configuration object can be spread into the options.
 */
function checkStoreOptions(options: SessionStoreOptions): void {
  const refuse = (name: string, expected: string, value: unknown): never => {
    throw new InvalidArgumentError(name, `${name} must be ${expected}, got ${preview(value)}`);
  };
  if (typeof options !== "object" || options === null) refuse("options", "an object", options);
  const o = options as unknown as Record<string, unknown>;
  if (typeof o.fs !== "object" || o.fs === null) refuse("fs", "a FileSystem", o.fs);
  for (const name of ["agentDir", "sessionDir"]) {
    if (o[name] !== undefined && typeof o[name] !== "string") refuse(name, "a path", o[name]);
  }
  for (const name of ["sha256", "now"]) {
    if (o[name] !== undefined && typeof o[name] !== "function") refuse(name, "a function", o[name]);
  }
  if (o.durability !== undefined && o.durability !== "full" && o.durability !== "ordered") {
    refuse("durability", '"full" or "ordered"', o.durability);
  }
  if (o.process !== undefined && o.process !== null && typeof o.process !== "object") {
    refuse("process", "a ProcessProbe or null", o.process);
  }
  const wait = o.collectionLockWaitMs;
  if (wait !== undefined && !(typeof wait === "number" && wait >= 0 && !Number.isNaN(wait))) {
    refuse("collectionLockWaitMs", "a number of milliseconds, 0 or more", wait);
  }
}

/**
 * Refuses (`InvalidArgumentError` naming it) a path argument `name` that is not a string, or (with
 * `optional`) undefined, before anything is looked at: never a raw `TypeError` from deep inside.
 */
/** The largest distance from the epoch, in milliseconds, that a `Date` can hold. */
const MAX_DATE_MS = 8.64e15;

/**
 * The store's clock as given, each reading checked: a time that is not a number a `Date` can hold
 * (it would make every timestamp a `RangeError`) is an `InvalidArgumentError` naming `now`.
 */
function checkedClock(now: () => number): () => number {
  return () => {
    const time = now();
    if (typeof time !== "number" || !(Math.abs(time) <= MAX_DATE_MS)) {
      throw new InvalidArgumentError(
        "now",
        `now must return Unix milliseconds a Date can hold: ${preview(time)}`,
      );
    }
    return time;
  };
}

function checkPathArgument(name: string, value: unknown, optional = false): void {
  if (typeof value === "string" || (optional && value === undefined)) return;
  throw new InvalidArgumentError(
    name,
    `${name} must be a path (a string)${optional ? " or undefined" : ""}, got ${preview(value)}`,
  );
}

/**
 * Refuses (`InvalidArgumentError`) an options argument that is neither an object nor undefined,
 * and a flag of it among `booleans` that is set to anything but a boolean.
 */
function checkOptionsArgument(value: unknown, booleans: readonly string[] = []): void {
  if (value === undefined) return;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError("options", `options must be an object, got ${preview(value)}`);
  }
  for (const name of booleans) {
    const flag = (value as Record<string, unknown>)[name];
    if (flag !== undefined && typeof flag !== "boolean") {
      throw new InvalidArgumentError(name, `${name} must be a boolean, got ${preview(flag)}`);
    }
  }
}

/** Options of `SessionStore.open`. */
export interface OpenSessionOptions {
  /** Open without taking the writer slot; every write rejects. Default false. */
  readonly readOnly?: boolean;
}

/**
 * The workspace hash of a canonical working directory: the first 24 hex characters of SHA-256
 * over the path string (no trailing newline).
 */
export function workspaceHash(
  canonicalCwd: string,
  sha256: Sha256Factory = portableSha256,
): string {
  if (typeof canonicalCwd !== "string" || !isAbsolute(canonicalCwd)) {
    throw new InvalidArgumentError(
      "canonicalCwd",
      `The workspace hash is of an absolute canonical path, got ${preview(canonicalCwd)}`,
    );
  }
  return sha256().update(new TextEncoder().encode(canonicalCwd)).digestHex().slice(0, 24);
}

/** What the staging directories of a collection hold of one session (see `#staging`). */
interface Staging {
  /** A compaction staging directory is for it. */
  readonly compaction: boolean;
  /** An interrupted compaction's previous directory of it. */
  readonly previous: string | undefined;
  /** The staged copy of it of an uncommitted delete. */
  readonly deleted: string | undefined;
  /** The error of a delete journal that names it and cannot be read. */
  readonly error: SessionError | undefined;
  /** The staged legacy file (`<id>.jsonl`) of it of an uncommitted delete. */
  readonly legacy: string | undefined;
  /**
   * A compaction staging directory of it that stopped between its renames with no previous copy
   * to read (`stoppedBetweenRenames`), when no staging directory holds one.
   */
  readonly damaged?: string | undefined;
}

/** Where an open reads a session directory from (see `#sourceOf`). */
interface Source {
  /** The session directory itself, or a copy of it staged elsewhere. */
  readonly source: string;
  /** True when its files were checked already. */
  readonly checked: boolean;
}

/** How many times a read-only open tries a session that moves while it is opened. */
const MAX_READ_ONLY_TRIES = 4;

/** A store of Loop sessions on one filesystem. */
export class SessionStore {
  /** The filesystem the store uses. */
  readonly fs: FileSystem;
  /** The agent directory (`~/.loop` by default). */
  readonly agentDir: string;
  /** The explicit collection directory, when configured. */
  readonly sessionDir: string | undefined;
  readonly #context: StoreContext;
  readonly #archive: SessionArchive;
  readonly #listingCache = new ListingCache();

  /**
   * Creates a store. Fails with `InvalidArgumentError` when no agent directory can be determined,
   * or for an option of the wrong kind (an unknown durability would otherwise sync nothing).
   */
  constructor(options: SessionStoreOptions) {
    checkStoreOptions(options);
    this.fs = options.fs;
    // The home directory only when it is needed: asking may need a permission (on Deno,
    // `--allow-env=HOME`) a host that names its agent directory never granted.
    const home = options.agentDir === undefined ? options.fs.homeDir?.() : undefined;
    const agentDir = options.agentDir ?? (home === undefined ? undefined : join(home, ".loop"));
    if (agentDir === undefined || !isAbsolute(agentDir)) {
      throw new InvalidArgumentError(
        "agentDir",
        `An absolute agent directory is required (got ${
          JSON.stringify(agentDir)
        }); pass agentDir or use an adapter that knows the home directory (on Deno, ` +
          "denoFs() needs --allow-env=HOME for it, and --allow-sys=homedir when HOME is unset)",
      );
    }
    this.agentDir = normalize(agentDir);
    if (options.sessionDir !== undefined && !isAbsolute(options.sessionDir)) {
      throw new InvalidArgumentError(
        "sessionDir",
        `sessionDir must be absolute: '${options.sessionDir}'`,
      );
    }
    this.sessionDir = options.sessionDir === undefined ? undefined : normalize(options.sessionDir);
    this.#context = {
      fs: options.fs,
      sha256: options.sha256 ?? portableSha256,
      now: options.now === undefined ? Date.now : checkedClock(options.now),
      durability: options.durability ?? "full",
      probe: options.process === null ? undefined : options.process ?? options.fs.processes,
      collectionLockWaitMs: options.collectionLockWaitMs ?? DEFAULT_COLLECTION_LOCK_WAIT_MS,
    };
    const host: ArchiveHost = {
      context: this.#context,
      resolve: async (cwd) => {
        if (cwd === undefined) return { collection: this.#configuredCollection(), cwd: undefined };
        const canonical = await this.canonicalCwd(cwd);
        return {
          collection: this.sessionDir ??
            join(this.agentDir, "sessions", workspaceHash(canonical, this.#context.sha256)),
          cwd: canonical,
        };
      },
      exclusive: (collection, task, create) =>
        this.#exclusive(collection, task, { create, tighten: true }),
      find: (collection, cwd, ids) => findSessions(this.#context, collection, cwd, ids),
    };
    this.#archive = new SessionArchive(host);
  }

  /** The store's context (filesystem, hashing, clock, durability, probe), for companion modules. */
  get context(): StoreContext {
    return this.#context;
  }

  /**
   * Archive membership and staged deletion per collection. An undefined cwd means the configured
   * `sessionDir` (rejected with `InvalidArgumentError` when none is configured).
   */
  get archive(): SessionArchive {
    return this.#archive;
  }

  /** The canonical form of `cwd` (every symlink resolved); it must be an existing directory. */
  async canonicalCwd(cwd: string): Promise<string> {
    checkPathArgument("cwd", cwd);
    if (!isAbsolute(cwd)) {
      throw new InvalidArgumentError("cwd", `cwd must be an absolute path: '${cwd}'`);
    }
    let real: string;
    try {
      real = await this.fs.realPath(cwd);
    } catch (error) {
      if (error instanceof NotFound) {
        throw new SessionCwdError(cwd, `Working directory does not exist: '${cwd}'`, {
          cause: error,
        });
      }
      throw error;
    }
    const info = await this.fs.stat(real);
    if (info.kind !== "directory") {
      throw new SessionCwdError(cwd, `Working directory is not a directory: '${cwd}'`);
    }
    return real;
  }

  /** The workspace collection directory of `cwd`: `<agentDir>/sessions/<workspaceHash>`. */
  async collectionFor(cwd: string): Promise<string> {
    const canonical = await this.canonicalCwd(cwd);
    return join(this.agentDir, "sessions", workspaceHash(canonical, this.#context.sha256));
  }

  /**
   * Creates a new session for `cwd` (in the configured `sessionDir`, or the workspace collection).
   * Nothing is written until the history holds a user message. A collection that is a symlink (or
   * no directory) is refused at once with a `SessionFormatError` naming it (a linked agent
   * directory or `sessions/` is fine); one that becomes a link later fails the save the same way.
   */
  async create(cwd: string): Promise<SessionManager> {
    const canonical = await this.canonicalCwd(cwd);
    const collectionDir = this.sessionDir ??
      join(this.agentDir, "sessions", workspaceHash(canonical, this.#context.sha256));
    const id = globalThis.crypto.randomUUID();
    const header = newSessionHeader({
      id,
      cwd: canonical,
      now: new Date(this.#context.now()).toISOString(),
    });
    const dir = join(collectionDir, id);
    // Refused now, not at the first save (which would find it anyway): nothing is written
    // through a linked collection.
    await this.#collectionExists(collectionDir);
    let lock: HeldLock | undefined;
    return SessionManager.createDraft({
      context: this.#context,
      dir,
      collectionDir,
      beforeFirstWrite: async () => {
        lock = await acquireWriterLock(this.#context, dir);
      },
      onClose: async () => {
        await lock?.release();
      },
    }, header);
  }

  /**
   * Opens a session with full validation: a session directory, its meta.json, or a legacy
   * version-2 `<id>.jsonl` file. A legacy file is migrated first (also for a read-only open),
   * unless its published directory `<id>/` exists: a valid one is opened instead, an invalid one
   * fails (never falling back to the stale backup). A writable open takes the writer lock, which
   * `close()` releases, and reads the session once the directory and its files were checked (no
   * link, no special file) and the lock taken; a read-only open reads them while it checks them
   * where the port reads and opens without following a link, as `SessionManager.open` does.
   *
   * A session whose delete or compaction has not finished (interrupted, or running in another
   * process) is still there: a writable open first recovers the collection (rolling the delete
   * back, or putting the previous directory back), while a read-only open, also through the
   * session's legacy file, reads the staged copy or the previous directory in place and writes
   * nothing (its `getSessionPath()` is then that directory). The exception is a session never
   * migrated whose legacy file an uncommitted delete staged: opening it migrates it, which writes
   * anyway, so even a read-only open first recovers the collection (rolling the delete back), or
   * waits for a delete running in another process. A read-only open that migrates a legacy file
   * in place, with nothing of its session held aside, takes the collection lock for the migration
   * but recovers nothing else; one of a legacy file that is neither in place nor staged (a session
   * that never existed, or whose delete committed) fails with `SessionNotFoundError` and writes
   * nothing, not even a lock file. An open that raced a compaction's swap (a log that does not
   * match the metadata it read, or a file gone) is tried again: a writable open once, a read-only
   * open while each try finds the session somewhere else (its directory, the previous directory,
   * its directory again), a few times at most.
   *
   * A writable open refuses a collection that is a symlink (or no directory) with a
   * `SessionFormatError` naming it, before anything (the lock file included) is written; a
   * read-only open reads through it, except for a legacy file never migrated: migrating it writes
   * its directory into the collection, so that open fails as a writable one does (as it fails
   * with the port's `PermissionDenied` where the collection cannot be written). Such a file is
   * still listed (`list()` reads it in place), and the CLI's `show`, `history` and `verify` read
   * it in place.
   */
  async open(path: string, options: OpenSessionOptions = {}): Promise<SessionManager> {
    checkPathArgument("path", path);
    if (!isAbsolute(path)) {
      throw new InvalidArgumentError("path", `Session path must be absolute: '${path}'`);
    }
    checkOptionsArgument(options, ["readOnly"]);
    const normalized = normalize(path);
    const readOnly = options.readOnly === true;
    refusePrivatePath(path, normalized);
    if (basename(normalized) === MESSAGES_FILE || basename(normalized) === INDEX_FILE) {
      throw new InvalidArgumentError(
        "path",
        `'${path}' is a file of a session: open the session directory or its ${META_FILE}`,
      );
    }
    if (basename(normalized).endsWith(LEGACY_EXTENSION)) {
      return await this.#openLegacy(normalized, readOnly);
    }
    const dir = basename(normalized) === META_FILE ? dirname(normalized) : normalized;
    return await this.#openDirectory(dir, readOnly);
  }

  async #openLegacy(path: string, readOnly: boolean): Promise<SessionManager> {
    const id = legacySessionId(basename(path));
    if (id === undefined) {
      throw new SessionFormatError("A legacy session file must be named <session id>.jsonl", {
        file: path,
      });
    }
    const collection = dirname(path);
    const dir = join(collection, id);
    if (readOnly) {
      // Published already: a read-only open reads the directory and writes nothing (no lock, no
      // recovery); only a migration needs the collection. So does a directory an interrupted (or
      // running) compaction or an uncommitted delete holds elsewhere: it is read there, as an
      // open of the directory path reads it.
      if (await entryKind(this.fs, dir) === "directory") {
        return await this.#openDirectory(dir, true);
      }
      // Whatever the open of the directory path finds there: the staged copy, the previous
      // directory, the directory back in place (a compaction finished meanwhile), or the error
      // of a delete whose journal cannot be read. A migration's leftover staging directory is
      // none of these: the legacy file is migrated below.
      const staging = await this.#staging(dir);
      if (
        staging.deleted !== undefined || staging.previous !== undefined ||
        staging.error !== undefined || staging.damaged !== undefined ||
        (staging.compaction && await entryKind(this.fs, dir) === "directory")
      ) {
        return await this.#openDirectory(dir, true);
      }
      // Nothing to migrate (no legacy file in place, none staged by an uncommitted delete): the
      // session does not exist (or its delete committed), and a read-only open says so without
      // writing anything: no lock file, and no recovery finishing other sessions' operations.
      if (staging.legacy === undefined && await entryKind(this.fs, path) === undefined) {
        throw new SessionNotFoundError(`No session at '${path}'`, { file: path });
      }
    }
    // A read-only open migrates (the documented exception to writing nothing) under the lock,
    // but recovers the collection only when something of this session is held aside (below); a
    // writable open recovers first, as every structural operation does.
    await this.#exclusive(collection, async () => {
      const published = async (): Promise<boolean> => {
        try {
          const info = await this.fs.lstat(dir);
          if (info.kind !== "directory") {
            throw new SessionFormatError(
              "Published session path is not a directory (symlinks are refused)",
              { file: dir },
            );
          }
          return true; // Published: the directory takes precedence over its backup.
        } catch (error) {
          if (!(error instanceof NotFound)) throw error;
          return false;
        }
      };
      if (await published()) return;
      let staging = await this.#staging(dir);
      // Migration needs the session's leftovers recovered first (see `legacy.ts`): a compaction
      // staging directory of it (its previous directory goes back in place, where a migration
      // would publish the stale backup and let recovery remove the newer copy; or a migration's
      // leftover), a copy an uncommitted delete staged, or its legacy file not in place (an
      // uncommitted delete staged it: its rollback puts it back). Only then does a read-only
      // open recover the collection; otherwise it migrates the file in place and nothing else.
      if (
        readOnly && (staging.compaction || staging.deleted !== undefined ||
          await entryKind(this.fs, path) === undefined)
      ) {
        await recoverLeftovers(this.#context, collection);
        if (await published()) return;
        staging = await this.#staging(dir);
      }
      // Still staged by a delete whose journal cannot be read, or moved away by a compaction
      // whose previous copy is damaged (recovery keeps both): that is what listings and a
      // read-only open report, never that the session does not exist, and its backup is not
      // migrated in place of what is kept (recovery would then remove the newer copy).
      if (staging.error !== undefined) throw staging.error;
      if (staging.damaged !== undefined) throw damagedCompactionError(staging.damaged);
      try {
        await this.fs.lstat(path);
      } catch (error) {
        if (error instanceof NotFound) {
          throw new SessionNotFoundError(`No session at '${path}'`, { file: path, cause: error });
        }
        throw error;
      }
      await migrateLegacySession(this.#context, path);
    }, { recover: !readOnly });
    return await this.#openDirectory(dir, readOnly);
  }

  async #openDirectory(dir: string, readOnly: boolean): Promise<SessionManager> {
    // A compaction (here or in another process) swaps the whole directory: an open that read
    // meta.json and the log on either side of the swap sees a log that does not match, or a
    // file gone. A session really damaged fails the same way again, and that error is the one
    // reported.
    if (readOnly) {
      // A read-only open writes nothing and just looks again (a missing directory then finds a
      // compaction's leftovers as it always does), while each look finds the session somewhere
      // else than the try that failed: the compaction moves it from its directory to the
      // previous directory and back, and may remove the previous directory before it is read.
      // A look that finds it where the last try failed gets that one more try, and no other.
      let failed: string | undefined;
      for (let tries = 1;; tries++) {
        let found: Source | undefined;
        try {
          // The directory is read while its files are checked (`SessionManager.open`), and that
          // open is the one used when the check passes; otherwise where the check's failure
          // leads is opened, as `#sourceOf` finds it.
          const checking = checkSessionFiles(this.fs, dir);
          const opening = openCheckedSession(this.#readOnlyInit(dir, dir), checking);
          opening.catch(() => undefined);
          found = await this.#sourceOf(dir, true, checking);
          if (found.checked && found.source === dir) return await opening;
          return await this.#openSource(dir, found, true);
        } catch (error) {
          const place = found?.source ?? dir;
          if (
            !(error instanceof CorruptSessionError || error instanceof NotFound) ||
            place === failed || tries >= MAX_READ_ONLY_TRIES
          ) {
            throw error;
          }
          failed = place;
        }
      }
    }
    try {
      return await this.#openSource(dir, await this.#sourceOf(dir, false), false);
    } catch (error) {
      // A writer tries once more, after waiting for the collection (the compaction holds its
      // lock) and letting recovery finish or roll back an interrupted one.
      if (!(error instanceof CorruptSessionError || error instanceof NotFound)) throw error;
      try {
        await this.#exclusive(dirname(dir), () => Promise.resolve());
      } catch (waitError) {
        // The collection could not be waited for or recovered. Damage found by the open is
        // what to report; otherwise (a file gone under the open) the collection's own typed
        // error says why (locked by another process, an unreadable journal).
        throw error instanceof CorruptSessionError ? error : waitError;
      }
      return await this.#openSource(dir, await this.#sourceOf(dir, false), false);
    }
  }

  /**
   * The directory to read session directory `dir` from: `dir`, or (a missing session) what
   * `#checkSessionDirectory` finds (an uncommitted delete's staged copy, a compaction's
   * leftovers), whose files `#openSource` checks; it throws `SessionNotFoundError` when there is
   * none.
   */
  async #sourceOf(
    dir: string,
    readOnly: boolean,
    checking: Promise<void> = checkSessionFiles(this.fs, dir),
  ): Promise<Source> {
    // The directory and its files are checked once, in one round trip (`checkSessionFiles`,
    // or the `checking` of it already started).
    try {
      await checking;
      return { source: dir, checked: true };
    } catch (error) {
      if (error instanceof NotFound) {
        const source = await this.#checkSessionDirectory(dir, readOnly ? "read" : "write");
        return { source, checked: false };
      }
      if (readOnly && error instanceof SessionFormatError && error.file === dir) {
        // Something that is not a directory took the place of a session caught mid-compaction
        // or mid-delete: recovery keeps the session's copy until that is gone, and listings read
        // it there. So does a read-only open, writing nothing; a writer is refused.
        const copy = this.#stagedCopy(await this.#staging(dir));
        if (copy === undefined) throw error;
        return { source: copy, checked: false };
      }
      throw error;
    }
  }

  /** Opens session directory `dir` from where `#sourceOf` found it. */
  async #openSource(dir: string, found: Source, readOnly: boolean): Promise<SessionManager> {
    const source = found.source;
    if (!found.checked) await checkSessionFiles(this.fs, source);
    if (readOnly) return await openCheckedSession(this.#readOnlyInit(dir, source));
    const lock = await this.#writerLock(dir);
    let manager: SessionManager;
    try {
      manager = await openCheckedSession({
        context: this.#context,
        dir: source,
        collectionDir: dirname(dir),
        id: basename(dir),
        onClose: () => lock.release(),
      });
    } catch (error) {
      await lock.release();
      throw error;
    }
    return manager;
  }

  /** How a read-only open of session directory `dir` opens it from `source` (no lock). */
  #readOnlyInit(dir: string, source: string): SessionManagerInit {
    return {
      context: this.#context,
      dir: source,
      collectionDir: dirname(dir),
      readOnly: true,
      id: basename(dir),
    };
  }

  /**
   * Takes the writer lock of session directory `dir` for a writable open, refusing a collection
   * that is a link (or no directory) with `collectionNotADirectory`, as a save would: nothing,
   * not even the lock file, is written through it. With a probe (the lock writes a file) the
   * collection is looked at first; without one (the lock writes nothing) only when the real path
   * the lock resolves shows a link on the way, so an open with no link pays no extra call.
   */
  async #writerLock(dir: string): Promise<HeldLock> {
    const collection = dirname(dir);
    if (this.#context.probe !== undefined) {
      await this.#collectionExists(collection);
      return await acquireWriterLock(this.#context, dir);
    }
    const lock = await acquireWriterLock(this.#context, dir);
    if (dirname(lock.path) !== dir) {
      try {
        await this.#collectionExists(collection);
      } catch (error) {
        await lock.release();
        throw error;
      }
    }
    return lock;
  }

  /**
   * Checks that `dir` is a real directory with a meta.json and returns the directory to read. A
   * missing session directory may be mid-compaction or mid-delete (after a crash, or in another
   * process). With `"write"` the collection's leftovers are recovered once before giving up; with
   * `"read"` an uncommitted delete's staged copy or an interrupted compaction's previous
   * directory is returned as is (nothing is written); with either, when no copy is staged any
   * more, `dir` is looked at once more (an operation that moved it aside may have put it back
   * meanwhile: a compaction that finished, a delete that rolled back); with `"none"` nothing is
   * tried.
   */
  async #checkSessionDirectory(dir: string, recover: "write" | "read" | "none"): Promise<string> {
    try {
      // Both in one round trip (lstat opens nothing, so nothing is read through a link), judged
      // in order: the directory first.
      const [info, meta] = await Promise.allSettled([
        promiseOf(() => this.fs.lstat(dir)),
        promiseOf(() => this.fs.lstat(join(dir, META_FILE))),
      ]);
      if (info.status === "rejected") throw info.reason;
      if (info.value.kind !== "directory") {
        throw sessionNotADirectory(dir);
      }
      if (meta.status === "rejected") throw meta.reason;
      return dir;
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      if (recover === "read") {
        // Read in place, writing nothing: an uncommitted delete's staged copy, or the previous
        // directory of a compaction caught between its renames (or interrupted there). When
        // none is staged any more, `dir` is looked at once more, as for a writer below. A compaction
        // staging directory seen that no longer holds the previous copy, with `dir` not in
        // place, means the session moved again meanwhile (a recovery put it back, and another
        // compaction moved it into a new staging directory): the collection is read again, up
        // to `MAX_READ_ONLY_TRIES` times, before the session is said not to exist.
        for (let looks = 1;; looks++) {
          const staging = await this.#staging(dir);
          const copy = this.#stagedCopy(staging);
          if (copy !== undefined) {
            // A staged copy that lost its meta.json (see `#staging`): damaged, said so.
            if (copy === staging.deleted && await lostMetaJson(this.fs, copy)) {
              throw lostMetaError(copy);
            }
            return copy;
          }
          try {
            return await this.#checkSessionDirectory(dir, "none");
          } catch (error) {
            if (
              !(error instanceof SessionNotFoundError) || !staging.compaction ||
              looks >= MAX_READ_ONLY_TRIES
            ) {
              // Moved away by a compaction whose previous copy is damaged: reported, as a
              // listing reports it, never said not to exist.
              if (error instanceof SessionNotFoundError && staging.damaged !== undefined) {
                throw damagedCompactionError(staging.damaged, error);
              }
              throw error;
            }
          }
        }
      }
      if (recover === "write") {
        const staging = await this.#staging(dir);
        if (
          staging.compaction || staging.deleted !== undefined || staging.error !== undefined
        ) {
          await this.#exclusive(dirname(dir), () => Promise.resolve());
          try {
            return await this.#checkSessionDirectory(dir, "none");
          } catch (error) {
            if (error instanceof SessionNotFoundError) {
              // Still staged by a delete whose journal cannot be read, or moved away by a
              // compaction whose previous copy is damaged (recovery keeps both): say so.
              if (staging.error !== undefined) throw staging.error;
              const now = await this.#staging(dir);
              if (now.damaged !== undefined) throw damagedCompactionError(now.damaged, error);
              // A previous copy recovery kept because its meta.json is damaged (not valid, or
              // another session's): that damage.
              if (now.previous !== undefined) {
                const meta = await readStorageMeta(this.fs, now.previous);
                checkMetaId(meta, basename(dir), join(now.previous, META_FILE));
              }
            }
            throw error;
          }
        }
        // No copy staged any more: a compaction, or a delete that rolled back, finished since
        // `dir` was looked at and put the session directory back in place (a delete moves it
        // back before it restores membership and removes its staging directory). One more look
        // there, writing nothing, before the session is said not to exist.
        return await this.#checkSessionDirectory(dir, "none");
      }
      throw await missingMetaError(this.fs, dir, error);
    }
  }

  /**
   * What the staging directories of the collection of session directory `dir` hold of it:
   * `compaction` when a compaction staging directory is for it, `deleted` the staged copy of an
   * uncommitted delete (see `inspectDeletion`), `error` when an uncommitted delete staged it but
   * its journal cannot be read (recovery refuses it with that error), `legacy` its legacy file
   * as an uncommitted delete staged it.
   */
  async #staging(dir: string): Promise<Staging> {
    const id = basename(dir);
    const none = {
      compaction: false,
      previous: undefined,
      deleted: undefined,
      error: undefined,
      legacy: undefined,
    };
    if (!isSessionId(id)) return none;
    const collection = dirname(dir);
    let entries;
    try {
      entries = await this.fs.readDir(collection);
    } catch (error) {
      if (error instanceof NotFound) return none;
      throw error;
    }
    let compaction = false;
    let previous: string | undefined;
    let error: SessionError | undefined;
    let legacy: string | undefined;
    let damaged: string | undefined;
    for (const entry of entries) {
      if (entry.kind !== "directory") continue;
      if (stagingSessionId(entry.name) === id) {
        compaction = true;
        const staged = join(collection, entry.name);
        const found = await previousSession(this.fs, staged);
        previous ??= found;
        if (found === undefined && damaged === undefined) {
          if (await stoppedBetweenRenames(this.fs, staged)) damaged = staged;
        }
      } else if (isDeleteStagingName(entry.name)) {
        const deletion = await inspectDeletion(this.fs, collection, entry.name);
        if (deletion === undefined) continue;
        if (deletion.error !== undefined && deletion.ids.includes(id)) error ??= deletion.error;
        legacy ??= deletion.legacy.get(id);
        const staged = deletion.directories.get(id);
        // A staged copy with meta.json, or one that lost it while index.json shows a save
        // committed (read from there, it is reported as damaged, as the listing reports it).
        if (
          staged !== undefined && (
            await entryKind(this.fs, join(staged, META_FILE)) === "file" ||
            await lostMetaJson(this.fs, staged)
          )
        ) {
          return { compaction, previous, deleted: staged, error: undefined, legacy, damaged };
        }
      }
    }
    return {
      compaction,
      previous,
      deleted: undefined,
      error,
      legacy,
      damaged: previous === undefined ? damaged : undefined,
    };
  }

  /**
   * The copy of a session that a reader reads in place of its directory (see `#staging`): an
   * uncommitted delete's staged copy, else a compaction's previous directory; undefined when
   * there is none. A delete journal that cannot be read is thrown, before the previous copy.
   * Listings look in the same order.
   */
  #stagedCopy(staging: Staging): string | undefined {
    if (staging.deleted !== undefined) return staging.deleted;
    if (staging.error !== undefined) throw staging.error;
    return staging.previous;
  }

  /**
   * Runs `task` under the collection lock after recovering the collection's leftovers (see
   * `maintenance.ts`). When the collection does not exist and `create` is false, `task` runs
   * without the lock (there is nothing to hold); with `create` the collection is created (0700).
   * With `tighten`, an existing collection of a wider mode is brought to 0700 under the lock, as
   * a write into it that does not create it (a compaction, a cleanup) promises.
   */
  async #exclusive<T>(
    collection: string,
    task: (taken: CollectionLockTaken) => Promise<T>,
    options: {
      readonly create?: boolean;
      readonly recover?: boolean;
      readonly tighten?: boolean;
    } = {},
  ): Promise<T> {
    // Nothing is changed through a link, as a save refuses it (`ensureCollectionDir`).
    if (options.create === true) {
      await ensureCollectionDir(this.fs, collection, this.#context.durability);
    } else if (!await this.#collectionExists(collection)) {
      return await task({ removedStale: [] });
    }
    return await withCollectionLock(this.#context, collection, async (taken) => {
      if (options.tighten === true) {
        await tightenPrivateDir(this.fs, collection, this.#context.durability);
      }
      if (options.recover !== false) await recoverLeftovers(this.#context, collection);
      return await task(taken);
    });
  }

  /**
   * Whether `collection` exists; one that is not a directory (a symlink included, never followed)
   * is refused with `collectionNotADirectory`. A linked agent directory or `sessions/` above it is
   * fine.
   */
  async #collectionExists(collection: string): Promise<boolean> {
    const kind = await entryKind(this.fs, collection);
    if (kind === undefined) return false;
    if (kind !== "directory") throw collectionNotADirectory(collection);
    return true;
  }

  #configuredCollection(): string {
    if (this.sessionDir === undefined) {
      throw new InvalidArgumentError(
        "sessionDir",
        "A collection directory is required when cwd is undefined; pass sessionDir or configure the store's sessionDir",
      );
    }
    return this.sessionDir;
  }

  async #collectionOf(
    cwd: string | undefined,
    sessionDir: string | undefined,
  ): Promise<{ collection: string; cwd: string | undefined }> {
    checkPathArgument("cwd", cwd, true);
    checkPathArgument("sessionDir", sessionDir, true);
    if (sessionDir !== undefined && !isAbsolute(sessionDir)) {
      throw new InvalidArgumentError("sessionDir", `sessionDir must be absolute: '${sessionDir}'`);
    }
    const canonical = cwd === undefined ? undefined : await this.canonicalCwd(cwd);
    const collection = sessionDir !== undefined
      ? normalize(sessionDir)
      : canonical !== undefined && this.sessionDir === undefined
      ? join(this.agentDir, "sessions", workspaceHash(canonical, this.#context.sha256))
      : this.#configuredCollection();
    return { collection, cwd: canonical };
  }

  /**
   * Lists sessions, newest activity first: with a `cwd`, the sessions recorded for that canonical
   * working directory in its collection (`sessionDir` argument, else the configured `sessionDir`,
   * else the workspace collection); with an undefined `cwd`, every supported session of the
   * explicit collection `sessionDir` (or the configured one; `InvalidArgumentError` without
   * either). Never migrates or modifies anything. Throws the first failure (invalid JSON, invalid
   * metadata, corruption, read errors); unsupported formats are skipped. Use `listDetailed` to get
   * failures beside the sessions, and `{ fast: true }` in session pickers.
   */
  async list(
    cwd?: string,
    sessionDir?: string,
    options: ListOptions = {},
  ): Promise<SessionInfo[]> {
    const result = await this.listDetailed(cwd, sessionDir, options);
    const failure = result.failures[0];
    if (failure !== undefined) throw failure.error;
    return result.sessions;
  }

  /**
   * Like `list`, but never throws for a single session: each session (or archive.json) that
   * cannot be listed is returned in `failures` with its typed error.
   *
   * @throws {InvalidArgumentError} When `sessionDir` is a private staging directory of the store
   * (`.staging-<id>-<8 hex>`, `.delete-<uuid>`) or inside one: what an operation holds aside there
   * is no live session, and is listed from its collection (as a delete's rollback or a
   * compaction's recovery leaves it).
   */
  async listDetailed(
    cwd?: string,
    sessionDir?: string,
    options: ListOptions = {},
  ): Promise<ListResult> {
    checkOptionsArgument(options, ["fast", "pinnedFirst"]);
    const concurrency = options.concurrency;
    if (concurrency !== undefined && !(Number.isSafeInteger(concurrency) && concurrency >= 1)) {
      throw new InvalidArgumentError(
        "concurrency",
        `concurrency must be a positive integer: ${preview(concurrency)}`,
      );
    }
    const bytes = options.maxBytesAtOnce;
    if (bytes !== undefined && !(Number.isSafeInteger(bytes) && bytes >= 1)) {
      throw new InvalidArgumentError(
        "maxBytesAtOnce",
        `maxBytesAtOnce must be a positive integer: ${preview(bytes)}`,
      );
    }
    const { collection, cwd: canonical } = await this.#collectionOf(cwd, sessionDir);
    const staging = sessionDir === undefined
      ? undefined
      : collection.split("/").find((name) => isPrivateStagingName(name));
    if (staging !== undefined) {
      throw new InvalidArgumentError(
        "sessionDir",
        `'${sessionDir}' is not a collection to list: '${staging}' is a private staging directory ` +
          "of the store; list its collection",
      );
    }
    return await discoverSessions(
      this.#context,
      collection,
      canonical,
      options,
      this.#listingCache,
    );
  }

  /**
   * Compacts a session (a directory or its meta.json) so messages.jsonl holds only the committed
   * generation: staged, atomic, crash-safe, with the same generation. Never automatic. Refuses a
   * session open for writing.
   */
  async compact(path: string): Promise<CompactionResult> {
    const dir = this.#sessionDirOf(path);
    await this.#checkSessionDirectory(dir, "write");
    return await this.#exclusive(dirname(dir), async () => {
      // Again under the lock: a delete queued before this call may have removed it meanwhile.
      await this.#checkSessionDirectory(dir, "none");
      return await compactSession(this.#context, dir);
    }, { tighten: true });
  }

  /**
   * Removes the legacy backup `<id>.jsonl` of a migrated session (a directory or its meta.json)
   * after validating the directory like an open. Returns false when there is no backup. Never
   * automatic. A file that is not this session's backup, or holds a message the session's history
   * does not hold at its place (an older Loop kept writing it after the migration, or the
   * session's history was rewritten since), is left alone: a `SessionFormatError` naming it.
   */
  async removeLegacyBackup(path: string): Promise<boolean> {
    const dir = this.#sessionDirOf(path);
    await this.#checkSessionDirectory(dir, "write");
    return await this.#exclusive(dirname(dir), async () => {
      await this.#checkSessionDirectory(dir, "none");
      return await removeLegacyBackup(this.#context, dir);
    }, { tighten: true });
  }

  /**
   * Copies the longest valid prefix of the session directory `dir` (a damaged session, say), or
   * of a legacy version-2 file `dir` (`….jsonl`, one whose damage makes its migration fail, say),
   * into a new session of the collection `toCollection` (created if missing): `salvageSession` run
   * under that collection's lock, so a cleanup or another structural change of it, in this
   * process or another, never meets the new session half built. The original is only read.
   *
   * A session an uncommitted delete or an interrupted compaction moved aside is salvaged by its
   * collection path (`dir` itself is then missing), from where it is staged, or from `dir` once
   * the recovery of `toCollection`, when that is its own collection, put it back.
   *
   * Both paths are taken normalized: `<link>/` (or `<link>/.`) names the link itself, refused as
   * `<link>` is, never the directory it points to.
   *
   * @throws {InvalidArgumentError} When `dir` or `toCollection` is not an absolute path,
   * `options` not an object, `options.id` not a session id (a lowercase UUID), `dir` is inside
   * a private staging or delete directory, or `toCollection` is no collection: the sessions root,
   * a private directory of the store (`.staging-*`, `.delete-*`; below the sessions root, any name
   * starting with '.'), or a place inside a session, which its delete or compaction would take
   * along (a directory named like a session or its files below the sessions root; anywhere, a
   * directory named by a session id that holds a meta.json or whose copy a compaction or a delete
   * holds aside, or a destination holding a meta.json), judged on the path as given and on its
   * real path.
   * @throws {SessionNotFoundError} When `dir` (a session directory) has no meta.json, or is
   * missing (and no delete or compaction staged a copy of it): naming meta.json; for a legacy
   * file, when it is missing, naming it. Before `toCollection` is made.
   * @throws {SessionFormatError} When `dir` is not a directory itself, a session file is not a
   * regular file, or `toCollection` is a link; for a legacy file, when it is not a regular file or
   * its header cannot be read (naming the file and the field).
   * @throws {UnsupportedSessionError} For a legacy file whose header is of another format or
   * version.
   * @throws {SessionBusyError} When `toCollection` already uses the id `options.id` in any form
   * (a session directory or anything else at `<id>`, a legacy file `<id>.jsonl`, a staging or
   * uncommitted delete directory of it; see `salvageSession`).
   */
  async salvage(
    dir: string,
    toCollection: string,
    options: { readonly id?: string } = {},
  ): Promise<SalvageResult> {
    const context = this.#context;
    for (const [name, path] of [["dir", dir], ["toCollection", toCollection]] as const) {
      checkPathArgument(name, path);
      if (!isAbsolute(path)) {
        throw new InvalidArgumentError(name, `${name} must be an absolute path: '${path}'`);
      }
    }
    checkOptionsArgument(options);
    if (options.id !== undefined) checkSalvageId(options.id);
    // Only the normalized forms go on: a trailing slash ('<link>/') would make lstat follow a
    // link that the path as given is refused for (a linked collection or session directory).
    const from = normalize(dir);
    const to = normalize(toCollection);
    refusePrivatePath(dir, from);
    await this.#checkCollectionPath("toCollection", toCollection);
    // A source that would be refused (a linked file, no readable meta.json) is refused before
    // the collection is made.
    const source = await this.#salvageSource(from);
    if (isLegacySalvageSource(source)) {
      // A legacy version-2 file: its header must be readable (never through a link).
      await readLegacySalvageSource(source, () => readLegacyHeader(this.fs, source));
    } else {
      const [irregular] = (await irregularSessionFiles(this.fs, source)).errors;
      if (irregular !== undefined) throw irregular;
      await readSalvageMeta(this.fs, source, true);
    }
    return await this.#exclusive(
      to,
      // Looked for again once the collection is held: when it is the session's own, its recovery
      // may have put a compaction's previous directory (or a delete's staged copy) back in place.
      async () =>
        salvageSession(this.fs, await this.#salvageSource(from), {
          sha256: context.sha256,
          toCollection: to,
          now: context.now,
          durability: context.durability,
          ...(options.id === undefined ? {} : { id: options.id }),
        }),
      { create: true },
    );
  }

  /**
   * Refuses (`InvalidArgumentError` naming `argument`) a collection path that is no collection,
   * for a salvage into it or a cleanup of it, before anything is written: the sessions root `<agentDir>/sessions` itself (its entries are collections), a
   * directory private to the store or inside one (`.staging-*`, `.delete-*` anywhere; below the
   * sessions root, any name starting with '.', which listings skip), or a place inside a session,
   * which its delete or compaction would take along: below the sessions root, a directory named
   * like a session or its files (`<id>`, `<id>.<…>`); anywhere, a directory named by a session id
   * that holds a meta.json or whose copy a compaction or a delete holds aside, and a destination
   * (or, below the sessions root, a directory on the way to it) holding a meta.json. Judged on
   * the path as given and on its real path, so a link never leads into one.
   */
  async #checkCollectionPath(
    argument: "toCollection" | "sessionDir",
    toCollection: string,
  ): Promise<void> {
    const root = join(this.agentDir, "sessions");
    const given = normalize(toCollection);
    const judged: [string, string][] = [[given, root]];
    const [realPath, realRoot] = [await this.#realPrefix(given), await this.#realPrefix(root)];
    if (realPath !== given || realRoot !== root) judged.push([realPath, realRoot]);
    const refuse = (why: string): never => {
      throw new InvalidArgumentError(
        argument,
        argument === "toCollection"
          ? `Salvage destination '${toCollection}' is not a collection: ${why}; salvage into a collection directory`
          : `'${toCollection}' is not a collection to clean up: ${why}; nothing was changed`,
      );
    };
    for (const [path, sessions] of judged) {
      if (path === sessions) refuse("it is the sessions root, whose entries are collections");
      const below = path.startsWith(sessions + "/");
      for (const name of path.split("/")) {
        // A salvage destination is refused under any name like a staging directory's (refusing
        // more is safe there); a collection to clean, only under the exact names the store
        // makes, as cleanup itself judges them (a user's `.staging-area/` may hold one).
        const privateName = argument === "toCollection"
          ? name.startsWith(STAGING_PREFIX) || name.startsWith(DELETE_PREFIX)
          : isPrivateStagingName(name);
        if (privateName) {
          refuse(`'${name}' is a private staging directory of the store`);
        }
      }
      for (let dir = path; dir !== dirname(dir); dir = dirname(dir)) {
        const name = basename(dir);
        const inStore = below && dir.startsWith(sessions + "/");
        if (inStore && name.startsWith(".")) {
          refuse(`'${name}' below '${sessions}' is a private directory of the store`);
        }
        const id = name.slice(0, 36);
        if (inStore && isSessionId(id) && (name.length === 36 || name.charAt(36) === ".")) {
          refuse(`'${dir}' is named like a session in a collection`);
        }
        if (
          (dir === path || inStore || isSessionId(name)) &&
          await entryKind(this.fs, join(dir, META_FILE)) !== undefined
        ) {
          refuse(`'${dir}' is a session directory (it holds ${META_FILE})`);
        }
        if (isSessionId(name)) {
          // A directory whose parent this process may not list (a 0711 directory above a
          // custom collection): what a compaction or a delete holds aside beside it cannot be
          // looked for, and it is not taken for a session for that.
          const staging = await this.#staging(dir).catch((error: unknown) => {
            if (error instanceof FsError) return undefined;
            throw error;
          });
          if (staging === undefined) continue;
          if (staging.compaction || staging.deleted !== undefined || staging.error !== undefined) {
            refuse(`'${dir}' is a session that a compaction or a delete holds aside`);
          }
        }
      }
    }
  }

  /**
   * The real path of `path`: its deepest existing ancestor's, links resolved, with the rest of
   * `path` after it (`path` itself when nothing of it resolves).
   */
  async #realPrefix(path: string): Promise<string> {
    const rest: string[] = [];
    for (let dir = path;; dir = dirname(dir)) {
      try {
        return normalize(join(await this.fs.realPath(dir), ...rest.reverse()));
      } catch (error) {
        if (!(error instanceof NotFound) || dir === dirname(dir)) return path;
        rest.push(basename(dir));
      }
    }
  }

  /**
   * Where `salvage` reads session directory `dir` from: `dir`, or, when it has no meta.json and
   * is named by a session id, the copy an uncommitted delete or an interrupted (or running)
   * compaction staged of it, as a read-only open reads it (`dir` when there is none). `dir` is
   * normalized (no trailing slash, which would make lstat follow a link).
   */
  async #salvageSource(dir: string): Promise<string> {
    if (
      !isSessionId(basename(dir)) ||
      await entryKind(this.fs, join(dir, META_FILE)) !== undefined
    ) {
      return dir;
    }
    const staging = await this.#staging(dir);
    const copy = this.#stagedCopy(staging);
    if (copy !== undefined) return copy;
    // Moved away by a compaction whose previous copy is damaged: said so, never "no session".
    if (staging.damaged !== undefined) throw damagedCompactionError(staging.damaged);
    return dir;
  }

  /**
   * Maintenance of a collection (same resolution as `list`): rolls back or finishes interrupted
   * compactions and deletes, removes staging leftovers and temp files, and stale locks of
   * sessions no writer holds.
   *
   * @throws {InvalidArgumentError} When `sessionDir` is given and is no collection, before
   * anything is changed: the sessions root itself, a private directory of the store, a session
   * directory or a place inside one (as for a salvage destination, see `salvage`).
   */
  async cleanup(cwd?: string, sessionDir?: string): Promise<CleanupReport> {
    const { collection } = await this.#collectionOf(cwd, sessionDir);
    // A collection named for this call or configured (never the workspace one, which is one).
    if (sessionDir !== undefined || this.sessionDir !== undefined) {
      await this.#checkCollectionPath("sessionDir", collection);
    }
    // The recovery is cleanup's own work here, so its report is the one returned, with the
    // stale collection lock (and markers) taken over to run it.
    return await this.#exclusive(
      collection,
      async (taken) => {
        const report = await cleanupCollection(this.#context, collection);
        // Named in the collection as it is spelled here, as the rest of the report is (the lock
        // was taken at the collection's real path).
        const stale = taken.removedStale.map((path) => join(collection, basename(path)));
        return { ...report, removed: [...stale, ...report.removed] };
      },
      { recover: false, tighten: true },
    );
  }

  /**
   * The session directory of `path` (a directory or its meta.json) for an operation that
   * rewrites or removes part of it: it must be absolute, named by a session id (the name its
   * recovery goes by), and not inside a private staging or delete directory.
   */
  #sessionDirOf(path: string): string {
    checkPathArgument("path", path);
    if (!isAbsolute(path)) {
      throw new InvalidArgumentError("path", `Session path must be absolute: '${path}'`);
    }
    const normalized = normalize(path);
    refusePrivatePath(path, normalized);
    const dir = basename(normalized) === META_FILE ? dirname(normalized) : normalized;
    if (!isSessionId(basename(dir))) {
      throw new InvalidArgumentError(
        "path",
        `Session directory must be named by its session id: '${path}'`,
      );
    }
    return dir;
  }
}

/**
 * Refuses a session path inside a staging, delete or compaction directory: those are private to
 * the operations that made them, and a session inside one is reached through its collection path.
 */
function refusePrivatePath(path: string, normalized: string): void {
  const inside = basename(
    dirname(basename(normalized) === META_FILE ? dirname(normalized) : normalized),
  );
  if (isPrivateStagingName(inside)) {
    throw new InvalidArgumentError(
      "path",
      `Session path is inside a private staging directory: '${path}'; open it by its collection path`,
    );
  }
}
