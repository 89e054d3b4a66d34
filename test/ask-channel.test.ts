import { getEventListeners } from "node:events";
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import {
  APPROVER_CLOSED_REASON,
  ApprovalChannel,
  Approver,
  DuplicateAskError,
  InvalidApproverOptionsError,
  InvalidAskResolutionError,
  InvalidCapacityError,
  InvalidPendingAskError,
  LoopctlError,
  askDigest,
} from "../src/index.js";
import type { AskResolution, PendingAsk } from "../src/ask/index.js";
import {
  BAD_WAIT_OPTIONS,
  flush,
  makeAsk,
  outliveEndings,
  outcomeNow,
  track,
  unlistenableSignal,
  unlistenableRefusal,
  unreadableReasonRefusal,
  unreadableReasonSignal,
} from "./support/ask-fixtures.js";

const approve: AskResolution = { type: "approve" };
const live = (): { signal: AbortSignal } => ({ signal: new AbortController().signal });
const listeners = (signal: AbortSignal): number => getEventListeners(signal, "abort").length;

describe("ApprovalChannel.pair", () => {
  it("returns a channel and its approver", () => {
    const [channel, approver] = ApprovalChannel.pair(2);
    expect(channel).toBeInstanceOf(ApprovalChannel);
    expect(approver).toBeInstanceOf(Approver);
    expect(channel.size).toBe(0);
    expect(channel.closed).toBe(false);
    expect(approver.closed).toBe(false);
    expect(approver.capacity).toBe(2);
    approver.close();
  });

  it("rejects, never throws, when an untyped caller parks a non-ask or omits the signal", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const call = (ask: unknown, options: unknown): Promise<AskResolution> =>
      channel.resolve(ask as PendingAsk, options as { signal: AbortSignal });
    await expect(call(makeAsk(0), undefined)).rejects.toBeInstanceOf(InvalidPendingAskError);
    await expect(call(makeAsk(0), { signal: "soon" })).rejects.toThrow(/AbortSignal/);
    await expect(call(null, live())).rejects.toBeInstanceOf(InvalidPendingAskError);
    await expect(call({ id: 7 }, live())).rejects.toMatchObject({ code: "ASK_INVALID" });
    expect(approver.pending).toBe(0);
    approver.close();
  });

  it.each([
    ["an id that is not a UUID", { id: "not-a-uuid" }, "id"],
    ["a sessionId that is not a UUID", { sessionId: "session-1" }, "sessionId"],
    ["a negative turn", { turn: -1 }, "turn"],
    ["a turn that is not an integer", { turn: 1.5 }, "turn"],
    ["an empty tool name", { tool: "" }, "tool"],
    ["an argsDigest that is not 16 hex digits", { argsDigest: "0123" }, "argsDigest"],
    ["an argsSha256 in capitals", { argsSha256: "A".repeat(64) }, "argsSha256"],
    ["no prompt", { prompt: undefined }, "prompt"],
  ])(
    "rejects an ask with %s with InvalidPendingAskError naming the field; it is never parked",
    async (_label, change, field) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      const ask = { ...makeAsk(0), ...change } as PendingAsk;
      const parked = channel.resolve(ask, live());
      await expect(parked).rejects.toBeInstanceOf(InvalidPendingAskError);
      await expect(parked).rejects.toMatchObject({
        code: "ASK_INVALID",
        message: expect.stringContaining(`${field}: `),
      });
      expect(channel.size).toBe(0);
      expect(approver.buffered + approver.inLine).toBe(0);
      expect(approver.resolve(ask.id, approve)).toBe(false);
      approver.close();
    },
  );

  it("rejects an object that has only an id and a tool, as an untyped caller might pass", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const call = (ask: unknown): Promise<AskResolution> => channel.resolve(ask as PendingAsk, live());
    await expect(call({ id: makeAsk(0).id, tool: "rm" })).rejects.toThrow(/not a PendingAsk: sessionId: /);
    expect(channel.size).toBe(0);
    approver.close();
  });

  it("parks an ask as PendingAskSchema reads it: the approver never sees a field the schema drops", async () => {
    const [channel, approver] = ApprovalChannel.pair(2);
    const ask = makeAsk(0);
    const parked = channel.resolve({ ...ask, args: { password: "hunter2" } } as PendingAsk, live());
    const taken = await approver.next();
    expect(taken).toEqual(ask);
    expect(taken).not.toHaveProperty("args");
    const viaProxy = makeAsk(1);
    const parkedViaProxy = channel.resolve(new Proxy(viaProxy, {}), live());
    expect(await approver.next()).toEqual(viaProxy);
    expect(approver.resolve(ask.id, approve)).toBe(true);
    expect(approver.resolve(viaProxy.id, approve)).toBe(true);
    expect(await Promise.all([parked, parkedViaProxy])).toEqual([approve, approve]);
    approver.close();
  });

  it.each([[-1], [Number.NaN], [1.5], [Number.POSITIVE_INFINITY], ["3" as unknown as number]])(
    "rejects capacity %s with InvalidCapacityError",
    (capacity) => {
      let error: unknown;
      try {
        ApprovalChannel.pair(capacity);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidCapacityError);
      expect(error).toBeInstanceOf(LoopctlError);
      expect((error as InvalidCapacityError).code).toBe("ASK_CAPACITY_INVALID");
      expect((error as InvalidCapacityError).message).toContain(String(capacity));
    },
  );

  it.each([
    ["a null-prototype object", Object.create(null) as object, "an object"],
    [
      "an object whose toString throws",
      {
        toString: (): never => {
          throw new Error("no");
        },
      },
      "an object",
    ],
  ])(
    "rejects %s as capacity with InvalidCapacityError, never a TypeError from naming it",
    (_label, capacity, shown) => {
      let error: unknown;
      try {
        ApprovalChannel.pair(capacity as unknown as number);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidCapacityError);
      expect((error as InvalidCapacityError).capacity).toBe(capacity);
      expect((error as InvalidCapacityError).message).toBe(
        `approval channel capacity must be a non-negative integer, got ${shown}`,
      );
    },
  );
});

