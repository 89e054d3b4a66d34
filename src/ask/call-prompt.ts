import { escapeHidden, shownText } from "../shown.js";
import { InvalidCallPromptOptionsError } from "./errors.js";
import { textHead } from "../text-head.js";
import { everyKey, optionsProblem } from "../unknown-option.js";

/** A path into a call's arguments: object keys and array indexes from the top. */
export type ArgsPath = readonly (string | number)[];

/**
 * Decides what a person is shown for one value of a call's arguments: return
 * `value` itself to show it (objects and arrays are then walked further), or
 * anything else to show that instead (`"[redacted]"`). `path` is one array
 * that changes as the arguments are walked: copy it (`[...path]`) to keep it.
 */
export type Redactor = (path: ArgsPath, value: unknown) => unknown;

/** Options of {@link callPrompt}. */
export interface CallPromptOptions {
  /**
   * Replaces secrets before the arguments are rendered. Only the prompt is
   * redacted: the call runs with its arguments unchanged.
   * @default redactSecretKeys
   */
  readonly redact?: Redactor | false;
  /**
   * The most characters of rendered arguments shown; the rest is cut and the
   * prompt says how many characters were left out. Only what is shown is
   * kept: arguments whose indented JSON would be too long for a string
   * (nested deep, every line indented) are still measured exactly.
   * @default 2000
   */
  readonly maxArgsChars?: number;
  /** Lines shown between the question and the arguments (hints, warnings). */
  readonly notes?: readonly string[];
}

const SECRET_KEY =
  /pass(word|phrase)?|secret|token|api[-_]?key|auth(orization)?|cookie|credential|private[-_]?key|session/i;

/** The text shown instead of a redacted value. */
export const REDACTED = "[redacted]";

/**
 * The default {@link Redactor}: hides the value of every object key that
 * names a secret (`password`, `token`, `apiKey`, `authorization`, `cookie`,
 * `secret`, `credential`, `privateKey`, `session`…).
 */
export function redactSecretKeys(path: ArgsPath, value: unknown): unknown {
  const key = path.at(-1);
  return typeof key === "string" && SECRET_KEY.test(key) ? REDACTED : value;
}

/**
 * JSON text of a key or a value with every character that does not show as itself escaped as
 * `\uXXXX` (a surrogate pair of them beyond the BMP): controls, format characters (zero-width,
 * bidi, tags), every other default-ignorable code point, every separator but the plain space
 * (no-break and other spaces, line and paragraph separators), private-use and unassigned code
 * points ({@link escapeHidden}, the set a tool's name is shown with and the CLI escapes). In JSON
 * text such a character stands only inside a string, so the result still parses to the same
 * value, and an argument cannot make a person (or, with no resolver, the model) read something
 * other than what runs: `rm\u00a0-rf` is not `rm -rf`.
 */
function visible(json: string): string {
  return escapeHidden(json);
}

/** A server- or model-supplied name or title, quoted and bounded, for one line of a prompt. */
export function quoteForPrompt(text: string, max = 200): string {
  const shown = text.length > max ? `${textHead(text, max)}…` : text;
  return shownText(shown);
}

/**
 * Text kept up to a cap and measured beyond it: the arguments of a call can
 * spell far more indented JSON than a string can hold (every line of a value
 * nested a thousand deep starts with two thousand spaces), and all a prompt
 * needs of the rest is its length.
 */
class CappedText {
  readonly #pieces: string[] = [];
  #room: number;
  /** The whole text's length. */
  length = 0;

  constructor(cap: number) {
    this.#room = cap;
  }

  /** The text up to the cap. */
  get shown(): string {
    return this.#pieces.join("");
  }

