import { Ajv2020 } from "ajv/dist/2020.js";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it, vi } from "vitest";
import { Gate, LoopManagers } from "loopctl/engine";
import { compileJsonSchema } from "../src/engine/validation.js";

/** A schema as a caller builds it: a new object, with a format and a pattern Ajv compiles code for. */
const schemaText = (): Record<string, unknown> => ({
  type: "object",
  properties: {
    path: { type: "string", format: "uri-reference" },
    mode: { enum: ["read", "write"] },
    n: { type: "integer", minimum: 0 },
  },
  required: ["path"],
  additionalProperties: false,
});

afterEach(() => {
  vi.restoreAllMocks();
});

describe("a JSON Schema is compiled once for each JSON text", () => {
  it("a bare descriptor made afresh for each call is not compiled again at each call", async () => {
    // Ajv's own compile, on the class every Ajv class (2020-12, draft-07) extends.
    const core = Object.getPrototypeOf(Ajv2020.prototype) as { compile(schema: unknown): unknown };
    const compile = vi.spyOn(core, "compile");
    const gate = new Gate(new LoopManagers());
    const outcomes: string[] = [];
    // Held here, as a tool set kept for a run would hold it: the cache keeps a validator while something does.
    const first = { name: "read", description: "Read a file", inputSchema: schemaText() };
    outcomes.push((await gate.call({ tool: first, callId: "c0", input: { path: "a" } }, () => "ran")).type);
    const compiles = compile.mock.calls.length;
    expect(compiles).toBeGreaterThan(0);
    for (let i = 1; i <= 50; i++) {
      const descriptor = { name: "read", description: "Read a file", inputSchema: schemaText() };
      outcomes.push((await gate.call({ tool: descriptor, callId: `c${i}`, input: { path: "a" } }, () => "ran")).type);
    }
    expect(compile.mock.calls.length).toBe(compiles);
    expect(outcomes).toEqual(Array(51).fill("ran"));
    // Still checked: the same schema refuses what it always did.
    const refused = await gate.call(
      {
        tool: { name: "read", description: "Read a file", inputSchema: schemaText() },
        callId: "bad",
        input: { path: 1 },
      },
      () => "ran",
    );
    expect(refused).toMatchObject({ type: "refused", record: { verdict: "deny", ruleId: "schema" } });
    expect(compile.mock.calls.length).toBe(compiles);
    expect(first.name).toBe("read");
  });

  it("a descriptor made afresh for each call, collected between calls, is not compiled again either", async () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const compile = vi.spyOn(
      Object.getPrototypeOf(Ajv2020.prototype) as { compile(schema: unknown): unknown },
      "compile",
    );
    const gate = new Gate(new LoopManagers());
    // A schema no other test compiles: nothing but the cache holds its validator between calls.
    const own = (): Record<string, unknown> => ({ ...schemaText(), title: "collected between calls" });
    for (let i = 0; i < 5; i++) {
      const outcome = await gate.call(
        {
          tool: { name: "read", description: "Read a file", inputSchema: own() },
          callId: `c${i}`,
          input: { path: "a" },
        },
        () => "ran",
      );
      expect(outcome.type).toBe("ran");
      // Past the end of this job (a WeakRef's target is kept until then), then collected.
      await new Promise((resolve) => setImmediate(resolve));
      gc();
    }
    expect(compile.mock.calls.length).toBe(1);
  });

  it("two schemas of the same text share one validator; another text gets its own", () => {
    const a = compileJsonSchema(schemaText());
    expect(compileJsonSchema(schemaText())).toBe(a);
    const other = { ...schemaText(), required: ["path", "n"] };
    const b = compileJsonSchema(other);
    expect(b).not.toBe(a);
    expect(a({ path: "x" })).toEqual({ type: "valid", value: { path: "x" } });
    expect(b({ path: "x" }).type).toBe("invalid");
  });

  it("a schema changed in place after it was compiled never changes what its shared validator checks", () => {
    const mine = schemaText();
    const check = compileJsonSchema(mine);
    const theirs = compileJsonSchema(schemaText());
    expect(theirs).toBe(check);
    // The first holder widens its own object: the validator the second holder shares checks as compiled.
    ((mine["properties"] as Record<string, { enum?: unknown[] }>)["mode"]!.enum as unknown[]).push("delete");
    mine["additionalProperties"] = true;
    expect(theirs({ path: "x", mode: "delete" }).type).toBe("invalid");
    expect(theirs({ path: "x", extra: 1 }).type).toBe("invalid");
    // Compiled again, the changed object is a schema of another text, checked as it is now.
    expect(compileJsonSchema(mine)({ path: "x", mode: "delete", extra: 1 }).type).toBe("valid");
  });

  it("a schema that does not compile still throws each time it is handed over", () => {
    const broken = (): Record<string, unknown> => ({ type: "object", properties: { a: { type: "strnig" } } });
    expect(() => compileJsonSchema(broken())).toThrow(TypeError);
    expect(() => compileJsonSchema(broken())).toThrow(TypeError);
  });
});
