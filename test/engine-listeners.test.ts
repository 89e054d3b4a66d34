import { getEventListeners } from "node:events";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel } from "../src/ask/index.js";
import type { PendingAsk } from "../src/ask/index.js";
import { Agent, CancelledError, Gate, LoopManagers, defineTool } from "../src/engine/index.js";
import type { ToolCall } from "../src/engine/index.js";
import { ScriptedModel } from "../src/testing/index.js";
import { gcChildResult } from "./support/child-process.js";
import { deferred } from "./support/engine-fixtures.js";

const WAVE = 32;

/** Settles a model turn a test holds back. */
type Deferred = () => void;

/** The process warnings emitted during each test of the enclosing describe. */
function collectWarnings(): Error[] {
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
  return warnings;
}

describe("a wide wave of parallel calls shares its signals without warnings", () => {
  const warnings = collectWarnings();

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
    const toolCalls: ToolCall[] = Array.from({ length: WAVE }, (_, i) => ({
      id: `c${i}`,
      name: "echo",
      input: { v: `v${i}` },
    }));
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

describe("one AbortController per run", () => {
  const warnings = collectWarnings();
  function signalTool(seen: AbortSignal[]) {
    return defineTool({
      name: "probe",
      description: "probe",
      input: z.object({}),
      execute: (_input, { signal }) => {
        seen.push(signal);
        signal.addEventListener("abort", () => undefined);
        return "ok";
      },
    });
  }

  it("the model, hooks and tools of a run see its one signal; each run has its own; a caller's signal keeps no listener", async () => {
    const seen: AbortSignal[] = [];
    const models: AbortSignal[] = [];
    const hooks: AbortSignal[] = [];
    let turn = 0;
    const agent = new Agent({
      model: {
        generate: async ({ signal }) => {
          models.push(signal);
          turn += 1;
          return turn % 2 === 1
            ? { toolCalls: [{ id: `c${turn}`, name: "probe", input: {} }] }
            : { text: "done", toolCalls: [] };
        },
      },
      tools: [signalTool(seen)],
      managers: new LoopManagers().withHook({
        preToolUse: (_call, { signal }) => (hooks.push(signal), { type: "allow" }),
      }),
    });
    const caller = new AbortController();
    await agent.run("one", { signal: caller.signal });
    await agent.run("two");
    expect(seen).toHaveLength(2);
    expect(seen[1]).not.toBe(seen[0]);
    expect(models).toEqual([seen[0], seen[0], seen[1], seen[1]]);
    expect(hooks).toEqual(seen);
    expect(seen.every((s) => !s.aborted)).toBe(true);
    expect(getEventListeners(caller.signal, "abort")).toHaveLength(0);
  });

  it("a run's one signal takes the listeners of every call of a long run, one call at a time: no MaxListenersExceededWarning", async () => {
    for (const caller of [undefined, new AbortController()]) {
      const seen: AbortSignal[] = [];
      const turns = Array.from({ length: WAVE }, (_, i) => ({
        toolCalls: [{ id: `c${i}`, name: "probe", input: {} }],
      }));
      const agent = new Agent({
        model: new ScriptedModel([...turns, { text: "done" }]),
        tools: [signalTool(seen)],
        managers: new LoopManagers().withBudget({ maxTurns: Infinity }),
      });
      await agent.run("go", caller === undefined ? {} : { signal: caller.signal });
      await new Promise((resolve) => setImmediate(resolve));
      expect(seen).toHaveLength(WAVE);
      expect(new Set(seen).size).toBe(1);
      expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning")).toEqual([]);
    }
  });

  it("a caller's cancel aborts the run's signal, which the tool in flight sees, with the caller's reason", async () => {
    const caller = new AbortController();
    let seen: AbortSignal | undefined;
    const stuck = defineTool({
      name: "stuck",
      description: "",
      input: z.object({}),
      execute: (_input, { signal }) => {
        seen = signal;
        caller.abort(new Error("stop"));
        return new Promise(() => undefined);
      },
    });
    const agent = new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "c1", name: "stuck", input: {} }] }]),
      tools: [stuck],
    });
    await expect(agent.run("go", { signal: caller.signal })).rejects.toMatchObject({ code: "CANCELLED" });
    expect(seen?.aborted).toBe(true);
    expect(seen?.reason).toEqual(new Error("stop"));
  });
});

