import type { LanguageModelV3Prompt } from "@ai-sdk/provider";
import { MockLanguageModelV3 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { fromLanguageModel } from "loopctl/ai-sdk";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import type { Message } from "loopctl/engine";
import { call, text, v3 } from "./support/ai-sdk-fixtures.js";

const read = defineTool({
  name: "read",
  description: "Read a file",
  input: z.object({ path: z.string() }),
  execute: ({ path }) => `contents of ${path}`,
});
const allow = () => new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) });
const prompts = (model: MockLanguageModelV3): LanguageModelV3Prompt[] => model.doGenerateCalls.map((c) => c.prompt);

/** Every tool call of a prompt, and every tool result, by id. */
function callsAndResults(prompt: LanguageModelV3Prompt): { calls: string[]; results: string[] } {
  const calls: string[] = [];
  const results: string[] = [];
  for (const message of prompt) {
    if (message.role === "assistant")
      for (const part of message.content) if (part.type === "tool-call") calls.push(part.toolCallId);
    if (message.role === "tool")
      for (const part of message.content) if (part.type === "tool-result") results.push(part.toolCallId);
  }
  return { calls, results };
}

describe("fromLanguageModel: the Agent loop on an AI SDK model", () => {
  it("a call the model sent without an id goes back once, under the id its result carries", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([text("reading"), call("", "read", { path: "a" }), call("", "read", { path: "b" })]),
        v3([text("done")]),
      ],
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() }).run("go");
    const ran = (result.messages[1] as Extract<Message, { type: "assistant" }>).toolCalls.map((c) => c.id);
    expect(ran).toHaveLength(2);
    expect(ran.every((id) => id !== "")).toBe(true);
    const second = prompts(model)[1]!;
    expect(callsAndResults(second)).toEqual({ calls: ran, results: ran });
    expect(second[1]).toEqual({
      role: "assistant",
      content: [
        { type: "text", text: "reading" },
        { type: "tool-call", toolCallId: ran[0], toolName: "read", input: { path: "a" } },
        { type: "tool-call", toolCallId: ran[1], toolName: "read", input: { path: "b" } },
      ],
    });
  });
});
