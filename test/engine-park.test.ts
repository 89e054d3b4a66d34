import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel, PendingAskSchema, SyncAskResolver } from "../src/ask/index.js";
import type { AskResolver, PendingAsk } from "../src/ask/index.js";
import { MemoryGrantStore, argsDigest } from "../src/grant/index.js";
import {
  CancelledError,
  Gate,
  LoopDetectedError,
  LoopManagers,
  defineTool,
  permissionMiddleware,
  seededIdGen,
} from "../src/engine/index.js";
import type { RunStoppedError } from "../src/engine/index.js";
import { ManualClock } from "../src/testing/index.js";
import {
  askAll,
  askingCall,
  build,
  call,
  deferred,
  eventLog,
  flush,
  readTool,
  script,
  shape,
  until,
} from "./support/engine-fixtures.js";
import { ManualResolver, channelVariant, grantStoreVariant, syncVariant } from "./support/engine-resolvers.js";
import type { ResolverVariant } from "./support/engine-resolvers.js";

const A = { path: "a.rs" };
const B = { path: "b.rs" };

const variants: ResolverVariant[] = [syncVariant, channelVariant, grantStoreVariant(() => new MemoryGrantStore())];

describe.each(variants)("the park, answered through $name", (variant) => {
  it("approved: the tool runs, the model gets its result, one ask_allowed record lands after dispatch", async () => {
    const { log, observer } = eventLog();
    const gatesSeenByTool: string[][] = [];
    const executed: unknown[] = [];
    const tool = defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }),
      execute: async ({ path }) => {
        gatesSeenByTool.push(log.filter((e) => e.startsWith("gate")));
        await Promise.resolve();
        executed.push({ path });
        return `contents of ${path}`;
      },
    });
    const wired = variant.wire(new LoopManagers().withHook(askAll("Read a.rs?")).withObserver(observer), () => ({
      type: "approve",
    }));
    const { agent, model } = build({ turns: script(call("c1", "read", A)), tools: [tool], managers: wired.managers });
    const result = await agent.run("go");
    await wired.close();

    expect(executed).toEqual([A]);
    expect(gatesSeenByTool).toEqual([[]]);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "ask_allowed",
        ruleId: "ask",
        ruleSource: "ask_resolver",
        matchedPattern: null,
        reason: null,
      },
    ]);
    expect(model.requests[1]?.messages.at(-1)).toEqual({
      type: "tool_result",
      callId: "c1",
      tool: "read",
      content: "contents of a.rs",
      status: "ran",
      isError: false,
    });
    expect(log).toEqual([
      "model-request:0",
      "model-response:0",
      "pre:c1",
      "gate:c1:ask_allowed",
      "post:c1:ok",
      "model-request:1",
      "model-response:1",
    ]);
    const [ask] = wired.asks;
    expect(PendingAskSchema.parse(ask)).toEqual(ask);
    expect(ask).toMatchObject({
      sessionId: result.sessionId,
      runId: result.runId,
      turn: 0,
      callId: "c1",
      tool: "read",
      argsDigest: argsDigest(A),
      prompt: "Read a.rs?",
    });
    expect(JSON.stringify(ask)).not.toContain('a.rs"');
  });

  it("refused: the tool never runs; ask_denied with the exact texts", async () => {
    const executed: unknown[] = [];
    const wired = variant.wire(new LoopManagers().withHook(askAll()), () => ({ type: "deny" }));
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: wired.managers,
    });
    const result = await agent.run("go");
    await wired.close();

    expect(executed).toEqual([]);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "ask_denied",
        ruleId: "ask",
        ruleSource: "ask_resolver",
        matchedPattern: null,
        reason: "denied by approver",
      },
    ]);
    expect(model.requests[1]?.messages.at(-1)).toEqual({
      type: "tool_result",
      callId: "c1",
      tool: "read",
      content: "Permission denied by approver for tool 'read'",
      status: "refused",
      isError: true,
    });
  });

  it("a refusal's own reason is kept in the record; the model's text stays the contract's", async () => {
    const wired = variant.wire(new LoopManagers().withHook(askAll()), () => ({ type: "deny", reason: "not today" }));
    const { agent, model } = build({ turns: script(call("c1", "read", A)), managers: wired.managers });
    const result = await agent.run("go");
    await wired.close();
    expect(result.records[0]?.reason).toBe("denied by approver: not today");
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Permission denied by approver for tool 'read'",
    });
  });

  it("approval is bound to the call: approving a.rs never covers b.rs, which parks with its own digest", async () => {
    const executed: unknown[] = [];
    const wired = variant.wire(new LoopManagers().withHook(askAll()), (ask) =>
      ask.argsDigest === argsDigest(A) ? { type: "approve" } : { type: "deny" },
    );
    const { agent } = build({
      turns: [{ toolCalls: [call("c1", "read", A)] }, { toolCalls: [call("c2", "read", B)] }, { text: "done" }],
      tools: [readTool(executed)],
      managers: wired.managers,
    });
    const result = await agent.run("go");
    await wired.close();
    expect(wired.asks.map((a) => [a.callId, a.turn, a.argsDigest])).toEqual([
      ["c1", 0, argsDigest(A)],
      ["c2", 1, argsDigest(B)],
    ]);
    expect(executed).toEqual([A]);
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_denied"]);
  });

  it("a retried call runs the hooks again and parks again", async () => {
    let hookCalls = 0;
    const hook = { preToolUse: () => ((hookCalls += 1), { type: "ask" as const, prompt: "again?" }) };
    const wired = variant.wire(new LoopManagers().withHook(hook), () => ({ type: "approve" }));
    const { agent } = build({
      turns: [{ toolCalls: [call("c1", "read", A)] }, { toolCalls: [call("c2", "read", A)] }, { text: "done" }],
      managers: wired.managers,
    });
    const result = await agent.run("go");
    await wired.close();
    expect(hookCalls).toBe(2);
    expect(wired.asks.map((a) => a.callId)).toEqual(["c1", "c2"]);
    expect(new Set(wired.asks.map((a) => a.id)).size).toBe(2);
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed"]);
  });

  it("displacement: a permission middleware deny of an approved call is the one record that lands", async () => {
    const executed: unknown[] = [];
    const { log, observer } = eventLog();
    const base = new LoopManagers()
      .withHook(askAll())
      .withObserver(observer)
      .withMiddleware(
        permissionMiddleware({
          rules: [{ id: "no-rs", tool: "read", args: { path: "*.rs" }, action: "deny" }],
          defaultAction: "allow",
        }),
      );
    const wired = variant.wire(base, () => ({ type: "approve" }));
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: wired.managers,
    });
    const result = await agent.run("go");
    await wired.close();
    expect(wired.asks).toHaveLength(1);
    expect(executed).toEqual([]);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "deny",
        ruleId: "no-rs",
        ruleSource: "middleware",
        matchedPattern: 'read {"path":"*.rs"}',
        reason: "denied by rule 'no-rs'",
      },
    ]);
    expect(log.filter((e) => e.startsWith("gate"))).toEqual(["gate:c1:deny"]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Permission denied by rule 'no-rs' for tool 'read'",
      isError: true,
    });
  });

  it("a middleware allow keeps the approval record", async () => {
    const base = new LoopManagers()
      .withHook(askAll())
      .withMiddleware(permissionMiddleware({ rules: [{ id: "reads", tool: "read", action: "allow" }] }));
    const wired = variant.wire(base, () => ({ type: "approve" }));
    const { agent } = build({ turns: script(call("c1", "read", A)), managers: wired.managers });
    const result = await agent.run("go");
    await wired.close();
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([["ask_allowed", "ask"]]);
  });

  it("early exit: a pre-detection stop after approval lands ask_allowed and ends the run with LoopDetectedError", async () => {
    const executed: unknown[] = [];
    const base = new LoopManagers().withHook(askAll()).withLoopDetection({ maxRepeats: 1 });
    const wired = variant.wire(base, () => ({ type: "approve" }));
    const { agent } = build({
      turns: [{ toolCalls: [call("c1", "read", A)] }, { toolCalls: [call("c2", "read", A)] }, { text: "never" }],
      tools: [readTool(executed)],
      managers: wired.managers,
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as LoopDetectedError;
    await wired.close();
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(error.code).toBe("LOOP_DETECTED");
    expect(executed).toEqual([A]);
    expect(error.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed"]);
    expect(error.messages.at(-1)).toEqual({
      type: "tool_result",
      callId: "c2",
      tool: "read",
      content: `dispatch refused before execution: ${error.message}`,
      status: "refused",
      isError: true,
    });
  });

  it("early exit: a breaker refusal after approval lands ask_allowed; the model gets the breaker text", async () => {
    const clock = new ManualClock(1_000);
    const flaky = defineTool({
      name: "flaky",
      description: "always fails",
      input: z.object({}),
      execute: () => {
        throw new Error("disk on fire");
      },
    });
    const base = new LoopManagers()
      .withClock(clock)
      .withHook(askAll())
      .withCircuitBreaker({ failureThreshold: 1, cooldownMs: 60_000 });
    const wired = variant.wire(base, () => ({ type: "approve" }));
    const { agent, model } = build({
      turns: [{ toolCalls: [call("c1", "flaky", {})] }, { toolCalls: [call("c2", "flaky", {})] }, { text: "done" }],
      tools: [flaky],
      managers: wired.managers,
    });
    const result = await agent.run("go");
    await wired.close();
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed"]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Tool 'flaky' failed: disk on fire",
      isError: true,
    });
    expect(model.requests[2]?.messages.at(-1)).toMatchObject({
      content: "tool temporarily unavailable: circuit breaker open",
      isError: true,
    });
  });
});

