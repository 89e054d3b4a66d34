import type { GateEvent } from "loopctl/engine";
import { printable } from "../src/cli/format.js";
import { clip, wrap } from "./layout.js";
import type { Style } from "./style.js";

/** A plain-text table: columns padded to their widest cell. */
export function table(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)];
}

/** How a verdict reads to a person. */
export function verdictStyle(verdict: string, style: Style): (text: string) => string {
  switch (verdict) {
    case "allow":
    case "allow_modified":
    case "ask_allowed":
      return style.green;
    case "ask_expired":
    case "ask_unresolved":
    case "cancelled":
      return style.yellow;
    default:
      return style.red;
  }
}

/** The widest a tool name gets in the table, so that a row fits 80 columns. */
const TOOL_WIDTH = 15;

/**
 * The run's gate records (in emission order) as a readable table in `width`
 * columns: one row per record, its reason and matched grant on the lines
 * under it.
 */
export function auditTable(events: readonly GateEvent[], style: Style, width: number): string {
  if (events.length === 0) return "  (no gate records)\n";
  const rows = events.map((e, i) => {
    const d = e.decision;
    return [
      String(i + 1),
      clip(printable(e.callId), 8),
      clip(printable(d.tool), TOOL_WIDTH),
      d.argsDigest,
      d.verdict,
      `${d.ruleId}/${d.ruleSource}`,
    ];
  });
  const lines = table(["#", "call", "tool", "args digest", "verdict", "rule/source"], rows);
  const out = lines.slice(0, 2).map((line) => `  ${style.dim(line)}`);
  events.forEach((e, i) => {
    const d = e.decision;
    const verdict = d.verdict;
    // Colour goes on after padding so escape codes never skew the columns.
    out.push(`  ${(lines[i + 2] ?? "").replace(` ${verdict} `, ` ${verdictStyle(verdict, style)(verdict)} `)}`);
    const detail = [d.reason, d.matchedPattern === null ? null : `matched ${d.matchedPattern}`]
      .filter((x): x is string => x !== null)
      .join("; ");
    if (detail !== "") out.push(...wrap("     ", style.dim(printable(detail)), width));
  });
  return `${out.join("\n")}\n`;
}
