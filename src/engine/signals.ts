import { getEventListeners, setMaxListeners } from "node:events";
import { CancelledError } from "./errors.js";

/** The error a cancelled run rejects with, carrying the signal's reason. */
export function cancelledBy(signal: { readonly reason: unknown }): CancelledError {
  return new CancelledError("the run was cancelled", { cause: signal.reason });
}

/** Waits `turns` microtask turns. */
export async function drainMicrotasks(turns: number): Promise<void> {
  for (let i = 0; i < turns; i += 1) await Promise.resolve();
}

/**
 * The races pending on each signal. A signal gets one abort listener, added
 * by its first race and kept until it aborts, which settles every race then
 * pending in the order they began; a race that ends leaves the set. An
 * EventTarget listener added and removed around every await cost more than
 * the rest of a tool call's gate.
 */
const racing = new WeakMap<AbortSignal, Set<() => void>>();

function watchAbort(signal: AbortSignal, onAbort: () => void): void {
  let waiting = racing.get(signal);
  if (waiting === undefined) {
    const set = new Set<() => void>();
    waiting = set;
    racing.set(signal, set);
    signal.addEventListener(
      "abort",
      () => {
        racing.delete(signal);
        for (const settle of set) settle();
        set.clear();
      },
      { once: true },
    );
  }
  waiting.add(onAbort);
}

function unwatchAbort(signal: AbortSignal, onAbort: () => void): void {
  racing.get(signal)?.delete(onAbort);
}

/**
 * Waits for `work` unless `signal` aborts first (then rejects with
 * {@link CancelledError}). With `graceTurns`, work that settles within that
 * many microtask turns of the abort still wins: a decision already made
 * (say, a hook that answered Ask just as the run was cancelled) is honoured.
 * Late outcomes of `work` are absorbed so they never surface as unhandled
 * rejections. Meant for the engine's own signals (a run's or a wave's): the
 * one listener it puts on a signal stays until the signal aborts or is
 * collected with its run.
 */
export function raceAbort<T>(work: Promise<T>, run: RunSignal, graceTurns = 0): Promise<T> {
  const signal = run.source;
  // Nothing can abort it: the work itself, with no listener to keep.
  if (signal === undefined) return work;
  return new Promise<T>((resolve, reject) => {
    let done = false;
    const onAbort = (): void => {
      void drainMicrotasks(graceTurns).then(() => {
        if (done) return;
        done = true;
        work.catch(() => undefined);
        reject(cancelledBy(signal));
      });
    };
    work.then(
      (value) => {
        unwatchAbort(signal, onAbort);
        if (done) return;
        done = true;
        resolve(value);
      },
      (error: unknown) => {
        unwatchAbort(signal, onAbort);
        if (done) return;
        done = true;
        reject(error);
      },
    );
    if (signal.aborted) onAbort();
    else watchAbort(signal, onAbort);
  });
}

/**
 * An `AbortController` the engine owns, whose signal takes any number of
 * listeners without Node's `MaxListenersExceededWarning`. One run or wave
 * signal is shared by every call in flight: each parked call, hook race and
 * tool (through its context) adds its own listener, so a wave wider than ten
 * is normal, not a leak; every engine listener is removed when its wait ends.
 */
export function ownedController(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

/**
 * The signal that never aborts, which an `Agent`'s runs without a caller
 * signal hand to the model, hooks, tools, middleware and resolver. Making an
 * `AbortSignal` costs microseconds on Node 20 (a quarter of an approval
 * round trip), so the runs of one agent share one, and it never aborts, so
 * sharing it changes nothing they can see. Listeners are what a shared signal
 * could keep: the engine removes its own when each wait ends, and when a run
 * ends with any listener still on it (a careless tool's, or a concurrent
 * run's in flight), the agent stops handing it out, so such listeners are
 * collected with the runs that hold it instead of living as long as the agent.
 */
export class IdleSignal {
  #signal: AbortSignal | undefined;

  get(): AbortSignal {
    this.#signal ??= ownedController().signal;
    return this.#signal;
  }

  /** A run that read `signal` has ended. */
  release(signal: AbortSignal): void {
    if (this.#signal === signal && getEventListeners(signal, "abort").length > 0) this.#signal = undefined;
  }
}

/**
 * A run's (or a wave's) cancel as the engine reads it. `source` is the signal
 * that can abort it: a wave's own, or the run's link to the caller's signal.
 * A run without a caller signal has none, and nothing aborts it (a wave that
 * must stop its siblings makes its own), so the engine neither races nor
 * listens on it: no abort listener per run. `signal`, for the model, hooks,
 * tools, middleware and resolver, is `source`, or else the agent's
 * {@link IdleSignal}, taken on first read and given back by {@link end}. The
 * contexts hold it as a plain property: an accessor in an object literal
 * costs more to create than a signal.
 */
export class RunSignal {
  readonly source: AbortSignal | undefined;
  readonly #idle: IdleSignal | undefined;
  #taken: AbortSignal | undefined;

  /** A wave's signal, or a run's: its link to the caller's signal, else its agent's idle signal. */
  constructor(source: AbortSignal);
  constructor(source: AbortSignal | undefined, idle: IdleSignal);
  constructor(source: AbortSignal | undefined, idle?: IdleSignal) {
    this.source = source;
    this.#idle = idle;
  }

  get signal(): AbortSignal {
    if (this.source !== undefined) return this.source;
    // The constructor's overloads give every RunSignal without a source an idle signal.
    this.#taken ??= (this.#idle as IdleSignal).get();
    return this.#taken;
  }

  get aborted(): boolean {
    return this.source !== undefined && this.source.aborted;
  }

  get reason(): unknown {
    return this.source?.reason;
  }

  /** The run has ended: gives the idle signal back (see {@link IdleSignal.release}). */
  end(): void {
    if (this.#taken !== undefined) this.#idle?.release(this.#taken);
  }
}

/**
 * A child signal that aborts with its parent (or on its own); `dispose`
 * unhooks it from the parent. The parent (a caller's signal) gets one
 * listener however many calls then share the child.
 */
export function linkedSignal(parent: AbortSignal | undefined): { readonly controller: AbortController; dispose(): void } {
  const controller = ownedController();
  if (parent === undefined) return { controller, dispose: () => undefined };
  if (parent.aborted) {
    controller.abort(parent.reason);
    return { controller, dispose: () => undefined };
  }
  const onAbort = (): void => controller.abort(parent.reason);
  parent.addEventListener("abort", onAbort, { once: true });
  return { controller, dispose: () => parent.removeEventListener("abort", onAbort) };
}
