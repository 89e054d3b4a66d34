import { describe, expect, it } from "vitest";
import { z } from "zod";
import { descriptorDigest, descriptorFingerprint } from "../src/grant/index.js";
import { z as zod3 } from "zod3";
import {
  Agent,
  EngineConfigError,
  LoopDetectedError,
  LoopManagers,
  ToolDefinitionError,
  defineTool,
} from "../src/engine/index.js";
import { ScriptedModel } from "../src/testing/index.js";
import { build, call, script } from "./support/engine-fixtures.js";
import { thrownBy } from "./support/thrown.js";

const noop = () => "ok";

describe("defineTool", () => {
  it("derives the descriptor from a zod schema and pins digests to it", () => {
    const tool = defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }),
      execute: noop,
    });
    expect(tool.descriptor).toEqual({
      name: "read",
      description: "Read a file",
      inputSchema: z.toJSONSchema(z.object({ path: z.string() }), { io: "input" }),
    });
    expect(tool.descriptorDigest).toBe(descriptorDigest(tool.descriptor));
    expect(tool.descriptorFingerprint).toBe(descriptorFingerprint(tool.descriptor));
    expect(tool.descriptorFingerprint).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it("keeps a JSON Schema as given (a copy) and the descriptor changes with the description", () => {
    const schema = { type: "object", properties: { path: { type: "string" } }, required: ["path"] };
    const a = defineTool({ name: "read", description: "v1", input: schema, execute: noop });
    const b = defineTool({ name: "read", description: "v2", input: schema, execute: noop });
    schema.required.push("mutated");
    expect(a.descriptor.inputSchema).toEqual({
      type: "object",
      properties: { path: { type: "string" } },
      required: ["path"],
    });
    expect(a.descriptorFingerprint).not.toBe(b.descriptorFingerprint);
  });

  it.each([
    ["", /the name must be/],
    ["has space", /the name must be/],
    ["x".repeat(129), /the name must be/],
  ])("rejects the name %j with ToolDefinitionError", (name, message) => {
    expect(() => defineTool({ name, description: "", input: z.object({}), execute: noop })).toThrow(
      ToolDefinitionError,
    );
    expect(() => defineTool({ name, description: "", input: z.object({}), execute: noop })).toThrow(message);
  });

  it.each([
    [{ type: "object", oneOf: 3 }, /does not compile: schema is invalid: data\/oneOf must be array/],
    [
      { type: "object", properties: { a: { type: "string", format: "emial" } } },
      /does not compile: unknown format "emial"/,
    ],
    [
      { type: "object", properties: { a: { $ref: "#/$defs/x" } } },
      /does not compile: can't resolve reference #\/\$defs\/x/,
    ],
    [{ type: "object", requried: ["a"] }, /does not compile: strict mode: unknown keyword: "requried"/],
    [{ type: "object", required: "a" }, /data\/required must be array/],
    [{ type: "thing" }, /data\/type must be equal to one of the allowed values/],
    [{ type: "object", properties: { a: { pattern: "(" } } }, /Invalid regular expression/],
    [
      { $schema: "http://json-schema.org/draft-04/schema#", type: "object" },
      /\$schema "http:\/\/json-schema.org\/draft-04\/schema#" is not supported/,
    ],
    [{ type: "array" }, /must describe an object/],
    [{ properties: {} }, /must describe an object/],
    [{ $async: true, type: "object", required: ["a"] }, /does not compile: \$async schemas are not supported/],
  ])("refuses a JSON Schema Ajv cannot compile, naming the tool (%#)", (input, message) => {
    expect(() => defineTool({ name: "t", description: "", input, execute: noop })).toThrow(ToolDefinitionError);
    expect(() => defineTool({ name: "t", description: "", input, execute: noop })).toThrow(message);
  });

  it("takes OpenAPI's example and x- extensions as annotations: they constrain nothing, every other keyword still counts", () => {
    const annotated = defineTool({
      name: "search",
      description: "",
      input: {
        type: "object",
        "x-order": ["q"],
        properties: {
          q: { type: "string", maxLength: 5, example: "release", "x-ui-widget": "text" },
          n: { type: "integer", "x-stainless-const": true, $comment: "a page" },
        },
        required: ["q"],
        additionalProperties: false,
      },
      execute: noop,
    });
    expect(annotated.check({ q: "abc", n: 2 })).toEqual({ type: "valid", value: { q: "abc", n: 2 } });
    expect(annotated.check({ q: "too long" })).toMatchObject({ type: "invalid" });
    expect(annotated.check({ q: "a", n: 1.5 })).toMatchObject({ type: "invalid" });
    expect(annotated.check({ q: "a", "x-order": 1 })).toMatchObject({ type: "invalid" });
    // Near misses are no extensions: still unknown keywords, still refused.
    for (const keyword of ["x", "x_order", "X-order", "examples-x", "xorder"])
      expect(() =>
        defineTool({ name: "t", description: "", input: { type: "object", [keyword]: 1 }, execute: noop }),
      ).toThrow(`strict mode: unknown keyword: "${keyword}"`);
  });

  it("rejects a zod schema that is not an object, or has no JSON Schema form", () => {
    expect(() => defineTool({ name: "t", description: "", input: z.string(), execute: noop })).toThrow(
      /must describe an object/,
    );
    expect(() =>
      defineTool({ name: "t", description: "", input: z.object({ when: z.date() }), execute: noop }),
    ).toThrow(ToolDefinitionError);
  });

  it("rejects a missing execute or description", () => {
    expect(() => defineTool({ name: "t", description: "", input: z.object({}), execute: undefined as never })).toThrow(
      /execute must be a function/,
    );
    expect(() => defineTool({ name: "t", description: 3 as never, input: z.object({}), execute: noop })).toThrow(
      /description must be a string/,
    );
    expect(() => defineTool({ name: "t", description: "", input: [] as never, execute: noop })).toThrow(
      /zod 4 schema or a JSON Schema object/,
    );
  });

  it("refuses a field the definition does not have, naming it and the tool, instead of ignoring it", () => {
    const refused = (definition: unknown, tool: string, message: string): void => {
      const thrown = thrownBy(() => defineTool(definition as never));
      expect(thrown).toBeInstanceOf(ToolDefinitionError);
      expect(thrown).toMatchObject({ code: "TOOL_DEFINITION", tool, message: `tool '${tool}': ${message}` });
    };
    const input = z.object({ path: z.string() });
    // Ignored, a misspelt title or annotations would leave them out of what a person is shown and a grant is pinned to.
    refused(
      { name: "rm", description: "", input, execute: noop, titel: "Delete a file" },
      "rm",
      "the definition has no field 'titel' (did you mean title?)",
    );
    refused(
      { name: "rm", description: "", input, execute: noop, annotation: { destructiveHint: true } },
      "rm",
      "the definition has no field 'annotation' (did you mean annotations?)",
    );
    // The descriptor's name for the input schema is not the definition's: never read as outputSchema.
    refused(
      { name: "rm", description: "", inputSchema: { type: "object" }, execute: noop },
      "rm",
      "the definition has no field 'inputSchema' (the input schema is given as input: a zod 4 schema or a JSON Schema object)",
    );
    refused(
      { name: "rm", description: "", input, execute: noop, needsApproval: true },
      "rm",
      "the definition has no field 'needsApproval' (its fields are name, description, input, title, annotations, outputSchema and execute)",
    );
    refused(new AbortController().signal, "", "the definition must be an object, got an AbortSignal");
    refused("rm", "", 'the definition must be an object, got "rm"');
    // Every field it has, as the MCP adapter passes them.
    const full = defineTool({
      name: "rm",
      title: "Delete",
      description: "Delete a file",
      input,
      annotations: { destructiveHint: true },
      outputSchema: { type: "object" },
      execute: noop,
    });
    expect(full.descriptor).toMatchObject({ title: "Delete", annotations: { destructiveHint: true } });
  });

  it("a definition whose reads throw (a getter, a revoked proxy) is a ToolDefinitionError, what was thrown its cause", () => {
    const bomb = new Error("getter bomb");
    const fail = (): never => {
      throw bomb;
    };
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const definitions: [string, unknown][] = [
      [
        "",
        {
          get name(): never {
            return fail();
          },
        },
      ],
      [
        "t",
        {
          name: "t",
          description: "",
          input: z.object({}),
          execute: noop,
          get annotations(): never {
            return fail();
          },
        },
      ],
      ["t", { name: "t", description: "", input: proxy, execute: noop }],
      ["", proxy],
    ];
    for (const [tool, definition] of definitions) {
      const thrown = thrownBy(() => defineTool(definition as never));
      expect(thrown).toBeInstanceOf(ToolDefinitionError);
      expect(thrown).toMatchObject({ tool });
      expect((thrown as Error).message).toContain("the definition cannot be read: ");
      expect((thrown as Error).cause).toBeDefined();
    }
  });

  it("refuses a zod 3 schema with a typed error naming the version", () => {
    const input = zod3.object({ path: zod3.string() });
    expect(() => defineTool({ name: "t", description: "", input: input as never, execute: noop })).toThrow(
      ToolDefinitionError,
    );
    expect(() => defineTool({ name: "t", description: "", input: input as never, execute: noop })).toThrow(
      /zod 3 schema; loopctl needs zod 4/,
    );
  });
});

