import { abortReason, isAbortSignal, unlisten } from "../abort-signal.js";
import { askDigest } from "./ask-digest.js";
import { DuplicateAskError, InvalidPendingAskError } from "./errors.js";
import { LinkedQueue } from "./linked-queue.js";
import { listenWhileWaiting, waitReason } from "./wait-options.js";
import type { QueueNode } from "./linked-queue.js";
import type { AskEnding, AskResolution, PendingAsk } from "./types.js";

/** The denial reason given to asks denied because the approver was closed. */
export const APPROVER_CLOSED_REASON = "approval channel closed";

/** The denial reason given to asks denied because the approver was garbage-collected unclosed. */
export const APPROVER_DROPPED_REASON = "approver dropped without close()";

/** How many ended asks a channel remembers, for `ended()` called after the fact and to refuse their ids again. */
const REMEMBERED_ENDINGS = 256;

const UNKNOWN_ENDING: AskEnding = Object.freeze({ type: "withdrawn", reason: "unknown" });
const ANSWERED_APPROVE: AskEnding = Object.freeze({ type: "answered", verdict: "approve" });
const ANSWERED_DENY: AskEnding = Object.freeze({ type: "answered", verdict: "deny" });

interface Watcher {
  readonly resolve: (ending: AskEnding) => void;
  readonly reject: (reason: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
}

interface Parked {
  /** The ask's id, read once: a getter on the ask is never consulted again. */
  readonly id: string;
  readonly ask: PendingAsk;
  readonly signal: AbortSignal;
  readonly resolve: (resolution: AskResolution) => void;
  readonly reject: (reason: unknown) => void;
  readonly onAbort: () => void;
  /** Tells the engine's park of its answer at once, before the promise is read (see `answerNotice`). */
  readonly noticeAnswer: ((resolution: AskResolution) => void) | undefined;
  /** Set while the ask is not yet taken by `next()` (delivered or in line). */
  node: QueueNode<Parked> | undefined;
  /** Callers of `ended()` waiting for this ask; made on first use. */
  watchers: Set<Watcher> | undefined;
}

interface Taker {
  readonly resolve: (ask: PendingAsk | undefined) => void;
  readonly reject: (reason: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
}

/**
 * The state an {@link ApprovalChannel} and its {@link Approver} share. It must
 * never reference the Approver: it is the held value of the finalization
 * registry that denies everything when an approver is dropped unclosed.
 *
 * Asks not yet taken sit in one park-ordered queue; the first `capacity` of
 * them count as delivered, the rest as waiting in line. Because `next()` only
 * ever takes the head, this is observably the same as a bounded buffer with a
 * line of senders behind it, at O(1) per operation.
 */
export class ChannelCore {
  readonly capacity: number;
  #closedReason: string | undefined;
  readonly #parked = new Map<string, Parked>();
  readonly #untaken = new LinkedQueue<Parked>();
  readonly #takers = new LinkedQueue<Taker>();
  /** The last endings, oldest first (a Map keeps insertion order), bounded by REMEMBERED_ENDINGS. */
  readonly #endings = new Map<string, AskEnding>();

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get closed(): boolean {
    return this.#closedReason !== undefined;
  }

  get pending(): number {
    return this.#parked.size;
  }

