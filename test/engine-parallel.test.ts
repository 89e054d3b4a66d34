import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel } from "../src/ask/index.js";
import type { PendingAsk } from "../src/ask/index.js";
import { CancelledError, LoopDetectedError, LoopManagers, defineTool } from "../src/engine/index.js";
import { ManualResolver } from "./support/engine-resolvers.js";
import {
  askAll,
  build,
  call,
  deferred,
  eventLog,
  flush,
  notRunResult,
  script,
  until,
} from "./support/engine-fixtures.js";
import type { Deferred } from "./support/engine-fixtures.js";

const FUZZ_RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 40);

function echoTool(executed: string[] = []) {
  return defineTool({
    name: "echo",
    description: "echo",
    input: z.object({ v: z.string() }),
    execute: ({ v }) => {
      executed.push(v);
      return v;
    },
  });
}

const calls = (n: number) => Array.from({ length: n }, (_, i) => call(`c${i}`, "echo", { v: `v${i}` }));

describe("parallel dispatch", () => {
  it("concurrent calls park independently: all asks are delivered at once, each takes only its own answer", async () => {
    const [channel, approver] = ApprovalChannel.pair(8);
    const executed: string[] = [];
    const { agent, model } = build({
      turns: script(...calls(3)),
      tools: [echoTool(executed)],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(channel).withMaxConcurrency(3),
    });
    const running = agent.run("go");
    const asks: PendingAsk[] = [];
    for (let i = 0; i < 3; i += 1) asks.push((await approver.next())!);
    expect(asks.map((a) => a.callId).sort()).toEqual(["c0", "c1", "c2"]);
    // answer in reverse order: c2 approve, c1 deny, c0 approve
    const byCall = (id: string) => asks.find((a) => a.callId === id)!;
    expect(approver.resolve(byCall("c2").id, { type: "approve" })).toBe(true);
    expect(approver.resolve(byCall("c1").id, { type: "deny" })).toBe(true);
    expect(approver.resolve(byCall("c0").id, { type: "approve" })).toBe(true);
    const result = await running;
    approver.close();
    expect(executed.sort()).toEqual(["v0", "v2"]);
    expect(model.requests[1]?.messages.slice(2)).toEqual([
      { type: "tool_result", callId: "c0", tool: "echo", content: "v0", status: "ran", isError: false },
      {
        type: "tool_result",
        callId: "c1",
        tool: "echo",
        content: "Permission denied by approver for tool 'echo'",
        status: "refused",
        isError: true,
      },
      { type: "tool_result", callId: "c2", tool: "echo", content: "v2", status: "ran", isError: false },
    ]);
    // records in emission order: the denial landed first, then c2 and c0 as their dispatch returned
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_denied", "ask_allowed", "ask_allowed"]);
  });

  it("withMaxConcurrency(n) bounds the asks in flight", async () => {
    const resolver = new ManualResolver();
    const { agent } = build({
      turns: script(...calls(5)),
      tools: [echoTool()],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver).withMaxConcurrency(2),
    });
    const running = agent.run("go");
    let answered = 0;
    while (answered < 5) {
      await until(() => resolver.parked.length > answered);
      const inFlight = resolver.parked.length - answered;
      expect(inFlight).toBeLessThanOrEqual(2);
      resolver.parked[answered]?.answer({ type: "approve" });
      answered += 1;
    }
    await expect(running).resolves.toMatchObject({ text: "done" });
  });

  it("a cancel ends the whole wave: every parked call gets its cancelled record, the run rejects once", async () => {
    const resolver = new ManualResolver();
    const controller = new AbortController();
    const { log, observer } = eventLog();
    const { agent } = build({
      turns: script(...calls(3)),
      tools: [echoTool()],
      managers: new LoopManagers()
        .withHook(askAll())
        .withAskResolver(resolver)
        .withMaxConcurrency(3)
        .withObserver(observer),
    });
    const running = agent.run("go", { signal: controller.signal });
    await until(() => resolver.parked.length === 3);
    resolver.parked[1]?.answer({ type: "deny" });
    await until(() => log.includes("post:c1:error"));
    controller.abort();
    const error = (await running.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.records.map((r) => r.verdict)).toEqual(["ask_denied", "cancelled", "cancelled"]);
    expect(resolver.parked.every((p) => p.signal.aborted || p.ask.callId === "c1")).toBe(true);
    expect(log.filter((e) => e.startsWith("post:"))).toEqual(["post:c1:error"]);
  });

  it("a loop stop in one call ends the wave: the others are cancelled, the run rejects with LoopDetectedError", async () => {
    const resolver = new ManualResolver();
    const { agent } = build({
      turns: [
        { toolCalls: [call("a", "echo", { v: "same" })] },
        { toolCalls: [call("b", "echo", { v: "same" }), call("c", "echo", { v: "other" })] },
        { text: "never" },
      ],
      tools: [echoTool()],
      managers: new LoopManagers()
        .withHook({ preToolUse: (c) => (c.id === "c" ? { type: "ask", prompt: "?" } : { type: "allow" }) })
        .withAskResolver(resolver)
        .withLoopDetection({ maxRepeats: 1 })
        .withMaxConcurrency(2),
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(error.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["allow", "hook"],
      ["deny", "loop_detector"],
      ["cancelled", "hook"],
    ]);
    expect(resolver.parked[0]?.signal.aborted).toBe(true);
  });

  it("property: whatever order answers come in, results return in call order and exactly one record per call", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 1, max: 6 }),
        fc.array(fc.nat(), { minLength: 6, maxLength: 6 }),
        fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
        async (n, concurrency, picks, approvals) => {
          const resolver = new ManualResolver();
          const gate = deferred<void>();
          const slow = defineTool({
            name: "echo",
            description: "",
            input: z.object({ v: z.string() }),
            execute: async ({ v }) => {
              await gate.promise;
              return v;
            },
          });
          const { agent, model } = build({
            turns: script(...calls(n)),
            tools: [slow],
            managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver).withMaxConcurrency(concurrency),
          });
          const running = agent.run("go");
          const open = new Set<number>();
          let answered = 0;
          let seen = 0;
          while (answered < n) {
            await until(() => {
              for (; seen < resolver.parked.length; seen += 1) open.add(seen);
              // Executions hold until nothing else can move, so answers and executions interleave.
              if (open.size === 0) gate.resolve();
              return open.size > 0;
            });
            const choices = [...open];
            const index = choices[(picks[answered] ?? 0) % choices.length]!;
            open.delete(index);
            resolver.parked[index]?.answer(approvals[index] === false ? { type: "deny" } : { type: "approve" });
            answered += 1;
          }
          gate.resolve();
          const result = await running;
          const results = model.requests[1]?.messages.slice(2) ?? [];
          expect(results.map((m) => (m as { callId: string }).callId)).toEqual(calls(n).map((c) => c.id));
          expect(result.records).toHaveLength(n);
          resolver.parked.forEach((p, i) => {
            const content = (
              results.find((m) => (m as { callId: string }).callId === p.ask.callId) as { content: string }
            ).content;
            expect(content).toBe(
              approvals[i] === false ? "Permission denied by approver for tool 'echo'" : `v${p.ask.callId.slice(1)}`,
            );
          });
        },
      ),
      { numRuns: FUZZ_RUNS },
    );
  });
});

