import { describe, expect, it, vi } from "vitest";
import { z } from "zod";
import {
  Agent,
  CancelledError,
  DEFAULT_MAX_TURNS,
  EngineConfigError,
  LoopDetectedError,
  LoopManagers,
  ModelError,
  RunConfigError,
  RunStoppedError,
  ToolDefinitionError,
  defineTool,
  seededIdGen,
} from "loopctl/engine";
import type { Message, Middleware, ModelRequest, ModelResponse, RunResult, Tool, ToolSource } from "loopctl/engine";
import { ScriptedModel } from "loopctl/testing";
import { stuckController, track, unreadableReasonSignal } from "./support/ask-fixtures.js";
import { deferred, flush, notRunResult, readTool, until } from "./support/engine-fixtures.js";

const call = (id: string, input: unknown) => ({ id, name: "read", input });

const echo = (name: string): Tool =>
  defineTool({
    name,
    description: `echo as ${name}`,
    input: z.object({ v: z.string() }),
    execute: ({ v }) => `${name}:${v}`,
  });

describe("the loop around the gate", () => {
  it("hands the model its instructions with every request", async () => {
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "read", input: { path: "a" } }] },
      { text: "done" },
    ]);
    await new Agent({ model, tools: [readTool()], instructions: "You are terse." }).run("go");
    expect(model.requests.map((r) => r.instructions)).toEqual(["You are terse.", "You are terse."]);
    const bare = new ScriptedModel([{ text: "done" }]);
    await new Agent({ model: bare, tools: [] }).run("go");
    expect(bare.requests[0]).not.toHaveProperty("instructions");
  });

  it("empty or blank instructions are an EngineConfigError naming instructions, before any request", () => {
    const model = new ScriptedModel([{ text: "done" }]);
    for (const instructions of ["", " ", "\n\t "]) {
      const made = (): Agent => new Agent({ model, tools: [readTool()], instructions });
      expect(made).toThrow(EngineConfigError);
      expect(made).toThrow(/^Agent: instructions is an empty system prompt/);
    }
    expect(model.requests).toEqual([]);
  });

  it("starts from earlier messages, which it parses and freezes, and goes on from them", async () => {
    const earlier: Message[] = [
      { type: "user", text: "read a" },
      {
        type: "assistant",
        toolCalls: [{ id: "c0", name: "read", input: { path: "a" } }],
        providerData: { id: "resp_0" },
      },
      { type: "tool_result", callId: "c0", tool: "read", content: "contents of a", status: "ran", isError: false },
      { type: "user", text: "now b" },
    ];
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "read", input: { path: "b" } }] },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: [readTool()] }).run(earlier);
    expect(model.requests[0]!.messages).toEqual(earlier);
    expect(result.messages.slice(0, 4)).toEqual(earlier);
    expect(result.messages.slice(4).map((m) => m.type)).toEqual(["assistant", "tool_result", "assistant"]);
    expect(result.messages.every((m) => Object.isFrozen(m))).toBe(true);
    expect(Object.isFrozen((result.messages[1] as Extract<Message, { type: "assistant" }>).toolCalls[0]!.input)).toBe(
      true,
    );
    await expect(new Agent({ model, tools: [] }).run([{ type: "robot" }] as never)).rejects.toBeInstanceOf(
      EngineConfigError,
    );
    await expect(new Agent({ model, tools: [] }).run(42 as never)).rejects.toBeInstanceOf(EngineConfigError);
  });

  it("goes on from a saved transcript holding a call whose arguments had no JSON form", async () => {
    const first = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "read", input: undefined }] },
      { text: "refused, as it should be" },
    ]);
    const done = await new Agent({ model: first, tools: [readTool()] }).run("go");
    expect(done.records.map((r) => r.verdict)).toEqual(["deny"]);
    // What a caller stores and reads back: the call's `input` key is gone.
    const saved = JSON.parse(JSON.stringify(done.messages)) as Message[];
    expect(saved[1]).toEqual({ type: "assistant", toolCalls: [{ id: "c1", name: "read" }] });
    const next = new ScriptedModel([{ text: "done" }]);
    const result = await new Agent({ model: next, tools: [readTool()] }).run([
      ...saved,
      { type: "user", text: "again" },
    ]);
    expect(result.text).toBe("done");
    const call = (next.requests[0]!.messages[1] as Extract<Message, { type: "assistant" }>).toolCalls[0]!;
    expect(call).toMatchObject({ id: "c1", name: "read" });
    expect(call.input).toBeUndefined();
  });

  it("keeps a turn's opaque providerData on its assistant message and shows it to the model again, unchanged", async () => {
    const reasoning = { encrypted: "opaque-blob", items: [1, 2] };
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "read", input: { path: "a" } }], providerData: reasoning },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: [readTool()] }).run("go");
    const shown = model.requests[1]!.messages[1] as Extract<Message, { type: "assistant" }>;
    // The run keeps a frozen copy of what the model sent: the same value, which nobody can change.
    expect(shown.providerData).toEqual({ encrypted: "opaque-blob", items: [1, 2] });
    expect(Object.isFrozen(shown.providerData)).toBe(true);
    expect(Object.isFrozen((shown.providerData as typeof reasoning).items)).toBe(true);
    expect(result.messages[1]).toMatchObject({ providerData: { encrypted: "opaque-blob", items: [1, 2] } });
    expect((result.messages[1] as Extract<Message, { type: "assistant" }>).providerData).toBe(shown.providerData);
    reasoning.items.push(3);
    reasoning.encrypted = "changed";
    expect(shown.providerData).toEqual({ encrypted: "opaque-blob", items: [1, 2] });
    expect(result.messages.at(-1)).not.toHaveProperty("providerData");
  });

  it("tool results say whether the call ran, failed or was refused", async () => {
    const broken = defineTool({
      name: "broken",
      description: "",
      input: z.object({}),
      execute: () => {
        throw new Error("kaput");
      },
    });
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "read", input: { path: "a" } },
          { id: "c2", name: "broken", input: {} },
          { id: "c3", name: "read", input: {} },
        ],
      },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: [readTool(), broken] }).run("go");
    expect(result.messages.filter((m) => m.type === "tool_result").map((m) => [m.callId, m.status, m.isError])).toEqual(
      [
        ["c1", "ran", false],
        ["c2", "failed", true],
        ["c3", "refused", true],
      ],
    );
  });

  it("reads a live ToolSource at the start of each turn", async () => {
    let tools: readonly Tool[] = [echo("one")];
    const source: ToolSource = { current: () => tools };
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "one", input: { v: "x" } }] },
      () => {
        tools = [echo("two")];
        return { toolCalls: [{ id: "c2", name: "one", input: { v: "y" } }] };
      },
      { toolCalls: [{ id: "c3", name: "two", input: { v: "z" } }] },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: source }).run("go");
    expect(model.requests.map((r) => r.tools.map((t) => t.name))).toEqual([["one"], ["one"], ["two"], ["two"]]);
    // The second turn's tools were read before the model answered: "one" still ran then.
    expect(result.messages.filter((m) => m.type === "tool_result").map((m) => m.content)).toEqual([
      "one:x",
      "one:y",
      "two:z",
    ]);
    tools = [echo("dup"), echo("dup")];
    const duplicate = await new Agent({ model: new ScriptedModel([{ text: "x" }]), tools: source })
      .run("go")
      .catch((e: unknown) => e);
    expect(duplicate).toBeInstanceOf(RunConfigError);
    expect(duplicate).toMatchObject({ option: "ToolSource.current" });
    expect((duplicate as Error).cause).toBeInstanceOf(ToolDefinitionError);
  });

  it(`stops at the default turn cap (${DEFAULT_MAX_TURNS} model requests) unless withBudget lifts it`, async () => {
    const forever = () => ({ generate: async () => ({ toolCalls: [{ id: "", name: "read", input: { path: "a" } }] }) });
    const capped = await new Agent({ model: forever(), tools: [readTool()] }).run("go").catch((e: unknown) => e);
    expect(capped).toMatchObject({ code: "BUDGET_EXCEEDED", kind: "turns", limit: 20, used: 20 });
    let turns = 0;
    const counting = {
      generate: async () =>
        ++turns <= 25
          ? { toolCalls: [{ id: "", name: "read", input: { path: "a" } }] }
          : { text: "done", toolCalls: [] },
    };
    const lifted = await new Agent({
      model: counting,
      tools: [readTool()],
      managers: new LoopManagers().withBudget({ maxTurns: Number.POSITIVE_INFINITY }),
    }).run("go");
    expect(lifted.turns).toBe(26);
  });

  it("a tool call with an empty id gets one generated instead of failing the run; results match it", async () => {
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "", name: "read", input: { path: "a" } },
          { id: "", name: "read", input: { path: "b" } },
        ],
      },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: [readTool()] }).run("go");
    const calls = (result.messages[1] as Extract<Message, { type: "assistant" }>).toolCalls;
    expect(calls.map((c) => c.id)).toEqual([
      expect.stringMatching(/^call_[0-9a-f-]{36}$/),
      expect.stringMatching(/^call_[0-9a-f-]{36}$/),
    ]);
    expect(calls[0]!.id).not.toBe(calls[1]!.id);
    expect(result.messages.filter((m) => m.type === "tool_result").map((m) => m.callId)).toEqual(
      calls.map((c) => c.id),
    );
  });

  it("a generated call id is one no other call of the transcript holds, not even one the model gave in the same turn", async () => {
    // A seeded generator's ids can be known in advance: the session id, the run id, then the first call's.
    const ahead = seededIdGen("known");
    ahead();
    ahead();
    const next = `call_${ahead()}`;
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "", name: "read", input: { path: "a" } },
          { id: next, name: "read", input: { path: "b" } },
        ],
      },
      { text: "done" },
    ]);
    const managers = new LoopManagers().withIdGen(seededIdGen("known"));
    const result = await new Agent({ model, tools: [readTool()], managers }).run("go");
    const ids = (result.messages[1] as Extract<Message, { type: "assistant" }>).toolCalls.map((c) => c.id);
    expect(ids[1]).toBe(next);
    expect(ids[0]).toMatch(/^call_[0-9a-f-]{36}$/);
    expect(ids[0]).not.toBe(next);
    expect(result.messages.filter((m) => m.type === "tool_result").map((m) => m.callId)).toEqual(ids);
    // The transcript is one the agent goes on from.
    const later = new ScriptedModel([{ text: "again" }]);
    expect((await new Agent({ model: later, tools: [readTool()] }).run(result.messages)).text).toBe("again");
  });

  it("an id generator that repeats an id stops the run with a RunConfigError naming withIdGen, before the calls run", async () => {
    const executed: unknown[] = [];
    const same = "00000000-0000-4000-8000-000000000001";
    // In one turn, and across turns (its first call took the id the second turn's is given again).
    for (const turns of [
      [{ toolCalls: [call("", { path: "a" }), call("", { path: "b" })] }],
      [{ toolCalls: [call("", { path: "a" })] }, { toolCalls: [call("", { path: "b" })] }],
    ]) {
      executed.length = 0;
      const model = new ScriptedModel([...turns, { text: "done" }]);
      const managers = new LoopManagers().withIdGen(() => same);
      const error = (await new Agent({ model, tools: [readTool(executed)], managers })
        .run("go")
        .catch((e: unknown) => e)) as RunConfigError;
      expect(error).toBeInstanceOf(RunConfigError);
      expect(error).toMatchObject({ option: "withIdGen", code: "RUN_CONFIG" });
      expect(error.message).toBe(
        `withIdGen: the id generator gave an id it had given before ('${same}'): it must give a fresh UUID each call`,
      );
      expect(executed).toEqual(turns.length === 1 ? [] : [{ path: "a" }]);
      // What the run kept is a transcript it goes on from: each call it holds has its one result.
      const later = new ScriptedModel([{ text: "again" }]);
      expect((await new Agent({ model: later, tools: [readTool()] }).run(error.messages)).text).toBe("again");
    }
  });

  it("a run id the generator gives again while that run still runs stops the new run with a RunConfigError; the first goes on", async () => {
    const ids = ["00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"];
    let drawn = 0;
    // The session id, then the same run id each time.
    const idGen = (): string => ids[Math.min(drawn++, 1)]!;
    const release = deferred<void>();
    const slow = defineTool({
      name: "slow",
      description: "waits",
      input: z.object({}),
      execute: async () => {
        await release.promise;
        return "done";
      },
    });
    const model = new ScriptedModel([
      { toolCalls: [{ id: "s1", name: "slow", input: {} }] },
      { text: "first done" },
      { text: "third done" },
    ]);
    const agent = new Agent({ model, tools: [slow], managers: new LoopManagers().withIdGen(idGen) });
    const first = agent.run("go");
    await until(() => model.requests.length === 1);
    const second = (await agent.run("also").catch((e: unknown) => e)) as RunConfigError;
    expect(second).toBeInstanceOf(RunConfigError);
    expect(second).toMatchObject({ option: "withIdGen", code: "RUN_CONFIG" });
    expect(second.message).toBe(
      `withIdGen: the id generator gave the id of a run still running ('${ids[1]}'): it must give a fresh UUID each call`,
    );
    expect(second.messages).toEqual([{ type: "user", text: "also" }]);
    expect(model.requests).toHaveLength(1);
    release.resolve();
    await expect(first).resolves.toMatchObject({ text: "first done", runId: ids[1] });
    // Once that run has ended, its id is free again.
    await expect(agent.run("again")).resolves.toMatchObject({ text: "third done", runId: ids[1] });
  });

  it("refuses run options it cannot use with an EngineConfigError naming Agent.run, before the model is asked", async () => {
    const model = new ScriptedModel([{ text: "never" }]);
    const agent = new Agent({ model, tools: [] });
    for (const options of [null, "fast", { signal: {} }, { signal: { aborted: false } }]) {
      const error = await agent.run("go", options as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Agent.run" });
    }
    expect(model.requests).toEqual([]);
  });

  it("an option the agent or a run does not have is an EngineConfigError naming it, never silently ignored", async () => {
    const model = new ScriptedModel([{ text: "never" }]);
    // The peers take a turn cap here (the OpenAI Agents SDK's run options, the AI SDK's agent); loopctl's is a budget.
    const capHint = "(a run's turn and token caps are set with LoopManagers.withBudget({ maxTurns, maxTokens }))";
    for (const [options, said] of [
      [{ model, tools: [], maxTurns: 5 }, `Agent: unknown option 'maxTurns' ${capHint}`],
      [
        { model, tools: [], instruction: "Be brief." },
        "Agent: unknown option 'instruction' (did you mean instructions?)",
      ],
      [
        { model, tools: [], systemPrompt: "Be brief." },
        "Agent: unknown option 'systemPrompt' (the options are model, tools, managers and instructions)",
      ],
    ] as const) {
      expect(() => new Agent(options as never)).toThrow(new EngineConfigError("Agent", said.slice("Agent: ".length)));
    }
    const agent = new Agent({ model, tools: [] });
    for (const [options, said] of [
      [{ maxTurns: 5 }, `unknown option 'maxTurns' ${capHint}`],
      [{ signals: new AbortController().signal }, "unknown option 'signals' (did you mean signal?)"],
      [{ context: {} }, "unknown option 'context' (the only option is signal)"],
      // The signal itself, not in its options object: it has no keys of its own, and would cancel nothing.
      [new AbortController().signal, "options must be { signal? }, got an AbortSignal (give it as { signal })"],
    ] as const) {
      const error = await agent.run("go", options as never).catch((e: unknown) => e);
      expect(error).toEqual(new EngineConfigError("Agent.run", said));
    }
    expect(model.requests).toEqual([]);
  });

  it("a signal that only inherits from AbortSignal, one that cannot be listened to, or options that cannot be read are an EngineConfigError naming Agent.run, as Gate.call gives, before the model is asked", async () => {
    const model = new ScriptedModel([{ text: "done" }]);
    const agent = new Agent({ model, tools: [] });
    const inherited = await agent
      .run("go", { signal: Object.create(AbortSignal.prototype) as AbortSignal })
      .catch((e: unknown) => e);
    expect(inherited).toBeInstanceOf(EngineConfigError);
    expect(inherited).toMatchObject({ option: "Agent.run", message: "Agent.run: signal must be an AbortSignal" });
    const trap = new Error("cannot listen");
    const unlistenable = new AbortController().signal;
    unlistenable.addEventListener = () => {
      throw trap;
    };
    const unreadable = new Error("no signal here");
    const getter = {
      get signal(): AbortSignal {
        throw unreadable;
      },
    };
    for (const [options, message, cause] of [
      [{ signal: unlistenable }, "Agent.run: the signal cannot be listened to: cannot listen", trap],
      [getter, "Agent.run: the options cannot be read: no signal here", unreadable],
    ] as const) {
      const error = await agent.run("go", options).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Agent.run", message, cause });
    }
    expect(model.requests).toEqual([]);
    expect(await agent.run("go", { signal: new AbortController().signal })).toMatchObject({ text: "done" });
  });

  it("a signal whose reason cannot be read (a getter that throws) still cancels the run: CancelledError naming the signal, the parked call's cancelled record", async () => {
    const executed: unknown[] = [];
    let parked = 0;
    const managers = new LoopManagers()
      .withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) })
      .withAskResolver({ resolve: () => ((parked += 1), new Promise(() => {})) });
    const model = new ScriptedModel([{ toolCalls: [call("c1", { path: "a" })] }, { text: "done" }]);
    const trap = new Error("reason unreadable");
    const { controller, signal } = unreadableReasonSignal(trap);
    const running = track(new Agent({ model, tools: [readTool(executed)], managers }).run("go", { signal }));
    await until(() => parked === 1);
    controller.abort();
    await until(() => running.outcome.state !== "pending");
    const error = (running.outcome as { reason: unknown }).reason;
    expect(error).toBeInstanceOf(CancelledError);
    expect((error as CancelledError).cause).toBeInstanceOf(EngineConfigError);
    expect(error).toMatchObject({
      cause: {
        option: "Agent.run",
        message: "Agent.run: the signal aborted, and its reason could not be read",
        cause: trap,
      },
      records: [{ verdict: "cancelled", reason: "cancelled while awaiting approval" }],
    });
    expect(executed).toEqual([]);
  });

  it("a signal whose removeEventListener throws: the run settles once with its own result or stop, ends its run at the gate, and no longer hears the signal", async () => {
    const seen: AbortSignal[] = [];
    const started = deferred<undefined>();
    const probe = defineTool({
      name: "probe",
      description: "probe",
      input: z.object({ wait: z.boolean() }),
      execute: ({ wait }, { signal }) => {
        seen.push(signal);
        if (!wait) return "ok";
        started.resolve(undefined);
        return new Promise(() => undefined);
      },
    });
    const agent = new Agent({
      model: new ScriptedModel([
        { toolCalls: [{ id: "c1", name: "probe", input: { wait: false } }] },
        { text: "done" },
        { toolCalls: [{ id: "c2", name: "probe", input: { wait: true } }] },
      ]),
      tools: [probe],
    });
    const endRun = vi.spyOn(agent.gate, "endRun");
    const finished = stuckController();
    const result = track(agent.run("go", { signal: finished.signal }));
    await until(() => result.outcome.state !== "pending");
    expect(result.outcome).toMatchObject({ state: "fulfilled", value: { text: "done", turns: 2 } });
    const { runId } = (result.outcome as { value: RunResult }).value;
    expect(endRun).toHaveBeenCalledWith(runId);
    // The signal aborts once the run has ended: what its tool was handed stays live.
    finished.abort(new Error("too late"));
    expect(seen[0]!.aborted).toBe(false);

    const cancelling = stuckController();
    const stopped = track(agent.run("again", { signal: cancelling.signal }));
    await started.promise;
    const reason = new Error("stop");
    cancelling.abort(reason);
    await until(() => stopped.outcome.state !== "pending");
    expect(stopped.outcome.state).toBe("rejected");
    const error = (stopped.outcome as { reason: unknown }).reason;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error).toMatchObject({ cause: reason, records: [{ verdict: "cancelled" }] });
    expect(endRun).toHaveBeenCalledTimes(2);
    await flush();
    expect([result, stopped].map((run) => run.settlements)).toEqual([1, 1]);
  });

  it("a cancel that comes while the turn is being prepared (the tool source, an observer) asks the model nothing", async () => {
    for (const where of ["source", "observer"] as const) {
      const controller = new AbortController();
      const model = new ScriptedModel([{ text: "never" }]);
      const source: ToolSource = {
        current: () => {
          if (where === "source") controller.abort();
          return [readTool()];
        },
      };
      const managers = new LoopManagers().withObserver({
        onModelRequest: () => {
          if (where === "observer") controller.abort();
        },
      });
      const error = await new Agent({ model, tools: source, managers })
        .run("go", { signal: controller.signal })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CancelledError);
      expect(model.requests).toEqual([]);
    }
  });

  it("a model that throws a CancelledError of its own, with the run's signal live, is a ModelError, not a cancel", async () => {
    const inner = new CancelledError("a nested run was cancelled");
    const model = { generate: async () => Promise.reject(inner) };
    const error = await new Agent({ model, tools: [] })
      .run("go", { signal: new AbortController().signal })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ code: "MODEL_ERROR", cause: inner });
    for (const thrown of [undefined, null, "a string", 42]) {
      const failing = new ScriptedModel([{ error: thrown }]);
      const stopped = await new Agent({ model: failing, tools: [] }).run("go").catch((e: unknown) => e);
      expect(stopped).toBeInstanceOf(ModelError);
      expect((stopped as ModelError).cause).toBe(thrown);
    }
  });

  it("the transcript the model and observers are handed is read-only: writing to it throws and changes no later turn", async () => {
    const forged: Message = {
      type: "tool_result",
      callId: "forged",
      tool: "read",
      content: "forged",
      status: "ran",
      isError: false,
    };
    const reported: string[] = [];
    const model = new ScriptedModel([
      (request) => {
        // What the model was handed is the live transcript, not ScriptedModel's copy of it.
        expect(Array.isArray(request.messages)).toBe(true);
        return { toolCalls: [{ id: "c1", name: "read", input: { path: "a" } }] };
      },
      { text: "done" },
    ]);
    const writes: ((messages: Message[]) => unknown)[] = [
      (messages) => messages.push(forged),
      (messages) => messages.splice(0, 1),
      (messages) => (messages.length = 0),
      (messages) => (messages[0] = forged),
      (messages) => Object.defineProperty(messages, "0", { value: forged }),
      // eslint-disable-next-line @typescript-eslint/no-array-delete -- the write under test
      (messages) => delete messages[0],
    ];
    const managers = new LoopManagers()
      .withObserver({
        onModelRequest: ({ messages }) => {
          for (const write of writes) {
            try {
              write(messages as Message[]);
            } catch (error) {
              reported.push((error as Error).name);
            }
          }
        },
      })
      .withObserverErrorHandler((error) => reported.push(`handler:${(error as Error).name}`));
    const result = await new Agent({ model, tools: [readTool()], managers }).run("go");
    expect(reported).toEqual(Array.from({ length: 2 * writes.length }, () => "TypeError"));
    expect(model.requests.map((r) => r.messages.map((m) => m.type))).toEqual([
      ["user"],
      ["user", "assistant", "tool_result"],
    ]);
    expect(result.messages.map((m) => m.type)).toEqual(["user", "assistant", "tool_result", "assistant"]);
    expect(JSON.parse(JSON.stringify(model.requests[1]!.messages))).toEqual(result.messages.slice(0, 3));

    const reversing = {
      generate: async (request: ModelRequest): Promise<ModelResponse> => {
        (request.messages as Message[]).reverse();
        return { text: "reversed", toolCalls: [] };
      },
    };
    const error = await new Agent({ model: reversing, tools: [] })
      .run([
        { type: "user", text: "one" },
        { type: "user", text: "two" },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelError);
    expect((error as ModelError).cause).toBeInstanceOf(TypeError);
    expect((error as ModelError).messages).toEqual([
      { type: "user", text: "one" },
      { type: "user", text: "two" },
    ]);
  });

  it("a ToolSource whose current() throws or returns no array stops the run with a RunConfigError naming it", async () => {
    const down = new Error("server gone");
    const sources: [ToolSource, string][] = [
      [
        {
          current: () => {
            throw down;
          },
        },
        "server gone",
      ],
      [{ current: async () => [readTool()] } as unknown as ToolSource, "a Promise"],
      [{ current: () => null } as unknown as ToolSource, "null"],
      [{ current: () => "read" } as unknown as ToolSource, "a string"],
    ];
    for (const [source, said] of sources) {
      const model = new ScriptedModel([{ text: "never" }]);
      const error = await new Agent({ model, tools: source }).run("go").catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RunConfigError);
      expect(error).toMatchObject({ option: "ToolSource.current", code: "RUN_CONFIG" });
      expect((error as Error).message).toContain(said);
      expect(model.requests).toEqual([]);
    }
    const error = await new Agent({ model: new ScriptedModel([]), tools: sources[0]![0] })
      .run("go")
      .catch((e: unknown) => e);
    expect((error as Error).cause).toBe(down);
  });

  it("agent options whose reads throw (a getter, a revoked proxy) are an EngineConfigError naming Agent, the thrown value its cause; a revoked input one naming Agent.run", async () => {
    const bomb = new Error("getter bomb");
    const fail = (): never => {
      throw bomb;
    };
    const revoked = Proxy.revocable([], {});
    revoked.revoke();
    const model = new ScriptedModel([{ text: "never" }]);
    const options: [string, unknown][] = [
      [
        "the options",
        {
          get model(): never {
            return fail();
          },
          tools: [],
        },
      ],
      [
        "the model",
        {
          model: {
            get generate(): never {
              return fail();
            },
          },
          tools: [],
        },
      ],
      ["the tools", { model, tools: revoked.proxy }],
      [
        "a tool",
        {
          model,
          tools: [
            {
              get check(): never {
                return fail();
              },
            },
          ],
        },
      ],
      ["an entry", { model, tools: Object.defineProperty([], 0, { get: fail, enumerable: true }) }],
      [
        "the instructions",
        {
          model,
          tools: [],
          get instructions(): never {
            return fail();
          },
        },
      ],
    ];
    for (const [label, given] of options) {
      let error: unknown;
      try {
        new Agent(given as never);
      } catch (thrown) {
        error = thrown;
      }
      expect(error, label).toBeInstanceOf(EngineConfigError);
      expect(error, label).toMatchObject({ option: "Agent" });
      expect((error as Error).message, label).toMatch(/^Agent: the options cannot be read: /);
      if (label !== "the tools") expect((error as Error).cause, label).toBe(bomb);
    }
    const run = await new Agent({ model, tools: [] }).run(revoked.proxy as never).catch((e: unknown) => e);
    expect(run).toBeInstanceOf(EngineConfigError);
    expect(run).toMatchObject({ option: "Agent.run" });
    expect(model.requests).toEqual([]);
  });

  it("earlier messages whose reads throw (a proxy, a getter) are an EngineConfigError naming the message", async () => {
    const fail = (): never => {
      throw new Error("getter bomb");
    };
    const bomb = new Proxy({}, { get: fail, has: fail, ownKeys: fail, getOwnPropertyDescriptor: fail });
    const getter = {
      type: "user",
      get text(): string {
        throw new Error("text bomb");
      },
    };
    const model = new ScriptedModel([{ text: "never" }]);
    const agent = new Agent({ model, tools: [] });
    for (const [input, said] of [
      [[{ type: "user", text: "hi" }, bomb], "messages[1]"],
      [[getter], "messages[0]"],
      [new Proxy([], { get: fail }), "messages"],
    ] as const) {
      const error = await agent.run(input as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Agent.run" });
      expect((error as Error).message).toContain(said);
    }
    expect(model.requests).toEqual([]);
  });

  it("a call id the run already holds (an earlier turn's, or a starting message's) gets a fresh one: results pair with calls", async () => {
    const earlier: Message[] = [
      { type: "user", text: "read a" },
      { type: "assistant", toolCalls: [{ id: "c0", name: "read", input: { path: "a" } }] },
      { type: "tool_result", callId: "c0", tool: "read", content: "a", status: "ran", isError: false },
      { type: "user", text: "go on" },
    ];
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c0", name: "read", input: { path: "b" } }] },
      { toolCalls: [{ id: "c1", name: "read", input: { path: "c" } }] },
      { toolCalls: [{ id: "c1", name: "read", input: { path: "d" } }] },
      { text: "done" },
    ]);
    const agent = new Agent({ model, tools: [readTool()] });
    const result = await agent.run(earlier);
    const ids = result.messages.flatMap((m) => (m.type === "assistant" ? m.toolCalls.map((c) => c.id) : []));
    expect(ids).toHaveLength(4);
    expect(new Set(ids).size).toBe(4);
    expect(ids[2]).toBe("c1");
    expect(ids[1]).toMatch(/^call_/);
    expect(ids[3]).toMatch(/^call_/);
    const results = result.messages.flatMap((m) => (m.type === "tool_result" ? [m.callId] : []));
    expect(results).toEqual(ids);
    expect(result.records).toHaveLength(3);
    // The run's own transcript goes on as earlier messages.
    const again = new ScriptedModel([{ text: "still done" }]);
    const resumed = await new Agent({ model: again, tools: [readTool()] }).run(
      JSON.parse(JSON.stringify(result.messages)) as Message[],
    );
    expect(resumed.text).toBe("still done");
  });

  it("an empty list of messages is an EngineConfigError naming Agent.run, instructions or not, before the model is asked", async () => {
    const model = new ScriptedModel([{ text: "answered nothing" }]);
    for (const agent of [
      new Agent({ model, tools: [readTool()] }),
      new Agent({ model, tools: [readTool()], instructions: "Greet the user." }),
    ]) {
      const error = await agent.run([]).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Agent.run" });
      expect((error as Error).message).toContain("messages is empty");
    }
    expect(model.requests).toEqual([]);
    // One message is a start.
    const started = await new Agent({ model, tools: [] }).run([{ type: "user", text: "hi" }]);
    expect(started.text).toBe("answered nothing");
  });

  it("an empty or blank prompt is an EngineConfigError naming Agent.run's input, before the model is asked", async () => {
    const model = new ScriptedModel([{ text: "answered nothing" }]);
    const agent = new Agent({ model, tools: [readTool()], instructions: "Greet the user." });
    for (const input of ["", " ", "\n\t "]) {
      const error = await agent.run(input).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Agent.run" });
      expect((error as Error).message).toContain("input is an empty prompt");
    }
    // A user message without text, among earlier messages, is the same empty prompt.
    const error = await agent
      .run([
        { type: "user", text: "read a" },
        { type: "assistant", text: "which file?", toolCalls: [] },
        { type: "user", text: "  " },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineConfigError);
    expect((error as Error).message).toContain("messages[2] is a user message with no text");
    expect(model.requests).toEqual([]);
    expect((await agent.run("hi")).text).toBe("answered nothing");
  });

  it("earlier messages holding no user message are an EngineConfigError naming Agent.run, before the model is asked", async () => {
    const model = new ScriptedModel([{ text: "answered nothing" }]);
    const agent = new Agent({ model, tools: [readTool()], instructions: "Greet the user." });
    const asked: Message = { type: "assistant", toolCalls: [{ id: "c1", name: "read", input: { path: "a" } }] };
    const answered: Message = {
      type: "tool_result",
      callId: "c1",
      tool: "read",
      content: "a",
      status: "ran",
      isError: false,
    };
    for (const input of [[{ type: "assistant", text: "How can I help?", toolCalls: [] }], [asked, answered]] as const) {
      const error = await agent.run(input).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Agent.run" });
      expect((error as Error).message).toContain("messages holds no user message");
    }
    expect(model.requests).toEqual([]);
    // A user message anywhere is a start: the transcript may open with the model's greeting.
    const greeted = await agent.run([
      { type: "assistant", text: "How can I help?", toolCalls: [] },
      { type: "user", text: "hi" },
    ]);
    expect(greeted.text).toBe("answered nothing");
  });

  it("earlier messages that do not pair calls with results are an EngineConfigError naming the message", async () => {
    const user: Message = { type: "user", text: "hi" };
    const asked = (...ids: string[]): Message => ({
      type: "assistant",
      toolCalls: ids.map((id) => ({ id, name: "read", input: { path: "a" } })),
    });
    const result = (callId: string, tool = "read"): Message => ({
      type: "tool_result",
      callId,
      tool,
      content: "a",
      status: "ran",
      isError: false,
    });
    const model = new ScriptedModel([{ text: "never" }]);
    const agent = new Agent({ model, tools: [readTool()] });
    for (const [input, said] of [
      [[user, result("c9")], "messages[1] is the result of no earlier call ('c9')"],
      [[user, asked("c1"), result("c1"), result("c1")], "messages[3] is a second result of call 'c1'"],
      [
        [user, asked("c1"), result("c1", "write")],
        "messages[2] is the result of call 'c1' of tool 'read', not of 'write'",
      ],
      [[user, asked("c1"), result("c1"), asked("c1")], "messages[3] reuses the id of an earlier call ('c1')"],
      [[user, asked("c1", "c1")], "messages[1] reuses the id of an earlier call ('c1')"],
      [[user, asked("c1")], "messages[1]: call 'c1' of tool 'read' has no result after it"],
      [[user, asked("c1", "c2"), result("c1")], "messages[1]: call 'c2' of tool 'read' has no result after it"],
      [
        [user, asked("c1", "c2"), result("c1"), asked("c3"), result("c3")],
        "messages[1]: call 'c2' of tool 'read' has no result before messages[3]",
      ],
      [
        [user, asked("c1"), user, result("c1")],
        "messages[1]: call 'c1' of tool 'read' has no result before messages[2]",
      ],
    ] as const) {
      const error = await agent.run(input).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Agent.run" });
      expect((error as Error).message).toContain(said);
    }
    expect(model.requests).toEqual([]);
    // A result whose isError contradicts its status says two things; a model adapter may read either.
    for (const [status, isError] of [
      ["ran", true],
      ["failed", false],
      ["refused", false],
    ] as const) {
      const contradicting: Message = { type: "tool_result", callId: "c1", tool: "read", content: "a", status, isError };
      const error = await agent.run([user, asked("c1"), contradicting]).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect((error as Error).message).toContain(
        `messages[2] has status '${status}' but isError ${isError} (isError must be status !== "ran")`,
      );
    }
    expect(model.requests).toEqual([]);
    // Every call answered right after its message, in any order, goes on.
    const paired = await agent.run([user, asked("c1", "c2"), result("c2"), result("c1"), { type: "user", text: "go" }]);
    expect(paired.text).toBe("never");
  });

  it("an id generator that throws is an EngineConfigError naming withIdGen from the constructor, a RunConfigError from the run", async () => {
    const broken = new Error("no entropy");
    let left = 0;
    const idGen = (): string => {
      if (left-- > 0) return "00000000-0000-4000-8000-000000000000";
      throw broken;
    };
    const managers = new LoopManagers().withIdGen(idGen);
    const model = (): ScriptedModel =>
      new ScriptedModel([{ toolCalls: [{ id: "", name: "read", input: { path: "a" } }] }, { text: "done" }]);
    // Thrown at the session id, the run id, and the id of a call that came without one.
    for (const ids of [0, 1, 2]) {
      left = ids;
      const error = await Promise.resolve()
        .then(() => new Agent({ model: model(), tools: [readTool()], managers }).run("go"))
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ids === 0 ? EngineConfigError : RunConfigError);
      expect(error).toMatchObject({ option: "withIdGen", cause: broken });
      expect((error as Error).message).toBe("withIdGen: the id generator failed: no entropy");
      // Stopped before its first turn, the run still carries its transcript: the input it was given.
      if (ids > 0) expect((error as RunConfigError).messages).toEqual([{ type: "user", text: "go" }]);
    }
  });

  it("a ToolSource or id generator that fails on a later turn stops the run keeping the records and transcript so far", async () => {
    const executed: unknown[] = [];
    const read = readTool(executed);
    const down = new Error("server gone");
    let reads = 0;
    const source: ToolSource = {
      current: () => {
        reads += 1;
        if (reads > 1) throw down;
        return [read];
      },
    };
    let ids = 0;
    const idGen = (): string => {
      ids += 1;
      // The session id, the run id, the first call's id; the second turn's call finds it broken.
      if (ids > 3) throw down;
      return `00000000-0000-4000-8000-00000000000${ids}`;
    };
    const twoTurns = (): ScriptedModel =>
      new ScriptedModel([
        { toolCalls: [{ id: "", name: "read", input: { path: "a" } }] },
        { toolCalls: [{ id: "", name: "read", input: { path: "b" } }] },
        { text: "done" },
      ]);
    const runs: [string, Agent][] = [
      ["ToolSource.current", new Agent({ model: twoTurns(), tools: source })],
      ["withIdGen", new Agent({ model: twoTurns(), tools: [read], managers: new LoopManagers().withIdGen(idGen) })],
    ];
    for (const [option, agent] of runs) {
      executed.length = 0;
      const error = (await agent.run("go").catch((e: unknown) => e)) as RunConfigError;
      expect(error).toBeInstanceOf(RunStoppedError);
      expect(error).toBeInstanceOf(RunConfigError);
      expect(error).toMatchObject({ option, code: "RUN_CONFIG", cause: down });
      expect(executed).toEqual([{ path: "a" }]);
      expect(error.records.map((r) => [r.tool, r.verdict])).toEqual([["read", "allow"]]);
      expect(error.messages.map((m) => m.type)).toEqual(["user", "assistant", "tool_result"]);
    }
  });
});

