import { describe, expect, it } from "vitest";
import { Gate, LoopManagers } from "../src/engine/index.js";
import { argsDigest, argsSha256, canonicalJson } from "../src/grant/index.js";
import { referenceDigest16 } from "./support/fnv-reference.js";

// argsDigest is FNV-1a 64, which can be made to collide on purpose. These two
// argument sets are a real collision (found by a distinguished-point birthday
// search over 11-character strings after the prefix `{"p":"`, about 2^33
// digests): different canonical JSON, one argsDigest.
const A = { p: "4-Mvvy8k2mF" };
const B = { p: "K2v3YbWi8QA" };

describe("the loop detector compares argsSha256, not the FNV argsDigest", () => {
  it("the pair collides: the same argsDigest (checked against the BigInt reference too), different sha256", () => {
    expect(canonicalJson(A)).not.toBe(canonicalJson(B));
    expect(argsDigest(A)).toBe("8e8f50504e6c54aa");
    expect(argsDigest(B)).toBe("8e8f50504e6c54aa");
    expect(referenceDigest16(canonicalJson(A))).toBe("8e8f50504e6c54aa");
    expect(referenceDigest16(canonicalJson(B))).toBe("8e8f50504e6c54aa");
    expect(argsSha256(A)).not.toBe(argsSha256(B));
  });

  it("two argument sets whose FNV digests collide are two calls, not a loop", async () => {
    const gate = new Gate(new LoopManagers().withLoopDetection({ maxRepeats: 1 }));
    const tool = { name: "read", description: "", inputSchema: { type: "object" } };
    const a = await gate.call({ tool, callId: "c1", input: A }, () => "ok");
    const b = await gate.call({ tool, callId: "c2", input: B }, () => "ok");
    expect(a.record.argsDigest).toBe(b.record.argsDigest);
    expect(a.record.argsSha256).not.toBe(b.record.argsSha256);
    expect([a.type, b.type]).toEqual(["ran", "ran"]);
    // The detector still counts: the same arguments again are past the limit.
    const again = await gate.call({ tool, callId: "c3", input: B }, () => "ok");
    expect(again).toMatchObject({ type: "refused", record: { ruleId: "loop_detector" } });
  });
});