describe("no resolver", () => {
  it("no resolver and no deadline: the model receives the prompt verbatim; one ask_unresolved record", async () => {
    const executed: unknown[] = [];
    const prompt = "Deploy 1.4.0 to prod?\n  (irreversible)";
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(askAll(prompt)),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(model.requests[1]?.messages.at(-1)).toEqual({
      type: "tool_result",
      callId: "c1",
      tool: "read",
      content: prompt,
      status: "refused",
      isError: true,
    });
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "ask_unresolved",
        ruleId: "hook",
        ruleSource: "engine",
        matchedPattern: null,
        reason: `permission required: ${prompt}`,
      },
    ]);
  });

  it("no resolver with a deadline is still the headless denial, at once", async () => {
    const clock = new ManualClock();
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(askAll("ok?")).withClock(clock).withAskTimeout(1_000),
    });
    const result = await agent.run("go");
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_unresolved"]);
    expect(clock.pendingTimers).toBe(0);
  });
});

describe("deadlines", () => {
  const zeroClock = new ManualClock();
  it("expiry: the engine denies with ask_expired, aborts the resolver's signal, and clears its timer", async () => {
    const clock = new ManualClock(5_000);
    const resolver = new ManualResolver();
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver).withClock(clock).withAskTimeout(30_000),
    });
    const running = agent.run("go");
    await until(() => resolver.parked.length === 1);
    await clock.advance(29_999);
    await until(() => true);
    expect(resolver.parked[0]?.signal.aborted).toBe(false);
    await clock.advance(1);
    const result = await running;
    expect(executed).toEqual([]);
    expect(resolver.parked[0]?.signal.aborted).toBe(true);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "ask_expired",
        ruleId: "hook",
        ruleSource: "engine",
        matchedPattern: null,
        reason: "ask expired unanswered",
      },
    ]);
    expect(result.records[0]?.ts).toBe(35_000);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Permission ask expired unanswered for tool 'read'",
      isError: true,
    });
    expect(clock.pendingTimers).toBe(0);
  });

  it("expiry through an ApprovalChannel: a late answer is refused (resolve returns false)", async () => {
    const clock = new ManualClock();
    const [channel, approver] = ApprovalChannel.pair(1);
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(askAll()).withAskResolver(channel).withClock(clock).withAskTimeout(100),
    });
    const running = agent.run("go");
    const ask = await approver.next();
    await clock.advance(100);
    const result = await running;
    expect(approver.resolve(ask!.id, { type: "approve" })).toBe(false);
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_expired"]);
    approver.close();
  });

  it("an answer given the moment the deadline fires is refused (false): the ask ended expired", async () => {
    const manual = new ManualClock();
    const [channel, approver] = ApprovalChannel.pair(1);
    let askId = "";
    const told: boolean[] = [];
    // The answer arrives right after the deadline's timer ran, before the engine's wait has gone on.
    const clock = {
      now: () => manual.now(),
      setTimeout: (callback: () => void, ms: number) =>
        manual.setTimeout(() => {
          callback();
          told.push(approver.resolve(askId, { type: "approve" }));
        }, ms),
      clearTimeout: (handle: unknown) => manual.clearTimeout(handle),
    };
    const executed: unknown[] = [];
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(channel).withClock(clock).withAskTimeout(100),
    });
    const running = agent.run("go");
    askId = (await approver.next())!.id;
    await manual.advance(100);
    const result = await running;
    expect(told).toEqual([false]);
    expect(executed).toEqual([]);
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_expired"]);
    expect(await approver.ended(askId)).toEqual({ type: "withdrawn", reason: "unknown" });
    approver.close();
  });

  it("an answer given the moment a cancel fires is refused (false) when a deadline is set", async () => {
    const clock = new ManualClock();
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(askAll()).withAskResolver(channel).withClock(clock).withAskTimeout(100),
    });
    const running = agent.run("go", { signal: controller.signal }).catch((e: unknown) => e);
    const ask = await approver.next();
    controller.abort(new Error("stop"));
    expect(approver.resolve(ask!.id, { type: "approve" })).toBe(false);
    const error = (await running) as RunStoppedError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.records.map((r) => r.verdict)).toEqual(["cancelled"]);
    expect(clock.pendingTimers).toBe(0);
    approver.close();
  });

  it("an approval that arrives before the deadline wins and clears the timer", async () => {
    const clock = new ManualClock();
    const resolver = new ManualResolver();
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver).withClock(clock).withAskTimeout(100),
    });
    const running = agent.run("go");
    await until(() => resolver.parked.length === 1);
    await clock.advance(99);
    resolver.parked[0]?.answer({ type: "approve" });
    const result = await running;
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    // The park ended with the answer, not the deadline: the signal says so.
    const signal = resolver.parked[0]?.signal;
    expect(signal?.aborted).toBe(true);
    expect((signal?.reason as Error).message).toBe(`ask ${resolver.parked[0]?.ask.id} was approved`);
    expect(clock.pendingTimers).toBe(0);
  });

  it.each([
    ["system timers", (m: LoopManagers) => m, () => undefined],
    ["a ManualClock advanced at once", (m: LoopManagers) => m.withClock(zeroClock), () => void zeroClock.advance(0)],
  ])("deadline 0: an answer already available wins (%s)", async (_label, withTimers, tick) => {
    const executed: unknown[] = [];
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: withTimers(
        new LoopManagers()
          .withHook(askAll())
          .withAskResolver(new SyncAskResolver(() => true))
          .withAskTimeout(0),
      ),
    });
    const running = agent.run("go");
    tick();
    const result = await running;
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(executed).toEqual([A]);
  });

  it("deadline 0: a resolver with no answer ready expires", async () => {
    const clock = new ManualClock();
    const resolver = new ManualResolver();
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver).withClock(clock).withAskTimeout(0),
    });
    const running = agent.run("go");
    await until(() => resolver.parked.length === 1);
    await clock.advance(0);
    const result = await running;
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_expired"]);
    expect(resolver.parked[0]?.signal.aborted).toBe(true);
  });

  it("deadline 0 with an ApprovalChannel: the ask is withdrawn and never stays queued", async () => {
    const clock = new ManualClock();
    const [channel, approver] = ApprovalChannel.pair(1);
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(askAll()).withAskResolver(channel).withClock(clock).withAskTimeout(0),
    });
    const running = agent.run("go");
    await until(() => clock.pendingTimers === 1);
    await clock.advance(0);
    const result = await running;
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_expired"]);
    expect(channel.size).toBe(0);
    approver.close();
  });
});

