import { InvalidCallPromptOptionsError } from "./errors.js";

/** A path into a call's arguments: object keys and array indexes from the top. */
export type ArgsPath = readonly (string | number)[];

/**
 * Decides what a person is shown for one value of a call's arguments: return
 * `value` itself to show it (objects and arrays are then walked further), or
 * anything else to show that instead (`"[redacted]"`).
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
   * prompt says how much was left out.
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
 * Characters that render as nothing or reorder the text around them (bidi
 * controls, zero-width characters, line separators): shown as `\uXXXX` so an
 * argument cannot make a person read something other than what runs.
 */
const INVISIBLE =
  // eslint-disable-next-line no-misleading-character-class -- every member is one code point, matched on its own
  /[\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\u3164\ufeff\uffa0]/g;

function visible(text: string): string {
  return text.replace(INVISIBLE, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** A server- or model-supplied name or title, quoted and bounded, for one line of a prompt. */
export function quoteForPrompt(text: string, max = 200): string {
  const shown = text.length > max ? `${cut(text, max)}…` : text;
  return visible(JSON.stringify(shown));
}

/** The first `max` UTF-16 units of `text`, never ending inside a surrogate pair. */
function cut(text: string, max: number): string {
  const code = text.charCodeAt(max - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

function redacted(value: unknown, redact: Redactor, path: (string | number)[]): unknown {
  const shown = redact(path, value);
  if (shown !== value || typeof value !== "object" || value === null) return shown;
  if (Array.isArray(value)) return value.map((item, index) => redacted(item, redact, [...path, index]));
  // No prototype: an argument named `__proto__` stays a key and is shown like any other.
  const out = Object.create(null) as Record<string, unknown>;
  for (const [key, item] of Object.entries(value)) out[key] = redacted(item, redact, [...path, key]);
  return out;
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

/**
 * The prompt a person reads for one tool call: it names the tool (and its
 * title), then shows the arguments as indented JSON, with secrets redacted,
 * invisible and bidi characters escaped, and cut at `maxArgsChars`.
 *
 * An ask carries only the digest of the arguments, so the prompt is all a
 * person sees of them: build it from the same arguments the call runs with
 * (a hook's `call.input`).
 *
 * @throws {InvalidCallPromptOptionsError} when `maxArgsChars` is not a positive integer.
 * @throws whatever `redact` throws (inside a hook, that denies the call).
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
  const { redact = redactSecretKeys, maxArgsChars = 2000, notes = [] } = options;
  const problem = maxArgsCharsProblem(maxArgsChars);
  if (problem !== undefined) throw new InvalidCallPromptOptionsError("options.maxArgsChars", problem);
  const title =
    typeof tool.title === "string" && tool.title !== "" && tool.title !== tool.name
      ? ` (${quoteForPrompt(tool.title)})`
      : "";
  const shown = redact === false ? input : redacted(input, redact, []);
  let args = visible(JSON.stringify(shown, null, 2) ?? "(no arguments)");
  if (args.length > maxArgsChars) {
    const kept = cut(args, maxArgsChars);
    args = `${kept}\n… ${args.length - kept.length} more characters not shown`;
  }
  return [`Allow the tool ${quoteForPrompt(tool.name)}${title} to run?`, ...notes, "Arguments:", args].join("\n");
}
