/**
 * What the benchmark runner needs from the runtime it runs on (Deno or Node), written once over
 * `node:*` modules that both provide: machine facts, memory probes, child processes for peak
 * memory, and the peer driver.
 *
 * @module
 */
import { execFile, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import * as fsp from "node:fs/promises";
import * as os from "node:os";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import type { FileSystem, Sha256Factory } from "../mod.ts";
import type { PeakMemory, PeerDriver, PeerTimings } from "./types.ts";
import { BenchError } from "./harness.ts";

/** The bench directory (where this file lives). */
export const BENCH_DIR: string = dirname(fileURLToPath(import.meta.url));
/** The repository root. */
export const REPO_DIR: string = dirname(BENCH_DIR);

/** The peer package, a dev-only benchmark dependency installed on demand. */
export const PEER_PACKAGE = "@mariozechner/pi-coding-agent";
/** The peer version the figures are measured against. */
export const PEER_VERSION = "0.73.1";
/** Where the peer is installed (ignored by git, never by `deno task test` or CI). */
export const PEER_DIR: string = join(BENCH_DIR, ".peer");

interface DenoGlobal {
  readonly version: { readonly deno: string; readonly v8: string };
}

/** The Deno namespace when running on Deno. */
function deno(): DenoGlobal | undefined {
  return (globalThis as { Deno?: DenoGlobal }).Deno;
}

/** `deno` or `node`. */
export function runtimeName(): "deno" | "node" {
  return deno() === undefined ? "node" : "deno";
}

/** The runtime and its version, e.g. `Deno 2.9.6 (V8 15.0)`. */
export function runtimeLabel(): string {
  const d = deno();
  if (d !== undefined) return `Deno ${d.version.deno} (V8 ${d.version.v8})`;
  return `Node ${process.version} (V8 ${process.versions.v8})`;
}

/** The mount (device, type, options) holding `path`, from /proc/self/mounts. */
function mountOf(path: string): string {
  let text: string;
  try {
    text = readFileSync("/proc/self/mounts", "utf8");
  } catch (error) {
    if ((error as { code?: string }).code === "ENOENT") return "unknown (no /proc/self/mounts)";
    throw error;
  }
  let best: string[] | undefined;
  for (const line of text.split("\n")) {
    const fields = line.split(" ");
    const mountPoint = fields[1];
    if (mountPoint === undefined) continue;
    const inside = path === mountPoint ||
      path.startsWith(mountPoint.endsWith("/") ? mountPoint : `${mountPoint}/`);
    if (inside && (best === undefined || mountPoint.length > (best[1] as string).length)) {
      best = fields;
    }
  }
  if (best === undefined) return "unknown";
  return `${best[0]} on ${best[1]} (${best[2]}, ${best[3]})`;
}

/** Machine and runtime facts for the report. */
export function machineFacts(workDir: string, adapter: string): [string, string][] {
  const cpus = os.cpus();
  return [
    ["CPU", `${cpus[0]?.model ?? "unknown"} × ${cpus.length} cores`],
    ["memory", `${(os.totalmem() / 2 ** 30).toFixed(0)} GiB`],
    ["OS", `${os.type()} ${os.release()} (${os.arch()})`],
    ["disk under the work dir", mountOf(workDir)],
    ["runtime", runtimeLabel()],
    ["adapter", adapter],
    ["code", codeVersion()],
    ["load average at start (1, 5, 15 min)", loadAverage()],
  ];
}

/** The commit the library code came from, and whether `src/` had uncommitted changes. */
function codeVersion(): string {
  const git = (args: string[]) =>
    spawnSync("git", args, { cwd: REPO_DIR, encoding: "utf8" }).stdout?.trim() ?? "";
  const head = git(["rev-parse", "--short", "HEAD"]);
  if (head === "") return "unknown (no git)";
  const dirty = git(["status", "--porcelain", "--", "src", "adapters", "mod.ts", "layout.ts"]);
  return dirty === "" ? `commit ${head}` : `commit ${head} + uncommitted changes in src/`;
}

/** The load average (1, 5 and 15 minutes): other work on the machine makes figures noisier. */
export function loadAverage(): string {
  return os.loadavg().map((load) => load.toFixed(2)).join(", ");
}

/** The heap in use, in bytes. */
export function heapUsed(): number {
  return process.memoryUsage().heapUsed;
}

/** A forced garbage collection, when the runtime was started with `--expose-gc`. */
export function exposedGc(): (() => void) | undefined {
  const gc = (globalThis as { gc?: () => void }).gc;
  return typeof gc === "function" ? () => gc() : undefined;
}

/** The command line that runs a TypeScript file of this repository on the current runtime. */
function tsCommand(script: string, args: readonly string[]): [string, string[]] {
  if (runtimeName() === "deno") return [process.execPath, ["run", "-A", script, ...args]];
  return [process.execPath, ["--import", "tsx", script, ...args]];
}

function run(command: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      command,
      args,
      { cwd: REPO_DIR, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error !== null) {
          reject(
            new BenchError(`${command} ${args.join(" ")} failed: ${error.message}\n${stderr}`),
          );
        } else resolve(stdout);
      },
    );
  });
}

