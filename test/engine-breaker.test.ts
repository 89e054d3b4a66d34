import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Agent,
  BREAKER_OPEN_TEXT,
  CancelledError,
  Gate,
  LoopDetectedError,
  LoopManagers,
  defineTool,
} from "../src/engine/index.js";
import type { GateOutcome, Middleware, ToolDescriptor } from "../src/engine/index.js";
import { ManualClock, ScriptedModel } from "../src/testing/index.js";
import { deferred, flush, until } from "./support/engine-fixtures.js";
import type { Deferred } from "./support/engine-fixtures.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);
const COOLDOWN = 1_000;

const flaky: ToolDescriptor = { name: "flaky", description: "a tool that is down", inputSchema: { type: "object" } };

const down = (): never => {
  throw new Error("down");
};

/** What every call the breaker refuses resolves with, half-open or open. */
const refused = {
  type: "refused",
  message: BREAKER_OPEN_TEXT,
  record: {
    tool: "flaky",
    verdict: "deny",
    ruleId: "circuit_breaker",
    ruleSource: "engine",
    reason: BREAKER_OPEN_TEXT,
  },
};

/** A tool whose runs stay in flight until the test settles them. */
function heldTool(): { readonly runs: Deferred<string>[]; execute(): Promise<string> } {
  const runs: Deferred<string>[] = [];
  return {
    runs,
    execute: () => {
      const run = deferred<string>();
      runs.push(run);
      return run.promise;
    },
  };
}

interface BreakerGate {
  readonly clock: ManualClock;
  call(id: string, execute: () => unknown, signal?: AbortSignal): Promise<GateOutcome>;
  /** `trap` runs inside the next `now()` the gate reads. */
  setTrap(trap: () => void): void;
}

/** A gate on a manual clock whose breaker opens on one failure of a tool. */
function breakerGate(managers = new LoopManagers()): BreakerGate {
  const clock = new ManualClock(0);
  let trap: (() => void) | undefined;
  const seam = {
    now: () => {
      const sprung = trap;
      trap = undefined;
      sprung?.();
      return clock.now();
    },
  };
  const gate = new Gate(managers.withClock(seam).withCircuitBreaker({ failureThreshold: 1, cooldownMs: COOLDOWN }));
  const call = (id: string, execute: () => unknown, signal?: AbortSignal): Promise<GateOutcome> =>
    gate.call({ tool: flaky, callId: id, input: {}, ...(signal === undefined ? {} : { signal }) }, execute);
  return { clock, call, setTrap: (t) => (trap = t) };
}

/** {@link breakerGate}, its breaker on `flaky` opened at time 0. */
async function openGate(managers = new LoopManagers()): Promise<BreakerGate> {
  const opened = breakerGate(managers);
  expect((await opened.call("c0", down)).type).toBe("failed");
  return opened;
}

/** Expects `outcome` to have settled, refused by the breaker, within a few turns (a call let through would hang on its tool). */
async function expectRefused(outcome: Promise<GateOutcome>): Promise<void> {
  const pending = (async () => {
    await flush();
    await flush();
    return "still pending";
  })();
  expect(await Promise.race([outcome, pending])).toMatchObject(refused);
}

/** Flushes until `runs` has `count` entries, then twice more, so any other call that would start has. */
async function settledAt(runs: readonly unknown[], count: number): Promise<void> {
  await until(() => runs.length >= count);
  await flush();
  await flush();
}

