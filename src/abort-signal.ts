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
