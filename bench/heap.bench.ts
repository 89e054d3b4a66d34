import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { BenchModule, Row, Target } from "./lib/harness.js";
import { failedRow, measuredRow, unavailableRows } from "./lib/harness.js";
import { loadModule } from "./lib/load.js";

const run = promisify(execFile);
const CHILD = fileURLToPath(new URL("./heap-child.ts", import.meta.url));
const HEAP_TARGET: Target = { label: "heap per ask", op: "<=", limit: 2048, unit: "B/ask" };

interface ChildResult {
  readonly n: number;
  readonly bytesPerAsk: number;
  readonly drainNs: number;
}

/** One fresh process per figure, so neither side inherits the other's heap. */
async function child(mode: "ours" | "floor", n: number): Promise<ChildResult> {
  const { stdout } = await run(process.execPath, ["--expose-gc", "--import", "tsx", CHILD, mode, String(n)], {
    timeout: 300_000,
    maxBuffer: 1 << 20,
  }).catch((error: { stdout?: string; message: string }) => {
    if (error.stdout !== undefined && error.stdout.trim() !== "") return { stdout: error.stdout };
    throw new Error(error.message);
  });
  const line = JSON.parse(stdout.trim().split("\n").at(-1)!) as ChildResult | { error: string };
  if ("error" in line) throw new Error(line.error);
  return line;
}

function label(n: number): string {
  return n >= 1000 ? `${n / 1000}k` : String(n);
}

const heap: BenchModule = {
  id: "heap",
  title: "parked asks: heap per ask and drain throughput (child process, --expose-gc)",
  async run(ctx) {
    const sizes = ctx.quick ? [2_000] : [10_000, 100_000];
    const names = sizes.flatMap((n) => [
      { name: `park ${label(n)} asks at once: heap per parked ask`, target: HEAP_TARGET },
      { name: `drain ${label(n)} parked asks (next + resolve), per ask`, target: null },
    ]);
    const loaded = await loadModule("ask", ["ApprovalChannel"]);
    if (!loaded.ok) return unavailableRows(this.id, names, loaded.reason);
    const rows: Row[] = [];
    for (const n of sizes) {
      ctx.log(`  ${label(n)} parked asks`);
      try {
        const floor = await child("floor", n);
        const ours = await child("ours", n);
        rows.push(
          measuredRow({
            bench: this.id,
            name: names[rows.length]!.name,
            ours: { value: ours.bytesPerAsk, unit: "B/ask" },
            floor: { value: floor.bytesPerAsk, unit: "B/ask" },
            target: HEAP_TARGET,
            checked: { value: ours.bytesPerAsk, unit: "B/ask" },
            note: `floor: a bare promise per ask, resolver kept in a Map; ours adds the channel entry, queue node and abort listener (asks and AbortControllers allocated before the baseline)`,
          }),
          measuredRow({
            bench: this.id,
            name: names[rows.length + 1]!.name,
            ours: { value: ours.drainNs / n, unit: "ns/op" },
            floor: { value: floor.drainNs / n, unit: "ns/op" },
            note: `CPU time, single run: ours ${Math.round((n * 1e9) / ours.drainNs)} asks/s, floor ${Math.round((n * 1e9) / floor.drainNs)} asks/s`,
          }),
        );
      } catch (error) {
        rows.push(failedRow(this.id, names[rows.length]!.name, HEAP_TARGET, error));
        rows.push(failedRow(this.id, names[rows.length]!.name, null, error));
      }
    }
    return rows;
  },
};

export default heap;
