/**
 * The approval round trip measured the way a user's process lives: a new
 * agent and a new mock model per round trip (all three SDKs), and a full
 * garbage collection before each batch of round trips. A full collection
 * throws away optimized code whose embedded objects died; what each SDK pays
 * to get fast again is part of its cost. `npm run bench` starts every module
 * with --expose-gc; without it this module reports n/a.
 */
import type { BenchContext, BenchModule, Row, Target } from "./lib/harness.js";
import { cpuNow, failedRow, measuredRow, median, unavailableRows } from "./lib/harness.js";
import { loadModules } from "./lib/load.js";
import { loopctlRoundTrip, ROUND_TRIP_EXPORTS } from "./lib/loopctl-round-trip.js";
import { assertExecuted, type RoundTrip } from "./lib/round-trip.js";
import { openAIAgentsRoundTrip } from "./peers/openai-agents.js";
import { vercelAIRoundTrip } from "./peers/vercel-ai.js";

const SPEEDUP: Target = { label: "peer/ours", op: ">=", limit: 50, unit: "x" };
const BATCH = 300;

/** CPU ns per round trip in each batch of {@link BATCH}, per SDK. */
async function batches(
  ctx: BenchContext,
  trips: readonly RoundTrip[],
  gc: (() => void) | undefined,
): Promise<Map<RoundTrip, number[]>> {
  const rounds = ctx.quick ? 2 : 12;
  const per = new Map<RoundTrip, number[]>(trips.map((rt) => [rt, []]));
  for (let round = 0; round < rounds; round++) {
    // Rotated, so no SDK always runs right after another's garbage.
    for (let k = 0; k < trips.length; k++) {
      const rt = trips[(k + round) % trips.length]!;
      gc?.();
      const t0 = cpuNow();
      for (let i = 0; i < BATCH; i++) await rt.once();
      per.get(rt)!.push((cpuNow() - t0) / BATCH);
    }
  }
  return per;
}

/** CPU ns per round trip in consecutive blocks of 100 after one full collection: how long an SDK stays slow. */
async function recovery(
  trips: readonly RoundTrip[],
  gc: () => void,
  blocks: number,
): Promise<Map<RoundTrip, number[]>> {
  const out = new Map<RoundTrip, number[]>();
  for (const rt of trips) {
    gc();
    const series: number[] = [];
    for (let b = 0; b < blocks; b++) {
      const t0 = cpuNow();
      for (let i = 0; i < 100; i++) await rt.once();
      series.push((cpuNow() - t0) / 100);
    }
    out.set(rt, series);
  }
  return out;
}

const us = (ns: number): string => `${(ns / 1e3).toFixed(1)} µs`;

const gcBench: BenchModule = {
  id: "gc",
  title:
    "approval round trip with a new agent and model per round trip and a full GC before each batch of 300 (all three SDKs)",
  async run(ctx) {
    const names = [
      "loopctl round trip, new Agent + bare model per run, full GC before each batch",
      "speed-up vs OpenAI Agents SDK with forced GC",
      "speed-up vs Vercel AI SDK with forced GC",
    ];
    const gc = (globalThis as { gc?: () => void }).gc;
    if (gc === undefined)
      return unavailableRows(
        this.id,
        names.map((name) => ({ name })),
        "run with node --expose-gc (npm run bench does)",
      );
    const loaded = await loadModules(ROUND_TRIP_EXPORTS);
    if (!loaded.ok)
      return unavailableRows(
        this.id,
        names.map((name) => ({ name })),
        loaded.reason,
      );
    const ours = loopctlRoundTrip(loaded.mod, "minimal");
    const scripted = loopctlRoundTrip(loaded.mod, "scripted");
    const openai = openAIAgentsRoundTrip(true);
    const vercel = vercelAIRoundTrip(true);
    const trips = [ours, scripted, openai, vercel];
    try {
      for (const rt of trips) {
        for (let i = 0; i < (ctx.quick ? 20 : BATCH); i++) await rt.once();
        assertExecuted(rt);
      }
      const withGc = await batches(ctx, trips, gc);
      const without = await batches(ctx, trips, undefined);
      const after = await recovery(trips, gc, ctx.quick ? 3 : 20);
      for (const rt of trips) assertExecuted(rt);
      const fig = (rt: RoundTrip, m: Map<RoundTrip, number[]>): number => median(m.get(rt)!);
      const describeRecovery = (rt: RoundTrip): string => {
        const series = after.get(rt)!;
        const steady = fig(rt, without);
        const slow = series.findLastIndex((v) => v > 1.5 * steady) + 1;
        return `after one full GC, blocks of 100: first ${us(series[0]!)}, last ${us(series.at(-1)!)}; over 1.5× its no-GC figure for the first ${slow * 100} of ${series.length * 100} round trips`;
      };
      const rows: Row[] = [];
      for (const [rt, title] of [
        [ours, names[0]!],
        [scripted, "loopctl round trip, new Agent + ScriptedModel per run, full GC before each batch"],
        [openai, "OpenAI Agents SDK round trip, new agent + mock model per run, full GC before each batch (absolute)"],
        [vercel, "Vercel AI SDK round trip, new tools + mock model per run, full GC before each batch (absolute)"],
      ] as const) {
        rows.push(
          measuredRow({
            bench: this.id,
            name: title,
            ours: { value: fig(rt, withGc), unit: "ns/op" },
            floor: { value: fig(rt, without), unit: "ns/op" },
            note: `floor column: the same without forced GC; ${describeRecovery(rt)}`,
          }),
        );
      }
      for (const [peer, name] of [
        [openai, names[1]!],
        [vercel, names[2]!],
      ] as const) {
        const ratios = withGc.get(peer)!.map((v, i) => v / withGc.get(ours)![i]!);
        const speedup = median(ratios);
        rows.push(
          measuredRow({
            bench: this.id,
            name,
            ours: { value: fig(ours, withGc), unit: "ns/op" },
            floor: { value: fig(peer, withGc), unit: "ns/op" },
            ratio: speedup,
            target: SPEEDUP,
            checked: { value: speedup, unit: "x" },
            ratioRange: [Math.min(...ratios), Math.max(...ratios)],
            note: `floor column holds the peer's time; per-round ratios of batches of ${BATCH}, each after a full GC; without forced GC ${median(without.get(peer)!.map((v, i) => v / without.get(ours)![i]!)).toFixed(1)}×`,
          }),
        );
      }
      return rows;
    } catch (error) {
      return [failedRow(this.id, names[0]!, null, error)];
    }
  },
};

export default gcBench;
