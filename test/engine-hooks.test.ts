import { describe, expect, it } from "vitest";
import { SyncAskResolver } from "../src/ask/index.js";
import { argsDigest } from "../src/grant/index.js";
import { Agent, CancelledError, LoopManagers } from "../src/engine/index.js";
import type { Hook, HookContext, ToolCall } from "../src/engine/index.js";
import { build, call, eventLog, readTool, script, shape } from "./support/engine-fixtures.js";
import { ScriptedModel } from "../src/testing/index.js";

const A = { path: "a.rs" };

describe("pre-tool-use hooks", () => {
  it("no objection: the call runs and one allow record lands (ruleId hook, source context)", async () => {
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) }),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([A]);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "allow",
        ruleId: "hook",
        ruleSource: "context",
        matchedPattern: null,
        reason: null,
      },
    ]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({ content: "contents of a.rs", isError: false });
  });

  it("no hooks at all: still exactly one allow record per call", async () => {
    const { agent } = build({ turns: script(call("c1", "read", A), call("c2", "read", { path: "b" })) });
    const result = await agent.run("go");
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["allow", "hook"],
      ["allow", "hook"],
    ]);
  });

  it("block: the model receives the reason verbatim; deny record; the tool never runs", async () => {
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook({ preToolUse: () => ({ type: "block", reason: "rm is never allowed" }) }),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "deny",
        ruleId: "hook",
        ruleSource: "context",
        matchedPattern: null,
        reason: "rm is never allowed",
      },
    ]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({ content: "rm is never allowed", isError: true });
  });

  it("modify: the tool runs with the new input; allow_modified carries the new digest and names the original", async () => {
    const executed: unknown[] = [];
    const B = { path: "sandbox/a.rs" };
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook({ name: "sandbox", preToolUse: () => ({ type: "modify", input: B }) }),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([B]);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(B),
        verdict: "allow_modified",
        ruleId: "hook",
        ruleSource: "context",
        matchedPattern: null,
        reason: `input modified by hook sandbox (original args ${argsDigest(A)})`,
      },
    ]);
  });

  it("a modified input is still validated: invalid arguments never reach execute", async () => {
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook({ preToolUse: () => ({ type: "modify", input: { path: 42 } }) }),
    });
    await agent.run("go");
    expect(executed).toEqual([]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({ isError: true });
    expect((model.requests[1]?.messages.at(-1) as { content: string }).content).toMatch(
      /^Invalid arguments for tool 'read': /,
    );
  });

  it("the first non-allow answer wins; later hooks are not consulted", async () => {
    const seen: string[] = [];
    const hook = (name: string, answer: ReturnType<Hook["preToolUse"]>): Hook => ({
      preToolUse: () => (seen.push(name), answer),
    });
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers()
        .withHook(hook("one", { type: "allow" }))
        .withHook(hook("two", Promise.resolve({ type: "block", reason: "two says no" })))
        .withHook(hook("three", { type: "ask", prompt: "?" })),
    });
    const result = await agent.run("go");
    expect(seen).toEqual(["one", "two"]);
    expect(result.records.map((r) => r.reason)).toEqual(["two says no"]);
  });

  it("a hook gets the frozen call (it cannot change what runs) and the context of the run", async () => {
    let context: HookContext | undefined;
    const refusals: unknown[] = [];
    const executed: unknown[] = [];
    const mutator: Hook = {
      preToolUse: (c: ToolCall, ctx) => {
        context = ctx;
        try {
          (c.input as { path: string }).path = "/etc/shadow";
        } catch (error) {
          refusals.push(error);
        }
        return { type: "allow" };
      },
    };
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(mutator),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([A]);
    expect(refusals).toEqual([expect.any(TypeError)]);
    expect(context).toMatchObject({ turn: 0, callId: "c1", sessionId: result.sessionId, runId: result.runId });
    expect(context?.descriptor.name).toBe("read");
    expect(context?.signal).toBeInstanceOf(AbortSignal);
  });

  it("the context is frozen too: a hook that writes to it fails, and the hooks after it see the gate's values", async () => {
    const executed: unknown[] = [];
    const seen: HookContext[] = [];
    const writer: Hook = {
      name: "writer",
      preToolUse: (_c, ctx) => {
        (ctx as { runId: string }).runId = "00000000-0000-0000-0000-000000000000";
        return { type: "allow" };
      },
    };
    const quiet: Hook = {
      name: "quiet",
      preToolUse: (_c, ctx) => {
        try {
          (ctx as { callId: string }).callId = "elsewhere";
        } catch {
          // Strict code is told; the context stays as the gate made it either way.
        }
        seen.push(ctx);
        return { type: "allow" };
      },
    };
    const watcher: Hook = { preToolUse: (_c, ctx) => (seen.push({ ...ctx }), { type: "allow" }) };
    const run = async (hooks: Hook[]) => {
      const managers = hooks.reduce((m, h) => m.withHook(h), new LoopManagers());
      const { agent } = build({ turns: script(call("c1", "read", A)), tools: [readTool(executed)], managers });
      return agent.run("go");
    };
    const failed = await run([writer, watcher]);
    expect(executed).toEqual([]);
    expect(failed.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "deny",
        ruleId: "hook",
        ruleSource: "context",
        matchedPattern: null,
        reason: expect.stringMatching(/^hook writer failed: .*runId/),
      },
    ]);
    expect(seen).toEqual([]);
    const ran = await run([quiet, watcher]);
    expect(executed).toEqual([A]);
    expect(seen.map((ctx) => [ctx.callId, ctx.runId])).toEqual([
      ["c1", ran.runId],
      ["c1", ran.runId],
    ]);
  });

  const failing: [string, Hook, RegExp][] = [
    [
      "throws",
      {
        name: "guard",
        preToolUse: () => {
          throw new Error("guard bug");
        },
      },
      /^hook guard failed: guard bug$/,
    ],
    ["rejects", { preToolUse: () => Promise.reject(new Error("later bug")) }, /^hook #0 failed: later bug$/],
    [
      "returns garbage",
      { preToolUse: () => ({ type: "maybe" }) as never },
      /^hook #0 returned an invalid decision: type: Invalid discriminator value\. Expected 'allow' \| 'block' \| 'ask' \| 'modify'$/,
    ],
    [
      "returns nothing",
      { preToolUse: () => undefined as never },
      /^hook #0 returned an invalid decision: Invalid input: expected object, received undefined$/,
    ],
    [
      "blocks without a reason",
      { preToolUse: () => ({ type: "block" }) as never },
      /^hook #0 returned an invalid decision: reason: Invalid input: expected string, received undefined$/,
    ],
    [
      "modifies without input",
      { preToolUse: () => ({ type: "modify" }) as never },
      /^hook #0 returned an invalid decision: input: Invalid input: expected nonoptional, received undefined$/,
    ],
    [
      "asks with the prompt under another name",
      { preToolUse: () => ({ type: "ask", message: "Run read?" }) as never },
      /^hook #0 returned an invalid decision: prompt: Invalid input: expected string, received undefined$/,
    ],
    [
      "returns a decision whose read throws",
      {
        preToolUse: () =>
          ({
            get type(): string {
              throw new Error("trap");
            },
          }) as never,
      },
      /^hook #0 returned an invalid decision$/,
    ],
  ];
  it.each(failing)("a hook that %s fails closed: denied with a record, never run", async (_label, hook, reason) => {
    const executed: unknown[] = [];
    const resolver = new SyncAskResolver(() => true);
    const { log, observer } = eventLog();
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(hook).withAskResolver(resolver).withObserver(observer),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records).toHaveLength(1);
    expect(result.records[0]).toMatchObject({ verdict: "deny", ruleId: "hook", ruleSource: "context" });
    expect(result.records[0]?.reason).toMatch(reason);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Permission denied: pre-tool-use hook failed for tool 'read'",
      isError: true,
    });
    expect(log.slice(2, 5)).toEqual(["pre:c1", "gate:c1:deny", "post:c1:error"]);
  });

  it("a cancel while a hook is still deciding ends the run with one cancelled record", async () => {
    const controller = new AbortController();
    const hook: Hook = { preToolUse: () => new Promise(() => undefined) };
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers()
        .withHook(hook)
        .withObserver({ onToolPre: () => queueMicrotask(() => controller.abort()) }),
    });
    const error = (await agent.run("go", { signal: controller.signal }).catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
      ["cancelled", "cancel", "engine", "cancelled before the gate decided"],
    ]);
  });

  it("an unknown tool is refused before the hooks, with a deny record", async () => {
    let hookCalls = 0;
    const { agent, model } = build({
      turns: script(call("c1", "nope", {})),
      managers: new LoopManagers().withHook({ preToolUse: () => ((hookCalls += 1), { type: "allow" }) }),
    });
    const result = await agent.run("go");
    expect(hookCalls).toBe(0);
    expect(result.records.map((r) => [r.tool, r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
      ["nope", "deny", "unknown_tool", "engine", "unknown tool 'nope'"],
    ]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({ content: "Unknown tool 'nope'", isError: true });
  });

  it("arguments that are not JSON values are refused before the hooks", async () => {
    const { agent, model } = build({
      turns: script(call("c1", "read", { path: Number.NaN })),
    });
    const result = await agent.run("go");
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.argsDigest])).toEqual([["deny", "invalid_arguments", ""]]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Invalid arguments for tool 'read': arguments must be JSON values",
    });
  });
});

