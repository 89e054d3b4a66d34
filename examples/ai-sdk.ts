// loopctl on the Vercel AI SDK, both ways round, on mock models (no network):
// 1. gateTools: a generateText loop whose deploy tool passes through the
//    gate; the first call parks until the approver answers "always this
//    tool", and the next generateText is decided by the grant.
// 2. fromLanguageModel: loopctl's Agent driving an AI SDK provider model.
// Run: npx tsx examples/ai-sdk.ts
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import type { LanguageModelV3GenerateResult } from "@ai-sdk/provider";
import { z } from "zod";
import { ApprovalChannel } from "loopctl/ask";
import { fromLanguageModel, gateTools } from "loopctl/ai-sdk";
import { Agent, Gate, LoopManagers, defineTool } from "loopctl/engine";
import { MemoryGrantStore } from "loopctl/grant";

/** What a provider answers: text, or one tool call (its arguments as JSON text, as providers send them). */
function answer(part: { text: string } | { call: [id: string, tool: string, input: unknown] }): LanguageModelV3GenerateResult {
  const usage = { inputTokens: { total: 12, noCache: 12, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 4, text: 4, reasoning: 0 } };
  if ("text" in part) return { content: [{ type: "text", text: part.text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
  const [toolCallId, toolName, input] = part.call;
  return { content: [{ type: "tool-call", toolCallId, toolName, input: JSON.stringify(input) }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
}

// 1. gateTools in a generateText loop.
const deploy = tool({
  description: "Deploy a version to an environment",
  inputSchema: z.object({ env: z.string(), version: z.string() }),
  execute: async ({ env, version }) => `deployed ${version} to ${env}`,
});
const [channel, approver] = ApprovalChannel.pair(8);
const gate = new Gate(
  new LoopManagers()
    .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name} with ${JSON.stringify(call.input)}?` }) })
    .withAskResolver(channel)
    .withGrantStore(new MemoryGrantStore())
    .withObserver({ onGate: ({ decision }) => console.log(`record: ${decision.tool} ${decision.verdict} (${decision.ruleId})`) }),
);

const first = generateText({
  model: new MockLanguageModelV3({ doGenerate: [answer({ call: ["call_1", "deploy", { env: "prod", version: "1.4.0" }] }), answer({ text: "1.4.0 is live" })] }),
  tools: gateTools({ deploy }, gate),
  prompt: "ship 1.4.0",
  stopWhen: stepCountIs(5),
});
const ask = await approver.next(); // parked inside the tool's execute until answered
console.log(`asked: ${ask?.prompt}`);
if (ask) approver.resolve(ask.id, { type: "approve", remember: "this_tool" });
console.log(`first: ${(await first).text}`);

const second = await generateText({
  model: new MockLanguageModelV3({ doGenerate: [answer({ call: ["call_2", "deploy", { env: "prod", version: "1.4.1" }] }), answer({ text: "1.4.1 is live" })] }),
  tools: gateTools({ deploy }, gate),
  prompt: "ship 1.4.1",
  stopWhen: stepCountIs(5),
});
console.log(`second: ${second.text}`); // no ask: the grant decided
approver.close();

// 2. fromLanguageModel: loopctl's Agent on an AI SDK model.
const status = defineTool({
  name: "status",
  description: "Read an environment's status",
  input: z.object({ env: z.string() }),
  execute: ({ env }) => `${env} is green`,
});
const model = new MockLanguageModelV3({ doGenerate: [answer({ call: ["call_3", "status", { env: "prod" }] }), answer({ text: "prod is green" })] });
const result = await new Agent({ model: fromLanguageModel(model), tools: [status], instructions: "Answer in one line." }).run("how is prod?");
console.log(`agent: ${result.text} (${result.turns} turns, ${result.usage.inputTokens} input tokens)`);