describe("a wide wave of Gate.call on one caller signal", () => {
  const warnings = collectWarnings();
  const descriptor = { name: "echo", description: "echo", inputSchema: { type: "object" } };
  const asking = (channel: ApprovalChannel): Gate =>
    new Gate(
      new LoopManagers().withHook({ preToolUse: () => ({ type: "ask", prompt: "echo?" }) }).withAskResolver(channel),
    );

  it(`${WAVE} asks parked at once: one listener on the caller's signal, no MaxListenersExceededWarning, none left after`, async () => {
    const [channel, approver] = ApprovalChannel.pair(WAVE);
    const caller = new AbortController();
    const gate = asking(channel);
    const calls = Array.from({ length: WAVE }, (_, i) =>
      gate.call({ tool: descriptor, callId: `c${i}`, input: { i }, signal: caller.signal }, (_input, { signal }) => {
        // Tools may listen to the signal they are given; a wide wave of them must not warn either.
        signal.addEventListener("abort", () => undefined, { once: true });
        return i;
      }),
    );
    const asks: PendingAsk[] = [];
    for (let i = 0; i < WAVE; i += 1) asks.push((await approver.next())!);
    expect(getEventListeners(caller.signal, "abort")).toHaveLength(1);
    for (const ask of asks) expect(approver.resolve(ask.id, { type: "approve" })).toBe(true);
    const outcomes = await Promise.all(calls);
    approver.close();
    await new Promise((resolve) => setImmediate(resolve));

    expect(outcomes.map((o) => o.type)).toEqual(Array.from({ length: WAVE }, () => "ran"));
    expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning")).toEqual([]);
    expect(getEventListeners(caller.signal, "abort")).toHaveLength(0);
  });

  it("the caller's cancel still reaches every parked call, with its reason, and withdraws every ask", async () => {
    const [channel, approver] = ApprovalChannel.pair(WAVE);
    const caller = new AbortController();
    const gate = asking(channel);
    const calls = Array.from({ length: WAVE }, (_, i) =>
      gate.call({ tool: descriptor, callId: `c${i}`, input: { i }, signal: caller.signal }, () => i),
    );
    const asks: PendingAsk[] = [];
    for (let i = 0; i < WAVE; i += 1) asks.push((await approver.next())!);
    const reason = new Error("stop");
    caller.abort(reason);
    const errors = await Promise.all(calls.map((c) => c.catch((e: unknown) => e as CancelledError)));
    approver.close();
    await new Promise((resolve) => setImmediate(resolve));

    for (const error of errors) {
      expect(error).toBeInstanceOf(CancelledError);
      expect((error as CancelledError).cause).toBe(reason);
    }
    expect(asks.map((ask) => approver.resolve(ask.id, { type: "approve" }))).not.toContain(true);
    expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning")).toEqual([]);
  });
});

