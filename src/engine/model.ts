import { z } from "zod";
import type { ToolDescriptor } from "../grant/index.js";

const tokenCount = z.number().int().nonnegative();

/** Parses a tool call: the model's call id, the tool's name, the arguments. */
export const ToolCallSchema = z.object({ id: z.string(), name: z.string(), input: z.unknown() });

/**
 * A tool call as the model emits it. An empty `id`, or one a call earlier in
 * the transcript has, is replaced by one the engine generates before the
 * call is gated.
 */
export type ToolCall = Readonly<z.infer<typeof ToolCallSchema>>;

/** Parses token usage of one model turn (or of a run). */
export const UsageSchema = z.object({ inputTokens: tokenCount, outputTokens: tokenCount }).readonly();

/** Token usage of one model turn (or summed over a run). */
export type Usage = z.infer<typeof UsageSchema>;

/**
 * A call whose arguments had no JSON form keeps `input: undefined`, which a
 * JSON round trip of a saved transcript drops: a missing `input` is that call.
 */
function withInputKey(call: unknown): unknown {
  return typeof call === "object" && call !== null && !Array.isArray(call) && !("input" in call)
    ? { ...call, input: undefined }
    : call;
}

/** How a tool call ended, as its result message tells the model. */
export const TOOL_RESULT_STATUSES = ["ran", "failed", "refused"] as const;

/**
 * Parses one transcript entry. Parsed messages are frozen; the engine's own
 * are too, and so are the tool-call arguments they hold.
 */
export const MessageSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("user"), text: z.string() }).readonly(),
  z
    .object({
      type: z.literal("assistant"),
      text: z.string().optional(),
      toolCalls: z.array(z.preprocess(withInputKey, ToolCallSchema.readonly())).readonly(),
      providerData: z.unknown().optional(),
    })
    .readonly(),
  z
    .object({
      type: z.literal("tool_result"),
      callId: z.string(),
      tool: z.string(),
      content: z.string(),
      status: z.enum(TOOL_RESULT_STATUSES),
      isError: z.boolean(),
    })
    .readonly(),
]);

/** One entry of a run's transcript, tagged by `type`. */
export type Message = z.infer<typeof MessageSchema>;
/** The user's text. */
export type UserMessage = Extract<Message, { type: "user" }>;
/**
 * One model turn: optional text, the tool calls it made (possibly none), and
 * `providerData`, whatever the model adapter attached, handed back unchanged.
 * In a run, `providerData` is a deeply frozen JSON copy, taken once.
 */
export type AssistantMessage = Extract<Message, { type: "assistant" }>;
/**
 * What a tool call produced, or the text the engine sent instead. `status`
 * says whether the tool `ran`, `failed` (it threw), or the call was
 * `refused` (by a hook, an approver, a rule, validation…); `isError` is
 * `status !== "ran"`.
 */
export type ToolResultMessage = Extract<Message, { type: "tool_result" }>;
/** {@link ToolResultMessage.status}. */
export type ToolResultStatus = (typeof TOOL_RESULT_STATUSES)[number];

/** Parses a model's answer; anything else is a `ModelError`. */
export const ModelResponseSchema = z.object({
  text: z.string().optional(),
  toolCalls: z.array(ToolCallSchema).readonly(),
  usage: UsageSchema.optional(),
  providerData: z.unknown().optional(),
});

/**
 * The model's answer for one turn. No tool calls ends the run.
 * `providerData` is opaque: it is kept on the assistant message and shown to
 * the model again with the transcript (a provider's reasoning items, ids…).
 * It must be JSON: the run keeps a deeply frozen JSON copy, taken when the
 * answer comes in, and refuses anything else with a `ModelError`.
 */
export type ModelResponse = Readonly<z.infer<typeof ModelResponseSchema>>;

/** What the engine hands the model for one turn. */
export interface ModelRequest {
  /** The agent's `instructions` (a system prompt), if it has any. */
  readonly instructions?: string;
  /**
   * The transcript so far. Messages are frozen and shared from turn to turn,
   * never copied; the array is a read-only view of the run's own, which
   * grows after `generate` returns: copy it (`[...messages]`) to keep this
   * turn's list, or to clone it (`structuredClone` does not take the view).
   * Writing to it throws a `TypeError`.
   */
  readonly messages: readonly Message[];
  /** The descriptors of the tools the model may call this turn. */
  readonly tools: readonly ToolDescriptor[];
  /** Aborts when the run is cancelled. */
  readonly signal: AbortSignal;
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
