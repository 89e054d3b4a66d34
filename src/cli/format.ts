import { lookAlikeParts } from "../look-alike.js";
import { ESCAPED, clipToWidth, displayWidth, padToWidth } from "./width.js";

/**
 * What must never reach a terminal raw, because it rewrites the screen or
 * hides in a name: controls (C0, DEL, C1; escape sequences start with one),
 * format characters (zero-width spaces and joiners, the soft hyphen, the
 * byte-order mark, bidi embeddings, overrides, isolates and marks, tags),
 * private-use and unassigned code points, every other default-ignorable code
 * point (variation selectors, Hangul fillers, the combining grapheme
 * joiner…), every separator but the space (no-break and other spaces, line
 * and paragraph separators), and lone surrogates (printed as U+FFFD, so two
 * names would look alike).
 */
const UNSAFE = new RegExp(ESCAPED, "gu");

const hex4 = (unit: number): string => `\\u${unit.toString(16).padStart(4, "0")}`;

/** `c`'s escape: `\u200b`, or `\u{e0064}` beyond the BMP. */
function escapeOf(c: string): string {
  const point = c.codePointAt(0) as number;
  return point > 0xffff ? `\\u{${point.toString(16)}}` : hex4(point);
}

/**
 * Makes untrusted text (a tool name, a note, a path, a message quoting
 * either) safe to print on a terminal: every code point {@link UNSAFE}
 * describes is shown as an escape, `\u200b`, or `\u{e0064}` beyond the BMP,
 * so a hostile name can neither rewrite the screen nor pass for another. So
 * is a letter that passes for a Latin one in a word that also holds Latin
 * letters (a Cyrillic "а" in `re\u0430d_file`; see look-alike.ts), as the
 * console marks it; a word all of one script keeps its letters. Backslashes
 * are left as they are. Apply it once: its escapes join the word after them.
 */
export function printable(text: string): string {
  let out = "";
  for (const part of lookAlikeParts(text))
    out += part.alike ? escapeOf(part.text) : part.text.replace(UNSAFE, escapeOf);
  return out;
}

/**
 * JSON for `--json` output: two-space indented, ending in a newline, with
 * every code point {@link printable} escapes written as `\uXXXX` (a pair of
 * them beyond the BMP). It parses to exactly the same value: apart from the
 * indentation's newlines, those characters only occur inside strings, where
 * the escape means the character.
 */
export function json(value: unknown): string {
  const text = JSON.stringify(value, null, 2).replace(UNSAFE, (c) => {
    // Outside strings, the only such character is the indentation's newline.
    if (c === "\n") return c;
    let escaped = "";
    for (let i = 0; i < c.length; i++) escaped += hex4(c.charCodeAt(i));
    return escaped;
  });
  return `${text}\n`;
}

/**
 * Shortens `text` to `max` display columns, marking the cut with an
 * ellipsis; a character is never cut in two (see {@link clipToWidth}).
 */
export function clip(text: string, max: number): string {
  return clipToWidth(text, max);
}

/**
 * Lays rows out as a left-aligned table with a header line and two spaces
 * between columns. Cells are made printable first, then padded by the columns
 * they take on a terminal ({@link displayWidth}: a CJK character or an emoji
 * takes two, a combining mark none), not by their length in UTF-16 code units,
 * so every column starts at the same column on every line.
 */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const cells = rows.map((row) => row.map(printable));
  // A loop, not Math.max(...column): spreading a column of 120k rows overflows the stack.
  const widths = headers.map(displayWidth);
  for (const row of cells) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, displayWidth(cell))));
  const line = (row: readonly string[]): string =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : padToWidth(cell, widths[i] ?? 0)))
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
