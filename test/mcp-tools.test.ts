import { McpError, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import type { jsonSchemaValidator } from "@modelcontextprotocol/sdk/validation";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { ClientOptions } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { getEventListeners } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { describe, expect, it, onTestFinished } from "vitest";
import { ApprovalChannel, SyncAskResolver, type Approver } from "loopctl/ask";
import type { AskResolver, PendingAsk } from "loopctl/ask";
import { Agent, CancelledError, Gate, LoopManagers, ToolDefinitionError } from "loopctl/engine";
import type { GateDecision, GateOutcome, Hook, Message, Tool } from "loopctl/engine";
import { MemoryGrantStore } from "loopctl/grant";
import {
  McpCallbackError,
  McpConfigError,
  McpServerError,
  McpToolError,
  mcpAnnotationHook,
  mcpTools,
} from "loopctl/mcp";
import { ScriptedModel } from "loopctl/testing";
import { gcChildResult } from "./support/child-process.js";
import { deferred, flush, until } from "./support/engine-fixtures.js";
import { changes, isAlive, reconnectFixture, startFixture, startHttpFixture } from "./support/mcp-fixtures.js";
import type { Started } from "./support/mcp-fixtures.js";

const ask: Hook = { preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name}?` }) };

/** Managers whose hook asks about every call, the approver that gets the asks, and the records that land. */
function askingManagers(): { approver: Approver; records: GateDecision[]; managers: LoopManagers } {
  const [channel, approver] = ApprovalChannel.pair(4);
  const records: GateDecision[] = [];
  const managers = new LoopManagers()
    .withHook(ask)
    .withAskResolver(channel)
    .withObserver({ onGate: ({ decision }) => void records.push(decision) });
  return { approver, records, managers };
}

const results = (messages: readonly Message[]) => messages.filter((m) => m.type === "tool_result");

describe("mcpTools: an MCP server's tools as loopctl tools", () => {
  it("offers every tool with the descriptor the server lists: title, description, input schema, annotations, output schema", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client);
    expect(toolset.server).toBe("fixture");
    expect(toolset.tools.map((t) => t.name)).toEqual(["read_note", "delete_note", "fail", "slow", "rich", "stats"]);
    expect(toolset.current()).toBe(toolset.tools);
    expect(toolset.problems).toEqual([]);
    const [read, remove] = toolset.tools;
    expect(read!.descriptor).toMatchObject({
      name: "read_note",
      title: "Read Note",
      description: "Read a note by name",
      inputSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
      annotations: { readOnlyHint: true, destructiveHint: false },
    });
    expect(remove!.descriptor.annotations).toEqual({ readOnlyHint: false, destructiveHint: true });
    expect(toolset.tools[5]!.descriptor.outputSchema).toMatchObject({
      type: "object",
      properties: { count: { type: "number" } },
    });
    toolset.close();
  });

  it("reads every page of tools/list, and names tools with an optional prefix (the server is called by its own name)", async () => {
    const server = await startFixture("paged");
    const toolset = await mcpTools(server.client, { prefix: "p_" });
    expect(toolset.tools.map((t) => t.name)).toEqual(["p_t0", "p_t1", "p_t2", "p_t3", "p_t4"]);
    const model = new ScriptedModel([{ toolCalls: [{ id: "c1", name: "p_t3", input: { n: 3 } }] }, { text: "done" }]);
    const result = await new Agent({ model, tools: toolset }).run("go");
    await server.waitFor('called t3 {"n":3}');
    expect(results(result.messages)).toMatchObject([{ tool: "p_t3", status: "ran", content: "t3 ran" }]);
  });

  it("runs calls through the gate and the server: text to the model, isError as a failed call the model reads", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client);
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "read_note", input: { name: "todo" } },
          { id: "c2", name: "fail", input: {} },
          { id: "c3", name: "rich", input: {} },
          { id: "c4", name: "stats", input: {} },
          { id: "c5", name: "read_note", input: { name: 7 } },
        ],
      },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: toolset }).run("go");
    expect(results(result.messages).map((m) => [m.callId, m.status, m.content])).toEqual([
      ["c1", "ran", "buy milk"],
      [
        "c2",
        "failed",
        "Tool 'fail' failed: tool 'fail' on MCP server 'fixture': the server answered with an error: the disk is on fire",
      ],
      [
        "c3",
        "ran",
        "a chart and a file:\n[image image/png, 7 bytes]\nbuy milk\n[resource link file:///notes/all (all notes)]",
      ],
      ["c4", "ran", '{"count":1}'],
      ["c5", "refused", "Invalid arguments for tool 'read_note': $.name: must be string"],
    ]);
    expect(result.records.map((r) => r.verdict)).toEqual(["allow", "allow", "allow", "allow", "deny"]);
    // The invalid call never reached the server (its line on stderr may come after the answer on stdout).
    await server.waitFor('called read_note {"name":"todo"}');
    expect(server.lines.filter((l) => l.startsWith("called read_note"))).toEqual(['called read_note {"name":"todo"}']);
  });

  it("a result checked against the tool's output schema on every page of tools/list, not only the last: one that does not match, or has no structured content, is a failed call", async () => {
    const server = await startFixture("structured");
    const toolset = await mcpTools(server.client);
    expect(toolset.tools.map((t) => t.name)).toEqual(["first", "last"]);
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    for (const tool of toolset.tools) {
      await expect(Promise.resolve(tool.execute({ give: "right" }, context))).resolves.toBe('{"count":1}');
      for (const give of ["wrong", "none"]) {
        const error: unknown = await Promise.resolve(tool.execute({ give }, context)).then(
          (output) => output,
          (e: unknown) => e,
        );
        expect(error, `${tool.name} giving ${give}`).toBeInstanceOf(McpToolError);
        expect((error as McpToolError).message).toMatch(/output schema|structured content/);
      }
    }
    toolset.close();
  });

  it("a result is checked against the tool's output schema by loopctl itself, not by the MCP SDK client's cache of tools/list", async () => {
    const server = await startFixture("structured");
    // A client that keeps no tool metadata checks no result itself.
    (server.client as unknown as { cacheToolMetadata: (tools: unknown) => void }).cacheToolMetadata = () => {};
    const toolset = await mcpTools(server.client);
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const outcome = (tool: string, give: string): Promise<unknown> =>
      Promise.resolve(toolset.tools.find((t) => t.name === tool)!.execute({ give }, context)).catch(
        (error: unknown) => error,
      );
    for (const tool of ["first", "last"]) {
      await expect(outcome(tool, "right")).resolves.toBe('{"count":1}');
      const wrong = await outcome(tool, "wrong");
      expect(wrong).toBeInstanceOf(McpToolError);
      expect(wrong).toMatchObject({ code: "MCP_TOOL", server: "structured", tool, changed: false });
      expect((wrong as Error).message).toBe(
        `tool '${tool}' on MCP server 'structured': tools/call failed: MCP error -32602: Structured content ` +
          "does not match the tool's output schema: $.count: must be number",
      );
      const none = await outcome(tool, "none");
      expect(none).toBeInstanceOf(McpToolError);
      expect((none as Error).message).toBe(
        `tool '${tool}' on MCP server 'structured': tools/call failed: MCP error -32600: Tool ${tool} has an ` +
          "output schema but did not return structured content",
      );
    }
    toolset.close();
  });

  it("a tool whose output schema does not compile is a problem, not a tool whose results go unchecked", async () => {
    const client = {
      transport: {},
      getServerVersion: () => ({ name: "odd", version: "1.0.0" }),
      listTools: async () => ({
        tools: [
          { name: "fine", inputSchema: { type: "object" }, outputSchema: { type: "object" } },
          { name: "odd", inputSchema: { type: "object" }, outputSchema: { type: "object", madeUp: true } },
        ],
      }),
      callTool: async () => ({ content: [] }),
    };
    const toolset = await mcpTools(client as never);
    expect(toolset.tools.map((t) => t.name)).toEqual(["fine"]);
    expect(toolset.problems).toHaveLength(1);
    expect(toolset.problems[0]!.tool).toBe("odd");
    expect(toolset.problems[0]!.error).toBeInstanceOf(ToolDefinitionError);
    expect((toolset.problems[0]!.error as Error).message).toMatch(
      /^tool 'odd': the output schema does not compile: .*madeUp/,
    );
    toolset.close();
  });

  it("over the MCP SDK client: a server's input schema patterns are matched in linear time, and one with a lookahead as JavaScript matches it", async () => {
    const server = await startFixture("patterned");
    const toolset = await mcpTools(server.client);
    expect(toolset.tools.map((t) => t.name)).toEqual(["lookup", "peek"]);
    expect(toolset.problems).toEqual([]);
    const gate = new Gate(new LoopManagers());
    const call = (tool: Tool, name: string): Promise<GateOutcome> =>
      gate.call({ tool, callId: `${tool.name}-${name}`, input: { name } }, (args, { signal }) =>
        tool.execute(args, { signal, callId: name, turn: 0, sessionId: "", runId: "" }),
      );
    const [lookup, peek] = toolset.tools as [Tool, Tool];
    expect(await call(lookup, "aaaa")).toMatchObject({ type: "ran", output: "found" });
    // Forty a's and a b: a backtracking engine takes minutes on this; the linear one, no time.
    expect(await call(lookup, `${"a".repeat(40)}b`)).toMatchObject({
      type: "refused",
      record: { ruleId: "schema", reason: 'invalid arguments: $.name: must match pattern "^(a+)+$"' },
    });
    expect(await call(peek, "ab")).toMatchObject({ type: "ran", output: "found" });
    expect(await call(peek, "ba")).toMatchObject({
      type: "refused",
      record: { ruleId: "schema", reason: 'invalid arguments: $.name: must match pattern "^(?=a)\\w+$"' },
    });
    await server.waitFor('called peek {"name":"ab"}');
    expect(server.lines.filter((line) => line.startsWith("called"))).toEqual([
      'called lookup {"name":"aaaa"}',
      'called peek {"name":"ab"}',
    ]);
    toolset.close();
  });

  /** What the "structured" fixture's first tool fails with when asked to `give` one of its failures. */
  async function structuredFailure(give: string): Promise<unknown> {
    const server = await startFixture("structured");
    const toolset = await mcpTools(server.client);
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    try {
      return await Promise.resolve(toolset.tools[0]!.execute({ give }, context)).catch((e: unknown) => e);
    } finally {
      toolset.close();
    }
  }

  it("over the MCP SDK client: an isError result whose structured content does not match the output schema fails with the client's -32602 text, not the server's", async () => {
    const error = await structuredFailure("error-wrong");
    expect(error).toBeInstanceOf(McpToolError);
    expect((error as Error).message).toBe(
      "tool 'first' on MCP server 'structured': tools/call failed: MCP error -32602: Structured content does not " +
        "match the tool's output schema: data/count must be number",
    );
  });

  it("over the MCP SDK client: an output schema only loopctl's validator refuses is a problem of its tool; one the client's cannot compile fails the whole listing, closed", async () => {
    const lenient = await startFixture("odd-output unknown-keyword");
    const toolset = await mcpTools(lenient.client);
    expect(toolset.tools.map((t) => t.name)).toEqual(["fine"]);
    expect(toolset.problems.map((p) => p.tool)).toEqual(["odd"]);
    expect(toolset.problems[0]!.error).toBeInstanceOf(ToolDefinitionError);
    toolset.close();
    // The client compiles every output schema of a listing in listTools() itself, and throws there.
    const invalid = await startFixture("odd-output invalid");
    const failed: unknown = await mcpTools(invalid.client).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(McpServerError);
    expect(failed).toMatchObject({ code: "MCP_SERVER", server: "odd-output" });
    expect((failed as Error).message).toMatch(/^MCP server 'odd-output': tools\/list failed: .*nonsense/);
  });

  it("an isError result's text is cut in the error as a record cuts a text: 16,384 UTF-16 units at most, never half a character", async () => {
    const error = await structuredFailure("long-error");
    expect(error).toBeInstanceOf(McpToolError);
    // The server's text: 16,383 units, then a character of two units across the bound, then four more.
    expect((error as Error).message).toBe(
      `tool 'first' on MCP server 'structured': the server answered with an error: ${"x".repeat(16_383)}… [6 characters cut]`,
    );
  });

  it("a result nested deeper than JSON.stringify goes is a failed call naming the tool and the server, not an untyped RangeError", async () => {
    const server = await startFixture("deep");
    // A client that keeps no tool metadata checks no result itself: loopctl's own check is the one that runs.
    (server.client as unknown as { cacheToolMetadata: (tools: unknown) => void }).cacheToolMetadata = () => {};
    const toolset = await mcpTools(server.client);
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "nothing", input: {} },
          { id: "c2", name: "failing", input: {} },
          { id: "c3", name: "checked", input: {} },
        ],
      },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: toolset }).run("go");
    expect(results(result.messages).map((m) => [m.callId, m.status, m.content])).toEqual([
      [
        "c1",
        "failed",
        "Tool 'nothing' failed: tool 'nothing' on MCP server 'deep': the result cannot be read: " +
          "Maximum call stack size exceeded: the call ran on the server, and its result is not passed on",
      ],
      [
        "c2",
        "failed",
        "Tool 'failing' failed: tool 'failing' on MCP server 'deep': the server answered with an error, whose " +
          "text cannot be read: Maximum call stack size exceeded",
      ],
      [
        "c3",
        "failed",
        "Tool 'checked' failed: tool 'checked' on MCP server 'deep': tools/call failed: MCP error -32602: " +
          "Structured content does not match the tool's output schema: $: could not be checked: Maximum call stack " +
          "size exceeded",
      ],
    ]);
    expect(result.records.map((r) => r.verdict)).toEqual(["allow", "allow", "allow"]);
    await server.waitFor("called checked {}");
    toolset.close();
  });

  it("a result of more than maxResultBytes (default 1 MiB) of what the model reads is a failed call the model reads, with one record; it is not passed on", async () => {
    const server = await startFixture("bulky");
    const toolset = await mcpTools(server.client);
    const MiB = 1_048_576;
    const big = (id: string, bytes: number, as: string) => ({ id, name: "big", input: { bytes, as } });
    const model = new ScriptedModel([
      {
        toolCalls: [
          big("c1", MiB, "text"),
          big("c2", 2 * MiB, "text"),
          big("c3", 2 * MiB, "structured"),
          big("c4", 2 * MiB, "both"),
          big("c5", 2 * MiB, "image"),
        ],
      },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: toolset }).run("go");
    const read = results(result.messages);
    expect(read.map((m) => [m.callId, m.status])).toEqual([
      ["c1", "ran"],
      ["c2", "failed"],
      ["c3", "failed"],
      ["c4", "ran"],
      ["c5", "ran"],
    ]);
    expect(read[0]!.content).toBe("x".repeat(MiB));
    expect(read[1]!.content).toBe(
      "Tool 'big' failed: tool 'big' on MCP server 'bulky': the result is 2097152 bytes of text, more than " +
        "maxResultBytes (1048576): the call ran on the server, and its result is not passed on",
    );
    // Structured content alone is read as JSON: {"data":"…"} is 11 bytes more than the data.
    expect(read[2]!.content).toContain("the result is 2097163 bytes of text, more than maxResultBytes (1048576)");
    // What the model does not read does not count: structured content beside text, an image's data.
    expect(read[3]!.content).toBe("see the data");
    expect(read[4]!.content).toBe("[image image/png, 2097152 bytes]");
    expect(result.records.map((r) => r.verdict)).toEqual(["allow", "allow", "allow", "allow", "allow"]);
    await server.waitFor('called big {"bytes":2097152,"as":"image"}');
    expect(server.lines.filter((l) => l.startsWith("called big"))).toHaveLength(5);
  });

  it("maxResultBytes counts UTF-8 bytes of what the model reads, what a result option returns included", async () => {
    const server = await startFixture("bulky");
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const outcome = (
      toolset: { tools: readonly { execute: (input: never, c: typeof context) => unknown }[] },
      input: object,
    ) => Promise.resolve(toolset.tools[0]!.execute(input as never, context)).catch((error: unknown) => error);
    const plain = await mcpTools(server.client, { maxResultBytes: 1000 });
    await expect(outcome(plain, { bytes: 1000, as: "text", unit: "é" })).resolves.toBe("é".repeat(500));
    const over = await outcome(plain, { bytes: 1002, as: "text", unit: "é" });
    expect(over).toBeInstanceOf(McpToolError);
    expect(over).toMatchObject({ server: "bulky", tool: "big", changed: false });
    expect((over as Error).message).toContain("the result is 1002 bytes of text, more than maxResultBytes (1000)");
    plain.close();
    const summed = await mcpTools(server.client, {
      maxResultBytes: 1000,
      result: (result) => ({ blocks: result.content.length }),
    });
    await expect(outcome(summed, { bytes: 100_000, as: "text" })).resolves.toEqual({ blocks: 1 });
    summed.close();
    const whole = await mcpTools(server.client, {
      maxResultBytes: 1000,
      result: (result) => ({ whole: result.content }),
    });
    expect(await outcome(whole, { bytes: 1000, as: "text" })).toBeInstanceOf(McpToolError);
    whole.close();
    // A result option that returns a promise is read for what it resolves to, as the engine reads it.
    const later = await mcpTools(server.client, {
      maxResultBytes: 1000,
      result: async (result) => {
        await flush();
        return result.content.map((block) => (block.type === "text" ? block.text : "")).join("");
      },
    });
    await expect(outcome(later, { bytes: 1000, as: "text" })).resolves.toBe("x".repeat(1000));
    expect(await outcome(later, { bytes: 1001, as: "text" })).toBeInstanceOf(McpToolError);
    later.close();
  });

  it("a maxResultBytes that is not a positive integer is an McpConfigError naming it", async () => {
    const server = await startFixture("bulky");
    for (const maxResultBytes of [0, -1, 1.5, Number.NaN, Infinity, "1000"]) {
      await expect(mcpTools(server.client, { maxResultBytes: maxResultBytes as never })).rejects.toMatchObject({
        code: "MCP_CONFIG",
        option: "maxResultBytes",
      });
    }
  });

  it("passes the call's signal to callTool: a cancelled run cancels the request on the server", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client);
    const controller = new AbortController();
    const model = new ScriptedModel([{ toolCalls: [{ id: "c1", name: "slow", input: {} }] }, { text: "never" }]);
    const running = new Agent({ model, tools: toolset }).run("go", { signal: controller.signal });
    await server.waitFor("called slow {}");
    controller.abort(new Error("user left"));
    await expect(running).rejects.toBeInstanceOf(CancelledError);
    await server.waitFor("cancelled slow");
  });

  it("calls leave no abort listener behind on the signal they were given, which outlives them (a run's, a gate caller's)", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client);
    const read = toolset.tools[0]!;
    const signal = new AbortController().signal;
    const context = { signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    for (let i = 0; i < 5; i++)
      await expect(Promise.resolve(read.execute({ name: "todo" }, context))).resolves.toBe("buy milk");
    expect(getEventListeners(signal, "abort")).toHaveLength(0);
    toolset.close();
  });

  it("a call that gets no answer in time fails with McpToolError naming the server and the tool, saying whether it took effect is unknown, the MCP SDK's error as its cause", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client, { timeoutMs: 300 });
    const outcomes: GateOutcome[] = [];
    const managers = new LoopManagers().withObserver({ onToolPost: ({ outcome }) => void outcomes.push(outcome) });
    const model = new ScriptedModel([{ toolCalls: [{ id: "c1", name: "slow", input: {} }] }, { text: "done" }]);
    const result = await new Agent({ model, tools: toolset, managers }).run("go");
    await server.waitFor("cancelled slow");
    expect(outcomes).toHaveLength(1);
    const outcome = outcomes[0]!;
    expect(outcome.type).toBe("failed");
    const error = (outcome as { readonly error: unknown }).error;
    expect(error).toBeInstanceOf(McpToolError);
    expect(error).toMatchObject({ code: "MCP_TOOL", server: "fixture", tool: "slow", changed: false });
    expect((error as Error).cause).toBeInstanceOf(McpError);
    expect(results(result.messages)).toMatchObject([
      {
        status: "failed",
        // The request was sent: the fixture heard it, and heard it cancelled.
        content:
          "Tool 'slow' failed: tool 'slow' on MCP server 'fixture': the server did not answer within 300 ms " +
          "(MCP error -32001: Request timed out): the call was cancelled on the server, and whether it took " +
          "effect there is unknown",
      },
    ]);
    toolset.close();
  });

  it("timeoutMs bounds a whole listing, not each of its pages: a server that answers page after page just in time fails the listing once the limit passes", async () => {
    // Twenty pages, each answered 100 ms after it was asked for: every request well within 400 ms.
    const server = await startFixture("dripping 20 100");
    const started = performance.now();
    const error: unknown = await mcpTools(server.client, { timeoutMs: 400 }).catch((e: unknown) => e);
    const took = performance.now() - started;
    expect(error).toBeInstanceOf(McpServerError);
    expect(error).toMatchObject({ code: "MCP_SERVER", server: "dripping" });
    expect((error as Error).message).toMatch(/^MCP server 'dripping': tools\/list gave no last page within 400 ms/);
    expect(took).toBeLessThan(1_500);
    // A listing that ends in time is read whole.
    const quick = await startFixture("dripping 3 10");
    const toolset = await mcpTools(quick.client, { timeoutMs: 2_000 });
    expect(toolset.tools.map((t) => t.name)).toEqual(["t0", "t1", "t2"]);
    toolset.close();
  });

  it("a server that answers tools/call with an error of code -32001 (the code of the MCP SDK's own timeout) is reported as that server's error, not as a timeout, even one shaped as the SDK's", async () => {
    const server = await startFixture("erring");
    const toolset = await mcpTools(server.client, { timeoutMs: 300 });
    const failWith = toolset.tools[0]!;
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const answers = [
      { code: -32001, message: "the upstream registry timed out" },
      // Word for word what the MCP SDK rejects with when the 300 ms the toolset set pass, sent back well before.
      { code: -32001, message: "Request timed out", data: { timeout: 300 } },
    ];
    for (const answer of answers) {
      const error = await Promise.resolve(failWith.execute(answer, context)).catch((e: unknown) => e);
      await server.waitFor(`called fail_with ${JSON.stringify(answer)}`);
      expect(error).toBeInstanceOf(McpToolError);
      expect(error).toMatchObject({ code: "MCP_TOOL", server: "erring", tool: "fail_with", changed: false });
      expect((error as Error).cause).toBeInstanceOf(McpError);
      expect((error as Error).cause).toMatchObject({ code: -32001, data: answer.data });
      expect((error as Error).message).toBe(
        `tool 'fail_with' on MCP server 'erring': tools/call failed: MCP error -32001: ${answer.message}`,
      );
    }
    toolset.close();
  });

  it("a server's error reply is cut in the error as a record cuts a text, for a call and for a listing: a long one cannot flood the model", async () => {
    const erring = await startFixture("erring");
    const toolset = await mcpTools(erring.client);
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const error = await Promise.resolve(
      toolset.tools[0]!.execute({ code: -32000, message: "x".repeat(100_000) }, context),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(McpToolError);
    // "MCP error -32000: " is 18 units: 16,366 of the server's are kept, 83,634 cut.
    expect((error as Error).message).toBe(
      `tool 'fail_with' on MCP server 'erring': tools/call failed: MCP error -32000: ${"x".repeat(16_366)}… [83634 characters cut]`,
    );
    expect(((error as Error).cause as Error).message).toHaveLength(100_018);
    toolset.close();
    const paged = await startFixture("paged broken 100000");
    const failed = await mcpTools(paged.client).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(McpServerError);
    // The server's McpError says "MCP error -32603: …", and the client's adds as much again: 68 units before the
    // filler, of which 16,316 are kept.
    expect((failed as Error).message).toBe(
      `MCP server 'paged': tools/list failed: MCP error -32603: MCP error -32603: the tool registry is unavailable${"y".repeat(16_316)}… [83684 characters cut]`,
    );
  });

  it("a server's name from the handshake is cut to 200 UTF-16 units in its errors: a long one cannot flood the model with every failed call", async () => {
    const server = await startFixture("long-name 1000000");
    const toolset = await mcpTools(server.client);
    expect(toolset.server).toBe(`${"n".repeat(200)}…`);
    const model = new ScriptedModel([{ toolCalls: [{ id: "c1", name: "fail", input: {} }] }, { text: "done" }]);
    const result = await new Agent({ model, tools: toolset }).run("go");
    expect(results(result.messages).map((m) => [m.status, m.content])).toEqual([
      [
        "failed",
        `Tool 'fail' failed: tool 'fail' on MCP server '${"n".repeat(200)}…': the server answered with an error: no`,
      ],
    ]);
    toolset.close();
    // A name the application gives is its own, and kept as it is.
    const named = await mcpTools(server.client, { server: "x".repeat(300) });
    expect(named.server).toBe("x".repeat(300));
    named.close();
  });

  it("a listing whose cursor repeats fails with McpServerError quoting the cursor, a long one cut to 200 UTF-16 units", async () => {
    const short = await startFixture("looping 3");
    await expect(mcpTools(short.client)).rejects.toThrow(
      new McpServerError("looping", 'tools/list gave the cursor "ccc" twice'),
    );
    const long = await startFixture("looping 1000000");
    const failed = await mcpTools(long.client).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(McpServerError);
    expect((failed as Error).message).toBe(
      `MCP server 'looping': tools/list gave the cursor "${"c".repeat(200)}…" (1000000 characters) twice`,
    );
  });

  it("a call in flight when the connection drops (the server process killed) fails with McpToolError saying whether it took effect is unknown", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client, { onError: () => {} });
    const slow = toolset.tools.find((t) => t.name === "slow")!;
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const failed = Promise.resolve(slow.execute({}, context)).catch((error: unknown) => error);
    await server.waitFor("called slow {}");
    process.kill(server.pid, "SIGKILL");
    const error = await failed;
    expect(error).toBeInstanceOf(McpToolError);
    expect(error).toMatchObject({ code: "MCP_TOOL", server: "fixture", tool: "slow", changed: false });
    expect((error as Error).cause).toBeInstanceOf(McpError);
    expect((error as Error).message).toBe(
      "tool 'slow' on MCP server 'fixture': the connection to the server ended while the call was in flight " +
        "(MCP error -32000: Connection closed): whether it took effect there is unknown",
    );
    toolset.close();
  });

  it("over streamable HTTP: a change is followed; a server that dies ends no connection, so the toolset keeps its tools and only failing requests tell (a call in flight by timeoutMs at the latest, a later one at once)", async () => {
    const server = await startHttpFixture();
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange, timeoutMs: 1_000 });
    const [before] = toolset.tools;
    expect(before!.descriptor.annotations).toEqual({ readOnlyHint: false, destructiveHint: true });
    server.signal("SIGUSR2");
    const [after] = await next();
    expect(after!.descriptor.annotations).toEqual({ readOnlyHint: true, destructiveHint: false });
    expect(after!.descriptorFingerprint).not.toBe(before!.descriptorFingerprint);
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const inFlight = Promise.resolve(after!.execute({ hang: true }, context)).catch((e: unknown) => e);
    while (!server.lines.includes('called remove {"hang":true}')) await sleep(10);
    server.signal("SIGKILL");
    // The request's own connection failing tells at once; once its answer had begun to stream, only timeoutMs does.
    const error = await inFlight;
    expect(error).toBeInstanceOf(McpToolError);
    expect((error as Error).message).toMatch(
      /^tool 'remove' on MCP server 'http': (the server did not answer within 1000 ms|tools\/call failed: )/,
    );
    expect(toolset.tools).toEqual([after]);
    const later = await Promise.resolve(after!.execute({}, context)).catch((e: unknown) => e);
    expect(later).toBeInstanceOf(McpToolError);
    expect((later as Error).message).toMatch(/^tool 'remove' on MCP server 'http': tools\/call failed: /);
    toolset.close();
    await server.client.close();
  });

  it("follows list_changed without replacing the application's notification handlers, set before or after it", async () => {
    const server = await startFixture("mutable");
    const seen: string[] = [];
    server.client.setNotificationHandler(ToolListChangedNotificationSchema, () => void seen.push("before"));
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange });
    server.signal("SIGUSR2");
    const changed = await next();
    expect(changed).toBe(toolset.tools);
    expect(changed[1]!.descriptor.annotations).toEqual({ readOnlyHint: true, destructiveHint: false });
    expect(seen).toEqual(["before"]);
    // Unchanged tools keep their identity; only the changed one is new.
    server.client.setNotificationHandler(ToolListChangedNotificationSchema, () => void seen.push("after"));
    const before = toolset.tools;
    server.signal("SIGUSR2");
    const again = await next();
    expect(seen).toEqual(["before", "after"]);
    expect(again[0]).not.toBe(before[0]);
    expect(again[0]!.descriptor.description).toBe("Read a note by name (and tell the author)");
    expect(again.slice(1)).toEqual(before.slice(1));
    expect(again[1]).toBe(before[1]);
  });

  it("composes with the client's own listChanged option: its callback and the toolset both follow", async () => {
    const refreshed = deferred<string[]>();
    const server = await startFixture("mutable", {
      listChanged: {
        tools: {
          onChanged: (error, tools) =>
            error === null
              ? refreshed.resolve((tools ?? []).map((t) => JSON.stringify(t.annotations)))
              : refreshed.reject(error),
        },
      },
    });
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange });
    server.signal("SIGUSR2");
    const [ours, theirs] = await Promise.all([next(), refreshed.promise]);
    expect(ours[1]!.descriptor.annotations).toEqual({ readOnlyHint: true, destructiveHint: false });
    expect(theirs[1]).toBe(JSON.stringify({ readOnlyHint: true, destructiveHint: false }));
    expect(toolset.tools).toBe(ours);
  });

  it("the rug-pull: a tool whose annotations alone changed is asked about again, although a grant covered it", async () => {
    const server = await startFixture("mutable");
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange });
    const store = new MemoryGrantStore();
    const asks: PendingAsk[] = [];
    const resolver = new SyncAskResolver((a) => (asks.push(a), { type: "approve", remember: "this_tool" }));
    const deleteNote = (id: string, name: string) =>
      new Agent({
        model: new ScriptedModel([{ toolCalls: [{ id, name: "delete_note", input: { name } }] }, { text: "ok" }]),
        tools: toolset,
        managers: new LoopManagers().withHook(ask).withAskResolver(resolver).withGrantStore(store),
      }).run("go");
    expect((await deleteNote("c1", "a")).records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect((await deleteNote("c2", "b")).records).toMatchObject([{ verdict: "allow", ruleId: "grant" }]);
    expect(asks).toHaveLength(1);
    server.signal("SIGUSR2"); // delete_note now claims to be read-only; nothing else changed
    await next();
    expect((await deleteNote("c3", "c")).records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(asks).toHaveLength(2);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
  });

  it("the rug-pull between toolsets: what the server first listed is remembered per client, so a toolset made later on it, under another prefix, asks about a tool changed in between and says so", async () => {
    const server = await startFixture("mutable");
    const announced: (() => void)[] = [];
    server.client.setNotificationHandler(ToolListChangedNotificationSchema, () => announced.shift()?.());
    const change = async (): Promise<void> => {
      const heard = new Promise<void>((resolve) => announced.push(resolve));
      server.signal("SIGUSR2");
      await heard;
    };
    const first = await mcpTools(server.client);
    first.close();
    await change(); // delete_note now claims to be read-only
    await change(); // read_note's description changes
    const second = await mcpTools(server.client, { prefix: "s_" });
    const asks: PendingAsk[] = [];
    const managers = new LoopManagers()
      .withHook(mcpAnnotationHook({ trusted: true }))
      .withAskResolver(new SyncAskResolver((a) => (asks.push(a), false)));
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "s_delete_note", input: { name: "todo" } },
          { id: "c2", name: "s_read_note", input: { name: "todo" } },
          { id: "c3", name: "s_fail", input: {} },
        ],
      },
      { text: "ok" },
    ]);
    const result = await new Agent({ model, tools: second, managers }).run("go");
    expect(result.records.map((r) => [r.tool, r.verdict])).toEqual([
      ["s_delete_note", "ask_denied"],
      ["s_read_note", "ask_denied"],
      ["s_fail", "ask_denied"],
    ]);
    const changed = "This tool changed on the server since it was first listed.";
    expect(asks.map((a) => a.prompt.includes(changed))).toEqual([true, true, false]);
    expect(server.lines.some((l) => l.startsWith("called"))).toBe(false);
    second.close();
  });

  it("a call approved just before an announced change is not sent, and the model reads why", async () => {
    const server = await startFixture("mutable");
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange });
    const parked = deferred<PendingAsk>();
    const answer = deferred<void>();
    const resolver: AskResolver = {
      async resolve(a) {
        parked.resolve(a);
        await answer.promise;
        return { type: "approve" };
      },
    };
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "delete_note", input: { name: "todo" } }] },
      { text: "ok" },
    ]);
    const running = new Agent({
      model,
      tools: toolset,
      managers: new LoopManagers().withHook(ask).withAskResolver(resolver),
    }).run("go");
    await parked.promise;
    server.signal("SIGUSR2");
    await next();
    answer.resolve();
    const result = await running;
    expect(results(result.messages)).toMatchObject([
      {
        status: "failed",
        content: expect.stringContaining("the tool changed on the server before the call ran; the call was not sent"),
      },
    ]);
    expect(server.lines.some((l) => l.startsWith("called delete_note"))).toBe(false);
    // Its one record is the decision that let it go on; the outcome, not the record, says it was not sent.
    expect(result.records.map((r) => [r.tool, r.verdict, r.ruleId])).toEqual([["delete_note", "ask_allowed", "ask"]]);
  });

  it("a call approved after the server stopped listing its tool is not sent, and the model reads that the tool is gone, not that it changed", async () => {
    const server = await startFixture("mutable");
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange });
    const { approver, records, managers } = askingManagers();
    const rich = toolset.tools.find((t) => t.name === "rich")!;
    const running = new Gate(managers).call({ tool: rich, callId: "c1", input: {} }, (input, { signal }) =>
      rich.execute(input, { signal, callId: "c1", turn: 0, sessionId: "", runId: "" }),
    );
    const parked = (await approver.next()) as PendingAsk;
    // The first two changes leave `rich` as it was; the third removes it.
    for (let change = 0; change < 3; change++) {
      server.signal("SIGUSR2");
      await next();
    }
    expect(toolset.tools.map((t) => t.name)).not.toContain("rich");
    approver.resolve(parked.id, { type: "approve" });
    const outcome = (await running) as Extract<GateOutcome, { type: "failed" }>;
    expect(outcome.type).toBe("failed");
    expect(outcome.error).toBeInstanceOf(McpToolError);
    expect(outcome.error).toMatchObject({ code: "MCP_TOOL", server: "fixture", tool: "rich", changed: true });
    expect(outcome.message).toBe(
      "Tool 'rich' failed: tool 'rich' on MCP server 'fixture': the server no longer offers the tool; the call was not sent",
    );
    expect(server.lines.some((l) => l.startsWith("called rich"))).toBe(false);
    expect(records.map((r) => [r.tool, r.verdict])).toEqual([["rich", "ask_allowed"]]);
    toolset.close();
  });

  it("a server that announces a change after every listing: mcpTools, refresh() and calls each wait for one listing begun after they came, not for the announcements to stop", async () => {
    const server = await startFixture("restless");
    const toolset = await mcpTools(server.client);
    expect(toolset.tools.map((t) => t.name)).toEqual(["echo"]);
    await expect(toolset.refresh()).resolves.toEqual(toolset.tools);
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "echo", input: { text: "still here" } }] },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: toolset }).run("go");
    expect(results(result.messages)).toMatchObject([{ callId: "c1", status: "ran", content: "still here" }]);
    // The toolset kept following the announcements all along (each listing's line comes on stderr, after its reply).
    await expect.poll(() => server.lines.filter((l) => l === "listed").length).toBeGreaterThan(2);
    toolset.close();
  });

  it("a refresh asked for as the last listing ends (from onChange) lists again, and is not answered by the listing that just ended", async () => {
    let listings = 0;
    const client = {
      transport: {},
      getServerVersion: () => ({ name: "counting", version: "1.0.0" }),
      listTools: async () => {
        listings += 1;
        return { tools: [{ name: `t${listings}`, inputSchema: { type: "object" } }] };
      },
      callTool: async () => ({ content: [] }),
    };
    const refreshed = deferred<readonly string[]>();
    const toolset = await mcpTools(client as never, {
      onChange: () => {
        if (listings === 2) void toolset.refresh().then((tools) => refreshed.resolve(tools.map((t) => t.name)));
      },
    });
    expect((await toolset.refresh()).map((t) => t.name)).toEqual(["t2"]);
    expect(await refreshed.promise).toEqual(["t3"]);
    expect(listings).toBe(3);
    toolset.close();
  });

  it("a server that lists new names without end costs what its current tools do; a tool still listed, or delisted but held by a caller, is still marked changed when it comes back changed", async () => {
    const { listed, names, changed } = (await gcChildResult("test/support/mcp-gc-child.ts", [], 25_000)) as {
      listed: number;
      names: number;
      changed: string[];
    };
    expect(listed).toBe(2_000);
    // Of the names listed once each, the heap holds at most the ten the server lists now.
    expect(names).toBeLessThanOrEqual(10);
    expect(changed).toEqual(expect.arrayContaining(["stable", "held"]));
  });

  it("what the last listing on a client offered is remembered after its toolset closed and its tools were collected: the next toolset on the client marks what changed since, and keeps nothing of tools no longer listed", async () => {
    const { first, changed, names } = (await gcChildResult("test/support/mcp-sessions-gc-child.ts", [], 25_000)) as {
      first: number;
      changed: string[];
      names: number;
    };
    expect(first).toBe(13);
    expect(changed).toEqual(["stable", "held", "dropped"]);
    // The ten tools the first listing alone gave are forgotten once the second listing no longer offers them.
    expect(names).toBe(0);
  });

  // A page of 200,000 tools (past where spreading one page overflowed the stack) takes seconds to send
  // and parse, more on a loaded machine: this case has a time limit of its own.
  it("a listing of more tools than a toolset takes, on one page or over several, fails with McpServerError naming the server and the limit", async () => {
    const server = await startFixture("crowded 200000");
    const crowded = await mcpTools(server.client).catch((error: unknown) => error);
    expect(crowded).toBeInstanceOf(McpServerError);
    expect(crowded).toMatchObject({ code: "MCP_SERVER", server: "crowded" });
    expect((crowded as Error).message).toBe("MCP server 'crowded': tools/list gave more than 10000 tools");
    expect((crowded as Error).cause).toBeUndefined();
    let pages = 0;
    const client = {
      transport: {},
      getServerVersion: () => ({ name: "pages", version: "1.0.0" }),
      listTools: async () => {
        pages += 1;
        const tools = Array.from({ length: 4_000 }, (_, i) => ({
          name: `p${pages}_${i}`,
          inputSchema: { type: "object" },
        }));
        return { tools, nextCursor: String(pages) };
      },
      callTool: async () => ({ content: [] }),
    };
    await expect(mcpTools(client as never)).rejects.toThrow(
      new McpServerError("pages", "tools/list gave more than 10000 tools"),
    );
    // The third page is the one that goes past the limit: no more pages are asked for.
    expect(pages).toBe(3);
  }, 120_000);

  it("a refresh that fails leaves no tools (fail closed) and reports it; the next list_changed restores them", async () => {
    const server = await startFixture("paged");
    const errors: McpServerError[] = [];
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange, onError: (e) => void errors.push(e) });
    server.signal("SIGUSR1");
    expect(await next()).toEqual([]);
    await until(() => errors.length === 1);
    expect(errors[0]).toBeInstanceOf(McpServerError);
    expect(errors[0]!.message).toMatch(/^MCP server 'paged': tools\/list failed: .*the tool registry is unavailable/);
    const model = new ScriptedModel([{ toolCalls: [{ id: "c1", name: "t0", input: { n: 0 } }] }, { text: "ok" }]);
    const result = await new Agent({ model, tools: toolset }).run("go");
    expect(results(result.messages)).toMatchObject([{ status: "refused", content: "Unknown tool 't0'" }]);
    await expect(toolset.refresh()).rejects.toBeInstanceOf(McpServerError);
    server.signal("SIGUSR2");
    expect((await next()).map((t) => t.name)).toEqual(["t0", "t1", "t2", "t3", "t4"]);
    expect(server.lines.some((l) => l.startsWith("called"))).toBe(false);
  });

  it("a call from a tool given before a failed listing is refused as unlisted, not as changed; once listing works again an unchanged tool is the same tool and runs", async () => {
    const server = await startFixture("paged");
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange, onError: () => {} });
    const t0 = toolset.tools[0]!;
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    server.signal("SIGUSR1");
    expect(await next()).toEqual([]);
    const refused = await Promise.resolve(t0.execute({ n: 0 }, context)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(McpToolError);
    expect(refused).toMatchObject({ tool: "t0", changed: false });
    expect((refused as Error).message).toMatch(
      /^tool 't0' on MCP server 'paged': the server's tools could not be listed \(.*the tool registry is unavailable.*\); the call was not sent$/,
    );
    server.signal("SIGUSR2");
    expect((await next()).map((t) => t.name)).toEqual(["t0", "t1", "t2", "t3", "t4"]);
    // Nothing about t0 changed on the server: the tool given before is still current.
    expect(toolset.tools[0]).toBe(t0);
    await expect(Promise.resolve(t0.execute({ n: 0 }, context))).resolves.toBe("t0 ran");
    await server.waitFor('called t0 {"n":0}');
    expect(server.lines.filter((l) => l.startsWith("called"))).toEqual(['called t0 {"n":0}']);
  });

  it("an onChange that throws or rejects goes to onError as McpCallbackError; an onError that throws or rejects is dropped", async () => {
    const crashes: unknown[] = [];
    const crashed = (error: unknown): void => void crashes.push(error);
    process.on("uncaughtException", crashed);
    process.on("unhandledRejection", crashed);
    try {
      const server = await startFixture("mutable");
      const thrown = new Error("the tool panel is gone");
      const rejected = new Error("the tool cache is gone");
      const reported: unknown[] = [];
      const sync = changes();
      const async = changes();
      const throwing = await mcpTools(server.client, {
        onChange: (tools) => {
          sync.onChange(tools);
          throw thrown;
        },
        onError: (error) => {
          reported.push(error);
          throw new Error("the log is gone too");
        },
      });
      const rejecting = await mcpTools(server.client, {
        // eslint-disable-next-line @typescript-eslint/no-misused-promises -- the rejected promise under test
        onChange: async (tools) => {
          async.onChange(tools);
          throw rejected;
        },
        // eslint-disable-next-line @typescript-eslint/no-misused-promises -- the rejected promise under test
        onError: async (error) => {
          reported.push(error);
          throw new Error("the log is gone too");
        },
      });
      server.signal("SIGUSR2");
      await Promise.all([sync.next(), async.next()]);
      await until(() => reported.length === 2);
      await flush();
      expect(crashes).toEqual([]);
      expect(reported).toHaveLength(2);
      for (const [error, cause] of [
        [reported.find((e) => (e as Error).cause === thrown), thrown],
        [reported.find((e) => (e as Error).cause === rejected), rejected],
      ] as const) {
        expect(error).toBeInstanceOf(McpCallbackError);
        expect(error).toMatchObject({ code: "MCP_CALLBACK", server: "fixture", option: "onChange" });
        expect((error as Error).message).toBe(
          `onChange of the toolset of MCP server 'fixture' failed: ${cause.message}`,
        );
      }
      // What the callbacks did changed nothing the toolsets offer: both have the new tools.
      for (const toolset of [throwing, rejecting])
        expect(toolset.tools[1]!.descriptor.annotations).toEqual({ readOnlyHint: true, destructiveHint: false });
    } finally {
      process.off("uncaughtException", crashed);
      process.off("unhandledRejection", crashed);
    }
  });

  it("without an onError, an onChange that throws or rejects, and a failed refresh, are each a process warning (LoopctlWarning, LOOPCTL_MCP)", async () => {
    const seen: [string, string | undefined, string][] = [];
    const listener = (w: Error): void => void seen.push([w.name, (w as NodeJS.ErrnoException).code, w.message]);
    // Node prints process warnings through a listener of its own; this test only watches.
    const printers = process.listeners("warning");
    process.removeAllListeners("warning");
    process.on("warning", listener);
    try {
      const mutable = await startFixture("mutable");
      const sync = changes();
      const async = changes();
      await mcpTools(mutable.client, {
        onChange: (tools) => {
          sync.onChange(tools);
          throw new Error("the tool panel is gone");
        },
      });
      await mcpTools(mutable.client, {
        // eslint-disable-next-line @typescript-eslint/no-misused-promises -- the rejected promise under test
        onChange: async (tools) => {
          async.onChange(tools);
          throw new Error("the tool cache is gone");
        },
      });
      mutable.signal("SIGUSR2");
      await Promise.all([sync.next(), async.next()]);
      await until(() => seen.length === 2);
      const paged = await startFixture("paged");
      const { onChange, next } = changes();
      const toolset = await mcpTools(paged.client, { onChange });
      paged.signal("SIGUSR1");
      expect(await next()).toEqual([]);
      await until(() => seen.length === 3);
      await flush();
      expect(toolset.tools).toEqual([]);
    } finally {
      process.off("warning", listener);
      for (const printer of printers) process.on("warning", printer);
    }
    expect(seen.slice(0, 2).sort()).toEqual([
      [
        "LoopctlWarning",
        "LOOPCTL_MCP",
        "onChange of the toolset of MCP server 'fixture' failed: the tool cache is gone",
      ],
      [
        "LoopctlWarning",
        "LOOPCTL_MCP",
        "onChange of the toolset of MCP server 'fixture' failed: the tool panel is gone",
      ],
    ]);
    expect(seen).toHaveLength(3);
    expect(seen[2]!.slice(0, 2)).toEqual(["LoopctlWarning", "LOOPCTL_MCP"]);
    expect(seen[2]![2]).toMatch(/^MCP server 'paged': tools\/list failed: .*the tool registry is unavailable/);
  });

  it("without an onError, a server that fails listing after listing gives one process warning, its name and message escaped, not a flood of raw terminal escapes", async () => {
    const seen: Error[] = [];
    const listener = (w: Error): void => void seen.push(w);
    const printers = process.listeners("warning");
    process.removeAllListeners("warning");
    process.on("warning", listener);
    const errors: unknown[] = [];
    try {
      const server = await startFixture("garbled");
      const toolset = await mcpTools(server.client);
      const withHandler = await mcpTools(server.client, { onError: (error) => void errors.push(error) });
      expect(toolset.server).toBe("garbled\u001b[2J\u202e");
      server.signal("SIGUSR1");
      // Each failing listing announces a change: the toolsets list again and again, each time failing.
      // Real round trips to another process: polled, not flushed.
      while (server.lines.filter((line) => line === "listing failed").length < 10 || errors.length < 4) await sleep(10);
      await flush();
      expect(toolset.tools).toEqual([]);
      withHandler.close();
      toolset.close();
    } finally {
      process.off("warning", listener);
      for (const printer of printers) process.on("warning", printer);
    }
    expect(seen.map((w) => [w.name, (w as NodeJS.ErrnoException).code, w.message])).toEqual([
      [
        "LoopctlWarning",
        "LOOPCTL_MCP",
        'MCP server "garbled\\u001b[2J\\u202e": tools/list failed: MCP error -32603: MCP error -32603: down\\u001b]52;c;cHduZWQ=\\u0007 again',
      ],
    ]);
    // An onError gets every failure, as it came: the application decides what to show.
    expect(errors[0]).toBeInstanceOf(McpServerError);
    expect((errors[0] as Error).message).toBe(
      'MCP server "garbled\\u001b[2J\\u202e": tools/list failed: MCP error -32603: MCP error -32603: down\u001b]52;c;cHduZWQ=\u0007 again',
    );
  });

  it("without an onError, a refresh() that fails rejects and is not also a process warning; with one, onError still gets it", async () => {
    const seen: Error[] = [];
    const listener = (w: Error): void => void seen.push(w);
    const printers = process.listeners("warning");
    process.removeAllListeners("warning");
    process.on("warning", listener);
    try {
      const server = await startFixture("paged");
      const toolset = await mcpTools(server.client);
      const reported: unknown[] = [];
      const handled = await mcpTools(server.client, { onError: (error) => void reported.push(error) });
      await server.client.close();
      const message =
        "MCP server 'paged': the client is no longer connected over the transport the toolset follows; make a new " +
        "toolset";
      for (const failed of [toolset, handled]) {
        const refused = await failed.refresh().catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(McpServerError);
        expect((refused as Error).message).toBe(message);
      }
      // Two refreshes at once, both waiting on the one listing: each rejects, and still no warning.
      const both = await Promise.all([toolset.refresh(), toolset.refresh()].map((p) => p.catch((e: unknown) => e)));
      for (const refused of both) expect((refused as Error).message).toBe(message);
      await until(() => reported.length === 1);
      await flush();
      await flush();
      expect((reported[0] as Error).message).toBe(message);
      toolset.close();
      handled.close();
    } finally {
      process.off("warning", listener);
      for (const printer of printers) process.on("warning", printer);
    }
    expect(seen.map((w) => w.message)).toEqual([]);
  });

  it("an onError that throws on a failed refresh is dropped: the toolset still fails closed, and the process goes on", async () => {
    const crashes: unknown[] = [];
    const crashed = (error: unknown): void => void crashes.push(error);
    process.on("uncaughtException", crashed);
    try {
      const server = await startFixture("paged");
      const { onChange, next } = changes();
      let reported = 0;
      const toolset = await mcpTools(server.client, {
        onChange,
        onError: () => {
          reported += 1;
          throw new Error("the log is gone");
        },
      });
      server.signal("SIGUSR1");
      expect(await next()).toEqual([]);
      await until(() => reported === 1);
      await flush();
      expect(crashes).toEqual([]);
      expect(toolset.tools).toEqual([]);
    } finally {
      process.off("uncaughtException", crashed);
    }
  });

  it("a listing that fails with a value that cannot be described still fails closed, with McpServerError naming the server", async () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const revoked: unknown = proxy;
    const unreadable = new Error("never read");
    Object.defineProperty(unreadable, "message", {
      get() {
        throw revoked;
      },
    });
    // The client's listTools runs the application's validator on every output schema listed: what it throws is
    // what tools/list fails with.
    let failing: { readonly with: unknown } | undefined;
    const ajv = new AjvJsonSchemaValidator();
    const validator: jsonSchemaValidator = {
      getValidator(schema) {
        if (failing !== undefined) throw failing.with;
        return ajv.getValidator(schema);
      },
    };
    const server = await startFixture("mutable", { jsonSchemaValidator: validator });
    const errors: McpServerError[] = [];
    const toolset = await mcpTools(server.client, { onError: (e) => void errors.push(e) });
    expect(toolset.tools).toHaveLength(6);
    for (const value of [unreadable, revoked]) {
      failing = { with: value };
      const failure = await toolset.refresh().catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(McpServerError);
      expect(failure).toMatchObject({ code: "MCP_SERVER", server: "fixture" });
      expect((failure as Error).message).toBe("MCP server 'fixture': tools/list failed: unprintable error");
      expect((failure as Error).cause === value).toBe(true);
      expect(toolset.tools).toEqual([]);
      await until(() => errors.length > 0);
      expect(errors.splice(0)).toEqual([failure]);
      failing = undefined;
      expect(await toolset.refresh()).toHaveLength(6);
    }
    toolset.close();
    failing = { with: revoked };
    const first = await mcpTools(server.client).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(McpServerError);
    expect((first as Error).message).toBe("MCP server 'fixture': tools/list failed: unprintable error");
  });

  it("close() stops following: no tools, the client's handlers untouched, calls from the old tools refused", async () => {
    const server = await startFixture("mutable");
    const appSaw = deferred<void>();
    let changed = 0;
    const toolset = await mcpTools(server.client, { onChange: () => void changed++ });
    const old = toolset.tools[0]!;
    server.client.setNotificationHandler(ToolListChangedNotificationSchema, () => appSaw.resolve());
    toolset.close();
    toolset.close();
    expect(toolset.tools).toEqual([]);
    expect(toolset.current()).toEqual([]);
    server.signal("SIGUSR2");
    await appSaw.promise;
    // A refresh started by the notification would have listed before these round trips end.
    await server.client.listTools();
    await server.client.listTools();
    await until(() => true);
    expect(changed).toBe(0);
    await expect(
      Promise.resolve(
        old.execute(
          { name: "todo" },
          { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" },
        ),
      ),
    ).rejects.toMatchObject({
      code: "MCP_TOOL",
      tool: "read_note",
      server: "fixture",
    });
    await expect(toolset.refresh()).rejects.toBeInstanceOf(McpServerError);
  });

  it("a client connected anew over the same transport (a stdio transport starts a new server process): the toolset made before sends it no call", async () => {
    const server = await startFixture("paged");
    const toolset = await mcpTools(server.client, { onError: () => {} });
    const t0 = toolset.tools[0]!;
    const transport = server.client.transport!;
    await server.client.close();
    await server.client.connect(transport);
    await expect(server.client.callTool({ name: "t1", arguments: { n: 2 } })).resolves.toMatchObject({
      content: [{ type: "text", text: "t1 ran" }],
    });
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const refused = await Promise.resolve(t0.execute({ n: 1 }, context)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(McpToolError);
    expect((refused as Error).message).toBe(
      "tool 't0' on MCP server 'paged': the client is no longer connected over the transport the tool was listed " +
        "from; the call was not sent",
    );
    expect(toolset.current()).toEqual([]);
    await expect(toolset.refresh()).rejects.toBeInstanceOf(McpServerError);
    // A toolset made on the new connection works.
    const fresh = await mcpTools(server.client);
    await expect(Promise.resolve(fresh.tools[0]!.execute({ n: 3 }, context))).resolves.toBe("t0 ran");
    fresh.close();
    toolset.close();
  });

  it("toolsets made and closed on one client, each closed after the next is made, leave no handler of theirs on its transport", async () => {
    const server = await startFixture("mutable");
    const transport = server.client.transport!;
    const clientHandler = transport.onmessage;
    let previous = await mcpTools(server.client);
    const handler = transport.onmessage;
    for (let i = 0; i < 20; i++) {
      const next = await mcpTools(server.client);
      previous.close();
      previous = next;
      // One handler follows the transport for every toolset on it, not one more for each toolset made.
      expect(transport.onmessage).toBe(handler);
    }
    const { onChange, next } = changes();
    const last = await mcpTools(server.client, { onChange });
    previous.close();
    server.signal("SIGUSR2");
    expect((await next())[1]!.descriptor.annotations).toEqual({ readOnlyHint: true, destructiveHint: false });
    last.close();
    expect(transport.onmessage).toBe(clientHandler);
  });

  it("a client connected anew (to a restarted or another server): the toolset made before sends it no call, lists nothing from it, and offers no tools", async () => {
    const first = await startFixture("paged");
    const errors: unknown[] = [];
    const toolset = await mcpTools(first.client, { onError: (error) => void errors.push(error) });
    const t0 = toolset.tools[0]!;
    expect(t0.name).toBe("t0");
    const second = await reconnectFixture(first, "paged");
    // The same client answers for another server now, whose tools this toolset never listed.
    await expect(second.client.callTool({ name: "t1", arguments: { n: 2 } })).resolves.toMatchObject({
      content: [{ type: "text", text: "t1 ran" }],
    });
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const refused = await Promise.resolve(t0.execute({ n: 1 }, context)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(McpToolError);
    expect(refused).toMatchObject({ server: "paged", tool: "t0", changed: false });
    expect((refused as Error).message).toBe(
      "tool 't0' on MCP server 'paged': the client is no longer connected over the transport the tool was listed " +
        "from; the call was not sent",
    );
    expect(toolset.tools).toEqual([]);
    expect(toolset.current()).toEqual([]);
    const refresh = await toolset.refresh().catch((error: unknown) => error);
    expect(refresh).toBeInstanceOf(McpServerError);
    expect((refresh as Error).message).toBe(
      "MCP server 'paged': the client is no longer connected over the transport the toolset follows; make a new " +
        "toolset",
    );
    expect(toolset.tools).toEqual([]);
    // A round trip after the refusals: a tools/call sent before it would have been reported by now (stderr comes
    // on its own pipe, after the answer on stdout).
    await second.client.callTool({ name: "t1", arguments: { n: 3 } });
    await second.waitFor('called t1 {"n":3}');
    expect(second.lines.filter((line) => line.startsWith("called"))).toEqual([
      'called t1 {"n":2}',
      'called t1 {"n":3}',
    ]);
    toolset.close();
  });

  it("a toolset that lists page after page leaves no abort listener behind (no MaxListenersExceededWarning)", async () => {
    const warnings: Error[] = [];
    const listener = (warning: Error): void => void warnings.push(warning);
    process.on("warning", listener);
    try {
      // Twelve pages a listing, and twelve listings.
      const server = await startFixture("crowded 12 1");
      const toolset = await mcpTools(server.client);
      for (let i = 1; i < 12; i++) await toolset.refresh();
      expect(toolset.tools).toHaveLength(12);
      await flush();
      toolset.close();
    } finally {
      process.off("warning", listener);
    }
    expect(warnings.map((w) => w.name)).toEqual([]);
  });

  it("close() settles at once a call and a refresh waiting on a listing that does not end, with the errors they get after close, and cancels that listing", async () => {
    const server = await startFixture("stalling");
    const toolset = await mcpTools(server.client, { onError: () => {} });
    const echo = toolset.tools[0]!;
    server.signal("SIGUSR1");
    await server.waitFor("listing stalled");
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const call = Promise.resolve(echo.execute({}, context)).catch((error: unknown) => error);
    const refresh = toolset.refresh().catch((error: unknown) => error);
    await flush();
    toolset.close();
    const settled = await Promise.race([Promise.all([call, refresh]), sleep(2_000).then(() => "still waiting")]);
    expect(settled).not.toBe("still waiting");
    const [refused, closed] = settled as unknown[];
    expect(refused).toBeInstanceOf(McpToolError);
    expect(refused).toMatchObject({ server: "stalling", tool: "echo", changed: false });
    expect((refused as Error).message).toBe(
      "tool 'echo' on MCP server 'stalling': the toolset was closed; the call was not sent",
    );
    expect(closed).toBeInstanceOf(McpServerError);
    expect((closed as Error).message).toBe("MCP server 'stalling': the toolset is closed");
    // The toolset stopped following: the request it left unanswered is cancelled, not left to time out.
    await server.waitFor("cancelled listing");
    expect(server.lines.some((l) => l.startsWith("called"))).toBe(false);
  });

  it("close() settles a gated call in flight at once, as a failure whose result is unknown, and cancels it on the server; the record is the approval", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client);
    const slow = toolset.tools.find((t) => t.name === "slow")!;
    const gate = new Gate(new LoopManagers().withHook(ask).withAskResolver(new SyncAskResolver(() => true)));
    const call = gate.call({ tool: slow, callId: "c1", input: {} }, (input, { signal }) =>
      slow.execute(input, { signal, callId: "c1", turn: 0, sessionId: "", runId: "" }),
    );
    await server.waitFor("called slow {}");
    toolset.close();
    const settled = await Promise.race([call, sleep(2_000).then(() => "still waiting" as const)]);
    expect(settled).not.toBe("still waiting");
    const outcome = settled as GateOutcome;
    expect(outcome.type).toBe("failed");
    // The call was approved and started: its one record is the approval, not a refusal nor a run.
    expect(outcome.record).toMatchObject({ tool: "slow", verdict: "ask_allowed", ruleId: "ask" });
    const error = (outcome as { readonly error: unknown }).error;
    expect(error).toBeInstanceOf(McpToolError);
    expect(error).toMatchObject({ code: "MCP_TOOL", server: "fixture", tool: "slow", changed: false });
    expect((error as Error).message).toBe(
      "tool 'slow' on MCP server 'fixture': the toolset was closed while the call was in flight: it was " +
        "cancelled on the server, and whether it took effect there is unknown",
    );
    // notifications/cancelled reached the server, which stopped the work.
    await server.waitFor("cancelled slow");
  });

  it("close() settles a call in flight at once even over a client whose callTool ignores its signal", async () => {
    const sent: unknown[] = [];
    const client = {
      transport: {},
      getServerVersion: () => ({ name: "deaf", version: "1.0.0" }),
      listTools: async () => ({ tools: [{ name: "wait", inputSchema: { type: "object" } }] }),
      callTool: (params: unknown) => (sent.push(params), new Promise(() => {})),
    };
    const toolset = await mcpTools(client as never);
    const context = { signal: new AbortController().signal, callId: "x", turn: 0, sessionId: "", runId: "" };
    const call = Promise.resolve(toolset.tools[0]!.execute({}, context)).catch((error: unknown) => error);
    await until(() => sent.length === 1);
    toolset.close();
    const settled = await Promise.race([call, sleep(2_000).then(() => "still waiting")]);
    expect(settled).toBeInstanceOf(McpToolError);
    expect((settled as Error).message).toBe(
      "tool 'wait' on MCP server 'deaf': the toolset was closed while the call was in flight: it was " +
        "cancelled on the server, and whether it took effect there is unknown",
    );
  });

  it("a call whose signal aborted before it was sent is not sent, rejects with the signal's reason, and leaves no rejection unhandled", async () => {
    const crashes: unknown[] = [];
    const crashed = (error: unknown): void => void crashes.push(error);
    process.on("unhandledRejection", crashed);
    try {
      const server = await startFixture("mutable");
      const toolset = await mcpTools(server.client);
      const read = toolset.tools[0]!;
      const controller = new AbortController();
      const reason = new Error("the user left");
      controller.abort(reason);
      const context = { signal: controller.signal, callId: "x", turn: 0, sessionId: "", runId: "" };
      const refused = await Promise.resolve(read.execute({ name: "todo" }, context)).catch((error: unknown) => error);
      expect(refused).toBe(reason);
      await sleep(100);
      expect(crashes).toEqual([]);
      // A round trip after the call ended: a tools/call sent before it would have been reported by now.
      await server.client.callTool({ name: "fail", arguments: {} });
      await server.waitFor("called fail {}");
      expect(server.lines.filter((l) => l.startsWith("called"))).toEqual(["called fail {}"]);
      toolset.close();
    } finally {
      process.off("unhandledRejection", crashed);
    }
  });

  it("a call parked for approval when the toolset closes ends refused at once, its ask withdrawn: one record, nothing sent, a later answer refused", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client);
    const remove = toolset.tools.find((t) => t.name === "delete_note")!;
    const { approver, records, managers } = askingManagers();
    const call = new Gate(managers).call({ tool: remove, callId: "c1", input: { name: "todo" } }, (input, { signal }) =>
      remove.execute(input, { signal, callId: "c1", turn: 0, sessionId: "", runId: "" }),
    );
    const parked = (await approver.next()) as PendingAsk;
    toolset.close();
    const settled = await Promise.race([call, sleep(2_000).then(() => "still waiting" as const)]);
    expect(settled).not.toBe("still waiting");
    const outcome = settled as GateOutcome;
    const why = "MCP server 'fixture': the toolset was closed; the call was not sent";
    expect(outcome).toMatchObject({
      type: "refused",
      message: `Tool 'delete_note' was withdrawn while awaiting approval: ${why}`,
    });
    expect(records).toEqual([outcome.record]);
    expect(outcome.record).toMatchObject({
      tool: "delete_note",
      verdict: "deny",
      ruleId: "tool_withdrawn",
      ruleSource: "engine",
      reason: `tool withdrawn while awaiting approval: ${why}`,
    });
    // Nothing is left parked: the approver can no longer approve the call.
    expect(approver.pending).toBe(0);
    expect(approver.resolve(parked.id, { type: "approve" })).toBe(false);
    await expect(approver.ended(parked.id)).resolves.toMatchObject({ type: "withdrawn" });
    // A round trip after the call ended: a tools/call sent before it would have been reported by now.
    await server.client.callTool({ name: "read_note", arguments: { name: "todo" } });
    await server.waitFor('called read_note {"name":"todo"}');
    expect(server.lines.filter((l) => l.startsWith("called"))).toEqual(['called read_note {"name":"todo"}']);
    expect(records).toHaveLength(1);
  });

  it("a call parked for approval when the server process dies ends refused, its ask withdrawn; a call of the toolset's tools parked later is refused without asking", async () => {
    const server = await startFixture("mutable");
    const toolset = await mcpTools(server.client, { onError: () => {} });
    const remove = toolset.tools.find((t) => t.name === "delete_note")!;
    const { approver, records, managers } = askingManagers();
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "delete_note", input: { name: "todo" } }] },
      { toolCalls: [{ id: "c2", name: "delete_note", input: { name: "todo" } }] },
      { text: "done" },
    ]);
    // The run offers the tools it was given, not the toolset (which has none once its server is gone).
    const running = new Agent({ model, tools: [remove], managers }).run("go");
    const parked = (await approver.next()) as PendingAsk;
    process.kill(server.pid, "SIGKILL");
    const result = await Promise.race([running, sleep(5_000).then(() => "still waiting" as const)]);
    expect(result).not.toBe("still waiting");
    const why = "MCP server 'fixture': the connection to the server ended; the call was not sent";
    const { messages } = result as Exclude<typeof result, string>;
    expect(results(messages).map((m) => [m.callId, m.status, m.content])).toEqual([
      ["c1", "refused", `Tool 'delete_note' was withdrawn while awaiting approval: ${why}`],
      ["c2", "refused", `Tool 'delete_note' was withdrawn while awaiting approval: ${why}`],
    ]);
    expect(records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["deny", "tool_withdrawn", `tool withdrawn while awaiting approval: ${why}`],
      ["deny", "tool_withdrawn", `tool withdrawn while awaiting approval: ${why}`],
    ]);
    expect(approver.pending).toBe(0);
    expect(approver.resolve(parked.id, { type: "approve" })).toBe(false);
    expect(server.lines.some((l) => l.startsWith("called"))).toBe(false);
    toolset.close();
  });

  it("a server whose schemas take meta-schema ids affects none but its own tools: the next server's tools all work", async () => {
    const odd = await startFixture("odd-ids");
    const oddTools = await mcpTools(odd.client);
    expect(oddTools.tools.map((t) => t.name)).toEqual(["root_2020", "root_07", "plain"]);
    expect(oddTools.problems).toMatchObject([
      { tool: "nested_2020", error: { name: "ToolDefinitionError", tool: "nested_2020" } },
    ]);
    const paged = await startFixture("paged");
    const pagedTools = await mcpTools(paged.client);
    expect(pagedTools.problems).toEqual([]);
    expect(pagedTools.tools.map((t) => t.name)).toEqual(["t0", "t1", "t2", "t3", "t4"]);
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "t1", input: { n: 1 } },
          { id: "c2", name: "t2", input: { n: "two" } },
        ],
      },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: pagedTools }).run("go");
    expect(results(result.messages)).toMatchObject([
      { tool: "t1", status: "ran", content: "t1 ran" },
      { tool: "t2", status: "refused", content: "Invalid arguments for tool 't2': $.n: must be number" },
    ]);
    oddTools.close();
    pagedTools.close();
  });

  it("a name the server lists twice with different descriptors is not offered: which of them the server runs is its choice, not what was approved", async () => {
    const server = await startFixture("twins");
    const toolset = await mcpTools(server.client, { prefix: "x_" });
    // Listed twice alike, echo is one tool; notes, read-only once and destructive once, is none.
    expect(toolset.tools.map((t) => t.name)).toEqual(["x_echo", "x_plain"]);
    expect(toolset.problems).toMatchObject([
      { tool: "x_notes", error: { name: "McpServerError", server: "twins" } },
      { tool: "x_echo", error: { name: "McpServerError", server: "twins" } },
    ]);
    expect((toolset.problems[0]!.error as Error).message).toBe(
      "MCP server 'twins': lists the tool 'x_notes' 2 times with different descriptors; none is offered, " +
        "since which of them a call would run is the server's choice",
    );
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "x_notes", input: {} },
          { id: "c2", name: "x_echo", input: {} },
        ],
      },
      { text: "done" },
    ]);
    // The first listing of notes claims read-only, which a trusted hook would allow.
    const managers = new LoopManagers().withHook(mcpAnnotationHook({ trusted: true }));
    const result = await new Agent({ model, tools: toolset, managers }).run("go");
    await server.waitFor("called echo {}");
    expect(results(result.messages)).toMatchObject([
      { tool: "x_notes", status: "refused" },
      { tool: "x_echo", status: "ran", content: "echo ran" },
    ]);
    expect(server.lines.filter((line) => line.startsWith("called notes"))).toEqual([]);
    toolset.close();
  });

  it("a tool or server name holding a newline, an escape sequence or a quote is shown in JSON's escapes in every error, where a plain one reads as before", async () => {
    const server = await startFixture("hostile-names");
    const toolset = await mcpTools(server.client);
    const shown = JSON.stringify("names'\n\u001b[31mforged");
    expect(toolset.tools.map((t) => t.name)).toEqual(["it's", "plain"]);
    expect(toolset.problems.map((p) => (p.error as Error).message)).toEqual([
      `MCP server ${shown}: lists the tool "notes\\n" 2 times with different descriptors; none is offered, ` +
        "since which of them a call would run is the server's choice",
      `MCP server ${shown}: lists the tool "it's" twice; the first is kept`,
    ]);
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "it's", input: {} },
          { id: "c2", name: "plain", input: {} },
        ],
      },
      { text: "done" },
    ]);
    const result = await new Agent({ model, tools: toolset }).run("go");
    expect(results(result.messages)).toMatchObject([
      {
        tool: "it's",
        status: "failed",
        content: `Tool "it's" failed: tool "it's" on MCP server ${shown}: the server answered with an error: refused`,
      },
      { tool: "plain", status: "ran", content: "ran" },
    ]);
    for (const message of results(result.messages)) expect(message.content).not.toContain("\n");
    toolset.close();
  });

  it("names the server spells differently that are one text in Unicode's eyes (composed and decomposed) are not offered: a person shown the name cannot tell which tool a call runs", async () => {
    const server = await startFixture("lookalike");
    const toolset = await mcpTools(server.client, { prefix: "x_" });
    expect(toolset.tools.map((t) => t.name)).toEqual(["x_plain"]);
    expect(toolset.problems).toHaveLength(1);
    const [problem] = toolset.problems;
    expect(problem!.tool).toBe("x_caf\u00e9");
    expect(problem!.error).toBeInstanceOf(McpServerError);
    expect((problem!.error as Error).message).toBe(
      `MCP server 'lookalike': lists 2 tools named 'x_caf\u00e9' in spellings that differ only in Unicode ` +
        "normalisation; none is offered, since a person shown the name cannot tell which of them a call would run",
    );
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "x_caf\u00e9", input: {} },
          { id: "c2", name: "x_cafe\u0301", input: {} },
          { id: "c3", name: "x_plain", input: {} },
        ],
      },
      { text: "done" },
    ]);
    // The composed one claims read-only, which a trusted hook would allow.
    const managers = new LoopManagers().withHook(mcpAnnotationHook({ trusted: true }));
    const result = await new Agent({ model, tools: toolset, managers }).run("go");
    await server.waitFor('called "plain" {}');
    expect(results(result.messages)).toMatchObject([
      { callId: "c1", status: "refused" },
      { callId: "c2", status: "refused" },
      { callId: "c3", status: "ran", content: "plain ran" },
    ]);
    expect(server.lines.filter((line) => line.startsWith('called "caf'))).toEqual([]);
    toolset.close();
  });

  it("a prefix no tool name can start with (whitespace, a control character, too long) is an McpConfigError, not a toolset with no tools", async () => {
    const server = await startFixture("mutable");
    for (const prefix of ["fs ", "fs\n", "\u0000", "p".repeat(128)]) {
      await expect(mcpTools(server.client, { prefix })).rejects.toMatchObject({ code: "MCP_CONFIG", option: "prefix" });
    }
    // The longest prefix that leaves room for a name still works.
    const toolset = await mcpTools(server.client, { prefix: "p".repeat(120) });
    // Only names the prefix makes longer than 128 characters are problems, each named.
    expect(toolset.problems.map((p) => [...p.tool].length > 128)).not.toContain(false);
    expect(toolset.tools.map((t) => t.name)).toContain(`${"p".repeat(120)}stats`);
    toolset.close();
  });

  it("a signal aborted during the first listing rejects mcpTools at once with its reason, cancels the listing on the server, and leaves nothing on the transport", async () => {
    const server = await startFixture("stalling stalled");
    const transport = server.client.transport!;
    const before = { onmessage: transport.onmessage, onclose: transport.onclose };
    const shutdown = new AbortController();
    const reason = new Error("shutting down");
    const made = mcpTools(server.client, { signal: shutdown.signal, timeoutMs: 30_000 }).catch(
      (error: unknown) => error,
    );
    await server.waitFor("listing stalled");
    const started = performance.now();
    shutdown.abort(reason);
    const settled = await Promise.race([made, sleep(5_000).then(() => "still waiting")]);
    expect(settled).toBe(reason);
    expect(performance.now() - started).toBeLessThan(2_000);
    // The listing is cancelled on the server, not left to time out; no toolset follows the server.
    await server.waitFor("cancelled listing");
    expect(transport.onmessage).toBe(before.onmessage);
    expect(transport.onclose).toBe(before.onclose);
    expect(getEventListeners(shutdown.signal, "abort")).toHaveLength(0);
  });

  it("a signal already aborted makes mcpTools reject with its reason without listing; one never aborted leaves no listener on it", async () => {
    const server = await startFixture("stalling");
    const transport = server.client.transport!;
    const before = transport.onmessage;
    const reason = new Error("gone");
    await expect(mcpTools(server.client, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(transport.onmessage).toBe(before);
    const live = new AbortController();
    const toolset = await mcpTools(server.client, { signal: live.signal });
    expect(toolset.tools.map((t) => t.name)).toEqual(["echo"]);
    expect(getEventListeners(live.signal, "abort")).toHaveLength(0);
    // The signal was for the making of the toolset: aborting it later leaves the toolset as it is.
    live.abort();
    expect(toolset.tools.map((t) => t.name)).toEqual(["echo"]);
    toolset.close();
    expect(server.lines.filter((l) => l === "listing stalled")).toEqual([]);
  });

  it("refresh({ signal }): an abort stops the wait at once with its reason; the toolset goes on following, and the listing ends for it", async () => {
    const server = await startFixture("stalling");
    const errors: unknown[] = [];
    const toolset = await mcpTools(server.client, { onError: (error) => void errors.push(error), timeoutMs: 30_000 });
    await expect(toolset.refresh({ signal: AbortSignal.abort(new Error("early")) })).rejects.toThrow("early");
    server.signal("SIGUSR1");
    await server.waitFor("listing stalled");
    const stop = new AbortController();
    const refresh = toolset.refresh({ signal: stop.signal }).catch((error: unknown) => error);
    await flush();
    const reason = new Error("the request went away");
    stop.abort(reason);
    const settled = await Promise.race([refresh, sleep(2_000).then(() => "still waiting")]);
    expect(settled).toBe(reason);
    expect(getEventListeners(stop.signal, "abort")).toHaveLength(0);
    // Only the wait was stopped: the listing, the toolset's, goes on until close() cancels it.
    expect(server.lines).not.toContain("cancelled listing");
    toolset.close();
    await server.waitFor("cancelled listing");
    expect(errors).toEqual([]);
  });

  it("a signal that is not an AbortSignal, or refresh options of the wrong kind, is an McpConfigError naming it", async () => {
    const server = await startFixture("stalling");
    await expect(mcpTools(server.client, { signal: {} as never })).rejects.toMatchObject({
      code: "MCP_CONFIG",
      option: "signal",
    });
    const toolset = await mcpTools(server.client);
    await expect(toolset.refresh(null as never)).rejects.toMatchObject({ code: "MCP_CONFIG", option: "options" });
    await expect(toolset.refresh({ signal: "stop" as never })).rejects.toMatchObject({
      code: "MCP_CONFIG",
      option: "signal",
    });
    toolset.close();
  });

  it("an unknown option (a misspelt prefix, timeoutMs or signal) is an McpConfigError naming it, never ignored", async () => {
    const server = await startFixture("paged");
    const before = server.client.transport!.onmessage;
    // Ignored, a misspelt prefix would offer the server's tools under names the grants of other tools cover.
    for (const [options, option, message] of [
      [{ prefixes: "fs_" }, "prefixes", "unknown option 'prefixes' (did you mean prefix?)"],
      [{ Prefix: "fs_" }, "Prefix", "unknown option 'Prefix' (did you mean prefix?)"],
      [{ timeout: 5 }, "timeout", "unknown option 'timeout' (did you mean timeoutMs?)"],
      [
        { abortSignal: new AbortController().signal },
        "abortSignal",
        "unknown option 'abortSignal' (the options are prefix, server, onChange, onError, result, maxResultBytes, " +
          "timeoutMs and signal)",
      ],
    ] as const) {
      const error: unknown = await mcpTools(server.client, options as never).catch((e: unknown) => e);
      expect(error, option).toBeInstanceOf(McpConfigError);
      expect(error).toMatchObject({ code: "MCP_CONFIG", option, message: `${option}: ${message}` });
    }
    // Nothing was listed, and nothing is left following the client.
    expect(server.client.transport!.onmessage).toBe(before);
    const toolset = await mcpTools(server.client);
    const error: unknown = await toolset
      .refresh({ signals: new AbortController().signal } as never)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(McpConfigError);
    expect(error).toMatchObject({
      option: "signals",
      message: "signals: unknown option 'signals' (did you mean signal?)",
    });
    // A signal handed over in place of the options has no option of its own to refuse: it is refused as it is.
    const stop = new AbortController();
    stop.abort(new Error("stopped"));
    for (const [made, shape] of [
      [mcpTools(server.client, stop.signal as never), "an object"],
      [toolset.refresh(stop.signal as never), "an object or undefined"],
    ] as const) {
      const wrong: unknown = await made.catch((e: unknown) => e);
      expect(wrong).toBeInstanceOf(McpConfigError);
      expect(wrong).toMatchObject({
        option: "options",
        message: `options: must be ${shape}, got an AbortSignal (give it as { signal })`,
      });
    }
    toolset.close();
  });

  it("options that are not an object (a string, named never shown; an array; a proxy whose keys cannot be listed) are an McpConfigError naming options, and nothing is listed", async () => {
    const server = await startFixture("paged");
    const before = server.client.transport!.onmessage;
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const cases = [
      ["postgres://admin:hunter2@db", "must be an object, got a string"],
      [[], "must be an object, got an array"],
      [[{ prefix: "fs_" }], "must be an object, got an array"],
      [proxy, "cannot be read: Cannot perform 'IsArray' on a proxy that has been revoked"],
    ] as const;
    for (const [options, message] of cases) {
      const error: unknown = await mcpTools(server.client, options as never).catch((e: unknown) => e);
      expect(error, message).toBeInstanceOf(McpConfigError);
      expect(error, message).toMatchObject({ code: "MCP_CONFIG", option: "options", message: `options: ${message}` });
    }
    expect(server.client.transport!.onmessage).toBe(before);
    const toolset = await mcpTools(server.client);
    for (const [options, message] of cases) {
      const error: unknown = await toolset.refresh(options as never).catch((e: unknown) => e);
      expect(error, message).toBeInstanceOf(McpConfigError);
      expect(error, message).toMatchObject({
        option: "options",
        message: `options: ${message.replace("an object", "an object or undefined")}`,
      });
    }
    toolset.close();
  });

  it("an object that is not an MCP SDK Client (no getServerVersion) is an McpConfigError naming the client, not a TypeError", async () => {
    const server = await startFixture("stalling");
    const { listTools, callTool } = server.client;
    const partial = {
      listTools: listTools.bind(server.client),
      callTool: callTool.bind(server.client),
      transport: server.client.transport,
    };
    await expect(mcpTools(partial as never)).rejects.toMatchObject({ code: "MCP_CONFIG", option: "client" });
  });

  it("typed errors: a client not connected, options of the wrong kind, a first listing that fails", async () => {
    const server = await startFixture("paged broken");
    await expect(
      mcpTools({
        listTools: () => undefined,
        callTool: () => undefined,
        getServerVersion: () => undefined,
        transport: undefined,
      } as never),
    ).rejects.toBeInstanceOf(McpConfigError);
    await expect(mcpTools({} as never)).rejects.toMatchObject({ code: "MCP_CONFIG", option: "client" });
    await expect(mcpTools(server.client, { prefix: 1 as never })).rejects.toMatchObject({
      code: "MCP_CONFIG",
      option: "prefix",
    });
    await expect(mcpTools(server.client, { timeoutMs: -1 })).rejects.toMatchObject({ option: "timeoutMs" });
    // More than a timer can wait (2^31 - 1 ms): it would fire at once, and every request would time out.
    await expect(mcpTools(server.client, { timeoutMs: 2 ** 31 })).rejects.toMatchObject({
      code: "MCP_CONFIG",
      option: "timeoutMs",
    });
    const before = server.client.transport!.onmessage;
    await expect(mcpTools(server.client, { server: "registry" })).rejects.toMatchObject({
      code: "MCP_SERVER",
      server: "registry",
    });
    // A toolset that never started leaves nothing behind on the transport.
    expect(server.client.transport!.onmessage).toBe(before);
  });
});

const ownServer = fileURLToPath(new URL("./fixtures/mcp/server.mjs", import.meta.url));

/** The server of test/fixtures/mcp/server.mjs in `mode`, and a client connected to it; closed, its process checked gone, after the test. */
async function startOwnServer(mode: readonly string[], clientOptions?: ClientOptions): Promise<Started> {
  const client = new Client({ name: "loopctl-tests", version: "1.0.0" }, clientOptions);
  const transport = new StdioClientTransport({ command: process.execPath, args: [ownServer, ...mode], stderr: "pipe" });
  const lines: string[] = [];
  let partial = "";
  transport.stderr?.on("data", (chunk: Buffer) => {
    const parts = (partial + chunk.toString("utf8")).split("\n");
    partial = parts.pop() ?? "";
    lines.push(...parts);
  });
  await client.connect(transport);
  const pid = transport.pid!;
  onTestFinished(async () => {
    await client.close();
    expect(isAlive(pid), `server process ${pid} still alive`).toBe(false);
  });
  return {
    client,
    pid,
    lines,
    waitFor: (line) => until(() => lines.includes(line)),
    signal: (name) => process.kill(pid, name),
  };
}

describe("mcpTools: tools that cannot be called", () => {
  it("a tool that requires task-based execution is a problem, not a tool whose calls are asked about and then fail", async () => {
    const server = await startOwnServer(["tasks"]);
    const toolset = await mcpTools(server.client);
    expect(toolset.tools.map((t) => t.name)).toEqual(["plain", "maybe"]);
    expect(toolset.problems).toHaveLength(1);
    const [problem] = toolset.problems;
    expect(problem!.tool).toBe("queued");
    expect(problem!.error).toBeInstanceOf(ToolDefinitionError);
    expect((problem!.error as Error).message).toBe(
      "tool 'queued': requires task-based execution (execution.taskSupport \"required\"), which mcpTools cannot " +
        "call; it is not offered",
    );
    // Nobody is asked about a call that cannot run: the model's call of it is refused as of a tool the agent lacks.
    const { approver, records, managers } = askingManagers();
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "queued", input: {} }] },
      { toolCalls: [{ id: "c2", name: "maybe", input: {} }] },
      { text: "done" },
    ]);
    const answered = (async () => {
      for await (const ask of approver) approver.resolve(ask.id, { type: "approve" });
    })();
    const result = await new Agent({ model, tools: toolset, managers }).run("go");
    approver.close();
    await answered;
    expect(results(result.messages).map((m) => [m.callId, m.status])).toEqual([
      ["c1", "refused"],
      ["c2", "ran"],
    ]);
    expect(records.map((r) => [r.tool, r.verdict])).toEqual([
      ["queued", "deny"],
      ["maybe", "ask_allowed"],
    ]);
    toolset.close();
  });
});

describe("mcpTools: the result option", () => {
  it("a result option that throws, or whose promise rejects, fails the call with McpToolError naming the option and saying the call ran on the server", async () => {
    const server = await startFixture("mutable");
    const gate = new Gate(new LoopManagers());
    for (const [how, result] of [
      [
        "throws",
        () => {
          throw new TypeError("no block of that kind");
        },
      ],
      ["rejects", () => Promise.reject(new TypeError("no block of that kind"))],
    ] as const) {
      const toolset = await mcpTools(server.client, { result });
      const tool = toolset.tools.find((t) => t.name === "read_note")!;
      const outcome = await gate.call({ tool, callId: how, input: { name: "todo" } }, (args, { signal }) =>
        tool.execute(args, { signal, callId: how, turn: 0, sessionId: "", runId: "" }),
      );
      expect(outcome.type, how).toBe("failed");
      const { error, message } = outcome as Extract<GateOutcome, { type: "failed" }>;
      expect(error, how).toBeInstanceOf(McpToolError);
      expect(error, how).toMatchObject({ code: "MCP_TOOL", server: "fixture", tool: "read_note", changed: false });
      expect((error as Error).cause, how).toBeInstanceOf(TypeError);
      expect(message, how).toBe(
        "Tool 'read_note' failed: tool 'read_note' on MCP server 'fixture': the result option failed: " +
          "no block of that kind: the call ran on the server, and its result is not passed on",
      );
      toolset.close();
    }
    // The calls reached the server: what failed was the application's own function.
    await server.waitFor('called read_note {"name":"todo"}');
  });
});