  get buffered(): number {
    return Math.min(Math.max(this.capacity, 1), this.#untaken.size);
  }

  get inLine(): number {
    return this.#untaken.size - this.buffered;
  }

  /** Parks `ask`, which the caller has checked against the schema; `signal` is still unchecked. */
  park(ask: PendingAsk, signal: unknown, noticeAnswer?: (resolution: AskResolution) => void): Promise<AskResolution> {
    // Untyped callers get a rejection (the engine's deny path), never a throw.
    if (!isAbortSignal(signal)) {
      return Promise.reject(new InvalidPendingAskError("options.signal must be an AbortSignal"));
    }
    const id = ask.id;
    // A cancel that fired before the park wins: the ask is never delivered.
    if (signal.aborted) return Promise.reject(parkReason(signal));
    if (this.#closedReason !== undefined) {
      return Promise.resolve({ type: "deny", reason: this.#closedReason });
    }
    if (this.#parked.has(id)) return Promise.reject(new DuplicateAskError(id));
    // An approver may still answer the ask that ended under this id (a console not yet refreshed, a
    // signed link): that answer must never reach a different call.
    if (this.#endings.has(id)) return Promise.reject(new DuplicateAskError(id, "ended"));
    return new Promise<AskResolution>((resolve, reject) => {
      const entry: Parked = {
        id,
        ask,
        signal,
        resolve,
        reject,
        // The engine aborts the same way for its deadline and for a cancel, so which it was is not known here.
        onAbort: () => this.#settle(entry, undefined, UNKNOWN_ENDING),
        noticeAnswer,
        node: undefined,
        watchers: undefined,
      };
      // Listen before registering: if listening throws, the park rejects and nothing is left parked.
      try {
        signal.addEventListener("abort", entry.onAbort, { once: true });
      } catch (error) {
        reject(new InvalidPendingAskError("options.signal cannot be listened to", { cause: error }));
        return;
      }
      this.#parked.set(id, entry);
      if (!this.#handToTaker(ask)) entry.node = this.#untaken.push(entry);
    });
  }

  take(signal: AbortSignal | undefined): Promise<PendingAsk | undefined> {
    if (this.#closedReason !== undefined) return Promise.resolve(undefined);
    if (signal?.aborted === true) return Promise.reject(waitReason("next", signal));
    const entry = this.#untaken.shift();
    if (entry !== undefined) {
      entry.node = undefined;
      return Promise.resolve(entry.ask);
    }
    return new Promise<PendingAsk | undefined>((resolve, reject) => {
      let node: QueueNode<Taker> | undefined;
      const onAbort = (): void => {
        if (node !== undefined) this.#takers.remove(node);
        reject(waitReason("next", signal));
      };
      // Listen before joining the line: if listening throws, the call rejects and no taker is left behind.
      try {
        listenWhileWaiting("next", signal, onAbort);
      } catch (error) {
        reject(error);
        return;
      }
      node = this.#takers.push({ resolve, reject, signal, onAbort });
    });
  }

  /** Answers the ask parked under `askId`; given `madeFor`, only if it is the ask with that {@link askDigest}. */
  answer(askId: string, resolution: AskResolution, madeFor?: string): boolean {
    const entry = this.#parked.get(askId);
    if (entry === undefined) return false;
    if (madeFor !== undefined && askDigest(entry.ask) !== madeFor) return false;
    this.#settle(entry, resolution, resolution.type === "approve" ? ANSWERED_APPROVE : ANSWERED_DENY);
    return true;
  }

  ended(askId: string, signal: AbortSignal | undefined): Promise<AskEnding> {
    if (signal?.aborted === true) return Promise.reject(waitReason("ended", signal));
    const entry = this.#parked.get(askId);
    if (entry === undefined) return Promise.resolve(this.#endings.get(askId) ?? UNKNOWN_ENDING);
    return new Promise<AskEnding>((resolve, reject) => {
      const watcher: Watcher = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          entry.watchers?.delete(watcher);
          reject(waitReason("ended", signal));
        },
      };
      // Listen before registering: if listening throws, the call rejects and no watcher is left behind.
      try {
        listenWhileWaiting("ended", signal, watcher.onAbort);
      } catch (error) {
        reject(error);
        return;
      }
      (entry.watchers ??= new Set()).add(watcher);
    });
  }

  close(reason: string, ending: AskEnding): void {
    if (this.#closedReason !== undefined) return;
    this.#closedReason = reason;
    const denial: AskResolution = { type: "deny", reason };
    // Map iteration tolerates deletion of visited entries; park order is kept.
    for (const entry of this.#parked.values()) this.#settle(entry, denial, ending);
    for (let taker = this.#takers.shift(); taker !== undefined; taker = this.#takers.shift()) {
      unlisten(taker.signal, taker.onAbort);
      taker.resolve(undefined);
    }
  }

  /** Settles a parked ask exactly once: with `resolution`, or with its signal's reason; tells its watchers. */
  #settle(entry: Parked, resolution: AskResolution | undefined, ending: AskEnding): void {
    if (this.#parked.get(entry.id) !== entry) return;
    this.#parked.delete(entry.id);
    if (entry.node !== undefined) {
      this.#untaken.remove(entry.node);
      entry.node = undefined;
    }
    unlisten(entry.signal, entry.onAbort);
    this.#remember(entry.id, ending);
    if (resolution === undefined) entry.reject(parkReason(entry.signal));
    else {
      // The approver is told `true` for this answer: the park takes it now, before a cancel can come between.
      entry.noticeAnswer?.(resolution);
      entry.resolve(resolution);
    }
    if (entry.watchers === undefined) return;
    for (const watcher of entry.watchers) {
      unlisten(watcher.signal, watcher.onAbort);
      watcher.resolve(ending);
    }
    entry.watchers.clear();
  }

  #remember(id: string, ending: AskEnding): void {
    this.#endings.delete(id);
    this.#endings.set(id, ending);
    if (this.#endings.size > REMEMBERED_ENDINGS) {
      const oldest = this.#endings.keys().next();
      if (oldest.done !== true) this.#endings.delete(oldest.value);
    }
  }

  #handToTaker(ask: PendingAsk): boolean {
    for (let taker = this.#takers.shift(); taker !== undefined; taker = this.#takers.shift()) {
      unlisten(taker.signal, taker.onAbort);
      try {
        // The signal may be mid-dispatch, aborted but not yet heard by our listener.
        if (taker.signal?.aborted !== true) {
          taker.resolve(ask);
          return true;
        }
        taker.reject(waitReason("next", taker.signal));
      } catch (error) {
        // A signal whose reads throw fails its own taker only; this runs inside a park, which must not stop half-made.
        taker.reject(error);
      }
    }
    return false;
  }
}

/** What a park on `signal` rejects with once it aborted: its reason, or the typed error when that cannot be read. */
function parkReason(signal: AbortSignal): unknown {
  return abortReason(
    signal,
    (cause) => new InvalidPendingAskError("options.signal aborted, and its reason could not be read", { cause }),
  );
}
