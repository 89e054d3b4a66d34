import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { APPROVER_CLOSED_REASON, ApprovalChannel, InvalidPendingAskError, PendingAskSchema } from "../src/ask/index.js";
import type { AskResolution, PendingAsk } from "../src/ask/index.js";
import { flush, makeAsk, track } from "./support/ask-fixtures.js";
import type { Outcome, Tracked } from "./support/ask-fixtures.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 300);

type Command =
  | { readonly t: "park"; readonly preAborted: boolean }
  | { readonly t: "answer"; readonly ask: number; readonly approve: boolean; readonly unknown: boolean }
  | { readonly t: "abort"; readonly ask: number }
  | { readonly t: "take"; readonly withSignal: boolean }
  | { readonly t: "abortTake"; readonly taker: number }
  | { readonly t: "close" };

const command: fc.Arbitrary<Command> = fc.oneof(
  { arbitrary: fc.record({ t: fc.constant("park" as const), preAborted: fc.boolean() }), weight: 4 },
  {
    arbitrary: fc.record({
      t: fc.constant("answer" as const),
      ask: fc.nat(),
      approve: fc.boolean(),
      unknown: fc.boolean(),
    }),
    weight: 4,
  },
  { arbitrary: fc.record({ t: fc.constant("abort" as const), ask: fc.nat() }), weight: 2 },
  { arbitrary: fc.record({ t: fc.constant("take" as const), withSignal: fc.boolean() }), weight: 3 },
  { arbitrary: fc.record({ t: fc.constant("abortTake" as const), taker: fc.nat() }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("close" as const) }), weight: 1 },
);

type Expected =
  | { readonly state: "parked" }
  | { readonly state: "fulfilled"; readonly value: AskResolution }
  | { readonly state: "rejected"; readonly reason: unknown };

interface ModelAsk {
  readonly ask: PendingAsk;
  readonly controller: AbortController;
  readonly reason: Error;
  readonly park: Tracked<AskResolution>;
  expected: Expected;
  answersAccepted: number;
}

interface ModelTaker {
  readonly take: Tracked<PendingAsk | undefined>;
  readonly controller: AbortController | undefined;
  readonly reason: Error;
  expected: Outcome<PendingAsk | undefined> | { readonly state: "waiting" };
}

describe("ApprovalChannel under random interleavings", () => {
  it("settles every park exactly once, approves only on an approve in time, accepts at most one answer per ask", async () => {
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: 3 }), fc.array(command, { maxLength: 60 }), async (capacity, commands) => {
        const [channel, approver] = ApprovalChannel.pair(capacity);
        const asks: ModelAsk[] = [];
        const untaken: ModelAsk[] = [];
        const takers: ModelTaker[] = [];
        const waiting: ModelTaker[] = [];
        let closed = false;

        const removeUntaken = (entry: ModelAsk): void => {
          const at = untaken.indexOf(entry);
          if (at >= 0) untaken.splice(at, 1);
        };
        const closeModel = (): void => {
          closed = true;
          for (const entry of asks) {
            if (entry.expected.state === "parked") {
              entry.expected = { state: "fulfilled", value: { type: "deny", reason: APPROVER_CLOSED_REASON } };
            }
          }
          untaken.length = 0;
          for (const taker of waiting.splice(0)) taker.expected = { state: "fulfilled", value: undefined };
        };

        for (const [step, cmd] of commands.entries()) {
          switch (cmd.t) {
            case "park": {
              const controller = new AbortController();
              const reason = new Error(`abort ask ${asks.length}`);
              if (cmd.preAborted) controller.abort(reason);
              const ask = makeAsk(asks.length);
              const entry: ModelAsk = {
                ask,
                controller,
                reason,
                park: track(channel.resolve(ask, { signal: controller.signal })),
                expected: { state: "parked" },
                answersAccepted: 0,
              };
              asks.push(entry);
              if (cmd.preAborted) entry.expected = { state: "rejected", reason };
              else if (closed) {
                entry.expected = { state: "fulfilled", value: { type: "deny", reason: APPROVER_CLOSED_REASON } };
              } else {
                const taker = waiting.shift();
                if (taker === undefined) untaken.push(entry);
                else taker.expected = { state: "fulfilled", value: ask };
              }
              break;
            }
            case "answer": {
              const resolution: AskResolution = cmd.approve
                ? { type: "approve" }
                : { type: "deny", reason: `no ${step}` };
              const entry = cmd.unknown || asks.length === 0 ? undefined : asks[cmd.ask % asks.length];
              const id = entry?.ask.id ?? makeAsk(-1).id;
              const accepted = approver.resolve(id, resolution);
              const expectAccepted = entry?.expected.state === "parked";
              expect(accepted).toBe(expectAccepted);
              if (entry !== undefined && accepted) {
                entry.answersAccepted += 1;
                entry.expected = { state: "fulfilled", value: resolution };
                removeUntaken(entry);
              }
              break;
            }
            case "abort": {
              const entry = asks.length === 0 ? undefined : asks[cmd.ask % asks.length];
              if (entry === undefined) break;
              entry.controller.abort(entry.reason);
              if (entry.expected.state === "parked") {
                entry.expected = { state: "rejected", reason: entry.reason };
                removeUntaken(entry);
              }
              break;
            }
            case "take": {
              const controller = cmd.withSignal ? new AbortController() : undefined;
              const taker: ModelTaker = {
                take: track(approver.next(controller === undefined ? {} : { signal: controller.signal })),
                controller,
                reason: new Error(`abort take ${takers.length}`),
                expected: { state: "waiting" },
              };
              takers.push(taker);
              if (closed) taker.expected = { state: "fulfilled", value: undefined };
              else {
                const next = untaken.shift();
                if (next === undefined) waiting.push(taker);
                else taker.expected = { state: "fulfilled", value: next.ask };
              }
              break;
            }
            case "abortTake": {
              const abortable = waiting.filter((taker) => taker.controller !== undefined);
              const taker = abortable[cmd.taker % Math.max(abortable.length, 1)];
              if (taker === undefined) break;
              taker.controller?.abort(taker.reason);
              waiting.splice(waiting.indexOf(taker), 1);
              taker.expected = { state: "rejected", reason: taker.reason };
              break;
            }
            case "close": {
              approver.close();
              closeModel();
              break;
            }
          }
          const parked = asks.filter((entry) => entry.expected.state === "parked").length;
          expect(approver.pending).toBe(parked);
          expect(channel.size).toBe(parked);
          expect(approver.buffered).toBe(Math.min(Math.max(capacity, 1), untaken.length));
          expect(approver.inLine).toBe(untaken.length - approver.buffered);
        }

        approver.close();
        closeModel();
        await flush();

        for (const entry of asks) {
          expect(entry.park.settlements).toBe(1);
          expect(entry.answersAccepted).toBeLessThanOrEqual(1);
          expect(entry.park.outcome).toEqual(entry.expected);
          if (entry.park.outcome.state === "fulfilled" && entry.park.outcome.value.type === "approve") {
            expect(entry.answersAccepted).toBe(1);
          }
        }
        for (const taker of takers) {
          expect(taker.take.settlements).toBe(1);
          expect(taker.take.outcome).toEqual(taker.expected);
        }
        // Every ask a next() returned was parked, and none was returned twice.
        const delivered = takers.flatMap((taker) =>
          taker.take.outcome.state === "fulfilled" && taker.take.outcome.value !== undefined
            ? [taker.take.outcome.value.id]
            : [],
        );
        expect(new Set(delivered).size).toBe(delivered.length);
        expect(approver.pending).toBe(0);
      }),
      { numRuns: RUNS },
    );
  });
});