describe("a very wide wave of Gate.call on one caller signal", () => {
  // Node's EventTarget looks through the listeners already on a signal each time one is added, so a
  // signal that takes one listener per call in flight makes a wave of N calls cost O(N²).
  it("no signal takes a listener per call in flight: 512 calls at once add at most a few to any one signal", async () => {
    const descriptor = { name: "echo", description: "echo", inputSchema: { type: "object" } };
    const gate = new Gate(new LoopManagers());
    const caller = new AbortController();
    const release = deferred<undefined>();
    let most = 0;
    const add = EventTarget.prototype.addEventListener;
    EventTarget.prototype.addEventListener = function (this: EventTarget, ...args: Parameters<typeof add>) {
      add.apply(this, args);
      if (this instanceof AbortSignal) most = Math.max(most, getEventListeners(this, "abort").length);
    };
    let calls: Promise<unknown>[];
    try {
      calls = Array.from({ length: 512 }, (_, i) =>
        gate.call({ tool: descriptor, callId: `c${i}`, input: { i }, signal: caller.signal }, () => release.promise),
      );
    } finally {
      EventTarget.prototype.addEventListener = add;
    }
    release.resolve(undefined);
    const outcomes = await Promise.all(calls);

    expect(outcomes.every((o) => (o as { type: string }).type === "ran")).toBe(true);
    expect(most).toBeLessThanOrEqual(2);
    expect(getEventListeners(caller.signal, "abort")).toHaveLength(0);
  });

  it("the caller's cancel still reaches each of them, in the order they were made", async () => {
    const descriptor = { name: "echo", description: "echo", inputSchema: { type: "object" } };
    const gate = new Gate(new LoopManagers());
    const caller = new AbortController();
    const order: number[] = [];
    const calls = Array.from({ length: 64 }, (_, i) =>
      gate.call(
        { tool: descriptor, callId: `c${i}`, input: { i }, signal: caller.signal },
        (_input, { signal }) =>
          new Promise(() => signal.addEventListener("abort", () => order.push(i), { once: true })),
      ),
    );
    await new Promise((resolve) => setImmediate(resolve));
    caller.abort(new Error("stop"));
    const settled = await Promise.allSettled(calls);

    expect(settled.every((s) => s.status === "rejected" && s.reason instanceof CancelledError)).toBe(true);
    expect(order).toEqual(Array.from({ length: 64 }, (_, i) => i));
    expect(getEventListeners(caller.signal, "abort")).toHaveLength(0);
  });
});
describe("many runs on one caller signal", () => {
  const warnings = collectWarnings();

  it(`${WAVE} runs of one agent on one shutdown signal: one listener on it, no MaxListenersExceededWarning, none left after; its cancel stops them all`, async () => {
    for (const cancel of [false, true]) {
      const shutdown = new AbortController();
      const answers: Deferred[] = [];
      const model = {
        generate: () =>
          new Promise<{ text: string; toolCalls: [] }>((resolve) => {
            answers.push(() => resolve({ text: "ok", toolCalls: [] }));
          }),
      };
      const agent = new Agent({ model, tools: [] });
      const runs = Array.from({ length: WAVE }, () =>
        agent.run("go", { signal: shutdown.signal }).catch((e: unknown) => e),
      );
      while (answers.length < WAVE) await new Promise((resolve) => setImmediate(resolve));
      expect(getEventListeners(shutdown.signal, "abort")).toHaveLength(1);
      const reason = new Error("shutting down");
      if (cancel) shutdown.abort(reason);
      else for (const answer of answers) answer();
      const ended = await Promise.all(runs);
      await new Promise((resolve) => setImmediate(resolve));

      for (const end of ended) {
        if (cancel) {
          expect(end).toBeInstanceOf(CancelledError);
          expect((end as CancelledError).cause).toBe(reason);
        } else expect(end).toMatchObject({ text: "ok" });
      }
      expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning")).toEqual([]);
      expect(getEventListeners(shutdown.signal, "abort")).toHaveLength(0);
    }
  });
});

describe("a long-lived caller signal", () => {
  it("keeps nothing of a finished call while other calls on it are in flight: the calls' outputs are collected", async () => {
    expect(await gcChildResult("test/support/gate-gc-child.ts")).toEqual({ calls: 2_000, reachable: 0 });
  });

  it("keeps nothing of a finished call whose tool listened to its signal and never stopped: each call has a signal of its own", async () => {
    expect(await gcChildResult("test/support/gate-gc-child.ts", ["listening"])).toEqual({
      calls: 2_000,
      reachable: 0,
    });
  });
});

describe("many distinct tools", () => {
  it("a gate keeps none of the input schemas it compiled for descriptors no one holds any more, beyond its validator's last few", async () => {
    const { tools, reachable } = (await gcChildResult("test/support/schema-gc-child.ts", [], 60_000)) as {
      tools: number;
      reachable: number;
    };
    expect(tools).toBe(1_000);
    // A shared validator compiles 128 schemas before a fresh one replaces it: those of the current one may stay.
    expect(reachable).toBeLessThanOrEqual(128);
  }, 90_000);
});

describe("a circuit breaker on a gate whose tools keep changing", () => {
  it("keeps the failures of its 1024 most recently failed tools, not of every tool that ever failed last", async () => {
    const { tools, names } = (await gcChildResult("test/support/breaker-gc-child.ts", [], 60_000)) as {
      tools: number;
      names: number;
    };
    expect(tools).toBe(5_000);
    expect(names).toBeLessThanOrEqual(1024);
  }, 90_000);
});
