import { APPROVER_CLOSED_REASON, APPROVER_DROPPED_REASON } from "./channel-core.js";
import type { ChannelCore } from "./channel-core.js";
import { ApproverConstructorError } from "./errors.js";
import { parseResolution } from "./resolution.js";
import { takeIterator } from "./take-iterator.js";
import type { AnswerOptions, AskEnding, AskInbox, AskResolution, PendingAsk } from "./types.js";
import { answerDigest, waitSignal } from "./wait-options.js";

/** Options for {@link Approver.next}. */
export interface NextOptions {
  /** Stops waiting; `next()` then rejects with `signal.reason` and takes no ask. */
  readonly signal?: AbortSignal;
}

/** Options for {@link Approver.ended}. */
export interface EndedOptions {
  /** Stops waiting; `ended()` then rejects with `signal.reason`. The ask is untouched. */
  readonly signal?: AbortSignal;
}

const CLOSED: AskEnding = Object.freeze({ type: "withdrawn", reason: "closed" });
const ABANDONED: AskEnding = Object.freeze({ type: "withdrawn", reason: "abandoned" });

let registry: FinalizationRegistry<ChannelCore> | undefined;

// Created on first use so importing the module does no work.
function dropRegistry(): FinalizationRegistry<ChannelCore> {
  registry ??= new FinalizationRegistry<ChannelCore>((core) => core.close(APPROVER_DROPPED_REASON, ABANDONED));
  return registry;
}

/** Set only while {@link pairedApprover} constructs, so nothing else can. */
let constructing = false;
/**
 * Assigned by the class's static block: the only code that may call its private constructor. It says
 * `new this`: a class that names itself in its own body is renamed by the bundler (`_Approver`).
 */
let make: (core: ChannelCore) => Approver;

/**
 * The human side of an {@link ApprovalChannel}: takes parked asks in park
 * order and answers them by id. Obtain one from {@link ApprovalChannel.pair};
 * it cannot be constructed directly.
 *
 * Close it (or `using approver = …`) when done: every ask still awaiting an
 * answer, and every later one, is denied at once. An approver that is garbage
 * collected without being closed does the same (reason
 * {@link APPROVER_DROPPED_REASON}), so a forgotten approver never parks a run
 * forever.
 *
 * @example
 * ```ts
 * const [channel, approver] = ApprovalChannel.pair(8);
 * for await (const ask of approver) {
 *   approver.resolve(ask.id, ask.tool === "read_file" ? { type: "approve" } : { type: "deny", reason: "no" });
 * }
 * ```
 */
export class Approver implements AskInbox, AsyncIterable<PendingAsk>, Disposable {
  readonly #core: ChannelCore;

  static {
    make = (core) => {
      constructing = true;
      try {
        return new this(core);
      } finally {
        constructing = false;
      }
    };
  }

  private constructor(core: ChannelCore) {
    // `private` binds TypeScript callers only; plain JavaScript is stopped here.
    if (!constructing) throw new ApproverConstructorError();
    this.#core = core;
    dropRegistry().register(this, core, this);
  }

  /** Asks awaiting an answer: in line, delivered, or taken by `next()` but unanswered. */
  get pending(): number {
    return this.#core.pending;
  }

  /** Asks delivered but not yet taken by `next()`; never more than the capacity (0 counts as 1). */
  get buffered(): number {
    return this.#core.buffered;
  }

  /** Asks waiting in line because the capacity is full; delivered in park order as room frees. */
  get inLine(): number {
    return this.#core.inLine;
  }

  /** The capacity given to {@link ApprovalChannel.pair} (0 behaves as 1). */
  get capacity(): number {
    return this.#core.capacity;
  }

  /** True once {@link Approver.close} ran (or the approver was dropped). */
  get closed(): boolean {
    return this.#core.closed;
  }

