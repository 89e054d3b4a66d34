import { measure } from "mitata";

/** A measured figure with its unit, as written to results.json. */
export interface Figure {
  readonly value: number;
  readonly unit: string;
}

/** The target a row is judged against: `value op limit` in `unit`. */
export interface Target {
  /** What is compared, e.g. "ours/floor" or "overhead per call". */
  readonly label: string;
  readonly op: "<=" | ">=";
  readonly limit: number;
  readonly unit: string;
}

/**
 * One line of the table. `pass`/`miss` only when a target exists and was
 * measured; `info` for figures without a target; `n/a` when the module under
 * test has not landed; `error` when it threw (the message is in `note`).
 */
export type Row =
  | {
      readonly type: "measured";
      readonly bench: string;
      readonly name: string;
      readonly ours: Figure;
      readonly floor: Figure | null;
      /** ours/floor for times and bytes; for peer rows peer/ours (a speed-up). */
      readonly ratio: number | null;
      readonly target: Target | null;
      /** The figure the target is checked on (the ratio, or an absolute). */
      readonly checked: Figure | null;
      /** Smallest and largest per-round value of the ratio (or of the checked figure). */
      readonly range: readonly [number, number] | null;
      readonly status: "pass" | "miss" | "info";
      readonly note: string | null;
    }
  | {
      readonly type: "unavailable";
      readonly bench: string;
      readonly name: string;
      readonly target: Target | null;
      readonly status: "n/a";
      readonly note: string;
    }
  | {
      readonly type: "failed";
      readonly bench: string;
      readonly name: string;
      readonly target: Target | null;
      readonly status: "error";
      readonly note: string;
    };

/** Settings shared by every benchmark module. */
export interface BenchContext {
  /** LOOPCTL_BENCH_QUICK=1: few samples, small sizes; for smoke tests. */
  readonly quick: boolean;
  /** Logs progress to stderr so stdout stays the table. */
  readonly log: (line: string) => void;
}

/** A benchmark file's default export. */
export interface BenchModule {
  /** Short id used by `--filter` and in results.json. */
  readonly id: string;
  readonly title: string;
  run(ctx: BenchContext): Promise<Row[]>;
}

/** Median of a non-empty list. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  if (sorted.length === 0) throw new RangeError("median of an empty list");
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** mitata options; quick mode trades precision for a run of seconds. */
interface MeasureOptions {
  readonly min_cpu_time: number;
  readonly min_samples: number;
  readonly max_samples?: number;
  readonly warmup_samples: number;
  readonly warmup_threshold: number;
  readonly batch_threshold?: number;
  readonly batch_samples?: number;
  readonly now?: () => number;
}

/**
 * The process's CPU time (user + system, all threads) in ns. On a shared
 * machine wall time mostly measures how often the scheduler lets us run; CPU
 * time measures the work. Reading it costs a few µs, so it is only used for
 * samples long enough to hide that (mitata batches short calls).
 */
export function cpuNow(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) * 1e3;
}

function mitataOptions(ctx: BenchContext, options: PairOptions): MeasureOptions {
  const heavy = options.heavy === true;
  const clock = options.clock === "wall" ? {} : { now: cpuNow };
  // Calls up to 5 ms are run 32 to a sample (4096 for mitata's own sub-65 µs batches),
  // so a sample always spans far more than the clock's own cost.
  const batching =
    options.batch === false ? { batch_threshold: 0 } : heavy ? { batch_threshold: 5e6, batch_samples: 32 } : {};
  // mitata skips its warm-up, and so never batches, when the first call takes over 0.5 ms: a
  // collection of the garbage the measurement before left did that, so a call of a few µs was timed
  // one to a sample, each sample reading the CPU clock (1 µs steps, a few µs to read) and coming out
  // µs high. The warm-up always runs; whether to batch is decided on its calls.
  const warmup = { warmup_threshold: Number.POSITIVE_INFINITY };
  if (ctx.quick) {
    return {
      min_cpu_time: 15e6,
      min_samples: 3,
      max_samples: heavy ? 5 : 200,
      warmup_samples: 1,
      ...warmup,
      ...batching,
      ...clock,
    };
  }
  return {
    min_cpu_time: heavy ? 150e6 : 80e6,
    min_samples: heavy ? 8 : 12,
    warmup_samples: 4,
    ...warmup,
    ...batching,
    ...clock,
  };
}

export interface PairOptions {
  /** The function is slow (tens of µs or more): fewer samples, 32 calls per sample. */
  readonly heavy?: boolean;
  /** `"cpu"` (default): process CPU time; `"wall"` for work that waits on the disk. */
  readonly clock?: "cpu" | "wall";
  /** `false`: one call per sample (calls that each take milliseconds of I/O). */
  readonly batch?: boolean;
  /** Checks run once before timing, e.g. that the peer really executed the tool. */
  readonly verify?: () => void | Promise<void>;
}