/** Values an untyped caller could put in any field of an ask: valid ones for some field, and near misses. */
const fieldValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom<unknown>(
    "0f8fad5b-d9cb-469f-a165-70867728950e",
    "0F8FAD5B-D9CB-469F-A165-70867728950E",
    "0f8fad5b-d9cb-469f-a165-70867728950e\n",
    "0f8fad5b-d9cb-469f-a165-70867728950",
    "0f8fad5bd9cb469fa16570867728950e",
    "0123456789abcdef",
    "0123456789ABCDEF",
    "0123456789abcde",
    "a".repeat(64),
    "A".repeat(64),
    "",
    "x",
    0,
    -0,
    1,
    -1,
    1.5,
    2 ** 53,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    null,
    undefined,
    true,
    {},
    [],
  ),
  fc.string(),
  fc.integer(),
);

const FIELDS = ["id", "sessionId", "runId", "turn", "callId", "tool", "argsDigest", "argsSha256", "prompt"] as const;

/** A valid ask with some fields replaced, removed, or added. */
const candidate: fc.Arbitrary<Record<string, unknown>> = fc
  .record({
    withSha: fc.boolean(),
    changes: fc.array(fc.tuple(fc.constantFrom(...FIELDS, "extra"), fc.option(fieldValue, { nil: "remove" })), {
      maxLength: 3,
    }),
  })
  .map(({ withSha, changes }) => {
    const ask: Record<string, unknown> = { ...makeAsk(1), ...(withSha ? { argsSha256: "f".repeat(64) } : {}) };
    for (const [field, value] of changes) {
      if (value === "remove") delete ask[field];
      else ask[field] = value;
    }
    return ask;
  });

describe("ApprovalChannel parks exactly what PendingAskSchema accepts", () => {
  it("rejects with InvalidPendingAskError, parking nothing, what the schema rejects; hands on what it accepts as the schema reads it", async () => {
    await fc.assert(
      fc.asyncProperty(candidate, async (ask) => {
        const [channel, approver] = ApprovalChannel.pair(1);
        const schema = PendingAskSchema.safeParse(ask);
        const parked = channel.resolve(ask as PendingAsk, { signal: new AbortController().signal });
        if (!schema.success) {
          await expect(parked).rejects.toBeInstanceOf(InvalidPendingAskError);
          expect(channel.size).toBe(0);
        } else {
          expect(await approver.next()).toEqual(schema.data);
          expect(approver.resolve(schema.data.id, { type: "approve" })).toBe(true);
          await expect(parked).resolves.toEqual({ type: "approve" });
        }
        approver.close();
      }),
      { numRuns: RUNS },
    );
  });
});