describe("a clock whose timers fail", () => {
  const descriptor = { name: "read", description: "Read a file", inputSchema: { type: "object" } };
  const failing = (clock: ManualClock, failure: "set" | "clear") => ({
    now: () => clock.now(),
    setTimeout: (callback: () => void, ms: number) => {
      if (failure === "set") throw new Error("no timers");
      return clock.setTimeout(callback, ms);
    },
    clearTimeout: (handle: unknown) => {
      if (failure === "clear") throw new Error("no clearing");
      clock.clearTimeout(handle);
    },
  });
  /** A gate that asks about every call, with a 100 ms deadline on a clock whose `failure` throws. */
  const gateOn = (failure: "set" | "clear") => {
    const clock = new ManualClock();
    const [channel, approver] = ApprovalChannel.pair(1);
    const gate = new Gate(
      new LoopManagers()
        .withHook(askAll())
        .withAskResolver(channel)
        .withAskTimeout(100)
        .withClock(failing(clock, failure)),
    );
    return { clock, channel, approver, gate };
  };

  it("a deadline that cannot be armed refuses the call before the ask reaches anyone", async () => {
    const { channel, approver, gate } = gateOn("set");
    const outcome = await gate.call({ tool: descriptor, callId: "c1", input: A }, () => "ran");
    expect(outcome.type).toBe("refused");
    expect(shape(outcome.record)).toMatchObject({ verdict: "deny", reason: "engine failure: no timers" });
    expect(channel.size).toBe(0);
    expect(approver.buffered).toBe(0);
    approver.close();
  });

  it("a timer that cannot be cleared changes no ending: expiry still withdraws the ask", async () => {
    const { clock, channel, approver, gate } = gateOn("clear");
    const running = gate.call({ tool: descriptor, callId: "c1", input: A }, () => "ran");
    const ask = await approver.next();
    await clock.advance(100);
    const outcome = await running;
    expect(outcome.record.verdict).toBe("ask_expired");
    expect(approver.resolve(ask!.id, { type: "approve" })).toBe(false);
    expect(channel.size).toBe(0);
    approver.close();
  });

  it("a timer that cannot be cleared changes no ending: an approval runs the tool", async () => {
    const { approver, gate } = gateOn("clear");
    const running = gate.call({ tool: descriptor, callId: "c1", input: A }, () => "ran");
    const ask = await approver.next();
    expect(approver.resolve(ask!.id, { type: "approve" })).toBe(true);
    const outcome = await running;
    expect(outcome).toMatchObject({ type: "ran", output: "ran", record: { verdict: "ask_allowed" } });
    approver.close();
  });

  it("a timer that cannot be cleared changes no ending: a cancel still rejects with CancelledError", async () => {
    const controller = new AbortController();
    const { channel, approver, gate } = gateOn("clear");
    const running = gate.call({ tool: descriptor, callId: "c1", input: A, signal: controller.signal }, () => "ran");
    await approver.next();
    controller.abort(new Error("stop"));
    const error = (await running.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.records.map((r) => [r.verdict, r.reason])).toEqual([
      ["cancelled", "cancelled while awaiting approval"],
    ]);
    expect(channel.size).toBe(0);
    approver.close();
  });
});