  /**
   * The next ask in park order, waiting for one if none is ready; `undefined`
   * once the approver is closed (a waiting `next()` resolves `undefined` when
   * `close()` runs). Asks answered or abandoned before being taken are
   * skipped. If `options.signal` aborts first, the promise rejects with its
   * reason and no ask is consumed.
   *
   * Rejects (never throws) with an {@link InvalidApproverOptionsError} if
   * `options` is not an object (or holds a key other than `signal`) or
   * `options.signal` is not an `AbortSignal`, or cannot be listened to when the call has to wait (its
   * `addEventListener` throws); nothing then waits and no ask is consumed.
   */
  next(options?: NextOptions): Promise<PendingAsk | undefined> {
    try {
      return this.#core.take(waitSignal("next", options));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Answers the ask `askId` (taken by `next()` or not yet). Returns `true` only
   * if the answer reached a wait still parked; `false` for an unknown id, a
   * second answer, or an ask whose wait already ended (deadline, cancel,
   * close). A `false` answer is dropped: nothing queues.
   *
   * With `options.askDigest` (the `askDigest(ask)` of the ask the answer was
   * made for), also `false` when the ask parked under `askId` is another
   * one: the call that ended under that id may have been followed by a new
   * call with the same id, and the answer must not reach it.
   *
   * @throws {InvalidAskResolutionError} if `resolution` is not a valid
   * {@link AskResolution} (checked before anything else; the ask stays parked).
   * @throws {InvalidApproverOptionsError} if `options` is not an object (or holds a key other than
   * `askDigest`) or `options.askDigest` is not 64 lowercase hex digits (the ask stays parked).
   */
  resolve(askId: string, resolution: AskResolution, options?: AnswerOptions): boolean {
    const answer = parseResolution(askId, resolution);
    return this.#core.answer(askId, answer, answerDigest(options));
  }

  /**
   * Resolves once the ask `askId` has ended, with how it ended:
   * - `{ type: "answered", verdict }`: an answer reached it;
   * - `{ type: "withdrawn", reason: "closed" }` / `"abandoned"`: the approver
   *   was closed, or dropped unclosed, and the ask denied;
   * - `{ type: "withdrawn", reason: "unknown" }`: the engine stopped waiting.
   *   The engine aborts the resolver's signal alike for its deadline and for
   *   a cancel, so the channel cannot tell "expired" from "cancelled".
   *
   * An unknown id resolves at once with `withdrawn`/`unknown`; an id that
   * already ended resolves at once with its ending while it is among the
   * last 256 asks this channel saw end (else `unknown`). If
   * `options.signal` aborts first, the promise rejects with its reason.
   *
   * Rejects (never throws) with an {@link InvalidApproverOptionsError} if
   * `options` is not an object (or holds a key other than `signal`) or
   * `options.signal` is not an `AbortSignal`, or cannot be listened to when the call has to wait (its
   * `addEventListener` throws); nothing then waits and the ask is untouched.
   */
  ended(askId: string, options?: EndedOptions): Promise<AskEnding> {
    try {
      return this.#core.ended(askId, waitSignal("ended", options));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Denies every ask still awaiting an answer (reason
   * {@link APPROVER_CLOSED_REASON}) and every ask parked later; resolves any
   * waiting `next()` with `undefined`. Idempotent.
   */
  close(): void {
    dropRegistry().unregister(this);
    this.#core.close(APPROVER_CLOSED_REASON, CLOSED);
  }

  /** Same as {@link Approver.close}; lets `using approver = …` close it. */
  [Symbol.dispose](): void {
    this.close();
  }

  /**
   * Yields asks in park order until the approver is closed. Leaving the loop
   * early does not close the approver. Stopping the iterator (`return()`,
   * as `break` does, or `throw()`) ends it at once, even while it waits for
   * an ask, and takes no ask: a stream over the approver that is destroyed
   * leaves the next ask to the next consumer. The iterator does not keep the
   * approver alive: a loop that only hands asks on, over an approver nothing
   * else holds, ends once the approver is collected, and its asks are denied.
   */
  [Symbol.asyncIterator](): AsyncGenerator<PendingAsk, void, undefined> {
    // The iterator holds the core, not the approver: a loop waiting for asks cannot answer them, and
    // must not keep an approver nothing else holds from being collected, and its asks denied.
    const core = this.#core;
    return takeIterator((signal) => core.take(signal));
  }
}

/** @internal The one way to make an {@link Approver}; used by `ApprovalChannel.pair`. */
export function pairedApprover(core: ChannelCore): Approver {
  return make(core);
}