describe("answers", () => {
  it("delivers the ask and settles the park with the approver's answer", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    const taken = await approver.next();
    expect(taken).toEqual(ask);
    expect(approver.resolve(ask.id, { type: "deny", reason: "not today", remember: "this_call" })).toBe(true);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "not today", remember: "this_call" });
    approver.close();
  });

  it("is single use: a duplicate answer returns false and does not change the outcome", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    await approver.next();
    expect(approver.resolve(ask.id, approve)).toBe(true);
    expect(approver.resolve(ask.id, { type: "deny" })).toBe(false);
    await expect(parked).resolves.toEqual(approve);
    expect(approver.pending).toBe(0);
    approver.close();
  });

  it("returns false for an unknown id and queues nothing for a later ask", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    expect(approver.resolve("00000000-0000-4000-8000-000000000000", approve)).toBe(false);
    const ask = makeAsk(0);
    const parked = track(channel.resolve(ask, live()));
    await flush();
    expect(parked.outcome.state).toBe("pending");
    expect(approver.pending).toBe(1);
    approver.close();
    await flush();
    expect(parked.outcome).toEqual({ state: "fulfilled", value: { type: "deny", reason: APPROVER_CLOSED_REASON } });
  });

  it("answers an ask not yet taken by next(); it is then never delivered", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const first = makeAsk(0);
    const second = makeAsk(1);
    const parkedFirst = channel.resolve(first, live());
    const parkedSecond = track(channel.resolve(second, live()));
    expect(approver.resolve(first.id, approve)).toBe(true);
    await expect(parkedFirst).resolves.toEqual(approve);
    expect(await approver.next()).toEqual(second);
    expect(parkedSecond.outcome.state).toBe("pending");
    approver.close();
  });

  it("validates the resolution: invalid throws InvalidAskResolutionError naming the ask, and the ask stays parked", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    let error: unknown;
    try {
      approver.resolve(ask.id, { type: "maybe" } as unknown as AskResolution);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidAskResolutionError);
    expect((error as InvalidAskResolutionError).code).toBe("ASK_RESOLUTION_INVALID");
    expect((error as InvalidAskResolutionError).askId).toBe(ask.id);
    expect((error as Error).message).toContain(ask.id);
    expect(approver.pending).toBe(1);
    expect(approver.resolve(ask.id, approve)).toBe(true);
    await expect(parked).resolves.toEqual(approve);
    approver.close();
  });

  it("an invalid answer is refused in one line naming the field at fault, not zod's issue list", () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    void channel.resolve(ask, live());
    expect(() => approver.resolve(ask.id, { type: "approve", remember: "forever" } as never)).toThrow(
      new InvalidAskResolutionError(ask.id, 'remember: Invalid option: expected one of "this_call"|"this_tool"'),
    );
    expect(() => approver.resolve(ask.id, { type: "maybe" } as never)).toThrow(
      `invalid resolution for ask ${ask.id}: type: Invalid discriminator value. Expected 'approve' | 'deny'`,
    );
    approver.close();
  });

  it.each([
    ["a number", 5, "5"],
    ["an empty string", "", ""],
    ["a symbol", Symbol("id"), "Symbol(id)"],
    ["an object without a string form", Object.create(null) as object, "(an unprintable object)"],
  ])(
    "an ask id that is %s: an unknown id for a valid answer, InvalidAskResolutionError naming it for an invalid one",
    async (_label, id, named) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      const ask = makeAsk(0);
      const parked = channel.resolve(ask, live());
      expect(approver.resolve(id as never, approve)).toBe(false);
      let error: unknown;
      try {
        approver.resolve(id as never, { type: "maybe" } as unknown as AskResolution);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidAskResolutionError);
      expect(error).toMatchObject({ code: "ASK_RESOLUTION_INVALID", askId: named });
      expect((error as Error).message.startsWith(`invalid resolution for ask ${named}: `)).toBe(true);
      expect(approver.pending).toBe(1);
      expect(approver.resolve(ask.id, approve)).toBe(true);
      await expect(parked).resolves.toEqual(approve);
      approver.close();
    },
  );

  it("an ask id that holds controls is quoted in JSON's escapes in the message of InvalidAskResolutionError, and kept as given in askId", () => {
    // An id taken from a request body and answered with a bad resolution must not write lines of its own to a log.
    const [, approver] = ApprovalChannel.pair(1);
    const id = "x\n\u001b[2K[ok] ask approved";
    let error: unknown;
    try {
      approver.resolve(id, { type: "maybe" } as unknown as AskResolution);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidAskResolutionError);
    expect(error).toMatchObject({ askId: id });
    expect((error as Error).message.startsWith(`invalid resolution for ask ${JSON.stringify(id)}: `)).toBe(true);
    expect((error as Error).message).not.toMatch(/[\u0000-\u001f\u007f]/);
    approver.close();
  });

  it("a Promise given as the answer throws InvalidAskResolutionError, and its later rejection is never unhandled", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    const late = new Promise<AskResolution>((_resolve, reject) => setImmediate(() => reject(new Error("late"))));
    expect(() => approver.resolve(ask.id, late as unknown as AskResolution)).toThrow(/got a Promise/);
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    expect(approver.resolve(ask.id, approve)).toBe(true);
    await expect(parked).resolves.toEqual(approve);
    approver.close();
  });

  it("strips unknown fields from an answer before the engine sees it", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    approver.resolve(ask.id, { type: "approve", extra: 1 } as unknown as AskResolution);
    await expect(parked).resolves.toEqual({ type: "approve" });
    approver.close();
  });

  it("rejects a second park of an id still parked with DuplicateAskError, leaving the first untouched", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const first = channel.resolve(ask, live());
    await expect(channel.resolve({ ...ask }, live())).rejects.toBeInstanceOf(DuplicateAskError);
    expect(approver.resolve(ask.id, approve)).toBe(true);
    await expect(first).resolves.toEqual(approve);
    approver.close();
  });

  it.each(["answered", "withdrawn"])(
    "refuses to park again an id that already ended (%s), so a stale answer to it never lands on the new ask",
    async (ending) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      const ask = makeAsk(0);
      const stop = new AbortController();
      const first = channel.resolve(ask, { signal: stop.signal }).catch((error: unknown) => error);
      if (ending === "answered") expect(approver.resolve(ask.id, { type: "deny" })).toBe(true);
      else stop.abort(new Error("expired"));
      await first;
      const again = track(channel.resolve(makeAsk(1, { id: ask.id, tool: "delete_file" }), live()));
      await flush();
      // The stale answer meant for the first ask finds nothing to approve.
      expect(approver.resolve(ask.id, approve)).toBe(false);
      expect(again.outcome.state).toBe("rejected");
      const error = (again.outcome as { reason: DuplicateAskError }).reason;
      expect(error).toBeInstanceOf(DuplicateAskError);
      expect(error.code).toBe("ASK_DUPLICATE_ID");
      expect(error.askId).toBe(ask.id);
      expect(error.message).toBe(`ask ${ask.id} already ended on this approval channel; ask ids must not be reused`);
      expect(channel.size).toBe(0);
      expect(approver.buffered).toBe(0);
      approver.close();
    },
  );

  it("remembers an ended id among its last 256 endings only: past them the id parks again", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const first = channel.resolve(ask, live());
    expect(approver.resolve(ask.id, { type: "deny" })).toBe(true);
    await first;
    await outliveEndings(channel);
    const again = channel.resolve({ ...ask }, live());
    expect(approver.resolve(ask.id, approve)).toBe(true);
    await expect(again).resolves.toEqual(approve);
    approver.close();
  });
});

