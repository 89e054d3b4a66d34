import type { Figure, Row, Target } from "./harness.js";

/** Renders a figure with a readable scale (ns → µs → ms; B → KiB). */
export function formatFigure(f: Figure): string {
  if (f.unit === "ns/op") {
    const v = f.value;
    if (v < 1e3) return `${v.toFixed(1)} ns`;
    if (v < 1e6) return `${(v / 1e3).toFixed(2)} µs`;
    return `${(v / 1e6).toFixed(2)} ms`;
  }
  if (f.unit === "B/ask" || f.unit === "B") {
    return f.value < 10_240 ? `${f.value.toFixed(0)} ${f.unit}` : `${(f.value / 1024).toFixed(1)} Ki${f.unit}`;
  }
  if (f.unit === "x") return `${formatRatio(f.value)}`;
  if (f.unit === "µs") return `${f.value.toFixed(2)} µs`;
  if (f.unit === "MB/s" || f.unit === "asks/s") {
    return `${f.value >= 1e5 ? f.value.toExponential(2) : f.value.toFixed(f.value < 100 ? 1 : 0)} ${f.unit}`;
  }
  return `${f.value.toPrecision(4)} ${f.unit}`;
}

export function formatRatio(r: number): string {
  if (r < 0.01) return `${r.toPrecision(2)}×`;
  return r >= 100 ? `${r.toFixed(0)}×` : r >= 10 ? `${r.toFixed(1)}×` : `${r.toFixed(2)}×`;
}

export function formatTarget(t: Target | null): string {
  if (t === null) return "—";
  const op = t.op === "<=" ? "≤" : "≥";
  return t.unit === "x" ? `${t.label} ${op} ${t.limit}×` : `${t.label} ${op} ${t.limit} ${t.unit}`;
}

/** The table printed by `npm run bench`: one line per row, fixed-width columns. */
export function renderTable(rows: readonly Row[], markdown = false): string {
  const header = ["benchmark", "ours", "floor", "ratio", "target", "got", "result"];
  const lines: string[][] = rows.map((r) => {
    if (r.type !== "measured") {
      return [r.name, "—", "—", "—", formatTarget(r.target), "—", r.status === "n/a" ? "n/a" : "ERROR"];
    }
    return [
      r.name,
      formatFigure(r.ours),
      r.floor === null ? "—" : formatFigure(r.floor),
      r.ratio === null ? "—" : formatRatio(r.ratio),
      formatTarget(r.target),
      r.checked === null ? "—" : formatFigure(r.checked),
      r.status,
    ];
  });
  if (markdown) {
    const esc = (s: string): string => s.replaceAll("|", "\\|");
    return [
      `| ${header.join(" | ")} |`,
      `|${header.map(() => "---").join("|")}|`,
      ...lines.map((l) => `| ${l.map(esc).join(" | ")} |`),
    ].join("\n");
  }
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (cells: readonly string[]): string =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd();
  return [fmt(header), widths.map((w) => "-".repeat(w)).join("  "), ...lines.map(fmt)].join("\n");
}

/** Notes (reasons for n/a, errors, caveats) listed under the table. */
export function renderNotes(rows: readonly Row[]): string {
  return rows
    .flatMap((r) => {
      const parts: string[] = [];
      // Files written before ranges were recorded have none.
      const range = r.type === "measured" ? (r.range ?? null) : null;
      if (r.type === "measured" && range !== null && r.status !== "info") {
        const unit = r.checked?.unit === "µs" ? " µs" : "×";
        parts.push(`per-round range ${range[0].toFixed(2)}–${range[1].toFixed(2)}${unit}`);
      }
      if (r.note !== null) parts.push(r.note);
      return parts.length === 0 ? [] : [`- ${r.name}: ${parts.join("; ")}`];
    })
    .join("\n");
}
