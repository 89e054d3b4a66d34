import { LoopctlError, describeError } from "../errors.js";
import { optionsProblem, shownKey, type EveryKey } from "../unknown-option.js";
import type { Message } from "./model.js";
import type { GateDecision } from "./records.js";

export { describeError } from "../errors.js";

/**
 * An error that ended a run. Besides its `code`, it carries what the run had
 * produced when it stopped, so nothing is lost: `records` (every gate record
 * emitted, in order) and `messages` (the transcript, including the error
 * results the model would have received).
 */
export class RunStoppedError extends LoopctlError {
  /** The run's gate records up to the stop, in emission order. */
  readonly records: readonly GateDecision[] = [];
  /** The run's transcript up to the stop. */
  readonly messages: readonly Message[] = [];
}

/** Fills in what the run produced before it stopped; internal to the engine. */
export function attachTranscript(
  error: RunStoppedError,
  records: readonly GateDecision[],
  messages: readonly Message[],
): void {
  const writable = error as { records: readonly GateDecision[]; messages: readonly Message[] };
  writable.records = [...records];
  writable.messages = [...messages];
}

/**
 * The run's `AbortSignal` fired. `code` is `"CANCELLED"`; `cause` is the
 * signal's reason.
 */
export class CancelledError extends RunStoppedError {
  constructor(message = "the run was cancelled", options?: ErrorOptions) {
    super("CANCELLED", message, options);
  }
}

/**
 * Pre-detection stopped the run: the same call (tool and `argsSha256`)
 * reached pre-detection more often than `withLoopDetection({ maxRepeats })`
 * allows: on its way to dispatch, or at its refusal as a call to an unknown
 * tool, with arguments that fail its schema, or with arguments that are not
 * JSON values (all such arguments of one tool count as the same call). `code` is `"LOOP_DETECTED"`.
 */
export class LoopDetectedError extends RunStoppedError {
  /** The repeated tool. */
  readonly tool: string;
  /** The repeated call's `argsDigest`, for display (`""` when its arguments are not JSON values); calls are told apart by `argsSha256`. */
  readonly argsDigest: string;
  /** How many times the call reached pre-detection, this one included. */
  readonly repeats: number;

  constructor(tool: string, argsDigest: string, repeats: number) {
    super(
      "LOOP_DETECTED",
      argsDigest === ""
        ? `loop detected: tool ${shownKey(tool)} called ${repeats} times with arguments that are not JSON values`
        : `loop detected: tool ${shownKey(tool)} called ${repeats} times with the same arguments (${argsDigest})`,
    );
    this.tool = tool;
    this.argsDigest = argsDigest;
    this.repeats = repeats;
  }
}

/** Which budget ran out. */
export type BudgetKind = "turns" | "tokens";

/**
 * The budget gate stopped the run before a model request
 * (`withBudget({ maxTurns, maxTokens })`). `code` is `"BUDGET_EXCEEDED"`.
 */
export class BudgetExceededError extends RunStoppedError {
  /** The budget that ran out. */
  readonly kind: BudgetKind;
  /** The configured limit. */
  readonly limit: number;
  /** What the run had used when it was stopped. */
  readonly used: number;

  constructor(kind: BudgetKind, limit: number, used: number) {
    super(
      "BUDGET_EXCEEDED",
      `${kind === "turns" ? "turn" : "token"} budget exhausted: ${used} of ${limit} ${kind} used`,
    );
    this.kind = kind;
    this.limit = limit;
    this.used = used;
  }
}

/**
 * The model failed: `generate` threw or answered something that is not a
 * model response. `code` is `"MODEL_ERROR"`; `cause` is what it threw.
 */
export class ModelError extends RunStoppedError {
  constructor(message: string, options?: ErrorOptions) {
    super("MODEL_ERROR", message, options);
  }
}

/**
 * Something the agent was configured with failed during a run, after the
 * run may have made records: a `ToolSource` whose `current()` throws or
 * gives no valid list of tools, or an id generator that throws or gives no
 * UUID. `code` is `"RUN_CONFIG"`; `option` names the seam at fault
 * (`"ToolSource.current"`, `"withIdGen"`); `cause` is what it threw (or the
 * `ToolDefinitionError` its tools made).
 */
export class RunConfigError extends RunStoppedError {
  /** The seam at fault, such as `"ToolSource.current"`. */
  readonly option: string;

  constructor(option: string, message: string, options?: ErrorOptions) {
    super("RUN_CONFIG", `${option}: ${message}`, options);
    this.option = option;
  }
}

/**
 * A tool definition (or a set of tools handed to an `Agent`) is invalid:
 * an empty or duplicate name, an unsupported JSON Schema keyword, a schema
 * that is not an object schema. `code` is `"TOOL_DEFINITION"`.
 */
export class ToolDefinitionError extends LoopctlError {
  /** The tool at fault (its name as given, possibly empty). */
  readonly tool: string;

  constructor(tool: string, message: string, options?: ErrorOptions) {
    super("TOOL_DEFINITION", `tool ${shownKey(tool)}: ${message}`, options);
    this.tool = tool;
  }
}

/**
 * An engine option is invalid (a negative timeout, a hook without
 * `preToolUse`, a permission rule without an id…). `code` is
 * `"ENGINE_CONFIG"`; the message names the option.
 */
export class EngineConfigError extends LoopctlError {
  /** The option at fault, such as `"withAskTimeout"`. */
  readonly option: string;

  constructor(option: string, message: string, options?: ErrorOptions) {
    super("ENGINE_CONFIG", `${option}: ${message}`, options);
    this.option = option;
  }
}

/**
 * Runs `read` over what an untyped caller handed to `option`. A loopctl error
 * it throws stands; anything else its reads throw (a getter, a revoked proxy)
 * is an {@link EngineConfigError} naming `option`: "`what` cannot be read",
 * with what was thrown as `cause`. Internal to the engine.
 */
export function readingConfig<T>(option: string, what: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (error instanceof LoopctlError) throw error;
    throw new EngineConfigError(option, `${what} cannot be read: ${describeError(error)}`, { cause: error });
  }
}

/** The turn and token caps: options the peers take on their agent or run, loopctl's in a budget. */
const CAP_OPTIONS = new Set(["maxTurns", "maxTokens", "maxSteps"]);
const CAP_HINT = "a run's turn and token caps are set with LoopManagers.withBudget({ maxTurns, maxTokens })";

/**
 * Refuses `given` (named `what`) unless an object of the options `known`,
 * every key of its type ({@link optionsProblem}): an option never read would
 * be silently ignored. A turn or token cap is pointed to `withBudget` when
 * `caps`. Keys that cannot be listed throw what listing them threw, for
 * {@link readingConfig} to name. Internal to the engine.
 * @throws {EngineConfigError} naming `option`.
 */
export function knownKeys<T, const K extends readonly (keyof T & string)[]>(
  option: string,
  given: T,
  known: EveryKey<T, K>,
  wording: { readonly what?: string; readonly shape?: string; readonly caps?: boolean } = {},
): void {
  const hint = (key: string): string | undefined => (wording.caps && CAP_OPTIONS.has(key) ? CAP_HINT : undefined);
  const wrong = optionsProblem(given, known, { shape: wording.shape, hint });
  if (wrong && "cause" in wrong) throw wrong.cause;
  const what = wording.what ?? "options";
  if (wrong) throw new EngineConfigError(option, wrong.key === undefined ? `${what} ${wrong.problem}` : wrong.problem);
}
