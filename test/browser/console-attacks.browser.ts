import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import { Grant, GrantScope, MemoryGrantStore } from "loopctl/grant";
import { createApprovalServer } from "loopctl/server";
import { makeAsk, track } from "../support/ask-fixtures.js";
import { useBrowser } from "./support/chromium.js";

// Another web page open in the browser of the person at the console: what it can
// make that browser do to the console it is signed in to. The hardest case is a
// page on the same host name at another port (a dev server, say): it is the
// same site, so the browser sends the SameSite=Strict cookie with its requests.

// rebind.test resolves to this machine, as a name an attacker rebinds to 127.0.0.1 would.
const chromium = useBrowser({ args: ["--host-resolver-rules=MAP rebind.test 127.0.0.1"] });
const { cleanups } = chromium;

/** A server with one parked ask and one grant, and a page signed in to its console. */
async function signedIn() {
  const [channel, approver] = ApprovalChannel.pair(8);
  const grants = new MemoryGrantStore();
  const grant = new Grant("deploy", "allow", GrantScope.thisTool());
  await grants.save(grant);
  const server = await createApprovalServer({ approver, grants });
  cleanups.push(
    () => approver.close(),
    () => server.close(),
  );
  const ask = makeAsk(1);
  const parked = track(channel.resolve(ask, { signal: new AbortController().signal }));
  const page = await chromium.browser.page(1280);
  cleanups.push(() => page.close());
  await page.goto(server.consoleUrl);
  await page.locator("#asks .ask").waitFor();
  return { server, ask, parked, grants, grant, page };
}

/** A page of `html` served at http://<host>:<its port>/, on 127.0.0.1. */
async function hostilePage(host: string, html: string): Promise<string> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(html);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return `http://${host}:${(server.address() as AddressInfo).port}/`;
}

/** What the hostile page's script left in `window.results` once it set `window.done`. */
interface Results {
  readonly done?: boolean;
  readonly results?: Record<string, unknown>;
}

