import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { JsonSchemaValidatorResult, jsonSchemaValidator } from "@modelcontextprotocol/sdk/validation";
import { describe, expectTypeOf, it } from "vitest";
import { Agent, LoopManagers } from "loopctl/engine";
import type { Hook, Model, Tool, ToolSource } from "loopctl/engine";
import { mcpAnnotationHook, mcpSchemaValidator, mcpTools } from "loopctl/mcp";
import type { McpCallbackError, McpClient, McpServerError, McpToolset } from "loopctl/mcp";

const client = new Client({ name: "types", version: "1.0.0" });

describe("mcpTools", () => {
  it("takes the MCP SDK's Client and resolves a live ToolSource", () => {
    expectTypeOf(client).toExtend<McpClient>();
    expectTypeOf(mcpTools(client, { prefix: "fs_" })).toEqualTypeOf<Promise<McpToolset>>();
    expectTypeOf<McpToolset>().toExtend<ToolSource>();
    expectTypeOf<McpToolset["refresh"]>().returns.toEqualTypeOf<Promise<readonly Tool[]>>();
  });

  it("takes a signal for the making of the toolset, and one for the wait of a refresh", async () => {
    const toolset = await mcpTools(client, { signal: AbortSignal.timeout(5_000) });
    expectTypeOf(toolset.refresh({ signal: AbortSignal.timeout(5_000) })).toEqualTypeOf<Promise<readonly Tool[]>>();
    // @ts-expect-error a signal, not a time limit (that is timeoutMs)
    void mcpTools(client, { signal: 5_000 });
  });

  it("is what an Agent reads its tools from each turn", async () => {
    const model = {} as Model;
    void new Agent({ model, tools: await mcpTools(client) });
  });

  it("hands onError a failed listing or a failed onChange", () => {
    void mcpTools(client, {
      onError: (error) => expectTypeOf(error).toEqualTypeOf<McpServerError | McpCallbackError>(),
    });
  });

  it("needs a client, not a transport or a server name", () => {
    // @ts-expect-error connect a Client first and pass it
    void mcpTools("npx @modelcontextprotocol/server-filesystem");
  });
});

describe("mcpAnnotationHook", () => {
  it("is a Hook the managers take", () => {
    const hook = mcpAnnotationHook({ trusted: true, maxArgsChars: 500 });
    expectTypeOf(hook).toEqualTypeOf<Hook>();
    void new LoopManagers().withHook(hook);
    void mcpAnnotationHook({ redact: false });
    // @ts-expect-error trust is a yes or no about the whole server
    void mcpAnnotationHook({ trusted: "readOnly" });
  });
});

describe("mcpSchemaValidator", () => {
  it("is the MCP SDK's jsonSchemaValidator, which a Client takes", () => {
    expectTypeOf(mcpSchemaValidator()).toEqualTypeOf<jsonSchemaValidator>();
    void new Client({ name: "types", version: "1.0.0" }, { jsonSchemaValidator: mcpSchemaValidator() });
    const validate = mcpSchemaValidator().getValidator<{ count: number }>({ type: "object" });
    expectTypeOf(validate({ count: 1 })).toEqualTypeOf<JsonSchemaValidatorResult<{ count: number }>>();
    // @ts-expect-error it takes no options: the dialect and formats are loopctl's engine's
    void mcpSchemaValidator({ strict: false });
  });
});
