import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), "loopctl-bench-server-smoke-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

interface Row {
  readonly bench: string;
  readonly name: string;
  readonly status: string;
  readonly ours: { readonly unit: string; readonly value: number } | null;
  readonly floor: { readonly unit: string; readonly value: number } | null;
}

// A quick run's figures mean nothing; what is checked is that the server
// benchmark still runs end to end: real answers over HTTP against the echo floor.
describe("npm run bench -- --filter server (quick mode)", () => {
  it("measures answers through the HTTP API and the bare node:http echo in the same run, both rows, none failed", async () => {
    const out = join(scratch, "results.json");
    const { stdout } = await run(
      process.execPath,
      ["--import", "tsx", "bench/run.ts", "--quick", "--filter", "^server$", "--out", out],
      {
        env: { ...process.env, LOOPCTL_BENCH_QUICK: "1" },
        timeout: 120_000,
      },
    );
    expect(stdout).toContain("answer through the HTTP API, one at a time (POST /api/asks/:id → park resolves)");
    const rows = (JSON.parse(readFileSync(out, "utf8")) as { rows: readonly Row[] }).rows;
    expect(rows.map((r) => [r.bench, r.name])).toEqual([
      ["server", "answer through the HTTP API, one at a time (POST /api/asks/:id → park resolves)"],
      ["server", "answers through the HTTP API, 16 in flight"],
    ]);
    for (const row of rows) {
      // Measured, whatever the figure: a quick run on a shared machine may miss the target.
      expect(["pass", "miss", "info"], row.name).toContain(row.status);
      expect(row.ours?.unit).toBe("answers/s");
      expect(row.floor?.unit).toBe("req/s");
      expect(row.ours?.value).toBeGreaterThan(0);
      expect(row.floor?.value).toBeGreaterThan(0);
    }
  }, 150_000);
});
