// The fault matrix: one named scenario per fault, each a real Agent run with
// what it must end as. Shared by the in-process test and the child-process
// runner (test/support/reliability-scenario.ts).
import { ApprovalChannel } from "../../src/ask/index.js";
import type { AskResolver } from "../../src/ask/index.js";
import type { Hook, LoopManagers, Observer } from "../../src/engine/index.js";
import type { Grant, GrantStore } from "../../src/grant/index.js";
import { askHook, oneCall, runHarness } from "./reliability-harness.js";
import type { Ctl, ScenarioEnv, ScenarioReport } from "./reliability-harness.js";

/** What a scenario's run must end as. */
export interface Expectation {
  /** "resolved", or the stable `code` of the typed error the run rejects with. */
  readonly outcome: "resolved" | "CANCELLED" | "MODEL_ERROR";
  /** Record verdicts in emission order (sorted when `unordered`). */
  readonly verdicts: readonly string[];
  readonly unordered?: boolean;
  /** Call ids whose tool ran. */
  readonly executed: readonly string[];
  /** Calls approved in time whose run was cancelled before their dispatch (so they never ran). */
  readonly cancelledAfterApproval?: readonly string[];
  /** Exact tool-result texts the model received, by call id. */
  readonly results?: Readonly<Record<string, string>>;
}

export interface Scenario {
  readonly name: string;
  /** Needs `--expose-gc` (run only where `globalThis.gc` exists). */
  readonly gc?: boolean;
  readonly expect: Expectation;
  run(env: ScenarioEnv): Promise<ScenarioReport>;
}

const DENIED = "Permission denied by approver for tool 'act'";
const EXPIRED = "Permission ask expired unanswered for tool 'act'";
const HOOK_FAILED = "Permission denied: pre-tool-use hook failed for tool 'act'";

/** An object whose every read throws, as a hostile plug-in might hand back. */
function bomb(): object {
  const fail = (): never => {
    throw new Error("getter bomb");
  };
  return new Proxy({}, { get: fail, has: fail, ownKeys: fail, getOwnPropertyDescriptor: fail });
}

/** Fails the scenario (the driver's promise rejects, so the test sees it). */
function check(condition: boolean, what: string): void {
  if (!condition) throw new Error(`scenario check failed: ${what}`);
}

const parked = (ctl: Ctl, n = 1): Promise<void> => ctl.env.until(() => ctl.parks.length >= n, `${n} park(s)`);

function hangingHook(entered: { value: boolean }): Hook {
  return {
    name: "hangs",
    preToolUse: () => {
      entered.value = true;
      return new Promise<never>(() => undefined);
    },
  };
}

/** A grant store whose reads never settle (a hung network mount, say). */
function hangingStore(calls: { value: number }): GrantStore {
  const never = <T>(): Promise<T> => {
    calls.value += 1;
    return new Promise<T>(() => undefined);
  };
  return { load: never<Grant[]>, save: never<Grant>, revoke: never<Grant | undefined>, clear: never<number> };
}

const throwingStore: GrantStore = {
  load: () => Promise.reject(new Error("EIO: ledger unreadable")),
  save: () => Promise.reject(new Error("EIO")),
  revoke: () => Promise.reject(new Error("EIO")),
  clear: () => Promise.reject(new Error("EIO")),
};

function throwingObserver(): Observer {
  const boom = (): never => {
    throw new Error("observer bug");
  };
  return {
    onModelRequest: boom,
    onModelResponse: boom,
    onToolPre: boom,
    onToolPost: boom,
    // A returned promise is not awaited; its rejection must not surface either.
    onGate: () => Promise.reject(new Error("async observer bug")) as unknown as void,
    onGrantError: boom,
  };
}