  add(piece: string): void {
    this.length += piece.length;
    if (this.#room <= 0) return;
    const kept = piece.length <= this.#room ? piece : piece.slice(0, this.#room);
    this.#pieces.push(kept);
    this.#room -= kept.length;
  }

  /** A new line indented by `width` spaces. */
  line(width: number): void {
    this.add("\n");
    this.length += width;
    if (this.#room <= 0) return;
    const kept = Math.min(width, this.#room);
    this.#pieces.push(" ".repeat(kept));
    this.#room -= kept;
  }
}

/** An array or object being written: which child is next, and how many were written. */
interface Frame {
  readonly value: object;
  /** The object's own keys, as `JSON.stringify` lists them; `null` for an array. */
  readonly keys: readonly string[] | null;
  readonly length: number;
  /** Whether its children go through the redactor: not under a value the redactor gave. */
  readonly redacting: boolean;
  index: number;
  written: number;
}

/** A value as `JSON.stringify` writes it, after the redactor; `undefined` when it has no JSON form. */
type Read = { readonly value: unknown; readonly redacting: boolean } | undefined;

/**
 * Writes arguments as `JSON.stringify(value, null, 2)` would (`toJSON`,
 * boxed primitives, members omitted or `null` alike), each value passed
 * through the redactor first, into a {@link CappedText}. It walks with a
 * stack of its own, so no nesting is too deep for it, and reads each value
 * once, so its work follows the size of the arguments, not of their text.
 */
class ArgsWriter {
  readonly #text: CappedText;
  readonly #redact: Redactor | undefined;
  readonly #stack: Frame[] = [];
  /** The containers open, for the cycle check. */
  readonly #open = new Set<object>();
  /**
   * The path of the value being read. One array, changed as the walk goes:
   * a copy per value would cost each value its depth, a billion copies for
   * a million values nested a thousand deep.
   */
  readonly #path: (string | number)[] = [];

  constructor(text: CappedText, redact: Redactor | undefined) {
    this.#text = text;
    this.#redact = redact;
  }

  /** Writes `input`; `false` when it has no JSON form at all (`undefined`, a function). */
  write(input: unknown): boolean {
    const root = this.#read(input, "", this.#redact !== undefined);
    if (root === undefined) return false;
    this.#write(root);
    const stack = this.#stack;
    const text = this.#text;
    while (stack.length > 0) {
      const frame = stack[stack.length - 1] as Frame;
      const depth = stack.length;
      if (frame.index === frame.length) {
        stack.pop();
        this.#open.delete(frame.value);
        if (frame.written === 0) {
          text.add(frame.keys === null ? "[]" : "{}");
        } else {
          text.line(2 * depth - 2);
          text.add(frame.keys === null ? "]" : "}");
        }
        continue;
      }
      const key = frame.keys === null ? frame.index : (frame.keys[frame.index] as string);
      frame.index++;
      this.#path.length = depth - 1;
      this.#path.push(key);
      const child = this.#read((frame.value as Record<string | number, unknown>)[key], key, frame.redacting);
      // An object leaves out a member with no JSON form; an array writes null in its place.
      if (child === undefined && frame.keys !== null) continue;
      text.add(frame.written === 0 ? (frame.keys === null ? "[" : "{") : ",");
      frame.written++;
      text.line(2 * depth);
      if (typeof key === "string") text.add(`${visible(JSON.stringify(key))}: `);
      this.#write(child ?? { value: null, redacting: false });
    }
    return true;
  }

  /** Redacts a value, then reads it as `JSON.stringify` does: `toJSON` called, boxed primitives unboxed. */
  #read(raw: unknown, key: string | number, redacting: boolean): Read {
    let value = raw;
    if (redacting && this.#redact !== undefined) {
      value = this.#redact(this.#path, raw);
      // What the redactor gives is shown as it is, never redacted again.
      if (value !== raw) redacting = false;
    }
    if ((typeof value === "object" && value !== null) || typeof value === "bigint") {
      const toJSON: unknown = (value as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === "function") value = (toJSON as (key: string) => unknown).call(value, String(key));
    }
    if (value instanceof Number) value = Number(value);
    else if (value instanceof String) value = String(value);
    else if (value instanceof Boolean || value instanceof BigInt) value = value.valueOf();
    if (value === undefined || typeof value === "function" || typeof value === "symbol") return undefined;
    return { value, redacting };
  }

  /** Writes a primitive's text, or opens an array or object on the stack. */
  #write({ value, redacting }: NonNullable<Read>): void {
    if (typeof value !== "object" || value === null) {
      // A BigInt throws here, as JSON.stringify throws for it.
      const json = JSON.stringify(value);
      this.#text.add(typeof value === "string" ? visible(json) : json);
      return;
    }
    if (this.#open.has(value)) {
      const path = this.#path
        .map((segment) => `[${typeof segment === "string" ? shownText(segment) : segment}]`)
        .join("");
      throw new TypeError(`callPrompt: the arguments refer back to themselves at $${path}`);
    }
    this.#open.add(value);
    const keys = Array.isArray(value) ? null : Object.keys(value);
    const length = keys === null ? (value as unknown[]).length : keys.length;
    this.#stack.push({ value, keys, length, redacting, index: 0, written: 0 });
  }
}

/**
 * @internal Why `value` cannot be {@link callPrompt}'s `maxArgsChars`, or
 * `undefined` when it can: the adapters that take prompt options check them
 * with this when they are made, so no ask finds them unusable later.
 */
export function maxArgsCharsProblem(value: unknown): string | undefined {
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 1) return undefined;
  return `must be a positive integer, got ${typeof value === "number" ? String(value) : typeof value}`;
}

