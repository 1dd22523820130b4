/**
 * The benchmark runner: `deno task bench` (or `node --import tsx bench/main.ts`).
 *
 * Measures every case with the runtime's own adapter (the Deno adapter on Deno, the Node adapter on
 * Node) and native SHA-256 on the real disk, each beside its floor in the same process, compares
 * with the peer on the same messages, prints a Markdown report and writes it to
 * `bench/results/`.
 *
 * Options:
 * - `--quick`: smaller sizes and fewer runs (a smoke run of well under a minute);
 * - `--out=FILE`: where to write the report (default `bench/results/latest.md` for a full Deno
 *   run, `latest-node.md` on Node, `quick*.md` for quick runs), with its data beside it as JSON;
 * - `--dir=DIR`: the parent of the temporary work directory (default the OS temp dir);
 * - `--peer=install|auto|off`: install the peer when missing (default for full runs), use it
 *   only when installed (default for quick runs), or skip it;
 * - `--adapter=deno|node`: the adapter measured (default: `deno` on Deno, `node` on Node; the
 *   floors are the same `node:fs` calls either way);
 * - `--only=a,b`: run only the cases whose names contain one of these strings;
 * - `--keep`: keep the work directory;
 * - `--strict`: exit with status 1 when a target is missed.
 *
 * @module
 */
import * as fsp from "node:fs/promises";
import * as os from "node:os";
import { join } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { nodeFloors } from "./floors_node.ts";
import { configFor, runSuite } from "./suite.ts";
import { renderMarkdown, tally } from "./report.ts";
import {
  BENCH_DIR,
  exposedGc,
  heapUsed,
  loadAdapter,
  loadAverage,
  machineFacts,
  peakOpenMemory,
  preparePeer,
  runMain,
  runtimeName,
} from "./runtime.ts";
import type { Mode } from "./types.ts";

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      quick: { type: "boolean", default: false },
      out: { type: "string" },
      dir: { type: "string" },
      peer: { type: "string" },
      only: { type: "string" },
      adapter: { type: "string" },
      keep: { type: "boolean", default: false },
      strict: { type: "boolean", default: false },
    },
  });

  const mode: Mode = values.quick ? "quick" : "full";
  const peerMode = values.peer ?? (mode === "full" ? "install" : "auto");
  const adapterName = values.adapter ?? (runtimeName() === "deno" ? "deno" : "node");
  if (adapterName !== "deno" && adapterName !== "node") {
    throw new TypeError(`--adapter must be deno or node (got '${adapterName}')`);
  }
  const adapter = await loadAdapter(adapterName);
  if (!["install", "auto", "off"].includes(peerMode)) {
    throw new TypeError(`--peer must be install, auto or off (got '${peerMode}')`);
  }
  const suffix = runtimeName() === "node" ? "-node" : "";
  const out = values.out ??
    join(BENCH_DIR, "results", `${mode === "full" ? "latest" : "quick"}${suffix}.md`);
  const log = (line: string): void => {
    process.stderr.write(`${line}\n`);
  };

  const workDir = await fsp.realpath(
    await fsp.mkdtemp(join(values.dir ?? os.tmpdir(), "loop-bench-")),
  );
  log(`work dir ${workDir}`);
  try {
    const peer = peerMode === "off"
      ? { unavailable: "skipped (--peer=off)" }
      : await preparePeer(peerMode === "install", join(workDir, "peer-commands"), log);
    const gc = exposedGc();
    const report = await runSuite({
      fs: adapter.fs,
      sha256: adapter.sha256,
      floors: nodeFloors(),
      workDir: join(workDir, "data"),
      machine: machineFacts(workDir, adapter.label),
      heapUsed,
      ...(gc === undefined ? {} : { gc }),
      peakOpenMemory: (dir) => peakOpenMemory(dir, adapterName),
      peer,
      log,
      ...(values.only === undefined ? {} : { only: values.only.split(",") }),
    }, configFor(mode));
    const markdown = renderMarkdown({
      ...report,
      machine: [...report.machine, ["load average at end (1, 5, 15 min)", loadAverage()]],
    });
    process.stdout.write(markdown);
    await fsp.mkdir(join(out, ".."), { recursive: true });
    const json = out.replace(/\.md$/, "") + ".json";
    const files: [string, string][] = [[out, markdown], [json, JSON.stringify(report, null, 1)]];
    for (const [path, text] of files) {
      const temp = `${path}.${process.pid}.tmp`;
      await fsp.writeFile(temp, text);
      await fsp.rename(temp, path);
    }
    log(`report written to ${out} (data: ${json})`);
    const { met, checked } = tally(report);
    if (values.strict && met < checked) process.exitCode = 1;
  } finally {
    if (values.keep) log(`kept ${workDir}`);
    else await fsp.rm(workDir, { recursive: true, force: true });
  }
}

runMain(main);
