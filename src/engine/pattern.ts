import { RE2JS } from "re2js";
import { shownText } from "../shown.js";

/**
 * The regular expressions of a schema (`pattern`, `patternProperties` keys)
 * come from whoever wrote the schema, an MCP server among them, and run on
 * arguments a model wrote. A backtracking engine (JavaScript's `RegExp`)
 * takes exponential time on some of them (`^(a+)+$` on `"aaaa…!"`), with the
 * whole process stopped inside one `test`. They run instead on RE2JS, which
 * matches in time linear in the input.
 *
 * JSON Schema gives `pattern` ECMAScript's syntax and meaning; RE2's differ
 * (its `\s` has no `\v`, its `.` matches `\r`, it reads `\u` not at all). A
 * pattern is therefore parsed as ECMAScript (with the `u` flag, as Ajv
 * compiles it) and written out in RE2's syntax with ECMAScript's meaning,
 * every escape and class spelt out. What RE2 cannot run in linear time
 * (lookahead, lookbehind, backreferences) or this translation does not spell
 * out exactly runs on `RegExp` as before, never matched differently: common
 * schemas hold such patterns (zod writes lookaheads for `z.hostname()`,
 * `z.iso.duration()`, `z.emoji()`), and refusing them would make every call
 * of their tools fail. Such a pattern can still backtrack.
 */

/** A pattern RE2 cannot run as ECMAScript reads it: `reason` says which part of it. */
export class UnsupportedPatternError extends TypeError {
  readonly pattern: string;
  constructor(pattern: string, reason: string) {
    super(`the pattern ${shownText(pattern)} cannot be matched in linear time: ${reason}`);
    this.name = "UnsupportedPatternError";
    this.pattern = pattern;
  }
}

type Ranges = readonly (readonly [number, number])[];

const MAX = 0x10ffff;
const DIGIT: Ranges = [[0x30, 0x39]];
const WORD: Ranges = [
  [0x30, 0x39],
  [0x41, 0x5a],
  [0x5f, 0x5f],
  [0x61, 0x7a],
];
// ECMAScript's WhiteSpace and LineTerminator (`\s`), as of ECMAScript 2015 and still.
const SPACE: Ranges = [
  [0x09, 0x0d],
  [0x20, 0x20],
  [0xa0, 0xa0],
  [0x1680, 0x1680],
  [0x2000, 0x200a],
  [0x2028, 0x2029],
  [0x202f, 0x202f],
  [0x205f, 0x205f],
  [0x3000, 0x3000],
  [0xfeff, 0xfeff],
];
const LINE_TERMINATORS: Ranges = [
  [0x0a, 0x0a],
  [0x0d, 0x0d],
  [0x2028, 0x2029],
];

function complement(ranges: Ranges): Ranges {
  const out: [number, number][] = [];
  let next = 0;
  for (const [low, high] of ranges) {
    if (low > next) out.push([next, low - 1]);
    next = high + 1;
  }
  if (next <= MAX) out.push([next, MAX]);
  return out;
}

const char = (code: number): string =>
  /^[0-9A-Za-z_]$/.test(String.fromCodePoint(code)) ? String.fromCodePoint(code) : `\\x{${code.toString(16)}}`;
const rangesText = (ranges: Ranges): string =>
  ranges.map(([low, high]) => (low === high ? char(low) : `${char(low)}-${char(high)}`)).join("");

const CLASS_ESCAPES: Readonly<Record<string, Ranges>> = {
  d: DIGIT,
  D: complement(DIGIT),
  w: WORD,
  W: complement(WORD),
  s: SPACE,
  S: complement(SPACE),
};

const CONTROL_ESCAPES: Readonly<Record<string, number>> = { t: 9, n: 10, v: 11, f: 12, r: 13 };

// The General_Category values by their short names: the one spelling both ECMAScript and RE2 give
// the same meaning (up to the Unicode version each knows).
const CATEGORY = /^(?:L[ultmo]?|M[nce]?|N[dlo]?|P[cdseifo]?|S[mcko]?|Z[slp]?|C[cfso]?)$/;
// Script names: ECMAScript's `Script=Greek` is RE2's `Greek`; both take the long names.
const SCRIPT = /^(?:Script|sc)=([A-Z][A-Za-z_]*)$/;

