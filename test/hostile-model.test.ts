import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { SyncAskResolver } from "../src/ask/index.js";
import {
  Agent,
  EngineConfigError,
  defineTool,
  Gate,
  LoopDetectedError,
  LoopManagers,
  ModelError,
  RunStoppedError,
  ToolDefinitionError,
  permissionMiddleware,
} from "../src/engine/index.js";
import type { Model, ModelResponse, RunResult, Tool, ToolCall } from "../src/engine/index.js";
import { LoopctlError } from "../src/errors.js";
import { argsDigest } from "../src/grant/index.js";
import { ScriptedModel } from "../src/testing/index.js";
import { readTool, until, writeTool } from "./support/engine-fixtures.js";
import { referenceDigest16 } from "./support/fnv-reference.js";

/** Generated model turns per property; raise with LOOPCTL_FUZZ_RUNS. */
const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);
const DEPTH = 100_000;

const pristine = Object.getOwnPropertyNames(Object.prototype).sort();
afterEach(() => {
  expect(Object.getOwnPropertyNames(Object.prototype).sort()).toEqual(pristine);
  expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
});

function tools(executed: unknown[]) {
  return [readTool(executed), writeTool(executed)];
}

/** An object whose every read throws, as a broken adapter might hand back. */
function bomb(): object {
  const fail = (): never => {
    throw new Error("getter bomb");
  };
  return new Proxy({}, { get: fail, has: fail, ownKeys: fail, getOwnPropertyDescriptor: fail });
}

/** A model that answers every turn with `call` (a fresh id each time), forever. */
function foreverModel(call: Omit<ToolCall, "id">): Model & { turns: number } {
  const model = {
    turns: 0,
    generate: async (): Promise<ModelResponse> => {
      model.turns += 1;
      return { toolCalls: [{ ...call, id: `c${model.turns}` }] };
    },
  };
  return model;
}

/** Runs to the end; a rejection must be a typed RunStoppedError. */
async function settle(agent: Agent): Promise<RunResult | RunStoppedError> {
  try {
    return await agent.run("go");
  } catch (error) {
    if (!(error instanceof RunStoppedError)) {
      throw new Error(`the run rejected with an untyped ${(error as Error)?.name ?? typeof error}: ${String(error)}`, {
        cause: error,
      });
    }
    return error;
  }
}

