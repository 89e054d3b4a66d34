// loopctl's gate in a loop of your own: the model's tool calls go through
// gate.call, which validates, asks and records; you run the tool only when it
// says so. Run: npx tsx examples/gate-in-your-loop.ts
// #region readme
import { SyncAskResolver } from "loopctl/ask";
import { Gate, LoopManagers } from "loopctl/engine";
import type { ToolDescriptor } from "loopctl/engine";

// Tools as your own loop describes them (an MCP server's, an SDK's): plain descriptors.
const deploy: ToolDescriptor = {
  name: "deploy",
  description: "Deploy a version to an environment",
  inputSchema: {
    type: "object",
    properties: { env: { enum: ["staging", "production"] }, version: { type: "string", pattern: "^\\d+\\.\\d+\\.\\d+$" } },
    required: ["env", "version"],
    additionalProperties: false,
  },
  annotations: { destructiveHint: true },
};

const gate = new Gate(
  new LoopManagers()
    .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name} ${JSON.stringify(call.input)}?` }) })
    .withAskResolver(new SyncAskResolver((ask) => !ask.prompt.includes("production"))),
);

// Your loop: for each tool call the model made…
const calls = [
  { id: "call_1", name: "deploy", arguments: { env: "staging", version: "1.4.0" } },
  { id: "call_2", name: "deploy", arguments: { env: "production", version: "1.4.0" } },
  { id: "call_3", name: "deploy", arguments: { env: "staging", version: "latest" } },
];
for (const call of calls) {
  const outcome = await gate.call({ tool: deploy, callId: call.id, input: call.arguments }, (input) => {
    // Runs only if the gate allowed it, with exactly the (frozen) arguments that were approved.
    const { env, version } = input as { env: string; version: string };
    return `deployed ${version} to ${env}`;
  });
  // Hand the model outcome.output (ran) or outcome.message (failed, refused).
  console.log(call.id, outcome.type, outcome.type === "ran" ? outcome.output : outcome.message, `[${outcome.record.verdict}]`);
}
// #endregion
