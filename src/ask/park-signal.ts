import type { ResolveOptions } from "./types.js";

/** Where a park's options keep their {@link ParkSignal}. */
const PARK = Symbol("loopctl.park");

/** Where options made by {@link passAnswerNotice} keep the notice they pass on. */
const NOTICE = Symbol("loopctl.answerNotice");

/**
 * The signal the engine hands a resolver for one park, made only when the
 * resolver first reads `options.signal`: a resolver that answers without
 * reading it costs no controller and nothing to abort. Once made, it aborts
 * the moment the park ends, however it ends; made after that, it comes back
 * already aborted, with the same reason. The reason is the cancel's own when
 * a cancel ended the park, otherwise an `Error` saying which ask ended and
 * how (`ask <id> expired`, `ask <id> was approved`, …). Internal.
 */
export class ParkSignal {
  readonly #askId: string;
  /** The resolver the engine handed the park to: the only one whose answer it takes at once. */
  #resolver: object | undefined;
  #controller: AbortController | undefined;
  #ending: { readonly reason: unknown } | { readonly why: string } | undefined;
  /**
   * What the resolver gets: `signal` is an own, enumerable getter, so a copy
   * (`{ ...options }`) still has it. The park itself is not enumerable: a
   * copy that replaces `signal` is judged by the signal it carries.
   */
  readonly options: ResolveOptions;

  /** @param resolver - the resolver the park is handed to (see {@link answerNotice}). */
  constructor(askId: string, resolver?: object) {
    this.#askId = askId;
    this.#resolver = resolver;
    const signal = (): AbortSignal => this.#signal();
    this.options = Object.defineProperty(
      {
        get signal(): AbortSignal {
          return signal();
        },
      },
      PARK,
      { value: this },
    );
  }

  /**
   * Told, synchronously, of an answer the resolver has accepted for the
   * park (an `ApprovalChannel` whose approver was told `true`), so the
   * answer is the park's even when a cancel or the deadline follows before
   * the resolver's promise is read. Set by the engine. Internal.
   */
  onAnswer: ((resolution: unknown) => void) | undefined;

  /** Whether `resolver` is the one the park was handed to. */
  isFor(resolver: object): boolean {
    return this.#resolver !== undefined && this.#resolver === resolver;
  }

  /** Makes `to` the resolver the park was handed to, if `from` is: `from` passes its asks to `to` and returns its answers unchanged. */
  handOver(from: object, to: object): void {
    if (this.isFor(from)) this.#resolver = to;
  }

  /** Whether the park has ended. */
  get ended(): boolean {
    return this.#ending !== undefined;
  }

  /** The park ended with the cancel: the signal aborts with the cancel's reason. */
  cancelled(reason: unknown): void {
    this.#ending = { reason };
    this.#controller?.abort(reason);
  }

  /** The park ended as `why` says (`"expired"`, `"was approved"`, …): the signal aborts with an error saying so. */
  end(why: string): void {
    this.#ending = { why };
    this.#controller?.abort(this.#reason());
  }

  #reason(): unknown {
    const ending = this.#ending!;
    return "reason" in ending ? ending.reason : new Error(`ask ${this.#askId} ${ending.why}`);
  }

  #signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#ending !== undefined) this.#controller.abort(this.#reason());
    }
    return this.#controller.signal;
  }
}

/**
 * Whether the wait `options` came with has already ended: for a park's own
 * options, known without making its signal; otherwise (a copy included,
 * which may carry a signal of its own) `options.signal.aborted`.
 */
export function waitEnded(options: ResolveOptions | undefined): boolean {
  const park = (options as { readonly [PARK]?: unknown } | undefined)?.[PARK];
  return park instanceof ParkSignal ? park.ended : options?.signal?.aborted === true;
}

/**
 * The synchronous notice of an answer for the park `options` came with
 * (see {@link ParkSignal.onAnswer}), if they carry its notice (see
 * {@link passAnswerNotice}), or are a park's own and `resolver` (the one
 * asking) is the resolver the engine handed the park to. A resolver of the
 * user's own that passes the park's options on to a channel may still change
 * the channel's answer (deny what one approver approved, wait for a second
 * approver): the channel's answer is then not the park's, and the park waits
 * for what that resolver returns. Internal.
 */
export function answerNotice(
  options: ResolveOptions | undefined,
  resolver: object,
): ((resolution: unknown) => void) | undefined {
  const held = options as { readonly [PARK]?: unknown; readonly [NOTICE]?: unknown } | undefined;
  const passed = held?.[NOTICE];
  if (typeof passed === "function") return passed as (resolution: unknown) => void;
  const park = held?.[PARK];
  if (!(park instanceof ParkSignal) || !park.isFor(resolver)) return undefined;
  return (resolution) => park.onAnswer?.(resolution);
}

/**
 * For a resolver `from` that hands the park `options` came with to `to`
 * and returns `to`'s answers unchanged: `to`'s answer is then the park's at
 * once, as if the engine had handed the park to `to` itself. Internal.
 */
export function handOverPark(options: ResolveOptions | undefined, from: object, to: object): void {
  const park = (options as { readonly [PARK]?: unknown } | undefined)?.[PARK];
  if (park instanceof ParkSignal) park.handOver(from, to);
}

/**
 * Options with a `signal` of their own that still carry `notice` (from
 * {@link answerNotice}), for a resolver that parks on an `ApprovalChannel`
 * under a signal of its own (`WebhookResolver`): the answer its approver is
 * told landed is then the engine's park's at once, as for a channel the
 * engine parks on itself. Internal.
 */
export function passAnswerNotice(
  signal: AbortSignal,
  notice: ((resolution: unknown) => void) | undefined,
): ResolveOptions {
  const options: ResolveOptions = { signal };
  return notice === undefined ? options : Object.defineProperty(options, NOTICE, { value: notice });
}
