import { MockLanguageModelV3 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { fromLanguageModel } from "loopctl/ai-sdk";
import {
  Agent,
  BudgetExceededError,
  CancelledError,
  LoopDetectedError,
  LoopManagers,
  ModelError,
  defineTool,
} from "loopctl/engine";
import type { GateDecision, Message, Tool, ToolCall } from "loopctl/engine";
import { ManualClock, ScriptedModel } from "loopctl/testing";
import { call as v3call, text, v3 } from "./support/ai-sdk-fixtures.js";
import { deferred, flush } from "./support/engine-fixtures.js";

/** Every call of the transcript answered exactly once, right after its assistant message. */
function wellFormed(messages: readonly Message[]): void {
  const seen = new Set<string>();
  let open: Set<string> | undefined;
  for (const m of messages) {
    if (m.type !== "tool_result") {
      expect(open === undefined || open.size === 0, `unanswered ${[...(open ?? [])].join(",")}`).toBe(true);
      open = undefined;
    }
    if (m.type === "assistant") {
      open = new Set();
      for (const c of m.toolCalls) {
        expect(seen.has(c.id), `dup id ${c.id}`).toBe(false);
        expect(c.id).not.toBe("");
        seen.add(c.id);
        open.add(c.id);
      }
    } else if (m.type === "tool_result") {
      expect(open?.has(m.callId), `stray result ${m.callId}`).toBe(true);
      open!.delete(m.callId);
    }
  }
  expect(open === undefined || open.size === 0).toBe(true);
}

const echo = (executed: string[] = []): Tool =>
  defineTool({
    name: "echo",
    description: "echo",
    input: z.object({ v: z.string() }),
    execute: async ({ v }) => {
      executed.push(v);
      await flush();
      return v;
    },
  });

/** What the `weird` tool throws, by `k`: none of them an Error. */
const THROWN: Readonly<Record<string, unknown>> = {
  "throw-undefined": undefined,
  "throw-null": null,
  "throw-nullproto": Object.create(null),
  "throw-symbol": Symbol("boom"),
};

const weird = defineTool({
  name: "weird",
  description: "returns or throws odd things",
  input: z.object({ k: z.string() }),
  execute: ({ k }) => {
    if (Object.hasOwn(THROWN, k)) {
      const thrown = THROWN[k];
      throw thrown;
    }
    switch (k) {
      case "bigint":
        return 1n;
      case "cycle": {
        const o: Record<string, unknown> = {};
        o["self"] = o;
        return o;
      }
      case "fn":
        return () => 1;
      case "sym":
        return Symbol("x");
      case "reject-undefined": {
        const reason: unknown = undefined;
        return new Promise((_resolve, reject) => reject(reason));
      }
      case "tojson-throws":
        return {
          toJSON() {
            throw new Error("no json");
          },
        };
      default:
        return k;
    }
  },
});

const allow = () => new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) });

