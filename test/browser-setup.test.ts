import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const repo = fileURLToPath(new URL("..", import.meta.url));

describe("npm run test:browser without Chromium", () => {
  it("fails, and says how to install Chromium", async () => {
    const result = await new Promise<{ code: number | null; output: string }>((resolve) => {
      execFile(
        process.execPath,
        [
          "node_modules/vitest/vitest.mjs",
          "run",
          "--config",
          "vitest.browser.config.ts",
          "test/browser/console.browser.ts",
        ],
        {
          cwd: repo,
          env: { ...process.env, LOOPCTL_CHROMIUM: "/nonexistent/chromium", NO_COLOR: "1" },
          timeout: 60_000,
        },
        (error, stdout, stderr) =>
          resolve({ code: error === null ? 0 : (error.code as number | null), output: stdout + stderr }),
      );
    });
    expect(result.code).not.toBe(0);
    expect(result.output).toContain("Chromium was not found at /nonexistent/chromium");
    expect(result.output).toContain("sudo apt-get install -y chromium");
    expect(result.output).toContain("LOOPCTL_CHROMIUM");
  }, 60_000);
});
