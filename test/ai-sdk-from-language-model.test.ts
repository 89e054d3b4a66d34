import type { LanguageModelV3CallOptions, LanguageModelV3Prompt } from "@ai-sdk/provider";
import { MockLanguageModelV3 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { SyncAskResolver } from "loopctl/ask";
import { AiSdkModelError, AiSdkProviderDataSchema, AiSdkTranscriptError, fromLanguageModel } from "loopctl/ai-sdk";
import type { LanguageModelSettings } from "loopctl/ai-sdk";
import { Agent, CancelledError, LoopManagers, ModelError, defineTool } from "loopctl/engine";
import type { Message } from "loopctl/engine";
import { USAGE, call, text, v3 } from "./support/ai-sdk-fixtures.js";
import { deferred, until } from "./support/engine-fixtures.js";
import { thrownBy } from "./support/thrown.js";

function tools(executed: unknown[] = []) {
  return [
    defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }),
      execute: ({ path }) => (executed.push({ path }), `contents of ${path}`),
    }),
    defineTool({
      name: "fail",
      description: "Always fails",
      input: z.object({}),
      execute: () => {
        throw new Error("disk on fire");
      },
    }),
  ];
}

const prompts = (model: MockLanguageModelV3): LanguageModelV3Prompt[] => model.doGenerateCalls.map((c) => c.prompt);
const toolMessage = (prompt: LanguageModelV3Prompt) => prompt.find((m) => m.role === "tool");

