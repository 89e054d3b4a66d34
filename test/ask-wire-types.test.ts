import { describe, expect, it } from "vitest";
import { AskResolutionSchema, PendingAskSchema } from "../src/ask/index.js";
import type { AskResolution, PendingAsk } from "../src/ask/index.js";
import { renderSchemas } from "../docs/schemas/render.js";

describe("wire parsing yields the public types", () => {
  it("AskResolutionSchema.parse gives an AskResolution without a cast (checked by tsc)", () => {
    const answer: AskResolution = AskResolutionSchema.parse({ type: "deny", reason: "no", remember: "this_tool" });
    expect(answer).toEqual({ type: "deny", reason: "no", remember: "this_tool" });
  });

  it("PendingAskSchema and its JSON Schema agree on upper-case UUIDs", () => {
    const upper = "9B2F6C1E-4A7D-4E2B-9C3A-1F2E3D4C5B6A";
    const ask: PendingAsk = PendingAskSchema.parse({
      id: upper,
      sessionId: upper,
      runId: upper,
      turn: 0,
      callId: "c1",
      tool: "read",
      argsDigest: "f1ed61cd8ca5e26b",
      prompt: "Read?",
    });
    expect(ask.id).toBe(upper);
    const [, text] = renderSchemas().find(([file]) => file === "PendingAsk.schema.json") ?? [];
    const pattern = (JSON.parse(text ?? "{}") as { properties: { id: { pattern: string } } }).properties.id.pattern;
    expect(new RegExp(pattern).test(upper)).toBe(true);
    expect(new RegExp(pattern).test("not-a-uuid")).toBe(false);
  });
});