describe("cancel", () => {
  it("an answer the approver was told reached the wait (true) is the call's, even when a cancel follows in the same breath: ask_allowed lands, the tool does not run", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const { calling, caller, records, executed } = askingCall(channel, "echo");
    const ask = (await approver.next())!;
    expect(approver.resolve(ask.id, { type: "approve" })).toBe(true);
    caller.abort();
    const error = (await calling.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(executed()).toBe(0);
    expect(records.map((r) => [r.verdict, r.ruleId, r.ruleSource])).toEqual([["ask_allowed", "ask", "ask_resolver"]]);
    expect(error.records).toEqual(records);
  });
  it("cancel during the park: CancelledError, one cancelled record, no onToolPost, resolver signal aborted", async () => {
    const executed: unknown[] = [];
    const { log, observer } = eventLog();
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const clock = new ManualClock();
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers()
        .withHook(askAll())
        .withAskResolver(channel)
        .withObserver(observer)
        .withClock(clock)
        .withAskTimeout(60_000),
    });
    const running = agent.run("go", { signal: controller.signal });
    const ask = await approver.next();
    controller.abort(new Error("user pressed ctrl-c"));
    const error = (await running.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.name).toBe("CancelledError");
    expect(error.code).toBe("CANCELLED");
    expect((error.cause as Error).message).toBe("user pressed ctrl-c");
    expect(error.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "cancelled",
        ruleId: "hook",
        ruleSource: "engine",
        matchedPattern: null,
        reason: "cancelled while awaiting approval",
      },
    ]);
    expect(log).toEqual(["model-request:0", "model-response:0", "pre:c1", "gate:c1:cancelled"]);
    expect(executed).toEqual([]);
    expect(approver.resolve(ask!.id, { type: "approve" })).toBe(false);
    expect(clock.pendingTimers).toBe(0);
    approver.close();
  });

  it("a cancel before the park wins: the resolver is never called and a channel ask is never delivered", async () => {
    const controller = new AbortController();
    const [channel, approver] = ApprovalChannel.pair(1);
    let resolverCalls = 0;
    const spy: AskResolver = {
      resolve: (ask, options) => ((resolverCalls += 1), channel.resolve(ask, options)),
    };
    const hook = {
      preToolUse: () => {
        controller.abort();
        return { type: "ask" as const, prompt: "late" };
      },
    };
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(hook).withAskResolver(spy),
    });
    const error = (await agent.run("go", { signal: controller.signal }).catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    // The cancel fired while the hook was deciding: the attempt ends at that step, before any park.
    expect(error.records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["cancelled", "cancel", "cancelled before the gate decided"],
    ]);
    expect(resolverCalls).toBe(0);
    expect(approver.buffered + approver.inLine).toBe(0);
    const stop = new AbortController();
    stop.abort();
    await expect(approver.next({ signal: stop.signal })).rejects.toBeDefined();
    approver.close();
  });

  it("a signal aborted before the run rejects at once without asking the model", async () => {
    const controller = new AbortController();
    controller.abort();
    const { agent, model } = build({ turns: script(call("c1", "read", A)) });
    await expect(agent.run("go", { signal: controller.signal })).rejects.toBeInstanceOf(CancelledError);
    expect(model.requests).toHaveLength(0);
  });

  it("cancel mid-execution after approval: ask_allowed lands at that exit; no onToolPost", async () => {
    const controller = new AbortController();
    const started = deferred<void>();
    const never = deferred<string>();
    let toolSignal: AbortSignal | undefined;
    const slow = defineTool({
      name: "slow",
      description: "waits",
      input: z.object({}),
      execute: (_input, ctx) => {
        toolSignal = ctx.signal;
        started.resolve();
        return never.promise;
      },
    });
    const { log, observer } = eventLog();
    const { agent } = build({
      turns: script(call("c1", "slow", {})),
      tools: [slow],
      managers: new LoopManagers()
        .withHook(askAll())
        .withAskResolver(new SyncAskResolver(() => true))
        .withObserver(observer),
    });
    const running = agent.run("go", { signal: controller.signal });
    await started.promise;
    controller.abort();
    const error = (await running.catch((e: unknown) => e)) as RunStoppedError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(toolSignal?.aborted).toBe(true);
    expect(error.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(log.slice(2)).toEqual(["pre:c1", "gate:c1:ask_allowed"]);
  });
});

