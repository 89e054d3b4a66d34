import { getEventListeners, setMaxListeners } from "node:events";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ApprovalChannel } from "../src/ask/index.js";
import type { AskResolution } from "../src/ask/index.js";
import { makeAsk } from "./support/ask-fixtures.js";

const TOTAL = 100_000;
const BATCH = 500;

describe("no per-ask state outlives its wait", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it(`after ${TOTAL} asks (answered, aborted, in line, mixed) the channel is empty and no listener or timer is left`, async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    // One shared signal for a whole batch: every park adds a listener to it,
    // so its count shows whether settled parks remove theirs.
    let settled = 0;
    for (let start = 0; start < TOTAL; start += BATCH) {
      const shared = new AbortController();
      setMaxListeners(BATCH, shared.signal);
      const own: AbortController[] = [];
      const parks: Promise<AskResolution | undefined>[] = [];
      const asks = [];
      for (let i = start; i < start + BATCH; i++) {
        const ask = makeAsk(i);
        asks.push(ask);
        const controller = new AbortController();
        own.push(controller);
        const signal = i % 2 === 0 ? shared.signal : controller.signal;
        parks.push(channel.resolve(ask, { signal }).catch(() => undefined));
      }
      expect(channel.size).toBe(BATCH);
      // Take some, answer some (taken or not), abort the rest.
      for (let k = 0; k < BATCH / 10; k++) await approver.next();
      for (let k = 0; k < BATCH; k++) {
        const ask = asks[k]!;
        if (k % 3 === 0) approver.resolve(ask.id, { type: "approve" });
        else if (k % 3 === 1) approver.resolve(ask.id, { type: "deny", reason: "no" });
        else if (k % 2 === 1) own[k]!.abort(new Error("deadline"));
      }
      shared.abort(new Error("cancel"));
      settled += (await Promise.all(parks)).length;
      expect(getEventListeners(shared.signal, "abort")).toHaveLength(0);
      // Checking each of 100k own signals would dominate the run; sample whole batches.
      if (start % (BATCH * 20) === 0) {
        expect(own.every((controller) => getEventListeners(controller.signal, "abort").length === 0)).toBe(true);
      }
      expect(channel.size).toBe(0);
      expect(approver.buffered).toBe(0);
      expect(approver.inLine).toBe(0);
    }
    expect(settled).toBe(TOTAL);
    expect(approver.pending).toBe(0);
    expect(vi.getTimerCount()).toBe(0);

    // Aborted next() calls leave nothing behind either.
    for (let i = 0; i < 1_000; i++) {
      const controller = new AbortController();
      const waiting = approver.next({ signal: controller.signal }).catch(() => undefined);
      controller.abort(new Error("stop"));
      await waiting;
      expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
    }
    const ask = makeAsk(TOTAL);
    const last = channel.resolve(ask, { signal: new AbortController().signal });
    expect(await approver.next()).toEqual(ask);
    approver.resolve(ask.id, { type: "approve" });
    await expect(last).resolves.toEqual({ type: "approve" });
    approver.close();
    expect(vi.getTimerCount()).toBe(0);
  });
});
