import { describe, expect, it } from "vitest";
import { ApprovalChannel, SyncAskResolver } from "../src/ask/index.js";
import {
  Agent,
  DEFAULT_MAX_TURNS,
  EngineConfigError,
  Gate,
  LoopManagers,
  randomIdGen,
  seededIdGen,
} from "../src/engine/index.js";

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("LoopManagers", () => {
  const descriptor = { name: "read", description: "Read a file", inputSchema: { type: "object" } };
  const verdictOf = async (managers: LoopManagers): Promise<string> =>
    (await new Gate(managers).call({ tool: descriptor, callId: "c1", input: {} }, () => "ok")).record.verdict;

  it("is immutable: every with… returns a new builder and leaves the receiver untouched", async () => {
    const base = new LoopManagers();
    const blocking = base.withHook({ preToolUse: () => ({ type: "block", reason: "no" }) });
    const asking = base.withHook({ preToolUse: () => ({ type: "ask", prompt: "?" }) });
    expect(blocking).not.toBe(base);
    expect(await verdictOf(base)).toBe("allow");
    expect(await verdictOf(blocking)).toBe("deny");
    expect(await verdictOf(asking)).toBe("ask_unresolved");
    expect(await verdictOf(asking.withAskResolver(new SyncAskResolver(() => true)))).toBe("ask_allowed");
    expect(await verdictOf(asking)).toBe("ask_unresolved");
  });

  it("has fail-safe defaults: no resolver (an ask is the headless denial), the system clock, random ids, the default turn cap", async () => {
    const gate = new Gate(new LoopManagers().withHook({ preToolUse: () => ({ type: "ask", prompt: "May I?" }) }));
    const before = Date.now();
    const outcome = await gate.call({ tool: descriptor, callId: "c1", input: {} }, () => "ok");
    expect(outcome).toMatchObject({ type: "refused", message: "May I?", record: { verdict: "ask_unresolved" } });
    expect(outcome.record.ts).toBeGreaterThanOrEqual(before);
    const forever = new Agent({
      model: { generate: async () => ({ toolCalls: [{ id: "", name: "read", input: {} }] }) },
      tools: [],
    });
    expect(forever.sessionId).toMatch(UUID_V4);
    await expect(forever.run("go")).rejects.toMatchObject({ code: "BUDGET_EXCEEDED", limit: DEFAULT_MAX_TURNS });
  });

  it("uses each option it stores (the rest are exercised by their own tests)", async () => {
    const gate = new Gate(
      new LoopManagers().withClock({ now: () => 7 }).withBudget({ maxTurns: Number.POSITIVE_INFINITY }),
    );
    const outcome = await gate.call({ tool: descriptor, callId: "c1", input: {} }, () => "ok");
    expect(outcome.record.ts).toBe(7);
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
    // A method that is not one would never be called: every event it was meant for, lost unsaid.
    ["withObserver", (m) => m.withObserver({ onGate: "log" } as never)],
    ["withObserver", (m) => m.withObserver({ onToolPost: {} } as never)],
    ["withObserver", (m) => m.withObserver({ onGat: () => undefined } as never)],
    ["withObserverErrorHandler", (m) => m.withObserverErrorHandler(1 as never)],
    ["withIdGen", (m) => m.withIdGen("id" as never)],
    ["withClock", (m) => m.withClock({} as never)],
    ["withClock", (m) => m.withClock({ now: () => 0, setTimeout: () => 0 })],
    ["withMaxConcurrency", (m) => m.withMaxConcurrency(0)],
    ["withMaxConcurrency", (m) => m.withMaxConcurrency(1.5)],
    ["withGrantStore", (m) => m.withGrantStore({ load: () => [] } as never)],
    ["withBudget", (m) => m.withBudget({ maxTurns: -1 })],
    ["withBudget", (m) => m.withBudget({ maxTokens: 0.5 })],
    ["withBudget", (m) => m.withBudget(null as never)],
    ["withLoopDetection", (m) => m.withLoopDetection({ maxRepeats: 0 })],
    // A signal has no keys of its own: read as a budget, it would be an empty one, unsaid.
    ["withBudget", (m) => m.withBudget(new AbortController().signal as never)],
    // An array has none either: read as a budget, `[5]` would lift no cap and set none.
    ["withBudget", (m) => m.withBudget([5] as never)],
    ["withLoopDetection", (m) => m.withLoopDetection([] as never)],
    // A misspelt limit would otherwise leave the default in force (20 turns) or none at all, unsaid.
    ["withBudget", (m) => m.withBudget({ maxTurn: 5 } as never)],
    ["withBudget", (m) => m.withBudget({ maxTurns: 5, maxTokenCount: 100 } as never)],
    ["withLoopDetection", (m) => m.withLoopDetection({ maxRepeats: 2, window: 10 } as never)],
    ["withCircuitBreaker", (m) => m.withCircuitBreaker({ failureThreshold: 0, cooldownMs: 1 })],
    ["withCircuitBreaker", (m) => m.withCircuitBreaker({ failureThreshold: 1, cooldownMs: -1 })],
    ["withCircuitBreaker", (m) => m.withCircuitBreaker({ failureThreshold: 1, cooldownMs: 1, cooldown: 5 } as never)],
    // Values with no string form: naming them must not turn the typed error into a TypeError.
    ["withAskTimeout", (m) => m.withAskTimeout(Object.create(null) as never)],
    ["withMaxConcurrency", (m) => m.withMaxConcurrency({ toString: () => ({}) } as never)],
  ];
  it("withObserver names the event whose handler is not a function", () => {
    expect(() => new LoopManagers().withObserver({ onGate: "log" } as never)).toThrow(
      new EngineConfigError("withObserver", 'onGate must be a function, got "log"'),
    );
    // Methods of a class, and members that are not events, are taken as they are.
    class Audit {
      seen = 0;
      onGate(): void {
        this.seen += 1;
      }
    }
    expect(() =>
      new LoopManagers().withObserver(new Audit()).withObserver({ onGate: undefined } as never),
    ).not.toThrow();
  });

  it("withCircuitBreaker refuses an option it does not take, or options that are not an object, naming it", () => {
    const refused = (options: unknown, message: string): void => {
      expect(() => new LoopManagers().withCircuitBreaker(options as never)).toThrow(
        new EngineConfigError("withCircuitBreaker", message),
      );
    };
    // Ignored, a misspelt cool-down would leave the breaker open with none: the tool refused until the next success.
    refused({ failureThreshold: 3, cooldownMS: 30_000 }, "unknown option 'cooldownMS' (did you mean cooldownMs?)");
    refused(
      { failureThreshold: 3, cooldownMs: 30_000, failureTreshold: 5 },
      "unknown option 'failureTreshold' (did you mean failureThreshold?)",
    );
    refused(
      { failureThreshold: 3, cooldownMs: 30_000, halfOpenCalls: 2 },
      "unknown option 'halfOpenCalls' (the options are failureThreshold and cooldownMs)",
    );
    refused(new AbortController().signal, "options must be { failureThreshold, cooldownMs }, got an AbortSignal");
    refused(3, "options must be { failureThreshold, cooldownMs }, got 3");
    refused(null, "options must be { failureThreshold, cooldownMs }, got null");
    refused([3, 30_000], "options must be { failureThreshold, cooldownMs }, got an array");
    expect(() => new LoopManagers().withCircuitBreaker({ failureThreshold: 3, cooldownMs: 0 })).not.toThrow();
  });

  it("withObserver refuses a handler name that is no event, which would never be called, saying the one likely meant", () => {
    const refused = (observer: unknown, message: string): void => {
      expect(() => new LoopManagers().withObserver(observer as never)).toThrow(
        new EngineConfigError("withObserver", message),
      );
    };
    const log = (): void => undefined;
    refused({ onGat: log }, "'onGat' is no observer event: it would never be called (did you mean onGate?)");
    refused({ ongate: log }, "'ongate' is no observer event: it would never be called (did you mean onGate?)");
    refused(
      { onGate: log, onToolPot: log },
      "'onToolPot' is no observer event: it would never be called (did you mean onToolPost?)",
    );
    refused(
      { onRunEnd: log },
      "'onRunEnd' is no observer event: it would never be called (the events are onModelRequest, onModelResponse, onToolPre, onGate, onToolPost and onGrantError)",
    );
    // Errors go to withObserverErrorHandler, never to an observer's method.
    refused(
      { onGate: log, onError: log },
      "'onError' is no observer event: it would never be called (an observer's errors go to withObserverErrorHandler)",
    );
    // A class's methods count as its own: a misspelt one is never called either.
    class Misspelt {
      onGat(): void {}
    }
    refused(new Misspelt(), "'onGat' is no observer event: it would never be called (did you mean onGate?)");
    refused(new AbortController().signal, "an observer must be an object, got an AbortSignal");
    refused(log, "an observer must be an object, got a function");
    // Members that are no event handler (state, helpers) are the observer's own business.
    class Counting {
      seen = 0;
      once = true;
      readonly onlyTools: readonly string[] = ["read"];
      onGate(): void {
        this.seen += 1;
      }
      count(): number {
        return this.seen;
      }
    }
    expect(() => new LoopManagers().withObserver(new Counting())).not.toThrow();
    expect(() => new LoopManagers().withObserver({ seen: [], onGate: log } as never)).not.toThrow();
  });

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

  it("withAskResolver refuses the approver half of a pair, saying which half goes where", () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const message =
      "withAskResolver: got an approver (it has next() and ended()), the half that answers asks: " +
      "pass the resolver half here (the channel, the first of ApprovalChannel.pair(); a queue's " +
      "resolver, not its approver()) and give the approver to your UI";
    expect(() => new LoopManagers().withAskResolver(approver as never)).toThrow(
      new EngineConfigError("withAskResolver", message.slice("withAskResolver: ".length)),
    );
    expect(() => new LoopManagers().withAskResolver(channel)).not.toThrow();
    approver.close();
  });
});

