// Run as: node --expose-gc --import tsx test/support/breaker-gc-child.ts
// Gates one failing call each for many tools never seen again (as a server
// whose tools keep changing hands over) through one gate with a circuit
// breaker, drops them, forces collection, and prints as one JSON line how
// many of those tools' names the heap still holds.
import { setImmediate as nextTurn } from "node:timers/promises";
import { getHeapSnapshot } from "node:v8";
import { Gate, LoopManagers } from "../../src/engine/index.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const TOOLS = 5_000;
const gate = new Gate(new LoopManagers().withCircuitBreaker({ failureThreshold: 3, cooldownMs: 60_000 }));

/** The calls, in a function of their own, so that nothing of its frame holds a descriptor once it returns. */
async function failedCalls(): Promise<void> {
  for (let i = 0; i < TOOLS; i++) {
    const tool = { name: `gone${i}`, description: "a tool", inputSchema: { type: "object" } };
    const outcome = await gate.call({ tool, callId: `c${i}`, input: {} }, () => {
      throw new Error("down");
    });
    if (outcome.type !== "failed") throw new Error(`call ${i} ended ${outcome.type}`);
  }
}
await failedCalls();

/** The distinct strings of the heap that are names of the tools called once each, read from a heap snapshot. */
async function goneNames(): Promise<number> {
  let json = "";
  for await (const chunk of getHeapSnapshot()) json += String(chunk);
  const { strings } = JSON.parse(json) as { strings: string[] };
  return strings.filter((text) => /^gone\d+$/.test(text)).length;
}

for (let attempt = 0; attempt < 5; attempt++) {
  gc();
  await nextTurn();
}
process.stdout.write(`${JSON.stringify({ tools: TOOLS, names: await goneNames() })}\n`);