describe("the half-open breaker admits one trial call at a time", () => {
  it("through Gate.call: calls made while the trial runs are refused as while open; its failure re-opens it, its success closes it", async () => {
    const { clock, call } = await openGate();
    await clock.advance(COOLDOWN);
    const tool = heldTool();
    const [trial, ...others] = ["c1", "c2", "c3"].map((id) => call(id, tool.execute));
    await settledAt(tool.runs, 1);
    expect(tool.runs).toHaveLength(1);
    for (const other of others) await expectRefused(other);

    tool.runs[0]!.reject(new Error("still down"));
    await expect(trial).resolves.toMatchObject({ type: "failed" });
    // A new cool-down, from the trial's failure.
    await expectRefused(call("c4", tool.execute));
    await clock.advance(COOLDOWN - 1);
    await expectRefused(call("c5", tool.execute));
    await clock.advance(1);

    const second = call("c6", tool.execute);
    await settledAt(tool.runs, 2);
    await expectRefused(call("c7", tool.execute));
    tool.runs[1]!.resolve("up");
    await expect(second).resolves.toMatchObject({ type: "ran", output: "up" });
    // Closed: calls go through together again.
    const after = ["c8", "c9", "c10"].map((id) => call(id, tool.execute));
    await settledAt(tool.runs, 5);
    for (const run of tool.runs.slice(2)) run.resolve("up");
    for (const outcome of await Promise.all(after)) expect(outcome.type).toBe("ran");
  });

  it("through Agent: of a turn's parallel calls of a tool still failing, only the first runs; the others read the breaker's text", async () => {
    const clock = new ManualClock(0);
    const tool = heldTool();
    const flakyTool = defineTool({
      name: "flaky",
      description: "f",
      input: z.object({ n: z.number() }),
      execute: tool.execute,
    });
    const turn = (...ns: number[]) => ({
      toolCalls: ns.map((n) => ({ id: `c${n}`, name: "flaky", input: { n } })),
    });
    const model = new ScriptedModel([turn(0), { text: "1" }, turn(1, 2, 3), { text: "2" }]);
    const agent = new Agent({
      model,
      tools: [flakyTool],
      managers: new LoopManagers()
        .withClock(clock)
        .withMaxConcurrency(3)
        .withCircuitBreaker({ failureThreshold: 1, cooldownMs: COOLDOWN }),
    });
    const first = agent.run("a");
    await until(() => tool.runs.length === 1);
    tool.runs[0]!.reject(new Error("down"));
    await first;
    await clock.advance(COOLDOWN);

    const second = agent.run("b");
    await settledAt(tool.runs, 2);
    expect(tool.runs).toHaveLength(2);
    tool.runs[1]!.reject(new Error("still down"));
    const result = await second;
    // The refusals land at once; the trial's record when it ends.
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["deny", "circuit_breaker", BREAKER_OPEN_TEXT],
      ["deny", "circuit_breaker", BREAKER_OPEN_TEXT],
      ["allow", "hook", null],
    ]);
    expect(result.messages.filter((m) => m.type === "tool_result").map((m) => m.content)).toEqual([
      "Tool 'flaky' failed: still down",
      BREAKER_OPEN_TEXT,
      BREAKER_OPEN_TEXT,
    ]);
  });
});

