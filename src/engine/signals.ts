import { setMaxListeners } from "node:events";
import { abortReason, isAbortSignal, unlisten } from "../abort-signal.js";
import { CancelledError, EngineConfigError, describeError } from "./errors.js";

/** What takes a caller's signal, named in an {@link EngineConfigError} about it. */
export type SignalTaker = "Gate.call" | "Agent.run";

/**
 * A caller's `signal` option, checked before anything else is done with it.
 * @throws {EngineConfigError} naming `where` when it is neither `undefined`
 *   nor an `AbortSignal`.
 */
export function callerSignal(where: SignalTaker, value: unknown): AbortSignal | undefined {
  if (value === undefined || isAbortSignal(value)) return value;
  throw new EngineConfigError(where, "signal must be an AbortSignal");
}

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
 * - `Cancel.listening(signal, where)`: follows a caller's signal with one
 *   abort listener on it, until `dispose`. Its own `signal` aborts with the
 *   caller's reason and takes any number of listeners.
 * - `Cancel.owned()`: a call's or a run's own controller, aborted only
 *   through {@link Cancel.abort}, so no listener is needed ({@link followShared}
 *   aborts those that follow a caller's signal): the hooks, resolvers and
 *   tools of a wide wave of calls listen to their own, never to the caller's. `abortable: false` says
 *   nothing will ever call it (a run without a caller signal whose calls run
 *   one at a time): its waits are then plain awaits.
 *
 * Work that settles after the cancel is absorbed (a late rejection never
 * surfaces as unhandled). Each race waits in {@link Cancel.race}'s set of
 * waiters only until it settles: a signal that outlives many calls keeps
 * nothing of the ones that ended.
 */
// Set in the class's static block, which names the class `this`: a class that names itself in its
// own body is renamed by the bundler (`var Cancel = class _Cancel`).
let ownedCancel: (abortable: boolean) => Cancel;

export class Cancel {
  readonly signal: AbortSignal;
  readonly #controller: AbortController | undefined;
  readonly #abortable: boolean;
  /** The races still waiting; each removes itself when its work settles. */
  readonly #waiters = new Set<() => void>();
  /** The followed signal and the listener on it, until `dispose` (`listening` only). */
  #following: { readonly signal: AbortSignal; readonly onAbort: () => void } | undefined;

  private constructor(signal: AbortSignal, controller: AbortController | undefined, abortable: boolean) {
    this.signal = signal;
    this.#controller = controller;
    this.#abortable = abortable;
  }

  static {
    ownedCancel = (abortable) => {
      const controller = new AbortController();
      return new this(controller.signal, controller, abortable);
    };
  }

  /**
   * Follows `signal`, which someone else aborts, until {@link Cancel.dispose};
   * `onAborted` runs once it has aborted with it (not when `signal` had
   * aborted already).
   * @throws {EngineConfigError} naming `where` when `signal` cannot be
   *   listened to (its `addEventListener` throws; `cause`: what it threw).
   */
  static listening(signal: AbortSignal, where: SignalTaker, onAborted?: () => void): Cancel {
    const cancel = ownedCancel(true);
    setMaxListeners(0, cancel.signal);
    // A reason that cannot be read (a getter of the caller's that throws) must still cancel, and must not
    // throw from the abort listener, where nothing catches it and the calls would wait on.
    const reason = (): unknown =>
      abortReason(
        signal,
        (cause) => new EngineConfigError(where, "the signal aborted, and its reason could not be read", { cause }),
      );
    try {
      if (signal.aborted) {
        cancel.abort(reason());
      } else {
        // Heard only until `dispose`: a signal that refuses to give the listener up keeps it, and it must then do nothing.
        const onAbort = (): void => {
          if (cancel.#following === undefined) return;
          cancel.abort(reason());
          onAborted?.();
        };
        cancel.#following = { signal, onAbort };
        signal.addEventListener("abort", onAbort, { once: true });
      }
    } catch (error) {
      throw new EngineConfigError(where, `the signal cannot be listened to: ${describeError(error)}`, { cause: error });
    }
    return cancel;
  }

  /** A signal of its own, aborted only by {@link Cancel.abort}. */
  static owned(abortable: boolean): Cancel {
    return ownedCancel(abortable);
  }

  get aborted(): boolean {
    return this.signal.aborted;
  }

  /**
   * Whether a job queued after the cancel came has run. Work that settled
   * before the cancel has its reactions queued ahead of that job and reads
   * `false`; work that settled because the cancel came (a tool rejecting, or
   * returning, in its abort listener) has them queued behind it and reads
   * `true`.
   */
  get heard(): boolean {
    return this.#heard;
  }

  #heard = false;

  /** Aborts an owned signal with `reason`, ending every wait on it. */
  abort(reason: unknown): void {
    // Queued before the signal's listeners run: see `heard`.
    if (!this.aborted) queueMicrotask(() => (this.#heard = true));
    this.#controller?.abort(reason);
    this.#fire();
  }

  /** `work`'s value, or {@link CANCELLED} if the cancel comes first. */
  race<T>(work: Promise<T>): Promise<T | typeof CANCELLED> {
    if (!this.#abortable) return work;
    if (this.aborted) {
      work.catch(() => undefined);
      return Promise.resolve(CANCELLED);
    }
    const waiters = this.#waiters;
    return new Promise((resolve, reject) => {
      // A job, not a call: work that settled before the cancel still wins, its reaction being queued first.
      const cancelled = (): void => queueMicrotask(() => resolve(CANCELLED));
      waiters.add(cancelled);
      work.then(
        (value) => {
          waiters.delete(cancelled);
          resolve(value);
        },
        (error: unknown) => {
          waiters.delete(cancelled);
          reject(error);
        },
      );
    });
  }

  /**
   * Stops following the caller's signal. Never throws: the call or run that
   * ends here keeps its outcome even when the signal's removal throws.
   */
  dispose(): void {
    const following = this.#following;
    this.#following = undefined;
    if (following !== undefined) unlisten(following.signal, following.onAbort);
  }

  #fire(): void {
    const waiting = [...this.#waiters];
    this.#waiters.clear();
    for (const cancelled of waiting) cancelled();
  }
}

/**
 * What follows each caller's signal: one listener on it, shared by every call
 * and run in flight on it, and the cancels of those calls and runs. One signal
 * gets one listener from the engine however many calls and runs it cancels (a
 * server's one shutdown signal over many runs, a wide wave of parallel calls
 * must not trip Node's listener warning), and none once they have all ended.
 * The followers are kept in a set, not as listeners on a signal of ours: Node's
 * `EventTarget` looks through the listeners already on a signal each time one
 * is added, so a wave of N calls would cost O(N²).
 */
const sharing = new WeakMap<AbortSignal, { readonly followers: Set<Cancel>; readonly source: Cancel }>();

/**
 * A cancel of its own that follows `signal` through the one listener every call
 * and run in flight on it shares: what its user's tools leave listening on it
 * goes with that user, not with the last one in flight on the caller's signal.
 * The followers abort in the order they began following. `release` it once,
 * when its user has ended (it disposes the cancel).
 * @throws {EngineConfigError} naming `where` when `signal` cannot be listened
 *   to (its `addEventListener` throws; `cause`: what it threw).
 */
export function followShared(signal: AbortSignal, where: SignalTaker): { readonly cancel: Cancel; release(): void } {
  let entry = sharing.get(signal);
  if (entry === undefined) {
    const followers = new Set<Cancel>();
    // A Cancel of its own only to hold the one listener: it aborts each follower, and is never raced.
    const source = Cancel.listening(signal, where, () => {
      for (const follower of [...followers]) follower.abort(source.signal.reason);
    });
    entry = { followers, source };
    sharing.set(signal, entry);
  }
  const shared = entry;
  const cancel = Cancel.owned(true);
  setMaxListeners(0, cancel.signal);
  if (shared.source.aborted) cancel.abort(shared.source.signal.reason);
  shared.followers.add(cancel);
  let released = false;
  return {
    cancel,
    release: () => {
      if (released) return;
      released = true;
      shared.followers.delete(cancel);
      if (shared.followers.size > 0) return;
      shared.source.dispose();
      if (sharing.get(signal) === shared) sharing.delete(signal);
    },
  };
}
