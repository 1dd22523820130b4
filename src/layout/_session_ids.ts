/**
 * The session ids a new session may not take, shared by the creation of a root session and the
 * choice of a child id. The engine refuses to resolve references in two trees that share an id,
 * so a new id repeats neither a session directory of the repository nor an id a ledger records.
 * Internal to the layout.
 *
 * @module
 */
import type { FileSystem } from "../port/fs.ts";
import { NotFound } from "../port/errors.ts";
import { join } from "../port/path.ts";
import { LayoutError } from "./errors.ts";
import { readRecord } from "./json_io.ts";
import { throwRefusal, walkSessionDirs } from "./loopy_root.ts";
import { repositoryPaths } from "./paths.ts";
import { type AnyChildrenLedger, parseChildrenLedgerAsRead } from "./records.ts";
import { confined } from "./no_links.ts";

/** The ids `sessionIdsInUse` found. */
export interface SessionIdsInUse {
  /** The name of every session directory of the repository, in any tree. */
  readonly directories: ReadonlySet<string>;
  /** Every child id the ledgers (`children.json`) record, published or not. */
  readonly recorded: ReadonlySet<string>;
}

/**
 * The session ids in use in the repository at `repoRoot`: the name of every session directory
 * under `.loopy_loop/sessions/` (top-level sessions and their nested children, found without
 * following a link, as `walkSessionDirs` finds them), and the child ids the ledgers
 * (`children.json`) of those sessions record, published or not (a dispatch interrupted, or one
 * that failed and is dispatched again under the same id), except the ledger of the session in
 * `exceptLedgerDir`. A missing or damaged ledger adds nothing (the tree holding it is refused by
 * its own reads); another storage error is thrown, lest a recorded id be missed.
 */
export async function sessionIdsInUse(
  fs: FileSystem,
  repoRoot: string,
  exceptLedgerDir?: string,
): Promise<SessionIdsInUse> {
  const directories = new Set<string>();
  const recorded = new Set<string>();
  const walk = await walkSessionDirs(fs, repositoryPaths(repoRoot).sessionsRoot);
  // A part of the tree the filesystem refuses to show may hold ids: the allocation fails rather
  // than give one of them out again.
  throwRefusal(walk);
  const { sessions } = walk;
  for (const session of sessions) {
    directories.add(session.sessionId);
    if (session.dir === exceptLedgerDir) continue;
    let ledger: AnyChildrenLedger;
    try {
      ledger = (await readRecord(
        confined(fs, session.dir),
        join(session.dir, "children.json"),
        (value, file) => parseChildrenLedgerAsRead(value, file, session.sessionId),
      )).record;
    } catch (error) {
      // A missing or damaged ledger records nothing usable (its tree is refused by its own
      // reads); any other storage error is not skipped, lest a recorded id be missed.
      if (error instanceof LayoutError || error instanceof NotFound) continue;
      throw error;
    }
    for (const child of ledger.children) recorded.add(child.session_id);
  }
  return { directories, recorded };
}
