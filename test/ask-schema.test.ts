import { describe, expect, it } from "vitest";
import { z } from "zod";
import { AskResolutionSchema, NIL_UUID, PendingAskSchema } from "../src/ask/index.js";
import { makeAsk } from "./support/ask-fixtures.js";

describe("PendingAskSchema", () => {
  it("parses a valid ask from JSON", () => {
    const ask = makeAsk(3);
    expect(PendingAskSchema.parse(JSON.parse(JSON.stringify(ask)))).toEqual(ask);
  });

  it("accepts the nil UUID as runId and turn 0", () => {
    expect(PendingAskSchema.parse(makeAsk(0, { runId: NIL_UUID })).turn).toBe(0);
  });

  it.each([
    ["id", { id: "not-a-uuid" }],
    ["sessionId", { sessionId: "" }],
    ["runId", { runId: 42 }],
    ["turn", { turn: -1 }],
    ["turn", { turn: 1.5 }],
    ["tool", { tool: "" }],
    ["argsDigest", { argsDigest: "0123456789ABCDEF" }],
    ["argsDigest", { argsDigest: "0123" }],
    ["prompt", { prompt: undefined }],
  ])("rejects a bad %s with a typed zod error naming the field", (field, patch) => {
    const result = PendingAskSchema.safeParse({ ...makeAsk(1), ...patch });
    expect(result.success).toBe(false);
    expect(result.error).toBeInstanceOf(z.ZodError);
    expect(result.error?.issues.map((i) => i.path.join("."))).toContain(field);
  });

  it("carries argsSha256 when present (64 lowercase hex), and still parses an older ask without it", () => {
    const sha = "a".repeat(64);
    expect(PendingAskSchema.parse({ ...makeAsk(0), argsSha256: sha }).argsSha256).toBe(sha);
    const { argsSha256: _absent, ...older } = { ...makeAsk(0), argsSha256: sha };
    expect(PendingAskSchema.safeParse(older).success).toBe(true);
    expect(PendingAskSchema.safeParse({ ...makeAsk(0), argsSha256: "A".repeat(64) }).success).toBe(false);
    expect(PendingAskSchema.safeParse({ ...makeAsk(0), argsSha256: "a".repeat(63) }).success).toBe(false);
  });

  it("rejects non-objects", () => {
    expect(() => PendingAskSchema.parse(null)).toThrow(z.ZodError);
    expect(() => PendingAskSchema.parse("ask")).toThrow(z.ZodError);
  });

  it("drops unknown fields, and arguments never ride the parsed ask", () => {
    const parsed = PendingAskSchema.parse({
      ...makeAsk(2),
      args: { path: "/etc/passwd" },
      input: { secret: 1 },
      extra: true,
    });
    expect(Object.keys(parsed).sort()).toEqual([
      "argsDigest",
      "callId",
      "id",
      "prompt",
      "runId",
      "sessionId",
      "tool",
      "turn",
    ]);
    expect("args" in parsed).toBe(false);
    expect("input" in parsed).toBe(false);
  });
});

describe("AskResolutionSchema", () => {
  it("accepts approve and deny, with optional reason and remember", () => {
    expect(AskResolutionSchema.parse({ type: "approve" })).toEqual({ type: "approve" });
    expect(AskResolutionSchema.parse({ type: "deny", reason: "no", remember: "this_tool" })).toEqual({
      type: "deny",
      reason: "no",
      remember: "this_tool",
    });
  });

  it("rejects unknown types and bad remember scopes", () => {
    expect(AskResolutionSchema.safeParse({ type: "maybe" }).success).toBe(false);
    expect(AskResolutionSchema.safeParse({ type: "approve", remember: "forever" }).success).toBe(false);
  });
});
