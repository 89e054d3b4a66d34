import { isAbortSignal } from "../abort-signal.js";
import type { AskResolver } from "../ask/index.js";
import { approverGivenAsResolver } from "../ask/wrong-half.js";
import type { GrantStore } from "../grant/index.js";
import { shownValue } from "../errors.js";
import { isGrantStore } from "../grant/store.js";
import type { BudgetOptions } from "./budget.js";
import type { CircuitBreakerOptions } from "./breaker.js";
import { systemClock } from "./clock.js";
import type { Clock, ClockInput } from "./clock.js";
import { EngineConfigError, knownKeys, readingConfig } from "./errors.js";
import type { Hook } from "./hooks.js";
import { randomIdGen } from "./ids.js";
import type { IdGen } from "./ids.js";
import type { LoopDetectionOptions } from "./loop-detector.js";
import type { Middleware } from "./middleware.js";
import { OBSERVER_EVENTS } from "./observer.js";
import type { Observer, ObserverErrorHandler } from "./observer.js";
import { meantOption, shownKey } from "../unknown-option.js";

/** Everything a {@link LoopManagers} holds, as the engine reads it (internal). */
export interface ManagerSettings {
  readonly askResolver: AskResolver | undefined;
  readonly askTimeoutMs: number | undefined;
  readonly hooks: readonly Hook[];
  /** Runs after `hooks` when they allow or modify (see {@link withApprovalHook}). */
  readonly approvalHook: Hook | undefined;
  readonly middleware: readonly Middleware[];
  readonly observers: readonly Observer[];
  readonly observerErrorHandler: ObserverErrorHandler | undefined;
  readonly idGen: IdGen;
  readonly clock: Clock;
  readonly maxConcurrency: number;
  readonly grantStore: GrantStore | undefined;
  readonly budget: BudgetOptions | undefined;
  readonly loopDetection: LoopDetectionOptions | undefined;
  readonly circuitBreaker: CircuitBreakerOptions | undefined;
}

const DEFAULTS: ManagerSettings = Object.freeze({
  askResolver: undefined,
  askTimeoutMs: undefined,
  hooks: [],
  approvalHook: undefined,
  middleware: [],
  observers: [],
  observerErrorHandler: undefined,
  idGen: randomIdGen,
  clock: systemClock,
  maxConcurrency: 1,
  grantStore: undefined,
  budget: undefined,
  loopDetection: undefined,
  circuitBreaker: undefined,
});

const MAX_TIMER_MS = 2_147_483_647;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/** What an argument that should have been an object was, for the refusal: a signal is named as one. */
function shownArgument(value: unknown): string {
  return isAbortSignal(value) ? "an AbortSignal" : shownValue(value);
}

/**
 * Refuses a member of `observer`, its own or its class's, named as an event
 * handler (`onGat`, `ongate`, `onRunEnd`) that is no {@link OBSERVER_EVENTS}
 * event: it would never be called, and every event it was meant for lost,
 * unsaid. Other members (state, helpers) are the observer's own business.
 */
function refuseUnknownEvents(observer: object): void {
  const events: readonly string[] = OBSERVER_EVENTS;
  for (let layer: object | null = observer; layer !== null && layer !== Object.prototype;) {
    for (const name of Object.getOwnPropertyNames(layer)) {
      if (events.includes(name) || name === "constructor") continue;
      const meant = meantOption(name, events);
      if (meant === undefined && !/^on[A-Z_]/.test(name)) continue;
      const hint =
        meant !== undefined
          ? `did you mean ${meant}?`
          : name === "onError"
            ? "an observer's errors go to withObserverErrorHandler"
            : `the events are ${events.slice(0, -1).join(", ")} and ${events.at(-1) ?? ""}`;
      throw new EngineConfigError(
        "withObserver",
        `${shownKey(name)} is no observer event: it would never be called (${hint})`,
      );
    }
    layer = Object.getPrototypeOf(layer) as object | null;
  }
}

function positiveInteger(option: string, field: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new EngineConfigError(option, `${field} must be a positive integer, got ${shownValue(value)}`);
  }
  return value;
}

function nonNegative(option: string, field: string, value: unknown, integer: boolean): number {
  const ok =
    typeof value === "number" && Number.isFinite(value) && value >= 0 && (!integer || Number.isSafeInteger(value));
  if (!ok) {
    throw new EngineConfigError(
      option,
      `${field} must be a non-negative ${integer ? "integer" : "finite number"}, got ${shownValue(value)}`,
    );
  }
  return value;
}

/** The settings of `managers`, for the engine's own modules. */
export let settingsOf!: (managers: LoopManagers) => ManagerSettings;

/**
 * `managers` with `hook` as its approval hook, for an adapter whose SDK
 * decides that a call needs approval (`loopctl/openai-agents`); internal.
 * The approval hook runs after the hooks whenever they allow or modify, on
 * the arguments the call goes on with, so no hook's `allow` or `modify`
 * can skip the ask it raises.
 */
export let withApprovalHook!: (managers: LoopManagers, hook: Hook) => LoopManagers;