describe("resolver failures deny", () => {
  const cases: [string, AskResolver, string][] = [
    [
      "throws synchronously",
      {
        resolve: () => {
          throw new Error("boom");
        },
      },
      "ask resolver failed: boom",
    ],
    ["rejects", { resolve: () => Promise.reject(new Error("down")) }, "ask resolver failed: down"],
    [
      "answers garbage",
      { resolve: () => Promise.resolve({ type: "yes" } as never) },
      "ask resolver returned an invalid resolution",
    ],
    [
      "answers undefined",
      { resolve: () => Promise.resolve(undefined as never) },
      "ask resolver returned an invalid resolution",
    ],
    [
      "answers approve with an unknown remember",
      { resolve: () => Promise.resolve({ type: "approve", remember: "forever" } as never) },
      "ask resolver returned an invalid resolution",
    ],
  ];
  it.each(cases)("a resolver that %s denies the call (ask_denied)", async (_label, resolver, reason) => {
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
      ["ask_denied", "ask", "ask_resolver", reason],
    ]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Permission denied by approver for tool 'read'",
      isError: true,
    });
  });

  it("a SyncAskResolver whose callback throws denies", async () => {
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(askAll()).withAskResolver(
        new SyncAskResolver(() => {
          throw new Error("policy bug");
        }),
      ),
    });
    const result = await agent.run("go");
    expect(result.records[0]?.verdict).toBe("ask_denied");
    expect(result.records[0]?.reason).toMatch(/^ask resolver failed: /);
  });
});

