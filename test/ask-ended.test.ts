import { getEventListeners } from "node:events";
import fc from "fast-check";
import { describe, expect, expectTypeOf, it } from "vitest";
import { ApprovalChannel, Approver, ApproverConstructorError, InvalidApproverOptionsError } from "loopctl/ask";
import type { AskEnding, AskInbox, AskResolution } from "loopctl/ask";
import { LoopctlError } from "loopctl";
import {
  BAD_WAIT_OPTIONS,
  flush,
  makeAsk,
  stuckController,
  track,
  unlistenableSignal,
  unlistenableRefusal,
} from "./support/ask-fixtures.js";

const live = (): { signal: AbortSignal } => ({ signal: new AbortController().signal });
const listeners = (signal: AbortSignal): number => getEventListeners(signal, "abort").length;
const UNKNOWN: AskEnding = { type: "withdrawn", reason: "unknown" };

describe("Approver.ended", () => {
  it("resolves with the verdict once the ask is answered, for a watcher that waited and for one that came after", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const yes = makeAsk(1);
    const no = makeAsk(2);
    void channel.resolve(yes, live());
    void channel.resolve(no, live());
    const waitingYes = track(approver.ended(yes.id));
    const waitingNo = track(approver.ended(no.id));
    await flush();
    expect(waitingYes.outcome.state).toBe("pending");
    expect(approver.resolve(yes.id, { type: "approve", remember: "this_tool" })).toBe(true);
    expect(approver.resolve(no.id, { type: "deny", reason: "no" })).toBe(true);
    await flush();
    expect(waitingYes.outcome).toEqual({ state: "fulfilled", value: { type: "answered", verdict: "approve" } });
    expect(waitingNo.outcome).toEqual({ state: "fulfilled", value: { type: "answered", verdict: "deny" } });
    await expect(approver.ended(yes.id)).resolves.toEqual({ type: "answered", verdict: "approve" });
    approver.close();
  });

  it("says withdrawn/unknown when the engine's signal ends the wait (a deadline and a cancel look alike here)", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(1);
    const stop = new AbortController();
    const parked = channel.resolve(ask, { signal: stop.signal });
    const ending = approver.ended(ask.id);
    stop.abort(new Error("ask expired"));
    await expect(parked).rejects.toThrow("ask expired");
    await expect(ending).resolves.toEqual(UNKNOWN);
    approver.close();
  });

  it("an answer given by an earlier listener of the aborting signal stands: the abort that follows ends nothing", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(1);
    const stop = new AbortController();
    // Registered before the channel's own listener, so it runs first when the signal aborts.
    let landed: boolean | undefined;
    stop.signal.addEventListener("abort", () => (landed = approver.resolve(ask.id, { type: "approve" })));
    const parked = channel.resolve(ask, { signal: stop.signal });
    stop.abort(new Error("ask expired"));
    expect(landed).toBe(true);
    await expect(parked).resolves.toEqual({ type: "approve" });
    await expect(approver.ended(ask.id)).resolves.toEqual({ type: "answered", verdict: "approve" });
    expect(approver.resolve(ask.id, { type: "deny", reason: "late" })).toBe(false);
    approver.close();
  });

  it("says withdrawn/closed for every ask close() denies, and every watcher settles", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const asks = [makeAsk(1), makeAsk(2), makeAsk(3)];
    const parks = asks.map((ask) => channel.resolve(ask, live()));
    const watchers = asks.map((ask) => track(approver.ended(ask.id)));
    approver.close();
    await Promise.all(parks);
    await flush();
    for (const w of watchers)
      expect(w.outcome).toEqual({ state: "fulfilled", value: { type: "withdrawn", reason: "closed" } });
  });

  it("resolves at once for an id it never saw", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    await expect(approver.ended("not-an-ask")).resolves.toEqual(UNKNOWN);
    await expect(approver.ended(makeAsk(0).id)).resolves.toEqual(UNKNOWN);
    approver.close();
  });

  it("remembers only the last 256 endings: an older one reads as unknown", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const asks = Array.from({ length: 257 }, (_, n) => makeAsk(n));
    for (const ask of asks) {
      void channel.resolve(ask, live());
      approver.resolve(ask.id, { type: "deny" });
    }
    await expect(approver.ended(asks[0]!.id)).resolves.toEqual(UNKNOWN);
    await expect(approver.ended(asks[1]!.id)).resolves.toEqual({ type: "answered", verdict: "deny" });
    await expect(approver.ended(asks[256]!.id)).resolves.toEqual({ type: "answered", verdict: "deny" });
    approver.close();
  });

  it("rejects with the signal's reason when its own signal aborts, removes its listener and leaves the ask parked", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(1);
    const parked = track(channel.resolve(ask, live()));
    const stop = new AbortController();
    const ending = approver.ended(ask.id, { signal: stop.signal });
    expect(listeners(stop.signal)).toBe(1);
    stop.abort(new Error("console closed"));
    await expect(ending).rejects.toThrow("console closed");
    expect(listeners(stop.signal)).toBe(0);
    expect(parked.outcome.state).toBe("pending");
    expect(approver.resolve(ask.id, { type: "approve" })).toBe(true);
    await expect(approver.ended(ask.id, { signal: AbortSignal.abort(new Error("late")) })).rejects.toThrow("late");
    approver.close();
  });

  it.each(BAD_WAIT_OPTIONS)(
    "%s: rejects with InvalidApproverOptionsError naming it, never throws, and the ask ends as if it was never called",
    async (_label, options, argument) => {
      const approve: AskResolution = { type: "approve" };
      const bad = (approver: Approver, id: string): Promise<AskEnding> => {
        let ending: Promise<AskEnding> | undefined;
        expect(() => {
          ending = approver.ended(id, options as never);
        }).not.toThrow();
        return ending!;
      };
      // Answered: the answer lands, resolve() returns true, a proper watcher hears it.
      {
        const [channel, approver] = ApprovalChannel.pair(1);
        const ask = makeAsk(1);
        const parked = channel.resolve(ask, live());
        const rejected = bad(approver, ask.id);
        await expect(rejected).rejects.toBeInstanceOf(InvalidApproverOptionsError);
        await expect(rejected).rejects.toMatchObject({ code: "ASK_OPTIONS_INVALID", method: "ended", argument });
        const watcher = approver.ended(ask.id);
        expect(approver.resolve(ask.id, approve)).toBe(true);
        await expect(parked).resolves.toEqual(approve);
        await expect(watcher).resolves.toEqual({ type: "answered", verdict: "approve" });
        approver.close();
      }
      // Withdrawn by the engine: its abort settles everything and raises nothing.
      {
        const [channel, approver] = ApprovalChannel.pair(1);
        const ask = makeAsk(2);
        const engine = new AbortController();
        const parked = channel.resolve(ask, { signal: engine.signal });
        await expect(bad(approver, ask.id)).rejects.toBeInstanceOf(InvalidApproverOptionsError);
        const watcher = approver.ended(ask.id);
        engine.abort(new Error("deadline"));
        await expect(parked).rejects.toThrow("deadline");
        await expect(watcher).resolves.toEqual(UNKNOWN);
        approver.close();
      }
      // Closed: close() denies every ask and settles a waiting next().
      {
        const [channel, approver] = ApprovalChannel.pair(4);
        const asks = [makeAsk(3), makeAsk(4)];
        const parks = asks.map((ask) => channel.resolve(ask, live()));
        await expect(bad(approver, asks[0]!.id)).rejects.toBeInstanceOf(InvalidApproverOptionsError);
        await approver.next();
        await approver.next();
        const waiting = approver.next();
        expect(() => approver.close()).not.toThrow();
        const denial: AskResolution = { type: "deny", reason: "approval channel closed" };
        expect(await Promise.all(parks)).toEqual([denial, denial]);
        await expect(waiting).resolves.toBeUndefined();
        expect(approver.pending).toBe(0);
      }
    },
  );

  it("a signal that cannot be listened to is refused with what it threw as the cause; the ask's other watchers hear its ending", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, live());
    const before = approver.ended(ask.id);
    const trap = new Error("cannot listen");
    await expect(approver.ended(ask.id, { signal: unlistenableSignal(trap) })).rejects.toMatchObject(
      unlistenableRefusal("ended", trap),
    );
    const after = approver.ended(ask.id);
    expect(approver.resolve(ask.id, { type: "approve" })).toBe(true);
    await expect(parked).resolves.toEqual({ type: "approve" });
    expect(await Promise.all([before, after])).toEqual([0, 1].map(() => ({ type: "answered", verdict: "approve" })));
    approver.close();
  });

  it("a signal that refuses to give up its listener keeps no other waiter from settling", async () => {
    const approve: AskResolution = { type: "approve" };
    const [watcherA, engineB, takerC, watcherD, takerE] = [
      stuckController(),
      stuckController(),
      stuckController(),
      stuckController(),
      stuckController(),
    ];
    const [channel, approver] = ApprovalChannel.pair(4);
    // An answer reaches an ask one of whose watchers is stuck, and resolve() says so.
    const a = makeAsk(1);
    const parkedA = channel.resolve(a, live());
    const watchersA = [approver.ended(a.id, { signal: watcherA.signal }), approver.ended(a.id)];
    expect(approver.resolve(a.id, approve)).toBe(true);
    await expect(parkedA).resolves.toEqual(approve);
    expect(await Promise.all(watchersA)).toEqual([0, 1].map(() => ({ type: "answered", verdict: "approve" })));
    // The engine's own signal is stuck.
    const b = makeAsk(2);
    const parkedB = channel.resolve(b, { signal: engineB.signal });
    expect(approver.resolve(b.id, approve)).toBe(true);
    await expect(parkedB).resolves.toEqual(approve);
    // A stuck next() is handed an ask: the park goes on waiting for its answer.
    const takingC = approver.next({ signal: takerC.signal });
    const c = makeAsk(3);
    const parkedC = track(channel.resolve(c, live()));
    await expect(takingC).resolves.toEqual(c);
    expect(channel.size).toBe(1);
    // close() settles everything, stuck or not.
    const d = makeAsk(4);
    const parkedD = channel.resolve(d, live());
    const watchersD = [approver.ended(d.id, { signal: watcherD.signal }), approver.ended(d.id)];
    await approver.next();
    const takers = [approver.next({ signal: takerE.signal }), approver.next()];
    expect(() => approver.close()).not.toThrow();
    const denial: AskResolution = { type: "deny", reason: "approval channel closed" };
    await expect(parkedD).resolves.toEqual(denial);
    await flush();
    expect(parkedC.outcome).toEqual({ state: "fulfilled", value: denial });
    expect(await Promise.all(watchersD)).toEqual([0, 1].map(() => ({ type: "withdrawn", reason: "closed" })));
    expect(await Promise.all(takers)).toEqual([undefined, undefined]);
    expect(approver.pending).toBe(0);
    // The listeners left behind are inert.
    for (const controller of [watcherA, engineB, takerC, watcherD, takerE]) controller.abort(new Error("late"));
    await flush();
  });

  it("removes its listener when the ask ends", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(1);
    void channel.resolve(ask, live());
    const stop = new AbortController();
    const ending = approver.ended(ask.id, { signal: stop.signal });
    approver.resolve(ask.id, { type: "approve" });
    await ending;
    expect(listeners(stop.signal)).toBe(0);
    approver.close();
  });

  it("every watcher settles with the ask's true ending, whatever the order of answers, aborts, watches and close", async () => {
    type Step =
      | { readonly type: "watch"; readonly ask: number; readonly withSignal: boolean }
      | { readonly type: "unwatch"; readonly watcher: number }
      | { readonly type: "answer"; readonly ask: number; readonly verdict: "approve" | "deny" }
      | { readonly type: "abort"; readonly ask: number };
    const ASKS = 4;
    const step = fc.oneof(
      fc.record({ type: fc.constant("watch" as const), ask: fc.nat(ASKS - 1), withSignal: fc.boolean() }),
      fc.record({ type: fc.constant("unwatch" as const), watcher: fc.nat(12) }),
      fc.record({
        type: fc.constant("answer" as const),
        ask: fc.nat(ASKS - 1),
        verdict: fc.constantFrom("approve" as const, "deny" as const),
      }),
      fc.record({ type: fc.constant("abort" as const), ask: fc.nat(ASKS - 1) }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 30 }), async (steps: Step[]) => {
        const [channel, approver] = ApprovalChannel.pair(2);
        const asks = Array.from({ length: ASKS }, (_, n) => makeAsk(n));
        const engines = asks.map(() => new AbortController());
        const truth: (AskEnding | undefined)[] = asks.map(() => undefined);
        const parks = asks.map((ask, n) => track(channel.resolve(ask, { signal: engines[n]!.signal })));
        const watchers: {
          ask: number;
          stop: AbortController | undefined;
          tracked: ReturnType<typeof track<AskEnding>>;
          cut: boolean;
        }[] = [];
        for (const s of steps) {
          if (s.type === "watch") {
            const stop = s.withSignal ? new AbortController() : undefined;
            const options = stop === undefined ? {} : { signal: stop.signal };
            watchers.push({ ask: s.ask, stop, tracked: track(approver.ended(asks[s.ask]!.id, options)), cut: false });
          } else if (s.type === "unwatch") {
            const w = watchers[s.watcher];
            if (w?.stop !== undefined && !w.stop.signal.aborted) {
              // Cut only a watcher still waiting: one already settled keeps its value.
              await flush();
              if (w.tracked.outcome.state === "pending") w.cut = true;
              w.stop.abort(new Error("unwatched"));
            }
          } else if (s.type === "answer") {
            const delivered = approver.resolve(asks[s.ask]!.id, { type: s.verdict });
            expect(delivered).toBe(truth[s.ask] === undefined);
            if (delivered) truth[s.ask] = { type: "answered", verdict: s.verdict };
          } else {
            engines[s.ask]!.abort(new Error("engine stopped"));
            truth[s.ask] ??= UNKNOWN;
          }
        }
        approver.close();
        for (let n = 0; n < ASKS; n++) truth[n] ??= { type: "withdrawn", reason: "closed" };
        await flush();
        for (const p of parks) expect(p.outcome.state).not.toBe("pending");
        for (const w of watchers) {
          expect(w.tracked.settlements).toBe(1);
          if (w.cut) expect(w.tracked.outcome.state).toBe("rejected");
          else expect(w.tracked.outcome).toEqual({ state: "fulfilled", value: truth[w.ask] });
          if (w.stop !== undefined) expect(listeners(w.stop.signal)).toBe(0);
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe("Approver is an AskInbox made only by ApprovalChannel.pair", () => {
  it("has the AskInbox shape", () => {
    const [, approver] = ApprovalChannel.pair(1);
    const inbox: AskInbox = approver;
    expectTypeOf(approver.resolve).returns.toEqualTypeOf<boolean>();
    expectTypeOf<Approver>().toMatchTypeOf<AskInbox>();
    expect(typeof inbox.ended).toBe("function");
    approver.close();
  });

  it("cannot be constructed directly, from TypeScript or from JavaScript", () => {
    const [, approver] = ApprovalChannel.pair(1);
    // @ts-expect-error the constructor is private: ApprovalChannel.pair is the way
    const direct = (): Approver => new Approver();
    let error: unknown;
    try {
      direct();
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ApproverConstructorError);
    expect(error).toBeInstanceOf(LoopctlError);
    expect((error as ApproverConstructorError).code).toBe("ASK_APPROVER_CONSTRUCTOR");
    expect((error as Error).message).toContain("ApprovalChannel.pair");
    // The class itself still works for instanceof checks.
    expect(approver).toBeInstanceOf(Approver);
    approver.close();
  });

  it("an answer passed through an AskInbox reference reaches the park", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const inbox: AskInbox = approver;
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, live());
    expect(await inbox.next()).toEqual(ask);
    const resolution: AskResolution = { type: "approve" };
    expect(await inbox.resolve(ask.id, resolution)).toBe(true);
    await expect(parked).resolves.toEqual(resolution);
    await inbox.close();
  });
});
