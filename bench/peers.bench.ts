import type { BenchModule, Row, Target, Timings } from "./lib/harness.js";
import { failedRow, measuredRow, ns, perRound, roundRange, timeTogether, unavailableRows } from "./lib/harness.js";
import { loadModules } from "./lib/load.js";
import { loopctlRoundTrip, ROUND_TRIP_EXPORTS } from "./lib/loopctl-round-trip.js";
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
    const ours = loaded.ok ? loopctlRoundTrip(loaded.mod, "scripted") : null;
    const oursMinimal = loaded.ok ? loopctlRoundTrip(loaded.mod, "minimal") : null;
    const all = ours === null || oursMinimal === null ? peerTrips : [ours, oursMinimal, ...peerTrips];
    const rows: Row[] = [];
    let t: Timings;
    try {
      // Warm once and prove each loop really ran the tool before anything is timed.
      for (const rt of all) {
        await rt.once();
        assertExecuted(rt);
      }
      t = await timeTogether(
        ctx,
        Object.fromEntries(all.map((rt) => [rt.label, () => rt.once()])),
        { heavy: true, verify: () => all.forEach(assertExecuted) },
      );
    } catch (error) {
      return [failedRow(this.id, "approval round trip", null, error)];
    }
    const executed = all.map((rt) => `${rt.label} ${rt.executions()}/${rt.roundTrips()}`).join(", ");
    if (ours !== null) {
      rows.push(
        measuredRow({
          bench: this.id,
          name: "loopctl approval round trip (Agent + ScriptedModel, hook asks, SyncAskResolver)",
          ours: ns(t.ns[ours.label]!),
          floor: null,
          note: `tool executions/round trips: ${executed}`,
        }),
      );
    }
    if (oursMinimal !== null) {
      rows.push(
        measuredRow({
          bench: this.id,
          name: "loopctl approval round trip, minimal Model like the peers' mocks",
          ours: ns(t.ns[oursMinimal.label]!),
          floor: null,
          note: "same run with a bare Model that copies nothing, the counterpart of the peers' hand-written mocks",
        }),
      );
    }
    for (const rt of peerTrips) {
      rows.push(
        measuredRow({
          bench: this.id,
          name: `${rt.label} approval round trip (absolute)`,
          ours: ns(t.ns[rt.label]!),
          floor: null,
          note: "figure in the 'ours' column is the peer's own time per round trip",
        }),
      );
    }
    const speedupNames = peerTrips.map((rt) => `speed-up vs ${rt.label} (peer time / loopctl time)`);
    if (ours === null) {
      rows.push(...unavailableRows(this.id, speedupNames.map((name) => ({ name, target: SPEEDUP })), loaded.ok ? "" : loaded.reason));
      return rows;
    }
    peerTrips.forEach((rt, i) => {
      const speedup = perRound(t, (r) => r(rt.label) / r(ours.label));
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
          note: `floor column holds the peer's time; minimal-model speed-up ${oursMinimal === null ? "n/a" : perRound(t, (r) => r(rt.label) / r(oursMinimal.label)).toFixed(1)}×`,
        }),
      );
    });
    return rows;
  },
};

export default peers;