describe("the park withdraws what its resolver left waiting", () => {
  const descriptor = { name: "write", description: "Write a file", inputSchema: { type: "object" } };
  const failures = {
    throws: () => {
      throw new Error("wrapper bug");
    },
    rejects: () => Promise.reject(new Error("wrapper bug")),
    "answers garbage": () => Promise.resolve({ type: "maybe" } as never),
  };
  it.each(
    Object.keys(failures).flatMap((how) => [
      [how, "no deadline", undefined],
      [how, "a deadline", 60_000],
    ]) as [keyof typeof failures, string, number | undefined][],
  )(
    "a resolver that %s after parking its ask on a channel (%s): the ask is withdrawn, a late answer is false",
    async (how, _label, deadline) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      const seen: { ask: PendingAsk; signal: AbortSignal }[] = [];
      const wrapper: AskResolver = {
        resolve: (ask, options) => {
          seen.push({ ask, signal: options.signal });
          void channel.resolve(ask, options).catch(() => undefined);
          return failures[how]();
        },
      };
      const clock = new ManualClock();
      let managers = new LoopManagers().withHook(askAll()).withAskResolver(wrapper).withClock(clock);
      if (deadline !== undefined) managers = managers.withAskTimeout(deadline);
      const executed: unknown[] = [];
      const outcome = await new Gate(managers).call({ tool: descriptor, callId: "c1", input: A }, (input) =>
        executed.push(input),
      );
      expect(outcome.record.verdict).toBe("ask_denied");
      expect(seen[0]?.signal.aborted).toBe(true);
      expect(channel.size).toBe(0);
      expect(approver.resolve(seen[0]!.ask.id, { type: "approve" })).toBe(false);
      expect(await approver.ended(seen[0]!.ask.id)).toEqual({ type: "withdrawn", reason: "unknown" });
      expect(executed).toEqual([]);
      expect(clock.pendingTimers).toBe(0);
      approver.close();
    },
  );

  it("a resolver that asks two channels and takes the first answer: the other channel's ask is withdrawn", async () => {
    const [first, firstApprover] = ApprovalChannel.pair(1);
    const [second, secondApprover] = ApprovalChannel.pair(1);
    const both: AskResolver = {
      resolve: (ask, options) => Promise.race([first.resolve(ask, options), second.resolve(ask, options)]),
    };
    const gate = new Gate(new LoopManagers().withHook(askAll()).withAskResolver(both));
    const running = gate.call({ tool: descriptor, callId: "c1", input: A }, () => "ran");
    const ask = await firstApprover.next();
    expect(firstApprover.resolve(ask!.id, { type: "deny", reason: "no" })).toBe(true);
    const outcome = await running;
    expect(outcome.record.verdict).toBe("ask_denied");
    expect(second.size).toBe(0);
    expect(secondApprover.resolve(ask!.id, { type: "approve" })).toBe(false);
    firstApprover.close();
    secondApprover.close();
  });

  it("a resolver that needs both of two channels to approve: one approval alone never runs the call", async () => {
    const [first, firstApprover] = ApprovalChannel.pair(1);
    const [second, secondApprover] = ApprovalChannel.pair(1);
    const both: AskResolver = {
      resolve: async (ask, options) => {
        const answers = await Promise.all([first.resolve(ask, options), second.resolve(ask, options)]);
        return answers.every((answer) => answer.type === "approve")
          ? { type: "approve" }
          : { type: "deny", reason: "both must approve" };
      },
    };
    const executed: unknown[] = [];
    const gate = new Gate(new LoopManagers().withHook(askAll()).withAskResolver(both));
    const running = gate.call({ tool: descriptor, callId: "c1", input: A }, (input) => executed.push(input));
    const ask = (await firstApprover.next())!;
    expect(firstApprover.resolve(ask.id, { type: "approve" })).toBe(true);
    await flush();
    expect(executed).toEqual([]);
    expect(second.size).toBe(1);
    expect(secondApprover.resolve(ask.id, { type: "deny", reason: "no" })).toBe(true);
    const outcome = await running;
    expect(outcome.record.verdict).toBe("ask_denied");
    expect(outcome.record.reason).toBe("denied by approver: both must approve");
    expect(executed).toEqual([]);
    firstApprover.close();
    secondApprover.close();
  });

  it("a resolver that turns its channel's approval into a denial is the one whose answer counts", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const vetoing: AskResolver = {
      resolve: async (ask, options) => {
        const answer = await channel.resolve(ask, options);
        return answer.type === "approve" && ask.tool === "write"
          ? { type: "deny", reason: "writes are frozen" }
          : answer;
      },
    };
    const executed: unknown[] = [];
    const gate = new Gate(new LoopManagers().withHook(askAll()).withAskResolver(vetoing));
    const running = gate.call({ tool: descriptor, callId: "c1", input: A }, (input) => executed.push(input));
    const ask = (await approver.next())!;
    expect(approver.resolve(ask.id, { type: "approve" })).toBe(true);
    const outcome = await running;
    expect(outcome.record.verdict).toBe("ask_denied");
    expect(outcome.record.reason).toBe("denied by approver: writes are frozen");
    expect(executed).toEqual([]);
    approver.close();
  });
});