describe("a failing seam fails closed", () => {
  it("an id generator that throws at park time denies the call with one record", async () => {
    let ids = 0;
    const idGen = () => {
      ids += 1;
      if (ids > 2) throw new Error("entropy exhausted");
      return `00000000-0000-4000-8000-00000000000${ids}`;
    };
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers()
        .withIdGen(idGen)
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) })
        .withAskResolver(new SyncAskResolver(() => true)),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
      ["deny", "engine", "engine", "engine failure: entropy exhausted"],
    ]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Permission denied: internal error for tool 'read'",
      isError: true,
    });
  });

  it("an id generator that gives no UUID at park time denies the call with one engine record naming it; no resolver sees the ask", async () => {
    const hostile = {
      toString(): string {
        throw new Error("unprintable");
      },
    };
    for (const [bad, said] of [
      ["ask-3", '"ask-3"'],
      [hostile, "an object"],
    ] as const) {
      let ids = 0;
      const idGen = () => ((ids += 1), ids > 2 ? bad : `00000000-0000-4000-8000-00000000000${ids}`) as string;
      const asked: unknown[] = [];
      const executed: unknown[] = [];
      const { agent } = build({
        turns: script(call("c1", "read", A)),
        tools: [readTool(executed)],
        managers: new LoopManagers()
          .withIdGen(idGen)
          .withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) })
          .withAskResolver({ resolve: (ask) => (asked.push(ask), Promise.resolve({ type: "approve" })) }),
      });
      const result = await agent.run("go");
      expect(asked).toEqual([]);
      expect(executed).toEqual([]);
      expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
        [
          "deny",
          "engine",
          "engine",
          `engine failure: withIdGen: the id generator must return UUID strings, got ${said}`,
        ],
      ]);
    }
  });

  it("an id generator whose id cannot be printed is still an EngineConfigError naming withIdGen", () => {
    const hostile = {
      toString(): string {
        throw new Error("unprintable");
      },
    };
    const managers = new LoopManagers().withIdGen(() => hostile as unknown as string);
    expect(() => new Agent({ model: new ScriptedModel([]), tools: [], managers })).toThrow(
      "withIdGen: the id generator must return UUID strings, got an object",
    );
  });
});
