import type { ToolDescriptor } from "../grant/index.js";
import type { ToolCall } from "./model.js";

/**
 * How the dispatch chain ended: the tool `ran` (with its output) or
 * `failed` (it threw), or the call was `refused` (with the text the model
 * receives). A middleware returns what `next()` gave it, or a refusal made
 * by `context.deny`: anything else is a failing middleware, which denies.
 */
export type DispatchResult =
  | { readonly type: "ran"; readonly output: unknown }
  | { readonly type: "failed"; readonly error: unknown }
  | { readonly type: "refused"; readonly message: string };

/** A middleware's decision, recorded as a gate record with `ruleSource: "middleware"`. */
export interface MiddlewareDecision {
  /** The rule that decided; becomes the record's `ruleId`. */
  readonly ruleId: string;
  readonly matchedPattern?: string | null;
  readonly reason?: string | null;
}

/** What a middleware sees besides the call; frozen, like a hook's context. */
export interface MiddlewareContext {
  readonly turn: number;
  readonly callId: string;
  readonly sessionId: string;
  readonly runId: string;
  readonly descriptor: ToolDescriptor;
  /** `argsDigest` of the call's arguments (the approved ones). */
  readonly argsDigest: string;
  /** `argsSha256` of the same arguments. */
  readonly argsSha256: string;
  readonly signal: AbortSignal;
  /**
   * Refuses the call: records a `deny` (which displaces any approval record)
   * and returns the refusal to hand back instead of calling `next`. Once
   * `next()` has started the tool, it withholds the tool's output instead:
   * the model gets the refusal, and the record keeps the decision that let
   * the call run, its `reason` saying the output was withheld.
   * @throws {EngineConfigError} naming `MiddlewareContext.deny` when
   *   `decision` is not one (a `ruleId` that is not a non-empty string, a
   *   `message` that is not a string, a `reason` or `matchedPattern` that is
   *   neither a string nor null, another key): thrown out of the middleware,
   *   it denies the call like any middleware failure.
   */
  deny(decision: MiddlewareDecision & { readonly message: string }): DispatchResult;
  /**
   * Records that a rule allowed the call. It replaces a plain hook `allow`
   * record; an approval, a grant or a modification keeps its own record.
   * @throws {EngineConfigError} naming `MiddlewareContext.allow` when
   *   `decision` is not one, as `deny` does.
   */
  allow(decision: MiddlewareDecision): void;
}

/**
 * One link of the dispatch chain, after the gate allowed the call and before
 * the tool: call `next()` to continue, or return `context.deny(…)`. The call
 * is frozen and `next` takes no new one: the tool runs with exactly the
 * arguments that were validated, digested and approved. A middleware that
 * throws denies the call. Once `next()` has started the tool, nothing makes
 * the call read as not run: a deny, a throw or another result then only
 * withholds the tool's output.
 */
export type Middleware = (
  call: ToolCall,
  context: MiddlewareContext,
  next: () => Promise<DispatchResult>,
) => DispatchResult | Promise<DispatchResult>;
