/**
 * The shapes shared by the benchmark suite, its cases and the report.
 *
 * @module
 */
import type { FileSystem, Sha256Factory } from "../mod.ts";
import type { Floors } from "./floors.ts";
import type { Plan, Stats } from "./harness.ts";

/** How much to run: `full` (the published figures), `quick` (a smoke run), `tiny` (tests). */
export type Mode = "full" | "quick" | "tiny";

/** The sizes and plans of a run. */
export interface SuiteConfig {
  /** The run mode. */
  readonly mode: Mode;
  /** History sizes, in messages, smallest first. */
  readonly sizes: readonly number[];
  /** Sessions in the listing collection. */
  readonly listSessions: number;
  /** Messages per session of the listing collection. */
  readonly listSessionMessages: number;
  /**
   * Messages per session of the large-session listing (as many sessions as `listSessions`):
   * about 1 MB of messages.jsonl in a full run, the size the fast list's target is set at.
   */
  readonly listLargeSessionMessages: number;
  /** Sessions in the peer listing comparison. */
  readonly peerListSessions: number;
  /** Approximate bytes per session of the peer listing comparison. */
  readonly peerListSessionBytes: number;
  /** Legacy v2 file sizes for migration, in bytes (approximate), smallest first. */
  readonly migrationBytes: readonly number[];
  /** Raw attempt directories in the prune-raw tree. */
  readonly pruneDirs: number;
  /** Runtime context snapshots (one per user turn, ~1.5 KB each) in the large-meta.json case. */
  readonly runtimeContexts: number;
  /** How long to measure, by the cost of one run of the operation. */
  readonly plans: {
    /** Operations well under a millisecond (page reads). */
    readonly micro: Plan;
    /** Commits and metadata writes. */
    readonly write: Plan;
    /** Operations of tens of milliseconds. */
    readonly slow: Plan;
    /** Operations of a second or more (huge opens, replacements, migrations). */
    readonly huge: Plan;
  };
}

/** Peak resident memory of a child process, in kilobytes. */
export interface PeakMemory {
  /** `VmHWM` after the work. */
  readonly peakKb: number;
  /** `VmHWM` of the same child doing nothing but loading the library. */
  readonly baselineKb: number;
  /** Messages the child opened. */
  readonly messages: number;
}

/** What the peer child process returns: timings in milliseconds. */
export interface PeerTimings {
  /** Every timed run. */
  readonly samples: readonly number[];
  /** Extra facts (file sizes, counts). */
  readonly facts?: Readonly<Record<string, number>>;
}

/** Runs the peer (`@mariozechner/pi-coding-agent`'s SessionManager) in a Node child process. */
export interface PeerDriver {
  /** The peer's package and version, for the report. */
  readonly label: string;
  /** Runs one command in the child (see `bench/peer_child.mjs`). */
  run(command: Readonly<Record<string, unknown>>): Promise<PeerTimings>;
}

/** Everything a run needs from its runtime. */
export interface SuiteEnv {
  /** The filesystem under test. */
  readonly fs: FileSystem;
  /** The SHA-256 under test. */
  readonly sha256: Sha256Factory;
  /** The floors, on the same filesystem. */
  readonly floors: Floors;
  /** An existing, empty working directory on `fs`. */
  readonly workDir: string;
  /** Facts about the machine and runtime, printed at the top of the report. */
  readonly machine: readonly (readonly [string, string])[];
  /** The runtime's heap in use, in bytes, when the runtime can tell. */
  readonly heapUsed?: () => number;
  /** Forces a garbage collection, when the runtime exposes one. */
  readonly gc?: () => void;
  /** Opens the session at `dir` in a child process and reports its peak memory. */
  readonly peakOpenMemory?: (dir: string) => Promise<PeakMemory>;
  /** The peer, or why it is missing. */
  readonly peer?: PeerDriver | { readonly unavailable: string };
  /** Progress lines. */
  readonly log?: (line: string) => void;
  /** Run only the cases whose names contain one of these strings. */
  readonly only?: readonly string[];
}

