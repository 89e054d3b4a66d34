import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import type { AskResolution } from "loopctl/ask";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import type { Hook } from "loopctl/engine";
import { FileGrantStore, Grant, GrantScope, MemoryGrantStore } from "loopctl/grant";
import { RecentRecords, createApprovalServer, signAnswerLink } from "loopctl/server";
import { ScriptedModel } from "loopctl/testing";
import { makeAsk } from "../support/ask-fixtures.js";
import { gateRecord } from "../support/cli-audit-fixtures.js";
import { focusedText, launch, overflowsSideways, pngWidth, press, screenshot, useBrowser } from "./support/chromium.js";
import type { PageGlobals } from "./support/chromium.js";
import { startTcpProxy } from "./support/tcp-proxy.js";
import { consoleInExpress } from "./support/express-console.js";

const chromium = useBrowser();
const { cleanups } = chromium;
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-console-browser-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const deploy = defineTool({
  name: "deploy",
  description: "Deploy a version to an environment",
  input: z.object({ env: z.string(), version: z.string() }),
  execute: ({ env, version }) => `deployed ${version} to ${env}`,
});
const askToDeploy: Hook = {
  preToolUse: (call) => {
    const input = call.input as { env: string; version: string };
    return { type: "ask", prompt: `Deploy ${input.version} to ${input.env}?` };
  },
};

