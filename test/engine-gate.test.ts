import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel, SyncAskResolver } from "loopctl/ask";
import type { AskResolution, AskResolver, PendingAsk } from "loopctl/ask";
import {
  Agent,
  CancelledError,
  EngineConfigError,
  Gate,
  GateDecisionSchema,
  LoopManagers,
  defineTool,
  permissionMiddleware,
} from "loopctl/engine";
import type { GateDecision, GateOutcome, Hook, Middleware, Tool, ToolDescriptor } from "loopctl/engine";
import {
  Grant,
  GrantScope,
  MemoryGrantStore,
  argsDigest,
  argsSha256,
  canonicalJson,
  descriptorFingerprint,
} from "loopctl/grant";
import { ManualClock, ScriptedModel } from "loopctl/testing";
import { stuckController, track, unreadableReasonSignal } from "./support/ask-fixtures.js";
import { deferred, flush, until } from "./support/engine-fixtures.js";

const readDescriptor: ToolDescriptor = {
  name: "read",
  description: "Read a file",
  inputSchema: {
    type: "object",
    properties: { path: { type: "string" } },
    required: ["path"],
    additionalProperties: false,
  },
};

const ok = (input: unknown): string => `ran ${JSON.stringify(input)}`;
const RUN_ID = "00000000-0000-4000-8000-0000000000aa";

