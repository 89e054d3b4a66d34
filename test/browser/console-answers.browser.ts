import { describe, expect, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import type { AskResolution, PendingAsk } from "loopctl/ask";
import { Grant, GrantScope, MemoryGrantStore } from "loopctl/grant";
import { RecentRecords, createApprovalServer, signAnswerLink } from "loopctl/server";
import { makeAsk, outliveEndings } from "../support/ask-fixtures.js";
import { gateRecord } from "../support/cli-audit-fixtures.js";
import type { Page } from "playwright-core";
import { overflowsSideways, press, screenshot, useBrowser } from "./support/chromium.js";
import { startTcpProxy } from "./support/tcp-proxy.js";
import { consoleInExpress } from "./support/express-console.js";

/** A poll for a card or row to stop being held: the console holds one for 1 s after it moves (HOLD_MS), so a poll of vitest's default 1 s could end just before. */
const HELD_STILL = { timeout: 5_000 };

// What the person at the console sees is what gets answered: keys that land
// on a control the person did not mean, text that renders as something it is
// not, and replies that go missing.

const chromium = useBrowser();
const { cleanups } = chromium;

/** A server over a fresh channel, and a page signed in to it and live. */
async function consoleWith(options: Omit<Parameters<typeof createApprovalServer>[0], "approver"> = {}) {
  const [channel, approver] = ApprovalChannel.pair(8);
  const server = await createApprovalServer({ approver, ...options });
  cleanups.push(
    () => approver.close(),
    () => server.close(),
  );
  const page = await chromium.browser.page(1280);
  cleanups.push(() => page.close());
  return { channel, approver, server, page };
}

/** {@link consoleWith}, with the page opened on the console and live. */
async function liveConsole(options: Parameters<typeof consoleWith>[0] = {}) {
  const opened = await consoleWith(options);
  await opened.page.goto(opened.server.consoleUrl);
  await expect.poll(() => opened.page.locator("#status").textContent()).toBe("Live");
  return opened;
}

/**
 * A live console whose page reaches the server through a TCP proxy (closed after the test), so a
 * test can make the network go quiet under the page while the server and the test talk directly.
 */
async function consoleBehindProxy(options: Parameters<typeof consoleWith>[0] = {}) {
  const proxy = await startTcpProxy();
  cleanups.push(() => proxy.close());
  const opened = await consoleWith({ ...options, allowedHosts: [`127.0.0.1:${proxy.port}`] });
  proxy.forwardTo(opened.server.port);
  await opened.page.goto(`http://127.0.0.1:${proxy.port}/?token=${opened.server.token}`);
  await expect.poll(() => opened.page.locator("#status").textContent()).toBe("Live");
  return { ...opened, proxy };
}

/** Parks `ask` on `channel`; the promise settles with the answer, or stays pending. */
/** Records every announcement the page makes from now on; the function returned reads them, in order. */
async function recordAnnouncements(page: Page): Promise<() => Promise<string[]>> {
  await page.evaluate(`(() => {
    const announce = document.getElementById("announce");
    window.said = [];
    new MutationObserver(() => window.said.push(announce.textContent)).observe(announce, {
      childList: true,
      characterData: true,
      subtree: true,
    });
  })()`);
  return () => page.evaluate<string[]>("window.said");
}

function park(channel: ApprovalChannel, ask: PendingAsk, signal = new AbortController().signal) {
  let answer: AskResolution | undefined;
  const parked = channel.resolve(ask, { signal });
  parked.then(
    (a) => (answer = a),
    () => undefined,
  );
  return { parked, answer: () => answer };
}

/**
 * A console whose read_file ask ends, and whose id then parks again for delete_file (under
 * `signal`), while the page hears none of it: its stream stalled, though its next heartbeat is not
 * due, so the old card is still up, and live.
 */
async function askReplacedUnheard(signal?: AbortSignal) {
  const { proxy, channel, server, page } = await consoleBehindProxy();
  const before = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?", argsDigest: "1111111111111111" });
  const after = {
    ...before,
    tool: "delete_file",
    prompt: "Delete the whole home folder?",
    argsDigest: "2222222222222222",
  };
  const stop = new AbortController();
  park(channel, before, stop.signal);
  const card = cardOf(page, before);
  await card.waitFor();
  proxy.stall();
  stop.abort(new Error("run ended"));
  await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([]);
  // A channel refuses an id among its last endings: past them, the id parks again.
  await outliveEndings(channel);
  await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([]);
  const waiting = park(channel, after, signal);
  await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([after.id]);
  return { proxy, server, page, after, card, waiting };
}

/** How many ended asks the server's board remembers, answering 409 ask_ended for them. */
const BOARD_ENDINGS = 1024;

/**
 * Takes as many asks through `server`'s board as it remembers endings, each parked on `channel`,
 * listed by the server and withdrawn, so the server no longer knows the asks that ended before.
 */
async function outliveBoardEndings(channel: ApprovalChannel, server: { url: string; token: string }) {
  const listed = async () =>
    (
      (await (
        await fetch(`${server.url}api/asks`, { headers: { authorization: `Bearer ${server.token}` } })
      ).json()) as {
        asks: unknown[];
      }
    ).asks.length;
  const batch = 8;
  for (let n = 0; n < BOARD_ENDINGS; n += batch) {
    const stop = new AbortController();
    for (let i = 0; i < batch; i++) park(channel, makeAsk(10_000 + n + i), stop.signal);
    while ((await listed()) < batch) await new Promise((resolve) => setTimeout(resolve, 2));
    stop.abort(new Error("withdrawn"));
    while ((await listed()) > 0) await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

const cardOf = (page: import("playwright-core").Page, ask: PendingAsk) =>
  page.locator(`#asks .ask[data-ask-id="${ask.id}"]`);

/** The text of the result line of `ask`'s card, without waiting: "no card" once the card is gone. */
const resultOf = (page: import("playwright-core").Page, ask: PendingAsk) =>
  page.evaluate<string>(`document.querySelector('[data-ask-id="${ask.id}"] .result')?.textContent ?? "no card"`);

/** The class of the element that has the keyboard focus. */
const focusedClass = (page: import("playwright-core").Page) =>
  page.evaluate<string | undefined>("document.activeElement?.className");

/** How far the page can still scroll down, in px: 0 once it is scrolled to its end. */
const scrollLeft = (page: import("playwright-core").Page) =>
  page.evaluate<number>("document.documentElement.scrollHeight - Math.ceil(scrollY + innerHeight)");

describe("the console's answer controls", () => {
  it("offers the remember choices only when the server has a grant store to keep them in", async () => {
    const bare = await liveConsole();
    const ask = makeAsk(1, { tool: "deploy" });
    const waiting = park(bare.channel, ask);
    const card = cardOf(bare.page, ask);
    await card.waitFor();
    // The grants list has told the page the server has no store.
    await expect.poll(() => bare.page.locator("#grants-panel").isHidden()).toBe(true);
    expect(await card.getByRole("group", { name: "Remember this answer" }).isVisible()).toBe(false);
    expect(await card.getByLabel("Always for this tool").isVisible()).toBe(false);
    await press(card, "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });

    const kept = await liveConsole({ grants: new MemoryGrantStore() });
    const second = makeAsk(2, { tool: "deploy" });
    const remembered = park(kept.channel, second);
    const keptCard = cardOf(kept.page, second);
    await keptCard.getByRole("group", { name: "Remember this answer" }).waitFor();
    await keptCard.getByLabel("Always for this tool").check();
    await press(keptCard, "Approve");
    await expect(remembered.parked).resolves.toEqual({ type: "approve", remember: "this_tool" });
  });

  it("a tool name too long for its box is reached with Tab and scrolled from the keyboard to its end", async () => {
    const { channel, page } = await liveConsole();
    const tool = `read_file${"_".repeat(20_000)}_and_wipe_the_disk`;
    const ask = makeAsk(1, { tool, prompt: "Read it?" });
    park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    const name = card.locator(".tool");
    // From the page's start, once the card is laid out, Tab reaches the name's box before the card's controls.
    await card.and(page.locator("li:not([data-held])")).waitFor();
    await page.keyboard.press("Tab");
    expect(await focusedClass(page)).toBe("skip");
    await page.keyboard.press("Tab");
    expect(await focusedClass(page)).toBe("tool");
    await page.keyboard.press("End");
    await expect
      .poll(() => name.evaluate((el) => Math.ceil(el.scrollTop + el.clientHeight) >= el.scrollHeight))
      .toBe(true);
    // A short name takes no tab stop.
    const short = makeAsk(2, { tool: "deploy" });
    park(channel, short);
    await cardOf(page, short).waitFor();
    await expect.poll(() => cardOf(page, short).locator(".tool").getAttribute("tabindex")).toBe("-1");
  });

  it("each card's Approve and Deny are described by the tool they answer, so a list of the page's buttons tells them apart", async () => {
    const { channel, page } = await liveConsole();
    park(channel, makeAsk(1, { tool: "deploy" }));
    park(channel, makeAsk(2, { tool: "drop_database" }));
    await expect.poll(() => page.locator("#asks .ask").count()).toBe(2);
    const cdp = await page.context().newCDPSession(page);
    const { nodes } = (await cdp.send("Accessibility.getFullAXTree")) as {
      nodes: { role?: { value?: string }; name?: { value?: string }; description?: { value?: string } }[];
    };
    const buttons = nodes
      .filter((node) => node.role?.value === "button" && /^(Approve|Deny)$/.test(node.name?.value ?? ""))
      .map((node) => `${node.name?.value} — ${node.description?.value ?? ""}`);
    expect(buttons).toEqual(["Approve — deploy", "Deny — deploy", "Approve — drop_database", "Deny — drop_database"]);
    await cdp.detach();
  });

  it("Enter on a remember choice does not submit: it neither approves nor denies", async () => {
    const { channel, page } = await liveConsole({ grants: new MemoryGrantStore() });
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
    const { channel, approver, page } = await liveConsole({ grants: new MemoryGrantStore() });
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

describe("an answer whose reply goes missing", () => {
  it("a reply that is not the server's (a sign-in page from a proxy in front) is not taken for an answer or a revoke", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const grants = new MemoryGrantStore();
    const grant = new Grant("deploy", "allow", GrantScope.thisTool());
    await grants.save(grant);
    // A single sign-on proxy in front of the console: once its own session ends, it answers every
    // request with its sign-in page, 200 and HTML, and passes nothing on.
    let signedOut = false;
    // Or a page of its own with another status, as some proxies answer a conflict or a block.
    let proxyStatus = 200;
    const { port, handler, closers } = await consoleInExpress({ approver, grants }, (app, mounted) => {
      app.use("/approvals", (_req, res, next) => {
        if (signedOut) res.status(proxyStatus).type("html").send("<!doctype html><title>Sign in</title><form></form>");
        else next();
      });
      app.use("/approvals", mounted.handle);
    });
    cleanups.push(() => approver.close(), ...closers);
    const page = await chromium.browser.page(1280);
    cleanups.push(() => page.close());
    await page.goto(`http://127.0.0.1:${port}/approvals/?token=${handler.token}`);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    const ask = makeAsk(1, { tool: "deploy", prompt: "Deploy to production?" });
    const waiting = park(channel, ask);
    await cardOf(page, ask).waitFor();
    await page.locator("#grants tbody tr").waitFor();

    signedOut = true;
    await press(cardOf(page, ask), "Approve");
    await expect.poll(() => resultOf(page, ask)).toMatch(/^Not confirmed: the reply was not the approval server's/);
    expect(await cardOf(page, ask).getByRole("button", { name: "Approve" }).isEnabled()).toBe(true);
    expect(waiting.answer()).toBeUndefined();
    // A 409 that is not the server's is no "already ended": the card stays, to be answered again.
    proxyStatus = 409;
    await press(cardOf(page, ask), "Approve");
    await expect.poll(() => resultOf(page, ask)).toMatch(/^Not answered \(409\)/);
    expect(await cardOf(page, ask).getByRole("button", { name: "Approve" }).isEnabled()).toBe(true);
    expect(waiting.answer()).toBeUndefined();
    // Nor is a proxy's 404 page the server's word that it no longer knows the ask.
    proxyStatus = 404;
    await press(cardOf(page, ask), "Approve");
    await expect.poll(() => resultOf(page, ask)).toMatch(/^Not answered \(404\)/);
    expect(await cardOf(page, ask).getByRole("button", { name: "Approve" }).isEnabled()).toBe(true);
    expect(waiting.answer()).toBeUndefined();
    proxyStatus = 200;

    // As a person would: pressed again while the row is held for having moved (the card above grew).
    for (let attempt = 0; attempt < 5; attempt++) {
      await expect.poll(() => page.locator("#grants tr[data-held]").count(), HELD_STILL).toBe(0);
      await page.getByRole("button", { name: "Revoke the remembered approval for deploy" }).click();
      await expect.poll(() => page.locator("#announce").textContent()).not.toMatch(/^New ask/);
      if (!(await page.locator("#announce").textContent())?.startsWith("Not revoked")) break;
    }
    await expect
      .poll(() => page.locator("#announce").textContent())
      .toMatch(/^Could not revoke the grant for deploy \(the reply was not the approval server's\)/);
    expect((await grants.load()).map((g) => g.id)).toEqual([grant.id]);

    // Once through again, the same press answers.
    signedOut = false;
    await press(cardOf(page, ask), "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("a lost reply is not reported as nothing answered, and the retry says how the ask ended", async () => {
    const { proxy, channel, server, page } = await consoleBehindProxy();
    const ask = makeAsk(1);
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();

    // The network goes quiet while the answer is on its way: the server takes it, the page hears
    // nothing back, not even the ask's end on the stream (well before the page would miss a heartbeat).
    let posts = 0;
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      posts += 1;
      proxy.stall();
      const reply = await route.fetch({ url: `${server.url}api/asks/${ask.id}` });
      if (posts === 1) return route.abort("connectionreset");
      return route.fulfill({ response: reply });
    });
    await press(card, "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
    const result = card.locator(".result");
    await expect.poll(() => result.textContent()).not.toBe("Sending…");
    expect(await result.textContent()).not.toContain("nothing was answered");
    expect(await result.textContent()).toContain("may not have arrived");

    // Trying again is safe (an ask takes one answer), and tells what the first try did.
    await press(card, "Approve");
    await expect
      .poll(() => result.textContent())
      .toBe("This ask already ended: approved. This answer changed nothing.");
    expect(posts).toBe(2);
  });

  it.each([
    ["confirmed", "Ask for deploy ended: approved"],
    [
      "lost",
      "Ask for deploy ended: ended while the page was not connected. Your answer: No reply from the server: the answer may not have arrived.",
    ],
  ])(
    "an answer whose reply comes after the stream dropped and the page caught up is told (%s), not taken for an ask that ended unseen",
    async (outcome, told) => {
      const { proxy, channel, server, page } = await consoleBehindProxy();
      const ask = makeAsk(1, { tool: "deploy" });
      const waiting = park(channel, ask);
      const card = cardOf(page, ask);
      await card.waitFor();
      // Every announcement the page makes, in order.
      const said = await recordAnnouncements(page);

      // The stream drops as the answer leaves; the server takes it, and its reply is held up until
      // the page has reconnected and re-read the pending list, where the ask no longer is.
      let release = () => {};
      const released = new Promise<void>((resolve) => (release = resolve));
      await page.route("**/api/asks/*", async (route) => {
        if (route.request().method() !== "POST") return route.fallback();
        proxy.cut();
        const response = await route.fetch({ url: `${server.url}api/asks/${ask.id}` });
        await released;
        return outcome === "lost" ? route.abort("connectionreset") : route.fulfill({ response });
      });
      await press(card, "Approve");
      await expect(waiting.parked).resolves.toEqual({ type: "approve" });
      await expect.poll(() => page.locator("#status").textContent()).not.toBe("Live");
      proxy.restore();
      await expect.poll(() => page.locator("#status").textContent(), { timeout: 20_000 }).toBe("Live");
      // The card waits for the reply to its answer, instead of going as an ask that ended unseen.
      expect(await resultOf(page, ask)).toBe("Sending…");

      release();
      await expect.poll(async () => (await said()).some((text) => text.startsWith(told))).toBe(true);
      expect(await card.count()).toBe(0);
      // Nothing said the ask ended unseen before the reply told what became of the answer.
      const announced = await said();
      expect(announced.findIndex((text) => text.includes("not connected"))).toBe(
        outcome === "lost" ? announced.length - 1 : -1,
      );
    },
  );

  it("an answer confirmed after its card went on the ask's end heard on the stream is told once, by that end", async () => {
    const { channel, page } = await liveConsole();
    const ask = makeAsk(1, { tool: "deploy" });
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    // Every announcement the page makes from here on, in order.
    const said = await recordAnnouncements(page);
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      const response = await route.fetch();
      await released;
      return route.fulfill({ response });
    });
    await press(card, "Deny");
    await expect(waiting.parked).resolves.toEqual({ type: "deny" });
    await expect.poll(() => card.count()).toBe(0);
    expect(await page.locator("#announce").textContent()).toBe("Ask for deploy ended: denied");
    // A confirmed answer reloads the grants once its outcome is told: then the reply has been read.
    const told = page.waitForRequest((request) => request.url().endsWith("/api/grants"));
    release();
    await told;
    expect(await said()).toEqual(["Ask for deploy ended: denied"]);
  });

  it("a denial racing an approval made elsewhere: the card stays to say the denial changed nothing, not vanishing as if denied", async () => {
    const { channel, server, page } = await liveConsole();
    const ask = makeAsk(1, { tool: "deploy" });
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    // The page's denial is held on its way; meanwhile another approver approves.
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      await released;
      return route.fallback();
    });
    await press(card, "Deny");
    const heard = page.waitForRequest((request) => request.url().endsWith("/api/grants"));
    const elsewhere = await fetch(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" },
      body: JSON.stringify({ type: "approve" }),
    });
    expect(elsewhere.status).toBe(200);
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
    // The approval's end is heard (the page reads the grants again on it): the card, whose denial
    // is still on its way, is not taken away as if that denial had done it.
    await heard;
    expect(await card.count()).toBe(1);
    release();
    await expect.poll(() => resultOf(page, ask)).toBe("This ask already ended: approved. This answer changed nothing.");
    expect(await card.locator(".result").isVisible()).toBe(true);
    await expect.poll(() => card.count(), { timeout: 10_000 }).toBe(0);
    expect(await page.locator("#announce").textContent()).toBe("Ask for deploy ended: approved");
  });

  it("an answer the server refuses as for an ask it no longer knows ends the card, as one that ended does", async () => {
    const { proxy, channel, server, page } = await consoleBehindProxy();
    const ask = makeAsk(1, { tool: "deploy" });
    const stop = new AbortController();
    park(channel, ask, stop.signal);
    const card = cardOf(page, ask);
    await card.waitFor();
    // The page stops hearing the stream (not yet for long enough to notice), the ask ends, and the
    // server forgets its ending under a thousand later ones: it knows nothing of this id any more.
    proxy.stall();
    stop.abort(new Error("deadline"));
    await outliveBoardEndings(channel, server);
    let posts = 0;
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      posts += 1;
      return route.fulfill({ response: await route.fetch({ url: `${server.url}api/asks/${ask.id}` }) });
    });
    await press(card, "Approve");
    await expect
      .poll(() => resultOf(page, ask))
      .toBe("The server no longer knows this ask: it ended, and nothing was answered.");
    // Not to be answered again: its buttons stay off until the card goes, saying why.
    expect(await card.getByRole("button", { name: "Approve" }).isEnabled()).toBe(false);
    await expect.poll(() => card.count(), { timeout: 10_000 }).toBe(0);
    expect(await page.locator("#announce").textContent()).toBe("Ask for deploy ended: the server no longer knows it");
    expect(posts).toBe(1);
  });

  it("an approver that failed after the answer may have landed is not reported as nothing answered", async () => {
    const { proxy, channel, server, page } = await consoleBehindProxy();
    const ask = makeAsk(1);
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    // The answer reaches the approver, which then fails (a database connection lost after the answer
    // committed): the page gets the server's 503 for that, and nothing on the stream meanwhile.
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      proxy.stall();
      await route.fetch({ url: `${server.url}api/asks/${ask.id}` });
      return route.fulfill({
        status: 503,
        contentType: "application/json",
        body: JSON.stringify({
          error: "approver_unavailable",
          message:
            "the approver failed before saying whether the answer reached the call; it may have: check the ask before answering again",
        }),
      });
    });
    await press(card, "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
    const result = card.locator(".result");
    await expect.poll(() => result.textContent()).not.toBe("Sending…");
    expect(await result.textContent()).not.toContain("Not answered");
    expect(await result.textContent()).toContain("Not confirmed (503)");
  });
});

describe("an ask id that comes back with another call behind it", () => {
  it("after a reconnect, a card whose ask changed under the same id shows the new ask, not the old text", async () => {
    const { proxy, channel, server, page } = await consoleBehindProxy();
    // Ids from a seeded generator repeat across runs: the same id, another call.
    const before = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?", argsDigest: "1111111111111111" });
    const after = {
      ...before,
      tool: "delete_file",
      prompt: "Delete the whole home folder?",
      argsDigest: "2222222222222222",
    };
    const stop = new AbortController();
    park(channel, before, stop.signal);
    const card = cardOf(page, before);
    await card.waitFor();
    expect(await card.locator(".prompt").textContent()).toBe("Read notes.txt?");

    proxy.cut();
    await expect.poll(() => page.locator("#status").textContent()).not.toBe("Live");
    stop.abort(new Error("run ended"));
    await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([]);
    // A channel refuses an id among its last endings: past them, the id parks again.
    await outliveEndings(channel);
    await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([]);
    const waiting = park(channel, after);
    await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([after.id]);
    proxy.restore();
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 20_000 }).toBe("Live");

    await expect.poll(() => card.locator(".prompt").textContent()).toBe("Delete the whole home folder?");
    expect(await card.locator(".tool").textContent()).toBe("delete_file");
    expect(await card.locator(".digest").textContent()).toBe("2222222222222222");
    expect(await page.locator("#asks .ask").count()).toBe(1);
    await press(card, "Deny");
    await expect(waiting.parked).resolves.toEqual({ type: "deny" });
  });
  it("a call just like the one that ended unseen, parked under its id, shows its own age and deadline, not the old call's", async () => {
    const proxy = await startTcpProxy();
    cleanups.push(() => proxy.close());
    // The server's clock, which ages and deadlines are counted by.
    let clock = Date.now();
    const { channel, server, page } = await consoleWith({
      allowedHosts: [`127.0.0.1:${proxy.port}`],
      askTimeoutMs: 600_000,
      now: () => clock,
    });
    proxy.forwardTo(server.port);
    const ask = makeAsk(1, { tool: "deploy", prompt: "Deploy to production?" });
    const stop = new AbortController();
    park(channel, ask, stop.signal);
    await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([ask.id]);
    clock += 540_000;
    await page.goto(`http://127.0.0.1:${proxy.port}/?token=${server.token}`);
    const card = cardOf(page, ask);
    await card.waitFor();
    await expect.poll(() => card.locator(".left").textContent()).toMatch(/^(1 min 0 s|5\d s) left$/);

    // While the page is away, the call ends and another just like it (the same id, tool, prompt and
    // arguments: a seeded run started again) parks, with the whole deadline ahead of it.
    proxy.cut();
    await expect.poll(() => page.locator("#status").textContent()).not.toBe("Live");
    stop.abort(new Error("run ended"));
    await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([]);
    await outliveEndings(channel);
    const waiting = park(channel, ask);
    await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([ask.id]);
    proxy.restore();
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 20_000 }).toBe("Live");

    await expect.poll(() => card.locator(".left").textContent()).toMatch(/^(10 min 0 s|9 min 5\d s) left$/);
    expect(await card.locator(".age").textContent()).toMatch(/^parked \d+ s ago$/);
    expect(await page.locator("#asks .ask").count()).toBe(1);
    await press(card, "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("an answer made for the old ask is refused by the server, and the card then shows the call that holds the id", async () => {
    const { server, page, after, card, waiting } = await askReplacedUnheard();
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      return route.fulfill({ response: await route.fetch({ url: `${server.url}api/asks/${after.id}` }) });
    });
    expect(await card.locator(".prompt").textContent()).toBe("Read notes.txt?");
    expect(await page.locator("#status").textContent()).toBe("Live");
    await press(card, "Approve");

    await expect.poll(() => card.locator(".prompt").textContent()).toBe("Delete the whole home folder?");
    expect(await card.locator(".result").textContent()).toContain("nothing was answered");
    expect(waiting.answer()).toBeUndefined();
    expect(await card.getByRole("button", { name: "Approve" }).isEnabled()).toBe(true);
    await press(card, "Deny");
    await expect(waiting.parked).resolves.toEqual({ type: "deny" });
  });

  it("a refusal for another call that comes after that call ended too leaves no card to answer for it", async () => {
    const stopAfter = new AbortController();
    const { proxy, server, page, after, card, waiting } = await askReplacedUnheard(stopAfter.signal);
    let replied!: () => void;
    const fulfilled = new Promise<void>((resolve) => (replied = resolve));
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      const response = await route.fetch({ url: `${server.url}api/asks/${after.id}` });
      // The server's refusal names the call that holds the id; while it is on its way, that call
      // ends too, and the page hears all of it (the old call's end, the new one's start and end).
      stopAfter.abort(new Error("run ended"));
      await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([]);
      proxy.resume();
      await expect.poll(() => page.locator("#asks .ask").count()).toBe(0);
      await route.fulfill({ response });
      replied();
    });
    await press(card, "Approve");
    await fulfilled;
    await expect
      .poll(() => page.locator(".notice").first().textContent())
      .toContain("Your answer for read_file did not arrive: this ask changed before it did; nothing was answered.");
    // No card shows the call that ended, answerable as if it still waited.
    expect(await page.locator("#asks .ask").count()).toBe(0);
    expect(await page.locator("#status").textContent()).toBe("Live");
    await expect(waiting.parked).rejects.toThrow("run ended");
  });
});

