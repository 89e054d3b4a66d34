/**
 * The characters that a name, an id or any other untrusted text must never show raw, because
 * they render as nothing, reorder the text around them or stand in for another character:
 * controls (C0, DEL, C1), format characters (bidi embeddings, overrides, isolates and marks,
 * zero-width spaces and joiners, the byte-order mark, tags), private-use, unassigned and
 * surrogate code points (`\p{C}`), every separator but the plain space (no-break and other
 * spaces, line and paragraph separators: `\p{Z}`), and every other default-ignorable code point
 * (variation selectors, Hangul fillers, the combining grapheme joiner). A name holding U+202E
 * reads backwards, one holding U+200B reads as the name without it. The CLI escapes the same
 * set (`printable`); the approval console and the link pages mark each of these characters but
 * private-use and unassigned ones and the spaces, which they show as they are.
 */
export const HIDDEN = String.raw`(?! )[\p{C}\p{Z}\p{Default_Ignorable_Code_Point}]`;

const HIDDEN_ANY = new RegExp(HIDDEN, "u");
const HIDDEN_ALL = new RegExp(HIDDEN, "gu");

/** True when `text` holds a character of {@link HIDDEN}. */
export function holdsHidden(text: string): boolean {
  return HIDDEN_ANY.test(text);
}

/** `char` as `\uXXXX` escapes, one for each of its UTF-16 units (a surrogate pair of them beyond the BMP). */
function escaped(char: string): string {
  let out = "";
  for (let i = 0; i < char.length; i++) out += `\\u${char.charCodeAt(i).toString(16).padStart(4, "0")}`;
  return out;
}

/**
 * `text` with every character of {@link HIDDEN} escaped as `\u202e`. In JSON text, where such a
 * character can only stand inside a string, the result still parses to the same value.
 */
export function escapeHidden(text: string): string {
  return text.replace(HIDDEN_ALL, escaped);
}

/**
 * `text` in double quotes and JSON's escapes, with every character of {@link HIDDEN} that JSON
 * leaves as it is (a bidi control, a zero-width character, U+2028, a C1 control, a no-break
 * space) escaped too, as `\u202e`: `"rm\u202e"`. It still parses (`JSON.parse`) to `text`,
 * and it never holds a character that does not show as itself, so a name can neither write a
 * line of its own, nor end its quotes early, nor read as another name. JSON already escapes a
 * lone surrogate (`\ud800`).
 */
export function shownText(text: string): string {
  return escapeHidden(JSON.stringify(text));
}
