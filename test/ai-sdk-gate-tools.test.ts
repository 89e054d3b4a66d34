import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";
import type { ToolSet } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel, SyncAskResolver } from "loopctl/ask";
import type { AskResolver, PendingAsk } from "loopctl/ask";
import { AiSdkToolError, gateTools, isToolRefusal } from "loopctl/ai-sdk";
import type { ToolRefusal } from "loopctl/ai-sdk";
import { CancelledError, Gate, LoopManagers } from "loopctl/engine";
import type { GateDecision, Hook } from "loopctl/engine";
import { MemoryGrantStore } from "loopctl/grant";
import { call, text, v3, v3Stream } from "./support/ai-sdk-fixtures.js";
import { until } from "./support/engine-fixtures.js";

function harness(managers: LoopManagers = new LoopManagers()) {
  const executed: unknown[] = [];
  const records: GateDecision[] = [];
  const gate = new Gate(managers.withObserver({ onGate: ({ decision }) => records.push(decision) }));
  const tools = {
    deploy: tool({
      description: "Deploy a version",
      title: "Deploy",
      inputSchema: z.object({ env: z.string(), version: z.string() }),
      execute: async (input, { abortSignal }) => {
        executed.push(input);
        expect(abortSignal).toBeInstanceOf(AbortSignal);
        return { deployed: `${input.version} to ${input.env}` };
      },
    }),
    broken: tool({
      description: "Always fails",
      inputSchema: jsonSchema<{ n: number }>({ type: "object", properties: { n: { type: "number" } }, required: ["n"] }),
      execute: async (): Promise<string> => {
        throw new Error("disk on fire");
      },
    }),
    clientSide: tool({ description: "Answered by the UI", inputSchema: z.object({ q: z.string() }), outputSchema: z.string() }),
  };
  return { executed, records, gate, tools };
}

const ask: Hook = { preToolUse: (c) => ({ type: "ask", prompt: `Run ${c.name}?` }) };
const neverAsked: AskResolver = {
  resolve: (a) => Promise.reject(new Error(`nobody should have been asked about ${a.tool}`)),
};

