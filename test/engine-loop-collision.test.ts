import { describe, expect, it, vi } from "vitest";

// argsDigest is FNV-1a 64, which can be made to collide on purpose. Forcing
// every FNV digest to one value stands in for a crafted pair of arguments.
vi.mock("../src/grant/digest.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../src/grant/digest.js")>();
  return { ...original, digest16: (): string => "00000000deadbeef" };
});

const { Gate, LoopManagers } = await import("../src/engine/index.js");

describe("the loop detector compares argsSha256, not the FNV argsDigest", () => {
  it("two different argument sets whose FNV digests collide are two calls, not a loop", async () => {
    const gate = new Gate(new LoopManagers().withLoopDetection({ maxRepeats: 1 }));
    const tool = { name: "read", description: "", inputSchema: { type: "object" } };
    const a = await gate.call({ tool, callId: "c1", input: { path: "a" } }, () => "ok");
    const b = await gate.call({ tool, callId: "c2", input: { path: "b" } }, () => "ok");
    expect([a.record.argsDigest, b.record.argsDigest]).toEqual(["00000000deadbeef", "00000000deadbeef"]);
    expect(a.record.argsSha256).not.toBe(b.record.argsSha256);
    expect([a.type, b.type]).toEqual(["ran", "ran"]);
    const again = await gate.call({ tool, callId: "c3", input: { path: "b" } }, () => "ok");
    expect(again).toMatchObject({ type: "refused", record: { ruleId: "loop_detector" } });
  });
});
