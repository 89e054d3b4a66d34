import { EngineConfigError, describeError, knownKeys, readingConfig } from "./errors.js";
import { everyKey, shownKey } from "../unknown-option.js";
import type { DispatchResult, Middleware, MiddlewareContext, MiddlewareDecision } from "./middleware.js";
import type { ToolCall } from "./model.js";

/** Receives the decisions middleware makes, so the gate can land the deciding record. */
export interface DecisionSink {
  middlewareDeny(decision: MiddlewareDecision): void;
  middlewareAllow(decision: MiddlewareDecision): void;
  /** The tool ran, but the chain refused its output (`reason`): the record says it ran, and why the output went. */
  outputWithheld(reason: string): void;
}

/** What the chain gave, and how the tool itself ended if it ran (for the circuit breaker). */
export interface DispatchOutcome {
  readonly result: DispatchResult;
  readonly execution: "none" | "succeeded" | "failed";
}

/** Everything {@link dispatch} needs besides the chain. */
export interface DispatchRequest {
  readonly call: ToolCall;
  readonly middleware: readonly Middleware[];
  readonly context: Omit<MiddlewareContext, "deny" | "allow">;
  readonly sink: DecisionSink;
  /**
   * Runs the tool; a throw is its failure. Returns {@link NOT_STARTED}
   * instead when the tool may no longer start (the call has ended, or it was
   * cancelled): it decides at the moment the tool would start.
   */
  readonly run: () => unknown;
}

/** The fields of `context.deny`'s decision; `context.allow`'s are these but `message`. */
const DENY_FIELDS = everyKey<MiddlewareDecision & { readonly message: string }>()([
  "ruleId",
  "matchedPattern",
  "reason",
  "message",
]);
const ALLOW_FIELDS = everyKey<MiddlewareDecision>()(["ruleId", "matchedPattern", "reason"]);

/** A decision's optional text field: a string, or `null` when absent. */
function optionalText(where: string, field: string, value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") throw new EngineConfigError(where, `${field} must be a string or null`);
  return value;
}

/**
 * A middleware's decision, each field read once and checked: a record holds
 * strings only, so one that is not a decision is the middleware's failure
 * (it throws where the middleware called, which denies the call), never a
 * record that cannot land.
 * @throws {EngineConfigError} naming `MiddlewareContext.deny` or `.allow` and the field at fault.
 */
function checkedDecision(method: "deny", given: unknown): MiddlewareDecision & { readonly message: string };
function checkedDecision(method: "allow", given: unknown): MiddlewareDecision;
function checkedDecision(method: "deny" | "allow", given: unknown): MiddlewareDecision & { readonly message?: string } {
  const where = `MiddlewareContext.${method}`;
  return readingConfig(where, "the decision", () => {
    const shape =
      method === "deny" ? "{ ruleId, message, reason?, matchedPattern? }" : "{ ruleId, reason?, matchedPattern? }";
    const known = method === "deny" ? DENY_FIELDS : ALLOW_FIELDS;
    knownKeys(where, given as MiddlewareDecision & { readonly message: string }, known, {
      what: "the decision",
      shape,
    });
    const { ruleId, matchedPattern, reason, message } = given as Record<string, unknown>;
    if (typeof ruleId !== "string" || ruleId === "")
      throw new EngineConfigError(where, "ruleId must be a non-empty string");
    const decision = {
      ruleId,
      matchedPattern: optionalText(where, "matchedPattern", matchedPattern),
      reason: optionalText(where, "reason", reason),
    };
    if (method === "allow") return decision;
    if (typeof message !== "string") throw new EngineConfigError(where, "message must be a string");
    return { ...decision, message };
  });
}

/** What {@link DispatchRequest.run} gives when the tool may no longer start. */
export const NOT_STARTED: unique symbol = Symbol("not started");

/**
 * The middleware chain, then the tool. Whatever a middleware does (throws,
 * denies and still calls `next`, calls `next` twice, returns something
 * else, calls `next` after the call was cancelled), the tool runs at most
 * once, only when no middleware denied, and only if `run` lets it start.
 *
 * Once the tool has started, nothing can make the call read as not run: a
 * deny, a throw or a result other than the tool's withholds its output (the
 * chain's result is the refusal) and goes to the sink as `outputWithheld`,
 * never as a deny; the chain ends only when the tool has.
 */
