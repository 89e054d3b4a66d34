/**
 * An AbortSignal that can be read: `instanceof` alone passes an object that
 * merely inherits from AbortSignal (`Object.create(AbortSignal.prototype)`),
 * whose every read throws; reading `aborted` does not.
 */
export function isAbortSignal(value: unknown): value is AbortSignal {
  try {
    return value instanceof AbortSignal && typeof value.aborted === "boolean";
  } catch {
    return false;
  }
}

/**
 * Takes `onAbort` off `signal`. A signal whose removal throws (a caller's own
 * override) keeps the listener, which its owner must make inert; the throw
 * must not keep a wait from settling, or a call from ending with its outcome.
 */
export function unlisten(signal: AbortSignal | undefined, onAbort: () => void): void {
  try {
    signal?.removeEventListener("abort", onAbort);
  } catch {
    // Nothing to undo, and nobody to tell: the wait it served has settled.
  }
}

/**
 * What `signal` aborted with, for a wait on it to reject with. A signal whose
 * `reason` cannot be read (a getter of the caller's that throws) gives
 * `unreadable(what it threw)` instead: the wait must still settle, with an
 * error that names the signal, and the throw must not escape from an abort
 * listener, where nothing catches it.
 */
export function abortReason(signal: AbortSignal, unreadable: (cause: unknown) => Error): unknown {
  try {
    return signal.reason;
  } catch (error) {
    return unreadable(error);
  }
}