describe("LoopManagers arguments whose reads throw", () => {
  const bomb = new Error("getter bomb");
  const fail = (): never => {
    throw bomb;
  };
  const revoked = (): never => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    return proxy as never;
  };
  const unreadable: [string, (m: LoopManagers) => unknown][] = [
    [
      "withAskResolver",
      (m) =>
        m.withAskResolver({
          get resolve(): never {
            return fail();
          },
        }),
    ],
    ["withAskResolver", (m) => m.withAskResolver(revoked())],
    [
      "withHook",
      (m) =>
        m.withHook({
          get preToolUse(): never {
            return fail();
          },
        }),
    ],
    ["withHook", (m) => m.withHook(revoked())],
    [
      "withClock",
      (m) =>
        m.withClock({
          get now(): never {
            return fail();
          },
        }),
    ],
    [
      "withClock",
      (m) =>
        m.withClock({
          now: () => 0,
          get setTimeout(): never {
            return fail();
          },
        }),
    ],
    [
      "withGrantStore",
      (m) =>
        m.withGrantStore({
          get load(): never {
            return fail();
          },
        } as never),
    ],
    [
      "withBudget",
      (m) =>
        m.withBudget({
          get maxTurns(): never {
            return fail();
          },
        }),
    ],
    [
      "withLoopDetection",
      (m) =>
        m.withLoopDetection({
          get maxRepeats(): never {
            return fail();
          },
        }),
    ],
    [
      "withCircuitBreaker",
      (m) =>
        m.withCircuitBreaker({
          get failureThreshold(): never {
            return fail();
          },
        } as never),
    ],
    ["withCircuitBreaker", (m) => m.withCircuitBreaker(revoked())],
  ];
  it("withBudget reads each limit once: the run is capped by the value it checked, never by a later read", async () => {
    // A getter that gives a valid limit once, then NaN (`turns >= NaN` never holds: no cap at all).
    const shifting = (first: number): { reads: number; get: () => number } => {
      const state = {
        reads: 0,
        get: (): number => {
          state.reads += 1;
          return state.reads === 1 ? first : Number.NaN;
        },
      };
      return state;
    };
    const turns = shifting(2);
    const capped = new LoopManagers().withBudget({
      get maxTurns() {
        return turns.get();
      },
    });
    expect(turns.reads).toBe(1);
    let requests = 0;
    const model = {
      generate: async () => {
        requests += 1;
        // Bounded, so a cap that does not hold fails the test instead of running on.
        if (requests > 10) throw new Error("the turn cap did not hold");
        return { toolCalls: [{ id: "", name: "read", input: {} }], usage: { inputTokens: 5, outputTokens: 5 } };
      },
    };
    await expect(new Agent({ model, tools: [], managers: capped }).run("go")).rejects.toMatchObject({
      code: "BUDGET_EXCEEDED",
      limit: 2,
    });
    expect(requests).toBe(2);
    const unbounded = shifting(Number.POSITIVE_INFINITY);
    new LoopManagers().withBudget({
      get maxTurns() {
        return unbounded.get();
      },
    });
    expect(unbounded.reads).toBe(1);
    const tokens = shifting(15);
    const byTokens = new LoopManagers().withBudget({
      get maxTokens() {
        return tokens.get();
      },
    });
    expect(tokens.reads).toBe(1);
    requests = 0;
    await expect(new Agent({ model, tools: [], managers: byTokens }).run("go")).rejects.toMatchObject({
      code: "BUDGET_EXCEEDED",
      limit: 15,
    });
    expect(requests).toBe(2);
  });

  it.each(unreadable)("%s names itself, with what was thrown as cause (%#)", (option, apply) => {
    let thrown: unknown;
    try {
      apply(new LoopManagers());
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(EngineConfigError);
    expect((thrown as EngineConfigError).option).toBe(option);
    expect((thrown as Error).message.startsWith(`${option}: the argument cannot be read: `)).toBe(true);
    expect((thrown as Error).cause).toBeDefined();
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