describe("stress: long runs", () => {
  it("300 turns of 7 parallel calls with odd ones mixed in: one record per call, transcript well-formed and resumable", async () => {
    const kinds = [
      "ok",
      "bigint",
      "cycle",
      "fn",
      "sym",
      "throw-undefined",
      "throw-null",
      "throw-nullproto",
      "throw-symbol",
      "reject-undefined",
      "tojson-throws",
    ];
    let n = 0;
    const turn = (i: number): { toolCalls: ToolCall[] } => ({
      toolCalls: [
        { id: `t${i}a`, name: "echo", input: { v: `x${i}` } },
        { id: `t${i}b`, name: "weird", input: { k: kinds[i % kinds.length]! } },
        { id: `t${i}c`, name: "nope", input: {} },
        { id: "", name: "echo", input: { v: 1 } },
        { id: `t${i}e`, name: "echo", input: 10n },
        { id: `t${i}f`, name: "weird", input: { k: `u${(n += 1)}` } },
        { id: i % 2 === 1 ? "t0a" : `t${i}g`, name: "echo", input: { v: `y${i}` } },
      ],
    });
    const turns = Array.from({ length: 300 }, (_, i) => turn(i));
    const model = new ScriptedModel([...turns, { text: "done" }]);
    const executed: string[] = [];
    const managers = allow().withMaxConcurrency(3).withBudget({ maxTurns: Infinity });
    const agent = new Agent({ model, tools: [echo(executed), weird], managers });
    const result = await agent.run("go");
    expect(result.turns).toBe(301);
    const calls = result.messages.flatMap((m) => (m.type === "assistant" ? m.toolCalls : []));
    expect(calls).toHaveLength(2100);
    expect(result.records).toHaveLength(2100);
    wellFormed(result.messages);
    // Each call's result says how it ended: the odd returns and throws failed, naming the tool.
    const byId = new Map(result.messages.flatMap((m) => (m.type === "tool_result" ? [[m.callId, m] as const] : [])));
    expect(executed).toHaveLength(600);
    for (let i = 0; i < 300; i += 1) {
      const odd = byId.get(`t${i}b`)!;
      const kind = kinds[i % kinds.length]!;
      expect([kind, odd.status]).toEqual([kind, kind === "ok" ? "ran" : "failed"]);
      if (kind !== "ok") expect(odd.content).toMatch(/^Tool 'weird' failed: /);
      expect(byId.get(`t${i}c`)).toMatchObject({ status: "refused", content: "Unknown tool 'nope'" });
      expect(byId.get(`t${i}e`)?.content).toBe("Invalid arguments for tool 'echo': arguments must be JSON values");
    }
    // Resumable: a new run from the transcript accepts it.
    const again = await new Agent({ model: new ScriptedModel([{ text: "ok" }]), tools: [echo(), weird] }).run([
      ...JSON.parse(JSON.stringify(result.messages)),
      { type: "user", text: "more" },
    ]);
    expect(again.text).toBe("ok");
  }, 60_000);
});

function promptPairs(prompt: readonly { role: string; content: unknown }[]): void {
  const calls: string[] = [];
  const results: string[] = [];
  for (const message of prompt) {
    if (!Array.isArray(message.content)) continue;
    for (const part of message.content as { type: string; toolCallId?: string; providerExecuted?: boolean }[]) {
      if (message.role === "assistant" && part.type === "tool-call" && part.providerExecuted !== true)
        calls.push(part.toolCallId!);
      if (message.role === "tool" && part.type === "tool-result") results.push(part.toolCallId!);
    }
  }
  expect(new Set(calls).size).toBe(calls.length);
  expect([...results].sort()).toEqual([...calls].sort());
}

describe("stress: AI SDK model", () => {
  it("200 turns of messy calls: every prompt pairs each call with one result", async () => {
    let turn = 0;
    const model = new MockLanguageModelV3({
      doGenerate: async () => {
        turn += 1;
        if (turn > 200) return v3([text("done")]);
        return v3([
          text(`turn ${turn}`),
          v3call("1", "echo", { v: `a${turn}` }),
          v3call("", "echo", { v: `b${turn}` }),
          v3call(`x${turn}`, "nope", {}),
          v3call(`y${turn}`, "echo", "{not json"),
          v3call(`z${turn}`, "echo", ""),
          v3call(`w${turn}`, "weird", { k: "bigint" }),
          { type: "tool-call", toolCallId: `p${turn}`, toolName: "search", input: "{}", providerExecuted: true },
          { type: "tool-result", toolCallId: `p${turn}`, toolName: "search", result: { hits: 1 } },
        ]);
      },
    });
    const managers = allow().withMaxConcurrency(4).withBudget({ maxTurns: Infinity });
    const result = await new Agent({ model: fromLanguageModel(model), tools: [echo(), weird], managers }).run("go");
    expect(result.text).toBe("done");
    expect(result.records).toHaveLength(200 * 6);
    wellFormed(result.messages);
    for (const c of model.doGenerateCalls) promptPairs(c.prompt);
    // Resumed from JSON on a new agent
    const m2 = new MockLanguageModelV3({ doGenerate: async () => v3([text("again")]) });
    const again = await new Agent({ model: fromLanguageModel(m2), tools: [echo(), weird] }).run(
      JSON.parse(JSON.stringify(result.messages)) as Message[],
    );
    expect(again.text).toBe("again");
    promptPairs(m2.doGenerateCalls[0]!.prompt);
  }, 60_000);

  it("duplicate ids within one turn from an AI SDK model", async () => {
    const model = new MockLanguageModelV3({
      doGenerate: async () => v3([v3call("same", "echo", { v: "a" }), v3call("same", "echo", { v: "b" })]),
    });
    const executed: string[] = [];
    const error = await new Agent({ model: fromLanguageModel(model), tools: [echo(executed)], managers: allow() })
      .run("go")
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelError);
    expect(executed).toEqual([]);
    wellFormed((error as ModelError).messages);
  });
});