const scenarios: Scenario[] = [
  // ---- hooks ----
  {
    name: "hook-throws",
    expect: { outcome: "resolved", verdicts: ["deny"], executed: [], results: { c1: HOOK_FAILED } },
    run: (env) =>
      runHarness(env, {
        hooks: [
          {
            preToolUse: () => {
              throw new Error("hook bug");
            },
          },
        ],
      }),
  },
  {
    name: "hook-rejects",
    expect: { outcome: "resolved", verdicts: ["deny"], executed: [], results: { c1: HOOK_FAILED } },
    run: (env) => runHarness(env, { hooks: [{ preToolUse: () => Promise.reject(new Error("hook down")) }] }),
  },
  {
    name: "hook-answers-garbage",
    expect: { outcome: "resolved", verdicts: ["deny"], executed: [], results: { c1: HOOK_FAILED } },
    run: (env) => runHarness(env, { hooks: [{ preToolUse: () => ({ type: "perhaps" }) as never }] }),
  },
  {
    name: "hook-answers-a-proxy",
    expect: { outcome: "resolved", verdicts: ["deny"], executed: [], results: { c1: HOOK_FAILED } },
    run: (env) => runHarness(env, { hooks: [{ preToolUse: () => bomb() as never }] }),
  },
  {
    // Nobody cancelled this run: a decision that cannot be read is a failed hook, not a cancel.
    name: "hook-answers-modify-with-a-throwing-input",
    expect: { outcome: "resolved", verdicts: ["deny"], executed: [], results: { c1: HOOK_FAILED } },
    run: (env) =>
      runHarness(env, {
        hooks: [
          {
            preToolUse: () =>
              ({
                type: "modify",
                get input(): unknown {
                  throw new Error("input bomb");
                },
              }) as never,
          },
        ],
      }),
  },
  {
    name: "hook-hangs-then-cancel",
    expect: { outcome: "CANCELLED", verdicts: ["cancelled"], executed: [] },
    run: (env) => {
      const entered = { value: false };
      return runHarness(env, {
        hooks: [hangingHook(entered)],
        deadline: "short",
        drive: async (ctl) => {
          await env.until(() => entered.value, "hook entered");
          // The ask deadline bounds the park, not a hook: the run is still waiting after it.
          await env.pass(env.shortMs * 2);
          check(ctl.parks.length === 0, "no park while the hook hangs");
          ctl.cancel();
        },
      });
    },
  },
  {
    name: "hook-hangs-run-deadline",
    expect: { outcome: "CANCELLED", verdicts: ["cancelled"], executed: [] },
    run: (env) => {
      const entered = { value: false };
      return runHarness(env, {
        hooks: [hangingHook(entered)],
        drive: async (ctl) => {
          // A run deadline is the run's signal aborting on a timer.
          const timer = env.clock.setTimeout(() => ctl.cancel(new Error("run deadline")), env.shortMs);
          await env.until(() => entered.value, "hook entered");
          await env.pass(env.shortMs);
          await ctl.ended;
          env.clock.clearTimeout(timer);
        },
      });
    },
  },
  // ---- resolvers ----
  {
    name: "no-resolver",
    expect: { outcome: "resolved", verdicts: ["ask_unresolved"], executed: [], results: { c1: "run c1?" } },
    run: (env) => runHarness(env, { resolver: "none", deadline: "none" }),
  },
  {
    name: "resolver-throws",
    expect: { outcome: "resolved", verdicts: ["ask_denied"], executed: [], results: { c1: DENIED } },
    run: (env) =>
      runHarness(env, {
        resolver: {
          resolve: () => {
            throw new Error("resolver bug");
          },
        },
      }),
  },
  {
    name: "resolver-rejects",
    expect: { outcome: "resolved", verdicts: ["ask_denied"], executed: [], results: { c1: DENIED } },
    run: (env) =>
      runHarness(env, {
        drive: async (ctl) => {
          await parked(ctl);
          ctl.fail(0, new Error("webhook 502"));
        },
      }),
  },
  ...(
    [
      ["string", "approve"],
      ["null", null],
      ["unknown-type", { type: "yes" }],
      ["approve-bad-remember", { type: "approve", remember: "forever" }],
      ["deny-numeric-reason", { type: "deny", reason: 42 }],
      ["thenable", { then: (ok: (v: unknown) => void) => ok("approve") }],
    ] as const
  ).map(([label, value]): Scenario => ({
    name: `resolver-answers-garbage-${label}`,
    expect: { outcome: "resolved", verdicts: ["ask_denied"], executed: [], results: { c1: DENIED } },
    run: (env) =>
      runHarness(env, {
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, value);
        },
      }),
  })),
  {
    name: "resolver-hangs-ignoring-signal-deadline",
    expect: { outcome: "resolved", verdicts: ["ask_expired"], executed: [], results: { c1: EXPIRED } },
    run: (env) =>
      runHarness(env, {
        deadline: "short",
        drive: async (ctl) => {
          await parked(ctl);
          await env.pass(env.shortMs);
          await ctl.ended;
          check(ctl.parks[0]?.signal.aborted === true, "the resolver's signal aborted at the deadline");
        },
      }),
  },
  {
    name: "resolver-hangs-ignoring-signal-cancel",
    expect: { outcome: "CANCELLED", verdicts: ["cancelled"], executed: [] },
    run: (env) =>
      runHarness(env, {
        deadline: "none",
        drive: async (ctl) => {
          await parked(ctl);
          ctl.cancel();
          await ctl.ended;
          check(ctl.parks[0]?.signal.aborted === true, "the resolver's signal aborted on cancel");
        },
      }),
  },
  {
    name: "resolver-settles-twice-approve-first",
    expect: { outcome: "resolved", verdicts: ["ask_allowed"], executed: ["c1"] },
    run: (env) =>
      runHarness(env, {
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "approve" });
          ctl.answer(0, { type: "deny" });
        },
      }),
  },
  {
    name: "resolver-settles-twice-deny-first",
    expect: { outcome: "resolved", verdicts: ["ask_denied"], executed: [], results: { c1: DENIED } },
    run: (env) =>
      runHarness(env, {
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "deny" });
          ctl.answer(0, { type: "approve" });
        },
      }),
  },
  {
    name: "approver-answers-twice",
    expect: { outcome: "resolved", verdicts: ["ask_denied"], executed: [] },
    run: (env) =>
      runHarness(env, {
        resolver: "channel",
        drive: async (ctl) => {
          const ask = await ctl.take();
          check(ctl.resolveViaApprover(ask!.id, { type: "deny", reason: "no" }), "first answer taken");
          check(!ctl.resolveViaApprover(ask!.id, { type: "approve" }), "second answer refused");
        },
      }),
  },
  {
    name: "resolver-answers-after-deadline",
    expect: { outcome: "resolved", verdicts: ["ask_expired"], executed: [], results: { c1: EXPIRED } },
    run: (env) =>
      runHarness(env, {
        deadline: "short",
        drive: async (ctl) => {
          await parked(ctl);
          await env.pass(env.shortMs);
          await ctl.ended;
          ctl.answer(0, { type: "approve" });
        },
      }),
  },
  {
    name: "approver-answers-after-deadline",
    expect: { outcome: "resolved", verdicts: ["ask_expired"], executed: [], results: { c1: EXPIRED } },
    run: (env) =>
      runHarness(env, {
        resolver: "channel",
        deadline: "short",
        drive: async (ctl) => {
          const ask = await ctl.take();
          await env.pass(env.shortMs);
          await ctl.ended;
          check(!ctl.resolveViaApprover(ask!.id, { type: "approve" }), "a late answer is refused");
        },
      }),
  },
  {
    name: "approver-closed-mid-run",
    expect: {
      outcome: "resolved",
      verdicts: ["ask_denied", "ask_denied"],
      executed: [],
      results: { c1: DENIED, c2: DENIED },
    },
    run: (env) =>
      runHarness(env, {
        resolver: "channel",
        deadline: "none",
        turns: [
          { toolCalls: [{ id: "c1", name: "act", input: { path: "a" } }] },
          { toolCalls: [{ id: "c2", name: "act", input: { path: "b" } }] },
          { text: "done" },
        ],
        drive: async (ctl) => {
          await ctl.take();
          ctl.approver?.close();
        },
      }),
  },
  {
    name: "approver-closed-with-asks-in-line",
    expect: {
      outcome: "resolved",
      verdicts: ["ask_denied", "ask_denied", "ask_denied"],
      executed: [],
      results: { c1: DENIED, c2: DENIED, c3: DENIED },
    },
    run: (env) =>
      runHarness(env, {
        resolver: "channel",
        deadline: "none",
        maxConcurrency: 3,
        turns: [
          {
            toolCalls: [
              { id: "c1", name: "act", input: { path: "1" } },
              { id: "c2", name: "act", input: { path: "2" } },
              { id: "c3", name: "act", input: { path: "3" } },
            ],
          },
          { text: "done" },
        ],
        drive: async (ctl) => {
          // Capacity 1: one ask taken, one delivered, one waiting in line when the approver closes.
          await ctl.take();
          await env.until(
            () => ctl.approver!.buffered === 1 && ctl.approver!.inLine === 1,
            "one buffered, one in line",
          );
          ctl.approver?.close();
        },
      }),
  },
  {
    name: "approver-dropped-mid-run",
    gc: true,
    expect: { outcome: "resolved", verdicts: ["ask_denied"], executed: [], results: { c1: DENIED } },
    run: (env) => {
      const gc = (globalThis as { gc?: () => void }).gc;
      if (gc === undefined) throw new Error("run with --expose-gc");
      // Only the channel survives this call; its approver becomes unreachable.
      const channelOnly = (): AskResolver => ApprovalChannel.pair(1)[0];
      return runHarness(env, {
        resolver: channelOnly(),
        deadline: "none",
        drive: async (ctl) => {
          let ended = false;
          void ctl.ended.then(() => (ended = true));
          for (let i = 0; i < 400 && !ended; i += 1) {
            gc();
            await env.flush();
          }
        },
      });
    },
  },
  // ---- tools ----
  {
    name: "tool-throws",
    expect: {
      outcome: "resolved",
      verdicts: ["ask_allowed"],
      executed: ["c1"],
      results: { c1: "Tool 'act' failed: tool exploded" },
    },
    run: (env) =>
      runHarness(env, {
        tool: "throws",
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "approve" });
        },
      }),
  },
  {
    name: "tool-hangs-ignoring-signal-then-cancel",
    expect: { outcome: "CANCELLED", verdicts: ["ask_allowed"], executed: ["c1"] },
    run: (env) =>
      runHarness(env, {
        tool: "hangs",
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "approve" });
          await env.until(() => ctl.started.length === 1, "tool started");
          ctl.cancel();
        },
      }),
  },
  {
    name: "tool-hangs-honouring-signal-then-cancel",
    expect: { outcome: "CANCELLED", verdicts: ["ask_allowed"], executed: ["c1"] },
    run: (env) =>
      runHarness(env, {
        tool: "hangs-until-aborted",
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "approve" });
          await env.until(() => ctl.started.length === 1, "tool started");
          ctl.cancel();
        },
      }),
  },
  // ---- the clock ----
  ...(
    [
      ["clock-throws-once-the-tool-ran", (m: LoopManagers) => m],
      [
        "clock-throws-once-the-tool-ran-with-a-breaker",
        (m: LoopManagers) => m.withCircuitBreaker({ failureThreshold: 1, cooldownMs: 1_000 }),
      ],
    ] as const
  ).map(([name, configure]): Scenario => ({
    name,
    // The tool ran, so its record must land and say so, whatever the clock does afterwards.
    expect: { outcome: "resolved", verdicts: ["ask_allowed"], executed: ["c1"], results: { c1: "acted on c1" } },
    run: (env) =>
      runHarness(env, {
        configure,
        clock: (clock, started) => ({
          now: () => {
            if (started.length > 0) throw new Error("the clock broke");
            return clock.now();
          },
          setTimeout: (callback, ms) => clock.setTimeout(callback, ms),
          clearTimeout: (handle) => clock.clearTimeout(handle),
        }),
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "approve" });
        },
      }),
  })),
  // ---- observers ----
  {
    name: "observer-throws-everywhere",
    expect: { outcome: "resolved", verdicts: ["ask_allowed"], executed: ["c1"], results: { c1: "acted on c1" } },
    run: (env) =>
      runHarness(env, {
        observers: [throwingObserver()],
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "approve" });
        },
      }),
  },
  // ---- cancels ----
  {
    name: "cancel-before-park",
    expect: { outcome: "CANCELLED", verdicts: ["cancelled"], executed: [] },
    run: (env) => {
      const box: { cancel?: () => void } = {};
      const hook: Hook = {
        preToolUse: (call, context) => {
          box.cancel?.();
          return askHook.preToolUse(call, context);
        },
      };
      return runHarness(env, {
        hooks: [hook],
        resolver: "channel",
        drive: async (ctl) => {
          box.cancel = () => ctl.cancel();
          await ctl.ended;
          check(ctl.approver?.buffered === 0 && ctl.approver.inLine === 0, "the ask was never delivered");
        },
      });
    },
  },
  {
    name: "cancel-during-park",
    expect: { outcome: "CANCELLED", verdicts: ["cancelled"], executed: [] },
    run: (env) =>
      runHarness(env, {
        drive: async (ctl) => {
          await parked(ctl);
          ctl.cancel();
          await ctl.ended;
          ctl.answer(0, { type: "approve" });
        },
      }),
  },
  {
    name: "cancel-during-park-channel",
    expect: { outcome: "CANCELLED", verdicts: ["cancelled"], executed: [] },
    run: (env) =>
      runHarness(env, {
        resolver: "channel",
        drive: async (ctl) => {
          const ask = await ctl.take();
          ctl.cancel();
          await ctl.ended;
          check(!ctl.resolveViaApprover(ask!.id, { type: "approve" }), "an answer after the cancel is refused");
        },
      }),
  },
  {
    name: "cancel-after-run",
    expect: { outcome: "resolved", verdicts: ["ask_allowed"], executed: ["c1"] },
    run: (env) =>
      runHarness(env, {
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "approve" });
          await ctl.ended;
          ctl.cancel();
        },
      }),
  },
  // ---- grant store ----
  {
    name: "grant-store-hangs-then-cancel",
    expect: { outcome: "CANCELLED", verdicts: ["cancelled"], executed: [] },
    run: (env) => {
      const calls = { value: 0 };
      return runHarness(env, {
        grantStore: hangingStore(calls),
        drive: async (ctl) => {
          await env.until(() => calls.value > 0, "grant store consulted");
          ctl.cancel();
          await ctl.ended;
          check(ctl.parks.length === 0, "never parked");
        },
      });
    },
  },
  {
    name: "grant-store-throws",
    expect: {
      outcome: "resolved",
      verdicts: ["deny"],
      executed: [],
      results: { c1: "Permission denied: grant store unavailable for tool 'act'" },
    },
    run: (env) => runHarness(env, { grantStore: throwingStore }),
  },
  ...(
    [
      ["approve", "ask_allowed"],
      ["deny", "ask_denied"],
    ] as const
  ).map(([answer, verdict]): Scenario => ({
    // Remembering an answer is best effort; a save that never returns must not hold the run past a cancel.
    name: `grant-store-save-hangs-after-${answer}-then-cancel`,
    expect: {
      outcome: "CANCELLED",
      verdicts: [answer === "approve" ? verdict : "ask_denied"],
      executed: [],
      ...(answer === "approve" ? { cancelledAfterApproval: ["c1"] } : {}),
    },
    run: (env) => {
      const saves = { value: 0 };
      const store: GrantStore = {
        load: () => Promise.resolve([]),
        save: () => ((saves.value += 1), new Promise<Grant>(() => undefined)),
        revoke: () => Promise.resolve(undefined),
        clear: () => Promise.resolve(0),
      };
      return runHarness(env, {
        grantStore: store,
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: answer, remember: "this_tool" });
          await env.until(() => saves.value === 1, "the answer is being saved");
          ctl.cancel();
          let settled = false;
          void ctl.ended.then(() => (settled = true));
          await env.until(() => settled, "the run settles after the cancel");
        },
      });
    },
  })),
  // ---- parallel dispatch ----
  {
    name: "parallel-deny-approve-expire",
    expect: {
      outcome: "resolved",
      verdicts: ["ask_allowed", "ask_denied", "ask_expired"],
      unordered: true,
      executed: ["c3"],
      results: { c1: DENIED, c2: EXPIRED, c3: "acted on c3" },
    },
    run: (env) =>
      runHarness(env, {
        maxConcurrency: 3,
        deadline: "short",
        turns: [
          {
            toolCalls: [
              { id: "c1", name: "act", input: { path: "1" } },
              { id: "c2", name: "act", input: { path: "2" } },
              { id: "c3", name: "act", input: { path: "3" } },
            ],
          },
          { text: "done" },
        ],
        drive: async (ctl) => {
          await parked(ctl, 3);
          const byCall = (id: string): number => ctl.parks.findIndex((p) => p.ask.callId === id);
          ctl.answer(byCall("c3"), { type: "approve" });
          ctl.answer(byCall("c1"), { type: "deny" });
          await env.pass(env.shortMs);
        },
      }),
  },
  {
    name: "parallel-cancel-with-asks-parked",
    expect: {
      outcome: "CANCELLED",
      verdicts: ["ask_allowed", "cancelled", "cancelled"],
      unordered: true,
      executed: ["c1"],
    },
    run: (env) =>
      runHarness(env, {
        maxConcurrency: 3,
        turns: [
          {
            toolCalls: [
              { id: "c1", name: "act", input: { path: "1" } },
              { id: "c2", name: "act", input: { path: "2" } },
              { id: "c3", name: "act", input: { path: "3" } },
            ],
          },
          { text: "done" },
        ],
        drive: async (ctl) => {
          await parked(ctl, 3);
          ctl.answer(
            ctl.parks.findIndex((p) => p.ask.callId === "c1"),
            { type: "approve" },
          );
          await env.until(() => ctl.started.length === 1, "c1 ran");
          await env.flush();
          ctl.cancel();
        },
      }),
  },
  // ---- the model ----
  {
    name: "model-throws-after-approval",
    expect: { outcome: "MODEL_ERROR", verdicts: ["ask_allowed"], executed: ["c1"] },
    run: (env) =>
      runHarness(env, {
        turns: [oneCall()[0]!, { error: new Error("model down") }],
        drive: async (ctl) => {
          await parked(ctl);
          ctl.answer(0, { type: "approve" });
        },
      }),
  },
];