describe("answers made for one ask (askDigest)", () => {
  it("reach the ask parked under the id only when it is the ask they were made for", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const shown = makeAsk(0, { tool: "read_file", prompt: "Read notes.txt?" });
    const first = channel.resolve(shown, live());
    expect(approver.resolve(shown.id, { type: "deny" }, { askDigest: askDigest(shown) })).toBe(true);
    await expect(first).resolves.toEqual({ type: "deny" });
    await outliveEndings(channel);
    // Ids from a seeded generator repeat across runs: the same id, another call.
    const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
    const second = channel.resolve(now, live());
    expect(approver.resolve(shown.id, approve, { askDigest: askDigest(shown) })).toBe(false);
    // Every field counts, the optional argsSha256 too.
    expect(approver.resolve(now.id, approve, { askDigest: askDigest({ ...now, argsSha256: "a".repeat(64) }) })).toBe(
      false,
    );
    expect((await outcomeNow(second)).state).toBe("pending");
    expect(approver.resolve(now.id, { type: "deny" }, {})).toBe(true);
    await expect(second).resolves.toEqual({ type: "deny" });
    approver.close();
  });

  it("refuses options that are not an object, or a digest that is not 64 lowercase hex digits (undefined included), with InvalidApproverOptionsError; the ask stays parked", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    for (const [label, options, argument] of [
      ["null as the options", null, "options"],
      ["a string as the options", "abc", "options"],
      ["a number as the digest", { askDigest: 7 }, "options.askDigest"],
      ["an upper-case digest", { askDigest: askDigest(ask).toUpperCase() }, "options.askDigest"],
      ["the args digest", { askDigest: ask.argsDigest }, "options.askDigest"],
      ["a misspelt askDigest, which would answer unchecked", { askdigest: askDigest(ask) }, "options"],
      ["an askDigest given as undefined, which would answer unchecked", { askDigest: undefined }, "options.askDigest"],
    ] as const) {
      let error: unknown;
      try {
        approver.resolve(ask.id, approve, options as never);
      } catch (e) {
        error = e;
      }
      expect(error, label).toBeInstanceOf(InvalidApproverOptionsError);
      expect(error, label).toMatchObject({ code: "ASK_OPTIONS_INVALID", method: "resolve", argument });
    }
    expect((await outcomeNow(parked)).state).toBe("pending");
    expect(approver.resolve(ask.id, approve, { askDigest: askDigest(ask) })).toBe(true);
    await expect(parked).resolves.toEqual(approve);
    approver.close();
  });
});