describe("JSON Schema validation", () => {
  const tool = defineTool({
    name: "t",
    description: "",
    input: {
      type: "object",
      properties: {
        s: { type: "string", minLength: 2, maxLength: 4, pattern: "^[a-z]+$" },
        n: { type: "number", minimum: 0, exclusiveMaximum: 10 },
        i: { type: "integer" },
        b: { type: "boolean" },
        z: { type: "null" },
        e: { enum: ["x", 1, { k: [1] }] },
        c: { const: "fixed" },
        a: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 2 },
        o: { type: "object", properties: { deep: { type: "integer" } }, additionalProperties: { type: "boolean" } },
        u: { type: ["string", "null"] },
      },
      required: ["s"],
      additionalProperties: false,
    },
    execute: noop,
  });

  it.each([
    [{ s: "ab" }],
    [
      {
        s: "abcd",
        n: 0,
        i: 3,
        b: false,
        z: null,
        e: { k: [1] },
        c: "fixed",
        a: ["x"],
        o: { deep: 1, flag: true },
        u: null,
      },
    ],
    [{ s: "ab", n: 9.5, i: 3.0, u: "x", e: 1 }],
  ])("accepts %j", (input) => {
    expect(tool.check(input)).toEqual({ type: "valid", value: input });
  });

  it.each([
    [{}, "$: must have required property 's'"],
    [{ s: "a" }, "$.s: must NOT have fewer than 2 characters"],
    [{ s: "abcde" }, "$.s: must NOT have more than 4 characters"],
    [{ s: "AB" }, '$.s: must match pattern "^[a-z]+$"'],
    [{ s: "ab", n: -1 }, "$.n: must be >= 0"],
    [{ s: "ab", n: 10 }, "$.n: must be < 10"],
    [{ s: "ab", i: 1.5 }, "$.i: must be integer"],
    [{ s: "ab", b: "true" }, "$.b: must be boolean"],
    [{ s: "ab", z: 0 }, "$.z: must be null"],
    [{ s: "ab", e: { k: [2] } }, "$.e: must be equal to one of the allowed values"],
    [{ s: "ab", c: "other" }, "$.c: must be equal to constant"],
    [{ s: "ab", a: [] }, "$.a: must NOT have fewer than 1 items"],
    [{ s: "ab", a: ["x", 2] }, "$.a.1: must be string"],
    [{ s: "ab", o: { deep: "1" } }, "$.o.deep: must be integer"],
    [{ s: "ab", o: { flag: 1 } }, "$.o.flag: must be boolean"],
    [{ s: "ab", extra: 1 }, "$: must NOT have additional property 'extra'"],
    [{ s: "ab", u: 1 }, "$.u: must be string,null"],
    ["not an object", "$: must be object"],
  ])("refuses %j (%s)", (input, problem) => {
    const checked = tool.check(input);
    expect(checked.type).toBe("invalid");
    expect(checked.type === "invalid" ? checked.problems : []).toContain(problem);
  });

  it("invalid arguments go back to the model as an error result and never reach execute", async () => {
    let executed = 0;
    const strict = defineTool({
      name: "strict",
      description: "",
      input: { type: "object", properties: { n: { type: "integer" } }, required: ["n"], additionalProperties: false },
      execute: () => ((executed += 1), "ran"),
    });
    const { agent, model } = build({ turns: script(call("c1", "strict", { n: "1" })), tools: [strict] });
    await agent.run("go");
    expect(executed).toBe(0);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Invalid arguments for tool 'strict': $.n: must be integer",
      isError: true,
    });
  });

  it("a tool that mutates its arguments cannot rewrite the transcript: they are frozen, and the throw is the tool's failure", async () => {
    const mutating = defineTool({
      name: "m",
      description: "",
      input: { type: "object", properties: { list: { type: "array" } } },
      execute: (input) => {
        (input as { list: number[] }).list.push(99);
        return "ok";
      },
    });
    const { agent } = build({ turns: script(call("c1", "m", { list: [1] })), tools: [mutating] });
    const result = await agent.run("go");
    expect(result.messages[1]).toMatchObject({ toolCalls: [{ input: { list: [1] } }] });
    expect(result.messages[2]).toMatchObject({
      status: "failed",
      isError: true,
      content: expect.stringMatching(/^Tool 'm' failed: /),
    });
  });

  it("zod parsing results (defaults, transforms) are what execute receives", async () => {
    const seen: unknown[] = [];
    const tool2 = defineTool({
      name: "z",
      description: "",
      input: z.object({ n: z.number().default(5), s: z.string().transform((v) => v.toUpperCase()) }),
      execute: (input) => (seen.push(input), "ok"),
    });
    const { agent } = build({ turns: script(call("c1", "z", { s: "abc" })), tools: [tool2] });
    await agent.run("go");
    expect(seen).toEqual([{ n: 5, s: "ABC" }]);
  });

  it("a zod refinement or transform that throws refuses the arguments as invalid: the model is told why, and loop detection counts the call", async () => {
    const executed: unknown[] = [];
    const fetchTool = defineTool({
      name: "fetch",
      description: "",
      // `new URL` throws on what is not a URL: zod passes the throw on.
      input: z.object({ url: z.string().refine((v) => new URL(v).protocol === "https:") }),
      execute: (input) => (executed.push(input), "ok"),
    });
    expect(() => fetchTool.check({ url: "not a url" })).not.toThrow();
    expect(fetchTool.check({ url: "not a url" })).toEqual({ type: "invalid", problems: ["$: Invalid URL"] });
    const asyncTool = defineTool({
      name: "later",
      description: "",
      input: z.object({ n: z.number().refine(async () => true) }),
      execute: noop,
    });
    expect(asyncTool.check({ n: 1 })).toMatchObject({ type: "invalid", problems: [expect.stringMatching(/^\$: /)] });

    const bad = call("c1", "fetch", { url: "not a url" });
    const { agent } = build({
      turns: [{ toolCalls: [bad] }, { toolCalls: [{ ...bad, id: "c2" }] }, { text: "done" }],
      tools: [fetchTool],
      managers: new LoopManagers().withLoopDetection({ maxRepeats: 1 }),
    });
    const stopped = await agent.run("go").catch((error: unknown) => error);
    expect(stopped).toBeInstanceOf(LoopDetectedError);
    const { records, messages } = stopped as LoopDetectedError;
    expect(records[0]).toMatchObject({ verdict: "deny", ruleId: "schema", ruleSource: "engine" });
    expect(messages[2]).toMatchObject({
      status: "refused",
      content: "Invalid arguments for tool 'fetch': $: Invalid URL",
    });
    expect(records[1]).toMatchObject({ verdict: "deny", ruleId: "loop_detector" });
    expect(executed).toEqual([]);
  });
});

