/**
 * Where a session directory sits in its tree, from its path alone (internal to the layout): the
 * identity a legacy v1 child's `session.json` does not record, as the tree's scan derives it.
 *
 * @module
 */
import { basename, dirname, normalize } from "../port/path.ts";
import { CHILDREN_DIRNAME } from "./paths.ts";
import { type AnySessionManifest, type StateOwner, stateOwnerOf } from "./records.ts";

/**
 * The root and depth the nesting of session directory `dir` gives it, as the tree's scan derives
 * them: the top-level session it is nested in through `children/` directories, and how many.
 * `[undefined, undefined]` when it is not nested in a `children/` directory.
 */
export function nestedIdentity(dir: string): [string, number] | [undefined, undefined] {
  let top = normalize(dir);
  let depth = 0;
  while (basename(dirname(top)) === CHILDREN_DIRNAME) {
    top = dirname(dirname(top));
    depth++;
  }
  return depth === 0 ? [undefined, undefined] : [basename(top), depth];
}

/**
 * Who a `state.json` in `dir` must belong to: `stateOwnerOf` its `session.json`, and for a legacy
 * v1 child (whose manifest records no root) the root its nesting gives, as its tree's scan derives
 * it, so a state read or written alone is held to the root its tree's readers require.
 */
export function stateOwnerAt(manifest: AnySessionManifest, dir: string): StateOwner {
  const owner = stateOwnerOf(manifest);
  if (owner.rootSessionId !== undefined) return owner;
  const [root] = nestedIdentity(dir);
  return root === undefined ? owner : { ...owner, rootSessionId: root };
}
