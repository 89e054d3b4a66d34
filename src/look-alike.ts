/**
 * A letter of a script whose letters pass for Latin ones (a Cyrillic "а", a
 * Greek "ο"), in a word that also holds Latin letters, makes the word read as
 * the all-Latin one it copies: "reаd_file" as the read_file a person trusts,
 * "pаypal.com" as the site they know. The link pages mark each such letter as
 * they mark a hidden character, and the CLI escapes it, by the rule the
 * console's script applies (`lookAlikes` in console.js, which the browser
 * loads on its own: a test keeps its copy of these patterns the same). A word
 * all of one script is text, not a disguise: it keeps its letters.
 */
const WORD = /[\p{L}\p{M}\p{N}_]+/gu;
const LATIN = /\p{Script=Latin}/u;
const SCRIPTS = String.raw`[\p{Script=Cyrillic}\p{Script=Greek}\p{Script=Armenian}\p{Script=Cherokee}\p{Script=Coptic}\p{Script=Lisu}]`;
const LOOK_ALIKE = new RegExp(SCRIPTS, "u");

/**
 * Where in `text` (UTF-16 offsets) a letter passes for a Latin one: each
 * letter of {@link SCRIPTS} in a word that also holds a Latin letter. Words
 * are runs of letters, marks, digits and underscores, as in the console.
 */
export function lookAlikes(text: string): ReadonlySet<number> {
  const at = new Set<number>();
  if (!LOOK_ALIKE.test(text)) return at;
  for (const match of text.matchAll(WORD)) {
    const word = match[0];
    if (!LATIN.test(word) || !LOOK_ALIKE.test(word)) continue;
    let offset = match.index;
    for (const char of word) {
      if (LOOK_ALIKE.test(char)) at.add(offset);
      offset += char.length;
    }
  }
  return at;
}

/**
 * `text` cut into stretches: each look-alike letter ({@link lookAlikes}) a
 * stretch of its own, `alike` true, and the text between them, `alike` false.
 */
export function* lookAlikeParts(text: string): Generator<{ readonly text: string; readonly alike: boolean }> {
  let from = 0;
  for (const at of lookAlikes(text)) {
    if (at > from) yield { text: text.slice(from, at), alike: false };
    const letter = String.fromCodePoint(text.codePointAt(at) as number);
    yield { text: letter, alike: true };
    from = at + letter.length;
  }
  if (from < text.length) yield { text: text.slice(from), alike: false };
}
