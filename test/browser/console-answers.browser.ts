import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import type { AskResolution, PendingAsk } from "loopctl/ask";
import { createApprovalServer } from "loopctl/server";
import { makeAsk } from "../support/ask-fixtures.js";
import { launch } from "./support/chromium.js";
import type { Browser } from "./support/chromium.js";

// What the person at the console sees is what gets answered: keys that land
// on a control the person did not mean, text that renders as something it is
// not, and replies that go missing.

let browser: Browser;
beforeAll(async () => {
  browser = await launch();
});
afterAll(async () => {
  await browser?.close();
});
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A server over a fresh channel, and a page signed in to it and live. */
async function consoleWith(options: { allowedHosts?: string[] } = {}) {
  const [channel, approver] = ApprovalChannel.pair(8);
  const server = await createApprovalServer({ approver, ...options });
  cleanups.push(
    () => approver.close(),
    () => server.close(),
  );
  const page = await browser.page(1280);
  cleanups.push(() => page.close());
  return { channel, approver, server, page };
}

/** Parks `ask` on `channel`; the promise settles with the answer, or stays pending. */
function park(channel: ApprovalChannel, ask: PendingAsk, signal = new AbortController().signal) {
  let answer: AskResolution | undefined;
  const parked = channel.resolve(ask, { signal });
  parked.then(
    (a) => (answer = a),
    () => undefined,
  );
  return { parked, answer: () => answer };
}

const cardOf = (page: import("playwright-core").Page, ask: PendingAsk) =>
  page.locator(`#asks .ask[data-ask-id="${ask.id}"]`);

describe("the console's answer controls", () => {
  it("Enter on a remember choice does not submit: it neither approves nor denies", async () => {
    const { channel, server, page } = await consoleWith();
    await page.goto(server.consoleUrl);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    const ask = makeAsk(1);
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    for (const choice of ["Just this once", "For these exact arguments", "Always for this tool"]) {
      await card.getByLabel(choice).check();
      await page.keyboard.press("Enter");
    }
    // Space on a radio only chooses it; the card must still be waiting, its buttons live.
    await card.getByLabel("For these exact arguments").focus();
    await page.keyboard.press("Space");
    expect(await card.getByLabel("For these exact arguments").isChecked()).toBe(true);
    expect(await card.getByRole("button", { name: "Approve" }).isEnabled()).toBe(true);
    expect(await card.locator(".result").textContent()).toBe("");
    expect(waiting.answer()).toBeUndefined();
    // The buttons themselves still answer from the keyboard.
    await card.getByRole("button", { name: "Deny" }).focus();
    await page.keyboard.press("Enter");
    await expect(waiting.parked).resolves.toEqual({ type: "deny", remember: "this_call" });
  });

  it("when the focused ask ends elsewhere, focus goes to the next ask's heading, not to a button that would answer it", async () => {
    const { channel, approver, server, page } = await consoleWith();
    await page.goto(server.consoleUrl);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    const [first, second, third] = [makeAsk(1, { tool: "t1" }), makeAsk(2, { tool: "t2" }), makeAsk(3, { tool: "t3" })];
    const stop = new AbortController();
    park(channel, first, stop.signal);
    const waitingSecond = park(channel, second);
    const waitingThird = park(channel, third);
    await expect.poll(() => page.locator("#asks .ask").count()).toBe(3);

    // About to deny the first when it expires under the cursor: the keys meant for it must answer nothing else.
    await cardOf(page, first).getByRole("button", { name: "Deny" }).focus();
    stop.abort(new Error("deadline"));
    await expect.poll(() => cardOf(page, first).count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as unknown as FocusGlobals).document.activeElement?.textContent)).toBe(
      "t2",
    );
    await page.keyboard.press("Enter");
    await page.keyboard.press("Space");
    expect(await cardOf(page, second).locator(".result").textContent()).toBe("");
    expect(waitingSecond.answer()).toBeUndefined();

    // The same after the person's own answer: a second press of Enter does not approve the next ask.
    await cardOf(page, second).getByRole("button", { name: "Approve" }).focus();
    await page.keyboard.press("Enter");
    await expect(waitingSecond.parked).resolves.toEqual({ type: "approve" });
    await expect.poll(() => cardOf(page, second).count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as unknown as FocusGlobals).document.activeElement?.textContent)).toBe(
      "t3",
    );
    await page.keyboard.press("Enter");
    expect(await cardOf(page, third).locator(".result").textContent()).toBe("");
    expect(waitingThird.answer()).toBeUndefined();
    // From the heading, Tab reaches that ask's own controls.
    await page.keyboard.press("Tab");
    expect(
      await page.evaluate(() => (globalThis as unknown as FocusGlobals).document.activeElement?.getAttribute("value")),
    ).toBe("");
    expect(approver.resolve(third.id, { type: "deny" })).toBe(true);
  });
});

/** The little of the page's globals these tests read. */
interface FocusGlobals {
  readonly document: {
    readonly activeElement: { readonly textContent: string | null; getAttribute(name: string): string | null } | null;
  };
}
