import type { LanguageModelV3Prompt } from "@ai-sdk/provider";
import { MockLanguageModelV3 } from "ai/test";
import { describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { AiSdkModelError, AiSdkProviderDataSchema, fromLanguageModel } from "loopctl/ai-sdk";
import { Agent, LoopManagers, ModelError, defineTool } from "loopctl/engine";
import type { Message } from "loopctl/engine";
import { call, text, v3 } from "./support/ai-sdk-fixtures.js";

const read = defineTool({
  name: "read",
  description: "Read a file",
  input: z.object({ path: z.string() }),
  execute: ({ path }) => `contents of ${path}`,
});
const allow = () => new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) });
const prompts = (model: MockLanguageModelV3): LanguageModelV3Prompt[] => model.doGenerateCalls.map((c) => c.prompt);

/** Every tool call of a prompt, and every tool result, by id. */
function callsAndResults(prompt: LanguageModelV3Prompt): { calls: string[]; results: string[] } {
  const calls: string[] = [];
  const results: string[] = [];
  for (const message of prompt) {
    if (message.role === "assistant")
      for (const part of message.content) if (part.type === "tool-call") calls.push(part.toolCallId);
    if (message.role === "tool")
      for (const part of message.content) if (part.type === "tool-result") results.push(part.toolCallId);
  }
  return { calls, results };
}

describe("fromLanguageModel: the Agent loop on an AI SDK model", () => {
  it("a call the model sent without an id goes back once, under the id its result carries", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([text("reading"), call("", "read", { path: "a" }), call("", "read", { path: "b" })]),
        v3([text("done")]),
      ],
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() }).run("go");
    const ran = (result.messages[1] as Extract<Message, { type: "assistant" }>).toolCalls.map((c) => c.id);
    expect(ran).toHaveLength(2);
    expect(ran.every((id) => id !== "")).toBe(true);
    const second = prompts(model)[1]!;
    expect(callsAndResults(second)).toEqual({ calls: ran, results: ran });
    expect(second[1]).toEqual({
      role: "assistant",
      content: [
        { type: "text", text: "reading" },
        { type: "tool-call", toolCallId: ran[0], toolName: "read", input: { path: "a" } },
        { type: "tool-call", toolCallId: ran[1], toolName: "read", input: { path: "b" } },
      ],
    });
  });
});

describe("fromLanguageModel: a model that numbers its calls anew each turn", () => {
  it("a call whose id an earlier turn's call has goes back once, under the fresh id its result carries", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([call("call_0", "read", { path: "a" })]),
        v3([call("call_0", "read", { path: "b" })]),
        v3([text("done")]),
      ],
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() }).run("go");
    const ids = result.messages.flatMap((m) => (m.type === "assistant" ? m.toolCalls.map((c) => c.id) : []));
    expect(ids[0]).toBe("call_0");
    expect(ids[1]).not.toBe("call_0");
    const last = prompts(model)[2]!;
    expect(callsAndResults(last)).toEqual({ calls: ids, results: ids });
    expect(last[3]).toMatchObject({
      role: "assistant",
      content: [{ type: "tool-call", toolCallId: ids[1], toolName: "read", input: { path: "b" } }],
    });
  });
});

describe("fromLanguageModel: ids a provider-executed part took in an earlier turn", () => {
  it("a client call under the id of an earlier turn's provider-executed call goes back under an id of its own, as a reused id does", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([
          { type: "tool-call", toolCallId: "ws1", toolName: "web_search", input: "{}", providerExecuted: true },
          { type: "tool-result", toolCallId: "ws1", toolName: "web_search", result: { hits: 1 } },
          call("c1", "read", { path: "a" }),
        ]),
        v3([call("ws1", "read", { path: "b" })]),
        v3([text("done")]),
      ],
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() }).run("go");
    expect(result.records.map((r) => r.verdict)).toEqual(["allow", "allow"]);
    const last = prompts(model)[2]!;
    const { calls, results } = callsAndResults(last);
    expect(calls).toHaveLength(3);
    expect(new Set(calls).size).toBe(3);
    const renamed = calls[2]!;
    expect(renamed).toMatch(/^call_/);
    expect(results).toEqual(["c1", renamed]);
  });
});

describe("fromLanguageModel: a turn the provider reports as failed", () => {
  it("a result whose finish reason is error stops the run with a ModelError naming the model, not an empty answer", async () => {
    const model = new MockLanguageModelV3({
      provider: "acme",
      modelId: "m1",
      doGenerate: [
        v3([call("c1", "read", { path: "a" })]),
        v3([], { finishReason: { unified: "error", raw: "server_error" } }),
      ],
    });
    const run = new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() }).run("go");
    const error = await run.catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(ModelError);
    const stopped = error as ModelError;
    expect(stopped.cause).toBeInstanceOf(AiSdkModelError);
    expect((stopped.cause as AiSdkModelError).model).toBe("acme/m1");
    expect(stopped.message).toContain("finish reason error");
    expect(stopped.message).toContain("server_error");
    // What ran before stays in the transcript the error carries.
    expect(stopped.records.map((r) => r.verdict)).toEqual(["allow"]);
    expect(stopped.messages.map((m) => m.type)).toEqual(["user", "assistant", "tool_result"]);
  });

  it("a turn cut short (length, content-filter) is still the model's answer", async () => {
    for (const unified of ["length", "content-filter", "other"] as const) {
      const model = new MockLanguageModelV3({
        doGenerate: [v3([text("partial")], { finishReason: { unified, raw: undefined } })],
      });
      const result = await new Agent({ model: fromLanguageModel(model), tools: [read] }).run("go");
      expect(result.text).toBe("partial");
    }
  });
});

