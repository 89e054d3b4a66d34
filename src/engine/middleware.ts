import type { ToolDescriptor } from "../grant/index.js";
import type { ToolCall } from "./model.js";

/** What a dispatched call produced: the text the model receives, and whether it is an error. */
export interface ToolResult {
  readonly content: string;
  readonly isError: boolean;
}

/** A middleware's decision, recorded as a gate record with `ruleSource: "middleware"`. */
export interface MiddlewareDecision {
  /** The rule that decided; becomes the record's `ruleId`. */
  readonly ruleId: string;
  readonly matchedPattern?: string | null;
  readonly reason?: string | null;
}

/** What a middleware sees besides the call. */
export interface MiddlewareContext {
  readonly turn: number;
  readonly callId: string;
  readonly sessionId: string;
  readonly runId: string;
  readonly descriptor: ToolDescriptor;
  /** `argsDigest` of the call's input as it entered the dispatch pipeline. */
  readonly argsDigest: string;
  readonly signal: AbortSignal;
  /**
   * Refuses the call: records a `deny` (which displaces any approval record)
   * and returns the error result to hand back instead of calling `next`.
   */
  deny(decision: MiddlewareDecision & { readonly message: string }): ToolResult;
  /**
   * Records that a rule allowed the call. It replaces a plain hook `allow`
   * record; an approval, a grant or a modification keeps its own record.
   */
  allow(decision: MiddlewareDecision): void;
}

/**
 * One link of the dispatch chain, after argument validation and before the
 * tool: call `next(call)` to continue (possibly with a changed call), or
 * return a result without calling it. A middleware that throws denies the call.
 */
export type Middleware = (
  call: ToolCall,
  context: MiddlewareContext,
  next: (call: ToolCall) => Promise<ToolResult>,
) => ToolResult | Promise<ToolResult>;