describe("a schema's $id belongs to its tool alone", () => {
  const META_2020 = "https://json-schema.org/draft/2020-12/schema";
  const META_07 = "http://json-schema.org/draft-07/schema#";
  const define = (name: string, input: Record<string, unknown>) =>
    defineTool({ name, description: "", input, execute: noop });
  const plain = (name: string) =>
    define(name, { type: "object", properties: { x: { type: "string" } }, required: ["x"] });
  const plain07 = (name: string) =>
    define(name, { $schema: META_07, type: "object", properties: { x: { type: "string" } }, required: ["x"] });

  it("an $id that is a meta-schema's, a vocabulary's or another tool's compiles for that tool and changes nothing for the others", async () => {
    const odd = [
      define("meta_2020", { $id: META_2020, type: "object", properties: { n: { type: "integer" } } }),
      define("meta_2020_hash", { $id: `${META_2020}#`, type: "object" }),
      define("vocabulary", { $id: "https://json-schema.org/draft/2020-12/meta/core", type: "object" }),
      define("alias", { $id: "http://json-schema.org/schema", type: "object" }),
      define("meta_07", { $schema: META_07, $id: "http://json-schema.org/draft-07/schema", type: "object" }),
      define("nested_id", {
        $id: "https://tools.example/a",
        type: "object",
        properties: { n: { $ref: "https://tools.example/num" } },
        $defs: { num: { $id: "https://tools.example/num", type: "integer" } },
      }),
      define("same_ids", {
        $id: "https://tools.example/a",
        type: "object",
        properties: { n: { $ref: "https://tools.example/num" } },
        $defs: { num: { $id: "https://tools.example/num", type: "string" } },
      }),
    ];
    expect(odd.map((tool) => tool.check({ n: 1 }).type)).toEqual([
      "valid",
      "valid",
      "valid",
      "valid",
      "valid",
      "valid",
      "invalid",
    ]);
    expect(odd[0]!.check({ n: "1" }).type).toBe("invalid");
    expect(odd[5]!.check({ n: "1" }).type).toBe("invalid");
    expect(odd[6]!.check({ n: "1" }).type).toBe("valid");
    // An id another tool's subschema had is nobody's: a $ref to it does not resolve.
    expect(() =>
      define("borrows", { type: "object", properties: { n: { $ref: "https://tools.example/num" } } }),
    ).toThrow(expect.objectContaining({ name: "ToolDefinitionError", tool: "borrows" }));
    // Every tool defined later, in either draft, and every bare descriptor still compiles and validates.
    for (const tool of [plain("later"), plain07("later_07")]) {
      expect(tool.check({ x: "a" }).type).toBe("valid");
      expect(tool.check({ x: 1 }).type).toBe("invalid");
    }
    const { agent } = build({
      turns: script(call("c1", "d", { x: "a" })),
      tools: [define("d", { type: "object", properties: { x: { type: "string" } } })],
    });
    expect((await agent.run("go")).records.map((r) => r.verdict)).toEqual(["allow"]);
  });

  it("a subschema whose $id names a meta-schema fails that tool with a typed error naming it, and no other", () => {
    const nested = (name: string, schema: Record<string, unknown>) => () =>
      define(name, { type: "object", properties: { inner: schema } });
    expect(nested("nested_2020", { $id: META_2020, type: "string" })).toThrow(
      expect.objectContaining({ name: "ToolDefinitionError", tool: "nested_2020" }),
    );
    expect(() =>
      define("nested_07", {
        $schema: META_07,
        type: "object",
        properties: { inner: { $id: META_07, type: "string" } },
      }),
    ).toThrow(expect.objectContaining({ name: "ToolDefinitionError", tool: "nested_07" }));
    expect(plain("after_nested").check({ x: "a" }).type).toBe("valid");
    expect(plain07("after_nested_07").check({ x: "a" }).type).toBe("valid");
  });
});

