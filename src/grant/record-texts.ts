const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const SPACE = 0x20;
const TAB = 0x09;
const LINE_FEED = 0x0a;
const CARRIAGE_RETURN = 0x0d;

function isSpace(c: number): boolean {
  return c === SPACE || c === TAB || c === LINE_FEED || c === CARRIAGE_RETURN;
}

/**
 * `text` (one JSON value) without the whitespace between its tokens; its
 * strings as they are. A scan rather than a regular expression: a regex
 * matching a string of about 8 million characters overflows the stack.
 */
function compact(text: string): string {
  const pieces: string[] = [];
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) i = stringEnd(text, i);
    else if (isSpace(c)) {
      pieces.push(text.slice(start, i));
      while (i + 1 < text.length && isSpace(text.charCodeAt(i + 1))) i++;
      start = i + 1;
    }
  }
  pieces.push(text.slice(start));
  return pieces.join("");
}

/**
 * The text of each element of the JSON array `text`, compact and otherwise
 * byte for byte: unknown fields, key order and numbers as written (an
 * integer above 2^53, `1.0`), which JSON.parse would round or respell.
 * `text` must be one that JSON.parse has accepted as an array: only then is
 * counting brackets outside strings enough to find where each element ends.
 */
export function recordTexts(text: string): string[] {
  const texts: string[] = [];
  let depth = 0;
  let start = 0;
  let spaced = false;
  const push = (end: number): void => {
    const element = text.slice(start, end);
    texts.push(spaced ? compact(element) : element);
    start = end + 1;
    spaced = false;
  };
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) i = stringEnd(text, i);
    else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      depth++;
      if (depth === 1) start = i + 1;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
      // The array's end; `[]` (or `[ ]`) has no element before it.
      if (depth === 0 && text.slice(start, i).trim() !== "") push(i);
    } else if (c === COMMA && depth === 1) push(i);
    else if (isSpace(c)) spaced = true;
  }
  return texts;
}

/** Where the string opened by the quote at `open` closes: the next quote after an even run of backslashes. */
function stringEnd(text: string, open: number): number {
  let close = text.indexOf('"', open + 1);
  for (;;) {
    // Only an unterminated string, which JSON.parse would have refused, has no closing quote.
    if (close === -1) return text.length;
    let escapes = 0;
    while (text.charCodeAt(close - 1 - escapes) === BACKSLASH) escapes++;
    if (escapes % 2 === 0) return close;
    close = text.indexOf('"', close + 1);
  }
}
