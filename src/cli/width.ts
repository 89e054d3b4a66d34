import { HIDDEN } from "../shown.js";
import { lookAlikes } from "../look-alike.js";

/**
 * Code points a terminal draws over no column of their own: combining and
 * enclosing marks, which sit on the character before them, Hangul vowels and
 * final consonants, which join the syllable they follow, and what
 * {@link printable} escapes anyway (controls, format characters, other
 * default-ignorables), should unescaped text be measured.
 *
 * @see printable in format.ts
 */
const ZERO_WIDTH = /^[\p{Mn}\p{Me}\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\u1160-\u11ff\ud7b0-\ud7ff]$/u;

/**
 * The code points {@link printable} shows as an escape (`\u200b`,
 * `\u{e0064}`): `HIDDEN` of shown.ts, the set every text loopctl shows
 * escapes (controls, format characters, private-use, unassigned and
 * surrogate code points, every separator but the space, other
 * default-ignorables). Kept here so that {@link clipToWidth}, which cuts text
 * before it is made printable, counts each as the escape it will be printed as.
 *
 * @see printable in format.ts
 */
export const ESCAPED = HIDDEN;

const ESCAPED_ONE = new RegExp(`^(?:${ESCAPED})$`, "u");

/** The columns of the escape {@link printable} shows `c` as: `\u200b`, or `\u{e0064}` beyond the BMP. */
function escapeWidth(c: string): number {
  const point = c.codePointAt(0) as number;
  return point > 0xffff ? 4 + point.toString(16).length : 6;
}

const ASCII = /^[\x20-\x7e]*$/;

/** A skin tone after an emoji that takes it: drawn with that emoji, in its two columns. */
const EMOJI_MODIFIER = /^\p{Emoji_Modifier}$/u;
const EMOJI_MODIFIER_BASE = /^\p{Emoji_Modifier_Base}$/u;

/**
 * The code points Unicode's East Asian Width gives as Wide (W) or Fullwidth
 * (F), Unicode 15.1, as sorted inclusive `[first, last]` pairs, flattened.
 * JavaScript's regular expressions have no `\p{East_Asian_Width}`, so the
 * ranges are kept here; Ambiguous (A) counts as one column, as in a terminal
 * not set to East Asian ambiguous widths.
 */
// prettier-ignore
const WIDE: readonly number[] = [
  0x1100, 0x115f, // Hangul Jamo initial consonants
  0x231a, 0x231b, 0x2329, 0x232a, 0x23e9, 0x23ec, 0x23f0, 0x23f0, 0x23f3, 0x23f3,
  0x25fd, 0x25fe, 0x2614, 0x2615, 0x2648, 0x2653, 0x267f, 0x267f, 0x2693, 0x2693,
  0x26a1, 0x26a1, 0x26aa, 0x26ab, 0x26bd, 0x26be, 0x26c4, 0x26c5, 0x26ce, 0x26ce,
  0x26d4, 0x26d4, 0x26ea, 0x26ea, 0x26f2, 0x26f3, 0x26f5, 0x26f5, 0x26fa, 0x26fa,
  0x26fd, 0x26fd, 0x2705, 0x2705, 0x270a, 0x270b, 0x2728, 0x2728, 0x274c, 0x274c,
  0x274e, 0x274e, 0x2753, 0x2755, 0x2757, 0x2757, 0x2795, 0x2797, 0x27b0, 0x27b0,
  0x27bf, 0x27bf, 0x2b1b, 0x2b1c, 0x2b50, 0x2b50, 0x2b55, 0x2b55,
  0x2e80, 0x2e99, 0x2e9b, 0x2ef3, 0x2f00, 0x2fd5, 0x2ff0, 0x2fff, // CJK radicals, ideographic description
  0x3000, 0x303e, 0x3041, 0x3096, 0x3099, 0x30ff, // CJK symbols and punctuation, kana
  0x3105, 0x312f, 0x3131, 0x318e, 0x3190, 0x31e3, 0x31ef, 0x321e, 0x3220, 0x3247,
  0x3250, 0x4dbf, 0x4e00, 0xa48c, 0xa490, 0xa4c6, // CJK ideographs, Yi
  0xa960, 0xa97c, 0xac00, 0xd7a3, // Hangul syllables
  0xf900, 0xfaff, 0xfe10, 0xfe19, 0xfe30, 0xfe52, 0xfe54, 0xfe66, 0xfe68, 0xfe6b,
  0xff01, 0xff60, 0xffe0, 0xffe6, // fullwidth forms
  0x16fe0, 0x16fe4, 0x16ff0, 0x16ff1, 0x17000, 0x187f7, 0x18800, 0x18cd5, 0x18d00, 0x18d08,
  0x1aff0, 0x1aff3, 0x1aff5, 0x1affb, 0x1affd, 0x1affe, 0x1b000, 0x1b122, 0x1b132, 0x1b132,
  0x1b150, 0x1b152, 0x1b155, 0x1b155, 0x1b164, 0x1b167, 0x1b170, 0x1b2fb,
  0x1f004, 0x1f004, 0x1f0cf, 0x1f0cf, 0x1f18e, 0x1f18e, 0x1f191, 0x1f19a, // emoji and pictographs
  0x1f200, 0x1f202, 0x1f210, 0x1f23b, 0x1f240, 0x1f248, 0x1f250, 0x1f251, 0x1f260, 0x1f265,
  0x1f300, 0x1f320, 0x1f32d, 0x1f335, 0x1f337, 0x1f37c, 0x1f37e, 0x1f393, 0x1f3a0, 0x1f3ca,
  0x1f3cf, 0x1f3d3, 0x1f3e0, 0x1f3f0, 0x1f3f4, 0x1f3f4, 0x1f3f8, 0x1f43e, 0x1f440, 0x1f440,
  0x1f442, 0x1f4fc, 0x1f4ff, 0x1f53d, 0x1f54b, 0x1f54e, 0x1f550, 0x1f567, 0x1f57a, 0x1f57a,
  0x1f595, 0x1f596, 0x1f5a4, 0x1f5a4, 0x1f5fb, 0x1f64f, 0x1f680, 0x1f6c5, 0x1f6cc, 0x1f6cc,
  0x1f6d0, 0x1f6d2, 0x1f6d5, 0x1f6d7, 0x1f6dc, 0x1f6df, 0x1f6eb, 0x1f6ec, 0x1f6f4, 0x1f6fc,
  0x1f7e0, 0x1f7eb, 0x1f7f0, 0x1f7f0, 0x1f90c, 0x1f93a, 0x1f93c, 0x1f945, 0x1f947, 0x1f9ff,
  0x1fa70, 0x1fa7c, 0x1fa80, 0x1fa88, 0x1fa90, 0x1fabd, 0x1fabf, 0x1fac5, 0x1face, 0x1fadb,
  0x1fae0, 0x1fae8, 0x1faf0, 0x1faf8,
  0x20000, 0x2fffd, 0x30000, 0x3fffd, // CJK ideographs beyond the BMP
];

