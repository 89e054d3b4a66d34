import { z } from "zod";
import type { BenchModule, Row, Target } from "./lib/harness.js";
import {
  failedRow,
  measuredRow,
  ns,
  paired,
  perRound,
  roundRange,
  timeTogether,
  unavailableRows,
} from "./lib/harness.js";
import { loadModules } from "./lib/load.js";
import { minimalModel } from "./lib/minimal-model.js";

const OVERHEAD: Target = { label: "overhead per call", op: "<=", limit: 5, unit: "µs" };
/** Tool calls in the long run; the per-call figure is the difference to a one-call run, divided by K - 1. */
const K = 64;

const NAMES = [
  { name: "gate per allowed tool call inside Agent (hook allows)", target: OVERHEAD },
  { name: "gate per allowed tool call inside Agent (no hook)", target: null },
  { name: "Agent.run with one allowed tool call (whole run)", target: null },
] as const;

const gate: BenchModule = {
  id: "gate",
  title: "the whole gate per allowed tool call inside Agent vs calling execute directly",
  async run(ctx) {
    const loaded = await loadModules({ engine: ["Agent", "LoopManagers", "defineTool"] });
    if (!loaded.ok) return unavailableRows(this.id, NAMES, loaded.reason);
    const { Agent, LoopManagers, defineTool } = loaded.mod.engine;

    let executions = 0;
    const execute = async ({ text }: { text: string }): Promise<string> => {
      executions++;
      return text;
    };
    const echo = defineTool({
      name: "echo",
      description: "Echo the text back",
      input: z.object({ text: z.string() }),
      execute,
    });
    const hooked = new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) });
    const bare = new LoopManagers();
    const script = (calls: number) => [
      {
        toolCalls: Array.from({ length: calls }, (_, i) => ({ id: `call_${i}`, name: "echo", input: { text: "hi" } })),
      },
      { text: "done", toolCalls: [] },
    ];
    // Built once: the minimal model copies nothing, and the engine never mutates a response.
    const scripts = new Map([1, K].map((calls) => [calls, script(calls)]));
    const runWith = (managers: InstanceType<typeof LoopManagers>, calls: number) => async (): Promise<void> => {
      const before = executions;
      const agent = new Agent({ model: minimalModel(scripts.get(calls)!), tools: [echo], managers });
      const result = await agent.run("go");
      if (executions - before !== calls || result.records.length !== calls) {
        throw new Error(
          `expected ${calls} executions and records, got ${executions - before} and ${result.records.length}`,
        );
      }
    };
    const rows: Row[] = [];
    try {
      const t = await timeTogether(
        ctx,
        {
          direct: () => execute({ text: "hi" }),
          hookedOne: runWith(hooked, 1),
          hookedMany: runWith(hooked, K),
          bareOne: runWith(bare, 1),
          bareMany: runWith(bare, K),
        },
        { heavy: true },
      );
      const perCall = (many: number, one: number): number => (many - one) / (K - 1);
      const hookedPerCall = perRound(t, (r) => perCall(r("hookedMany"), r("hookedOne")));
      const barePerCall = perRound(t, (r) => perCall(r("bareMany"), r("bareOne")));
      const overheadUs = perRound(t, (r) => perCall(r("hookedMany"), r("hookedOne")) - r("direct")) / 1e3;
      const bareOverheadUs = perRound(t, (r) => perCall(r("bareMany"), r("bareOne")) - r("direct")) / 1e3;
      const direct = t.ns["direct"]!;
      rows.push(
        measuredRow({
          bench: this.id,
          name: NAMES[0].name,
          ours: ns(hookedPerCall),
          floor: ns(direct),
          target: OVERHEAD,
          checked: { value: overheadUs, unit: "µs" },
          ratioRange: roundRange(t, (r) => (perCall(r("hookedMany"), r("hookedOne")) - r("direct")) / 1e3),
          note: `per call = (run with ${K} calls − run with 1 call) / ${K - 1}; minimal scripted Model (no copies); includes the snapshot of the arguments (canonical JSON, its parse, both digests), zod validation, hooks, the record and the tool-result message; floor: await execute(input) directly`,
        }),
        measuredRow({
          bench: this.id,
          name: NAMES[1].name,
          ours: ns(barePerCall),
          floor: ns(direct),
          note: `overhead ${bareOverheadUs.toFixed(2)} µs per call`,
        }),
        measuredRow({ bench: this.id, name: NAMES[2].name, ...paired(t, "hookedOne", "direct") }),
      );
    } catch (error) {
      rows.push(failedRow(this.id, NAMES[0].name, OVERHEAD, error));
    }
    return rows;
  },
};

export default gate;
