import { describe, expectTypeOf, it } from "vitest";
import { ManualClock, ScriptedModel } from "loopctl/testing";
import type { RecordedRequest, ScriptedTurn } from "loopctl/testing";
import { Agent, LoopManagers } from "loopctl/engine";
import type { Clock, Model, ModelResponse } from "loopctl/engine";

describe("ScriptedModel", () => {
  it("is a Model an Agent runs", () => {
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "deploy", input: { env: "staging" } }] },
      { text: "done", usage: { inputTokens: 3, outputTokens: 1 } },
    ]);
    expectTypeOf(model).toExtend<Model>();
    void new Agent({ model, tools: [] });
  });

  it("plays text and tool calls, an error, or a function of what the model was shown", () => {
    const turns: ScriptedTurn[] = [
      { text: "thinking", providerData: { reasoning: "…" } },
      { error: new Error("rate limited") },
      (request) => ({ text: `${request.messages.length} messages`, toolCalls: [] }),
      async ({ tools }) => ({
        toolCalls: tools.map((tool, index) => ({ id: `c${index}`, name: tool.name, input: {} })),
      }),
    ];
    void new ScriptedModel(turns);
    expectTypeOf<Extract<ScriptedTurn, (...args: never[]) => unknown>>().parameters.toEqualTypeOf<
      [request: RecordedRequest]
    >();
    expectTypeOf<Extract<ScriptedTurn, (...args: never[]) => unknown>>().returns.toEqualTypeOf<
      ModelResponse | Promise<ModelResponse>
    >();
  });

  it("does not compile with a malformed turn", () => {
    // @ts-expect-error a tool call has an id, a name and an input
    void new ScriptedModel([{ toolCalls: [{ name: "deploy", input: {} }] }]);
    // @ts-expect-error a turn's text is a string
    void new ScriptedModel([{ text: 42 }]);
  });

  it("keeps the requests it received", () => {
    expectTypeOf<ScriptedModel["requests"]>().toEqualTypeOf<RecordedRequest[]>();
    expectTypeOf<ScriptedModel["remaining"]>().toBeNumber();
  });
});

describe("ManualClock", () => {
  it("is a Clock the managers take", () => {
    const clock = new ManualClock(1_000);
    expectTypeOf(clock).toExtend<Clock>();
    void new LoopManagers().withClock(clock);
  });

  it("advances asynchronously: timers fire on macrotasks, so advance is awaited", () => {
    expectTypeOf<ManualClock["advance"]>().returns.toEqualTypeOf<Promise<void>>();
  });
});
