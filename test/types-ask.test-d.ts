import { describe, expectTypeOf, it } from "vitest";
import {
  ApprovalChannel,
  Approver,
  AskResolutionSchema,
  PendingAskSchema,
  SyncAskResolver,
  askDigest,
} from "loopctl/ask";
import type {
  AnswerOptions,
  AskEnding,
  AskInbox,
  AskResolution,
  AskResolver,
  PendingAsk,
  RememberScope,
  ResolveOptions,
  SyncAskCallback,
  WithdrawnReason,
} from "loopctl/ask";
import { LoopManagers } from "loopctl/engine";

describe("AskResolution", () => {
  it("approves or denies, remembering this call or this tool", () => {
    expectTypeOf<RememberScope>().toEqualTypeOf<"this_call" | "this_tool">();
    expectTypeOf<AskResolution>().toEqualTypeOf<
      | { readonly type: "approve"; readonly remember?: RememberScope | undefined }
      | { readonly type: "deny"; readonly reason?: string | undefined; readonly remember?: RememberScope | undefined }
    >();
    const answers: AskResolution[] = [
      { type: "approve" },
      { type: "approve", remember: "this_tool" },
      { type: "deny", reason: "not on Fridays", remember: "this_call" },
    ];
    void answers;
  });

  it("does not compile with a wrong shape", () => {
    // @ts-expect-error remember is a scope, not a flag
    const flag: AskResolution = { type: "approve", remember: true };
    // @ts-expect-error the scopes are this_call and this_tool; there is no "always"
    const always: AskResolution = { type: "approve", remember: "always" };
    // @ts-expect-error an approval carries no reason
    const reason: AskResolution = { type: "approve", reason: "fine" };
    // @ts-expect-error the verdicts are approve and deny
    const allow: AskResolution = { type: "allow" };
    void [flag, always, reason, allow];
  });

  it("is what its schema parses", () => {
    expectTypeOf(AskResolutionSchema.parse({})).toExtend<AskResolution>();
    expectTypeOf(PendingAskSchema.parse({})).toExtend<PendingAsk>();
  });
});

describe("PendingAsk", () => {
  it("carries digests and a prompt, never the arguments", () => {
    expectTypeOf<keyof PendingAsk>().toEqualTypeOf<
      "id" | "sessionId" | "runId" | "turn" | "callId" | "tool" | "argsDigest" | "argsSha256" | "prompt"
    >();
    expectTypeOf<PendingAsk["prompt"]>().toBeString();
    const ask = {} as PendingAsk;
    // @ts-expect-error an ask is read-only
    ask.prompt = "approve everything";
  });
});

describe("AskResolver", () => {
  it("resolves one ask with a signal to honour", () => {
    expectTypeOf<AskResolver["resolve"]>().parameters.toEqualTypeOf<[ask: PendingAsk, options: ResolveOptions]>();
    expectTypeOf<AskResolver["resolve"]>().returns.toEqualTypeOf<Promise<AskResolution>>();
    expectTypeOf<ResolveOptions["signal"]>().toEqualTypeOf<AbortSignal>();
  });

  it("is any object with that method", () => {
    const policy: AskResolver = {
      resolve: async (ask, { signal }) => {
        signal.throwIfAborted();
        return ask.tool === "read" ? { type: "approve" } : { type: "deny", reason: "read only" };
      },
    };
    void new LoopManagers().withAskResolver(policy);
    // @ts-expect-error a resolver answers with a resolution, not a boolean
    const yes: AskResolver = { resolve: async () => true };
    void yes;
  });

  it("includes the built-in resolvers", () => {
    expectTypeOf<ApprovalChannel>().toExtend<AskResolver>();
    expectTypeOf<SyncAskResolver>().toExtend<AskResolver>();
  });

  it("SyncAskResolver takes a boolean or a resolution, synchronously", () => {
    expectTypeOf<SyncAskCallback>().returns.toEqualTypeOf<boolean | AskResolution>();
    void new SyncAskResolver(() => true);
    void new SyncAskResolver((ask) => ({ type: "deny", reason: `no ${ask.tool}` }));
    // @ts-expect-error the callback answers synchronously; use an AskResolver to wait
    void new SyncAskResolver(async () => true);
  });
});

describe("AskInbox", () => {
  it("has next, resolve, ended and close", () => {
    expectTypeOf<AskInbox["next"]>().returns.toEqualTypeOf<Promise<PendingAsk | undefined>>();
    expectTypeOf<AskInbox["resolve"]>().parameters.toEqualTypeOf<
      [askId: string, resolution: AskResolution, options?: AnswerOptions]
    >();
    expectTypeOf<AnswerOptions>().toEqualTypeOf<{ readonly askDigest?: string }>();
    expectTypeOf(askDigest).toEqualTypeOf<(ask: PendingAsk) => string>();
    expectTypeOf<AskInbox["resolve"]>().returns.toEqualTypeOf<boolean | Promise<boolean>>();
    expectTypeOf<AskInbox["ended"]>().returns.toEqualTypeOf<Promise<AskEnding>>();
    expectTypeOf<AskInbox["close"]>().returns.toEqualTypeOf<void | Promise<void>>();
  });

  it("is still met by an inbox whose resolve takes only the id and the answer", () => {
    const inbox = {
      next: (): Promise<PendingAsk | undefined> => Promise.resolve(undefined),
      resolve: (_askId: string, _resolution: AskResolution): boolean => false,
      ended: (): Promise<AskEnding> => Promise.resolve({ type: "withdrawn", reason: "unknown" }),
      close: (): void => undefined,
    };
    expectTypeOf(inbox).toExtend<AskInbox>();
  });

  it("tells how an ask ended", () => {
    expectTypeOf<AskEnding>().toEqualTypeOf<
      | { readonly type: "answered"; readonly verdict: "approve" | "deny" }
      | { readonly type: "withdrawn"; readonly reason: WithdrawnReason }
    >();
    expectTypeOf<WithdrawnReason>().toEqualTypeOf<"expired" | "cancelled" | "closed" | "abandoned" | "unknown">();
  });
});

describe("ApprovalChannel and Approver", () => {
  it("come in pairs", () => {
    expectTypeOf(ApprovalChannel.pair).returns.toEqualTypeOf<[ApprovalChannel, Approver]>();
  });

  it("the approver is an AskInbox that answers synchronously and iterates asks", () => {
    const [, approver] = ApprovalChannel.pair(8);
    const inbox: AskInbox = approver;
    expectTypeOf(approver.resolve).returns.toEqualTypeOf<boolean>();
    expectTypeOf(approver).toExtend<AsyncIterable<PendingAsk>>();
    expectTypeOf(approver).toExtend<Disposable>();
    void inbox;
  });

  it("cannot be constructed directly", () => {
    // @ts-expect-error the constructor is private: ApprovalChannel.pair makes both ends
    void new Approver();
    // @ts-expect-error the constructor is private: ApprovalChannel.pair makes both ends
    void new ApprovalChannel();
  });
});
