/**
 * The lazily made process probe the Node and Deno adapters offer as `FileSystem.processes`.
 * Internal to the adapters.
 *
 * @module
 */
import type { ProcessProbe } from "../src/port/probe.ts";

/** Deno's permission query, where the code runs on Deno (the Node adapter runs there too). */
interface DenoPermissions {
  querySync(descriptor: { name: "sys"; kind: "hostname" }): { state: string };
}

/**
 * True unless the runtime is Deno without the permission to read the host name. Asked with a
 * query, never a request: a store never makes Deno prompt.
 */
function mayReadHostName(): boolean {
  const deno = (globalThis as { Deno?: { permissions?: DenoPermissions } }).Deno;
  const permissions = deno?.permissions;
  if (permissions === undefined) return true;
  return permissions.querySync({ name: "sys", kind: "hostname" }).state === "granted";
}

/**
 * A getter of the probe `make()` returns, made on first use and kept; undefined (kept too) where
 * the runtime may not read the host name (Deno without `--allow-sys=hostname`) or `make` throws:
 * a store then locks within its process only, and respects the lock files of others as live.
 */
export function lazyProbe(make: () => ProcessProbe): () => ProcessProbe | undefined {
  let made: ProcessProbe | null | undefined;
  return () => {
    if (made === undefined) {
      try {
        made = mayReadHostName() ? make() : null;
      } catch {
        made = null;
      }
    }
    return made ?? undefined;
  };
}

/**
 * True when `error` is the runtime refusing a call for want of a permission (Deno's `NotCapable`
 * or `PermissionDenied`): nothing was learned about the process asked about.
 */
export function isPermissionRefusal(error: unknown): boolean {
  return error instanceof Error &&
    (error.name === "NotCapable" || error.name === "PermissionDenied");
}
