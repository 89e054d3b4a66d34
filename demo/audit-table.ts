import type { GateEvent } from "loopctl/engine";
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

/** The run's gate records (in emission order) as a readable table. */
export function auditTable(events: readonly GateEvent[], style: Style): string {
  if (events.length === 0) return "  (no gate records)\n";
  const start = events[0]?.decision.ts ?? 0;
  const rows = events.map((e, i) => {
    const d = e.decision;
    const detail = [d.reason, d.matchedPattern === null ? null : `matched ${d.matchedPattern}`]
      .filter((x): x is string => x !== null)
      .join("; ");
    return [
      String(i + 1),
      `+${d.ts - start}ms`,
      String(e.turn),
      e.callId,
      d.tool,
      d.argsDigest,
      d.verdict,
      `${d.ruleId}/${d.ruleSource}`,
      detail,
    ];
  });
  const lines = table(["#", "time", "turn", "call", "tool", "args digest", "verdict", "rule/source", "detail"], rows);
  // Colour is applied after padding so escape codes never skew the columns.
  return `${lines
    .map((line, i) => {
      if (i < 2) return `  ${style.dim(line)}`;
      const verdict = rows[i - 2]?.[6] ?? "";
      return `  ${line.replace(` ${verdict} `, ` ${verdictStyle(verdict, style)(verdict)} `)}`;
    })
    .join("\n")}\n`;
}
