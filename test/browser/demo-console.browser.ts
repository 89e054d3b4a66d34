import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { startDemo } from "../support/demo-process.js";
import { launch, press, screenshot } from "./support/chromium.js";
import type { Browser } from "./support/chromium.js";

let browser: Browser;
let dir: string;
beforeAll(async () => {
  browser = await launch();
  dir = await mkdtemp(join(tmpdir(), "loopctl-demo-browser-"));
});
afterAll(async () => {
  await browser?.close();
  await rm(dir, { recursive: true, force: true });
});

/** Waits for the ask with `prompt`, picks `remember`, types `reason`, and clicks `button`. */
async function answer(
  page: Page,
  prompt: string,
  button: "Approve" | "Deny",
  remember?: string,
  reason?: string,
): Promise<void> {
  const card = page.locator("#asks .ask").filter({ hasText: prompt });
  await card.waitFor();
  if (remember !== undefined) await card.getByLabel(remember).check();
  if (reason !== undefined) await card.getByLabel("Reason, if you deny").fill(reason);
  await press(card, button);
  await card.waitFor({ state: "detached" });
}

describe("npm run demo -- --console, answered in Chromium", () => {
  it("the release assistant parks, each ask is answered from the page, and the run ends as answered", async () => {
    const work = join(dir, "work");
    const demo = startDemo(["--console", "--root", join(dir, "state"), "--workdir", work]);
    try {
      const page = await browser.page(1280);
      await page.goto(await demo.consoleUrl);
      await expect.poll(() => page.locator("#status").textContent()).toBe("Live");

      await answer(page, "- Fix: session cookie kept after sign-out", "Approve", "Always for this tool");
      await answer(page, "Deploy 1.4.0 to staging, after the pre-deploy checks?", "Approve");
      await page.locator("#asks .ask").filter({ hasText: "Deploy 1.4.0 to production, after" }).waitFor();
      await screenshot(page, "demo-console-1280");
      await answer(
        page,
        "Deploy 1.4.0 to production, after the pre-deploy checks?",
        "Deny",
        "For these exact arguments",
        "production needs the release manager",
      );
      await answer(page, "Deploy 1.4.0 to production WITHOUT the pre-deploy checks?", "Deny");

      const result = await demo.exited;
      expect(result.code).toBe(0);
      expect(result.stdout).toContain("approved 2, denied 2, expired 0");
      expect(result.stdout).toContain("denied by approver: production needs the release manager");
      expect(result.stdout).toContain("grants remembered for this project: 2");
      expect(existsSync(join(work, "deploys", "staging.json"))).toBe(true);
      expect(existsSync(join(work, "deploys", "production.json"))).toBe(false);
    } finally {
      demo.kill();
    }
  });
});
