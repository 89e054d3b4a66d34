import { describe, expectTypeOf, it } from "vitest";
import * as root from "loopctl";
import * as ask from "loopctl/ask";
import * as audit from "loopctl/audit";
import * as engine from "loopctl/engine";
import * as grant from "loopctl/grant";
import * as server from "loopctl/server";
import * as testing from "loopctl/testing";

describe("the root module", () => {
  it("exports everything the six core subpaths export, as the same values", () => {
    expectTypeOf(root).toExtend<
      typeof ask & typeof grant & typeof engine & typeof audit & typeof testing & typeof server
    >();
    expectTypeOf(root.ScriptedModel).toEqualTypeOf(testing.ScriptedModel);
    expectTypeOf(root.Gate).toEqualTypeOf(engine.Gate);
    expectTypeOf(root.createApprovalServer).toEqualTypeOf(server.createApprovalServer);
    expectTypeOf<root.AskResolution>().toEqualTypeOf<ask.AskResolution>();
  });

  it("exports nothing of the adapters or Postgres, whose packages it must not load", () => {
    // @ts-expect-error gateTools is in loopctl/ai-sdk
    void root.gateTools;
    // @ts-expect-error mcpTools is in loopctl/mcp
    void root.mcpTools;
    // @ts-expect-error AgentApprovals is in loopctl/openai-agents
    void root.AgentApprovals;
    // @ts-expect-error PostgresAskQueue is in loopctl/postgres
    void root.PostgresAskQueue;
  });
});
