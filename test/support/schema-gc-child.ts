// Run as: node --expose-gc --import tsx test/support/schema-gc-child.ts
// Gates one call each for many distinct descriptors (as a loop that builds a
// fresh descriptor per call, or an MCP server whose tools keep changing, hands
// over), drops them, forces collection, and prints as one JSON line how many of
// the input schemas the gate compiled are still reachable.
import { setImmediate as nextTurn } from "node:timers/promises";
import { Gate, LoopManagers } from "../../src/engine/index.js";
import { gatedTool } from "../../src/engine/gate.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const TOOLS = 1_000;
const gate = new Gate(new LoopManagers());

/** The calls, in a function of their own, so that nothing of its frame holds a descriptor once it returns. */
async function finishedCalls(): Promise<WeakRef<object>[]> {
  const schemas: WeakRef<object>[] = [];
  for (let i = 0; i < TOOLS; i++) {
    const tool = {
      name: "t",
      description: "a tool",
      inputSchema: { type: "object", properties: { a: { type: "string", maxLength: i + 1 } }, required: ["a"] },
    };
    schemas.push(new WeakRef(gatedTool(tool).descriptor.inputSchema as object));
    const outcome = await gate.call({ tool, callId: `c${i}`, input: { a: "x" } }, () => "ok");
    if (outcome.type !== "ran") throw new Error(`call ${i} ended ${outcome.type}`);
  }
  return schemas;
}
const schemas = await finishedCalls();

const alive = (): number => schemas.filter((ref) => ref.deref() !== undefined).length;
let reachable = TOOLS;
for (let attempt = 0; attempt < 20 && reachable > 0; attempt++) {
  await nextTurn();
  gc();
  reachable = alive();
}
process.stdout.write(`${JSON.stringify({ tools: TOOLS, reachable })}\n`);