describe("stress: aborts at every point", () => {
  const turnWithCalls = {
    toolCalls: [
      { id: "a", name: "echo", input: { v: "1" } },
      { id: "b", name: "echo", input: { v: "2" } },
    ],
  };

  it("during a model call that never settles, and one that rejects late", async () => {
    for (const late of ["hang", "reject", "resolve"] as const) {
      const gate = deferred<never>();
      const started = deferred<void>();
      const model = {
        generate: () => {
          started.resolve();
          if (late === "hang") return new Promise<never>(() => {});
          return gate.promise;
        },
      };
      const controller = new AbortController();
      const running = new Agent({ model, tools: [echo()], managers: allow().withMaxConcurrency(1) }).run("go", {
        signal: controller.signal,
      });
      await started.promise;
      controller.abort(new Error("stop"));
      const error = (await running.catch((e: unknown) => e)) as CancelledError;
      expect(error).toBeInstanceOf(CancelledError);
      expect(error.records).toEqual([]);
      wellFormed(error.messages);
      if (late === "reject") gate.reject(new Error("late"));
      if (late === "resolve") gate.resolve({ toolCalls: [] } as never);
      await flush();
    }
  });

  it("a model that throws non-Errors is a ModelError whose message names the turn", async () => {
    for (const thrown of [undefined, null, Symbol("s"), Object.create(null), 3]) {
      const agent = new Agent({
        model: {
          generate: () => {
            throw thrown;
          },
        },
        tools: [echo()],
      });
      const error = (await agent.run("go").catch((e: unknown) => e)) as ModelError;
      expect(error).toBeInstanceOf(ModelError);
      expect(error.message).toContain("turn 0");
      expect(error.cause).toBe(thrown);
    }
  });

  it("while a call is parked for approval; while a tool executes; between turns (observer)", async () => {
    // parked
    {
      const executed: string[] = [];
      const asked = deferred<void>();
      const managers = new LoopManagers()
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) })
        .withAskResolver({ resolve: () => (asked.resolve(), new Promise(() => {})) })
        .withMaxConcurrency(4);
      const controller = new AbortController();
      const running = new Agent({ model: new ScriptedModel([turnWithCalls]), tools: [echo(executed)], managers }).run(
        "go",
        { signal: controller.signal },
      );
      await asked.promise;
      controller.abort();
      const error = (await running.catch((e: unknown) => e)) as CancelledError;
      expect(error).toBeInstanceOf(CancelledError);
      expect(executed).toEqual([]);
      expect(error.records.map((r) => r.verdict)).toEqual(["cancelled", "cancelled"]);
      wellFormed(error.messages);
      expect(
        error.messages
          .filter((m) => m.type === "tool_result")
          .every((m) => m.type === "tool_result" && m.status === "refused"),
      ).toBe(true);
    }
    // executing, tool never settles and ignores signal
    {
      const started = deferred<void>();
      const hang = defineTool({
        name: "echo",
        description: "h",
        input: z.object({ v: z.string() }),
        execute: () => (started.resolve(), new Promise(() => {})),
      });
      const controller = new AbortController();
      const running = new Agent({
        model: new ScriptedModel([turnWithCalls]),
        tools: [hang],
        managers: allow().withMaxConcurrency(1),
      }).run("go", { signal: controller.signal });
      await started.promise;
      controller.abort();
      const error = (await running.catch((e: unknown) => e)) as CancelledError;
      expect(error).toBeInstanceOf(CancelledError);
      expect(error.records.map((r) => r.reason)).toEqual(["cancelled during execution"]);
      wellFormed(error.messages);
    }
    // between turns: an observer aborts on onModelRequest of turn 1
    {
      const controller = new AbortController();
      const executed: string[] = [];
      const managers = allow().withObserver({ onToolPost: () => controller.abort() });
      const model = new ScriptedModel([turnWithCalls, { text: "never" }]);
      const error = (await new Agent({ model, tools: [echo(executed)], managers })
        .run("go", { signal: controller.signal })
        .catch((e: unknown) => e)) as CancelledError;
      expect(error).toBeInstanceOf(CancelledError);
      expect(model.requests).toHaveLength(1);
      wellFormed(error.messages);
      // one record per call in the transcript that was tried
      expect(error.records.length).toBeGreaterThanOrEqual(1);
    }
  });
});

