// Run as: node --expose-gc --import tsx test/support/mcp-sessions-gc-child.ts
// Makes a toolset on a client of the `churning 1` fixture server (whose first listing gives
// `stable`, `held`, `dropped` and ten tools never listed again, and whose later listings give the
// first three, each with a new description), closes it, lets go of it and forces collection; then
// makes a second toolset on the same client, forces collection again, and prints as one JSON line
// which of the second toolset's tools are marked as changed, and how many names of the first
// listing's other tools the heap still holds.
import { setImmediate as nextTurn } from "node:timers/promises";
import { getHeapSnapshot } from "node:v8";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { changedSinceListed } from "../../src/mcp/changed.js";
import { mcpTools } from "../../src/mcp/index.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const fixture = new URL("./mcp-fixture-server.ts", import.meta.url).pathname;
const transport = new StdioClientTransport({
  command: process.execPath,
  args: ["--import", "tsx", fixture, "churning", "1"],
});
const client = new Client({ name: "loopctl-tests", version: "1.0.0" });
await client.connect(transport);

/** Collects on a few fresh turns: finalizers run on a later turn after a collection. */
async function collect(): Promise<void> {
  for (let attempt = 0; attempt < 5; attempt++) {
    gc!();
    await nextTurn();
  }
}

/** The distinct strings of the heap that are names of the tools the first listing alone gave. */
async function freshNames(): Promise<number> {
  let json = "";
  for await (const chunk of getHeapSnapshot()) json += String(chunk);
  const { strings } = JSON.parse(json) as { strings: string[] };
  return strings.filter((text) => /^fresh\d+_\d+$/.test(text)).length;
}

// In a function of its own: nothing of the first toolset is left on this stack once it returns.
async function firstRun(): Promise<number> {
  const toolset = await mcpTools(client);
  const count = toolset.tools.length;
  toolset.close();
  return count;
}
const first = await firstRun();
await collect();
const second = await mcpTools(client);
const changed = second.tools.filter((tool) => changedSinceListed(tool.descriptor)).map((tool) => tool.name);
await collect();
const names = await freshNames();
process.stdout.write(`${JSON.stringify({ first, changed, names })}\n`);
second.close();
await client.close();
