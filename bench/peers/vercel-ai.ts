/**
 * The approval round trip of the Vercel AI SDK 6: a tool with
 * `needsApproval: true` → `generateText` returns a `tool-approval-request` →
 * the next `generateText` call carries the `tool-approval-response`, executes
 * the tool and the model answers. The model is a hand-written LanguageModelV3
 * (like `MockLanguageModelV3` from `ai/test`, minus its call recording).
 */
import { generateText, tool, type LanguageModel, type ModelMessage } from "ai";
import type { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";
import type { RoundTrip } from "../lib/round-trip.js";

type CallOptions = Parameters<MockLanguageModelV3["doGenerate"]>[0];
type GenerateResult = Awaited<ReturnType<MockLanguageModelV3["doGenerate"]>>;

const USAGE: GenerateResult["usage"] = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

async function doGenerate(options: CallOptions): Promise<GenerateResult> {
  const sawResult = options.prompt.some(
    (m) => m.role === "tool" && m.content.some((part) => part.type === "tool-result"),
  );
  if (!sawResult) {
    return {
      content: [{ type: "tool-call", toolCallId: "call_1", toolName: "echo", input: '{"text":"hi"}' }],
      finishReason: { unified: "tool-calls", raw: undefined },
      usage: USAGE,
      warnings: [],
    };
  }
  return {
    content: [{ type: "text", text: "done" }],
    finishReason: { unified: "stop", raw: undefined },
    usage: USAGE,
    warnings: [],
  };
}

const makeModel = (): LanguageModel => ({
  specificationVersion: "v3",
  provider: "bench",
  modelId: "scripted",
  supportedUrls: {},
  doGenerate,
  doStream: () => Promise.reject(new Error("the benchmark never streams")),
});

/** `fresh`: new tools and a new mock model per round trip (as a process that builds them per request would). */
export function vercelAIRoundTrip(fresh = false): RoundTrip {
  let executions = 0;
  let roundTrips = 0;
  const makeTools = () => ({
    echo: tool({
      description: "Echo the text back",
      inputSchema: z.object({ text: z.string() }),
      needsApproval: true,
      execute: async ({ text }) => {
        executions++;
        return text;
      },
    }),
  });
  const sessionTools = fresh ? undefined : makeTools();
  const sessionModel = fresh ? undefined : makeModel();
  return {
    label: "Vercel AI SDK",
    async once() {
      const tools = sessionTools ?? makeTools();
      const model = sessionModel ?? makeModel();
      const messages: ModelMessage[] = [{ role: "user", content: "go" }];
      const first = await generateText({ model, tools, messages });
      const requests = first.content.filter((part) => part.type === "tool-approval-request");
      if (requests.length !== 1) throw new Error("expected exactly one tool-approval-request");
      messages.push(...first.response.messages, {
        role: "tool",
        content: requests.map((r) => ({
          type: "tool-approval-response" as const,
          approvalId: r.approvalId,
          approved: true,
        })),
      });
      const second = await generateText({ model, tools, messages });
      if (second.text !== "done") throw new Error(`unexpected final text ${second.text}`);
      roundTrips++;
    },
    executions: () => executions,
    roundTrips: () => roundTrips,
  };
}