describe("the resolver's signal, read late", () => {
  const descriptor = { name: "write", description: "Write a file", inputSchema: { type: "object" } };
  type Ending = "approved" | "refused" | "failed" | "expired" | "cancelled";
  const stopped = new Error("stop");
  /** Parks one call whose resolver reads nothing until the park has ended, then hands back its options. */
  async function parkEnded(ending: Ending): Promise<{ ask: PendingAsk; options: { signal: AbortSignal } }> {
    let held: { ask: PendingAsk; options: { signal: AbortSignal } } | undefined;
    const never = new Promise<never>(() => undefined);
    const resolver: AskResolver = {
      resolve: (ask, options) => {
        held = { ask, options };
        if (ending === "approved") return Promise.resolve({ type: "approve" });
        if (ending === "refused") return Promise.resolve({ type: "deny" });
        if (ending === "failed") return Promise.reject(new Error("down"));
        return never;
      },
    };
    const clock = new ManualClock();
    const managers = new LoopManagers()
      .withHook(askAll())
      .withAskResolver(resolver)
      .withClock(clock)
      .withAskTimeout(100);
    const controller = new AbortController();
    const running = new Gate(managers)
      .call({ tool: descriptor, callId: "c1", input: A, signal: controller.signal }, () => "ran")
      .catch((e: unknown) => e);
    await until(() => held !== undefined);
    if (ending === "expired") await clock.advance(100);
    if (ending === "cancelled") controller.abort(stopped);
    await running;
    return held!;
  }

  it.each([
    ["approved", "was approved"],
    ["refused", "was refused"],
    ["failed", "was refused: its resolver failed"],
    ["expired", "expired"],
  ] as const)(
    "%s: the signal comes back already aborted, its reason naming the ask and the ending",
    async (ending, why) => {
      const { ask, options } = await parkEnded(ending);
      const signal = options.signal;
      expect(signal).toBeInstanceOf(AbortSignal);
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(Error);
      expect((signal.reason as Error).message).toBe(`ask ${ask.id} ${why}`);
      expect(options.signal).toBe(signal);
    },
  );

  it("cancelled: the signal comes back already aborted with the cancel's reason", async () => {
    const { options } = await parkEnded("cancelled");
    expect(options.signal.aborted).toBe(true);
    expect(options.signal.reason).toBe(stopped);
  });

  it("a copy of the options made during the park carries a signal that aborts when the park ends", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const copies: { signal: AbortSignal }[] = [];
    const wrapper: AskResolver = {
      resolve: (ask, options) => {
        const copy = { ...options };
        copies.push(copy);
        expect(copy.signal.aborted).toBe(false);
        return channel.resolve(ask, copy);
      },
    };
    const managers = new LoopManagers().withHook(askAll()).withAskResolver(wrapper);
    const running = new Gate(managers).call({ tool: descriptor, callId: "c1", input: A }, () => "ran");
    const ask = await approver.next();
    expect(approver.resolve(ask!.id, { type: "approve" })).toBe(true);
    expect((await running).record.verdict).toBe("ask_allowed");
    expect(copies[0]?.signal.aborted).toBe(true);
    expect((copies[0]?.signal.reason as Error).message).toBe(`ask ${ask!.id} was approved`);
    approver.close();
  });
});

