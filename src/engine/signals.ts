import { CancelledError } from "./errors.js";

/** The error a cancelled call or run rejects with, carrying the signal's reason. */
export function cancelledBy(signal: AbortSignal, message = "the run was cancelled"): CancelledError {
  return new CancelledError(message, { cause: signal.reason });
}

/** What {@link Cancel.race} gives when the signal aborted first. */
export const CANCELLED: unique symbol = Symbol("cancelled");

/**
 * One call's (or one run's) view of its `AbortSignal`: one abort listener,
 * added at the start and removed by {@link Cancel.dispose}, and every wait
 * races it. Work that settles after the cancel is absorbed (a late rejection
 * never surfaces as unhandled).
 */
export class Cancel {
  readonly signal: AbortSignal;
  readonly #aborted: Promise<typeof CANCELLED>;
  readonly #onAbort: () => void;

  constructor(signal: AbortSignal) {
    this.signal = signal;
    let fire!: () => void;
    this.#aborted = new Promise((resolve) => {
      fire = () => resolve(CANCELLED);
    });
    this.#onAbort = fire;
    if (signal.aborted) fire();
    else signal.addEventListener("abort", fire, { once: true });
  }

  get aborted(): boolean {
    return this.signal.aborted;
  }

  /** `work`'s value, or {@link CANCELLED} if the signal aborts first. */
  race<T>(work: T | PromiseLike<T>): Promise<T | typeof CANCELLED> {
    return Promise.race([work, this.#aborted]);
  }

  dispose(): void {
    this.signal.removeEventListener("abort", this.#onAbort);
  }
}
