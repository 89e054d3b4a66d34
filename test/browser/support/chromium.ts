import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import type { BrowserContext, Locator, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll } from "vitest";

/** The Chromium the browser tests drive: Debian's, unless LOOPCTL_CHROMIUM names another. */
export const CHROMIUM = process.env["LOOPCTL_CHROMIUM"] ?? "/usr/bin/chromium";

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
];

/** Where the tests write their screenshots (git ignores it). */
export const SCREENSHOTS = fileURLToPath(new URL("../../../test-results/screenshots/", import.meta.url));

/** A fresh browser profile; `close()` ends the browser and removes the profile. */
export interface Browser {
  readonly context: BrowserContext;
  page(width?: number): Promise<Page>;
  close(): Promise<void>;
}

/**
 * One Chromium for the tests of a file, launched before them and closed after, and the cleanups a
 * test registers, run after it, last first.
 */
export function useBrowser(options: Parameters<typeof launch>[0] = {}): {
  readonly browser: Browser;
  readonly cleanups: (() => Promise<void> | void)[];
} {
  let browser: Browser | undefined;
  const cleanups: (() => Promise<void> | void)[] = [];
  beforeAll(async () => {
    browser = await launch(options);
  });
  afterAll(async () => {
    await browser?.close();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  return {
    get browser(): Browser {
      if (browser === undefined) throw new Error("the browser is launched before the tests, not while the file loads");
      return browser;
    },
    cleanups,
  };
}

/**
 * Starts Chromium headless with a fresh --user-data-dir. Fails with the way
 * to install Chromium when it is missing, rather than skipping.
 */
export async function launch(
  options: { javaScriptEnabled?: boolean; args?: readonly string[] } = {},
): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium was not found at ${CHROMIUM}. The browser tests drive a real Chromium through playwright-core.\n` +
        "Install it with:\n  sudo apt-get install -y chromium      (Debian, Ubuntu)\n" +
        "or set LOOPCTL_CHROMIUM to the path of a Chromium or Chrome binary, then run npm run test:browser again.",
    );
  }
  const profile = await mkdtemp(join(tmpdir(), "loopctl-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [...FLAGS, ...(options.args ?? [])],
    javaScriptEnabled: options.javaScriptEnabled ?? true,
  });
  return {
    context,
    async page(width = 1280) {
      const page = await context.newPage();
      await page.setViewportSize({ width, height: 900 });
      return page;
    },
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a full-page screenshot as test-results/screenshots/<name>.png and returns its path. */
export async function screenshot(page: Page, name: string): Promise<string> {
  await mkdir(SCREENSHOTS, { recursive: true });
  const path = join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/** The little of a page's globals the tests read, typed by hand: the project compiles without the DOM library. */
export interface PageGlobals {
  readonly document: {
    readonly documentElement: { readonly scrollWidth: number; readonly clientWidth: number };
    readonly activeElement: { readonly textContent: string | null } | null;
  };
  readonly innerWidth: number;
  readonly pwned?: unknown;
}

/** The page's layout overflows its viewport sideways: its content is wider than the room a vertical scrollbar leaves. */
export function overflowsSideways(page: Page): Promise<boolean> {
  return page.evaluate(() => {
    const root = (globalThis as unknown as PageGlobals).document.documentElement;
    return root.scrollWidth > root.clientWidth;
  });
}

/** The width in pixels of a PNG file, from its IHDR chunk. */
export async function pngWidth(path: string): Promise<number> {
  const bytes = await readFile(path);
  if (bytes.toString("latin1", 1, 4) !== "PNG") throw new Error(`${path} is not a PNG`);
  return bytes.readUInt32BE(16);
}

/** The text of the element that has the keyboard focus. */
export function focusedText(page: Page): Promise<string | null | undefined> {
  return page.evaluate(() => (globalThis as unknown as PageGlobals).document.activeElement?.textContent);
}

/**
 * Clicks the button `name` of an ask's card (`card` is the card or anything inside it) with the
 * mouse, once the card has held still: a card that moved or appeared within the last second
 * refuses a pointer press (`data-held` is set on it meanwhile). A card can still move between
 * that wait and the click (another card leaving, the window coming to the front); the page then says
 * so on the card instead of sending, and the press is made again, as a person would, up to five times.
 */
export async function press(card: Locator, name: string): Promise<void> {
  const li = card.locator("xpath=ancestor-or-self::li[contains(concat(' ', @class, ' '), ' ask ')]");
  for (let attempt = 1; ; attempt++) {
    await li.and(card.page().locator("li:not([data-held])")).waitFor();
    await card.getByRole("button", { name }).click();
    // A press that went through replaced the card's result with "Sending…" before the click returned.
    const result = await li
      .locator(".result")
      .textContent({ timeout: 1_000 })
      .catch(() => null);
    if (attempt === 5 || result === null || !result.includes("just now: look again")) return;
  }
}
