/**
 * What the benchmark cases get from the suite: the context (stores, directories, recording)
 * and the per-size fixture.
 *
 * @module
 */
import type { Durability, Message, SessionStore } from "../mod.ts";
import { collect, type Plan, type Stats, type Subject, summarize } from "./harness.ts";
import type {
  CaseRow,
  GrowthSpec,
  MemoryRow,
  PeerDriver,
  PeerRow,
  PrimitiveRow,
  SuiteConfig,
  SuiteEnv,
} from "./types.ts";

const encoder = new TextEncoder();

/**
 * Measures our `subject` and a peer command alternately in `rounds` rounds (the order flipping
 * every round), so a change of load on the machine hits both alike. Each round runs ours
 * `perRound` times in-process after one untimed run, and the peer child `perRound` times after
 * `peerWarmup` untimed runs (a fresh process each round).
 */
export async function interleavePeer(
  peer: PeerDriver,
  subject: Subject,
  command: Readonly<Record<string, unknown>>,
  rounds: number,
  perRound: number,
  peerWarmup: number,
): Promise<{ ours: Stats; peer: Stats }> {
  const ours: number[] = [];
  const theirs: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const runOurs = async () => {
      ours.push(...await collect(subject, 1, perRound));
    };
    const runPeer = async () => {
      const result = await peer.run({ ...command, warmup: peerWarmup, iterations: perRound });
      theirs.push(...result.samples);
    };
    if (round % 2 === 0) {
      await runOurs();
      await runPeer();
    } else {
      await runPeer();
      await runOurs();
    }
  }
  return { ours: summarize(ours), peer: summarize(theirs) };
}

/** One size's synthetic history and the session built from it. */
export interface SizeFixture {
  /** Messages in the history. */
  readonly size: number;
  /** The history. */
  readonly history: readonly Message[];
  /** Byte offset of each message in messages.jsonl, plus the end offset. */
  readonly offsets: readonly number[];
  /** The index of each user message (the round starts). */
  readonly roundStarts: readonly number[];
  /** The session directory (`<collection>/<id>`), written once and only read afterwards. */
  readonly sessionDir: string;
  /** The session id. */
  readonly id: string;
  /** Bytes of messages.jsonl. */
  readonly bytes: number;
  /** Bytes of meta.json. */
  readonly metaBytes: Uint8Array;
  /** Copies the session into a fresh collection named `name`; returns the copy's directory. */
  copy(name: string): Promise<string>;
}

/** What every case gets. */
export interface CaseContext {
  /** The environment. */
  readonly env: SuiteEnv;
  /** The configuration. */
  readonly config: SuiteConfig;
  /** The canonical working directory sessions are created for. */
  readonly cwd: string;
  /** A store over the environment's filesystem. */
  store(durability: Durability, sessionDir?: string): SessionStore;
  /** A fresh, empty directory `<workDir>/<parts...>` (created with its parents). */
  dir(...parts: string[]): Promise<string>;
  /** Removes `<workDir>/<parts...>` and everything below it. */
  drop(...parts: string[]): Promise<void>;
  /** The plan for an operation of about `estimateMs` milliseconds. */
  planFor(estimateMs: number): Plan;
  /** Records a measured row. */
  row(row: CaseRow): void;
  /** Records a memory figure. */
  memory(row: MemoryRow): void;
  /** Records a peer comparison. */
  peer(row: PeerRow): void;
  /** Records the cost of a single filesystem call. */
  primitive(row: PrimitiveRow): void;
  /** Records that a case could not run. */
  skip(what: string, why: string): void;
  /** The rows recorded so far. */
  readonly rows: readonly CaseRow[];
  /** Whether the case named `name` is selected (see `SuiteEnv.only`). */
  selected(name: string): boolean;
  /** A progress line. */
  log(line: string): void;
}

/** A case run once per size. */
export interface SizeCase {
  /** The case name (for `--only` and progress). */
  readonly name: string;
  /** The growth expectations of the operations it records. */
  readonly growth?: readonly GrowthSpec[];
  /** Runs the case at one size. */
  run(ctx: CaseContext, fixture: SizeFixture): Promise<void>;
}

/** A case run once per suite. */
export interface GlobalCase {
  /** The case name (for `--only` and progress). */
  readonly name: string;
  /** The growth expectations of the operations it records. */
  readonly growth?: readonly GrowthSpec[];
  /** Runs the case. */
  run(ctx: CaseContext): Promise<void>;
}

/** Formats a count with thousands separators. */
export function count(n: number): string {
  return n.toLocaleString("en-US");
}

/** Encodes a message as one JSONL line (what a commit appends). */
export function lineOf(message: Message): Uint8Array {
  return encoder.encode(JSON.stringify(message) + "\n");
}