describe("fromLanguageModel: tool calls of a turn the provider cut short", () => {
  it("a turn ending in length, content-filter or other with client calls stops the run before any of them runs, as the AI SDK runs none of them", async () => {
    for (const unified of ["length", "content-filter", "other"] as const) {
      const executed: string[] = [];
      const tool = defineTool({
        name: "read",
        description: "Read a file",
        input: z.object({ path: z.string() }),
        execute: ({ path }) => (executed.push(path), `contents of ${path}`),
      });
      const model = new MockLanguageModelV3({
        provider: "acme",
        modelId: "m1",
        doGenerate: [
          v3([call("c1", "read", { path: "a" })]),
          v3([text("also"), call("c2", "read", { path: "b" })], { finishReason: { unified, raw: "cut" } }),
          v3([text("done")]),
        ],
      });
      const error = await new Agent({ model: fromLanguageModel(model), tools: [tool], managers: allow() })
        .run("go")
        .catch((thrown: unknown) => thrown);
      expect(error, unified).toBeInstanceOf(ModelError);
      const stopped = error as ModelError;
      expect(stopped.cause, unified).toBeInstanceOf(AiSdkModelError);
      expect((stopped.cause as AiSdkModelError).message, unified).toBe(
        `model acme/m1: the provider ended the turn with finish reason ${unified} ("cut"), so its tool call 'c2' (read) is not run (the AI SDK runs a turn's calls only when it ends in stop or tool-calls)`,
      );
      // What ran before stays, with its record; the cut turn's call never ran.
      expect(executed, unified).toEqual(["a"]);
      expect(
        stopped.records.map((r) => r.verdict),
        unified,
      ).toEqual(["allow"]);
      expect(model.doGenerateCalls, unified).toHaveLength(2);
    }
  });

  it("names a cut turn's call by the id the model sent, one an earlier provider-executed part holds included", async () => {
    const model = new MockLanguageModelV3({
      provider: "acme",
      modelId: "m1",
      doGenerate: [
        v3([
          { type: "tool-call", toolCallId: "ws1", toolName: "web_search", input: "{}", providerExecuted: true },
          { type: "tool-result", toolCallId: "ws1", toolName: "web_search", result: { hits: 1 } },
          call("c1", "read", { path: "a" }),
        ]),
        v3([call("ws1", "read", { path: "b" })], { finishReason: { unified: "length", raw: undefined } }),
      ],
    });
    const error = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() })
      .run("go")
      .catch((thrown: unknown) => thrown);
    expect((error as ModelError).cause).toBeInstanceOf(AiSdkModelError);
    expect(((error as ModelError).cause as AiSdkModelError).message).toContain(
      "so its tool call 'ws1' (read) is not run",
    );
  });

  it("a turn ending in stop with client calls runs them, as the AI SDK does", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([call("c1", "read", { path: "a" })], { finishReason: { unified: "stop", raw: "end_turn" } }),
        v3([text("done")]),
      ],
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() }).run("go");
    expect(result.records.map((r) => r.verdict)).toEqual(["allow"]);
    expect(result.text).toBe("done");
  });
});

describe("fromLanguageModel: a call id or tool name holding a newline, an escape sequence or a quote", () => {
  const id = "c2'\n\u001b[31mforged";
  const name = "read\n(write)";

  it("is shown in JSON's escapes when a cut turn's calls are named, a plain one as before", async () => {
    const model = new MockLanguageModelV3({
      provider: "acme",
      modelId: "m1",
      doGenerate: [
        v3([call(id, name, { path: "b" }), call("c3", "read", { path: "c" })], {
          finishReason: { unified: "length", raw: undefined },
        }),
      ],
    });
    const error = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() })
      .run("go")
      .catch((thrown: unknown) => thrown);
    expect(((error as ModelError).cause as AiSdkModelError).message).toContain(
      `so its tool calls ${JSON.stringify(id)} (${JSON.stringify(name)}), 'c3' (read) are not run`,
    );
  });

  it("is shown in JSON's escapes when a client call shares the id of a provider-executed part", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: [
        v3([
          { type: "tool-call", toolCallId: id, toolName: "web_search", input: "{}", providerExecuted: true },
          call(id, "read", { path: "a" }),
        ]),
      ],
    });
    const error = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() })
      .run("go")
      .catch((thrown: unknown) => thrown);
    expect(((error as ModelError).cause as AiSdkModelError).message).toContain(
      `is a tool call whose id ${JSON.stringify(id)} is also that of the provider-executed tool-call`,
    );
  });

  it("an unknown tool the model calls is named to it in JSON's escapes", async () => {
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", name, {})]), v3([text("done")])] });
    const result = await new Agent({ model: fromLanguageModel(model), tools: [read], managers: allow() }).run("go");
    expect(result.messages.filter((m) => m.type === "tool_result")).toMatchObject([
      { content: `Unknown tool ${JSON.stringify(name)}`, isError: true },
    ]);
  });
});

