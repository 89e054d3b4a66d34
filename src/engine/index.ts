/**
 * `loopctl/engine`: the approvals gate and the agent loop around it: tools,
 * the model interface, hooks, the park, dispatch middleware (permission
 * rules), pre-detection (loop detector, circuit breaker, budget) and observers.
 *
 * @packageDocumentation
 */
export { Gate } from "./gate.js";
export type { GateExecute, GateOutcome, GateRequest } from "./gate.js";
export { GATE_VERDICTS, RULE_SOURCES, GateDecisionSchema } from "./records.js";
export type { GateDecision, GateVerdict, RuleSource } from "./records.js";
export { Agent } from "./agent.js";
export type { AgentOptions, RunOptions, RunResult, ToolSource } from "./agent.js";
export { LoopManagers } from "./managers.js";
export { defineTool } from "./tool.js";
export type { JsonSchema, Tool, ToolContext, ToolDefinition } from "./tool.js";
export type { ArgumentCheck } from "./validation.js";
export type { ToolDescriptor } from "../grant/index.js";
export { MessageSchema, ModelResponseSchema, TOOL_RESULT_STATUSES, ToolCallSchema } from "./model.js";
export type {
  AssistantMessage,
  Message,
  Model,
  ModelRequest,
  ModelResponse,
  ToolCall,
  ToolResultMessage,
  ToolResultStatus,
  Usage,
  UserMessage,
} from "./model.js";
export { HookDecisionSchema } from "./hooks.js";
export type { Hook, HookContext, HookDecision } from "./hooks.js";
export type { DispatchResult, Middleware, MiddlewareContext, MiddlewareDecision } from "./middleware.js";
export { permissionMiddleware } from "./permission.js";
export type { ArgPattern, PermissionOptions, PermissionRule } from "./permission.js";
export type {
  GateEvent,
  GrantErrorEvent,
  ModelRequestEvent,
  ModelResponseEvent,
  Observer,
  ObserverErrorHandler,
  ObserverEventName,
  ToolPostEvent,
  ToolPreEvent,
} from "./observer.js";
export { BREAKER_OPEN_TEXT } from "./breaker.js";
export type { CircuitBreakerOptions } from "./breaker.js";
export { DEFAULT_MAX_TURNS } from "./budget.js";
export type { BudgetOptions } from "./budget.js";
export type { LoopDetectionOptions } from "./loop-detector.js";
export { randomIdGen, seededIdGen } from "./ids.js";
export type { IdGen } from "./ids.js";
export { systemClock } from "./clock.js";
export type { Clock, ClockInput, TimerHandle } from "./clock.js";
export {
  BudgetExceededError,
  CancelledError,
  EngineConfigError,
  LoopDetectedError,
  ModelError,
  RunConfigError,
  RunStoppedError,
  ToolDefinitionError,
} from "./errors.js";
export type { BudgetKind } from "./errors.js";