describe("a model that calls tools badly gets error results, never a crash", () => {
  it.each<[string, ToolCall, string]>([
    ["an unknown tool", { id: "c1", name: "rm_rf", input: {} }, "Unknown tool 'rm_rf'"],
    ["an empty tool name", { id: "c1", name: "", input: {} }, "Unknown tool ''"],
    ["a tool named __proto__", { id: "c1", name: "__proto__", input: {} }, "Unknown tool '__proto__'"],
    ["a tool named constructor", { id: "c1", name: "constructor", input: {} }, "Unknown tool 'constructor'"],
    ["a wrongly typed argument", { id: "c1", name: "read", input: { path: 5 } }, "Invalid arguments for tool 'read': "],
    ["a missing argument", { id: "c1", name: "write", input: {} }, "Invalid arguments for tool 'write': "],
    [
      "an extra argument the schema forbids",
      { id: "c1", name: "write", input: { path: "a", sudo: true } },
      "Invalid arguments for tool 'write': ",
    ],
    [
      "a string instead of an object",
      { id: "c1", name: "read", input: '{"path":"a"}' },
      "Invalid arguments for tool 'read': ",
    ],
    ["an array", { id: "c1", name: "read", input: ["a"] }, "Invalid arguments for tool 'read': "],
    ["null", { id: "c1", name: "read", input: null }, "Invalid arguments for tool 'read': "],
    ["a number", { id: "c1", name: "write", input: 42 }, "Invalid arguments for tool 'write': "],
    ["no input at all", { id: "c1", name: "read", input: undefined }, "Invalid arguments for tool 'read': "],
    ["NaN inside", { id: "c1", name: "read", input: { path: Number.NaN } }, "Invalid arguments for tool 'read': "],
    [
      "a BigInt",
      { id: "c1", name: "read", input: { path: 1n } },
      "Invalid arguments for tool 'read': arguments must be JSON values",
    ],
    ["a function", { id: "c1", name: "read", input: { path: () => "a" } }, "Invalid arguments for tool 'read': "],
    ["a symbol", { id: "c1", name: "read", input: { path: Symbol("a") } }, "Invalid arguments for tool 'read': "],
  ])("%s: one error result, one record, the tool never runs, the run goes on", async (_label, call, text) => {
    const executed: unknown[] = [];
    const model = new ScriptedModel([() => ({ toolCalls: [call] }), { text: "done" }]);
    const agent = new Agent({ model: model, tools: tools(executed), managers: new LoopManagers() });
    const outcome = await settle(agent);
    expect(executed).toEqual([]);
    expect(outcome).not.toBeInstanceOf(Error);
    const result = outcome as RunResult;
    expect(result.records).toHaveLength(1);
    expect(["deny", "allow"]).toContain(result.records[0]!.verdict);
    const reply = result.messages.find((m) => m.type === "tool_result");
    expect(reply).toMatchObject({ type: "tool_result", callId: "c1", isError: true });
    expect((reply as { content: string }).content.startsWith(text)).toBe(true);
  });

  it("a cyclic argument object: refused as not JSON, the run goes on", async () => {
    const cyclic: Record<string, unknown> = { path: "a" };
    cyclic["self"] = cyclic;
    const executed: unknown[] = [];
    const agent = new Agent({
      model: new ScriptedModel([() => ({ toolCalls: [{ id: "c1", name: "read", input: cyclic }] }), { text: "done" }]),
      tools: tools(executed),
    });
    const result = (await settle(agent)) as RunResult;
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([["deny", "invalid_arguments"]]);
  });

  it("arguments that are not JSON values (a cycle, a BigInt) leave the transcript JSON: the call keeps no input", async () => {
    const cyclic: Record<string, unknown> = { path: "a" };
    cyclic["self"] = cyclic;
    const bigint = { path: 1n };
    const seen: unknown[] = [];
    const model = new ScriptedModel([
      () => ({
        toolCalls: [
          { id: "c1", name: "read", input: cyclic },
          { id: "c2", name: "read", input: bigint },
        ],
      }),
      (request) => {
        // What a provider adapter does with the transcript: serialise it.
        seen.push(JSON.parse(JSON.stringify(request.messages)));
        return { text: "done", toolCalls: [] };
      },
    ]);
    const pre: unknown[] = [];
    const agent = new Agent({
      model,
      tools: tools([]),
      managers: new LoopManagers().withObserver({ onToolPre: ({ call }) => pre.push(call.input) }),
    });
    const result = (await settle(agent)) as RunResult;
    expect(result.text).toBe("done");
    expect(result.records.map((r) => r.ruleId)).toEqual(["invalid_arguments", "invalid_arguments"]);
    // Observers still see the call as the model sent it.
    expect(pre).toEqual([cyclic, bigint]);
    const saved = JSON.parse(JSON.stringify(result.messages)) as unknown[];
    expect(saved[1]).toEqual({
      type: "assistant",
      toolCalls: [
        { id: "c1", name: "read" },
        { id: "c2", name: "read" },
      ],
    });
    expect(seen).toEqual([saved.slice(0, 4)]);
  });

  it(`${DEPTH}-level nested arguments: refused with a typed outcome, never a stack overflow`, async () => {
    let deep: unknown = "a";
    for (let i = 0; i < DEPTH; i += 1) deep = i % 2 === 0 ? [deep] : { path: deep };
    const executed: unknown[] = [];
    const agent = new Agent({
      model: {
        generate: async (request) =>
          request.messages.length === 1
            ? { toolCalls: [{ id: "c1", name: "read", input: deep }] }
            : { text: "done", toolCalls: [] },
      },
      tools: tools(executed),
    });
    const outcome = await settle(agent);
    expect(executed).toEqual([]);
    const records = outcome instanceof RunStoppedError ? outcome.records : outcome.records;
    expect(records.map((r) => [r.verdict, r.ruleId])).toEqual([["deny", "invalid_arguments"]]);
  });

  it("10 MB of arguments: the ask carries their digest (never the arguments), and the approved tool gets them whole", async () => {
    const path = "p/".repeat(5 * 1024 * 1024);
    const executed: { path: string }[] = [];
    const asks: { argsDigest: string; size: number }[] = [];
    const agent = new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "c1", name: "read", input: { path } }] }, { text: "done" }]),
      tools: tools(executed),
      managers: new LoopManagers()
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "read it all?" }) })
        .withAskResolver(
          new SyncAskResolver(
            (ask) => (asks.push({ argsDigest: ask.argsDigest, size: JSON.stringify(ask).length }), true),
          ),
        ),
    });
    const result = await agent.run("go");
    // The canonical text of { path } is built by hand here, not by the library.
    const expected = referenceDigest16(`{"path":${JSON.stringify(path)}}`);
    expect(asks).toEqual([{ argsDigest: expected, size: expect.any(Number) }]);
    expect(asks[0]!.size).toBeLessThan(1_000);
    expect(result.records.map((r) => [r.verdict, r.argsDigest])).toEqual([["ask_allowed", expected]]);
    expect(executed).toHaveLength(1);
    expect(executed[0]!.path.length).toBe(path.length);
  });

  it("a malformed model answer (a tool call without an id) is a typed ModelError", async () => {
    const agent = new Agent({
      model: { generate: async () => ({ toolCalls: [{ name: "read", input: {} }] }) as never },
      tools: tools([]),
    });
    await expect(agent.run("go")).rejects.toBeInstanceOf(ModelError);
  });

  it.each<[string, () => unknown]>([
    ["an answer that is a proxy", () => bomb()],
    ["tool calls that are a proxy", () => ({ toolCalls: bomb() })],
    ["a tool call that is a proxy", () => ({ toolCalls: [bomb()] })],
    ["usage that is a proxy", () => ({ toolCalls: [], usage: bomb() })],
  ])(
    "a model answer holding an unreadable object (%s) is a typed ModelError, and no tool runs",
    async (_label, answer) => {
      const executed: unknown[] = [];
      const agent = new Agent({ model: { generate: async () => answer() as ModelResponse }, tools: tools(executed) });
      const error = await agent.run("go").catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ModelError);
      expect((error as ModelError).code).toBe("MODEL_ERROR");
      expect(executed).toEqual([]);
    },
  );

  /** providerData that has no JSON form, and where the refusal names it. */
  const notJson: [string, () => unknown, string][] = [
    ["a function", () => ({ id: "r", f: () => 1 }), "$.f"],
    ["a BigInt", () => ({ tokens: [1n] }), "$.tokens[0]"],
    ["NaN", () => ({ score: Number.NaN }), "$.score"],
    ["a Map", () => ({ items: new Map([["a", 1]]) }), "$.items"],
    ["undefined inside an array", () => ({ items: [1, undefined] }), "$.items[1]"],
    [
      "a cycle",
      () => {
        const cyclic: Record<string, unknown> = { id: "r" };
        cyclic["self"] = cyclic;
        return cyclic;
      },
      "$.self: a cycle",
    ],
    [
      "nesting past the limit",
      () => {
        let deep: unknown = "a";
        for (let i = 0; i < DEPTH; i++) deep = [deep];
        return deep;
      },
      "deep",
    ],
    ["an object whose reads throw", () => bomb(), "getter bomb"],
    [
      "a cycle back to the top, through an object two keys share",
      () => {
        const shared: Record<string, unknown> = { id: "s" };
        const data = { a: shared, b: shared, c: { d: shared } };
        shared["up"] = data;
        return data;
      },
      "$.a.up: a cycle",
    ],
  ];

  it.each(notJson)(
    "a model answer whose providerData is not JSON (%s) is a ModelError naming the turn, and no tool runs",
    async (_label, providerData, where) => {
      const executed: unknown[] = [];
      const agent = new Agent({
        model: new ScriptedModel([
          { toolCalls: [{ id: "c0", name: "read", input: { path: "a" } }] },
          () => ({ toolCalls: [{ id: "c1", name: "read", input: { path: "b" } }], providerData: providerData() }),
        ]),
        tools: tools(executed),
      });
      const error = await agent.run("go").catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ModelError);
      expect((error as ModelError).message).toContain("the model answered turn 1 with providerData that is not JSON");
      expect((error as ModelError).message).toContain(where);
      expect(executed).toEqual([{ path: "a" }]);
      expect((error as ModelError).messages).toHaveLength(3);
    },
  );

  it.each(notJson)(
    "starting messages whose providerData is not JSON (%s) are refused, naming the message",
    async (_label, providerData, where) => {
      const model = new ScriptedModel([{ text: "done" }]);
      const run = new Agent({ model, tools: tools([]) }).run([
        { type: "user", text: "hi" },
        { type: "assistant", text: "hello", toolCalls: [], providerData: providerData() },
      ]);
      const error = await run.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect((error as EngineConfigError).message).toContain("messages[1].providerData is not JSON");
      expect((error as EngineConfigError).message).toContain(where);
      expect(model.requests).toEqual([]);
    },
  );

  it("random tool names and JSON arguments: every call gets one record and a result, tools run only on valid arguments", async () => {
    const name = fc.constantFrom("read", "write", "", "rm", "__proto__", "constructor", "toString", "READ");
    const input = fc.oneof(
      fc.jsonValue(),
      fc.record({ path: fc.oneof(fc.string(), fc.jsonValue()) }),
      fc.record({ path: fc.string(), text: fc.string() }),
      fc.dictionary(fc.constantFrom("__proto__", "constructor", "prototype", "path"), fc.jsonValue()),
    );
    let calls = 0;
    let ran = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ name, input }), { minLength: 1, maxLength: 5 }),
        fc.integer({ min: 1, max: 3 }),
        async (made, concurrency) => {
          const executed: unknown[] = [];
          const toolCalls = made.map((c, i) => ({ id: `c${i}`, name: c.name, input: c.input }));
          const agent = new Agent({
            model: new ScriptedModel([{ toolCalls }, { text: "done" }]),
            tools: tools(executed),
            managers: new LoopManagers().withMaxConcurrency(concurrency),
          });
          const result = await agent.run("go");
          calls += toolCalls.length;
          ran += executed.length;
          expect(result.records).toHaveLength(toolCalls.length);
          const replies = result.messages.filter((m) => m.type === "tool_result");
          expect(replies.map((m) => m.callId)).toEqual(toolCalls.map((c) => c.id));
          for (const call of toolCalls) {
            const reply = replies.find((m) => m.callId === call.id)!;
            const valid =
              call.name === "read" ? z.object({ path: z.string() }).safeParse(call.input).success : undefined;
            if (call.name === "read") expect(reply.isError).toBe(!valid);
            if (!["read", "write"].includes(call.name)) expect(reply.content).toBe(`Unknown tool '${call.name}'`);
          }
          expect(executed.length).toBe(replies.filter((m) => !m.isError).length);
          // Records land in completion order when calls run at once; compare as multisets.
          expect(result.records.map((r) => r.argsDigest).sort()).toEqual(
            toolCalls.map((c) => argsDigest(c.input)).sort(),
          );
        },
      ),
      { numRuns: RUNS },
    );
    expect(ran).toBeGreaterThan(0);
    expect(ran).toBeLessThan(calls);
  });
});

