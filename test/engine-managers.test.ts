import { describe, expect, it } from "vitest";
import { SyncAskResolver } from "../src/ask/index.js";
import { EngineConfigError, LoopManagers, randomIdGen, seededIdGen, systemClock } from "../src/engine/index.js";

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("LoopManagers", () => {
  it("is immutable: every with… returns a new builder and leaves the receiver untouched", () => {
    const base = new LoopManagers();
    const hook = { preToolUse: () => ({ type: "allow" as const }) };
    const withHook = base.withHook(hook);
    const withTwo = withHook.withHook(hook);
    expect(withHook).not.toBe(base);
    expect(base.settings.hooks).toHaveLength(0);
    expect(withHook.settings.hooks).toHaveLength(1);
    expect(withTwo.settings.hooks).toHaveLength(2);
    expect(Object.isFrozen(withTwo.settings)).toBe(true);
    expect(Object.isFrozen(withTwo.settings.hooks)).toBe(true);
  });

  it("has fail-safe defaults", () => {
    const s = new LoopManagers().settings;
    expect(s).toMatchObject({ askResolver: undefined, askTimeoutMs: undefined, maxConcurrency: 1, grantStore: undefined, budget: undefined });
    expect(s.idGen).toBe(randomIdGen);
    expect(s.clock).toBe(systemClock);
  });

  it("stores each option", () => {
    const resolver = new SyncAskResolver(() => true);
    const m = new LoopManagers()
      .withAskResolver(resolver)
      .withAskTimeout(0)
      .withMaxConcurrency(4)
      .withBudget({ maxTurns: 3 })
      .withLoopDetection({ maxRepeats: 2 })
      .withCircuitBreaker({ failureThreshold: 3, cooldownMs: 1_000 })
      .withClock({ now: () => 7 });
    expect(m.settings).toMatchObject({
      askResolver: resolver,
      askTimeoutMs: 0,
      maxConcurrency: 4,
      budget: { maxTurns: 3 },
      loopDetection: { maxRepeats: 2 },
      circuitBreaker: { failureThreshold: 3, cooldownMs: 1_000 },
    });
    expect(m.settings.clock.now()).toBe(7);
    expect(typeof m.settings.clock.setTimeout).toBe("function");
  });

  const bad: [string, (m: LoopManagers) => unknown][] = [
    ["withAskResolver", (m) => m.withAskResolver({} as never)],
    ["withAskTimeout", (m) => m.withAskTimeout(-1)],
    ["withAskTimeout", (m) => m.withAskTimeout(Number.NaN)],
    ["withAskTimeout", (m) => m.withAskTimeout(Number.POSITIVE_INFINITY)],
    ["withAskTimeout", (m) => m.withAskTimeout(2 ** 31)],
    ["withHook", (m) => m.withHook({} as never)],
    ["withMiddleware", (m) => m.withMiddleware("mw" as never)],
    ["withObserver", (m) => m.withObserver(null as never)],
    ["withObserverErrorHandler", (m) => m.withObserverErrorHandler(1 as never)],
    ["withIdGen", (m) => m.withIdGen("id" as never)],
    ["withClock", (m) => m.withClock({} as never)],
    ["withClock", (m) => m.withClock({ now: () => 0, setTimeout: () => 0 } as never)],
    ["withMaxConcurrency", (m) => m.withMaxConcurrency(0)],
    ["withMaxConcurrency", (m) => m.withMaxConcurrency(1.5)],
    ["withGrantStore", (m) => m.withGrantStore({ load: () => [] } as never)],
    ["withBudget", (m) => m.withBudget({ maxTurns: -1 })],
    ["withBudget", (m) => m.withBudget({ maxTokens: 0.5 })],
    ["withBudget", (m) => m.withBudget(null as never)],
    ["withLoopDetection", (m) => m.withLoopDetection({ maxRepeats: 0 })],
    ["withCircuitBreaker", (m) => m.withCircuitBreaker({ failureThreshold: 0, cooldownMs: 1 })],
    ["withCircuitBreaker", (m) => m.withCircuitBreaker({ failureThreshold: 1, cooldownMs: -1 })],
  ];
  it.each(bad)("%s rejects invalid arguments with an EngineConfigError naming it (%#)", (option, apply) => {
    let thrown: unknown;
    try {
      apply(new LoopManagers());
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(EngineConfigError);
    expect((thrown as EngineConfigError).code).toBe("ENGINE_CONFIG");
    expect((thrown as EngineConfigError).option).toBe(option);
    expect((thrown as Error).message.startsWith(`${option}: `)).toBe(true);
  });
});

describe("id generators", () => {
  it("randomIdGen yields distinct v4 UUIDs", () => {
    const ids = Array.from({ length: 50 }, randomIdGen);
    expect(new Set(ids).size).toBe(50);
    for (const id of ids) expect(id).toMatch(UUID_V4);
  });

  it("seededIdGen is reproducible, v4-shaped and seed-dependent", () => {
    const a = seededIdGen("seed");
    const b = seededIdGen("seed");
    const c = seededIdGen(1);
    const first = Array.from({ length: 20 }, a);
    expect(Array.from({ length: 20 }, b)).toEqual(first);
    expect(new Set(first).size).toBe(20);
    for (const id of first) expect(id).toMatch(UUID_V4);
    expect(c()).not.toBe(first[0]);
  });

  it("seededIdGen rejects a seed it cannot use", () => {
    expect(() => seededIdGen(Number.NaN)).toThrow(EngineConfigError);
    expect(() => seededIdGen({} as never)).toThrow(EngineConfigError);
  });
});
