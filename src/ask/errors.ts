import { LoopctlError, shownValue } from "../errors.js";
import { shownText } from "../shown.js";

/**
 * A resolution that is not a valid {@link AskResolution}: passed to
 * `Approver.resolve`, or returned by a {@link SyncAskResolver} callback.
 * `code` is `"ASK_RESOLUTION_INVALID"`; `askId` names the ask it was meant for.
 *
 * @example
 * ```ts
 * try { approver.resolve(id, { type: "maybe" } as never); }
 * catch (err) { if (err instanceof InvalidAskResolutionError) console.error(err.askId); }
 * ```
 */
export class InvalidAskResolutionError extends LoopctlError {
  /**
   * The id of the ask the invalid resolution was meant for, as text (an
   * untyped caller's id that is not a string is given as `String(id)`).
   */
  readonly askId: string;

  constructor(askId: unknown, detail: string, options?: ErrorOptions) {
    const id = printed(askId);
    super("ASK_RESOLUTION_INVALID", `invalid resolution for ask ${shownId(id)}: ${detail}`, options);
    this.askId = id;
  }
}

/**
 * An ask id from an untyped caller as text. A symbol
 * has no implicit string form and an object's `toString` may throw or be
 * missing: naming the value must never turn the caller's typed error into a
 * `TypeError`.
 */
function printed(value: unknown): string {
  if (typeof value === "string") return value;
  try {
    return String(value);
  } catch {
    return `(an unprintable ${typeof value})`;
  }
}

/**
 * An id as a message shows it: as it is when it is plain printable ASCII (a UUID), else in double
 * quotes and escapes ({@link shownText}), so an id taken from a request can neither start a line
 * of its own in a log nor read as another id.
 */
function shownId(id: string): string {
  return /^[\x20-\x7e]*$/.test(id) ? id : shownText(id);
}

/**
 * A {@link SyncAskResolver} callback threw. `code` is `"ASK_CALLBACK_FAILED"`;
 * the thrown value is the `cause`. The engine treats the rejection as a denial.
 */
export class AskCallbackError extends LoopctlError {
  /** The id of the ask whose callback threw. */
  readonly askId: string;

  constructor(askId: string, tool: string, options?: ErrorOptions) {
    super(
      "ASK_CALLBACK_FAILED",
      `ask resolver callback threw for ask ${shownId(askId)} (tool ${shownText(tool)})`,
      options,
    );
    this.askId = askId;
  }
}

/**
 * `ApprovalChannel.pair` was given a capacity that is not a non-negative
 * integer. `code` is `"ASK_CAPACITY_INVALID"`.
 */
export class InvalidCapacityError extends LoopctlError {
  /** The rejected capacity, as given. */
  readonly capacity: unknown;

  constructor(capacity: unknown) {
    super(
      "ASK_CAPACITY_INVALID",
      `approval channel capacity must be a non-negative integer, got ${shownValue(capacity)}`,
    );
    this.capacity = capacity;
  }
}

/**
 * An ask was parked on an {@link ApprovalChannel} under an id that another
 * ask still parked there has, or that an ask which ended there had (among
 * the last 256 to end): an answer meant for that one would otherwise land on
 * this one. `code` is `"ASK_DUPLICATE_ID"`. The second park rejects (the
 * engine denies it); the first is untouched.
 */
export class DuplicateAskError extends LoopctlError {
  /** The id that was already taken. */
  readonly askId: string;

  /** @param state - whether the ask that has the id is still `parked`, or has `ended`. */
  constructor(askId: string, state: "parked" | "ended" = "parked") {
    super(
      "ASK_DUPLICATE_ID",
      state === "parked"
        ? `ask ${askId} is already parked on this approval channel`
        : `ask ${askId} already ended on this approval channel; ask ids must not be reused`,
    );
    this.askId = askId;
  }
}

/**
 * A {@link SyncAskResolver} was constructed without a callback function.
 * `code` is `"ASK_CALLBACK_INVALID"`.
 */
