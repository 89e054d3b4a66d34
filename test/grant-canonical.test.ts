import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  CANONICAL_JSON_MAX_BYTES,
  CANONICAL_JSON_MAX_DEPTH,
  CANONICAL_JSON_MAX_NODES,
  CanonicalJsonError,
  CanonicalJsonLimitError,
  canonicalJson,
  compareCodePoints,
  Grant,
  GrantScope,
} from "../src/grant/index.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);

/** The CanonicalJsonError canonicalJson throws for `value`, with its path checked. */
function expectCanonicalError(value: unknown, jsonPath: string | RegExp): CanonicalJsonError {
  let caught: unknown;
  try {
    canonicalJson(value);
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(CanonicalJsonError);
  const error = caught as CanonicalJsonError;
  expect(error.code).toBe("CANONICAL_JSON");
  if (typeof jsonPath === "string") expect(error.jsonPath).toBe(jsonPath);
  else expect(error.jsonPath).toMatch(jsonPath);
  expect(error.message).toContain(error.jsonPath);
  return error;
}

function expectLimit(value: unknown, limit: "depth" | "nodes" | "bytes", jsonPath: string | RegExp): void {
  const error = expectCanonicalError(value, jsonPath);
  expect(error).toBeInstanceOf(CanonicalJsonLimitError);
  expect((error as CanonicalJsonLimitError).limit).toBe(limit);
  expect((error as CanonicalJsonLimitError).max).toBe(
    { depth: CANONICAL_JSON_MAX_DEPTH, nodes: CANONICAL_JSON_MAX_NODES, bytes: CANONICAL_JSON_MAX_BYTES }[limit],
  );
}

/**
 * Runs `task` with the stack used up but for about `margin` frames of a small
 * function: what a caller deep in its own recursion leaves to canonicalJson.
 */
function nearStackLimit<T>(margin: number, task: () => T): { value: T } | { error: unknown } {
  let outcome: { value: T } | { error: unknown } | undefined;
  const dive = (): number => {
    let height: number;
    try {
      height = dive() + 1;
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      height = 0;
    }
    if (height === margin && outcome === undefined) {
      try {
        outcome = { value: task() };
      } catch (error) {
        outcome = { error };
      }
    }
    return height;
  };
  dive();
  if (outcome === undefined) throw new Error("the stack never ran out");
  return outcome;
}

/**
 * `levels` arrays and objects nested alternately around `leaf` (an array
 * innermost), and the path of the container at each depth: `paths[0]` is `$`.
 */
function nested(levels: number, leaf: unknown): { value: unknown; paths: string[] } {
  let value = leaf;
  const segments: string[] = [];
  for (let i = 0; i < levels; i++) {
    value = i % 2 === 0 ? [value] : { k: value };
    segments.push(i % 2 === 0 ? "[0]" : ".k");
  }
  segments.reverse();
  const paths = ["$"];
  for (const segment of segments) paths.push(`${paths[paths.length - 1] as string}${segment}`);
  return { value, paths };
}

/** Rebuilds every object with its keys in a shuffled order. */
function shuffleKeys(value: unknown, rand: () => number): unknown {
  if (Array.isArray(value)) return value.map((v) => shuffleKeys(v, rand));
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    for (let i = keys.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [keys[i], keys[j]] = [keys[j] as string, keys[i] as string];
    }
    const out: Record<string, unknown> = {};
    for (const key of keys) {
      Object.defineProperty(out, key, {
        value: shuffleKeys((value as Record<string, unknown>)[key], rand),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  return value;
}

// A JSON value as JSON.parse would give it (no -0), strings over all code points.
const jsonValue = fc
  .jsonValue({ stringUnit: "binary", maxDepth: 4 })
  .map((v) => JSON.parse(JSON.stringify(v)) as unknown);

describe("canonicalJson", () => {
  it("writes compact JSON with keys sorted recursively and array order kept", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, 1, 2], c: null } })).toBe('{"a":{"c":null,"d":[3,1,2]},"b":1}');
    expect(canonicalJson("x")).toBe('"x"');
    expect(canonicalJson(null)).toBe("null");
    expect(canonicalJson([])).toBe("[]");
    expect(canonicalJson({})).toBe("{}");
  });

  it("sorts by code point, not by UTF-16 code unit", () => {
    const astral = "\u{1F600}";
    const privateUse = "\uE000";
    // UTF-16 order puts the surrogate pair (0xD83D...) first; code-point order does not.
    expect([astral, privateUse].sort()).toEqual([astral, privateUse]);
    expect(canonicalJson({ [astral]: 1, [privateUse]: 2 })).toBe(`{"${privateUse}":2,"${astral}":1}`);
    expect(compareCodePoints(astral, "\uFFFF")).toBeGreaterThan(0);
    expect(compareCodePoints("a", "ab")).toBeLessThan(0);
    expect(compareCodePoints("ab", "ab")).toBe(0);
    // A paired low surrogate against a BMP unit above the surrogates: the pair is larger.
    expect(compareCodePoints("\uD800\uDC00", "\uD800\uE000")).toBeGreaterThan(0);
  });

  it("puts integer-like keys in code-point order, not JavaScript's numeric order", () => {
    expect(canonicalJson({ 9: "a", 10: "b", a: "c" })).toBe('{"10":"b","9":"a","a":"c"}');
  });

  it("orders keys as UTF-8 bytes do, for any keys", () => {
    fc.assert(
      fc.property(fc.array(fc.string({ unit: "binary" }), { maxLength: 8 }), (keys) => {
        const sorted = [...new Set(keys)].sort(compareCodePoints);
        const bytes = sorted.map((k) => Buffer.from(k, "utf8"));
        for (let i = 1; i < bytes.length; i++) {
          expect(Buffer.compare(bytes[i - 1] as Buffer, bytes[i] as Buffer)).toBeLessThan(0);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it("matches RFC 8785's sorting example where it agrees with code-point order", () => {
    const input = {
      "\u20ac": "Euro Sign",
      "\r": "Carriage Return",
      "\ufb33": "Hebrew Letter Dalet With Dagesh",
      "1": "One",
      "\ud83d\ude00": "Emoji: Grinning Face",
      "\u0080": "Control",
      "\u00f6": "Latin Small Letter O With Diaeresis",
    };
    // RFC 8785 sorts by UTF-16 units and puts the emoji before U+FB33; code-point order puts it
    // last. Every other key keeps the RFC's order: \r, 1, U+0080, U+00F6, U+20AC.
    expect(canonicalJson(input)).toBe(
      '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",' +
        '"\u20ac":"Euro Sign","\ufb33":"Hebrew Letter Dalet With Dagesh","\ud83d\ude00":"Emoji: Grinning Face"}',
    );
  });

  it("escapes strings and writes numbers as RFC 8785 and JSON.stringify do", () => {
    expect(canonicalJson({ string: "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"/" })).toBe(
      '{"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    );
    expect(canonicalJson({ literals: [null, true, false] })).toBe('{"literals":[null,true,false]}');
    expect(canonicalJson([333333333.3333333, 1e30, 4.5, 0.002, 1e-27, -0])).toBe(
      "[333333333.3333333,1e+30,4.5,0.002,1e-27,0]",
    );
  });

  it("escapes lone surrogates, so the text is well-formed and ASCII there", () => {
    const text = canonicalJson({ k: "a\uD800b", ["\uDC00"]: 1 });
    expect(text).toBe('{"k":"a\\ud800b","\\udc00":1}');
    expect(/[\uD800-\uDFFF]/.test(text)).toBe(false);
    expect(JSON.parse(text)).toEqual({ k: "a\uD800b", "\uDC00": 1 });
  });

  it("honours toJSON like JSON.stringify, and unboxes boxed primitives", () => {
    const date = new Date(Date.UTC(2024, 0, 2, 3, 4, 5));
    expect(canonicalJson({ at: date })).toBe('{"at":"2024-01-02T03:04:05.000Z"}');
    expect(canonicalJson({ x: { toJSON: (key: string) => `key:${key}` } })).toBe('{"x":"key:x"}');
    expect(canonicalJson([new Number(1), new String("s"), new Boolean(false)])).toBe('[1,"s",false]');
  });

  it("refuses an invalid Date, which JSON.stringify writes as a silent null", () => {
    expectCanonicalError(new Date(Number.NaN), "$");
    expectCanonicalError({ at: new Date("not a date") }, "$.at");
    expect(() => canonicalJson([new Date(Number.NaN)])).toThrow(/invalid Date/);
    expect(canonicalJson({ at: null })).toBe('{"at":null}');
  });

  it("omits undefined object properties like JSON.stringify", () => {
    expect(canonicalJson({ a: undefined, b: 1 })).toBe('{"b":1}');
  });

  it("keeps a __proto__ key as an ordinary property", () => {
    const value = JSON.parse('{"__proto__":{"x":1},"a":2}') as unknown;
    expect(canonicalJson(value)).toBe('{"__proto__":{"x":1},"a":2}');
  });

  it("refuses values JSON cannot carry, naming their path", () => {
    expectCanonicalError(Number.NaN, "$");
    expectCanonicalError({ a: [0, 1, { b: Number.POSITIVE_INFINITY }] }, "$.a[2].b");
    expectCanonicalError({ a: Number.NEGATIVE_INFINITY }, "$.a");
    expectCanonicalError({ n: 1n }, "$.n");
    expectCanonicalError({ n: Object(1n) }, "$.n");
    expectCanonicalError([Object(Symbol("s"))], "$[0]");
    expectCanonicalError({ f: () => 1 }, "$.f");
    expectCanonicalError({ s: Symbol("s") }, "$.s");
    expectCanonicalError([1, undefined], "$[1]");
    expectCanonicalError(undefined, "$");
    // eslint-disable-next-line no-sparse-arrays
    expectCanonicalError([1, , 3], "$[1]");
    expectCanonicalError({ "a b": new Map() }, '$["a b"]');
    expectCanonicalError({ s: new Set([1]) }, "$.s");
    expectCanonicalError({ u: new Uint8Array(2) }, "$.u");
    expectCanonicalError({ t: { toJSON: () => Number.NaN } }, "$.t");
    expectCanonicalError(
      {
        t: {
          toJSON: () => {
            throw new Error("no");
          },
        },
      },
      "$.t",
    );
    expectCanonicalError(
      {
        g: {
          get x(): number {
            throw new Error("no");
          },
        },
      },
      "$.g.x",
    );
  });

  it("refuses objects that are not plain data, naming their path, instead of writing them as {}", () => {
    class Request {
      readonly #path: string;
      constructor(path: string) {
        this.#path = path;
      }
      get path(): string {
        return this.#path;
      }
    }
    class Point {
      x = 1;
    }
    for (const [value, name] of [
      [new URLSearchParams("path=/etc/shadow"), "an object of class URLSearchParams"],
      [new Headers({ path: "/etc/shadow" }), "an object of class Headers"],
      [new WeakRef({}), "an object of class WeakRef"],
      [new Request("/etc/shadow"), "an object of class Request"],
      [new Point(), "an object of class Point"],
      [new Error("no"), "an object of class Error"],
      [Object.create({ path: "/etc/shadow" }), "an object with a custom prototype"],
      [Object.create(Object.create(null)), "an object with a custom prototype"],
    ] as const) {
      expect(expectCanonicalError({ args: [value] }, "$.args[0]").problem).toContain(name);
      expect(() => new Grant("read", "allow", GrantScope.thisCall(value))).toThrow(CanonicalJsonError);
      expect(new Grant("read", "allow", GrantScope.thisCall({})).covers("read", value)).toBe(false);
    }
  });

  it("writes what plain data can be: null-prototype and frozen objects, parsed and zod-parsed values, toJSON results", () => {
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { b: 1, a: [true] });
    expect(canonicalJson(bare)).toBe('{"a":[true],"b":1}');
    expect(canonicalJson(Object.freeze({ path: Object.freeze(["a.rs"]) }))).toBe('{"path":["a.rs"]}');
    expect(canonicalJson(JSON.parse('{"b":{"__proto__":null},"a":[{}]}'))).toBe('{"a":[{}],"b":{"__proto__":null}}');
    const parsed = z.object({ path: z.string(), opts: z.record(z.string(), z.number()) }).parse({
      path: "a.rs",
      opts: { n: 1 },
    });
    expect(canonicalJson(parsed)).toBe('{"opts":{"n":1},"path":"a.rs"}');
    expect(canonicalJson(structuredClone({ at: [1, { x: null }] }))).toBe('{"at":[1,{"x":null}]}');
    class Money {
      readonly cents: number;
      constructor(cents: number) {
        this.cents = cents;
      }
      toJSON(): unknown {
        return { cents: this.cents };
      }
    }
    expect(canonicalJson({ price: new Money(5), at: new Date(0), url: new URL("https://a.example/x") })).toBe(
      '{"at":"1970-01-01T00:00:00.000Z","price":{"cents":5},"url":"https://a.example/x"}',
    );
    expect(canonicalJson(new Proxy({ a: 1 }, {}))).toBe('{"a":1}');
  });

  it("refuses cycles but accepts shared (acyclic) references", () => {
    const cyclic: Record<string, unknown> = { a: {} };
    (cyclic["a"] as Record<string, unknown>)["back"] = cyclic;
    expectCanonicalError(cyclic, "$.a.back");
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: [shared] })).toBe('{"a":{"x":1},"b":[{"x":1}]}');
  });

  it("ends hostile nesting in a typed error, not a RangeError", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = i % 2 === 0 ? [deep] : { k: deep };
    expect(() => canonicalJson(deep)).toThrow(CanonicalJsonError);
    let ok: unknown = 1;
    for (let i = 0; i < CANONICAL_JSON_MAX_DEPTH; i++) ok = [ok];
    expect(canonicalJson(ok)).toBe(`${"[".repeat(CANONICAL_JSON_MAX_DEPTH)}1${"]".repeat(CANONICAL_JSON_MAX_DEPTH)}`);
    expect(() => canonicalJson([ok])).toThrow(CanonicalJsonError);
  });

  it("parse∘canonicalJson is the identity on JSON values", () => {
    fc.assert(
      fc.property(jsonValue, (value) => {
        expect(JSON.parse(canonicalJson(value))).toEqual(value);
      }),
      { numRuns: RUNS },
    );
  });

  it("key order never changes the canonical text", () => {
    fc.assert(
      fc.property(jsonValue, fc.integer(), (value, seed) => {
        let state = seed >>> 0;
        const rand = (): number => {
          state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
          return state / 0x1_0000_0000;
        };
        expect(canonicalJson(shuffleKeys(value, rand))).toBe(canonicalJson(value));
      }),
      { numRuns: RUNS },
    );
  });
});

describe("canonicalJson's limits", () => {
  // One flat string of the whole limit; the tests slice what they need from it.
  const PAD = "p".repeat(CANONICAL_JSON_MAX_BYTES);

  it("are documented constants generous enough for real arguments and descriptors", () => {
    expect(CANONICAL_JSON_MAX_DEPTH).toBe(1000);
    expect(CANONICAL_JSON_MAX_NODES).toBe(1_000_000);
    expect(CANONICAL_JSON_MAX_BYTES).toBe(32 * 1024 * 1024);
  });

  it("hold the depth limit exactly, naming the path of the first container too deep", () => {
    const ok = nested(CANONICAL_JSON_MAX_DEPTH, 1);
    expect(JSON.parse(canonicalJson(ok.value))).toEqual(ok.value);
    // paths[d] is the container d levels in: the 1001st is paths[1000].
    for (const levels of [CANONICAL_JSON_MAX_DEPTH + 1, CANONICAL_JSON_MAX_DEPTH + 2, 100_000]) {
      const over = nested(levels, 1);
      expectLimit(over.value, "depth", over.paths[CANONICAL_JSON_MAX_DEPTH] as string);
    }
  });

  it("hold the depth limit however little stack the caller left", () => {
    const ok = nested(CANONICAL_JSON_MAX_DEPTH, "leaf");
    const expected = canonicalJson(ok.value);
    expect(nearStackLimit(500, () => canonicalJson(ok.value))).toEqual({ value: expected });
    const over = nested(CANONICAL_JSON_MAX_DEPTH + 1, "leaf");
    // Its error path runs once with room first: compiling code near the limit needs stack of its own.
    expect(() => canonicalJson(over.value)).toThrow(CanonicalJsonLimitError);
    const outcome = nearStackLimit(500, () => canonicalJson(over.value));
    expect("error" in outcome && outcome.error).toBeInstanceOf(CanonicalJsonLimitError);
    expect((outcome as { error: CanonicalJsonLimitError }).error.limit).toBe("depth");
  });

  it("count every value reached, shared references each time: 2^26 leaves fail at the node limit", () => {
    let array: unknown = 0;
    let object: unknown = "leaf";
    for (let i = 0; i < 26; i++) {
      array = [array, array];
      object = { a: object, b: object };
    }
    expectLimit(array, "nodes", /^\$(\[[01]\]){1,26}$/);
    expectLimit(object, "nodes", /^\$(\.[ab]){1,26}$/);
  });

  it("stop a 2^26-leaf value of shared references after at most a million reads, not 2^27", () => {
    // Every property is a getter that counts its reads: the work done is the
    // number of reads, whatever the machine's speed. Walking the whole value
    // would read 2^27 - 2 properties (minutes and gigabytes of text).
    let reads = 0;
    let value: unknown = "leaf";
    for (let i = 0; i < 26; i++) {
      const inner = value;
      value = {
        get a(): unknown {
          reads++;
          return inner;
        },
        get b(): unknown {
          reads++;
          return inner;
        },
      };
    }
    expectLimit(value, "nodes", /^\$(\.[ab]){1,26}$/);
    expect(reads).toBeGreaterThan(0);
    expect(reads).toBeLessThanOrEqual(CANONICAL_JSON_MAX_NODES);
  });

  it("hold the node limit exactly: the array and its elements are nodes", () => {
    expect(canonicalJson(new Array(CANONICAL_JSON_MAX_NODES - 1).fill(0))).toHaveLength(
      2 * (CANONICAL_JSON_MAX_NODES - 1) + 1,
    );
    expectLimit(new Array(CANONICAL_JSON_MAX_NODES).fill(0), "nodes", `$[${CANONICAL_JSON_MAX_NODES - 1}]`);
    // Omitted properties are reached too, so they count: 1000 references to one object of 999
    // undefined properties are 1 + 1000 × 1000 values, one too many, though they write "[{},…]".
    const sparse: Record<string, unknown> = {};
    for (let i = 0; i < 999; i++) sparse[`k${i}`] = undefined;
    expectLimit(new Array(1000).fill(sparse), "nodes", "$[999].k998");
    expect(canonicalJson(new Array(999).fill(sparse))).toBe(`[${new Array(999).fill("{}").join(",")}]`);
  });

  it("hold the size limit exactly, in UTF-8 bytes of the canonical text", () => {
    const max = CANONICAL_JSON_MAX_BYTES;
    expect(canonicalJson(PAD.slice(0, max - 2))).toHaveLength(max);
    expectLimit(PAD.slice(0, max - 1), "bytes", "$");
    // é is two bytes, € three, an astral pair four, an escaped control six (\u0001), a lone
    // surrogate six (\ud800), a newline two (\n); the rest of the limit is ASCII padding.
    for (const unit of ["\u00e9", "\u20ac", "\u{1F600}", "\u0001", "\ud800", "\n"]) {
      const text = unit.repeat(1000);
      const quoted = JSON.stringify(text);
      // {"a":…,"b":…}: eleven bytes besides the two quoted texts.
      const pad = PAD.slice(0, max - 13 - Buffer.byteLength(quoted));
      expect(canonicalJson({ a: text, b: pad }), JSON.stringify(unit)).toHaveLength(
        max - Buffer.byteLength(quoted) + quoted.length,
      );
      expectLimit({ a: text, b: PAD.slice(0, pad.length + 1) }, "bytes", "$.b");
      expectLimit({ a: `${text}${unit}`, b: pad }, "bytes", /^\$\.[ab]$/);
    }
  });

  it("stop shared references to one large string at the size limit, at the element that crosses it", () => {
    const mib = "m".repeat(1024 * 1024);
    const many = new Array(64).fill(mib);
    // "[" and "]" are counted when the array opens; each element adds its quoted text and a comma.
    let bytes = 2;
    let crossing = -1;
    for (let i = 0; i < many.length && crossing < 0; i++) {
      bytes += mib.length + 2 + (i === 0 ? 0 : 1);
      if (bytes > CANONICAL_JSON_MAX_BYTES) crossing = i;
    }
    expectLimit(many, "bytes", `$[${crossing}]`);
  });

  it("count bytes exactly for any JSON value: padded to the limit it fits, one byte more it does not", () => {
    fc.assert(
      fc.property(jsonValue, (value) => {
        // [value,"pad"]: two brackets, a comma, two quotes.
        const room = CANONICAL_JSON_MAX_BYTES - Buffer.byteLength(canonicalJson(value)) - 5;
        expect(() => canonicalJson([value, PAD.slice(0, room)])).not.toThrow();
        expectLimit([value, PAD.slice(0, room + 1)], "bytes", "$[1]");
      }),
      { numRuns: 5 },
    );
  });
});