/** Translates an ECMAScript pattern (already known valid with the `u` flag) to RE2 syntax with the same meaning. */
function translate(pattern: string): string {
  const refuse = (reason: string): never => {
    throw new UnsupportedPatternError(pattern, reason);
  };
  let at = 0;
  let out = "";
  const peek = (offset = 0): string => pattern[at + offset] ?? "";

  /** The escape after a backslash at `at` (the backslash consumed): a code point, or a class's text. */
  const escape = (inClass: boolean): { code: number } | { text: string; ranges?: Ranges } => {
    const letter = peek();
    at += 1;
    const ranges = CLASS_ESCAPES[letter];
    if (ranges !== undefined) return { text: inClass ? rangesText(ranges) : `[${rangesText(ranges)}]`, ranges };
    const control = CONTROL_ESCAPES[letter];
    if (control !== undefined) return { code: control };
    switch (letter) {
      case "p":
      case "P": {
        const end = pattern.indexOf("}", at);
        const name = pattern.slice(at + 1, end);
        at = end + 1;
        const script = SCRIPT.exec(name)?.[1];
        const bare = name.replace(/^(?:General_Category|gc)=/, "");
        if (script === undefined && !CATEGORY.test(bare)) {
          return refuse(`\\${letter}{${name}} (only General_Category short names such as L or Nd, and Script=…)`);
        }
        return { text: `\\${letter}{${script ?? bare}}` };
      }
      case "c":
        at += 1;
        return { code: (pattern.codePointAt(at - 1) ?? 0) % 32 };
      case "0":
        return { code: 0 };
      case "x":
        at += 2;
        return { code: Number.parseInt(pattern.slice(at - 2, at), 16) };
      case "u": {
        if (peek() === "{") {
          const end = pattern.indexOf("}", at);
          const code = Number.parseInt(pattern.slice(at + 1, end), 16);
          at = end + 1;
          return { code };
        }
        const code = Number.parseInt(pattern.slice(at, at + 4), 16);
        at += 4;
        // With the `u` flag an escaped surrogate pair is one code point.
        if (code >= 0xd800 && code <= 0xdbff && peek() === "\\" && peek(1) === "u" && peek(2) !== "{") {
          const low = Number.parseInt(pattern.slice(at + 2, at + 6), 16);
          if (low >= 0xdc00 && low <= 0xdfff) {
            at += 6;
            return { code: 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00) };
          }
        }
        return { code };
      }
      case "b":
        // Only inside a class: a backspace. Outside, `\b` is an assertion, handled before.
        return { code: 8 };
      case "k":
        return refuse("a backreference (\\k<…>)");
      default:
        if (/[1-9]/.test(letter)) return refuse(`a backreference (\\${letter})`);
        // An identity escape: `u` allows only syntax characters, `/` and (in a class) `-`.
        return { code: letter.codePointAt(0) ?? 0 };
    }
  };

  const literal = (code: number): string => {
    if (code >= 0xd800 && code <= 0xdfff) return refuse("a lone surrogate");
    return char(code);
  };

  const characterClass = (): void => {
    at += 1;
    let negated = false;
    if (peek() === "^") {
      negated = true;
      at += 1;
    }
    let body = "";
    while (peek() !== "]") {
      const atom = (): { code: number } | { text: string } => {
        if (peek() === "\\") {
          at += 1;
          return escape(true);
        }
        const code = pattern.codePointAt(at) ?? 0;
        at += code > 0xffff ? 2 : 1;
        return { code };
      };
      const first = atom();
      if ("code" in first && peek() === "-" && peek(1) !== "]" && peek(1) !== "") {
        at += 1;
        const last = atom();
        // With the `u` flag a class escape cannot end a range: the native compile refused it.
        if (!("code" in last)) return refuse("a range ending in a class escape");
        body += `${literal(first.code)}-${literal(last.code)}`;
      } else {
        body += "code" in first ? literal(first.code) : first.text;
      }
    }
    at += 1;
    // RE2 has no empty class: `[]` matches nothing, `[^]` any character.
    if (body === "") out += negated ? `[${rangesText([[0, MAX]])}]` : `[^${rangesText([[0, MAX]])}]`;
    else out += `[${negated ? "^" : ""}${body}]`;
  };

  while (at < pattern.length) {
    const c = peek();
    switch (c) {
      case "\\": {
        // JavaScript tests a word boundary between the halves of a surrogate pair too (`/\B/u`
        // matches "a😀a" at 2), where RE2 tests none: not the same meaning.
        if (peek(1) === "b" || peek(1) === "B") refuse(`a word boundary (\\${peek(1)})`);
        at += 1;
        const escaped = escape(false);
        out += "code" in escaped ? literal(escaped.code) : escaped.text;
        break;
      }
      case "[":
        characterClass();
        break;
      case ".":
        out += `[^${rangesText(LINE_TERMINATORS)}]`;
        at += 1;
        break;
      case "(":
        if (peek(1) !== "?") {
          out += "(?:";
          at += 1;
        } else if (peek(2) === ":") {
          out += "(?:";
          at += 3;
        } else if (peek(2) === "=" || peek(2) === "!") {
          refuse("a lookahead");
        } else if (peek(2) === "<" && (peek(3) === "=" || peek(3) === "!")) {
          refuse("a lookbehind");
        } else if (peek(2) === "<") {
          out += "(?:";
          at = pattern.indexOf(">", at) + 1;
        } else {
          refuse("a group with modifiers");
        }
        break;
      case "{": {
        // A quantifier (with `u` a lone brace is a syntax error): RE2 takes the same text.
        const end = pattern.indexOf("}", at);
        out += pattern.slice(at, end + 1);
        at = end + 1;
        break;
      }
      case "^":
      case "$":
      case "|":
      case ")":
      case "*":
      case "+":
      case "?":
        out += c;
        at += 1;
        break;
      default: {
        const code = pattern.codePointAt(at) ?? 0;
        at += code > 0xffff ? 2 : 1;
        out += literal(code);
      }
    }
  }
  return out;
}

