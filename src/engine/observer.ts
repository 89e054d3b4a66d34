import type { GateOutcome } from "./gate.js";
import type { ModelResponse, Message, ToolCall } from "./model.js";
import type { GateDecision } from "./records.js";
import type { ToolDescriptor } from "../grant/index.js";

/** `onToolPre`: a tool-call attempt begins (`call.input` as the model sent it). */
export interface ToolPreEvent {
  readonly turn: number;
  readonly call: ToolCall;
}

/** `onGate`: a gate record landed. `callId` is `""` for run-level records (budget). */
export interface GateEvent {
  readonly turn: number;
  readonly callId: string;
  readonly decision: GateDecision;
}

/** `onToolPost`: the attempt ended (not on cancel); `call.input` is the snapshot the gate decided on. */
export interface ToolPostEvent {
  readonly turn: number;
  readonly call: ToolCall;
  readonly outcome: GateOutcome;
}

/** `onModelRequest`: the engine is about to ask the model for a turn. */
export interface ModelRequestEvent {
  readonly turn: number;
  readonly messages: readonly Message[];
  readonly tools: readonly ToolDescriptor[];
}

/** `onModelResponse`: the model answered a turn; `response` (frozen, its tool calls too) is what the run acts on. */
export interface ModelResponseEvent {
  readonly turn: number;
  readonly response: ModelResponse;
}

/** `onGrantError`: saving a remembered answer failed; the answer itself stands. */
export interface GrantErrorEvent {
  readonly turn: number;
  readonly callId: string;
  readonly error: unknown;
}

/**
 * Watches a run. Every method is optional and synchronous; a returned
 * promise (or other thenable) is not awaited, and its rejection is reported. An observer that throws never breaks a run: the
 * error is swallowed and passed to `withObserverErrorHandler`'s handler.
 *
 * Order within one tool-call attempt: `onToolPre` → (validation, hooks,
 * park, dispatch) → `onGate` → `onToolPost` (not on cancel). A `Gate` used
 * directly calls the same three; `onModelRequest` and `onModelResponse` come
 * from `Agent`.
 */
export interface Observer {
  onModelRequest?(event: ModelRequestEvent): void;
  onModelResponse?(event: ModelResponseEvent): void;
  onToolPre?(event: ToolPreEvent): void;
  onGate?(event: GateEvent): void;
  onToolPost?(event: ToolPostEvent): void;
  onGrantError?(event: GrantErrorEvent): void;
}

/** The observer callbacks by name. */
export type ObserverEventName = keyof Observer;

/** Every {@link ObserverEventName}, for the check of an observer's methods. Internal. */
export const OBSERVER_EVENTS = [
  "onModelRequest",
  "onModelResponse",
  "onToolPre",
  "onGate",
  "onToolPost",
  "onGrantError",
] as const satisfies readonly ObserverEventName[];

/** Receives errors thrown by observers. */
export type ObserverErrorHandler = (error: unknown, event: ObserverEventName) => void;

/** Whether `value` has a `then` method (reading it may throw: the caller catches). */
function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

/**
 * Calls `event` on every observer, isolating each one's failures. They share
 * one frozen payload: no observer changes what the ones after it receive
 * (an audit observer logs the record that landed).
 */
export function notify<K extends ObserverEventName>(
  observers: readonly Observer[],
  onError: ObserverErrorHandler | undefined,
  event: K,
  payload: Parameters<NonNullable<Observer[K]>>[0],
): void {
  if (observers.length === 0) return;
  Object.freeze(payload);
  for (const observer of observers) {
    const report = (error: unknown): void => {
      try {
        onError?.(error, event);
      } catch {
        // A failing error handler has nowhere left to report to.
      }
    };
    try {
      const method = observer[event] as ((arg: typeof payload) => unknown) | undefined;
      const returned: unknown = method?.call(observer, payload);
      // Any thenable, not only this realm's Promise: a rejection left unheard would be an unhandled one.
      if (isThenable(returned)) Promise.resolve(returned).catch(report);
    } catch (error) {
      report(error);
    }
  }
}