describe("Gate.call", () => {
  it("runs an allowed call once, with the frozen snapshot of the arguments, and resolves ran with its one record", async () => {
    const seen: unknown[] = [];
    const gate = new Gate(new LoopManagers().withClock({ now: () => 5 }));
    const input = { path: "a.rs" };
    const outcome = await gate.call({ tool: readDescriptor, callId: "c1", input }, (args, { signal }) => {
      seen.push(args);
      expect(signal).toBeInstanceOf(AbortSignal);
      return { size: 3 };
    });
    expect(seen).toEqual([input]);
    expect(seen[0]).not.toBe(input);
    expect(Object.isFrozen(seen[0])).toBe(true);
    expect(outcome).toEqual({
      type: "ran",
      output: { size: 3 },
      record: {
        tool: "read",
        argsDigest: argsDigest(input),
        argsSha256: argsSha256(input),
        verdict: "allow",
        ruleId: "hook",
        ruleSource: "context",
        matchedPattern: null,
        reason: null,
        ts: 5,
      },
    });
  });

  it("reads the arguments before onToolPre, as Agent does: an observer that changes the model's object changes nothing that runs", async () => {
    const input = { path: "a.rs" };
    const changing = {
      onToolPre: ({ call }: { call: { input: unknown } }) => {
        (call.input as { path: string }).path = "/etc/shadow";
      },
    };
    const asks: PendingAsk[] = [];
    const gate = new Gate(
      new LoopManagers()
        .withObserver(changing)
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "read?" }) })
        .withAskResolver(new SyncAskResolver((ask) => (asks.push(ask), true))),
    );
    const seen: unknown[] = [];
    const outcome = await gate.call({ tool: readDescriptor, callId: "c1", input }, (args) => (seen.push(args), "ok"));
    expect(input.path).toBe("/etc/shadow");
    expect(seen).toEqual([{ path: "a.rs" }]);
    expect(asks.map((ask) => ask.argsDigest)).toEqual([argsDigest({ path: "a.rs" })]);
    expect(outcome.record).toMatchObject({ verdict: "ask_allowed", argsDigest: argsDigest({ path: "a.rs" }) });
  });

  it("a Tool from defineTool works the same as its bare descriptor", async () => {
    const tool = defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }),
      execute: () => "unused",
    });
    const gate = new Gate(new LoopManagers());
    const outcome = await gate.call({ tool, callId: "c1", input: { path: "a" } }, ok);
    expect(outcome).toMatchObject({ type: "ran", output: 'ran {"path":"a"}' });
  });

  it("an execute that throws is the outcome failed: the gate's record stands, the message names the tool", async () => {
    const gate = new Gate(new LoopManagers());
    const outcome = await gate.call({ tool: readDescriptor, callId: "c1", input: { path: "a" } }, () => {
      throw new Error("disk on fire");
    });
    expect(outcome).toMatchObject({
      type: "failed",
      message: "Tool 'read' failed: disk on fire",
      record: { verdict: "allow" },
    });
    expect((outcome as Extract<GateOutcome, { type: "failed" }>).error).toEqual(new Error("disk on fire"));
  });

  it("an execute that throws something that cannot be described is still the outcome failed, never a refusal", async () => {
    class GetterError extends Error {
      override get message(): string {
        throw new Error("no message for you");
      }
    }
    const unprintable = {
      toString() {
        throw new Error("no string either");
      },
    };
    const odd: [string, unknown][] = [
      ["a message getter that throws", new GetterError()],
      ["a message that is not a string", Object.assign(new Error(), { message: unprintable })],
      [
        "a name getter that throws",
        Object.defineProperty(new Error(""), "name", { get: () => unprintable.toString() }),
      ],
      ["a proxy whose prototype cannot be read", new Proxy({}, { getPrototypeOf: () => unprintable.toString() })],
      ["a toString that throws", unprintable],
      ["an object without a prototype", Object.create(null)],
    ];
    const gate = new Gate(new LoopManagers());
    for (const [what, thrown] of odd) {
      let runs = 0;
      const outcome = await gate.call({ tool: readDescriptor, callId: "c1", input: { path: "a" } }, () => {
        runs += 1;
        throw thrown;
      });
      expect([what, runs, outcome.type, outcome.record.verdict]).toEqual([what, 1, "failed", "allow"]);
      expect(outcome.type === "failed" && outcome.error).toBe(thrown);
      expect(outcome.type === "failed" ? outcome.message : "").toMatch(/^Tool 'read' failed: /);
    }
  });

  it("validation comes before the hooks: invalid arguments are refused with a schema record, and nobody is asked", async () => {
    let hookCalls = 0;
    let resolverCalls = 0;
    let executed = 0;
    const gate = new Gate(
      new LoopManagers()
        .withHook({ preToolUse: () => ((hookCalls += 1), { type: "ask", prompt: "?" }) })
        .withAskResolver(new SyncAskResolver(() => ((resolverCalls += 1), true))),
    );
    const outcome = await gate.call({ tool: readDescriptor, callId: "c1", input: { path: 1 } }, () => (executed += 1));
    expect(outcome).toMatchObject({
      type: "refused",
      message: "Invalid arguments for tool 'read': $.path: must be string",
      record: {
        verdict: "deny",
        ruleId: "schema",
        ruleSource: "engine",
        reason: "invalid arguments: $.path: must be string",
      },
    });
    expect([hookCalls, resolverCalls, executed]).toEqual([0, 0, 0]);
  });

  it("a hand-made Tool whose check answers anything but a valid check (a promise, another shape, a throw) refuses the call: never read as valid", async () => {
    const base = defineTool({
      name: "remove",
      description: "Remove a scratch file",
      input: z.object({ path: z.string().startsWith("/tmp/") }),
      execute: () => "removed",
    });
    const failure = new Error("validator gone");
    const checks: [string, (input: unknown) => unknown, string][] = [
      ["an async check", async (input) => base.check(input), "a Promise"],
      ["another shape", () => ({ type: "ok" }), "an object"],
      ["an empty object", () => ({}), "an object"],
      ["invalid without problems", () => ({ type: "invalid" }), "an object"],
      ["undefined", () => undefined, "undefined"],
    ];
    let executed = 0;
    for (const [what, check, got] of checks) {
      const tool = { ...base, check } as unknown as Tool;
      const outcome = await new Gate(new LoopManagers()).call(
        { tool, callId: "c1", input: { path: "/etc/passwd" } },
        () => (executed += 1),
      );
      const problem = `$: the tool's check did not answer { type: "valid" } or { type: "invalid", problems }, got ${got}`;
      expect(outcome, what).toMatchObject({
        type: "refused",
        message: `Invalid arguments for tool 'remove': ${problem}`,
        record: { verdict: "deny", ruleId: "schema", ruleSource: "engine", reason: `invalid arguments: ${problem}` },
      });
    }
    const throwing = {
      ...base,
      check: () => {
        throw failure;
      },
    };
    expect(
      await new Gate(new LoopManagers()).call(
        { tool: throwing, callId: "c1", input: { path: "/etc/passwd" } },
        () => (executed += 1),
      ),
    ).toMatchObject({
      type: "refused",
      record: {
        verdict: "deny",
        ruleId: "schema",
        reason: "invalid arguments: $: the tool's check failed: validator gone",
      },
    });
    expect(executed).toBe(0);
    // A check that answers as it should still lets valid arguments through.
    expect(
      await new Gate(new LoopManagers()).call({ tool: base, callId: "c1", input: { path: "/tmp/x" } }, () => "ok"),
    ).toMatchObject({ type: "ran", output: "ok" });
  });

  it("a descriptor whose schema does not compile refuses every call (fail closed), with a schema record", async () => {
    const gate = new Gate(new LoopManagers());
    const broken = {
      name: "x",
      description: "",
      inputSchema: { type: "object", properties: { a: { type: "string", format: "no-such-format" } } },
    };
    const outcome = await gate.call({ tool: broken, callId: "c1", input: { a: "1" } }, ok);
    expect(outcome).toMatchObject({
      type: "refused",
      record: { verdict: "deny", ruleId: "schema", reason: expect.stringContaining("unknown format") },
    });
  });

  it("a descriptor whose schema is $async (Ajv validates it with a promise) refuses every call: invalid arguments never pass as valid", async () => {
    let executed = 0;
    const gate = new Gate(new LoopManagers());
    const asyncSchema = {
      name: "x",
      description: "",
      inputSchema: { $async: true, type: "object", properties: { a: { type: "string" } }, required: ["a"] },
    };
    for (const input of [{}, { a: "1" }]) {
      const outcome = await gate.call({ tool: asyncSchema, callId: "c1", input }, () => (executed += 1));
      expect(outcome).toMatchObject({
        type: "refused",
        message: "Invalid arguments for tool 'x': the tool's input schema does not compile",
        record: {
          verdict: "deny",
          ruleId: "schema",
          reason: expect.stringContaining("$async schemas are not supported"),
        },
      });
    }
    expect(executed).toBe(0);
  });

  it("calls to a descriptor whose schema does not compile meet loop detection at their refusal, like invalid arguments", async () => {
    const gate = new Gate(new LoopManagers().withLoopDetection({ maxRepeats: 1 }));
    const broken = { name: "x", description: "", inputSchema: { type: "object", minProperties: "one" } };
    const first = await gate.call({ tool: broken, callId: "c1", input: {} }, ok);
    expect(first).toMatchObject({ type: "refused", record: { ruleId: "schema" } });
    expect(first).not.toHaveProperty("stop");
    const second = await gate.call({ tool: broken, callId: "c2", input: {} }, ok);
    expect(second).toMatchObject({
      type: "refused",
      record: { verdict: "deny", ruleId: "loop_detector" },
      stop: { code: "LOOP_DETECTED", repeats: 2 },
    });
  });

  it("rejects only with CancelledError, after its one cancelled record (its records[0]); the tool never runs", async () => {
    const records: GateDecision[] = [];
    const controller = new AbortController();
    const resolver: AskResolver = { resolve: () => new Promise(() => undefined) };
    const gate = new Gate(
      new LoopManagers()
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) })
        .withAskResolver(resolver)
        .withObserver({ onGate: ({ decision }) => records.push(decision) }),
    );
    let executed = 0;
    const calling = gate.call(
      { tool: readDescriptor, callId: "c1", input: { path: "a" }, signal: controller.signal },
      () => (executed += 1),
    );
    await new Promise((resolve) => setImmediate(resolve));
    controller.abort(new Error("user left"));
    const error = (await calling.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.cause).toEqual(new Error("user left"));
    expect(records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["cancelled", "hook", "cancelled while awaiting approval"],
    ]);
    expect(error.records).toEqual(records);
    expect(executed).toBe(0);
  });

  it("on a caller signal aborted before the call: CancelledError with its reason, one cancelled record, the ask never delivered", async () => {
    const records: GateDecision[] = [];
    const [channel, approver] = ApprovalChannel.pair(1);
    const gate = new Gate(
      new LoopManagers()
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) })
        .withAskResolver(channel)
        .withObserver({ onGate: ({ decision }) => records.push(decision) }),
    );
    let executed = 0;
    const signal = AbortSignal.abort(new Error("gone before"));
    const error = (await gate
      .call({ tool: readDescriptor, callId: "c1", input: { path: "a" }, signal }, () => (executed += 1))
      .catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.cause).toEqual(new Error("gone before"));
    expect(records).toHaveLength(1);
    expect(records[0]!.verdict).toBe("cancelled");
    expect(error.records).toEqual(records);
    expect(approver.buffered).toBe(0);
    expect(channel.size).toBe(0);
    expect(executed).toBe(0);
    approver.close();
  });

  it("a caller signal aborted before the call wins over arguments the gate would refuse: CancelledError, one cancelled record", async () => {
    const cycle: Record<string, unknown> = {};
    cycle["self"] = cycle;
    for (const input of [{ path: 7 }, cycle]) {
      const records: GateDecision[] = [];
      let posts = 0;
      const gate = new Gate(
        new LoopManagers()
          .withLoopDetection({ maxRepeats: 1 })
          .withObserver({ onGate: ({ decision }) => records.push(decision), onToolPost: () => (posts += 1) }),
      );
      let executed = 0;
      const signal = AbortSignal.abort(new Error("gone before"));
      const live = { tool: readDescriptor, callId: "c1", input, runId: RUN_ID };
      const error = (await gate
        .call({ ...live, signal }, () => (executed += 1))
        .catch((e: unknown) => e)) as CancelledError;
      expect(error).toBeInstanceOf(CancelledError);
      expect(error.cause).toEqual(new Error("gone before"));
      expect(records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
        ["cancelled", "cancel", "cancelled before the gate decided"],
      ]);
      expect(error.records).toEqual(records);
      expect(executed).toBe(0);
      // As for any cancel, onToolPost does not fire.
      expect(posts).toBe(0);
      // Loop detection counted nothing for it: the same call, live, is its first and is refused as such.
      await expect(gate.call(live, () => (executed += 1))).resolves.toMatchObject({
        type: "refused",
        record: { verdict: "deny", ruleId: input === cycle ? "invalid_arguments" : "schema" },
      });
      expect(posts).toBe(1);
    }
  });

  it("a middleware that calls next() after the cancel never runs the tool: one cancelled record, and next() refuses", async () => {
    const controller = new AbortController();
    const entered = deferred<void>();
    const release = deferred<void>();
    const late = deferred<unknown>();
    const waits: Middleware = async (_call, _context, next) => {
      entered.resolve();
      await release.promise;
      const result = await next();
      late.resolve(result);
      return result;
    };
    const records: GateDecision[] = [];
    const gate = new Gate(
      new LoopManagers().withMiddleware(waits).withObserver({ onGate: ({ decision }) => records.push(decision) }),
    );
    let executed = 0;
    const calling = gate.call(
      { tool: readDescriptor, callId: "c1", input: { path: "a" }, signal: controller.signal },
      () => (executed += 1),
    );
    await entered.promise;
    controller.abort();
    const error = (await calling.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    release.resolve();
    expect(await late.promise).toMatchObject({ type: "refused" });
    expect(executed).toBe(0);
    expect(records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["cancelled", "cancel", "cancelled during execution"],
    ]);
  });

  it("a cancel that comes after execute settled does not make the call read as cancelled: it resolves with what the tool gave", async () => {
    const controller = new AbortController();
    const returned = deferred<void>();
    const gate = new Gate(new LoopManagers());
    const calling = gate.call(
      { tool: readDescriptor, callId: "c1", input: { path: "a" }, signal: controller.signal },
      () => Promise.resolve().then(() => (returned.resolve(), "contents")),
    );
    await returned.promise;
    controller.abort();
    const outcome = await calling;
    expect(outcome).toMatchObject({ type: "ran", output: "contents", record: { verdict: "allow", ruleId: "hook" } });
  });

  it("a tool that ends because it heard the cancel (it rejects, or returns, in its abort listener) was still running: the call is cancelled, and the breaker is not told it failed", async () => {
    for (const ends of ["rejects", "resolves"] as const) {
      for (const withMiddleware of [false, true]) {
        const controller = new AbortController();
        const started = deferred<void>();
        const records: GateDecision[] = [];
        let managers = new LoopManagers()
          .withCircuitBreaker({ failureThreshold: 1, cooldownMs: 60_000 })
          .withObserver({ onGate: ({ decision }) => records.push(decision) });
        if (withMiddleware) managers = managers.withMiddleware((_call, _context, next) => next());
        const gate = new Gate(managers);
        const calling = gate.call(
          { tool: readDescriptor, callId: "c1", input: { path: "a" }, signal: controller.signal },
          (_input, { signal }) =>
            new Promise((resolve, reject) => {
              started.resolve();
              // As fetch and most APIs that take a signal do: they settle as the signal aborts.
              signal.addEventListener(
                "abort",
                () => (ends === "rejects" ? reject(signal.reason) : resolve("partial")),
                {
                  once: true,
                },
              );
            }),
        );
        await started.promise;
        controller.abort(new Error("stop"));
        const error = await calling.catch((e: unknown) => e);
        expect(error, `${ends}, middleware: ${withMiddleware}`).toBeInstanceOf(CancelledError);
        expect(records.map((r) => [r.verdict, r.reason])).toEqual([["cancelled", "cancelled during execution"]]);
        // The tool did not fail: the next call of it is not refused by an open breaker.
        const next = await gate.call({ tool: readDescriptor, callId: "c2", input: { path: "b" } }, () => "ok");
        expect(next.type, `${ends}, middleware: ${withMiddleware}`).toBe("ran");
      }
    }
  });

  it("a tool that settled while a middleware still held its output: the decision that let it run, the output withheld", async () => {
    const controller = new AbortController();
    const held = deferred<void>();
    const gate = new Gate(
      new LoopManagers().withMiddleware(async (_call, _context, next) => {
        const result = await next();
        await new Promise<never>(() => undefined);
        return result;
      }),
    );
    const calling = gate.call(
      { tool: readDescriptor, callId: "c1", input: { path: "a" }, signal: controller.signal },
      () => Promise.resolve().then(() => (held.resolve(), "contents")),
    );
    await held.promise;
    await flush();
    controller.abort();
    const outcome = await calling;
    expect(outcome.type).toBe("refused");
    expect(outcome).toMatchObject({
      message: "Tool 'read' ran, but its output was withheld: the run was cancelled",
      record: {
        verdict: "allow",
        ruleId: "hook",
        reason: "output withheld: the run was cancelled before middleware returned",
      },
    });
  });

  /** One call on `signal` that must end cancelled: its error, and how many times the tool ran. */
  async function callCancelled(gate: Gate, signal: AbortSignal): Promise<{ error: CancelledError; executed: number }> {
    let executed = 0;
    const error = await gate
      .call({ tool: readDescriptor, callId: "c1", input: { path: "a" }, signal }, () => (executed += 1))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CancelledError);
    return { error: error as CancelledError, executed };
  }

  it("a middleware that aborts the signal and then calls next() never runs the tool", async () => {
    const controller = new AbortController();
    const aborts: Middleware = (_call, _context, next) => {
      controller.abort();
      return next();
    };
    const gate = new Gate(new LoopManagers().withMiddleware(aborts));
    const { error, executed } = await callCancelled(gate, controller.signal);
    expect(error.records.map((r) => [r.verdict, r.reason])).toEqual([["cancelled", "cancelled during execution"]]);
    expect(executed).toBe(0);
  });

  it("a cancel after the last wait, before execute, still stops the call (here from the clock the breaker reads)", async () => {
    const controller = new AbortController();
    const clock = {
      now: () => {
        controller.abort();
        return 0;
      },
    };
    const gate = new Gate(
      new LoopManagers().withClock(clock).withCircuitBreaker({ failureThreshold: 3, cooldownMs: 1_000 }),
    );
    const { error, executed } = await callCancelled(gate, controller.signal);
    expect(error.records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["cancelled", "cancel", "cancelled before execution"],
    ]);
    expect(executed).toBe(0);
  });

  it("a clock whose now() gives no finite number is read as one that throws: records take the system time, the breaker's check refuses the call", async () => {
    for (const [bad, shown] of [
      [Number.NaN, "NaN"],
      [Number.POSITIVE_INFINITY, "Infinity"],
      ["soon", "string"],
    ] as const) {
      const clock = { now: () => bad as number };
      const before = Date.now();
      const plain = await new Gate(new LoopManagers().withClock(clock)).call(
        { tool: readDescriptor, callId: "c1", input: { path: "a" } },
        ok,
      );
      expect(plain.type).toBe("ran");
      expect(GateDecisionSchema.safeParse(plain.record).success).toBe(true);
      expect(plain.record.ts).toBeGreaterThanOrEqual(before);
      let executed = 0;
      const guarded = await new Gate(
        new LoopManagers().withClock(clock).withCircuitBreaker({ failureThreshold: 1, cooldownMs: 1_000 }),
      ).call({ tool: readDescriptor, callId: "c1", input: { path: "a" } }, () => (executed += 1));
      expect(guarded).toMatchObject({
        type: "refused",
        record: {
          verdict: "deny",
          ruleId: "engine",
          reason: `engine failure: withClock: now() must return a finite number of epoch ms, got ${shown}`,
        },
      });
      expect(GateDecisionSchema.safeParse(guarded.record).success).toBe(true);
      expect(executed).toBe(0);
    }
  });

  it("a cancel while a hook decides stops the chain there: later hooks are never consulted", async () => {
    const controller = new AbortController();
    const entered = deferred<void>();
    const release = deferred<void>();
    let later = 0;
    const gate = new Gate(
      new LoopManagers()
        .withHook({
          preToolUse: async () => {
            entered.resolve();
            await release.promise;
            return { type: "allow" };
          },
        })
        .withHook({ preToolUse: () => ((later += 1), { type: "allow" }) }),
    );
    const calling = gate.call(
      { tool: readDescriptor, callId: "c1", input: { path: "a" }, signal: controller.signal },
      ok,
    );
    await entered.promise;
    controller.abort();
    await expect(calling).rejects.toBeInstanceOf(CancelledError);
    release.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    expect(later).toBe(0);
  });

  it("a request that is not one is a typed EngineConfigError", async () => {
    const gate = new Gate(new LoopManagers());
    await expect(gate.call({ tool: { name: "" } as never, callId: "c", input: {} }, ok)).rejects.toBeInstanceOf(
      EngineConfigError,
    );
    await expect(gate.call({ tool: readDescriptor, callId: 1 as never, input: {} }, ok)).rejects.toBeInstanceOf(
      EngineConfigError,
    );
    await expect(
      gate.call({ tool: readDescriptor, callId: "c", input: {}, runId: "run-1" }, ok),
    ).rejects.toBeInstanceOf(EngineConfigError);
    await expect(gate.call({ tool: readDescriptor, callId: "c", input: {} }, "run" as never)).rejects.toBeInstanceOf(
      EngineConfigError,
    );
    expect(() => new Gate({} as never)).toThrow(EngineConfigError);
  });

  it("a sessionId or runId that is not a UUID is refused naming that field and the value given", async () => {
    const gate = new Gate(new LoopManagers());
    await expect(gate.call({ tool: readDescriptor, callId: "c", input: {}, runId: "run-1" }, ok)).rejects.toThrow(
      'Gate.call: runId must be a UUID, got "run-1"',
    );
    await expect(
      gate.call({ tool: readDescriptor, callId: "c", input: {}, sessionId: 7 as never, runId: "run-1" }, ok),
    ).rejects.toThrow("Gate.call: sessionId must be a UUID, got 7");
  });

  it("a request field it does not take is refused, naming it, and nothing runs: a misspelt signal would leave the call deaf to its cancel", async () => {
    const gate = new Gate(new LoopManagers());
    let executed = 0;
    const cancelled = AbortSignal.abort(new Error("user left"));
    const error = (await gate
      .call({ tool: readDescriptor, callId: "c", input: {}, sginal: cancelled } as never, () => (executed += 1))
      .catch((e: unknown) => e)) as EngineConfigError;
    expect(error).toBeInstanceOf(EngineConfigError);
    expect(error.message).toBe("Gate.call: unknown option 'sginal' (did you mean signal?)");
    expect(executed).toBe(0);
  });

  it("a request or tool whose reads throw (a proxy, a getter) is an EngineConfigError naming Gate.call, not the raw error", async () => {
    const gate = new Gate(new LoopManagers());
    const trap = new Error("trap");
    const hostile = new Proxy(
      {},
      {
        get: () => {
          throw trap;
        },
      },
    );
    const getter = (field: string) =>
      Object.defineProperty({ ...readDescriptor }, field, {
        get: () => {
          throw trap;
        },
      });
    const requests: [string, unknown][] = [
      ["the request cannot be read", hostile],
      [
        "the request cannot be read",
        Object.defineProperty({ tool: readDescriptor, callId: "c" }, "input", {
          get: () => {
            throw trap;
          },
        }),
      ],
      ["the tool cannot be read", { tool: hostile, callId: "c", input: {} }],
      ["the tool cannot be read", { tool: getter("name"), callId: "c", input: {} }],
      ["the tool cannot be read", { tool: getter("description"), callId: "c", input: {} }],
    ];
    let executed = 0;
    for (const [message, request] of requests) {
      const error = (await gate
        .call(request as never, () => (executed += 1))
        .catch((e: unknown) => e)) as EngineConfigError;
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Gate.call", message: `Gate.call: ${message}: trap`, cause: trap });
    }
    expect(executed).toBe(0);
  });

  it("a descriptor whose getter answers a name or description the first time and something else after is refused as the copy it goes on with reads: nothing runs, no record", async () => {
    const records: GateDecision[] = [];
    const gate = new Gate(new LoopManagers().withObserver({ onGate: ({ decision }) => records.push(decision) }));
    // A getter that answers a string at the check and another kind of value when the descriptor is copied.
    const shifting = (field: "name" | "description", later: unknown): ToolDescriptor => {
      let reads = 0;
      return Object.defineProperty({ ...readDescriptor }, field, {
        enumerable: true,
        get: () => ((reads += 1) === 1 ? readDescriptor[field] : later),
      });
    };
    let executed = 0;
    for (const [tool, said] of [
      [shifting("name", 42), "the descriptor's name must be a non-empty string"],
      [shifting("name", ""), "the descriptor's name must be a non-empty string"],
      [
        shifting("description", { text: "Read a file" }),
        "the descriptor of tool 'read' must have a string description",
      ],
    ] as const) {
      const error = (await gate
        .call({ tool, callId: "c", input: { path: "a" } }, () => (executed += 1))
        .catch((e: unknown) => e)) as EngineConfigError;
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({ option: "Gate.call" });
      expect(error.message).toContain(said);
    }
    expect(executed).toBe(0);
    expect(records).toEqual([]);
  });

  it("a signal that only inherits from AbortSignal, or one that cannot be listened to, is an EngineConfigError naming Gate.call: nothing runs, no record", async () => {
    const records: GateDecision[] = [];
    const gate = new Gate(new LoopManagers().withObserver({ onGate: ({ decision }) => records.push(decision) }));
    const trap = new Error("cannot listen");
    const unlistenable = new AbortController().signal;
    unlistenable.addEventListener = () => {
      throw trap;
    };
    let executed = 0;
    const call = (signal: AbortSignal): Promise<unknown> =>
      gate
        .call({ tool: readDescriptor, callId: "c1", input: { path: "a" }, signal }, () => (executed += 1))
        .catch((e: unknown) => e);
    const inherited = await call(Object.create(AbortSignal.prototype) as AbortSignal);
    expect(inherited).toBeInstanceOf(EngineConfigError);
    expect(inherited).toMatchObject({ option: "Gate.call", message: "Gate.call: signal must be an AbortSignal" });
    for (let n = 0; n < 2; n += 1) {
      const error = await call(unlistenable);
      expect(error).toBeInstanceOf(EngineConfigError);
      expect(error).toMatchObject({
        option: "Gate.call",
        message: "Gate.call: the signal cannot be listened to: cannot listen",
        cause: trap,
      });
    }
    expect(executed).toBe(0);
    expect(records).toEqual([]);
    // Nothing was left shared on the signal: a call on a good one goes through.
    expect(
      await gate.call(
        { tool: readDescriptor, callId: "c2", input: { path: "a" }, signal: new AbortController().signal },
        ok,
      ),
    ).toMatchObject({ type: "ran" });
  });

  it("a signal whose removeEventListener throws: each call settles once with its own outcome, and an ended call no longer hears the signal", async () => {
    const records: GateDecision[] = [];
    const gate = new Gate(new LoopManagers().withObserver({ onGate: ({ decision }) => records.push(decision) }));
    const request = (callId: string, signal: AbortSignal) => ({
      tool: readDescriptor,
      callId,
      input: { path: "a" },
      signal,
    });
    const seen: AbortSignal[] = [];
    const later = stuckController();
    const ran = track(
      gate.call(request("c1", later.signal), (_input, { signal }) => {
        seen.push(signal);
        return "read";
      }),
    );
    await until(() => ran.outcome.state !== "pending");
    expect(ran.outcome).toMatchObject({ state: "fulfilled", value: { type: "ran", output: "read" } });
    const failure = new Error("disk gone");
    const failed = await gate.call(request("c2", later.signal), () => {
      throw failure;
    });
    expect(failed).toMatchObject({ type: "failed", error: failure });
    // The signal aborts once its calls have ended: what their tools were handed stays live.
    later.abort(new Error("too late"));
    expect(seen).toHaveLength(1);
    expect(seen[0]!.aborted).toBe(false);

    const cancelling = stuckController();
    const started = deferred<undefined>();
    const cancelled = track(
      gate.call(request("c3", cancelling.signal), () => {
        started.resolve(undefined);
        return new Promise(() => undefined);
      }),
    );
    await started.promise;
    const reason = new Error("stop");
    cancelling.abort(reason);
    await until(() => cancelled.outcome.state !== "pending");
    expect(cancelled.outcome.state).toBe("rejected");
    const error = (cancelled.outcome as { reason: unknown }).reason;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error).toMatchObject({ cause: reason, records: [{ verdict: "cancelled" }] });
    await flush();
    expect([ran, cancelled].map((call) => call.settlements)).toEqual([1, 1]);
    expect(records.map((record) => record.verdict)).toEqual(["allow", "allow", "cancelled"]);
  });

  it("a signal whose reason cannot be read (a getter that throws) still cancels: CancelledError naming the signal, one cancelled record, the ask withdrawn", async () => {
    const records: GateDecision[] = [];
    const [channel, approver] = ApprovalChannel.pair(4);
    const gate = new Gate(
      new LoopManagers()
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) })
        .withAskResolver(channel)
        .withObserver({ onGate: ({ decision }) => records.push(decision) }),
    );
    let executed = 0;
    const expected = (trap: Error) => ({
      cause: {
        option: "Gate.call",
        message: "Gate.call: the signal aborted, and its reason could not be read",
        cause: trap,
      },
    });
    // Aborted while the call is parked: the abort listener must not throw, and the call must not stay parked.
    const parkedTrap = new Error("reason unreadable");
    const parked = unreadableReasonSignal(parkedTrap);
    const waiting = track(
      gate.call(
        { tool: readDescriptor, callId: "c1", input: { path: "a" }, signal: parked.signal },
        () => (executed += 1),
      ),
    );
    await until(() => channel.size === 1);
    parked.controller.abort();
    await until(() => waiting.outcome.state !== "pending");
    const error = (waiting.outcome as { reason: unknown }).reason;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error).toMatchObject(expected(parkedTrap));
    expect((error as CancelledError).cause).toBeInstanceOf(EngineConfigError);
    expect(records.map((r) => [r.verdict, r.reason])).toEqual([["cancelled", "cancelled while awaiting approval"]]);
    expect(channel.size).toBe(0);
    // Aborted before the call: cancelled as any other, never delivered.
    const beforeTrap = new Error("reason unreadable too");
    const before = unreadableReasonSignal(beforeTrap);
    before.controller.abort();
    const early = await gate
      .call({ tool: readDescriptor, callId: "c2", input: { path: "a" }, signal: before.signal }, () => (executed += 1))
      .catch((e: unknown) => e);
    expect(early).toBeInstanceOf(CancelledError);
    expect(early).toMatchObject(expected(beforeTrap));
    expect(records.map((r) => r.verdict)).toEqual(["cancelled", "cancelled"]);
    expect(approver.buffered).toBe(0);
    expect(executed).toBe(0);
    expect(waiting.settlements).toBe(1);
    approver.close();
  });

  it("one gate serves many calls at once: concurrent asks park independently and each takes only its own answer", async () => {
    const parked: { ask: PendingAsk; answer: (a: AskResolution) => void }[] = [];
    const resolver: AskResolver = {
      resolve: (ask) => {
        const d = deferred<AskResolution>();
        parked.push({ ask, answer: d.resolve });
        return d.promise;
      },
    };
    const gate = new Gate(
      new LoopManagers().withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) }).withAskResolver(resolver),
    );
    const calls = ["a", "b", "c"].map((path, i) =>
      gate.call({ tool: readDescriptor, callId: `c${i}`, input: { path } }, ok),
    );
    await until(() => parked.length === 3);
    parked[1]!.answer({ type: "deny" });
    parked[2]!.answer({ type: "approve" });
    parked[0]!.answer({ type: "approve" });
    const outcomes = await Promise.all(calls);
    expect(outcomes.map((o) => [o.type, o.record.verdict])).toEqual([
      ["ran", "ask_allowed"],
      ["refused", "ask_denied"],
      ["ran", "ask_allowed"],
    ]);
    expect(parked.map((p) => p.ask.argsSha256)).toEqual(["a", "b", "c"].map((path) => argsSha256({ path })));
  });

  it("many calls in flight on one caller signal add one listener to it, and leave none; a cancel reaches each", async () => {
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => void warnings.push(warning);
    process.on("warning", onWarning);
    try {
      const controller = new AbortController();
      const started: number[] = [];
      const gate = new Gate(new LoopManagers());
      const slow = (i: number) => () => (started.push(i), new Promise(() => undefined));
      const calls = Array.from({ length: 32 }, (_, i) =>
        gate
          .call({ tool: readDescriptor, callId: `c${i}`, input: { path: "a" }, signal: controller.signal }, slow(i))
          .catch((e: unknown) => e),
      );
      await until(() => started.length === 32);
      expect(getEventListeners(controller.signal, "abort")).toHaveLength(1);
      controller.abort();
      const errors = await Promise.all(calls);
      expect(errors.every((e) => e instanceof CancelledError)).toBe(true);
      expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
      const done = new AbortController();
      await gate.call({ tool: readDescriptor, callId: "d", input: { path: "a" }, signal: done.signal }, ok);
      expect(getEventListeners(done.signal, "abort")).toHaveLength(0);
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning")).toEqual([]);
    } finally {
      process.off("warning", onWarning);
    }
  });

  it("counts loop detection per runId: another run starts afresh, and endRun forgets a run", async () => {
    const gate = new Gate(new LoopManagers().withLoopDetection({ maxRepeats: 1 }));
    const run1 = "11111111-1111-4111-8111-111111111111";
    const run2 = "22222222-2222-4222-8222-222222222222";
    const call = (runId: string): Promise<GateOutcome> =>
      gate.call({ tool: readDescriptor, callId: "c", input: { path: "a" }, runId }, ok);
    expect((await call(run1)).type).toBe("ran");
    const stopped = await call(run1);
    expect(stopped).toMatchObject({
      type: "refused",
      record: { ruleId: "loop_detector" },
      stop: { code: "LOOP_DETECTED", repeats: 2 },
    });
    expect((await call(run2)).type).toBe("ran");
    gate.endRun(run1);
    expect((await call(run1)).type).toBe("ran");
  });

  it("keeps the loop-detection counts of a run's 1024 most recently seen calls, so a run that lasts (calls without a runId) stays bounded", async () => {
    const gate = new Gate(new LoopManagers().withLoopDetection({ maxRepeats: 1 }));
    const call = (path: string): Promise<GateOutcome> =>
      gate.call({ tool: readDescriptor, callId: "c", input: { path } }, ok);
    const others = async (from: number, count: number): Promise<void> => {
      for (let i = from; i < from + count; i++) expect((await call(`other-${i}`)).type).toBe("ran");
    };
    // Within the window the repeat is still caught, however long the run has gone on.
    await others(0, 5000);
    expect((await call("a")).type).toBe("ran");
    await others(5000, 1023);
    expect(await call("a")).toMatchObject({ type: "refused", stop: { code: "LOOP_DETECTED", repeats: 2 } });
    // Past it, the call is forgotten: 1024 others came since.
    expect((await call("b")).type).toBe("ran");
    await others(6023, 1024);
    expect((await call("b")).type).toBe("ran");
    expect((await call("b")).type).toBe("refused");
  }, 60_000);

  it("the circuit breaker's tool health lives in the gate, across runs", async () => {
    const gate = new Gate(
      new LoopManagers().withCircuitBreaker({ failureThreshold: 1, cooldownMs: 1_000 }).withClock({ now: () => 0 }),
    );
    const failing = (): never => {
      throw new Error("x");
    };
    expect((await gate.call({ tool: readDescriptor, callId: "c1", input: { path: "a" } }, failing)).type).toBe(
      "failed",
    );
    const runId = "33333333-3333-4333-8333-333333333333";
    expect(await gate.call({ tool: readDescriptor, callId: "c2", input: { path: "b" }, runId }, ok)).toMatchObject({
      type: "refused",
      message: "tool temporarily unavailable: circuit breaker open",
    });
  });

  it("a tool whose annotations alone changed is asked about again, although a grant covered it (the rug-pull)", async () => {
    const store = new MemoryGrantStore();
    const v1: ToolDescriptor = { ...readDescriptor, annotations: { readOnlyHint: true, destructiveHint: false } };
    const v2: ToolDescriptor = { ...readDescriptor, annotations: { readOnlyHint: true, destructiveHint: true } };
    const asks: PendingAsk[] = [];
    const gate = new Gate(
      new LoopManagers()
        .withGrantStore(store)
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "read?" }) })
        .withAskResolver(new SyncAskResolver((ask) => (asks.push(ask), { type: "approve", remember: "this_tool" }))),
    );
    expect((await gate.call({ tool: v1, callId: "c1", input: { path: "a" } }, ok)).record.verdict).toBe("ask_allowed");
    expect((await gate.call({ tool: v1, callId: "c2", input: { path: "b" } }, ok)).record).toMatchObject({
      verdict: "allow",
      ruleId: "grant",
    });
    expect((await gate.call({ tool: v2, callId: "c3", input: { path: "b" } }, ok)).record.verdict).toBe("ask_allowed");
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
  });
  it("a descriptor changed in place is read again at its next call: a grant pinned to it as it was asks again, and its new schema holds", async () => {
    const store = new MemoryGrantStore();
    const descriptor = {
      name: "files",
      description: "Read files",
      inputSchema: { type: "object", properties: { path: { type: "string" } } } as Record<string, unknown>,
      annotations: { readOnlyHint: true } as Record<string, unknown>,
    };
    const asks: PendingAsk[] = [];
    const gate = new Gate(
      new LoopManagers()
        .withGrantStore(store)
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "files?" }) })
        .withAskResolver(new SyncAskResolver((ask) => (asks.push(ask), { type: "approve", remember: "this_tool" }))),
    );
    const ran: unknown[] = [];
    const run = (input: unknown): unknown => (ran.push(input), "ran");
    expect((await gate.call({ tool: descriptor, callId: "c1", input: { path: "a" } }, run)).record.verdict).toBe(
      "ask_allowed",
    );
    expect((await gate.call({ tool: descriptor, callId: "c2", input: { path: "b" } }, run)).record.ruleId).toBe(
      "grant",
    );
    // The same object, now a destructive tool: the grant given for the read-only one must not let it through.
    descriptor.description = "Delete files";
    descriptor.annotations["readOnlyHint"] = false;
    expect((await gate.call({ tool: descriptor, callId: "c3", input: { path: "c" } }, run)).record.verdict).toBe(
      "ask_allowed",
    );
    expect(asks.map((ask) => ask.callId)).toEqual(["c1", "c3"]);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
    // A schema tightened in place is the one arguments are checked against.
    (descriptor.inputSchema["properties"] as Record<string, unknown>)["path"] = { type: "string", pattern: "^/tmp/" };
    expect(await gate.call({ tool: descriptor, callId: "c4", input: { path: "/etc/passwd" } }, run)).toMatchObject({
      type: "refused",
      record: { verdict: "deny", ruleId: "schema" },
    });
    expect(ran).toEqual([{ path: "a" }, { path: "b" }, { path: "c" }]);
    // Unchanged since, it is not compiled or asked about again.
    expect((await gate.call({ tool: descriptor, callId: "c5", input: { path: "/tmp/x" } }, run)).record.verdict).toBe(
      "ask_allowed",
    );
    expect((await gate.call({ tool: descriptor, callId: "c6", input: { path: "/tmp/y" } }, run)).record.ruleId).toBe(
      "grant",
    );
  });

  it("a hand-made Tool whose descriptor is frozen only at its top, changed within while its call is parked: the hooks saw and the grant is pinned to one snapshot, taken as the call began", async () => {
    const read = defineTool({
      name: "files",
      description: "Read files",
      input: { type: "object", properties: { path: { type: "string" } } },
      annotations: { readOnlyHint: true },
      execute: () => "ran",
    });
    const original = structuredClone(read.descriptor);
    // Frozen at its top only: its schema and annotations are objects anyone holding the tool can write to.
    const inputSchema: { type: string; properties: Record<string, unknown> } = {
      type: "object",
      properties: { path: { type: "string" } },
    };
    const annotations: Record<string, unknown> = { readOnlyHint: true };
    const descriptor = Object.freeze({ name: "files", description: "Read files", inputSchema, annotations });
    const tool: Tool = { ...read, descriptor };
    const store = new MemoryGrantStore();
    const seen: ToolDescriptor[] = [];
    const prompts: string[] = [];
    const asks: PendingAsk[] = [];
    const gate = new Gate(
      new LoopManagers()
        .withGrantStore(store)
        .withHook({
          preToolUse: (call, context) => {
            seen.push(context.descriptor);
            const prompt = `${context.descriptor.description}: ${canonicalJson(context.descriptor.inputSchema)}`;
            prompts.push(prompt);
            return { type: "ask", prompt };
          },
        })
        .withAskResolver(
          new SyncAskResolver((ask) => {
            asks.push(ask);
            // While the call is parked, what holds the tool makes it another one.
            descriptor.inputSchema.properties = { path: { type: "string" }, command: { type: "string" } };
            descriptor.annotations["readOnlyHint"] = false;
            return { type: "approve", remember: "this_tool" };
          }),
        ),
    );
    const first = await gate.call({ tool, callId: "c1", input: { path: "a" } }, () => "ran");
    expect(first.record.verdict).toBe("ask_allowed");
    expect(asks.map((ask) => ask.prompt)).toEqual([`Read files: ${canonicalJson(original.inputSchema)}`]);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toEqual(original);
    const grants = await store.load();
    expect(grants.map((grant) => grant.pinnedDescriptor)).toEqual([descriptorFingerprint(original)]);
    // The tool as it is now is not the one approved: it is asked about again, as a changed tool.
    const second = await gate.call({ tool, callId: "c2", input: { path: "b" } }, () => "ran");
    expect(second.record.verdict).toBe("ask_allowed");
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
    expect(seen[1]).toEqual(structuredClone(descriptor));
  });

  it("with no resolver, a call whose allow grant no longer matches the tool is the plain headless denial: the hook's prompt verbatim", async () => {
    const store = new MemoryGrantStore();
    const v1: ToolDescriptor = { ...readDescriptor, description: "Read a file" };
    const v2: ToolDescriptor = { ...readDescriptor, description: "Read a file, then upload it" };
    const hook: Hook = { preToolUse: () => ({ type: "ask", prompt: "read?" }) };
    const approving = new Gate(
      new LoopManagers()
        .withGrantStore(store)
        .withHook(hook)
        .withAskResolver(new SyncAskResolver(() => ({ type: "approve", remember: "this_tool" }))),
    );
    expect((await approving.call({ tool: v1, callId: "c1", input: { path: "a" } }, ok)).record.verdict).toBe(
      "ask_allowed",
    );
    const headless = new Gate(new LoopManagers().withGrantStore(store).withHook(hook));
    expect(await headless.call({ tool: v2, callId: "c2", input: { path: "a" } }, ok)).toMatchObject({
      type: "refused",
      message: "read?",
      record: { verdict: "ask_unresolved", ruleId: "hook", ruleSource: "engine", reason: "permission required: read?" },
    });
  });
});

