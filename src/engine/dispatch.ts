import { describeError } from "./errors.js";
import type { Middleware, MiddlewareContext, MiddlewareDecision, ToolResult } from "./middleware.js";
import type { ToolCall } from "./model.js";
import type { Tool, ToolContext } from "./tool.js";

/** Receives the decisions middleware makes, so the gate can land the deciding record. */
export interface DecisionSink {
  middlewareDeny(decision: MiddlewareDecision): void;
  middlewareAllow(decision: MiddlewareDecision): void;
}

/** What dispatch produced, and whether the tool itself ran (for the circuit breaker). */
export interface DispatchOutcome {
  readonly result: ToolResult;
  readonly execution: "none" | "succeeded" | "failed";
}

/** Everything {@link dispatch} needs. */
export interface DispatchRequest {
  readonly tool: Tool;
  readonly call: ToolCall;
  readonly argsDigest: string;
  readonly middleware: readonly Middleware[];
  readonly sink: DecisionSink;
  readonly toolContext: ToolContext;
}

/** The model's text for arguments that failed validation. */
export function invalidArgumentsText(tool: string, problems: readonly string[]): string {
  return `Invalid arguments for tool '${tool}': ${problems.join("; ")}`;
}

function toContent(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === undefined) return "";
  const text = JSON.stringify(value);
  if (typeof text !== "string") throw new TypeError("the tool's result has no JSON form");
  return text;
}

/**
 * The dispatch pipeline, the same for every call whether or not it was
 * approved: argument validation → middleware chain → `execute`. Middleware
 * may hand `next` a changed call; its arguments are validated again, so
 * `execute` only ever sees arguments its schema accepts.
 */
export async function dispatch(request: DispatchRequest): Promise<DispatchOutcome> {
  const { tool, call, argsDigest, middleware, sink, toolContext } = request;
  const first = tool.check(call.input);
  if (first.type === "invalid") {
    return { result: { content: invalidArgumentsText(tool.name, first.problems), isError: true }, execution: "none" };
  }

  let execution: DispatchOutcome["execution"] = "none";
  let denied = false;
  const context: MiddlewareContext = {
    turn: toolContext.turn,
    callId: toolContext.callId,
    sessionId: toolContext.sessionId,
    runId: toolContext.runId,
    descriptor: tool.descriptor,
    argsDigest,
    signal: toolContext.signal,
    deny: (decision) => {
      denied = true;
      sink.middlewareDeny(decision);
      return { content: decision.message, isError: true };
    },
    allow: (decision) => sink.middlewareAllow(decision),
  };

  const terminal = async (finalCall: ToolCall): Promise<ToolResult> => {
    if (denied) return { content: `Permission denied by middleware for tool '${tool.name}'`, isError: true };
    const checked = finalCall.input === call.input ? first : tool.check(finalCall.input);
    if (checked.type === "invalid") return { content: invalidArgumentsText(tool.name, checked.problems), isError: true };
    try {
      const value = await tool.execute(checked.value, toolContext);
      const content = toContent(value);
      execution = "succeeded";
      return { content, isError: false };
    } catch (error) {
      execution = "failed";
      return { content: `Tool '${tool.name}' failed: ${describeError(error)}`, isError: true };
    }
  };

  const link = (index: number, current: ToolCall): Promise<ToolResult> => {
    const mw = middleware[index];
    if (mw === undefined) return terminal(current);
    let called = false;
    const next = (nextCall: ToolCall): Promise<ToolResult> => {
      if (called) return Promise.resolve({ content: `middleware called next twice for tool '${tool.name}'`, isError: true });
      called = true;
      return link(index + 1, nextCall ?? current);
    };
    return Promise.resolve().then(() => mw(current, context, next));
  };

  let result: ToolResult;
  try {
    result = await link(0, call);
    if (typeof result !== "object" || result === null || typeof result.content !== "string" || typeof result.isError !== "boolean") {
      throw new TypeError("middleware returned something that is not a tool result");
    }
  } catch (error) {
    // A failing middleware must not let the call through, nor lose the refusal.
    const reason = `middleware failed: ${describeError(error)}`;
    if (!denied) {
      denied = true;
      sink.middlewareDeny({ ruleId: "middleware", matchedPattern: null, reason });
    }
    return { result: { content: `Permission denied: ${reason} for tool '${tool.name}'`, isError: true }, execution };
  }
  return { result, execution };
}
