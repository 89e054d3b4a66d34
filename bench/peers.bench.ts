import type { BenchModule, Row, Target, Timings } from "./lib/harness.js";
import { failedRow, measuredRow, ns, perRound, roundRange, timeTogether, unavailableRows } from "./lib/harness.js";
import { loadModules } from "./lib/load.js";
import {
  loopctlRoundTrip,
  ROUND_TRIP_EXPORTS,
  ROUND_TRIP_NOTES,
  ROUND_TRIP_TITLES,
  type RoundTripMode,
} from "./lib/loopctl-round-trip.js";
import { assertExecuted, type RoundTrip } from "./lib/round-trip.js";
import { openAIAgentsRoundTrip } from "./peers/openai-agents.js";
import { vercelAIRoundTrip } from "./peers/vercel-ai.js";

const SPEEDUP: Target = { label: "peer/ours", op: ">=", limit: 50, unit: "x" };

const peers: BenchModule = {
  id: "peers",
  title: "approval round trip: loopctl vs the OpenAI Agents SDK and the Vercel AI SDK (mock models)",
  async run(ctx) {
    const peerTrips: RoundTrip[] = [openAIAgentsRoundTrip(), vercelAIRoundTrip()];
    const loaded = await loadModules(ROUND_TRIP_EXPORTS);
    // The headline is like for like: the peers make their agent and mock model
    // once and run it per round trip, and so does "session". The other two
    // make a new Agent per round trip (and, for ScriptedModel, copy every request).
    const modes: RoundTripMode[] = ["session", "scripted", "minimal"];
    const oursByMode = loaded.ok ? modes.map((mode) => loopctlRoundTrip(loaded.mod, mode)) : [];
    const ours = oursByMode[0];
    const all = [...oursByMode, ...peerTrips];
    const rows: Row[] = [];
    let t: Timings;
    try {
      // Warm once and prove each loop really ran the tool before anything is timed.
      for (const rt of all) {
        await rt.once();
        assertExecuted(rt);
      }
      t = await timeTogether(ctx, Object.fromEntries(all.map((rt) => [rt.label, () => rt.once()])), {
        heavy: true,
        verify: () => all.forEach(assertExecuted),
      });
    } catch (error) {
      return [failedRow(this.id, "approval round trip", null, error)];
    }
    const executed = all.map((rt) => `${rt.label} ${rt.executions()}/${rt.roundTrips()}`).join(", ");
    oursByMode.forEach((rt, i) => {
      rows.push(
        measuredRow({
          bench: this.id,
          name: `${ROUND_TRIP_TITLES[modes[i]!]}`,
          ours: ns(t.ns[rt.label]!),
          floor: null,
          note: i === 0 ? `tool executions/round trips: ${executed}` : ROUND_TRIP_NOTES[modes[i]!],
        }),
      );
    });
    for (const rt of peerTrips) {
      rows.push(
        measuredRow({
          bench: this.id,
          name: `${rt.label} approval round trip (absolute)`,
          ours: ns(t.ns[rt.label]!),
          floor: null,
          note: "figure in the 'ours' column is the peer's own time per round trip; agent and mock model made once",
        }),
      );
    }
    const speedupNames = peerTrips.map((rt) => `speed-up vs ${rt.label} (peer time / loopctl time)`);
    if (ours === undefined) {
      rows.push(
        ...unavailableRows(
          this.id,
          speedupNames.map((name) => ({ name, target: SPEEDUP })),
          loaded.ok ? "" : loaded.reason,
        ),
      );
      return rows;
    }
    peerTrips.forEach((rt, i) => {
      const speedup = perRound(t, (r) => r(rt.label) / r(ours.label));
      const others = oursByMode
        .slice(1)
        .map((other, k) => `${modes[k + 1]} ${perRound(t, (r) => r(rt.label) / r(other.label)).toFixed(1)}×`)
        .join(", ");
      rows.push(
        measuredRow({
          bench: this.id,
          name: speedupNames[i]!,
          ours: ns(t.ns[ours.label]!),
          floor: ns(t.ns[rt.label]!),
          ratio: speedup,
          target: SPEEDUP,
          checked: { value: speedup, unit: "x" },
          ratioRange: roundRange(t, (r) => r(rt.label) / r(ours.label)),
          note: `floor column holds the peer's time; with a new Agent per round trip: ${others}`,
        }),
      );
    });
    return rows;
  },
};

export default peers;
