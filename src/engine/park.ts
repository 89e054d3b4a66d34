import { AskResolutionSchema } from "../ask/index.js";
import type { AskResolution, AskResolver, PendingAsk, ResolveOptions } from "../ask/index.js";
import { constantResolution } from "../ask/resolution.js";
import type { Clock } from "./clock.js";
import { describeError } from "./errors.js";
import { drainMicrotasks, ownedController } from "./signals.js";
import type { RunSignal } from "./signals.js";

/** How a park ended. */
export type ParkOutcome =
  | { readonly type: "approved"; readonly resolution: AskResolution }
  | { readonly type: "denied"; readonly resolution: AskResolution | undefined; readonly reason: string }
  | { readonly type: "expired" }
  | { readonly type: "unresolved" }
  | { readonly type: "cancelled" };

/** What {@link park} needs. */
export interface ParkRequest {
  readonly ask: PendingAsk;
  readonly resolver: AskResolver | undefined;
  readonly timeoutMs: number | undefined;
  readonly clock: Clock;
  /** The run's (or wave's) cancel. */
  readonly signal: RunSignal;
}

/** The record reason when an approver refuses (with its own reason appended, if it gave one). */
export const DENIED_BY_APPROVER = "denied by approver";

/**
 * Microtask turns an answer gets to arrive after the deadline fires. An
 * already-settled resolver promise reaches us within a few turns (the
 * resolver's own `then` chain plus ours); giving it a bounded head start is
 * what makes "an answer already available wins, even at deadline 0" hold on
 * a clock whose timers fire early or synchronously.
 */
export const ANSWER_GRACE_TURNS = 32;


type Settled = { readonly type: "answer"; readonly value: unknown } | { readonly type: "threw"; readonly error: unknown };

function callResolver(resolver: AskResolver, ask: PendingAsk, options: ResolveOptions): Promise<Settled> {
  let pending: Promise<unknown>;
  try {
    pending = Promise.resolve(resolver.resolve(ask, options));
  } catch (error) {
    pending = Promise.reject(error);
  }
  return pending.then(
    (value): Settled => ({ type: "answer", value }),
    (error: unknown): Settled => ({ type: "threw", error }),
  );
}

function judge(settled: Settled): ParkOutcome {
  if (settled.type === "threw") {
    return { type: "denied", resolution: undefined, reason: `ask resolver failed: ${describeError(settled.error)}` };
  }
  let resolution: AskResolution | undefined;
  try {
    resolution = constantResolution(settled.value);
  } catch {
    // A throwing getter: the schema judges it, as it always did.
  }
  if (resolution === undefined) {
    const parsed = AskResolutionSchema.safeParse(settled.value);
    if (!parsed.success) {
      return { type: "denied", resolution: undefined, reason: "ask resolver returned an invalid resolution" };
    }
    resolution = parsed.data as AskResolution;
  }
  if (resolution.type === "approve") return { type: "approved", resolution };
  const reason = resolution.reason === undefined || resolution.reason === "" ? DENIED_BY_APPROVER : `${DENIED_BY_APPROVER}: ${resolution.reason}`;
  return { type: "denied", resolution, reason };
}

/**
 * Parks one call: hands `ask` to the resolver and waits for the first of its
 * answer, the deadline, or a cancel. Cleans up its timer and listener on every
 * path, and aborts the resolver's signal when the engine stops waiting
 * (deadline or cancel) so the resolver can withdraw the ask.
 */
export async function park(request: ParkRequest): Promise<ParkOutcome> {
  const { ask, resolver, timeoutMs, clock, signal } = request;
  if (signal.aborted) return { type: "cancelled" };
  if (resolver === undefined) return { type: "unresolved" };

  // The resolver's signal must abort when the engine stops waiting. Without
  // a deadline that happens only on cancel, i.e. when `signal` aborts, so the
  // resolver gets `signal` itself; a deadline needs a signal of its own.
  const stop = timeoutMs === undefined ? undefined : ownedController();
  const options: ResolveOptions = { signal: stop === undefined ? signal.signal : stop.signal };
  // Only a signal that can abort needs watching (see RunSignal).
  const source = signal.source;
  let timer: unknown;
  let timerArmed = false;
  let onAbort: (() => void) | undefined;
  try {
    return await new Promise<ParkOutcome>((resolve) => {
      let done = false;
      const finish = (outcome: ParkOutcome): void => {
        if (done) return;
        done = true;
        resolve(outcome);
      };
      if (source !== undefined) {
        onAbort = () => finish({ type: "cancelled" });
        source.addEventListener("abort", onAbort, { once: true });
      }
      void callResolver(resolver, ask, options).then((settled) => finish(judge(settled)));
      if (timeoutMs !== undefined && !done) {
        timerArmed = true;
        timer = clock.setTimeout(() => {
          void drainMicrotasks(ANSWER_GRACE_TURNS).then(() => finish({ type: "expired" }));
        }, timeoutMs);
      }
    }).then((outcome) => {
      if (stop !== undefined && (outcome.type === "expired" || outcome.type === "cancelled")) {
        stop.abort(signal.aborted ? signal.reason : new Error(`ask ${ask.id} expired`));
      }
      return outcome;
    });
  } finally {
    if (timerArmed) clock.clearTimeout(timer);
    if (onAbort !== undefined) source?.removeEventListener("abort", onAbort);
  }
}
