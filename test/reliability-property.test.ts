import { getEventListeners } from "node:events";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel, AskResolutionSchema, PendingAskSchema } from "../src/ask/index.js";
import type { AskResolution, AskResolver, PendingAsk } from "../src/ask/index.js";
import { Agent, CancelledError, LoopManagers, defineTool, seededIdGen } from "../src/engine/index.js";
import type { GateDecision, Hook, HookDecision, Message } from "../src/engine/index.js";
import { MemoryGrantStore, argsDigest } from "../src/grant/index.js";
import type { Grant, GrantStore } from "../src/grant/index.js";
import { ManualClock, ScriptedModel } from "../src/testing/index.js";

/** Whole runs generated per property; raise with LOOPCTL_FUZZ_RUNS for a long fuzz. */
const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 300);
const TICK_MS = 10;
const MAX_STEPS = 14;

type HookPlan = "allow" | "block" | "ask" | "modify";
type AnswerKind = "approve" | "deny" | "garbage" | "never";

interface CallPlan {
  readonly id: string;
  readonly path: string;
  readonly hook: HookPlan;
  readonly asyncHook: boolean;
  readonly answer: AnswerKind;
  /** The driver step at which the answer is given. */
  readonly answerStep: number;
  /** Asks the engine to remember the answer as a grant (when the run has a grant store). */
  readonly remember: "this_call" | "this_tool" | undefined;
}

interface RunPlan {
  readonly turns: readonly (readonly CallPlan[])[];
  readonly maxConcurrency: number;
  readonly deadlineMs: number | undefined;
  readonly resolver: "manual" | "channel";
  readonly capacity: number;
  /** A MemoryGrantStore, so answers given with `remember` decide later calls. */
  readonly grants: boolean;
  /** Driver step at which the run is cancelled; -1 cancels before the first model turn. */
  readonly cancelStep: number | undefined;
}

const callPlan = (id: string): fc.Arbitrary<CallPlan> =>
  fc.record({
    id: fc.constant(id),
    path: fc.constantFrom("a", "b", "c"),
    hook: fc.constantFrom<HookPlan>("allow", "block", "ask", "ask", "ask", "modify"),
    asyncHook: fc.boolean(),
    answer: fc.constantFrom<AnswerKind>("approve", "approve", "deny", "garbage", "never"),
    answerStep: fc.integer({ min: 0, max: 8 }),
    remember: fc.constantFrom(undefined, undefined, "this_call" as const, "this_tool" as const),
  });

const runPlan: fc.Arbitrary<RunPlan> = fc
  .array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 3 })
  .chain((sizes) =>
    fc.record({
      turns: fc.tuple(...sizes.map((n, t) => fc.tuple(...Array.from({ length: n }, (_, i) => callPlan(`t${t}c${i}`))))),
      maxConcurrency: fc.integer({ min: 1, max: 4 }),
      deadlineMs: fc.option(fc.constantFrom(0, TICK_MS, 25, 60), { nil: undefined }),
      resolver: fc.constantFrom<"manual" | "channel">("manual", "channel"),
      capacity: fc.integer({ min: 0, max: 2 }),
      grants: fc.boolean(),
      cancelStep: fc.option(fc.integer({ min: -1, max: 10 }), { nil: undefined }),
    }),
  );

/** A grant store that holds nothing and forgets every save: remembering changes nothing. */
class NeverStore implements GrantStore {
  load(): Promise<Grant[]> {
    return Promise.resolve([]);
  }
  save(grant: Grant): Promise<Grant> {
    return Promise.resolve(grant);
  }
  revoke(): Promise<Grant | undefined> {
    return Promise.resolve(undefined);
  }
  clear(): Promise<number> {
    return Promise.resolve(0);
  }
}

const DENIED = (tool: string): string => `Permission denied by approver for tool '${tool}'`;
const EXPIRED = (tool: string): string => `Permission ask expired unanswered for tool '${tool}'`;

