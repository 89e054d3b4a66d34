/**
 * loopctl's approval round trip, shaped like the peers': the model asks for
 * the tool, a hook says Ask, a resolver approves, the tool runs, the model
 * answers. One tool call and one approval per run.
 */
import { z } from "zod";
import type { Modules } from "./load.js";
import { minimalModel } from "./minimal-model.js";
import type { RoundTrip } from "./round-trip.js";

export const ROUND_TRIP_EXPORTS = {
  ask: ["SyncAskResolver"],
  engine: ["Agent", "LoopManagers", "defineTool"],
  testing: ["ScriptedModel"],
} as const;

/**
 * `model: "scripted"` uses loopctl's ScriptedModel (deep-copies every
 * request); `"minimal"` a bare Model like the peers' hand-written mocks.
 */
export function loopctlRoundTrip(
  mods: Pick<Modules, "ask" | "engine" | "testing">,
  model: "scripted" | "minimal" = "scripted",
): RoundTrip {
  const { Agent, LoopManagers, defineTool } = mods.engine;
  const { ScriptedModel } = mods.testing;
  const { SyncAskResolver } = mods.ask;
  let executions = 0;
  let roundTrips = 0;
  const echo = defineTool({
    name: "echo",
    description: "Echo the text back",
    input: z.object({ text: z.string() }),
    execute: async ({ text }: { text: string }) => {
      executions++;
      return text;
    },
  });
  const managers = new LoopManagers()
    .withHook({ preToolUse: () => ({ type: "ask", prompt: "Echo this text?" }) })
    .withAskResolver(new SyncAskResolver(() => true));
  const turns = [
    { toolCalls: [{ id: "call_1", name: "echo", input: { text: "hi" } }] },
    { text: "done", toolCalls: [] },
  ];
  return {
    label: model === "scripted" ? "loopctl" : "loopctl (minimal model)",
    async once() {
      // A scripted model plays its turns once, so each run gets a fresh one (and a fresh Agent).
      const agent = new Agent({
        model: model === "scripted" ? new ScriptedModel(turns) : minimalModel(turns),
        tools: [echo],
        managers,
      });
      const result = await agent.run("go");
      const verdicts = result.records.map((r) => r.verdict);
      if (verdicts.length !== 1 || verdicts[0] !== "ask_allowed") {
        throw new Error(`expected one ask_allowed record, got [${verdicts.join(", ")}]`);
      }
      roundTrips++;
    },
    executions: () => executions,
    roundTrips: () => roundTrips,
  };
}