describe("a stopped run's transcript answers every call it holds", () => {
  it("a call the stop came before did not run, and a run resumed from the transcript shows the model every call answered", async () => {
    const executed: unknown[] = [];
    const read = readTool(executed);
    // The second call of the turn is the third `a.md`: loop detection stops the run before `b.md` is tried.
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "read", input: { path: "a.md" } }] },
      {
        toolCalls: [
          { id: "c2", name: "read", input: { path: "a.md" } },
          { id: "c3", name: "read", input: { path: "a.md" } },
          { id: "c4", name: "read", input: { path: "b.md" } },
        ],
      },
    ]);
    const managers = new LoopManagers().withLoopDetection({ maxRepeats: 2 });
    const error = (await new Agent({ model, tools: [read], managers })
      .run("go")
      .catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(executed).toEqual([{ path: "a.md" }, { path: "a.md" }]);
    // One record per decision: the call never tried has none.
    expect(error.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["allow", "hook"],
      ["allow", "hook"],
      ["deny", "loop_detector"],
    ]);
    const results = error.messages.filter((m) => m.type === "tool_result");
    expect(results.map((m) => [m.callId, m.status])).toEqual([
      ["c1", "ran"],
      ["c2", "ran"],
      ["c3", "refused"],
      ["c4", "refused"],
    ]);
    expect(results.at(-1)).toEqual(notRunResult("c4", "read"));

    // Stored as JSON and resumed: the model is shown each call with its one result, and only new calls run.
    const stored = JSON.parse(JSON.stringify(error.messages)) as Message[];
    const later = new ScriptedModel([
      { toolCalls: [{ id: "c5", name: "read", input: { path: "b.md" } }] },
      { text: "done" },
    ]);
    const resumed = await new Agent({ model: later, tools: [read] }).run([...stored, { type: "user", text: "go on" }]);
    expect(resumed.text).toBe("done");
    expect(executed).toEqual([{ path: "a.md" }, { path: "a.md" }, { path: "b.md" }]);
    const shown = later.requests[0]!.messages;
    const calls = shown.flatMap((m) => (m.type === "assistant" ? m.toolCalls.map((c) => c.id) : []));
    expect(shown.flatMap((m) => (m.type === "tool_result" ? [m.callId] : []))).toEqual(calls);
  });

  it("a call whose tool was still running at the cancel may have done its work; the ones not started did not run", async () => {
    const started = deferred<void>();
    const slow = defineTool({
      name: "deploy",
      description: "deploys, and does not stop when asked",
      input: z.object({ v: z.string() }),
      execute: async () => {
        started.resolve();
        await new Promise<never>(() => {});
      },
    });
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "d1", name: "deploy", input: { v: "1" } },
          { id: "d2", name: "deploy", input: { v: "2" } },
        ],
      },
    ]);
    const controller = new AbortController();
    const running = new Agent({ model, tools: [slow] }).run("go", { signal: controller.signal });
    await started.promise;
    controller.abort();
    const error = (await running.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.records.map((r) => [r.tool, r.verdict, r.reason])).toEqual([
      ["deploy", "cancelled", "cancelled during execution"],
    ]);
    expect(error.messages.filter((m) => m.type === "tool_result")).toEqual([
      {
        type: "tool_result",
        callId: "d1",
        tool: "deploy",
        content: "Tool 'deploy' was still running when the run stopped: it may have done some or all of its work",
        status: "failed",
        isError: true,
      },
      notRunResult("d2", "deploy"),
    ]);
  });

  it("a cancel while a middleware has not returned: the record says during execution, the transcript that the tool did not run", async () => {
    const executed: unknown[] = [];
    const entered = deferred<void>();
    const release = deferred<void>();
    const slow: Middleware = async (_call, _context, next) => {
      entered.resolve();
      await release.promise;
      return next();
    };
    const model = new ScriptedModel([{ toolCalls: [{ id: "m1", name: "read", input: { path: "a" } }] }]);
    const controller = new AbortController();
    const running = new Agent({
      model,
      tools: [readTool(executed)],
      managers: new LoopManagers().withMiddleware(slow),
    }).run("go", { signal: controller.signal });
    await entered.promise;
    controller.abort();
    const error = (await running.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.records.map((r) => [r.verdict, r.reason])).toEqual([["cancelled", "cancelled during execution"]]);
    expect(error.messages.at(-1)).toEqual(notRunResult("m1", "read"));
    // The middleware's late next() starts nothing.
    release.resolve();
    await flush();
    expect(executed).toEqual([]);
  });

  it("a call parked for approval when another call stops the run did not run", async () => {
    const executed: unknown[] = [];
    const askForB = {
      preToolUse: (c: { id: string }) =>
        c.id === "b" ? { type: "ask" as const, prompt: "?" } : { type: "allow" as const },
    };
    // The resolver never answers; beside the parked `b`, `a` runs, and its repeat is a loop that stops the run.
    const managers = new LoopManagers()
      .withHook(askForB)
      .withAskResolver({ resolve: () => new Promise(() => {}) })
      .withMaxConcurrency(2)
      .withLoopDetection({ maxRepeats: 1 });
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "b", name: "read", input: { path: "b.md" } },
          { id: "a", name: "read", input: { path: "a.md" } },
          { id: "a2", name: "read", input: { path: "a.md" } },
        ],
      },
    ]);
    const error = (await new Agent({ model, tools: [readTool(executed)], managers })
      .run("go")
      .catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(executed).toEqual([{ path: "a.md" }]);
    expect(error.records.map((r) => [r.verdict, r.reason]).sort()).toEqual([
      ["allow", null],
      ["cancelled", "cancelled while awaiting approval"],
      ["deny", `dispatch refused before execution: ${error.message}`],
    ]);
    expect(error.messages.filter((m) => m.type === "tool_result").map((m) => [m.callId, m.status, m.content])).toEqual([
      ["b", "refused", "Tool 'read' did not run: the run stopped before it"],
      ["a", "ran", "contents of a.md"],
      ["a2", "refused", `dispatch refused before execution: ${error.message}`],
    ]);
  });
});