interface Observed {
  readonly events: string[];
  readonly executed: string[];
  /** Ask calls whose approval reached the park while it still waited. */
  readonly approvedInTime: Set<string>;
  /** Ask calls refused (deny or garbage) while the park still waited. */
  readonly refusedInTime: Set<string>;
  /**
   * Asks answered in the same synchronous turn as the cancel that followed:
   * the answer is still travelling through promise callbacks when the abort
   * listener fires, so the park may end either way.
   */
  readonly racedWithCancel: Set<string>;
  readonly asks: PendingAsk[];
  readonly signals: { signal: AbortSignal; answered: boolean }[];
  cancelled: boolean;
  outcome: "resolved" | "cancelled" | "other";
  other?: unknown;
  records: readonly GateDecision[];
  messages: readonly Message[];
}

async function flush(): Promise<void> {
  for (let i = 0; i < 2; i += 1) await new Promise<void>((resolve) => setImmediate(resolve));
}

async function play(
  plan: RunPlan,
): Promise<{ observed: Observed; clock: ManualClock; runSignal: AbortSignal; channel: ApprovalChannel | undefined }> {
  const byId = new Map(plan.turns.flat().map((c) => [c.id, c]));
  const clock = new ManualClock(0);
  const controller = new AbortController();
  const observed: Observed = {
    events: [],
    executed: [],
    approvedInTime: new Set(),
    refusedInTime: new Set(),
    racedWithCancel: new Set(),
    asks: [],
    signals: [],
    cancelled: false,
    outcome: "other",
    records: [],
    messages: [],
  };

  const tool = defineTool({
    name: "act",
    description: "acts on a path",
    input: z.object({ path: z.string() }),
    execute: (input, context) => {
      observed.executed.push(context.callId);
      observed.events.push(`exec:${context.callId}`);
      return `did ${input.path}`;
    },
  });
  const hook: Hook = {
    preToolUse: (call) => {
      const c = byId.get(call.id)!;
      const decision: HookDecision =
        c.hook === "allow"
          ? { type: "allow" }
          : c.hook === "block"
            ? { type: "block", reason: `blocked ${c.id}` }
            : c.hook === "modify"
              ? { type: "modify", input: { path: `${c.path}-safe` } }
              : { type: "ask", prompt: `may ${c.id}?` };
      return c.asyncHook ? Promise.resolve(decision) : decision;
    },
  };

  // Parks the driver answers: from a resolver it sees directly, or taken from an ApprovalChannel.
  const parks: {
    ask: PendingAsk;
    signal: AbortSignal | undefined;
    settle: (value: unknown) => boolean;
    done: boolean;
  }[] = [];
  let resolver: AskResolver;
  let channel: ApprovalChannel | undefined;
  let approver: ReturnType<typeof ApprovalChannel.pair>[1] | undefined;
  if (plan.resolver === "manual") {
    resolver = {
      resolve: (ask, { signal }) =>
        new Promise<AskResolution>((resolve) => {
          observed.asks.push(ask);
          const entry = { signal, answered: false };
          observed.signals.push(entry);
          parks.push({
            ask,
            signal,
            done: false,
            settle: (value) => {
              const inTime = !signal.aborted;
              entry.answered = true;
              resolve(value as AskResolution);
              return inTime;
            },
          });
        }),
    };
  } else {
    [channel, approver] = ApprovalChannel.pair(plan.capacity);
    resolver = channel;
  }

  let managers = new LoopManagers()
    .withClock(clock)
    .withIdGen(seededIdGen("property"))
    .withHook(hook)
    .withAskResolver(resolver)
    .withMaxConcurrency(plan.maxConcurrency)
    .withGrantStore(plan.grants ? new MemoryGrantStore() : new NeverStore())
    .withObserver({
      onToolPre: ({ call }) => observed.events.push(`pre:${call.id}`),
      onGate: ({ callId, decision }) => observed.events.push(`gate:${callId}:${decision.verdict}`),
      onToolPost: ({ call }) => observed.events.push(`post:${call.id}`),
    });
  if (plan.deadlineMs !== undefined) managers = managers.withAskTimeout(plan.deadlineMs);
  const model = new ScriptedModel([
    ...plan.turns.map((calls) => ({
      toolCalls: calls.map((c) => ({ id: c.id, name: "act", input: { path: c.path } })),
    })),
    { text: "done" },
  ]);
  const agent = new Agent({ model, tools: [tool], managers });

  let ended = false;
  const running = agent.run("go", { signal: controller.signal }).then(
    (result) => {
      observed.outcome = "resolved";
      observed.records = result.records;
      observed.messages = result.messages;
    },
    (error: unknown) => {
      if (error instanceof CancelledError) {
        observed.outcome = "cancelled";
        observed.records = error.records;
        observed.messages = error.messages;
      } else {
        observed.other = error;
      }
    },
  );
  void running.then(() => (ended = true));
  const cancel = (): void => {
    observed.cancelled = true;
    controller.abort(new Error("cancelled by the plan"));
  };
  if (plan.cancelStep === -1) cancel();

  for (let step = 0; !ended; step += 1) {
    await flush();
    if (ended) break;
    if (approver !== undefined) {
      while (approver.buffered > 0) {
        const ask = (await approver.next())!;
        observed.asks.push(ask);
        parks.push({
          ask,
          signal: undefined,
          done: false,
          settle: (value) => {
            try {
              return approver.resolve(ask.id, value as AskResolution);
            } catch {
              // An invalid answer is refused and the ask stays parked; fail closed by denying it.
              return approver.resolve(ask.id, { type: "deny", reason: "garbage refused" }) ? true : false;
            }
          },
        });
      }
    }
    const answeredNow: string[] = [];
    for (const park of parks) {
      const c = byId.get(park.ask.callId)!;
      if (park.done || c.answer === "never" || c.answerStep > step) continue;
      park.done = true;
      const remember = c.remember === undefined ? {} : { remember: c.remember };
      const value: unknown =
        c.answer === "approve"
          ? { type: "approve", ...remember }
          : c.answer === "deny"
            ? { type: "deny", reason: "no", ...remember }
            : { type: "sure" };
      const inTime = park.settle(value);
      answeredNow.push(c.id);
      if (inTime && AskResolutionSchema.safeParse(value).data?.type === "approve") observed.approvedInTime.add(c.id);
      else if (inTime) observed.refusedInTime.add(c.id);
    }
    if (plan.cancelStep === step) {
      cancel();
      for (const id of answeredNow) observed.racedWithCancel.add(id);
    }
    await flush();
    await clock.advance(TICK_MS);
    // Nothing may park forever: past the plan's horizon, the run is cancelled.
    if (step >= MAX_STEPS && !observed.cancelled) cancel();
  }
  await running;
  await flush();
  approver?.close();
  return { observed, clock, runSignal: controller.signal, channel };
}