describe("a page that cannot be sure what is pending", () => {
  it("a stream that goes silent without closing makes every card stale, with no Approve or Deny, until the page has caught up", async () => {
    const { proxy, channel, server, page } = await consoleBehindProxy({ heartbeatMs: 300 });
    const stop = new AbortController();
    const ending = makeAsk(1, { prompt: "ends while the page hears nothing" });
    const staying = makeAsk(2, { prompt: "still waiting" });
    park(channel, ending, stop.signal);
    const waiting = park(channel, staying);
    await expect.poll(() => page.locator("#asks .ask").count()).toBe(2);
    const card = cardOf(page, staying);
    expect(await card.getAttribute("class")).toBe("ask");
    expect(await card.locator(".stale-note").isVisible()).toBe(false);

    // Packets stop, nothing closes: only the missing heartbeats tell.
    proxy.stall();
    await expect.poll(() => card.getAttribute("class"), { timeout: 10_000 }).toBe("ask stale");
    expect(await page.locator("#status").textContent()).not.toBe("Live");
    expect(await card.locator(".stale-note").isVisible()).toBe(true);
    expect(await card.getByRole("button", { name: "Approve" }).isDisabled()).toBe(true);
    expect(await card.getByRole("button", { name: "Deny" }).isDisabled()).toBe(true);
    expect(await page.locator("#announce").textContent()).toContain("Connection lost");
    stop.abort(new Error("run ended"));
    await expect.poll(() => fetchAsks(server.url, server.token)).toEqual([staying.id]);
    // Two heartbeat periods later the page still shows the ended ask, and still will not answer it.
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(await cardOf(page, ending).getAttribute("class")).toBe("ask stale");
    expect(await cardOf(page, ending).getByRole("button", { name: "Approve" }).isDisabled()).toBe(true);

    proxy.resume();
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 20_000 }).toBe("Live");
    expect(await cardOf(page, ending).count()).toBe(0);
    expect(await card.getAttribute("class")).toBe("ask");
    expect(await card.locator(".stale-note").isVisible()).toBe(false);
    expect(await page.locator("#announce").textContent()).toContain("Up to date again");
    await press(card, "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("a pending list that is not the server's (a proxy's JSON, 200) is not taken for one: the page says so and tries again", async () => {
    const { channel, server, page } = await consoleWith();
    const ask = makeAsk(1, { tool: "deploy" });
    const waiting = park(channel, ask);
    const list = (url: URL) => url.pathname === "/api/asks";
    await page.route(list, (route) =>
      route.fulfill({ status: 200, contentType: "application/json", body: '{"status":"signed_out"}' }),
    );
    await page.goto(server.consoleUrl);
    await expect
      .poll(() => page.locator("#status").textContent(), { timeout: 5_000 })
      .toBe("Could not read the pending asks; retrying…");
    await page.unroute(list);
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 10_000 }).toBe("Live");
    await press(cardOf(page, ask), "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("a stream the server refuses (503 too_many_streams) says so, in the server's words, and the page gets in once a stream is free", async () => {
    const { channel, server, page } = await consoleWith({ maxStreams: 1 });
    const ask = makeAsk(1, { tool: "deploy" });
    const waiting = park(channel, ask);
    // Another console holds the one stream the server allows.
    const other = await chromium.browser.page(1280);
    cleanups.push(() => other.close());
    await other.goto(server.consoleUrl);
    await expect.poll(() => other.locator("#status").textContent()).toBe("Live");
    await page.goto(server.consoleUrl);
    await expect
      .poll(() => page.locator("#status").textContent(), { timeout: 10_000 })
      .toBe("The server refused to keep this page up to date (503: too many event streams are open); retrying…");
    expect(await page.locator("#asks .ask").count()).toBe(0);
    await other.close();
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 10_000 }).toBe("Live");
    await press(cardOf(page, ask), "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("with no card shown, a page that lost the stream does not say nothing is waiting: asks parked meanwhile are not shown", async () => {
    const { proxy, channel, page } = await consoleBehindProxy({ heartbeatMs: 300 });
    const empty = page.locator("#asks-empty");
    expect(await empty.textContent()).toMatch(/^Nothing is waiting/);
    proxy.stall();
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 10_000 }).not.toBe("Live");
    // An ask parks while the page hears nothing: it is waiting, and the page cannot know.
    const ask = makeAsk(1, { tool: "deploy" });
    const waiting = park(channel, ask);
    expect(await empty.isVisible()).toBe(true);
    expect(await empty.textContent()).toBe(
      "Not up to date: the page lost touch with the server, and asks parked meanwhile are not shown. They appear once the page has caught up.",
    );
    proxy.resume();
    await cardOf(page, ask).waitFor({ timeout: 20_000 });
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    await press(cardOf(page, ask), "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
    await expect.poll(() => empty.textContent()).toMatch(/^Nothing is waiting/);
  });

  it("a page signed out while its stream is open stops following the server: every card goes stale, with no Approve or Deny", async () => {
    const { channel, page } = await liveConsole();
    const ask = makeAsk(1, { prompt: "Deploy to production?" });
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    // The session cookie goes (cleared with the browser's data); the stream opened with it stays open.
    await page.context().clearCookies();
    await press(card, "Deny");
    await expect.poll(() => page.locator("#status").textContent()).toMatch(/^Signed out/);
    expect(await card.getAttribute("class")).toBe("ask stale");
    expect(await card.locator(".stale-note").isVisible()).toBe(true);
    expect(await card.getByRole("button", { name: "Approve" }).isDisabled()).toBe(true);
    expect(await card.getByRole("button", { name: "Deny" }).isDisabled()).toBe(true);
    expect(waiting.answer()).toBeUndefined();
    // Catching up will not bring Approve and Deny back: the card and the announcement say what will.
    expect(await card.locator(".stale-note").textContent()).toMatch(/^Signed out: .*open the console link/);
    expect(await page.locator("#announce").textContent()).toMatch(/^Signed out: .*Open the console link/);
  });

  it("a page whose server restarted with another token says it is signed out, on its cards too, not that it will catch up", async () => {
    const [channel, approver] = ApprovalChannel.pair(8);
    let server = await createApprovalServer({ approver });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const page = await chromium.browser.page(1280);
    cleanups.push(() => page.close());
    await page.goto(server.consoleUrl);
    const ask = makeAsk(1);
    park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    await server.close();
    server = await createApprovalServer({ approver, port: server.port });
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 10_000 }).toMatch(/^Signed out/);
    expect(await card.getAttribute("class")).toBe("ask stale");
    expect(await card.getByRole("button", { name: "Approve" }).isDisabled()).toBe(true);
    expect(await card.locator(".stale-note").textContent()).toMatch(/^Signed out: .*open the console link/);
    expect(await page.locator("#announce").textContent()).toMatch(/^Signed out: .*Open the console link/);
  });

  it("an answer whose request gets no reply at all ends on its own, says the answer may not have arrived, and can be sent again", async () => {
    const { channel, page } = await liveConsole({ heartbeatMs: 300 });
    const ask = makeAsk(1);
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    // The request leaves the page and nothing ever comes back (nor reaches the server).
    const swallowed: import("playwright-core").Route[] = [];
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      swallowed.push(route);
    });
    await press(card, "Approve");
    const result = card.locator(".result");
    expect(await result.textContent()).toBe("Sending…");
    await expect.poll(() => result.textContent(), { timeout: 10_000 }).toContain("No reply from the server");
    expect(swallowed).toHaveLength(1);
    expect(waiting.answer()).toBeUndefined();
    await page.unroute("**/api/asks/*");
    expect(await card.getByRole("button", { name: "Approve" }).isEnabled()).toBe(true);
    await press(card, "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });
});

