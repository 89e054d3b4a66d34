// Run as: node --expose-gc --import tsx test/support/openai-runs-gc-child.ts
// Runs one call each of many runs (each its own RunContext) through one
// AgentApprovals with loop detection, drops the runs, forces collection, and
// prints as one JSON line how many loop-detection counters its gate still holds.
import { setImmediate as nextTurn } from "node:timers/promises";
import { getHeapSnapshot } from "node:v8";
import { RunContext, tool } from "@openai/agents";
import { z } from "zod";
import { SyncAskResolver } from "../../src/ask/index.js";
import { LoopManagers } from "../../src/engine/index.js";
import { AgentApprovals } from "../../src/openai-agents/index.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const RUNS = 300;
const approvals = new AgentApprovals({
  resolver: new SyncAskResolver(() => true),
  managers: new LoopManagers().withLoopDetection({ maxRepeats: 3 }),
});
const [status] = approvals.tools([
  tool({ name: "status", description: "status", parameters: z.object({}), execute: () => "ok" }),
] as const);

/** The runs, in a function of their own, so that nothing of its frame holds a run's context once it returns. */
async function finishedRuns(): Promise<void> {
  for (let i = 0; i < RUNS; i++) {
    const output = await status.invoke(new RunContext({}), "{}", { toolCall: { callId: "c1" } } as never);
    if (output !== "ok") throw new Error(`run ${i} gave ${String(output)}`);
  }
}
await finishedRuns();

/** The objects of the heap that are loop-detection counters, read from a heap snapshot. */
async function detectors(): Promise<number> {
  let json = "";
  for await (const chunk of getHeapSnapshot()) json += String(chunk);
  const { snapshot, nodes, strings } = JSON.parse(json) as {
    snapshot: { meta: { node_fields: string[] } };
    nodes: number[];
    strings: string[];
  };
  const fields = snapshot.meta.node_fields;
  const width = fields.length;
  const name = fields.indexOf("name");
  const type = fields.indexOf("type");
  let count = 0;
  // Type 3 is an object; its name is its constructor's.
  for (let at = 0; at < nodes.length; at += width)
    if (nodes[at + type] === 3 && strings[nodes[at + name]!] === "LoopDetector") count++;
  return count;
}

for (let attempt = 0; attempt < 10; attempt++) {
  gc();
  await nextTurn();
}
process.stdout.write(`${JSON.stringify({ runs: RUNS, detectors: await detectors() })}\n`);