describe("fromLanguageModel: Agent on an AI SDK LanguageModelV3", () => {
  it("sends the instructions as the system message, the user's text, and the tools as V3 function tools; returns the text", async () => {
    const model = new MockLanguageModelV3({ doGenerate: [v3([text("hello")])] });
    const result = await new Agent({ model: fromLanguageModel(model), tools: tools(), instructions: "Be brief." }).run(
      "hi",
    );
    expect(result.text).toBe("hello");
    expect(result.usage).toEqual({ inputTokens: 10, outputTokens: 5 });
    const [options] = model.doGenerateCalls as [LanguageModelV3CallOptions];
    expect(options.prompt).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "hi" }] },
    ]);
    expect(
      options.tools?.map(
        (t) => t.type === "function" && [t.name, t.description, (t.inputSchema as { type?: string }).type],
      ),
    ).toEqual([
      ["read", "Read a file", "object"],
      ["fail", "Always fails", "object"],
    ]);
    expect(options.abortSignal).toBeInstanceOf(AbortSignal);
  });

  it("parses the JSON arguments, runs the call through the gate, and sends each result with its status", async () => {
    const executed: unknown[] = [];
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([
          text("checking"),
          call("c1", "read", { path: "a.txt" }),
          call("c2", "fail", {}),
          call("c3", "read", { path: "secret" }),
        ]),
        v3([text("done")]),
      ],
    });
    const managers = new LoopManagers().withHook({
      preToolUse: (c) =>
        (c.input as { path?: string }).path === "secret"
          ? { type: "block", reason: "not that one" }
          : { type: "allow" },
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: tools(executed), managers }).run("go");
    expect(executed).toEqual([{ path: "a.txt" }]);
    expect(result.records.map((r) => r.verdict)).toEqual(["allow", "allow", "deny"]);
    const second = prompts(model)[1]!;
    expect(second[1]).toEqual({
      role: "assistant",
      content: [
        { type: "text", text: "checking" },
        { type: "tool-call", toolCallId: "c1", toolName: "read", input: { path: "a.txt" } },
        { type: "tool-call", toolCallId: "c2", toolName: "fail", input: {} },
        { type: "tool-call", toolCallId: "c3", toolName: "read", input: { path: "secret" } },
      ],
    });
    expect(toolMessage(second)).toEqual({
      role: "tool",
      content: [
        {
          type: "tool-result",
          toolCallId: "c1",
          toolName: "read",
          output: { type: "text", value: "contents of a.txt" },
        },
        {
          type: "tool-result",
          toolCallId: "c2",
          toolName: "fail",
          output: { type: "error-text", value: "Tool 'fail' failed: disk on fire" },
        },
        {
          type: "tool-result",
          toolCallId: "c3",
          toolName: "read",
          output: { type: "execution-denied", reason: "not that one" },
        },
      ],
    });
  });

  it("sends an approver's refusal as the SDK's execution-denied output, or as error-text when asked to", async () => {
    for (const refusals of ["execution-denied", "error-text"] as const) {
      const model = new MockLanguageModelV3({
        doGenerate: [v3([call("c1", "read", { path: "a" })]), v3([text("ok")])],
      });
      const managers = new LoopManagers()
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "read?" }) })
        .withAskResolver(new SyncAskResolver(() => false));
      const result = await new Agent({ model: fromLanguageModel(model, { refusals }), tools: tools(), managers }).run(
        "go",
      );
      expect(result.records.map((r) => r.verdict)).toEqual(["ask_denied"]);
      const reason = "Permission denied by approver for tool 'read'";
      const output =
        refusals === "execution-denied" ? { type: "execution-denied", reason } : { type: "error-text", value: reason };
      expect(toolMessage(prompts(model)[1]!)?.content).toEqual([
        { type: "tool-result", toolCallId: "c1", toolName: "read", output },
      ]);
    }
  });

  it("arguments that are not JSON are refused by the gate before anyone is asked: the model reads why, the tool never runs", async () => {
    const executed: unknown[] = [];
    let asked = 0;
    const model = new MockLanguageModelV3({
      doGenerate: [v3([call("c1", "read", '{"path": "a.txt"')]), v3([text("sorry")])],
    });
    const managers = new LoopManagers()
      .withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) })
      .withAskResolver(new SyncAskResolver(() => (asked++, true)));
    const result = await new Agent({ model: fromLanguageModel(model), tools: tools(executed), managers }).run("go");
    expect([executed, asked]).toEqual([[], 0]);
    expect(result.records).toMatchObject([{ verdict: "deny", ruleId: "invalid_arguments", ruleSource: "engine" }]);
    const second = prompts(model)[1]!;
    // Replayed as {} (as the AI SDK replays an invalid call): providers take only an object there.
    expect(second[1]).toEqual({
      role: "assistant",
      content: [{ type: "tool-call", toolCallId: "c1", toolName: "read", input: {} }],
    });
    expect(toolMessage(second)?.content).toEqual([
      {
        type: "tool-result",
        toolCallId: "c1",
        toolName: "read",
        output: {
          type: "execution-denied",
          reason: "Invalid arguments for tool 'read': arguments must be JSON values",
        },
      },
    ]);
    // providerData still holds what the model sent.
    const kept = AiSdkProviderDataSchema.parse(
      (result.messages[1] as Extract<Message, { type: "assistant" }>).providerData,
    );
    expect(kept.parts).toEqual([
      { type: "tool-call", toolCallId: "c1", toolName: "read", input: '{"path": "a.txt"', invalidInput: true },
    ]);
  });

  it("a transcript with a call whose arguments were not JSON replays it as {}, with or without providerData, without throwing", async () => {
    const model = new MockLanguageModelV3({ doGenerate: [v3([text("x")]), v3([text("y")])] });
    const refused = {
      type: "tool_result",
      callId: "c1",
      tool: "read",
      content: "Invalid arguments for tool 'read': arguments must be JSON values",
      status: "refused",
      isError: true,
    } as const;
    const tagged: Message = {
      type: "assistant",
      toolCalls: [{ id: "c1", name: "read", input: undefined }],
      providerData: {
        type: "ai-sdk",
        parts: [{ type: "tool-call", toolCallId: "c1", toolName: "read", input: "{oops", invalidInput: true }],
      },
    };
    const untagged: Message = { type: "assistant", toolCalls: [{ id: "c1", name: "read", input: undefined }] };
    for (const assistant of [tagged, untagged]) {
      await new Agent({ model: fromLanguageModel(model), tools: tools() }).run([
        { type: "user", text: "go" },
        assistant,
        refused,
        { type: "user", text: "again" },
      ]);
    }
    for (const prompt of prompts(model)) {
      expect(prompt[1]).toEqual({
        role: "assistant",
        content: [{ type: "tool-call", toolCallId: "c1", toolName: "read", input: {} }],
      });
    }
  });

  it("sends a provider-executed tool's error result as error-json, as the AI SDK does, and leaves empty text parts out", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([
          { type: "text", text: "", providerMetadata: { openai: { itemId: "msg_0" } } },
          {
            type: "tool-call",
            toolCallId: "ws1",
            toolName: "web_search",
            input: '{"query":"a"}',
            providerExecuted: true,
          },
          { type: "tool-result", toolCallId: "ws1", toolName: "web_search", result: "rate limited", isError: true },
          {
            type: "tool-call",
            toolCallId: "ws2",
            toolName: "web_search",
            input: '{"query":"b"}',
            providerExecuted: true,
          },
          { type: "tool-result", toolCallId: "ws2", toolName: "web_search", result: { code: 500 }, isError: true },
          { type: "text", text: "" },
          call("c1", "read", { path: "a" }),
        ]),
        v3([text("done")]),
      ],
    });
    await new Agent({ model: fromLanguageModel(model), tools: tools() }).run("go");
    expect(prompts(model)[1]![1]).toEqual({
      role: "assistant",
      content: [
        { type: "tool-call", toolCallId: "ws1", toolName: "web_search", input: { query: "a" }, providerExecuted: true },
        {
          type: "tool-result",
          toolCallId: "ws1",
          toolName: "web_search",
          output: { type: "error-json", value: "rate limited" },
        },
        { type: "tool-call", toolCallId: "ws2", toolName: "web_search", input: { query: "b" }, providerExecuted: true },
        {
          type: "tool-result",
          toolCallId: "ws2",
          toolName: "web_search",
          output: { type: "error-json", value: { code: 500 } },
        },
        { type: "tool-call", toolCallId: "c1", toolName: "read", input: { path: "a" } },
      ],
    });
  });

  it("empty argument text is no arguments, as the AI SDK reads it", async () => {
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "fail", "")]), v3([text("ok")])] });
    const result = await new Agent({ model: fromLanguageModel(model), tools: tools() }).run("go");
    expect(result.messages[1]).toMatchObject({ toolCalls: [{ id: "c1", name: "fail", input: {} }] });
    expect(result.records.map((r) => r.ruleId)).toEqual(["hook"]);
  });

  it("leaves provider-executed calls and their results alone, and sends them back as they came", async () => {
    const executed: unknown[] = [];
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([
          {
            type: "tool-call",
            toolCallId: "ws1",
            toolName: "web_search",
            input: '{"query":"loopctl"}',
            providerExecuted: true,
          },
          { type: "tool-result", toolCallId: "ws1", toolName: "web_search", result: { hits: 3 } },
          call("c1", "read", { path: "a" }),
        ]),
        v3([text("done")]),
      ],
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: tools(executed) }).run("go");
    expect(result.records.map((r) => r.tool)).toEqual(["read"]);
    expect(result.messages[1]).toMatchObject({ toolCalls: [{ id: "c1", name: "read" }] });
    expect(prompts(model)[1]![1]).toEqual({
      role: "assistant",
      content: [
        {
          type: "tool-call",
          toolCallId: "ws1",
          toolName: "web_search",
          input: { query: "loopctl" },
          providerExecuted: true,
        },
        {
          type: "tool-result",
          toolCallId: "ws1",
          toolName: "web_search",
          output: { type: "json", value: { hits: 3 } },
        },
        { type: "tool-call", toolCallId: "c1", toolName: "read", input: { path: "a" } },
      ],
    });
  });

  it("round-trips reasoning, files and provider metadata through providerData, also after the transcript was stored as JSON", async () => {
    const signature = { anthropic: { signature: "sig-1" } };
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3(
          [
            { type: "reasoning", text: "think", providerMetadata: signature },
            { type: "file", mediaType: "image/png", data: new Uint8Array([1, 2, 3]) },
            { type: "text", text: "reading", providerMetadata: { openai: { itemId: "msg_1", unset: undefined } } },
            {
              type: "tool-call",
              toolCallId: "c1",
              toolName: "read",
              input: '{"path":"a"}',
              providerMetadata: { openai: { itemId: "fc_1" } },
            },
          ],
          { providerMetadata: { openai: { responseId: "resp_1" } } },
        ),
        v3([text("done")]),
        v3([text("again")]),
      ],
    });
    const agent = new Agent({ model: fromLanguageModel(model), tools: tools() });
    const first = await agent.run("go");
    const providerData = AiSdkProviderDataSchema.parse(
      (first.messages[1] as Extract<Message, { type: "assistant" }>).providerData,
    );
    expect(providerData).toMatchObject({
      type: "ai-sdk",
      providerMetadata: { openai: { responseId: "resp_1" } },
      finishReason: "tool-calls",
    });
    const expected = {
      role: "assistant",
      content: [
        { type: "reasoning", text: "think", providerOptions: signature },
        { type: "file", mediaType: "image/png", data: "AQID" },
        { type: "text", text: "reading", providerOptions: { openai: { itemId: "msg_1" } } },
        {
          type: "tool-call",
          toolCallId: "c1",
          toolName: "read",
          input: { path: "a" },
          providerOptions: { openai: { itemId: "fc_1" } },
        },
      ],
    };
    expect(prompts(model)[1]![1]).toEqual(expected);
    const stored = JSON.parse(JSON.stringify(first.messages)) as Message[];
    await agent.run([...stored, { type: "user", text: "more" }]);
    expect(prompts(model)[2]![1]).toEqual(expected);
    expect(prompts(model)[2]!.slice(0, 3)).toEqual(prompts(model)[1]);
  });

  it("usage: a missing total is the sum of the reported parts; a turn reporting nothing adds nothing", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([call("c1", "fail", {})], {
          usage: {
            inputTokens: { total: undefined, noCache: 7, cacheRead: 3, cacheWrite: undefined },
            outputTokens: { total: undefined, text: 2, reasoning: 4 },
          },
        }),
        v3([call("c2", "fail", {})], {
          usage: {
            inputTokens: { total: undefined, noCache: undefined, cacheRead: undefined, cacheWrite: undefined },
            outputTokens: { total: undefined, text: undefined, reasoning: undefined },
          },
        }),
        v3([text("done")], { usage: USAGE }),
      ],
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: tools() }).run("go");
    expect(result.usage).toEqual({ inputTokens: 10 + 10, outputTokens: 6 + 5 });
  });

  it("usage: a missing input total counts the tokens written to the cache too (total = noCache + cacheRead + cacheWrite)", async () => {
    // As Anthropic reports a turn that writes the prompt to its cache: most input tokens are cache writes.
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([text("done")], {
          usage: {
            inputTokens: { total: undefined, noCache: 5, cacheRead: 20, cacheWrite: 1000 },
            outputTokens: { total: undefined, text: 3, reasoning: undefined },
          },
        }),
      ],
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: tools() }).run("go");
    expect(result.usage).toEqual({ inputTokens: 1025, outputTokens: 3 });
  });

  it("usage that is not V3's (V2-style counts, null, a count that is not a number) stops the run with an AiSdkModelError naming it, never counted as nothing", async () => {
    const wrong: [unknown, RegExp][] = [
      [
        { inputTokens: 900, outputTokens: 50 },
        /usage\.inputTokens is not V3's \{ total, noCache, cacheRead, cacheWrite \}, got 900/,
      ],
      [null, /usage is not V3's \{ inputTokens, outputTokens \}, got null/],
      [{ ...USAGE, outputTokens: 50 }, /usage\.outputTokens is not V3's \{ total, text, reasoning \}, got 50/],
      [
        { ...USAGE, inputTokens: { ...USAGE.inputTokens, total: "900" } },
        /usage\.inputTokens\.total is neither a number nor undefined, got "900"/,
      ],
    ];
    for (const [usage, message] of wrong) {
      const executed: unknown[] = [];
      const model = new MockLanguageModelV3({
        provider: "acme",
        modelId: "m1",
        doGenerate: [v3([call("c1", "read", { path: "a.txt" })], { usage: usage as never }), v3([text("done")])],
      });
      const error = (await new Agent({
        model: fromLanguageModel(model),
        tools: tools(executed),
        managers: new LoopManagers().withBudget({ maxTokens: 100 }),
      })
        .run("go")
        .catch((e: unknown) => e)) as ModelError;
      expect(error, JSON.stringify(usage)).toBeInstanceOf(ModelError);
      expect(error.cause, JSON.stringify(usage)).toBeInstanceOf(AiSdkModelError);
      expect((error.cause as AiSdkModelError).message, JSON.stringify(usage)).toMatch(message);
      expect(executed, JSON.stringify(usage)).toEqual([]);
    }
  });

  it("the settings are read once, when fromLanguageModel checks them: a later change to the object reaches no request", async () => {
    const model = new MockLanguageModelV3({ doGenerate: [v3([text("done")])] });
    const toolChoice = { type: "auto" };
    const settings: { temperature: unknown; toolChoice: typeof toolChoice; tools?: unknown; unchecked?: unknown } = {
      temperature: 0,
      toolChoice,
    };
    const bridged = fromLanguageModel(model, { settings: settings as LanguageModelSettings });
    settings.temperature = "hot";
    settings.tools = [{ type: "function", name: "shell", inputSchema: { type: "object" } }];
    settings.unchecked = true;
    toolChoice.type = "required";
    await new Agent({
      model: bridged,
      tools: [defineTool({ name: "noop", description: "", input: z.object({}), execute: () => "" })],
    }).run("go");
    const sent: LanguageModelV3CallOptions = model.doGenerateCalls[0]!;
    expect(sent.temperature).toBe(0);
    expect(sent.toolChoice).toEqual({ type: "auto" });
    expect(sent).not.toHaveProperty("unchecked");
    expect(sent.tools?.map((t) => t.name)).toEqual(["noop"]);
  });

  it("a cancelled run aborts the model's request and rejects with CancelledError", async () => {
    const started = deferred<AbortSignal>();
    const model = new MockLanguageModelV3({
      doGenerate: (options) => {
        started.resolve(options.abortSignal!);
        return new Promise((_, reject) =>
          options.abortSignal!.addEventListener("abort", () => reject(options.abortSignal!.reason), { once: true }),
        );
      },
    });
    const controller = new AbortController();
    const running = new Agent({ model: fromLanguageModel(model), tools: tools() }).run("go", {
      signal: controller.signal,
    });
    const signal = await started.promise;
    controller.abort(new Error("user left"));
    await expect(running).rejects.toBeInstanceOf(CancelledError);
    expect(signal.aborted).toBe(true);
  });

  it("passes the call settings with every request", async () => {
    const model = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
    await new Agent({
      model: fromLanguageModel(model, {
        settings: { temperature: 0, maxOutputTokens: 64, providerOptions: { openai: { store: false } } },
      }),
      tools: [],
    }).run("go");
    expect(model.doGenerateCalls[0]).toMatchObject({
      temperature: 0,
      maxOutputTokens: 64,
      providerOptions: { openai: { store: false } },
    });
    expect(model.doGenerateCalls[0]!.tools).toBeUndefined();
  });

  it("a turn without tools is sent no toolChoice but none, as generateText sends none; a turn with tools gets it", async () => {
    for (const toolChoice of [{ type: "required" }, { type: "auto" }, { type: "tool", toolName: "read" }] as const) {
      const bare = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
      await new Agent({ model: fromLanguageModel(bare, { settings: { toolChoice } }), tools: [] }).run("go");
      expect(bare.doGenerateCalls[0]!.toolChoice, toolChoice.type).toBeUndefined();
      const armed = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
      await new Agent({ model: fromLanguageModel(armed, { settings: { toolChoice } }), tools: tools() }).run("go");
      expect(armed.doGenerateCalls[0]!.toolChoice, toolChoice.type).toEqual(toolChoice);
    }
    const none = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
    await new Agent({ model: fromLanguageModel(none, { settings: { toolChoice: { type: "none" } } }), tools: [] }).run(
      "go",
    );
    expect(none.doGenerateCalls[0]!.toolChoice).toEqual({ type: "none" });
  });

  it("fails closed with typed errors: not a V3 model, a result that is not one, a tampered transcript", async () => {
    expect(() => fromLanguageModel({ specificationVersion: "v2", provider: "p", modelId: "m" } as never)).toThrow(
      AiSdkModelError,
    );
    expect(() => fromLanguageModel("openai/gpt-4.1" as never)).toThrow(/not an AI SDK LanguageModelV3/);
    expect(() => fromLanguageModel(new MockLanguageModelV3(), { refusals: "silent" as never })).toThrow(
      AiSdkModelError,
    );

    const garbage = new MockLanguageModelV3({
      provider: "acme",
      modelId: "m1",
      doGenerate: async () => ({ text: "not v3" }) as never,
    });
    const error = (await new Agent({ model: fromLanguageModel(garbage), tools: [] })
      .run("go")
      .catch((e: unknown) => e)) as ModelError;
    expect(error).toBeInstanceOf(ModelError);
    expect(error.cause).toBeInstanceOf(AiSdkModelError);
    expect((error.cause as AiSdkModelError).model).toBe("acme/m1");

    const unknownPart = new MockLanguageModelV3({ doGenerate: [v3([{ type: "hologram" } as never])] });
    await expect(new Agent({ model: fromLanguageModel(unknownPart), tools: [] }).run("go")).rejects.toMatchObject({
      cause: { code: "AI_SDK_MODEL" },
    });

    const model = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
    const tampered: Message[] = [
      { type: "user", text: "hi" },
      { type: "assistant", toolCalls: [], providerData: { type: "ai-sdk", parts: [{ type: "reasoning" }] } },
      { type: "user", text: "again" },
    ];
    const failed = (await new Agent({ model: fromLanguageModel(model), tools: [] })
      .run(tampered)
      .catch((e: unknown) => e)) as ModelError;
    expect(failed.cause).toBeInstanceOf(AiSdkTranscriptError);
    expect((failed.cause as AiSdkTranscriptError).index).toBe(1);
    expect(model.doGenerateCalls).toHaveLength(0);
  });

  it("a result part that is not what V3 says it is stops the run with an AiSdkModelError naming it, before any call of that turn runs", async () => {
    const malformed: [string, unknown][] = [
      ["text", { type: "text" }],
      ["reasoning", { type: "reasoning", text: 5 }],
      ["file", { type: "file", mediaType: "image/png" }],
      ["tool-result", { type: "tool-result", toolCallId: "p1", toolName: "web_search" }],
      ["providerMetadata", { type: "text", text: "hi", providerMetadata: { acme: "not an object" } }],
      [
        "providerExecuted",
        { type: "tool-call", toolCallId: "p0", toolName: "read", input: '{"path":"b"}', providerExecuted: "true" },
      ],
    ];
    for (const [name, part] of malformed) {
      const executed: unknown[] = [];
      const model = new MockLanguageModelV3({
        provider: "acme",
        modelId: "m1",
        doGenerate: [v3([part as never, call("c1", "read", { path: "a.txt" })]), v3([text("done")])],
      });
      const error = (await new Agent({ model: fromLanguageModel(model), tools: tools(executed) })
        .run("go")
        .catch((e: unknown) => e)) as ModelError;
      expect(error, name).toBeInstanceOf(ModelError);
      expect(error.cause, name).toBeInstanceOf(AiSdkModelError);
      expect((error.cause as AiSdkModelError).message, name).toMatch(/^model acme\/m1: content\[0\]/);
      expect(executed, name).toEqual([]);
      expect(model.doGenerateCalls, name).toHaveLength(1);
    }
  });

  it("options and settings that are not objects are typed errors naming the model", () => {
    const model = new MockLanguageModelV3({ provider: "acme", modelId: "m1" });
    for (const options of [null, "fast", { settings: null }, { settings: "temperature=0" }, { settings: [0.2] }]) {
      const error = thrownBy(() => fromLanguageModel(model, options as never));
      expect(error).toBeInstanceOf(AiSdkModelError);
      expect(error).toMatchObject({
        model: "acme/m1",
        message: expect.stringMatching(/(options|settings) must be an object/),
      });
    }
  });

  it("options are refused as every options object is: a string named never shown, an array, an AbortSignal, keys that cannot be listed", () => {
    const model = new MockLanguageModelV3({ provider: "acme", modelId: "m1" });
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    for (const [options, message] of [
      ["sk-live-123", "options must be an object, got a string"],
      [[], "options must be an object, got an array"],
      [new AbortController().signal, "options must be an object, got an AbortSignal"],
      [proxy, "options cannot be read: Cannot perform 'IsArray' on a proxy that has been revoked"],
      [{ refusal: "error-text" }, "unknown option 'refusal' (did you mean refusals?)"],
      [{ seed: 7 }, "unknown option 'seed' (call settings go under settings: { seed })"],
    ] as const) {
      const error = thrownBy(() => fromLanguageModel(model, options as never));
      expect(error, message).toBeInstanceOf(AiSdkModelError);
      expect(error, message).toMatchObject({ model: "acme/m1", message: `model acme/m1: ${message}` });
    }
  });

  it("an option outside settings, or a setting V3 does not take, is a typed error naming it", () => {
    const model = new MockLanguageModelV3({ provider: "acme", modelId: "m1" });
    const cases: [unknown, RegExp][] = [
      [{ temperature: 0 }, /unknown option 'temperature'.*settings: \{ temperature \}/],
      [{ settings: {}, maxOutputTokens: 64 }, /unknown option 'maxOutputTokens'/],
      [{ refusal: "error-text" }, /unknown option 'refusal'/],
      [{ settings: { temprature: 0 } }, /unknown setting 'temprature'/],
      [{ settings: { tools: [] } }, /setting 'tools'.*each request/],
      [{ settings: { prompt: [] } }, /setting 'prompt'.*each request/],
      [{ settings: { abortSignal: new AbortController().signal } }, /setting 'abortSignal'.*each request/],
    ];
    for (const [options, message] of cases) {
      const error = thrownBy(() => fromLanguageModel(model, options as never));
      expect(error, JSON.stringify(options)).toBeInstanceOf(AiSdkModelError);
      expect(error, JSON.stringify(options)).toMatchObject({
        model: "acme/m1",
        message: expect.stringMatching(message),
      });
    }
    const every: LanguageModelSettings = {
      maxOutputTokens: 64,
      temperature: 0,
      stopSequences: ["END"],
      topP: 1,
      topK: 40,
      presencePenalty: 0,
      frequencyPenalty: 0,
      responseFormat: { type: "text" },
      seed: 7,
      toolChoice: { type: "auto" },
      includeRawChunks: false,
      headers: { "x-run": "1" },
      providerOptions: { acme: { store: false } },
    };
    expect(() => fromLanguageModel(model, { settings: every, refusals: "error-text" })).not.toThrow();
  });

  it("a getter that throws (of the model, the options or a setting) is an AiSdkModelError naming what could not be read", () => {
    const boom = (): never => {
      throw new Error("boom");
    };
    const model = new MockLanguageModelV3({ provider: "acme", modelId: "m1" });
    const throwing = Object.defineProperty(new MockLanguageModelV3({ provider: "acme", modelId: "m1" }), "doGenerate", {
      get: boom,
    });
    for (const [bridged, options, message] of [
      [throwing, {}, "the model cannot be read: boom"],
      [
        model,
        {
          get settings() {
            return boom();
          },
        },
        "options cannot be read: boom",
      ],
      [
        model,
        {
          settings: {
            get temperature() {
              return boom();
            },
          },
        },
        "settings cannot be read: boom",
      ],
      [
        model,
        {
          settings: {
            toolChoice: {
              get type() {
                return boom();
              },
            },
          },
        },
        "setting 'toolChoice' cannot be read: boom",
      ],
    ] as const) {
      const error = thrownBy(() => fromLanguageModel(bridged, options));
      expect(error, message).toBeInstanceOf(AiSdkModelError);
      expect(error, message).toMatchObject({ model: "acme/m1", message: `model acme/m1: ${message}` });
    }
  });

  it("a call setting of the wrong kind is a typed error naming it, as generateText refuses it", () => {
    const model = new MockLanguageModelV3({ provider: "acme", modelId: "m1" });
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ temperature: "0" }, /setting 'temperature' must be a number, got "0"/],
      [{ topP: null }, /setting 'topP' must be a number, got null/],
      [{ topK: "40" }, /setting 'topK' must be a number/],
      [{ presencePenalty: true }, /setting 'presencePenalty' must be a number, got true/],
      [{ frequencyPenalty: "1" }, /setting 'frequencyPenalty' must be a number/],
      [{ maxOutputTokens: 64.5 }, /setting 'maxOutputTokens' must be an integer >= 1, got 64.5/],
      [{ maxOutputTokens: 0 }, /setting 'maxOutputTokens' must be an integer >= 1, got 0/],
      [{ seed: "7" }, /setting 'seed' must be an integer, got "7"/],
      [
        { toolChoice: null },
        /setting 'toolChoice' must be \{ type: "auto" \| "none" \| "required" \} or \{ type: "tool", toolName \}, got null/,
      ],
      [{ toolChoice: "auto" }, /setting 'toolChoice' must be/],
      [{ toolChoice: { type: "tool" } }, /setting 'toolChoice' must be/],
    ];
    for (const [settings, message] of cases) {
      const error = thrownBy(() => fromLanguageModel(model, { settings }));
      expect(error, JSON.stringify(settings)).toBeInstanceOf(AiSdkModelError);
      expect(error, JSON.stringify(settings)).toMatchObject({
        model: "acme/m1",
        message: expect.stringMatching(message),
      });
    }
    expect(() => fromLanguageModel(model, { settings: { seed: -3, maxOutputTokens: 1 } })).not.toThrow();
  });

  it("a finish reason that is not V3's { unified, raw } stops the run with an AiSdkModelError naming finishReason", async () => {
    const wrong: unknown[] = [
      "error",
      "stop",
      undefined,
      { unified: "finished", raw: "done" },
      { unified: "stop", raw: 5 },
    ];
    for (const finishReason of wrong) {
      const executed: unknown[] = [];
      const model = new MockLanguageModelV3({
        provider: "acme",
        modelId: "m1",
        doGenerate: [
          v3([call("c1", "read", { path: "a.txt" })], { finishReason: finishReason as never }),
          v3([text("done")]),
        ],
      });
      const error = (await new Agent({ model: fromLanguageModel(model), tools: tools(executed) })
        .run("go")
        .catch((e: unknown) => e)) as ModelError;
      const name = JSON.stringify(finishReason) ?? "undefined";
      expect(error, name).toBeInstanceOf(ModelError);
      expect(error.cause, name).toBeInstanceOf(AiSdkModelError);
      expect((error.cause as AiSdkModelError).message, name).toMatch(
        /^model acme\/m1: finishReason(\.unified|\.raw)? /,
      );
      expect(executed, name).toEqual([]);
    }
  });

  it("a client call sharing its id with a provider-executed call or result of the same turn stops the run, naming the id, before anything runs", async () => {
    const providerCall = {
      type: "tool-call",
      toolCallId: "x1",
      toolName: "web_search",
      input: '{"query":"loopctl"}',
      providerExecuted: true,
    } as const;
    const providerResult = {
      type: "tool-result",
      toolCallId: "x1",
      toolName: "web_search",
      result: { hits: 3 },
    } as const;
    const turns = [
      [providerCall, providerResult, call("x1", "read", { path: "a.txt" })],
      [call("x1", "read", { path: "a.txt" }), providerCall],
      [providerResult, call("x1", "read", { path: "a.txt" })],
    ];
    for (const [i, content] of turns.entries()) {
      const executed: unknown[] = [];
      const model = new MockLanguageModelV3({
        provider: "acme",
        modelId: "m1",
        doGenerate: [v3(content), v3([text("done")])],
      });
      const error = (await new Agent({ model: fromLanguageModel(model), tools: tools(executed) })
        .run("go")
        .catch((e: unknown) => e)) as ModelError;
      expect(error, String(i)).toBeInstanceOf(ModelError);
      expect(error.cause, String(i)).toBeInstanceOf(AiSdkModelError);
      expect((error.cause as AiSdkModelError).message, String(i)).toMatch(/'x1'.*provider-executed/);
      expect(executed, String(i)).toEqual([]);
      expect(model.doGenerateCalls, String(i)).toHaveLength(1);
    }
  });

  it("a stored transcript whose assistant message has a client call under the id of a provider-executed part is refused, never sent with the client call's arguments", async () => {
    const providerCall = {
      type: "tool-call",
      toolCallId: "x1",
      toolName: "web_search",
      input: { query: "loopctl" },
      providerExecuted: true,
    };
    const providerResult = { type: "tool-result", toolCallId: "x1", toolName: "web_search", result: { hits: 3 } };
    const clientCall = { type: "tool-call", toolCallId: "x1", toolName: "read", input: { path: "secret" } };
    for (const parts of [
      [providerCall, providerResult, clientCall],
      [providerResult, clientCall],
    ]) {
      const model = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
      const stored: Message[] = [
        { type: "user", text: "hi" },
        {
          type: "assistant",
          toolCalls: [{ id: "x1", name: "read", input: { path: "secret" } }],
          providerData: { type: "ai-sdk", parts },
        },
        { type: "tool_result", callId: "x1", tool: "read", content: "S", status: "ran", isError: false },
        { type: "user", text: "again" },
      ];
      const failed = (await new Agent({ model: fromLanguageModel(model), tools: [] })
        .run(stored)
        .catch((e: unknown) => e)) as ModelError;
      expect(failed).toBeInstanceOf(ModelError);
      expect(failed.cause).toBeInstanceOf(AiSdkTranscriptError);
      expect(failed.cause).toMatchObject({ index: 1, message: expect.stringMatching(/'x1'.*provider-executed/) });
      expect(model.doGenerateCalls).toHaveLength(0);
    }
  });

  it("a stored transcript's call id holding a newline or a quote is shown in JSON's escapes when it is refused", async () => {
    const id = "x1'\n\u001b[31mforged";
    const parts = [
      { type: "tool-result", toolCallId: id, toolName: "web_search", result: { hits: 3 } },
      { type: "tool-call", toolCallId: id, toolName: "read", input: { path: "secret" } },
    ];
    const model = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
    const stored: Message[] = [
      { type: "user", text: "hi" },
      {
        type: "assistant",
        toolCalls: [{ id, name: "read", input: { path: "secret" } }],
        providerData: { type: "ai-sdk", parts },
      },
      { type: "tool_result", callId: id, tool: "read", content: "S", status: "ran", isError: false },
      { type: "user", text: "again" },
    ];
    const failed = (await new Agent({ model: fromLanguageModel(model), tools: [] })
      .run(stored)
      .catch((e: unknown) => e)) as ModelError;
    expect(failed.cause).toBeInstanceOf(AiSdkTranscriptError);
    expect((failed.cause as Error).message).toBe(
      `messages[1]: the tool call ${JSON.stringify(id)} has the id of a provider-executed tool-result of the same message`,
    );
  });

  it("an assistant turn with nothing to send back is left out of the next request, as the AI SDK leaves it out", async () => {
    // Providers reject a message without content (Anthropic: "all messages must have non-empty content").
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([text("")], { finishReason: { unified: "content-filter", raw: "refusal" } }),
        v3([text("ok")]),
        v3([text("ok")]),
      ],
    });
    const agent = new Agent({ model: fromLanguageModel(model), tools: tools() });
    const first = await agent.run("go");
    await agent.run([...first.messages, { type: "user", text: "again" }]);
    await agent.run([
      { type: "user", text: "hi" },
      { type: "assistant", text: "", toolCalls: [] },
      { type: "user", text: "and?" },
    ]);
    expect(prompts(model)[1]).toEqual([
      { role: "user", content: [{ type: "text", text: "go" }] },
      { role: "user", content: [{ type: "text", text: "again" }] },
    ]);
    expect(prompts(model)[2]).toEqual([
      { role: "user", content: [{ type: "text", text: "hi" }] },
      { role: "user", content: [{ type: "text", text: "and?" }] },
    ]);
  });

  it("a transcript from elsewhere (no providerData) goes as text and tool calls", async () => {
    const model = new MockLanguageModelV3({ doGenerate: [v3([text("x")])] });
    await new Agent({ model: fromLanguageModel(model), tools: [] }).run([
      { type: "user", text: "hi" },
      { type: "assistant", text: "calling", toolCalls: [{ id: "k1", name: "read", input: { path: "a" } }] },
      { type: "tool_result", callId: "k1", tool: "read", content: "A", status: "ran", isError: false },
      { type: "user", text: "and?" },
    ]);
    expect(prompts(model)[0]).toEqual([
      { role: "user", content: [{ type: "text", text: "hi" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "calling" },
          { type: "tool-call", toolCallId: "k1", toolName: "read", input: { path: "a" } },
        ],
      },
      {
        role: "tool",
        content: [{ type: "tool-result", toolCallId: "k1", toolName: "read", output: { type: "text", value: "A" } }],
      },
      { role: "user", content: [{ type: "text", text: "and?" }] },
    ]);
  });

  it("many turns: each request holds the whole transcript once, in order", async () => {
    const turns = 6;
    const model = new MockLanguageModelV3({
      doGenerate: [
        ...Array.from({ length: turns }, (_, i) => v3([call(`c${i}`, "read", { path: `f${i}` })])),
        v3([text("done")]),
      ],
    });
    await new Agent({ model: fromLanguageModel(model), tools: tools() }).run("go");
    await until(() => model.doGenerateCalls.length === turns + 1);
    const last = prompts(model)[turns]!;
    expect(last).toHaveLength(1 + 2 * turns);
    expect(
      last.filter((m) => m.role === "tool").map((m) => (m.content[0] as { toolCallId: string }).toolCallId),
    ).toEqual(Array.from({ length: turns }, (_, i) => `c${i}`));
  });
});
