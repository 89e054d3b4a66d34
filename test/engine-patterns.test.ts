import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Gate, LoopManagers, ToolDefinitionError, defineTool } from "loopctl/engine";
import type { GateOutcome } from "loopctl/engine";
import { UnsupportedPatternError, re2Pattern } from "../src/engine/pattern.js";

const run = promisify(execFile);
const repo = fileURLToPath(new URL("..", import.meta.url));

/**
 * Validates every input against `pattern` at once: each input is a property
 * name, under `patternProperties` its value must be `true`, else `false`. The
 * expected object says what native `RegExp` (with `u`, as JSON Schema reads a
 * pattern) answers, so the call runs only when the gate agrees on every input.
 */
async function agrees(pattern: string, inputs: readonly string[]): Promise<GateOutcome> {
  const gate = new Gate(new LoopManagers());
  const native = new RegExp(pattern, "u");
  const input = Object.fromEntries(inputs.map((text) => [text, native.test(text)]));
  const inputSchema = {
    type: "object",
    patternProperties: { [pattern]: { const: true } },
    additionalProperties: { const: false },
  };
  return gate.call({ tool: { name: "match", description: "", inputSchema }, callId: "c1", input }, () => "ran");
}

const SAMPLES = [
  "",
  "a",
  "aa",
  "ab",
  "abc",
  "A",
  "Z9",
  "a\n",
  "\na",
  "a\r",
  "a\u2028b",
  "a b",
  "a\tb",
  "a\u00a0b",
  "a\u000bb",
  "a\ufeffb",
  "héllo",
  "ſ",
  "\u212a",
  "😀",
  "a😀b",
  "\ud83d",
  "x\ude00",
  "123",
  "12-34",
  "٣",
  "foo_bar",
  "foo-bar.baz",
  "user@example.com",
  "https://a.example/x?y=1",
  "[]",
  "a.b",
  "a/b",
  "a\\b",
  "{}",
  "Ωmega",
  "Привет",
  "\u0000",
  "\u0007",
  "\b",
];

/** Every BMP code point (lone surrogates included) and some astral ones, one to a string. */
const EVERY_CHARACTER = [
  ...Array.from({ length: 0x10000 }, (_, code) => String.fromCharCode(code)),
  ...[0x10000, 0x1f600, 0x1d400, 0x20000, 0xe0001, 0x10ffff].map((code) => String.fromCodePoint(code)),
];

/** A tool `lookup` whose one argument `q` must match `pattern`. */
function defineLookup(pattern: string): unknown {
  return defineTool({
    name: "lookup",
    description: "",
    input: { type: "object", properties: { q: { type: "string", pattern } } },
    execute: () => "ran",
  });
}

