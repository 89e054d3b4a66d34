import { abortReason, isAbortSignal } from "../abort-signal.js";
import { meantOption, shownKey } from "../unknown-option.js";
import { InvalidApproverOptionsError } from "./errors.js";
import { SHA256 } from "./types.js";
import { shownText } from "../shown.js";

/**
 * The `signal` of an approver's `next()` or `ended()` options argument (an
 * {@link Approver}'s or a `PostgresApprover`'s) from an untyped caller,
 * checked before anything waits on it.
 *
 * @throws {InvalidApproverOptionsError} naming the argument at fault.
 */
export function waitSignal(method: "next" | "ended" | "caughtUp", options: unknown): AbortSignal | undefined {
  if (options === undefined) return undefined;
  if (typeof options !== "object" || options === null) {
    throw new InvalidApproverOptionsError(
      method,
      "options",
      `must be an object or undefined, got ${options === null ? "null" : typeof options}`,
    );
  }
  let signal: unknown;
  try {
    refuseUnknown(method, options, "signal");
    signal = (options as { signal?: unknown }).signal;
  } catch (error) {
    if (error instanceof InvalidApproverOptionsError) throw error;
    throw new InvalidApproverOptionsError(method, "options", "could not be read", { cause: error });
  }
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
 * Refuses a key of `options` other than `known`, the one option `method` takes: ignored, a
 * misspelt `askDigest` would answer without the check it was meant to make, and a misspelt
 * `signal` would leave the call waiting, deaf to what was meant to stop it.
 *
 * @throws {InvalidApproverOptionsError} naming `options` and the key; whatever reading the keys
 *   throws (a proxy's trap), as it is.
 */
function refuseUnknown(method: "next" | "ended" | "caughtUp" | "resolve", options: object, known: string): void {
  // A signal handed in place of its options has no keys of its own: read as options, it is none, its abort unheard.
  if (isAbortSignal(options)) {
    const instead = known === "signal" ? "pass it as { signal }" : `${method}() takes { ${known} }`;
    throw new InvalidApproverOptionsError(method, "options", `is an AbortSignal: ${instead}`);
  }
  for (const key of Object.keys(options)) {
    if (key === known) continue;
    const meant = meantOption(key, [known]) === undefined ? `it takes only ${known}` : `did you mean ${known}?`;
    throw new InvalidApproverOptionsError(
      method,
      "options",
      `holds ${shownKey(key)}, which ${method}() does not take (${meant})`,
    );
  }
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
 * untyped caller: `undefined` when none is given.
 *
 * @throws {InvalidApproverOptionsError} naming the argument at fault: options
 *   that are not an object, or a digest that is not 64 lowercase hex digits
 *   (no ask has it, so the answer could only be refused, and silently).
 */
export function answerDigest(options: unknown): string | undefined {
  if (options === undefined) return undefined;
  if (typeof options !== "object" || options === null) {
    throw new InvalidApproverOptionsError(
      "resolve",
      "options",
      `must be an object or undefined, got ${options === null ? "null" : typeof options}`,
    );
  }
  let digest: unknown;
  try {
    refuseUnknown("resolve", options, "askDigest");
    digest = (options as { askDigest?: unknown }).askDigest;
  } catch (error) {
    if (error instanceof InvalidApproverOptionsError) throw error;
    throw new InvalidApproverOptionsError("resolve", "options", "could not be read", { cause: error });
  }
  if (digest === undefined) return undefined;
  if (typeof digest === "string" && SHA256.test(digest)) return digest;
  throw new InvalidApproverOptionsError(
    "resolve",
    "options.askDigest",
    `must be askDigest(ask), 64 lowercase hex digits, got ${typeof digest === "string" ? shownText(digest.slice(0, 80)) : digest === null ? "null" : typeof digest}`,
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
