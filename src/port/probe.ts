/**
 * The processes that may share a filesystem: what writer and collection locks need to know to hold
 * across processes. Runtime-free: adapters implement it.
 *
 * @module
 */

/**
 * What a store needs to know about processes to coordinate with other processes: its own pid and
 * host name, and whether a pid on this host is alive. Adapters provide one (`nodeProcessProbe()`,
 * `denoProcessProbe()`, also offered as `FileSystem.processes` by `nodeFs()` and `denoFs()`); tests
 * can fake several processes on one filesystem.
 */
export interface ProcessProbe {
  /** This process's id. */
  readonly pid: number;
  /** This host's name (locks of other hosts are never probed, only respected). */
  readonly host: string;
  /** True when a process with `pid` exists on this host (a process we may not signal is alive). */
  isAlive(pid: number): boolean;
  /**
   * Optional: false when this process may not signal other processes at the moment (Deno without
   * `--allow-run`), so `isAlive` cannot check and reports every pid alive. A lock refused for that
   * reason says so (with what to grant), instead of naming its holder as a live writer.
   */
  maySignal?(): boolean;
  /**
   * Optional: an identity of the running process instance with `pid` that no other process with
   * that pid shares and every thread of it does (on Linux its start time since boot, from
   * `/proc/<pid>/stat`), or undefined where the adapter cannot tell. With it, a lock that names
   * this process's pid is recognized as held by another thread (a worker) or another copy of the
   * library in this very process, and a lock whose pid was reused by another process as stale.
   */
  processStart?(pid: number): string | undefined;
  /**
   * Optional: an identity of the pid namespace this process runs in (on Linux the target of
   * `/proc/self/ns/pid`), where the adapter can tell. Pids mean something only within one
   * namespace: a lock taken in another one on the same host (a container sharing the host name, a
   * sandbox) names a pid this process cannot probe, so it is treated as another host's: live,
   * never taken over.
   */
  readonly pidNamespace?: string;
}