describe("order and capacity", () => {
  it("delivers asks in park order", async () => {
    const [channel, approver] = ApprovalChannel.pair(10);
    const asks = Array.from({ length: 5 }, (_, i) => makeAsk(i));
    for (const ask of asks) void channel.resolve(ask, live()).catch(() => undefined);
    const taken: PendingAsk[] = [];
    for (let i = 0; i < asks.length; i++) taken.push((await approver.next()) as PendingAsk);
    expect(taken).toEqual(asks);
    approver.close();
  });

  it("hands an ask straight to a next() already waiting, and concurrent next() calls get distinct asks", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const waiting = [approver.next(), approver.next()];
    const asks = [makeAsk(0), makeAsk(1)];
    for (const ask of asks) void channel.resolve(ask, live());
    expect(await Promise.all(waiting)).toEqual(asks);
    expect(approver.buffered).toBe(0);
    expect(approver.pending).toBe(2);
    approver.close();
  });

  it.each([
    [0, 1],
    [1, 1],
    [3, 3],
  ])(
    "capacity %i bounds the delivered-but-not-taken asks to %i; the rest wait in line, none lost",
    async (capacity, bound) => {
      const [channel, approver] = ApprovalChannel.pair(capacity);
      const asks = Array.from({ length: 6 }, (_, i) => makeAsk(i));
      const parked = asks.map((ask) => channel.resolve(ask, live()));
      expect(approver.buffered).toBe(bound);
      expect(approver.inLine).toBe(asks.length - bound);
      expect(channel.size).toBe(asks.length);
      for (const ask of asks) {
        const taken = await approver.next();
        expect(taken).toEqual(ask);
        expect(approver.buffered).toBeLessThanOrEqual(bound);
        expect(approver.resolve(ask.id, approve)).toBe(true);
      }
      expect(await Promise.all(parked)).toEqual(asks.map(() => approve));
      expect(approver.inLine).toBe(0);
      approver.close();
    },
  );

  it("never delivers an ask whose wait ended while it was in line", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const asks = [makeAsk(0), makeAsk(1), makeAsk(2)];
    const controllers = asks.map(() => new AbortController());
    const parked = asks.map((ask, i) => track(channel.resolve(ask, { signal: controllers[i]!.signal })));
    expect(approver.inLine).toBe(2);
    const reason = new Error("deadline");
    controllers[1]!.abort(reason);
    expect(approver.inLine).toBe(1);
    expect(await approver.next()).toEqual(asks[0]);
    expect(await approver.next()).toEqual(asks[2]);
    await flush();
    expect(parked[1]!.outcome).toEqual({ state: "rejected", reason });
    expect(approver.resolve(asks[1]!.id, approve)).toBe(false);
    approver.close();
  });
});

