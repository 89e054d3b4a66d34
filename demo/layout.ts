/**
 * Laying text out in a terminal's columns. Everything the demo prints goes
 * through {@link wrap} or {@link clip}, so no line is wider than the width it
 * was given (80 columns at most; fewer on a narrower terminal).
 */

/** The widest line the demo prints. */
export const MAX_WIDTH = 80;

/** The narrowest: below this, wrapping costs more than it saves. */
const MIN_WIDTH = 40;

const ESCAPE = /\u001b\[[0-9;]*m/g;

/** How many columns `stream` gives the demo: its width, capped at {@link MAX_WIDTH}. */
export function outputWidth(stream: { columns?: number }): number {
  const columns = stream.columns;
  if (columns === undefined || !Number.isInteger(columns) || columns <= 0) return MAX_WIDTH;
  return Math.max(MIN_WIDTH, Math.min(MAX_WIDTH, columns));
}

/** Columns `text` takes on a terminal: colour escapes take none, every other code point one. */
export function visibleLength(text: string): number {
  let length = 0;
  for (const _ of text.replace(ESCAPE, "")) length += 1;
  return length;
}

/** `text` cut to `width` columns, the cut marked with an ellipsis. Meant for plain text. */
export function clip(text: string, width: number): string {
  const chars = [...text];
  return chars.length <= width ? text : `${chars.slice(0, Math.max(0, width - 1)).join("")}…`;
}

/**
 * Word-wraps `text` to `width` columns: the first line starts with `lead`,
 * every later one with `hang` (by default as many spaces as `lead` is
 * wide). Each line of a multi-line `text` is wrapped on its own and keeps
 * its indentation and the spaces between its words, but for those at a
 * break; a word too long for a line is cut across lines. Colour
 * escapes count for nothing, so styled text wraps as it reads.
 */
export function wrap(lead: string, text: string, width: number, hang = " ".repeat(visibleLength(lead))): string[] {
  const lines: string[] = [];
  for (const paragraph of text.split("\n")) {
    const indent = /^ */.exec(paragraph)?.[0] ?? "";
    let line = `${lines.length === 0 ? lead : hang}${indent}`;
    const start = line;
    for (const [, space = "", word = ""] of paragraph.slice(indent.length).matchAll(/( *)([^ ]+)/g)) {
      const sep = line === start ? "" : space;
      if (visibleLength(line) + sep.length + visibleLength(word) <= width) {
        line += sep + word;
        continue;
      }
      if (line !== start) {
        lines.push(line);
        line = `${hang}${indent}`;
      }
      let rest = word;
      while (visibleLength(rest) > 0 && visibleLength(line) + visibleLength(rest) > width) {
        const room = Math.max(1, width - visibleLength(line));
        const [head, tail] = splitVisible(rest, room);
        lines.push(line + head);
        line = `${hang}${indent}`;
        rest = tail;
      }
      line += rest;
    }
    lines.push(line.trimEnd());
  }
  return lines;
}

/** Splits `text` after `columns` visible characters, never inside a colour escape. */
function splitVisible(text: string, columns: number): [string, string] {
  let seen = 0;
  let at = 0;
  const parts = text.split(/(\u001b\[[0-9;]*m)/);
  for (const part of parts) {
    if (part.startsWith("\u001b[")) {
      at += part.length;
      continue;
    }
    for (const char of part) {
      if (seen === columns) return [text.slice(0, at), text.slice(at)];
      seen += 1;
      at += char.length;
    }
  }
  return [text, ""];
}
