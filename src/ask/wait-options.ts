import { abortReason } from "../abort-signal.js";
import { describeError } from "../errors.js";
import { everyKey, optionsProblem } from "../unknown-option.js";
import type { NextOptions } from "./approver.js";
import { InvalidApproverOptionsError } from "./errors.js";
import { SHA256, type AnswerOptions } from "./types.js";
import { shownText } from "../shown.js";

/** The one option of `next()`, `ended()` and `caughtUp()`, and that of `resolve()`. */
const WAIT_OPTIONS = everyKey<NextOptions>()(["signal"]);
const ANSWER_OPTIONS = everyKey<AnswerOptions>()(["askDigest"]);

/**
 * The option `known` of `options`, refused with an {@link InvalidApproverOptionsError} naming
 * `options` unless they are an object of it ({@link optionsProblem}) or `undefined`: ignored, a
 * misspelt `askDigest` would answer without the check it was meant to make, and a misspelt `signal`
 * would leave the call waiting, deaf to what was meant to stop it.
 */
function theOption(
  method: "next" | "ended" | "caughtUp" | "resolve",
  options: unknown,
  known: typeof WAIT_OPTIONS | typeof ANSWER_OPTIONS,
): unknown {
  if (options === undefined) return undefined;
  const [option] = known;
  const instead = option === "signal" ? "give it as { signal }" : `${method}() takes { ${option} }`;
  const wrong = optionsProblem(options, known, { shape: "an object or undefined", signal: instead });
  if (wrong !== undefined) {
    const problem = wrong.key === undefined ? wrong.problem : `holds an ${wrong.problem}`;
    throw new InvalidApproverOptionsError(
      method,
      "options",
      problem,
      "cause" in wrong ? { cause: wrong.cause } : undefined,
    );
  }
  try {
    return (options as Record<string, unknown>)[option];
  } catch (error) {
    throw new InvalidApproverOptionsError(method, "options", `cannot be read: ${describeError(error)}`, {
      cause: error,
    });
  }
}

/** Whether `options` (checked by {@link theOption}) has `key` among its keys, whatever its value. */
function givesKey(method: "resolve", options: unknown, key: string): boolean {
  if (options === undefined) return false;
  try {
    return Object.keys(options as object).includes(key);
  } catch (error) {
    throw new InvalidApproverOptionsError(method, "options", `cannot be read: ${describeError(error)}`, {
      cause: error,
    });
  }
}

/**
 * The `signal` of an approver's `next()` or `ended()` options argument (an
 * {@link Approver}'s or a `PostgresApprover`'s) from an untyped caller,
 * checked before anything waits on it.
 *
 * @throws {InvalidApproverOptionsError} naming the argument at fault.
 */
export function waitSignal(method: "next" | "ended" | "caughtUp", options: unknown): AbortSignal | undefined {
  const signal = theOption(method, options, WAIT_OPTIONS);
  if (signal === undefined) return undefined;
  try {
    // `instanceof` alone passes an object that merely inherits from AbortSignal; reading `aborted` does not.
    if (signal instanceof AbortSignal && typeof signal.aborted === "boolean") return signal;
  } catch (error) {
    throw new InvalidApproverOptionsError(
      method,
      "options.signal",
      "must be an AbortSignal; its `aborted` could not be read",
      {
        cause: error,
      },
    );
  }
  throw new InvalidApproverOptionsError(
    method,
    "options.signal",
    `must be an AbortSignal or undefined, got ${signal === null ? "null" : typeof signal}`,
  );
}

/**
 * Listens for the abort of the signal a waiting `next()` or `ended()` was
 * given, before the call registers its wait.
 *
 * @throws {InvalidApproverOptionsError} naming `options.signal` when the
 *   signal cannot be listened to (its `addEventListener` throws; `cause`:
 *   what it threw): the call must then reject and leave nothing waiting.
 */
export function listenWhileWaiting(
  method: "next" | "ended" | "caughtUp",
  signal: AbortSignal | undefined,
  onAbort: () => void,
): void {
  try {
    signal?.addEventListener("abort", onAbort, { once: true });
  } catch (error) {
    throw new InvalidApproverOptionsError(method, "options.signal", "cannot be listened to", { cause: error });
  }
}

/**
 * The `askDigest` of an approver's `resolve()` options argument from an
 * untyped caller: `undefined` when the options leave it out.
 *
 * @throws {InvalidApproverOptionsError} naming the argument at fault: options
 *   that are not an object, or a digest that is not 64 lowercase hex digits
 *   (no ask has it, so the answer could only be refused, and silently), or
 *   `undefined` given as the digest (one read from a request that carried
 *   none): the caller asked for the check, and the answer must not go out
 *   without it.
 */
export function answerDigest(options: unknown): string | undefined {
  const digest = theOption("resolve", options, ANSWER_OPTIONS);
  if (digest === undefined && !givesKey("resolve", options, "askDigest")) return undefined;
  if (typeof digest === "string" && SHA256.test(digest)) return digest;
  throw new InvalidApproverOptionsError(
    "resolve",
    "options.askDigest",
    `must be askDigest(ask), 64 lowercase hex digits, got ${typeof digest === "string" ? shownText(digest.slice(0, 80)) : digest === null ? "null" : typeof digest}${digest === undefined ? " (leave the key out to answer without the check)" : ""}`,
  );
}

/**
 * What a waiting `next()` or `ended()` rejects with once `signal` aborted:
 * its reason, or, when that cannot be read (a getter that throws), an
 * {@link InvalidApproverOptionsError} naming `options.signal`, so the call
 * still settles and nothing is thrown from its abort listener.
 */
export function waitReason(method: "next" | "ended" | "caughtUp", signal: AbortSignal | undefined): unknown {
  if (signal === undefined) return undefined;
  return abortReason(
    signal,
    (cause) =>
      new InvalidApproverOptionsError(method, "options.signal", "aborted, and its reason could not be read", { cause }),
  );
}
