import { AskCallbackError, InvalidAskCallbackError, InvalidAskResolutionError } from "./errors.js";
import { waitEnded } from "./park-signal.js";
import { parseResolution } from "./resolution.js";
import type { AskResolution, AskResolver, PendingAsk, ResolveOptions } from "./types.js";

/**
 * The callback a {@link SyncAskResolver} consults: `true` approves, `false`
 * denies, or return a full {@link AskResolution} (to give a reason or ask the
 * engine to remember the answer).
 */
export type SyncAskCallback = (ask: PendingAsk) => boolean | AskResolution;

/**
 * An {@link AskResolver} that answers every ask at once from a synchronous
 * policy function, for tests, scripts and fixed rules.
 *
 * Fail-closed: if the callback throws, the promise rejects with an
 * {@link AskCallbackError} (the thrown value as `cause`); if it returns
 * anything but `true`, `false` or a valid resolution (a Promise included), it
 * rejects with an {@link InvalidAskResolutionError}. The engine treats a
 * rejection as a denial; rejecting rather than resolving `deny` keeps a broken
 * policy distinguishable from a deliberate "no". If the signal is already
 * aborted, the callback is not consulted and the promise rejects with
 * `signal.reason`.
 *
 * @example
 * ```ts
 * const resolver = new SyncAskResolver((ask) =>
 *   ask.tool === "read_file" ? true : { type: "deny", reason: "read-only session" },
 * );
 * ```
 */
export class SyncAskResolver implements AskResolver {
  readonly #decide: SyncAskCallback;

  /**
   * @param decide - the policy; called once per ask, synchronously.
   * @throws {InvalidAskCallbackError} if `decide` is not a function.
   */
  constructor(decide: SyncAskCallback) {
    if (typeof decide !== "function") throw new InvalidAskCallbackError(decide);
    this.#decide = decide;
  }

  /** Answers `ask` from the callback. See the class notes for failures. */
  resolve(ask: PendingAsk, options: ResolveOptions): Promise<AskResolution> {
    try {
      return this.#resolve(ask, options);
    } catch (error) {
      // Only a hostile ask or options object (a proxy, a throwing getter) gets here: reject, never throw.
      return Promise.reject(new AskCallbackError(field(ask, "id"), field(ask, "tool"), { cause: error }));
    }
  }

  #resolve(ask: PendingAsk, options: ResolveOptions): Promise<AskResolution> {
    // A park's signal is made only when read: asking whether the park ended does not make it.
    if (waitEnded(options)) return Promise.reject(options.signal.reason);
    let answer: unknown;
    try {
      answer = this.#decide(ask);
    } catch (error) {
      return Promise.reject(new AskCallbackError(field(ask, "id"), field(ask, "tool"), { cause: error }));
    }
    if (answer === true) return Promise.resolve({ type: "approve" });
    if (answer === false) return Promise.resolve({ type: "deny" });
    try {
      return Promise.resolve(parseResolution(field(ask, "id"), answer));
    } catch (error) {
      return Promise.reject(
        error instanceof InvalidAskResolutionError
          ? error
          : new AskCallbackError(field(ask, "id"), field(ask, "tool"), { cause: error }),
      );
    }
  }
}

/** Reads a field of an ask for an error message, whatever the ask turns out to be. */
function field(ask: unknown, name: "id" | "tool"): string {
  try {
    return String((ask as Record<string, unknown> | null | undefined)?.[name]);
  } catch {
    return "<unreadable>";
  }
}