/** The adapters a run can measure: the Deno adapter (on Deno only) or the Node adapter. */
export type AdapterName = "deno" | "node";

/** The port and hashing of adapter `name`; the Deno adapter is loaded only when asked for. */
export async function loadAdapter(
  name: AdapterName,
): Promise<{ fs: FileSystem; sha256: Sha256Factory; label: string }> {
  if (name === "deno") {
    if (runtimeName() !== "deno") throw new BenchError("the Deno adapter runs on Deno only");
    const { denoFs, denoSha256 } = await import("../adapters/deno.ts");
    return { fs: denoFs(), sha256: denoSha256, label: "denoFs() + denoSha256 (adapters/deno.ts)" };
  }
  const { nodeFs, nodeSha256 } = await import("../adapters/node.ts");
  return { fs: nodeFs(), sha256: nodeSha256, label: "nodeFs() + nodeSha256 (adapters/node.ts)" };
}

/**
 * Opens the session at `dir` with `adapter` in a child process of the same runtime
 * (`bench/open_child.ts`) and returns its peak resident memory, with the peak of the same child
 * that only loads the library.
 */
export async function peakOpenMemory(dir: string, adapter: AdapterName): Promise<PeakMemory> {
  const script = join(BENCH_DIR, "open_child.ts");
  const [command, baseArgs] = tsCommand(script, [adapter, "--baseline"]);
  const baseline = JSON.parse(await run(command, baseArgs)) as { peakKb: number };
  const [, openArgs] = tsCommand(script, [adapter, dir]);
  const opened = JSON.parse(await run(command, openArgs)) as { peakKb: number; messages: number };
  return { peakKb: opened.peakKb, baselineKb: baseline.peakKb, messages: opened.messages };
}

function nodeBinary(): string | undefined {
  const candidate = runtimeName() === "node" ? process.execPath : "node";
  const probe = spawnSync(candidate, ["--version"], { encoding: "utf8" });
  return probe.status === 0 ? candidate : undefined;
}

/**
 * The peer driver: installs the peer into `bench/.peer` when allowed and missing, and runs
 * `bench/peer_child.mjs` on Node (command files go to `scratchDir`). Returns why it cannot when
 * it cannot; the run goes on.
 */
export async function preparePeer(
  install: boolean,
  scratchDir: string,
  log: (line: string) => void,
): Promise<PeerDriver | { unavailable: string }> {
  const node = nodeBinary();
  if (node === undefined) return { unavailable: "no `node` binary on PATH to run the peer" };
  const packageDir = join(PEER_DIR, "node_modules", ...PEER_PACKAGE.split("/"));
  const modulePath = join(packageDir, "dist", "core", "session-manager.js");
  const installed = (): string | undefined => {
    if (!existsSync(modulePath)) return undefined;
    const manifest = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8")) as {
      version?: string;
    };
    return manifest.version;
  };
  if (installed() !== PEER_VERSION) {
    if (!install) {
      return {
        unavailable: `${PEER_PACKAGE}@${PEER_VERSION} is not installed in bench/.peer ` +
          "(a full run installs it; or pass --peer=install)",
      };
    }
    log(`installing ${PEER_PACKAGE}@${PEER_VERSION} into bench/.peer (dev-only, for benchmarks)`);
    await fsp.mkdir(PEER_DIR, { recursive: true });
    const npm = spawnSync(
      "npm",
      [
        "install",
        "--prefix",
        PEER_DIR,
        "--no-save",
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        "--loglevel=error",
        `${PEER_PACKAGE}@${PEER_VERSION}`,
      ],
      { encoding: "utf8", timeout: 300_000 },
    );
    if (npm.status !== 0 || installed() !== PEER_VERSION) {
      const why = (npm.stderr ?? "").trim().split("\n").slice(-3).join(" ") ||
        npm.error?.message || `npm exited with ${npm.status}`;
      return { unavailable: `could not install ${PEER_PACKAGE}@${PEER_VERSION}: ${why}` };
    }
  }
  const child = join(BENCH_DIR, "peer_child.mjs");
  await fsp.mkdir(scratchDir, { recursive: true });
  let commands = 0;
  return {
    label: `${PEER_PACKAGE}@${PEER_VERSION} SessionManager on ${
      spawnSync(node, ["--version"], { encoding: "utf8" }).stdout.trim()
    } (child process)`,
    async run(command): Promise<PeerTimings> {
      const file = join(scratchDir, `command-${++commands}.json`);
      await fsp.writeFile(file, JSON.stringify(command));
      const stdout = await run(node, [child, modulePath, file]);
      await fsp.rm(file);
      return JSON.parse(stdout) as PeerTimings;
    },
  };
}

/**
 * Runs an entry point's `main` and reports its failure on stderr with exit status 1. Entry points
 * avoid top-level `await`, which tsx (the Node runner) does not allow in this package's scripts.
 */
export function runMain(main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    process.stderr.write(
      `${error instanceof Error ? error.stack ?? error.message : String(error)}\n`,
    );
    process.exitCode = 1;
  });
}