describe("ids", () => {
  it("two gates whose id generators share a seed share a channel: a stale answer never runs the other's call", async () => {
    const clock = new ManualClock();
    const [channel, approver] = ApprovalChannel.pair(4);
    const descriptor = { name: "write", description: "Write a file", inputSchema: { type: "object" } };
    const gateWith = () =>
      new Gate(
        new LoopManagers()
          .withHook(askAll())
          .withAskResolver(channel)
          .withAskTimeout(100)
          .withClock(clock)
          .withIdGen(seededIdGen("fixture")),
      );
    const first = gateWith().call({ tool: descriptor, callId: "c1", input: A }, () => "ran");
    const shown = await approver.next();
    await clock.advance(100);
    expect((await first).record.verdict).toBe("ask_expired");
    const executed: unknown[] = [];
    const second = gateWith().call({ tool: descriptor, callId: "c1", input: { path: "/etc/passwd" } }, (input) =>
      executed.push(input),
    );
    // The person answers the ask they were shown, which has ended, once the second call has asked.
    await flush();
    expect(approver.resolve(shown!.id, { type: "approve" })).toBe(false);
    const outcome = await second;
    expect(executed).toEqual([]);
    expect(outcome.record.verdict).toBe("ask_denied");
    expect(outcome.record.reason).toBe(
      `ask resolver failed: ask ${shown!.id} already ended on this approval channel; ask ids must not be reused`,
    );
    approver.close();
  });

  it("a seeded id generator makes runs reproducible: same session, run and ask ids", async () => {
    const once = async () => {
      const wired = syncVariant.wire(new LoopManagers().withHook(askAll()).withIdGen(seededIdGen(7)), () => ({
        type: "approve",
      }));
      const { agent } = build({ turns: script(call("c1", "read", A)), managers: wired.managers });
      const result = await agent.run("go");
      return [result.sessionId, result.runId, wired.asks[0]?.id];
    };
    const first = await once();
    expect(await once()).toEqual(first);
    expect(new Set(first).size).toBe(3);
  });
});

describe("nothing is left behind", () => {
  it("no abort listener stays on the caller's signal, whatever the ending", async () => {
    const endings: [string, LoopManagers][] = [
      [
        "approved",
        new LoopManagers()
          .withHook(askAll())
          .withAskResolver(new SyncAskResolver(() => true))
          .withAskTimeout(1_000),
      ],
      ["refused", new LoopManagers().withHook(askAll()).withAskResolver(new SyncAskResolver(() => false))],
      ["unresolved", new LoopManagers().withHook(askAll())],
      [
        "expired",
        new LoopManagers()
          .withHook(askAll())
          .withAskResolver(new ManualResolver())
          .withAskTimeout(0)
          .withMaxConcurrency(2),
      ],
    ];
    for (const [label, managers] of endings) {
      const controller = new AbortController();
      const { agent } = build({ turns: script(call("c1", "read", A), call("c2", "read", B)), managers });
      await agent.run("go", { signal: controller.signal });
      expect([label, EventEmitter.getEventListeners(controller.signal, "abort").length]).toEqual([label, 0]);
    }
  });
});
