/**
 * Renders a benchmark `Report` as Markdown: the machine, the durability modes, the per-case
 * table (ours, floor, ratio, target), the growth table, memory figures, the peer comparison and
 * the cases that could not run.
 *
 * @module
 */
import type { Stats } from "./harness.ts";
import type { CaseRow, GrowthSpec, Report } from "./types.ts";

/** What each durability mode survives; printed in the report and quoted by the README. */
export const DURABILITY_MODES: readonly (readonly [string, string])[] = [
  [
    "`full` (default)",
    "Every step that a later step depends on is fsynced: the appended message bytes before " +
    "meta.json is published, the temp meta.json before it is renamed over the old one, and " +
    "the directory after the rename. A save that resolved survives a process crash, a kernel " +
    "panic and a power loss.",
  ],
  [
    "`ordered`",
    "The same steps in the same order, without any fsync. A save that resolved survives a " +
    "crash of the process (kill -9, an uncaught error, the OOM killer): its writes are already " +
    "in the kernel, which writes them out later. While the machine stays up, readers never see " +
    "a half-written meta.json (temp file + rename). It does not survive a power loss or a " +
    "kernel crash: the saves of the last seconds (the kernel's writeback delay, about 30 s on " +
    "Linux by default) can be lost, and what the session reopens as depends on the order in " +
    "which the filesystem wrote them out: an older committed state; or, when the disk got the " +
    "new meta.json before the message bytes it commits, a `CorruptSessionError` (log shorter " +
    "than its committed range, or checksum mismatch); or, when it got the rename before the " +
    "temp file's bytes, a `SessionFormatError` naming meta.json (empty or torn), after which " +
    "the session's header is gone and neither open nor salvage can read it (its " +
    "messages.jsonl is still there). Wrong history is never shown and nothing is silently " +
    "repaired.",
  ],
];

/** Formats milliseconds with a unit that keeps three significant figures. */
export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return "—";
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms >= 10) return `${ms.toFixed(1)} ms`;
  if (ms >= 0.1) return `${ms.toFixed(3)} ms`;
  return `${(ms * 1000).toFixed(1)} µs`;
}

function ratioOf(row: CaseRow): number | undefined {
  return row.floor === undefined ? undefined : row.ours.median / row.floor.median;
}

function verdict(pass: boolean | undefined): string {
  return pass === undefined ? "" : pass ? "pass" : "**FAIL**";
}

function throughput(bytes: number | undefined, stats: Stats): string {
  if (bytes === undefined || bytes < 1048576) return "";
  return ` (${(bytes / 1048576 / (stats.median / 1000)).toFixed(0)} MB/s)`;
}

/** One point of a growth series. */
export interface GrowthPoint {
  /** The size. */
  readonly size: number;
  /** The size as printed. */
  readonly sizeLabel: string;
  /** The judged growth: of the cost, or of the ratio to the floor (`GrowthSpec.byFloor`). */
  readonly growth: number;
  /** The growth of the raw cost. */
  readonly raw: number;
  /** The size divided by the smallest size. */
  readonly sizeRatio: number;
}

/**
 * The growth of `spec.op` at each size, relative to the smallest size (the smallest from
 * `spec.from` on, when given; sizes below it then show a growth under 1).
 */
export function growthOf(rows: readonly CaseRow[], spec: GrowthSpec): GrowthPoint[] {
  const series = rows.filter((row) => row.op === spec.op).sort((a, b) => a.size - b.size);
  const base = series.find((row) => row.size >= (spec.from ?? 0));
  if (base === undefined) return [];
  const byFloor = spec.byFloor === true && series.every((row) => row.floor !== undefined);
  const relative = (row: CaseRow) =>
    byFloor ? row.ours.median / (row.floor as Stats).median : row.ours.median;
  return series.map((row) => ({
    size: row.size,
    sizeLabel: row.sizeLabel,
    growth: relative(row) / relative(base),
    raw: row.ours.median / base.ours.median,
    sizeRatio: row.size / base.size,
  }));
}