export async function dispatch(request: DispatchRequest): Promise<DispatchOutcome> {
  const { call, middleware, sink, run } = request;
  // Without middleware the chain is only the tool: skip building it (a few µs per call, bench/gate.bench.ts).
  const tool = call.name;
  const notStarted = (): DispatchResult => ({
    type: "refused",
    message: `Tool ${shownKey(tool)} did not run: the call had ended`,
  });
  if (middleware.length === 0) {
    try {
      const output = run();
      if (output === NOT_STARTED) return { result: notStarted(), execution: "none" };
      return { result: { type: "ran", output: await output }, execution: "succeeded" };
    } catch (error) {
      return { result: { type: "failed", error }, execution: "failed" };
    }
  }
  const issued: DispatchResult[] = [];
  const issue = (result: DispatchResult): DispatchResult => (issued.push(result), result);
  let denied = false;
  let execution: DispatchOutcome["execution"] = "none";
  /** How the tool ended, once it has started. */
  let ending: Promise<DispatchResult> | undefined;
  /** The refusal that withholds the output of a tool that started, and its reason for the record. */
  let withheld: { readonly result: DispatchResult; readonly reason: string } | undefined;
  // Frozen, as a hook's is: every middleware after one that writes to it reads the gate's values.
  const context: MiddlewareContext = Object.freeze<MiddlewareContext>({
    ...request.context,
    deny: (given) => {
      const decision = checkedDecision("deny", given);
      const refusal = issue({ type: "refused", message: decision.message });
      if (ending !== undefined) {
        const why = decision.reason ?? null;
        withheld ??= {
          result: refusal,
          reason: `output withheld by middleware rule '${decision.ruleId}'${why === null ? "" : `: ${why}`}`,
        };
        return refusal;
      }
      denied = true;
      sink.middlewareDeny(decision);
      return refusal;
    },
    allow: (given) => sink.middlewareAllow(checkedDecision("allow", given)),
  });
  let ran = false;
  const start = (): Promise<DispatchResult> | undefined => {
    let started: unknown;
    try {
      started = run();
    } catch (error) {
      execution = "failed";
      return Promise.resolve({ type: "failed", error });
    }
    if (started === NOT_STARTED) return undefined;
    return Promise.resolve(started).then(
      (output): DispatchResult => ((execution = "succeeded"), { type: "ran", output }),
      (error: unknown): DispatchResult => ((execution = "failed"), { type: "failed", error }),
    );
  };
  const terminal = async (): Promise<DispatchResult> => {
    if (denied)
      return issue({ type: "refused", message: `Permission denied by middleware for tool ${shownKey(tool)}` });
    if (ran) return issue({ type: "refused", message: `middleware called next twice for tool ${shownKey(tool)}` });
    ran = true;
    ending = start();
    return issue(ending === undefined ? notStarted() : await ending);
  };
  // Async, so a middleware that throws synchronously rejects like one that rejects.
  const link = async (index: number): Promise<DispatchResult> => {
    const mw = middleware[index];
    return mw === undefined ? terminal() : mw(call, context, () => link(index + 1));
  };
  let result: DispatchResult;
  try {
    result = await link(0);
    if (!issued.includes(result)) throw new TypeError("returned something that is not the result of next() or deny()");
  } catch (error) {
    // A failing middleware must not let the call through, nor lose the refusal.
    const reason = `middleware failed: ${describeError(error)}`;
    result = { type: "refused", message: `Permission denied: ${reason} for tool ${shownKey(tool)}` };
    if (ending !== undefined) withheld ??= { result, reason: `output withheld: ${reason}` };
    else if (!denied) {
      denied = true;
      sink.middlewareDeny({ ruleId: "middleware", matchedPattern: null, reason });
    }
  }
  if (ending === undefined) return { result, execution };
  // The tool started: the call ends when it has (a middleware may have returned without waiting for it).
  const own = await ending;
  // A refusal handed back instead of the tool's result (what a second `next()` gave) withholds it too.
  if (withheld === undefined && result !== own && result.type === "refused")
    withheld = { result, reason: `output withheld: ${result.message}` };
  if (withheld === undefined) return { result: own, execution };
  sink.outputWithheld(withheld.reason);
  return { result: withheld.result, execution };
}
