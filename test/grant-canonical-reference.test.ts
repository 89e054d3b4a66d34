import stableStringify from "fast-json-stable-stringify";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { argsDigest, canonicalJson, compareCodePoints, digest16 } from "../src/grant/index.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);

type StableStringify = (value: unknown, options: { cmp: (a: { key: string }, b: { key: string }) => number }) => string;
const stringifyStable = stableStringify as unknown as StableStringify;

/** The reference: fast-json-stable-stringify with keys compared by code point. */
function reference(value: unknown): string {
  return stringifyStable(value, { cmp: (a, b) => compareCodePoints(a.key, b.key) });
}

// JSON values as JSON.parse gives them, with keys and strings over every code
// unit (lone surrogates, quotes, controls, astral pairs) and keys in any order.
const jsonValue = fc
  .jsonValue({ stringUnit: "binary", maxDepth: 5 })
  .map((v) => JSON.parse(JSON.stringify(v)) as unknown);
const anyUnitString = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((u) => String.fromCharCode(u)) });
const keyedByAnyUnits = fc.dictionary(
  anyUnitString,
  fc.oneof(anyUnitString, fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean()),
  {
    maxKeys: 12,
  },
);

describe("canonicalJson against fast-json-stable-stringify with code-point order", () => {
  it("writes the same text for every JSON value", () => {
    fc.assert(
      fc.property(jsonValue, (value) => {
        expect(canonicalJson(value)).toBe(reference(value));
      }),
      { numRuns: RUNS * 2 },
    );
  });

  it("writes the same text for objects keyed by any UTF-16 units, including lone surrogates", () => {
    fc.assert(
      fc.property(keyedByAnyUnits, (value) => {
        expect(canonicalJson(value)).toBe(reference(value));
        expect(argsDigest(value)).toBe(digest16(reference(value)));
      }),
      { numRuns: RUNS * 2 },
    );
  });

  it("sorts objects with many keys like the reference", () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string({ unit: "binary" }), fc.integer(), { minKeys: 17, maxKeys: 60 }), (value) => {
        expect(canonicalJson(value)).toBe(reference(value));
      }),
      { numRuns: RUNS },
    );
  });
});