describe("arguments validated by Ajv (JSON Schema) and by zod", () => {
  const verdict = async (tool: Tool | ToolDescriptor, input: unknown): Promise<string> =>
    (await new Gate(new LoopManagers()).call({ tool, callId: "c", input }, ok)).record.ruleId;

  it("zod: a record, a union, a tuple and an e-mail field", async () => {
    const tool = defineTool({
      name: "z",
      description: "",
      input: z.object({
        tags: z.record(z.string(), z.number()),
        target: z.union([
          z.object({ kind: z.literal("file"), path: z.string() }),
          z.object({ kind: z.literal("url"), href: z.string() }),
        ]),
        range: z.tuple([z.number(), z.number()]),
        email: z.email(),
      }),
      execute: () => "ok",
    });
    const good = { tags: { a: 1 }, target: { kind: "url", href: "x" }, range: [1, 2], email: "a@example.com" };
    expect(await verdict(tool, good)).toBe("hook");
    expect(await verdict(tool, { ...good, tags: { a: "1" } })).toBe("schema");
    expect(await verdict(tool, { ...good, target: { kind: "url", path: "x" } })).toBe("schema");
    expect(await verdict(tool, { ...good, range: [1] })).toBe("schema");
    expect(await verdict(tool, { ...good, email: "not an address" })).toBe("schema");
  });

  it("a 2020-12 schema with oneOf, format and $ref", async () => {
    const schema = {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      $defs: { address: { type: "string", format: "email" } },
      properties: {
        to: { $ref: "#/$defs/address" },
        when: { type: "string", format: "date-time" },
        body: {
          oneOf: [
            { type: "string", maxLength: 10 },
            { type: "object", required: ["html"] },
          ],
        },
        items: { type: "array", prefixItems: [{ type: "integer" }, { type: "string" }], items: false },
      },
      required: ["to", "body"],
    };
    const tool: ToolDescriptor = { name: "mail", description: "", inputSchema: schema };
    const good = { to: "a@example.com", when: "2026-12-02T10:00:00Z", body: "hi", items: [1, "x"] };
    expect(await verdict(tool, good)).toBe("hook");
    expect(await verdict(defineTool({ name: "mail", description: "", input: schema, execute: () => "" }), good)).toBe(
      "hook",
    );
    expect(await verdict(tool, { ...good, to: "nobody" })).toBe("schema");
    expect(await verdict(tool, { ...good, when: "yesterday" })).toBe("schema");
    expect(await verdict(tool, { ...good, body: 3 })).toBe("schema");
    expect(await verdict(tool, { ...good, items: [1, "x", 3] })).toBe("schema");
  });

  it("a draft-07 schema (by its $schema)", async () => {
    const tool: ToolDescriptor = {
      name: "old",
      description: "",
      inputSchema: {
        $schema: "http://json-schema.org/draft-07/schema#",
        type: "object",
        definitions: { id: { type: "string", format: "uuid" } },
        properties: {
          id: { $ref: "#/definitions/id" },
          pair: { type: "array", items: [{ type: "string" }, { type: "number" }], additionalItems: false },
        },
        required: ["id"],
      },
    };
    expect(await verdict(tool, { id: "8b7c7c3e-2f5a-4c1e-9d7e-0a1b2c3d4e5f", pair: ["a", 1] })).toBe("hook");
    expect(await verdict(tool, { id: "not-a-uuid" })).toBe("schema");
    expect(await verdict(tool, { id: "8b7c7c3e-2f5a-4c1e-9d7e-0a1b2c3d4e5f", pair: ["a", 1, 2] })).toBe("schema");
  });
});