describe("a trial that ends without an execution outcome frees the slot: the next call is the trial", () => {
  /** Each ending: its managers, and a trial call that ends without the tool's outcome reaching the breaker. */
  const endings: readonly [string, LoopManagers, (gate: BreakerGate) => Promise<void>][] = [
    [
      "cancelled before execution (in the clock the breaker reads)",
      new LoopManagers(),
      async ({ call, setTrap }) => {
        const controller = new AbortController();
        let executed = 0;
        setTrap(() => controller.abort());
        const error: unknown = await call("t", () => (executed += 1), controller.signal).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(CancelledError);
        expect((error as CancelledError).records.map((r) => r.reason)).toEqual(["cancelled before execution"]);
        expect(executed).toBe(0);
      },
    ],
    [
      "cancelled during execution",
      new LoopManagers(),
      async ({ call }) => {
        const controller = new AbortController();
        const tool = heldTool();
        const trial = call("t", tool.execute, controller.signal);
        await until(() => tool.runs.length === 1);
        controller.abort();
        await expect(trial).rejects.toBeInstanceOf(CancelledError);
      },
    ],
    [
      "cancelled while a middleware waits, which then calls next(): the tool never starts",
      new LoopManagers().withMiddleware(async (c, _context, next) => {
        if (c.id === "t") await new Promise((resolve) => setTimeout(resolve, 5));
        return next();
      }),
      async ({ call }) => {
        const controller = new AbortController();
        let executed = 0;
        const trial = call("t", () => (executed += 1), controller.signal);
        await flush();
        controller.abort();
        await expect(trial).rejects.toBeInstanceOf(CancelledError);
        await new Promise((resolve) => setTimeout(resolve, 10));
        expect(executed).toBe(0);
      },
    ],
    [
      "refused by a middleware, with observers that throw on every event",
      new LoopManagers()
        .withMiddleware(((c, context, next) =>
          c.id === "t" ? context.deny({ ruleId: "no", message: "no" }) : next()) satisfies Middleware)
        .withObserver({
          onToolPre: down,
          onGate: down,
          onToolPost: down,
        })
        .withObserverErrorHandler(down),
      async ({ call }) => {
        await expect(call("t", down)).resolves.toMatchObject({ type: "refused", record: { ruleId: "no" } });
      },
    ],
    [
      "refused by a middleware that throws",
      new LoopManagers().withMiddleware((c, _context, next) => (c.id === "t" ? down() : next())),
      async ({ call }) => {
        await expect(call("t", down)).resolves.toMatchObject({ type: "refused", record: { ruleId: "middleware" } });
      },
    ],
    [
      "its failure never reported (the clock throws once the tool ran)",
      new LoopManagers(),
      async ({ call, setTrap }) => {
        const outcome = await call("t", () => {
          setTrap(down);
          throw new Error("still down");
        });
        expect(outcome.type).toBe("failed");
      },
    ],
  ];

  for (const [name, managers, end] of endings) {
    it(name, async () => {
      const opened = await openGate(managers);
      await opened.clock.advance(COOLDOWN);
      await end(opened);
      const tool = heldTool();
      const next = opened.call("n1", tool.execute);
      await settledAt(tool.runs, 1);
      expect(tool.runs).toHaveLength(1);
      // Still one at a time.
      await expectRefused(opened.call("n2", tool.execute));
      tool.runs[0]!.resolve("up");
      await expect(next).resolves.toMatchObject({ type: "ran", output: "up" });
    });
  }

  it("a loop-detection stop that cancels the trial in its wave frees the slot for the agent's next run", async () => {
    const clock = new ManualClock(0);
    const tool = heldTool();
    const flakyTool = defineTool({
      name: "flaky",
      description: "f",
      input: z.object({ id: z.string() }),
      execute: tool.execute,
    });
    const same = defineTool({ name: "same", description: "s", input: z.object({}), execute: () => "x" });
    // Each call of `flaky` with arguments of its own (loop detection counts only the `same` ones).
    const turn = (...ids: string[]) => ({
      toolCalls: ids.map((id) =>
        id.startsWith("f") ? { id, name: "flaky", input: { id } } : { id, name: "same", input: {} },
      ),
    });
    const model = new ScriptedModel([
      turn("f1"),
      { text: "1" },
      turn("f2", "s1", "s2"),
      turn("f3", "f4"),
      { text: "3" },
    ]);
    const agent = new Agent({
      model,
      tools: [flakyTool, same],
      managers: new LoopManagers()
        .withClock(clock)
        .withMaxConcurrency(3)
        .withLoopDetection({ maxRepeats: 1 })
        // The repeated call reaches pre-detection only once the trial runs.
        .withHook({
          preToolUse: async (c) => {
            if (c.name === "same") await until(() => tool.runs.length === 2);
            return { type: "allow" };
          },
        })
        .withCircuitBreaker({ failureThreshold: 1, cooldownMs: COOLDOWN }),
    });
    const first = agent.run("a");
    await until(() => tool.runs.length === 1);
    tool.runs[0]!.reject(new Error("down"));
    await first;
    await clock.advance(COOLDOWN);

    const stopped = await agent.run("b").catch((e: unknown) => e);
    expect(stopped).toBeInstanceOf(LoopDetectedError);
    const records = (stopped as LoopDetectedError).records.map((r) => [r.tool, r.verdict, r.reason]);
    expect(records).toHaveLength(3);
    expect(records).toEqual(
      expect.arrayContaining([
        ["flaky", "cancelled", "cancelled during execution"],
        ["same", "allow", null],
        ["same", "deny", expect.stringMatching(/^dispatch refused before execution/)],
      ]),
    );

    const third = agent.run("c");
    await settledAt(tool.runs, 3);
    expect(tool.runs).toHaveLength(3);
    tool.runs[2]!.resolve("up");
    expect((await third).records.map((r) => [r.tool, r.ruleId])).toEqual([
      ["flaky", "circuit_breaker"],
      ["flaky", "hook"],
    ]);
  });

  it("a trial that ends after the breaker closed and opened again frees nothing: the trial of the new opening keeps its place", async () => {
    const { clock, call } = breakerGate();
    const tool = heldTool();
    // Let through while the breaker was closed, it succeeds only once the trial runs.
    const early = call("early", tool.execute);
    await until(() => tool.runs.length === 1);
    expect((await call("c1", down)).type).toBe("failed");
    await clock.advance(COOLDOWN);
    const controller = new AbortController();
    const firstTrial = call("t1", tool.execute, controller.signal);
    await settledAt(tool.runs, 2);
    tool.runs[0]!.resolve("up");
    await expect(early).resolves.toMatchObject({ type: "ran" });
    expect((await call("c2", down)).type).toBe("failed");
    await clock.advance(COOLDOWN);
    const secondTrial = call("t2", tool.execute);
    await settledAt(tool.runs, 3);
    expect(tool.runs).toHaveLength(3);
    controller.abort();
    await expect(firstTrial).rejects.toBeInstanceOf(CancelledError);
    await expectRefused(call("c3", tool.execute));
    tool.runs[2]!.resolve("up");
    await expect(secondTrial).resolves.toMatchObject({ type: "ran" });
  });

  it("a failure of a call let through before the breaker opened re-opens it; the trial still running keeps its place until it ends", async () => {
    const { clock, call } = breakerGate();
    const tool = heldTool();
    const early = call("early", tool.execute);
    await until(() => tool.runs.length === 1);
    expect((await call("c1", down)).type).toBe("failed");
    await clock.advance(COOLDOWN);
    const controller = new AbortController();
    const trial = call("t1", tool.execute, controller.signal);
    await settledAt(tool.runs, 2);
    tool.runs[0]!.reject(new Error("down"));
    await expect(early).resolves.toMatchObject({ type: "failed" });
    await clock.advance(COOLDOWN);
    await expectRefused(call("c2", tool.execute));
    controller.abort();
    await expect(trial).rejects.toBeInstanceOf(CancelledError);
    const next = call("t2", tool.execute);
    await settledAt(tool.runs, 3);
    expect(tool.runs).toHaveLength(3);
    tool.runs[2]!.resolve("up");
    await expect(next).resolves.toMatchObject({ type: "ran" });
  });
});