function checkRun(plan: RunPlan, observed: Observed, clock: ManualClock, runSignal: AbortSignal): void {
  const byId = new Map(plan.turns.flat().map((c) => [c.id, c]));
  const { events, records } = observed;

  // The run resolves, or rejects with the typed CancelledError only when it was cancelled.
  expect(observed.other).toBeUndefined();
  if (!observed.cancelled) expect(observed.outcome).toBe("resolved");

  const attempts = events.filter((e) => e.startsWith("pre:")).map((e) => e.slice(4));
  const gates = events.filter((e) => e.startsWith("gate:")).map((e) => e.split(":"));
  // Exactly one record per attempt; the run's records are the ones onGate saw, in the same order.
  expect(new Set(attempts).size).toBe(attempts.length);
  expect(gates.map((g) => g[1]).sort()).toEqual([...attempts].sort());
  expect(records.map((r) => r.verdict)).toEqual(gates.map((g) => g[2]));
  if (observed.outcome === "resolved") expect(attempts.sort()).toEqual([...byId.keys()].sort());

  // Turns never interleave; with one call at a time, records follow call order.
  const order = [...byId.keys()];
  const turnOf = (id: string): number => Number(id.slice(1, id.indexOf("c")));
  const gateIds = gates.map((g) => g[1]!);
  for (let i = 1; i < gateIds.length; i += 1)
    expect(turnOf(gateIds[i]!)).toBeGreaterThanOrEqual(turnOf(gateIds[i - 1]!));
  if (plan.maxConcurrency === 1) expect(gateIds).toEqual(order.filter((id) => gateIds.includes(id)));

  /** Whether a remembered answer (given in time to another ask, with `remember`, covering `c`'s arguments) could have decided `c`. */
  const rememberedFor = (c: NonNullable<ReturnType<typeof byId.get>>, answered: ReadonlySet<string>): boolean =>
    [...byId.values()].some(
      (e) =>
        e.id !== c.id &&
        answered.has(e.id) &&
        e.answer !== "garbage" &&
        (e.remember === "this_tool" || (e.remember === "this_call" && e.path === c.path)),
    );

  for (const [, id, verdict] of gates) {
    const c = byId.get(id!)!;
    const record = records[gateIds.indexOf(id!)]!;
    const ran = observed.executed.includes(id!);
    const at = (e: string): number => events.indexOf(e);
    // onToolPre → (exec) → onGate → onToolPost; no onToolPost for a cancelled call.
    expect(at(`pre:${id}`)).toBeLessThan(at(`gate:${id}:${verdict}`));
    if (ran) expect(at(`exec:${id}`)).toBeLessThan(at(`gate:${id}:${verdict}`));
    if (verdict === "cancelled") expect(events).not.toContain(`post:${id}`);
    else if (observed.outcome === "resolved") expect(at(`post:${id}`)).toBeGreaterThan(at(`gate:${id}:${verdict}`));

    switch (c.hook) {
      case "block":
        expect(verdict).toBe("deny");
        expect(ran).toBe(false);
        break;
      case "allow":
        if (record.ruleId === "grant") {
          // A remembered deny beats a hook's allow.
          expect({
            call: c.id,
            verdict,
            rememberedDeny: plan.grants && rememberedFor(c, observed.refusedInTime),
          }).toEqual({ call: c.id, verdict: "deny", rememberedDeny: true });
          expect(ran).toBe(false);
          break;
        }
        expect(["allow", "cancelled"]).toContain(verdict);
        if (!observed.cancelled) expect(ran).toBe(true);
        if (ran) expect(verdict).toBe("allow");
        break;
      case "modify":
        if (record.ruleId === "grant") {
          // A remembered deny beats a hook's modify too, when it covers the modified arguments.
          expect({
            call: c.id,
            verdict,
            rememberedDeny: plan.grants && rememberedFor({ ...c, path: `${c.path}-safe` }, observed.refusedInTime),
          }).toEqual({ call: c.id, verdict: "deny", rememberedDeny: true });
          expect(ran).toBe(false);
          break;
        }
        expect(verdict).toBe("allow_modified");
        expect(record.reason).toContain(argsDigest({ path: c.path }));
        if (!observed.cancelled) expect(ran).toBe(true);
        break;
      case "ask": {
        if (record.ruleId === "grant") {
          // Decided by a remembered answer: one given in time to an earlier ask of this tool, with
          // `remember`, covering these arguments (this_tool, or this_call with the same path).
          expect(plan.grants).toBe(true);
          const source = rememberedFor(c, verdict === "allow" ? observed.approvedInTime : observed.refusedInTime);
          expect({ call: c.id, verdict, rememberedSource: source }).toEqual({
            call: c.id,
            verdict,
            rememberedSource: true,
          });
          expect(["allow", "deny"]).toContain(verdict);
          if (verdict === "deny") expect(ran).toBe(false);
          else if (!observed.cancelled) expect(ran).toBe(true);
          break;
        }
        // The tool ran only if an approval reached its park in time (and always did, short of a cancel).
        if (ran) expect(observed.approvedInTime.has(c.id)).toBe(true);
        if (observed.racedWithCancel.has(c.id) && verdict === "cancelled") {
          expect(ran).toBe(false);
        } else if (observed.approvedInTime.has(c.id)) {
          expect(verdict).toBe("ask_allowed");
          if (!observed.cancelled) expect(ran).toBe(true);
        } else if (observed.refusedInTime.has(c.id)) {
          expect(verdict).toBe("ask_denied");
        } else {
          expect(["ask_expired", "cancelled"]).toContain(verdict);
          if (verdict === "ask_expired") expect(plan.deadlineMs).toBeDefined();
          if (verdict === "cancelled") expect(observed.cancelled).toBe(true);
        }
        break;
      }
    }
  }

  // Every call the model made has exactly one result after it, so the kept transcript can be sent back to a
  // provider; the calls a cancel came before say they did not run.
  const calls = observed.messages.flatMap((m) => (m.type === "assistant" ? m.toolCalls.map((c) => c.id) : []));
  const answered = observed.messages.flatMap((m) => (m.type === "tool_result" ? [m.callId] : []));
  expect(answered).toEqual(calls);
  const stoppedBefore = "Tool 'act' did not run: the run stopped before it";
  for (const message of observed.messages) {
    if (message.type !== "tool_result" || message.content !== stoppedBefore) continue;
    expect(observed.outcome).toBe("cancelled");
    expect(message.status).toBe("refused");
    expect(observed.executed).not.toContain(message.callId);
  }

  // What the model was told, for every call that ended with a result.
  for (const message of observed.messages) {
    if (message.type !== "tool_result" || message.content === stoppedBefore) continue;
    const verdict = gates.find((g) => g[1] === message.callId)?.[2];
    const byGrant = records[gates.findIndex((g) => g[1] === message.callId)]?.ruleId === "grant";
    if (byGrant && verdict === "deny")
      expect(message.content).toBe("Permission denied by remembered grant for tool 'act'");
    else if (verdict === "ask_denied") expect(message.content).toBe(DENIED("act"));
    else if (verdict === "ask_expired") expect(message.content).toBe(EXPIRED("act"));
    else if (verdict === "deny") expect(message.content).toBe(`blocked ${message.callId}`);
    expect(message.isError).toBe(!["ask_allowed", "allow", "allow_modified"].includes(verdict!));
  }

  // Every ask is a valid wire ask carrying the digest, never the arguments.
  for (const ask of observed.asks) {
    expect(PendingAskSchema.parse(JSON.parse(JSON.stringify(ask)))).toEqual(ask);
    expect(ask.argsDigest).toBe(argsDigest({ path: byId.get(ask.callId)!.path }));
  }

  // Nothing left behind: no timer, no listener on the run's signal, no park nobody will end.
  expect(clock.pendingTimers).toBe(0);
  expect(getEventListeners(runSignal, "abort")).toHaveLength(0);
  for (const entry of observed.signals) expect(entry.answered || entry.signal.aborted).toBe(true);
}