/** Whether `point` is East Asian Wide or Fullwidth: a binary search over {@link WIDE}. */
function isWide(point: number): boolean {
  let low = 0;
  let high = WIDE.length / 2 - 1;
  while (low <= high) {
    const mid = (low + high) >> 1;
    if (point < (WIDE[2 * mid] as number)) high = mid - 1;
    else if (point > (WIDE[2 * mid + 1] as number)) low = mid + 1;
    else return true;
  }
  return false;
}

/** The columns one code point takes after `previous` (the code point before it, if any). */
function codePointWidth(c: string, previous: string | undefined): number {
  const point = c.codePointAt(0) as number;
  if (point < 0x7f) return point < 0x20 ? 0 : 1;
  if (ZERO_WIDTH.test(c)) return 0;
  if (previous !== undefined && EMOJI_MODIFIER.test(c) && EMOJI_MODIFIER_BASE.test(previous)) return 0;
  return isWide(point) ? 2 : 1;
}

/**
 * The columns `text` takes on a terminal, for laying out tables: two for each
 * East Asian Wide or Fullwidth code point (CJK, Hangul syllables, fullwidth
 * forms, most emoji), none for combining marks and the other code points of
 * {@link ZERO_WIDTH}, one for everything else. Not `text.length`, which counts
 * UTF-16 code units: `"漢字"` is 2 long and 4 wide, `"e\u0301"` 2 long and 1 wide.
 */
export function displayWidth(text: string): number {
  // Most cells (ids, verdicts, timestamps, ASCII names) are printable ASCII: one column each.
  if (ASCII.test(text)) return text.length;
  let width = 0;
  let previous: string | undefined;
  for (const c of text) {
    width += codePointWidth(c, previous);
    previous = c;
  }
  return width;
}

/** The columns `c` takes once {@link printable} has printed it. */
function printedWidth(c: string, previous: string | undefined): number {
  return ESCAPED_ONE.test(c) ? escapeWidth(c) : codePointWidth(c, previous);
}

/**
 * `text` cut to at most `max` columns as {@link printable} will print it
 * (each code point it escapes counted as its escape, and never cut in two:
 * a look-alike letter too, as {@link lookAlikes} finds it in the whole text,
 * which the cut text holds no more of), the cut marked with an ellipsis (one
 * column), whole code points kept (a surrogate pair is never split) together
 * with the marks that combine with the last one kept.
 */
export function clipToWidth(text: string, max: number): string {
  const room = Math.max(0, max - 1);
  const alike = lookAlikes(text);
  let width = 0;
  let kept = "";
  let offset = 0;
  let previous: string | undefined;
  for (const c of text) {
    width += alike.has(offset) ? escapeWidth(c) : printedWidth(c, previous);
    offset += c.length;
    previous = c;
    if (width > max) return `${kept}…`;
    // Widths only grow: once a code point no longer fits beside the ellipsis, none after it does.
    if (width <= room) kept += c;
  }
  return text;
}

/** `text` followed by spaces up to `width` columns. */
export function padToWidth(text: string, width: number): string {
  return text + " ".repeat(Math.max(0, width - displayWidth(text)));
}