describe("gateTools: the gate in front of generateText/streamText tools", () => {
  it("runs an allowed call through the gate with the SDK's toolCallId and the approved input", async () => {
    const { executed, records, gate, tools } = harness();
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("call-7", "deploy", { env: "prod", version: "1.2" })]), v3([text("done")])] });
    const result = await generateText({ model, tools: gateTools(tools, gate), prompt: "ship", stopWhen: stepCountIs(3) });
    expect(result.text).toBe("done");
    expect(executed).toEqual([{ env: "prod", version: "1.2" }]);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "allow" }]);
    expect(result.steps[0]!.toolResults).toMatchObject([{ toolCallId: "call-7", output: { deployed: "1.2 to prod" } }]);
    expect(model.doGenerateCalls[1]!.prompt.at(-1)).toEqual({
      role: "tool",
      content: [{ type: "tool-result", toolCallId: "call-7", toolName: "deploy", output: { type: "json", value: { deployed: "1.2 to prod" } } }],
    });
  });

  it("a refused call is a result the model reads (the SDK's execution-denied), not a thrown error", async () => {
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook({ preToolUse: () => ({ type: "block", reason: "prod is frozen" }) }));
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.2" })]), v3([text("ok, not deploying")])] });
    const result = await generateText({ model, tools: gateTools(tools, gate), prompt: "ship", stopWhen: stepCountIs(3) });
    expect(executed).toEqual([]);
    expect(records).toMatchObject([{ verdict: "deny", ruleId: "hook" }]);
    const output = result.steps[0]!.toolResults[0]!.output as ToolRefusal;
    expect(isToolRefusal(output)).toBe(true);
    expect(output).toEqual({ type: "loopctl.refused", message: "prod is frozen", record: records[0] });
    expect(result.steps[0]!.content.some((part) => part.type === "tool-error")).toBe(false);
    expect(model.doGenerateCalls[1]!.prompt.at(-1)).toEqual({
      role: "tool",
      content: [{ type: "tool-result", toolCallId: "c1", toolName: "deploy", output: { type: "execution-denied", reason: "prod is frozen" } }],
    });
  });

  it("refusals: \"error-text\" sends the refusal as an error result instead", async () => {
    const { gate, tools } = harness(new LoopManagers().withHook({ preToolUse: () => ({ type: "block", reason: "no" }) }));
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "deploy", { env: "a", version: "1" })]), v3([text("x")])] });
    await generateText({ model, tools: gateTools(tools, gate, { refusals: "error-text" }), prompt: "go", stopWhen: stepCountIs(2) });
    expect(model.doGenerateCalls[1]!.prompt.at(-1)?.content).toMatchObject([{ output: { type: "error-text", value: "no" } }]);
  });

  it("a tool that throws still throws (the SDK's tool-error); the gate's record says the call was allowed", async () => {
    const { records, gate, tools } = harness();
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "broken", { n: 1 })]), v3([text("x")])] });
    const result = await generateText({ model, tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(2) });
    expect(result.steps[0]!.content).toContainEqual(expect.objectContaining({ type: "tool-error", toolCallId: "c1", error: new Error("disk on fire") }));
    expect(records).toMatchObject([{ tool: "broken", verdict: "allow" }]);
  });

  it("keeps the tool's own toModelOutput for what it returns, and leaves tools without execute as they are", async () => {
    const { gate } = harness();
    const tools = {
      shout: tool({
        description: "Shout",
        inputSchema: z.object({ text: z.string() }),
        execute: async ({ text: said }) => said,
        toModelOutput: ({ output }) => ({ type: "text", value: String(output).toUpperCase() }),
      }),
      ask: tool({ description: "Ask the user", inputSchema: z.object({ q: z.string() }), outputSchema: z.string() }),
    };
    const gated = gateTools(tools, gate);
    expect(gated.ask).toBe(tools.ask);
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "shout", { text: "hi" })]), v3([text("x")])] });
    await generateText({ model, tools: gated, prompt: "go", stopWhen: stepCountIs(2) });
    expect(model.doGenerateCalls[1]!.prompt.at(-1)?.content).toMatchObject([{ output: { type: "text", value: "HI" } }]);
  });

  it("under streamText: an allowed and a refused call in one step", async () => {
    const guard: Hook = { preToolUse: (c) => ((c.input as { env?: string }).env === "prod" ? { type: "block", reason: "prod is frozen" } : { type: "allow" }) };
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(guard));
    const model = new MockLanguageModelV3({
      doStream: [v3Stream([call("s1", "deploy", { env: "staging", version: "2" }), call("s2", "deploy", { env: "prod", version: "2" })]), v3Stream([text("half done")])],
    });
    const result = streamText({ model, tools: gateTools(tools, gate), prompt: "ship", stopWhen: stepCountIs(3) });
    const parts: { type: string; toolCallId?: string; output?: unknown }[] = [];
    for await (const part of result.fullStream) parts.push(part);
    expect(await result.text).toBe("half done");
    expect(executed).toEqual([{ env: "staging", version: "2" }]);
    expect(records.map((r) => r.verdict).sort()).toEqual(["allow", "deny"]);
    // Results stream as the calls finish; the prompt after them keeps the calls' order.
    const results = parts.filter((p) => p.type === "tool-result");
    expect(results.map((p) => [p.toolCallId, isToolRefusal(p.output)]).sort()).toEqual([
      ["s1", false],
      ["s2", true],
    ]);
    expect(parts.some((p) => p.type === "tool-error")).toBe(false);
    expect(model.doStreamCalls[1]!.prompt.at(-1)?.content).toEqual([
      { type: "tool-result", toolCallId: "s1", toolName: "deploy", output: { type: "json", value: { deployed: "2 to staging" } } },
      { type: "tool-result", toolCallId: "s2", toolName: "deploy", output: { type: "execution-denied", reason: "prod is frozen" } },
    ]);
  });

  it("parks, is approved \"always this tool\", and the next generateText is decided by the grant without asking", async () => {
    const store = new MemoryGrantStore();
    const [channel, approver] = ApprovalChannel.pair(4);
    const first = harness(new LoopManagers().withHook(ask).withAskResolver(channel).withGrantStore(store));
    const script = () => [v3([call("c1", "deploy", { env: "prod", version: "1.2" })]), v3([text("done")])];
    const running = generateText({ model: new MockLanguageModelV3({ doGenerate: script() }), tools: gateTools(first.tools, first.gate), prompt: "ship", stopWhen: stepCountIs(3) });
    const parked = (await approver.next()) as PendingAsk;
    expect(parked).toMatchObject({ tool: "deploy", callId: "c1", prompt: "Run deploy?" });
    expect(first.executed).toEqual([]);
    expect(approver.resolve(parked.id, { type: "approve", remember: "this_tool" })).toBe(true);
    expect((await running).text).toBe("done");
    expect(first.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect((await store.load()).map((g) => [g.tool, g.verdict, g.scope.type])).toEqual([["deploy", "allow", "this_tool"]]);

    // A new process, a new gate over the same store: the grant decides, nobody is asked.
    const next = harness(new LoopManagers().withHook(ask).withAskResolver(neverAsked).withGrantStore(store));
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c9", "deploy", { env: "prod", version: "1.3" })]), v3([text("done again")])] });
    const again = await generateText({ model, tools: gateTools(next.tools, next.gate), prompt: "ship 1.3", stopWhen: stepCountIs(3) });
    expect(again.text).toBe("done again");
    expect(next.executed).toEqual([{ env: "prod", version: "1.3" }]);
    expect(next.records).toMatchObject([{ verdict: "allow", ruleId: "grant", ruleSource: "context" }]);
  });

  it("a cancel while parked aborts the step: generateText rejects, the call's record is cancelled, the tool never runs", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const controller = new AbortController();
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1" })]), v3([text("never")])] });
    const running = generateText({ model, tools: gateTools(tools, gate), prompt: "go", abortSignal: controller.signal, stopWhen: stepCountIs(3) });
    await approver.next();
    controller.abort(new Error("user left"));
    await expect(running).rejects.toThrow("user left");
    await until(() => records.length === 1);
    expect(records).toMatchObject([{ verdict: "cancelled", reason: "cancelled while awaiting approval" }]);
    expect(executed).toEqual([]);
    expect(model.doGenerateCalls).toHaveLength(1);
  });

  it("gated execute rejects with CancelledError when the SDK's abortSignal fires", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const { gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const controller = new AbortController();
    const execute = gateTools(tools, gate).deploy.execute!;
    const pending = Promise.resolve(execute({ env: "a", version: "1" }, { toolCallId: "c1", messages: [], abortSignal: controller.signal }));
    await approver.next();
    controller.abort();
    await expect(pending).rejects.toBeInstanceOf(CancelledError);
  });

  it("the ask and its grant are pinned to the descriptor the model saw (title included): a changed tool is asked about again", async () => {
    const store = new MemoryGrantStore();
    const asks: PendingAsk[] = [];
    const resolver = new SyncAskResolver((a) => (asks.push(a), { type: "approve", remember: "this_tool" }));
    const managers = new LoopManagers().withHook(ask).withAskResolver(resolver).withGrantStore(store);
    const run = async (tools: ToolSet, id: string): Promise<void> => {
      const model = new MockLanguageModelV3({ doGenerate: [v3([call(id, "deploy", { env: "a", version: "1" })]), v3([text("x")])] });
      await generateText({ model, tools: gateTools(tools, new Gate(managers)), prompt: "go", stopWhen: stepCountIs(2) });
    };
    const { tools } = harness();
    await run(tools, "c1");
    await run(tools, "c2");
    expect(asks).toHaveLength(1);
    await run({ ...tools, deploy: tool({ ...(tools.deploy as object), title: "Deploy to production" } as never) }, "c3");
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
  });

  it("typed errors: no Gate, no tool set, a call without a toolCallId, a schema without JSON Schema form", async () => {
    const { gate, tools } = harness();
    expect(() => gateTools(tools, {} as never)).toThrow(AiSdkToolError);
    expect(() => gateTools(null as never, gate)).toThrow(AiSdkToolError);
    expect(() => gateTools(tools, gate, { refusals: "hide" as never })).toThrow(AiSdkToolError);
    expect(() => gateTools(tools, gate, { runId: "run-1" })).toThrow(/runId must be a UUID/);
    const execute = gateTools(tools, gate).deploy.execute!;
    await expect(Promise.resolve(execute({ env: "a", version: "1" }, {} as never))).rejects.toMatchObject({ code: "AI_SDK_TOOL", tool: "deploy" });
    const odd = gateTools({ odd: tool({ description: "", inputSchema: { "~standard": { vendor: "odd", version: 1, validate: () => ({ value: {} }) } } as never, execute: async () => "ran" }) }, gate);
    await expect(Promise.resolve(odd.odd.execute!({}, { toolCallId: "c1", messages: [] }))).rejects.toMatchObject({ code: "AI_SDK_TOOL", tool: "odd" });
  });
});