describe("property: the half-open breaker lets a call through exactly when no call is past it and the cool-down since the last failure has passed", () => {
  type Op =
    | { readonly type: "start"; readonly kind: "run" | "deny" | "throw" }
    | { readonly type: "fail" | "abort"; readonly pick: number }
    | { readonly type: "advance"; readonly ms: number };
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({
      type: fc.constant("start" as const),
      kind: fc.constantFrom("run" as const, "deny" as const, "throw" as const),
    }),
    fc.record({ type: fc.constantFrom("fail" as const, "abort" as const), pick: fc.nat() }),
    fc.record({ type: fc.constant("advance" as const), ms: fc.constantFrom(0, 400, 999, 1_000) }),
  );

  it("over any interleaving of calls, failures, cancels, middleware refusals and time (the tool never recovers)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 30 }), async (ops) => {
        interface Call {
          readonly controller: AbortController;
          run: Deferred<string> | undefined;
          entered: boolean;
          settled: boolean;
        }
        const calls = new Map<string, Call>();
        const kinds = new Map<string, "run" | "deny" | "throw">();
        const middleware: Middleware = (c, context, next) => {
          const entry = calls.get(c.id);
          // The call that opens the breaker.
          if (entry === undefined) return next();
          entry.entered = true;
          if (kinds.get(c.id) === "deny") return context.deny({ ruleId: "no", message: "no" });
          if (kinds.get(c.id) === "throw") throw new Error("middleware down");
          return next();
        };
        const { clock, call } = await openGate(new LoopManagers().withMiddleware(middleware));
        let lastFailure = 0;
        const start = async (id: string, kind: "run" | "deny" | "throw"): Promise<void> => {
          const entry: Call = { controller: new AbortController(), run: undefined, entered: false, settled: false };
          calls.set(id, entry);
          kinds.set(id, kind);
          const past = [...calls.values()].filter((c) => c.entered && !c.settled).length;
          const admitted = past === 0 && clock.now() - lastFailure >= COOLDOWN;
          const outcome = call(
            id,
            () => {
              entry.run = deferred<string>();
              return entry.run.promise;
            },
            entry.controller.signal,
          );
          void outcome.then(
            () => (entry.settled = true),
            () => (entry.settled = true),
          );
          await flush();
          await flush();
          expect(entry.entered).toBe(admitted);
          if (!admitted) expect(await outcome).toMatchObject(refused);
        };
        let n = 0;
        for (const step of ops) {
          const live = [...calls.values()].filter((c) => !c.settled);
          switch (step.type) {
            case "start":
              await start(`c${++n}`, step.kind);
              break;
            case "fail": {
              const running = live.filter((c) => c.run !== undefined);
              const target = running[step.pick % Math.max(running.length, 1)];
              if (target === undefined) break;
              target.run!.reject(new Error("still down"));
              lastFailure = clock.now();
              break;
            }
            case "abort":
              live[step.pick % Math.max(live.length, 1)]?.controller.abort();
              break;
            case "advance":
              await clock.advance(step.ms);
              break;
          }
          await flush();
          await flush();
          expect([...calls.values()].filter((c) => c.entered && !c.settled).length).toBeLessThanOrEqual(1);
        }
        // Never stuck: once every call has ended and a cool-down has passed, a call goes through.
        for (const c of calls.values()) c.controller.abort();
        await flush();
        await clock.advance(COOLDOWN);
        await start("last", "run");
        expect(calls.get("last")!.entered).toBe(true);
      }),
      { numRuns: RUNS },
    );
  });
});
