import { CancelledError } from "./errors.js";

/** The error a cancelled call or run rejects with, carrying the signal's reason. */
export function cancelledBy(signal: AbortSignal, message = "the run was cancelled"): CancelledError {
  return new CancelledError(message, { cause: signal.reason });
}

/** What {@link Cancel.race} gives when the cancel came first. */
export const CANCELLED: unique symbol = Symbol("cancelled");

/**
 * How a call (or a run) learns that it is cancelled, and the one place every
 * wait races that. `signal` is what hooks, the resolver, middleware and the
 * tool receive.
 *
 * - `Cancel.listening(signal)`: a caller's signal; one abort listener,
 *   removed by `dispose`.
 * - `Cancel.owned()`: a run's own controller, aborted only through
 *   {@link Cancel.abort}, so no listener is needed. `abortable: false` says
 *   nothing will ever call it (a run without a caller signal whose calls run
 *   one at a time): its waits are then plain awaits.
 *
 * Work that settles after the cancel is absorbed (a late rejection never
 * surfaces as unhandled).
 */
export class Cancel {
  readonly signal: AbortSignal;
  readonly #controller: AbortController | undefined;
  readonly #abortable: boolean;
  #fire: (() => void) | undefined;
  #cancelled: Promise<typeof CANCELLED> | undefined;
  #onAbort: (() => void) | undefined;

  private constructor(signal: AbortSignal, controller: AbortController | undefined, abortable: boolean) {
    this.signal = signal;
    this.#controller = controller;
    this.#abortable = abortable;
  }

  /** Follows `signal`, which someone else aborts. */
  static listening(signal: AbortSignal): Cancel {
    const cancel = new Cancel(signal, undefined, true);
    if (!signal.aborted) {
      cancel.#onAbort = () => cancel.#fire?.();
      signal.addEventListener("abort", cancel.#onAbort, { once: true });
    }
    return cancel;
  }

  /** A signal of its own, aborted only by {@link Cancel.abort}. */
  static owned(abortable: boolean): Cancel {
    const controller = new AbortController();
    return new Cancel(controller.signal, controller, abortable);
  }

  get aborted(): boolean {
    return this.signal.aborted;
  }

  /** Aborts an owned signal with `reason`, ending every wait on it. */
  abort(reason: unknown): void {
    this.#controller?.abort(reason);
    this.#fire?.();
  }

  /** `work`'s value, or {@link CANCELLED} if the cancel comes first. */
  race<T>(work: Promise<T>): Promise<T | typeof CANCELLED> {
    if (!this.#abortable) return work;
    if (this.aborted) {
      work.catch(() => undefined);
      return Promise.resolve(CANCELLED);
    }
    this.#cancelled ??= new Promise((resolve) => {
      this.#fire = () => resolve(CANCELLED);
    });
    const cancelled = this.#cancelled;
    return new Promise((resolve, reject) => {
      work.then(resolve, reject);
      void cancelled.then(resolve);
    });
  }

  dispose(): void {
    if (this.#onAbort !== undefined) this.signal.removeEventListener("abort", this.#onAbort);
  }
}