/** Whether a growth expectation holds (undefined when it has no limit or no data). */
export function growthPass(rows: readonly CaseRow[], spec: GrowthSpec): boolean | undefined {
  const series = growthOf(rows, spec).filter((point) => point.size >= (spec.from ?? 0));
  if (series.length < 2) return undefined;
  if (spec.expect === "flat") {
    return spec.maxGrowth === undefined
      ? undefined
      : series.every((point) => point.growth <= (spec.maxGrowth as number));
  }
  // Linear: never worse than 1.5× proportional.
  return series.every((point) => point.growth <= point.sizeRatio * 1.5);
}

/** Counts the targets met and checked in a report. */
export function tally(report: Report): { met: number; checked: number; failed: string[] } {
  const failed: string[] = [];
  let checked = 0;
  const check = (pass: boolean | undefined, what: string) => {
    if (pass === undefined) return;
    checked++;
    if (!pass) failed.push(what);
  };
  for (const row of report.rows) {
    const ratio = ratioOf(row);
    if (row.maxRatio !== undefined && ratio !== undefined) {
      check(ratio <= row.maxRatio, `${row.op} @ ${row.sizeLabel} (×${ratio.toFixed(2)} floor)`);
    }
  }
  for (const spec of report.growth) check(growthPass(report.rows, spec), `growth of ${spec.op}`);
  for (const row of report.memory) check(row.pass, `${row.what} @ ${row.size}`);
  for (const row of report.peer) check(row.pass, `peer: ${row.what} @ ${row.size}`);
  return { met: checked - failed.length, checked, failed };
}

function escape(text: string): string {
  return text.replaceAll("|", "\\|");
}

function table(head: readonly string[], body: readonly (readonly string[])[]): string {
  const lines = [
    `| ${head.join(" | ")} |`,
    `| ${head.map(() => "---").join(" | ")} |`,
    ...body.map((cells) => `| ${cells.map(escape).join(" | ")} |`),
  ];
  return lines.join("\n");
}

