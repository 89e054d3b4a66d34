import { describe, expect, it } from "vitest";
import {
  ApprovalChannel,
  AskCallbackError,
  InvalidAskResolutionError,
  InvalidPendingAskError,
  SyncAskResolver,
} from "../src/ask/index.js";
import type { AskResolution, PendingAsk, ResolveOptions } from "../src/ask/index.js";
import { makeAsk } from "./support/ask-fixtures.js";

/** Objects an untyped caller could hand over: every property read throws. */
const bomb = (): object =>
  new Proxy(
    {},
    {
      get() {
        throw new Error("getter bomb");
      },
      has() {
        throw new Error("has bomb");
      },
    },
  );
function revoked(): object {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
}

/** Calls `fn`; a synchronous throw fails the test, the returned promise must reject with `type`. */
async function rejectsWithoutThrowing(
  fn: () => Promise<unknown>,
  type: abstract new (...args: never[]) => Error,
): Promise<void> {
  let pending: Promise<unknown> | undefined;
  expect(() => {
    pending = fn();
  }).not.toThrow();
  await expect(pending).rejects.toBeInstanceOf(type);
}

describe("the ask module under hostile callers", () => {
  const signal = (): ResolveOptions => ({ signal: new AbortController().signal });

  it.each([
    ["an ask whose every property read throws", bomb],
    ["a revoked proxy as the ask", revoked],
  ])(
    "ApprovalChannel.resolve never throws synchronously: %s is a typed rejection, nothing parks",
    async (_label, make) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      await rejectsWithoutThrowing(() => channel.resolve(make() as PendingAsk, signal()), InvalidPendingAskError);
      expect(channel.size).toBe(0);
      expect(approver.buffered + approver.inLine).toBe(0);
      approver.close();
    },
  );

  it.each([
    ["options whose every property read throws", bomb],
    ["a revoked proxy as the options", revoked],
  ])("ApprovalChannel.resolve with %s: a typed rejection", async (_label, make) => {
    const [channel, approver] = ApprovalChannel.pair(1);
    await rejectsWithoutThrowing(() => channel.resolve(makeAsk(1), make() as ResolveOptions), InvalidPendingAskError);
    expect(channel.size).toBe(0);
    approver.close();
  });

  it.each([
    ["a resolution whose every property read throws", bomb],
    ["a revoked proxy as the resolution", revoked],
  ])(
    "Approver.resolve with %s throws InvalidAskResolutionError naming the ask; the ask stays parked",
    async (_label, make) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      const ask = makeAsk(2);
      const parked = channel.resolve(ask, signal());
      let thrown: unknown;
      try {
        approver.resolve(ask.id, make() as AskResolution);
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(InvalidAskResolutionError);
      expect((thrown as InvalidAskResolutionError).askId).toBe(ask.id);
      expect(channel.size).toBe(1);
      expect(approver.resolve(ask.id, { type: "deny", reason: "after the bomb" })).toBe(true);
      await expect(parked).resolves.toEqual({ type: "deny", reason: "after the bomb" });
      approver.close();
    },
  );

  it.each([
    ["an ask whose every property read throws", bomb],
    ["a revoked proxy as the ask", revoked],
  ])(
    "SyncAskResolver never throws synchronously: a callback that reads %s is a typed rejection",
    async (_label, make) => {
      const resolver = new SyncAskResolver((ask) => ask.tool === "read");
      await rejectsWithoutThrowing(() => resolver.resolve(make() as PendingAsk, signal()), AskCallbackError);
    },
  );

  it("a SyncAskResolver callback returning a hostile object is a typed rejection", async () => {
    const resolver = new SyncAskResolver(() => bomb() as AskResolution);
    await rejectsWithoutThrowing(() => resolver.resolve(makeAsk(3), signal()), InvalidAskResolutionError);
  });
});
