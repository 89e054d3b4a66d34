// loopctl approvals on the OpenAI Agents SDK: the SDK's own Runner
// interrupts for a tool with needsApproval, AgentApprovals answers the
// interruption with an AskResolver and remembers "always this tool", and the
// next run is decided by the grant without an interruption.
// The model is a local fake (no network, no key).
// Run: npx tsx examples/openai-agents.ts
import { Agent, Runner, Usage, setTracingDisabled, tool } from "@openai/agents";
import type { Model, ModelRequest, ModelResponse, StreamEvent } from "@openai/agents";
import { z } from "zod";
import { SyncAskResolver } from "loopctl/ask";
import { LoopManagers } from "loopctl/engine";
import { MemoryGrantStore } from "loopctl/grant";
import { AgentApprovals } from "loopctl/openai-agents";

setTracingDisabled(true);

/** Calls deploy once, then answers with the tool's output. */
class FakeModel implements Model {
  readonly #version: string;
  constructor(version: string) {
    this.#version = version;
  }
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = Array.isArray(request.input) ? request.input : [];
    const result = input.find((item) => item.type === "function_call_result");
    if (result === undefined) {
      const args = JSON.stringify({ env: "prod", version: this.#version });
      return { usage: new Usage(), output: [{ type: "function_call", callId: `call_${this.#version}`, name: "deploy", arguments: args, status: "completed" }] };
    }
    const output = result.type === "function_call_result" ? result.output : undefined;
    const text = typeof output === "string" ? output : output !== undefined && !Array.isArray(output) && output.type === "text" ? output.text : "";
    return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    throw new Error("not streamed in this example");
  }
}

const deploy = tool({
  name: "deploy",
  description: "Deploy a version to an environment",
  parameters: z.object({ env: z.string(), version: z.string() }),
  needsApproval: true,
  execute: async ({ env, version }) => `deployed ${version} to ${env}`,
});

// Any AskResolver answers: an ApprovalChannel to a UI, a webhook, a queue. Here, a closure.
const resolver = new SyncAskResolver((ask) => {
  console.log(`asked: ${ask.prompt.split("\n")[0]}`);
  return { type: "approve", remember: "this_tool" };
});
const managers = new LoopManagers().withObserver({ onGate: ({ decision }) => console.log(`record: ${decision.tool} ${decision.verdict} (${decision.ruleId})`) });
const approvals = new AgentApprovals({ resolver, grants: new MemoryGrantStore(), managers });
const runner = new Runner();

for (const version of ["1.4.0", "1.4.1"]) {
  const agent = new Agent({ name: "release", instructions: "Deploy what you are asked to.", model: new FakeModel(version), tools: approvals.tools([deploy]) });
  const first = await runner.run(agent, `ship ${version}`);
  console.log(`${version}: ${first.interruptions.length} interruption(s)`);
  const result = await approvals.settle(first, (state) => runner.run(agent, state));
  console.log(`${version}: ${String(result.finalOutput)}`);
}