describe("a hostile page in the console's browser", () => {
  for (const host of ["127.0.0.1", "localhost"]) {
    it(`on ${host} at another port reads nothing, answers nothing, revokes nothing and cannot frame the console`, async () => {
      const { server, ask, parked, grants, grant, page } = await signedIn();
      const api = `${server.url}api/`;
      const script = `
        const results = {};
        const attempt = async (name, work) => {
          try { results[name] = await work(); } catch (e) { results[name] = "refused: " + e.name; }
        };
        (async () => {
          await attempt("read asks", async () => (await fetch(${JSON.stringify(`${api}asks`)}, { credentials: "include" })).text());
          await attempt("read grants", async () => (await fetch(${JSON.stringify(`${api}grants`)}, { credentials: "include" })).text());
          await attempt("stream", () => new Promise((resolve) => {
            const source = new EventSource(${JSON.stringify(`${api}asks/stream`)}, { withCredentials: true });
            source.addEventListener("ask", (e) => resolve("heard " + e.data));
            source.onerror = () => { source.close(); resolve("refused"); };
          }));
          await attempt("answer by fetch", async () => (await fetch(${JSON.stringify(`${api}asks/${ask.id}`)}, {
            method: "POST", mode: "no-cors", credentials: "include",
            headers: { "content-type": "text/plain" }, body: JSON.stringify({ type: "approve" }),
          })).type);
          await attempt("answer as JSON", async () => (await fetch(${JSON.stringify(`${api}asks/${ask.id}`)}, {
            method: "POST", credentials: "include",
            headers: { "content-type": "application/json" }, body: JSON.stringify({ type: "approve" }),
          })).status);
          await attempt("revoke", async () => (await fetch(${JSON.stringify(`${api}grants/${grant.id}`)}, {
            method: "DELETE", credentials: "include",
          })).status);
          await attempt("script include", () => new Promise((resolve) => {
            const s = document.createElement("script");
            s.src = ${JSON.stringify(`${api}asks`)};
            s.onload = () => resolve("loaded");
            s.onerror = () => resolve("refused");
            document.body.append(s);
          }));
          window.results = results;
          window.done = true;
        })();`;
      const hostile = await hostilePage(
        host,
        `<!doctype html><body><iframe id="framed" src="${server.url}"></iframe>` +
          `<form id="form" method="post" enctype="text/plain" target="sink" action="${api}asks/${ask.id}">` +
          `<input name='{"type":"approve","x":"' value='"}'></form><iframe name="sink"></iframe>` +
          `<script>${script}</script></body>`,
      );
      const attacker = await chromium.browser.page(1280);
      cleanups.push(() => attacker.close());
      await attacker.goto(hostile);
      await expect.poll(() => attacker.evaluate(() => (globalThis as unknown as Results).done)).toBe(true);
      const results = await attacker.evaluate(() => (globalThis as unknown as Results).results);
      expect(results).toEqual({
        "read asks": "refused: TypeError",
        "read grants": "refused: TypeError",
        stream: "refused",
        // Cross-Origin-Resource-Policy hides even the fact of a reply; the request itself got 403.
        "answer by fetch": "refused: TypeError",
        "answer as JSON": "refused: TypeError",
        revoke: "refused: TypeError",
        "script include": "refused",
      });
      // A plain form needs no script and no CORS: the browser posts it with the cookie when same-site.
      const posted = attacker.waitForResponse((r) => r.url().startsWith(`${api}asks/`));
      await attacker.evaluate(() =>
        (globalThis as unknown as { document: { getElementById(id: string): { submit(): void } } }).document
          .getElementById("form")
          .submit(),
      );
      expect([403, 401]).toContain((await posted).status());
      // The console never loaded inside the hostile page.
      const framed = attacker.frames().find((frame) => frame.url().startsWith(server.url));
      expect(framed === undefined || (await framed.locator("#asks").count()) === 0).toBe(true);

      expect(parked.outcome.state).toBe("pending");
      expect((await grants.load()).map((g) => g.id)).toEqual([grant.id]);
      // The console itself still works, signed in.
      expect(await page.locator("#status").textContent()).toBe("Live");
    });
  }

  it("a name rebound to this machine gets 421 for the console, the API and the stream, token or not", async () => {
    const { server, ask, parked } = await signedIn();
    const rebound = `http://rebind.test:${server.port}/`;
    const page = await chromium.browser.page(1280);
    cleanups.push(() => page.close());
    for (const path of [`?token=${server.token}`, "", "api/asks", "api/asks/stream"]) {
      const response = await page.goto(`${rebound}${path}`);
      expect(response?.status(), path).toBe(421);
      expect(await page.content(), path).not.toContain(ask.id);
    }
    const status = await page.evaluate(
      async (url) =>
        (await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" })).status,
      `${rebound}api/asks/x`,
    );
    expect(status).toBe(421);
    expect(parked.outcome.state).toBe("pending");
  });
});

describe("the console link opened from another site", () => {
  it("a click on it in a chat or mail page signs in: the console loads live, the token gone from the address bar", async () => {
    const [channel, approver] = ApprovalChannel.pair(8);
    const server = await createApprovalServer({ approver });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const parked = track(channel.resolve(makeAsk(1), { signal: new AbortController().signal }));
    const chat = await hostilePage("localhost", `<!doctype html><a id="go" href="${server.consoleUrl}">console</a>`);
    const page = await chromium.browser.page(1280);
    cleanups.push(() => page.close());
    await page.goto(chat);
    await page.click("#go");
    await expect
      .poll(
        () =>
          page
            .locator("#status")
            .textContent({ timeout: 500 })
            .catch(() => null),
        { timeout: 10_000 },
      )
      .toBe("Live");
    await page.locator("#asks .ask").waitFor();
    expect(page.url()).toBe(server.url);
    // Back goes to the chat, not to the address with the token in it.
    await page.goBack();
    expect(page.url()).toBe(chat);
    expect(parked.outcome.state).toBe("pending");
  });
});
