import type { Grant, ToolDescriptor } from "../src/grant/index.js";
import type { BenchModule, Row, Target } from "./lib/harness.js";
import { failedRow, measuredRow, ns, paired, timeTogether, unavailableRows } from "./lib/harness.js";
import { WRITE_FILE } from "./lib/fixtures.js";
import { loadModule } from "./lib/load.js";

const FLAT: Target = { label: "largest/smallest store", op: "<=", limit: 2, unit: "x" };

const DESCRIPTOR: ToolDescriptor = WRITE_FILE;

function label(n: number): string {
  return `${n / 1000}k`;
}

/**
 * A store of `n` grants shaped like a long-lived project: half are exact-call
 * grants for the benchmarked tool (each a different path, so a scan has to
 * compare arguments), half are whole-tool grants for as many other tools
 * (grant ids are unique by tool, verdict and scope). The covered call sits in
 * the middle of the store.
 */
function grantArgs(i: number): { path: string; mode: string } {
  return { path: `/repo/src/module-${i}/index.ts`, mode: "overwrite" };
}

const decision: BenchModule = {
  id: "grant-decision",
  title: "GrantPolicy.decide with 1k/10k/100k grants (MemoryGrantStore) vs a linear covers scan",
  async run(ctx) {
    const sizes = ctx.quick ? [1_000, 10_000] : [1_000, 10_000, 100_000];
    const names = [
      ...sizes.flatMap((n) => [
        { name: `grant decision, ${label(n)} grants (covered call → allow)`, target: null },
        { name: `grant decision, ${label(n)} grants (uncovered call → ask)`, target: null },
      ]),
      { name: `grant decision flatness, covered: ${label(sizes.at(-1)!)}/${label(sizes[0]!)}`, target: FLAT },
      { name: `grant decision flatness, uncovered: ${label(sizes.at(-1)!)}/${label(sizes[0]!)}`, target: FLAT },
    ];
    const loaded = await loadModule("grant", [
      "Grant",
      "GrantScope",
      "GrantPolicy",
      "MemoryGrantStore",
      "descriptorFingerprint",
    ]);
    if (!loaded.ok) return unavailableRows(this.id, names, loaded.reason);
    const { Grant, GrantScope, GrantPolicy, MemoryGrantStore, descriptorFingerprint } = loaded.mod;
    const pin = descriptorFingerprint(DESCRIPTOR);
    const rows: Row[] = [];
    const hits: number[] = [];
    const misses: number[] = [];
    for (const n of sizes) {
      const store = new MemoryGrantStore();
      const middle = n >> 1;
      const t0 = performance.now();
      for (let i = 0; i < n; i++) {
        const grant =
          i % 2 === 0
            ? new Grant(DESCRIPTOR.name, "allow", GrantScope.thisCall(grantArgs(i))).withPinnedDescriptor(pin)
            : new Grant(`tool_${i}`, i % 3 === 0 ? "deny" : "allow", GrantScope.thisTool());
        await store.save(grant);
      }
      ctx.log(`  ${label(n)} grants stored in ${(performance.now() - t0).toFixed(0)} ms`);
      const policy = new GrantPolicy(store);
      const covered = grantArgs(middle - (middle % 2));
      const uncovered = { path: "/repo/never-granted.ts", mode: "overwrite" };
      const grants: Grant[] = await store.load();
      if (grants.length !== n) throw new Error(`store holds ${grants.length} grants, expected ${n}`);
      try {
        const hit = await policy.decide(DESCRIPTOR, covered);
        const miss = await policy.decide(DESCRIPTOR, uncovered);
        if (hit.type !== "allow" || miss.type !== "ask") {
          throw new Error(`expected allow/ask, the policy decided ${hit.type}/${miss.type}`);
        }
        const t = await timeTogether(
          ctx,
          {
            ours: () => policy.decide(DESCRIPTOR, covered),
            scan: () => grants.find((g) => g.covers(DESCRIPTOR.name, covered)),
            oursMiss: () => policy.decide(DESCRIPTOR, uncovered),
            scanMiss: () => grants.find((g) => g.covers(DESCRIPTOR.name, uncovered)),
          },
          { heavy: n >= 10_000 },
        );
        hits.push(t.ns["ours"]!);
        misses.push(t.ns["oursMiss"]!);
        rows.push(
          measuredRow({
            bench: this.id,
            name: names[rows.length]!.name,
            ...paired(t, "ours", "scan"),
            note: "floor: Array.find over store.load() with Grant.covers (no pin check)",
          }),
          measuredRow({ bench: this.id, name: names[rows.length + 1]!.name, ...paired(t, "oursMiss", "scanMiss") }),
        );
      } catch (error) {
        rows.push(failedRow(this.id, names[rows.length]!.name, null, error));
        rows.push(failedRow(this.id, names[rows.length]!.name, null, error));
      }
    }
    if (hits.length === sizes.length) {
      for (const [k, series] of [hits, misses].entries()) {
        const growth = series.at(-1)! / series[0]!;
        rows.push(
          measuredRow({
            bench: this.id,
            name: names[sizes.length * 2 + k]!.name,
            ours: ns(series.at(-1)!),
            floor: ns(series[0]!),
            ratio: growth,
            target: FLAT,
            checked: { value: growth, unit: "x" },
            note: "ours = decision with the largest store, floor column = with the smallest",
          }),
        );
      }
    }
    return rows;
  },
};

export default decision;
