import type { AskResolution, PendingAsk } from "../ask/index.js";

/** Why an ask ended without an answer. */
export type WithdrawnReason = "expired" | "cancelled" | "closed" | "abandoned" | "unknown";

/**
 * How an ask ended: answered (by whichever console got there first), or
 * withdrawn: the engine's deadline passed (`expired`), its run was cancelled
 * (`cancelled`), the worker's queue or this inbox closed (`closed`), the
 * worker died and its lease lapsed (`abandoned`), or the id is not known
 * (`unknown`: never parked, or ended long ago).
 */
export type AskEnding =
  | { readonly type: "answered"; readonly verdict: "approve" | "deny" }
  | { readonly type: "withdrawn"; readonly reason: WithdrawnReason };

/**
 * The approver side of a queue of asks, as an approval console uses it:
 * every pending ask, answers by id, and how each ask ended.
 */
export interface AskInbox {
  /**
   * The next pending ask this inbox has not delivered yet, waiting for one
   * if none is ready; `undefined` once the inbox is closed. Every inbox sees
   * every pending ask; an ask that ended is never delivered again. If
   * `options.signal` aborts first, rejects with its reason and takes no ask.
   */
  next(options?: { signal?: AbortSignal }): Promise<PendingAsk | undefined>;
  /** Answers an ask; `true` only if this answer ended it (one answer per ask, ever). */
  resolve(askId: string, resolution: AskResolution): boolean | Promise<boolean>;
  /** Resolves once the ask ended, at once for one already ended or unknown. */
  ended(askId: string, options?: { signal?: AbortSignal }): Promise<AskEnding>;
  /** Stops delivering: a waiting `next()` resolves `undefined`, a waiting `ended()` `{ withdrawn, "closed" }`. */
  close(): void | Promise<void>;
}
