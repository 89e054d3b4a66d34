import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { digest16 } from "../src/grant/index.js";
import { referenceDigest16 } from "./support/fnv-reference.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);

describe("FNV-1a 64 on two 32-bit halves", () => {
  it("gives the published test vectors", () => {
    expect(digest16("")).toBe("cbf29ce484222325");
    expect(digest16("a")).toBe("af63dc4c8601ec8c");
    expect(digest16("foobar")).toBe("85944171f73967e8");
  });

  it("agrees with a BigInt reference on any UTF-16 text, lone surrogates included", () => {
    const anyUnit = fc.integer({ min: 0, max: 0xffff }).map((u) => String.fromCharCode(u));
    const text = fc.oneof(fc.string({ unit: "binary" }), fc.string({ unit: anyUnit }), fc.string({ unit: "grapheme" }));
    fc.assert(
      fc.property(text, (s) => {
        expect(digest16(s)).toBe(referenceDigest16(s));
      }),
      { numRuns: RUNS },
    );
  });

  it("carries every bit of the state: high bytes, multi-byte characters, ASCII running into them, and long text", () => {
    for (const text of [
      "\u00ff",
      "é€😀x\ud800",
      "\udc00\ud83d",
      "é€😀x\ud800".repeat(40_000),
      "~".repeat(70_000),
      '{"path":"a/é"}',
      "abc\ud800def",
      `${"~".repeat(300)}😀${"~".repeat(300)}`,
    ]) {
      expect(digest16(text)).toBe(referenceDigest16(text));
    }
  });

  it("hashes 10 MB of text", () => {
    const unit = '{"k":"é€😀","n":123}';
    const text = unit.repeat(500_000);
    expect(text.length).toBeGreaterThanOrEqual(10_000_000);
    expect(digest16(text)).toMatch(/^[0-9a-f]{16}$/);
    expect(digest16(text)).not.toBe(digest16(unit.repeat(499_999)));
  });
});
