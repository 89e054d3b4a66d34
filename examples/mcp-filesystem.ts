// An MCP server's tools under loopctl: @modelcontextprotocol/server-filesystem
// on a scratch folder, its tools offered to an Agent by mcpTools, and
// mcpAnnotationHook deciding from the server's annotations (trusted: it is a
// server we run): reads go through, a write asks a person first. The client
// checks results against the server's output schemas with mcpSchemaValidator.
// The model is scripted (no network); the server is a local child process.
// Run: npx tsx examples/mcp-filesystem.ts
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ApprovalChannel } from "loopctl/ask";
import { Agent, LoopManagers } from "loopctl/engine";
import { mcpAnnotationHook, mcpSchemaValidator, mcpTools } from "loopctl/mcp";
import { ScriptedModel } from "loopctl/testing";

const dir = await mkdtemp(join(tmpdir(), "loopctl-mcp-"));
await writeFile(join(dir, "notes.md"), "# Notes\n- ship 1.4\n");

// The server from node_modules; elsewhere: { command: "npx", args: ["-y", "@modelcontextprotocol/server-filesystem", dir] }.
const server = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
const client = new Client({ name: "loopctl-example", version: "1.0.0" }, { jsonSchemaValidator: mcpSchemaValidator() });
await client.connect(new StdioClientTransport({ command: process.execPath, args: [server, dir], stderr: "ignore" }));

const toolset = await mcpTools(client, { prefix: "fs_" });
console.log(`tools: ${toolset.tools.length} from ${toolset.server}`);

const [channel, approver] = ApprovalChannel.pair(4);
const managers = new LoopManagers().withHook(mcpAnnotationHook({ trusted: true })).withAskResolver(channel).withAskTimeout(60_000);
const model = new ScriptedModel([
  { toolCalls: [{ id: "c1", name: "fs_read_text_file", input: { path: join(dir, "notes.md") } }] },
  { toolCalls: [{ id: "c2", name: "fs_write_file", input: { path: join(dir, "notes.md"), content: "# Notes\n- shipped 1.4\n" } }] },
  { text: "notes updated" },
]);
const run = new Agent({ model, tools: toolset, managers }).run("mark 1.4 as shipped");

// A UI would show the prompt; it names the tool and shows the arguments.
for await (const ask of approver) {
  console.log(`asked:\n${ask.prompt}`);
  approver.resolve(ask.id, { type: "approve" });
  break;
}
const result = await run;
for (const record of result.records) console.log(`record: ${record.tool} ${record.verdict}`);
console.log(`file: ${JSON.stringify(await readFile(join(dir, "notes.md"), "utf8"))}`);

toolset.close();
await client.close(); // ends the server process
await rm(dir, { recursive: true, force: true });
