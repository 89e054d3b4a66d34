/**
 * Child process for the memory benchmark (started by heap.bench.ts with
 * --expose-gc). Parks N asks at once and prints one JSON line:
 * heap bytes per parked ask and the time to drain them all.
 *
 *   node --expose-gc --import tsx bench/heap-child.ts <ours|floor> <N>
 *
 * Asks, their ids and one AbortController per ask are allocated before the
 * baseline is taken: they belong to the engine, not to the channel, so the
 * figure is what parking adds (the promise, the channel's entry and queue
 * node, the abort listener it registers).
 */
import type { AskResolution, PendingAsk } from "../src/ask/index.js";
import { loadModule } from "./lib/load.js";

declare const gc: () => void;

const APPROVE: AskResolution = { type: "approve" };

function settledHeap(): number {
  // Several passes: weak references and finalizers need more than one to clear.
  for (let i = 0; i < 4; i++) gc();
  return process.memoryUsage().heapUsed;
}

function makeAsks(n: number): PendingAsk[] {
  const asks: PendingAsk[] = new Array<PendingAsk>(n);
  for (let i = 0; i < n; i++) {
    const hex = i.toString(16).padStart(12, "0");
    asks[i] = {
      id: `00000000-0000-4000-8000-${hex}`,
      sessionId: "11111111-1111-4111-8111-111111111111",
      runId: "22222222-2222-4222-8222-222222222222",
      turn: 0,
      callId: `call_${i}`,
      tool: "write_file",
      argsDigest: "f1ed61cd8ca5e26b",
      prompt: "Write the release notes?",
    };
  }
  return asks;
}

interface Result {
  readonly mode: string;
  readonly n: number;
  readonly bytesPerAsk: number;
  /** CPU time (user + system) to drain every ask, in ns; wall time is at the mercy of a shared machine. */
  readonly drainNs: number;
  readonly drainWallNs: number;
  readonly approved: number;
}

function cpuNs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) * 1e3;
}

async function ours(n: number): Promise<Result> {
  const loaded = await loadModule("ask", ["ApprovalChannel"]);
  if (!loaded.ok) throw new Error(loaded.reason);
  const asks = makeAsks(n);
  const controllers = asks.map(() => new AbortController());
  const parks: Promise<AskResolution>[] = new Array<Promise<AskResolution>>(n);
  const [channel, approver] = loaded.mod.ApprovalChannel.pair(16);
  const before = settledHeap();
  for (let i = 0; i < n; i++) parks[i] = channel.resolve(asks[i]!, { signal: controllers[i]!.signal });
  const after = settledHeap();
  if (channel.size !== n) throw new Error(`expected ${n} parked asks, channel holds ${channel.size}`);
  const t0 = process.hrtime.bigint();
  const c0 = cpuNs();
  for (let i = 0; i < n; i++) {
    const ask = await approver.next();
    if (ask === undefined || !approver.resolve(ask.id, APPROVE)) throw new Error("drain lost an ask");
  }
  const resolutions = await Promise.all(parks);
  const drainNs = cpuNs() - c0;
  const drainWallNs = Number(process.hrtime.bigint() - t0);
  approver.close();
  return {
    mode: "ours",
    n,
    bytesPerAsk: (after - before) / n,
    drainNs,
    drainWallNs,
    approved: resolutions.filter((r) => r.type === "approve").length,
  };
}

/** The floor: a bare promise per ask with its resolver kept in a Map by id. */
async function floor(n: number): Promise<Result> {
  const asks = makeAsks(n);
  const parked = new Map<string, { ask: PendingAsk; resolve: (r: AskResolution) => void }>();
  const order: PendingAsk[] = [];
  const parks: Promise<AskResolution>[] = new Array<Promise<AskResolution>>(n);
  const before = settledHeap();
  for (let i = 0; i < n; i++) {
    const ask = asks[i]!;
    parks[i] = new Promise<AskResolution>((resolve) => parked.set(ask.id, { ask, resolve }));
    order.push(ask);
  }
  const after = settledHeap();
  const t0 = process.hrtime.bigint();
  const c0 = cpuNs();
  for (let i = 0; i < n; i++) {
    const ask = await Promise.resolve(order[i]!);
    const entry = parked.get(ask.id)!;
    parked.delete(ask.id);
    entry.resolve(APPROVE);
  }
  const resolutions = await Promise.all(parks);
  const drainNs = cpuNs() - c0;
  const drainWallNs = Number(process.hrtime.bigint() - t0);
  return {
    mode: "floor",
    n,
    bytesPerAsk: (after - before) / n,
    drainNs,
    drainWallNs,
    approved: resolutions.filter((r) => r.type === "approve").length,
  };
}

const [mode, nText] = process.argv.slice(2);
const n = Number(nText);
if (!Number.isInteger(n) || n <= 0 || (mode !== "ours" && mode !== "floor")) {
  process.stderr.write("usage: heap-child.ts <ours|floor> <N>\n");
  process.exit(2);
}
try {
  const result = mode === "ours" ? await ours(n) : await floor(n);
  if (result.approved !== n) throw new Error(`only ${result.approved} of ${n} asks were approved`);
  process.stdout.write(`${JSON.stringify(result)}\n`);
} catch (error) {
  process.stdout.write(`${JSON.stringify({ error: error instanceof Error ? error.message : String(error) })}\n`);
  process.exitCode = 1;
}
