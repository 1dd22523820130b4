/**
 * The lazily made process probe the Node and Deno adapters offer as `FileSystem.processes`.
 * Internal to the adapters.
 *
 * @module
 */
import type { ProcessProbe } from "../src/port/probe.ts";

/** A permission Deno may be asked about, as `Deno.permissions.querySync` takes it. */
export type DenoPermission =
  | { name: "sys"; kind: "hostname" }
  | { name: "read"; path: string }
  | { name: "run" };

/** Deno's permission query, where the code runs on Deno (the Node adapter runs there too). */
interface DenoPermissions {
  querySync(descriptor: DenoPermission): { state: string };
}

/**
 * True unless the runtime is Deno and `permission` is not granted now (or cannot be queried).
 * Asked with a query, never a request: a store never makes Deno prompt. Off Deno (Node, Bun),
 * always true: there the runtime's own access checks apply.
 */
export function denoGrants(permission: DenoPermission): boolean {
  const deno = (globalThis as { Deno?: { permissions?: DenoPermissions } }).Deno;
  const permissions = deno?.permissions;
  if (permissions === undefined) return true;
  try {
    return permissions.querySync(permission).state === "granted";
  } catch {
    return false;
  }
}

/** True unless the runtime is Deno without the permission to read the host name. */
function mayReadHostName(): boolean {
  return denoGrants({ name: "sys", kind: "hostname" });
}

/**
 * Throws Deno's `NotCapable` naming `--allow-sys=hostname` where the runtime is Deno without the
 * permission to read the host name (found by a query, so Deno never prompts for it), which the
 * process probe made by `caller` needs.
 */
export function requireHostName(caller: string): void {
  if (mayReadHostName()) return;
  type Errors = Record<string, new (message: string) => Error>;
  const errors = (globalThis as unknown as { Deno?: { errors?: Errors } }).Deno?.errors;
  const NotCapable = errors?.NotCapable ?? errors?.PermissionDenied ?? Error;
  throw new NotCapable(
    `${caller}() needs to read the host name, which this Deno process may not: run it with ` +
      "--allow-sys=hostname, or leave a store's process option unset (a store of denoFs() or " +
      "nodeFs() then has no process probe: its locks hold within this process only)",
  );
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
