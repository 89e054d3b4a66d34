import type {
  LanguageModelV3Content,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3Usage,
} from "@ai-sdk/provider";
import { simulateReadableStream } from "ai";

export const USAGE: LanguageModelV3Usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};

/** One V3 `doGenerate` result. */
export function v3(
  content: LanguageModelV3Content[],
  extra: Partial<LanguageModelV3GenerateResult> = {},
): LanguageModelV3GenerateResult {
  const calls = content.some((part) => part.type === "tool-call" && part.providerExecuted !== true);
  return {
    content,
    finishReason: { unified: calls ? "tool-calls" : "stop", raw: undefined },
    usage: USAGE,
    warnings: [],
    ...extra,
  };
}

export const text = (value: string): LanguageModelV3Content => ({ type: "text", text: value });

export const call = (toolCallId: string, toolName: string, input: unknown): LanguageModelV3Content => ({
  type: "tool-call",
  toolCallId,
  toolName,
  input: typeof input === "string" ? input : JSON.stringify(input),
});

/** One V3 `doStream` result: the parts of `content` as stream chunks. */
export function v3Stream(content: LanguageModelV3Content[]): LanguageModelV3StreamResult {
  const chunks: LanguageModelV3StreamPart[] = [{ type: "stream-start", warnings: [] }];
  content.forEach((part, i) => {
    if (part.type === "text")
      chunks.push(
        { type: "text-start", id: `t${i}` },
        { type: "text-delta", id: `t${i}`, delta: part.text },
        { type: "text-end", id: `t${i}` },
      );
    else if (part.type === "tool-call") chunks.push(part);
  });
  const calls = content.some((part) => part.type === "tool-call");
  chunks.push({
    type: "finish",
    usage: USAGE,
    finishReason: { unified: calls ? "tool-calls" : "stop", raw: undefined },
  });
  return { stream: simulateReadableStream({ chunks }) };
}
