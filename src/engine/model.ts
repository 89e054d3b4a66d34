import { z } from "zod";
import type { ToolDescriptor } from "../grant/index.js";

/** A tool call as the model emits it: the model's call id, the tool's name, the arguments. */
export interface ToolCall {
  readonly id: string;
  readonly name: string;
  readonly input: unknown;
}

/** Token usage of one model turn (or summed over a run). */
export interface Usage {
  readonly inputTokens: number;
  readonly outputTokens: number;
}

/** The user's text that starts a run. */
export interface UserMessage {
  readonly type: "user";
  readonly text: string;
}

/** One model turn: optional text and the tool calls it made (possibly none). */
export interface AssistantMessage {
  readonly type: "assistant";
  readonly text?: string;
  readonly toolCalls: readonly ToolCall[];
}

/** What a tool call produced, or the error text the engine sent instead. */
export interface ToolResultMessage {
  readonly type: "tool_result";
  readonly callId: string;
  readonly tool: string;
  readonly content: string;
  readonly isError: boolean;
}

/** One entry of a run's transcript, tagged by `type`. */
export type Message = UserMessage | AssistantMessage | ToolResultMessage;

/** What the engine hands the model for one turn. */
export interface ModelRequest {
  /**
   * The transcript so far: a copy the model may keep or change. Tool-call
   * arguments that cannot be copied (functions, symbols, nesting too deep to
   * clone) are shared as the model sent them rather than failing the turn.
   */
  readonly messages: readonly Message[];
  /** The descriptors of the tools the model may call. */
  readonly tools: readonly ToolDescriptor[];
  /** Aborts when the run is cancelled. */
  readonly signal: AbortSignal;
}

/** The model's answer for one turn. No tool calls ends the run. */
export interface ModelResponse {
  readonly text?: string;
  readonly toolCalls: readonly ToolCall[];
  readonly usage?: Usage;
}

/**
 * A language model, one turn at a time. A provider adapter maps
 * {@link Message}s to the provider's format and back; nothing else is needed.
 *
 * @example
 * ```ts
 * const echo: Model = {
 *   async generate({ messages }) {
 *     const last = messages.at(-1);
 *     return { text: last?.type === "user" ? last.text : "", toolCalls: [] };
 *   },
 * };
 * ```
 */
export interface Model {
  generate(request: ModelRequest): Promise<ModelResponse>;
}

/**
 * `{ text?, toolCalls, usage? }` with absent parts left out, built without
 * conditional spreads (on Node 20 each costs more than the rest of the object).
 */
export function modelResponse(text: string | undefined, toolCalls: readonly ToolCall[], usage: Usage | undefined): ModelResponse {
  if (usage === undefined) return text === undefined ? { toolCalls } : { text, toolCalls };
  return text === undefined ? { toolCalls, usage } : { text, toolCalls, usage };
}

const tokenCount = z.number().int().nonnegative();

/** Parses a model's answer; anything else is a `ModelError`. */
export const ModelResponseSchema = z.object({
  text: z.string().optional(),
  toolCalls: z.array(
    z.object({
      id: z.string().min(1),
      name: z.string(),
      input: z.unknown(),
    }),
  ),
  usage: z.object({ inputTokens: tokenCount, outputTokens: tokenCount }).optional(),
});
