import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { FNV_WASM, fnv1a64, fnv1a64Js } from "../src/grant/fnv.js";
import { referenceDigest16 } from "./support/fnv-reference.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);
/** The WebAssembly form hashes its input in chunks of this many bytes (one page less the state). */
const CHUNK = 65536 - 8;

describe("FNV-1a 64: the WebAssembly and JavaScript forms", () => {
  it("runs on WebAssembly on this Node", () => {
    expect(FNV_WASM).toBe(true);
    expect(fnv1a64).not.toBe(fnv1a64Js);
  });

  it("give the published test vectors", () => {
    for (const hash of [fnv1a64, fnv1a64Js]) {
      expect(hash("")).toBe("cbf29ce484222325");
      expect(hash("a")).toBe("af63dc4c8601ec8c");
      expect(hash("foobar")).toBe("85944171f73967e8");
    }
  });

  it("agree with each other and with a BigInt reference on any UTF-16 text, lone surrogates included", () => {
    const anyUnit = fc.integer({ min: 0, max: 0xffff }).map((u) => String.fromCharCode(u));
    const text = fc.oneof(fc.string({ unit: "binary" }), fc.string({ unit: anyUnit }), fc.string({ unit: "grapheme" }));
    fc.assert(
      fc.property(text, (s) => {
        const expected = referenceDigest16(s);
        expect(fnv1a64(s)).toBe(expected);
        expect(fnv1a64Js(s)).toBe(expected);
      }),
      { numRuns: RUNS },
    );
  });

  it("carry the state across chunks, with every kind of character cut at a chunk's edge", () => {
    // Each filler length puts the character's first byte 0..3 bytes before the edge.
    for (const character of ["é", "€", "😀", "\ud800", "\udc00", "\ud83d"]) {
      for (let before = 0; before <= 4; before += 1) {
        const text = `${"a".repeat(CHUNK - before)}${character}${"b".repeat(3)}${character}`;
        expect(fnv1a64(text), `${JSON.stringify(character)} at ${before}`).toBe(fnv1a64Js(text));
      }
    }
    const several = "é€😀x\ud800".repeat(40_000);
    expect(Buffer.byteLength(several)).toBeGreaterThan(3 * CHUNK);
    expect(fnv1a64(several)).toBe(referenceDigest16(several));
  });

  it("hash 10 MB of text the same way", () => {
    const text = `${"{\"k\":\"é€😀\",\"n\":123}".repeat(500_000)}`;
    expect(text.length).toBeGreaterThanOrEqual(10_000_000);
    expect(fnv1a64(text)).toBe(fnv1a64Js(text));
  });
});

describe("without WebAssembly", () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    vi.resetModules();
  });

  it("falls back to the JavaScript form", async () => {
    vi.stubGlobal("WebAssembly", undefined);
    vi.resetModules();
    const fresh = await import("../src/grant/fnv.js");
    expect(fresh.FNV_WASM).toBe(false);
    expect(fresh.fnv1a64).toBe(fresh.fnv1a64Js);
    expect(fresh.fnv1a64("foobar")).toBe("85944171f73967e8");
  });

  it("falls back when compiling the module is refused", async () => {
    vi.stubGlobal("WebAssembly", {
      Module: class {
        constructor() {
          throw new Error("WebAssembly compilation is disallowed here");
        }
      },
      Instance: class {},
    });
    vi.resetModules();
    const fresh = await import("../src/grant/fnv.js");
    expect(fresh.FNV_WASM).toBe(false);
    expect(fresh.fnv1a64("a")).toBe("af63dc4c8601ec8c");
  });
});