/** @internal Why `value` cannot be {@link callPrompt}'s `redact`, or `undefined` when it can. */
export function redactProblem(value: unknown): string | undefined {
  return value === undefined || value === false || typeof value === "function"
    ? undefined
    : "must be a function or false";
}

/** The options {@link callPrompt} takes: any other key is refused. */
const OPTIONS = everyKey<CallPromptOptions>()(["redact", "maxArgsChars", "notes"]);

/**
 * `options` as {@link callPrompt} reads them: refused unless an object of its
 * options. Ignored, a misspelt `redact` would leave the default redactor in
 * its place, and what the caller's was meant to hide would be shown.
 */
function promptOptions(options: unknown): CallPromptOptions {
  const wrong = optionsProblem(options, OPTIONS, { shape: "an object { redact?, maxArgsChars?, notes? }" });
  if (wrong === undefined) return options as CallPromptOptions;
  throw new InvalidCallPromptOptionsError(
    "options",
    wrong.key === undefined ? wrong.problem : `holds an ${wrong.problem}`,
  );
}

/**
 * The prompt a person reads for one tool call: it names the tool (and its
 * title), then shows the arguments as indented JSON, with secrets redacted,
 * every character that does not show as itself escaped (invisible, bidi and
 * private-use characters, spaces other than U+0020), and cut at `maxArgsChars`.
 *
 * An ask carries only the digest of the arguments, so the prompt is all a
 * person sees of them: build it from the same arguments the call runs with
 * (a hook's `call.input`).
 *
 * @throws {InvalidCallPromptOptionsError} when `options` is not an object or
 *   holds a key that is not one of its options (`redcat`), `maxArgsChars` is not
 *   a positive integer, `redact` not a function or `false`, or `notes` not an
 *   array of strings.
 * @throws whatever `redact` throws (inside a hook, that denies the call).
 * @throws {TypeError} when the arguments contain themselves, naming where, or
 *   hold a BigInt (as `JSON.stringify` does).
 *
 * @example
 * ```ts
 * const hook: Hook = { preToolUse: (call, { descriptor }) => ({ type: "ask", prompt: callPrompt(descriptor, call.input) }) };
 * ```
 */
export function callPrompt(
  tool: { readonly name: string; readonly title?: string },
  input: unknown,
  options: CallPromptOptions = {},
): string {
  const { redact = redactSecretKeys, maxArgsChars = 2000, notes = [] } = promptOptions(options);
  const problem = maxArgsCharsProblem(maxArgsChars);
  if (problem !== undefined) throw new InvalidCallPromptOptionsError("options.maxArgsChars", problem);
  const redactFault = redactProblem(redact);
  if (redactFault !== undefined) throw new InvalidCallPromptOptionsError("options.redact", redactFault);
  // A string would be spread into one line per character.
  if (!Array.isArray(notes) || !notes.every((note) => typeof note === "string")) {
    throw new InvalidCallPromptOptionsError("options.notes", "must be an array of strings");
  }
  const title =
    typeof tool.title === "string" && tool.title !== "" && tool.title !== tool.name
      ? ` (${quoteForPrompt(tool.title)})`
      : "";
  const text = new CappedText(maxArgsChars);
  if (!new ArgsWriter(text, redact === false ? undefined : redact).write(input)) text.add("(no arguments)");
  let args = text.shown;
  if (text.length > maxArgsChars) {
    const kept = textHead(args, maxArgsChars);
    args = `${kept}\n… ${text.length - kept.length} more characters not shown`;
  }
  return [`Allow the tool ${quoteForPrompt(tool.name)}${title} to run?`, ...notes, "Arguments:", args].join("\n");
}