describe("whole runs under random calls, hook decisions, answer timings, remembered answers, deadlines and cancels", () => {
  it(
    `every invariant holds in ${RUNS} generated runs`,
    async () => {
      const seen = { parks: 0, cancelled: 0, expired: 0, executed: 0, records: 0, byGrant: 0 };
      await fc.assert(
        fc.asyncProperty(runPlan, async (plan) => {
          const { observed, clock, runSignal, channel } = await play(plan);
          checkRun(plan, observed, clock, runSignal);
          expect(channel?.size ?? 0).toBe(0);
          seen.parks += observed.asks.length;
          seen.cancelled += observed.outcome === "cancelled" ? 1 : 0;
          seen.expired += observed.records.filter((r) => r.verdict === "ask_expired").length;
          seen.executed += observed.executed.length;
          seen.records += observed.records.length;
          seen.byGrant += observed.records.filter((r) => r.ruleId === "grant").length;
        }),
        { numRuns: RUNS },
      );
      expect(seen.parks).toBeGreaterThan(RUNS);
      expect(seen.byGrant).toBeGreaterThan(0);
      console.log(
        `property: ${RUNS} runs, ${seen.records} records, ${seen.parks} parks, ${seen.expired} expiries, ` +
          `${seen.cancelled} cancelled runs, ${seen.byGrant} calls decided by remembered grants, ${seen.executed} tool executions`,
      );
    },
    Math.max(30_000, RUNS * 60),
  );
});