/**
 * The pattern in RE2's syntax with ECMAScript's meaning, compiled; RE2 runs
 * it in time linear in the input.
 *
 * @throws {UnsupportedPatternError} when it uses what RE2 cannot run so.
 */
export function re2Pattern(pattern: string): ReturnType<typeof RE2JS.compile> {
  const translated = translate(pattern);
  try {
    return RE2JS.compile(translated);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new UnsupportedPatternError(pattern, reason);
  }
}

/**
 * Compiles a schema's pattern for Ajv's `code.regExp`: ECMAScript syntax and
 * meaning, matched in linear time by RE2 where RE2 can run it (see
 * {@link re2Pattern}), else by `RegExp`.
 *
 * @throws {SyntaxError} when the pattern is not an ECMAScript regular expression (with `u`).
 */
export function linearRegExp(pattern: string, flags: string): { test(input: string): boolean; toString(): string } {
  // The native parser is the reference for ECMAScript syntax; the pattern is compiled, never run here.
  const native = new RegExp(pattern, flags);
  // Ajv passes "u" (its unicodeRegExp default, which validation.ts keeps); the translation reads `u` syntax.
  let compiled: ReturnType<typeof RE2JS.compile> | undefined;
  if (flags === "u") {
    try {
      compiled = re2Pattern(pattern);
    } catch (error) {
      if (!(error instanceof UnsupportedPatternError)) throw error;
    }
  }
  // Ajv files a compiled pattern under its `toString()`: each pattern needs its own.
  const key = `linearRegExp(${JSON.stringify(pattern)})`;
  const test = compiled === undefined ? (input: string) => native.test(input) : (input: string) => compiled.test(input);
  return { test, toString: () => key };
}
linearRegExp.code = "loopctl linearRegExp";
