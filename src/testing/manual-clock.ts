import type { Clock, TimerHandle } from "../engine/index.js";

/** The longest delay the global timers keep; a longer one fires at once. */
const MAX_DELAY_MS = 2_147_483_647;

const macrotask = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * A {@link Clock} that only moves when told to: `await advance(ms)` moves
 * the time and fires every timer that comes due, in due order. Like the
 * global timers (and as the `Clock` contract asks), each fires
 * asynchronously, on a macrotask of its own: never inside `setTimeout`, and
 * after the microtasks already queued have run; and, as with them, a delay
 * that is not a number of ms from 0 to 2^31 - 1 (none, a text, past the
 * maximum) is no delay. For deterministic deadline
 * and cool-down tests without wall-clock sleeps.
 *
 * @example
 * ```ts
 * const clock = new ManualClock(1_000);
 * const managers = new LoopManagers().withClock(clock).withAskTimeout(50);
 * // … once the call is parked:
 * await clock.advance(50); // the ask expires
 * ```
 */
export class ManualClock implements Clock {
  #now: number;
  #seq = 0;
  readonly #timers = new Map<number, { at: number; callback: () => void }>();

  /**
   * @param startMs - the initial epoch milliseconds. @default 0
   * @throws {RangeError} when it is not a finite number.
   */
  constructor(startMs = 0) {
    // The engine reads a now() that is not a finite number as a clock that fails (a record takes the system time).
    if (typeof startMs !== "number" || !Number.isFinite(startMs))
      throw new RangeError("ManualClock: startMs must be a finite number of epoch ms");
    this.#now = startMs;
  }

  now(): number {
    return this.#now;
  }

  setTimeout(callback: () => void, ms: number): TimerHandle {
    this.#seq += 1;
    // As the global timers do, a delay that is not a number of ms from 0 to 2^31 - 1 (none, NaN, a text,
    // Infinity) is no delay: Node fires it at once, so a deadline set past the maximum must not wait here.
    const delay = Number(ms);
    this.#timers.set(this.#seq, { at: this.#now + (delay >= 0 && delay <= MAX_DELAY_MS ? delay : 0), callback });
    return this.#seq;
  }

  clearTimeout(handle: TimerHandle): void {
    if (typeof handle === "number") this.#timers.delete(handle);
  }

  /** Timers set and neither fired nor cleared. */
  get pendingTimers(): number {
    return this.#timers.size;
  }

  /**
   * Moves time forward by `ms`, firing due timers in order, each on its own
   * macrotask; resolves once the time is `now() + ms` and they have fired.
   * A timer that throws does not stop the others, as with the global timers:
   * every due timer fires and the time moves on, then `advance` rejects with
   * the first error thrown.
   */
  async advance(ms: number): Promise<void> {
    if (!Number.isFinite(ms) || ms < 0)
      throw new RangeError("ManualClock.advance: ms must be a non-negative finite number");
    const target = this.#now + ms;
    let failed: { readonly error: unknown } | undefined;
    for (;;) {
      await macrotask();
      let due: [number, { at: number; callback: () => void }] | undefined;
      for (const entry of this.#timers) {
        if (entry[1].at <= target && (due === undefined || entry[1].at < due[1].at)) due = entry;
      }
      if (due === undefined) break;
      this.#timers.delete(due[0]);
      this.#now = Math.max(this.#now, due[1].at);
      try {
        due[1].callback();
      } catch (error) {
        failed ??= { error };
      }
    }
    // Another advance that ran meanwhile may have moved the time further: it never goes back.
    this.#now = Math.max(this.#now, target);
    if (failed !== undefined) throw failed.error;
  }
}
