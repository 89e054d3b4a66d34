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