describe("the resolver's signal", () => {
  it("ends the wait: the park rejects with the signal's reason and a later answer returns false", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, { signal: controller.signal });
    expect(await approver.next()).toEqual(ask);
    const reason = new DOMException("deadline", "TimeoutError");
    controller.abort(reason);
    await expect(parked).rejects.toBe(reason);
    expect(approver.resolve(ask.id, approve)).toBe(false);
    expect(approver.pending).toBe(0);
    expect(listeners(controller.signal)).toBe(0);
    approver.close();
  });

  it("an answer given before the abort wins; the abort then changes nothing", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, { signal: controller.signal });
    expect(approver.resolve(ask.id, approve)).toBe(true);
    controller.abort(new Error("cancel"));
    await expect(parked).resolves.toEqual(approve);
    approver.close();
  });

  it("an already-aborted signal rejects at once and the ask is never delivered", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const reason = new Error("cancelled before the park");
    controller.abort(reason);
    const ask = makeAsk(0);
    await expect(channel.resolve(ask, { signal: controller.signal })).rejects.toBe(reason);
    expect(approver.pending).toBe(0);
    expect(approver.buffered).toBe(0);
    const later = makeAsk(1);
    void channel.resolve(later, live());
    expect(await approver.next()).toEqual(later);
    expect(approver.resolve(ask.id, approve)).toBe(false);
    approver.close();
  });

  it("refuses a signal that only inherits from AbortSignal, or one it cannot listen to, with InvalidPendingAskError; nothing is parked or delivered", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const inherited = await channel
      .resolve(ask, { signal: Object.create(AbortSignal.prototype) as AbortSignal })
      .catch((e: unknown) => e);
    expect(inherited).toBeInstanceOf(InvalidPendingAskError);
    expect(inherited).toMatchObject({
      code: "ASK_INVALID",
      message: "cannot park on the approval channel: options.signal must be an AbortSignal",
    });
    const unlistenable = new AbortController().signal;
    const trap = new Error("cannot listen");
    unlistenable.addEventListener = () => {
      throw trap;
    };
    const unheard = await channel.resolve(ask, { signal: unlistenable }).catch((e: unknown) => e);
    expect(unheard).toBeInstanceOf(InvalidPendingAskError);
    expect(unheard).toMatchObject({
      code: "ASK_INVALID",
      message: "cannot park on the approval channel: options.signal cannot be listened to",
      cause: trap,
    });
    expect(channel.size).toBe(0);
    expect(approver.buffered + approver.inLine).toBe(0);
    expect(approver.resolve(ask.id, approve)).toBe(false);
    // Nothing of either call is left: the same ask parks, is delivered and answered once.
    const parked = channel.resolve(ask, live());
    expect(await approver.next()).toEqual(ask);
    expect(approver.resolve(ask.id, approve)).toBe(true);
    expect(await parked).toEqual(approve);
    approver.close();
  });

  it("removes its abort listener once the ask is answered or denied by close", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const a = makeAsk(0);
    const b = makeAsk(1);
    const parkedA = channel.resolve(a, { signal: controller.signal });
    const parkedB = channel.resolve(b, { signal: controller.signal });
    expect(listeners(controller.signal)).toBe(2);
    approver.resolve(a.id, approve);
    await parkedA;
    expect(listeners(controller.signal)).toBe(1);
    approver.close();
    await parkedB;
    expect(listeners(controller.signal)).toBe(0);
  });
});