// Set in the class's static block, which names the class `this`: a class that names itself in its
// own body is renamed by the bundler (`var LoopManagers = class _LoopManagers`).
let managersOf: (settings: ManagerSettings) => LoopManagers;

/**
 * The engine's pluggable parts, as an immutable builder: every `with…`
 * returns a new `LoopManagers` and leaves the receiver untouched, so a base
 * configuration can be shared and specialised. Invalid arguments throw an
 * {@link EngineConfigError} naming the method.
 *
 * @example
 * ```ts
 * const managers = new LoopManagers()
 *   .withHook(guard)
 *   .withAskResolver(channel)
 *   .withAskTimeout(60_000)
 *   .withMiddleware(permissionMiddleware({ rules, defaultAction: "allow" }));
 * ```
 */
export class LoopManagers {
  #settings: ManagerSettings = DEFAULTS;

  static {
    settingsOf = (managers) => managers.#settings;
    withApprovalHook = (managers, hook) => managers.#with({ approvalHook: hook });
    managersOf = (settings) => {
      const managers = new this();
      managers.#settings = Object.freeze({
        ...settings,
        hooks: Object.freeze([...settings.hooks]),
        middleware: Object.freeze([...settings.middleware]),
        observers: Object.freeze([...settings.observers]),
      });
      return managers;
    };
  }

  #with(patch: Partial<ManagerSettings>): LoopManagers {
    return managersOf({ ...this.#settings, ...patch });
  }

  /** Who answers asks. Without one, an ask is the headless denial (`ask_unresolved`). */
  withAskResolver(resolver: AskResolver): LoopManagers {
    return readingConfig("withAskResolver", "the argument", () => {
      if (!isObject(resolver) || typeof resolver.resolve !== "function") {
        throw new EngineConfigError("withAskResolver", "the resolver must have a resolve(ask, { signal }) method");
      }
      const wrongHalf = approverGivenAsResolver(resolver);
      if (wrongHalf !== undefined) throw new EngineConfigError("withAskResolver", wrongHalf);
      return this.#with({ askResolver: resolver });
    });
  }

  /**
   * Bounds each park (delivery plus the wait) to `ms` clock milliseconds;
   * `0` still lets an answer that is already available win. At most
   * 2147483647 (the largest timer delay).
   * @default no deadline
   */
  withAskTimeout(ms: number): LoopManagers {
    nonNegative("withAskTimeout", "ms", ms, false);
    if (ms > MAX_TIMER_MS) {
      // Node fires a longer timer at once; an "effectively forever" deadline would expire immediately.
      throw new EngineConfigError("withAskTimeout", `ms must be at most ${MAX_TIMER_MS} (about 24.8 days), got ${ms}`);
    }
    return this.#with({ askTimeoutMs: ms });
  }

  /** Adds a pre-tool-use hook after the ones already added. */
  withHook(hook: Hook): LoopManagers {
    return readingConfig("withHook", "the argument", () => {
      if (!isObject(hook) || typeof hook.preToolUse !== "function") {
        throw new EngineConfigError("withHook", "a hook must have a preToolUse(call, context) method");
      }
      return this.#with({ hooks: [...this.#settings.hooks, hook] });
    });
  }

  /** Adds a dispatch middleware; the first added runs outermost. */
  withMiddleware(middleware: Middleware): LoopManagers {
    if (typeof middleware !== "function") {
      throw new EngineConfigError("withMiddleware", "a middleware must be a function (call, context, next)");
    }
    return this.#with({ middleware: [...this.#settings.middleware, middleware] });
  }

  /**
   * Adds an observer. One of its event names holding anything but a function
   * is refused, naming it, and so is a member named as a handler of an event
   * there is none of (`onGat`, `onRunEnd`), its own or its class's.
   */
  withObserver(observer: Observer): LoopManagers {
    return readingConfig("withObserver", "the argument", () => {
      if (!isObject(observer) || isAbortSignal(observer))
        throw new EngineConfigError("withObserver", `an observer must be an object, got ${shownArgument(observer)}`);
      // A method that is not a function would never be called: every event it was meant for lost, unsaid.
      for (const event of OBSERVER_EVENTS) {
        const method: unknown = observer[event];
        if (method !== undefined && typeof method !== "function")
          throw new EngineConfigError("withObserver", `${event} must be a function, got ${shownValue(method)}`);
      }
      refuseUnknownEvents(observer);
      return this.#with({ observers: [...this.#settings.observers, observer] });
    });
  }

  /** Receives errors thrown by observers (they never break a run). */
  withObserverErrorHandler(handler: ObserverErrorHandler): LoopManagers {
    if (typeof handler !== "function")
      throw new EngineConfigError("withObserverErrorHandler", "the handler must be a function");
    return this.#with({ observerErrorHandler: handler });
  }

  /**
   * The id seam for session, run and ask ids.
   * @default crypto.randomUUID
   */
  withIdGen(idGen: IdGen): LoopManagers {
    if (typeof idGen !== "function") throw new EngineConfigError("withIdGen", "the id generator must be a function");
    return this.#with({ idGen });
  }

  /**
   * The time seam: record timestamps and ask deadlines. Give `setTimeout` and
   * `clearTimeout` together, or neither to keep the system timers. A `now()`
   * that gives anything but a finite number is read as one that throws: a
   * record takes the system time instead, and a step that needs the time
   * before the tool runs (the circuit breaker's check) refuses the call.
   * @default Date.now and the global timers
   */
  withClock(clock: ClockInput): LoopManagers {
    return readingConfig("withClock", "the argument", () => {
      if (!isObject(clock) || typeof clock.now !== "function") {
        throw new EngineConfigError("withClock", "the clock must have a now() method");
      }
      const hasSet = typeof clock.setTimeout === "function";
      const hasClear = typeof clock.clearTimeout === "function";
      if (hasSet !== hasClear || (!hasSet && (clock.setTimeout !== undefined || clock.clearTimeout !== undefined))) {
        throw new EngineConfigError("withClock", "setTimeout and clearTimeout must be functions given together");
      }
      const full: Clock = {
        now: () => {
          const ms: unknown = clock.now();
          // Read as a clock that throws: a record never carries NaN, and the breaker never compares against it.
          if (typeof ms !== "number" || !Number.isFinite(ms)) {
            throw new EngineConfigError(
              "withClock",
              `now() must return a finite number of epoch ms, got ${typeof ms === "number" ? String(ms) : typeof ms}`,
            );
          }
          return ms;
        },
        setTimeout: hasSet ? (cb, ms) => clock.setTimeout!(cb, ms) : (cb, ms) => systemClock.setTimeout(cb, ms),
        clearTimeout: hasClear ? (handle) => clock.clearTimeout!(handle) : (handle) => systemClock.clearTimeout(handle),
      };
      return this.#with({ clock: full });
    });
  }

  /**
   * How many calls of one model turn run at once.
   * @default 1
   */
  withMaxConcurrency(n: number): LoopManagers {
    return this.#with({ maxConcurrency: positiveInteger("withMaxConcurrency", "n", n) });
  }

  /** Remembers answers given with `remember`, and decides asks from them ("ask once and remember"). */
  withGrantStore(store: GrantStore): LoopManagers {
    return readingConfig("withGrantStore", "the argument", () => {
      if (!isGrantStore(store))
        throw new EngineConfigError("withGrantStore", "the store must implement load, save, revoke and clear");
      return this.#with({ grantStore: store });
    });
  }

  /**
   * Limits model requests and tokens per run, checked before each model
   * request. `maxTurns: Infinity` lifts the default cap.
   * @default { maxTurns: DEFAULT_MAX_TURNS } (20 model requests), no token limit
   */
  withBudget(budget: BudgetOptions): LoopManagers {
    return readingConfig("withBudget", "the argument", () => {
      knownKeys("withBudget", budget, ["maxTurns", "maxTokens"], { what: "the budget" });
      // Each limit read once: a getter must not give the check one value and the run another (NaN: no cap).
      const { maxTurns, maxTokens } = budget;
      const next: { maxTurns?: number; maxTokens?: number } = {};
      if (maxTurns === Number.POSITIVE_INFINITY) next.maxTurns = maxTurns;
      else if (maxTurns !== undefined) next.maxTurns = nonNegative("withBudget", "maxTurns", maxTurns, true);
      if (maxTokens !== undefined) next.maxTokens = nonNegative("withBudget", "maxTokens", maxTokens, true);
      return this.#with({ budget: Object.freeze(next) });
    });
  }

  /**
   * Stops a run whose same call (tool and arguments) reaches dispatch more
   * than `maxRepeats` times; repeated calls to an unknown tool, or with
   * arguments that fail the schema or are not JSON, count too (see {@link LoopDetectionOptions}).
   */
  withLoopDetection(options: LoopDetectionOptions): LoopManagers {
    return readingConfig("withLoopDetection", "the argument", () => {
      knownKeys("withLoopDetection", options, ["maxRepeats"]);
      return this.#with({
        loopDetection: Object.freeze({
          maxRepeats: positiveInteger("withLoopDetection", "maxRepeats", options.maxRepeats),
        }),
      });
    });
  }

  /**
   * Refuses a tool for `cooldownMs` after `failureThreshold` consecutive failures. State is per `Gate` (an `Agent` has one).
   * An option other than these two is refused, naming it.
   */
  withCircuitBreaker(options: CircuitBreakerOptions): LoopManagers {
    return readingConfig("withCircuitBreaker", "the argument", () => {
      knownKeys("withCircuitBreaker", options, ["failureThreshold", "cooldownMs"], {
        shape: "{ failureThreshold, cooldownMs }",
      });
      return this.#with({
        circuitBreaker: Object.freeze({
          failureThreshold: positiveInteger("withCircuitBreaker", "failureThreshold", options.failureThreshold),
          cooldownMs: nonNegative("withCircuitBreaker", "cooldownMs", options.cooldownMs, false),
        }),
      });
    });
  }
}