export const SCENARIOS: readonly Scenario[] = scenarios;

/**
 * Negative controls, outside the matrix: they prove the child-process check
 * can fail. This one leaves a timer armed, as a leaking park would.
 */
export const LEAKING_CONTROL: Scenario = {
  name: "control-leaks-a-timer",
  expect: { outcome: "resolved", verdicts: ["ask_allowed"], executed: ["c1"] },
  run: (env) =>
    runHarness(env, {
      drive: async (ctl) => {
        await parked(ctl);
        setTimeout(() => undefined, 1_500);
        ctl.answer(0, { type: "approve" });
      },
    }),
};

const sorted = (list: readonly string[]): string[] => [...list].sort();
const same = (a: readonly string[], b: readonly string[]): boolean => JSON.stringify(a) === JSON.stringify(b);

/**
 * Every fail-closed invariant a finished scenario must meet; returns the
 * violations (empty when it passed).
 */
export function violations(expect: Expectation, report: ScenarioReport): string[] {
  const found: string[] = [];
  const fail = (what: string): void => {
    found.push(what);
  };
  const { outcome } = report;
  if (expect.outcome === "resolved") {
    if (outcome.type !== "resolved")
      fail(`expected the run to resolve, it rejected with ${outcome.name} ${outcome.code}`);
  } else if (outcome.type !== "rejected" || !outcome.typed || outcome.code !== expect.outcome) {
    fail(`expected a typed ${expect.outcome} rejection, got ${JSON.stringify(outcome)}`);
  }
  const verdicts = expect.unordered === true ? sorted(report.verdicts) : [...report.verdicts];
  const wanted = expect.unordered === true ? sorted(expect.verdicts) : [...expect.verdicts];
  if (!same(verdicts, wanted))
    fail(`verdicts ${JSON.stringify(report.verdicts)} != ${JSON.stringify(expect.verdicts)}`);
  if (!same(sorted(report.executed), sorted(expect.executed))) {
    fail(`executed ${JSON.stringify(report.executed)} != ${JSON.stringify(expect.executed)}`);
  }
  // The tool ran if and only if an approval reached its park in time.
  const mustRun = [...new Set(report.approved)].filter((id) => !(expect.cancelledAfterApproval ?? []).includes(id));
  if (!same(sorted(report.executed), sorted(mustRun))) {
    fail(`executed ${JSON.stringify(report.executed)} but approved in time ${JSON.stringify(report.approved)}`);
  }
  // Exactly one record per attempt's ending, and the run's records are what onGate saw.
  if (report.gates.length !== report.attempts.length) {
    fail(`${report.gates.length} records for ${report.attempts.length} attempts`);
  }
  for (const id of new Set(report.attempts)) {
    const attempts = report.attempts.filter((a) => a === id).length;
    const records = report.gates.filter((g) => g.startsWith(`${id}:`)).length;
    if (attempts !== records) fail(`call ${id}: ${records} records for ${attempts} attempts`);
  }
  if (
    !same(
      report.gates.map((g) => g.slice(g.indexOf(":") + 1)),
      [...report.verdicts],
    )
  ) {
    fail(`onGate saw ${JSON.stringify(report.gates)}, the run holds ${JSON.stringify(report.verdicts)}`);
  }
  for (const gate of report.gates) {
    const [id, verdict] = gate.split(":");
    if (verdict === "cancelled" && report.posts.includes(id!)) fail(`onToolPost fired for cancelled call ${id}`);
  }
  for (const [id, text] of Object.entries(expect.results ?? {})) {
    if (report.results[id] !== text)
      fail(`call ${id}: the model got ${JSON.stringify(report.results[id])}, expected ${JSON.stringify(text)}`);
  }
  for (const [what, count] of Object.entries(report.leftovers)) {
    if (count !== 0) fail(`left behind: ${what} = ${count}`);
  }
  return found;
}

export function scenarioNamed(name: string): Scenario {
  const found = [...scenarios, LEAKING_CONTROL].find((s) => s.name === name);
  if (found === undefined) throw new Error(`unknown scenario ${name}`);
  return found;
}