describe("close and dispose", () => {
  it("close() denies every awaiting ask, taken or in line, and every later ask at once", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const asks = [makeAsk(0), makeAsk(1), makeAsk(2)];
    const parked = asks.map((ask) => channel.resolve(ask, live()));
    expect(await approver.next()).toEqual(asks[0]);
    expect(approver.inLine).toBe(1);
    approver.close();
    const denial = { type: "deny", reason: APPROVER_CLOSED_REASON };
    expect(await Promise.all(parked)).toEqual([denial, denial, denial]);
    expect(channel.closed).toBe(true);
    await expect(channel.resolve(makeAsk(3), live())).resolves.toEqual(denial);
    expect(approver.resolve(asks[0]!.id, approve)).toBe(false);
    expect(approver.pending).toBe(0);
    expect(approver.inLine).toBe(0);
  });

  it("next() resolves undefined once closed, including a next() already waiting", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    const waiting = track(approver.next());
    await flush();
    expect(waiting.outcome.state).toBe("pending");
    approver.close();
    await flush();
    expect(waiting.outcome).toEqual({ state: "fulfilled", value: undefined });
    await expect(approver.next()).resolves.toBeUndefined();
    approver.close();
    expect(approver.closed).toBe(true);
  });

  it("a for await loop over the approver ends when it is closed", async () => {
    const [channel, approver] = ApprovalChannel.pair(2);
    const asks = [makeAsk(0), makeAsk(1)];
    const parked = asks.map((ask) => channel.resolve(ask, live()));
    const seen: string[] = [];
    for await (const ask of approver) {
      seen.push(ask.id);
      approver.resolve(ask.id, approve);
      if (seen.length === asks.length) approver.close();
    }
    expect(seen).toEqual(asks.map((a) => a.id));
    expect(await Promise.all(parked)).toEqual([approve, approve]);
  });

  it("leaving a for await loop early does not close the approver", async () => {
    const [channel, approver] = ApprovalChannel.pair(2);
    const asks = [makeAsk(0), makeAsk(1)];
    const parked = asks.map((ask) => channel.resolve(ask, live()));
    for await (const ask of approver) {
      approver.resolve(ask.id, approve);
      break;
    }
    expect(approver.closed).toBe(false);
    expect(await approver.next()).toEqual(asks[1]);
    approver.resolve(asks[1]!.id, { type: "deny" });
    expect(await Promise.all(parked)).toEqual([approve, { type: "deny" }]);
    approver.close();
  });

  it("an iterator stopped while it waits for an ask (return(), a stream over it destroyed) ends at once and takes no ask: the next consumer gets it", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const iterator = approver[Symbol.asyncIterator]();
    const waiting = iterator.next();
    const ended = { state: "fulfilled", value: { done: true, value: undefined } };
    await expect(outcomeNow(iterator.return(undefined))).resolves.toEqual(ended);
    await expect(outcomeNow(waiting)).resolves.toEqual(ended);
    await expect(iterator.next()).resolves.toEqual({ done: true, value: undefined });

    // A Node stream over the approver, destroyed while it waits: it closes, and leaves the ask to others.
    const stream = Readable.from(approver);
    const streamed: PendingAsk[] = [];
    stream.on("data", (ask: PendingAsk) => streamed.push(ask));
    await flush();
    const closed = new Promise<void>((resolve) => stream.once("close", resolve));
    stream.destroy();
    await closed;

    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    await flush();
    expect(streamed).toEqual([]);
    expect(approver.buffered).toBe(1);
    expect(await approver.next()).toEqual(ask);
    expect(approver.resolve(ask.id, approve)).toBe(true);
    await expect(parked).resolves.toEqual(approve);
    approver.close();
  });

  it("a stream made with highWaterMark 0 takes an ask only when it is read: destroyed, it leaves the asks not read to the next consumer", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const stream = Readable.from(approver, { highWaterMark: 0 });
    const asks = [makeAsk(0), makeAsk(1), makeAsk(2)];
    const parked = asks.map((ask) => channel.resolve(ask, live()));
    const first = await new Promise<PendingAsk>((resolve) => stream.once("readable", () => resolve(stream.read())));
    expect(first).toEqual(asks[0]);
    await flush();
    const closed = new Promise<void>((resolve) => stream.once("close", resolve));
    stream.destroy();
    await closed;
    expect(stream.readableLength).toBe(0);
    expect(await approver.next()).toEqual(asks[1]);
    expect(await approver.next()).toEqual(asks[2]);
    approver.close();
    await Promise.all(parked);
  });

  it("an iterator's throw() ends it like return(), rejecting with what was thrown, and takes no ask", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const iterator = approver[Symbol.asyncIterator]();
    const waiting = iterator.next();
    const thrown = new Error("stop");
    await expect(outcomeNow(iterator.throw(thrown))).resolves.toEqual({ state: "rejected", reason: thrown });
    await expect(outcomeNow(waiting)).resolves.toEqual({
      state: "fulfilled",
      value: { done: true, value: undefined },
    });
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    expect(await approver.next()).toEqual(ask);
    approver.resolve(ask.id, approve);
    await expect(parked).resolves.toEqual(approve);
    approver.close();
  });

  it("Symbol.dispose closes, so `using` denies what is left", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const parked = channel.resolve(makeAsk(0), live());
    {
      using scoped = approver;
      expect(scoped.pending).toBe(1);
    }
    expect(approver.closed).toBe(true);
    await expect(parked).resolves.toEqual({ type: "deny", reason: APPROVER_CLOSED_REASON });
  });
});

