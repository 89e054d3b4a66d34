import { describe, expect, it } from "vitest";
import { PostgresAskQueue } from "loopctl/postgres";
import { createApprovalServer } from "loopctl/server";
import type { ApprovalServer } from "loopctl/server";
import { makeAsk } from "../support/ask-fixtures.js";
import { DATABASE_URL, usePostgres } from "../support/postgres.js";
import { startProxy } from "../support/tcp-proxy.js";
import { press, screenshot, useBrowser } from "./support/chromium.js";
import { startTcpProxy } from "./support/tcp-proxy.js";

// A console over a Postgres queue outlives the server it talks to: restarted, the server must
// list the asks still parked in the database before the page reads them again.

const chromium = useBrowser();
const { cleanups } = chromium;
const db = usePostgres();
/** What the page's script below uses: the tests are typed without the DOM's types. */
interface WatchGlobals {
  readonly MutationObserver: new (
    callback: (changes: readonly { readonly removedNodes: readonly { readonly nodeName: string }[] }[]) => void,
  ) => {
    observe(target: unknown, options: { readonly childList: boolean }): void;
  };
  readonly document: { getElementById(id: string): unknown };
  removedCards?: string[];
}

const TOKEN = "a-console-token-that-survives-a-restart";

describe("the console over a Postgres queue", () => {
  it("keeps a card, and the deny reason typed in it, across a restart of the server", async () => {
    const queue = (connectionString = DATABASE_URL): PostgresAskQueue => {
      const q = new PostgresAskQueue(db.newPool(4, { connectionString }), {
        schema: db.schema,
        onError: () => undefined,
      });
      cleanups.push(() => q.close());
      return q;
    };
    const worker = queue();
    const proxy = await startTcpProxy();
    cleanups.push(() => proxy.close());
    // The same token and port: the page's session cookie is the restarted server's too.
    const serve = async (port = 0, connectionString = DATABASE_URL): Promise<ApprovalServer> => {
      const server = await createApprovalServer({
        approver: queue(connectionString).approver(),
        port,
        catchUpTimeoutMs: 500,
        token: TOKEN,
        allowedHosts: [`127.0.0.1:${proxy.port}`],
      });
      cleanups.push(() => server.close());
      proxy.forwardTo(server.port);
      return server;
    };
    const before = await serve();
    const ask = makeAsk(1, { tool: "deploy", prompt: "Deploy to production?" });
    const parked = worker.resolver.resolve(ask, { signal: new AbortController().signal });
    parked.catch(() => undefined);

    const page = await chromium.browser.page(1280);
    cleanups.push(() => page.close());
    await page.goto(`http://127.0.0.1:${proxy.port}/?token=${TOKEN}`);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    const card = page.locator(`#asks .ask[data-ask-id="${ask.id}"]`);
    await card.waitFor();
    await card.locator(".reason").fill("not on a Friday");
    // Every card the page takes off the list from now on, even one it puts back at once.
    await page.evaluate(() => {
      const page = globalThis as unknown as WatchGlobals;
      const seen: string[] = [];
      page.removedCards = seen;
      new page.MutationObserver((changes) => {
        for (const change of changes) for (const node of change.removedNodes) seen.push(node.nodeName);
      }).observe(page.document.getElementById("asks"), { childList: true });
    });

    // The server goes, and a new one (another process, another queue) starts in its place, whose
    // first read of the pending asks is slow to come back: the page reconnects meanwhile.
    proxy.cut();
    await expect.poll(() => page.locator("#status").textContent()).not.toBe("Live");
    await before.close();
    const database = await startProxy(DATABASE_URL);
    cleanups.push(() => database.close());
    database.holdRepliesOn("WHERE state = 'pending' ORDER BY seq");
    await serve(before.port, database.url);
    // The page's first read of the restarted server comes while its queue has not read the asks.
    const answered = page.waitForResponse((response) => new URL(response.url()).pathname === "/api/asks", {
      timeout: 10_000,
    });
    proxy.restore();
    expect((await answered).status()).toBe(503);
    expect(database.holding).toBe(true);
    expect(await page.evaluate(() => (globalThis as unknown as WatchGlobals).removedCards)).toEqual([]);
    database.pass();
    await expect.poll(() => page.locator("#status").textContent(), { timeout: 20_000 }).toBe("Live");

    expect(await page.evaluate(() => (globalThis as unknown as WatchGlobals).removedCards)).toEqual([]);
    expect(await card.locator(".reason").inputValue()).toBe("not on a Friday");
    await press(card, "Deny");
    await expect(parked).resolves.toEqual({ type: "deny", reason: "not on a Friday" });
  });

  it("an ask that expires unanswered shows so on the page, not only to a screen reader", async () => {
    const queue = new PostgresAskQueue(db.newPool(4), { schema: db.schema, onError: () => undefined });
    cleanups.push(() => queue.close());
    const server = await createApprovalServer({ approver: queue.approver() });
    cleanups.push(() => server.close());
    const page = await chromium.browser.page(400);
    cleanups.push(() => page.close());
    await page.goto(server.consoleUrl);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    const ask = makeAsk(1, { tool: "deploy", prompt: "Deploy to production?" });
    const parked = queue.resolver.resolve(ask, { signal: AbortSignal.timeout(3_000) });
    parked.catch(() => undefined);
    const card = page.locator(`#asks .ask[data-ask-id="${ask.id}"]`);
    await card.waitFor();
    await expect(parked).rejects.toThrow();
    await expect.poll(() => card.count(), { timeout: 10_000 }).toBe(0);
    const notice = page.locator("#notices .notice").first();
    await notice.waitFor();
    expect(await notice.isVisible()).toBe(true);
    const box = await notice.boundingBox();
    expect(box !== null && box.y >= 0 && box.y + box.height <= 900 && box.x + box.width <= 400).toBe(true);
    expect(await notice.locator(".notice-text").textContent()).toBe("Ask for deploy ended: expired unanswered");
    expect(await page.locator("#announce").textContent()).toBe("Ask for deploy ended: expired unanswered");
    await screenshot(page, "console-notice-expired-400");
  });
});
