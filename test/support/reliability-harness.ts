// A harness that runs one real Agent + ScriptedModel run under a chosen fault
// and reports everything the fail-closed invariants need: which tools ran,
// which approvals reached their park in time, every record and observer event,
// how the run ended, and what it left behind (listeners, timers, parked asks).
// Used in-process (ManualClock) by the fault-matrix test and in a child process
// (system timers) by test/support/reliability-scenario.ts.
import { getEventListeners } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { ApprovalChannel, AskResolutionSchema } from "../../src/ask/index.js";
import type { AskResolution, AskResolver, Approver, PendingAsk, ResolveOptions } from "../../src/ask/index.js";
import { Agent, LoopManagers, defineTool, seededIdGen, systemClock } from "../../src/engine/index.js";
import type { Clock, Hook, Observer, Tool } from "../../src/engine/index.js";
import { LoopctlError } from "../../src/errors.js";
import type { GrantStore } from "../../src/grant/index.js";
import { ManualClock, ScriptedModel } from "../../src/testing/index.js";
import type { ScriptedTurn } from "../../src/testing/index.js";

/** Where a scenario runs: a manual clock in-process, or the system's timers in a child. */
export interface ScenarioEnv {
  readonly mode: "manual" | "system";
  readonly clock: Clock;
  /** A deadline a scenario lets pass with {@link ScenarioEnv.pass}. */
  readonly shortMs: number;
  /** A deadline that never passes in a scenario: a timer leaked from it would keep a process alive for an hour. */
  readonly longMs: number;
  /** Lets `ms` of clock time pass (manual: advances the clock; system: sleeps a little longer). */
  pass(ms: number): Promise<void>;
  /** Lets pending microtasks and a macrotask run. */
  flush(): Promise<void>;
  until(condition: () => boolean, what?: string): Promise<void>;
  /** Timers armed on the manual clock and neither fired nor cleared (0 in system mode). */
  pendingTimers(): number;
}

export function manualEnv(): ScenarioEnv {
  const clock = new ManualClock(1_000_000);
  return makeEnv(
    "manual",
    clock,
    50,
    () => clock.pendingTimers,
    async (ms) => {
      await clock.advance(ms);
    },
  );
}

export function systemEnv(): ScenarioEnv {
  return makeEnv(
    "system",
    systemClock,
    20,
    () => 0,
    async (ms) => {
      await sleep(ms + 15);
    },
  );
}

function makeEnv(
  mode: ScenarioEnv["mode"],
  clock: Clock,
  shortMs: number,
  pendingTimers: () => number,
  advance: (ms: number) => Promise<void>,
): ScenarioEnv {
  const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
  return {
    mode,
    clock,
    shortMs,
    longMs: 3_600_000,
    pendingTimers,
    flush,
    async pass(ms) {
      await advance(ms);
      await flush();
    },
    async until(condition, what = "condition") {
      for (let i = 0; i < 2_000; i += 1) {
        if (condition()) return;
        await flush();
      }
      throw new Error(`${what} never held`);
    },
  };
}

/** One ask as a test-driven resolver received it. */
export interface Park {
  readonly ask: PendingAsk;
  readonly signal: AbortSignal;
  /** Settles the resolver's promise with `value` (anything: garbage included). */
  answer(value: unknown): void;
  fail(error: unknown): void;
}

/** How the `act` tool behaves. */
export type ToolBehaviour = "ok" | "throws" | "hangs" | "hangs-until-aborted";

export interface HarnessOptions {
  readonly hooks?: readonly Hook[];
  /** "manual": parks go to {@link Ctl.parks}; "channel": an ApprovalChannel (capacity 1); or any resolver; "none": no resolver. */
  readonly resolver?: "manual" | "channel" | "none" | AskResolver;
  readonly deadline?: "short" | "long" | "none";
  readonly turns?: readonly ScriptedTurn[];
  readonly tool?: ToolBehaviour;
  readonly observers?: readonly Observer[];
  readonly maxConcurrency?: number;
  readonly grantStore?: GrantStore;
  /** Wraps the environment's clock (to break it on purpose). */
  readonly clock?: (clock: Clock, started: readonly string[]) => Clock;
  /** Further configuration (a breaker, a budget…). */
  readonly configure?: (managers: LoopManagers) => LoopManagers;
  /** Drives the run while it is in flight (answers, cancels, clock). */
  readonly drive?: (ctl: Ctl) => Promise<void>;
}

