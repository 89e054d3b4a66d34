/**
 * `loopctl/engine`: the agent loop and its approvals gate: tools, the model
 * interface, hooks, the park, dispatch middleware (permission rules),
 * pre-detection (loop detector, circuit breaker, budget) and observers.
 *
 * @packageDocumentation
 */
export { GATE_VERDICTS, RULE_SOURCES, GateDecisionSchema } from "./records.js";
export type { GateDecision, GateVerdict, RuleSource } from "./records.js";
export { Agent } from "./agent.js";
export type { AgentOptions, RunOptions, RunResult } from "./agent.js";
export { LoopManagers } from "./managers.js";
export type { ManagerSettings } from "./managers.js";
export { defineTool } from "./tool.js";
export type { ArgumentCheck, JsonSchema, Tool, ToolContext, ToolDefinition } from "./tool.js";
export { SUPPORTED_JSON_SCHEMA_KEYWORDS } from "./json-schema.js";
export { ModelResponseSchema } from "./model.js";
export type {
  AssistantMessage,
  Message,
  Model,
  ModelRequest,
  ModelResponse,
  ToolCall,
  ToolResultMessage,
  Usage,
  UserMessage,
} from "./model.js";
export { HookDecisionSchema } from "./hooks.js";
export type { Hook, HookContext, HookDecision } from "./hooks.js";
export type { Middleware, MiddlewareContext, MiddlewareDecision, ToolResult } from "./middleware.js";
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
  RunStoppedError,
  ToolDefinitionError,
} from "./errors.js";
export type { BudgetKind } from "./errors.js";
