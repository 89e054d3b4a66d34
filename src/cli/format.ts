/**
 * Makes text from a ledger or log safe to print on a terminal: control
 * characters (escape sequences included) and bidirectional overrides are
 * shown as `\u001b`-style escapes, so a hostile tool name can neither
 * rewrite the screen nor make one name look like another.
 */
export function printable(text: string): string {
  return text.replace(
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** Shortens `text` to `max` characters, marking the cut with an ellipsis. */
export function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, Math.max(0, max - 1))}…`;
}

/**
 * Lays rows out as a left-aligned table with a header line and two spaces
 * between columns. Cells are made printable first.
 */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const cells = rows.map((row) => row.map(printable));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((row) => (row[i] ?? "").length)));
  const line = (row: readonly string[]): string =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return [line(headers), ...cells.map(line)].map((l) => `${l}\n`).join("");
}

/** Epoch milliseconds as an ISO-8601 UTC timestamp, or `-` for 0 (unknown). */
export function timestamp(ms: number): string {
  if (ms === 0 || !Number.isFinite(ms)) return "-";
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? String(ms) : date.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** JSON for `--json` output: two-space indented, ending in a newline. */
export function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}