describe("a model that repeats a call forever is stopped by the loop detector", () => {
  const managers = new LoopManagers().withLoopDetection({ maxRepeats: 3 }).withBudget({ maxTurns: 100 });

  it.each<[string, Omit<ToolCall, "id">]>([
    ["a valid call", { name: "read", input: { path: "a" } }],
    ["a call with invalid arguments", { name: "read", input: { path: 5 } }],
    ["a call to an unknown tool", { name: "rm_rf", input: { path: "/" } }],
    ["a call whose arguments are not JSON", { name: "read", input: { path: 1n } }],
  ])("%s", async (_label, call) => {
    const executed: unknown[] = [];
    const model = foreverModel(call);
    const agent = new Agent({ model, tools: tools(executed), managers });
    const error = await agent.run("go").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect((error as LoopctlError).code).toBe("LOOP_DETECTED");
    expect(model.turns).toBeLessThanOrEqual(4);
    expect(executed.length).toBeLessThanOrEqual(3);
    const records = (error as LoopDetectedError).records;
    expect(records).toHaveLength(model.turns);
    expect(records.at(-1)?.ruleId).toBe("loop_detector");
  });

  it("a run's counts outlast however many other runs of its agent are live: a call repeated after a long wait is still stopped", async () => {
    // More runs live at once than the gate keeps counts for (1024), each waiting on its tool.
    const others = 1100;
    const waits: (() => void)[] = [];
    let executed = 0;
    const slow = defineTool({
      name: "slow",
      description: "waits to be let go",
      input: z.object({ n: z.number() }),
      execute: () =>
        new Promise<string>((resolve) => {
          executed += 1;
          waits.push(() => resolve("done"));
        }),
    });
    // Each run calls `slow` with its own number twice, then ends.
    const model: Model = {
      generate: async ({ messages }) => {
        const n = Number((messages[0] as { text: string }).text);
        const turns = messages.filter((m) => m.type === "assistant").length;
        return turns < 2 ? { toolCalls: [{ id: "", name: "slow", input: { n } }] } : { text: "done", toolCalls: [] };
      },
    };
    const agent = new Agent({
      model,
      tools: [slow],
      managers: new LoopManagers().withLoopDetection({ maxRepeats: 1 }),
    });
    const first = agent.run("0").catch((e: unknown) => e);
    await until(() => executed === 1);
    const letFirstGo = waits.shift()!;
    const rest = Array.from({ length: others }, (_, i) => agent.run(String(i + 1)).catch((e: unknown) => e));
    await until(() => executed === 1 + others, 10_000);
    letFirstGo();
    // Stopped before it runs; with its counts lost, the repeat would run and wait like the others.
    let settled = false;
    void first.then(() => (settled = true));
    await until(() => settled || executed > 1 + others, 10_000);
    expect(executed).toBe(1 + others);
    expect(await first).toBeInstanceOf(LoopDetectedError);
    // The others' repeats are stopped the same way once their tools return.
    for (const release of waits.splice(0)) release();
    expect((await Promise.all(rest)).every((e) => e instanceof LoopDetectedError)).toBe(true);
  }, 60_000);

  it("an approved call repeated forever: each one parks, and the detector still stops the run", async () => {
    const executed: unknown[] = [];
    let asks = 0;
    const model = foreverModel({ name: "read", input: { path: "a" } });
    const agent = new Agent({
      model,
      tools: tools(executed),
      managers: managers
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "again?" }) })
        .withAskResolver(new SyncAskResolver(() => ((asks += 1), true))),
    });
    await expect(agent.run("go")).rejects.toBeInstanceOf(LoopDetectedError);
    expect(executed).toHaveLength(3);
    expect(asks).toBe(4);
  });
});

