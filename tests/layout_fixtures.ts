// Shared fixtures of the layout tests: a repository on the memory filesystem, a deterministic
// clock and uuid source, and small builders. Not a test file itself.
import { MemoryFs } from "../adapters/memory.ts";
import {
  type ChildRequest,
  type CreatedSession,
  createRootSession,
  type LayoutWriteOptions,
} from "../layout.ts";

/** A fixed clock: every timestamp is 2026-04-19T14:30:22Z. */
export const fixedNow = (): Date => new Date("2026-04-19T14:30:22.456Z");

/**
 * A uuid source counting up from 1 in its leading hex digits (event ids and staging names take
 * a prefix), so everything derived from it is deterministic and distinct.
 */
export function countingUuid(): () => string {
  let next = 0;
  return () => (++next).toString(16).padStart(12, "0").padEnd(32, "0");
}

/** Deterministic write options for one test. */
export function deterministic(): LayoutWriteOptions {
  return { now: fixedNow, uuid: countingUuid() };
}

/** The contracts every test session uses. */
export const CONTRACTS = {
  workflowSet: "main",
  workflowContract: {
    orchestration: { completion_role: "outer" },
    terminal_blocker_reporting_roles: ["outer"],
  },
  workflowRoster: { roles: [{ id: "outer", cadence: "every" }] },
  harnessCapabilityRoster: { coordinator: "default", families: ["standard"] },
} as const;

/** A memory filesystem with an empty repository at `/repo`. */
export async function newRepo(): Promise<MemoryFs> {
  const fs = new MemoryFs();
  await fs.mkdir("/repo");
  return fs;
}

/** Creates a root session in `/repo` with deterministic clock and uuids. */
export async function newRoot(
  fs: MemoryFs,
  goal = "Ship the ultimate memory program",
  options: LayoutWriteOptions = deterministic(),
): Promise<CreatedSession> {
  return await createRootSession(fs, { repoRoot: "/repo", goal, ...CONTRACTS, ...options });
}

/** A valid v3 child request. */
export function childRequest(requestId: string, extra: Partial<ChildRequest> = {}): ChildRequest {
  return {
    schema_version: 3,
    request_id: requestId,
    goal: `Deliver ${requestId}`,
    origin: { parent_attempt_id: "attempt000001" },
    ...extra,
  };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Reads a JSON file. */
export async function readJson(fs: MemoryFs, path: string): Promise<Record<string, unknown>> {
  return JSON.parse(decoder.decode(await fs.readFile(path)));
}

/** Reads a text file. */
export async function readText(fs: MemoryFs, path: string): Promise<string> {
  return decoder.decode(await fs.readFile(path));
}

/** Writes a JSON file directly (as an agent or a test would), indented. */
export async function writeJson(fs: MemoryFs, path: string, value: unknown): Promise<void> {
  await fs.writeFile(path, encoder.encode(JSON.stringify(value, null, 2)));
}

/** Writes a text file directly. */
export async function writeText(fs: MemoryFs, path: string, text: string): Promise<void> {
  await fs.writeFile(path, encoder.encode(text));
}

/** Merges `patch` into a session's state.json (a test stand-in for the scheduler). */
export async function patchState(
  fs: MemoryFs,
  sessionDir: string,
  patch: Record<string, unknown>,
): Promise<void> {
  const state = await readJson(fs, `${sessionDir}/state.json`);
  await writeJson(fs, `${sessionDir}/state.json`, { ...state, ...patch });
}