describe("a cancel after a tool returned", () => {
  /** `echo`, resolving `returned` with its value just before it returns it. */
  function signallingTool(returned: Deferred<string>, executed: string[]) {
    return defineTool({
      name: "echo",
      description: "echo",
      input: z.object({ v: z.string() }),
      execute: async ({ v }) => {
        await Promise.resolve();
        executed.push(v);
        returned.resolve(v);
        return v;
      },
    });
  }

  const askFor = (id: string) => ({
    preToolUse: (c: { id: string }) =>
      c.id === id ? { type: "ask" as const, prompt: "?" } : { type: "allow" as const },
  });

  const RAN_A = { type: "tool_result", callId: "a", tool: "echo", content: "A", status: "ran", isError: false };
  // The parked call never ran: its result says so, so the transcript pairs every call.
  const NOT_RUN_B = notRunResult("b", "echo");

  /**
   * Runs calls `a` and `b` of `echo` at once under the managers `setUp` makes (given the resolver
   * they ask), waits for `before`, then for `a`'s tool to return and for `after`, and cancels the
   * run: what it rejected with, and the values the tool ran with.
   */
  async function cancelledOnceAReturned(
    setUp: (resolver: ManualResolver) => LoopManagers,
    { before, after }: { before?: (resolver: ManualResolver) => Promise<void>; after?: () => Promise<void> } = {},
  ): Promise<{ error: CancelledError; executed: string[] }> {
    const resolver = new ManualResolver();
    const controller = new AbortController();
    const returned = deferred<string>();
    const executed: string[] = [];
    const { agent } = build({
      turns: script(call("a", "echo", { v: "A" }), call("b", "echo", { v: "B" })),
      tools: [signallingTool(returned, executed)],
      managers: setUp(resolver),
    });
    const running = agent.run("go", { signal: controller.signal });
    await before?.(resolver);
    await returned.promise;
    await after?.();
    controller.abort();
    const error = (await running.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    return { error, executed };
  }

  it("a call whose tool returned is never recorded cancelled, and its result is in the transcript", async () => {
    const { error, executed } = await cancelledOnceAReturned((resolver) =>
      new LoopManagers().withHook(askFor("b")).withAskResolver(resolver).withMaxConcurrency(2),
    );
    expect(executed).toEqual(["A"]);
    // In emission order: the parked call's cancel lands before the dispatch of the one that ran returns.
    expect(error.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["cancelled", "hook"],
      ["allow", "hook"],
    ]);
    expect(error.messages.filter((m) => m.type === "tool_result")).toEqual([RAN_A, NOT_RUN_B]);
  });

  it("an approved call whose tool returned keeps its ask_allowed record and its result", async () => {
    const { error, executed } = await cancelledOnceAReturned(
      (resolver) => new LoopManagers().withHook(askAll()).withAskResolver(resolver).withMaxConcurrency(2),
      {
        before: async (resolver) => {
          await until(() => resolver.parked.length === 2);
          resolver.parked.find((p) => p.ask.callId === "a")?.answer({ type: "approve" });
        },
      },
    );
    expect(executed).toEqual(["A"]);
    expect(error.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["cancelled", "hook"],
      ["ask_allowed", "ask"],
    ]);
    expect(error.messages.filter((m) => m.type === "tool_result")).toEqual([RAN_A, NOT_RUN_B]);
  });

  it("a tool that returned while a middleware still held its output: the record says it ran, the output is withheld", async () => {
    const never = deferred<void>();
    const { error, executed } = await cancelledOnceAReturned(
      (resolver) =>
        new LoopManagers()
          .withHook(askFor("b"))
          .withAskResolver(resolver)
          .withMaxConcurrency(2)
          // After the tool, this middleware waits on something that never comes.
          .withMiddleware(async (_call, _context, next) => {
            const result = await next();
            await never.promise;
            return result;
          }),
      { after: flush },
    );
    expect(executed).toEqual(["A"]);
    expect(error.records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["allow", "hook", "output withheld: the run was cancelled before middleware returned"],
      ["cancelled", "hook", "cancelled while awaiting approval"],
    ]);
    expect(error.messages.filter((m) => m.type === "tool_result")).toEqual([
      {
        type: "tool_result",
        callId: "a",
        tool: "echo",
        content: "Tool 'echo' ran, but its output was withheld: the run was cancelled",
        status: "refused",
        isError: true,
      },
      NOT_RUN_B,
    ]);
  });
});
