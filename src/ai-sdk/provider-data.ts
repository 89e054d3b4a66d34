import { z } from "zod";

/** Provider-specific metadata of a part, as V3 carries it (`provider → JSON object`). */
const ProviderMetadataSchema = z.record(z.string(), z.record(z.string(), z.json()));

const options = { providerOptions: ProviderMetadataSchema.optional() };

/**
 * One part of an assistant turn, in the V3 prompt's own form, kept so the
 * next request hands the provider back exactly what it produced: reasoning
 * (with its signatures), text and tool calls with their provider metadata,
 * and the provider-executed calls and results loopctl leaves alone.
 */
const AssistantPartSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text"), text: z.string(), ...options }),
  z.object({ type: z.literal("reasoning"), text: z.string(), ...options }),
  // Generated files, their bytes as base64 so the transcript stays JSON.
  z.object({ type: z.literal("file"), mediaType: z.string(), data: z.string(), ...options }),
  z.object({
    type: z.literal("tool-call"),
    toolCallId: z.string(),
    toolName: z.string(),
    /** The parsed arguments; the model's text as sent when it was not JSON (`invalidInput`). */
    input: z.json(),
    invalidInput: z.literal(true).optional(),
    providerExecuted: z.boolean().optional(),
    ...options,
  }),
  z.object({
    type: z.literal("tool-result"),
    toolCallId: z.string(),
    toolName: z.string(),
    result: z.json(),
    isError: z.boolean().optional(),
    ...options,
  }),
]);

/** One part of an assistant turn, as {@link AiSdkProviderData} keeps it. */
export type AiSdkAssistantPart = z.infer<typeof AssistantPartSchema>;

/**
 * Parses the `providerData` that `fromLanguageModel` attaches to every
 * assistant message (it crosses a process boundary whenever a transcript is
 * stored and a run resumed from it).
 */
export const AiSdkProviderDataSchema = z.object({
  type: z.literal("ai-sdk"),
  /** The turn's content in the order the model produced it. */
  parts: z.array(AssistantPartSchema),
  /** The response's provider metadata (not sent back: V3 has no place for it in a prompt). */
  providerMetadata: ProviderMetadataSchema.optional(),
  /** Why the model stopped (`stop`, `tool-calls`, `length`, `content-filter`, …). */
  finishReason: z.string().optional(),
});

/**
 * What `fromLanguageModel` keeps on an assistant message, as `providerData`:
 * JSON, so a transcript can be stored and a run resumed from it.
 */
export type AiSdkProviderData = z.infer<typeof AiSdkProviderDataSchema>;

/** True for `providerData` that claims to be this adapter's (then it must parse). */
export function isTagged(value: unknown): boolean {
  return typeof value === "object" && value !== null && (value as { type?: unknown }).type === "ai-sdk";
}