describe("Agent construction", () => {
  it("rejects duplicate tool names with ToolDefinitionError", () => {
    const t = defineTool({ name: "dup", description: "", input: z.object({}), execute: noop });
    const u = defineTool({ name: "dup", description: "other", input: z.object({}), execute: noop });
    expect(() => new Agent({ model: new ScriptedModel([]), tools: [t, u] })).toThrow(ToolDefinitionError);
    expect(() => new Agent({ model: new ScriptedModel([]), tools: [t, u] })).toThrow(
      /tool 'dup': the name is used by another tool/,
    );
  });

  it("rejects things that are not tools, models or managers", () => {
    expect(() => new Agent({ model: new ScriptedModel([]), tools: [{ name: "x" } as never] })).toThrow(
      ToolDefinitionError,
    );
    expect(() => new Agent({ model: {} as never, tools: [] })).toThrow(EngineConfigError);
    expect(() => new Agent({ model: new ScriptedModel([]), tools: {} as never })).toThrow(
      /Agent: tools must be an array/,
    );
    expect(() => new Agent({ model: new ScriptedModel([]), tools: [], managers: {} as never })).toThrow(
      /Agent: managers must be a LoopManagers/,
    );
  });

  it("run refuses a userText that is not a string", async () => {
    const agent = new Agent({ model: new ScriptedModel([]), tools: [] });
    await expect(agent.run(42 as never)).rejects.toThrow(EngineConfigError);
  });

  it("the model is shown every tool's descriptor", async () => {
    const { agent, model } = build({ turns: [{ text: "hi" }], managers: new LoopManagers() });
    await agent.run("go");
    expect(model.requests[0]?.tools.map((t) => t.name)).toEqual(["read"]);
  });
});

describe("types", () => {
  it("a zod schema types execute's input; a JSON Schema leaves it unknown", async () => {
    const { expectTypeOf } = await import("vitest");
    defineTool({
      name: "typed",
      description: "",
      input: z.object({ path: z.string(), limit: z.number().optional() }),
      execute: (input) => {
        expectTypeOf(input).toEqualTypeOf<{ path: string; limit?: number | undefined }>();
        return input.path;
      },
    });
    defineTool({
      name: "untyped",
      description: "",
      input: { type: "object" },
      execute: (input) => {
        expectTypeOf(input).toEqualTypeOf<unknown>();
        return "";
      },
    });
    // @ts-expect-error a hook answers one of the four decisions, nothing else
    const bad: import("../src/engine/index.js").HookDecision = { type: "maybe" };
    void bad;
  });
});