/**
 * The same scenarios through `Agent` and through `gate.call` directly must
 * leave identical records: the agent is only a loop around the gate.
 */
describe("Agent is a loop around the gate: the same scenario, the same record", () => {
  interface Scenario {
    readonly hook?: Hook;
    readonly answer?: AskResolution | "none";
    readonly input: unknown;
    readonly managers?: (m: LoopManagers) => LoopManagers;
    readonly execute?: "throws";
  }
  const ask: Hook = { preToolUse: () => ({ type: "ask", prompt: "May I?" }) };
  const scenarios: [string, Scenario][] = [
    ["no hooks", { input: { path: "a" } }],
    ["a hook blocks", { hook: { preToolUse: () => ({ type: "block", reason: "never" }) }, input: { path: "a" } }],
    [
      "a hook modifies",
      { hook: { preToolUse: () => ({ type: "modify", input: { path: "safe" } }) }, input: { path: "a" } },
    ],
    [
      "a hook throws",
      {
        hook: {
          name: "h",
          preToolUse: () => {
            throw new Error("bug");
          },
        },
        input: { path: "a" },
      },
    ],
    ["approved", { hook: ask, answer: { type: "approve" }, input: { path: "a" } }],
    ["refused", { hook: ask, answer: { type: "deny", reason: "no" }, input: { path: "a" } }],
    ["no resolver", { hook: ask, answer: "none", input: { path: "a" } }],
    ["invalid arguments", { hook: ask, answer: { type: "approve" }, input: { path: 1 } }],
    ["arguments that are not JSON", { input: { path: 1n } }],
    [
      "a middleware denies an approved call",
      {
        hook: ask,
        answer: { type: "approve" },
        input: { path: "/etc/x" },
        managers: (m) =>
          m.withMiddleware(
            permissionMiddleware({
              rules: [{ id: "etc", args: { path: "/etc/*" }, action: "deny" }],
              defaultAction: "allow",
            }),
          ),
      },
    ],
    [
      "a remembered deny over a hook's allow",
      {
        input: { path: "a" },
        managers: (m) => m.withGrantStore(storeWith(new Grant("read", "deny", GrantScope.thisCall({ path: "a" })))),
      },
    ],
    [
      "a remembered allow answers an ask",
      {
        hook: ask,
        answer: { type: "deny" },
        input: { path: "a" },
        managers: (m) => m.withGrantStore(storeWith(new Grant("read", "allow", GrantScope.thisTool()))),
      },
    ],
    ["the tool throws", { input: { path: "a" }, execute: "throws" }],
  ];

  function storeWith(grant: Grant): MemoryGrantStore {
    const store = new MemoryGrantStore();
    void store.save(grant);
    return store;
  }

  function managersFor(scenario: Scenario): LoopManagers {
    let managers = new LoopManagers().withClock(new ManualClock(1_000));
    if (scenario.hook !== undefined) managers = managers.withHook(scenario.hook);
    if (scenario.answer !== undefined && scenario.answer !== "none") {
      const answer = scenario.answer;
      managers = managers.withAskResolver(new SyncAskResolver(() => answer));
    }
    return scenario.managers?.(managers) ?? managers;
  }

  const run =
    (scenario: Scenario) =>
    (input: unknown): string => {
      if (scenario.execute === "throws") throw new Error("kaput");
      return ok(input);
    };

  it.each(scenarios)("%s", async (_label, scenario) => {
    const tool = defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }),
      execute: run(scenario),
    });
    const agent = new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "c1", name: "read", input: scenario.input }] }, { text: "done" }]),
      tools: [tool],
      managers: managersFor(scenario),
    });
    const viaAgent = await agent.run("go");
    const viaGate = await new Gate(managersFor(scenario)).call(
      { tool, callId: "c1", input: scenario.input },
      run(scenario),
    );
    expect(viaAgent.records).toEqual([viaGate.record]);
    const result = viaAgent.messages.find((m) => m.type === "tool_result");
    expect(result).toMatchObject({
      status: viaGate.type,
      content: viaGate.type === "ran" ? viaGate.output : viaGate.message,
    });
  });
});

