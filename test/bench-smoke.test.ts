import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), "loopctl-bench-smoke-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

interface Results {
  readonly quick: boolean;
  readonly machine: { readonly node: string };
  readonly rows: readonly { readonly bench: string; readonly name: string; readonly status: string }[];
}

// The figures of a quick run mean nothing; what is checked is that the suite
// still runs end to end: each module in its own process, a table, a results file.
describe("npm run bench (quick mode)", () => {
  it("prints a table and writes every row of the modules it ran, none failed", async () => {
    const out = join(scratch, "results.json");
    const { stdout, stderr } = await run(
      process.execPath,
      ["--import", "tsx", "bench/run.ts", "--quick", "--filter", "^(park|digest|ai-sdk)$", "--out", out],
      {
        env: { ...process.env, LOOPCTL_BENCH_QUICK: "1" },
        timeout: 120_000,
      },
    );
    expect(stdout).toMatch(/^benchmark\s+ours\s+floor\s+ratio\s+target\s+got\s+result$/m);
    expect(stdout).toContain("park → approve → resume (ApprovalChannel)");
    expect(stderr).toContain(`results written to ${out}`);
    const results = JSON.parse(readFileSync(out, "utf8")) as Results;
    expect(results.quick).toBe(true);
    expect(results.machine.node).toBe(process.version);
    expect(new Set(results.rows.map((r) => r.bench))).toEqual(new Set(["park", "digest", "ai-sdk"]));
    expect(results.rows.filter((r) => r.status === "error" || r.status === "n/a")).toEqual([]);
  }, 150_000);
});