/** The report as Markdown. */
export function renderMarkdown(report: Report): string {
  const out: string[] = [];
  const { met, checked, failed } = tally(report);
  out.push(`# @loop/sessions benchmarks (${report.mode} run)`);
  out.push("");
  out.push(
    `Started ${report.startedAt}, took ${(report.durationMs / 1000).toFixed(0)} s. ` +
      `**${met} of ${checked} targets met.** Floors: ${report.floors}. ` +
      `Each case alternates ours and its floor in interleaved batches in one process; ` +
      `figures are medians (p90 beside them).`,
  );
  out.push("");
  out.push(table(["machine", ""], report.machine.map(([k, v]) => [k, v])));
  out.push("");

  out.push("## Operations against their floors");
  out.push("");
  out.push(table(
    [
      "operation",
      "size",
      "ours (median / p90)",
      "floor (median / p90)",
      "ratio",
      "target",
      "",
      "note",
    ],
    report.rows.map((row) => {
      const ratio = ratioOf(row);
      return [
        row.op,
        row.sizeLabel,
        `${formatMs(row.ours.median)} / ${formatMs(row.ours.p90)}${
          throughput(row.bytes, row.ours)
        }`,
        row.floor === undefined
          ? "—"
          : `${formatMs(row.floor.median)} / ${formatMs(row.floor.p90)}${
            throughput(row.bytes, row.floor)
          }`,
        ratio === undefined ? "—" : `×${ratio.toFixed(2)}`,
        row.maxRatio === undefined ? "—" : `≤ ×${row.maxRatio}`,
        row.maxRatio === undefined || ratio === undefined ? "" : verdict(ratio <= row.maxRatio),
        row.note ?? "",
      ];
    }),
  ));
  out.push("");

  out.push("## Growth");
  out.push("");
  out.push(
    "Cost at each size divided by the cost at the smallest size (medians). Flat operations must " +
      "stay within their limit; linear ones within 1.5× of the size ratio. Rows marked *by floor* " +
      "judge the growth of the ratio to the floor, whose work is the same at every size: this " +
      "cancels the load of the shared machine changing between sizes; the raw growth is beside it.",
  );
  out.push("");
  out.push(table(
    ["operation", "expected", "growth by size", "limit", ""],
    report.growth.map((spec) => {
      const series = growthOf(report.rows, spec);
      return [
        spec.op,
        `${spec.expect}${
          spec.from === undefined ? "" : ` from ${spec.from.toLocaleString("en-US")} msgs`
        }${spec.byFloor === true ? ", by floor" : ""}${
          spec.why === undefined ? "" : ` (${spec.why})`
        }`,
        series.length === 0 ? "not measured" : series
          .map((point) =>
            `${point.sizeLabel}: ×${point.growth.toFixed(2)}${
              spec.expect === "linear" && point.sizeRatio !== 1
                ? ` (size ×${Number(point.sizeRatio.toPrecision(3))})`
                : spec.byFloor === true && point.sizeRatio !== 1
                ? ` (raw ×${point.raw.toFixed(2)})`
                : ""
            }`
          )
          .join("; "),
        spec.expect === "flat"
          ? spec.maxGrowth === undefined ? "—" : `≤ ×${spec.maxGrowth}`
          : "≤ 1.5 × size ratio",
        verdict(growthPass(report.rows, spec)),
      ];
    }),
  ));
  out.push("");

  out.push("## Memory");
  out.push("");
  out.push(
    report.memory.length === 0 ? "Not measured." : table(
      ["what", "size", "figure", "limit", ""],
      report.memory.map((row) => [
        row.what,
        row.size,
        row.value,
        row.limit ?? "—",
        verdict(row.pass),
      ]),
    ),
  );
  out.push("");

  out.push("## Durability modes");
  out.push("");
  out.push(table(["mode", "what a resolved save survives"], DURABILITY_MODES));
  out.push("");
  const ordered = new Set(
    report.rows.filter((row) => row.op.endsWith(" (ordered)")).map((row) =>
      row.op.slice(0, -" (ordered)".length)
    ),
  );
  if (ordered.size > 0) {
    const modeRows = report.rows.filter((row) =>
      ordered.has(row.op.replace(/ \((full|ordered)\)$/, ""))
    );
    const cell = (op: string, mode: string, size: number) => {
      const row = modeRows.find((r) => r.op === `${op} (${mode})` && r.size === size);
      return row === undefined ? "—" : formatMs(row.ours.median);
    };
    const body: string[][] = [];
    const baseOf = (op: string) => op.replace(/ \((full|ordered)\)$/, "");
    for (const op of ordered) {
      const rows = modeRows.filter((r) => baseOf(r.op) === op);
      const sizes = [...new Set(rows.map((r) => r.size))];
      for (const size of sizes.sort((a, b) => a - b)) {
        const label = rows.find((r) => r.size === size)?.sizeLabel ?? String(size);
        body.push([op, label, cell(op, "full", size), cell(op, "ordered", size)]);
      }
    }
    out.push(table(["operation", "size", "full", "ordered"], body));
    out.push("");
  }

  if (report.primitives.length > 0) {
    out.push("## What a commit is made of on this disk");
    out.push("");
    out.push(
      "Single filesystem calls, timed alone with the floors' runtime calls. A commit appends to " +
        "a held handle and publishes meta.json by temp file + rename; metadata writes publish " +
        "meta.json only.",
    );
    out.push("");
    out.push(table(
      ["call", "median", "p90"],
      report.primitives.map((row) => [
        row.what,
        formatMs(row.stats.median),
        formatMs(row.stats.p90),
      ]),
    ));
    out.push("");
  }

  out.push("## Against the peer");
  out.push("");
  out.push(`Peer: ${report.peerStatus}. Same messages, same machine, same run.`);
  out.push("");
  if (report.peer.length > 0) {
    out.push(table(
      ["what", "size", "ours", "peer", "ours vs peer", "target", "", "note"],
      report.peer.map((row) => [
        row.what,
        row.size,
        row.ours,
        row.peer,
        row.factor >= 1
          ? `${row.factor.toFixed(1)}× faster`
          : `${(1 / row.factor).toFixed(1)}× slower`,
        row.target ?? "—",
        verdict(row.pass),
        row.note ?? "",
      ]),
    ));
    out.push("");
  }

  if (failed.length > 0 || report.skipped.length > 0) out.push("## Open items");
  if (failed.length > 0) {
    out.push("");
    out.push("Targets missed:");
    out.push("");
    for (const item of failed) out.push(`- ${item}`);
  }
  if (report.skipped.length > 0) {
    out.push("");
    out.push("Not measured in this run:");
    out.push("");
    for (const item of report.skipped) out.push(`- ${item}`);
  }
  out.push("");
  return out.join("\n");
}
