import { generateText, tool } from "ai";
import type { Tool as AiTool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { describe, expectTypeOf, it } from "vitest";
import { z } from "zod";
import { fromLanguageModel, gateTools, isToolRefusal } from "loopctl/ai-sdk";
import type { GatedTools, ToolRefusal } from "loopctl/ai-sdk";
import { Agent, Gate, LoopManagers } from "loopctl/engine";
import type { Model } from "loopctl/engine";

const deploy = tool({
  description: "Deploy a version",
  inputSchema: z.object({ env: z.string(), version: z.string() }),
  execute: async ({ env, version }) => `deployed ${version} to ${env}`,
});
const status = tool({
  description: "The deployed version",
  inputSchema: z.object({ env: z.string() }),
  execute: async () => ({ version: "1.4.0" }),
});
const gate = new Gate(new LoopManagers());

describe("gateTools", () => {
  it("keeps the ToolSet's keys and each tool's input", () => {
    const gated = gateTools({ deploy, status }, gate, { refusals: "error-text" });
    expectTypeOf(gated).toEqualTypeOf<GatedTools<{ deploy: typeof deploy; status: typeof status }>>();
    expectTypeOf<keyof typeof gated>().toEqualTypeOf<"deploy" | "status">();
    expectTypeOf(gated.deploy).toExtend<AiTool<{ env: string; version: string }, string | ToolRefusal>>();
    expectTypeOf(gated.status).toExtend<AiTool<{ env: string }, { version: string } | ToolRefusal>>();
    // @ts-expect-error only the tools given are gated
    void gated.rollback;
  });

  it("says that a gated execute may resolve to a refusal", () => {
    const gated = gateTools({ deploy }, gate);
    const run = gated.deploy.execute;
    expectTypeOf(run).not.toBeUndefined();
    type Result = Awaited<ReturnType<NonNullable<typeof run>>>;
    expectTypeOf<ToolRefusal>().toExtend<Result>();
    expectTypeOf<string>().toExtend<Result>();
  });

  it("gives tools generateText takes", () => {
    const model = new MockLanguageModelV3();
    void generateText({ model, tools: gateTools({ deploy }, gate), prompt: "ship it" });
  });

  it("needs a Gate", () => {
    // @ts-expect-error the gate decides: new Gate(managers), not the managers
    void gateTools({ deploy }, new LoopManagers());
  });

  it("marks a refused call's output", () => {
    const output: unknown = undefined;
    if (isToolRefusal(output)) expectTypeOf(output).toEqualTypeOf<ToolRefusal>();
    expectTypeOf<ToolRefusal["type"]>().toEqualTypeOf<"loopctl.refused">();
  });
});

describe("fromLanguageModel", () => {
  it("makes a provider's model a Model an Agent runs", () => {
    const model = fromLanguageModel(new MockLanguageModelV3(), { settings: { temperature: 0 } });
    expectTypeOf(model).toEqualTypeOf<Model>();
    void new Agent({ model, tools: [] });
  });

  it("takes the provider's model object, not its id", () => {
    // @ts-expect-error a LanguageModelV3 object; an id string is resolved by the AI SDK's providers, not here
    void fromLanguageModel("openai/gpt-5");
  });
});