describe("fromLanguageModel: arguments nested past what a transcript keeps", () => {
  it("a call whose JSON arguments nest too deep is refused by the gate, as arguments that are not JSON are; the run goes on", async () => {
    for (const depth of [998, 1001, 5000]) {
      const nested = `{"path":"a","deep":${"[".repeat(depth)}${"]".repeat(depth)}}`;
      const model = new MockLanguageModelV3({
        doGenerate: [v3([call("c1", "read", nested), call("c2", "read", { path: "b" })]), v3([text("done")])],
      });
      const executed: unknown[] = [];
      const tool = defineTool({
        name: "read",
        description: "Read a file",
        input: z.object({ path: z.string() }).passthrough(),
        execute: ({ path }) => (executed.push(path), `contents of ${path}`),
      });
      const result = await new Agent({ model: fromLanguageModel(model), tools: [tool], managers: allow() }).run("go");
      expect(result.text).toBe("done");
      expect(executed).toEqual(["b"]);
      expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([
        ["deny", "invalid_arguments"],
        ["allow", "hook"],
      ]);
      const results = result.messages.filter((m) => m.type === "tool_result");
      expect(results.map((m) => [m.callId, m.status])).toEqual([
        ["c1", "refused"],
        ["c2", "ran"],
      ]);
      // The call goes back to the provider as an invalid one does, with arguments {}.
      expect(callsAndResults(prompts(model)[1]!)).toEqual({ calls: ["c1", "c2"], results: ["c1", "c2"] });
      expect(prompts(model)[1]![1]).toMatchObject({
        role: "assistant",
        content: [{ type: "tool-call", toolCallId: "c1", input: {} }, { toolCallId: "c2" }],
      });
    }
    // Nested as deep as a transcript keeps, the arguments go through.
    const deep = `{"path":"a","deep":${"[".repeat(990)}${"]".repeat(990)}}`;
    const model = new MockLanguageModelV3({ doGenerate: [v3([call("c1", "read", deep)]), v3([text("done")])] });
    const tool = defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }).passthrough(),
      execute: ({ path }) => `contents of ${path}`,
    });
    const result = await new Agent({ model: fromLanguageModel(model), tools: [tool], managers: allow() }).run("go");
    expect(result.messages.filter((m) => m.type === "tool_result").map((m) => m.status)).toEqual(["ran"]);
  });
});

describe("fromLanguageModel: the cost of a turn", () => {
  it("parses each turn's providerData once, not again at every later turn whose prompt holds it; what goes back is as before", async () => {
    const turns = 40;
    const answers = Array.from({ length: turns }, (_, n) =>
      n < turns - 1
        ? v3([
            { type: "reasoning", text: `thinking ${n}`, providerMetadata: { acme: { signature: `s${n}` } } },
            call(`c${n}`, "read", { path: `f${n}` }),
          ])
        : v3([text("done")]),
    );
    const model = new MockLanguageModelV3({ doGenerate: answers });
    const parse = vi.spyOn(AiSdkProviderDataSchema, "safeParse");
    try {
      const agent = new Agent({
        model: fromLanguageModel(model),
        tools: [read],
        managers: allow().withBudget({ maxTurns: turns }),
      });
      const result = await agent.run("go");
      expect(result.text).toBe("done");
      // One parse of each answer as it comes, and one of each assistant message the first time a prompt holds it.
      expect(parse.mock.calls.length).toBeLessThanOrEqual(2 * turns);
      // A run resumed from the stored transcript parses each of its turns once too (its 40 assistant
      // messages, then the two answers, and the first of them once more as the second prompt holds it).
      parse.mockClear();
      const resumed = new MockLanguageModelV3({
        doGenerate: [v3([call("r1", "read", { path: "x" })]), v3([text("again")])],
      });
      const again = await new Agent({ model: fromLanguageModel(resumed), tools: [read], managers: allow() }).run([
        ...JSON.parse(JSON.stringify(result.messages)),
        { type: "user", text: "once more" },
      ]);
      expect(again.text).toBe("again");
      expect(parse.mock.calls.length).toBeLessThanOrEqual(turns + 3);
    } finally {
      parse.mockRestore();
    }
    // Every turn's prompt still holds every earlier turn as the provider sent it.
    const last = prompts(model).at(-1)!;
    const assistants = last.filter((message) => message.role === "assistant");
    expect(assistants).toHaveLength(turns - 1);
    expect(assistants[7]).toEqual({
      role: "assistant",
      content: [
        { type: "reasoning", text: "thinking 7", providerOptions: { acme: { signature: "s7" } } },
        { type: "tool-call", toolCallId: "c7", toolName: "read", input: { path: "f7" } },
      ],
    });
  });
});