describe("a tool name or call id holding a newline, an escape sequence or a quote is shown in JSON's escapes", () => {
  /** A name that, shown raw, would end its quotes and write a line of its own. */
  const forged = "nope'\n\u001b[31mUnknown tool 'read'";
  const quoted = "it's";
  function quotedTool(execute: () => unknown = () => "ran"): Tool {
    return defineTool({ name: quoted, description: "a tool with a quote in its name", input: z.object({}), execute });
  }
  function results(result: RunResult): string[] {
    return result.messages.flatMap((m) => (m.type === "tool_result" ? [m.content] : []));
  }

  it("an unknown tool's error result and record reason, in one line; a plain name reads as before", async () => {
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: forged, input: {} },
          { id: "c2", name: "rm_rf", input: {} },
        ],
      },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: tools([]), managers: new LoopManagers() }).run("go");
    expect(results(result)).toEqual([`Unknown tool ${JSON.stringify(forged)}`, "Unknown tool 'rm_rf'"]);
    expect(result.records.map((r) => r.reason)).toEqual([
      `unknown tool ${JSON.stringify(forged)}`,
      "unknown tool 'rm_rf'",
    ]);
    expect(results(result)[0]).not.toContain("\n");
  });

  it("every ending's text for a tool whose name holds a quote", async () => {
    const asked = new ScriptedModel([{ toolCalls: [{ id: "c1", name: quoted, input: {} }] }, { text: "done" }]);
    const denied = await new Agent({
      model: asked,
      tools: [quotedTool()],
      managers: new LoopManagers()
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "May I?" }) })
        .withAskResolver(new SyncAskResolver(() => false)),
    }).run("go");
    expect(results(denied)).toEqual([`Permission denied by approver for tool "it's"`]);

    const failing = await new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "c1", name: quoted, input: {} }] }, { text: "done" }]),
      tools: [
        quotedTool(() => {
          throw new Error("boom");
        }),
      ],
    }).run("go");
    expect(results(failing)).toEqual([`Tool "it's" failed: boom`]);

    const ruled = await new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "c1", name: quoted, input: {} }] }, { text: "done" }]),
      tools: [quotedTool()],
      managers: new LoopManagers().withMiddleware(
        permissionMiddleware({ rules: [{ id: "no", tool: "*", action: "deny" }] }),
      ),
    }).run("go");
    expect(results(ruled)).toEqual([`Permission denied by rule 'no' for tool "it's"`]);

    const thrown = await new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "c1", name: quoted, input: {} }] }, { text: "done" }]),
      tools: [quotedTool()],
      managers: new LoopManagers().withMiddleware(() => {
        throw new Error("mw");
      }),
    }).run("go");
    expect(results(thrown)).toEqual([`Permission denied: middleware failed: mw for tool "it's"`]);
  });

  it("LoopDetectedError, ToolDefinitionError and Gate.call's descriptor errors", async () => {
    const stopped = await new Agent({
      model: foreverModel({ name: forged, input: {} }),
      tools: tools([]),
      managers: new LoopManagers().withLoopDetection({ maxRepeats: 3 }).withBudget({ maxTurns: 100 }),
    })
      .run("go")
      .catch((e: unknown) => e);
    expect(stopped).toBeInstanceOf(LoopDetectedError);
    expect((stopped as Error).message).toMatch(
      new RegExp(`^loop detected: tool ${escape(JSON.stringify(forged))} called`),
    );

    let refused: unknown;
    try {
      defineTool({ name: "a\nb", description: "d", input: z.object({}), execute: () => "x" });
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(ToolDefinitionError);
    expect((refused as Error).message).toMatch(/^tool "a\\nb": /);

    const gate = new Gate(new LoopManagers());
    const notJson = { name: "a\nb", description: "d", inputSchema: { type: "object", x: 1n } };
    await expect(gate.call({ tool: notJson, callId: "c1", input: {} }, () => "x")).rejects.toThrow(
      `the descriptor of tool "a\\nb" is not JSON`,
    );
  });

  it("a call id a model or a transcript gives", async () => {
    const id = "c'\nforged";
    const shared = new ScriptedModel([
      {
        toolCalls: [
          { id, name: "read", input: { path: "a" } },
          { id, name: "read", input: { path: "a" } },
        ],
      },
    ]);
    await expect(new Agent({ model: shared, tools: tools([]) }).run("go")).rejects.toThrow(
      `the model answered turn 0 with two tool calls sharing an id (${JSON.stringify(id)})`,
    );
    const agent = new Agent({ model: new ScriptedModel([{ text: "never" }]), tools: tools([]) });
    const error = await agent
      .run([
        { type: "user", text: "go" },
        { type: "assistant", toolCalls: [{ id, name: forged, input: {} }] },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as Error).message).toContain(
      `messages[1]: call ${JSON.stringify(id)} of tool ${JSON.stringify(forged)} has no result after it`,
    );
  });
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
