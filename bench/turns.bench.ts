/**
 * A turn's cost must not grow with the transcript: the same run of one tool
 * call per model turn, 10 turns long and 10,000 turns long, with a bare model
 * that copies nothing; per-turn cost is the run's time divided by its turns.
 */
import { z } from "zod";
import type { BenchModule, Row, Target } from "./lib/harness.js";
import { failedRow, measuredRow, ns, perRound, roundRange, timeTogether, unavailableRows } from "./lib/harness.js";
import { loadModules } from "./lib/load.js";
import type { Model, ModelResponse } from "../src/engine/index.js";

const FLAT: Target = { label: "per turn, long/short", op: "<=", limit: 1.5, unit: "x" };
const SHORT = 10;
const LONG = 10_000;

const turnsBench: BenchModule = {
  id: "turns",
  title: `cost per model turn in a ${LONG}-turn run vs a ${SHORT}-turn run (bare model, one allowed tool call per turn)`,
  async run(ctx) {
    const name = `per-turn cost, ${LONG} turns vs ${SHORT} turns`;
    const loaded = await loadModules({ engine: ["Agent", "LoopManagers", "defineTool"] });
    if (!loaded.ok) return unavailableRows(this.id, [{ name, target: FLAT }], loaded.reason);
    const { Agent, LoopManagers, defineTool } = loaded.mod.engine;
    const echo = defineTool({
      name: "echo",
      description: "Echo the text back",
      input: z.object({ text: z.string() }),
      execute: ({ text }: { text: string }) => text,
    });
    const managers = new LoopManagers().withBudget({ maxTurns: Number.POSITIVE_INFINITY });
    const done: ModelResponse = { text: "done", toolCalls: [] };
    // Like a provider: a call id of its own per turn, and the same arguments.
    const model = (turns: number): Model => {
      let n = 0;
      return {
        generate: () =>
          Promise.resolve(
            ++n < turns ? { toolCalls: [{ id: `call_${n}`, name: "echo", input: { text: "hi" } }] } : done,
          ),
      };
    };
    const long = ctx.quick ? 1_000 : LONG;
    const runOf = (turns: number) => async (): Promise<void> => {
      const result = await new Agent({ model: model(turns), tools: [echo], managers }).run("go");
      if (result.turns !== turns) throw new Error(`expected ${turns} turns, got ${result.turns}`);
    };
    try {
      const t = await timeTogether(ctx, { short: runOf(SHORT), long: runOf(long) }, { heavy: true, batch: false });
      const perTurn = (r: (n: string) => number): number => r("long") / long / (r("short") / SHORT);
      const rows: Row[] = [
        measuredRow({
          bench: this.id,
          name,
          ours: ns(t.ns["long"]! / long),
          floor: ns(t.ns["short"]! / SHORT),
          ratio: perRound(t, perTurn),
          target: FLAT,
          ratioRange: roundRange(t, perTurn),
          note: `ours: per turn in a ${long}-turn run (${(t.ns["long"]! / 1e6).toFixed(1)} ms in all); floor column: per turn in a ${SHORT}-turn run; messages are frozen and shared, never copied per turn`,
        }),
      ];
      return rows;
    } catch (error) {
      return [failedRow(this.id, name, FLAT, error)];
    }
  },
};

export default turnsBench;
