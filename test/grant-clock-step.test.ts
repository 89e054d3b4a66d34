import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { FileGrantStore, Grant, GrantScope } from "../src/grant/index.js";
import { liveHolder } from "./support/live-holder.js";
import { useGrantShim } from "./support/native-shim.js";
import { unmet } from "./support/precondition.js";

// A child process waits for a ledger lock a live process of this host holds,
// with a libc shim (LD_PRELOAD) that sets its wall clock an hour back a
// second into its wait, as an NTP step or a date set by hand would. The wait
// must still end after lockTimeoutMs, by a clock that never steps.

const CHILD = `
const [, esm, root, project] = process.argv;
const { FileGrantStore, Grant, GrantScope } = await import(esm);
let waitingAt;
const store = new FileGrantStore(root, project, {
  lockTimeoutMs: 3000,
  onLockWait: () => (waitingAt = Date.now()),
});
// The shim sets the wall clock back a second from now: the save is waiting by then.
process.env.LOOPCTL_CLOCK_BACK_AFTER_MS = "1000";
const started = performance.now();
const wallStarted = Date.now();
let error;
try {
  await store.save(new Grant("write", "allow", GrantScope.thisTool()));
} catch (caught) {
  error = caught;
}
console.log(JSON.stringify({
  name: error?.name,
  code: error?.code,
  waitedMs: Math.round(performance.now() - started),
  wallAtWaitMs: waitingAt === undefined ? null : waitingAt - wallStarted,
  wallStepMs: Math.round(Date.now() - wallStarted),
}));
`;

describe("a wait for the ledger lock while the wall clock is set back", () => {
  const setup = useGrantShim("clock-back");

  it("ends after lockTimeoutMs with LedgerLockError, not an hour later", async (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const root = join(setup.dir, "root");
    const project = join(setup.dir, "project");
    const store = new FileGrantStore(root, project);
    await store.save(new Grant("read", "allow", GrantScope.thisTool()));
    const holder = liveHolder();
    try {
      writeFileSync(
        store.lockPath,
        JSON.stringify({ pid: holder.pid, hostname: hostname(), createdAtMs: Date.now(), token: "live" }),
      );
      await holder.hold(store.lockPath);
      const child = spawn(
        process.execPath,
        ["--input-type=module", "-e", CHILD, pathToFileURL(setup.builds.esm).href, root, project],
        {
          env: {
            ...process.env,
            LD_PRELOAD: setup.shim,
            LOOPCTL_CLOCK_BACK_S: "3600",
          },
        },
      );
      let stdout = "";
      let stderr = "";
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
      const killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
      clearTimeout(killer);
      expect(code, `still waiting after 15 s; stderr: ${stderr}`).toBe(0);
      const out = JSON.parse(stdout) as {
        name: string;
        code: string;
        waitedMs: number;
        wallAtWaitMs: number | null;
        wallStepMs: number;
      };
      // The shim is in effect: the child's wall clock went back an hour after its wait began.
      expect(out.wallAtWaitMs).toBeGreaterThanOrEqual(0);
      expect(out.wallAtWaitMs).toBeLessThan(1_000);
      expect(out.wallStepMs).toBeLessThan(-3_000_000);
      expect(out.name).toBe("LedgerLockError");
      expect(out.waitedMs).toBeGreaterThanOrEqual(2_900);
      expect(out.waitedMs).toBeLessThan(10_000);
      // Nothing was written past the live holder.
      expect((await store.load()).map((g) => g.tool)).toEqual(["read"]);
    } finally {
      holder.kill();
    }
  }, 30_000);
});
