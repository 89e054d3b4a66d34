import { AskResolutionSchema } from "../ask/index.js";
import type { AskResolution, AskResolver, PendingAsk } from "../ask/index.js";
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
  | { readonly type: "cancelled" };

/** What {@link park} needs. */
export interface ParkRequest {
  readonly ask: PendingAsk;
  readonly resolver: AskResolver | undefined;
  readonly timeoutMs: number | undefined;
  readonly clock: Clock;
  /** The call's cancel. */
  readonly cancel: Cancel;
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
 * path, and aborts the resolver's signal when the engine stops waiting
 * (deadline or cancel) so the resolver can withdraw the ask. The clock's
 * timers fire asynchronously (see {@link Clock}), so an answer that is
 * already available when the deadline is set wins even at deadline 0.
 *
 * The resolver's signal aborts at the very moment the engine decides the
 * deadline or the cancel, not once the wait has gone on: an answer given in
 * between would otherwise reach a wait that has already ended (an
 * `ApprovalChannel` would tell its approver `true` for a call refused as
 * expired).
 */
export async function park(request: ParkRequest): Promise<ParkOutcome> {
  const { ask, resolver, timeoutMs, clock, cancel } = request;
  const signal = cancel.signal;
  if (signal.aborted) return { type: "cancelled" };
  if (resolver === undefined) return { type: "unresolved" };
  // Without a deadline the engine stops waiting only on cancel, when `signal`
  // itself aborts; a deadline needs a signal of its own, which follows `signal`.
  const stop = timeoutMs === undefined ? undefined : new AbortController();
  /** Set by whichever of the answer, the deadline and the cancel came first. */
  let ended = false;
  const onCancel = (): void => {
    if (ended) return;
    ended = true;
    stop?.abort(signal.reason);
  };
  if (stop !== undefined) signal.addEventListener("abort", onCancel, { once: true });
  let timer: unknown;
  let waited: ParkOutcome | typeof CANCELLED;
  try {
    waited = await cancel.race(
      new Promise<ParkOutcome>((resolve) => {
        const end = (outcome: ParkOutcome): void => {
          if (ended) return;
          ended = true;
          resolve(outcome);
        };
        // The deadline is armed before the ask is delivered: a clock that cannot
        // arm it fails the park while no resolver holds the ask.
        if (timeoutMs !== undefined) {
          timer = clock.setTimeout(() => {
            if (ended) return;
            end({ type: "expired" });
            stop?.abort(new Error(`ask ${ask.id} expired`));
          }, timeoutMs);
        }
        let answer: Promise<unknown>;
        try {
          answer = Promise.resolve(resolver.resolve(ask, { signal: stop?.signal ?? signal }));
        } catch (error) {
          answer = Promise.reject(error);
        }
        answer.then(
          (value) => end(judge(value)),
          (error: unknown) =>
            end({ type: "denied", resolution: undefined, reason: `ask resolver failed: ${describeError(error)}` }),
        );
      }),
    );
  } finally {
    if (stop !== undefined) signal.removeEventListener("abort", onCancel);
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
