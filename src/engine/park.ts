import { AskResolutionSchema } from "../ask/index.js";
import type { AskResolution, AskResolver, PendingAsk } from "../ask/index.js";
import { ParkSignal } from "../ask/park-signal.js";
import type { Clock } from "./clock.js";
import { describeError } from "./errors.js";
import { CANCELLED } from "./signals.js";
import type { Cancel } from "./signals.js";

/** How a park ended. */
export type ParkOutcome =
  | { readonly type: "approved"; readonly resolution: AskResolution }
  | { readonly type: "denied"; readonly resolution: AskResolution | undefined; readonly reason: string }
  | { readonly type: "expired" }
  | { readonly type: "unresolved" }
  | { readonly type: "withdrawn"; readonly reason: string }
  | { readonly type: "cancelled" };

/** What {@link park} needs. */
export interface ParkRequest {
  readonly ask: PendingAsk;
  readonly resolver: AskResolver | undefined;
  readonly timeoutMs: number | undefined;
  readonly clock: Clock;
  /** The call's cancel. */
  readonly cancel: Cancel;
  /** Aborts once the tool's calls can no longer be sent: the park then ends `withdrawn`. */
  readonly withdrawn?: AbortSignal | undefined;
}

/** The record reason when an approver refuses (with its own reason appended, if it gave one). */
export const DENIED_BY_APPROVER = "denied by approver";

function judge(value: unknown): ParkOutcome {
  let resolution: AskResolution | undefined;
  try {
    resolution = AskResolutionSchema.parse(value);
  } catch {
    // A malformed answer, or one whose reads throw (a proxy, a getter).
    return { type: "denied", resolution: undefined, reason: "ask resolver returned an invalid resolution" };
  }
  if (resolution.type === "approve") return { type: "approved", resolution };
  const reason =
    resolution.reason === undefined || resolution.reason === ""
      ? DENIED_BY_APPROVER
      : `${DENIED_BY_APPROVER}: ${resolution.reason}`;
  return { type: "denied", resolution, reason };
}

/**
 * Parks one call: hands `ask` to the resolver and waits for the first of its
 * answer, the deadline, or a cancel. Clears its timer and listener on every
 * path. The resolver gets a signal of the park's own, which aborts the
 * moment the park ends, however it ends: the deadline, a cancel, an answer,
 * or a resolver that threw, rejected or answered something invalid. So
 * whatever the resolver left waiting (an ask parked on a channel it wraps,
 * the other channel of two it raced) is withdrawn, and an answer given there
 * later returns `false` instead of `true` for a call that has ended. The
 * clock's timers fire asynchronously (see {@link Clock}), so an answer that
 * is already available when the deadline is set wins even at deadline 0.
 *
 * The signal is made only if the resolver reads it (a resolver that answers
 * at once need not), and read after the park ended it is already aborted.
 *
 * The signal aborts at the very moment the engine decides the ending, not
 * once the wait has gone on: an answer given in between would otherwise
 * reach a wait that has already ended (an `ApprovalChannel` would tell its
 * approver `true` for a call refused as expired).
 */
export async function park(request: ParkRequest): Promise<ParkOutcome> {
  const { ask, resolver, timeoutMs, clock, cancel, withdrawn } = request;
  const signal = cancel.signal;
  if (signal.aborted) return { type: "cancelled" };
  // Nobody is asked about a call that could no longer be sent.
  if (withdrawn?.aborted === true) return { type: "withdrawn", reason: describeError(withdrawn.reason) };
  if (resolver === undefined) return { type: "unresolved" };
  /** Ended by whichever of the answer, the deadline and the cancel came first; its signal is made when the resolver reads it. */
  const stop = new ParkSignal(ask.id, resolver);
  const onCancel = (): void => {
    if (stop.ended) return;
    stop.cancelled(signal.reason);
  };
  signal.addEventListener("abort", onCancel, { once: true });
  let onWithdrawn: (() => void) | undefined;
  let timer: unknown;
  let waited: ParkOutcome | typeof CANCELLED;
  try {
    waited = await cancel.race(
      new Promise<ParkOutcome>((resolve) => {
        const end = (outcome: ParkOutcome, why: string): void => {
          if (stop.ended) return;
          resolve(outcome);
          stop.end(why);
        };
        // The deadline is armed before the ask is delivered: a clock that cannot
        // arm it fails the park while no resolver holds the ask.
        if (timeoutMs !== undefined) timer = clock.setTimeout(() => end({ type: "expired" }, "expired"), timeoutMs);
        if (withdrawn !== undefined) {
          onWithdrawn = () =>
            end(
              { type: "withdrawn", reason: describeError(withdrawn.reason) },
              "was withdrawn: the call can no longer be sent",
            );
          withdrawn.addEventListener("abort", onWithdrawn, { once: true });
        }
        const answered = (value: unknown): void => {
          const outcome = judge(value);
          end(outcome, outcome.type === "approved" ? "was approved" : "was refused");
        };
        stop.onAnswer = answered;
        let answer: Promise<unknown>;
        try {
          answer = Promise.resolve(resolver.resolve(ask, stop.options));
        } catch (error) {
          answer = Promise.reject(error);
        }
        answer.then(answered, (error: unknown) =>
          end(
            { type: "denied", resolution: undefined, reason: `ask resolver failed: ${describeError(error)}` },
            "was refused: its resolver failed",
          ),
        );
      }),
    );
  } finally {
    signal.removeEventListener("abort", onCancel);
    if (onWithdrawn !== undefined) withdrawn?.removeEventListener("abort", onWithdrawn);
  }
  if (timeoutMs !== undefined) {
    try {
      clock.clearTimeout(timer);
    } catch {
      // The park has ended: a timer left armed fires into a settled wait. A
      // clock that cannot clear it must not turn the ending into something
      // else, nor keep the resolver from learning that the ask is withdrawn.
    }
  }
  return waited === CANCELLED ? { type: "cancelled" } : waited;
}