/** One measured operation at one size. */
export interface CaseRow {
  /** The operation, also the key of the growth table, e.g. `commit one message (full)`. */
  readonly op: string;
  /** The size (messages, sessions, bytes or directories). */
  readonly size: number;
  /** The size as printed. */
  readonly sizeLabel: string;
  /** Our operation. */
  readonly ours: Stats;
  /** Its floor, when one applies. */
  readonly floor: Stats | undefined;
  /** The target: our median at most this many times the floor's. */
  readonly maxRatio: number | undefined;
  /** Bytes processed per run, for throughput. */
  readonly bytes?: number;
  /** A remark printed beside the row. */
  readonly note?: string;
}

/** How an operation's cost should grow with size. */
export interface GrowthSpec {
  /** The operation (as in `CaseRow.op`). */
  readonly op: string;
  /** Flat (independent of history size) or linear. */
  readonly expect: "flat" | "linear";
  /** For flat operations: the most the cost may grow from the smallest size. */
  readonly maxGrowth?: number;
  /**
   * Judge the growth of the ratio to the floor rather than of the raw cost. For operations whose
   * floor does the same work at every size, this cancels the machine getting busier or quieter
   * between sizes (the sizes run minutes apart on a shared machine).
   */
  readonly byFloor?: boolean;
  /**
   * Judge the growth from this size on: the base is the smallest measured size at or above it,
   * and smaller sizes are printed but not judged. For an operation that takes a cheaper path on
   * small histories, once (a fast listing reads a small index.json whole, a large one by its
   * head); `why` says so in the report.
   */
  readonly from?: number;
  /** Why the growth is judged only `from` a size on (printed with the expectation). */
  readonly why?: string;
}

/** One memory figure. */
export interface MemoryRow {
  /** What was measured. */
  readonly what: string;
  /** At which size. */
  readonly size: string;
  /** The figure, as printed. */
  readonly value: string;
  /** The limit, as printed. */
  readonly limit?: string;
  /** Whether the figure is within the limit. */
  readonly pass?: boolean;
}

/** One comparison with the peer. */
export interface PeerRow {
  /** What was compared. */
  readonly what: string;
  /** At which size. */
  readonly size: string;
  /** Our figure, as printed. */
  readonly ours: string;
  /** The peer's figure, as printed. */
  readonly peer: string;
  /** How many times better we are (above 1) or worse (below 1). */
  readonly factor: number;
  /** The target, as printed. */
  readonly target?: string;
  /** Whether the target is met. */
  readonly pass?: boolean;
  /** A remark. */
  readonly note?: string;
}

/** The cost of one filesystem call on the disk under test. */
export interface PrimitiveRow {
  /** The call. */
  readonly what: string;
  /** Its timings. */
  readonly stats: Stats;
}

/** Everything a run produced. */
export interface Report {
  /** The run mode. */
  readonly mode: Mode;
  /** Machine and runtime facts. */
  readonly machine: readonly (readonly [string, string])[];
  /** What the floors run on. */
  readonly floors: string;
  /** Every measured row. */
  readonly rows: readonly CaseRow[];
  /** Growth expectations per operation. */
  readonly growth: readonly GrowthSpec[];
  /** Memory figures. */
  readonly memory: readonly MemoryRow[];
  /** Peer comparisons. */
  readonly peer: readonly PeerRow[];
  /** Single filesystem calls on the disk under test. */
  readonly primitives: readonly PrimitiveRow[];
  /** The peer's label, or why it was not measured. */
  readonly peerStatus: string;
  /** Cases that could not run, with the reason. */
  readonly skipped: readonly string[];
  /** When the run started (ISO). */
  readonly startedAt: string;
  /** How long the run took, in milliseconds. */
  readonly durationMs: number;
}
