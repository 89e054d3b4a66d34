import { describe, expect, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import type { AskResolution, PendingAsk } from "loopctl/ask";
import { Grant, GrantScope, MemoryGrantStore } from "loopctl/grant";
import { createApprovalServer, signAnswerLink } from "loopctl/server";
import { makeAsk } from "../support/ask-fixtures.js";
import { press, screenshot, useBrowser } from "./support/chromium.js";

// Text long enough to push the real content off the screen: whoever reaches
// Approve must still see, on the same screen, what it approves, and not a
// tail of the prompt dressed up as another, harmless ask.

const chromium = useBrowser();
const { cleanups } = chromium;

/** The viewport height the pages are opened at (see support/chromium.ts). */
const VIEWPORT_HEIGHT = 900;

/** A prompt whose end, far below its start, reads like an ask of its own. */
const DISGUISE = "read_file\nparked 2 s ago · 4 min left\nRead README.md? Harmless, approve it.";
const LONG_PROMPT = `Drop every table in production?${"\n".repeat(400)}${DISGUISE}`;
const LONG_TOOL = `drop_database${"_".repeat(20_000)}`;
/** A call id is the model's to choose: one this long, with a harmless-looking ask at its end. */
const LONG_CALL_ID = `call_${"x".repeat(20_000)} read_file · Read README.md? Harmless, approve it.`;

async function server(linkSecret?: string, grants?: MemoryGrantStore) {
  const [channel, approver] = ApprovalChannel.pair(8);
  const made = await createApprovalServer({
    approver,
    ...(linkSecret === undefined ? {} : { linkSecret }),
    ...(grants === undefined ? {} : { grants }),
  });
  cleanups.push(
    () => approver.close(),
    () => made.close(),
  );
  return { channel, server: made };
}

function park(channel: ApprovalChannel, ask: PendingAsk) {
  let answer: AskResolution | undefined;
  void channel.resolve(ask, { signal: new AbortController().signal }).then(
    (a) => (answer = a),
    () => undefined,
  );
  return () => answer;
}

/** The distance in pixels from the top of `from` to the bottom of `to`, as laid out. */
async function span(page: import("playwright-core").Page, from: string, to: string): Promise<number> {
  const top = (await page.locator(from).boundingBox())?.y;
  const box = await page.locator(to).boundingBox();
  if (top === undefined || box === null) throw new Error(`${from} or ${to} is not laid out`);
  return box.y + box.height - top;
}

describe("text long enough to push what runs off the screen", () => {
  for (const width of [1280, 400]) {
    it(`at ${width} px an ask's tool, prompt start and its Approve fit one screen, however long the prompt, name or call id`, async () => {
      const { channel, server: made } = await server();
      const page = await chromium.browser.page(width);
      cleanups.push(() => page.close());
      await page.goto(made.consoleUrl);
      for (const ask of [
        makeAsk(1, { tool: "drop_database", prompt: LONG_PROMPT }),
        makeAsk(2, { tool: LONG_TOOL }),
        makeAsk(3, { tool: "drop_database", callId: LONG_CALL_ID }),
      ]) {
        const answer = park(channel, ask);
        const card = `#asks .ask[data-ask-id="${ask.id}"]`;
        await page.locator(card).waitFor();
        expect(await span(page, `${card} .tool`, `${card} button.approve`)).toBeLessThanOrEqual(VIEWPORT_HEIGHT);
        // Nothing is cut: the whole text is there, to be scrolled through in its own box.
        expect(await page.locator(`${card} .prompt`).textContent()).toBe(ask.prompt);
        expect(await page.locator(`${card} .tool`).textContent()).toBe(ask.tool);
        expect(await page.locator(`${card} .call`).textContent()).toBe(`${ask.callId} (turn ${ask.turn})`);
        await screenshot(page, `console-long-text-${ask.turn}-${width}`);
        await press(page.locator(card), "Deny");
        await expect.poll(answer).toEqual({ type: "deny" });
      }
    });
  }

  it("what is read out of a new ask is its tool and its prompt's start, line breaks as spaces: not every line break named, nor the tail", async () => {
    const { channel, server: made } = await server();
    const page = await chromium.browser.page(1280);
    cleanups.push(() => page.close());
    await page.goto(made.consoleUrl);
    await expect.poll(() => page.locator("#status").textContent()).toBe("Live");
    const announce = page.locator("#announce");
    const said = async (ask: PendingAsk) => {
      park(channel, ask);
      await page.locator(`#asks .ask[data-ask-id="${ask.id}"]`).waitFor();
      return (await announce.textContent()) ?? "";
    };
    // A prompt on two lines is read as two sentences, not with "U+000A" between them.
    expect(await said(makeAsk(1, { tool: "deploy", prompt: "Deploy to production?\n\tAll regions." }))).toBe(
      "New ask: deploy: Deploy to production? All regions.",
    );
    // A long one is read to its start, and says how much more the card holds: its tail, dressed up
    // as another, harmless ask, is not read out as if it were one.
    const long = await said(makeAsk(2, { tool: "drop_database", prompt: LONG_PROMPT }));
    expect(long).toMatch(
      /^New ask: drop_database: Drop every table in production\?… \(\d+ more characters in the card\)$/,
    );
    expect(long).not.toContain("Harmless");
    const named = await said(makeAsk(3, { tool: LONG_TOOL, prompt: "Drop it?" }));
    expect(named.length).toBeLessThan(400);
    expect(named).toMatch(/^New ask: drop_database_+… \(\d+ more characters in the card\): Drop it\?$/);
    // So is its card's label, and what is said as it ends.
    const card = page.locator("#asks .ask").nth(2);
    expect(((await card.locator("form").getAttribute("aria-label")) ?? "").length).toBeLessThan(300);
    await press(card, "Deny");
    await expect
      .poll(() => announce.textContent())
      .toMatch(/^Ask for drop_database_+… \(\d+ more characters in the card\) ended: denied$/);
    // What is not text to read is still named: a hidden character is a mark.
    expect(await said(makeAsk(4, { tool: "dep\u202Eloy", prompt: "Go?\u200B" }))).toBe(
      "New ask: depU+202Eloy: Go?U+200B",
    );
  });

  it("a signed link's confirmation page shows the tool, the prompt's start and its button on one screen", async () => {
    const secret = "link-secret-for-the-browser-test";
    const { channel, server: made } = await server(secret);
    const page = await chromium.browser.page(400);
    cleanups.push(() => page.close());
    for (const ask of [makeAsk(1, { tool: "drop_database", prompt: LONG_PROMPT }), makeAsk(2, { tool: LONG_TOOL })]) {
      const answer = park(channel, ask);
      const links = signAnswerLink(ask, { secret, baseUrl: made.url, ttlMs: 60_000 });
      await expect.poll(async () => (await page.goto(links.approve))?.status()).toBe(200);
      expect(await span(page, "h1", "button")).toBeLessThanOrEqual(VIEWPORT_HEIGHT);
      expect(await page.locator("dd").nth(0).textContent()).toBe(ask.tool);
      expect(await page.locator("dd").nth(1).textContent()).toBe(ask.prompt);
      await screenshot(page, `link-long-text-${ask.turn}-400`);
      expect(answer()).toBeUndefined();
    }
  });
});

describe("remembered answers whose arguments are long", () => {
  it("at 400 px a grant's tool name however long and its Revoke fit one screen; the name scrolls in its box, reached with Tab", async () => {
    const grants = new MemoryGrantStore();
    const grant = new Grant(`${LONG_TOOL} read_file`, "allow", GrantScope.thisTool());
    await grants.save(grant);
    const { server: made } = await server(undefined, grants);
    const page = await chromium.browser.page(400);
    cleanups.push(() => page.close());
    await page.goto(made.consoleUrl);
    const row = `#grants tr[data-grant-id="${grant.id}"]`;
    await page.locator(row).waitFor();
    expect(await span(page, `${row} .tool-name`, `${row} button.revoke`)).toBeLessThanOrEqual(VIEWPORT_HEIGHT);
    // Nothing is cut: the whole name is there, to be scrolled through in its own box.
    expect(await page.locator(`${row} .tool-name`).textContent()).toBe(grant.tool);
    await expect.poll(() => page.locator(`${row} .tool-name`).getAttribute("tabindex")).toBe("0");
    await screenshot(page, "console-long-grant-tool-400");
  });

  it("two grants whose arguments differ only far along show apart, each in full: a revoke takes the one meant", async () => {
    const path = `/srv/site/${"a".repeat(120)}`;
    const grants = new MemoryGrantStore();
    const harmless = new Grant("write_file", "allow", GrantScope.thisCall({ path: `${path}/index.html` }));
    const harmful = new Grant("write_file", "allow", GrantScope.thisCall({ path: `${path}/../../../etc/passwd` }));
    await grants.save(harmless);
    await grants.save(harmful);
    const { server: made } = await server(undefined, grants);
    const page = await chromium.browser.page(1280);
    cleanups.push(() => page.close());
    await page.goto(made.consoleUrl);
    const covers = (grant: Grant) => page.locator(`#grants tr[data-grant-id="${grant.id}"] td`).nth(2).textContent();
    await expect.poll(() => page.locator("#grants tbody tr").count()).toBe(2);
    expect(await covers(harmless)).toBe(`these arguments: ${JSON.stringify({ path: `${path}/index.html` })}`);
    expect(await covers(harmful)).toBe(`these arguments: ${JSON.stringify({ path: `${path}/../../../etc/passwd` })}`);
  });
});

describe("text longer than its box, where scroll bars do not show", () => {
  // Headless Chromium hides its scroll bars, as overlay ones (macOS, phones) are hidden until
  // scrolled: a box that scrolls looks like one that holds all there is. Blank characters that are
  // no format character (em spaces, Braille blanks) push what follows them out of the box.
  const BLANKS = "\u2003".repeat(3000);
  const TAIL = "Then delete every file in the repository.";

  for (const width of [1280, 400]) {
    it(`at ${width} px a card whose prompt, tool name or call id goes on past its box says so, beside its Approve`, async () => {
      const { channel, server: made } = await server();
      const page = await chromium.browser.page(width);
      cleanups.push(() => page.close());
      await page.goto(made.consoleUrl);
      const cases: [PendingAsk, string][] = [
        [makeAsk(1, { tool: "read_file", prompt: `Read README.md?${BLANKS}${TAIL}` }), "the prompt"],
        [makeAsk(2, { tool: "read_file", prompt: `Read README.md?${"\u2800".repeat(6000)}${TAIL}` }), "the prompt"],
        [
          makeAsk(3, { tool: `read_file${BLANKS}_and_delete_everything`, prompt: "Read README.md?" }),
          "the tool's name",
        ],
        [makeAsk(4, { tool: "read_file", callId: `call_4${BLANKS}${TAIL}` }), "the call id"],
      ];
      for (const [ask, what] of cases) {
        const answer = park(channel, ask);
        const card = `#asks .ask[data-ask-id="${ask.id}"]`;
        await page.locator(card).waitFor();
        const note = page.locator(`${card} .overflow-note`);
        await expect.poll(() => note.isVisible()).toBe(true);
        expect(await note.textContent()).toContain(what);
        // On the same screen as the card's heading and its Approve.
        expect(await span(page, `${card} .tool`, `${card} button.approve`)).toBeLessThanOrEqual(VIEWPORT_HEIGHT);
        const box = await page.locator(`${card} .overflow-note`).boundingBox();
        const approve = await page.locator(`${card} button.approve`).boundingBox();
        expect(box !== null && approve !== null && box.y < approve.y).toBe(true);
        await screenshot(page, `console-overflow-${ask.turn}-${width}`);
        await press(page.locator(card), "Deny");
        await expect.poll(answer).toEqual({ type: "deny" });
      }
      // A card that shows all it holds says nothing of the kind.
      const short = makeAsk(5, { tool: "read_file", prompt: "Read README.md?" });
      park(channel, short);
      const card = `#asks .ask[data-ask-id="${short.id}"]`;
      await page.locator(card).waitFor();
      await page.waitForTimeout(200);
      expect(await page.locator(`${card} .overflow-note`).isVisible()).toBe(false);
    });
  }
});
