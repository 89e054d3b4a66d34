/** An opaque timer handle returned by {@link Clock.setTimeout}. */
export type TimerHandle = unknown;

/**
 * The engine's time seam: record timestamps (`now`) and ask deadlines
 * (`setTimeout` / `clearTimeout`). Swap it for a manual clock in tests.
 *
 * Timers fire asynchronously, as the global timers do: never inside
 * `setTimeout` itself, and only after the microtasks already queued have
 * run. The engine relies on it: an answer that is already available when a
 * deadline is set wins, even at deadline 0. `ManualClock` (from
 * `loopctl/testing`) keeps this rule.
 */
export interface Clock {
  /** Epoch milliseconds. */
  now(): number;
  /** Calls `callback` once, asynchronously, after `ms` milliseconds; returns a handle for {@link Clock.clearTimeout}. */
  setTimeout(callback: () => void, ms: number): TimerHandle;
  /** Cancels a pending timer; a handle that already fired is ignored. */
  clearTimeout(handle: TimerHandle): void;
}

/** What `withClock` accepts: at least `now`; timers default to the system's. */
export interface ClockInput {
  now(): number;
  setTimeout?: (callback: () => void, ms: number) => TimerHandle;
  clearTimeout?: (handle: TimerHandle) => void;
}

/** The default clock: `Date.now` and the global timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (callback, ms) => globalThis.setTimeout(callback, ms),
  clearTimeout: (handle) => {
    globalThis.clearTimeout(handle as ReturnType<typeof globalThis.setTimeout>);
  },
};
