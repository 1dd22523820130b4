/**
 * `SessionStore`: where Loop sessions live on a filesystem, and the entry point to create, open,
 * list, archive and delete them.
 *
 * ```
 * <agentDir>/sessions/<workspace-hash>/<session-id>/{meta.json, messages.jsonl, index.json}
 * ```
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { portableSha256, type Sha256Factory } from "../port/sha256.ts";
import type { Durability } from "../port/durable.ts";
import { basename, dirname, isAbsolute, join, normalize } from "../port/path.ts";
import { NotFound } from "../port/errors.ts";
import {
  InvalidArgumentError,
  SessionCwdError,
  SessionFormatError,
  SessionNotFoundError,
} from "./errors.ts";
import { newSessionHeader } from "./records/mod.ts";
import { type SessionContext, SessionManager } from "./session_manager.ts";
import { META_FILE } from "./storage.ts";

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
  /** The clock, in Unix milliseconds; default `Date.now`. */
  readonly now?: () => number;
  /**
   * `"full"` (default) fsyncs every step: a resolved save survives power loss. `"ordered"` skips
   * fsyncs but keeps the write order: a resolved save survives a crash of the process.
   */
  readonly durability?: Durability;
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
  return sha256().update(new TextEncoder().encode(canonicalCwd)).digestHex().slice(0, 24);
}

/** A store of Loop sessions on one filesystem. */
export class SessionStore {
  /** The filesystem the store uses. */
  readonly fs: FileSystem;
  /** The agent directory (`~/.loop` by default). */
  readonly agentDir: string;
  /** The explicit collection directory, when configured. */
  readonly sessionDir: string | undefined;
  readonly #context: SessionContext;

  /** Creates a store. Fails with `InvalidArgumentError` when no agent directory can be determined. */
  constructor(options: SessionStoreOptions) {
    this.fs = options.fs;
    const home = options.fs.homeDir?.();
    const agentDir = options.agentDir ?? (home === undefined ? undefined : join(home, ".loop"));
    if (agentDir === undefined || !isAbsolute(agentDir)) {
      throw new InvalidArgumentError(
        "agentDir",
        `An absolute agent directory is required (got ${
          JSON.stringify(agentDir)
        }); pass agentDir or use an adapter that knows the home directory`,
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
      now: options.now ?? Date.now,
      durability: options.durability ?? "full",
    };
  }

  /** The store's context (filesystem, hashing, clock, durability), for companion modules. */
  get context(): SessionContext {
    return this.#context;
  }

  /** The canonical form of `cwd` (every symlink resolved); it must be an existing directory. */
  async canonicalCwd(cwd: string): Promise<string> {
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
   * Nothing is written until the history holds a user message.
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
    return SessionManager.createDraft({
      context: this.#context,
      dir: join(collectionDir, id),
      collectionDir,
    }, header);
  }

  /**
   * Opens a session with full validation: a session directory, its meta.json, or (migrating it)
   * a legacy version-2 `<id>.jsonl` file.
   */
  async open(path: string, options: OpenSessionOptions = {}): Promise<SessionManager> {
    if (!isAbsolute(path)) {
      throw new InvalidArgumentError("path", `Session path must be absolute: '${path}'`);
    }
    const normalized = normalize(path);
    const dir = basename(normalized) === META_FILE ? dirname(normalized) : normalized;
    try {
      const info = await this.fs.lstat(dir);
      if (info.kind !== "directory") {
        throw new SessionFormatError("Session path is not a directory (symlinks are refused)", {
          file: dir,
        });
      }
      await this.fs.lstat(join(dir, META_FILE));
    } catch (error) {
      if (error instanceof NotFound) {
        throw new SessionNotFoundError(`No session at '${path}': meta.json not found`, {
          file: join(dir, META_FILE),
          cause: error,
        });
      }
      throw error;
    }
    const manager = await SessionManager.open({
      context: this.#context,
      dir,
      collectionDir: dirname(dir),
      readOnly: options.readOnly === true,
    });
    if (manager.id !== basename(dir)) {
      await manager.close();
      throw new SessionFormatError("Session id does not match its directory name", {
        file: join(dir, META_FILE),
        path: "header.id",
        value: manager.id,
      });
    }
    return manager;
  }
}
