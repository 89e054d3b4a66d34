/**
 * loopctl's approval round trip, shaped like the peers': the model asks for
 * the tool, a hook says Ask, a resolver approves, the tool runs, the model
 * answers. One tool call and one approval per run.
 */
import { z } from "zod";
import type { ModelResponse } from "../../src/engine/index.js";
import type { Modules } from "./load.js";
import { minimalModel, sessionModel } from "./minimal-model.js";
import type { RoundTrip } from "./round-trip.js";

export const ROUND_TRIP_EXPORTS = {
  ask: ["SyncAskResolver"],
  engine: ["Agent", "LoopManagers", "defineTool"],
  testing: ["ScriptedModel"],
} as const;

/**
 * How the model and the agent are set up:
 * - `"session"`: like the peers exactly: one `Agent` made once, and a mock
 *   model, also made once, that answers with the tool call until it sees the
 *   call's result, then with text (the peers' mocks read their input the same way);
 * - `"scripted"`: a fresh `Agent` and `ScriptedModel` per round trip
 *   (ScriptedModel plays its turns once and deep-copies every request);
 * - `"minimal"`: a fresh `Agent` per round trip with a bare Model that hands
 *   back prebuilt turns and copies nothing.
 */
export type RoundTripMode = "session" | "scripted" | "minimal";

const LABELS: Record<RoundTripMode, string> = {
  session: "loopctl",
  scripted: "loopctl (ScriptedModel, new Agent per run)",
  minimal: "loopctl (minimal model, new Agent per run)",
};

/** Row titles in the results table. */
export const ROUND_TRIP_TITLES: Record<RoundTripMode, string> = {
  session: "loopctl approval round trip (Agent and mock model made once, like the peers; hook asks, SyncAskResolver)",
  scripted: "loopctl approval round trip, new Agent + ScriptedModel per run",
  minimal: "loopctl approval round trip, new Agent + minimal model per run",
};

export const ROUND_TRIP_NOTES: Record<RoundTripMode, string> = {
  session: "one Agent (one session), a mock that answers from the last message, as the peers' mocks do",
  scripted:
    "a fresh Agent and ScriptedModel per round trip; ScriptedModel deep-copies and records every request, as a test double should",
  minimal: "a fresh Agent per round trip with a bare Model that hands back prebuilt turns and copies nothing",
};

export function loopctlRoundTrip(
  mods: Pick<Modules, "ask" | "engine" | "testing">,
  mode: RoundTripMode = "session",
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
  const turns: [ModelResponse, ModelResponse] = [
    { toolCalls: [{ id: "call_1", name: "echo", input: { text: "hi" } }] },
    { text: "done", toolCalls: [] },
  ];
  const session = mode === "session" ? new Agent({ model: sessionModel(turns), tools: [echo], managers }) : undefined;
  return {
    label: LABELS[mode],
    async once() {
      // A scripted model plays its turns once, so the other modes get a fresh one (and a fresh Agent) per run.
      const agent =
        session ??
        new Agent({
          model: mode === "scripted" ? new ScriptedModel(turns) : minimalModel(turns),
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