/** What a driver can do to the run in flight. */
export interface Ctl {
  readonly env: ScenarioEnv;
  readonly parks: Park[];
  readonly approver: Approver | undefined;
  readonly started: string[];
  cancel(reason?: unknown): void;
  /** Answers park `index`; counts an approve as in time when the park's signal has not aborted. */
  answer(index: number, value: unknown): void;
  /** Rejects park `index` (a resolver that fails). */
  fail(index: number, error: unknown): void;
  /** Answers through the approver; counts an approve as in time when `resolve` returned true. */
  resolveViaApprover(askId: string, resolution: AskResolution): boolean;
  /** Marks the call as approved in time (for resolvers the harness does not see). */
  approved(callId: string): void;
  /** The approver's next ask (remembered so an approval names its call). */
  take(): Promise<PendingAsk | undefined>;
  /** Resolves when the run has settled (either way). */
  readonly ended: Promise<void>;
}

export type RunOutcome =
  | { readonly type: "resolved" }
  | { readonly type: "rejected"; readonly name: string; readonly code: string; readonly typed: boolean };

/** Everything a run did and left behind. */
export interface ScenarioReport {
  readonly outcome: RunOutcome;
  /** Record verdicts from the run's result (or its error), in order. */
  readonly verdicts: readonly string[];
  /** `onGate` events as `callId:verdict`. */
  readonly gates: readonly string[];
  /** `onToolPre` call ids (attempts). */
  readonly attempts: readonly string[];
  /** `onToolPost` call ids. */
  readonly posts: readonly string[];
  /** Call ids whose tool `execute` started. */
  readonly executed: readonly string[];
  /** Call ids whose approval reached the park while it still waited. */
  readonly approved: readonly string[];
  /** Tool-result texts the transcript ended with, by call id. */
  readonly results: Readonly<Record<string, string>>;
  readonly leftovers: {
    /** Abort listeners still on the run's own signal. */
    readonly runSignalListeners: number;
    /** Manual-clock timers still armed. */
    readonly pendingTimers: number;
    /** Resolver signals neither answered nor aborted (a park nobody will ever end). */
    readonly openParks: number;
    /** Asks still parked on the ApprovalChannel. */
    readonly channelPending: number;
  };
}

export const CALL_INPUT = { path: "a.txt" } as const;

/** The default script: one call `c1` to `act`, then a text answer. */
export function oneCall(id = "c1", input: unknown = CALL_INPUT): ScriptedTurn[] {
  return [{ toolCalls: [{ id, name: "act", input }] }, { text: "done" }];
}

export const askHook: Hook = { name: "ask", preToolUse: (call) => ({ type: "ask", prompt: `run ${call.id}?` }) };

function actTool(behaviour: ToolBehaviour, started: string[]): Tool {
  return defineTool({
    name: "act",
    description: "does something that needs approval",
    input: z.object({ path: z.string() }),
    execute: (_input, context) => {
      started.push(context.callId);
      switch (behaviour) {
        case "ok":
          return `acted on ${context.callId}`;
        case "throws":
          throw new Error("tool exploded");
        case "hangs":
          // Ignores its signal and never settles (and holds no handle).
          return new Promise<never>(() => undefined);
        case "hangs-until-aborted":
          return new Promise<never>((_resolve, reject) => {
            // A real timer, as a well-behaved slow tool would hold: cleared on abort.
            const timer = setTimeout(() => reject(new Error("tool finished too late")), 3_600_000);
            context.signal.addEventListener(
              "abort",
              () => {
                clearTimeout(timer);
                reject(new Error("tool aborted"));
              },
              { once: true },
            );
          });
      }
    },
  });
}

