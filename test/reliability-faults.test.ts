import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";
import { manualEnv } from "./support/reliability-harness.js";
import { LEAKING_CONTROL, SCENARIOS, violations } from "./support/reliability-scenarios.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const hasGc = typeof (globalThis as { gc?: unknown }).gc === "function";

/** A child that is still alive this long after start is holding a handle. */
const CHILD_BOUND_MS = 15_000;

interface ChildResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly ms: number;
  readonly stdout: string;
  readonly stderr: string;
}

// The same script runs by hand as `node --import tsx test/support/reliability-scenario.ts <name>`;
// the test runs it bundled, so each child starts without loading tsx.
let bundle: Bundle | undefined;
beforeAll(async () => {
  bundle = await bundleChild("reliability-scenario.ts");
});
afterAll(() => bundle?.dispose());

function runChild(name: string, gc: boolean): Promise<ChildResult> {
  const args = [...(gc ? ["--expose-gc"] : []), bundle!.path, name];
  const start = Date.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      args,
      { cwd: root, timeout: CHILD_BOUND_MS, killSignal: "SIGKILL" },
      (error, stdout, stderr) => {
        const failure = error as (NodeJS.ErrnoException & { code?: number | string; signal?: NodeJS.Signals }) | null;
        resolve({
          code: failure === null ? 0 : typeof failure.code === "number" ? failure.code : null,
          signal: failure?.signal ?? null,
          ms: Date.now() - start,
          stdout,
          stderr,
        });
      },
    );
  });
}

describe("fault matrix, in process (manual clock)", () => {
  it.each(SCENARIOS.filter((s) => !s.gc || hasGc).map((s) => [s.name, s] as const))("%s", async (_name, scenario) => {
    const report = await scenario.run(manualEnv());
    expect(violations(scenario.expect, report)).toEqual([]);
  });
});

describe("fault matrix, each scenario in its own process (system timers)", () => {
  // A few at a time: a child spends most of its life starting up, not on a core.
  const results = new Map<string, Promise<ChildResult>>();
  const queue = [...SCENARIOS];
  const slots: Promise<void>[] = [];
  const schedule = (): void => {
    for (let i = 0; i < 4; i += 1) {
      slots.push(
        (async () => {
          for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
            const pending = runChild(next.name, next.gc === true);
            results.set(next.name, pending);
            await pending;
          }
        })(),
      );
    }
  };

  it.each(SCENARIOS.map((s) => [s.name] as const))(
    "%s: holds every invariant and the process exits on its own",
    async (name) => {
      if (slots.length === 0) schedule();
      await expect.poll(() => results.has(name), { timeout: 120_000, interval: 20 }).toBe(true);
      const child = await results.get(name)!;
      expect(child.stderr).toBe("");
      expect({ code: child.code, signal: child.signal }).toEqual({ code: 0, signal: null });
      expect(child.ms).toBeLessThan(CHILD_BOUND_MS);
      const line = JSON.parse(child.stdout.trim().split("\n").at(-1)!) as { violations: string[]; handles: string[] };
      expect(line.violations).toEqual([]);
      expect(line.handles).toEqual([]);
    },
    130_000,
  );
});

describe("the child-process check can fail", () => {
  it("a scenario that leaves a timer armed is caught: the timer is listed and the process outlives the run", async () => {
    const child = await runChild(LEAKING_CONTROL.name, false);
    expect(child.code).toBe(0);
    const line = JSON.parse(child.stdout.trim().split("\n").at(-1)!) as { violations: string[]; handles: string[] };
    expect(line.violations).toEqual([]);
    expect(line.handles).toContain("Timeout");
    expect(child.ms).toBeGreaterThanOrEqual(1_500);
  });
});