describe("next({ signal })", () => {
  it.each(BAD_WAIT_OPTIONS)(
    "%s: rejects with InvalidApproverOptionsError naming it, never throws, and leaves no taker behind",
    async (_label, options, argument) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      let taking: Promise<PendingAsk | undefined> | undefined;
      expect(() => {
        taking = approver.next(options as never);
      }).not.toThrow();
      await expect(taking).rejects.toBeInstanceOf(InvalidApproverOptionsError);
      await expect(taking).rejects.toMatchObject({ code: "ASK_OPTIONS_INVALID", method: "next", argument });
      await expect(taking).rejects.toThrow(`Approver.next: ${argument}`);
      // The next ask is delivered, not handed to the rejected call, and nothing of it stays once it ends.
      const ask = makeAsk(0);
      const parked = channel.resolve(ask, live());
      expect(approver.buffered).toBe(1);
      expect(await approver.next()).toEqual(ask);
      expect(approver.resolve(ask.id, approve)).toBe(true);
      await expect(parked).resolves.toEqual(approve);
      expect(channel.size).toBe(0);
      const again = channel.resolve(makeAsk(1), live());
      approver.close();
      await expect(again).resolves.toEqual({ type: "deny", reason: APPROVER_CLOSED_REASON });
    },
  );

  it("a signal that cannot be listened to is refused with what it threw as the cause; the ask that comes goes to the next call", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const trap = new Error("cannot listen");
    await expect(approver.next({ signal: unlistenableSignal(trap) })).rejects.toMatchObject(
      unlistenableRefusal("next", trap),
    );
    const waiting = approver.next();
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    expect(approver.buffered).toBe(0);
    expect(await waiting).toEqual(ask);
    expect(approver.resolve(ask.id, approve)).toBe(true);
    await expect(parked).resolves.toEqual(approve);
    approver.close();
  });

  it("rejects with the signal's reason and does not swallow the next ask", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const waiting = approver.next({ signal: controller.signal });
    const reason = new Error("UI closed the panel");
    controller.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    expect(listeners(controller.signal)).toBe(0);
    const ask = makeAsk(0);
    void channel.resolve(ask, live());
    expect(approver.buffered).toBe(1);
    expect(await approver.next()).toEqual(ask);
    approver.close();
  });

  it("an already-aborted signal rejects without taking a buffered ask", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    void channel.resolve(ask, live());
    const reason = new Error("stop");
    await expect(approver.next({ signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(approver.buffered).toBe(1);
    expect(await approver.next()).toEqual(ask);
    approver.close();
  });

  it("a taker whose signal is aborted mid-dispatch is skipped; the ask goes to the next taker", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const ask = makeAsk(0);
    // This listener runs before the taker's own: it parks while the signal is
    // already aborted but the taker has not heard of it yet.
    controller.signal.addEventListener("abort", () => void channel.resolve(ask, live()), { once: true });
    const first = approver.next({ signal: controller.signal });
    const second = approver.next();
    const reason = new Error("gone");
    controller.abort(reason);
    await expect(first).rejects.toBe(reason);
    await expect(second).resolves.toEqual(ask);
    approver.close();
  });

  it("a taker whose signal turns unreadable is rejected with the error; the ask goes to the next taker", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const signal = new AbortController().signal;
    let broken = false;
    Object.defineProperty(signal, "aborted", {
      get: () => {
        if (broken) throw new Error("unreadable");
        return false;
      },
    });
    const first = approver.next({ signal });
    const second = approver.next();
    broken = true;
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    await expect(first).rejects.toThrow("unreadable");
    await expect(second).resolves.toEqual(ask);
    expect(approver.resolve(ask.id, approve)).toBe(true);
    await expect(parked).resolves.toEqual(approve);
    expect(channel.size).toBe(0);
    approver.close();
  });

  it("removes its listener once it gets an ask", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const controller = new AbortController();
    const waiting = approver.next({ signal: controller.signal });
    expect(listeners(controller.signal)).toBe(1);
    void channel.resolve(makeAsk(0), live());
    await waiting;
    expect(listeners(controller.signal)).toBe(0);
    approver.close();
  });
});