describe("schema patterns run in linear time", () => {
  it("a pattern that backtracks exponentially, in `pattern` or a `patternProperties` key, is checked at once (it hung the process before)", async () => {
    for (const keyword of ["pattern", "patternProperties"]) {
      const started = Date.now();
      const { stdout } = await run(process.execPath, ["--import", "tsx", "test/support/pattern-child.ts", keyword], {
        cwd: repo,
        timeout: 20_000,
        killSignal: "SIGKILL",
      });
      expect(Date.now() - started).toBeLessThan(20_000);
      const outcome = JSON.parse(stdout) as { type: string; reason: string };
      expect(outcome.type).toBe("refused");
      expect(outcome.reason).toMatch(
        keyword === "pattern" ? /must match pattern "\^\(a\+\)\+\$"/ : /must NOT have additional property/,
      );
    }
  }, 60_000);

  it.each([
    "^(a+)+$",
    "^[a-z]+$",
    "^[A-Za-z0-9_-]{1,8}$",
    "a|b|c",
    "^(?:ab|a)c?$",
    "b$",
    "^a",
    "^\\d+(-\\d+)?$",
    "\\w+@\\w+\\.com",
    "\\s",
    "^\\S+$",
    "^.$",
    "^..$",
    "a.b",
    "[^a]",
    "^[^]$",
    "[]",
    "[\\s\\S]",
    "[\\d.-]",
    "[\\]\\[\\\\/{}]",
    "^\\u00e9|\\u{1F600}",
    "\\uD83D\\uDE00",
    "\\x41",
    "\\cJ",
    "\\0",
    "[\\b]",
    "\\t|\\v|\\f",
    "^\\p{Lu}",
    "\\p{L}+",
    "^\\P{L}+$",
    "\\p{Script=Cyrillic}",
    "\\p{gc=Nd}",
    "[\\p{Ll}\\d]+",
    "(?<word>\\w+)-x",
    "a{2}",
    "^a{1,2}$",
    "^a{2,}?$",
    "^(a|aa)*?$",
    "\\/",
    "^https?://[^/]+/",
    "\\.",
    "😀",
    "^[😀-😂]$",
  ])("%j runs on RE2 and matches exactly what native RegExp with the u flag matches", async (pattern) => {
    expect(() => re2Pattern(pattern)).not.toThrow();
    const outcome = await agrees(pattern, SAMPLES);
    expect(outcome.record.reason).toBeNull();
    expect(outcome.type).toBe("ran");
  });

  it.each(["\\s", "\\S", "\\d", "\\D", "\\w", "\\W", ".", "[^\\s\\d]", "\\p{Nd}", "[\\0-\\x1f]"])(
    "%j runs on RE2 and agrees with native RegExp on every BMP code point and some astral ones",
    async (pattern) => {
      expect(() => re2Pattern(pattern)).not.toThrow();
      const outcome = await agrees(pattern, EVERY_CHARACTER);
      expect(outcome.record.reason).toBeNull();
      expect(outcome.type).toBe("ran");
    },
  );

  it.each([
    ["\\bfoo\\b", "a word boundary (\\b)"],
    ["\\Bar", "a word boundary (\\B)"],
    ["(?=a)b", "a lookahead"],
    ["a(?!b)", "a lookahead"],
    ["(?<=a)b", "a lookbehind"],
    ["(?<!a)b", "a lookbehind"],
    ["(a)\\1", "a backreference (\\1)"],
    ["(?<x>a)\\k<x>", "a backreference (\\k<…>)"],
    ["\\p{Letter}", "\\p{Letter}"],
    ["\\p{Emoji}", "\\p{Emoji}"],
    ["a{1001}", "invalid repeat count"],
  ])("%j, which RE2 cannot run (%s), runs on native RegExp and matches as before", async (pattern, reason) => {
    expect(() => re2Pattern(pattern)).toThrow(UnsupportedPatternError);
    expect(() => re2Pattern(pattern)).toThrow(reason);
    const outcome = await agrees(pattern, SAMPLES);
    expect(outcome.record.reason).toBeNull();
    expect(outcome.type).toBe("ran");
    expect(() => defineLookup(pattern)).not.toThrow();
  });

  it("zod's own patterns that RE2 cannot run (hostname, duration, emoji) still validate as before", async () => {
    const gate = new Gate(new LoopManagers());
    const inputSchema = {
      type: "object",
      properties: {
        host: { type: "string", pattern: z.toJSONSchema(z.hostname()).pattern },
        took: { type: "string", pattern: z.toJSONSchema(z.iso.duration()).pattern },
        mood: { type: "string", pattern: z.toJSONSchema(z.emoji()).pattern },
      },
    };
    const tool = { name: "zodded", description: "", inputSchema };
    const ran = await gate.call(
      { tool, callId: "c1", input: { host: "a.example", took: "P1D", mood: "😀" } },
      () => "ran",
    );
    expect([ran.type, ran.record.reason]).toEqual(["ran", null]);
    const refused = await gate.call(
      { tool, callId: "c2", input: { host: "-a", took: "P1D", mood: "😀" } },
      () => "ran",
    );
    expect(refused.record.reason).toContain("$.host: must match pattern");
  });

  it("any small pattern RE2 runs matches exactly what native RegExp with the u flag matches", () => {
    const literal = fc.constantFrom("a", "b", "A", "1", "_", " ", "\\.", "-", "é", "😀", "\\n", "\\u2028", "\\x41");
    const escape = fc.constantFrom("\\d", "\\D", "\\w", "\\W", "\\s", "\\S", ".");
    const classItem = fc.constantFrom(
      "a",
      "b",
      "z",
      "0",
      "9",
      " ",
      "\\d",
      "\\w",
      "\\s",
      "\\S",
      "\\-",
      "\\]",
      "é",
      "😀",
      "a-c",
      "0-5",
      "\\n",
      ".",
    );
    const klass = fc
      .tuple(fc.boolean(), fc.array(classItem, { minLength: 0, maxLength: 4 }))
      .map(([negated, items]) => `[${negated ? "^" : ""}${items.join("")}]`);
    const assertion = fc.constantFrom("^", "$");
    const quantifier = fc.constantFrom("", "", "", "*", "+", "?", "{0,2}", "{1}", "{2,}", "*?", "+?", "??");
    // A group repeated without bound nests repetition: native RegExp, the reference here, backtracks
    // on it for seconds; the translation of a group is the same whatever repeats it.
    const groupQuantifier = fc.constantFrom("", "", "?", "{1}", "{0,2}", "??");
    const { alternation } = fc.letrec<{ alternation: string; atom: string }>((tie) => ({
      atom: fc.oneof(
        // Two groups deep at most: a pattern stays small, and native RegExp quick on it.
        { depthSize: "small", maxDepth: 2, withCrossShrink: true },
        fc.tuple(fc.oneof(literal, escape, klass), quantifier).map(([atom, q]) => atom + q),
        fc.tuple(tie("alternation"), groupQuantifier).map(([inner, q]) => `(${inner})${q}`),
        fc.tuple(tie("alternation"), groupQuantifier).map(([inner, q]) => `(?:${inner})${q}`),
      ),
      alternation: fc
        .array(fc.array(fc.oneof(tie("atom"), assertion), { minLength: 0, maxLength: 3 }), {
          minLength: 1,
          maxLength: 2,
        })
        .map((branches) => branches.map((branch) => branch.join("")).join("|")),
    }));
    const text = fc
      .array(
        fc.constantFrom(
          "a",
          "b",
          "A",
          "1",
          "_",
          " ",
          ".",
          "-",
          "\n",
          "\r",
          "\u2028",
          "é",
          "😀",
          "\ud800",
          "\t",
          "\u00a0",
          "9",
          "z",
          "\v",
        ),
        {
          maxLength: 8,
        },
      )
      .map((chars) => chars.join(""));
    let compared = 0;
    fc.assert(
      fc.property(alternation, fc.array(text, { minLength: 1, maxLength: 12 }), (pattern, inputs) => {
        let native: RegExp;
        try {
          native = new RegExp(pattern, "u");
        } catch {
          return; // not ECMAScript: refused by the native compile before RE2 is asked
        }
        const re2 = re2Pattern(pattern);
        const answers = (test: (input: string) => boolean): string[] =>
          inputs.map((input) => `${JSON.stringify(input)}: ${test(input)}`);
        expect(
          answers((input) => re2.test(input)),
          pattern,
        ).toEqual(answers((input) => native.test(input)));
        compared++;
      }),
      { numRuns: 1_000 },
    );
    // Most generated patterns are ECMAScript: the comparison is not vacuous.
    expect(compared).toBeGreaterThan(500);
  });

  it("a draft-07 schema's patterns are matched the same way", () => {
    const define = (pattern: string): unknown =>
      defineTool({
        name: "lookup",
        description: "",
        input: {
          $schema: "http://json-schema.org/draft-07/schema#",
          type: "object",
          properties: { q: { type: "string", pattern } },
        },
        execute: () => "ran",
      });
    expect(() => define("^[a-z]+$")).not.toThrow();
    expect(() => define("(?<=a)b")).not.toThrow();
    expect(() => define("(")).toThrow(ToolDefinitionError);
  });

  it("a `patternProperties` key RE2 cannot run is matched by native RegExp, as before", async () => {
    let executed = 0;
    const gate = new Gate(new LoopManagers());
    const inputSchema = {
      type: "object",
      patternProperties: { "^(?!x)a/b$": { type: "string" } },
      additionalProperties: false,
    };
    const tool = { name: "lookup", description: "", inputSchema };
    const ran = await gate.call({ tool, callId: "c1", input: { "a/b": "ok" } }, () => (executed += 1));
    expect([ran.type, ran.record.reason]).toEqual(["ran", null]);
    const refused = await gate.call({ tool, callId: "c2", input: { "a/b": 1 } }, () => (executed += 1));
    expect(refused).toMatchObject({ type: "refused", record: { verdict: "deny", ruleId: "schema" } });
    expect(executed).toBe(1);
  });

  it("a pattern that is not ECMAScript (with the u flag) is refused as before", () => {
    for (const pattern of ["(", "a{", "\\p{NoSuch}", "\\q"]) {
      expect(() => defineLookup(pattern)).toThrow(ToolDefinitionError);
    }
  });

  it("a property name that `properties` and a `patternProperties` key both match is checked by both subschemas", async () => {
    const gate = new Gate(new LoopManagers());
    const inputSchema = {
      type: "object",
      properties: { aa: { type: "string" } },
      patternProperties: { "^a+$": { maxLength: 1 } },
    };
    const tool = { name: "lookup", description: "", inputSchema };
    expect((await gate.call({ tool, callId: "c1", input: { aa: "x" } }, () => "ran")).type).toBe("ran");
    const refused = await gate.call({ tool, callId: "c2", input: { aa: "xy" } }, () => "ran");
    expect(refused.record.reason).toContain("$.aa: must NOT have more than 1 characters");
  });
});