export class InvalidAskCallbackError extends LoopctlError {
  constructor(callback: unknown) {
    super(
      "ASK_CALLBACK_INVALID",
      `SyncAskResolver needs a callback (ask) => boolean | AskResolution, got ${typeof callback}`,
    );
  }
}

/**
 * An {@link ApprovalChannel} was asked to park something that does not parse
 * as a {@link PendingAsk} (the message names the fields at fault), without
 * an `AbortSignal`, or with one that cannot be listened to (`cause`: what it
 * threw) or whose `reason` cannot be read once it aborts (`cause`: what its
 * getter threw). `code` is `"ASK_INVALID"`. The park rejects (the engine denies it)
 * and nothing is parked.
 */
export class InvalidPendingAskError extends LoopctlError {
  constructor(detail: string, options?: ErrorOptions) {
    super("ASK_INVALID", `cannot park on the approval channel: ${detail}`, options);
  }
}

/**
 * `next` or `ended` of an {@link Approver} (or `next`, `ended` or `caughtUp`
 * of a Postgres queue's approver) was given options that are not an object or hold a key other
 * than `signal`, or a `signal` that is
 * not an `AbortSignal` or cannot be listened to (its `addEventListener`
 * throws; `cause`: what it threw), or that aborted with a `reason` that
 * cannot be read (`cause`: what its getter threw); or `resolve` was given options that are
 * not an object or hold a key other than `askDigest`, or an `askDigest` that is not 64
 * lowercase hex digits.
 * `code` is `"ASK_OPTIONS_INVALID"`; `argument` names the argument at fault.
 * The call fails with it, leaves nothing waiting and answers nothing.
 *
 * @example
 * ```ts
 * approver.next({ signal: "soon" } as never).catch((err) => {
 *   if (err instanceof InvalidApproverOptionsError) console.error(err.argument); // "options.signal"
 * });
 * ```
 */
export class InvalidApproverOptionsError extends LoopctlError {
  /** The method that was called. */
  readonly method: "next" | "ended" | "caughtUp" | "resolve";
  /** The argument at fault. */
  readonly argument: "options" | "options.signal" | "options.askDigest";

  constructor(
    method: "next" | "ended" | "caughtUp" | "resolve",
    argument: "options" | "options.signal" | "options.askDigest",
    detail: string,
    options?: ErrorOptions,
  ) {
    super("ASK_OPTIONS_INVALID", `Approver.${method}: ${argument} ${detail}`, options);
    this.method = method;
    this.argument = argument;
  }
}

/**
 * {@link callPrompt} was given options it cannot render with: options that
 * are not an object (an `AbortSignal` included) or hold a key that is not an
 * option (a misspelt `redact` would leave its secrets shown), a
 * `maxArgsChars` that is not a positive integer, a `redact` that is not a
 * function or `false`, or `notes` that are not an array of strings. `code` is
 * `"ASK_PROMPT_OPTIONS_INVALID"`; `argument` names the option at fault.
 *
 * @example
 * ```ts
 * try { callPrompt(descriptor, input, { maxArgsChars: 0 }); }
 * catch (err) { if (err instanceof InvalidCallPromptOptionsError) console.error(err.argument); } // "options.maxArgsChars"
 * ```
 */
export class InvalidCallPromptOptionsError extends LoopctlError {
  /** The option at fault; `"options"` for options that are not an object, or hold an unknown option. */
  readonly argument: "options" | "options.maxArgsChars" | "options.redact" | "options.notes";

  constructor(argument: "options" | "options.maxArgsChars" | "options.redact" | "options.notes", detail: string) {
    super("ASK_PROMPT_OPTIONS_INVALID", `callPrompt: ${argument} ${detail}`);
    this.argument = argument;
  }
}

/**
 * `new Approver(…)` was called: an approver comes only from
 * `ApprovalChannel.pair`, which connects it to its channel.
 * `code` is `"ASK_APPROVER_CONSTRUCTOR"`.
 */
export class ApproverConstructorError extends LoopctlError {
  constructor() {
    super("ASK_APPROVER_CONSTRUCTOR", "an Approver cannot be constructed directly; use ApprovalChannel.pair(capacity)");
  }
}