describe("stress: budgets, loops, breakers", () => {
  it("token budget runs out mid-wave: the wave finishes, the next request is not made", async () => {
    const model = new ScriptedModel([
      {
        ...{ toolCalls: Array.from({ length: 6 }, (_, i) => ({ id: `c${i}`, name: "echo", input: { v: `${i}` } })) },
        usage: { inputTokens: 90, outputTokens: 20 },
      },
      { text: "never" },
    ]);
    const executed: string[] = [];
    const error = (await new Agent({
      model,
      tools: [echo(executed)],
      managers: allow().withMaxConcurrency(2).withBudget({ maxTokens: 100 }),
    })
      .run("go")
      .catch((e: unknown) => e)) as BudgetExceededError;
    expect(error).toBeInstanceOf(BudgetExceededError);
    expect(executed).toHaveLength(6);
    expect(error.records).toHaveLength(7);
    wellFormed(error.messages);
  });

  it("loop detection in a wide wave with concurrency: every tried call has one record, every call one result", async () => {
    const same = Array.from({ length: 20 }, (_, i) => ({ id: `c${i}`, name: "echo", input: { v: "same" } }));
    const executed: string[] = [];
    const error = (await new Agent({
      model: new ScriptedModel([{ toolCalls: same }]),
      tools: [echo(executed)],
      managers: allow().withMaxConcurrency(5).withLoopDetection({ maxRepeats: 3 }),
    })
      .run("go")
      .catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    wellFormed(error.messages);
    const ids = new Set(error.records.map((r: GateDecision) => r.argsDigest));
    expect(ids.size).toBe(1);
    expect(executed.length).toBeLessThanOrEqual(3);
  });
});

describe("stress: more", () => {
  it("the breaker trips and recovers over a long run of parallel failing calls", async () => {
    const clock = new ManualClock(0);
    let failing = true;
    const flaky = defineTool({
      name: "flaky",
      description: "f",
      input: z.object({ i: z.number() }),
      execute: () => {
        if (failing) throw new Error("down");
        return "up";
      },
    });
    let t = 0;
    const model = new ScriptedModel(
      Array.from({ length: 60 }, () => async () => {
        t += 1;
        await clock.advance(100);
        if (t === 40) failing = false;
        return {
          toolCalls: Array.from({ length: 4 }, (_, i) => ({
            id: `t${t}c${i}`,
            name: "flaky",
            input: { i: t * 10 + i },
          })),
        };
      }).concat([{ text: "done" } as never]),
    );
    const managers = allow()
      .withClock(clock)
      .withCircuitBreaker({ failureThreshold: 3, cooldownMs: 1000 })
      .withMaxConcurrency(4)
      .withBudget({ maxTurns: Infinity });
    const result = await new Agent({ model, tools: [flaky], managers }).run("go");
    wellFormed(result.messages);
    expect(result.records).toHaveLength(240);
    const last = result.messages.filter((m) => m.type === "tool_result").slice(-4);
    expect(last.every((m) => m.type === "tool_result" && m.status === "ran")).toBe(true);
    expect(result.records.some((r) => r.ruleId === "circuit_breaker")).toBe(true);
  });

  it("an observer that aborts the run from inside onGate, mid-wave", async () => {
    const controller = new AbortController();
    let n = 0;
    const managers = new LoopManagers()
      .withHook({ preToolUse: (c) => (c.id === "c0" ? { type: "allow" } : { type: "ask", prompt: "?" }) })
      .withAskResolver({ resolve: () => new Promise(() => {}) })
      .withMaxConcurrency(4)
      .withObserver({
        onGate: () => {
          n += 1;
          if (n === 1) controller.abort();
          throw new Error("observer");
        },
      });
    const calls = Array.from({ length: 8 }, (_, i) => ({ id: `c${i}`, name: "echo", input: { v: `${i}` } }));
    const executed: string[] = [];
    const error = (await new Agent({
      model: new ScriptedModel([{ toolCalls: calls }]),
      tools: [echo(executed)],
      managers,
    })
      .run("go", { signal: controller.signal })
      .catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    wellFormed(error.messages);
    const ids = error.records.length;
    expect(ids).toBeLessThanOrEqual(8);
    expect(executed.length).toBeLessThanOrEqual(1);
  });

  it("two runs of one agent at once keep their records apart", async () => {
    const model = {
      generate: async ({ messages }: { messages: readonly Message[] }) => {
        const user = messages.find((m) => m.type === "user")!;
        const tag = user.type === "user" ? user.text : "";
        const turns = messages.filter((m) => m.type === "assistant").length;
        if (turns >= 20) return { text: tag, toolCalls: [] };
        await flush();
        return {
          toolCalls: Array.from({ length: 3 }, (_, i) => ({
            id: `${tag}-${turns}-${i}`,
            name: "echo",
            input: { v: `${tag}${turns}${i}` },
          })),
        };
      },
    };
    const agent = new Agent({
      model,
      tools: [echo()],
      managers: allow().withMaxConcurrency(2).withBudget({ maxTurns: 50 }),
    });
    const [a, b] = await Promise.all([agent.run("A"), agent.run("B")]);
    expect(a.records).toHaveLength(60);
    expect(b.records).toHaveLength(60);
    wellFormed(a.messages);
    wellFormed(b.messages);
    expect(a.text).toBe("A");
  });

  it("middleware and hooks that throw non-Errors deny with a record naming them", async () => {
    for (const thrown of [undefined, null, Symbol("m"), Object.create(null)]) {
      const executed: string[] = [];
      const managers = allow().withMiddleware(() => {
        throw thrown;
      });
      const result = await new Agent({
        model: new ScriptedModel([{ toolCalls: [{ id: "a", name: "echo", input: { v: "1" } }] }, { text: "x" }]),
        tools: [echo(executed)],
        managers,
      }).run("go");
      expect(executed).toEqual([]);
      expect(result.records.map((r) => r.verdict)).toEqual(["deny"]);
      const hooked = new LoopManagers().withHook({
        preToolUse: () => {
          throw thrown;
        },
      });
      const r2 = await new Agent({
        model: new ScriptedModel([{ toolCalls: [{ id: "a", name: "echo", input: { v: "1" } }] }, { text: "x" }]),
        tools: [echo(executed)],
        managers: hooked,
      }).run("go");
      expect(r2.records.map((r) => r.verdict)).toEqual(["deny"]);
      expect(executed).toEqual([]);
    }
  });

  it("a hook that never settles, aborted", async () => {
    const entered = deferred<void>();
    const managers = new LoopManagers().withHook({ preToolUse: () => (entered.resolve(), new Promise(() => {})) });
    const controller = new AbortController();
    const running = new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "a", name: "echo", input: { v: "1" } }] }]),
      tools: [echo()],
      managers,
    }).run("go", { signal: controller.signal });
    await entered.promise;
    controller.abort();
    const error = (await running.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.records.map((r) => r.reason)).toEqual(["cancelled before the gate decided"]);
    wellFormed(error.messages);
  });

  it("a live ToolSource that swaps tools between turns, while the model keeps calling the old ones", async () => {
    let version = 0;
    const v1 = defineTool({ name: "t", description: "v1", input: z.object({ a: z.string() }), execute: () => "v1" });
    const v2 = defineTool({ name: "t", description: "v2", input: z.object({ b: z.number() }), execute: () => "v2" });
    const source = {
      current: () => {
        version += 1;
        return version % 3 === 0 ? [] : version % 2 === 0 ? [v2] : [v1];
      },
    };
    const model = new ScriptedModel([
      ...Array.from({ length: 30 }, (_, i) => ({
        toolCalls: [
          { id: `a${i}`, name: "t", input: { a: "x" } },
          { id: `b${i}`, name: "t", input: { b: 1 } },
        ],
      })),
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: source, managers: allow().withBudget({ maxTurns: 100 }) }).run("go");
    wellFormed(result.messages);
    expect(result.records).toHaveLength(60);
    for (const [i, req] of model.requests.entries()) {
      const v = i + 1;
      expect(req.tools.map((t) => t.description)).toEqual(v % 3 === 0 ? [] : v % 2 === 0 ? ["v2"] : ["v1"]);
    }
  });
});
