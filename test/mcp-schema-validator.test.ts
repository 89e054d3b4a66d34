import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import type { JsonSchemaType, JsonSchemaValidator, jsonSchemaValidator } from "@modelcontextprotocol/sdk/validation";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it, onTestFinished } from "vitest";
import { Gate, LoopManagers, ToolDefinitionError } from "loopctl/engine";
import type { GateOutcome, Tool } from "loopctl/engine";
import { McpToolError, mcpSchemaValidator, mcpTools } from "loopctl/mcp";
import { importedUrls } from "./support/imported-urls.js";
import { isAlive, startFixture } from "./support/mcp-fixtures.js";

const run = promisify(execFile);
const repo = fileURLToPath(new URL("..", import.meta.url));

/** Calls `tool` through a gate that lets every call run. */
function call(tool: Tool, input: Record<string, unknown>): Promise<GateOutcome> {
  return new Gate(new LoopManagers()).call({ tool, callId: "c1", input }, (args, { signal }) =>
    tool.execute(args, { signal, callId: "c1", turn: 0, sessionId: "", runId: "" }),
  );
}

/** The text the MCP SDK client fails a call with when the validator refuses its structured content. */
const MISMATCH = "MCP error -32602: Structured content does not match the tool's output schema: ";

describe("mcpSchemaValidator: the MCP SDK client's schema validator on loopctl's engine", () => {
  it("a result whose structured content makes the output schema's pattern backtrack for hours fails the call at once (the client's own validator stopped the process inside callTool)", async () => {
    const started = Date.now();
    const { stdout } = await run(process.execPath, ["--import", "tsx", "test/support/mcp-output-child.ts"], {
      cwd: repo,
      timeout: 20_000,
      killSignal: "SIGKILL",
    });
    expect(Date.now() - started).toBeLessThan(20_000);
    const outcome = JSON.parse(stdout) as { type: string; error?: { name: string; message: string }; ms: number };
    expect(outcome).toMatchObject({
      type: "failed",
      error: {
        name: "McpToolError",
        message: `tool 'lookup' on MCP server 'hostile-output': tools/call failed: ${MISMATCH}$.name: must match pattern "^(a+)+$"`,
      },
    });
    expect(outcome.ms).toBeLessThan(5_000);
  }, 60_000);

  it("over a real server: the client checks results with it, a matching one passes and one that does not fails the call with its text", async () => {
    const server = await startFixture("hostile-output", { jsonSchemaValidator: mcpSchemaValidator() });
    const toolset = await mcpTools(server.client);
    // The client's own check, before loopctl's (it knows the tool from the listing): its text is this
    // validator's (`$.name`), not Ajv's (`data/name`).
    const refused: unknown = await server.client
      .callTool({ name: "lookup", arguments: { give: "mismatch" } })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(McpError);
    expect((refused as Error).message).toBe(`${MISMATCH}$.name: must match pattern "^(a+)+$"`);
    const [lookup] = toolset.tools as [Tool];
    const failed = await call(lookup, { give: "mismatch" });
    expect(failed).toMatchObject({ type: "failed" });
    const error = (failed as { error: unknown }).error;
    expect(error).toBeInstanceOf(McpToolError);
    expect((error as Error).message).toBe(
      `tool 'lookup' on MCP server 'hostile-output': tools/call failed: ${MISMATCH}$.name: must match pattern "^(a+)+$"`,
    );
    expect(await call(lookup, { give: "match" })).toMatchObject({ type: "ran", output: "aaaa" });
    await server.waitFor('called lookup {"give":"match"}');
    expect(server.lines.filter((line) => line.startsWith("called"))).toEqual([
      'called lookup {"give":"mismatch"}',
      'called lookup {"give":"mismatch"}',
      'called lookup {"give":"match"}',
    ]);
    toolset.close();
  });

  it("an output schema that does not compile refuses every result of its tool alone: the other tools are listed and offered (with the SDK's validator the whole listing failed)", async () => {
    const server = await startFixture("odd-output invalid", { jsonSchemaValidator: mcpSchemaValidator() });
    const toolset = await mcpTools(server.client);
    expect(toolset.tools.map((tool) => tool.name)).toEqual(["fine"]);
    expect(toolset.problems.map((problem) => problem.tool)).toEqual(["odd"]);
    expect(toolset.problems[0]!.error).toBeInstanceOf(ToolDefinitionError);
    expect(await call(toolset.tools[0]!, {})).toMatchObject({ type: "ran" });
    // Called past loopctl, the client itself refuses the tool's result: fail closed, saying why.
    const refused: unknown = await server.client
      .callTool({ name: "odd", arguments: {} })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(McpError);
    expect((refused as Error).message).toMatch(
      new RegExp(
        `^${MISMATCH.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}the schema does not compile: .*properties/count/type must be equal to one of the allowed values`,
      ),
    );
    toolset.close();
  });

  it("implements the SDK's interface: a valid value as it is, an invalid one refused with loopctl's problems", () => {
    const validate = mcpSchemaValidator().getValidator<{ count: number }>({
      type: "object",
      properties: { count: { type: "number" } },
      required: ["count"],
    });
    const value = { count: 1 };
    const passed = validate(value);
    expect(passed).toEqual({ valid: true, data: value, errorMessage: undefined });
    expect(passed.data).toBe(value);
    expect(validate({ count: "many" })).toEqual({
      valid: false,
      data: undefined,
      errorMessage: "$.count: must be number",
    });
    expect(validate({})).toEqual({
      valid: false,
      data: undefined,
      errorMessage: "$: must have required property 'count'",
    });
  });

  it("reads the dialect as loopctl's own checks do: 2020-12 by default, draft-07 when `$schema` says so; formats are checked", () => {
    const { getValidator } = mcpSchemaValidator();
    const pair = getValidator({ type: "array", prefixItems: [{ type: "string" }, { type: "number" }], items: false });
    expect(pair(["a", 1]).valid).toBe(true);
    expect(pair(["a", 1, 2]).valid).toBe(false);
    // Draft-07's tuple form of `items`, which the SDK's type (2020-12) does not know.
    const draft07: Record<string, unknown> = {
      $schema: "http://json-schema.org/draft-07/schema#",
      definitions: { id: { type: "string", format: "uuid" } },
      type: "array",
      items: [{ $ref: "#/definitions/id" }],
      additionalItems: false,
    };
    const legacy = getValidator(draft07 as JsonSchemaType);
    expect(legacy(["0b6bd8ac-5d8b-4d36-9d9c-2f6fbbd5a7c1"]).valid).toBe(true);
    expect(legacy(["not a uuid"])).toEqual({
      valid: false,
      data: undefined,
      errorMessage: '$.0: must match format "uuid"',
    });
    expect(legacy(["0b6bd8ac-5d8b-4d36-9d9c-2f6fbbd5a7c1", "x"]).valid).toBe(false);
    const dated = getValidator({ type: "object", properties: { at: { type: "string", format: "date-time" } } });
    expect(dated({ at: "2026-12-07T09:00:00Z" }).valid).toBe(true);
    expect(dated({ at: "yesterday" }).valid).toBe(false);
    // A pattern RE2 cannot run (a lookahead) is still matched, as JavaScript matches it.
    const peek = getValidator({ type: "string", pattern: "^(?=a)\\w+$" });
    expect([peek("ab").valid, peek("ba").valid]).toEqual([true, false]);
  });

  it.each([
    ["an unknown keyword", { type: "object", madeUp: true }, /madeUp/],
    ["an unknown format", { type: "string", format: "colour" }, /colour/],
    ["a type no JSON Schema has", { type: "nonsense" }, /type must be equal to one of the allowed values/],
    ["an unsupported $schema", { $schema: "https://json-schema.org/draft/2019-09/schema" }, /2019-09.*not supported/],
    ["a $ref that resolves to nothing", { $ref: "#/$defs/missing" }, /missing/],
    ["an $async schema", { $async: true, type: "object" }, /\$async/],
    ["a pattern that is not a regular expression", { type: "string", pattern: "(" }, /\(/],
    ["null", null, /./],
    ["a number", 42, /./],
  ])("never throws: a schema with %s gives a validator that refuses every value, saying why", (_, schema, why) => {
    const validator = mcpSchemaValidator();
    let validate!: ReturnType<typeof validator.getValidator>;
    expect(() => (validate = validator.getValidator(schema as never))).not.toThrow();
    for (const value of [{}, "text", 1, null, []]) {
      const checked = validate(value);
      expect(checked.valid).toBe(false);
      expect(checked.data).toBeUndefined();
      expect(checked.errorMessage).toMatch(/^the schema does not compile: /);
      expect(checked.errorMessage).toMatch(why);
    }
  });

  it("refuses a value it cannot check (nested deeper than the stack goes) instead of throwing", () => {
    const validate = mcpSchemaValidator().getValidator({
      $ref: "#/$defs/nested",
      $defs: { nested: { type: "array", items: { $ref: "#/$defs/nested" } } },
    });
    let deep: unknown = [];
    for (let depth = 0; depth < 100_000; depth++) deep = [deep];
    expect(validate([[[]]]).valid).toBe(true);
    expect(validate(deep)).toEqual({
      valid: false,
      data: undefined,
      errorMessage: "$: could not be checked: Maximum call stack size exceeded",
    });
  });

  it("cuts its messages as a record cuts a text: a server's long pattern or keyword does not make a long error", () => {
    const { getValidator } = mcpSchemaValidator();
    const pattern = `^${"a".repeat(40_000)}$`;
    const long = getValidator({ type: "string", pattern })("b").errorMessage ?? "";
    expect(long.startsWith('$: must match pattern "^aaa')).toBe(true);
    expect(long).toMatch(/… \[\d+ characters cut\]$/);
    expect(long.length).toBeLessThan(16_384 + 40);
    const keyword = `x${"y".repeat(40_000)}`;
    const broken = getValidator({ type: "object", [keyword]: 1 })({}).errorMessage ?? "";
    expect(broken.startsWith("the schema does not compile: ")).toBe(true);
    expect(broken).toMatch(/… \[\d+ characters cut\]$/);
    expect(broken.length).toBeLessThan(16_384 + 40);
  });

  it("importing loopctl/mcp and making a validator loads nothing of the MCP SDK", async () => {
    const urls = await importedUrls(
      repo,
      `const mcp = await import(${JSON.stringify(pathToFileURL(join(repo, "src/mcp/index.ts")).href)});
       const validate = mcp.mcpSchemaValidator().getValidator({ type: "string", pattern: "^a+$" });
       if (validate("aaa").valid !== true) process.exit(3);`,
    );
    expect(urls).toContain(pathToFileURL(join(repo, "src/mcp/index.ts")).href);
    expect(urls.filter((url) => url.includes("/node_modules/@modelcontextprotocol/"))).toEqual([]);
  });

  it("an output schema listed again is not compiled again: every listing of a server with many tools cost a compile of each, twice over pages", async () => {
    // Each validator the client is given, kept here: a listing that compiled anew would give new ones.
    const inner = mcpSchemaValidator();
    const given = new Set<JsonSchemaValidator<unknown>>();
    let asked = 0;
    const counting: jsonSchemaValidator = {
      getValidator<T>(schema: JsonSchemaType): JsonSchemaValidator<T> {
        asked += 1;
        const validator = inner.getValidator<T>(schema);
        given.add(validator);
        return validator;
      },
    };
    const client = new Client({ name: "loopctl-tests", version: "1.0.0" }, { jsonSchemaValidator: counting });
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [fileURLToPath(new URL("./fixtures/mcp/server.mjs", import.meta.url)), "schemas", "300", "100"],
      stderr: "ignore",
    });
    await client.connect(transport);
    const pid = transport.pid!;
    onTestFinished(async () => {
      await client.close();
      expect(isAlive(pid), `server process ${pid} still alive`).toBe(false);
    });
    const toolset = await mcpTools(client);
    expect(toolset.tools).toHaveLength(300);
    await toolset.refresh();
    await toolset.refresh();
    // The client asks for a validator of each output schema on every page, then for the whole listing.
    expect(asked).toBe(3 * 600);
    expect(given.size).toBe(300);
    // Each tool's results are still checked against its own schema.
    const context = { signal: new AbortController().signal, callId: "c", turn: 0, sessionId: "", runId: "" };
    await expect(Promise.resolve(toolset.tools[7]!.execute({}, context))).resolves.toBe("ok");
    toolset.close();
  });

  it("gives the validator it made before for a schema of the same JSON text, and a new one for another", () => {
    const validator = mcpSchemaValidator();
    const schema = { type: "object", properties: { count: { type: "number" } }, required: ["count"] };
    const first = validator.getValidator(schema);
    expect(validator.getValidator(structuredClone(schema))).toBe(first);
    const other = validator.getValidator({ ...schema, required: [] });
    expect(other).not.toBe(first);
    expect(other({})).toEqual({ valid: true, data: {}, errorMessage: undefined });
    expect(first({})).toMatchObject({ valid: false });
    // One that does not compile is refused each time it is asked for.
    for (const broken of [validator.getValidator({ type: "nonsense" }), validator.getValidator({ type: "nonsense" })]) {
      expect(broken({})).toMatchObject({
        valid: false,
        errorMessage: expect.stringMatching(/^the schema does not compile: /),
      });
    }
    // Another validator answers alike.
    expect(mcpSchemaValidator().getValidator(schema)({})).toEqual(first({}));
  });
});
