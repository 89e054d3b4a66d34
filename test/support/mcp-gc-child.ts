// Run as: node --expose-gc --import tsx test/support/mcp-gc-child.ts
// Follows the `churning` fixture server, which lists ten tools never listed
// before at each listing, through 200 listings while holding one tool it
// delisted; forces collection; and prints as one JSON line how many of the
// names listed along the way the heap still holds, and which tools the
// final listing, where three known tools change, marks as changed.
import { setImmediate as nextTurn } from "node:timers/promises";
import { getHeapSnapshot } from "node:v8";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { changedSinceListed } from "../../src/mcp/changed.js";
import { mcpTools } from "../../src/mcp/index.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const LISTINGS = 200;
const fixture = new URL("./mcp-fixture-server.ts", import.meta.url).pathname;
const transport = new StdioClientTransport({
  command: process.execPath,
  args: ["--import", "tsx", fixture, "churning", String(LISTINGS)],
});
const client = new Client({ name: "loopctl-tests", version: "1.0.0" });
await client.connect(transport);

const toolset = await mcpTools(client);
// A caller still holds `held` (a turn under way, say) after the server stops listing it; no one holds `dropped`.
const held = toolset.tools.find((tool) => tool.name === "held");
if (held === undefined) throw new Error("the first listing has no 'held'");
for (let listing = 1; listing < LISTINGS; listing++) await toolset.refresh();

/** The distinct strings of the heap that are names of the tools listed once each, read from a heap snapshot. */
async function freshNames(): Promise<number> {
  let json = "";
  for await (const chunk of getHeapSnapshot()) json += String(chunk);
  const { strings } = JSON.parse(json) as { strings: string[] };
  return strings.filter((text) => /^fresh\d+_\d+$/.test(text)).length;
}

// Finalizers run on a later turn after a collection: collect on a few fresh turns before reading.
for (let attempt = 0; attempt < 5; attempt++) {
  gc();
  await nextTurn();
}
const names = await freshNames();

const final = await toolset.refresh();
const changed = final.filter((tool) => changedSinceListed(tool.descriptor)).map((tool) => tool.name);
process.stdout.write(`${JSON.stringify({ listed: LISTINGS * 10, names, changed, held: held.name })}\n`);
toolset.close();
await client.close();
