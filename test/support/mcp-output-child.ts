// Run as: node --import tsx test/support/mcp-output-child.ts
// Connects an MCP SDK client made with mcpSchemaValidator() to the
// `hostile-output` fixture server, calls its `lookup` tool through a gate
// with `give: "hostile"` (a result whose structured content a backtracking
// engine takes hours to check against the tool's output schema), and prints
// the outcome's type, its error's name and message, and the time taken as one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Gate, LoopManagers } from "../../src/engine/index.js";
import { mcpSchemaValidator, mcpTools } from "../../src/mcp/index.js";

const fixture = new URL("./mcp-fixture-server.ts", import.meta.url).pathname;
const client = new Client({ name: "loopctl-tests", version: "1.0.0" }, { jsonSchemaValidator: mcpSchemaValidator() });
await client.connect(
  new StdioClientTransport({ command: process.execPath, args: ["--import", "tsx", fixture, "hostile-output"] }),
);
const toolset = await mcpTools(client);
const lookup = toolset.tools.find((tool) => tool.name === "lookup");
if (lookup === undefined) throw new Error("the server lists no 'lookup'");

const started = performance.now();
const outcome = await new Gate(new LoopManagers()).call(
  { tool: lookup, callId: "c1", input: { give: "hostile" } },
  (args, { signal }) => lookup.execute(args, { signal, callId: "c1", turn: 0, sessionId: "", runId: "" }),
);
const ms = Math.round(performance.now() - started);
const error = outcome.type === "failed" ? outcome.error : undefined;
const failure = error instanceof Error ? { name: error.name, message: error.message } : undefined;
process.stdout.write(`${JSON.stringify({ type: outcome.type, error: failure, ms })}\n`);
toolset.close();
await client.close();
