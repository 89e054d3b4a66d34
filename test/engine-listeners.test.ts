import { getEventListeners } from "node:events";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel } from "../src/ask/index.js";
import type { PendingAsk } from "../src/ask/index.js";
import { Agent, LoopManagers, defineTool } from "../src/engine/index.js";
import type { ToolCall } from "../src/engine/index.js";
import { ScriptedModel } from "../src/testing/index.js";

const WAVE = 32;

describe("a wide wave of parallel calls shares its signals without warnings", () => {
  const warnings: Error[] = [];
  const onWarning = (warning: Error): void => {
    warnings.push(warning);
  };
  beforeEach(() => {
    warnings.length = 0;
    process.on("warning", onWarning);
  });
  afterEach(() => {
    process.off("warning", onWarning);
  });

  it(`${WAVE} asks parked at once on one run: no MaxListenersExceededWarning, no listener left on the caller's signal`, async () => {
    const [channel, approver] = ApprovalChannel.pair(WAVE);
    const executed: string[] = [];
    const echo = defineTool({
      name: "echo",
      description: "echo",
      input: z.object({ v: z.string() }),
      execute: ({ v }, { signal }) => {
        // Tools may listen to the signal they are given; a wide wave of them must not warn either.
        signal.addEventListener("abort", () => undefined, { once: true });
        executed.push(v);
        return v;
      },
    });
    const toolCalls: ToolCall[] = Array.from({ length: WAVE }, (_, i) => ({ id: `c${i}`, name: "echo", input: { v: `v${i}` } }));
    const agent = new Agent({
      model: new ScriptedModel([{ toolCalls }, { text: "done" }]),
      tools: [echo],
      managers: new LoopManagers()
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "echo?" }) })
        .withAskResolver(channel)
        .withMaxConcurrency(WAVE),
    });
    const caller = new AbortController();
    const running = agent.run("go", { signal: caller.signal });
    const asks: PendingAsk[] = [];
    // All asks are delivered only once every call of the wave has parked.
    for (let i = 0; i < WAVE; i += 1) asks.push((await approver.next())!);
    for (const ask of asks) expect(approver.resolve(ask.id, { type: "approve" })).toBe(true);
    const result = await running;
    approver.close();
    // process.emitWarning delivers on a later tick.
    await new Promise((resolve) => setImmediate(resolve));

    expect(result.records.map((r) => r.verdict)).toEqual(Array.from({ length: WAVE }, () => "ask_allowed"));
    expect(executed).toHaveLength(WAVE);
    expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning")).toEqual([]);
    expect(getEventListeners(caller.signal, "abort")).toHaveLength(0);
  });
});

describe("the signal of a run that nothing can cancel", () => {
  function signalTool(seen: AbortSignal[], leave: () => boolean) {
    return defineTool({
      name: "probe",
      description: "probe",
      input: z.object({}),
      execute: (_input, { signal }) => {
        seen.push(signal);
        if (leave()) signal.addEventListener("abort", () => undefined);
        return "ok";
      },
    });
  }
  const oneCall = () => [{ toolCalls: [{ id: "c1", name: "probe", input: {} }] }, { text: "done" }];

  it("is one never-aborting signal shared by the agent's runs, and the model and tools see the same one", async () => {
    const seen: AbortSignal[] = [];
    const models: AbortSignal[] = [];
    let turn = 0;
    const agent = new Agent({
      model: {
        generate: async ({ signal }) => {
          models.push(signal);
          turn += 1;
          return turn % 2 === 1 ? { toolCalls: [{ id: `c${turn}`, name: "probe", input: {} }] } : { text: "done", toolCalls: [] };
        },
      },
      tools: [signalTool(seen, () => false)],
    });
    await agent.run("one");
    await agent.run("two");
    expect(seen).toHaveLength(2);
    expect(seen[1]).toBe(seen[0]);
    expect(models.every((s) => s === seen[0])).toBe(true);
    expect(seen[0]?.aborted).toBe(false);
    expect(getEventListeners(seen[0]!, "abort")).toHaveLength(0);
  });

  it("is not handed out again once a run ends with a listener left on it, so that listener goes with the runs that hold it", async () => {
    const seen: AbortSignal[] = [];
    let leave = true;
    const tool = signalTool(seen, () => leave);
    const agent = new Agent({ model: new ScriptedModel([...oneCall(), ...oneCall(), ...oneCall()]), tools: [tool] });
    await agent.run("leaves a listener");
    leave = false;
    await agent.run("clean");
    await agent.run("clean again");
    expect(seen[1]).not.toBe(seen[0]);
    expect(getEventListeners(seen[0]!, "abort")).toHaveLength(1);
    expect(seen[2]).toBe(seen[1]);
    expect(seen.every((s) => !s.aborted)).toBe(true);
  });

  it("is not shared with another agent, nor with a run given a signal of its own", async () => {
    const seen: AbortSignal[] = [];
    const tool = signalTool(seen, () => false);
    const first = new Agent({ model: new ScriptedModel([...oneCall(), ...oneCall()]), tools: [tool] });
    const second = new Agent({ model: new ScriptedModel(oneCall()), tools: [tool] });
    await first.run("idle");
    await second.run("idle");
    const caller = new AbortController();
    await first.run("cancellable", { signal: caller.signal });
    expect(seen[1]).not.toBe(seen[0]);
    expect(seen[2]).not.toBe(seen[0]);
    expect(seen[2]).not.toBe(seen[1]);
    expect(seen[0]?.aborted).toBe(false);
  });
});