describe("a card that moves", () => {
  it("a card that slid under the pointer as the one above it ended does not take the click meant for that one", async () => {
    const { channel, page } = await liveConsole();
    const stop = new AbortController();
    const upper = makeAsk(1, { prompt: "Run the tests?" });
    const lower = makeAsk(2, { prompt: "Run the tests?" });
    park(channel, upper, stop.signal);
    const waiting = park(channel, lower);
    await expect.poll(() => page.locator("#asks .ask").count()).toBe(2);
    const still = page.locator("li:not([data-held])");
    await cardOf(page, lower).and(still).waitFor();
    const box = await cardOf(page, upper).getByRole("button", { name: "Approve" }).boundingBox();
    if (box === null) throw new Error("the upper card's Approve has no box");
    const [x, y] = [box.x + box.width / 2, box.y + box.height / 2];

    // The upper ask ends as the person reaches for its Approve: the lower card takes its place.
    stop.abort(new Error("run ended"));
    await cardOf(page, upper).waitFor({ state: "detached" });
    const under = await cardOf(page, lower).getByRole("button", { name: "Approve" }).boundingBox();
    if (under === null) throw new Error("the lower card's Approve has no box");
    expect(x > under.x && x < under.x + under.width && y > under.y && y < under.y + under.height).toBe(true);
    await page.mouse.click(x, y);
    const result = cardOf(page, lower).locator(".result");
    await expect.poll(() => result.textContent()).toBe("This card moved just now: look again, then press.");
    expect(waiting.answer()).toBeUndefined();

    // Once it has held still, the same press answers it.
    await cardOf(page, lower).and(still).waitFor();
    await page.mouse.click(x, y);
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("a card that dropped under the pointer as the page scrolled back, the list's last card gone, does not take the click meant for that one", async () => {
    const { channel, page } = await liveConsole();
    const stop = new AbortController();
    const tall = Array.from({ length: 40 }, (_, i) => `step ${i + 1}`).join("\n");
    park(channel, makeAsk(1, { prompt: tall }));
    const upper = makeAsk(2, { prompt: `Drop the production database?\n${tall}` });
    const waiting = park(channel, upper);
    const last = makeAsk(3, { prompt: `Run the tests?\n${tall}` });
    park(channel, last, stop.signal);
    await expect.poll(() => page.locator("#asks .ask").count()).toBe(3);
    // The person has scrolled to the end of the list, to the last card.
    await page.mouse.move(5, 450);
    await page.mouse.wheel(0, 10_000);
    await expect.poll(() => scrollLeft(page)).toBe(0);
    await expect.poll(() => page.locator("#asks .ask[data-held]").count(), HELD_STILL).toBe(0);
    const box = await cardOf(page, last).getByRole("button", { name: "Approve" }).boundingBox();
    if (box === null) throw new Error("the last card's Approve has no box");
    const [x, y] = [box.x + box.width / 2, box.y + box.height / 2];
    const upperTop = async () =>
      ((await cardOf(page, upper).boundingBox())?.y ?? NaN) + (await page.evaluate<number>("scrollY"));
    const upperOnPage = await upperTop();

    // The last ask ends as the person reaches for its Approve: the page, shorter by a card, scrolls
    // back by a card's height, and the card above drops into its place without moving on the page.
    stop.abort(new Error("run ended"));
    await cardOf(page, last).waitFor({ state: "detached" });
    expect(await upperTop()).toBe(upperOnPage);
    const under = await cardOf(page, upper).getByRole("button", { name: "Approve" }).boundingBox();
    if (under === null) throw new Error("the upper card's Approve has no box");
    expect(x > under.x && x < under.x + under.width && y > under.y && y < under.y + under.height).toBe(true);
    await page.mouse.click(x, y);
    await expect.poll(() => resultOf(page, upper)).toBe("This card moved just now: look again, then press.");
    expect(waiting.answer()).toBeUndefined();

    // Once it has held still, the same press answers it.
    await expect.poll(() => page.locator("#asks .ask[data-held]").count(), HELD_STILL).toBe(0);
    await page.mouse.click(x, y);
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("a scroll the person makes holds nothing: a press right after a wheel scroll answers", async () => {
    const { channel, page } = await liveConsole();
    const tall = Array.from({ length: 40 }, (_, i) => `step ${i + 1}`).join("\n");
    park(channel, makeAsk(1, { prompt: tall }));
    const last = makeAsk(2, { prompt: `Run the tests?\n${tall}` });
    const waiting = park(channel, last);
    await expect.poll(() => page.locator("#asks .ask").count()).toBe(2);
    await expect.poll(() => page.locator("#asks .ask[data-held]").count(), HELD_STILL).toBe(0);
    await page.mouse.move(5, 450);
    await page.mouse.wheel(0, 10_000);
    await expect.poll(() => scrollLeft(page)).toBe(0);
    const box = await cardOf(page, last).getByRole("button", { name: "Approve" }).boundingBox();
    if (box === null) throw new Error("the last card's Approve has no box");
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("a second press on Revoke does not revoke the grant that moved up into the revoked one's place", async () => {
    const grants = new MemoryGrantStore();
    const upper = new Grant("deploy", "allow", GrantScope.thisTool());
    const lower = new Grant("delete_db", "allow", GrantScope.thisTool());
    await grants.save(upper);
    await grants.save(lower);
    const { page } = await liveConsole({ grants });
    const rowOf = (grant: Grant) => page.locator(`#grants tbody tr[data-grant-id="${grant.id}"]`);
    const still = page.locator("tr:not([data-held])");
    await rowOf(lower).and(still).waitFor();

    // A double press: the first revokes the upper grant, the row below moves up under the pointer.
    // The page holds a row whose place changed since it last looked, also at the press itself: a
    // shift it had not yet seen (the page settling) refuses that first press, so it is made again
    // until it is taken.
    let x = 0;
    let y = 0;
    for (let attempt = 0; (await rowOf(upper).count()) > 0; attempt++) {
      if (attempt === 5) throw new Error("no press on the upper row's Revoke was taken");
      await rowOf(upper).and(still).waitFor();
      const box = await rowOf(upper)
        .getByRole("button", { name: /^Revoke/ })
        .boundingBox();
      if (box === null) throw new Error("the upper row's Revoke has no box");
      [x, y] = [box.x + box.width / 2, box.y + box.height / 2];
      await page.mouse.click(x, y);
      await rowOf(upper)
        .waitFor({ state: "detached", timeout: 3_000 })
        .catch(() => undefined);
    }
    const under = await rowOf(lower)
      .getByRole("button", { name: /^Revoke/ })
      .boundingBox();
    if (under === null) throw new Error("the lower row's Revoke has no box");
    expect(x > under.x && x < under.x + under.width && y > under.y && y < under.y + under.height).toBe(true);
    await page.mouse.click(x, y);
    await expect
      .poll(() => rowOf(lower).locator(".row-note").textContent())
      .toBe("This row moved just now: look again, then press.");
    expect((await grants.load()).map((g) => g.id)).toEqual([lower.id]);
    // The note is laid over the page, not among the rows: the button it points at stays put.
    expect(
      await rowOf(lower)
        .getByRole("button", { name: /^Revoke/ })
        .boundingBox(),
    ).toEqual(under);
    // The focus went to the heading, not onto the next Revoke: Enter there revokes nothing.
    expect(await page.evaluate(() => (globalThis as unknown as FocusGlobals).document.activeElement?.id)).toBe(
      "grants-title",
    );
    await page.keyboard.press("Enter");
    expect((await grants.load()).map((g) => g.id)).toEqual([lower.id]);

    // Once it has held still, the same press revokes it.
    await rowOf(lower).and(still).waitFor();
    await page.mouse.click(x, y);
    await expect.poll(async () => (await grants.load()).length).toBe(0);
  });

  it("after a revoke by keyboard the focus is on the heading: a second Enter revokes nothing", async () => {
    const grants = new MemoryGrantStore();
    const upper = new Grant("deploy", "allow", GrantScope.thisTool());
    const lower = new Grant("delete_db", "allow", GrantScope.thisTool());
    await grants.save(upper);
    await grants.save(lower);
    const { page } = await liveConsole({ grants });
    const rowOf = (grant: Grant) => page.locator(`#grants tbody tr[data-grant-id="${grant.id}"]`);
    await rowOf(upper)
      .getByRole("button", { name: /^Revoke/ })
      .focus();
    await page.keyboard.press("Enter");
    await rowOf(upper).waitFor({ state: "detached" });
    await expect
      .poll(() => page.evaluate(() => (globalThis as unknown as FocusGlobals).document.activeElement?.id))
      .toBe("grants-title");
    await page.keyboard.press("Enter");
    await page.keyboard.press("Space");
    expect((await grants.load()).map((g) => g.id)).toEqual([lower.id]);
  });

  it("a press as the window comes back to the front is held: a pop-up closed under a double-click approves nothing", async () => {
    const grants = new MemoryGrantStore();
    const grant = new Grant("deploy", "allow", GrantScope.thisTool());
    await grants.save(grant);
    const { channel, page } = await liveConsole({ grants });
    const ask = makeAsk(1);
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    const row = page.locator(`#grants tbody tr[data-grant-id="${grant.id}"]`);
    await card.and(page.locator("li:not([data-held])")).waitFor();
    await row.and(page.locator("tr:not([data-held])")).waitFor();
    const toFront = (): Promise<unknown> =>
      page.evaluate(() => {
        const g = globalThis as unknown as { dispatchEvent(event: Event): boolean };
        g.dispatchEvent(new Event("focus"));
      });

    // The window comes back to the front (what covered it closed) as the second press of a double-click lands.
    await toFront();
    await card.getByRole("button", { name: "Approve" }).click();
    await expect
      .poll(() => card.locator(".result").textContent())
      .toBe("This page came to the front just now: look again, then press.");
    expect(waiting.answer()).toBeUndefined();
    // The card's note moved the rows below it: they hold still first.
    await row.and(page.locator("tr:not([data-held])")).waitFor();
    await toFront();
    await row.getByRole("button", { name: /^Revoke/ }).click();
    await expect
      .poll(() => row.locator(".row-note").textContent())
      .toBe("This page came to the front just now: look again, then press.");
    expect((await grants.load()).map((g) => g.id)).toEqual([grant.id]);

    // Once the page has been in front a moment, the press answers.
    await press(card, "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("a button that slid under the pointer within its own card, as the card's stale note went, does not take the click meant for what was there", async () => {
    const { proxy, channel, page } = await consoleBehindProxy();
    const ask = makeAsk(1, { prompt: "Delete the release branch?" });
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.and(page.locator("li:not([data-held])")).waitFor();

    // The page loses touch: the card shows its stale note, and the person goes for the reason field to deny.
    proxy.cut();
    await expect.poll(() => card.getAttribute("class")).toBe("ask stale");
    await expect.poll(() => card.locator(".stale-note").isVisible()).toBe(true);
    const box = await card.locator(".reason").boundingBox();
    if (box === null) throw new Error("the reason field has no box");
    const [x, y] = [box.x + 20, box.y + 10];
    const cardTop = (await card.boundingBox())?.y;

    // The page catches up as the person clicks: the note goes, and Approve rises under the pointer.
    proxy.restore();
    await expect.poll(() => card.locator(".stale-note").isVisible(), { timeout: 20_000 }).toBe(false);
    expect((await card.boundingBox())?.y).toBe(cardTop);
    const under = await card.getByRole("button", { name: "Approve" }).boundingBox();
    if (under === null) throw new Error("Approve has no box");
    expect(x > under.x && x < under.x + under.width && y > under.y && y < under.y + under.height).toBe(true);
    await page.mouse.click(x, y);
    await expect.poll(() => resultOf(page, ask)).toBe("This card moved just now: look again, then press.");
    expect(waiting.answer()).toBeUndefined();

    // Once it has held still, a press on Approve answers.
    await press(card, "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
  });

  it("a key press is not held: the focus is on the button already, put there by the person", async () => {
    const { channel, page } = await liveConsole();
    const ask = makeAsk(1);
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    await card.getByRole("button", { name: "Deny" }).focus();
    expect(await card.getAttribute("data-held")).toBe("");
    await page.keyboard.press("Enter");
    await expect(waiting.parked).resolves.toEqual({ type: "deny" });
  });
});

/** The ids of the asks the server lists as pending. */
async function fetchAsks(url: string, token: string): Promise<string[]> {
  const reply = await fetch(`${url}api/asks`, { headers: { authorization: `Bearer ${token}` } });
  const body = (await reply.json()) as { asks: { ask: PendingAsk }[] };
  return body.asks.map((view) => view.ask.id);
}

// A right-to-left override makes "gpj.exe" read as "exe.jpg"; a zero-width space splits a name
// into one that only looks the same; tag characters carry text nobody sees.
const RLO = "\u202e";
const PDF = "\u202c";
const DISGUISED = {
  tool: "dep\u200bloy",
  prompt: `Open the attachment ${RLO}gpj.exe${PDF}?\nIt is safe.\u{e0049}\u{e0047}`,
  callId: `call_${RLO}1`,
};
const SHOWN_PROMPT = "Open the attachment U+202Egpj.exeU+202C?\nIt is safe.U+E0049U+E0047";
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

describe("text that would render as something it is not", () => {
  it("invisible and direction-changing characters in an ask, a grant and a record are shown as marks naming them", async () => {
    const grants = new MemoryGrantStore();
    await grants.save(new Grant(DISGUISED.tool, "allow", GrantScope.thisCall({ file: `${RLO}gpj.exe` })));
    const records = new RecentRecords();
    records.onGate({
      turn: 0,
      callId: "c1",
      decision: gateRecord(1, { tool: DISGUISED.tool, reason: `no ${RLO}thgir` }),
    });
    const { channel, page } = await liveConsole({ grants, records });
    const ask = makeAsk(1, DISGUISED);
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    await screenshot(page, "console-hidden-characters-1280");

    const text = (selector: string) => card.locator(selector).evaluate((el) => el.textContent ?? "");
    expect(await text(".prompt")).toBe(SHOWN_PROMPT);
    expect(await text(".tool")).toBe("depU+200Bloy");
    expect(await text(".call")).toBe("call_U+202E1 (turn 1)");
    // The marks are elements of their own, so they stand out from text that merely spells "U+202E".
    expect(await card.locator(".prompt .hidden-char").allTextContents()).toEqual([
      "U+202E",
      "U+202C",
      "U+E0049",
      "U+E0047",
    ]);
    expect(await card.locator(".tool .hidden-char").allTextContents()).toEqual(["U+200B"]);
    const row = page.locator("#grants tbody tr");
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.locator("td").nth(0).textContent()).toBe("depU+200Bloy");
    expect(await row.locator("td").nth(2).textContent()).toBe('these arguments: {"file":"U+202Egpj.exe"}');
    const record = page.locator("#records tbody tr");
    await expect.poll(() => record.count()).toBe(1);
    expect(await record.locator("td").nth(1).textContent()).toBe("depU+200Bloy");
    expect(await record.locator("td").nth(4).textContent()).toBe("no U+202Ethgir");
    // Nothing invisible is left anywhere on the page, labels and announcements included.
    const everything = await page.evaluate(() => {
      const doc = (globalThis as unknown as TextGlobals).document;
      const labels = [...doc.querySelectorAll("[aria-label], [title]")].map(
        (el) => `${el.getAttribute("aria-label") ?? ""}${el.getAttribute("title") ?? ""}`,
      );
      return [doc.body.textContent ?? "", ...labels].join("\n");
    });
    expect(everything.replace(/\n/g, "")).not.toMatch(HIDDEN);
    expect(await page.locator("#announce").textContent()).toContain("depU+200Bloy");

    await press(card, "Deny");
    await expect(waiting.parked).resolves.toEqual({ type: "deny" });
  });

  it("characters that render as nothing though they are no format character are marked too, in every panel", async () => {
    // A Hangul filler reads as nothing in "deploy", and variation selectors after an emoji carry
    // a message nobody sees (one byte each, U+E0100 onwards): all are default-ignorable.
    const tool = "dep\u3164loy";
    const prompt = `Fine \u{1f600}\u{e0162}\u{e015d}\u034f?`;
    const grants = new MemoryGrantStore();
    await grants.save(new Grant(tool, "allow", GrantScope.thisTool()));
    const records = new RecentRecords();
    records.onGate({ turn: 0, callId: "c1", decision: gateRecord(1, { tool, reason: "no\ufe0f" }) });
    const { channel, page } = await liveConsole({ grants, records });
    const ask = makeAsk(1, { tool, prompt });
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    const text = (selector: string) => card.locator(selector).evaluate((el) => el.textContent ?? "");
    expect(await text(".tool")).toBe("depU+3164loy");
    expect(await text(".prompt")).toBe("Fine \u{1f600}U+E0162U+E015DU+034F?");
    const row = page.locator("#grants tbody tr");
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.locator("td").nth(0).textContent()).toBe("depU+3164loy");
    const record = page.locator("#records tbody tr");
    await expect.poll(() => record.count()).toBe(1);
    expect(await record.locator("td").nth(4).textContent()).toBe("noU+FE0F");
    const everything = await page.evaluate(() => {
      const doc = (globalThis as unknown as TextGlobals).document;
      const labels = [...doc.querySelectorAll("[aria-label], [title]")].map(
        (el) => `${el.getAttribute("aria-label") ?? ""}${el.getAttribute("title") ?? ""}`,
      );
      return [doc.body.textContent ?? "", ...labels].join("\n");
    });
    expect(everything).not.toMatch(/\p{Default_Ignorable_Code_Point}/u);
    await press(card, "Deny");
    await expect(waiting.parked).resolves.toEqual({ type: "deny" });
  });

  it("a letter of another script in a word of Latin ones, which passes for the Latin letter it copies, is marked, in every panel", async () => {
    // A Cyrillic "а" (U+0430) and "е" (U+0435), a Greek "ο" (U+03BF): "reаd_file" reads as the
    // read_file the person trusts, "pаypal.com" as the site they know. A word all of one script
    // (Russian, here) is text, not a disguise, and keeps its letters.
    const tool = "re\u0430d_file";
    const prompt =
      "Send the report to p\u0430ypal.com and g\u03bfogle.com? \u041f\u0440\u0438\u0432\u0435\u0442 d\u0435ploy.";
    const grants = new MemoryGrantStore();
    await grants.save(new Grant(tool, "allow", GrantScope.thisTool()));
    const records = new RecentRecords();
    records.onGate({ turn: 0, callId: "c1", decision: gateRecord(1, { tool }) });
    const { channel, page } = await liveConsole({ grants, records });
    const ask = makeAsk(1, { tool, prompt });
    const waiting = park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    const text = (selector: string) => card.locator(selector).evaluate((el) => el.textContent ?? "");
    expect(await text(".tool")).toBe("reU+0430d_file");
    expect(await text(".prompt")).toBe(
      "Send the report to pU+0430ypal.com and gU+03BFogle.com? \u041f\u0440\u0438\u0432\u0435\u0442 dU+0435ploy.",
    );
    expect(await card.locator(".prompt .hidden-char").allTextContents()).toEqual(["U+0430", "U+03BF", "U+0435"]);
    expect(await page.locator("#announce").textContent()).toBe(
      "New ask: reU+0430d_file: Send the report to pU+0430ypal.com and gU+03BFogle.com? \u041f\u0440\u0438\u0432\u0435\u0442 dU+0435ploy.",
    );
    const row = page.locator("#grants tbody tr");
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.locator("td").nth(0).textContent()).toBe("reU+0430d_file");
    expect(await row.getByRole("button").getAttribute("aria-label")).toBe(
      "Revoke the remembered approval for reU+0430d_file",
    );
    const record = page.locator("#records tbody tr");
    await expect.poll(() => record.count()).toBe(1);
    expect(await record.locator("td").nth(1).textContent()).toBe("reU+0430d_file");
    await press(card, "Deny");
    await expect(waiting.parked).resolves.toEqual({ type: "deny" });
    await expect.poll(() => page.locator(".notice code").first().textContent()).toBe("reU+0430d_file");
  });

  it("a signed link's confirmation page shows the same marks", async () => {
    const secret = "link-secret-for-the-browser-test";
    const { channel, server, page } = await consoleWith({ linkSecret: secret });
    const ask = makeAsk(1, DISGUISED);
    const waiting = park(channel, ask);
    const links = signAnswerLink(ask, { secret, baseUrl: server.url, ttlMs: 60_000 });
    await expect.poll(async () => (await page.goto(links.approve))?.status()).toBe(200);
    await expect.poll(() => page.locator("dd").nth(1).textContent()).toBe(SHOWN_PROMPT);
    expect(await page.locator("dd").nth(0).textContent()).toBe("depU+200Bloy");
    expect(await page.locator("dd .hidden-char").count()).toBe(5);
    expect(((await page.locator("body").textContent()) ?? "").replace(/\n/g, "")).not.toMatch(HIDDEN);
    await screenshot(page, "link-hidden-characters-1280");
    expect(waiting.answer()).toBeUndefined();
  });
});

/** The little of the page's globals the text checks read. */
interface TextGlobals {
  readonly document: {
    readonly body: { readonly textContent: string | null };
    querySelectorAll(selector: string): Iterable<{ getAttribute(name: string): string | null }>;
  };
}

/** The little of the page's globals these tests read. */
/**
 * A MemoryGrantStore gone slow (a database under load): `load` and `revoke` answer that many ms
 * late, and a revoke then still lands after the server stopped waiting for it.
 */
class SlowGrantStore extends MemoryGrantStore {
  loadDelayMs = 0;
  revokeDelayMs = 0;

  override async load(): Promise<Grant[]> {
    await new Promise((resolve) => setTimeout(resolve, this.loadDelayMs));
    return super.load();
  }

  override async revoke(id: string): Promise<Grant | undefined> {
    await new Promise((resolve) => setTimeout(resolve, this.revokeDelayMs));
    return super.revoke(id);
  }
}

/** Parks an ask on `channel` until its card shows on `page`, then withdraws it: the page reads the grants again. */
async function askEnded(channel: ApprovalChannel, page: Page, n: number) {
  const stop = new AbortController();
  const ask = makeAsk(n);
  park(channel, ask, stop.signal);
  await cardOf(page, ask).waitFor();
  stop.abort(new Error("withdrawn"));
  await cardOf(page, ask).waitFor({ state: "detached" });
}

describe("remembered answers the grant store does not give in time", () => {
  it("a reload of the grants that fails says so above them, and that they are as last read", async () => {
    const grants = new SlowGrantStore();
    const first = new Grant("deploy", "allow", GrantScope.thisTool());
    await grants.save(first);
    const { channel, server, page } = await liveConsole({ grants, grantsTimeoutMs: 300 });
    const note = page.locator("#grants-check");
    await page.locator(`#grants tbody tr[data-grant-id="${first.id}"]`).waitFor();
    expect(await note.isVisible()).toBe(false);

    // The store goes slow, and a grant is made meanwhile: the list shown is no longer what is stored.
    grants.loadDelayMs = 2_000;
    await grants.save(new Grant("delete_db", "deny", GrantScope.thisTool()));
    await askEnded(channel, page, 1);
    await expect.poll(() => note.getAttribute("data-state"), { timeout: 3_000 }).toBe("broken");
    expect(await note.isVisible()).toBe(true);
    expect(await note.getAttribute("role")).toBe("status");
    expect(await note.textContent()).toMatch(
      /^The remembered answers could not be read again \(503\): those shown are as read at .+\.$/,
    );
    expect(await page.locator("#grants tbody tr").count()).toBe(1);

    // A page opened now has read none: it does not say there are none.
    const fresh = await chromium.browser.page(1280);
    cleanups.push(() => fresh.close());
    await fresh.goto(server.consoleUrl);
    await expect
      .poll(() => fresh.locator("#grants-check").textContent(), { timeout: 3_000 })
      .toBe("The remembered answers could not be read (503).");
    expect(await fresh.locator("#grants-empty").isVisible()).toBe(false);

    // Read again: the note goes, and the list is what is stored.
    grants.loadDelayMs = 0;
    await askEnded(channel, page, 2);
    await expect.poll(() => page.locator("#grants tbody tr").count(), { timeout: 3_000 }).toBe(2);
    expect(await note.isVisible()).toBe(false);
  });

  it("a page still reading the grants from a slow store does not say there are none", async () => {
    const grants = new SlowGrantStore();
    grants.loadDelayMs = 1_500;
    const { page } = await liveConsole({ grants });
    const empty = page.locator("#grants-empty");
    expect(await empty.isVisible()).toBe(false);
    // Once read, and there are none, it says so.
    await expect.poll(() => empty.isVisible(), { timeout: 3_000 }).toBe(true);
  });

  it("a reload of the grants that gets no reply at all says so too: what is shown is as last read", async () => {
    const grants = new MemoryGrantStore();
    const grant = new Grant("deploy", "allow", GrantScope.thisTool());
    await grants.save(grant);
    const { channel, page } = await liveConsole({ grants });
    await page.locator(`#grants tbody tr[data-grant-id="${grant.id}"]`).waitFor();
    // The connection carrying the list is cut (a proxy reset): no status, no body.
    await page.route("**/api/grants", (route) => route.abort("connectionreset"));
    await askEnded(channel, page, 1);
    await expect
      .poll(() => page.locator("#grants-check").textContent(), { timeout: 3_000 })
      .toMatch(/^The remembered answers could not be read again \(no reply\): those shown are as read at .+\.$/);
    expect(await page.locator("#grants-check").isVisible()).toBe(true);
  });

  it("a list of grants that is not the server's (a proxy's JSON, 200) is not taken for one: what is shown is said to be as last read", async () => {
    const grants = new MemoryGrantStore();
    const grant = new Grant("deploy", "allow", GrantScope.thisTool());
    await grants.save(grant);
    const { channel, page } = await liveConsole({ grants });
    await page.locator(`#grants tbody tr[data-grant-id="${grant.id}"]`).waitFor();
    // A proxy in front, its own session over, answers the page's requests with JSON of its own.
    await page.route("**/api/grants", (route) =>
      route.fulfill({ status: 200, contentType: "application/json", body: '{"status":"signed_out"}' }),
    );
    await askEnded(channel, page, 1);
    await expect
      .poll(() => page.locator("#grants-check").textContent(), { timeout: 3_000 })
      .toMatch(
        /^The remembered answers could not be read again \(the reply was not the approval server's\): those shown are as read at .+\.$/,
      );
    expect(await page.locator("#grants tbody tr").count()).toBe(1);
  });

  it("a revoke the store did not confirm in time says what the server said, not that it did not happen, and the list is read again", async () => {
    const grants = new SlowGrantStore();
    const grant = new Grant("deploy", "allow", GrantScope.thisTool());
    await grants.save(grant);
    const { page } = await liveConsole({ grants, grantsTimeoutMs: 300 });
    const row = page.locator(`#grants tbody tr[data-grant-id="${grant.id}"]`);
    await row.waitFor();
    const said = await recordAnnouncements(page);

    // The revoke lands after the server stopped waiting for it; a grant made meanwhile shows once
    // the list is read again.
    grants.revokeDelayMs = 1_000;
    const other = new Grant("delete_db", "deny", GrantScope.thisTool());
    await grants.save(other);
    await row.getByRole("button", { name: /^Revoke/ }).focus();
    await page.keyboard.press("Enter");
    const told =
      "Revoke not confirmed for deploy (503): the grant store did not answer within 300 ms; the grant may be revoked still: list the grants before revoking again.";
    await expect.poll(said, { timeout: 3_000 }).toContain(told);
    expect((await said()).join("\n")).not.toMatch(/Could not revoke/);
    await page.locator(`#grants tbody tr[data-grant-id="${other.id}"]`).waitFor({ timeout: 2_000 });
    // Above the rows, where it hides none of them; the row, read again before the revoke landed, stays.
    const result = page.locator("#grants-result");
    expect(await result.textContent()).toBe(told);
    expect(await result.isVisible()).toBe(true);
    expect(await row.count()).toBe(1);
    await screenshot(page, "console-revoke-unconfirmed-1280");
    await expect.poll(async () => (await grants.load()).map((g) => g.id), { timeout: 3_000 }).toEqual([other.id]);
  });
  it("at 400 px a revoke not confirmed for a long tool name wraps above the rows: nothing overflows sideways", async () => {
    const grants = new SlowGrantStore();
    const grant = new Grant(`drop_database${"_".repeat(2_000)}`, "allow", GrantScope.thisTool());
    await grants.save(grant);
    const opened = await consoleWith({ grants, grantsTimeoutMs: 300 });
    await opened.page.setViewportSize({ width: 400, height: 900 });
    await opened.page.goto(opened.server.consoleUrl);
    const page = opened.page;
    const row = page.locator(`#grants tbody tr[data-grant-id="${grant.id}"]`);
    await row.waitFor();
    grants.revokeDelayMs = 1_000;
    await row.getByRole("button", { name: /^Revoke/ }).focus();
    await page.keyboard.press("Enter");
    await expect
      .poll(() => page.locator("#grants-result").textContent(), { timeout: 3_000 })
      .toMatch(/^Revoke not confirmed for drop_database_+… \(\d+ more characters in the row\) \(503\)/);
    expect(await overflowsSideways(page)).toBe(false);
    const box = await page.locator("#grants-result").boundingBox();
    expect(box !== null && box.x + box.width <= 400).toBe(true);
    await screenshot(page, "console-revoke-unconfirmed-400");
  });
});

describe("what became of an ask or an answer shows on the page, not only to a screen reader", () => {
  /** The page's latest notice, once it shows on the screen (within the viewport), with its text. */
  async function shownNotice(page: Page): Promise<string> {
    const notice = page.locator("#notices .notice").first();
    await notice.waitFor();
    expect(await notice.isVisible()).toBe(true);
    const box = await notice.boundingBox();
    const viewport = page.viewportSize();
    expect(box !== null && viewport !== null && box.y >= 0 && box.y + box.height <= viewport.height).toBe(true);
    return (await notice.locator(".notice-text").textContent()) ?? "";
  }

  /** The notices are read out once, by the page's one live region: they are no live region themselves. */
  async function noSecondLiveRegion(page: Page): Promise<void> {
    const live = await page.evaluate<string[]>(
      `[...document.querySelectorAll("#notices, #notices *")]
        .filter((el) => el.hasAttribute("aria-live") || ["status", "log", "alert"].includes(el.getAttribute("role")))
        .map((el) => el.outerHTML)`,
    );
    expect(live).toEqual([]);
  }

  it("an approval by pointer shows, where the pointer's buttons stay put and the focus does not go", async () => {
    const { channel, page } = await liveConsole();
    const [above, pressed] = [makeAsk(1, { tool: "read_file" }), makeAsk(2, { tool: "deploy" })];
    park(channel, above);
    const waiting = park(channel, pressed);
    await expect.poll(() => page.locator("#asks .ask").count()).toBe(2);
    await noSecondLiveRegion(page);
    const approveAbove = cardOf(page, above).getByRole("button", { name: "Approve" });
    await cardOf(page, above).and(page.locator("li:not([data-held])")).waitFor();
    const before = await approveAbove.boundingBox();
    const scrolled = await page.evaluate<number>("scrollY");
    await press(cardOf(page, pressed), "Approve");
    await expect(waiting.parked).resolves.toEqual({ type: "approve" });
    await expect.poll(() => cardOf(page, pressed).count()).toBe(0);
    expect(await shownNotice(page)).toBe("Ask for deploy ended: approved");
    expect(await page.locator("#announce").textContent()).toBe("Ask for deploy ended: approved");
    // The card above, whose Approve the pointer may go to next, has not moved for the notice.
    expect(await approveAbove.boundingBox()).toEqual(before);
    expect(await page.evaluate<number>("scrollY")).toBe(scrolled);
    expect(await page.evaluate<boolean>(`document.getElementById("notices").contains(document.activeElement)`)).toBe(
      false,
    );
    await noSecondLiveRegion(page);
  });

  it("a denial shows, the latest notice first, the ones before kept below it", async () => {
    const { channel, page } = await liveConsole();
    const first = makeAsk(1, { tool: "read_file" });
    const second = makeAsk(2, { tool: "deploy" });
    const one = park(channel, first);
    const two = park(channel, second);
    await expect.poll(() => page.locator("#asks .ask").count()).toBe(2);
    await press(cardOf(page, first), "Approve");
    await expect(one.parked).resolves.toEqual({ type: "approve" });
    expect(await shownNotice(page)).toBe("Ask for read_file ended: approved");
    await cardOf(page, second).locator(".reason").fill("not on a Friday");
    await press(cardOf(page, second), "Deny");
    await expect(two.parked).resolves.toEqual({ type: "deny", reason: "not on a Friday" });
    await expect.poll(() => page.locator("#notices .notice").count()).toBe(2);
    expect(await shownNotice(page)).toBe("Ask for deploy ended: denied");
    expect(await page.locator("#notices .notice-text").allTextContents()).toEqual([
      "Ask for deploy ended: denied",
      "Ask for read_file ended: approved",
    ]);
  });

  it("a card answered by another console shows how it ended; only the latest few notices are kept", async () => {
    const { channel, server, page } = await liveConsole();
    const box = async () => page.locator("#notices").boundingBox();
    const empty = await box();
    for (let n = 1; n <= 5; n++) {
      const ask = makeAsk(n, { tool: `deploy_${n}` });
      const waiting = park(channel, ask);
      await cardOf(page, ask).waitFor();
      const elsewhere = await fetch(`${server.url}api/asks/${ask.id}`, {
        method: "POST",
        headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" },
        body: JSON.stringify({ ask, type: n % 2 === 0 ? "deny" : "approve" }),
      });
      expect(elsewhere.status).toBe(200);
      await waiting.parked;
      await expect.poll(() => cardOf(page, ask).count()).toBe(0);
      expect(await shownNotice(page)).toBe(`Ask for deploy_${n} ended: ${n % 2 === 0 ? "denied" : "approved"}`);
    }
    expect(await page.locator("#notices .notice-text").allTextContents()).toEqual([
      "Ask for deploy_5 ended: approved",
      "Ask for deploy_4 ended: denied",
      "Ask for deploy_3 ended: approved",
    ]);
    // Its place and size are the same full as empty: nothing on the page moved for it.
    expect(await box()).toEqual(empty);
    await screenshot(page, "console-notices-1280");
  });

  it("an answer the server did not confirm, for an ask that ended meanwhile, shows what became of it once the card is gone", async () => {
    const { channel, page } = await liveConsole();
    const ask = makeAsk(1, { tool: "deploy" });
    const stop = new AbortController();
    park(channel, ask, stop.signal);
    const card = cardOf(page, ask);
    await card.waitFor();
    // The page's approval is held on its way; meanwhile the agent stops waiting, and the approver
    // then fails without saying whether the answer reached anything.
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    await page.route("**/api/asks/*", async (route) => {
      if (route.request().method() !== "POST") return route.fallback();
      await released;
      return route.fulfill({
        status: 503,
        contentType: "application/json",
        body: JSON.stringify({ error: "approver_unavailable", message: "the approver failed" }),
      });
    });
    await press(card, "Approve");
    const heard = page.waitForRequest((request) => request.url().endsWith("/api/grants"));
    stop.abort(new Error("deadline"));
    await heard;
    expect(await card.count()).toBe(1);
    release();
    await expect.poll(() => card.count()).toBe(0);
    const told =
      "Ask for deploy ended: withdrawn: the agent stopped waiting (deadline or cancel). Your answer: " +
      "Not confirmed (503): the approver failed. Try again; an answer that did arrive is not taken twice.";
    expect(await shownNotice(page)).toBe(told);
    expect(await page.locator("#announce").textContent()).toBe(told);
  });

  it("an answer not confirmed on a card that stays says so on the card, and shows", async () => {
    const { channel, page } = await liveConsole();
    const ask = makeAsk(1, { tool: "deploy" });
    park(channel, ask);
    const card = cardOf(page, ask);
    await card.waitFor();
    await page.route("**/api/asks/*", (route) =>
      route.request().method() !== "POST"
        ? route.fallback()
        : route.fulfill({
            status: 503,
            contentType: "application/json",
            body: JSON.stringify({ error: "approver_unavailable", message: "the approver failed" }),
          }),
    );
    await press(card, "Approve");
    const result = card.locator(".result");
    await expect.poll(() => result.textContent()).toContain("Not confirmed (503): the approver failed.");
    expect(await result.isVisible()).toBe(true);
  });
});

interface FocusGlobals {
  readonly document: {
    readonly activeElement: {
      readonly id: string;
      readonly textContent: string | null;
      getAttribute(name: string): string | null;
    } | null;
  };
}