describe("a signal whose reason cannot be read", () => {
  const trap = new Error("reason unreadable");

  it("aborting it ends the park with a typed error: nothing is left parked or waiting", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const { controller, signal } = unreadableReasonSignal(trap);
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, { signal });
    const ended = approver.ended(ask.id);
    controller.abort();
    expect(await outcomeNow(parked)).toMatchObject({ state: "rejected" });
    await expect(parked).rejects.toBeInstanceOf(InvalidPendingAskError);
    await expect(parked).rejects.toMatchObject({
      code: "ASK_INVALID",
      message: "cannot park on the approval channel: options.signal aborted, and its reason could not be read",
      cause: trap,
    });
    expect(await outcomeNow(ended)).toEqual({ state: "fulfilled", value: { type: "withdrawn", reason: "unknown" } });
    await expect(ended).resolves.toEqual({ type: "withdrawn", reason: "unknown" });
    expect(channel.size).toBe(0);
    expect(approver.buffered).toBe(0);
    expect(approver.resolve(ask.id, approve)).toBe(false);
    approver.close();
  });

  it("an ask parked on it already aborted is refused with the same typed error", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const { controller, signal } = unreadableReasonSignal(trap);
    controller.abort();
    await expect(channel.resolve(makeAsk(0), { signal })).rejects.toMatchObject({
      code: "ASK_INVALID",
      message: "cannot park on the approval channel: options.signal aborted, and its reason could not be read",
      cause: trap,
    });
    expect(channel.size).toBe(0);
    approver.close();
  });

  it.each(["next", "ended"] as const)(
    "%s() given it rejects with a typed error when it aborts, before or during the wait",
    async (method) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      const ask = makeAsk(0);
      const parked = channel.resolve(ask, live());
      // next() waits only when nothing is buffered: the ask is taken first.
      if (method === "next") expect(await approver.next()).toEqual(ask);
      const refusal = unreadableReasonRefusal(method, trap);
      const before = unreadableReasonSignal(trap);
      before.controller.abort();
      const call = (signal: AbortSignal): Promise<unknown> =>
        method === "next" ? approver.next({ signal }) : approver.ended(ask.id, { signal });
      await expect(call(before.signal)).rejects.toMatchObject(refusal);
      const during = unreadableReasonSignal(trap);
      const waiting = call(during.signal);
      await flush();
      during.controller.abort();
      expect(await outcomeNow(waiting)).toMatchObject({ state: "rejected" });
      await expect(waiting).rejects.toBeInstanceOf(InvalidApproverOptionsError);
      await expect(waiting).rejects.toMatchObject(refusal);
      // The ask is untouched, and the next ask goes to the next taker.
      expect(approver.resolve(ask.id, approve)).toBe(true);
      await expect(parked).resolves.toEqual(approve);
      const next = approver.next();
      const second = makeAsk(1);
      void channel.resolve(second, live());
      await expect(next).resolves.toEqual(second);
      approver.close();
    },
  );
});

describe("the options of next(), ended() and resolve()", () => {
  it("are refused as every options object is: not an object (a string named, never shown), an array, a signal in their place, keys that cannot be listed, an unknown key", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const ask = makeAsk(0);
    const parked = channel.resolve(ask, live());
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const throwing = {
      get signal(): never {
        throw new Error("boom");
      },
    };
    const refusal = async (call: () => unknown): Promise<unknown> => {
      try {
        return await call();
      } catch (error) {
        return error;
      }
    };
    const shape = "must be an object or undefined, got";
    for (const [method, call, message] of [
      ["next", () => approver.next([] as never), `options ${shape} an array`],
      ["next", () => approver.next(3 as never), `options ${shape} 3`],
      ["ended", () => approver.ended(ask.id, "postgres://admin:hunter2@db" as never), `options ${shape} a string`],
      [
        "next",
        () => approver.next(new AbortController().signal as never),
        `options ${shape} an AbortSignal (give it as { signal })`,
      ],
      [
        "next",
        () => approver.next({ Signal: new AbortController().signal } as never),
        "options holds an unknown option 'Signal' (did you mean signal?)",
      ],
      [
        "ended",
        () => approver.ended(ask.id, { timeoutMs: 5 } as never),
        "options holds an unknown option 'timeoutMs' (the only option is signal)",
      ],
      [
        "next",
        () => approver.next(proxy),
        "options cannot be read: Cannot perform 'IsArray' on a proxy that has been revoked",
      ],
      ["next", () => approver.next(throwing), "options cannot be read: boom"],
      ["resolve", () => approver.resolve(ask.id, approve, [] as never), `options ${shape} an array`],
      [
        "resolve",
        () => approver.resolve(ask.id, approve, new AbortController().signal as never),
        `options ${shape} an AbortSignal (resolve() takes { askDigest })`,
      ],
      [
        "resolve",
        () => approver.resolve(ask.id, approve, { digest: "" } as never),
        "options holds an unknown option 'digest' (the only option is askDigest)",
      ],
    ] as const) {
      const error = await refusal(call);
      expect(error, message).toBeInstanceOf(InvalidApproverOptionsError);
      expect(error, message).toMatchObject({ method, argument: "options", message: `Approver.${method}: ${message}` });
    }
    // Nothing was taken or answered: the ask is still there, parked, for the next call.
    expect((await outcomeNow(parked)).state).toBe("pending");
    expect(await approver.next()).toEqual(ask);
    expect(approver.resolve(ask.id, approve)).toBe(true);
    await expect(parked).resolves.toEqual(approve);
    approver.close();
  });
});
