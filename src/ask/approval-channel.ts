import { ChannelCore } from "./channel-core.js";
import { pairedApprover } from "./approver.js";
import type { Approver } from "./approver.js";
import { InvalidCapacityError, InvalidPendingAskError } from "./errors.js";
import { answerNotice } from "./park-signal.js";
import { parsePendingAsk } from "./pending-ask.js";
import type { AskResolution, AskResolver, PendingAsk, ResolveOptions } from "./types.js";

// Set in the class's static block, which names the class `this`: a class that names itself in its
// own body is renamed by the bundler (`var ApprovalChannel = class _ApprovalChannel`).
let makeChannel: (core: ChannelCore) => ApprovalChannel;

/**
 * An in-process {@link AskResolver}: each ask parks until the paired
 * {@link Approver} answers it, the engine's signal aborts, or the approver is
 * closed or dropped.
 *
 * How `resolve()` settles:
 * - answered: resolves with the approver's resolution;
 * - `options.signal` aborts (the engine stopped waiting), before or during the wait:
 *   rejects with `signal.reason`; the ask is withdrawn and a later answer
 *   returns `false`. An ask whose signal was aborted before `resolve()` is
 *   never delivered;
 * - approver closed (now or earlier): resolves
 *   `{ type: "deny", reason: APPROVER_CLOSED_REASON }`;
 * - approver garbage-collected unclosed: resolves
 *   `{ type: "deny", reason: APPROVER_DROPPED_REASON }`;
 * - an ask id already parked here, or that ended here (among the last 256
 *   asks to end): rejects with a {@link DuplicateAskError}, so an answer
 *   meant for the other ask never lands on this one;
 * - an ask that does not parse with {@link PendingAskSchema}, no
 *   `AbortSignal`, or one that cannot be listened to (its `addEventListener`
 *   throws): rejects with an {@link InvalidPendingAskError}; nothing is
 *   parked.
 *
 * The approver is handed the ask as the schema reads it: a fresh copy,
 * without unknown fields, each getter read once, so nothing the caller does
 * to its object after parking changes what the approver sees.
 *
 * It never throws synchronously and never leaves the promise unsettled.
 *
 * @example
 * ```ts
 * const [channel, approver] = ApprovalChannel.pair(16);
 * managers = managers.withAskResolver(channel); // the engine parks asks here
 * for await (const ask of approver) approver.resolve(ask.id, { type: "approve" });
 * ```
 */
export class ApprovalChannel implements AskResolver {
  readonly #core: ChannelCore;

  private constructor(core: ChannelCore) {
    this.#core = core;
  }

  static {
    makeChannel = (core) => new this(core);
  }

  /**
   * Creates a connected channel and approver. `capacity` bounds the asks
   * delivered but not yet taken by `next()` (0 counts as 1); further asks wait
   * in line, in park order, and are never lost.
   *
   * @throws {InvalidCapacityError} if `capacity` is not a non-negative integer.
   */
  static pair(capacity: number): [ApprovalChannel, Approver] {
    if (typeof capacity !== "number" || !Number.isInteger(capacity) || capacity < 0) {
      throw new InvalidCapacityError(capacity);
    }
    const core = new ChannelCore(capacity);
    return [makeChannel(core), pairedApprover(core)];
  }

  /**
   * Asks parked here and awaiting an answer. A parked ask counts as soon as
   * `resolve()` returns; a refused one never does.
   */
  get size(): number {
    return this.#core.pending;
  }

  /** True once the paired approver was closed or dropped; every new ask is then denied at once. */
  get closed(): boolean {
    return this.#core.closed;
  }

  /** Parks `ask` until it is answered; see the class notes for every outcome. */
  resolve(ask: PendingAsk, options: ResolveOptions): Promise<AskResolution> {
    try {
      // Untyped callers may omit `options`; the park turns that into a rejection.
      const signal: unknown = (options as ResolveOptions | undefined)?.signal;
      return this.#core.park(parsePendingAsk(ask), signal, answerNotice(options, this));
    } catch (error) {
      if (error instanceof InvalidPendingAskError) return Promise.reject(error);
      // A proxy or a throwing getter handed in by an untyped caller: reject, never throw.
      return Promise.reject(new InvalidPendingAskError("the ask or its options could not be read", { cause: error }));
    }
  }
}
