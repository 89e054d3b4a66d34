import { describe, expect, it } from "vitest";
import {
  AskCallbackError,
  InvalidAskCallbackError,
  InvalidAskResolutionError,
  LoopctlError,
  SyncAskResolver,
} from "../src/index.js";
import type { AskResolution, PendingAsk } from "../src/ask/index.js";
import { ParkSignal } from "../src/ask/park-signal.js";
import { makeAsk } from "./support/ask-fixtures.js";

const live = (): { signal: AbortSignal } => ({ signal: new AbortController().signal });

describe("SyncAskResolver", () => {
  it("approves on true and denies on false", async () => {
    const resolver = new SyncAskResolver((ask) => ask.tool === "read_file");
    await expect(resolver.resolve(makeAsk(0, { tool: "read_file" }), live())).resolves.toEqual({ type: "approve" });
    await expect(resolver.resolve(makeAsk(1, { tool: "rm" }), live())).resolves.toEqual({ type: "deny" });
  });

  it("passes a full resolution through, keeping reason and remember and dropping unknown fields", async () => {
    const answer = { type: "deny", reason: "read-only session", remember: "this_tool", note: "x" } as AskResolution;
    const resolver = new SyncAskResolver(() => answer);
    await expect(resolver.resolve(makeAsk(0), live())).resolves.toEqual({
      type: "deny",
      reason: "read-only session",
      remember: "this_tool",
    });
    const approve = new SyncAskResolver(() => ({ type: "approve", remember: "this_call" }));
    await expect(approve.resolve(makeAsk(0), live())).resolves.toEqual({ type: "approve", remember: "this_call" });
  });

  it("hands the callback the ask it was given", async () => {
    const seen: PendingAsk[] = [];
    const resolver = new SyncAskResolver((ask) => {
      seen.push(ask);
      return true;
    });
    const ask = makeAsk(4);
    await resolver.resolve(ask, live());
    expect(seen).toEqual([ask]);
  });

  it("fails closed when the callback throws: rejects with AskCallbackError carrying the cause", async () => {
    const boom = new Error("policy db down");
    const resolver = new SyncAskResolver(() => {
      throw boom;
    });
    const ask = makeAsk(0);
    const error: unknown = await resolver.resolve(ask, live()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AskCallbackError);
    expect(error).toBeInstanceOf(LoopctlError);
    expect((error as AskCallbackError).code).toBe("ASK_CALLBACK_FAILED");
    expect((error as AskCallbackError).askId).toBe(ask.id);
    expect((error as AskCallbackError).message).toContain(ask.id);
    expect((error as AskCallbackError).cause).toBe(boom);
  });

  it("quotes a tool name that holds controls in JSON's escapes in the AskCallbackError message, so it cannot forge a line", async () => {
    const tool = "deploy\n\u001b[2K[ok] deploy approved";
    const resolver = new SyncAskResolver(() => {
      throw new Error("policy db down");
    });
    const ask = makeAsk(0, { tool });
    const error: unknown = await resolver.resolve(ask, live()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AskCallbackError);
    expect((error as Error).message).toBe(
      `ask resolver callback threw for ask ${ask.id} (tool ${JSON.stringify(tool)})`,
    );
    expect((error as Error).message).not.toMatch(/[\u0000-\u001f\u007f]/);
  });

  it.each([
    ["undefined", undefined],
    ["null", null],
    ["a string", "approve"],
    ["a number", 1],
    ["an unknown type", { type: "maybe" }],
    ["a bad remember", { type: "approve", remember: "forever" }],
    ["a non-string reason", { type: "deny", reason: 7 }],
  ])("fails closed when the callback returns %s: rejects with InvalidAskResolutionError", async (_, value) => {
    const resolver = new SyncAskResolver(() => value as unknown as boolean);
    const ask = makeAsk(0);
    const error: unknown = await resolver.resolve(ask, live()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidAskResolutionError);
    expect((error as InvalidAskResolutionError).code).toBe("ASK_RESOLUTION_INVALID");
    expect((error as InvalidAskResolutionError).askId).toBe(ask.id);
  });

  it("fails closed on an async callback, without leaking its rejection", async () => {
    const resolver = new SyncAskResolver((() => Promise.reject(new Error("late"))) as unknown as () => boolean);
    const error: unknown = await resolver.resolve(makeAsk(0), live()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidAskResolutionError);
    expect((error as Error).message).toContain("Promise");
  });

  it("respects an already-aborted signal: rejects with its reason and never consults the callback", async () => {
    let calls = 0;
    const resolver = new SyncAskResolver(() => {
      calls += 1;
      return true;
    });
    const controller = new AbortController();
    const reason = new Error("deadline");
    controller.abort(reason);
    await expect(resolver.resolve(makeAsk(0), { signal: controller.signal })).rejects.toBe(reason);
    expect(calls).toBe(0);
  });

  it("respects a park that has already ended: rejects with its signal's reason and never consults the callback", async () => {
    let calls = 0;
    const resolver = new SyncAskResolver(() => {
      calls += 1;
      return true;
    });
    const ask = makeAsk(0);
    const expired = new ParkSignal(ask.id);
    expired.end("expired");
    await expect(resolver.resolve(ask, expired.options)).rejects.toThrow(`ask ${ask.id} expired`);
    const cancelled = new ParkSignal(ask.id);
    const reason = new Error("stop");
    cancelled.cancelled(reason);
    await expect(resolver.resolve(ask, cancelled.options)).rejects.toBe(reason);
    expect(calls).toBe(0);
    await expect(resolver.resolve(ask, new ParkSignal(ask.id).options)).resolves.toEqual({ type: "approve" });
    expect(calls).toBe(1);
  });

  it("honours the signal of a copy of a park's options that replaces it: a wrapper's aborted signal is never answered", async () => {
    let calls = 0;
    const resolver = new SyncAskResolver(() => {
      calls += 1;
      return true;
    });
    const ask = makeAsk(0);
    const park = new ParkSignal(ask.id);
    const killSwitch = new AbortController();
    const reason = new Error("approvals stopped");
    killSwitch.abort(reason);
    await expect(resolver.resolve(ask, { ...park.options, signal: killSwitch.signal })).rejects.toBe(reason);
    await expect(resolver.resolve(ask, Object.assign({}, park.options, { signal: killSwitch.signal }))).rejects.toBe(
      reason,
    );
    expect(calls).toBe(0);
    // A copy that keeps the park's signal still ends with the park.
    const copy = { ...park.options };
    park.end("expired");
    await expect(resolver.resolve(ask, copy)).rejects.toThrow(`ask ${ask.id} expired`);
    expect(calls).toBe(0);
  });

  it("rejects a missing callback at construction with InvalidAskCallbackError", () => {
    expect(() => new SyncAskResolver(undefined as unknown as () => boolean)).toThrow(InvalidAskCallbackError);
    expect(() => new SyncAskResolver(undefined as unknown as () => boolean)).toThrow(/got undefined/);
  });
});
