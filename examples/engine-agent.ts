// loopctl's own agent loop: tools defined with zod and with JSON Schema, the
// scripted model for tests and a model of your own, a run from the user's
// text, a run that goes on from a stored transcript, and the turn cap.
// No hooks here, so every valid call runs: examples/engine-guards.ts adds them.
// Run: npx tsx examples/engine-agent.ts
// #region tools
import { z } from "zod";
import { Agent, RunStoppedError, defineTool } from "loopctl/engine";
import type { Message, Model, ModelRequest, ModelResponse } from "loopctl/engine";
import { ScriptedModel } from "loopctl/testing";

// A zod 4 schema: zod validates (refinements, defaults and transforms hold) and the tool gets zod's output.
const readFile = defineTool({
  name: "read_file",
  description: "Read a UTF-8 text file of the project",
  input: z.object({ path: z.string().min(1), maxBytes: z.number().int().positive().default(4096) }),
  execute: ({ path, maxBytes }) => `contents of ${path} (at most ${maxBytes} bytes)`,
});

// A JSON Schema (draft 2020-12 unless $schema says draft-07): Ajv validates; the tool gets the frozen arguments.
const deploy = defineTool({
  name: "deploy",
  description: "Deploy a version to an environment",
  input: {
    type: "object",
    properties: { env: { enum: ["staging", "production"] }, version: { type: "string", pattern: "^\\d+\\.\\d+\\.\\d+$" } },
    required: ["env", "version"],
    additionalProperties: false,
  },
  annotations: { destructiveHint: true },
  execute: (input) => {
    const { env, version } = input as { env: string; version: string };
    return { deployed: version, env }; // not a string: the model receives it as JSON
  },
});
// #endregion

// #region agent
const model = new ScriptedModel([
  { toolCalls: [{ id: "c1", name: "read_file", input: { path: "CHANGELOG.md" } }] },
  { toolCalls: [{ id: "c2", name: "deploy", input: { env: "staging", version: "1.4" } }] },
  { text: "Read the changelog; '1.4' is not a version deploy accepts." },
]);
const agent = new Agent({
  model,
  tools: [readFile, deploy],
  instructions: "You are a release assistant. Be brief.",
});
const result = await agent.run("read CHANGELOG.md, then deploy 1.4 to staging");

console.log(result.text);
console.log(`${result.turns} model requests; records: ${result.records.map((r) => `${r.tool} ${r.verdict} (${r.ruleId})`).join(", ")}`);
for (const message of result.messages) {
  if (message.type === "tool_result") console.log(`  ${message.tool} ${message.status}: ${message.content}`);
}
// What the model was shown on its second turn: the system prompt, the transcript, the tools.
const second = model.requests[1];
console.log(`turn 1 saw: ${second?.instructions}; ${second?.messages.map((m) => m.type).join(", ")}; tools ${second?.tools.map((t) => t.name).join(", ")}`);
// #endregion

// #region continue
// A later run goes on from the stored transcript (JSON in a database, say) plus the user's new message.
const stored: Message[] = JSON.parse(JSON.stringify(result.messages)) as Message[];
const later = new ScriptedModel([
  { toolCalls: [{ id: "c3", name: "deploy", input: { env: "staging", version: "1.4.0" } }] },
  { text: "1.4.0 is on staging." },
]);
const followUp = await new Agent({ model: later, tools: [readFile, deploy] }).run([...stored, { type: "user", text: "use 1.4.0" }]);
const deployed = followUp.messages.findLast((m) => m.type === "tool_result");
console.log(`${followUp.text} (the model saw ${later.requests[0]?.messages.length} messages first; the tool said ${deployed?.type === "tool_result" ? deployed.content : ""})`);
// #endregion

// #region model
/** A model of your own: a few rules instead of a provider. An adapter for a real provider maps messages the same way. */
const rules: Model = {
  async generate(request: ModelRequest): Promise<ModelResponse> {
    const last = request.messages.at(-1);
    if (last?.type === "user") {
      const path = /read (\S+)/.exec(last.text)?.[1];
      // No call id: the engine gives it one. providerData rides the assistant message and comes back next turn.
      if (path !== undefined) return { toolCalls: [{ id: "", name: "read_file", input: { path } }], providerData: { rule: "read" } };
    }
    const asked = request.messages.findLast((m) => m.type === "assistant");
    const text = last?.type === "tool_result" ? `${last.status} after rule ${JSON.stringify(asked?.providerData)}: ${last.content}` : "nothing to do";
    return { text, toolCalls: [], usage: { inputTokens: 12, outputTokens: 7 } };
  },
};
const ruled = await new Agent({ model: rules, tools: [readFile] }).run("read README.md");
const callId = ruled.messages.find((m) => m.type === "tool_result")?.callId ?? "";
console.log(`${ruled.text} [${ruled.usage.inputTokens}+${ruled.usage.outputTokens} tokens, call id ${callId.slice(0, 5)}…]`);
// #endregion

// #region errors
// A model that never stops calling tools meets the default cap: 20 model requests per run.
const endless = new ScriptedModel(
  Array.from({ length: 25 }, (_, i) => ({ toolCalls: [{ id: `r${i}`, name: "read_file", input: { path: `notes/${i}.md` } }] })),
);
try {
  await new Agent({ model: endless, tools: [readFile] }).run("read every note");
} catch (error) {
  if (!(error instanceof RunStoppedError)) throw error;
  // CancelledError, LoopDetectedError, BudgetExceededError, ModelError or RunConfigError: what the run made is kept.
  const last = error.records.at(-1);
  console.log(`${error.name} ${error.code}: ${error.message}`);
  console.log(`kept ${error.records.length} records (the last: ${last?.verdict} ${last?.ruleId}) and ${error.messages.length} messages`);
}
// #endregion
