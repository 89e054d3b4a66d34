import { ApprovalChannel, SyncAskResolver } from "../../src/ask/index.js";
import type { AskResolution, AskResolver, PendingAsk, ResolveOptions } from "../../src/ask/index.js";
import type { LoopManagers } from "../../src/engine/index.js";
import type { GrantStore } from "../../src/grant/index.js";

/** A wired resolver whose answers come from `answer`. */
export interface WiredResolver {
  readonly managers: LoopManagers;
  /** Every ask the resolver received, in order. */
  readonly asks: PendingAsk[];
  /** Stops the approver side (if any) and waits for it. */
  close(): Promise<void>;
}

/** One way of answering asks, so the same scenario runs through each. */
export interface ResolverVariant {
  readonly name: string;
  wire(base: LoopManagers, answer: (ask: PendingAsk) => AskResolution): WiredResolver;
}

export const syncVariant: ResolverVariant = {
  name: "SyncAskResolver",
  wire(base, answer) {
    const asks: PendingAsk[] = [];
    const resolver = new SyncAskResolver((ask) => {
      asks.push(ask);
      return answer(ask);
    });
    return { managers: base.withAskResolver(resolver), asks, close: async () => undefined };
  },
};

/** An ApprovalChannel with an approver loop that answers every ask it takes. */
export const channelVariant: ResolverVariant = {
  name: "ApprovalChannel",
  wire(base, answer) {
    const asks: PendingAsk[] = [];
    const [channel, approver] = ApprovalChannel.pair(4);
    const loop = (async () => {
      for await (const ask of approver) {
        asks.push(ask);
        if (!approver.resolve(ask.id, answer(ask))) throw new Error(`answer to ${ask.id} was not taken`);
      }
    })();
    return {
      managers: base.withAskResolver(channel),
      asks,
      close: async () => {
        approver.close();
        await loop;
      },
    };
  },
};

/** A resolver the test answers by hand; records the signal each ask got. */
export class ManualResolver implements AskResolver {
  readonly parked: {
    ask: PendingAsk;
    signal: AbortSignal;
    answer(resolution: unknown): void;
    fail(error: unknown): void;
  }[] = [];
  calls = 0;

  resolve(ask: PendingAsk, options: ResolveOptions): Promise<AskResolution> {
    this.calls += 1;
    return new Promise((resolve, reject) => {
      this.parked.push({ ask, signal: options.signal, answer: (r) => resolve(r as AskResolution), fail: reject });
    });
  }
}

/** An ApprovalChannel answering through an approver loop, with an (empty) in-memory grant store consulted first. */
export function grantStoreVariant(makeStore: () => GrantStore): ResolverVariant {
  return {
    name: "ApprovalChannel with a grant store",
    wire(base, answer) {
      return channelVariant.wire(base.withGrantStore(makeStore()), answer);
    },
  };
}