describe("the console in Chromium", () => {
  it("an ask appears live, is approved with 'always this tool', the run finishes, the grant shows and is revoked", async () => {
    const store = new FileGrantStore(join(dir, "grants"), join(dir, "project"));
    const records = new RecentRecords();
    const [channel, approver] = ApprovalChannel.pair(8);
    const server = await createApprovalServer({
      approver,
      grants: store,
      records,
      describeTool: (name) => (name === "deploy" ? deploy.descriptor : undefined),
      askTimeoutMs: 600_000,
    });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );

    const page = await chromium.browser.page(1280);
    await page.goto(server.consoleUrl);
    // The token was exchanged for the cookie: it is not in the address bar.
    expect(page.url()).toBe(server.url);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    expect(await page.locator("#asks-empty").isVisible()).toBe(true);

    // The run starts after the page loaded: the ask must arrive without a reload.
    const agent = new Agent({
      model: new ScriptedModel([
        { toolCalls: [{ id: "c1", name: "deploy", input: { env: "staging", version: "1.4.0" } }] },
        { toolCalls: [{ id: "c2", name: "deploy", input: { env: "production", version: "1.4.0" } }] },
        { text: "done" },
      ]),
      tools: [deploy],
      managers: new LoopManagers()
        .withHook(askToDeploy)
        .withAskResolver(channel)
        .withGrantStore(store)
        .withObserver(records),
    });
    const run = agent.run("ship 1.4.0");
    const card = page.getByRole("article", { name: "deploy" });
    await card.waitFor();
    expect(await card.locator(".prompt").textContent()).toBe("Deploy 1.4.0 to staging?");
    expect(await card.locator(".digest").textContent()).toMatch(/^[0-9a-f]{16}$/);
    expect(await card.locator(".age").textContent()).toMatch(/^parked \d+ s ago$/);
    expect(await card.locator(".left").textContent()).toMatch(/^(9 min \d+|10 min 0) s left$/);
    expect(await page.locator("#ask-count").textContent()).toBe("1");
    expect(await pngWidth(await screenshot(page, "console-ask-1280"))).toBe(1280);
    expect(await overflowsSideways(page)).toBe(false);
    await page.setViewportSize({ width: 400, height: 900 });
    expect(await pngWidth(await screenshot(page, "console-ask-400"))).toBe(400);
    expect(await overflowsSideways(page)).toBe(false);
    await page.setViewportSize({ width: 1280, height: 900 });

    await card.getByLabel("Always for this tool").check();
    await press(card, "Approve");
    // The grant makes the second deploy run without an ask.
    const result = await run;
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["ask_allowed", "ask"],
      ["allow", "grant"],
    ]);
    expect(await page.locator("#asks .ask").count()).toBe(0);

    const grantRow = page.locator("#grants tbody tr");
    await expect.poll(() => grantRow.count()).toBe(1);
    expect(await grantRow.locator("td").nth(0).textContent()).toBe("deploy");
    expect(await grantRow.locator("td").nth(2).textContent()).toBe("this tool, any arguments");
    expect(await grantRow.locator("td").nth(3).textContent()).toBe("matches the tool");
    await expect.poll(() => page.locator("#records tbody tr").count()).toBe(2);
    expect(await page.locator("#records tbody tr").first().locator("td").nth(2).textContent()).toBe("allow");
    expect(await pngWidth(await screenshot(page, "console-grants-1280"))).toBe(1280);
    expect(await overflowsSideways(page)).toBe(false);
    await page.setViewportSize({ width: 400, height: 900 });
    expect(await pngWidth(await screenshot(page, "console-grants-400"))).toBe(400);
    expect(await overflowsSideways(page)).toBe(false);

    await grantRow.and(page.locator("tr:not([data-held])")).waitFor();
    await page.getByRole("button", { name: "Revoke the remembered approval for deploy" }).click();
    await expect.poll(() => grantRow.count()).toBe(0);
    expect(await page.locator("#grants-empty").isVisible()).toBe(true);
    expect(await store.load()).toEqual([]);
  });

  it("renders a hostile ask as text: no element, no script, no request", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = await createApprovalServer({ approver });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const page = await chromium.browser.page(1280);
    const requests: string[] = [];
    page.on("request", (r) => requests.push(r.url()));
    const dialogs: string[] = [];
    page.on("dialog", (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    await page.goto(server.consoleUrl);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");

    const prompt = `<img src=x onerror="window.pwned=1;alert('xss')"><script>window.pwned=2</script>`;
    const tool = `<b onmouseover=alert(1)>deploy</b>`;
    const parked = channel.resolve(makeAsk(1, { tool, prompt }), { signal: new AbortController().signal });
    const card = page.locator("#asks .ask");
    await card.waitFor();
    expect(await card.locator(".prompt").textContent()).toBe(prompt);
    expect(await card.locator(".tool").textContent()).toBe(tool);
    expect(await page.locator("#asks img, #asks script, #asks b").count()).toBe(0);
    await card.locator(".prompt").hover();
    expect(await page.evaluate(() => (globalThis as unknown as PageGlobals).pwned)).toBeUndefined();
    expect(dialogs).toEqual([]);
    expect(requests.filter((url) => url.endsWith("/x"))).toEqual([]);
    await screenshot(page, "console-hostile-1280");

    // Deny it from the keyboard alone: the reason field, then Tab to Deny and press Enter.
    await card.getByLabel("Reason, if you deny").fill("not from a stranger");
    await page.keyboard.press("Enter");
    expect(await page.locator("#asks .ask").count()).toBe(1);
    await page.keyboard.press("Tab");
    expect(await focusedText(page)).toBe("Approve");
    await page.keyboard.press("Tab");
    expect(await focusedText(page)).toBe("Deny");
    await page.keyboard.press("Enter");
    await expect(parked).resolves.toEqual({ type: "deny", reason: "not from a stranger" });
  });

  it("removes an ask that ends elsewhere and says how, and counts its time left", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = await createApprovalServer({ approver, askTimeoutMs: 45_000 });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const page = await chromium.browser.page(400);
    await page.goto(server.consoleUrl);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    const stop = new AbortController();
    const parked = channel.resolve(makeAsk(1), { signal: stop.signal });
    const card = page.locator("#asks .ask");
    await card.waitFor();
    expect(await card.locator(".left").textContent()).toMatch(/^4\d s left$/);
    expect(await card.locator(".left").getAttribute("class")).not.toContain("soon");
    stop.abort(new Error("deadline"));
    await expect(parked).rejects.toThrow("deadline");
    await expect.poll(() => card.count()).toBe(0);
    expect(await page.locator("#announce").textContent()).toContain("the agent stopped waiting");
    expect(await page.locator("#asks-empty").isVisible()).toBe(true);
  });

  it("at 400 and 1280 px wide nothing overflows sideways, even long unbroken text in every panel; screenshots at both widths", async () => {
    const store = new FileGrantStore(join(dir, "grants-wide"), join(dir, "project-wide"));
    const long = `https://example.com/${"averylongpathsegmentwithnobreakopportunity".repeat(6)}`;
    await store.save(new Grant("deploy", "allow", GrantScope.thisCall({ url: long, env: "production" })));
    await store.save(new Grant(`tool_${"x".repeat(80)}`, "deny", GrantScope.thisTool()));
    const records = new RecentRecords();
    records.onGate({
      turn: 1,
      callId: "c1",
      decision: gateRecord(1, { tool: `tool_${"y".repeat(80)}`, reason: long }),
    });
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = await createApprovalServer({ approver, grants: store, records, askTimeoutMs: 600_000 });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const parked = channel.resolve(
      makeAsk(1, { tool: `mcp__${"z".repeat(80)}`, prompt: `Fetch ${long}?`, callId: `call_${"9".repeat(60)}` }),
      {
        signal: new AbortController().signal,
      },
    );
    parked.catch(() => undefined);
    channel.resolve(makeAsk(2), { signal: new AbortController().signal }).catch(() => undefined);

    for (const width of [400, 1280]) {
      const page = await chromium.browser.page(width);
      await page.goto(server.consoleUrl);
      await expect.poll(() => page.locator("#asks .ask").count()).toBe(2);
      await expect.poll(() => page.locator("#grants tbody tr").count()).toBe(2);
      await expect.poll(() => page.locator("#records tbody tr").count()).toBe(1);
      expect(await overflowsSideways(page), `${width} px`).toBe(false);
      const path = await screenshot(page, `console-long-${width}`);
      expect(await pngWidth(path)).toBe(width);
      await page.close();
    }
  });

  it("every text in color reads at a contrast of at least 4.5:1 on what is behind it, in light and dark mode", async () => {
    const grants = new MemoryGrantStore();
    await grants.save(new Grant("deploy", "allow", GrantScope.thisTool()));
    await grants.save(new Grant("drop_db", "deny", GrantScope.thisTool()));
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = await createApprovalServer({ approver, grants });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    channel
      .resolve(makeAsk(1, { tool: "dep\u200bloy" }), { signal: new AbortController().signal })
      .catch(() => undefined);
    // The warning a card shows once the page loses touch, the answers remembered, a hidden character's mark.
    const texts = [
      ".stale-note",
      ".overflow-note",
      ".verdict.good",
      ".verdict.bad",
      ".hidden-char",
      "button.approve",
      "button.deny",
      ".row-note",
    ];
    for (const colorScheme of ["light", "dark"] as const) {
      const page = await chromium.browser.page(1280);
      cleanups.push(() => page.close());
      await page.emulateMedia({ colorScheme });
      await page.goto(server.consoleUrl);
      await page.locator("#asks .ask").waitFor();
      await expect.poll(() => page.locator("#grants tbody tr").count()).toBe(2);
      const ratios = await page.evaluate<Record<string, number>>(
        `((selectors) => {
          const luminance = (color) => {
            const [r, g, b] = color.match(/[0-9.]+/g).map(Number).map((v) => {
              const c = v / 255;
              return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
            });
            return 0.2126 * r + 0.7152 * g + 0.0722 * b;
          };
          const behind = (el) => {
            for (let at = el; at; at = at.parentElement) {
              const color = getComputedStyle(at).backgroundColor;
              if (color !== "rgba(0, 0, 0, 0)") return color;
            }
            return "rgb(255, 255, 255)";
          };
          const ratios = {};
          for (const selector of selectors) {
            const el = document.querySelector(selector);
            const [a, b] = [luminance(getComputedStyle(el).color), luminance(behind(el))];
            ratios[selector] = Math.round(((Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)) * 100) / 100;
          }
          return ratios;
        })(${JSON.stringify(texts)})`,
      );
      for (const selector of texts) {
        expect(ratios[selector], `${selector} in ${colorScheme} mode`).toBeGreaterThanOrEqual(4.5);
      }
    }
  });

  it("after the event stream drops and reconnects, pending asks stay as they were (no duplicates); what ended meanwhile goes, what came shows", async () => {
    const proxy = await startTcpProxy();
    const [channel, approver] = ApprovalChannel.pair(8);
    const server = await createApprovalServer({
      approver,
      grants: new MemoryGrantStore(),
      allowedHosts: [`127.0.0.1:${proxy.port}`],
    });
    proxy.forwardTo(server.port);
    cleanups.push(
      () => approver.close(),
      () => server.close(),
      () => proxy.close(),
    );
    const page = await chromium.browser.page(1280);
    await page.goto(`http://127.0.0.1:${proxy.port}/?token=${server.token}`);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");

    const signal = new AbortController().signal;
    const [first, second, third] = [
      makeAsk(1, { prompt: "first" }),
      makeAsk(2, { prompt: "second" }),
      makeAsk(3, { prompt: "third" }),
    ];
    const parkedFirst = channel.resolve(first, { signal });
    const parkedSecond = channel.resolve(second, { signal });
    const cards = page.locator("#asks .ask");
    await expect.poll(() => cards.count()).toBe(2);
    const kept = page.locator(`#asks .ask[data-ask-id="${second.id}"]`);
    await kept.getByLabel("Reason, if you deny").fill("typed before the drop");
    await kept.getByLabel("For these exact arguments").check();

    proxy.cut();
    await expect.poll(() => page.locator("#status").textContent()).not.toBe("Live");
    // While the page cannot hear: one ask ends, another arrives.
    expect(approver.resolve(first.id, { type: "approve" })).toBe(true);
    await expect(parkedFirst).resolves.toEqual({ type: "approve" });
    const parkedThird = channel.resolve(third, { signal });
    parkedThird.catch(() => undefined);
    proxy.restore();

    await expect.poll(() => page.locator("#status").textContent(), { timeout: 20_000 }).toBe("Live");
    await expect
      .poll(() =>
        cards.evaluateAll((els) => els.map((el) => (el as unknown as { dataset: { askId: string } }).dataset.askId)),
      )
      .toEqual([second.id, third.id]);
    expect(await page.locator("#ask-count").textContent()).toBe("2");
    // The card of the ask still pending is the same one: what was typed and chosen in it is still there.
    expect(await kept.getByLabel("Reason, if you deny").inputValue()).toBe("typed before the drop");
    expect(await kept.getByLabel("For these exact arguments").isChecked()).toBe(true);

    // A second drop with nothing changed: still one card per ask.
    proxy.cut();
    await expect.poll(() => page.locator("#status").textContent()).not.toBe("Live");
    proxy.restore();
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 20_000 }).toBe("Live");
    await expect.poll(() => page.locator(`#asks .ask[data-ask-id="${third.id}"]`).count()).toBe(1);
    expect(await cards.count()).toBe(2);

    await press(kept, "Deny");
    await expect(parkedSecond).resolves.toMatchObject({ type: "deny", reason: "typed before the drop" });
  });

  it("many asks at once cost each card its own times, not every card's again: the page keeps up with a burst", async () => {
    const [channel, approver] = ApprovalChannel.pair(1000);
    const server = await createApprovalServer({ approver });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const page = await chromium.browser.page(1280);
    cleanups.push(() => page.close());
    // Every time a card's age is written, from the page's first script on.
    await page.addInitScript(`(() => {
      window.ageWrites = 0;
      new MutationObserver((changes) => {
        for (const change of changes) if (change.target.classList?.contains("age")) window.ageWrites += 1;
      }).observe(document, { subtree: true, childList: true });
    })()`);
    await page.goto(server.consoleUrl);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    const n = 200;
    const start = performance.now();
    for (let i = 0; i < n; i++) {
      void channel.resolve(makeAsk(i), { signal: new AbortController().signal }).catch(() => undefined);
    }
    await expect.poll(() => page.locator("#asks .ask").count(), { timeout: 30_000 }).toBe(n);
    const seconds = Math.ceil((performance.now() - start) / 1000);
    // Each card's age written once as it comes, then once a second for every card: not every
    // card's again at each new one (n * n / 2 writes, the page frozen for seconds).
    expect(await page.evaluate<number>("window.ageWrites")).toBeLessThanOrEqual(n + (seconds + 1) * n);
  });

  it("mounted under a path in an Express app, the console works from the path without its trailing slash, its cookie scoped to that path", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const grants = new MemoryGrantStore();
    await grants.save(new Grant("deploy", "allow", GrantScope.thisTool()));
    const { port, handler, closers } = await consoleInExpress(
      { approver, grants, records: { recent: () => [gateRecord(0)] } },
      (app, mounted) => {
        app.use("/tools/approvals", mounted.handle);
        // Another app on the same host: what cookies the browser sends it.
        app.get("/tools/other", (req, res) => res.type("text/plain").send(req.headers.cookie ?? ""));
      },
    );
    cleanups.push(() => approver.close(), ...closers);
    const page = await chromium.browser.page(1280);
    await page.goto(`http://127.0.0.1:${port}/tools/approvals?token=${handler.token}`);
    expect(page.url()).toBe(`http://127.0.0.1:${port}/tools/approvals/`);
    await page.goto(`http://127.0.0.1:${port}/tools/approvals`);
    expect(page.url()).toBe(`http://127.0.0.1:${port}/tools/approvals/`);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    // Cookies ignore ports: the other tests' servers left theirs (Path=/) in this browser.
    const session = (await chromium.browser.context.cookies()).filter(
      (cookie) => cookie.name.startsWith("loopctl_session_") && cookie.path !== "/",
    );
    expect(session.map((cookie) => cookie.path)).toEqual(["/tools/approvals/"]);
    const sent = `${session[0]?.name ?? "none"}=${session[0]?.value ?? "none"}`;

    // Every route the page calls gets the cookie: the asks, their stream, grants, records, an answer, a revoke.
    await expect.poll(() => page.locator("#records tbody tr").count()).toBe(1);
    const grantRow = page.locator("#grants tbody tr");
    await expect.poll(() => grantRow.count()).toBe(1);
    const parked = channel.resolve(makeAsk(1, { tool: "deploy" }), { signal: new AbortController().signal });
    const card = page.getByRole("article", { name: "deploy" });
    await card.waitFor();
    await press(card, "Approve");
    await expect(parked).resolves.toEqual({ type: "approve" });
    // The answered card leaves, and the grants table moves up: a press on a row that just moved is
    // refused by design. Pressed once the card is gone, the page has seen the move, and the row is still.
    await card.waitFor({ state: "detached" });
    await page.evaluate(() => {
      const frame = (globalThis as unknown as { requestAnimationFrame(callback: () => void): number })
        .requestAnimationFrame;
      return new Promise<void>((resolve) => frame(() => frame(() => resolve())));
    });
    await grantRow.and(page.locator("tr:not([data-held])")).waitFor();
    await page.getByRole("button", { name: "Revoke the remembered approval for deploy" }).click();
    // A revoke and the reload of the list after it: two requests, on a machine busy with other tests.
    await expect.poll(() => grantRow.count(), { timeout: 5_000 }).toBe(0);
    expect(await grants.load()).toEqual([]);
    expect(await page.locator("#status").textContent()).toBe("Live");

    // The app beside it on the same host never receives the console's cookie.
    const other = await page.goto(`http://127.0.0.1:${port}/tools/other`);
    expect(other?.status()).toBe(200);
    expect(await other?.text()).not.toContain(sent);
  });

  it("a signed link's confirmation page works without JavaScript, and only its button answers", async () => {
    const secret = "link-secret-for-the-browser-test";
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = await createApprovalServer({ approver, linkSecret: secret });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const ask = makeAsk(1, { tool: "deploy", prompt: "Deploy <b>1.4.0</b> to production?" });
    let answer: AskResolution | undefined;
    void channel.resolve(ask, { signal: new AbortController().signal }).then((r) => (answer = r));
    const noScript = await launch({ javaScriptEnabled: false });
    cleanups.push(() => noScript.close());
    const page = await noScript.page(400);
    const links = signAnswerLink(ask, { secret, baseUrl: server.url, ttlMs: 60_000 });
    await expect.poll(async () => (await page.goto(links.approve))?.status()).toBe(200);
    expect(await page.locator("h1").textContent()).toBe("Approve this call?");
    expect(await page.locator("dd").nth(1).textContent()).toBe("Deploy <b>1.4.0</b> to production?");
    await screenshot(page, "link-confirm-400");
    expect(await overflowsSideways(page)).toBe(false);
    expect(answer).toBeUndefined();
    await page.getByRole("button", { name: "Approve" }).click();
    await page.waitForURL(links.approve);
    expect(await page.locator("h1").textContent()).toBe("Approved");
    await expect.poll(() => answer).toEqual({ type: "approve" });
    // The same link again: it already answered.
    const again = await page.goto(links.approve);
    expect(again?.status()).toBe(409);
  });
});
