import { Agent, Runner, run, tool } from "@openai/agents";
import type { RunResult } from "@openai/agents";
import { describe, expectTypeOf, it } from "vitest";
import { z } from "zod";
import { SyncAskResolver } from "loopctl/ask";
import { Gate, LoopManagers } from "loopctl/engine";
import { MemoryGrantStore } from "loopctl/grant";
import { AgentApprovals } from "loopctl/openai-agents";
import type { InterruptedResult } from "loopctl/openai-agents";

const deploy = tool({
  name: "deploy",
  description: "Deploy a version",
  parameters: z.object({ env: z.string(), version: z.string() }),
  needsApproval: true,
  execute: async ({ env, version }) => `deployed ${version} to ${env}`,
});
const approvals = new AgentApprovals({
  resolver: new SyncAskResolver(() => true),
  grants: new MemoryGrantStore(),
  managers: new LoopManagers(),
});

describe("AgentApprovals", () => {
  it("needs an AskResolver", () => {
    // @ts-expect-error interruptions are answered by a resolver: there is no default that approves
    void new AgentApprovals({ grants: new MemoryGrantStore() });
    expectTypeOf(approvals.gate).toEqualTypeOf<Gate>();
  });

  it("wraps tools without changing their types", () => {
    const tools = approvals.tools([deploy] as const);
    expectTypeOf(tools).toEqualTypeOf<readonly [typeof deploy]>();
    expectTypeOf(approvals.tool(deploy)).toEqualTypeOf<typeof deploy>();
    void new Agent({ name: "release", tools: approvals.tools([deploy]) });
  });

  it("settles a Runner's result to the same result type", async () => {
    const agent = new Agent({ name: "release", tools: approvals.tools([deploy]) });
    const runner = new Runner();
    const first = await runner.run(agent, "ship 1.4.0");
    expectTypeOf(first).toExtend<InterruptedResult>();
    const settled = await approvals.settle(first, (state) => runner.run(agent, state));
    expectTypeOf(settled).toEqualTypeOf(first);
    const ran = await approvals.run((input) => run(agent, input), "ship 1.4.1");
    expectTypeOf(ran).toExtend<RunResult<any, any>>();
  });
});