/** Per-sample medians (ns) of every round, by function name, plus their median over rounds. */
export interface Timings {
  /** Median over rounds of mitata's per-sample median, in ns per call. */
  readonly ns: Readonly<Record<string, number>>;
  /** Each round's per-sample median, in ns per call, in round order. */
  readonly rounds: Readonly<Record<string, readonly number[]>>;
}

/**
 * Times several functions in the same process, interleaved: each round
 * measures every function once (order rotated per round so neither side
 * always runs on a colder or hotter heap). On a shared machine the load
 * changes between rounds, so ratios are taken per round, between
 * measurements made seconds apart, and then their median is reported (see
 * {@link paired}).
 */
export async function timeTogether(
  ctx: BenchContext,
  fns: Readonly<Record<string, () => unknown>>,
  options: PairOptions = {},
): Promise<Timings> {
  const names = Object.keys(fns);
  const rounds = ctx.quick ? 1 : 7;
  const p50s: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  const opts = mitataOptions(ctx, options);
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < names.length; k++) {
      const name = names[(k + round) % names.length]!;
      const fn = fns[name]!;
      const stats = await measure(() => fn(), { ...opts });
      p50s[name]!.push(stats.p50);
    }
  }
  if (options.verify !== undefined) await options.verify();
  return { ns: Object.fromEntries(names.map((n) => [n, median(p50s[n]!)])), rounds: p50s };
}

/** Median over rounds of `f(round)`, e.g. a ratio of two measurements taken side by side. */
export function perRound(t: Timings, f: (round: (name: string) => number) => number): number {
  const count = Object.values(t.rounds)[0]?.length ?? 0;
  const values: number[] = [];
  for (let r = 0; r < count; r++) values.push(f((name) => t.rounds[name]![r]!));
  return median(values);
}

export function ns(value: number): Figure {
  return { value, unit: "ns/op" };
}

/** Smallest and largest value of `f(round)` over the rounds: how much the machine moved the figure. */
export function roundRange(t: Timings, f: (round: (name: string) => number) => number): readonly [number, number] {
  const count = Object.values(t.rounds)[0]?.length ?? 0;
  const values = Array.from({ length: count }, (_, r) => f((name) => t.rounds[name]![r]!));
  return [Math.min(...values), Math.max(...values)];
}

/** `ours`, `floor` and their ratio, the ratio taken per round (see {@link timeTogether}), with its range. */
export function paired(
  t: Timings,
  ours: string,
  floor: string,
): { ours: Figure; floor: Figure; ratio: number; ratioRange: readonly [number, number] } {
  const f = (r: (name: string) => number): number => r(ours) / r(floor);
  return { ours: ns(t.ns[ours]!), floor: ns(t.ns[floor]!), ratio: perRound(t, f), ratioRange: roundRange(t, f) };
}

/** Builds a measured row and judges it against its target. */
export function measuredRow(input: {
  bench: string;
  name: string;
  ours: Figure;
  floor: Figure | null;
  ratio?: number | null;
  target?: Target | null;
  checked?: Figure | null;
  ratioRange?: readonly [number, number] | null;
  note?: string | null;
}): Row {
  const ratio =
    input.ratio !== undefined ? input.ratio : input.floor === null ? null : input.ours.value / input.floor.value;
  const target = input.target ?? null;
  const checked =
    input.checked !== undefined
      ? input.checked
      : ratio === null || target === null
        ? null
        : { value: ratio, unit: "x" };
  let status: "pass" | "miss" | "info" = "info";
  if (target !== null && checked !== null) {
    const ok = target.op === "<=" ? checked.value <= target.limit : checked.value >= target.limit;
    status = ok ? "pass" : "miss";
  }
  return {
    type: "measured",
    bench: input.bench,
    name: input.name,
    ours: input.ours,
    floor: input.floor,
    ratio,
    target,
    checked,
    range: input.ratioRange ?? null,
    status,
    note: input.note ?? null,
  };
}

/** Rows for a benchmark whose module under test has not landed (no number is invented). */
export function unavailableRows(
  bench: string,
  names: readonly { name: string; target?: Target | null }[],
  reason: string,
): Row[] {
  return names.map(({ name, target }) => ({
    type: "unavailable" as const,
    bench,
    name,
    target: target ?? null,
    status: "n/a" as const,
    note: `not available: ${reason}`,
  }));
}

export function failedRow(bench: string, name: string, target: Target | null, error: unknown): Row {
  const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return { type: "failed", bench, name, target, status: "error", note: message };
}

export function ratioTarget(limit: number, op: "<=" | ">=" = "<="): Target {
  return { label: "ratio", op, limit, unit: "x" };
}