describe("a middleware's decision that is not one", () => {
  /** A gate whose one middleware hands `decide` its context before (or, `after`, once) the tool ran. */
  const gateDeciding = (decide: (context: Parameters<Middleware>[1]) => unknown, after = false): Gate => {
    const middleware: Middleware = async (_call, context, next) => {
      if (!after) {
        decide(context);
        return next();
      }
      const result = await next();
      decide(context);
      return result;
    };
    return new Gate(new LoopManagers().withMiddleware(middleware));
  };
  const untyped = (decision: unknown) => ({
    deny: (context: Parameters<Middleware>[1]) => (context.deny as (d: unknown) => unknown)(decision),
    allow: (context: Parameters<Middleware>[1]) => (context.allow as (d: unknown) => unknown)(decision),
  });

  it.each([
    ["deny", "a ruleId that is no string", { ruleId: 7, message: "no" }, "ruleId must be a non-empty string"],
    ["deny", "an empty ruleId", { ruleId: "", message: "no" }, "ruleId must be a non-empty string"],
    ["deny", "no message", { ruleId: "r" }, "message must be a string"],
    [
      "deny",
      "a reason that is no string",
      { ruleId: "r", message: "no", reason: 1 },
      "reason must be a string or null",
    ],
    ["deny", "a misspelt reason", { ruleId: "r", message: "no", reson: "x" }, "'reson'"],
    [
      "deny",
      "a string in place of the decision",
      "no",
      "the decision must be { ruleId, message, reason?, matchedPattern? }, got a string",
    ],
    ["allow", "a ruleId that is no string", { ruleId: { id: "r" } }, "ruleId must be a non-empty string"],
    [
      "allow",
      "a matchedPattern that is no string",
      { ruleId: "r", matchedPattern: /x/ },
      "matchedPattern must be a string or null",
    ],
    ["allow", "a message (allow has none)", { ruleId: "r", message: "ok" }, "'message'"],
  ] as const)(
    "context.%s with %s fails the middleware, which denies: one middleware record, the tool never runs",
    async (method, _what, decision, problem) => {
      let ran = 0;
      const records: GateDecision[] = [];
      const gate = new Gate(
        new LoopManagers()
          .withObserver({ onGate: ({ decision: record }) => void records.push(record) })
          .withMiddleware(async (_call, context, next) => {
            untyped(decision)[method](context);
            return next();
          }),
      );
      const outcome = await gate.call({ tool: readDescriptor, callId: "c1", input: { path: "a.rs" } }, () => ++ran);
      expect(ran).toBe(0);
      expect(outcome.type).toBe("refused");
      const where = `MiddlewareContext.${method}`;
      expect(outcome).toMatchObject({ record: { verdict: "deny", ruleId: "middleware", ruleSource: "middleware" } });
      expect(outcome.record.reason).toContain(`middleware failed: ${where}: `);
      expect(outcome.record.reason).toContain(problem);
      expect(outcome.type === "refused" && outcome.message).toBe(
        `Permission denied: ${outcome.record.reason} for tool 'read'`,
      );
      expect(records).toEqual([outcome.record]);
    },
  );

  it("context.deny with a malformed decision once the tool ran withholds its output; the record keeps the allow", async () => {
    let ran = 0;
    const gate = gateDeciding(untyped({ ruleId: 7, message: "no" }).deny, true);
    const outcome = await gate.call({ tool: readDescriptor, callId: "c1", input: { path: "a.rs" } }, () => ++ran);
    expect(ran).toBe(1);
    expect(outcome).toMatchObject({ type: "refused", record: { verdict: "allow", ruleId: "hook" } });
    expect(outcome.record.reason).toContain("output withheld: middleware failed: MiddlewareContext.deny: ");
  });

  it("a decision whose reads throw is named as one that cannot be read", async () => {
    const gate = gateDeciding(
      untyped({
        get ruleId(): string {
          throw new Error("revoked");
        },
        message: "no",
      }).deny,
    );
    const outcome = await gate.call({ tool: readDescriptor, callId: "c1", input: { path: "a.rs" } }, ok);
    expect(outcome.record.reason).toBe(
      "middleware failed: MiddlewareContext.deny: the decision cannot be read: revoked",
    );
  });

  it("through Agent: the run goes on, with the call's one record", async () => {
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "read", input: { path: "a.rs" } }] },
      { text: "done" },
    ]);
    let ran = 0;
    const tool = defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }),
      execute: () => ++ran,
    });
    const agent = new Agent({
      model,
      tools: [tool],
      managers: new LoopManagers().withMiddleware((_call, context, next) => {
        (context.allow as (d: unknown) => void)({ ruleId: 42 });
        return next();
      }),
    });
    const result = await agent.run("go");
    expect(ran).toBe(0);
    expect(result.text).toBe("done");
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource])).toEqual([
      ["deny", "middleware", "middleware"],
    ]);
  });
});