/** Runs one Agent run under `options` and reports it. */
export async function runHarness(env: ScenarioEnv, options: HarnessOptions): Promise<ScenarioReport> {
  const started: string[] = [];
  const approved: string[] = [];
  const parks: Park[] = [];
  const answered = new Set<Park>();
  const gates: string[] = [];
  const attempts: string[] = [];
  const posts: string[] = [];
  const controller = new AbortController();
  // Asks the approver handed out, by id, so an approval names its call.
  const askIds = new Map<string, PendingAsk>();

  let resolver: AskResolver | undefined;
  let channel: ApprovalChannel | undefined;
  let approver: Approver | undefined;
  const choice = options.resolver ?? "manual";
  if (choice === "manual") {
    resolver = {
      resolve: (ask: PendingAsk, { signal }: ResolveOptions) =>
        new Promise<AskResolution>((resolve, reject) => {
          parks.push({ ask, signal, answer: (value) => resolve(value as AskResolution), fail: reject });
        }),
    };
  } else if (choice === "channel") {
    [channel, approver] = ApprovalChannel.pair(1);
    resolver = channel;
  } else if (choice !== "none") {
    resolver = choice;
  }

  let managers = new LoopManagers()
    .withClock(options.clock?.(env.clock, started) ?? env.clock)
    .withIdGen(seededIdGen("reliability"));
  for (const hook of options.hooks ?? [askHook]) managers = managers.withHook(hook);
  if (resolver !== undefined) managers = managers.withAskResolver(resolver);
  const deadline = options.deadline ?? "long";
  if (deadline !== "none") managers = managers.withAskTimeout(deadline === "short" ? env.shortMs : env.longMs);
  if (options.maxConcurrency !== undefined) managers = managers.withMaxConcurrency(options.maxConcurrency);
  if (options.grantStore !== undefined) managers = managers.withGrantStore(options.grantStore);
  managers = managers.withObserver({
    onToolPre: ({ call }) => attempts.push(call.id),
    onGate: ({ callId, decision }) => gates.push(`${callId}:${decision.verdict}`),
    onToolPost: ({ call }) => posts.push(call.id),
  });
  for (const observer of options.observers ?? []) managers = managers.withObserver(observer);
  if (options.configure !== undefined) managers = options.configure(managers);

  const model = new ScriptedModel(options.turns ?? oneCall());
  const agent = new Agent({ model, tools: [actTool(options.tool ?? "ok", started)], managers });

  let outcome: RunOutcome | undefined;
  let verdicts: string[] = [];
  let messages: readonly { type: string; callId?: string; content?: string }[] = [];
  const running = agent.run("go", { signal: controller.signal }).then(
    (result) => {
      outcome = { type: "resolved" };
      verdicts = result.records.map((r) => r.verdict);
      messages = result.messages;
    },
    (error: unknown) => {
      const typed = error instanceof LoopctlError;
      outcome = {
        type: "rejected",
        name: (error as Error | undefined)?.name ?? String(error),
        code: typed ? error.code : "",
        typed,
      };
      const stopped = error as { records?: readonly { verdict: string }[]; messages?: typeof messages };
      verdicts = (stopped.records ?? []).map((r) => r.verdict);
      messages = stopped.messages ?? [];
    },
  );

  const ctl: Ctl = {
    env,
    parks,
    approver,
    started,
    ended: running,
    cancel: (reason = new Error("cancelled by the scenario")) => controller.abort(reason),
    answer(index, value) {
      const park = parks[index];
      if (park === undefined) throw new Error(`no park #${index}`);
      const valid = AskResolutionSchema.safeParse(value);
      if (!park.signal.aborted && !answered.has(park) && valid.success && valid.data.type === "approve") {
        approved.push(park.ask.callId);
      }
      answered.add(park);
      park.answer(value);
    },
    fail(index, error) {
      const park = parks[index];
      if (park === undefined) throw new Error(`no park #${index}`);
      answered.add(park);
      park.fail(error);
    },
    resolveViaApprover(askId, resolution) {
      if (approver === undefined) throw new Error("no approver in this scenario");
      const taken = approver.resolve(askId, resolution);
      if (taken && resolution.type === "approve") {
        const ask = askIds.get(askId);
        if (ask !== undefined) approved.push(ask.callId);
      }
      return taken;
    },
    approved: (callId) => approved.push(callId),
    async take() {
      if (approver === undefined) throw new Error("no approver in this scenario");
      const ask = await approver.next();
      if (ask !== undefined) askIds.set(ask.id, ask);
      return ask;
    },
  };

  const driving = options.drive?.(ctl) ?? Promise.resolve();
  await Promise.all([running, driving]);
  // A late answer or abort after the run must change nothing; give stragglers a turn.
  await env.flush();

  const results: Record<string, string> = {};
  for (const message of messages) {
    if (message.type === "tool_result" && message.callId !== undefined) results[message.callId] = message.content ?? "";
  }
  const leftovers = {
    runSignalListeners: getEventListeners(controller.signal, "abort").length,
    pendingTimers: env.pendingTimers(),
    openParks: parks.filter((p) => !p.signal.aborted && !answered.has(p)).length,
    channelPending: channel?.size ?? 0,
  };
  approver?.close();
  if (outcome === undefined) throw new Error("the run never settled");
  return { outcome, verdicts, gates, attempts, posts, executed: started, approved, results, leftovers };
}
